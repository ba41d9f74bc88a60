//! USDT probes: arguments read as each probe's note describes them (registers, stack
//! memory, constants, an indexed array element, a global through its symbol), a probe
//! behind a semaphore, checked against the values the fixture passes. Needs root.

use std::process::Command;
use std::time::Duration;

use trace_file::Event;
use tracer_tests::*;

/// `usdt 5 40` fires every probe 40 times; the recorded arguments are the program's.
#[test]
fn usdt_arguments_are_the_programs_values() {
    let _serial = serial();
    let bin = build_usdt_fixture();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("u.trace");
    let run = Command::new(tracer_bin())
        .args(["record", "--quiet", "-u", "usdt:fix:*", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&bin)
        .args(["5", "40"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let t = read_trace(&out);
    assert_eq!(t.lost, 0);
    let ids = probe_ids(&out);
    let hits = |name: &str| -> Vec<Vec<i64>> {
        let id = ids[&format!("fix:{name}")];
        (t.records.iter())
            .filter_map(|r| match r.event {
                Event::Usdt { probe, nargs, args } if probe == id => {
                    Some(args[..nargs as usize].iter().map(|&a| a as i64).collect())
                }
                _ => None,
            })
            .collect()
    };
    let same = |name: &str, want: &[i64]| {
        let h = hits(name);
        assert_eq!(h.len(), 40, "fix:{name} hits");
        assert!(h.iter().all(|a| a == want), "fix:{name}: {:?}", h[0]);
    };
    let big = 5i64 << 33;
    same("zero", &[]);
    same("one", &[5]);
    same("two", &[5, 5]);
    same("three", &[5, -5, big]);
    same("guarded", &[5]);
    let four = hits("four");
    let arr = four[0][2];
    assert!(arr > 0x1000, "arr is a stack address: {arr:#x}");
    same("four", &[15, big - 1, arr, 5]);
    same("five", &[2, 5, 5, 5, big]);
    same("six", &[5, 6, 7, 8, arr, -1]);
    // The global, read through its symbol, counts up by n each round.
    let global: Vec<i64> = hits("global").iter().map(|a| a[0]).collect();
    assert_eq!(global, (0..40).map(|i| i * 5).collect::<Vec<_>>());

    // `tracer dump` names each probe `provider:name` and shows a hit's arguments.
    let dump = tracer_ok(&["dump".as_ref(), out.as_os_str()]);
    let dump = String::from_utf8_lossy(&dump.stdout);
    let three = ids["fix:three"];
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("# probe id={three} name=fix:three "))),
        "{dump}"
    );
    let want = format!("usdt probe={three} arg0=5 arg1=-5 arg2={big}");
    assert_eq!(
        dump.lines().filter(|l| l.ends_with(&want)).count(),
        40,
        "{want}"
    );
}

/// `tracer probes 'usdt:...'` lists the probes with their argument specs and semaphores,
/// like `bpftrace -l`.
#[test]
fn usdt_probes_are_listed() {
    let bin = build_usdt_fixture();
    let out = tracer_ok(&[
        "probes".as_ref(),
        "--path".as_ref(),
        bin.as_os_str(),
        "usdt:fix:g*".as_ref(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains(":fix:global ") && lines[0].contains("global_counter(%rip)"));
    assert!(lines[1].contains(":fix:guarded ") && lines[1].ends_with(" semaphore"));
}

/// A probe's semaphore is raised while the tracer has the probe attached and is back to 0
/// once it stops, read straight from the process's memory; the process runs on.
#[test]
fn a_semaphore_is_raised_while_attached_and_cleared_at_stop() {
    let _serial = serial();
    let bin = build_usdt_fixture();
    // A round every millisecond, until killed.
    let mut fx = Reaped(Command::new(&bin).args(["5", "0"]).spawn().unwrap());
    let pid = fx.id();
    let exe = std::fs::canonicalize(&bin).unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe)
    }));
    let semaphore = runtime_address(pid, &bin, "fix_guarded_semaphore");
    let counter = runtime_address(pid, &bin, "global_counter");
    let sem = || u16::from_ne_bytes(read_memory(pid, semaphore).unwrap());
    let rounds = || i64::from_ne_bytes(read_memory(pid, counter).unwrap()) / 5;
    assert_eq!(sem(), 0, "before the tracer");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("u.trace");
    let tracer = start_tracer("record", pid, &out, &["-u", "usdt:fix:guarded"]);
    assert!(sem() > 0, "the semaphore while attached");
    // Two whole rounds while attached: `guarded` fired at least once.
    let attached = rounds();
    assert!(wait_until(Duration::from_secs(60), || rounds() >= attached + 2));
    stop_tracer(tracer);
    assert_eq!(sem(), 0, "after the tracer stopped");
    assert!(fx.try_wait().unwrap().is_none(), "the fixture exited");
    let after = rounds();
    assert!(wait_until(Duration::from_secs(60), || rounds() > after));
    fx.kill().unwrap();
    fx.wait().unwrap();

    let t = read_trace(&out);
    let id = probe_ids(&out)["fix:guarded"];
    let hits: Vec<_> = (t.records.iter())
        .filter_map(|r| match r.event {
            Event::Usdt { probe, nargs, args } if probe == id => {
                Some(args[..nargs as usize].to_vec())
            }
            _ => None,
        })
        .collect();
    assert!(!hits.is_empty());
    assert!(hits.iter().all(|a| a == &[5]), "{:?}", hits[0]);
}

/// Python's own probe, on a binary nobody here built, behind a semaphore: every call of a
/// function is recorded, with the line Python gives as the function's first.
#[test]
fn python_function_entries_are_recorded_with_their_line() {
    let _serial = serial();
    let py = "/usr/bin/python3.11";
    assert!(
        std::path::Path::new(py).exists(),
        "{py} is missing (Debian package python3.11-minimal)"
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("calls.py");
    let line_file = dir.path().join("line");
    // Python 3.11 fires function__entry only while a profile or trace function is set
    // (CPython issue 98894): the no-op profiler makes it fire on every call.
    std::fs::write(
        &script,
        "import sys\n\
         \n\
         def f():\n\
         \x20   pass\n\
         \n\
         sys.setprofile(lambda *event: None)\n\
         for i in range(1234):\n\
         \x20   f()\n\
         sys.setprofile(None)\n\
         open(sys.argv[1], 'w').write(str(f.__code__.co_firstlineno))\n",
    )
    .unwrap();
    let out = dir.path().join("py.trace");
    let run = Command::new(tracer_bin())
        .args(["record", "--quiet", "-o"])
        .arg(&out)
        .args([
            "-u",
            &format!("usdt:{py}:python:function__entry"),
            "--",
            py,
            "-S",
            "-I",
        ])
        .arg(&script)
        .arg(&line_file)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let line: u64 = std::fs::read_to_string(&line_file)
        .unwrap()
        .parse()
        .unwrap();

    let t = read_trace(&out);
    assert_eq!(t.lost, 0);
    let id = probe_ids(&out)["python:function__entry"];
    // (filename, function name) pointers, line number.
    let mut by_function: std::collections::HashMap<(u64, u64), Vec<u64>> = Default::default();
    for r in &t.records {
        if let Event::Usdt { probe, nargs, args } = r.event {
            if probe == id {
                assert_eq!(nargs, 3);
                by_function
                    .entry((args[0], args[1]))
                    .or_default()
                    .push(args[2]);
            }
        }
    }
    let f = by_function
        .values()
        .max_by_key(|lines| lines.len())
        .unwrap();
    assert_eq!(f.len(), 1234, "calls of f");
    assert!(
        f.iter().all(|&l| l == line),
        "f starts at line {line}: {:?}",
        &f[..3]
    );
}

/// `tracer stat` counts USDT probes' hits exactly, beside a function of the same program:
/// `usdt 5 40` fires every probe 40 times (the semaphore's too) and calls `work` 40
/// times. The summary shows the hits as counts without times.
#[test]
fn usdt_hits_are_counted_by_stat() {
    let _serial = serial();
    let bin = build_usdt_fixture();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("u.stat");
    let o = |s: &'static str| std::ffi::OsStr::new(s);
    tracer_ok(&[
        o("stat"),
        o("--quiet"),
        o("--exact-latency"),
        o("-i"),
        o("200ms"),
        o("-u"),
        o("usdt:fix:*"),
        o("-u"),
        o("work"),
        o("-o"),
        out.as_os_str(),
        o("--"),
        bin.as_os_str(),
        o("5"),
        o("40"),
    ]);
    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    for name in [
        "zero", "one", "two", "three", "four", "five", "six", "global", "guarded",
    ] {
        let f = s.function(&format!("fix:{name}")).unwrap();
        assert_eq!(f.calls, 40, "fix:{name} hits");
        assert!(
            f.point && f.timed_calls == 0 && f.inclusive_ns == 0,
            "{f:?}"
        );
    }
    let work = s.function("work").unwrap();
    assert!(!work.point && work.calls == 40 && work.timed_calls == 40);
    // No note of functions counted without times: a probe's hits have none to give.
    assert!(
        !s.notes.iter().any(|n| n.contains("none timed")),
        "{:?}",
        s.notes
    );
    // The table shows no time for the hits.
    let text = tracer_ok(&["summary".as_ref(), out.as_os_str()]);
    let text = String::from_utf8_lossy(&text.stdout);
    let row = (text.lines())
        .find(|l| l.trim_start().starts_with("fix:one "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!row.contains("ns") && !row.contains("us"), "{row}");
}
