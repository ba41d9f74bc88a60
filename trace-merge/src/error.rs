//! Errors of the merge: one line each, naming the file involved.

use std::path::PathBuf;

/// Everything that can stop reading traces. `Display` is one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No input trace was given.
    #[error("no input trace given")]
    NoInput,
    /// An input could not be read as a trace (I/O error, bad magic, damaged chunk...).
    #[error("{}: {source}", path.display())]
    Trace {
        /// The input file.
        path: PathBuf,
        /// What the trace-file reader found.
        #[source]
        source: trace_file::Error,
    },
    /// An input is a trace file but its content makes no sense (e.g. no header chunk), or
    /// holds nothing an output can be made of.
    #[error("{}: {what}", path.display())]
    Invalid {
        /// The input file.
        path: PathBuf,
        /// What is wrong, as a sentence fragment.
        what: String,
    },
    /// The traces exceed a limit of the merge or of an output format (e.g. more than
    /// 65 535 threads for Paraver).
    #[error("{0}")]
    Limit(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
