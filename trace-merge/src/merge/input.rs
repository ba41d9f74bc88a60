//! One input of the merge: a trace file opened, its metadata ([`Source`]) read up to its
//! first events, and the damage a salvaging read stepped over.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use trace_file::{
    Chunk, ChunkKind, LostCounts, Probe, ProcessInfo, ReadOptions, Reader, ThreadInfo, TraceHeader,
    Trailer,
};

use crate::error::{Error, Result};

/// A damaged region of an input stepped over by a salvaging read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// File offset where it starts.
    pub offset: u64,
    /// Its length in bytes.
    pub bytes: u64,
    /// Chunks it held, as far as the reader can tell (at least 1).
    pub chunks: u64,
    /// The chunk's kind, when the region is one chunk whose header checked.
    pub kind: Option<ChunkKind>,
    /// For an Events chunk: its CPU (global index) and the records' time range as far as
    /// the file tells, in merge time: from its first record (as the damaged payload's prefix
    /// says) to the first record of the next chunk of that CPU.
    pub cpu: Option<u32>,
    /// Start of the missing records, merge time.
    pub from_ns: Option<u64>,
    /// End of the missing records, merge time (the next chunk of the CPU begins there).
    pub until_ns: Option<u64>,
}

impl std::fmt::Display for Damage {
    /// `4096 bytes at byte 81920 (Events of CPU 1, records from 1.234567890 s to 1.3 s)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes at byte {}", self.bytes, self.offset)?;
        let s = |ns: u64| format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000);
        match (self.kind, self.cpu) {
            (Some(ChunkKind::Events), Some(cpu)) => {
                write!(f, " (Events of CPU {cpu}")?;
                match (self.from_ns, self.until_ns) {
                    (Some(a), Some(b)) => write!(f, ", records from {} to {}", s(a), s(b))?,
                    (Some(a), None) => write!(f, ", records from {} on", s(a))?,
                    _ => {}
                }
                write!(f, ")")
            }
            (Some(kind), _) => write!(f, " (a {kind:?} chunk)"),
            (None, _) => write!(f, " ({} chunks or more)", self.chunks),
        }
    }
}

/// One input trace file: its metadata, as read so far, and where it sits in the merge.
#[derive(Clone, Debug)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// Its header chunk.
    pub header: TraceHeader,
    /// Traced processes (Process chunks).
    pub processes: Vec<ProcessInfo>,
    /// Threads the recorder saw when it started (Threads chunks).
    pub threads: Vec<ThreadInfo>,
    /// The probe table: what `FuncEntry`/`FuncExit` ids stand for.
    pub probes: Vec<Probe>,
    /// Records the kernel could not store, per CPU (the last cumulative counts read).
    pub lost_per_cpu: Vec<u64>,
    /// Threads the kernel filter had no room for (last count read).
    pub threads_not_traced: u64,
    /// Program runs the kernel skipped: events never produced (last count read).
    pub skipped: u64,
    /// Stacks not taken, the ring filling up (blocking stacks past a quarter of it, samples past half) (last count read).
    pub stacks_shed: u64,
    /// The trailer, when the recorder stopped cleanly.
    pub trailer: Option<Trailer>,
    /// Byte offset of a torn last chunk, when the file ends inside one.
    pub truncated_at: Option<u64>,
    /// Regions stepped over by a salvaging read ([`MergeOptions::salvage`](super::MergeOptions::salvage)), in file order.
    pub damage: Vec<Damage>,
    /// Index of this file's host in [`Merger::nodes`](super::Merger::nodes).
    pub node: u32,
    /// The source that stands for this file's threads and processes: the earliest file
    /// given of the same run (files a rotating recorder wrote go on from one another),
    /// else this file itself.
    pub identity: u32,
    /// Global (0-based) index of this file's CPU 0: CPUs of all hosts are numbered in a row.
    pub cpu_base: u32,
    /// When recording started, in merge time (ns since the earliest start of all inputs).
    pub start: u64,
    /// Its stacks (`--stacks`), as defined by the chunks read so far: a record naming a
    /// stack comes after its definition.
    pub stacks: crate::stacks::StackStore,
    /// Added to a CLOCK_MONOTONIC timestamp of this file to get merge time.
    pub(super) offset: i64,
}

impl Source {
    /// Merge time of a CLOCK_MONOTONIC timestamp of this file (0 for times before the
    /// earliest start).
    pub fn to_merge_time(&self, ts: u64) -> u64 {
        ts.saturating_add_signed(self.offset)
    }

    /// What probe id `id` of this file stands for.
    pub fn probe(&self, id: u32) -> Option<&Probe> {
        self.probes.iter().find(|p| p.id == id)
    }

    /// Records lost by the kernel, as far as the file tells: the larger of the last
    /// `Lost` counts (dropped and skipped) and the trailer's total. (Counts a kernel could
    /// reach add up in u64; damaged ones saturate.)
    pub fn lost(&self) -> u64 {
        let sum = (self.lost_per_cpu.iter()).fold(self.skipped, |a, &n| a.saturating_add(n));
        sum.max(self.trailer.as_ref().map_or(0, |t| t.lost))
    }
}

/// A file's reader and where the merge is in it.
pub(super) struct Input {
    pub(super) reader: Reader<BufReader<File>>,
    /// An `Events` chunk read while looking for the metadata, not decoded yet.
    pub(super) stashed: Option<Chunk>,
    pub(super) eof: bool,
    /// Latest time read from this file.
    pub(super) max_read: u64,
    /// Cursors of this file are `cursor_base..cursor_base + cpus`.
    pub(super) cursor_base: usize,
    /// How many of the reader's skipped regions are in [`Source::damage`] already.
    pub(super) skips_seen: usize,
}

/// A trace-file error, with the file it came from.
pub(super) fn trace_err(path: &Path, source: trace_file::Error) -> Error {
    Error::Trace {
        path: path.to_path_buf(),
        source,
    }
}

/// Moves the regions the reader stepped over since the last call into `source.damage`.
pub(super) fn take_skips(source: &mut Source, input: &mut Input) {
    let skipped = input.reader.skipped();
    for k in &skipped[input.skips_seen.min(skipped.len())..] {
        let cpu = k.cpu.filter(|&c| c < source.header.cpus);
        source.damage.push(Damage {
            offset: k.offset,
            bytes: k.bytes,
            chunks: k.chunks,
            kind: k.kind,
            cpu: cpu.map(|c| c + source.cpu_base),
            from_ns: k.first_ts.map(|t| source.to_merge_time(t)),
            until_ns: None,
        });
    }
    input.skips_seen = skipped.len();
    source.damage.sort_by_key(|d| d.offset);
}

/// Opens one input and reads its header and the metadata before its first events.
pub(super) fn open_one(path: &Path, salvage: bool) -> Result<(Source, Input)> {
    let file = File::open(path).map_err(|e| trace_err(path, e.into()))?;
    let opts = ReadOptions { salvage };
    let mut reader = Reader::with_options(BufReader::with_capacity(1 << 20, file), opts)
        .map_err(|e| trace_err(path, e))?;
    let first = reader.next_chunk().map_err(|e| trace_err(path, e))?;
    let header: TraceHeader = match first {
        Some(c) if c.kind == ChunkKind::Header => c.meta().map_err(|e| trace_err(path, e))?,
        Some(c) => {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                what: format!("first chunk is {:?}, not the header", c.kind),
            })
        }
        None => {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                what: "no header chunk (empty or torn file)".into(),
            })
        }
    };
    if header.cpus == 0 || header.cpus > MAX_CPUS {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            what: format!("header says {} CPUs", header.cpus),
        });
    }
    let mut source = Source {
        path: path.to_path_buf(),
        lost_per_cpu: vec![0; header.cpus as usize],
        header,
        processes: Vec::new(),
        threads: Vec::new(),
        probes: Vec::new(),
        threads_not_traced: 0,
        skipped: 0,
        stacks_shed: 0,
        trailer: None,
        truncated_at: None,
        damage: Vec::new(),
        node: 0,
        identity: 0,
        cpu_base: 0,
        start: 0,
        stacks: Default::default(),
        offset: 0,
    };
    // Read the metadata that precedes the events, so the thread table and the probe table
    // are known before the first record is delivered.
    let mut stashed = None;
    let mut eof = false;
    loop {
        match reader.next_chunk().map_err(|e| trace_err(path, e))? {
            None => {
                eof = true;
                source.truncated_at = reader.truncated_at();
                break;
            }
            Some(c) if c.kind == ChunkKind::Events => {
                stashed = Some(c);
                break;
            }
            Some(c) => absorb_meta(&mut source, &c, salvage)?,
        }
    }
    Ok((
        source,
        Input {
            reader,
            stashed,
            eof,
            max_read: 0,
            cursor_base: 0,
            skips_seen: 0,
        },
    ))
}

/// The largest CPU count a header may claim (the recorder's own limit, `tracer_abi::MAX_CPUS`).
const MAX_CPUS: u32 = 4096;

/// Takes a metadata chunk into `s`; with `salvage`, one that does not decode is listed as
/// damage instead.
pub(super) fn absorb_meta(s: &mut Source, c: &Chunk, salvage: bool) -> Result<()> {
    match read_meta(s, c) {
        // Metadata that checked but does not decode: with salvage, the chunk is skipped.
        Err(Error::Trace { .. }) if salvage => {
            s.damage.push(Damage {
                offset: c.offset,
                bytes: c.payload.len() as u64,
                chunks: 1,
                kind: Some(c.kind),
                cpu: None,
                from_ns: None,
                until_ns: None,
            });
            Ok(())
        }
        other => other,
    }
}

/// Takes a metadata chunk into `s`.
fn read_meta(s: &mut Source, c: &Chunk) -> Result<()> {
    let bad = |e| trace_err(&s.path, e);
    match c.kind {
        ChunkKind::Process => s.processes.push(c.meta().map_err(bad)?),
        ChunkKind::Threads => {
            let t: Vec<ThreadInfo> = c.meta().map_err(bad)?;
            s.threads.extend(t);
        }
        ChunkKind::Probes => {
            let p: Vec<Probe> = c.meta().map_err(bad)?;
            s.probes.extend(p);
        }
        ChunkKind::Lost => {
            let l: LostCounts = c.meta().map_err(bad)?;
            // Counts are cumulative: keep the largest seen per CPU.
            for (i, &n) in l.per_cpu.iter().enumerate() {
                if let Some(slot) = s.lost_per_cpu.get_mut(i) {
                    *slot = (*slot).max(n);
                }
            }
            s.threads_not_traced = s.threads_not_traced.max(l.threads_not_traced);
            s.skipped = s.skipped.max(l.skipped);
            s.stacks_shed = s.stacks_shed.max(l.stacks_shed);
        }
        ChunkKind::Trailer => s.trailer = Some(c.meta().map_err(bad)?),
        ChunkKind::Stacks => s.stacks.absorb(c.meta().map_err(bad)?),
        ChunkKind::Header => {
            return Err(Error::Invalid {
                path: s.path.clone(),
                what: format!("second header chunk at byte {}", c.offset),
            })
        }
        // Unknown kinds are skipped: newer recorders may add chunks older readers ignore.
        // Counting-mode windows are read by the summaries, not merged.
        ChunkKind::Events | ChunkKind::Window | ChunkKind::Unknown(_) => {}
    }
    Ok(())
}
