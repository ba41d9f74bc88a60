//! The tracer and the traced server in real containers (podman as root, the base image
//! `localhost/debian:12` that `cargo xtask setup` builds; docs/ci.md): the fixture server
//! (host-built, bind-mounted: same glibc) in one container, the tracer (the host-built
//! release binary, bind-mounted, or the Containerfile's image) in another, privileged, in
//! each way a CI job can place them. Each recording is checked against the server's own
//! counters: every handle_request call, the threads by name, their scheduler and system
//! call records. An unprivileged tracer refuses in one line that names what it lacks.
//! Needs root.

use std::{
    collections::BTreeSet,
    ffi::OsString,
    path::{Path, PathBuf},
    time::Duration,
};

use trace_file::Event;
use tracer_tests::*;

/// Where the tracer's container runs, and which pid it is given for the server.
struct Placement {
    /// The tracer container's options beyond `--privileged`.
    podman: Vec<OsString>,
    /// `--pid` for the tracer, or `--cgroup` (`None`: give the pid).
    target: Vec<String>,
    /// The server's pid in the tracer's PID namespace: the trace's ids.
    seen_pid: u32,
}

/// Server in a container, tracer in another (`place` says how), under a load of 100
/// requests: the recording has every call, the threads by name, their switches and
/// system calls.
fn server_and_tracer_in_containers(what: &str, place: impl Fn(&Container, u32) -> Placement) {
    let _serial = serial();
    require_podman();
    let server_c = Container::named(&format!("server-{what}"));
    let opts = ServerOptions {
        workers: 2,
        ..Default::default()
    };
    let (server, _data) = start_server_container(&server_c, &opts).unwrap();
    let p = place(&server_c, server.pid());
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join(format!("{what}.trace"));
    let mut args: Vec<OsString> = vec!["--privileged".into(), "--network".into(), "none".into()];
    args.extend(p.podman.iter().cloned());
    args.push("--volume".into());
    args.push(mount_tracer());
    args.push("--volume".into());
    args.push(same_path(dir.path(), false));
    let mut command: Vec<OsString> = vec![BASE_IMAGE.into(), "tracer".into()];
    command.extend(["record", "--quiet", "-u", "handle_request"].map(OsString::from));
    command.extend(p.target.iter().map(OsString::from));
    command.extend(["-o".into(), trace.clone().into_os_string()]);
    let tracer = ContainerTracer::start(
        Container::named(&format!("tracer-{what}")),
        &args,
        &command,
        &trace,
    );
    let report = load(server.port(), 4, 25, 512, 2, Duration::from_secs(60));
    assert_eq!((report.requests, report.errors), (100, 0));
    let stats = server.stats().unwrap();
    tracer.stop();
    server.stop().unwrap();
    check_recording(&trace, p.seen_pid, stats.handle_request);
}

/// The tracer binary at /usr/local/bin/tracer, read-only.
fn mount_tracer() -> OsString {
    let mut v = OsString::from(tracer_bin());
    v.push(":/usr/local/bin/tracer:ro");
    v
}

/// `trace` holds `calls` handle_request calls, all by the threads of process `pid` (as
/// the tracer saw it), which have their names and scheduler and system call records.
fn check_recording(trace: &Path, pid: u32, calls: u64) {
    let t = read_trace(trace);
    assert_eq!(t.lost, 0);
    let threads: Vec<&trace_file::ThreadInfo> =
        t.threads.iter().filter(|x| x.tgid == pid).collect();
    let names: BTreeSet<&str> = threads.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from(["server", "acceptor", "worker-0", "worker-1"]),
        "threads of {pid}: {:?}",
        t.threads
    );
    let worker = |tid: u32| (threads.iter()).any(|x| x.tid == tid && x.name.starts_with("worker-"));
    let h = probe_ids(trace)["handle_request"];
    assert_eq!(
        count(&t, |r| r.event == Event::FuncEntry { func: h }),
        calls
    );
    assert_eq!(
        count(&t, |r| r.event == Event::FuncEntry { func: h }
            && worker(r.tid)),
        calls,
        "calls by other threads than the workers"
    );
    // Each request is at least a read, an openat, a read, a close and a write.
    let by_workers = |f: &dyn Fn(&Event) -> bool| count(&t, |r| worker(r.tid) && f(&r.event));
    let syscalls = by_workers(&|e| matches!(e, Event::SysEnter { .. }));
    assert!(syscalls >= 5 * calls, "{syscalls} system calls");
    let switches = by_workers(&|e| matches!(e, Event::Switch { .. }));
    assert!(switches >= 10, "{switches} switches");
}

/// (a) `--pid=host`: the tracer sees the host's pids and is given the server's.
#[test]
fn a_tracer_container_in_the_host_pid_namespace_records_a_server_container() {
    server_and_tracer_in_containers("hostpid", |_, host_pid| Placement {
        podman: vec!["--pid=host".into()],
        target: vec!["--pid".into(), host_pid.to_string()],
        seen_pid: host_pid,
    });
}

/// (b) `--pid=container:SERVER`: the tracer joins the server's PID namespace and is given
/// the pid seen there (1: the server is the container's first process).
#[test]
fn a_tracer_container_in_the_servers_pid_namespace_records_it_by_its_pid_there() {
    server_and_tracer_in_containers("sharedpid", |server, host_pid| {
        let inner = pid_in_its_namespace(host_pid);
        Placement {
            podman: vec![format!("--pid=container:{}", server.name).into()],
            target: vec!["--pid".into(), inner.to_string()],
            seen_pid: inner,
        }
    });
}

/// (c) `--cgroup`: the tracer (in the host's PID namespace, with the cgroup v2 hierarchy
/// mounted) is given the server container's cgroup, as `podman inspect` or
/// /proc/PID/cgroup tell it.
#[test]
fn a_tracer_container_records_a_server_container_by_its_cgroup() {
    server_and_tracer_in_containers("cgroup", |_, host_pid| {
        let root = cgroup2_mount();
        let own = std::fs::read_to_string(format!("/proc/{host_pid}/cgroup")).unwrap();
        let path = (own.lines())
            .find_map(|l| l.strip_prefix("0::"))
            .expect("the server is in no cgroup v2");
        let dir = root.join(path.trim_start_matches('/'));
        assert!(dir.join("cgroup.procs").exists(), "{}", dir.display());
        Placement {
            podman: vec![
                "--pid=host".into(),
                "--volume".into(),
                same_path(&root, false),
            ],
            target: vec!["--cgroup".into(), dir.display().to_string()],
            seen_pid: host_pid,
        }
    });
}

/// (d) `--container NAME` on the host: the container's cgroup, found through podman's
/// CLI and /proc, traced as `--cgroup` traces it; an unknown name is one line.
#[test]
fn the_tracer_on_the_host_records_a_container_by_its_name() {
    let _serial = serial();
    require_podman();
    let server_c = Container::named("server-byname");
    let opts = ServerOptions {
        workers: 2,
        ..Default::default()
    };
    let (server, _data) = start_server_container(&server_c, &opts).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("byname.trace");
    let conf = containers_conf();
    let rec = std::process::Command::new(tracer_bin())
        .env("CONTAINERS_CONF", &conf)
        .args(["record", "--quiet", "-u", "handle_request", "--container"])
        .arg(&server_c.name)
        .arg("-o")
        .arg(&trace)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), || {
        std::fs::metadata(&trace).is_ok_and(|m| m.len() > 200)
    });
    let report = load(server.port(), 4, 25, 512, 2, Duration::from_secs(60));
    assert_eq!((report.requests, report.errors), (100, 0));
    let stats = server.stats().unwrap();
    stop_tracer(rec);
    let host_pid = server.pid();
    server.stop().unwrap();
    check_recording(&trace, host_pid, stats.handle_request);

    let o = std::process::Command::new(tracer_bin())
        .env("CONTAINERS_CONF", &conf)
        .args(["record", "--container", "no-such-container", "-o"])
        .arg(dir.path().join("none.trace"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no running container no-such-container"),
        "{err}"
    );
}

/// The pid of host process `pid` in its own PID namespace (the last of NSpid).
fn pid_in_its_namespace(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    (status.lines())
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|ids| ids.split_whitespace().last())
        .and_then(|id| id.parse().ok())
        .expect("NSpid")
}

/// Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified
/// beside v1 controllers).
fn cgroup2_mount() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    (mounts.lines())
        .find(|l| {
            l.split(" - ")
                .nth(1)
                .is_some_and(|r| r.starts_with("cgroup2 "))
        })
        .and_then(|l| l.split_whitespace().nth(4))
        .map(PathBuf::from)
        .expect("no cgroup v2 hierarchy mounted")
}

/// The Containerfile's image, built reusing this machine's toolchain and build (mounted at
/// their paths: the build stage compiles nothing), runs its `tracer` privileged in the
/// host's PID namespace and records a server on the host.
#[test]
fn the_containerfile_image_records_a_server_on_the_host() {
    let _serial = serial();
    require_podman();
    let ws = workspace_dir();
    let home = |var: &str, default: &str| -> PathBuf {
        std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap()).join(default))
    };
    let (cargo, rustup) = (home("CARGO_HOME", ".cargo"), home("RUSTUP_HOME", ".rustup"));
    let image = "localhost/tracer:test";
    let mut build = podman();
    build
        .args(["build", "--quiet", "--tag", image, "--network", "host"])
        .args(["--build-arg", &format!("BASE={BASE_IMAGE}")])
        .arg("--build-arg")
        .arg(format!("CARGO_HOME={}", cargo.display()))
        .arg("--build-arg")
        .arg(format!("RUSTUP_HOME={}", rustup.display()))
        .arg("--build-arg")
        .arg(format!("SRC={}", ws.display()))
        .arg("--volume")
        .arg(same_path(&cargo, true))
        .arg("--volume")
        .arg(same_path(&rustup, true))
        .arg("--volume")
        .arg(same_path(&ws, false))
        .arg(&ws);
    let built = build.output().unwrap();
    assert!(
        built.status.success(),
        "podman build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let version = podman_ok(&["run", "--rm", "--network", "none", image, "--version"]).unwrap();
    assert!(version.starts_with("tracer "), "{version}");

    let server = Server::start(&ServerOptions {
        workers: 2,
        ..Default::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("image.trace");
    let args: Vec<OsString> = [
        "--privileged",
        "--pid=host",
        "--network",
        "none",
        "--volume",
    ]
    .map(OsString::from)
    .into_iter()
    .chain([same_path(dir.path(), false)])
    .collect();
    let pid = server.pid().to_string();
    let mut command: Vec<OsString> = vec![image.into()];
    command.extend(
        [
            "record",
            "--quiet",
            "--pid",
            &pid,
            "-u",
            "handle_request",
            "-o",
        ]
        .map(OsString::from),
    );
    command.push(trace.clone().into_os_string());
    let tracer = ContainerTracer::start(Container::named("image"), &args, &command, &trace);
    let report = load(server.port(), 4, 25, 512, 2, Duration::from_secs(60));
    assert_eq!((report.requests, report.errors), (100, 0));
    let stats = server.stats().unwrap();
    tracer.stop();
    let pid = server.pid();
    server.stop().unwrap();
    check_recording(&trace, pid, stats.handle_request);
}

/// Without the privileges tracing needs, a tracer in a container refuses in one line that
/// says what it lacks and which container options give it, never `sudo` (it is root).
#[test]
fn an_unprivileged_tracer_container_says_what_it_lacks_in_one_line() {
    let _serial = serial();
    require_podman();
    let server = Server::start(&ServerOptions {
        workers: 1,
        ..Default::default()
    })
    .unwrap();
    let pid = server.pid().to_string();
    let refusal = |what: &str, options: &[&str]| -> String {
        let c = Container::named(what);
        let out = podman()
            .args(["run", "--rm", "--name", &c.name, "--network", "none"])
            .args(options)
            .arg("--volume")
            .arg(mount_tracer())
            .args([BASE_IMAGE, "tracer", "record", "--pid", &pid])
            .args(["-u", "handle_request", "-o", "/tmp/never.trace"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{what}: the tracer did not refuse");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{what}: not one line: {err}"
        );
        assert!(err.starts_with("tracer: error: "), "{what}: {err}");
        assert!(!err.contains("sudo"), "{what}: {err}");
        err
    };

    // No capabilities at all, in the host's PID namespace.
    let e = refusal("nocaps", &["--cap-drop", "ALL", "--pid=host"]);
    for needed in [
        "without CAP_BPF and CAP_PERFMON",
        "tracefs is not mounted",
        "CAP_SYS_PTRACE",
        "this looks like a container",
        "--privileged",
        "--cap-add BPF --cap-add PERFMON",
        "-v /sys/kernel/tracing:/sys/kernel/tracing",
    ] {
        assert!(e.contains(needed), "no {needed:?} in: {e}");
    }
    // Podman's default capabilities and a PID namespace of its own: the host's pid is not
    // there either.
    let e = refusal("defaultcaps", &[]);
    let not_here = format!("no such process: {pid} in this PID namespace");
    for needed in [
        not_here.as_str(),
        "without CAP_BPF and CAP_PERFMON",
        "--pid=host",
        "--pid=container:NAME",
    ] {
        assert!(e.contains(needed), "no {needed:?} in: {e}");
    }
    // Privileged, but the kernel's BTF hidden.
    let e = refusal(
        "nobtf",
        &[
            "--privileged",
            "--pid=host",
            "--security-opt",
            "mask=/sys/kernel/btf",
        ],
    );
    assert!(e.contains("/sys/kernel/btf/vmlinux is missing"), "{e}");
    assert!(e.contains("-v /sys/kernel/btf:/sys/kernel/btf:ro"), "{e}");
    assert!(!e.contains("CAP_"), "{e}");
    server.stop().unwrap();
}
