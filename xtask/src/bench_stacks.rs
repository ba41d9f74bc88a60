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
use tracer_tests::{build_fixture_variant, load, wait_until, Server, ServerOptions};

use crate::bench::{cpu_ns, file_len, interrupt};

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

/// Every way the fixtures run, side by side in each round.
const MODES: [Mode; 5] = [
    Mode::Untraced,
    Mode::Tracer,
    Mode::TracerSched,
    Mode::PerfDwarf,
    Mode::PerfFp,
];

pub fn stacks_vs_perf(tracer: &Path, dir: &Path) -> Result<()> {
    let fixture = build_fixture_variant("stacks", "nofp", &["-fomit-frame-pointer"]);
    let modes = MODES;
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

/// The fixture server, built without frame pointers, under load: its throughput and CPU
/// per request untraced, with `tracer record --stacks` (every event class, and the
/// scheduler's only), and with perf's DWARF and frame-pointer call graphs; bytes per
/// sample. Rounds interleave the modes; means.
pub fn server_stacks(tracer: &Path, dir: &Path, secs: u64) -> Result<()> {
    let binary = build_fixture_variant("server", "nofp", &["-fomit-frame-pointer"]);
    let opts = ServerOptions {
        binary: Some(binary),
        ..ServerOptions::default()
    };
    let modes = MODES;
    // (requests/s, CPU ns a request, samples, bytes) per mode and round.
    let mut runs: Vec<Vec<(f64, f64, u64, u64)>> = vec![Vec::new(); modes.len()];
    for _ in 0..ROUNDS {
        for (i, &m) in modes.iter().enumerate() {
            runs[i].push(server_run(tracer, dir, &opts, m, secs)?);
        }
    }
    let mean = |v: &[(f64, f64, u64, u64)], f: fn(&(f64, f64, u64, u64)) -> f64| {
        v.iter().map(f).sum::<f64>() / v.len() as f64
    };
    let (rate, cpu) = (mean(&runs[0], |r| r.0), mean(&runs[0], |r| r.1));
    println!(
        "untraced: {rate:.0} requests/s, {:.1} us CPU/request",
        cpu / 1e3
    );
    for (m, v) in modes.iter().zip(&runs).skip(1) {
        let samples = mean(v, |r| r.2 as f64);
        let bytes = mean(v, |r| r.3 as f64);
        println!(
            "{:<40} throughput ratio {:.3}  +{:.1} us CPU/request  {samples:.0} samples  {:.0} file bytes/sample",
            m.label(),
            mean(v, |r| r.0) / rate,
            (mean(v, |r| r.1) - cpu) / 1e3,
            if samples > 0.0 { bytes / samples } else { 0.0 },
        );
    }
    Ok(())
}

/// One round of [`server_stacks`]: (requests/s, the server's CPU ns a request, samples,
/// bytes recorded).
fn server_run(
    tracer: &Path,
    dir: &Path,
    opts: &ServerOptions,
    mode: Mode,
    secs: u64,
) -> Result<(f64, f64, u64, u64)> {
    let server = Server::start(opts)?;
    let pid = server.pid().to_string();
    let (trace, data) = (
        dir.join("server-stacks.trace"),
        dir.join("server-stacks.perf"),
    );
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(&data);
    let tool = match mode {
        Mode::Untraced => None,
        Mode::Tracer | Mode::TracerSched => {
            let mut c = Command::new(tracer);
            c.args(["record", "--stacks", "-q", "-p", &pid, "-o"])
                .arg(&trace);
            if mode == Mode::TracerSched {
                c.args(["--events", "sched"]);
            }
            let c = c.stderr(Stdio::piped()).spawn()?;
            wait_until(std::time::Duration::from_secs(20), || {
                file_len(&trace) > 200
            });
            Some(c)
        }
        Mode::PerfDwarf | Mode::PerfFp => {
            let mut c = Command::new("perf");
            c.args([
                "record",
                "-F",
                "99",
                "-e",
                "cpu-clock",
                "-q",
                "-p",
                &pid,
                "-o",
            ])
            .arg(&data);
            match mode {
                Mode::PerfDwarf => c.args(["--call-graph", "dwarf"]),
                _ => c.arg("-g"),
            };
            let c = c.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
            wait_until(std::time::Duration::from_secs(20), || file_len(&data) > 0);
            std::thread::sleep(std::time::Duration::from_millis(500));
            Some(c)
        }
    };
    let cpu0 = cpu_ns(server.pid());
    let t0 = std::time::Instant::now();
    let report = load(
        server.port(),
        16,
        1_000_000,
        1024,
        8,
        std::time::Duration::from_secs(secs),
    );
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_ns(server.pid()) - cpu0;
    if let Some(c) = tool {
        interrupt(c)?;
    }
    server.stop()?;
    let (samples, bytes) = match mode {
        Mode::Untraced => (0, 0),
        Mode::Tracer | Mode::TracerSched => (samples_in(&trace)?, file_len(&trace)),
        Mode::PerfDwarf | Mode::PerfFp => (crate::bench::perf_samples(&data), file_len(&data)),
    };
    let requests = report.requests.max(1) as f64;
    Ok((requests / elapsed, cpu as f64 / requests, samples, bytes))
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
