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
//! before the thread's final interval, so its split waits for that interval.
//!
//! A goroutine moves between threads behind the kernel's back, so a Go call's split is
//! its goroutine's [`GoroutineClocks`]: while the goroutine runs (or is in a system call)
//! on a thread, that thread's states; while it is runnable on a run queue, ready; while
//! it waits in the runtime (a channel, a lock, the network poller, a sleep), blocked. It
//! needs the Go scheduler's status changes ([`Item::GoStatus`](crate::timeline::Item::GoStatus),
//! recordings that say so in their header); without them a Go call has no split.

use rustc_hash::FxHashMap;

use crate::timeline::{GoStatusChange, Span, StateInterval, ThreadState};

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
    /// A Go call of `func` entered at `begin` on goroutine `goroutine` of file `source`,
    /// its goroutine's clock reading `at` ([`GoroutineClocks::reading`]; zeros without).
    pub fn enter(&mut self, source: u32, goroutine: u64, key: K, func: u32, begin: u64, at: Split) {
        let stack = self.stacks.entry((source, goroutine)).or_default();
        stack.enter(key, func, begin, at);
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

/// Where a goroutine's time goes, as its last status change says.
#[derive(Clone, Copy, Debug)]
enum GoPlace {
    /// On a thread (running Go code, or in a system call there): the thread's own states,
    /// counted from that thread's clock reading `from`.
    On { thread: u32, from: Split },
    /// On no thread: all of it in one part of the split (ready while runnable, blocked
    /// while waiting, other while dead or idle).
    Off(usize),
}

/// One goroutine's cumulative time per part of the split, up to `since`.
#[derive(Clone, Copy, Debug)]
struct GoClock {
    cum: Split,
    since: u64,
    place: GoPlace,
}

/// The goroutines' clocks (see the module's documentation). A thread's clock is read
/// through `clock_of(thread, time)`: its [`StateClock::entry`] reading.
#[derive(Default)]
pub struct GoroutineClocks {
    /// By (file, goroutine).
    clocks: FxHashMap<(u32, u64), GoClock>,
    /// The goroutine on each thread: one starting to run there takes the place of the one
    /// before, should that one's leaving not have been recorded.
    on_thread: FxHashMap<u32, u64>,
    /// The files that did not record the goroutines' status: their clocks read zeros.
    unrecorded: Vec<u32>,
}

impl GoroutineClocks {
    /// The clocks of files that did or did not record the goroutines' status (their
    /// headers' `go_status`, in file order).
    pub fn for_files(recorded: impl IntoIterator<Item = bool>) -> Self {
        let unrecorded = (recorded.into_iter().enumerate())
            .filter(|&(_, r)| !r)
            .map(|(i, _)| i as u32)
            .collect();
        GoroutineClocks {
            unrecorded,
            ..Default::default()
        }
    }

    /// Whether file `source` recorded the goroutines' status.
    pub fn recorded(&self, source: u32) -> bool {
        !self.unrecorded.contains(&source)
    }

    /// Goroutine `g`'s time from its clock reading `at` to `time`, by state: a Go call's
    /// split. `None` when its file did not record the goroutines' status.
    pub fn since(
        &mut self,
        source: u32,
        g: u64,
        at: &Split,
        time: u64,
        clock_of: impl Fn(u32, u64) -> Split,
    ) -> Option<Split> {
        if !self.recorded(source) {
            return None;
        }
        let to = self.reading(source, g, None, time, clock_of);
        Some(std::array::from_fn(|k| to[k].saturating_sub(at[k])))
    }

    /// A goroutine's status changed (`change`, in file `source`).
    pub fn status(
        &mut self,
        source: u32,
        change: &GoStatusChange,
        clock_of: impl Fn(u32, u64) -> Split,
    ) {
        use tracer_abi::go_status::*;
        let (g, time, thread) = (change.g, change.time, change.thread);
        let place = match change.status {
            RUNNING | SYSCALL | COPYSTACK => GoPlace::On {
                thread,
                from: clock_of(thread, time),
            },
            RUNNABLE | PREEMPTED => GoPlace::Off(split_index(ThreadState::Ready)),
            WAITING => GoPlace::Off(split_index(ThreadState::Blocked)),
            _ => GoPlace::Off(split_index(ThreadState::Exited)),
        };
        if let GoPlace::On { .. } = place {
            if let Some(before) = self.on_thread.insert(thread, g).filter(|&b| b != g) {
                // It left the thread unseen: runnable, as far as anything says.
                let ready = GoPlace::Off(split_index(ThreadState::Ready));
                self.move_to(source, before, time, ready, &clock_of);
            }
        }
        let dead = place_is_gone(change.status);
        let left = self.move_to(source, g, time, place, &clock_of);
        if let Some(GoPlace::On { thread: t, .. }) = left {
            if !matches!(place, GoPlace::On { thread: n, .. } if n == t)
                && self.on_thread.get(&t) == Some(&g)
            {
                self.on_thread.remove(&t);
            }
        }
        if dead {
            // Its `g` is reused by a goroutine started later: forget this one's time.
            self.clocks.remove(&(source, g));
        }
    }

    /// Goroutine `g` of `source`'s clock reading at `time`, when one of its calls enters
    /// or ends. At an entry, the thread it runs on (`on`) is known: a goroutine first seen
    /// there starts its clock, and one its clock says is elsewhere is on that thread (its
    /// move was not recorded). An end (the timeline shows a Go call on the thread that
    /// entered it) reads the clock where it is.
    pub fn reading(
        &mut self,
        source: u32,
        g: u64,
        on: Option<u32>,
        time: u64,
        clock_of: impl Fn(u32, u64) -> Split,
    ) -> Split {
        if !self.recorded(source) {
            return [0; SPLIT];
        }
        if let Some(thread) = on {
            let here =
                |c: &GoClock| matches!(c.place, GoPlace::On { thread: t, .. } if t == thread);
            if !self.clocks.get(&(source, g)).is_some_and(here) {
                let place = GoPlace::On {
                    thread,
                    from: clock_of(thread, time),
                };
                self.move_to(source, g, time, place, &clock_of);
                self.on_thread.insert(thread, g);
            }
        }
        match self.clocks.get(&(source, g)) {
            Some(c) => {
                let mut r = c.cum;
                add(&mut r, &elapsed(c, time, &clock_of));
                r
            }
            None => [0; SPLIT],
        }
    }

    /// Closes goroutine `g`'s time up to `time` in its place and moves it to `place`;
    /// returns the place it left.
    fn move_to(
        &mut self,
        source: u32,
        g: u64,
        time: u64,
        place: GoPlace,
        clock_of: &impl Fn(u32, u64) -> Split,
    ) -> Option<GoPlace> {
        match self.clocks.get_mut(&(source, g)) {
            Some(c) => {
                let d = elapsed(c, time, clock_of);
                add(&mut c.cum, &d);
                c.since = c.since.max(time);
                Some(std::mem::replace(&mut c.place, place))
            }
            None => {
                let c = GoClock {
                    cum: [0; SPLIT],
                    since: time,
                    place,
                };
                self.clocks.insert((source, g), c);
                None
            }
        }
    }
}

/// Whether a goroutine of this status is gone (exited, or not started).
fn place_is_gone(status: u32) -> bool {
    use tracer_abi::go_status::*;
    matches!(status, DEAD | IDLE)
}

/// A goroutine's time in its place since its clock's last close, up to `time`.
fn elapsed(c: &GoClock, time: u64, clock_of: &impl Fn(u32, u64) -> Split) -> Split {
    match c.place {
        GoPlace::On { thread, from } => minus(&clock_of(thread, time), &from),
        GoPlace::Off(part) => {
            let mut d = [0; SPLIT];
            d[part] = time.saturating_sub(c.since);
            d
        }
    }
}

/// `to += d`, part by part.
fn add(to: &mut Split, d: &Split) {
    for k in 0..SPLIT {
        to[k] = to[k].saturating_add(d[k]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_abi::go_status::*;

    /// Threads that run all the time: their clocks read all running.
    fn running(_: u32, t: u64) -> Split {
        [t, 0, 0, 0, 0]
    }

    fn change(thread: u32, time: u64, g: u64, status: u32) -> GoStatusChange {
        GoStatusChange {
            thread,
            time,
            g,
            status,
        }
    }

    #[test]
    fn a_goroutines_time_is_its_threads_while_on_one_and_its_status_off_them() {
        let mut c = GoroutineClocks::default();
        c.status(0, &change(1, 100, 7, RUNNING), running);
        let at = c.reading(0, 7, Some(1), 150, running);
        c.status(0, &change(1, 200, 7, WAITING), running);
        // Woken by another thread: runnable, then running on thread 2.
        c.status(0, &change(3, 500, 7, RUNNABLE), running);
        c.status(0, &change(2, 600, 7, RUNNING), running);
        assert_eq!(
            c.since(0, 7, &at, 700, running),
            Some([150, 100, 300, 0, 0])
        );
        // On a thread, its states: preempted there half the time is ready half the time.
        let half = |_: u32, t: u64| [t / 2, t - t / 2, 0, 0, 0];
        c.status(0, &change(4, 700, 11, RUNNING), half);
        let at = c.reading(0, 11, Some(4), 700, half);
        c.status(0, &change(4, 800, 11, SYSCALL), half);
        let to = c.reading(0, 11, None, 900, half);
        assert_eq!(minus(&to, &at), [100, 100, 0, 0, 0]);
    }

    #[test]
    fn a_file_that_did_not_record_the_goroutines_status_gives_no_split() {
        let mut c = GoroutineClocks::for_files([true, false]);
        assert!(c.recorded(0) && !c.recorded(1));
        let at = c.reading(1, 7, Some(1), 150, running);
        assert_eq!(at, [0; SPLIT]);
        assert_eq!(c.since(1, 7, &at, 700, running), None);
        let at = c.reading(0, 7, Some(1), 150, running);
        assert_eq!(c.since(0, 7, &at, 700, running), Some([550, 0, 0, 0, 0]));
    }

    #[test]
    fn a_goroutine_replaced_on_its_thread_unseen_is_ready_and_a_dead_one_forgotten() {
        let mut c = GoroutineClocks::default();
        c.status(0, &change(1, 0, 7, RUNNING), running);
        let at = c.reading(0, 7, Some(1), 10, running);
        // Goroutine 8 starts on thread 1: 7's leaving was not recorded.
        c.status(0, &change(1, 50, 8, RUNNING), running);
        let to = c.reading(0, 7, None, 80, running);
        assert_eq!(minus(&to, &at), [40, 30, 0, 0, 0]);
        // A call of a goroutine first seen at its entry: on the entry's thread.
        let at = c.reading(0, 9, Some(2), 100, running);
        let to = c.reading(0, 9, None, 130, running);
        assert_eq!(minus(&to, &at), [30, 0, 0, 0, 0]);
        c.status(0, &change(2, 140, 9, DEAD), running);
        assert!(!c.clocks.contains_key(&(0, 9)));
        // Files apart: the same g in another file is another goroutine.
        assert_eq!(c.reading(1, 7, None, 200, running), [0; SPLIT]);
    }
}
