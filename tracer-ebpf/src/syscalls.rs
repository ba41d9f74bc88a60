//! System calls (`sys_enter`, `sys_exit`) of traced processes, and a process entering a
//! traced cgroup, which its first system call tells.

use aya_ebpf::{
    btf_maps::Array,
    macros::{btf_map, btf_tracepoint},
    programs::BtfTracePointContext,
};
use tracer_abi::*;

use crate::shared::{
    config, counted, counting, current, emit, header, is_traced_tgid, joined, kernel_field,
    kernel_offset, now, sampled,
};
use crate::stat;

/// With `Config::syscall_filter`, the system calls traced: a byte per number.
#[btf_map]
static SYSCALLS: Array<u8, { MAX_SYSCALLS as usize }> = Array::new();

/// Whether system call `nr` is one of those traced.
#[inline(always)]
fn wanted(nr: u32) -> bool {
    config().syscall_filter == 0 || SYSCALLS.get(nr).is_some_and(|b| *b != 0)
}

/// `sys_enter(struct pt_regs *regs, long id)`.
#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    let nr: i64 = ctx.arg(1);
    // Every probed function's return makes the uretprobe call: drop it before any
    // lookup.
    if nr < 0 || nr as u32 == SYS_URETPROBE {
        return 0;
    }
    let (tgid, tid) = current();
    if !wanted(nr as u32) {
        // Not a call to trace: it still tells that a process entered the cgroup.
        if config().cgroup != 0 && !is_traced_tgid(tgid) {
            joined(tgid, tid);
        }
        return 0;
    }
    if counting() {
        let traced = || is_traced_tgid(tgid) || joined(tgid, tid);
        let Some(t) = counted(tid, tstate::RUNNING, traced) else {
            return 0;
        };
        stat::sys_enter(t, now());
        if !sampled(tid) {
            return 0;
        }
    } else if !is_traced_tgid(tgid) && !joined(tgid, tid) {
        return 0;
    }
    let regs: *const u8 = ctx.arg(0);
    emit(SysEnter {
        h: header(tid, kind::SYS_ENTER),
        nr: nr as u32,
        _pad: 0,
        arg0: kernel_field(regs, kernel_offset!(regs_arg0)),
        arg2: kernel_field(regs, kernel_offset!(regs_arg2)),
    });
    0
}

/// `sys_exit(struct pt_regs *regs, long ret)`; the call's number is in the registers.
#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> i32 {
    let regs: *const u8 = ctx.arg(0);
    let nr: i64 = kernel_field(regs, kernel_offset!(regs_nr));
    if nr < 0 || nr as u32 == SYS_URETPROBE || !wanted(nr as u32) {
        return 0;
    }
    let (tgid, tid) = current();
    let t = if counting() {
        let Some(t) = counted(tid, tstate::RUNNING, || is_traced_tgid(tgid)) else {
            return 0;
        };
        Some(t)
    } else if is_traced_tgid(tgid) {
        None
    } else {
        return 0;
    };
    let ret: i64 = ctx.arg(1);
    if let Some(t) = t {
        stat::sys_exit(t, nr as u32, ret, now());
        if !sampled(tid) {
            return 0;
        }
    }
    emit(SysExit {
        h: header(tid, kind::SYS_EXIT),
        nr: nr as u32,
        _pad: 0,
        ret,
    });
    0
}
