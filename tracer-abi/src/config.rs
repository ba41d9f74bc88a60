//! How the recorder configures the programs before loading them: where they read
//! kernel fields, which mode they run in, and the counters they keep.

/// Where the programs read their inputs, set as a global before loading so that they do
/// not depend on one kernel's layout: fields of the classic tracepoints' records, from
/// tracefs `format` files, and fields of the kernel structures the raw tracepoints pass
/// pointers to, from the kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    /// `task:task_newtask`: the new task's id.
    pub newtask_pid: u32,
    /// `task:task_newtask`: its name.
    pub newtask_comm: u32,
    /// `task:task_newtask`: the clone flags (a thread or a process).
    pub newtask_clone_flags: u32,
    /// `sched:sched_process_exit`: the exiting task's id.
    pub exit_pid: u32,
    /// `sched:sched_process_exit`: whether its process has no thread left.
    pub exit_group_dead: u32,
    /// `task:task_rename`: the renamed task's id.
    pub rename_pid: u32,
    /// `task:task_rename`: its new name.
    pub rename_newcomm: u32,
    /// `sched:sched_process_exec`: the task's id.
    pub exec_pid: u32,
    /// `struct task_struct`: `pid` (the thread id), `exit_state`, and `thread_info.cpu`
    /// (the CPU it last ran on or is queued on).
    pub task_pid: u32,
    /// `struct task_struct`: `exit_state`.
    pub task_exit_state: u32,
    /// `struct task_struct`: `thread_info.cpu`.
    pub task_cpu: u32,
    /// `se.sum_exec_runtime`: the CPU time the kernel has charged the task, up to date
    /// when it switches out.
    pub task_sum_exec: u32,
    /// `struct pt_regs` at system call entry: the first and third arguments and the
    /// call's number.
    pub regs_arg0: u32,
    /// `struct pt_regs`: the third argument.
    pub regs_arg2: u32,
    /// `struct pt_regs`: the system call's number (`orig_ax`).
    pub regs_nr: u32,
    /// Zero: the padding, explicit.
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

/// Indices of the per-CPU counters in the `COUNTERS` map.
pub mod counter {
    /// Records that found the ring buffer full and were dropped.
    pub const LOST: u32 = 0;
    /// Threads the filter could not hold (MAX_THREADS reached).
    pub const THREADS_FULL: u32 = 1;
    /// Counting mode: updates an aggregation map had no room for.
    pub const STAT_FULL: u32 = 2;
    /// How many counters there are.
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
    /// 1: the processes a traced process creates are traced too; 0: only its threads.
    pub inherit: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
}

impl Config {
    /// Every event to the ring buffers: `tracer record`.
    pub const RECORD: Config = Config {
        stat_mode: 0,
        sample_every: 0,
        inherit: 1,
        _pad: 0,
    };
}

crate::records::exact_layout! {
    Offsets { [u32; 16] }
    Config { u32, u32, u32, u32 }
}
