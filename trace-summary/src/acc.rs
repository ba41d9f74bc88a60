//! The streaming pass: timeline items in, per-element accumulators out.
//!
//! Everything is indexed by dense slots handed out at first sight (a function of a file,
//! a (thread, system call) pair, a caller -> callee pair), so the per-item work is a few
//! vector indexings and additions: no allocation and no hashing, except for call-graph
//! edges and connection operations (one fast integer hash each).
//!
//! **Where a function's time went.** Every thread carries the cumulative time it has
//! spent in each state up to the end of its last closed state interval (`cum`, `since`).
//! A function entry snapshots the cumulative vector at the entry time, a return takes
//! it again; the difference is the split of the call's wall time into running / ready /
//! blocked / I/O. Entries and most returns happen while the thread runs (the record is
//! its own), so the open interval's state is known then: running since its `OnCpu`. The
//! one exception is a call cut by the end of the trace: the timeline closes the call
//! before the final state interval, so that split waits (`pending`) for the interval.

use std::collections::{BinaryHeap, HashMap};

use trace_merge::sysclass;
use trace_merge::timeline::{
    Item, LinkKind, Span, StateInterval, SyscallSpan, ThreadState, Timeline,
};

use crate::{
    CallEdge, ConcurrencyRow, Connection, ConnectionStats, ErrnoCount, Error, ErrorRule, FileInfo,
    FunctionStats, Histogram, InnerSyscall, Section, SummarizeOptions, Summary, SyscallStats,
    ThreadStats, Window, JSON_SCHEMA,
};

use rustc_hash::FxHashMap as FastMap;

/// The split of a function's time: running, ready, blocked, I/O, other.
const SPLIT: usize = 5;

fn split_index(s: ThreadState) -> usize {
    match s {
        ThreadState::Running => 0,
        ThreadState::Ready => 1,
        ThreadState::Blocked => 2,
        ThreadState::Io => 3,
        _ => 4,
    }
}

fn state_index(s: ThreadState) -> usize {
    match s {
        ThreadState::Unknown => 0,
        ThreadState::NotCreated => 1,
        ThreadState::Running => 2,
        ThreadState::Ready => 3,
        ThreadState::Blocked => 4,
        ThreadState::Io => 5,
        ThreadState::Exited => 6,
    }
}

/// System call numbers below this get a direct slot table per thread; larger (none on
/// x86_64 today) go through a shared map.
const DIRECT_NR: u32 = 512;
/// Most thread tids kept per connection.
const CONN_THREADS: usize = 8;

#[derive(Clone, Default)]
struct InnerAcc {
    nr: u32,
    calls: u64,
    errors: u64,
    ns: u64,
    read: u64,
    written: u64,
}

#[derive(Clone, Default)]
struct FuncAcc {
    calls: u64,
    neg: u64,
    nonzero: u64,
    unfinished: u64,
    inclusive: u64,
    self_ns: u64,
    split: [u64; SPLIT],
    hist: Histogram,
    inner: Vec<InnerAcc>,
}

impl FuncAcc {
    fn merge(&mut self, o: &FuncAcc) {
        self.calls += o.calls;
        self.neg += o.neg;
        self.nonzero += o.nonzero;
        self.unfinished += o.unfinished;
        self.inclusive += o.inclusive;
        self.self_ns += o.self_ns;
        for k in 0..SPLIT {
            self.split[k] += o.split[k];
        }
        self.hist.merge(&o.hist);
        for i in &o.inner {
            let me = self.inner_mut(i.nr);
            me.calls += i.calls;
            me.errors += i.errors;
            me.ns += i.ns;
            me.read += i.read;
            me.written += i.written;
        }
    }

    fn inner_mut(&mut self, nr: u32) -> &mut InnerAcc {
        // A function makes few kinds of system calls: a linear search beats a map.
        let i = match self.inner.iter().position(|x| x.nr == nr) {
            Some(i) => i,
            None => {
                self.inner.push(InnerAcc {
                    nr,
                    ..InnerAcc::default()
                });
                self.inner.len() - 1
            }
        };
        &mut self.inner[i]
    }
}

#[derive(Clone, Default)]
struct ThreadAcc {
    states: [u64; 7],
    voluntary: u64,
    involuntary: u64,
    wakeups_sent: u64,
    wakeups_received: u64,
    migrations: u64,
    syscalls: u64,
    syscall_errors: u64,
    syscall_ns: u64,
    function_calls: u64,
    /// Each wait for a CPU (ready interval), in the scope where it ended.
    waits: Histogram,
}

#[derive(Clone, Default)]
struct SysAcc {
    calls: u64,
    errors: u64,
    /// (errno, count), in order of first appearance (few distinct ones).
    errnos: Vec<(u32, u64)>,
    unfinished: u64,
    read: u64,
    written: u64,
    hist: Histogram,
}

impl SysAcc {
    fn merge(&mut self, o: &SysAcc) {
        self.calls += o.calls;
        self.errors += o.errors;
        for &(e, n) in &o.errnos {
            self.errno(e, n);
        }
        self.unfinished += o.unfinished;
        self.read += o.read;
        self.written += o.written;
        self.hist.merge(&o.hist);
    }

    fn errno(&mut self, e: u32, n: u64) {
        match self.errnos.iter_mut().find(|x| x.0 == e) {
            Some(x) => x.1 += n,
            None => self.errnos.push((e, n)),
        }
    }
}

#[derive(Clone, Default)]
struct EdgeAcc {
    calls: u64,
    total: u64,
    max: u64,
}

/// A finished connection, ordered by service time for the slowest-K heap.
#[derive(PartialEq, Eq)]
struct Slow(Connection);

impl Ord for Slow {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: the heap's top is the fastest, the one to drop first.
        (o.0.service_ns, o.0.id).cmp(&(self.0.service_ns, self.0.id))
    }
}

impl PartialOrd for Slow {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Default)]
struct ConnAcc {
    accepted: u64,
    closed: u64,
    open_at_end: u64,
    read: u64,
    written: u64,
    max_concurrency: u32,
    hist: Histogram,
    /// By concurrency at acceptance: (connections, service ns, bytes).
    by_conc: Vec<(u64, u64, u64)>,
    slowest: BinaryHeap<Slow>,
}

impl ConnAcc {
    fn finish(&mut self, c: &Connection, keep: usize) {
        self.closed += c.closed as u64;
        self.open_at_end += !c.closed as u64;
        self.read += c.bytes_read;
        self.written += c.bytes_written;
        self.hist.record(c.service_ns);
        let k = c.concurrent_at_start as usize;
        if self.by_conc.len() <= k {
            self.by_conc.resize(k + 1, (0, 0, 0));
        }
        let row = &mut self.by_conc[k];
        row.0 += 1;
        row.1 += c.service_ns;
        row.2 += c.bytes_read + c.bytes_written;
        if keep > 0 {
            if self.slowest.len() < keep {
                self.slowest.push(Slow(c.clone()));
            } else if let Some(mut top) = self.slowest.peek_mut() {
                if (c.service_ns, c.id) > (top.0.service_ns, top.0.id) {
                    *top = Slow(c.clone());
                }
            }
        }
    }

    fn merge(&mut self, o: &ConnAcc, keep: usize) {
        self.accepted += o.accepted;
        self.max_concurrency = self.max_concurrency.max(o.max_concurrency);
        self.hist.merge(&o.hist);
        self.closed += o.closed;
        self.open_at_end += o.open_at_end;
        self.read += o.read;
        self.written += o.written;
        if self.by_conc.len() < o.by_conc.len() {
            self.by_conc.resize(o.by_conc.len(), (0, 0, 0));
        }
        for (k, r) in o.by_conc.iter().enumerate() {
            let me = &mut self.by_conc[k];
            me.0 += r.0;
            me.1 += r.1;
            me.2 += r.2;
        }
        for c in o.slowest.iter() {
            self.slowest.push(Slow(c.0.clone()));
            if self.slowest.len() > keep {
                self.slowest.pop();
            }
        }
    }
}

/// The figures of one scope (the whole trace or one window), indexed by slot.
#[derive(Default)]
struct Acc {
    funcs: Vec<FuncAcc>,
    threads: Vec<ThreadAcc>,
    sys: Vec<SysAcc>,
    edges: Vec<EdgeAcc>,
    /// Per file.
    conns: Vec<ConnAcc>,
}

/// Grows `v` to hold index `i` (windows see slots in any order).
#[inline]
fn at<T: Default>(v: &mut Vec<T>, i: u32) -> &mut T {
    let i = i as usize;
    if i >= v.len() {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}

#[derive(Clone, Copy)]
struct Frame {
    slot: u32,
    begin: u64,
    /// Cumulative state time of the thread at entry (None: not known, see `split`).
    at: [u64; SPLIT],
    /// Wall time of probed callees that returned.
    child_ns: u64,
    /// No activation of the same function below it on the stack.
    outer: bool,
}

#[derive(Clone, Copy)]
struct PendingSplit {
    slot: u32,
    window: Option<u32>,
    at: [u64; SPLIT],
    end: u64,
}

struct ThreadRt {
    source: u32,
    process: u32,
    tid: u32,
    tgid: u32,
    /// Cumulative time per split state up to `since`.
    cum: [u64; SPLIT],
    /// End of the last closed state interval: the open one began here.
    since: u64,
    /// The open interval is known to be running (an `OnCpu` came after the last close).
    running: bool,
    last_state: Option<ThreadState>,
    last_cpu: Option<u32>,
    stack: Vec<Frame>,
    /// System call number -> sys slot + 1 (0: none yet); allocated at the first call.
    sys_slots: Vec<u32>,
    pending: Vec<PendingSplit>,
}

impl ThreadRt {
    /// Cumulative time per state at `t` (not before `since`), when the open state is known.
    #[inline]
    fn cum_at(&self, t: u64) -> Option<[u64; SPLIT]> {
        let mut f = self.cum;
        if t > self.since {
            if !self.running {
                return None;
            }
            f[0] += t - self.since;
        }
        Some(f)
    }
}

struct OpenConn {
    file: u32,
    process: u32,
    tgid: u32,
    accepted: u64,
    last_op: u64,
    read: u64,
    written: u64,
    ops: u64,
    conc: u32,
    threads: [u32; CONN_THREADS],
    nthreads: u8,
}

struct Pass {
    window_ns: Option<u64>,
    keep_conns: usize,
    total: Acc,
    windows: Vec<Acc>,
    rt: Vec<ThreadRt>,
    /// Per source file: probe id -> function slot + 1.
    func_slots: Vec<Vec<u32>>,
    /// Function slot -> (source, probe id).
    func_meta: Vec<(u32, u32)>,
    /// Sys slot -> (thread, nr).
    sys_meta: Vec<(u32, u32)>,
    big_nr: FastMap<(u32, u32), u32>,
    edge_slots: FastMap<(u32, u32), u32>,
    /// Edge slot -> (caller function slot, callee function slot).
    edge_meta: Vec<(u32, u32)>,
    open_conns: FastMap<u32, OpenConn>,
    /// Connections in service per process.
    in_service: Vec<u32>,
}

/// Runs the pass over `tl` and builds the summary.
pub(crate) fn run(tl: Timeline, opts: &SummarizeOptions) -> Result<Summary, Error> {
    let sources = tl.merger().sources().len();
    let mut p = Pass {
        window_ns: opts.window_ns.filter(|&w| w > 0),
        keep_conns: opts.max_connections,
        total: Acc::default(),
        windows: Vec::new(),
        rt: Vec::new(),
        func_slots: vec![Vec::new(); sources],
        func_meta: Vec::new(),
        sys_meta: Vec::new(),
        big_nr: FastMap::default(),
        edge_slots: FastMap::default(),
        edge_meta: Vec::new(),
        open_conns: FastMap::default(),
        in_service: Vec::new(),
    };
    p.total.conns.resize_with(sources, ConnAcc::default);
    let (tl, _) = trace_merge::feed(tl, u64::MAX, &mut p)?;
    let end = tl.end().unwrap_or(tl.now());
    p.finish(end);
    Ok(build(&p, &tl, end, opts))
}

impl trace_merge::Consumer for Pass {
    type Error = Error;

    #[inline]
    fn item(&mut self, tl: &Timeline, item: Item) -> Result<(), Error> {
        let p = self;
        match item {
            Item::Thread(r) => {
                let m = tl.thread(r);
                p.thread(r, m.source, m.process, (m.tid, m.tgid));
            }
            Item::State(s) => p.state(&s),
            Item::OnCpu { thread, time, cpu } => p.on_cpu(thread, time, cpu),
            Item::FuncEntry {
                thread, time, func, ..
            } => p.func_entry(thread, time, func),
            Item::Func(span) => p.func(&span),
            Item::SyscallEntry(_) => {}
            Item::Syscall(s) => p.syscall(&s),
            Item::Link(l) => {
                if l.kind == LinkKind::Wakeup {
                    p.each(l.send, |a| at(&mut a.threads, l.from).wakeups_sent += 1);
                    p.each(l.recv, |a| at(&mut a.threads, l.to).wakeups_received += 1);
                }
            }
        }
        Ok(())
    }
}

impl Pass {
    fn window_of(&self, t: u64) -> Option<u32> {
        self.window_ns.map(|w| (t / w) as u32)
    }

    fn window(&mut self, w: u32) -> &mut Acc {
        at(&mut self.windows, w)
    }

    /// Applies `f` to the whole-trace figures and to those of the window holding `t`.
    #[inline]
    fn each(&mut self, t: u64, f: impl Fn(&mut Acc)) {
        f(&mut self.total);
        if let Some(w) = self.window_of(t) {
            f(self.window(w));
        }
    }

    fn thread(&mut self, r: u32, source: u32, process: u32, (tid, tgid): (u32, u32)) {
        debug_assert_eq!(r as usize, self.rt.len());
        self.rt.push(ThreadRt {
            source,
            process,
            tid,
            tgid,
            cum: [0; SPLIT],
            since: 0,
            running: false,
            last_state: None,
            last_cpu: None,
            stack: Vec::new(),
            sys_slots: Vec::new(),
            pending: Vec::new(),
        });
        at(&mut self.total.threads, r);
    }

    #[inline(always)]
    fn state(&mut self, s: &StateInterval) {
        let r = s.thread as usize;
        let d = s.end - s.begin;
        let si = split_index(s.state);
        let th = &mut self.rt[r];
        // Calls cut by the trace's end waited for this interval to know their split.
        if !th.pending.is_empty() {
            let mut pend = std::mem::take(&mut th.pending);
            let cum = th.cum;
            for q in pend.drain(..) {
                let mut f = cum;
                f[si] += q.end.clamp(s.begin, s.end) - s.begin;
                self.add_split(q.slot, q.window, &q.at, &f);
            }
            self.rt[r].pending = pend;
        }
        let th = &mut self.rt[r];
        th.cum[si] += d;
        th.since = s.end;
        th.running = false;
        // A switch is an end of running: into sleep (voluntary) or still runnable.
        let (vol, invol) = match (th.last_state, s.state) {
            (Some(ThreadState::Running), ThreadState::Blocked | ThreadState::Io) => (1, 0),
            (Some(ThreadState::Running), ThreadState::Ready) => (0, 1),
            _ => (0, 0),
        };
        th.last_state = Some(s.state);
        let st = state_index(s.state);
        let ta = &mut self.total.threads[r];
        ta.states[st] += d;
        ta.voluntary += vol;
        ta.involuntary += invol;
        if s.state == ThreadState::Ready {
            ta.waits.record(d);
            if let Some(w) = self.window_of(s.end) {
                at(&mut self.window(w).threads, r as u32).waits.record(d);
            }
        }
        if let Some(w) = self.window_ns {
            // State time is split exactly at window boundaries.
            let mut t = s.begin;
            while t < s.end {
                let wi = t / w;
                let stop = ((wi + 1) * w).min(s.end);
                let a = at(&mut self.window(wi as u32).threads, r as u32);
                a.states[st] += stop - t;
                if t == s.begin {
                    a.voluntary += vol;
                    a.involuntary += invol;
                }
                t = stop;
            }
        }
    }

    #[inline(always)]
    fn on_cpu(&mut self, r: u32, time: u64, cpu: u32) {
        let th = &mut self.rt[r as usize];
        th.running = true;
        let migrated = th.last_cpu.is_some_and(|c| c != cpu);
        th.last_cpu = Some(cpu);
        if migrated {
            self.each(time, |a| at(&mut a.threads, r).migrations += 1);
        }
    }

    fn func_slot(&mut self, source: u32, func: u32) -> u32 {
        let table = &mut self.func_slots[source as usize];
        if let Some(&s) = table.get(func as usize) {
            if s != 0 {
                return s - 1;
            }
        }
        let slot = self.func_meta.len() as u32;
        self.func_meta.push((source, func));
        // Probe ids are dense from 1; a wild id only costs this table's size once.
        if table.len() <= func as usize {
            table.resize(func as usize + 1, 0);
        }
        table[func as usize] = slot + 1;
        slot
    }

    #[inline(always)]
    fn func_entry(&mut self, r: u32, time: u64, func: u32) {
        let source = self.rt[r as usize].source;
        let slot = self.func_slot(source, func);
        let th = &mut self.rt[r as usize];
        // Entries happen while the thread runs; if not known, count from the last close
        // (the gap then shows as `other`, never as a wrong state).
        let at = th.cum_at(time).unwrap_or(th.cum);
        let outer = !th.stack.iter().any(|f| f.slot == slot);
        th.stack.push(Frame {
            slot,
            begin: time,
            at,
            child_ns: 0,
            outer,
        });
    }

    fn add_split(
        &mut self,
        slot: u32,
        window: Option<u32>,
        from: &[u64; SPLIT],
        to: &[u64; SPLIT],
    ) {
        let mut d = [0u64; SPLIT];
        for k in 0..SPLIT {
            d[k] = to[k].saturating_sub(from[k]);
        }
        let add = |f: &mut FuncAcc| f.split.iter_mut().zip(&d).for_each(|(x, y)| *x += y);
        add(at(&mut self.total.funcs, slot));
        if let Some(w) = window {
            add(at(&mut self.window(w).funcs, slot));
        }
    }

    #[inline(always)]
    fn func(&mut self, span: &Span) {
        let r = span.thread as usize;
        let th = &mut self.rt[r];
        // The timeline closes frames innermost first: the top is this span's.
        th.stack.truncate(span.depth as usize + 1);
        let Some(fr) = th.stack.pop() else {
            return;
        };
        let dur = span.end.saturating_sub(fr.begin);
        let self_ns = dur.saturating_sub(fr.child_ns);
        let parent = th.stack.last_mut().map(|p| {
            p.child_ns += dur;
            p.slot
        });
        let to = th.cum_at(span.end);
        let window = self.window_of(span.end);
        // Like inclusive time, a recursive function's split is its outermost activation's.
        match to {
            _ if !fr.outer => {}
            Some(to) => self.add_split(fr.slot, window, &fr.at, &to),
            None => self.rt[r].pending.push(PendingSplit {
                slot: fr.slot,
                window,
                at: fr.at,
                end: span.end,
            }),
        }
        let (neg, nonzero, unfinished) = match span.ret {
            Some(v) => ((v as i64) < 0, v != 0, false),
            None => (false, false, true),
        };
        let slot = fr.slot;
        let inclusive = if fr.outer { dur } else { 0 };
        let edge = parent.map(|p| self.edge_slot(p, slot));
        self.each(span.end, |a| {
            let f = at(&mut a.funcs, slot);
            f.calls += 1;
            f.neg += neg as u64;
            f.nonzero += nonzero as u64;
            f.unfinished += unfinished as u64;
            f.hist.record(dur);
            f.inclusive += inclusive;
            f.self_ns += self_ns;
            at(&mut a.threads, r as u32).function_calls += 1;
            if let Some(e) = edge {
                let e = at(&mut a.edges, e);
                e.calls += 1;
                e.total += dur;
                e.max = e.max.max(dur);
            }
        });
    }

    fn edge_slot(&mut self, caller: u32, callee: u32) -> u32 {
        let n = self.edge_meta.len() as u32;
        let s = *self.edge_slots.entry((caller, callee)).or_insert(n);
        if s == n {
            self.edge_meta.push((caller, callee));
        }
        s
    }

    fn sys_slot(&mut self, r: u32, nr: u32) -> u32 {
        let next = self.sys_meta.len() as u32;
        let th = &mut self.rt[r as usize];
        if nr < DIRECT_NR {
            if th.sys_slots.is_empty() {
                th.sys_slots = vec![0; DIRECT_NR as usize];
            }
            let s = &mut th.sys_slots[nr as usize];
            if *s != 0 {
                return *s - 1;
            }
            *s = next + 1;
        } else {
            let s = *self.big_nr.entry((r, nr)).or_insert(next);
            if s != next {
                return s;
            }
        }
        self.sys_meta.push((r, nr));
        next
    }

    #[inline(always)]
    fn syscall(&mut self, s: &SyscallSpan) {
        let r = s.thread;
        let slot = self.sys_slot(r, s.nr);
        let dur = if s.entered {
            s.end.saturating_sub(s.begin)
        } else {
            0
        };
        let errno = match s.ret {
            Some(v) if (-4095..0).contains(&v) => Some((-v) as u32),
            _ => None,
        };
        let (read, written) = (s.bytes_read, s.bytes_written);
        let entered = s.entered;
        let unfinished = s.ret.is_none();
        self.each(s.end, |a| {
            let x = at(&mut a.sys, slot);
            x.calls += 1;
            if let Some(e) = errno {
                x.errors += 1;
                x.errno(e, 1);
            }
            x.unfinished += unfinished as u64;
            x.read += read;
            x.written += written;
            if entered {
                x.hist.record(dur);
            }
            let t = at(&mut a.threads, r);
            t.syscalls += 1;
            t.syscall_errors += errno.is_some() as u64;
            t.syscall_ns += dur;
        });
        // Every function on the stack made it (once per function, for recursion).
        let window = self.window_of(s.end);
        for i in 0..self.rt[r as usize].stack.len() {
            let fr = self.rt[r as usize].stack[i];
            if !fr.outer {
                continue;
            }
            let add = |f: &mut FuncAcc| {
                let x = f.inner_mut(s.nr);
                x.calls += 1;
                x.errors += errno.is_some() as u64;
                x.ns += dur;
                x.read += read;
                x.written += written;
            };
            add(at(&mut self.total.funcs, fr.slot));
            if let Some(w) = window {
                add(at(&mut self.window(w).funcs, fr.slot));
            }
        }
        self.connection(s);
    }

    fn connection(&mut self, s: &SyscallSpan) {
        let th = &self.rt[s.thread as usize];
        let (process, file, tid, tgid) = (th.process, th.source, th.tid, th.tgid);
        if let Some(old) = s.replaced_conn {
            let last = self.open_conns.get(&old).map_or(s.end, |c| c.last_op);
            self.end_conn(old, last, false);
        }
        if let Some(id) = s.new_conn {
            if self.in_service.len() <= process as usize {
                self.in_service.resize(process as usize + 1, 0);
            }
            self.in_service[process as usize] += 1;
            let conc = self.in_service[process as usize];
            let mut threads = [0; CONN_THREADS];
            threads[0] = tid;
            self.open_conns.insert(
                id,
                OpenConn {
                    file,
                    process,
                    tgid,
                    accepted: s.end,
                    last_op: s.end,
                    read: 0,
                    written: 0,
                    ops: 0,
                    conc,
                    threads,
                    nthreads: 1,
                },
            );
            self.each(s.end, |a| {
                at(&mut a.conns, file).accepted += 1;
                let c = at(&mut a.conns, file);
                c.max_concurrency = c.max_concurrency.max(conc);
            });
        }
        let Some(id) = s.conn else {
            return;
        };
        if let Some(c) = self.open_conns.get_mut(&id) {
            c.ops += 1;
            c.read += s.bytes_read;
            c.written += s.bytes_written;
            c.last_op = s.end;
            let n = c.nthreads as usize;
            if n < CONN_THREADS && !c.threads[..n].contains(&tid) {
                c.threads[n] = tid;
                c.nthreads += 1;
            }
            if sysclass::class(s.nr).close {
                self.end_conn(id, s.end, true);
            }
        }
    }

    fn end_conn(&mut self, id: u32, end: u64, closed: bool) {
        let Some(c) = self.open_conns.remove(&id) else {
            return;
        };
        if let Some(n) = self.in_service.get_mut(c.process as usize) {
            *n = n.saturating_sub(1);
        }
        let conn = Connection {
            id,
            file: c.file,
            tgid: c.tgid,
            accepted_ns: c.accepted,
            service_ns: end.saturating_sub(c.accepted),
            closed,
            bytes_read: c.read,
            bytes_written: c.written,
            operations: c.ops,
            concurrent_at_start: c.conc,
            threads: c.threads[..c.nthreads as usize].to_vec(),
            flags: Vec::new(),
        };
        let keep = self.keep_conns;
        self.each(end, |a| at(&mut a.conns, c.file).finish(&conn, keep));
    }

    fn finish(&mut self, end: u64) {
        // Splits still waiting had no interval after them: the thread was at `since`.
        for r in 0..self.rt.len() {
            let pend = std::mem::take(&mut self.rt[r].pending);
            for q in pend {
                let f = self.rt[r].cum;
                self.add_split(q.slot, q.window, &q.at, &f);
            }
        }
        let mut open: Vec<u32> = self.open_conns.keys().copied().collect();
        open.sort_unstable();
        for id in open {
            self.end_conn(id, end, false);
        }
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn func_stats(
    name: &str,
    binary: &str,
    source: Option<String>,
    file: Option<u32>,
    a: &FuncAcc,
    duration: u64,
    rule: ErrorRule,
) -> FunctionStats {
    let h = &a.hist;
    let mut syscalls: Vec<InnerSyscall> = (a.inner.iter())
        .map(|i| InnerSyscall {
            name: sysclass::name(i.nr).into_owned(),
            nr: i.nr,
            calls: i.calls,
            errors: i.errors,
            total_ns: i.ns,
            bytes_read: i.read,
            bytes_written: i.written,
        })
        .collect();
    syscalls.sort_by(|x, y| y.total_ns.cmp(&x.total_ns).then(x.nr.cmp(&y.nr)));
    let mut f = FunctionStats {
        name: name.to_string(),
        binary: binary.to_string(),
        source,
        file,
        calls: a.calls,
        errors: 0,
        errors_negative: a.neg,
        errors_nonzero: a.nonzero,
        unfinished: a.unfinished,
        inclusive_ns: a.inclusive,
        self_ns: a.self_ns,
        running_ns: a.split[0],
        ready_ns: a.split[1],
        blocked_ns: a.split[2],
        io_ns: a.split[3],
        mean_ns: h.mean(),
        min_ns: h.min(),
        p50_ns: h.quantile(0.5),
        p90_ns: h.quantile(0.9),
        p99_ns: h.quantile(0.99),
        max_ns: h.max(),
        session_pct: pct(a.inclusive, duration),
        syscalls,
        flags: Vec::new(),
        hist: h.clone(),
    };
    f.errors = f.errors_for(rule);
    f
}

fn sys_stats(
    nr: u32,
    file: Option<u32>,
    thread: Option<(u32, String)>,
    a: &SysAcc,
) -> SyscallStats {
    let h = &a.hist;
    let mut errnos: Vec<ErrnoCount> = (a.errnos.iter())
        .map(|&(e, n)| ErrnoCount {
            errno: e,
            name: tracer_abi::errno::name(e).map_or_else(|| format!("errno {e}"), str::to_string),
            count: n,
        })
        .collect();
    errnos.sort_by(|x, y| y.count.cmp(&x.count).then(x.errno.cmp(&y.errno)));
    let (tid, tname) = match thread {
        Some((t, n)) => (Some(t), Some(n)),
        None => (None, None),
    };
    SyscallStats {
        name: sysclass::name(nr).into_owned(),
        nr,
        file,
        tid,
        thread: tname,
        calls: a.calls,
        errors: a.errors,
        errnos,
        unfinished: a.unfinished,
        total_ns: h.sum(),
        mean_ns: h.mean(),
        p50_ns: h.quantile(0.5),
        p90_ns: h.quantile(0.9),
        p99_ns: h.quantile(0.99),
        max_ns: h.max(),
        bytes_read: a.read,
        bytes_written: a.written,
        flags: Vec::new(),
        hist: h.clone(),
    }
}

fn conn_stats(a: &ConnAcc) -> ConnectionStats {
    let h = &a.hist;
    let mut conns: Vec<Connection> = a.slowest.iter().map(|s| s.0.clone()).collect();
    conns.sort_by(|x, y| y.service_ns.cmp(&x.service_ns).then(x.id.cmp(&y.id)));
    let by_concurrency = (a.by_conc.iter().enumerate())
        .filter(|(_, r)| r.0 > 0)
        .map(|(k, &(n, svc, bytes))| ConcurrencyRow {
            concurrency: k as u32,
            connections: n,
            service_ns: svc,
            mean_service_ns: svc / n.max(1),
            bytes,
            ns_per_byte: if bytes == 0 {
                0.0
            } else {
                svc as f64 / bytes as f64
            },
        })
        .collect();
    ConnectionStats {
        accepted: a.accepted,
        closed: a.closed,
        open_at_end: a.open_at_end,
        bytes_read: a.read,
        bytes_written: a.written,
        service_total_ns: h.sum(),
        service_mean_ns: h.mean(),
        service_p50_ns: h.quantile(0.5),
        service_p90_ns: h.quantile(0.9),
        service_p99_ns: h.quantile(0.99),
        service_max_ns: h.max(),
        max_concurrency: a.max_concurrency,
        by_concurrency,
        connections: conns,
        flags: Vec::new(),
        hist: h.clone(),
    }
}

/// Names and metadata the accumulators' slots stand for.
struct Names<'a> {
    tl: &'a Timeline,
    p: &'a Pass,
}

impl Names<'_> {
    /// (name, binary, source) of a function slot.
    fn func(&self, slot: u32) -> (String, String, Option<String>) {
        let (src, id) = self.p.func_meta[slot as usize];
        match self.tl.merger().sources()[src as usize].probe(id) {
            Some(p) => (p.name.clone(), p.binary.clone(), p.source.clone()),
            None => (format!("function_{id}"), String::new(), None),
        }
    }
}

/// Builds a section from the accumulators of one scope. `file`: only that file's
/// elements, with per-file keys; `None`: all files, functions and system calls merged
/// by name.
fn section(
    acc: &Acc,
    n: &Names,
    file: Option<u32>,
    duration: u64,
    opts: &SummarizeOptions,
) -> Section {
    let tl = n.tl;
    let p = n.p;
    let keep = |source: u32| file.is_none_or(|f| f == source);
    let rule = opts.error_if;

    // Functions: merged by (name, binary) across files, in slot order.
    let names: Vec<(String, String, Option<String>)> =
        (0..p.func_meta.len() as u32).map(|s| n.func(s)).collect();
    let mut funcs: Vec<(usize, FuncAcc)> = Vec::new();
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    for (slot, a) in acc.funcs.iter().enumerate() {
        let src = p.func_meta[slot].0;
        if a.calls == 0 || !keep(src) {
            continue;
        }
        let (name, bin, _) = &names[slot];
        match index.get(&(name.as_str(), bin.as_str())) {
            Some(&i) => funcs[i].1.merge(a),
            None => {
                index.insert((name, bin), funcs.len());
                funcs.push((slot, a.clone()));
            }
        }
    }
    let functions = (funcs.iter())
        .map(|(slot, a)| {
            let (name, bin, source) = &names[*slot];
            func_stats(name, bin, source.clone(), file, a, duration, rule)
        })
        .collect();

    // Threads.
    let mut threads = Vec::new();
    for (r, a) in acc.threads.iter().enumerate() {
        let m = tl.thread(r as u32);
        if !keep(m.source) {
            continue;
        }
        let s = &a.states;
        threads.push(ThreadStats {
            file: m.source,
            tid: m.tid,
            tgid: m.tgid,
            process: tl.processes()[m.process as usize].name.clone(),
            name: m.name.clone(),
            unknown_ns: s[0],
            not_created_ns: s[1],
            running_ns: s[2],
            ready_ns: s[3],
            blocked_ns: s[4],
            io_ns: s[5],
            exited_ns: s[6],
            voluntary_switches: a.voluntary,
            involuntary_switches: a.involuntary,
            wakeups_sent: a.wakeups_sent,
            wakeups_received: a.wakeups_received,
            migrations: a.migrations,
            syscalls: a.syscalls,
            syscall_errors: a.syscall_errors,
            syscall_ns: a.syscall_ns,
            function_calls: a.function_calls,
            ready_waits: Some(a.waits.count()),
            ready_p99_ns: Some(a.waits.quantile(0.99)),
            ready_max_ns: Some(a.waits.max()),
            flags: Vec::new(),
        });
    }

    // System calls: per thread, and merged by number.
    let mut by_thread = Vec::new();
    let mut merged: Vec<Option<SysAcc>> = Vec::new();
    for (slot, a) in acc.sys.iter().enumerate() {
        let (r, nr) = p.sys_meta[slot];
        let m = tl.thread(r);
        if a.calls == 0 || !keep(m.source) {
            continue;
        }
        let who = Some((m.tid, m.name.clone()));
        by_thread.push(sys_stats(nr, Some(m.source), who, a));
        match at(&mut merged, nr) {
            Some(x) => x.merge(a),
            slot @ None => *slot = Some(a.clone()),
        }
    }
    let syscalls = (merged.iter().enumerate())
        .filter_map(|(nr, a)| a.as_ref().map(|a| sys_stats(nr as u32, file, None, a)))
        .collect();

    // Connections.
    let mut conns = ConnAcc::default();
    for (f, c) in acc.conns.iter().enumerate() {
        if keep(f as u32) {
            conns.merge(c, opts.max_connections);
        }
    }

    // Call graph, merged by names.
    let mut edges: Vec<CallEdge> = Vec::new();
    let mut eindex: HashMap<(&str, &str), usize> = HashMap::new();
    for (slot, a) in acc.edges.iter().enumerate() {
        let (caller, callee) = p.edge_meta[slot];
        if a.calls == 0 || !keep(p.func_meta[caller as usize].0) {
            continue;
        }
        let (cn, ce) = (&names[caller as usize].0, &names[callee as usize].0);
        let i = *eindex.entry((cn, ce)).or_insert_with(|| {
            edges.push(CallEdge {
                caller: cn.clone(),
                callee: ce.clone(),
                file,
                ..CallEdge::default()
            });
            edges.len() - 1
        });
        let e = &mut edges[i];
        e.calls += a.calls;
        e.total_ns += a.total;
        e.max_ns = e.max_ns.max(a.max);
    }
    for e in &mut edges {
        e.mean_ns = e.total_ns / e.calls.max(1);
    }

    Section {
        duration_ns: duration,
        functions,
        threads,
        syscalls,
        syscalls_by_thread: by_thread,
        connections: conn_stats(&conns),
        call_graph: edges,
    }
}

fn build(p: &Pass, tl: &Timeline, end: u64, opts: &SummarizeOptions) -> Summary {
    let n = Names { tl, p };
    let sources = tl.merger().sources();
    let files: Vec<FileInfo> = (sources.iter())
        .map(|s| FileInfo {
            path: s.path.display().to_string(),
            hostname: s.header.hostname.clone(),
            start_ns: s.start,
            lost: s.lost(),
            truncated: s.truncated_at.is_some(),
        })
        .collect();
    let per_file = (0..sources.len() as u32)
        .map(|f| {
            section(
                &p.total,
                &n,
                Some(f),
                end.saturating_sub(sources[f as usize].start),
                opts,
            )
        })
        .collect();
    let windows = match p.window_ns {
        Some(w) => (p.windows.iter().enumerate())
            .map(|(i, a)| {
                let start = i as u64 * w;
                let stop = (start + w).min(end.max(start));
                let mut section = section(a, &n, None, stop - start, opts);
                // A window holds every thread only if it did something in it.
                section.threads.retain(|t| {
                    t.running_ns + t.ready_ns + t.blocked_ns + t.io_ns + t.syscalls > 0
                });
                Window {
                    start_ns: start,
                    end_ns: stop,
                    section,
                }
            })
            .collect(),
        None => Vec::new(),
    };
    let mut notes = Vec::new();
    let lost: u64 = files.iter().map(|f| f.lost).sum();
    if lost > 0 {
        notes.push(format!(
            "{lost} records lost by the kernel: figures are lower bounds"
        ));
    }
    for f in files.iter().filter(|f| f.truncated) {
        notes.push(format!(
            "{} is truncated: its last records are missing",
            f.path
        ));
    }
    let st = tl.stats();
    if st.orphan_func_exits > 0 {
        notes.push(format!(
            "{} function returns without entry ignored",
            st.orphan_func_exits
        ));
    }
    let late = tl.merger().stats().late;
    if late > 0 {
        notes.push(format!(
            "{late} records arrived too late to be ordered exactly"
        ));
    }
    Summary {
        schema: JSON_SCHEMA,
        files,
        records: st.records,
        lost,
        total: section(&p.total, &n, None, end, opts),
        per_file,
        window_ns: p.window_ns,
        windows,
        notes,
    }
}
