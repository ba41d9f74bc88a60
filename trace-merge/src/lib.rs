//! Ordering and meaning of recorded traces: where records from many files, CPUs and hosts
//! are put in time order and become thread states, spans and links.
//!
//! The pipeline is a chain of streams, each pulling from the one before, so memory grows
//! with the number of CPUs, threads and open connections, never with the number of
//! records:
//!
//! 1. [`merge::Merger`]: a k-way merge of the per-CPU record streams of one or several
//!    trace files, with a bounded reorder window, in one time base;
//! 2. [`timeline::Timeline`]: the per-thread state machine, yielding [`timeline::Item`]s
//!    (state intervals, function and system-call spans, wakeup and hand-off links);
//! 3. consumers, each implementing [`Consumer`] and driven by [`feed`]: the writers
//!    (crates `trace-convert`, `trace-parquet`) and the aggregator (crate
//!    `trace-summary`); those that report calls take a call's self time and state split
//!    from [`call_time`].
//!
//! ```no_run
//! use trace_merge::{timeline::{Item, Timeline}, Consumer, MergeOptions};
//! struct Durations;
//! impl Consumer for Durations {
//!     type Error = trace_merge::Error;
//!     fn item(&mut self, tl: &Timeline, item: Item) -> trace_merge::Result<()> {
//!         if let Item::Func(span) = item {
//!             let name = &tl.thread(span.thread).name;
//!             println!("{name}: function {} took {} ns", span.func, span.end - span.begin);
//!         }
//!         Ok(())
//!     }
//! }
//! let timeline = trace_merge::open(&["app.trace".into()], &MergeOptions::default())?;
//! trace_merge::feed(timeline, u64::MAX, &mut Durations)?;
//! # Ok::<(), trace_merge::Error>(())
//! ```
#![warn(missing_docs)]

pub mod call_time;
mod error;
pub mod merge;
pub mod report;
pub mod stacks;
pub mod sysclass;
pub mod timeline;

use std::path::PathBuf;

pub use error::{Error, Result};
pub use merge::MergeOptions;
pub use report::{InputReport, Window};

use timeline::{Item, Timeline};

/// Opens trace files and returns their merged timeline: the one way every consumer starts.
pub fn open(paths: &[PathBuf], opts: &MergeOptions) -> Result<Timeline> {
    Ok(Timeline::new(merge::Merger::open(paths, opts.clone())?))
}

/// A reader of the timeline's items: each writer and the aggregator is one.
pub trait Consumer {
    /// The consumer's own error; errors of the merge convert into it.
    type Error: From<Error>;

    /// One item of the stream, with the timeline it came from (for thread and process
    /// metadata).
    fn item(&mut self, tl: &Timeline, item: Item) -> std::result::Result<(), Self::Error>;

    /// Whether [`Consumer::settle`] does anything: the per-item path of [`feed`] leaves out
    /// its test for consumers that do not.
    const SETTLES: bool = false;

    /// Called between records, once every item of the current one has been taken, if
    /// [`Consumer::SETTLES`]: the point where a writer that must write in time order may
    /// cut long open states ([`Timeline::cut`]) and write what is final.
    #[inline]
    fn settle(&mut self, _tl: &mut Timeline) -> std::result::Result<(), Self::Error> {
        Ok(())
    }
}

/// Feeds `consumer` the items of `tl` until the stream ends, or until it reaches
/// `until`: there the states under way end (cut at the current time, and fed too) and
/// reading stops. Returns the timeline (for what it knows at the end: threads, counts,
/// the end time) and whether it stopped at `until` (`false`: the stream ended first).
///
/// The timeline is taken by value: the consumers' loops measured slower with it behind a
/// reference (docs/performance.md).
#[inline(always)]
pub fn feed<C: Consumer>(
    mut tl: Timeline,
    until: u64,
    consumer: &mut C,
) -> std::result::Result<(Timeline, bool), C::Error> {
    // One call of `consumer.item` in the loop, where it is inlined; the cut at the window's
    // end calls it out of line.
    while let Some(item) = tl.next_item()? {
        consumer.item(&tl, item)?;
        if (C::SETTLES || until != u64::MAX) && !tl.has_queued() {
            if tl.now() >= until {
                end_window(&mut tl, consumer)?;
                return Ok((tl, true));
            }
            consumer.settle(&mut tl)?;
        }
    }
    Ok((tl, false))
}

/// The states under way at the window's end, cut there.
#[inline(never)]
fn end_window<C: Consumer>(
    tl: &mut Timeline,
    consumer: &mut C,
) -> std::result::Result<(), C::Error> {
    for piece in tl.cut(tl.now(), u64::MAX) {
        consumer.item(tl, timeline::Item::State(piece))?;
    }
    Ok(())
}
