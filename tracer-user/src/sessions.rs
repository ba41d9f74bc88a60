//! Uprobe sessions (one program for a call's entry and its return, the return probed only
//! when the entry asks) and machine-wide uprobe_multi links: what aya 0.14 cannot do yet,
//! done here. The session program calls two kernel functions (kfuncs), which aya would take
//! for calls of the object's own functions; programs for uprobe_multi links must be loaded
//! with their attach type, which aya does not pass; and aya does not create those links.

use std::{
    collections::HashSet,
    ffi::CString,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd},
    path::Path,
};

use anyhow::{anyhow, bail, Context, Result};
use aya::{maps::Map, Btf, Ebpf};
use aya_obj::{
    btf::BtfKind,
    generated::{bpf_attr, bpf_cmd, bpf_insn},
};
use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget};

/// The session program's kfuncs.
const KFUNCS: [&str; 2] = ["bpf_session_is_return", "bpf_session_cookie"];
/// `BPF_PROG_TYPE_KPROBE`: uprobes are kprobe programs.
const PROG_TYPE_KPROBE: u32 = 2;
/// How a program is attached: `BPF_TRACE_UPROBE_MULTI` or `BPF_TRACE_UPROBE_SESSION` (the
/// kernel's enum values; the latter is not in aya-obj 0.3's bindings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// Entries, or with `RETURN`, returns (uretprobes) of many offsets.
    Multi = 48,
    /// A session: entry and, when the entry asks, the return.
    Session = 57,
}
/// `BPF_F_UPROBE_MULTI_RETURN`: a multi link on the returns.
pub const RETURN: u32 = 1;
/// A call instruction's `src_reg` for a kernel function called by its BTF id.
const PSEUDO_KFUNC_CALL: u8 = 2;
/// The call opcode (`BPF_JMP | BPF_CALL`).
const CALL: u8 = 0x85;
/// `BPF_ALU64 | BPF_MOV | BPF_K` into r0.
const MOV_R0_IMM: u8 = 0xb7;

/// The object with every call of a kfunc rewritten as a kfunc call (by the function's id in
/// the kernel's BTF), so that aya leaves those calls alone and the kernel accepts them.
pub fn patch_kfunc_calls(elf: &[u8], btf: &Btf) -> Result<Vec<u8>> {
    let file = object::File::parse(elf).context("parsing the eBPF object")?;
    let mut out = elf.to_vec();
    for section in file.sections() {
        let Some((base, _)) = section.file_range() else {
            continue;
        };
        for (offset, reloc) in section.relocations() {
            let RelocationTarget::Symbol(index) = reloc.target() else {
                continue;
            };
            let sym = file.symbol_by_index(index)?;
            let name = sym.name()?;
            if !sym.is_undefined() || !KFUNCS.contains(&name) {
                continue;
            }
            let at = (base + offset) as usize;
            let insn = out
                .get_mut(at..at + 8)
                .filter(|i| i[0] == CALL)
                .ok_or_else(|| anyhow!("the eBPF object's call of {name} is not a call"))?;
            match btf.id_by_type_name_kind(name, BtfKind::Func) {
                Ok(id) => {
                    insn[1] = (insn[1] & 0x0f) | (PSEUDO_KFUNC_CALL << 4);
                    insn[2..4].copy_from_slice(&0i16.to_le_bytes());
                    insn[4..8].copy_from_slice(&(id as i32).to_le_bytes());
                }
                // A kernel without sessions (before 6.10): `r0 = 0` instead, so the rest
                // loads; the session program is then refused and not used.
                Err(_) => insn.copy_from_slice(&[MOV_R0_IMM, 0, 0, 0, 0, 0, 0, 0]),
            }
        }
    }
    Ok(out)
}

/// Loads program `name` of `elf` (loaded by aya as `ebpf`, whose maps it shares: call it
/// before any map is taken out of `ebpf`) for links of kind `attach`.
pub fn load(elf: &[u8], ebpf: &Ebpf, name: &str, attach: Attach) -> Result<OwnedFd> {
    let mut obj = aya_obj::Object::parse(elf).context("parsing the eBPF object")?;
    let text: HashSet<usize> = obj.functions.keys().map(|(section, _)| *section).collect();
    let maps = obj.maps.clone();
    let mut fds = Vec::with_capacity(maps.len());
    for (map, def) in &maps {
        let fd = ebpf
            .map(map)
            .and_then(map_fd)
            .ok_or_else(|| anyhow!("map {map} is not loaded"))?;
        fds.push((map.as_str(), fd, def));
    }
    obj.relocate_maps(fds.into_iter(), &text)?;
    obj.relocate_calls(&text)?;
    let prog = (obj.programs.get(name)).ok_or_else(|| anyhow!("program {name} missing"))?;
    let insns: &[bpf_insn] = &obj.functions[&prog.function_key()].instructions;
    let license = obj.license.clone();
    let prog_name = CString::new(&name[..name.len().min(15)])?;
    let mut log = vec![0u8; 256 << 10];
    // SAFETY: a zeroed bpf_attr is its valid empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: plain fields of the union's program-load member.
    unsafe {
        let p = &mut attr.__bindgen_anon_3;
        p.prog_type = PROG_TYPE_KPROBE;
        p.expected_attach_type = attach as u32;
        p.insns = insns.as_ptr() as u64;
        p.insn_cnt = insns.len() as u32;
        p.license = license.as_ptr() as u64;
        for (d, s) in p.prog_name.iter_mut().zip(prog_name.as_bytes()) {
            *d = *s as _;
        }
        p.log_level = 1;
        p.log_buf = log.as_mut_ptr() as u64;
        p.log_size = log.len() as u32;
    }
    match sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) {
        // SAFETY: the syscall returned a new file descriptor, now ours.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let text = String::from_utf8_lossy(&log[..end]);
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            bail!("the kernel refused program {name} ({attach:?} links): {e}; {last}")
        }
    }
}

/// A link of kind `attach` (with `flags`: `RETURN`) of `prog` on `offsets` of `binary`,
/// tagging each with its cookie; `pid` 0 for every process that runs the file.
pub fn link(
    prog: &OwnedFd,
    (attach, flags): (Attach, u32),
    binary: &Path,
    offsets: &[u64],
    cookies: &[u64],
    pid: u32,
) -> Result<OwnedFd> {
    let path = CString::new(binary.as_os_str().as_encoded_bytes())?;
    // SAFETY: a zeroed bpf_attr is its valid empty value.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: plain fields of the union's link-create member.
    unsafe {
        let l = &mut attr.link_create;
        l.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
        l.attach_type = attach as u32;
        let u = &mut l.__bindgen_anon_3.uprobe_multi;
        u.flags = flags;
        u.path = path.as_ptr() as u64;
        u.offsets = offsets.as_ptr() as u64;
        u.cookies = cookies.as_ptr() as u64;
        u.cnt = offsets.len() as u32;
        u.pid = pid;
    }
    let fd = sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)
        .with_context(|| format!("attaching uprobes ({attach:?}) in {}", binary.display()))?;
    // SAFETY: the syscall returned a new file descriptor, now ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The `bpf` system call, its error as `errno` says.
pub(crate) fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> std::io::Result<i64> {
    // SAFETY: `attr` is a valid bpf_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    match rc {
        rc if rc < 0 => Err(std::io::Error::last_os_error()),
        rc => Ok(rc),
    }
}

/// The file descriptor of a map aya created.
fn map_fd(map: &Map) -> Option<RawFd> {
    let data = match map {
        Map::Array(m)
        | Map::ArrayOfMaps(m)
        | Map::CgroupArray(m)
        | Map::HashMap(m)
        | Map::LruHashMap(m)
        | Map::PerCpuArray(m)
        | Map::PerCpuHashMap(m)
        | Map::RingBuf(m)
        | Map::StackTraceMap(m)
        | Map::Unsupported(m) => m,
        _ => return None,
    };
    Some(data.fd().as_fd().as_raw_fd())
}
