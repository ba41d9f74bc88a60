//! `cargo xtask bench --only stacks`: `tracer record --stacks` at 99 Hz beside `perf record
//! -F 99` with DWARF call graphs (`--call-graph dwarf`, what right stacks on code without
//! frame pointers costs perf) and with frame pointers (`-g`), on the stacks fixture built
//! without frame pointers. Rounds interleave the modes.

use std::{
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};
use trace_file::{ChunkKind, Event, EventChunkDecoder, Reader};
use tracer_tests::build_fixture_variant;

const ROUNDS: usize = 3;
const SECS: &str = "4";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Untraced,
    /// Every event class, with stacks.
    Tracer,
    /// Only what stacks need: samples, and the scheduler's events for the blocking stacks.
    TracerSched,
    PerfDwarf,
    PerfFp,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Tracer => "tracer record --stacks",
            Mode::TracerSched => "tracer record --stacks --events sched",
            Mode::PerfDwarf => "perf record -F 99 --call-graph dwarf",
            Mode::PerfFp => "perf record -F 99 -g",
        }
    }
}

/// One run's figures.
#[derive(Default, Clone, Copy)]
struct Run {
    /// Calls of a() per second of the spinner's CPU time: its work rate.
    rate: f64,
    /// CPU time of the tool itself (its process and helpers, less the fixture's), s.
    tool_cpu: f64,
    /// Wall time of the run, s.
    wall: f64,
    samples: u64,
    bytes: u64,
    /// CPU time to turn the recording into stacks: `tracer convert --to folded` or
    /// `perf script`, s.
    post_cpu: f64,
}

pub fn stacks_vs_perf(tracer: &Path, dir: &Path) -> Result<()> {
    let fixture = build_fixture_variant("stacks", "nofp", &["-fomit-frame-pointer"]);
    let modes = [
        Mode::Untraced,
        Mode::Tracer,
        Mode::TracerSched,
        Mode::PerfDwarf,
        Mode::PerfFp,
    ];
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); modes.len()];
    for _ in 0..ROUNDS {
        for (i, &m) in modes.iter().enumerate() {
            runs[i].push(one_run(tracer, dir, &fixture, m)?);
        }
    }
    let median = |v: &[Run], f: fn(&Run) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        x.sort_by(|a, b| a.total_cmp(b));
        x[x.len() / 2]
    };
    let base = median(&runs[0], |r| r.rate);
    println!(
        "{:<40} {:>10} {:>14} {:>8} {:>10} {:>12} {:>14}",
        "mode (medians)",
        "work/CPU-s",
        "tool CPU ms/s",
        "samples",
        "KiB",
        "bytes/sample",
        "post CPU ms"
    );
    for (m, v) in modes.iter().zip(&runs) {
        let samples = median(v, |r| r.samples as f64);
        let bytes = median(v, |r| r.bytes as f64);
        println!(
            "{:<40} {:>9.3}x {:>14.2} {:>8.0} {:>10.0} {:>12.0} {:>14.0}",
            m.label(),
            median(v, |r| r.rate) / base,
            median(v, |r| r.tool_cpu / r.wall.max(1e-9)) * 1e3,
            samples,
            bytes / 1024.0,
            if samples > 0.0 { bytes / samples } else { 0.0 },
            median(v, |r| r.post_cpu) * 1e3,
        );
    }
    Ok(())
}

fn one_run(tracer: &Path, dir: &Path, fixture: &Path, mode: Mode) -> Result<Run> {
    let trace = dir.join("stacks-bench.trace");
    let data = dir.join("stacks-bench.perf");
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(&data);
    let mut cmd = Command::new("/usr/bin/time");
    cmd.args(["-f", "TIME %e %U %S"]);
    match mode {
        Mode::Untraced => {}
        Mode::Tracer | Mode::TracerSched => {
            cmd.arg(tracer)
                .args(["record", "--stacks", "-q", "-o"])
                .arg(&trace);
            if mode == Mode::TracerSched {
                cmd.args(["--events", "sched"]);
            }
            cmd.arg("--");
        }
        Mode::PerfDwarf | Mode::PerfFp => {
            cmd.args(["perf", "record", "-F", "99", "-e", "cpu-clock", "-q", "-o"])
                .arg(&data);
            match mode {
                Mode::PerfDwarf => cmd.args(["--call-graph", "dwarf"]),
                _ => cmd.arg("-g"),
            };
            cmd.arg("--");
        }
    }
    let out = cmd.arg(fixture).arg(SECS).stdin(Stdio::null()).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("{} failed: {stderr}", mode.label());
    }
    let field = |prefix: &str, n: usize| -> Result<f64> {
        let line = (stdout.lines().chain(stderr.lines()))
            .find_map(|l| l.strip_prefix(prefix))
            .with_context(|| format!("no {prefix}line from {}", mode.label()))?;
        let v = line.split_whitespace().nth(n).context("short line")?;
        Ok(v.parse()?)
    };
    let run_ns = field("SPINNER ", 1)?;
    let calls = field("SPINNER ", 2)?;
    let fixture_cpu = field("PROCESS_CPU_NS ", 0)? / 1e9;
    let wall = field("TIME ", 0)?;
    let cpu = field("TIME ", 1)? + field("TIME ", 2)?;
    let mut run = Run {
        rate: calls / (run_ns / 1e9),
        tool_cpu: (cpu - fixture_cpu).max(0.0),
        wall,
        ..Run::default()
    };
    match mode {
        Mode::Untraced => {}
        Mode::Tracer | Mode::TracerSched => {
            run.bytes = std::fs::metadata(&trace)?.len();
            run.samples = samples_in(&trace)?;
            let folded = dir.join("stacks-bench.folded");
            let t = cpu_of(
                Command::new(tracer)
                    .args(["convert", "--to", "folded", "-f", "-o"])
                    .arg(&folded)
                    .arg(&trace),
            )?;
            run.post_cpu = t;
        }
        Mode::PerfDwarf | Mode::PerfFp => {
            run.bytes = std::fs::metadata(&data)?.len();
            run.samples = crate::bench::perf_samples(&data);
            run.post_cpu = cpu_of(Command::new("perf").arg("script").arg("-i").arg(&data))?;
        }
    }
    Ok(run)
}

/// On-CPU samples in a trace.
fn samples_in(path: &Path) -> Result<u64> {
    let mut r = Reader::new(std::fs::File::open(path)?)?;
    let mut n = 0;
    while let Some(c) = r.next_chunk()? {
        if c.kind == ChunkKind::Events {
            for rec in EventChunkDecoder::new(&c.payload, c.offset)? {
                n += matches!(rec?.event, Event::Sample { .. }) as u64;
            }
        }
    }
    Ok(n)
}

/// CPU time (user + system) of a command run to completion, its output discarded, s.
fn cpu_of(cmd: &mut Command) -> Result<f64> {
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "TIME %U %S"])
        .arg(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("post-processing failed: {err}");
    }
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("TIME "))
        .context("GNU time printed nothing")?;
    let v: Vec<f64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    Ok(v.iter().sum())
}
