//! The eBPF programs: where every event of a trace is born.
//!
//! - `func_entry` / `func_exit`: one uprobe/uretprobe pair shared by every probed function;
//!   the attach cookie is the function's id in the probe table.
//! - `sys_enter` / `sys_exit`: system calls, for threads of traced processes.
//! - `sched_switch`, `sched_wakeup`, `sched_wakeup_new`: the scheduler, for traced threads.
//!
//! These five see every system call and context switch of the machine, so they are BTF
//! (raw) tracepoints: the kernel calls them with its own arguments instead of first
//! building the classic tracepoint's record. Their arguments are typed pointers (a task,
//! the saved registers) that the verifier lets them load from directly, at offsets the
//! loader took from BTF: a plain load instead of a `bpf_probe_read_kernel` call each. The
//! rare lifetime events below stay classic. (What each saves: docs/performance.md.)
//! - `task_newtask`, `sched_process_exit`, `task_rename`, `sched_process_exec`: thread
//!   lifetimes and names; a new thread or child process of a traced process is traced too.
//! - `go_entry`, `go_entry_check`, `go_exit` (module `go`): Go functions, at their entry
//!   and each return instruction, paired by goroutine.
//! - `usdt`: USDT probes, their arguments read as their notes say (module `usdt`).
//! - `stack_sample` (module `stacks`, with `--stacks`): on-CPU samples' stacks, and from
//!   `sched_switch` the stack a traced thread blocks in.
//! - `ns_ids`: a task iterator the recorder runs once when it is in a container's PID
//!   namespace, to learn the kernel's ids of the tasks it sees (module `pidns`).
//!
//! Records go to the ring buffer of the CPU they happen on (no contention between CPUs)
//! without waking the reader, which drains on a short timer. A record that finds its buffer
//! full is counted in `COUNTERS[LOST]` for that CPU.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
mod go;
#[cfg(target_arch = "bpf")]
mod pidns;
#[cfg(target_arch = "bpf")]
mod stacks;
#[cfg(target_arch = "bpf")]
mod stat;
#[cfg(target_arch = "bpf")]
mod usdt;

#[cfg(target_arch = "bpf")]
mod programs {
    use aya_ebpf::{
        bindings::{BPF_ANY, BPF_RB_NO_WAKEUP},
        btf_maps::{Array, ArrayOfMaps, CgroupArray, HashMap, PerCpuArray, RingBuf},
        helpers::{
            bpf_get_current_comm, bpf_get_current_pid_tgid, generated::bpf_get_attach_cookie,
            generated::bpf_get_current_task, generated::bpf_get_smp_processor_id,
            generated::bpf_ktime_get_ns,
        },
        macros::{btf_map, btf_tracepoint, raw_tracepoint, tracepoint, uprobe, uretprobe},
        programs::{
            BtfTracePointContext, ProbeContext, RawTracePointContext, RetProbeContext,
            TracePointContext,
        },
        EbpfContext,
    };
    use tracer_abi::*;

    use crate::{stacks, stat};

    #[btf_map]
    pub(crate) static EVENTS: ArrayOfMaps<
        RingBuf<u8, { RING_BYTES as usize }>,
        { MAX_CPUS as usize },
    > = ArrayOfMaps::new();

    /// Traced processes (tgid -> 1): filters system calls and inherits to new threads.
    #[btf_map]
    static TGIDS: HashMap<u32, u32, { MAX_PROCESSES as usize }> = HashMap::new();

    /// Traced threads (tid -> tgid): filters scheduler events, which carry tids only.
    #[btf_map]
    static TIDS: HashMap<u32, u32, { MAX_THREADS as usize }> = HashMap::new();

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

    /// With `Config::syscall_filter`, the system calls traced: a byte per number.
    #[btf_map]
    static SYSCALLS: Array<u8, { MAX_SYSCALLS as usize }> = Array::new();

    /// Whether system call `nr` is one of those traced.
    #[inline(always)]
    fn wanted(nr: u32) -> bool {
        config().syscall_filter == 0 || SYSCALLS.get(nr).is_some_and(|b| *b != 0)
    }

    /// The traced cgroup, with `Config::cgroup` (its directory, set by the recorder).
    #[btf_map]
    static CGROUP: CgroupArray<1> = CgroupArray::new();

    /// Tracepoint field and kernel structure offsets; the recorder sets them from tracefs
    /// and BTF before loading.
    #[no_mangle]
    static OFFSETS: Offsets = Offsets::DEFAULT;

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
    fn sampled(tid: u32) -> bool {
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
    fn seen(tid: u32) -> u32 {
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
    fn maybe_traced(id: u32) -> bool {
        ID_HINT
            .get(id & (ID_HINT_SLOTS - 1))
            .is_some_and(|b| *b != 0)
    }

    #[inline(always)]
    fn hint(id: u32) {
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
    fn is_traced_tgid(tgid: u32) -> bool {
        maybe_traced(tgid) && TGIDS.get_ptr(tgid).is_some()
    }

    /// Counting mode's filter and state lookup in one: a live entry in `SCHED` proves
    /// `tid` traced; without one, `traced` decides, and a traced thread gets one (in
    /// `state`, since now). A traced thread's event costs one hash lookup instead of two.
    #[inline(always)]
    fn counted(tid: u32, state: u32, traced: impl FnOnce() -> bool) -> Option<*mut ThreadSched> {
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

    /// The offset of kernel structure field `$name` from `OFFSETS`: one load from the
    /// frozen global, which the verifier knows as a constant, as it must for the access.
    macro_rules! kernel_offset {
        ($name:ident) => {
            // SAFETY: a read of our own global, volatile as in `offsets`.
            unsafe { core::ptr::read_volatile(core::ptr::addr_of!(OFFSETS.$name)) }
        };
    }

    /// Reads a `T` at byte `offset` of the kernel object `base` points to: `base` is a
    /// BTF-typed tracepoint argument, so the verifier checks that a field of that size is
    /// there and makes the load one that cannot fault (a bad pointer reads 0).
    #[inline(always)]
    fn kernel_field<T>(base: *const u8, offset: u32) -> T {
        // SAFETY: checked by the verifier, as above.
        unsafe { core::ptr::read(base.add(offset as usize).cast::<T>()) }
    }

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
        let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
        let ret: u64 = ctx.ret();
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
        let func = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
        let stamp = unsafe { bpf_session_cookie() };
        let (tgid, tid) = current();
        // SAFETY: a kfunc without preconditions in a session program.
        if unsafe { bpf_session_is_return() } {
            // SAFETY: the session's cookie, written by this call's entry; the saved
            // registers of the return.
            let (start, ret) = unsafe { (*stamp, (*ctx.regs).rax) };
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
        let chosen = stat::session_entry(tid, func, t, &c);
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

    /// The kernel's floor for a session: an entry that never asks for the return.
    #[no_mangle]
    #[link_section = "uprobe"]
    pub fn func_session_empty(_ctx: *mut core::ffi::c_void) -> u32 {
        1
    }

    /// Per probe-table id of a USDT probe, how to read its arguments; set by the recorder.
    #[btf_map]
    static USDT_SPECS: Array<UsdtSpec, { MAX_FUNCS as usize }> = Array::new();

    /// A USDT probe: its arguments, read as its note says.
    #[uprobe]
    pub fn usdt(ctx: ProbeContext) -> u32 {
        // SAFETY: helper reading this program's attach cookie.
        let probe = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
        let (tgid, tid) = current();
        if !probed(tgid, tid) {
            return 0;
        }
        if counting() {
            // Counting mode counts hits; their arguments are not aggregated.
            let _ = stat::count(probe);
            return 0;
        }
        let Some(spec) = USDT_SPECS.get(probe) else {
            return 0;
        };
        let mut rec = Usdt {
            h: header(tid, kind::USDT),
            probe,
            nargs: spec.nargs,
            args: [0; MAX_USDT_ARGS],
        };
        for i in 0..MAX_USDT_ARGS {
            if (i as u32) < spec.nargs {
                rec.args[i] = crate::usdt::arg(&ctx, &spec.args[i]);
            }
        }
        emit(rec);
        0
    }

    /// The kernel's floor for a probe: what `func_entry` costs minus the recording.
    /// Attached instead of it by `tracer record --empty-probes` (benchmarks only).
    #[uprobe]
    pub fn func_entry_empty(_ctx: ProbeContext) -> u32 {
        0
    }

    #[uretprobe]
    pub fn func_exit_empty(_ctx: RetProbeContext) -> u32 {
        0
    }

    /// The same for every tracepoint (`--empty-probes` attaches these in place of all).
    #[tracepoint]
    pub fn tracepoint_empty(_ctx: TracePointContext) -> u32 {
        0
    }

    #[raw_tracepoint]
    pub fn raw_tracepoint_empty(_ctx: RawTracePointContext) -> u32 {
        0
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
    fn joined(tgid: u32, tid: u32) -> bool {
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
        emit(Rename {
            h: header(tid, kind::EXEC),
            comm: bpf_get_current_comm().unwrap_or_default(),
        });
        0
    }

    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo) -> ! {
        loop {}
    }
}
