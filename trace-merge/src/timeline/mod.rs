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

mod calls;
mod items;
mod syscalls;
mod threads;

use trace_file::{record::Comm, Event};

pub use items::*;

use crate::error::Result;
use crate::merge::{Merged, Merger, Source};
use crate::sysclass::{self, NewFd, SockOp};

/// A thread of the merged trace: an index into [`Timeline::threads`], dense, in order of
/// first appearance. (A tid alone is ambiguous across hosts and after tid reuse.)
pub type ThreadRef = u32;

/// The maps of the per-record path: keyed by small integers (tids, fds), for which the
/// default SipHash costs more than the rest of the per-record work.
type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// One key for a pair of ids (a file's identity and a tid, a process and an fd).
fn key(a: u32, b: u32) -> u64 {
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
    /// Still in the state the recorder found it in at attach.
    seeded: bool,
    stack: Vec<OpenCall>,
    sys: Option<OpenSys>,
    wake: Option<Pending>,
}

/// A native call under way, on its thread's stack.
#[derive(Clone, Copy, Default)]
struct OpenCall {
    func: u32,
    begin: u64,
    /// The stack pointer at its entry, when its returns are probed at their instructions
    /// and paired with it by frame (0: by a uretprobe).
    sp: u64,
    /// Its program switches stacks: it pairs by its exact frame only, and no other frame
    /// says whether it is gone (they may be on other stacks).
    exact: bool,
}

/// A Go call under way, on its goroutine's stack.
#[derive(Clone, Copy)]
struct GoCall {
    func: u32,
    begin: u64,
    /// The thread that entered it.
    thread: ThreadRef,
    /// Where its frame is on the goroutine's stack (0: unknown, files before version 4).
    height: u32,
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
    /// Go calls under way, by (file identity, goroutine).
    goroutines: FastMap<(u32, u64), Vec<GoCall>>,
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
            goroutines: FastMap::default(),
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
                let r = t.register(s as u32, tid, tgid, name, start, pre, state, None);
                t.rt[r as usize].seeded = true;
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
        match m.event {
            Event::FuncEntry { func } => self.func_entry(m, func),
            Event::FuncExit { func, ret } => self.func_exit(m, func, ret),
            Event::SysEnter { nr, arg0, arg2 } => self.sys_enter(m, nr, arg0, arg2),
            Event::SysExit { nr, ret } => self.sys_exit_record(m, nr, ret),
            Event::Switch {
                next_tid,
                prev_state,
            } => self.switch(m, next_tid, prev_state),
            Event::Wakeup { wakee, .. } => self.wakeup(m, wakee),
            Event::NewTask {
                child_tid,
                child_tgid,
                comm,
            } => self.new_task(m, child_tid, child_tgid, comm),
            Event::Exit { .. } => {
                let r = self.acting(m);
                // exit and exit_group never return: their span ends here.
                self.close_all(r, m.time, Some(m.cpu), SpanEnd::Exited);
            }
            Event::Rename { comm } => {
                let r = self.acting(m);
                self.threads[r as usize].name = comm.as_str().into_owned();
            }
            Event::Exec { comm } => self.exec(m, comm),
            Event::Usdt { probe, nargs, args } => self.usdt(m, probe, nargs, args),
            Event::GoEntry { func, g, height } => self.go_entry(m, func, g, height),
            Event::GoExit {
                func,
                ret,
                g,
                height,
            } => self.go_exit(m, func, ret, g, height),
            Event::Sample { stack, period } => self.sample(m, stack, period, true),
            Event::BlockStack { stack } => self.sample(m, stack, 0, false),
            Event::FrameEntry {
                func,
                sp,
                switching,
            } => self.frame_entry(m, func, sp, switching),
            Event::FrameExit { func, sp, ret } => self.frame_exit(m, func, sp, ret),
            Event::GoStatus { g, new, .. } => {
                let r = self.acting(m);
                self.out.push(Item::GoStatus(GoStatusChange {
                    thread: r,
                    time: m.time,
                    g,
                    status: new & !tracer_abi::go_status::SCAN,
                }));
            }
        }
    }

    fn sample(&mut self, m: &Merged, stack: u32, period: u64, on_cpu: bool) {
        let r = self.acting(m);
        self.out.push(Item::Sample(Sample {
            thread: r,
            time: m.time,
            cpu: m.cpu,
            source: m.source,
            stack,
            on_cpu,
            period,
        }));
    }

    fn finish(&mut self) {
        let starts = self.merger.sources().iter().map(|s| s.start);
        let end = starts.fold(self.merger.end_time().max(self.now), u64::max);
        self.close_goroutines(end);
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
}

impl Iterator for Timeline {
    type Item = Result<Item>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}
