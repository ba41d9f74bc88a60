//! Builds the eBPF programs (crate `tracer-ebpf`) and embeds the object, so that a change
//! to them or to the ABI they share rebuilds the `tracer` that carries them.
//!
//! The programs need the pinned nightly of `tracer-ebpf/rust-toolchain.toml` and the
//! bpf-linker built for it under `target/tools`, which `cargo xtask setup` installs. Without
//! them (a fresh checkout, `cargo check`, clippy) the tracer still builds with an empty
//! object and says at run time how to get the programs. `TRACER_EBPF_OBJECT` embeds a
//! prebuilt object instead.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let ws = manifest.parent().unwrap().to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    for watched in [
        "tracer-ebpf/src",
        "tracer-ebpf/Cargo.toml",
        "tracer-ebpf/rust-toolchain.toml",
        "tracer-abi/src",
        "tracer-abi/Cargo.toml",
        "target/tools/bin/bpf-linker",
    ] {
        println!("cargo:rerun-if-changed={}", ws.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=TRACER_EBPF_OBJECT");
    let object = match std::env::var_os("TRACER_EBPF_OBJECT") {
        Some(prebuilt) => Some(PathBuf::from(prebuilt)),
        None => build(&ws),
    };
    let bytes = match object {
        Some(path) => std::fs::read(&path)
            .unwrap_or_else(|e| panic!("cannot read the eBPF object {}: {e}", path.display())),
        None => Vec::new(),
    };
    std::fs::write(out.join("tracer-ebpf.o"), bytes).unwrap();
}

/// Builds `tracer-ebpf` for the bpfel target; `None` when its toolchain is not installed.
fn build(ws: &Path) -> Option<PathBuf> {
    let linker = ws.join("target/tools/bin/bpf-linker");
    let toolchain = std::fs::read_to_string(ws.join("tracer-ebpf/rust-toolchain.toml")).ok()?;
    let nightly = toolchain
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))?
        .trim_matches('"')
        .to_string();
    if !linker.exists() {
        return None;
    }
    // Its own target directory: the outer build holds the lock of the workspace's.
    let target_dir = ws.join("target/ebpf");
    let mut cmd = Command::new("cargo");
    cmd.arg(format!("+{nightly}"))
        .args(["build", "--package", "tracer-ebpf", "--release"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .current_dir(ws)
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("CARGO_TARGET_BPFEL_UNKNOWN_NONE_LINKER", &linker)
        // bpf-linker emits BTF only when asked; aya needs it for the BTF-defined maps.
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            "-Cdebuginfo=2\x1f-Clink-arg=--btf",
        );
    // The outer build's toolchain and flags must not leak into the nightly's.
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
        "CARGO",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo +{nightly}: {e}"));
    if !status.success() {
        panic!("building the eBPF programs with {nightly} failed ({status})");
    }
    Some(target_dir.join("bpfel-unknown-none/release/tracer-ebpf"))
}
