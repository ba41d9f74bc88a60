//! A Go binary as found in an ELF file: its toolchain version
//! (`.go.buildinfo`), its function table and where its inline trees are;
//! the functions it names for the symbol index and the frames at an address.

use std::sync::Arc;

use super::inline::{find_gofunc, InlineBase, Memory};
use super::pclntab::GoTable;
use super::read::{rd_word, uvarint};
use super::Reason;
use crate::elf::{ElfInfo, RawSym};
use crate::Frame;

/// What a Go binary tells about itself.
pub(crate) struct GoBinary {
    /// `go1.19.8`, when `.go.buildinfo` is readable.
    pub version: Option<String>,
    /// The function table, or why it cannot be used.
    pub table: Result<GoTable, Reason>,
    /// File range of the pclntab.
    range: std::ops::Range<usize>,
    inline: InlineBase,
}

impl Memory for ElfInfo {
    fn read(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
        let seg = self
            .loads
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr < s.vaddr.saturating_add(s.filesz.min(s.memsz)))?;
        let end = vaddr.checked_add(len as u64)?;
        if end > seg.vaddr + seg.filesz.min(seg.memsz) {
            return None;
        }
        let off = usize::try_from(vaddr - seg.vaddr + seg.offset).ok()?;
        self.bytes.get(off..off.checked_add(len)?)
    }
}

/// Where the pclntab is: PIE and external-linking layouts put it in relro.
pub(super) const PCLNTAB_SECTIONS: [&str; 2] = [".gopclntab", ".data.rel.ro.gopclntab"];

/// Section bytes and address, if the section is stored in the file.
pub(super) fn section<'a>(
    f: &object::read::elf::ElfFile64<'a, object::Endianness>,
    name: &str,
) -> Option<(&'a [u8], u64)> {
    use object::{Object, ObjectSection};
    let s = f.section_by_name(name)?;
    if s.kind() == object::SectionKind::UninitializedData {
        return None;
    }
    Some((s.data().ok()?, s.address()))
}

impl GoBinary {
    /// `None` for a binary that is not Go (neither buildinfo nor pclntab).
    pub fn load(elf: &ElfInfo) -> Option<GoBinary> {
        use object::{Object, ObjectSection};
        let f = elf.object();
        let bi = section(&f, ".go.buildinfo");
        let pcln = PCLNTAB_SECTIONS.iter().find_map(|name| section(&f, name));
        if bi.is_none() && pcln.is_none() {
            return None;
        }
        let version = bi.and_then(|(d, _)| buildinfo_version(d, Some(elf)));
        let base = elf.bytes.as_ptr() as usize;
        let Some((d, vaddr)) = pcln else {
            return Some(GoBinary {
                version,
                table: Err("no .gopclntab section".into()),
                range: 0..0,
                inline: InlineBase::default(),
            });
        };
        // Where the table is in the file; an empty section's data is not in it.
        let range = (d.as_ptr() as usize)
            .checked_sub(base)
            .filter(|s| s + d.len() <= elf.bytes.len())
            .map_or(0..0, |s| s..s + d.len());
        let text = f.section_by_name(".text").map_or(0, |s| s.address());
        let table = GoTable::parse(d, text);
        let mut inline = InlineBase::default();
        if let Ok(t) = &table {
            inline.gofunc = [".noptrdata", ".data"]
                .into_iter()
                .filter_map(|name| section(&f, name))
                .find_map(|(data, _)| find_gofunc(t, vaddr, data));
        }
        Some(GoBinary {
            version,
            table,
            range,
            inline,
        })
    }

    /// The pclntab's bytes in `elf` (the file this was loaded from).
    pub fn data<'a>(&self, elf: &'a ElfInfo) -> &'a [u8] {
        elf.bytes.get(self.range.clone()).unwrap_or_default()
    }

    /// The table's functions for the symbol index, under Go's names; a cgo
    /// binary's C functions only when `with_foreign` (without `.symtab`,
    /// which has their exact sizes).
    pub fn symbols(&self, elf: &ElfInfo, with_foreign: bool) -> Vec<RawSym> {
        let Ok(t) = &self.table else {
            return Vec::new();
        };
        let d = self.data(elf);
        t.funcs
            .iter()
            .filter(|f| with_foreign || !f.foreign)
            .filter_map(|f| {
                let name = t.name(d, f).filter(|n| !n.is_empty())?;
                Some(RawSym {
                    addr: f.entry,
                    size: f.end - f.entry,
                    raw: String::from_utf8_lossy(name).into_owned(),
                    rank: 0,
                })
            })
            .collect()
    }

    /// Frames for `pc`, if a Go function holds it.
    pub fn frames(
        &self,
        elf: &ElfInfo,
        pc: u64,
        names: &mut dyn FnMut(&[u8]) -> Arc<str>,
    ) -> Option<Vec<Frame>> {
        let t = self.table.as_ref().ok()?;
        let i = t.find(pc)?;
        Some(t.frames(self.data(elf), i, pc, Some((elf, self.inline)), names))
    }

    /// "file:line" of the Go function holding `addr`, at `addr`.
    pub fn source(&self, elf: &ElfInfo, addr: u64) -> Option<String> {
        let t = self.table.as_ref().ok()?;
        let f = t.funcs[t.find(addr)?];
        let (file, line) = t.file_line(self.data(elf), &f, addr);
        Some(format!("{}:{line}", String::from_utf8_lossy(file?)))
    }

    /// (major, minor) of the toolchain, from buildinfo.
    pub fn version_number(&self) -> Option<(u32, u32)> {
        self.version.as_deref().and_then(parse_version)
    }
}

/// The Go version in `.go.buildinfo` (`go1.19.8`), given the section's bytes
/// and a reader for the pointers older toolchains (before 1.18) store there.
fn buildinfo_version(sec: &[u8], mem: Option<&dyn Memory>) -> Option<String> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if sec.len() < 32 || &sec[..14] != MAGIC {
        return None;
    }
    let ptr = usize::from(sec[14]);
    let flags = sec[15];
    let s = if flags & 2 != 0 {
        // Inline: a varint length, then the bytes.
        let mut pos = 32;
        let n = uvarint(sec, &mut pos, 64)?;
        sec.get(pos..pos.checked_add(usize::try_from(n).ok()?)?)?
            .to_vec()
    } else {
        if flags & 1 != 0 || !matches!(ptr, 4 | 8) {
            return None;
        }
        // A pointer to a Go string header (data pointer, length).
        let mem = mem?;
        let hdr_addr = rd_word(sec, 16, ptr)?;
        let hdr = mem.read(hdr_addr, 2 * ptr)?;
        let (data, len) = (rd_word(hdr, 0, ptr)?, rd_word(hdr, ptr, ptr)?);
        if len > 256 {
            return None;
        }
        mem.read(data, len as usize)?.to_vec()
    };
    let s = String::from_utf8(s).ok()?;
    s.starts_with("go").then_some(s)
}

/// (major, minor) of a version string such as `go1.19.8` or `go1.21rc2`.
fn parse_version(v: &str) -> Option<(u32, u32)> {
    let rest = v.strip_prefix("go")?;
    let mut it = rest.split('.');
    let major = it.next()?.parse().ok()?;
    let minor: String = it
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("go1.19.8"), Some((1, 19)));
        assert_eq!(parse_version("go1.21rc2"), Some((1, 21)));
        assert_eq!(parse_version("go1.16"), Some((1, 16)));
        assert_eq!(parse_version("devel"), None);
    }

    #[test]
    fn inline_buildinfo() {
        let mut sec = b"\xff Go buildinf:\x08\x02".to_vec();
        sec.resize(32, 0);
        sec.push(8);
        sec.extend_from_slice(b"go1.21.3");
        assert_eq!(buildinfo_version(&sec, None).as_deref(), Some("go1.21.3"));
        sec[32] = 9;
        assert_eq!(buildinfo_version(&sec, None), None);
    }
}
