//! Folded stacks, the input of flame graph tools (flamegraph.pl, inferno, speedscope):
//! one line per distinct stack, `frame;frame;...;frame VALUE`.
//!
//! Here a stack is where a traced thread's wall time went, as the tracer sees it: its
//! process's name and its own, the probed functions on its stack (outermost first), the
//! system call it was in, and, as the leaf, the state it was in: `[running]`, `[ready]`,
//! `[blocked]` or `[I/O]`. Values are nanoseconds. So the graph of a server shows, under
//! each handler, how much of its time ran on a CPU, waited for one, or waited on
//! something, and in which system call; a thread's time outside probed functions is the
//! leaves right under its name.
//!
//! Threads with the same name in processes of the same name fold together (the workers
//! of a pool become one tower, and so do the servers of several hosts).
//!
//! State intervals arrive when they end, while the stack changes at points inside them.
//! While a thread is known to run (since its `OnCpu`), each change is settled at once;
//! otherwise the thread keeps the changes since its last interval ended (a few: it is not
//! on a CPU), and the interval splits at them when it arrives. So memory does not grow
//! with a thread that runs for long.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use atomic_output::write_file;
use stack_names::StackNames;
use trace_merge::report::require_content;
use trace_merge::stacks::Blocking;
use trace_merge::sysclass;
use trace_merge::timeline::{Item, Span, ThreadRef, ThreadState, Timeline};

use crate::{InputReport, Options};

/// What a conversion read and wrote.
#[derive(Clone, Debug, Default)]
pub struct FoldedReport {
    /// What was read.
    pub input: InputReport,
    /// Lines written (distinct stacks).
    pub stacks: u64,
    /// Sum of all values: the traced threads' time in a known state, ns.
    pub total_ns: u64,
    /// Threads whose time was folded.
    pub threads: u64,
    /// The output file.
    pub output: PathBuf,
}

impl std::fmt::Display for FoldedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.input)?;
        writeln!(
            f,
            "written: {} stacks, {} threads, {:.3} s of thread time",
            self.stacks,
            self.threads,
            self.total_ns as f64 / 1e9
        )?;
        write!(f, "output: {}", self.output.display())
    }
}

/// Converts trace files into folded stacks at `output`, written to a temporary file next
/// to it and renamed at the end. An existing output is an error unless [`Options::force`].
/// With a window, only the time inside it is counted.
pub fn convert(inputs: &[PathBuf], output: &Path, opts: &Options) -> Result<FoldedReport> {
    write_file(output, opts.force, |file, tmp| {
        let tl = trace_merge::open(inputs, &opts.merge)?;
        let w = &opts.window;
        let window = (w.from_ns, w.until_ns.max(w.from_ns));
        let mut stacks = Stacks {
            window,
            ..Stacks::default()
        };
        // Past the window: the states under way end at its end, the rest is not read.
        let (tl, _) = trace_merge::feed(tl, window.1, &mut stacks)?;
        let end = tl.end().unwrap_or(tl.now());
        require_content(&tl, &inputs[0], window.0, end)?;
        let lines = stacks.lines(&tl);
        let io_err = |e| Error::io(tmp, e);
        let mut w = BufWriter::new(file);
        for (stack, ns) in &lines {
            writeln!(w, "{stack} {ns}").map_err(io_err)?;
        }
        w.flush().map_err(io_err)?;
        Ok(FoldedReport {
            input: InputReport::of(&tl),
            stacks: lines.len() as u64,
            total_ns: lines.values().fold(0, |a, &ns| a.saturating_add(ns)),
            threads: tl.threads().len() as u64,
            output: output.to_owned(),
        })
    })
}

impl trace_merge::Consumer for Stacks {
    type Error = Error;

    #[inline]
    fn item(&mut self, tl: &Timeline, item: Item) -> Result<()> {
        Stacks::item(self, tl, item);
        Ok(())
    }
}

/// The leaf of a state, `None` for states that are not a thread's time (not yet created,
/// exited, unknown).
fn state_leaf(s: ThreadState) -> Option<usize> {
    match s {
        ThreadState::Running => Some(0),
        ThreadState::Ready => Some(1),
        ThreadState::Blocked => Some(2),
        ThreadState::Io => Some(3),
        ThreadState::Unknown | ThreadState::NotCreated | ThreadState::Exited => None,
    }
}

/// The part of `[a, b)` inside `window`.
fn inside(window: (u64, u64), a: u64, b: u64) -> u64 {
    b.min(window.1).saturating_sub(a.max(window.0))
}

fn add(to: &mut [u64; 4], v: &[u64; 4]) {
    to.iter_mut().zip(v).for_each(|(a, b)| *a += b);
}

const LEAVES: [&str; 4] = ["[running]", "[ready]", "[blocked]", "[I/O]"];

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Frame {
    /// A thread's root: its process's name and its own, looked up at the end (a thread
    /// may be renamed).
    Thread(ThreadRef),
    /// Probe `id` of input file `source`.
    Func {
        source: u32,
        id: u32,
    },
    Syscall(u32),
}

/// A node of the tree of stacks: a frame under a parent node.
struct Node {
    parent: Option<u32>,
    frame: Frame,
    /// Time spent exactly here, per leaf state.
    ns: [u64; 4],
}

#[derive(Default)]
struct ThreadStack {
    /// Node of each probed function under way, outermost first.
    funcs: Vec<u32>,
    /// The system call under way.
    sys: Option<u32>,
    /// Where the thread was when its last state interval ended; `None` before its first
    /// stack change.
    at: Option<u32>,
    /// Time before the first stack change, per leaf state: its place is known only then
    /// (a system call under way when the recording started shows at its end).
    lead: [u64; 4],
    /// Stack changes since then: (time, node).
    changes: Vec<(u64, u32)>,
    /// While it runs: the time up to which its running time has been given to `at`.
    running_from: Option<u64>,
}

/// A thread, the (file, stack) its time went under (`None`: no stack), and the leaf.
type SampledKey = (ThreadRef, Option<(u32, u32)>, usize);

/// The tree of stacks and where each thread is in it.
pub struct Stacks {
    /// [from, until) in ns: the time that counts.
    window: (u64, u64),
    nodes: Vec<Node>,
    children: HashMap<(Option<u32>, Frame), u32>,
    threads: Vec<ThreadStack>,
    /// Per thread with stacks, its time by (file, stack) and leaf; `None` for time without
    /// a stack.
    sampled: HashMap<SampledKey, u64>,
    /// Threads with at least one stack: their time comes from `sampled`.
    stacked: HashSet<ThreadRef>,
    blocking: Blocking,
}

impl Default for Stacks {
    fn default() -> Self {
        Stacks {
            window: (0, u64::MAX),
            nodes: Vec::new(),
            children: HashMap::new(),
            threads: Vec::new(),
            sampled: HashMap::new(),
            stacked: HashSet::new(),
            blocking: Blocking::default(),
        }
    }
}

impl Stacks {
    /// Takes in one timeline item.
    pub fn item(&mut self, tl: &Timeline, item: Item) {
        let window = self.window;
        match item {
            // A goroutine's calls are not its thread's stack: it moves between threads.
            Item::FuncEntry {
                goroutine: Some(_), ..
            } => {}
            Item::Func(Span {
                goroutine: Some(_), ..
            })
            | Item::Mark(_)
            | Item::GoStatus(_) => {}
            Item::FuncEntry {
                thread, time, func, ..
            } => {
                let source = tl.thread(thread).source;
                let parent = self.func_node(thread);
                let node = self.node(Some(parent), Frame::Func { source, id: func });
                self.thread(thread).funcs.push(node);
                self.changed(thread, time);
            }
            Item::Func(span) => {
                // Spans close innermost first; the one closing is at its depth.
                self.thread(span.thread).funcs.truncate(span.depth as usize);
                self.changed(span.thread, span.end);
            }
            Item::SyscallEntry(e) => {
                self.thread(e.thread).sys = Some(e.nr);
                self.changed(e.thread, e.time);
            }
            Item::Syscall(s) => {
                if self.thread(s.thread).sys.take().is_some() {
                    self.changed(s.thread, s.end);
                } else if self.thread(s.thread).at.is_none() {
                    // Under way since before the recording: the thread's time so far.
                    let root = self.node(None, Frame::Thread(s.thread));
                    let sys = self.node(Some(root), Frame::Syscall(s.nr));
                    let th = self.thread(s.thread);
                    let lead = std::mem::take(&mut th.lead);
                    th.at = Some(sys);
                    add(&mut self.nodes[sys as usize].ns, &lead);
                    self.moved(s.thread, s.end, root);
                }
            }
            Item::OnCpu { thread, time, .. } => self.thread(thread).running_from = Some(time),
            Item::Sample(smp) => {
                self.stacked.insert(smp.thread);
                self.blocking.note(&smp);
                if smp.on_cpu && inside(window, smp.time, smp.time.saturating_add(1)) > 0 {
                    let key = (smp.thread, Some((smp.source, smp.stack)), 0);
                    let ns = self.sampled.entry(key).or_default();
                    *ns = ns.saturating_add(smp.period);
                }
            }
            Item::State(s) => {
                let leaf = state_leaf(s.state);
                // The same time told by stacks, for threads that turn out to have them;
                // running time is the samples'.
                let stack = self.blocking.stack_of(&s).map(|b| (b.source, b.stack));
                if let Some(l) = leaf.filter(|&l| l != 0) {
                    let ns = inside(window, s.begin, s.end);
                    if ns > 0 {
                        let sum = self.sampled.entry((s.thread, stack, l)).or_default();
                        *sum = sum.saturating_add(ns);
                    }
                }
                let th = self.thread(s.thread);
                let running_from = th.running_from.take();
                let Some(mut node) = th.at else {
                    if let Some(l) = leaf {
                        th.lead[l] += inside(window, s.begin, s.end);
                    }
                    return;
                };
                // What ran before the last settled change is already given.
                let mut from = running_from.map_or(s.begin, |t| t.max(s.begin));
                let changes = std::mem::take(&mut th.changes);
                let mut kept = Vec::new();
                for &(t, n) in &changes {
                    if t > s.end {
                        kept.push((t, n));
                        continue;
                    }
                    if let (Some(l), true) = (leaf, t > from) {
                        self.nodes[node as usize].ns[l] += inside(window, from, t);
                        from = t;
                    }
                    node = n;
                }
                if let (Some(l), true) = (leaf, s.end > from) {
                    self.nodes[node as usize].ns[l] += inside(window, from, s.end);
                }
                let th = self.thread(s.thread);
                th.at = Some(node);
                th.changes = kept;
            }
            Item::Thread(_) | Item::Link(_) => {}
        }
    }

    /// The stacks with their time, named, with same-named stacks added up (a sum past
    /// u64, which only damaged times make, stays at its largest).
    pub fn lines(&self, tl: &Timeline) -> BTreeMap<String, u64> {
        let mut names: Vec<Option<String>> = vec![None; self.nodes.len()];
        let mut out = BTreeMap::new();
        let mut put = |name: &str, ns: &[u64; 4]| {
            for (leaf, &ns) in LEAVES.iter().zip(ns).filter(|(_, &ns)| ns > 0) {
                let sum = out.entry(format!("{name};{leaf}")).or_insert(0u64);
                *sum = sum.saturating_add(ns);
            }
        };
        // `;` separates frames and a line ends with its value.
        let clean = |s: &str| s.replace([';', '\n', '\r'], "_");
        let root = |r: ThreadRef| {
            let m = tl.thread(r);
            let process = &tl.processes()[m.process as usize].name;
            format!("{};{}", clean(process), clean(&m.name))
        };
        // Parents come before children, so each name extends its parent's; each node's
        // thread is its root's.
        let mut thread_of: Vec<ThreadRef> = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let r = match (n.frame, n.parent) {
                (Frame::Thread(r), _) => r,
                (_, Some(p)) => thread_of[p as usize],
                (_, None) => ThreadRef::MAX,
            };
            thread_of.push(r);
            if self.stacked.contains(&r) {
                continue;
            }
            let frame = match n.frame {
                Frame::Thread(r) => root(r),
                Frame::Func { source, id } => {
                    match tl.merger().sources()[source as usize].probe(id) {
                        Some(p) => clean(&p.name),
                        None => format!("function_{id}"),
                    }
                }
                Frame::Syscall(nr) => sysclass::name(nr).into_owned(),
            };
            let name = match n.parent.and_then(|p| names[p as usize].as_deref()) {
                Some(p) => format!("{p};{frame}"),
                None => frame,
            };
            put(&name, &n.ns);
            names[i] = Some(name);
        }
        // Threads that never changed their stack.
        for (r, th) in self.threads.iter().enumerate() {
            if th.at.is_none() && !self.stacked.contains(&(r as ThreadRef)) {
                put(&root(r as ThreadRef), &th.lead);
            }
        }
        let mut names = StackNames::new();
        let sources = tl.merger().sources();
        for (&(r, stack, leaf), &ns) in &self.sampled {
            if !self.stacked.contains(&r) {
                continue;
            }
            let mut line = root(r);
            let def = stack.and_then(|(src, id)| {
                let store = &sources.get(src as usize)?.stacks;
                Some((src, store, store.stack(id)?))
            });
            if let Some((src, store, def)) = def {
                for f in names.frames(store, src, def) {
                    line.push(';');
                    line.push_str(&clean(&f.function));
                }
            }
            line.push(';');
            line.push_str(LEAVES[leaf]);
            let sum = out.entry(line).or_insert(0u64);
            *sum = sum.saturating_add(ns);
        }
        out
    }

    fn thread(&mut self, r: ThreadRef) -> &mut ThreadStack {
        let r = r as usize;
        if self.threads.len() <= r {
            self.threads.resize_with(r + 1, ThreadStack::default);
        }
        &mut self.threads[r]
    }

    fn node(&mut self, parent: Option<u32>, frame: Frame) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.children.entry((parent, frame)).or_insert(next);
        if id == next {
            self.nodes.push(Node {
                parent,
                frame,
                ns: [0; 4],
            });
        }
        id
    }

    /// The node of the innermost probed function under way (the thread's root if none).
    fn func_node(&mut self, r: ThreadRef) -> u32 {
        match self.thread(r).funcs.last() {
            Some(&n) => n,
            None => self.node(None, Frame::Thread(r)),
        }
    }

    /// The thread's stack changed at `t`: note where it is now.
    fn changed(&mut self, r: ThreadRef, t: u64) {
        if self.thread(r).at.is_none() {
            let root = self.node(None, Frame::Thread(r));
            let th = self.thread(r);
            let lead = std::mem::take(&mut th.lead);
            th.at = Some(root);
            add(&mut self.nodes[root as usize].ns, &lead);
        }
        let parent = self.func_node(r);
        let node = match self.thread(r).sys {
            Some(nr) => self.node(Some(parent), Frame::Syscall(nr)),
            None => parent,
        };
        self.moved(r, t, node);
    }

    /// The thread (whose place is known) is at `node` from `t`: settled now if it runs,
    /// else when its interval ends.
    fn moved(&mut self, r: ThreadRef, t: u64, node: u32) {
        let window = self.window;
        let th = self.thread(r);
        match (th.running_from, th.at) {
            (Some(from), Some(at)) if th.changes.is_empty() => {
                th.running_from = Some(t.max(from));
                th.at = Some(node);
                self.nodes[at as usize].ns[0] += inside(window, from, t);
            }
            _ => th.changes.push((t, node)),
        }
    }
}
