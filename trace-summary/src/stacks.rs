//! `tracer summary --by stack`: where the time went by function, from the stacks of a
//! trace recorded with `--stacks`. On-CPU time is the samples' (each stands for its
//! period of CPU time), off-CPU time that of the blocked and I/O states, each under the
//! stack its thread blocked in. A function's self time is where it is the innermost
//! frame; its total time is every stack it is on (once per stack, however deep it
//! recurses).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use stack_names::StackNames;
use trace_merge::stacks::Blocking;
use trace_merge::timeline::{Item, Timeline};
use trace_merge::MergeOptions;

use crate::units::human_ns;
use crate::Error;

/// One function's time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FunctionTime {
    /// The function (kernel functions too), or `module+0xOFFSET` when unknown.
    pub function: String,
    /// `file:line` of the place most of its self time was, when known.
    pub location: Option<String>,
    /// On-CPU samples where it is the innermost frame, and their CPU time, ns.
    pub on_cpu_self_samples: u64,
    /// The CPU time of those samples, ns.
    pub on_cpu_self_ns: u64,
    /// CPU time of the samples it is in, ns.
    pub on_cpu_total_ns: u64,
    /// Off-CPU time with it as the innermost frame of the blocking stack, ns.
    pub off_cpu_self_ns: u64,
    /// Off-CPU time with it on the blocking stack, ns.
    pub off_cpu_total_ns: u64,
}

/// The rows of `--by stack`, most on-CPU time first, then most off-CPU time; and how many
/// stacks were cut short, by reason.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StackSummary {
    /// Per function.
    pub functions: Vec<FunctionTime>,
    /// Samples and blocking stacks whose user frames were cut, by reason.
    pub cut: Vec<(String, u64)>,
}

/// Weights per (file, stack): [on-CPU samples, on-CPU ns, off-CPU ns].
#[derive(Default)]
struct Collect {
    weights: HashMap<(u32, u32), [u64; 3]>,
    blocking: Blocking,
}

impl trace_merge::Consumer for Collect {
    type Error = Error;

    fn item(&mut self, _tl: &Timeline, item: Item) -> Result<(), Error> {
        match item {
            Item::Sample(s) => {
                self.blocking.note(&s);
                if s.on_cpu {
                    let w = self.weights.entry((s.source, s.stack)).or_default();
                    w[0] += 1;
                    w[1] += s.period;
                }
            }
            Item::State(iv) => {
                if let Some(b) = self.blocking.stack_of(&iv) {
                    let w = self.weights.entry((b.source, b.stack)).or_default();
                    w[2] += iv.end.saturating_sub(iv.begin);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Summarizes the stacks of `files`.
pub fn summarize(files: &[PathBuf], merge: &MergeOptions) -> Result<StackSummary, Error> {
    let tl = trace_merge::open(files, merge)?;
    let mut c = Collect::default();
    let (tl, _) = trace_merge::feed(tl, u64::MAX, &mut c)?;
    let mut names = StackNames::new();
    let mut rows: HashMap<String, FunctionTime> = HashMap::new();
    let mut places: HashMap<String, HashMap<String, u64>> = HashMap::new();
    let mut cut: HashMap<String, u64> = HashMap::new();
    let sources = tl.merger().sources();
    let mut keys: Vec<_> = c.weights.into_iter().collect();
    keys.sort_unstable_by_key(|(k, _)| *k);
    for ((source, id), [samples, on_ns, off_ns]) in keys {
        let Some(store) = sources.get(source as usize).map(|s| &s.stacks) else {
            continue;
        };
        let Some(def) = store.stack(id) else { continue };
        if let Some(why) = &def.cut {
            *cut.entry(why.clone()).or_default() += samples.max(1);
        }
        let frames = names.frames(store, source, def);
        let mut seen = std::collections::HashSet::new();
        for f in frames.iter().filter(|f| !f.function.starts_with("[cut")) {
            if !seen.insert(f.function.as_str()) {
                continue;
            }
            let r = rows.entry(f.function.clone()).or_default();
            r.on_cpu_total_ns += on_ns;
            r.off_cpu_total_ns += off_ns;
        }
        if let Some(leaf) = frames.last() {
            let r = rows.entry(leaf.function.clone()).or_default();
            r.on_cpu_self_samples += samples;
            r.on_cpu_self_ns += on_ns;
            r.off_cpu_self_ns += off_ns;
            if let Some(loc) = leaf.location() {
                *places
                    .entry(leaf.function.clone())
                    .or_default()
                    .entry(loc)
                    .or_default() += on_ns + off_ns;
            }
        }
        // A function seen only as a caller still has a file:line of its own.
        for f in &frames {
            if let Some(loc) = f.location() {
                places
                    .entry(f.function.clone())
                    .or_default()
                    .entry(loc)
                    .or_default();
            }
        }
    }
    let mut functions: Vec<FunctionTime> = rows
        .into_iter()
        .map(|(name, mut r)| {
            r.location = places
                .get(&name)
                .and_then(|p| p.iter().max_by_key(|(l, w)| (**w, std::cmp::Reverse(*l))))
                .map(|(l, _)| l.clone());
            r.function = name;
            r
        })
        .collect();
    functions.sort_by(|a, b| {
        (b.on_cpu_total_ns, b.off_cpu_total_ns, &a.function).cmp(&(
            a.on_cpu_total_ns,
            a.off_cpu_total_ns,
            &b.function,
        ))
    });
    let mut cut: Vec<(String, u64)> = cut.into_iter().collect();
    cut.sort();
    Ok(StackSummary { functions, cut })
}

/// Writes `s` as a table (`json`: as one JSON document), its first `top` rows.
pub fn render(
    s: &StackSummary,
    json: bool,
    top: Option<usize>,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let rows = &s.functions[..top.unwrap_or(usize::MAX).min(s.functions.len())];
    if json {
        let doc = StackSummary {
            functions: rows.to_vec(),
            cut: s.cut.clone(),
        };
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    if s.functions.is_empty() {
        writeln!(out, "no stacks in this trace (record with --stacks)")?;
        return Ok(());
    }
    writeln!(
        out,
        "{:>9} {:>9} {:>9} {:>9} {:>9}  function (file:line)",
        "samples", "cpu self", "cpu total", "off self", "off total"
    )?;
    for r in rows {
        let ns = |v: u64| if v == 0 { "-".to_string() } else { human_ns(v) };
        writeln!(
            out,
            "{:>9} {:>9} {:>9} {:>9} {:>9}  {}{}",
            r.on_cpu_self_samples,
            ns(r.on_cpu_self_ns),
            ns(r.on_cpu_total_ns),
            ns(r.off_cpu_self_ns),
            ns(r.off_cpu_total_ns),
            r.function,
            r.location
                .as_deref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default()
        )?;
    }
    for (why, n) in &s.cut {
        writeln!(out, "cut short: {n} stacks ({why})")?;
    }
    Ok(())
}
