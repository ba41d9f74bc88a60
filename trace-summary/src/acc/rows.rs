//! One accumulator to one public row: percentiles from its histogram, ratios, and its
//! lists (system calls inside a function, errnos, slowest connections) in their order.

use trace_merge::sysclass;

use super::conn::ConnAcc;
use super::scope::{FuncAcc, SysAcc};
use crate::{
    ConcurrencyRow, Connection, ConnectionStats, ErrnoCount, ErrorRule, FunctionStats,
    InnerSyscall, SyscallStats,
};

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// A function's row; `duration`: of the scope, for its share of the session.
pub(super) fn func_stats(
    name: &str,
    binary: &str,
    source: Option<String>,
    file: Option<u32>,
    a: &FuncAcc,
    duration: u64,
    rule: ErrorRule,
) -> FunctionStats {
    let h = &a.hist;
    let mut syscalls: Vec<InnerSyscall> = (a.inner.iter())
        .map(|i| InnerSyscall {
            name: sysclass::name(i.nr).into_owned(),
            nr: i.nr,
            calls: i.calls,
            errors: i.errors,
            total_ns: i.ns.0,
            bytes_read: i.read.0,
            bytes_written: i.written.0,
        })
        .collect();
    syscalls.sort_by(|x, y| y.total_ns.cmp(&x.total_ns).then(x.nr.cmp(&y.nr)));
    let mut f = FunctionStats {
        name: name.to_string(),
        binary: binary.to_string(),
        source,
        file,
        calls: a.calls,
        errors: 0,
        errors_negative: a.neg,
        errors_nonzero: a.nonzero,
        unfinished: a.unfinished,
        inclusive_ns: a.inclusive.0,
        self_ns: a.self_ns.0,
        running_ns: a.split[0].0,
        ready_ns: a.split[1].0,
        blocked_ns: a.split[2].0,
        io_ns: a.split[3].0,
        mean_ns: h.mean(),
        min_ns: h.min(),
        p50_ns: h.quantile(0.5),
        p90_ns: h.quantile(0.9),
        p99_ns: h.quantile(0.99),
        max_ns: h.max(),
        session_pct: pct(a.inclusive.0, duration),
        timed_calls: a.calls,
        p50_ci_ns: None,
        p99_ci_ns: None,
        estimated: false,
        syscalls,
        goroutine: a.go,
        goroutine_split: a.go_split,
        point: a.point,
        flags: Vec::new(),
        hist: h.clone(),
    };
    f.errors = f.errors_for(rule);
    f
}

/// A system call's row; `thread`: (tid, name) for per-thread rows.
pub(super) fn sys_stats(
    nr: u32,
    file: Option<u32>,
    thread: Option<(u32, String)>,
    a: &SysAcc,
) -> SyscallStats {
    let h = &a.hist;
    let mut errnos: Vec<ErrnoCount> = (a.errnos.iter())
        .map(|&(e, n)| ErrnoCount {
            errno: e,
            name: tracer_abi::errno::name(e).map_or_else(|| format!("errno {e}"), str::to_string),
            count: n,
        })
        .collect();
    errnos.sort_by(|x, y| y.count.cmp(&x.count).then(x.errno.cmp(&y.errno)));
    let (tid, tname) = match thread {
        Some((t, n)) => (Some(t), Some(n)),
        None => (None, None),
    };
    SyscallStats {
        name: sysclass::name(nr).into_owned(),
        nr,
        file,
        tid,
        thread: tname,
        calls: a.calls,
        errors: a.errors,
        errnos,
        unfinished: a.unfinished,
        total_ns: h.sum(),
        mean_ns: h.mean(),
        p50_ns: h.quantile(0.5),
        p90_ns: h.quantile(0.9),
        p99_ns: h.quantile(0.99),
        max_ns: h.max(),
        bytes_read: a.read.0,
        bytes_written: a.written.0,
        flags: Vec::new(),
        hist: h.clone(),
    }
}

/// The connections' figures of a scope.
pub(super) fn conn_stats(a: &ConnAcc) -> ConnectionStats {
    let h = &a.hist;
    let mut conns: Vec<Connection> = a.slowest.iter().map(|s| s.0.clone()).collect();
    conns.sort_by(|x, y| y.service_ns.cmp(&x.service_ns).then(x.id.cmp(&y.id)));
    let by_concurrency = (a.by_conc.iter().enumerate())
        .filter(|(_, r)| r.0 > 0)
        .map(|(k, &(n, svc, bytes))| (k, n, svc.0, bytes.0))
        .map(|(k, n, svc, bytes)| ConcurrencyRow {
            concurrency: k as u32,
            connections: n,
            service_ns: svc,
            mean_service_ns: svc / n.max(1),
            bytes,
            ns_per_byte: if bytes == 0 {
                0.0
            } else {
                svc as f64 / bytes as f64
            },
        })
        .collect();
    ConnectionStats {
        accepted: a.accepted,
        closed: a.closed,
        open_at_end: a.open_at_end,
        bytes_read: a.read.0,
        bytes_written: a.written.0,
        service_total_ns: h.sum(),
        service_mean_ns: h.mean(),
        service_p50_ns: h.quantile(0.5),
        service_p90_ns: h.quantile(0.9),
        service_p99_ns: h.quantile(0.99),
        service_max_ns: h.max(),
        max_concurrency: a.max_concurrency,
        by_concurrency,
        connections: conns,
        flags: Vec::new(),
        hist: h.clone(),
    }
}
