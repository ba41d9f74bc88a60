//! The per-thread state machine: turns the merged record stream into thread-state
//! intervals, function and system-call spans, wakeup and connection hand-off links.
//!
//! This is the one place where records get a meaning. The Paraver writer, the summaries
//! and any later output read the same [`Item`] stream, so a thread's state, a function's
//! duration or a connection's id is defined once.
//!
//! Items come out in the order the merged records that complete them are read, so their
//! times are those of the current record: an interval or a span is reported when it ends
//! (its `begin` is earlier), an entry point when it happens. Two kinds of item look back
//! further: the state before a thread's first appearance (reported at its first sight,
//! beginning at 0) and links (reported when the receiver acts).
//!
//! Guarantees, checked by [`crate::invariants`]:
//! - the [`StateInterval`]s of each thread tile `[0, end]` exactly, with no empty interval;
//! - every [`Item::FuncEntry`] is followed by exactly one [`Span`] closing it, every
//!   [`Item::SyscallEntry`] by exactly one [`SyscallSpan`];
//! - every hand-off [`Link`] goes from the accept of a connection to a later operation on
//!   that connection by another thread.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use trace_file::Event;

use crate::error::Result;
use crate::merge::{Merged, Merger, Source};
use crate::sysclass::{self, NewFd, SockOp};

/// A thread of the merged trace: an index into [`Timeline::threads`], dense, in order of
/// first appearance. (A tid alone is ambiguous across hosts and after tid reuse.)
pub type ThreadRef = u32;

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

    /// The state a thread leaves the CPU in, from sched_switch's `prev_state`.
    pub fn from_prev_state(prev_state: u32) -> ThreadState {
        if prev_state & (0x10 | 0x20) != 0 {
            ThreadState::Exited // EXIT_DEAD / EXIT_ZOMBIE
        } else if prev_state & 0x80 != 0 {
            ThreadState::Blocked // TASK_IDLE (reported as TASK_REPORT_MAX)
        } else if prev_state & 0x2 != 0 {
            ThreadState::Io // TASK_UNINTERRUPTIBLE, with or without TASK_NOLOAD
        } else if prev_state & 0xff != 0 {
            ThreadState::Blocked // interruptible, stopped, traced, parked
        } else {
            ThreadState::Ready // 0, or 0x100: preempted while runnable
        }
    }

    /// The state of a thread from the state letter of /proc/TID/stat.
    pub fn from_proc_letter(c: char) -> ThreadState {
        match c {
            'R' => ThreadState::Ready, // runnable; switch records tell when it runs
            'S' | 'I' | 'T' | 't' | 'P' | 'W' | 'K' => ThreadState::Blocked,
            'D' => ThreadState::Io,
            'Z' | 'X' | 'x' => ThreadState::Exited,
            _ => ThreadState::Unknown,
        }
    }
}

/// A maximal stretch of time a thread spent in one state (on one CPU when running).
/// Consumers that write long intervals in pieces (see [`Timeline::cut`]) get adjacent
/// intervals with the same state and CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateInterval {
    pub thread: ThreadRef,
    pub tid: u32,
    pub tgid: u32,
    pub state: ThreadState,
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
    pub thread: ThreadRef,
    /// Probe-table id (of the thread's source file).
    pub func: u32,
    pub begin: u64,
    pub end: u64,
    /// Nesting depth among probed functions, 0 = outermost.
    pub depth: u32,
    /// The raw return value, when it returned.
    pub ret: Option<u64>,
    pub end_kind: SpanEnd,
    /// Global CPU at the end, when the thread was running.
    pub cpu: Option<u32>,
}

/// A system call starting, with what is known at entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallEntry {
    pub thread: ThreadRef,
    pub time: u64,
    pub cpu: u32,
    pub nr: u32,
    /// The fd operated on, for calls whose first argument is one.
    pub fd: Option<i32>,
    /// Third argument: the size asked for by read/write-like calls.
    pub requested: u64,
    pub sock_op: Option<SockOp>,
    /// The connection `fd` belongs to, if it is an accepted one.
    pub conn: Option<u32>,
}

/// One system call, complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallSpan {
    pub thread: ThreadRef,
    pub nr: u32,
    /// Entry time; for a call whose entry was not recorded (under way when recording
    /// started), the thread's first appearance.
    pub begin: u64,
    pub end: u64,
    /// The entry was recorded (`begin`, `fd`, `requested`, `conn` are then exact).
    pub entered: bool,
    /// Global CPU at the exit.
    pub cpu: Option<u32>,
    pub fd: Option<i32>,
    pub requested: u64,
    /// Return value (bytes, new fd or -errno); `None` when it did not return in the trace.
    pub ret: Option<i64>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub sock_op: Option<SockOp>,
    pub conn: Option<u32>,
    /// For an accept: the id given to the accepted connection.
    pub new_conn: Option<u32>,
    /// A connection whose fd number this call's new fd took: its close was not seen
    /// (lost), so it ended unseen, before this call returned.
    pub replaced_conn: Option<u32>,
    pub end_kind: SpanEnd,
}

/// What a link stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// `from` woke `to`; received when `to` starts running.
    Wakeup,
    /// `from` accepted connection `conn`; `to` is the next other thread to operate on it.
    Handoff { conn: u32 },
}

/// A causal arrow from one thread to another (a Paraver communication).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub kind: LinkKind,
    pub from: ThreadRef,
    pub send: u64,
    pub send_cpu: u32,
    pub to: ThreadRef,
    /// >= `send`.
    pub recv: u64,
    pub recv_cpu: u32,
    /// Bytes moved by the receiving operation (hand-offs), 0 when unknown.
    pub bytes: u64,
}

/// One output of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A thread appears; see [`Timeline::thread`]. Comes before any other item about it.
    Thread(ThreadRef),
    State(StateInterval),
    /// A thread starts running on a CPU (or is found running on another one).
    OnCpu {
        thread: ThreadRef,
        time: u64,
        cpu: u32,
    },
    FuncEntry {
        thread: ThreadRef,
        time: u64,
        cpu: u32,
        func: u32,
    },
    Func(Span),
    SyscallEntry(SyscallEntry),
    Syscall(SyscallSpan),
    Link(Link),
}

/// What is known about a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadMeta {
    /// Index of its file in [`Merger::sources`].
    pub source: u32,
    pub tid: u32,
    pub tgid: u32,
    /// Index in [`Timeline::processes`].
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
    pub source: u32,
    pub tgid: u32,
    /// Executable name (from the Process chunk) or its first thread's name.
    pub name: String,
    /// Threads registered so far.
    pub threads: u32,
}

/// Counts of the timeline, final once the stream has ended.
#[derive(Clone, Debug, Default)]
pub struct TimelineStats {
    pub records: u64,
    pub threads: u64,
    pub connections: u64,
    pub wakeup_links: u64,
    pub handoff_links: u64,
    /// Function exits with no matching entry on the thread's stack (ignored).
    pub orphan_func_exits: u64,
    /// System calls whose exit record never came (next entry seen first).
    pub syscalls_without_exit: u64,
    /// System call exits whose entry was not recorded.
    pub syscall_exits_without_entry: u64,
    /// Wakeups whose wakee never ran before exiting or the end of the trace.
    pub unresolved_wakeups: u64,
}

/// Fast hash for small integer keys (tids, fds): the default SipHash costs more than the
/// rest of the per-record work.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

pub(crate) fn key(a: u32, b: u32) -> u64 {
    (a as u64) << 32 | b as u64
}

/// A [`key`] no thread has (no trace has 2^32 - 1 sources).
const NO_KEY: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Pending {
    from: ThreadRef,
    send: u64,
    cpu: u32,
}

#[derive(Clone, Copy)]
struct OpenSys {
    nr: u32,
    begin: u64,
    cpu: u32,
    fd: Option<i32>,
    requested: u64,
    sock_op: Option<SockOp>,
    conn: Option<u32>,
}

struct Rt {
    state: ThreadState,
    since: u64,
    cpu: Option<u32>,
    stack: Vec<(u32, u64)>,
    sys: Option<OpenSys>,
    wake: Option<Pending>,
}

#[derive(Clone, Copy)]
struct FdEntry {
    socket: bool,
    /// Connection id, 0 for none.
    conn: u32,
}

/// The state machine over a [`Merger`]; iterate it for [`Item`]s.
pub struct Timeline {
    merger: Merger,
    threads: Vec<ThreadMeta>,
    rt: Vec<Rt>,
    by_tid: FastMap<u64, ThreadRef>,
    processes: Vec<ProcessMeta>,
    by_tgid: FastMap<u64, u32>,
    /// (process, fd) -> what the fd is.
    fds: FastMap<u64, FdEntry>,
    /// Accepted connections no other thread has operated on yet.
    handoffs: FastMap<u32, Pending>,
    next_conn: u32,
    /// Items of the current record (or of the start or the end): `out[taken..]` are
    /// still to be returned. A plain vector, emptied when all are taken, keeps the
    /// per-item cost of the queue to an index increment.
    out: Vec<Item>,
    taken: usize,
    /// Per global CPU: (key of (source, tid), thread) of the last thread looked up as
    /// running there. Nearly every record is its CPU's running thread, so this spares the
    /// map lookup; entries of a key are dropped when the key is registered again.
    on_cpu: Vec<(u64, ThreadRef)>,
    now: u64,
    end: Option<u64>,
    stats: TimelineStats,
}

impl Timeline {
    /// Starts the state machine: the threads the recorders saw at attach are registered,
    /// in the state /proc gave them, from their file's start.
    pub fn new(merger: Merger) -> Timeline {
        let mut t = Timeline {
            merger,
            threads: Vec::new(),
            rt: Vec::new(),
            by_tid: FastMap::default(),
            processes: Vec::new(),
            by_tgid: FastMap::default(),
            fds: FastMap::default(),
            handoffs: FastMap::default(),
            next_conn: 1,
            out: Vec::new(),
            taken: 0,
            on_cpu: Vec::new(),
            now: 0,
            end: None,
            stats: TimelineStats::default(),
        };
        for s in 0..t.merger.sources().len() {
            let src = &t.merger.sources()[s];
            // A later part of a run: its threads are the earlier part's, already known
            // (or to be seen in its records).
            if src.identity != s as u32 {
                continue;
            }
            let start = src.start;
            let initial: Vec<_> = src
                .threads
                .iter()
                .map(|i| (i.tid, i.tgid, i.name.clone(), i.state))
                .collect();
            for (tid, tgid, name, letter) in initial {
                if tid == 0 || t.by_tid.contains_key(&key(s as u32, tid)) {
                    continue;
                }
                let state = ThreadState::from_proc_letter(letter);
                let pre = ThreadState::Unknown;
                t.register(s as u32, tid, tgid, name, start, pre, state, None);
            }
        }
        t
    }

    /// The merge underneath (sources, nodes, merge counts).
    pub fn merger(&self) -> &Merger {
        &self.merger
    }

    /// Metadata of thread `r`.
    pub fn thread(&self, r: ThreadRef) -> &ThreadMeta {
        &self.threads[r as usize]
    }

    /// All threads seen so far, indexed by [`ThreadRef`].
    pub fn threads(&self) -> &[ThreadMeta] {
        &self.threads
    }

    /// All processes seen so far.
    pub fn processes(&self) -> &[ProcessMeta] {
        &self.processes
    }

    /// Counts so far.
    pub fn stats(&self) -> &TimelineStats {
        &self.stats
    }

    /// Time of the latest record processed.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The end of the trace, once the stream has ended.
    pub fn end(&self) -> Option<u64> {
        self.end
    }

    /// The next item, `None` once everything has been closed at the end of the trace.
    ///
    /// Inlined into the consumer's loop: most calls only take a queued item.
    #[inline]
    pub fn next_item(&mut self) -> Result<Option<Item>> {
        if let Some(&it) = self.out.get(self.taken) {
            self.taken += 1;
            return Ok(Some(it));
        }
        self.refill()
    }

    /// Feeds records until some produce items, and returns the first of them.
    #[inline]
    fn refill(&mut self) -> Result<Option<Item>> {
        self.out.clear();
        self.taken = 0;
        loop {
            if self.end.is_some() {
                return Ok(None);
            }
            match self.merger.next_record()? {
                Some(m) => self.feed(&m),
                None => self.finish(),
            }
            if let Some(&it) = self.out.first() {
                self.taken = 1;
                return Ok(Some(it));
            }
        }
    }

    /// Ends, at `at` (not before the current record), the open state of every thread
    /// that has been in it since before `older_than`, restarts it at `at`, and returns
    /// the pieces. For writers that must know every interval beginning before some time
    /// (to write in time order) without waiting for long sleeps to end. The pieces tile
    /// like any other intervals: a thread's timeline then has adjacent intervals in the
    /// same state.
    pub fn cut(&mut self, at: u64, older_than: u64) -> Vec<StateInterval> {
        let mut pieces = Vec::new();
        if self.end.is_some() {
            return pieces;
        }
        for (i, th) in self.rt.iter_mut().enumerate() {
            if th.since < older_than && th.since < at {
                let m = &self.threads[i];
                pieces.push(StateInterval {
                    thread: i as ThreadRef,
                    tid: m.tid,
                    tgid: m.tgid,
                    state: th.state,
                    begin: th.since,
                    end: at,
                    cpu: th.cpu,
                });
                th.since = at;
            }
        }
        pieces
    }

    /// True when items of the current record are still to be taken. [`Timeline::cut`],
    /// [`Timeline::min_open_since`] and [`Timeline::oldest_pending_link`] describe the
    /// state after all of them, so a writer consults them only when this is false.
    pub fn has_queued(&self) -> bool {
        self.taken < self.out.len()
    }

    /// The earliest begin of an open state interval (`u64::MAX` when none).
    pub fn min_open_since(&self) -> u64 {
        if self.end.is_some() {
            return u64::MAX;
        }
        self.rt.iter().map(|t| t.since).min().unwrap_or(u64::MAX)
    }

    /// The earliest send time, not before `not_before`, of a link still waiting for its
    /// receiver. Links pending from earlier than `not_before` are ignored: a writer that
    /// cannot wait for them handles them when they come.
    pub fn oldest_pending_link(&self, not_before: u64) -> Option<u64> {
        let wakes = self.rt.iter().filter_map(|t| t.wake.map(|p| p.send));
        let accepts = self.handoffs.values().map(|p| p.send);
        wakes.chain(accepts).filter(|&s| s >= not_before).min()
    }

    fn feed(&mut self, m: &Merged) {
        self.now = m.time;
        self.stats.records += 1;
        let t = m.time;
        match m.event {
            Event::FuncEntry { func } => {
                let r = self.acting(m);
                self.rt[r as usize].stack.push((func, t));
                self.out.push(Item::FuncEntry {
                    thread: r,
                    time: t,
                    cpu: m.cpu,
                    func,
                });
            }
            Event::FuncExit { func, ret } => {
                let r = self.acting(m);
                let th = &mut self.rt[r as usize];
                match th.stack.iter().rposition(|f| f.0 == func) {
                    None => self.stats.orphan_func_exits += 1,
                    Some(i) => {
                        while th.stack.len() > i + 1 {
                            let (f, b) = th.stack.pop().unwrap_or_default();
                            let depth = th.stack.len() as u32;
                            self.out.push(Item::Func(Span {
                                thread: r,
                                func: f,
                                begin: b,
                                end: t,
                                depth,
                                ret: None,
                                end_kind: SpanEnd::Unwound,
                                cpu: Some(m.cpu),
                            }));
                        }
                        let (f, b) = th.stack.pop().unwrap_or_default();
                        self.out.push(Item::Func(Span {
                            thread: r,
                            func: f,
                            begin: b,
                            end: t,
                            depth: i as u32,
                            ret: Some(ret),
                            end_kind: SpanEnd::Returned,
                            cpu: Some(m.cpu),
                        }));
                    }
                }
            }
            Event::SysEnter { nr, arg0, arg2 } => {
                let r = self.acting(m);
                if let Some(open) = self.rt[r as usize].sys.take() {
                    self.stats.syscalls_without_exit += 1;
                    self.close_sys(r, open, t, Some(m.cpu), SpanEnd::Unwound);
                }
                let class = sysclass::class(nr);
                // The fd is a C int: the low 32 bits of the register.
                let fd = class.fd_arg.then_some(arg0 as u32 as i32);
                let proc_ = self.threads[r as usize].process;
                let entry = fd.and_then(|fd| self.fds.get(&key(proc_, fd as u32)).copied());
                if let (Some(fd), true) = (fd, class.close) {
                    // close frees the number before it returns: another thread's accept
                    // may get it back before this close's exit is seen.
                    self.fds.remove(&key(proc_, fd as u32));
                }
                let conn = entry.map(|e| e.conn).filter(|&c| c != 0);
                let socket = entry.is_some_and(|e| e.socket);
                let sock_op = class.sock.or(match () {
                    _ if !socket => None,
                    _ if class.reads => Some(SockOp::Recv),
                    _ if class.writes => Some(SockOp::Send),
                    _ if class.close => Some(SockOp::Close),
                    _ => None,
                });
                let open = OpenSys {
                    nr,
                    begin: t,
                    cpu: m.cpu,
                    fd,
                    requested: arg2,
                    sock_op,
                    conn,
                };
                self.rt[r as usize].sys = Some(open);
                self.out.push(Item::SyscallEntry(SyscallEntry {
                    thread: r,
                    time: t,
                    cpu: m.cpu,
                    nr,
                    fd,
                    requested: arg2,
                    sock_op,
                    conn,
                }));
            }
            Event::SysExit { nr, ret } => {
                let r = self.acting(m);
                let open = match self.rt[r as usize].sys.take() {
                    Some(o) if o.nr == nr => Some(o),
                    Some(o) => {
                        self.stats.syscalls_without_exit += 1;
                        self.close_sys(r, o, t, Some(m.cpu), SpanEnd::Unwound);
                        None
                    }
                    None => None,
                };
                self.sys_exit(r, nr, open, ret, m);
            }
            Event::Switch {
                next_tid,
                prev_state,
            } => {
                if let Some(r) = self.lookup_on_cpu(m.ident, m.tid, m.cpu) {
                    let s = ThreadState::from_prev_state(prev_state);
                    self.set_state(r, s, t, None);
                    if s == ThreadState::Exited {
                        self.close_all(r, t, None, SpanEnd::Exited);
                        if self.rt[r as usize].wake.take().is_some() {
                            self.stats.unresolved_wakeups += 1;
                        }
                    }
                }
                if let Some(r) = self.lookup_on_cpu(m.ident, next_tid, m.cpu) {
                    self.run(r, t, m.cpu);
                }
            }
            Event::Wakeup { wakee, .. } => {
                let waker = self.lookup_on_cpu(m.ident, m.tid, m.cpu);
                if let Some(w) = waker {
                    self.run(w, t, m.cpu);
                }
                if wakee == 0 {
                    return;
                }
                let r = match self.lookup(m.ident, wakee) {
                    Some(r) => r,
                    None => {
                        let tgid = self.guess_tgid(m.source, wakee);
                        let name = self.late_name(m.source, wakee);
                        let (pre, st) = (ThreadState::Unknown, ThreadState::Ready);
                        self.register(m.source, wakee, tgid, name, t, pre, st, None)
                    }
                };
                // Woken before it got off its CPU: no switch-in will follow.
                if self.rt[r as usize].state == ThreadState::Running {
                    return;
                }
                self.set_state(r, ThreadState::Ready, t, None);
                let th = &mut self.rt[r as usize];
                if let Some(w) = waker.filter(|&w| w != r) {
                    if th.wake.is_none() {
                        th.wake = Some(Pending {
                            from: w,
                            send: t,
                            cpu: m.cpu,
                        });
                    }
                }
            }
            Event::NewTask {
                child_tid,
                child_tgid,
                comm,
            } => {
                self.acting(m);
                let known = self.lookup(m.ident, child_tid);
                let alive = known
                    .is_some_and(|r| !matches!(self.rt[r as usize].state, ThreadState::Exited));
                if child_tid != 0 && !alive {
                    let name = comm.as_str().into_owned();
                    let (pre, st) = (ThreadState::NotCreated, ThreadState::Ready);
                    self.register(m.source, child_tid, child_tgid, name, t, pre, st, None);
                }
            }
            Event::Exit { .. } => {
                let r = self.acting(m);
                // exit and exit_group never return: their span ends here.
                self.close_all(r, t, Some(m.cpu), SpanEnd::Exited);
            }
            Event::Rename { comm } => {
                let r = self.acting(m);
                self.threads[r as usize].name = comm.as_str().into_owned();
            }
            Event::Exec { comm } => {
                let r = self.acting(m);
                // The probed functions of the old program are gone with it.
                let th = &mut self.rt[r as usize];
                let stack = std::mem::take(&mut th.stack);
                self.close_stack(r, stack, t, Some(m.cpu), SpanEnd::Exited);
                self.threads[r as usize].name = comm.as_str().into_owned();
            }
        }
    }

    fn sys_exit(&mut self, r: ThreadRef, nr: u32, open: Option<OpenSys>, ret: i64, m: &Merged) {
        let t = m.time;
        let class = sysclass::class(nr);
        let meta = &self.threads[r as usize];
        let proc_ = meta.process;
        let (entered, o) = match open {
            Some(o) => (true, o),
            None => {
                self.stats.syscall_exits_without_entry += 1;
                let o = OpenSys {
                    nr,
                    begin: meta.first_seen.min(t),
                    cpu: m.cpu,
                    fd: None,
                    requested: 0,
                    sock_op: class.sock,
                    conn: None,
                };
                (false, o)
            }
        };
        let (mut new_conn, mut replaced_conn) = (None, None);
        if ret >= 0 {
            let newkey = key(proc_, ret as u32);
            if class.new_fd.is_some() {
                replaced_conn = self.forget_fd(newkey);
            }
            match class.new_fd {
                Some(NewFd::Accepted) => {
                    let id = self.next_conn;
                    self.next_conn = self.next_conn.wrapping_add(1).max(1);
                    self.stats.connections += 1;
                    let e = FdEntry {
                        socket: true,
                        conn: id,
                    };
                    self.fds.insert(newkey, e);
                    let p = Pending {
                        from: r,
                        send: t,
                        cpu: m.cpu,
                    };
                    self.handoffs.insert(id, p);
                    new_conn = Some(id);
                }
                Some(NewFd::Socket) => {
                    let e = FdEntry {
                        socket: true,
                        conn: 0,
                    };
                    self.fds.insert(newkey, e);
                }
                Some(NewFd::Other) | None => {}
            }
        }
        if let Some(fd) = o.fd {
            // (close gave its number up at its entry.)
            if o.sock_op == Some(SockOp::Connect) {
                let e = self.fds.entry(key(proc_, fd as u32));
                e.or_insert(FdEntry {
                    socket: true,
                    conn: 0,
                });
            }
        }
        let bytes_read = if class.reads && ret > 0 {
            ret as u64
        } else {
            0
        };
        let bytes_written = if class.writes && ret > 0 {
            ret as u64
        } else {
            0
        };
        if let Some(c) = o.conn {
            if let Some(p) = self.handoffs.get(&c).copied() {
                if p.from != r {
                    self.stats.handoff_links += 1;
                    self.out.push(Item::Link(Link {
                        kind: LinkKind::Handoff { conn: c },
                        from: p.from,
                        send: p.send,
                        send_cpu: p.cpu,
                        to: r,
                        recv: o.begin.max(p.send),
                        recv_cpu: o.cpu,
                        bytes: bytes_read + bytes_written,
                    }));
                    self.handoffs.remove(&c);
                } else if class.close {
                    self.handoffs.remove(&c);
                }
            }
        }
        self.out.push(Item::Syscall(SyscallSpan {
            thread: r,
            nr,
            begin: o.begin,
            end: t,
            entered,
            cpu: Some(m.cpu),
            fd: o.fd,
            requested: o.requested,
            ret: Some(ret),
            bytes_read,
            bytes_written,
            sock_op: o.sock_op,
            conn: o.conn,
            new_conn,
            replaced_conn,
            end_kind: SpanEnd::Returned,
        }));
    }

    /// The fd number is reused: whatever connection it held is over (a close not seen,
    /// e.g. lost, must not leave the connection pending for ever). Returns that
    /// connection.
    fn forget_fd(&mut self, k: u64) -> Option<u32> {
        let conn = self.fds.remove(&k).map(|e| e.conn).filter(|&c| c != 0)?;
        self.handoffs.remove(&conn);
        Some(conn)
    }

    fn close_sys(&mut self, r: ThreadRef, o: OpenSys, t: u64, cpu: Option<u32>, kind: SpanEnd) {
        if let (Some(c), true) = (o.conn, sysclass::class(o.nr).close) {
            // A pending hand-off holds the output back: the connection is over.
            self.handoffs.remove(&c);
        }
        self.out.push(Item::Syscall(SyscallSpan {
            thread: r,
            nr: o.nr,
            begin: o.begin,
            end: t,
            entered: true,
            cpu,
            fd: o.fd,
            requested: o.requested,
            ret: None,
            bytes_read: 0,
            bytes_written: 0,
            sock_op: o.sock_op,
            conn: o.conn,
            new_conn: None,
            replaced_conn: None,
            end_kind: kind,
        }));
    }

    fn close_stack(
        &mut self,
        r: ThreadRef,
        mut stack: Vec<(u32, u64)>,
        t: u64,
        cpu: Option<u32>,
        kind: SpanEnd,
    ) {
        while let Some((func, begin)) = stack.pop() {
            self.out.push(Item::Func(Span {
                thread: r,
                func,
                begin,
                end: t,
                depth: stack.len() as u32,
                ret: None,
                end_kind: kind,
                cpu,
            }));
        }
        // Give the allocation back, so a thread's stack is allocated once.
        self.rt[r as usize].stack = stack;
    }

    fn close_all(&mut self, r: ThreadRef, t: u64, cpu: Option<u32>, kind: SpanEnd) {
        if let Some(o) = self.rt[r as usize].sys.take() {
            self.close_sys(r, o, t, cpu, kind);
        }
        let stack = std::mem::take(&mut self.rt[r as usize].stack);
        self.close_stack(r, stack, t, cpu, kind);
    }

    fn finish(&mut self) {
        let starts = self.merger.sources().iter().map(|s| s.start);
        let end = starts.fold(self.merger.end_time().max(self.now), u64::max);
        for r in 0..self.rt.len() as ThreadRef {
            self.close_all(r, end, None, SpanEnd::TraceEnded);
            let th = &mut self.rt[r as usize];
            if th.wake.take().is_some() {
                self.stats.unresolved_wakeups += 1;
            }
            if th.since < end {
                let m = &self.threads[r as usize];
                self.out.push(Item::State(StateInterval {
                    thread: r,
                    tid: m.tid,
                    tgid: m.tgid,
                    state: th.state,
                    begin: th.since,
                    end,
                    cpu: th.cpu,
                }));
                th.since = end;
            }
        }
        self.end = Some(end);
    }

    /// Thread and process keys are per [`Source::identity`]: the files of one run share
    /// their threads. Records carry theirs ([`Merged::ident`]); this is for the rest.
    fn ident(&self, source: u32) -> u32 {
        self.merger.sources()[source as usize].identity
    }

    /// The thread `tid` of the files standing as `ident`.
    #[inline]
    fn lookup(&self, ident: u32, tid: u32) -> Option<ThreadRef> {
        if tid == 0 {
            return None;
        }
        self.by_tid.get(&key(ident, tid)).copied()
    }

    /// [`Timeline::lookup`] of a thread running on `cpu`, through the per-CPU cache.
    #[inline(always)]
    fn lookup_on_cpu(&mut self, ident: u32, tid: u32, cpu: u32) -> Option<ThreadRef> {
        let k = key(ident, tid);
        if let Some(&(ck, r)) = self.on_cpu.get(cpu as usize) {
            // (tid 0 is never cached: `lookup` finds nothing for it.)
            if ck == k {
                return Some(r);
            }
        }
        self.lookup_on_cpu_miss(ident, tid, cpu)
    }

    #[inline(never)]
    fn lookup_on_cpu_miss(&mut self, ident: u32, tid: u32, cpu: u32) -> Option<ThreadRef> {
        let k = key(ident, tid);
        let r = self.lookup(ident, tid)?;
        let c = cpu as usize;
        if self.on_cpu.len() <= c {
            self.on_cpu.resize(c + 1, (NO_KEY, 0));
        }
        self.on_cpu[c] = (k, r);
        Some(r)
    }

    /// The thread of a record that only a running, traced thread produces: registers it
    /// at first sight and corrects its state to running on the record's CPU.
    ///
    /// Inlined into every arm of [`Timeline::feed`], with the fast paths of
    /// [`Timeline::lookup_on_cpu`] and [`Timeline::run`]: nearly every record is that of
    /// its CPU's thread, already running there, and calls were a fifth of this path's cost.
    #[inline(always)]
    fn acting(&mut self, m: &Merged) -> ThreadRef {
        let r = match self.lookup_on_cpu(m.ident, m.tid, m.cpu) {
            Some(r) => r,
            None => return self.register_acting(m),
        };
        self.run(r, m.time, m.cpu);
        r
    }

    #[inline(never)]
    fn register_acting(&mut self, m: &Merged) -> ThreadRef {
        let tgid = self.guess_tgid(m.source, m.tid);
        let name = self.late_name(m.source, m.tid);
        let (pre, st) = (ThreadState::Unknown, ThreadState::Running);
        self.register(m.source, m.tid, tgid, name, m.time, pre, st, Some(m.cpu))
    }

    /// Thread `r` runs on `cpu` from `t`: a pending wakeup link is received.
    #[inline(always)]
    fn run(&mut self, r: ThreadRef, t: u64, cpu: u32) {
        let th = &self.rt[r as usize];
        if th.state == ThreadState::Running && th.cpu == Some(cpu) {
            return;
        }
        self.switch_in(r, t, cpu);
    }

    #[inline(never)]
    fn switch_in(&mut self, r: ThreadRef, t: u64, cpu: u32) {
        self.set_state(r, ThreadState::Running, t, Some(cpu));
        if let Some(w) = self.rt[r as usize].wake.take() {
            self.stats.wakeup_links += 1;
            self.out.push(Item::Link(Link {
                kind: LinkKind::Wakeup,
                from: w.from,
                send: w.send,
                send_cpu: w.cpu,
                to: r,
                recv: t.max(w.send),
                recv_cpu: cpu,
                bytes: 0,
            }));
        }
    }

    fn set_state(&mut self, r: ThreadRef, state: ThreadState, t: u64, cpu: Option<u32>) {
        let th = &mut self.rt[r as usize];
        if th.state == state && th.cpu == cpu {
            return;
        }
        // Never end an interval before it began (times of a file may precede its start).
        let t = t.max(th.since);
        if t > th.since {
            let m = &self.threads[r as usize];
            self.out.push(Item::State(StateInterval {
                thread: r,
                tid: m.tid,
                tgid: m.tgid,
                state: th.state,
                begin: th.since,
                end: t,
                cpu: th.cpu,
            }));
        }
        th.state = state;
        th.cpu = cpu;
        th.since = t;
        if let (ThreadState::Running, Some(cpu)) = (state, cpu) {
            self.out.push(Item::OnCpu {
                thread: r,
                time: t,
                cpu,
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn register(
        &mut self,
        source: u32,
        tid: u32,
        tgid: u32,
        name: String,
        t: u64,
        pre: ThreadState,
        state: ThreadState,
        cpu: Option<u32>,
    ) -> ThreadRef {
        let process = self.process_for(source, tgid, &name);
        let r = self.threads.len() as ThreadRef;
        let p = &mut self.processes[process as usize];
        let index_in_process = p.threads;
        p.threads += 1;
        self.threads.push(ThreadMeta {
            source,
            tid,
            tgid,
            process,
            index_in_process,
            name,
            first_seen: t,
        });
        self.rt.push(Rt {
            state,
            since: t,
            cpu,
            stack: Vec::new(),
            sys: None,
            wake: None,
        });
        let k = key(self.ident(source), tid);
        if self.by_tid.insert(k, r).is_some() {
            // A reused tid: its cached thread is the old one.
            for e in &mut self.on_cpu {
                if e.0 == k {
                    *e = (NO_KEY, 0);
                }
            }
        }
        self.stats.threads += 1;
        self.out.push(Item::Thread(r));
        if t > 0 {
            self.out.push(Item::State(StateInterval {
                thread: r,
                tid,
                tgid,
                state: pre,
                begin: 0,
                end: t,
                cpu: None,
            }));
        }
        if let (ThreadState::Running, Some(cpu)) = (state, cpu) {
            self.out.push(Item::OnCpu {
                thread: r,
                time: t,
                cpu,
            });
        }
        r
    }

    fn process_for(&mut self, source: u32, tgid: u32, thread_name: &str) -> u32 {
        if let Some(&p) = self.by_tgid.get(&key(self.ident(source), tgid)) {
            return p;
        }
        let src: &Source = &self.merger.sources()[source as usize];
        let exe = src.processes.iter().find(|p| p.tgid == tgid).map(|p| {
            let base = p.exe.rsplit('/').next().unwrap_or(&p.exe);
            base.to_string()
        });
        let name = exe
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| thread_name.to_string());
        let p = self.processes.len() as u32;
        self.processes.push(ProcessMeta {
            source,
            tgid,
            name,
            threads: 0,
        });
        self.by_tgid.insert(key(self.ident(source), tgid), p);
        p
    }

    /// The process of a thread first seen through its own records: a late thread list
    /// may know it; a one-process recording can only be that process; otherwise a tid
    /// that names a process is its main thread.
    fn guess_tgid(&self, source: u32, tid: u32) -> u32 {
        let src = &self.merger.sources()[source as usize];
        if let Some(i) = src.threads.iter().find(|i| i.tid == tid) {
            return i.tgid;
        }
        if let [only] = src.processes.as_slice() {
            return only.tgid;
        }
        tid
    }

    fn late_name(&self, source: u32, tid: u32) -> String {
        let src = &self.merger.sources()[source as usize];
        match src.threads.iter().find(|i| i.tid == tid) {
            Some(i) => i.name.clone(),
            None => "unknown".to_string(),
        }
    }
}

impl Iterator for Timeline {
    type Item = Result<Item>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}
