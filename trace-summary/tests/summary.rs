//! Summaries on synthetic traces with exact expected figures.

use std::path::PathBuf;

use trace_file::Event;
use trace_summary::{
    diff, diff_rows, render, summarize, summarize_windows, By, ErrorRule, Format, Summary,
    SummaryOptions, Thresholds,
};
use trace_testkit::builder::*;

const US: u64 = 1000;
const MS: u64 = 1_000_000;

fn write(dir: &tempfile::TempDir, name: &str, b: &TraceBuilder) -> PathBuf {
    let p = dir.path().join(name);
    b.write(&p);
    p
}

fn summary_of(b: &TraceBuilder) -> Summary {
    let dir = tempfile::tempdir().unwrap();
    summarize(&[write(&dir, "t.trace", b)]).unwrap()
}

fn entry(func: u32) -> Event {
    Event::FuncEntry { func }
}

fn ret(func: u32, ret: i64) -> Event {
    Event::FuncExit {
        func,
        ret: ret as u64,
    }
}

/// One thread: `handle_request` sleeps `sleep_us` in nanosleep, then `other` runs 100 us.
fn sleeper(sleep_us: u64) -> TraceBuilder {
    let mut b = TraceBuilder::new("h1", 1);
    b.process(100, "/srv/server")
        .thread(100, 100, "server", 'S')
        .probe(1, "handle_request")
        .probe(2, "other");
    let s = sleep_us;
    b.at(1000, 0, 0, sw(100, 0))
        .at(1100, 0, 100, entry(1))
        .at(1200, 0, 100, enter(35, 0, 0))
        .at(1300, 0, 100, sw(0, 1))
        .at(1300 + s, 0, 0, wake(100, 0))
        .at(1400 + s, 0, 0, sw(100, 0))
        .at(1500 + s, 0, 100, exit(35, 0))
        .at(1600 + s, 0, 100, ret(1, 0))
        .at(1700 + s, 0, 100, entry(2))
        .at(1800 + s, 0, 100, ret(2, 0));
    b.stop(2000 + s);
    b
}

#[test]
fn sleeping_handler_is_blocked_inside_the_function() {
    let s = summary_of(&sleeper(10_000));
    let f = s.function("handle_request").unwrap();
    assert_eq!(f.calls, 1);
    assert_eq!(f.errors, 0);
    assert_eq!(f.inclusive_ns, 10_500 * US);
    assert_eq!(f.self_ns, 10_500 * US);
    assert_eq!(f.running_ns, 400 * US);
    assert_eq!(f.ready_ns, 100 * US);
    assert_eq!(f.blocked_ns, 10_000 * US);
    assert_eq!(f.io_ns, 0);
    assert_eq!(
        (f.p50_ns, f.p99_ns, f.max_ns, f.mean_ns),
        (10_500 * US, 10_500 * US, 10_500 * US, 10_500 * US)
    );
    // The system call made inside it.
    assert_eq!(f.syscalls.len(), 1);
    let inner = &f.syscalls[0];
    assert_eq!((inner.name.as_str(), inner.calls), ("nanosleep", 1));
    assert_eq!(inner.total_ns, 10_300 * US);
    // Session: 0 .. 12 ms.
    assert_eq!(s.duration_ns(), 12_000 * US);
    assert!((f.session_pct - 87.5).abs() < 1e-9);

    let t = s.thread(100).unwrap();
    assert_eq!(t.running_ns, 300 * US + 600 * US);
    assert_eq!(t.blocked_ns, 1000 * US + 10_000 * US);
    assert_eq!(t.ready_ns, 100 * US);
    assert_eq!((t.voluntary_switches, t.involuntary_switches), (1, 0));
    assert_eq!((t.syscalls, t.syscall_ns), (1, 10_300 * US));
    assert_eq!(t.function_calls, 2);
    let ns = s.syscall("nanosleep").unwrap();
    assert_eq!((ns.calls, ns.errors, ns.total_ns), (1, 0, 10_300 * US));
}

#[test]
fn cpu_bound_handler_is_running() {
    let mut b = TraceBuilder::new("h1", 1);
    b.process(100, "/srv/server")
        .thread(100, 100, "server", 'S')
        .probe(1, "handle_request");
    b.at(1000, 0, 0, sw(100, 0))
        .at(1100, 0, 100, entry(1))
        .at(9100, 0, 100, ret(1, 0))
        .stop(10_000);
    let s = summary_of(&b);
    let f = s.function("handle_request").unwrap();
    assert_eq!(f.inclusive_ns, 8 * MS);
    assert_eq!(f.running_ns, 8 * MS);
    assert_eq!(f.ready_ns + f.blocked_ns + f.io_ns, 0);
    assert!(f.flags.is_empty() || !f.flags.contains(&"ready"));
}

/// Two CPU-bound threads on one CPU preempt each other.
fn oversubscribed() -> TraceBuilder {
    let mut b = TraceBuilder::new("h1", 1);
    b.process(200, "/srv/calc")
        .thread(200, 200, "calc-a", 'S')
        .thread(200, 201, "calc-b", 'S')
        .probe(1, "compute");
    b.at(1000, 0, 0, sw(200, 0))
        .at(1010, 0, 200, entry(1))
        .at(2000, 0, 200, sw(201, 0))
        .at(2010, 0, 201, entry(1))
        .at(3000, 0, 201, sw(200, 0))
        .at(3510, 0, 200, ret(1, 0))
        .at(4000, 0, 200, sw(201, 1))
        .at(4510, 0, 201, ret(1, 0))
        .at(5000, 0, 201, sw(0, 1))
        .stop(6000);
    b
}

#[test]
fn more_busy_threads_than_cpus_shows_ready_time() {
    let s = summary_of(&oversubscribed());
    let f = s.function("compute").unwrap();
    assert_eq!(f.calls, 2);
    assert_eq!(f.inclusive_ns, 5000 * US);
    assert_eq!(f.running_ns, 3000 * US);
    assert_eq!(f.ready_ns, 2000 * US);
    assert_eq!(f.blocked_ns, 0);
    assert_eq!((f.p50_ns, f.max_ns), (2500 * US, 2500 * US));

    let opts = SummaryOptions::default();
    let mut out = Vec::new();
    render(&s, &opts, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let line = text.lines().find(|l| l.starts_with("compute")).unwrap();
    assert!(line.contains("ready"), "not flagged: {line}");
    assert!(line.contains("40.0%"), "{line}");

    for tid in [200, 201] {
        let t = s.thread(tid).unwrap();
        assert_eq!(
            (t.voluntary_switches, t.involuntary_switches),
            (1, 1),
            "{tid}"
        );
        assert_eq!(t.ready_ns, 1000 * US, "{tid}");
    }
}

#[test]
fn self_plus_callees_is_inclusive_and_call_graph() {
    let mut b = TraceBuilder::new("h1", 1);
    b.process(300, "/srv/server")
        .thread(300, 300, "server", 'R')
        .probe(1, "handle_request")
        .probe(2, "render_response")
        .probe(3, "walk");
    b.at(900, 0, 0, sw(300, 0))
        .at(1000, 0, 300, entry(1))
        .at(1200, 0, 300, entry(2))
        .at(1500, 0, 300, ret(2, 0))
        .at(1600, 0, 300, entry(2))
        .at(1700, 0, 300, ret(2, 0))
        .at(2000, 0, 300, ret(1, -1))
        // Recursion: walk -> walk.
        .at(2100, 0, 300, entry(3))
        .at(2200, 0, 300, entry(3))
        .at(2300, 0, 300, ret(3, 0))
        .at(2500, 0, 300, ret(3, 0))
        .at(2600, 0, 300, entry(1))
        .at(2700, 0, 300, ret(1, 5))
        .at(2800, 0, 300, entry(1))
        .at(2900, 0, 300, ret(1, 0))
        .stop(3000);
    let s = summary_of(&b);
    let h = s.function("handle_request").unwrap();
    let r = s.function("render_response").unwrap();
    let e = s.call_edge("handle_request", "render_response").unwrap();
    assert_eq!(
        (h.calls, h.inclusive_ns, h.self_ns),
        (3, 1200 * US, 800 * US)
    );
    assert_eq!(
        (r.calls, r.inclusive_ns, r.self_ns),
        (2, 400 * US, 400 * US)
    );
    assert_eq!(
        (e.calls, e.total_ns, e.mean_ns, e.max_ns),
        (2, 400 * US, 200 * US, 300 * US)
    );
    assert_eq!(h.self_ns + e.total_ns, h.inclusive_ns);
    // Errors: -1 is negative; -1 and 5 are non-zero.
    assert_eq!((h.errors, h.errors_negative, h.errors_nonzero), (1, 1, 2));
    // Recursion counts nested time once in inclusive, never twice in self.
    let w = s.function("walk").unwrap();
    assert_eq!(
        (w.calls, w.inclusive_ns, w.self_ns),
        (2, 400 * US, 400 * US)
    );
    let rec = s.call_edge("walk", "walk").unwrap();
    assert_eq!((rec.calls, rec.total_ns), (1, 100 * US));
    assert_eq!(s.call_graph().len(), 2);

    // 1 of 3 calls is an error (33 % > 25 %): flagged; with NonZero, 2 errors.
    let mut opts = SummaryOptions {
        format: Format::Json,
        ..SummaryOptions::default()
    };
    let json = render_string(&s, &opts);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let hf = (v["functions"].as_array().unwrap().iter())
        .find(|f| f["name"] == "handle_request")
        .unwrap();
    assert_eq!(hf["errors"], 1);
    assert_eq!(hf["flags"], serde_json::json!(["errors"]));
    opts.thresholds.error_if = ErrorRule::NonZero;
    let v: serde_json::Value = serde_json::from_str(&render_string(&s, &opts)).unwrap();
    let hf = (v["functions"].as_array().unwrap().iter())
        .find(|f| f["name"] == "handle_request")
        .unwrap();
    assert_eq!(hf["errors"], 2);
    opts.thresholds.error_if = ErrorRule::None;
    let v: serde_json::Value = serde_json::from_str(&render_string(&s, &opts)).unwrap();
    assert_eq!(v["functions"][0]["flags"], serde_json::json!([]));
}

#[test]
fn call_cut_by_the_trace_end_is_split_by_the_final_state() {
    let mut b = TraceBuilder::new("h1", 1);
    b.process(500, "/srv/x")
        .thread(500, 500, "x", 'S')
        .probe(1, "serve_forever");
    b.at(900, 0, 0, sw(500, 0))
        .at(1000, 0, 500, entry(1))
        .at(1500, 0, 500, sw(0, 2))
        .stop(3000);
    let s = summary_of(&b);
    let f = s.function("serve_forever").unwrap();
    assert_eq!((f.calls, f.unfinished), (1, 1));
    assert_eq!(f.inclusive_ns, 2000 * US);
    assert_eq!((f.running_ns, f.io_ns), (500 * US, 1500 * US));
}

/// An acceptor hands three connections to a worker; the third is still open at the end.
fn server() -> TraceBuilder {
    let mut b = TraceBuilder::new("web", 2);
    b.process(400, "/srv/server")
        .thread(400, 400, "acceptor", 'S')
        .thread(400, 401, "worker", 'S')
        .probe(1, "handle_request");
    b.at(1000, 0, 400, enter(288, 3, 0))
        .at(1100, 0, 400, exit(288, 5))
        .at(1200, 0, 400, enter(288, 3, 0))
        .at(1300, 0, 400, exit(288, 6))
        .at(2200, 0, 400, enter(288, 3, 0))
        .at(2300, 0, 400, exit(288, 7));
    b.at(1350, 1, 401, entry(1))
        .at(1400, 1, 401, enter(0, 5, 4096))
        .at(1450, 1, 401, exit(0, 100))
        .at(1500, 1, 401, enter(1, 5, 300))
        .at(1600, 1, 401, exit(1, 300))
        .at(1650, 1, 401, ret(1, 0))
        .at(1700, 1, 401, enter(3, 5, 0))
        .at(1710, 1, 401, exit(3, 0))
        .at(1800, 1, 401, enter(0, 6, 4096))
        .at(1850, 1, 401, exit(0, 50))
        .at(1860, 1, 401, enter(0, 6, 4096))
        .at(1870, 1, 401, exit(0, -11))
        .at(1900, 1, 401, enter(1, 6, 1000))
        .at(2000, 1, 401, exit(1, 1000))
        .at(2100, 1, 401, enter(3, 6, 0))
        .at(2110, 1, 401, exit(3, 0));
    b.stop(3000);
    b
}

#[test]
fn requests_bytes_and_connection_counts() {
    let s = summary_of(&server());
    let c = s.connections();
    assert_eq!((c.accepted, c.closed, c.open_at_end), (3, 2, 1));
    assert_eq!((c.bytes_read, c.bytes_written), (150, 1300));
    assert_eq!(c.max_concurrency, 2);
    let by_id = |id| c.connections.iter().find(|x| x.id == id).unwrap();
    let c1 = by_id(1);
    assert_eq!(
        (c1.service_ns, c1.bytes_read, c1.bytes_written),
        (610 * US, 100, 300)
    );
    assert_eq!(
        (c1.concurrent_at_start, c1.operations, c1.closed),
        (1, 3, true)
    );
    assert_eq!(c1.threads, vec![400, 401]);
    let c2 = by_id(2);
    assert_eq!(
        (c2.service_ns, c2.bytes_read, c2.bytes_written),
        (810 * US, 50, 1000)
    );
    assert_eq!(c2.concurrent_at_start, 2);
    let c3 = by_id(3);
    assert_eq!(
        (c3.service_ns, c3.closed, c3.concurrent_at_start),
        (700 * US, false, 1)
    );
    // Sorted slowest first.
    let ids: Vec<u32> = c.connections.iter().map(|x| x.id).collect();
    assert_eq!(ids, vec![2, 3, 1]);
    assert_eq!(c.service_total_ns, 2120 * US);
    // Time per byte against concurrency.
    let rows: Vec<(u32, u64, u64, u64)> = (c.by_concurrency.iter())
        .map(|r| (r.concurrency, r.connections, r.service_ns, r.bytes))
        .collect();
    assert_eq!(rows, vec![(1, 2, 1310 * US, 400), (2, 1, 810 * US, 1050)]);
    assert!((c.by_concurrency[1].ns_per_byte - 810_000.0 / 1050.0).abs() < 1e-6);

    let read = s.syscall("read").unwrap();
    assert_eq!((read.calls, read.errors, read.bytes_read), (3, 1, 150));
    assert_eq!(read.errnos.len(), 1);
    assert_eq!(
        (read.errnos[0].name.as_str(), read.errnos[0].count),
        ("EAGAIN", 1)
    );
    assert_eq!(read.total_ns, 110 * US);
    let acc = s.syscall("accept4").unwrap();
    assert_eq!(
        (acc.calls, acc.total_ns, acc.mean_ns),
        (3, 300 * US, 100 * US)
    );
    let w = s.syscall("write").unwrap();
    assert_eq!((w.calls, w.bytes_written), (2, 1300));
    // Per thread.
    let per: Vec<_> = (s.syscalls_by_thread().iter())
        .filter(|x| x.name == "read")
        .collect();
    assert_eq!(per.len(), 1);
    assert_eq!(per[0].tid, Some(401));
    // Inside the handler: read and write of connection 1.
    let h = s.function("handle_request").unwrap();
    let names: Vec<(&str, u64, u64, u64)> = (h.syscalls.iter())
        .map(|x| (x.name.as_str(), x.calls, x.bytes_read, x.bytes_written))
        .collect();
    assert_eq!(names, vec![("write", 1, 0, 300), ("read", 1, 100, 0)]);

    let opts = SummaryOptions {
        by: By::Connection,
        ..SummaryOptions::default()
    };
    let text = render_string(&s, &opts);
    assert!(
        text.contains("time per byte against connections in service"),
        "{text}"
    );
    assert!(text.contains("810us"), "{text}");
}

/// close frees its number before it returns, so on another CPU an accept can return the
/// same number while the close is still under way: the new connection keeps it.
#[test]
fn a_number_reused_while_its_close_is_under_way_names_the_new_connection() {
    let mut b = TraceBuilder::new("web", 2);
    b.process(400, "/srv/server")
        .thread(400, 400, "acceptor", 'S')
        .thread(400, 401, "worker", 'S');
    b.at(1000, 0, 400, enter(288, 3, 0))
        .at(1100, 0, 400, exit(288, 5))
        .at(1200, 0, 400, enter(288, 3, 0))
        .at(1520, 0, 400, exit(288, 5));
    b.at(1300, 1, 401, enter(1, 5, 300))
        .at(1400, 1, 401, exit(1, 300))
        .at(1500, 1, 401, enter(3, 5, 0))
        .at(1550, 1, 401, exit(3, 0))
        .at(1600, 1, 401, enter(1, 5, 700))
        .at(1700, 1, 401, exit(1, 700))
        .at(1800, 1, 401, enter(3, 5, 0))
        .at(1810, 1, 401, exit(3, 0));
    b.stop(2000);
    let s = summary_of(&b);
    let c = s.connections();
    assert_eq!((c.accepted, c.closed, c.open_at_end), (2, 2, 0));
    assert_eq!(c.bytes_written, 1000);
    let by_id = |id| c.connections.iter().find(|x| x.id == id).unwrap();
    let (c1, c2) = (by_id(1), by_id(2));
    assert_eq!(
        (c1.bytes_written, c1.service_ns, c1.closed),
        (300, 450 * US, true)
    );
    assert_eq!(
        (c2.bytes_written, c2.service_ns, c2.closed),
        (700, 290 * US, true)
    );
    assert_eq!(c2.threads, vec![400, 401]);
}

/// A close that was not recorded: when an accept returns the number again, the old
/// connection ended unseen, after its last operation.
#[test]
fn a_number_reused_without_a_recorded_close_ends_the_old_connection() {
    let mut b = TraceBuilder::new("web", 1);
    b.process(400, "/srv/server")
        .thread(400, 400, "acceptor", 'S');
    b.at(1000, 0, 400, enter(288, 3, 0))
        .at(1100, 0, 400, exit(288, 5))
        .at(1200, 0, 400, enter(1, 5, 300))
        .at(1300, 0, 400, exit(1, 300))
        .at(1400, 0, 400, enter(288, 3, 0))
        .at(1500, 0, 400, exit(288, 5))
        .at(1600, 0, 400, enter(1, 5, 700))
        .at(1700, 0, 400, exit(1, 700));
    b.stop(2000);
    let s = summary_of(&b);
    let c = s.connections();
    // (Not seen closed, both: the summary counts them as open at the end.)
    assert_eq!((c.accepted, c.closed, c.open_at_end), (2, 0, 2));
    let by_id = |id| c.connections.iter().find(|x| x.id == id).unwrap();
    let (c1, c2) = (by_id(1), by_id(2));
    assert_eq!(
        (c1.bytes_written, c1.service_ns, c1.closed),
        (300, 200 * US, false)
    );
    assert_eq!((c2.bytes_written, c2.closed), (700, false));
}

fn render_string(s: &Summary, opts: &SummaryOptions) -> String {
    let mut out = Vec::new();
    render(s, opts, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn diff_against_itself_shows_no_change() {
    let s = summary_of(&server());
    for by in [
        By::Function,
        By::Thread,
        By::Syscall,
        By::Connection,
        By::CallGraph,
    ] {
        let opts = SummaryOptions {
            by,
            ..SummaryOptions::default()
        };
        for r in diff_rows(&s, &s, &opts).unwrap() {
            assert_eq!(
                (
                    r.count_change,
                    r.mean_change_ns,
                    r.p99_change_ns,
                    r.total_change_ns
                ),
                (0, 0, 0, 0),
                "{by:?} {}",
                r.element
            );
            assert_eq!(r.total_change_pct, Some(0.0));
        }
    }
}

#[test]
fn diff_puts_the_slower_handler_on_top() {
    let a = summary_of(&sleeper(10_000));
    let b = summary_of(&sleeper(30_000));
    let opts = SummaryOptions::default();
    let rows = diff_rows(&a, &b, &opts).unwrap();
    assert_eq!(rows[0].element, "handle_request");
    assert_eq!(rows[0].total_change_ns, 20 * MS as i64);
    assert_eq!(rows[0].count_change, 0);
    assert!((rows[0].total_change_pct.unwrap() - 20_000.0 * 100.0 / 10_500.0).abs() < 1e-9);
    assert_eq!(rows[1].element, "other");
    assert_eq!(rows[1].total_change_ns, 0);
    for format in [Format::Table, Format::Json, Format::Csv] {
        let opts = SummaryOptions {
            format,
            ..SummaryOptions::default()
        };
        let mut out = Vec::new();
        diff(&a, &b, &opts, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        match format {
            Format::Json => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(v["rows"][0]["element"], "handle_request");
            }
            Format::Csv => {
                let second = text.lines().nth(1).unwrap();
                assert!(second.starts_with("handle_request,1,1,0,"), "{second}");
                assert!(second.contains(",20000000,"), "{second}");
            }
            Format::Table => assert!(text.contains("+20.0ms"), "{text}"),
            Format::Junit => unreachable!(),
        }
    }
    let junit = SummaryOptions {
        format: Format::Junit,
        ..SummaryOptions::default()
    };
    assert!(diff(&a, &b, &junit, &mut Vec::new()).is_err());
}

/// `tracer diff --fail-if`: the slower handler breaks its gate, the unchanged function
/// passes, and the JUnit report says so case by case.
#[test]
fn a_gate_fails_on_the_slower_handler_only() {
    use trace_summary::gate::{check, failure_line, write_junit, Condition};
    let a = summary_of(&sleeper(10_000));
    let b = summary_of(&sleeper(30_000));
    let conditions: Vec<Condition> = [
        "handle_request.mean > +10%",
        "handle_request.total > +15ms",
        "handle_request.p99 > 25ms",
        "handle_request.calls < -5%",
        "other.mean > +10%",
        "other.errors > 0",
    ]
    .iter()
    .map(|c| c.parse().unwrap())
    .collect();
    let opts = SummaryOptions {
        top: Some(1),
        ..SummaryOptions::default()
    };
    let verdicts = check(&a, &b, &opts, &conditions).unwrap();
    let failed: Vec<bool> = verdicts.iter().map(|v| v.fails()).collect();
    // The cut to --top 1 does not hide `other` from the gate.
    assert_eq!(failed, [true, true, true, false, false, false]);
    let line = failure_line(&verdicts[0]);
    assert!(
        line.starts_with("gate failed: handle_request.mean > +10%: mean 10.5ms -> 30.5ms (+190."),
        "{line}"
    );
    // The same traces in the other order pass the regression conditions.
    let back = check(&b, &a, &opts, &conditions[..2]).unwrap();
    assert!(back.iter().all(|v| !v.fails()));
    let mut xml = Vec::new();
    write_junit("diff", &verdicts, &mut xml).unwrap();
    let xml = String::from_utf8(xml).unwrap();
    assert!(
        xml.contains(r#"tests="6" failures="3" errors="0""#),
        "{xml}"
    );
    // Stat-mode figures go through the same rows: nothing else to test here.
}

/// `tracer summary --format junit`: one case per function, a failure for the flagged one.
#[test]
fn summary_flags_as_junit() {
    let s = summary_of(&sleeper(10_000));
    let opts = SummaryOptions {
        format: Format::Junit,
        thresholds: Thresholds {
            slow_mean_ns: 5 * MS,
            ..Thresholds::default()
        },
        ..SummaryOptions::default()
    };
    let xml = render_string(&s, &opts);
    assert!(
        xml.contains(r#"tests="2" failures="1" errors="0""#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<failure message="slow: mean 10.5ms over 5.00ms">"#),
        "{xml}"
    );
    for by in [By::Thread, By::Syscall, By::Connection, By::CallGraph] {
        let o = SummaryOptions { by, ..opts.clone() };
        assert!(render_string(&s, &o).contains("<testsuites "));
    }
}

#[test]
fn a_trace_of_more_windows_than_the_limit_is_one_line_of_error() {
    // A record far in the future (damage, or a window far too short for the trace) used
    // to ask for a window per microsecond up to it: memory without bound.
    let mut b = sleeper(10_000);
    b.at(3_600_000_000, 0, 100, entry(2));
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "t.trace", &b);
    let e = summarize_windows(std::slice::from_ref(&p), US)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "windows of 1.00us cut the trace (to 3600.000 s) into more than 10000 windows: take longer ones"
    );
    assert_eq!(
        summarize_windows(&[p], 1000 * MS).unwrap().windows.len(),
        3601
    );
}

#[test]
fn sums_past_u64_saturate() {
    // Three threads in calls of nearly 2^63 ns each (a damaged time can say so), reading
    // exabytes: the function's and the system call's sums overflowed.
    let mut b = TraceBuilder::new("h", 3);
    b.process(1, "/srv/app").probe(1, "handle_request");
    let end = i64::MAX as u64;
    for tid in 1..=3u32 {
        let cpu = tid - 1;
        b.at(10, cpu, tid, entry(1))
            .at(20, cpu, tid, enter(0, 5, u64::MAX))
            .at(30, cpu, tid, exit(0, i64::MAX))
            .at_ns(end, cpu, tid, ret(1, 0));
    }
    let s = summary_of(&b);
    let f = s.function("handle_request").unwrap();
    assert_eq!((f.calls, f.inclusive_ns), (3, u64::MAX));
    assert_eq!(f.syscalls[0].bytes_read, u64::MAX);
    assert_eq!(s.syscall("read").unwrap().bytes_read, u64::MAX);
}

#[test]
fn windows_split_state_time_and_count_spans_where_they_end() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "t.trace", &sleeper(10_000));
    let s = summarize_windows(&[p], MS).unwrap();
    assert_eq!(s.windows.len(), 12);
    let total = s.thread(100).unwrap();
    let mut run = 0;
    let mut blocked = 0;
    for w in &s.windows {
        for t in &w.section.threads {
            run += t.running_ns;
            blocked += t.blocked_ns;
        }
    }
    assert_eq!((run, blocked), (total.running_ns, total.blocked_ns));
    // One wait for a CPU, 100 us after the wakeup: counted once, in the window it ends in.
    assert_eq!(total.ready_waits, Some(1));
    assert_eq!(total.ready_max_ns, Some(100 * US));
    let waits: Vec<u64> = (s.windows.iter())
        .map(|w| {
            w.section
                .threads
                .iter()
                .map(|t| t.ready_waits.unwrap_or(0))
                .sum()
        })
        .collect();
    assert_eq!(waits.iter().sum::<u64>(), 1);
    assert_eq!(waits[11], 1);
    // handle_request ends at 11.6 ms: window 11.
    for (i, w) in s.windows.iter().enumerate() {
        let n = (w.section.functions.iter())
            .find(|f| f.name == "handle_request")
            .map_or(0, |f| f.calls);
        assert_eq!(n, (i == 11) as u64, "window {i}");
    }
    let opts = SummaryOptions {
        format: Format::Csv,
        by: By::Thread,
        window_ns: Some(MS),
        ..SummaryOptions::default()
    };
    let csv = render_string(&s, &opts);
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("window_start_ns,window_end_ns,thread,tid,"));
    assert_eq!(lines.count(), 12, "{csv}");
    assert!(
        csv.contains("\n1000000,2000000,server,100,server,300000,0,0,0,0,700000,0,1,0,"),
        "{csv}"
    );
}

#[test]
fn several_files_summarize_together_and_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(&dir, "a.trace", &sleeper(10_000));
    let mut other = sleeper(20_000);
    other.header.hostname = "h2".into();
    let b = write(&dir, "b.trace", &other);
    let s = summarize(&[a, b]).unwrap();
    let f = s.function("handle_request").unwrap();
    assert_eq!(f.calls, 2);
    assert_eq!(f.inclusive_ns, 10_500 * US + 20_500 * US);
    assert_eq!(f.blocked_ns, 30 * MS);
    assert_eq!(f.file, None);
    assert_eq!(s.threads().len(), 2);
    for (i, blocked) in [(0, 10 * MS), (1, 20 * MS)] {
        let pf = s.file(i).unwrap();
        let f = pf
            .functions
            .iter()
            .find(|f| f.name == "handle_request")
            .unwrap();
        assert_eq!(
            (f.calls, f.blocked_ns, f.file),
            (1, blocked, Some(i as u32))
        );
        assert_eq!(pf.threads.len(), 1);
    }
}

#[test]
fn formats_sort_top_and_thresholds() {
    let s = summary_of(&sleeper(10_000));
    // Table: aligned, human units, sorted by total time.
    let text = render_string(&s, &SummaryOptions::default());
    let lines: Vec<&str> = text.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.starts_with("function"))
        .unwrap();
    assert!(lines[head + 1].starts_with("handle_request"));
    assert!(lines[head + 2].starts_with("other"));
    let col = lines[head].find("total").unwrap() + "total".len();
    assert_eq!(&lines[head + 1][col - 6..col], "10.5ms", "{text}");
    assert_eq!(&lines[head + 2][col - 5..col], "100us", "{text}");
    // Sort by name, top 1.
    let opts = SummaryOptions {
        sort: Some("name".into()),
        top: Some(1),
        format: Format::Csv,
        ..SummaryOptions::default()
    };
    let csv = render_string(&s, &opts);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[0].starts_with("function,calls,errors,inclusive_ns,self_ns,"));
    assert!(lines[1].starts_with("handle_request,1,0,10500000,10500000,"));
    // Thresholds: slow over 5 ms.
    let opts = SummaryOptions {
        thresholds: Thresholds {
            slow_mean_ns: 5 * MS,
            ..Thresholds::default()
        },
        format: Format::Csv,
        ..SummaryOptions::default()
    };
    let csv = render_string(&s, &opts);
    assert!(csv.lines().nth(1).unwrap().contains(",slow,"), "{csv}");
    // Errors are values with one line.
    let bad = SummaryOptions {
        sort: Some("colour".into()),
        ..SummaryOptions::default()
    };
    let e = render(&s, &bad, &mut Vec::new()).unwrap_err().to_string();
    assert!(
        e.starts_with("unknown sort key \"colour\"") && !e.contains('\n'),
        "{e}"
    );
    assert!("nope"
        .parse::<By>()
        .unwrap_err()
        .to_string()
        .contains("callgraph"));
    assert_eq!("callgraph".parse::<By>().unwrap(), By::CallGraph);
    assert_eq!("csv".parse::<Format>().unwrap(), Format::Csv);
    // JSON carries the schema and the source location field.
    let json = render_string(
        &s,
        &SummaryOptions {
            format: Format::Json,
            ..SummaryOptions::default()
        },
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["schema"], "tracer-summary/1");
    assert!(v["functions"][0].get("source").is_some());
    assert_eq!(v["functions"][0]["blocked_ns"], 10 * MS);
    for by in [By::Thread, By::Syscall, By::Connection, By::CallGraph] {
        for format in [Format::Table, Format::Csv] {
            let o = SummaryOptions {
                by,
                format,
                ..SummaryOptions::default()
            };
            assert!(!render_string(&s, &o).is_empty());
        }
    }
}

#[test]
fn random_traces_add_up() {
    for seed in 1..=10u64 {
        let b = random_scenario(seed * 7, 1 + (seed % 4) as u32, 3 + (seed % 5) as u32, 2000);
        let s = summary_of(&b);
        let end = s.duration_ns();
        for t in s.threads() {
            let sum = t.running_ns
                + t.ready_ns
                + t.blocked_ns
                + t.io_ns
                + t.unknown_ns
                + t.not_created_ns
                + t.exited_ns;
            assert_eq!(sum, end, "seed {seed}: thread {} does not tile", t.tid);
        }
        for f in s.functions() {
            let split = f.running_ns + f.ready_ns + f.blocked_ns + f.io_ns;
            assert!(
                split <= f.inclusive_ns,
                "seed {seed}: {} split {split} > inclusive {}",
                f.name,
                f.inclusive_ns
            );
            assert!(f.self_ns <= f.hist.sum());
            assert!(f.p50_ns <= f.p90_ns && f.p90_ns <= f.p99_ns && f.p99_ns <= f.max_ns);
        }
        let diffs = diff_rows(&s, &s, &SummaryOptions::default()).unwrap();
        assert!(diffs.iter().all(|r| r.total_change_ns == 0));
    }
}

/// Go functions: calls paired by goroutine, durations exact, self time within the
/// goroutine, no thread-state split (shown as not measured); a USDT probe's hits counted.
#[test]
fn go_functions_are_timed_by_goroutine() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("go.trace");
    go_scenario().write(&input);
    let s = summarize(std::slice::from_ref(&input)).unwrap();
    let h = s.function("main.handle").unwrap();
    assert_eq!((h.calls, h.inclusive_ns), (2, 700_000 + 200_000));
    assert_eq!(h.self_ns, 700_000 + 200_000 - 50_000);
    assert!(h.goroutine);
    assert_eq!(h.running_ns + h.ready_ns + h.blocked_ns + h.io_ns, 0);
    let e = s.call_edge("main.handle", "main.render").unwrap();
    assert_eq!((e.calls, e.total_ns), (1, 50_000));
    let mut out = Vec::new();
    render(&s, &SummaryOptions::default(), &mut out).unwrap();
    let table = String::from_utf8(out).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("main.handle"))
        .unwrap();
    assert!(row.contains(" - "), "{row}");
    // The USDT probe: its two hits, no time.
    let u = s.function("app:request").unwrap();
    assert!(u.point && !u.goroutine);
    assert_eq!((u.calls, u.inclusive_ns, u.p99_ns), (2, 0, 0));
    let row = table
        .lines()
        .find(|l| l.starts_with("app:request"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..4], ["app:request", "2", "-", "-"], "{row}");
}

/// A stat file of the sleeper's probes and `windows`, in `dir`.
fn stat_file(dir: &std::path::Path, windows: &[trace_file::StatWindow]) -> PathBuf {
    use trace_file::{ChunkKind, Writer};
    let b = sleeper(100);
    let mut header = b.header.clone();
    header.mode = "stat".into();
    let mut w = Writer::new(Vec::new()).unwrap();
    w.meta(ChunkKind::Header, &header).unwrap();
    w.meta(ChunkKind::Probes, &b.probes).unwrap();
    for window in windows {
        w.meta(ChunkKind::Window, window).unwrap();
    }
    let p = dir.join("t.stat");
    std::fs::write(&p, w.into_inner()).unwrap();
    p
}

#[test]
fn damaged_stat_windows_saturate() {
    // Counts and times near u64::MAX, and histograms longer than u64's range of buckets:
    // the sums overflowed and the bucket's bound was a shift past 63.
    use trace_file::{FuncWindow, StatWindow, SysWindow, ThreadWindow};
    let window = StatWindow {
        start_ns: START + 5,
        end_ns: START,
        functions: vec![FuncWindow {
            id: 1,
            calls: u64::MAX,
            timed: Some(u64::MAX),
            errors: u64::MAX,
            total_ns: u64::MAX,
            // A version 6 window's buckets, out of range too, beside an older one's.
            buckets: vec![(u32::MAX, u64::MAX), (40, u64::MAX)],
            hist: vec![u64::MAX; 100],
            untimed: 0,
        }],
        threads: vec![ThreadWindow {
            tid: 100,
            running_ns: u64::MAX,
            ready_ns: u64::MAX,
            wait_hist: vec![u64::MAX; 100],
            syscall_ns: u64::MAX,
            ..ThreadWindow::default()
        }],
        syscalls: vec![SysWindow {
            nr: 0,
            calls: u64::MAX,
            total_ns: u64::MAX,
            positive_sum: u64::MAX,
            ..SysWindow::default()
        }],
        dropped: 0,
        stacks: Vec::new(),
        stack_period_ns: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let p = stat_file(dir.path(), &[window.clone(), window]);
    let s = summarize(&[p]).unwrap();
    let f = s.function("handle_request").unwrap();
    assert_eq!((f.calls, f.inclusive_ns), (u64::MAX, u64::MAX));
    assert_eq!(f.max_ns, (1 << 63) + (1 << 62));
    let t = s.thread(100).unwrap();
    assert_eq!((t.running_ns, t.ready_waits), (u64::MAX, Some(u64::MAX)));
    assert_eq!(s.syscall("read").unwrap().bytes_read, u64::MAX);
    for format in [Format::Table, Format::Json, Format::Csv] {
        let opts = SummaryOptions {
            format,
            ..SummaryOptions::default()
        };
        render_string(&s, &opts);
    }
}

#[test]
fn a_stat_file_takes_the_error_rules_it_can_apply_and_refuses_the_other() {
    // The kernel counts negative returns only: `nonzero` was silently ignored.
    use trace_file::{FuncWindow, StatWindow};
    let window = StatWindow {
        start_ns: START,
        end_ns: START + 10 * MS,
        functions: vec![FuncWindow {
            id: 1,
            calls: 10,
            errors: 3,
            total_ns: 1000,
            ..FuncWindow::default()
        }],
        ..StatWindow::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let p = stat_file(dir.path(), &[window]);
    let with = |error_if| {
        let opts = trace_summary::SummarizeOptions {
            error_if,
            ..Default::default()
        };
        trace_summary::summarize_with(std::slice::from_ref(&p), &opts)
    };
    // Without samples (`--sample N`) a stat file has no state split: not measured.
    let table = render_string(
        &with(ErrorRule::Negative).unwrap(),
        &SummaryOptions::default(),
    );
    let row = (table.lines())
        .find(|l| l.starts_with("handle_request"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[11..15], ["-"; 4], "{table}");
    let errors = |s: Summary| s.function("handle_request").unwrap().errors;
    assert_eq!(errors(with(ErrorRule::Negative).unwrap()), 3);
    assert_eq!(errors(with(ErrorRule::None).unwrap()), 0);
    let refused = with(ErrorRule::NonZero).unwrap_err().to_string();
    assert!(
        refused.contains("nonzero") && !refused.contains('\n'),
        "{refused}"
    );
}

#[test]
fn probe_ids_past_the_probe_table_cost_no_table_up_to_them() {
    // Slots were a table indexed by probe id: id u32::MAX asked for 16 GiB.
    let mut b = sleeper(100);
    b.at(3000, 0, 100, entry(u32::MAX))
        .at(3100, 0, 100, ret(u32::MAX, 0))
        .at(3200, 0, 100, entry(7))
        .at(3300, 0, 100, ret(7, 0));
    b.stop(4000);
    let s = summary_of(&b);
    for name in [
        "handle_request",
        "other",
        "function_4294967295",
        "function_7",
    ] {
        assert_eq!(s.function(name).map(|f| f.calls), Some(1), "{name}");
    }
}

#[test]
fn a_system_call_number_of_any_u32_costs_no_table_up_to_it() {
    // The merged system calls were a table indexed by number: u32::MAX asked for 2^32
    // entries.
    let mut b = sleeper(100);
    b.at(3000, 0, 100, enter(u32::MAX, 0, 0))
        .at(3100, 0, 100, exit(u32::MAX, 0));
    let s = summary_of(&b);
    let nrs: Vec<u32> = s.syscalls().iter().map(|x| x.nr).collect();
    assert_eq!(nrs, [35, u32::MAX]);
}
