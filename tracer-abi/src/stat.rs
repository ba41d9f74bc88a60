//! Counting mode (`tracer stat`): what the programs aggregate in maps instead of sending
//! records.

/// Probed functions counting mode can hold (ids 1..MAX_FUNCS).
pub const MAX_FUNCS: u32 = 1024;
/// Timed calls paired by frame in progress counting mode can hold (stack and function
/// pairs; least recently used ones make room).
pub const MAX_FRAME_CALLS: u32 = 16384;
/// Timed calls of one function paired by frame under way at once on one goroutine or
/// thread (recursion) that counting mode can time (a power of two); more are counted,
/// not timed.
pub const FRAME_LEVELS: usize = 8;
/// System call numbers counting mode can hold.
pub const MAX_SYSCALLS: u32 = 512;
/// log2 of the buckets each power of two of a latency histogram is split into: a
/// duration is known to within 1/8 of its power of two, so a percentile read at its
/// bucket's middle is within 1/16 (6.25%) of the truth.
pub const HIST_SUB_BITS: u32 = 3;
/// Latency histograms tell durations apart up to 2^36 ns (68.7 s): the last bucket, from
/// 15/16 of it, counts everything longer too.
pub const HIST_TOP_LOG2: u32 = 36;
/// Buckets of the latency histograms (log-linear, as HDR histograms): a bucket each for
/// the durations below `2^(HIST_SUB_BITS + 1)` ns, then `2^HIST_SUB_BITS` equal buckets
/// per power of two up to `2^HIST_TOP_LOG2` ns ([`hist_bucket`], [`hist_bounds`]).
pub const HIST_BUCKETS: usize = ((HIST_TOP_LOG2 - HIST_SUB_BITS + 1) << HIST_SUB_BITS) as usize;

/// The latency histogram bucket of a duration of `ns` nanoseconds.
#[inline(always)]
pub fn hist_bucket(ns: u64) -> usize {
    let subs = 1u64 << HIST_SUB_BITS;
    if ns < 2 * subs {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros();
    if e >= HIST_TOP_LOG2 {
        return HIST_BUCKETS - 1;
    }
    let shift = e - HIST_SUB_BITS;
    let sub = ((ns >> shift) & (subs - 1)) as usize;
    (((shift + 1) as usize) << HIST_SUB_BITS) | sub
}

/// The shortest and longest duration of latency histogram bucket `i` (the last one's
/// longest is `u64::MAX`); an `i` past the buckets is the last one.
pub fn hist_bounds(i: usize) -> (u64, u64) {
    let i = if i >= HIST_BUCKETS {
        HIST_BUCKETS - 1
    } else {
        i
    };
    let subs = 1u64 << HIST_SUB_BITS;
    if (i as u64) < 2 * subs {
        return (i as u64, i as u64);
    }
    let shift = (i >> HIST_SUB_BITS) as u32 - 1;
    let lo = ((i as u64 & (subs - 1)) | subs) << shift;
    if i == HIST_BUCKETS - 1 {
        return (lo, u64::MAX);
    }
    (lo, lo + (1u64 << shift) - 1)
}

/// Counting mode, per function (per CPU, summed by user space).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FuncStat {
    /// Calls (with uprobe sessions, counted at entry: every call).
    pub calls: u64,
    /// Calls timed: their returns were probed (every call without sampling).
    pub timed: u64,
    /// Timed calls whose return value, as a signed integer, was negative.
    pub errors: u64,
    /// Time in the timed calls.
    pub total_ns: u64,
    /// Their durations, by [`hist_bucket`]. 32-bit counters: user space reads them far
    /// more often than 4 billion calls of one bucket on one CPU, and takes each CPU's
    /// difference modulo 2^32.
    pub hist: [u32; HIST_BUCKETS],
    /// Calls chosen to be timed that were not: a call paired by frame under more timed
    /// calls of it on its goroutine or thread than [`FRAME_LEVELS`] (recursion).
    pub untimed: u64,
}

/// Counting mode, per system call number.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SysStat {
    /// Calls.
    pub calls: u64,
    /// Calls that returned -errno.
    pub errors: u64,
    /// Time in them.
    pub total_ns: u64,
    /// Sum of positive results: bytes moved, for the calls that move bytes.
    pub positive_sum: u64,
    /// Durations of the calls whose entry was seen, by [`hist_bucket`] (32-bit, as
    /// [`FuncStat::hist`]).
    pub hist: [u32; HIST_BUCKETS],
}

/// Counting mode, per thread, cumulative. Times are closed intervals only: user space
/// adds the interval still open (from [`ThreadSched`]) when it reads.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadStat {
    /// Nanoseconds in each [`tstate`](crate::tstate), indexed by state.
    pub state_ns: [u64; 4],
    /// Switches out to sleep.
    pub voluntary: u64,
    /// Switches out while still runnable (preemptions).
    pub involuntary: u64,
    /// Wakeups of traced threads it made.
    pub wakeups_sent: u64,
    /// Wakeups it received from traced threads.
    pub wakeups_received: u64,
    /// Times it ran on another CPU than the last.
    pub migrations: u64,
    /// System calls.
    pub syscalls: u64,
    /// Time inside system calls.
    pub syscall_ns: u64,
    /// Waits for a CPU that ended (each run begins with one), by length: bucket `i` counts `[2^(i + WAIT_SHIFT), 2^(i + WAIT_SHIFT + 1))`
    /// ns, the first also shorter ones, the last also longer ones. 32-bit counters:
    /// user space reads them far more often than 4 billion waits.
    pub wait_hist: [u32; WAIT_BUCKETS],
}

/// Buckets of [`ThreadStat::wait_hist`]: 1 us to 0.5 s and beyond, in 80 bytes a thread.
pub const WAIT_BUCKETS: usize = 20;
/// log2 of the first bucket's lower bound, in ns.
pub const WAIT_SHIFT: u32 = 10;

/// Calls of probed functions tracked per thread in counting mode (deeper nesting is
/// counted in depth but not timed).
pub const MAX_DEPTH: usize = 16;

/// Counting mode, per thread: the state it is in, since when, its last CPU, the start
/// times of its system call and probed calls in progress, and its counters. Updated in
/// place, so the hot path makes no map insertions, and one lookup serves an event.
///
/// One entry per thread, not per CPU: every update is serialized for a thread, as it
/// happens either in its own context or under its run-queue or wakeup lock; a wakeup of
/// a thread that is still running touches only `wakeups_received`, a word the thread
/// itself does not write.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadSched {
    /// When its current state began, CLOCK_MONOTONIC ns.
    pub since: u64,
    /// Its current state: one of [`tstate`](crate::tstate).
    pub state: u32,
    /// The CPU it last ran on.
    pub cpu: u32,
    /// Entry time of the system call in progress, 0 when none.
    pub sys_start: u64,
    /// The task's `sum_exec_runtime` at its last switch (in or out), or from /proc at
    /// attach; 0 when unknown.
    pub exec_base: u64,
    /// When `exec_base` was read from /proc at attach, CLOCK_MONOTONIC ns: the charge
    /// since cannot exceed the time since by much (the read may be stale); 0 once the
    /// kernel read it at a switch, where the charge since is exact.
    pub exec_at: u64,
    /// Probed calls in progress.
    pub depth: u32,
    /// 1 once the thread has exited: user space reports it a last time and removes it.
    pub exited: u32,
    /// Entry times of the probed calls in progress, innermost last.
    pub func_start: [u64; MAX_DEPTH],
    /// Their probe-table ids.
    pub func_id: [u32; MAX_DEPTH],
    /// Its cumulative counters.
    pub stat: ThreadStat,
}

crate::records::exact_layout! {
    FuncStat { u64, u64, u64, u64, [u32; HIST_BUCKETS], u64 }
    SysStat { u64, u64, u64, u64, [u32; HIST_BUCKETS] }
    ThreadStat { [u64; 4], u64, u64, u64, u64, u64, u64, u64, [u32; WAIT_BUCKETS] }
    ThreadSched { u64, u32, u32, u64, u64, u64, u32, u32, [u64; MAX_DEPTH], [u32; MAX_DEPTH], ThreadStat }
}

/// Distinct stacks `tracer stat --stacks` keeps in the kernel (each side: user, kernel).
pub const MAX_STAT_STACKS: u32 = 8192;

/// A stack counted in the kernel by `tracer stat --stacks` (map `STACK_COUNTS`, values:
/// how many times): a process, why it was taken ([`crate::stack_cause`]), and its user and
/// kernel stacks as ids of map `STACK_IDS` (negative: none, the helper's error).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackKey {
    /// The process.
    pub tgid: u32,
    /// One of [`crate::stack_cause`].
    pub cause: u32,
    /// The user stack's id, by frame pointers.
    pub user: i64,
    /// The kernel stack's id.
    pub kernel: i64,
    /// When the user stack has no id because its slot held another stack (`user` is
    /// `-EEXIST`): the user instruction pointer, so that the function it was in is still
    /// known; else 0, so that one stack is one key.
    pub ip: u64,
}

crate::records::exact_layout! {
    StackKey { u32, u32, i64, i64, u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_tile_the_durations_each_within_an_eighth_of_its_power_of_two() {
        assert_eq!(HIST_BUCKETS, 272);
        let mut next = 0;
        for i in 0..HIST_BUCKETS {
            let (lo, hi) = hist_bounds(i);
            assert_eq!(lo, next, "bucket {i} starts where {} ended", i.max(1) - 1);
            assert!(hi >= lo);
            assert_eq!(hist_bucket(lo), i);
            assert_eq!(hist_bucket(hi), i);
            if i < HIST_BUCKETS - 1 {
                assert!((hi - lo + 1) * 8 <= lo.max(8), "bucket {i}: {lo}..={hi}");
                next = hi + 1;
            }
        }
        assert_eq!(hist_bounds(HIST_BUCKETS - 1), (15 << 32, u64::MAX));
        assert_eq!(hist_bucket(u64::MAX), HIST_BUCKETS - 1);
        assert_eq!(hist_bounds(HIST_BUCKETS + 5), hist_bounds(HIST_BUCKETS - 1));
        for ns in [
            0u64,
            1,
            15,
            16,
            17,
            1000,
            262_144,
            265_000,
            1 << 35,
            (1 << 36) - 1,
        ] {
            let (lo, hi) = hist_bounds(hist_bucket(ns));
            assert!(lo <= ns && ns <= hi, "{ns} in {lo}..={hi}");
        }
    }
}
