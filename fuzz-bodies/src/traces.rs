//! Trace files made from fuzz input, well-formed whatever the input, so that the fuzzer
//! spends its time in the merge, the timeline and their consumers rather than in the
//! checksums.
//!
//! The input is read as one or several trace files laid end to end, each from its magic
//! number on, so real recordings are seeds as they are. Each file's chunks are taken as
//! the container lays them out, checksums and sync markers ignored, and written again
//! with [`trace_file::Writer`]: metadata chunks as they are, Events chunks as the records
//! their payload decodes to (up to the first that does not) through
//! [`trace_file::EventChunkEncoder`].

use std::path::PathBuf;

use tempfile::TempDir;
use trace_file::{ChunkKind, EventChunkDecoder, EventChunkEncoder, Writer, MAGIC};
use trace_merge::MergeOptions;

/// Most files taken from one input.
const MAX_FILES: usize = 4;

/// The trace files of one input, in a temporary directory removed on drop.
pub struct Traces {
    /// The files, in input order.
    pub paths: Vec<PathBuf>,
    /// What the run over them is asked.
    pub knobs: Knobs,
    _dir: TempDir,
}

/// What the run over the files is asked, from the version word of the first file: the
/// files are written in the current version whatever it says, and a recording's own
/// version (1 or 2) asks for the defaults.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// The merge's tuning: a reorder window of a microsecond (bit 8), so records come late.
    pub merge: MergeOptions,
    /// The Paraver writer flushes, cuts states and gives up on links early (bit 9), so its
    /// watermark paths run on small inputs.
    pub small_tuning: bool,
    /// Summaries also per window of 10^k ns (bits 12..16: k, 0 for none), when bits 10
    /// and 11 are both set: rendering windows in every format is most of an input's time,
    /// so a quarter of the inputs ask for windows and the rest go to the merge, the
    /// timeline and the accumulation.
    pub summary_window: Option<u64>,
    /// Converters write from here (bits 24..32: in units of 100 us).
    pub from: u64,
    /// Reading stops here (bits 16..24: in ms, 0 for never).
    pub until: u64,
    /// Which view of a summary is rendered (bits 0..4: the kind of row and the format):
    /// one per input, since rendering every view of every input took most of the time.
    pub view: u32,
}

impl Knobs {
    fn new(w: u32) -> Knobs {
        let field = |shift: u32, bits: u32| u64::from((w >> shift) & ((1 << bits) - 1));
        let mut merge = MergeOptions::default();
        if field(8, 1) == 1 {
            merge.window_ns = 1_000;
            merge.jitter_ns = 0;
        }
        let k = if field(10, 2) == 3 {
            field(12, 4) as u32
        } else {
            0
        };
        Knobs {
            merge,
            small_tuning: field(9, 1) == 1,
            summary_window: (k > 0).then(|| 10u64.pow(k)),
            view: field(0, 4) as u32,
            from: field(24, 8) * 100_000,
            until: match field(16, 8) {
                0 => u64::MAX,
                ms => ms * 1_000_000,
            },
        }
    }
}

impl Traces {
    /// Writes the files of `data`; `None` when it holds no file with a chunk.
    pub fn write(data: &[u8]) -> Option<Traces> {
        let (files, knobs) = files(data)?;
        let dir = crate::scratch_dir();
        let paths = (files.iter().enumerate())
            .map(|(i, bytes)| {
                let p = dir.path().join(format!("{i}.trace"));
                std::fs::write(&p, bytes).expect("writing a trace file");
                p
            })
            .collect();
        Some(Traces {
            paths,
            knobs,
            _dir: dir,
        })
    }

    /// The directory the files are in, for outputs.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }
}

/// The trace files of `data` and its knobs; `None` when it holds no file with a chunk.
pub fn files(data: &[u8]) -> Option<(Vec<Vec<u8>>, Knobs)> {
    let mut files = Vec::new();
    let mut knobs = None;
    for part in split(data).take(MAX_FILES) {
        let Some(word) = part.get(8..12) else {
            continue;
        };
        knobs.get_or_insert_with(|| Knobs::new(u32::from_le_bytes(word.try_into().unwrap())));
        if let Some(f) = rewrite(&part[12..]) {
            files.push(f);
        }
    }
    Some((files, knobs?)).filter(|(f, _)| !f.is_empty())
}

/// The parts of `data` that start with the magic number.
fn split(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let starts: Vec<usize> = (data.windows(MAGIC.len()).enumerate())
        .filter_map(|(i, w)| (w == MAGIC).then_some(i))
        .collect();
    let ends: Vec<usize> = starts.iter().skip(1).copied().chain([data.len()]).collect();
    starts.into_iter().zip(ends).map(move |(s, e)| &data[s..e])
}

/// The chunks of one file's body (after its magic and version), written again.
fn rewrite(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut w = Writer::new(Vec::new()).expect("writing to memory");
    let mut any = false;
    while body.len() >= trace_file::CHUNK_HEADER_LEN {
        let word = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().unwrap());
        let (code, len) = (word(4), word(8) as usize);
        let rest = &body[trace_file::CHUNK_HEADER_LEN..];
        let payload = &rest[..len.min(rest.len())];
        body = &rest[payload.len()..];
        let kind = ChunkKind::from_code(code);
        let written = match kind {
            _ if code == 0 => continue,
            ChunkKind::Events => match events(payload) {
                Some(p) => w.chunk(kind, &p),
                None => continue,
            },
            _ => w.chunk(kind, payload),
        };
        written.expect("writing to memory");
        any = true;
    }
    any.then(|| w.into_inner())
}

/// An Events payload's records up to the first that does not decode, encoded again.
fn events(payload: &[u8]) -> Option<Vec<u8>> {
    let d = EventChunkDecoder::new(payload, 0).ok()?;
    let mut enc = EventChunkEncoder::new(d.cpu());
    for r in d.map_while(Result::ok) {
        enc.push(r.ts, r.tid, &r.event);
    }
    Some(enc.finish())
}
