//! `--cgroup`: every process of a cgroup v2, those in it when recording starts and those
//! that enter it later (as `podman exec` or a service restart puts processes in a
//! container's or a service's cgroup), with their probes. Needs root.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use trace_file::Event;
use tracer_tests::*;

/// A cgroup made for the test under the cgroup v2 mount, removed at the end.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn new(name: &str) -> TestCgroup {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let root = (mounts.lines())
            .find(|l| {
                l.split(" - ")
                    .nth(1)
                    .is_some_and(|r| r.starts_with("cgroup2 "))
            })
            .and_then(|l| l.split_whitespace().nth(4))
            .expect("no cgroup v2 hierarchy mounted");
        let dir = Path::new(root).join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        TestCgroup(dir)
    }

    /// Empties and removes it (the tracer recording it then stops by itself).
    fn remove(&self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(self.0.join("cgroup.procs")).is_ok_and(|p| p.is_empty())
        });
        let _ = std::fs::remove_dir(&self.0);
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if self.0.exists() {
            self.remove();
        }
    }
}

#[test]
fn a_cgroup_is_traced_whole_with_the_processes_that_enter_it_later() {
    let _serial = serial();
    let cg = TestCgroup::new("tracer-test");
    let opts = ServerOptions {
        workers: 2,
        cgroup: Some(cg.0.clone()),
        ..Default::default()
    };
    let first = Server::start(&opts).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cg.trace");
    let cgroup = cg.0.to_str().unwrap();
    let rec = start_tracer_on(
        "record",
        &["--cgroup", cgroup],
        &out,
        &["-u", "handle_request"],
        || Some(out.clone()),
    );
    // One server in the cgroup before the recording, one that enters it during it.
    let second = Server::start(&opts).unwrap();
    let (p1, p2) = (first.pid(), second.pid());
    let r1 = load(first.port(), 4, 25, 512, 2, Duration::from_secs(20));
    let r2 = load(second.port(), 4, 25, 512, 2, Duration::from_secs(20));
    let (s1, s2) = (first.stop().unwrap(), second.stop().unwrap());
    assert_eq!(
        (r1.requests, r2.requests, r1.errors + r2.errors),
        (100, 100, 0)
    );
    // Removing the cgroup ends the recording.
    cg.remove();
    let done = rec.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );

    let t = read_trace(&out);
    assert_eq!(t.lost, 0);
    assert_eq!(t.trailer.as_ref().unwrap().reason, "cgroup removed");
    for p in [p1, p2] {
        assert!(
            t.processes.iter().any(|x| x.tgid == p),
            "no Process chunk for {p}"
        );
    }
    // Each server's calls, as it counted them, by its own threads.
    let h = probe_ids(&out)["handle_request"];
    let tgid_of = |tid: u32| -> Option<u32> {
        let known = t.threads.iter().find(|x| x.tid == tid).map(|x| x.tgid);
        known.or_else(|| {
            t.records.iter().find_map(|r| match r.event {
                Event::NewTask {
                    child_tid,
                    child_tgid,
                    ..
                } if child_tid == tid => Some(child_tgid),
                _ => None,
            })
        })
    };
    let calls = |pid: u32| {
        count(&t, |r| {
            r.event == Event::FuncEntry { func: h } && tgid_of(r.tid) == Some(pid)
        })
    };
    assert_eq!(
        (calls(p1), calls(p2)),
        (s1.handle_request, s2.handle_request)
    );
    // The newcomer's threads have their scheduler and system call records too.
    let of_second =
        |f: &dyn Fn(&Event) -> bool| count(&t, |r| tgid_of(r.tid) == Some(p2) && f(&r.event));
    assert!(of_second(&|e| matches!(e, Event::SysEnter { .. })) >= 100);
    assert!(of_second(&|e| matches!(e, Event::Switch { .. })) >= 10);
}

/// `tracer stat --cgroup` on a stripped Go server: its executable probed for every process
/// of the cgroup, the Go way (the entry and each return, paired by goroutine), and every
/// call counted and timed as the server counted and timed them.
#[test]
fn a_go_server_in_a_cgroup_is_counted_exactly() {
    let _serial = serial();
    let cg = TestCgroup::new("tracer-go");
    let server = Server::start(&ServerOptions {
        go: true,
        sleep_us: 300,
        cgroup: Some(cg.0.clone()),
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("go.stat");
    let stat = start_tracer_on(
        "stat",
        &["--cgroup", cg.0.to_str().unwrap()],
        &out,
        &["-u", "main.handle", "--exact-latency"],
        || Some(out.clone()),
    );
    let before = server.stats().unwrap();
    let report = load(server.port(), 8, 100, 2048, 4, Duration::from_secs(60));
    let during = server.stats().unwrap();
    stop_tracer(stat);
    server.stop().expect("the Go server exits cleanly");
    assert_eq!((report.requests, report.errors), (800, 0));
    let calls = during.handle_request - before.handle_request;
    assert_eq!(calls, 800);

    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    let f = s
        .function("main.handle")
        .expect("main.handle in the summary");
    assert!(f.goroutine && !f.estimated, "{f:?}");
    assert_eq!((f.calls, f.timed_calls), (calls, calls));
    // The probes bracket the server's own clock reads: never less than its measure, more
    // by at most 2% (measured 1.0017 of it; see tests/servers.rs).
    let handle_ns = during.handle_ns - before.handle_ns;
    assert!(
        f.inclusive_ns >= handle_ns && f.inclusive_ns - handle_ns <= handle_ns / 50,
        "counted {} ns, the server's own {handle_ns} ns over {calls} calls",
        f.inclusive_ns
    );
    // Its 300 us sleep, to within the buckets' resolution (a sixteenth).
    assert!(f.min_ns >= 300_000 - 300_000 / 16, "{f:?}");
}
