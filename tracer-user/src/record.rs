//! `tracer record` and `tracer stat`: the loop that drains, writes, rotates and stops.
//! What is set up before it is in `session`; what differs between recording every event
//! and counting in the kernel is [`Mode`].

use std::{
    path::PathBuf,
    sync::{atomic::AtomicBool, Arc},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use trace_file::{ChunkKind, Event};

use crate::{
    clock,
    drain::Drain,
    files::{Files, Rotation},
    kernel::{Kernel, Losses},
    session::Session,
    stat::{Counting, StatOptions},
    status::{RecordSummary, Status},
    trigger::{Trigger, Watch},
};

/// What to record and where.
pub struct RecordOptions {
    pub pids: Vec<u32>,
    /// A command to launch and trace from its first instruction.
    pub command: Vec<String>,
    pub uprobes: Vec<String>,
    pub allow_multiple: bool,
    pub duration: Option<Duration>,
    pub output: PathBuf,
    pub force: bool,
    /// Print nothing but errors.
    pub quiet: bool,
    /// Attach programs that record nothing (benchmarks: the kernel's floor).
    pub empty_probes: bool,
    /// Counting mode (`tracer stat`) instead of recording every event.
    pub stat: Option<StatOptions>,
    /// Start a new file every so often: counting for days, or a flight recorder that
    /// keeps the last few files of full detail.
    pub rotate: Option<Rotation>,
    /// Stop once a call of a probed function takes this long (and a little after).
    pub trigger: Option<Trigger>,
}

/// Sleep between drains when the buffers were empty. The programs never wake us: a
/// wakeup per record costs far more than polling (docs/performance.md).
const IDLE_POLL: Duration = Duration::from_millis(10);

/// What a recording does besides writing every record it drains.
enum Mode {
    /// Every event: a trigger may end the run.
    Trace { watch: Option<Watch> },
    /// Counting: a window of the kernel's counts every interval.
    Stat(Box<Counting>),
}

impl Mode {
    /// After a drain: names learned, windows written. Returns whether the file may end
    /// here (a counting file ends with a window).
    fn tick(&mut self, kernel: &mut Kernel, d: &mut Drain, names: &mut Names) -> Result<bool> {
        match self {
            Mode::Trace { .. } => Ok(true),
            Mode::Stat(c) => {
                for (tid, tgid, name) in names.drain(..) {
                    c.saw(tid, tgid, &name);
                }
                c.tick(kernel, &mut d.w)
            }
        }
    }
}

/// Thread names learned from records (tid, tgid if known, name), for counting mode's
/// windows.
type Names = Vec<(u32, Option<u32>, String)>;

/// Records or counts until stopped; returns what was done.
pub fn record(opts: &RecordOptions) -> Result<RecordSummary> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing the signal handlers")?;
    }
    let (mut s, writer) = Session::start(opts)?;
    let mut mode = match opts.stat {
        Some(st) => Mode::Stat(Box::new(Counting::new(
            st,
            &s.preamble.probes,
            &s.threads,
            s.seeded_at,
            opts.quiet,
        ))),
        None => Mode::Trace {
            watch: s.watch.take(),
        },
    };
    let mut d = Drain::new(writer, s.cpus);
    let mut files = Files::new(s.first.clone());
    let started = Instant::now();
    let counting = matches!(mode, Mode::Stat(_));
    let mut status = Status::new(opts.quiet || counting);

    let reason = run(
        opts,
        &mut s,
        &mut mode,
        &mut d,
        &mut files,
        &stop,
        &mut status,
    )?;

    // Stop the producers, then take what is still in the buffers.
    s.kernel.stop();
    let mut names = Names::new();
    d.drain(&mut s.kernel, |ts, tid, e| {
        see(&mut mode, &mut names, ts, tid, e)
    })?;
    d.flush_all()?;
    if let Mode::Stat(c) = &mut mode {
        for (tid, tgid, name) in names.drain(..) {
            c.saw(tid, tgid, &name);
        }
        c.window(&mut s.kernel, &mut d.w)?;
    }
    let losses = losses(&s.kernel, &d)?;
    files.finish(&mut d, &losses, reason)?;
    status.clear();
    Ok(RecordSummary {
        records: d.kinds().collect(),
        lost: losses.total(),
        bytes: files.bytes_before + d.w.bytes_written(),
        seconds: started.elapsed().as_secs_f64(),
        reason,
        output: files.current,
        files: files.written,
    })
}

/// The loop: drain, write, rotate, until a reason to stop.
fn run(
    opts: &RecordOptions,
    s: &mut Session,
    mode: &mut Mode,
    d: &mut Drain,
    files: &mut Files,
    stop: &AtomicBool,
    status: &mut Status,
) -> Result<&'static str> {
    let started = Instant::now();
    let mut stop_at: Option<Instant> = None;
    let mut last_check = Instant::now();
    let mut lost = 0;
    let mut names = Names::new();
    loop {
        let drained = d.drain(&mut s.kernel, |ts, tid, e| {
            see(mode, &mut names, ts, tid, e)
        })?;
        d.flush_aged()?;
        let may_rotate = mode.tick(&mut s.kernel, d, &mut names)?;
        if let Some(rot) = opts.rotate.filter(|r| may_rotate && files.due(r.every)) {
            // A counting file starts where the previous one's last window ended.
            let start_ns = match mode {
                Mode::Stat(c) => c.new_file(),
                Mode::Trace { .. } => clock::monotonic_ns(),
            };
            let losses = losses(&s.kernel, d)?;
            files.rotate(
                d,
                losses,
                &s.preamble,
                start_ns,
                &opts.output,
                opts.force,
                rot.keep,
            )?;
        }
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok("signal");
        }
        if stop_at.is_none() {
            stop_at = fired(mode, opts.quiet).map(|after| Instant::now() + after);
        }
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            return Ok("trigger");
        }
        if opts.duration.is_some_and(|t| started.elapsed() >= t) {
            return Ok("duration");
        }
        if last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            if s.all_exited(&opts.pids) {
                return Ok("process exited");
            }
            let losses = losses(&s.kernel, d)?;
            if losses.total() != lost {
                // Losses are on record as they happen, not only if we get to the end.
                lost = losses.total();
                let in_file = files.losses_in_file(&losses);
                d.w.meta(ChunkKind::Lost, &in_file.counts(clock::monotonic_ns()))?;
            }
            status.lost = lost;
        }
        status.tick(started.elapsed(), d);
        if drained == 0 {
            std::thread::sleep(IDLE_POLL);
        }
    }
}

/// One drained record, as the mode needs to see it.
#[inline]
fn see(mode: &mut Mode, names: &mut Names, ts: u64, tid: u32, event: &Event) {
    match mode {
        Mode::Trace { watch: Some(w) } => w.see(ts, tid, event),
        Mode::Trace { watch: None } => {}
        Mode::Stat(_) => match *event {
            Event::NewTask {
                child_tid,
                child_tgid,
                comm,
            } => names.push((child_tid, Some(child_tgid), comm.as_str().into_owned())),
            Event::Rename { comm } | Event::Exec { comm } => {
                names.push((tid, None, comm.as_str().into_owned()))
            }
            _ => {}
        },
    }
}

/// How long to go on once the trigger has fired (said once, on stderr).
fn fired(mode: &Mode, quiet: bool) -> Option<Duration> {
    let Mode::Trace { watch: Some(w) } = mode else {
        return None;
    };
    let (tid, ns, name) = w.fired()?;
    if !quiet {
        let ms = ns as f64 / 1e6;
        eprintln!(
            "trigger: {name} took {ms:.3} ms on thread {tid}; recording {:?} more",
            w.after
        );
    }
    Some(w.after)
}

/// Everything lost so far: the kernel's counts and the records that did not decode.
fn losses(kernel: &Kernel, d: &Drain) -> Result<Losses> {
    let mut l = kernel.losses()?;
    for (n, u) in l.per_cpu.iter_mut().zip(&d.undecodable) {
        *n += u;
    }
    Ok(l)
}
