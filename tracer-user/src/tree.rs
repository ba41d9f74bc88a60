//! The traced process tree as the records tell it: which processes are alive, which
//! process each thread belongs to, and which processes were created while recording (so
//! they get their probes and their Process chunk).

use std::collections::{BTreeSet, HashMap, HashSet};

use trace_file::{Event, ThreadInfo};

/// A process created by a traced one while recording.
#[derive(Clone, Copy, Debug)]
pub struct Fork {
    /// CLOCK_MONOTONIC of its creation.
    pub ts: u64,
    /// The process that created it, if its thread was known (its own creation can be
    /// drained after this one's: the rings are read one CPU after another).
    pub parent: Option<u32>,
    /// It was not created by a traced process: it entered a traced cgroup (its record is
    /// its own).
    pub newcomer: bool,
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
    /// Processes that executed a new program since then.
    execs: Vec<u32>,
    /// Threads, and processes, whose exit came before their creation in this drain (see
    /// [`Tree::settle`]).
    early_exits: HashSet<u32>,
    early_group_exits: HashSet<u32>,
}

/// What changed in the tree since the last look.
#[derive(Debug, Default)]
pub struct Changes {
    /// Processes created.
    pub forks: Vec<Fork>,
    /// Processes gone.
    pub exits: Vec<u32>,
    /// Processes that executed a new program (it may have probes of its own).
    pub execs: Vec<u32>,
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
                let newcomer = tid == child_tid;
                let parent = match newcomer {
                    true => None,
                    false => self.tgid_of.get(&tid).copied(),
                };
                self.threads += 1;
                // Already gone: nothing to remember it by.
                if !self.early_exits.remove(&child_tid) {
                    self.tgid_of.insert(child_tid, child_tgid);
                }
                if !self.live.contains(&child_tgid) {
                    self.processes += 1;
                    self.forks.push(Fork {
                        ts,
                        parent,
                        newcomer,
                        child: child_tgid,
                    });
                    if self.early_group_exits.remove(&child_tgid) {
                        // Its Process chunk is written all the same; its probes forgotten.
                        self.exits.push(child_tgid);
                    } else {
                        self.live.insert(child_tgid);
                    }
                }
            }
            Event::Exec { .. } => {
                // After an exec the thread is its process's only one, with the process id:
                // from a thread other than the main one, its tid changed to that id (and
                // the main thread's exit took that id out of this table).
                self.tgid_of.insert(tid, tid);
                self.execs.push(tid);
            }
            Event::Exit { tgid, group_dead } => {
                if self.tgid_of.remove(&tid).is_none() {
                    self.early_exits.insert(tid);
                }
                if group_dead {
                    if self.live.remove(&tgid) {
                        self.exits.push(tgid);
                    } else {
                        self.early_group_exits.insert(tgid);
                    }
                }
            }
            _ => {}
        }
    }

    /// Ends a drain. The rings are read one CPU after another, so a thread created on one
    /// CPU and gone on another within one drain can show its exit before its creation,
    /// which would leave it known and alive for ever: such exits wait for their creation,
    /// which is in this drain (a thread's creation is in its CPU's ring before it first
    /// runs). What is left is the exit of a thread never known (its creation lost, and
    /// counted so): forgotten, so that nothing here grows with time.
    pub fn settle(&mut self) {
        self.early_exits.clear();
        self.early_group_exits.clear();
    }

    /// What changed since the last call.
    pub fn take_changes(&mut self) -> Changes {
        Changes {
            forks: std::mem::take(&mut self.forks),
            exits: std::mem::take(&mut self.exits),
            execs: std::mem::take(&mut self.execs),
        }
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
            host_tid: None,
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
        let Changes { forks, exits, .. } = t.take_changes();
        assert_eq!(forks.len(), 1);
        assert_eq!(
            (forks[0].ts, forks[0].parent, forks[0].child),
            (6, Some(10), 20)
        );
        assert!(exits.is_empty() && t.take_changes().forks.is_empty());
        // A process that entered a traced cgroup says so itself, with no parent; a thread
        // of a process not seen yet brings its process.
        t.see(9, 30, &new(30, 30));
        t.see(9, 41, &new(41, 40));
        let forks = t.take_changes().forks;
        let got: Vec<_> = forks.iter().map(|f| (f.parent, f.child)).collect();
        assert_eq!(got, [(None, 30), (None, 40)]);
        assert_eq!((t.processes, t.threads), (4, 6));
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
        assert_eq!(t.live().iter().copied().collect::<Vec<_>>(), [10, 30, 40]);
        t.see(
            10,
            30,
            &Event::Exec {
                comm: Comm::default(),
            },
        );
        let changes = t.take_changes();
        assert_eq!((changes.exits, changes.execs), (vec![20], vec![30]));
    }

    /// A thread and a process created on one CPU and gone on another, their exits drained
    /// first: nothing of them stays behind.
    #[test]
    fn exits_drained_before_creations_leave_nothing() {
        let mut t = Tree::new(&[10], &[]);
        let new = |child_tid, child_tgid| Event::NewTask {
            child_tid,
            child_tgid,
            comm: Comm::default(),
        };
        let exit = |tgid, group_dead| Event::Exit { tgid, group_dead };
        // CPU 0's ring, then CPU 1's.
        t.see(20, 11, &exit(10, false));
        t.see(21, 30, &exit(30, true));
        t.see(10, 10, &new(11, 10));
        t.see(11, 10, &new(30, 30));
        t.settle();
        assert!(t.tgid_of.is_empty(), "{:?}", t.tgid_of);
        assert_eq!(t.live().iter().copied().collect::<Vec<_>>(), [10]);
        assert_eq!((t.processes, t.threads), (2, 2));
        let changes = t.take_changes();
        assert_eq!(changes.forks.len(), 1);
        assert_eq!(
            (changes.forks[0].parent, changes.forks[0].child),
            (None, 30)
        );
        assert_eq!(changes.exits, [30]);
        // An exit whose thread was never known is forgotten with the drain.
        t.see(30, 99, &exit(98, true));
        t.settle();
        assert!(t.early_exits.is_empty() && t.early_group_exits.is_empty());
    }
}
