//! The writers: where the merged timeline becomes files other tools read.
//!
//! Each writer is a [`trace_merge::Consumer`] of the timeline's items, driven by
//! [`trace_merge::feed`]:
//! - [`paraver`]: Paraver traces (`.prv`, `.pcf`, `.row`), states, events and
//!   communications;
//! - [`chrome`]: the Trace Event Format (Perfetto's UI, chrome://tracing);
//! - [`folded`]: folded stacks for flame graphs.
//!
//! Every output is written to a temporary file beside it and renamed once complete, and
//! an existing output is replaced only when asked ([`Options::force`]): `atomic-output`.
#![warn(missing_docs)]

pub mod chrome;
mod error;
mod fmt;
pub mod folded;
pub mod paraver;

pub use error::{Error, Result};
pub use trace_merge::{InputReport, MergeOptions, Window};

/// An output file being written, failing with this crate's errors.
type Pending = atomic_output::PendingFile<Error>;

/// What every conversion is asked.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Replace existing outputs.
    pub force: bool,
    /// The part of the trace to write (the Trace Event Format and folded stacks).
    pub window: Window,
    /// How the inputs are read and merged.
    pub merge: MergeOptions,
}
