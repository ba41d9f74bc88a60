//! Builds the eBPF object with the pinned nightly, then the `tracer` binary that embeds it.

use std::{path::PathBuf, process::Command};

use anyhow::Result;

use crate::setup::{self, status, workspace, NIGHTLY};

/// Returns the path of the release `tracer` binary.
pub fn run() -> Result<PathBuf> {
    setup::ensure()?;
    let ws = workspace();
    status(
        Command::new("cargo")
            .arg(format!("+{NIGHTLY}"))
            .args(["build", "--package", "tracer-ebpf", "--release"])
            .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
            .current_dir(&ws)
            .env(
                "CARGO_TARGET_BPFEL_UNKNOWN_NONE_LINKER",
                setup::bpf_linker(),
            )
            // bpf-linker emits BTF only when asked; aya needs it for the BTF-defined maps.
            .env(
                "CARGO_ENCODED_RUSTFLAGS",
                "-Cdebuginfo=2\x1f-Clink-arg=--btf",
            )
            // The nightly must not inherit the stable toolchain's choice.
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("RUSTC"),
    )?;
    let object = ws.join("target/bpfel-unknown-none/release/tracer-ebpf");
    status(
        Command::new("cargo")
            .args(["build", "--release", "--package", "tracer-user"])
            .current_dir(&ws)
            .env("TRACER_EBPF_OBJECT", &object),
    )?;
    Ok(ws.join("target/release/tracer"))
}
