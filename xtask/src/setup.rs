//! Installs what building the eBPF programs needs, idempotently, under `target/tools`:
//! the pinned nightly with rust-src, and bpf-linker built against that nightly's own
//! libLLVM (Debian's LLVM cannot read the nightly's bitcode); and the Debian packages the
//! tests and the demo use. See docs/architecture.md. The container tests' needs are in
//! `containers.rs`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

/// The nightly that builds `tracer-ebpf` (its rust-toolchain.toml). bpf-linker is tied to
/// its libLLVM file name.
pub static NIGHTLY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    include_str!("../../tracer-ebpf/rust-toolchain.toml")
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map(|c| c.trim_matches('"').to_string())
        .expect("tracer-ebpf/rust-toolchain.toml names a channel")
});
const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn tools_dir() -> PathBuf {
    workspace().join("target/tools")
}

/// Path of the bpf-linker binary that matches [`NIGHTLY`].
pub fn bpf_linker() -> PathBuf {
    tools_dir().join("bin/bpf-linker")
}

fn stamp() -> PathBuf {
    tools_dir().join(format!("bpf-linker-{BPF_LINKER_VERSION}-{}.ok", *NIGHTLY))
}

/// True when everything `setup` installs is in place.
pub fn ready() -> bool {
    stamp().exists() && bpf_linker().exists() && nightly_sysroot().is_ok()
}

/// `cargo xtask setup`: everything the build, the tests and the demo use.
pub fn run() -> Result<()> {
    ensure_commands(DEBIAN)?;
    install_nightly()?;
    install_bpf_linker()?;
    ensure_venv(&venv_dir(), TEST_PYTHON)?;
    mount_tracefs();
    crate::containers::ensure()
}

/// What the tests and the demo use beyond the build (the Debian packages of the fixtures
/// and checks, the Python environment, tracefs) and the toolchain, each only when missing: a second run costs
/// nothing. The container tests' needs are [`crate::containers::ensure`]'s.
pub fn ensure() -> Result<()> {
    ensure_commands(DEBIAN)?;
    ensure_toolchain()?;
    ensure_venv(&venv_dir(), TEST_PYTHON)?;
    mount_tracefs();
    Ok(())
}

/// What building needs: the nightly and bpf-linker, installed when missing. A build needs
/// nothing else from the machine but a C linker (gcc), so `cargo xtask build` can run
/// where the test fixtures' packages are not wanted (the Containerfile's build stage).
pub fn ensure_toolchain() -> Result<()> {
    if !ready() {
        install_nightly()?;
        install_bpf_linker()?;
    }
    Ok(())
}

/// Python packages the tests use, pinned: DuckDB runs the SQL of docs/sql.md over the
/// Parquet tables (tests/tests/parquet.rs).
pub const TEST_PYTHON: &[&str] = &["duckdb==1.4.4"];

/// The tests' Python environment (its `bin/python`), under `target/` so the project owns
/// it; the tests find it there.
pub fn venv_dir() -> PathBuf {
    workspace().join("target/venv")
}

/// Creates the virtual environment `dir` with Debian's python3 and pip-installs
/// `packages` into it, once: a stamp naming the packages makes a second run cost nothing.
/// Returns its python.
pub fn ensure_venv(dir: &Path, packages: &[&str]) -> Result<PathBuf> {
    let python = dir.join("bin/python");
    let stamp = dir.join(format!(".installed-{}", packages.join("+")));
    if stamp.exists() && python.exists() {
        return Ok(python);
    }
    ensure_commands(&[
        ("python3", "python3"),
        (
            "/usr/lib/python3.11/ensurepip/__init__.py",
            "python3.11-venv",
        ),
    ])?;
    let started = std::time::Instant::now();
    eprintln!(
        "xtask: creating {} with {}",
        dir.display(),
        packages.join(" ")
    );
    if !python.exists() {
        status(Command::new("python3").arg("-m").arg("venv").arg(dir))?;
    }
    status(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(packages),
    )?;
    std::fs::write(&stamp, b"")?;
    eprintln!(
        "xtask: {} ready in {:.1} s",
        dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(python)
}

/// Debian packages the tests and the demo use, as (a command it provides, package):
/// gcc and g++ build the fixtures, binutils and dwz check the symbolizer, util-linux
/// gives setpriv for the unprivileged-user test. Go builds the symbolizer's Go server
/// fixture (and its `go tool nm`/`addr2line` check the symbolizer); sys/sdt.h builds its
/// USDT fixture; python3.11 is a real binary with USDT probes to list; nginx-light a real
/// server, Debian's build, to trace.
const DEBIAN: &[(&str, &str)] = &[
    ("gcc", "gcc"),
    ("g++", "g++"),
    ("addr2line", "binutils"),
    ("dwz", "dwz"),
    ("setpriv", "util-linux"),
    ("go", "golang-go"),
    (
        "/usr/include/x86_64-linux-gnu/sys/sdt.h",
        "systemtap-sdt-dev",
    ),
    ("/usr/bin/python3.11", "python3.11-minimal"),
    ("/usr/sbin/nginx", "nginx-light"),
];

/// Installs from Debian the packages whose command is missing.
pub fn ensure_commands(needed: &[(&str, &str)]) -> Result<()> {
    ensure_commands_with(needed, &[])
}

/// [`ensure_commands`] with extra `apt-get install` options.
pub fn ensure_commands_with(needed: &[(&str, &str)], options: &[&str]) -> Result<()> {
    let on_path = |cmd: &str| {
        if cmd.starts_with('/') {
            return Path::new(cmd).exists();
        }
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).exists()))
    };
    let mut missing: Vec<&str> = needed
        .iter()
        .filter(|(cmd, _)| !on_path(cmd))
        .map(|(_, package)| *package)
        .collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing {} from Debian", missing.join(" "));
    status(Command::new("apt-get").args(["update", "-qq"]))?;
    status(
        Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(options)
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

pub fn status(cmd: &mut Command) -> Result<()> {
    let st = cmd
        .status()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !st.success() {
        bail!("{:?} failed ({st})", cmd);
    }
    Ok(())
}

fn nightly_sysroot() -> Result<PathBuf> {
    let out = Command::new("rustc")
        .arg(format!("+{}", *NIGHTLY))
        .args(["--print", "sysroot"])
        .output()?;
    if !out.status.success() {
        bail!("{} is not installed", *NIGHTLY);
    }
    let sysroot = PathBuf::from(String::from_utf8(out.stdout)?.trim());
    if !sysroot.join("lib/rustlib/src/rust/library").exists() {
        bail!("{} lacks rust-src", *NIGHTLY);
    }
    Ok(sysroot)
}

pub fn install_nightly() -> Result<()> {
    if nightly_sysroot().is_ok() {
        return Ok(());
    }
    eprintln!(
        "xtask: installing {} with rust-src (builds the eBPF programs)",
        *NIGHTLY
    );
    status(Command::new("rustup").args([
        "toolchain",
        "install",
        NIGHTLY.as_str(),
        "--profile",
        "minimal",
        "--component",
        "rust-src",
        "--no-self-update",
    ]))
}

fn install_bpf_linker() -> Result<()> {
    if stamp().exists() && bpf_linker().exists() {
        return Ok(());
    }
    let sysroot = nightly_sysroot()?;
    let vv = Command::new("rustc")
        .arg(format!("+{}", *NIGHTLY))
        .arg("-vV")
        .output()?;
    let vv = String::from_utf8(vv.stdout)?;
    let major = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("cannot read the nightly's LLVM version")?
        .to_string();
    let libllvm = std::fs::read_dir(sysroot.join("lib"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so."))
        })
        .context("the nightly ships no libLLVM.so")?;
    let llvm = tools_dir().join("rust-llvm");
    let lib = llvm.join("lib");
    std::fs::create_dir_all(&lib)?;
    for name in [
        PathBuf::from("libLLVM.so"),
        PathBuf::from(libllvm.file_name().unwrap()),
    ] {
        let link = lib.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&libllvm, &link)?;
    }
    eprintln!("xtask: building bpf-linker {BPF_LINKER_VERSION} against the nightly's LLVM {major} (about a minute)");
    status(
        Command::new("cargo")
            .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
            .args(["--locked", "--no-default-features", "--features"])
            .arg(format!("llvm-{major}"))
            .arg("--root")
            .arg(tools_dir())
            .env("LLVM_PREFIX", &llvm)
            // A workspace-local target dir keeps the install's build out of ours.
            .env("CARGO_TARGET_DIR", tools_dir().join("build")),
    )?;
    std::fs::write(stamp(), b"")?;
    Ok(())
}

/// Mounts tracefs if needed; the tracer does it too, so failure here is only a note.
fn mount_tracefs() {
    if Path::new("/sys/kernel/tracing/events").is_dir() {
        return;
    }
    let ok = Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("xtask: note: could not mount tracefs at /sys/kernel/tracing");
    }
}
