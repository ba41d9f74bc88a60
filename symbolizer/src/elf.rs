//! ELF loading: program headers, build-id, debug links, dependencies and
//! function symbol tables (including separate debug files and MiniDebugInfo).

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;
use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, Object, ObjectSection};

use crate::demangle::{demangle, Names};
use crate::Error;

type Elf64<'a> = ElfFile64<'a, Endianness>;

/// Bytes of an ELF file: mapped for files on disk, owned for decompressed MiniDebugInfo.
pub(crate) enum Bytes {
    Map(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub filesz: u64,
}

/// One parsed ELF file with the metadata we need up front.
pub(crate) struct ElfInfo {
    pub path: PathBuf,
    /// Shared with the DWARF sections read straight from the mapping.
    pub bytes: Arc<Bytes>,
    pub loads: Vec<Segment>,
    pub build_id: Option<String>,
    pub debuglink: Option<String>,
    pub debugaltlink: Option<(String, String)>,
    pub needed: Vec<String>,
    pub runpath: Vec<String>,
    pub has_symtab: bool,
    pub has_dwarf: bool,
    pub has_debugdata: bool,
}

/// DWARF 5's `.debug_sup` (written by `dwz -5`): the supplementary file's name and
/// checksum, which dwz sets to that file's build-id, so it serves as `.gnu_debugaltlink`
/// does. The supplementary file's own section (flag set) names no other file.
fn debug_sup(d: &[u8]) -> Option<(String, String)> {
    // version (u16), is_supplementary (u8), filename (NUL-terminated), checksum (ULEB128
    // length, bytes).
    let (&[_, _, is_sup], rest) = d.split_first_chunk::<3>()?;
    let nul = rest.iter().position(|&b| b == 0)?;
    if is_sup != 0 || nul == 0 {
        return None;
    }
    let name = String::from_utf8_lossy(&rest[..nul]).into_owned();
    let mut r = gimli::EndianSlice::new(&rest[nul + 1..], gimli::LittleEndian);
    let len = usize::try_from(gimli::leb128::read::unsigned(&mut r).ok()?).ok()?;
    Some((name, hex(r.slice().get(..len)?)))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl ElfInfo {
    /// Opens and validates `path` as a 64-bit ELF file.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let md = file.metadata().map_err(|e| Error::io(path, e))?;
        if !md.is_file() {
            return Err(Error::not_elf(path, "not a regular file"));
        }
        let len = md.len();
        if len == 0 {
            return Err(Error::not_elf(path, "empty file"));
        }
        // SAFETY: the mapping is read-only; a binary truncated under us could
        // fault, which is the same trade-off every ELF tool on mmap makes.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        Self::parse(path.to_path_buf(), Bytes::Map(map))
    }

    pub fn parse(path: PathBuf, bytes: Bytes) -> Result<Self, Error> {
        let (loads, build_id, debuglink, debugaltlink, needed, runpath, flags) = {
            let data: &[u8] = &bytes;
            if data.len() < 4 || &data[..4] != b"\x7fELF" {
                return Err(Error::not_elf(&path, "not an ELF file"));
            }
            let f = Elf64::parse(data).map_err(|e| {
                Error::not_elf(
                    &path,
                    &format!("unsupported or corrupt ELF ({e}); only 64-bit ELF is supported"),
                )
            })?;
            let endian = f.endian();
            let loads = f
                .elf_program_headers()
                .iter()
                .filter(|p| p.p_type(endian) == elf::PT_LOAD)
                .map(|p| Segment {
                    vaddr: p.p_vaddr(endian),
                    memsz: p.p_memsz(endian),
                    offset: p.p_offset(endian),
                    filesz: p.p_filesz(endian),
                })
                .collect::<Vec<_>>();
            let build_id = f.build_id().ok().flatten().map(hex);
            let debuglink = f
                .gnu_debuglink()
                .ok()
                .flatten()
                .map(|(name, _crc)| String::from_utf8_lossy(name).into_owned());
            let debugaltlink = f
                .gnu_debugaltlink()
                .ok()
                .flatten()
                .map(|(name, id)| (String::from_utf8_lossy(name).into_owned(), hex(id)))
                .or_else(|| {
                    let sup = f.section_by_name(".debug_sup")?;
                    debug_sup(sup.data().ok()?)
                });
            let mut needed = Vec::new();
            let mut runpath = Vec::new();
            if let Ok(dynamic) = f.elf_dynamic_table() {
                for d in dynamic.iter() {
                    let Ok(s) = dynamic.string(d) else { continue };
                    let s = String::from_utf8_lossy(s).into_owned();
                    match d.tag {
                        elf::DT_NEEDED => needed.push(s),
                        elf::DT_RUNPATH | elf::DT_RPATH => {
                            runpath.extend(s.split(':').filter(|x| !x.is_empty()).map(String::from))
                        }
                        _ => {}
                    }
                }
            }
            let sections = f.elf_section_table();
            let has_symtab = sections
                .iter()
                .any(|s| s.sh_type(endian) == elf::SHT_SYMTAB && s.sh_size(endian) > 0);
            let has_dwarf = f.section_by_name(".debug_info").is_some_and(|s| {
                s.size() > 0 && s.kind() != object::SectionKind::UninitializedData
            });
            let has_debugdata = f.section_by_name(".gnu_debugdata").is_some();
            (
                loads,
                build_id,
                debuglink,
                debugaltlink,
                needed,
                runpath,
                (has_symtab, has_dwarf, has_debugdata),
            )
        };
        Ok(ElfInfo {
            path,
            bytes: Arc::new(bytes),
            loads,
            build_id,
            debuglink,
            debugaltlink,
            needed,
            runpath,
            has_symtab: flags.0,
            has_dwarf: flags.1,
            has_debugdata: flags.2,
        })
    }

    pub fn object(&self) -> Elf64<'_> {
        // Validated in `parse`.
        Elf64::parse(&*self.bytes).expect("validated ELF")
    }

    /// File offset for a virtual address, from the PT_LOAD that contains it.
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        // Segments come from the file: no sum of theirs may overflow.
        self.loads.iter().find_map(|s| {
            let into = vaddr.checked_sub(s.vaddr)?;
            (into < s.filesz.min(s.memsz)).then(|| into.checked_add(s.offset))?
        })
    }

    /// Virtual address for a file offset (the inverse mapping used for /proc/PID/maps).
    pub fn offset_to_vaddr(&self, off: u64) -> Option<u64> {
        self.loads.iter().find_map(|s| {
            let into = off.checked_sub(s.offset)?;
            (into < s.filesz).then(|| into.checked_add(s.vaddr))?
        })
    }

    pub fn bytes_at_offset(&self, off: u64, n: usize) -> &[u8] {
        let data: &[u8] = &self.bytes;
        let start = (off as usize).min(data.len());
        let end = start.saturating_add(n).min(data.len());
        &data[start..end]
    }
}

/// A function symbol as read from some table.
#[derive(Clone, Debug)]
pub(crate) struct RawSym {
    pub addr: u64,
    pub size: u64,
    pub raw: String,
    /// Lower is better when several names share an address.
    pub rank: u8,
}

/// Sorted function symbols of one binary (all tables merged).
pub(crate) struct SymbolIndex {
    /// Sorted by (addr, rank), ties in symbol-table order.
    pub syms: Vec<RawSym>,
    names: OnceLock<Vec<Names>>,
    /// True if we had a full symbol table (.symtab, debug file or MiniDebugInfo),
    /// false if only .dynsym was available.
    pub complete: bool,
}

fn bind_rank(bind: u8, from_dynsym: bool, name: &str) -> u8 {
    let b = match bind {
        elf::STB_GLOBAL => 0,
        elf::STB_WEAK => 1,
        _ => 2,
    };
    // Prefer public spellings (`malloc` over `__libc_malloc`).
    let underscores = name.bytes().take_while(|&c| c == b'_').count().min(3) as u8;
    let mut r = b * 16 + underscores;
    if from_dynsym {
        r += 1;
    }
    if name.contains('@') {
        r += 4;
    }
    r
}

fn collect_syms(f: &Elf64<'_>, dynamic: bool, out: &mut Vec<RawSym>) {
    let endian = f.endian();
    let table = if dynamic {
        f.elf_dynamic_symbol_table()
    } else {
        f.elf_symbol_table()
    };
    for sym in table.symbols() {
        let ty = sym.st_type();
        if ty != elf::STT_FUNC && ty != elf::STT_GNU_IFUNC {
            continue;
        }
        if sym.st_shndx(endian) == elf::SHN_UNDEF {
            continue;
        }
        let addr = sym.st_value(endian);
        if addr == 0 {
            continue;
        }
        let Ok(name) = table.symbol_name(endian, sym) else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        let raw = String::from_utf8_lossy(name).into_owned();
        out.push(RawSym {
            addr,
            size: sym.st_size(endian),
            rank: bind_rank(sym.st_bind(), dynamic, &raw),
            raw,
        });
    }
}

/// Decompresses the xz MiniDebugInfo payload of `.gnu_debugdata`.
fn minidebuginfo(f: &Elf64<'_>) -> Option<Vec<u8>> {
    let sec = f.section_by_name(".gnu_debugdata")?;
    let data = sec.data().ok()?;
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut std::io::Cursor::new(data), &mut out).ok()?;
    Some(out)
}

/// The ELF file inside `.gnu_debugdata`, if `bin` has a readable one.
pub(crate) fn minidebuginfo_elf(bin: &ElfInfo) -> Option<ElfInfo> {
    if !bin.has_debugdata {
        return None;
    }
    let bytes = minidebuginfo(&bin.object())?;
    ElfInfo::parse(bin.path.clone(), Bytes::Owned(bytes)).ok()
}

impl SymbolIndex {
    /// Builds the index from the binary, its debug file and MiniDebugInfo;
    /// `go` holds a Go binary's functions from its pclntab, which come first
    /// so that their names win over `.symtab`'s spellings of the same
    /// functions (`.abi0` suffixes) and stay when the binary is stripped.
    pub fn build(bin: &ElfInfo, debug: Option<&ElfInfo>, go: Vec<RawSym>) -> SymbolIndex {
        let mut complete = bin.has_symtab || !go.is_empty();
        let mut syms = go;
        let f = bin.object();
        collect_syms(&f, false, &mut syms);
        collect_syms(&f, true, &mut syms);
        if let Some(d) = debug {
            if d.has_symtab {
                collect_syms(&d.object(), false, &mut syms);
                complete = true;
            }
        }
        if let Some(mini) = minidebuginfo_elf(bin) {
            collect_syms(&mini.object(), false, &mut syms);
            complete = true;
        }
        // Stable: equal-rank aliases stay in symbol-table order, so a spec
        // resolves the same way every time (folded identical functions share
        // an address). Addresses are named by `nearest`, by binutils' rule.
        syms.sort_by_key(|s| (s.addr, s.rank));
        // Same name at the same address comes from several tables; keep one.
        let keep: Vec<bool> = {
            let mut seen = rustc_hash::FxHashSet::default();
            seen.reserve(syms.len());
            syms.iter()
                .map(|s| seen.insert((s.addr, &*s.raw)))
                .collect()
        };
        let mut keep = keep.into_iter();
        syms.retain(|_| keep.next().unwrap_or(true));
        // Sizes may be missing (0) in one table and present in another.
        let mut i = 0;
        while i < syms.len() {
            let mut j = i;
            let mut size = 0;
            while j < syms.len() && syms[j].addr == syms[i].addr {
                size = size.max(syms[j].size);
                j += 1;
            }
            for s in &mut syms[i..j] {
                s.size = size;
            }
            i = j;
        }
        SymbolIndex {
            syms,
            names: OnceLock::new(),
            complete,
        }
    }

    /// Demangled names, parallel to `syms`; computed on first use because
    /// address-only lookups never need most of them.
    pub fn names(&self) -> &[Names] {
        self.names
            .get_or_init(|| self.syms.iter().map(|s| demangle(&s.raw)).collect())
    }
}

/// Candidate directories where a separate debug file may live.
pub(crate) fn find_debug_file(bin: &ElfInfo, display: &Path, root: &Path) -> Option<ElfInfo> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    let roots: Vec<PathBuf> = if root == Path::new("/") {
        vec![PathBuf::from("/")]
    } else {
        vec![root.to_path_buf(), PathBuf::from("/")]
    };
    if let Some(id) = &bin.build_id {
        if id.len() > 2 {
            for r in &roots {
                candidates.push(r.join(format!(
                    "usr/lib/debug/.build-id/{}/{}.debug",
                    &id[..2],
                    &id[2..]
                )));
            }
        }
    }
    if let Some(link) = &bin.debuglink {
        let real_dir = bin.path.parent().map(Path::to_path_buf).unwrap_or_default();
        candidates.push(real_dir.join(link));
        candidates.push(real_dir.join(".debug").join(link));
        if let Some(ddir) = display.parent() {
            let rel = ddir.strip_prefix("/").unwrap_or(ddir);
            for r in &roots {
                candidates.push(r.join("usr/lib/debug").join(rel).join(link));
            }
        }
    }
    for c in candidates {
        if c == bin.path || !c.is_file() {
            continue;
        }
        let Ok(d) = ElfInfo::open(&c) else { continue };
        // A debug file for another build would give wrong answers silently.
        if let (Some(a), Some(b)) = (&bin.build_id, &d.build_id) {
            if a != b {
                continue;
            }
        }
        if d.has_symtab || d.has_dwarf {
            return Some(d);
        }
    }
    None
}

/// Where the dwz supplementary file named by `.gnu_debugaltlink` of `debug`
/// may be, in order. The link is absolute (Debian:
/// `/usr/lib/debug/.dwz/<triplet>/<package>.debug`) or relative to the debug
/// file's real location (Fedora: `../../.dwz/<package>` from a debug file that
/// a `.build-id` symlink points at); a file seen in a container's root or moved
/// elsewhere may still be found by its build-id or under `.dwz`.
pub(crate) fn sup_file_candidates(
    debug_path: &Path,
    alt: &str,
    build_id: &str,
    root: &Path,
) -> Vec<PathBuf> {
    let roots: Vec<&Path> = if root == Path::new("/") {
        vec![root]
    } else {
        vec![root, Path::new("/")]
    };
    let alt_p = Path::new(alt);
    let mut out = Vec::new();
    if let Ok(rel) = alt_p.strip_prefix("/") {
        out.extend(roots.iter().map(|r| r.join(rel)));
    } else {
        let dirs = [
            debug_path.parent().map(Path::to_path_buf),
            std::fs::canonicalize(debug_path)
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf)),
        ];
        out.extend(dirs.into_iter().flatten().map(|d| d.join(alt_p)));
    }
    if build_id.len() > 2 {
        for r in &roots {
            out.push(r.join(format!(
                "usr/lib/debug/.build-id/{}/{}.debug",
                &build_id[..2],
                &build_id[2..]
            )));
        }
    }
    // The part after `.dwz/` keeps Debian's per-triplet directory.
    let under_dwz = alt
        .rsplit_once("/.dwz/")
        .map(|(_, tail)| tail)
        .or_else(|| alt_p.file_name().and_then(|n| n.to_str()));
    if let Some(tail) = under_dwz {
        out.extend(
            roots
                .iter()
                .map(|r| r.join("usr/lib/debug/.dwz").join(tail)),
        );
    }
    let mut seen = HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// The dwz supplementary file of `debug`, if it links one and it is found with
/// the build-id the link expects (another file would give wrong names silently).
pub(crate) fn find_sup_file(debug: &ElfInfo, root: &Path) -> Option<ElfInfo> {
    let (alt, id) = debug.debugaltlink.as_ref()?;
    sup_file_candidates(&debug.path, alt, id, root)
        .into_iter()
        .filter(|c| c.is_file())
        .filter_map(|c| ElfInfo::open(&c).ok())
        .find(|sup| sup.build_id.is_none() || sup.build_id.as_deref() == Some(id.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_sup_section() {
        let mut d = vec![5, 0, 0];
        d.extend_from_slice(b"common.debug\0");
        d.extend_from_slice(&[3, 0xab, 0xcd, 0xef]);
        assert_eq!(
            debug_sup(&d),
            Some(("common.debug".into(), "abcdef".into()))
        );
        // The supplementary file's own section, truncated input, a short checksum.
        let mut own = d.clone();
        own[2] = 1;
        assert_eq!(debug_sup(&own), None);
        assert_eq!(debug_sup(&d[..8]), None);
        assert_eq!(debug_sup(&d[..d.len() - 1]), None);
    }

    #[test]
    fn sup_file_places() {
        let c = |debug: &str, alt: &str, root: &str| {
            sup_file_candidates(Path::new(debug), alt, "abcdef", Path::new(root))
        };
        // Debian: absolute, under the target's root first.
        assert_eq!(
            c(
                "/usr/lib/debug/.build-id/12/34.debug",
                "/usr/lib/debug/.dwz/x86_64-linux-gnu/libc6.debug",
                "/proc/7/root"
            ),
            [
                "/proc/7/root/usr/lib/debug/.dwz/x86_64-linux-gnu/libc6.debug",
                "/usr/lib/debug/.dwz/x86_64-linux-gnu/libc6.debug",
                "/proc/7/root/usr/lib/debug/.build-id/ab/cdef.debug",
                "/usr/lib/debug/.build-id/ab/cdef.debug",
            ]
            .map(PathBuf::from)
        );
        // Fedora: relative to the debug file; then by build-id, then under .dwz.
        assert_eq!(
            c(
                "/nonexistent/usr/bin/x.debug",
                "../../.dwz/x-1.0.x86_64",
                "/"
            ),
            [
                "/nonexistent/usr/bin/../../.dwz/x-1.0.x86_64",
                "/usr/lib/debug/.build-id/ab/cdef.debug",
                "/usr/lib/debug/.dwz/x-1.0.x86_64",
            ]
            .map(PathBuf::from)
        );
    }
}
