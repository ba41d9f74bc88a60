//! Threads: their states from switches, wakeups and lifetimes, and how records find them.

use super::*;

impl Timeline {
    #[inline]
    pub(super) fn switch(&mut self, m: &Merged, next_tid: u32, prev_state: u32) {
        let t = m.time;
        if let Some(r) = self.lookup_on_cpu(m.ident, m.tid, m.cpu) {
            if self.rt[r as usize].seeded {
                self.seen_running(r, m.cpu);
            }
            use ThreadState::{Blocked, Io, Ready};
            if matches!(self.rt[r as usize].state, Ready | Blocked | Io) {
                self.stats.unseen_switch_ins += 1;
            }
            let s = ThreadState::from_prev_state(prev_state);
            self.set_state(r, s, t, None);
            if s == ThreadState::Exited {
                self.close_all(r, t, None, SpanEnd::Exited);
                if self.rt[r as usize].wake.take().is_some() {
                    self.stats.unresolved_wakeups += 1;
                }
            }
        }
        if let Some(r) = self.lookup_on_cpu(m.ident, next_tid, m.cpu) {
            self.run(r, t, m.cpu);
        }
    }

    #[inline]
    pub(super) fn wakeup(&mut self, m: &Merged, wakee: u32) {
        let t = m.time;
        let waker = self.lookup_on_cpu(m.ident, m.tid, m.cpu);
        if let Some(w) = waker {
            self.run(w, t, m.cpu);
        }
        if wakee == 0 {
            return;
        }
        let r = match self.lookup(m.ident, wakee) {
            Some(r) => r,
            None => {
                let tgid = self.guess_tgid(m.source, wakee);
                let name = self.late_name(m.source, wakee);
                let (pre, st) = (ThreadState::Unknown, ThreadState::Ready);
                self.register(m.source, wakee, tgid, name, t, pre, st, None)
            }
        };
        // Woken before it got off its CPU: no switch-in will follow.
        if self.rt[r as usize].state == ThreadState::Running {
            return;
        }
        self.set_state(r, ThreadState::Ready, t, None);
        let th = &mut self.rt[r as usize];
        if let Some(w) = waker.filter(|&w| w != r) {
            if th.wake.is_none() {
                th.wake = Some(Pending {
                    from: w,
                    send: t,
                    cpu: m.cpu,
                });
            }
        }
    }

    pub(super) fn new_task(&mut self, m: &Merged, child_tid: u32, child_tgid: u32, comm: Comm) {
        let t = m.time;
        self.acting(m);
        let known = self.lookup(m.ident, child_tid);
        let alive =
            known.is_some_and(|r| !matches!(self.rt[r as usize].state, ThreadState::Exited));
        if child_tid != 0 && !alive {
            let name = comm.as_str().into_owned();
            let (pre, st) = (ThreadState::NotCreated, ThreadState::Ready);
            self.register(m.source, child_tid, child_tgid, name, t, pre, st, None);
        }
    }

    pub(super) fn exec(&mut self, m: &Merged, comm: Comm) {
        let t = m.time;
        let r = self.acting(m);
        // The probed functions of the old program are gone with it.
        let th = &mut self.rt[r as usize];
        let stack = std::mem::take(&mut th.stack);
        self.close_stack(r, stack, t, Some(m.cpu), SpanEnd::Exited);
        let th = &mut self.threads[r as usize];
        th.name = comm.as_str().into_owned();
        // The process is the program it now runs (the name its file gave was the one
        // before: a launched command is the recorder until its exec).
        if th.tid == th.tgid {
            self.processes[th.process as usize]
                .name
                .clone_from(&th.name);
        }
    }

    /// Thread and process keys are per [`Source::identity`]: the files of one run share
    /// their threads. Records carry theirs ([`Merged::ident`]); this is for the rest.
    pub(super) fn ident(&self, source: u32) -> u32 {
        self.merger.sources()[source as usize].identity
    }

    /// The thread `tid` of the files standing as `ident`.
    #[inline]
    pub(super) fn lookup(&self, ident: u32, tid: u32) -> Option<ThreadRef> {
        if tid == 0 {
            return None;
        }
        self.by_tid.get(&key(ident, tid)).copied()
    }

    /// [`Timeline::lookup`] of a thread running on `cpu`, through the per-CPU cache.
    #[inline(always)]
    pub(super) fn lookup_on_cpu(&mut self, ident: u32, tid: u32, cpu: u32) -> Option<ThreadRef> {
        let k = key(ident, tid);
        if let Some(&(ck, r)) = self.on_cpu.get(cpu as usize) {
            // (tid 0 is never cached: `lookup` finds nothing for it.)
            if ck == k {
                return Some(r);
            }
        }
        self.lookup_on_cpu_miss(ident, tid, cpu)
    }

    #[inline(never)]
    pub(super) fn lookup_on_cpu_miss(
        &mut self,
        ident: u32,
        tid: u32,
        cpu: u32,
    ) -> Option<ThreadRef> {
        let k = key(ident, tid);
        let r = self.lookup(ident, tid)?;
        let c = cpu as usize;
        if self.on_cpu.len() <= c {
            self.on_cpu.resize(c + 1, (NO_KEY, 0));
        }
        self.on_cpu[c] = (k, r);
        Some(r)
    }

    /// The thread of a record that only a running, traced thread produces: registers it
    /// at first sight and corrects its state to running on the record's CPU.
    ///
    /// Inlined into every arm of [`Timeline::feed`], with the fast paths of
    /// [`Timeline::lookup_on_cpu`] and [`Timeline::run`]: nearly every record is that of
    /// its CPU's thread, already running there, and calls were a large share of this
    /// path's cost (docs/performance.md).
    #[inline(always)]
    pub(super) fn acting(&mut self, m: &Merged) -> ThreadRef {
        let r = match self.lookup_on_cpu(m.ident, m.tid, m.cpu) {
            Some(r) => r,
            None => return self.register_acting(m),
        };
        if self.rt[r as usize].seeded {
            self.seen_running(r, m.cpu);
        }
        self.run(r, m.time, m.cpu);
        r
    }

    /// Thread `r`, still in the state the recorder found it in, acts on `cpu` or is
    /// switched out from it without having been switched in: if it was found runnable
    /// (on a CPU or waiting for one, /proc does not tell), it was running there since
    /// (`tracer_abi::state_of_proc_letter`). A switch-in first would have said it waited.
    #[cold]
    pub(super) fn seen_running(&mut self, r: ThreadRef, cpu: u32) {
        let th = &mut self.rt[r as usize];
        th.seeded = false;
        if th.state == ThreadState::Ready {
            th.state = ThreadState::Running;
            th.cpu = Some(cpu);
            let time = th.since;
            self.out.push(Item::OnCpu {
                thread: r,
                time,
                cpu,
            });
        }
    }

    #[inline(never)]
    pub(super) fn register_acting(&mut self, m: &Merged) -> ThreadRef {
        let tgid = self.guess_tgid(m.source, m.tid);
        let name = self.late_name(m.source, m.tid);
        let (pre, st) = (ThreadState::Unknown, ThreadState::Running);
        self.register(m.source, m.tid, tgid, name, m.time, pre, st, Some(m.cpu))
    }

    /// Thread `r` runs on `cpu` from `t`: a pending wakeup link is received.
    #[inline(always)]
    pub(super) fn run(&mut self, r: ThreadRef, t: u64, cpu: u32) {
        let th = &self.rt[r as usize];
        if th.state == ThreadState::Running && th.cpu == Some(cpu) {
            return;
        }
        self.switch_in(r, t, cpu);
    }

    #[inline(never)]
    pub(super) fn switch_in(&mut self, r: ThreadRef, t: u64, cpu: u32) {
        self.set_state(r, ThreadState::Running, t, Some(cpu));
        if let Some(w) = self.rt[r as usize].wake.take() {
            self.stats.wakeup_links += 1;
            self.out.push(Item::Link(Link {
                kind: LinkKind::Wakeup,
                from: w.from,
                send: w.send,
                send_cpu: w.cpu,
                to: r,
                recv: t.max(w.send),
                recv_cpu: cpu,
                bytes: 0,
            }));
        }
    }

    pub(super) fn set_state(&mut self, r: ThreadRef, state: ThreadState, t: u64, cpu: Option<u32>) {
        let th = &mut self.rt[r as usize];
        if th.state == state && th.cpu == cpu {
            return;
        }
        // Never end an interval before it began (times of a file may precede its start).
        let t = t.max(th.since);
        if t > th.since {
            let m = &self.threads[r as usize];
            self.out.push(Item::State(StateInterval {
                thread: r,
                tid: m.tid,
                tgid: m.tgid,
                state: th.state,
                begin: th.since,
                end: t,
                cpu: th.cpu,
            }));
        }
        th.state = state;
        th.cpu = cpu;
        th.since = t;
        th.seeded = false;
        if let (ThreadState::Running, Some(cpu)) = (state, cpu) {
            self.out.push(Item::OnCpu {
                thread: r,
                time: t,
                cpu,
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn register(
        &mut self,
        source: u32,
        tid: u32,
        tgid: u32,
        name: String,
        t: u64,
        pre: ThreadState,
        state: ThreadState,
        cpu: Option<u32>,
    ) -> ThreadRef {
        let process = self.process_for(source, tgid, &name);
        let r = self.threads.len() as ThreadRef;
        let p = &mut self.processes[process as usize];
        let index_in_process = p.threads;
        p.threads += 1;
        self.threads.push(ThreadMeta {
            source,
            tid,
            tgid,
            process,
            index_in_process,
            name,
            first_seen: t,
        });
        self.rt.push(Rt {
            state,
            since: t,
            cpu,
            seeded: false,
            stack: Vec::new(),
            sys: None,
            wake: None,
        });
        let k = key(self.ident(source), tid);
        if self.by_tid.insert(k, r).is_some() {
            // A reused tid: its cached thread is the old one.
            for e in &mut self.on_cpu {
                if e.0 == k {
                    *e = (NO_KEY, 0);
                }
            }
        }
        self.stats.threads += 1;
        self.out.push(Item::Thread(r));
        if t > 0 {
            self.out.push(Item::State(StateInterval {
                thread: r,
                tid,
                tgid,
                state: pre,
                begin: 0,
                end: t,
                cpu: None,
            }));
        }
        if let (ThreadState::Running, Some(cpu)) = (state, cpu) {
            self.out.push(Item::OnCpu {
                thread: r,
                time: t,
                cpu,
            });
        }
        r
    }

    pub(super) fn process_for(&mut self, source: u32, tgid: u32, thread_name: &str) -> u32 {
        if let Some(&p) = self.by_tgid.get(&key(self.ident(source), tgid)) {
            return p;
        }
        let src: &Source = &self.merger.sources()[source as usize];
        let exe = src.processes.iter().find(|p| p.tgid == tgid).map(|p| {
            let base = p.exe.rsplit('/').next().unwrap_or(&p.exe);
            base.to_string()
        });
        let name = exe
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| thread_name.to_string());
        let p = self.processes.len() as u32;
        self.processes.push(ProcessMeta {
            source,
            tgid,
            name,
            threads: 0,
        });
        self.by_tgid.insert(key(self.ident(source), tgid), p);
        p
    }

    /// The process of a thread first seen through its own records: a late thread list
    /// may know it; a one-process recording can only be that process; otherwise a tid
    /// that names a process is its main thread.
    pub(super) fn guess_tgid(&self, source: u32, tid: u32) -> u32 {
        let src = &self.merger.sources()[source as usize];
        if let Some(i) = src.threads.iter().find(|i| i.tid == tid) {
            return i.tgid;
        }
        if let [only] = src.processes.as_slice() {
            return only.tgid;
        }
        tid
    }

    pub(super) fn late_name(&self, source: u32, tid: u32) -> String {
        let src = &self.merger.sources()[source as usize];
        match src.threads.iter().find(|i| i.tid == tid) {
            Some(i) => i.name.clone(),
            None => "unknown".to_string(),
        }
    }
}
