//! What to summarize and how to render it: the options of `tracer summary` and `tracer
//! diff`, each parsed from its command-line spelling.

use std::str::FromStr;

use serde::Serialize;

use crate::Error;

/// What the rows of a summary are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum By {
    /// Probed functions.
    #[default]
    Function,
    /// Kernel threads.
    Thread,
    /// System calls (overall, then per thread).
    Syscall,
    /// Accepted connections (requests).
    Connection,
    /// Caller -> callee pairs among probed functions.
    CallGraph,
}

impl By {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            By::Function => "function",
            By::Thread => "thread",
            By::Syscall => "syscall",
            By::Connection => "connection",
            By::CallGraph => "callgraph",
        }
    }
}

impl FromStr for By {
    type Err = Error;
    fn from_str(s: &str) -> Result<By, Error> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "function" | "functions" | "func" => By::Function,
            "thread" | "threads" => By::Thread,
            "syscall" | "syscalls" | "system-call" => By::Syscall,
            "connection" | "connections" | "conn" | "request" | "requests" => By::Connection,
            "callgraph" | "call-graph" | "calls" => By::CallGraph,
            _ => {
                return Err(Error::Option(format!(
                    "unknown element kind {s:?} (expected function, thread, syscall, connection, callgraph or stack)"
                )))
            }
        })
    }
}

/// Output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// Aligned columns with human units, for a terminal.
    #[default]
    Table,
    /// One JSON document (`docs/summary-json.md`).
    Json,
    /// Comma-separated values with raw numbers (ns, bytes), one header line.
    Csv,
    /// JUnit XML for CI: the hot-spot flags of a summary (a failing test case per flagged
    /// element), the verdicts of a diff's gate conditions ([`gate`](crate::gate)).
    Junit,
}

impl FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Format, Error> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "table" | "text" => Format::Table,
            "json" => Format::Json,
            "csv" => Format::Csv,
            "junit" | "junit-xml" => Format::Junit,
            _ => {
                return Err(Error::Option(format!(
                    "unknown format {s:?} (expected table, json, csv or junit)"
                )))
            }
        })
    }
}

/// When a function call counts as an error, from its raw return value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorRule {
    /// The return value, as i64, is negative (`-1`, `-errno`).
    #[default]
    Negative,
    /// The return value is not zero (C status codes).
    NonZero,
    /// Functions have no errors.
    None,
}

impl FromStr for ErrorRule {
    type Err = Error;
    fn from_str(s: &str) -> Result<ErrorRule, Error> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "negative" | "neg" | "<0" => ErrorRule::Negative,
            "nonzero" | "non-zero" | "!=0" => ErrorRule::NonZero,
            "none" | "never" => ErrorRule::None,
            _ => {
                return Err(Error::Option(format!(
                    "unknown error rule {s:?} (expected negative, nonzero or none)"
                )))
            }
        })
    }
}

/// Limits over which an element is flagged as a hot spot, in every format.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Thresholds {
    /// Flag `slow`: mean duration (functions, system calls, connections) above this.
    pub slow_mean_ns: u64,
    /// Flag `errors`: errors / calls above this fraction.
    pub error_ratio: f64,
    /// Flag `ready`: time waiting for a CPU above this fraction of a function's inclusive
    /// time (of a thread's alive time for threads).
    pub ready_ratio: f64,
    /// What a function error is.
    pub error_if: ErrorRule,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            slow_mean_ns: 200_000_000,
            error_ratio: 0.25,
            ready_ratio: 0.20,
            error_if: ErrorRule::Negative,
        }
    }
}

/// How to render a summary (the `tracer summary` / `tracer diff` options).
#[derive(Clone, Debug, Default)]
pub struct SummaryOptions {
    /// Which elements the rows are (tables and CSV; JSON holds every kind).
    pub by: By,
    /// Table, JSON or CSV.
    pub format: Format,
    /// Sort key (a column name, see `docs/summary-json.md`); default: total time.
    pub sort: Option<String>,
    /// Keep only the first N rows of each list.
    pub top: Option<usize>,
    /// Render the per-window figures (the summary must have been made with the same
    /// window, see [`SummarizeOptions::window_ns`]) instead of the whole-trace ones.
    pub window_ns: Option<u64>,
    /// When an element gets a hot-spot flag.
    pub thresholds: Thresholds,
}

/// How to summarize (what must be known during the pass).
#[derive(Clone, Debug)]
pub struct SummarizeOptions {
    /// Also accumulate per-window figures, windows of this many ns from the trace start.
    pub window_ns: Option<u64>,
    /// Most windows a trace is cut into (a longer trace is refused): a table per window
    /// past that is too long to read, and every thread's figures in every window too much
    /// to hold. A record damaged into the far future would otherwise ask for windows up to
    /// it.
    pub max_windows: u64,
    /// Per-connection rows kept (the slowest ones); aggregates count every connection.
    pub max_connections: usize,
    /// Fills [`FunctionStats::errors`](crate::FunctionStats::errors); both raw counts are
    /// kept whatever the rule.
    pub error_if: ErrorRule,
    /// The merge's tuning.
    pub merge: trace_merge::MergeOptions,
}

impl Default for SummarizeOptions {
    fn default() -> Self {
        SummarizeOptions {
            window_ns: None,
            max_windows: 10_000,
            max_connections: 1000,
            error_if: ErrorRule::Negative,
            merge: trace_merge::MergeOptions::default(),
        }
    }
}
