//! DWARF access through addr2line: inlined frames, and declaration lines.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::{LookupContinuation, LookupResult, SplitDwarfLoad};
use gimli::Reader;

use crate::demangle::display_name;
use crate::elf::{find_sup_file, ElfInfo};
use crate::sections::{self, R};
use crate::Frame;

/// A DWARF context for one binary (from the binary itself or its debug file).
pub(crate) struct DwarfCtx {
    ctx: addr2line::Context<R>,
    /// Demangled function names by the address of the raw name in the DWARF
    /// data. Demangling dominated the cost of a lookup (each Rust frame is a
    /// long legacy/v0 name, and one address often has several inlined frames),
    /// while a trace hits the same few thousand functions again and again.
    names: Interner,
    /// File names by the address of addr2line's own copy, shared the same way.
    files: Interner,
}

/// Strings derived from bytes that stay put for as long as the `DwarfCtx`
/// lives (section buffers, any .dwo addr2line loaded, addr2line's parsed line
/// tables), keyed by where those bytes are: cheaper to hash than the text, and
/// a string stored twice merely gets two entries.
#[derive(Default)]
struct Interner(RefCell<HashMap<usize, Arc<str>, BuildHasherDefault<AddrHasher>>>);

/// One multiply for an address key; the default SipHash showed in profiles.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        // Fibonacci hashing spreads the low bits into the high ones the
        // table's control bytes are taken from.
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Interner {
    fn get(&self, bytes: &[u8], make: impl FnOnce(&[u8]) -> Arc<str>) -> Arc<str> {
        self.0
            .borrow_mut()
            .entry(bytes.as_ptr() as usize)
            .or_insert_with(|| make(bytes))
            .clone()
    }
}

impl DwarfCtx {
    /// Loads DWARF from `elf`, plus the dwz supplementary file if one is linked and found.
    pub fn load(elf: &ElfInfo, root: &Path) -> Option<DwarfCtx> {
        let mut dwarf = sections::load(elf, false).ok()?;
        // dwz moved DIEs and strings shared between files into a supplementary
        // file (DW_FORM_GNU_ref_alt / DW_FORM_GNU_strp_alt point there). Without
        // it, names and inlined frames are lost, but lines still resolve.
        if let Some(sup) = find_sup_file(elf, root) {
            if let Ok(sup_dwarf) = sections::load(&sup, false) {
                dwarf.set_sup(sup_dwarf);
            }
        }
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(DwarfCtx {
            ctx,
            names: Interner::default(),
            files: Interner::default(),
        })
    }

    fn run<L>(&self, mut r: LookupResult<L>) -> L::Output
    where
        L: LookupContinuation<Buf = R>,
    {
        loop {
            match r {
                LookupResult::Output(o) => return o,
                LookupResult::Load { load, continuation } => {
                    r = continuation.resume(load_dwo(&load));
                }
            }
        }
    }

    /// Frames at `vaddr`, innermost inlined frame first.
    pub fn frames(&self, vaddr: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        let Ok(mut iter) = self.run(self.ctx.find_frames(vaddr)) else {
            return out;
        };
        while let Ok(Some(f)) = iter.next() {
            let function = f.function.as_ref().map(|n| {
                self.names
                    .get(&n.name, |raw| display_name(&String::from_utf8_lossy(raw)))
            });
            let (file, line) = match f.location {
                Some(l) => {
                    let file = l.file.map(|p| self.files.get(p.as_bytes(), |_| p.into()));
                    (file, l.line)
                }
                None => (None, None),
            };
            out.push(Frame {
                function,
                file,
                line,
            });
        }
        out
    }

    /// "file:line" of the declaration of the (outermost) function at `vaddr`,
    /// falling back to the line-table entry at that address.
    pub fn decl_source(&self, vaddr: u64) -> Option<String> {
        if let Some(s) = self.decl_from_die(vaddr) {
            return Some(s);
        }
        let loc = self.ctx.find_location(vaddr).ok()??;
        Some(format!("{}:{}", loc.file?, loc.line?))
    }

    fn decl_from_die(&self, vaddr: u64) -> Option<String> {
        let mut iter = self.run(self.ctx.find_frames(vaddr)).ok()?;
        let mut last = None;
        while let Ok(Some(f)) = iter.next() {
            last = f.dw_die_offset;
        }
        let unit = self.run(self.ctx.find_dwarf_and_unit(vaddr))?;
        decl(unit, last?, None, None, 0)
    }
}

/// "file:line" declared for the DIE at `offset`. Out-of-line instances and
/// C++ member definitions keep decl_* on the abstract origin / specification
/// DIE; a C++ member definition carries its own decl_line but inherits
/// decl_file from the in-class declaration, so each is taken separately (and
/// the file named through the line table of the unit it was found in). dwz may
/// have moved the DIE referred to into the supplementary file.
fn decl(
    unit: gimli::UnitRef<'_, R>,
    offset: gimli::UnitOffset,
    mut file: Option<String>,
    mut line: Option<u64>,
    depth: u32,
) -> Option<String> {
    let entry = unit.entry(offset).ok()?;
    if file.is_none() {
        let index = match entry.attr_value(gimli::DW_AT_decl_file) {
            Some(gimli::AttributeValue::FileIndex(i)) => Some(i),
            Some(v) => v.udata_value(),
            None => None,
        };
        file = index.and_then(|i| file_name(unit, i));
    }
    if line.is_none() {
        line = entry
            .attr_value(gimli::DW_AT_decl_line)
            .and_then(|v| v.udata_value());
    }
    if let (Some(file), Some(line)) = (&file, line) {
        return Some(format!("{file}:{line}"));
    }
    if depth >= 4 {
        return None;
    }
    let next = entry
        .attr_value(gimli::DW_AT_abstract_origin)
        .or_else(|| entry.attr_value(gimli::DW_AT_specification));
    match next? {
        gimli::AttributeValue::UnitRef(o) => decl(unit, o, file, line, depth + 1),
        gimli::AttributeValue::DebugInfoRefSup(o) => {
            let sup = unit.dwarf.sup()?;
            let (sup_unit, o) = unit_containing(sup, o)?;
            decl(
                gimli::UnitRef::new(sup, &sup_unit),
                o,
                file,
                line,
                depth + 1,
            )
        }
        _ => None,
    }
}

/// The unit of `dwarf` whose entries hold `offset` (a linear scan: only for
/// the few declarations a listing asks for).
fn unit_containing(
    dwarf: &gimli::Dwarf<R>,
    offset: gimli::DebugInfoOffset,
) -> Option<(gimli::Unit<R>, gimli::UnitOffset)> {
    let mut headers = dwarf.units();
    while let Ok(Some(header)) = headers.next() {
        if let Some(o) = offset.to_unit_offset(&header) {
            return Some((dwarf.unit(header).ok()?, o));
        }
    }
    None
}

fn file_name(unit: gimli::UnitRef<'_, R>, index: u64) -> Option<String> {
    let lp = unit.line_program.as_ref()?;
    let header = lp.header();
    let fe = header.file(index)?;
    let name = unit.attr_string(fe.path_name()).ok()?;
    let name = name.to_string_lossy().ok()?.into_owned();
    let mut path = PathBuf::new();
    if let Some(cd) = &unit.comp_dir {
        path.push(&*cd.to_string_lossy().ok()?);
    }
    if let Some(dir) = fe.directory(header) {
        if let Ok(d) = unit.attr_string(dir) {
            path.push(&*d.to_string_lossy().ok()?);
        }
    }
    path.push(name);
    Some(path.to_string_lossy().into_owned())
}

/// Loads a split-DWARF .dwo file that a skeleton unit points at.
fn load_dwo(load: &SplitDwarfLoad<R>) -> Option<Arc<gimli::Dwarf<R>>> {
    let mut path = PathBuf::new();
    if let Some(cd) = &load.comp_dir {
        path.push(&*cd.to_string_lossy().ok()?);
    }
    path.push(&*load.path.as_ref()?.to_string_lossy().ok()?);
    let elf = ElfInfo::open(&path).ok()?;
    let mut dwarf = sections::load(&elf, true).ok()?;
    dwarf.make_dwo(&load.parent);
    Some(Arc::new(dwarf))
}
