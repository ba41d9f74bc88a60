//! Sort keys: the named keys each kind of row sorts on (`--sort`), and the sort.

use crate::{CallEdge, Connection, Error, FunctionStats, SyscallStats, ThreadStats};

/// A value to sort on: numbers sort largest first, text alphabetically.
pub(super) enum SortVal {
    Num(f64),
    Text(String),
}

/// An element that can be sorted by a named key.
pub(super) trait Keyed {
    /// Accepted keys; the first is the default.
    const KEYS: &'static [&'static str];
    fn key(&self, k: &str) -> SortVal;
    /// Tie-breaker, so equal keys keep a stable, meaningful order.
    fn name(&self) -> String;
}

use SortVal::{Num, Text};

fn n(v: u64) -> SortVal {
    Num(v as f64)
}

impl Keyed for FunctionStats {
    const KEYS: &'static [&'static str] = &[
        "total", "self", "calls", "errors", "mean", "p50", "p90", "p99", "max", "running", "ready",
        "blocked", "io", "name",
    ];
    fn key(&self, k: &str) -> SortVal {
        match k {
            "self" => n(self.self_ns),
            "calls" => n(self.calls),
            "errors" => n(self.errors),
            "mean" => n(self.mean_ns),
            "p50" => n(self.p50_ns),
            "p90" => n(self.p90_ns),
            "p99" => n(self.p99_ns),
            "max" => n(self.max_ns),
            "running" => n(self.running_ns),
            "ready" => n(self.ready_ns),
            "blocked" => n(self.blocked_ns),
            "io" => n(self.io_ns),
            "name" => Text(self.name.clone()),
            _ => n(self.inclusive_ns),
        }
    }
    fn name(&self) -> String {
        self.name.clone()
    }
}

impl Keyed for ThreadStats {
    const KEYS: &'static [&'static str] = &[
        "running",
        "total",
        "ready",
        "max_wait",
        "blocked",
        "io",
        "switches",
        "voluntary",
        "involuntary",
        "wakeups",
        "migrations",
        "syscalls",
        "name",
        "tid",
    ];
    fn key(&self, k: &str) -> SortVal {
        match k {
            "ready" => n(self.ready_ns),
            "max_wait" => n(self.ready_max_ns.unwrap_or(0)),
            "blocked" => n(self.blocked_ns),
            "io" => n(self.io_ns),
            "switches" => n(crate::sum([
                self.voluntary_switches,
                self.involuntary_switches,
            ])),
            "voluntary" => n(self.voluntary_switches),
            "involuntary" => n(self.involuntary_switches),
            "wakeups" => n(crate::sum([self.wakeups_sent, self.wakeups_received])),
            "migrations" => n(self.migrations),
            "syscalls" => n(self.syscalls),
            "name" => Text(self.name.clone()),
            "tid" => Num(-(self.tid as f64)),
            _ => n(self.running_ns),
        }
    }
    fn name(&self) -> String {
        format!("{}:{:010}", self.name, self.tid)
    }
}

impl Keyed for SyscallStats {
    const KEYS: &'static [&'static str] = &[
        "total", "calls", "errors", "mean", "p50", "p90", "p99", "max", "bytes", "read", "written",
        "name",
    ];
    fn key(&self, k: &str) -> SortVal {
        match k {
            "calls" => n(self.calls),
            "errors" => n(self.errors),
            "mean" => n(self.mean_ns),
            "p50" => n(self.p50_ns),
            "p90" => n(self.p90_ns),
            "p99" => n(self.p99_ns),
            "max" => n(self.max_ns),
            "bytes" => n(crate::sum([self.bytes_read, self.bytes_written])),
            "read" => n(self.bytes_read),
            "written" => n(self.bytes_written),
            "name" => Text(self.name.clone()),
            _ => n(self.total_ns),
        }
    }
    fn name(&self) -> String {
        format!("{}:{:010}", self.name, self.tid.unwrap_or(0))
    }
}

impl Keyed for Connection {
    const KEYS: &'static [&'static str] = &[
        "service",
        "total",
        "bytes",
        "read",
        "written",
        "operations",
        "concurrency",
        "id",
    ];
    fn key(&self, k: &str) -> SortVal {
        match k {
            "bytes" => n(crate::sum([self.bytes_read, self.bytes_written])),
            "read" => n(self.bytes_read),
            "written" => n(self.bytes_written),
            "operations" => n(self.operations),
            "concurrency" => n(self.concurrent_at_start as u64),
            "id" => Num(-(self.id as f64)),
            _ => n(self.service_ns),
        }
    }
    fn name(&self) -> String {
        format!("{:010}", self.id)
    }
}

impl Keyed for CallEdge {
    const KEYS: &'static [&'static str] = &["total", "calls", "mean", "max", "caller", "callee"];
    fn key(&self, k: &str) -> SortVal {
        match k {
            "calls" => n(self.calls),
            "mean" => n(self.mean_ns),
            "max" => n(self.max_ns),
            "caller" => Text(self.caller.clone()),
            "callee" => Text(self.callee.clone()),
            _ => n(self.total_ns),
        }
    }
    fn name(&self) -> String {
        format!("{} -> {}", self.caller, self.callee)
    }
}

/// The sort key for `by`, checked against the keys of that kind.
pub(super) fn check_key<T: Keyed>(key: Option<&str>) -> Result<&'static str, Error> {
    match key {
        None => Ok(T::KEYS[0]),
        Some(k) => T::KEYS.iter().find(|&&x| x == k).copied().ok_or_else(|| {
            Error::Option(format!(
                "unknown sort key {k:?} (expected one of: {})",
                T::KEYS.join(", ")
            ))
        }),
    }
}

/// Sorts by `key`, then by name so that equal keys keep one order.
pub(super) fn sort<T: Keyed>(v: &mut [T], key: &str) {
    // Lists hold elements, not events: computing keys per comparison is cheap enough.
    v.sort_by(|a, b| {
        let primary = match (a.key(key), b.key(key)) {
            (Num(x), Num(y)) => y.total_cmp(&x),
            (Text(x), Text(y)) => x.cmp(&y),
            _ => std::cmp::Ordering::Equal,
        };
        primary.then_with(|| a.name().cmp(&b.name()))
    });
}
