//! Errors of the Parquet writer: one line each, naming the file involved.

use std::path::{Path, PathBuf};

/// Everything that can stop a conversion. `Display` is one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the inputs failed.
    #[error(transparent)]
    Input(#[from] trace_merge::Error),
    /// Writing an output (or the temporary directory next to it) failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory being written.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Parquet's writer refused (an encoding error: not expected with these schemas).
    #[error("{}: {source}", path.display())]
    Parquet {
        /// The file being written.
        path: PathBuf,
        /// The writer's error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// The output directory exists and overwriting was not asked for.
    #[error("{} already exists (use --force to replace it)", path.display())]
    Exists {
        /// The existing output.
        path: PathBuf,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn parquet(path: &Path, source: parquet::errors::ParquetError) -> Error {
        Error::Parquet {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn trace(path: &Path, source: trace_file::Error) -> Error {
        Error::Input(trace_merge::Error::Trace {
            path: path.to_owned(),
            source,
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
