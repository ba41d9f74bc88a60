//! Pc-value tables (the runtime's `pcvalue`): where a function's code ends,
//! and the file and line at a pc.

use super::pclntab::{FuncField, GoFunc, GoTable};
use super::read::{cstr, rd_u32, uvarint};

impl GoTable {
    /// Walks a pc-value table from the function's entry; `visit(start, end,
    /// value)` for each run. Stops early when `visit` returns false.
    pub(super) fn walk(
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
            // Values and pc deltas are 32-bit; longer varints are garbage.
            let uv = uvarint(d, &mut pos, 32)? as u32;
            if uv == 0 && !first {
                return Some(pc);
            }
            first = false;
            let delta = if uv & 1 != 0 {
                !(uv >> 1) as i32
            } else {
                (uv >> 1) as i32
            };
            let pcdelta = u64::from(uvarint(d, &mut pos, 32)? as u32) * self.quantum;
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
    pub(super) fn table_end(&self, d: &[u8], f: &GoFunc, which: FuncField) -> Option<u64> {
        let off = self.field(d, f, which)?;
        self.walk(d, f, off, |_, _, _| true)
    }

    /// The value of table `off` at `pc`, as the runtime's `pcvalue`.
    pub(super) fn value_at(&self, d: &[u8], f: &GoFunc, off: u32, pc: u64) -> Option<i32> {
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
}
