//! Writes the generated part of the fuzz seed corpus: small, deterministic trace files,
//! Events payloads and metadata JSON covering every chunk and record kind.
//!
//! `cargo run -p trace-file --example fuzz_seeds -- fuzz/corpus` (what `cargo xtask fuzz
//! --seed` runs). Files of the same names are replaced; other files (real recordings) are
//! left alone.

use std::collections::BTreeMap;
use std::path::Path;

use trace_file::record::Comm;
use trace_file::{
    ChunkKind, Event, EventChunkEncoder, FuncWindow, LostCounts, Probe, ProbeKind, ProcessInfo,
    StatWindow, SysWindow, ThreadInfo, ThreadWindow, TraceHeader, Trailer, Writer,
};

/// xorshift: the same seeds on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn event(rng: &mut Rng, kind: u64) -> Event {
    let small = |rng: &mut Rng| rng.below(50_000) as u32;
    match kind % KINDS {
        0 => Event::FuncEntry {
            func: 1 + rng.below(4) as u32,
        },
        1 => Event::FuncExit {
            func: 1 + rng.below(4) as u32,
            ret: if rng.below(4) == 0 {
                u64::MAX
            } else {
                rng.below(100)
            },
        },
        2 => Event::SysEnter {
            nr: rng.below(300) as u32,
            arg0: rng.below(64),
            arg2: 1 << rng.below(20),
        },
        3 => Event::SysExit {
            nr: rng.below(300) as u32,
            ret: rng.below(9000) as i64 - 100,
        },
        4 => Event::Switch {
            next_tid: small(rng),
            prev_state: [0, 1, 2, 0x80, 0x100][rng.below(5) as usize],
        },
        5 | 6 => Event::Wakeup {
            wakee: small(rng),
            target_cpu: rng.below(8) as u32,
            new: kind % KINDS == 6,
        },
        7 => Event::NewTask {
            child_tid: small(rng),
            child_tgid: small(rng),
            comm: Comm::from_str_lossy("worker-7"),
        },
        8 => Event::Exit {
            tgid: small(rng),
            group_dead: rng.below(2) == 1,
        },
        9 => Event::Rename {
            comm: Comm::from_str_lossy("exactly15chars!"),
        },
        10 => Event::Exec {
            comm: Comm::from_str_lossy(""),
        },
        11 => {
            let nargs = rng.below(7) as u8;
            let mut args = [0u64; tracer_abi::MAX_USDT_ARGS];
            for a in args.iter_mut().take(nargs as usize) {
                *a = rng.next();
            }
            Event::Usdt {
                probe: 1 + rng.below(4) as u32,
                nargs,
                args,
            }
        }
        12 => Event::GoEntry {
            func: 1 + rng.below(4) as u32,
            g: 0xc000_0000 + rng.below(64) * 0x1a0,
            height: 0x100 + rng.below(8) as u32 * 0x40,
        },
        16 => Event::FrameEntry {
            func: 1 + rng.below(4) as u32,
            sp: 0x7ffd_0000_0000 - rng.below(8) * 0x40,
            switching: rng.below(4) == 0,
        },
        17 => Event::FrameExit {
            func: 1 + rng.below(4) as u32,
            sp: 0x7ffd_0000_0000 - rng.below(8) * 0x40,
            ret: (rng.below(4) != 0).then(|| rng.below(100)),
        },
        _ => Event::GoExit {
            func: 1 + rng.below(4) as u32,
            ret: rng.below(100),
            g: 0xc000_0000 + rng.below(64) * 0x1a0,
            height: 0x100 + rng.below(8) as u32 * 0x40,
        },
    }
}

/// Record kinds [`event`] makes, one per kind of the format.
const KINDS: u64 = tracer_abi::kind::COUNT as u64;

/// An Events payload of `n` records of one CPU, times mostly rising, sometimes back.
fn events(rng: &mut Rng, cpu: u32, n: u64, t0: u64) -> Vec<u8> {
    let mut enc = EventChunkEncoder::new(cpu);
    let mut t = t0;
    for i in 0..n {
        t = if rng.below(10) == 0 {
            t.saturating_sub(rng.below(3000))
        } else {
            t + rng.below(5000)
        };
        let kind = i + rng.below(3);
        let e = event(rng, kind);
        enc.push(t, 1000 + rng.below(8) as u32, &e);
    }
    enc.finish()
}

fn header(mode: &str) -> TraceHeader {
    TraceHeader {
        tracer_version: "0.1.0".into(),
        hostname: "seed".into(),
        kernel: "6.8.0".into(),
        cpus: 2,
        clock: "CLOCK_MONOTONIC".into(),
        monotonic_to_realtime_ns: 1_700_000_000_000_000_000,
        start_ns: 1_000_000,
        command_line: vec!["tracer".into(), mode.into(), "-p".into(), "1000".into()],
        mode: mode.into(),
        run: String::new(),
        part: 0,
        go_status: false,
    }
}

fn process() -> ProcessInfo {
    ProcessInfo {
        tgid: 1000,
        exe: "/usr/bin/server".into(),
        cmdline: vec!["server".into(), "--port".into(), "8080".into()],
        launched: true,
        host_pid: None,
    }
}

fn threads() -> Vec<ThreadInfo> {
    (0..3)
        .map(|i| ThreadInfo {
            tgid: 1000,
            tid: 1000 + i,
            name: format!("worker-{i}"),
            state: ['S', 'R', 'D'][i as usize],
            host_tid: None,
        })
        .collect()
}

fn probes() -> Vec<Probe> {
    vec![
        Probe {
            id: 1,
            name: "server::handle_request".into(),
            symbol: "_ZN6server14handle_request17h0123456789abcdefE".into(),
            binary: "/usr/bin/server".into(),
            build_id: Some("0123456789abcdef0123456789abcdef01234567".into()),
            address: 0x401000,
            size: 512,
            file_offset: 0x1000,
            skipped: 4,
            source: Some("src/main.rs:42".into()),
            kind: ProbeKind::Function,
        },
        Probe {
            id: 2,
            name: "parse".into(),
            symbol: "parse".into(),
            binary: "/usr/lib/libparse.so".into(),
            build_id: None,
            address: 0x2000,
            size: 0,
            file_offset: 0x2000,
            skipped: 0,
            source: None,
            kind: ProbeKind::Usdt {
                args: "-4@%edi 8@-16(%rbp) -8@counter(%rip)".into(),
            },
        },
        Probe {
            id: 3,
            name: "main.(*Server).handle".into(),
            symbol: "main.(*Server).handle".into(),
            binary: "/usr/bin/goserver".into(),
            build_id: None,
            address: 0x4d61e0,
            size: 364,
            file_offset: 0xd61e0,
            skipped: 10,
            source: Some("./main.go:34".into()),
            kind: ProbeKind::Go,
        },
    ]
}

fn lost() -> LostCounts {
    LostCounts {
        at_ns: 5_000_000,
        per_cpu: vec![0, 17],
        threads_not_traced: 1,
        skipped: 2,
        stacks_shed: 3,
    }
}

fn trailer() -> Trailer {
    let records: BTreeMap<String, u64> = [("switch".to_string(), 40), ("sys_exit".into(), 12)]
        .into_iter()
        .collect();
    Trailer {
        end_ns: 9_000_000,
        reason: "signal".into(),
        records,
        lost: 17,
    }
}

fn window(i: u64, with_hist: bool) -> StatWindow {
    StatWindow {
        start_ns: 1_000_000 + i * 1_000_000,
        end_ns: 2_000_000 + i * 1_000_000,
        functions: vec![FuncWindow {
            id: 1,
            calls: 10 + i,
            // The newer windows say how many calls were timed.
            timed: with_hist.then_some(3),
            errors: 1,
            total_ns: 123_456,
            // The newer windows' latency buckets are log-linear (format version 6).
            buckets: if with_hist {
                vec![(3, 1), (130, 1), (271, 1)]
            } else {
                vec![]
            },
            hist: if with_hist {
                vec![]
            } else {
                (0..32).map(|b| u64::from(b % 5 == 0)).collect()
            },
            untimed: 0,
        }],
        threads: vec![ThreadWindow {
            tgid: 1000,
            tid: 1001,
            name: "worker-1".into(),
            running_ns: 400_000,
            ready_ns: 20_000,
            blocked_ns: 500_000,
            io_ns: 80_000,
            voluntary: 7,
            involuntary: 2,
            wakeups_sent: 3,
            wakeups_received: 7,
            migrations: 1,
            wait_hist: if with_hist { vec![5, 3, 1] } else { vec![] },
            syscalls: 40,
            syscall_ns: 90_000,
        }],
        syscalls: vec![SysWindow {
            nr: 0,
            calls: 20,
            errors: 2,
            total_ns: 40_000,
            positive_sum: 81_920,
            buckets: if with_hist {
                vec![(80, 2), (90, 18)]
            } else {
                vec![]
            },
            hist: vec![],
        }],
        dropped: i,
        stacks: Vec::new(),
        stack_period_ns: 0,
    }
}

/// A recording: every kind of chunk a `tracer record` file holds.
fn record(version: u32, rng: &mut Rng, per_chunk: u64) -> Vec<u8> {
    let mut w = Writer::with_version(Vec::new(), version).unwrap();
    w.meta(ChunkKind::Header, &header("record")).unwrap();
    w.meta(ChunkKind::Process, &process()).unwrap();
    w.meta(ChunkKind::Threads, &threads()).unwrap();
    w.meta(ChunkKind::Probes, &probes()).unwrap();
    for (i, cpu) in [0, 1, 0].into_iter().enumerate() {
        let payload = events(rng, cpu, per_chunk, 1_000_000 + i as u64 * 2_000_000);
        w.chunk(ChunkKind::Events, &payload).unwrap();
    }
    w.meta(ChunkKind::Lost, &lost()).unwrap();
    w.meta(ChunkKind::Trailer, &trailer()).unwrap();
    w.into_inner()
}

fn json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    let root = Path::new(&root);
    let mut rng = Rng(0x5eed_1234_abcd_0001);

    let dir = root.join("container");
    let rec = record(2, &mut rng, 40);
    write(&dir, "record.trace", &rec);
    write(&dir, "record-v1.trace", &record(1, &mut rng, 40));
    let small = record(2, &mut rng, 3);
    write(&dir, "small.trace", &small);
    write(&dir, "torn.trace", &rec[..rec.len() - 37]);
    let mut zeros = small.clone();
    zeros.resize(small.len() + 300, 0);
    write(&dir, "zero-tail.trace", &zeros);
    let mut bad = small.clone();
    // The length of the third chunk, and a payload byte of the fifth.
    let third = 12 + (20 + json(&header("record")).len()) + (20 + json(&process()).len());
    bad[third + 9] ^= 0x01;
    write(&dir, "damaged-header.trace", &bad);
    let mut bad = rec.clone();
    let n = bad.len();
    bad[n / 2] ^= 0x20;
    write(&dir, "damaged-payload.trace", &bad);
    let mut w = Writer::new(Vec::new()).unwrap();
    w.meta(ChunkKind::Header, &header("record")).unwrap();
    for i in 0..30 {
        let payload = events(&mut rng, i % 2, 1 + u64::from(i % 3), u64::from(i) * 1000);
        w.chunk(ChunkKind::Events, &payload).unwrap();
    }
    w.chunk(ChunkKind::Unknown(99), b"from a newer recorder")
        .unwrap();
    w.chunk(ChunkKind::Events, &[]).unwrap();
    write(&dir, "many-chunks.trace", &w.into_inner());
    let mut w = Writer::new(Vec::new()).unwrap();
    w.meta(ChunkKind::Header, &header("stat")).unwrap();
    w.meta(ChunkKind::Threads, &threads()).unwrap();
    w.meta(ChunkKind::Probes, &probes()).unwrap();
    w.meta(ChunkKind::Window, &window(0, true)).unwrap();
    w.meta(ChunkKind::Window, &window(1, false)).unwrap();
    w.meta(ChunkKind::Trailer, &trailer()).unwrap();
    write(&dir, "stat.trace", &w.into_inner());
    write(
        &dir,
        "empty.trace",
        &Writer::new(Vec::new()).unwrap().into_inner(),
    );
    // A last chunk across a page boundary, zero from there on, as a crash may leave it.
    let mut w = Writer::new(Vec::new()).unwrap();
    w.meta(ChunkKind::Header, &header("record")).unwrap();
    w.chunk(ChunkKind::Events, &events(&mut rng, 1, 700, 5_000))
        .unwrap();
    let mut paged = w.into_inner();
    assert!(paged.len() > 4096 + 100, "{}", paged.len());
    paged[4096..].fill(0);
    write(&dir, "zero-page.trace", &paged);

    let dir = root.join("events");
    write(&dir, "one-cpu.bin", &events(&mut rng, 0, 200, 1_000_000));
    write(
        &dir,
        "cpu-7.bin",
        &events(&mut rng, 7, 30, u64::MAX - 100_000),
    );
    write(&dir, "few.bin", &events(&mut rng, 1, 3, 0));
    write(&dir, "empty.bin", &EventChunkEncoder::new(3).finish());
    let mut enc = EventChunkEncoder::new(2);
    for k in 0..KINDS {
        enc.push(1_000 + k * 10, 42, &event(&mut rng, k));
    }
    write(&dir, "all-kinds.bin", &enc.finish());
    let mut enc = EventChunkEncoder::new(1);
    enc.push(
        u64::MAX,
        u32::MAX,
        &Event::SysEnter {
            nr: u32::MAX,
            arg0: u64::MAX,
            arg2: u64::MAX,
        },
    );
    enc.push(
        0,
        0,
        &Event::SysExit {
            nr: 0,
            ret: i64::MIN,
        },
    );
    write(&dir, "extremes.bin", &enc.finish());

    let dir = root.join("meta");
    write(&dir, "header.json", &json(&header("record")));
    write(&dir, "header-stat.json", &json(&header("stat")));
    write(
        &dir,
        "header-old.json",
        br#"{"tracer_version":"0.0.9","hostname":"h","kernel":"5.15","cpus":4,"clock":"CLOCK_MONOTONIC","monotonic_to_realtime_ns":-5,"start_ns":0,"command_line":[]}"#,
    );
    write(&dir, "process.json", &json(&process()));
    write(&dir, "threads.json", &json(&threads()));
    write(&dir, "probes.json", &json(&probes()));
    write(&dir, "lost.json", &json(&lost()));
    write(&dir, "trailer.json", &json(&trailer()));
    write(&dir, "window.json", &json(&window(3, true)));
    write(&dir, "window-old.json", &json(&window(4, false)));
    write(
        &dir,
        "unicode.json",
        r#"[{"tgid":1,"tid":2,"name":"w\u00e9\ud83d\ude00\n","state":"\u00e9"}]"#.as_bytes(),
    );
}
