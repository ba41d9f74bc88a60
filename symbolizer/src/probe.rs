//! Where to put a uprobe at a function entry, and what it will cost.
//!
//! x86 uprobes emulate a few instructions (push, jmp/call/jcc rel, nop) in the
//! kernel; anything else is single-stepped out of line, which costs a second
//! trap (far dearer than an emulated one, and all of it inside the measured call).
//! Behind an `endbr64` (CET builds: Ubuntu's and Fedora's default) the probe
//! goes on the next instruction; behind a first instruction that would be
//! single-stepped, on the first emulated one of the next few, when the ones
//! before it can run natively first (see [`moved_entry`]). A 5-byte nop (`-pg
//! -mfentry -mnop-mcount`, clang's `-fpatchable-function-entry=5`) is cheaper
//! still: recent kernels rewrite a uprobe on one into a call to their uprobe
//! trampoline, with no trap. The costs measured: docs/performance.md.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction,
    InstructionInfoFactory, Mnemonic, OpAccess, Register,
};

const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Instructions at most run natively before a moved entry probe.
const MAX_MOVED: usize = 4;

/// Result of looking at the first instruction(s) of a function.
pub(crate) struct Placement {
    pub skipped: u64,
    pub warning: Option<String>,
    /// Why no entry probe can go anywhere (the kernel refuses the first instruction, and
    /// none after it can take its place).
    pub refused: Option<String>,
}

/// Where the entry probe of the function whose code starts `code` goes. `whole`: `code`
/// is all of the function, so that its branches can be checked and the probe moved past
/// a first instruction that would be single-stepped or that the kernel refuses to probe;
/// never onto an offset `avoid` names.
pub(crate) fn analyze(code: &[u8], whole: bool, avoid: impl Fn(u64) -> bool) -> Placement {
    let start = if code.starts_with(&ENDBR64) { 4 } else { 0 };
    let c = &code[start..];
    let at = |skipped: usize| Placement {
        skipped: skipped as u64,
        warning: None,
        refused: None,
    };
    if c.is_empty() || (is_emulated(c) && !avoid(start as u64)) {
        return at(start);
    }
    if whole {
        if let Some(moved) = moved_entry(code, start, &avoid) {
            return at(moved);
        }
    }
    if kernel_refuses(c) {
        return Placement {
            refused: Some(format!(
                "its first instruction `{}` is one uprobes refuse (a lock or segment prefix), and none of the next can take the probe in its place",
                mnemonic(c)
            )),
            ..at(start)
        };
    }
    if avoid(start as u64) {
        return Placement {
            refused: Some(format!(
                "its first instruction `{}` leaves it, so its entry and its return would be one probe",
                mnemonic(c)
            )),
            ..at(start)
        };
    }
    Placement {
        warning: Some(format!(
            "first instruction `{}` is single-stepped by uprobes (a second trap per hit)",
            mnemonic(c)
        )),
        ..at(start)
    }
}

/// The offset of the first instruction uprobes emulate among the function's first few,
/// when every one before it (from `start`) runs the same before the probe as after it:
/// none changes the flow of control or the stack pointer (the uretprobe takes the return
/// address at `[rsp]` where it fires, and would overwrite a local slot), and no branch of
/// the function lands on them or on the probe (which would fire again in the same call).
/// No program reads the arguments at a function's entry, so moving past instructions
/// that set registers changes nothing recorded. When the first instruction is one the
/// kernel refuses, or `avoid`s, the first one after it that it can probe will do (single-
/// stepped) if none is emulated.
fn moved_entry(code: &[u8], start: usize, avoid: impl Fn(u64) -> bool) -> Option<usize> {
    let must_move = kernel_refuses(&code[start..]) || avoid(start as u64);
    let mut fallback = None;
    let mut d = Decoder::with_ip(64, &code[start..], start as u64, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    for _ in 0..MAX_MOVED {
        if !d.can_decode() {
            break;
        }
        let ins = d.decode();
        if ins.is_invalid() {
            break;
        }
        let at = ins.ip() as usize;
        let free = at > start && !avoid(at as u64) && !kernel_refuses(&code[at..]);
        if free && is_emulated(&code[at..]) {
            return lands_nowhere(code, start, at).then_some(at).or(fallback);
        }
        if free && must_move && fallback.is_none() && lands_nowhere(code, start, at) {
            fallback = Some(at);
        }
        if ins.flow_control() != FlowControl::Next || writes_rsp(&ins, &mut info) {
            break;
        }
    }
    fallback
}

/// Instructions at most run natively before a probe that reads a function's arguments.
const MAX_BEFORE_ARGS: usize = 12;

/// The offset in a function (`code`, all of it) of the first instruction uprobes emulate,
/// for a probe that reads the function's arguments in `args` at entry: every instruction
/// before it leaves them as they were and goes on to the next (a frame set up, arguments
/// spilled), and no branch of the function lands after the entry up to it (the probe
/// would fire again in the same call). None when no such instruction is near the entry.
pub(crate) fn args_entry(code: &[u8], args: &[Register]) -> Option<u64> {
    let mut d = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    for _ in 0..MAX_BEFORE_ARGS {
        if !d.can_decode() {
            return None;
        }
        let ins = d.decode();
        if ins.is_invalid() {
            return None;
        }
        let at = ins.ip() as usize;
        let c = &code[at..];
        if is_emulated(c) && !kernel_refuses(c) && lands_nowhere(code, 0, at) {
            return Some(at as u64);
        }
        let writes = info.info(&ins).used_registers().iter().any(|u| {
            args.contains(&u.register().full_register())
                && !matches!(u.access(), OpAccess::Read | OpAccess::CondRead)
        });
        if writes || ins.flow_control() != FlowControl::Next {
            return None;
        }
    }
    None
}

/// Whether the kernel refuses a uprobe on the instruction `c` starts with: x86's uprobes
/// refuse a lock prefix and the es, cs, ss and ds segment prefixes. It says so when the
/// probe is attached to a running process; when the binary is mapped later (a launched
/// command, a library loaded later) the probe is silently left out.
fn kernel_refuses(c: &[u8]) -> bool {
    for &b in c.iter().take(15) {
        match b {
            0xf0 | 0x26 | 0x2e | 0x36 | 0x3e => return true,
            0x66 | 0x67 | 0xf2 | 0xf3 | 0x64 | 0x65 => continue,
            _ => return false,
        }
    }
    false
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

/// Where a native function leaves, for probes in place of a uretprobe: the offsets of its
/// return instructions and of its direct jumps out of its own code (tail calls), found by
/// decoding all of it (`code`) from its start. The decoding is trusted only when it is
/// consistent, since a uprobe in the middle of an instruction would corrupt it: every
/// byte decodes, and every direct branch into the function lands on an instruction found
/// (or just past the lock prefix of one: glibc skips the prefix when single-threaded).
/// A jump to what `own_part` says is another part of the function (its cold part, where
/// a compiler moved unlikely paths and landing pads) does not leave it. A function that
/// never returns (it ends in a call of `abort` or a throw) has no exits: its calls end
/// where the thread's stack shows them gone.
pub(crate) fn exits(
    code: &[u8],
    own_part: impl Fn(u64) -> bool,
) -> Result<(Vec<u64>, Vec<u64>), String> {
    let len = code.len() as u64;
    let mut starts = vec![false; code.len()];
    let mut targets = Vec::new();
    let (mut rets, mut tails) = (Vec::new(), Vec::new());
    let mut indirect = false;
    let mut d = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    while d.can_decode() {
        let ins = d.decode();
        let at = ins.ip();
        if ins.is_invalid() {
            return Err(format!(
                "its code does not decode at `+{at:#x}: {}`, so its returns cannot be found",
                mnemonic(&code[at as usize..])
            ));
        }
        starts[at as usize] = true;
        let direct = ins.is_jmp_short_or_near() || ins.is_jcc_short_or_near() || ins.is_call_near();
        if direct && ins.near_branch_target() < len {
            targets.push(ins.near_branch_target());
        }
        indirect |= ins.flow_control() == FlowControl::IndirectBranch;
        let leaves = ins.flow_control() == FlowControl::Return
            || (ins.is_jmp_short_or_near()
                && ins.near_branch_target() >= len
                && !own_part(ins.near_branch_target()));
        if leaves && kernel_refuses(&code[at as usize..]) {
            return Err(format!(
                "it leaves at `+{at:#x}: {}`, an instruction uprobes refuse (a segment prefix)",
                mnemonic(&code[at as usize..])
            ));
        }
        if ins.flow_control() == FlowControl::Return {
            rets.push(at);
        } else if leaves {
            tails.push(at);
        }
    }
    let past_lock = |t: usize| t > 0 && starts[t - 1] && code[t - 1] == 0xf0;
    if let Some(t) = (targets.iter()).find(|&&t| !starts[t as usize] && !past_lock(t as usize)) {
        return Err(format!(
            "a branch of it lands inside an instruction, at `+{t:#x}`: its code is not all instructions, so its returns cannot be found safely"
        ));
    }
    if rets.is_empty() && tails.is_empty() && indirect {
        return Err("it leaves only by indirect jumps, which cannot be told from its own branches, so its returns cannot be found (--unsafe-returns probes them with a uretprobe, which an exception leaving it would end)".into());
    }
    Ok((rets, tails))
}

/// How many of a function's indirect jumps (`code`, all of it) come right after its frame
/// is taken down (a `pop`, `leave` or `add $N,%rsp`): tail calls through a pointer, which
/// leave it where no probe can tell them from its own switch's jumps. A switch jumps with
/// its frame still up.
pub(crate) fn indirect_tails(code: &[u8]) -> usize {
    let mut d = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let (mut n, mut frame_down) = (0, false);
    while d.can_decode() {
        let ins = d.decode();
        if ins.flow_control() == FlowControl::IndirectBranch && frame_down {
            n += 1;
        }
        frame_down = match ins.mnemonic() {
            Mnemonic::Pop | Mnemonic::Leave => true,
            Mnemonic::Add => ins.op0_register() == Register::RSP,
            _ => false,
        };
    }
    n
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
        let p = analyze(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48], false, |_| false);
        assert_eq!(p.skipped, 4);
        assert!(p.warning.is_none());
    }

    #[test]
    fn sub_rsp_is_single_stepped() {
        let c = code(&[&[0x48, 0x83, 0xec, 0x08], &[0x74, 0x00], &[0xc3]]);
        let p = analyze(&c, true, |_| false);
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
        let p = analyze(&c, true, |_| false);
        assert_eq!((p.skipped, p.warning), (7, None));
        // Not without the whole function to check its branches.
        let p = analyze(&c, false, |_| false);
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
        assert_eq!(analyze(&c, true, |_| false).skipped, 10);
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
        let p = analyze(&c, true, |_| false);
        assert_eq!(p.skipped, 0);
        let w = p.warning.unwrap();
        assert!(w.contains("`mov 0x10(%rip),%rax`"), "{w}");
        // A pop, then a branch: the stack pointer moved.
        let c = code(&[&[0x48, 0x8b, 0x07], &[0x58], &[0x74, 0x00], &[0xc3]]);
        assert_eq!(analyze(&c, true, |_| false).skipped, 0);
        // A return first; and more instructions than are run before a probe.
        assert_eq!(analyze(&[0xc3, 0x90], true, |_| false).skipped, 0);
        let movs: Vec<u8> = (0..MAX_MOVED).flat_map(|_| [0x48, 0x89, 0xf8]).collect();
        assert_eq!(
            analyze(&code(&[&movs, &[0x90]]), true, |_| false).skipped,
            0
        );
        // Bytes that do not decode.
        assert_eq!(
            analyze(&code(&[&MOV_RIP, &[0x90, 0x06]]), true, |_| false).skipped,
            0
        );
    }

    #[test]
    fn unknown_bytes_are_named() {
        let p = analyze(&[0xf3, 0x0f, 0x1e, 0xfa, 0x06, 0x01], false, |_| false);
        assert!(p.warning.unwrap().contains("bytes 06 01"), "");
    }

    #[test]
    fn exits_are_returns_and_jumps_out() {
        let c = code(&[
            &[0x55],                   // 0: push %rbp
            &[0x74, 0x03],             // 1: je 6
            &[0x5d],                   // 3: pop %rbp
            &[0xf3, 0xc3],             // 4: repz ret
            &[0x5d],                   // 6: pop %rbp
            &[0xe9, 0, 1, 0, 0],       // 7: jmp +0x100 (another function)
            &[0xeb, 0xf3],             // 12: jmp 1 (its own code)
            &[0x0f, 0x84, 0, 1, 0, 0], // 14: je +0x100 (not followed)
            &[0xc2, 0x08, 0x00],       // 20: ret $8
        ]);
        assert_eq!(exits(&c, |_| false).unwrap(), (vec![4, 20], vec![7]));
        // A jump to its own cold part does not leave it.
        assert_eq!(exits(&c, |t| t == 0x10c).unwrap(), (vec![4, 20], vec![]));
    }

    #[test]
    fn indirect_jumps_after_the_frame_is_down_are_tail_calls() {
        let c = code(&[
            &[0x55],                   // push %rbp
            &[0x48, 0x01, 0xd0],       // add %rdx,%rax
            &[0xff, 0xe0],             // jmp *%rax: a switch, its frame up
            &[0x5d],                   // pop %rbp
            &[0xff, 0xe0],             // jmp *%rax: a tail call
            &[0x48, 0x83, 0xc4, 0x08], // add $8,%rsp
            &[0xff, 0x60, 0x18],       // jmp *0x18(%rax): a tail call
            &[0xc9],                   // leave
            &[0xc3],                   // ret
        ]);
        assert_eq!(indirect_tails(&c), 2);
        assert_eq!(indirect_tails(&code(&[&[0x5d], &[0xc3]])), 0);
    }

    #[test]
    fn exits_are_not_guessed_in_code_that_is_not_all_instructions() {
        // A branch into the middle of the MOV: bytes among the instructions, or another
        // reading of them.
        let c = code(&[&MOV_RIP, &[0x74, 0xfa], &[0xc3]]);
        let e = exits(&c, |_| false).unwrap_err();
        assert!(e.contains("lands inside an instruction, at `+0x3`"), "{e}");
        let e = exits(&code(&[&[0x55], &[0x06], &[0xc3]]), |_| false).unwrap_err();
        assert!(e.contains("does not decode at `+0x1: bytes 06 c3`"), "{e}");
        // Nothing that leaves but an indirect jump, which may be its switch's.
        let e = exits(&code(&[&[0x90], &[0xff, 0xe0]]), |_| false).unwrap_err();
        assert!(e.contains("only by indirect jumps"), "{e}");
        // Never returning (a loop, or a call of a function that never returns): no exits.
        let none = exits(&code(&[&[0x90], &[0xeb, 0xfd]]), |_| false).unwrap();
        assert_eq!(none, (vec![], vec![]));
        // glibc's jump over a lock prefix lands inside the locked instruction.
        let c = code(&[
            &[0x74, 0x01],             // 0: je 3
            &[0xf0, 0x0f, 0xb1, 0x17], // 2: lock cmpxchg %edx,(%rdi)
            &[0xc3],                   // 6: ret
        ]);
        assert_eq!(exits(&c, |_| false).unwrap(), (vec![6], vec![]));
    }

    #[test]
    fn an_entry_the_kernel_refuses_moves_to_one_it_takes() {
        let lock_add: &[u8] = &[0xf0, 0x48, 0x83, 0x05, 0x10, 0, 0, 0, 0x01]; // lock addq $1,..(%rip)
        let add_rdi: &[u8] = &[0x48, 0x83, 0xc7, 0x01]; // add $1,%rdi
        let jmp_out: &[u8] = &[0xe9, 0, 1, 0, 0]; // jmp another function
        let c = code(&[lock_add, add_rdi, jmp_out]);
        assert_eq!(analyze(&c, true, |_| false).skipped, 13);
        // The jump is the function's exit: the entry takes the single-stepped ADD.
        let p = analyze(&c, true, |at| at == 13);
        assert_eq!((p.skipped, p.refused), (9, None));
        // Nothing after it to take the probe.
        let p = analyze(&code(&[lock_add, &[0xc3]]), true, |at| at == 9);
        let why = p.refused.unwrap();
        assert!(why.contains("`lock addq $0x1,0x10(%rip)`"), "{why}");
        assert!(kernel_refuses(&[0x2e, 0xff, 0xe0]) && !kernel_refuses(&[0x66, 0x90]));
    }

    /// Placement and exits over arbitrary bytes (a binary's code is whatever it is): an
    /// answer or a reason, never a panic; any exit found is an instruction start.
    #[test]
    fn arbitrary_code_gets_an_answer() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = 1 + (next() % 48) as usize;
            // Mostly real opcodes' first bytes, to reach past the first instruction.
            let c: Vec<u8> = (0..len)
                .map(|_| match next() % 4 {
                    0 => [0xc3, 0xe9, 0xeb, 0x74, 0xf0, 0x55, 0x48, 0x90][next() as usize % 8],
                    _ => next() as u8,
                })
                .collect();
            let p = analyze(&c, true, |at| at % 7 == 3);
            assert!(p.skipped as usize <= c.len());
            if let Ok((rets, tails)) = exits(&c, |t| t % 5 == 0) {
                let mut d = Decoder::with_ip(64, &c, 0, DecoderOptions::NONE);
                let starts: Vec<u64> =
                    std::iter::from_fn(|| d.can_decode().then(|| d.decode().ip())).collect();
                assert!(
                    rets.iter().chain(&tails).all(|e| starts.contains(e)),
                    "{c:02x?}"
                );
            }
        }
    }
}
