//! Small formatting helpers for the writer's hot loop (`write!` costs more than the rest
//! of a record's work).

/// Appends the decimal form of `v`.
pub(crate) fn push_u64(buf: &mut Vec<u8>, mut v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend_from_slice(&tmp[i..]);
}

/// Appends the decimal form of `v`.
pub(crate) fn push_i64(buf: &mut Vec<u8>, v: i64) {
    if v < 0 {
        buf.push(b'-');
    }
    push_u64(buf, v.unsigned_abs());
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
        let mut b = Vec::new();
        for v in [0u64, 7, 10, 123_456_789, u64::MAX] {
            b.clear();
            push_u64(&mut b, v);
            assert_eq!(String::from_utf8_lossy(&b), v.to_string());
        }
        for v in [0i64, -1, i64::MIN, i64::MAX, -42] {
            b.clear();
            push_i64(&mut b, v);
            assert_eq!(String::from_utf8_lossy(&b), v.to_string());
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
