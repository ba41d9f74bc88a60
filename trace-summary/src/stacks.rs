//! `tracer summary --by stack`: where the time went by function, from the stacks of a
//! trace recorded with `--stacks`. On-CPU time is the samples' (each stands for its
//! period of CPU time), off-CPU time that of the blocked and I/O states, each under the
//! stack its thread blocked in. A function's self time is where it is the innermost
//! frame; its total time is every stack it is on (once per stack, however deep it
//! recurses). Counting files (`tracer stat --stacks`) give on-CPU samples and the times
//! threads blocked in each stack, not how long: their stacks were walked in the kernel by
//! frame pointers, which the output says.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use stack_names::StackNames;
use trace_file::{ChunkKind, Reader, StatWindow, TraceHeader};
use trace_merge::stacks::{Blocking, StackStore};
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
    /// Times a thread blocked with it as the innermost frame.
    pub blocks_self: u64,
    /// Times a thread blocked with it on the stack.
    pub blocks_total: u64,
}

/// The rows of `--by stack`, most on-CPU time first, then most off-CPU time; and how many
/// stacks were cut short, by reason.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StackSummary {
    /// Per function.
    pub functions: Vec<FunctionTime>,
    /// Samples and blocking stacks whose user frames were cut, by category of reason
    /// (see [`trace_file::meta::cut_category`]).
    pub cut: Vec<(String, u64)>,
    /// How the stacks were walked, when not by the binaries' unwind tables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walked: Option<String>,
    /// What a salvaging read (`--salvage`) stepped over, a region per line: the figures
    /// lack what was there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub salvaged: Vec<String>,
}

/// Per (file, stack): on-CPU samples, their CPU time (ns), off-CPU time (ns), and times
/// threads blocked in it.
type Weights = HashMap<(u32, u32), [u64; 4]>;

#[derive(Default)]
struct Collect {
    weights: Weights,
    blocking: Blocking,
}

impl trace_merge::Consumer for Collect {
    type Error = Error;

    fn item(&mut self, _tl: &Timeline, item: Item) -> Result<(), Error> {
        match item {
            Item::Sample(s) => {
                self.blocking.note(&s);
                let w = self.weights.entry((s.source, s.stack)).or_default();
                if s.on_cpu {
                    add(&mut w[0], 1);
                    add(&mut w[1], s.period);
                } else {
                    add(&mut w[3], 1);
                }
            }
            Item::State(iv) => {
                if let Some(b) = self.blocking.stack_of(&iv) {
                    let w = self.weights.entry((b.source, b.stack)).or_default();
                    add(&mut w[2], iv.end.saturating_sub(iv.begin));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Summarizes the stacks of `files`: recordings (`tracer record --stacks`), or counting
/// files (`tracer stat --stacks`), whose windows' counts add up.
pub fn summarize(files: &[PathBuf], merge: &MergeOptions) -> Result<StackSummary, Error> {
    if is_stat(&files[0])? {
        let (weights, stores) = counted(files)?;
        let stores: Vec<&StackStore> = stores.iter().collect();
        let mut s = aggregate(weights, &stores);
        s.walked = Some(FRAME_POINTERS.into());
        return Ok(s);
    }
    let tl = trace_merge::open(files, merge)?;
    let mut c = Collect::default();
    let (tl, _) = trace_merge::feed(tl, u64::MAX, &mut c)?;
    let sources = tl.merger().sources();
    let stores: Vec<&StackStore> = sources.iter().map(|s| &s.stacks).collect();
    let mut s = aggregate(c.weights, &stores);
    s.salvaged = (sources.iter())
        .flat_map(|src| (src.damage.iter()).map(|d| format!("{}: {d} skipped", src.path.display())))
        .collect();
    Ok(s)
}

/// What a counting file's stacks are, said with them.
const FRAME_POINTERS: &str = "stacks walked by frame pointers in the kernel (tracer stat): \
     past code built without them, callers are wrong or missing";

/// An error of the file at `path`, naming it.
fn bad(path: &Path) -> impl Fn(trace_file::Error) -> Error + '_ {
    move |source| {
        Error::Trace(trace_merge::Error::Trace {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Whether `path` is a counting-mode file.
fn is_stat(path: &PathBuf) -> Result<bool, Error> {
    let bad = bad(path);
    let file = std::fs::File::open(path).map_err(|e| bad(e.into()))?;
    let mut r = Reader::new(std::io::BufReader::new(file)).map_err(&bad)?;
    let header = match r.next_chunk().map_err(&bad)? {
        Some(c) if c.kind == ChunkKind::Header => c.meta::<TraceHeader>().ok(),
        _ => None,
    };
    Ok(header.is_some_and(|h| h.mode == "stat"))
}

/// The windows' stack counts of counting files, and each file's stack table.
fn counted(files: &[PathBuf]) -> Result<(Weights, Vec<StackStore>), Error> {
    let mut weights = Weights::new();
    let mut stores = Vec::new();
    for (source, path) in files.iter().enumerate() {
        let bad = bad(path);
        let file = std::fs::File::open(path).map_err(|e| bad(e.into()))?;
        let mut r = Reader::new(std::io::BufReader::new(file)).map_err(&bad)?;
        let mut store = StackStore::default();
        while let Some(c) = r.next_chunk().map_err(&bad)? {
            match c.kind {
                ChunkKind::Stacks => store.absorb(c.meta().map_err(&bad)?),
                ChunkKind::Window => {
                    let w: StatWindow = c.meta().map_err(&bad)?;
                    for s in w.stacks {
                        let e = weights.entry((source as u32, s.stack)).or_default();
                        if s.on_cpu {
                            add(&mut e[0], s.count);
                            add(&mut e[1], s.count.saturating_mul(w.stack_period_ns));
                        } else {
                            add(&mut e[3], s.count);
                        }
                    }
                }
                _ => {}
            }
        }
        stores.push(store);
    }
    Ok((weights, stores))
}

/// Per function, the weights of the stacks it is in, named through `stores` (by file).
fn aggregate(weights: Weights, stores: &[&StackStore]) -> StackSummary {
    let mut names = StackNames::new();
    let mut rows: HashMap<String, FunctionTime> = HashMap::new();
    let mut places: HashMap<String, HashMap<String, u64>> = HashMap::new();
    let mut cut: HashMap<String, u64> = HashMap::new();
    let mut keys: Vec<_> = weights.into_iter().collect();
    keys.sort_unstable_by_key(|(k, _)| *k);
    for ((source, id), [samples, on_ns, off_ns, blocks]) in keys {
        let Some(&store) = stores.get(source as usize) else {
            continue;
        };
        let Some(def) = store.stack(id) else { continue };
        if let Some(why) = &def.cut {
            // By category: the reasons' details (an address) would make a line a stack.
            let category = trace_file::meta::cut_category(why).to_string();
            add(
                cut.entry(category).or_default(),
                samples.saturating_add(blocks),
            );
        }
        let frames = names.frames(store, source, def);
        let mut seen = std::collections::HashSet::new();
        for f in frames.iter().filter(|f| !f.function.starts_with("[cut")) {
            if !seen.insert(f.function.as_str()) {
                continue;
            }
            let r = rows.entry(f.function.clone()).or_default();
            add(&mut r.on_cpu_total_ns, on_ns);
            add(&mut r.off_cpu_total_ns, off_ns);
            add(&mut r.blocks_total, blocks);
        }
        if let Some(leaf) = frames.last() {
            let r = rows.entry(leaf.function.clone()).or_default();
            add(&mut r.on_cpu_self_samples, samples);
            add(&mut r.on_cpu_self_ns, on_ns);
            add(&mut r.off_cpu_self_ns, off_ns);
            add(&mut r.blocks_self, blocks);
            if let Some(loc) = leaf.location() {
                let place = places.entry(leaf.function.clone()).or_default();
                add(place.entry(loc).or_default(), on_ns.saturating_add(off_ns));
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
        let key = |r: &FunctionTime| (r.on_cpu_total_ns, r.off_cpu_total_ns, r.blocks_total);
        key(b)
            .cmp(&key(a))
            .then_with(|| a.function.cmp(&b.function))
    });
    let mut cut: Vec<(String, u64)> = cut.into_iter().collect();
    cut.sort();
    StackSummary {
        functions,
        cut,
        walked: None,
        salvaged: Vec::new(),
    }
}

/// Writes the first `top` rows of `s` as a table, one JSON document, or CSV (raw ns).
pub fn render(
    s: &StackSummary,
    format: crate::Format,
    top: Option<usize>,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let rows = &s.functions[..top.unwrap_or(usize::MAX).min(s.functions.len())];
    if format == crate::Format::Csv {
        let mut w = csv::Writer::from_writer(out);
        let io = |e: csv::Error| Error::Write(e.into());
        w.write_record([
            "function",
            "location",
            "on_cpu_self_samples",
            "on_cpu_self_ns",
            "on_cpu_total_ns",
            "off_cpu_self_ns",
            "off_cpu_total_ns",
            "blocks_self",
            "blocks_total",
        ])
        .map_err(io)?;
        for r in rows {
            let n = |v: u64| v.to_string();
            w.write_record([
                r.function.clone(),
                r.location.clone().unwrap_or_default(),
                n(r.on_cpu_self_samples),
                n(r.on_cpu_self_ns),
                n(r.on_cpu_total_ns),
                n(r.off_cpu_self_ns),
                n(r.off_cpu_total_ns),
                n(r.blocks_self),
                n(r.blocks_total),
            ])
            .map_err(io)?;
        }
        w.flush()?;
        return Ok(());
    }
    if format == crate::Format::Json {
        let doc = StackSummary {
            functions: rows.to_vec(),
            cut: s.cut.clone(),
            walked: s.walked.clone(),
            salvaged: s.salvaged.clone(),
        };
        serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    for what in &s.salvaged {
        writeln!(out, "# salvaged: {what}")?;
    }
    if s.functions.is_empty() {
        writeln!(out, "no stacks in this trace (record with --stacks)")?;
        return Ok(());
    }
    if let Some(how) = &s.walked {
        writeln!(out, "# {how}")?;
    }
    writeln!(
        out,
        "{:>9} {:>9} {:>9} {:>7} {:>9} {:>9}  function (file:line)",
        "samples", "cpu self", "cpu total", "blocks", "off self", "off total"
    )?;
    for r in rows {
        let ns = |v: u64| if v == 0 { "-".to_string() } else { human_ns(v) };
        writeln!(
            out,
            "{:>9} {:>9} {:>9} {:>7} {:>9} {:>9}  {}{}",
            r.on_cpu_self_samples,
            ns(r.on_cpu_self_ns),
            ns(r.on_cpu_total_ns),
            r.blocks_total,
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
        let meaning = trace_file::meta::cut_meaning(why);
        writeln!(out, "cut short: {n} stacks, {meaning} ({why})")?;
    }
    Ok(())
}

/// Adds without overflowing: counts from a damaged or hostile file stay at their largest.
fn add(to: &mut u64, v: u64) {
    *to = to.saturating_add(v);
}
