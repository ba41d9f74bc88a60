//! Thread and process lifetimes and names (`task_newtask`, `sched_process_exit`,
//! `task_rename`, `sched_process_exec`): a new thread or child process of a traced process
//! is traced too. Rare events, so classic tracepoints.

use aya_ebpf::{
    bindings::BPF_ANY,
    btf_maps::LruHashMap,
    helpers::{bpf_get_current_comm, bpf_probe_read_kernel, generated::bpf_get_current_task},
    macros::{btf_map, btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
    EbpfContext,
};
use tracer_abi::*;

use crate::shared::{
    bump, config, current, emit, header, hint, is_traced_tgid, is_traced_tid, kernel_field,
    kernel_offset, offsets, seen_tgid, TGIDS, TIDS,
};

/// Reads field `$name` of the tracepoint record as `$ty`.
///
/// The verifier only accepts context loads at constant offsets. When tracefs agrees with
/// the layout this was compiled for (the frozen `OFFSETS` says so, and the verifier
/// prunes the other branch), the load is direct; otherwise it goes through
/// bpf_probe_read_kernel at the offset tracefs gave.
macro_rules! field {
    ($ctx:expr, $name:ident, $ty:ty) => {{
        let offset = offsets().$name;
        if offset == Offsets::DEFAULT.$name {
            // SAFETY: a constant offset inside the record, checked by the verifier.
            unsafe {
                core::ptr::read(
                    $ctx.as_ptr()
                        .cast::<u8>()
                        .add(Offsets::DEFAULT.$name as usize)
                        .cast::<$ty>(),
                )
            }
        } else {
            // SAFETY: the offset comes from the tracepoint's own format file.
            unsafe { $ctx.read_at::<$ty>(offset as usize) }.unwrap_or_default()
        }
    }};
}

/// Reads a 16-byte name field; through the helper, since its offset need not be
/// 8-byte aligned as direct context loads must be.
#[inline(always)]
fn comm_field(ctx: &TracePointContext, offset: u32) -> [u8; 16] {
    // SAFETY: as for `field`.
    unsafe { ctx.read_at(offset as usize) }.unwrap_or_default()
}

/// `task_newtask(struct task_struct *task, u64 clone_flags)`: runs in the parent,
/// before the child can run, so the child is in the filter before its first event.
#[btf_tracepoint(function = "task_newtask")]
pub fn task_newtask(ctx: BtfTracePointContext) -> i32 {
    let (tgid, tid) = current();
    if !is_traced_tgid(tgid) {
        return 0;
    }
    let task: *const u8 = ctx.arg(0);
    let flags: u64 = ctx.arg(1);
    let child: u32 = kernel_field(task, kernel_offset!(task_pid));
    let child_tgid = if flags & CLONE_THREAD != 0 {
        tgid
    } else if config().inherit != 0 {
        child
    } else {
        // A new process, and the traced ones keep to themselves (--no-inherit).
        return 0;
    };
    // The hint first: the child's first event must not find its byte clear.
    hint(child);
    if TIDS.insert(child, child_tgid, BPF_ANY as u64).is_err() {
        bump(counter::THREADS_FULL);
    }
    if child_tgid != tgid {
        let _ = TGIDS.insert(child_tgid, 1, BPF_ANY as u64);
    }
    let mut seen_child = NsIds {
        tid: child,
        tgid: child_tgid,
    };
    if config().pidns != 0 {
        // The child's ids in the recorder's namespace, known from now on.
        seen_child = crate::pidns::learn(task, child);
    }
    // The name, two aligned words: direct loads are 8 bytes at most.
    let comm_at = kernel_offset!(task_comm);
    let lo: u64 = kernel_field(task, comm_at);
    let hi: u64 = kernel_field(task, comm_at + 8);
    let mut comm = [0u8; 16];
    comm[..8].copy_from_slice(&lo.to_ne_bytes());
    comm[8..].copy_from_slice(&hi.to_ne_bytes());
    emit(NewTask {
        h: header(tid, kind::NEW_TASK),
        child_tid: seen_child.tid,
        child_tgid: seen_child.tgid,
        comm,
    });
    0
}

#[tracepoint]
pub fn sched_process_exit(ctx: TracePointContext) -> u32 {
    let (tgid, tid) = current();
    if !is_traced_tid(tid) {
        return 0;
    }
    let group_dead = field!(ctx, exit_group_dead, u8);
    if group_dead != 0 {
        let _ = TGIDS.remove(tgid);
    }
    emit(Exit {
        h: header(tid, kind::EXIT),
        tgid: seen_tgid(tid, tgid),
        group_dead: group_dead as u32,
    });
    0
}

#[tracepoint]
pub fn task_rename(ctx: TracePointContext) -> u32 {
    let tid = field!(ctx, rename_pid, u32);
    if !is_traced_tid(tid) {
        return 0;
    }
    emit(Rename {
        h: header(tid, kind::RENAME),
        comm: comm_field(&ctx, offsets().rename_newcomm),
    });
    0
}

/// Traced processes whose exec removed their perf events (see [`drops_perf_events`]), for
/// the recorder to attach their probes again; it takes each out as it does.
#[btf_map]
static EXEC_UNPROBED: LruHashMap<u32, u8, 4096> = LruHashMap::new();

/// Whether the current process, just exec'd, lost its perf events: an exec that raises a
/// process's privileges (a setuid program, capabilities regained by a root whose parent
/// had dropped some, as Dovecot's master does) leaves its memory not dumpable by its user
/// (`mm->flags`' low two bits other than `SUID_DUMP_USER`), and the kernel then removes
/// the process's perf events, the uprobes it inherited among them.
#[inline(always)]
fn drops_perf_events() -> bool {
    let o = offsets();
    if o.task_mm == 0 || o.mm_flags == 0 {
        return false;
    }
    let read = |addr: u64| {
        // SAFETY: the helper checks the address.
        unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok()
    };
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let Some(mm) = read(task + o.task_mm as u64).filter(|&m| m != 0) else {
        return false;
    };
    read(mm + o.mm_flags as u64).is_some_and(|flags| flags & 3 != 1)
}

#[tracepoint]
pub fn sched_process_exec(ctx: TracePointContext) -> u32 {
    let (tgid, tid) = current();
    if !is_traced_tid(tid) {
        // A thread other than the leader exec'd: the kernel gave it the process id
        // (tid == tgid now) and ended the others, the leader's exit taking that id
        // out of the filter. The thread goes on as the process: its new id in, its
        // old one out (the filter would keep it forever).
        let old = field!(ctx, exec_old_pid, u32);
        if old == tid || !is_traced_tgid(tgid) {
            return 0;
        }
        hint(tid);
        if TIDS.insert(tid, tgid, BPF_ANY as u64).is_err() {
            bump(counter::THREADS_FULL);
            return 0;
        }
        let _ = TIDS.remove(old);
        if config().pidns != 0 {
            // Its ids in the recorder's namespace, gone with the leader's too.
            // SAFETY: helper without preconditions.
            let task = unsafe { bpf_get_current_task() } as *const u8;
            crate::pidns::learn(task, tid);
            crate::pidns::forget(old);
        }
    }
    if drops_perf_events() {
        let _ = EXEC_UNPROBED.insert(tid, 1, BPF_ANY as u64);
    }
    emit(Rename {
        h: header(tid, kind::EXEC),
        comm: bpf_get_current_comm().unwrap_or_default(),
    });
    0
}
