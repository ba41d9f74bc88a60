//! The merge and the timeline, the writers and the summaries over the trace files of
//! [`Traces`].

use std::path::PathBuf;

use trace_convert::paraver::Tuning;
use trace_convert::{chrome, folded, paraver, InputReport, Options, Window};
use trace_merge::timeline::{Item, Timeline};
use trace_summary::{By, Format, SummarizeOptions, Summary, SummaryOptions};
use trace_testkit::invariants::Checker;

use crate::{one_line, Traces};

/// `trace_merge::open` and `feed` over arbitrary traces, every item taken: errors are one
/// line, and the item stream keeps the timeline's guarantees (states tile every thread's
/// time, spans close what they open).
pub fn timeline(data: &[u8]) {
    let Some(t) = Traces::write(data) else {
        return;
    };
    let tl = match trace_merge::open(&t.paths, &t.knobs.merge) {
        Ok(tl) => tl,
        Err(e) => return one_line(&e),
    };
    let mut c = Check(Checker::new());
    let (tl, stopped) = match trace_merge::feed(tl, t.knobs.until, &mut c) {
        Ok(r) => r,
        Err(e) => return one_line(&e),
    };
    let _ = InputReport::of(&tl).to_string();
    // Stopped early, calls may still be open: the guarantees hold for a whole stream.
    if !stopped {
        if let Err(broken) = c.0.finish(tl.end().unwrap()) {
            panic!("timeline guarantees broken: {broken:?}");
        }
    }
}

struct Check(Checker);

impl trace_merge::Consumer for Check {
    type Error = trace_merge::Error;
    fn item(&mut self, _: &Timeline, item: Item) -> trace_merge::Result<()> {
        self.0.item(&item);
        Ok(())
    }
}

/// A writer (Paraver, Trace Event Format, folded stacks or Parquet tables: the input's
/// length picks one, so that an input runs one writer and the target four times as many
/// inputs) over arbitrary traces: an error is one line, never a panic. A length of 3
/// modulo 4 is Parquet's; the others pick among the first three by the length modulo 3,
/// as before Parquet was added, so the committed inputs of those three keep their writer.
pub fn writers(data: &[u8]) {
    let Some(t) = Traces::write(data) else {
        return;
    };
    let k = &t.knobs;
    let opts = Options {
        force: true,
        window: Window {
            from_ns: k.from,
            until_ns: k.until,
        },
        merge: k.merge.clone(),
    };
    let tuning = if k.small_tuning {
        Tuning {
            flush_every: 4,
            cut_age_ns: 1_000,
            link_horizon_ns: 10_000,
        }
    } else {
        Tuning::default()
    };
    let out = |name: &str| t.dir().join(name);
    match (data.len() % 4, data.len() % 3) {
        (3, _) => parquet(&t, &out("t.parquet")),
        (_, 0) => report(
            paraver::convert_tuned(&t.paths, &out("p"), &opts, &tuning).map(|r| r.to_string()),
        ),
        (_, 1) => report(chrome::convert(&t.paths, &out("c.json"), &opts).map(|r| r.to_string())),
        _ => report(folded::convert(&t.paths, &out("f.folded"), &opts).map(|r| r.to_string())),
    }
}

fn report(r: trace_convert::Result<String>) {
    if let Err(e) = r {
        one_line(&e);
    }
}

/// The Parquet tables of `t` in the directory `out`: written whole (the `files` table is
/// there), or an error of one line and no directory at all.
fn parquet(t: &Traces, out: &std::path::Path) {
    let opts = trace_parquet::Options {
        force: true,
        merge: t.knobs.merge.clone(),
        partition: trace_parquet::Partition {
            host: t.knobs.small_tuning,
            date: t.knobs.view % 2 == 1,
        },
    };
    match trace_parquet::convert(&t.paths, out, &opts) {
        Ok(r) => {
            let _ = r.to_string();
            assert!(out.join("files.parquet").is_file(), "{}", out.display());
        }
        Err(e) => {
            one_line(&e);
            assert!(!out.exists(), "a failed conversion left {}", out.display());
        }
    }
}

/// Summaries over arbitrary traces, rendered in one of their views (the input's choice),
/// and the comparison of the first file's with all files': an error is one line, never a
/// panic.
pub fn summary(data: &[u8]) {
    let Some(t) = Traces::write(data) else {
        return;
    };
    let opts = SummarizeOptions {
        window_ns: t.knobs.summary_window,
        // Rendering 10,000 windows took a third of the target's time: 64 run the same
        // code, and reach the refusal of a trace too long for them more often.
        max_windows: 64,
        merge: t.knobs.merge.clone(),
        ..SummarizeOptions::default()
    };
    let Some(all) = summarize(&t.paths, &opts) else {
        return;
    };
    let first = match t.paths.len() {
        1 => Summary::default(),
        _ => summarize(&t.paths[..1], &opts).unwrap_or_default(),
    };
    render(&first, &all, &view(t.knobs.view, opts.window_ns));
}

/// The view number `v` (0..16) of a summary: every kind of row in tables and CSV, JSON
/// (which holds every kind), and JUnit.
fn view(v: u32, window_ns: Option<u64>) -> SummaryOptions {
    const BY: [By; 5] = [
        By::Function,
        By::Thread,
        By::Syscall,
        By::Connection,
        By::CallGraph,
    ];
    let by = BY[v as usize % BY.len()];
    let format = match v / 5 {
        0 => Format::Table,
        1 => Format::Csv,
        2 => Format::Json,
        _ => Format::Junit,
    };
    SummaryOptions {
        by,
        format,
        window_ns,
        ..SummaryOptions::default()
    }
}

/// `all` rendered, and compared with `first`.
fn render(first: &Summary, all: &Summary, o: &SummaryOptions) {
    if let Err(e) = trace_summary::render(all, o, &mut std::io::sink()) {
        one_line(&e);
    }
    if let Err(e) = trace_summary::diff(first, all, o, &mut std::io::sink()) {
        one_line(&e);
    }
}

fn summarize(paths: &[PathBuf], opts: &SummarizeOptions) -> Option<Summary> {
    match trace_summary::summarize_with(paths, opts) {
        Ok(s) => Some(s),
        Err(e) => {
            one_line(&e);
            None
        }
    }
}
