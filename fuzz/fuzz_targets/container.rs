//! The chunk reader over arbitrary bytes, strict and salvaging: it must never panic, hang
//! or allocate beyond the input, and what it returns must be consistent.

#![no_main]

use std::io::Read;

use libfuzzer_sys::fuzz_target;
use trace_file::{Chunk, End, Error, EventChunkDecoder, ReadOptions, Reader, Skipped};

/// Hands out the input a few bytes at a time, so buffering across reads is exercised.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.step).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

type Outcome = (
    Vec<(u64, Vec<u8>)>,
    Option<End>,
    Vec<Skipped>,
    Option<String>,
);

fn read<R: Read>(input: R, salvage: bool, len: usize) -> Option<Outcome> {
    let mut r = match Reader::with_options(input, ReadOptions { salvage }) {
        Ok(r) => r,
        Err(e) => {
            assert!(matches!(e, Error::BadMagic | Error::Version(_)), "{e}");
            return None;
        }
    };
    let version = r.version();
    let mut chunks = vec![];
    let mut error = None;
    loop {
        match r.next_chunk() {
            Ok(Some(c)) => {
                decode(&c);
                chunks.push((c.offset, c.payload));
            }
            Ok(None) => break,
            Err(e) => {
                let s = e.to_string();
                assert!(!s.contains('\n'), "{s}");
                assert!(matches!(e, Error::Corrupt { .. }), "{s}");
                assert!(!(salvage && version == 2), "salvage failed: {s}");
                error = Some(s);
                break;
            }
        }
    }
    assert!(r.next_chunk().unwrap().is_none());
    let end = r.end();
    assert_eq!(end.is_some(), error.is_none());
    if let Some(End::Torn { offset }) = end {
        assert!(offset <= len as u64);
    }
    // Chunks and skipped regions lie inside the file, in order, without overlapping.
    let header = if version == 1 { 16 } else { 20 };
    let mut spans: Vec<(u64, u64)> = chunks
        .iter()
        .map(|(o, p)| (*o, o + header + p.len() as u64))
        .chain(r.skipped().iter().map(|s| (s.offset, s.offset + s.bytes)))
        .collect();
    spans.sort();
    let mut at = 12;
    for (start, stop) in spans {
        assert!(start >= at && stop > start && stop <= len as u64);
        at = stop;
    }
    for s in r.skipped() {
        assert!(s.chunks >= 1 && salvage);
    }
    Some((chunks, end, r.skipped().to_vec(), error))
}

fn decode(c: &Chunk) {
    if c.kind == trace_file::ChunkKind::Events {
        if let Ok(d) = EventChunkDecoder::new(&c.payload, c.offset) {
            for r in d {
                if r.is_err() {
                    break;
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let strict = read(data, false, data.len());
    let salvaged = read(data, true, data.len());
    // Salvage differs from a strict read only where the strict read failed.
    if let (Some(s), Some(v)) = (&strict, &salvaged) {
        if s.3.is_none() {
            assert_eq!(s, v);
        } else {
            assert!(v.0.starts_with(&s.0));
        }
    }
    // The same bytes in small reads give the same answer.
    let step = 1 + data.first().map_or(0, |b| *b as usize % 13);
    let trickled = read(Trickle { bytes: data, step }, true, data.len());
    assert_eq!(salvaged, trickled);
});
