//! A process's executable mappings, from /proc/PID/maps, and the unwind tables of what
//! they map.

use std::{ops::Range, sync::Arc};

use framehop::{ExplicitModuleSectionInfo, Module};
use object::{elf::PF_X, Object, ObjectSection, ObjectSegment, SegmentFlags};
use rustc_hash::FxHashMap;
use trace_file::Mapping;

/// The executable mappings of `pid` (files and the vDSO); empty when the process is gone.
pub fn read(pid: u32) -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    text.lines().filter_map(parse_line).collect()
}

/// One line of /proc/PID/maps, if it maps code: `start-end perms offset dev inode path`.
fn parse_line(line: &str) -> Option<Mapping> {
    let mut f = line.splitn(6, ' ');
    let range = f.next()?;
    let perms = f.next()?;
    let offset = f.next()?;
    let _dev = f.next()?;
    let inode = f.next()?;
    let path = f.next().unwrap_or("").trim_start();
    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let file = path.starts_with('/') && inode != "0";
    if !file && path != "[vdso]" {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: path.to_string(),
        build_id: None,
    })
}

/// Which file a mapping maps, to parse each once however many processes map it: its
/// device, inode, size and modification time, or the vDSO (the kernel's, the same in every
/// process).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ImageKey {
    /// A file.
    File(u64, u64, u64, i64),
    /// The vDSO.
    Vdso,
}

/// The key of what `m` maps in process `pid`; `None` when it cannot be found.
pub fn key(pid: u32, m: &Mapping) -> Option<ImageKey> {
    use std::os::unix::fs::MetadataExt;
    if m.path == "[vdso]" {
        return Some(ImageKey::Vdso);
    }
    let md = std::fs::metadata(path_of(pid, m))
        .or_else(|_| std::fs::metadata(by_map(pid, m)))
        .ok()?;
    Some(ImageKey::File(md.dev(), md.ino(), md.size(), md.mtime()))
}

fn path_of(pid: u32, m: &Mapping) -> String {
    match m.path.strip_suffix(" (deleted)") {
        Some(_) => by_map(pid, m),
        None => format!("/proc/{pid}/root{}", m.path),
    }
}

fn by_map(pid: u32, m: &Mapping) -> String {
    format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)
}

/// The bytes of what `m` maps in process `pid`: the file as the process sees it (through
/// its root, or the mapping itself for a file since deleted), or the vDSO's memory.
fn bytes(pid: u32, m: &Mapping) -> Option<Vec<u8>> {
    if m.path == "[vdso]" {
        use std::os::unix::fs::FileExt;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
        let mut buf = vec![0; usize::try_from(m.end - m.start).ok()?.min(1 << 20)];
        mem.read_exact_at(&mut buf, m.start).ok()?;
        return Some(buf);
    }
    std::fs::read(path_of(pid, m))
        .or_else(|_| std::fs::read(by_map(pid, m)))
        .ok()
}

/// Section bytes shared by every process that maps the same file.
#[derive(Clone)]
pub struct Bytes(Arc<[u8]>);

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// What unwinding needs of one ELF image, read once.
pub struct Image {
    /// Its GNU build-id, hex.
    pub build_id: Option<String>,
    /// Go's unwind table, for a Go binary.
    pub go: Option<Arc<symbolizer::GoUnwindTable>>,
    /// (address, file offset, file size, executable) of each loaded segment.
    segments: Vec<(u64, u64, u64, bool)>,
    sections: FxHashMap<&'static str, (Range<u64>, Option<Bytes>)>,
}

/// The sections framehop reads, and whether it needs their bytes.
const SECTIONS: [(&str, bool); 5] = [
    (".text", true),
    (".got", false),
    (".eh_frame", true),
    (".eh_frame_hdr", true),
    (".debug_frame", true),
];

impl Image {
    /// Reads and parses what `m` maps in process `pid`.
    pub fn load(pid: u32, m: &Mapping) -> Option<Image> {
        let bytes = bytes(pid, m)?;
        let file = object::File::parse(&*bytes).ok()?;
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                let exec =
                    matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & PF_X != 0);
                (s.address(), off, size, exec)
            })
            .collect();
        let mut sections = FxHashMap::default();
        for (name, with_data) in SECTIONS {
            let Some(s) = file.section_by_name(name) else {
                continue;
            };
            let data = with_data
                .then(|| s.uncompressed_data().ok())
                .flatten()
                .map(|d| Bytes(Arc::from(&*d)));
            sections.insert(name, (s.address()..s.address() + s.size(), data));
        }
        let build_id = file.build_id().ok().flatten().map(|id| {
            id.iter().fold(String::new(), |mut s, b| {
                s.push_str(&format!("{b:02x}"));
                s
            })
        });
        let go = symbolizer::GoUnwindTable::from_elf(&bytes).map(Arc::new);
        Some(Image {
            build_id,
            go,
            segments,
            sections,
        })
    }

    /// The image as mapped by `m` in a process; `None` when no segment holds the
    /// mapping's file offset.
    pub fn module(&self, m: &Mapping) -> Option<Module<Bytes>> {
        let bias = self.bias(m)?;
        let range = |name: &str| self.sections.get(name).map(|s| s.0.clone());
        let data = |name: &str| self.sections.get(name).and_then(|s| s.1.clone());
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: range(".text"),
            text: data(".text"),
            got_svma: range(".got"),
            eh_frame_svma: range(".eh_frame"),
            eh_frame: data(".eh_frame"),
            eh_frame_hdr_svma: range(".eh_frame_hdr"),
            eh_frame_hdr: data(".eh_frame_hdr"),
            debug_frame: data(".debug_frame"),
            stubs_svma: None,
            stub_helper_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Some(Module::new(m.path.clone(), m.start..m.end, bias, info))
    }

    /// What to subtract from an address in mapping `m` to get the file's address (its
    /// symbols' and tables'); `None` when no segment holds the mapping's file offset.
    pub fn bias(&self, m: &Mapping) -> Option<u64> {
        // The load bias, from the segment the mapping maps: the executable one whose file
        // range it holds (the kernel maps from the page its offset is in, so a segment that
        // does not start on a page shares that page with the one before: lld lays files
        // out so).
        Some(if m.path == "[vdso]" {
            let &(addr, _, _, _) = self.segments.first()?;
            m.start.wrapping_sub(addr)
        } else {
            let len = m.end - m.start;
            let maps_it = |&&(_, off, size, exec): &&(u64, u64, u64, bool)| {
                exec && off < m.offset + len && m.offset < off + size.max(1)
            };
            let holds = |&&(_, off, size, _): &&(u64, u64, u64, bool)| {
                m.offset >= off && m.offset < off + size.max(1)
            };
            let seg = self.segments.iter().find(maps_it);
            let &(addr, off, _, _) = seg.or_else(|| self.segments.iter().find(holds))?;
            // File offset `off` is at `m.start + (off - m.offset)`.
            m.start
                .wrapping_sub(m.offset)
                .wrapping_add(off)
                .wrapping_sub(addr)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_code_mappings_only() {
        let code = "7f0000001000-7f0000002000 r-xp 00001000 08:01 1234 /usr/lib/libc.so.6";
        let m = parse_line(code).unwrap();
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f0000001000, 0x7f0000002000, 0x1000)
        );
        assert_eq!(m.path, "/usr/lib/libc.so.6");
        assert!(parse_line("7f0-7f1 rw-p 00000000 08:01 1234 /usr/lib/libc.so.6").is_none());
        assert!(parse_line("7f0-7f1 r-xp 00000000 00:00 0 ").is_none());
        assert!(parse_line("7f0-7f1 r-xp 00000000 00:00 0 [vdso]").is_some());
        assert!(parse_line("garbage").is_none());
    }
}
