//! The header and the records that come too late for the body (states before a
//! thread's first appearance, links resolved past the horizon): both known only at the
//! end, written into room kept at the start of the body, or the body copied behind them.

use std::fs::File;
use std::io::{BufWriter, Write};

use super::body::{format_line, Out, OUT_BUF};
use crate::error::{Error, Result};
use crate::fmt::Line;
use crate::Pending;

/// Bytes at the start of the body file kept for the header and the records that come too
/// late for the body, both known only at the end: when they fit, they are written there
/// and the body file becomes the .prv, instead of copying the body behind them (a large
/// part of a conversion's CPU for a large body). Late records come with the trace's length
/// (links pending past the horizon), so the room is a thousandth of the inputs' size,
/// between this and 1 MiB: 1 KiB holds a header of several dozen processes and a dozen
/// late records (sizes measured: docs/performance.md).
pub(super) const MIN_ROOM: usize = 1024;

/// The room kept for inputs of `bytes` bytes.
pub(super) fn room_for(bytes: u64) -> usize {
    (bytes / 1000).clamp(MIN_ROOM as u64, 1 << 20) as usize
}

/// Longest padding line: readers with line buffers of a few KiB keep working.
pub(super) const PAD_LINE: usize = 1024;

/// `header` followed by comment lines that pad it to `len` bytes (at least
/// `header.len() + 2`), in a buffer of the formatter's capacity. With an empty header:
/// the placeholder the body starts with.
pub(super) fn header_room(header: &[u8], len: usize) -> Vec<u8> {
    let mut room = Vec::with_capacity(OUT_BUF + len);
    room.extend_from_slice(header);
    let mut left = len - header.len();
    while left > 0 {
        // A line is `#`, spaces, newline: never leave a single byte for the last one.
        let n = match left {
            l if l <= PAD_LINE => l,
            l if l - PAD_LINE >= 2 => PAD_LINE,
            _ => PAD_LINE - 2,
        };
        room.push(b'#');
        room.resize(room.len() + n - 2, b' ');
        room.push(b'\n');
        left -= n;
    }
    room
}

/// The .prv: `header` and the `late` records merged into the `body` written after the
/// room kept for them; returns it (uncommitted) and the lines it added, by record type.
pub(super) fn assemble_prv(
    header: &str,
    room: usize,
    body_file: Pending,
    late: &[Out],
    slots: &[(u32, u32)],
) -> Result<(Pending, [u64; 3])> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let body_path = body_file.path().to_owned();
    let io_body = |e| Error::io(&body_path, e);
    let mut body = body_file.file().try_clone().map_err(io_body)?;
    let len = body.metadata().map_err(io_body)?.len();
    // The body is sorted: each late record's place is found by binary search over its
    // lines, so late records cost a few reads each, not a parse of the body.
    let mut counts = [0u64; 3];
    let mut scratch = Line::new();
    let mut places = Vec::with_capacity(late.len());
    let mut pos = room as u64;
    for rec in late {
        let at = insertion_point(&body, pos, len, (rec.time, rec.rank)).map_err(io_body)?;
        let mut line = Vec::new();
        let rec = std::slice::from_ref(rec);
        format_line(&mut line, &mut scratch, slots, rec, &mut counts);
        places.push((at, line));
        pos = at;
    }
    let late_bytes: usize = places.iter().map(|p| p.1.len()).sum();
    let prefix_end = places.last().map_or(room as u64, |p| p.0);

    // When the header and the late lines fit in the room kept for them, only the body up
    // to the last late line is rewritten, in place: each stretch moves towards the start
    // by the late lines still to come, and since it is read before it is written and
    // every write lands at or before what is still unread, a stretch at a time in a
    // fixed buffer is enough whatever the trace's size. The body file becomes the .prv.
    if header.len() + late_bytes + 2 <= room {
        let file = &body;
        let head = header_room(header.as_bytes(), room - late_bytes);
        file.write_all_at(&head, 0).map_err(io_body)?;
        let (mut pos, mut to) = (room as u64, head.len() as u64);
        let mut buf = vec![0u8; 1 << 20];
        for (at, line) in &places {
            while pos < *at {
                let n = buf.len().min((at - pos) as usize);
                file.read_exact_at(&mut buf[..n], pos).map_err(io_body)?;
                file.write_all_at(&buf[..n], to).map_err(io_body)?;
                pos += n as u64;
                to += n as u64;
            }
            file.write_all_at(line, to).map_err(io_body)?;
            to += line.len() as u64;
        }
        debug_assert_eq!(to, prefix_end);
        return Ok((body_file, counts));
    }

    // Otherwise the header goes first in a new file, and the stretches between places
    // are copied whole (in the kernel, when it can).
    let prv = body_file.again()?;
    let out_path = prv.path().to_owned();
    let io_out = |e| Error::io(&out_path, e);
    let mut out = BufWriter::with_capacity(1 << 20, prv.file());
    out.write_all(header.as_bytes()).map_err(io_out)?;
    let mut pos = room as u64;
    for (at, line) in &places {
        body.seek(SeekFrom::Start(pos)).map_err(io_body)?;
        std::io::copy(&mut (&mut body).take(at - pos), &mut out).map_err(io_out)?;
        out.write_all(line).map_err(io_out)?;
        pos = *at;
    }
    body.seek(SeekFrom::Start(pos)).map_err(io_body)?;
    std::io::copy(&mut body, &mut out).map_err(io_out)?;
    out.flush().map_err(io_out)?;
    drop(out);
    Ok((prv, counts))
}

/// The offset, in `[lo, hi]` (`lo` a line start), of the first body line whose
/// (time, tie rank) is above `key`: where a record with that key goes.
pub(super) fn insertion_point(
    body: &File,
    mut lo: u64,
    mut hi: u64,
    key: (u64, u8),
) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut window = vec![0u8; 1024];
    // Invariant: lines starting before `lo` have keys <= `key`; lines starting at or
    // after `hi` have keys above it.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // The first line starting at or after `mid` (`mid` itself when it follows a
        // newline): read from the byte before it.
        let from = if mid == lo { lo } else { mid - 1 };
        let mut line = Vec::new();
        let mut off = from;
        let mut start = None;
        loop {
            let n = body.read_at(&mut window, off)?;
            if n == 0 {
                break;
            }
            let chunk = &window[..n];
            let mut i = 0;
            if start.is_none() {
                if from == lo {
                    start = Some(lo);
                } else if let Some(nl) = chunk.iter().position(|&b| b == b'\n') {
                    start = Some(off + nl as u64 + 1);
                    i = nl + 1;
                } else {
                    off += n as u64;
                    continue;
                }
            }
            match chunk[i..].iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    line.extend_from_slice(&chunk[i..i + nl + 1]);
                    break;
                }
                None => line.extend_from_slice(&chunk[i..]),
            }
            off += n as u64;
        }
        let Some(s) = start.filter(|&s| s < hi && !line.is_empty()) else {
            // No line starts in [mid, hi).
            hi = mid;
            continue;
        };
        match line_key(&line) {
            Some(k) if k > key => hi = s,
            _ => lo = s + line.len() as u64,
        }
    }
    Ok(lo)
}

/// (time, tie rank) of a body line.
pub(super) fn line_key(line: &[u8]) -> Option<(u64, u8)> {
    let rank = match line.first()? {
        b'3' => 0,
        b'2' => 1,
        b'1' => 2,
        _ => return None,
    };
    let field = line.split(|&b| b == b':').nth(5)?;
    let s = std::str::from_utf8(field).ok()?.trim_end();
    Some((s.parse().ok()?, rank))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paraver::body::OutKind;

    /// The room is exactly as long as asked, in comment lines no longer than PAD_LINE.
    #[test]
    fn room_is_padded_exactly_in_short_comment_lines() {
        for header in ["", "#Paraver (x):1:1(1):1:1(1:1)\n"] {
            for len in (header.len() + 2..3 * PAD_LINE + 5).chain([MIN_ROOM, 1 << 20]) {
                let room = header_room(header.as_bytes(), len);
                assert_eq!(room.len(), len);
                let pad = std::str::from_utf8(&room[header.len()..]).unwrap();
                assert!(pad.ends_with('\n'));
                for line in pad.split_inclusive('\n') {
                    assert!(line.starts_with('#') && line.len() <= PAD_LINE, "{len}");
                }
            }
        }
        assert_eq!(room_for(0), MIN_ROOM);
        assert_eq!(room_for(152_299_278), 152_299);
        assert_eq!(room_for(u64::MAX), 1 << 20);
    }

    fn late_state(time: u64, end: u64) -> Out {
        Out {
            time,
            rank: 2,
            thread: 0,
            kind: OutKind::State {
                end,
                state: 1,
                cpu: 1,
            },
        }
    }

    /// The .prv text and its record lines after `late` is merged into a body of states
    /// at `10 * i` for `i` in `1..=n`.
    fn merge_late(header: &str, n: u64, late: &[Out]) -> (String, Vec<String>) {
        let body: String = (1..=n)
            .map(|i| format!("1:1:1:1:1:{}:{}:1\n", i * 10, i * 10 + 5))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut content = header_room(&[], MIN_ROOM);
        content.extend_from_slice(body.as_bytes());
        let b = Pending::new(&out, false).unwrap();
        std::fs::write(b.path(), content).unwrap();
        let (prv, counts) = assemble_prv(header, MIN_ROOM, b, late, &[(1, 1)]).unwrap();
        prv.commit().unwrap();
        assert_eq!(counts, [0, 0, late.len() as u64]);
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<String> = text
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect();
        (text, lines)
    }

    const SHORT_HEADER: &str = "#Paraver (x):600_ns:1(1):1:1(1:1)\n";

    /// A header too long for the room: the late records are merged by copying.
    fn long_header() -> String {
        format!("#Paraver ({}):600_ns:1(1):1:1(1:1)\n", "x".repeat(MIN_ROOM))
    }

    /// Late records merged in place (header and late lines fit the room) and by copying
    /// (a header too long for it) give the same lines, in the same order.
    #[test]
    fn late_records_in_place_and_by_copy_agree() {
        let state = late_state;
        let late = [
            state(5, 7),
            state(200, 201),
            state(200, 202),
            state(495, 499),
        ];
        let run = |header: &str| merge_late(header, 50, &late);
        let (short, in_place) = run(SHORT_HEADER);
        let (_, copied) = run(&long_header());
        assert!(
            short.lines().nth(1).unwrap().starts_with("# "),
            "not merged in place"
        );
        assert_eq!(in_place, copied);
        assert_eq!(in_place.len(), 54);
        assert_eq!(in_place[0], "1:1:1:1:1:5:7:1");
        assert_eq!(
            in_place[20..23],
            [
                "1:1:1:1:1:200:205:1",
                "1:1:1:1:1:200:201:1",
                "1:1:1:1:1:200:202:1"
            ]
        );
    }

    /// In place, a body of several buffers' length (the rewrite moves it a buffer at a
    /// time) with a late record near its end.
    #[test]
    fn late_records_far_into_a_long_body() {
        let late = [
            late_state(5, 7),
            late_state(600_000, 600_001),
            late_state(1_199_995, 1_199_999),
        ];
        let (text, in_place) = merge_late(SHORT_HEADER, 120_000, &late);
        assert!(text.len() > 2 << 20);
        assert!(
            text.lines().nth(1).unwrap().starts_with("# "),
            "not merged in place"
        );
        let (_, copied) = merge_late(&long_header(), 120_000, &late);
        assert_eq!(in_place, copied);
        assert_eq!(in_place.len(), 120_003);
        assert_eq!(in_place[60_001], "1:1:1:1:1:600000:600001:1");
        assert_eq!(in_place[120_001], "1:1:1:1:1:1199995:1199999:1");
    }
}
