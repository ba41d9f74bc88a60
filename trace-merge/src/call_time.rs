//! Where a probed call's time went, for every consumer that reports calls (the summary,
//! the Parquet tables): defined once here, so that their figures agree by construction
//! (the Parquet tests sum rows and compare them with the summary's).
//!
//! **Self time** is a call's duration less that of the probed calls it made on the same
//! stack: its thread's, or its goroutine's for Go. A recursive function's nested
//! activations are not **outermost**: its inclusive time counts once, in the outermost.
//!
//! **The state split** divides a call's wall time into running / ready / blocked / I/O /
//! other. Every thread carries a [`StateClock`]: the cumulative time it has spent in each
//! state up to the end of its last closed state interval. A call's entry reads the clock
//! at the entry time, its end reads it again, and the difference is the split. Entries and
//! most ends happen while the thread runs (the record is its own), so the open interval's
//! state is known then: running since its [`Item::OnCpu`](crate::timeline::Item::OnCpu).
//! The one exception is a call cut by the end of the trace: the timeline closes the call
//! before the thread's final interval, so its split waits for that interval. Go calls have
//! no split: a goroutine moves between threads behind the kernel's back.

use rustc_hash::FxHashMap;

use crate::timeline::{Span, StateInterval, ThreadState};

/// The parts of a split: running, ready, blocked, I/O, other.
pub const SPLIT: usize = 5;

/// Time per part of the split ([`split_index`]): a clock reading, or a call's split.
pub type Split = [u64; SPLIT];

/// Where a thread state counts in a [`Split`].
#[inline]
pub fn split_index(s: ThreadState) -> usize {
    match s {
        ThreadState::Running => 0,
        ThreadState::Ready => 1,
        ThreadState::Blocked => 2,
        ThreadState::Io => 3,
        _ => 4,
    }
}

/// A call whose split waits for its thread's next state interval.
struct Waiting<C> {
    call: C,
    at: Split,
    end: u64,
}

/// One thread's cumulative time per state, read at its calls' entries and ends. `C` is
/// what a consumer keeps of a call whose split has to wait.
pub struct StateClock<C> {
    /// Cumulative time per part up to `since`.
    cum: Split,
    /// End of the last closed state interval: the open one began here.
    since: u64,
    /// The open interval is known to be running (an `OnCpu` came after the last close).
    running: bool,
    /// The CPU it last started running on.
    last_cpu: Option<u32>,
    waiting: Vec<Waiting<C>>,
}

impl<C> Default for StateClock<C> {
    fn default() -> Self {
        StateClock {
            cum: [0; SPLIT],
            since: 0,
            running: false,
            last_cpu: None,
            waiting: Vec::new(),
        }
    }
}

impl<C> StateClock<C> {
    /// The thread starts running on `cpu` (an `OnCpu` item). Returns whether that is a
    /// migration: another CPU than the one it last started running on.
    #[inline]
    pub fn on_cpu(&mut self, cpu: u32) -> bool {
        self.running = true;
        let migrated = self.last_cpu.is_some_and(|c| c != cpu);
        self.last_cpu = Some(cpu);
        migrated
    }

    /// The reading at `t` (not before the last close), when the open state is known.
    #[inline]
    fn at(&self, t: u64) -> Option<Split> {
        let mut f = self.cum;
        if t > self.since {
            if !self.running {
                return None;
            }
            f[0] += t - self.since;
        }
        Some(f)
    }

    /// The reading at a call's entry at `t`. Entries happen while the thread runs; where
    /// that is not known, the reading of the last close.
    #[inline]
    pub fn entry(&self, t: u64) -> Split {
        self.at(t).unwrap_or(self.cum)
    }

    /// A call entered at reading `at` ended at `end`: its split, or `None` when the
    /// thread's open state is not known (a call cut by the trace's end). Then `call`
    /// waits, and comes back with its split from [`StateClock::interval`] or
    /// [`StateClock::finish`].
    ///
    /// Inlined into the consumers' per-item paths, the rare wait out of line: with the
    /// wait in it, the compiler called it out of line, which the summary's instruction
    /// count showed (docs/performance.md).
    #[inline(always)]
    pub fn end(&mut self, call: C, at: &Split, end: u64) -> Option<Split> {
        let to = self.at(end);
        if to.is_none() {
            self.wait(call, at, end);
        }
        to.map(|to| minus(&to, at))
    }

    #[cold]
    #[inline(never)]
    fn wait(&mut self, call: C, at: &Split, end: u64) {
        self.waiting.push(Waiting { call, at: *at, end });
    }

    /// The thread's state interval `s` has closed: the clock moves to its end. Returns the
    /// calls that waited for it, with their splits (most often none, at no cost).
    #[inline(always)]
    pub fn interval(&mut self, s: &StateInterval) -> Settled<C> {
        let settled = match self.waiting.is_empty() {
            true => Settled(None),
            false => Settled(Some(self.settle(s).into_iter())),
        };
        self.cum[split_index(s.state)] += s.end - s.begin;
        self.since = s.end;
        self.running = false;
        settled
    }

    /// The waiting calls' splits: the clock at `s`'s begin, plus their part of `s`.
    #[cold]
    #[inline(never)]
    fn settle(&mut self, s: &StateInterval) -> Vec<(C, Split)> {
        let si = split_index(s.state);
        let cum = self.cum;
        let settle = |w: Waiting<C>| {
            let mut to = cum;
            to[si] += w.end.clamp(s.begin, s.end) - s.begin;
            (w.call, minus(&to, &w.at))
        };
        std::mem::take(&mut self.waiting)
            .into_iter()
            .map(settle)
            .collect()
    }

    /// The trace has ended: the calls still waiting had no interval after them, so the
    /// thread was at its last close. Returns them with their splits.
    pub fn finish(&mut self) -> Settled<C> {
        let cum = self.cum;
        let settle = |w: Waiting<C>| (w.call, minus(&cum, &w.at));
        let settled = std::mem::take(&mut self.waiting).into_iter().map(settle);
        Settled(Some(settled.collect::<Vec<_>>().into_iter()))
    }
}

/// Calls that waited for their split, with it.
pub struct Settled<C>(Option<std::vec::IntoIter<(C, Split)>>);

impl<C> Iterator for Settled<C> {
    type Item = (C, Split);

    #[inline]
    fn next(&mut self) -> Option<(C, Split)> {
        self.0.as_mut()?.next()
    }
}

/// The split between two readings.
#[inline]
fn minus(to: &Split, from: &Split) -> Split {
    let mut d = [0; SPLIT];
    for k in 0..SPLIT {
        d[k] = to[k].saturating_sub(from[k]);
    }
    d
}

/// A probed call under way. `K` is what the consumer keeps of it (a slot, a row id).
#[derive(Clone, Copy)]
pub struct OpenCall<K> {
    /// The consumer's.
    pub key: K,
    /// Probe-table id.
    pub func: u32,
    /// Entry, ns of merge time.
    pub begin: u64,
    /// The thread's [`StateClock::entry`] reading (zeros for Go calls).
    pub at: Split,
    /// Wall time of the probed calls it made that have ended.
    child_ns: u64,
    /// No activation of the same function below it on the stack.
    pub outer: bool,
}

/// A call taken off its stack.
pub struct EndedCall<K> {
    /// The call as it was under way.
    pub call: OpenCall<K>,
    /// Its wall time.
    pub dur: u64,
    /// Its wall time less that of the probed calls it made.
    pub self_ns: u64,
    /// The key of its caller, the call under it on the stack.
    pub parent: Option<K>,
}

/// The probed calls under way on one stack (a thread's, or a goroutine's), outermost
/// first.
pub struct CallStack<K> {
    calls: Vec<OpenCall<K>>,
}

impl<K> Default for CallStack<K> {
    fn default() -> Self {
        CallStack { calls: Vec::new() }
    }
}

impl<K: Copy> CallStack<K> {
    /// A call of `func` entered at `begin`, the clock reading `at`.
    #[inline]
    pub fn enter(&mut self, key: K, func: u32, begin: u64, at: Split) {
        let outer = !self.calls.iter().any(|c| c.func == func);
        self.calls.push(OpenCall {
            key,
            func,
            begin,
            at,
            child_ns: 0,
            outer,
        });
    }

    /// The call `span` closes, taken off the stack, its time charged to its caller;
    /// `None` when the stack has no call at its depth.
    #[inline]
    pub fn end(&mut self, span: &Span) -> Option<EndedCall<K>> {
        // The timeline closes frames innermost first: the top is this span's.
        self.calls.truncate(span.depth as usize + 1);
        let call = self.calls.pop()?;
        let dur = span.end.saturating_sub(call.begin);
        let parent = self.calls.last_mut().map(|p| {
            p.child_ns += dur;
            p.key
        });
        Some(EndedCall {
            call,
            dur,
            self_ns: dur.saturating_sub(call.child_ns),
            parent,
        })
    }

    /// The calls under way, outermost first.
    #[inline]
    pub fn calls(&self) -> &[OpenCall<K>] {
        &self.calls
    }

    /// The calls under way, outermost first, their keys to update.
    #[inline]
    pub fn calls_mut(&mut self) -> &mut [OpenCall<K>] {
        &mut self.calls
    }
}

/// Go calls under way, a stack per (file, goroutine): the timeline pairs them by
/// goroutine, whichever thread they run on.
pub struct GoroutineStacks<K> {
    stacks: FxHashMap<(u32, u64), CallStack<K>>,
}

impl<K> Default for GoroutineStacks<K> {
    fn default() -> Self {
        GoroutineStacks {
            stacks: FxHashMap::default(),
        }
    }
}

impl<K: Copy> GoroutineStacks<K> {
    /// A Go call of `func` entered at `begin` on goroutine `goroutine` of file `source`.
    pub fn enter(&mut self, source: u32, goroutine: u64, key: K, func: u32, begin: u64) {
        let stack = self.stacks.entry((source, goroutine)).or_default();
        stack.enter(key, func, begin, [0; SPLIT]);
    }

    /// The Go call `span` (of file `source`) closes, as [`CallStack::end`].
    pub fn end(&mut self, source: u32, span: &Span) -> Option<EndedCall<K>> {
        let key = (source, span.goroutine.unwrap_or(0));
        let stack = self.stacks.get_mut(&key)?;
        let ended = stack.end(span)?;
        if stack.calls.is_empty() {
            self.stacks.remove(&key);
        }
        Some(ended)
    }
}
