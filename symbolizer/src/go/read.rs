//! Bounds-checked little-endian reads from a Go binary's bytes, which are as
//! untrusted as the binary: every read is `None` past the end.

pub(super) fn rd_u32(d: &[u8], off: usize) -> Option<u32> {
    let b = d.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

pub(super) fn rd_u64(d: &[u8], off: usize) -> Option<u64> {
    let b = d.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// A pointer-sized word (`ptr` is 4 or 8).
pub(super) fn rd_word(d: &[u8], off: usize, ptr: usize) -> Option<u64> {
    if ptr == 8 {
        rd_u64(d, off)
    } else {
        rd_u32(d, off).map(u64::from)
    }
}

/// A NUL-terminated string at `off` in `d`.
pub(super) fn cstr(d: &[u8], off: usize) -> Option<&[u8]> {
    let tail = d.get(off..)?;
    let n = tail.iter().position(|&b| b == 0)?;
    Some(&tail[..n])
}

/// An unsigned LEB128 number (Go's `uvarint`) at `*pos`, which it advances;
/// `None` when it runs past the end or past `bits` bits.
pub(super) fn uvarint(d: &[u8], pos: &mut usize, bits: u32) -> Option<u64> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *d.get(*pos)?;
        *pos += 1;
        if shift >= bits {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}
