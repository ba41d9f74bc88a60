//! Stacks (`--stacks`): the raw material of a traced thread's stack, taken on the CPU at a
//! perf event's rate (`stack_sample`) and where it blocks (from `sched_switch`).
//!
//! The kernel's frames come from `bpf_get_stack`: the kernel keeps frame pointers or ORC
//! for its own code. User frames cannot be walked here on binaries built without frame
//! pointers (most distributions' builds), so the user registers and the top of the user
//! stack go to the recorder, which unwinds them with the binaries' own unwind tables
//! (perf's `--call-graph dwarf`). The copy is read a page at a time: a non-sleeping
//! program cannot fault a page in, and one read of a range with an unreadable byte fails
//! whole; so the copy ends at the first unreadable page (the stack's end, mostly) and
//! keeps what it read. The record is built in a per-CPU scratch (cheaper per byte than the
//! ring's cold memory: docs/performance.md) and only its used part is sent.

use aya_ebpf::{
    bindings::{pt_regs, BPF_ANY, BPF_F_USER_STACK, BPF_RB_AVAIL_DATA, BPF_RB_NO_WAKEUP},
    btf_maps::{PerCpuArray, PerCpuHashMap, StackTrace},
    helpers::generated::{
        bpf_get_current_task_btf, bpf_get_smp_processor_id, bpf_get_stack, bpf_get_stackid,
        bpf_probe_read_user, bpf_ringbuf_query, bpf_task_pt_regs,
    },
    macros::{btf_map, btf_tracepoint, perf_event},
    programs::{BtfTracePointContext, PerfEventContext},
    EbpfContext,
};
use tracer_abi::*;

use crate::shared::{bump, config, counting, current, header, is_traced_tid, seen_tgid, EVENTS};

#[btf_map]
static STACK_SCRATCH: PerCpuArray<StackRaw, 1> = PerCpuArray::new();

/// `tracer stat --stacks`: stacks by frame pointers, interned by the kernel...
#[btf_map]
static STACK_IDS: StackTrace<{ MAX_STAT_STACKS as usize }> = StackTrace::new();

/// ...and how many times each (process, cause, user stack, kernel stack) was seen, per
/// CPU (no atomic add needed; the recorder sums them).
#[btf_map]
static STACK_COUNTS: PerCpuHashMap<StackKey, u64, { MAX_STAT_STACKS as usize }> =
    PerCpuHashMap::new();

/// An on-CPU sample (a software cpu-clock event on each CPU): the stack of the traced
/// thread it interrupted, if one was running.
#[perf_event]
pub fn stack_sample(ctx: PerfEventContext) -> u32 {
    let (tgid, tid) = current();
    if tid == 0 || !is_traced_tid(tid) {
        return 0;
    }
    if counting() {
        count(ctx.as_ptr(), tid, tgid, stack_cause::SAMPLE);
        return 0;
    }
    // SAFETY: the program's context, a `bpf_perf_event_data`.
    let period = unsafe { (*ctx.ctx).sample_period };
    capture(&ctx, tid, tgid, stack_cause::SAMPLE, period);
    0
}

/// What `bpf_get_stackid` returns for a stack whose slot holds another.
const EEXIST: i64 = -17;

/// Counting mode: counts the current thread's stacks in the kernel, walked by frame
/// pointers (`bpf_get_stackid`): a profile that can stay on for days, right where the
/// code keeps frame pointers (the kernel's does). A stack's id is its hash's slot in
/// `STACK_IDS`; a stack whose slot holds another keeps the error (`-EEXIST`) for an id,
/// so its samples are counted and said to have lost their frames, never given another
/// stack's (which `BPF_F_REUSE_STACKID` would do); a user stack keeps its instruction
/// pointer then, the function it was in. The recorder frees the slots of stacks no longer
/// seen.
#[inline(never)]
pub fn count(ctx: *mut core::ffi::c_void, tid: u32, tgid: u32, cause: u32) {
    if config().stacks == 0 {
        return;
    }
    let ids = core::ptr::addr_of!(STACK_IDS) as *mut core::ffi::c_void;
    // SAFETY: the program's context and our own stack-trace map.
    let user = unsafe { bpf_get_stackid(ctx, ids, BPF_F_USER_STACK as u64) };
    // SAFETY: as above.
    let kernel = unsafe { bpf_get_stackid(ctx, ids, 0) };
    let ip = match user {
        // SAFETY: the current task's user registers, saved at the top of its kernel stack
        // whether the event interrupted user or kernel code.
        EEXIST => unsafe {
            (*(bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs)).rip
        },
        _ => 0,
    };
    let key = StackKey {
        tgid: seen_tgid(tid, tgid),
        cause,
        user,
        kernel,
        ip,
    };
    if let Some(n) = STACK_COUNTS.get_ptr_mut(&key) {
        // SAFETY: this CPU's value of our own map; programs do not migrate while running.
        unsafe { *n += 1 };
    } else if STACK_COUNTS.insert(&key, &1, BPF_ANY as u64).is_err() {
        bump(counter::STAT_FULL);
    }
}

/// Counting mode's blocking stacks (`tracer stat --stacks`): a second program on
/// `sched_switch`, attached only then, so that the first keeps its stack for its own
/// counting.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_stacks(ctx: BtfTracePointContext) -> i32 {
    let (tgid, tid) = current();
    if !is_traced_tid(tid) {
        return 0;
    }
    let preempt: u64 = ctx.arg(0);
    let raw_state: u64 = ctx.arg(3);
    // A thread's last switch reports TASK_DEAD, which is not a blocking state.
    if blocks(switch_state(preempt & 0xff != 0, raw_state as u32, 0)) {
        count(ctx.as_ptr(), tid, tgid, stack_cause::BLOCK);
    }
    0
}

/// Whether a switch out in `prev_state` (the classic tracepoint's value) leaves the thread
/// waiting for something: its stack there says what for.
#[inline(always)]
pub fn blocks(prev_state: u32) -> bool {
    prev_state & task_state::REPORT != 0 && prev_state & task_state::EXITED == 0
}

/// Puts back into the copy of `raw` (`len` bytes from its `sp`) the return addresses
/// that pending uretprobes replaced with their trampoline's, as the kernel does for
/// perf's own user stacks ([`crate::returns`]): otherwise every stack through a function
/// probed for its return (the functions a user asks for, the ones a sample most likely
/// lands under) loses its caller there, and without frame pointers everything above. A
/// slot is mended only while it still holds the trampoline's address; a sample taken in
/// the trampoline itself is put where the function returned to.
#[inline(always)]
unsafe fn unhijack(raw: *mut StackRaw, len: usize) {
    let sp = (*raw).sp;
    crate::returns::each_pending(|i, slot, ret, trampoline| {
        // SAFETY: this CPU's scratch (see `capture`); `at` is masked below the copy's
        // size, past which it has a page of room.
        unsafe {
            if i == 0 && (*raw).ip.wrapping_sub(trampoline) < STACK_PAGE as u64 && slot < sp {
                (*raw).ip = ret;
            }
            let at = slot.wrapping_sub(sp);
            if at + 8 <= len as u64 {
                let p = (*raw)
                    .user
                    .as_mut_ptr()
                    .add(at as usize & (USER_STACK_BYTES - 1))
                    .cast::<u64>();
                if p.read_unaligned() == trampoline {
                    p.write_unaligned(ret);
                }
            }
        }
    });
}

/// Sends the current thread's stacks as a [`StackRaw`], or counts it as lost.
#[inline(never)]
pub fn capture<C: EbpfContext>(ctx: &C, tid: u32, tgid: u32, cause: u32, period: u64) {
    if config().stacks == 0 {
        return;
    }
    // SAFETY: helper without preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let Some(rb) = EVENTS.get(cpu) else {
        bump(counter::LOST);
        return;
    };
    // A stack is the largest record and the least needed: past a share of the ring,
    // stacks are shed (and counted) so that the records of events still fit. Blocking
    // stacks, of which a busy server makes thousands a second, yield first (a quarter of
    // the ring), so that the few hundred on-CPU samples a second (half) get through.
    let share = if cause == stack_cause::SAMPLE { 2 } else { 4 };
    let ring = rb as *const _ as *mut core::ffi::c_void;
    // SAFETY: the helper reads the ring's positions; `ring` is one of our ring buffers.
    if unsafe { bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA as u64) } > RING_BYTES as u64 / share {
        bump(counter::STACKS_SHED);
        return;
    }
    let Some(raw) = STACK_SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's scratch, which nothing else uses while the program runs; the
    // helpers write within the sizes given.
    unsafe {
        (*raw).h = header(tid, kind::STACK_RAW);
        (*raw).tgid = seen_tgid(tid, tgid);
        (*raw).cause = cause;
        (*raw).period = period;
        let n = bpf_get_stack(
            ctx.as_ptr(),
            (*raw).kernel.as_mut_ptr().cast(),
            (MAX_KERNEL_FRAMES * 8) as u32,
            0,
        );
        (*raw).kernel_frames = if n > 0 { (n / 8) as u32 } else { 0 };
        (*raw).kernel_err = if n < 0 { n as i32 } else { 0 };
        // The user registers, saved at the top of the task's kernel stack, whether the
        // event interrupted user or kernel code.
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const pt_regs;
        let (ip, sp, bp) = ((*regs).rip, (*regs).rsp, (*regs).rbp);
        (*raw).ip = ip;
        (*raw).sp = sp;
        (*raw).bp = bp;
        let mut off: usize = 0;
        let mut err: i64 = 0;
        for _ in 0..USER_STACK_BYTES / STACK_PAGE + 1 {
            if off >= USER_STACK_BYTES {
                break;
            }
            let addr = sp + off as u64;
            let mut n = STACK_PAGE - (addr as usize & (STACK_PAGE - 1));
            if n > USER_STACK_BYTES - off {
                n = USER_STACK_BYTES - off;
            }
            let dst = (*raw).user.as_mut_ptr().add(off & (USER_STACK_BYTES - 1));
            let r = bpf_probe_read_user(dst.cast(), n as u32, addr as *const _);
            if r < 0 {
                err = r;
                break;
            }
            off += n;
        }
        (*raw).user_len = off as u32;
        (*raw).user_err = err as i32;
        unhijack(raw, off);
        let len = StackRaw::FIXED + (off & (USER_STACK_BYTES * 2 - 1));
        let bytes = core::slice::from_raw_parts(raw as *const u8, len);
        if rb
            .output_untyped::<[u8]>(bytes, BPF_RB_NO_WAKEUP as u64)
            .is_err()
        {
            bump(counter::LOST);
        }
    }
}
