//! Writes the generated seeds of the targets that read whole traces (timeline, writers,
//! summary): the test kit's scenarios and random traces, several files at once (hosts,
//! the parts of a rotated run), a counting-mode file, and a few with the knobs set
//! (`fuzz_bodies::traces::Knobs`).
//!
//! `cargo run -p fuzz-bodies --example seeds -- fuzz/corpus` (what `cargo xtask fuzz
//! --seed` runs). Files of the same names are replaced; other files (real recordings)
//! are left alone.

use std::path::Path;

use trace_file::{ChunkKind, FuncWindow, StatWindow, SysWindow, ThreadWindow, Writer};
use trace_testkit::builder::{go_scenario, random_scenario, server_scenario, TraceBuilder};

/// The file with its version word replaced by `knobs`.
fn with_knobs(mut bytes: Vec<u8>, knobs: u32) -> Vec<u8> {
    bytes[8..12].copy_from_slice(&knobs.to_le_bytes());
    bytes
}

fn part(mut b: TraceBuilder, run: &str, part: u32) -> Vec<u8> {
    b.header.run = run.into();
    b.header.part = part;
    b.bytes()
}

fn stat_file() -> Vec<u8> {
    let b = server_scenario();
    let mut header = b.header.clone();
    header.mode = "stat".into();
    let mut w = Writer::new(Vec::new()).unwrap();
    w.meta(ChunkKind::Header, &header).unwrap();
    w.meta(ChunkKind::Threads, &b.threads).unwrap();
    w.meta(ChunkKind::Probes, &b.probes).unwrap();
    for i in 0..3u64 {
        let window = StatWindow {
            start_ns: header.start_ns + i * 1_000_000,
            end_ns: header.start_ns + (i + 1) * 1_000_000,
            functions: vec![FuncWindow {
                id: 1,
                calls: 3 + i,
                timed: Some(1 + i),
                errors: i,
                total_ns: 40_000,
                hist: (0..32).map(|k| u64::from(k == 12)).collect(),
                untimed: 0,
            }],
            threads: vec![ThreadWindow {
                tgid: b.threads[0].tgid,
                tid: b.threads[0].tid,
                name: b.threads[0].name.clone(),
                running_ns: 300_000,
                ready_ns: 10_000,
                blocked_ns: 690_000,
                voluntary: 4,
                involuntary: 1,
                wait_hist: vec![2, 1],
                syscalls: 9,
                syscall_ns: 20_000,
                ..ThreadWindow::default()
            }],
            syscalls: vec![SysWindow {
                nr: 0,
                calls: 5,
                errors: 1,
                total_ns: 9_000,
                positive_sum: 4096,
            }],
            dropped: 0,
            stacks: Vec::new(),
            stack_period_ns: 0,
        };
        w.meta(ChunkKind::Window, &window).unwrap();
    }
    w.into_inner()
}

fn main() {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    let mut seeds: Vec<(String, Vec<u8>)> = vec![
        ("server.trace".into(), server_scenario().bytes()),
        ("go.trace".into(), go_scenario().bytes()),
        (
            "random-1.trace".into(),
            random_scenario(1, 2, 4, 150).bytes(),
        ),
        (
            "random-2.trace".into(),
            random_scenario(2, 4, 8, 300).bytes(),
        ),
        (
            "two-hosts.trace".into(),
            [server_scenario().bytes(), {
                let mut b = random_scenario(3, 2, 3, 100);
                b.header.hostname = "other".into();
                b.bytes()
            }]
            .concat(),
        ),
        (
            "rotated.trace".into(),
            [
                part(random_scenario(4, 2, 3, 100), "run-1", 1),
                part(random_scenario(5, 2, 3, 100), "run-1", 2),
            ]
            .concat(),
        ),
        ("stat.trace".into(), stat_file()),
    ];
    // Late records, the Paraver writer's small tuning, summary windows of 10 us, a window
    // of the trace to convert.
    let knobs = [
        ("late", 1 << 8),
        ("tuning", 1 << 9),
        ("windows", 4 << 12),
        ("until", 1 << 16 | 2 << 24),
    ];
    for (name, k) in knobs {
        let bytes = with_knobs(random_scenario(6, 2, 4, 200).bytes(), k);
        seeds.push((format!("knobs-{name}.trace"), bytes));
    }
    for target in ["timeline", "writers", "summary"] {
        let dir = Path::new(&root).join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
