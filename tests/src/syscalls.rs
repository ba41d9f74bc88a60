//! The known-syscall fixture: a documented sequence of system calls, checked by itself.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::*;

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
