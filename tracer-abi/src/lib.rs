//! The event ABI between the eBPF programs (`tracer-ebpf`) and the recorder (`tracer-user`).
//!
//! Every record in a ring buffer starts with a [`Header`]; `Header::kind` says which of the
//! structs below follows. All structs are `#[repr(C)]`, 8-byte aligned and free of implicit
//! padding so both sides agree on the bytes without any serialization.
//!
//! Timestamps are `bpf_ktime_get_ns()`: CLOCK_MONOTONIC in nanoseconds.
#![no_std]

pub mod errno;
pub mod syscalls;

/// Upper bound on CPUs: the size of the per-CPU ring buffer array.
pub const MAX_CPUS: u32 = 4096;
/// Upper bound on traced threads held in the kernel filter.
pub const MAX_THREADS: u32 = 65536;
/// Upper bound on traced processes.
pub const MAX_PROCESSES: u32 = 4096;
/// Slots of the filter's first test, one byte per `id % ID_HINT_SLOTS` (a power of two).
pub const ID_HINT_SLOTS: u32 = 65536;
/// Bytes of each per-CPU ring buffer (a power of two, a multiple of the page size).
pub const RING_BYTES: u32 = 8 << 20;
/// The `uretprobe` syscall (x86_64): every uretprobe return makes one; never recorded.
pub const SYS_URETPROBE: u32 = 335;

/// Kinds of records, stored in [`Header::kind`].
pub mod kind {
    pub const FUNC_ENTRY: u16 = 1;
    pub const FUNC_EXIT: u16 = 2;
    pub const SYS_ENTER: u16 = 3;
    pub const SYS_EXIT: u16 = 4;
    pub const SWITCH: u16 = 5;
    pub const WAKEUP: u16 = 6;
    pub const WAKEUP_NEW: u16 = 7;
    pub const NEW_TASK: u16 = 8;
    pub const EXIT: u16 = 9;
    pub const RENAME: u16 = 10;
    pub const EXEC: u16 = 11;
}

/// Common prefix of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub ts: u64,
    /// The thread the event belongs to (for a switch: the thread leaving the CPU; for a
    /// wakeup or a new task: the thread doing it).
    pub tid: u32,
    pub kind: u16,
    pub _pad: u16,
}

/// A probed function was entered. `func` is the attach cookie: the probe-table id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuncEntry {
    pub h: Header,
    pub func: u32,
    pub _pad: u32,
}

/// A probed function returned with `ret` (the raw return register).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FuncExit {
    pub h: Header,
    pub func: u32,
    pub _pad: u32,
    pub ret: u64,
}

/// A system call started. `arg0` is the fd for I/O and socket calls, `arg2` the requested size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SysEnter {
    pub h: Header,
    pub nr: u32,
    pub _pad: u32,
    pub arg0: u64,
    pub arg2: u64,
}

/// A system call returned `ret` (bytes moved, a new fd, or `-errno`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SysExit {
    pub h: Header,
    pub nr: u32,
    pub _pad: u32,
    pub ret: i64,
}

/// A context switch: `h.tid` leaves the CPU in `prev_state`, `next_tid` takes it.
/// `prev_state` is the sched_switch tracepoint's value (0 or bit 0x100 = preempted, still
/// runnable; 1 = interruptible sleep; 2 = uninterruptible; 0x10/0x20 = exiting).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Switch {
    pub h: Header,
    pub next_tid: u32,
    pub prev_state: u32,
}

/// `h.tid` (0 for an interrupt or the idle task) woke `wakee`, to run on `target_cpu`.
/// Used for both `WAKEUP` and `WAKEUP_NEW` (first wakeup of a new thread).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Wakeup {
    pub h: Header,
    pub wakee: u32,
    pub target_cpu: u32,
}

/// `h.tid` created `child_tid`, a thread of `child_tgid` (a new process when the two are
/// equal), named `comm`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NewTask {
    pub h: Header,
    pub child_tid: u32,
    pub child_tgid: u32,
    pub comm: [u8; 16],
}

/// Thread `h.tid` of process `tgid` exits; `group_dead` is 1 when it is the last one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Exit {
    pub h: Header,
    pub tgid: u32,
    pub group_dead: u32,
}

/// Thread `h.tid` took a new name (prctl, pthread_setname_np, exec).
/// Used for both `RENAME` and `EXEC`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Rename {
    pub h: Header,
    pub comm: [u8; 16],
}

/// Where the programs read their inputs, set as a global before loading so that they do
/// not depend on one kernel's layout: fields of the classic tracepoints' records, from
/// tracefs `format` files, and fields of the kernel structures the raw tracepoints pass
/// pointers to, from the kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    pub newtask_pid: u32,
    pub newtask_comm: u32,
    pub newtask_clone_flags: u32,
    pub exit_pid: u32,
    pub exit_group_dead: u32,
    pub rename_pid: u32,
    pub rename_newcomm: u32,
    pub exec_pid: u32,
    /// `struct task_struct`: `pid` (the thread id), `exit_state`, and `thread_info.cpu`
    /// (the CPU it last ran on or is queued on).
    pub task_pid: u32,
    pub task_exit_state: u32,
    pub task_cpu: u32,
    /// `se.sum_exec_runtime`: the CPU time the kernel has charged the task, up to date
    /// when it switches out.
    pub task_sum_exec: u32,
    /// `struct pt_regs` at system call entry: the first and third arguments and the
    /// call's number.
    pub regs_arg0: u32,
    pub regs_arg2: u32,
    pub regs_nr: u32,
    pub _pad: u32,
}

impl Offsets {
    /// The layout of Linux 6.x x86_64; the recorder overwrites it with what tracefs and
    /// BTF say.
    pub const DEFAULT: Offsets = Offsets {
        newtask_pid: 8,
        newtask_comm: 12,
        newtask_clone_flags: 32,
        exit_pid: 24,
        exit_group_dead: 32,
        rename_pid: 8,
        rename_newcomm: 28,
        exec_pid: 12,
        task_pid: 0,
        task_exit_state: 0,
        task_cpu: 0,
        task_sum_exec: 0,
        regs_arg0: 112,
        regs_arg2: 96,
        regs_nr: 120,
        _pad: 0,
    };
}

/// Task state bits (include/linux/sched.h) that `sched_switch` reports.
pub mod task_state {
    pub const UNINTERRUPTIBLE: u32 = 0x2;
    /// The final switch of a thread that exited: `EXIT_DEAD | EXIT_ZOMBIE`.
    pub const EXITED: u32 = 0x10 | 0x20;
    /// Every state the tracepoint reports (`TASK_REPORT`).
    pub const REPORT: u32 = 0x7f;
    pub const NOLOAD: u32 = 0x400;
    pub const RTLOCK_WAIT: u32 = 0x1000;
    pub const FROZEN: u32 = 0x8000;
    /// `TASK_IDLE`: uninterruptible without counting as load.
    pub const IDLE: u32 = UNINTERRUPTIBLE | NOLOAD;
    /// `TASK_REPORT_IDLE`.
    pub const REPORT_IDLE: u32 = REPORT + 1;
    /// Reported for a preempted thread (`TASK_REPORT_MAX`): still runnable.
    pub const PREEMPTED: u32 = REPORT_IDLE << 1;
}

/// The `prev_state` the classic `sched:sched_switch` tracepoint records, from the raw
/// tracepoint's arguments and the thread's `exit_state`: the kernel's
/// `__trace_sched_switch_state`, so that traces and their readers do not depend on which
/// of the two the programs attach to.
pub const fn switch_state(preempt: bool, prev_state: u32, exit_state: u32) -> u32 {
    use task_state::*;
    if preempt {
        return PREEMPTED;
    }
    let mut state = (prev_state | exit_state) & REPORT;
    if prev_state & IDLE == IDLE {
        state = REPORT_IDLE;
    }
    if prev_state & (RTLOCK_WAIT | FROZEN) != 0 {
        state = UNINTERRUPTIBLE;
    }
    // fls(state), then the bit below it: the highest reported state bit.
    if state == 0 {
        0
    } else {
        1 << (31 - state.leading_zeros())
    }
}

/// Indices of the per-CPU counters in the `COUNTERS` map.
pub mod counter {
    /// Records that found the ring buffer full and were dropped.
    pub const LOST: u32 = 0;
    /// Threads the filter could not hold (MAX_THREADS reached).
    pub const THREADS_FULL: u32 = 1;
    /// Counting mode: updates an aggregation map had no room for.
    pub const STAT_FULL: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// How the programs behave, set by the recorder before loading (frozen `.rodata`: the
/// verifier removes the branches of the other mode).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// 0: send every event to the ring buffers (`tracer record`);
    /// 1: aggregate in the kernel (`tracer stat`).
    pub stat_mode: u32,
    /// In counting mode, also record full detail for one call in this many per function
    /// (0 = never).
    pub sample_every: u32,
}

impl Config {
    pub const RECORD: Config = Config {
        stat_mode: 0,
        sample_every: 0,
    };
}

/// Probed functions counting mode can hold (ids 1..MAX_FUNCS).
pub const MAX_FUNCS: u32 = 1024;
/// System call numbers counting mode can hold.
pub const MAX_SYSCALLS: u32 = 512;
/// Buckets of the latency histograms: bucket `i` counts durations in `[2^i, 2^(i+1))` ns,
/// the last one everything longer (2^31 ns = 2.1 s).
pub const HIST_BUCKETS: usize = 32;

/// Counting mode, per function (per CPU, summed by user space).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuncStat {
    pub calls: u64,
    /// Calls whose return value, as a signed integer, was negative.
    pub errors: u64,
    pub total_ns: u64,
    pub hist: [u64; HIST_BUCKETS],
}

/// Counting mode, per system call number.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SysStat {
    pub calls: u64,
    pub errors: u64,
    pub total_ns: u64,
    /// Sum of positive results: bytes moved, for the calls that move bytes.
    pub positive_sum: u64,
}

/// Counting mode, per thread, cumulative. Times are closed intervals only: user space
/// adds the interval still open (from [`ThreadSched`]) when it reads.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadStat {
    /// Nanoseconds in each [`tstate`], indexed by state.
    pub state_ns: [u64; 4],
    pub voluntary: u64,
    pub involuntary: u64,
    pub wakeups_sent: u64,
    pub wakeups_received: u64,
    pub migrations: u64,
    pub syscalls: u64,
    /// Time inside system calls.
    pub syscall_ns: u64,
    /// Waits for a CPU that ended (each run begins with one), by length: bucket `i` counts `[2^(i + WAIT_SHIFT), 2^(i + WAIT_SHIFT + 1))`
    /// ns, the first also shorter ones, the last also longer ones. 32-bit counters:
    /// user space reads them far more often than 4 billion waits.
    pub wait_hist: [u32; WAIT_BUCKETS],
}

/// Buckets of [`ThreadStat::wait_hist`]: 1 us to 0.5 s and beyond, in 80 bytes a thread.
pub const WAIT_BUCKETS: usize = 20;
/// log2 of the first bucket's lower bound, in ns.
pub const WAIT_SHIFT: u32 = 10;

/// The thread states every part of the tracer uses: the eBPF counting code indexes its
/// time-per-state array by them, the recorder seeds threads with them, and the timeline
/// maps them to its own richer states.
pub mod tstate {
    /// On a CPU.
    pub const RUNNING: u32 = 0;
    /// Runnable, waiting for a CPU.
    pub const READY: u32 = 1;
    /// Interruptible sleep: a lock, a socket, a timer.
    pub const BLOCKED: u32 = 2;
    /// Uninterruptible sleep: disk I/O, page faults, some kernel locks.
    pub const IO: u32 = 3;
    /// Gone: the thread's last switch.
    pub const EXITED: u32 = 4;
}

/// The state a thread is in once a context switch has taken it off its CPU, from the
/// `prev_state` that [`switch_state`] gives (the classic tracepoint's value).
pub const fn state_after_switch(prev_state: u32) -> u32 {
    use task_state::*;
    if prev_state & EXITED != 0 {
        tstate::EXITED
    } else if prev_state & (REPORT | REPORT_IDLE) == 0 {
        // 0, or PREEMPTED: still runnable.
        tstate::READY
    } else if prev_state & UNINTERRUPTIBLE != 0 {
        tstate::IO
    } else {
        // Interruptible, stopped, traced, parked, idle.
        tstate::BLOCKED
    }
}

/// The state of a thread found at attach with `letter` in `/proc/PID/task/TID/stat`;
/// `None` for a letter that says nothing.
///
/// `R` is runnable: on a CPU or waiting for one, which /proc does not tell. It is
/// [`tstate::READY`]; since only a running thread can be switched out, a thread still in
/// its first, seeded READY state when a switch takes it off a CPU was running since
/// attach, and both the counting code and the timeline count it so.
pub const fn state_of_proc_letter(letter: u8) -> Option<u32> {
    match letter {
        b'R' => Some(tstate::READY),
        b'S' | b'I' | b'T' | b't' | b'P' | b'W' | b'K' => Some(tstate::BLOCKED),
        b'D' => Some(tstate::IO),
        b'Z' | b'X' | b'x' => Some(tstate::EXITED),
        _ => None,
    }
}

/// Calls of probed functions tracked per thread in counting mode (deeper nesting is
/// counted in depth but not timed).
pub const MAX_DEPTH: usize = 16;

/// Counting mode, per thread: the state it is in, since when, its last CPU, the start
/// times of its system call and probed calls in progress, and its counters. Updated in
/// place, so the hot path makes no map insertions, and one lookup serves an event.
///
/// One entry per thread, not per CPU: every update is serialized for a thread, as it
/// happens either in its own context or under its run-queue or wakeup lock; a wakeup of
/// a thread that is still running touches only `wakeups_received`, a word the thread
/// itself does not write.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadSched {
    pub since: u64,
    pub state: u32,
    pub cpu: u32,
    /// Entry time of the system call in progress, 0 when none.
    pub sys_start: u64,
    /// The task's `sum_exec_runtime` when it last took a CPU; 0 when unknown.
    pub exec_base: u64,
    /// Probed calls in progress.
    pub depth: u32,
    /// 1 once the thread has exited: user space reports it a last time and removes it.
    pub exited: u32,
    pub func_start: [u64; MAX_DEPTH],
    pub func_id: [u32; MAX_DEPTH],
    pub stat: ThreadStat,
}
/// `clone(2)` flag: the new task is a thread of the caller's process.
pub const CLONE_THREAD: u64 = 0x0001_0000;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] integer structs with no padding.
    unsafe impl aya::Pod for super::Offsets {}
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::FuncStat {}
    unsafe impl aya::Pod for super::SysStat {}
    unsafe impl aya::Pod for super::ThreadStat {}
    unsafe impl aya::Pod for super::ThreadSched {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_state_is_the_kernels_mapping() {
        // (preempt, __state, exit_state) -> the classic tracepoint's prev_state.
        let cases = [
            (true, 0x1, 0, task_state::PREEMPTED),
            (false, 0x0, 0, 0),
            (false, 0x1, 0, 0x1),
            (false, 0x2, 0, 0x2),
            // TASK_KILLABLE and freezable sleeps report their base state.
            (false, 0x102, 0, 0x2),
            (false, 0x2001, 0, 0x1),
            (false, task_state::IDLE, 0, task_state::REPORT_IDLE),
            (false, task_state::RTLOCK_WAIT, 0, 0x2),
            (false, task_state::FROZEN | 0x1, 0, 0x2),
            (false, 0x40, 0, 0x40),
            // TASK_DEAD is not reported; the exit state is.
            (false, 0x80, 0x20, 0x20),
            (false, 0x80, 0x10, 0x10),
        ];
        for (preempt, state, exit, want) in cases {
            assert_eq!(
                switch_state(preempt, state, exit),
                want,
                "preempt {preempt} state {state:#x} exit {exit:#x}"
            );
        }
        assert_ne!(switch_state(false, 0x80, 0x20) & task_state::EXITED, 0);
    }

    #[test]
    fn states_after_a_switch() {
        use tstate::*;
        let cases = [
            (0, READY),
            (task_state::PREEMPTED, READY),
            (0x1, BLOCKED),
            (0x2, IO),
            (0x4, BLOCKED),
            (0x40, BLOCKED),
            (task_state::REPORT_IDLE, BLOCKED),
            (0x10, EXITED),
            (0x20, EXITED),
        ];
        for (prev_state, want) in cases {
            assert_eq!(state_after_switch(prev_state), want, "{prev_state:#x}");
        }
        // Every value the kernel's mapping can produce has a state.
        for preempt in [false, true] {
            for raw in 0..0x10000u32 {
                let s = state_after_switch(switch_state(preempt, raw, 0));
                assert!(s <= EXITED);
                if preempt {
                    assert_eq!(s, READY);
                }
            }
        }
    }
}
