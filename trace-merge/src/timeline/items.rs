//! What the timeline yields: states, spans, links, and what it knows of threads and
//! processes.

use crate::sysclass::SockOp;

use super::ThreadRef;

/// What a thread is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadState {
    /// Not seen yet: the thread existed but the trace knows nothing of it (before its
    /// first record, or before its recording started).
    Unknown,
    /// Not created yet (before the `NewTask` that created it).
    NotCreated,
    /// On a CPU.
    Running,
    /// Runnable, waiting for a CPU: preempted, or woken and not yet switched in.
    Ready,
    /// Interruptible sleep: waiting on a lock, a socket, a timer...
    Blocked,
    /// Uninterruptible sleep: disk I/O, page faults, some kernel locks.
    Io,
    /// Exited.
    Exited,
}

impl ThreadState {
    /// Every state.
    pub const ALL: [ThreadState; 7] = [
        ThreadState::Unknown,
        ThreadState::NotCreated,
        ThreadState::Running,
        ThreadState::Ready,
        ThreadState::Blocked,
        ThreadState::Io,
        ThreadState::Exited,
    ];

    /// The state a thread leaves the CPU in, from sched_switch's `prev_state`
    /// ([`tracer_abi::state_after_switch`]).
    pub fn from_prev_state(prev_state: u32) -> ThreadState {
        ThreadState::of(tracer_abi::state_after_switch(prev_state))
    }

    /// The state of a thread at attach from the state letter of /proc/TID/stat
    /// ([`tracer_abi::state_of_proc_letter`]).
    pub fn from_proc_letter(c: char) -> ThreadState {
        let letter = u8::try_from(c).unwrap_or(0);
        tracer_abi::state_of_proc_letter(letter).map_or(ThreadState::Unknown, ThreadState::of)
    }

    /// The timeline's state for one of [`tracer_abi::tstate`].
    pub fn of(tstate: u32) -> ThreadState {
        use tracer_abi::tstate::*;
        match tstate {
            RUNNING => ThreadState::Running,
            READY => ThreadState::Ready,
            BLOCKED => ThreadState::Blocked,
            IO => ThreadState::Io,
            EXITED => ThreadState::Exited,
            _ => ThreadState::Unknown,
        }
    }
}

/// A maximal stretch of time a thread spent in one state (on one CPU when running).
/// Consumers that write long intervals in pieces (see [`Timeline::cut`](super::Timeline::cut)) get adjacent
/// intervals with the same state and CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateInterval {
    /// The thread.
    pub thread: ThreadRef,
    /// Its kernel thread id.
    pub tid: u32,
    /// Its process id.
    pub tgid: u32,
    /// What it was doing.
    pub state: ThreadState,
    /// Start, ns of merge time.
    pub begin: u64,
    /// Exclusive; always > `begin`.
    pub end: u64,
    /// Global 0-based CPU while running, `None` otherwise.
    pub cpu: Option<u32>,
}

/// How a span ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpanEnd {
    /// Its exit record was seen.
    Returned,
    /// An outer frame returned first (longjmp, exception, lost uretprobe), or a system
    /// call's exit record is missing and the next one started.
    Unwound,
    /// The thread exited or executed a new program inside it.
    Exited,
    /// The trace ended inside it.
    TraceEnded,
}

/// One call of a probed function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The thread that made the call.
    pub thread: ThreadRef,
    /// Probe-table id (of the thread's source file).
    pub func: u32,
    /// Entry, ns of merge time.
    pub begin: u64,
    /// Return (or where it was cut), ns of merge time.
    pub end: u64,
    /// Nesting depth among probed functions, 0 = outermost.
    pub depth: u32,
    /// The raw return value, when it returned.
    pub ret: Option<u64>,
    /// How it ended.
    pub end_kind: SpanEnd,
    /// Global CPU at the end, when the thread was running.
    pub cpu: Option<u32>,
    /// For a Go function, the goroutine that made the call. It is paired by goroutine and
    /// shown on the thread that entered it, though the goroutine may have moved to other
    /// threads since (Go's scheduler is not the kernel's).
    pub goroutine: Option<u64>,
}

/// A USDT probe that fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The thread it fired in.
    pub thread: ThreadRef,
    /// When, ns of merge time.
    pub time: u64,
    /// The global CPU.
    pub cpu: u32,
    /// Probe-table id (of the thread's source file).
    pub probe: u32,
    /// How many of `args` it has.
    pub nargs: u8,
    /// Its arguments, as its note describes them.
    pub args: [u64; tracer_abi::MAX_USDT_ARGS],
}

/// A stack of a thread (`tracer record --stacks`): an on-CPU sample, or where it blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The thread.
    pub thread: ThreadRef,
    /// When, ns of merge time.
    pub time: u64,
    /// The global CPU.
    pub cpu: u32,
    /// The file whose stack table has the stack ([`Merger::sources`](crate::merge::Merger::sources)).
    pub source: u32,
    /// Its id there ([`crate::stacks::StackStore::stack`]).
    pub stack: u32,
    /// True for an on-CPU sample; false for the stack the thread blocks in, whose time
    /// is that of the off-CPU states that follow ([`crate::stacks::Blocking`]).
    pub on_cpu: bool,
    /// For an on-CPU sample, the CPU time it stands for, ns.
    pub period: u64,
}

/// Go's scheduler changed a goroutine's status ([`tracer_abi::go_status`], without the
/// garbage collector's scan bit), on `thread`: a goroutine that starts running (or enters
/// a system call) does so on that thread, and stays on it until its next change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoStatusChange {
    /// The thread that made the change.
    pub thread: ThreadRef,
    /// When, ns of merge time.
    pub time: u64,
    /// The goroutine (its `g` pointer).
    pub g: u64,
    /// Its new status.
    pub status: u32,
}

/// A system call starting, with what is known at entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallEntry {
    /// The calling thread.
    pub thread: ThreadRef,
    /// Entry, ns of merge time.
    pub time: u64,
    /// Global CPU of the entry.
    pub cpu: u32,
    /// System call number (x86_64).
    pub nr: u32,
    /// The fd operated on, for calls whose first argument is one.
    pub fd: Option<i32>,
    /// Third argument: the size asked for by read/write-like calls.
    pub requested: u64,
    /// What the call does to a socket, if it is one.
    pub sock_op: Option<SockOp>,
    /// The connection `fd` belongs to, if it is an accepted one.
    pub conn: Option<u32>,
}

/// One system call, complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallSpan {
    /// The calling thread.
    pub thread: ThreadRef,
    /// System call number (x86_64).
    pub nr: u32,
    /// Entry time; for a call whose entry was not recorded (under way when recording
    /// started), the thread's first appearance.
    pub begin: u64,
    /// Exit (or where it was cut), ns of merge time.
    pub end: u64,
    /// The entry was recorded (`begin`, `fd`, `requested`, `conn` are then exact).
    pub entered: bool,
    /// Global CPU at the exit.
    pub cpu: Option<u32>,
    /// The fd operated on, for calls whose first argument is one.
    pub fd: Option<i32>,
    /// Third argument: the size asked for by read/write-like calls.
    pub requested: u64,
    /// Return value (bytes, new fd or -errno); `None` when it did not return in the trace.
    pub ret: Option<i64>,
    /// Bytes a read-like call returned.
    pub bytes_read: u64,
    /// Bytes a write-like call returned.
    pub bytes_written: u64,
    /// What the call does to a socket, if it is one.
    pub sock_op: Option<SockOp>,
    /// The accepted connection the fd belongs to.
    pub conn: Option<u32>,
    /// For an accept: the id given to the accepted connection.
    pub new_conn: Option<u32>,
    /// A connection whose fd number this call's new fd took: its close was not seen
    /// (lost), so it ended unseen, before this call returned.
    pub replaced_conn: Option<u32>,
    /// How it ended.
    pub end_kind: SpanEnd,
}

/// What a link stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// `from` woke `to`; received when `to` starts running.
    Wakeup,
    /// `from` accepted connection `conn`; `to` is the next other thread to operate on it.
    Handoff {
        /// The connection handed over.
        conn: u32,
    },
}

/// A causal arrow from one thread to another (a Paraver communication).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// What it stands for.
    pub kind: LinkKind,
    /// The sender (the waker, the acceptor).
    pub from: ThreadRef,
    /// When it was sent, ns of merge time.
    pub send: u64,
    /// The sender's global CPU.
    pub send_cpu: u32,
    /// The receiver.
    pub to: ThreadRef,
    /// When the receiver acted, ns of merge time; >= `send`.
    pub recv: u64,
    /// The receiver's global CPU.
    pub recv_cpu: u32,
    /// Bytes moved by the receiving operation (hand-offs), 0 when unknown.
    pub bytes: u64,
}

/// One output of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A thread appears; see [`Timeline::thread`](super::Timeline::thread). Comes before any other item about it.
    Thread(ThreadRef),
    /// A thread's state interval has ended.
    State(StateInterval),
    /// A thread starts running on a CPU (or is found running on another one).
    OnCpu {
        /// The thread.
        thread: ThreadRef,
        /// From when, ns of merge time.
        time: u64,
        /// The global CPU.
        cpu: u32,
    },
    /// A probed function was entered; its [`Span`] follows when it ends.
    FuncEntry {
        /// The calling thread.
        thread: ThreadRef,
        /// Entry, ns of merge time.
        time: u64,
        /// The global CPU.
        cpu: u32,
        /// Probe-table id.
        func: u32,
        /// For a Go function, the goroutine: see [`Span::goroutine`].
        goroutine: Option<u64>,
    },
    /// A call of a probed function has ended.
    Func(Span),
    /// A system call has started; its [`SyscallSpan`] follows when it ends.
    SyscallEntry(SyscallEntry),
    /// A system call has ended.
    Syscall(SyscallSpan),
    /// A wakeup or hand-off has been received.
    Link(Link),
    /// A USDT probe fired.
    Mark(Mark),
    /// A stack was taken.
    Sample(Sample),
    /// A goroutine's status changed.
    GoStatus(GoStatusChange),
}

/// What is known about a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadMeta {
    /// Index of its file in [`Merger::sources`](crate::merge::Merger::sources).
    pub source: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// Process id.
    pub tgid: u32,
    /// Index in [`Timeline::processes`](super::Timeline::processes).
    pub process: u32,
    /// 0-based position among its process's threads, in order of appearance.
    pub index_in_process: u32,
    /// The latest name (comm).
    pub name: String,
    /// When it was first seen (its start time for threads known at attach).
    pub first_seen: u64,
}

/// A process (thread group) of the merged trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessMeta {
    /// Index of its file in [`Merger::sources`](crate::merge::Merger::sources).
    pub source: u32,
    /// Process id.
    pub tgid: u32,
    /// Executable name (from the Process chunk) or its first thread's name.
    pub name: String,
    /// Threads registered so far.
    pub threads: u32,
}

/// Counts of the timeline, final once the stream has ended.
#[derive(Clone, Debug, Default)]
pub struct TimelineStats {
    /// Records read.
    pub records: u64,
    /// Threads registered.
    pub threads: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Wakeup links made.
    pub wakeup_links: u64,
    /// Hand-off links made.
    pub handoff_links: u64,
    /// Function exits with no matching entry on the thread's stack (ignored).
    pub orphan_func_exits: u64,
    /// System calls whose exit record never came (next entry seen first).
    pub syscalls_without_exit: u64,
    /// System call exits whose entry was not recorded.
    pub syscall_exits_without_entry: u64,
    /// Wakeups whose wakee never ran before exiting or the end of the trace.
    pub unresolved_wakeups: u64,
    /// Switches out of a thread held ready or asleep: the kernel reported no switch-in
    /// before (docs/performance.md), so its run starts at its first own record.
    pub unseen_switch_ins: u64,
}
