//! Ids as the recorder sees them when it runs in a container's PID namespace.
//!
//! The kernel's ids (the first namespace's) are what the programs get and what the filter
//! holds; a recorder in a container knows its targets by the container's ids, and the
//! records must say those. `NS_IDS` maps one to the other: filled once by the `ns_ids`
//! task iterator, which the recorder runs before it fills the filter, then by
//! `task_newtask` for each task a traced one creates.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::BPF_ANY,
    btf_maps::{Array, HashMap},
    helpers::{bpf_get_current_task, bpf_probe_read_kernel},
    macros::btf_map,
};
use tracer_abi::{NsIds, NsSelf, MAX_THREADS};

use crate::shared::offsets;

/// The kernel's tid -> ids in the recorder's namespace.
#[btf_map]
static NS_IDS: HashMap<u32, NsIds, { MAX_THREADS as usize }> = HashMap::new();

/// The recorder's namespace, found by the iterator (which runs in the recorder).
#[btf_map]
static NS_SELF: Array<NsSelf, 1> = Array::new();

/// The ids of the kernel's thread `tid` in the recorder's namespace, if known.
#[inline(always)]
pub fn ids(tid: u32) -> Option<NsIds> {
    // SAFETY: a copy out of our own map's value.
    unsafe { NS_IDS.get(tid).copied() }
}

/// Forgets a thread that exited.
#[inline(always)]
pub fn forget(tid: u32) {
    let _ = NS_IDS.remove(tid);
}

/// A `T` of kernel memory at `addr` (None if it cannot be read).
#[inline(always)]
fn read<T>(addr: u64) -> Option<T> {
    // SAFETY: the helper checks the address.
    unsafe { bpf_probe_read_kernel(addr as *const T) }.ok()
}

/// The id of the task at `task` in namespace `me`, when it is in it or in one below it.
#[inline(always)]
fn id_in(task: u64, me: &NsSelf) -> Option<u32> {
    let o = offsets();
    let pid: u64 = read(task + o.task_thread_pid as u64)?;
    let level: u32 = read(pid + o.pid_level as u64)?;
    if level < me.level || me.level > 32 {
        return None;
    }
    let upid = pid + o.pid_numbers as u64 + me.level as u64 * o.upid_size as u64;
    let ns: u64 = read(upid + o.upid_ns as u64)?;
    if ns != me.ns {
        return None;
    }
    read::<i32>(upid).map(|nr| nr as u32)
}

/// The namespace the current task (the recorder, in the iterator) is in.
#[inline(always)]
fn own_namespace() -> Option<NsSelf> {
    let o = offsets();
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let pid: u64 = read(task + o.task_thread_pid as u64)?;
    let level: u32 = read(pid + o.pid_level as u64)?;
    if level > 32 {
        return None;
    }
    let upid = pid + o.pid_numbers as u64 + level as u64 * o.upid_size as u64;
    let ns: u64 = read(upid + o.upid_ns as u64)?;
    Some(NsSelf { ns, level, set: 1 })
}

/// A task that becomes traced (`task`, the kernel's `tid`): its ids in the recorder's
/// namespace, remembered (zeros when it is not in that namespace).
#[inline(always)]
pub fn learn(task: *const u8, tid: u32) -> NsIds {
    let Some(me) = NS_SELF.get(0).filter(|m| m.set != 0) else {
        return NsIds::default();
    };
    let Some(ids) = ids_in(task as u64, me) else {
        return NsIds::default();
    };
    let _ = NS_IDS.insert(tid, ids, BPF_ANY as u64);
    ids
}

/// The ids of the task at `task` and of its process in namespace `me`.
#[inline(always)]
fn ids_in(task: u64, me: &NsSelf) -> Option<NsIds> {
    let tid = id_in(task, me)?;
    let tgid = read::<u64>(task + offsets().task_group_leader as u64)
        .and_then(|leader| id_in(leader, me))
        .unwrap_or(tid);
    Some(NsIds { tid, tgid })
}

/// `iter/task`: every task of the machine once; those of the recorder's namespace (the
/// iterator runs in the recorder) go into `NS_IDS`.
#[no_mangle]
#[link_section = "iter/task"]
pub fn ns_ids(ctx: *mut c_void) -> i32 {
    let me = match NS_SELF.get(0).filter(|m| m.set != 0) {
        Some(me) => *me,
        None => {
            let Some(me) = own_namespace() else {
                return 0;
            };
            if let Some(slot) = NS_SELF.get_ptr_mut(0) {
                // SAFETY: our own map's value; the iterator runs on one CPU at a time.
                unsafe { *slot = me };
            }
            me
        }
    };
    // `struct bpf_iter__task { struct bpf_iter_meta *meta; struct task_struct *task; }`;
    // the task is null once, at the end.
    // SAFETY: the iterator's context, two pointers.
    let task = unsafe { *(ctx as *const u64).add(1) };
    if task == 0 {
        return 0;
    }
    let (Some(kernel_tid), Some(ids)) = (
        read::<u32>(task + offsets().task_pid as u64),
        ids_in(task, &me),
    ) else {
        return 0;
    };
    let _ = NS_IDS.insert(kernel_tid, ids, BPF_ANY as u64);
    0
}
