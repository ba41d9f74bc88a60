//! CSV: a summary's rows as raw numbers (ns, bytes) under one header line; per-window
//! rows start with their window.

use std::fmt::Write as _;
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
    /// The rows, after the header line if `header`. The csv crate quotes a field when it
    /// holds a comma, a quote, a line feed or a carriage return (RFC 4180).
    pub fn write_csv(&self, out: &mut dyn Write, header: bool) -> Result<()> {
        let mut w = csv::Writer::from_writer(out);
        if header {
            w.write_record(self.cols.iter().map(|c| c.0))
                .map_err(io_error)?;
        }
        let mut field = String::new();
        for r in &self.rows {
            for c in r {
                field.clear();
                raw(c, &mut field);
                w.write_field(&field).map_err(io_error)?;
            }
            w.write_record(None::<&[u8]>).map_err(io_error)?;
        }
        w.flush()
    }
}

/// The CSV text of a cell, before quoting: the raw number (ns, bytes; a share is its
/// part), empty when missing, flags joined by `;`.
fn raw(c: &Cell, field: &mut String) {
    // Writing into a String cannot fail.
    let _ = match c {
        Cell::Missing => Ok(()),
        Cell::Text(s) => field.write_str(s),
        Cell::Int(v) | Cell::Ns(v) | Cell::Bytes(v) | Cell::Share(v, _) => write!(field, "{v}"),
        Cell::SInt(v) | Cell::SNs(v) => write!(field, "{v}"),
        Cell::NsF(v) => write!(field, "{v:.3}"),
        Cell::Pct(v) | Cell::Change(v) => write!(field, "{v:.2}"),
        Cell::Flags(f) => field.write_str(&f.join(";")),
    };
}

/// The writer's failure as the I/O error under it, its kind kept (a closed pipe stays
/// one); rows of equal length and any bytes meet no other.
fn io_error(e: csv::Error) -> std::io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => std::io::Error::other(format!("CSV: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_quoted_only_when_it_must_be() {
        let mut t = Table::new(&[("name", "name"), ("calls", "calls"), ("flags", "flags")]);
        for name in [
            "plain",
            "a,b",
            "say \"hi\"",
            "two\nlines",
            "cr\rhere",
            "",
            " pad ",
        ] {
            t.rows.push(vec![
                Cell::Text(name.into()),
                Cell::Int(3),
                Cell::Flags(vec!["slow", "errors"]),
            ]);
        }
        t.rows
            .push(vec![Cell::Missing, Cell::SInt(-2), Cell::Flags(vec![])]);
        let mut out = Vec::new();
        t.write_csv(&mut out, true).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "name,calls,flags\n\
             plain,3,slow;errors\n\
             \"a,b\",3,slow;errors\n\
             \"say \"\"hi\"\"\",3,slow;errors\n\
             \"two\nlines\",3,slow;errors\n\
             \"cr\rhere\",3,slow;errors\n\
             ,3,slow;errors\n \
             pad ,3,slow;errors\n\
             ,-2,\n"
        );
    }

    #[test]
    fn numbers_are_raw() {
        let mut t = Table::new(&[("a", "a"), ("b", "b"), ("c", "c"), ("d", "d"), ("e", "e")]);
        t.rows.push(vec![
            Cell::Ns(u64::MAX),
            Cell::SNs(i64::MIN),
            Cell::NsF(0.0005),
            Cell::Share(7, 9),
            Cell::Change(f64::INFINITY),
        ]);
        t.rows.push(vec![
            Cell::Bytes(1 << 40),
            Cell::SInt(5),
            Cell::NsF(1234.5678),
            Cell::Pct(12.345),
            Cell::Change(-3.333),
        ]);
        let mut out = Vec::new();
        t.write_csv(&mut out, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "18446744073709551615,-9223372036854775808,0.001,7,inf\n\
             1099511627776,5,1234.568,12.35,-3.33\n"
        );
    }
}
