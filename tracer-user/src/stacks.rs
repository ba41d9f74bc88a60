//! `--stacks`: turns the programs' raw stacks into interned stacks of the trace. Each
//! [`StackRaw`] is unwound here, while the process's mappings can still be read, and
//! becomes a `Sample` or `BlockStack` record naming a stack of the file's stack table; the
//! table's new entries, with the mappings, kernel symbols and JIT symbols they need, go
//! in a `Stacks` chunk before the records that name them.

use std::mem::offset_of;

use rustc_hash::{FxHashMap, FxHashSet};
use trace_file::{Event, JitSymbol, KernelSymbol, StackDef, StackTable};
use tracer_abi::{stack_cause, Header, StackRaw, USER_STACK_BYTES};
use unwinder::{Regs, Unwinders};

use crate::perf_map::PerfMaps;

/// Interns the stacks of one file.
#[derive(Default)]
pub struct Stacks {
    unwinders: Unwinders,
    ids: FxHashMap<StackDef, u32>,
    /// What the next `Stacks` chunk holds.
    pending: StackTable,
    kallsyms: Option<Vec<(u64, String)>>,
    /// Indices in `kallsyms` already written.
    symbols_written: FxHashSet<usize>,
    perf_maps: PerfMaps,
    /// JIT functions already written: process and start.
    jit_written: FxHashSet<(u32, u64)>,
    /// Stacks whose user frames were cut, by reason (samples and blocks, not distinct
    /// stacks): the recorder's summary.
    pub cut: FxHashMap<String, u64>,
}

fn field<T: Copy>(b: &[u8], at: usize) -> Option<T> {
    let bytes = b.get(at..at + size_of::<T>())?;
    // SAFETY: length checked; T is a plain integer.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

impl Stacks {
    /// Nothing interned yet.
    pub fn new() -> Stacks {
        Stacks::default()
    }

    /// The record a ring's [`StackRaw`] becomes: time, thread and a `Sample` or
    /// `BlockStack`; `None` for bytes that are not one.
    pub fn take(&mut self, b: &[u8]) -> Option<(u64, u32, Event)> {
        let h: Header = field(b, 0)?;
        let tgid: u32 = field(b, offset_of!(StackRaw, tgid))?;
        let cause: u32 = field(b, offset_of!(StackRaw, cause))?;
        let period: u64 = field(b, offset_of!(StackRaw, period))?;
        let ip: u64 = field(b, offset_of!(StackRaw, ip))?;
        let sp: u64 = field(b, offset_of!(StackRaw, sp))?;
        let bp: u64 = field(b, offset_of!(StackRaw, bp))?;
        let kernel_frames: u32 = field(b, offset_of!(StackRaw, kernel_frames))?;
        let user_len: u32 = field(b, offset_of!(StackRaw, user_len))?;
        let user_err: i32 = field(b, offset_of!(StackRaw, user_err))?;
        let kernel_at = offset_of!(StackRaw, kernel);
        let kernel: Vec<u64> = (0..kernel_frames.min(tracer_abi::MAX_KERNEL_FRAMES as u32))
            .map_while(|i| field::<u64>(b, kernel_at + 8 * i as usize))
            .collect();
        let kernel = self.without_bpf(kernel);
        let user_len = (user_len as usize).min(USER_STACK_BYTES);
        let stack = b.get(StackRaw::FIXED..StackRaw::FIXED + user_len)?;
        let mut def = StackDef {
            id: 0,
            tgid,
            user: Vec::new(),
            kernel,
            cut: None,
        };
        if ip != 0 {
            let regs = Regs {
                ip,
                sp,
                bp,
                stack,
                full: user_len == USER_STACK_BYTES,
            };
            let u = self.unwinders.unwind(tgid, &regs, h.ts);
            def.user = u.frames;
            def.cut = u.cut;
            if stack.is_empty() && user_err != 0 {
                def.cut = Some(format!("read: the stack could not be copied ({user_err})"));
            }
        }
        if let Some(why) = &def.cut {
            let category = trace_file::meta::cut_category(why);
            *self.cut.entry(category.to_string()).or_default() += 1;
        }
        let id = self.intern(def);
        let event = match cause {
            stack_cause::SAMPLE => Event::Sample { stack: id, period },
            _ => Event::BlockStack { stack: id },
        };
        Some((h.ts, h.tid, event))
    }

    /// `kernel` without its innermost frames in the tracer's own programs (taken from
    /// sched_switch, they are the program and the tracepoint's calls of it).
    fn without_bpf(&mut self, mut kernel: Vec<u64>) -> Vec<u64> {
        let syms = self.kallsyms.get_or_insert_with(kallsyms);
        let ours = |addr: u64| {
            let i = syms.partition_point(|(a, _)| *a <= addr);
            i.checked_sub(1).is_some_and(|i| {
                let name = &syms[i].1;
                ["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"]
                    .iter()
                    .any(|p| name.starts_with(p))
            })
        };
        let n = kernel.iter().take_while(|&&a| ours(a)).count();
        kernel.drain(..n);
        kernel
    }

    /// The id of a stack walked in the kernel (`tracer stat --stacks`): `user` as
    /// `bpf_get_stackid` gives it (the instruction pointer, then return addresses),
    /// `kernel` likewise, `cut` why frames are missing. The process's mappings are read
    /// with its first stack.
    pub fn define(
        &mut self,
        tgid: u32,
        user: &[u64],
        kernel: &[u64],
        cut: Option<String>,
        now_ns: u64,
    ) -> u32 {
        if !user.is_empty() {
            self.unwinders.note(tgid, now_ns);
        }
        // Return addresses minus one: the call, as unwound stacks have them.
        let user = (user.iter().enumerate())
            .map(|(i, &a)| if i == 0 { a } else { a.wrapping_sub(1) })
            .collect();
        let kernel = self.without_bpf(kernel.to_vec());
        self.intern(StackDef {
            id: 0,
            tgid,
            user,
            kernel,
            cut,
        })
    }

    fn intern(&mut self, def: StackDef) -> u32 {
        if let Some(&id) = self.ids.get(&def) {
            return id;
        }
        let id = self.ids.len() as u32 + 1;
        for &a in &def.kernel {
            self.kernel_symbol(a);
        }
        for &a in &def.user {
            self.jit_symbol(def.tgid, a);
        }
        self.pending.stacks.push(StackDef { id, ..def.clone() });
        self.ids.insert(def, id);
        id
    }

    /// Puts the kernel function `addr` is in in the next chunk, once.
    fn kernel_symbol(&mut self, addr: u64) {
        let syms = self.kallsyms.get_or_insert_with(kallsyms);
        let i = syms.partition_point(|(a, _)| *a <= addr);
        if i == 0 || i == syms.len() || !self.symbols_written.insert(i - 1) {
            return;
        }
        let (start, name) = &syms[i - 1];
        self.pending.kernel_symbols.push(KernelSymbol {
            addr: *start,
            end: syms[i].0,
            name: name.clone(),
        });
    }

    /// Puts the JIT function of process `tgid` that `addr` is in in the next chunk,
    /// once, if its perf map names one.
    fn jit_symbol(&mut self, tgid: u32, addr: u64) {
        let Some((start, end, name)) = self.perf_maps.lookup(tgid, addr) else {
            return;
        };
        if self.jit_written.insert((tgid, start)) {
            self.pending.jit_symbols.push(JitSymbol {
                tgid,
                start,
                end,
                name: name.to_string(),
            });
        }
    }

    /// Process `pid` executed another program: its mappings and perf map are read again.
    pub fn forget(&mut self, pid: u32) {
        self.unwinders.forget(pid);
        self.perf_maps.forget(pid);
    }

    /// The definitions to write before the records taken so far, if there are any.
    pub fn take_table(&mut self) -> Option<StackTable> {
        self.pending.mappings.extend(self.unwinders.take_mappings());
        let t = std::mem::take(&mut self.pending);
        let empty = t.stacks.is_empty()
            && t.mappings.is_empty()
            && t.kernel_symbols.is_empty()
            && t.jit_symbols.is_empty();
        (!empty).then_some(t)
    }

    /// A new file starts: it defines again every stack, mapping and symbol it names.
    pub fn restart(&mut self) {
        let cut = std::mem::take(&mut self.cut);
        *self = Stacks {
            kallsyms: self.kallsyms.take(),
            perf_maps: std::mem::take(&mut self.perf_maps),
            cut,
            ..Stacks::default()
        };
    }
}

/// The kernel's functions, by address (empty when /proc/kallsyms hides them).
fn kallsyms() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    let mut syms: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            if addr == 0 || !matches!(kind, "t" | "T" | "w" | "W") {
                return None;
            }
            Some(match f.next() {
                Some(module) => (addr, format!("{name} {module}")),
                None => (addr, name.to_string()),
            })
        })
        .collect();
    syms.sort_unstable_by_key(|s| s.0);
    syms
}
