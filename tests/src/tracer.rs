//! Running the tracer under test, and the files it writes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::*;

/// Runs `tracer SUBCOMMAND --quiet --pid PID -o OUT EXTRA...` and returns once it has
/// attached (its file holds the header and thread table).
pub fn start_tracer(subcommand: &str, pid: u32, out: &Path, extra: &[&str]) -> Child {
    start_tracer_writing(subcommand, pid, out, extra, || Some(out.to_path_buf()))
}

/// [`start_tracer`] for a tracer that writes `file` rather than `out` itself (a rotated
/// run names its files after `out`).
pub fn start_tracer_writing(
    subcommand: &str,
    pid: u32,
    out: &Path,
    extra: &[&str],
    file: impl Fn() -> Option<PathBuf>,
) -> Child {
    start_tracer_on(subcommand, &["--pid", &pid.to_string()], out, extra, file)
}

/// [`start_tracer_writing`] for any target (`--pid PID`, `--cgroup PATH`).
pub fn start_tracer_on(
    subcommand: &str,
    target: &[&str],
    out: &Path,
    extra: &[&str],
    file: impl Fn() -> Option<PathBuf>,
) -> Child {
    start(subcommand, true, target, out, extra, file)
}

/// [`start_tracer_writing`] without `--quiet`: the tracer reports what it did on stderr
/// when it stops.
pub fn start_tracer_saying(
    subcommand: &str,
    pid: u32,
    out: &Path,
    extra: &[&str],
    file: impl Fn() -> Option<PathBuf>,
) -> Child {
    start(
        subcommand,
        false,
        &["--pid", &pid.to_string()],
        out,
        extra,
        file,
    )
}

fn start(
    subcommand: &str,
    quiet: bool,
    target: &[&str],
    out: &Path,
    extra: &[&str],
    file: impl Fn() -> Option<PathBuf>,
) -> Child {
    let mut child = Command::new(tracer_bin())
        .arg(subcommand)
        .args(quiet.then_some("--quiet"))
        .args(target)
        .arg("-o")
        .arg(out)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run the tracer");
    let written = || {
        let meta = file().and_then(|f| std::fs::metadata(f).ok());
        meta.is_some_and(|m| m.len() > 200)
    };
    wait_until(Duration::from_secs(20), || {
        written() || !matches!(child.try_wait(), Ok(None))
    });
    if !written() {
        let _ = child.kill();
        let out = child.wait_with_output().expect("tracer vanished");
        panic!(
            "tracer {subcommand} did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child
}

/// The files in `dir`, by name.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let entries = fs::read_dir(dir).into_iter().flatten().flatten();
    let mut names: Vec<PathBuf> = entries.map(|e| e.path()).collect();
    names.sort();
    names
}

/// The first file in `dir`, by name.
pub fn first_file(dir: &Path) -> Option<PathBuf> {
    files_in(dir).into_iter().next()
}

/// Runs `tracer SUBCOMMAND` on a fixture server under a load of about 3 s (4 workers that
/// sleep 5 ms per request), writing rotated files into `dir` (output `dir/NAME`), and
/// returns them sorted, with the server's counts.
pub fn rotated_run(
    subcommand: &str,
    dir: &Path,
    name: &str,
    extra: &[&str],
) -> (Vec<PathBuf>, Stats) {
    let server = Server::start(&ServerOptions {
        sleep_us: 5000,
        ..Default::default()
    })
    .unwrap();
    let base = dir.join(name);
    let t = start_tracer_writing(subcommand, server.pid(), &base, extra, || first_file(dir));
    let report = load(server.port(), 4, 600, 512, 4, Duration::from_secs(20));
    assert_eq!(report.errors, 0);
    stop_tracer(t);
    let stats = server.stop().unwrap();
    let paths = files_in(dir);
    assert!(paths.len() >= 3, "{paths:?}");
    assert!(
        !base.exists(),
        "rotated files are named after the output, not it"
    );
    (paths, stats)
}

/// Stops a tracer as Ctrl-C would; panics with its stderr if it failed.
pub fn stop_tracer(child: Child) -> std::process::Output {
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("tracer vanished");
    assert!(
        out.status.success(),
        "tracer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`stop_tracer`] with a bound: panics if the tracer has not exited `timeout` after
/// SIGINT (a hang), or failed.
pub fn stop_tracer_within(child: Child, timeout: Duration) -> std::process::Output {
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = wait_output(child, timeout);
    assert!(
        out.status.success(),
        "tracer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
