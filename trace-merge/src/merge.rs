//! The streaming k-way merge of per-CPU record streams, from one or several trace files.
//!
//! A trace file holds `Events` chunks of many CPUs, interleaved in whatever order the
//! recorder drained them. Each CPU's records are in kernel order, so the merge keeps one
//! cursor per (file, CPU) and repeatedly emits the cursor with the smallest head: a k-way
//! merge whose heap has one entry per CPU, not per record.
//!
//! The difficulty is knowing when the smallest head is *final*: the next chunk of another
//! CPU, further down the file, may hold earlier records. A head is emitted once it is at
//! or before the file's *safe time*, the larger of
//! - the smallest per-CPU frontier (the latest time read for each CPU) minus a jitter
//!   allowance: no CPU's next chunk can start much before where its last one ended;
//! - the latest time read from the file minus the reorder window: a CPU that has been
//!   silent for longer than the window is assumed to have nothing earlier to say.
//!
//! So memory holds at most the chunks read ahead within the window, whatever the length
//! of the trace. A record that arrives after later ones were already emitted (a CPU whose
//! chunk came later than the window allowed) is not dropped: it is delivered at the
//! current merge time with [`Merged::late`] set, and counted in [`MergeStats::late`].
//!
//! Times are converted on the way out to nanoseconds since the earliest start of all
//! inputs. Files of one host share CLOCK_MONOTONIC; files of different hosts are aligned
//! through each header's CLOCK_MONOTONIC -> CLOCK_REALTIME offset.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;

use trace_file::{Chunk, ChunkKind, Event, EventChunkDecoder};

use crate::error::{Error, Result};

mod input;

use input::{absorb_meta, open_one, take_skips, trace_err, Input};
pub use input::{Damage, Source};

/// Tuning of the merge.
#[derive(Clone, Debug)]
pub struct MergeOptions {
    /// How far (ns of trace time) a CPU's records may lag behind the latest record read
    /// from the same file before the merge stops waiting for them. Memory grows with the
    /// number of records inside this window, never with the trace length.
    pub window_ns: u64,
    /// How far back (ns) a CPU's next chunk may start before the end of its previous one
    /// (nested eBPF programs stamp times out of order by a few microseconds).
    pub jitter_ns: u64,
    /// Read past damage: chunks that do not check are stepped over and listed in
    /// [`Source::damage`] instead of ending the read with an error.
    pub salvage: bool,
}

impl Default for MergeOptions {
    fn default() -> Self {
        MergeOptions {
            window_ns: 1_000_000_000,
            jitter_ns: 1_000_000,
            salvage: false,
        }
    }
}

/// A host: a Paraver node.
#[derive(Clone, Debug)]
pub struct Node {
    /// Its name, from the files' headers.
    pub hostname: String,
    /// Its CPUs: the most any of its files recorded.
    pub cpus: u32,
    /// Global (0-based) index of the host's CPU 0.
    pub cpu_base: u32,
}

/// One record of the merged stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Merged {
    /// Nanoseconds since the earliest start of all inputs; never decreases along the stream.
    pub time: u64,
    /// Index of the input file in [`Merger::sources`].
    pub source: u32,
    /// That file's [`Source::identity`]: whose threads the record's tid names.
    pub ident: u32,
    /// Global 0-based CPU index ([`Source::cpu_base`] + the recorded CPU).
    pub cpu: u32,
    /// The thread the event belongs to (see [`Event`]).
    pub tid: u32,
    /// What happened.
    pub event: Event,
    /// The record came after later records had been emitted; `time` was raised to the
    /// merge time of that moment.
    pub late: bool,
}

/// Counts of the merge, final once the stream has ended.
#[derive(Clone, Debug, Default)]
pub struct MergeStats {
    /// Records delivered.
    pub records: u64,
    /// Event chunks read.
    pub chunks: u64,
    /// Records that arrived too late for the reorder window (delivered, flagged late).
    pub late: u64,
    /// The largest lateness seen, ns.
    pub max_lateness_ns: u64,
    /// The most records held in memory at once.
    pub peak_buffered: usize,
}

#[derive(Clone, Copy)]
struct Rec {
    time: u64,
    tid: u32,
    event: Event,
}

struct Cursor {
    /// Unread records are `buf[pos..]`, sorted by time.
    buf: Vec<Rec>,
    pos: usize,
    /// Latest time read for this CPU.
    frontier: Option<u64>,
    source: u32,
    ident: u32,
    cpu: u32,
}

/// The merged stream of records of one or several trace files, in time order.
pub struct Merger {
    sources: Vec<Source>,
    nodes: Vec<Node>,
    inputs: Vec<Input>,
    cursors: Vec<Cursor>,
    /// Cursors with unread records, keyed by their head's time (cursor index breaks ties
    /// so the order is deterministic), packed by [`heap_key`]: one comparison of a u128
    /// instead of a lexicographic one of a tuple, which branches.
    heap: BinaryHeap<Reverse<u128>>,
    /// Heads at or before this time can be emitted.
    safe: u64,
    last: u64,
    buffered: usize,
    all_eof: bool,
    opts: MergeOptions,
    stats: MergeStats,
}

impl Merger {
    /// Opens the inputs and reads their metadata (everything before the first event
    /// chunk). Fails on an unreadable or corrupt file, or one that does not start with a
    /// header chunk.
    pub fn open(paths: &[PathBuf], opts: MergeOptions) -> Result<Merger> {
        if paths.is_empty() {
            return Err(Error::NoInput);
        }
        let mut sources = Vec::with_capacity(paths.len());
        let mut inputs = Vec::with_capacity(paths.len());
        for path in paths {
            let (source, input) = open_one(path, opts.salvage)?;
            sources.push(source);
            inputs.push(input);
        }

        let (nodes, host_m2r) = hosts(&mut sources)?;
        link_runs(&mut sources);
        align_clocks(&mut sources, &nodes, &host_m2r)?;
        // Regions stepped over while reading the metadata, now that times can be placed.
        for (s, inp) in sources.iter_mut().zip(&mut inputs) {
            take_skips(s, inp);
        }
        let cursors = cursors(&sources, &mut inputs);
        let mut m = Merger {
            sources,
            nodes,
            inputs,
            cursors,
            heap: BinaryHeap::new(),
            safe: 0,
            last: 0,
            buffered: 0,
            all_eof: false,
            opts,
            stats: MergeStats::default(),
        };
        for i in 0..m.inputs.len() {
            if let Some(chunk) = m.inputs[i].stashed.take() {
                m.load_events(i, &chunk)?;
            }
        }
        Ok(m)
    }

    /// The input files, in the order given. Metadata chunks found later in a file (late
    /// thread lists, lost counts, the trailer) are added as the merge reads them.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// The hosts, in order of first appearance among the inputs.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Counts so far (final after the end of the stream).
    pub fn stats(&self) -> &MergeStats {
        &self.stats
    }

    /// Time of the last record delivered.
    pub fn now(&self) -> u64 {
        self.last
    }

    /// The end of the trace: the last record, or the latest clean stop of a recorder if
    /// later. Meaningful once the stream has ended.
    pub fn end_time(&self) -> u64 {
        let stops = self
            .sources
            .iter()
            .filter_map(|s| s.trailer.as_ref().map(|t| s.to_merge_time(t.end_ns)));
        stops.fold(self.last, u64::max)
    }

    /// The next record in time order, `None` at the end of all inputs.
    ///
    /// Inlined into the consumer's loop: the common case is a heap top that is already
    /// safe to emit; reading chunks ([`Merger::advance`]) is out of line.
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<Merged>> {
        loop {
            match self.heap.peek() {
                Some(&Reverse(k)) if head_time(k) <= self.safe => {
                    return Ok(Some(self.pop(head_cursor(k))))
                }
                None if self.all_eof => return Ok(None),
                _ => self.advance()?,
            }
        }
    }

    #[inline]
    fn pop(&mut self, c: u32) -> Merged {
        let cur = &mut self.cursors[c as usize];
        let rec = cur.buf[cur.pos];
        cur.pos += 1;
        if cur.pos < cur.buf.len() {
            let next = cur.buf[cur.pos].time;
            // Replace the top in place: one sift-down instead of a pop and a push.
            if let Some(mut top) = self.heap.peek_mut() {
                *top = Reverse(heap_key(next, c));
            }
        } else {
            self.heap.pop();
            cur.buf.clear();
            cur.pos = 0;
        }
        self.buffered -= 1;
        let (source, ident, cpu) = (cur.source, cur.ident, cur.cpu);
        let mut time = rec.time;
        let late = time < self.last;
        if late {
            self.stats.late += 1;
            self.stats.max_lateness_ns = self.stats.max_lateness_ns.max(self.last - time);
            time = self.last;
        }
        self.last = time;
        self.stats.records += 1;
        Merged {
            time,
            source,
            ident,
            cpu,
            tid: rec.tid,
            event: rec.event,
            late,
        }
    }

    /// Makes progress towards emitting the smallest head: raises the safe time, or reads
    /// one more chunk from the file that holds it back, or notes that all files ended.
    #[inline(never)]
    fn advance(&mut self) -> Result<()> {
        let mut safe = u64::MAX;
        let mut holder = None;
        for (i, inp) in self.inputs.iter().enumerate() {
            if inp.eof {
                continue;
            }
            let cpus = self.sources[i].header.cpus as usize;
            let mut frontier = Some(u64::MAX);
            for c in &self.cursors[inp.cursor_base..inp.cursor_base + cpus] {
                frontier = match (frontier, c.frontier) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    _ => None,
                };
            }
            let by_frontier = frontier.map_or(0, |f| f.saturating_sub(self.opts.jitter_ns));
            let by_window = inp.max_read.saturating_sub(self.opts.window_ns);
            let bound = by_frontier.max(by_window);
            if bound < safe {
                safe = bound;
                holder = Some(i);
            }
        }
        self.safe = self.safe.max(safe);
        let head = self.heap.peek().map(|&Reverse(k)| head_time(k));
        if matches!(head, Some(t) if t <= self.safe) {
            return Ok(());
        }
        match holder {
            Some(i) => self.read_chunk(i),
            None => {
                self.all_eof = true;
                self.safe = u64::MAX;
                Ok(())
            }
        }
    }

    fn read_chunk(&mut self, i: usize) -> Result<()> {
        let next = self.inputs[i].reader.next_chunk();
        let chunk = next.map_err(|e| trace_err(&self.sources[i].path, e))?;
        take_skips(&mut self.sources[i], &mut self.inputs[i]);
        match chunk {
            None => {
                self.inputs[i].eof = true;
                self.sources[i].truncated_at = self.inputs[i].reader.truncated_at();
                Ok(())
            }
            Some(c) if c.kind == ChunkKind::Events => self.load_events(i, &c),
            Some(c) => absorb_meta(&mut self.sources[i], &c, self.opts.salvage),
        }
    }

    fn load_events(&mut self, i: usize, chunk: &Chunk) -> Result<()> {
        match self.try_load_events(i, chunk) {
            Err(Error::Trace { .. }) if self.opts.salvage => {
                // The chunk checked but does not decode: a writer's fault, or damage the
                // checksum missed. Its records go with it.
                let cpu = EventChunkDecoder::new(&chunk.payload, chunk.offset)
                    .ok()
                    .map(|d| d.cpu());
                let src = &mut self.sources[i];
                src.damage.push(Damage {
                    offset: chunk.offset,
                    bytes: chunk.payload.len() as u64,
                    chunks: 1,
                    kind: Some(ChunkKind::Events),
                    cpu: cpu
                        .filter(|&c| c < src.header.cpus)
                        .map(|c| c + src.cpu_base),
                    from_ns: None,
                    until_ns: None,
                });
                Ok(())
            }
            other => other,
        }
    }

    fn try_load_events(&mut self, i: usize, chunk: &Chunk) -> Result<()> {
        let src = &self.sources[i];
        let dec = EventChunkDecoder::new(&chunk.payload, chunk.offset)
            .map_err(|e| trace_err(&src.path, e))?;
        let cpu = dec.cpu();
        if cpu >= src.header.cpus {
            return Err(Error::Invalid {
                path: src.path.clone(),
                what: format!(
                    "event chunk at byte {} is for CPU {cpu} but the header says {} CPUs",
                    chunk.offset, src.header.cpus
                ),
            });
        }
        let ci = self.inputs[i].cursor_base + cpu as usize;
        let cur = &mut self.cursors[ci];
        if cur.pos > 0 {
            cur.buf.drain(..cur.pos);
            cur.pos = 0;
        }
        let old_head = cur.buf.first().map(|r| r.time);
        let before = cur.buf.len();
        let mut max = cur.frontier.unwrap_or(0);
        for r in dec {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    cur.buf.truncate(before);
                    return Err(trace_err(&src.path, e));
                }
            };
            let time = src.to_merge_time(r.ts);
            max = max.max(time);
            cur.buf.push(Rec {
                time,
                tid: r.tid,
                event: r.event,
            });
        }
        let added = cur.buf.len() - before;
        if added == 0 {
            return Ok(());
        }
        // A damaged Events chunk of this CPU before this one ends where this one begins.
        let global_cpu = src.cpu_base + cpu;
        let first = cur.buf[before].time;
        for d in self.sources[i].damage.iter_mut().rev() {
            if d.cpu == Some(global_cpu) && d.until_ns.is_none() && d.offset < chunk.offset {
                d.until_ns = Some(first);
            }
        }
        cur.frontier = Some(max);
        // Kernel order is time order except for small steps back; a stable sort keeps
        // kernel order among equal times. Checking first keeps the common case linear.
        let from = before.saturating_sub(1);
        if !cur.buf[from..].windows(2).all(|w| w[0].time <= w[1].time) {
            cur.buf.sort_by_key(|r| r.time);
        }
        let new_head = cur.buf[0].time;
        let inp = &mut self.inputs[i];
        inp.max_read = inp.max_read.max(max);
        self.buffered += added;
        self.stats.peak_buffered = self.stats.peak_buffered.max(self.buffered);
        self.stats.chunks += 1;
        match old_head {
            None => self.heap.push(Reverse(heap_key(new_head, ci as u32))),
            Some(old) if new_head < old => {
                // Rare: the new chunk starts before this CPU's pending head. Re-key it.
                self.heap
                    .retain(|&Reverse(k)| head_cursor(k) as usize != ci);
                self.heap.push(Reverse(heap_key(new_head, ci as u32)));
            }
            Some(_) => {}
        }
        Ok(())
    }
}

/// Hosts: files with the same hostname share a node, its CPUs and its clock. Returns the
/// nodes, their CPUs numbered in a row, and each one's CLOCK_MONOTONIC -> CLOCK_REALTIME
/// offset (its first file's).
fn hosts(sources: &mut [Source]) -> Result<(Vec<Node>, Vec<i64>)> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut host_m2r: Vec<i64> = Vec::new();
    for s in sources.iter_mut() {
        let found = nodes.iter().position(|n| n.hostname == s.header.hostname);
        let node = match found {
            Some(i) => {
                nodes[i].cpus = nodes[i].cpus.max(s.header.cpus);
                i
            }
            None => {
                nodes.push(Node {
                    hostname: s.header.hostname.clone(),
                    cpus: s.header.cpus,
                    cpu_base: 0,
                });
                host_m2r.push(s.header.monotonic_to_realtime_ns);
                nodes.len() - 1
            }
        };
        s.node = node as u32;
    }
    let mut base = 0u32;
    for n in &mut nodes {
        n.cpu_base = base;
        base = base
            .checked_add(n.cpus)
            .ok_or_else(|| Error::Limit("too many CPUs".into()))?;
    }
    Ok((nodes, host_m2r))
}

/// Files of one run (same host and run id) are one recording: the earliest part given
/// stands for them all ([`Source::identity`]).
fn link_runs(sources: &mut [Source]) {
    for i in 0..sources.len() {
        let same_run = |j: &usize| {
            let (a, b) = (&sources[i].header, &sources[*j].header);
            !a.run.is_empty() && a.run == b.run && a.hostname == b.hostname
        };
        let first = (0..sources.len())
            .filter(same_run)
            .min_by_key(|&j| (sources[j].header.part, j))
            .unwrap_or(i);
        sources[i].identity = first as u32;
    }
}

/// Places each file in merge time, whose 0 is the earliest start on the realtime clock of
/// each host, and its CPUs among all hosts'.
fn align_clocks(sources: &mut [Source], nodes: &[Node], host_m2r: &[i64]) -> Result<()> {
    let real_start = |s: &Source| s.header.start_ns as i128 + host_m2r[s.node as usize] as i128;
    let zero = sources.iter().map(real_start).min().unwrap_or(0);
    for s in sources.iter_mut() {
        s.cpu_base = nodes[s.node as usize].cpu_base;
        let off = host_m2r[s.node as usize] as i128 - zero;
        s.offset = i64::try_from(off).map_err(|_| Error::Invalid {
            path: s.path.clone(),
            what: "clock offset out of range".into(),
        })?;
        s.start = s.to_merge_time(s.header.start_ns);
    }
    Ok(())
}

/// A cursor per CPU of each file, empty; each input told where its cursors start.
fn cursors(sources: &[Source], inputs: &mut [Input]) -> Vec<Cursor> {
    let mut cursors = Vec::new();
    for (i, (s, inp)) in sources.iter().zip(inputs).enumerate() {
        inp.cursor_base = cursors.len();
        for cpu in 0..s.header.cpus {
            cursors.push(Cursor {
                buf: Vec::new(),
                pos: 0,
                frontier: None,
                source: i as u32,
                ident: s.identity,
                cpu: s.cpu_base + cpu,
            });
        }
    }
    cursors
}

/// The merge heap's key of a cursor whose head is at `time`: ordered as `(time, cursor)`.
#[inline(always)]
fn heap_key(time: u64, cursor: u32) -> u128 {
    (time as u128) << 32 | cursor as u128
}

#[inline(always)]
fn head_time(key: u128) -> u64 {
    (key >> 32) as u64
}

#[inline(always)]
fn head_cursor(key: u128) -> u32 {
    key as u32
}
