//! Before anything is loaded: can this process trace its targets from where it runs?
//!
//! Everything missing is found at once and refused in one line that names it (which
//! capability, tracefs, BTF, a target this PID namespace does not show) with the advice
//! that fits where the tracer runs: `sudo` for a user who is not root, container options
//! (`--privileged`, `--cap-add`, `--pid=host`, a tracefs mount) for root in a container,
//! since sudo cannot help there.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::{procfs, tracefs};

/// Capability numbers (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

const BTF: &str = "/sys/kernel/btf/vmlinux";

/// Checks that the targets `pids` can be traced from here; mounts tracefs if needed and
/// returns its mount point. Fails with one line naming everything missing.
pub fn check(pids: &[u32]) -> Result<PathBuf> {
    let here = Here::detect();
    let mut problems = Vec::new();
    for &pid in pids {
        match procfs::state(pid, pid) {
            Some('Z' | 'X') => problems.push(Problem::Exited(pid)),
            Some(_) => {
                // Another user's or a more capable process's maps need CAP_SYS_PTRACE.
                if let Err(e) = std::fs::read_link(format!("/proc/{pid}/exe")) {
                    if e.kind() == std::io::ErrorKind::PermissionDenied {
                        problems.push(Problem::Unreadable(pid));
                    }
                }
            }
            None => problems.push(Problem::NotVisible(pid)),
        }
    }
    let mut missing = Vec::new();
    if !here.has(CAP_BPF) && !here.has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF");
    }
    if !here.has(CAP_PERFMON) && !here.has(CAP_SYS_ADMIN) {
        missing.push("CAP_PERFMON");
    }
    if !missing.is_empty() {
        problems.push(Problem::Capabilities(missing));
    }
    let tracefs = match tracefs::ensure_mounted() {
        Ok(dir) => Some(dir),
        Err(e) => {
            // "Operation not permitted", without Rust's " (os error 1)".
            let e = e.to_string();
            let why = e.split(" (os error").next().unwrap_or(&e);
            problems.push(Problem::Tracefs(why.to_string()));
            None
        }
    };
    if !Path::new(BTF).exists() {
        problems.push(Problem::NoBtf);
    }
    match (refusal(&problems, &here), tracefs) {
        (Some(line), _) => bail!("{line}"),
        (None, Some(dir)) => Ok(dir),
        (None, None) => unreachable!("a tracefs failure is a problem"),
    }
}

/// Where the tracer runs, as far as the refusal's advice goes.
#[derive(Clone, Debug, Default)]
struct Here {
    /// Effective user id 0.
    root: bool,
    /// Effective capabilities (CapEff of /proc/self/status).
    caps: u64,
    /// Why it looks like a container (`/run/.containerenv`...), if it does.
    container: Option<&'static str>,
    /// In a PID namespace other than the kernel's first.
    own_pid_namespace: bool,
}

impl Here {
    fn detect() -> Here {
        Here {
            // SAFETY: geteuid has no preconditions and cannot fail.
            root: unsafe { libc::geteuid() } == 0,
            caps: effective_caps(),
            container: container(),
            own_pid_namespace: procfs::in_child_pid_namespace().unwrap_or(false),
        }
    }

    fn has(&self, cap: u32) -> bool {
        self.caps & (1u64 << cap) != 0
    }
}

/// Effective capabilities, 0 when /proc does not say.
fn effective_caps() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Why this looks like a container, if it does: the files podman and docker leave, the
/// variable podman, LXC and systemd-nspawn set, or a container runtime's cgroup.
fn container() -> Option<&'static str> {
    if Path::new("/run/.containerenv").exists() {
        return Some("/run/.containerenv");
    }
    if Path::new("/.dockerenv").exists() {
        return Some("/.dockerenv");
    }
    if std::env::var_os("container").is_some() {
        return Some("$container");
    }
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let runtimes = ["docker", "libpod", "containerd", "kubepods", "lxc", "crio"];
    runtimes
        .iter()
        .any(|r| cgroup.contains(r))
        .then_some("/proc/self/cgroup")
}

/// Something that stops tracing from here.
#[derive(Clone, Debug, PartialEq)]
enum Problem {
    /// A target is a zombie or gone.
    Exited(u32),
    /// No such process in this PID namespace.
    NotVisible(u32),
    /// Its /proc files are refused (another user's, or more capable).
    Unreadable(u32),
    /// Capabilities to load and attach the programs.
    Capabilities(Vec<&'static str>),
    /// tracefs is not mounted and mounting it failed (the error).
    Tracefs(String),
    /// No kernel BTF.
    NoBtf,
}

/// The one-line refusal for `problems`, `None` when there are none.
fn refusal(problems: &[Problem], here: &Here) -> Option<String> {
    if problems.is_empty() {
        return None;
    }
    let lacks_caps = problems
        .iter()
        .any(|p| matches!(p, Problem::Capabilities(_)));
    // Not root: sudo answers every privilege problem at once, as before.
    if !here.root && lacks_caps {
        let mut parts = vec![
            "tracing needs root (or CAP_BPF and CAP_PERFMON): run tracer with sudo".to_string(),
        ];
        parts.extend(problems.iter().filter_map(|p| match p {
            Problem::Exited(_) | Problem::NotVisible(_) | Problem::NoBtf => Some(describe(p, here)),
            _ => None,
        }));
        return Some(parts.join("; "));
    }
    let mut parts: Vec<String> = problems.iter().map(|p| describe(p, here)).collect();
    if let Some(advice) = advice(problems, here) {
        parts.push(advice);
    }
    Some(parts.join("; "))
}

fn describe(p: &Problem, here: &Here) -> String {
    match p {
        Problem::Exited(pid) => format!("no such process: {pid}"),
        Problem::NotVisible(pid) if here.own_pid_namespace => format!(
            "no such process: {pid} in this PID namespace (the tracer's container has its own: \
             a host's pid means nothing here)"
        ),
        Problem::NotVisible(pid) => format!("no such process: {pid}"),
        Problem::Unreadable(pid) => format!(
            "cannot read /proc/{pid} (permission denied): reading a more privileged process's \
             memory maps needs CAP_SYS_PTRACE"
        ),
        Problem::Capabilities(missing) => {
            let who = if here.root { "root, but " } else { "" };
            format!(
                "this process is {who}without {} (or CAP_SYS_ADMIN), which loading and \
                 attaching the tracing programs needs",
                missing.join(" and ")
            )
        }
        Problem::Tracefs(e) => {
            format!("tracefs is not mounted at /sys/kernel/tracing and mounting it failed ({e})")
        }
        Problem::NoBtf if here.container.is_some() => format!(
            "{BTF} is missing: the kernel has no BTF (CONFIG_DEBUG_INFO_BTF=y), or the \
             container does not show the host's /sys/kernel/btf"
        ),
        Problem::NoBtf => format!(
            "this kernel has no BTF ({BTF} is missing); the tracer needs CONFIG_DEBUG_INFO_BTF=y"
        ),
    }
}

/// What to do about `problems`, where the tracer runs.
fn advice(problems: &[Problem], here: &Here) -> Option<String> {
    let mut caps: Vec<&str> = Vec::new();
    let mut tracefs = false;
    let mut not_visible = false;
    let mut btf = false;
    for p in problems {
        match p {
            Problem::Capabilities(missing) => {
                caps.extend(missing.iter().map(|c| c.trim_start_matches("CAP_")))
            }
            Problem::Unreadable(_) => caps.push("SYS_PTRACE"),
            Problem::Tracefs(_) => tracefs = true,
            Problem::NotVisible(_) => not_visible = here.own_pid_namespace,
            Problem::NoBtf => btf = true,
            Problem::Exited(_) => {}
        }
    }
    caps.sort_unstable();
    caps.dedup();
    if here.container.is_none() {
        return match (caps.is_empty(), tracefs) {
            (true, false) => None,
            (true, true) => {
                Some("mount it with `mount -t tracefs nodev /sys/kernel/tracing`".to_string())
            }
            (false, _) => Some(format!(
                "it was started with fewer capabilities than root has (capsh, setpriv, a \
                 service's CapabilityBoundingSet): give it CAP_{}{}",
                caps.join(", CAP_"),
                if tracefs { " and CAP_SYS_ADMIN" } else { "" }
            )),
        };
    }
    let mut options: Vec<String> = Vec::new();
    if !caps.is_empty() || tracefs {
        let mut add: Vec<String> = caps.iter().map(|c| format!("--cap-add {c}")).collect();
        if tracefs && !caps.contains(&"SYS_ADMIN") {
            add.push("--cap-add SYS_ADMIN (or -v /sys/kernel/tracing:/sys/kernel/tracing)".into());
        }
        options.push(format!("--privileged, or {}", add.join(" ")));
    }
    if not_visible {
        options.push(
            "--pid=host with the host's pid (podman inspect -f '{{.State.Pid}}' NAME), or \
             --pid=container:NAME with the pid seen there"
                .into(),
        );
    }
    if btf {
        options.push("-v /sys/kernel/btf:/sys/kernel/btf:ro if the host has it".into());
    }
    if options.is_empty() {
        return None;
    }
    Some(format!(
        "this looks like a container ({}): run it with {}",
        here.container.unwrap_or_default(),
        options.join("; and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container_root() -> Here {
        Here {
            root: true,
            caps: 0,
            container: Some("/run/.containerenv"),
            own_pid_namespace: true,
        }
    }

    #[test]
    fn nothing_missing_is_no_refusal() {
        assert_eq!(refusal(&[], &container_root()), None);
    }

    #[test]
    fn root_in_a_container_is_told_the_container_options_not_sudo() {
        let problems = [
            Problem::Capabilities(vec!["CAP_BPF", "CAP_PERFMON"]),
            Problem::Tracefs("Operation not permitted".into()),
        ];
        let line = refusal(&problems, &container_root()).unwrap();
        assert!(!line.contains('\n'));
        assert!(!line.contains("sudo"), "{line}");
        assert!(
            line.contains("root, but without CAP_BPF and CAP_PERFMON"),
            "{line}"
        );
        assert!(
            line.contains("mounting it failed (Operation not permitted"),
            "{line}"
        );
        assert!(line.contains("--privileged"), "{line}");
        assert!(
            line.contains("--cap-add BPF --cap-add PERFMON --cap-add SYS_ADMIN"),
            "{line}"
        );
        assert!(
            line.contains("-v /sys/kernel/tracing:/sys/kernel/tracing"),
            "{line}"
        );
    }

    #[test]
    fn a_target_outside_the_pid_namespace_gets_pid_host_advice() {
        let mut here = container_root();
        here.caps = u64::MAX;
        let line = refusal(&[Problem::NotVisible(4242)], &here).unwrap();
        assert!(
            line.contains("no such process: 4242 in this PID namespace"),
            "{line}"
        );
        assert!(line.contains("--pid=host"), "{line}");
        assert!(line.contains("--pid=container:NAME"), "{line}");
        assert!(!line.contains("--privileged"), "{line}");
    }

    #[test]
    fn an_unreadable_target_needs_sys_ptrace() {
        let mut here = container_root();
        here.caps = (1 << CAP_BPF) | (1 << CAP_PERFMON) | (1 << CAP_SYS_ADMIN);
        let line = refusal(&[Problem::Unreadable(7)], &here).unwrap();
        assert!(line.contains("CAP_SYS_PTRACE"), "{line}");
        assert!(line.contains("--cap-add SYS_PTRACE"), "{line}");
    }

    #[test]
    fn a_user_is_told_sudo() {
        let here = Here {
            root: false,
            ..Here::default()
        };
        let problems = [
            Problem::Capabilities(vec!["CAP_BPF", "CAP_PERFMON"]),
            Problem::Tracefs("EPERM".into()),
            Problem::Unreadable(1),
        ];
        let line = refusal(&problems, &here).unwrap();
        assert_eq!(
            line,
            "tracing needs root (or CAP_BPF and CAP_PERFMON): run tracer with sudo"
        );
        let gone = refusal(&[Problem::Exited(9), problems[0].clone()], &here).unwrap();
        assert!(gone.ends_with("; no such process: 9"), "{gone}");
    }

    #[test]
    fn on_a_host_no_such_process_is_said_as_before() {
        let here = Here {
            root: true,
            caps: u64::MAX,
            ..Here::default()
        };
        assert_eq!(
            refusal(&[Problem::NotVisible(999999999)], &here).unwrap(),
            "no such process: 999999999"
        );
        let line = refusal(&[Problem::NoBtf], &here).unwrap();
        assert!(line.contains("CONFIG_DEBUG_INFO_BTF=y"), "{line}");
        // Root with a reduced capability set, on a host: no container options.
        here_without_caps_is_told_which(&here);
    }

    fn here_without_caps_is_told_which(host: &Here) {
        let here = Here {
            caps: 0,
            ..host.clone()
        };
        let line = refusal(&[Problem::Capabilities(vec!["CAP_BPF"])], &here).unwrap();
        assert!(line.contains("give it CAP_BPF"), "{line}");
        assert!(!line.contains("--cap-add"), "{line}");
        assert!(!line.contains("sudo"), "{line}");
    }
}
