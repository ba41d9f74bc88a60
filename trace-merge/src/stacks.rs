//! The stacks of a trace (`tracer record --stacks`): each file's stack table, and which
//! stack a thread's time off the CPU belongs to.

use std::collections::HashMap;

use trace_file::{JitSymbol, KernelSymbol, Mapping, ProcessMappings, StackDef, StackTable};

use crate::timeline::{Sample, StateInterval, ThreadRef, ThreadState};

/// One file's stacks, with what names their frames: the processes' mappings, the
/// kernel's symbols and the JITs' ones, as the `Stacks` chunks read so far define them.
#[derive(Clone, Debug, Default)]
pub struct StackStore {
    defs: HashMap<u32, StackDef>,
    /// Per process, its mapping lists in the order read (later ones win).
    mappings: HashMap<u32, Vec<ProcessMappings>>,
    /// Kernel symbols, kept sorted by address.
    kernel: Vec<KernelSymbol>,
    /// Per process, the functions its JIT named, kept sorted by address.
    jit: HashMap<u32, Vec<JitSymbol>>,
}

impl StackStore {
    /// Adds the definitions of one `Stacks` chunk.
    pub fn absorb(&mut self, t: StackTable) {
        for s in t.stacks {
            self.defs.insert(s.id, s);
        }
        for m in t.mappings {
            self.mappings.entry(m.tgid).or_default().push(m);
        }
        if !t.kernel_symbols.is_empty() {
            self.kernel.extend(t.kernel_symbols);
            self.kernel.sort_by_key(|s| s.addr);
            self.kernel.dedup_by_key(|s| s.addr);
        }
        let mut touched = Vec::new();
        for j in t.jit_symbols {
            touched.push(j.tgid);
            self.jit.entry(j.tgid).or_default().push(j);
        }
        touched.sort_unstable();
        touched.dedup();
        for tgid in touched {
            if let Some(list) = self.jit.get_mut(&tgid) {
                // Stable: of two at one start, the later read stays after the earlier.
                list.sort_by_key(|s| s.start);
            }
        }
    }

    /// Stack `id`, if the file defines it.
    pub fn stack(&self, id: u32) -> Option<&StackDef> {
        self.defs.get(&id)
    }

    /// How many stacks are defined.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    /// Whether the file has no stacks.
    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// The mapping of process `tgid` that held `addr`: the latest list read that has one.
    pub fn mapping(&self, tgid: u32, addr: u64) -> Option<&Mapping> {
        let lists = self.mappings.get(&tgid)?;
        lists
            .iter()
            .rev()
            .find_map(|l| l.maps.iter().find(|m| (m.start..m.end).contains(&addr)))
    }

    /// The function of process `tgid`'s JIT code that `addr` is in: the one starting
    /// nearest below it (of code compiled again at one address, the latest read; the sort
    /// is stable).
    pub fn jit_symbol(&self, tgid: u32, addr: u64) -> Option<&JitSymbol> {
        let list = self.jit.get(&tgid)?;
        let i = list.partition_point(|s| s.start <= addr);
        let s = list.get(i.checked_sub(1)?)?;
        (addr < s.end).then_some(s)
    }

    /// The kernel function `addr` is in.
    pub fn kernel_symbol(&self, addr: u64) -> Option<&KernelSymbol> {
        let i = self.kernel.partition_point(|s| s.addr <= addr);
        let s = self.kernel.get(i.checked_sub(1)?)?;
        (addr < s.end).then_some(s)
    }
}

/// Which stack each thread blocked in: a thread's `BlockStack` comes just before the
/// switch that starts its time off the CPU, and stands for all of it, until it runs again.
#[derive(Debug, Default)]
pub struct Blocking {
    last: HashMap<ThreadRef, Sample>,
}

impl Blocking {
    /// Notes a sample; only blocking stacks matter here.
    pub fn note(&mut self, s: &Sample) {
        if !s.on_cpu {
            self.last.insert(s.thread, *s);
        }
    }

    /// The blocking stack a state interval's time goes under: for time off the CPU (not
    /// ready to run), the thread's last blocking stack taken before it began.
    pub fn stack_of(&mut self, iv: &StateInterval) -> Option<Sample> {
        match iv.state {
            ThreadState::Blocked | ThreadState::Io => {
                let s = self.last.get(&iv.thread)?;
                (s.time <= iv.begin).then_some(*s)
            }
            ThreadState::Running => {
                // It ran again since: that stack is over.
                if self.last.get(&iv.thread).is_some_and(|s| s.time < iv.begin) {
                    self.last.remove(&iv.thread);
                }
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time: u64, stack: u32, on_cpu: bool) -> Sample {
        Sample {
            thread: 0,
            time,
            cpu: 0,
            source: 0,
            stack,
            on_cpu,
            period: 0,
        }
    }

    fn interval(state: ThreadState, begin: u64, end: u64) -> StateInterval {
        StateInterval {
            thread: 0,
            tid: 1,
            tgid: 1,
            state,
            begin,
            end,
            cpu: None,
        }
    }

    #[test]
    fn time_off_the_cpu_goes_under_the_stack_it_blocked_in_until_it_runs_again() {
        let mut b = Blocking::default();
        // On-CPU samples say nothing of where it blocks.
        b.note(&sample(5, 1, true));
        assert_eq!(b.stack_of(&interval(ThreadState::Blocked, 10, 20)), None);
        b.note(&sample(9, 2, false));
        // The running time before the switch ends after the stack was taken: it stays.
        assert_eq!(b.stack_of(&interval(ThreadState::Running, 0, 10)), None);
        let blocked = b.stack_of(&interval(ThreadState::Blocked, 10, 20));
        assert_eq!(blocked.map(|s| s.stack), Some(2));
        // A blocked state cut in pieces: every piece is under it.
        let io = b.stack_of(&interval(ThreadState::Io, 20, 30));
        assert_eq!(io.map(|s| s.stack), Some(2));
        // Waiting for a CPU is not blocking.
        assert_eq!(b.stack_of(&interval(ThreadState::Ready, 30, 31)), None);
        // It ran again: the next blocked time needs a stack of its own.
        assert_eq!(b.stack_of(&interval(ThreadState::Running, 31, 40)), None);
        assert_eq!(b.stack_of(&interval(ThreadState::Blocked, 40, 50)), None);
    }

    #[test]
    fn addresses_find_the_latest_mapping_and_the_kernel_function_that_holds_them() {
        let mut s = StackStore::default();
        let map = |start, path: &str| Mapping {
            start,
            end: start + 0x1000,
            offset: 0,
            path: path.into(),
            build_id: None,
        };
        s.absorb(StackTable {
            stacks: vec![StackDef {
                id: 1,
                tgid: 7,
                ..Default::default()
            }],
            mappings: vec![ProcessMappings {
                tgid: 7,
                at_ns: 1,
                maps: vec![map(0x1000, "/old")],
            }],
            kernel_symbols: vec![KernelSymbol {
                addr: 0x100,
                end: 0x180,
                name: "schedule".into(),
            }],
            ..Default::default()
        });
        s.absorb(StackTable {
            mappings: vec![ProcessMappings {
                tgid: 7,
                at_ns: 2,
                maps: vec![map(0x1000, "/new"), map(0x3000, "/lib")],
            }],
            ..Default::default()
        });
        assert_eq!(s.len(), 1);
        assert!(s.stack(1).is_some() && s.stack(2).is_none());
        assert_eq!(s.mapping(7, 0x1800).unwrap().path, "/new");
        assert_eq!(s.mapping(7, 0x3000).unwrap().path, "/lib");
        assert!(s.mapping(7, 0x2000).is_none() && s.mapping(8, 0x1800).is_none());
        assert_eq!(s.kernel_symbol(0x17f).unwrap().name, "schedule");
        assert!(s.kernel_symbol(0x180).is_none() && s.kernel_symbol(0xff).is_none());
    }
}
