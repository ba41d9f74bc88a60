//! The eBPF programs: where every event of a trace is born. A module per event source:
//!
//! - `calls`: `func_entry` / `func_exit`, one uprobe/uretprobe pair shared by every probed
//!   function, and counting mode's uprobe session `func_session`.
//! - `go`: `go_entry`, `go_entry_check`, `go_exit`, Go functions at their entry and each
//!   return instruction, paired by goroutine; `go_status`, the goroutines' status changes.
//! - `usdt`: USDT probes, their arguments read as their notes say.
//! - `syscalls`: `sys_enter` / `sys_exit`, system calls of traced processes.
//! - `sched`: `sched_switch`, `sched_wakeup`, `sched_wakeup_new`, for traced threads.
//! - `lifetimes`: `task_newtask`, `sched_process_exit`, `task_rename`,
//!   `sched_process_exec`; a new thread or child process of a traced process is traced too.
//! - `stacks` (with `--stacks`): `stack_sample`, on-CPU samples' stacks, and from
//!   `sched_switch` the stack a traced thread blocks in.
//! - `pidns`: `ns_ids`, a task iterator the recorder runs once when it is in a container's
//!   PID namespace, to learn the kernel's ids of the tasks it sees.
//! - `stat`: counting mode's per-thread and per-function state, fed by the above.
//! - `empty`: programs that do nothing, the kernel's floors for the benchmarks.
//!
//! The system call and scheduler programs see every system call and context switch of the
//! machine, so they are BTF (raw) tracepoints: the kernel calls them with its own arguments
//! instead of first building the classic tracepoint's record. Their arguments are typed
//! pointers (a task, the saved registers) that the verifier lets them load from directly,
//! at offsets the loader took from BTF: a plain load instead of a `bpf_probe_read_kernel`
//! call each. The rare lifetime events stay classic. (What each saves:
//! docs/performance.md.)
//!
//! What they share is below, in `shared`: the filter of traced ids, the rings, the
//! counters and the loader's constants. Records go to the ring buffer of the CPU they happen
//! on (no contention between CPUs) without waking the reader, which drains on a short
//! timer. A record that finds its buffer full is counted in `COUNTERS[LOST]` for that CPU.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
mod calls;
#[cfg(target_arch = "bpf")]
mod empty;
#[cfg(target_arch = "bpf")]
mod go;
#[cfg(target_arch = "bpf")]
mod lifetimes;
#[cfg(target_arch = "bpf")]
mod pidns;
#[cfg(target_arch = "bpf")]
mod returns;
#[cfg(target_arch = "bpf")]
mod sched;
#[cfg(target_arch = "bpf")]
mod stacks;
#[cfg(target_arch = "bpf")]
mod stat;
#[cfg(target_arch = "bpf")]
mod syscalls;
#[cfg(target_arch = "bpf")]
mod usdt;

#[cfg(target_arch = "bpf")]
mod shared {
    use aya_ebpf::{
        bindings::{BPF_ANY, BPF_RB_NO_WAKEUP},
        btf_maps::{Array, ArrayOfMaps, CgroupArray, HashMap, PerCpuArray, RingBuf},
        helpers::{
            bpf_get_current_comm, bpf_get_current_pid_tgid, generated::bpf_get_current_task,
            generated::bpf_get_smp_processor_id, generated::bpf_ktime_get_ns,
        },
        macros::btf_map,
    };
    use tracer_abi::*;

    use crate::stat;

    #[btf_map]
    pub(crate) static EVENTS: ArrayOfMaps<
        RingBuf<u8, { RING_BYTES as usize }>,
        { MAX_CPUS as usize },
    > = ArrayOfMaps::new();

    /// Traced processes (tgid -> 1): filters system calls and inherits to new threads.
    #[btf_map]
    pub(crate) static TGIDS: HashMap<u32, u32, { MAX_PROCESSES as usize }> = HashMap::new();

    /// Traced threads (tid -> tgid): filters scheduler events, which carry tids only.
    #[btf_map]
    pub(crate) static TIDS: HashMap<u32, u32, { MAX_THREADS as usize }> = HashMap::new();

    /// The filter's first test: a byte per `id % ID_HINT_SLOTS`, set for every traced tid
    /// and tgid. Every system call and context switch on the machine asks the filter and
    /// almost none are traced; an array read is inlined by the verifier where a hash lookup
    /// is a helper call and a hash (docs/performance.md). Bytes are
    /// set and never cleared, since ids can share one: a clear byte proves an id
    /// untraced, a set one only sends it on to the maps. One byte per slot, because user
    /// space and programs on other CPUs set neighbouring slots concurrently.
    #[btf_map]
    static ID_HINT: Array<u8, { ID_HINT_SLOTS as usize }> = Array::new();

    #[btf_map]
    static COUNTERS: PerCpuArray<u64, { counter::COUNT as usize }> = PerCpuArray::new();

    /// The traced cgroup, with `Config::cgroup` (its directory, set by the recorder).
    #[btf_map]
    static CGROUP: CgroupArray<1> = CgroupArray::new();

    /// Tracepoint field and kernel structure offsets; the recorder sets them from tracefs
    /// and BTF before loading.
    #[no_mangle]
    pub(crate) static OFFSETS: Offsets = Offsets::DEFAULT;

    /// Recording or counting mode; set before loading.
    #[no_mangle]
    static CONFIG: Config = Config::RECORD;

    #[inline(always)]
    pub(crate) fn config() -> Config {
        // SAFETY: as for `offsets`.
        unsafe { core::ptr::read_volatile(&CONFIG) }
    }

    #[inline(always)]
    pub(crate) fn counting() -> bool {
        config().stat_mode != 0
    }

    /// True when `tid` is inside a sampled call. Without `--sample` the verifier drops the
    /// map lookup, which every syscall and switch would otherwise pay.
    #[inline(always)]
    pub(crate) fn sampled(tid: u32) -> bool {
        config().sample_every != 0 && stat::sampled(tid)
    }

    #[inline(always)]
    pub(crate) fn now() -> u64 {
        // SAFETY: helper without preconditions.
        unsafe { bpf_ktime_get_ns() }
    }

    #[inline(always)]
    pub(crate) fn offsets() -> Offsets {
        // SAFETY: a read of our own global; volatile so the loader's value is used, not
        // the compile-time default.
        unsafe { core::ptr::read_volatile(&OFFSETS) }
    }

    #[inline(always)]
    pub(crate) fn bump(index: u32) {
        if let Some(c) = COUNTERS.get_ptr_mut(index) {
            // SAFETY: per-CPU slot, and BPF programs do not migrate while running.
            unsafe { *c += 1 };
        }
    }

    /// A record's header; `tid` is the kernel's id, recorded as the recorder sees it.
    #[inline(always)]
    pub(crate) fn header(tid: u32, kind: u16) -> Header {
        Header {
            // SAFETY: helper without preconditions.
            ts: unsafe { bpf_ktime_get_ns() },
            tid: seen(tid),
            kind,
            _pad: 0,
        }
    }

    /// The id the recorder knows thread `tid` (the kernel's) by: the same, or in a
    /// container's PID namespace its id there (0 for a task outside it).
    #[inline(always)]
    pub(crate) fn seen(tid: u32) -> u32 {
        if config().pidns == 0 || tid == 0 {
            return tid;
        }
        crate::pidns::ids(tid).map_or(0, |n| n.tid)
    }

    /// [`seen`] for the process of thread `tid`, whose process id is `tgid`.
    #[inline(always)]
    pub(crate) fn seen_tgid(tid: u32, tgid: u32) -> u32 {
        if config().pidns == 0 {
            return tgid;
        }
        crate::pidns::ids(tid).map_or(0, |n| n.tgid)
    }

    /// Sends `rec` to this CPU's ring buffer, or counts it as lost.
    #[inline(always)]
    pub(crate) fn emit<T: 'static>(rec: T) {
        // SAFETY: helper without preconditions.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        let Some(rb) = EVENTS.get(cpu) else {
            bump(counter::LOST);
            return;
        };
        match rb.reserve_untyped::<T>(0) {
            Some(mut entry) => {
                entry.write(rec);
                entry.submit(BPF_RB_NO_WAKEUP as u64);
            }
            None => bump(counter::LOST),
        }
    }

    #[inline(always)]
    pub(crate) fn maybe_traced(id: u32) -> bool {
        ID_HINT
            .get(id & (ID_HINT_SLOTS - 1))
            .is_some_and(|b| *b != 0)
    }

    #[inline(always)]
    pub(crate) fn hint(id: u32) {
        if let Some(b) = ID_HINT.get_ptr_mut(id & (ID_HINT_SLOTS - 1)) {
            // SAFETY: a byte of our own map; concurrent writers all write 1.
            unsafe { *b = 1 };
        }
    }

    #[inline(always)]
    pub(crate) fn is_traced_tid(tid: u32) -> bool {
        // black_box keeps this a scalar: LLVM would otherwise OR two lookups' pointers
        // together, which the verifier rejects.
        maybe_traced(tid) && core::hint::black_box(TIDS.get_ptr(tid).is_some())
    }

    #[inline(always)]
    pub(crate) fn is_traced_tgid(tgid: u32) -> bool {
        maybe_traced(tgid) && TGIDS.get_ptr(tgid).is_some()
    }

    /// Counting mode's filter and state lookup in one: a live entry in `SCHED` proves
    /// `tid` traced; without one, `traced` decides, and a traced thread gets one (in
    /// `state`, since now). A traced thread's event costs one hash lookup instead of two.
    #[inline(always)]
    pub(crate) fn counted(
        tid: u32,
        state: u32,
        traced: impl FnOnce() -> bool,
    ) -> Option<*mut ThreadSched> {
        if maybe_traced(tid) {
            if let Some(t) = stat::live(tid) {
                return Some(t);
            }
        }
        if traced() {
            stat::create(tid, state, now())
        } else {
            None
        }
    }

    #[inline(always)]
    pub(crate) fn current() -> (u32, u32) {
        let id = bpf_get_current_pid_tgid();
        ((id >> 32) as u32, id as u32)
    }

    /// The offset of kernel structure field `$name` from `OFFSETS`: one load from the
    /// frozen global, which the verifier knows as a constant, as it must for the access.
    macro_rules! kernel_offset {
        ($name:ident) => {
            // SAFETY: a read of our own global, volatile as in `offsets`.
            unsafe { core::ptr::read_volatile(core::ptr::addr_of!($crate::shared::OFFSETS.$name)) }
        };
    }
    pub(crate) use kernel_offset;

    /// Reads a `T` at byte `offset` of the kernel object `base` points to: `base` is a
    /// BTF-typed tracepoint argument, so the verifier checks that a field of that size is
    /// there and makes the load one that cannot fault (a bad pointer reads 0).
    #[inline(always)]
    pub(crate) fn kernel_field<T>(base: *const u8, offset: u32) -> T {
        // SAFETY: checked by the verifier, as above.
        unsafe { core::ptr::read(base.add(offset as usize).cast::<T>()) }
    }

    /// Whether a probe hit by the current thread counts: probes attached machine-wide (on a
    /// traced cgroup's executables) are hit by every process that runs them.
    #[inline(always)]
    pub(crate) fn probed(tgid: u32, tid: u32) -> bool {
        is_traced_tgid(tgid) || joined(tgid, tid)
    }

    /// With a traced cgroup: whether the current thread, not traced yet, is in it (it
    /// entered it, as `podman exec` puts a process in a container), and if so, traces it
    /// from now on, saying so with a new-task record of its own.
    #[inline(always)]
    pub(crate) fn joined(tgid: u32, tid: u32) -> bool {
        config().cgroup != 0 && join_cgroup(tgid, tid)
    }

    /// [`joined`] past its first test: a function of its own (a BPF call), whose record
    /// would not fit in the stack of `sys_enter` beside its own.
    #[inline(never)]
    fn join_cgroup(tgid: u32, tid: u32) -> bool {
        let c = config();
        // By the cgroup itself, not its id at a level: right in a cgroup namespace too.
        if CGROUP.current_task_under_cgroup(0) != Ok(true) {
            return false;
        }
        hint(tid);
        hint(tgid);
        let _ = TGIDS.insert(tgid, 1, BPF_ANY as u64);
        if TIDS.insert(tid, tgid, BPF_ANY as u64).is_err() {
            bump(counter::THREADS_FULL);
        }
        let mut seen = NsIds { tid, tgid };
        if c.pidns != 0 {
            // SAFETY: helper without preconditions.
            let task = unsafe { bpf_get_current_task() } as *const u8;
            seen = crate::pidns::learn(task, tid);
        }
        emit(NewTask {
            h: header(tid, kind::NEW_TASK),
            child_tid: seen.tid,
            child_tgid: seen.tgid,
            comm: bpf_get_current_comm().unwrap_or_default(),
        });
        true
    }

    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo) -> ! {
        loop {}
    }
}
