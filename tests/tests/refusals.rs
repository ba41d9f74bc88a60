//! Bad input is refused in one line, before anything is attached or launched, and neither
//! the tracer nor the target crashes: a Go binary whose function table is corrupt or of an
//! unknown layout, a USDT probe that does not exist, malformed USDT specs. Needs root.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use tracer_tests::*;

/// `tracer ARGS...`, which must fail with one line on stderr.
fn refused(args: &[&std::ffi::OsStr]) -> String {
    let out: Output = Command::new(tracer_bin()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // An exit by signal (a crash) has no code.
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    err
}

/// The file offset of section `name` of `bin`, as `readelf -S` gives it.
fn section_offset(bin: &Path, name: &str) -> u64 {
    let out = Command::new("readelf")
        .arg("-SW")
        .arg(bin)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    // "  [15] .gopclntab  PROGBITS  000000000052f260 12f260 0851b8 00   A  0   0 32"
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("readelf: no {name} in {}", bin.display()));
    let off = line.split_whitespace().nth(4).unwrap();
    u64::from_str_radix(off, 16).unwrap()
}

/// A copy of the Go fixture with `bytes` written at `at` in its `.gopclntab`.
fn corrupt_go_copy(dir: &Path, name: &str, at: u64, bytes: &[u8]) -> std::path::PathBuf {
    let go = build_go_fixture("goworker");
    let copy = dir.join(name);
    let mut data = std::fs::read(&go).unwrap();
    let start = (section_offset(&go, ".gopclntab") + at) as usize;
    data[start..start + bytes.len()].copy_from_slice(bytes);
    std::fs::write(&copy, data).unwrap();
    std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    copy
}

#[test]
fn a_go_binary_with_an_unreadable_function_table_is_refused() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("go.trace");
    // Go's runtime.pcHeader: a magic number naming the layout, 2 bytes of padding, the
    // instruction size quantum, the pointer size.
    for (name, at, bytes, says) in [
        (
            "unknown-layout",
            0,
            &[0xf2, 0xff, 0xff, 0xff][..],
            "unknown pclntab magic",
        ),
        ("bad-pointer-size", 7, &[3][..], "corrupt pclntab header"),
    ] {
        let bin = corrupt_go_copy(dir.path(), name, at, bytes);
        let err = refused(&[
            "record".as_ref(),
            "--quiet".as_ref(),
            "-u".as_ref(),
            "main.handle".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            "--".as_ref(),
            bin.as_os_str(),
        ]);
        assert!(
            err.contains(".gopclntab") && err.contains(says),
            "{name}: {err}"
        );
        // Refused before the launch: a Go program whose table is corrupt would have died
        // on its own check, after the tracer wrote its file.
        assert!(!out.exists(), "{name}: the tracer recorded");
        let err = refused(&[
            "probes".as_ref(),
            "--path".as_ref(),
            bin.as_os_str(),
            "main.*".as_ref(),
        ]);
        assert!(err.contains(says), "{name}: {err}");
    }
}

/// With the USDT fixture running: a probe it does not have, and specs that are not USDT
/// specs, are refused with the tracer attached to nothing; the fixture runs on.
#[test]
fn missing_and_malformed_usdt_probes_are_refused() {
    let _serial = serial();
    let bin = build_usdt_fixture();
    let mut fx = Reaped(Command::new(&bin).args(["5", "0"]).spawn().unwrap());
    let pid = fx.id().to_string();
    let exe = std::fs::canonicalize(&bin).unwrap();
    assert!(wait_until(Duration::from_secs(20), || {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe)
    }));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("u.trace");
    let record = |spec: &str| {
        refused(&[
            "record".as_ref(),
            "--quiet".as_ref(),
            "--pid".as_ref(),
            pid.as_ref(),
            "-u".as_ref(),
            spec.as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
    };

    let err = record("usdt:fix:guardd");
    assert!(
        err.contains("no USDT probe `fix:guardd`") && err.contains("did you mean: fix:guarded"),
        "{err}"
    );
    for spec in [
        "usdt:",
        "usdt:guarded",
        "usdt:fix:",
        "usdt::guarded",
        "usdt:fix:guarded:",
        "usdt:a:b:c:d",
    ] {
        let err = record(spec);
        assert!(
            err.contains("a USDT spec is usdt:[PATH_OR_LIB:]PROVIDER:NAME"),
            "{spec}: {err}"
        );
    }
    assert!(!out.exists(), "the tracer recorded");
    assert!(fx.try_wait().unwrap().is_none(), "the fixture exited");
    fx.kill().unwrap();
    fx.wait().unwrap();
}

/// More probes than the descriptors the recorder may open: refused before any is attached
/// (found while attaching, the refusal waited for the kernel to detach thousands of
/// uprobes one at a time, 13 minutes for `libc:*`), and no output file is left behind.
#[test]
fn probes_beyond_the_open_files_limit_are_refused_before_attaching() {
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.trace");
    let script = format!(
        "ulimit -n 512 && exec {} record --pid {} -u 'libc:*' -d 1s -o {}",
        tracer_bin().display(),
        sleeper.id(),
        out.display()
    );
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("tracer: error: probing") && last.contains("file descriptors"),
        "{err}"
    );
    assert!(!out.exists(), "the failed recording left {}", out.display());
}

/// Durations too long for a deadline (std panics on an `Instant` that overflows:
/// `tracer stat -i 18446744073709551615s` did, after attaching) and counts past their
/// type: a usage error of one line before anything is attached or launched, no panic, no
/// output file.
#[test]
fn overflowing_durations_and_counts_are_one_line_of_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.out");
    let cases = [
        "stat -i 18446744073709551615s",
        "stat -i 500000y",
        "stat -d 18446744073709551615",
        "record --rotate 500000y",
        "record --trigger f>1ms --after 500000y",
        "record --trigger f>500000y",
        "stat --time-every 0",
        "stat --sample 4294967296",
        "stat --stacks --frequency 0",
    ];
    for case in cases {
        let args: Vec<&str> = case.split(' ').collect();
        let r = Command::new(tracer_bin())
            .args(&args)
            .args(["-q".as_ref(), "-o".as_ref(), out.as_os_str()])
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        // An exit by signal (a crash) has no code; a panic exits with 101.
        let code = r.status.code();
        assert!(matches!(code, Some(1 | 2)), "{args:?}: {code:?} {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("tracer: error: "), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{err}"
        );
        assert!(!out.exists(), "{args:?}: an output was written");
    }
}
