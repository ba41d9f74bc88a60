//! `tracer stat`: counting mode. The kernel aggregates; every interval this reads the
//! cumulative maps, turns them into the window since the last read, and appends it to the
//! file. Reading cumulative values (instead of read-and-reset) loses no update that races
//! with the read.

use std::{
    collections::HashMap,
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use anyhow::Result;
use trace_file::{
    ChunkKind, FuncWindow, Probe, StatWindow, SysWindow, ThreadInfo, ThreadWindow, WindowStack,
    Writer,
};
use tracer_abi::{
    stack_cause, tstate, StackKey, HIST_BUCKETS, MAX_STAT_STACKS, MAX_SYSCALLS, WAIT_BUCKETS,
    WAIT_SHIFT,
};

use trace_summary::units::human_ns;

use crate::kernel::{Kernel, SeenIds, StackMaps, StatMaps};
use crate::stacks::Stacks;

/// The stacks counted since the last read, as ids of the file's stack table.
///
/// Over half full, the kernel's map of counts is rid of the keys no sample or block hit
/// since the last read (an exited process's, a path no longer taken), their last counts
/// taken with them, and the map of stacks of the stacks no key names any more: a run of
/// days goes on counting new stacks instead of dropping them.
fn window_stacks(
    (table, _, last): &mut (Stacks, u64, HashMap<StackKey, u64>),
    (ids, counts): &mut StackMaps,
    now: u64,
) -> Result<Vec<WindowStack>> {
    let mut changed = Vec::new();
    let mut stale = Vec::new();
    for item in counts.iter() {
        let (key, per_cpu) = item?;
        let total: u64 = per_cpu.iter().sum();
        let before = last.insert(key, total).unwrap_or(0);
        if total > before {
            changed.push((key, total - before));
        } else {
            stale.push(key);
        }
    }
    let mut evicted = Vec::new();
    if last.len() > MAX_STAT_STACKS as usize / 2 {
        for key in stale {
            // Gone meanwhile (never: only the recorder removes) or refused: kept.
            let Ok(total) = crate::kernel::take_stack_count(counts, &key) else {
                continue;
            };
            let before = last.remove(&key).unwrap_or(0);
            if total > before {
                changed.push((key, total - before));
            }
            evicted.push(key);
        }
    }
    changed.sort_by_key(|(k, _)| (k.tgid, k.cause, k.user, k.kernel, k.ip));
    // The frames of a stack id, or why there are none: a stack whose slot in the
    // kernel's table held another one (-EEXIST), or that left the table before this read.
    let frames = |id: i64| -> (Vec<u64>, Option<String>) {
        match u32::try_from(id) {
            Ok(id) => match ids.get(&id, 0) {
                Ok(t) => (t.frames().iter().map(|f| f.ip).collect(), None),
                Err(_) => (Vec::new(), Some(CUT_GONE.to_string())),
            },
            Err(_) if id == -i64::from(libc::EEXIST) => {
                (Vec::new(), Some(CUT_COLLIDED.to_string()))
            }
            // No stack to walk (a kernel thread's user stack) or a fault walking it.
            Err(_) => (Vec::new(), None),
        }
    };
    let out = changed
        .into_iter()
        .map(|(key, count)| {
            let (user, cut_user) = match frames(key.user) {
                // Its slot held another stack: the function it was in, not its callers.
                (f, Some(cut)) if f.is_empty() && key.ip != 0 => (vec![key.ip], Some(cut)),
                other => other,
            };
            let (kernel, cut_kernel) = frames(key.kernel);
            WindowStack {
                stack: table.define(key.tgid, &user, &kernel, cut_user.or(cut_kernel), now),
                on_cpu: key.cause == stack_cause::SAMPLE,
                count,
            }
        })
        .collect();
    // The frames were read: free the slots no remaining key names.
    if !evicted.is_empty() {
        let named: std::collections::HashSet<i64> =
            last.keys().flat_map(|k| [k.user, k.kernel]).collect();
        for key in evicted {
            for id in [key.user, key.kernel] {
                if let Ok(slot) = u32::try_from(id) {
                    if !named.contains(&id) {
                        let _ = ids.remove(&slot);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Why a counted stack has no frames, as its `cut` says.
const CUT_COLLIDED: &str =
    "table: its slot in the kernel's table of stacks held another stack (stat --stacks; a user stack keeps the function it was in)";
const CUT_GONE: &str = "table: it left the kernel's table of stacks before it was read";

/// Counting-mode settings.
#[derive(Clone, Copy)]
pub struct StatOptions {
    pub interval: Duration,
    /// Record 1 call in N of each function in full (0: never).
    pub sample_every: u32,
    /// Time 1 call in N of each function (with uprobe sessions; 1: every call).
    pub time_every: u32,
    /// Instead, time at most K calls per second of each function.
    pub time_budget: Option<u32>,
    /// Thread states are followed (the scheduler's events are counted).
    pub states: bool,
}

/// Cumulative figures of one thread, open interval included.
#[derive(Clone, Copy, Default)]
struct ThreadTotals {
    state_ns: [u64; 4],
    counts: [u64; 7],
    wait_hist: [u32; WAIT_BUCKETS],
}

// The kernel's buckets are the file's.
const _: () = assert!(WAIT_SHIFT == trace_file::meta::WAIT_HIST_SHIFT);

/// Turns the kernel's cumulative maps into windows.
pub struct Counting {
    opts: StatOptions,
    probes: Vec<Probe>,
    names: HashMap<u32, (u32, String)>,
    /// Per function and per system call, the cumulative figures last read.
    funcs: HashMap<u32, (FuncWindow, LastRead)>,
    syscalls: HashMap<u32, (SysWindow, LastRead)>,
    threads: HashMap<u32, ThreadTotals>,
    window_start: u64,
    /// The kernel's cumulative count of dropped updates: last read, and when the current
    /// file started (each file counts its own).
    dropped: (u64, u64),
    next_at: Instant,
    live: bool,
    pub windows: u64,
    /// With `--stacks`: the file's stack table, the samples' period (ns), and the
    /// kernel's cumulative count of each stack key when last read.
    stacks: Option<(Stacks, u64, HashMap<StackKey, u64>)>,
}

impl Counting {
    pub fn new(
        opts: StatOptions,
        probes: &[Probe],
        threads: &[ThreadInfo],
        start_ns: u64,
        quiet: bool,
    ) -> Counting {
        Counting {
            opts,
            probes: probes.to_vec(),
            names: threads
                .iter()
                .map(|t| (t.tid, (t.tgid, t.name.clone())))
                .collect(),
            funcs: HashMap::new(),
            syscalls: HashMap::new(),
            threads: HashMap::new(),
            window_start: start_ns,
            dropped: (0, 0),
            next_at: Instant::now() + opts.interval,
            live: !quiet && std::io::stderr().is_terminal(),
            windows: 0,
            stacks: None,
        }
    }

    /// Counts stacks too, sampled on the CPU at `hz`.
    pub fn with_stacks(mut self, hz: u64) -> Counting {
        self.stacks = Some((Stacks::new(), 1_000_000_000 / hz.max(1), HashMap::new()));
        self
    }

    /// Writes a window if the interval has passed; true if it did.
    pub fn tick<W: Write>(&mut self, kernel: &mut Kernel, w: &mut Writer<W>) -> Result<bool> {
        if Instant::now() < self.next_at {
            return Ok(false);
        }
        self.next_at += self.opts.interval;
        self.window(kernel, w)?;
        Ok(true)
    }

    /// A new file starts with the next window (CLOCK_MONOTONIC ns, returned).
    pub fn new_file(&mut self) -> u64 {
        self.dropped.1 = self.dropped.0;
        if let Some((s, _, _)) = &mut self.stacks {
            s.restart();
        }
        self.window_start
    }

    /// Learns thread names from the lifecycle records that still flow in counting mode.
    pub fn saw(&mut self, tid: u32, tgid: Option<u32>, name: &str) {
        let e = self.names.entry(tid).or_insert((0, String::new()));
        if let Some(tgid) = tgid {
            e.0 = tgid;
        }
        e.1 = name.to_string();
    }

    /// Reads the maps and appends the window since the previous one.
    pub fn window<W: Write>(&mut self, kernel: &mut Kernel, w: &mut Writer<W>) -> Result<()> {
        let now = crate::clock::monotonic_ns();
        self.dropped.0 = kernel.stat_dropped()?;
        let seen = kernel.seen_ids();
        let Some(maps) = &mut kernel.stat else {
            return Ok(());
        };
        let mut win = StatWindow {
            start_ns: self.window_start,
            end_ns: now,
            dropped: self.dropped.0 - self.dropped.1,
            ..Default::default()
        };
        win.functions = self.functions(maps)?;
        win.syscalls = self.syscalls(maps)?;
        if let (Some(st), Some(maps)) = (&mut self.stacks, &mut maps.stacks) {
            win.stack_period_ns = st.1;
            win.stacks = window_stacks(st, maps, now)?;
            // The window names these stacks: they are defined before it.
            if let Some(table) = st.0.take_table() {
                w.meta(ChunkKind::Stacks, &table)?;
            }
        }
        let (threads, exited) = self.threads(maps, now, &seen);
        win.threads = threads;
        for tid in exited {
            kernel.forget_thread(tid);
        }
        win.threads.sort_by_key(|t| t.tid);
        win.syscalls.sort_by_key(|s| s.nr);
        w.meta(ChunkKind::Window, &win)?;
        w.flush()?;
        if self.live {
            self.show(&win);
        }
        self.window_start = now;
        self.windows += 1;
        Ok(())
    }

    /// Per probed function, what changed since the last read.
    fn functions(&mut self, maps: &StatMaps) -> Result<Vec<FuncWindow>> {
        let mut out = Vec::new();
        for p in &self.probes {
            let per_cpu = maps.funcs.get(&p.id, 0)?;
            let mut total = FuncWindow {
                id: p.id,
                timed: Some(0),
                ..Default::default()
            };
            for s in per_cpu.iter() {
                total.calls += s.calls;
                *total.timed.as_mut().unwrap() += s.timed;
                total.errors += s.errors;
                total.total_ns += s.total_ns;
                total.untimed += s.untimed;
            }
            let (prev, last) = self.funcs.entry(p.id).or_default();
            let d = FuncWindow {
                id: p.id,
                calls: total.calls - prev.calls,
                timed: Some(total.timed_calls() - prev.timed.unwrap_or(0)),
                errors: total.errors - prev.errors,
                total_ns: total.total_ns - prev.total_ns,
                untimed: total.untimed - prev.untimed,
                buckets: last.since(per_cpu.iter().map(|s| &s.hist)),
                hist: Vec::new(),
            };
            *prev = total;
            // A call is counted in the window it entered and timed in the one it returned
            // in: a window with returns only still has their times.
            if d.calls > 0 || d.timed != Some(0) || d.untimed > 0 {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// Per system call, what changed since the last read.
    fn syscalls(&mut self, maps: &StatMaps) -> Result<Vec<SysWindow>> {
        let mut out = Vec::new();
        for nr in 0..MAX_SYSCALLS {
            let per_cpu = maps.syscalls.get(&nr, 0)?;
            let mut total = SysWindow {
                nr,
                ..Default::default()
            };
            for s in per_cpu.iter() {
                total.calls += s.calls;
                total.errors += s.errors;
                total.total_ns += s.total_ns;
                total.positive_sum += s.positive_sum;
            }
            if total.calls == 0 {
                continue;
            }
            let (prev, last) = self.syscalls.entry(nr).or_default();
            let buckets = last.since(per_cpu.iter().map(|s| &s.hist));
            if total.calls > prev.calls {
                out.push(SysWindow {
                    nr,
                    calls: total.calls - prev.calls,
                    errors: total.errors - prev.errors,
                    total_ns: total.total_ns - prev.total_ns,
                    positive_sum: total.positive_sum - prev.positive_sum,
                    buckets,
                    hist: Vec::new(),
                });
            }
            *prev = total;
        }
        Ok(out)
    }

    /// Per thread, what changed since the last read, its state in progress counted up to
    /// `now`.
    /// Also returns the kernel's ids of the threads that exited, reported a last time.
    fn threads(
        &mut self,
        maps: &mut StatMaps,
        now: u64,
        seen: &SeenIds,
    ) -> (Vec<ThreadWindow>, Vec<u32>) {
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for entry in maps.sched.iter() {
            let Ok((kernel_tid, e)) = entry else { continue };
            // Kept by the kernel's id, reported by the recorder's.
            let tid = seen.get(kernel_tid);
            let s = e.stat;
            let mut t = ThreadTotals {
                state_ns: s.state_ns,
                counts: [
                    s.voluntary,
                    s.involuntary,
                    s.wakeups_sent,
                    s.wakeups_received,
                    s.migrations,
                    s.syscalls,
                    s.syscall_ns,
                ],
                wait_hist: s.wait_hist,
            };
            if e.exited != 0 {
                gone.push((kernel_tid, tid));
            } else if self.opts.states {
                // The interval in progress counts up to now.
                t.state_ns[(e.state & 3) as usize] += now.saturating_sub(e.since);
            }
            let prev = self.threads.insert(tid, t).unwrap_or_default();
            let d = |i: usize| t.state_ns[i].saturating_sub(prev.state_ns[i]);
            let c = |i: usize| t.counts[i].saturating_sub(prev.counts[i]);
            let (tgid, name) = self.names.get(&tid).cloned().unwrap_or_default();
            out.push(ThreadWindow {
                tgid,
                tid,
                name,
                running_ns: d(tstate::RUNNING as usize),
                ready_ns: d(tstate::READY as usize),
                blocked_ns: d(tstate::BLOCKED as usize),
                io_ns: d(tstate::IO as usize),
                voluntary: c(0),
                involuntary: c(1),
                wakeups_sent: c(2),
                wakeups_received: c(3),
                migrations: c(4),
                syscalls: c(5),
                syscall_ns: c(6),
                // Counters wrap at 2^32; a difference of two reads is right across one wrap.
                wait_hist: (t.wait_hist.iter().zip(&prev.wait_hist))
                    .map(|(now, before)| now.wrapping_sub(*before) as u64)
                    .collect(),
            });
        }
        // Exited threads were reported for the last time: free their entries so days of
        // thread churn keep memory flat.
        let mut forget = Vec::new();
        for (kernel_tid, tid) in gone {
            let _ = maps.sched.remove(&kernel_tid);
            self.threads.remove(&tid);
            self.names.remove(&tid);
            forget.push(kernel_tid);
        }
        (out, forget)
    }

    /// A top-like view of the busiest elements of the last window.
    fn show(&self, win: &StatWindow) {
        let secs = (win.end_ns - win.start_ns) as f64 / 1e9;
        let mut out = String::from("\x1b[H\x1b[2J");
        out += &format!(
            "tracer stat: window {} ({secs:.1}s), {} dropped updates\n\n",
            self.windows + 1,
            win.dropped
        );
        out += &format!(
            "{:<32} {:>10} {:>8} {:>12} {:>12}\n",
            "FUNCTION", "CALLS/s", "ERRORS", "MEAN", "TOTAL"
        );
        // Time is known from the timed calls only: the mean is theirs, the total scaled
        // by the exact count; a USDT probe's hits and untimed functions show none.
        let probe = |id: u32| self.probes.iter().find(|p| p.id == id);
        let scaled = |f: &FuncWindow, v: u64| match f.timed_calls() {
            0 => None,
            n => Some((v as u128 * f.calls.max(n) as u128 / n as u128) as u64),
        };
        let total = |f: &FuncWindow| scaled(f, f.total_ns);
        let mut funcs: Vec<&FuncWindow> = win.functions.iter().collect();
        funcs.sort_by_key(|f| (std::cmp::Reverse(total(f)), std::cmp::Reverse(f.calls)));
        for f in funcs.iter().take(10) {
            let p = probe(f.id);
            let name = p.map_or("?", |p| p.name.as_str());
            let hits = p.is_some_and(|p| matches!(p.kind, trace_file::ProbeKind::Usdt { .. }));
            let (errors, mean, sum) = match (total(f), scaled(f, f.errors)) {
                (Some(t), Some(e)) if !hits => (
                    e.to_string(),
                    human_ns(f.total_ns / f.timed_calls()),
                    human_ns(t),
                ),
                _ => ("-".to_string(), "-".to_string(), "-".to_string()),
            };
            out += &format!(
                "{:<32} {:>10.0} {:>8} {:>12} {:>12}\n",
                truncate(name, 32),
                f.calls as f64 / secs,
                errors,
                mean,
                sum
            );
        }
        out += &format!(
            "\n{:<24} {:>10} {:>10} {:>10} {:>10} {:>9}\n",
            "THREAD", "RUNNING", "READY", "BLOCKED", "I/O", "SYSCALLS"
        );
        let mut threads: Vec<&ThreadWindow> = win.threads.iter().collect();
        threads.sort_by_key(|t| std::cmp::Reverse(t.running_ns + t.ready_ns));
        for t in threads.iter().take(10) {
            out += &format!(
                "{:<24} {:>10} {:>10} {:>10} {:>10} {:>9}\n",
                truncate(&format!("{}:{}", t.name, t.tid), 24),
                human_ns(t.running_ns),
                human_ns(t.ready_ns),
                human_ns(t.blocked_ns),
                human_ns(t.io_ns),
                t.syscalls
            );
        }
        out += &format!(
            "\n{:<20} {:>10} {:>8} {:>12} {:>12}\n",
            "SYSCALL", "CALLS/s", "ERRORS", "MEAN", "TOTAL"
        );
        let mut sys: Vec<&SysWindow> = win.syscalls.iter().collect();
        sys.sort_by_key(|s| std::cmp::Reverse(s.total_ns));
        for s in sys.iter().take(10) {
            out += &format!(
                "{:<20} {:>10.0} {:>8} {:>12} {:>12}\n",
                trace_merge::sysclass::name(s.nr),
                s.calls as f64 / secs,
                s.errors,
                human_ns(s.total_ns / s.calls.max(1)),
                human_ns(s.total_ns)
            );
        }
        eprint!("{out}");
    }
}

/// A latency histogram's last read on each CPU. The kernel's counters are 32-bit: each
/// CPU's are differenced modulo 2^32, which is exact as long as no bucket of one CPU
/// counts 4 billion calls between two reads.
#[derive(Default)]
struct LastRead(Vec<[u32; HIST_BUCKETS]>);

impl LastRead {
    /// The counts added since the last read, as a window's buckets hit.
    fn since<'a>(
        &mut self,
        per_cpu: impl Iterator<Item = &'a [u32; HIST_BUCKETS]>,
    ) -> Vec<(u32, u64)> {
        let mut sum = [0u64; HIST_BUCKETS];
        for (cpu, now) in per_cpu.enumerate() {
            if self.0.len() <= cpu {
                self.0.resize(cpu + 1, [0; HIST_BUCKETS]);
            }
            let last = &mut self.0[cpu];
            for ((s, n), l) in sum.iter_mut().zip(now).zip(last.iter()) {
                *s += u64::from(n.wrapping_sub(*l));
            }
            *last = *now;
        }
        (sum.iter().enumerate())
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (i as u32, n))
            .collect()
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Counting mode's state for a thread seen in /proc at attach: one of the four it keeps
/// time in (a thread that is already a zombie will not run again). A runnable thread
/// that is on a CPU right now is running.
pub fn seed_state(pid: u32, tid: u32, letter: char) -> u32 {
    match tracer_abi::state_of_proc_letter(u8::try_from(letter).unwrap_or(0)) {
        Some(tstate::READY) if crate::procfs::on_cpu(pid, tid) => tstate::RUNNING,
        Some(tstate::EXITED) | None => tstate::BLOCKED,
        Some(s) => s,
    }
}
