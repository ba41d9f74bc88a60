//! `tracer stat` (counting in the kernel) against the fixture's own counters and the
//! kernel's schedstat. Needs root.

use std::{
    path::Path,
    process::{Child, Command},
    time::Duration,
};

use trace_file::{ChunkKind, Event, EventChunkDecoder, Reader, StatWindow, TraceHeader, Trailer};
use tracer_tests::*;

fn start_stat_with(pid: u32, out: &Path, extra: &[&str]) -> Child {
    let mut args = vec!["-i", "300ms"];
    args.extend_from_slice(extra);
    start_tracer("stat", pid, out, &args)
}

struct StatFile {
    header: TraceHeader,
    windows: Vec<StatWindow>,
    trailer: Option<Trailer>,
    entries: u64,
    sampled_syscalls: u64,
}

fn read(path: &Path) -> StatFile {
    let mut r = Reader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut f = StatFile {
        header: TraceHeader::default(),
        windows: vec![],
        trailer: None,
        entries: 0,
        sampled_syscalls: 0,
    };
    while let Some(c) = r.next_chunk().unwrap() {
        match c.kind {
            ChunkKind::Header => f.header = c.meta().unwrap(),
            ChunkKind::Window => f.windows.push(c.meta().unwrap()),
            ChunkKind::Trailer => f.trailer = Some(c.meta().unwrap()),
            ChunkKind::Events => {
                for rec in EventChunkDecoder::new(&c.payload, c.offset).unwrap() {
                    match rec.unwrap().event {
                        Event::FuncEntry { .. } | Event::GoEntry { .. } => f.entries += 1,
                        Event::SysExit { .. } => f.sampled_syscalls += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    f
}

fn calls(f: &StatFile, id: u32) -> u64 {
    f.windows
        .iter()
        .flat_map(|w| &w.functions)
        .filter(|x| x.id == id)
        .map(|x| x.calls)
        .sum()
}

/// Of those, the calls timed, and those chosen to be timed that were not.
fn timed(f: &StatFile, id: u32) -> u64 {
    f.windows
        .iter()
        .flat_map(|w| &w.functions)
        .filter(|x| x.id == id)
        .map(|x| x.timed_calls())
        .sum()
}

fn untimed(f: &StatFile, id: u32) -> u64 {
    f.windows
        .iter()
        .flat_map(|w| &w.functions)
        .filter(|x| x.id == id)
        .map(|x| x.untimed)
        .sum()
}

#[test]
fn counts_and_running_time_agree_with_ground_truth_and_windows_add_up() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        workers: 3,
        spin_us: 1500,
        sleep_us: 3000,
        ..Default::default()
    })
    .unwrap();
    let pid = server.pid();
    let clock = RunClock::start(pid);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.stat");
    let st = start_stat_with(
        pid,
        &out,
        &["-u", "handle_request", "-u", "render_response"],
    );
    let report = load(server.port(), 6, 50, 2048, 3, Duration::from_secs(10));
    assert_eq!(report.errors, 0);
    // Idle windows too: the server's threads sleep, their clocks stand still.
    std::thread::sleep(Duration::from_millis(1000));
    let truth = clock.stop();
    stop_tracer(st);
    let stats = server.stop().unwrap();
    let f = read(&out);

    assert!(f.windows.len() >= 3, "{} windows", f.windows.len());
    for pair in f.windows.windows(2) {
        assert_eq!(
            pair[0].end_ns, pair[1].start_ns,
            "windows must tile the run"
        );
    }
    assert!(f.windows[0].start_ns <= f.header.start_ns);
    assert!(f.windows.last().unwrap().end_ns >= f.trailer.as_ref().unwrap().end_ns - 1_000_000_000);
    assert_eq!(calls(&f, 1), stats.handle_request);
    assert_eq!(calls(&f, 2), stats.render_response);
    assert_eq!(f.entries, 0, "counting mode sent per-call records");
    assert!(f.windows.iter().all(|w| w.dropped == 0));

    // The 1%. Running time is the kernel's own charge (sum_exec_runtime at each
    // switch), so it matches schedstat to the ns here, even across switch-ins no program
    // sees (docs/performance.md). From timestamps alone it was +0.03% to +1.10% (load
    // balancing in the switch-out and hypervisor steal counted as running).
    let checked = truth.check("worker", 0.01, |tid| {
        f.windows
            .iter()
            .flat_map(|w| &w.threads)
            .filter(|t| t.tid == tid)
            .map(|t| t.running_ns)
            .sum()
    });
    assert_eq!(checked, 3);
    // Each run begins with a wait for a CPU: the kernel counts them as the scheduler does.
    let checked = truth.check_runs("worker", 0.01, |tid| {
        (f.windows.iter())
            .flat_map(|w| &w.threads)
            .filter(|t| t.tid == tid)
            .map(|t| t.wait_hist.iter().sum::<u64>())
            .sum()
    });
    assert_eq!(checked, 3);
    // The acceptor read 300 requests' worth of syscalls: accept4 results are all there.
    let accepts: u64 = f
        .windows
        .iter()
        .flat_map(|w| &w.syscalls)
        .filter(|s| s.nr == 288)
        .map(|s| s.calls - s.errors)
        .sum();
    assert_eq!(accepts, stats.connections);
    // Each call's time goes to its thread and to its system call number alike.
    let by_thread: u64 = f
        .windows
        .iter()
        .flat_map(|w| &w.threads)
        .map(|t| t.syscall_ns)
        .sum();
    let by_call: u64 = f
        .windows
        .iter()
        .flat_map(|w| &w.syscalls)
        .map(|s| s.total_ns)
        .sum();
    assert!(by_call > 0);
    assert_eq!(by_thread, by_call);
    // Every call whose entry was seen is in its number's histogram: all but those under
    // way at attach, one a thread at most.
    let (counted, in_hist) = (f.windows.iter().flat_map(|w| &w.syscalls))
        .fold((0, 0), |(c, h), s| {
            (c + s.calls, h + s.buckets.iter().map(|b| b.1).sum::<u64>())
        });
    let threads = (f.windows.iter().flat_map(|w| &w.threads))
        .map(|t| t.tid)
        .collect::<std::collections::BTreeSet<_>>();
    assert!(in_hist <= counted && counted - in_hist <= threads.len() as u64);

    // `tracer summary` reads stat files with the same figures.
    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    assert_eq!(
        s.function("handle_request").unwrap().calls,
        stats.handle_request
    );
    assert_eq!(s.syscall("accept4").unwrap().calls, stats.connections);
    // Each request sleeps 3 ms: the median sleep, read from a bucket an eighth of its power
    // of two wide, no shorter than that less a sixteenth; longer by the timer's slack
    // (50 us) and the wait for a CPU after the wakeup (medians of 3.08-3.41 ms measured,
    // the longer with fuzzers beside; a job at the same priority on both CPUs can make a
    // woken worker wait out its slices): under 5 ms, which a median read from the wrong
    // bucket or at twice its value (6 ms) would not be. The buckets' precision is checked
    // against a recording in the sampling test below.
    let sleep = s.syscall("clock_nanosleep").unwrap();
    assert_eq!(sleep.calls, stats.handle_request);
    assert!(
        (2_812_500..5_000_000).contains(&sleep.p50_ns) && sleep.p99_ns <= sleep.max_ns,
        "{sleep:?}"
    );
    let workers_running: u64 = s
        .threads()
        .iter()
        .filter(|t| t.name.starts_with("worker"))
        .map(|t| t.running_ns)
        .sum();
    // The spins are CPU time the kernel charged (measured 2.08-2.09x the nominal, the
    // workers' own work beside the spins): two thirds of it is a floor nothing undercuts.
    assert!(workers_running > 3 * 50 * 1_500_000 * 2 / 3);
    // Waits for a CPU, counted and by length.
    let worker = (s.threads().iter())
        .find(|t| t.name.starts_with("worker"))
        .unwrap();
    assert!(worker.ready_waits.is_some_and(|n| n > 0), "{worker:?}");
    assert!(worker.ready_p99_ns <= worker.ready_max_ns && worker.ready_p99_ns > Some(0));
}

#[test]
fn sampling_records_one_call_in_n_in_full() {
    let _serial = serial();
    let server = Server::start(&ServerOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.stat");
    let st = start_stat_with(
        server.pid(),
        &out,
        &["-u", "handle_request", "--sample", "10"],
    );
    load(server.port(), 4, 100, 512, 4, Duration::from_secs(10));
    stop_tracer(st);
    let stats = server.stop().unwrap();
    let f = read(&out);
    assert_eq!(calls(&f, 1), stats.handle_request);
    // One in ten per CPU: the first of every ten calls on each CPU.
    let cpus = f.header.cpus as u64;
    let expect = stats.handle_request / 10;
    assert!(
        f.entries + cpus >= expect && f.entries <= expect + cpus,
        "{} sampled of {} calls",
        f.entries,
        stats.handle_request
    );
    // Inside a sampled call the handler's syscalls are recorded too (open, read, close, write).
    assert!(
        f.sampled_syscalls >= f.entries * 4,
        "{f_s} syscalls",
        f_s = f.sampled_syscalls
    );
    // The sampled calls convert like a trace's.
    tracer_ok(&[
        "convert".as_ref(),
        "--to".as_ref(),
        "chrome".as_ref(),
        out.as_os_str(),
    ]);
    let c = trace_testkit::check::chrome::check(&dir.path().join("s.json"))
        .unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert_eq!(c.slices["function"], f.entries);
    // And into flame graph stacks, with the sampled calls' time under the handler.
    tracer_ok(&[
        "convert".as_ref(),
        "--to".as_ref(),
        "folded".as_ref(),
        out.as_os_str(),
    ]);
    let text = std::fs::read_to_string(dir.path().join("s.folded")).unwrap();
    let in_handler: u64 = (text.lines())
        .filter(|l| l.contains(";handle_request;"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert!(in_handler > 0, "{text}");
}

#[test]
fn a_stat_killed_with_sigkill_reads_back() {
    let _serial = serial();
    let server = Server::start(&ServerOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.stat");
    let st = start_stat_with(server.pid(), &out, &["-u", "handle_request"]);
    load(server.port(), 2, 50, 512, 2, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: killing our own child.
    unsafe { libc::kill(st.id() as i32, libc::SIGKILL) };
    let _ = st.wait_with_output();
    let stats = server.stop().unwrap();
    let f = read(&out);
    assert!(f.trailer.is_none());
    assert!(!f.windows.is_empty());
    assert!(calls(&f, 1) <= stats.handle_request);
    let dump = Command::new(tracer_bin())
        .arg("dump")
        .arg(&out)
        .output()
        .unwrap();
    assert!(dump.status.success());
    // Counts only, no sampled calls: nothing to convert, and one line says so.
    let conv = Command::new(tracer_bin())
        .arg("convert")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&conv.stderr);
    assert!(!conv.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("counting-mode file"), "{err}");
    assert!(!dir.path().join("s.prv").exists());
}

/// handle_request's share of time running, blocked and ready, from a record or stat file.
fn handler_split(file: &Path) -> (f64, f64, f64) {
    let s = trace_summary::summarize(std::slice::from_ref(&file.to_path_buf())).unwrap();
    let h = s.function("handle_request").unwrap();
    let total = h.inclusive_ns as f64;
    (
        h.running_ns as f64 / total,
        h.blocked_ns as f64 / total,
        h.ready_ns as f64 / total,
    )
}

#[test]
fn a_sampled_state_split_agrees_with_a_full_trace() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&ServerOptions {
        workers: 4,
        spin_us: 1000,
        sleep_us: 2000,
        ..Default::default()
    })
    .unwrap();
    // Both tracers watch the same run: the split depends on how busy the machine is, so
    // two runs one after the other need not agree, while two views of one run must.
    let (full, sampled) = (dir.path().join("r.trace"), dir.path().join("s.stat"));
    let uprobe = ["-u", "handle_request"];
    let recorder = start_tracer("record", server.pid(), &full, &uprobe);
    let counter = start_tracer(
        "stat",
        server.pid(),
        &sampled,
        &[&uprobe[..], &["--sample", "2", "-i", "1s"]].concat(),
    );
    // About 800 sampled calls of 1600. With a compile job beside, a call's share of time
    // ready varies from nothing to most of it, in bursts: at --sample 5 (320 calls) the
    // estimate was 0.077 off the full trace's once in 12 runs of the suite; a sample 2.5
    // times larger divides the sampling error by 1.6, and 0.08 leaves room beyond that.
    load(server.port(), 8, 200, 512, 2, Duration::from_secs(40));
    stop_tracer(counter);
    stop_tracer(recorder);
    server.stop().unwrap();
    let (run_full, blocked_full, ready_full) = handler_split(&full);
    let (run_est, blocked_est, ready_est) = handler_split(&sampled);
    assert!(
        (run_full - run_est).abs() < 0.08 && (blocked_full - blocked_est).abs() < 0.08,
        "full trace: running {run_full:.3} blocked {blocked_full:.3} ready {ready_full:.3}; sampled estimate: running {run_est:.3} blocked {blocked_est:.3} ready {ready_est:.3}"
    );
    // Each worker's 99th percentile wait for a CPU: the kernel's log2 buckets (each wait
    // counted at its bucket's middle: within 1.5x) against every wait of the trace.
    let summary = |p: &Path| trace_summary::summarize(&[p.to_path_buf()]).unwrap();
    let (sf, ss) = (summary(&full), summary(&sampled));
    let mut checked = 0;
    for t in ss.threads().iter().filter(|t| t.name.starts_with("worker")) {
        let r = sf.thread(t.tid).unwrap();
        let (Some(est), Some(exact)) = (t.ready_p99_ns, r.ready_p99_ns) else {
            panic!("{t:?}");
        };
        eprintln!("{}: p99 wait {est} ns counted, {exact} ns traced", t.name);
        if r.ready_waits.unwrap_or(0) >= 200 {
            // Measured 0.80-1.44 over 16 workers in 5 runs (log2 buckets, read at their
            // middles: within 1.5x by construction, and the p99 of two counts of waits).
            let ratio = est as f64 / exact.max(1) as f64;
            assert!((0.5..=2.0).contains(&ratio), "{}: {est} vs {exact}", t.name);
            checked += 1;
        }
    }
    assert!(checked >= 2, "{checked} workers with enough waits");
}

/// More threads come and go than the kernel's per-thread maps can hold at once: each is
/// reported after it exits and then removed, so nothing is dropped however long it runs.
#[test]
fn thread_churn_beyond_the_maps_capacity_keeps_memory_flat() {
    use std::io::Write;
    let _serial = serial();
    // Thread ids must not wrap around below the maps' capacity, or the test proves nothing.
    let _pid_max = PidMax::at_least(1 << 22);
    let threads = tracer_abi::MAX_THREADS as u64 + 4_464;
    let mut fx = Command::new(build_fixture("churn"))
        .arg(threads.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("churn.stat");
    let st = start_tracer("stat", fx.id(), &out, &["-i", "200ms"]);
    fx.stdin.take().unwrap().write_all(b"x").unwrap();
    let done = fx.wait_with_output().unwrap();
    assert!(done.status.success(), "{done:?}");
    stop_tracer(st);
    let f = read(&out);
    let dropped = f.windows.iter().map(|w| w.dropped).max().unwrap_or(0);
    assert_eq!(dropped, 0, "updates dropped for want of room");
    // Each thread's one getppid, counted.
    let getppid: u64 = f
        .windows
        .iter()
        .flat_map(|w| &w.syscalls)
        .filter(|s| s.nr == 110)
        .map(|s| s.calls)
        .sum();
    assert_eq!(getppid, threads);
    // And each thread reported, under its own id: more of them than the maps hold.
    let mut seen: Vec<u32> = f
        .windows
        .iter()
        .flat_map(|w| &w.threads)
        .filter(|t| t.syscalls > 0)
        .map(|t| t.tid)
        .collect();
    seen.sort();
    seen.dedup();
    assert!(seen.len() as u64 >= threads, "{} threads seen", seen.len());
}

/// A long run in several files: each is complete, the windows go on from one file to the
/// next, all of them together count every call, and `--keep` bounds how many stay.
#[test]
fn rotated_files_are_complete_and_add_up() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let args = ["-u", "handle_request", "-i", "250ms", "--rotate", "1s"];
    let (paths, stats) = rotated_run("stat", dir.path(), "prod.stat", &args);
    let files: Vec<StatFile> = paths.iter().map(|p| read(p)).collect();
    let mut calls_total = 0;
    for (i, f) in files.iter().enumerate() {
        let name = paths[i].file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("prod-") && name.ends_with("Z.stat"),
            "{name}"
        );
        assert_eq!(f.header.mode, "stat");
        let reason = &f.trailer.as_ref().expect("every file is finished").reason;
        let last = i + 1 == files.len();
        assert_eq!(reason, if last { "signal" } else { "rotated" }, "{name}");
        assert!(!f.windows.is_empty(), "{name}");
        // The next file takes over where this one ends.
        if let Some(next) = files.get(i + 1) {
            assert_eq!(next.header.start_ns, f.windows.last().unwrap().end_ns);
            assert_eq!(next.windows[0].start_ns, f.windows.last().unwrap().end_ns);
        }
        calls_total += calls(f, 1);
    }
    assert_eq!(calls_total, stats.handle_request);
    let s = trace_summary::summarize(&paths).unwrap();
    assert_eq!(
        s.function("handle_request").unwrap().calls,
        stats.handle_request
    );

    // --keep 2: the newest two stay.
    let server = Server::start(&ServerOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("k.stat");
    let args = ["-i", "250ms", "--rotate", "1s", "--keep", "2"];
    let st = start_tracer_writing("stat", server.pid(), &base, &args, || {
        first_file(dir.path())
    });
    std::thread::sleep(Duration::from_millis(4500));
    stop_tracer(st);
    server.stop().unwrap();
    let left = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(left, 2);
}

/// Uprobe sessions count every call at its entry whatever share is timed; the timed calls'
/// latencies agree with those of a counter attached to the same server at the same time
/// with every call timed: its p50 and p99 within the estimates' 95% intervals. That
/// counter's percentiles, from the kernel's buckets, are those of a recording of the
/// same calls made beside it within 10% (a bucket is an eighth of its power of two wide,
/// the summary's own a thirty-second).
#[test]
fn counts_are_exact_at_any_sampling_and_sampled_latencies_agree_with_exact_ones() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        workers: 4,
        sleep_us: 1000,
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let probes = ["-u", "handle_request", "-u", "render_response"];
    let runs: Vec<(String, Child)> = ["1", "7", "64"]
        .into_iter()
        .map(|n| {
            let out = dir.path().join(format!("every-{n}.stat"));
            let mut extra = vec!["--time-every", n];
            extra.extend(probes);
            (n.to_string(), start_stat_with(server.pid(), &out, &extra))
        })
        .collect();
    // And a budget: at most 100 timed calls a second of each function.
    let budget_out = dir.path().join("budget.stat");
    let mut extra = vec!["--time-budget", "100"];
    extra.extend(probes);
    let budget_start = std::time::Instant::now();
    let budget = start_stat_with(server.pid(), &budget_out, &extra);
    let trace = dir.path().join("every.trace");
    let recorder = start_tracer("record", server.pid(), &trace, &probes);
    // 4,800 calls, about 2 s: some 75 timed at one in 64, and the budget's (13 a CPU and
    // window of 268 ms) mostly spread over 8 windows rather than the first, where it
    // times consecutive calls that one burst of slow ones can hit together.
    let report = load(server.port(), 8, 600, 256, 4, Duration::from_secs(60));
    let stats = server.stats().unwrap();
    stop_tracer(recorder);
    stop_tracer(budget);
    let elapsed = budget_start.elapsed();
    let mut summaries = Vec::new();
    for (n, child) in runs {
        stop_tracer(child);
        let out = dir.path().join(format!("every-{n}.stat"));
        let f = read(&out);
        assert_eq!(calls(&f, 1), stats.handle_request, "--time-every {n}");
        assert_eq!(calls(&f, 2), stats.render_response, "--time-every {n}");
        let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
        let timed = s.function("handle_request").unwrap().timed_calls;
        let every: u64 = n.parse().unwrap();
        // One call in N per function and CPU: within a call per CPU of calls / N.
        let cpus = f.header.cpus as u64;
        assert!(
            timed.abs_diff(stats.handle_request / every) <= cpus,
            "--time-every {n}: {timed} timed of {}",
            stats.handle_request
        );
        summaries.push(s);
    }
    {
        let f = read(&budget_out);
        assert_eq!(calls(&f, 1), stats.handle_request, "--time-budget");
        let s = trace_summary::summarize(std::slice::from_ref(&budget_out)).unwrap();
        let timed = s.function("handle_request").unwrap().timed_calls;
        // The programs' allowance: 100 a second shared by the CPUs, in windows of 2^28
        // ns, at least one per CPU and window; a window begun counts whole.
        let cpus = f.header.cpus as u64;
        let allowance = (100u64 << 28) / (1_000_000_000 * cpus);
        let windows = (elapsed.as_nanos() as u64 >> 28) + 2;
        let bound = allowance.max(1) * cpus * windows;
        assert!(
            (1..=bound).contains(&timed) && timed < stats.handle_request,
            "--time-budget 100: {timed} timed of {} calls in {elapsed:?} (at most {bound})",
            stats.handle_request
        );
        summaries.push(s);
    }
    server.stop().unwrap();
    assert_eq!(report.errors, 0);
    let exact = summaries[0].function("handle_request").unwrap().clone();
    assert!(!exact.estimated && exact.timed_calls == exact.calls);
    let recorded = trace_summary::summarize(std::slice::from_ref(&trace)).unwrap();
    let recorded = recorded.function("handle_request").unwrap();
    assert_eq!(recorded.calls, stats.handle_request);
    // Measured 1.000-1.029 (p50) and 1.000-1.024 (p99) in 4 runs.
    for (q, counted, truth) in [
        ("p50", exact.p50_ns, recorded.p50_ns),
        ("p99", exact.p99_ns, recorded.p99_ns),
    ] {
        let r = counted as f64 / truth as f64;
        assert!(
            (0.9..=1.1).contains(&r),
            "{q}: counted {counted} ns, recorded {truth} ns ({r:.3})"
        );
    }
    for s in &summaries[1..] {
        let f = s.function("handle_request").unwrap();
        assert!(f.estimated);
        // The exact percentiles within the estimate's 95% intervals, widened: a 95%
        // interval alone would fail one check in forty by design. Over 12 checks of each
        // (4 runs, 3 samplings) the exact p50 was 1.062-1.131 of the interval's bounds
        // inside them, the exact p99 down to 0.909 of its lower bound (a p99 from 19 to
        // 171 timed calls, 1,200 calls then): an eighth each way for p50, a quarter for
        // p99. With 1,200 calls the budget's sample was mostly its first window's, once
        // 52 calls whose interval started at 2.83 ms where every call's p99 was 1.90 ms.
        // At 4,800 calls (5 runs, 75-76 and 130-145 timed): the exact p99 1.01-1.08 of
        // the lower bounds, the totals 0.996-1.026.
        for (q, ci, truth, slack) in [
            ("p50", f.p50_ci_ns.unwrap(), exact.p50_ns, 8),
            ("p99", f.p99_ci_ns.unwrap(), exact.p99_ns, 4),
        ] {
            eprintln!(
                "{q}: exact {truth} ns, interval {ci:?} from {} timed calls",
                f.timed_calls
            );
            assert!(
                ci[0] - ci[0] / slack <= truth && truth <= ci[1].saturating_add(ci[1] / slack),
                "{q}: exact {truth} ns outside {ci:?} from {} timed calls",
                f.timed_calls
            );
        }
        // The estimated total time, scaled from the timed calls, is the exact one's
        // within the spread of a 1 ms sleep (measured 0.95-1.045 in 12 checks).
        let r = f.inclusive_ns as f64 / exact.inclusive_ns as f64;
        eprintln!("estimated total {r:.3} of the exact");
        assert!(
            (0.8..=1.25).contains(&r),
            "estimated total {r:.3} of the exact"
        );
    }
}

/// A stripped Go server, a goroutine per connection, its handler sleeping so goroutines
/// park and move between threads, counted by three tracers at once: every call timed
/// (`--exact-latency`), the default one in 64, and a budget with `--sample`, which does
/// not record Go calls in full and says so. Counts are the server's own exactly; the
/// exact run's time is the server's own clock plus at most the probes' cost; the server
/// serves on after the tracers leave and exits cleanly. A Go function whose returns
/// cannot be probed (assembly) is refused in one line.
#[test]
fn go_functions_are_counted_exactly_and_timed_by_goroutine() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        go: true,
        sleep_us: 300,
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let refused = Command::new(tracer_bin())
        .args(["stat", "-q", "-d", "1s", "-u", "runtime.memmove", "-o"])
        .arg(dir.path().join("asm.stat"))
        .args(["--pid", &server.pid().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot probe the returns of Go function runtime.memmove"),
        "{err}"
    );

    let runs = [
        ("exact", vec!["--exact-latency"]),
        ("every", vec![]),
        ("budget", vec!["--time-budget", "100", "--sample", "5"]),
    ];
    let started = std::time::Instant::now();
    let tracers: Vec<Child> = (runs.iter())
        .map(|(name, extra)| {
            let out = dir.path().join(format!("{name}.stat"));
            let mut args = vec!["-u", "main.handle"];
            args.extend(extra);
            start_stat_with(server.pid(), &out, &args)
        })
        .collect();
    let before = server.stats().unwrap();
    let report = load(server.port(), 16, 300, 2048, 8, Duration::from_secs(60));
    let during = server.stats().unwrap();
    let elapsed = started.elapsed();
    let stderr: Vec<String> = (tracers.into_iter())
        .map(|c| String::from_utf8_lossy(&stop_tracer(c).stderr).into_owned())
        .collect();
    let after = load(server.port(), 4, 50, 2048, 4, Duration::from_secs(30));
    let last = server.stop().expect("the Go server exits cleanly");
    assert_eq!((report.requests, report.errors), (16 * 300, 0));
    assert_eq!((after.requests, after.errors), (4 * 50, 0));
    assert_eq!(last.requests, during.requests + 200);
    assert_eq!(before.handle_request, 0);
    let calls_made = during.handle_request;
    assert_eq!(calls_made, 16 * 300);

    let files: Vec<StatFile> = (runs.iter())
        .map(|(name, _)| read(&dir.path().join(format!("{name}.stat"))))
        .collect();
    for (f, (name, _)) in files.iter().zip(&runs) {
        assert_eq!(calls(f, 1), calls_made, "{name}: calls");
        assert!(timed(f, 1) <= calls_made, "{name}: timed");
        assert!(f.windows.iter().all(|w| w.dropped == 0), "{name}: dropped");
        assert_eq!(f.entries, 0, "{name}: per-call records");
    }
    let cpus = files[0].header.cpus as u64;

    // Every call timed: the probes bracket the server's own clock reads, so the time is
    // never less than its measure, and more by at most 2% (measured 1.0016-1.0023 of it;
    // see tests/servers.rs).
    assert_eq!(timed(&files[0], 1), calls_made);
    let summary = |name: &str| {
        let path = dir.path().join(format!("{name}.stat"));
        let s = trace_summary::summarize(std::slice::from_ref(&path)).unwrap();
        s.function("main.handle").unwrap().clone()
    };
    let exact = summary("exact");
    assert!(exact.goroutine && !exact.estimated);
    let handle_ns = during.handle_ns - before.handle_ns;
    assert!(
        exact.inclusive_ns >= handle_ns && exact.inclusive_ns - handle_ns <= handle_ns / 50,
        "counted {} ns, the server's own {handle_ns} ns over {calls_made} calls",
        exact.inclusive_ns
    );
    // The 300 us sleep bounds every call from below, to within the buckets' resolution
    // (a duration is placed within a sixteenth of its power of two).
    assert!(exact.min_ns >= 300_000 - 300_000 / 16, "{exact:?}");

    // One call in 64 per CPU, its time scaled by the exact count (measured 0.964-1.032 of
    // the exact in 4 runs).
    let every = summary("every");
    assert!(
        every.timed_calls.abs_diff(calls_made / 64) <= cpus,
        "{} timed of {calls_made}",
        every.timed_calls
    );
    assert!(every.estimated);
    let r = every.inclusive_ns as f64 / exact.inclusive_ns as f64;
    assert!(
        (0.8..=1.25).contains(&r),
        "estimated total {r:.3} of the exact"
    );

    // The budget, as for sessions (see the test above); --sample leaves Go calls out.
    let allowance = (100u64 << 28) / (1_000_000_000 * cpus);
    let windows = (elapsed.as_nanos() as u64 >> 28) + 2;
    let bound = allowance.max(1) * cpus * windows;
    let budgeted = timed(&files[2], 1);
    assert!(
        (1..=bound).contains(&budgeted) && budgeted < calls_made,
        "--time-budget 100: {budgeted} timed (at most {bound})"
    );
    assert!(
        stderr[2].contains(
            "--sample records no call of functions whose returns are probed at their instructions"
        ) && stderr[2].contains("main.handle"),
        "{}",
        stderr[2]
    );
}

/// Go calls a panic leaves without a return: `main.work` panics on a third of its calls
/// (recovered by its caller), and `main.rec` recurses into a panic recovered two levels
/// up, so two of each round's five calls never return. Counting mode matches a return to
/// its call by where the frame is on the goroutine's stack, so the calls left behind are
/// dropped: with every call timed, the timed calls are exactly those that returned, by
/// the fixture's own counts, and none is "chosen but not timed" (before, the calls left
/// open filled the slots of nested calls and most later calls went untimed).
#[test]
fn go_calls_left_by_a_recovered_panic_do_not_hold_up_the_others() {
    let _serial = serial();
    let bin = build_go_fixture("gopanic");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("panic.stat");
    let out = tracer_ok(&[
        "stat".as_ref(),
        "--quiet".as_ref(),
        "--exact-latency".as_ref(),
        "-u".as_ref(),
        "main.work".as_ref(),
        "-u".as_ref(),
        "main.rec".as_ref(),
        "-o".as_ref(),
        path.as_os_str(),
        "--".as_ref(),
        bin.as_os_str(),
    ]);
    let ids = probe_ids(&path);
    let f = read(&path);
    for name in ["work", "rec"] {
        let id = ids[&format!("main.{name}")];
        let returned = counted(&out, &format!("{name}_returned"));
        let called = counted(&out, name);
        assert!(returned < called, "{name}: the fixture's panics");
        assert_eq!(calls(&f, id), called, "main.{name} calls");
        assert_eq!(timed(&f, id), returned, "main.{name} timed calls");
        assert_eq!(untimed(&f, id), 0, "main.{name} calls chosen but not timed");
    }
}

/// The same through C++ exceptions (the throws fixture: `leaf` throws on a third of its
/// calls, through `middle`; `rec`'s exception is caught two levels up; `hop` leaves by a
/// tail call, `thunk` is one and `nothing` a return alone). The program throws, so its functions' returns are probed at their
/// instructions, paired by frame on each thread's stack: every call counted, the timed
/// ones exactly those that returned (`hop`'s all of them, by its jump), none chosen but
/// not timed; and the program runs to its end, where a uretprobe would end it.
#[test]
fn native_calls_left_by_an_exception_do_not_hold_up_the_others() {
    let _serial = serial();
    let bin = build_cpp_fixture("throws");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("throws.stat");
    let mut args: Vec<&std::ffi::OsStr> = vec!["stat".as_ref(), "--exact-latency".as_ref()];
    let framed = ["leaf", "middle", "hop", "thunk", "nothing", "rec"];
    for f in framed {
        args.extend::<[&std::ffi::OsStr; 2]>(["-u".as_ref(), f.as_ref()]);
    }
    args.extend::<[&std::ffi::OsStr; 4]>([
        "-o".as_ref(),
        path.as_os_str(),
        "--".as_ref(),
        bin.as_os_str(),
    ]);
    let out = tracer_ok(&args);
    let ids = probe_ids(&path);
    let f = read(&path);
    for name in framed {
        let id = ids[name];
        let called = counted(&out, name);
        let returned = match name {
            "hop" | "thunk" | "nothing" => called,
            _ => counted(&out, &format!("{name}_returned")),
        };
        assert_eq!(calls(&f, id), called, "{name} calls");
        assert_eq!(timed(&f, id), returned, "{name} timed calls");
        assert_eq!(untimed(&f, id), 0, "{name} calls chosen but not timed");
    }
    assert!(counted(&out, "leaf_returned") < counted(&out, "leaf"));
}

/// A program that switches stacks (the coroutines fixture: `step` returns on a stack
/// switched away from and back to, and the other coroutine's `step` enters in between,
/// at a frame of another stack): counting mode pairs each call with its return by its
/// exact frame, so every call is timed, none dropped for a frame of the other stack.
#[test]
fn calls_across_stack_switches_are_all_timed() {
    let _serial = serial();
    let bin = build_fixture("coroutines");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("co.stat");
    let out = tracer_ok(&[
        "stat".as_ref(),
        "--quiet".as_ref(),
        "--exact-latency".as_ref(),
        "-u".as_ref(),
        "step".as_ref(),
        "-u".as_ref(),
        "leaf".as_ref(),
        "-o".as_ref(),
        path.as_os_str(),
        "--".as_ref(),
        bin.as_os_str(),
        "1000".as_ref(),
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("CALLS 2000"));
    let (ids, f) = (probe_ids(&path), read(&path));
    for name in ["step", "leaf"] {
        let id = ids[name];
        assert_eq!(calls(&f, id), 2000, "{name} calls");
        assert_eq!(timed(&f, id), 2000, "{name} timed calls");
        assert_eq!(untimed(&f, id), 0, "{name} calls chosen but not timed");
    }
}

/// A recursive Go function whose goroutine's stack grows (`main.depth(n)`: n + 1 calls):
/// counted exactly at every level. With every call timed, each return closes its own
/// call and the outermost one the whole: the calls timed are the
/// `tracer_abi::FRAME_LEVELS` outermost of each request's recursion, the others counted as
/// chosen but not timed, which the summary says. At one in 64, as many are chosen. A
/// call timed in a later window than the one it entered keeps its time. The server runs
/// on.
#[test]
fn a_recursive_go_function_is_counted_at_every_level() {
    use std::io::{BufRead, Read, Write};
    let _serial = serial();
    let bin = build_go_fixture("goserver");
    let mut server = Reaped(
        Command::new(&bin)
            .args(["-addr", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut addr = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut addr)
        .unwrap();
    let get = |n: u64| {
        let mut s = std::net::TcpStream::connect(addr.trim()).unwrap();
        write!(s, "GET /work?n={n} HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.contains("200 OK"), "{reply}");
    };
    let dir = tempfile::tempdir().unwrap();
    let (exact, every) = (dir.path().join("exact.stat"), dir.path().join("every.stat"));
    // Short windows: the deepest call (a few hundred ms with its probes) enters in one
    // and returns in another, where its time must still be.
    let probe = ["-u", "main.depth", "-i", "50ms"];
    let a = start_tracer(
        "stat",
        server.id(),
        &exact,
        &[&probe[..], &["--exact-latency"]].concat(),
    );
    let b = start_tracer("stat", server.id(), &every, &probe);
    let ns = [0u64, 1, 2, 5, 7, 8, 20, 3000, 3, 20000];
    for &n in &ns {
        get(n);
    }
    stop_tracer(a);
    stop_tracer(b);
    get(10);
    assert!(server.try_wait().unwrap().is_none(), "the Go server died");
    server.kill().unwrap();
    server.wait().unwrap();

    let want: u64 = ns.iter().map(|n| n + 1).sum();
    let levels = tracer_abi::FRAME_LEVELS as u64;
    let want_timed: u64 = ns.iter().map(|n| (n + 1).min(levels)).sum();
    let (fe, fv) = (read(&exact), read(&every));
    assert_eq!(calls(&fe, 1), want);
    assert_eq!(calls(&fv, 1), want);
    assert_eq!(timed(&fe, 1), want_timed);
    assert_eq!(untimed(&fe, 1), want - want_timed);
    let cpus = fe.header.cpus as u64;
    let chosen = timed(&fv, 1) + untimed(&fv, 1);
    assert!(
        chosen.abs_diff(want / 64) <= cpus && timed(&fv, 1) >= 1,
        "{chosen} chosen of {want}"
    );
    let s = trace_summary::summarize(std::slice::from_ref(&exact)).unwrap();
    assert!(
        s.notes
            .iter()
            .any(|n| n.starts_with("main.depth: ") && n.contains("lean to the outer calls")),
        "{:?}",
        s.notes
    );
    // The outermost call of a 3001-deep recursion holds all of it: the longest.
    let f = s.function("main.depth").unwrap();
    assert!(f.max_ns >= f.p50_ns && f.max_ns > 0, "{f:?}");
}

/// Counting mode's probes in a library are uprobe sessions of one process each, which a
/// fork does not inherit: of processes forked one after another, each calling getppid()
/// 5 times as soon as it ran, 11 of 500 calls were counted when each waited for its own
/// session. Their calls are counted by an entry probe that forks inherit: in a storm of
/// processes (tests/fixtures/forkstorm.c: each calls work(), which calls libc's
/// syscall(), as soon as it runs), every call in the library and in the executable, as
/// many as the fixture forked processes; and none is said to have got its probes late.
/// With `--exact-latency`, every one of them timed too.
#[test]
fn calls_of_processes_forked_while_counting_are_all_counted() {
    let _serial = serial();
    for exact in [false, true] {
        let mut fx = Piped::spawn(&build_fixture("forkstorm"), &["200", "0"]);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("f.stat");
        let mut args = vec!["-u", "libc:syscall", "-u", "work"];
        if exact {
            args.push("--exact-latency");
        }
        let st = start_stat_with(fx.pid(), &out, &args);
        fx.send(b"g");
        let forks = fx.numbers("FORKS", Duration::from_secs(60))[0];
        let said = stop_tracer_within(st, Duration::from_secs(20));
        let said = String::from_utf8_lossy(&said.stderr);
        assert!(fx.wait(Duration::from_secs(10)).success());
        assert_eq!(forks, 200, "forks failed in the fixture");
        let ids = probe_ids(&out);
        let f = read(&out);
        for name in ["syscall", "work"] {
            assert_eq!(calls(&f, ids[name]), forks, "{name}, exact {exact}: {said}");
            if exact {
                assert_eq!(timed(&f, ids[name]), forks, "{name} timed: {said}");
            }
        }
        assert!(!said.contains("late"), "{said}");
    }
}

/// The calls timed are one in N, each at an offset drawn in its block of N calls: a
/// function failing every other call (tests/fixtures/returns.c's `check`, as a
/// non-blocking accept does with EAGAIN) had all its timed calls of one parity under a
/// fixed one in 64, and 0 errors estimated where half failed (Erlang's and coturn's
/// libc calls in a server sweep). Estimated now about half, as counted by the fixture.
#[test]
fn errors_of_calls_alternating_in_kind_are_estimated_without_aliasing() {
    let _serial = serial();
    let bin = build_fixture("returns");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.stat");
    let mut cmd = Command::new(tracer_bin());
    cmd.args(["stat", "-q", "--events", "calls", "-u", "check", "-o"]);
    let o = cmd
        .arg(&out)
        .arg("--")
        .arg(&bin)
        .arg("64000")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let failed = counted(&o, "CHECK_FAILED");
    assert_eq!(failed, 32_000);
    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    let f = s.function("check").unwrap();
    assert_eq!(f.calls, 64_000);
    assert!(
        f.estimated && f.timed_calls >= 900,
        "{} timed",
        f.timed_calls
    );
    // 1,000 timed calls, half failing: 40-60% is over 6 standard deviations each way.
    let share = f.errors as f64 / f.calls as f64;
    assert!(
        (0.4..=0.6).contains(&share),
        "{} errors estimated of {} calls from {} timed",
        f.errors,
        f.calls,
        f.timed_calls
    );
}
