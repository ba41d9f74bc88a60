//! Where to put a uprobe at a function entry, and what it will cost.
//!
//! x86 uprobes emulate a few instructions (push, jmp/call/jcc rel, nop) in the
//! kernel; anything else is single-stepped out of line, which costs a second
//! trap (tens of microseconds in some VMs, all of it inside the measured call).
//! Behind an `endbr64` (CET builds: Ubuntu's and Fedora's default) the probe
//! goes on the next instruction; behind a first instruction that would be
//! single-stepped, on the first emulated one of the next few, when the ones
//! before it can run natively first (see [`moved_entry`]). A 5-byte nop (`-pg
//! -mfentry -mnop-mcount`, clang's `-fpatchable-function-entry=5`) is cheaper
//! still: recent kernels rewrite a uprobe on one into a call to their uprobe
//! trampoline, with no trap. The costs measured: docs/performance.md.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction,
    InstructionInfoFactory, OpAccess, Register,
};

const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Instructions at most run natively before a moved entry probe.
const MAX_MOVED: usize = 4;

/// Result of looking at the first instruction(s) of a function.
pub(crate) struct Placement {
    pub skipped: u64,
    pub warning: Option<String>,
}

/// Where the entry probe of the function whose code starts `code` goes. `whole`: `code`
/// is all of the function, so that its branches can be checked and the probe moved past
/// a first instruction that would be single-stepped.
pub(crate) fn analyze(code: &[u8], whole: bool) -> Placement {
    let start = if code.starts_with(&ENDBR64) { 4 } else { 0 };
    let c = &code[start..];
    if c.is_empty() || is_emulated(c) {
        return Placement {
            skipped: start as u64,
            warning: None,
        };
    }
    if whole {
        if let Some(at) = moved_entry(code, start) {
            return Placement {
                skipped: at as u64,
                warning: None,
            };
        }
    }
    Placement {
        skipped: start as u64,
        warning: Some(format!(
            "first instruction `{}` is single-stepped by uprobes (a second trap per hit)",
            mnemonic(c)
        )),
    }
}

/// The offset of the first instruction uprobes emulate among the function's first few,
/// when every one before it (from `start`) runs the same before the probe as after it:
/// none changes the flow of control or the stack pointer (the uretprobe takes the return
/// address at `[rsp]` where it fires, and would overwrite a local slot), and no branch of
/// the function lands on them or on the probe (which would fire again in the same call).
/// No program reads the arguments at a function's entry, so moving past instructions
/// that set registers changes nothing recorded.
fn moved_entry(code: &[u8], start: usize) -> Option<usize> {
    let mut d = Decoder::with_ip(64, &code[start..], start as u64, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    for _ in 0..MAX_MOVED {
        if !d.can_decode() {
            return None;
        }
        let ins = d.decode();
        if ins.is_invalid() {
            return None;
        }
        let at = ins.ip() as usize;
        if at > start && is_emulated(&code[at..]) {
            return lands_nowhere(code, start, at).then_some(at);
        }
        if ins.flow_control() != FlowControl::Next || writes_rsp(&ins, &mut info) {
            return None;
        }
    }
    None
}

/// Whether `ins` changes the stack pointer, explicitly or as a push or a pop does.
fn writes_rsp(ins: &Instruction, info: &mut InstructionInfoFactory) -> bool {
    ins.stack_pointer_increment() != 0
        || info.info(ins).used_registers().iter().any(|u| {
            u.register().full_register() == Register::RSP
                && !matches!(u.access(), OpAccess::Read | OpAccess::CondRead)
        })
}

/// Whether no direct branch or call of the function (all of `code`, decoded from its
/// start) targets an offset in `(start, at]`; an undecodable byte makes it unknown: no.
fn lands_nowhere(code: &[u8], start: usize, at: usize) -> bool {
    let mut d = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    while d.can_decode() {
        let ins = d.decode();
        if ins.is_invalid() {
            return false;
        }
        let branch = ins.is_jmp_short_or_near() || ins.is_jcc_short_or_near() || ins.is_call_near();
        if branch && (start as u64 + 1..=at as u64).contains(&ins.near_branch_target()) {
            return false;
        }
    }
    true
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

/// The first instruction of `c` in AT&T syntax, as objdump shows it; its bytes when it
/// does not decode.
fn mnemonic(c: &[u8]) -> String {
    let mut d = Decoder::with_ip(64, c, 0, DecoderOptions::NONE);
    let ins = d.decode();
    if ins.is_invalid() {
        let hex: Vec<String> = c.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return format!("bytes {}", hex.join(" "));
    }
    let mut f = GasFormatter::new();
    f.options_mut().set_small_hex_numbers_in_decimal(false);
    f.options_mut().set_rip_relative_addresses(true);
    f.options_mut().set_uppercase_hex(false);
    let mut out = String::new();
    f.format(&ins, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CMPB_RIP: [u8; 7] = [0x80, 0x3d, 0x10, 0, 0, 0, 0]; // cmpb $0x0,0x10(%rip)
    const MOV_RIP: [u8; 7] = [0x48, 0x8b, 0x05, 0x10, 0, 0, 0]; // mov 0x10(%rip),%rax

    fn code(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn endbr_then_push() {
        let p = analyze(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48], false);
        assert_eq!(p.skipped, 4);
        assert!(p.warning.is_none());
    }

    #[test]
    fn sub_rsp_is_single_stepped() {
        let c = code(&[&[0x48, 0x83, 0xec, 0x08], &[0x74, 0x00], &[0xc3]]);
        let p = analyze(&c, true);
        assert_eq!(p.skipped, 0);
        assert_eq!(
            p.warning.as_deref(),
            Some("first instruction `sub $0x8,%rsp` is single-stepped by uprobes (a second trap per hit)")
        );
    }

    #[test]
    fn a_libc_wrapper_is_probed_at_its_branch() {
        // cmpb $0,__libc_single_threaded(%rip); jne 1f; nop; 1: ret
        let c = code(&[&CMPB_RIP, &[0x75, 0x01], &[0x90], &[0xc3]]);
        let p = analyze(&c, true);
        assert_eq!((p.skipped, p.warning), (7, None));
        // Not without the whole function to check its branches.
        let p = analyze(&c, false);
        assert_eq!(p.skipped, 0);
        assert!(p.warning.unwrap().contains("`cmpb $0x0,0x10(%rip)`"));
        // Behind an endbr64, past a MOV and a TEST.
        let c = code(&[
            &ENDBR64,
            &[0x48, 0x89, 0xf8], // mov %rdi,%rax
            &[0x48, 0x85, 0xc0], // test %rax,%rax
            &[0x74, 0x00],       // je
            &[0xc3],
        ]);
        assert_eq!(analyze(&c, true).skipped, 10);
    }

    #[test]
    fn an_entry_is_not_moved_where_it_could_fire_twice_or_corrupt() {
        // A branch back to the instruction the probe would go on.
        let c = code(&[
            &MOV_RIP,
            &[0x74, 0x03], // 7: je 12
            &[0x90],       // 9: nop
            &[0xeb, 0xfb], // 10: jmp 7
            &[0xc3],       // 12: ret
        ]);
        let p = analyze(&c, true);
        assert_eq!(p.skipped, 0);
        let w = p.warning.unwrap();
        assert!(w.contains("`mov 0x10(%rip),%rax`"), "{w}");
        // A pop, then a branch: the stack pointer moved.
        let c = code(&[&[0x48, 0x8b, 0x07], &[0x58], &[0x74, 0x00], &[0xc3]]);
        assert_eq!(analyze(&c, true).skipped, 0);
        // A return first; and more instructions than are run before a probe.
        assert_eq!(analyze(&[0xc3, 0x90], true).skipped, 0);
        let movs: Vec<u8> = (0..MAX_MOVED).flat_map(|_| [0x48, 0x89, 0xf8]).collect();
        assert_eq!(analyze(&code(&[&movs, &[0x90]]), true).skipped, 0);
        // Bytes that do not decode.
        assert_eq!(analyze(&code(&[&MOV_RIP, &[0x90, 0x06]]), true).skipped, 0);
    }

    #[test]
    fn unknown_bytes_are_named() {
        let p = analyze(&[0xf3, 0x0f, 0x1e, 0xfa, 0x06, 0x01], false);
        assert!(p.warning.unwrap().contains("bytes 06 01"), "");
    }
}
