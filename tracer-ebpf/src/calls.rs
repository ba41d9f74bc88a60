//! Probed functions of C, C++, Rust and other native code: `func_entry` and `func_exit`,
//! a uprobe and uretprobe pair shared by every probed function (the attach cookie is the
//! function's id in the probe table), and counting mode's uprobe session `func_session`.
//! In a program that throws exceptions, whose unwinder would not find a return address a
//! uretprobe replaced, `frame_entry` and a uprobe on each return instruction
//! (`frame_return`) and jump to another function (`frame_tail`) instead, paired by the
//! stack pointer as Go's are.

use aya_ebpf::{
    helpers::generated::bpf_get_attach_cookie,
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
    EbpfContext,
};
use tracer_abi::*;

use crate::shared::{config, counting, current, emit, header, now, probed};
use crate::stat;

#[uprobe]
pub fn func_entry(ctx: ProbeContext) -> u32 {
    // SAFETY: helper reading this program's attach cookie.
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let (tgid, tid) = current();
    if !probed(tgid, tid) {
        return 0;
    }
    if counting() && !stat::func_entry(tid, func, now(), config().sample_every) {
        return 0;
    }
    emit(FuncEntry {
        h: header(tid, kind::FUNC_ENTRY),
        func,
        _pad: 0,
    });
    0
}

#[uretprobe]
pub fn func_exit(ctx: RetProbeContext) -> u32 {
    // SAFETY: helper reading this program's attach cookie.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let func = cookie as u32;
    let ret = return_value(cookie, ctx.ret());
    let (tgid, tid) = current();
    if !probed(tgid, tid) {
        return 0;
    }
    if counting() && !stat::func_exit(tid, func, ret, now(), config().sample_every) {
        return 0;
    }
    emit(FuncExit {
        h: header(tid, kind::FUNC_EXIT),
        func,
        _pad: 0,
        ret,
    });
    0
}

// Kernel functions the uprobe session program calls (6.18's prototypes); the recorder
// turns the calls into kfunc calls by their BTF ids before loading.
extern "C" {
    fn bpf_session_is_return() -> bool;
    fn bpf_session_cookie() -> *mut u64;
}

/// Counting mode's function probe: a uprobe session, one program for a call's entry
/// and its return. The entry counts every call and asks for the return of the calls
/// it times (and of those `--sample` records in full); the return times them from
/// the entry's stamp in the session's cookie. Without the `#[uprobe]` macro, which
/// returns 0 ("probe the return") whatever the function says.
#[no_mangle]
#[link_section = "uprobe"]
pub fn func_session(ctx: *mut core::ffi::c_void) -> u32 {
    let ctx = ProbeContext::new(ctx);
    // SAFETY: helpers reading this program's attach cookie and session cookie.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let func = cookie as u32;
    let stamp = unsafe { bpf_session_cookie() };
    let (tgid, tid) = current();
    // SAFETY: a kfunc without preconditions in a session program.
    if unsafe { bpf_session_is_return() } {
        // SAFETY: the session's cookie, written by this call's entry; the saved
        // registers of the return.
        let (start, ret) = unsafe { (*stamp, return_value(cookie, (*ctx.regs).rax)) };
        if stat::session_return(tid, func, start, ret, now()) {
            emit(FuncExit {
                h: header(tid, kind::FUNC_EXIT),
                func,
                _pad: 0,
                ret,
            });
        }
        return 0;
    }
    // Links on a program's own executable are machine-wide: count its traced
    // processes only (forks are traced before they run; see `Probes`).
    if !probed(tgid, tid) {
        return 1;
    }
    let c = config();
    let t = now();
    let counts = cookie & COOKIE_COUNTED_APART == 0;
    let chosen = stat::session_entry(tid, func, t, &c, counts);
    if chosen.recorded {
        emit(FuncEntry {
            h: header(tid, kind::FUNC_ENTRY),
            func,
            _pad: 0,
        });
    }
    if !chosen.timed {
        return 1;
    }
    // SAFETY: the session's cookie, read back by this call's return.
    unsafe { *stamp = t };
    0
}

/// Counting mode's count of the calls of a function whose sessions are one process's
/// each ([`COOKIE_COUNTED_APART`]): an entry probe that forks inherit.
#[uprobe]
pub fn func_count(ctx: ProbeContext) -> u32 {
    // SAFETY: helper reading this program's attach cookie.
    let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let (tgid, tid) = current();
    if probed(tgid, tid) {
        let _ = stat::count(func);
    }
    0
}

/// The kernel's floor for a session: an entry that never asks for the return.
#[no_mangle]
#[link_section = "uprobe"]
pub fn func_session_empty(_ctx: *mut core::ffi::c_void) -> u32 {
    1
}

/// The stack pointer: at the entry probe (which skips no instruction that moves it) and
/// at a return instruction or a tail call's jump alike, it points at the return address.
#[inline(always)]
fn stack_pointer(ctx: &ProbeContext) -> u64 {
    // SAFETY: the probe's saved registers, a valid context.
    unsafe { (*ctx.regs).rsp }
}

/// Counting mode's key for a native thread's stack, where a Go call's is its goroutine:
/// the top bit set, which no goroutine's address has.
#[inline(always)]
pub fn thread_stack(tid: u32) -> u64 {
    (1 << 63) | tid as u64
}

/// A frame's height on a thread's stack, greater with depth as a goroutine frame's is.
#[inline(always)]
fn thread_height(sp: u64) -> u64 {
    0u64.wrapping_sub(sp)
}

/// Entry of a native function whose returns are probed at their instructions.
#[uprobe]
pub fn frame_entry(ctx: ProbeContext) -> u32 {
    frame_entered(&ctx);
    0
}

/// The first instruction of such a function when it is a return instruction: the call's
/// entry and its return at once.
#[uprobe]
pub fn frame_through(ctx: ProbeContext) -> u32 {
    frame_entered(&ctx);
    frame_left(&ctx, false);
    0
}

/// The first instruction of such a function when it is a jump to another (a thunk).
#[uprobe]
pub fn frame_through_tail(ctx: ProbeContext) -> u32 {
    frame_entered(&ctx);
    frame_left(&ctx, true);
    0
}

#[inline(always)]
fn frame_entered(ctx: &ProbeContext) {
    // SAFETY: helper reading this program's attach cookie.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let func = cookie as u32;
    let (tgid, tid) = current();
    if !probed(tgid, tid) {
        return;
    }
    let sp = stack_pointer(ctx);
    let switching = cookie & COOKIE_STACKS_SWITCH != 0;
    if counting() {
        let height = || thread_height(sp);
        let c = config();
        stat::frame_entry(tgid, func, thread_stack(tid), height, switching, now(), &c);
        return;
    }
    emit(FrameEntry {
        h: header(tid, kind::FRAME_ENTRY),
        func,
        switching: switching as u32,
        sp,
    });
}

/// One of the return instructions of a function `frame_entry` probes.
#[uprobe]
pub fn frame_return(ctx: ProbeContext) -> u32 {
    frame_left(&ctx, false);
    0
}

/// One of the jumps to another function (tail calls) of a function `frame_entry` probes.
#[uprobe]
pub fn frame_tail(ctx: ProbeContext) -> u32 {
    frame_left(&ctx, true);
    0
}

#[inline(always)]
fn frame_left(ctx: &ProbeContext, tail: bool) {
    // SAFETY: helper reading this program's attach cookie.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let func = cookie as u32;
    let (tgid, tid) = current();
    // A tail call's result is its callee's, not known here.
    // SAFETY: the probe's saved registers, a valid context.
    let ret = if tail {
        0
    } else {
        return_value(cookie, unsafe { (*ctx.regs).rax })
    };
    let sp = stack_pointer(ctx);
    if counting() {
        // As Go's returns: the lookup keyed by the process is the filter too.
        let height = || thread_height(sp);
        let switching = cookie & COOKIE_STACKS_SWITCH != 0;
        stat::frame_return(tgid, func, thread_stack(tid), height, switching, ret, now());
        return;
    }
    if !probed(tgid, tid) {
        return;
    }
    emit(FrameExit {
        h: header(tid, kind::FRAME_EXIT),
        func,
        tail: tail as u32,
        sp,
        ret,
    });
}
