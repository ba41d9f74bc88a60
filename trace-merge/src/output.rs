//! How a converter writes one output file: never over an existing file unless asked, and
//! never a half-written one under the final name.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Runs `write` on a temporary file next to `output` (`output.tmp`) and renames it to
/// `output` once `write` has succeeded; removes it otherwise. An existing `output` is an
/// error unless `force`.
pub(crate) fn write_atomically<T>(
    output: &Path,
    force: bool,
    write: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    if !force && output.exists() {
        return Err(Error::Exists {
            path: output.to_owned(),
        });
    }
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let result = write(&tmp).and_then(|v| {
        std::fs::rename(&tmp, output).map_err(|e| Error::io(output, e))?;
        Ok(v)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
