//! Go binaries: the toolchain version from `.go.buildinfo`, and functions,
//! source lines and inlined frames from the runtime's own table
//! (`.gopclntab`), which a stripped Go binary keeps because the runtime needs
//! it for tracebacks and garbage collection; and where Go functions are probed.
//!
//! Layouts read (magic numbers of `runtime.pcHeader`): Go 1.16-1.17
//! (0xfffffffa), 1.18-1.19 (0xfffffff0) and 1.20 and later (0xfffffff1).
//! Every number read from the file is bounds-checked before it is used as an
//! offset, a length or a count: the bytes are as untrusted as the binary.

mod binary;
mod inline;
mod pclntab;
mod pcvalue;
mod placement;
mod public;
mod read;
#[cfg(test)]
mod tests;
mod unwind;

pub(crate) use binary::GoBinary;
pub use pclntab::GoPclnVersion;
pub use public::{parse_gopclntab, GoFunction, GoPclnTab};
pub use unwind::{GoFrame, GoUnwindTable};

/// Why a pclntab cannot be read; shown to the user in one line.
pub(crate) type Reason = String;
