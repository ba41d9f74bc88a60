//! The ring-buffer drain: every CPU's records, decoded, encoded densely per CPU and
//! appended to the trace file as chunks.

use std::time::{Duration, Instant};

use anyhow::Result;
use trace_file::{ChunkKind, Event, EventChunkEncoder};

use crate::{files::TraceWriter, kernel::Kernel, stacks::Stacks};

/// `Header::kind` of a [`tracer_abi::StackRaw`], as its bytes are in a ring record.
const STACK_RAW: [u8; 2] = tracer_abi::kind::STACK_RAW.to_ne_bytes();

/// Flush a CPU's encoded records once they reach this size...
const CHUNK_BYTES: usize = 256 << 10;
/// ...or this age, so a killed recorder loses at most this much.
const CHUNK_AGE: Duration = Duration::from_millis(500);

/// Turns ring-buffer records into trace chunks.
pub struct Drain {
    /// The file being written.
    pub w: TraceWriter,
    encoders: Vec<EventChunkEncoder>,
    flushed_at: Vec<Instant>,
    /// Records per kind, by `Event::kind_index`.
    pub counts: [u64; Event::KINDS],
    /// Records taken from the rings.
    pub total: u64,
    /// Per CPU, ring records that did not decode (a program newer than this recorder):
    /// lost, and counted as such.
    pub undecodable: Vec<u64>,
    /// With `--stacks`, the stacks interned so far.
    pub stacks: Option<Stacks>,
    /// The end of the recording, once it has ended: records after it (made while the
    /// probes were being detached, or dropped then by the kernel) are left out, and
    /// counted here.
    pub until: Option<u64>,
    pub after_end: u64,
}

impl Drain {
    /// A drain of `cpus` rings into `w`.
    pub fn new(w: TraceWriter, cpus: u32) -> Drain {
        Drain {
            w,
            encoders: (0..cpus).map(EventChunkEncoder::new).collect(),
            flushed_at: vec![Instant::now(); cpus as usize],
            counts: [0; Event::KINDS],
            total: 0,
            undecodable: vec![0; cpus as usize],
            stacks: None,
            until: None,
            after_end: 0,
        }
    }

    /// Reads every ring buffer empty, showing each record to `see`; returns how many it
    /// took.
    pub fn drain(
        &mut self,
        kernel: &mut Kernel,
        mut see: impl FnMut(u64, u32, &Event),
    ) -> Result<u64> {
        let mut n = 0;
        for cpu in 0..kernel.rings.len() {
            while let Some(item) = kernel.rings[cpu].next() {
                let raw_stack = item.get(12..14) == Some(&STACK_RAW);
                let decoded = match &mut self.stacks {
                    Some(s) if raw_stack => s.take(&item),
                    _ => Event::from_ring(&item),
                };
                let Some((ts, tid, event)) = decoded else {
                    self.undecodable[cpu] += 1;
                    continue;
                };
                if self.until.is_some_and(|end| ts > end) {
                    self.after_end += 1;
                    continue;
                }
                self.encoders[cpu].push(ts, tid, &event);
                self.counts[event.kind_index()] += 1;
                if let (Event::Exec { .. }, Some(s)) = (&event, &mut self.stacks) {
                    s.forget(tid);
                }
                see(ts, tid, &event);
                n += 1;
                // Within the ring, not after it: a full ring (8 MiB) encodes to chunks of
                // megabytes, all of it lost to a kill or a full disk that cuts it.
                if self.encoders[cpu].encoded_bytes() >= CHUNK_BYTES {
                    self.flush(cpu)?;
                }
            }
        }
        self.total += n;
        Ok(n)
    }

    fn flush(&mut self, cpu: usize) -> Result<()> {
        self.flushed_at[cpu] = Instant::now();
        if self.encoders[cpu].is_empty() {
            return Ok(());
        }
        // The stacks these records name are defined before them.
        if let Some(table) = self.stacks.as_mut().and_then(Stacks::take_table) {
            self.w.meta(ChunkKind::Stacks, &table)?;
        }
        let payload = self.encoders[cpu].finish();
        self.w.chunk(ChunkKind::Events, &payload)?;
        Ok(())
    }

    /// Writes the records of CPUs whose oldest unwritten record is old enough.
    pub fn flush_aged(&mut self) -> Result<()> {
        let mut any = false;
        for cpu in 0..self.encoders.len() {
            if !self.encoders[cpu].is_empty() && self.flushed_at[cpu].elapsed() >= CHUNK_AGE {
                self.flush(cpu)?;
                any = true;
            }
        }
        if any {
            // Complete chunks reach the file, so a killed recorder loses at most CHUNK_AGE.
            self.w.flush()?;
        }
        Ok(())
    }

    /// Writes every record taken so far.
    pub fn flush_all(&mut self) -> Result<()> {
        for cpu in 0..self.encoders.len() {
            self.flush(cpu)?;
        }
        self.w.flush()?;
        Ok(())
    }

    /// Nonzero record counts by kind name.
    pub fn kinds(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (Event::KIND_NAMES[i], n))
    }
}
