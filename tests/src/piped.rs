//! A fixture driven through its stdin and read through its stdout lines, and the system
//! settings some tests change for their length (a small filesystem, pid_max).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use crate::*;

/// A child process killed and reaped when dropped, if still running: a test that fails
/// leaves nothing behind to run on beside the next ones.
pub struct Reaped(pub Child);

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A fixture process whose stdin the test writes and whose stdout lines it waits for.
/// Killed (and reaped) on drop if still running.
pub struct Piped {
    child: Reaped,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Piped {
    /// Starts `bin ARGS...` with piped stdin and stdout.
    pub fn spawn(bin: &Path, args: &[&str]) -> Piped {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Piped {
            stdin: child.stdin.take(),
            child: Reaped(child),
            lines,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes `bytes` to its stdin (the fixtures' "go").
    pub fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(bytes).expect("writing to the fixture");
        stdin.flush().expect("writing to the fixture");
    }

    /// Closes its stdin (end of file: the fixtures' "quit").
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits up to `timeout` for a line `WORD n1 n2 ...` and returns the numbers; panics
    /// if none comes.
    pub fn numbers(&self, word: &str, timeout: Duration) -> Vec<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no `{word}` line from the fixture: {e}"));
            let mut fields = line.split_whitespace();
            if fields.next() == Some(word) {
                return fields
                    .map(|f| f.parse().unwrap_or_else(|_| panic!("bad line {line:?}")))
                    .collect();
            }
        }
    }

    /// Sends `sig` to it.
    pub fn signal(&self, sig: libc::c_int) {
        send_signal(self.pid(), sig).unwrap();
    }

    /// Closes stdin and waits up to `timeout` for it to exit.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        self.close_stdin();
        wait_child(&mut self.child, timeout).unwrap()
    }
}

/// Waits up to `timeout` for a process the test started (a tracer that stops by itself)
/// to exit, and returns its status and output; kills it and panics if it does not.
pub fn wait_output(mut child: Child, timeout: Duration) -> Output {
    if !wait_until(timeout, || !matches!(child.try_wait(), Ok(None))) {
        let _ = child.kill();
        let out = child.wait_with_output().expect("child vanished");
        panic!(
            "pid did not exit within {timeout:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.wait_with_output().expect("child vanished")
}

/// A tmpfs of a given size mounted on a directory, unmounted on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount's syntax, e.g. "4m") on `dir`.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size}"))
            .arg("tmpfs")
            .arg(dir)
            .status()
            .expect("running mount");
        assert!(status.success(), "mount -t tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a file still open (a tracer that failed the test) must not keep it.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Raises kernel.pid_max for the guard's life, restoring it after: thread ids must not
/// wrap around while a test counts more of them than a table would hold.
pub struct PidMax(Option<String>);

impl PidMax {
    pub fn at_least(n: u64) -> PidMax {
        const PATH: &str = "/proc/sys/kernel/pid_max";
        let old = std::fs::read_to_string(PATH).unwrap();
        if old.trim().parse::<u64>().unwrap() >= n {
            return PidMax(None);
        }
        std::fs::write(PATH, n.to_string()).unwrap();
        PidMax(Some(old))
    }
}

impl Drop for PidMax {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write("/proc/sys/kernel/pid_max", old.trim());
        }
    }
}
