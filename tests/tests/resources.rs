//! `tracer record` under long and hostile runs (#13): a disk that fills, days of thread
//! churn, a thousand threads, a fork storm, an exec, a target killed with SIGKILL. The
//! tracer never harms the traced process, loses nothing silently, and says every failure
//! in one line with a non-zero exit. Ground truth is the fixtures' own counters.
//! Needs root: these load eBPF programs (and mount a tmpfs).

use std::{
    collections::{HashMap, HashSet},
    fs::File,
    path::Path,
    process::Command,
    time::Duration,
};

use trace_file::{ChunkKind, End, Event, EventChunkDecoder, Reader};
use tracer_tests::*;

const GETPPID: u32 = 110;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The state letter of process `pid` (R, S, Z, ...), if it exists.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// `getppid` calls completed per thread.
fn getppid_by_tid(t: &Trace) -> HashMap<u32, u64> {
    let mut n = HashMap::new();
    for r in &t.records {
        if matches!(r.event, Event::SysExit { nr: GETPPID, .. }) {
            *n.entry(r.tid).or_default() += 1;
        }
    }
    n
}

/// The disk fills while recording: the recorder stops with one line that names the file
/// and what it holds, exits non-zero, and leaves a file whose every chunk checks (its end
/// torn at most). The traced process goes on unharmed.
#[test]
fn a_disk_that_fills_up_ends_the_recording_in_one_line_and_a_readable_file() {
    let _serial = serial();
    let dir = tmp();
    let _fs = Tmpfs::mount(dir.path(), "4m");
    // Two threads of getppid() for 8 s: millions of records a second, 4 MiB of them in
    // well under one; it is still running when the recorder fails.
    let mut fx = Piped::spawn(&build_fixture("storm"), &["2", "8"]);
    let out = dir.path().join("t.trace");
    let rec = start_tracer("record", fx.pid(), &out, &[]);
    fx.send(b"g");
    let output = wait_output(rec, Duration::from_secs(20));
    let state = process_state(fx.pid());
    assert!(
        !matches!(state, Some('T' | 't' | 'Z' | 'X')),
        "the traced process is {state:?} after the recorder failed"
    );

    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a full disk exited 0: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.contains("disk is full"), "{err}");
    assert!(err.contains(out.to_str().unwrap()), "which file? {err}");
    let on_disk = std::fs::metadata(&out).unwrap().len();
    assert!(
        err.contains(&format!("{on_disk} bytes")),
        "the file holds {on_disk} bytes: {err}"
    );
    eprintln!("{}", err.trim_end());

    // Strictly read: any damage is an error; only the end may be torn.
    let mut reader = Reader::new(File::open(&out).unwrap()).unwrap();
    let (mut kinds, mut records) = (vec![], 0u64);
    while let Some(c) = reader.next_chunk().unwrap() {
        if c.kind == ChunkKind::Events {
            for r in EventChunkDecoder::new(&c.payload, c.offset).unwrap() {
                r.unwrap();
                records += 1;
            }
        }
        kinds.push(c.kind);
    }
    let end = reader.end().unwrap();
    match end {
        End::Complete => {}
        // Of one chunk at most: 256 KiB of records, and the last one's few bytes more.
        End::Torn { offset } => assert!(on_disk - offset < 257 << 10, "torn at {offset}"),
    }
    assert_eq!(
        kinds[..4],
        [
            ChunkKind::Header,
            ChunkKind::Process,
            ChunkKind::Threads,
            ChunkKind::Probes
        ]
    );
    assert!(records > 10_000, "only {records} records read back");
    eprintln!("{on_disk} bytes on a full 4 MiB disk: {records} records read back, end {end:?}");

    // Unharmed: it runs to its end and reports its calls.
    assert!(fx.wait(Duration::from_secs(20)).success());
    let calls = fx.numbers("CALLS", Duration::from_secs(5))[0];
    assert!(calls > 0);
}

/// A flight recorder left on for days over a process whose threads come and go by the
/// thousand: the recorder's memory stays flat. Thread ids do not wrap around during the
/// run (pid_max raised), so a table keyed by thread id that is never pruned grows for all
/// of it.
#[test]
fn memory_stays_flat_over_a_rotated_recording_of_thread_churn() {
    let _serial = serial();
    let _pid_max = PidMax::at_least(1 << 22);
    let dir = tmp();
    let base = dir.path().join("churn.trace");
    let mut fx = Piped::spawn(&build_fixture("churn"), &["100000000", "16"]);
    let args = ["--rotate", "1s", "--keep", "3"];
    let rec = start_tracer_writing("record", fx.pid(), &base, &args, || first_file(dir.path()));
    let recorder = rec.id();
    fx.send(b"g");
    // VmRSS every 200 ms until the churn ends.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let sampler = std::thread::spawn(move || {
        let mut kib = vec![];
        while rx.recv_timeout(Duration::from_millis(200)).is_err() {
            kib.extend(vm_rss_kib(recorder));
        }
        kib
    });
    let threads = fx.numbers("THREADS", Duration::from_secs(60))[0];
    tx.send(()).unwrap();
    let kib = sampler.join().unwrap();
    assert!(fx.wait(Duration::from_secs(10)).success());
    stop_tracer_within(rec, Duration::from_secs(20));

    let (first, second) = kib.split_at(kib.len() / 2);
    let (max1, max2) = (first.iter().max().unwrap(), second.iter().max().unwrap());
    let min2 = second.iter().min().unwrap();
    eprintln!(
        "{threads} threads in 16 s; recorder RSS KiB: first half max {max1}, second half {min2}..{max2}; samples {kib:?}"
    );
    assert!(threads > 10_000, "only {threads} threads: no churn");
    // The bound: the recorder's buffers (1 MiB file buffer, 256 KiB per CPU of encoded
    // records, the rings' pages as they are first read) are all touched within the first
    // second of this load. Measured on 2 loaded CPUs (426,368 and 494,080 threads in the
    // 16 s): VmRSS 57,872 KiB in every one of 80 samples, a spread of 0. The 1 MiB allows
    // for allocator slack elsewhere. What it catches: with the thread table never pruned
    // (a thread's exit not forgetting it), the second half grew by 4,916 KiB. (A leak of a
    // few entries a second, as exits drained before their thread's creation left, is too
    // slow for 16 s: `tree`'s unit tests hold that one.)
    assert!(
        *max2 <= max1 + 1024,
        "RSS grew from {max1} KiB (first half) to {max2} KiB (second half)"
    );

    // --keep 3: the newest three files, each complete.
    let paths = files_in(dir.path());
    assert_eq!(paths.len(), 3, "{paths:?}");
    for (i, p) in paths.iter().enumerate() {
        let t = read_trace(p);
        let reason = &t.trailer.as_ref().expect("every file is finished").reason;
        // The last ends by the signal, or by itself when it saw the fixture exit first.
        match i {
            2 => assert!(
                ["signal", "process exited"].contains(&reason.as_str()),
                "{reason}"
            ),
            _ => assert_eq!(reason, "rotated"),
        }
    }
}

/// A thousand threads, half there before the recorder attaches and half created after:
/// each is in the trace, with each of its system calls and its scheduling.
#[test]
fn a_process_with_a_thousand_threads_is_recorded_whole() {
    let _serial = serial();
    let mut fx = Piped::spawn(&build_fixture("manythreads"), &["500", "500", "3"]);
    let pid = fx.pid();
    assert_eq!(fx.numbers("READY", Duration::from_secs(20)), [500]);
    let dir = tmp();
    let out = dir.path().join("t.trace");
    let rec = start_tracer("record", pid, &out, &[]);
    fx.send(b"g");
    assert_eq!(fx.numbers("DONE", Duration::from_secs(30)), [1000, 3000]);
    let alive: Vec<u32> = threads(pid).into_iter().map(|(tid, _)| tid).collect();
    assert_eq!(alive.len(), 1001);
    stop_tracer_within(rec, Duration::from_secs(20));
    assert!(fx.wait(Duration::from_secs(20)).success());

    let t = read_trace(&out);
    assert_eq!(t.lost, 0, "events were lost");
    let at_start: HashSet<u32> = t.threads.iter().map(|x| x.tid).collect();
    let created: HashSet<u32> = (t.records.iter())
        .filter_map(|r| match r.event {
            Event::NewTask {
                child_tid,
                child_tgid,
                ..
            } if child_tgid == pid => Some(child_tid),
            _ => None,
        })
        .collect();
    assert_eq!(at_start.len(), 501, "main and the first 500");
    assert_eq!(created.len(), 500, "the 500 created while recording");
    let calls = getppid_by_tid(&t);
    let mut switched: HashSet<u32> = HashSet::new();
    for r in &t.records {
        if matches!(r.event, Event::Switch { .. }) {
            switched.insert(r.tid);
        }
    }
    for &tid in alive.iter().filter(|&&tid| tid != pid) {
        assert!(
            at_start.contains(&tid) || created.contains(&tid),
            "thread {tid} is not in the trace"
        );
        assert_eq!(calls.get(&tid), Some(&3), "thread {tid}'s getppid calls");
        assert!(switched.contains(&tid), "thread {tid} never switched out");
    }
    eprintln!(
        "{} threads at attach, {} created, {} getppid calls",
        at_start.len(),
        created.len(),
        calls.values().sum::<u64>()
    );
}

/// A fork storm under `--pid` of its root: every process created is in the trace, with
/// its creation, its probed call, its exit and its Process chunk, as many as the fixture
/// counted; and the recorder stops when asked.
#[test]
fn a_fork_storm_is_recorded_process_by_process() {
    let _serial = serial();
    let mut fx = Piped::spawn(&build_fixture("forkstorm"), &["24", "24"]);
    let pid = fx.pid();
    let dir = tmp();
    let out = dir.path().join("t.trace");
    let rec = start_tracer_saying("record", pid, &out, &["-u", "work"], || Some(out.clone()));
    fx.send(b"g");
    let forks = fx.numbers("FORKS", Duration::from_secs(60))[0];
    let said = stop_tracer_within(rec, Duration::from_secs(20));
    let said = String::from_utf8_lossy(&said.stderr);
    assert!(fx.wait(Duration::from_secs(10)).success());
    assert_eq!(forks, 24 + 24 * 24, "forks failed in the fixture");

    let t = read_trace(&out);
    assert_eq!(t.lost, 0, "events were lost");
    let mut created: Vec<u32> = (t.records.iter())
        .filter_map(|r| match r.event {
            Event::NewTask {
                child_tid,
                child_tgid,
                ..
            } if child_tid == child_tgid => Some(child_tgid),
            _ => None,
        })
        .collect();
    let n = created.len() as u64;
    created.sort_unstable();
    created.dedup();
    assert_eq!(created.len() as u64, n, "a process created twice?");
    assert_eq!(n, forks, "process creations in the trace");
    let ended: HashSet<u32> = (t.records.iter())
        .filter_map(|r| match r.event {
            Event::Exit {
                tgid,
                group_dead: true,
            } => Some(tgid),
            _ => None,
        })
        .collect();
    let chunks: HashSet<u32> = t.processes.iter().map(|p| p.tgid).collect();
    for p in &created {
        assert!(ended.contains(p), "process {p}: no exit");
        assert!(chunks.contains(p), "process {p}: no Process chunk");
    }
    // Every process forked calls work() once, and every call is recorded: work() is in
    // the process's own executable, probed machine-wide by uprobe_multi links whose
    // programs keep to traced processes. (Probes inherited as perf events, as a library's
    // are, were lost by grandchildren on this kernel, 6.18: 197 to 565 calls of the 600 in
    // runs of this test, `perf record -p ROOT` missing the same; the recorder says how
    // many processes got their probes that way, none here.)
    let work = probe_ids(&out)["work"];
    let mut callers: Vec<u32> = (t.records.iter())
        .filter(|r| r.event == Event::FuncEntry { func: work })
        .map(|r| r.tid)
        .collect();
    let calls = callers.len() as u64;
    callers.sort_unstable();
    callers.dedup();
    assert_eq!(calls, forks, "calls of work() by {forks} processes");
    assert_eq!(
        callers, created,
        "one call of work() by each process created"
    );
    assert!(
        !said.contains("inherited their probes from a process"),
        "{said}"
    );
    eprintln!(
        "{forks} forks: {n} creations, {} exits, {calls} calls of work() recorded",
        ended.len()
    );
}

/// Children that exit while the tracer walks the tree and attaches their probes: a paced
/// fork storm runs while `record --pid ROOT` starts, with a library function probed (a
/// library's probes are attached process by process). A child found by the walk and gone
/// before its probes is skipped, not an error that ends the recording; the traced root's
/// calls are recorded.
#[test]
fn children_exiting_during_the_walk_do_not_stop_the_recording() {
    let _serial = serial();
    for _ in 0..3 {
        // 300 children, each forking 3 of its own, each process sleeping 300 us: a few
        // processes alive at any time, each for a millisecond or two.
        let mut fx = Piped::spawn(&build_fixture("forkstorm"), &["300", "3", "300"]);
        let pid = fx.pid();
        fx.send(b"g");
        std::thread::sleep(Duration::from_millis(100));
        let dir = tmp();
        let out = dir.path().join("t.trace");
        let rec = Command::new(tracer_bin())
            .args(["record", "-q", "-d", "300ms", "-u", "libc:getppid", "-o"])
            .arg(&out)
            .args(["--pid", &pid.to_string()])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&rec.stderr);
        assert!(rec.status.success(), "{said}");
        let t = read_trace(&out);
        assert_eq!(t.lost, 0);
        fx.numbers("FORKS", Duration::from_secs(60));
        assert!(fx.wait(Duration::from_secs(10)).success());
    }
}

/// A process that execs another program mid-recording, from its main thread and from
/// another thread (which the kernel gives the process id): the exec is recorded and so is
/// everything after it, to the new program's exit; the file summarizes and converts.
#[test]
fn recording_goes_on_across_an_exec() {
    let _serial = serial();
    for who in ["main", "thread"] {
        let mut fx = Piped::spawn(&build_fixture("execer"), &[who, "5", "/bin/sleep", "0.3"]);
        let pid = fx.pid();
        let dir = tmp();
        let out = dir.path().join("t.trace");
        let rec = start_tracer("record", pid, &out, &[]);
        fx.send(b"g");
        assert_eq!(fx.numbers("CALLS", Duration::from_secs(10)), [5]);
        // The recorder stops by itself once the new program has exited.
        let output = wait_output(rec, Duration::from_secs(20));
        assert!(
            output.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(fx.wait(Duration::from_secs(10)).success());

        let t = read_trace(&out);
        assert_eq!(t.lost, 0, "{who}: events were lost");
        assert_eq!(t.trailer.as_ref().unwrap().reason, "process exited");
        let exec: Vec<u64> = (t.records.iter())
            .filter(|r| {
                r.tid == pid && matches!(r.event, Event::Exec { comm } if comm.as_str() == "sleep")
            })
            .map(|r| r.ts)
            .collect();
        assert_eq!(exec.len(), 1, "{who}: the exec record");
        let (before, after): (Vec<_>, Vec<_>) = (t.records.iter())
            .filter(|r| r.tid == pid)
            .partition(|r| r.ts < exec[0]);
        let getppid = |rs: &[&trace_file::Record]| {
            rs.iter()
                .filter(|r| matches!(r.event, Event::SysExit { nr: GETPPID, .. }))
                .count()
        };
        assert_eq!(getppid(&before), 5, "{who}: the calls before the exec");
        let has = |pred: &dyn Fn(&Event) -> bool| after.iter().any(|r| pred(&r.event));
        assert!(
            has(&|e| matches!(
                e,
                Event::SysExit {
                    nr: 35 | 230,
                    ret: 0
                }
            )),
            "{who}: sleep's sleep is missing"
        );
        assert!(
            has(&|e| matches!(e, Event::Switch { .. })),
            "{who}: no scheduling after the exec"
        );
        assert!(
            has(&|e| matches!(
                e,
                Event::Exit {
                    group_dead: true,
                    ..
                }
            )),
            "{who}: the new program's exit is missing"
        );
        eprintln!(
            "{who}: {} records before the exec, {} after",
            before.len(),
            after.len()
        );

        let summary = tracer_ok(&["summary".as_ref(), out.as_os_str()]);
        assert!(!summary.stdout.is_empty(), "{who}: empty summary");
        // The process goes by the program it runs last.
        let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
        let main = (s.threads().iter()).find(|t| t.tid == pid).unwrap();
        assert_eq!(main.process, "sleep", "{who}: {main:?}");
        let json = dir.path().join("t.json");
        tracer_ok(&[
            "convert".as_ref(),
            out.as_os_str(),
            "-o".as_ref(),
            json.as_os_str(),
        ]);
        trace_testkit::check::chrome::check(&json).unwrap_or_else(|e| panic!("{}", e.join("\n")));
    }
}

/// A target killed with SIGKILL (and left unreaped, a zombie): the recorder notices, stops
/// by itself and exits 0; its file is complete and holds everything up to the kill, every
/// thread's exit included.
#[test]
fn a_target_killed_with_sigkill_ends_the_recording_cleanly() {
    let _serial = serial();
    let mut fx = Piped::spawn(&build_fixture("manythreads"), &["20", "20", "3"]);
    let pid = fx.pid();
    assert_eq!(fx.numbers("READY", Duration::from_secs(20)), [20]);
    let dir = tmp();
    let out = dir.path().join("t.trace");
    let rec = start_tracer("record", pid, &out, &[]);
    fx.send(b"g");
    assert_eq!(fx.numbers("DONE", Duration::from_secs(20)), [40, 120]);
    let tids: Vec<u32> = threads(pid).into_iter().map(|(tid, _)| tid).collect();
    assert_eq!(tids.len(), 41);
    fx.signal(libc::SIGKILL);
    let output = wait_output(rec, Duration::from_secs(20));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(process_state(pid), Some('Z'), "reaped behind our back?");

    let t = read_trace(&out);
    assert_eq!(t.lost, 0, "events were lost");
    assert_eq!(t.trailer.as_ref().unwrap().reason, "process exited");
    let calls = getppid_by_tid(&t);
    let exits: HashMap<u32, bool> = (t.records.iter())
        .filter_map(|r| match r.event {
            Event::Exit { tgid, group_dead } if tgid == pid => Some((r.tid, group_dead)),
            _ => None,
        })
        .collect();
    for &tid in &tids {
        if tid != pid {
            assert_eq!(calls.get(&tid), Some(&3), "thread {tid}'s calls");
        }
        assert!(exits.contains_key(&tid), "thread {tid}: no exit");
    }
    assert_eq!(exits.values().filter(|&&g| g).count(), 1, "one group exit");
    assert!(Path::new(&out).exists());
}

/// Processes whose exec raises their privileges (tests/fixtures/privexec.c: a root that
/// dropped capabilities, as Dovecot's master does, forks children that regain them by
/// executing a program): the kernel removes such a process's perf events at the exec,
/// the uprobes it inherited among them, and its calls went unrecorded, none of them and
/// nothing said (0 of 50 on Dovecot's imap processes). The programs see it at the exec
/// and the recorder attaches the probes again: every call of the children, in their
/// program and in libc, as many as the fixture counts, and the end report says so.
#[test]
fn probes_removed_by_a_privilege_raising_exec_are_attached_again() {
    let _serial = serial();
    let bin = build_fixture("privexec");
    let dir = tmp();
    let out = dir.path().join("p.trace");
    let mut cmd = std::process::Command::new(tracer_bin());
    cmd.args([
        "record",
        "--events",
        "calls",
        "-u",
        "work",
        "-u",
        "libc:getppid",
    ]);
    let o = cmd.arg("-o").arg(&out).arg("--").arg(&bin).arg("5");
    let o = o.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("5 processes lost their probes at an exec"),
        "{err}"
    );
    let calls = counted(&o, "CALLS");
    assert_eq!(calls, 25);
    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    for f in ["work", "getppid"] {
        let f = s
            .function(f)
            .unwrap_or_else(|| panic!("no calls of {f}: {err}"));
        assert_eq!((f.calls, f.unfinished), (calls, 0), "{err}");
    }
}

/// A process that entered a chroot after mapping its libraries (tests/fixtures/chrooted.c,
/// as daemons confine their helpers): its maps name libc from the recorder's root, which
/// is not its root, so the library was not found through it and `--pid` on it failed
/// (and its probes were silently missing when it was a traced process's descendant). The
/// library is opened through the mapping itself: every call recorded.
#[test]
fn a_chrooted_process_is_probed_in_its_libraries() {
    let _serial = serial();
    let root = tmp();
    let dir = root.path().to_str().unwrap();
    let mut fx = Piped::spawn(&build_fixture("chrooted"), &[dir, "100"]);
    let out = tmp();
    let out = out.path().join("c.trace");
    let rec = start_tracer("record", fx.pid(), &out, &["-u", "libc:getppid"]);
    fx.send(b"g");
    assert_eq!(fx.numbers("CALLS", Duration::from_secs(10)), [100]);
    let output = wait_output(rec, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{err}");
    assert!(fx.wait(Duration::from_secs(10)).success());
    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    let f = s
        .function("getppid")
        .unwrap_or_else(|| panic!("no calls: {err}"));
    assert_eq!((f.calls, f.unfinished), (100, 0), "{err}");
}
