//! Where to put a uprobe at a function entry, and what it will cost.
//!
//! x86 uprobes emulate a few instructions (push, jmp/call/jcc rel, nop) in the
//! kernel; anything else is single-stepped out of line, which costs a second
//! trap. Behind an `endbr64` (CET builds: Ubuntu's and Fedora's default) the
//! probe goes on the next instruction. A 5-byte nop (`-pg -mfentry
//! -mnop-mcount`, clang's `-fpatchable-function-entry=5`) is cheaper still:
//! recent kernels rewrite a uprobe on one into a call to their uprobe
//! trampoline, with no trap. The costs measured: docs/performance.md.

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
            "first instruction `{what}` is single-stepped by uprobes (a second trap per hit)"
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
        0x0f if c.len() > 1 && (0x80..=0x8f).contains(&c[1]) => true, // jcc rel32
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
            Some("first instruction `sub $0x8,%rsp` is single-stepped by uprobes (a second trap per hit)")
        );
    }

    #[test]
    fn unknown_bytes_are_named() {
        let p = analyze(&[0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0xb6, 0x07, 0x01]);
        assert!(p.warning.unwrap().contains("bytes 0f b6 07 01"));
    }
}
