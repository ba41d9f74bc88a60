//! A mergeable log-linear histogram of durations (HDR-style buckets).
//!
//! Percentiles of millions of spans cannot keep the samples. Values are counted in
//! buckets whose width grows with the value: each power of two is split into
//! [`SUB_BUCKETS`] equal buckets, so any value is known to within 1/32 (about 3 %) and
//! values below 64 exactly. Bucket counts add, so histograms of files, threads or
//! windows merge exactly (the percentile of a merge is the percentile of the union).
//!
//! Only the range of buckets actually hit is stored (`lo..lo + counts.len()`): a
//! function whose calls take 1 to 10 ms occupies about 110 buckets, not 1 920. The
//! vector grows only when a value falls outside every value seen so far, which happens
//! a bounded number of times (at most once per bucket), never per event in steady state.

use serde::{Deserialize, Serialize};

/// log2 of the number of buckets per power of two.
const SUB_BITS: u32 = 5;
/// Buckets per power of two: the relative precision is 1 / SUB_BUCKETS.
pub const SUB_BUCKETS: u64 = 1 << SUB_BITS;

/// Bucket index of a value. Values below 2 * SUB_BUCKETS have their own bucket; above,
/// the index is (octave, top SUB_BITS bits after the leading one).
#[inline]
fn index(v: u64) -> u32 {
    if v < 2 * SUB_BUCKETS {
        return v as u32;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS + 1
    let shift = e - SUB_BITS;
    let sub = ((v >> shift) as u32) & (SUB_BUCKETS as u32 - 1);
    ((shift + 1) << SUB_BITS) | sub
}

/// The smallest and largest value of bucket `i`.
fn bounds(i: u32) -> (u64, u64) {
    if (i as u64) < 2 * SUB_BUCKETS {
        return (i as u64, i as u64);
    }
    let shift = (i >> SUB_BITS) - 1;
    let sub = (i as u64 & (SUB_BUCKETS - 1)) | SUB_BUCKETS;
    let lo = sub << shift;
    (lo, lo + ((1u64 << shift) - 1))
}

/// Counts of durations (ns) with exact count, sum, min and max.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Index of the bucket `counts[0]` counts.
    lo: u32,
    counts: Vec<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Histogram {
    /// An empty histogram (allocates nothing until the first value).
    pub const fn new() -> Histogram {
        Histogram {
            lo: 0,
            counts: Vec::new(),
            count: 0,
            sum: 0,
            min: 0,
            max: 0,
        }
    }

    /// Counts one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        let i = index(v);
        if i >= self.lo && ((i - self.lo) as usize) < self.counts.len() {
            self.counts[(i - self.lo) as usize] += 1;
        } else {
            self.grow_to(i);
            self.counts[(i - self.lo) as usize] += 1;
        }
        if self.count == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.count += 1;
        self.sum += v as u128;
    }

    /// Counts `n` values equal to `v` (for distributions that arrive already bucketed).
    pub fn record_n(&mut self, v: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = index(v);
        self.grow_to(i);
        // Counts from outside (a stat file's) may be damaged: they saturate.
        let c = &mut self.counts[(i - self.lo) as usize];
        *c = c.saturating_add(n);
        if self.count == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.count = self.count.saturating_add(n);
        self.sum = self.sum.saturating_add(v as u128 * n as u128);
    }

    /// Makes bucket `i` part of the stored range (which never shrinks).
    #[cold]
    fn grow_to(&mut self, i: u32) {
        if self.counts.is_empty() {
            self.lo = i;
            self.counts.push(0);
        } else if i < self.lo {
            let extra = (self.lo - i) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, extra));
            self.lo = i;
        } else if (i - self.lo) as usize >= self.counts.len() {
            self.counts.resize((i - self.lo) as usize + 1, 0);
        }
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        if other.count == 0 {
            return;
        }
        let olo = other.lo;
        let ohi = other.lo + other.counts.len() as u32 - 1;
        self.grow_to(olo);
        self.grow_to(ohi);
        for (k, &c) in other.counts.iter().enumerate() {
            let me = &mut self.counts[(olo - self.lo) as usize + k];
            *me = me.saturating_add(c);
        }
        self.min = if self.count == 0 {
            other.min
        } else {
            self.min.min(other.min)
        };
        self.max = self.max.max(other.max);
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact sum of the values.
    pub fn sum(&self) -> u64 {
        u64::try_from(self.sum).unwrap_or(u64::MAX)
    }

    /// Exact smallest value (0 when empty).
    pub fn min(&self) -> u64 {
        self.min
    }

    /// Exact largest value (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Exact mean, rounded down (0 when empty).
    pub fn mean(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            (self.sum / self.count as u128) as u64
        }
    }

    /// The value below or at which a fraction `q` (0..=1) of the values lie: the largest
    /// value of the bucket holding that rank (HDR's "highest equivalent value", so the
    /// answer is never below the true one, and at most 1/32 above), clamped to the exact
    /// min and max, so the largest values and a distribution of one value are exact.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (k, &c) in self.counts.iter().enumerate() {
            seen = c.saturating_add(seen);
            if seen >= rank {
                let (_, hi) = bounds(self.lo + k as u32);
                return hi.clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_precise() {
        let mut prev = 0;
        for i in 1..1900u32 {
            let (lo, hi) = bounds(i);
            assert_eq!(lo, bounds(i - 1).1 + 1, "bucket {i}");
            assert!(hi >= lo);
            assert_eq!(index(lo), i);
            assert_eq!(index(hi), i);
            assert!(
                (hi - lo) as f64 <= lo as f64 / SUB_BUCKETS as f64,
                "bucket {i}"
            );
            prev = i;
        }
        assert!(prev > 0);
        assert!(index(u64::MAX) < 2048);
        assert_eq!(bounds(index(u64::MAX)).1, u64::MAX);
    }

    #[test]
    fn quantiles_and_merge() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        for v in 1..=1000u64 {
            if v % 2 == 0 {
                a.record(v * 1000)
            } else {
                b.record(v * 1000)
            }
        }
        let mut m = a.clone();
        m.merge(&b);
        assert_eq!(m.count(), 1000);
        assert_eq!((m.min(), m.max()), (1000, 1_000_000));
        assert_eq!(m.mean(), 500_500);
        for (q, exact) in [(0.5, 500_000f64), (0.9, 900_000.0), (0.99, 990_000.0)] {
            let got = m.quantile(q) as f64;
            assert!(
                got >= exact && (got - exact) / exact <= 1.0 / 32.0,
                "q{q}: {got}"
            );
        }
        let mut one = Histogram::new();
        for _ in 0..10 {
            one.record(123_456_789);
        }
        assert_eq!(one.quantile(0.5), 123_456_789);
        assert_eq!(one.quantile(0.99), 123_456_789);
        // Growing downwards keeps the counts.
        let mut g = Histogram::new();
        g.record(1 << 30);
        g.record(5);
        g.record(1 << 20);
        assert_eq!(g.quantile(0.0), 5);
        assert_eq!(g.quantile(1.0), 1 << 30);
        assert_eq!(g.count(), 3);
    }

    /// Merging a histogram whose range lies inside this one's keeps every count (the
    /// per-thread -> overall merge of a summary does this all the time).
    #[test]
    fn merging_a_narrower_histogram_keeps_the_range() {
        let mut wide = Histogram::new();
        for v in [100, 1_000, 10_000_000] {
            wide.record(v);
        }
        let mut narrow = Histogram::new();
        for _ in 0..10 {
            narrow.record(1_000);
        }
        wide.merge(&narrow);
        assert_eq!(wide.count(), 13);
        let p50 = wide.quantile(0.5);
        assert!((1_000..=1_000 + 1_000 / 32).contains(&p50), "p50 {p50}");
        assert_eq!(wide.quantile(1.0), 10_000_000);
        let total: u64 = wide.counts.iter().sum();
        assert_eq!(total, 13);
    }
}
