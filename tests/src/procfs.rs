//! Ground truth from /proc: per-thread scheduler accounting, thread names, stolen time.

use std::fs;

/// A thread's scheduler statistics from `/proc/PID/task/TID/schedstat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Schedstat {
    /// Time spent on the CPU.
    pub run_ns: u64,
    /// Time spent runnable, waiting on a runqueue.
    pub wait_ns: u64,
    /// Number of times it was scheduled in.
    pub timeslices: u64,
}

/// Reads `/proc/PID/task/TID/schedstat`.
pub fn schedstat(pid: u32, tid: u32) -> std::io::Result<Schedstat> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>());
    let mut next = || -> std::io::Result<u64> {
        fields
            .next()
            .and_then(|f| f.ok())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, text.clone()))
    };
    Ok(Schedstat {
        run_ns: next()?,
        wait_ns: next()?,
        timeslices: next()?,
    })
}

/// The threads of process `pid` as `(tid, comm)`, sorted by tid. Empty if
/// the process does not exist; threads that exit while listing are skipped.
pub fn threads(pid: u32) -> Vec<(u32, String)> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = fs::read_to_string(entry.path().join("comm")).ok()?;
            Some((tid, comm.trim_end_matches('\n').to_string()))
        })
        .collect();
    out.sort();
    out
}

/// Time the hypervisor took from this machine's CPUs (all of them), from /proc/stat.
///
/// The kernel's per-thread run time (schedstat) leaves stolen time out, while a tracer's
/// timestamps are wall clock: a thread descheduled by the hypervisor while on a CPU is
/// "running" for the tracer. Comparisons with schedstat allow for what was stolen meanwhile.
pub fn steal_ns() -> u64 {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}
