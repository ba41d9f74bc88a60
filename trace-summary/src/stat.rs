//! Summaries of counting-mode files (`tracer stat`): the kernel already aggregated, so the
//! windows are added up instead of replaying a timeline. The figures fill the same
//! [`Summary`] as a full trace, so tables, JSON and diff are the same; what counting
//! cannot know (self time, the state split inside a function, connections) stays zero and
//! a note says so.

use std::{collections::BTreeMap, fs::File, io::BufReader, path::PathBuf};

use trace_file::{
    ChunkKind, Probe, ProbeKind, ReadOptions, Reader, StatWindow, ThreadInfo, TraceHeader,
};

use crate::units::human_ns;
use crate::{
    DamagedRegion, Error, FileInfo, FunctionStats, Histogram, Section, Summary, SyscallStats,
    ThreadStats, Window, JSON_SCHEMA,
};
use trace_merge::sysclass;

/// One stat file's chunks.
struct StatFile {
    path: PathBuf,
    header: TraceHeader,
    probes: Vec<Probe>,
    threads: Vec<ThreadInfo>,
    windows: Vec<StatWindow>,
    truncated: bool,
    /// Regions a salvaging read stepped over.
    damaged: Vec<DamagedRegion>,
}

/// True when `path` was written by `tracer stat` (its header says so).
pub fn is_stat_file(path: &PathBuf) -> Result<bool, Error> {
    let file = File::open(path).map_err(|e| trace_err(path, e.into()))?;
    let mut r = Reader::new(BufReader::new(file)).map_err(|e| trace_err(path, e))?;
    match r.next_chunk().map_err(|e| trace_err(path, e))? {
        Some(c) if c.kind == ChunkKind::Header => {
            let h: TraceHeader = c.meta().map_err(|e| trace_err(path, e))?;
            Ok(h.mode == "stat")
        }
        _ => Ok(false),
    }
}

fn trace_err(path: &std::path::Path, e: trace_file::Error) -> Error {
    Error::Trace(trace_merge::Error::Trace {
        path: path.to_path_buf(),
        source: e,
    })
}

fn read(path: &PathBuf, salvage: bool) -> Result<StatFile, Error> {
    let file = File::open(path).map_err(|e| trace_err(path, e.into()))?;
    let mut r = Reader::with_options(BufReader::new(file), ReadOptions { salvage })
        .map_err(|e| trace_err(path, e))?;
    let mut f = StatFile {
        path: path.clone(),
        header: TraceHeader::default(),
        probes: vec![],
        threads: vec![],
        windows: vec![],
        truncated: false,
        damaged: vec![],
    };
    while let Some(c) = r.next_chunk().map_err(|e| trace_err(path, e))? {
        let meta_err = |e| trace_err(path, e);
        let read = match c.kind {
            ChunkKind::Header => c.meta().map(|h| f.header = h),
            ChunkKind::Probes => c.meta::<Vec<Probe>>().map(|p| f.probes.extend(p)),
            ChunkKind::Threads => c.meta::<Vec<ThreadInfo>>().map(|t| f.threads.extend(t)),
            ChunkKind::Window => c.meta().map(|w| f.windows.push(w)),
            _ => Ok(()),
        };
        match read {
            // A chunk that checked but does not decode: skipped when salvaging.
            Err(_) if salvage => f.damaged.push(DamagedRegion {
                offset: c.offset,
                bytes: c.payload.len() as u64,
                chunks: 1,
                kind: Some(format!("{:?}", c.kind)),
                cpu: None,
                from_ns: None,
                until_ns: None,
            }),
            other => other.map_err(meta_err)?,
        }
    }
    f.truncated = r.truncated_at().is_some();
    for k in r.skipped() {
        f.damaged.push(DamagedRegion {
            offset: k.offset,
            bytes: k.bytes,
            chunks: k.chunks,
            kind: k.kind.map(|k| format!("{k:?}")),
            cpu: k.cpu,
            from_ns: None,
            until_ns: None,
        });
    }
    f.damaged.sort_by_key(|d| d.offset);
    Ok(f)
}

/// Summarizes counting-mode files. Per-window figures are the files' own windows.
pub fn summarize_stat(inputs: &[PathBuf], salvage: bool) -> Result<Summary, Error> {
    let files: Vec<StatFile> = (inputs.iter())
        .map(|p| read(p, salvage))
        .collect::<Result<_, _>>()?;
    let start = files.iter().map(|f| f.header.start_ns).min().unwrap_or(0);
    let mut summary = Summary {
        schema: JSON_SCHEMA,
        ..Default::default()
    };
    let mut total = Acc::default();
    for (i, f) in files.iter().enumerate() {
        summary.files.push(FileInfo {
            path: f.path.display().to_string(),
            hostname: f.header.hostname.clone(),
            start_ns: f.header.start_ns - start,
            lost: f.windows.last().map_or(0, |w| w.dropped),
            truncated: f.truncated,
            damaged: f.damaged.clone(),
        });
        summary.notes.extend(summary.files[i].damage_note());
        let mut one = Acc::default();
        for w in &f.windows {
            one.add(f, w);
            total.add(f, w);
            let mut wacc = Acc::default();
            wacc.add(f, w);
            summary.windows.push(Window {
                start_ns: w.start_ns.saturating_sub(start),
                end_ns: w.end_ns.saturating_sub(start),
                section: wacc.section(Some(i as u32)),
            });
        }
        summary.per_file.push(one.section(Some(i as u32)));
        if f.windows.iter().any(|w| w.dropped > 0) {
            summary.notes.push(format!(
                "{}: the kernel maps had no room for {} updates",
                f.path.display(),
                f.windows.last().map_or(0, |w| w.dropped)
            ));
        }
    }
    summary.total = total.section(None);
    for f in (summary.total.functions.iter()).filter(|f| f.timed_calls == 0 && !f.point) {
        summary.notes.push(format!(
            "{}: {} calls counted, none timed: no time, errors or latencies",
            f.name, f.calls
        ));
    }
    let estimated = |f: &&FunctionStats| f.timed_calls > 0 && f.timed_calls < f.calls;
    for f in summary.total.functions.iter().filter(estimated) {
        let [lo, hi] = f.p99_ci_ns.unwrap_or_default();
        let hi = match hi {
            u64::MAX => "unbounded: too few timed calls".to_string(),
            hi => human_ns(hi),
        };
        summary.notes.push(format!(
            "{}: time, errors and latencies estimated from {} timed calls of {} (p99 {}, 95% interval {}..{hi})",
            f.name,
            f.timed_calls,
            f.calls,
            human_ns(f.p99_ns),
            human_ns(lo)
        ));
    }
    for (name, n) in &total.untimed {
        summary.notes.push(format!(
            "{name}: {n} calls chosen to be timed were not, nested in more timed calls of it on their goroutine or thread than the kernel keeps ({}): its times lean to the outer calls of its recursion",
            tracer_abi::FRAME_LEVELS
        ));
    }
    estimate_from_samples(inputs, salvage, &mut summary)?;
    summary.window_ns = files
        .iter()
        .flat_map(|f| f.windows.first())
        .map(|w| w.end_ns.saturating_sub(w.start_ns))
        .next();
    summary.notes.push(
        "counting mode: self time equals inclusive time; state split inside functions only from samples (--sample N); no connections"
            .into(),
    );
    Ok(summary)
}

/// Figures added up over windows.
#[derive(Default)]
struct Acc {
    start: Option<u64>,
    end: u64,
    functions: BTreeMap<String, FunctionStats>,
    threads: BTreeMap<(u32, u32), ThreadStats>,
    /// Per thread, its waits for a CPU by length (files that keep them).
    waits: BTreeMap<(u32, u32), Histogram>,
    syscalls: BTreeMap<u32, SyscallStats>,
    /// Per function, calls chosen to be timed that were not.
    untimed: BTreeMap<String, u64>,
}

impl Acc {
    fn add(&mut self, f: &StatFile, w: &StatWindow) {
        self.start = Some(self.start.map_or(w.start_ns, |s| s.min(w.start_ns)));
        self.end = self.end.max(w.end_ns);
        for fw in &w.functions {
            let Some(p) = f.probes.iter().find(|p| p.id == fw.id) else {
                continue;
            };
            let s = self
                .functions
                .entry(p.name.clone())
                .or_insert_with(|| FunctionStats {
                    name: p.name.clone(),
                    binary: p.binary.clone(),
                    source: p.source.clone(),
                    goroutine: p.kind == ProbeKind::Go,
                    point: matches!(p.kind, ProbeKind::Usdt { .. }),
                    ..Default::default()
                });
            add(&mut s.calls, fw.calls);
            add(&mut s.timed_calls, fw.timed_calls());
            if fw.untimed > 0 {
                add(self.untimed.entry(p.name.clone()).or_default(), fw.untimed);
            }
            add(&mut s.errors_negative, fw.errors);
            s.errors = s.errors_negative;
            add(&mut s.inclusive_ns, fw.total_ns);
            add(&mut s.self_ns, fw.total_ns);
            record_latencies(&mut s.hist, &fw.buckets, &fw.hist);
        }
        for t in &w.threads {
            let name = if t.name.is_empty() {
                f.threads
                    .iter()
                    .find(|x| x.tid == t.tid)
                    .map(|x| x.name.clone())
                    .unwrap_or_default()
            } else {
                t.name.clone()
            };
            let s = self
                .threads
                .entry((t.tgid, t.tid))
                .or_insert_with(|| ThreadStats {
                    tid: t.tid,
                    tgid: t.tgid,
                    name,
                    // As a fallback: the main thread's name in the file's list.
                    process: f
                        .threads
                        .iter()
                        .find(|x| x.tid == t.tgid)
                        .map(|x| x.name.clone())
                        .unwrap_or_default(),
                    ..Default::default()
                });
            // A thread renamed (by exec, or `prctl`) goes by its last name.
            if !t.name.is_empty() {
                s.name.clone_from(&t.name);
            }
            add(&mut s.running_ns, t.running_ns);
            add(&mut s.ready_ns, t.ready_ns);
            add(&mut s.blocked_ns, t.blocked_ns);
            add(&mut s.io_ns, t.io_ns);
            add(&mut s.voluntary_switches, t.voluntary);
            add(&mut s.involuntary_switches, t.involuntary);
            add(&mut s.wakeups_sent, t.wakeups_sent);
            add(&mut s.wakeups_received, t.wakeups_received);
            add(&mut s.migrations, t.migrations);
            if !t.wait_hist.is_empty() {
                let waits = s.ready_waits.get_or_insert(0);
                t.wait_hist.iter().for_each(|&n| add(waits, n));
                let h = self.waits.entry((t.tgid, t.tid)).or_default();
                for (at, n) in trace_file::wait_buckets(&t.wait_hist) {
                    h.record_n(at, n);
                }
            }
            add(&mut s.syscalls, t.syscalls);
            add(&mut s.syscall_ns, t.syscall_ns);
        }
        for c in &w.syscalls {
            let class = sysclass::class(c.nr);
            let s = self.syscalls.entry(c.nr).or_insert_with(|| SyscallStats {
                name: sysclass::name(c.nr).into_owned(),
                nr: c.nr,
                ..Default::default()
            });
            add(&mut s.calls, c.calls);
            add(&mut s.errors, c.errors);
            add(&mut s.total_ns, c.total_ns);
            record_latencies(&mut s.hist, &c.buckets, &c.hist);
            if class.reads {
                add(&mut s.bytes_read, c.positive_sum);
            } else if class.writes {
                add(&mut s.bytes_written, c.positive_sum);
            }
        }
    }

    fn section(&self, file: Option<u32>) -> Section {
        let duration = self.end.saturating_sub(self.start.unwrap_or(self.end));
        let functions = self
            .functions
            .values()
            .map(|s| {
                let mut s = s.clone();
                s.file = file;
                finish_hist(&s.hist.clone(), &mut s);
                estimate(&mut s);
                s.session_pct = if duration > 0 {
                    100.0 * s.inclusive_ns as f64 / duration as f64
                } else {
                    0.0
                };
                s
            })
            .collect();
        let threads = self
            .threads
            .iter()
            .map(|(key, t)| {
                let waits = self.waits.get(key);
                // The process is named after its main thread's last name.
                let process = self.threads.get(&(t.tgid, t.tgid));
                ThreadStats {
                    file: file.unwrap_or(0),
                    process: process.map_or_else(|| t.process.clone(), |m| m.name.clone()),
                    ready_p99_ns: waits.map(|h| h.quantile(0.99)),
                    ready_max_ns: waits.map(|h| h.max()),
                    ..t.clone()
                }
            })
            .collect();
        let syscalls = self
            .syscalls
            .values()
            .map(|s| SyscallStats {
                file,
                mean_ns: s.total_ns / s.calls.max(1),
                p50_ns: s.hist.quantile(0.50),
                p90_ns: s.hist.quantile(0.90),
                p99_ns: s.hist.quantile(0.99),
                max_ns: s.hist.max(),
                ..s.clone()
            })
            .collect();
        Section {
            duration_ns: duration,
            functions,
            threads,
            syscalls,
            ..Default::default()
        }
    }
}

/// A function timed on a sample of its calls: totals scaled by calls / timed calls, and the
/// confidence intervals of its percentiles.
fn estimate(s: &mut FunctionStats) {
    let (n, all) = (s.timed_calls, s.calls);
    if n == 0 || n >= all {
        return;
    }
    let scale = |v: u64| (v as u128 * all as u128 / n as u128) as u64;
    s.inclusive_ns = scale(s.inclusive_ns);
    s.self_ns = scale(s.self_ns);
    s.errors_negative = scale(s.errors_negative);
    s.errors_nonzero = scale(s.errors_nonzero);
    s.errors = scale(s.errors);
    // Order statistics: the ranks within 1.96 standard deviations of the binomial around
    // q n, widened by half a kernel bucket (an eighth of a power of two wide: a duration
    // is known to within a sixteenth). A rank past the last timed call means the sample
    // cannot bound the quantile from above (a p99 from fewer than about 300 calls):
    // unbounded, u64::MAX.
    let ci = |q: f64| {
        let n = n as f64;
        let sd = (n * q * (1.0 - q)).sqrt();
        let (lo, hi) = (
            (n * q - 1.96 * sd).floor(),
            (n * q + 1.96 * sd).ceil() + 1.0,
        );
        let half_bucket = |v: u64| v / (2 << tracer_abi::HIST_SUB_BITS);
        [
            if lo < 1.0 {
                0
            } else {
                let v = s.hist.quantile(lo / n);
                v - half_bucket(v)
            },
            if hi > n {
                u64::MAX
            } else {
                let v = s.hist.quantile(hi / n);
                v.saturating_add(half_bucket(v))
            },
        ]
    };
    s.p50_ci_ns = Some(ci(0.5));
    s.p99_ci_ns = Some(ci(0.99));
    s.estimated = true;
}

fn finish_hist(h: &Histogram, s: &mut FunctionStats) {
    // The mean of the timed calls (all of them, without sampling).
    s.mean_ns = s.inclusive_ns / s.timed_calls.max(1);
    s.min_ns = h.min();
    s.p50_ns = h.quantile(0.50);
    s.p90_ns = h.quantile(0.90);
    s.p99_ns = h.quantile(0.99);
    s.max_ns = h.max();
}

/// Adds a window's latency histogram to `h`, in whichever layout its file has.
fn record_latencies(h: &mut Histogram, buckets: &[(u32, u64)], log2: &[u64]) {
    for (at, n) in trace_file::latency_buckets(buckets, log2) {
        h.record_n(at, n);
    }
}

/// Adds a count or a time of a window: the kernel's counts add up in u64, damaged ones
/// saturate.
fn add(to: &mut u64, v: u64) {
    *to = to.saturating_add(v);
}

/// With `tracer stat --sample N`, one call in N per function was recorded in full. Their
/// state split (running / ready / blocked / I/O) per call, scaled by the exact call count
/// and time of the counters, estimates the split of all calls; such figures are flagged
/// `estimated` and a note gives the sample sizes.
fn estimate_from_samples(
    inputs: &[PathBuf],
    salvage: bool,
    summary: &mut Summary,
) -> Result<(), Error> {
    let opts = trace_merge::MergeOptions {
        salvage,
        ..Default::default()
    };
    let timeline = trace_merge::open(inputs, &opts)?;
    let sampled = crate::acc::run(timeline, &crate::SummarizeOptions::default())?;
    for f in summary.total.functions.iter_mut() {
        let Some(s) = sampled.function(&f.name) else {
            continue;
        };
        let split: u128 = [s.running_ns, s.ready_ns, s.blocked_ns, s.io_ns]
            .map(u128::from)
            .iter()
            .sum();
        if s.calls == 0 || split == 0 {
            continue;
        }
        let scale = |part: u64| (part as u128 * f.inclusive_ns as u128 / split) as u64;
        f.running_ns = scale(s.running_ns);
        f.ready_ns = scale(s.ready_ns);
        f.blocked_ns = scale(s.blocked_ns);
        f.io_ns = scale(s.io_ns);
        f.estimated = true;
        summary.notes.push(format!(
            "{}: state split estimated from {} sampled calls of {}",
            f.name, s.calls, f.calls
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(timed: u64, calls: u64) -> FunctionStats {
        let mut s = FunctionStats {
            calls,
            timed_calls: timed,
            ..Default::default()
        };
        for i in 0..timed {
            s.hist.record(1_000 + i * 1_000);
        }
        estimate(&mut s);
        s
    }

    #[test]
    fn a_p99_from_few_calls_has_no_upper_bound_and_many_calls_bound_it() {
        let few = sampled(20, 1_280);
        assert!(few.estimated);
        let [lo, hi] = few.p99_ci_ns.unwrap();
        assert_eq!(hi, u64::MAX);
        assert!(lo > 0 && lo <= few.hist.quantile(0.99));
        let [lo, hi] = few.p50_ci_ns.unwrap();
        assert!(lo < hi && hi < u64::MAX);

        let many = sampled(5_000, 320_000);
        let [lo, hi] = many.p99_ci_ns.unwrap();
        assert!(lo <= many.hist.quantile(0.99) && many.hist.quantile(0.99) <= hi);
        assert!(hi < u64::MAX);
        // Every call timed: nothing estimated.
        assert!(!sampled(100, 100).estimated);
    }
}
