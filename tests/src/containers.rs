//! Real containers for the end-to-end tests: podman with the project's containers.conf and
//! the base image `localhost/debian:12`, both from `cargo xtask setup`
//! (xtask/src/containers.rs), and guards that remove every container a test starts, also
//! when it panics.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::*;

/// The base image: Debian 12 like the host, so host-built binaries run in it.
pub const BASE_IMAGE: &str = "localhost/debian:12";

/// The containers.conf podman runs with: `$CONTAINERS_CONF`, else the one `cargo xtask
/// setup` writes under `target/containers`.
pub fn containers_conf() -> PathBuf {
    match std::env::var_os("CONTAINERS_CONF") {
        Some(p) => PathBuf::from(p),
        None => workspace_dir().join("target/containers/containers.conf"),
    }
}

/// `podman` with [`containers_conf`].
pub fn podman() -> Command {
    let mut c = Command::new("podman");
    c.env("CONTAINERS_CONF", containers_conf());
    c
}

/// Runs podman to completion; its stdout, trimmed, or an error with its stderr.
pub fn podman_ok(args: &[&str]) -> Result<String> {
    let out = podman()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running podman (cargo xtask setup installs it)")?;
    if !out.status.success() {
        bail!(
            "podman {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Panics, saying how to get them, unless podman and [`BASE_IMAGE`] are there.
pub fn require_podman() {
    let conf = containers_conf();
    assert!(
        conf.exists(),
        "{} is missing: run `cargo xtask setup` (the container tests need podman, its \
         configuration and the base image {BASE_IMAGE})",
        conf.display()
    );
    if let Err(e) = podman_ok(&["image", "exists", BASE_IMAGE]) {
        panic!("the base image {BASE_IMAGE} is missing ({e}): run `cargo xtask setup`");
    }
}

/// A container name for this test process, removed on drop (`podman rm -f`), even when
/// the test panics.
pub struct Container {
    /// Its name: `tracer-test-<what>-<pid of the test process>`.
    pub name: String,
}

impl Container {
    /// A name for a container that does not exist yet (a leftover of an earlier run of the
    /// same name is removed).
    pub fn named(what: &str) -> Container {
        let c = Container {
            name: format!("tracer-test-{what}-{}", std::process::id()),
        };
        c.remove();
        c
    }

    /// The pid of its first process, as the host sees it.
    pub fn host_pid(&self) -> Result<u32> {
        let pid = podman_ok(&["inspect", "--format", "{{.State.Pid}}", &self.name])?;
        let pid: u32 = pid.parse().with_context(|| format!("bad pid {pid:?}"))?;
        if pid == 0 {
            bail!("container {} is not running", self.name);
        }
        Ok(pid)
    }

    /// Sends `signal` (`INT`, `TERM`...) to its first process.
    pub fn kill(&self, signal: &str) -> Result<()> {
        podman_ok(&["kill", "--signal", signal, &self.name]).map(|_| ())
    }

    fn remove(&self) {
        let _ = podman()
            .args(["rm", "--force", "--time", "0", &self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `--volume HOST:HOST[:ro]`: the same path inside, so command lines need no rewriting.
pub fn same_path(path: &Path, read_only: bool) -> OsString {
    let mut v = OsString::from(path);
    v.push(":");
    v.push(path);
    if read_only {
        v.push(":ro");
    }
    v
}

/// Runs the fixture server in a container of [`BASE_IMAGE`] on the host's network (the
/// load generator connects to 127.0.0.1), its binary and data bind-mounted read-only at
/// their host paths. Its pid is the host's.
pub struct InContainer<'a> {
    /// The container's name.
    pub container: &'a Container,
    /// Directories to mount read-only (the fixture and the data file's).
    pub mounts: Vec<PathBuf>,
}

impl Launcher for InContainer<'_> {
    fn command(&self, direct: Command) -> Command {
        let mut c = podman();
        c.args(["run", "--rm", "--name", &self.container.name])
            .args(["--network", "host"]);
        for m in &self.mounts {
            c.arg("--volume").arg(same_path(m, true));
        }
        c.arg(BASE_IMAGE)
            .arg(direct.get_program())
            .args(direct.get_args());
        c
    }

    fn pid(&self, _: &Child) -> Result<u32> {
        self.container.host_pid()
    }
}

/// Starts the fixture server (thread pool, `opts.data` unset: a 4 KiB data file of its
/// own) in container `container`; returns it with the temporary directory of its data.
pub fn start_server_container(
    container: &Container,
    opts: &ServerOptions,
) -> Result<(Server, tempfile::TempDir)> {
    let bin = build_fixture("server");
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    write_data_file(&data, 4096)?;
    let opts = ServerOptions {
        data: Some(data),
        ..opts.clone()
    };
    let launcher = InContainer {
        container,
        mounts: vec![
            bin.parent().unwrap().to_path_buf(),
            tmp.path().to_path_buf(),
        ],
    };
    Ok((Server::start_via(&opts, &launcher)?, tmp))
}

/// A tracer running in a container: `podman run` of it, attached.
pub struct ContainerTracer {
    /// `podman run`.
    pub child: Child,
    /// Its container.
    pub container: Container,
}

impl ContainerTracer {
    /// Starts `podman run --rm --name NAME PODMAN_ARGS... IMAGE_AND_COMMAND...` and returns
    /// once `file` holds the trace's header and thread table (the tracer has attached), or
    /// panics with the tracer's stderr.
    pub fn start(
        container: Container,
        podman_args: &[OsString],
        image_and_command: &[OsString],
        file: &Path,
    ) -> ContainerTracer {
        let mut child = podman()
            .args(["run", "--rm", "--name", &container.name])
            .args(podman_args)
            .args(image_and_command)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run podman");
        let written = || std::fs::metadata(file).is_ok_and(|m| m.len() > 200);
        // Generous: podman's start and the tracer's attach, on a loaded machine.
        wait_until(Duration::from_secs(60), || {
            written() || !matches!(child.try_wait(), Ok(None))
        });
        if !written() {
            let _ = child.kill();
            let out = child.wait_with_output().expect("podman vanished");
            panic!(
                "the tracer in container {} did not start: {}",
                container.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        ContainerTracer { child, container }
    }

    /// Stops it as Ctrl-C would and waits for its container to end; panics with its stderr
    /// if it failed.
    pub fn stop(self) -> Output {
        self.container.kill("INT").expect("podman kill");
        let mut child = self.child;
        let status = wait_child(&mut child, Duration::from_secs(60)).expect("tracer container");
        let out = child.wait_with_output().expect("podman vanished");
        assert!(
            status.success(),
            "the tracer in container {} failed ({status}): {}",
            self.container.name,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}
