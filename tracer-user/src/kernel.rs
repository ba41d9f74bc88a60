//! The kernel side of a recording: loading the eBPF programs, the per-CPU ring buffers,
//! the filter of traced threads, and the loss counters.

use std::{
    os::fd::{AsFd, OwnedFd},
    path::Path,
};

use anyhow::{anyhow, bail, Context, Result};
use aya::{
    maps::{
        Array, ArrayOfMaps, HashMap, Map, MapData, PerCpuArray, PerCpuHashMap, RingBuf,
        StackTraceMap,
    },
    programs::{BtfTracePoint, RawTracePoint, TracePoint, UProbe},
    Btf, Ebpf, EbpfLoader,
};
use rustc_hash::FxHashMap;

use crate::sessions::Attach;

use crate::record::Events;
use tracer_abi::{
    Config, FuncStat, Offsets, StackKey, SysStat, ThreadSched, UsdtSpec, MAX_CPUS, RING_BYTES,
};

mod filter;
mod losses;

use filter::PidNs;
pub use filter::SeenIds;
pub use losses::Losses;

/// The eBPF object built by `cargo xtask build`, embedded at compile time.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-ebpf.o"));

/// Classic tracepoints attached for every recording: (program, category, event).
const TRACEPOINTS: [(&str, &str, &str); 3] = [
    ("sched_process_exit", "sched", "sched_process_exit"),
    ("task_rename", "task", "task_rename"),
    ("sched_process_exec", "sched", "sched_process_exec"),
];

/// BTF (raw) tracepoints; each program has the tracepoint's name. Which are attached
/// depends on the event classes recorded: (program, whether it is attached).
fn btf_tracepoints(events: Events, cgroup: bool) -> [(&'static str, bool); 6] {
    [
        // Lifetimes: the filter follows new threads and processes whatever is recorded.
        ("task_newtask", true),
        ("sched_switch", events.sched),
        ("sched_wakeup", events.sched),
        ("sched_wakeup_new", events.sched),
        // A process entering a traced cgroup is found at its first system call.
        ("sys_enter", events.syscalls || cgroup),
        ("sys_exit", events.syscalls),
    ]
}

/// The uprobe programs, by what they are attached to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prog {
    /// A function's entry.
    Entry,
    /// A function's return (a uretprobe).
    Return,
    /// A Go function's entry, when it has no stack check.
    GoEntry,
    /// A Go function's entry, on its stack check's branch.
    GoEntryCheck,
    /// One of a Go function's return instructions.
    GoReturn,
    /// A native function's entry, its returns probed at their instructions.
    FrameEntry,
    /// One of such a function's return instructions.
    FrameReturn,
    /// One of such a function's jumps to another function (a tail call).
    FrameTail,
    /// Such a function's first instruction, when it returns: entry and exit at once.
    FrameThrough,
    /// Such a function's first instruction, when it jumps to another (a thunk).
    FrameThroughTail,
    /// A USDT probe.
    Usdt,
    /// Counting mode: a function's entry and, when the entry asks, its return (a uprobe
    /// session).
    Session,
    /// Counting mode: the count of a function whose sessions are one process's each
    /// (see `COOKIE_COUNTED_APART`).
    Count,
    /// Recording: Go's goroutine status changes (in `runtime.casgstatus`).
    GoStatus,
}

/// The program attached for `prog` (one that does nothing, when `empty`).
fn prog_name(prog: Prog, empty: bool) -> &'static str {
    match (prog, empty) {
        (Prog::Return, true) => "func_exit_empty",
        (Prog::Session, _) => "func_session",
        (_, true) => "func_entry_empty",
        (Prog::Entry, false) => "func_entry",
        (Prog::Return, false) => "func_exit",
        (Prog::GoEntry, false) => "go_entry",
        (Prog::GoEntryCheck, false) => "go_entry_check",
        (Prog::GoReturn, false) => "go_exit",
        (Prog::FrameEntry, false) => "frame_entry",
        (Prog::FrameReturn, false) => "frame_return",
        (Prog::FrameTail, false) => "frame_tail",
        (Prog::FrameThrough, false) => "frame_through",
        (Prog::FrameThroughTail, false) => "frame_through_tail",
        (Prog::Usdt, false) => "usdt",
        (Prog::Count, false) => "func_count",
        (Prog::GoStatus, false) => "go_status",
    }
}

/// Loaded programs and the maps the recorder talks to.
pub struct Kernel {
    ebpf: Option<Ebpf>,
    /// Every attachment, owned: dropping one detaches it. Owned rather than left to
    /// the programs so that `stop` can detach them all at once.
    links: Vec<Box<dyn Send>>,
    tgids: HashMap<MapData, u32, u32>,
    tids: HashMap<MapData, u32, u32>,
    /// The filter's first test (see `ID_HINT` in tracer-ebpf): set before the maps.
    hints: Array<MapData, u8>,
    counters: PerCpuArray<MapData, u64>,
    /// Processes whose exec removed their perf events (see tracer-ebpf's lifetimes).
    exec_unprobed: HashMap<MapData, u32, u8>,
    /// One ring buffer per CPU, indexed by CPU id.
    pub rings: Vec<RingBuf<MapData>>,
    /// Keeps the CPU -> ring buffer array alive while programs use it.
    _outer: ArrayOfMaps<MapData, RingBuf<MapData>>,
    /// Probes attach programs that do nothing (`--empty-probes`).
    empty_probes: bool,
    /// The aggregation maps, in counting mode.
    pub stat: Option<StatMaps>,
    /// Runs the kernel skipped, read once more when the programs are unloaded.
    skipped_at_stop: u64,
    /// The uprobe events the links use: declared after `links`, so dropped after them.
    uprobe_events: crate::uprobe::Events,
    /// In a container's PID namespace, how ids translate (see tracer-ebpf's `pidns`).
    pidns: Option<PidNs>,
    /// Counting mode's uprobe session programs (timing and empty), when the kernel has
    /// sessions: loaded by `sessions`, outside aya.
    sessions: Option<[OwnedFd; 2]>,
    /// Counting mode times every call (`--exact-latency`).
    every_call_timed: bool,
    /// The uprobe programs loaded for machine-wide links, and their empty floors.
    machine_wide: FxHashMap<(Prog, bool), OwnedFd>,
    /// See [`Kernel::per_process_uprobes`].
    per_process_uprobes: usize,
}

/// `tracer stat --stacks`' maps: the stacks by id, and the counts per key.
pub type StackMaps = (
    StackTraceMap<MapData>,
    PerCpuHashMap<MapData, StackKey, u64>,
);

/// Removes `key` from `counts` and returns its count summed over the CPUs, as the kernel
/// had it when removing it (`BPF_MAP_LOOKUP_AND_DELETE_ELEM`: an update racing with the
/// removal is in the count or lands after it, in a key of its own).
pub fn take_stack_count(
    counts: &PerCpuHashMap<MapData, StackKey, u64>,
    key: &StackKey,
) -> std::io::Result<u64> {
    use aya::maps::IterableMap;
    use aya_obj::generated::{bpf_attr, bpf_cmd};
    use std::os::fd::AsRawFd;
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    // One u64 a possible CPU: per-CPU values are 8-byte aligned.
    let mut values = vec![0u64; cpus];
    // SAFETY: a plain C union, valid when zeroed.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the fields of the command's member of the union.
    unsafe {
        let u = &mut attr.__bindgen_anon_2;
        u.map_fd = counts.map().fd().as_fd().as_raw_fd() as u32;
        u.key = key as *const StackKey as u64;
        u.__bindgen_anon_1.value = values.as_mut_ptr() as u64;
    }
    // The kernel reads a key and writes one value per possible CPU, the sizes the map
    // was made with.
    crate::sessions::sys_bpf(bpf_cmd::BPF_MAP_LOOKUP_AND_DELETE_ELEM, &mut attr)?;
    Ok(values.iter().sum())
}

/// Counting mode's maps (see tracer-ebpf/src/stat.rs).
pub struct StatMaps {
    /// With `--stacks`: the stacks by id, and the counts per (process, cause, stacks).
    pub stacks: Option<StackMaps>,
    pub funcs: PerCpuArray<MapData, FuncStat>,
    pub syscalls: PerCpuArray<MapData, SysStat>,
    pub sched: HashMap<MapData, u32, ThreadSched>,
}

impl Kernel {
    /// Loads the programs for a machine with `cpus` CPUs, with tracepoint layouts `offsets`,
    /// in the mode `config` says.
    pub fn load(cpus: u32, offsets: &Offsets, config: &Config, tracefs: &Path) -> Result<Kernel> {
        if OBJECT.is_empty() {
            bail!("this tracer was built without its eBPF programs; build it with `cargo xtask build`");
        }
        if cpus > MAX_CPUS {
            bail!("{cpus} CPUs: this build supports at most {MAX_CPUS}");
        }
        let stat_stacks = config.stat_mode != 0 && config.stacks != 0;
        let mut loader = EbpfLoader::new();
        size_maps(&mut loader, config, offsets, stat_stacks);
        let btf = Btf::from_sys_fs()
            .map_err(|e| anyhow!("reading the kernel's BTF (/sys/kernel/btf/vmlinux): {e}"))?;
        let object = crate::sessions::patch_kfunc_calls(OBJECT, &btf)?;
        let mut ebpf = loader
            .load(&object)
            .map_err(|e| anyhow!("loading the eBPF programs failed: {e}"))?;
        // Before any map leaves `ebpf`: these programs share them.
        let sessions = match config.stat_mode {
            0 => None,
            _ => load_sessions(&object, &ebpf),
        };
        let machine_wide = load_machine_wide(&object, &ebpf)?;
        let mut outer: ArrayOfMaps<MapData, RingBuf<MapData>> =
            take_map(&mut ebpf, "EVENTS")?.try_into()?;
        let tgids: HashMap<MapData, u32, u32> = take_map(&mut ebpf, "TGIDS")?.try_into()?;
        let tids: HashMap<MapData, u32, u32> = take_map(&mut ebpf, "TIDS")?.try_into()?;
        let hints: Array<MapData, u8> = take_map(&mut ebpf, "ID_HINT")?.try_into()?;
        let counters: PerCpuArray<MapData, u64> = take_map(&mut ebpf, "COUNTERS")?.try_into()?;
        let exec_unprobed: HashMap<MapData, u32, u8> =
            take_map(&mut ebpf, "EXEC_UNPROBED")?.try_into()?;
        let pidns = match config.pidns {
            0 => None,
            _ => Some(PidNs {
                ids: take_map(&mut ebpf, "NS_IDS")?.try_into()?,
                to_kernel: FxHashMap::default(),
            }),
        };
        let stat = match config.stat_mode {
            0 => None,
            _ => Some(take_stat_maps(&mut ebpf, stat_stacks)?),
        };
        let rings = install_rings(&mut outer, cpus)?;
        Ok(Kernel {
            ebpf: Some(ebpf),
            links: Vec::new(),
            tgids,
            tids,
            hints,
            counters,
            exec_unprobed,
            rings,
            _outer: outer,
            empty_probes: false,
            stat,
            skipped_at_stop: 0,
            uprobe_events: crate::uprobe::Events::new(tracefs),
            pidns,
            sessions,
            every_call_timed: config.stat_mode != 0
                && config.time_every == 1
                && config.time_budget == 0,
            machine_wide,
            per_process_uprobes: 0,
        })
    }

    fn ebpf(&mut self) -> &mut Ebpf {
        self.ebpf.as_mut().expect("programs already unloaded")
    }

    /// Whether process `pid`'s last exec removed its perf events (its inherited uprobes
    /// with them), as the programs saw it; forgotten once asked.
    pub fn exec_dropped_probes(&mut self, pid: u32) -> bool {
        match self.kernel_id(pid) {
            Ok(Some(k)) => self.exec_unprobed.remove(&k).is_ok(),
            _ => false,
        }
    }

    /// Attaches the scheduler, system call and lifetime tracepoints; `empty` attaches
    /// programs that do nothing instead, to measure the kernel's own cost.
    pub fn attach_tracepoints(&mut self, empty: bool, events: Events, cgroup: bool) -> Result<()> {
        let btf_tracepoints = btf_tracepoints(events, cgroup);
        let attached = btf_tracepoints
            .iter()
            .filter(|(_, on)| *on)
            .map(|(p, _)| *p);
        for (prog, category, event) in TRACEPOINTS {
            let prog = if empty { "tracepoint_empty" } else { prog };
            let p: &mut TracePoint = self.program(prog)?;
            if p.fd().is_err() {
                p.load()
                    .map_err(|e| anyhow!("the kernel refused program {prog}: {e}"))?;
            }
            let id = p
                .attach(category, event)
                .map_err(|e| anyhow!("attaching to tracepoint {category}:{event}: {e}"))?;
            let link = p.take_link(id)?;
            self.links.push(Box::new(link));
        }
        if empty {
            // The kernel's path to a BTF tracepoint program is a raw tracepoint's: one
            // empty raw program stands for them all.
            for event in attached {
                let p: &mut RawTracePoint = self.program("raw_tracepoint_empty")?;
                if p.fd().is_err() {
                    p.load()
                        .map_err(|e| anyhow!("the kernel refused an empty program: {e}"))?;
                }
                let id = p
                    .attach(event)
                    .map_err(|e| anyhow!("attaching to raw tracepoint {event}: {e}"))?;
                let link = p.take_link(id)?;
                self.links.push(Box::new(link));
            }
            return Ok(());
        }
        let btf = Btf::from_sys_fs()
            .map_err(|e| anyhow!("reading the kernel's BTF (/sys/kernel/btf/vmlinux): {e}"))?;
        for event in attached {
            let p: &mut BtfTracePoint = self.program(event)?;
            p.load(event, &btf)
                .map_err(|e| anyhow!("the kernel refused program {event}: {e}"))?;
            let id = p
                .attach()
                .map_err(|e| anyhow!("attaching to BTF tracepoint {event}: {e}"))?;
            let link = p.take_link(id)?;
            self.links.push(Box::new(link));
        }
        Ok(())
    }

    /// Attaches `stack_sample` to a software cpu-clock event on each CPU at `hz` samples
    /// per second of CPU time; counting, also the program that counts blocking stacks.
    pub fn attach_sampler(&mut self, cpus: u32, hz: u64, counting: bool) -> Result<()> {
        if counting {
            let btf = Btf::from_sys_fs()
                .map_err(|e| anyhow!("reading the kernel's BTF (/sys/kernel/btf/vmlinux): {e}"))?;
            let p: &mut BtfTracePoint = self.program("sched_switch_stacks")?;
            p.load("sched_switch", &btf)
                .map_err(|e| anyhow!("the kernel refused program sched_switch_stacks: {e}"))?;
            let id = p
                .attach()
                .map_err(|e| anyhow!("attaching to BTF tracepoint sched_switch: {e}"))?;
            let link = p.take_link(id)?;
            self.links.push(Box::new(link));
        }
        use aya::programs::perf_event::{
            PerfEvent, PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent,
        };
        let p: &mut PerfEvent = self.program("stack_sample")?;
        p.load()
            .map_err(|e| anyhow!("the kernel refused program stack_sample: {e}"))?;
        let online =
            aya::util::online_cpus().map_err(|(path, e)| anyhow!("reading {path}: {e}"))?;
        let mut links = Vec::new();
        for cpu in online.into_iter().filter(|&c| c < cpus) {
            let id = p
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(hz),
                    false,
                )
                .map_err(|e| anyhow!("opening the cpu-clock event of CPU {cpu}: {e}"))?;
            links.push(Box::new(p.take_link(id)?) as Box<dyn Send>);
        }
        self.links.extend(links);
        Ok(())
    }

    fn program<'a, P>(&'a mut self, name: &str) -> Result<&'a mut P>
    where
        &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
    {
        let p = self
            .ebpf()
            .program_mut(name)
            .ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))?;
        Ok(p.try_into()?)
    }

    /// Whether function probes on a process's own executable are attached machine-wide
    /// (a traced cgroup: a process entering it is probed from its first call).
    pub fn machine_wide(&self) -> bool {
        !self.machine_wide.is_empty()
    }

    /// Whether functions are probed with uprobe sessions (counting mode, when the kernel
    /// has them).
    pub fn sessions(&self) -> bool {
        self.sessions.is_some()
    }

    /// Whether counting mode times every call (`--exact-latency`).
    pub fn every_call_timed(&self) -> bool {
        self.every_call_timed
    }

    /// Records of probes that do nothing (`--empty-probes`): the kernel's own cost.
    pub fn empty_probes(&mut self, empty: bool) {
        self.empty_probes = empty;
    }

    /// Attaches program `prog` at `offset` of `binary` for process `pid` and, with
    /// `inherit`, the processes it creates later, with attach cookie `cookie` (the probe
    /// id its records are tagged with, and for a frame entry
    /// [`tracer_abi::COOKIE_STACKS_SWITCH`]);
    /// `ref_ctr`: the file offset of a USDT probe's semaphore, which the kernel raises
    /// while the probe is attached. `pid` 0: machine-wide (sessions, and function probes
    /// of a traced cgroup's executables), the programs keeping to traced processes.
    #[allow(clippy::too_many_arguments)]
    pub fn attach_probe(
        &mut self,
        prog: Prog,
        binary: &Path,
        offset: u64,
        ref_ctr: Option<u64>,
        cookie: u64,
        pid: u32,
        inherit: bool,
    ) -> Result<()> {
        if prog == Prog::Session {
            let programs = self
                .sessions
                .as_ref()
                .context("uprobe sessions are not loaded")?;
            let program = &programs[self.empty_probes as usize];
            let how = (Attach::Session, 0);
            let link = crate::sessions::link(program, how, binary, &[offset], &[cookie], pid)?;
            self.links.push(Box::new(link));
            return Ok(());
        }
        if pid == 0 {
            let program = (self.machine_wide.get(&(prog, self.empty_probes)))
                .with_context(|| format!("no machine-wide program for {prog:?} probes"))?;
            let flags = if prog == Prog::Return {
                crate::sessions::RETURN
            } else {
                0
            };
            let how = (Attach::Multi, flags);
            let link = crate::sessions::link(program, how, binary, &[offset], &[cookie], 0)?;
            self.links.push(Box::new(link));
            return Ok(());
        }
        let name = prog_name(prog, self.empty_probes);
        let p: &mut UProbe = self.program(name)?;
        if p.fd().is_err() {
            p.load()
                .map_err(|e| anyhow!("the kernel refused program {name}: {e}"))?;
        }
        let fd = p.fd()?.as_fd().try_clone_to_owned()?;
        let point = crate::uprobe::Point {
            binary,
            offset,
            ret: prog == Prog::Return,
            ref_ctr,
        };
        let link = self
            .uprobe_events
            .attach(fd.as_fd(), &point, pid, inherit, cookie)?;
        self.links.push(Box::new(link));
        self.per_process_uprobes += 1;
        Ok(())
    }

    /// Tells the `usdt` program how to read the arguments of probe `id`.
    pub fn set_usdt_spec(&mut self, id: u32, spec: &UsdtSpec) -> Result<()> {
        let mut specs: Array<&mut MapData, UsdtSpec> = Array::try_from(
            self.ebpf()
                .map_mut("USDT_SPECS")
                .ok_or_else(|| anyhow!("map USDT_SPECS missing from the eBPF object"))?,
        )?;
        specs
            .set(id, spec, 0)
            .with_context(|| format!("describing the arguments of USDT probe {id}"))
    }

    /// Traces only system calls `numbers` (with `Config::syscall_filter`).
    pub fn trace_syscalls(&mut self, numbers: &[u32]) -> Result<()> {
        let map = (self.ebpf().map_mut("SYSCALLS")).context("map SYSCALLS missing")?;
        let mut wanted: Array<&mut MapData, u8> = map.try_into()?;
        for &nr in numbers {
            wanted
                .set(nr, 1, 0)
                .with_context(|| format!("system call {nr} is beyond the filter's table"))?;
        }
        Ok(())
    }

    /// How many uprobes are attached to a process each (tracefs events, opened per
    /// process): [`Kernel::stop`] undoes those one at a time (see [`SLOW_DETACH`]).
    pub fn per_process_uprobes(&self) -> usize {
        self.per_process_uprobes
    }

    /// Detaches and unloads every program: nothing new enters the ring buffers, whose
    /// contents stay readable.
    pub fn stop(&mut self) {
        detach(&mut self.links);
        self.skipped_at_stop = self.skipped();
        self.ebpf = None;
        self.uprobe_events.remove();
    }
}

impl Drop for Kernel {
    /// Detaches as [`Kernel::stop`] does, when an error ends a recording before it.
    fn drop(&mut self) {
        detach(&mut self.links);
    }
}

/// Drops every link: each detach waits for an RCU grace period, and detaching in
/// parallel lets them share one instead of paying one per link.
fn detach(links: &mut Vec<Box<dyn Send>>) {
    std::thread::scope(|s| {
        for link in links.drain(..) {
            s.spawn(move || drop(link));
        }
    });
}

/// Uprobes attached per process from which stopping takes long enough to say so: the
/// kernel undoes them one at a time, under one lock, a grace period each
/// (docs/performance.md).
pub const SLOW_DETACH: usize = 20;

/// Counting mode's uprobe session programs (timing and empty), loaded outside aya; none
/// when the kernel cannot load them (said once).
fn load_sessions(object: &[u8], ebpf: &Ebpf) -> Option<[OwnedFd; 2]> {
    let load = |name| crate::sessions::load(object, ebpf, name, Attach::Session);
    match (load("func_session"), load("func_session_empty")) {
        (Ok(a), Ok(b)) => Some([a, b]),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("tracer: warning: {e:#}: every call of a probed function has its return probed (uretprobes)");
            None
        }
    }
}

/// The uprobe programs of machine-wide links, and their empty floors, by program. A
/// process's own executable is probed machine-wide, the programs keeping to traced
/// processes: its forks, and with a traced cgroup the processes entering it, are probed
/// from their first call, and one link per probe detaches at once (docs/performance.md).
/// uprobe_multi links, whose programs aya cannot load.
fn load_machine_wide(object: &[u8], ebpf: &Ebpf) -> Result<FxHashMap<(Prog, bool), OwnedFd>> {
    let mut machine_wide = FxHashMap::default();
    for prog in [
        Prog::Entry,
        Prog::Return,
        Prog::GoEntry,
        Prog::GoEntryCheck,
        Prog::GoReturn,
        Prog::FrameEntry,
        Prog::FrameReturn,
        Prog::FrameTail,
        Prog::FrameThrough,
        Prog::FrameThroughTail,
        Prog::GoStatus,
    ] {
        for empty in [false, true] {
            let name = prog_name(prog, empty);
            let fd = crate::sessions::load(object, ebpf, name, Attach::Multi)?;
            machine_wide.insert((prog, empty), fd);
        }
    }
    Ok(machine_wide)
}

/// Map `name`, taken out of the loaded object.
fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<Map> {
    ebpf.take_map(name)
        .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))
}

/// Counting mode's maps, taken out of the loaded object (the stacks' with `--stacks`).
fn take_stat_maps(ebpf: &mut Ebpf, stacks: bool) -> Result<StatMaps> {
    Ok(StatMaps {
        funcs: take_map(ebpf, "FUNC_STATS")?.try_into()?,
        syscalls: take_map(ebpf, "SYS_STATS")?.try_into()?,
        sched: take_map(ebpf, "SCHED")?.try_into()?,
        stacks: match stacks {
            true => Some((
                take_map(ebpf, "STACK_IDS")?.try_into()?,
                take_map(ebpf, "STACK_COUNTS")?.try_into()?,
            )),
            false => None,
        },
    })
}

/// Gives the loader the constants the programs are built against, and shrinks the maps
/// this mode does not use to one entry.
fn size_maps<'a>(
    loader: &mut EbpfLoader<'a>,
    config: &'a Config,
    offsets: &'a Offsets,
    stat_stacks: bool,
) {
    loader
        .override_global("OFFSETS", offsets, true)
        .override_global("CONFIG", config, true);
    if config.stat_mode == 0 {
        // Counting mode's maps are preallocated (its hash maps tens of MiB, long to
        // create; its per-CPU counters over a MiB a CPU) and never touched when recording.
        for map in [
            "SCHED",
            "SAMPLED",
            "FRAME_CALLS",
            "FUNC_STATS",
            "SYS_STATS",
            "SAMPLE_TICK",
            "TIME_PICK",
            "BUDGET",
        ] {
            loader.map_max_entries(map, 1);
        }
    }
    if config.pidns == 0 {
        loader.map_max_entries("NS_IDS", 1);
    }
    if !stat_stacks {
        // Preallocated (a stack-trace map holds 1 KiB a stack); used by stat --stacks.
        for map in ["STACK_IDS", "STACK_COUNTS"] {
            loader.map_max_entries(map, 1);
        }
    } else if let Some(slots) = (std::env::var("TRACER_TEST_STACK_SLOTS").ok())
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|&n| n > 0)
    {
        // For the tests: a table of stacks so small that stacks collide in it.
        loader.map_max_entries("STACK_IDS", slots);
    }
}

/// A ring buffer per CPU, each in its slot of the outer map the programs emit through.
fn install_rings(
    outer: &mut ArrayOfMaps<MapData, RingBuf<MapData>>,
    cpus: u32,
) -> Result<Vec<RingBuf<MapData>>> {
    let mut rings = Vec::with_capacity(cpus as usize);
    for cpu in 0..cpus {
        let def = aya_obj_ringbuf();
        let data = MapData::create(def, &format!("tracer_rb{cpu}"), None)
            .with_context(|| format!("creating the ring buffer of CPU {cpu}"))?;
        let ring: RingBuf<MapData> = Map::from_map_data(data)?.try_into()?;
        outer
            .set(cpu, &ring, 0)
            .with_context(|| format!("installing the ring buffer of CPU {cpu}"))?;
        rings.push(ring);
    }
    Ok(rings)
}

/// Definition of one per-CPU ring buffer, matching the inner map of `EVENTS`.
fn aya_obj_ringbuf() -> aya_obj::Map {
    const BPF_MAP_TYPE_RINGBUF: u32 = 27;
    aya_obj::Map::new_from_params(BPF_MAP_TYPE_RINGBUF, 0, 0, RING_BYTES, 0)
}
