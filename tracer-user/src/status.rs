//! What a recording says while it runs (a status line on a terminal) and when it ends.

use std::{
    collections::BTreeMap,
    io::{IsTerminal, Write},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use trace_summary::units::human_bytes;

use crate::{drain::Drain, tree::Tree};

/// Totals of a finished recording.
pub struct RecordSummary {
    /// Records by kind.
    pub records: BTreeMap<&'static str, u64>,
    /// Events lost (see [`crate::kernel::Losses::total`]).
    pub lost: u64,
    /// Stacks not taken, the ring filling up (blocking stacks past a quarter of it, samples past half).
    pub stacks_shed: u64,
    /// Bytes of every file written.
    pub bytes: u64,
    pub seconds: f64,
    /// Why it stopped.
    pub reason: &'static str,
    /// The file written last.
    pub output: PathBuf,
    /// Files written (more than one with rotation).
    pub files: u64,
    /// Processes and threads traced at any time.
    pub processes: u64,
    pub threads: u64,
    /// Processes that got their probes after they had started, and processes for which it
    /// is not known whether they inherited them (see `attach`).
    pub late_probes: u64,
    pub uncertain_probes: u64,
    /// Processes whose probes were inherited from a process that had inherited them (see
    /// `attach`).
    pub second_hand_probes: u64,
    /// Processes whose exec removed their probes, attached again (see `attach`).
    pub exec_dropped_probes: u64,
    /// Probes not attached to a process that exited while they were being attached.
    pub exited_while_attaching: u64,
    /// With `--stacks`: stacks whose user frames were cut short, by reason.
    pub stacks_cut: BTreeMap<String, u64>,
    /// Counting mode: timed Go calls that had not returned at the end.
    pub frames_unclosed: u64,
    /// Records made after the end, while the probes were being detached (left out).
    pub after_end: u64,
    /// Counting mode: windows of counts written (records are then only the losses).
    pub windows: Option<u64>,
    /// The launched command's exit status, when it ended the recording by exiting.
    pub command_status: Option<u8>,
}

/// The status line of a recording: once a second, on a terminal only.
pub struct Status {
    on: bool,
    last: Instant,
    last_total: u64,
    /// Events lost so far.
    pub lost: u64,
    /// Stacks not taken so far, the ring being over half full.
    pub stacks_shed: u64,
}

impl Status {
    /// A status line, unless `quiet` or stderr is not a terminal.
    pub fn new(quiet: bool) -> Status {
        Status {
            on: !quiet && std::io::stderr().is_terminal(),
            last: Instant::now(),
            last_total: 0,
            lost: 0,
            stacks_shed: 0,
        }
    }

    /// Redraws the line if a second has passed.
    pub fn tick(&mut self, elapsed: Duration, d: &Drain, tree: &Tree) {
        if !self.on || self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last = Instant::now();
        let rate = d.total - self.last_total;
        self.last_total = d.total;
        eprint!(
            "\r\x1b[Krecording {:>6.1}s  {:>9} events/s  {:>10} written  {} lost  {} processes, {} threads",
            elapsed.as_secs_f64(),
            rate,
            human_bytes(d.w.bytes_written()),
            self.lost,
            tree.live().len(),
            tree.threads
        );
    }

    /// Erases the line.
    pub fn clear(&self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}

/// Writes the end-of-recording report.
pub fn print_summary(s: &RecordSummary) -> Result<()> {
    let total: u64 = s.records.values().sum();
    let mut out = std::io::stderr().lock();
    let to = match s.files {
        1 => s.output.display().to_string(),
        n => format!("{n} files, the last {}", s.output.display()),
    };
    let what = match s.windows {
        Some(1) => "counted 1 window".to_string(),
        Some(n) => format!("counted {n} windows"),
        None => format!("recorded {total} events"),
    };
    writeln!(
        out,
        "{what} of {} processes and {} threads in {:.1}s ({}) to {to}, stopped by {}",
        s.processes,
        s.threads,
        s.seconds,
        human_bytes(s.bytes),
        s.reason
    )
    .context("writing the summary")?;
    if let Some(code) = s.command_status.filter(|&c| c != 0) {
        writeln!(
            out,
            "  the command exited with status {code}, which the tracer exits with"
        )?;
    }
    if s.late_probes > 0 {
        writeln!(
            out,
            "  {} processes created while the probes were attached got them late: their first calls may be missing",
            s.late_probes
        )?;
    }
    if !s.stacks_cut.is_empty() {
        let why: Vec<String> = (s.stacks_cut.iter())
            .map(|(category, n)| {
                let meaning = trace_file::meta::cut_meaning(category);
                format!("{n} {meaning} ({category})")
            })
            .collect();
        writeln!(out, "  stacks cut short: {}", why.join(", "))?;
    }
    if s.stacks_shed > 0 {
        writeln!(
            out,
            "  {} stacks not taken: the ring buffer was filling up (blocking stacks yield past a quarter of it, on-CPU samples past half) and stacks yield to the events (whose records are all there); their time off the CPU is under no stack",
            s.stacks_shed
        )?;
    }
    if s.after_end > 0 {
        writeln!(
            out,
            "  {} records made while the probes were being detached, after the end, left out",
            s.after_end
        )?;
    }
    if s.frames_unclosed > 0 {
        writeln!(
            out,
            "  {} timed calls paired by frame (Go's, and those of programs that throw or switch stacks) had not returned at the end (under way then, or ended by a panic, runtime.Goexit or an exception): not in the times",
            s.frames_unclosed
        )?;
    }
    if s.uncertain_probes > 0 {
        writeln!(
            out,
            "  {} processes were created while their parent's probes were attached: their calls may be missing or doubled",
            s.uncertain_probes
        )?;
    }
    if s.second_hand_probes > 0 {
        writeln!(
            out,
            "  {} processes inherited their probes from a process that had inherited them: the kernel may drop the breakpoints of both, at their exit (seen on Linux 6.18, perf record -p too): calls in library functions of those processes and of their parents after that may be missing",
            s.second_hand_probes
        )?;
    }
    if s.exited_while_attaching > 0 {
        writeln!(
            out,
            "  {} probes were not attached to processes that exited meanwhile (found at attach, gone before their probes)",
            s.exited_while_attaching
        )?;
    }
    if s.exec_dropped_probes > 0 {
        writeln!(
            out,
            "  {} processes lost their probes at an exec that raised their privileges (the kernel removes their perf events then): attached again, their first calls may be missing",
            s.exec_dropped_probes
        )?;
    }
    for (k, v) in &s.records {
        writeln!(out, "  {k:<12} {v:>12}")?;
    }
    if s.lost > 0 {
        writeln!(
            out,
            "  LOST {} events: ring buffers full, program runs the kernel skipped, or records that did not decode (`tracer dump` shows which)",
            s.lost
        )?;
    } else {
        writeln!(out, "  lost         {:>12}", 0)?;
    }
    Ok(())
}
