//! The fixture server: a thread-pool TCP server that counts what it does.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::*;

/// The server's own counters, from its `STATS` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// Worker processes started (the pre-forking server only).
    pub workers: u64,
    /// Total duration of the `handle_request` calls, by the server's own clock (the Go
    /// server only, whose function is `main.handle`).
    pub handle_ns: u64,
    /// Per worker process (the pre-forking server only): its pid and its calls of
    /// `handle_request` and `render_response`.
    pub per_worker: Vec<(u32, u64, u64)>,
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
            if key == "calls" {
                stats.per_worker = parse_per_worker(value)
                    .with_context(|| format!("bad STATS field {field:?}"))?;
                continue;
            }
            let value: u64 = value
                .parse()
                .with_context(|| format!("bad STATS field {field:?}"))?;
            match key {
                "requests" => stats.requests = value,
                "bytes" => stats.bytes = value,
                "connections" => stats.connections = value,
                "handle_request" => stats.handle_request = value,
                "render_response" => stats.render_response = value,
                "workers" => stats.workers = value,
                "handle_ns" => stats.handle_ns = value,
                _ => {} // tolerate new counters
            }
        }
        Ok(stats)
    }
}

/// `pid:handle_request:render_response,...`, as the pre-forking server prints them.
fn parse_per_worker(s: &str) -> Result<Vec<(u32, u64, u64)>> {
    (s.split(',').filter(|w| !w.is_empty()))
        .map(|w| {
            let f: Vec<&str> = w.split(':').collect();
            match f[..] {
                [pid, h, r] => Ok((pid.parse()?, h.parse()?, r.parse()?)),
                _ => Err(anyhow!("bad worker {w:?}")),
            }
        })
        .collect()
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
    /// `--max-requests`: exit cleanly (printing STATS) after this many requests; with
    /// `processes`, each worker process exits after this many and the master replaces it.
    pub max_requests: Option<u64>,
    /// Serve from this many worker processes forked by a master (`prefork.c`: the data
    /// file, spinning and late threads do not apply) instead of worker threads.
    pub processes: Option<usize>,
    /// Serve from the Go server (`goworker/main.go`: a goroutine per connection, stripped
    /// binary; only `sleep_us` and `spin_us` apply; its function is `main.handle`).
    pub go: bool,
    /// Start the server in this cgroup v2 directory (it enters it before it executes).
    pub cgroup: Option<PathBuf>,
    /// Another build of the thread-pool server (`build_fixture_variant("server", ...)`).
    pub binary: Option<PathBuf>,
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
            processes: None,
            go: false,
            cgroup: None,
            binary: None,
        }
    }
}

/// A running fixture server. Killed (SIGKILL) on drop if still running.
pub struct Server {
    /// The server, or what launched it (`podman run`).
    child: Child,
    /// The server's pid, as this process sees it.
    pid: u32,
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

/// A way to run the server other than as a child of the test: in a container
/// (`tests/src/containers.rs`).
pub trait Launcher {
    /// The command that runs `direct` (the server's own command line) the launcher's way.
    fn command(&self, direct: Command) -> Command;
    /// The server's pid as the test sees it, once it listens (`child` runs the command).
    fn pid(&self, child: &Child) -> Result<u32>;
}

/// The server as a child of the test.
struct Direct;

impl Launcher for Direct {
    fn command(&self, direct: Command) -> Command {
        direct
    }

    fn pid(&self, child: &Child) -> Result<u32> {
        Ok(child.id())
    }
}

impl Server {
    /// Builds (if needed) and starts the server, and waits until it listens.
    pub fn start(opts: &ServerOptions) -> Result<Server> {
        Server::start_via(opts, &Direct)
    }

    /// [`Server::start`] through `launcher`.
    pub fn start_via(opts: &ServerOptions, launcher: &dyn Launcher) -> Result<Server> {
        let bin = match (opts.go, opts.processes, &opts.binary) {
            (true, _, _) => build_go_fixture("goworker"),
            (false, Some(_), _) => build_fixture("prefork"),
            (false, None, Some(b)) => b.clone(),
            (false, None, None) => build_fixture("server"),
        };
        let (data, tmp) = match &opts.data {
            Some(p) => (p.clone(), None),
            None => {
                let tmp = tempfile::tempdir()?;
                let path = tmp.path().join("data");
                write_data_file(&path, 4096)?;
                (path, Some(tmp))
            }
        };
        let mut cmd = match &opts.cgroup {
            None => Command::new(&bin),
            Some(cg) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$CGROUP_PROCS" && exec "$0" "$@""#)
                    .arg(&bin)
                    .env("CGROUP_PROCS", cg.join("cgroup.procs"));
                c
            }
        };
        cmd.args(["--sleep-us", &opts.sleep_us.to_string()]);
        // Go's flag package takes --name as -name.
        if opts.go {
            cmd.args(["--spin-us", &opts.spin_us.to_string()]);
        } else {
            if let Some(n) = opts.max_requests {
                cmd.args(["--max-requests", &n.to_string()]);
            }
            match opts.processes {
                Some(n) => {
                    cmd.args(["--workers", &n.to_string()]);
                }
                None => {
                    cmd.arg("--data")
                        .arg(&data)
                        .args(["--workers", &opts.workers.to_string()])
                        .args(["--spin-us", &opts.spin_us.to_string()])
                        .args(["--threads-late", &opts.threads_late.to_string()])
                        .args(["--late-after-ms", &opts.late_after_ms.to_string()])
                        .args(["--late-linger-ms", &opts.late_linger_ms.to_string()]);
                }
            }
        }
        let mut child = launcher
            .command(cmd)
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
            pid: 0,
            port: 0,
            data,
            lines: Mutex::new(rx),
            seen: Mutex::default(),
            _tmp: tmp,
        };
        // Generous: a container's start on a loaded machine takes seconds; a server that
        // fails exits, which ends the wait at once.
        let line = server.next_line(Duration::from_secs(60), |l| l.starts_with("PORT "))?;
        server.port = line[5..].trim().parse().context("bad PORT line")?;
        server.pid = launcher.pid(&server.child)?;
        Ok(server)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
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
        // Generous: a container's removal after the server exits takes seconds when loaded.
        self.wait_exit(Duration::from_secs(30))
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
