//! Turns what a user types into uprobe attach points, and addresses back into
//! function names and source lines.
//!
//! * [`resolve`] maps a spec such as `main`, `libc:malloc` or `'ns::*'` to ELF
//!   functions with the file offset a uprobe must be attached at.
//! * [`list`] enumerates probe-able functions (`tracer probes`).
//! * [`Symbolizer`] turns addresses (per binary or per process) into inlined
//!   frames with file:line, caching parsed binaries.
//!
//! * [`resolve_usdt`] and [`list_usdt`] find USDT probes (`.note.stapsdt`)
//!   with their semaphores and typed argument locations.
//!
//! Symbols come from `.symtab`, `.dynsym`, separate debug files (build-id and
//! `.gnu_debuglink`) and MiniDebugInfo; source lines come from DWARF 4/5
//! (compressed sections, dwz supplementary files and split DWARF included).
//! Go binaries are also read through their runtime's own table
//! (`.gopclntab`), which stripped Go binaries keep: names, sizes, lines and
//! inlined frames; a Go function's [`FunctionMatch`] says where its entry
//! probe is safe and where its returns are ([`Exit`]), since a uretprobe
//! would crash a Go program.

#![warn(missing_docs)]

mod binary;
mod demangle;
mod dwarf;
mod elf;
mod glob;
mod go;
mod intern;
mod nearest;
mod probe;
mod resolver;
mod return_hazards;
mod sections;
mod starts;
mod symbolize;
mod target;
mod usdt;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use go::{parse_gopclntab, GoFrame, GoFunction, GoPclnTab, GoPclnVersion, GoUnwindTable};
pub use resolver::Resolver;
pub use symbolize::Symbolizer;
pub use usdt::{
    list_usdt, parse_stapsdt_notes, parse_usdt_arg, parse_usdt_args, resolve_usdt, UsdtArg,
    UsdtLocation, UsdtNote, UsdtProbe, PT_REGS_IP,
};

pub use target::system_library;
use target::Scope;

/// What to look for functions in.
#[derive(Clone, Debug)]
pub enum Target {
    /// A running process: its executable and the libraries it has mapped.
    Pid(u32),
    /// An executable file not running yet (`tracer record -- CMD` before exec);
    /// libraries are found through its DT_NEEDED entries.
    Path(PathBuf),
}

/// Knobs for [`resolve`].
#[derive(Default, Clone, Copy, Debug)]
pub struct Options {
    /// Accept a non-glob spec that matches several functions (e.g. a C++
    /// overload set or same-named static functions) instead of failing.
    pub allow_multiple: bool,
    /// Probe the returns of a program that switches stacks itself or throws exceptions
    /// with uretprobes, cheaper than probes at their instructions ([`Exit::Returns`]),
    /// which they get otherwise: the user knows no switch happens and no exception
    /// leaves while a probed function runs.
    pub unsafe_returns: bool,
}

/// One function a uprobe can be attached to.
#[derive(Clone, Debug)]
pub struct FunctionMatch {
    /// Demangled name (Rust without the hash suffix, C++ with parameters).
    pub name: String,
    /// Raw symbol as in the ELF.
    pub symbol: String,
    /// Path the tracer can open (through /proc/PID/root for a process).
    pub binary: PathBuf,
    /// Path as the target process sees it.
    pub display_binary: String,
    /// GNU build-id, hex.
    pub build_id: Option<String>,
    /// ELF virtual address (st_value).
    pub address: u64,
    /// Symbol size in bytes.
    pub size: u64,
    /// File offset to attach the uprobe at, including `skipped`.
    pub file_offset: u64,
    /// Bytes skipped from the function start: an endbr64, and instructions that run
    /// natively before a probe on the first one uprobes emulate (see `probe.rs`); for Go,
    /// up to the stack check's branch.
    pub skipped: u64,
    /// Declaration "file:line" from DWARF when available.
    pub source: Option<String>,
    /// Cost warning, e.g. when the first instruction is single-stepped.
    pub warning: Option<String>,
    /// Why the function cannot be probed at all, if so: no instruction near its entry
    /// takes a uprobe (the kernel refuses lock and segment prefixes, silently where the
    /// binary is mapped after the probe is made).
    pub unprobeable: Option<String>,
    /// Its program switches stacks itself (see `return_hazards`): a call may return on
    /// another stack than the one its thread runs other calls on, so its returns, probed
    /// at their instructions, pair with its entry by its exact frame only.
    pub stacks_switch: bool,
    /// It returns a signed 32-bit integer (DWARF says so): its value is the lower half of
    /// the return register, whose upper half need not be its sign.
    pub returns_i32: bool,
    /// What the function is compiled from, which decides how its returns can be probed.
    pub language: Language,
    /// A Go function's binary: the file offset where its goroutines' status changes are
    /// probed (in `runtime.casgstatus`, where its arguments are in their registers, on an
    /// instruction uprobes emulate), when it can be.
    pub go_status: Option<u64>,
    /// How to probe the function's returns.
    pub exit: Exit,
}

impl FunctionMatch {
    /// Adds `w` to the function's warning.
    pub(crate) fn warn(&mut self, w: &str) {
        self.warning = Some(match self.warning.take() {
            Some(first) => format!("{first}; {w}"),
            None => w.to_string(),
        });
    }
}

/// The language of a function, as far as probing it is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// C, C++, Rust, ...: a uretprobe is safe, unless the program throws exceptions
    /// (see `return_hazards`).
    Native,
    /// A Go function (in the binary's pclntab). A uretprobe rewrites the return
    /// address on the goroutine's stack, which Go's stack copying and traceback
    /// reject ("unexpected return pc"): its returns are probed at each RET.
    Go,
}

/// How the returns of a function can be caught.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    /// With a uretprobe.
    Uretprobe,
    /// With a uprobe at each return instruction and, for native code, at each jump to
    /// another function (a tail call): file offsets. Go functions (the goroutine is in
    /// R14 at each RET) and native ones in programs that throw exceptions. Where one is the
    /// entry probe's own offset (an empty function's `ret`, a thunk's `jmp`), that probe
    /// is both; none at all is a function that never returns.
    Returns {
        /// The RET instructions.
        rets: Vec<u64>,
        /// The jumps that leave the function for another, which returns for it.
        tails: Vec<u64>,
    },
    /// Not at all; the one-line reason.
    Refused(String),
    /// With a uprobe at each RET, which [`list`] does not look for (it would
    /// decode every listed Go function's code): [`resolve`] the function to
    /// get its [`Exit::Returns`], or the reason they cannot be probed.
    Deferred,
}

/// One frame of a symbolized address.
///
/// Names are shared with the symbolizer's caches: a trace names the same
/// functions and files over and over, and copying them per frame was a
/// large part of a lookup's cost.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Frame {
    /// Demangled function name.
    pub function: Option<Arc<str>>,
    /// Source file.
    pub file: Option<Arc<str>>,
    /// Source line.
    pub line: Option<u32>,
}

/// Everything that can go wrong; `Display` is one line a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The PID does not exist (or has exited).
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    /// A kernel thread or zombie: nothing to attach to.
    #[error("process {0} has no executable (kernel thread or zombie?)")]
    NoExecutable(u32),
    /// The spec is syntactically unusable.
    #[error("invalid probe spec `{}`: {}", clean(.spec), clean(.reason))]
    BadSpec {
        /// What the user typed.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No function by that name; `suggestions` holds close names.
    #[error("no function `{}` in {}{}", clean(.func), clean(.binary), fmt_suggestions(.suggestions))]
    NoSuchFunction {
        /// Requested function (or glob).
        func: String,
        /// Binary searched.
        binary: String,
        /// Up to 5 close names.
        suggestions: Vec<String>,
    },
    /// Not in the executable, but a library has it.
    #[error("no function `{}` in {}, but it is found in {}: use {}:{}", clean(.func), clean(.binary), clean(.lib), clean(.short), clean(.func))]
    FoundInLibrary {
        /// Requested function.
        func: String,
        /// Executable searched.
        binary: String,
        /// Library path where it was found.
        lib: String,
        /// Short library name to put in the spec.
        short: String,
    },
    /// A plain name matched several functions.
    #[error("`{}` matches {} functions: {}; pick one (a raw symbol name is unique) or allow multiple", clean(.func), .matches.len(), fmt_list(.matches, 10))]
    Ambiguous {
        /// Requested function.
        func: String,
        /// The candidates as "name (symbol @ 0xaddr)".
        matches: Vec<String>,
    },
    /// The binary has only `.dynsym` and the function is not exported.
    #[error("no function `{}` in {}: the binary is stripped (no .symtab) and only exported functions are visible; install its debug symbols{} or use a non-stripped build{}", clean(.func), clean(.binary), fmt_debug_hint(.build_id), fmt_suggestions(.suggestions))]
    Stripped {
        /// Requested function.
        func: String,
        /// Binary searched.
        binary: String,
        /// Build-id, to name the debug file that would help.
        build_id: Option<String>,
        /// Up to 5 close names among the exported ones.
        suggestions: Vec<String>,
    },
    /// A short library name that the target does not load.
    #[error("library `{}` is not loaded by {}{}", clean(.lib), clean(.target), fmt_available(.available))]
    LibraryNotFound {
        /// Requested library.
        lib: String,
        /// The process or executable.
        target: String,
        /// Library basenames that are loaded.
        available: Vec<String>,
    },
    /// A short library name that matches several libraries.
    #[error("library name `{}` is ambiguous: {}; use a longer name or a path", clean(.lib), fmt_list(.candidates, 12))]
    AmbiguousLibrary {
        /// Requested library.
        lib: String,
        /// Matching paths.
        candidates: Vec<String>,
    },
    /// A file that is not a (64-bit) ELF file.
    #[error("{}: {}", clean(&.path.to_string_lossy()), clean(.reason))]
    NotElf {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// The symbol's address lies in no PT_LOAD segment.
    #[error("{}: address {addr:#x} of `{}` is in no loadable segment", clean(&.path.to_string_lossy()), clean(.func))]
    NotLoadable {
        /// The binary.
        path: PathBuf,
        /// Function name.
        func: String,
        /// Its address.
        addr: u64,
    },
    /// An address that no mapping of the process covers.
    #[error("address {addr:#x} is not mapped in process {pid}")]
    AddressNotMapped {
        /// Process.
        pid: u32,
        /// Runtime address.
        addr: u64,
    },
    /// An address in an anonymous or special mapping (`[vdso]`, JIT code, ...).
    #[error("address {addr:#x} in process {pid} is in `{}`, which is not backed by a file", clean(.mapping))]
    NotFileBacked {
        /// Process.
        pid: u32,
        /// Runtime address.
        addr: u64,
        /// The mapping's name, e.g. `[vdso]`.
        mapping: String,
    },
    /// A Go binary whose function table (`.gopclntab`) cannot be read.
    #[error("{}: cannot read its Go function table (.gopclntab): {}", clean(.binary), clean(.reason))]
    GoTable {
        /// The binary.
        binary: String,
        /// What is wrong (unsupported layout, corrupt table).
        reason: String,
    },
    /// A binary without SDT notes.
    #[error("{} has no USDT probes (no .note.stapsdt section)", clean(.binary))]
    NoUsdtProbes {
        /// The binary.
        binary: String,
    },
    /// No USDT probe matches; `suggestions` holds close `provider:name`s.
    #[error("no USDT probe `{}` in {}{}", clean(.probe), clean(.binary), fmt_suggestions(.suggestions))]
    NoSuchUsdtProbe {
        /// Requested `provider:name` (globs).
        probe: String,
        /// Binary searched.
        binary: String,
        /// Up to 5 close names.
        suggestions: Vec<String>,
    },
    /// A USDT probe whose arguments cannot be read.
    #[error("USDT probe `{}` in {}: {}", clean(.probe), clean(.binary), clean(.reason))]
    UnsupportedUsdtArgs {
        /// `provider:name`.
        probe: String,
        /// The binary.
        binary: String,
        /// Which argument and why.
        reason: String,
    },
    /// Malformed SDT notes.
    #[error("{}: cannot read its USDT notes: {}", clean(.binary), clean(.reason))]
    BadUsdtNotes {
        /// The binary.
        binary: String,
        /// What is wrong.
        reason: String,
    },
    /// I/O error on a file.
    #[error("{}: {source}", clean(&.path.to_string_lossy()))]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

fn fmt_suggestions(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!("; did you mean: {}?", fmt_list(s, s.len()))
    }
}

/// A name from a binary, with its control characters escaped: a message stays one line
/// whatever the binary holds.
fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| match c.is_control() {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

fn fmt_debug_hint(id: &Option<String>) -> String {
    match id {
        Some(id) if id.len() > 2 => format!(
            " (/usr/lib/debug/.build-id/{}/{}.debug)",
            &id[..2],
            &id[2..]
        ),
        _ => String::new(),
    }
}

fn fmt_available(a: &[String]) -> String {
    if a.is_empty() {
        String::new()
    } else {
        format!(" (loaded: {})", fmt_list(a, 12))
    }
}

/// Joins at most `max` items, so a message stays one readable line.
fn fmt_list(items: &[String], max: usize) -> String {
    let shown: Vec<_> = items[..items.len().min(max)]
        .iter()
        .map(|i| clean(i))
        .collect();
    let mut s = shown.join(", ");
    if items.len() > max {
        s.push_str(&format!(" and {} more", items.len() - max));
    }
    s
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub(crate) fn not_elf(path: &Path, reason: &str) -> Error {
        Error::NotElf {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }
}

/// Splits a spec or pattern `LIB:FUNC` into its library (or path) and function;
/// `::` inside C++/Rust paths is not a separator.
pub fn split_spec(spec: &str) -> (Option<&str>, &str) {
    let b = spec.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b':' {
            if i + 1 < b.len() && b[i + 1] == b':' {
                i += 2;
                continue;
            }
            return (Some(&spec[..i]), &spec[i + 1..]);
        }
        i += 1;
    }
    (None, spec)
}

fn short_lib_name(display: &str) -> String {
    let base = target::basename(display);
    match base.find(".so") {
        Some(i) if i > 0 => base[..i].to_string(),
        _ => base.to_string(),
    }
}

/// Resolves a probe spec (`FUNC`, `LIB:FUNC`, `PATH:FUNC`, globs allowed) to
/// attach points in `target` (see [`Resolver::resolve`]).
pub fn resolve(target: &Target, spec: &str, opts: &Options) -> Result<Vec<FunctionMatch>, Error> {
    Resolver::new().resolve(target, spec, opts)
}

/// Whether the program of `target` throws exceptions, which end it where one leaves a
/// call whose return address a uretprobe replaced (see `return_hazards`): the file that
/// imports the throwing function, and the function, for a message.
pub fn throws_exceptions(target: &Target) -> Option<String> {
    Scope::new(target).ok()?.throws()
}

/// Whether the program of `target` switches stacks itself, where a uretprobe's return
/// address would be taken back on another stack (see `return_hazards`): which file
/// imports or defines which switching function, for a message.
pub fn switches_stacks(target: &Target) -> Option<String> {
    Scope::new(target).ok()?.switches_stacks()
}

/// Lists probe-able functions like `bpftrace -l` (see [`Resolver::list`]).
pub fn list(target: &Target, pattern: Option<&str>) -> Result<Vec<FunctionMatch>, Error> {
    Resolver::new().list(target, pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_split() {
        assert_eq!(split_spec("main"), (None, "main"));
        assert_eq!(split_spec("libc:malloc"), (Some("libc"), "malloc"));
        assert_eq!(split_spec("ns::Class::m"), (None, "ns::Class::m"));
        assert_eq!(split_spec("/a/b.so:ns::f"), (Some("/a/b.so"), "ns::f"));
    }

    #[test]
    fn errors_are_one_line() {
        let e = Error::Stripped {
            func: "f".into(),
            binary: "/bin/x".into(),
            build_id: Some("abcdef".into()),
            suggestions: vec!["g".into()],
        };
        let s = e.to_string();
        assert!(!s.contains('\n'));
        assert!(s.contains("/usr/lib/debug/.build-id/ab/cdef.debug"), "{s}");
        assert!(s.contains("did you mean: g?"), "{s}");
    }
}
