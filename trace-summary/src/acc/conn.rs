//! Connections: each accepted socket followed through the system calls on it until its
//! close, then folded into its scope's figures (the slowest ones kept whole).

use std::collections::BinaryHeap;

use trace_merge::sysclass;
use trace_merge::timeline::SyscallSpan;

use super::pass::Pass;
use super::scope::{at, Sum};
use crate::{Connection, Histogram};

/// Most thread tids kept per connection.
const CONN_THREADS: usize = 8;

/// A finished connection, ordered by service time for the slowest-K heap.
#[derive(PartialEq, Eq)]
pub(super) struct Slow(pub(super) Connection);

impl Ord for Slow {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: the heap's top is the fastest, the one to drop first.
        (o.0.service_ns, o.0.id).cmp(&(self.0.service_ns, self.0.id))
    }
}

impl PartialOrd for Slow {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// The connections of one file in one scope.
#[derive(Default)]
pub(super) struct ConnAcc {
    pub(super) accepted: u64,
    pub(super) closed: u64,
    pub(super) open_at_end: u64,
    pub(super) read: Sum,
    pub(super) written: Sum,
    pub(super) max_concurrency: u32,
    /// Service times.
    pub(super) hist: Histogram,
    /// By concurrency at acceptance: (connections, service ns, bytes).
    pub(super) by_conc: Vec<(u64, Sum, Sum)>,
    pub(super) slowest: BinaryHeap<Slow>,
}

impl ConnAcc {
    /// Counts a finished connection; `keep`: how many of the slowest are kept whole.
    fn finish(&mut self, c: &Connection, keep: usize) {
        self.closed += c.closed as u64;
        self.open_at_end += !c.closed as u64;
        self.read += c.bytes_read;
        self.written += c.bytes_written;
        self.hist.record(c.service_ns);
        let k = c.concurrent_at_start as usize;
        if self.by_conc.len() <= k {
            self.by_conc.resize(k + 1, Default::default());
        }
        let row = &mut self.by_conc[k];
        row.0 += 1;
        row.1 += c.service_ns;
        row.2 += c.bytes_read;
        row.2 += c.bytes_written;
        if keep > 0 {
            if self.slowest.len() < keep {
                self.slowest.push(Slow(c.clone()));
            } else if let Some(mut top) = self.slowest.peek_mut() {
                if (c.service_ns, c.id) > (top.0.service_ns, top.0.id) {
                    *top = Slow(c.clone());
                }
            }
        }
    }

    pub(super) fn merge(&mut self, o: &ConnAcc, keep: usize) {
        self.accepted += o.accepted;
        self.max_concurrency = self.max_concurrency.max(o.max_concurrency);
        self.hist.merge(&o.hist);
        self.closed += o.closed;
        self.open_at_end += o.open_at_end;
        self.read += o.read;
        self.written += o.written;
        if self.by_conc.len() < o.by_conc.len() {
            self.by_conc.resize(o.by_conc.len(), Default::default());
        }
        for (k, r) in o.by_conc.iter().enumerate() {
            let me = &mut self.by_conc[k];
            me.0 += r.0;
            me.1 += r.1;
            me.2 += r.2;
        }
        for c in o.slowest.iter() {
            self.slowest.push(Slow(c.0.clone()));
            if self.slowest.len() > keep {
                self.slowest.pop();
            }
        }
    }
}

/// A connection in service.
pub(super) struct OpenConn {
    file: u32,
    process: u32,
    tgid: u32,
    accepted: u64,
    last_op: u64,
    read: Sum,
    written: Sum,
    ops: u64,
    conc: u32,
    threads: [u32; CONN_THREADS],
    nthreads: u8,
}

impl Pass {
    /// Follows the connections a system call accepts, uses or closes.
    pub(super) fn connection(&mut self, s: &SyscallSpan) {
        let th = &self.rt[s.thread as usize];
        let (process, file, tid, tgid) = (th.process, th.source, th.tid, th.tgid);
        if let Some(old) = s.replaced_conn {
            let last = self.open_conns.get(&old).map_or(s.end, |c| c.last_op);
            self.end_conn(old, last, false);
        }
        if let Some(id) = s.new_conn {
            if self.in_service.len() <= process as usize {
                self.in_service.resize(process as usize + 1, 0);
            }
            self.in_service[process as usize] += 1;
            let conc = self.in_service[process as usize];
            let mut threads = [0; CONN_THREADS];
            threads[0] = tid;
            self.open_conns.insert(
                id,
                OpenConn {
                    file,
                    process,
                    tgid,
                    accepted: s.end,
                    last_op: s.end,
                    read: Sum::default(),
                    written: Sum::default(),
                    ops: 0,
                    conc,
                    threads,
                    nthreads: 1,
                },
            );
            self.each(s.end, |a| {
                at(&mut a.conns, file).accepted += 1;
                let c = at(&mut a.conns, file);
                c.max_concurrency = c.max_concurrency.max(conc);
            });
        }
        let Some(id) = s.conn else {
            return;
        };
        if let Some(c) = self.open_conns.get_mut(&id) {
            c.ops += 1;
            c.read += s.bytes_read;
            c.written += s.bytes_written;
            c.last_op = s.end;
            let n = c.nthreads as usize;
            if n < CONN_THREADS && !c.threads[..n].contains(&tid) {
                c.threads[n] = tid;
                c.nthreads += 1;
            }
            if sysclass::class(s.nr).close {
                self.end_conn(id, s.end, true);
            }
        }
    }

    /// Ends connection `id` at `end`; `closed`: by a close seen in the trace.
    fn end_conn(&mut self, id: u32, end: u64, closed: bool) {
        let Some(c) = self.open_conns.remove(&id) else {
            return;
        };
        if let Some(n) = self.in_service.get_mut(c.process as usize) {
            *n = n.saturating_sub(1);
        }
        let conn = Connection {
            id,
            file: c.file,
            tgid: c.tgid,
            accepted_ns: c.accepted,
            service_ns: end.saturating_sub(c.accepted),
            closed,
            bytes_read: c.read.0,
            bytes_written: c.written.0,
            operations: c.ops,
            concurrent_at_start: c.conc,
            threads: c.threads[..c.nthreads as usize].to_vec(),
            flags: Vec::new(),
        };
        let keep = self.keep_conns;
        self.each(end, |a| at(&mut a.conns, c.file).finish(&conn, keep));
    }

    /// Ends the connections still in service when the trace ends, in id order.
    pub(super) fn end_open_conns(&mut self, end: u64) {
        let mut open: Vec<u32> = self.open_conns.keys().copied().collect();
        open.sort_unstable();
        for id in open {
            self.end_conn(id, end, false);
        }
    }
}
