//! The terminal: a summary as aligned columns in human units, with the extra tables of
//! each view and the notes.

use std::io::{Result, Write};

use super::columns::{
    concurrency_table, connection_list, inner_syscall_table, syscall_table, table, Cell, Table,
};
use super::flags::ratio;
use crate::units::{human_bytes, human_ns};
use crate::{By, Section, Summary, SummaryOptions};

/// Writes a prepared summary: header, the table of `opts.by` (per window with
/// `opts.window_ns`), notes.
pub(super) fn write(s: &Summary, opts: &SummaryOptions, out: &mut dyn Write) -> Result<()> {
    write_header(s, out)?;
    if opts.window_ns.is_some() {
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
    Ok(())
}

fn write_header(s: &Summary, out: &mut dyn Write) -> Result<()> {
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

/// The table of `by`, then the view's extra tables, each under its title when not empty.
fn write_section(s: &Section, by: By, out: &mut dyn Write) -> Result<()> {
    writeln!(out)?;
    table(s, by, false, false).write_table(out)?;
    let extra = match by {
        By::Function => vec![(
            "system calls inside functions (callees included)",
            inner_syscall_table(&s.functions),
        )],
        By::Syscall => vec![("per thread", syscall_table(&s.syscalls_by_thread, true))],
        By::Connection => vec![
            (
                "time per byte against connections in service",
                concurrency_table(&s.connections),
            ),
            (
                "slowest connections",
                connection_list(&s.connections.connections),
            ),
        ],
        By::Thread | By::CallGraph => vec![],
    };
    for (title, t) in extra {
        if !t.rows.is_empty() {
            writeln!(out, "\n{title}")?;
            t.write_table(out)?;
        }
    }
    Ok(())
}

impl Table {
    /// Aligned columns: text left, numbers right, two spaces apart; `(none)` when empty.
    pub fn write_table(&self, out: &mut dyn Write) -> Result<()> {
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
