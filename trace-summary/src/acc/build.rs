//! The summary assembled after the pass: each scope's accumulators become a [`Section`]
//! (per file with per-file keys, all files merged by name, per window), with the input
//! files and the notes on the trace's anomalies.

use std::collections::{BTreeMap, HashMap};

use trace_merge::timeline::Timeline;

use super::conn::ConnAcc;
use super::pass::Pass;
use super::rows::{conn_stats, func_stats, sys_stats};
use super::scope::{Acc, FuncAcc, SysAcc};
use crate::{
    CallEdge, ConnectionStats, DamagedRegion, ErrorRule, FileInfo, FunctionStats, Section,
    SummarizeOptions, Summary, SyscallStats, ThreadStats, Window, JSON_SCHEMA,
};

/// (name, binary, source) of a function.
type FuncName = (String, String, Option<String>);

/// What the accumulators' slots stand for, shared by every section of a summary.
struct Names<'a> {
    tl: &'a Timeline,
    p: &'a Pass,
    /// Of each function slot.
    funcs: Vec<FuncName>,
}

impl<'a> Names<'a> {
    fn new(tl: &'a Timeline, p: &'a Pass) -> Names<'a> {
        let funcs = (p.func_meta.iter())
            .map(
                |&(src, id)| match tl.merger().sources()[src as usize].probe(id) {
                    Some(p) => (p.name.clone(), p.binary.clone(), p.source.clone()),
                    None => (format!("function_{id}"), String::new(), None),
                },
            )
            .collect();
        Names { tl, p, funcs }
    }
}

/// The accumulators of one scope, seen as rows. `file`: only that file's elements, with
/// per-file keys; `None`: all files, functions and system calls merged by name.
struct Scope<'a> {
    acc: &'a Acc,
    n: &'a Names<'a>,
    file: Option<u32>,
}

impl Scope<'_> {
    fn keep(&self, source: u32) -> bool {
        self.file.is_none_or(|f| f == source)
    }

    fn section(&self, duration: u64, opts: &SummarizeOptions) -> Section {
        let (syscalls, syscalls_by_thread) = self.syscalls();
        Section {
            duration_ns: duration,
            functions: self.functions(duration, opts.error_if),
            threads: self.threads(),
            syscalls,
            syscalls_by_thread,
            connections: self.connections(opts.max_connections),
            call_graph: self.call_graph(),
        }
    }

    /// Functions: merged by (name, binary) across files, in slot order.
    fn functions(&self, duration: u64, rule: ErrorRule) -> Vec<FunctionStats> {
        let names = &self.n.funcs;
        let mut funcs: Vec<(usize, FuncAcc)> = Vec::new();
        let mut index: HashMap<(&str, &str), usize> = HashMap::new();
        for (slot, a) in self.acc.funcs.iter().enumerate() {
            let src = self.n.p.func_meta[slot].0;
            if a.calls == 0 || !self.keep(src) {
                continue;
            }
            let (name, bin, _) = &names[slot];
            match index.get(&(name.as_str(), bin.as_str())) {
                Some(&i) => funcs[i].1.merge(a),
                None => {
                    index.insert((name, bin), funcs.len());
                    funcs.push((slot, a.clone()));
                }
            }
        }
        (funcs.iter())
            .map(|(slot, a)| {
                let (name, bin, source) = &names[*slot];
                func_stats(name, bin, source.clone(), self.file, a, duration, rule)
            })
            .collect()
    }

    fn threads(&self) -> Vec<ThreadStats> {
        let tl = self.n.tl;
        let mut threads = Vec::new();
        for (r, a) in self.acc.threads.iter().enumerate() {
            let m = tl.thread(r as u32);
            if !self.keep(m.source) {
                continue;
            }
            let s = &a.states;
            threads.push(ThreadStats {
                file: m.source,
                tid: m.tid,
                tgid: m.tgid,
                process: tl.processes()[m.process as usize].name.clone(),
                name: m.name.clone(),
                unknown_ns: s[0],
                not_created_ns: s[1],
                running_ns: s[2],
                ready_ns: s[3],
                blocked_ns: s[4],
                io_ns: s[5],
                exited_ns: s[6],
                voluntary_switches: a.voluntary,
                involuntary_switches: a.involuntary,
                wakeups_sent: a.wakeups_sent,
                wakeups_received: a.wakeups_received,
                migrations: a.migrations,
                syscalls: a.syscalls,
                syscall_errors: a.syscall_errors,
                syscall_ns: a.syscall_ns.0,
                function_calls: a.function_calls,
                ready_waits: Some(a.waits.count()),
                ready_p99_ns: Some(a.waits.quantile(0.99)),
                ready_max_ns: Some(a.waits.max()),
                flags: Vec::new(),
            });
        }
        threads
    }

    /// System calls: (merged by number, per thread).
    fn syscalls(&self) -> (Vec<SyscallStats>, Vec<SyscallStats>) {
        let mut by_thread = Vec::new();
        // By number, in order; a map, since a damaged number may be any u32.
        let mut merged: BTreeMap<u32, SysAcc> = BTreeMap::new();
        for (slot, a) in self.acc.sys.iter().enumerate() {
            let (r, nr) = self.n.p.sys_meta[slot];
            let m = self.n.tl.thread(r);
            if a.calls == 0 || !self.keep(m.source) {
                continue;
            }
            let who = Some((m.tid, m.name.clone()));
            by_thread.push(sys_stats(nr, Some(m.source), who, a));
            (merged.entry(nr))
                .and_modify(|x| x.merge(a))
                .or_insert_with(|| a.clone());
        }
        let merged = (merged.iter())
            .map(|(&nr, a)| sys_stats(nr, self.file, None, a))
            .collect();
        (merged, by_thread)
    }

    /// `keep`: per-connection rows kept.
    fn connections(&self, keep: usize) -> ConnectionStats {
        let mut conns = ConnAcc::default();
        for (f, c) in self.acc.conns.iter().enumerate() {
            if self.keep(f as u32) {
                conns.merge(c, keep);
            }
        }
        conn_stats(&conns)
    }

    /// Caller -> callee pairs, merged by names.
    fn call_graph(&self) -> Vec<CallEdge> {
        let (p, names) = (self.n.p, &self.n.funcs);
        let mut edges: Vec<CallEdge> = Vec::new();
        let mut index: HashMap<(&str, &str), usize> = HashMap::new();
        for (slot, a) in self.acc.edges.iter().enumerate() {
            let (caller, callee) = p.edge_meta[slot];
            if a.calls == 0 || !self.keep(p.func_meta[caller as usize].0) {
                continue;
            }
            let (cn, ce) = (&names[caller as usize].0, &names[callee as usize].0);
            let i = *index.entry((cn, ce)).or_insert_with(|| {
                edges.push(CallEdge {
                    caller: cn.clone(),
                    callee: ce.clone(),
                    file: self.file,
                    ..CallEdge::default()
                });
                edges.len() - 1
            });
            let e = &mut edges[i];
            e.calls += a.calls;
            e.total_ns = e.total_ns.saturating_add(a.total.0);
            e.max_ns = e.max_ns.max(a.max);
        }
        for e in &mut edges {
            e.mean_ns = e.total_ns / e.calls.max(1);
        }
        edges
    }
}

/// The summary of a finished pass over `tl`, whose trace ended at `end`.
pub(super) fn build(p: &Pass, tl: &Timeline, end: u64, opts: &SummarizeOptions) -> Summary {
    let n = Names::new(tl, p);
    let section = |acc: &Acc, file: Option<u32>, duration: u64| {
        Scope { acc, n: &n, file }.section(duration, opts)
    };
    let sources = tl.merger().sources();
    let files: Vec<FileInfo> = (sources.iter())
        .map(|s| FileInfo {
            path: s.path.display().to_string(),
            hostname: s.header.hostname.clone(),
            start_ns: s.start,
            lost: s.lost(),
            truncated: s.truncated_at.is_some(),
            damaged: s.damage.iter().map(DamagedRegion::of).collect(),
        })
        .collect();
    let per_file = (0..sources.len() as u32)
        .map(|f| {
            let duration = end.saturating_sub(sources[f as usize].start);
            section(&p.total, Some(f), duration)
        })
        .collect();
    let windows = match p.window_ns {
        Some(w) => (p.windows.iter().enumerate())
            .map(|(i, a)| {
                let start = i as u64 * w;
                let stop = start.saturating_add(w).min(end.max(start));
                let mut section = section(a, None, stop - start);
                // A window holds every thread only if it did something in it.
                section.threads.retain(|t| {
                    crate::sum([t.running_ns, t.ready_ns, t.blocked_ns, t.io_ns, t.syscalls]) > 0
                });
                Window {
                    start_ns: start,
                    end_ns: stop,
                    section,
                }
            })
            .collect(),
        None => Vec::new(),
    };
    let lost = (files.iter()).fold(0, |a: u64, f| a.saturating_add(f.lost));
    let notes = notes(&files, lost, tl);
    Summary {
        schema: JSON_SCHEMA,
        files,
        records: tl.stats().records,
        lost,
        total: section(&p.total, None, end),
        per_file,
        window_ns: p.window_ns,
        windows,
        notes,
    }
}

/// What the reader of the figures must know about the trace: `lost` records in all.
fn notes(files: &[FileInfo], lost: u64, tl: &Timeline) -> Vec<String> {
    let mut notes = Vec::new();
    if lost > 0 {
        notes.push(format!(
            "{lost} records lost by the kernel: figures are lower bounds"
        ));
    }
    for f in files.iter().filter(|f| f.truncated) {
        notes.push(format!(
            "{} is truncated: its last records are missing",
            f.path
        ));
    }
    notes.extend(files.iter().filter_map(FileInfo::damage_note));
    let st = tl.stats();
    if st.orphan_func_exits > 0 {
        notes.push(format!(
            "{} function returns without entry ignored",
            st.orphan_func_exits
        ));
    }
    if st.unseen_switch_ins > 0 {
        notes.push(format!(
            "{} switch-ins the kernel did not report: those runs start at the thread's first own record",
            st.unseen_switch_ins
        ));
    }
    let late = tl.merger().stats().late;
    if late > 0 {
        notes.push(format!(
            "{late} records arrived too late to be ordered exactly"
        ));
    }
    notes
}
