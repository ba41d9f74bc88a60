//! Reading speed of format version 2 against version 1: the same synthetic trace (20 M
//! records by default, in the recorder's 256 KiB Events chunks) written both ways in
//! memory, then read and decoded whole, alternating versions over several rounds.
//!
//! `cargo run --release -p trace-file --example read_bench [-- RECORDS ROUNDS]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use trace_file::{
    ChunkKind, Event, EventChunkDecoder, EventChunkEncoder, Reader, TraceHeader, Writer,
};

/// What the recorder fills an Events chunk to before it writes it.
const CHUNK_BYTES: usize = 256 << 10;
const CPUS: u32 = 4;

/// xorshift: the same trace every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A server-like mix: system calls in pairs, switches and wakeups, probed calls.
fn event(r: u64, i: u64) -> Event {
    match i % 10 {
        0 | 1 => Event::SysEnter {
            nr: (r % 64) as u32,
            arg0: 3 + r % 20,
            arg2: 4096,
        },
        2 | 3 => Event::SysExit {
            nr: (r % 64) as u32,
            ret: (r % 9000) as i64 - 10,
        },
        4 => Event::Switch {
            next_tid: 1000 + (r % 64) as u32,
            prev_state: [0, 1, 2][(r % 3) as usize],
        },
        5 => Event::Wakeup {
            wakee: 1000 + (r % 64) as u32,
            target_cpu: (r % 4) as u32,
            new: false,
        },
        6 | 7 => Event::FuncEntry {
            func: 1 + (r % 30) as u32,
        },
        _ => Event::FuncExit {
            func: 1 + (r % 30) as u32,
            ret: r % 3,
        },
    }
}

/// The Events payloads of `records` records, chunked as the recorder chunks them.
fn payloads(records: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut enc: Vec<EventChunkEncoder> = (0..CPUS).map(EventChunkEncoder::new).collect();
    let mut out = vec![];
    let mut ts = 1_000_000_000u64;
    for i in 0..records {
        let r = rng.next();
        ts += 200 + r % 800;
        let cpu = ((r >> 32) % CPUS as u64) as usize;
        enc[cpu].push(ts, 1000 + (r >> 40) as u32 % 64, &event(r >> 8, i));
        if enc[cpu].encoded_bytes() >= CHUNK_BYTES {
            out.push(enc[cpu].finish());
        }
    }
    for e in &mut enc {
        if !e.is_empty() {
            out.push(e.finish());
        }
    }
    out
}

fn file(version: u32, payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut w = Writer::with_version(Vec::new(), version).unwrap();
    w.meta(ChunkKind::Header, &TraceHeader::default()).unwrap();
    for p in payloads {
        w.chunk(ChunkKind::Events, p).unwrap();
    }
    w.into_inner()
}

/// Reads and decodes every record; returns the count and a value that depends on all.
fn read_all(bytes: &[u8]) -> (u64, u64) {
    let mut r = Reader::new(bytes).unwrap();
    let (mut n, mut acc) = (0u64, 0u64);
    while let Some(c) = r.next_chunk().unwrap() {
        if c.kind != ChunkKind::Events {
            continue;
        }
        for rec in EventChunkDecoder::new(&c.payload, c.offset).unwrap() {
            let rec = rec.unwrap();
            n += 1;
            acc = acc.wrapping_add(rec.ts ^ rec.tid as u64);
        }
    }
    (n, acc)
}

fn stats(mut t: Vec<Duration>) -> (Duration, Duration) {
    t.sort();
    (t[0], t[t.len() / 2])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args.next().map_or(20_000_000, |a| a.parse().unwrap());
    let rounds: usize = args.next().map_or(7, |a| a.parse().unwrap());

    let payloads = payloads(records);
    let files = [(1, file(1, &payloads)), (2, file(2, &payloads))];
    let chunks = payloads.len() + 1;
    drop(payloads);
    println!(
        "{records} records in {chunks} chunks; v1 {} bytes, v2 {} bytes; framing a chunk: v1 16 bytes, v2 {} bytes",
        files[0].1.len(),
        files[1].1.len(),
        trace_file::CHUNK_HEADER_LEN,
    );

    let expect = read_all(&files[0].1);
    assert_eq!(expect.0, records);
    let mut times = [vec![], vec![]];
    for round in 0..rounds {
        // Alternate which goes first, so neither always follows the other.
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let t = Instant::now();
            let got = black_box(read_all(black_box(&files[i].1)));
            times[i].push(t.elapsed());
            assert_eq!(got, expect);
        }
    }
    let mut mins = [0.0; 2];
    let mut medians = [0.0; 2];
    for (i, (version, bytes)) in files.iter().enumerate() {
        let (min, median) = stats(times[i].clone());
        mins[i] = min.as_secs_f64();
        medians[i] = median.as_secs_f64();
        println!(
            "v{version}: min {:.3} s, median {:.3} s: {:.0} MB/s, {:.1} M records/s (at the min)",
            mins[i],
            medians[i],
            bytes.len() as f64 / mins[i] / 1e6,
            records as f64 / mins[i] / 1e6,
        );
    }
    // Rounds pair a v1 and a v2 read made back to back, so their ratio shares the load.
    let mut paired: Vec<f64> = times[1]
        .iter()
        .zip(&times[0])
        .map(|(v2, v1)| v2.as_secs_f64() / v1.as_secs_f64())
        .collect();
    paired.sort_by(f64::total_cmp);
    println!(
        "v2/v1 time: {:.3} (mins), {:.3} (medians), {:.3} (median of the rounds' ratios), over {rounds} rounds",
        mins[1] / mins[0],
        medians[1] / medians[0],
        paired[paired.len() / 2],
    );
}
