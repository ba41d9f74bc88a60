//! The README's test command: build everything, then run every test of the workspace in
//! release mode (the same artifacts as the `tracer` binary the end-to-end tests run),
//! after installing what they use (the container tests' podman and base image too).

use std::process::Command;

use anyhow::{bail, Result};

use crate::setup::{status, workspace};

pub fn run(extra: &[String]) -> Result<()> {
    if !tracer_tests::is_root() {
        bail!("the end-to-end tests load eBPF programs and need root: run as root (e.g. sudo -E cargo xtask test)");
    }
    crate::setup::ensure()?;
    crate::containers::ensure()?;
    let tracer = crate::build::run()?;
    status(
        Command::new("cargo")
            .args(["test", "--release", "--workspace", "--no-fail-fast"])
            .args(extra)
            .current_dir(workspace())
            .env("TRACER_BIN", tracer)
            .env("CONTAINERS_CONF", crate::containers::conf_path()),
    )
}
