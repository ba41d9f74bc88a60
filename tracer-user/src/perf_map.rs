//! The perf maps of traced processes (`/tmp/perf-PID.map`, one `START SIZE NAME` line, in
//! hex, per function a JIT compiled: Java's, Node's, LuaJIT's), read while the processes
//! run, so that the trace carries the names of the JIT code its stacks pass through: once
//! a process has exited its map is stale or removed, and its pid may be another's.
//!
//! The map is the one in the process's own mount namespace, named by its pid there, as
//! perf looks for it. It is read as it grows (JITs append to it), from where the last
//! read stopped, and only as far as whole lines.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

/// How often a process's map is looked at again for an address it does not name: an
/// address in a file's code is never in it, and is looked up like the others.
const RECHECK: Duration = Duration::from_millis(100);

/// The functions of one process's map read so far.
#[derive(Default)]
struct Map {
    /// `(start, end, name)`, sorted by start.
    entries: Vec<(u64, u64, String)>,
    /// Bytes of the file read (to its last whole line).
    read: u64,
    checked: Option<Instant>,
}

/// The perf maps of the processes whose stacks were seen.
#[derive(Default)]
pub struct PerfMaps {
    maps: FxHashMap<u32, Map>,
}

impl PerfMaps {
    /// The function of process `tgid`'s JIT code that `addr` is in, as `(start, end,
    /// name)`; the map is read again, at most every [`RECHECK`], when it does not name
    /// `addr`.
    pub fn lookup(&mut self, tgid: u32, addr: u64) -> Option<(u64, u64, &str)> {
        let map = self.maps.entry(tgid).or_default();
        if find(&map.entries, addr).is_none() && map.checked.is_none_or(|t| t.elapsed() >= RECHECK)
        {
            map.checked = Some(Instant::now());
            read_more(tgid, map);
        }
        let (start, end, name) = find(&map.entries, addr)?;
        Some((*start, *end, name.as_str()))
    }

    /// Process `tgid` executed another program (or exited): its map is read afresh.
    pub fn forget(&mut self, tgid: u32) {
        self.maps.remove(&tgid);
    }
}

fn find(entries: &[(u64, u64, String)], addr: u64) -> Option<&(u64, u64, String)> {
    let i = entries.partition_point(|e| e.0 <= addr);
    let e = entries.get(i.checked_sub(1)?)?;
    (addr < e.1).then_some(e)
}

/// Reads what was appended to process `tgid`'s map since the last read; a map that
/// shrank was written anew, and is read from its start.
fn read_more(tgid: u32, map: &mut Map) {
    let Some(path) = path(tgid) else { return };
    // Not through a link: the process owns that directory, and a link could point the
    // recorder, root, at any file of the machine. Nor a file another user wrote.
    let Ok(mut file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    else {
        return;
    };
    let Ok(meta) = file.metadata() else { return };
    let owner = std::fs::metadata(format!("/proc/{tgid}")).map(|m| m.uid());
    if !meta.is_file() || owner.is_ok_and(|uid| uid != meta.uid() && meta.uid() != 0) {
        return;
    }
    if meta.len() < map.read {
        *map = Map {
            checked: map.checked,
            ..Map::default()
        };
    }
    if meta.len() == map.read || file.seek(SeekFrom::Start(map.read)).is_err() {
        return;
    }
    let mut bytes = Vec::new();
    if file
        .take(meta.len() - map.read)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return;
    }
    let Some(whole) = bytes.iter().rposition(|&b| b == b'\n') else {
        return;
    };
    map.read += whole as u64 + 1;
    let text = String::from_utf8_lossy(&bytes[..whole]);
    let before = map.entries.len();
    map.entries.extend(text.lines().filter_map(parse));
    if map.entries.len() > before {
        // Stable: of two entries at one address, the later stays after the earlier.
        map.entries.sort_by_key(|e| e.0);
    }
}

/// `/proc/TGID/root/tmp/perf-NSPID.map`: the process's /tmp, its pid in its namespace.
fn path(tgid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{tgid}/status")).ok()?;
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("");
    let nspid: u32 = nspid.parse().unwrap_or(tgid);
    Some(format!("/proc/{tgid}/root/tmp/perf-{nspid}.map"))
}

/// One line of a perf map: `START SIZE NAME`, hex, `0x` or not.
fn parse(line: &str) -> Option<(u64, u64, String)> {
    let mut f = line.splitn(3, ' ');
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let start = hex(f.next()?)?;
    let size = hex(f.next()?)?;
    let name = f.next()?.trim();
    let end = start.checked_add(size)?;
    (size > 0 && !name.is_empty()).then(|| (start, end, name.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_parsed_as_perf_writes_them_and_others_skipped() {
        assert_eq!(
            parse("7f0000001000 40 LazyCompile:*handle app.js:10"),
            Some((
                0x7f00_0000_1000,
                0x7f00_0000_1040,
                "LazyCompile:*handle app.js:10".into()
            ))
        );
        assert_eq!(
            parse("0x10 0x8 Interpreter"),
            Some((0x10, 0x18, "Interpreter".into()))
        );
        for bad in [
            "",
            "bad line",
            "10 0 empty",
            "10 8",
            "ffffffffffffffff 2 wraps",
            "zz 8 x",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    /// This test process's own map, written in steps as a JIT appends to it: each read
    /// takes the whole lines only, a line finished later is read later, and a map written
    /// anew is read anew.
    #[test]
    fn a_growing_map_is_read_as_it_grows() {
        let tgid = std::process::id();
        let file = path(tgid).unwrap();
        let write = |text: &str| std::fs::write(&file, text).unwrap();
        let mut maps = PerfMaps::default();
        write("1000 10 first\n2000 10 sec");
        assert_eq!(maps.lookup(tgid, 0x1008).map(|e| e.2), Some("first"));
        assert_eq!(maps.lookup(tgid, 0x2008), None);
        // Not looked at again before RECHECK.
        write("1000 10 first\n2000 10 second\n");
        assert_eq!(maps.lookup(tgid, 0x2008), None);
        maps.maps.get_mut(&tgid).unwrap().checked = None;
        assert_eq!(maps.lookup(tgid, 0x2008).map(|e| e.2), Some("second"));
        write("3000 10 anew\n");
        maps.maps.get_mut(&tgid).unwrap().checked = None;
        assert_eq!(maps.lookup(tgid, 0x3000).map(|e| e.2), Some("anew"));
        assert_eq!(maps.lookup(tgid, 0x1008), None);
        std::fs::remove_file(&file).unwrap();
    }
}
