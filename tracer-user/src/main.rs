//! `tracer`: record a server process's kernel and application events, and turn the trace
//! into Paraver traces and summaries.

mod btf;
mod dump;
mod kernel;
mod output;
mod probes;
mod procfs;
mod record;
mod stat;
mod tracefs;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tracer",
    version,
    about = "eBPF tracer for Linux server processes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Output formats of `convert`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// Paraver: NAME.prv, NAME.pcf, NAME.row.
    Paraver,
    /// Trace Event Format (Chrome's JSON trace): NAME.json, for Perfetto's UI,
    /// chrome://tracing and speedscope.
    Chrome,
    /// Folded stacks for flame graphs (flamegraph.pl, inferno, speedscope): NAME.folded,
    /// each thread's time by its probed functions, system call and state, in ns.
    Folded,
}

#[derive(Subcommand)]
enum Command {
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
    },
    /// Print a trace file's records as text, one per line.
    Dump {
        /// Trace file.
        file: PathBuf,
    },
    /// Merge trace files by time and write a Paraver trace (NAME.prv, .pcf, .row), a
    /// Trace Event Format one (NAME.json: Perfetto UI, chrome://tracing, speedscope) or
    /// folded stacks for flame graphs (NAME.folded).
    Convert {
        /// Trace files (several processes or hosts merge into one trace).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Paraver)]
        to: Format,
        /// Output name, without extension (default: the first file's name).
        #[arg(short, long)]
        output: Option<PathBuf>,
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
    },
    /// Counts and times per function, thread, system call, connection or call edge.
    Summary {
        /// Trace or stat files (several summarize together).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        view: View,
    },
    /// Compare two runs element by element, largest regression first.
    Diff {
        /// The baseline trace.
        a: PathBuf,
        /// The trace to compare with it.
        b: PathBuf,
        #[command(flatten)]
        view: View,
    },
    /// List functions that can be probed, like `bpftrace -l`.
    Probes {
        /// List the functions of this process.
        #[arg(short, long)]
        pid: Option<u32>,
        /// An executable or library file (instead of --pid).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Glob over names; `LIB:GLOB` for a library of the process.
        pattern: Option<String>,
    },
}

/// What `record` and `stat` attach to, and when they stop.
#[derive(clap::Args)]
struct Target {
    /// Process to trace (repeatable).
    #[arg(short, long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Function to probe: FUNC, PATH_OR_LIB:FUNC, globs allowed (repeatable).
    #[arg(short, long = "uprobe", value_name = "SPEC")]
    uprobes: Vec<String>,
    /// Probe every function a non-glob spec matches instead of refusing ambiguity.
    #[arg(long)]
    all_matches: bool,
    /// Stop after this long (e.g. 10s, 500ms, 2m); default: until Ctrl-C or exit.
    #[arg(short, long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Overwrite the output file if it exists.
    #[arg(short, long)]
    force: bool,
    /// No status line, live table or summary.
    #[arg(short, long)]
    quiet: bool,
    /// Start a new file this often, named after the output with its start time in UTC
    /// (tracer-20261123T195100Z.trace); each file is complete.
    #[arg(long, value_parser = parse_duration)]
    rotate: Option<Duration>,
    /// With --rotate, keep only the newest N files of this run (a flight recorder).
    #[arg(long, value_name = "N", requires = "rotate")]
    keep: Option<usize>,
    /// Command to launch and trace from its first instruction.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

impl Target {
    fn options(
        self,
        output: PathBuf,
        stat: Option<stat::StatOptions>,
        empty_probes: bool,
    ) -> Result<record::RecordOptions> {
        if self.pids.is_empty() && self.command.is_empty() {
            bail!("nothing to trace: give --pid PID or a command after --");
        }
        if self.rotate.is_some_and(|r| r < Duration::from_secs(1)) {
            bail!("--rotate must be at least 1s (files are named by the second)");
        }
        if self.keep == Some(0) {
            bail!("--keep must be at least 1");
        }
        let rotate = self.rotate.map(|every| record::Rotation {
            every,
            keep: self.keep.unwrap_or(0),
        });
        Ok(record::RecordOptions {
            pids: self.pids,
            command: self.command,
            uprobes: self.uprobes,
            allow_multiple: self.all_matches,
            duration: self.duration,
            output,
            force: self.force,
            quiet: self.quiet,
            empty_probes,
            stat,
            rotate,
            trigger: None,
        })
    }
}

/// Records or counts, then prints what was done.
fn run_record(opts: &record::RecordOptions) -> Result<()> {
    let summary = record::record(opts)?;
    if !opts.quiet {
        record::print_summary(&summary)?;
    }
    Ok(())
}

/// How summaries and diffs are shown.
#[derive(clap::Args)]
struct View {
    /// Rows: function, thread, syscall, connection or callgraph.
    #[arg(long, default_value = "function")]
    by: String,
    /// table, json or csv.
    #[arg(long, default_value = "table")]
    format: String,
    /// Sort key (e.g. total, calls, mean, p99, errors, running, ready); default: total time.
    #[arg(long)]
    sort: Option<String>,
    /// Show only the first N rows.
    #[arg(long)]
    top: Option<usize>,
    /// Per-window figures (CSV), e.g. 1s.
    #[arg(long, value_parser = parse_duration)]
    window: Option<Duration>,
    /// When a function call counts as an error: negative, nonzero or none.
    #[arg(long, default_value = "negative")]
    error_if: String,
}

impl View {
    fn options(&self) -> Result<trace_summary::SummaryOptions> {
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

/// Summarizes trace files, with windows when asked.
fn summarize(
    files: &[PathBuf],
    opts: &trace_summary::SummaryOptions,
) -> Result<trace_summary::Summary> {
    Ok(match opts.window_ns {
        Some(w) => trace_summary::summarize_windows(files, w)?,
        None => trace_summary::summarize(files)?,
    })
}

/// A point in a trace: like [`parse_duration`], and 0 is allowed.
fn parse_offset(s: &str) -> Result<Duration, String> {
    match s.trim().trim_end_matches(|c: char| c.is_ascii_alphabetic()) {
        z if !z.is_empty() && z.chars().all(|c| c == '0' || c == '.') => Ok(Duration::ZERO),
        _ => parse_duration(s),
    }
}

/// Parses `10s`, `250ms`, `2m`, `1h`, `3us`, or a bare number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration `{s}` (try 10s, 500ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in `{s}` (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("duration must be positive: `{s}`"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Record {
            target,
            output,
            paraver,
            empty_probes,
            trigger,
            after,
        } => {
            let output = output.unwrap_or_else(|| "tracer.trace".into());
            let mut opts = target.options(output, None, empty_probes)?;
            opts.trigger = match trigger {
                Some(t) => Some(record::Trigger::parse(&t, after)?),
                None => None,
            };
            if paraver.is_some() && opts.rotate.is_some() {
                bail!("--paraver converts one file: with --rotate, convert the files you want afterwards");
            }
            run_record(&opts)?;
            if let Some(stem) = paraver {
                let report = trace_convert::paraver::convert(
                    std::slice::from_ref(&opts.output),
                    &stem,
                    &trace_convert::Options {
                        force: opts.force,
                        ..Default::default()
                    },
                )?;
                if !opts.quiet {
                    eprintln!("{report}");
                }
            }
            Ok(())
        }
        Command::Stat {
            target,
            output,
            interval,
            sample,
        } => {
            let output = output.unwrap_or_else(|| "tracer.stat".into());
            let stat = stat::StatOptions {
                interval,
                sample_every: sample,
            };
            let opts = target.options(output, Some(stat), false)?;
            if opts.rotate.is_some_and(|r| r.every < interval) {
                bail!("--rotate must be at least the interval (a file ends with a window)");
            }
            run_record(&opts)
        }
        Command::Dump { file } => dump::dump(&file),
        Command::Convert {
            files,
            to,
            output,
            force,
            start,
            end,
        } => {
            let stem = output.unwrap_or_else(|| files[0].with_extension(""));
            let with_ext = |ext: &str| {
                let mut out = stem.clone().into_os_string();
                out.push(ext);
                PathBuf::from(out)
            };
            if matches!(to, Format::Paraver) && (start.is_some() || end.is_some()) {
                bail!("--start and --end apply to --to chrome and --to folded only");
            }
            let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
            let window = trace_convert::Window {
                from_ns: start.map_or(0, ns),
                until_ns: end.map_or(u64::MAX, ns),
            };
            if window.until_ns <= window.from_ns {
                bail!("--end must be after --start");
            }
            let opts = trace_convert::Options {
                force,
                window,
                ..Default::default()
            };
            match to {
                Format::Paraver => {
                    eprintln!("{}", trace_convert::paraver::convert(&files, &stem, &opts)?)
                }
                Format::Folded => {
                    let out = with_ext(".folded");
                    let report = trace_convert::folded::convert(&files, &out, &opts)?;
                    eprintln!("{report}");
                }
                Format::Chrome => {
                    let out = with_ext(".json");
                    let report = trace_convert::chrome::convert(&files, &out, &opts)?;
                    eprintln!("{report}");
                }
            }
            Ok(())
        }
        Command::Summary { files, view } => {
            let opts = view.options()?;
            let summary = summarize(&files, &opts)?;
            let mut out = std::io::stdout().lock();
            trace_summary::render(&summary, &opts, &mut out)?;
            Ok(())
        }
        Command::Diff { a, b, view } => {
            let opts = view.options()?;
            let sa = summarize(std::slice::from_ref(&a), &opts)?;
            let sb = summarize(std::slice::from_ref(&b), &opts)?;
            let mut out = std::io::stdout().lock();
            trace_summary::diff(&sa, &sb, &opts, &mut out)?;
            Ok(())
        }
        Command::Probes { pid, path, pattern } => probes::list(pid, path, pattern.as_deref()),
    }
}

fn main() -> ExitCode {
    // A closed stdout (e.g. `tracer dump | head`) ends the program quietly.
    // SAFETY: restoring the default disposition of SIGPIPE.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tracer: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, leaving out a cause whose text the line already
/// holds (errors that name their source in their own message would say it twice).
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg = format!("{msg}: {c}");
        }
    }
    msg.replace('\n', "; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_one_line_without_repeats() {
        let inner = std::io::Error::other("bad magic");
        let e = anyhow::Error::new(inner).context("x.trace: bad magic");
        assert_eq!(one_line(&e), "x.trace: bad magic");
        let e = anyhow::anyhow!("line one\nline two").context("reading x");
        assert_eq!(one_line(&e), "reading x: line one; line two");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("").is_err());
    }
}
