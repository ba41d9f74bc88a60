//! DWARF section bytes for gimli: windows into the mapped file, so indexing a
//! large binary does not copy its debug info into memory; only compressed
//! sections (SHF_COMPRESSED, `.zdebug_*`) are inflated into buffers of their own.

use std::ops::{Deref, Range};
use std::sync::Arc;

use object::{CompressionFormat, Object, ObjectSection};

use crate::elf::{Bytes, ElfInfo};

/// What gimli reads DWARF through.
pub(crate) type R = gimli::EndianReader<gimli::RunTimeEndian, Section>;

/// The bytes of one section. Cloning shares them.
#[derive(Clone)]
pub(crate) enum Section {
    /// A range of the file's read-only mapping, kept alive by the `Arc`
    /// (a debug file found and loaded later must not be unmapped under us).
    Mapped(Arc<Bytes>, Range<usize>),
    /// Decompressed, or absent (empty).
    Owned(Arc<[u8]>),
}

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Section::Mapped(file, range) => &file[range.clone()],
            Section::Owned(buf) => buf,
        }
    }
}

impl std::fmt::Debug for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Section({} bytes)", self.len())
    }
}

// SAFETY: the bytes live in an `Arc`-owned mapping or buffer that is never
// mutated, so the slice stays at the same address however the handle is moved
// or cloned.
unsafe impl gimli::StableDeref for Section {}
unsafe impl gimli::CloneStableDeref for Section {}

/// The most a compressed section expands: zlib's limit (DWARF never comes near it, in
/// zstd either).
const MAX_RATIO: u64 = 1032;

/// Section data as object finds it: mapped when stored plainly, inflated when
/// compressed, empty when absent.
fn section_data(elf: &ElfInfo, name: &str) -> Section {
    let empty = || Section::Owned(Arc::from(&[][..]));
    let f = elf.object();
    let Some(s) = f.section_by_name(name) else {
        return empty();
    };
    if s.kind() == object::SectionKind::UninitializedData {
        // SHT_NOBITS: a stripped file keeps the header, not the data.
        return empty();
    }
    match s.compressed_file_range() {
        Ok(r) if r.format == CompressionFormat::None => {
            let start = r.offset as usize;
            let end = start.saturating_add(r.uncompressed_size as usize);
            if end <= elf.bytes.len() {
                return Section::Mapped(elf.bytes.clone(), start..end);
            }
            empty()
        }
        // The declared size is allocated before inflating: a size no compressor could
        // reach from these bytes is damage, not a section.
        Ok(r) if r.uncompressed_size > r.compressed_size.saturating_mul(MAX_RATIO) => empty(),
        _ => match s.uncompressed_data() {
            Ok(data) => Section::Owned(Arc::from(&*data)),
            Err(_) => empty(),
        },
    }
}

/// The DWARF sections of `elf` (the `.dwo` names for a split-DWARF file).
pub(crate) fn load(elf: &ElfInfo, dwo: bool) -> Result<gimli::Dwarf<R>, gimli::Error> {
    let endian = if elf.object().is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    gimli::Dwarf::load(|id| -> Result<R, gimli::Error> {
        let name = if dwo { id.dwo_name() } else { Some(id.name()) };
        let data = match (id, name) {
            // Variable locations: symbolization never reads them, and in a
            // distribution's debug file they are compressed, so skip inflating them.
            (gimli::SectionId::DebugLoc | gimli::SectionId::DebugLocLists, _) | (_, None) => {
                Section::Owned(Arc::from(&[][..]))
            }
            (_, Some(n)) => section_data(elf, n),
        };
        Ok(R::new(data, endian))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_sections_are_mapped_not_copied() {
        // This test binary carries uncompressed DWARF (debug = 1 in release too).
        let elf = ElfInfo::open(&std::env::current_exe().unwrap()).unwrap();
        assert!(elf.has_dwarf);
        let s = section_data(&elf, ".debug_info");
        let Section::Mapped(_, range) = &s else {
            panic!("copied: {s:?}");
        };
        assert!(!s.is_empty());
        assert_eq!(s.as_ptr(), elf.bytes[range.clone()].as_ptr());
        assert!(section_data(&elf, ".debug_nonexistent").is_empty());
    }
}
