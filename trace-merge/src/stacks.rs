//! The stacks of a trace (`tracer record --stacks`): each file's stack table, and which
//! stack a thread's time off the CPU belongs to.

use std::collections::HashMap;

use trace_file::{KernelSymbol, Mapping, ProcessMappings, StackDef, StackTable};

use crate::timeline::{Sample, StateInterval, ThreadRef, ThreadState};

/// One file's stacks, with what names their frames: the processes' mappings and the
/// kernel's symbols, as the `Stacks` chunks read so far define them.
#[derive(Clone, Debug, Default)]
pub struct StackStore {
    defs: HashMap<u32, StackDef>,
    /// Per process, its mapping lists in the order read (later ones win).
    mappings: HashMap<u32, Vec<ProcessMappings>>,
    /// Kernel symbols, kept sorted by address.
    kernel: Vec<KernelSymbol>,
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
