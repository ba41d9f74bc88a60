//! `--trigger FUNC>DURATION`: the recording ends a set time after the first call that slow,
//! timed from the records as they are drained, so a flight recorder's files hold what led
//! to it.

use std::{collections::HashMap, time::Duration};

use anyhow::{anyhow, bail, Result};
use trace_file::Event;

use crate::probes::Resolved;

/// The recording ends `after` the first call of `func` that took at least `min`.
#[derive(Clone, Debug)]
pub struct Trigger {
    pub func: String,
    pub min: Duration,
    pub after: Duration,
}

impl Trigger {
    /// `spec` is `FUNC>DURATION`, e.g. `handle_request>50ms`.
    pub fn parse(spec: &str, after: Duration) -> Result<Trigger> {
        let Some((func, min)) = spec.rsplit_once('>') else {
            bail!("invalid trigger `{spec}` (use FUNC>DURATION, e.g. handle_request>50ms)");
        };
        let func = func.trim();
        if func.is_empty() {
            bail!("invalid trigger `{spec}`: no function before `>`");
        }
        Ok(Trigger {
            func: func.to_string(),
            min: crate::cli::parse_duration(min).map_err(|e| anyhow!(e))?,
            after,
        })
    }
}

/// Who makes a call: a thread, or for Go a goroutine (it may change threads).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Caller {
    Thread(u32),
    Goroutine(u64),
}

/// Times the calls of the function a trigger watches.
pub struct Watch {
    func: u32,
    name: String,
    min_ns: u64,
    pub after: Duration,
    /// Entry times of calls under way, per thread, or per goroutine for Go (a stack: calls
    /// may nest), with their frame's stack pointer when their returns are probed at
    /// their instructions (0 otherwise).
    open: HashMap<Caller, Vec<(u64, u64)>>,
    /// The first call that took long enough: (thread, ns).
    fired: Option<(u32, u64)>,
}

impl Watch {
    /// Watches `t`'s function among the `resolved` probes (probe ids are their index + 1).
    pub fn new(t: &Trigger, resolved: &[Resolved]) -> Result<Watch> {
        let names: Vec<String> = resolved.iter().map(|r| r.point.name()).collect();
        let Some(i) = names.iter().position(|n| *n == t.func) else {
            bail!(
                "--trigger: `{}` is not a probed function (probed: {})",
                t.func,
                names.join(", ")
            );
        };
        Ok(Watch {
            func: i as u32 + 1,
            name: t.func.clone(),
            min_ns: t.min.as_nanos().min(u64::MAX as u128) as u64,
            after: t.after,
            open: HashMap::new(),
            fired: None,
        })
    }

    /// One drained record.
    pub fn see(&mut self, ts: u64, tid: u32, event: &Event) {
        match *event {
            Event::FuncEntry { func } if func == self.func => {
                self.entry(Caller::Thread(tid), ts, 0)
            }
            Event::FrameEntry { func, sp, .. } if func == self.func => {
                self.entry(Caller::Thread(tid), ts, sp)
            }
            Event::GoEntry { func, g, .. } if func == self.func => {
                self.entry(Caller::Goroutine(g), ts, 0)
            }
            Event::FuncExit { func, .. } if func == self.func => {
                self.exit(Caller::Thread(tid), tid, ts, 0)
            }
            Event::FrameExit { func, sp, .. } if func == self.func => {
                self.exit(Caller::Thread(tid), tid, ts, sp)
            }
            Event::GoExit { func, g, .. } if func == self.func => {
                self.exit(Caller::Goroutine(g), tid, ts, 0)
            }
            Event::Exit { .. } => {
                // A thread that exits inside a call never returns from it.
                self.open.remove(&Caller::Thread(tid));
            }
            _ => {}
        }
    }

    /// A call entered at `ts`, its frame at `sp` (0: not known): calls whose frame is at
    /// or below it are over (left by an exception).
    fn entry(&mut self, who: Caller, ts: u64, sp: u64) {
        let open = self.open.entry(who).or_default();
        if sp != 0 {
            while open.pop_if(|c| c.1 != 0 && c.1 <= sp).is_some() {}
        }
        open.push((ts, sp));
    }

    /// A call left at `ts` from the frame at `sp` (0: not known, the innermost call).
    fn exit(&mut self, who: Caller, tid: u32, ts: u64, sp: u64) {
        let Some(open) = self.open.get_mut(&who) else {
            return;
        };
        if sp != 0 {
            while open.pop_if(|c| c.1 != 0 && c.1 < sp).is_some() {}
            if open.last().is_none_or(|c| c.1 != sp) {
                return;
            }
        }
        let Some((entry, _)) = open.pop() else {
            return;
        };
        let ns = ts.saturating_sub(entry);
        if ns >= self.min_ns && self.fired.is_none() {
            self.fired = Some((tid, ns));
        }
    }

    /// The call that fired it, once one has: (thread, ns), and the function's name.
    pub fn fired(&self) -> Option<(u32, u64, &str)> {
        self.fired.map(|(tid, ns)| (tid, ns, self.name.as_str()))
    }
}
