//! `cargo xtask golden DIR [N]`: every output of the converters and the aggregator for
//! synthetic traces, written into DIR so that two builds can be compared byte for byte
//! (`diff -r`): the guard for changes that must not change any output byte.
//!
//! It synthesizes the benches' trace of N records (default 2 M) and a smaller second one,
//! and writes the Paraver, Trace Event Format and folded-stack conversions of the first
//! and of both merged, whole and in a window, and the summaries in every format and
//! view, with and without windows. The traces go to a fixed scratch directory
//! (`$TMPDIR/tracer-golden`), because summaries name their input files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use trace_convert::{chrome, folded, paraver, Options, Window};
use trace_summary::{render, summarize, summarize_windows, By, Format, SummaryOptions};

pub fn run(dir: &Path, records: u64) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = std::env::temp_dir().join("tracer-golden");
    std::fs::create_dir_all(&tmp)?;
    let a = tmp.join("a.trace");
    let b = tmp.join("b.trace");
    trace_testkit::synth::synthesize(&a, records)?;
    trace_testkit::synth::synthesize(&b, records / 7)?;
    let one = std::slice::from_ref(&a);
    let two = [a.clone(), b.clone()];

    let force = Options {
        force: true,
        ..Options::default()
    };
    let window = Options {
        window: Window {
            from_ns: 10_000_000,
            until_ns: 30_000_000,
        },
        ..force.clone()
    };
    paraver::convert(one, &dir.join("one"), &force)?;
    paraver::convert(&two, &dir.join("two"), &force)?;
    chrome::convert(one, &dir.join("one.json"), &force)?;
    chrome::convert(&two, &dir.join("two.json"), &force)?;
    chrome::convert(one, &dir.join("window.json"), &window)?;
    folded::convert(one, &dir.join("one.folded"), &force)?;
    folded::convert(one, &dir.join("window.folded"), &window)?;

    let s = summarize(one)?;
    let s2 = summarize(&two)?;
    let window_ns = 50_000_000;
    let sw = summarize_windows(one, window_ns)?;
    let bys = [
        By::Function,
        By::Thread,
        By::Syscall,
        By::Connection,
        By::CallGraph,
    ];
    for by in bys {
        for (format, ext) in [
            (Format::Json, "json"),
            (Format::Csv, "csv"),
            (Format::Table, "txt"),
        ] {
            let opts = SummaryOptions {
                by,
                format,
                ..SummaryOptions::default()
            };
            let name = |what: &str| dir.join(format!("{what}-{}.{ext}", by.name()));
            write(&name("summary"), |o| render(&s, &opts, o))?;
            write(&name("summary2"), |o| render(&s2, &opts, o))?;
            let wopts = SummaryOptions {
                window_ns: Some(window_ns),
                ..opts
            };
            write(&name("window"), |o| render(&sw, &wopts, o))?;
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!(
        "golden outputs of {records} records written to {}",
        dir.display()
    );
    Ok(())
}

fn write(
    path: &PathBuf,
    f: impl FnOnce(&mut dyn std::io::Write) -> Result<(), trace_summary::Error>,
) -> Result<()> {
    let mut out = Vec::new();
    f(&mut out)?;
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}
