//! `tracer convert` on real recordings of the fixture server: the Paraver output obeys
//! every rule of Paraver's reader and the Trace Event Format output every rule of its
//! checker, thread states tile the trace, and the Running time of each worker agrees
//! with the kernel's schedstat in both. Needs root.

use std::{collections::HashMap, ffi::OsStr, process::Command, time::Duration};

use trace_merge::{
    timeline::{Item, ThreadState},
    MergeOptions,
};
use trace_testkit::{
    check::{chrome, paraver},
    invariants::check_timeline,
};
use tracer_tests::*;

#[test]
fn a_real_recording_converts_conformantly_and_agrees_with_schedstat() {
    let _serial = serial();
    let server = Server::start(&ServerOptions {
        workers: 3,
        spin_us: 1500,
        sleep_us: 300,
        ..Default::default()
    })
    .unwrap();
    let pid = server.pid();
    let clock = RunClock::start(pid);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    let rec = start_tracer(
        "record",
        pid,
        &trace,
        &["-u", "handle_request", "-u", "render_response"],
    );
    // About 0.5 s of spinning per worker (see record.rs's running-time test).
    let report = load(server.port(), 6, 160, 4096, 3, Duration::from_secs(30));
    assert_eq!(report.errors, 0);
    std::thread::sleep(Duration::from_millis(100));
    let truth = clock.stop();
    stop_tracer(rec);
    let stats = server.stop().unwrap();

    let stem = dir.path().join("out");
    tracer_ok(&[
        OsStr::new("convert"),
        trace.as_ref(),
        "-o".as_ref(),
        stem.as_ref(),
    ]);
    let checked = paraver::check(&stem).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(checked.cpus as u32, possible_cpus());
    paraver::check_tiling(&stem).unwrap_or_else(|v| panic!("{v}"));

    // The item stream: spans close, hand-offs connect accepts to later operations.
    let tl = trace_merge::open(std::slice::from_ref(&trace), &MergeOptions::default()).unwrap();
    let inv = check_timeline(tl)
        .unwrap()
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(inv.handoffs >= stats.connections, "{inv:?} vs {stats:?}");

    // Running time per worker from the state intervals vs schedstat.
    let mut running: HashMap<u32, u64> = HashMap::new();
    let mut calls = 0;
    let tl = trace_merge::open(std::slice::from_ref(&trace), &MergeOptions::default()).unwrap();
    for item in tl {
        match item.unwrap() {
            Item::State(s) if s.state == ThreadState::Running => {
                *running.entry(s.tid).or_default() += s.end - s.begin;
            }
            Item::Func(f) if f.depth == 0 => calls += 1,
            _ => {}
        }
    }
    assert_eq!(calls, stats.handle_request);
    let checked = truth.check("worker", 0.02, |tid| {
        running.get(&tid).copied().unwrap_or(0)
    });
    assert_eq!(checked, 3);

    // The same trace as Trace Event Format: it obeys the format's rules, has every call
    // and connection, and its running slices are the same running time.
    let chrome = ["convert", "--to", "chrome"].map(OsStr::new);
    let paths = [trace.as_ref(), "-o".as_ref(), stem.as_ref()];
    tracer_ok(&[&chrome[..], &paths[..]].concat());
    let json = dir.path().join("out.json");
    let c = chrome::check(&json).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert_eq!(
        c.slices["function"],
        stats.handle_request + stats.render_response
    );
    assert!(c.flows["connection"] >= stats.connections, "{c:?}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut running_ns: HashMap<u32, u64> = HashMap::new();
    for e in doc["traceEvents"].as_array().unwrap() {
        if e["cat"] == "state" && e["name"] == "running" {
            let tid = (e["tid"].as_u64().unwrap() & ((1 << 22) - 1)) as u32;
            let dur_ns = (e["dur"].as_f64().unwrap() * 1000.0).round() as u64;
            *running_ns.entry(tid).or_default() += dur_ns;
        }
    }
    let checked = truth.check("worker", 0.02, |tid| {
        running_ns.get(&tid).copied().unwrap_or(0)
    });
    assert_eq!(checked, 3);

    // The same trace as folded stacks: each worker's running leaves are its running
    // time, and under handle_request its sleep shows as the fixture's own calls times
    // the sleep it asks for, at least.
    let folded = ["convert", "--to", "folded"].map(OsStr::new);
    tracer_ok(&[&folded[..], &paths[..]].concat());
    let text = std::fs::read_to_string(dir.path().join("out.folded")).unwrap();
    let mut by_name: HashMap<&str, u64> = HashMap::new();
    let mut asleep = 0;
    for line in text.lines() {
        let (stack, ns) = line.rsplit_once(' ').unwrap();
        let ns: u64 = ns.parse().unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.last() == Some(&"[running]") {
            *by_name.entry(frames[1]).or_default() += ns;
        }
        if frames.contains(&"handle_request") && frames.contains(&"clock_nanosleep") {
            asleep += ns;
        }
    }
    let mut tl = trace_merge::open(std::slice::from_ref(&trace), &MergeOptions::default()).unwrap();
    while tl.next_item().unwrap().is_some() {}
    let checked = truth.check("worker", 0.02, |tid| {
        let th = tl.threads().iter().find(|t| t.tid == tid).unwrap();
        by_name.get(th.name.as_str()).copied().unwrap_or(0)
    });
    assert_eq!(checked, 3);
    assert!(
        asleep >= stats.handle_request * 300_000,
        "{asleep} ns asleep in {} calls",
        stats.handle_request
    );

    // A window: conformant, and nothing outside it.
    let window = ["--start", "50ms", "--end", "150ms", "-f"].map(OsStr::new);
    tracer_ok(&[&chrome[..], &paths[..], &window[..]].concat());
    let c = chrome::check(&json).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert!(c.slices["state"] > 0);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for e in doc["traceEvents"].as_array().unwrap() {
        if e["ph"] != "M" {
            let ts = e["ts"].as_f64().unwrap();
            let end = ts + e["dur"].as_f64().unwrap_or(0.0);
            assert!(ts >= 50_000.0 && end <= 150_000.0, "{e}");
        }
    }
    // Windows are for this format only, and must not be empty.
    for (args, what) in [
        (&["--start", "1s"][..], "--to chrome and --to folded only"),
        (
            &["--to", "chrome", "--start", "2s", "--end", "1s"][..],
            "after --start",
        ),
    ] {
        let st = Command::new(tracer_bin())
            .arg("convert")
            .args(args)
            .arg(&trace)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&st.stderr);
        assert!(!st.status.success() && err.contains(what), "{err}");
    }
}

fn possible_cpus() -> u32 {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    s.trim().rsplit('-').next().unwrap().parse::<u32>().unwrap() + 1
}
