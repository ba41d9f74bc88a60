//! Writes every output of the converters for synthetic traces into a directory, so that
//! two builds can be compared byte for byte (`cmp -r` / `sha256sum`): a guard for
//! optimizations that must not change any output byte.
//!
//! `golden_outputs DIR [N]` synthesizes a trace of N records (default 2 M, the
//! generator of the benches) and writes into DIR: the Paraver trace of that file and of
//! it merged with a smaller second file, and its summaries in every format and view,
//! with and without windows. The traces are written to a fixed scratch directory
//! (`$TMPDIR/trace-merge-golden`), because summaries name their input files.

// The bench helpers of `synth` are not used here.
#[allow(dead_code)]
mod synth;

use std::path::{Path, PathBuf};

use trace_merge::summary::{render, summarize, summarize_windows, By, Format, SummaryOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: golden_outputs DIR [N]"));
    let n: u64 = args.next().map_or(2_000_000, |a| a.parse().expect("N"));
    std::fs::create_dir_all(&dir).expect("output dir");
    let tmp = std::env::temp_dir().join("trace-merge-golden");
    std::fs::create_dir_all(&tmp).expect("scratch dir");
    let a = tmp.join("a.trace");
    let b = tmp.join("b.trace");
    synth::synthesize(&a, n).expect("write trace");
    synth::synthesize(&b, n / 7).expect("write trace");

    let one = std::slice::from_ref(&a);
    trace_merge::convert_paraver(one, &dir.join("one"), true).expect("convert");
    trace_merge::convert_paraver(&[a.clone(), b.clone()], &dir.join("two"), true)
        .expect("convert two");

    let s = summarize(one).expect("summarize");
    let s2 = summarize(&[a.clone(), b]).expect("summarize two");
    let window = 50_000_000;
    let sw = summarize_windows(one, window).expect("summarize windows");
    let bys = [
        By::Function,
        By::Thread,
        By::Syscall,
        By::Connection,
        By::CallGraph,
    ];
    for by in bys {
        for (fmt, ext) in [
            (Format::Json, "json"),
            (Format::Csv, "csv"),
            (Format::Table, "txt"),
        ] {
            let opts = SummaryOptions {
                by,
                format: fmt,
                ..SummaryOptions::default()
            };
            write(&dir, &format!("summary-{}.{ext}", by.name()), |o| {
                render(&s, &opts, o)
            });
            write(&dir, &format!("summary2-{}.{ext}", by.name()), |o| {
                render(&s2, &opts, o)
            });
            let wopts = SummaryOptions {
                window_ns: Some(window),
                ..opts
            };
            write(&dir, &format!("window-{}.{ext}", by.name()), |o| {
                render(&sw, &wopts, o)
            });
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

fn write(
    dir: &Path,
    name: &str,
    f: impl FnOnce(&mut dyn std::io::Write) -> Result<(), trace_merge::summary::Error>,
) {
    let mut out = Vec::new();
    f(&mut out).expect("render");
    std::fs::write(dir.join(name), out).expect("write");
}
