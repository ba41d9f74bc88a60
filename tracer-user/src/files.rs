//! The files of a recording: each starts with the same preamble, and with `--rotate` the
//! run goes on in a new complete file every so often, the oldest removed beyond `--keep`.

use std::{
    collections::VecDeque,
    fs::File,
    io::BufWriter,
    path::{Path, PathBuf},
    time::{Instant, SystemTime},
};

use anyhow::{anyhow, Context, Result};
use trace_file::{ChunkKind, Event, Probe, ProcessInfo, ThreadInfo, TraceHeader, Trailer, Writer};

use crate::{
    drain::Drain,
    kernel::{Kernel, Losses},
    output,
};

/// The writer of the file being written.
pub type TraceWriter = Writer<BufWriter<File>>;

/// What every file of a run starts with.
#[derive(Clone)]
pub struct Preamble {
    pub header: TraceHeader,
    /// The one launched by the recorder, if any.
    pub launched: Option<u32>,
    pub probes: Vec<Probe>,
}

impl Preamble {
    /// What a file says of the processes `pids` and their threads, as of now.
    pub fn traced(&self, kernel: &mut Kernel, pids: &[u32]) -> (Vec<ProcessInfo>, Vec<ThreadInfo>) {
        let processes = (pids.iter())
            .map(|&pid| kernel.process_info(pid, self.launched == Some(pid)))
            .collect();
        let threads = pids
            .iter()
            .flat_map(|&pid| kernel.thread_infos(pid))
            .collect();
        (processes, threads)
    }

    /// Starts a file: header, processes, their threads as of now, probes.
    pub fn write(
        &self,
        file: File,
        processes: &[ProcessInfo],
        threads: &[ThreadInfo],
    ) -> Result<TraceWriter> {
        let mut w = Writer::new(BufWriter::with_capacity(1 << 20, file))?;
        w.meta(ChunkKind::Header, &self.header)?;
        for p in processes {
            w.meta(ChunkKind::Process, p)?;
        }
        w.meta(ChunkKind::Threads, &threads)?;
        w.meta(ChunkKind::Probes, &self.probes)?;
        w.flush()?;
        Ok(w)
    }
}

/// How a long run is cut into files.
#[derive(Clone, Copy)]
pub struct Rotation {
    pub every: std::time::Duration,
    /// Keep only the newest N files of this run (0: all).
    pub keep: usize,
}

/// The file being written, and with rotation the ones before it. Each file's lost and
/// record counts are its own.
pub struct Files {
    /// The file being written.
    pub current: PathBuf,
    /// Earlier files of this run still on disk, oldest first.
    older: VecDeque<PathBuf>,
    started: Instant,
    base_losses: Losses,
    base_counts: [u64; Event::KINDS],
    /// Files written so far.
    pub written: u64,
    /// Bytes of the files before the current one.
    pub bytes_before: u64,
}

impl Files {
    /// The run's first file, `first`, just started.
    pub fn new(first: PathBuf) -> Files {
        Files {
            current: first,
            older: VecDeque::new(),
            started: Instant::now(),
            base_losses: Losses::default(),
            base_counts: [0; Event::KINDS],
            written: 1,
            bytes_before: 0,
        }
    }

    /// True when the current file is older than `every`.
    pub fn due(&self, every: std::time::Duration) -> bool {
        self.started.elapsed() >= every
    }

    /// What was lost since the current file started.
    pub fn losses_in_file(&self, losses: &Losses) -> Losses {
        losses.since(&self.base_losses)
    }

    /// Ends the current file at `end_ns`: what it lost, then the trailer; on disk before
    /// returning.
    pub fn finish(&self, d: &mut Drain, losses: &Losses, reason: &str, end_ns: u64) -> Result<()> {
        let in_file = losses.since(&self.base_losses);
        d.w.meta(ChunkKind::Lost, &in_file.counts(end_ns))?;
        let records = (d.counts.iter().zip(self.base_counts).enumerate())
            .filter(|(_, (&n, base))| n > *base)
            .map(|(i, (&n, base))| (Event::KIND_NAMES[i].to_string(), n - base))
            .collect();
        d.w.meta(
            ChunkKind::Trailer,
            &Trailer {
                end_ns,
                reason: reason.into(),
                records,
                lost: in_file.total(),
            },
        )?;
        d.w.flush()?;
        d.w.get_ref().get_ref().sync_all()?;
        Ok(())
    }

    /// Ends the current file and goes on in a new one named for now under `base`, which
    /// starts at `start_ns` with the processes `pids` and their threads alive then; the
    /// oldest beyond `rot.keep` are removed.
    #[allow(clippy::too_many_arguments)]
    pub fn rotate(
        &mut self,
        d: &mut Drain,
        losses: Losses,
        preamble: &Preamble,
        traced: &(Vec<ProcessInfo>, Vec<ThreadInfo>),
        start_ns: u64,
        base: &Path,
        force: bool,
        keep: usize,
    ) -> Result<()> {
        d.flush_all()?;
        self.finish(d, &losses, "rotated", crate::clock::monotonic_ns())?;
        let path = segment_path(base, SystemTime::now());
        let file = output::create_exclusive(&path, force)?;
        let mut next = preamble.clone();
        next.header.start_ns = start_ns;
        next.header.part = self.written as u32 + 1;
        next.header.monotonic_to_realtime_ns = crate::clock::monotonic_to_realtime();
        self.bytes_before += d.w.bytes_written();
        // The new file is the current one from here: a failure to write its preamble is
        // said of it (`explain`).
        let previous = std::mem::replace(&mut self.current, path);
        if keep > 0 {
            // Only to remove it later: with every file kept, remembering them all would
            // grow by one path per rotation for as long as the run lasts.
            self.older.push_back(previous);
        }
        d.w = next.write(file, &traced.0, &traced.1)?;
        if let Some(s) = &mut d.stacks {
            s.restart();
        }
        self.started = Instant::now();
        self.base_losses = losses;
        self.base_counts = d.counts;
        self.written += 1;
        while keep > 0 && self.older.len() + 1 > keep {
            let Some(old) = self.older.pop_front() else {
                break;
            };
            std::fs::remove_file(&old)
                .with_context(|| format!("cannot remove {} (--keep)", old.display()))?;
        }
        Ok(())
    }
}

impl Files {
    /// A failed write said in one line when the disk is full (or the quota reached): which
    /// file stopped where. Its complete chunks read back (its end is torn at most: each
    /// chunk goes out in one write, and nothing is written after the failure); what was
    /// not written is lost, which the line says. Other errors are returned as they are.
    pub fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        let full = (e.chain().filter_map(|c| c.downcast_ref::<std::io::Error>()))
            .any(|io| matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)));
        if !full {
            return e;
        }
        let path = self.current.display();
        match std::fs::metadata(&self.current) {
            Ok(m) => anyhow!(
                "the disk is full: recording stopped, {path} holds {} bytes ({}); what came after was not recorded",
                m.len(),
                trace_summary::units::human_bytes(m.len())
            ),
            Err(_) => anyhow!("the disk is full: recording stopped while writing {path}"),
        }
    }
}

/// `DIR/NAME-20261123T195100Z.EXT` for `DIR/NAME.EXT`: the file of a rotated run that
/// starts at `at` (UTC), so names sort by time.
pub fn segment_path(base: &Path, at: SystemTime) -> PathBuf {
    let stamp = jiff::Timestamp::try_from(at)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y%m%dT%H%M%SZ");
    let stem = base
        .file_stem()
        .map_or_else(Default::default, |s| s.to_string_lossy());
    let name = match base.extension() {
        Some(ext) => format!("{stem}-{stamp}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{stamp}"),
    };
    base.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_sort_by_time() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_763_900_000);
        assert_eq!(
            segment_path(Path::new("/d/run.trace"), at),
            Path::new("/d/run-20251123T121320Z.trace")
        );
        assert_eq!(
            segment_path(Path::new("fr"), at),
            Path::new("fr-20251123T121320Z")
        );
    }
}
