//! Where to put a uprobe at a function entry, and what it will cost.
//!
//! x86 uprobes emulate a few instructions (push, jmp/call rel, nop) in the
//! kernel; anything else is single-stepped out of line, which costs a second
//! trap. Measured on the reference machine: 0.74 us/hit emulated vs 10.4 us/hit
//! single-stepped. Behind an `endbr64` (CET builds: Ubuntu's and Fedora's default) the
//! probe goes on the next instruction: a call recorded this way cost 2.6-2.7 us (2.4 us
//! built without `endbr64`), where bpftrace, which probes the `endbr64`, took 6.6 us.
//!
//! A 5-byte nop (`-pg -mfentry -mnop-mcount`, clang's `-fpatchable-function-entry=5`)
//! is cheaper still: this machine's kernel (6.18) rewrites a uprobe on one into a call to
//! its uprobe trampoline, with no trap (1.51-1.60 us per uprobe+uretprobe pair against
//! 1.87-2.14 us on `push %rbp`, bpftrace on the same function here).

const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Result of looking at the first instruction(s) of a function.
pub(crate) struct Placement {
    pub skipped: u64,
    pub warning: Option<String>,
}

pub(crate) fn analyze(code: &[u8]) -> Placement {
    let mut skipped = 0;
    let mut c = code;
    if c.starts_with(&ENDBR64) {
        skipped = 4;
        c = &c[4..];
    }
    if c.is_empty() || is_emulated(c) {
        return Placement {
            skipped,
            warning: None,
        };
    }
    let what = match mnemonic(c) {
        Some(m) => m,
        None => {
            let n = c.len().min(4);
            let hex: Vec<String> = c[..n].iter().map(|b| format!("{b:02x}")).collect();
            format!("bytes {}", hex.join(" "))
        }
    };
    Placement {
        skipped,
        warning: Some(format!(
            "first instruction `{what}` is single-stepped by uprobes (~10 us per hit here)"
        )),
    }
}

fn is_emulated(c: &[u8]) -> bool {
    match c[0] {
        0x50..=0x57 => true,                                          // push %reg
        0x41 if c.len() > 1 && (0x50..=0x57).contains(&c[1]) => true, // push %r8-%r15
        0x90 => true,                                                 // nop
        0x66 if c.len() > 1 && c[1] == 0x90 => true,                  // xchg %ax,%ax
        0x0f if c.len() > 1 && c[1] == 0x1f => true,                  // nopl/nopw
        0x66 if c.len() > 2 && c[1] == 0x0f && c[2] == 0x1f => true,  // nopw
        0xe8 | 0xe9 | 0xeb => true,                                   // call/jmp rel
        0x70..=0x7f => true,                                          // jcc rel8
        _ => false,
    }
}

const REG64: [&str; 8] = ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi"];
const REG32: [&str; 8] = ["eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi"];

/// A short AT&T mnemonic for the prologue instructions compilers commonly emit.
fn mnemonic(c: &[u8]) -> Option<String> {
    let b = |i: usize| c.get(i).copied();
    match (b(0)?, b(1), b(2)) {
        (0x48, Some(0x83), Some(m)) if m & 0xf8 == 0xe8 => {
            Some(format!("sub $0x{:x},%{}", b(3)?, REG64[(m & 7) as usize]))
        }
        (0x48, Some(0x81), Some(m)) if m & 0xf8 == 0xe8 => {
            let imm = u32::from_le_bytes(c.get(3..7)?.try_into().ok()?);
            Some(format!("sub $0x{imm:x},%{}", REG64[(m & 7) as usize]))
        }
        (0x48, Some(0x89), Some(m)) if m >> 6 == 3 => Some(format!(
            "mov %{},%{}",
            REG64[((m >> 3) & 7) as usize],
            REG64[(m & 7) as usize]
        )),
        (0x89, Some(m), _) if m >> 6 == 3 => Some(format!(
            "mov %{},%{}",
            REG32[((m >> 3) & 7) as usize],
            REG32[(m & 7) as usize]
        )),
        (0x31, Some(m), _) if m >> 6 == 3 => Some(format!(
            "xor %{},%{}",
            REG32[((m >> 3) & 7) as usize],
            REG32[(m & 7) as usize]
        )),
        (0x85, Some(m), _) if m >> 6 == 3 => Some(format!(
            "test %{},%{}",
            REG32[((m >> 3) & 7) as usize],
            REG32[(m & 7) as usize]
        )),
        (0x8d, ..) => Some("lea".to_string()),
        (0xc3, ..) => Some("ret".to_string()),
        (0xb8..=0xbf, ..) => {
            let imm = u32::from_le_bytes(c.get(1..5)?.try_into().ok()?);
            Some(format!("mov $0x{imm:x},%{}", REG32[(c[0] - 0xb8) as usize]))
        }
        _ => None,
    }
}

/// Where the stack-bound check of a Go function ends, if it has one.
///
/// Go functions that may grow their stack begin by comparing SP (or SP less
/// the frame) with the goroutine's stack guard at 16(g) and branching, when
/// short, to a block at the end that calls `runtime.morestack*` and jumps back
/// to the entry. A probe on the entry therefore fires again after every stack
/// growth; one placed after the branch fires once per call. The pattern is
/// recognised by its effect, not by names, so it works on stripped binaries:
/// a compare against `16(reg)`, a JBE forward inside the function, and a
/// block there that calls and then jumps back to the entry.
pub(crate) fn go_prologue_end(code: &[u8], entry: u64) -> Option<u64> {
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
                    return Some(after - entry);
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
pub(crate) fn ret_offsets(code: &[u8], entry: u64) -> Result<Vec<u64>, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endbr_then_push() {
        let p = analyze(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48]);
        assert_eq!(p.skipped, 4);
        assert!(p.warning.is_none());
    }

    #[test]
    fn sub_rsp_is_single_stepped() {
        let p = analyze(&[0x48, 0x83, 0xec, 0x08, 0x90]);
        assert_eq!(p.skipped, 0);
        assert_eq!(
            p.warning.as_deref(),
            Some("first instruction `sub $0x8,%rsp` is single-stepped by uprobes (~10 us per hit here)")
        );
    }

    #[test]
    fn unknown_bytes_are_named() {
        let p = analyze(&[0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0xb6, 0x07, 0x01]);
        assert!(p.warning.unwrap().contains("bytes 0f b6 07 01"));
    }
}
