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

mod samples;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use trace_merge::report::require_content;
use trace_merge::sysclass;
use trace_merge::timeline::{
    Item, LinkKind, Mark, Span, SpanEnd, StateInterval, SyscallSpan, ThreadRef, ThreadState,
    Timeline,
};

use crate::error::{Error, Result};
use crate::fmt::{push_i64, push_u64, push_us};
use crate::{InputReport, Options};
use atomic_output::write_file;

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

const STATE_TRACK: u64 = 1 << 30;
const CPUS: u64 = 1 << 30;

/// Process id of a traced process.
pub fn pid(host: u32, tgid: u32) -> u64 {
    (host as u64) << 22 | tgid as u64
}

/// Track id of a traced thread's functions and system calls.
pub fn tid(host: u32, tid: u32) -> u64 {
    (host as u64) << 22 | tid as u64
}

/// Track id of a thread's states.
pub fn state_tid(host: u32, t: u32) -> u64 {
    STATE_TRACK | tid(host, t)
}

/// Track id of a process's `n`th goroutine (Go calls are drawn per goroutine).
pub fn goroutine_tid(host: u32, n: u64) -> u64 {
    GOROUTINE_TRACK | (host as u64) << 22 | n
}

const GOROUTINE_TRACK: u64 = 1 << 31;

/// The keys of a USDT mark's arguments.
const USDT_ARGS: [&str; tracer_abi::MAX_USDT_ARGS] = [
    ",\"arg0\":",
    ",\"arg1\":",
    ",\"arg2\":",
    ",\"arg3\":",
    ",\"arg4\":",
    ",\"arg5\":",
];

/// Process id of a host's CPU tracks (the track of CPU n is tid n).
pub fn cpus_pid(host: u32) -> u64 {
    CPUS | host as u64
}

/// Slice name of a state (`None`: no slice; the thread does not exist or is not known).
pub fn state_name(s: ThreadState) -> Option<&'static str> {
    match s {
        ThreadState::Running => Some("running"),
        ThreadState::Ready => Some("ready"),
        ThreadState::Blocked => Some("blocked"),
        ThreadState::Io => Some("I/O"),
        ThreadState::Unknown | ThreadState::NotCreated | ThreadState::Exited => None,
    }
}

/// chrome://tracing's reserved colours (Perfetto picks its own).
fn state_colour(s: ThreadState) -> &'static str {
    match s {
        ThreadState::Running => "thread_state_running",
        ThreadState::Ready => "thread_state_runnable",
        ThreadState::Io => "thread_state_iowait",
        _ => "thread_state_sleeping",
    }
}

/// `,"name":`: a key after the first, made at compile time (appending it in pieces
/// cost a quarter of the writer's time).
macro_rules! k {
    ($name:literal) => {
        concat!(",\"", $name, "\":")
    };
}

/// `{"name":`: an object's first key.
macro_rules! first {
    ($name:literal) => {
        concat!("{\"", $name, "\":")
    };
}

/// Appends the fields of an event, numbers without `fmt` (`write!` took half of a
/// conversion's time): [`Json::head`], then `,"key":value` pairs with keys from [`k!`].
struct Json<'a>(&'a mut Vec<u8>);

impl Json<'_> {
    /// Opens an event with the fields every event has.
    #[inline]
    fn head(self, ph: &str, cat: &str, pid: u64, tid: u64, ts: u64) -> Self {
        self.raw(r#"{"ph":""#)
            .raw(ph)
            .raw(r#"","cat":""#)
            .raw(cat)
            .raw("\"")
            .n(k!("pid"), pid)
            .n(k!("tid"), tid)
            .t(k!("ts"), ts)
    }

    #[inline]
    fn raw(self, piece: &str) -> Self {
        self.0.extend_from_slice(piece.as_bytes());
        self
    }

    /// A string that needs no escaping (names this writer makes).
    #[inline]
    fn q(self, key: &str, v: &str) -> Self {
        self.raw(key).raw("\"").raw(v).raw("\"")
    }

    #[inline]
    fn n(self, key: &str, v: u64) -> Self {
        let j = self.raw(key);
        push_u64(j.0, v);
        j
    }

    #[inline]
    fn i(self, key: &str, v: i64) -> Self {
        let j = self.raw(key);
        push_i64(j.0, v);
        j
    }

    /// Microseconds with three decimals: exact nanoseconds, without float rounding.
    #[inline]
    fn t(self, key: &str, ns: u64) -> Self {
        let j = self.raw(key);
        push_us(j.0, ns);
        j
    }
}

/// Appends `s` as a JSON string: as it is when nothing in it needs escaping (thread
/// names, nearly always), else escaped.
fn json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        out.extend_from_slice(Str(s).to_string().as_bytes());
    }
}

/// A JSON string, escaped.
struct Str<'a>(&'a str);

impl std::fmt::Display for Str<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_string(self.0).map_err(|_| std::fmt::Error)?;
        f.write_str(&s)
    }
}

/// The array of events being written, through a buffer written out a MiB at a time.
struct Events<W: Write> {
    w: W,
    buf: Vec<u8>,
    first: bool,
}

impl<W: Write> Events<W> {
    /// Starts the next event.
    fn next(&mut self) -> std::io::Result<&mut Vec<u8>> {
        if self.buf.len() >= 1 << 20 {
            self.w.write_all(&self.buf)?;
            self.buf.clear();
        }
        if !self.first {
            self.buf.extend_from_slice(b",\n");
        }
        self.first = false;
        Ok(&mut self.buf)
    }

    /// Writes out what is buffered and returns the output.
    fn finish(mut self) -> std::io::Result<W> {
        self.w.write_all(&self.buf)?;
        self.w.flush()?;
        Ok(self.w)
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
            out: Events {
                w: out,
                buf: Vec::with_capacity(2 << 20),
                first: true,
            },
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
            Item::Thread(_) => {}
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
            Item::Syscall(s) => {
                let (begin, end, clipped) = self.track(s.thread).sys_slice(&s);
                let Some((begin, end)) = self.clip(begin, end) else {
                    return Ok(());
                };
                let how = match s.end > self.window.1 {
                    true => "window ended",
                    false => end_name(s.end_kind),
                };
                let out = self.syscall_head(tl, s.thread, s.nr, (begin, end), how)?;
                if !s.entered {
                    out.write_all(br#","entry":"before the recording""#)?;
                }
                if clipped {
                    // Drawn only as far as it can be without crossing a function's edge.
                    Json(out)
                        .q(k!("clipped"), "records lost")
                        .t(k!("recorded_dur"), s.end - s.begin);
                }
                if let Some(fd) = s.fd {
                    Json(out).i(k!("fd"), fd as i64);
                }
                if let Some(ret) = s.ret {
                    Json(out).i(k!("return"), ret);
                }
                if s.bytes_read > 0 {
                    Json(out).n(k!("bytes_read"), s.bytes_read);
                }
                if s.bytes_written > 0 {
                    Json(out).n(k!("bytes_written"), s.bytes_written);
                }
                if let Some(c) = s.conn.or(s.new_conn) {
                    Json(out).n(k!("connection"), c as u64);
                }
                out.extend_from_slice(b"}}");
            }
            Item::Link(l) if l.send < self.window.0 || l.recv >= self.window.1 => {}
            Item::Link(l) => {
                // The arrow starts in the sender's running slice, and ends at the slice
                // that begins where the receiver acts: its running slice for a wakeup, its
                // system call for a hand-off.
                let (from_host, p0, _) = Self::ids(tl, l.from);
                let (to_host, p1, to_calls) = Self::ids(tl, l.to);
                let t0 = state_tid(from_host, tl.thread(l.from).tid);
                let (cat, name, t1) = match l.kind {
                    LinkKind::Wakeup => {
                        let t1 = state_tid(to_host, tl.thread(l.to).tid);
                        ("wakeup", "wakeup".to_owned(), t1)
                    }
                    LinkKind::Handoff { conn } => {
                        ("connection", format!("connection {conn}"), to_calls)
                    }
                };
                self.flows += 1;
                let id = self.flows;
                for (ph, p, t, ts) in [("s", p0, t0, l.send), ("f", p1, t1, l.recv)] {
                    Json(self.out.next()?)
                        .head(ph, cat, p, t, ts)
                        .q(k!("name"), &name)
                        .n(k!("id"), id)
                        .raw("}");
                }
            }
        }
        Ok(())
    }

    fn state(&mut self, tl: &Timeline, s: &StateInterval) -> std::io::Result<()> {
        let Some(name) = state_name(s.state) else {
            return Ok(());
        };
        if let (ThreadState::Running, Some(cpu)) = (s.state, s.cpu) {
            if self.on_cpu.get(&cpu).is_some_and(|o| o.0 == s.thread) {
                self.on_cpu.remove(&cpu);
                self.cpu_slice(tl, cpu, s.thread, s.begin, s.end)?;
            }
        }
        let Some((begin, end)) = self.clip(s.begin, s.end).filter(|(b, e)| b < e) else {
            return Ok(());
        };
        let (host, p, _) = Self::ids(tl, s.thread);
        let t = state_tid(host, s.tid);
        let out = self.out.next()?;
        let j = Json(out)
            .head("X", "state", p, t, begin)
            .t(k!("dur"), end - begin)
            .q(k!("name"), name)
            .q(k!("cname"), state_colour(s.state));
        match s.cpu {
            Some(cpu) => j.raw(k!("args")).n(first!("cpu"), cpu as u64).raw("}}"),
            None => j.raw("}"),
        };
        self.states += 1;
        Ok(())
    }

    /// A thread starts running on a CPU: whoever the records last put there is gone.
    /// (When records are lost, a thread's running interval may not have ended yet; the
    /// CPU track stays one thread at a time.)
    fn on_cpu(&mut self, tl: &Timeline, r: ThreadRef, t: u64, cpu: u32) -> std::io::Result<()> {
        match self.on_cpu.insert(cpu, (r, t)) {
            Some((x, begin)) if t > begin => self.cpu_slice(tl, cpu, x, begin, t),
            _ => Ok(()),
        }
    }

    fn cpu_slice(
        &mut self,
        tl: &Timeline,
        cpu: u32,
        r: ThreadRef,
        begin: u64,
        end: u64,
    ) -> std::io::Result<()> {
        let Some((begin, end)) = self.clip(begin, end).filter(|(b, e)| b < e) else {
            return Ok(());
        };
        let th = tl.thread(r);
        let host = tl.merger().sources()[th.source as usize].node;
        let out = self.out.next()?;
        Json(out)
            .head("X", "cpu", cpus_pid(host), cpu as u64, begin)
            .t(k!("dur"), end - begin)
            .raw(k!("name"));
        json_str(out, &th.name);
        Json(out)
            .raw(k!("args"))
            .n(first!("tid"), th.tid as u64)
            .n(k!("pid"), th.tgid as u64)
            .raw("}}");
        self.cpus.insert((host, cpu));
        self.states += 1;
        Ok(())
    }

    /// Starts the `X` slice of system call `nr` of thread `r` over `[begin, end]`, up to
    /// its first argument, `end` (how it ended); the caller adds arguments and closes it.
    fn syscall_head(
        &mut self,
        tl: &Timeline,
        r: ThreadRef,
        nr: u32,
        (begin, end): (u64, u64),
        how: &str,
    ) -> std::io::Result<&mut Vec<u8>> {
        let (_, p, t) = Self::ids(tl, r);
        self.syscalls += 1;
        let out = self.out.next()?;
        Json(out)
            .head("X", "syscall", p, t, begin)
            .t(k!("dur"), end - begin)
            .q(k!("name"), &sysclass::name(nr))
            .raw(k!("args"))
            .q(first!("end"), how);
        Ok(out)
    }

    fn begin_call(
        &mut self,
        tl: &Timeline,
        r: ThreadRef,
        func: u32,
        t: u64,
    ) -> std::io::Result<()> {
        let (_, p, tid) = Self::ids(tl, r);
        let name = func_name(&mut self.funcs, tl, tl.thread(r).source, func);
        Json(self.out.next()?)
            .head("B", "function", p, tid, t)
            .raw(k!("name"))
            .raw(name)
            .raw("}");
        Ok(())
    }

    /// A Go call, as a complete slice on its goroutine's track.
    fn goroutine_call(&mut self, tl: &Timeline, s: &Span) -> std::io::Result<()> {
        let Some((begin, end)) = self.clip(s.begin, s.end) else {
            return Ok(());
        };
        let m = tl.thread(s.thread);
        let host = tl.merger().sources()[m.source as usize].node;
        let key = (host, m.tgid, s.goroutine.unwrap_or(0));
        let next = self.goroutines.len() as u64;
        let track = goroutine_tid(host, *self.goroutines.entry(key).or_insert(next));
        let name = func_name(&mut self.funcs, tl, m.source, s.func);
        let how = match s.end > self.window.1 {
            true => "window ended",
            false => end_name(s.end_kind),
        };
        let out = self.out.next()?;
        Json(out)
            .head("X", "function", pid(host, m.tgid), track, begin)
            .t(k!("dur"), end - begin)
            .raw(k!("name"))
            .raw(name)
            .raw(k!("args"))
            .q(first!("end"), how)
            .n(k!("thread"), m.tid as u64);
        if let Some(ret) = s.ret {
            Json(out).i(k!("return"), ret as i64);
        }
        out.extend_from_slice(b"}}");
        self.functions += 1;
        Ok(())
    }

    /// A USDT probe: an instant on its thread's track, with its arguments.
    fn mark(&mut self, tl: &Timeline, mk: &Mark) -> std::io::Result<()> {
        if !(self.window.0..self.window.1).contains(&mk.time) {
            return Ok(());
        }
        let (_, p, t) = Self::ids(tl, mk.thread);
        let name = func_name(&mut self.funcs, tl, tl.thread(mk.thread).source, mk.probe);
        let out = self.out.next()?;
        Json(out)
            .head("i", "usdt", p, t, mk.time)
            .q(k!("s"), "t")
            .raw(k!("name"))
            .raw(name)
            .raw(k!("args"))
            .n(first!("probe"), mk.probe as u64);
        for (i, &a) in mk.args.iter().take(mk.nargs as usize).enumerate() {
            Json(out).i(USDT_ARGS[i], a as i64);
        }
        out.extend_from_slice(b"}}");
        Ok(())
    }

    /// `end`: (time, how the call ended).
    fn end_call(
        &mut self,
        tl: &Timeline,
        r: ThreadRef,
        func: u32,
        end: (u64, &str),
        ret: Option<u64>,
    ) -> std::io::Result<()> {
        let (_, p, t) = Self::ids(tl, r);
        let name = func_name(&mut self.funcs, tl, tl.thread(r).source, func);
        let out = self.out.next()?;
        Json(out)
            .head("E", "function", p, t, end.0)
            .raw(k!("name"))
            .raw(name)
            .raw(k!("args"))
            .q(first!("end"), end.1);
        if let Some(ret) = ret {
            Json(out).i(k!("return"), ret as i64);
        }
        out.extend_from_slice(b"}}");
        self.functions += 1;
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

    /// Names and order of processes, threads and CPUs, then what was lost, then the end
    /// of the document.
    fn close(&mut self, tl: &Timeline, input: &InputReport) -> std::io::Result<()> {
        let nodes = tl.merger().nodes();
        // On several hosts ids are shifted by the host's number: names give the real ones.
        let several = nodes.len() > 1;
        let at_host = |host: u32| match several {
            false => String::new(),
            true => format!(" on {}", nodes[host as usize].hostname),
        };
        for pm in tl.processes() {
            let host = tl.merger().sources()[pm.source as usize].node;
            let name = match several {
                false => pm.name.clone(),
                true => format!("{} (pid {}){}", pm.name, pm.tgid, at_host(host)),
            };
            self.meta(
                pid(host, pm.tgid),
                None,
                "process_name",
                &Str(&name).to_string(),
            )?;
        }
        for (r, th) in tl.threads().iter().enumerate() {
            let (host, p, t) = Self::ids(tl, r as ThreadRef);
            let st = state_tid(host, th.tid);
            let order = 2 * th.index_in_process as u64;
            let name = match several {
                false => th.name.clone(),
                true => format!("{} (tid {})", th.name, th.tid),
            };
            self.meta(p, Some(t), "thread_name", &Str(&name).to_string())?;
            self.meta(p, Some(t), "thread_sort_index", &order.to_string())?;
            let state_name = format!("{name} state");
            self.meta(p, Some(st), "thread_name", &Str(&state_name).to_string())?;
            self.meta(p, Some(st), "thread_sort_index", &(order + 1).to_string())?;
        }
        let mut goroutines: Vec<_> = self.goroutines.iter().map(|(&k, &n)| (n, k)).collect();
        goroutines.sort_unstable();
        for (n, (host, tgid, g)) in goroutines {
            let name = format!("\"goroutine {g:#x}\"");
            self.meta(
                pid(host, tgid),
                Some(goroutine_tid(host, n)),
                "thread_name",
                &name,
            )?;
        }
        let hosts: BTreeSet<u32> = self.cpus.iter().map(|&(h, _)| h).collect();
        for host in hosts {
            let name = format!("CPUs{}", at_host(host));
            self.meta(
                cpus_pid(host),
                None,
                "process_name",
                &Str(&name).to_string(),
            )?;
        }
        for (host, cpu) in std::mem::take(&mut self.cpus) {
            let (p, t) = (cpus_pid(host), cpu as u64);
            let local = cpu - nodes[host as usize].cpu_base;
            self.meta(p, Some(t), "thread_name", &format!("\"CPU {local}\""))?;
            self.meta(p, Some(t), "thread_sort_index", &t.to_string())?;
        }
        let files: Vec<String> = (tl.merger().sources().iter())
            .map(|s| Str(&s.path.to_string_lossy()).to_string())
            .collect();
        // Regions a salvaging read stepped over: what they held is missing.
        let damaged: Vec<String> = (input.damage.iter())
            .map(|(p, d)| Str(&format!("{}: {d}", p.display())).to_string())
            .collect();
        self.out.buf.extend_from_slice(b"\n]");
        self.samples.write(&mut self.out.buf)?;
        write!(
            self.out.buf,
            ",\n\"otherData\":{{\"producer\":\"tracer {}\",\"inputs\":[{}],\"records\":{},\"lost_by_kernel\":{},\"threads_not_traced\":{},\"out_of_order\":{},\"salvaged\":[{}]}}}}\n",
            env!("CARGO_PKG_VERSION"),
            files.join(","),
            input.records_in,
            input.lost_by_kernel,
            input.threads_not_traced,
            input.out_of_order,
            damaged.join(","),
        )
    }

    /// A metadata event; `value` is JSON.
    fn meta(&mut self, p: u64, t: Option<u64>, what: &str, value: &str) -> std::io::Result<()> {
        let key = if what.ends_with("index") {
            "sort_index"
        } else {
            "name"
        };
        let out = self.out.next()?;
        write!(out, r#"{{"ph":"M","name":"{what}","pid":{p}"#)?;
        if let Some(t) = t {
            write!(out, r#","tid":{t}"#)?;
        }
        write!(out, r#","args":{{"{key}":{value}}}}}"#)
    }
}

/// A system call is a leaf inside the function calls of its thread. Records lost (a
/// system call's exit, a function's entry) can make them cross; the slice of the system
/// call is then cut at the function's edge, as viewers require slices to nest.
#[derive(Clone, Default)]
struct ThreadTrack {
    /// Entry time and number of the system call under way.
    sys_open: Option<(u64, u32)>,
    /// Calls under way: (probe id, its `B` is written).
    calls: Vec<(u32, bool)>,
    /// The first function edge since that entry.
    sys_clip: Option<u64>,
    /// The latest function edge.
    last_func: u64,
}

impl ThreadTrack {
    fn func_event(&mut self, t: u64) {
        if self.sys_open.is_some() && self.sys_clip.is_none() {
            self.sys_clip = Some(t);
        }
        self.last_func = t;
    }

    /// (begin, end, clipped) of a system call's slice.
    fn sys_slice(&mut self, s: &SyscallSpan) -> (u64, u64, bool) {
        let clip = self.sys_clip.take();
        let open = self.sys_open.take();
        let (mut begin, mut end) = (s.begin, s.end);
        if s.entered && open.map(|o| o.0) == Some(s.begin) {
            end = clip.map_or(end, |c| c.min(end));
        } else {
            // Under way when its thread was first seen: it began after any function edge.
            begin = begin.max(self.last_func).min(end);
        }
        (begin, end, (begin, end) != (s.begin, s.end))
    }
}

/// A function's name as a JSON string, looked up and escaped once.
fn func_name<'a>(
    cache: &'a mut HashMap<(u32, u32), String>,
    tl: &Timeline,
    source: u32,
    func: u32,
) -> &'a str {
    cache.entry((source, func)).or_insert_with(|| {
        let name = match tl.merger().sources()[source as usize].probe(func) {
            Some(p) => p.name.clone(),
            None => format!("function_{func}"),
        };
        Str(&name).to_string()
    })
}

fn end_name(e: SpanEnd) -> &'static str {
    match e {
        SpanEnd::Returned => "returned",
        SpanEnd::Unwound => "unwound",
        SpanEnd::Exited => "thread exited",
        SpanEnd::TraceEnded => "trace ended",
    }
}
