//! The trace file written by `tracer record` and read by everything after it.
//!
//! A trace is a magic number followed by a stream of chunks. Each chunk carries its kind,
//! its length and a CRC-32 of both plus its payload, so a recorder killed at any instant
//! leaves a file whose complete chunks read back and whose torn tail is detected, never
//! misread. Metadata chunks hold JSON; event chunks hold the records of one CPU, densely
//! encoded (see [`record`]). The layout is documented in `docs/trace-format.md`.

mod container;
pub mod meta;
pub mod record;

pub use container::{Chunk, ChunkKind, Reader, Writer, FORMAT_VERSION, MAGIC};
pub use meta::{
    FuncWindow, LostCounts, Probe, ProbeKind, ProcessInfo, StatWindow, SysWindow, ThreadInfo,
    ThreadWindow, TraceHeader, Trailer,
};
pub use record::{Event, EventChunkDecoder, EventChunkEncoder, Record};

/// Everything that can go wrong reading or writing a trace file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a tracer trace file (bad magic number)")]
    BadMagic,
    #[error(
        "trace format version {0} is not supported (this build reads version {FORMAT_VERSION})"
    )]
    Version(u32),
    #[error("corrupt chunk at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    #[error("bad metadata in chunk at byte {offset}: {source}")]
    Meta {
        offset: u64,
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
