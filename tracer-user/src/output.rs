//! Creating output files without ever clobbering one by accident.

use std::{
    fs::{File, OpenOptions},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use anyhow::{bail, Context, Result};

/// Creates `path` for writing with mode 0600 (a trace can hold sensitive data). An existing
/// file is an error unless `force`, in which case it is replaced.
pub fn create_exclusive(path: &Path, force: bool) -> Result<File> {
    if path.exists() {
        if !force {
            bail!(
                "{} already exists; use --force to overwrite it",
                path.display()
            );
        }
        std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))
}

/// A file just created, removed when dropped unless kept: a command that fails before it
/// has written anything leaves no empty file behind (which a rerun would refuse to
/// overwrite, and a reader would call no trace at all).
pub struct Provisional<'a> {
    path: Option<&'a Path>,
}

impl<'a> Provisional<'a> {
    /// `path`, to be removed unless [`Provisional::keep`] is called.
    pub fn new(path: &'a Path) -> Self {
        Provisional { path: Some(path) }
    }

    /// Keeps the file.
    pub fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for Provisional<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}
