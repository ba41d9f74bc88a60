//! `--events` and `--syscalls`: the classes left out are not recorded (their programs are
//! not even attached), those kept are whole. Needs root.

use std::time::Duration;

use trace_file::Event;
use tracer_tests::*;

#[test]
fn event_classes_left_out_are_absent_and_those_kept_are_whole() {
    let _serial = serial();
    let server = Server::start(&ServerOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let calls_only = dir.path().join("calls.trace");
    let some_syscalls = dir.path().join("syscalls.trace");
    let a = start_tracer(
        "record",
        server.pid(),
        &calls_only,
        &["--events", "calls", "-u", "handle_request"],
    );
    let b = start_tracer(
        "record",
        server.pid(),
        &some_syscalls,
        &["--events", "sched,syscalls", "--syscalls", "read,accept4"],
    );
    let report = load(server.port(), 4, 50, 512, 2, Duration::from_secs(20));
    stop_tracer(a);
    stop_tracer(b);
    let stats = server.stop().unwrap();
    assert_eq!(report.errors, 0);

    let t = read_trace(&calls_only);
    let h = probe_ids(&calls_only)["handle_request"];
    assert_eq!(
        count(&t, |r| r.event == Event::FuncEntry { func: h }),
        stats.handle_request
    );
    let other = count(&t, |r| {
        matches!(
            r.event,
            Event::SysEnter { .. }
                | Event::SysExit { .. }
                | Event::Switch { .. }
                | Event::Wakeup { .. }
        )
    });
    assert_eq!(
        other, 0,
        "scheduler or system call records with --events calls"
    );

    let t = read_trace(&some_syscalls);
    let (read, accept4) = (0, 288);
    let mut seen = std::collections::BTreeSet::new();
    for r in &t.records {
        if let Event::SysEnter { nr, .. } | Event::SysExit { nr, .. } = r.event {
            seen.insert(nr);
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [read, accept4]);
    // Every accepted connection's accept4 is there, and the scheduler's records.
    let accepts = count(
        &t,
        |r| matches!(r.event, Event::SysExit { nr: 288, ret } if ret >= 0),
    );
    assert_eq!(accepts, stats.connections);
    assert!(count(&t, |r| matches!(r.event, Event::Switch { .. })) > 0);
    assert_eq!(count(&t, |r| matches!(r.event, Event::FuncEntry { .. })), 0);
}
