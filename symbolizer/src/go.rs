//! Go binaries: the toolchain version from `.go.buildinfo`, and functions,
//! source lines and inlined frames from the runtime's own table
//! (`.gopclntab`), which a stripped Go binary keeps because the runtime needs
//! it for tracebacks and garbage collection.
//!
//! Layouts read (magic numbers of `runtime.pcHeader`): Go 1.16-1.17
//! (0xfffffffa), 1.18-1.19 (0xfffffff0) and 1.20 and later (0xfffffff1).
//! Every number read from the file is bounds-checked before it is used as an
//! offset, a length or a count: the bytes are as untrusted as the binary.

use std::sync::Arc;

use crate::elf::ElfInfo;
use crate::Frame;

/// The layout generation of a pclntab, from its magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GoPclnVersion {
    /// Go 1.16 and 1.17 (magic 0xfffffffa): absolute entry addresses.
    Go116,
    /// Go 1.18 and 1.19 (magic 0xfffffff0): entries relative to the text start.
    Go118,
    /// Go 1.20 and later (magic 0xfffffff1): `_func.startLine`, a leaner inline tree.
    Go120,
}

impl GoPclnVersion {
    fn from_magic(m: u32) -> Option<Self> {
        match m {
            0xffff_fffa => Some(Self::Go116),
            0xffff_fff0 => Some(Self::Go118),
            0xffff_fff1 => Some(Self::Go120),
            _ => None,
        }
    }

    /// Versions as the user would name them, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Go116 => "Go 1.16-1.17",
            Self::Go118 => "Go 1.18-1.19",
            Self::Go120 => "Go 1.20+",
        }
    }
}

/// Why a pclntab cannot be read; shown to the user in one line.
pub(crate) type Reason = String;

/// `_func` table indices that matter here (internal/abi/symtab.go).
const PCDATA_INL_TREE_INDEX: u32 = 2;
const FUNCDATA_INL_TREE: u32 = 3;

/// Bounds on what a sane table holds, so garbage cannot make us loop or
/// allocate without end. A Go binary of 1 GB has well under a million functions.
const MAX_FUNCS: u64 = 1 << 24;
/// Inlining depth followed per address before giving up on a cyclic tree.
const MAX_INLINE_DEPTH: usize = 64;

fn rd_u32(d: &[u8], off: usize) -> Option<u32> {
    let b = d.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn rd_u64(d: &[u8], off: usize) -> Option<u64> {
    let b = d.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

fn rd_word(d: &[u8], off: usize, ptr: usize) -> Option<u64> {
    if ptr == 8 {
        rd_u64(d, off)
    } else {
        rd_u32(d, off).map(u64::from)
    }
}

/// A NUL-terminated string at `off` in `d`.
fn cstr(d: &[u8], off: usize) -> Option<&[u8]> {
    let tail = d.get(off..)?;
    let n = tail.iter().position(|&b| b == 0)?;
    Some(&tail[..n])
}

fn varint(d: &[u8], pos: &mut usize) -> Option<u32> {
    let mut v: u32 = 0;
    let mut shift = 0u32;
    loop {
        let b = *d.get(*pos)?;
        *pos += 1;
        if shift >= 32 {
            return None;
        }
        v |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

/// One function of the table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GoFunc {
    pub entry: u64,
    /// Where the function's code ends: the last pc its pc-value tables cover,
    /// which is the symbol size the linker gives it (alignment padding excluded).
    pub end: u64,
    /// C or assembly code from a foreign object (a cgo binary's C functions):
    /// it has an entry but no line table, and its end is the next entry.
    pub foreign: bool,
    /// Offset of the `_func` struct in the table's pcln area.
    foff: usize,
    name_off: u32,
}

/// A parsed pclntab: layout facts and the function index. The bytes stay in
/// the mapped file; every lookup takes them as `d` (the table from its header on).
#[derive(Debug)]
pub(crate) struct GoTable {
    pub version: GoPclnVersion,
    quantum: u64,
    ptr: usize,
    funcnametab: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    pcln: usize,
    pub funcs: Vec<GoFunc>,
    /// The table's end address (the entry one past the last function).
    pub text_end: u64,
}

/// Reads bytes at virtual addresses of the binary (for inline trees, which
/// live in `go:func.*` data outside the pclntab).
pub(crate) trait Memory {
    fn read(&self, vaddr: u64, len: usize) -> Option<&[u8]>;
}

/// Where the inline trees are: 1.18+ gives each as an offset from
/// `moduledata.gofunc`; 1.16-1.17 as an absolute address.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct InlineBase {
    pub gofunc: Option<u64>,
}

impl GoTable {
    /// Parses the table at the start of `d`. `text_start` is used when the
    /// header's own is 0 (the linker may leave it to a dynamic relocation).
    pub fn parse(d: &[u8], text_start: u64) -> Result<GoTable, Reason> {
        let magic = rd_u32(d, 0).ok_or("truncated pclntab header")?;
        let version = GoPclnVersion::from_magic(magic).ok_or_else(|| {
            if magic == 0xffff_fffb {
                "Go 1.2-1.15 pclntab layout (magic 0xfffffffb) is not supported".to_string()
            } else {
                format!(
                    "unknown pclntab magic {magic:#010x} (a Go version newer than this tracer?)"
                )
            }
        })?;
        let (pad1, pad2, quantum, ptr) = match d.get(4..8) {
            Some(&[a, b, q, p]) => (a, b, q, p),
            _ => return Err("truncated pclntab header".into()),
        };
        if pad1 != 0 || pad2 != 0 || !matches!(quantum, 1 | 2 | 4) || !matches!(ptr, 4 | 8) {
            return Err(format!(
                "corrupt pclntab header (pad {pad1},{pad2}, quantum {quantum}, pointer size {ptr})"
            ));
        }
        let ptr = usize::from(ptr);
        let word = |i: usize| rd_word(d, 8 + i * ptr, ptr).ok_or("truncated pclntab header");
        let nfunc = word(0)?;
        let (hdr_text, names, cu, files, pctab, pcln) = match version {
            GoPclnVersion::Go116 => (0, word(2)?, word(3)?, word(4)?, word(5)?, word(6)?),
            _ => (word(2)?, word(3)?, word(4)?, word(5)?, word(6)?, word(7)?),
        };
        let len = d.len() as u64;
        for (what, off) in [
            ("function names", names),
            ("compilation units", cu),
            ("file names", files),
            ("pc tables", pctab),
            ("function table", pcln),
        ] {
            if off >= len {
                return Err(format!("corrupt pclntab: {what} at {off:#x} past its end"));
            }
        }
        if nfunc == 0 || nfunc > MAX_FUNCS {
            return Err(format!("corrupt pclntab: {nfunc} functions"));
        }
        let text_start = if hdr_text != 0 { hdr_text } else { text_start };
        let fsz: u64 = if version == GoPclnVersion::Go116 {
            ptr as u64
        } else {
            4
        };
        // nfunc pairs (entry, func offset) and the end entry.
        let ftab_len = (nfunc * 2 + 1) * fsz;
        if pcln + ftab_len > len {
            return Err(format!(
                "corrupt pclntab: {nfunc} functions do not fit in the table"
            ));
        }
        let pcln = pcln as usize;
        let field = |i: u64| -> u64 {
            let off = pcln + (i * fsz) as usize;
            // In bounds: checked against ftab_len above.
            rd_word(d, off, fsz as usize).unwrap_or(0)
        };
        let abs = |v: u64| -> Result<u64, Reason> {
            if version == GoPclnVersion::Go116 {
                Ok(v)
            } else {
                text_start
                    .checked_add(v)
                    .ok_or_else(|| "corrupt pclntab: entry overflows".to_string())
            }
        };
        let mut t = GoTable {
            version,
            quantum: u64::from(quantum),
            ptr,
            funcnametab: names as usize,
            cutab: cu as usize,
            filetab: files as usize,
            pctab: pctab as usize,
            pcln,
            funcs: Vec::with_capacity(nfunc as usize),
            text_end: abs(field(nfunc * 2))?,
        };
        let hdr = t.func_header_size();
        for i in 0..nfunc {
            let entry = abs(field(2 * i))?;
            let foff = field(2 * i + 1) as usize;
            let fstart = pcln
                .checked_add(foff)
                .filter(|&s| s.checked_add(hdr).is_some_and(|e| e <= d.len()))
                .ok_or_else(|| format!("corrupt pclntab: function {i} outside the table"))?;
            // The struct repeats its entry; a mismatch means we misread the layout.
            let own = match version {
                GoPclnVersion::Go116 => rd_word(d, fstart, ptr),
                _ => rd_u32(d, fstart)
                    .map(u64::from)
                    .and_then(|o| text_start.checked_add(o)),
            };
            if own != Some(entry) {
                return Err(format!(
                    "corrupt pclntab: function {i} says entry {:#x}, the table {entry:#x}",
                    own.unwrap_or(0)
                ));
            }
            if t.funcs.last().is_some_and(|p| p.entry > entry) {
                return Err("corrupt pclntab: functions not sorted by address".into());
            }
            let name_off = rd_u32(d, fstart + t.entry_size()).unwrap_or(0);
            t.funcs.push(GoFunc {
                entry,
                end: entry,
                foreign: false,
                foff,
                name_off,
            });
        }
        if t.funcs.last().is_some_and(|f| f.entry > t.text_end) {
            return Err("corrupt pclntab: table ends before its last function".into());
        }
        for i in 0..t.funcs.len() {
            let next = t.funcs.get(i + 1).map_or(t.text_end, |f| f.entry);
            let f = t.funcs[i];
            let covered = t.table_end(d, &f, FuncField::Pcsp);
            let end = match covered {
                Some(e) if e > f.entry && e <= next => e,
                // Assembly without a pcsp table, or an odd one: up to the next function.
                _ => next,
            };
            t.funcs[i].end = end;
            t.funcs[i].foreign = t.field(d, &f, FuncField::Pcln) == Some(0);
        }
        Ok(t)
    }

    /// Bytes of the first field (entry), which is a pointer before 1.18.
    fn entry_size(&self) -> usize {
        if self.version == GoPclnVersion::Go116 {
            self.ptr
        } else {
            4
        }
    }

    /// Size of `_func` up to and including `nfuncdata`.
    fn func_header_size(&self) -> usize {
        let fields = if self.version == GoPclnVersion::Go120 {
            9
        } else {
            8
        };
        self.entry_size() + fields * 4 + 4
    }

    fn field(&self, d: &[u8], f: &GoFunc, which: FuncField) -> Option<u32> {
        // Fields after the entry: nameOff, args, deferreturn, pcsp, pcfile,
        // pcln, npcdata, cuOffset, [startLine,] funcID/flag/pad/nfuncdata.
        let idx = which as usize;
        rd_u32(d, self.pcln + f.foff + self.entry_size() + idx * 4)
    }

    /// True for a function written in assembly (`funcFlag_ASM`, Go 1.17+;
    /// 1.16 has padding there, which reads as false).
    pub fn is_asm(&self, d: &[u8], f: &GoFunc) -> bool {
        d.get(self.pcln + f.foff + self.func_header_size() - 3)
            .is_some_and(|&flag| flag & 4 != 0)
    }

    fn nfuncdata(&self, d: &[u8], f: &GoFunc) -> Option<u8> {
        d.get(self.pcln + f.foff + self.func_header_size() - 1)
            .copied()
    }

    /// The function's name.
    pub fn name<'d>(&self, d: &'d [u8], f: &GoFunc) -> Option<&'d [u8]> {
        self.name_at(d, f.name_off)
    }

    fn name_at<'d>(&self, d: &'d [u8], off: u32) -> Option<&'d [u8]> {
        cstr(d, self.funcnametab.checked_add(off as usize)?)
    }

    /// Walks a pc-value table from the function's entry; `visit(start, end,
    /// value)` for each run. Stops early when `visit` returns false.
    fn walk(
        &self,
        d: &[u8],
        f: &GoFunc,
        table_off: u32,
        mut visit: impl FnMut(u64, u64, i32) -> bool,
    ) -> Option<u64> {
        if table_off == 0 {
            return None;
        }
        let mut pos = self.pctab.checked_add(table_off as usize)?;
        let mut pc = f.entry;
        let mut val: i32 = -1;
        let mut first = true;
        // Each step reads at least two bytes, so this bounds the walk.
        for _ in 0..d.len() {
            let uv = varint(d, &mut pos)?;
            if uv == 0 && !first {
                return Some(pc);
            }
            first = false;
            let delta = if uv & 1 != 0 {
                !(uv >> 1) as i32
            } else {
                (uv >> 1) as i32
            };
            let pcdelta = u64::from(varint(d, &mut pos)?) * self.quantum;
            val = val.wrapping_add(delta);
            let start = pc;
            pc = pc.checked_add(pcdelta)?;
            if !visit(start, pc, val) {
                return Some(pc);
            }
        }
        None
    }

    /// The last pc a table of `f` covers.
    fn table_end(&self, d: &[u8], f: &GoFunc, which: FuncField) -> Option<u64> {
        let off = self.field(d, f, which)?;
        self.walk(d, f, off, |_, _, _| true)
    }

    /// The value of table `off` at `pc`, as the runtime's `pcvalue`.
    fn value_at(&self, d: &[u8], f: &GoFunc, off: u32, pc: u64) -> Option<i32> {
        let mut found = None;
        self.walk(d, f, off, |start, end, v| {
            if pc >= start && pc < end {
                found = Some(v);
                false
            } else {
                true
            }
        })?;
        found
    }

    fn pcdata_off(&self, d: &[u8], f: &GoFunc, table: u32) -> Option<u32> {
        let npcdata = self.field(d, f, FuncField::Npcdata)?;
        if table >= npcdata {
            return None;
        }
        let base = self.pcln + f.foff + self.func_header_size();
        rd_u32(d, base + table as usize * 4)
    }

    fn funcdata(&self, d: &[u8], f: &GoFunc, i: u32) -> Option<u64> {
        let nfuncdata = u32::from(self.nfuncdata(d, f)?);
        if i >= nfuncdata {
            return None;
        }
        let npcdata = self.field(d, f, FuncField::Npcdata)? as usize;
        let mut off =
            (self.pcln + f.foff + self.func_header_size()).checked_add(npcdata.checked_mul(4)?)?;
        if self.version == GoPclnVersion::Go116 {
            // Pointer-sized, aligned like the table itself.
            if self.ptr == 8 && off % 8 != 0 {
                off += 4;
            }
            let v = rd_word(d, off + i as usize * self.ptr, self.ptr)?;
            (v != 0).then_some(v)
        } else {
            let v = rd_u32(d, off + i as usize * 4)?;
            (v != u32::MAX).then_some(u64::from(v))
        }
    }

    /// File and line of `pc` in `f` (the innermost inlined position).
    pub fn file_line<'d>(&self, d: &'d [u8], f: &GoFunc, pc: u64) -> (Option<&'d [u8]>, u32) {
        let line = self
            .field(d, f, FuncField::Pcln)
            .and_then(|off| self.value_at(d, f, off, pc))
            .filter(|&l| l > 0)
            .map_or(0, |l| l as u32);
        let file = self
            .field(d, f, FuncField::Pcfile)
            .and_then(|off| self.value_at(d, f, off, pc))
            .and_then(|fno| self.file_name(d, f, fno));
        (file, line)
    }

    fn file_name<'d>(&self, d: &'d [u8], f: &GoFunc, fno: i32) -> Option<&'d [u8]> {
        let fno = u32::try_from(fno).ok()?;
        let cu = self.field(d, f, FuncField::CuOffset)?;
        let idx = (cu as usize).checked_add(fno as usize)?;
        let fileoff = rd_u32(d, self.cutab.checked_add(idx.checked_mul(4)?)?)?;
        if fileoff == u32::MAX {
            return None;
        }
        cstr(d, self.filetab.checked_add(fileoff as usize)?)
    }

    /// The function whose range [entry, next entry) holds `pc`.
    pub fn find(&self, pc: u64) -> Option<usize> {
        if pc >= self.text_end {
            return None;
        }
        let i = self.funcs.partition_point(|f| f.entry <= pc);
        i.checked_sub(1)
    }

    /// Frames at `pc`, innermost first, the function itself last. Inlined
    /// frames come from `FUNCDATA_InlTree` when `mem` can read it; each outer
    /// frame's line is that of its call to the inner one, as the runtime's
    /// traceback shows them.
    pub fn frames(
        &self,
        d: &[u8],
        i: usize,
        pc: u64,
        mem: Option<(&dyn Memory, InlineBase)>,
        names: &mut dyn FnMut(&[u8]) -> Arc<str>,
    ) -> Vec<Frame> {
        let f = self.funcs[i];
        let mut out = Vec::new();
        let mut at = pc;
        let tree = mem.and_then(|(m, base)| {
            let off = self.pcdata_off(d, &f, PCDATA_INL_TREE_INDEX)?;
            let data = self.funcdata(d, &f, FUNCDATA_INL_TREE)?;
            let addr = match self.version {
                GoPclnVersion::Go116 => data,
                _ => base.gofunc?.checked_add(data)?,
            };
            Some((m, off, addr))
        });
        if let Some((m, off, addr)) = tree {
            for _ in 0..MAX_INLINE_DEPTH {
                let Some(ix) = self.value_at(d, &f, off, at).filter(|&ix| ix >= 0) else {
                    break;
                };
                let Some((name_off, parent_pc)) = self.inlined_call(m, addr, ix as u64) else {
                    break;
                };
                let (file, line) = self.file_line(d, &f, at);
                out.push(Frame {
                    function: self.name_at(d, name_off).map(&mut *names),
                    file: file.map(&mut *names),
                    line: (line > 0).then_some(line),
                });
                let Some(next) = f.entry.checked_add(u64::from(parent_pc)) else {
                    break;
                };
                at = next;
            }
        }
        let (file, line) = self.file_line(d, &f, at);
        out.push(Frame {
            function: self.name(d, &f).map(&mut *names),
            file: file.map(&mut *names),
            line: (line > 0).then_some(line),
        });
        out
    }

    /// (name offset, parent pc offset) of inline tree entry `ix` at `tree`.
    fn inlined_call(&self, m: &dyn Memory, tree: u64, ix: u64) -> Option<(u32, u32)> {
        let size: u64 = if self.version == GoPclnVersion::Go120 {
            16
        } else {
            20
        };
        let at = tree.checked_add(ix.checked_mul(size)?)?;
        let b = m.read(at, size as usize)?;
        match self.version {
            // funcID, pad[3], nameOff, parentPc, startLine
            GoPclnVersion::Go120 => Some((rd_u32(b, 4)?, rd_u32(b, 8)?)),
            // parent, funcID, pad, file, line, func_, parentPc
            _ => Some((rd_u32(b, 12)?, rd_u32(b, 16)?)),
        }
    }
}

#[derive(Clone, Copy)]
enum FuncField {
    Pcsp = 3,
    Pcfile = 4,
    Pcln = 5,
    Npcdata = 6,
    CuOffset = 7,
}

/// The Go version in `.go.buildinfo` (`go1.19.8`), given the section's bytes
/// and a reader for the pointers older toolchains (before 1.18) store there.
pub(crate) fn buildinfo_version(sec: &[u8], mem: Option<&dyn Memory>) -> Option<String> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if sec.len() < 32 || &sec[..14] != MAGIC {
        return None;
    }
    let ptr = usize::from(sec[14]);
    let flags = sec[15];
    let s = if flags & 2 != 0 {
        // Inline: a varint length, then the bytes.
        let mut pos = 32;
        let mut n: u64 = 0;
        let mut shift = 0;
        loop {
            let b = *sec.get(pos)?;
            pos += 1;
            n |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
        sec.get(pos..pos.checked_add(usize::try_from(n).ok()?)?)?
            .to_vec()
    } else {
        if flags & 1 != 0 || !matches!(ptr, 4 | 8) {
            return None;
        }
        // A pointer to a Go string header (data pointer, length).
        let mem = mem?;
        let hdr_addr = rd_word(sec, 16, ptr)?;
        let hdr = mem.read(hdr_addr, 2 * ptr)?;
        let (data, len) = (rd_word(hdr, 0, ptr)?, rd_word(hdr, ptr, ptr)?);
        if len > 256 {
            return None;
        }
        mem.read(data, len as usize)?.to_vec()
    };
    let s = String::from_utf8(s).ok()?;
    s.starts_with("go").then_some(s)
}

/// (major, minor) of a version string such as `go1.19.8` or `go1.21rc2`.
pub(crate) fn parse_version(v: &str) -> Option<(u32, u32)> {
    let rest = v.strip_prefix("go")?;
    let mut it = rest.split('.');
    let major = it.next()?.parse().ok()?;
    let minor: String = it
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// Finds `runtime.firstmoduledata` in `data` (the bytes of a writable data
/// section at `data_vaddr`) by its first field, the pclntab's address, and
/// returns its `gofunc`, checked against the fields before it.
pub(crate) fn find_gofunc(t: &GoTable, pcln_vaddr: u64, data: &[u8]) -> Option<u64> {
    if t.version == GoPclnVersion::Go116 || t.ptr != 8 {
        return None;
    }
    let needle = pcln_vaddr.to_le_bytes();
    // moduledata: pcHeader, 6 slices (funcnametab, cutab, filetab, pctab,
    // pclntable, ftab), findfunctab, minpc, maxpc, text, etext, ... then
    // `covctrs, ecovctrs` from 1.20 on, end, gcdata, gcbss, types, etypes,
    // rodata, gofunc.
    let gofunc_at = if t.version == GoPclnVersion::Go120 {
        320
    } else {
        304
    };
    let mut pos = 0;
    while pos + gofunc_at + 8 <= data.len() {
        let Some(i) = data[pos..]
            .chunks_exact(8)
            .position(|c| c == needle)
            .map(|i| pos + i * 8)
        else {
            break;
        };
        pos = i + 8;
        let m = &data[i..];
        let names = rd_u64(m, 8)?;
        let minpc = rd_u64(m, 160)?;
        let rodata = rd_u64(m, gofunc_at - 8)?;
        let gofunc = rd_u64(m, gofunc_at)?;
        if names == pcln_vaddr + t.funcnametab as u64
            && t.funcs.first().is_some_and(|f| f.entry == minpc)
            && gofunc >= rodata
            && gofunc != 0
        {
            return Some(gofunc);
        }
    }
    None
}

/// A pclntab parsed on its own, for tools and fuzzing: see [`parse_gopclntab`].
pub struct GoPclnTab<'a> {
    data: &'a [u8],
    table: GoTable,
}

/// One function of a [`GoPclnTab`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    /// Go's name for it (`net/http.(*conn).serve`).
    pub name: String,
    /// Entry address.
    pub entry: u64,
    /// End of its code (exclusive).
    pub end: u64,
    /// A cgo binary's C code: listed in the table without line information.
    pub foreign: bool,
}

/// Parses a Go pclntab (`.gopclntab` section bytes, from its header on).
/// `text_start` stands in for the header's text start when that is 0 (the
/// runtime's `text` address: the `.text` section's in most binaries).
/// Garbage gives an error, never a panic; counts and offsets read from the
/// bytes are checked against their length before use.
pub fn parse_gopclntab(data: &[u8], text_start: u64) -> Result<GoPclnTab<'_>, crate::Error> {
    let table = GoTable::parse(data, text_start).map_err(|reason| crate::Error::GoTable {
        binary: "pclntab".into(),
        reason,
    })?;
    Ok(GoPclnTab { data, table })
}

impl GoPclnTab<'_> {
    /// The layout generation the header announced.
    pub fn version(&self) -> GoPclnVersion {
        self.table.version
    }

    /// Every function, by address.
    pub fn functions(&self) -> Vec<GoFunction> {
        self.table
            .funcs
            .iter()
            .map(|f| GoFunction {
                name: String::from_utf8_lossy(self.table.name(self.data, f).unwrap_or_default())
                    .into_owned(),
                entry: f.entry,
                end: f.end,
                foreign: f.foreign,
            })
            .collect()
    }

    /// The function holding `pc` with the file and line there (inlined
    /// frames need the binary's other sections: [`crate::Symbolizer`] gives them).
    pub fn lookup(&self, pc: u64) -> Option<Frame> {
        let i = self.table.find(pc)?;
        let mut names = |b: &[u8]| -> Arc<str> { String::from_utf8_lossy(b).into() };
        self.table.frames(self.data, i, pc, None, &mut names).pop()
    }
}

/// What a Go binary tells about itself.
pub(crate) struct GoBinary {
    /// `go1.19.8`, when `.go.buildinfo` is readable.
    pub version: Option<String>,
    /// The function table, or why it cannot be used.
    pub table: Result<GoTable, Reason>,
    /// File range of the pclntab.
    range: std::ops::Range<usize>,
    inline: InlineBase,
}

impl Memory for ElfInfo {
    fn read(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
        let seg = self
            .loads
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr < s.vaddr.saturating_add(s.filesz.min(s.memsz)))?;
        let end = vaddr.checked_add(len as u64)?;
        if end > seg.vaddr + seg.filesz.min(seg.memsz) {
            return None;
        }
        let off = usize::try_from(vaddr - seg.vaddr + seg.offset).ok()?;
        self.bytes.get(off..off.checked_add(len)?)
    }
}

/// Section bytes and address, if the section is stored in the file.
fn section<'a>(
    f: &object::read::elf::ElfFile64<'a, object::Endianness>,
    name: &str,
) -> Option<(&'a [u8], u64)> {
    use object::{Object, ObjectSection};
    let s = f.section_by_name(name)?;
    if s.kind() == object::SectionKind::UninitializedData {
        return None;
    }
    Some((s.data().ok()?, s.address()))
}

impl GoBinary {
    /// `None` for a binary that is not Go (neither buildinfo nor pclntab).
    pub fn load(elf: &ElfInfo) -> Option<GoBinary> {
        use object::{Object, ObjectSection};
        let f = elf.object();
        let bi = section(&f, ".go.buildinfo");
        // PIE and external-linking layouts put the table in relro.
        let pcln = section(&f, ".gopclntab").or_else(|| section(&f, ".data.rel.ro.gopclntab"));
        if bi.is_none() && pcln.is_none() {
            return None;
        }
        let version = bi.and_then(|(d, _)| buildinfo_version(d, Some(elf)));
        let base = elf.bytes.as_ptr() as usize;
        let Some((d, vaddr)) = pcln else {
            return Some(GoBinary {
                version,
                table: Err("no .gopclntab section".into()),
                range: 0..0,
                inline: InlineBase::default(),
            });
        };
        let start = d.as_ptr() as usize - base;
        let text = f.section_by_name(".text").map_or(0, |s| s.address());
        let table = GoTable::parse(d, text);
        let mut inline = InlineBase::default();
        if let Ok(t) = &table {
            for name in [".noptrdata", ".data"] {
                if let Some((data, _)) = section(&f, name) {
                    if let Some(g) = find_gofunc(t, vaddr, data) {
                        inline.gofunc = Some(g);
                        break;
                    }
                }
            }
        }
        Some(GoBinary {
            version,
            table,
            range: start..start + d.len(),
            inline,
        })
    }

    /// The pclntab's bytes in `elf` (the file this was loaded from).
    pub fn data<'a>(&self, elf: &'a ElfInfo) -> &'a [u8] {
        elf.bytes.get(self.range.clone()).unwrap_or_default()
    }

    /// Frames for `pc`, if a Go function holds it.
    pub fn frames(
        &self,
        elf: &ElfInfo,
        pc: u64,
        names: &mut dyn FnMut(&[u8]) -> Arc<str>,
    ) -> Option<Vec<Frame>> {
        let t = self.table.as_ref().ok()?;
        let i = t.find(pc)?;
        Some(t.frames(self.data(elf), i, pc, Some((elf, self.inline)), names))
    }

    /// (major, minor) of the toolchain, from buildinfo.
    pub fn version_number(&self) -> Option<(u32, u32)> {
        self.version.as_deref().and_then(parse_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("go1.19.8"), Some((1, 19)));
        assert_eq!(parse_version("go1.21rc2"), Some((1, 21)));
        assert_eq!(parse_version("go1.16"), Some((1, 16)));
        assert_eq!(parse_version("devel"), None);
    }

    fn uvarint(out: &mut Vec<u8>, mut v: u32) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A pc-value table: runs of (value, length in bytes).
    fn pctable(out: &mut Vec<u8>, runs: &[(i32, u32)]) -> u32 {
        let off = out.len() as u32;
        let mut prev = -1;
        for &(v, len) in runs {
            let d = v - prev;
            let u = if d < 0 {
                ((!d as u32) << 1) | 1
            } else {
                (d as u32) << 1
            };
            uvarint(out, u);
            uvarint(out, len);
            prev = v;
        }
        out.push(0);
        off
    }

    struct Fake {
        name: &'static str,
        /// Offset from the text start.
        entry: u64,
        /// (line, length) runs; their sum is the function's size.
        lines: &'static [(i32, u32)],
        file: u32,
    }

    const TEXT: u64 = 0x40_1000;
    const FUNCS: &[Fake] = &[
        Fake {
            name: "main.main",
            entry: 0,
            lines: &[(10, 4), (11, 12), (10, 4)],
            file: 0,
        },
        Fake {
            name: "main.(*s).handle",
            entry: 0x20,
            lines: &[(20, 8), (25, 3)],
            file: 1,
        },
        Fake {
            name: "net/http.(*conn).serve",
            entry: 0x40,
            lines: &[(1800, 0x30)],
            file: 2,
        },
    ];
    const FILES: &[&str] = &["/src/main.go", "/src/s.go", "/go/src/net/http/server.go"];
    const END: u64 = 0x80;

    /// A pclntab laid out as the Go linker of `v` writes one.
    fn synthetic(v: GoPclnVersion) -> Vec<u8> {
        let words = if v == GoPclnVersion::Go116 { 7 } else { 8 };
        let hdr = 8 + words * 8;
        let mut names = Vec::new();
        let name_offs: Vec<u32> = FUNCS
            .iter()
            .map(|f| {
                let o = names.len() as u32;
                names.extend_from_slice(f.name.as_bytes());
                names.push(0);
                o
            })
            .collect();
        let mut filetab = Vec::new();
        let mut cutab = Vec::new();
        for f in FILES {
            cutab.extend_from_slice(&(filetab.len() as u32).to_le_bytes());
            filetab.extend_from_slice(f.as_bytes());
            filetab.push(0);
        }
        let mut pctab = vec![0u8];
        let tabs: Vec<(u32, u32, u32)> = FUNCS
            .iter()
            .map(|f| {
                let size: u32 = f.lines.iter().map(|r| r.1).sum();
                let sp = pctable(&mut pctab, &[(0, size)]);
                let file = pctable(&mut pctab, &[(f.file as i32, size)]);
                let ln = pctable(&mut pctab, f.lines);
                (sp, file, ln)
            })
            .collect();
        let fsz = if v == GoPclnVersion::Go116 { 8 } else { 4 };
        let put = |out: &mut Vec<u8>, x: u64| {
            if fsz == 8 {
                out.extend_from_slice(&x.to_le_bytes())
            } else {
                out.extend_from_slice(&(x as u32).to_le_bytes())
            }
        };
        let abs = |x: u64| {
            if v == GoPclnVersion::Go116 {
                TEXT + x
            } else {
                x
            }
        };
        let ftab_len = (FUNCS.len() * 2 + 1) * fsz;
        let mut structs = Vec::new();
        let mut foffs = Vec::new();
        for (i, f) in FUNCS.iter().enumerate() {
            while !(ftab_len + structs.len()).is_multiple_of(8) {
                structs.push(0);
            }
            foffs.push((ftab_len + structs.len()) as u64);
            put(&mut structs, abs(f.entry));
            let (sp, file, ln) = tabs[i];
            let mut fields = vec![name_offs[i], 0, 0, sp, file, ln, 0, 0];
            if v == GoPclnVersion::Go120 {
                fields.push(f.lines[0].0 as u32);
            }
            for x in fields {
                structs.extend_from_slice(&x.to_le_bytes());
            }
            structs.extend_from_slice(&[0, 0, 0, 0]);
        }
        let mut pcln = Vec::new();
        for (i, f) in FUNCS.iter().enumerate() {
            put(&mut pcln, abs(f.entry));
            put(&mut pcln, foffs[i]);
        }
        put(&mut pcln, abs(END));
        pcln.extend_from_slice(&structs);

        let names_off = hdr;
        let cu_off = names_off + names.len();
        let files_off = cu_off + cutab.len();
        let pctab_off = files_off + filetab.len();
        let mut pcln_off = pctab_off + pctab.len();
        let pad = (8 - pcln_off % 8) % 8;
        pcln_off += pad;
        let magic: u32 = match v {
            GoPclnVersion::Go116 => 0xffff_fffa,
            GoPclnVersion::Go118 => 0xffff_fff0,
            GoPclnVersion::Go120 => 0xffff_fff1,
        };
        let mut out = Vec::new();
        out.extend_from_slice(&magic.to_le_bytes());
        out.extend_from_slice(&[0, 0, 1, 8]);
        let mut w = vec![FUNCS.len() as u64, FILES.len() as u64];
        if v != GoPclnVersion::Go116 {
            w.push(TEXT);
        }
        w.extend([names_off, cu_off, files_off, pctab_off, pcln_off].map(|x| x as u64));
        for x in w {
            out.extend_from_slice(&x.to_le_bytes());
        }
        assert_eq!(out.len(), hdr);
        for part in [&names, &cutab, &filetab, &pctab] {
            out.extend_from_slice(part);
        }
        out.extend(std::iter::repeat_n(0, pad));
        out.extend_from_slice(&pcln);
        out
    }

    const ALL: [GoPclnVersion; 3] = [
        GoPclnVersion::Go116,
        GoPclnVersion::Go118,
        GoPclnVersion::Go120,
    ];

    #[test]
    fn synthetic_tables_of_every_layout() {
        for v in ALL {
            let bytes = synthetic(v);
            let t = parse_gopclntab(&bytes, 0).unwrap_or_else(|e| panic!("{v:?}: {e}"));
            assert_eq!(t.version(), v);
            let fns = t.functions();
            assert_eq!(fns.len(), FUNCS.len());
            for (got, want) in fns.iter().zip(FUNCS) {
                let size: u64 = want.lines.iter().map(|r| u64::from(r.1)).sum();
                assert_eq!(got.name, want.name, "{v:?}");
                assert_eq!(
                    (got.entry, got.end),
                    (TEXT + want.entry, TEXT + want.entry + size),
                    "{v:?}"
                );
                assert!(!got.foreign);
                let mut pc = got.entry;
                for &(line, len) in want.lines {
                    for a in pc..pc + u64::from(len) {
                        let f = t.lookup(a).unwrap();
                        assert_eq!(f.function.as_deref(), Some(want.name), "{v:?} {a:#x}");
                        assert_eq!(f.file.as_deref(), Some(FILES[want.file as usize]));
                        assert_eq!(f.line, Some(line as u32), "{v:?} {a:#x}");
                    }
                    pc += u64::from(len);
                }
            }
            // Padding up to the next function belongs to the one before, as
            // the runtime's findfunc has it; past the table, nothing.
            assert_eq!(
                t.lookup(TEXT + 0x1f).unwrap().function.as_deref(),
                Some("main.main")
            );
            assert!(t.lookup(TEXT + END).is_none());
            assert!(t.lookup(TEXT - 1).is_none());
        }
    }

    #[test]
    fn unsupported_and_corrupt_headers_say_why() {
        let mut b = synthetic(GoPclnVersion::Go118);
        b[..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
        let e = parse_gopclntab(&b, 0).err().unwrap().to_string();
        assert!(
            e.contains("Go 1.2-1.15") && e.contains("not supported"),
            "{e}"
        );
        b[..4].copy_from_slice(&0xffff_fff2u32.to_le_bytes());
        let e = parse_gopclntab(&b, 0).err().unwrap().to_string();
        assert!(e.contains("unknown pclntab magic 0xfffffff2"), "{e}");
        let mut b = synthetic(GoPclnVersion::Go120);
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = parse_gopclntab(&b, 0).err().unwrap().to_string();
        assert!(e.contains("functions"), "{e}");
        assert!(!e.contains('\n'));
    }

    /// Every truncation and many bit flips of each layout: an error or an
    /// answer, never a panic, and no allocation sized by garbage.
    #[test]
    fn truncated_and_flipped_tables_do_not_panic() {
        for v in ALL {
            let good = synthetic(v);
            for len in 0..good.len() {
                if let Ok(t) = parse_gopclntab(&good[..len], TEXT) {
                    let _ = t.functions();
                    for a in TEXT..TEXT + END {
                        let _ = t.lookup(a);
                    }
                }
            }
            let mut x = 0x2545_f491_4f6c_dd1du64;
            for _ in 0..3000 {
                let mut b = good.clone();
                for _ in 0..1 + (x % 4) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let at = (x >> 8) as usize % b.len();
                    b[at] ^= 1 << (x & 7);
                }
                if let Ok(t) = parse_gopclntab(&b, TEXT) {
                    assert!(t.functions().len() <= FUNCS.len() * 2);
                    for a in (TEXT..TEXT + END).step_by(3) {
                        let _ = t.lookup(a);
                    }
                }
            }
        }
    }
}
