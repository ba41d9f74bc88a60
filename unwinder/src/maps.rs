//! A process's executable mappings, from /proc/PID/maps, and the unwind tables of what
//! they map.

use std::ops::Range;

use framehop::{x86_64::UnwinderX86_64, ExplicitModuleSectionInfo, Module, Unwinder as _};
use object::{Object, ObjectSection, ObjectSegment};
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

/// The bytes of what `m` maps in process `pid`: the file as the process sees it (through
/// its root, or the mapping itself for a file since deleted), or the vDSO's memory.
pub fn image(pid: u32, m: &Mapping) -> Option<Vec<u8>> {
    if m.path == "[vdso]" {
        use std::os::unix::fs::FileExt;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
        let mut buf = vec![0; (m.end - m.start) as usize];
        mem.read_exact_at(&mut buf, m.start).ok()?;
        return Some(buf);
    }
    let by_map = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
    match m.path.strip_suffix(" (deleted)") {
        Some(_) => std::fs::read(by_map).ok(),
        None => std::fs::read(format!("/proc/{pid}/root{}", m.path))
            .or_else(|_| std::fs::read(by_map))
            .ok(),
    }
}

/// Adds the unwind tables of the ELF image `bytes`, mapped by `m`, to `unwinder`; returns
/// the image's build-id. `None` for an image that does not parse or map as said.
pub fn add_module(
    unwinder: &mut UnwinderX86_64<Vec<u8>>,
    m: &Mapping,
    bytes: &[u8],
) -> Option<Option<String>> {
    let file = object::File::parse(bytes).ok()?;
    // The load bias: where the segment holding the mapping's file offset was put.
    let bias = if m.path == "[vdso]" {
        let first = file.segments().next()?;
        m.start.wrapping_sub(first.address())
    } else {
        let seg = file.segments().find(|s| {
            let (off, size) = s.file_range();
            m.offset >= off && m.offset < off + size.max(1)
        })?;
        let (off, _) = seg.file_range();
        m.start.wrapping_sub(seg.address() + (m.offset - off))
    };
    let range = |name: &str| -> Option<Range<u64>> {
        let s = file.section_by_name(name)?;
        Some(s.address()..s.address() + s.size())
    };
    let data = |name: &str| -> Option<Vec<u8>> {
        let s = file.section_by_name(name)?;
        s.uncompressed_data().ok().map(|d| d.into_owned())
    };
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
        ..Default::default()
    };
    unwinder.add_module(Module::new(m.path.clone(), m.start..m.end, bias, info));
    let build_id = file.build_id().ok().flatten().map(|id| {
        id.iter().fold(String::new(), |mut s, b| {
            s.push_str(&format!("{b:02x}"));
            s
        })
    });
    Some(build_id)
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
