//! The clocks of a recording: every record is stamped with CLOCK_MONOTONIC (the eBPF
//! programs' `bpf_ktime_get_ns`); the header keeps its offset to wall time.

/// CLOCK_MONOTONIC now, ns: the time base of every record.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC) as u64
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of a few bracketed samples.
pub fn monotonic_to_realtime() -> i64 {
    let mut best = (i128::MAX, 0i128);
    for _ in 0..5 {
        let a = clock_ns(libc::CLOCK_MONOTONIC);
        let r = clock_ns(libc::CLOCK_REALTIME);
        let b = clock_ns(libc::CLOCK_MONOTONIC);
        if b - a < best.0 {
            best = (b - a, r - (a + b) / 2);
        }
    }
    best.1 as i64
}
