//! DWARF access through addr2line: inlined frames, and declaration lines.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::{LookupContinuation, LookupResult, SplitDwarfLoad};
use gimli::Reader;

use crate::demangle::display_name;
use crate::elf::{find_sup_file, ElfInfo};
use crate::intern::Interner;
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

    /// Frames at `vaddr`, innermost inlined frame first; with the DIE of the
    /// innermost function when binutils may name it from the symbol table
    /// instead (see [`DwarfCtx::unlinked_low`]).
    pub fn frames(&self, vaddr: u64) -> (Vec<Frame>, Option<gimli::UnitOffset>) {
        let mut out = Vec::new();
        let mut unlinked = None;
        if !in_any_range(vaddr) {
            return (out, None);
        }
        let Ok(mut iter) = self.run(self.ctx.find_frames(vaddr)) else {
            return (out, None);
        };
        while let Ok(Some(f)) = iter.next() {
            if out.is_empty() {
                if let Some(n) = &f.function {
                    if mangling_language(n.language) && !looks_mangled(&n.name) {
                        unlinked = f.dw_die_offset;
                    }
                }
            }
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
        (out, unlinked)
    }

    /// The lowest address of the function DIE at `offset` (in the unit
    /// holding `vaddr`) if neither it nor what it refers to carries a
    /// linkage name. binutils 2.40 names such a function of a language that
    /// mangles (C++, Rust; `extern "C"` and `#[no_mangle]` functions, `main`)
    /// after the symbol-table entry it finds for the address, and keeps
    /// doing so when that symbol starts where the function does; otherwise
    /// only its first answer for the function does, so this one is not
    /// followed.
    pub fn unlinked_low(&self, vaddr: u64, offset: gimli::UnitOffset) -> Option<u64> {
        let unit = self.run(self.ctx.find_dwarf_and_unit(vaddr))?;
        let entry = unit.entry(offset).ok()?;
        let mut next = Some(offset);
        for _ in 0..4 {
            let Some(o) = next.take() else { break };
            let e = unit.entry(o).ok()?;
            if e.attr_value(gimli::DW_AT_linkage_name).is_some()
                || e.attr_value(gimli::DW_AT_MIPS_linkage_name).is_some()
            {
                return None;
            }
            next = match e
                .attr_value(gimli::DW_AT_abstract_origin)
                .or_else(|| e.attr_value(gimli::DW_AT_specification))
            {
                Some(gimli::AttributeValue::UnitRef(r)) => Some(r),
                // In another unit or a dwz file: not looked at; keep DWARF's name.
                Some(_) => return None,
                None => None,
            };
        }
        if let Some(v) = entry.attr_value(gimli::DW_AT_low_pc) {
            return unit.attr_address(v).ok()?;
        }
        let mut ranges = unit.die_ranges(&entry).ok()?;
        ranges.next().ok()?.map(|r| r.begin)
    }

    /// "file:line" of the declaration of the (outermost) function at `vaddr`,
    /// falling back to the line-table entry at that address.
    pub fn decl_source(&self, vaddr: u64) -> Option<String> {
        if !in_any_range(vaddr) {
            return None;
        }
        if let Some(s) = self.decl_from_die(vaddr) {
            return Some(s);
        }
        let loc = self.ctx.find_location(vaddr).ok()??;
        Some(format!("{}:{}", loc.file?, loc.line?))
    }

    /// Whether the (outermost) function at `vaddr` returns a signed 32-bit integer (C's
    /// `int`, through typedefs and qualifiers, or an enum over one), whose value is the
    /// lower half of the return register only.
    pub fn returns_i32(&self, vaddr: u64) -> bool {
        if !in_any_range(vaddr) {
            return false;
        }
        let Some(mut iter) = self.run(self.ctx.find_frames(vaddr)).ok() else {
            return false;
        };
        let mut last = None;
        while let Ok(Some(f)) = iter.next() {
            last = f.dw_die_offset;
        }
        let (Some(unit), Some(offset)) = (self.run(self.ctx.find_dwarf_and_unit(vaddr)), last)
        else {
            return false;
        };
        return_type_is_i32(unit, offset)
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

/// Whether `vaddr` can be in a DWARF address range at all: ranges end before their
/// (exclusive) high address, so the last address never is, and addr2line's lookups
/// compute `vaddr + 1`.
fn in_any_range(vaddr: u64) -> bool {
    vaddr != u64::MAX
}

/// Whether binutils treats names of this language as possibly mangled
/// (`mangle_style` in bfd/dwarf2.c is nonzero), so that a function known by
/// DW_AT_name alone is looked up in the symbol table. binutils counts a unit
/// without DW_AT_language as mangling too, but addr2line reports no language
/// for split-DWARF units either, whose DWARF names binutils does print.
fn mangling_language(lang: Option<gimli::DwLang>) -> bool {
    use gimli::constants::*;
    const PLAIN: [gimli::DwLang; 15] = [
        DW_LANG_C89,
        DW_LANG_C,
        DW_LANG_Cobol74,
        DW_LANG_Cobol85,
        DW_LANG_Fortran77,
        DW_LANG_Pascal83,
        DW_LANG_PLI,
        DW_LANG_C99,
        DW_LANG_UPC,
        DW_LANG_C11,
        DW_LANG_Mips_Assembler,
        // DW_LANG_Upc, DW_LANG_HP_Basic91, DW_LANG_HP_IMacro and
        // DW_LANG_HP_Assembler, which gimli has no names for.
        gimli::DwLang(0x8765),
        gimli::DwLang(0x8004),
        gimli::DwLang(0x8006),
        gimli::DwLang(0x8007),
    ];
    lang.is_some_and(|l| !PLAIN.contains(&l))
}

/// addr2line prefers a linkage name, which for C++ and Rust is mangled; a
/// plain name there most likely came from DW_AT_name, worth a closer look.
fn looks_mangled(name: &R) -> bool {
    let b = name.to_slice().ok();
    b.is_some_and(|b| b.starts_with(b"_Z") || b.starts_with(b"_R"))
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

/// Whether the subprogram DIE at `offset` (or the declaration it completes) returns a
/// signed integer of 4 bytes.
fn return_type_is_i32(unit: gimli::UnitRef<'_, R>, offset: gimli::UnitOffset) -> bool {
    let mut at = offset;
    // The function's type, on it or on its abstract origin or declaration.
    let mut ty = None;
    for _ in 0..4 {
        let Ok(entry) = unit.entry(at) else {
            return false;
        };
        if let Some(gimli::AttributeValue::UnitRef(t)) = entry.attr_value(gimli::DW_AT_type) {
            ty = Some(t);
            break;
        }
        match entry
            .attr_value(gimli::DW_AT_abstract_origin)
            .or_else(|| entry.attr_value(gimli::DW_AT_specification))
        {
            Some(gimli::AttributeValue::UnitRef(o)) => at = o,
            _ => return false,
        }
    }
    let Some(mut at) = ty else { return false };
    for _ in 0..8 {
        let Ok(entry) = unit.entry(at) else {
            return false;
        };
        match entry.tag() {
            gimli::DW_TAG_base_type => {
                let size = entry.attr_value(gimli::DW_AT_byte_size);
                let encoding = entry.attr_value(gimli::DW_AT_encoding);
                return size.and_then(|v| v.udata_value()) == Some(4)
                    && encoding == Some(gimli::AttributeValue::Encoding(gimli::DW_ATE_signed));
            }
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_enumeration_type => match entry.attr_value(gimli::DW_AT_type) {
                Some(gimli::AttributeValue::UnitRef(t)) => at = t,
                _ => return false,
            },
            _ => return false,
        }
    }
    false
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
