//! Checks of the guarantees of the [`Item`] stream, for tests on synthetic and real
//! recordings: state intervals tile each thread's timeline, spans close what they open,
//! hand-offs connect an accept to a later operation on the same connection.

use std::collections::HashMap;

use trace_merge::timeline::{Item, LinkKind, Timeline};
use trace_merge::Result;

/// What a checked stream contained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InvariantReport {
    /// Threads seen.
    pub threads: u64,
    /// State intervals.
    pub states: u64,
    /// Function spans.
    pub spans: u64,
    /// System call spans.
    pub syscalls: u64,
    /// Wakeup links.
    pub wakeups: u64,
    /// Hand-off links.
    pub handoffs: u64,
}

#[derive(Clone, Default)]
struct PerThread {
    /// End of the last interval: the next one must begin here.
    covered: u64,
    open_funcs: u64,
    open_sys: Option<u64>,
    /// Hand-off links received, waiting for the operation they point at.
    expect_op: Vec<(u32, u64)>,
}

/// Consumes items one by one; [`Checker::finish`] reports every broken guarantee.
#[derive(Default)]
pub struct Checker {
    threads: Vec<PerThread>,
    accepts: HashMap<u32, (u32, u64)>,
    errors: Vec<String>,
    report: InvariantReport,
}

impl Checker {
    /// A checker that has seen nothing.
    pub fn new() -> Checker {
        Checker::default()
    }

    fn th(&mut self, r: u32) -> &mut PerThread {
        if self.threads.len() <= r as usize {
            self.threads.resize(r as usize + 1, PerThread::default());
        }
        &mut self.threads[r as usize]
    }

    /// Checks one item.
    pub fn item(&mut self, item: &Item) {
        match *item {
            Item::Thread(r) => {
                self.th(r);
                self.report.threads += 1;
            }
            Item::State(s) => {
                self.report.states += 1;
                let covered = self.th(s.thread).covered;
                if s.begin != covered || s.end <= s.begin {
                    self.errors.push(format!(
                        "thread {} (tid {}): interval [{}, {}) but covered up to {covered}",
                        s.thread, s.tid, s.begin, s.end
                    ));
                }
                self.th(s.thread).covered = s.end.max(covered);
            }
            Item::OnCpu { .. } | Item::Mark(_) | Item::Sample(_) | Item::GoStatus(_) => {}
            Item::FuncEntry { thread, .. } => self.th(thread).open_funcs += 1,
            Item::Func(s) => {
                self.report.spans += 1;
                let t = self.th(s.thread);
                if t.open_funcs == 0 || s.end < s.begin {
                    let what = format!("thread {}: span of {} never entered", s.thread, s.func);
                    self.errors.push(what);
                } else {
                    t.open_funcs -= 1;
                }
            }
            Item::SyscallEntry(e) => {
                if self.th(e.thread).open_sys.replace(e.time).is_some() {
                    let what = format!("thread {}: nested system call entry", e.thread);
                    self.errors.push(what);
                }
            }
            Item::Syscall(s) => {
                self.report.syscalls += 1;
                let open = self.th(s.thread).open_sys.take();
                if s.entered != (open == Some(s.begin)) || s.end < s.begin {
                    self.errors.push(format!(
                        "thread {}: system call {} [{}, {}] does not match its entry {open:?}",
                        s.thread, s.nr, s.begin, s.end
                    ));
                }
                if let Some(c) = s.new_conn {
                    self.accepts.insert(c, (s.thread, s.end));
                }
                let t = self.th(s.thread);
                if let Some(c) = s.conn {
                    t.expect_op.retain(|&(conn, _)| conn != c);
                }
            }
            Item::Link(l) => {
                if l.recv < l.send || l.from == l.to {
                    self.errors.push(format!("bad link {l:?}"));
                }
                match l.kind {
                    LinkKind::Wakeup => self.report.wakeups += 1,
                    LinkKind::Handoff { conn } => {
                        self.report.handoffs += 1;
                        if self.accepts.get(&conn) != Some(&(l.from, l.send)) {
                            self.errors.push(format!(
                                "hand-off of connection {conn} does not start at its accept: {l:?}"
                            ));
                        }
                        self.th(l.to).expect_op.push((conn, l.recv));
                    }
                }
            }
        }
    }

    /// The verdict, given the end of the trace.
    pub fn finish(mut self, end: u64) -> Result<InvariantReport, Vec<String>> {
        for (i, t) in self.threads.iter().enumerate() {
            if t.covered != end {
                let what = format!("thread {i}: states cover up to {}, not {end}", t.covered);
                self.errors.push(what);
            }
            if t.open_funcs != 0 || t.open_sys.is_some() {
                self.errors
                    .push(format!("thread {i}: spans left open at the end"));
            }
            for (conn, recv) in &t.expect_op {
                self.errors.push(format!(
                    "thread {i}: hand-off of connection {conn} at {recv} has no operation"
                ));
            }
        }
        if self.errors.is_empty() {
            Ok(self.report)
        } else {
            Err(self.errors)
        }
    }
}

/// Runs a whole timeline through a [`Checker`]. The outer error is a read error of the
/// inputs, the inner one the list of broken guarantees.
pub fn check_timeline(mut tl: Timeline) -> Result<Result<InvariantReport, Vec<String>>> {
    let mut c = Checker::new();
    while let Some(item) = tl.next_item()? {
        c.item(&item);
    }
    Ok(c.finish(tl.end().unwrap_or(0)))
}
