//! What a conversion found in its inputs, whatever the output format.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::merge::Damage;
use crate::timeline::Timeline;

/// What part of the trace a converter writes.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Start, ns since the start of the earliest input.
    pub from_ns: u64,
    /// End (exclusive); reading stops there.
    pub until_ns: u64,
}

impl Default for Window {
    fn default() -> Self {
        Window {
            from_ns: 0,
            until_ns: u64::MAX,
        }
    }
}

/// What a converter must have read to write anything: events (see [`require_events`]),
/// a traced thread, and, for a window from `from_ns`, some of the trace (which ends at
/// `end`) after it.
pub fn require_content(tl: &Timeline, path: &Path, from_ns: u64, end: u64) -> Result<()> {
    require_events(tl)?;
    let what = if tl.threads().is_empty() {
        "no traced thread: nothing to convert".to_string()
    } else if end <= from_ns {
        format!(
            "the window starts at {:.3} s, after the trace's end ({:.3} s)",
            from_ns as f64 / 1e9,
            end as f64 / 1e9
        )
    } else {
        return Ok(());
    };
    Err(Error::Invalid {
        path: path.to_owned(),
        what,
    })
}

/// A counting-mode file (`tracer stat`) holds windows of counts, and events only for the
/// calls it sampled: without those there is nothing to draw, which is said rather than
/// written as an empty trace.
pub fn require_events(tl: &Timeline) -> Result<()> {
    let sources = tl.merger().sources();
    match sources.iter().find(|s| s.header.mode == "stat") {
        Some(s) if tl.merger().stats().records == 0 => Err(Error::Invalid {
            path: s.path.clone(),
            what: "a counting-mode file (tracer stat) without sampled calls: no events to \
                   convert (read it with tracer summary)"
                .into(),
        }),
        _ => Ok(()),
    }
}

/// The inputs' side of a conversion: how much was read, and how much of it was damaged or
/// missing, so a writer never hides a loss.
#[derive(Clone, Debug, Default)]
pub struct InputReport {
    /// Records read from the inputs.
    pub records_in: u64,
    /// Records that came later than the reorder window allowed (kept, re-timed).
    pub out_of_order: u64,
    /// The largest such lateness, ns.
    pub max_lateness_ns: u64,
    /// Records the kernel could not store, summed over inputs.
    pub lost_by_kernel: u64,
    /// Threads the kernel filter had no room for, summed over inputs.
    pub threads_not_traced: u64,
    /// Stacks not taken, the ring filling up (blocking stacks past a quarter of it, samples past half), summed over inputs: their
    /// events are there, and time off the CPU they would have explained is under no
    /// stack.
    pub stacks_shed: u64,
    /// Inputs that end inside a chunk, with the byte offset of the torn chunk.
    pub truncated: Vec<(PathBuf, u64)>,
    /// Damaged regions a salvaging read stepped over, per input.
    pub damage: Vec<(PathBuf, Damage)>,
    /// Inputs without a trailer (recorder did not stop cleanly).
    pub without_trailer: Vec<PathBuf>,
    /// Function exits without a matching entry (ignored).
    pub orphan_func_exits: u64,
    /// Wakeups whose wakee never ran (no link drawn).
    pub unresolved_wakeups: u64,
    /// Runs whose switch-in the kernel did not report (each starts at the thread's first
    /// own record).
    pub unseen_switch_ins: u64,
}

impl InputReport {
    /// The counts of a timeline whose stream has ended.
    pub fn of(tl: &Timeline) -> InputReport {
        let m = tl.merger();
        let ms = m.stats();
        let ts = tl.stats();
        InputReport {
            records_in: ms.records,
            out_of_order: ms.late,
            max_lateness_ns: ms.max_lateness_ns,
            lost_by_kernel: sum(m.sources().iter().map(|s| s.lost())),
            threads_not_traced: sum(m.sources().iter().map(|s| s.threads_not_traced)),
            stacks_shed: sum(m.sources().iter().map(|s| s.stacks_shed)),
            truncated: (m.sources().iter())
                .filter_map(|s| s.truncated_at.map(|o| (s.path.clone(), o)))
                .collect(),
            damage: (m.sources().iter())
                .flat_map(|s| s.damage.iter().map(|d| (s.path.clone(), d.clone())))
                .collect(),
            without_trailer: (m.sources().iter())
                .filter(|s| s.trailer.is_none())
                .map(|s| s.path.clone())
                .collect(),
            orphan_func_exits: ts.orphan_func_exits,
            unresolved_wakeups: ts.unresolved_wakeups,
            unseen_switch_ins: ts.unseen_switch_ins,
        }
    }
}

/// Counts of several files: damaged ones saturate rather than overflow.
fn sum(counts: impl Iterator<Item = u64>) -> u64 {
    counts.fold(0, u64::saturating_add)
}

impl std::fmt::Display for InputReport {
    /// Lines ending with a newline.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "records in: {}", self.records_in)?;
        writeln!(
            f,
            "out of order: {} (max {} ns late), lost by kernel: {}, threads not traced: {}",
            self.out_of_order, self.max_lateness_ns, self.lost_by_kernel, self.threads_not_traced
        )?;
        if self.stacks_shed > 0 {
            writeln!(
                f,
                "stacks not taken (ring buffer filling up; the events are there): {}",
                self.stacks_shed
            )?;
        }
        if self.unseen_switch_ins > 0 {
            writeln!(
                f,
                "switch-ins the kernel did not report (those runs start at the thread's first own record): {}",
                self.unseen_switch_ins
            )?;
        }
        for (p, at) in &self.truncated {
            writeln!(f, "truncated: {} at byte {at}", p.display())?;
        }
        for (p, d) in &self.damage {
            writeln!(f, "damaged, skipped (--salvage): {}: {d}", p.display())?;
        }
        for p in &self.without_trailer {
            writeln!(
                f,
                "no trailer (recording did not stop cleanly): {}",
                p.display()
            )?;
        }
        Ok(())
    }
}
