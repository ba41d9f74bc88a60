//! The pclntab parser on its own, for tools and fuzzing: a table's
//! functions and the function, file and line at an address.

use std::sync::Arc;

use super::pclntab::{GoPclnVersion, GoTable};
use crate::Frame;

/// A pclntab parsed on its own, for tools and fuzzing: see [`parse_gopclntab`].
pub struct GoPclnTab<'a> {
    data: &'a [u8],
    table: GoTable,
}

/// One function of a [`GoPclnTab`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    /// Go's name for it (`net/http.(*conn).serve`).
    pub name: String,
    /// Entry address.
    pub entry: u64,
    /// End of its code (exclusive).
    pub end: u64,
    /// A cgo binary's C code: listed in the table without line information.
    pub foreign: bool,
}

/// Parses a Go pclntab (`.gopclntab` section bytes, from its header on).
/// `text_start` stands in for the header's text start when that is 0 (the
/// runtime's `text` address: the `.text` section's in most binaries).
/// Garbage gives an error, never a panic; counts and offsets read from the
/// bytes are checked against their length before use.
pub fn parse_gopclntab(data: &[u8], text_start: u64) -> Result<GoPclnTab<'_>, crate::Error> {
    let table = GoTable::parse(data, text_start).map_err(|reason| crate::Error::GoTable {
        binary: "pclntab".into(),
        reason,
    })?;
    Ok(GoPclnTab { data, table })
}

impl GoPclnTab<'_> {
    /// The layout generation the header announced.
    pub fn version(&self) -> GoPclnVersion {
        self.table.version
    }

    /// Every function, by address.
    pub fn functions(&self) -> Vec<GoFunction> {
        self.table
            .funcs
            .iter()
            .map(|f| GoFunction {
                name: String::from_utf8_lossy(self.table.name(self.data, f).unwrap_or_default())
                    .into_owned(),
                entry: f.entry,
                end: f.end,
                foreign: f.foreign,
            })
            .collect()
    }

    /// The function holding `pc` with the file and line there (inlined
    /// frames need the binary's other sections: [`crate::Symbolizer`] gives them).
    pub fn lookup(&self, pc: u64) -> Option<Frame> {
        let i = self.table.find(pc)?;
        let mut names = |b: &[u8]| -> Arc<str> { String::from_utf8_lossy(b).into() };
        self.table.frames(self.data, i, pc, None, &mut names).pop()
    }
}
