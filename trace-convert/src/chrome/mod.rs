//! The Trace Event Format (Chrome's JSON trace), which Perfetto's UI (ui.perfetto.dev),
//! chrome://tracing and speedscope open.
//!
//! The layout follows what those viewers show well:
//! - each traced thread has two tracks, side by side: its own, with the probed functions
//!   (`B`/`E` pairs, written as they happen, so they nest exactly as the calls did) and
//!   its system calls (`X` slices, leaves); and a `state` track tiled with its states
//!   (running on CPU n, ready, blocked, I/O);
//! - each CPU has a track of the threads that ran on it;
//! - wakeups and connection hand-offs are flow arrows from the sender's state track (it
//!   is running) to the slice that begins where the receiver acts: its running slice, or
//!   the system call that took the connection over. The arrow is written before that
//!   slice (which is written when it ends), so importers that sort stably by time bind
//!   it to that slice.
//!
//! Ids: a process is `host << 22 | tgid`, a thread `host << 22 | tid` (`pid_max` is at
//! most 2^22), its state track that with bit 30 set; the CPUs of a host are the process
//! `1 << 30 | host`. Times are microseconds with nanosecond decimals.

mod calls;
mod json;
mod metadata;
mod samples;
mod states;
mod tracks;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use trace_merge::report::require_content;
use trace_merge::timeline::{Item, ThreadRef, Timeline};

use crate::error::{Error, Result};
use crate::{InputReport, Options};
use atomic_output::write_file;

use calls::{end_name, ThreadTrack};
use json::Events;

pub use tracks::{cpus_pid, goroutine_tid, pid, state_name, state_tid, tid};

/// What a conversion read and wrote.
#[derive(Clone, Debug, Default)]
pub struct ChromeReport {
    /// What was read.
    pub input: InputReport,
    /// Function calls written (`B`/`E` pairs).
    pub functions: u64,
    /// System calls written (`X`).
    pub syscalls: u64,
    /// State slices written, on thread and CPU tracks.
    pub states: u64,
    /// Flow arrows (wakeups and hand-offs).
    pub flows: u64,
    /// Threads written.
    pub threads: u64,
    /// Processes written.
    pub processes: u64,
    /// Trace duration, ns.
    pub duration_ns: u64,
    /// The output file.
    pub output: PathBuf,
}

impl std::fmt::Display for ChromeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.input)?;
        writeln!(
            f,
            "written: {} function calls, {} system calls, {} state slices, {} flows",
            self.functions, self.syscalls, self.states, self.flows
        )?;
        writeln!(
            f,
            "threads: {} in {} processes, duration {} ns",
            self.threads, self.processes, self.duration_ns
        )?;
        write!(f, "output: {}", self.output.display())
    }
}

/// Converts trace files into one JSON trace at `output`, written to a temporary file
/// next to it and renamed at the end. An existing output is an error unless
/// [`Options::force`]. With a window, what is under way at its start (calls, states)
/// begins there, and what is under way at its end ends there.
pub fn convert(inputs: &[PathBuf], output: &Path, opts: &Options) -> Result<ChromeReport> {
    write_file(output, opts.force, |file, tmp| {
        convert_inner(inputs, output, file, tmp, opts)
    })
}

fn convert_inner(
    inputs: &[PathBuf],
    output: &Path,
    file: &File,
    tmp: &Path,
    opts: &Options,
) -> Result<ChromeReport> {
    let tl = trace_merge::open(inputs, &opts.merge)?;
    let window = (
        opts.window.from_ns,
        opts.window.until_ns.max(opts.window.from_ns),
    );
    let mut w = Writer::new(file, window);
    let io_err = |e| Error::io(tmp, e);
    w.open().map_err(io_err)?;
    // Past the window: what is still open ends at its end, the rest is not read.
    let mut feed = Feed { w: &mut w, tmp };
    let (tl, window_ended) = trace_merge::feed(tl, window.1, &mut feed)?;
    if window_ended {
        w.end_window(&tl).map_err(io_err)?;
    }
    let end = tl.end().unwrap_or(window.1).min(window.1);
    require_content(&tl, &inputs[0], window.0, end)?;
    let input = InputReport::of(&tl);
    w.close(&tl, &input).map_err(io_err)?;
    let Writer {
        out,
        functions,
        syscalls,
        states,
        flows,
        ..
    } = w;
    out.finish().map_err(io_err)?;
    Ok(ChromeReport {
        input,
        functions,
        syscalls,
        states,
        flows,
        threads: tl.threads().len() as u64,
        processes: tl.processes().len() as u64,
        duration_ns: end - window.0,
        output: output.to_owned(),
    })
}

/// The writer as a consumer of the timeline.
struct Feed<'a, W: Write> {
    w: &'a mut Writer<W>,
    tmp: &'a Path,
}

impl<W: Write> trace_merge::Consumer for Feed<'_, W> {
    type Error = Error;

    #[inline]
    fn item(&mut self, tl: &Timeline, item: Item) -> Result<()> {
        self.w.item(tl, item).map_err(|e| Error::io(self.tmp, e))
    }
}

struct Writer<W: Write> {
    out: Events<W>,
    /// [from, until) in ns: what is written.
    window: (u64, u64),
    /// The stream has reached the window: calls under way have been opened at its start.
    started: bool,
    /// Function names as JSON strings, per (file, probe id).
    funcs: HashMap<(u32, u32), String>,
    /// CPUs that ran something, per host.
    cpus: BTreeSet<(u32, u32)>,
    /// Per thread: what keeps its track nested.
    tracks: Vec<ThreadTrack>,
    /// Who runs on each CPU since when, as far as the records tell.
    on_cpu: HashMap<u32, (ThreadRef, u64)>,
    /// Tracks of goroutines, by (host, tgid, goroutine): their index in the process.
    goroutines: HashMap<(u32, u32, u64), u64>,
    functions: u64,
    syscalls: u64,
    states: u64,
    flows: u64,
    /// Stacks (`--stacks`), written after the events.
    samples: samples::Samples,
}

impl<W: Write> Writer<W> {
    fn new(out: W, window: (u64, u64)) -> Self {
        Writer {
            out: Events::new(out),
            window,
            started: window.0 == 0,
            funcs: HashMap::new(),
            cpus: BTreeSet::new(),
            on_cpu: HashMap::new(),
            goroutines: HashMap::new(),
            tracks: Vec::new(),
            functions: 0,
            syscalls: 0,
            states: 0,
            flows: 0,
            samples: Default::default(),
        }
    }

    fn open(&mut self) -> std::io::Result<()> {
        (self.out.buf).write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")
    }

    fn track(&mut self, r: ThreadRef) -> &mut ThreadTrack {
        let r = r as usize;
        if self.tracks.len() <= r {
            self.tracks.resize(r + 1, ThreadTrack::default());
        }
        &mut self.tracks[r]
    }

    fn ids(tl: &Timeline, r: ThreadRef) -> (u32, u64, u64) {
        let m = tl.thread(r);
        let host = tl.merger().sources()[m.source as usize].node;
        (host, pid(host, m.tgid), tid(host, m.tid))
    }

    /// `[begin, end]` clipped to the window, `None` when nothing of it is inside (an
    /// instant counts if it is).
    fn clip(&self, begin: u64, end: u64) -> Option<(u64, u64)> {
        let (from, until) = self.window;
        let (b, e) = (begin.max(from), end.min(until));
        (b < e || (b == e && begin >= from && begin < until)).then_some((b, e))
    }

    fn item(&mut self, tl: &Timeline, item: Item) -> std::io::Result<()> {
        if !self.started && tl.now() >= self.window.0 {
            self.start_window(tl)?;
        }
        match item {
            Item::Thread(_) | Item::GoStatus(_) => {}
            Item::Sample(s) => {
                if (self.window.0..self.window.1).contains(&s.time) {
                    let (_, p, t) = Self::ids(tl, s.thread);
                    self.samples.add(tl, &s, p, t);
                }
            }
            Item::SyscallEntry(e) => self.track(e.thread).sys_open = Some((e.time, e.nr)),
            Item::OnCpu { thread, time, cpu } => self.on_cpu(tl, thread, time, cpu)?,
            Item::State(s) => self.state(tl, &s)?,
            // A goroutine's calls go to its own track, as complete slices.
            Item::FuncEntry {
                goroutine: Some(_), ..
            } => {}
            Item::Func(s) if s.goroutine.is_some() => self.goroutine_call(tl, &s)?,
            Item::Mark(m) => self.mark(tl, &m)?,
            Item::FuncEntry {
                thread, time, func, ..
            } => {
                let inside = (self.window.0..self.window.1).contains(&time);
                let track = self.track(thread);
                track.func_event(time);
                track.calls.push((func, inside));
                if inside {
                    self.begin_call(tl, thread, func, time)?;
                }
            }
            Item::Func(s) => {
                let track = self.track(s.thread);
                track.func_event(s.end);
                let written = track.calls.pop().is_some_and(|c| c.1);
                if written {
                    let until = self.window.1;
                    let end = match s.end > until {
                        true => (until, "window ended"),
                        false => (s.end, end_name(s.end_kind)),
                    };
                    self.end_call(tl, s.thread, s.func, end, s.ret)?;
                }
            }
            Item::Syscall(s) => self.syscall(tl, &s)?,
            Item::Link(l) if l.send < self.window.0 || l.recv >= self.window.1 => {}
            Item::Link(l) => self.link(tl, &l)?,
        }
        Ok(())
    }

    /// The stream reached the window: calls under way begin at its start, outermost first.
    fn start_window(&mut self, tl: &Timeline) -> std::io::Result<()> {
        self.started = true;
        let from = self.window.0;
        for r in 0..self.tracks.len() {
            for i in 0..self.tracks[r].calls.len() {
                let (func, written) = self.tracks[r].calls[i];
                if !written {
                    self.tracks[r].calls[i].1 = true;
                    self.begin_call(tl, r as ThreadRef, func, from)?;
                }
            }
        }
        Ok(())
    }

    /// Reading stopped past the window: system calls and calls under way end at its end
    /// (innermost first), as do the threads on the CPUs.
    fn end_window(&mut self, tl: &Timeline) -> std::io::Result<()> {
        let until = self.window.1;
        for r in 0..self.tracks.len() {
            let r = r as ThreadRef;
            if let Some((begin, nr)) = self.tracks[r as usize].sys_open.take() {
                if let Some(slice) = self.clip(begin, until) {
                    let out = self.syscall_head(tl, r, nr, slice, "window ended")?;
                    out.write_all(b"}}")?;
                }
            }
            while let Some((func, written)) = self.tracks[r as usize].calls.pop() {
                if written {
                    self.end_call(tl, r, func, (until, "window ended"), None)?;
                }
            }
        }
        for (cpu, (r, begin)) in std::mem::take(&mut self.on_cpu) {
            self.cpu_slice(tl, cpu, r, begin, until)?;
        }
        Ok(())
    }
}
