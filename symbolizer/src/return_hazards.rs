//! What makes a uretprobe unsafe in a program: switching stacks itself (coroutines,
//! fibers, green threads), and throwing exceptions. Such programs' returns are probed
//! at their instructions instead (`probe::exits`), unless the user says otherwise.
//!
//! A uretprobe replaces a function's return address with the kernel's trampoline and
//! keeps the real one on a per-thread list, matched at the return by the stack pointer.
//! A function that returns on another stack than it was entered on (a coroutine switch
//! under it, or a switch function itself) finds the list in another order: the kernel
//! then returns to another call's address, or discards pending returns and kills the
//! process when they come (SIGILL). Seen: PowerDNS Recursor, whose queries run on
//! Boost.Context stacks, ended with "stack smashing detected" at its first queries.

use crate::elf::ElfInfo;

/// Functions that leave for another stack and come back on one: an object that imports
/// or defines one is a program that switches stacks.
const SWITCHES: &[&str] = &[
    "jump_fcontext",      // Boost.Context (folly fibers, PowerDNS)
    "ontop_fcontext",     // Boost.Context
    "swapcontext",        // ucontext (QEMU, many C coroutine libraries)
    "coctx_swap",         // libco
    "acosw",              // libaco
    "coroutine_transfer", // Ruby's fibers
    "coro_transfer",      // libcoro (Tarantool)
    "slp_switch",         // greenlet (gevent, eventlet)
];

/// Defined by libc for every program: only an import of one says a program uses it,
/// or a definition in an executable linked statically, which holds only the parts of
/// libc it calls. (`setcontext` is not a sign: OpenSSL's libcrypto imports it for
/// asynchronous jobs that only some engines start, so nearly every server would be
/// refused.)
const IN_LIBC: &[&str] = &["swapcontext"];

/// The stack-switching function `elf` imports or defines, and which it does; `main`
/// says `elf` is the program's executable.
pub(crate) fn switch_of(elf: &ElfInfo, main: bool) -> Option<(&'static str, &'static str)> {
    use object::{Object, ObjectSymbol};
    let f = elf.object();
    let static_exe = main && !has_interpreter(elf);
    for s in f.dynamic_symbols().chain(f.symbols()) {
        let Ok(name) = s.name() else { continue };
        let Some(&known) = SWITCHES.iter().find(|&&n| n == name) else {
            continue;
        };
        if s.is_undefined() {
            return Some((known, "imports"));
        }
        if static_exe || !IN_LIBC.contains(&known) {
            return Some((known, "defines"));
        }
    }
    None
}

/// Whether `elf` names a dynamic loader (`PT_INTERP`): an executable without one is
/// linked statically.
fn has_interpreter(elf: &ElfInfo) -> bool {
    use object::read::elf::ProgramHeader;
    let f = elf.object();
    let endian = f.endian();
    (f.elf_program_headers().iter()).any(|p| p.p_type(endian) == object::elf::PT_INTERP)
}

/// Where exceptions start (C++'s `__cxa_throw`, and the unwinder's entry, which Rust's
/// panics and C++ call): an object that imports one throws. An exception that leaves a
/// call probed for its return finds the kernel's trampoline for the call's return
/// address, which no unwind table covers, and ends the process (`std::terminate`).
const THROWS: &[&str] = &["__cxa_throw", "_Unwind_RaiseException"];

/// How `elf` shows that it throws exceptions, for a message: it imports a throwing
/// function; or, being the program's executable (`main`), it defines one or carries the
/// tables of exception landing pads (`.gcc_except_table`), as a program does that has
/// the C++ runtime linked in (`-static`, `-static-libstdc++`), stripped or not. Libraries
/// are judged by their imports alone: libgcc_s defines the unwinder's entry for every
/// program that maps it, and libc has landing pads for thread cancellation.
pub(crate) fn thrower_of(elf: &ElfInfo, main: bool) -> Option<String> {
    use object::{Object, ObjectSymbol};
    let f = elf.object();
    let imported = f.dynamic_symbols().find_map(|s| {
        let name = s.name().ok()?;
        let known = THROWS.iter().find(|&&n| n == name)?;
        s.is_undefined().then_some(*known)
    });
    if let Some(known) = imported {
        return Some(format!("imports {known}"));
    }
    if !main {
        return None;
    }
    let defined = (f.symbols().chain(f.dynamic_symbols())).find_map(|s| {
        let name = s.name().ok()?;
        let known = THROWS.iter().find(|&&n| n == name)?;
        (!s.is_undefined()).then_some(*known)
    });
    if let Some(known) = defined {
        return Some(format!("defines {known} (linked in statically)"));
    }
    f.section_by_name(".gcc_except_table")
        .map(|_| "has exception tables (.gcc_except_table)".to_string())
}
