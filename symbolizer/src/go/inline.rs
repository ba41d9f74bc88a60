//! Inlined frames: a function's inline tree (`FUNCDATA_InlTree`, in
//! `go:func.*` data outside the pclntab) and, for Go 1.18+, the
//! `runtime.firstmoduledata` field its offsets are relative to.

use std::sync::Arc;

use super::pclntab::{FuncField, GoFunc, GoPclnVersion, GoTable};
use super::read::{rd_u32, rd_u64, rd_word};
use crate::Frame;

/// `_func` table indices that matter here (internal/abi/symtab.go).
const PCDATA_INL_TREE_INDEX: u32 = 2;
const FUNCDATA_INL_TREE: u32 = 3;

/// Inlining depth followed per address before giving up on a cyclic tree.
const MAX_INLINE_DEPTH: usize = 64;

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

    /// Frames at `pc` in function `i`, innermost first, the function itself
    /// last. Inlined frames come from `FUNCDATA_InlTree` when `mem` can read
    /// it; each outer frame's line is that of its call to the inner one, as
    /// the runtime's traceback shows them.
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

/// Finds `runtime.firstmoduledata` in `data` (the bytes of a writable data
/// section) by its first field, the pclntab's address `pcln_vaddr`, and
/// returns its `gofunc`, checked against the fields before it.
pub(super) fn find_gofunc(t: &GoTable, pcln_vaddr: u64, data: &[u8]) -> Option<u64> {
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
