//! The scheduler (`sched_switch`, `sched_wakeup`, `sched_wakeup_new`) for traced threads:
//! what every thread state over time is made of.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};
use tracer_abi::*;

use crate::shared::{
    config, counted, counting, current, emit, header, is_traced_tid, kernel_field, kernel_offset,
    now, sampled, seen, TIDS,
};
use crate::{stacks, stat};

/// `sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
/// unsigned int prev_state)`, called while `prev` is still current.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    let (prev_tgid, prev) = current();
    let prev_task: *const u8 = ctx.arg(1);
    let next_task: *const u8 = ctx.arg(2);
    let next: u32 = kernel_field(next_task, kernel_offset!(task_pid));
    // Counting needs both threads' entries; recording needs `next` only when `prev`
    // is not traced.
    let (prev_t, next_t, prev_traced, next_traced) = if counting() {
        let p = counted(prev, tstate::RUNNING, || is_traced_tid(prev));
        let n = counted(next, tstate::RUNNING, || is_traced_tid(next));
        (p, n, p.is_some(), n.is_some())
    } else {
        let p = is_traced_tid(prev);
        (None, None, p, !p && is_traced_tid(next))
    };
    if !prev_traced && !next_traced {
        return 0;
    }
    let preempt: u64 = ctx.arg(0);
    let raw_state: u64 = ctx.arg(3);
    let preempt = preempt & 0xff != 0;
    let raw_state = raw_state as u32;
    // A thread's exit state matters only to a switch that is not a preemption.
    let exit_state: u32 = if prev_traced && !preempt && raw_state != 0 {
        kernel_field(prev_task, kernel_offset!(task_exit_state))
    } else {
        0
    };
    let prev_state = switch_state(preempt, raw_state, exit_state);
    let exiting = prev_traced && prev_state & task_state::EXITED != 0;
    let record = if counting() {
        // With each thread, the CPU time the kernel has charged it: running times
        // are then the kernel's own (see `stat::transition`).
        let exec = |task: *const u8| kernel_field::<u64>(task, kernel_offset!(task_sum_exec));
        stat::switch(
            prev_t.map(|t| (t, exec(prev_task))),
            prev_state,
            next_t.map(|t| (t, exec(next_task))),
            now(),
            exiting,
        );
        sampled(prev) || sampled(next)
    } else {
        true
    };
    if prev_traced && !counting() && stacks::blocks(prev_state) {
        stacks::capture(&ctx, prev, prev_tgid, stack_cause::BLOCK, 0);
    }
    if record {
        emit(Switch {
            h: header(prev, kind::SWITCH),
            next_tid: seen(next),
            prev_state,
        });
    }
    if exiting {
        // The thread will never run again: free its slot in the filter (counting mode
        // reports it a last time, by its namespace ids too: the recorder frees those).
        let _ = TIDS.remove(prev);
        if config().pidns != 0 && !counting() {
            crate::pidns::forget(prev);
        }
    }
    0
}

/// `sched_wakeup(struct task_struct *p)`, and the same for `sched_wakeup_new`.
#[inline(always)]
fn wakeup(ctx: &BtfTracePointContext, kind: u16) {
    let task: *const u8 = ctx.arg(0);
    let wakee: u32 = kernel_field(task, kernel_offset!(task_pid));
    let (_, waker) = current();
    if counting() {
        let Some(t) = counted(wakee, tstate::BLOCKED, || is_traced_tid(wakee)) else {
            return;
        };
        let w = counted(waker, tstate::RUNNING, || is_traced_tid(waker));
        stat::wakeup(w, t, now());
        if !sampled(wakee) {
            return;
        }
    } else if !is_traced_tid(wakee) {
        return;
    }
    let target_cpu: u32 = kernel_field(task, kernel_offset!(task_cpu));
    emit(Wakeup {
        h: header(waker, kind),
        wakee: seen(wakee),
        target_cpu,
    });
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup(ctx: BtfTracePointContext) -> i32 {
    wakeup(&ctx, kind::WAKEUP);
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: BtfTracePointContext) -> i32 {
    wakeup(&ctx, kind::WAKEUP_NEW);
    0
}
