use super::*;
use crate::record::{Comm, Event, EventChunkEncoder};
use crate::{LostCounts, ThreadInfo, TraceHeader, Trailer};

/// Hands out its bytes a few at a time, as a pipe or a slow disk may, so every path that
/// buffers is also taken with reads that end anywhere.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.step).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

#[derive(Debug)]
struct Outcome {
    chunks: Vec<(u64, ChunkKind, Vec<u8>)>,
    end: Option<End>,
    skipped: Vec<Skipped>,
}

fn read_with<R: Read>(input: R, salvage: bool) -> Result<Outcome> {
    let mut r = Reader::with_options(input, ReadOptions { salvage })?;
    let mut chunks = vec![];
    while let Some(c) = r.next_chunk()? {
        chunks.push((c.offset, c.kind, c.payload));
    }
    // The end of the stream is sticky.
    assert!(r.next_chunk()?.is_none());
    assert_eq!(
        r.truncated_at(),
        match r.end() {
            Some(End::Torn { offset }) => Some(offset),
            _ => None,
        }
    );
    Ok(Outcome {
        chunks,
        end: r.end(),
        skipped: r.skipped().to_vec(),
    })
}

/// Reads `bytes` whole and a few bytes at a time; both must agree.
fn read(bytes: &[u8], salvage: bool) -> Result<Outcome> {
    let whole = read_with(bytes, salvage);
    for step in [1, 7] {
        let trickled = read_with(Trickle { bytes, step }, salvage);
        assert_eq!(
            format!("{whole:?}"),
            format!("{trickled:?}"),
            "reads of {step} bytes differ"
        );
    }
    whole
}

fn events(cpu: u32, n: u64, t0: u64) -> Vec<u8> {
    let mut enc = EventChunkEncoder::new(cpu);
    for i in 0..n {
        let e = match i % 4 {
            0 => Event::SysEnter {
                nr: 0,
                arg0: 3,
                arg2: 4096,
            },
            1 => Event::SysExit { nr: 0, ret: 512 },
            2 => Event::Switch {
                next_tid: 7,
                prev_state: 1,
            },
            _ => Event::Rename {
                comm: Comm::from_str_lossy("worker"),
            },
        };
        enc.push(t0 + i * 1000, 100 + cpu, &e);
    }
    enc.finish()
}

/// A small file with every kind of chunk a recorder writes.
fn sample(version: u32, events_per_chunk: u64) -> Vec<u8> {
    let mut w = Writer::with_version(Vec::new(), version).unwrap();
    let header = TraceHeader {
        tracer_version: "0.1.0".into(),
        hostname: "h".into(),
        cpus: 2,
        clock: "CLOCK_MONOTONIC".into(),
        mode: "record".into(),
        ..Default::default()
    };
    w.meta(ChunkKind::Header, &header).unwrap();
    let threads = vec![ThreadInfo {
        tgid: 100,
        tid: 100,
        name: "main".into(),
        state: 'S',
        host_tid: None,
    }];
    w.meta(ChunkKind::Threads, &threads).unwrap();
    for (i, cpu) in [0, 1, 0].into_iter().enumerate() {
        let t0 = 1_000_000 + i as u64 * 10_000_000;
        w.chunk(ChunkKind::Events, &events(cpu, events_per_chunk, t0))
            .unwrap();
    }
    let lost = LostCounts {
        at_ns: 5,
        per_cpu: vec![0, 1],
        ..Default::default()
    };
    w.meta(ChunkKind::Lost, &lost).unwrap();
    w.meta(
        ChunkKind::Trailer,
        &Trailer {
            end_ns: 9,
            reason: "signal".into(),
            ..Default::default()
        },
    )
    .unwrap();
    w.into_inner()
}

/// (offset, end) of each chunk of an intact file.
fn extents(bytes: &[u8]) -> Vec<(u64, u64)> {
    let mut r = Reader::new(bytes).unwrap();
    let mut v = vec![];
    while let Some(c) = r.next_chunk().unwrap() {
        v.push((c.offset, r.position()));
    }
    assert_eq!(r.end(), Some(End::Complete));
    v
}

fn is_one_line_error(e: &Error) -> bool {
    let s = e.to_string();
    matches!(
        e,
        Error::Corrupt { .. } | Error::BadMagic | Error::Version(_)
    ) && !s.contains('\n')
}

#[test]
fn round_trip() {
    let bytes = sample(2, 8);
    let o = read(&bytes, false).unwrap();
    let kinds: Vec<_> = o.chunks.iter().map(|c| c.1).collect();
    use ChunkKind::*;
    assert_eq!(
        kinds,
        [Header, Threads, Events, Events, Events, Lost, Trailer]
    );
    assert_eq!(o.end, Some(End::Complete));
    assert!(o.skipped.is_empty());
    assert_eq!(o.chunks[2].2, events(0, 8, 1_000_000));
}

#[test]
fn header_layout_is_as_documented() {
    let mut w = Writer::new(Vec::new()).unwrap();
    w.chunk(ChunkKind::Events, b"abc").unwrap();
    let b = w.into_inner();
    assert_eq!(&b[..8], b"TRACEBPF");
    assert_eq!(word(&b, 8), FORMAT_VERSION);
    let h = &b[12..32];
    assert_eq!(h[..4], SYNC);
    assert_eq!(word(h, 4), 5);
    assert_eq!(word(h, 8), 3);
    assert_eq!(word(h, 12), crc32fast::hash(b"abc"));
    assert_eq!(word(h, 16), crc32fast::hash(&h[..16]));
    assert_eq!(&b[32..], b"abc");
    assert_eq!(CHUNK_HEADER_LEN, 20);
}

/// Checks one damaged copy: an error that says so in one line, or exactly the original
/// chunks. A read that succeeds with less (the defect of issue #13) fails the test. With
/// salvage, the only chunk missing is the damaged one, listed as skipped.
fn check_damaged(orig: &Outcome, ext: &[(u64, u64)], bad: &[u8], at: usize) {
    match read(bad, false) {
        Err(e) => assert!(is_one_line_error(&e), "byte {at}: {e:?}"),
        Ok(o) => {
            assert_eq!(o.chunks, orig.chunks, "byte {at}: read back differently");
            assert_eq!(o.end, Some(End::Complete), "byte {at}");
        }
    }
    if at < 12 {
        return;
    }
    let o = read(bad, true).unwrap_or_else(|e| panic!("salvage, byte {at}: {e}"));
    let hit = ext
        .iter()
        .position(|&(s, e)| (s..e).contains(&(at as u64)))
        .unwrap();
    let mut expect = orig.chunks.clone();
    expect.remove(hit);
    assert_eq!(o.chunks, expect, "salvage, byte {at}");
    assert_eq!(o.end, Some(End::Complete), "salvage, byte {at}");
    assert_eq!(o.skipped.len(), 1, "salvage, byte {at}: {:?}", o.skipped);
    let s = &o.skipped[0];
    let (start, end) = ext[hit];
    assert_eq!(
        (s.offset, s.bytes, s.chunks),
        (start, end - start, 1),
        "byte {at}"
    );
    let payload_hit = at as u64 >= start + CHUNK_HEADER_LEN as u64;
    assert_eq!(
        s.kind,
        payload_hit.then_some(orig.chunks[hit].1),
        "byte {at}"
    );
}

#[test]
fn every_byte_flipped_is_an_error_or_harmless() {
    let bytes = sample(2, 8);
    let orig = read(&bytes, false).unwrap();
    let ext = extents(&bytes);
    for at in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0xff;
        check_damaged(&orig, &ext, &bad, at);
    }
}

#[test]
fn every_bit_flipped_is_an_error_or_harmless() {
    let bytes = sample(2, 2);
    let orig = read(&bytes, false).unwrap();
    let ext = extents(&bytes);
    for at in 0..bytes.len() {
        for bit in 0..8 {
            let mut bad = bytes.clone();
            bad[at] ^= 1 << bit;
            check_damaged(&orig, &ext, &bad, at);
        }
    }
}

#[test]
fn every_truncation_reads_the_complete_chunks_and_says_where_it_was_torn() {
    for version in [1, 2, 3] {
        let bytes = sample(version, 8);
        let orig = read(&bytes, false).unwrap();
        let ext = extents(&bytes);
        for cut in 12..=bytes.len() {
            for salvage in [false, true] {
                let o = read(&bytes[..cut], salvage).unwrap();
                let complete = ext.iter().filter(|e| e.1 <= cut as u64).count();
                assert_eq!(o.chunks, orig.chunks[..complete], "v{version} cut {cut}");
                let end = if cut == 12 || ext.iter().any(|e| e.1 == cut as u64) {
                    End::Complete
                } else {
                    End::Torn {
                        offset: ext[complete].0,
                    }
                };
                assert_eq!(o.end, Some(end), "v{version} cut {cut}");
                assert!(o.skipped.is_empty());
            }
        }
    }
}

#[test]
fn zeros_after_the_last_chunk_are_a_torn_tail() {
    let bytes = sample(2, 8);
    let orig = read(&bytes, false).unwrap();
    for zeros in [1, 3, 4, 19, 20, 21, 100, 4096, 10_000, 70_000] {
        let mut b = bytes.clone();
        b.resize(bytes.len() + zeros, 0);
        for salvage in [false, true] {
            let o = read(&b, salvage).unwrap();
            assert_eq!(o.chunks, orig.chunks, "{zeros} zeros");
            let offset = bytes.len() as u64;
            assert_eq!(o.end, Some(End::Torn { offset }), "{zeros} zeros");
            assert!(o.skipped.is_empty());
        }
    }
}

/// A file whose last chunk spans several pages, and the offsets of that chunk.
fn big_last_chunk() -> (Vec<u8>, u64, u64) {
    let mut b = sample(2, 8);
    let last = b.len() as u64;
    let mut w = Writer::new(Vec::new()).unwrap();
    w.chunk(ChunkKind::Events, &events(1, 3000, 7)).unwrap();
    b.extend_from_slice(&w.into_inner()[12..]);
    assert!(b.len() > 5 * 4096);
    let end = b.len() as u64;
    (b, last, end)
}

#[test]
fn zeros_from_a_page_boundary_inside_the_last_chunk_are_a_torn_tail() {
    let (bytes, last, end) = big_last_chunk();
    let orig = read(&bytes, false).unwrap();
    let mut page = last.next_multiple_of(4096);
    while page < end {
        for extra in [0, 1, 5000] {
            let mut b = bytes.clone();
            b[page as usize..].fill(0);
            b.resize(b.len() + extra, 0);
            for salvage in [false, true] {
                let o = read(&b, salvage).unwrap();
                assert_eq!(
                    o.chunks,
                    orig.chunks[..orig.chunks.len() - 1],
                    "page {page}"
                );
                assert_eq!(o.end, Some(End::Torn { offset: last }), "page {page}");
                assert!(o.skipped.is_empty());
            }
        }
        page += 4096;
    }
}

#[test]
fn zeros_from_a_page_boundary_over_the_last_two_chunks_are_a_torn_tail() {
    // A crash can lose several pages, so the zeros can start in the chunk before the last.
    let (mut bytes, last, _) = big_last_chunk();
    let next = bytes.len() as u64;
    let mut w = Writer::new(Vec::new()).unwrap();
    w.chunk(ChunkKind::Events, &events(0, 3000, 9)).unwrap();
    bytes.extend_from_slice(&w.into_inner()[12..]);
    let orig = read(&bytes, false).unwrap();
    let page = (next - 100) / 4096 * 4096;
    assert!(page > last + 20);
    bytes[page as usize..].fill(0);
    for salvage in [false, true] {
        let o = read(&bytes, salvage).unwrap();
        assert_eq!(o.chunks, orig.chunks[..orig.chunks.len() - 2]);
        assert_eq!(o.end, Some(End::Torn { offset: last }));
    }
}

#[test]
fn zeros_from_a_page_boundary_inside_the_last_header_are_a_torn_tail() {
    // Pad the first chunk so the second (and last) chunk's header straddles a page.
    let mut w = Writer::new(Vec::new()).unwrap();
    w.chunk(ChunkKind::Threads, &vec![b' '; 4096 - 12 - 20 - 8])
        .unwrap();
    w.chunk(ChunkKind::Trailer, b"{}").unwrap();
    let bytes = w.into_inner();
    let last = 4096 - 8;
    assert_eq!(extents(&bytes)[1].0, last);
    let mut b = bytes.clone();
    b[4096..].fill(0);
    for salvage in [false, true] {
        let o = read(&b, salvage).unwrap();
        assert_eq!(o.chunks.len(), 1);
        assert_eq!(o.end, Some(End::Torn { offset: last }));
    }
}

#[test]
fn zeros_followed_by_data_are_damage() {
    let bytes = sample(2, 8);
    let ext = extents(&bytes);
    let mut b = bytes.clone();
    b.resize(bytes.len() + 5000, 0);
    b.push(1);
    let e = read(&b, false).unwrap_err();
    assert!(is_one_line_error(&e), "{e}");
    assert!(e.to_string().contains("then data"), "{e}");
    // Salvage: the zeros and the byte after them are one skipped region.
    let o = read(&b, true).unwrap();
    assert_eq!(o.chunks.len(), ext.len());
    assert_eq!(o.end, Some(End::Complete));
    let s = &o.skipped[..];
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].offset, s[0].bytes), (bytes.len() as u64, 5001));

    // Zeros over the second half of a chunk that is not the last.
    let mut b = bytes.clone();
    let (start, end) = ext[3];
    b[(start + end) as usize / 2..end as usize].fill(0);
    assert!(matches!(read(&b, false), Err(Error::Corrupt { offset, .. }) if offset == start));

    // Zeros to the end of the last chunk from where no page starts before its end.
    let (bytes, last, end) = big_last_chunk();
    let mut b = bytes.clone();
    let page = (end - 1) / 4096 * 4096;
    assert!(page > last + CHUNK_HEADER_LEN as u64);
    b[page as usize] = 0xab;
    b[page as usize + 1..].fill(0);
    assert!(matches!(read(&b, false), Err(Error::Corrupt { offset, .. }) if offset == last));
}

/// A file of many small chunks: a header, then Events chunks of 4 CPUs in turn.
fn many_chunks() -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut w = Writer::new(Vec::new()).unwrap();
    w.meta(ChunkKind::Header, &TraceHeader::default()).unwrap();
    for i in 0..40u64 {
        w.chunk(
            ChunkKind::Events,
            &events((i % 4) as u32, 20, i * 1_000_000),
        )
        .unwrap();
    }
    w.meta(ChunkKind::Trailer, &Trailer::default()).unwrap();
    let b = w.into_inner();
    let ext = extents(&b);
    (b, ext)
}

#[test]
fn salvage_skips_a_chunk_whose_payload_is_damaged_and_says_what_it_held() {
    let (bytes, ext) = many_chunks();
    let orig = read(&bytes, false).unwrap();
    let mut b = bytes.clone();
    let k = 10;
    b[ext[k].0 as usize + 40] ^= 0x10;
    let err = read(&b, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "corrupt chunk at byte {}: payload checksum mismatch",
            ext[k].0
        )
    );
    let o = read(&b, true).unwrap();
    let mut expect = orig.chunks.clone();
    expect.remove(k);
    assert_eq!(o.chunks, expect);
    assert_eq!(o.end, Some(End::Complete));
    assert_eq!(
        o.skipped,
        [Skipped {
            offset: ext[k].0,
            bytes: ext[k].1 - ext[k].0,
            chunks: 1,
            kind: Some(ChunkKind::Events),
            cpu: Some((k - 1) as u32 % 4),
            first_ts: Some((k as u64 - 1) * 1_000_000),
        }]
    );
}

#[test]
fn salvage_resynchronizes_after_damaged_headers() {
    let (bytes, ext) = many_chunks();
    let orig = read(&bytes, false).unwrap();
    // A damaged length in chunk 5 and a damaged kind in chunk 6 (sync markers intact),
    // a damaged sync marker in chunk 20: three regions, four chunks lost.
    let mut b = bytes.clone();
    b[ext[5].0 as usize + 9] ^= 0x01;
    b[ext[6].0 as usize + 4] ^= 0x04;
    b[ext[20].0 as usize] ^= 0x80;
    b[ext[30].0 as usize + 16] ^= 0x02;
    let err = read(&b, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "corrupt chunk at byte {}: header checksum mismatch",
            ext[5].0
        )
    );
    let o = read(&b, true).unwrap();
    let lost = [5, 6, 20, 30];
    let expect: Vec<_> = (0..orig.chunks.len())
        .filter(|i| !lost.contains(i))
        .map(|i| orig.chunks[i].clone())
        .collect();
    assert_eq!(o.chunks, expect);
    let region = |a: usize, b: usize, chunks| Skipped {
        offset: ext[a].0,
        bytes: ext[b].1 - ext[a].0,
        chunks,
        kind: None,
        cpu: None,
        first_ts: None,
    };
    assert_eq!(
        o.skipped,
        [region(5, 6, 2), region(20, 20, 1), region(30, 30, 1)]
    );
    assert_eq!(o.end, Some(End::Complete));
}

#[test]
fn salvage_steps_over_a_run_of_garbage_across_chunks() {
    let (bytes, ext) = many_chunks();
    let orig = read(&bytes, false).unwrap();
    let mut b = bytes.clone();
    // From inside chunk 12's payload to inside chunk 15's: 12 checks its header only,
    // 13 to 15 are gone without a trace.
    let from = ext[12].0 as usize + 30;
    let to = ext[15].0 as usize + 25;
    b[from..to].fill(0xa5);
    let o = read(&b, true).unwrap();
    let expect: Vec<_> = (0..orig.chunks.len())
        .filter(|i| !(12..=15).contains(i))
        .map(|i| orig.chunks[i].clone())
        .collect();
    assert_eq!(o.chunks, expect);
    assert_eq!(o.skipped.len(), 2);
    assert_eq!(o.skipped[0].offset, ext[12].0);
    assert_eq!(o.skipped[0].kind, Some(ChunkKind::Events));
    assert_eq!(
        (o.skipped[1].offset, o.skipped[1].bytes, o.skipped[1].chunks),
        (ext[13].0, ext[15].1 - ext[13].0, 1)
    );
}

#[test]
fn salvage_of_damage_up_to_the_end() {
    let (bytes, ext) = many_chunks();
    let last = *ext.last().unwrap();
    let mut b = bytes.clone();
    b[last.0 as usize + 2] ^= 0xff;
    let o = read(&b, true).unwrap();
    assert_eq!(o.chunks.len(), ext.len() - 1);
    assert_eq!(o.end, Some(End::Complete));
    assert_eq!(o.skipped.len(), 1);
    assert_eq!(
        (o.skipped[0].offset, o.skipped[0].bytes),
        (last.0, last.1 - last.0)
    );
    // Damage, then a torn chunk: the torn one is a torn tail.
    let mut b = bytes[..last.0 as usize + 10].to_vec();
    b[ext[ext.len() - 2].0 as usize + 5] ^= 0xff;
    let o = read(&b, true).unwrap();
    assert_eq!(o.chunks.len(), ext.len() - 2);
    assert_eq!(o.end, Some(End::Torn { offset: last.0 }));
    assert_eq!(o.skipped.len(), 1);
}

#[test]
fn salvage_of_garbage_full_of_sync_markers_is_linear_and_counts_them() {
    let mut w = Writer::new(Vec::new()).unwrap();
    w.chunk(ChunkKind::Header, b"{}").unwrap();
    let mut b = w.into_inner();
    let start = b.len() as u64;
    for i in 0..200_000u32 {
        b.extend_from_slice(&SYNC);
        b.push(i as u8);
    }
    let mut w = Writer::new(Vec::new()).unwrap();
    w.chunk(ChunkKind::Trailer, b"{}").unwrap();
    let garbage_end = b.len() as u64;
    b.extend_from_slice(&w.into_inner()[12..]);
    let o = read_with(&b[..], true).unwrap();
    assert_eq!(o.chunks.len(), 2);
    assert_eq!(
        (o.skipped[0].offset, o.skipped[0].bytes, o.skipped[0].chunks),
        (start, garbage_end - start, 200_000)
    );
}

#[test]
fn a_length_beyond_the_file_is_a_torn_tail_not_an_allocation() {
    let mut b = sample(2, 1);
    let last = b.len() as u64;
    b.extend_from_slice(&header_v2(5, MAX_CHUNK, 0));
    b.extend_from_slice(&[1, 2, 3]);
    let o = read(&b, false).unwrap();
    assert_eq!(o.end, Some(End::Torn { offset: last }));
    // One more than the limit is damage, even with a header checksum that holds.
    let mut b = sample(2, 1);
    b.extend_from_slice(&header_v2(5, MAX_CHUNK + 1, 0));
    let e = read(&b, false).unwrap_err();
    assert!(e.to_string().contains("impossible chunk header"), "{e}");
}

#[test]
fn version_1_files_still_read() {
    // Built by hand, as the version 1 recorder wrote them.
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    for (kind, payload) in [(1u32, &b"{}"[..]), (5, &events(0, 3, 10)[..])] {
        let len = payload.len() as u32;
        b.extend_from_slice(&kind.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&checksum_v1(kind, len, payload).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(payload);
    }
    assert_eq!(b, {
        let mut w = Writer::with_version(Vec::new(), 1).unwrap();
        w.chunk(ChunkKind::Header, b"{}").unwrap();
        w.chunk(ChunkKind::Events, &events(0, 3, 10)).unwrap();
        w.into_inner()
    });
    let r = Reader::new(&b[..]).unwrap();
    assert_eq!(r.version(), 1);
    let o = read(&b, false).unwrap();
    assert_eq!(o.chunks.len(), 2);
    assert_eq!(o.chunks[1].2, events(0, 3, 10));
    assert_eq!(o.end, Some(End::Complete));
    // Damage is still an error (version 1 has no sync marker to salvage with).
    let mut bad = b.clone();
    let n = bad.len();
    bad[n - 3] ^= 0x40;
    for salvage in [false, true] {
        let e = read(&bad, salvage).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    }
    let full = sample(1, 8);
    assert_eq!(read(&full, false).unwrap().chunks.len(), 7);
}

#[test]
fn not_a_trace() {
    assert!(matches!(
        Reader::new(&b"hello world, this is text"[..]),
        Err(Error::BadMagic)
    ));
    assert!(matches!(Reader::new(&b""[..]), Err(Error::BadMagic)));
    for v in [0u32, FORMAT_VERSION + 1, u32::MAX] {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&v.to_le_bytes());
        let e = Reader::new(&b[..]).err().unwrap();
        assert!(matches!(e, Error::Version(x) if x == v));
        assert!(is_one_line_error(&e));
    }
    assert!(Writer::with_version(Vec::new(), FORMAT_VERSION + 1).is_err());
}
