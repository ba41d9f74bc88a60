//! Rendering: one summary, prepared once, written in the format asked.
//!
//! Every format goes through the same preparation ([`prepare`]: flags for the
//! thresholds, the error rule, sort, top N), so a figure and its flags agree everywhere.
//! Tables and CSV share one row model ([`Table`]): each cell knows its unit, the terminal
//! writer turns it into human units and the CSV writer into raw numbers; JSON is the
//! [`Summary`] itself; JUnit reports the hot-spot flags.

mod columns;
mod csv;
mod flags;
mod junit;
mod keys;
mod text;

use std::io::Write;

pub(crate) use columns::{Cell, Table};
use flags::{function_flags, service_flags, syscall_flags, thread_flags};
use keys::{check_key, sort};

use crate::{
    By, CallEdge, Connection, Error, Format, FunctionStats, Section, Summary, SummaryOptions,
    SyscallStats, ThreadStats,
};

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
    c.flags = service_flags(c.service_mean_ns, t);
    for x in &mut c.connections {
        x.flags = service_flags(x.service_ns, t);
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
    if opts.window_ns.is_some() && s.window_ns.is_none() {
        return Err(Error::Option(
            "per-window output asked for a summary made without windows".into(),
        ));
    }
    match opts.format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &s).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        Format::Csv => csv::write(&s, opts, out)?,
        Format::Table => text::write(&s, opts, out)?,
        Format::Junit => junit::write(&s, opts, out)?,
    }
    Ok(())
}
