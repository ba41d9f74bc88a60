//! Ordering, meaning and output of recorded traces.
//!
//! The pipeline is a chain of streams, each pulling from the one before, so memory grows
//! with the number of CPUs, threads and open connections, never with the number of
//! records:
//!
//! 1. [`merge::Merger`]: a k-way merge of the per-CPU record streams of one or several
//!    trace files, with a bounded reorder window, in one time base;
//! 2. [`timeline::Timeline`]: the per-thread state machine, yielding [`timeline::Item`]s
//!    (state intervals, function and system-call spans, wakeup and hand-off links);
//! 3. consumers: [`paraver`] and [`chrome`] (the writers, each with its conformance
//!    checker), [`folded`] (flame graph stacks), the summaries, [`invariants`] (the checks every consumer may rely on).
//!
//! ```no_run
//! use trace_merge::{merge::{Merger, MergeOptions}, timeline::{Item, Timeline}};
//! let merger = Merger::open(&["app.trace".into()], MergeOptions::default())?;
//! let mut timeline = Timeline::new(merger);
//! while let Some(item) = timeline.next_item()? {
//!     if let Item::Func(span) = item {
//!         let name = &timeline.thread(span.thread).name;
//!         println!("{name}: function {} took {} ns", span.func, span.end - span.begin);
//!     }
//! }
//! # Ok::<(), trace_merge::Error>(())
//! ```

pub mod chrome;
mod error;
mod fmt;
pub mod folded;
pub mod invariants;
pub mod merge;
mod output;
pub mod paraver;
pub mod report;
pub mod summary;
pub mod sysclass;
pub mod timeline;

pub use chrome::{convert_chrome, ChromeReport};
pub use error::{Error, Result};
pub use folded::{convert_folded, FoldedReport};
pub use paraver::{convert_paraver, ConvertReport};
