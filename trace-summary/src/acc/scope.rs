//! What one scope (the whole trace, or one window) accumulates per slot, and how two
//! accumulators of the same element add up (files and windows are merged by name later).

use trace_merge::call_time::SPLIT;
use trace_merge::timeline::ThreadState;

use super::conn::ConnAcc;
use crate::Histogram;

/// A sum of times or bytes. It saturates: only damaged input (times decades apart,
/// results of exabytes) comes near u64's range, and a figure stuck at its largest says so
/// better than one wrapped around to a small number.
pub(super) type Sum = std::num::Saturating<u64>;

/// Where a thread state counts in [`ThreadAcc::states`].
pub(super) fn state_index(s: ThreadState) -> usize {
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

/// System calls of one number made while a function was on the stack.
#[derive(Clone, Default)]
pub(super) struct InnerAcc {
    pub(super) nr: u32,
    pub(super) calls: u64,
    pub(super) errors: u64,
    pub(super) ns: Sum,
    pub(super) read: Sum,
    pub(super) written: Sum,
}

/// A function's calls.
#[derive(Clone, Default)]
pub(super) struct FuncAcc {
    pub(super) calls: u64,
    pub(super) neg: u64,
    pub(super) nonzero: u64,
    pub(super) unfinished: u64,
    pub(super) inclusive: Sum,
    pub(super) self_ns: Sum,
    /// Inclusive time by [`trace_merge::call_time::split_index`].
    pub(super) split: [Sum; SPLIT],
    pub(super) hist: Histogram,
    pub(super) inner: Vec<InnerAcc>,
    /// A Go function: calls paired by goroutine.
    pub(super) go: bool,
    /// Its calls' split came from their goroutines' status (else it has none).
    pub(super) go_split: bool,
    /// A USDT probe: hits, no durations.
    pub(super) point: bool,
}

impl FuncAcc {
    pub(super) fn merge(&mut self, o: &FuncAcc) {
        self.go |= o.go;
        self.go_split |= o.go_split;
        self.point |= o.point;
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

    pub(super) fn inner_mut(&mut self, nr: u32) -> &mut InnerAcc {
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

/// A thread's time and events.
#[derive(Clone, Default)]
pub(super) struct ThreadAcc {
    /// Time by [`state_index`].
    pub(super) states: [u64; 7],
    pub(super) voluntary: u64,
    pub(super) involuntary: u64,
    pub(super) wakeups_sent: u64,
    pub(super) wakeups_received: u64,
    pub(super) migrations: u64,
    pub(super) syscalls: u64,
    pub(super) syscall_errors: u64,
    pub(super) syscall_ns: Sum,
    pub(super) function_calls: u64,
    /// Each wait for a CPU (ready interval), in the scope where it ended.
    pub(super) waits: Histogram,
}

/// The calls of one system call by one thread.
#[derive(Clone, Default)]
pub(super) struct SysAcc {
    pub(super) calls: u64,
    pub(super) errors: u64,
    /// (errno, count), in order of first appearance (few distinct ones).
    pub(super) errnos: Vec<(u32, u64)>,
    pub(super) unfinished: u64,
    pub(super) read: Sum,
    pub(super) written: Sum,
    pub(super) hist: Histogram,
}

impl SysAcc {
    pub(super) fn merge(&mut self, o: &SysAcc) {
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

    pub(super) fn errno(&mut self, e: u32, n: u64) {
        match self.errnos.iter_mut().find(|x| x.0 == e) {
            Some(x) => x.1 += n,
            None => self.errnos.push((e, n)),
        }
    }
}

/// The calls of one caller -> callee pair.
#[derive(Clone, Default)]
pub(super) struct EdgeAcc {
    pub(super) calls: u64,
    pub(super) total: Sum,
    pub(super) max: u64,
}

/// The figures of one scope (the whole trace or one window), indexed by slot.
#[derive(Default)]
pub(super) struct Acc {
    pub(super) funcs: Vec<FuncAcc>,
    pub(super) threads: Vec<ThreadAcc>,
    pub(super) sys: Vec<SysAcc>,
    pub(super) edges: Vec<EdgeAcc>,
    /// Per file.
    pub(super) conns: Vec<ConnAcc>,
}

/// Grows `v` to hold index `i` (windows see slots in any order).
#[inline]
pub(super) fn at<T: Default>(v: &mut Vec<T>, i: u32) -> &mut T {
    let i = i as usize;
    if i >= v.len() {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}
