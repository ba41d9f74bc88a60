//! The command line: what each `tracer` command takes, and the parsers of its values.

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

use crate::{
    files::Rotation,
    record::{Events, RecordOptions},
    stat,
};

#[derive(Parser)]
#[command(
    name = "tracer",
    version,
    about = "eBPF tracer for Linux server processes"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line. Help and version are printed, and the process exits, as clap
    /// does; a usage error is returned as one line (clap's own spreads over several, with
    /// a blank one and a tip).
    pub fn from_args() -> Result<Cli, String> {
        Cli::try_parse().map_err(|e| {
            if !e.use_stderr() {
                e.exit()
            }
            usage_line(&e.to_string())
        })
    }
}

/// Clap's rendering of a usage error as one line: without its `error: ` and its
/// `For more information` tip, the other lines joined.
fn usage_line(rendered: &str) -> String {
    let mut line = String::new();
    let lines = (rendered.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"));
    for l in lines {
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(l);
    }
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

/// Output formats of `convert`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Paraver: NAME.prv, NAME.pcf, NAME.row.
    Paraver,
    /// Trace Event Format (Chrome's JSON trace): NAME.json, for Perfetto's UI,
    /// chrome://tracing and speedscope.
    Chrome,
    /// Folded stacks for flame graphs (flamegraph.pl, inferno, speedscope): NAME.folded,
    /// each thread's time by its probed functions, system call and state, in ns.
    Folded,
    /// Parquet tables in a directory (calls, syscalls, states, links, threads,
    /// processes, probes, files; stat files: windows) for DuckDB, DataFusion, Spark:
    /// docs/parquet.md.
    Parquet,
}

impl Format {
    /// The format's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::Paraver => "Paraver",
            Format::Chrome => "Chrome (Trace Event Format)",
            Format::Folded => "folded stacks",
            Format::Parquet => "Parquet",
        }
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Record a trace of running processes (--pid) or of a command (after --).
    Record {
        #[command(flatten)]
        target: Target,
        /// Trace file to write [default: tracer.trace].
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Also convert the trace to Paraver (NAME.prv/.pcf/.row) when recording ends.
        #[arg(long, value_name = "NAME")]
        paraver: Option<PathBuf>,
        /// Attach programs that do nothing, to every probe and tracepoint (for benchmarks:
        /// the kernel's own cost).
        #[arg(long, hide = true)]
        empty_probes: bool,
        /// Stop once a call takes this long, e.g. 'handle_request>50ms' (FUNC as `tracer
        /// probes` names it); with --rotate --keep, the files hold what led to it.
        #[arg(long, value_name = "FUNC>DURATION")]
        trigger: Option<String>,
        /// With --trigger, how long to go on recording after it fires.
        #[arg(long, value_parser = parse_duration, default_value = "1s", requires = "trigger")]
        after: Duration,
        /// Record stacks: on-CPU samples of the traced threads (user and kernel frames),
        /// and the stack each blocks in, so off-CPU time has one too.
        #[arg(long)]
        stacks: bool,
        /// With --stacks, on-CPU samples per second of CPU time.
        #[arg(long, value_name = "HZ", default_value_t = 99, requires = "stacks",
              value_parser = clap::value_parser!(u64).range(1..=10_000))]
        frequency: u64,
    },
    /// Count in the kernel (always-on mode): per function, thread and system call, written
    /// as one window per interval. Near-zero cost: no record crosses to user space.
    Stat {
        #[command(flatten)]
        target: Target,
        /// File to write [default: tracer.stat].
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Length of a window.
        #[arg(short, long, default_value = "10s", value_parser = parse_duration)]
        interval: Duration,
        /// Also record 1 call in N of each function in full detail.
        #[arg(long, value_name = "N", default_value_t = 0)]
        sample: u32,
        /// Count every call, time 1 in N per function (latencies, errors and time are
        /// then estimates from those, scaled by the exact counts).
        #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
        time_every: u32,
        /// Time every call (--time-every 1): exact latencies, at the cost of a return
        /// probe per call.
        #[arg(long, conflicts_with = "time_every")]
        exact_latency: bool,
        /// Count every call, time at most K calls per second of each function, spread
        /// over its calls as their rate goes (instead of --time-every): a bounded cost
        /// whatever the load.
        #[arg(long, value_name = "K", conflicts_with_all = ["time_every", "exact_latency"], value_parser = clap::value_parser!(u32).range(1..))]
        time_budget: Option<u32>,
        /// Attach programs that do nothing (benchmarks: the kernel's own cost).
        #[arg(long, hide = true)]
        empty_probes: bool,
        /// Count stacks in the kernel, per window: on-CPU samples and where threads block.
        /// Walked by frame pointers (`bpf_get_stackid`): wrong past code built without them
        /// (`record --stacks` unwinds right).
        #[arg(long)]
        stacks: bool,
        /// With --stacks, on-CPU samples per second of CPU time.
        #[arg(long, value_name = "HZ", default_value_t = 99, requires = "stacks",
              value_parser = clap::value_parser!(u64).range(1..=10_000))]
        frequency: u64,
    },
    /// Print a trace file's records as text, one per line.
    Dump {
        /// Trace file.
        file: PathBuf,
        /// Read past damaged chunks (saying what was skipped) instead of stopping at the
        /// first.
        #[arg(long)]
        salvage: bool,
    },
    /// Merge trace files by time and write a Paraver trace (NAME.prv, .pcf, .row), a
    /// Trace Event Format one (NAME.json: Perfetto UI, chrome://tracing, speedscope),
    /// folded stacks for flame graphs (NAME.folded) or Parquet tables (a directory,
    /// NAME.parquet; trace and stat files of any hosts).
    Convert {
        /// Trace files (several processes or hosts merge into one trace).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format [default: the output's extension's, else paraver].
        #[arg(long, value_enum)]
        to: Option<Format>,
        /// Output name; an extension of the format (.prv, .json, .folded) is not
        /// doubled (default: the first file's name). For Parquet, the directory (default:
        /// the first file's name with .parquet).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Parquet: Hive-style directories for the big tables, by `host`, `date` (UTC day
        /// of the row's start) or `host,date`.
        #[arg(long, value_name = "KEYS", value_parser = parse_partition)]
        partition: Option<trace_parquet::Partition>,
        /// Overwrite existing outputs.
        #[arg(short, long)]
        force: bool,
        /// Only from this time since the trace's start (e.g. 1.5s); `--to chrome` and
        /// `--to folded`.
        #[arg(long, value_parser = parse_offset)]
        start: Option<Duration>,
        /// Only until this time since the trace's start, and stop reading there; `--to
        /// chrome` and `--to folded`.
        #[arg(long, value_parser = parse_duration)]
        end: Option<Duration>,
        /// Read past damaged chunks instead of stopping at the first; the outputs say what
        /// was skipped.
        #[arg(long)]
        salvage: bool,
    },
    /// Counts and times per function, thread, system call, connection or call edge.
    Summary {
        /// Trace or stat files (several summarize together).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        view: View,
    },
    /// Compare two runs element by element, largest regression first; with --fail-if, a
    /// performance gate for CI.
    Diff {
        /// The baseline trace.
        a: PathBuf,
        /// The trace to compare with it.
        b: PathBuf,
        #[command(flatten)]
        view: View,
        /// Fail (exit status 3, a line on stderr for each) when a condition holds:
        /// ELEMENT.METRIC OP LIMIT, metric count|calls, errors, mean, p99, total or self;
        /// `+10%`/`-5%` is B's change relative to A, `+2ms` its change, `2ms` B's own
        /// value. E.g. 'handle_request.p99 > +10%', 'read.errors > 0' (repeatable).
        #[arg(long, value_name = "CONDITION")]
        fail_if: Vec<String>,
        /// Also write the conditions' verdicts as JUnit XML to this file (whole or not
        /// at all: under a temporary name, then renamed).
        #[arg(long, value_name = "FILE", requires = "fail_if")]
        junit: Option<PathBuf>,
        /// Overwrite the --junit file if it exists.
        #[arg(short, long, requires = "junit")]
        force: bool,
    },
    /// List functions and USDT probes that can be probed, like `bpftrace -l`.
    Probes {
        /// List the functions of this process.
        #[arg(short, long)]
        pid: Option<u32>,
        /// An executable or library file (instead of --pid).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Glob over names; `LIB:GLOB` for a library of the process; `usdt:[LIB:]PROVIDER:NAME`
        /// (globs) for USDT probes, or `usdt:PATH[:NAME]` of any provider. Without --pid or
        /// --path, LIB names the file to list: a path, or a library of the system's
        /// (`libc:mallo*`). A leading `uprobe:`, as the list writes them, is taken too.
        #[arg(value_parser = parse_probe_spec)]
        pattern: Option<String>,
    },
}

/// What `record` and `stat` attach to, and when they stop.
#[derive(clap::Args)]
pub struct Target {
    /// Process to trace, with its descendants, those running already and those it
    /// creates (repeatable).
    #[arg(short, long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace the given processes only, not their descendants (their threads still).
    #[arg(long)]
    pub no_inherit: bool,
    /// Trace every process of a cgroup v2 and its descendants (a container, a systemd
    /// service, a pod): those in it now and those that enter it later. PATH is absolute or
    /// relative to the cgroup v2 mount (system.slice/nginx.service).
    #[arg(long, value_name = "PATH", conflicts_with = "container")]
    pub cgroup: Option<String>,
    /// Trace a running podman or docker container, named or by id: its cgroup, as
    /// --cgroup does (the runtime's CLI says which process it runs; /proc, which cgroup).
    #[arg(long, value_name = "NAME_OR_ID")]
    pub container: Option<String>,
    /// Event classes: calls, sched, syscalls, comma-separated, or all (default); one left
    /// out is not attached and costs nothing.
    #[arg(long, default_value = "all", value_parser = |s: &str| s.parse::<Events>())]
    pub events: Events,
    /// Only these system calls (names or numbers, comma-separated), e.g.
    /// read,write,accept4.
    #[arg(long, value_name = "LIST", value_parser = parse_syscalls)]
    pub syscalls: Option<SyscallList>,
    /// Function to probe: FUNC, PATH_OR_LIB:FUNC, globs allowed (repeatable); a leading
    /// `uprobe:`, as `tracer probes` and bpftrace write them, is taken too.
    #[arg(short, long = "uprobe", value_name = "SPEC", value_parser = parse_probe_spec)]
    pub uprobes: Vec<String>,
    /// Probe every function a non-glob spec matches instead of refusing ambiguity.
    #[arg(long)]
    pub all_matches: bool,
    /// Probe the returns of functions of a program that switches stacks itself
    /// (coroutines: Boost.Context, ucontext, fibers), which is refused otherwise: a call
    /// that returns on another stack than it entered on makes the kernel's return probe
    /// corrupt the process. Only when no switch happens while a probed function runs.
    #[arg(long)]
    pub unsafe_returns: bool,
    /// Stop after this long (e.g. 10s, 500ms, 2m); default: until Ctrl-C or exit. A launched
    /// command still running then is sent SIGTERM: it lives as long as its recording.
    #[arg(short, long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Overwrite the output file if it exists.
    #[arg(short, long)]
    pub force: bool,
    /// No status line, live table or summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Start a new file this often, named after the output with its start time in UTC
    /// (tracer-20261123T195100Z.trace); each file is complete.
    #[arg(long, value_parser = parse_duration)]
    pub rotate: Option<Duration>,
    /// With --rotate, keep only the newest N files of this run (a flight recorder).
    #[arg(long, value_name = "N", requires = "rotate")]
    pub keep: Option<usize>,
    /// Command to launch and trace from its first instruction.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl Target {
    /// The recording's options, checked.
    pub fn options(
        self,
        output: PathBuf,
        stat: Option<stat::StatOptions>,
        empty_probes: bool,
    ) -> Result<RecordOptions> {
        let cgroup = match &self.container {
            Some(c) => Some(crate::cgroup::of_container(c)?),
            None => self.cgroup,
        };
        if self.pids.is_empty() && self.command.is_empty() && cgroup.is_none() {
            bail!("nothing to trace: give --pid PID, --cgroup PATH, --container NAME or a command after --");
        }
        if self.rotate.is_some_and(|r| r < Duration::from_secs(1)) {
            bail!("--rotate must be at least 1s (files are named by the second)");
        }
        if self.keep == Some(0) {
            bail!("--keep must be at least 1");
        }
        if !self.events.calls && !self.uprobes.is_empty() {
            bail!("-u probes calls, which --events leaves out");
        }
        if !self.events.syscalls && self.syscalls.is_some() {
            bail!("--syscalls chooses system calls, which --events leaves out");
        }
        let rotate = self.rotate.map(|every| Rotation {
            every,
            keep: self.keep.unwrap_or(0),
        });
        Ok(RecordOptions {
            pids: self.pids,
            command: self.command,
            uprobes: self.uprobes,
            matching: symbolizer::Options {
                allow_multiple: self.all_matches,
                unsafe_returns: self.unsafe_returns,
            },
            duration: self.duration,
            output,
            force: self.force,
            quiet: self.quiet,
            empty_probes,
            // Thread states are followed only with the scheduler's events.
            stat: stat.map(|s| stat::StatOptions {
                states: self.events.sched,
                ..s
            }),
            rotate,
            trigger: None,
            inherit: !self.no_inherit,
            cgroup,
            events: self.events,
            syscalls: self.syscalls.map(|l| l.0),
            stacks: None,
        })
    }
}

/// How summaries and diffs are shown.
#[derive(clap::Args)]
pub struct View {
    /// Rows: function, thread, syscall, connection, callgraph, or stack (functions by
    /// on-CPU samples and off-CPU time, of a trace recorded with --stacks).
    #[arg(long, default_value = "function")]
    pub by: String,
    /// table, json, csv or junit (summary: the hot-spot flags; diff: the --fail-if
    /// verdicts).
    #[arg(long, default_value = "table")]
    pub format: String,
    /// Sort key (e.g. total, calls, mean, p99, errors, running, ready); default: total time.
    #[arg(long)]
    pub sort: Option<String>,
    /// Show only the first N rows.
    #[arg(long)]
    pub top: Option<usize>,
    /// Per-window figures (CSV), e.g. 1s.
    #[arg(long, value_parser = parse_duration)]
    pub window: Option<Duration>,
    /// When a function call counts as an error: negative, nonzero or none (stat files,
    /// counted by the kernel, know negative returns only).
    #[arg(long, default_value = "negative")]
    pub error_if: String,
    /// Read past damaged chunks instead of stopping at the first; the summary notes what
    /// was skipped.
    #[arg(long)]
    pub salvage: bool,
}

impl View {
    /// The summary options, checked.
    pub fn options(&self) -> Result<trace_summary::SummaryOptions> {
        use trace_summary::{SummaryOptions, Thresholds};
        let thresholds = Thresholds {
            error_if: self.error_if.parse()?,
            ..Thresholds::default()
        };
        Ok(SummaryOptions {
            by: self.by.parse()?,
            format: self.format.parse()?,
            sort: self.sort.clone(),
            top: self.top,
            window_ns: self.window.map(|w| w.as_nanos() as u64),
            thresholds,
        })
    }
}

/// System calls by number, as `--syscalls` names them.
#[derive(Clone, Debug)]
pub struct SyscallList(pub Vec<u32>);

/// `read,write,288`: system calls by name or number.
fn parse_syscalls(s: &str) -> Result<SyscallList, String> {
    s.split(',')
        .map(str::trim)
        .map(|c| {
            c.parse::<u32>()
                .ok()
                .filter(|&n| n < tracer_abi::MAX_SYSCALLS)
                .or_else(|| tracer_abi::syscalls::number(c))
                .ok_or_else(|| format!("`{c}` is not a system call of this machine"))
        })
        .collect::<Result<_, _>>()
        .map(SyscallList)
}

/// The longest duration taken: past it, a deadline could overflow the clock (std panics
/// on an `Instant` that overflows) and ns figures their u64. 100 years of 365.25 days,
/// humantime's `100y`.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// A point in a trace, from its start: like [`parse_duration`], and 0 is allowed.
pub fn parse_offset(s: &str) -> Result<Duration, String> {
    match parse_with_unit(s)? {
        Some(d) => Ok(d),
        None => Err(format!("invalid time `{s}` (try 1.5s, 500ms, 2m)")),
    }
}

/// A positive duration: `10s`, `250ms`, `1.5s`, `2m`, `1h`, `3us`, or a bare number of
/// seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match parse_with_unit(s)? {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("duration must be positive: `{s}`")),
    }
}

/// `s` as a duration (a bare number in seconds); `None` for a negative one.
fn parse_with_unit(s: &str) -> Result<Option<Duration>, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Ok(None);
    }
    let with_unit = if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.') {
        format!("{s}s")
    } else {
        s.to_string()
    };
    let d = humantime::parse_duration(&with_unit)
        .map_err(|e| format!("invalid duration `{s}`: {e} (try 10s, 500ms, 2m)"))?;
    if d > MAX_DURATION {
        return Err(format!("duration `{s}` is too long (at most 100 years)"));
    }
    Ok(Some(d))
}

/// `--partition host,date`.
fn parse_partition(s: &str) -> Result<trace_parquet::Partition> {
    trace_parquet::Partition::parse(s).map_err(anyhow::Error::msg)
}

/// A probe spec as the user wrote it, without the `uprobe:` that `tracer probes` and
/// bpftrace write before a function's (`uprobe:/usr/sbin/nginx:ngx_http_*`).
fn parse_probe_spec(s: &str) -> Result<String, String> {
    Ok(s.strip_prefix("uprobe:").unwrap_or(s).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_specs_as_listed() {
        let p = |s| parse_probe_spec(s).unwrap();
        assert_eq!(
            p("uprobe:/usr/sbin/nginx:ngx_http_*"),
            "/usr/sbin/nginx:ngx_http_*"
        );
        assert_eq!(p("libc:malloc"), "libc:malloc");
        assert_eq!(
            p("usdt:python:function__entry"),
            "usdt:python:function__entry"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
        // Too large for any clock: an error, not a panic.
        assert!(parse_duration("99999999999999999999").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
        assert_eq!(parse_offset("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_offset("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_offset("1.5s").unwrap(), Duration::from_millis(1500));
    }

    /// A duration that fits a `Duration` but not a deadline (`Instant::now() + d` panics
    /// past the clock's range): refused at parse time, whichever option it is.
    #[test]
    fn durations_past_100_years_are_refused() {
        for s in [
            "18446744073709551615s",
            "18446744073709551615",
            "500000y",
            "101y",
        ] {
            let e = parse_duration(s).unwrap_err();
            assert!(
                e.contains("at most 100 years") && !e.contains('\n'),
                "{s}: {e}"
            );
            assert!(parse_offset(s).is_err(), "{s}");
        }
        assert_eq!(parse_duration("100y").unwrap(), MAX_DURATION);
        assert!(std::time::Instant::now()
            .checked_add(MAX_DURATION)
            .is_some());
        // Its ns fit a u64 (summary windows, convert's --start and --end).
        assert!(MAX_DURATION.as_nanos() < u64::MAX as u128);
        let e = crate::trigger::Trigger::parse("f>500000y", Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("at most 100 years"), "{e}");
    }

    /// Every duration option and the counts beside them: an overflowing or zero value is
    /// a usage error of one line, never a panic later.
    #[test]
    fn every_duration_and_count_option_is_bounded() {
        let refused = |args: &[&str]| {
            let argv = ["tracer"].iter().chain(args);
            match Cli::try_parse_from(argv) {
                Ok(_) => panic!("{args:?} was taken"),
                Err(e) => usage_line(&e.to_string()),
            }
        };
        let cases: &[&[&str]] = &[
            &["stat", "-p", "1", "-i", "18446744073709551615s"],
            &["stat", "-p", "1", "-i", "500000y"],
            &["stat", "-p", "1", "-d", "18446744073709551615s"],
            &["record", "-p", "1", "-d", "500000y"],
            &["record", "-p", "1", "--rotate", "500000y"],
            &[
                "record",
                "-p",
                "1",
                "--trigger",
                "f>1ms",
                "--after",
                "500000y",
            ],
            &["summary", "x.trace", "--window", "500000y"],
            &["convert", "x.trace", "--start", "500000y"],
            &["convert", "x.trace", "--end", "18446744073709551615"],
        ];
        for args in cases {
            let line = refused(args);
            assert!(line.contains("at most 100 years"), "{args:?}: {line}");
            assert!(!line.contains('\n') && !line.starts_with("error"), "{line}");
        }
        for args in [
            &["stat", "-p", "1", "-i", "0"][..],
            &["stat", "-p", "1", "--time-every", "0"],
            &["stat", "-p", "1", "--time-every", "4294967296"],
            &["stat", "-p", "1", "--time-budget", "0"],
            &["stat", "-p", "1", "--sample", "4294967296"],
            &["stat", "-p", "1", "--stacks", "--frequency", "0"],
            &[
                "record",
                "-p",
                "1",
                "--stacks",
                "--frequency",
                "18446744073709551616",
            ],
            &[
                "record",
                "-p",
                "1",
                "--rotate",
                "1s",
                "--keep",
                "18446744073709551616",
            ],
        ] {
            let line = refused(args);
            assert!(!line.is_empty() && !line.contains('\n'), "{args:?}: {line}");
        }
        // What parses is bounded, or checked by Target::options (--keep 0).
        let ok = [
            "tracer",
            "stat",
            "-p",
            "1",
            "-i",
            "100y",
            "--sample",
            "4294967295",
        ];
        assert!(Cli::try_parse_from(ok).is_ok());
    }

    #[test]
    fn usage_errors_are_one_line() {
        let rendered = "error: the following required arguments were not provided:\n  \
                        <FILES>...\n\nUsage: tracer summary <FILES>...\n\nFor more \
                        information, try '--help'.\n";
        assert_eq!(
            usage_line(rendered),
            "the following required arguments were not provided: <FILES>...; \
             Usage: tracer summary <FILES>..."
        );
        let e = Cli::try_parse_from(["tracer", "stat", "-i", "10zz"])
            .err()
            .unwrap();
        let line = usage_line(&e.to_string());
        assert!(
            line.starts_with("invalid value '10zz' for '--interval <INTERVAL>'"),
            "{line}"
        );
    }
}
