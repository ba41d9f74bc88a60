//! Performance gates: `tracer diff A B --fail-if 'handle_request.p99 > +10%'`.
//!
//! A [`Condition`] names an element of the diff (a row of `--by`'s kind: a function, a
//! system call, `process/thread`...), one of its figures ([`Metric`]), a comparison and a
//! limit. The limit's form says what is compared:
//!
//! | limit | compared | example |
//! |---|---|---|
//! | `+10%`, `-5%`, `10%` | the change B - A relative to A, in percent | `handle_request.p99 > +10%` |
//! | `+2ms`, `-100` (a sign) | the change B - A | `handle_request.total > +50ms` |
//! | `2ms`, `0` (no sign) | B's own figure | `handle_request.mean > 2ms`, `read.errors > 0` |
//!
//! A condition is *breached* when the compared quantity satisfies it, as in `assert!(!(x >
//! limit))`: `p99 > +10%` fails the gate when B's p99 is more than 10% above A's. Times take
//! a unit (`ns`, `us`, `ms`, `s`; a bare `0` is allowed); counts take none.
//!
//! The element is everything before the last `.`: function names with dots or `::`
//! (`main.(*Server).handle.p99`, `app::Server::run.mean`) parse as they are. The operator
//! is the last `<` or `>` of the text (with `=` after it for `<=`/`>=`), so C++ and Rust
//! names with `<...>` and call-graph edges (`a -> b`) parse too.
//!
//! [`check`] evaluates conditions on two summaries; [`write_junit`] writes the verdicts as
//! JUnit XML, one test case per condition.

use std::fmt;
use std::io::Write;
use std::str::FromStr;

use crate::junit::{write_junit_cases, JunitCase, Outcome};
use crate::units::human_ns;
use crate::{diff_rows, DiffFigures, DiffRow, Error, Summary, SummaryOptions};

/// A figure of a diff row that a condition can test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Calls (functions, system calls, edges), system calls (threads), connections.
    Count,
    /// Errors ([`DiffFigures::errors`]).
    Errors,
    /// Mean duration.
    Mean,
    /// 99th percentile of the durations.
    P99,
    /// Total time ([`DiffFigures::total_ns`]).
    Total,
    /// Self time (functions).
    SelfTime,
}

/// Metric names as written in conditions, with what they mean.
const METRICS: &[(&str, Metric)] = &[
    ("count", Metric::Count),
    ("calls", Metric::Count),
    ("errors", Metric::Errors),
    ("mean", Metric::Mean),
    ("p99", Metric::P99),
    ("total", Metric::Total),
    ("self", Metric::SelfTime),
];

impl Metric {
    /// The metric called `name` in a condition.
    pub fn named(name: &str) -> Option<Metric> {
        METRICS.iter().find(|(n, _)| *n == name).map(|&(_, m)| m)
    }

    /// True for durations (in ns), false for counts.
    pub fn is_time(self) -> bool {
        !matches!(self, Metric::Count | Metric::Errors)
    }

    /// Its value in one run's figures.
    pub fn of(self, f: &DiffFigures) -> u64 {
        match self {
            Metric::Count => f.count,
            Metric::Errors => f.errors,
            Metric::Mean => f.mean_ns,
            Metric::P99 => f.p99_ns,
            Metric::Total => f.total_ns,
            Metric::SelfTime => f.self_ns,
        }
    }

    fn show(self, v: u64) -> String {
        match self.is_time() {
            true => human_ns(v),
            false => v.to_string(),
        }
    }
}

/// How the compared quantity must relate to the limit for the condition to be breached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Cmp {
    fn holds(self, x: f64, limit: f64) -> bool {
        match self {
            Cmp::Gt => x > limit,
            Cmp::Ge => x >= limit,
            Cmp::Lt => x < limit,
            Cmp::Le => x <= limit,
        }
    }
}

/// What a condition compares, by the form of its limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// `+10%`, `-5%`, `10%`: the change B - A in percent of A.
    Relative(f64),
    /// `+2ms`, `-3` (signed): the change B - A, ns for times.
    Change(f64),
    /// `2ms`, `0` (unsigned): B's figure, ns for times.
    Value(f64),
}

/// One `--fail-if` condition, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// The condition as written (trimmed): its name in messages and JUnit.
    pub text: String,
    /// The row it tests (a diff row's [`DiffRow::element`]).
    pub element: String,
    /// The figure it tests.
    pub metric: Metric,
    /// The metric's name as written (`calls` and `count` are one metric).
    pub metric_name: String,
    /// The comparison.
    pub cmp: Cmp,
    /// The limit, and what it is compared with.
    pub limit: Limit,
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Condition {
    type Err = Error;

    fn from_str(text: &str) -> Result<Condition, Error> {
        let text = text.trim();
        let bad = |why: &str| {
            Error::Option(format!(
                "bad condition {text:?}: {why} (e.g. 'handle_request.p99 > +10%', 'read.errors > 0', 'handle_request.mean > 2ms')"
            ))
        };
        // The operator is the last '<' or '>': the limit has none, names may.
        let at = text.rfind(['<', '>']).ok_or_else(|| bad("no < or >"))?;
        let (lhs, rest) = text.split_at(at);
        let (cmp, rhs) = match (rest.as_bytes()[0], rest.as_bytes().get(1)) {
            (b'>', Some(b'=')) => (Cmp::Ge, &rest[2..]),
            (b'<', Some(b'=')) => (Cmp::Le, &rest[2..]),
            (b'>', _) => (Cmp::Gt, &rest[1..]),
            _ => (Cmp::Lt, &rest[1..]),
        };
        let (element, metric) = lhs
            .trim()
            .rsplit_once('.')
            .ok_or_else(|| bad("no ELEMENT.METRIC before the operator"))?;
        let metric_name = metric.trim().to_string();
        let metric = Metric::named(&metric_name).ok_or_else(|| {
            let names: Vec<&str> = METRICS.iter().map(|(n, _)| *n).collect();
            bad(&format!(
                "unknown metric {:?} (one of: {})",
                metric.trim(),
                names.join(", ")
            ))
        })?;
        let element = element.trim();
        if element.is_empty() {
            return Err(bad("no element before the metric"));
        }
        let limit = parse_limit(rhs.trim(), metric).map_err(|why| bad(&why))?;
        Ok(Condition {
            text: text.to_string(),
            element: element.to_string(),
            metric,
            metric_name,
            cmp,
            limit,
        })
    }
}

/// `+10%`, `-5%`, `2ms`, `+1.5s`, `0`, `3`: see [`Limit`].
fn parse_limit(s: &str, metric: Metric) -> Result<Limit, String> {
    if s.is_empty() {
        return Err("no limit after the operator".into());
    }
    let signed = s.starts_with(['+', '-']);
    if let Some(pct) = s.strip_suffix('%') {
        let v: f64 = pct
            .trim()
            .parse()
            .map_err(|_| format!("bad percentage {s:?}"))?;
        return match v.is_finite() {
            true => Ok(Limit::Relative(v)),
            false => Err(format!("bad percentage {s:?}")),
        };
    }
    let split = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(s.len(), |(i, _)| i);
    let (number, unit) = s.split_at(split);
    let v: f64 = number
        .parse()
        .map_err(|_| format!("bad number {number:?} in {s:?}"))?;
    if !v.is_finite() {
        return Err(format!("bad number {s:?}"));
    }
    let scale = match (metric.is_time(), unit.trim()) {
        (true, "ns") => 1.0,
        (true, "us" | "µs") => 1e3,
        (true, "ms") => 1e6,
        (true, "s") => 1e9,
        (true, "m" | "min") => 60e9,
        (true, "") if v == 0.0 => 1.0,
        (true, "") => return Err(format!("a time needs a unit (ns, us, ms, s): {s:?}")),
        (false, "") => 1.0,
        (false, u) => return Err(format!("a count takes no unit ({u:?} in {s:?})")),
        (true, u) => return Err(format!("unknown unit {u:?} in {s:?} (ns, us, ms, s)")),
    };
    let v = v * scale;
    Ok(if signed {
        Limit::Change(v)
    } else {
        Limit::Value(v)
    })
}

/// How one condition came out.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The condition.
    pub condition: Condition,
    /// The element's figure in A, `None` when A has no such element.
    pub a: Option<u64>,
    /// The figure in B, `None` when B has no such element.
    pub b: Option<u64>,
    /// The condition holds: the gate fails.
    pub breached: bool,
    /// Neither run has the element: the condition cannot be evaluated (a typo, or the
    /// wrong `--by`); the gate fails too.
    pub missing: bool,
    /// What was observed, one line: `p99 1.20ms -> 1.80ms (+50.0%)`.
    pub detail: String,
}

impl Verdict {
    /// The gate fails on this condition.
    pub fn fails(&self) -> bool {
        self.breached || self.missing
    }
}

/// Evaluates `conditions` on the diff of `a` and `b` (rows of `opts.by`, every row: `top`
/// and `sort` do not apply).
pub fn check(
    a: &Summary,
    b: &Summary,
    opts: &SummaryOptions,
    conditions: &[Condition],
) -> Result<Vec<Verdict>, Error> {
    let all = SummaryOptions {
        top: None,
        sort: None,
        ..opts.clone()
    };
    let rows = diff_rows(a, b, &all)?;
    Ok(conditions.iter().map(|c| evaluate(c, &rows)).collect())
}

/// One condition against the rows of a diff.
pub fn evaluate(c: &Condition, rows: &[DiffRow]) -> Verdict {
    let Some(row) = rows.iter().find(|r| r.element == c.element) else {
        let mut names: Vec<&str> = rows.iter().map(|r| r.element.as_str()).collect();
        names.truncate(8);
        return Verdict {
            condition: c.clone(),
            a: None,
            b: None,
            breached: false,
            missing: true,
            detail: format!(
                "{:?} is in neither run (elements: {}{})",
                c.element,
                names.join(", "),
                if rows.len() > 8 { ", ..." } else { "" }
            ),
        };
    };
    let a = row.a.map(|f| c.metric.of(&f));
    let b = row.b.map(|f| c.metric.of(&f));
    let (x, y) = (a.unwrap_or(0), b.unwrap_or(0));
    let change = y as f64 - x as f64;
    let pct = match (x, y) {
        (0, 0) => Some(0.0),
        (0, _) => None,
        _ => Some(change * 100.0 / x as f64),
    };
    let observed = match c.limit {
        Limit::Relative(_) => pct.unwrap_or(f64::INFINITY),
        Limit::Change(_) => change,
        Limit::Value(_) => y as f64,
    };
    let limit = match c.limit {
        Limit::Relative(v) | Limit::Change(v) | Limit::Value(v) => v,
    };
    let show = |v: Option<u64>| v.map_or("absent".to_string(), |v| c.metric.show(v));
    let rel = match pct {
        Some(p) => format!("{p:+.1}%"),
        None => "new".to_string(),
    };
    Verdict {
        condition: c.clone(),
        a,
        b,
        breached: c.cmp.holds(observed, limit),
        missing: false,
        detail: format!("{} {} -> {} ({rel})", c.metric_name, show(a), show(b)),
    }
}

/// The line `tracer diff` prints on stderr for a failing condition.
pub fn failure_line(v: &Verdict) -> String {
    format!("gate failed: {}: {}", v.condition, v.detail)
}

/// Writes `verdicts` as a JUnit XML document: one test suite `suite`, one test case per
/// condition, a `<failure>` for a breached one, an `<error>` for one whose element is in
/// neither run.
pub fn write_junit(suite: &str, verdicts: &[Verdict], out: &mut dyn Write) -> std::io::Result<()> {
    let cases: Vec<JunitCase> = verdicts
        .iter()
        .map(|v| JunitCase {
            classname: "tracer.diff",
            name: v.condition.text.clone(),
            outcome: match (v.missing, v.breached) {
                (true, _) => Outcome::Error(v.detail.clone()),
                (false, true) => Outcome::Failure(v.detail.clone()),
                (false, false) => Outcome::Pass(v.detail.clone()),
            },
        })
        .collect();
    write_junit_cases(suite, &cases, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(s: &str) -> Condition {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn row(element: &str, a: Option<DiffFigures>, b: Option<DiffFigures>) -> DiffRow {
        DiffRow {
            element: element.into(),
            a,
            b,
            count_change: 0,
            mean_change_ns: 0,
            p99_change_ns: 0,
            total_change_ns: 0,
            self_change_ns: 0,
            count_change_pct: None,
            mean_change_pct: None,
            p99_change_pct: None,
            total_change_pct: None,
        }
    }

    fn figs(count: u64, errors: u64, p99_ns: u64) -> DiffFigures {
        DiffFigures {
            count,
            errors,
            mean_ns: p99_ns / 2,
            p99_ns,
            total_ns: count * p99_ns / 2,
            self_ns: 0,
        }
    }

    #[test]
    fn parses_the_forms_of_the_docs() {
        let c = cond("handle_request.p99 > +10%");
        assert_eq!(c.element, "handle_request");
        assert_eq!(c.metric, Metric::P99);
        assert_eq!(c.cmp, Cmp::Gt);
        assert_eq!(c.limit, Limit::Relative(10.0));
        assert_eq!(cond("x.calls < -5%").limit, Limit::Relative(-5.0));
        assert_eq!(cond("x.calls<-5%").cmp, Cmp::Lt);
        assert_eq!(cond("x.mean > 2ms").limit, Limit::Value(2e6));
        assert_eq!(cond("x.mean >= 1.5s").limit, Limit::Value(1.5e9));
        assert_eq!(cond("x.mean >= 1.5s").cmp, Cmp::Ge);
        assert_eq!(cond("x.total > +50us").limit, Limit::Change(50e3));
        assert_eq!(cond("x.errors > 0").limit, Limit::Value(0.0));
        assert_eq!(cond("x.errors <= -2").limit, Limit::Change(-2.0));
        assert_eq!(cond("x.errors <= -2").cmp, Cmp::Le);
        assert_eq!(cond("x.self > 0").metric, Metric::SelfTime);
        assert_eq!(cond("x.count > 3").metric, Metric::Count);
    }

    #[test]
    fn names_with_dots_colons_and_angle_brackets_parse() {
        let c = cond("main.(*Server).handle.p99 > +10%");
        assert_eq!(c.element, "main.(*Server).handle");
        let c = cond("app::server::Server::run.mean > 2ms");
        assert_eq!(c.element, "app::server::Server::run");
        let c = cond("std::vec::Vec<T>::push.calls < -5%");
        assert_eq!(c.element, "std::vec::Vec<T>::push");
        let c = cond("handle_request -> render_response.total > +1ms");
        assert_eq!(c.element, "handle_request -> render_response");
        let c = cond("server/worker-0.count < -50%");
        assert_eq!(c.element, "server/worker-0");
    }

    #[test]
    fn bad_conditions_say_why() {
        for (text, why) in [
            ("handle_request.p99", "no < or >"),
            ("handle_request > 10%", "no ELEMENT.METRIC"),
            ("handle_request.p95 > 10%", "unknown metric \"p95\""),
            (".p99 > 10%", "no element"),
            ("x.mean > 2", "a time needs a unit"),
            ("x.mean > 2 parsecs", "unknown unit"),
            ("x.calls > 2ms", "a count takes no unit"),
            ("x.calls > ", "no limit"),
            ("x.calls > ten%", "bad percentage"),
            ("x.calls > +", "bad number"),
        ] {
            let e = text.parse::<Condition>().unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn relative_change_absolute_value_and_change() {
        let rows = [row(
            "h",
            Some(figs(100, 0, 1_000_000)),
            Some(figs(90, 3, 1_200_000)),
        )];
        let v = |s: &str| evaluate(&cond(s), &rows);
        assert!(v("h.p99 > +10%").breached); // +20%
        assert!(!v("h.p99 > +25%").breached);
        assert!(v("h.calls < -5%").breached); // -10%
        assert!(!v("h.calls < -15%").breached);
        assert!(v("h.errors > 0").breached);
        assert!(!v("h.errors > 3").breached);
        assert!(v("h.errors >= 3").breached);
        assert!(v("h.p99 > 1ms").breached); // B's value
        assert!(!v("h.p99 > 2ms").breached);
        assert!(v("h.p99 > +100us").breached); // +200 us
        assert!(!v("h.p99 > +300us").breached);
        assert!(v("h.calls <= -10").breached);
        let d = v("h.p99 > +10%");
        assert_eq!(d.detail, "p99 1.00ms -> 1.20ms (+20.0%)");
        assert_eq!((d.a, d.b), (Some(1_000_000), Some(1_200_000)));
        assert_eq!(
            failure_line(&d),
            "gate failed: h.p99 > +10%: p99 1.00ms -> 1.20ms (+20.0%)"
        );
    }

    #[test]
    fn absent_sides_and_zero_baselines() {
        let rows = [
            row("new", None, Some(figs(5, 0, 10))),
            row("gone", Some(figs(5, 0, 10)), None),
            row("zero", Some(figs(0, 0, 0)), Some(figs(0, 0, 0))),
        ];
        let v = |s: &str| evaluate(&cond(s), &rows);
        // Appearing from nothing is an infinite rise.
        assert!(v("new.calls > +1000%").breached);
        assert!(!v("new.calls < -5%").breached);
        assert_eq!(v("new.calls > +10%").detail, "calls absent -> 5 (new)");
        // Vanishing is -100%.
        assert!(v("gone.calls < -50%").breached);
        assert!(!v("gone.p99 > +10%").breached);
        assert!(!v("zero.p99 > +0%").breached);
        // Nowhere: the gate fails, saying which elements there are.
        let m = v("nowhere.p99 > +10%");
        assert!(m.missing && m.fails() && !m.breached);
        assert!(m.detail.contains("neither run"), "{}", m.detail);
        assert!(m.detail.contains("new, gone, zero"), "{}", m.detail);
    }

    #[test]
    fn junit_has_a_case_per_condition_and_escapes() {
        let rows = [row(
            "a<b>&\"c\"",
            Some(figs(1, 0, 10)),
            Some(figs(2, 0, 10)),
        )];
        let verdicts = [
            evaluate(&cond("a<b>&\"c\".calls > +50%"), &rows),
            evaluate(&cond("a<b>&\"c\".calls > +500%"), &rows),
            evaluate(&cond("x.calls > 1"), &rows),
        ];
        let mut out = Vec::new();
        write_junit("tracer diff A B", &verdicts, &mut out).unwrap();
        let xml = String::from_utf8(out).unwrap();
        assert!(
            xml.contains(r#"tests="3" failures="1" errors="1""#),
            "{xml}"
        );
        assert!(xml.contains(r#"name="a&lt;b&gt;&amp;&quot;c&quot;.calls &gt; +50%""#));
        assert_eq!(xml.matches("<testcase ").count(), 3);
        assert_eq!(xml.matches("<failure ").count(), 1);
        assert_eq!(xml.matches("<error ").count(), 1);
        assert!(!xml.contains("\"c\".calls"), "unescaped: {xml}");
        // Well-formed, and the names read back as written.
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let names: Vec<&str> = (doc.descendants())
            .filter(|n| n.has_tag_name("testcase"))
            .filter_map(|n| n.attribute("name"))
            .collect();
        assert_eq!(names[0], "a<b>&\"c\".calls > +50%");
        assert_eq!(names.len(), 3);
    }
}
