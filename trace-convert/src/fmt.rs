//! Small formatting helpers for the writers' hot loops (`write!` costs more than the rest
//! of a record's work): numbers appended to a [`Line`] (Paraver) or a `Vec<u8>` (the
//! Trace Event Format), both [`Sink`]s.

const DIGITS2: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// One body line being built. A fixed array: appending is a store and an index check,
/// where a `Vec` push also checks the capacity and may call its growth path, which
/// kept the length from staying in a register (docs/performance.md).
pub(crate) struct Line {
    buf: [u8; LINE_CAP],
    len: usize,
}

/// Bytes a [`Line`] holds. Body lines are under 100 bytes except events lines with many
/// type/value pairs, which callers write out in pieces (see [`Line::has_room`]).
const LINE_CAP: usize = 512;

/// The longest piece a caller appends between two checks of [`Line::has_room`]: a
/// record's head or one type/value pair with its separators.
pub(crate) const LINE_PIECE: usize = 128;

/// Where digits are appended.
pub(crate) trait Sink {
    fn push(&mut self, b: u8);
    fn extend_from_slice(&mut self, s: &[u8]);
    fn extend_4(&mut self, s: [u8; 4]);
    fn len(&self) -> usize;
    fn truncate(&mut self, len: usize);
}

impl Sink for Vec<u8> {
    #[inline]
    fn push(&mut self, b: u8) {
        Vec::push(self, b)
    }
    #[inline]
    fn extend_from_slice(&mut self, s: &[u8]) {
        Vec::extend_from_slice(self, s)
    }
    #[inline]
    fn extend_4(&mut self, s: [u8; 4]) {
        Vec::extend_from_slice(self, &s)
    }
    #[inline]
    fn len(&self) -> usize {
        Vec::len(self)
    }
    #[inline]
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }
}

impl Line {
    pub(crate) fn new() -> Line {
        Line {
            buf: [0; LINE_CAP],
            len: 0,
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// There is room for one more piece of up to [`LINE_PIECE`] bytes.
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        self.len + LINE_PIECE <= LINE_CAP
    }
}

impl Sink for Line {
    #[inline]
    fn push(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    #[inline]
    fn extend_from_slice(&mut self, s: &[u8]) {
        self.buf[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }

    #[inline]
    fn extend_4(&mut self, s: [u8; 4]) {
        self.buf[self.len..self.len + 4].copy_from_slice(&s);
        self.len += 4;
    }

    #[inline]
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }
}

/// Appends the decimal form of `v`.
///
/// Most numbers of a body line are below 100 (CPUs, applications, threads, states) or
/// are times of 9 to 11 digits. A number is cut into groups of 8, 4 and 2 digits made
/// with 32-bit arithmetic and digit-pair table lookups, so a time takes a few
/// independent multiplications instead of a chain of five 64-bit divisions. Always
/// inlined, with its helpers: called half a dozen times a line, the calls were a large
/// share of the formatting thread's work (docs/performance.md).
#[inline(always)]
pub(crate) fn push_u64<B: Sink>(buf: &mut B, v: u64) {
    if v < 100_000_000 {
        push_below_1e8(buf, v as u32);
    } else if v < 10_000_000_000_000_000 {
        push_below_1e8(buf, (v / 100_000_000) as u32);
        let low = (v % 100_000_000) as u32;
        push_4_digits(buf, low / 10_000);
        push_4_digits(buf, low % 10_000);
    } else {
        push_any(buf, v);
    }
}

#[inline(always)]
fn push_below_1e8<B: Sink>(buf: &mut B, v: u32) {
    if v < 10_000 {
        push_below_1e4(buf, v);
    } else {
        push_below_1e4(buf, v / 10_000);
        push_4_digits(buf, v % 10_000);
    }
}

#[inline(always)]
fn push_below_1e4<B: Sink>(buf: &mut B, v: u32) {
    if v < 10 {
        buf.push(b'0' + v as u8);
    } else if v < 100 {
        push_pair(buf, v);
    } else {
        push_below_1e4_3plus(buf, v);
    }
}

#[inline]
fn push_below_1e4_3plus<B: Sink>(buf: &mut B, v: u32) {
    let (hi, lo) = (v / 100, v % 100);
    if hi < 10 {
        buf.push(b'0' + hi as u8);
    } else {
        push_pair(buf, hi);
    }
    push_pair(buf, lo);
}

/// Appends exactly 4 digits (leading zeros included) of `v` < 10^4.
#[inline]
fn push_4_digits<B: Sink>(buf: &mut B, v: u32) {
    let (hi, lo) = (v as usize / 100 * 2, v as usize % 100 * 2);
    buf.extend_4([DIGITS2[hi], DIGITS2[hi + 1], DIGITS2[lo], DIGITS2[lo + 1]]);
}

/// Appends exactly 2 digits of `v` < 100.
#[inline]
fn push_pair<B: Sink>(buf: &mut B, v: u32) {
    let d = v as usize * 2;
    buf.extend_from_slice(&DIGITS2[d..d + 2]);
}

/// Appends the decimal form of any `v` (two digits per division, as `itoa` does). The
/// digits are built left-aligned in a fixed array that is appended whole and then cut
/// back: a fixed-size copy compiles to a few moves, where a variable-length one would
/// cost a `memcpy` call per number.
fn push_any<B: Sink>(buf: &mut B, mut v: u64) {
    let n = digits(v);
    let mut tmp = [b'0'; 20];
    let mut i = n;
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        tmp[i] = DIGITS2[d];
        tmp[i + 1] = DIGITS2[d + 1];
    }
    if v >= 10 {
        let d = v as usize * 2;
        tmp[0] = DIGITS2[d];
        tmp[1] = DIGITS2[d + 1];
    } else {
        tmp[0] = b'0' + v as u8;
    }
    let len = buf.len();
    buf.extend_from_slice(&tmp);
    buf.truncate(len + n);
}

fn digits(v: u64) -> usize {
    let mut n = 1;
    let mut x = v;
    while x >= 10_000 {
        x /= 10_000;
        n += 4;
    }
    if x >= 1000 {
        n + 3
    } else if x >= 100 {
        n + 2
    } else if x >= 10 {
        n + 1
    } else {
        n
    }
}

/// Appends the decimal form of `v`.
pub(crate) fn push_i64<B: Sink>(buf: &mut B, v: i64) {
    if v < 0 {
        buf.push(b'-');
    }
    push_u64(buf, v.unsigned_abs());
}

/// Appends `ns` as microseconds with three decimals (`1234.567`): exact, no float.
#[inline]
pub(crate) fn push_us<B: Sink>(buf: &mut B, ns: u64) {
    push_u64(buf, ns / 1000);
    let r = (ns % 1000) as u32;
    let d = r as usize % 100 * 2;
    buf.extend_4([b'.', b'0' + (r / 100) as u8, DIGITS2[d], DIGITS2[d + 1]]);
}

/// `dd/mm/yyyy at HH:MM` (UTC) of a time in ns since the Unix epoch, as Extrae writes it.
pub(crate) fn paraver_date(unix_ns: i128) -> String {
    let secs = unix_ns.div_euclid(1_000_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{d:02}/{m:02}/{y:04} at {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Gregorian date of a day number since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        let mut b = Line::new();
        let mut values = vec![0u64, 7, 10, 123_456_789, u64::MAX];
        for p in 1..20 {
            let p10 = 10u64.pow(p);
            values.extend([p10 - 1, p10, p10 + 1]);
            values.extend(p10.checked_mul(3).map(|v| v + 7));
        }
        for v in values {
            b.clear();
            push_u64(&mut b, v);
            assert_eq!(String::from_utf8_lossy(b.as_bytes()), v.to_string());
        }
        let mut v = Vec::new();
        for ns in [0u64, 7, 1000, 1_234_567, 999_999, 5_000_000_000_001] {
            v.clear();
            push_us(&mut v, ns);
            let want = format!("{}.{:03}", ns / 1000, ns % 1000);
            assert_eq!(String::from_utf8_lossy(&v), want);
        }
        for v in [0i64, -1, i64::MIN, i64::MAX, -42] {
            b.clear();
            push_i64(&mut b, v);
            assert_eq!(String::from_utf8_lossy(b.as_bytes()), v.to_string());
        }
    }

    #[test]
    fn dates() {
        assert_eq!(paraver_date(0), "01/01/1970 at 00:00");
        // 2025-05-20 14:03:00 UTC
        assert_eq!(
            paraver_date(1_747_749_780 * 1_000_000_000),
            "20/05/2025 at 14:03"
        );
        assert_eq!(
            paraver_date(951_782_400 * 1_000_000_000),
            "29/02/2000 at 00:00"
        );
    }
}
