//! `tracer diff A B`: two summaries side by side, element by element.
//!
//! Elements are matched by name (functions by name and binary, system calls by name,
//! threads by process and thread name, call-graph edges by caller and callee), since
//! ids, tids and connection numbers mean nothing across runs. Rows are sorted by the
//! largest regression: the largest increase of the sort key (total time by default).

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use crate::render::{Cell, Table};
use crate::{By, Error, ErrorRule, Format, Summary, SummaryOptions};

/// The figures of one element in one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiffFigures {
    /// Calls (functions, system calls, call-graph edges), system calls (threads),
    /// connections accepted (connections).
    pub count: u64,
    /// Errors among them: function calls that are errors by the rule in effect, system
    /// calls that returned -errno (threads: their system calls'); 0 for connections and
    /// call-graph edges.
    pub errors: u64,
    /// Mean duration.
    pub mean_ns: u64,
    /// 0 where there is no distribution (threads, call-graph edges).
    pub p99_ns: u64,
    /// Inclusive time (functions), time in calls (system calls), running time (threads),
    /// service time (connections), callee time (call-graph edges).
    pub total_ns: u64,
    /// Self time (functions only).
    pub self_ns: u64,
}

/// One element of `tracer diff`: its figures in A and B and the changes B - A.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffRow {
    /// The element's name (function, thread, system call...).
    pub element: String,
    /// `None`: absent from that run.
    pub a: Option<DiffFigures>,
    /// Its figures in B, `None` when absent.
    pub b: Option<DiffFigures>,
    /// B - A of [`DiffFigures::count`].
    pub count_change: i64,
    /// B - A of [`DiffFigures::mean_ns`].
    pub mean_change_ns: i64,
    /// B - A of [`DiffFigures::p99_ns`].
    pub p99_change_ns: i64,
    /// B - A of [`DiffFigures::total_ns`].
    pub total_change_ns: i64,
    /// B - A of [`DiffFigures::self_ns`].
    pub self_change_ns: i64,
    /// Relative changes in percent; `None` when A is 0 and B is not.
    pub count_change_pct: Option<f64>,
    /// Relative change of the mean, percent.
    pub mean_change_pct: Option<f64>,
    /// Relative change of the 99th percentile, percent.
    pub p99_change_pct: Option<f64>,
    /// Relative change of the total, percent.
    pub total_change_pct: Option<f64>,
}

/// Sort keys of a diff; the first is the default.
const KEYS: &[&str] = &["total", "self", "mean", "p99", "calls", "count", "name"];

fn figures(s: &Summary, by: By, rule: ErrorRule) -> BTreeMap<String, DiffFigures> {
    let mut m: BTreeMap<String, DiffFigures> = BTreeMap::new();
    let t = &s.total;
    match by {
        By::Function => {
            for f in &t.functions {
                // The binary disambiguates equal names only when they exist in two.
                let same = t.functions.iter().filter(|g| g.name == f.name).count();
                let k = if same > 1 {
                    format!("{} ({})", f.name, f.binary)
                } else {
                    f.name.clone()
                };
                m.insert(
                    k,
                    DiffFigures {
                        count: f.calls,
                        errors: f.errors_for(rule),
                        mean_ns: f.mean_ns,
                        p99_ns: f.p99_ns,
                        total_ns: f.inclusive_ns,
                        self_ns: f.self_ns,
                    },
                );
            }
        }
        By::Syscall => {
            for x in &t.syscalls {
                m.insert(
                    x.name.clone(),
                    DiffFigures {
                        count: x.calls,
                        errors: x.errors,
                        mean_ns: x.mean_ns,
                        p99_ns: x.p99_ns,
                        total_ns: x.total_ns,
                        self_ns: 0,
                    },
                );
            }
        }
        By::Thread => {
            // Threads of a pool share a name: they are compared as a group.
            for th in &t.threads {
                let e = m.entry(format!("{}/{}", th.process, th.name)).or_default();
                e.count = crate::sum([e.count, th.syscalls]);
                e.errors = crate::sum([e.errors, th.syscall_errors]);
                e.total_ns = crate::sum([e.total_ns, th.running_ns]);
            }
        }
        By::Connection => {
            let c = &t.connections;
            m.insert(
                "connections".into(),
                DiffFigures {
                    count: c.accepted,
                    errors: 0,
                    mean_ns: c.service_mean_ns,
                    p99_ns: c.service_p99_ns,
                    total_ns: c.service_total_ns,
                    self_ns: 0,
                },
            );
        }
        By::CallGraph => {
            for e in &t.call_graph {
                m.insert(
                    format!("{} -> {}", e.caller, e.callee),
                    DiffFigures {
                        count: e.calls,
                        errors: 0,
                        mean_ns: e.mean_ns,
                        p99_ns: 0,
                        total_ns: e.total_ns,
                        self_ns: 0,
                    },
                );
            }
        }
    }
    m
}

fn change(a: u64, b: u64) -> i64 {
    (b as i128 - a as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn rel(a: u64, b: u64) -> Option<f64> {
    match (a, b) {
        (0, 0) => Some(0.0),
        (0, _) => None,
        _ => Some((b as f64 - a as f64) * 100.0 / a as f64),
    }
}

/// The rows of `tracer diff A B` for `opts.by`, sorted by the largest regression of
/// `opts.sort` (total, self, mean, p99, calls or name), cut to `opts.top`.
pub fn diff_rows(a: &Summary, b: &Summary, opts: &SummaryOptions) -> Result<Vec<DiffRow>, Error> {
    let key = match opts.sort.as_deref() {
        None => KEYS[0],
        Some(k) => KEYS.iter().find(|&&x| x == k).copied().ok_or_else(|| {
            Error::Option(format!(
                "unknown sort key {k:?} for diff (expected one of: {})",
                KEYS.join(", ")
            ))
        })?,
    };
    let rule = opts.thresholds.error_if;
    let fa = figures(a, opts.by, rule);
    let fb = figures(b, opts.by, rule);
    let mut names: Vec<&String> = fa.keys().chain(fb.keys()).collect();
    names.sort();
    names.dedup();
    let mut rows: Vec<DiffRow> = names
        .into_iter()
        .map(|k| {
            let (x, y) = (fa.get(k).copied(), fb.get(k).copied());
            let (p, q) = (x.unwrap_or_default(), y.unwrap_or_default());
            DiffRow {
                element: k.clone(),
                a: x,
                b: y,
                count_change: change(p.count, q.count),
                mean_change_ns: change(p.mean_ns, q.mean_ns),
                p99_change_ns: change(p.p99_ns, q.p99_ns),
                total_change_ns: change(p.total_ns, q.total_ns),
                self_change_ns: change(p.self_ns, q.self_ns),
                count_change_pct: rel(p.count, q.count),
                mean_change_pct: rel(p.mean_ns, q.mean_ns),
                p99_change_pct: rel(p.p99_ns, q.p99_ns),
                total_change_pct: rel(p.total_ns, q.total_ns),
            }
        })
        .collect();
    let delta = |r: &DiffRow| match key {
        "self" => r.self_change_ns,
        "mean" => r.mean_change_ns,
        "p99" => r.p99_change_ns,
        "calls" | "count" => r.count_change,
        _ => r.total_change_ns,
    };
    if key == "name" {
        rows.sort_by(|x, y| x.element.cmp(&y.element));
    } else {
        rows.sort_by(|x, y| delta(y).cmp(&delta(x)).then(x.element.cmp(&y.element)));
    }
    if let Some(n) = opts.top {
        rows.truncate(n);
    }
    Ok(rows)
}

#[derive(Serialize)]
struct DiffDoc<'a> {
    schema: &'static str,
    by: &'static str,
    a: Vec<&'a str>,
    b: Vec<&'a str>,
    rows: &'a [DiffRow],
    /// What each side's figures must be read with (losses, damage, truncation).
    notes_a: &'a [String],
    notes_b: &'a [String],
}

/// Version of the JSON document written by [`diff`].
pub const DIFF_SCHEMA: &str = "tracer-diff/1";

/// Writes `tracer diff A B` for `opts.by` in `opts.format` (table, JSON or CSV: a diff's
/// JUnit report is its gate's, [`crate::gate::write_junit`]).
pub fn diff(
    a: &Summary,
    b: &Summary,
    opts: &SummaryOptions,
    out: &mut dyn Write,
) -> Result<(), Error> {
    if opts.format == Format::Junit {
        return Err(Error::Option(
            "a diff in JUnit is the verdicts of its gate: give --fail-if conditions".into(),
        ));
    }
    let rows = diff_rows(a, b, opts)?;
    if opts.format == Format::Json {
        fn files(s: &Summary) -> Vec<&str> {
            s.files.iter().map(|f| f.path.as_str()).collect()
        }
        let doc = DiffDoc {
            schema: DIFF_SCHEMA,
            by: opts.by.name(),
            a: files(a),
            b: files(b),
            rows: &rows,
            notes_a: &a.notes,
            notes_b: &b.notes,
        };
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    let mut t = Table::new(&[
        ("element", opts.by.name()),
        ("count_a", "count A"),
        ("count_b", "count B"),
        ("count_change", "change"),
        ("mean_a_ns", "mean A"),
        ("mean_b_ns", "mean B"),
        ("mean_change_pct", "change"),
        ("p99_a_ns", "p99 A"),
        ("p99_b_ns", "p99 B"),
        ("p99_change_pct", "change"),
        ("total_a_ns", "total A"),
        ("total_b_ns", "total B"),
        ("total_change_ns", "change"),
        ("total_change_pct", "change%"),
    ]);
    let pct = |v: Option<f64>| Cell::Change(v.unwrap_or(f64::INFINITY));
    for r in &rows {
        let (p, q) = (r.a.unwrap_or_default(), r.b.unwrap_or_default());
        t.rows.push(vec![
            Cell::Text(r.element.clone()),
            Cell::Int(p.count),
            Cell::Int(q.count),
            Cell::SInt(r.count_change),
            Cell::Ns(p.mean_ns),
            Cell::Ns(q.mean_ns),
            pct(r.mean_change_pct),
            Cell::Ns(p.p99_ns),
            Cell::Ns(q.p99_ns),
            pct(r.p99_change_pct),
            Cell::Ns(p.total_ns),
            Cell::Ns(q.total_ns),
            Cell::SNs(r.total_change_ns),
            pct(r.total_change_pct),
        ]);
    }
    match opts.format {
        Format::Csv => t.write_csv(out, true)?,
        _ => {
            let files = |s: &Summary| {
                let v: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
                v.join(", ")
            };
            writeln!(out, "A: {}\nB: {}\n", files(a), files(b))?;
            t.write_table(out)?;
            for (side, s) in [("A", a), ("B", b)] {
                for n in &s.notes {
                    writeln!(out, "note ({side}): {n}")?;
                }
            }
        }
    }
    Ok(())
}
