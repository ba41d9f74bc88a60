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
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.c"));
    let out = fixture_dir().join(name);
    build_once(&src, &out, |tmp| {
        gcc(&[src.as_os_str(), "-o".as_ref(), tmp.as_os_str()])
    })
}

/// Compiles `tests/fixtures/<name>.cpp` with g++ and the flags of [`build_fixture`].
pub fn build_cpp_fixture(name: &str) -> PathBuf {
    build_cpp_fixture_variant(name, "", &[])
}

/// [`build_cpp_fixture`] with `flags` after the usual ones, into `<name>-<variant>`
/// (`<name>` for no variant).
pub fn build_cpp_fixture_variant(name: &str, variant: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.cpp"));
    let out = match variant {
        "" => fixture_dir().join(name),
        v => fixture_dir().join(format!("{name}-{v}")),
    };
    build_once(&src, &out, |tmp| {
        let mut args: Vec<&std::ffi::OsStr> = flags.iter().map(|f| f.as_ref()).collect();
        args.extend([src.as_os_str(), "-o".as_ref(), tmp.as_os_str()]);
        compile("g++", &args)
    })
}

/// Compiles `tests/fixtures/<name>.c` as [`build_fixture`] does, with `flags` after
/// [`FIXTURE_CFLAGS`] (so they win), into `<name>-<variant>`.
pub fn build_fixture_variant(name: &str, variant: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.c"));
    let out = fixture_dir().join(format!("{name}-{variant}"));
    build_once(&src, &out, |tmp| {
        let mut args: Vec<&std::ffi::OsStr> = flags.iter().map(|f| f.as_ref()).collect();
        args.extend([src.as_os_str(), "-o".as_ref(), tmp.as_os_str()]);
        gcc(&args)
    })
}

/// [`build_fixture_variant`], then the debug information moved to a file of its own beside
/// the binary (`<name>-<variant>.debug`, named by a `.gnu_debuglink`) and the binary
/// stripped of everything else but its dynamic symbols and unwind tables, as
/// distributions ship binaries and their `-dbgsym` packages.
pub fn build_fixture_split_debug(name: &str, variant: &str, flags: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.c"));
    let out = fixture_dir().join(format!("{name}-{variant}"));
    let debug = fixture_dir().join(format!("{name}-{variant}.debug"));
    build_once(&src, &out, |tmp| {
        let mut args: Vec<&std::ffi::OsStr> = flags.iter().map(|f| f.as_ref()).collect();
        args.extend([src.as_os_str(), "-o".as_ref(), tmp.as_os_str()]);
        gcc(&args);
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            let out = Command::new(program)
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("running {program}: {e}"));
            if !out.status.success() {
                panic!(
                    "{program} failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        run(
            "objcopy",
            &[
                "--only-keep-debug".as_ref(),
                tmp.as_os_str(),
                debug.as_os_str(),
            ],
        );
        run("strip", &["--strip-all".as_ref(), tmp.as_os_str()]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        run("objcopy", &[link.as_ref(), tmp.as_os_str()]);
    })
}

/// Builds `tests/fixtures/usdt.c` (its semaphore probe in an object of its own, as the
/// file's comment says) into [`fixture_dir`] and returns the binary's path.
pub fn build_usdt_fixture() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/usdt.c");
    let dir = fixture_dir();
    let out = dir.join("usdt");
    build_once(&src, &out, |tmp| {
        let obj = tmp.with_extension("o");
        gcc(&[
            "-c".as_ref(),
            "-DUSDT_SEMAPHORE_PART".as_ref(),
            src.as_os_str(),
            "-o".as_ref(),
            obj.as_os_str(),
        ]);
        gcc(&[
            src.as_os_str(),
            obj.as_os_str(),
            "-o".as_ref(),
            tmp.as_os_str(),
        ]);
        let _ = fs::remove_file(&obj);
    })
}

/// Builds the Go program `tests/fixtures/<name>/main.go` stripped (`-s -w`: no symbol
/// table, no DWARF; Go's own tables remain, as in the binaries people ship) into
/// [`fixture_dir`] and returns its path.
pub fn build_go_fixture(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
        .join("main.go");
    let dir = fixture_dir();
    let out = dir.join(name);
    let cache = dir.join("go-cache");
    build_once(&src, &out, |tmp| {
        let output = Command::new("go")
            .args(["build", "-trimpath", "-ldflags=-s -w", "-o"])
            .arg(tmp)
            .arg(&src)
            .env("GOCACHE", &cache)
            .env("GOPATH", dir.join("go-path"))
            .env("GOFLAGS", "-buildvcs=false")
            .env("GOTOOLCHAIN", "local")
            .output()
            .unwrap_or_else(|e| panic!("running go (Debian package golang-go): {e}"));
        if !output.status.success() {
            panic!(
                "go build failed for {}:\n{}",
                src.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    })
}

/// Runs `build` into a temporary path and renames it to `out`, unless `out` is newer than
/// `src`; serialised within a test binary, harmless across binaries.
fn build_once(src: &Path, out: &Path, build: impl FnOnce(&Path)) -> PathBuf {
    static BUILD_LOCK: Mutex<()> = Mutex::new(());
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if is_up_to_date(src, out) {
        return out.to_path_buf();
    }
    let dir = out.parent().expect("fixture paths have a directory");
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let name = out.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    build(&tmp);
    fs::rename(&tmp, out).unwrap_or_else(|e| panic!("installing {}: {e}", out.display()));
    out.to_path_buf()
}

/// gcc with [`FIXTURE_CFLAGS`]; panics with its output if it fails.
fn gcc(args: &[&std::ffi::OsStr]) {
    compile("gcc", args)
}

/// Runs `compiler` with [`FIXTURE_CFLAGS`] and `args`.
fn compile(compiler: &str, args: &[&std::ffi::OsStr]) {
    let output = Command::new(compiler)
        .args(FIXTURE_CFLAGS)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {compiler}: {e}"));
    if !output.status.success() {
        panic!(
            "{compiler} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
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
