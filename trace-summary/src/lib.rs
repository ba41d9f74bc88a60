//! The aggregator: traces and stat files reduced to the numbers a developer acts on, and
//! runs compared.
//!
//! [`summarize`] reads one or several trace files in one streaming pass over the
//! [`Timeline`](trace_merge::timeline::Timeline) and returns a [`Summary`]: per probed
//! function, thread, system call, connection and caller -> callee pair, how often, how
//! long, and where the time went. Because the timeline knows every thread's scheduler
//! state, a function's inclusive time is split into running / ready (waiting for a CPU)
//! / blocked / I/O, which no function profiler can do.
//!
//! Memory is flat in the number of records: per-element accumulators with mergeable
//! log-linear histograms ([`Histogram`]), per-thread stacks, and the connections open at
//! any instant. Per-connection rows are kept for the slowest
//! [`SummarizeOptions::max_connections`] only; every connection counts in the aggregates.
//!
//! [`render`] writes a summary as an aligned terminal table, JSON (schema in
//! `docs/summary-json.md`), CSV or JUnit; [`diff`] compares two summaries element by element
//! and [`gate`] turns that comparison into pass or fail (`tracer diff --fail-if`);
//! [`units`] has the human units of the tables, for other tools to show the same.
//!
//! ```no_run
//! use trace_summary::{summarize, render, SummaryOptions};
//! let s = summarize(&["run.trace".into()])?;
//! for f in s.functions() {
//!     println!("{}: {} calls, {} ns blocked", f.name, f.calls, f.blocked_ns);
//! }
//! render(&s, &SummaryOptions::default(), &mut std::io::stdout())?;
//! # Ok::<(), trace_summary::Error>(())
//! ```

#![warn(missing_docs)]

mod acc;
mod diff;
pub mod gate;
mod hist;
mod junit;
mod options;
mod render;
pub mod stacks;
mod stat;
pub mod units;

use std::path::PathBuf;

use serde::Serialize;

pub use diff::{diff, diff_rows, DiffFigures, DiffRow, DIFF_SCHEMA};
pub use hist::Histogram;
pub use options::{By, ErrorRule, Format, SummarizeOptions, SummaryOptions, Thresholds};
pub use render::render;

/// A sum of figures that saturates: only damaged input (times decades apart, counts no
/// kernel reached) comes near u64's range, and a figure stuck at its largest says so
/// better than one wrapped around to a small number.
fn sum<const N: usize>(figures: [u64; N]) -> u64 {
    figures.into_iter().fold(0, u64::saturating_add)
}

/// Version of the JSON document written by [`render`] (`"schema"` field).
pub const JSON_SCHEMA: &str = "tracer-summary/1";

/// Everything that can stop a summary. `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or making sense of the traces failed.
    #[error("{0}")]
    Trace(#[from] trace_merge::Error),
    /// Writing the output failed.
    #[error("writing the summary: {0}")]
    Write(#[from] std::io::Error),
    /// An option has a value that means nothing (unknown sort key, element kind...).
    #[error("{0}")]
    Option(String),
}

/// Summarizes traces (one or several files: runs, processes, hosts) with default options.
pub fn summarize(inputs: &[PathBuf]) -> Result<Summary, Error> {
    summarize_with(inputs, &SummarizeOptions::default())
}

/// Summarizes traces with per-window figures (`--window`): see [`Summary::windows`].
pub fn summarize_windows(inputs: &[PathBuf], window_ns: u64) -> Result<Summary, Error> {
    let opts = SummarizeOptions {
        window_ns: Some(window_ns.max(1)),
        ..SummarizeOptions::default()
    };
    summarize_with(inputs, &opts)
}

/// Summarizes traces: one streaming pass over their merged timeline.
pub fn summarize_with(inputs: &[PathBuf], opts: &SummarizeOptions) -> Result<Summary, Error> {
    // Counting-mode files (`tracer stat`) were aggregated by the kernel already.
    let stat = inputs
        .iter()
        .map(stat::is_stat_file)
        .collect::<Result<Vec<bool>, Error>>()?;
    if stat.iter().any(|&s| s) {
        if !stat.iter().all(|&s| s) {
            return Err(Error::Option(
                "cannot summarize trace files and stat files together".into(),
            ));
        }
        if opts.error_if == ErrorRule::NonZero {
            return Err(Error::Option(
                "--error-if nonzero: stat files count the calls that returned a negative value, the kernel's rule; a trace file (tracer record) keeps the values for other rules".into(),
            ));
        }
        let mut summary = stat::summarize_stat(inputs, opts.merge.salvage)?;
        if opts.error_if == ErrorRule::None {
            let sections = std::iter::once(&mut summary.total)
                .chain(&mut summary.per_file)
                .chain(summary.windows.iter_mut().map(|w| &mut w.section));
            for f in sections.flat_map(|s| s.functions.iter_mut()) {
                f.errors = 0;
            }
        }
        return Ok(summary);
    }
    acc::run(trace_merge::open(inputs, &opts.merge)?, opts)
}

/// One input file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileInfo {
    /// The path given.
    pub path: String,
    /// The host it was recorded on.
    pub hostname: String,
    /// When its recording started, ns since the earliest start of all inputs.
    pub start_ns: u64,
    /// Records lost by the kernel (ring buffer full): figures are lower bounds if not 0.
    pub lost: u64,
    /// The file ends inside a chunk (recorder killed): the tail is missing.
    pub truncated: bool,
    /// Damaged regions stepped over by a salvaging read (`--salvage`): their records are
    /// missing from every figure. Empty for an undamaged file.
    pub damaged: Vec<DamagedRegion>,
}

impl FileInfo {
    /// The note a summary of a salvaged file carries.
    pub(crate) fn damage_note(&self) -> Option<String> {
        if self.damaged.is_empty() {
            return None;
        }
        let bytes: u64 = self.damaged.iter().map(|d| d.bytes).sum();
        Some(format!(
            "{} is damaged and was salvaged: {} regions, {bytes} bytes skipped; what they held is missing from the figures",
            self.path,
            self.damaged.len()
        ))
    }
}

/// A damaged region of an input that a salvaging read stepped over.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DamagedRegion {
    /// File offset where it starts.
    pub offset: u64,
    /// Its length in bytes.
    pub bytes: u64,
    /// Chunks it held, as far as the reader could tell.
    pub chunks: u64,
    /// The chunk's kind (`Events`, `Probes`...), when the region is one chunk whose header
    /// checked.
    pub kind: Option<String>,
    /// For Events: the CPU whose records are missing.
    pub cpu: Option<u32>,
    /// For Events: the missing records' time range, ns since the trace's start, as far as
    /// the file tells.
    pub from_ns: Option<u64>,
    /// End of that range.
    pub until_ns: Option<u64>,
}

impl DamagedRegion {
    pub(crate) fn of(d: &trace_merge::merge::Damage) -> DamagedRegion {
        DamagedRegion {
            offset: d.offset,
            bytes: d.bytes,
            chunks: d.chunks,
            kind: d.kind.map(|k| format!("{k:?}")),
            cpu: d.cpu,
            from_ns: d.from_ns,
            until_ns: d.until_ns,
        }
    }
}

/// A probed function's figures. Times are ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FunctionStats {
    /// Demangled name.
    pub name: String,
    /// The binary or library it is in.
    pub binary: String,
    /// Declaration `file:line`, when debug information had it (for editors).
    pub source: Option<String>,
    /// Index in [`Summary::files`] for per-file figures; `None` in the merged figures.
    pub file: Option<u32>,
    /// Calls that ended in the trace (returned, unwound, or cut by exit or trace end).
    pub calls: u64,
    /// Calls that are errors by the rule in effect.
    pub errors: u64,
    /// Calls that returned a negative value (as i64).
    pub errors_negative: u64,
    /// Calls that returned a non-zero value.
    pub errors_nonzero: u64,
    /// Calls that did not return: unwound (longjmp, exception, lost uretprobe), or cut
    /// by the thread's exit or the trace's end.
    pub unfinished: u64,
    /// Wall time from entry to return; a recursive function's nested activations are
    /// counted once (in the outermost).
    pub inclusive_ns: u64,
    /// Inclusive time minus the time of probed callees on the same thread.
    pub self_ns: u64,
    /// Inclusive time spent on a CPU.
    pub running_ns: u64,
    /// Inclusive time runnable but waiting for a CPU.
    pub ready_ns: u64,
    /// Inclusive time in interruptible sleep (locks, sockets, timers, sleep()).
    pub blocked_ns: u64,
    /// Inclusive time in uninterruptible sleep (disk I/O, page faults).
    pub io_ns: u64,
    /// Mean duration.
    pub mean_ns: u64,
    /// Shortest.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Longest.
    pub max_ns: u64,
    /// Inclusive time as a percentage of the session's duration (over 100 when several
    /// threads run it at once).
    pub session_pct: f64,
    /// Calls timed. Below `calls` (`tracer stat --time-every N`), the times, errors and
    /// percentiles are estimates from these calls: the totals scaled by
    /// `calls / timed_calls`, the percentiles and mean those of the timed calls.
    pub timed_calls: u64,
    /// With estimates, the 95% confidence interval of `p50_ns` (order statistics of the
    /// timed calls), ns; an upper bound of `u64::MAX` when the timed calls are too few to
    /// bound it.
    pub p50_ci_ns: Option<[u64; 2]>,
    /// The same for `p99_ns`.
    pub p99_ci_ns: Option<[u64; 2]>,
    /// Some figures are estimates from a sample of the calls (timed calls, or calls
    /// recorded in full for the state split): flagged `estimated`.
    pub estimated: bool,
    /// System calls made while it was on the stack (in it or its callees).
    pub syscalls: Vec<InnerSyscall>,
    /// A Go function: its calls are paired by goroutine. Its running / ready / blocked /
    /// I/O split is its goroutines' (see `goroutine_split`).
    pub goroutine: bool,
    /// A Go function whose split was measured: its goroutines' status was recorded
    /// (recordings since format version 6), so their time on and off the threads is
    /// known. Without it, a Go function's split figures are 0: a goroutine is scheduled
    /// by Go's runtime onto threads whose states are not its own.
    #[serde(default)]
    pub goroutine_split: bool,
    /// A USDT probe: `calls` counts its hits, which take no time (the time figures are 0).
    pub point: bool,
    /// Hot-spot flags (`slow`, `errors`, `ready`) for the thresholds rendered with.
    pub flags: Vec<&'static str>,
    /// Distribution of call durations (every call, nested recursive ones too).
    #[serde(skip)]
    pub hist: Histogram,
}

impl FunctionStats {
    /// Time its calls spent in the four states (of a damaged file's figures, at most
    /// `u64::MAX`).
    pub fn states_ns(&self) -> u64 {
        sum([self.running_ns, self.ready_ns, self.blocked_ns, self.io_ns])
    }

    /// Errors by `rule`.
    pub fn errors_for(&self, rule: ErrorRule) -> u64 {
        match rule {
            ErrorRule::Negative => self.errors_negative,
            ErrorRule::NonZero => self.errors_nonzero,
            ErrorRule::None => 0,
        }
    }
}

/// System calls of one kind made inside a function.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InnerSyscall {
    /// Its name.
    pub name: String,
    /// System call number (x86_64).
    pub nr: u32,
    /// Calls.
    pub calls: u64,
    /// Calls that returned -errno.
    pub errors: u64,
    /// Time in the calls.
    pub total_ns: u64,
    /// Bytes returned by read-like calls.
    pub bytes_read: u64,
    /// Bytes returned by write-like calls.
    pub bytes_written: u64,
}

/// A thread's figures. Times are ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThreadStats {
    /// Index in [`Summary::files`].
    pub file: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// Process id.
    pub tgid: u32,
    /// Process name (executable).
    pub process: String,
    /// Latest thread name.
    pub name: String,
    /// On a CPU.
    pub running_ns: u64,
    /// Runnable, waiting for a CPU.
    pub ready_ns: u64,
    /// In interruptible sleep (locks, sockets, timers).
    pub blocked_ns: u64,
    /// In uninterruptible sleep (disk I/O, page faults).
    pub io_ns: u64,
    /// Before its first record (it existed but the trace knew nothing of it).
    pub unknown_ns: u64,
    /// Before it was created.
    pub not_created_ns: u64,
    /// After it exited.
    pub exited_ns: u64,
    /// Left the CPU to sleep (blocked or I/O).
    pub voluntary_switches: u64,
    /// Left the CPU still runnable (preempted).
    pub involuntary_switches: u64,
    /// Wakeups of other traced threads it made (received by them).
    pub wakeups_sent: u64,
    /// Wakeups by traced threads it received (wakeups by interrupts are not counted).
    pub wakeups_received: u64,
    /// Times it started running on another CPU than the last one.
    pub migrations: u64,
    /// System calls made.
    pub syscalls: u64,
    /// System calls that returned -errno.
    pub syscall_errors: u64,
    /// Time inside system calls (entry to exit).
    pub syscall_ns: u64,
    /// Probed function calls made (every depth).
    pub function_calls: u64,
    /// Waits for a CPU (runnable until it ran: scheduling delay, as `perf sched
    /// latency` reports it), their 99th percentile and longest (from counting-mode files,
    /// at log2 bucket middles); `None` for counting-mode files of earlier versions.
    pub ready_waits: Option<u64>,
    /// The 99th percentile of those waits.
    pub ready_p99_ns: Option<u64>,
    /// The longest of those waits.
    pub ready_max_ns: Option<u64>,
    /// Hot-spot flags for the thresholds rendered with.
    pub flags: Vec<&'static str>,
}

impl ThreadStats {
    /// Time it was alive: in the four states (of a damaged file's figures, at most
    /// `u64::MAX`).
    pub fn alive_ns(&self) -> u64 {
        sum([self.running_ns, self.ready_ns, self.blocked_ns, self.io_ns])
    }
}

/// Calls of one errno.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ErrnoCount {
    /// The error number.
    pub errno: u32,
    /// `EAGAIN`... or `errno N`.
    pub name: String,
    /// Calls that returned it.
    pub count: u64,
}

/// A system call's figures, overall or for one thread. Times are ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SyscallStats {
    /// Its name.
    pub name: String,
    /// System call number (x86_64).
    pub nr: u32,
    /// Index in [`Summary::files`] for per-thread figures; `None` when merged.
    pub file: Option<u32>,
    /// The thread (per-thread figures only).
    pub tid: Option<u32>,
    /// The thread's name (per-thread figures only).
    pub thread: Option<String>,
    /// Calls.
    pub calls: u64,
    /// Returned -errno.
    pub errors: u64,
    /// Errors by errno, most frequent first.
    pub errnos: Vec<ErrnoCount>,
    /// Calls that did not return in the trace (exit, cut by the trace's end).
    pub unfinished: u64,
    /// Time of calls whose entry was recorded (a call under way at attach has none).
    pub total_ns: u64,
    /// Mean duration.
    pub mean_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Longest.
    pub max_ns: u64,
    /// Bytes returned by read-like calls.
    pub bytes_read: u64,
    /// Bytes returned by write-like calls.
    pub bytes_written: u64,
    /// Hot-spot flags for the thresholds rendered with.
    pub flags: Vec<&'static str>,
    /// Distribution of the durations.
    #[serde(skip)]
    pub hist: Histogram,
}

/// One connection (accepted socket): a request, or a keep-alive series of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Connection {
    /// Connection id (the timeline's: 1, 2... in order of acceptance, across files).
    pub id: u32,
    /// Index in [`Summary::files`].
    pub file: u32,
    /// Process id.
    pub tgid: u32,
    /// The accept's return, ns since the trace start.
    pub accepted_ns: u64,
    /// Accept to close (or to its last operation when the close was not seen).
    pub service_ns: u64,
    /// The close was seen.
    pub closed: bool,
    /// Bytes returned by read-like calls.
    pub bytes_read: u64,
    /// Bytes returned by write-like calls.
    pub bytes_written: u64,
    /// System calls on it (after the accept).
    pub operations: u64,
    /// Connections of its process in service when it was accepted, itself included.
    pub concurrent_at_start: u32,
    /// Tids of the threads that operated on it (accepting thread first; at most 8).
    pub threads: Vec<u32>,
    /// Hot-spot flags for the thresholds rendered with.
    pub flags: Vec<&'static str>,
}

/// Connections accepted with the same number of connections in service.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConcurrencyRow {
    /// Connections in service at acceptance (itself included).
    pub concurrency: u32,
    /// Connections accepted at that concurrency.
    pub connections: u64,
    /// Their service time, in all.
    pub service_ns: u64,
    /// Their mean service time.
    pub mean_service_ns: u64,
    /// Bytes they moved (read and written).
    pub bytes: u64,
    /// Service time per byte moved (read + written): eDragon's saturation curve.
    pub ns_per_byte: f64,
}

/// Connection figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConnectionStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Closes seen.
    pub closed: u64,
    /// In service when the trace ended.
    pub open_at_end: u64,
    /// Bytes returned by read-like calls.
    pub bytes_read: u64,
    /// Bytes returned by write-like calls.
    pub bytes_written: u64,
    /// Service time of all connections.
    pub service_total_ns: u64,
    /// Mean service time.
    pub service_mean_ns: u64,
    /// Median service time.
    pub service_p50_ns: u64,
    /// 90th percentile of service times.
    pub service_p90_ns: u64,
    /// 99th percentile of service times.
    pub service_p99_ns: u64,
    /// Longest service time.
    pub service_max_ns: u64,
    /// Most connections of one process in service at once.
    pub max_concurrency: u32,
    /// Time per byte against concurrency, by concurrency at acceptance.
    pub by_concurrency: Vec<ConcurrencyRow>,
    /// The slowest connections (at most [`SummarizeOptions::max_connections`]).
    pub connections: Vec<Connection>,
    /// Hot-spot flags for the thresholds rendered with.
    pub flags: Vec<&'static str>,
    /// Distribution of the durations.
    #[serde(skip)]
    pub hist: Histogram,
}

/// Calls from one probed function to another (directly, on the same thread).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CallEdge {
    /// The calling function.
    pub caller: String,
    /// The called function.
    pub callee: String,
    /// Index in [`Summary::files`] for per-file figures; `None` when merged.
    pub file: Option<u32>,
    /// Calls.
    pub calls: u64,
    /// Inclusive time of the callee in these calls.
    pub total_ns: u64,
    /// Mean duration.
    pub mean_ns: u64,
    /// Longest.
    pub max_ns: u64,
}

/// The figures of one scope: the whole trace, one file or one window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Section {
    /// Duration of the scope, ns.
    pub duration_ns: u64,
    /// Per probed function.
    pub functions: Vec<FunctionStats>,
    /// Per thread.
    pub threads: Vec<ThreadStats>,
    /// Per system call, all threads together.
    pub syscalls: Vec<SyscallStats>,
    /// Per thread and system call.
    pub syscalls_by_thread: Vec<SyscallStats>,
    /// Accepted connections.
    pub connections: ConnectionStats,
    /// Caller -> callee pairs among probed functions.
    pub call_graph: Vec<CallEdge>,
}

/// A time window's figures (`--window`): spans and system calls count in the window
/// where they end, thread-state time is split exactly at window boundaries.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Window {
    /// Start, ns since the trace start.
    pub start_ns: u64,
    /// End (exclusive), ns since the trace start.
    pub end_ns: u64,
    /// Its figures.
    #[serde(flatten)]
    pub section: Section,
}

/// A summary of one or several traces.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// [`JSON_SCHEMA`].
    pub schema: &'static str,
    /// The input files, in the order given.
    pub files: Vec<FileInfo>,
    /// Records read.
    pub records: u64,
    /// Records lost by the kernel, all files.
    pub lost: u64,
    /// Merged figures of all files (functions and system calls of the same name add up).
    #[serde(flatten)]
    pub total: Section,
    /// Figures of each file, in [`Summary::files`] order.
    pub per_file: Vec<Section>,
    /// Window length when per-window figures were made.
    pub window_ns: Option<u64>,
    /// Per-window figures (made with a window length).
    pub windows: Vec<Window>,
    /// Anomalies of the trace worth knowing when reading the figures.
    pub notes: Vec<String>,
}

impl Summary {
    /// Session length, ns (from the earliest start to the end of the trace).
    pub fn duration_ns(&self) -> u64 {
        self.total.duration_ns
    }
    /// Functions, all files merged.
    pub fn functions(&self) -> &[FunctionStats] {
        &self.total.functions
    }
    /// The function called `name` (all files merged), if it was called.
    pub fn function(&self, name: &str) -> Option<&FunctionStats> {
        self.total.functions.iter().find(|f| f.name == name)
    }
    /// Threads of all files.
    pub fn threads(&self) -> &[ThreadStats] {
        &self.total.threads
    }
    /// The first thread with this tid.
    pub fn thread(&self, tid: u32) -> Option<&ThreadStats> {
        self.total.threads.iter().find(|t| t.tid == tid)
    }
    /// System calls, all threads and files merged.
    pub fn syscalls(&self) -> &[SyscallStats] {
        &self.total.syscalls
    }
    /// The system call called `name`, all threads merged.
    pub fn syscall(&self, name: &str) -> Option<&SyscallStats> {
        self.total.syscalls.iter().find(|s| s.name == name)
    }
    /// System calls per thread.
    pub fn syscalls_by_thread(&self) -> &[SyscallStats] {
        &self.total.syscalls_by_thread
    }
    /// Connections, all files merged.
    pub fn connections(&self) -> &ConnectionStats {
        &self.total.connections
    }
    /// Caller -> callee pairs, all files merged.
    pub fn call_graph(&self) -> &[CallEdge] {
        &self.total.call_graph
    }
    /// The caller -> callee edge, if any call was seen.
    pub fn call_edge(&self, caller: &str, callee: &str) -> Option<&CallEdge> {
        (self.total.call_graph.iter()).find(|e| e.caller == caller && e.callee == callee)
    }
    /// Figures of file `i` alone.
    pub fn file(&self, i: usize) -> Option<&Section> {
        self.per_file.get(i)
    }
}
