//! Durations and sizes in human units, as the tracer's tables show them.
//!
//! ASCII only (`us`, not `µs`), so that a cell's width is its length in characters.

/// A duration given in ns, in the largest unit of ns, us, ms and s that keeps it at 1 or
/// more, with three significant digits: `850ns`, `12.3us`, `4.56ms`, `1.23s`. Below 1 us
/// it is exact; just below 10, 100 or 1000 of a unit, rounding up adds a digit (`10.00us`,
/// `1000us`). Long durations stay in seconds (`3600s`), so that a column compares at a
/// glance.
///
/// ```
/// use trace_summary::units::human_ns;
/// assert_eq!(human_ns(850), "850ns");
/// assert_eq!(human_ns(12_345), "12.3us");
/// assert_eq!(human_ns(4_560_000), "4.56ms");
/// assert_eq!(human_ns(1_234_000_000), "1.23s");
/// ```
pub fn human_ns(v: u64) -> String {
    let f = v as f64;
    let (x, unit) = if v < 1_000 {
        return format!("{v}ns");
    } else if v < 1_000_000 {
        (f / 1e3, "us")
    } else if v < 1_000_000_000 {
        (f / 1e6, "ms")
    } else {
        (f / 1e9, "s")
    };
    three_digits(x, unit)
}

/// A size given in bytes, in the largest binary unit (B, KiB, MiB, GiB, TiB, PiB) that
/// keeps it at 1 or more, with three significant digits: `512B`, `1.50KiB`, `3.20MiB`,
/// `150MiB`. Below 1 KiB it is exact; rounding up can add a digit as for [`human_ns`]
/// (`1024KiB`); sizes of 1024 PiB and more stay in PiB.
///
/// ```
/// use trace_summary::units::human_bytes;
/// assert_eq!(human_bytes(512), "512B");
/// assert_eq!(human_bytes(1536), "1.50KiB");
/// assert_eq!(human_bytes(3_355_443), "3.20MiB");
/// assert_eq!(human_bytes(150 << 20), "150MiB");
/// ```
pub fn human_bytes(v: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if v < 1024 {
        return format!("{v}B");
    }
    let mut x = v as f64 / 1024.0;
    let mut u = 0;
    while x >= 1024.0 && u < UNITS.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    three_digits(x, UNITS[u])
}

/// `x` (1 or more) with three significant digits, then `unit`.
fn three_digits(x: f64, unit: &str) -> String {
    if x >= 100.0 {
        format!("{x:.0}{unit}")
    } else if x >= 10.0 {
        format!("{x:.1}{unit}")
    } else {
        format!("{x:.2}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_at_unit_boundaries() {
        let cases = [
            (0, "0ns"),
            (999, "999ns"),
            (1_000, "1.00us"),
            (9_999, "10.00us"),
            (99_949, "99.9us"),
            (999_499, "999us"),
            (999_999, "1000us"),
            (1_000_000, "1.00ms"),
            (999_999_999, "1000ms"),
            (1_000_000_000, "1.00s"),
            (3_600_000_000_000, "3600s"),
            (u64::MAX, "18446744074s"),
        ];
        for (v, s) in cases {
            assert_eq!(human_ns(v), s, "{v}");
        }
    }

    #[test]
    fn sizes_at_unit_boundaries() {
        let cases = [
            (0, "0B"),
            (1023, "1023B"),
            (1024, "1.00KiB"),
            ((1 << 20) - 1, "1024KiB"),
            (1 << 20, "1.00MiB"),
            (1 << 30, "1.00GiB"),
            (1 << 40, "1.00TiB"),
            (1 << 50, "1.00PiB"),
            (1 << 60, "1024PiB"),
            (u64::MAX, "16384PiB"),
        ];
        for (v, s) in cases {
            assert_eq!(human_bytes(v), s, "{v}");
        }
    }
}
