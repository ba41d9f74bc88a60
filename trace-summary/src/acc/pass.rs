//! The streaming pass: timeline items in, per-slot accumulators out, for the whole trace
//! and for the window each item falls in.
//!
//! Everything is indexed by dense slots handed out at first sight (a function of a file,
//! a (thread, system call) pair, a caller -> callee pair), so the per-item work is a few
//! vector indexings and additions: no allocation and no hashing, except for call-graph
//! edges and connection operations (one fast integer hash each).
//!
//! A call's self time and state split are [`trace_merge::call_time`]'s, as the Parquet
//! tables' are.

use rustc_hash::FxHashMap as FastMap;
use trace_merge::call_time::{
    CallStack, EndedCall, GoroutineClocks, GoroutineStacks, Split, StateClock,
};
use trace_merge::merge::Source;
use trace_merge::timeline::{
    Item, LinkKind, Span, SpanEnd, StateInterval, SyscallSpan, ThreadState, Timeline,
};

use super::conn::{ConnAcc, OpenConn};
use super::scope::{at, state_index, Acc, FuncAcc};
use crate::{Error, SummarizeOptions};

/// System call numbers below this get a direct slot table per thread; larger (none on
/// x86_64 today) go through a shared map.
const DIRECT_NR: u32 = 512;

/// What the pass keeps of a call whose split waits: its function slot and window.
type WaitingSplit = (u32, Option<u32>);

/// What the pass knows of a thread between its items.
pub(super) struct ThreadRt {
    pub(super) source: u32,
    pub(super) process: u32,
    pub(super) tid: u32,
    pub(super) tgid: u32,
    clock: StateClock<WaitingSplit>,
    last_state: Option<ThreadState>,
    /// Function slots of the calls under way.
    stack: CallStack<u32>,
    /// System call number -> sys slot + 1 (0: none yet); allocated at the first call.
    sys_slots: Vec<u32>,
}

/// The pass's state: the accumulators, the threads' stacks and the slot tables.
pub(super) struct Pass {
    pub(super) window_ns: Option<u64>,
    pub(super) keep_conns: usize,
    pub(super) total: Acc,
    pub(super) windows: Vec<Acc>,
    /// See [`SummarizeOptions::max_windows`].
    pub(super) max_windows: u64,
    /// Some time fell past `max_windows` windows (and counted in the totals only).
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
    /// Go calls under way: their function slots.
    goroutines: GoroutineStacks<u32>,
    /// Where the goroutines' time goes, for the files that recorded their status.
    go_clocks: GoroutineClocks,
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
            Item::GoStatus(c) => {
                let source = p.rt[c.thread as usize].source;
                let rt = &p.rt;
                let clock_of = |r: u32, t: u64| rt[r as usize].clock.entry(t);
                p.go_clocks.status(source, &c, clock_of);
            }
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
            max_windows: opts.max_windows.min(u32::MAX.into()),
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
            goroutines: GoroutineStacks::default(),
            go_clocks: GoroutineClocks::for_files(sources.iter().map(|s| s.header.go_status)),
            in_service: Vec::new(),
        };
        p.total.conns.resize_with(sources.len(), ConnAcc::default);
        p
    }

    fn window_of(&mut self, t: u64) -> Option<u32> {
        let i = t / self.window_ns?;
        self.past_windows |= i >= self.max_windows;
        (i < self.max_windows).then_some(i as u32)
    }

    fn window(&mut self, w: u32) -> &mut Acc {
        at(&mut self.windows, w)
    }

    /// Applies `f` to the whole-trace figures and to those of the window holding `t`.
    /// Always inlined: from `ended`, shared by two callers, the compiler kept it out of
    /// line (callgrind: 17 instructions more per call ended).
    #[inline(always)]
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
            clock: StateClock::default(),
            last_state: None,
            stack: CallStack::default(),
            sys_slots: Vec::new(),
        });
        at(&mut self.total.threads, r);
    }

    #[inline(always)]
    fn state(&mut self, s: &StateInterval) {
        let r = s.thread as usize;
        let d = s.end - s.begin;
        // Calls cut by the trace's end waited for this interval to know their split.
        for ((slot, window), split) in self.rt[r].clock.interval(s) {
            self.add_split(slot, window, &split);
        }
        let th = &mut self.rt[r];
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
            let end = s.end.min(w.saturating_mul(self.max_windows));
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
        if self.rt[r as usize].clock.on_cpu(cpu) {
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
        let at = th.clock.entry(time);
        th.stack.enter(slot, func, time, at);
    }

    fn add_split(&mut self, slot: u32, window: Option<u32>, d: &Split) {
        let add = |f: &mut FuncAcc| f.split.iter_mut().zip(d).for_each(|(x, y)| *x += *y);
        add(at(&mut self.total.funcs, slot));
        if let Some(w) = window {
            add(at(&mut self.window(w).funcs, slot));
        }
    }

    #[inline(always)]
    fn func(&mut self, span: &Span) {
        let r = span.thread as usize;
        let Some(e) = self.rt[r].stack.end(span) else {
            return;
        };
        let window = self.window_of(span.end);
        // Like inclusive time, a recursive function's split is its outermost activation's.
        if e.call.outer {
            let (slot, at) = (e.call.key, e.call.at);
            if let Some(split) = self.rt[r].clock.end((slot, window), &at, span.end) {
                self.add_split(slot, window, &split);
            }
        }
        self.ended::<false>(span, &e);
    }

    /// A call ended (`GO`: a Go call): its count, times and caller.
    #[inline(always)]
    fn ended<const GO: bool>(&mut self, span: &Span, e: &EndedCall<u32>) {
        let r = span.thread;
        let (dur, self_ns) = (e.dur, e.self_ns);
        // A call that left by a tail call returned, with a result not known.
        let unfinished = span.end_kind != SpanEnd::Returned;
        let (neg, nonzero) = match span.ret {
            Some(v) => ((v as i64) < 0, v != 0),
            None => (false, false),
        };
        let slot = e.call.key;
        let inclusive = if e.call.outer { dur } else { 0 };
        let edge = e.parent.map(|p| self.edge_slot(p, slot));
        self.each(span.end, |a| {
            let f = at(&mut a.funcs, slot);
            f.go |= GO;
            f.calls += 1;
            f.neg += neg as u64;
            f.nonzero += nonzero as u64;
            f.unfinished += unfinished as u64;
            f.hist.record(dur);
            f.inclusive += inclusive;
            f.self_ns += self_ns;
            at(&mut a.threads, r).function_calls += 1;
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

    /// A Go call: on its goroutine's stack, with its goroutine's clock reading when the
    /// file recorded the goroutines' status.
    fn go_entry(&mut self, r: u32, time: u64, func: u32, g: u64) {
        let source = self.rt[r as usize].source;
        let slot = self.func_slot(source, func);
        let rt = &self.rt;
        let clock_of = |r: u32, t: u64| rt[r as usize].clock.entry(t);
        let at = self.go_clocks.reading(source, g, Some(r), time, clock_of);
        self.goroutines.enter(source, g, slot, func, time, at);
    }

    /// A Go call ended: its inclusive and self time, its caller in the goroutine, and
    /// where its time went, from its goroutine's clock.
    fn go_func(&mut self, span: &Span) {
        let source = self.rt[span.thread as usize].source;
        let Some(e) = self.goroutines.end(source, span) else {
            return;
        };
        let g = span.goroutine.unwrap_or(0);
        let rt = &self.rt;
        let clock_of = |r: u32, t: u64| rt[r as usize].clock.entry(t);
        let split = match e.call.outer {
            true => (self.go_clocks).since(source, g, &e.call.at, span.end, clock_of),
            false => None,
        };
        if let Some(split) = split {
            let (slot, window) = (e.call.key, self.window_of(span.end));
            self.add_split(slot, window, &split);
            self.each(span.end, |a| at(&mut a.funcs, slot).go_split = true);
        }
        self.ended::<true>(span, &e);
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
        for i in 0..self.rt[r as usize].stack.calls().len() {
            let fr = self.rt[r as usize].stack.calls()[i];
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
            add(at(&mut self.total.funcs, fr.key));
            if let Some(w) = window {
                add(at(&mut self.window(w).funcs, fr.key));
            }
        }
        self.connection(s);
    }
    /// Closes what the trace left open at `end`.
    pub(super) fn finish(&mut self, end: u64) {
        for r in 0..self.rt.len() {
            for ((slot, window), split) in self.rt[r].clock.finish() {
                self.add_split(slot, window, &split);
            }
        }
        self.end_open_conns(end);
    }
}
