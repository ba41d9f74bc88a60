//! The recorder in a PID namespace of its own, as in a container with its own PID space
//! (`podman run` without `--pid=host`, a CI job container): it knows its targets by that
//! namespace's ids, the kernel by its own. Nothing may be lost to the difference: every
//! event class is recorded, and the records say the ids the namespace sees. Needs root.

use std::{
    collections::BTreeSet,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use trace_file::Event;
use tracer_tests::*;

/// `unshare --pid --fork --mount-proc tracer record -- server`: the server's calls as it
/// counts them, and its threads' scheduler, system call and wakeup records, under the
/// namespace's ids; the file keeps the kernel's ids of its processes and threads beside
/// them, as /proc outside the namespace gives them.
#[test]
fn a_recorder_in_its_own_pid_namespace_records_every_event_class_by_the_namespace_ids() {
    let _serial = serial();
    let server = build_fixture("server");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    write_data_file(&data, 4096).unwrap();
    let out = dir.path().join("ns.trace");
    let mut run = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(tracer_bin())
        .args(["record", "-q", "-u", "handle_request", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&server)
        .args(["--workers", "2", "--max-requests", "200", "--data"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux)");
    let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines.next().expect("the server printed no PORT").unwrap();
        if let Some(p) = line.strip_prefix("PORT ") {
            break p.trim().parse().unwrap();
        }
    };
    // The server's id outside the namespace: the process whose NSpid ends with a small id.
    let host_pid = host_pid_of(&server).expect("the server is not in /proc");
    let report = load(port, 4, 50, 512, 2, Duration::from_secs(30));
    let stats = lines
        .map_while(Result::ok)
        .find_map(|l| Stats::parse(&l).ok())
        .expect("the server printed no STATS");
    let done = run.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!((report.requests, stats.requests), (200, 200));

    let t = read_trace(&out);
    assert_eq!(t.lost, 0);
    // The namespace's ids: the recorder is 1 there, the server one of the next few (the
    // recorder may have run `ldconfig -p` first, to find the command's libraries), where
    // the machine's own ids are in the thousands.
    let launched = t.processes.iter().find(|p| p.launched).unwrap();
    let server_pid = launched.tgid;
    assert!((2..10).contains(&server_pid), "{:?}", t.processes);
    assert_eq!(launched.host_pid, Some(host_pid.0), "{launched:?}");
    assert_eq!(server_pid, host_pid.1);
    let main = (t.threads.iter())
        .find(|th| th.tid == server_pid)
        .expect("the server's main thread in the Threads chunk");
    assert_eq!(main.host_tid, Some(host_pid.0), "{main:?}");
    let workers: BTreeSet<u32> = (t.records.iter())
        .filter_map(|r| match &r.event {
            Event::NewTask {
                child_tid, comm, ..
            } if comm.as_str().starts_with("server") => Some(*child_tid),
            _ => None,
        })
        .collect();
    assert!(
        workers.len() >= 2 && workers.iter().all(|&w| w > 2 && w < 100),
        "{workers:?}"
    );

    let h = probe_ids(&out)["handle_request"];
    let calls = count(&t, |r| r.event == Event::FuncEntry { func: h });
    assert_eq!(calls, stats.handle_request);
    // Every event class, for the server's threads, under their namespace ids.
    let by_workers =
        |f: &dyn Fn(&Event) -> bool| count(&t, |r| workers.contains(&r.tid) && f(&r.event));
    assert!(by_workers(&|e| matches!(e, Event::SysEnter { .. })) >= 200);
    assert!(by_workers(&|e| matches!(e, Event::Switch { .. })) >= 10);
    let woken = count(
        &t,
        |r| matches!(r.event, Event::Wakeup { wakee, .. } if workers.contains(&wakee)),
    );
    assert!(woken >= 10, "{woken} wakeups of the workers");
    let entries_by_workers = by_workers(&|e| *e == Event::FuncEntry { func: h });
    assert_eq!(
        entries_by_workers, calls,
        "calls by other tids than the workers'"
    );
}

/// The ids, outside and inside its PID namespace, of the process running `exe` that is in
/// a namespace of its own: /proc's `NSpid` line (`NSpid: HOST ... NS`).
fn host_pid_of(exe: &std::path::Path) -> Option<(u32, u32)> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(e.path().join("exe")).ok().as_deref() != Some(exe) {
            continue;
        }
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let ids: Vec<u32> = (status.lines())
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if let [host, .., inner] = ids[..] {
            if host == pid && ids.len() > 1 {
                return Some((host, inner));
            }
        }
    }
    None
}
