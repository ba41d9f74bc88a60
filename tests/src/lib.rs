//! Support library for the tracer's end-to-end tests.
//!
//! Everything here is ground truth that does not depend on the tracer: the
//! fixture programs in `tests/fixtures/` (built with gcc on demand), a
//! bounded load generator, and readers for `/proc`. There is no eBPF here.
//!
//! Pids and tids are `u32` throughout, like [`std::process::Child::id`].

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

// ---------------------------------------------------------------------------
// Locations and environment
// ---------------------------------------------------------------------------

/// The workspace root (parent of this crate's directory).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate lives inside the workspace")
        .to_path_buf()
}

/// The tracer binary under test: `$TRACER_BIN` if set, else
/// `<workspace>/target/release/tracer` (built by `cargo xtask build`).
pub fn tracer_bin() -> PathBuf {
    match std::env::var_os("TRACER_BIN") {
        Some(p) => PathBuf::from(p),
        None => workspace_dir().join("target/release/tracer"),
    }
}

/// Runs `tracer ARGS...` to completion and panics with its stderr unless it succeeds.
pub fn tracer_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    let out = Command::new(tracer_bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tracer_bin().display()));
    assert!(
        out.status.success(),
        "tracer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// True when running as root (needed to load eBPF programs).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Polls `cond` every 5 ms until it returns true or `timeout` passes.
/// Returns whether it became true.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------
// Building the C fixtures
// ---------------------------------------------------------------------------

/// gcc flags for every fixture. Frame pointers make each function start with
/// `push %rbp`, which uprobes emulate cheaply; `-rdynamic` puts the probed
/// functions in `.dynsym` as well as `.symtab`.
pub const FIXTURE_CFLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fno-omit-frame-pointer",
    "-pthread",
    "-rdynamic",
    "-Wall",
];

/// Where built fixtures are cached: `$TRACER_FIXTURE_DIR`, else
/// `$CARGO_TARGET_DIR/fixtures`, else `<workspace>/target/fixtures`.
pub fn fixture_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TRACER_FIXTURE_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_dir().join("target"));
    target.join("fixtures")
}

/// Compiles `tests/fixtures/<name>.c` into [`fixture_dir`] (only when the
/// binary is missing or older than the source) and returns the binary's path.
///
/// Panics with gcc's output if compilation fails: a broken fixture is a bug
/// in the test suite, not a test result.
pub fn build_fixture(name: &str) -> PathBuf {
    // Tests in one binary run in parallel threads; serialise the builds so
    // they do not all invoke gcc at once. Separate test binaries may still
    // race, which the compile-to-temp-then-rename below makes harmless.
    static BUILD_LOCK: Mutex<()> = Mutex::new(());
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());

    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.c"));
    let dir = fixture_dir();
    let out = dir.join(name);
    if is_up_to_date(&src, &out) {
        return out;
    }
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let output = Command::new("gcc")
        .args(FIXTURE_CFLAGS)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running gcc: {e}"));
    if !output.status.success() {
        panic!(
            "gcc failed to build {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("installing {}: {e}", out.display()));
    out
}

fn is_up_to_date(src: &Path, out: &Path) -> bool {
    let mtime = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    match (mtime(src), mtime(out)) {
        (Some(s), Some(o)) => o >= s,
        (None, _) => panic!("fixture source {} not found", src.display()),
        _ => false,
    }
}

/// Writes a data file of `len` bytes for the server (a repeating, readable
/// pattern `abc...z`, so responses are easy to recognise in a dump).
pub fn write_data_file(path: &Path, len: usize) -> Result<()> {
    let data: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    fs::write(path, data).with_context(|| format!("writing {}", path.display()))
}

/// Sends `sig` to `pid`.
fn send_signal(pid: u32, sig: libc::c_int) -> Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        return Err(std::io::Error::last_os_error()).context(format!("kill({pid}, {sig})"));
    }
    Ok(())
}

/// Waits up to `timeout` for `child` to exit.
fn wait_child(child: &mut Child, timeout: Duration) -> Result<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            bail!("pid {} did not exit within {timeout:?}", child.id());
        }
        thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------
// The fixture server
// ---------------------------------------------------------------------------

/// The server's own counters, from its `STATS` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests fully answered.
    pub requests: u64,
    /// Response payload bytes written.
    pub bytes: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Calls of `handle_request` (counted on entry).
    pub handle_request: u64,
    /// Calls of `render_response` (counted on entry).
    pub render_response: u64,
}

impl Stats {
    /// Parses `STATS requests=1 bytes=2 connections=3 handle_request=4 render_response=5`.
    pub fn parse(line: &str) -> Result<Stats> {
        let rest = line
            .strip_prefix("STATS ")
            .ok_or_else(|| anyhow!("not a STATS line: {line:?}"))?;
        let mut stats = Stats::default();
        for field in rest.split_whitespace() {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| anyhow!("bad STATS field {field:?}"))?;
            let value: u64 = value
                .parse()
                .with_context(|| format!("bad STATS field {field:?}"))?;
            match key {
                "requests" => stats.requests = value,
                "bytes" => stats.bytes = value,
                "connections" => stats.connections = value,
                "handle_request" => stats.handle_request = value,
                "render_response" => stats.render_response = value,
                _ => {} // tolerate new counters
            }
        }
        Ok(stats)
    }
}

/// Options of the fixture server (see `tests/fixtures/server.c`).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// `--workers`: worker threads `worker-0..N`.
    pub workers: usize,
    /// `--data`: the file `handle_request` reads; `None` = a 4 KiB file in a
    /// temporary directory owned by the [`Server`].
    pub data: Option<PathBuf>,
    /// `--sleep-us`: nanosleep inside `handle_request` (known off-CPU time).
    pub sleep_us: u64,
    /// `--spin-us`: busy loop inside `handle_request` (known on-CPU time).
    pub spin_us: u64,
    /// `--threads-late`: extra threads `late-0..N` started after `late_after_ms`.
    pub threads_late: usize,
    /// `--late-after-ms`: delay from startup to the late threads.
    pub late_after_ms: u64,
    /// `--late-linger-ms`: how long each late thread lives after its syscalls.
    pub late_linger_ms: u64,
    /// `--max-requests`: exit cleanly (printing STATS) after this many requests.
    pub max_requests: Option<u64>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            workers: 4,
            data: None,
            sleep_us: 0,
            spin_us: 0,
            threads_late: 0,
            late_after_ms: 100,
            late_linger_ms: 200,
            max_requests: None,
        }
    }
}

/// A running fixture server. Killed (SIGKILL) on drop if still running.
pub struct Server {
    child: Child,
    port: u16,
    data: PathBuf,
    /// Lines of the server's stdout, read by a background thread.
    lines: Mutex<Receiver<String>>,
    /// What has been parsed from stdout so far.
    seen: Mutex<Seen>,
    _tmp: Option<tempfile::TempDir>,
}

#[derive(Default)]
struct Seen {
    late: Vec<(u32, String)>,
    /// STATS lines nobody has asked for yet (e.g. the exit line after
    /// `--max-requests`, read while looking for LATE lines).
    stats: VecDeque<Stats>,
}

impl Server {
    /// Builds (if needed) and starts the server, and waits until it listens.
    pub fn start(opts: &ServerOptions) -> Result<Server> {
        let bin = build_fixture("server");
        let (data, tmp) = match &opts.data {
            Some(p) => (p.clone(), None),
            None => {
                let tmp = tempfile::tempdir()?;
                let path = tmp.path().join("data");
                write_data_file(&path, 4096)?;
                (path, Some(tmp))
            }
        };
        let mut cmd = Command::new(&bin);
        cmd.arg("--data")
            .arg(&data)
            .args(["--workers", &opts.workers.to_string()])
            .args(["--sleep-us", &opts.sleep_us.to_string()])
            .args(["--spin-us", &opts.spin_us.to_string()])
            .args(["--threads-late", &opts.threads_late.to_string()])
            .args(["--late-after-ms", &opts.late_after_ms.to_string()])
            .args(["--late-linger-ms", &opts.late_linger_ms.to_string()]);
        if let Some(n) = opts.max_requests {
            cmd.args(["--max-requests", &n.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;

        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(line) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });

        let mut server = Server {
            child,
            port: 0,
            data,
            lines: Mutex::new(rx),
            seen: Mutex::default(),
            _tmp: tmp,
        };
        let line = server.next_line(Duration::from_secs(10), |l| l.starts_with("PORT "))?;
        server.port = line[5..].trim().parse().context("bad PORT line")?;
        Ok(server)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The TCP port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data file `handle_request` reads.
    pub fn data_path(&self) -> &Path {
        &self.data
    }

    /// Current counters: sends SIGUSR1 and parses the STATS line. The server
    /// first waits (up to 500 ms) for in-flight requests, so after a
    /// [`load`] has returned, the counters include all its requests.
    pub fn stats(&self) -> Result<Stats> {
        self.seen.lock().unwrap().stats.clear();
        send_signal(self.pid(), libc::SIGUSR1)?;
        self.next_stats(Duration::from_secs(5))
    }

    /// Stops the server with SIGTERM and returns its final counters.
    pub fn stop(mut self) -> Result<Stats> {
        send_signal(self.pid(), libc::SIGTERM)?;
        self.wait_exit(Duration::from_secs(5))
    }

    /// Waits for the server to exit by itself (`--max-requests`) and returns
    /// its final counters. Fails if it exits with a non-zero status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Stats> {
        let stats = self.next_stats(timeout)?;
        let status = wait_child(&mut self.child, timeout)?;
        if !status.success() {
            bail!("server exited with {status}");
        }
        Ok(stats)
    }

    /// Late threads seen so far, as `(tid, name)`, from the `LATE` lines.
    pub fn late_threads(&self) -> Vec<(u32, String)> {
        // Pick up lines already printed, without waiting.
        let rx = self.lines.lock().unwrap();
        while let Ok(line) = rx.try_recv() {
            self.record(&line);
        }
        self.seen.lock().unwrap().late.clone()
    }

    /// Waits until `n` late threads have started; returns them as `(tid, name)`.
    pub fn wait_late_threads(&self, n: usize, timeout: Duration) -> Result<Vec<(u32, String)>> {
        let deadline = Instant::now() + timeout;
        loop {
            let late = self.late_threads();
            if late.len() >= n {
                return Ok(late);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("only {} of {n} late threads started", late.len());
            }
            let _ = self.next_line(left, |l| l.starts_with("LATE "));
        }
    }

    fn next_stats(&self, timeout: Duration) -> Result<Stats> {
        if let Some(stats) = self.seen.lock().unwrap().stats.pop_front() {
            return Ok(stats);
        }
        let line = self.next_line(timeout, |l| l.starts_with("STATS "))?;
        Stats::parse(&line)
    }

    /// Reads stdout lines until one satisfies `want` (returned) or `timeout`
    /// passes. LATE and STATS lines are recorded on the way.
    fn next_line(&self, timeout: Duration, want: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + timeout;
        let rx = self.lines.lock().unwrap();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => bail!("no matching server output in {timeout:?}"),
                Err(RecvTimeoutError::Disconnected) => bail!("server closed stdout (exited?)"),
            };
            if want(&line) {
                self.record_late(&line);
                return Ok(line);
            }
            self.record(&line);
        }
    }

    /// Remembers a LATE or an unrequested STATS line.
    fn record(&self, line: &str) {
        self.record_late(line);
        if line.starts_with("STATS ") {
            if let Ok(stats) = Stats::parse(line) {
                self.seen.lock().unwrap().stats.push_back(stats);
            }
        }
    }

    fn record_late(&self, line: &str) {
        let Some((tid, name)) = line.strip_prefix("LATE ").and_then(|r| r.split_once(' ')) else {
            return;
        };
        if let Ok(tid) = tid.parse() {
            self.seen.lock().unwrap().late.push((tid, name.to_string()));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------
// Load generator
// ---------------------------------------------------------------------------

/// What [`load`] did, counted on the client side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Requests whose full response was received.
    pub requests: u64,
    /// Response bytes received for those requests.
    pub bytes: u64,
    /// Connections established.
    pub connections: u64,
    /// Connections that failed (connect, write, read, or timeout).
    pub errors: u64,
    pub elapsed: Duration,
}

/// Runs a bounded load against the fixture server on `127.0.0.1:port`:
/// `connections` connections in total, each sending `requests_per_conn`
/// requests `GET <bytes_per_request>` (keep-alive) and reading the full
/// response, with at most `concurrency` connections open at a time.
///
/// Bounded in count and in time: once `max_duration` has passed no new
/// request starts and blocked reads time out, so this always returns.
pub fn load(
    port: u16,
    connections: usize,
    requests_per_conn: usize,
    bytes_per_request: usize,
    concurrency: usize,
    max_duration: Duration,
) -> LoadReport {
    assert!(
        (1..=16 << 20).contains(&bytes_per_request),
        "the server answers 1..=16 MiB per request"
    );
    let start = Instant::now();
    let deadline = start + max_duration;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let next_conn = AtomicUsize::new(0);
    let (requests, bytes, conns, errors) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    );
    let request = format!("GET {bytes_per_request}\n");

    thread::scope(|s| {
        for _ in 0..concurrency.clamp(1, connections.max(1)) {
            s.spawn(|| {
                let mut buf = vec![0u8; bytes_per_request];
                while next_conn.fetch_add(1, Ordering::Relaxed) < connections {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let stream = match TcpStream::connect_timeout(&addr, left) {
                        Ok(stream) => stream,
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    };
                    conns.fetch_add(1, Ordering::Relaxed);
                    let (done, err) = run_connection(
                        stream,
                        request.as_bytes(),
                        &mut buf,
                        requests_per_conn,
                        deadline,
                    );
                    requests.fetch_add(done, Ordering::Relaxed);
                    bytes.fetch_add(done * bytes_per_request as u64, Ordering::Relaxed);
                    if err.is_some() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });

    LoadReport {
        requests: requests.into_inner(),
        bytes: bytes.into_inner(),
        connections: conns.into_inner(),
        errors: errors.into_inner(),
        elapsed: start.elapsed(),
    }
}

/// Sends up to `count` requests on one connection and reads each full
/// response (`buf` is response-sized). Stops at the first error or at
/// `deadline`. Returns the number of completed requests and the error if any.
fn run_connection(
    mut stream: TcpStream,
    request: &[u8],
    buf: &mut [u8],
    count: usize,
    deadline: Instant,
) -> (u64, Option<std::io::Error>) {
    // Timeouts of "time left now" make every blocking call end by the
    // deadline, so load() always returns.
    let left = deadline.saturating_duration_since(Instant::now());
    let setup = stream
        .set_nodelay(true)
        .and_then(|_| stream.set_read_timeout(Some(left.max(Duration::from_millis(1)))))
        .and_then(|_| stream.set_write_timeout(Some(left.max(Duration::from_millis(1)))));
    if let Err(e) = setup {
        return (0, Some(e));
    }
    let mut done = 0;
    for _ in 0..count {
        if Instant::now() >= deadline {
            break;
        }
        let result = stream
            .write_all(request)
            .and_then(|_| stream.read_exact(buf));
        if let Err(e) = result {
            return (done, Some(e));
        }
        done += 1;
    }
    (done, None)
}

// ---------------------------------------------------------------------------
// Ground truth from /proc
// ---------------------------------------------------------------------------

/// A thread's scheduler statistics from `/proc/PID/task/TID/schedstat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Schedstat {
    /// Time spent on the CPU.
    pub run_ns: u64,
    /// Time spent runnable, waiting on a runqueue.
    pub wait_ns: u64,
    /// Number of times it was scheduled in.
    pub timeslices: u64,
}

/// Reads `/proc/PID/task/TID/schedstat`.
pub fn schedstat(pid: u32, tid: u32) -> std::io::Result<Schedstat> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>());
    let mut next = || -> std::io::Result<u64> {
        fields
            .next()
            .and_then(|f| f.ok())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, text.clone()))
    };
    Ok(Schedstat {
        run_ns: next()?,
        wait_ns: next()?,
        timeslices: next()?,
    })
}

/// The threads of process `pid` as `(tid, comm)`, sorted by tid. Empty if
/// the process does not exist; threads that exit while listing are skipped.
pub fn threads(pid: u32) -> Vec<(u32, String)> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, String)> = dir
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let tid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = fs::read_to_string(entry.path().join("comm")).ok()?;
            Some((tid, comm.trim_end_matches('\n').to_string()))
        })
        .collect();
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// The known-syscall fixture
// ---------------------------------------------------------------------------

/// An argument of a [`KnownSyscall`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// Not checked (a buffer or struct pointer).
    Any,
    /// This integer value.
    Int(i64),
    /// A pointer to this string (the fixture's INPUT path).
    InputPath,
    /// A pointer to this string (a path or buffer contents).
    Str(&'static str),
    /// The fd returned by the `openat` of INPUT (normally 3).
    FdA,
    /// The fd returned by the `openat` of /dev/null (normally 4).
    FdB,
}

/// The result of a [`KnownSyscall`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ret {
    /// This value (negative = `-errno`, as the kernel returns it).
    Int(i64),
    /// The fixture's pid (== its tid: it is single-threaded).
    Pid,
    /// A new fd, referred to later as [`Arg::FdA`].
    FdA,
    /// A new fd, referred to later as [`Arg::FdB`].
    FdB,
    /// Does not return (`exit_group`).
    NoReturn,
}

/// One syscall of the known sequence made by `tests/fixtures/syscalls.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownSyscall {
    pub name: &'static str,
    /// x86_64 syscall number.
    pub nr: i64,
    /// The first arguments (the ones worth checking).
    pub args: &'static [Arg],
    pub ret: Ret,
}

const O_RDONLY_CLOEXEC: i64 = (libc::O_RDONLY | libc::O_CLOEXEC) as i64;
const O_WRONLY_CLOEXEC: i64 = (libc::O_WRONLY | libc::O_CLOEXEC) as i64;
const AT_FDCWD: i64 = libc::AT_FDCWD as i64;

/// Off-CPU time of the `nanosleep` in each iteration of [`KNOWN_SYSCALLS`].
pub const KNOWN_SLEEP: Duration = Duration::from_millis(20);

/// One iteration of the syscalls fixture's sequence, made after it reads
/// its go byte from stdin; repeated REPEAT times, then followed by
/// [`KNOWN_SYSCALLS_EPILOGUE`]. Mirrors the table in `syscalls.c`.
pub const KNOWN_SYSCALLS: &[KnownSyscall] = &[
    KnownSyscall {
        name: "getpid",
        nr: libc::SYS_getpid,
        args: &[],
        ret: Ret::Pid,
    },
    KnownSyscall {
        name: "openat",
        nr: libc::SYS_openat,
        args: &[
            Arg::Int(AT_FDCWD),
            Arg::InputPath,
            Arg::Int(O_RDONLY_CLOEXEC),
        ],
        ret: Ret::FdA,
    },
    KnownSyscall {
        name: "read",
        nr: libc::SYS_read,
        args: &[Arg::FdA, Arg::Any, Arg::Int(100)],
        ret: Ret::Int(100),
    },
    KnownSyscall {
        name: "read",
        nr: libc::SYS_read,
        args: &[Arg::Int(1000), Arg::Any, Arg::Int(100)],
        ret: Ret::Int(-(libc::EBADF as i64)),
    },
    KnownSyscall {
        name: "openat",
        nr: libc::SYS_openat,
        args: &[
            Arg::Int(AT_FDCWD),
            Arg::Str("/dev/null"),
            Arg::Int(O_WRONLY_CLOEXEC),
        ],
        ret: Ret::FdB,
    },
    KnownSyscall {
        name: "write",
        nr: libc::SYS_write,
        args: &[Arg::FdB, Arg::Str("tracer\n"), Arg::Int(7)],
        ret: Ret::Int(7),
    },
    KnownSyscall {
        name: "close",
        nr: libc::SYS_close,
        args: &[Arg::FdB],
        ret: Ret::Int(0),
    },
    KnownSyscall {
        name: "close",
        nr: libc::SYS_close,
        args: &[Arg::FdA],
        ret: Ret::Int(0),
    },
    KnownSyscall {
        name: "openat",
        nr: libc::SYS_openat,
        args: &[
            Arg::Int(AT_FDCWD),
            Arg::Str("/nonexistent/tracer-fixture"),
            Arg::Int(O_RDONLY_CLOEXEC),
        ],
        ret: Ret::Int(-(libc::ENOENT as i64)),
    },
    KnownSyscall {
        name: "nanosleep",
        nr: libc::SYS_nanosleep,
        args: &[Arg::Any, Arg::Int(0)], // timespec {0, 20_000_000}, NULL
        ret: Ret::Int(0),
    },
    KnownSyscall {
        name: "gettid",
        nr: libc::SYS_gettid,
        args: &[],
        ret: Ret::Pid,
    },
];

/// What the syscalls fixture does once, after all iterations.
pub const KNOWN_SYSCALLS_EPILOGUE: &[KnownSyscall] = &[
    KnownSyscall {
        name: "write",
        nr: libc::SYS_write,
        args: &[Arg::Int(1), Arg::Str("DONE\n"), Arg::Int(5)],
        ret: Ret::Int(5),
    },
    KnownSyscall {
        name: "exit_group",
        nr: libc::SYS_exit_group,
        args: &[Arg::Int(0)],
        ret: Ret::NoReturn,
    },
];

/// The full sequence after the go byte for a given REPEAT.
pub fn known_syscall_sequence(repeat: usize) -> Vec<KnownSyscall> {
    let mut seq = Vec::new();
    for _ in 0..repeat {
        seq.extend_from_slice(KNOWN_SYSCALLS);
    }
    seq.extend_from_slice(KNOWN_SYSCALLS_EPILOGUE);
    seq
}

/// A running syscalls fixture, blocked on its go byte until [`go`](Self::go).
/// Killed on drop if still running.
pub struct SyscallsFixture {
    child: Child,
    stdin: Option<ChildStdin>,
    input: PathBuf,
    _tmp: tempfile::TempDir,
}

impl SyscallsFixture {
    /// Starts the fixture with a fresh 4 KiB INPUT file. It blocks until
    /// [`go`](Self::go), so the tracer can attach to [`pid`](Self::pid) first.
    pub fn spawn(repeat: usize) -> Result<SyscallsFixture> {
        let bin = build_fixture("syscalls");
        let tmp = tempfile::tempdir()?;
        let input = tmp.path().join("input");
        write_data_file(&input, 4096)?;
        let mut child = Command::new(&bin)
            .arg(&input)
            .arg(repeat.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let stdin = child.stdin.take();
        Ok(SyscallsFixture {
            child,
            stdin,
            input,
            _tmp: tmp,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The INPUT path (what [`Arg::InputPath`] points to).
    pub fn input_path(&self) -> &Path {
        &self.input
    }

    /// Sends the go byte: the known sequence starts now.
    pub fn go(&mut self) -> Result<()> {
        let mut stdin = self.stdin.take().context("go() already called")?;
        stdin.write_all(b"g")?;
        Ok(())
    }

    /// Waits for the fixture to exit; fails unless it exited 0 after
    /// printing DONE (i.e. every syscall returned what the table says).
    pub fn wait(mut self, timeout: Duration) -> Result<()> {
        let status = wait_child(&mut self.child, timeout)?;
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            s.read_to_string(&mut out)?;
        }
        if let Some(mut s) = self.child.stderr.take() {
            s.read_to_string(&mut err)?;
        }
        if !status.success() || out != "DONE\n" {
            bail!("syscalls fixture: {status}, stdout {out:?}, stderr {err:?}");
        }
        Ok(())
    }
}

impl Drop for SyscallsFixture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Serializes the end-to-end tests of one test binary: on two CPUs, tracers, servers and
/// load generators of parallel tests would compete for the CPUs whose accounting the
/// tests compare against.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `tracer SUBCOMMAND --quiet --pid PID -o OUT EXTRA...` and returns once it has
/// attached (its file holds the header and thread table).
pub fn start_tracer(subcommand: &str, pid: u32, out: &Path, extra: &[&str]) -> Child {
    start_tracer_writing(subcommand, pid, out, extra, || Some(out.to_path_buf()))
}

/// [`start_tracer`] for a tracer that writes `file` rather than `out` itself (a rotated
/// run names its files after `out`).
pub fn start_tracer_writing(
    subcommand: &str,
    pid: u32,
    out: &Path,
    extra: &[&str],
    file: impl Fn() -> Option<PathBuf>,
) -> Child {
    let mut child = Command::new(tracer_bin())
        .args([subcommand, "--quiet", "--pid", &pid.to_string(), "-o"])
        .arg(out)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run the tracer");
    let written = || {
        let meta = file().and_then(|f| std::fs::metadata(f).ok());
        meta.is_some_and(|m| m.len() > 200)
    };
    wait_until(Duration::from_secs(20), || {
        written() || !matches!(child.try_wait(), Ok(None))
    });
    if !written() {
        let _ = child.kill();
        let out = child.wait_with_output().expect("tracer vanished");
        panic!(
            "tracer {subcommand} did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child
}

/// The files in `dir`, by name.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let entries = fs::read_dir(dir).into_iter().flatten().flatten();
    let mut names: Vec<PathBuf> = entries.map(|e| e.path()).collect();
    names.sort();
    names
}

/// The first file in `dir`, by name.
pub fn first_file(dir: &Path) -> Option<PathBuf> {
    files_in(dir).into_iter().next()
}

/// Runs `tracer SUBCOMMAND` on a fixture server under a load of about 3 s (4 workers that
/// sleep 5 ms per request), writing rotated files into `dir` (output `dir/NAME`), and
/// returns them sorted, with the server's counts.
pub fn rotated_run(
    subcommand: &str,
    dir: &Path,
    name: &str,
    extra: &[&str],
) -> (Vec<PathBuf>, Stats) {
    let server = Server::start(&ServerOptions {
        sleep_us: 5000,
        ..Default::default()
    })
    .unwrap();
    let base = dir.join(name);
    let t = start_tracer_writing(subcommand, server.pid(), &base, extra, || first_file(dir));
    let report = load(server.port(), 4, 600, 512, 4, Duration::from_secs(20));
    assert_eq!(report.errors, 0);
    stop_tracer(t);
    let stats = server.stop().unwrap();
    let paths = files_in(dir);
    assert!(paths.len() >= 3, "{paths:?}");
    assert!(
        !base.exists(),
        "rotated files are named after the output, not it"
    );
    (paths, stats)
}

/// Stops a tracer as Ctrl-C would; panics with its stderr if it failed.
pub fn stop_tracer(child: Child) -> std::process::Output {
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("tracer vanished");
    assert!(
        out.status.success(),
        "tracer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Time the hypervisor took from this machine's CPUs (all of them), from /proc/stat.
///
/// The kernel's per-thread run time (schedstat) leaves stolen time out, while a tracer's
/// timestamps are wall clock: a thread descheduled by the hypervisor while on a CPU is
/// "running" for the tracer. Comparisons with schedstat allow for what was stolen meanwhile.
pub fn steal_ns() -> u64 {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}

/// Run time and run-queue wait of a process's threads from schedstat over a stretch of
/// time, and the time stolen meanwhile: the ground truth a tracer's running and ready
/// times are checked against.
pub struct RunClock {
    steal: u64,
    start: Vec<(u32, String, Schedstat)>,
    pid: u32,
}

impl RunClock {
    /// Starts the stretch once the process's threads are idle (all asleep, their run
    /// times still): run time a thread spends finishing its start-up after this would be
    /// counted here but happen before the tracer attaches (1.3 ms of a server's last
    /// worker, once in five runs). Asleep, because a thread waiting for a CPU also keeps
    /// its run time still.
    pub fn start(pid: u32) -> RunClock {
        let mut start = run_times(pid);
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(20));
            let now = run_times(pid);
            if now == start && all_asleep(pid) {
                break;
            }
            start = now;
        }
        RunClock {
            steal: steal_ns(),
            start,
            pid,
        }
    }

    /// Ends the stretch (the threads should be idle by now).
    pub fn stop(self) -> RunTimes {
        let end = run_times(self.pid);
        let mut times = RunTimes {
            stolen: steal_ns() - self.steal,
            threads: Vec::new(),
            waited: Vec::new(),
            runs: Vec::new(),
        };
        for (tid, name, before) in self.start {
            let Some((_, _, after)) = end.iter().find(|t| t.0 == tid) else {
                continue;
            };
            let wait = after.wait_ns - before.wait_ns;
            times
                .threads
                .push((tid, name.clone(), after.run_ns - before.run_ns));
            times
                .runs
                .push((tid, name.clone(), after.timeslices - before.timeslices));
            times.waited.push((tid, name, wait));
        }
        times
    }
}

/// True when every thread of `pid` sleeps (state S).
fn all_asleep(pid: u32) -> bool {
    threads(pid).iter().all(|(tid, _)| {
        fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
            .ok()
            .and_then(|s| Some(s.rsplit_once(") ")?.1.starts_with('S')))
            .unwrap_or(false)
    })
}

fn run_times(pid: u32) -> Vec<(u32, String, Schedstat)> {
    threads(pid)
        .into_iter()
        .filter_map(|(tid, name)| Some((tid, name, schedstat(pid, tid).ok()?)))
        .collect()
}

/// What a [`RunClock`] measured.
pub struct RunTimes {
    /// (tid, name, ns run) per thread.
    pub threads: Vec<(u32, String, u64)>,
    /// (tid, name, ns waited on a run queue) per thread.
    pub waited: Vec<(u32, String, u64)>,
    /// (tid, name, times it was scheduled in) per thread.
    pub runs: Vec<(u32, String, u64)>,
    pub stolen: u64,
}

impl RunTimes {
    /// Checks `traced(tid)` against schedstat for every thread whose name starts with
    /// `prefix`: within `tolerance` (a fraction), plus what the hypervisor stole meanwhile
    /// (schedstat leaves stolen time out; a tracer's timestamps are wall clock). Returns
    /// how many threads it checked.
    pub fn check(&self, prefix: &str, tolerance: f64, traced: impl Fn(u32) -> u64) -> usize {
        self.check_times(&self.threads, prefix, tolerance, traced)
    }

    /// [`RunTimes::check`] for the time spent waiting for a CPU (schedstat's run delay).
    pub fn check_wait(&self, prefix: &str, tolerance: f64, traced: impl Fn(u32) -> u64) -> usize {
        self.check_times(&self.waited, prefix, tolerance, traced)
    }

    /// Checks a count of waits for a CPU per thread against schedstat's count of times it
    /// was scheduled in (each begins with a wait, however short): within `tolerance` (a
    /// fraction), and never closer than one. Returns how many threads it checked.
    pub fn check_runs(&self, prefix: &str, tolerance: f64, traced: impl Fn(u32) -> u64) -> usize {
        let mut checked = 0;
        for (tid, name, truth) in self.runs.iter().filter(|t| t.1.starts_with(prefix)) {
            let (ours, truth) = (traced(*tid), *truth);
            assert!(truth >= 20, "{name}: only {truth} runs to compare");
            let off = (ours as f64 - truth as f64) / truth as f64;
            eprintln!(
                "{name} ({tid}): {ours} waits traced, scheduled in {truth} times ({:+.3}%)",
                off * 100.0
            );
            assert!(
                ours.abs_diff(truth) as f64 <= (truth as f64 * tolerance).max(1.0),
                "{name} ({tid}): {ours} waits traced, scheduled in {truth} times ({:+.2}%)",
                off * 100.0
            );
            checked += 1;
        }
        checked
    }

    fn check_times(
        &self,
        truths: &[(u32, String, u64)],
        prefix: &str,
        tolerance: f64,
        traced: impl Fn(u32) -> u64,
    ) -> usize {
        let mut checked = 0;
        for (tid, name, truth) in truths.iter().filter(|t| t.1.starts_with(prefix)) {
            let (tid, truth) = (*tid, *truth);
            assert!(
                truth > 10_000_000,
                "{name}: only {truth} ns of work to compare"
            );
            let ours = traced(tid);
            eprintln!(
                "{name} ({tid}): traced {ours} ns, schedstat {truth} ns ({:+.3}%)",
                (ours as f64 - truth as f64) * 100.0 / truth as f64
            );
            let slack = (truth as f64 * tolerance) as u64;
            assert!(
                ours + slack >= truth && ours <= truth + slack + self.stolen,
                "{name} ({tid}): traced {ours} ns, schedstat {truth} ns ({:+.2}%), {} ns stolen meanwhile",
                (ours as f64 - truth as f64) * 100.0 / truth as f64,
                self.stolen
            );
            checked += 1;
        }
        checked
    }
}
