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
    procfs,
    session::Session,
    stat::{Counting, StatOptions},
    status::{RecordSummary, Status},
    tree::Tree,
    trigger::{Trigger, Watch},
};

/// What to record and where.
pub struct RecordOptions {
    pub pids: Vec<u32>,
    /// A command to launch and trace from its first instruction.
    pub command: Vec<String>,
    pub uprobes: Vec<String>,
    /// How specs are matched (ambiguity, returns of programs that switch stacks).
    pub matching: symbolizer::Options,
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
    /// Trace the processes the traced ones create (and those they created before), not
    /// only their threads.
    pub inherit: bool,
    /// Trace a cgroup v2: the processes in it and those that enter it.
    pub cgroup: Option<String>,
    /// The event classes recorded or counted.
    pub events: Events,
    /// Only these system calls (numbers), when given.
    pub syscalls: Option<Vec<u32>>,
    /// Record stacks (`--stacks`), with on-CPU samples at this frequency (Hz).
    pub stacks: Option<u64>,
}

/// The classes of events recorded or counted (`--events`); one that is off is not
/// attached, so it costs nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Events {
    /// Probed functions and USDT probes.
    pub calls: bool,
    /// Thread states, switches and wakeups.
    pub sched: bool,
    /// System calls.
    pub syscalls: bool,
}

impl Events {
    /// Every class.
    pub const ALL: Events = Events {
        calls: true,
        sched: true,
        syscalls: true,
    };
}

impl std::str::FromStr for Events {
    type Err = String;

    /// `calls,sched,syscalls` (any of them), or `all`.
    fn from_str(s: &str) -> Result<Events, String> {
        let mut e = Events {
            calls: false,
            sched: false,
            syscalls: false,
        };
        for class in s.split(',').map(str::trim) {
            match class {
                "calls" => e.calls = true,
                "sched" => e.sched = true,
                "syscalls" => e.syscalls = true,
                "all" => e = Events::ALL,
                _ => {
                    return Err(format!(
                        "unknown event class `{class}` (calls, sched, syscalls or all)"
                    ))
                }
            }
        }
        Ok(e)
    }
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
    /// Counting (with its stacks) for `tracer stat`, else recording, watched by the
    /// session's trigger if it has one.
    fn new(opts: &RecordOptions, s: &mut Session) -> Mode {
        match opts.stat {
            Some(st) => {
                let c = Counting::new(st, &s.preamble.probes, &s.threads, s.seeded_at, opts.quiet);
                Mode::Stat(Box::new(match opts.stacks {
                    Some(hz) => c.with_stacks(hz),
                    None => c,
                }))
            }
            None => Mode::Trace {
                watch: s.watch.take(),
            },
        }
    }

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
    let mut run = Run::start(opts)?;
    let ran = run.run(&stop);
    run.status.clear();
    let reason = ran.map_err(|e| run.files.explain(e))?;
    let losses = run.end(reason).map_err(|e| run.files.explain(e))?;
    run.summary(&losses, reason)
}

/// The loop's state: what it reads, writes and keeps up to date. Its fields are dropped
/// in the order they are declared: the session, whose drop detaches the programs and
/// ends a launched command, last.
struct Run<'a> {
    opts: &'a RecordOptions,
    /// When the recording started (the session set up).
    started: Instant,
    tree: Tree,
    status: Status,
    files: Files,
    d: Drain,
    mode: Mode,
    s: Session,
}

impl<'a> Run<'a> {
    /// The session set up (resolved, loaded, attached) and the loop's state around it.
    fn start(opts: &'a RecordOptions) -> Result<Run<'a>> {
        let (mut s, writer) = Session::start(opts)?;
        let mode = Mode::new(opts, &mut s);
        let mut d = Drain::new(writer, s.cpus);
        if opts.stacks.is_some() && opts.stat.is_none() {
            d.stacks = Some(crate::stacks::Stacks::new());
        }
        let files = Files::new(s.first.clone());
        let started = Instant::now();
        let counting = matches!(mode, Mode::Stat(_));
        let status = Status::new(opts.quiet || counting);
        let tree = Tree::new(&s.pids, &s.threads);
        Ok(Run {
            opts,
            started,
            tree,
            status,
            files,
            d,
            mode,
            s,
        })
    }

    /// Ends the recording now: what the buffers and the counts hold is taken before the
    /// producers are detached, which takes a grace period per uprobe of a process (seconds
    /// to minutes with hundreds), and what they make meanwhile is left out (a file that
    /// ran on to the detach's end showed every thread blocked all that time). Returns the
    /// losses of the recording.
    fn end(&mut self, reason: &str) -> Result<Losses> {
        let (s, mode, d, tree) = (&mut self.s, &mut self.mode, &mut self.d, &mut self.tree);
        let mut names = Names::new();
        d.drain(&mut s.kernel, |ts, tid, e| {
            see(mode, tree, &mut names, ts, tid, e)
        })?;
        if let Mode::Stat(c) = mode {
            for (tid, tgid, name) in names.drain(..) {
                c.saw(tid, tgid, &name);
            }
            c.window(&mut s.kernel, &mut d.w)?;
        }
        let end_ns = crate::clock::monotonic_ns();
        d.until = Some(end_ns);
        // What the kernel drops or skips from here on is after the end, as what it
        // records is: not a loss of the recording.
        let kernel_at_end = s.kernel.losses()?;
        let n = s.kernel.per_process_uprobes();
        if !self.opts.quiet && n >= crate::kernel::SLOW_DETACH {
            eprintln!("tracer: detaching {n} uprobes attached per process (the kernel undoes them one at a time)...");
        }
        s.kernel.stop();
        d.drain(&mut s.kernel, |ts, tid, e| {
            see(mode, tree, &mut names, ts, tid, e)
        })?;
        tree.settle();
        // Processes created since the loop last looked: their Process chunks too.
        for fork in tree.take_changes().forks {
            d.w.meta(
                ChunkKind::Process,
                &s.kernel.process_info(fork.child, false),
            )?;
        }
        d.flush_all()?;
        let after = s.kernel.losses()?.since(&kernel_at_end).total();
        d.after_end += after;
        let losses = with_undecodable(kernel_at_end, d);
        self.files.finish(d, &losses, reason, end_ns)?;
        Ok(losses)
    }

    /// What was done, once the recording has ended with `losses`.
    fn summary(self, losses: &Losses, reason: &'static str) -> Result<RecordSummary> {
        Ok(RecordSummary {
            records: self.d.kinds().collect(),
            lost: losses.total(),
            stacks_shed: losses.stacks_shed,
            bytes: self.files.bytes_before + self.d.w.bytes_written(),
            seconds: self.started.elapsed().as_secs_f64(),
            reason,
            output: self.files.current,
            files: self.files.written,
            processes: self.tree.processes,
            threads: self.tree.threads,
            late_probes: self.s.probes.late,
            uncertain_probes: self.s.probes.uncertain,
            second_hand_probes: self.s.probes.second_hand,
            exec_dropped_probes: self.s.probes.exec_dropped,
            exited_while_attaching: self.s.probes.exited_while_attaching,
            stacks_cut: self
                .d
                .stacks
                .as_ref()
                .map(|st| st.cut.iter().map(|(k, &n)| (k.clone(), n)).collect())
                .unwrap_or_default(),
            after_end: self.d.after_end,
            frames_unclosed: match self.mode {
                Mode::Stat(_) => self.s.kernel.frames_unclosed()?,
                Mode::Trace { .. } => 0,
            },
            windows: match &self.mode {
                Mode::Stat(c) => Some(c.windows),
                Mode::Trace { .. } => None,
            },
            command_status: self.s.launched.as_ref().and_then(|l| l.exit_code()),
        })
    }

    /// Drains, writes, rotates, until a reason to stop.
    fn run(&mut self, stop: &AtomicBool) -> Result<&'static str> {
        let opts = self.opts;
        let started = Instant::now();
        let mut stop_at: Option<Instant> = None;
        let mut last_check = Instant::now();
        let mut names = Names::new();
        loop {
            let (mode, tree) = (&mut self.mode, &mut self.tree);
            let drained = self.d.drain(&mut self.s.kernel, |ts, tid, e| {
                see(mode, tree, &mut names, ts, tid, e)
            })?;
            tree.settle();
            self.d.flush_aged()?;
            self.follow_tree()?;
            let may_rotate = self
                .mode
                .tick(&mut self.s.kernel, &mut self.d, &mut names)?;
            if let Some(rot) = opts
                .rotate
                .filter(|r| may_rotate && self.files.due(r.every))
            {
                self.rotate(rot)?;
            }
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok("signal");
            }
            if stop_at.is_none() {
                stop_at = fired(&self.mode, opts.quiet).map(|after| Instant::now() + after);
            }
            if stop_at.is_some_and(|t| Instant::now() >= t) {
                return Ok("trigger");
            }
            if opts.duration.is_some_and(|t| started.elapsed() >= t) {
                return Ok("duration");
            }
            if last_check.elapsed() >= Duration::from_millis(100) {
                last_check = Instant::now();
                if let Some(reason) = self.ended() {
                    return Ok(reason);
                }
                self.note_losses()?;
            }
            self.status.tick(started.elapsed(), &self.d, &self.tree);
            if drained == 0 {
                std::thread::sleep(IDLE_POLL);
            }
        }
    }

    /// Processes created while recording get their probes and their Process chunk; those
    /// gone are forgotten.
    fn follow_tree(&mut self) -> Result<()> {
        let changes = self.tree.take_changes();
        for fork in &changes.forks {
            match fork.newcomer {
                false => self.s.probes.adopt(&mut self.s.kernel, fork)?,
                // It entered the traced cgroup: the probes of what it runs.
                true => self
                    .s
                    .probes
                    .adopt_newcomer(&mut self.s.kernel, fork.child)?,
            }
            let info = self.s.kernel.process_info(fork.child, false);
            self.d.w.meta(ChunkKind::Process, &info)?;
        }
        for &pid in &changes.execs {
            self.s.probes.executed(&mut self.s.kernel, pid)?;
        }
        for pid in changes.exits {
            self.s.probes.exited(pid);
        }
        Ok(())
    }

    /// Why the recording ends by itself, if it does now: a traced cgroup removed, or
    /// every traced process gone.
    fn ended(&mut self) -> Option<&'static str> {
        match &self.s.cgroup {
            Some(cg) => (!cg.exists()).then_some("cgroup removed"),
            None => self.all_exited().then_some("process exited"),
        }
    }

    /// True once every traced process is gone (and the launched command reaped). The
    /// records say which are alive; /proc corrects them when an exit record was lost.
    fn all_exited(&mut self) -> bool {
        let stale: Vec<u32> = (self.tree.live().iter().copied())
            .filter(|&p| !procfs::alive(p))
            .take(64)
            .collect();
        for pid in stale {
            self.tree.gone(pid);
        }
        self.tree.live().is_empty() && self.s.launched.as_ref().is_none_or(|l| l.exited())
    }

    /// Losses are on record as they happen, not only if we get to the end.
    fn note_losses(&mut self) -> Result<()> {
        let losses = losses(&self.s.kernel, &self.d)?;
        if (losses.total(), losses.stacks_shed) != (self.status.lost, self.status.stacks_shed) {
            self.status.lost = losses.total();
            self.status.stacks_shed = losses.stacks_shed;
            let in_file = self.files.losses_in_file(&losses);
            self.d
                .w
                .meta(ChunkKind::Lost, &in_file.counts(clock::monotonic_ns()))?;
        }
        Ok(())
    }

    /// Ends the current file and goes on in a new one. A counting file starts where the
    /// previous one's last window ended.
    fn rotate(&mut self, rot: Rotation) -> Result<()> {
        let start_ns = match &mut self.mode {
            Mode::Stat(c) => c.new_file(),
            Mode::Trace { .. } => clock::monotonic_ns(),
        };
        let losses = losses(&self.s.kernel, &self.d)?;
        let pids: Vec<u32> = self.tree.live().iter().copied().collect();
        let traced = self.s.preamble.traced(&mut self.s.kernel, &pids);
        self.files.rotate(
            &mut self.d,
            losses,
            &self.s.preamble,
            &traced,
            start_ns,
            &self.opts.output,
            self.opts.force,
            rot.keep,
        )
    }
}

/// One drained record, as the tree and the mode need to see it.
#[inline]
fn see(mode: &mut Mode, tree: &mut Tree, names: &mut Names, ts: u64, tid: u32, event: &Event) {
    if matches!(
        event,
        Event::NewTask { .. } | Event::Exit { .. } | Event::Exec { .. }
    ) {
        tree.see(ts, tid, event);
    }
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
    Ok(with_undecodable(kernel.losses()?, d))
}

/// The kernel's counts `l` with the records that reached the rings undecodable.
fn with_undecodable(mut l: Losses, d: &Drain) -> Losses {
    for (n, u) in l.per_cpu.iter_mut().zip(&d.undecodable) {
        *n += u;
    }
    l
}
