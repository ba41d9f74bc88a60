//! The streaming pass: timeline items in, per-slot accumulators out, for the whole trace
//! and for the window each item falls in.
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

use rustc_hash::FxHashMap as FastMap;
use trace_merge::merge::Source;
use trace_merge::timeline::{
    Item, LinkKind, Span, StateInterval, SyscallSpan, ThreadState, Timeline,
};

use super::conn::{ConnAcc, OpenConn};
use super::scope::{at, split_index, state_index, Acc, FuncAcc, SPLIT};
use crate::{Error, SummarizeOptions};

/// System call numbers below this get a direct slot table per thread; larger (none on
/// x86_64 today) go through a shared map.
const DIRECT_NR: u32 = 512;

/// Most windows a trace is cut into: a table per window past that is too long to read,
/// and every thread's figures in every window too much to hold. A record damaged into the
/// far future would otherwise ask for windows up to it.
pub(super) const MAX_WINDOWS: u64 = 10_000;

/// A probed function on a thread's stack.
#[derive(Clone, Copy)]
struct Frame {
    slot: u32,
    begin: u64,
    /// Cumulative state time of the thread at entry.
    at: [u64; SPLIT],
    /// Wall time of probed callees that returned.
    child_ns: u64,
    /// No activation of the same function below it on the stack.
    outer: bool,
}

/// A call whose split waits for the thread's next state interval (cut by the trace end).
#[derive(Clone, Copy)]
struct PendingSplit {
    slot: u32,
    window: Option<u32>,
    at: [u64; SPLIT],
    end: u64,
}

/// What the pass knows of a thread between its items.
pub(super) struct ThreadRt {
    pub(super) source: u32,
    pub(super) process: u32,
    pub(super) tid: u32,
    pub(super) tgid: u32,
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

/// The pass's state: the accumulators, the threads' stacks and the slot tables.
pub(super) struct Pass {
    pub(super) window_ns: Option<u64>,
    pub(super) keep_conns: usize,
    pub(super) total: Acc,
    pub(super) windows: Vec<Acc>,
    /// Some time fell past [`MAX_WINDOWS`] windows (and counted in the totals only).
    pub(super) past_windows: bool,
    pub(super) rt: Vec<ThreadRt>,
    /// Per source file: probe id -> function slot + 1, for ids up to its probe table's
    /// length (ids are dense from 1).
    func_slots: Vec<Vec<u32>>,
    /// (source, probe id) -> function slot for the other ids (damaged, or of a table that
    /// came late): a wild id costs an entry, not a table up to it.
    wild_funcs: FastMap<(u32, u32), u32>,
    /// Function slot -> (source, probe id).
    pub(super) func_meta: Vec<(u32, u32)>,
    /// Sys slot -> (thread, nr).
    pub(super) sys_meta: Vec<(u32, u32)>,
    big_nr: FastMap<(u32, u32), u32>,
    edge_slots: FastMap<(u32, u32), u32>,
    /// Edge slot -> (caller function slot, callee function slot).
    pub(super) edge_meta: Vec<(u32, u32)>,
    pub(super) open_conns: FastMap<u32, OpenConn>,
    /// Connections in service per process.
    pub(super) in_service: Vec<u32>,
    /// Go calls under way, by (file, goroutine).
    goroutines: FastMap<(u32, u64), Vec<Frame>>,
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
                goroutine: Some(g),
                thread,
                time,
                func,
                ..
            } => p.go_entry(thread, time, func, g),
            Item::Func(span) if span.goroutine.is_some() => p.go_func(&span),
            Item::FuncEntry {
                thread, time, func, ..
            } => p.func_entry(thread, time, func),
            Item::Func(span) => p.func(&span),
            Item::Mark(m) => p.mark(m.thread, m.time, m.probe),
            Item::SyscallEntry(_) | Item::Sample(_) => {}
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
    /// An empty pass over the files `sources`.
    pub(super) fn new(sources: &[Source], opts: &SummarizeOptions) -> Pass {
        let tables = sources
            .iter()
            .map(|s| vec![0; s.probes.len() + 1])
            .collect();
        let mut p = Pass {
            window_ns: opts.window_ns.filter(|&w| w > 0),
            keep_conns: opts.max_connections,
            total: Acc::default(),
            windows: Vec::new(),
            past_windows: false,
            rt: Vec::new(),
            func_slots: tables,
            wild_funcs: FastMap::default(),
            func_meta: Vec::new(),
            sys_meta: Vec::new(),
            big_nr: FastMap::default(),
            edge_slots: FastMap::default(),
            edge_meta: Vec::new(),
            open_conns: FastMap::default(),
            goroutines: FastMap::default(),
            in_service: Vec::new(),
        };
        p.total.conns.resize_with(sources.len(), ConnAcc::default);
        p
    }

    fn window_of(&mut self, t: u64) -> Option<u32> {
        let i = t / self.window_ns?;
        self.past_windows |= i >= MAX_WINDOWS;
        (i < MAX_WINDOWS).then_some(i as u32)
    }

    fn window(&mut self, w: u32) -> &mut Acc {
        at(&mut self.windows, w)
    }

    /// Applies `f` to the whole-trace figures and to those of the window holding `t`.
    #[inline]
    pub(super) fn each(&mut self, t: u64, f: impl Fn(&mut Acc)) {
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
            let end = s.end.min(w.saturating_mul(MAX_WINDOWS));
            self.past_windows |= end < s.end;
            while t < end {
                let wi = t / w;
                let stop = (wi + 1).saturating_mul(w).min(end);
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
        let next = self.func_meta.len() as u32;
        let slot = match self.func_slots[source as usize].get_mut(func as usize) {
            Some(s) if *s != 0 => return *s - 1,
            Some(s) => {
                *s = next + 1;
                next
            }
            None => *self.wild_funcs.entry((source, func)).or_insert(next),
        };
        if slot == next {
            self.func_meta.push((source, func));
        }
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
        let add = |f: &mut FuncAcc| f.split.iter_mut().zip(&d).for_each(|(x, y)| *x += *y);
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

    /// A USDT probe fired: a hit of its row.
    fn mark(&mut self, r: u32, time: u64, probe: u32) {
        let slot = self.func_slot(self.rt[r as usize].source, probe);
        self.each(time, |a| {
            let f = at(&mut a.funcs, slot);
            f.point = true;
            f.calls += 1;
        });
    }

    /// A Go call: on its goroutine's stack, with no thread-state split.
    fn go_entry(&mut self, r: u32, time: u64, func: u32, g: u64) {
        let source = self.rt[r as usize].source;
        let slot = self.func_slot(source, func);
        let stack = self.goroutines.entry((source, g)).or_default();
        let outer = !stack.iter().any(|f| f.slot == slot);
        stack.push(Frame {
            slot,
            begin: time,
            at: [0; SPLIT],
            child_ns: 0,
            outer,
        });
    }

    /// A Go call ended: its inclusive and self time, and its caller in the goroutine.
    fn go_func(&mut self, span: &Span) {
        let r = span.thread as usize;
        let key = (self.rt[r].source, span.goroutine.unwrap_or(0));
        let Some(stack) = self.goroutines.get_mut(&key) else {
            return;
        };
        stack.truncate(span.depth as usize + 1);
        let Some(fr) = stack.pop() else {
            return;
        };
        let dur = span.end.saturating_sub(fr.begin);
        let self_ns = dur.saturating_sub(fr.child_ns);
        let parent = stack.last_mut().map(|p| {
            p.child_ns += dur;
            p.slot
        });
        if stack.is_empty() {
            self.goroutines.remove(&key);
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
            f.go = true;
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
    /// Closes what the trace left open at `end`.
    pub(super) fn finish(&mut self, end: u64) {
        // Splits still waiting had no interval after them: the thread was at `since`.
        for r in 0..self.rt.len() {
            let pend = std::mem::take(&mut self.rt[r].pending);
            for q in pend {
                let f = self.rt[r].cum;
                self.add_split(q.slot, q.window, &q.at, &f);
            }
        }
        self.end_open_conns(end);
    }
}
