//! A conformance checker for Trace Event Format files: the rules a viewer relies on to
//! draw them as written (the format's own, and the way Perfetto's and chrome://tracing's
//! importers build tracks), so tests can hold the writer to them.
//!
//! - the document is an object whose `traceEvents` is an array of objects with a `ph`,
//!   a `name`, an integer `pid` and (except process metadata) `tid`, and a non-negative
//!   `ts` (and `dur` for `X`);
//! - on each track, taken in time order (stable, as the importers sort), every `E`
//!   closes the latest open `B`, of the same name, and none is left open;
//! - the slices of a track nest: none overlaps another partly;
//! - each flow id has one start (`s`) and one end (`f`), not before it; the start is
//!   inside a slice of its track, the end inside one (`bp: e`) or where one begins (the
//!   slices they bind to);
//! - every track and process used is named by metadata.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::Value;

/// What a valid file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Slices per category (`B`/`E` pairs and `X`).
    pub slices: HashMap<String, u64>,
    /// Instant events, by category.
    pub instants: HashMap<String, u64>,
    /// Complete flows, per category.
    pub flows: HashMap<String, u64>,
    /// Named tracks.
    pub tracks: u64,
}

type Track = (i64, i64);

/// The starts (track, ts) and the ends (track, ts, binds to the enclosing slice) of one
/// flow id.
type FlowEnds = (Vec<(Track, f64)>, Vec<(Track, f64, bool)>);

struct Slice {
    begin: f64,
    end: f64,
}

/// Reads and checks a file; `Err` lists every broken rule (at most 50).
pub fn check(path: &Path) -> Result<CheckReport, Vec<String>> {
    let text = std::fs::read(path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    let doc: Value = serde_json::from_slice(&text).map_err(|e| vec![format!("not JSON: {e}")])?;
    check_value(&doc)
}

/// Checks a parsed document.
pub fn check_value(doc: &Value) -> Result<CheckReport, Vec<String>> {
    let mut errors = Vec::new();
    let Some(events) = doc.get("traceEvents").and_then(Value::as_array) else {
        return Err(vec!["no traceEvents array".into()]);
    };
    let mut report = CheckReport::default();
    // (ts, file order, event) per track.
    let mut per_track: HashMap<Track, Vec<(f64, usize, &Value)>> = HashMap::new();
    let mut named_tracks = HashSet::new();
    let mut named_procs = HashSet::new();
    let mut used_procs = HashSet::new();
    for (i, e) in events.iter().enumerate() {
        let ph = e.get("ph").and_then(Value::as_str).unwrap_or("");
        let name = e.get("name").and_then(Value::as_str);
        let pid = e.get("pid").and_then(Value::as_i64);
        let tid = e.get("tid").and_then(Value::as_i64);
        let (Some(name), Some(pid)) = (name, pid) else {
            errors.push(format!("event {i}: no name or integer pid: {e}"));
            continue;
        };
        if ph == "M" {
            match (name, tid) {
                ("process_name", _) => {
                    named_procs.insert(pid);
                }
                ("thread_name", Some(t)) => {
                    named_tracks.insert((pid, t));
                }
                ("thread_sort_index" | "process_sort_index", _) => {}
                _ => errors.push(format!("event {i}: unexpected metadata: {e}")),
            }
            continue;
        }
        let Some(tid) = tid else {
            errors.push(format!("event {i}: no integer tid: {e}"));
            continue;
        };
        let ts = e.get("ts").and_then(Value::as_f64);
        let Some(ts) = ts.filter(|&t| t >= 0.0) else {
            errors.push(format!("event {i}: no ts >= 0: {e}"));
            continue;
        };
        if !matches!(ph, "B" | "E" | "X" | "s" | "f" | "i") {
            errors.push(format!("event {i}: unexpected phase {ph:?}"));
            continue;
        }
        // An instant's scope: global, process or thread (the format's "s").
        if ph == "i" && !matches!(e.get("s").and_then(Value::as_str), Some("g" | "p" | "t")) {
            errors.push(format!("event {i}: instant without a scope g, p or t: {e}"));
        }
        if ph == "X"
            && !e
                .get("dur")
                .and_then(Value::as_f64)
                .is_some_and(|d| d >= 0.0)
        {
            errors.push(format!("event {i}: X without dur >= 0: {e}"));
        }
        used_procs.insert(pid);
        per_track.entry((pid, tid)).or_default().push((ts, i, e));
    }

    let mut flow_ends: HashMap<(String, i64), FlowEnds> = HashMap::new();
    let mut slices_of: HashMap<Track, Vec<Slice>> = HashMap::new();
    for (track, evs) in per_track.iter_mut() {
        evs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        if !named_tracks.contains(track) {
            errors.push(format!("track {track:?} has no thread_name"));
        }
        let mut open: Vec<(&str, f64)> = Vec::new();
        let slices = slices_of.entry(*track).or_default();
        for &(ts, i, e) in evs.iter() {
            let name = e["name"].as_str().unwrap_or("");
            let cat = e
                .get("cat")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match e["ph"].as_str().unwrap_or("") {
                "B" => open.push((name, ts)),
                "E" => match open.pop() {
                    Some((b, begin)) if b == name => {
                        slices.push(Slice { begin, end: ts });
                        *report.slices.entry(cat).or_default() += 1;
                    }
                    Some((b, _)) => errors.push(format!(
                        "event {i}: track {track:?}: E of {name:?} closes B of {b:?}"
                    )),
                    None => errors.push(format!("event {i}: track {track:?}: E without B")),
                },
                "i" => *report.instants.entry(cat).or_default() += 1,
                "X" => {
                    let dur = e["dur"].as_f64().unwrap_or(0.0);
                    slices.push(Slice {
                        begin: ts,
                        end: ts + dur,
                    });
                    *report.slices.entry(cat).or_default() += 1;
                }
                ph => {
                    let id = e.get("id").and_then(Value::as_i64).unwrap_or(-1);
                    let ends = flow_ends.entry((cat, id)).or_default();
                    match ph {
                        "s" => ends.0.push((*track, ts)),
                        _ => {
                            let enclosing = e.get("bp").and_then(Value::as_str) == Some("e");
                            ends.1.push((*track, ts, enclosing))
                        }
                    }
                }
            }
        }
        for (name, _) in open {
            errors.push(format!("track {track:?}: B of {name:?} never ends"));
        }
    }

    // Nesting: sorted by begin (longest first), each slice must end within the enclosing
    // one. Times are compared in whole nanoseconds, as written.
    let ns = |us: f64| (us * 1000.0).round() as i64;
    for (track, slices) in slices_of.iter_mut() {
        slices.sort_by_key(|s| (ns(s.begin), -ns(s.end)));
        let mut stack: Vec<i64> = Vec::new();
        for s in slices.iter() {
            let (b, e) = (ns(s.begin), ns(s.end));
            while stack.last().is_some_and(|&end| end <= b) {
                stack.pop();
            }
            if let Some(&end) = stack.last() {
                if e > end {
                    errors.push(format!(
                        "track {track:?}: slice [{b}, {e}] ns overlaps one ending at {end} ns"
                    ));
                }
            }
            stack.push(e);
        }
    }
    // A slice encloses `ts` if one beginning at or before it ends after it (a slice ending
    // at `ts` is closed by then): the running maximum of the ends answers that with a
    // binary search.
    let reach: HashMap<Track, Vec<(i64, i64)>> = (slices_of.iter())
        .map(|(t, v)| {
            let mut max = i64::MIN;
            let r = (v.iter())
                .map(|s| {
                    max = max.max(ns(s.end));
                    (ns(s.begin), max)
                })
                .collect();
            (*t, r)
        })
        .collect();
    let encloses = |track: &Track, ts: f64| {
        let ts = ns(ts);
        reach.get(track).is_some_and(|v| {
            let n = v.partition_point(|&(b, _)| b <= ts);
            n > 0 && v[n - 1].1 > ts
        })
    };
    // A flow end without `bp: e` binds to the next slice to begin on its track: one must
    // begin right there, or the arrow lands on a later slice.
    let begins_at = |track: &Track, ts: f64| {
        let ts = ns(ts);
        reach.get(track).is_some_and(|v| {
            let n = v.partition_point(|&(b, _)| b < ts);
            v.get(n).is_some_and(|&(b, _)| b == ts)
        })
    };
    for ((cat, id), (starts, ends)) in &flow_ends {
        match (starts.as_slice(), ends.as_slice()) {
            ([(t0, s)], [(t1, f, enclosing)]) => {
                if f < s {
                    errors.push(format!("flow {cat} {id} ends before it starts"));
                }
                if !encloses(t0, *s) {
                    errors.push(format!(
                        "flow {cat} {id}: no slice around {s} us on track {t0:?} to start from"
                    ));
                }
                let bound = match enclosing {
                    true => encloses(t1, *f),
                    false => begins_at(t1, *f),
                };
                if !bound {
                    errors.push(format!(
                        "flow {cat} {id}: no slice {} {f} us on track {t1:?} to end at",
                        if *enclosing { "around" } else { "beginning at" }
                    ));
                }
                *report.flows.entry(cat.clone()).or_default() += 1;
            }
            _ => errors.push(format!(
                "flow {cat} {id}: {} starts and {} ends",
                starts.len(),
                ends.len()
            )),
        }
    }
    for p in used_procs.difference(&named_procs) {
        errors.push(format!("process {p} has no process_name"));
    }
    report.tracks = named_tracks.len() as u64;
    if errors.is_empty() {
        Ok(report)
    } else {
        errors.truncate(50);
        Err(errors)
    }
}
