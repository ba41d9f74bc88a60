//! Track ids (the scheme is in the module's doc) and the names and colours of state slices.

use trace_merge::timeline::ThreadState;

const STATE_TRACK: u64 = 1 << 30;
const CPUS: u64 = 1 << 30;
const GOROUTINE_TRACK: u64 = 1 << 31;

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
pub(super) fn state_colour(s: ThreadState) -> &'static str {
    match s {
        ThreadState::Running => "thread_state_running",
        ThreadState::Ready => "thread_state_runnable",
        ThreadState::Io => "thread_state_iowait",
        _ => "thread_state_sleeping",
    }
}
