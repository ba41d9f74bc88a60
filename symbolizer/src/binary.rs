//! A binary with its lazily built symbol index and DWARF context.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use crate::dwarf::DwarfCtx;
use crate::elf::{find_debug_file, ElfInfo, SymbolIndex};
use crate::glob::{suggest, Matcher};
use crate::go::GoBinary;
use crate::intern::Interner;
use crate::nearest::NearestSymbols;
use crate::starts::FunctionStarts;
use crate::target::Located;
use crate::{probe, Error, Exit, Frame, FunctionMatch, Language};

/// Functions larger than this are not decoded whole to place their entry probe.
const MAX_SCANNED: u64 = 1 << 20;

/// How much of a [`FunctionMatch`] to work out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Detail {
    /// Everything, for a function about to be probed ([`crate::resolve`]).
    Probe,
    /// For a listing: no RET sites (each would decode the function's whole
    /// code), and the declaration's source only when `source`.
    List { source: bool },
}

pub(crate) struct Binary {
    pub elf: ElfInfo,
    pub debug: Option<ElfInfo>,
    root: PathBuf,
    symbols: OnceCell<SymbolIndex>,
    /// Names for addresses without a DWARF function, chosen like binutils;
    /// apart from `symbols`, whose alias ranking suits probe specs instead.
    nearest: OnceCell<NearestSymbols>,
    /// Function starts from the unwind table, for addresses nothing names.
    starts: OnceCell<FunctionStarts>,
    dwarf: OnceCell<Option<DwarfCtx>>,
    go: OnceCell<Option<GoBinary>>,
    /// Where its goroutines' status changes are probed (Go binaries).
    go_status: OnceCell<Option<u64>>,
    /// Go function and file names, by where their bytes are in the mapping.
    go_names: Interner,
}

impl Binary {
    /// Opens `open` (the path we can read) for a binary the target knows as `display`;
    /// `root` is the target's filesystem root for debug-file lookup.
    pub fn open(open: &Path, display: &str, root: &Path) -> Result<Binary, Error> {
        let elf = ElfInfo::open(open)?;
        Ok(Self::from_elf(elf, display, root))
    }

    pub fn from_elf(elf: ElfInfo, display: &str, root: &Path) -> Binary {
        let debug = if elf.has_symtab && elf.has_dwarf {
            None
        } else {
            find_debug_file(&elf, Path::new(display), root)
        };
        Binary {
            elf,
            debug,
            root: root.to_path_buf(),
            symbols: OnceCell::new(),
            nearest: OnceCell::new(),
            starts: OnceCell::new(),
            dwarf: OnceCell::new(),
            go: OnceCell::new(),
            go_status: OnceCell::new(),
            go_names: Interner::default(),
        }
    }

    /// Go facts, for a Go binary.
    pub fn go(&self) -> Option<&GoBinary> {
        self.go.get_or_init(|| GoBinary::load(&self.elf)).as_ref()
    }

    /// Where this Go binary's goroutine status changes are probed, if they can be.
    pub fn go_status_probe(&self) -> Option<u64> {
        *(self.go_status).get_or_init(|| self.go()?.status_probe(&self.elf).ok())
    }

    pub fn symbols(&self) -> &SymbolIndex {
        self.symbols.get_or_init(|| {
            let go_syms = self
                .go()
                .map(|g| g.symbols(&self.elf, !self.elf.has_symtab))
                .unwrap_or_default();
            SymbolIndex::build(&self.elf, self.debug.as_ref(), go_syms)
        })
    }

    /// The error to give for a Go binary whose table is unusable and that has
    /// no other symbols to name its functions.
    pub fn go_table_error(&self, display: &str) -> Option<Error> {
        let g = self.go()?;
        let reason = g.table.as_ref().err()?;
        Some(Error::GoTable {
            binary: display.to_string(),
            reason: reason.clone(),
        })
    }

    pub fn dwarf(&self) -> Option<&DwarfCtx> {
        self.dwarf
            .get_or_init(|| {
                let src = match &self.debug {
                    Some(d) if d.has_dwarf => d,
                    _ if self.elf.has_dwarf => &self.elf,
                    _ => return None,
                };
                DwarfCtx::load(src, &self.root)
            })
            .as_ref()
    }

    /// Indices of matching symbols, one per address (the best-ranked matching alias).
    pub fn find(&self, func: &str, is_glob: bool) -> Vec<usize> {
        let idx = self.symbols();
        let names = idx.names();
        let mut out: Vec<usize> = Vec::new();
        let m = is_glob.then(|| Matcher::new(func));
        for (i, s) in idx.syms.iter().enumerate() {
            let n = &names[i];
            let hit = if let Some(m) = &m {
                m.matches(&n.display)
                    || m.matches(&s.raw)
                    || (!n.no_params.is_empty() && m.matches(&n.no_params))
            } else {
                func == &*n.display
                    || func == s.raw
                    || (!n.full.is_empty() && func == n.full)
                    || (!n.no_params.is_empty() && func == n.no_params)
            };
            if hit {
                // Sorted by (addr, rank): the first hit at an address is the best alias.
                if out.last().is_some_and(|&j| idx.syms[j].addr == s.addr) {
                    continue;
                }
                out.push(i);
            }
        }
        out
    }

    pub fn suggest(&self, func: &str) -> Vec<String> {
        let names = self.symbols().names();
        suggest(func, names.iter().map(|n| &*n.display), 5)
    }

    pub fn function_match(
        &self,
        i: usize,
        loc: &Located,
        detail: Detail,
    ) -> Result<FunctionMatch, Error> {
        let idx = self.symbols();
        let s = &idx.syms[i];
        let name = idx.names()[i].display.to_string();
        let off = self
            .elf
            .vaddr_to_offset(s.addr)
            .ok_or_else(|| Error::NotLoadable {
                path: loc.open.clone(),
                func: name.clone(),
                addr: s.addr,
            })?;
        let (language, skipped, exit) = match self.go() {
            Some(g) => g.placement(&self.elf, s.addr, s.size, off, detail == Detail::Probe),
            None => (Language::Native, 0, Exit::Uretprobe),
        };
        // A native function's whole code, so that its entry probe can be moved past a
        // first instruction uprobes would single-step (not Go's, placed above).
        let code = match language {
            Language::Native if s.size > 0 && s.size <= MAX_SCANNED => {
                let code = self.elf.bytes_at_offset(off, s.size as usize);
                (code.len() as u64 == s.size).then_some(code)
            }
            _ => None,
        };
        let mut p = match code {
            Some(code) => probe::analyze(code, true, |_| false),
            None => probe::analyze(self.elf.bytes_at_offset(off + skipped, 16), false, |_| {
                false
            }),
        };
        p.skipped += skipped;
        let source = if matches!(detail, Detail::Probe | Detail::List { source: true }) {
            self.dwarf()
                .and_then(|d| d.decl_source(s.addr))
                .or_else(|| self.go()?.source(&self.elf, s.addr))
        } else {
            None
        };
        let returns_i32 = detail == Detail::Probe
            && language == Language::Native
            && self.dwarf().is_some_and(|d| d.returns_i32(s.addr));
        Ok(FunctionMatch {
            name,
            symbol: s.raw.clone(),
            binary: loc.open.clone(),
            display_binary: loc.display.clone(),
            build_id: self.elf.build_id.clone(),
            address: s.addr,
            size: s.size,
            file_offset: off + p.skipped,
            skipped: p.skipped,
            source,
            warning: p.warning,
            unprobeable: p.refused,
            stacks_switch: false,
            returns_i32,
            go_status: match (language, detail) {
                (Language::Go, Detail::Probe) => self.go_status_probe(),
                _ => None,
            },
            language,
            exit,
        })
    }

    /// Probes the returns of native function `m` (one of this binary's) where a uretprobe
    /// is not safe: at its instructions ([`probe::exits`]), or not at all. An entry probe
    /// moved onto an instruction that leaves the function (`lock add; add; jmp other`)
    /// goes elsewhere where it can; a function whose first instruction leaves it gets one
    /// probe for both (see `Exit::Returns`).
    pub fn probe_returns_at_instructions(&self, m: &mut FunctionMatch) {
        let start = m.file_offset - m.skipped;
        if m.size == 0 || m.size > MAX_SCANNED {
            m.exit = Exit::Refused(format!(
                "its size ({} bytes) is not known to be all its code",
                m.size
            ));
            return;
        }
        let code = self.elf.bytes_at_offset(start, m.size as usize);
        if code.len() as u64 != m.size {
            m.exit = Exit::Refused("its code is not all in the file".into());
            return;
        }
        // GCC's name for the part of a function it moved away: `f.cold`.
        let cold = format!("{}.cold", m.symbol);
        let syms = &self.symbols().syms;
        let own_part = |target: u64| {
            let at = m.address.wrapping_add(target);
            let i = syms.partition_point(|s| s.addr <= at);
            (syms[..i].iter().rev())
                .take_while(|s| s.addr == syms[i - 1].addr)
                .any(|s| at < s.addr.saturating_add(s.size) && s.raw.starts_with(&cold))
        };
        let (rets, tails) = match probe::exits(code, own_part) {
            Ok(found) => found,
            Err(why) => {
                m.exit = Exit::Refused(why);
                return;
            }
        };
        let leaves = |at: u64| rets.contains(&at) || tails.contains(&at);
        if leaves(m.skipped) {
            let p = probe::analyze(code, true, leaves);
            // Else the entry stays on the instruction that leaves (`ret`, a thunk's `jmp`):
            // one probe there is the call's entry and its exit, a call that takes no time.
            if p.refused.is_none() && !leaves(p.skipped) {
                m.skipped = p.skipped;
                m.file_offset = start + p.skipped;
                m.warning = p.warning;
            }
        }
        let tails_through_pointers = probe::indirect_tails(code);
        if tails_through_pointers > 0 {
            m.warn(&format!("it also leaves by {tails_through_pointers} indirect jump(s) after taking its frame down (tail calls through a pointer), which no probe follows: a call leaving there is ended late, at its thread's next probed return above it (--unsafe-returns times it with a uretprobe, which an exception leaving it would end)"));
        }
        m.exit = Exit::Returns {
            rets: rets.into_iter().map(|r| start + r).collect(),
            tails: tails.into_iter().map(|r| start + r).collect(),
        };
    }

    /// The start of the function holding `vaddr`, by the unwind table.
    pub fn function_start(&self, vaddr: u64) -> Option<u64> {
        (self.starts.get_or_init(|| FunctionStarts::build(&self.elf))).lookup(vaddr)
    }

    /// Frames for an ELF virtual address; always at least one frame.
    pub fn symbolize(&self, vaddr: u64) -> Vec<Frame> {
        let dwarf = self.dwarf();
        if dwarf.is_none() {
            if let Some(g) = self.go() {
                let mut intern =
                    |b: &[u8]| self.go_names.get(b, |b| String::from_utf8_lossy(b).into());
                if let Some(frames) = g.frames(&self.elf, vaddr, &mut intern) {
                    return frames;
                }
            }
        }
        let (mut frames, unlinked) = dwarf.map(|d| d.frames(vaddr)).unwrap_or_default();
        let nearest = || {
            self.nearest
                .get_or_init(|| NearestSymbols::build(&self.elf, self.debug.as_ref()))
        };
        if let (Some(die), Some(d)) = (unlinked, dwarf) {
            if let Some(low) = d.unlinked_low(vaddr, die) {
                if let (Some((name, start)), Some(inner)) =
                    (nearest().lookup_with_start(vaddr), frames.first_mut())
                {
                    if start == low {
                        inner.function = Some(name);
                    }
                }
            }
        }
        let needs_name = frames.last().is_none_or(|f| f.function.is_none());
        if needs_name {
            let name = nearest().lookup(vaddr);
            match frames.last_mut() {
                Some(f) => f.function = name,
                None => frames.push(Frame {
                    function: name,
                    file: None,
                    line: None,
                }),
            }
        }
        frames
    }
}
