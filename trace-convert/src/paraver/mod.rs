//! The Paraver writer (NAME.prv, NAME.pcf, NAME.row).
//!
//! The writer is a thin consumer of the [`Timeline`] items. Paraver wants the body sorted
//! by time (on equal times: communications, events, states), but an interval is only
//! known when it ends and a link when its receiver acts. So records wait in a buffer that
//! is sorted and written up to a *watermark*: the earliest time anything still to come
//! can start at, i.e. the current time, the oldest open state interval and the oldest
//! pending link. Long open states are cut into pieces ([`Timeline::cut`]) so that a
//! thread asleep for minutes does not hold everything back; links pending for longer than
//! a horizon stop holding the watermark and, when they resolve, join the few other
//! records that come too late for the body (the states before a thread's first
//! appearance), which are merged in at the end, with the header (see `MIN_ROOM`).
//!
//! Numbering (see `docs/paraver.md`): one node per host, one application per process
//! (task 1), one thread per kernel thread in order of appearance; CPUs are numbered
//! globally from 1 across hosts.

mod body;
mod callers;
mod late;
mod layout;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use trace_merge::report::require_events;
use trace_merge::timeline::{Item, ThreadState, Timeline};

use crate::error::{Error, Result};
use crate::Pending;
use crate::{InputReport, Options};

use body::{BodyWriter, Out};
use late::{assemble_prv, room_for};
use layout::{write_pcf, Layout};

/// Event type of user functions (value = function id on entry, 0 on exit), as Extrae.
pub const EV_FUNCTION: u32 = 60_000_019;
/// Event type of system calls (value = number + 1 on entry, 0 on exit), as Extrae.
pub const EV_SYSCALL: u32 = 40_000_000;
/// Bytes a read-like call returned (at its exit).
pub const EV_BYTES_READ: u32 = 40_000_001;
/// Bytes a write-like call returned (at its exit).
pub const EV_BYTES_WRITTEN: u32 = 40_000_002;
/// The fd a call operates on, plus 1 (0 = end, at the exit), so fd 0 stays visible.
pub const EV_FD: u32 = 40_000_003;
/// Socket operation ([`SockOp`] value on entry, 0 on exit).
pub const EV_SOCKET_OP: u32 = 40_000_004;
/// Connection id of the socket operated on (on entry, 0 on exit).
pub const EV_CONNECTION: u32 = 40_000_005;
/// Connection id given by an accept (at its exit).
pub const EV_ACCEPTED: u32 = 40_000_006;
/// A USDT probe fired (value = its id, labelled like functions' in the .pcf).
pub const EV_USDT: u32 = 60_000_100;
/// Its arguments: this type for the first, the next ones for the others.
pub const EV_USDT_ARG: u32 = 60_000_101;
pub use callers::{CALLER_LEVELS, EV_CALLER, EV_CALLER_LINE};
/// CPU (global, from 1) a thread starts running on.
pub const EV_CPU: u32 = 40_000_033;

/// Paraver state number of a thread state: Extrae's numbers where the meaning is the
/// same, new ones (40, 41) otherwise.
pub fn state_value(s: ThreadState) -> u32 {
    match s {
        ThreadState::Running => 1,
        ThreadState::NotCreated => 2,
        ThreadState::Blocked => 9,
        ThreadState::Io => 12,
        ThreadState::Unknown => 14,
        ThreadState::Ready => 40,
        ThreadState::Exited => 41,
    }
}

/// Label and colour of a state in the .pcf.
pub fn state_look(s: ThreadState) -> (&'static str, (u8, u8, u8)) {
    match s {
        ThreadState::Running => ("Running", (0, 0, 255)),
        ThreadState::NotCreated => ("Not created", (255, 255, 255)),
        ThreadState::Blocked => ("Blocked (interruptible sleep)", (0, 162, 0)),
        ThreadState::Io => ("I/O (uninterruptible wait)", (172, 174, 41)),
        ThreadState::Unknown => ("Not traced yet", (192, 192, 192)),
        ThreadState::Ready => ("Ready (runnable, waiting for a CPU)", (255, 160, 0)),
        ThreadState::Exited => ("Exited", (64, 64, 64)),
    }
}

/// Tuning of the Paraver writer; [`Tuning::default`] suits any trace.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Sort and write the buffered records when this many are waiting.
    pub flush_every: usize,
    /// At a flush, states open for longer than this (ns) are cut into pieces.
    pub cut_age_ns: u64,
    /// Links pending for longer than this (ns) stop holding records back.
    pub link_horizon_ns: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            flush_every: 1 << 16,
            cut_age_ns: 1_000_000,
            link_horizon_ns: 10_000_000,
        }
    }
}

/// What a conversion read and wrote.
#[derive(Clone, Debug, Default)]
pub struct ConvertReport {
    /// What was read.
    pub input: InputReport,
    /// `1:` lines written.
    pub states: u64,
    /// `2:` lines written (events of one thread at one time share a line).
    pub events: u64,
    /// `3:` lines written.
    pub comms: u64,
    /// Thread slots of the trace.
    pub threads: u64,
    /// Applications of the trace (one per process).
    pub processes: u64,
    /// Trace duration, ns.
    pub duration_ns: u64,
    /// Records written after later ones had been (states before a thread's first
    /// appearance, links resolved past the horizon): merged into place at the end.
    pub late_records: u64,
    /// The output files: .prv, .pcf, .row.
    pub outputs: [PathBuf; 3],
}

impl std::fmt::Display for ConvertReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.input)?;
        writeln!(
            f,
            "written: {} states, {} event lines, {} communications",
            self.states, self.events, self.comms
        )?;
        writeln!(
            f,
            "threads: {} in {} processes, duration {} ns",
            self.threads, self.processes, self.duration_ns
        )?;
        writeln!(
            f,
            "records known only after the body was written (a thread's states before its first appearance, links resolved late), merged in: {}",
            self.late_records
        )?;
        write!(f, "output: {}", self.outputs[0].display())
    }
}

/// Converts trace files into one Paraver trace `STEM.prv`, `STEM.pcf`, `STEM.row`.
///
/// Outputs are written to temporary files next to them and renamed at the end, so a
/// failed conversion leaves no partial trace. Existing outputs are an error unless
/// [`Options::force`]; a window is not supported (Paraver's own views zoom).
pub fn convert(inputs: &[PathBuf], stem: &Path, opts: &Options) -> Result<ConvertReport> {
    convert_tuned(inputs, stem, opts, &Tuning::default())
}

/// [`convert`] with explicit tuning of the writer.
pub fn convert_tuned(
    inputs: &[PathBuf],
    stem: &Path,
    opts: &Options,
    tuning: &Tuning,
) -> Result<ConvertReport> {
    let outputs = ["prv", "pcf", "row"].map(|ext| with_ext(stem, ext));
    for p in &outputs {
        atomic_output::refuse_existing::<Error>(p, opts.force)?;
    }
    let tl = trace_merge::open(inputs, &opts.merge)?;
    let body = Pending::new(&outputs[0], opts.force)?;
    let input_bytes = (inputs.iter())
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let room = room_for(input_bytes);
    let file = body
        .file()
        .try_clone()
        .map_err(|e| Error::io(body.path(), e))?;
    let mut w = BodyWriter::new(file, &tl, tuning, room);
    let path = body.path();
    let mut feed = Feed {
        w: &mut w,
        tuning,
        path,
    };
    let (tl, _) = trace_merge::feed(tl, u64::MAX, &mut feed)?;
    let io_err = |e| Error::io(body.path(), e);
    w.flush_before(u64::MAX).map_err(io_err)?;
    let mut counts = w.finish().map_err(io_err)?;
    let end = tl.end().unwrap_or(0);
    require_events(&tl)?;
    // Paraver rejects a body without records: say why instead of writing one.
    if tl.threads().is_empty() || end == 0 {
        let what = if tl.threads().is_empty() {
            "no traced thread: nothing to convert"
        } else {
            "the trace has no duration (no event records and no end time)"
        };
        return Err(Error::invalid(&inputs[0], what));
    }
    let layout = Layout::new(&tl, &w.slots)?;

    // .prv: the header (known only now: thread counts) then the body, with the late
    // records merged in.
    let mut late = std::mem::take(&mut w.late);
    let late_records = late.len() as u64;
    late.sort_by_key(Out::key);
    let mut header = layout.header(&tl, end);
    header.push_str(&damage_comments(&tl));
    let (prv, late_counts) = assemble_prv(&header, room, body, &late, &w.slots)?;
    for (c, l) in counts.iter_mut().zip(late_counts) {
        *c += l;
    }
    let pcf = write_file(&outputs[1], opts.force, |f| {
        write_pcf(f, &tl)?;
        w.callers.write_pcf(f)
    })?;
    let row = write_file(&outputs[2], opts.force, |f| layout.write_row(f, &tl))?;
    for out in [prv, pcf, row] {
        out.commit()?;
    }

    Ok(ConvertReport {
        input: InputReport::of(&tl),
        states: counts[2],
        events: counts[1],
        comms: counts[0],
        threads: tl.threads().len() as u64,
        processes: layout.appls.len() as u64,
        duration_ns: end,
        late_records,
        outputs,
    })
}

/// Comment lines for the .prv header naming the regions a salvaging read stepped over
/// (at most [`DAMAGE_LINES`], then how many more): what they held is not in the trace.
fn damage_comments(tl: &Timeline) -> String {
    const DAMAGE_LINES: usize = 20;
    let damage: Vec<_> = (tl.merger().sources().iter())
        .flat_map(|s| s.damage.iter().map(move |d| (&s.path, d)))
        .collect();
    let mut out = String::new();
    for (path, d) in damage.iter().take(DAMAGE_LINES) {
        let line = format!("# salvaged: {}: {d}", path.display());
        // A comment line holds no newline; the path is the user's.
        out.push_str(&line.replace(['\n', '\r'], " "));
        out.push('\n');
    }
    if damage.len() > DAMAGE_LINES {
        let more = damage.len() - DAMAGE_LINES;
        out.push_str(&format!("# salvaged: {more} more damaged regions\n"));
    }
    out
}

/// The writer as a consumer: every item goes to the body, and between records, once
/// enough are waiting, what is final is written.
struct Feed<'a> {
    w: &'a mut BodyWriter,
    tuning: &'a Tuning,
    /// The body's file, for error messages.
    path: &'a Path,
}

impl trace_merge::Consumer for Feed<'_> {
    type Error = Error;
    const SETTLES: bool = true;

    #[inline]
    fn item(&mut self, tl: &Timeline, item: Item) -> Result<()> {
        self.w.item(tl, item)
    }

    #[inline]
    fn settle(&mut self, tl: &mut Timeline) -> Result<()> {
        let (w, tuning) = (&mut *self.w, self.tuning);
        // Count only what came since the last flush: records held back by the watermark
        // must not make every following item trigger a flush.
        if w.pending() < w.held + tuning.flush_every {
            return Ok(());
        }
        let now = tl.now();
        for piece in tl.cut(now, now.saturating_sub(tuning.cut_age_ns)) {
            w.item(tl, Item::State(piece))?;
        }
        let horizon = now.saturating_sub(tuning.link_horizon_ns);
        let mark = now
            .min(tl.min_open_since())
            .min(tl.oldest_pending_link(horizon).unwrap_or(u64::MAX));
        w.flush_before(mark).map_err(|e| Error::io(self.path, e))?;
        w.held = w.pending();
        Ok(())
    }
}

fn with_ext(p: &Path, ext: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Writes `output` through a buffer, returning it uncommitted.
fn write_file(
    output: &Path,
    force: bool,
    f: impl FnOnce(&mut BufWriter<&File>) -> std::io::Result<()>,
) -> Result<Pending> {
    let pending = Pending::new(output, force)?;
    let mut out = BufWriter::new(pending.file());
    let io = |e| Error::io(output, e);
    f(&mut out).map_err(io)?;
    out.flush().map_err(io)?;
    drop(out);
    Ok(pending)
}

fn func_bases(tl: &Timeline) -> Vec<u32> {
    let mut base = 0u32;
    let mut out = Vec::new();
    for s in tl.merger().sources() {
        out.push(base);
        let max = s.probes.iter().map(|p| p.id).max().unwrap_or(0);
        base = base.saturating_add(max);
    }
    out
}
