//! Errors of the merge and of the writers: one line each, naming the file involved.

use std::path::PathBuf;

/// Everything that can stop a conversion. `Display` is one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No input trace was given.
    #[error("no input trace given")]
    NoInput,
    /// An input could not be read as a trace (I/O error, bad magic, corrupt chunk...).
    #[error("{}: {source}", path.display())]
    Trace {
        path: PathBuf,
        #[source]
        source: trace_file::Error,
    },
    /// An input is a trace file but its content makes no sense (e.g. no header chunk).
    #[error("{}: {what}", path.display())]
    Invalid { path: PathBuf, what: String },
    /// Reading or writing an output (or a temporary file next to it) failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An output exists and overwriting was not asked for.
    #[error("{} already exists (use --force to overwrite)", path.display())]
    Exists { path: PathBuf },
    /// The trace is too large for the output format (e.g. more than 65 535 threads).
    #[error("{0}")]
    Limit(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
