//! Hot-spot flags: when an element is slow, erring or starved of CPU, for the thresholds
//! rendered with.

use crate::{FunctionStats, SyscallStats, ThreadStats, Thresholds};

/// `part / whole`, 0 when there is no whole.
pub(super) fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Hot-spot flags of a function.
pub(super) fn function_flags(f: &FunctionStats, t: &Thresholds) -> Vec<&'static str> {
    let mut v = Vec::new();
    if f.mean_ns > t.slow_mean_ns {
        v.push("slow");
    }
    if ratio(f.errors_for(t.error_if), f.calls) > t.error_ratio {
        v.push("errors");
    }
    if ratio(f.ready_ns, f.states_ns()) > t.ready_ratio {
        v.push("ready");
    }
    if f.estimated {
        v.push("estimated");
    }
    v
}

/// Hot-spot flags of a thread (`ready` of its alive time).
pub(super) fn thread_flags(th: &ThreadStats, t: &Thresholds) -> Vec<&'static str> {
    let mut v = Vec::new();
    if ratio(th.ready_ns, th.alive_ns()) > t.ready_ratio {
        v.push("ready");
    }
    if ratio(th.syscall_errors, th.syscalls) > t.error_ratio {
        v.push("errors");
    }
    v
}

/// Hot-spot flags of a system call, overall or of one thread.
pub(super) fn syscall_flags(s: &SyscallStats, t: &Thresholds) -> Vec<&'static str> {
    let mut v = Vec::new();
    if s.mean_ns > t.slow_mean_ns {
        v.push("slow");
    }
    if ratio(s.errors, s.calls) > t.error_ratio {
        v.push("errors");
    }
    v
}

/// Hot-spot flags of a connection's service time (or of the mean one, for all of them).
pub(super) fn service_flags(service_ns: u64, t: &Thresholds) -> Vec<&'static str> {
    if service_ns > t.slow_mean_ns {
        vec!["slow"]
    } else {
        vec![]
    }
}
