//! Where the function holding an address starts, from the binary's unwind table
//! (`.eh_frame`): compilers describe every function there, named or not, so a stripped
//! binary's static functions (most of a server's code) still have a start to be told
//! apart and counted by, where no symbol names them.

use gimli::UnwindSection;
use object::{Object, ObjectSection};

use crate::elf::ElfInfo;

/// Each function's `[start, end)`, sorted by start.
pub(crate) struct FunctionStarts(Vec<(u64, u64)>);

impl FunctionStarts {
    /// Reads the FDEs of `bin`'s `.eh_frame`; stops at the first one that does not parse.
    pub fn build(bin: &ElfInfo) -> FunctionStarts {
        let obj = bin.object();
        let Some(section) = obj.section_by_name(".eh_frame") else {
            return FunctionStarts(Vec::new());
        };
        let Ok(data) = section.data() else {
            return FunctionStarts(Vec::new());
        };
        let eh = gimli::EhFrame::new(data, gimli::LittleEndian);
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
        if let Some(text) = obj.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        if let Some(got) = obj.section_by_name(".got") {
            bases = bases.set_got(got.address());
        }
        let mut out = Vec::new();
        let mut entries = eh.entries(&bases);
        while let Ok(Some(entry)) = entries.next() {
            let gimli::CieOrFde::Fde(partial) = entry else {
                continue;
            };
            if let Ok(fde) = partial.parse(|eh, bases, o| eh.cie_from_offset(bases, o)) {
                let start = fde.initial_address();
                out.push((start, start.saturating_add(fde.len())));
            }
        }
        out.sort_unstable();
        FunctionStarts(out)
    }

    /// The start of the function that holds `vaddr`.
    pub fn lookup(&self, vaddr: u64) -> Option<u64> {
        let i = self.0.partition_point(|&(start, _)| start <= vaddr);
        let &(start, end) = self.0.get(i.checked_sub(1)?)?;
        (vaddr < end).then_some(start)
    }
}
