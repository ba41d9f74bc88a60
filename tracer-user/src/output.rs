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
