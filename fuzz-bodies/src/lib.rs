//! The bodies of the fuzz targets, for `fuzz/` (libFuzzer, with the pinned nightly and
//! sanitizers: `cargo xtask fuzz`) and for the replay of the committed corpus that `cargo
//! test` runs on stable (`tests/corpus.rs`), so that an input once found to crash fails
//! the test suite too.
//!
//! Each body takes arbitrary bytes and panics only where the code under test broke a
//! promise: a panic, an overflow, an error of more than one line, or an inconsistent
//! answer. Allocations without bound and hangs are libFuzzer's to catch.
#![warn(missing_docs)]

mod file;
mod symbols;
mod timeline;
pub mod traces;

pub use file::{container, events, meta};
pub use symbols::symbolizer;
pub use timeline::{summary, timeline, writers};
pub use traces::{Knobs, Traces};

/// A target's body: what it does with one input.
pub type Body = fn(&[u8]);

/// Every fuzz target by name, as `fuzz/Cargo.toml` names its binaries and `fuzz/corpus/`
/// its seed directories.
pub const TARGETS: &[(&str, Body)] = &[
    ("container", container),
    ("events", events),
    ("meta", meta),
    ("timeline", timeline),
    ("writers", writers),
    ("summary", summary),
    ("symbolizer", symbolizer),
];

/// Errors are for users: one line each.
fn one_line(e: &dyn std::fmt::Display) {
    let s = e.to_string();
    assert!(!s.contains('\n'), "error of several lines: {s}");
}

/// A temporary directory for the files a body writes on every input: in tmpfs where there
/// is one, since a disk's metadata writes would cost more than the code under test.
fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("a temporary directory")
}
