//! Tracing a cgroup v2 (a container, a systemd service, a pod): the processes in it and in
//! its descendants when recording starts, and those that enter it later, found by the
//! kernel at their first system call there.

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};

/// A cgroup to trace.
pub struct Cgroup {
    /// Its directory in the cgroup v2 hierarchy.
    pub path: PathBuf,
    /// The directory, open: the kernel's filter holds it.
    pub dir: File,
}

impl Cgroup {
    /// `arg`: a directory of the cgroup v2 hierarchy, absolute or relative to its mount
    /// (`system.slice/nginx.service`).
    pub fn open(arg: &str) -> Result<Cgroup> {
        let root = mount_point()?;
        let given = Path::new(arg);
        let path = if given.is_absolute() {
            given.to_path_buf()
        } else {
            root.join(given)
        };
        let path = path
            .canonicalize()
            .with_context(|| format!("cgroup {}", path.display()))?;
        if !path.starts_with(&root) || !path.join("cgroup.procs").exists() {
            bail!(
                "{} is not a cgroup of the cgroup v2 hierarchy mounted at {}",
                path.display(),
                root.display()
            );
        }
        let dir = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        Ok(Cgroup { path, dir })
    }

    /// The processes in the cgroup and its descendants now.
    pub fn processes(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        let mut dirs = vec![self.path.clone()];
        while let Some(d) = dirs.pop() {
            // A cgroup removed meanwhile has no processes left.
            if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
            let entries = std::fs::read_dir(&d).into_iter().flatten().flatten();
            dirs.extend(entries.map(|e| e.path()).filter(|p| p.is_dir()));
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Whether the cgroup still exists (a container's goes when it is removed).
    pub fn exists(&self) -> bool {
        self.path.join("cgroup.procs").exists()
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` as a rule).
fn mount_point() -> Result<PathBuf> {
    let mounts =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    // mountinfo: ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS ... - FSTYPE SOURCE SUPER
    for line in mounts.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() == Some("cgroup2") {
            if let Some(mp) = left.split_whitespace().nth(4) {
                return Ok(PathBuf::from(unescape(mp)));
            }
        }
    }
    bail!("no cgroup v2 hierarchy is mounted (mount -t cgroup2 none /sys/fs/cgroup)")
}

/// A mountinfo path: spaces and the like are written as octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(o)) => {
                out.push((o[0] - b'0') * 64 + (o[1] - b'0') * 8 + (o[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup of running container `name` (a name or an id), relative to the cgroup v2
/// mount: podman's or docker's CLI says which process the container runs
/// (`inspect --format {{.State.Pid}}`), and /proc which cgroup that process is in.
pub fn of_container(name: &str) -> Result<String> {
    let mut tried = Vec::new();
    for runtime in ["podman", "docker"] {
        let Some(bin) = crate::procfs::which(runtime) else {
            continue;
        };
        let out = std::process::Command::new(bin)
            .args(["inspect", "--format", "{{.State.Pid}}", name])
            .output();
        let said = match out {
            Ok(o) if o.status.success() => {
                let text = String::from_utf8_lossy(&o.stdout);
                match text.trim().parse::<u32>() {
                    Ok(0) => format!("{runtime}: container {name} is not running"),
                    Ok(pid) => return cgroup_of(pid),
                    Err(_) => format!("{runtime}: no process id for {name}"),
                }
            }
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                let line = err.lines().next_back().unwrap_or("").trim().to_string();
                format!("{runtime}: {line}")
            }
            Err(e) => format!("{runtime}: {e}"),
        };
        tried.push(said);
    }
    if tried.is_empty() {
        bail!("--container needs podman or docker on PATH: neither was found (give --cgroup or --pid instead)");
    }
    bail!("no running container {name} ({})", tried.join("; "))
}

/// The cgroup v2 path of process `pid` (`0::PATH` in /proc/PID/cgroup).
fn cgroup_of(pid: u32) -> Result<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).with_context(|| {
        format!("the container's process {pid} is not visible here (run with --pid=host)")
    })?;
    let path = (text.lines())
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_start_matches('/').to_string())
        .with_context(|| format!("process {pid} is in no cgroup v2"))?;
    if path.is_empty() {
        bail!("the container's process {pid} is in the root cgroup, which is the whole machine: give --pid {pid} instead");
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape(r"\\x"), r"\\x");
    }
}
