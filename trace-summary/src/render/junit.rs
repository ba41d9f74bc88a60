//! The hot-spot flags as a JUnit report: one test case per element of `--by`'s kind, a
//! failure for each flagged one, saying which thresholds it passed.

use std::io::{Result, Write};

use super::flags::ratio;
use crate::junit::{write_junit_suite, JunitCase, Outcome};
use crate::units::human_ns;
use crate::{By, Summary, SummaryOptions, Thresholds};

/// Writes a prepared summary's flags for `opts.by` (the whole trace's figures).
pub(super) fn write(s: &Summary, opts: &SummaryOptions, out: &mut dyn Write) -> Result<()> {
    let t = &opts.thresholds;
    let sec = &s.total;
    let case = |classname, name: String, flags: &[&str], why: &dyn Fn(&str) -> String| {
        let outcome = match flags.is_empty() {
            true => Outcome::Pass("no hot-spot flag".into()),
            false => {
                let reasons: Vec<String> = flags.iter().map(|f| why(f)).collect();
                Outcome::Failure(reasons.join("; "))
            }
        };
        JunitCase {
            classname,
            name,
            outcome,
        }
    };
    let cases: Vec<JunitCase> = match opts.by {
        By::Function => (sec.functions.iter())
            .map(|f| {
                let why = |flag: &str| match flag {
                    "slow" => slow(f.mean_ns, t),
                    "errors" => errors(f.errors, f.calls, t),
                    _ => ready(f.ready_ns, f.states_ns(), t, "of its time"),
                };
                case("tracer.summary.function", f.name.clone(), &f.flags, &why)
            })
            .collect(),
        By::Thread => (sec.threads.iter())
            .map(|th| {
                let why = |flag: &str| match flag {
                    "errors" => errors(th.syscall_errors, th.syscalls, t),
                    _ => ready(th.ready_ns, th.alive_ns(), t, "of its life"),
                };
                let name = format!("{}/{} ({})", th.process, th.name, th.tid);
                case("tracer.summary.thread", name, &th.flags, &why)
            })
            .collect(),
        By::Syscall => (sec.syscalls.iter())
            .map(|x| {
                let why = |flag: &str| match flag {
                    "slow" => slow(x.mean_ns, t),
                    _ => errors(x.errors, x.calls, t),
                };
                case("tracer.summary.syscall", x.name.clone(), &x.flags, &why)
            })
            .collect(),
        By::Connection => {
            let c = &sec.connections;
            vec![case(
                "tracer.summary.connection",
                "connections".into(),
                &c.flags,
                &|_| slow(c.service_mean_ns, t),
            )]
        }
        By::CallGraph => (sec.call_graph.iter())
            .map(|e| {
                let name = format!("{} -> {}", e.caller, e.callee);
                case("tracer.summary.callgraph", name, &[], &|_| String::new())
            })
            .collect(),
    };
    let files: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
    let suite = format!("tracer summary {}", files.join(" "));
    write_junit_suite(&suite, &salvaged(s), &cases, out)
}

/// A `salvaged` property per input read past damage (`--salvage`), saying what was
/// skipped: the cases' figures miss what it held.
fn salvaged(s: &Summary) -> Vec<(&'static str, String)> {
    (s.files.iter())
        .filter_map(|f| f.damage_note())
        .map(|note| ("salvaged", note))
        .collect()
}

fn slow(mean_ns: u64, t: &Thresholds) -> String {
    format!(
        "slow: mean {} over {}",
        human_ns(mean_ns),
        human_ns(t.slow_mean_ns)
    )
}

fn errors(errors: u64, calls: u64, t: &Thresholds) -> String {
    format!(
        "errors: {errors} of {calls} calls ({:.1}%, over {:.0}%)",
        ratio(errors, calls) * 100.0,
        t.error_ratio * 100.0
    )
}

fn ready(ready_ns: u64, whole_ns: u64, t: &Thresholds, of: &str) -> String {
    format!(
        "ready: waiting for a CPU {:.1}% {of} (over {:.0}%)",
        ratio(ready_ns, whole_ns) * 100.0,
        t.ready_ratio * 100.0
    )
}
