//! Stacks in the Trace Event Format (`tracer record --stacks`): the format's `samples`,
//! each naming a node of its `stackFrames` tree (`sf`), kept apart from the events and
//! written after them. On-CPU samples are named `cpu-clock` and weighted by the CPU time
//! they stand for (ns); the stacks threads block in are named `blocked`, weight 1.

use std::collections::HashMap;
use std::io::Write;

use stack_names::StackNames;
use trace_merge::timeline::{Sample, Timeline};

use super::json::Str;
use crate::fmt::push_us;

/// The frames tree and the samples met so far.
#[derive(Default)]
pub(super) struct Samples {
    names: StackNames,
    /// (parent node, frame name) -> node id (from 1).
    nodes: HashMap<(u32, String), u32>,
    /// Per node, its parent (0: none) and its name, by id - 1.
    frames: Vec<(u32, String)>,
    /// Per (file, stack): its leaf node (0 for an unknown stack).
    leaves: HashMap<(u32, u32), u32>,
    /// `"samples"` entries, written.
    out: Vec<u8>,
}

impl Samples {
    /// Adds one sample of thread `tid` of process `pid` (their ids in the output).
    pub(super) fn add(&mut self, tl: &Timeline, s: &Sample, pid: u64, tid: u64) {
        let leaf = self.leaf(tl, s);
        if !self.out.is_empty() {
            self.out.extend_from_slice(b",\n");
        }
        let (name, weight) = match s.on_cpu {
            true => ("cpu-clock", s.period),
            false => ("blocked", 1),
        };
        let _ = write!(
            self.out,
            r#"{{"cpu":{},"pid":{pid},"tid":{tid},"name":"{name}","weight":{weight},"sf":{leaf},"ts":"#,
            s.cpu
        );
        push_us(&mut self.out, s.time);
        self.out.push(b'}');
    }

    fn leaf(&mut self, tl: &Timeline, s: &Sample) -> u32 {
        if let Some(&n) = self.leaves.get(&(s.source, s.stack)) {
            return n;
        }
        let store = tl
            .merger()
            .sources()
            .get(s.source as usize)
            .map(|x| &x.stacks);
        let frames = match store.and_then(|st| Some((st, st.stack(s.stack)?))) {
            Some((store, def)) => self.names.frames(store, s.source, def),
            None => Vec::new(),
        };
        let mut node = 0;
        for f in frames {
            let next = self.frames.len() as u32 + 1;
            let id = *self.nodes.entry((node, f.function.clone())).or_insert(next);
            if id == next {
                self.frames.push((node, f.function));
            }
            node = id;
        }
        self.leaves.insert((s.source, s.stack), node);
        node
    }

    /// `,"stackFrames":{...},"samples":[...]`, to follow the events array; nothing
    /// without samples.
    pub(super) fn write(&self, out: &mut Vec<u8>) -> std::io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        out.extend_from_slice(b",\n\"stackFrames\":{");
        for (i, (parent, name)) in self.frames.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write!(out, "\n\"{}\":{{\"name\":{}", i + 1, Str(name))?;
            if *parent != 0 {
                write!(out, ",\"parent\":\"{parent}\"")?;
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"},\n\"samples\":[\n");
        out.extend_from_slice(&self.out);
        out.extend_from_slice(b"]");
        Ok(())
    }
}
