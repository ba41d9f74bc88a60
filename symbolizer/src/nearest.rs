//! The function name for an address that DWARF has no function for (assembly,
//! code built without `-g`, binaries without debug info), chosen among the
//! symbol-table aliases by the rule binutils 2.40 applies (bfd
//! `_bfd_elf_find_function` with `_bfd_elf_maybe_function_sym`):
//!
//! * only symbols in the section that holds the address count, of any type
//!   but object, TLS, section and file, minus the size-0 local hidden
//!   untyped markers annobin emits;
//! * the highest start at or below the address wins, whether or not the
//!   symbol's size reaches the address;
//! * among symbols starting there, a strictly larger size wins (size 0
//!   counts as 1), otherwise the first in symbol-table order.
//!
//! So libc's `memcpy` variants come out as binutils names them (often the
//! local `__GI_` or `__memcpy_*` spelling, which sort before the globals),
//! not as the public alias a probe spec would prefer.
//!
//! Two differences are deliberate. binutils does not read `.dynsym`; read here when there
//! is nothing else, it names only the addresses inside a symbol's size: a stripped binary
//! keeps its exported functions there, and the static ones between them (most of a
//! server's code) would otherwise take the name of the exported one before them. The
//! frame is then unnamed, as perf leaves it.
//!
//! And binutils caches its last answer and reuses
//! it for any address inside that symbol's size, so a symbol starting within
//! another one (a local label in hand-written assembly) is named after
//! either, depending on what was asked before. Here the answer for an
//! address is always the one `addr2line` gives when asked for it alone.

use std::cell::OnceCell;
use std::sync::Arc;

use object::elf;
use object::read::elf::{ElfFile64, SectionHeader, Sym};
use object::Endianness;

use crate::demangle::demangle;
use crate::elf::{minidebuginfo_elf, ElfInfo};

struct NearSym {
    addr: u64,
    /// st_size, with 0 as 1 the way binutils compares them.
    size: u64,
    raw: Box<str>,
}

struct SectionSyms {
    start: u64,
    end: u64,
    /// Range into `NearestSymbols::syms`.
    first: usize,
    last: usize,
}

pub(crate) struct NearestSymbols {
    /// Allocated sections in header order: binutils takes the first that
    /// holds the address.
    sections: Vec<SectionSyms>,
    /// Per section, sorted by address, ties in symbol-table order.
    syms: Vec<NearSym>,
    /// Demangled on first use: a trace names few of them.
    names: Vec<OnceCell<Arc<str>>>,
    /// Read from `.dynsym`: a symbol names only the addresses inside its size.
    sized: bool,
}

impl NearestSymbols {
    /// Reads the symbol table binutils would use for `bin`: a separate debug
    /// file's `.symtab` (what bfd reads alongside the DWARF it loads from
    /// there), else the binary's own `.symtab`, else its MiniDebugInfo one
    /// (which binutils does not read; better than nothing), else `.dynsym`.
    pub fn build(bin: &ElfInfo, debug: Option<&ElfInfo>) -> Self {
        let mut out = NearestSymbols {
            sections: Vec::new(),
            syms: Vec::new(),
            names: Vec::new(),
            sized: false,
        };
        match debug {
            Some(d) if d.has_symtab => out.read(&d.object(), false),
            _ if bin.has_symtab => out.read(&bin.object(), false),
            _ => match minidebuginfo_elf(bin) {
                Some(m) if m.has_symtab => out.read(&m.object(), false),
                _ => out.read(&bin.object(), true),
            },
        }
        out.names = (0..out.syms.len()).map(|_| OnceCell::new()).collect();
        out
    }

    fn read(&mut self, f: &ElfFile64<'_, Endianness>, dynamic: bool) {
        self.sized = dynamic;
        let endian = f.endian();
        let table = if dynamic {
            f.elf_dynamic_symbol_table()
        } else {
            f.elf_symbol_table()
        };
        // Candidates per section index, in table order.
        let headers = f.elf_section_table();
        let mut per_section: Vec<Vec<NearSym>> = (0..headers.len()).map(|_| Vec::new()).collect();
        for (i, sym) in table.symbols().iter().enumerate() {
            if i == 0 {
                continue;
            }
            let ty = sym.st_type();
            if matches!(
                ty,
                elf::STT_OBJECT | elf::STT_COMMON | elf::STT_TLS | elf::STT_SECTION | elf::STT_FILE
            ) {
                continue;
            }
            let Ok(Some(sec)) = table.symbol_section(endian, sym, object::SymbolIndex(i)) else {
                continue;
            };
            let size = sym.st_size(endian);
            if size == 0
                && sym.st_bind() == elf::STB_LOCAL
                && ty == elf::STT_NOTYPE
                && sym.st_visibility() == elf::STV_HIDDEN
            {
                continue;
            }
            let Ok(name) = table.symbol_name(endian, sym) else {
                continue;
            };
            let Some(list) = per_section.get_mut(sec.0) else {
                continue;
            };
            list.push(NearSym {
                addr: sym.st_value(endian),
                size: size.max(1),
                raw: String::from_utf8_lossy(name).into(),
            });
        }
        for (i, h) in headers.iter().enumerate() {
            let flags = h.sh_flags(endian);
            let size = h.sh_size(endian);
            if flags & u64::from(elf::SHF_ALLOC) == 0 || size == 0 {
                continue;
            }
            let mut list = std::mem::take(&mut per_section[i]);
            // Stable: equal addresses keep table order, which decides full ties.
            list.sort_by_key(|s| s.addr);
            let first = self.syms.len();
            self.syms.extend(list);
            let start = h.sh_addr(endian);
            self.sections.push(SectionSyms {
                start,
                end: start.saturating_add(size),
                first,
                last: self.syms.len(),
            });
        }
    }

    /// The name binutils gives `addr` from the symbol table, demangled.
    pub fn lookup(&self, addr: u64) -> Option<Arc<str>> {
        self.lookup_with_start(addr).map(|(name, _)| name)
    }

    /// [`NearestSymbols::lookup`] with the symbol's start address.
    pub fn lookup_with_start(&self, addr: u64) -> Option<(Arc<str>, u64)> {
        let sec = self
            .sections
            .iter()
            .find(|s| addr >= s.start && addr < s.end)?;
        let syms = &self.syms[sec.first..sec.last];
        let end = syms.partition_point(|s| s.addr <= addr);
        let start = syms[..end].last()?.addr;
        let group = syms[..end].partition_point(|s| s.addr < start);
        let mut best = group;
        for i in group + 1..end {
            if syms[i].size > syms[best].size {
                best = i;
            }
        }
        if self.sized && addr - syms[best].addr >= syms[best].size {
            return None;
        }
        let name = &self.names[sec.first + best];
        let name = name.get_or_init(|| display(&syms[best].raw)).clone();
        Some((name, syms[best].addr))
    }
}

/// Demangled, keeping a version suffix (`__nss_next@GLIBC_2.2.5`, a
/// compatibility symbol with no other alias) as binutils prints it.
fn display(raw: &str) -> Arc<str> {
    match raw.find('@') {
        Some(i) if i > 0 => format!("{}{}", demangle(&raw[..i]).display, &raw[i..]).into(),
        _ => demangle(raw).display,
    }
}
