//! USDT probes: SystemTap SDT notes (`.note.stapsdt`, what `<sys/sdt.h>`
//! and DTRACE_PROBE emit) and their argument specs, read the way libbpf's
//! usdt.c and bpftrace read them.

use std::path::PathBuf;

use object::elf;
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{Endianness, Object, ObjectSection};

use crate::elf::ElfInfo;
use crate::glob::Matcher;
use crate::target::{Located, Scope};
use crate::{Error, Target};

/// One SDT note as stored in the binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtNote {
    /// Provider (`python`).
    pub provider: String,
    /// Probe name (`function__entry`).
    pub name: String,
    /// Address of the probe's nop, as linked.
    pub pc: u64,
    /// Address of `.stapsdt.base` as linked (0 if none).
    pub base: u64,
    /// Address of the semaphore (a u16 counter; 0 if the probe has none), as linked.
    pub semaphore: u64,
    /// Argument specs as written (`-4@%edi 8@-16(%rbp)`).
    pub args: String,
}

/// Where a USDT argument's value is, in terms of what a uprobe handler sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsdtLocation {
    /// In a register: its byte offset in x86_64 `struct pt_regs`.
    Register {
        /// Register as written (`edi`).
        name: String,
        /// Offset in `struct pt_regs`.
        offset: u16,
    },
    /// In memory at register + displacement.
    Memory {
        /// Base register as written.
        name: String,
        /// The base register's offset in `struct pt_regs`.
        offset: u16,
        /// Added to the register's value.
        displacement: i64,
    },
    /// In memory at base + index * scale + displacement.
    Indexed {
        /// Base register's offset in `struct pt_regs`.
        base: u16,
        /// Index register's offset in `struct pt_regs`.
        index: u16,
        /// 1, 2, 4 or 8.
        scale: u8,
        /// Added to the sum.
        displacement: i64,
    },
    /// A constant.
    Constant(i64),
    /// In memory at a symbol plus an addend (`counter+8(%rip)`, or a bare `counter` in
    /// code that is not position-independent): the binary's own data, which moves with
    /// the probe, so it is read at the probe's address plus `address + addend - pc`.
    Static {
        /// The symbol as written.
        symbol: String,
        /// Added to the symbol's address.
        addend: i64,
        /// The symbol's address as linked (prelink-adjusted); 0 until resolved.
        address: u64,
    },
}

/// One parsed argument spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtArg {
    /// Size in bytes, negative when the value is signed (`-4` for an int).
    pub size: i8,
    /// Where the value is.
    pub location: UsdtLocation,
}

/// A USDT probe a uprobe can be attached to.
#[derive(Clone, Debug)]
pub struct UsdtProbe {
    /// Provider.
    pub provider: String,
    /// Probe name.
    pub name: String,
    /// Path the tracer can open (through /proc/PID/root for a process).
    pub binary: PathBuf,
    /// Path as the target process sees it.
    pub display_binary: String,
    /// GNU build-id, hex.
    pub build_id: Option<String>,
    /// Virtual address of the probe (prelink-adjusted).
    pub address: u64,
    /// File offset to attach the uprobe at.
    pub file_offset: u64,
    /// Virtual address of the semaphore, 0 if none.
    pub semaphore: u64,
    /// File offset of the semaphore (the uprobe's `ref_ctr_offset`), 0 if none.
    pub semaphore_offset: u64,
    /// Argument specs as written in the note.
    pub args_spec: String,
    /// Parsed arguments (empty when `unsupported` is set).
    pub args: Vec<UsdtArg>,
    /// Why an argument cannot be read, if one cannot; [`resolve_usdt`]
    /// refuses such probes, [`list_usdt`] lists them with the reason.
    pub unsupported: Option<String>,
}

const NT_STAPSDT: u32 = 3;

/// Reads every SDT note of an ELF file (64-bit, either byte order). Fails on
/// a malformed note rather than skipping it: a probe read wrong would be
/// attached at a wrong address.
pub fn parse_stapsdt_notes(elf_bytes: &[u8]) -> Result<Vec<UsdtNote>, String> {
    let f = ElfFile64::<Endianness>::parse(elf_bytes)
        .map_err(|e| format!("unsupported or corrupt ELF ({e})"))?;
    let endian = f.endian();
    let mut out = Vec::new();
    for (i, sh) in f.elf_section_table().iter().enumerate() {
        if sh.sh_type(endian) != elf::SHT_NOTE {
            continue;
        }
        let name = f
            .elf_section_table()
            .section_name(endian, sh)
            .unwrap_or_default();
        if name != b".note.stapsdt" {
            continue;
        }
        let notes = sh
            .notes(endian, elf_bytes)
            .map_err(|e| format!("section {i}: {e}"))?;
        let Some(mut notes) = notes else { continue };
        loop {
            let note = match notes.next() {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => return Err(format!("corrupt .note.stapsdt: {e}")),
            };
            if note.name() != b"stapsdt" || note.n_type(endian) != NT_STAPSDT {
                continue;
            }
            out.push(parse_desc(note.desc(), f.elf_header().is_little_endian())?);
        }
    }
    Ok(out)
}

fn parse_desc(d: &[u8], le: bool) -> Result<UsdtNote, String> {
    let word = |i: usize| -> Result<u64, String> {
        let b: [u8; 8] = d
            .get(i * 8..i * 8 + 8)
            .and_then(|s| s.try_into().ok())
            .ok_or("truncated stapsdt note")?;
        Ok(if le {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        })
    };
    let (pc, base, semaphore) = (word(0)?, word(1)?, word(2)?);
    let mut strs = d[24..].split(|&b| b == 0);
    let mut next = |what: &str| -> Result<String, String> {
        let s = strs
            .next()
            .ok_or_else(|| format!("stapsdt note without {what}"))?;
        String::from_utf8(s.to_vec()).map_err(|_| format!("stapsdt note with a non-UTF-8 {what}"))
    };
    let provider = next("provider")?;
    let name = next("name")?;
    let args = next("arguments").unwrap_or_default();
    if provider.is_empty() || name.is_empty() {
        return Err("stapsdt note with an empty provider or name".into());
    }
    Ok(UsdtNote {
        provider,
        name,
        pc,
        base,
        semaphore,
        args,
    })
}

/// Byte offset in x86_64 `struct pt_regs` of a register, by any of its
/// names (64-, 32-, 16- and low 8-bit); as libbpf, the value is read from
/// the full register and cut to the argument's size.
/// Offset of the instruction pointer in x86_64 `struct pt_regs`, which
/// [`UsdtLocation::Static`] arguments are read relative to.
pub const PT_REGS_IP: u16 = 128;

fn pt_regs_offset(reg: &str) -> Result<u16, String> {
    const REGS: &[(u16, &[&str])] = &[
        (0, &["r15", "r15d", "r15w", "r15b"]),
        (8, &["r14", "r14d", "r14w", "r14b"]),
        (16, &["r13", "r13d", "r13w", "r13b"]),
        (24, &["r12", "r12d", "r12w", "r12b"]),
        (32, &["rbp", "ebp", "bp", "bpl"]),
        (40, &["rbx", "ebx", "bx", "bl"]),
        (48, &["r11", "r11d", "r11w", "r11b"]),
        (56, &["r10", "r10d", "r10w", "r10b"]),
        (64, &["r9", "r9d", "r9w", "r9b"]),
        (72, &["r8", "r8d", "r8w", "r8b"]),
        (80, &["rax", "eax", "ax", "al"]),
        (88, &["rcx", "ecx", "cx", "cl"]),
        (96, &["rdx", "edx", "dx", "dl"]),
        (104, &["rsi", "esi", "si", "sil"]),
        (112, &["rdi", "edi", "di", "dil"]),
        (128, &["rip", "eip"]),
        (152, &["rsp", "esp", "sp", "spl"]),
    ];
    if let Some((off, _)) = REGS.iter().find(|(_, names)| names.contains(&reg)) {
        return Ok(*off);
    }
    Err(match reg {
        "ah" | "bh" | "ch" | "dh" => format!("high-byte register %{reg} is not supported"),
        _ if reg.starts_with("xmm") || reg.starts_with("ymm") || reg.starts_with("st") => {
            format!("floating-point register %{reg} is not supported (uprobes see general registers only)")
        }
        _ => format!("unknown register %{reg}"),
    })
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => s.parse::<u64>().ok()?,
    };
    let v = v as i64;
    Some(if neg { v.wrapping_neg() } else { v })
}

fn reg_name(s: &str) -> Result<&str, String> {
    s.trim()
        .strip_prefix('%')
        .filter(|r| !r.is_empty())
        .ok_or_else(|| format!("`{s}` is not a register"))
}

/// Parses one x86_64 argument spec (`-4@%edi`, `8@-16(%rbp)`, `4@$5`,
/// `8@(%rax,%rdx,8)`), as libbpf does.
pub fn parse_usdt_arg(spec: &str) -> Result<UsdtArg, String> {
    let (size, loc) = spec
        .split_once('@')
        .ok_or_else(|| format!("`{spec}` has no size (SIZE@LOCATION)"))?;
    let size: i8 = size
        .parse()
        .ok()
        .filter(|s: &i8| matches!(s.unsigned_abs(), 1 | 2 | 4 | 8))
        .ok_or_else(|| format!("`{spec}`: size `{size}` is not 1, 2, 4 or 8 (signed: negative)"))?;
    let location = if let Some(c) = loc.strip_prefix('$') {
        UsdtLocation::Constant(
            parse_int(c).ok_or_else(|| format!("`{spec}`: constant `{c}` is not a number"))?,
        )
    } else if loc.starts_with('%') {
        let name = reg_name(loc)?;
        UsdtLocation::Register {
            offset: pt_regs_offset(name).map_err(|e| format!("`{spec}`: {e}"))?,
            name: name.to_string(),
        }
    } else if let Some((disp, rest)) = loc.split_once('(') {
        let inner = rest
            .strip_suffix(')')
            .ok_or_else(|| format!("`{spec}`: unbalanced parentheses"))?;
        if let Some(location) = static_operand(disp) {
            let base = reg_name(inner).map_err(|e| format!("`{spec}`: {e}"))?;
            if base != "rip" {
                return Err(format!(
                    "`{spec}`: a symbol relative to %{base} (only %rip-relative symbols are supported)"
                ));
            }
            return Ok(UsdtArg { size, location });
        }
        let displacement = if disp.is_empty() {
            0
        } else {
            parse_int(disp)
                .ok_or_else(|| format!("`{spec}`: displacement `{disp}` is not a number"))?
        };
        let parts: Vec<&str> = inner.split(',').collect();
        let err = |e: String| format!("`{spec}`: {e}");
        match parts.as_slice() {
            [base] => {
                let name = reg_name(base).map_err(err)?;
                if name == "rip" || name == "eip" {
                    return Err(format!(
                        "`{spec}`: %rip-relative operands are not supported (the probe's pc is not the next instruction's)"
                    ));
                }
                UsdtLocation::Memory {
                    offset: pt_regs_offset(name).map_err(err)?,
                    name: name.to_string(),
                    displacement,
                }
            }
            [base, index] | [base, index, _] => {
                let scale = match parts.get(2) {
                    None => 1,
                    Some(s) => s
                        .trim()
                        .parse::<u8>()
                        .ok()
                        .filter(|s| matches!(s, 1 | 2 | 4 | 8))
                        .ok_or_else(|| format!("`{spec}`: scale `{s}` is not 1, 2, 4 or 8"))?,
                };
                UsdtLocation::Indexed {
                    base: pt_regs_offset(reg_name(base).map_err(err)?).map_err(err)?,
                    index: pt_regs_offset(reg_name(index).map_err(err)?).map_err(err)?,
                    scale,
                    displacement,
                }
            }
            _ => return Err(format!("`{spec}`: unrecognised memory operand")),
        }
    } else if let Some(location) = static_operand(loc) {
        location
    } else {
        return Err(format!("`{spec}`: unrecognised location `{loc}`"));
    };
    Ok(UsdtArg { size, location })
}

/// `symbol`, `symbol+8` or `symbol-8`, as a [`UsdtLocation::Static`] still to resolve.
fn static_operand(text: &str) -> Option<UsdtLocation> {
    let is_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == '.';
    if !text.starts_with(is_start) {
        return None;
    }
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '@')))
        .unwrap_or(text.len());
    let (symbol, rest) = text.split_at(end);
    let addend = match rest {
        "" => 0,
        _ if rest.starts_with('+') => parse_int(&rest[1..])?,
        _ if rest.starts_with('-') => parse_int(&rest[1..])?.checked_neg()?,
        _ => return None,
    };
    Some(UsdtLocation::Static {
        symbol: symbol.to_string(),
        addend,
        address: 0,
    })
}

/// Gives each symbolic argument its symbol's address (plus `shift`, prelink's move); a
/// symbol the binary does not define makes the probe unreadable.
fn resolve_statics(elf: &ElfInfo, args: &mut [UsdtArg], shift: u64) -> Result<(), String> {
    use object::{Object, ObjectSymbol};
    for (i, a) in args.iter_mut().enumerate() {
        if let UsdtLocation::Static {
            symbol, address, ..
        } = &mut a.location
        {
            let f = elf.object();
            let found = f
                .symbols()
                .chain(f.dynamic_symbols())
                .find(|s| s.is_definition() && s.name() == Ok(symbol.as_str()))
                .map(|s| s.address());
            *address = found.map(|v| v.wrapping_add(shift)).ok_or_else(|| {
                format!(
                    "argument {}: symbol `{symbol}` is not defined in the binary",
                    i + 1
                )
            })?;
        }
    }
    Ok(())
}

/// Every argument of a note; the first unsupported one fails them all.
pub fn parse_usdt_args(args: &str) -> Result<Vec<UsdtArg>, String> {
    args.split_whitespace()
        .enumerate()
        .map(|(i, a)| parse_usdt_arg(a).map_err(|e| format!("argument {}: {e}", i + 1)))
        .collect()
}

/// Address of `.stapsdt.base` in the file as it is now (moved by prelink).
fn stapsdt_base(elf: &ElfInfo) -> Option<u64> {
    let f = elf.object();
    let s = f.section_by_name(".stapsdt.base")?;
    Some(s.address())
}

/// The probes of one binary.
fn probes_of(located: &Located) -> Result<Vec<UsdtProbe>, Error> {
    let elf = ElfInfo::open(&located.open)?;
    let notes = parse_stapsdt_notes(&elf.bytes).map_err(|reason| Error::BadUsdtNotes {
        binary: located.display.clone(),
        reason,
    })?;
    let base_now = stapsdt_base(&elf);
    let mut out = Vec::with_capacity(notes.len());
    for n in notes {
        // Prelink moves the binary but not the notes: `.stapsdt.base` tells by how much.
        let shift = match base_now {
            Some(now) if n.base != 0 => now.wrapping_sub(n.base),
            _ => 0,
        };
        let address = n.pc.wrapping_add(shift);
        let spec = format!("{}:{}", n.provider, n.name);
        let file_offset = elf
            .vaddr_to_offset(address)
            .ok_or_else(|| Error::NotLoadable {
                path: located.open.clone(),
                func: spec.clone(),
                addr: address,
            })?;
        let (semaphore, semaphore_offset) = if n.semaphore == 0 {
            (0, 0)
        } else {
            let s = n.semaphore.wrapping_add(shift);
            let off = elf.vaddr_to_offset(s).ok_or_else(|| Error::BadUsdtNotes {
                binary: located.display.clone(),
                reason: format!("the semaphore of {spec} at {s:#x} is in no file-backed segment"),
            })?;
            (s, off)
        };
        let parsed = parse_usdt_args(&n.args).and_then(|mut a| {
            resolve_statics(&elf, &mut a, shift)?;
            Ok(a)
        });
        let (args, unsupported) = match parsed {
            Ok(a) => (a, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        out.push(UsdtProbe {
            provider: n.provider,
            name: n.name,
            binary: located.open.clone(),
            display_binary: located.display.clone(),
            build_id: elf.build_id.clone(),
            address,
            file_offset,
            semaphore,
            semaphore_offset,
            args_spec: n.args,
            args,
            unsupported,
        });
    }
    Ok(out)
}

fn locate(target: &Target, lib: Option<&str>) -> Result<Located, Error> {
    let scope = Scope::new(target)?;
    match lib {
        None | Some("") => Ok(scope.main.clone()),
        Some(l) => scope.find_lib(l),
    }
}

/// USDT probes matching `provider` and `name` (globs) in the executable of
/// `target`, or in `lib` (a short library name or a path). A probe whose
/// arguments cannot be read is refused with the reason.
pub fn resolve_usdt(
    target: &Target,
    lib: Option<&str>,
    provider: &str,
    name: &str,
) -> Result<Vec<UsdtProbe>, Error> {
    let located = locate(target, lib)?;
    let all = probes_of(&located)?;
    let spec = format!("{provider}:{name}");
    if all.is_empty() {
        return Err(Error::NoUsdtProbes {
            binary: located.display,
        });
    }
    let (pm, nm) = (Matcher::new(provider), Matcher::new(name));
    let hits: Vec<UsdtProbe> = all
        .iter()
        .filter(|p| pm.matches(&p.provider) && nm.matches(&p.name))
        .cloned()
        .collect();
    if hits.is_empty() {
        let names: Vec<String> = all
            .iter()
            .map(|p| format!("{}:{}", p.provider, p.name))
            .collect();
        return Err(Error::NoSuchUsdtProbe {
            suggestions: crate::glob::suggest(&spec, names.iter().map(String::as_str), 5),
            probe: spec,
            binary: located.display,
        });
    }
    if let Some(p) = hits.iter().find(|p| p.unsupported.is_some()) {
        return Err(Error::UnsupportedUsdtArgs {
            probe: format!("{}:{}", p.provider, p.name),
            binary: located.display,
            reason: p.unsupported.clone().unwrap_or_default(),
        });
    }
    Ok(hits)
}

/// Lists USDT probes like `bpftrace -l 'usdt:...'`: `pattern` is `NAME`,
/// `PROVIDER:NAME` or `LIB:PROVIDER:NAME` (globs; default every probe of the
/// executable). Probes with unsupported arguments are listed, with the reason.
pub fn list_usdt(target: &Target, pattern: Option<&str>) -> Result<Vec<UsdtProbe>, Error> {
    let pattern = pattern
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .unwrap_or("*");
    let mut parts = pattern.rsplitn(3, ':');
    let name = parts.next().filter(|s| !s.is_empty()).unwrap_or("*");
    let provider = parts.next().filter(|s| !s.is_empty()).unwrap_or("*");
    let lib = parts.next();
    let located = locate(target, lib)?;
    let (pm, nm) = (Matcher::new(provider), Matcher::new(name));
    let mut out: Vec<UsdtProbe> = probes_of(&located)?
        .into_iter()
        .filter(|p| pm.matches(&p.provider) && nm.matches(&p.name))
        .collect();
    out.sort_by(|a, b| (&a.provider, &a.name, a.address).cmp(&(&b.provider, &b.name, b.address)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(name: &str, offset: u16) -> UsdtLocation {
        UsdtLocation::Register {
            name: name.into(),
            offset,
        }
    }

    #[test]
    fn arg_specs_like_libbpf() {
        let a = |s: &str| parse_usdt_arg(s).unwrap();
        assert_eq!(
            a("-4@%edi"),
            UsdtArg {
                size: -4,
                location: reg("edi", 112)
            }
        );
        assert_eq!(
            a("8@%rax"),
            UsdtArg {
                size: 8,
                location: reg("rax", 80)
            }
        );
        assert_eq!(a("1@%sil").location, reg("sil", 104));
        assert_eq!(a("2@%r11w").location, reg("r11w", 48));
        assert_eq!(
            a("8@-16(%rbp)").location,
            UsdtLocation::Memory {
                name: "rbp".into(),
                offset: 32,
                displacement: -16
            }
        );
        assert_eq!(
            a("-8@8(%rbx)"),
            UsdtArg {
                size: -8,
                location: UsdtLocation::Memory {
                    name: "rbx".into(),
                    offset: 40,
                    displacement: 8
                }
            }
        );
        assert_eq!(
            a("4@(%rsp)").location,
            UsdtLocation::Memory {
                name: "rsp".into(),
                offset: 152,
                displacement: 0
            }
        );
        assert_eq!(a("4@$5").location, UsdtLocation::Constant(5));
        assert_eq!(a("-8@$-1").location, UsdtLocation::Constant(-1));
        assert_eq!(a("8@$0x10").location, UsdtLocation::Constant(16));
        assert_eq!(
            a("-4@-1204(%rbp,%rax,4)").location,
            UsdtLocation::Indexed {
                base: 32,
                index: 80,
                scale: 4,
                displacement: -1204
            }
        );
        assert_eq!(
            a("8@(%rdx,%rcx)").location,
            UsdtLocation::Indexed {
                base: 96,
                index: 88,
                scale: 1,
                displacement: 0
            }
        );
        let stat = |symbol: &str, addend| UsdtLocation::Static {
            symbol: symbol.into(),
            addend,
            address: 0,
        };
        assert_eq!(
            a("-8@global_counter(%rip)").location,
            stat("global_counter", 0)
        );
        assert_eq!(a("4@tbl.1+8(%rip)").location, stat("tbl.1", 8));
        assert_eq!(a("4@_q-0x10(%rip)").location, stat("_q", -16));
        assert_eq!(a("8@counter").location, stat("counter", 0));
    }

    #[test]
    fn unsupported_specs_say_why() {
        let e = |s: &str| parse_usdt_arg(s).unwrap_err();
        assert!(e("%edi").contains("no size"));
        assert!(e("3@%edi").contains("not 1, 2, 4 or 8"));
        assert!(e("1@%ah").contains("high-byte"));
        assert!(e("8@%xmm0").contains("floating-point"));
        assert!(e("8@%foo").contains("unknown register"));
        assert!(e("8@counter(%rbx)").contains("only %rip-relative"));
        assert!(e("8@8(%rip)").contains("rip-relative"));
        assert!(e("4@$x").contains("not a number"));
        assert!(e("8@(%rax,%rbx,3)").contains("scale"));
        assert!(e("8@-8(%rbp").contains("parentheses"));
        let all = parse_usdt_args("8@%rax 1@%ah").unwrap_err();
        assert!(all.starts_with("argument 2: "), "{all}");
        assert!(parse_usdt_args("").unwrap().is_empty());
    }

    #[test]
    fn note_descriptors() {
        let mut d = Vec::new();
        for w in [0x1139u64, 0x2004, 0x4010] {
            d.extend_from_slice(&w.to_le_bytes());
        }
        d.extend_from_slice(b"prov\0name\0-4@%edi 8@%rsi\0");
        let n = parse_desc(&d, true).unwrap();
        assert_eq!((n.pc, n.base, n.semaphore), (0x1139, 0x2004, 0x4010));
        assert_eq!(
            (&*n.provider, &*n.name, &*n.args),
            ("prov", "name", "-4@%edi 8@%rsi")
        );
        // Truncations never panic.
        for len in 0..d.len() {
            let _ = parse_desc(&d[..len], true);
        }
        assert!(parse_desc(&d[..20], true).is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_stapsdt_notes(b"not an elf").is_err());
        assert!(parse_stapsdt_notes(&[]).is_err());
    }
}
