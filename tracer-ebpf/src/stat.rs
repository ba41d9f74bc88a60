//! Counting mode (`tracer stat`): the same hooks aggregate in per-CPU maps instead of
//! sending records, so nothing crosses to user space per event.
//!
//! Thread states are a small state machine per thread (`SCHED`: state, since, CPU) driven
//! by switches and wakeups; closed intervals accumulate in `THREAD_STATS`, and user space
//! adds the open one when it reads. The same per-thread entry holds the start times of the
//! system call and probed calls in progress: it is updated in place, so no event costs a
//! map insertion (the expensive operation of a BPF hash map). With `Config::sample_every = N`, one call in N of each
//! function is also recorded in full (entry, exit, and the thread's syscalls and switches
//! while inside it) through the ring buffers.

use aya_ebpf::{
    bindings::BPF_ANY,
    btf_maps::{HashMap, PerCpuArray, PerCpuHashMap},
    helpers::generated::bpf_get_smp_processor_id,
    macros::btf_map,
};
use tracer_abi::*;

use crate::programs::bump;

#[btf_map]
static FUNC_STATS: PerCpuArray<FuncStat, { MAX_FUNCS as usize }> = PerCpuArray::new();

#[btf_map]
static SYS_STATS: PerCpuArray<SysStat, { MAX_SYSCALLS as usize }> = PerCpuArray::new();

#[btf_map]
static THREAD_STATS: PerCpuHashMap<u32, ThreadStat, { MAX_THREADS as usize }> =
    PerCpuHashMap::new();

/// Per thread: its current state, since when, on which CPU it last ran.
#[btf_map]
static SCHED: HashMap<u32, ThreadSched, { MAX_THREADS as usize }> = HashMap::new();

/// Threads inside a sampled call (tid -> function id): their events are recorded.
#[btf_map]
static SAMPLED: HashMap<u32, u32, { MAX_THREADS as usize }> = HashMap::new();

/// Calls seen per function on this CPU, to pick one in N for sampling.
#[btf_map]
static SAMPLE_TICK: PerCpuArray<u64, { MAX_FUNCS as usize }> = PerCpuArray::new();

#[inline(always)]
fn cpu() -> u32 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_smp_processor_id() }
}

#[inline(always)]
fn log2_bucket(ns: u64) -> usize {
    let b = 63 - (ns | 1).leading_zeros() as usize;
    if b >= HIST_BUCKETS {
        HIST_BUCKETS - 1
    } else {
        b
    }
}

/// The thread's statistics slot on this CPU, created on first use.
#[inline(always)]
fn thread_stat(tid: u32) -> Option<*mut ThreadStat> {
    if let Some(p) = THREAD_STATS.get_ptr_mut(tid) {
        return Some(p);
    }
    if THREAD_STATS
        .insert(tid, ThreadStat::default(), BPF_ANY as u64)
        .is_err()
    {
        bump(counter::STAT_FULL);
        return None;
    }
    THREAD_STATS.get_ptr_mut(tid)
}

/// The thread's entry in `SCHED`, created (running since `now`, on this CPU) if it has
/// none yet: a thread makes system calls and probed calls only while running.
#[inline(always)]
fn sched_entry(tid: u32, now: u64) -> Option<*mut ThreadSched> {
    if let Some(p) = SCHED.get_ptr_mut(tid) {
        return Some(p);
    }
    let fresh = ThreadSched {
        since: now,
        state: tstate::RUNNING,
        cpu: cpu(),
        sys_start: 0,
        exec_base: 0,
        depth: 0,
        _pad: 0,
        func_start: [0; MAX_DEPTH],
        func_id: [0; MAX_DEPTH],
    };
    if SCHED.insert(tid, fresh, BPF_ANY as u64).is_err() {
        bump(counter::STAT_FULL);
        return None;
    }
    SCHED.get_ptr_mut(tid)
}

/// True when `tid` is inside a sampled call (its events go to the ring buffers too).
#[inline(always)]
pub fn sampled(tid: u32) -> bool {
    SAMPLED.get_ptr(tid).is_some()
}

/// A function was entered; returns true when this call is sampled.
#[inline(always)]
pub fn func_entry(tid: u32, func: u32, now: u64, sample_every: u32) -> bool {
    if let Some(t) = sched_entry(tid, now) {
        // SAFETY: our own map's value, written only by the thread it describes.
        unsafe {
            let d = (*t).depth as usize;
            if d < MAX_DEPTH {
                (*t).func_start[d] = now;
                (*t).func_id[d] = func;
            }
            (*t).depth = (*t).depth.saturating_add(1);
        }
    }
    if sample_every == 0 || sampled(tid) {
        return false;
    }
    let Some(tick) = SAMPLE_TICK.get_ptr_mut(func) else {
        return false;
    };
    // SAFETY: per-CPU slot.
    let n = unsafe {
        *tick += 1;
        *tick
    };
    if n % sample_every as u64 != 1 % sample_every as u64 {
        return false;
    }
    let _ = SAMPLED.insert(tid, func, BPF_ANY as u64);
    true
}

/// A function returned; returns true when the call was the sampled one.
#[inline(always)]
pub fn func_exit(tid: u32, func: u32, ret: u64, now: u64, sample_every: u32) -> bool {
    if let Some(t) = SCHED.get_ptr_mut(tid) {
        // SAFETY: as in `func_entry`.
        let start = unsafe {
            let d = (*t).depth;
            if d == 0 {
                // Entered before we attached: not timed, not counted.
                None
            } else {
                (*t).depth = d - 1;
                let i = (d - 1) as usize;
                (i < MAX_DEPTH && (*t).func_id[i] == func).then(|| (*t).func_start[i])
            }
        };
        if let (Some(start), Some(s)) = (start, FUNC_STATS.get_ptr_mut(func)) {
            let dt = now.saturating_sub(start);
            // SAFETY: per-CPU slot.
            unsafe {
                (*s).calls += 1;
                (*s).errors += ((ret as i64) < 0) as u64;
                (*s).total_ns += dt;
                (*s).hist[log2_bucket(dt)] += 1;
            }
        }
    }
    // SAFETY: a value of our own map.
    if sample_every != 0 && SAMPLED.get_ptr(tid).is_some_and(|f| unsafe { *f } == func) {
        let _ = SAMPLED.remove(tid);
        return true;
    }
    false
}

#[inline(always)]
pub fn sys_enter(tid: u32, now: u64) {
    if let Some(t) = sched_entry(tid, now) {
        // SAFETY: our own map's value, written only by the thread it describes.
        unsafe { (*t).sys_start = now };
    }
}

#[inline(always)]
pub fn sys_exit(tid: u32, nr: u32, ret: i64, now: u64) {
    // A call already in progress at attach has no start: it still counts (calls, bytes,
    // errors stay exact), with no time.
    let dt = match SCHED.get_ptr_mut(tid) {
        // SAFETY: as in `sys_enter`.
        Some(t) => unsafe {
            let start = (*t).sys_start;
            (*t).sys_start = 0;
            if start == 0 {
                0
            } else {
                now.saturating_sub(start)
            }
        },
        None => 0,
    };
    if let Some(s) = SYS_STATS.get_ptr_mut(nr) {
        // SAFETY: per-CPU slot.
        unsafe {
            (*s).calls += 1;
            if ret < 0 {
                (*s).errors += 1;
            } else {
                (*s).positive_sum += ret as u64;
            }
            (*s).total_ns += dt;
        }
    }
    if let Some(t) = thread_stat(tid) {
        // SAFETY: per-CPU slot.
        unsafe { (*t).syscalls += 1 };
    }
}

/// Closes the thread's current interval at `now` and opens one in `state`; returns the
/// CPU it was last on (if it had an entry) and its statistics slot on this CPU, looked up
/// once for the caller's counters too. `exec` is the task's `sum_exec_runtime` at a
/// switch (0 elsewhere, or when unread).
///
/// A run ends where the kernel stopped charging the thread, not at the switch's
/// timestamp: between the two the kernel picks the next task, which, when the CPU is about
/// to idle, includes balancing load across CPUs (microseconds), and hypervisor steal is
/// never charged. Timestamps alone put all that in the running time: 0.03-1.1% more than
/// schedstat's. That time goes to the state the thread switched to, in which it already
/// was, so states still add up to the wall time.
#[inline(always)]
fn transition(
    tid: u32,
    state: u32,
    now: u64,
    cpu: u32,
    exec: u64,
) -> (Option<u32>, Option<*mut ThreadStat>) {
    let base = if state == tstate::RUNNING { exec } else { 0 };
    let Some(t) = SCHED.get_ptr_mut(tid) else {
        let _ = sched_entry(tid, now).map(|t| {
            // SAFETY: our own map's value.
            unsafe {
                (*t).state = state;
                (*t).exec_base = base;
            }
        });
        return (None, thread_stat(tid));
    };
    // SAFETY: our own map's value; a thread's switches and wakeups are serialized by the
    // scheduler's run-queue lock.
    let (old_state, since, old_cpu, old_base) =
        unsafe { ((*t).state, (*t).since, (*t).cpu, (*t).exec_base) };
    let mut spent = now.saturating_sub(since);
    if old_state == tstate::RUNNING && old_base != 0 && exec >= old_base {
        spent = spent.min(exec - old_base);
    }
    let st = thread_stat(tid);
    if let Some(st) = st {
        // SAFETY: per-CPU slot; the index is masked into range.
        unsafe { (*st).state_ns[(old_state & 3) as usize] += spent };
    }
    // SAFETY: as above.
    unsafe {
        (*t).since = since + spent;
        (*t).state = state;
        (*t).cpu = cpu;
        (*t).exec_base = base;
    }
    (Some(old_cpu), st)
}

/// `prev` leaves the CPU in `prev_state`, `next` takes it (each only if traced, with its
/// `sum_exec_runtime`).
#[inline(always)]
pub fn switch(
    prev: Option<(u32, u64)>,
    prev_state: u32,
    next: Option<(u32, u64)>,
    now: u64,
    exiting: bool,
) {
    let cpu = cpu();
    if let Some((prev, exec)) = prev {
        let preempted = prev_state == 0 || prev_state & 0x100 != 0;
        let state = if preempted {
            tstate::READY
        } else if prev_state & 0x2 != 0 {
            tstate::IO
        } else {
            tstate::BLOCKED
        };
        if let (_, Some(t)) = transition(prev, state, now, cpu, exec) {
            // SAFETY: per-CPU slot.
            unsafe {
                if preempted {
                    (*t).involuntary += 1;
                } else {
                    (*t).voluntary += 1;
                }
            }
        }
        if exiting {
            let _ = SCHED.remove(prev);
        }
    }
    if let Some((next, exec)) = next {
        if let (Some(old), Some(t)) = transition(next, tstate::RUNNING, now, cpu, exec) {
            if old != cpu {
                // SAFETY: per-CPU slot.
                unsafe { (*t).migrations += 1 };
            }
        }
    }
}

/// `waker` (if traced) woke the traced `wakee`: it becomes ready to run.
#[inline(always)]
pub fn wakeup(waker: Option<u32>, wakee: u32, now: u64) {
    // SAFETY: a value of our own map.
    let (state, cpu) = SCHED
        .get_ptr(wakee)
        .map(|p| unsafe { ((*p).state, (*p).cpu) })
        .unwrap_or((tstate::BLOCKED, cpu()));
    let st = if state == tstate::BLOCKED || state == tstate::IO {
        transition(wakee, tstate::READY, now, cpu, 0).1
    } else {
        thread_stat(wakee)
    };
    if let Some(t) = st {
        // SAFETY: per-CPU slot.
        unsafe { (*t).wakeups_received += 1 };
    }
    if let Some(waker) = waker {
        if let Some(t) = thread_stat(waker) {
            // SAFETY: per-CPU slot.
            unsafe { (*t).wakeups_sent += 1 };
        }
    }
}
