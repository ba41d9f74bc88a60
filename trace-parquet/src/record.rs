//! Recordings to rows: a [`trace_merge::Consumer`] of one host's timeline writing `calls`,
//! `syscalls`, `states` and `links` as the items come, then `threads`, `processes`,
//! `probes` and `files` from what the timeline knows at its end.
//!
//! **A call's state split and self time** are those of `trace-summary` (its `acc::pass`),
//! computed the same way so that summing the rows gives the summary's figures exactly
//! (tests compare them on random traces): every thread carries the cumulative time it
//! has spent in each state up to the end of its last closed state interval; an entry
//! takes that vector at the entry time (the open interval counts as running when an
//! `OnCpu` came after the last close), the return takes it again, and the difference is
//! the call's running / ready / blocked / I/O time. A call that ends while the thread's
//! open state is not known (cut by the trace's end) waits for the thread's next interval.
//! Self time is the call's duration less that of the probed calls it made on the same
//! thread (on the same goroutine for Go). A recursive function's nested activations have
//! `outermost = false`: the summary counts their time once, in the outermost.

use std::path::PathBuf;

use trace_merge::sysclass;
use trace_merge::timeline::{
    Item, Link, LinkKind, Span, SpanEnd, StateInterval, SyscallSpan, ThreadState, Timeline,
};
use trace_merge::{Consumer, InputReport, MergeOptions};

use crate::error::{Error, Result};
use crate::meta;
use crate::Out;

/// The split of a call's time: running, ready, blocked, I/O, other.
const SPLIT: usize = 5;

fn split_index(s: ThreadState) -> usize {
    match s {
        ThreadState::Running => 0,
        ThreadState::Ready => 1,
        ThreadState::Blocked => 2,
        ThreadState::Io => 3,
        _ => 4,
    }
}

/// The `state` column's value.
pub(crate) fn state_name(s: ThreadState) -> &'static str {
    match s {
        ThreadState::Unknown => "unknown",
        ThreadState::NotCreated => "not_created",
        ThreadState::Running => "running",
        ThreadState::Ready => "ready",
        ThreadState::Blocked => "blocked",
        ThreadState::Io => "io",
        ThreadState::Exited => "exited",
    }
}

fn end_name(e: SpanEnd) -> &'static str {
    match e {
        SpanEnd::Returned => "returned",
        SpanEnd::Unwound => "unwound",
        SpanEnd::Exited => "exited",
        SpanEnd::TraceEnded => "trace_ended",
    }
}

/// A probed function on a thread's (or goroutine's) stack.
#[derive(Clone, Copy)]
struct Frame {
    id: i64,
    func: u32,
    begin: u64,
    /// Cumulative state time of the thread at entry.
    at: [u64; SPLIT],
    /// Wall time of probed callees that returned.
    child_ns: u64,
    /// No activation of the same function below it on the stack.
    outer: bool,
    /// The first connection a system call made inside it operated on.
    conn: Option<u32>,
}

/// A call whose row is complete but for its split.
#[derive(Clone, Copy)]
struct Pending {
    row: CallRow,
    at: [u64; SPLIT],
}

/// Everything of a `calls` row but the split.
#[derive(Clone, Copy)]
struct CallRow {
    thread: u32,
    func: u32,
    kind: i32,
    id: i64,
    parent: Option<i64>,
    depth: u32,
    outer: bool,
    begin: u64,
    end: u64,
    self_ns: u64,
    ret: Option<u64>,
    /// Key of the `end_kind` value.
    end_kind: i32,
    goroutine: Option<u64>,
    conn: Option<u32>,
}

/// What the pass knows of a thread between its items.
struct Th {
    source: u32,
    pid: i32,
    tid: i32,
    run: i32,
    /// The key of its name, and the name it is the key of.
    name: (i32, String),
    cum: [u64; SPLIT],
    since: u64,
    running: bool,
    /// The CPU it last started running on.
    last_cpu: Option<u32>,
    /// Arrivals on another CPU than the last one since its last interval was written:
    /// they count in the next (the interval they begin).
    migrations: i32,
    stack: Vec<Frame>,
    pending: Vec<Pending>,
}

impl Th {
    #[inline]
    fn cum_at(&self, t: u64) -> Option<[u64; SPLIT]> {
        let mut f = self.cum;
        if t > self.since {
            if !self.running {
                return None;
            }
            f[0] += t - self.since;
        }
        Some(f)
    }
}

/// Keys of a probe's strings.
#[derive(Clone, Copy)]
struct FuncKeys {
    name: i32,
    binary: i32,
    kind: i32,
}

/// Keys of strings every row of a kind uses.
struct Keys {
    host: i32,
    states: [i32; 7],
    ends: [i32; 4],
    wakeup: i32,
    handoff: i32,
    hit: i32,
}

pub(crate) struct Pass<'a> {
    out: &'a mut Out,
    keys: Keys,
    /// Wall-clock ns of merge time 0.
    zero: i64,
    /// The host's CLOCK_MONOTONIC -> CLOCK_REALTIME offset.
    m2r: i64,
    threads: Vec<Th>,
    /// Per source: run key.
    runs: Vec<i32>,
    /// Per source: probe id -> keys.
    funcs: Vec<Vec<Option<FuncKeys>>>,
    /// System call number -> name key.
    sys_names: Vec<Option<i32>>,
    goroutines: rustc_hash::FxHashMap<(u32, u64), Vec<Frame>>,
    max_conn: u32,
}

/// Converts one host's recordings; returns what was read.
pub(crate) fn convert_host(
    paths: &[PathBuf],
    merge: &MergeOptions,
    out: &mut Out,
) -> Result<InputReport> {
    let tl = trace_merge::open(paths, merge)?;
    let sources = tl.merger().sources();
    let s0 = &sources[0];
    let m2r = s0.header.monotonic_to_realtime_ns;
    // Merge time 0 on the real-time clock: sources[0] starts at `start` in merge time and
    // at header.start_ns + m2r in real time (its node's offset is its own: it is first).
    let zero = (s0.header.start_ns as i64)
        .saturating_add(m2r)
        .saturating_sub(s0.start as i64);
    let s = &mut out.strings;
    let keys = Keys {
        host: s.key(&s0.header.hostname),
        states: ThreadState::ALL.map(|st| s.key(state_name(st))),
        ends: [
            SpanEnd::Returned,
            SpanEnd::Unwound,
            SpanEnd::Exited,
            SpanEnd::TraceEnded,
        ]
        .map(|e| s.key(end_name(e))),
        wakeup: s.key("wakeup"),
        handoff: s.key("handoff"),
        hit: s.key("hit"),
    };
    let runs = (sources.iter())
        .map(|src| s.key(&meta::run_name(&sources[src.identity as usize])))
        .collect();
    let mut p = Pass {
        keys,
        zero,
        m2r,
        threads: Vec::new(),
        runs,
        funcs: vec![Vec::new(); sources.len()],
        sys_names: Vec::new(),
        goroutines: Default::default(),
        max_conn: 0,
        out,
    };
    let (tl, _) = trace_merge::feed(tl, u64::MAX, &mut p)?;
    p.finish()?;
    let host = p.keys.host;
    meta::timeline_tables(p.out, &tl, host, zero)?;
    p.out.conn_base += p.max_conn as i64;
    Ok(InputReport::of(&tl))
}

impl Consumer for Pass<'_> {
    type Error = Error;

    #[inline]
    fn item(&mut self, tl: &Timeline, item: Item) -> Result<()> {
        match item {
            Item::Thread(r) => self.thread(tl, r),
            Item::State(s) => self.state(&s),
            Item::OnCpu { thread, cpu, .. } => {
                let th = &mut self.threads[thread as usize];
                th.running = true;
                th.migrations += th.last_cpu.is_some_and(|c| c != cpu) as i32;
                th.last_cpu = Some(cpu);
                Ok(())
            }
            Item::FuncEntry {
                goroutine: Some(g),
                thread,
                time,
                func,
                ..
            } => {
                self.go_entry(thread, time, func, g);
                Ok(())
            }
            Item::FuncEntry {
                thread, time, func, ..
            } => {
                self.func_entry(thread, time, func);
                Ok(())
            }
            Item::Func(span) if span.goroutine.is_some() => self.go_func(tl, &span),
            Item::Func(span) => self.func(tl, &span),
            Item::Mark(m) => self.mark(tl, m.thread, m.time, m.probe),
            // Stacks (`--stacks`) have no table yet.
            Item::SyscallEntry(_) | Item::Sample(_) => Ok(()),
            Item::Syscall(s) => self.syscall(tl, &s),
            Item::Link(l) => self.link(&l),
        }
    }
}

impl Pass<'_> {
    #[inline]
    fn wall(&self, t: u64) -> i64 {
        (t as i64).saturating_add(self.zero)
    }

    #[inline]
    fn mono(&self, t: u64) -> i64 {
        self.wall(t).saturating_sub(self.m2r)
    }

    fn thread(&mut self, tl: &Timeline, r: u32) -> Result<()> {
        debug_assert_eq!(r as usize, self.threads.len());
        let m = tl.thread(r);
        let name = m.name.clone();
        self.threads.push(Th {
            source: m.source,
            pid: m.tgid as i32,
            tid: m.tid as i32,
            run: self.runs[m.source as usize],
            name: (self.out.strings.key(&name), name),
            cum: [0; SPLIT],
            since: 0,
            running: false,
            last_cpu: None,
            migrations: 0,
            stack: Vec::new(),
            pending: Vec::new(),
        });
        Ok(())
    }

    /// The key of thread `r`'s current name.
    #[inline]
    fn thread_name(&mut self, tl: &Timeline, r: u32) -> i32 {
        let th = &mut self.threads[r as usize];
        let now = &tl.thread(r).name;
        if th.name.1 != *now {
            th.name = (self.out.strings.key(now), now.clone());
        }
        th.name.0
    }

    fn func_keys(&mut self, source: u32, func: u32, tl: &Timeline) -> FuncKeys {
        let table = &mut self.funcs[source as usize];
        if let Some(Some(k)) = table.get(func as usize) {
            return *k;
        }
        let s = &mut self.out.strings;
        let k = match tl.merger().sources()[source as usize].probe(func) {
            Some(p) => FuncKeys {
                name: s.key(&p.name),
                binary: s.key(&p.binary),
                kind: s.key(meta::probe_kind(&p.kind)),
            },
            None => FuncKeys {
                name: s.key(&format!("function_{func}")),
                binary: s.key(""),
                kind: s.key("function"),
            },
        };
        if table.len() <= func as usize {
            table.resize(func as usize + 1, None);
        }
        table[func as usize] = Some(k);
        k
    }

    #[inline]
    fn state(&mut self, s: &StateInterval) -> Result<()> {
        let r = s.thread as usize;
        let si = split_index(s.state);
        if !self.threads[r].pending.is_empty() {
            let pend = std::mem::take(&mut self.threads[r].pending);
            let cum = self.threads[r].cum;
            for q in &pend {
                let mut f = cum;
                f[si] += q.row.end.clamp(s.begin, s.end) - s.begin;
                self.call_row(&q.row, &q.at, &f)?;
            }
        }
        let th = &mut self.threads[r];
        th.cum[si] += s.end - s.begin;
        th.since = s.end;
        th.running = false;
        let migrations = std::mem::take(&mut th.migrations);
        let (pid, tid, run) = (th.pid, th.tid, th.run);
        let (wall, mono) = (self.wall(s.begin), self.mono(s.begin));
        let state = self.keys.states[s.state as usize];
        let end = self.wall(s.end);
        let host = self.keys.host;
        let o = &mut self.out;
        let b = o.states.at(&mut o.strings, host, wall)?;
        b.host.push(host);
        b.run.push(run);
        b.pid.append_value(pid);
        b.tid.append_value(tid);
        b.state.push(state);
        b.start_ns.append_value(wall);
        b.end_ns.append_value(end);
        b.start_mono_ns.append_value(mono);
        b.duration_ns.append_value((s.end - s.begin) as i64);
        b.cpu.append_option(s.cpu.map(|c| c as i32));
        b.migrations.append_value(migrations);
        b.row();
        Ok(())
    }

    fn new_id(&mut self) -> i64 {
        let id = self.out.next_call;
        self.out.next_call += 1;
        id
    }

    #[inline]
    fn func_entry(&mut self, r: u32, time: u64, func: u32) {
        let id = self.new_id();
        let th = &mut self.threads[r as usize];
        let at = th.cum_at(time).unwrap_or(th.cum);
        let outer = !th.stack.iter().any(|f| f.func == func);
        th.stack.push(Frame {
            id,
            func,
            begin: time,
            at,
            child_ns: 0,
            outer,
            conn: None,
        });
    }

    #[inline]
    fn func(&mut self, tl: &Timeline, span: &Span) -> Result<()> {
        let r = span.thread as usize;
        let th = &mut self.threads[r];
        // The timeline closes frames innermost first: the top is this span's.
        th.stack.truncate(span.depth as usize + 1);
        let Some(fr) = th.stack.pop() else {
            return Ok(());
        };
        let dur = span.end.saturating_sub(fr.begin);
        let parent = th.stack.last_mut().map(|p| {
            p.child_ns += dur;
            p.id
        });
        let to = th.cum_at(span.end);
        let source = th.source;
        let keys = self.func_keys(source, fr.func, tl);
        let row = CallRow {
            thread: span.thread,
            func: fr.func,
            kind: keys.kind,
            id: fr.id,
            parent,
            depth: span.depth,
            outer: fr.outer,
            begin: fr.begin,
            end: span.end,
            self_ns: dur.saturating_sub(fr.child_ns),
            ret: span.ret,
            end_kind: self.keys.ends[span.end_kind as usize],
            goroutine: None,
            conn: fr.conn,
        };
        self.thread_name(tl, span.thread);
        match to {
            Some(to) => self.call_row(&row, &fr.at, &to),
            None => {
                self.threads[r].pending.push(Pending { row, at: fr.at });
                Ok(())
            }
        }
    }

    /// Writes a `calls` row, its split the difference of two cumulative vectors.
    #[inline]
    fn call_row(&mut self, c: &CallRow, from: &[u64; SPLIT], to: &[u64; SPLIT]) -> Result<()> {
        let th = &self.threads[c.thread as usize];
        let (pid, tid, run, name, source) = (th.pid, th.tid, th.run, th.name.0, th.source);
        let f = self.funcs[source as usize][c.func as usize].expect("keys made at the call's end");
        let d = |k: usize| to[k].saturating_sub(from[k]) as i64;
        let wall = self.wall(c.begin);
        let (end, mono) = (self.wall(c.end), self.mono(c.begin));
        let (host, end_kind) = (self.keys.host, c.end_kind);
        let conn = c.conn.map(|x| x as i64 + self.out.conn_base);
        let o = &mut self.out;
        let b = o.calls.at(&mut o.strings, host, wall)?;
        b.host.push(host);
        b.run.push(run);
        b.pid.append_value(pid);
        b.tid.append_value(tid);
        b.thread.push(name);
        b.function.push(f.name);
        b.binary.push(f.binary);
        b.kind.push(c.kind);
        b.call_id.append_value(c.id);
        b.parent_id.append_option(c.parent);
        b.depth.append_value(c.depth as i32);
        b.outermost.append_value(c.outer);
        b.start_ns.append_value(wall);
        b.end_ns.append_value(end);
        b.start_mono_ns.append_value(mono);
        b.duration_ns
            .append_value(c.end.saturating_sub(c.begin) as i64);
        b.self_ns.append_value(c.self_ns as i64);
        b.running_ns.append_value(d(0));
        b.ready_ns.append_value(d(1));
        b.blocked_ns.append_value(d(2));
        b.io_ns.append_value(d(3));
        b.ret.append_option(c.ret.map(|v| v as i64));
        b.error.append_value(c.ret.is_some_and(|v| (v as i64) < 0));
        b.end_kind.push(end_kind);
        b.goroutine.append_option(c.goroutine.map(|g| g as i64));
        b.connection.append_option(conn);
        b.row();
        Ok(())
    }

    /// A Go call: on its goroutine's stack, with no thread-state split.
    fn go_entry(&mut self, r: u32, time: u64, func: u32, g: u64) {
        let id = self.new_id();
        let source = self.threads[r as usize].source;
        let stack = self.goroutines.entry((source, g)).or_default();
        let outer = !stack.iter().any(|f| f.func == func);
        stack.push(Frame {
            id,
            func,
            begin: time,
            at: [0; SPLIT],
            child_ns: 0,
            outer,
            conn: None,
        });
    }

    fn go_func(&mut self, tl: &Timeline, span: &Span) -> Result<()> {
        let r = span.thread as usize;
        let g = span.goroutine.unwrap_or(0);
        let key = (self.threads[r].source, g);
        let Some(stack) = self.goroutines.get_mut(&key) else {
            return Ok(());
        };
        stack.truncate(span.depth as usize + 1);
        let Some(fr) = stack.pop() else {
            return Ok(());
        };
        let dur = span.end.saturating_sub(fr.begin);
        let parent = stack.last_mut().map(|p| {
            p.child_ns += dur;
            p.id
        });
        if stack.is_empty() {
            self.goroutines.remove(&key);
        }
        let keys = self.func_keys(key.0, fr.func, tl);
        self.thread_name(tl, span.thread);
        let row = CallRow {
            thread: span.thread,
            func: fr.func,
            kind: keys.kind,
            id: fr.id,
            parent,
            depth: span.depth,
            outer: fr.outer,
            begin: fr.begin,
            end: span.end,
            self_ns: dur.saturating_sub(fr.child_ns),
            ret: span.ret,
            end_kind: self.keys.ends[span.end_kind as usize],
            goroutine: Some(g),
            conn: None,
        };
        self.call_row(&row, &[0; SPLIT], &[0; SPLIT])
    }

    /// A USDT probe fired: a `calls` row of kind `usdt`, taking no time.
    fn mark(&mut self, tl: &Timeline, r: u32, time: u64, probe: u32) -> Result<()> {
        let id = self.new_id();
        let source = self.threads[r as usize].source;
        let keys = self.func_keys(source, probe, tl);
        self.thread_name(tl, r);
        let th = &self.threads[r as usize];
        let row = CallRow {
            thread: r,
            func: probe,
            kind: keys.kind,
            id,
            parent: th.stack.last().map(|f| f.id),
            depth: th.stack.len() as u32,
            outer: true,
            begin: time,
            end: time,
            self_ns: 0,
            ret: None,
            end_kind: self.keys.hit,
            goroutine: None,
            conn: None,
        };
        self.call_row(&row, &[0; SPLIT], &[0; SPLIT])
    }

    #[inline]
    fn syscall(&mut self, tl: &Timeline, s: &SyscallSpan) -> Result<()> {
        let name = self.thread_name(tl, s.thread);
        let th = &mut self.threads[s.thread as usize];
        // The calls on the stack are about the connection this call operated on.
        if let Some(c) = s.conn.or(s.new_conn) {
            for f in th.stack.iter_mut().rev() {
                if f.conn.is_none() {
                    f.conn = Some(c);
                }
            }
        }
        for c in [s.conn, s.new_conn, s.replaced_conn].into_iter().flatten() {
            self.max_conn = self.max_conn.max(c);
        }
        let (pid, tid, run) = (th.pid, th.tid, th.run);
        let call = th.stack.last().map(|f| f.id);
        let nr = s.nr as usize;
        if self.sys_names.len() <= nr {
            self.sys_names.resize(nr + 1, None);
        }
        let sys_name = match self.sys_names[nr] {
            Some(k) => k,
            None => {
                let k = self.out.strings.key(&sysclass::name(s.nr));
                self.sys_names[nr] = Some(k);
                k
            }
        };
        let errno = match s.ret {
            Some(v) if (-4095..0).contains(&v) => Some((-v) as i32),
            _ => None,
        };
        let wall = self.wall(s.begin);
        let (end, mono) = (self.wall(s.end), self.mono(s.begin));
        let (host, end_kind) = (self.keys.host, self.keys.ends[s.end_kind as usize]);
        let base = self.out.conn_base;
        let o = &mut self.out;
        let b = o.syscalls.at(&mut o.strings, host, wall)?;
        b.host.push(host);
        b.run.push(run);
        b.pid.append_value(pid);
        b.tid.append_value(tid);
        b.thread.push(name);
        b.nr.append_value(s.nr as i32);
        b.name.push(sys_name);
        b.start_ns.append_value(wall);
        b.end_ns.append_value(end);
        b.start_mono_ns.append_value(mono);
        b.duration_ns
            .append_option(s.entered.then(|| s.end.saturating_sub(s.begin) as i64));
        b.ret.append_option(s.ret);
        b.error.append_value(errno.is_some());
        b.errno.append_option(errno);
        b.bytes
            .append_value((s.bytes_read + s.bytes_written) as i64);
        b.bytes_read.append_value(s.bytes_read as i64);
        b.bytes_written.append_value(s.bytes_written as i64);
        b.requested.append_value(s.requested as i64);
        b.fd.append_option(s.fd);
        b.connection.append_option(s.conn.map(|c| c as i64 + base));
        b.new_connection
            .append_option(s.new_conn.map(|c| c as i64 + base));
        b.call_id.append_option(call);
        b.end_kind.push(end_kind);
        b.row();
        Ok(())
    }

    fn link(&mut self, l: &Link) -> Result<()> {
        let (from, to) = (&self.threads[l.from as usize], &self.threads[l.to as usize]);
        let (kind, conn) = match l.kind {
            LinkKind::Wakeup => (self.keys.wakeup, None),
            LinkKind::Handoff { conn } => {
                self.max_conn = self.max_conn.max(conn);
                (self.keys.handoff, Some(conn as i64 + self.out.conn_base))
            }
        };
        let (fr, fp, ft) = (from.run, from.pid, from.tid);
        let (tr, tp, tt) = (to.run, to.pid, to.tid);
        let wall = self.wall(l.send);
        let (recv, mono) = (self.wall(l.recv), self.mono(l.send));
        let host = self.keys.host;
        let o = &mut self.out;
        let b = o.links.at(&mut o.strings, host, wall)?;
        b.host.push(host);
        b.kind.push(kind);
        b.sender_run.push(fr);
        b.sender_pid.append_value(fp);
        b.sender_tid.append_value(ft);
        b.receiver_run.push(tr);
        b.receiver_pid.append_value(tp);
        b.receiver_tid.append_value(tt);
        b.send_ns.append_value(wall);
        b.recv_ns.append_value(recv);
        b.send_mono_ns.append_value(mono);
        b.send_cpu.append_value(l.send_cpu as i32);
        b.recv_cpu.append_value(l.recv_cpu as i32);
        b.connection.append_option(conn);
        b.bytes.append_value(l.bytes as i64);
        b.row();
        Ok(())
    }

    /// Calls still waiting for their split had no interval after them: the thread was
    /// at its last close.
    fn finish(&mut self) -> Result<()> {
        for r in 0..self.threads.len() {
            let pend = std::mem::take(&mut self.threads[r].pending);
            let cum = self.threads[r].cum;
            for q in &pend {
                self.call_row(&q.row, &q.at, &cum)?;
            }
        }
        Ok(())
    }
}
