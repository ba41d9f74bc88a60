//! How a converter writes an output file: never over an existing file unless asked, never
//! a half-written one under the final name, never colliding with another conversion
//! writing beside it.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// An output being written: a uniquely named temporary file in the output's directory,
/// which [`Pending::commit`] syncs and renames to the final name. Dropped uncommitted, it
/// is removed.
pub(crate) struct Pending {
    tmp: tempfile::NamedTempFile,
    output: PathBuf,
    force: bool,
}

impl Pending {
    /// Starts `output`. An existing `output` is an error unless `force`.
    pub(crate) fn new(output: &Path, force: bool) -> Result<Pending> {
        if !force && output.exists() {
            return Err(Error::Exists {
                path: output.to_owned(),
            });
        }
        let dir = match output.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = output.file_name().unwrap_or_default().to_string_lossy();
        // Mode 0600 (tempfile's), as the trace it is converted from: both can hold
        // sensitive data.
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(output, e))?;
        Ok(Pending {
            tmp,
            output: output.to_owned(),
            force,
        })
    }

    /// The temporary file, open for reading and writing.
    pub(crate) fn file(&self) -> &File {
        self.tmp.as_file()
    }

    /// The temporary file's path, for error messages and for reopening it.
    pub(crate) fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Another temporary file for the same output, to be committed instead of this one.
    pub(crate) fn again(&self) -> Result<Pending> {
        Pending::new(&self.output, self.force)
    }

    /// Makes the output durable under its final name: synced, then renamed (refusing to
    /// replace a file that appeared meanwhile unless `force`).
    pub(crate) fn commit(self) -> Result<()> {
        let io = |e| Error::io(&self.output, e);
        self.tmp.as_file().sync_all().map_err(io)?;
        let persisted = if self.force {
            self.tmp.persist(&self.output)
        } else {
            self.tmp.persist_noclobber(&self.output)
        };
        match persisted {
            Ok(_) => Ok(()),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::Exists { path: self.output })
            }
            Err(e) => Err(Error::io(&self.output, e.error)),
        }
    }
}

/// Runs `write` on the temporary file of `output` and commits it once `write` has
/// succeeded; removes it otherwise.
pub(crate) fn write_atomically<T>(
    output: &Path,
    force: bool,
    write: impl FnOnce(&File, &Path) -> Result<T>,
) -> Result<T> {
    let pending = Pending::new(output, force)?;
    let value = write(pending.file(), pending.path())?;
    pending.commit()?;
    Ok(value)
}
