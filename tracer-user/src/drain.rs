//! The ring-buffer drain: every CPU's records, decoded, encoded densely per CPU and
//! appended to the trace file as chunks.

use std::time::{Duration, Instant};

use anyhow::Result;
use trace_file::{ChunkKind, Event, EventChunkEncoder};
use tracer_abi as abi;

use crate::{files::TraceWriter, kernel::Kernel};

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
                let Some((ts, tid, event)) = decode(&item) else {
                    self.undecodable[cpu] += 1;
                    continue;
                };
                self.encoders[cpu].push(ts, tid, &event);
                self.counts[event.kind_index()] += 1;
                see(ts, tid, &event);
                n += 1;
            }
            if self.encoders[cpu].encoded_bytes() >= CHUNK_BYTES {
                self.flush(cpu)?;
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

/// Reads one ring-buffer record. Unknown kinds (a newer program) are skipped.
fn decode(bytes: &[u8]) -> Option<(u64, u32, Event)> {
    fn read<T: Copy>(b: &[u8]) -> Option<T> {
        (b.len() >= size_of::<T>())
            // SAFETY: length checked; the record types are plain integers.
            .then(|| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
    }
    let h: abi::Header = read(bytes)?;
    let comm = |c: [u8; 16]| trace_file::record::Comm(c);
    let event = match h.kind {
        abi::kind::FUNC_ENTRY => {
            let r: abi::FuncEntry = read(bytes)?;
            Event::FuncEntry { func: r.func }
        }
        abi::kind::FUNC_EXIT => {
            let r: abi::FuncExit = read(bytes)?;
            Event::FuncExit {
                func: r.func,
                ret: r.ret,
            }
        }
        abi::kind::SYS_ENTER => {
            let r: abi::SysEnter = read(bytes)?;
            Event::SysEnter {
                nr: r.nr,
                arg0: r.arg0,
                arg2: r.arg2,
            }
        }
        abi::kind::SYS_EXIT => {
            let r: abi::SysExit = read(bytes)?;
            Event::SysExit {
                nr: r.nr,
                ret: r.ret,
            }
        }
        abi::kind::SWITCH => {
            let r: abi::Switch = read(bytes)?;
            Event::Switch {
                next_tid: r.next_tid,
                prev_state: r.prev_state,
            }
        }
        abi::kind::WAKEUP | abi::kind::WAKEUP_NEW => {
            let r: abi::Wakeup = read(bytes)?;
            Event::Wakeup {
                wakee: r.wakee,
                target_cpu: r.target_cpu,
                new: h.kind == abi::kind::WAKEUP_NEW,
            }
        }
        abi::kind::NEW_TASK => {
            let r: abi::NewTask = read(bytes)?;
            Event::NewTask {
                child_tid: r.child_tid,
                child_tgid: r.child_tgid,
                comm: comm(r.comm),
            }
        }
        abi::kind::EXIT => {
            let r: abi::Exit = read(bytes)?;
            Event::Exit {
                tgid: r.tgid,
                group_dead: r.group_dead != 0,
            }
        }
        abi::kind::RENAME => Event::Rename {
            comm: comm(read::<abi::Rename>(bytes)?.comm),
        },
        abi::kind::EXEC => Event::Exec {
            comm: comm(read::<abi::Rename>(bytes)?.comm),
        },
        _ => return None,
    };
    Some((h.ts, h.tid, event))
}
