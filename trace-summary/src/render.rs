//! Rendering: hot-spot flags, sorting, and the three formats.
//!
//! Every format goes through the same preparation ([`prepare`]: flags for the
//! thresholds, the error rule, sort, top N), so a figure and its flags agree everywhere.
//! Tables and CSV share one row model ([`Table`]): each cell knows its unit, the table
//! writer turns it into human units and the CSV writer into raw numbers.

use std::io::Write;

use crate::units::{human_bytes, human_ns};
use crate::{
    By, CallEdge, Connection, ConnectionStats, Error, Format, FunctionStats, Section, Summary,
    SummaryOptions, SyscallStats, ThreadStats, Thresholds,
};

/// A value to sort on: numbers sort largest first, text alphabetically.
pub(crate) enum SortVal {
    Num(f64),
    Text(String),
}

/// An element that can be sorted by a named key.
pub(crate) trait Keyed {
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
            "switches" => n(self.voluntary_switches + self.involuntary_switches),
            "voluntary" => n(self.voluntary_switches),
            "involuntary" => n(self.involuntary_switches),
            "wakeups" => n(self.wakeups_sent + self.wakeups_received),
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
            "bytes" => n(self.bytes_read + self.bytes_written),
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
            "bytes" => n(self.bytes_read + self.bytes_written),
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
pub(crate) fn check_key<T: Keyed>(key: Option<&str>) -> Result<&'static str, Error> {
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

pub(crate) fn sort<T: Keyed>(v: &mut [T], key: &str) {
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

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Hot-spot flags of a function.
pub fn function_flags(f: &FunctionStats, t: &Thresholds) -> Vec<&'static str> {
    let mut v = Vec::new();
    if f.mean_ns > t.slow_mean_ns {
        v.push("slow");
    }
    if ratio(f.errors_for(t.error_if), f.calls) > t.error_ratio {
        v.push("errors");
    }
    let inside = f.running_ns + f.ready_ns + f.blocked_ns + f.io_ns;
    if ratio(f.ready_ns, inside) > t.ready_ratio {
        v.push("ready");
    }
    v
}

fn thread_flags(th: &ThreadStats, t: &Thresholds) -> Vec<&'static str> {
    let alive = th.running_ns + th.ready_ns + th.blocked_ns + th.io_ns;
    let mut v = Vec::new();
    if ratio(th.ready_ns, alive) > t.ready_ratio {
        v.push("ready");
    }
    if ratio(th.syscall_errors, th.syscalls) > t.error_ratio {
        v.push("errors");
    }
    v
}

fn syscall_flags(s: &SyscallStats, t: &Thresholds) -> Vec<&'static str> {
    let mut v = Vec::new();
    if s.mean_ns > t.slow_mean_ns {
        v.push("slow");
    }
    if ratio(s.errors, s.calls) > t.error_ratio {
        v.push("errors");
    }
    v
}

/// Flags, error rule, sorting and top N applied to a copy of `s`.
pub(crate) fn prepare(s: &mut Section, opts: &SummaryOptions) -> Result<(), Error> {
    let t = &opts.thresholds;
    for f in &mut s.functions {
        f.errors = f.errors_for(t.error_if);
        f.flags = function_flags(f, t);
    }
    for th in &mut s.threads {
        th.flags = thread_flags(th, t);
    }
    for x in s.syscalls.iter_mut().chain(&mut s.syscalls_by_thread) {
        x.flags = syscall_flags(x, t);
    }
    let c = &mut s.connections;
    c.flags = if c.service_mean_ns > t.slow_mean_ns {
        vec!["slow"]
    } else {
        vec![]
    };
    for x in &mut c.connections {
        x.flags = if x.service_ns > t.slow_mean_ns {
            vec!["slow"]
        } else {
            vec![]
        };
    }
    let key = opts.sort.as_deref();
    let pick = |b: By| if b == opts.by { key } else { None };
    sort(
        &mut s.functions,
        check_key::<FunctionStats>(pick(By::Function))?,
    );
    sort(&mut s.threads, check_key::<ThreadStats>(pick(By::Thread))?);
    let k = check_key::<SyscallStats>(pick(By::Syscall))?;
    sort(&mut s.syscalls, k);
    sort(&mut s.syscalls_by_thread, k);
    let k = check_key::<Connection>(pick(By::Connection))?;
    sort(&mut s.connections.connections, k);
    sort(
        &mut s.call_graph,
        check_key::<CallEdge>(pick(By::CallGraph))?,
    );
    if let Some(n) = opts.top {
        s.functions.truncate(n);
        s.threads.truncate(n);
        s.syscalls.truncate(n);
        s.syscalls_by_thread.truncate(n);
        s.connections.connections.truncate(n);
        s.call_graph.truncate(n);
    }
    Ok(())
}

/// Writes `summary` as `opts` say. With `opts.window_ns`, the per-window figures (the
/// summary must have been made with windows) are written instead of the totals.
pub fn render(summary: &Summary, opts: &SummaryOptions, out: &mut dyn Write) -> Result<(), Error> {
    let mut s = summary.clone();
    prepare(&mut s.total, opts)?;
    for f in &mut s.per_file {
        prepare(f, opts)?;
    }
    for w in &mut s.windows {
        prepare(&mut w.section, opts)?;
    }
    let windowed = opts.window_ns.is_some();
    if windowed && s.window_ns.is_none() {
        return Err(Error::Option(
            "per-window output asked for a summary made without windows".into(),
        ));
    }
    match opts.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &s).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        Format::Csv => {
            let mut first = true;
            let scopes: Vec<(Option<(u64, u64)>, &Section)> = if windowed {
                (s.windows.iter())
                    .map(|w| (Some((w.start_ns, w.end_ns)), &w.section))
                    .collect()
            } else {
                vec![(None, &s.total)]
            };
            for (win, sec) in scopes {
                let mut t = table(sec, opts.by, windowed, true);
                if let Some((a, b)) = win {
                    t.cols.insert(0, ("window_end_ns", "end"));
                    t.cols.insert(0, ("window_start_ns", "start"));
                    for r in &mut t.rows {
                        r.insert(0, Cell::Int(b));
                        r.insert(0, Cell::Int(a));
                    }
                }
                t.write_csv(out, first)?;
                first = false;
            }
        }
        Format::Table => {
            write_header(&s, out)?;
            if windowed {
                for w in &s.windows {
                    writeln!(
                        out,
                        "\nwindow {} .. {}",
                        human_ns(w.start_ns),
                        human_ns(w.end_ns)
                    )?;
                    table(&w.section, opts.by, true, false).write_table(out)?;
                }
            } else {
                write_section(&s.total, opts.by, out)?;
            }
            for note in &s.notes {
                writeln!(out, "note: {note}")?;
            }
        }
    }
    Ok(())
}

fn write_header(s: &Summary, out: &mut dyn Write) -> std::io::Result<()> {
    let files: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
    writeln!(
        out,
        "{}: {} records over {}, {} threads, {} functions, {} connections",
        files.join(", "),
        s.records,
        human_ns(s.duration_ns()),
        s.total.threads.len(),
        s.total.functions.len(),
        s.total.connections.accepted
    )
}

fn write_section(s: &Section, by: By, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out)?;
    table(s, by, false, false).write_table(out)?;
    match by {
        By::Function => {
            let mut t = Table::new(&[
                ("function", "function"),
                ("syscall", "syscall"),
                ("calls", "calls"),
                ("errors", "errors"),
                ("total_ns", "total"),
                ("bytes_read", "read"),
                ("bytes_written", "written"),
            ]);
            for f in &s.functions {
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
            if !t.rows.is_empty() {
                writeln!(out, "\nsystem calls inside functions (callees included)")?;
                t.write_table(out)?;
            }
        }
        By::Syscall => {
            let t = syscall_table(&s.syscalls_by_thread, true);
            if !t.rows.is_empty() {
                writeln!(out, "\nper thread")?;
                t.write_table(out)?;
            }
        }
        By::Connection => {
            let c = &s.connections;
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
            if !t.rows.is_empty() {
                writeln!(out, "\ntime per byte against connections in service")?;
                t.write_table(out)?;
            }
            let mut t = connection_list(&c.connections);
            if !t.rows.is_empty() {
                writeln!(out, "\nslowest connections")?;
                t.rows.truncate(c.connections.len());
                t.write_table(out)?;
            }
        }
        By::Thread | By::CallGraph => {}
    }
    Ok(())
}

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

    pub fn write_csv(&self, out: &mut dyn Write, header: bool) -> std::io::Result<()> {
        if header {
            let names: Vec<&str> = self.cols.iter().map(|c| c.0).collect();
            writeln!(out, "{}", names.join(","))?;
        }
        let mut line = String::new();
        for r in &self.rows {
            line.clear();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                line.push_str(&csv_cell(c));
            }
            writeln!(out, "{line}")?;
        }
        Ok(())
    }

    pub fn write_table(&self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.rows.is_empty() {
            return writeln!(out, "(none)");
        }
        let cells: Vec<Vec<(String, bool)>> = (self.rows.iter())
            .map(|r| r.iter().map(human_cell).collect())
            .collect();
        let mut width: Vec<usize> = self.cols.iter().map(|c| c.1.chars().count()).collect();
        for r in &cells {
            for (i, (s, _)) in r.iter().enumerate() {
                width[i] = width[i].max(s.chars().count());
            }
        }
        // Text columns (left-aligned) are those whose first cell is text.
        let left: Vec<bool> = (0..self.cols.len())
            .map(|i| cells.first().is_some_and(|r| !r[i].1))
            .collect();
        let mut line = String::new();
        let pad = |line: &mut String, s: &str, w: usize, left: bool, last: bool| {
            let n = w.saturating_sub(s.chars().count());
            if left {
                line.push_str(s);
                if !last {
                    line.extend(std::iter::repeat_n(' ', n));
                }
            } else {
                line.extend(std::iter::repeat_n(' ', n));
                line.push_str(s);
            }
        };
        let last = self.cols.len() - 1;
        for (i, c) in self.cols.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            pad(&mut line, c.1, width[i], left[i], i == last);
        }
        writeln!(out, "{}", line.trim_end())?;
        for r in &cells {
            line.clear();
            for (i, (s, _)) in r.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                pad(&mut line, s, width[i], left[i], i == last);
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

fn csv_cell(c: &Cell) -> String {
    match c {
        Cell::Missing => String::new(),
        Cell::Text(s) => {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.clone()
            }
        }
        Cell::Int(v) | Cell::Ns(v) | Cell::Bytes(v) | Cell::Share(v, _) => v.to_string(),
        Cell::SInt(v) | Cell::SNs(v) => v.to_string(),
        Cell::NsF(v) => format!("{v:.3}"),
        Cell::Pct(v) | Cell::Change(v) => format!("{v:.2}"),
        Cell::Flags(f) => f.join(";"),
    }
}

/// The terminal text of a cell and whether it is a number (right-aligned).
fn human_cell(c: &Cell) -> (String, bool) {
    match c {
        Cell::Text(s) => (s.clone(), false),
        Cell::Missing => ("-".into(), true),
        Cell::Int(v) => (v.to_string(), true),
        Cell::SInt(v) => (format!("{v:+}"), true),
        Cell::Ns(v) => (human_ns(*v), true),
        Cell::SNs(v) => {
            let sign = if *v < 0 { "-" } else { "+" };
            (format!("{sign}{}", human_ns(v.unsigned_abs())), true)
        }
        Cell::NsF(v) => {
            if *v >= 1000.0 {
                (human_ns(*v as u64), true)
            } else {
                (format!("{v:.2}ns"), true)
            }
        }
        Cell::Bytes(v) => (human_bytes(*v), true),
        Cell::Share(p, w) => (format!("{:.1}%", ratio(*p, *w) * 100.0), true),
        Cell::Pct(v) => (format!("{v:.1}%"), true),
        Cell::Change(v) => {
            if v.is_finite() {
                (format!("{v:+.1}%"), true)
            } else {
                ("new".into(), true)
            }
        }
        Cell::Flags(f) => (f.join(","), false),
    }
}

/// The main table of `by` for a section. `windowed`: the compact per-window columns;
/// `csv`: one table must say everything (connections: one row per connection).
fn table(s: &Section, by: By, windowed: bool, csv: bool) -> Table {
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
        let inside = f.running_ns + f.ready_ns + f.blocked_ns + f.io_ns;
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
            Cell::Share(f.running_ns, inside),
            Cell::Share(f.ready_ns, inside),
            Cell::Share(f.blocked_ns, inside),
            Cell::Share(f.io_ns, inside),
            Cell::Flags(f.flags.clone()),
            Cell::Text(f.source.clone().unwrap_or_default()),
        ]);
    }
    t
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

fn syscall_table(v: &[SyscallStats], per_thread: bool) -> Table {
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

fn connection_list(v: &[Connection]) -> Table {
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
