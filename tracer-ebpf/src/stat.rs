//! Counting mode (`tracer stat`): the same hooks aggregate in per-CPU maps instead of
//! sending records, so nothing crosses to user space per event.
//!
//! Thread states are a small state machine per thread (`SCHED`: state, since, CPU) driven
//! by switches and wakeups; closed intervals accumulate in the same entry, and user space
//! adds the open one when it reads. The entry also holds the start times of the system
//! call and probed calls in progress and the thread's counters: it is updated in place, so
//! no event costs a map insertion (the expensive operation of a BPF hash map), and the
//! lookup that finds it is also the filter's answer (see `counted` in main.rs). With
//! `Config::sample_every = N`, one call in N of each
//! function is also recorded in full (entry, exit, and the thread's syscalls and switches
//! while inside it) through the ring buffers.
//!
//! Functions whose returns are probed at their instructions (Go's, whose stacks a
//! uretprobe breaks, and native ones in programs that throw exceptions, which a
//! uretprobe ends) have no sessions: their entry probe counts and chooses as a session's
//! entry does, and each return instruction's probe closes the timed calls it finds in
//! `FRAME_CALLS`, matched by frame.

use aya_ebpf::{
    bindings::BPF_ANY,
    btf_maps::{HashMap, LruHashMap, PerCpuArray},
    helpers::generated::{bpf_get_prandom_u32, bpf_get_smp_processor_id},
    macros::btf_map,
};
use tracer_abi::*;

use crate::shared::bump;

#[btf_map]
static FUNC_STATS: PerCpuArray<FuncStat, { MAX_FUNCS as usize }> = PerCpuArray::new();

#[btf_map]
static SYS_STATS: PerCpuArray<SysStat, { MAX_SYSCALLS as usize }> = PerCpuArray::new();

/// Per thread: its state machine and counters (see [`ThreadSched`]).
#[btf_map]
static SCHED: HashMap<u32, ThreadSched, { MAX_THREADS as usize }> = HashMap::new();

/// Threads inside a sampled call (tid -> function id): their events are recorded.
#[btf_map]
static SAMPLED: HashMap<u32, u32, { MAX_THREADS as usize }> = HashMap::new();

/// Calls seen per function on this CPU, to pick one in N for sampling.
#[btf_map]
static SAMPLE_TICK: PerCpuArray<u64, { MAX_FUNCS as usize }> = PerCpuArray::new();

/// Per function and CPU, the number of the call `--time-every` times in the current
/// block of calls (see [`picked`]).
#[btf_map]
static TIME_PICK: PerCpuArray<u64, { MAX_FUNCS as usize }> = PerCpuArray::new();

/// Per function and CPU, `--time-budget`'s window: its number, calls and timed calls so
/// far, and the stride that spreads its timed calls (the last window's calls / budget).
#[repr(C)]
#[derive(Clone, Copy)]
struct Budget {
    window: u64,
    calls: u64,
    timed: u64,
    stride: u64,
    /// The call of the current stride that is timed (see [`picked`]).
    pick: u64,
}

#[btf_map]
static BUDGET: PerCpuArray<Budget, { MAX_FUNCS as usize }> = PerCpuArray::new();

/// Whether this call of `func` is timed under a budget of `allowance` timed calls per
/// window and CPU: one in `stride`, never more than the allowance.
#[inline(always)]
fn within_budget(func: u32, now: u64, allowance: u32) -> bool {
    let Some(b) = BUDGET.get_ptr_mut(func) else {
        return false;
    };
    let w = now >> BUDGET_WINDOW_SHIFT;
    // SAFETY: per-CPU slot.
    unsafe {
        if (*b).window != w {
            // After a window without calls, the rate is not known: the first calls are
            // timed until the allowance is spent.
            (*b).stride = if (*b).window + 1 == w {
                (*b).calls / allowance as u64
            } else {
                0
            };
            (*b).window = w;
            (*b).calls = 0;
            (*b).timed = 0;
        }
        (*b).calls += 1;
        let stride = if (*b).stride == 0 { 1 } else { (*b).stride };
        if (*b).timed < allowance as u64 && picked(&mut (*b).pick, stride, (*b).calls) {
            (*b).timed += 1;
            return true;
        }
    }
    false
}

/// Whether call `n` (counted from 1) is the one timed of its block of `k` calls, the
/// block's call at an offset drawn at its first one (into `*pick`). Never a fixed one in
/// `k`: calls that alternate in kind (a non-blocking accept failing with EAGAIN every
/// other call) then had all their timed calls of one kind, and the errors estimated from
/// them were none, or all.
#[inline(always)]
fn picked(pick: &mut u64, k: u64, n: u64) -> bool {
    if k <= 1 {
        return true;
    }
    if n % k == 1 {
        // SAFETY: helper without preconditions.
        *pick = n + unsafe { bpf_get_prandom_u32() } as u64 % k;
    }
    n == *pick
}

#[inline(always)]
fn cpu() -> u32 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_smp_processor_id() }
}

/// Bucket of [`ThreadStat::wait_hist`] of a wait of `ns`.
#[inline(always)]
fn wait_bucket(ns: u64) -> usize {
    let b = log2_bucket(ns).saturating_sub(WAIT_SHIFT as usize);
    if b >= WAIT_BUCKETS {
        WAIT_BUCKETS - 1
    } else {
        b
    }
}

#[inline(always)]
fn log2_bucket(ns: u64) -> usize {
    63 - (ns | 1).leading_zeros() as usize
}

/// [`hist_bucket`], bounded for the verifier: the compiler proves the bound and drops the
/// check, which the verifier, unable to follow the leading-zeros arithmetic, needs; read
/// through memory, the value is one the compiler cannot reason about.
#[inline(always)]
fn latency_bucket(ns: u64) -> usize {
    let b = hist_bucket(ns);
    // SAFETY: a read of a local.
    let b = unsafe { core::ptr::read_volatile(&b) };
    if b >= HIST_BUCKETS {
        HIST_BUCKETS - 1
    } else {
        b
    }
}

/// The entry of `tid` if it has a live one (not one left by a thread that exited): proof
/// that it is traced.
#[inline(always)]
pub fn live(tid: u32) -> Option<*mut ThreadSched> {
    let t = SCHED.get_ptr_mut(tid)?;
    // SAFETY: our own map's value.
    (unsafe { (*t).exited } == 0).then_some(t)
}

/// A fresh entry for traced thread `tid`, in `state` since `now` on this CPU.
#[inline(always)]
pub fn create(tid: u32, state: u32, now: u64) -> Option<*mut ThreadSched> {
    if let Some(t) = SCHED.get_ptr_mut(tid) {
        // The id of a thread that exited, reused before user space reported it: the state
        // machine starts afresh and the counters carry on (the two threads share a window).
        // SAFETY: our own map's value.
        unsafe {
            (*t).since = now;
            (*t).state = state;
            (*t).cpu = cpu();
            (*t).sys_start = 0;
            (*t).exec_base = 0;
            (*t).depth = 0;
            (*t).exited = 0;
        }
        return Some(t);
    }
    // Inserted from a global, not built on the stack: the switch creates two threads'
    // entries, which would not fit in its 512 bytes.
    if SCHED.insert(tid, &FRESH, BPF_ANY as u64).is_err() {
        bump(counter::STAT_FULL);
        return None;
    }
    let t = SCHED.get_ptr_mut(tid)?;
    // SAFETY: our own map's value.
    unsafe {
        (*t).since = now;
        (*t).state = state;
        (*t).cpu = cpu();
    }
    Some(t)
}

/// A thread's entry before its first state: all zero.
// SAFETY: every field of ThreadSched is an integer or an array of integers.
static FRESH: ThreadSched = unsafe { core::mem::zeroed() };

/// The entry of a thread that is running: probed calls are made only by the traced
/// process, so whoever makes one is traced.
#[inline(always)]
fn running_entry(tid: u32, now: u64) -> Option<*mut ThreadSched> {
    live(tid).or_else(|| create(tid, tstate::RUNNING, now))
}

/// True when `tid` is inside a sampled call (its events go to the ring buffers too).
#[inline(always)]
pub fn sampled(tid: u32) -> bool {
    SAMPLED.get_ptr(tid).is_some()
}

/// A function was entered; returns true when this call is sampled.
#[inline(always)]
pub fn func_entry(tid: u32, func: u32, now: u64, sample_every: u32) -> bool {
    if let Some(t) = running_entry(tid, now) {
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
    if let Some(t) = live(tid) {
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
        if let Some(start) = start {
            if let Some(s) = FUNC_STATS.get_ptr_mut(func) {
                // SAFETY: per-CPU slot.
                unsafe { (*s).calls += 1 };
            }
            timed(func, now.saturating_sub(start), ret);
        }
    }
    // SAFETY: a value of our own map.
    if sample_every != 0 && SAMPLED.get_ptr(tid).is_some_and(|f| unsafe { *f } == func) {
        let _ = SAMPLED.remove(tid);
        return true;
    }
    false
}

/// A timed call of `func` that took `dt` and returned `ret`.
#[inline(always)]
fn timed(func: u32, dt: u64, ret: u64) {
    if let Some(s) = FUNC_STATS.get_ptr_mut(func) {
        // SAFETY: per-CPU slot.
        unsafe {
            (*s).timed += 1;
            (*s).errors += ((ret as i64) < 0) as u64;
            (*s).total_ns += dt;
            (*s).hist[latency_bucket(dt)] += 1;
        }
    }
}

/// What a session's entry decided for a call.
pub struct Chosen {
    /// Its return is probed: it is timed.
    pub timed: bool,
    /// It is recorded in full (`--sample`).
    pub recorded: bool,
}

/// Counts a call of `func` (a USDT probe's hit too); returns how many this CPU has
/// counted, None when `func` is out of the table.
#[inline(always)]
pub fn count(func: u32) -> Option<u64> {
    let s = FUNC_STATS.get_ptr_mut(func)?;
    // SAFETY: per-CPU slot.
    unsafe {
        (*s).calls += 1;
        Some((*s).calls)
    }
}

/// How many calls of `func` this CPU has counted, None when `func` is out of the table.
#[inline(always)]
fn counted_so_far(func: u32) -> Option<u64> {
    // SAFETY: per-CPU slot.
    FUNC_STATS.get_ptr(func).map(|s| unsafe { (*s).calls })
}

/// Whether a call of `func`, the `n`th on this CPU, entered at `now`, is timed: one in
/// `c.time_every`, or those `c.time_budget` allows.
#[inline(always)]
fn chosen(func: u32, n: u64, now: u64, c: &Config) -> bool {
    if c.time_budget != 0 {
        within_budget(func, now, c.time_budget)
    } else if c.time_every == 0 {
        false
    } else {
        match TIME_PICK.get_ptr_mut(func) {
            // SAFETY: per-CPU slot.
            Some(p) => picked(unsafe { &mut *p }, c.time_every as u64, n),
            None => false,
        }
    }
}

/// True for the first of every `k` calls (never when `k` is 0).
#[inline(always)]
fn every(k: u32, n: u64) -> bool {
    k != 0 && n % k as u64 == 1 % k as u64
}

/// A session's entry into `func` by `tid` at `now`: the call is counted (unless
/// `counts` is false: a probe of its own counts it, in this trap, before or after), and
/// one in `c.time_every` (per CPU) is timed, or those `c.time_budget` allows; one in
/// `c.sample_every` (if not 0) recorded in full.
#[inline(always)]
pub fn session_entry(tid: u32, func: u32, now: u64, c: &Config, counts: bool) -> Chosen {
    let n = match counts {
        true => count(func),
        false => counted_so_far(func),
    };
    let Some(n) = n else {
        return Chosen {
            timed: false,
            recorded: false,
        };
    };
    let recorded = every(c.sample_every, n) && !sampled(tid);
    if recorded {
        let _ = SAMPLED.insert(tid, func, BPF_ANY as u64);
    }
    Chosen {
        timed: chosen(func, n, now, c) || recorded,
        recorded,
    }
}

/// A session's return from a timed call of `func` entered at `start`; true when the
/// call was recorded in full (its exit is recorded too).
#[inline(always)]
pub fn session_return(tid: u32, func: u32, start: u64, ret: u64, now: u64) -> bool {
    if start != 0 {
        timed(func, now.saturating_sub(start), ret);
    }
    // SAFETY: a value of our own map.
    if SAMPLED.get_ptr(tid).is_some_and(|f| unsafe { *f } == func) {
        let _ = SAMPLED.remove(tid);
        return true;
    }
    false
}

/// Traced thread `t` entered a system call.
#[inline(always)]
pub fn sys_enter(t: *mut ThreadSched, now: u64) {
    // SAFETY: our own map's value, written only by the thread it describes.
    unsafe { (*t).sys_start = now };
}

/// Traced thread `t` returned from system call `nr`.
#[inline(always)]
pub fn sys_exit(t: *mut ThreadSched, nr: u32, ret: i64, now: u64) {
    // A call already in progress at attach has no start: it still counts (calls, bytes,
    // errors stay exact), with no time.
    // SAFETY: as in `sys_enter`.
    let dt = unsafe {
        let start = (*t).sys_start;
        (*t).sys_start = 0;
        let dt = if start == 0 {
            0
        } else {
            now.saturating_sub(start)
        };
        (*t).stat.syscalls += 1;
        (*t).stat.syscall_ns += dt;
        dt
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
            if dt > 0 {
                (*s).hist[latency_bucket(dt)] += 1;
            }
        }
    }
}

/// How far the kernel's charge since a base read from /proc at attach may exceed the
/// time since that read (see `transition`).
const EXEC_SLACK_NS: u64 = 100_000;

/// Closes the interval thread `t` is in at `now` and opens one in `state` on `cpu`;
/// returns the CPU it was last on. `exec` is the task's `sum_exec_runtime` at a switch
/// (0 elsewhere, or when unread).
///
/// Running time is the kernel's own charge, the growth of `sum_exec_runtime` since the
/// last switch: a run ends where the kernel stopped charging the thread, not at the
/// switch's timestamp. Between the two the kernel picks the next task, which, when the
/// CPU is about to idle, includes balancing load across CPUs (microseconds), and
/// hypervisor steal is never charged; timestamps alone put all that in the running time,
/// more than schedstat says (docs/performance.md). The charge can also exceed the time
/// between our two switch stamps: the kernel starts charging when it picks the thread, a
/// moment before the switch-in's tracepoint. The difference goes to the state the thread
/// switched to (`since` runs ahead of the clock until an interval off the CPU absorbs
/// it), so states still add up to the wall time.
///
/// The charge also recovers a run whose switch-in was never reported: a thread leaves a
/// CPU while we hold it ready or blocked. Some kernels run tasks whose switches out no
/// program sees (a VM's agent here: docs/performance.md); the run that follows one is
/// the charge, the rest of the interval its old state, ready time first.
#[inline(always)]
fn transition(t: *mut ThreadSched, state: u32, now: u64, cpu: u32, exec: u64) -> u32 {
    // SAFETY: our own map's value; a thread's switches and wakeups are serialized by the
    // scheduler's locks.
    unsafe {
        let (old_state, since, old_cpu, base) = ((*t).state, (*t).since, (*t).cpu, (*t).exec_base);
        let span = now.saturating_sub(since);
        // The charge since the base, unless it cannot be this thread's since then (a
        // base from /proc at attach, stale by more than the slack). A base read at a
        // switch is the kernel's own: its charge since is exact even when it exceeds our
        // timestamps by more (a hypervisor's steal between the kernel's pick and the
        // switch-in's tracepoint is charged as running, and schedstat says so).
        let read_at = (*t).exec_at;
        let charged = (exec != 0 && base != 0 && exec >= base)
            .then(|| exec - base)
            .filter(|c| read_at == 0 || *c <= now.saturating_sub(read_at) + EXEC_SLACK_NS);
        let (running, other) = match charged {
            Some(c) if old_state == tstate::RUNNING => (c, 0),
            Some(c) => (c, span.saturating_sub(c)),
            None if old_state == tstate::RUNNING => (span, 0),
            None => (0, span),
        };
        (*t).stat.state_ns[tstate::RUNNING as usize] += running;
        // The index is masked into range; black_box keeps the mask, which LLVM would drop
        // where the caller has compared the state (the verifier cannot see why).
        (*t).stat.state_ns[(core::hint::black_box(old_state) & 3) as usize] += other;
        if old_state == tstate::READY {
            (*t).stat.wait_hist[wait_bucket(other)] += 1;
        }
        (*t).since = since + running + other;
        (*t).state = state;
        (*t).cpu = cpu;
        if exec != 0 {
            (*t).exec_base = exec;
            (*t).exec_at = 0;
        }
        old_cpu
    }
}

/// `prev` leaves the CPU in `prev_state`, `next` takes it (each only if traced, with its
/// `sum_exec_runtime`).
#[inline(always)]
pub fn switch(
    prev: Option<(*mut ThreadSched, u64)>,
    prev_state: u32,
    next: Option<(*mut ThreadSched, u64)>,
    now: u64,
    exiting: bool,
) {
    let cpu = cpu();
    if let Some((t, exec)) = prev {
        // An exiting thread's last interval is never read: any sleeping state will do.
        let state = match state_after_switch(prev_state) {
            tstate::EXITED => tstate::BLOCKED,
            s => s,
        };
        let preempted = state == tstate::READY;
        transition(t, state, now, cpu, exec);
        // SAFETY: as in `transition`.
        unsafe {
            if preempted {
                (*t).stat.involuntary += 1;
            } else {
                (*t).stat.voluntary += 1;
            }
            if exiting {
                // Its counters stay for user space to report, which then removes it.
                (*t).exited = 1;
            }
        }
    }
    if let Some((t, exec)) = next {
        if transition(t, tstate::RUNNING, now, cpu, exec) != cpu {
            // SAFETY: as in `transition`.
            unsafe { (*t).stat.migrations += 1 };
        }
    }
}

/// `waker` (if traced) woke the traced `wakee`: it becomes ready to run.
#[inline(always)]
pub fn wakeup(waker: Option<*mut ThreadSched>, wakee: *mut ThreadSched, now: u64) {
    // SAFETY: as in `transition`.
    unsafe {
        let state = (*wakee).state;
        if state == tstate::BLOCKED || state == tstate::IO {
            let cpu = (*wakee).cpu;
            transition(wakee, tstate::READY, now, cpu, 0);
        }
        (*wakee).stat.wakeups_received += 1;
        if let Some(waker) = waker {
            (*waker).stat.wakeups_sent += 1;
        }
    }
}

/// Calls being timed: by process (a machine-wide probe's goroutine addresses repeat
/// across processes of one binary), stack (a goroutine, or a native thread: see
/// `calls::thread_stack`) and function.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FrameKey {
    stack: u64,
    tgid: u32,
    func: u32,
}

/// The timed calls of one function in progress on one stack, innermost last: where each
/// one's frame is (its height, which grows with depth: for a goroutine its stack's top
/// minus the stack pointer at its entry, which Go's moving of stacks keeps; for a thread
/// the stack pointer negated) and when it started. Matching a return to its call by
/// height, not by counting entries and returns, keeps the times right when a panic or an
/// exception leaves calls without a return: a call whose frame is at or below the one
/// entering or returning is over.
#[repr(C)]
#[derive(Clone, Copy)]
struct FrameCalls {
    timed: u32,
    _pad: u32,
    height: [u64; FRAME_LEVELS],
    start: [u64; FRAME_LEVELS],
}

/// Timed calls paired by frame in progress. Least recently used entries make room: a
/// goroutine that dies inside a timed call (a panic, `runtime.Goexit`), or a thread's
/// call that an exception ends with none of the function's calls after it, leaves its
/// entry behind.
#[btf_map]
static FRAME_CALLS: LruHashMap<FrameKey, FrameCalls, { MAX_FRAME_CALLS as usize }> =
    LruHashMap::new();

/// How many of the timed calls of `e` are still under way: the innermost ones whose
/// frame `over` says is gone are dropped.
///
/// SAFETY: `e` is our own map's value, written only by its stack's goroutine or thread.
#[inline(always)]
unsafe fn frame_live(e: *const FrameCalls, over: impl Fn(u64) -> bool) -> u32 {
    let mut k = (*e).timed;
    for _ in 0..FRAME_LEVELS {
        if k == 0 {
            break;
        }
        let i = core::hint::black_box((k - 1) as usize) & (FRAME_LEVELS - 1);
        if !over((*e).height[i]) {
            break;
        }
        k -= 1;
    }
    k
}

/// Entry of function `func` on `stack` (a goroutine or a thread) of process `tgid` at
/// `now`, its frame at `height()`: counted, and timed as a session's entry would choose.
/// An untimed call with no timed one of the same function under way on its stack leaves
/// nothing, so that
/// its returns cost one failed lookup; a timed call inside a timed one (recursion) takes
/// one of its `FRAME_LEVELS` slots.
#[inline(always)]
pub fn frame_entry(
    tgid: u32,
    func: u32,
    stack: u64,
    height: impl Fn() -> u64,
    exact: bool,
    now: u64,
    c: &Config,
) {
    let Some(n) = count(func) else {
        return;
    };
    let key = FrameKey { stack, tgid, func };
    if let Some(e) = FRAME_CALLS.get_ptr_mut(&key) {
        let h = height();
        // SAFETY: our own map's value, written only by `stack`'s goroutine (which runs on
        // one thread at a time) or thread.
        let k = unsafe {
            // Deeper timed calls are over (a greater height is deeper: the stack grows
            // down from its top), and so is one whose frame this call now takes; not in
            // a program that switches stacks (`exact`), where they may be on another.
            let mut k = match exact {
                true => (*e).timed.min(FRAME_LEVELS as u32),
                false => frame_live(e, |at| at >= h),
            };
            if chosen(func, n, now, c) {
                if (k as usize) < FRAME_LEVELS {
                    let i = core::hint::black_box(k as usize) & (FRAME_LEVELS - 1);
                    (*e).height[i] = h;
                    (*e).start[i] = now;
                    k += 1;
                } else {
                    untimed(func);
                }
            }
            (*e).timed = k;
            k
        };
        if k == 0 {
            let _ = FRAME_CALLS.remove(&key);
            bump(counter::FRAME_CLOSED);
        }
        return;
    }
    if !chosen(func, n, now, c) {
        return;
    }
    let mut call = FrameCalls {
        timed: 1,
        _pad: 0,
        height: [0; FRAME_LEVELS],
        start: [0; FRAME_LEVELS],
    };
    call.height[0] = height();
    call.start[0] = now;
    if FRAME_CALLS.insert(&key, &call, BPF_ANY as u64).is_err() {
        untimed(func);
        bump(counter::STAT_FULL);
    } else {
        bump(counter::FRAME_OPENED);
    }
}

/// A call of `func` chosen to be timed that could not be: its recursion's slots were
/// taken.
#[inline(always)]
fn untimed(func: u32) {
    if let Some(s) = FUNC_STATS.get_ptr_mut(func) {
        // SAFETY: per-CPU slot.
        unsafe { (*s).untimed += 1 };
    }
}

/// A return instruction of function `func` on `stack` of process `tgid`, returning `ret`
/// at `now` from the frame at `height()`: closes the timed call whose frame that is, if
/// any, and drops deeper ones (left by a panic or an exception); with `exact` (a program
/// that switches stacks), the timed call at that frame wherever it is, alone.
#[inline(always)]
pub fn frame_return(
    tgid: u32,
    func: u32,
    stack: u64,
    height: impl Fn() -> u64,
    exact: bool,
    ret: u64,
    now: u64,
) {
    let key = FrameKey { stack, tgid, func };
    let Some(e) = FRAME_CALLS.get_ptr_mut(&key) else {
        return;
    };
    let h = height();
    // SAFETY: as in `frame_entry`.
    let (k, start) = unsafe {
        if exact {
            exact_return(e, h)
        } else {
            innermost_return(e, h)
        }
    };
    if start != 0 {
        timed(func, now.saturating_sub(start), ret);
    }
    if k == 0 {
        let _ = FRAME_CALLS.remove(&key);
        bump(counter::FRAME_CLOSED);
    }
}

/// Closes the timed call of `e` at height `h` wherever it is (its slot takes the last
/// one's): the calls still timed, and the start of the one closed (0: none).
///
/// SAFETY: as [`frame_live`].
#[inline(always)]
unsafe fn exact_return(e: *mut FrameCalls, h: u64) -> (u32, u64) {
    let k = (*e).timed.min(FRAME_LEVELS as u32);
    for j in 0..FRAME_LEVELS {
        if j as u32 >= k {
            break;
        }
        let i = core::hint::black_box(j) & (FRAME_LEVELS - 1);
        if (*e).height[i] == h {
            let start = (*e).start[i];
            let last = core::hint::black_box(k as usize - 1) & (FRAME_LEVELS - 1);
            (*e).height[i] = (*e).height[last];
            (*e).start[i] = (*e).start[last];
            (*e).timed = k - 1;
            return (k - 1, start);
        }
    }
    (k, 0)
}

/// Closes the innermost timed call of `e` if it is at height `h`, after dropping deeper
/// ones: the calls still timed, and the start of the one closed (0: none).
///
/// SAFETY: as [`frame_live`].
#[inline(always)]
unsafe fn innermost_return(e: *mut FrameCalls, h: u64) -> (u32, u64) {
    {
        let mut k = frame_live(e, |at| at > h);
        let i = core::hint::black_box(k.wrapping_sub(1) as usize) & (FRAME_LEVELS - 1);
        let start = if k > 0 && (*e).height[i] == h {
            k -= 1;
            (*e).start[i]
        } else {
            0
        };
        (*e).timed = k;
        (k, start)
    }
}
