//! Address to (inlined) frames, with a per-binary cache.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::binary::Binary;
use crate::elf::ElfInfo;
use crate::target::{mapped_path, read_maps, MapEntry};
use crate::{Error, Frame};

/// Identity of a file on disk, so a rebuilt binary at the same path is reloaded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: i64,
}

/// How long a file's identity, once read, is trusted before the next stat.
///
/// A stat walks the path in the kernel and costs more CPU than a warm lookup,
/// so checking on every call made the per-call API several times slower than
/// the batch one (docs/performance.md). The price: a binary
/// replaced at a path less than this long after the last check is answered
/// from the old file until the window ends (or [`Symbolizer::recheck_files`]).
/// Addresses a tracer recorded came from the file mapped when they were
/// taken, so a millisecond is far below what tells two builds apart there.
const RECHECK_AFTER: Duration = Duration::from_millis(1);

/// A path whose file identity was read at `checked` (`None`: read it again).
#[derive(Clone, Copy, Debug)]
struct PathEntry {
    key: FileKey,
    index: usize,
    checked: Option<Instant>,
}

/// Symbolizes addresses, caching parsed binaries by path and by build-id
/// (the same library seen through several /proc/PID/root paths is parsed once).
///
/// A binary rebuilt or replaced at a path is noticed by its identity
/// (device, inode, size, mtime), read again at most once per millisecond
/// per path; [`Symbolizer::recheck_files`] makes the next call read it.
#[derive(Default)]
pub struct Symbolizer {
    bins: Vec<Binary>,
    by_path: HashMap<PathBuf, PathEntry>,
    /// The entry of the previous call: consecutive addresses are mostly in one
    /// binary, and comparing a path is much cheaper than hashing it.
    last: Option<(PathBuf, PathEntry)>,
    by_build_id: HashMap<String, usize>,
    maps: HashMap<u32, Vec<MapEntry>>,
}

/// `/proc/PID/root/usr/lib/x.so` -> (`/proc/PID/root`, `/usr/lib/x.so`).
fn split_root(path: &Path) -> (PathBuf, String) {
    let s = path.to_string_lossy();
    if let Some(rest) = s.strip_prefix("/proc/") {
        if let Some((pid, tail)) = rest.split_once('/') {
            if pid.bytes().all(|b| b.is_ascii_digit()) {
                if let Some(disp) = tail.strip_prefix("root/") {
                    return (
                        PathBuf::from(format!("/proc/{pid}/root")),
                        format!("/{disp}"),
                    );
                }
            }
        }
    }
    (PathBuf::from("/"), s.into_owned())
}

impl Symbolizer {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn load(&mut self, path: &Path) -> Result<usize, Error> {
        let now = Instant::now();
        let fresh = |e: &PathEntry| {
            e.checked
                .is_some_and(|t| now.saturating_duration_since(t) < RECHECK_AFTER)
        };
        if let Some((p, e)) = &self.last {
            if p.as_os_str() == path.as_os_str() && fresh(e) {
                return Ok(e.index);
            }
        }
        if let Some(e) = self.by_path.get(path).copied().filter(fresh) {
            self.last = Some((path.to_path_buf(), e));
            return Ok(e.index);
        }
        let md = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        let key = FileKey {
            dev: md.dev(),
            ino: md.ino(),
            size: md.size(),
            mtime: md.mtime(),
            mtime_ns: md.mtime_nsec(),
        };
        let index = match self.by_path.get(path) {
            Some(e) if e.key == key => e.index,
            _ => self.open(path)?,
        };
        let entry = PathEntry {
            key,
            index,
            checked: Some(now),
        };
        self.by_path.insert(path.to_path_buf(), entry);
        self.last = Some((path.to_path_buf(), entry));
        Ok(index)
    }

    /// Parses the file now at `path`, or finds it parsed under another path.
    fn open(&mut self, path: &Path) -> Result<usize, Error> {
        let elf = ElfInfo::open(path)?;
        if let Some(id) = &elf.build_id {
            if let Some(&i) = self.by_build_id.get(id) {
                return Ok(i);
            }
        }
        let (root, display) = split_root(path);
        let id = elf.build_id.clone();
        self.bins.push(Binary::from_elf(elf, &display, &root));
        let i = self.bins.len() - 1;
        if let Some(id) = id {
            self.by_build_id.insert(id, i);
        }
        Ok(i)
    }

    /// Frames for ELF virtual address `vaddr` in `binary`: innermost inlined
    /// frame first, the outer function last. Always at least one frame; fields
    /// are `None` when unknown.
    pub fn symbolize(&mut self, binary: &Path, vaddr: u64) -> Result<Vec<Frame>, Error> {
        let i = self.load(binary)?;
        Ok(self.bins[i].symbolize(vaddr))
    }

    /// Frames for the byte at `offset` in the file `binary`: an address of a process,
    /// through the mapping that held it (`addr - start + offset`), as a recorded trace
    /// keeps them. `None` when no loaded segment holds that offset.
    pub fn symbolize_offset(
        &mut self,
        binary: &Path,
        offset: u64,
    ) -> Result<Option<Vec<Frame>>, Error> {
        let i = self.load(binary)?;
        let bin = &self.bins[i];
        Ok(bin.elf.offset_to_vaddr(offset).map(|v| bin.symbolize(v)))
    }

    /// The GNU build-id of the file now at `binary`, hex, when it has one.
    pub fn build_id(&mut self, binary: &Path) -> Result<Option<String>, Error> {
        let i = self.load(binary)?;
        Ok(self.bins[i].elf.build_id.clone())
    }

    /// The file offset where the function holding the byte at `offset` of `binary`
    /// starts, by its unwind table (`.eh_frame`): what tells apart, and groups the
    /// addresses of, functions no symbol names. `None` when the table has no function
    /// there.
    pub fn function_start_offset(
        &mut self,
        binary: &Path,
        offset: u64,
    ) -> Result<Option<u64>, Error> {
        let i = self.load(binary)?;
        let bin = &self.bins[i];
        Ok((bin.elf.offset_to_vaddr(offset))
            .and_then(|v| bin.function_start(v))
            .and_then(|s| bin.elf.vaddr_to_offset(s)))
    }

    /// [`Symbolizer::symbolize`] for many addresses in one binary, answers in
    /// the same order, without a path comparison and clock read per address.
    pub fn symbolize_batch(
        &mut self,
        binary: &Path,
        vaddrs: &[u64],
    ) -> Result<Vec<Vec<Frame>>, Error> {
        let i = self.load(binary)?;
        let bin = &self.bins[i];
        Ok(vaddrs.iter().map(|&a| bin.symbolize(a)).collect())
    }

    /// Frames for a runtime address in process `pid`, located through /proc/PID/maps.
    pub fn symbolize_pid(&mut self, pid: u32, addr: u64) -> Result<Vec<Frame>, Error> {
        let find = |maps: &[MapEntry]| {
            maps.iter()
                .find(|m| addr >= m.start && addr < m.end)
                .cloned()
        };
        let mut entry = self.maps.get(&pid).and_then(|m| find(m));
        if entry.is_none() {
            // New mappings (dlopen) appear after we cached; re-read once.
            let maps = read_maps(pid)?;
            entry = find(&maps);
            self.maps.insert(pid, maps);
        }
        let m = entry.ok_or(Error::AddressNotMapped { pid, addr })?;
        if !m.path.starts_with('/') {
            return Err(Error::NotFileBacked {
                pid,
                addr,
                mapping: m.path,
            });
        }
        let path = mapped_path(pid, &m);
        let i = self.load(&path)?;
        let file_off = addr - m.start + m.offset;
        let vaddr = self.bins[i]
            .elf
            .offset_to_vaddr(file_off)
            .ok_or(Error::AddressNotMapped { pid, addr })?;
        Ok(self.bins[i].symbolize(vaddr))
    }

    /// Makes the next call for each path read the file's identity again, for
    /// a caller that knows it just replaced a binary.
    pub fn recheck_files(&mut self) {
        self.last = None;
        for e in self.by_path.values_mut() {
            e.checked = None;
        }
    }

    /// Drops the cached memory map of `pid` (call when the process exec()s or exits).
    pub fn forget_pid(&mut self, pid: u32) {
        self.maps.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_split() {
        assert_eq!(
            split_root(Path::new("/proc/12/root/usr/lib/libc.so.6")),
            (
                PathBuf::from("/proc/12/root"),
                "/usr/lib/libc.so.6".to_string()
            )
        );
        assert_eq!(
            split_root(Path::new("/bin/ls")),
            (PathBuf::from("/"), "/bin/ls".to_string())
        );
    }

    #[test]
    fn the_last_address_has_no_line_and_no_panic() {
        // This test binary has DWARF; addr2line's lookup of `u64::MAX` overflowed.
        let exe = std::env::current_exe().unwrap();
        let frames = Symbolizer::new().symbolize(&exe, u64::MAX).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].line, None);
    }

    #[test]
    fn symbolizer_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Symbolizer>();
    }
}
