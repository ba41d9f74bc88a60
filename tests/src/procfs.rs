//! Ground truth from /proc: per-thread scheduler accounting, thread names, stolen time,
//! a process's memory.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

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

/// A process's resident memory (VmRSS of /proc/PID/status), KiB; `None` once it is gone.
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
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

/// Where symbol `symbol` of the executable `bin` is in process `pid`'s memory: its
/// address as `nm` gives it, moved by the load bias, from /proc/PID/maps (where the file's
/// start is mapped) and `readelf -l` (the address its first segment is linked at).
pub fn runtime_address(pid: u32, bin: &Path, symbol: &str) -> u64 {
    let tool = |cmd: &mut Command| {
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(out.status.success(), "{cmd:?} failed");
        String::from_utf8(out.stdout).unwrap()
    };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let nm = tool(Command::new("nm").arg(bin));
    let linked = nm
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(symbol))
        .map(|l| hex(l.split_whitespace().next().unwrap()))
        .unwrap_or_else(|| panic!("nm: no {symbol} in {}", bin.display()));
    // "  LOAD  0x000000 0x0000000000000000 0x0000000000000000 0x000628 0x000628 R  0x1000"
    let segments = tool(Command::new("readelf").args(["-lW"]).arg(bin));
    let first_load = segments
        .lines()
        .find(|l| l.trim_start().starts_with("LOAD "))
        .map(|l| hex(l.split_whitespace().nth(2).unwrap()))
        .expect("readelf -l: no LOAD segment");
    let file = fs::canonicalize(bin).unwrap();
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let start = maps
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 6 && f[2] == "00000000" && Path::new(f[5]) == file
        })
        .map(|l| hex(l.split('-').next().unwrap()))
        .unwrap_or_else(|| panic!("{} is not mapped in {pid}:\n{maps}", file.display()));
    start - first_load + linked
}

/// `N` bytes of process `pid`'s memory at `addr`, read through /proc/PID/mem.
pub fn read_memory<const N: usize>(pid: u32, addr: u64) -> std::io::Result<[u8; N]> {
    let mut buf = [0; N];
    fs::File::open(format!("/proc/{pid}/mem"))?.read_exact_at(&mut buf, addr)?;
    Ok(buf)
}
