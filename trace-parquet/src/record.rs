//! Recordings to rows: a [`trace_merge::Consumer`] of one host's timeline writing `calls`,
//! `syscalls`, `states` and `links` as the items come, then `threads`, `processes`,
//! `probes` and `files` from what the timeline knows at its end.
//!
//! **A call's state split and self time** are [`trace_merge::call_time`]'s, as the
//! summary's are, so that summing the rows gives the summary's figures exactly (tests
//! compare them on random traces). A recursive function's nested activations have
//! `outermost = false`: the summary counts their time once, in the outermost.

use std::path::PathBuf;

use rustc_hash::FxHashMap;
use trace_merge::call_time::{
    CallStack, EndedCall, GoroutineClocks, GoroutineStacks, Split, StateClock, SPLIT,
};
use trace_merge::sysclass;
use trace_merge::timeline::{
    Item, Link, LinkKind, Span, SpanEnd, StateInterval, SyscallSpan, ThreadState, Timeline,
};
use trace_merge::{Consumer, InputReport, MergeOptions};

use crate::error::{Error, Result};
use crate::meta;
use crate::Out;

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

/// What a call under way carries to its row.
#[derive(Clone, Copy)]
struct Frame {
    id: i64,
    /// The first connection a system call made inside it operated on.
    conn: Option<u32>,
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
    /// Its time per state, and the rows that wait for their split.
    clock: StateClock<CallRow>,
    /// Migrations since its last interval was written: they count in the next (the
    /// interval they begin).
    migrations: i32,
    stack: CallStack<Frame>,
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
    /// Per source: probe id -> keys, for ids up to the number of the file's probes (sized
    /// by its probe table, not by the ids its records carry).
    funcs: Vec<Vec<Option<FuncKeys>>>,
    /// (source, probe id) -> keys, for the ids past that: ones no probe table defines.
    wild_funcs: FxHashMap<(u32, u32), FuncKeys>,
    /// System call number -> name key, for numbers below `MAX_SYSCALLS`.
    sys_names: Vec<Option<i32>>,
    /// System call number -> name key, for the others (a damaged record's).
    wild_sys_names: FxHashMap<u32, i32>,
    goroutines: GoroutineStacks<Frame>,
    /// Where the goroutines' time goes, for the files that recorded their status.
    go_clocks: GoroutineClocks,
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
        funcs: (sources.iter())
            .map(|s| vec![None; s.probes.len() + 1])
            .collect(),
        wild_funcs: FxHashMap::default(),
        sys_names: vec![None; tracer_abi::MAX_SYSCALLS as usize],
        wild_sys_names: FxHashMap::default(),
        goroutines: Default::default(),
        go_clocks: GoroutineClocks::for_files(sources.iter().map(|s| s.header.go_status)),
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
                th.migrations += th.clock.on_cpu(cpu) as i32;
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
            Item::GoStatus(c) => {
                let source = self.threads[c.thread as usize].source;
                let threads = &self.threads;
                let clock_of = |r: u32, t: u64| threads[r as usize].clock.entry(t);
                self.go_clocks.status(source, &c, clock_of);
                Ok(())
            }
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
            clock: StateClock::default(),
            migrations: 0,
            stack: CallStack::default(),
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

    /// The keys of probe `func` of file `source`, once made.
    #[inline]
    fn known_func(&self, source: u32, func: u32) -> Option<FuncKeys> {
        match self.funcs[source as usize].get(func as usize) {
            Some(k) => *k,
            None => self.wild_funcs.get(&(source, func)).copied(),
        }
    }

    fn func_keys(&mut self, source: u32, func: u32, tl: &Timeline) -> FuncKeys {
        if let Some(k) = self.known_func(source, func) {
            return k;
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
        match self.funcs[source as usize].get_mut(func as usize) {
            Some(slot) => *slot = Some(k),
            None => {
                self.wild_funcs.insert((source, func), k);
            }
        }
        k
    }

    #[inline]
    fn state(&mut self, s: &StateInterval) -> Result<()> {
        let r = s.thread as usize;
        for (row, split) in self.threads[r].clock.interval(s) {
            self.call_row(&row, &split)?;
        }
        let th = &mut self.threads[r];
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
        let at = th.clock.entry(time);
        th.stack.enter(Frame { id, conn: None }, func, time, at);
    }

    #[inline]
    fn func(&mut self, tl: &Timeline, span: &Span) -> Result<()> {
        let r = span.thread as usize;
        let Some(e) = self.threads[r].stack.end(span) else {
            return Ok(());
        };
        let row = self.ended(tl, span, &e);
        match self.threads[r].clock.end(row, &e.call.at, span.end) {
            Some(split) => self.call_row(&row, &split),
            None => Ok(()),
        }
    }

    /// The row of a call that ended, all but its split.
    #[inline]
    fn ended(&mut self, tl: &Timeline, span: &Span, e: &EndedCall<Frame>) -> CallRow {
        let source = self.threads[span.thread as usize].source;
        let keys = self.func_keys(source, e.call.func, tl);
        self.thread_name(tl, span.thread);
        CallRow {
            thread: span.thread,
            func: e.call.func,
            kind: keys.kind,
            id: e.call.key.id,
            parent: e.parent.map(|p| p.id),
            depth: span.depth,
            outer: e.call.outer,
            begin: e.call.begin,
            end: span.end,
            self_ns: e.self_ns,
            ret: span.ret,
            end_kind: self.keys.ends[span.end_kind as usize],
            goroutine: span.goroutine,
            conn: e.call.key.conn,
        }
    }

    /// Writes a `calls` row.
    #[inline]
    fn call_row(&mut self, c: &CallRow, split: &Split) -> Result<()> {
        let th = &self.threads[c.thread as usize];
        let (pid, tid, run, name, source) = (th.pid, th.tid, th.run, th.name.0, th.source);
        let f = (self.known_func(source, c.func)).expect("keys made at the call's end");
        let d = |k: usize| split[k] as i64;
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

    /// A Go call: on its goroutine's stack, with its goroutine's clock reading when the
    /// file recorded the goroutines' status.
    fn go_entry(&mut self, r: u32, time: u64, func: u32, g: u64) {
        let id = self.new_id();
        let source = self.threads[r as usize].source;
        let threads = &self.threads;
        let clock_of = |r: u32, t: u64| threads[r as usize].clock.entry(t);
        let at = self.go_clocks.reading(source, g, Some(r), time, clock_of);
        let frame = Frame { id, conn: None };
        self.goroutines.enter(source, g, frame, func, time, at);
    }

    /// A Go call ended: its row, its split from its goroutine's clock (zeros when its file
    /// did not record the goroutines' status).
    fn go_func(&mut self, tl: &Timeline, span: &Span) -> Result<()> {
        let source = self.threads[span.thread as usize].source;
        let Some(e) = self.goroutines.end(source, span) else {
            return Ok(());
        };
        let (g, threads) = (span.goroutine.unwrap_or(0), &self.threads);
        let clock_of = |r: u32, t: u64| threads[r as usize].clock.entry(t);
        let split = (self.go_clocks).since(source, g, &e.call.at, span.end, clock_of);
        let row = self.ended(tl, span, &e);
        self.call_row(&row, &split.unwrap_or([0; SPLIT]))
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
            parent: th.stack.calls().last().map(|f| f.key.id),
            depth: th.stack.calls().len() as u32,
            outer: true,
            begin: time,
            end: time,
            self_ns: 0,
            ret: None,
            end_kind: self.keys.hit,
            goroutine: None,
            conn: None,
        };
        self.call_row(&row, &[0; SPLIT])
    }

    #[inline]
    fn syscall(&mut self, tl: &Timeline, s: &SyscallSpan) -> Result<()> {
        let name = self.thread_name(tl, s.thread);
        let th = &mut self.threads[s.thread as usize];
        // The calls on the stack are about the connection this call operated on.
        if let Some(c) = s.conn.or(s.new_conn) {
            for f in th.stack.calls_mut().iter_mut().rev() {
                if f.key.conn.is_none() {
                    f.key.conn = Some(c);
                }
            }
        }
        for c in [s.conn, s.new_conn, s.replaced_conn].into_iter().flatten() {
            self.max_conn = self.max_conn.max(c);
        }
        let (pid, tid, run) = (th.pid, th.tid, th.run);
        let call = th.stack.calls().last().map(|f| f.key.id);
        let known = match self.sys_names.get(s.nr as usize) {
            Some(k) => *k,
            None => self.wild_sys_names.get(&s.nr).copied(),
        };
        let sys_name = match known {
            Some(k) => k,
            None => {
                let k = self.out.strings.key(&sysclass::name(s.nr));
                match self.sys_names.get_mut(s.nr as usize) {
                    Some(slot) => *slot = Some(k),
                    None => {
                        self.wild_sys_names.insert(s.nr, k);
                    }
                }
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

    /// Writes the rows still waiting for their split.
    fn finish(&mut self) -> Result<()> {
        for r in 0..self.threads.len() {
            for (row, split) in self.threads[r].clock.finish() {
                self.call_row(&row, &split)?;
            }
        }
        Ok(())
    }
}
