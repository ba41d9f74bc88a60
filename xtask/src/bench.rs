//! `cargo xtask bench`: overheads and throughputs, measured side by side in one run.
//! Absolute times on these machines are noisy; the figures that matter are ratios of runs
//! made one after the other here (rounds interleave the modes to spread the drift).

use std::{
    io::Write,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use trace_file::{ChunkKind, Reader, Trailer};
use tracer_tests::{
    build_cpp_fixture, build_fixture, build_go_fixture, load, wait_until, Server, ServerOptions,
};

use crate::progcost;
use crate::setup::{status, workspace};

const ROUNDS: usize = 3;
const LOAD_SECS: u64 = 4;
/// Long enough for the server's trace to pass 20 M events (30 s gave 19.7 M on a quiet
/// machine); fewer are reported as such.
const CONVERT_LOAD_SECS: u64 = 36;
const CONVERT_MIN_EVENTS: u64 = 20_000_000;

pub fn run(only: Option<&str>) -> Result<()> {
    let wanted = |section: &str| only.is_none_or(|o| o.split(',').any(|s| s == section));
    crate::setup::ensure()?;
    let tracer = crate::build::run()?;
    ensure_perf()?;
    let dir = workspace().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    if wanted("server") {
        println!("== server under load: traced / untraced ({ROUNDS} rounds of {LOAD_SECS}s each, interleaved)");
        server_overhead(&tracer, &dir)?;
    }
    if wanted("stat") {
        println!("\n== tracer stat against the CPU cost of a request ({ROUNDS} rounds of {LOAD_SECS}s each, interleaved)");
        stat_by_request_cost(&tracer, &dir)?;
    }
    if wanted("classes") {
        println!("\n== tracer stat by event class, beside empty programs ({ROUNDS} rounds of {LOAD_SECS}s each, interleaved)");
        stat_by_class(&tracer, &dir)?;
    }
    if wanted("sampling") {
        println!("\n== latencies from 1 call in 64 against every call timed, two counters on one server at once");
        crate::bench_sampling::sampled_vs_exact(&tracer, &dir)?;
    }
    if wanted("probe") {
        println!("\n== cost of a probed call: C (uprobe + uretprobe) and Go (entry + RET uprobes), {ROUNDS} rounds interleaved, minimum per mode");
        probe_cost(&tracer, &dir)?;
    }
    if wanted("rate") {
        println!("\n== highest event rate recorded (syscall storm, 2 CPUs)");
        max_rate(&tracer, &dir)?;
    }
    if wanted("stacks") {
        println!("\n== stacks at 99 Hz on a program without frame pointers: tracer vs perf ({} rounds, interleaved)", 3);
        crate::bench_stacks::stacks_vs_perf(&tracer, &dir)?;
        println!("\n== stacks at 99 Hz on the fixture server built without frame pointers, under load: tracer vs perf ({} rounds of {LOAD_SECS}s, interleaved)", 3);
        crate::bench_stacks::server_stacks(&tracer, &dir, LOAD_SECS)?;
    }
    if wanted("convert") {
        println!("\n== converting a recording of the server: tracer convert vs perf script");
        convert_vs_perf_script(&tracer, &dir)?;
    }
    if wanted("parquet") {
        println!("\n== Parquet tables (tracer convert --to parquet): rate and size on the synthetic 5 M / 20 M records");
        crate::parquet::bench(&dir)?;
    }
    for (section, name, example, args) in [
        (
            "symbolizer",
            "symbolizer",
            "symbolize_bench",
            vec![tracer.display().to_string()],
        ),
        ("merge", "trace-convert", "convert_bench", vec![]),
        ("merge", "trace-summary", "summary_bench", vec![]),
    ] {
        if !wanted(section) {
            continue;
        }
        let src = workspace()
            .join(name)
            .join(format!("examples/{example}.rs"));
        if src.exists() {
            println!("\n== {name}");
            status(
                Command::new("cargo")
                    .args([
                        "run",
                        "--release",
                        "--quiet",
                        "-p",
                        name,
                        "--example",
                        example,
                        "--",
                    ])
                    .args(&args)
                    .current_dir(workspace()),
            )?;
        }
    }
    Ok(())
}

/// perf and bpftrace are the baselines, GNU time measures peak memory and bpftool reads
/// the programs' own time.
fn ensure_perf() -> Result<()> {
    crate::setup::ensure_commands(&[
        ("perf", "linux-perf"),
        ("bpftrace", "bpftrace"),
        ("/usr/bin/time", "time"),
        ("bpftool", "bpftool"),
    ])
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Untraced,
    Tracer,
    Perf,
    /// `tracer stat`: counting in the kernel.
    Stat,
    /// bpftrace counting the same things (`count()`, `hist()`, `sum()`).
    Bpftrace,
    /// Empty programs on every attach point `tracer stat` uses: what the kernel charges
    /// for the probes alone, whatever the programs do.
    Floor,
    /// Empty programs on the two handlers' uprobes and uretprobes only (bpftrace): the
    /// part of that floor the function probes take.
    UprobeFloor,
    /// `tracer stat --events CLASSES`, with programs that do nothing when `empty`.
    StatClasses(&'static str, bool),
}

/// What `tracer stat` counts, written for bpftrace: calls and latency histograms of the
/// two handlers, per-syscall counts and times, per-thread running time.
fn bpftrace_script(server: &Path, pid: u32) -> String {
    let s = server.display();
    format!(
        r#"
uprobe:{s}:handle_request /pid == {pid}/ {{ @hstart[tid] = nsecs; }}
uprobe:{s}:render_response /pid == {pid}/ {{ @rstart[tid] = nsecs; }}
uretprobe:{s}:handle_request /pid == {pid}/ {{ $t = @hstart[tid]; if ($t) {{ @calls["handle_request"] = count(); @lat["handle_request"] = hist(nsecs - $t); delete(@hstart[tid]); }} }}
uretprobe:{s}:render_response /pid == {pid}/ {{ $t = @rstart[tid]; if ($t) {{ @calls["render_response"] = count(); @lat["render_response"] = hist(nsecs - $t); delete(@rstart[tid]); }} }}
tracepoint:raw_syscalls:sys_enter /pid == {pid}/ {{ @sstart[tid] = nsecs; }}
tracepoint:raw_syscalls:sys_exit /pid == {pid}/ {{ $t = @sstart[tid]; if ($t) {{ @sys[args->id] = count(); @systime[args->id] = sum(nsecs - $t); delete(@sstart[tid]); }} }}
tracepoint:sched:sched_switch {{ if (pid == {pid}) {{ $t = @on[args->prev_pid]; if ($t) {{ @run[args->prev_pid] = sum(nsecs - $t); }} }} @on[args->next_pid] = nsecs; }}
tracepoint:sched:sched_wakeup /pid == {pid}/ {{ @wakeups[args->pid] = count(); }}
"#
    )
}

/// Empty programs on the uprobes and uretprobes of the two handlers.
fn empty_uprobes_script(server: &Path) -> String {
    let s = server.display();
    ["uprobe", "uretprobe"]
        .iter()
        .flat_map(|kind| {
            ["handle_request", "render_response"].map(|f| format!("{kind}:{s}:{f} {{ }}\n"))
        })
        .collect()
}

/// CPU time (user + system) of a whole process, in nanoseconds.
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of stat (utime, stime) are 11 and 12 after the state.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ticks * 1_000_000_000 / hz.max(1)
}

pub(crate) fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

pub(crate) fn interrupt(child: Child) -> Result<()> {
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output()?;
    // perf ends by SIGINT itself (or exits 130) after a clean stop.
    use std::os::unix::process::ExitStatusExt;
    let by_sigint = out.status.code() == Some(130) || out.status.signal() == Some(libc::SIGINT);
    if !out.status.success() && !by_sigint {
        bail!(
            "tracing tool failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn trailer(path: &Path) -> Result<Trailer> {
    let mut r = Reader::new(std::fs::File::open(path)?)?;
    while let Some(c) = r.next_chunk()? {
        if c.kind == ChunkKind::Trailer {
            return Ok(c.meta()?);
        }
    }
    bail!("{} has no trailer", path.display())
}

struct Run {
    rate: f64,
    cpu_per_req: f64,
    bytes: u64,
    events: u64,
    requests: u64,
    /// The tool's programs' own runs and time under the load, when asked.
    programs: progcost::Costs,
}

fn one_server_run(
    tracer: &Path,
    dir: &Path,
    mode: Mode,
    load_secs: u64,
    server: &ServerOptions,
    costs: bool,
) -> Result<Run> {
    let stats = costs.then(progcost::Stats::on).transpose()?;
    let server = Server::start(server)?;
    let pid = server.pid();
    let out = dir.join(match mode {
        Mode::Tracer => "server.trace",
        Mode::Stat => "server.stat",
        Mode::Bpftrace | Mode::UprobeFloor => "bpftrace.out",
        Mode::Floor => "floor.trace",
        Mode::StatClasses(..) => "classes.stat",
        _ => "perf.data",
    });
    let _ = std::fs::remove_file(&out);
    let tool = match mode {
        Mode::Untraced => None,
        Mode::Tracer | Mode::Floor => {
            let mut c = Command::new(tracer);
            c.args(["record", "--quiet", "-p", &pid.to_string()])
                .args(["-u", "handle_request", "-u", "render_response", "-o"])
                .arg(&out);
            if mode == Mode::Floor {
                c.arg("--empty-probes");
            }
            let c = c.stderr(Stdio::piped()).spawn()?;
            wait_until(Duration::from_secs(20), || file_len(&out) > 200);
            Some(c)
        }
        Mode::StatClasses(events, empty) => {
            let mut c = Command::new(tracer);
            c.args(["stat", "--quiet", "-p", &pid.to_string(), "-i", "1s"])
                .args(["--events", events]);
            if events.split(',').any(|c| c == "calls") {
                c.args(["-u", "handle_request", "-u", "render_response"]);
            }
            if empty {
                c.arg("--empty-probes");
            }
            let c = c.arg("-o").arg(&out).stderr(Stdio::piped()).spawn()?;
            wait_until(Duration::from_secs(20), || file_len(&out) > 200);
            Some(c)
        }
        Mode::Stat => {
            let c = Command::new(tracer)
                .args(["stat", "--quiet", "-p", &pid.to_string(), "-i", "1s"])
                .args(["-u", "handle_request", "-u", "render_response", "-o"])
                .arg(&out)
                .stderr(Stdio::piped())
                .spawn()?;
            wait_until(Duration::from_secs(20), || file_len(&out) > 200);
            Some(c)
        }
        Mode::Bpftrace | Mode::UprobeFloor => {
            let fixture = build_fixture("server");
            let script = match mode {
                Mode::Bpftrace => bpftrace_script(&fixture, pid),
                _ => empty_uprobes_script(&fixture),
            };
            let c = Command::new("bpftrace")
                .arg("-e")
                .arg(script)
                .stdout(std::fs::File::create(&out)?)
                .stderr(Stdio::piped())
                .spawn()?;
            wait_until(Duration::from_secs(60), || {
                std::fs::read_to_string(&out).is_ok_and(|t| t.contains("Attaching"))
            });
            std::thread::sleep(Duration::from_millis(500));
            Some(c)
        }
        Mode::Perf => {
            let mut c = Command::new("perf");
            c.args(["record", "-q", "-o"]).arg(&out);
            for e in [
                "sched:sched_switch",
                "sched:sched_wakeup",
                "raw_syscalls:sys_enter",
                "raw_syscalls:sys_exit",
                "probe_server:handle_request",
                "probe_server:handle_request__return",
                "probe_server:render_response",
                "probe_server:render_response__return",
            ] {
                c.args(["-e", e]);
            }
            let c = c
                .args(["-p", &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?;
            wait_until(Duration::from_secs(20), || file_len(&out) > 0);
            std::thread::sleep(Duration::from_millis(500));
            Some(c)
        }
    };
    let before = stats.as_ref().map(|s| s.now()).transpose()?;
    let cpu0 = cpu_ns(pid);
    let t0 = Instant::now();
    let report = load(
        server.port(),
        16,
        1_000_000,
        1024,
        8,
        Duration::from_secs(load_secs),
    );
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_ns(pid) - cpu0;
    let programs = match (&stats, &before) {
        (Some(s), Some(b)) => progcost::between(b, &s.now()?),
        _ => Default::default(),
    };
    if let Some(c) = tool {
        interrupt(c)?;
    }
    server.stop()?;
    let events = match mode {
        Mode::Tracer => trailer(&out)?.records.values().sum(),
        Mode::Perf => perf_samples(&out),
        _ => 0,
    };
    Ok(Run {
        rate: report.requests as f64 / secs,
        cpu_per_req: cpu as f64 / report.requests.max(1) as f64,
        bytes: file_len(&out),
        events,
        requests: report.requests,
        programs,
    })
}

pub(crate) fn perf_samples(path: &Path) -> u64 {
    let child = Command::new("perf")
        .args(["script", "-F", "event", "-i"])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    child.map_or(0, |mut c| {
        let n = count_lines(c.stdout.take().unwrap()).unwrap_or(0);
        let _ = c.wait();
        n
    })
}

/// perf's uprobes on the server's two handlers, defined for a whole section.
fn define_perf_probes(server_bin: &Path) -> Result<()> {
    remove_perf_probes();
    for spec in [
        "handle_request",
        "handle_request%return",
        "render_response",
        "render_response%return",
    ] {
        let out = Command::new("perf")
            .args(["probe", "-q", "-x"])
            .arg(server_bin)
            .arg(spec)
            .output()?;
        if !out.status.success() {
            bail!(
                "perf probe {spec}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(())
}

fn remove_perf_probes() {
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", "probe_server:*"])
        .output();
}

fn server_overhead(tracer: &Path, dir: &Path) -> Result<()> {
    define_perf_probes(&build_fixture("server"))?;
    let mut runs: Vec<(Mode, Run)> = vec![];
    for _ in 0..ROUNDS {
        for mode in [
            Mode::Untraced,
            Mode::Tracer,
            Mode::Perf,
            Mode::Stat,
            Mode::Bpftrace,
            Mode::Floor,
            Mode::UprobeFloor,
        ] {
            runs.push((
                mode,
                one_server_run(
                    tracer,
                    dir,
                    mode,
                    LOAD_SECS,
                    &ServerOptions::default(),
                    false,
                )?,
            ));
        }
    }
    remove_perf_probes();
    let mean = |m: Mode, f: &dyn Fn(&Run) -> f64| {
        let v: Vec<f64> = runs.iter().filter(|r| r.0 == m).map(|r| f(&r.1)).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let base_rate = mean(Mode::Untraced, &|r| r.rate);
    let base_cpu = mean(Mode::Untraced, &|r| r.cpu_per_req);
    println!(
        "untraced:        {base_rate:>9.0} requests/s  {:>7.1} us CPU/request",
        base_cpu / 1e3
    );
    for (name, m) in [
        ("tracer record:", Mode::Tracer),
        ("perf record:", Mode::Perf),
        ("tracer stat:", Mode::Stat),
        ("bpftrace count:", Mode::Bpftrace),
        ("empty programs:", Mode::Floor),
        ("of which uprobes:", Mode::UprobeFloor),
    ] {
        let rate = mean(m, &|r| r.rate);
        let cpu = mean(m, &|r| r.cpu_per_req);
        let bytes = mean(m, &|r| r.bytes as f64);
        let events = mean(m, &|r| r.events as f64);
        let per_event = if events > 0.0 {
            format!("  {:.1} bytes/event ({events:.0} events)", bytes / events)
        } else {
            String::new()
        };
        println!(
            "{name:<16} {rate:>9.0} requests/s  {:>7.1} us CPU/request  throughput ratio {:.3}  +{:.1} us CPU/request{per_event}",
            cpu / 1e3,
            rate / base_rate,
            (cpu - base_cpu) / 1e3,
        );
    }
    let over = |m: Mode| mean(m, &|r| r.cpu_per_req) - base_cpu;
    println!(
        "tracer stat's programs cost {:.1} us/request over the {:.1} us/request the kernel charges for empty ones on the same probes",
        (over(Mode::Stat) - over(Mode::Floor)) / 1e3,
        over(Mode::Floor) / 1e3
    );
    Ok(())
}

/// A program calling a probed function in a loop: `calls` (C), `callspp` (the same in a
/// program that throws) or `gocalls` (Go).
struct Calls {
    bin: std::path::PathBuf,
    /// The `-u` spec of its probed function.
    spec: &'static str,
    /// Calls per run, enough for a run of seconds when probed.
    calls: &'static str,
}

/// Runs a [`Calls`] program, optionally under `tracer SUBCOMMAND` (`record` or `stat`;
/// with empty programs when the flag says so), returning ns per call.
fn calls_run(tracer: &Path, dir: &Path, calls: &Calls, probe: Option<(&str, bool)>) -> Result<f64> {
    let mut fx = Command::new(&calls.bin)
        .arg(calls.calls)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let out = dir.join("calls.trace");
    let _ = std::fs::remove_file(&out);
    let rec = match probe {
        None => None,
        Some((subcommand, empty)) => {
            let mut c = Command::new(tracer);
            c.args([
                subcommand,
                "--quiet",
                "-p",
                &fx.id().to_string(),
                "-u",
                calls.spec,
                "-o",
            ])
            .arg(&out);
            if empty {
                c.arg("--empty-probes");
            }
            let c = c.stderr(Stdio::piped()).spawn()?;
            wait_until(Duration::from_secs(20), || file_len(&out) > 200);
            Some(c)
        }
    };
    fx.stdin.take().unwrap().write_all(b"g")?;
    let o = fx.wait_with_output()?;
    if let Some(c) = rec {
        let o = c.wait_with_output()?;
        if !o.status.success() {
            bail!("tracer failed: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
    let text = String::from_utf8_lossy(&o.stdout);
    text.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .context("calls fixture printed no timing")
}

/// A C function's uprobe+uretprobe beside the same function's entry and RET uprobes in a
/// program that throws exceptions (no uretprobe there) and a Go function's (Go functions
/// are never given uretprobes), each plain, with empty programs, recording, and counting
/// (`tracer stat`: the C function's return probed for 1 call in 64 by its session, the
/// others' RETs on every call).
fn probe_cost(tracer: &Path, dir: &Path) -> Result<()> {
    let c = Calls {
        bin: build_fixture("calls"),
        spec: "probed",
        calls: "2000000",
    };
    // Their RET probes are single-stepped, each many times the cost of an emulated one.
    let throws = Calls {
        bin: build_cpp_fixture("callspp"),
        spec: "probed",
        calls: "200000",
    };
    let go = Calls {
        bin: build_go_fixture("gocalls"),
        spec: "main.probed",
        calls: "200000",
    };
    let languages = [
        ("C", &c, "uprobe+uretprobe"),
        ("C/throws", &throws, "entry+RET uprobes"),
        ("Go", &go, "entry+RET uprobes"),
    ];
    // Per language: plain, empty programs, recording, counting.
    let modes = [
        None,
        Some(("record", true)),
        Some(("record", false)),
        Some(("stat", false)),
    ];
    let mut rounds: [[Vec<f64>; 4]; 3] = Default::default();
    for _ in 0..ROUNDS {
        for (l, (_, calls, _)) in languages.iter().enumerate() {
            for (m, probe) in modes.iter().enumerate() {
                rounds[l][m].push(calls_run(tracer, dir, calls, *probe)?);
            }
        }
    }
    let min = |v: &[f64]| v.iter().cloned().fold(f64::MAX, f64::min);
    for (l, (name, _, probes)) in languages.iter().enumerate() {
        let [plain, empty, rec, stat] = rounds[l].each_ref().map(|v| min(v));
        let line = |label: String, ns: f64, over: String, m: usize| {
            let all: Vec<String> = rounds[l][m].iter().map(|r| format!("{r:.1}")).collect();
            println!(
                "{label:<44} {ns:>8.1} ns {over:<34} rounds {}",
                all.join(", ")
            );
        };
        line(format!("{name} plain call:"), plain, String::new(), 0);
        line(
            format!("{name} empty {probes}:"),
            empty,
            format!("(+{:.1} ns: the kernel's floor)", empty - plain),
            1,
        );
        line(
            format!("{name} recording {probes}:"),
            rec,
            format!("(+{:.1} ns)", rec - plain),
            2,
        );
        line(
            format!("{name} tracer stat (1 in 64 timed):"),
            stat,
            format!("(+{:.1} ns)", stat - plain),
            3,
        );
        println!(
            "{name} recorded / empty probe cost: {:.3}  (target <= 1.25)",
            (rec - plain) / (empty - plain)
        );
    }
    Ok(())
}

fn max_rate(tracer: &Path, dir: &Path) -> Result<()> {
    let bin = build_fixture("storm");
    for threads in [1, 2] {
        let out = dir.join("storm.trace");
        let _ = std::fs::remove_file(&out);
        let mut fx = Command::new(&bin)
            .args([&threads.to_string(), "3"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let rec = Command::new(tracer)
            .args(["record", "--quiet", "-p", &fx.id().to_string(), "-o"])
            .arg(&out)
            .stderr(Stdio::piped())
            .spawn()?;
        wait_until(Duration::from_secs(20), || file_len(&out) > 200);
        fx.stdin.take().unwrap().write_all(b"g")?;
        fx.wait()?;
        let o = rec.wait_with_output()?;
        if !o.status.success() {
            bail!("tracer failed: {}", String::from_utf8_lossy(&o.stderr));
        }
        let t = trailer(&out)?;
        let events: u64 = t.records.values().sum();
        println!(
            "{threads} thread(s): {:.2} M events/s recorded over 3 s, {} lost, {:.1} bytes/event",
            events as f64 / 3.0 / 1e6,
            t.lost,
            file_len(&out) as f64 / events.max(1) as f64
        );
    }
    Ok(())
}

/// Wall time and peak RSS (KiB) of a command run to completion. The peak comes from GNU
/// time: a child's own rusage would also count the parent's memory at the time of the
/// fork, since exec records the pre-exec size as a high-water mark.
fn timed(program: &str, args: &[&std::ffi::OsStr], stdout: Stdio) -> Result<(f64, u64)> {
    let t0 = Instant::now();
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", program])
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()?;
    let secs = t0.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("{program} failed: {err}");
    }
    let rss = err.lines().last().and_then(|l| l.trim().parse().ok());
    Ok((secs, rss.context("GNU time printed no peak RSS")?))
}

fn sync() {
    let _ = Command::new("sync").status();
}

fn count_lines(mut r: impl std::io::Read) -> Result<u64> {
    let (mut buf, mut n) = (vec![0u8; 1 << 20], 0u64);
    loop {
        let k = r.read(&mut buf)?;
        if k == 0 {
            return Ok(n);
        }
        n += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// The same server workload recorded by `tracer record` and by `perf record`, then each
/// converted by its own tool: `tracer convert` to Paraver, `perf script` to text.
fn convert_vs_perf_script(tracer: &Path, dir: &Path) -> Result<()> {
    define_perf_probes(&build_fixture("server"))?;
    let ours = one_server_run(
        tracer,
        dir,
        Mode::Tracer,
        CONVERT_LOAD_SECS,
        &ServerOptions::default(),
        false,
    );
    let theirs = one_server_run(
        tracer,
        dir,
        Mode::Perf,
        CONVERT_LOAD_SECS,
        &ServerOptions::default(),
        false,
    );
    remove_perf_probes();
    let (ours, theirs) = (ours?, theirs?);

    let (name, trace) = (dir.join("server"), dir.join("server.trace"));
    // Each conversion starts with no dirty pages and no old output to replace: otherwise
    // it pays for writing back what came before it (1.7 GB of perf.data, then 1 GB of
    // .prv) or for freeing the previous run's 1 GB .prv, together half its time here.
    for ext in ["prv", "pcf", "row"] {
        let _ = std::fs::remove_file(name.with_extension(ext));
    }
    sync();
    let (secs, rss) = timed(
        &tracer.to_string_lossy(),
        &[
            "convert".as_ref(),
            "--force".as_ref(),
            "-o".as_ref(),
            name.as_os_str(),
            trace.as_os_str(),
        ],
        Stdio::null(),
    )?;
    let ours_rate = ours.events as f64 / secs;
    if ours.events < CONVERT_MIN_EVENTS {
        println!(
            "note: the recording holds {} events, fewer than the {} M the comparison asks for",
            ours.events,
            CONVERT_MIN_EVENTS / 1_000_000
        );
    }
    println!(
        "tracer convert -> Paraver: {:>10} events in {secs:>6.2} s = {:>5.2} M events/s, peak RSS {:>7} KiB",
        ours.events,
        ours_rate / 1e6,
        rss
    );

    let text = dir.join("perf.script.txt");
    let data = dir.join("perf.data");
    sync();
    let (secs, rss) = timed(
        "perf",
        &["script".as_ref(), "-i".as_ref(), data.as_os_str()],
        std::fs::File::create(&text)?.into(),
    )?;
    let events = count_lines(std::fs::File::open(&text)?)?;
    let _ = std::fs::remove_file(&text);
    let theirs_rate = events as f64 / secs;
    println!(
        "perf script -> text:       {:>10} events in {secs:>6.2} s = {:>5.2} M events/s, peak RSS {:>7} KiB ({} events recorded)",
        events,
        theirs_rate / 1e6,
        rss,
        theirs.events
    );
    println!(
        "tracer convert / perf script events/s: {:.1}x  (target >= 10x)",
        ours_rate / theirs_rate
    );
    Ok(())
}

/// `tracer stat` adds a fixed cost per request (probes fire per call and per syscall, not
/// per unit of work), so its throughput ratio depends on what a request costs: shown for
/// handlers that compute for a known time.
/// `tracer stat` one event class at a time, each beside empty programs on the same attach
/// points (what the kernel charges for them whatever the programs do), interleaved.
fn stat_by_class(tracer: &Path, dir: &Path) -> Result<()> {
    let classes = ["calls", "sched", "syscalls", "calls,sched,syscalls"];
    let mut modes = vec![Mode::Untraced];
    for c in classes {
        modes.push(Mode::StatClasses(c, false));
        modes.push(Mode::StatClasses(c, true));
    }
    let mut runs: Vec<(Mode, Run)> = vec![];
    for _ in 0..ROUNDS {
        for &mode in &modes {
            let run = one_server_run(
                tracer,
                dir,
                mode,
                LOAD_SECS,
                &ServerOptions::default(),
                false,
            )?;
            runs.push((mode, run));
        }
    }
    let mean = |m: Mode, f: fn(&Run) -> f64| {
        let v: Vec<f64> = runs.iter().filter(|r| r.0 == m).map(|r| f(&r.1)).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let (rate, cpu) = (
        mean(Mode::Untraced, |r| r.rate),
        mean(Mode::Untraced, |r| r.cpu_per_req),
    );
    println!(
        "untraced: {rate:.0} requests/s, {:.1} us CPU/request",
        cpu / 1e3
    );
    for c in classes {
        let (on, floor) = (Mode::StatClasses(c, false), Mode::StatClasses(c, true));
        let added = |m| (mean(m, |r| r.cpu_per_req) - cpu) / 1e3;
        // A floor within the noise (none measured, or less than untraced) divides nothing.
        let ratio = match added(floor) {
            f if f >= 0.1 => format!("{:.2}", added(on) / f),
            _ => "- (floor within the noise)".into(),
        };
        println!(
            "--events {c:<21} throughput ratio {:.3} ({:+.1} us CPU/request); empty programs {:.3} ({:+.1} us); cost / floor {ratio}",
            mean(on, |r| r.rate) / rate,
            added(on),
            mean(floor, |r| r.rate) / rate,
            added(floor),
        );
    }
    // The programs' own time, in runs of their own: the statistics cost time too.
    println!("each program's own time (kernel.bpf_stats), ours / empty, under the same load:");
    for c in classes {
        let per = |empty| {
            one_server_run(
                tracer,
                dir,
                Mode::StatClasses(c, empty),
                LOAD_SECS,
                &ServerOptions::default(),
                true,
            )
        };
        let (ours, empty) = (per(false)?, per(true)?);
        println!(
            "--events {c}: {:.0} ns/request against {:.0}",
            per_request(&ours),
            per_request(&empty)
        );
        for (what, r) in [("ours", &ours), ("empty", &empty)] {
            for (name, c) in &r.programs {
                println!(
                    "  {what:<5} {name:<16} {:>6.2} runs/request x {:>4.0} ns = {:>5.0} ns/request",
                    c.runs as f64 / r.requests.max(1) as f64,
                    c.ns as f64 / c.runs.max(1) as f64,
                    c.ns as f64 / r.requests.max(1) as f64,
                );
            }
        }
    }
    Ok(())
}

/// The programs' own time per request of a run.
fn per_request(r: &Run) -> f64 {
    r.programs.values().map(|c| c.ns).sum::<u64>() as f64 / r.requests.max(1) as f64
}

fn stat_by_request_cost(tracer: &Path, dir: &Path) -> Result<()> {
    for spin_us in [20, 100, 500] {
        let opts = ServerOptions {
            spin_us,
            ..ServerOptions::default()
        };
        let (mut base, mut stat, mut floor) = (vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            let run = |mode| one_server_run(tracer, dir, mode, LOAD_SECS, &opts, false);
            base.push(run(Mode::Untraced)?);
            stat.push(run(Mode::Stat)?);
            floor.push(run(Mode::Floor)?);
        }
        let mean = |v: &[Run], f: fn(&Run) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
        let (rate, cpu) = (mean(&base, |r| r.rate), mean(&base, |r| r.cpu_per_req));
        let ratio = |v: &[Run]| mean(v, |r| r.rate) / rate;
        let added = |v: &[Run]| (mean(v, |r| r.cpu_per_req) - cpu) / 1e3;
        println!(
            "handler computing {spin_us:>3} us: untraced {rate:>7.0} requests/s ({:>6.1} us CPU/request), tracer stat throughput ratio {:.3}, +{:.1} us CPU/request; empty programs {:.3}, +{:.1} us",
            cpu / 1e3,
            ratio(&stat),
            added(&stat),
            ratio(&floor),
            added(&floor),
        );
    }
    Ok(())
}
