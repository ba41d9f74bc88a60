//! What the container tests (`tests/tests/containers.rs`) need, idempotently: podman,
//! runc and mmdebstrap from Debian, a containers.conf under `target/containers` (never
//! /etc: the tests pass it in `CONTAINERS_CONF`), and the base image
//! `localhost/debian:12`, built from Debian's archive since no registry may be reachable.
//! See docs/ci.md.

use std::{path::PathBuf, process::Command, time::Instant};

use anyhow::{Context, Result};

use crate::setup::{ensure_commands_with, status, workspace};

/// The base image the tests run their containers from (same glibc as a Debian 12 host,
/// so host-built binaries run in it).
pub const BASE_IMAGE: &str = "localhost/debian:12";

/// Debian packages: podman runs the containers, runc is the runtime it is configured with
/// (crun refuses some cgroup layouts), mmdebstrap builds the base image.
const DEBIAN: &[(&str, &str)] = &[
    ("podman", "podman"),
    ("runc", "runc"),
    ("mmdebstrap", "mmdebstrap"),
];

/// The engine settings every podman command of the tests runs with:
/// - podman as root lowers its hard process limit to 32768, and machines without
///   CAP_SYS_RESOURCE cannot raise limits: containers get limits they can have;
/// - runc, not crun (which refuses hybrid cgroup layouts);
/// - cgroupfs and a file events logger: no systemd needed.
const CONF: &str = r#"# Written by `cargo xtask setup` (xtask/src/containers.rs); used through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"#;

/// `target/containers/containers.conf`.
pub fn conf_path() -> PathBuf {
    workspace().join("target/containers/containers.conf")
}

/// podman with the project's containers.conf.
pub fn podman() -> Command {
    let mut c = Command::new("podman");
    c.env("CONTAINERS_CONF", conf_path());
    c
}

/// Installs and configures what the container tests need, skipping what is there: a
/// second run costs a `podman image exists`.
pub fn ensure() -> Result<()> {
    let start = Instant::now();
    ensure_commands_with(DEBIAN, &["--no-install-recommends"])?;
    let conf = conf_path();
    if std::fs::read_to_string(&conf).ok().as_deref() != Some(CONF) {
        std::fs::create_dir_all(conf.parent().unwrap())?;
        std::fs::write(&conf, CONF).with_context(|| format!("writing {}", conf.display()))?;
    }
    let exists = podman()
        .args(["image", "exists", BASE_IMAGE])
        .status()
        .context("running podman")?
        .success();
    if !exists {
        build_base_image()?;
    }
    let took = start.elapsed();
    if took.as_secs() >= 1 {
        eprintln!("xtask: containers ready in {:.1}s", took.as_secs_f64());
    }
    Ok(())
}

/// Debian 12 from its archive (`mmdebstrap`, about 16 s and 160 MiB), imported as
/// [`BASE_IMAGE`]; the tarball is removed after.
fn build_base_image() -> Result<()> {
    eprintln!("xtask: building the base image {BASE_IMAGE} from Debian's archive (mmdebstrap)");
    let dir = workspace().join("target/containers");
    std::fs::create_dir_all(&dir)?;
    let tar = dir.join("debian12.tar");
    let _ = std::fs::remove_file(&tar);
    status(
        Command::new("mmdebstrap")
            .args(["--quiet", "--variant=apt", "--mode=root", "--format=tar"])
            .arg("bookworm")
            .arg(&tar)
            .arg("deb http://deb.debian.org/debian bookworm main")
            .arg("deb http://deb.debian.org/debian bookworm-updates main")
            .arg("deb http://deb.debian.org/debian-security bookworm-security main"),
    )?;
    let imported = status(
        podman()
            .args(["import", "--quiet", "--change", r#"CMD ["/bin/bash"]"#])
            .arg(&tar)
            .arg(BASE_IMAGE)
            .stdout(std::process::Stdio::null()),
    );
    let _ = std::fs::remove_file(&tar);
    imported
}
