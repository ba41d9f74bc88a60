//! Errors of the writers: one line each, naming the file involved.

use std::path::PathBuf;

/// Everything that can stop a conversion. `Display` is one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the inputs failed, or they hold nothing to convert.
    #[error(transparent)]
    Input(#[from] trace_merge::Error),
    /// Writing an output (or a temporary file next to it) failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file being written.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// An output exists and overwriting was not asked for.
    #[error("{} already exists (use --force to overwrite)", path.display())]
    Exists {
        /// The existing output.
        path: PathBuf,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// An input holds nothing this output can be made of.
    pub(crate) fn invalid(path: impl Into<PathBuf>, what: impl Into<String>) -> Error {
        Error::Input(trace_merge::Error::Invalid {
            path: path.into(),
            what: what.into(),
        })
    }
}

impl atomic_output::OutputError for Error {
    fn exists(path: PathBuf) -> Error {
        Error::Exists { path }
    }

    fn io(path: PathBuf, source: std::io::Error) -> Error {
        Error::Io { path, source }
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
