//! The C fixtures of `tests/fixtures/`, built with gcc on demand, and process helpers.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::*;

/// gcc flags for every fixture. Frame pointers make each function start with
/// `push %rbp`, which uprobes emulate cheaply; `-rdynamic` puts the probed
/// functions in `.dynsym` as well as `.symtab`.
pub const FIXTURE_CFLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fno-omit-frame-pointer",
    "-pthread",
    "-rdynamic",
    "-Wall",
];

/// Where built fixtures are cached: `$TRACER_FIXTURE_DIR`, else
/// `$CARGO_TARGET_DIR/fixtures`, else `<workspace>/target/fixtures`.
pub fn fixture_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TRACER_FIXTURE_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_dir().join("target"));
    target.join("fixtures")
}

/// Compiles `tests/fixtures/<name>.c` into [`fixture_dir`] (only when the
/// binary is missing or older than the source) and returns the binary's path.
///
/// Panics with gcc's output if compilation fails: a broken fixture is a bug
/// in the test suite, not a test result.
pub fn build_fixture(name: &str) -> PathBuf {
    // Tests in one binary run in parallel threads; serialise the builds so
    // they do not all invoke gcc at once. Separate test binaries may still
    // race, which the compile-to-temp-then-rename below makes harmless.
    static BUILD_LOCK: Mutex<()> = Mutex::new(());
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());

    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.c"));
    let dir = fixture_dir();
    let out = dir.join(name);
    if is_up_to_date(&src, &out) {
        return out;
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let output = Command::new("gcc")
        .args(FIXTURE_CFLAGS)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running gcc: {e}"));
    if !output.status.success() {
        panic!(
            "gcc failed to build {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("installing {}: {e}", out.display()));
    out
}

fn is_up_to_date(src: &Path, out: &Path) -> bool {
    let mtime = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    match (mtime(src), mtime(out)) {
        (Some(s), Some(o)) => o >= s,
        (None, _) => panic!("fixture source {} not found", src.display()),
        _ => false,
    }
}

/// Writes a data file of `len` bytes for the server (a repeating, readable
/// pattern `abc...z`, so responses are easy to recognise in a dump).
pub fn write_data_file(path: &Path, len: usize) -> Result<()> {
    let data: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    fs::write(path, data).with_context(|| format!("writing {}", path.display()))
}

/// Sends `sig` to `pid`.
pub(crate) fn send_signal(pid: u32, sig: libc::c_int) -> Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        return Err(std::io::Error::last_os_error()).context(format!("kill({pid}, {sig})"));
    }
    Ok(())
}

/// Waits up to `timeout` for `child` to exit.
pub(crate) fn wait_child(child: &mut Child, timeout: Duration) -> Result<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            bail!("pid {} did not exit within {timeout:?}", child.id());
        }
        thread::sleep(Duration::from_millis(5));
    }
}
