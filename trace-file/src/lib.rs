//! The trace file written by `tracer record` and read by everything after it.
//!
//! A trace is a magic number followed by a stream of chunks. Each chunk header carries a
//! sync marker, the chunk's kind and length, a CRC-32 of its payload and a CRC-32 of the
//! header itself, so a recorder killed at any instant leaves a file whose complete chunks
//! read back and whose torn tail is detected, while damage anywhere is detected as damage,
//! never misread as a shorter file, and can be stepped over ([`ReadOptions::salvage`]).
//! Metadata chunks hold JSON; event chunks hold the records of one CPU, densely encoded
//! (see [`record`]). The layout is documented in `docs/trace-format.md`.

#![warn(missing_docs)]

mod container;
pub mod meta;
pub mod record;

pub use container::{
    Chunk, ChunkKind, End, ReadOptions, Reader, Skipped, Writer, CHUNK_HEADER_LEN, FORMAT_VERSION,
    MAGIC, MAX_CHUNK, OLDEST_VERSION, SYNC,
};
pub use meta::{
    latency_buckets, wait_buckets, FuncWindow, JitSymbol, KernelSymbol, LostCounts, Mapping, Probe,
    ProbeKind, ProcessInfo, ProcessMappings, StackDef, StackTable, StatWindow, SysWindow,
    ThreadInfo, ThreadWindow, TraceHeader, Trailer, WindowStack,
};
pub use record::{Event, EventChunkDecoder, EventChunkEncoder, Record};

/// Everything that can go wrong reading or writing a trace file. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input or output failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The file does not start with [`MAGIC`].
    #[error("not a tracer trace file (bad magic number)")]
    BadMagic,
    /// The file's format version is one this build cannot read (or write).
    #[error(
        "trace format version {0} is not supported (this build reads versions {OLDEST_VERSION} to {FORMAT_VERSION})"
    )]
    Version(u32),
    /// Bytes that are not what the recorder wrote: a checksum that does not hold, a missing
    /// sync marker, an impossible header or record.
    #[error("corrupt chunk at byte {offset}: {what}")]
    Corrupt {
        /// File offset of the damaged chunk.
        offset: u64,
        /// What is wrong, in a few words.
        what: String,
    },
    /// A metadata chunk whose checksum held but whose JSON does not decode.
    #[error("bad metadata in chunk at byte {offset}: {}", one_line(.source))]
    Meta {
        /// File offset of the chunk.
        offset: u64,
        /// What the JSON decoder said.
        source: serde_json::Error,
    },
}

/// The JSON decoder's message with control characters escaped: it quotes the input (an
/// unknown variant's name, say), which a damaged file can fill with newlines.
fn one_line(e: &serde_json::Error) -> String {
    e.to_string()
        .chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// A result whose error is a trace file [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
