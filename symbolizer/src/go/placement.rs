//! Where a Go function is probed: its entry at the stack-bound check's branch,
//! and its returns at each RET, since a uretprobe would crash a Go program.

use super::binary::GoBinary;
use super::pclntab::GoPclnVersion;
use crate::elf::ElfInfo;
use crate::{Exit, Language};

impl GoBinary {
    /// The language of the function at `addr` (`size` bytes at file offset
    /// `off`), the bytes its entry probe skips (see [`go_prologue_end`]) and
    /// how its returns are probed; its RET sites only if `returns`, since
    /// finding them decodes all its code ([`Exit::Deferred`] otherwise).
    pub fn placement(
        &self,
        elf: &ElfInfo,
        addr: u64,
        size: u64,
        off: u64,
        returns: bool,
    ) -> (Language, u64, Exit) {
        let version = self.version.as_deref().unwrap_or("of unknown version");
        let t = match &self.table {
            Ok(t) => t,
            // Cannot tell Go functions from C ones: refuse what could crash it.
            Err(e) => {
                return (
                    Language::Go,
                    0,
                    Exit::Refused(format!(
                        "Go binary ({version}) whose function table cannot be read: {e}"
                    )),
                )
            }
        };
        let Some(f) = t
            .find(addr)
            .map(|i| t.funcs[i])
            .filter(|f| f.entry == addr && !f.foreign)
        else {
            // C code linked into a cgo binary.
            return (Language::Native, 0, Exit::Uretprobe);
        };
        let code = elf.bytes_at_offset(off, size as usize);
        let skipped = go_prologue_end(code, addr).unwrap_or(0);
        let exit = match (self.version_number(), t.version) {
            (Some((1, minor)), _) if minor < 17 => Exit::Refused(format!(
                "{version} binary: exit probes need Go 1.17 or later, whose register ABI keeps the goroutine in R14"
            )),
            (None, GoPclnVersion::Go116) => Exit::Refused(
                "Go 1.16 or 1.17 binary without readable build info: exit probes need Go 1.17 or later, whose register ABI keeps the goroutine in R14".into(),
            ),
            _ if t.is_asm(self.data(elf), &f) => Exit::Refused(
                "Go assembly function: the goroutine is not known to be in R14 at its returns".into(),
            ),
            _ if code.len() as u64 != size => Exit::Refused("its code is not all in the file".into()),
            _ if !returns => Exit::Deferred,
            _ => match ret_offsets(code, addr) {
                Ok(rets) => Exit::Returns {
                    rets: rets.into_iter().map(|r| off + r).collect(),
                    tails: Vec::new(),
                },
                Err(e) => Exit::Refused(e),
            },
        };
        (Language::Go, skipped, exit)
    }
}

impl GoBinary {
    /// Where to probe `runtime.casgstatus(gp, oldval, newval)`, through which Go's
    /// scheduler changes every goroutine's status: the file offset of an instruction
    /// uprobes emulate, near its entry, where its arguments are still in their registers
    /// under the register ABI (RAX, RBX, RCX: Go 1.17 and later), so that a probe there
    /// costs no single step. The reason when there is none.
    pub fn status_probe(&self, elf: &ElfInfo) -> Result<u64, String> {
        use iced_x86::Register;
        let t = self.table.as_ref().map_err(|e| e.to_string())?;
        match self.version_number() {
            Some((1, minor)) if minor >= 17 => {}
            _ => return Err("goroutine status needs Go 1.17 or later (its register ABI)".into()),
        }
        let d = self.data(elf);
        let f = (t.funcs.iter())
            .find(|f| !f.foreign && t.name(d, f) == Some(b"runtime.casgstatus"))
            .ok_or("no runtime.casgstatus in its function table")?;
        let off = (elf.vaddr_to_offset(f.entry)).ok_or("runtime.casgstatus is not in the file")?;
        let size = (f.end - f.entry) as usize;
        let code = elf.bytes_at_offset(off, size);
        if code.len() != size {
            return Err("runtime.casgstatus's code is not all in the file".into());
        }
        let at = crate::probe::args_entry(code, &[Register::RAX, Register::RBX, Register::RCX])
            .ok_or("no instruction near runtime.casgstatus's entry takes a probe with its arguments in their registers")?;
        Ok(off + at)
    }
}

/// Where the stack-bound check of a Go function branches, if it has one.
///
/// Go functions that may grow their stack begin by comparing SP (or SP less
/// the frame) with the goroutine's stack guard at 16(g) and branching, when
/// short, to a block at the end that calls `runtime.morestack*` and jumps back
/// to the entry. A probe on the entry therefore fires again after every stack
/// growth. One on the branch fires as often, but there the flags tell whether
/// the branch is taken (CF or ZF set: the stack grows and the call starts
/// over), so the program records the call once; and a branch is emulated by
/// uprobes where the instruction after it (a SUB, a MOV) is single-stepped,
/// a second trap. The pattern is recognised by its effect, not by names, so it
/// works on stripped binaries: a compare against `16(reg)`, a JBE forward
/// inside the function, and a block there that calls and then jumps back to
/// the entry.
fn go_prologue_end(code: &[u8], entry: u64) -> Option<u64> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
    let end = entry + code.len() as u64;
    let mut d = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut saw_cmp = false;
    // A large frame adds LEA/MOV/SUB and an underflow branch before the compare.
    for _ in 0..8 {
        if !d.can_decode() {
            return None;
        }
        let ins = d.decode();
        if ins.is_invalid() {
            return None;
        }
        match ins.mnemonic() {
            Mnemonic::Cmp => {
                let guard = (0..ins.op_count()).any(|i| {
                    ins.op_kind(i) == OpKind::Memory
                        && ins.memory_displacement64() == 16
                        && ins.memory_index() == Register::None
                        && ins.memory_base() != Register::RIP
                });
                saw_cmp = guard;
            }
            Mnemonic::Jbe if saw_cmp => {
                let target = ins.near_branch_target();
                let after = ins.next_ip();
                if target > after && target < end && morestack_block(code, entry, target) {
                    return Some(ins.ip() - entry);
                }
                return None;
            }
            Mnemonic::Jb | Mnemonic::Lea | Mnemonic::Mov | Mnemonic::Sub => {}
            _ => return None,
        }
    }
    None
}

/// True if the code at `at` calls something and then jumps back to `entry`.
fn morestack_block(code: &[u8], entry: u64, at: u64) -> bool {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};
    let Some(tail) = code.get((at - entry) as usize..) else {
        return false;
    };
    let mut d = Decoder::with_ip(64, tail, at, DecoderOptions::NONE);
    let mut called = false;
    // Register arguments are spilled before the call and reloaded after it.
    for _ in 0..64 {
        if !d.can_decode() {
            return false;
        }
        let ins = d.decode();
        match ins.mnemonic() {
            Mnemonic::Call => called = true,
            Mnemonic::Jmp => return called && ins.near_branch_target() == entry,
            Mnemonic::INVALID | Mnemonic::Ret => return false,
            _ => {}
        }
    }
    false
}

/// Offsets from the entry of every RET in `code` (a whole function), by
/// decoding it from the start: Go code holds no data among its instructions.
fn ret_offsets(code: &[u8], entry: u64) -> Result<Vec<u64>, String> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};
    let mut d = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut out = Vec::new();
    while d.can_decode() {
        let ins = d.decode();
        let off = ins.ip() - entry;
        if ins.is_invalid() {
            let n = code.len().saturating_sub(off as usize).min(4);
            let hex: Vec<String> = code[off as usize..off as usize + n]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            return Err(format!(
                "its code does not decode at +{off:#x} (bytes {}), so its returns cannot be found",
                hex.join(" ")
            ));
        }
        if ins.mnemonic() == Mnemonic::Ret {
            out.push(off);
        }
    }
    if out.is_empty() {
        return Err("it has no RET instruction (it ends in a jump to another function or never returns), so there is no return to probe".into());
    }
    Ok(out)
}
