//! Go functions (`go_entry`, `go_entry_check`, `go_exit`): never a uretprobe, which breaks
//! Go's stacks, but a probe on the entry and on each return instruction, paired by
//! goroutine (the `g` in R14), not by thread: a goroutine can resume on another thread.
//! Recording sends both ends; counting mode counts at the entry and times the chosen
//! calls at their return (`stat::frame_entry`, `stat::frame_return`). Recording also
//! follows the goroutines' status (`go_status`), where a call's time went.

use aya_ebpf::{
    helpers::{bpf_probe_read_user, generated::bpf_get_attach_cookie},
    macros::uprobe,
    programs::ProbeContext,
    EbpfContext,
};
use tracer_abi::*;

use crate::shared::{config, counting, current, emit, header, now, probed};
use crate::stat;

/// The goroutine a Go function runs in: R14 holds its `g` under Go's register ABI.
#[inline(always)]
fn goroutine(ctx: &ProbeContext) -> u64 {
    // SAFETY: the probe's saved registers, a valid context.
    unsafe { (*ctx.regs).r14 }
}

/// The stack pointer: at the entry probe and at a return instruction alike, it points
/// at the call's return address.
#[inline(always)]
fn stack_pointer(ctx: &ProbeContext) -> u64 {
    // SAFETY: the probe's saved registers, a valid context.
    unsafe { (*ctx.regs).rsp }
}

/// Where a frame is on goroutine `g`'s stack: the stack's top (`g.stack.hi`, the second
/// word of `runtime.g` in every Go version) minus the stack pointer `sp` at the call's
/// entry or return instruction (which point at the return address alike).
#[inline(always)]
fn frame_height(g: u64, sp: u64) -> u64 {
    // SAFETY: a read of the traced process's memory, checked by the helper.
    let hi = unsafe { bpf_probe_read_user((g + 8) as *const u64) }.unwrap_or(0);
    hi.wrapping_sub(sp)
}

/// A frame's height as records carry it: 0 (unknown) past a goroutine stack's largest
/// size (1 GB), which no real one reaches.
#[inline(always)]
fn recorded_height(g: u64, sp: u64) -> u32 {
    u32::try_from(frame_height(g, sp)).unwrap_or(0)
}

/// Entry of a Go function without a stack check.
#[uprobe]
pub fn go_entry(ctx: ProbeContext) -> u32 {
    go_entered(&ctx);
    0
}

/// Entry of a Go function, on its stack check's branch (JBE to `runtime.morestack`):
/// when the branch is taken (CF or ZF) the stack grows and the call starts over, to
/// pass here again; that pass is the call's entry.
#[uprobe]
pub fn go_entry_check(ctx: ProbeContext) -> u32 {
    const CF_ZF: u64 = 0x1 | 0x40;
    // SAFETY: the probe's saved registers, a valid context.
    if unsafe { (*ctx.regs).eflags } & CF_ZF == 0 {
        go_entered(&ctx);
    }
    0
}

#[inline(always)]
fn go_entered(ctx: &ProbeContext) {
    // SAFETY: helper reading this program's attach cookie.
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let (tgid, tid) = current();
    if !probed(tgid, tid) {
        return;
    }
    if counting() {
        let g = goroutine(ctx);
        let height = || frame_height(g, stack_pointer(ctx));
        stat::frame_entry(tgid, func, g, height, false, now(), &config());
        return;
    }
    let g = goroutine(ctx);
    emit(GoEntry {
        h: header(tid, kind::GO_ENTRY),
        func,
        height: recorded_height(g, stack_pointer(ctx)),
        g,
    });
}

/// One of a Go function's return instructions.
#[uprobe]
pub fn go_exit(ctx: ProbeContext) -> u32 {
    // SAFETY: helper reading this program's attach cookie.
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let (tgid, tid) = current();
    if counting() {
        // Every call's returns are probed, timed or not: the one lookup keyed by the
        // process is the filter too (an untraced process never opens a timed call).
        // SAFETY: as in `goroutine`.
        let ret = unsafe { (*ctx.regs).rax };
        let g = goroutine(&ctx);
        let height = || frame_height(g, stack_pointer(&ctx));
        stat::frame_return(tgid, func, g, height, false, ret, now());
        return 0;
    }
    if !probed(tgid, tid) {
        return 0;
    }
    let g = goroutine(&ctx);
    emit(GoExit {
        h: header(tid, kind::GO_EXIT),
        func,
        height: recorded_height(g, stack_pointer(&ctx)),
        // SAFETY: as in `goroutine`.
        ret: unsafe { (*ctx.regs).rax },
        g,
    });
    0
}

/// `runtime.casgstatus(gp, oldval, newval)`, where Go's scheduler changes a goroutine's
/// status: probed in recording, inside the function where its arguments are still in
/// their registers under the register ABI (RAX, RBX, RCX), on an instruction uprobes
/// emulate (see the symbolizer's Go placement).
#[uprobe]
pub fn go_status(ctx: ProbeContext) -> u32 {
    let (tgid, tid) = current();
    if counting() || !probed(tgid, tid) {
        return 0;
    }
    // SAFETY: the probe's saved registers, a valid context.
    let (g, old, new) = unsafe { ((*ctx.regs).rax, (*ctx.regs).rbx, (*ctx.regs).rcx) };
    emit(GoStatus {
        h: header(tid, kind::GO_STATUS),
        old: old as u32,
        new: new as u32,
        g,
    });
    0
}
