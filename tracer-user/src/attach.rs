//! Which traced process has which probes, and since when. Probes are inherited by the
//! processes a probed one creates after they were attached; a process it created before
//! (found at attach, or forked while the probes were being attached) gets its own.
//! Counting mode's uprobe sessions in a library are one process's each, which its forks
//! do not inherit: their calls are counted by an entry probe that forks do inherit, and
//! a fork gets a session of its own to time them once it is seen.

use std::collections::HashMap;

use anyhow::Result;
use trace_file::Probe;

use symbolizer::{Exit, Language};

use crate::{
    clock,
    kernel::{Kernel, Prog},
    probes::{Point, Resolved},
    procfs,
    tree::Fork,
};

/// The probes of one process: (function id, CLOCK_MONOTONIC span of their attachment).
type Attached = Vec<(u32, u64, u64)>;

/// How many exited processes' probes are remembered for the children whose creation is
/// drained after their exit: far more than one drain's worth of exits.
const GONE: usize = 4096;

/// What of a function's probe [`Probes::attach_one`] attaches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Whole,
    /// The session of a process whose counter is in place (inherited).
    Session,
    /// The counter of a process whose session is in place (an exec removed the counter).
    Counter,
}

/// See the module's documentation.
pub struct Probes {
    resolved: Vec<Resolved>,
    inherit: bool,
    /// Probes attached as machine-wide uprobe sessions (the programs keep to traced
    /// processes): every process has them, forks included, from the start.
    everywhere: std::collections::HashSet<usize>,
    /// Probes attached as uprobe sessions of one process each, which its forks do not
    /// inherit; with `inherit`, their calls counted apart, by probes forks inherit.
    per_process: std::collections::HashSet<usize>,
    by_process: HashMap<u32, Attached>,
    /// The probes of the processes that exited last: the rings are drained one CPU after
    /// another, so a process's exit can be read before the creation of a child it made.
    gone: std::collections::VecDeque<(u32, Attached)>,
    /// Processes that got probes after they had started (calls before were not seen).
    pub late: u64,
    /// Processes forked while their parent's probes were being attached: whether they
    /// inherited them is not known, and they were left as they were.
    pub uncertain: u64,
    /// Processes that inherited probes from a process that had inherited them itself: the
    /// kernel (seen on 6.18) drops most of such processes' breakpoints, `perf record -p`'s
    /// as well, so their calls may be missing. Said, since it cannot be seen.
    pub second_hand: u64,
    /// Processes whose exec removed their perf events (it raised their privileges), so
    /// their probes were attached again: calls before that were not seen.
    pub exec_dropped: u64,
    /// Probes not attached to a process that exited while they were being attached.
    pub exited_while_attaching: u64,
    /// Recording: the Go binaries (and the process, 0 for all) whose goroutine status
    /// changes are probed, for the state split of Go calls; `None` when counting.
    go_status: Option<std::collections::HashSet<(std::path::PathBuf, u32)>>,
}

impl Probes {
    /// Whether Go's goroutine status changes are recorded (some Go function is probed).
    pub fn go_status(&self) -> bool {
        self.go_status.as_ref().is_some_and(|d| !d.is_empty())
    }

    /// Attaches every function to the processes it was resolved for (`launched` stands
    /// for the launched command); returns the probes and the probe table.
    pub fn attach(
        kernel: &mut Kernel,
        resolved: Vec<Resolved>,
        launched: Option<u32>,
        inherit: bool,
        empty: bool,
        recording: bool,
    ) -> Result<(Probes, Vec<Probe>)> {
        let mut p = Probes {
            resolved,
            inherit,
            everywhere: Default::default(),
            per_process: Default::default(),
            by_process: HashMap::new(),
            gone: Default::default(),
            late: 0,
            uncertain: 0,
            second_hand: 0,
            exec_dropped: 0,
            exited_while_attaching: 0,
            go_status: recording.then(Default::default),
        };
        let mut table = Vec::new();
        if p.resolved.is_empty() {
            return Ok((p, table));
        }
        kernel.empty_probes(empty);
        check_descriptors(&p.resolved)?;
        for i in 0..p.resolved.len() {
            if let Point::Usdt(u) = &p.resolved[i].point {
                kernel.set_usdt_spec(i as u32 + 1, &crate::probes::usdt_spec(u))?;
            }
            let id = i as u32 + 1;
            let pids: Vec<u32> = (p.resolved[i].pids.iter())
                .filter_map(|pid| pid.or(launched))
                .collect();
            for pid in pids {
                match p.attach_one(kernel, i, pid, Part::Whole) {
                    Ok(()) => {}
                    // Exited since it was found (a worker replaced while the tree was
                    // walked): there is nothing left to probe, and its end is recorded.
                    Err(_) if !procfs::alive(pid) => p.exited_while_attaching += 1,
                    Err(e) => {
                        return Err(e.context(format!("probing {}", p.resolved[i].point.name())))
                    }
                }
            }
            table.push(crate::probes::table_entry(id, &p.resolved[i].point));
        }
        Ok((p, table))
    }

    fn attach_one(&mut self, kernel: &mut Kernel, i: usize, pid: u32, part: Part) -> Result<()> {
        let id = i as u32 + 1;
        let start = clock::monotonic_ns();
        let everywhere = self.machine_wide(kernel, i, pid);
        if everywhere && !self.everywhere.insert(i) {
            // Attached already, for every process.
            self.by_process.entry(pid).or_default().push((id, 0, 0));
            return Ok(());
        }
        // Every call's return probed anyway (`--exact-latency`): in a library, a uretprobe
        // that forks inherit times their calls from the first, where a session is the
        // process's alone.
        let sessions =
            kernel.sessions() && (everywhere || !(self.inherit && kernel.every_call_timed()));
        let how = How {
            target: if everywhere { 0 } else { pid },
            sessions,
            apart: !everywhere && sessions && self.inherit,
            inherit: self.inherit,
            part,
        };
        let point = &self.resolved[i].point;
        if let Point::Function(f) = point {
            if f.exit == Exit::Uretprobe && sessions && !everywhere {
                self.per_process.insert(i);
            }
        }
        if !attach_point(kernel, id, point, &how)? {
            return Ok(());
        }
        // A Go function's calls are split by where their goroutine's time went: its
        // binary's goroutine status changes are probed with it, once.
        if let (Some(done), Point::Function(f)) = (&mut self.go_status, point) {
            if let Some(off) = f.go_status {
                if done.insert((f.binary.clone(), how.target)) {
                    let (target, inherit) = (how.target, self.inherit);
                    kernel.attach_probe(
                        Prog::GoStatus,
                        &f.binary,
                        off,
                        None,
                        0,
                        target,
                        inherit,
                    )?;
                }
            }
        }
        let end = clock::monotonic_ns();
        self.by_process
            .entry(pid)
            .or_default()
            .push((id, start, end));
        Ok(())
    }

    /// Whether function `i` is probed machine-wide for process `pid`: on a process's own
    /// executable, the programs keeping to traced processes, so that its forks (and, with
    /// a traced cgroup, the processes entering it) are probed before they run. In a
    /// library, for this process only: a machine-wide probe there would trap every
    /// process on the machine.
    fn machine_wide(&self, kernel: &Kernel, i: usize, pid: u32) -> bool {
        let point = &self.resolved[i].point;
        (match point {
            Point::Function(f) if f.exit != Exit::Uretprobe => kernel.machine_wide(),
            Point::Function(_) => kernel.sessions() || kernel.machine_wide(),
            Point::Usdt(_) => false,
        }) && procfs::exe_identity(pid) == file_identity(point.binary())
    }

    /// A process created by a traced one: its parent's probes that existed when it was
    /// created are its by inheritance; the others are attached now.
    pub fn adopt(&mut self, kernel: &mut Kernel, fork: &Fork) -> Result<()> {
        if !self.inherit || self.resolved.is_empty() {
            return Ok(());
        }
        if self.everywhere.len() == self.resolved.len() {
            // Every probe is machine-wide: the child has them all, whoever its parent.
            let all = (1..=self.resolved.len() as u32)
                .map(|id| (id, 0, 0))
                .collect();
            self.by_process.insert(fork.child, all);
            return Ok(());
        }
        let Some(parent) = fork.parent else {
            // Its parent is not known here: created while recording too (its creation
            // drained after this one's) or gone already, so whatever probes this one
            // has, it has second hand.
            self.second_hand += 1;
            return Ok(());
        };
        let known = (self.by_process.get(&parent))
            .or_else(|| self.gone.iter().rev().find(|g| g.0 == parent).map(|g| &g.1));
        let Some(parent) = known.cloned() else {
            // Its parent had no probes of its own to give (its creation was not known
            // either): whatever this one has, it has second hand.
            self.second_hand += 1;
            return Ok(());
        };
        let mut inherited = Attached::new();
        let mut missing = Vec::new();
        // Probes whose counter it inherited (or may have), and whose session it needs.
        let mut untimed = Vec::new();
        let mut uncertain = false;
        for &(id, start, end) in &parent {
            let session = self.per_process.contains(&(id as usize - 1));
            if fork.ts > end {
                inherited.push((id, 0, 0));
            } else if fork.ts < start {
                missing.push(id);
                continue;
            } else {
                uncertain = true;
            }
            if session {
                untimed.push(id);
            }
        }
        self.uncertain += uncertain as u64;
        // Inherited entries carry no attachment span; machine-wide ones are no one's
        // inheritance.
        let everywhere = &self.everywhere;
        self.second_hand += (parent.iter())
            .any(|&(id, s, e)| (s, e) == (0, 0) && !everywhere.contains(&(id as usize - 1)))
            as u64;
        self.by_process.insert(fork.child, inherited);
        // A process that exited already is no error: it has nothing left to probe.
        for id in untimed {
            let _ = self.attach_one(kernel, id as usize - 1, fork.child, Part::Session);
        }
        if !missing.is_empty() {
            self.late += 1;
            for id in missing {
                let _ = self.attach_one(kernel, id as usize - 1, fork.child, Part::Whole);
            }
        }
        Ok(())
    }

    /// A process that entered a traced cgroup: every probe in a file it maps (its
    /// executable, its libraries) is attached to it.
    pub fn adopt_newcomer(&mut self, kernel: &mut Kernel, pid: u32) -> Result<()> {
        self.by_process.entry(pid).or_default();
        self.executed(kernel, pid)
    }

    /// A traced process executed a program (or entered a traced cgroup): the probes in
    /// the files it maps now that it does not have yet are attached. Its libraries are
    /// mapped by its loader a moment after the program: those mapped later are missed.
    /// An exec that removed the process's perf events (the programs say so) took the
    /// uprobes it had as perf events with them: those are attached again, mapped yet or
    /// not (a uprobe takes effect when its file is mapped).
    pub fn executed(&mut self, kernel: &mut Kernel, pid: u32) -> Result<()> {
        let dropped = kernel.exec_dropped_probes(pid);
        let Some(has) = self.by_process.get_mut(&pid) else {
            return Ok(());
        };
        let mut again = Vec::new();
        if dropped {
            // A session is a link, not a perf event; its counter, with `inherit`, is one.
            let links = |i: usize| {
                self.everywhere.contains(&i) || (self.per_process.contains(&i) && !self.inherit)
            };
            has.retain(|a| {
                let i = a.0 as usize - 1;
                if !links(i) {
                    again.push(i);
                }
                links(i)
            });
            self.exec_dropped += 1;
        }
        let has = &self.by_process[&pid];
        let missing: Vec<usize> = (0..self.resolved.len())
            .filter(|&i| !has.iter().any(|a| a.0 == i as u32 + 1))
            .filter(|&i| {
                again.contains(&i) || procfs::maps_file(pid, self.resolved[i].point.binary())
            })
            .collect();
        for i in missing {
            let part = match again.contains(&i) && self.per_process.contains(&i) {
                true => Part::Counter,
                false => Part::Whole,
            };
            // One that exited already has nothing left to probe.
            let _ = self.attach_one(kernel, i, pid, part);
        }
        Ok(())
    }

    /// Forgets a process that exited.
    pub fn exited(&mut self, pid: u32) {
        if let Some(had) = self.by_process.remove(&pid) {
            if self.gone.len() == GONE {
                self.gone.pop_front();
            }
            self.gone.push_back((pid, had));
        }
    }
}

/// A file's (device, inode), as `procfs::exe_identity` gives a process's executable.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

/// Refuses, before anything is attached, probes that would not fit in the file
/// descriptors this process may open: each probe of a process holds one (its perf event),
/// and the first of each place two more (its anchor and link). Found out while attaching,
/// the refusal came after detaching what was attached, one kernel grace period each
/// (minutes for `libc:*`: docs/performance.md).
fn check_descriptors(resolved: &[Resolved]) -> Result<()> {
    let needed: usize = resolved
        .iter()
        .map(|r| {
            let probes = match &r.point {
                Point::Function(f) => match &f.exit {
                    Exit::Uretprobe => 2,
                    Exit::Returns { rets, tails } => 1 + rets.len() + tails.len(),
                    _ => 1,
                },
                Point::Usdt(_) => 1,
            };
            probes * (r.pids.len() + 2)
        })
        .sum();
    let limit = procfs::open_files_limit();
    let room = limit.saturating_sub(procfs::open_files() + 256);
    anyhow::ensure!(
        needed <= room,
        "probing {} places would hold up to {needed} file descriptors, more than the {room} left of this process's limit ({limit}, `ulimit -n`): probe fewer (a narrower glob)",
        resolved.len()
    );
    Ok(())
}

/// How [`attach_point`] attaches a function's probes.
struct How {
    /// The process probed, 0 for every process running the file.
    target: u32,
    /// Counting mode's uprobe sessions are used.
    sessions: bool,
    /// A session only times: the calls are counted by an entry probe forks inherit.
    apart: bool,
    inherit: bool,
    part: Part,
}

/// The cookie of program `prog` for function `id` probed at `point`.
fn cookie(prog: Prog, id: u32, point: &Point, apart: bool) -> u64 {
    let ret_i32 = match point {
        Point::Function(f) if f.returns_i32 => tracer_abi::COOKIE_RET_I32,
        _ => 0,
    };
    match (prog, point) {
        (
            Prog::FrameEntry
            | Prog::FrameReturn
            | Prog::FrameTail
            | Prog::FrameThrough
            | Prog::FrameThroughTail,
            Point::Function(f),
        ) if f.stacks_switch => id as u64 | tracer_abi::COOKIE_STACKS_SWITCH | ret_i32,
        (Prog::Session, _) if apart => id as u64 | tracer_abi::COOKIE_COUNTED_APART | ret_i32,
        _ => id as u64 | ret_i32,
    }
}

/// Attaches the probes of function `id` at `point` as `how` says; false when only a
/// session was asked for (the process's counter being in place already).
fn attach_point(kernel: &mut Kernel, id: u32, point: &Point, how: &How) -> Result<bool> {
    let binary = point.binary().to_path_buf();
    let mut at = |prog, offset, ref_ctr| {
        let cookie = cookie(prog, id, point, how.apart);
        kernel.attach_probe(
            prog,
            &binary,
            offset,
            ref_ctr,
            cookie,
            how.target,
            how.inherit,
        )
    };
    let part = how.part;
    match point {
        // Counting mode: a session, the return probed only when the entry asks.
        Point::Function(f) if f.exit == Exit::Uretprobe && how.sessions => {
            if how.apart && part != Part::Session {
                at(Prog::Count, f.file_offset, None)?;
            }
            if part != Part::Counter {
                at(Prog::Session, f.file_offset, None)?;
            }
            if part == Part::Session {
                return Ok(false);
            }
        }
        // Returns first: a call whose entry is recorded then always has its return
        // probed, where the other order leaves the calls entered in between open until
        // the end.
        Point::Function(f) => match &f.exit {
            Exit::Returns { rets, .. } if f.language == Language::Go => {
                for &r in rets {
                    at(Prog::GoReturn, r, None)?;
                }
                // An entry probe placed past the first instruction is on the stack
                // check's branch (see symbolizer's Go placement).
                let entry = match f.skipped {
                    0 => Prog::GoEntry,
                    _ => Prog::GoEntryCheck,
                };
                at(entry, f.file_offset, None)?;
            }
            Exit::Returns { rets, tails } => {
                // A function whose entry probe's instruction leaves it has one probe for
                // both.
                let entry = f.file_offset;
                for &r in rets {
                    match r == entry {
                        true => at(Prog::FrameThrough, r, None)?,
                        false => at(Prog::FrameReturn, r, None)?,
                    }
                }
                for &t in tails {
                    match t == entry {
                        true => at(Prog::FrameThroughTail, t, None)?,
                        false => at(Prog::FrameTail, t, None)?,
                    }
                }
                if !rets.contains(&entry) && !tails.contains(&entry) {
                    at(Prog::FrameEntry, entry, None)?;
                }
            }
            _ => {
                at(Prog::Return, f.file_offset, None)?;
                at(Prog::Entry, f.file_offset, None)?;
            }
        },
        Point::Usdt(u) => {
            let sem = (u.semaphore_offset != 0).then_some(u.semaphore_offset);
            at(Prog::Usdt, u.file_offset, sem)?;
        }
    }
    Ok(true)
}
