//! What /proc says about the processes and threads we trace.

use std::path::PathBuf;

use anyhow::{Context, Result};
use trace_file::{ProcessInfo, ThreadInfo};

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    !matches!(state(pid, pid), Some('Z') | Some('X') | None)
}

/// The state letter of a thread (R, S, D, T, Z, ...), if it exists.
pub fn state(pid: u32, tid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The name may hold spaces and parentheses: the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The CPU a thread last ran on (field 39 of its stat).
pub fn last_cpu(pid: u32, tid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // Fields after the name start with the state, field 3.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(36)?
        .parse()
        .ok()
}

/// True when thread `tid` is on a CPU right now: the kernel answers `running` for its
/// current system call only then (it cannot stop a thread that is on a CPU to look).
pub fn on_cpu(pid: u32, tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
        .is_ok_and(|s| s.trim_end() == "running")
}

/// The CPU time the kernel has charged thread `tid`, ns (its `sum_exec_runtime`, the first
/// field of schedstat).
pub fn exec_ns(pid: u32, tid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The processes whose parent is in `of` and that are not in it themselves, from a scan of
/// /proc (its `children` files are documented as unreliable while processes fork).
pub fn children_of(of: &std::collections::BTreeSet<u32>) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if of.contains(&pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the name: state, then the parent's pid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid.is_some_and(|p| of.contains(&p)) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// Which file `pid` runs: the device and inode of its executable.
pub fn exe_identity(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((m.dev(), m.ino()))
}

/// The threads of `pid`, with their names and states.
pub fn threads(pid: u32) -> Result<Vec<ThreadInfo>> {
    let dir = format!("/proc/{pid}/task");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("no such process: {pid}"))? {
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let name = std::fs::read_to_string(format!("{dir}/{tid}/comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        // A thread that exited between readdir and now is simply not there.
        let Some(state) = state(pid, tid) else {
            continue;
        };
        out.push(ThreadInfo {
            tgid: pid,
            tid,
            name,
            state,
            host_tid: None,
        });
    }
    out.sort_by_key(|t| t.tid);
    Ok(out)
}

/// Executable path and command line of `pid`.
pub fn process(pid: u32, launched: bool) -> ProcessInfo {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    ProcessInfo {
        tgid: pid,
        exe,
        cmdline,
        launched,
        host_pid: None,
    }
}

/// Finds `cmd` on PATH the way execvp would.
pub fn which(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(cmd))
            .find(|p| p.is_file())
    })
}

/// Number of possible CPUs (the kernel's CPU ids are below it).
pub fn possible_cpus() -> Result<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .context("cannot read /sys/devices/system/cpu/possible")?;
    let mut max = 0;
    for range in text.trim().split(',') {
        let hi = range.rsplit('-').next().unwrap_or("0");
        max = max.max(hi.parse::<u32>().context("bad CPU list")?);
    }
    Ok(max + 1)
}

/// True when the recorder runs in a PID namespace other than the kernel's first (in a
/// container that has its own): the ids it sees are not the kernel's.
pub fn in_child_pid_namespace() -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    // The first PID namespace's inode number is fixed (PROC_PID_INIT_INO).
    const INIT_PID_NS: u64 = 0xEFFF_FFFC;
    let ns = std::fs::metadata("/proc/self/ns/pid")
        .context("reading /proc/self/ns/pid (is /proc mounted?)")?;
    Ok(ns.ino() != INIT_PID_NS)
}

/// Whether process `pid` maps the file `path` (its executable or a library).
pub fn maps_file(pid: u32, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else {
        return false;
    };
    let (major, minor) = (libc::major(m.dev()), libc::minor(m.dev()));
    let want = (format!("{major:02x}:{minor:02x}"), m.ino().to_string());
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    // ADDRESS PERMS OFFSET DEV INODE PATH
    maps.lines().any(|l| {
        let mut f = l.split_whitespace().skip(3);
        matches!((f.next(), f.next()), (Some(dev), Some(ino)) if dev == want.0 && ino == want.1)
    })
}

/// Raises this process's limit of open files to its hard limit, as perf does: probes of
/// many functions hold a descriptor each (see `attach::check_descriptors`). A launched
/// command gets the limit back (see [`original_open_files_limit`]).
pub fn raise_open_files_limit() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            let _ = ORIGINAL_NOFILE.set((l.rlim_cur, l.rlim_max));
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

static ORIGINAL_NOFILE: std::sync::OnceLock<(libc::rlim_t, libc::rlim_t)> =
    std::sync::OnceLock::new();

/// The limit of open files this process started with, if it was raised.
pub fn original_open_files_limit() -> Option<libc::rlimit> {
    ORIGINAL_NOFILE
        .get()
        .map(|&(rlim_cur, rlim_max)| libc::rlimit { rlim_cur, rlim_max })
}

/// This process's limit of open files.
pub fn open_files_limit() -> usize {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct given.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } {
        0 => usize::try_from(l.rlim_cur).unwrap_or(usize::MAX),
        _ => usize::MAX,
    }
}

/// Files this process has open.
pub fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}
