//! `tracer record`: attach to processes, drain the per-CPU ring buffers, write the trace.

use std::{
    collections::BTreeMap,
    ffi::CString,
    fs::File,
    io::{BufWriter, IsTerminal, Write},
    path::PathBuf,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use trace_file::{ChunkKind, Event, EventChunkEncoder, Probe, TraceHeader, Trailer, Writer};
use tracer_abi as abi;

use crate::{
    kernel::{Kernel, Losses},
    output, probes, procfs,
    stat::{self, Counting, StatOptions},
    tracefs,
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
    /// Attach uprobe programs that record nothing (benchmarks: the kernel's floor).
    pub empty_probes: bool,
    /// Counting mode (`tracer stat`) instead of recording every event.
    pub stat: Option<StatOptions>,
    /// Start a new file every so often: counting for days, or a flight recorder that
    /// keeps the last few files of full detail.
    pub rotate: Option<Rotation>,
    /// Stop once a call of a probed function takes this long (and a little after).
    pub trigger: Option<Trigger>,
}

/// `--trigger FUNC>DURATION`: the recording ends `after` the first call of `func` that
/// took at least `min`, so the files hold what led to it.
#[derive(Clone, Debug)]
pub struct Trigger {
    pub func: String,
    pub min: Duration,
    pub after: Duration,
}

impl Trigger {
    /// `spec` is `FUNC>DURATION`, e.g. `handle_request>50ms`.
    pub fn parse(spec: &str, after: Duration) -> Result<Trigger> {
        let Some((func, min)) = spec.rsplit_once('>') else {
            bail!("invalid trigger `{spec}` (use FUNC>DURATION, e.g. handle_request>50ms)");
        };
        let func = func.trim();
        if func.is_empty() {
            bail!("invalid trigger `{spec}`: no function before `>`");
        }
        Ok(Trigger {
            func: func.to_string(),
            min: crate::parse_duration(min).map_err(|e| anyhow!(e))?,
            after,
        })
    }
}

/// Files of a long run: each is complete (header to trailer) and holds its own windows,
/// so any of them reads alone and all of them summarize together.
#[derive(Clone, Copy)]
pub struct Rotation {
    pub every: Duration,
    /// Keep only the newest N files of this run (0: all).
    pub keep: usize,
}

/// Totals of a finished recording.
pub struct RecordSummary {
    pub records: BTreeMap<&'static str, u64>,
    pub lost: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub reason: &'static str,
    /// The file written last.
    pub output: PathBuf,
    /// Files written (more than one with rotation).
    pub files: u64,
}

/// Flush a CPU's encoded records once they reach this size...
const CHUNK_BYTES: usize = 256 << 10;
/// ...or this age, so a killed recorder loses at most this much.
const CHUNK_AGE: Duration = Duration::from_millis(500);
/// Sleep between drains when the buffers were empty. The programs never wake us: a
/// per-record wakeup costs ~3x throughput.
const IDLE_POLL: Duration = Duration::from_millis(10);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// A process we launched, held at the exec until the probes are attached.
struct Launched {
    pid: u32,
    go: libc::c_int,
}

impl Launched {
    /// Forks `command` (its program already found at `program`), held before exec.
    fn spawn(program: &std::path::Path, command: &[String]) -> Result<Launched> {
        let path = CString::new(program.as_os_str().as_encoded_bytes())?;
        let args: Vec<CString> = command
            .iter()
            .map(|a| CString::new(a.as_str()))
            .collect::<Result<_, _>>()?;
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut fds = [0; 2];
        // SAFETY: pipe(2) into a local array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            bail!("pipe: {}", std::io::Error::last_os_error());
        }
        // SAFETY: the child only calls async-signal-safe functions (read, execv, _exit)
        // on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            unsafe {
                libc::close(fds[1]);
                let mut b = 0u8;
                // Wait until the parent has attached everything (or died: read gets 0).
                if libc::read(fds[0], (&mut b as *mut u8).cast(), 1) == 1 {
                    libc::execv(path.as_ptr(), argv.as_ptr());
                }
                libc::_exit(127);
            }
        }
        // SAFETY: closing our copy of the read end.
        unsafe { libc::close(fds[0]) };
        Ok(Launched {
            pid: pid as u32,
            go: fds[1],
        })
    }

    fn release(&self) {
        // SAFETY: one byte to the pipe the child waits on.
        unsafe {
            libc::write(self.go, b"g".as_ptr().cast(), 1);
            libc::close(self.go);
        }
    }

    /// True once the child has exited (and reaps it).
    fn exited(&self) -> bool {
        let mut status = 0;
        // SAFETY: non-blocking wait on our own child.
        unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) == self.pid as i32 }
    }
}

pub fn record(opts: &RecordOptions) -> Result<RecordSummary> {
    for &pid in &opts.pids {
        procfs::check_alive(pid)?;
    }
    if !procfs::privileged() {
        bail!("tracing needs root (or CAP_BPF and CAP_PERFMON): run tracer record with sudo");
    }
    let tracefs = tracefs::ensure_mounted()?;
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing); the tracer needs CONFIG_DEBUG_INFO_BTF=y");
    }
    let offsets = tracefs::offsets(&tracefs)?;

    // Resolve probes before touching the kernel or the output, so a typo costs nothing.
    let launch_target = if opts.command.is_empty() {
        None
    } else {
        Some(
            procfs::which(&opts.command[0])
                .ok_or_else(|| anyhow!("command not found: {}", opts.command[0]))?,
        )
    };
    let resolved = probes::resolve_all(
        &opts.uprobes,
        &opts.pids,
        launch_target.as_deref(),
        opts.allow_multiple,
    )?;

    let watch = match &opts.trigger {
        Some(t) => Some(Watch::new(t, &resolved)?),
        None => None,
    };
    let first_path = match opts.rotate {
        Some(_) => segment_path(&opts.output, std::time::SystemTime::now()),
        None => opts.output.clone(),
    };
    let file = output::create_exclusive(&first_path, opts.force)?;
    let cpus = procfs::possible_cpus()?;
    let config = match opts.stat {
        None => tracer_abi::Config::RECORD,
        Some(s) => tracer_abi::Config {
            stat_mode: 1,
            sample_every: s.sample_every,
        },
    };
    let mut kernel = Kernel::load(cpus, &offsets, &config)?;
    install_signal_handlers();

    let launched = match &launch_target {
        Some(program) => Some(Launched::spawn(program, &opts.command)?),
        None => None,
    };
    let mut pids = opts.pids.clone();
    if let Some(l) = &launched {
        pids.push(l.pid);
    }
    for &pid in &pids {
        kernel.trace_process(pid)?;
    }
    // Tracepoints first, then the thread list: a thread created in between is caught by
    // task_newtask (its process is already in the filter) and listed by /proc as well.
    kernel.attach_tracepoints(opts.empty_probes)?;
    let mut threads = Vec::new();
    let seeded_at = monotonic_ns();
    for &pid in &pids {
        for t in procfs::threads(pid)? {
            kernel.trace_thread(t.tid, pid)?;
            if opts.stat.is_some() {
                let seed = tracer_abi::ThreadSched {
                    since: seeded_at,
                    state: stat::seed_state(pid, t.tid, t.state),
                    cpu: procfs::last_cpu(pid, t.tid).unwrap_or(0),
                    exec_base: procfs::exec_ns(pid, t.tid).unwrap_or(0),
                    ..Default::default()
                };
                kernel.seed_thread(t.tid, seed)?;
            }
            threads.push(t);
        }
    }
    let mut table: Vec<Probe> = Vec::new();
    if !resolved.is_empty() {
        kernel.load_uprobes(opts.empty_probes)?;
        for (i, r) in resolved.iter().enumerate() {
            let id = i as u32 + 1;
            for pid in &r.pids {
                let pid = match pid {
                    Some(p) => *p,
                    None => launched.as_ref().map(|l| l.pid).unwrap_or_default(),
                };
                kernel.attach_uprobe(&r.func.binary, r.func.file_offset, id, pid)?;
            }
            table.push(probes::table_entry(id, &r.func));
        }
    }

    let start_ns = monotonic_ns();
    let preamble = Preamble {
        header: TraceHeader {
            tracer_version: env!("CARGO_PKG_VERSION").into(),
            hostname: hostname(),
            kernel: kernel_release(),
            cpus,
            clock: "CLOCK_MONOTONIC".into(),
            monotonic_to_realtime_ns: monotonic_to_realtime(),
            start_ns,
            command_line: std::env::args().collect(),
            mode: if opts.stat.is_some() {
                "stat"
            } else {
                "record"
            }
            .into(),
            // Files of one rotating run say so, so that they merge as one recording.
            run: match opts.rotate {
                Some(_) => format!("{}-{}-{start_ns}", hostname(), std::process::id()),
                None => String::new(),
            },
            part: opts.rotate.map_or(0, |_| 1),
        },
        pids: pids.clone(),
        launched: launched.as_ref().map(|l| l.pid),
        probes: table.clone(),
    };
    let w = preamble.write(file, &threads)?;
    if let Some(l) = &launched {
        l.release();
    }

    let mut counting = opts
        .stat
        .map(|s| Counting::new(s, &table, &threads, seeded_at, opts.quiet));
    let mut rec = Recorder::new(w, cpus);
    rec.watch = watch;
    let mut stop_at: Option<Instant> = None;
    let mut files = Files {
        current: first_path,
        older: std::collections::VecDeque::new(),
        started: Instant::now(),
        base_losses: Losses::default(),
        base_counts: [0; Event::KINDS],
        written: 1,
        bytes_before: 0,
    };
    let started = Instant::now();
    let status = !opts.quiet && std::io::stderr().is_terminal() && counting.is_none();
    let mut last_status = Instant::now();
    let mut last_check = Instant::now();
    let reason = loop {
        let drained = rec.drain(&mut kernel)?;
        rec.flush_aged()?;
        // A counting file ends with a window; a trace file at any time.
        let mut may_rotate = true;
        if let Some(c) = &mut counting {
            for (tid, tgid, name) in rec.names.drain(..) {
                c.saw(tid, tgid, &name);
            }
            may_rotate = c.tick(&mut kernel, &mut rec.w)?;
        }
        if let Some(rot) = opts
            .rotate
            .filter(|r| may_rotate && files.started.elapsed() >= r.every)
        {
            // A counting file starts where the previous one's last window ended.
            let start_ns = counting
                .as_mut()
                .map_or_else(monotonic_ns, |c| c.new_file());
            files.rotate(&mut rec, &kernel, &preamble, start_ns, opts, rot.keep)?;
        }
        if STOP.load(Ordering::Relaxed) {
            break "signal";
        }
        if stop_at.is_none() {
            stop_at = rec.fired(opts.quiet).map(|after| Instant::now() + after);
        }
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            break "trigger";
        }
        if opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break "duration";
        }
        if last_check.elapsed() >= Duration::from_millis(100) {
            last_check = Instant::now();
            let gone = match &launched {
                Some(l) => l.exited() && opts.pids.iter().all(|&p| !procfs::alive(p)),
                None => pids.iter().all(|&p| !procfs::alive(p)),
            };
            if gone {
                break "process exited";
            }
            let losses = kernel.losses()?;
            let lost = losses.total();
            if lost != rec.lost {
                // Losses are on record as they happen, not only if we get to the end.
                rec.lost = lost;
                let in_file = losses.since(&files.base_losses);
                rec.w
                    .meta(ChunkKind::Lost, &in_file.counts(monotonic_ns()))?;
            }
        }
        if status && last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            rec.print_status(started.elapsed());
        }
        if drained == 0 {
            std::thread::sleep(IDLE_POLL);
        }
    };
    // Stop the producers, then take what is still in the buffers.
    kernel.stop();
    rec.drain(&mut kernel)?;
    rec.flush_all()?;
    if let Some(c) = &mut counting {
        for (tid, tgid, name) in rec.names.drain(..) {
            c.saw(tid, tgid, &name);
        }
        c.window(&mut kernel, &mut rec.w)?;
    }
    let losses = kernel.losses()?;
    let lost = losses.total();
    files.finish(&mut rec, &losses, reason)?;
    if status {
        eprint!("\r\x1b[K");
    }
    if let Some(l) = &launched {
        if !l.exited() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(l.pid as i32, libc::SIGTERM) };
        }
    }
    Ok(RecordSummary {
        records: rec.counts().collect(),
        lost,
        bytes: files.bytes_before + rec.w.bytes_written(),
        seconds: started.elapsed().as_secs_f64(),
        reason,
        output: files.current,
        files: files.written,
    })
}

/// Times the calls of the function a trigger watches, from the records as they drain.
struct Watch {
    func: u32,
    name: String,
    min_ns: u64,
    after: Duration,
    /// Entry times of calls under way, per thread (a stack: calls may nest).
    open: std::collections::HashMap<u32, Vec<u64>>,
    /// The first call that took long enough: (thread, ns).
    fired: Option<(u32, u64)>,
}

impl Watch {
    fn new(t: &Trigger, resolved: &[probes::Resolved]) -> Result<Watch> {
        let names: Vec<&str> = resolved.iter().map(|r| r.func.name.as_str()).collect();
        let Some(i) = names.iter().position(|&n| n == t.func) else {
            bail!(
                "--trigger: `{}` is not a probed function (probed: {})",
                t.func,
                names.join(", ")
            );
        };
        Ok(Watch {
            func: i as u32 + 1,
            name: t.func.clone(),
            min_ns: t.min.as_nanos() as u64,
            after: t.after,
            open: std::collections::HashMap::new(),
            fired: None,
        })
    }

    fn see(&mut self, ts: u64, tid: u32, event: &Event) {
        match *event {
            Event::FuncEntry { func } if func == self.func => {
                self.open.entry(tid).or_default().push(ts);
            }
            Event::FuncExit { func, .. } if func == self.func => {
                let Some(entry) = self.open.get_mut(&tid).and_then(Vec::pop) else {
                    return;
                };
                let ns = ts.saturating_sub(entry);
                if ns >= self.min_ns && self.fired.is_none() {
                    self.fired = Some((tid, ns));
                }
            }
            _ => {}
        }
    }
}

/// What every file of a run starts with.
#[derive(Clone)]
struct Preamble {
    header: TraceHeader,
    pids: Vec<u32>,
    launched: Option<u32>,
    probes: Vec<Probe>,
}

impl Preamble {
    /// Starts a file: header, processes, the threads as of now, probes.
    fn write(
        &self,
        file: File,
        threads: &[trace_file::ThreadInfo],
    ) -> Result<Writer<BufWriter<File>>> {
        let mut w = Writer::new(BufWriter::with_capacity(1 << 20, file))?;
        w.meta(ChunkKind::Header, &self.header)?;
        for &pid in &self.pids {
            let launched_here = self.launched == Some(pid);
            w.meta(ChunkKind::Process, &procfs::process(pid, launched_here))?;
        }
        w.meta(ChunkKind::Threads, &threads)?;
        w.meta(ChunkKind::Probes, &self.probes)?;
        w.flush()?;
        Ok(w)
    }
}

/// The file being written, and with rotation the ones before it. Each file's lost and
/// record counts are its own.
struct Files {
    current: PathBuf,
    /// Earlier files of this run still on disk, oldest first.
    older: std::collections::VecDeque<PathBuf>,
    started: Instant,
    base_losses: Losses,
    base_counts: [u64; Event::KINDS],
    written: u64,
    /// Bytes of the files before the current one.
    bytes_before: u64,
}

impl Files {
    /// Ends the current file: what it lost, then the trailer; on disk before returning.
    fn finish(&self, rec: &mut Recorder, losses: &Losses, reason: &str) -> Result<()> {
        let end_ns = monotonic_ns();
        let in_file = losses.since(&self.base_losses);
        rec.w.meta(ChunkKind::Lost, &in_file.counts(end_ns))?;
        let records = (rec.counts.iter().zip(self.base_counts).enumerate())
            .filter(|(_, (&n, base))| n > *base)
            .map(|(i, (&n, base))| (Event::KIND_NAMES[i].to_string(), n - base))
            .collect();
        rec.w.meta(
            ChunkKind::Trailer,
            &Trailer {
                end_ns,
                reason: reason.into(),
                records,
                lost: in_file.total(),
            },
        )?;
        rec.w.flush()?;
        rec.w.get_ref().get_ref().sync_all()?;
        Ok(())
    }

    /// Ends the current file and goes on in a new one named for now, which starts at
    /// `start_ns` with the threads alive then.
    fn rotate(
        &mut self,
        rec: &mut Recorder,
        kernel: &Kernel,
        preamble: &Preamble,
        start_ns: u64,
        opts: &RecordOptions,
        keep: usize,
    ) -> Result<()> {
        rec.flush_all()?;
        let losses = kernel.losses()?;
        self.finish(rec, &losses, "rotated")?;
        let path = segment_path(&opts.output, std::time::SystemTime::now());
        let file = output::create_exclusive(&path, opts.force)?;
        let mut threads = Vec::new();
        for &pid in &preamble.pids {
            threads.extend(procfs::threads(pid).unwrap_or_default());
        }
        let mut next = preamble.clone();
        next.header.start_ns = start_ns;
        next.header.part = self.written as u32 + 1;
        next.header.monotonic_to_realtime_ns = monotonic_to_realtime();
        self.bytes_before += rec.w.bytes_written();
        rec.w = next.write(file, &threads)?;
        self.next(path, losses, rec.counts, keep)
    }

    /// `path` is the file now written; the oldest beyond `keep` are removed.
    fn next(
        &mut self,
        path: PathBuf,
        losses: Losses,
        counts: [u64; Event::KINDS],
        keep: usize,
    ) -> Result<()> {
        self.older
            .push_back(std::mem::replace(&mut self.current, path));
        self.started = Instant::now();
        self.base_losses = losses;
        self.base_counts = counts;
        self.written += 1;
        while keep > 0 && self.older.len() + 1 > keep {
            let Some(old) = self.older.pop_front() else {
                break;
            };
            std::fs::remove_file(&old)
                .with_context(|| format!("cannot remove {} (--keep)", old.display()))?;
        }
        Ok(())
    }
}

/// `DIR/NAME-20261123T195100Z.EXT` for `DIR/NAME.EXT`: the file of a rotated run that
/// starts at `at` (UTC), so names sort by time.
fn segment_path(base: &std::path::Path, at: std::time::SystemTime) -> PathBuf {
    let secs = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: gmtime_r writes the broken-down time into `tm`, which outlives the call.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::gmtime_r(&secs, &mut tm) };
    let stamp = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    );
    let stem = base
        .file_stem()
        .map_or_else(Default::default, |s| s.to_string_lossy());
    let name = match base.extension() {
        Some(ext) => format!("{stem}-{stamp}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{stamp}"),
    };
    base.with_file_name(name)
}

/// Turns ring-buffer records into trace chunks.
struct Recorder {
    w: Writer<BufWriter<File>>,
    encoders: Vec<EventChunkEncoder>,
    flushed_at: Vec<Instant>,
    /// Thread names learned from records (tid, tgid if known, name), for counting mode.
    names: Vec<(u32, Option<u32>, String)>,
    /// Records per kind, by `Event::kind_index`.
    counts: [u64; Event::KINDS],
    /// The calls `--trigger` watches.
    watch: Option<Watch>,
    total: u64,
    lost: u64,
    last_total: u64,
}

impl Recorder {
    fn new(w: Writer<BufWriter<File>>, cpus: u32) -> Recorder {
        Recorder {
            w,
            encoders: (0..cpus).map(EventChunkEncoder::new).collect(),
            flushed_at: vec![Instant::now(); cpus as usize],
            counts: [0; Event::KINDS],
            watch: None,
            names: Vec::new(),
            total: 0,
            lost: 0,
            last_total: 0,
        }
    }

    /// Reads every ring buffer empty; returns how many records it took.
    fn drain(&mut self, kernel: &mut Kernel) -> Result<u64> {
        let mut n = 0;
        for cpu in 0..kernel.rings.len() {
            while let Some(item) = kernel.rings[cpu].next() {
                let Some((ts, tid, event)) = decode(&item) else {
                    continue;
                };
                self.encoders[cpu].push(ts, tid, &event);
                self.counts[event.kind_index()] += 1;
                if let Some(w) = &mut self.watch {
                    w.see(ts, tid, &event);
                }
                match event {
                    Event::NewTask {
                        child_tid,
                        child_tgid,
                        comm,
                    } => self
                        .names
                        .push((child_tid, Some(child_tgid), comm.as_str().into_owned())),
                    Event::Rename { comm } | Event::Exec { comm } => {
                        self.names.push((tid, None, comm.as_str().into_owned()))
                    }
                    _ => {}
                }
                n += 1;
            }
            if self.encoders[cpu].encoded_bytes() >= CHUNK_BYTES {
                self.flush(cpu)?;
            }
        }
        self.total += n;
        Ok(n)
    }

    /// Nonzero record counts by kind name.
    fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (Event::KIND_NAMES[i], n))
    }

    /// How long to go on once the trigger has fired (said once, on stderr).
    fn fired(&self, quiet: bool) -> Option<Duration> {
        let w = self.watch.as_ref()?;
        let (tid, ns) = w.fired?;
        if !quiet {
            let ms = ns as f64 / 1e6;
            eprintln!(
                "trigger: {} took {ms:.3} ms on thread {tid}; recording {:?} more",
                w.name, w.after
            );
        }
        Some(w.after)
    }

    fn flush(&mut self, cpu: usize) -> Result<()> {
        self.flushed_at[cpu] = Instant::now();
        if self.encoders[cpu].is_empty() {
            return Ok(());
        }
        let payload = self.encoders[cpu].finish();
        self.w.chunk(ChunkKind::Events, &payload)?;
        Ok(())
    }

    fn flush_aged(&mut self) -> Result<()> {
        let mut any = false;
        for cpu in 0..self.encoders.len() {
            if !self.encoders[cpu].is_empty() && self.flushed_at[cpu].elapsed() >= CHUNK_AGE {
                self.flush(cpu)?;
                any = true;
            }
        }
        if any {
            // Complete chunks reach the file, so a killed recorder loses at most CHUNK_AGE.
            self.w.flush()?;
        }
        Ok(())
    }

    fn flush_all(&mut self) -> Result<()> {
        for cpu in 0..self.encoders.len() {
            self.flush(cpu)?;
        }
        self.w.flush()?;
        Ok(())
    }

    fn print_status(&mut self, elapsed: Duration) {
        let rate = self.total - self.last_total;
        self.last_total = self.total;
        eprint!(
            "\r\x1b[Krecording {:>6.1}s  {:>9} events/s  {:>10} written  {} lost",
            elapsed.as_secs_f64(),
            rate,
            human_bytes(self.w.bytes_written()),
            self.lost
        );
    }
}

/// Reads one ring-buffer record. Unknown kinds (a newer program) are skipped.
fn decode(bytes: &[u8]) -> Option<(u64, u32, Event)> {
    fn read<T: Copy>(b: &[u8]) -> Option<T> {
        (b.len() >= size_of::<T>())
            // SAFETY: length checked; the record types are plain integers.
            .then(|| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
    }
    let h: abi::Header = read(bytes)?;
    let comm = |c: [u8; 16]| trace_file::record::Comm(c);
    let event = match h.kind {
        abi::kind::FUNC_ENTRY => {
            let r: abi::FuncEntry = read(bytes)?;
            Event::FuncEntry { func: r.func }
        }
        abi::kind::FUNC_EXIT => {
            let r: abi::FuncExit = read(bytes)?;
            Event::FuncExit {
                func: r.func,
                ret: r.ret,
            }
        }
        abi::kind::SYS_ENTER => {
            let r: abi::SysEnter = read(bytes)?;
            Event::SysEnter {
                nr: r.nr,
                arg0: r.arg0,
                arg2: r.arg2,
            }
        }
        abi::kind::SYS_EXIT => {
            let r: abi::SysExit = read(bytes)?;
            Event::SysExit {
                nr: r.nr,
                ret: r.ret,
            }
        }
        abi::kind::SWITCH => {
            let r: abi::Switch = read(bytes)?;
            Event::Switch {
                next_tid: r.next_tid,
                prev_state: r.prev_state,
            }
        }
        abi::kind::WAKEUP | abi::kind::WAKEUP_NEW => {
            let r: abi::Wakeup = read(bytes)?;
            Event::Wakeup {
                wakee: r.wakee,
                target_cpu: r.target_cpu,
                new: h.kind == abi::kind::WAKEUP_NEW,
            }
        }
        abi::kind::NEW_TASK => {
            let r: abi::NewTask = read(bytes)?;
            Event::NewTask {
                child_tid: r.child_tid,
                child_tgid: r.child_tgid,
                comm: comm(r.comm),
            }
        }
        abi::kind::EXIT => {
            let r: abi::Exit = read(bytes)?;
            Event::Exit {
                tgid: r.tgid,
                group_dead: r.group_dead != 0,
            }
        }
        abi::kind::RENAME => Event::Rename {
            comm: comm(read::<abi::Rename>(bytes)?.comm),
        },
        abi::kind::EXEC => Event::Exec {
            comm: comm(read::<abi::Rename>(bytes)?.comm),
        },
        _ => return None,
    };
    Some((h.ts, h.tid, event))
}

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of a few bracketed samples.
fn monotonic_to_realtime() -> i64 {
    let mut best = (i128::MAX, 0i128);
    for _ in 0..5 {
        let a = clock_ns(libc::CLOCK_MONOTONIC);
        let r = clock_ns(libc::CLOCK_REALTIME);
        let b = clock_ns(libc::CLOCK_MONOTONIC);
        if b - a < best.0 {
            best = (b - a, r - (a + b) / 2);
        }
    }
    best.1 as i64
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
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
    writeln!(
        out,
        "recorded {total} events in {:.1}s ({}) to {to}, stopped by {}",
        s.seconds,
        human_bytes(s.bytes),
        s.reason
    )
    .context("writing the summary")?;
    for (k, v) in &s.records {
        writeln!(out, "  {k:<12} {v:>12}")?;
    }
    if s.lost > 0 {
        writeln!(
            out,
            "  LOST {} events: ring buffers full, or program runs the kernel skipped (`tracer dump` shows which)",
            s.lost
        )?;
    } else {
        writeln!(out, "  lost         {:>12}", 0)?;
    }
    Ok(())
}
