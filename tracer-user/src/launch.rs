//! `tracer record -- CMD`: the command is forked and held just before its exec until every
//! probe is attached, so it is traced from its first instruction.

use std::{ffi::CString, path::Path};

use anyhow::{bail, Result};

/// A process we launched, held at the exec until released. Dropped while it still runs,
/// it is sent SIGTERM: a command lives as long as its recording.
pub struct Launched {
    pub pid: u32,
    go: libc::c_int,
    /// Its wait status, once reaped.
    status: std::cell::Cell<Option<libc::c_int>>,
}

impl Launched {
    /// Forks `command` (its program already found at `program`), held before exec.
    pub fn spawn(program: &Path, command: &[String]) -> Result<Launched> {
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
        // The command runs with the limit of open files the recorder was given.
        let nofile = crate::procfs::original_open_files_limit();
        // SAFETY: the child only calls async-signal-safe functions (read, setrlimit,
        // execv, _exit) on memory prepared before the fork.
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
                    if let Some(l) = &nofile {
                        libc::setrlimit(libc::RLIMIT_NOFILE, l);
                    }
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
            status: std::cell::Cell::new(None),
        })
    }

    /// Lets the command exec.
    pub fn release(&self) {
        // SAFETY: one byte to the pipe the child waits on.
        unsafe {
            libc::write(self.go, b"g".as_ptr().cast(), 1);
            libc::close(self.go);
        }
    }

    /// True once the command has exited (and reaps it).
    pub fn exited(&self) -> bool {
        if self.status.get().is_some() {
            return true;
        }
        let mut status = 0;
        // SAFETY: non-blocking wait on our own child.
        let done = unsafe {
            libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) == self.pid as i32
        };
        if done {
            self.status.set(Some(status));
        }
        done
    }

    /// The command's exit status as a shell gives it (128 + N when killed by signal N),
    /// once it has exited.
    pub fn exit_code(&self) -> Option<u8> {
        let status = self.status.get()?;
        Some(if libc::WIFSIGNALED(status) {
            128u8.saturating_add(libc::WTERMSIG(status) as u8)
        } else {
            libc::WEXITSTATUS(status) as u8
        })
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if !self.exited() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        }
    }
}
