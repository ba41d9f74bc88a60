//! The trace file's readers: the container, the Events payload decoder and the JSON
//! metadata.

use std::io::Read;

use serde::{de::DeserializeOwned, Serialize};
use trace_file::record::Comm;
use trace_file::{
    Chunk, ChunkKind, End, Error, Event, EventChunkDecoder, EventChunkEncoder, LostCounts, Probe,
    ProcessInfo, ReadOptions, Reader, Record, Skipped, StackTable, StatWindow, ThreadInfo,
    TraceHeader, Trailer,
};
use trace_merge::stacks::StackStore;

/// The chunk reader over arbitrary bytes, strict and salvaging: it must never panic, hang
/// or allocate beyond the input, and what it returns must be consistent.
pub fn container(data: &[u8]) {
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
}

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
                assert!(!(salvage && version >= 2), "salvage failed: {s}");
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
    if c.kind == ChunkKind::Events {
        if let Ok(d) = EventChunkDecoder::new(&c.payload, c.offset) {
            for r in d {
                if r.is_err() {
                    break;
                }
            }
        }
    }
}

/// The Events payload decoder over arbitrary bytes: it must return errors, never panic or
/// overflow, and what it decodes must encode back to the same records.
pub fn events(data: &[u8]) {
    let Ok(d) = EventChunkDecoder::new(data, 0) else {
        return;
    };
    assert!(d.remaining() as usize <= data.len() / 4);
    let cpu = d.cpu();
    let mut records: Vec<Record> = Vec::new();
    for r in d {
        match r {
            Ok(r) => {
                assert!(r.event.kind_index() < Event::KINDS);
                records.push(r);
            }
            Err(e) => {
                crate::one_line(&e);
                return;
            }
        }
    }
    let mut enc = EventChunkEncoder::new(cpu);
    for r in &records {
        enc.push(r.ts, r.tid, &r.event);
    }
    let payload = enc.finish();
    let back: Vec<Record> = EventChunkDecoder::new(&payload, 0)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(back.len(), records.len());
    for (a, b) in back.iter().zip(&records) {
        assert_eq!((a.ts, a.tid, a.cpu), (b.ts, b.tid, b.cpu));
        assert_eq!(a.event, normalize(b.event));
    }
}

/// A name as the encoder writes it: up to its first NUL.
fn norm(c: Comm) -> Comm {
    let mut out = [0u8; 16];
    let n = c.0.iter().position(|&b| b == 0).unwrap_or(16);
    out[..n].copy_from_slice(&c.0[..n]);
    Comm(out)
}

fn normalize(e: Event) -> Event {
    match e {
        Event::NewTask {
            child_tid,
            child_tgid,
            comm,
        } => Event::NewTask {
            child_tid,
            child_tgid,
            comm: norm(comm),
        },
        Event::Rename { comm } => Event::Rename { comm: norm(comm) },
        Event::Exec { comm } => Event::Exec { comm: norm(comm) },
        e => e,
    }
}

/// Every JSON metadata chunk type over arbitrary bytes (the `Stacks` chunk's table too):
/// decoding returns errors, never panics, and what decodes encodes back to the same
/// value.
pub fn meta(data: &[u8]) {
    let c = Chunk {
        kind: ChunkKind::Header,
        offset: 12,
        payload: data.to_vec(),
    };
    check::<TraceHeader>(&c);
    check::<ProcessInfo>(&c);
    check::<Vec<ThreadInfo>>(&c);
    check::<Vec<Probe>>(&c);
    check::<LostCounts>(&c);
    check::<Trailer>(&c);
    check::<StatWindow>(&c);
    if let Some(t) = check::<StackTable>(&c) {
        stack_store(t);
    }
}

/// A `Stacks` chunk's table as the readers keep it (`trace_merge::stacks::StackStore`),
/// asked what names each frame of its stacks: whatever the ids, addresses and ranges, an
/// answer is one the table holds.
fn stack_store(t: StackTable) {
    let mut store = StackStore::default();
    let stacks = t.stacks.clone();
    store.absorb(t);
    for s in &stacks {
        assert!(store.stack(s.id).is_some());
        for &a in s.user.iter().take(64) {
            if let Some(m) = store.mapping(s.tgid, a) {
                assert!(m.start <= a && a < m.end);
            }
        }
        for &a in s.kernel.iter().take(64) {
            if let Some(k) = store.kernel_symbol(a) {
                assert!(k.addr <= a && a < k.end);
            }
        }
    }
}

/// Decodes `c` as a `T`: an error is one line; a value encodes back to itself.
fn check<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(c: &Chunk) -> Option<T> {
    match c.meta::<T>() {
        Ok(v) => {
            let json = serde_json::to_vec(&v).unwrap();
            let again = Chunk {
                kind: c.kind,
                offset: c.offset,
                payload: json,
            };
            assert_eq!(again.meta::<T>().unwrap(), v);
            Some(v)
        }
        Err(e) => {
            crate::one_line(&e);
            None
        }
    }
}
