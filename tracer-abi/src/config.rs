//! How the recorder configures the programs before loading them: where they read
//! kernel fields, which mode they run in, and the counters they keep.

/// Where the programs read their inputs, set as a global before loading so that they do
/// not depend on one kernel's layout: fields of the classic tracepoints' records, from
/// tracefs `format` files, and fields of the kernel structures the raw tracepoints pass
/// pointers to, from the kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
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
    /// `sched:sched_process_exec`: its id before the exec (another thread's than the
    /// process's when that thread exec'd: it then takes the process id).
    pub exec_old_pid: u32,
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
    /// `struct task_struct`: `thread_pid`, the task's `struct pid`, whose `numbers` give
    /// its id in each PID namespace it is in.
    pub task_thread_pid: u32,
    /// `struct task_struct`: `comm`, its name.
    pub task_comm: u32,
    /// `struct task_struct`: `group_leader`, its process's first thread.
    pub task_group_leader: u32,
    /// `struct pid`: `level`, the depth of the task's own PID namespace.
    pub pid_level: u32,
    /// `struct pid`: `numbers`, one `struct upid` per level.
    pub pid_numbers: u32,
    /// `sizeof(struct upid)`.
    pub upid_size: u32,
    /// `struct upid`: `ns`, the namespace the id is in (`nr` is at 0).
    pub upid_ns: u32,
    /// `struct task_struct`: `utask`, its uprobes state (null until it hits one); 0 when
    /// the kernel's types do not say, and then the uretprobes' trampoline addresses stay
    /// in the stacks copied.
    pub task_utask: u32,
    /// `struct uprobe_task`: `return_instances`, the pending uretprobes, newest first.
    pub utask_return_instances: u32,
    /// `struct return_instance`: `stack`, the address of the return address replaced.
    pub ri_stack: u32,
    /// `struct return_instance`: `orig_ret_vaddr`, the return address replaced.
    pub ri_orig_ret: u32,
    /// `struct return_instance`: `next`, the one pending before it.
    pub ri_next: u32,
    /// `struct task_struct`: `mm`.
    pub task_mm: u32,
    /// `struct mm_struct`: `uprobes_state.xol_area`, the page of the uretprobes'
    /// trampoline (null until the process hits a uprobe).
    pub mm_xol_area: u32,
    /// `struct xol_area`: `vaddr`, the trampoline's address.
    pub xol_vaddr: u32,
    /// `struct mm_struct`: `flags`, whose low two bits say whether the process may be
    /// dumped by its user (0: not known). An exec that leaves it not so (it raised the
    /// process's privileges) has the kernel remove the process's perf events, its
    /// inherited uprobes among them.
    pub mm_flags: u32,
}

impl Offsets {
    /// The layout of Linux 6.x x86_64; the recorder overwrites it with what tracefs and
    /// BTF say.
    pub const DEFAULT: Offsets = Offsets {
        exit_pid: 24,
        exit_group_dead: 32,
        rename_pid: 8,
        rename_newcomm: 28,
        exec_pid: 12,
        exec_old_pid: 16,
        task_pid: 0,
        task_exit_state: 0,
        task_cpu: 0,
        task_sum_exec: 0,
        regs_arg0: 112,
        regs_arg2: 96,
        regs_nr: 120,
        task_thread_pid: 0,
        task_comm: 0,
        task_group_leader: 0,
        pid_level: 4,
        pid_numbers: 80,
        upid_size: 16,
        upid_ns: 8,
        task_utask: 0,
        utask_return_instances: 0,
        ri_stack: 0,
        ri_orig_ret: 0,
        ri_next: 0,
        task_mm: 0,
        mm_xol_area: 0,
        xol_vaddr: 0,
        mm_flags: 0,
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
    /// Stacks not taken because the ring buffer was filling up (blocking stacks past a
    /// quarter of it, on-CPU samples past half): stacks yield to
    /// the other records (`--stacks`).
    pub const STACKS_SHED: u32 = 3;
    /// Counting mode: timed calls paired by frame (Go's, and native ones in programs that
    /// throw) whose start was kept (map `FRAME_CALLS`).
    pub const FRAME_OPENED: u32 = 4;
    /// Counting mode: of those, the ones closed by their return. The difference at the
    /// end: calls in progress then, ended by a panic, `runtime.Goexit` or an exception,
    /// or evicted.
    pub const FRAME_CLOSED: u32 = 5;
    /// How many counters there are.
    pub const COUNT: u32 = 6;
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
    /// 1: the recorder runs in a PID namespace other than the kernel's first (a container):
    /// recorded ids are translated to that namespace's, through `NS_IDS`.
    pub pidns: u32,
    /// 1: a cgroup is traced (map `CGROUP`): a process in it or one of its descendants is
    /// traced from its first system call there, whenever it entered it.
    pub cgroup: u32,
    /// Counting mode with uprobe sessions: every call is counted at its entry and one in
    /// this many per function (per CPU) is timed, its return probed (1: every one).
    pub time_every: u32,
    /// 1: only the system calls set in map `SYSCALLS` are traced (`--syscalls`).
    pub syscall_filter: u32,
    /// 1: stacks are taken (`--stacks`): at every switch out of a traced thread that
    /// blocks, and by the `stack_sample` perf-event program when it is attached.
    pub stacks: u32,
    /// Counting mode with uprobe sessions and `--time-budget`: at most this many calls of
    /// each function timed per CPU in each window of 2^[`BUDGET_WINDOW_SHIFT`] ns, spread
    /// over the window by the last one's rate (0: `time_every` decides).
    pub time_budget: u32,
    /// Zero: the padding, explicit.
    pub _pad: u32,
}

/// log2 of the length in ns of a `--time-budget` window (268 ms): short enough for the
/// timed calls to follow a changing rate, long enough for a few per window.
pub const BUDGET_WINDOW_SHIFT: u32 = 28;

impl Config {
    /// Every event to the ring buffers: `tracer record`.
    pub const RECORD: Config = Config {
        stat_mode: 0,
        sample_every: 0,
        inherit: 1,
        pidns: 0,
        cgroup: 0,
        time_every: 1,
        syscall_filter: 0,
        stacks: 0,
        time_budget: 0,
        _pad: 0,
    };
}

/// A task's ids in the recorder's PID namespace (map `NS_IDS`, keyed by the kernel's tid).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NsIds {
    /// Its thread id there.
    pub tid: u32,
    /// Its process id there.
    pub tgid: u32,
}

/// The recorder's own PID namespace, as the `ns_ids` iterator found it (map `NS_SELF`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NsSelf {
    /// The namespace's address in the kernel: the id a `struct upid` names it by.
    pub ns: u64,
    /// Its depth (0: the kernel's first namespace).
    pub level: u32,
    /// 1 once the iterator has run.
    pub set: u32,
}

crate::records::exact_layout! {
    NsIds { u32, u32 }
    NsSelf { u64, u32, u32 }
    Offsets { [u32; 29] }
    Config { u32, u32, u32, u32, u32, u32, u32, u32, u32, u32 }
}
