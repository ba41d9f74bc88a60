//! How the converters write their outputs (`trace-convert`'s files, `trace-parquet`'s
//! directories): never over an existing output unless asked, never a half-written one
//! under the final name, never colliding with another conversion writing beside it.
//!
//! An output is written under a unique hidden name in its own directory (so that the
//! final rename stays within one file system) and renamed once complete; dropped before
//! that, it is removed. Each writer keeps its own error type and words: it tells this
//! crate how through [`OutputError`].
#![warn(missing_docs)]

use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// The two ways writing an output fails, in a writer's own error type.
pub trait OutputError {
    /// `path` exists and replacing it was not asked for.
    fn exists(path: PathBuf) -> Self;
    /// Writing `path` (or its temporary name) failed.
    fn io(path: PathBuf, source: std::io::Error) -> Self;
}

/// Refuses an existing `output` unless `force`. The pending outputs' `new` does too; a
/// writer calls it alone to refuse before reading its inputs, when a wrong output still
/// costs nothing.
pub fn refuse_existing<E: OutputError>(output: &Path, force: bool) -> Result<(), E> {
    match !force && output.exists() {
        true => Err(E::exists(output.to_owned())),
        false => Ok(()),
    }
}

/// What an output is written into until it is complete: a file or a directory.
pub trait Temp: Sized {
    /// A new one in `dir`, named by `name`.
    fn create(name: &tempfile::Builder, dir: &Path) -> std::io::Result<Self>;
    /// Its path.
    fn path(&self) -> &Path;
}

impl Temp for tempfile::NamedTempFile {
    fn create(name: &tempfile::Builder, dir: &Path) -> std::io::Result<Self> {
        // Mode 0600 (tempfile's), as the trace it is converted from: both can hold
        // sensitive data.
        name.tempfile_in(dir)
    }

    fn path(&self) -> &Path {
        tempfile::NamedTempFile::path(self)
    }
}

impl Temp for tempfile::TempDir {
    fn create(name: &tempfile::Builder, dir: &Path) -> std::io::Result<Self> {
        name.tempdir_in(dir)
    }

    fn path(&self) -> &Path {
        tempfile::TempDir::path(self)
    }
}

/// An output being written: a uniquely named temporary file or directory in the
/// output's directory, which `commit` renames to the final name. Dropped uncommitted, it
/// is removed.
pub struct Pending<T, E> {
    tmp: T,
    output: PathBuf,
    force: bool,
    error: PhantomData<fn() -> E>,
}

/// A file output being written.
pub type PendingFile<E> = Pending<tempfile::NamedTempFile, E>;

/// A directory output being written.
pub type PendingDir<E> = Pending<tempfile::TempDir, E>;

impl<T: Temp, E: OutputError> Pending<T, E> {
    /// Starts `output`. An existing `output` is an error unless `force`.
    pub fn new(output: &Path, force: bool) -> Result<Pending<T, E>, E> {
        refuse_existing(output, force)?;
        let dir = match output.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = output.file_name().unwrap_or_default().to_string_lossy();
        let prefix = format!(".{name}.");
        let tmp = T::create(tempfile::Builder::new().prefix(&prefix).suffix(".tmp"), dir)
            .map_err(|e| E::io(output.to_owned(), e))?;
        Ok(Pending {
            tmp,
            output: output.to_owned(),
            force,
            error: PhantomData,
        })
    }

    /// The temporary file or directory's path, to write into, for error messages and for
    /// reopening it.
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// Another temporary file or directory for the same output, to be committed instead
    /// of this one.
    pub fn again(&self) -> Result<Pending<T, E>, E> {
        Pending::new(&self.output, self.force)
    }
}

impl<E: OutputError> PendingFile<E> {
    /// The temporary file, open for reading and writing.
    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }

    /// Makes the output durable under its final name: synced, then renamed (refusing to
    /// replace a file that appeared meanwhile unless `force`).
    pub fn commit(self) -> Result<(), E> {
        let io = |e| E::io(self.output.clone(), e);
        self.tmp.as_file().sync_all().map_err(io)?;
        let persisted = if self.force {
            self.tmp.persist(&self.output)
        } else {
            self.tmp.persist_noclobber(&self.output)
        };
        match persisted {
            Ok(_) => Ok(()),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(E::exists(self.output))
            }
            Err(e) => Err(E::io(self.output, e.error)),
        }
    }
}

/// Runs `write` on the temporary file of `output` (the file and its path) and commits it
/// once `write` has succeeded; removes it otherwise.
pub fn write_file<T, E: OutputError>(
    output: &Path,
    force: bool,
    write: impl FnOnce(&File, &Path) -> Result<T, E>,
) -> Result<T, E> {
    let pending = PendingFile::new(output, force)?;
    let value = write(pending.file(), pending.path())?;
    pending.commit()?;
    Ok(value)
}

impl<E: OutputError> PendingDir<E> {
    /// Renames the finished directory to the output; with `force`, an existing output is
    /// moved aside first (a rename does not replace a directory that has files) and
    /// removed once the new one is in place.
    pub fn commit(self) -> Result<(), E> {
        let output = self.output;
        let dir = self.tmp.keep();
        let fail = |e| {
            let _ = std::fs::remove_dir_all(&dir);
            E::io(output.clone(), e)
        };
        let mut old = None;
        if output.exists() {
            if !self.force {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(E::exists(output));
            }
            let aside = dir.with_extension("old");
            std::fs::rename(&output, &aside).map_err(fail)?;
            old = Some(aside);
        }
        std::fs::rename(&dir, &output).map_err(fail)?;
        if let Some(old) = old {
            let removed = match std::fs::symlink_metadata(&old) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&old),
                Ok(_) => std::fs::remove_file(&old),
                Err(e) => Err(e),
            };
            removed.map_err(|e| E::io(old, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum TestError {
        Exists(PathBuf),
        Io(PathBuf),
    }

    impl OutputError for TestError {
        fn exists(path: PathBuf) -> Self {
            TestError::Exists(path)
        }

        fn io(path: PathBuf, _: std::io::Error) -> Self {
            TestError::Io(path)
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = (std::fs::read_dir(dir).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_appears_whole_and_replaces_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.txt");
        let write = |force, text: &'static str| {
            write_file(&out, force, |mut f, _| {
                std::io::Write::write_all(&mut f, text.as_bytes())
                    .map_err(|e| TestError::io(out.clone(), e))
            })
        };
        write(false, "one").unwrap();
        assert_eq!(write(false, "two"), Err(TestError::Exists(out.clone())));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "one");
        write(true, "three").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "three");
        // A failed write leaves nothing behind, not even its temporary file.
        let failed: Result<(), _> = write_file(&dir.path().join("x"), false, |_, p| {
            Err(TestError::Io(p.to_owned()))
        });
        assert!(failed.is_err());
        assert_eq!(names(dir.path()), ["out.txt"]);
    }

    #[test]
    fn a_directory_replaces_another_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("tables");
        let make = |force, file: &str| -> Result<(), TestError> {
            let p = PendingDir::<TestError>::new(&out, force)?;
            std::fs::write(p.path().join(file), b"x").unwrap();
            p.commit()
        };
        make(false, "a").unwrap();
        assert_eq!(make(false, "b"), Err(TestError::Exists(out.clone())));
        make(true, "c").unwrap();
        assert_eq!(names(&out), ["c"]);
        assert_eq!(names(dir.path()), ["tables"]);
    }
}
