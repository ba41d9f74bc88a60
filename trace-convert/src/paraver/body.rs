//! The body of the .prv: records sorted up to a watermark, formatted on a second thread.

use std::fs::File;
use std::io::Write;

use trace_merge::timeline::{Item, LinkKind, SpanEnd, ThreadRef, Timeline};

use super::late::header_room;
use super::*;
use crate::fmt::{push_i64, push_u64, Line, Sink};

#[derive(Clone, Copy, Debug)]
pub(super) enum OutKind {
    State {
        end: u64,
        state: u32,
        cpu: u32,
    },
    Event {
        ty: u32,
        value: i64,
        cpu: u32,
    },
    Comm {
        cpu: u32,
        to: ThreadRef,
        rcpu: u32,
        recv: u64,
        size: i64,
        tag: i64,
    },
}

/// One body record waiting to be written.
#[derive(Clone, Copy, Debug)]
pub(super) struct Out {
    pub(super) time: u64,
    /// Paraver's tie order: communications, events, states.
    pub(super) rank: u8,
    pub(super) thread: ThreadRef,
    pub(super) kind: OutKind,
}

impl Out {
    /// Sort key: time, then Paraver's tie rank, then thread. Records equal in all three
    /// keep their arrival order (the sorts are stable), so output is deterministic.
    pub(super) fn key(&self) -> u128 {
        (self.time as u128) << 64 | (self.rank as u128) << 32 | self.thread as u128
    }
}

/// Sorts records on the converting thread and hands ordered batches to a formatting
/// thread: formatting numbers is a large part of a conversion's work
/// (docs/performance.md), and runs in parallel with merging and the state machine.
pub(super) struct BodyWriter {
    /// Events waiting to be written.
    pub(super) ev: Vec<Out>,
    /// States and communications waiting to be written.
    pub(super) other: Vec<Out>,
    /// Records older than what was already written: merged in at the end.
    pub(super) late: Vec<Out>,
    /// Everything before this time has been written.
    pub(super) written_before: u64,
    /// Paraver (application, thread) of each thread, 1-based.
    pub(super) slots: Vec<(u32, u32)>,
    /// Records left in the buffers by the last flush.
    pub(super) held: usize,
    /// How many of `slots` the formatter knows.
    pub(super) slots_sent: usize,
    /// Application of each process, 1-based, 0 = none yet.
    pub(super) appl_of_process: Vec<u32>,
    pub(super) appl_threads: Vec<u32>,
    /// Per source: added to its function ids so several probe tables do not collide.
    pub(super) func_base: Vec<u32>,
    pub(super) to_formatter: Option<std::sync::mpsc::SyncSender<Batch>>,
    /// Batches the formatter is done with, for reuse of their allocations.
    pub(super) returned: std::sync::mpsc::Receiver<Batch>,
    pub(super) formatter: Option<std::thread::JoinHandle<std::io::Result<[u64; 3]>>>,
    /// Sampled stacks' functions and lines, named as they come.
    pub(super) callers: super::callers::Callers,
}

/// Records ready to be written: everything in them is before everything after them.
#[derive(Default)]
pub(super) struct Batch {
    /// Sorted by time.
    pub(super) ev: Vec<Out>,
    /// States and communications, in any order.
    pub(super) other: Vec<Out>,
    /// Slots of threads that appeared since the previous batch.
    pub(super) new_slots: Vec<(u32, u32)>,
}

impl BodyWriter {
    pub(super) fn new(out: File, tl: &Timeline, opts: &Tuning, room: usize) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(2);
        let (back_tx, back_rx) = std::sync::mpsc::channel::<Batch>();
        let formatter = std::thread::spawn(move || {
            let mut f = Formatter {
                out,
                buf: header_room(&[], room),
                line: Box::new(Line::new()),
                slots: Vec::new(),
                counts: [0; 3],
            };
            for mut b in rx {
                f.batch(&mut b)?;
                // The converter may be gone after an error of its own: nothing to do.
                let _ = back_tx.send(b);
            }
            f.out.write_all(&f.buf)?;
            f.out.flush()?;
            Ok(f.counts)
        });
        BodyWriter {
            ev: Vec::with_capacity(opts.flush_every.min(1 << 20) + 1024),
            other: Vec::new(),
            late: Vec::new(),
            written_before: 0,
            slots: Vec::new(),
            slots_sent: 0,
            held: 0,
            appl_of_process: Vec::new(),
            appl_threads: Vec::new(),
            func_base: func_bases(tl),
            to_formatter: Some(tx),
            returned: back_rx,
            formatter: Some(formatter),
            callers: Default::default(),
        }
    }

    /// Waits for the formatter: the body is then complete on disk. Returns the lines
    /// written: communications, events, states.
    pub(super) fn finish(&mut self) -> std::io::Result<[u64; 3]> {
        self.to_formatter = None;
        match self.formatter.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the formatting thread panicked")),
            None => Ok([0; 3]),
        }
    }

    fn push(&mut self, time: u64, rank: u8, thread: ThreadRef, kind: OutKind) {
        let o = Out {
            time,
            rank,
            thread,
            kind,
        };
        if time < self.written_before {
            self.late.push(o);
        } else if rank == 1 {
            self.ev.push(o);
        } else {
            self.other.push(o);
        }
    }

    /// Queues one type/value pair; `cpu` is the global 0-based CPU, `None` when the
    /// thread is not on one.
    fn event(&mut self, thread: ThreadRef, time: u64, cpu: Option<u32>, ty: u32, value: i64) {
        let kind = OutKind::Event {
            ty,
            value,
            cpu: cpu.map_or(0, |c| c + 1),
        };
        self.push(time, 1, thread, kind);
    }

    /// Inlined into the conversion loop: called once per item, the call and the copy
    /// of the item into it were a large share of this function's cost
    /// (docs/performance.md).
    #[inline(always)]
    pub(super) fn item(&mut self, tl: &Timeline, item: Item) -> Result<()> {
        match item {
            Item::Thread(r) => {
                let p = tl.thread(r).process as usize;
                if self.appl_of_process.len() <= p {
                    self.appl_of_process.resize(p + 1, 0);
                }
                if self.appl_of_process[p] == 0 {
                    self.appl_threads.push(0);
                    self.appl_of_process[p] = self.appl_threads.len() as u32;
                }
                let a = self.appl_of_process[p];
                let n = &mut self.appl_threads[a as usize - 1];
                *n += 1;
                if *n > u16::MAX as u32 {
                    return Err(Error::Input(trace_merge::Error::Limit(
                        "more than 65535 threads in one process: Paraver cannot index them".into(),
                    )));
                }
                debug_assert_eq!(self.slots.len(), r as usize);
                self.slots.push((a, *n));
            }
            Item::State(s) => {
                let kind = OutKind::State {
                    end: s.end,
                    state: state_value(s.state),
                    cpu: s.cpu.map_or(0, |c| c + 1),
                };
                self.push(s.begin, 2, s.thread, kind);
            }
            Item::OnCpu { thread, time, cpu } => {
                self.event(thread, time, Some(cpu), EV_CPU, cpu as i64 + 1)
            }
            Item::FuncEntry {
                thread,
                time,
                cpu,
                func,
                ..
            } => {
                let base = self.func_base[tl.thread(thread).source as usize];
                self.event(
                    thread,
                    time,
                    Some(cpu),
                    EV_FUNCTION,
                    base as i64 + func as i64,
                );
            }
            Item::Func(s) => {
                // A function the trace ends inside just goes on to the end.
                if s.end_kind != SpanEnd::TraceEnded {
                    self.event(s.thread, s.end, s.cpu, EV_FUNCTION, 0);
                }
            }
            Item::Sample(smp) => {
                use super::callers::{EV_CALLER, EV_CALLER_LINE};
                let (th, t, c) = (smp.thread, smp.time, Some(smp.cpu));
                let values = self.callers.of(tl, &smp).to_vec();
                for level in 1..=super::CALLER_LEVELS as u32 {
                    let (func, line) = values.get(level as usize - 1).copied().unwrap_or((0, 0));
                    self.event(th, t, c, EV_CALLER + level, func as i64);
                    self.event(th, t, c, EV_CALLER_LINE + level, line as i64);
                }
            }
            Item::GoStatus(_) => {}
            Item::Mark(mk) => {
                let base = self.func_base[tl.thread(mk.thread).source as usize];
                let (th, t, c) = (mk.thread, mk.time, Some(mk.cpu));
                self.event(th, t, c, EV_USDT, base as i64 + mk.probe as i64);
                for (i, &a) in mk.args.iter().take(mk.nargs as usize).enumerate() {
                    self.event(th, t, c, EV_USDT_ARG + i as u32, a as i64);
                }
            }
            Item::SyscallEntry(e) => {
                let (th, t, c) = (e.thread, e.time, Some(e.cpu));
                self.event(th, t, c, EV_SYSCALL, e.nr as i64 + 1);
                if let Some(fd) = e.fd.filter(|&fd| fd >= 0) {
                    self.event(th, t, c, EV_FD, fd as i64 + 1);
                }
                if let Some(op) = e.sock_op {
                    self.event(th, t, c, EV_SOCKET_OP, op as i64);
                }
                if let Some(conn) = e.conn {
                    self.event(th, t, c, EV_CONNECTION, conn as i64);
                }
            }
            Item::Syscall(s) => {
                if s.end_kind == SpanEnd::TraceEnded {
                    return Ok(());
                }
                let (th, t, c) = (s.thread, s.end, s.cpu);
                self.event(th, t, c, EV_SYSCALL, 0);
                if s.entered {
                    if s.fd.is_some_and(|fd| fd >= 0) {
                        self.event(th, t, c, EV_FD, 0);
                    }
                    if s.sock_op.is_some() {
                        self.event(th, t, c, EV_SOCKET_OP, 0);
                    }
                    if s.conn.is_some() {
                        self.event(th, t, c, EV_CONNECTION, 0);
                    }
                }
                if s.bytes_read > 0 {
                    self.event(th, t, c, EV_BYTES_READ, s.bytes_read as i64);
                }
                if s.bytes_written > 0 {
                    self.event(th, t, c, EV_BYTES_WRITTEN, s.bytes_written as i64);
                }
                if let Some(conn) = s.new_conn {
                    self.event(th, t, c, EV_ACCEPTED, conn as i64);
                }
            }
            Item::Link(l) => {
                let (size, tag) = match l.kind {
                    LinkKind::Wakeup => (0, 0),
                    LinkKind::Handoff { conn } => (l.bytes as i64, conn as i64),
                };
                let kind = OutKind::Comm {
                    cpu: l.send_cpu + 1,
                    to: l.to,
                    rcpu: l.recv_cpu + 1,
                    recv: l.recv,
                    size,
                    tag,
                };
                self.push(l.send, 0, l.from, kind);
            }
        }
        Ok(())
    }

    /// Sends every record before `mark` to the formatter. Sorting the states and links
    /// is left to the formatter, to balance the work of the two threads.
    pub(super) fn flush_before(&mut self, mark: u64) -> std::io::Result<()> {
        let mark = mark.max(self.written_before);
        // Events arrive in time order (they happen at the current record), so this check
        // is all the sorting they need; the stable sort is a safety net, linear on runs.
        if !self.ev.is_sorted_by_key(|o| o.time) {
            self.ev.sort_by_key(|o| o.time);
        }
        let ne = self.ev.partition_point(|o| o.time < mark);
        let mut b = self.returned.try_recv().unwrap_or_default();
        // Send the big buffer itself and keep the few records at or after the mark in
        // the returned one, instead of copying what is sent.
        b.ev.clear();
        b.ev.extend_from_slice(&self.ev[ne..]);
        self.ev.truncate(ne);
        std::mem::swap(&mut self.ev, &mut b.ev);
        b.other.clear();
        self.other.retain(|o| {
            let now = o.time < mark;
            if now {
                b.other.push(*o);
            }
            !now
        });
        b.new_slots.clear();
        b.new_slots
            .extend_from_slice(&self.slots[self.slots_sent..]);
        self.slots_sent = self.slots.len();
        self.written_before = mark;
        let sent = self.to_formatter.as_ref().map(|tx| tx.send(b));
        if let Some(Err(_)) = sent {
            // The formatter stopped: its error says why.
            self.finish()?;
            return Err(std::io::Error::other("the formatting thread stopped"));
        }
        Ok(())
    }

    pub(super) fn pending(&self) -> usize {
        self.ev.len() + self.other.len()
    }
}

/// The formatting thread's side: turns batches into lines and writes them.
pub(super) struct Formatter {
    pub(super) out: File,
    /// Formatted lines not written yet.
    pub(super) buf: Vec<u8>,
    pub(super) line: Box<Line>,
    pub(super) slots: Vec<(u32, u32)>,
    pub(super) counts: [u64; 3],
}

impl Formatter {
    fn batch(&mut self, b: &mut Batch) -> std::io::Result<()> {
        self.slots.extend_from_slice(&b.new_slots);
        // No two states of a thread begin at the same time, so an unstable sort (faster
        // on this unordered part) gives the same, deterministic, order.
        b.other.sort_unstable_by_key(Out::key);
        let (ev, other) = (&mut b.ev, &b.other);
        let (ne, no) = (ev.len(), other.len());
        let (mut i, mut j) = (0, 0);
        // End of the block of events sharing `ev[i].time`, once sorted by thread.
        let mut block_end = 0;
        // ev is sorted by time, other by key: merge them in Paraver's tie order.
        while i < ne || j < no {
            let take_ev = j >= no || (i < ne && (ev[i].time, 1) < (other[j].time, other[j].rank));
            if take_ev {
                if i >= block_end {
                    let t = ev[i].time;
                    block_end = i + 1;
                    while block_end < ne && ev[block_end].time == t {
                        block_end += 1;
                    }
                    let block = &mut ev[i..block_end];
                    if block.iter().any(|o| o.thread != block[0].thread) {
                        block.sort_by_key(|o| o.thread);
                    }
                }
                let th = ev[i].thread;
                let mut k = i + 1;
                while k < block_end && ev[k].thread == th {
                    k += 1;
                }
                let line = &mut self.line;
                format_line(
                    &mut self.buf,
                    line,
                    &self.slots,
                    &ev[i..k],
                    &mut self.counts,
                );
                i = k;
            } else {
                format_line(
                    &mut self.buf,
                    &mut self.line,
                    &self.slots,
                    &other[j..j + 1],
                    &mut self.counts,
                );
                j += 1;
            }
            if self.buf.len() >= OUT_BUF {
                self.out.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }
}

/// Appends an event type: ours are constants, copied rather than formatted.
fn push_type(line: &mut Line, ty: u32) {
    let s: &[u8; 8] = match ty {
        EV_FUNCTION => b"60000019",
        EV_SYSCALL => b"40000000",
        EV_BYTES_READ => b"40000001",
        EV_BYTES_WRITTEN => b"40000002",
        EV_FD => b"40000003",
        EV_SOCKET_OP => b"40000004",
        EV_CONNECTION => b"40000005",
        EV_ACCEPTED => b"40000006",
        EV_CPU => b"40000033",
        other => return push_u64(line, other as u64),
    };
    line.extend_from_slice(s);
}

/// Bytes of formatted lines gathered before one write.
pub(super) const OUT_BUF: usize = 1 << 20;

/// Appends to `out` one body line made of `recs`: one record, or several events of one
/// thread at one time. `line` is scratch space.
pub(super) fn format_line(
    out: &mut Vec<u8>,
    line: &mut Line,
    slots: &[(u32, u32)],
    recs: &[Out],
    counts: &mut [u64; 3],
) {
    line.clear();
    let o = &recs[0];
    let (appl, thread) = slots[o.thread as usize];
    let head = |line: &mut Line, ty: u8, cpu: u32| {
        line.push(ty);
        line.push(b':');
        push_u64(line, cpu as u64);
        line.push(b':');
        push_u64(line, appl as u64);
        line.extend_from_slice(b":1:");
        push_u64(line, thread as u64);
        line.push(b':');
        push_u64(line, o.time);
    };
    match o.kind {
        OutKind::State { end, state, cpu } => {
            head(line, b'1', cpu);
            line.push(b':');
            push_u64(line, end);
            line.push(b':');
            push_u64(line, state as u64);
            counts[2] += 1;
        }
        OutKind::Event { cpu, .. } => {
            head(line, b'2', cpu);
            for r in recs {
                if !line.has_room() {
                    out.extend_from_slice(line.as_bytes());
                    line.clear();
                }
                if let OutKind::Event { ty, value, .. } = r.kind {
                    line.push(b':');
                    push_type(line, ty);
                    line.push(b':');
                    push_i64(line, value);
                }
            }
            counts[1] += 1;
        }
        OutKind::Comm {
            cpu,
            to,
            rcpu,
            recv,
            size,
            tag,
        } => {
            head(line, b'3', cpu);
            line.push(b':');
            push_u64(line, o.time);
            line.push(b':');
            push_u64(line, rcpu as u64);
            let (rappl, rthread) = slots[to as usize];
            line.push(b':');
            push_u64(line, rappl as u64);
            line.extend_from_slice(b":1:");
            push_u64(line, rthread as u64);
            line.push(b':');
            push_u64(line, recv);
            line.push(b':');
            push_u64(line, recv);
            line.push(b':');
            push_i64(line, size);
            line.push(b':');
            push_i64(line, tag);
            counts[0] += 1;
        }
    }
    line.push(b'\n');
    out.extend_from_slice(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_line_longer_than_the_scratch_line_is_whole() {
        let recs: Vec<Out> = (0..100)
            .map(|i| Out {
                time: 12_345_678_901,
                rank: 1,
                thread: 0,
                kind: OutKind::Event {
                    ty: EV_BYTES_READ,
                    value: i64::MAX - i,
                    cpu: 3,
                },
            })
            .collect();
        let mut want = String::from("2:3:1:1:2:12345678901");
        for i in 0..100 {
            want.push_str(&format!(":40000001:{}", i64::MAX - i));
        }
        want.push('\n');
        let (mut out, mut line, mut counts) = (b"x".to_vec(), Line::new(), [0; 3]);
        format_line(&mut out, &mut line, &[(1, 2)], &recs, &mut counts);
        assert_eq!(String::from_utf8(out).unwrap(), format!("x{want}"));
        assert_eq!(counts, [0, 1, 0]);
    }
}
