//! Builds the `tracer` binary in release mode; its build script builds and embeds the eBPF
//! programs with the toolchain `setup` installs.

use std::{path::PathBuf, process::Command};

use anyhow::Result;

use crate::setup::{self, status, workspace};

/// Returns the path of the release `tracer` binary.
pub fn run() -> Result<PathBuf> {
    setup::ensure_toolchain()?;
    let ws = workspace();
    status(
        Command::new("cargo")
            .args(["build", "--release", "--package", "tracer-user"])
            .current_dir(&ws),
    )?;
    // The build script built the programs (the toolchain is there): their object says so.
    let object = ws.join("target/ebpf/bpfel-unknown-none/release/tracer-ebpf");
    anyhow::ensure!(
        object.exists(),
        "the eBPF programs were not built ({} is missing)",
        object.display()
    );
    Ok(ws.join("target/release/tracer"))
}
