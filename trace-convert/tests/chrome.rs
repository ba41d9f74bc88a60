//! The Trace Event Format writer: conformance to the format's rules (its own checker),
//! and the meaning of what it writes against the timeline it comes from.

use std::path::{Path, PathBuf};

use serde_json::Value;
use trace_convert::chrome::ChromeReport;
use trace_convert::chrome::{self, state_tid};
use trace_convert::Error;
use trace_merge::timeline::Item;
use trace_merge::MergeOptions;
use trace_merge::Window;
use trace_testkit::builder::*;
use trace_testkit::check::chrome::check;
use trace_testkit::invariants::check_timeline;

fn convert(dir: &Path, traces: &[&TraceBuilder]) -> (ChromeReport, PathBuf) {
    let inputs: Vec<PathBuf> = (traces.iter().enumerate())
        .map(|(i, t)| {
            let p = dir.join(format!("{i}.trace"));
            t.write(&p);
            p
        })
        .collect();
    let out = dir.join("out.json");
    (chrome::convert(&inputs, &out, &opts(true)).unwrap(), out)
}

fn events(path: &Path) -> Vec<Value> {
    let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    doc["traceEvents"].as_array().unwrap().clone()
}

fn find<'a>(evs: &'a [Value], ph: &str, name: &str) -> Vec<&'a Value> {
    (evs.iter())
        .filter(|e| e["ph"] == ph && e["name"] == name)
        .collect()
}

#[test]
fn server_scenario_is_conformant_and_means_what_the_timeline_says() {
    let dir = tempfile::tempdir().unwrap();
    let (r, out) = convert(dir.path(), &[&server_scenario()]);
    let c = check(&out).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert_eq!((r.functions, r.flows), (2, 2));
    assert_eq!(c.slices["function"], 2);
    assert_eq!(c.slices["syscall"], r.syscalls);
    assert_eq!(c.slices["state"] + c.slices["cpu"], r.states);
    assert_eq!((c.flows["wakeup"], c.flows["connection"]), (1, 1));
    assert_eq!((r.threads, r.processes), (3, 1));
    assert_eq!(r.input.lost_by_kernel, 2);

    let evs = events(&out);
    // process_request(Request&) on the worker, 1500-1700 us, returning 1.
    let b = find(&evs, "B", "process_request(Request&)");
    let e = find(&evs, "E", "process_request(Request&)");
    assert_eq!((b.len(), e.len()), (1, 1));
    assert_eq!(
        (b[0]["tid"].as_u64(), b[0]["ts"].as_f64()),
        (Some(101), Some(1500.0))
    );
    assert_eq!(
        (e[0]["ts"].as_f64(), e[0]["args"]["return"].as_i64()),
        (Some(1700.0), Some(1))
    );
    // The worker's read of connection 1: 120 bytes.
    let read = find(&evs, "X", "read");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0]["dur"].as_f64(), Some(50.0));
    assert_eq!(read[0]["args"]["bytes_read"].as_u64(), Some(120));
    assert_eq!(read[0]["args"]["connection"].as_u64(), Some(1));
    // The hand-off arrow: from the acceptor's state track at the accept to the worker's
    // read.
    let s = find(&evs, "s", "connection 1");
    let f = find(&evs, "f", "connection 1");
    assert_eq!(s[0]["tid"].as_u64(), Some(state_tid(0, 100)));
    assert_eq!(
        (s[0]["ts"].as_f64(), f[0]["ts"].as_f64()),
        (Some(1100.0), Some(1400.0))
    );
    assert_eq!(f[0]["tid"].as_u64(), Some(101));
    // The helper: created, ready, running 2200-2350 us on CPU 1, then gone; its latest
    // name.
    let helper: Vec<_> = (evs.iter())
        .filter(|e| e["cat"] == "state" && e["tid"].as_u64() == Some(state_tid(0, 102)))
        .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap()))
        .collect();
    assert_eq!(helper, vec![("ready", 1900.0), ("running", 2200.0)]);
    let cpu1 = (evs.iter())
        .find(|e| e["cat"] == "cpu" && e["ts"].as_f64() == Some(2200.0))
        .unwrap();
    assert_eq!(
        (cpu1["tid"].as_u64(), cpu1["name"].as_str()),
        (Some(1), Some("helper-1"))
    );
    let names: Vec<_> = find(&evs, "M", "thread_name")
        .iter()
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    for n in ["server", "worker state", "helper-1", "CPU 0", "CPU 1"] {
        assert!(names.contains(&n), "{n} not in {names:?}");
    }
}

#[test]
fn random_traces_are_conformant_and_complete() {
    for seed in 1..=30u64 {
        let b = random_scenario(
            seed * 17,
            1 + (seed % 4) as u32,
            2 + (seed % 9) as u32,
            1000,
        );
        let dir = tempfile::tempdir().unwrap();
        let (r, out) = convert(dir.path(), &[&b]);
        let c = check(&out).unwrap_or_else(|e| panic!("seed {seed}: {}", e.join("\n")));
        // Every span of the timeline is a slice of the output.
        let tl =
            trace_merge::open(&[dir.path().join("0.trace")], &MergeOptions::default()).unwrap();
        let inv = check_timeline(tl).unwrap().unwrap();
        let n = |cat: &str| c.slices.get(cat).copied().unwrap_or(0);
        assert_eq!(
            n("function") + n("syscall"),
            inv.spans + inv.syscalls,
            "seed {seed}"
        );
        assert_eq!((n("function"), n("syscall")), (r.functions, r.syscalls));
        let flows: u64 = c.flows.values().sum();
        assert_eq!(flows, inv.wakeups + inv.handoffs, "seed {seed}");
    }
}

#[test]
fn two_hosts_keep_their_ids_apart() {
    let mut a = TraceBuilder::new("web1", 1);
    a.process(10, "/bin/front").thread(10, 10, "fr\"ont\\", 'R');
    a.at(10, 0, 0, sw(10, 0)).at(40, 0, 10, sw(0, 1)).stop(100);
    let mut b = TraceBuilder::new("db1", 1);
    // The same pid and tid on the other host.
    b.process(10, "/bin/db").thread(10, 10, "db", 'R');
    b.at(20, 0, 0, sw(10, 0)).at(50, 0, 10, sw(0, 1)).stop(100);
    let dir = tempfile::tempdir().unwrap();
    let (r, out) = convert(dir.path(), &[&a, &b]);
    check(&out).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    assert_eq!(r.processes, 2);
    let evs = events(&out);
    let procs: Vec<(u64, &str)> = find(&evs, "M", "process_name")
        .iter()
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    let pid_of = |n: &str| procs.iter().find(|p| p.1 == n).map(|p| p.0);
    let (front, db) = (
        pid_of("front (pid 10) on web1"),
        pid_of("db (pid 10) on db1"),
    );
    assert!(front.is_some() && db.is_some() && front != db, "{procs:?}");
    assert!(procs.iter().any(|p| p.1 == "CPUs on web1"));
    assert!(procs.iter().any(|p| p.1 == "CPUs on db1"));
    assert!((evs.iter()).any(|e| e["args"]["name"] == "fr\"ont\\ (tid 10)"));
}

#[test]
fn refuses_to_overwrite_and_leaves_nothing_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.trace");
    server_scenario().write(&input);
    let out = dir.path().join("o.json");
    std::fs::write(&out, "mine").unwrap();
    let err = chrome::convert(std::slice::from_ref(&input), &out, &opts(false)).unwrap_err();
    assert!(matches!(err, Error::Exists { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
    chrome::convert(std::slice::from_ref(&input), &out, &opts(true)).unwrap();
    check(&out).unwrap();

    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, b"not a trace").unwrap();
    let out2 = dir.path().join("o2.json");
    assert!(chrome::convert(&[bad], &out2, &opts(false)).is_err());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("o2"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn checker_rejects_each_broken_rule() {
    let doc = |evs: &str| -> Value {
        serde_json::from_str(&format!(
            r#"{{"traceEvents":[
            {{"ph":"M","name":"process_name","pid":1,"args":{{"name":"p"}}}},
            {{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{{"name":"t"}}}},
            {{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{{"name":"u"}}}},
            {evs}]}}"#
        ))
        .unwrap()
    };
    let ok = r#"{"ph":"B","name":"a","pid":1,"tid":1,"ts":1},
        {"ph":"X","name":"x","pid":1,"tid":1,"ts":2,"dur":1},
        {"ph":"E","name":"a","pid":1,"tid":1,"ts":5},
        {"ph":"X","name":"y","pid":1,"tid":2,"ts":0,"dur":9},
        {"ph":"s","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":2},
        {"ph":"f","bp":"e","cat":"c","name":"f","id":1,"pid":1,"tid":2,"ts":3},
        {"ph":"s","cat":"c","name":"f","id":2,"pid":1,"tid":1,"ts":2},
        {"ph":"f","cat":"c","name":"f","id":2,"pid":1,"tid":1,"ts":2}"#;
    let c = trace_testkit::check::chrome::check_value(&doc(ok)).unwrap();
    assert_eq!((c.flows["c"], c.tracks), (2, 2));
    let broken = [
        (
            r#"{"ph":"E","name":"a","pid":1,"tid":1,"ts":5}"#,
            "E without B",
        ),
        (
            r#"{"ph":"B","name":"a","pid":1,"tid":1,"ts":5}"#,
            "never ends",
        ),
        (
            r#"{"ph":"B","name":"a","pid":1,"tid":1,"ts":1},{"ph":"E","name":"b","pid":1,"tid":1,"ts":2}"#,
            "closes B",
        ),
        (
            r#"{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":5},{"ph":"X","name":"b","pid":1,"tid":1,"ts":3,"dur":5}"#,
            "overlaps",
        ),
        (
            r#"{"ph":"X","name":"a","pid":1,"tid":3,"ts":1,"dur":1}"#,
            "no thread_name",
        ),
        (
            r#"{"ph":"X","name":"a","pid":2,"tid":1,"ts":1,"dur":1}"#,
            "no process_name",
        ),
        (
            r#"{"ph":"X","name":"a","pid":1,"tid":1,"ts":-1,"dur":1}"#,
            "ts >= 0",
        ),
        (
            r#"{"ph":"X","name":"a","pid":1,"tid":1,"ts":1}"#,
            "without dur",
        ),
        (
            r#"{"ph":"s","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":2}"#,
            "1 starts and 0 ends",
        ),
        (
            r#"{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":9},{"ph":"s","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":5},{"ph":"f","bp":"e","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":4}"#,
            "ends before",
        ),
        (
            r#"{"ph":"s","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":2},{"ph":"f","bp":"e","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":3}"#,
            "to start from",
        ),
        (
            r#"{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":9},{"ph":"s","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":2},{"ph":"f","bp":"e","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":9}"#,
            "around",
        ),
        (
            r#"{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":9},{"ph":"s","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":2},{"ph":"f","cat":"c","name":"f","id":1,"pid":1,"tid":1,"ts":3}"#,
            "beginning at",
        ),
    ];
    for (evs, what) in broken {
        let e = trace_testkit::check::chrome::check_value(&doc(evs)).unwrap_err();
        assert!(e.iter().any(|x| x.contains(what)), "{what}: {e:?}");
    }
}

fn convert_window(dir: &Path, b: &TraceBuilder, from_us: u64, until_us: u64) -> Vec<Value> {
    let input = dir.join("w.trace");
    b.write(&input);
    let out = dir.join("w.json");
    let opts = trace_convert::Options {
        force: true,
        window: Window {
            from_ns: from_us * 1000,
            until_ns: until_us * 1000,
        },
        ..Default::default()
    };
    chrome::convert(&[input], &out, &opts).unwrap();
    check(&out).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    events(&out)
}

#[test]
fn a_window_keeps_what_overlaps_it_cut_at_its_edges() {
    let dir = tempfile::tempdir().unwrap();
    let b = server_scenario();
    // process_request runs 1500-1700 us: inside.
    let evs = convert_window(dir.path(), &b, 1450, 1750);
    let pr = |ph| find(&evs, ph, "process_request(Request&)");
    assert_eq!(
        (pr("B")[0]["ts"].as_f64(), pr("E")[0]["ts"].as_f64()),
        (Some(1500.0), Some(1700.0))
    );
    assert!(find(&evs, "B", "handle_accept").is_empty());
    // The read ends at the window's start, the write starts at its end: neither is in.
    assert!(find(&evs, "X", "read").is_empty() && find(&evs, "X", "write").is_empty());
    assert!(
        evs.iter().all(|e| e["ph"] != "s"),
        "the hand-off starts before"
    );
    for e in evs.iter().filter(|e| e["ph"] == "X") {
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(ts >= 1450.0 && ts + dur <= 1750.0, "{e}");
    }

    // Cut inside it: it begins at the window's start and ends at its end.
    let evs = convert_window(dir.path(), &b, 1600, 1650);
    let pr = |ph| find(&evs, ph, "process_request(Request&)");
    assert_eq!(
        (pr("B")[0]["ts"].as_f64(), pr("E")[0]["ts"].as_f64()),
        (Some(1600.0), Some(1650.0))
    );
    assert_eq!(pr("E")[0]["args"]["end"], "window ended");
    let worker_states: Vec<_> = (evs.iter())
        .filter(|e| e["cat"] == "state" && e["tid"].as_u64() == Some(state_tid(0, 101)))
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["ts"].as_f64(),
                e["dur"].as_f64(),
            )
        })
        .collect();
    assert_eq!(worker_states, vec![("running", Some(1600.0), Some(50.0))]);
}

#[test]
fn random_windows_are_conformant_and_keep_every_overlapping_call() {
    for seed in 1..=20u64 {
        let b = random_scenario(seed * 7, 1 + (seed % 3) as u32, 2 + (seed % 6) as u32, 800);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.trace");
        b.write(&p);
        let mut tl = trace_merge::open(&[p], &MergeOptions::default()).unwrap();
        let mut spans = Vec::new();
        while let Some(i) = tl.next_item().unwrap() {
            if let Item::Func(s) = i {
                spans.push((s.begin, s.end));
            }
        }
        let end = tl.end().unwrap() / 1000;
        let (from, until) = (end * (seed % 5) / 10, end * (5 + seed % 5) / 10);
        let evs = convert_window(dir.path(), &b, from, until);
        let (from_ns, until_ns) = (from * 1000, until * 1000);
        let expect = (spans.iter())
            .filter(|&&(b, e)| b < until_ns && e >= from_ns)
            .count();
        assert_eq!(find_cat(&evs, "B", "function"), expect, "seed {seed}");
        for e in evs.iter().filter(|e| e["ph"] != "M") {
            let ts = e["ts"].as_f64().unwrap();
            let dur = e["dur"].as_f64().unwrap_or(0.0);
            assert!(
                ts >= from as f64 && ts + dur <= until as f64,
                "seed {seed}: {e}"
            );
        }
    }
}

fn find_cat(evs: &[Value], ph: &str, cat: &str) -> usize {
    evs.iter()
        .filter(|e| e["ph"] == ph && e["cat"] == cat)
        .count()
}

/// Conversion options: replace existing outputs or not.
fn opts(force: bool) -> trace_convert::Options {
    trace_convert::Options {
        force,
        ..Default::default()
    }
}

/// Go calls are complete slices on their goroutine's track (they may end on another
/// thread than they began), USDT probes instants with their arguments; all conformant.
#[test]
fn go_calls_have_goroutine_tracks_and_usdt_probes_are_instants() {
    let dir = tempfile::tempdir().unwrap();
    let (r, out) = convert(dir.path(), &[&go_scenario()]);
    assert_eq!(r.functions, 3);
    check(&out).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    let evs = events(&out);
    let handle = find(&evs, "X", "main.handle");
    assert_eq!(handle.len(), 2);
    let tids: std::collections::BTreeSet<u64> =
        handle.iter().map(|e| e["tid"].as_u64().unwrap()).collect();
    assert_eq!(tids.len(), 2, "one track per goroutine");
    let a = handle.iter().find(|e| e["args"]["return"] == 9).unwrap();
    assert_eq!(a["dur"].as_f64().unwrap(), 700.0);
    assert_eq!(a["args"]["thread"], 201);
    let mut names: Vec<&str> = (evs.iter())
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| n.starts_with("goroutine"))
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["goroutine 0xa", "goroutine 0xb"]);
    let marks = find(&evs, "i", "app:request");
    assert_eq!(marks.len(), 2);
    assert_eq!(marks[0]["args"]["arg0"], -7);
    assert_eq!(marks[0]["args"]["arg1"], 42);
}
