//! Servers as they run in production, traced by the pid a user sees: a pre-forking one
//! (master and worker processes), checked against the server's own counters. Needs root.

use std::{collections::BTreeSet, time::Duration};

use trace_file::Event;
use tracer_tests::*;

/// A master whose workers exist before the tracer attaches, and which replaces each worker
/// after 30 requests while recording: traced by the master's pid, every worker's calls are
/// in the trace, exactly as many as the server counted.
#[test]
fn a_pre_forking_server_is_traced_whole_by_its_masters_pid() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        processes: Some(3),
        max_requests: Some(30),
        ..Default::default()
    })
    .unwrap();
    let before = server.stats().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let rec = start_tracer(
        "record",
        server.pid(),
        &out,
        &["-u", "handle_request", "-u", "render_response"],
    );
    let report = load(server.port(), 24, 10, 512, 3, Duration::from_secs(20));
    let stats = server.stats().unwrap();
    stop_tracer(rec);
    server.stop().unwrap();
    assert_eq!((report.requests, report.errors), (240, 0));
    assert!(
        stats.workers >= before.workers + 6,
        "workers were replaced while recording: {before:?} {stats:?}"
    );

    let t = read_trace(&out);
    assert_eq!(t.lost, 0, "events were lost");
    let ids = probe_ids(&out);
    let entries = |id: u32| count(&t, |r| r.event == Event::FuncEntry { func: id });
    let exits = |id: u32| {
        count(
            &t,
            |r| matches!(r.event, Event::FuncExit { func, .. } if func == id),
        )
    };
    assert_eq!(before.handle_request, 0);
    for name in ["handle_request", "render_response"] {
        assert_eq!(entries(ids[name]), 240, "{name} entries");
        assert_eq!(exits(ids[name]), 240, "{name} exits");
    }
    // Worker by worker, every call the fixture counted is in the trace, in its process.
    assert_eq!(stats.handle_request, 240);
    let in_trace = |pid: u32, id: u32| {
        let tids: BTreeSet<u32> = (t.threads.iter())
            .filter(|th| th.tgid == pid)
            .map(|th| th.tid)
            .chain([pid])
            .collect();
        count(&t, |r| {
            r.event == Event::FuncEntry { func: id } && tids.contains(&r.tid)
        })
    };
    assert_eq!(
        stats.per_worker.iter().map(|w| w.1).sum::<u64>(),
        240,
        "{stats:?}"
    );
    for &(pid, handle, render) in &stats.per_worker {
        assert_eq!(in_trace(pid, ids["handle_request"]), handle, "worker {pid}");
        assert_eq!(
            in_trace(pid, ids["render_response"]),
            render,
            "worker {pid}"
        );
    }
    // The calls came from the workers of the start and from those created later.
    let callers: BTreeSet<u32> = (t.records.iter())
        .filter(|r| {
            r.event
                == Event::FuncEntry {
                    func: ids["handle_request"],
                }
        })
        .map(|r| r.tid)
        .collect();
    let created: BTreeSet<u32> = (t.records.iter())
        .filter_map(|r| match r.event {
            Event::NewTask {
                child_tid,
                child_tgid,
                ..
            } if child_tid == child_tgid => Some(child_tgid),
            _ => None,
        })
        .collect();
    // How the requests spread over the workers is the scheduler's. The three first serve
    // at most 90 of the 240, so at least 150 are served by new workers, at most 30 each:
    // at least five of them called.
    assert!(
        callers.difference(&created).count() >= 1,
        "no worker of the start called"
    );
    assert!(
        callers.intersection(&created).count() >= 5,
        "workers created while recording were not probed"
    );
    // Each process created while recording is described in the file.
    for pid in &created {
        assert!(
            t.processes.iter().any(|p| p.tgid == *pid),
            "no Process chunk for {pid}"
        );
    }
}

/// Probes attached while a function is called all the time: every call whose entry is
/// recorded has its return recorded (the return probe is live before the entry probe), and
/// calls under way at attach show only as a return without entry, never as a call that
/// lasts until the end of the trace.
#[test]
fn a_busy_function_probed_under_load_has_no_call_without_its_return() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        workers: 4,
        sleep_us: 500,
        ..Default::default()
    })
    .unwrap();
    let port = server.port();
    let load = std::thread::spawn(move || load(port, 16, 800, 256, 4, Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let rec = start_tracer(
        "record",
        server.pid(),
        &out,
        &[
            "-u",
            "handle_request",
            "-u",
            "render_response",
            "-u",
            "libc:write",
        ],
    );
    let report = load.join().unwrap();
    stop_tracer(rec);
    server.stop().unwrap();
    assert_eq!(report.errors, 0);

    let t = read_trace(&out);
    assert_eq!(t.lost, 0);
    let mut open: std::collections::HashMap<(u32, u32), u32> = Default::default();
    let (mut entries, mut exits) = (0u64, 0u64);
    for r in &t.records {
        match r.event {
            Event::FuncEntry { func } => {
                *open.entry((r.tid, func)).or_default() += 1;
                entries += 1;
            }
            Event::FuncExit { func, .. } => {
                let n = open.entry((r.tid, func)).or_default();
                // An exit without entry: the call was under way at attach.
                *n = n.saturating_sub(1);
                exits += 1;
            }
            _ => {}
        }
    }
    assert!(entries > 1000, "only {entries} calls recorded");
    let unreturned: Vec<_> = open.iter().filter(|(_, &n)| n > 0).collect();
    assert!(
        unreturned.is_empty(),
        "calls entered and never returned (thread, probe): {unreturned:?}; {entries} entries, {exits} exits"
    );
}

/// `--no-inherit` keeps to the process given: traced by its master's pid, a pre-forking
/// server's workers, those at attach and those forked later, are not traced at all.
#[test]
fn no_inherit_keeps_to_the_process_given() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        processes: Some(2),
        max_requests: Some(10),
        ..Default::default()
    })
    .unwrap();
    let master = server.pid();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let rec = start_tracer(
        "record",
        master,
        &out,
        &["--no-inherit", "-u", "handle_request"],
    );
    let report = load(server.port(), 6, 10, 512, 2, Duration::from_secs(20));
    let stats = server.stats().unwrap();
    stop_tracer(rec);
    server.stop().unwrap();
    assert_eq!((report.requests, report.errors), (60, 0));
    assert_eq!(stats.handle_request, 60);
    // Workers were replaced while recording: some forked under the tracer's eyes.
    assert!(stats.workers >= 6, "{stats:?}");

    let t = read_trace(&out);
    // The workers' own activity is absent: no system call, no probed call. (Switches and
    // wakeups name them where they meet the master: it is switched away to them, they
    // wake it with SIGCHLD.)
    let theirs: BTreeSet<u32> = (t.records.iter())
        .filter(|r| {
            r.tid != master && matches!(r.event, Event::SysEnter { .. } | Event::SysExit { .. })
        })
        .map(|r| r.tid)
        .collect();
    assert!(theirs.is_empty(), "system calls of {theirs:?}");
    assert!(
        count(&t, |r| r.tid == master
            && matches!(r.event, Event::SysEnter { .. }))
            > 0,
        "the master's own system calls are recorded"
    );
    assert_eq!(count(&t, |r| matches!(r.event, Event::FuncEntry { .. })), 0);
    assert!(
        t.processes.iter().all(|p| p.tgid == master),
        "{:?}",
        t.processes
    );
}

/// A Go server, stripped as shipped, one goroutine per connection, with a sleep in the
/// probed function so goroutines park and move between threads: probed by name from Go's
/// own tables, every call is paired by goroutine (entries = returns = the server's count)
/// and the total time is the server's own measure plus at most the probes' cost per call.
/// The server goes on serving after the tracer leaves.
#[test]
fn a_stripped_go_server_is_traced_by_goroutine() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        go: true,
        sleep_us: 300,
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let rec = start_tracer("record", server.pid(), &out, &["-u", "main.handle"]);
    let before = server.stats().unwrap();
    let report = load(server.port(), 16, 300, 2048, 8, Duration::from_secs(30));
    let during = server.stats().unwrap();
    stop_tracer(rec);
    let after_detach = load(server.port(), 4, 50, 2048, 4, Duration::from_secs(30));
    let last = server.stop().unwrap();
    assert_eq!((report.requests, report.errors), (16 * 300, 0));
    assert_eq!((after_detach.requests, after_detach.errors), (4 * 50, 0));
    assert_eq!(last.requests, during.requests + 200);

    let calls = during.handle_request - before.handle_request;
    let handle_ns = during.handle_ns - before.handle_ns;
    assert_eq!(calls, 16 * 300);
    let t = read_trace(&out);
    assert_eq!(t.lost, 0);
    let id = probe_ids(&out)["main.handle"];
    let entries = count(
        &t,
        |r| matches!(r.event, Event::GoEntry { func, .. } if func == id),
    );
    let exits = count(
        &t,
        |r| matches!(r.event, Event::GoExit { func, .. } if func == id),
    );
    assert_eq!((entries, exits), (calls, calls));
    // Goroutines, not threads, carry the calls: at least one per connection open at once
    // (a goroutine's g is reused once it exits, so 16 connections 8 at a time need not
    // show 16).
    let gs: BTreeSet<u64> = t
        .records
        .iter()
        .map(goroutine)
        .filter(|&g| g != 0)
        .collect();
    let tids: BTreeSet<u32> = (t.records.iter())
        .filter(|r| matches!(r.event, Event::GoEntry { .. }))
        .map(|r| r.tid)
        .collect();
    assert!(gs.len() >= 8, "{} goroutines", gs.len());
    // And goroutines move: calls that returned on another thread than they entered on,
    // paired by goroutine, not by thread.
    let mut by_time: Vec<&trace_file::Record> = t.records.iter().collect();
    by_time.sort_by_key(|r| r.ts);
    let mut entered_on = std::collections::HashMap::new();
    let mut moved = 0;
    for r in by_time {
        match r.event {
            Event::GoEntry { func, g, .. } if func == id => {
                entered_on.insert(g, r.tid);
            }
            Event::GoExit { func, g, .. } if func == id => {
                moved += u64::from(entered_on.remove(&g).is_some_and(|tid| tid != r.tid));
            }
            _ => {}
        }
    }
    // Measured 3,166-3,342 of the 4,800 calls (its sleep parks the goroutine, which
    // resumes on whichever thread is free): a tenth leaves wide room.
    assert!(moved >= calls / 10, "{moved} of {calls} calls moved thread");

    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    let f = s.function("main.handle").unwrap();
    assert!(f.goroutine);
    assert_eq!((f.calls, f.unfinished), (calls, 0));
    // The probes bracket the server's own clock reads: never less than its measure, and
    // more by the time from the entry probe (an emulated branch) to the server's first
    // clock read and from its last to the RET probe: within 2%, the bound
    // (measured 1.3-1.7 us a call of about 1.3 ms, 1.0010-1.0013 of the server's total).
    assert!(
        f.inclusive_ns >= handle_ns && f.inclusive_ns - handle_ns <= handle_ns / 50,
        "traced {} ns, server's own {handle_ns} ns over {calls} calls ({} threads)",
        f.inclusive_ns,
        tids.len()
    );
}

/// Go calls a panic leaves without a return, recorded (the gopanic fixture: `main.work`
/// panics on a third of its calls, `main.rec` recurses into a panic recovered two
/// levels up): each ends, unwound, where its goroutine's stack shows it gone (the next
/// call or return at or above its frame), not at the end of the trace, and the calls
/// that returned are matched to their own entries by their frames, recursion included.
#[test]
fn go_calls_left_by_a_panic_end_where_the_stack_shows_them_gone() {
    let _serial = serial();
    let bin = build_go_fixture("gopanic");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("panic.trace");
    let o = tracer_ok(&[
        "record".as_ref(),
        "--quiet".as_ref(),
        "-u".as_ref(),
        "main.work".as_ref(),
        "-u".as_ref(),
        "main.rec".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--".as_ref(),
        bin.as_os_str(),
    ]);
    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    for name in ["work", "rec"] {
        let f = s.function(&format!("main.{name}")).unwrap();
        let (called, returned) = (counted(&o, name), counted(&o, &format!("{name}_returned")));
        assert!(returned < called, "{name}: the fixture's panics");
        assert_eq!(f.calls, called, "main.{name} calls");
        assert_eq!(f.calls - f.unfinished, returned, "main.{name} returned");
        // A call sleeps 0.1-2 ms and the run takes about a second: one left open to the
        // end of the trace would last most of it.
        assert!(
            f.max_ns < 50_000_000,
            "main.{name}: a call of {} ns",
            f.max_ns
        );
    }
}

/// The goroutine of a Go record (0 for others).
fn goroutine(r: &trace_file::Record) -> u64 {
    match r.event {
        Event::GoEntry { g, .. } | Event::GoExit { g, .. } => g,
        _ => 0,
    }
}

/// Where a Go call's time went, from its goroutine's status (Go's scheduler's changes,
/// probed in `runtime.casgstatus`), as for a C function from its thread's states: a
/// handler sleeping 300 us is blocked at least that long a call; one spinning 1 ms is on
/// the CPU (or preempted, ready) that long and hardly blocked; in both, the parts add up
/// to the calls' time.
#[test]
fn a_go_calls_time_is_split_by_where_its_goroutine_was() {
    let _serial = serial();
    for (sleep_us, spin_us) in [(300, 0), (0, 1000)] {
        let server = Server::start(&ServerOptions {
            go: true,
            sleep_us,
            spin_us,
            ..Default::default()
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t.trace");
        let rec = start_tracer("record", server.pid(), &out, &["-u", "main.handle"]);
        let report = load(server.port(), 8, 100, 2048, 4, Duration::from_secs(60));
        stop_tracer(rec);
        let stats = server.stop().unwrap();
        assert_eq!((report.requests, report.errors), (800, 0));
        let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
        let f = s.function("main.handle").unwrap();
        assert_eq!(f.calls, stats.handle_request);
        assert!(f.goroutine && f.goroutine_split, "{f:?}");
        let parts = f.running_ns + f.ready_ns + f.blocked_ns + f.io_ns;
        let what = format!(
            "sleep {sleep_us} us, spin {spin_us} us: {} calls, {} ns in all, running {} ready {} blocked {} io {}",
            f.calls, f.inclusive_ns, f.running_ns, f.ready_ns, f.blocked_ns, f.io_ns
        );
        // Every part of a call's time is somewhere: measured 0.9999-1.0000.
        assert!(
            parts as f64 >= 0.99 * f.inclusive_ns as f64 && parts <= f.inclusive_ns,
            "{what}"
        );
        let calls = f.calls;
        if sleep_us > 0 {
            assert!(f.blocked_ns >= calls * sleep_us * 1000, "{what}");
            assert!(f.running_ns > 0, "{what}");
        } else {
            // A spin measured on the wall clock: on the CPU, or preempted.
            assert!(
                f.running_ns + f.ready_ns >= calls * spin_us * 1000,
                "{what}"
            );
            assert!(f.blocked_ns * 20 <= f.inclusive_ns, "{what}");
        }
        eprintln!("{what}");
    }
}

/// A Go function whose goroutine's stack grows while it recurses: the entry probe sits on
/// the stack check's branch, which every pass through the entry hits (the first, and the
/// one after each growth); the program records a call once, when the branch is not taken.
/// `main.depth(n)` makes n + 1 calls: as many entries and returns.
#[test]
fn a_go_function_whose_stack_grows_is_entered_once_per_call() {
    use std::io::{BufRead, Read, Write};
    let _serial = serial();
    let bin = build_go_fixture("goserver");
    let mut server = Reaped(
        std::process::Command::new(&bin)
            .args(["-addr", "127.0.0.1:0"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut addr = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut addr)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let rec = start_tracer("record", server.id(), &out, &["-u", "main.depth"]);
    let n = 3000u64;
    let mut s = std::net::TcpStream::connect(addr.trim()).unwrap();
    write!(s, "GET /work?n={n} HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    stop_tracer(rec);
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(reply.contains("200 OK"), "{reply}");
    let t = read_trace(&out);
    let id = probe_ids(&out)["main.depth"];
    let entries = count(
        &t,
        |r| matches!(r.event, Event::GoEntry { func, .. } if func == id),
    );
    let exits = count(
        &t,
        |r| matches!(r.event, Event::GoExit { func, .. } if func == id),
    );
    assert_eq!((entries, exits), (n + 1, n + 1));
}
