//! What unwinding Go code needs: each function's frame size at every pc (the `pcsp`
//! table the runtime's own traceback reads) and where a stack ends. Go emits no DWARF
//! CFI, and a frame-pointer walk misses the caller of every function stopped before its
//! frame is set up (a leaf without a frame, or any function at its entry, where probes
//! and many samples land): with `pcsp`, Go stacks are right at every instruction, in
//! stripped binaries too.

use std::sync::Mutex;

use rustc_hash::FxHashMap;

use super::binary::{section, PCLNTAB_SECTIONS};
use super::pclntab::{FuncField, GoTable, FLAG_ASM, FLAG_SPWRITE, FLAG_TOPFRAME};

/// How to leave one Go function's frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoFrame {
    /// The return address is `sp_offset` bytes above the stack pointer, so the caller's
    /// stack pointer is `sp_offset + 8` above it; when `saves_bp`, the caller's frame
    /// pointer is saved 8 bytes below the return address.
    Frame {
        /// The function's frame size at this pc.
        sp_offset: u32,
        /// Whether the frame holds the caller's frame pointer.
        saves_bp: bool,
    },
    /// The first function of a stack (`runtime.goexit` under every goroutine,
    /// `runtime.mstart` and `runtime.rt0_go` under the system stacks): the stack is
    /// complete.
    Top,
    /// A function that switches stacks (`runtime.systemstack`, `runtime.mcall`,
    /// `runtime.morestack`): its caller is on another stack, which was not copied.
    StackSwitch,
}

/// Stack roots of Go 1.16, whose `_func` has no flags.
const TOP_NAMES: [&[u8]; 3] = [b"runtime.goexit", b"runtime.mstart", b"runtime.rt0_go"];

/// Lookups remembered at most, per binary (stacks repeat their return addresses).
const CACHE_MAX: usize = 1 << 20;

/// A Go binary's pclntab kept for unwinding: [`GoUnwindTable::frame`] at any pc.
pub struct GoUnwindTable {
    data: Vec<u8>,
    table: GoTable,
    cache: Mutex<FxHashMap<u64, Option<GoFrame>>>,
}

impl std::fmt::Debug for GoUnwindTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GoUnwindTable({} functions)", self.table.funcs.len())
    }
}

impl GoUnwindTable {
    /// The table of the ELF file `file`; `None` for a file that is not Go or whose
    /// pclntab cannot be read (its code is then unwound as any other).
    pub fn from_elf(file: &[u8]) -> Option<GoUnwindTable> {
        use object::{Object, ObjectSection};
        let f = object::read::elf::ElfFile64::<object::Endianness>::parse(file).ok()?;
        let (data, _) = PCLNTAB_SECTIONS.iter().find_map(|name| section(&f, name))?;
        let text = f.section_by_name(".text").map_or(0, |s| s.address());
        let data = data.to_vec();
        let table = GoTable::parse(&data, text).ok()?;
        Some(GoUnwindTable {
            data,
            table,
            cache: Mutex::default(),
        })
    }

    /// How to leave the frame of the Go function at `pc` (an address of the file, as its
    /// symbols have them): the innermost frame's instruction pointer, or a return address
    /// minus one. `None` when no Go function holds `pc` (a cgo binary's C code, or an
    /// address past the table), or its table is unreadable.
    pub fn frame(&self, pc: u64) -> Option<GoFrame> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&known) = cache.get(&pc) {
            return known;
        }
        let found = self.look_up(pc);
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(pc, found);
        found
    }

    fn look_up(&self, pc: u64) -> Option<GoFrame> {
        let (d, t) = (&self.data[..], &self.table);
        let f = &t.funcs[t.find(pc)?];
        if f.foreign || pc >= f.end {
            return None;
        }
        let flags = t.flags(d, f);
        if flags & FLAG_TOPFRAME != 0 || t.name(d, f).is_some_and(|n| TOP_NAMES.contains(&n)) {
            return Some(GoFrame::Top);
        }
        if flags & FLAG_SPWRITE != 0 {
            return Some(GoFrame::StackSwitch);
        }
        let off = t.field(d, f, FuncField::Pcsp)?;
        let sp_offset = u32::try_from(t.value_at(d, f, off, pc)?).ok()?;
        // Go code with a frame keeps the caller's frame pointer at its top (assembly
        // may not: NOFRAME).
        let saves_bp = sp_offset > 0 && flags & FLAG_ASM == 0;
        Some(GoFrame::Frame {
            sp_offset,
            saves_bp,
        })
    }
}
