//! Run and wait times of a process's threads over a stretch of time, from schedstat.

use std::fs;

use std::time::Duration;

use crate::*;

/// Run time and run-queue wait of a process's threads from schedstat over a stretch of
/// time, and the time stolen meanwhile: the ground truth a tracer's running and ready
/// times are checked against.
pub struct RunClock {
    steal: u64,
    start: Vec<(u32, String, Schedstat)>,
    pid: u32,
}

impl RunClock {
    /// Starts the stretch once the process's threads are idle (all asleep, their run
    /// times still): run time a thread spends finishing its start-up after this would be
    /// counted here but happen before the tracer attaches (1.3 ms of a server's last
    /// worker, once in five runs). Asleep, because a thread waiting for a CPU also keeps
    /// its run time still.
    pub fn start(pid: u32) -> RunClock {
        let mut start = run_times(pid);
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(20));
            let now = run_times(pid);
            if now == start && all_asleep(pid) {
                break;
            }
            start = now;
        }
        RunClock {
            steal: steal_ns(),
            start,
            pid,
        }
    }

    /// Ends the stretch (the threads should be idle by now).
    pub fn stop(self) -> RunTimes {
        let end = run_times(self.pid);
        let mut times = RunTimes {
            stolen: steal_ns() - self.steal,
            threads: Vec::new(),
            waited: Vec::new(),
            runs: Vec::new(),
        };
        for (tid, name, before) in self.start {
            let Some((_, _, after)) = end.iter().find(|t| t.0 == tid) else {
                continue;
            };
            let wait = after.wait_ns - before.wait_ns;
            times
                .threads
                .push((tid, name.clone(), after.run_ns - before.run_ns));
            times
                .runs
                .push((tid, name.clone(), after.timeslices - before.timeslices));
            times.waited.push((tid, name, wait));
        }
        times
    }
}

/// True when every thread of `pid` sleeps (state S).
fn all_asleep(pid: u32) -> bool {
    threads(pid).iter().all(|(tid, _)| {
        fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
            .ok()
            .and_then(|s| Some(s.rsplit_once(") ")?.1.starts_with('S')))
            .unwrap_or(false)
    })
}

fn run_times(pid: u32) -> Vec<(u32, String, Schedstat)> {
    threads(pid)
        .into_iter()
        .filter_map(|(tid, name)| Some((tid, name, schedstat(pid, tid).ok()?)))
        .collect()
}

/// How much later than schedstat a tracer may start a wait for a CPU: the wakeup
/// tracepoint fires a few microseconds after the kernel queued the thread (2.5-4 us a
/// wait on a worker with little waiting, on a loaded run of this 2-vCPU VM).
pub const WAIT_STAMP_NS: u64 = 10_000;

/// What a [`RunClock`] measured.
pub struct RunTimes {
    /// (tid, name, ns run) per thread.
    pub threads: Vec<(u32, String, u64)>,
    /// (tid, name, ns waited on a run queue) per thread.
    pub waited: Vec<(u32, String, u64)>,
    /// (tid, name, times it was scheduled in) per thread.
    pub runs: Vec<(u32, String, u64)>,
    pub stolen: u64,
}

impl RunTimes {
    /// Checks `traced(tid)` against schedstat for every thread whose name starts with
    /// `prefix`: within `tolerance` (a fraction), plus what the hypervisor may have stolen
    /// meanwhile (schedstat leaves stolen time out; a tracer's timestamps are wall clock),
    /// which can only make the traced time longer. Returns
    /// how many threads it checked.
    pub fn check(&self, prefix: &str, tolerance: f64, traced: impl Fn(u32) -> u64) -> usize {
        self.check_times(&self.threads, prefix, tolerance, traced)
    }

    /// [`RunTimes::check`] for the time spent waiting for a CPU (schedstat's run delay).
    /// Besides `tolerance`, each wait may be short by [`WAIT_STAMP_NS`]: schedstat's run
    /// delay starts when the thread is queued, a tracer's at the wakeup's tracepoint,
    /// which the kernel fires after queueing it.
    pub fn check_wait(&self, prefix: &str, tolerance: f64, traced: impl Fn(u32) -> u64) -> usize {
        self.check_times(&self.waited, prefix, tolerance, traced)
    }

    /// Checks a count of waits for a CPU per thread against schedstat's count of times it
    /// was scheduled in (each begins with a wait, however short): within `tolerance` (a
    /// fraction), and never closer than one. Returns how many threads it checked.
    pub fn check_runs(&self, prefix: &str, tolerance: f64, traced: impl Fn(u32) -> u64) -> usize {
        let mut checked = 0;
        for (tid, name, truth) in self.runs.iter().filter(|t| t.1.starts_with(prefix)) {
            let (ours, truth) = (traced(*tid), *truth);
            assert!(truth >= 20, "{name}: only {truth} runs to compare");
            let off = (ours as f64 - truth as f64) / truth as f64;
            eprintln!(
                "{name} ({tid}): {ours} waits traced, scheduled in {truth} times ({:+.3}%)",
                off * 100.0
            );
            assert!(
                ours.abs_diff(truth) as f64 <= (truth as f64 * tolerance).max(1.0),
                "{name} ({tid}): {ours} waits traced, scheduled in {truth} times ({:+.2}%)",
                off * 100.0
            );
            checked += 1;
        }
        checked
    }

    /// The most the hypervisor can have stolen meanwhile: /proc/stat counts steal in
    /// whole ticks (10 ms at USER_HZ 100), so a burst of a few ms can leave it unchanged.
    fn stolen_at_most(&self) -> u64 {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        self.stolen + 1_000_000_000 / hz
    }

    fn check_times(
        &self,
        truths: &[(u32, String, u64)],
        prefix: &str,
        tolerance: f64,
        traced: impl Fn(u32) -> u64,
    ) -> usize {
        let waits = std::ptr::eq(truths, &self.waited[..]);
        let mut checked = 0;
        for (tid, name, truth) in truths.iter().filter(|t| t.1.starts_with(prefix)) {
            let (tid, truth) = (*tid, *truth);
            let runs = (self.runs.iter().find(|r| r.0 == tid)).map_or(0, |r| r.2);
            let per_wait = if waits { WAIT_STAMP_NS * runs } else { 0 };
            assert!(
                truth > 10_000_000,
                "{name}: only {truth} ns of work to compare"
            );
            let ours = traced(tid);
            eprintln!(
                "{name} ({tid}): traced {ours} ns, schedstat {truth} ns ({:+.3}%)",
                (ours as f64 - truth as f64) * 100.0 / truth as f64
            );
            let slack = (truth as f64 * tolerance) as u64;
            assert!(
                ours + slack + per_wait >= truth && ours <= truth + slack + self.stolen_at_most(),
                "{name} ({tid}): traced {ours} ns, schedstat {truth} ns ({:+.2}%), {} ns stolen meanwhile",
                (ours as f64 - truth as f64) * 100.0 / truth as f64,
                self.stolen
            );
            checked += 1;
        }
        checked
    }
}
