//! `tracer probes PATTERN` with neither --pid nor --path: the pattern names the file to
//! list itself, a path or a library of the system's, as `bpftrace -l 'uprobe:BIN:GLOB'`
//! takes it. Checked against nm, ldconfig and readelf. And where an entry probe goes.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use trace_file::Event;

use tracer_tests::*;

/// `tracer probes PATTERN`'s lines.
fn listed(pattern: &str) -> Vec<String> {
    let out = tracer_ok(&["probes", pattern]);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// The output of a command that must succeed.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// The address `nm` gives `symbol` in `bin` (`-D`: the dynamic table, whose names carry
/// their version: `malloc@@GLIBC_2.2.5`).
fn nm_address(bin: &Path, dynamic: bool, symbol: &str) -> u64 {
    let mut cmd = Command::new("nm");
    if dynamic {
        cmd.arg("-D");
    }
    let text = run(cmd.arg("--defined-only").arg(bin));
    let line = text
        .lines()
        .find(|l| {
            let name = l.split_whitespace().nth(2).unwrap_or_default();
            name.split('@').next() == Some(symbol)
        })
        .unwrap_or_else(|| panic!("nm: no {symbol} in {}", bin.display()));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

/// The `addr=` of a listed line.
fn addr(line: &str) -> u64 {
    let a = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr=0x"));
    u64::from_str_radix(a.unwrap_or_else(|| panic!("no addr in {line}")), 16).unwrap()
}

#[test]
fn a_file_named_in_the_pattern_is_listed() {
    let bin = build_usdt_fixture();
    let lines = listed(&format!("{}:work", bin.display()));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!("uprobe:{}:work ", bin.display())),
        "{}",
        lines[0]
    );
    assert_eq!(addr(&lines[0]), nm_address(&bin, false, "work"));
}

#[test]
fn a_library_named_in_the_pattern_is_found_where_the_loader_finds_it() {
    // ldconfig's cache: "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6".
    let cache = run(Command::new("ldconfig").arg("-p"));
    let libc = cache
        .lines()
        .filter(|l| l.trim_start().starts_with("libc.so.6 ") && l.contains("x86-64"))
        .find_map(|l| l.split_once(" => ").map(|(_, p)| p.trim().to_string()))
        .expect("ldconfig -p lists no 64-bit libc.so.6");
    let lines = listed("libc:mallo*");
    let malloc = lines
        .iter()
        .find(|l| l.starts_with(&format!("uprobe:{libc}:malloc ")))
        .unwrap_or_else(|| panic!("no malloc of {libc} in {lines:?}"));
    assert_eq!(addr(malloc), nm_address(Path::new(&libc), true, "malloc"));
    assert!(lines
        .iter()
        .all(|l| l.starts_with(&format!("uprobe:{libc}:mallo")) || l.starts_with("    warning: ")));
}

#[test]
fn usdt_probes_of_a_file_named_in_the_pattern_are_listed() {
    let py = "/usr/bin/python3.11";
    assert!(
        Path::new(py).exists(),
        "{py} is missing (Debian package python3.11-minimal)"
    );
    let lines = listed(&format!("usdt:{py}:python:function__*"));
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    // readelf's names for these notes.
    let notes = run(Command::new("readelf").arg("-n").arg(py));
    let mut want: Vec<String> = notes
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Name: "))
        .filter(|n| n.starts_with("function__"))
        .map(|n| format!("usdt:{py}:python:{n}"))
        .collect();
    want.sort();
    assert_eq!(want.len(), 2, "{notes}");
    assert_eq!(names, want);
}

#[test]
fn a_pattern_naming_no_file_is_one_line_of_error() {
    for pattern in [
        "mallo*",
        "no_such_library_anywhere:f",
        "/no/such/file:f",
        "usdt:fix:*",
    ] {
        let out = Command::new(tracer_bin())
            .args(["probes", pattern])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{pattern}: {err}");
        assert_eq!(err.lines().count(), 1, "{pattern}: {err}");
        assert!(out.stdout.is_empty(), "{pattern}");
    }
}

/// What `tracer probes` says when nothing matches: never an empty list and exit 0, but one
/// line saying why (stripped: which debug file would help, and close exported names).
#[test]
fn a_pattern_matching_nothing_says_why_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let stripped = dir.path().join("usdt-stripped");
    std::fs::copy(build_usdt_fixture(), &stripped).unwrap();
    run(Command::new("strip").arg("--strip-all").arg(&stripped));
    // Built with -rdynamic: its functions stay visible in .dynsym.
    assert!(!listed(&format!("{}:wor*", stripped.display())).is_empty());
    for (pattern, says) in [("wrok", "did you mean: work"), ("zzz*", "stripped")] {
        let out = Command::new(tracer_bin())
            .args(["probes", &format!("{}:{pattern}", stripped.display())])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{pattern}: {err}");
        assert_eq!(err.lines().count(), 1, "{pattern}: {err}");
        assert!(
            err.contains("stripped") && err.contains(says),
            "{pattern}: {err}"
        );
        assert!(out.stdout.is_empty(), "{pattern}");
    }
}

/// A library named by a glob (`libc.so*`), as a process maps it.
#[test]
fn a_library_glob_finds_the_library_a_process_maps() {
    let pid = std::process::id().to_string();
    let out = tracer_ok(&["probes", "--pid", &pid, "libc.so*:malloc"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("uprobe:") && l.contains("libc.so.6:malloc ")),
        "{text}"
    );
}

/// Entry probes moved past first instructions uprobes would single-step
/// (tests/fixtures/entries.c, built as distributions build): `flagged` is probed at its
/// branch, `framed`, whose stack pointer moves before any branch, where it starts, with
/// the warning; every call of both is recorded once with its return, and the fixture's
/// own results are unchanged by the probes.
#[test]
fn entry_probes_moved_past_a_single_stepped_instruction_see_every_call_once() {
    const CALLS: u64 = 100_000;
    let _serial = serial();
    let bin = build_fixture_variant("entries", "nofp", &["-fomit-frame-pointer"]);
    let out = tracer_ok(&[
        "probes".as_ref(),
        "--path".as_ref(),
        bin.as_os_str(),
        "f*".as_ref(),
    ]);
    let listing = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = listing.lines().collect();
    let at = |f: &str| {
        (lines.iter())
            .position(|l| l.contains(&format!(":{f} ")))
            .unwrap_or_else(|| panic!("{f} not listed:\n{listing}"))
    };
    let warned = |i: usize| {
        lines
            .get(i + 1)
            .is_some_and(|l| l.contains("single-stepped"))
    };
    let flagged = at("flagged");
    assert!(
        lines[flagged].contains("(probed at +") && !warned(flagged),
        "{listing}"
    );
    let framed = at("framed");
    assert!(
        !lines[framed].contains("(probed at +") && warned(framed),
        "{listing}"
    );

    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.trace");
    let mut fx = Piped::spawn(&bin, &[&CALLS.to_string()]);
    let rec = start_tracer(
        "record",
        fx.pid(),
        &trace,
        &["--events", "calls", "-u", "flagged", "-u", "framed"],
    );
    fx.send(b"x");
    let sums = fx.numbers("SUM", Duration::from_secs(60));
    assert_eq!(sums[0], sums[1], "the probed functions' results changed");
    assert!(fx.wait(Duration::from_secs(10)).success());
    stop_tracer(rec);
    let t = read_trace(&trace);
    assert_eq!(t.lost, 0);
    let ids = probe_ids(&trace);
    for f in ["flagged", "framed"] {
        let id = ids[f];
        let entries = count(&t, |r| r.event == Event::FuncEntry { func: id });
        let exits = count(
            &t,
            |r| matches!(r.event, Event::FuncExit { func, .. } if func == id),
        );
        assert_eq!((entries, exits), (CALLS, CALLS), "{f}");
    }
}

/// The throws fixture's functions: two leave by a tail call (`hop`, `thunk`), two by a
/// first instruction that leaves (`thunk`, `nothing`).
const FRAMED: [&str; 6] = ["leaf", "middle", "hop", "thunk", "nothing", "rec"];

/// The entries and the exits of function `id` recorded as frames (returns probed at
/// their instructions).
fn frames(t: &Trace, id: u32) -> (u64, u64) {
    let entries = count(
        t,
        |r| matches!(r.event, Event::FrameEntry { func, .. } if func == id),
    );
    let exits = count(
        t,
        |r| matches!(r.event, Event::FrameExit { func, .. } if func == id),
    );
    (entries, exits)
}

/// `tracer record ARGS... -- throws` (the C++ fixture whose exceptions leave probed
/// calls), its output; `unsafe_returns` adds `--unsafe-returns`.
fn record_throws(trace: &Path, unsafe_returns: bool) -> std::process::Output {
    let bin = build_cpp_fixture("throws");
    let mut cmd = Command::new(tracer_bin());
    cmd.args(["record", "--events", "calls"]);
    if unsafe_returns {
        cmd.arg("--unsafe-returns");
    }
    for f in FRAMED {
        cmd.args(["-u", f]);
    }
    cmd.arg("-o").arg(trace).arg("--").arg(&bin);
    cmd.output().unwrap()
}

/// Exceptions thrown through probed calls of a C++ program (the throws fixture: `leaf`
/// throws on a third of its calls, through `middle`; `rec` recurses into one caught two
/// levels up; `hop` leaves by a tail call to `middle`, `thunk` is that jump alone and
/// `nothing` a return instruction alone; two threads). A uretprobe hides
/// a call's return address from the unwinder, which then ends the program
/// (`std::terminate`, SIGABRT): so in a program that throws, returns are probed at their
/// instructions and paired with their entries by the stack pointer. Every call is in the
/// trace; the ones an exception left end, unwound, where the thread's stack shows them
/// gone: where the exception is caught (`__cxa_begin_catch`, probed for it), not at the
/// end of the trace; `hop` returns by its jump. With `--unsafe-returns`, the uretprobes
/// are back and so is the crash the default avoids.
#[test]
fn exceptions_thrown_through_probed_calls_leave_the_program_running() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("throws.trace");
    let o = record_throws(&trace, false);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("probed at their return instructions"), "{err}");
    let t = read_trace(&trace);
    assert_eq!(t.lost, 0);
    let ids = probe_ids(&trace);
    let s = trace_summary::summarize(std::slice::from_ref(&trace)).unwrap();
    for name in FRAMED {
        let id = ids[name];
        let called = counted(&o, name);
        let returned = match name {
            "hop" | "thunk" | "nothing" => called,
            _ => counted(&o, &format!("{name}_returned")),
        };
        assert_eq!(frames(&t, id), (called, returned), "{name} records");
        let f = s.function(name).unwrap();
        assert_eq!(f.calls, called, "{name} calls");
        assert_eq!(f.calls - f.unfinished, returned, "{name} returned");
        // A call sleeps 100 us (the longest seen: 5.8 ms, on an idle machine) and the
        // run takes 0.7 s or more: one left open to the end of the trace would last
        // most of it. The bound leaves room for a loaded CI machine's scheduling.
        assert!(f.max_ns < 100_000_000, "{name}: a call of {} ns", f.max_ns);
    }
    assert_eq!(count(&t, |r| matches!(r.event, Event::FuncExit { .. })), 0);
    // Where each exception was caught: the calls it left end there.
    let caught = counted(&o, "caught") + counted(&o, "rec_caught");
    assert!(caught > 0);
    assert_eq!(s.function("__cxa_begin_catch").unwrap().calls, caught);
    use trace_merge::timeline::{Item, SpanEnd};
    let catch = ids["__cxa_begin_catch"];
    let mut tl = trace_merge::open(std::slice::from_ref(&trace), &Default::default()).unwrap();
    let (mut catches, mut unwound) = (HashSet::new(), Vec::new());
    while let Some(item) = tl.next_item().unwrap() {
        match item {
            Item::FuncEntry {
                thread, time, func, ..
            } if func == catch => {
                catches.insert((thread, time));
            }
            Item::Func(s) if s.end_kind == SpanEnd::Unwound => unwound.push((s.thread, s.end)),
            _ => {}
        }
    }
    // leaf's and middle's third, rec's two of five.
    let left = counted(&o, "leaf") - counted(&o, "leaf_returned") + counted(&o, "middle")
        - counted(&o, "middle_returned")
        + counted(&o, "rec")
        - counted(&o, "rec_returned");
    assert_eq!(unwound.len() as u64, left);
    assert!(unwound.iter().all(|u| catches.contains(u)));

    let unsafe_trace = dir.path().join("unsafe.trace");
    let o = record_throws(&unsafe_trace, true);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("ends the process (std::terminate)"), "{err}");
    assert_eq!(o.status.code(), Some(128 + libc::SIGABRT), "{err}");
}

/// Programs linked statically, where no file imports a throwing or switching function
/// since the runtime is inside the executable: the throws fixture built with `-static`
/// is known to throw by the runtime's functions it defines, so its returns are probed at
/// their instructions as above and it runs to its end (a uretprobe ended it, SIGABRT at
/// its first exception, until 2026-11-25); the coroutines fixture built so is known to
/// switch stacks by the `swapcontext` it holds, and its calls pair by their exact frames.
#[test]
fn statically_linked_programs_that_throw_or_switch_stacks_get_no_uretprobes() {
    let _serial = serial();
    let bin = build_cpp_fixture_variant("throws", "static", &["-static"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("static.trace");
    let mut cmd = Command::new(tracer_bin());
    cmd.args(["record", "--events", "calls", "-u", "leaf", "-u", "middle"]);
    let o = cmd
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("defines"), "{err}");
    let t = read_trace(&trace);
    let ids = probe_ids(&trace);
    assert_eq!(t.lost, 0);
    for name in ["leaf", "middle"] {
        let returned = counted(&o, &format!("{name}_returned"));
        assert_eq!(
            frames(&t, ids[name]),
            (counted(&o, name), returned),
            "{name}"
        );
    }

    let bin = build_fixture_variant("coroutines", "static", &["-static"]);
    let trace = dir.path().join("co.trace");
    let mut cmd = Command::new(tracer_bin());
    cmd.args(["record", "--events", "calls", "-u", "step"]);
    let o = cmd.arg("-o").arg(&trace).arg("--").arg(&bin).arg("1000");
    let o = o.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("defines swapcontext"), "{err}");
    let s = trace_summary::summarize(std::slice::from_ref(&trace)).unwrap();
    let step = s.function("step").unwrap();
    // The fixture prints its count of leaf calls, one per step.
    let out = String::from_utf8_lossy(&o.stdout);
    let calls: u64 = (out.split_whitespace())
        .skip_while(|w| *w != "CALLS")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no CALLS in {out}"));
    assert_eq!((step.calls, step.unfinished), (calls, 0));
}

/// Threads cancelled while blocked inside probed calls (tests/fixtures/cancel.c): glibc
/// ends them by unwinding their stacks through the calls whose return addresses the
/// kernel's uretprobes hold, where a C++ exception ends the process. The forced unwind
/// stops at the first such frame and the thread ends there: the program runs to its
/// end, every thread cancelled and every cleanup handler run, as without the tracer;
/// each cancelled thread's calls stay open to its end.
#[test]
fn threads_cancelled_inside_probed_calls_end_and_the_program_runs_on() {
    let _serial = serial();
    let bin = build_fixture("cancel");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("cancel.trace");
    let mut cmd = Command::new(tracer_bin());
    cmd.args([
        "record", "-q", "--events", "calls", "-u", "outer", "-u", "blocker",
    ]);
    let o = cmd.arg("-o").arg(&trace).arg("--").arg(&bin).arg("20");
    let o = o.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(counted(&o, "CANCELLED"), 20, "{err}");
    assert_eq!(counted(&o, "CLEANED"), 20, "{err}");
    let s = trace_summary::summarize(std::slice::from_ref(&trace)).unwrap();
    for name in ["outer", "blocker"] {
        let f = s.function(name).unwrap();
        assert_eq!((f.calls, f.unfinished), (20, 20), "{name}");
    }
}

/// A launched command that is a script (`#!/usr/bin/env sh`, as version managers' shims
/// are) runs as its interpreter: libraries are looked up in the interpreter's, and a
/// library probe sees the calls of the program the script executes in the end (here the
/// privexec fixture's child: 5 getppid() calls). It was refused: "not an ELF file".
#[test]
fn a_launched_script_is_probed_through_its_interpreter() {
    let _serial = serial();
    let bin = build_fixture("privexec");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("shim");
    let text = format!("#!/usr/bin/env sh\nexec {} child\n", bin.display());
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let trace = dir.path().join("shim.trace");
    let mut cmd = Command::new(tracer_bin());
    cmd.args(["record", "-q", "--events", "calls", "-u", "libc:getppid"]);
    let o = cmd
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&script)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // The shell calls getppid() too (for $PPID): the fixture's are those after its exec.
    let t = read_trace(&trace);
    let id = probe_ids(&trace)["getppid"];
    let exec = (t.records.iter())
        .find(|r| matches!(&r.event, Event::Exec { comm } if comm.as_str() == "privexec"))
        .unwrap_or_else(|| panic!("no exec of the fixture: {err}"))
        .ts;
    let entries = count(&t, |r| {
        r.ts > exec && matches!(r.event, Event::FuncEntry { func } if func == id)
    });
    assert_eq!(entries, 5, "{err}");
}

/// Return values as wide as the function's type (tests/fixtures/returns.c): an `int`'s
/// -1 is the lower half of the return register, whose upper half the function left zero,
/// so it read 4294967295 and was no error. With DWARF saying the function returns an
/// int, the programs sign-extend it: `check`'s failures are errors as many as the fixture
/// counts, in records and in the kernel's counts; `big`'s unsigned 0xffffffff is none,
/// and `wide`'s 64-bit -2 is one every time.
#[test]
fn an_int_function_returning_minus_one_is_an_error() {
    let _serial = serial();
    let bin = build_fixture("returns");
    let dir = tempfile::tempdir().unwrap();
    for mode in ["record", "stat"] {
        let out = dir.path().join(format!("r.{mode}"));
        let mut cmd = Command::new(tracer_bin());
        cmd.args([mode, "-q", "--events", "calls"]);
        if mode == "stat" {
            cmd.arg("--exact-latency");
        }
        for f in ["check", "big", "wide"] {
            cmd.args(["-u", f]);
        }
        let o = cmd.arg("-o").arg(&out).arg("--").arg(&bin).arg("100");
        let o = o.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{mode}: {err}");
        let calls = counted(&o, "CALLS");
        let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
        let errors = |f: &str| {
            let f = s.function(f).unwrap_or_else(|| panic!("{mode}: no {f}"));
            assert_eq!(f.calls, calls, "{mode}");
            f.errors
        };
        assert_eq!(errors("check"), counted(&o, "CHECK_FAILED"), "{mode}");
        assert_eq!(errors("big"), 0, "{mode}");
        assert_eq!(errors("wide"), calls, "{mode}");
    }
}

/// A program that switches stacks itself (tests/fixtures/coroutines.c, ucontext: two
/// coroutines whose `step` calls `leaf`, then switches to the other, so every `step`
/// returns on a stack switched away from and back to). A uretprobe on `step` has the
/// kernel kill it (SIGILL, with `--unsafe-returns`); by default its returns are probed at
/// their instructions and each call pairs with its return by its exact frame, though the
/// thread's calls alternate between two stacks: every call recorded, returned, and
/// counted as the fixture counts them.
#[test]
fn returns_in_a_program_that_switches_stacks_are_probed_at_their_instructions() {
    let _serial = serial();
    let bin = build_fixture("coroutines");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.trace");
    let record = |extra: &[&str]| {
        let mut cmd = Command::new(tracer_bin());
        cmd.args(["record", "-q", "--force"]).args(extra);
        cmd.arg("-o").arg(&out).arg("--").arg(&bin).arg("1000");
        cmd.output().unwrap()
    };
    let o = record(&["-u", "step", "-u", "leaf"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("switches stacks") && err.contains("imports swapcontext"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("CALLS 2000"));
    let t = read_trace(&out);
    let ids = probe_ids(&out);
    let s = trace_summary::summarize(std::slice::from_ref(&out)).unwrap();
    for f in ["step", "leaf"] {
        let id = ids[f];
        let entries = count(
            &t,
            |r| matches!(r.event, Event::FrameEntry { func, switching: true, .. } if func == id),
        );
        let exits = count(
            &t,
            |r| matches!(r.event, Event::FrameExit { func, .. } if func == id),
        );
        assert_eq!((entries, exits), (2000, 2000), "{f}");
        let calls = s.function(f).unwrap();
        assert_eq!((calls.calls, calls.unfinished), (2000, 0), "{f}");
    }

    let o = record(&["--unsafe-returns", "-u", "leaf"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = read_trace(&out);
    let id = probe_ids(&out)["leaf"];
    let entries = count(&t, |r| r.event == Event::FuncEntry { func: id });
    let exits = count(
        &t,
        |r| matches!(r.event, Event::FuncExit { func, .. } if func == id),
    );
    assert_eq!((entries, exits), (2000, 2000));
    let o = record(&["--unsafe-returns", "-u", "step"]);
    assert_eq!(o.status.code(), Some(128 + libc::SIGILL));
}

/// A library the traced process does not load, but a process it starts does (a server's
/// master and the workers it executes: Postfix's master and smtpd's libssl): named by its
/// short name, it was refused ("not loaded by process N"). It is the system's library,
/// said so in a warning, and probed in the processes that load it: every call of zlib's
/// `crc32` that the Python a shell executes makes.
#[test]
fn a_library_loaded_only_by_a_later_process_is_found_in_the_system() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("m.trace");
    let script =
        "exec python3.11 -c 'import zlib; print(len([zlib.crc32(b\"abc\") for i in range(100)]))'";
    let o = Command::new(tracer_bin())
        .args(["record", "--events", "calls", "-u", "libz:crc32", "-o"])
        .arg(&trace)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "100");
    assert!(
        err.contains("does not load") && err.contains("libz"),
        "{err}"
    );
    let s = trace_summary::summarize(std::slice::from_ref(&trace)).unwrap();
    let f = s
        .function("crc32")
        .unwrap_or_else(|| panic!("no calls: {err}"));
    assert_eq!((f.calls, f.unfinished), (100, 0), "{err}");
}
