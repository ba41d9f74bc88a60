//! The Paraver writer (NAME.prv, NAME.pcf, NAME.row) and its conformance checker.
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

mod check;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub use check::{check, check_tiling, CheckReport, Violation, Violations};

use crate::error::{Error, Result};
use crate::fmt::{push_i64, push_u64, Line, Sink};
use crate::merge::{MergeOptions, Merger};
use crate::report::{require_events, InputReport};
use crate::sysclass::SockOp;
use crate::timeline::{Item, LinkKind, SpanEnd, ThreadRef, ThreadState, Timeline};

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

/// Tuning of a conversion; [`ConvertOptions::default`] suits any trace.
#[derive(Clone, Debug)]
pub struct ConvertOptions {
    pub merge: MergeOptions,
    /// Sort and write the buffered records when this many are waiting.
    pub flush_every: usize,
    /// At a flush, states open for longer than this (ns) are cut into pieces.
    pub cut_age_ns: u64,
    /// Links pending for longer than this (ns) stop holding records back.
    pub link_horizon_ns: u64,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            merge: MergeOptions::default(),
            flush_every: 1 << 16,
            cut_age_ns: 1_000_000,
            link_horizon_ns: 10_000_000,
        }
    }
}

/// What a conversion read and wrote.
#[derive(Clone, Debug, Default)]
pub struct ConvertReport {
    pub input: InputReport,
    /// `1:` lines written.
    pub states: u64,
    /// `2:` lines written (events of one thread at one time share a line).
    pub events: u64,
    /// `3:` lines written.
    pub comms: u64,
    pub threads: u64,
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
            "records placed after the body was written: {}",
            self.late_records
        )?;
        write!(f, "output: {}", self.outputs[0].display())
    }
}

/// Converts trace files into one Paraver trace `STEM.prv`, `STEM.pcf`, `STEM.row`.
///
/// Outputs are written to temporary files next to them and renamed at the end, so a
/// failed conversion leaves no partial trace. Existing outputs are an error unless
/// `force`.
pub fn convert_paraver(inputs: &[PathBuf], stem: &Path, force: bool) -> Result<ConvertReport> {
    convert_paraver_with(inputs, stem, force, &ConvertOptions::default())
}

/// [`convert_paraver`] with explicit tuning.
pub fn convert_paraver_with(
    inputs: &[PathBuf],
    stem: &Path,
    force: bool,
    opts: &ConvertOptions,
) -> Result<ConvertReport> {
    let outputs = ["prv", "pcf", "row"].map(|ext| with_ext(stem, ext));
    if !force {
        if let Some(p) = outputs.iter().find(|p| p.exists()) {
            return Err(Error::Exists { path: p.clone() });
        }
    }
    let temps = outputs.clone().map(|p| with_ext(&p, "tmp"));
    let body_path = with_ext(&outputs[0], "body.tmp");
    let result = convert_inner(inputs, &outputs, &temps, &body_path, opts);
    let _ = std::fs::remove_file(&body_path);
    if result.is_err() {
        for t in &temps {
            let _ = std::fs::remove_file(t);
        }
    }
    result
}

fn with_ext(p: &Path, ext: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

fn convert_inner(
    inputs: &[PathBuf],
    outputs: &[PathBuf; 3],
    temps: &[PathBuf; 3],
    body_path: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertReport> {
    let merger = Merger::open(inputs, opts.merge.clone())?;
    let mut tl = Timeline::new(merger);
    let body = File::create(body_path).map_err(|e| Error::io(body_path, e))?;
    let input_bytes = (inputs.iter())
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let room = room_for(input_bytes);
    let mut w = BodyWriter::new(body, &tl, opts, room);
    let io_err = |e| Error::io(body_path, e);
    while let Some(item) = tl.next_item()? {
        w.item(&tl, item)?;
        // Count only what came since the last flush: records held back by the watermark
        // must not make every following item trigger a flush.
        if w.pending() >= w.held + opts.flush_every && !tl.has_queued() {
            let now = tl.now();
            for piece in tl.cut(now, now.saturating_sub(opts.cut_age_ns)) {
                w.item(&tl, Item::State(piece))?;
            }
            let horizon = now.saturating_sub(opts.link_horizon_ns);
            let mark = now
                .min(tl.min_open_since())
                .min(tl.oldest_pending_link(horizon).unwrap_or(u64::MAX));
            w.flush_before(mark).map_err(io_err)?;
            w.held = w.pending();
        }
    }
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
        return Err(Error::Invalid {
            path: inputs[0].clone(),
            what: what.into(),
        });
    }
    let layout = Layout::new(&tl, &w.slots)?;

    // .prv: the header (known only now: thread counts) then the body, with the late
    // records merged in.
    let mut late = std::mem::take(&mut w.late);
    let late_records = late.len() as u64;
    late.sort_by_key(Out::key);
    let header = layout.header(&tl, end);
    let late_counts = assemble_prv(&header, room, body_path, &late, &w.slots, &temps[0])?;
    for (c, l) in counts.iter_mut().zip(late_counts) {
        *c += l;
    }
    write_file(&temps[1], |f| write_pcf(f, &tl))?;
    write_file(&temps[2], |f| layout.write_row(f, &tl))?;
    for (t, o) in temps.iter().zip(outputs) {
        std::fs::rename(t, o).map_err(|e| Error::io(o, e))?;
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
        outputs: outputs.clone(),
    })
}

fn write_file(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<()> {
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let mut out = BufWriter::new(file);
    f(&mut out).map_err(|e| Error::io(path, e))?;
    out.flush().map_err(|e| Error::io(path, e))
}

#[derive(Clone, Copy, Debug)]
enum OutKind {
    State {
        end: u64,
        state: u32,
        cpu: u32,
    },
    Event {
        ty: u32,
        value: i64,
        cpu: u32,
    },
    Comm {
        cpu: u32,
        to: ThreadRef,
        rcpu: u32,
        recv: u64,
        size: i64,
        tag: i64,
    },
}

/// One body record waiting to be written.
#[derive(Clone, Copy, Debug)]
struct Out {
    time: u64,
    /// Paraver's tie order: communications, events, states.
    rank: u8,
    thread: ThreadRef,
    kind: OutKind,
}

impl Out {
    /// Sort key: time, then Paraver's tie rank, then thread. Records equal in all three
    /// keep their arrival order (the sorts are stable), so output is deterministic.
    fn key(&self) -> u128 {
        (self.time as u128) << 64 | (self.rank as u128) << 32 | self.thread as u128
    }
}

/// Sorts records on the converting thread and hands ordered batches to a formatting
/// thread: formatting numbers is half the work of a conversion, and runs in parallel
/// with merging and the state machine.
struct BodyWriter {
    /// Events waiting to be written.
    ev: Vec<Out>,
    /// States and communications waiting to be written.
    other: Vec<Out>,
    /// Records older than what was already written: merged in at the end.
    late: Vec<Out>,
    /// Everything before this time has been written.
    written_before: u64,
    /// Paraver (application, thread) of each thread, 1-based.
    slots: Vec<(u32, u32)>,
    /// Records left in the buffers by the last flush.
    held: usize,
    /// How many of `slots` the formatter knows.
    slots_sent: usize,
    /// Application of each process, 1-based, 0 = none yet.
    appl_of_process: Vec<u32>,
    appl_threads: Vec<u32>,
    /// Per source: added to its function ids so several probe tables do not collide.
    func_base: Vec<u32>,
    to_formatter: Option<std::sync::mpsc::SyncSender<Batch>>,
    /// Batches the formatter is done with, for reuse of their allocations.
    returned: std::sync::mpsc::Receiver<Batch>,
    formatter: Option<std::thread::JoinHandle<std::io::Result<[u64; 3]>>>,
}

/// Records ready to be written: everything in them is before everything after them.
#[derive(Default)]
struct Batch {
    /// Sorted by time.
    ev: Vec<Out>,
    /// States and communications, in any order.
    other: Vec<Out>,
    /// Slots of threads that appeared since the previous batch.
    new_slots: Vec<(u32, u32)>,
}

impl BodyWriter {
    fn new(out: File, tl: &Timeline, opts: &ConvertOptions, room: usize) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(2);
        let (back_tx, back_rx) = std::sync::mpsc::channel::<Batch>();
        let formatter = std::thread::spawn(move || {
            let mut f = Formatter {
                out,
                buf: header_room(&[], room),
                line: Box::new(Line::new()),
                slots: Vec::new(),
                counts: [0; 3],
            };
            for mut b in rx {
                f.batch(&mut b)?;
                // The converter may be gone after an error of its own: nothing to do.
                let _ = back_tx.send(b);
            }
            f.out.write_all(&f.buf)?;
            f.out.flush()?;
            Ok(f.counts)
        });
        BodyWriter {
            ev: Vec::with_capacity(opts.flush_every.min(1 << 20) + 1024),
            other: Vec::new(),
            late: Vec::new(),
            written_before: 0,
            slots: Vec::new(),
            slots_sent: 0,
            held: 0,
            appl_of_process: Vec::new(),
            appl_threads: Vec::new(),
            func_base: func_bases(tl),
            to_formatter: Some(tx),
            returned: back_rx,
            formatter: Some(formatter),
        }
    }

    /// Waits for the formatter: the body is then complete on disk. Returns the lines
    /// written: communications, events, states.
    fn finish(&mut self) -> std::io::Result<[u64; 3]> {
        self.to_formatter = None;
        match self.formatter.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the formatting thread panicked")),
            None => Ok([0; 3]),
        }
    }

    fn push(&mut self, time: u64, rank: u8, thread: ThreadRef, kind: OutKind) {
        let o = Out {
            time,
            rank,
            thread,
            kind,
        };
        if time < self.written_before {
            self.late.push(o);
        } else if rank == 1 {
            self.ev.push(o);
        } else {
            self.other.push(o);
        }
    }

    /// Queues one type/value pair; `cpu` is the global 0-based CPU, `None` when the
    /// thread is not on one.
    fn event(&mut self, thread: ThreadRef, time: u64, cpu: Option<u32>, ty: u32, value: i64) {
        let kind = OutKind::Event {
            ty,
            value,
            cpu: cpu.map_or(0, |c| c + 1),
        };
        self.push(time, 1, thread, kind);
    }

    /// Inlined into the conversion loop: called once per item, the call and the copy
    /// of the item into it were a fifth of this function's cost.
    #[inline(always)]
    fn item(&mut self, tl: &Timeline, item: Item) -> Result<()> {
        match item {
            Item::Thread(r) => {
                let p = tl.thread(r).process as usize;
                if self.appl_of_process.len() <= p {
                    self.appl_of_process.resize(p + 1, 0);
                }
                if self.appl_of_process[p] == 0 {
                    self.appl_threads.push(0);
                    self.appl_of_process[p] = self.appl_threads.len() as u32;
                }
                let a = self.appl_of_process[p];
                let n = &mut self.appl_threads[a as usize - 1];
                *n += 1;
                if *n > u16::MAX as u32 {
                    return Err(Error::Limit(
                        "more than 65535 threads in one process: Paraver cannot index them".into(),
                    ));
                }
                debug_assert_eq!(self.slots.len(), r as usize);
                self.slots.push((a, *n));
            }
            Item::State(s) => {
                let kind = OutKind::State {
                    end: s.end,
                    state: state_value(s.state),
                    cpu: s.cpu.map_or(0, |c| c + 1),
                };
                self.push(s.begin, 2, s.thread, kind);
            }
            Item::OnCpu { thread, time, cpu } => {
                self.event(thread, time, Some(cpu), EV_CPU, cpu as i64 + 1)
            }
            Item::FuncEntry {
                thread,
                time,
                cpu,
                func,
            } => {
                let base = self.func_base[tl.thread(thread).source as usize];
                self.event(
                    thread,
                    time,
                    Some(cpu),
                    EV_FUNCTION,
                    base as i64 + func as i64,
                );
            }
            Item::Func(s) => {
                // A function the trace ends inside just goes on to the end.
                if s.end_kind != SpanEnd::TraceEnded {
                    self.event(s.thread, s.end, s.cpu, EV_FUNCTION, 0);
                }
            }
            Item::SyscallEntry(e) => {
                let (th, t, c) = (e.thread, e.time, Some(e.cpu));
                self.event(th, t, c, EV_SYSCALL, e.nr as i64 + 1);
                if let Some(fd) = e.fd.filter(|&fd| fd >= 0) {
                    self.event(th, t, c, EV_FD, fd as i64 + 1);
                }
                if let Some(op) = e.sock_op {
                    self.event(th, t, c, EV_SOCKET_OP, op as i64);
                }
                if let Some(conn) = e.conn {
                    self.event(th, t, c, EV_CONNECTION, conn as i64);
                }
            }
            Item::Syscall(s) => {
                if s.end_kind == SpanEnd::TraceEnded {
                    return Ok(());
                }
                let (th, t, c) = (s.thread, s.end, s.cpu);
                self.event(th, t, c, EV_SYSCALL, 0);
                if s.entered {
                    if s.fd.is_some_and(|fd| fd >= 0) {
                        self.event(th, t, c, EV_FD, 0);
                    }
                    if s.sock_op.is_some() {
                        self.event(th, t, c, EV_SOCKET_OP, 0);
                    }
                    if s.conn.is_some() {
                        self.event(th, t, c, EV_CONNECTION, 0);
                    }
                }
                if s.bytes_read > 0 {
                    self.event(th, t, c, EV_BYTES_READ, s.bytes_read as i64);
                }
                if s.bytes_written > 0 {
                    self.event(th, t, c, EV_BYTES_WRITTEN, s.bytes_written as i64);
                }
                if let Some(conn) = s.new_conn {
                    self.event(th, t, c, EV_ACCEPTED, conn as i64);
                }
            }
            Item::Link(l) => {
                let (size, tag) = match l.kind {
                    LinkKind::Wakeup => (0, 0),
                    LinkKind::Handoff { conn } => (l.bytes as i64, conn as i64),
                };
                let kind = OutKind::Comm {
                    cpu: l.send_cpu + 1,
                    to: l.to,
                    rcpu: l.recv_cpu + 1,
                    recv: l.recv,
                    size,
                    tag,
                };
                self.push(l.send, 0, l.from, kind);
            }
        }
        Ok(())
    }

    /// Sends every record before `mark` to the formatter. Sorting the states and links
    /// is left to the formatter, to balance the work of the two threads.
    fn flush_before(&mut self, mark: u64) -> std::io::Result<()> {
        let mark = mark.max(self.written_before);
        // Events arrive in time order (they happen at the current record), so this check
        // is all the sorting they need; the stable sort is a safety net, linear on runs.
        if !self.ev.is_sorted_by_key(|o| o.time) {
            self.ev.sort_by_key(|o| o.time);
        }
        let ne = self.ev.partition_point(|o| o.time < mark);
        let mut b = self.returned.try_recv().unwrap_or_default();
        // Send the big buffer itself and keep the few records at or after the mark in
        // the returned one, instead of copying what is sent.
        b.ev.clear();
        b.ev.extend_from_slice(&self.ev[ne..]);
        self.ev.truncate(ne);
        std::mem::swap(&mut self.ev, &mut b.ev);
        b.other.clear();
        self.other.retain(|o| {
            let now = o.time < mark;
            if now {
                b.other.push(*o);
            }
            !now
        });
        b.new_slots.clear();
        b.new_slots
            .extend_from_slice(&self.slots[self.slots_sent..]);
        self.slots_sent = self.slots.len();
        self.written_before = mark;
        let sent = self.to_formatter.as_ref().map(|tx| tx.send(b));
        if let Some(Err(_)) = sent {
            // The formatter stopped: its error says why.
            self.finish()?;
            return Err(std::io::Error::other("the formatting thread stopped"));
        }
        Ok(())
    }

    fn pending(&self) -> usize {
        self.ev.len() + self.other.len()
    }
}

/// The formatting thread's side: turns batches into lines and writes them.
struct Formatter {
    out: File,
    /// Formatted lines not written yet.
    buf: Vec<u8>,
    line: Box<Line>,
    slots: Vec<(u32, u32)>,
    counts: [u64; 3],
}

impl Formatter {
    fn batch(&mut self, b: &mut Batch) -> std::io::Result<()> {
        self.slots.extend_from_slice(&b.new_slots);
        // No two states of a thread begin at the same time, so an unstable sort (faster
        // on this unordered part) gives the same, deterministic, order.
        b.other.sort_unstable_by_key(Out::key);
        let (ev, other) = (&mut b.ev, &b.other);
        let (ne, no) = (ev.len(), other.len());
        let (mut i, mut j) = (0, 0);
        // End of the block of events sharing `ev[i].time`, once sorted by thread.
        let mut block_end = 0;
        // ev is sorted by time, other by key: merge them in Paraver's tie order.
        while i < ne || j < no {
            let take_ev = j >= no || (i < ne && (ev[i].time, 1) < (other[j].time, other[j].rank));
            if take_ev {
                if i >= block_end {
                    let t = ev[i].time;
                    block_end = i + 1;
                    while block_end < ne && ev[block_end].time == t {
                        block_end += 1;
                    }
                    let block = &mut ev[i..block_end];
                    if block.iter().any(|o| o.thread != block[0].thread) {
                        block.sort_by_key(|o| o.thread);
                    }
                }
                let th = ev[i].thread;
                let mut k = i + 1;
                while k < block_end && ev[k].thread == th {
                    k += 1;
                }
                let line = &mut self.line;
                format_line(
                    &mut self.buf,
                    line,
                    &self.slots,
                    &ev[i..k],
                    &mut self.counts,
                );
                i = k;
            } else {
                format_line(
                    &mut self.buf,
                    &mut self.line,
                    &self.slots,
                    &other[j..j + 1],
                    &mut self.counts,
                );
                j += 1;
            }
            if self.buf.len() >= OUT_BUF {
                self.out.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }
}

/// Appends an event type: ours are constants, copied rather than formatted.
fn push_type(line: &mut Line, ty: u32) {
    let s: &[u8; 8] = match ty {
        EV_FUNCTION => b"60000019",
        EV_SYSCALL => b"40000000",
        EV_BYTES_READ => b"40000001",
        EV_BYTES_WRITTEN => b"40000002",
        EV_FD => b"40000003",
        EV_SOCKET_OP => b"40000004",
        EV_CONNECTION => b"40000005",
        EV_ACCEPTED => b"40000006",
        EV_CPU => b"40000033",
        other => return push_u64(line, other as u64),
    };
    line.extend_from_slice(s);
}

/// Bytes of formatted lines gathered before one write.
const OUT_BUF: usize = 1 << 20;

/// Bytes at the start of the body file kept for the header and the records that come too
/// late for the body, both known only at the end: when they fit, they are written there
/// and the body file becomes the .prv, instead of copying the body behind them (15% of a
/// conversion's CPU for a 1 GB body). Late records come with the trace's length (links
/// pending past the horizon), so the room is a thousandth of the inputs' size, between
/// this and 1 MiB: 1 KiB holds a header of several dozen processes and a dozen late
/// records; a 150 MB trace of 20 M records gets 150 KB, for its 701 (38 KB).
const MIN_ROOM: usize = 1024;

/// The room kept for inputs of `bytes` bytes.
fn room_for(bytes: u64) -> usize {
    (bytes / 1000).clamp(MIN_ROOM as u64, 1 << 20) as usize
}

/// Longest padding line: readers with line buffers of a few KiB keep working.
const PAD_LINE: usize = 1024;

/// `header` followed by comment lines that pad it to `len` bytes (at least
/// `header.len() + 2`), in a buffer of the formatter's capacity. With an empty header:
/// the placeholder the body starts with.
fn header_room(header: &[u8], len: usize) -> Vec<u8> {
    let mut room = Vec::with_capacity(OUT_BUF + len);
    room.extend_from_slice(header);
    let mut left = len - header.len();
    while left > 0 {
        // A line is `#`, spaces, newline: never leave a single byte for the last one.
        let n = match left {
            l if l <= PAD_LINE => l,
            l if l - PAD_LINE >= 2 => PAD_LINE,
            _ => PAD_LINE - 2,
        };
        room.push(b'#');
        room.resize(room.len() + n - 2, b' ');
        room.push(b'\n');
        left -= n;
    }
    room
}

/// Appends to `out` one body line made of `recs`: one record, or several events of one
/// thread at one time. `line` is scratch space.
fn format_line(
    out: &mut Vec<u8>,
    line: &mut Line,
    slots: &[(u32, u32)],
    recs: &[Out],
    counts: &mut [u64; 3],
) {
    line.clear();
    let o = &recs[0];
    let (appl, thread) = slots[o.thread as usize];
    let head = |line: &mut Line, ty: u8, cpu: u32| {
        line.push(ty);
        line.push(b':');
        push_u64(line, cpu as u64);
        line.push(b':');
        push_u64(line, appl as u64);
        line.extend_from_slice(b":1:");
        push_u64(line, thread as u64);
        line.push(b':');
        push_u64(line, o.time);
    };
    match o.kind {
        OutKind::State { end, state, cpu } => {
            head(line, b'1', cpu);
            line.push(b':');
            push_u64(line, end);
            line.push(b':');
            push_u64(line, state as u64);
            counts[2] += 1;
        }
        OutKind::Event { cpu, .. } => {
            head(line, b'2', cpu);
            for r in recs {
                if !line.has_room() {
                    out.extend_from_slice(line.as_bytes());
                    line.clear();
                }
                if let OutKind::Event { ty, value, .. } = r.kind {
                    line.push(b':');
                    push_type(line, ty);
                    line.push(b':');
                    push_i64(line, value);
                }
            }
            counts[1] += 1;
        }
        OutKind::Comm {
            cpu,
            to,
            rcpu,
            recv,
            size,
            tag,
        } => {
            head(line, b'3', cpu);
            line.push(b':');
            push_u64(line, o.time);
            line.push(b':');
            push_u64(line, rcpu as u64);
            let (rappl, rthread) = slots[to as usize];
            line.push(b':');
            push_u64(line, rappl as u64);
            line.extend_from_slice(b":1:");
            push_u64(line, rthread as u64);
            line.push(b':');
            push_u64(line, recv);
            line.push(b':');
            push_u64(line, recv);
            line.push(b':');
            push_i64(line, size);
            line.push(b':');
            push_i64(line, tag);
            counts[0] += 1;
        }
    }
    line.push(b'\n');
    out.extend_from_slice(line.as_bytes());
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

/// The process model and resources: which application is which process, on which node.
struct Layout {
    /// Per application (1-based order): the process index and its threads in order.
    appls: Vec<(u32, Vec<ThreadRef>)>,
}

impl Layout {
    fn new(tl: &Timeline, slots: &[(u32, u32)]) -> Result<Layout> {
        let napps = slots.iter().map(|s| s.0).max().unwrap_or(0) as usize;
        let mut appls: Vec<(u32, Vec<ThreadRef>)> = vec![(0, Vec::new()); napps];
        for (r, &(a, _)) in slots.iter().enumerate() {
            let e = &mut appls[a as usize - 1];
            e.0 = tl.thread(r as ThreadRef).process;
            e.1.push(r as ThreadRef);
        }
        let cpus: u64 = tl.merger().nodes().iter().map(|n| n.cpus as u64).sum();
        if cpus > u16::MAX as u64 {
            return Err(Error::Limit(format!(
                "{cpus} CPUs: Paraver indexes at most 65535"
            )));
        }
        Ok(Layout { appls })
    }

    fn header(&self, tl: &Timeline, end: u64) -> String {
        let m = tl.merger();
        let start = (m.sources().iter())
            .map(|s| s.header.start_ns as i128 + s.header.monotonic_to_realtime_ns as i128)
            .min()
            .unwrap_or(0);
        let nodes: Vec<String> = m.nodes().iter().map(|n| n.cpus.to_string()).collect();
        let appls: Vec<String> = (self.appls.iter())
            .map(|(p, threads)| {
                let source = tl.processes()[*p as usize].source as usize;
                let node = m.sources()[source].node + 1;
                format!("1({}:{node})", threads.len())
            })
            .collect();
        // Applications are separated by ':' as Paraver itself writes them.
        format!(
            "#Paraver ({}):{end}_ns:{}({}):{}:{}\n",
            crate::fmt::paraver_date(start),
            nodes.len(),
            nodes.join(","),
            appls.len(),
            appls.join(":")
        )
    }

    fn write_row(&self, f: &mut impl Write, tl: &Timeline) -> std::io::Result<()> {
        let nodes = tl.merger().nodes();
        let cpus: u32 = nodes.iter().map(|n| n.cpus).sum();
        writeln!(f, "LEVEL CPU SIZE {cpus}")?;
        for n in nodes {
            for c in 0..n.cpus {
                writeln!(f, "{}.{}", c + 1, n.hostname)?;
            }
        }
        writeln!(f, "\nLEVEL NODE SIZE {}", nodes.len())?;
        for n in nodes {
            writeln!(f, "{}", n.hostname)?;
        }
        let procs = tl.processes();
        for level in ["APPL", "TASK"] {
            writeln!(f, "\nLEVEL {level} SIZE {}", self.appls.len())?;
            for (p, _) in &self.appls {
                let p = &procs[*p as usize];
                writeln!(f, "{}:{}", clean(&p.name), p.tgid)?;
            }
        }
        let total: usize = self.appls.iter().map(|a| a.1.len()).sum();
        writeln!(f, "\nLEVEL THREAD SIZE {total}")?;
        for (_, threads) in &self.appls {
            for &r in threads {
                let t = tl.thread(r);
                writeln!(f, "{}:{}", clean(&t.name), t.tid)?;
            }
        }
        Ok(())
    }
}

/// A label fit for one line of the .row/.pcf.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn assemble_prv(
    header: &str,
    room: usize,
    body_path: &Path,
    late: &[Out],
    slots: &[(u32, u32)],
    out_path: &Path,
) -> Result<[u64; 3]> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let io_out = |e| Error::io(out_path, e);
    let io_body = |e| Error::io(body_path, e);
    let mut body = File::open(body_path).map_err(io_body)?;
    let len = body.metadata().map_err(io_body)?.len();
    // The body is sorted: each late record's place is found by binary search over its
    // lines, so late records cost a few reads each, not a parse of the body.
    let mut counts = [0u64; 3];
    let mut scratch = Line::new();
    let mut places = Vec::with_capacity(late.len());
    let mut pos = room as u64;
    for rec in late {
        let at = insertion_point(&body, pos, len, (rec.time, rec.rank)).map_err(io_body)?;
        let mut line = Vec::new();
        let rec = std::slice::from_ref(rec);
        format_line(&mut line, &mut scratch, slots, rec, &mut counts);
        places.push((at, line));
        pos = at;
    }
    let late_bytes: usize = places.iter().map(|p| p.1.len()).sum();
    let prefix_end = places.last().map_or(room as u64, |p| p.0);

    // When the header and the late lines fit in the room kept for them, only the body up
    // to the last late line is rewritten, in place: each stretch moves towards the start
    // by the late lines still to come, and since it is read before it is written and
    // every write lands at or before what is still unread, a stretch at a time in a
    // fixed buffer is enough whatever the trace's size. The body file becomes the .prv.
    if header.len() + late_bytes + 2 <= room {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(body_path)
            .map_err(io_body)?;
        let head = header_room(header.as_bytes(), room - late_bytes);
        file.write_all_at(&head, 0).map_err(io_body)?;
        let (mut pos, mut to) = (room as u64, head.len() as u64);
        let mut buf = vec![0u8; 1 << 20];
        for (at, line) in &places {
            while pos < *at {
                let n = buf.len().min((at - pos) as usize);
                file.read_exact_at(&mut buf[..n], pos).map_err(io_body)?;
                file.write_all_at(&buf[..n], to).map_err(io_body)?;
                pos += n as u64;
                to += n as u64;
            }
            file.write_all_at(line, to).map_err(io_body)?;
            to += line.len() as u64;
        }
        debug_assert_eq!(to, prefix_end);
        std::fs::rename(body_path, out_path).map_err(io_out)?;
        return Ok(counts);
    }

    // Otherwise the header goes first in a new file, and the stretches between places
    // are copied whole (in the kernel, when it can).
    let out = File::create(out_path).map_err(io_out)?;
    let mut out = BufWriter::with_capacity(1 << 20, out);
    out.write_all(header.as_bytes()).map_err(io_out)?;
    let mut pos = room as u64;
    for (at, line) in &places {
        body.seek(SeekFrom::Start(pos)).map_err(io_body)?;
        std::io::copy(&mut (&mut body).take(at - pos), &mut out).map_err(io_out)?;
        out.write_all(line).map_err(io_out)?;
        pos = *at;
    }
    body.seek(SeekFrom::Start(pos)).map_err(io_body)?;
    std::io::copy(&mut body, &mut out).map_err(io_out)?;
    out.flush().map_err(io_out)?;
    Ok(counts)
}

/// The offset, in `[lo, hi]` (`lo` a line start), of the first body line whose
/// (time, tie rank) is above `key`: where a record with that key goes.
fn insertion_point(body: &File, mut lo: u64, mut hi: u64, key: (u64, u8)) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut window = vec![0u8; 1024];
    // Invariant: lines starting before `lo` have keys <= `key`; lines starting at or
    // after `hi` have keys above it.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // The first line starting at or after `mid` (`mid` itself when it follows a
        // newline): read from the byte before it.
        let from = if mid == lo { lo } else { mid - 1 };
        let mut line = Vec::new();
        let mut off = from;
        let mut start = None;
        loop {
            let n = body.read_at(&mut window, off)?;
            if n == 0 {
                break;
            }
            let chunk = &window[..n];
            let mut i = 0;
            if start.is_none() {
                if from == lo {
                    start = Some(lo);
                } else if let Some(nl) = chunk.iter().position(|&b| b == b'\n') {
                    start = Some(off + nl as u64 + 1);
                    i = nl + 1;
                } else {
                    off += n as u64;
                    continue;
                }
            }
            match chunk[i..].iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    line.extend_from_slice(&chunk[i..i + nl + 1]);
                    break;
                }
                None => line.extend_from_slice(&chunk[i..]),
            }
            off += n as u64;
        }
        let Some(s) = start.filter(|&s| s < hi && !line.is_empty()) else {
            // No line starts in [mid, hi).
            hi = mid;
            continue;
        };
        match line_key(&line) {
            Some(k) if k > key => hi = s,
            _ => lo = s + line.len() as u64,
        }
    }
    Ok(lo)
}

/// (time, tie rank) of a body line.
fn line_key(line: &[u8]) -> Option<(u64, u8)> {
    let rank = match line.first()? {
        b'3' => 0,
        b'2' => 1,
        b'1' => 2,
        _ => return None,
    };
    let field = line.split(|&b| b == b':').nth(5)?;
    let s = std::str::from_utf8(field).ok()?.trim_end();
    Some((s.parse().ok()?, rank))
}

fn write_pcf(f: &mut impl Write, tl: &Timeline) -> std::io::Result<()> {
    f.write_all(
        b"DEFAULT_OPTIONS\n\nLEVEL               THREAD\nUNITS               NANOSEC\n\
          LOOK_BACK           100\nSPEED               1\nFLAG_ICONS          ENABLED\n\
          NUM_OF_STATE_COLORS 1000\nYMAX_SCALE          37\n\n\n\
          DEFAULT_SEMANTIC\n\nTHREAD_FUNC          State As Is\n\n\n",
    )?;
    let mut states = ThreadState::ALL;
    states.sort_by_key(|&s| state_value(s));
    writeln!(f, "STATES")?;
    for s in states {
        writeln!(f, "{:<4} {}", state_value(s), state_look(s).0)?;
    }
    writeln!(f, "\n\nSTATES_COLOR")?;
    for s in states {
        let (r, g, b) = state_look(s).1;
        writeln!(f, "{:<4} {{{r},{g},{b}}}", state_value(s))?;
    }

    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_FUNCTION}    User function\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    let bases = func_bases(tl);
    for (s, base) in tl.merger().sources().iter().zip(bases) {
        let mut probes: Vec<_> = s.probes.iter().collect();
        probes.sort_by_key(|p| p.id);
        for p in probes {
            writeln!(f, "{}      {}", base as u64 + p.id as u64, clean(&p.name))?;
        }
    }

    writeln!(
        f,
        "\n\nEVENT_TYPE\n9    {EV_SYSCALL}    System call\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    for nr in 0..1024u32 {
        if let Some(name) = trace_file::syscalls::name(nr) {
            writeln!(f, "{}      {name}", nr + 1)?;
        }
    }

    writeln!(f, "\n\nEVENT_TYPE")?;
    writeln!(f, "0    {EV_BYTES_READ}    Bytes read")?;
    writeln!(f, "0    {EV_BYTES_WRITTEN}    Bytes written")?;
    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_FD}    File descriptor (value - 1)\nVALUES"
    )?;
    writeln!(f, "0      End")?;

    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_SOCKET_OP}    Socket operation\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    for op in SockOp::ALL {
        writeln!(f, "{}      {}", op as u32, op.label())?;
    }

    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_CONNECTION}    Connection\nVALUES"
    )?;
    writeln!(f, "0      End")?;
    writeln!(
        f,
        "\n\nEVENT_TYPE\n0    {EV_ACCEPTED}    Accepted connection"
    )?;
    writeln!(f, "\n\nEVENT_TYPE\n0    {EV_CPU}    Executing CPU")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_line_longer_than_the_scratch_line_is_whole() {
        let recs: Vec<Out> = (0..100)
            .map(|i| Out {
                time: 12_345_678_901,
                rank: 1,
                thread: 0,
                kind: OutKind::Event {
                    ty: EV_BYTES_READ,
                    value: i64::MAX - i,
                    cpu: 3,
                },
            })
            .collect();
        let mut want = String::from("2:3:1:1:2:12345678901");
        for i in 0..100 {
            want.push_str(&format!(":40000001:{}", i64::MAX - i));
        }
        want.push('\n');
        let (mut out, mut line, mut counts) = (b"x".to_vec(), Line::new(), [0; 3]);
        format_line(&mut out, &mut line, &[(1, 2)], &recs, &mut counts);
        assert_eq!(String::from_utf8(out).unwrap(), format!("x{want}"));
        assert_eq!(counts, [0, 1, 0]);
    }

    /// The room is exactly as long as asked, in comment lines no longer than PAD_LINE.
    #[test]
    fn room_is_padded_exactly_in_short_comment_lines() {
        for header in ["", "#Paraver (x):1:1(1):1:1(1:1)\n"] {
            for len in (header.len() + 2..3 * PAD_LINE + 5).chain([MIN_ROOM, 1 << 20]) {
                let room = header_room(header.as_bytes(), len);
                assert_eq!(room.len(), len);
                let pad = std::str::from_utf8(&room[header.len()..]).unwrap();
                assert!(pad.ends_with('\n'));
                for line in pad.split_inclusive('\n') {
                    assert!(line.starts_with('#') && line.len() <= PAD_LINE, "{len}");
                }
            }
        }
        assert_eq!(room_for(0), MIN_ROOM);
        assert_eq!(room_for(152_299_278), 152_299);
        assert_eq!(room_for(u64::MAX), 1 << 20);
    }

    fn late_state(time: u64, end: u64) -> Out {
        Out {
            time,
            rank: 2,
            thread: 0,
            kind: OutKind::State {
                end,
                state: 1,
                cpu: 1,
            },
        }
    }

    /// The .prv text and its record lines after `late` is merged into a body of states
    /// at `10 * i` for `i` in `1..=n`.
    fn merge_late(header: &str, n: u64, late: &[Out]) -> (String, Vec<String>) {
        let body: String = (1..=n)
            .map(|i| format!("1:1:1:1:1:{}:{}:1\n", i * 10, i * 10 + 5))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let (b, out) = (dir.path().join("body"), dir.path().join("out"));
        let mut content = header_room(&[], MIN_ROOM);
        content.extend_from_slice(body.as_bytes());
        std::fs::write(&b, content).unwrap();
        let counts = assemble_prv(header, MIN_ROOM, &b, late, &[(1, 1)], &out).unwrap();
        assert_eq!(counts, [0, 0, late.len() as u64]);
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<String> = text
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect();
        (text, lines)
    }

    const SHORT_HEADER: &str = "#Paraver (x):600_ns:1(1):1:1(1:1)\n";

    /// A header too long for the room: the late records are merged by copying.
    fn long_header() -> String {
        format!("#Paraver ({}):600_ns:1(1):1:1(1:1)\n", "x".repeat(MIN_ROOM))
    }

    /// Late records merged in place (header and late lines fit the room) and by copying
    /// (a header too long for it) give the same lines, in the same order.
    #[test]
    fn late_records_in_place_and_by_copy_agree() {
        let state = late_state;
        let late = [
            state(5, 7),
            state(200, 201),
            state(200, 202),
            state(495, 499),
        ];
        let run = |header: &str| merge_late(header, 50, &late);
        let (short, in_place) = run(SHORT_HEADER);
        let (_, copied) = run(&long_header());
        assert!(
            short.lines().nth(1).unwrap().starts_with("# "),
            "not merged in place"
        );
        assert_eq!(in_place, copied);
        assert_eq!(in_place.len(), 54);
        assert_eq!(in_place[0], "1:1:1:1:1:5:7:1");
        assert_eq!(
            in_place[20..23],
            [
                "1:1:1:1:1:200:205:1",
                "1:1:1:1:1:200:201:1",
                "1:1:1:1:1:200:202:1"
            ]
        );
    }

    /// In place, a body of several buffers' length (the rewrite moves it a buffer at a
    /// time) with a late record near its end.
    #[test]
    fn late_records_far_into_a_long_body() {
        let late = [
            late_state(5, 7),
            late_state(600_000, 600_001),
            late_state(1_199_995, 1_199_999),
        ];
        let (text, in_place) = merge_late(SHORT_HEADER, 120_000, &late);
        assert!(text.len() > 2 << 20);
        assert!(
            text.lines().nth(1).unwrap().starts_with("# "),
            "not merged in place"
        );
        let (_, copied) = merge_late(&long_header(), 120_000, &late);
        assert_eq!(in_place, copied);
        assert_eq!(in_place.len(), 120_003);
        assert_eq!(in_place[60_001], "1:1:1:1:1:600000:600001:1");
        assert_eq!(in_place[120_001], "1:1:1:1:1:1199995:1199999:1");
    }
}
