//! Who runs when: state slices on the thread and CPU tracks, and the arrows between threads.

use trace_merge::timeline::{Link, LinkKind, StateInterval, ThreadState};

use super::json::{first, json_str, k, Json};
use super::tracks::state_colour;
use super::*;

impl<W: Write> Writer<W> {
    pub(super) fn state(&mut self, tl: &Timeline, s: &StateInterval) -> std::io::Result<()> {
        let Some(name) = state_name(s.state) else {
            return Ok(());
        };
        if let (ThreadState::Running, Some(cpu)) = (s.state, s.cpu) {
            if self.on_cpu.get(&cpu).is_some_and(|o| o.0 == s.thread) {
                self.on_cpu.remove(&cpu);
                self.cpu_slice(tl, cpu, s.thread, s.begin, s.end)?;
            }
        }
        let Some((begin, end)) = self.clip(s.begin, s.end).filter(|(b, e)| b < e) else {
            return Ok(());
        };
        let (host, p, _) = Self::ids(tl, s.thread);
        let t = state_tid(host, s.tid);
        let out = self.out.next()?;
        let j = Json(out)
            .head("X", "state", p, t, begin)
            .t(k!("dur"), end - begin)
            .q(k!("name"), name)
            .q(k!("cname"), state_colour(s.state));
        match s.cpu {
            Some(cpu) => j.raw(k!("args")).n(first!("cpu"), cpu as u64).raw("}}"),
            None => j.raw("}"),
        };
        self.states += 1;
        Ok(())
    }

    /// A thread starts running on a CPU: whoever the records last put there is gone.
    /// (When records are lost, a thread's running interval may not have ended yet; the
    /// CPU track stays one thread at a time.)
    pub(super) fn on_cpu(
        &mut self,
        tl: &Timeline,
        r: ThreadRef,
        t: u64,
        cpu: u32,
    ) -> std::io::Result<()> {
        match self.on_cpu.insert(cpu, (r, t)) {
            Some((x, begin)) if t > begin => self.cpu_slice(tl, cpu, x, begin, t),
            _ => Ok(()),
        }
    }

    pub(super) fn cpu_slice(
        &mut self,
        tl: &Timeline,
        cpu: u32,
        r: ThreadRef,
        begin: u64,
        end: u64,
    ) -> std::io::Result<()> {
        let Some((begin, end)) = self.clip(begin, end).filter(|(b, e)| b < e) else {
            return Ok(());
        };
        let th = tl.thread(r);
        let host = tl.merger().sources()[th.source as usize].node;
        let out = self.out.next()?;
        Json(out)
            .head("X", "cpu", cpus_pid(host), cpu as u64, begin)
            .t(k!("dur"), end - begin)
            .raw(k!("name"));
        json_str(out, &th.name);
        Json(out)
            .raw(k!("args"))
            .n(first!("tid"), th.tid as u64)
            .n(k!("pid"), th.tgid as u64)
            .raw("}}");
        self.cpus.insert((host, cpu));
        self.states += 1;
        Ok(())
    }

    /// A flow arrow; the caller has checked that both its ends are inside the window.
    pub(super) fn link(&mut self, tl: &Timeline, l: &Link) -> std::io::Result<()> {
        // The arrow starts in the sender's running slice, and ends at the slice
        // that begins where the receiver acts: its running slice for a wakeup, its
        // system call for a hand-off.
        let (from_host, p0, _) = Self::ids(tl, l.from);
        let (to_host, p1, to_calls) = Self::ids(tl, l.to);
        let t0 = state_tid(from_host, tl.thread(l.from).tid);
        let (cat, name, t1) = match l.kind {
            LinkKind::Wakeup => {
                let t1 = state_tid(to_host, tl.thread(l.to).tid);
                ("wakeup", "wakeup".to_owned(), t1)
            }
            LinkKind::Handoff { conn } => ("connection", format!("connection {conn}"), to_calls),
        };
        self.flows += 1;
        let id = self.flows;
        for (ph, p, t, ts) in [("s", p0, t0, l.send), ("f", p1, t1, l.recv)] {
            Json(self.out.next()?)
                .head(ph, cat, p, t, ts)
                .q(k!("name"), &name)
                .n(k!("id"), id)
                .raw("}");
        }
        Ok(())
    }
}
