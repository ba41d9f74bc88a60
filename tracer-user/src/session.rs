//! Everything a recording sets up before its loop: checks, probe resolution, loading and
//! attaching the programs, the launched command, the threads already there, and the
//! first file's preamble.

use std::{path::PathBuf, time::SystemTime};

use anyhow::{anyhow, bail, Result};
use trace_file::{Probe, ProcessInfo, ThreadInfo, TraceHeader};

use crate::{
    attach::Probes,
    cgroup::Cgroup,
    clock,
    files::{segment_path, Preamble, TraceWriter},
    kernel::Kernel,
    launch::Launched,
    output, preflight, probes, procfs,
    record::RecordOptions,
    stat, tracefs,
    trigger::Watch,
};

/// A recording, attached and ready to drain.
pub struct Session {
    pub kernel: Kernel,
    pub cpus: u32,
    /// The calls `--trigger` watches.
    pub watch: Option<Watch>,
    /// Which process has which probes.
    pub probes: Probes,
    /// The processes traced from the start (given, launched, in the cgroup).
    pub pids: Vec<u32>,
    /// The cgroup traced, if one is.
    pub cgroup: Option<Cgroup>,
    pub launched: Option<Launched>,
    /// Their threads when the filter was seeded.
    pub threads: Vec<ThreadInfo>,
    /// CLOCK_MONOTONIC when the threads were seeded.
    pub seeded_at: u64,
    pub preamble: Preamble,
    /// The first file.
    pub first: PathBuf,
}

impl Session {
    /// Checks, resolves, loads and attaches; the launched command, if any, is released
    /// last, traced from its first instruction. Returns the session and the writer of its
    /// first file, the preamble written.
    pub fn start(opts: &RecordOptions) -> Result<(Session, TraceWriter)> {
        let tracefs = preflight::check(&opts.pids)?;
        let offsets = tracefs::offsets(&tracefs)?;

        let Targets {
            launch_target,
            cgroup,
            members,
            mut resolved,
        } = Targets::resolve(opts)?;
        let watch = match &opts.trigger {
            Some(t) => Some(Watch::new(t, &resolved)?),
            None => None,
        };
        let first = match opts.rotate {
            Some(_) => segment_path(&opts.output, SystemTime::now()),
            None => opts.output.clone(),
        };
        let file = output::create_exclusive(&first, opts.force)?;
        let created = output::Provisional::new(&first);
        let cpus = procfs::possible_cpus()?;
        let config = kernel_config(opts, cpus, cgroup.is_some())?;
        let mut kernel = Kernel::load(cpus, &offsets, &config, &tracefs)?;
        if let Some(cg) = &cgroup {
            kernel.trace_cgroup(&cg.dir)?;
        }
        if let Some(numbers) = &opts.syscalls {
            kernel.trace_syscalls(numbers)?;
        }

        let launched = match &launch_target {
            Some(program) => Some(Launched::spawn(program, &opts.command)?),
            None => None,
        };
        let mut pids = opts.pids.clone();
        pids.extend(launched.as_ref().map(|l| l.pid));
        for &pid in &pids {
            if !kernel.trace_process(pid)? {
                bail!("process {pid} exited before it could be traced");
            }
        }
        for &pid in &members {
            // One that left meanwhile is not traced; one that enters is found by the kernel.
            if !pids.contains(&pid) && kernel.trace_process(pid)? {
                pids.push(pid);
            }
        }
        // Tracepoints first, then the thread list and the descendants: a thread or process
        // created in between is caught by task_newtask (its process is already in the
        // filter) and listed by /proc as well.
        kernel.attach_tracepoints(opts.empty_probes, opts.events, cgroup.is_some())?;
        if let Some(hz) = opts.stacks {
            kernel.attach_sampler(cpus, hz, opts.stat.is_some())?;
        }
        if opts.inherit {
            let descendants = trace_descendants(&mut kernel, &pids)?;
            probes::extend_to(
                &mut resolved,
                &opts.pids,
                &descendants,
                &opts.uprobes,
                opts.matching,
            );
            pids.extend(descendants);
        }
        let seeded_at = clock::monotonic_ns();
        let threads = seed_threads(&mut kernel, &pids, opts.stat.is_some(), seeded_at)?;
        let (probes, table) = Probes::attach(
            &mut kernel,
            resolved,
            launched.as_ref().map(|l| l.pid),
            opts.inherit,
            opts.empty_probes,
            opts.stat.is_none(),
        )?;
        let n = kernel.per_process_uprobes();
        if n >= crate::kernel::SLOW_DETACH {
            eprintln!("tracer: warning: {n} uprobes attached per process (functions of libraries, USDT probes): stopping undoes them one at a time, a kernel grace period each (tens to hundreds of ms), and slows other tracers' stops meanwhile");
        }
        let mut preamble = preamble(opts, cpus, launched.as_ref(), table);
        preamble.header.go_status = probes.go_status();
        let processes: Vec<ProcessInfo> = (pids.iter())
            .map(|&pid| kernel.process_info(pid, preamble.launched == Some(pid)))
            .collect();
        let writer = preamble.write(file, &processes, &threads)?;
        if let Some(l) = &launched {
            l.release();
        }
        let session = Session {
            kernel,
            cpus,
            watch,
            probes,
            pids,
            cgroup,
            launched,
            threads,
            seeded_at,
            preamble,
            first: first.clone(),
        };
        created.keep();
        Ok((session, writer))
    }
}

/// What `-u`, `--pid`, `--cgroup` and the command name, resolved.
struct Targets {
    /// The command to launch, found in PATH.
    launch_target: Option<PathBuf>,
    cgroup: Option<Cgroup>,
    /// The cgroup's processes now.
    members: Vec<u32>,
    resolved: Vec<probes::Resolved>,
}

impl Targets {
    /// Resolves the probes of every target before anything touches the kernel or the
    /// output, so a typo costs nothing.
    fn resolve(opts: &RecordOptions) -> Result<Targets> {
        let launch_target = match opts.command.first() {
            Some(cmd) => {
                Some(procfs::which(cmd).ok_or_else(|| anyhow!("command not found: {cmd}"))?)
            }
            None => None,
        };
        let mut roots: Vec<probes::Target> = (opts.pids.iter())
            .map(|&p| probes::Target {
                pid: Some(p),
                target: symbolizer::Target::Pid(p),
                same_exe: Vec::new(),
            })
            .collect();
        if let Some(path) = &launch_target {
            roots.push(probes::Target {
                pid: None,
                target: symbolizer::Target::Path(path.clone()),
                same_exe: Vec::new(),
            });
        }
        // A cgroup's processes are targets as --pid's are, resolved once per executable.
        let cgroup = opts.cgroup.as_deref().map(Cgroup::open).transpose()?;
        let members = cgroup.as_ref().map(Cgroup::processes).unwrap_or_default();
        if let Some(cg) = &cgroup {
            if members.is_empty() && !opts.uprobes.is_empty() {
                bail!(
                    "cgroup {} has no process now to find the functions of -u in",
                    cg.path.display()
                );
            }
        }
        roots.extend(probes::by_executable(&members));
        let resolved = probes::resolve_all(&opts.uprobes, &roots, opts.matching)?;
        for line in probes::return_notes(&resolved, &roots) {
            eprintln!("tracer: {line}");
        }
        if opts.stat.is_some_and(|s| s.sample_every != 0) {
            if let Some(note) = probes::unsampled_note(&resolved) {
                eprintln!("tracer: warning: {note}");
            }
        }
        Ok(Targets {
            launch_target,
            cgroup,
            members,
            resolved,
        })
    }
}

/// The constants the programs are loaded with.
fn kernel_config(opts: &RecordOptions, cpus: u32, cgroup: bool) -> Result<tracer_abi::Config> {
    Ok(tracer_abi::Config {
        stat_mode: opts.stat.is_some() as u32,
        sample_every: opts.stat.map_or(0, |s| s.sample_every),
        inherit: opts.inherit as u32,
        pidns: crate::procfs::in_child_pid_namespace()? as u32,
        cgroup: cgroup as u32,
        time_every: opts.stat.map_or(1, |s| s.time_every),
        // Without system calls but with a cgroup, sys_enter only finds newcomers.
        syscall_filter: (opts.syscalls.is_some() || !opts.events.syscalls) as u32,
        stacks: opts.stacks.is_some() as u32,
        time_budget: (opts.stat.and_then(|s| s.time_budget))
            .map_or(0, |k| budget_allowance(k, cpus)),
        _pad: 0,
    })
}

/// Puts every descendant of `roots` in the filter, each before its own children are looked
/// for, so that none forked meanwhile is missed; returns them.
fn trace_descendants(kernel: &mut Kernel, roots: &[u32]) -> Result<Vec<u32>> {
    let mut traced: std::collections::BTreeSet<u32> = roots.iter().copied().collect();
    let mut found = Vec::new();
    loop {
        let children = procfs::children_of(&traced);
        if children.is_empty() {
            return Ok(found);
        }
        for pid in children {
            // A child that exited since /proc listed it has nothing left to trace.
            if kernel.trace_process(pid)? {
                found.push(pid);
            }
            traced.insert(pid);
        }
    }
}

/// Puts every thread of `pids` in the filter (and, counting, starts its state clock);
/// returns them.
fn seed_threads(
    kernel: &mut Kernel,
    pids: &[u32],
    counting: bool,
    now: u64,
) -> Result<Vec<ThreadInfo>> {
    let mut threads = Vec::new();
    for &pid in pids {
        // A descendant that exited since it was found has no threads left to list.
        for t in kernel.thread_infos(pid) {
            kernel.trace_thread(t.tid, pid)?;
            if counting {
                let seed = tracer_abi::ThreadSched {
                    since: now,
                    state: stat::seed_state(pid, t.tid, t.state),
                    cpu: procfs::last_cpu(pid, t.tid).unwrap_or(0),
                    exec_base: procfs::exec_ns(pid, t.tid).unwrap_or(0),
                    exec_at: now,
                    ..Default::default()
                };
                kernel.seed_thread(t.tid, seed)?;
            }
            threads.push(t);
        }
    }
    Ok(threads)
}

fn preamble(
    opts: &RecordOptions,
    cpus: u32,
    launched: Option<&Launched>,
    probes: Vec<Probe>,
) -> Preamble {
    let start_ns = clock::monotonic_ns();
    Preamble {
        header: TraceHeader {
            tracer_version: env!("CARGO_PKG_VERSION").into(),
            hostname: hostname(),
            kernel: kernel_release(),
            cpus,
            clock: "CLOCK_MONOTONIC".into(),
            monotonic_to_realtime_ns: clock::monotonic_to_realtime(),
            start_ns,
            command_line: std::env::args().collect(),
            mode: if opts.stat.is_some() {
                "stat"
            } else {
                "record"
            }
            .into(),
            // Files of one rotating run say so, so that they merge as one recording.
            run: match opts.rotate {
                Some(_) => format!("{}-{}-{start_ns}", hostname(), std::process::id()),
                None => String::new(),
            },
            part: opts.rotate.map_or(0, |_| 1),
            go_status: false,
        },
        launched: launched.map(|l| l.pid),
        probes,
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// `--time-budget K` (timed calls per second and function, on the whole machine) as the
/// programs' allowance per CPU and window; at least one.
fn budget_allowance(per_second: u32, cpus: u32) -> u32 {
    let window_ns = 1u64 << tracer_abi::BUDGET_WINDOW_SHIFT;
    let per_cpu = per_second as u64 * window_ns / (1_000_000_000 * cpus.max(1) as u64);
    per_cpu.clamp(1, u32::MAX as u64) as u32
}
