//! The returns the kernel's uretprobes hold for the current thread. A pending uretprobe
//! has replaced its call's return address on the stack with the address of the kernel's
//! trampoline and keeps the real one, on a per-thread list (newest first). Whatever reads
//! the stack as the program's own, an unwinder, must see the real ones: the copies of
//! `--stacks` get them back ([`crate::stacks`]).

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};

use crate::shared::offsets;

/// Nested uretprobes looked at: deeper ones keep the trampoline's address.
const MAX_PENDING: usize = 32;

/// A u64 of kernel memory at `addr`.
#[inline(always)]
fn kread(addr: u64) -> Option<u64> {
    // SAFETY: the helper checks the address.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok()
}

/// The trampoline's address in the current process, and its thread's newest pending
/// return (a kernel address; 0 for none). `None` when the kernel's types did not say
/// where they are, or the thread never hit a uprobe.
#[inline(always)]
fn pending() -> Option<(u64, u64)> {
    let o = offsets();
    if o.task_utask == 0 {
        return None;
    }
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let utask = kread(task + o.task_utask as u64).filter(|&u| u != 0)?;
    let mm = kread(task + o.task_mm as u64)?;
    let area = kread(mm + o.mm_xol_area as u64).filter(|&a| a != 0)?;
    let trampoline = kread(area + o.xol_vaddr as u64)?;
    let first = kread(utask + o.utask_return_instances as u64).unwrap_or(0);
    Some((trampoline, first))
}

/// Calls `f(i, slot, ret, trampoline)` for the current thread's pending returns from the
/// newest, `slot` where the trampoline's address replaced `ret`.
#[inline(always)]
pub fn each_pending(mut f: impl FnMut(usize, u64, u64, u64)) {
    let o = offsets();
    let Some((trampoline, mut ri)) = pending() else {
        return;
    };
    for i in 0..MAX_PENDING {
        if ri == 0 {
            break;
        }
        let (Some(slot), Some(ret)) = (
            kread(ri + o.ri_stack as u64),
            kread(ri + o.ri_orig_ret as u64),
        ) else {
            break;
        };
        f(i, slot, ret, trampoline);
        ri = kread(ri + o.ri_next as u64).unwrap_or(0);
    }
}
