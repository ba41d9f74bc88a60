//! The filter of traced threads: which processes and threads the programs record, by
//! the kernel's ids, which the recorder learns when it runs in a container's PID
//! namespace.

use std::os::fd::AsFd;

use anyhow::{anyhow, Context, Result};
use aya::{
    maps::{HashMap, MapData},
    programs::Iter,
    Btf,
};
use rustc_hash::FxHashMap;
use trace_file::{ProcessInfo, ThreadInfo};
use tracer_abi::{NsIds, ThreadSched, ID_HINT_SLOTS};

use super::Kernel;
use crate::procfs;

/// The kernel's ids of the tasks of the recorder's PID namespace, which the filter needs:
/// the recorder knows them by that namespace's ids.
pub(super) struct PidNs {
    /// The kernel's tid -> ids here, as the `ns_ids` iterator and the programs found them.
    pub(super) ids: HashMap<MapData, u32, NsIds>,
    /// Ids here -> the kernel's, from `ids` when last read.
    pub(super) to_kernel: FxHashMap<u32, u32>,
}

/// How the recorder knows the kernel's thread ids: the same, or their ids in its PID
/// namespace.
pub struct SeenIds(Option<FxHashMap<u32, u32>>);

impl SeenIds {
    /// The recorder's id of kernel thread `tid` (0: outside its namespace).
    pub fn get(&self, tid: u32) -> u32 {
        match &self.0 {
            None => tid,
            Some(m) => m.get(&tid).copied().unwrap_or(0),
        }
    }
}

impl Kernel {
    /// Traces the cgroup whose directory is open as `dir`: a process in it is traced from
    /// its first system call there.
    pub fn trace_cgroup(&mut self, dir: &std::fs::File) -> Result<()> {
        let map =
            (self.ebpf().map_mut("CGROUP")).context("map CGROUP missing from the eBPF object")?;
        let mut cgroups: aya::maps::CgroupArray<&mut MapData> = map.try_into()?;
        cgroups
            .set(0, dir.as_fd(), 0)
            .context("putting the cgroup in the kernel filter")
    }

    /// Adds a process (by the recorder's id for it) to the filter: its system calls and
    /// new threads are recorded. False when it is gone.
    pub fn trace_process(&mut self, tgid: u32) -> Result<bool> {
        let Some(tgid) = self.kernel_id(tgid)? else {
            return Ok(false);
        };
        self.hint(tgid)?;
        self.tgids
            .insert(tgid, 1, 0)
            .context("adding a process to the kernel filter")?;
        Ok(true)
    }

    /// Adds a thread to the filter: its scheduler events are recorded (nothing when it is
    /// gone).
    pub fn trace_thread(&mut self, tid: u32, tgid: u32) -> Result<()> {
        let (Some(tid), Some(tgid)) = (self.kernel_id(tid)?, self.kernel_id(tgid)?) else {
            return Ok(());
        };
        self.hint(tid)?;
        self.tids
            .insert(tid, tgid, 0)
            .context("adding a thread to the kernel filter (too many threads?)")
    }

    /// The kernel's id of the task the recorder knows as `id`: the same, unless the
    /// recorder is in a container's PID namespace; None for a task that is gone.
    pub(super) fn kernel_id(&mut self, id: u32) -> Result<Option<u32>> {
        if self.pidns.is_none() {
            return Ok(Some(id));
        }
        let known = |k: &Kernel| k.pidns.as_ref().and_then(|p| p.to_kernel.get(&id).copied());
        if let Some(k) = known(self) {
            return Ok(Some(k));
        }
        // A task created since the iterator last ran: run it again.
        self.learn_namespace()?;
        Ok(known(self))
    }

    /// The kernel's id of the task the recorder knows as `id`, when the recorder is in a
    /// container's PID namespace (None outside one, or for a task that is gone): the file
    /// keeps it beside the namespace's ids, which the records give.
    pub fn host_id(&mut self, id: u32) -> Option<u32> {
        self.pidns.as_ref()?;
        self.kernel_id(id).ok().flatten()
    }

    /// What /proc says of process `pid`, with its kernel's id (see [`Kernel::host_id`]).
    pub fn process_info(&mut self, pid: u32, launched: bool) -> ProcessInfo {
        ProcessInfo {
            host_pid: self.host_id(pid),
            ..procfs::process(pid, launched)
        }
    }

    /// The threads /proc lists of process `pid`, with their kernel's ids (none when it is
    /// gone).
    pub fn thread_infos(&mut self, pid: u32) -> Vec<ThreadInfo> {
        let mut threads = procfs::threads(pid).unwrap_or_default();
        for t in &mut threads {
            t.host_tid = self.host_id(t.tid);
        }
        threads
    }

    /// The ids the recorder knows the kernel's threads by, as of now.
    pub fn seen_ids(&self) -> SeenIds {
        SeenIds(self.pidns.as_ref().map(|p| {
            (p.ids.iter().flatten())
                .map(|(kernel, ids)| (kernel, ids.tid))
                .collect()
        }))
    }

    /// Forgets kernel thread `tid`'s ids in the recorder's namespace (counting mode, once
    /// the thread has exited and was reported a last time).
    pub fn forget_thread(&mut self, tid: u32) {
        if let Some(p) = &mut self.pidns {
            let _ = p.ids.remove(&tid);
        }
    }

    /// Runs the `ns_ids` task iterator, which puts the kernel's id of every task of the
    /// recorder's PID namespace in `NS_IDS`, and reads the map back.
    fn learn_namespace(&mut self) -> Result<()> {
        let p: &mut Iter = self.program("ns_ids")?;
        if p.fd().is_err() {
            let btf = Btf::from_sys_fs()
                .map_err(|e| anyhow!("reading the kernel's BTF (/sys/kernel/btf/vmlinux): {e}"))?;
            p.load("task", &btf)
                .map_err(|e| anyhow!("the kernel refused the task iterator: {e}"))?;
        }
        let link = p
            .attach()
            .map_err(|e| anyhow!("starting the task iterator: {e}"))?;
        let mut out = p.take_link(link)?.into_file()?;
        std::io::copy(&mut out, &mut std::io::sink()).context("running the task iterator")?;
        let ns = self.pidns.as_mut().expect("only in a PID namespace");
        ns.to_kernel = (ns.ids.iter().flatten())
            .map(|(kernel, ids)| (ids.tid, kernel))
            .collect();
        Ok(())
    }

    fn hint(&mut self, id: u32) -> Result<()> {
        self.hints
            .set(id & (ID_HINT_SLOTS - 1), 1, 0)
            .context("setting the kernel filter's hint")
    }

    /// Counting mode: starts the state clock of a thread that existed before attach.
    pub fn seed_thread(&mut self, tid: u32, seed: ThreadSched) -> Result<()> {
        let Some(tid) = self.kernel_id(tid)? else {
            return Ok(());
        };
        if let Some(stat) = &mut self.stat {
            stat.sched
                .insert(tid, seed, 0)
                .context("seeding the thread state map")?;
        }
        Ok(())
    }
}
