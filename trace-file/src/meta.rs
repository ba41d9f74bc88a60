//! Metadata chunks: what the recorder knew about the machine, processes, threads and probes.

use serde::{Deserialize, Serialize};

/// The first chunk of every trace.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceHeader {
    /// Version of the tracer that recorded the file.
    pub tracer_version: String,
    /// The recording machine's host name.
    pub hostname: String,
    /// `uname -r`.
    pub kernel: String,
    /// CPUs the kernel can run on (the number of per-CPU streams).
    pub cpus: u32,
    /// The clock of every timestamp: always "CLOCK_MONOTONIC" (bpf_ktime_get_ns).
    pub clock: String,
    /// Add to a timestamp to get nanoseconds since the Unix epoch (CLOCK_REALTIME).
    pub monotonic_to_realtime_ns: i64,
    /// CLOCK_MONOTONIC when recording started.
    pub start_ns: u64,
    /// The recorder's own command line.
    pub command_line: Vec<String>,
    /// "record" (every event) or "stat" (counting mode: Window chunks).
    #[serde(default)]
    pub mode: String,
    /// The run this file is part of, when a recorder wrote several (`--rotate`): the same
    /// string in every file of the run; empty otherwise.
    #[serde(default)]
    pub run: String,
    /// 1-based number of this file in its run.
    #[serde(default)]
    pub part: u32,
    /// Go's goroutine status changes are recorded (`go_status` records, from format
    /// version 6): a Go call's time has a state split.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub go_status: bool,
}

/// A traced process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessInfo {
    /// Its process id.
    pub tgid: u32,
    /// /proc/PID/exe as the process sees it.
    pub exe: String,
    /// Its command line, from /proc/PID/cmdline.
    pub cmdline: Vec<String>,
    /// True when the recorder started it (`tracer record -- CMD`).
    pub launched: bool,
    /// Its id in the kernel's first PID namespace, when the recorder ran in another one
    /// (a container's), whose ids `tgid` and the records give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<u32>,
}

/// A thread that existed when recording started (later ones arrive as `NewTask` records).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ThreadInfo {
    /// Its process id.
    pub tgid: u32,
    /// Its thread id.
    pub tid: u32,
    /// Its name (comm) at start.
    pub name: String,
    /// The state letter of /proc/PID/task/TID/stat at start (R, S, D, ...).
    pub state: char,
    /// Its id in the kernel's first PID namespace, when the recorder ran in another one
    /// (a container's), whose ids `tid` and the records give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_tid: Option<u32>,
}

/// Part of the file's stack table: the definitions a [`crate::ChunkKind::Stacks`] chunk
/// adds. Stacks are interned: a `Sample` or `BlockStack` record names one by its id, and a
/// stack repeated costs its id only. Addresses are as they were in the process; what they
/// stand for is in its mappings and the kernel's symbols, recorded alongside so that a trace
/// is symbolized anywhere, later.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StackTable {
    /// New stacks.
    #[serde(default)]
    pub stacks: Vec<StackDef>,
    /// Executable mappings of processes, as read when their stacks needed them.
    #[serde(default)]
    pub mappings: Vec<ProcessMappings>,
    /// Kernel functions the kernel frames of the stacks so far fall in.
    #[serde(default)]
    pub kernel_symbols: Vec<KernelSymbol>,
    /// Code no file holds that a JIT named in its perf map, for the frames of the stacks
    /// so far that fall in it: read while the process ran, since the map is gone or
    /// another process's by the time a trace is read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jit_symbols: Vec<JitSymbol>,
}

/// One distinct stack of one process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct StackDef {
    /// Its id, unique in the file (and in a rotating run's files).
    pub id: u32,
    /// The process whose addresses the user frames are.
    pub tgid: u32,
    /// User frames, innermost first, as addresses to look up: the instruction pointer,
    /// then each return address minus one (the call instruction).
    pub user: Vec<u64>,
    /// Kernel frames, innermost first: return addresses as the kernel gave them.
    pub kernel: Vec<u64>,
    /// Why the user frames stop short of the thread's first function, when they do: a
    /// category, then what was seen after a colon ("unwind: ..."); see [`cut_meaning`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

/// The category of a [`StackDef::cut`] reason (the part before the colon), which is how
/// stacks cut short are counted and named in flame graphs (`[cut: go]`).
pub fn cut_category(cut: &str) -> &str {
    cut.split(':').next().unwrap_or(cut)
}

/// What a category of [`StackDef::cut`] means, said to a reader.
pub fn cut_meaning(category: &str) -> &'static str {
    match category {
        "copy" => "deeper than the bytes of stack copied",
        "depth" => "more frames than are kept",
        "go" => "at a Go stack switch (systemstack, mcall), past which frames are on another stack",
        "read" => "the stack could not be copied",
        "unwind" => "no unwind information for a frame, or it led nowhere",
        "table" => "its slot in the kernel's table of stacks was taken",
        _ => "unknown reason",
    }
}

/// The executable mappings of a process at `at_ns`: later lists of the same process
/// supersede earlier ones from their time on.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProcessMappings {
    /// The process.
    pub tgid: u32,
    /// CLOCK_MONOTONIC when they were read.
    pub at_ns: u64,
    /// Its executable mappings.
    pub maps: Vec<Mapping>,
}

/// One executable mapping of a file (or of the vDSO) in a process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// Past its last address.
    pub end: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    /// The file, as /proc/PID/maps names it (`[vdso]` for the vDSO).
    pub path: String,
    /// Its GNU build-id, hex, when it has one: finds the same file, or its debug file,
    /// on another machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// A kernel function: its first address and its name (from /proc/kallsyms).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct KernelSymbol {
    /// First address.
    pub addr: u64,
    /// Past its last address (the next symbol's start).
    pub end: u64,
    /// Its name (`name [module]` for a module's).
    pub name: String,
}

/// A function a JIT compiled, as its perf map (`/tmp/perf-PID.map`) names it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct JitSymbol {
    /// The process.
    pub tgid: u32,
    /// First address.
    pub start: u64,
    /// Past its last address.
    pub end: u64,
    /// Its name, as the JIT wrote it.
    pub name: String,
}

/// One entry of the probe table: what a `FuncEntry`/`FuncExit` id stands for.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Probe {
    /// The id carried by the records (the attach cookie), from 1.
    pub id: u32,
    /// Demangled name.
    pub name: String,
    /// The symbol as in the binary (mangled).
    pub symbol: String,
    /// The binary or library the probe is in.
    pub binary: String,
    /// GNU build-id of `binary`, hex, when it has one.
    pub build_id: Option<String>,
    /// Virtual address of the function in `binary`.
    pub address: u64,
    /// Size of the function in bytes, when known.
    pub size: u64,
    /// File offset the uprobe is attached at.
    pub file_offset: u64,
    /// Bytes skipped from the function start (e.g. an `endbr64`), 0 when none.
    pub skipped: u64,
    /// Declaration as `file:line`, when debug information has it.
    pub source: Option<String>,
    /// What kind of probe it is (absent in files of earlier versions: a function).
    #[serde(default, skip_serializing_if = "ProbeKind::is_function")]
    pub kind: ProbeKind,
}

/// What a probe of the table stands for.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// A function, with entry and return probes (`FuncEntry`/`FuncExit`).
    #[default]
    Function,
    /// A Go function: entry and return-instruction probes, calls paired by goroutine
    /// (`GoEntry`/`GoExit`).
    Go,
    /// A USDT probe (`name` is `provider:name`), with its note's argument specification.
    Usdt {
        /// The arguments as the note gives them, e.g. `-4@%edi 8@-16(%rbp)`.
        args: String,
    },
}

impl ProbeKind {
    /// True for a plain function.
    pub fn is_function(&self) -> bool {
        *self == ProbeKind::Function
    }
}

/// Cumulative per-CPU counts of records the kernel could not store.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LostCounts {
    /// CLOCK_MONOTONIC when read.
    pub at_ns: u64,
    /// Records dropped for a full ring buffer, by CPU.
    pub per_cpu: Vec<u64>,
    /// Threads the kernel filter had no room for (their events are missing).
    pub threads_not_traced: u64,
    /// Program runs the kernel skipped (its recursion guard): events never produced.
    #[serde(default)]
    pub skipped: u64,
    /// Stacks not taken because the ring buffer was filling up (blocking stacks past a quarter of it, on-CPU samples past half) (`--stacks`): the
    /// events are recorded, without their stacks.
    #[serde(default)]
    pub stacks_shed: u64,
}

/// Written last by a recorder that stopped cleanly.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Trailer {
    /// CLOCK_MONOTONIC when recording stopped.
    pub end_ns: u64,
    /// Why it stopped: "duration", "signal", "process exited", or "rotated" (the run
    /// goes on in the next file).
    pub reason: String,
    /// Records written, by kind name.
    pub records: std::collections::BTreeMap<String, u64>,
    /// Records lost in all, as the last [`LostCounts`] sums them.
    pub lost: u64,
}

/// One interval of counting mode (`tracer stat`): what happened between `start_ns` and
/// `end_ns`, aggregated in the kernel. Windows of one file add up to the whole run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StatWindow {
    /// CLOCK_MONOTONIC at the window's start.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC at its end (the next window's start).
    pub end_ns: u64,
    /// Probed functions called in the window.
    pub functions: Vec<FuncWindow>,
    /// Threads seen in the window.
    pub threads: Vec<ThreadWindow>,
    /// System calls made in the window, by number.
    pub syscalls: Vec<SysWindow>,
    /// Updates the kernel's aggregation maps had no room for (cumulative over the file).
    pub dropped: u64,
    /// With `tracer stat --stacks`: the stacks counted in the window (ids of the file's
    /// stack table, whose user frames were walked by frame pointers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<WindowStack>,
    /// The CPU time an on-CPU sample stands for, ns (1 s / the sampling frequency).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stack_period_ns: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A stack counted in a window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct WindowStack {
    /// Its id in the file's stack table.
    pub stack: u32,
    /// True for on-CPU samples; false for the times a thread blocked in it.
    pub on_cpu: bool,
    /// How many in the window.
    pub count: u64,
}

/// A probed function in one window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FuncWindow {
    /// Probe-table id.
    pub id: u32,
    /// Calls in the window (entered, with uprobe sessions; returned, without).
    pub calls: u64,
    /// Calls timed (their returns probed) that returned in the window, which `errors`,
    /// `total_ns` and `hist` are about (a call is counted in the window it entered: a
    /// long one can be timed in a later window, even one without calls); absent (files
    /// before 2026-11-24, or every call timed): all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<u64>,
    /// Timed calls that returned a negative value.
    pub errors: u64,
    /// Time spent in the timed calls, callees included.
    pub total_ns: u64,
    /// Their durations: the latency buckets hit ([`tracer_abi::hist_bounds`]) and their
    /// counts (format version 6 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<(u32, u64)>,
    /// Their durations in files before format version 6: `hist[i]` counts calls of
    /// `[2^i, 2^(i+1))` ns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hist: Vec<u64>,
    /// Calls chosen to be timed that were not (a Go function's recursion deeper in timed
    /// calls than the kernel keeps): the timed calls lean to its outer calls.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub untimed: u64,
}

impl FuncWindow {
    /// The calls timed.
    pub fn timed_calls(&self) -> u64 {
        self.timed.unwrap_or(self.calls)
    }
}

/// log2 of the lower bound, in ns, of the first bucket of [`ThreadWindow::wait_hist`].
pub const WAIT_HIST_SHIFT: u32 = 10;

/// A thread in one window: time in each state and scheduler counts.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ThreadWindow {
    /// Its process id.
    pub tgid: u32,
    /// Its thread id.
    pub tid: u32,
    /// Its name.
    pub name: String,
    /// Time on a CPU.
    pub running_ns: u64,
    /// Time runnable, waiting for a CPU.
    pub ready_ns: u64,
    /// Time asleep (interruptible).
    pub blocked_ns: u64,
    /// Time in uninterruptible sleep (mostly I/O).
    pub io_ns: u64,
    /// Switches away while going to sleep.
    pub voluntary: u64,
    /// Switches away while still runnable (preemptions).
    pub involuntary: u64,
    /// Wakeups of other threads it made.
    pub wakeups_sent: u64,
    /// Wakeups it received.
    pub wakeups_received: u64,
    /// Times it moved to another CPU.
    pub migrations: u64,
    /// Waits for a CPU that ended in the window, by length: `wait_hist[i]` counts waits of `[2^(i + WAIT_HIST_SHIFT),
    /// 2^(i + WAIT_HIST_SHIFT + 1))` ns, the first also shorter ones, the last also longer
    /// ones (empty in files of earlier versions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wait_hist: Vec<u64>,
    /// System calls it made.
    pub syscalls: u64,
    /// Time inside system calls (absent from files of tracers before it was counted).
    #[serde(default)]
    pub syscall_ns: u64,
}

/// A system call number in one window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SysWindow {
    /// System call number (x86_64).
    pub nr: u32,
    /// Calls that returned in the window.
    pub calls: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Time spent in those calls.
    pub total_ns: u64,
    /// Sum of positive results (bytes, for calls that move bytes).
    pub positive_sum: u64,
    /// Durations of the calls whose entry was seen: the latency buckets hit
    /// ([`tracer_abi::hist_bounds`]) and their counts (format version 6 on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<(u32, u64)>,
    /// The same in files before format version 6, in log2 buckets of nanoseconds (empty
    /// in files before 2026-11-25).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hist: Vec<u64>,
}

/// The latency histogram of a window's function or system call, whichever layout its
/// file has, as durations and how many calls stand at each. A bucket's calls are spread
/// evenly over it, at the middles of its quarters (a quantile then moves with its rank
/// inside a bucket instead of jumping a bucket at a time); the last bucket, open-ended,
/// stands at its start, and a log2 bucket of older files at its middle.
pub fn latency_buckets<'a>(
    buckets: &'a [(u32, u64)],
    log2: &'a [u64],
) -> impl Iterator<Item = (u64, u64)> + 'a {
    let fine = (buckets.iter()).flat_map(|&(i, n)| {
        let (lo, hi) = tracer_abi::hist_bounds(i as usize);
        let width = hi.wrapping_sub(lo).wrapping_add(1);
        if hi == u64::MAX {
            return [(lo, n), (0, 0), (0, 0), (0, 0)];
        }
        if width < 4 {
            return [(lo + (width - 1) / 2, n), (0, 0), (0, 0), (0, 0)];
        }
        let quarter = width / 4;
        // A remainder goes to the middle quarters first.
        [1u64, 2, 0, 3].map(|q| {
            let extra = [2u64, 0, 1, 3][q as usize] < n % 4;
            (lo + quarter * q + quarter / 2, n / 4 + u64::from(extra))
        })
    });
    let coarse = (log2.iter().enumerate()).map(|(b, &n)| {
        // Only a damaged window has buckets past u64's range: they count as the last.
        let lo = 1u64 << b.min(63);
        (lo + lo / 2, n)
    });
    fine.chain(coarse).filter(|b| b.1 > 0)
}

/// A window's thread's waits for a CPU ([`ThreadWindow::wait_hist`]) as durations and how
/// many waits stand at each: a log2 bucket at its middle.
pub fn wait_buckets(wait_hist: &[u64]) -> impl Iterator<Item = (u64, u64)> + '_ {
    (wait_hist.iter().enumerate())
        .map(|(b, &n)| {
            // Only a damaged window has buckets past u64's range: they count as the last.
            let lo = 1u64 << (b as u32).saturating_add(WAIT_HIST_SHIFT).min(63);
            (lo + lo / 2, n)
        })
        .filter(|b| b.1 > 0)
}

#[cfg(test)]
mod tests {
    use super::latency_buckets;

    #[test]
    fn a_buckets_calls_are_spread_over_it_and_all_kept() {
        // Bucket 16 is 16..=17 ns (width 2); bucket 60 is 768..=831 ns (width 64).
        let (lo, hi) = tracer_abi::hist_bounds(60);
        assert_eq!((lo, hi), (768, 831));
        for n in [1u64, 2, 3, 4, 5, 7, 1_000_003] {
            let at: Vec<(u64, u64)> = latency_buckets(&[(60, n)], &[]).collect();
            assert_eq!(at.iter().map(|a| a.1).sum::<u64>(), n, "{n}: {at:?}");
            assert!(at.iter().all(|a| (lo..=hi).contains(&a.0)), "{at:?}");
            let mean = at.iter().map(|a| a.0 * a.1).sum::<u64>() / n;
            assert!(mean.abs_diff((lo + hi) / 2) <= 16, "{n}: {mean}");
        }
        assert_eq!(
            latency_buckets(&[(16, 3)], &[]).collect::<Vec<_>>(),
            [(16, 3)]
        );
        let last = tracer_abi::HIST_BUCKETS as u32 - 1;
        let open: Vec<_> = latency_buckets(&[(last, 2)], &[]).collect();
        assert_eq!(open, [(tracer_abi::hist_bounds(last as usize).0, 2)]);
        // Older files' log2 buckets at their middles.
        assert_eq!(
            latency_buckets(&[], &[0, 0, 5]).collect::<Vec<_>>(),
            [(6, 5)]
        );
    }
}
