//! What never reached the rings, as the kernel counts it: records dropped for a full
//! ring buffer, threads the filter had no room for, program runs the kernel skipped.

use std::os::fd::AsFd;

use anyhow::Result;
use tracer_abi::counter;

use super::Kernel;

impl Kernel {
    /// Updates counting mode's maps had no room for.
    pub fn stat_dropped(&self) -> Result<u64> {
        Ok(self.counters.get(&counter::STAT_FULL, 0)?.iter().sum())
    }

    /// Counting mode: timed Go calls opened and not closed by a return (in progress, or
    /// ended by a panic or `runtime.Goexit`, or pushed out of their map).
    pub fn frames_unclosed(&self) -> Result<u64> {
        let opened: u64 = self.counters.get(&counter::FRAME_OPENED, 0)?.iter().sum();
        let closed: u64 = self.counters.get(&counter::FRAME_CLOSED, 0)?.iter().sum();
        Ok(opened.saturating_sub(closed))
    }

    /// What never reached the rings: per-CPU counts of records dropped for a full ring
    /// buffer, threads the filter had no room for, and program runs the kernel skipped.
    pub fn losses(&self) -> Result<Losses> {
        let lost = self.counters.get(&counter::LOST, 0)?;
        let full = self.counters.get(&counter::THREADS_FULL, 0)?;
        let shed = self.counters.get(&counter::STACKS_SHED, 0)?;
        Ok(Losses {
            per_cpu: lost.iter().copied().take(self.rings.len()).collect(),
            threads_not_traced: full.iter().sum(),
            skipped: self.skipped(),
            stacks_shed: shed.iter().sum(),
        })
    }

    /// Runs of our programs the kernel skipped: a program does not run while it (for
    /// uprobes and classic tracepoints, any such program) already runs on that CPU, as
    /// when an interrupt wakes a thread during a wakeup. Each is an event not recorded.
    pub(super) fn skipped(&self) -> u64 {
        let Some(ebpf) = &self.ebpf else {
            return self.skipped_at_stop;
        };
        ebpf.programs()
            .filter_map(|(_, p)| p.fd().ok())
            .map(|fd| recursion_misses(fd.as_fd()))
            .sum()
    }
}

/// See [`Kernel::losses`]: cumulative counts since the programs were loaded.
#[derive(Clone, Debug, Default)]
pub struct Losses {
    pub per_cpu: Vec<u64>,
    pub threads_not_traced: u64,
    pub skipped: u64,
    /// Stacks not taken, the ring filling up (blocking stacks past a quarter of it, samples past half) (not events: their records are
    /// there, without a stack).
    pub stacks_shed: u64,
}

impl Losses {
    /// Events lost: dropped for a full ring buffer or never produced by a skipped run.
    pub fn total(&self) -> u64 {
        self.per_cpu.iter().sum::<u64>() + self.skipped
    }

    /// What was lost since `base` was read (for a file that started then).
    pub fn since(&self, base: &Losses) -> Losses {
        let per_cpu = (self.per_cpu.iter().enumerate())
            .map(|(i, n)| n.saturating_sub(base.per_cpu.get(i).copied().unwrap_or(0)))
            .collect();
        Losses {
            per_cpu,
            threads_not_traced: self
                .threads_not_traced
                .saturating_sub(base.threads_not_traced),
            skipped: self.skipped.saturating_sub(base.skipped),
            stacks_shed: self.stacks_shed.saturating_sub(base.stacks_shed),
        }
    }

    /// As written to the trace file.
    pub fn counts(&self, at_ns: u64) -> trace_file::LostCounts {
        trace_file::LostCounts {
            at_ns,
            per_cpu: self.per_cpu.clone(),
            threads_not_traced: self.threads_not_traced,
            skipped: self.skipped,
            stacks_shed: self.stacks_shed,
        }
    }
}

/// The kernel's count of a program's skipped runs (`bpf_prog_info.recursion_misses`); 0
/// if it cannot be read.
fn recursion_misses(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};
    use std::os::fd::AsRawFd;
    // SAFETY: plain C structs, valid when zeroed.
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = std::mem::size_of::<bpf_prog_info>() as u32;
    attr.info.info = &mut info as *mut bpf_prog_info as u64;
    // BPF_OBJ_GET_INFO_BY_FD writes at most info_len bytes into `info`.
    match crate::sessions::sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) {
        Ok(_) => info.recursion_misses,
        Err(_) => 0,
    }
}
