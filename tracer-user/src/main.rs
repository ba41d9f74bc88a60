//! `tracer`: record a server process's kernel and application events, and turn the trace
//! into Paraver traces, other viewers' formats and summaries.

mod attach;
mod btf;
mod cgroup;
mod cli;
mod clock;
mod drain;
mod dump;
mod files;
mod kernel;
mod launch;
mod output;
mod perf_map;
mod preflight;
mod probes;
mod procfs;
mod record;
mod session;
mod sessions;
mod stacks;
mod stat;
mod status;
mod tracefs;
mod tree;
mod trigger;
mod uprobe;

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::{bail, Result};

use cli::{Cli, Command, Format, View};

fn main() -> ExitCode {
    // A closed stdout (e.g. `tracer dump | head`) ends the program quietly.
    // SAFETY: restoring the default disposition of SIGPIPE.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    procfs::raise_open_files_limit();
    let cli = match Cli::from_args() {
        Ok(cli) => cli,
        Err(line) => {
            eprintln!("tracer: error: {line}");
            return ExitCode::from(USAGE_ERROR);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<GateFailed>() => ExitCode::from(GATE_FAILED),
        Err(e) if e.is::<CommandFailed>() => {
            ExitCode::from(e.downcast_ref::<CommandFailed>().map_or(1, |c| c.0))
        }
        Err(e) => {
            eprintln!("tracer: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs a command: the command line's checks that need more than one option are in each
/// command's function.
fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Record {
            target,
            output,
            paraver,
            empty_probes,
            trigger,
            after,
            stacks,
            frequency,
        } => {
            let output = output.unwrap_or_else(|| "tracer.trace".into());
            let opts = target.options(output, None, empty_probes)?;
            record_command(opts, paraver, (trigger, after), stacks.then_some(frequency))
        }
        Command::Stat {
            target,
            output,
            interval,
            sample,
            time_every,
            exact_latency,
            time_budget,
            empty_probes,
            stacks,
            frequency,
        } => {
            let output = output.unwrap_or_else(|| "tracer.stat".into());
            let stat = stat::StatOptions {
                interval,
                sample_every: sample,
                time_every: if exact_latency { 1 } else { time_every },
                time_budget,
                states: true,
            };
            let mut opts = target.options(output, Some(stat), empty_probes)?;
            opts.stacks = stacks.then_some(frequency);
            stat_command(&opts, interval)
        }
        Command::Dump { file, salvage } => dump::dump(&file, salvage).map_err(salvage_hint),
        Command::Convert {
            files,
            to,
            output,
            force,
            partition,
            start,
            end,
            salvage,
        } => convert_command(&files, to, output, force, partition, (start, end), salvage),
        Command::Summary { files, view } if matches!(view.by.as_str(), "stack" | "stacks") => {
            stack_summary(&files, &view)
        }
        Command::Summary { files, view } => {
            let opts = view.options()?;
            let summary = summarize(&files, &opts, view.salvage).map_err(salvage_hint)?;
            let mut out = std::io::stdout().lock();
            trace_summary::render(&summary, &opts, &mut out)?;
            warn_salvaged_csv(opts.format, &[&summary]);
            Ok(())
        }
        Command::Diff {
            a,
            b,
            view,
            fail_if,
            junit,
            force,
        } => {
            let junit = junit.as_deref().map(|j| (j, force));
            diff(&a, &b, &view, &fail_if, junit).map_err(salvage_hint)
        }
        Command::Probes { pid, path, pattern } => probes::list(pid, path, pattern.as_deref()),
    }
}

/// `tracer record` with its checked options `opts`: `--stacks` at `stacks` Hz, a trigger
/// (`--trigger`, `--after`), and its Paraver conversion (`--paraver`) once it ends.
fn record_command(
    mut opts: record::RecordOptions,
    paraver: Option<PathBuf>,
    (trigger, after): (Option<String>, Duration),
    stacks: Option<u64>,
) -> Result<()> {
    if stacks.is_some() && !opts.events.sched {
        bail!("--stacks takes the blocking stacks at switches, which --events leaves out");
    }
    opts.stacks = stacks;
    opts.trigger = match trigger {
        Some(t) => Some(trigger::Trigger::parse(&t, after)?),
        None => None,
    };
    if paraver.is_some() && opts.rotate.is_some() {
        bail!("--paraver converts one file: with --rotate, convert the files you want afterwards");
    }
    let command = run_record(&opts)?;
    if let Some(stem) = paraver {
        let convert = trace_convert::Options {
            force: opts.force,
            ..Default::default()
        };
        let report =
            trace_convert::paraver::convert(std::slice::from_ref(&opts.output), &stem, &convert)?;
        if !opts.quiet {
            eprintln!("{report}");
        }
    }
    command
}

/// `tracer stat` with its checked options `opts`, a window every `interval`.
fn stat_command(opts: &record::RecordOptions, interval: Duration) -> Result<()> {
    if opts.rotate.is_some_and(|r| r.every < interval) {
        bail!("--rotate must be at least the interval (a file ends with a window)");
    }
    run_record(opts)?
}

/// `tracer convert`: Parquet tables when `--to parquet` or the output's extension says
/// so, else one of the files' formats.
fn convert_command(
    files: &[PathBuf],
    to: Option<Format>,
    output: Option<PathBuf>,
    force: bool,
    partition: Option<trace_parquet::Partition>,
    (start, end): (Option<Duration>, Option<Duration>),
    salvage: bool,
) -> Result<()> {
    let parquet = matches!(to, Some(Format::Parquet))
        || output
            .as_ref()
            .is_some_and(|o| o.extension() == Some("parquet".as_ref()));
    if parquet {
        if start.is_some() || end.is_some() {
            bail!("--start and --end apply to --to chrome and --to folded only");
        }
        if to.is_some_and(|t| t != Format::Parquet) {
            bail!("a .parquet output is Parquet tables but --to asks for another format");
        }
        let output = output.unwrap_or_else(|| files[0].with_extension("parquet"));
        to_parquet(files, &output, force, partition, salvage).map_err(salvage_hint)
    } else if partition.is_some() {
        bail!("--partition applies to --to parquet only")
    } else {
        convert(files, to, output, force, (start, end), salvage).map_err(salvage_hint)
    }
}

/// `tracer summary --by stack`.
fn stack_summary(files: &[PathBuf], view: &View) -> Result<()> {
    let merge = trace_merge::MergeOptions {
        salvage: view.salvage,
        ..Default::default()
    };
    let format: trace_summary::Format = view.format.parse()?;
    if format == trace_summary::Format::Junit {
        bail!("--by stack is a table, json or csv");
    }
    let summary =
        trace_summary::stacks::summarize(files, &merge).map_err(|e| salvage_hint(e.into()))?;
    if format == trace_summary::Format::Csv {
        for what in &summary.salvaged {
            eprintln!("tracer: warning: the CSV comes from a salvaged file: {what}");
        }
    }
    let mut out = std::io::stdout().lock();
    trace_summary::stacks::render(&summary, format, view.top, &mut out)?;
    Ok(())
}

/// Records or counts, then prints what was done. What is left to return: the launched
/// command's failure, whose status the tracer exits with (as `strace` and `time` do, so
/// that a recorded CI job still fails when its command does).
fn run_record(opts: &record::RecordOptions) -> Result<Result<()>> {
    let summary = record::record(opts)?;
    if !opts.quiet {
        status::print_summary(&summary)?;
    }
    Ok(match summary.command_status {
        Some(code) if code != 0 => Err(CommandFailed(code).into()),
        _ => Ok(()),
    })
}

/// The launched command failed with this exit status: the recording is complete, the
/// status is the command's.
#[derive(Debug)]
struct CommandFailed(u8);

impl std::fmt::Display for CommandFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the command exited with status {}", self.0)
    }
}

impl std::error::Error for CommandFailed {}

/// `tracer convert`.
fn convert(
    files: &[PathBuf],
    to: Option<Format>,
    output: Option<PathBuf>,
    force: bool,
    (start, end): (Option<Duration>, Option<Duration>),
    salvage: bool,
) -> Result<()> {
    let (stem, to) = output_stem(output.unwrap_or_else(|| files[0].with_extension("")), to)?;
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
        merge: trace_convert::MergeOptions {
            salvage,
            ..Default::default()
        },
    };
    match to {
        Format::Paraver => eprintln!("{}", trace_convert::paraver::convert(files, &stem, &opts)?),
        Format::Folded => {
            let report = trace_convert::folded::convert(files, &with_ext(".folded"), &opts)?;
            eprintln!("{report}");
        }
        Format::Chrome => {
            let report = trace_convert::chrome::convert(files, &with_ext(".json"), &opts)?;
            eprintln!("{report}");
        }
        Format::Parquet => unreachable!("converted by to_parquet"),
    }
    Ok(())
}

/// `tracer convert --to parquet`: tables in the directory `output`.
fn to_parquet(
    files: &[PathBuf],
    output: &std::path::Path,
    force: bool,
    partition: Option<trace_parquet::Partition>,
    salvage: bool,
) -> Result<()> {
    let opts = trace_parquet::Options {
        force,
        partition: partition.unwrap_or_default(),
        merge: trace_merge::MergeOptions {
            salvage,
            ..Default::default()
        },
    };
    eprintln!("{}", trace_parquet::convert(files, output, &opts)?);
    Ok(())
}

/// The output's name without the extension of its format, and that format: `-o x.json`
/// means Chrome's format and x.json, not x.json.prv.
fn output_stem(output: PathBuf, to: Option<Format>) -> Result<(PathBuf, Format)> {
    let named = match output.extension().and_then(|e| e.to_str()) {
        Some("prv" | "pcf" | "row") => Some(Format::Paraver),
        Some("json") => Some(Format::Chrome),
        Some("folded") => Some(Format::Folded),
        _ => None,
    };
    match (named, to) {
        (None, to) => Ok((output, to.unwrap_or(Format::Paraver))),
        (Some(named), Some(to)) if named != to => bail!(
            "{} is named as {} output but --to asks for {}",
            output.display(),
            named.name(),
            to.name()
        ),
        (Some(named), _) => Ok((output.with_extension(""), named)),
    }
}

/// `tracer diff`, and its gate with `--fail-if`; `junit`: the file to write its verdicts
/// to, and whether an existing one is replaced.
fn diff(
    a: &PathBuf,
    b: &PathBuf,
    view: &View,
    fail_if: &[String],
    junit: Option<(&Path, bool)>,
) -> Result<()> {
    use trace_summary::{gate, Format};
    let opts = view.options()?;
    // Conditions are checked before the traces are read: a typo costs nothing.
    let conditions = (fail_if.iter())
        .map(|c| c.parse())
        .collect::<Result<Vec<gate::Condition>, _>>()?;
    if opts.format == Format::Junit && conditions.is_empty() {
        bail!("--format junit reports the verdicts of --fail-if conditions: give at least one");
    }
    if let Some((path, force)) = junit {
        atomic_output::refuse_existing::<OutputFailed>(path, force)?;
    }
    let sa = summarize(std::slice::from_ref(a), &opts, view.salvage)?;
    let sb = summarize(std::slice::from_ref(b), &opts, view.salvage)?;
    let mut out = std::io::stdout().lock();
    if opts.format != Format::Junit {
        trace_summary::diff(&sa, &sb, &opts, &mut out)?;
    }
    warn_salvaged_csv(opts.format, &[&sa, &sb]);
    if conditions.is_empty() {
        return Ok(());
    }
    let verdicts = gate::check(&sa, &sb, &opts, &conditions)?;
    let suite = format!("tracer diff {} {}", a.display(), b.display());
    let mut xml = Vec::new();
    gate::write_junit(&suite, &verdicts, &mut xml)?;
    let xml = junit_with_properties(xml, &salvage_notes(&[&sa, &sb]));
    if opts.format == Format::Junit {
        out.write_all(&xml)?;
    }
    if let Some((path, force)) = junit {
        atomic_output::write_file(path, force, |mut f, _| {
            f.write_all(&xml)
                .map_err(|e| OutputFailed::Io(path.to_owned(), e))
        })?;
    }
    let failed: Vec<&gate::Verdict> = verdicts.iter().filter(|v| v.fails()).collect();
    if failed.is_empty() {
        return Ok(());
    }
    drop(out);
    for v in &failed {
        eprintln!("tracer: {}", gate::failure_line(v));
    }
    Err(GateFailed.into())
}

/// A `--fail-if` condition held: its line is printed already, the exit status says it.
#[derive(Debug)]
struct GateFailed;

impl std::fmt::Display for GateFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the gate failed")
    }
}

impl std::error::Error for GateFailed {}

/// Writing an output of the CLI's own (`diff --junit`) failed, in `atomic_output`'s terms.
#[derive(Debug)]
enum OutputFailed {
    Exists(PathBuf),
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for OutputFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputFailed::Exists(p) => {
                write!(
                    f,
                    "{} already exists (use --force to overwrite)",
                    p.display()
                )
            }
            OutputFailed::Io(p, e) => write!(f, "writing {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for OutputFailed {}

impl atomic_output::OutputError for OutputFailed {
    fn exists(path: PathBuf) -> Self {
        OutputFailed::Exists(path)
    }

    fn io(path: PathBuf, source: std::io::Error) -> Self {
        OutputFailed::Io(path, source)
    }
}

/// The exit status of a failed gate (1 is an error, 2 a usage error).
const GATE_FAILED: u8 = 3;

/// The exit status of a command line clap refuses, as clap's own.
const USAGE_ERROR: u8 = 2;

/// Summarizes trace files, with windows when asked.
fn summarize(
    files: &[PathBuf],
    opts: &trace_summary::SummaryOptions,
    salvage: bool,
) -> Result<trace_summary::Summary> {
    let with = trace_summary::SummarizeOptions {
        window_ns: opts.window_ns.map(|w| w.max(1)),
        merge: trace_merge::MergeOptions {
            salvage,
            ..Default::default()
        },
        ..Default::default()
    };
    Ok(trace_summary::summarize_with(files, &with)?)
}

/// What a salvaging read (`--salvage`) of the summarized files skipped, a line per
/// damaged file, as the summary's notes say it.
fn salvage_notes(summaries: &[&trace_summary::Summary]) -> Vec<String> {
    let files = summaries.iter().flat_map(|s| &s.files);
    (files.filter(|f| !f.damaged.is_empty()))
        .map(|f| {
            let bytes: u64 = f.damaged.iter().map(|d| d.bytes).sum();
            format!(
                "{} is damaged and was salvaged: {} regions, {bytes} bytes skipped; what they held is missing from the figures",
                f.path,
                f.damaged.len()
            )
        })
        .collect()
}

/// A CSV output has no place to say it comes from a salvaged file (a comment line would
/// break its readers): stderr says it.
fn warn_salvaged_csv(format: trace_summary::Format, summaries: &[&trace_summary::Summary]) {
    if format == trace_summary::Format::Csv {
        for note in salvage_notes(summaries) {
            eprintln!("tracer: warning: the CSV comes from a salvaged file: {note}");
        }
    }
}

/// `xml`, the gate's JUnit document (`gate::write_junit`: one suite), with a `salvaged`
/// property on its suite per note, as the summary's JUnit has them.
fn junit_with_properties(xml: Vec<u8>, notes: &[String]) -> Vec<u8> {
    let text = String::from_utf8_lossy(&xml);
    let Some(at) = (text.find("\n  <testsuite "))
        .and_then(|s| text[s + 1..].find('\n').map(|e| s + 1 + e + 1))
    else {
        return xml;
    };
    if notes.is_empty() {
        return xml;
    }
    let mut props = String::from("    <properties>\n");
    for note in notes {
        let value: String = (note.chars())
            .map(|c| match c {
                '&' => "&amp;".into(),
                '<' => "&lt;".into(),
                '>' => "&gt;".into(),
                '"' => "&quot;".into(),
                c if (c as u32) < 0x20 => "\u{FFFD}".into(),
                c => c.to_string(),
            })
            .collect();
        props.push_str(&format!(
            "      <property name=\"salvaged\" value=\"{value}\"/>\n"
        ));
    }
    props.push_str("    </properties>\n");
    format!("{}{props}{}", &text[..at], &text[at..]).into_bytes()
}

/// Adds to an error that is damage in a trace file how to read past it.
fn salvage_hint(e: anyhow::Error) -> anyhow::Error {
    let damaged = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<trace_file::Error>(),
            Some(trace_file::Error::Corrupt { .. })
        )
    });
    match damaged {
        true => anyhow::anyhow!("{} (--salvage reads past damage)", one_line(&e)),
        false => e,
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
    fn junit_properties_go_on_the_suite_before_its_cases() {
        let xml = "<?xml version=\"1.0\"?>\n<testsuites>\n  <testsuite name=\"s\">\n    \
                   <testcase name=\"c\">\n    </testcase>\n  </testsuite>\n</testsuites>\n";
        let notes = ["a&b.trace is damaged".to_string()];
        let out = junit_with_properties(xml.into(), &notes);
        let out = String::from_utf8(out).unwrap();
        let want = "  <testsuite name=\"s\">\n    <properties>\n      <property \
                    name=\"salvaged\" value=\"a&amp;b.trace is damaged\"/>\n    \
                    </properties>\n    <testcase";
        assert!(out.contains(want), "{out}");
        assert_eq!(junit_with_properties(xml.into(), &[]), xml.as_bytes());
    }

    #[test]
    fn errors_are_one_line_without_repeats() {
        let inner = std::io::Error::other("bad magic");
        let e = anyhow::Error::new(inner).context("x.trace: bad magic");
        assert_eq!(one_line(&e), "x.trace: bad magic");
        let e = anyhow::anyhow!("line one\nline two").context("reading x");
        assert_eq!(one_line(&e), "reading x: line one; line two");
    }
}
