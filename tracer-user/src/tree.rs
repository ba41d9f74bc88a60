//! The traced process tree as the records tell it: which processes are alive, which
//! process each thread belongs to, and which processes were created while recording (so
//! they get their probes and their Process chunk).

use std::collections::{BTreeSet, HashMap};

use trace_file::{Event, ThreadInfo};

/// A process created by a traced one while recording.
#[derive(Clone, Copy, Debug)]
pub struct Fork {
    /// CLOCK_MONOTONIC of its creation.
    pub ts: u64,
    /// The process that created it, if its thread was known.
    pub parent: Option<u32>,
    pub child: u32,
}

/// See the module's documentation.
#[derive(Default)]
pub struct Tree {
    tgid_of: HashMap<u32, u32>,
    live: BTreeSet<u32>,
    /// Processes traced at any time.
    pub processes: u64,
    /// Threads traced at any time.
    pub threads: u64,
    /// Processes created since the last [`Tree::take_changes`].
    forks: Vec<Fork>,
    /// Processes gone since then.
    exits: Vec<u32>,
}

impl Tree {
    /// The tree at attach: `threads` of processes `pids`.
    pub fn new(pids: &[u32], threads: &[ThreadInfo]) -> Tree {
        let mut t = Tree::default();
        for &p in pids {
            t.live.insert(p);
        }
        for th in threads {
            t.tgid_of.insert(th.tid, th.tgid);
        }
        t.processes = t.live.len() as u64;
        t.threads = t.tgid_of.len() as u64;
        t
    }

    /// One drained record.
    pub fn see(&mut self, ts: u64, tid: u32, event: &Event) {
        match *event {
            Event::NewTask {
                child_tid,
                child_tgid,
                ..
            } => {
                self.tgid_of.insert(child_tid, child_tgid);
                self.threads += 1;
                if child_tid == child_tgid && self.live.insert(child_tgid) {
                    self.processes += 1;
                    self.forks.push(Fork {
                        ts,
                        parent: self.tgid_of.get(&tid).copied(),
                        child: child_tgid,
                    });
                }
            }
            Event::Exit { tgid, group_dead } => {
                self.tgid_of.remove(&tid);
                if group_dead && self.live.remove(&tgid) {
                    self.exits.push(tgid);
                }
            }
            _ => {}
        }
    }

    /// The processes created, and those gone, since the last call.
    pub fn take_changes(&mut self) -> (Vec<Fork>, Vec<u32>) {
        (
            std::mem::take(&mut self.forks),
            std::mem::take(&mut self.exits),
        )
    }

    /// Processes alive as far as the records tell.
    pub fn live(&self) -> &BTreeSet<u32> {
        &self.live
    }

    /// Forgets a process that /proc says is gone (its exit record was lost).
    pub fn gone(&mut self, pid: u32) {
        if self.live.remove(&pid) {
            self.exits.push(pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace_file::record::Comm;

    #[test]
    fn forks_exits_and_threads() {
        let threads = [ThreadInfo {
            tgid: 10,
            tid: 10,
            name: "master".into(),
            state: 'S',
        }];
        let mut t = Tree::new(&[10], &threads);
        let new = |child_tid, child_tgid| Event::NewTask {
            child_tid,
            child_tgid,
            comm: Comm::default(),
        };
        t.see(5, 10, &new(11, 10));
        t.see(6, 11, &new(20, 20));
        t.see(7, 20, &new(21, 20));
        assert_eq!((t.processes, t.threads), (2, 4));
        let (forks, exits) = t.take_changes();
        assert_eq!(forks.len(), 1);
        assert_eq!(
            (forks[0].ts, forks[0].parent, forks[0].child),
            (6, Some(10), 20)
        );
        assert!(exits.is_empty() && t.take_changes().0.is_empty());
        t.see(
            8,
            21,
            &Event::Exit {
                tgid: 20,
                group_dead: false,
            },
        );
        assert!(t.live().contains(&20));
        t.see(
            9,
            20,
            &Event::Exit {
                tgid: 20,
                group_dead: true,
            },
        );
        assert_eq!(t.live().iter().copied().collect::<Vec<_>>(), [10]);
        assert_eq!(t.take_changes().1, [20]);
    }
}
