//! Trace files read back whole, for checks against ground truth.

use std::{collections::HashMap, path::Path};

use trace_file::{ChunkKind, EventChunkDecoder, ProcessInfo, Reader, Record, ThreadInfo, Trailer};

/// Everything in a trace file, records sorted by time.
pub struct Trace {
    /// The threads at start.
    pub threads: Vec<ThreadInfo>,
    /// Every Process chunk, those written while recording too.
    pub processes: Vec<ProcessInfo>,
    /// Every record, by time.
    pub records: Vec<Record>,
    /// The trailer, when the recorder stopped cleanly.
    pub trailer: Option<Trailer>,
    /// Events lost, as the trailer says.
    pub lost: u64,
}

/// Reads `path` whole; panics on anything wrong (tests only).
pub fn read_trace(path: &Path) -> Trace {
    let mut reader = Reader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut t = Trace {
        threads: vec![],
        processes: vec![],
        records: vec![],
        trailer: None,
        lost: 0,
    };
    while let Some(c) = reader.next_chunk().unwrap() {
        match c.kind {
            ChunkKind::Threads => t.threads = c.meta().unwrap(),
            ChunkKind::Process => t.processes.push(c.meta().unwrap()),
            ChunkKind::Events => {
                for r in EventChunkDecoder::new(&c.payload, c.offset).unwrap() {
                    t.records.push(r.unwrap());
                }
            }
            ChunkKind::Trailer => {
                let tr: Trailer = c.meta().unwrap();
                t.lost = tr.lost;
                t.trailer = Some(tr);
            }
            _ => {}
        }
    }
    t.records.sort_by_key(|r| r.ts);
    t
}

/// Records of `t` that satisfy `pred`.
pub fn count(t: &Trace, pred: impl Fn(&Record) -> bool) -> u64 {
    t.records.iter().filter(|r| pred(r)).count() as u64
}

/// The probe table of `path`: name -> id.
pub fn probe_ids(path: &Path) -> HashMap<String, u32> {
    let mut reader = Reader::new(std::fs::File::open(path).unwrap()).unwrap();
    while let Some(c) = reader.next_chunk().unwrap() {
        if c.kind == ChunkKind::Probes {
            let p: Vec<trace_file::Probe> = c.meta().unwrap();
            return p.into_iter().map(|p| (p.name, p.id)).collect();
        }
    }
    panic!("no probe table");
}
