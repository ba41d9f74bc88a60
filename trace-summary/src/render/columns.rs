//! The row model shared by the terminal and CSV: cells that know their unit, and the
//! columns of each kind of element.

use crate::{
    By, CallEdge, Connection, ConnectionStats, FunctionStats, Section, SyscallStats, ThreadStats,
};

/// A cell: a value and its unit.
#[derive(Clone, Debug)]
pub(crate) enum Cell {
    Text(String),
    /// Not known for this input (`-` on a terminal, empty in CSV).
    Missing,
    Int(u64),
    /// Signed integer (differences).
    SInt(i64),
    Ns(u64),
    /// Signed duration (differences).
    SNs(i64),
    /// Fractional ns (time per byte).
    NsF(f64),
    Bytes(u64),
    /// `part` of `whole`: a percentage on a terminal, `part` in CSV.
    Share(u64, u64),
    /// A percentage (CSV: the number).
    Pct(f64),
    /// A relative change in percent, signed; infinite when from 0 (CSV: the number).
    Change(f64),
    Flags(Vec<&'static str>),
}

/// Rows of one kind, with CSV names and terminal labels for the columns.
pub(crate) struct Table {
    pub cols: Vec<(&'static str, &'static str)>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(cols: &[(&'static str, &'static str)]) -> Table {
        Table {
            cols: cols.to_vec(),
            rows: Vec::new(),
        }
    }
}

/// The main table of `by` for a section. `windowed`: the compact per-window columns;
/// `csv`: one table must say everything (connections: one row per connection).
pub(super) fn table(s: &Section, by: By, windowed: bool, csv: bool) -> Table {
    match by {
        By::Function => function_table(&s.functions),
        By::Thread => thread_table(&s.threads),
        By::Syscall => syscall_table(&s.syscalls, false),
        // On a terminal the list of connections comes after the concurrency table.
        By::Connection if windowed || !csv => connection_totals(&s.connections),
        By::Connection => connection_list(&s.connections.connections),
        By::CallGraph => edge_table(&s.call_graph),
    }
}

fn function_table(v: &[FunctionStats]) -> Table {
    let mut t = Table::new(&[
        ("function", "function"),
        ("calls", "calls"),
        ("errors", "errors"),
        ("inclusive_ns", "total"),
        ("self_ns", "self"),
        ("mean_ns", "mean"),
        ("p50_ns", "p50"),
        ("p90_ns", "p90"),
        ("p99_ns", "p99"),
        ("max_ns", "max"),
        ("session_pct", "session"),
        ("running_ns", "run"),
        ("ready_ns", "ready"),
        ("blocked_ns", "blocked"),
        ("io_ns", "io"),
        ("flags", "flags"),
        ("source", "source"),
    ]);
    for f in v {
        let inside = crate::sum([f.running_ns, f.ready_ns, f.blocked_ns, f.io_ns]);
        let unmeasured = f.goroutine && !f.goroutine_split;
        if f.point || (f.timed_calls == 0 && f.calls > 0) {
            // A USDT probe's hits, or calls counted with none timed: no time to show.
            let mut row = vec![Cell::Text(f.name.clone()), Cell::Int(f.calls)];
            row.resize(t.cols.len() - 2, Cell::Missing);
            row.push(Cell::Flags(f.flags.clone()));
            row.push(Cell::Text(f.source.clone().unwrap_or_default()));
            t.rows.push(row);
            continue;
        }
        t.rows.push(vec![
            Cell::Text(f.name.clone()),
            Cell::Int(f.calls),
            Cell::Int(f.errors),
            Cell::Ns(f.inclusive_ns),
            Cell::Ns(f.self_ns),
            Cell::Ns(f.mean_ns),
            Cell::Ns(f.p50_ns),
            Cell::Ns(f.p90_ns),
            Cell::Ns(f.p99_ns),
            Cell::Ns(f.max_ns),
            Cell::Pct(f.session_pct),
            split(unmeasured, f.running_ns, inside),
            split(unmeasured, f.ready_ns, inside),
            split(unmeasured, f.blocked_ns, inside),
            split(unmeasured, f.io_ns, inside),
            Cell::Flags(f.flags.clone()),
            Cell::Text(f.source.clone().unwrap_or_default()),
        ]);
    }
    t
}

/// A share of a function's thread-state split: not measured for Go functions of files
/// without their goroutines' status, nor for functions of a stat file without samples
/// (`--sample N`), whose split is all zero.
fn split(unmeasured: bool, part: u64, whole: u64) -> Cell {
    if unmeasured || whole == 0 {
        Cell::Missing
    } else {
        Cell::Share(part, whole)
    }
}

fn thread_table(v: &[ThreadStats]) -> Table {
    let mut t = Table::new(&[
        ("thread", "thread"),
        ("tid", "tid"),
        ("process", "process"),
        ("running_ns", "running"),
        ("ready_ns", "ready"),
        ("ready_waits", "waits"),
        ("ready_p99_ns", "p99 wait"),
        ("ready_max_ns", "max wait"),
        ("blocked_ns", "blocked"),
        ("io_ns", "io"),
        ("voluntary_switches", "vol cs"),
        ("involuntary_switches", "invol cs"),
        ("wakeups_sent", "wakes sent"),
        ("wakeups_received", "wakes recv"),
        ("migrations", "migrations"),
        ("syscalls", "syscalls"),
        ("syscall_ns", "in syscalls"),
        ("flags", "flags"),
    ]);
    for th in v {
        t.rows.push(vec![
            Cell::Text(th.name.clone()),
            Cell::Int(th.tid as u64),
            Cell::Text(th.process.clone()),
            Cell::Ns(th.running_ns),
            Cell::Ns(th.ready_ns),
            th.ready_waits.map_or(Cell::Missing, Cell::Int),
            th.ready_p99_ns.map_or(Cell::Missing, Cell::Ns),
            th.ready_max_ns.map_or(Cell::Missing, Cell::Ns),
            Cell::Ns(th.blocked_ns),
            Cell::Ns(th.io_ns),
            Cell::Int(th.voluntary_switches),
            Cell::Int(th.involuntary_switches),
            Cell::Int(th.wakeups_sent),
            Cell::Int(th.wakeups_received),
            Cell::Int(th.migrations),
            Cell::Int(th.syscalls),
            Cell::Ns(th.syscall_ns),
            Cell::Flags(th.flags.clone()),
        ]);
    }
    t
}

pub(super) fn syscall_table(v: &[SyscallStats], per_thread: bool) -> Table {
    let mut cols = vec![("syscall", "syscall")];
    if per_thread {
        cols.push(("thread", "thread"));
        cols.push(("tid", "tid"));
    }
    cols.extend_from_slice(&[
        ("calls", "calls"),
        ("errors", "errors"),
        ("total_ns", "total"),
        ("mean_ns", "mean"),
        ("p50_ns", "p50"),
        ("p99_ns", "p99"),
        ("max_ns", "max"),
        ("bytes_read", "read"),
        ("bytes_written", "written"),
        ("errnos", "errnos"),
        ("flags", "flags"),
    ]);
    let mut t = Table::new(&cols);
    for s in v {
        let mut row = vec![Cell::Text(s.name.clone())];
        if per_thread {
            row.push(Cell::Text(s.thread.clone().unwrap_or_default()));
            row.push(Cell::Int(s.tid.unwrap_or(0) as u64));
        }
        let errnos: Vec<String> = (s.errnos.iter())
            .map(|e| format!("{}={}", e.name, e.count))
            .collect();
        row.extend([
            Cell::Int(s.calls),
            Cell::Int(s.errors),
            Cell::Ns(s.total_ns),
            Cell::Ns(s.mean_ns),
            Cell::Ns(s.p50_ns),
            Cell::Ns(s.p99_ns),
            Cell::Ns(s.max_ns),
            Cell::Bytes(s.bytes_read),
            Cell::Bytes(s.bytes_written),
            Cell::Text(errnos.join(" ")),
            Cell::Flags(s.flags.clone()),
        ]);
        t.rows.push(row);
    }
    t
}

pub(super) fn connection_list(v: &[Connection]) -> Table {
    let mut t = Table::new(&[
        ("id", "connection"),
        ("tgid", "pid"),
        ("accepted_ns", "accepted at"),
        ("service_ns", "service"),
        ("closed", "closed"),
        ("bytes_read", "read"),
        ("bytes_written", "written"),
        ("operations", "ops"),
        ("concurrent_at_start", "in service"),
        ("threads", "threads"),
        ("flags", "flags"),
    ]);
    for c in v {
        let tids: Vec<String> = c.threads.iter().map(u32::to_string).collect();
        t.rows.push(vec![
            Cell::Int(c.id as u64),
            Cell::Int(c.tgid as u64),
            Cell::Ns(c.accepted_ns),
            Cell::Ns(c.service_ns),
            Cell::Text(if c.closed { "yes" } else { "no" }.into()),
            Cell::Bytes(c.bytes_read),
            Cell::Bytes(c.bytes_written),
            Cell::Int(c.operations),
            Cell::Int(c.concurrent_at_start as u64),
            Cell::Text(tids.join(" ")),
            Cell::Flags(c.flags.clone()),
        ]);
    }
    t
}

fn connection_totals(c: &ConnectionStats) -> Table {
    let mut t = Table::new(&[
        ("accepted", "accepted"),
        ("closed", "closed"),
        ("service_mean_ns", "mean service"),
        ("service_p99_ns", "p99 service"),
        ("bytes_read", "read"),
        ("bytes_written", "written"),
        ("max_concurrency", "max in service"),
        ("flags", "flags"),
    ]);
    t.rows.push(vec![
        Cell::Int(c.accepted),
        Cell::Int(c.closed),
        Cell::Ns(c.service_mean_ns),
        Cell::Ns(c.service_p99_ns),
        Cell::Bytes(c.bytes_read),
        Cell::Bytes(c.bytes_written),
        Cell::Int(c.max_concurrency as u64),
        Cell::Flags(c.flags.clone()),
    ]);
    t
}

fn edge_table(v: &[CallEdge]) -> Table {
    let mut t = Table::new(&[
        ("caller", "caller"),
        ("callee", "callee"),
        ("calls", "calls"),
        ("total_ns", "total"),
        ("mean_ns", "mean"),
        ("max_ns", "max"),
    ]);
    for e in v {
        t.rows.push(vec![
            Cell::Text(e.caller.clone()),
            Cell::Text(e.callee.clone()),
            Cell::Int(e.calls),
            Cell::Ns(e.total_ns),
            Cell::Ns(e.mean_ns),
            Cell::Ns(e.max_ns),
        ]);
    }
    t
}

/// The system calls made inside each function (callees included).
pub(super) fn inner_syscall_table(v: &[FunctionStats]) -> Table {
    let mut t = Table::new(&[
        ("function", "function"),
        ("syscall", "syscall"),
        ("calls", "calls"),
        ("errors", "errors"),
        ("total_ns", "total"),
        ("bytes_read", "read"),
        ("bytes_written", "written"),
    ]);
    for f in v {
        for x in &f.syscalls {
            t.rows.push(vec![
                Cell::Text(f.name.clone()),
                Cell::Text(x.name.clone()),
                Cell::Int(x.calls),
                Cell::Int(x.errors),
                Cell::Ns(x.total_ns),
                Cell::Bytes(x.bytes_read),
                Cell::Bytes(x.bytes_written),
            ]);
        }
    }
    t
}

/// Time per byte against the connections in service at acceptance.
pub(super) fn concurrency_table(c: &ConnectionStats) -> Table {
    let mut t = Table::new(&[
        ("concurrency", "in service"),
        ("connections", "connections"),
        ("mean_service_ns", "mean service"),
        ("bytes", "bytes"),
        ("ns_per_byte", "time/byte"),
    ]);
    for r in &c.by_concurrency {
        t.rows.push(vec![
            Cell::Int(r.concurrency as u64),
            Cell::Int(r.connections),
            Cell::Ns(r.mean_service_ns),
            Cell::Bytes(r.bytes),
            Cell::NsF(r.ns_per_byte),
        ]);
    }
    t
}
