//! CSV: a summary's rows as raw numbers (ns, bytes) under one header line; per-window
//! rows start with their window.

use std::io::{Result, Write};

use super::columns::{table, Cell, Table};
use crate::{Section, Summary, SummaryOptions};

/// Writes the table of `opts.by` of a prepared summary: of the whole trace, or with
/// `opts.window_ns` of every window in turn.
pub(super) fn write(s: &Summary, opts: &SummaryOptions, out: &mut dyn Write) -> Result<()> {
    let windowed = opts.window_ns.is_some();
    let scopes: Vec<(Option<(u64, u64)>, &Section)> = if windowed {
        (s.windows.iter())
            .map(|w| (Some((w.start_ns, w.end_ns)), &w.section))
            .collect()
    } else {
        vec![(None, &s.total)]
    };
    let mut first = true;
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
    Ok(())
}

impl Table {
    /// The rows, after the header line if `header`.
    pub fn write_csv(&self, out: &mut dyn Write, header: bool) -> Result<()> {
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
