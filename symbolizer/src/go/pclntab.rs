//! The pclntab's header in each layout and its function index: entries,
//! ends, names and the `_func` fields the other parts read.

use super::read::{cstr, rd_u32, rd_word};
use super::Reason;

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

/// Bounds on what a sane table holds, so garbage cannot make us loop or
/// allocate without end. A Go binary of 1 GB has well under a million functions.
const MAX_FUNCS: u64 = 1 << 24;

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
    pub(super) foff: usize,
    name_off: u32,
}

/// A parsed pclntab: layout facts and the function index. The bytes stay in
/// the mapped file; every lookup takes them as `d` (the table from its header on).
#[derive(Debug)]
pub(crate) struct GoTable {
    pub version: GoPclnVersion,
    pub(super) quantum: u64,
    pub(super) ptr: usize,
    pub(super) funcnametab: usize,
    pub(super) cutab: usize,
    pub(super) filetab: usize,
    pub(super) pctab: usize,
    pub(super) pcln: usize,
    pub funcs: Vec<GoFunc>,
    /// The table's end address (the entry one past the last function).
    pub text_end: u64,
}

/// `funcFlag_TOPFRAME`: the first function of a stack (`runtime.goexit`, `runtime.mstart`).
pub(super) const FLAG_TOPFRAME: u8 = 1;
/// `funcFlag_SPWRITE`: the function writes the stack pointer (it switches stacks).
pub(super) const FLAG_SPWRITE: u8 = 2;
/// `funcFlag_ASM`: written in assembly.
pub(super) const FLAG_ASM: u8 = 4;

/// The `_func` fields after the entry, by their index: nameOff, args,
/// deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset, [startLine,]
/// funcID/flag/pad/nfuncdata.
#[derive(Clone, Copy)]
pub(super) enum FuncField {
    Pcsp = 3,
    Pcfile = 4,
    Pcln = 5,
    Npcdata = 6,
    CuOffset = 7,
}

/// What the header says: the layout and where the sub-tables are.
struct Header {
    version: GoPclnVersion,
    quantum: u8,
    ptr: usize,
    nfunc: u64,
    text_start: u64,
    names: u64,
    cu: u64,
    files: u64,
    pctab: u64,
    pcln: u64,
}

impl Header {
    fn parse(d: &[u8], text_start: u64) -> Result<Header, Reason> {
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
        Ok(Header {
            version,
            quantum,
            ptr,
            nfunc,
            text_start: if hdr_text != 0 { hdr_text } else { text_start },
            names,
            cu,
            files,
            pctab,
            pcln,
        })
    }

    /// Bytes of each `functab` field (entry, func offset): a pointer before 1.18.
    fn ftab_field_size(&self) -> u64 {
        if self.version == GoPclnVersion::Go116 {
            self.ptr as u64
        } else {
            4
        }
    }

    /// An address as the table stores it, made absolute.
    fn abs(&self, v: u64) -> Result<u64, Reason> {
        if self.version == GoPclnVersion::Go116 {
            Ok(v)
        } else {
            self.text_start
                .checked_add(v)
                .ok_or_else(|| "corrupt pclntab: entry overflows".to_string())
        }
    }
}

impl GoTable {
    /// Parses the table at the start of `d`. `text_start` is used when the
    /// header's own is 0 (the linker may leave it to a dynamic relocation).
    pub fn parse(d: &[u8], text_start: u64) -> Result<GoTable, Reason> {
        let h = Header::parse(d, text_start)?;
        let fsz = h.ftab_field_size();
        // nfunc pairs (entry, func offset) and the end entry.
        let ftab_len = (h.nfunc * 2 + 1) * fsz;
        if h.pcln + ftab_len > d.len() as u64 {
            return Err(format!(
                "corrupt pclntab: {} functions do not fit in the table",
                h.nfunc
            ));
        }
        let pcln = h.pcln as usize;
        let field = |i: u64| -> u64 {
            // In bounds: checked against ftab_len above.
            rd_word(d, pcln + (i * fsz) as usize, fsz as usize).unwrap_or(0)
        };
        let mut t = GoTable {
            version: h.version,
            quantum: u64::from(h.quantum),
            ptr: h.ptr,
            funcnametab: h.names as usize,
            cutab: h.cu as usize,
            filetab: h.files as usize,
            pctab: h.pctab as usize,
            pcln,
            funcs: Vec::with_capacity(h.nfunc as usize),
            text_end: h.abs(field(h.nfunc * 2))?,
        };
        for i in 0..h.nfunc {
            let f = t.read_func(d, &h, i, h.abs(field(2 * i))?, field(2 * i + 1) as usize)?;
            if t.funcs.last().is_some_and(|p| p.entry > f.entry) {
                return Err("corrupt pclntab: functions not sorted by address".into());
            }
            t.funcs.push(f);
        }
        if t.funcs.last().is_some_and(|f| f.entry > t.text_end) {
            return Err("corrupt pclntab: table ends before its last function".into());
        }
        t.set_ends(d);
        Ok(t)
    }

    /// Function `i`, whose `functab` entry says it starts at `entry` and has
    /// its `_func` at `foff`.
    fn read_func(
        &self,
        d: &[u8],
        h: &Header,
        i: u64,
        entry: u64,
        foff: usize,
    ) -> Result<GoFunc, Reason> {
        let fstart = self
            .pcln
            .checked_add(foff)
            .filter(|&s| {
                s.checked_add(self.func_header_size())
                    .is_some_and(|e| e <= d.len())
            })
            .ok_or_else(|| format!("corrupt pclntab: function {i} outside the table"))?;
        // The struct repeats its entry; a mismatch means we misread the layout.
        let own = match self.version {
            GoPclnVersion::Go116 => rd_word(d, fstart, self.ptr),
            _ => rd_u32(d, fstart)
                .map(u64::from)
                .and_then(|o| h.text_start.checked_add(o)),
        };
        if own != Some(entry) {
            return Err(format!(
                "corrupt pclntab: function {i} says entry {:#x}, the table {entry:#x}",
                own.unwrap_or(0)
            ));
        }
        Ok(GoFunc {
            entry,
            end: entry,
            foreign: false,
            foff,
            name_off: rd_u32(d, fstart + self.entry_size()).unwrap_or(0),
        })
    }

    /// Each function's end and whether it is foreign, from its tables.
    fn set_ends(&mut self, d: &[u8]) {
        for i in 0..self.funcs.len() {
            let next = self.funcs.get(i + 1).map_or(self.text_end, |f| f.entry);
            let f = self.funcs[i];
            let end = match self.table_end(d, &f, FuncField::Pcsp) {
                Some(e) if e > f.entry && e <= next => e,
                // Assembly without a pcsp table, or an odd one: up to the next function.
                _ => next,
            };
            self.funcs[i].end = end;
            self.funcs[i].foreign = self.field(d, &f, FuncField::Pcln) == Some(0);
        }
    }

    /// Bytes of the first field (entry), which is a pointer before 1.18.
    pub(super) fn entry_size(&self) -> usize {
        if self.version == GoPclnVersion::Go116 {
            self.ptr
        } else {
            4
        }
    }

    /// Size of `_func` up to and including `nfuncdata`.
    pub(super) fn func_header_size(&self) -> usize {
        let fields = if self.version == GoPclnVersion::Go120 {
            9
        } else {
            8
        };
        self.entry_size() + fields * 4 + 4
    }

    pub(super) fn field(&self, d: &[u8], f: &GoFunc, which: FuncField) -> Option<u32> {
        let idx = which as usize;
        rd_u32(d, self.pcln + f.foff + self.entry_size() + idx * 4)
    }

    /// True for a function written in assembly (`funcFlag_ASM`, Go 1.17+;
    /// 1.16 has padding there, which reads as false).
    pub fn is_asm(&self, d: &[u8], f: &GoFunc) -> bool {
        self.flags(d, f) & FLAG_ASM != 0
    }

    /// The function's `funcFlag` bits (Go 1.17+; 0 in 1.16, whose padding is there).
    pub(super) fn flags(&self, d: &[u8], f: &GoFunc) -> u8 {
        d.get(self.pcln + f.foff + self.func_header_size() - 3)
            .copied()
            .unwrap_or(0)
    }

    pub(super) fn nfuncdata(&self, d: &[u8], f: &GoFunc) -> Option<u8> {
        d.get(self.pcln + f.foff + self.func_header_size() - 1)
            .copied()
    }

    /// The function's name.
    pub fn name<'d>(&self, d: &'d [u8], f: &GoFunc) -> Option<&'d [u8]> {
        self.name_at(d, f.name_off)
    }

    pub(super) fn name_at<'d>(&self, d: &'d [u8], off: u32) -> Option<&'d [u8]> {
        cstr(d, self.funcnametab.checked_add(off as usize)?)
    }

    /// The function whose range [entry, next entry) holds `pc`.
    pub fn find(&self, pc: u64) -> Option<usize> {
        if pc >= self.text_end {
            return None;
        }
        let i = self.funcs.partition_point(|f| f.entry <= pc);
        i.checked_sub(1)
    }
}
