//! Where things are and what the environment allows: the workspace, the tracer binary,
//! root, waiting, and the lock that serializes end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// The workspace root (parent of this crate's directory).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate lives inside the workspace")
        .to_path_buf()
}

/// The tracer binary under test: `$TRACER_BIN` if set, else
/// `<workspace>/target/release/tracer` (built by `cargo xtask build`).
pub fn tracer_bin() -> PathBuf {
    match std::env::var_os("TRACER_BIN") {
        Some(p) => PathBuf::from(p),
        None => workspace_dir().join("target/release/tracer"),
    }
}

/// Runs `tracer ARGS...` to completion and panics with its stderr unless it succeeds.
pub fn tracer_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    let out = Command::new(tracer_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tracer_bin().display()));
    assert!(
        out.status.success(),
        "tracer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The number a program's stdout gives as `KEY=N` (the fixtures' own counts), the first
/// such word; panics if there is none.
pub fn counted(out: &std::process::Output, key: &str) -> u64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{key}=");
    (stdout.split_whitespace())
        .find_map(|w| w.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or_else(|| panic!("no {key}=N in the output: {stdout}"))
}

/// True when running as root (needed to load eBPF programs).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Polls `cond` every 5 ms until it returns true or `timeout` passes.
/// Returns whether it became true.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Serializes the end-to-end tests of one test binary: on two CPUs, tracers, servers and
/// load generators of parallel tests would compete for the CPUs whose accounting the
/// tests compare against.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
