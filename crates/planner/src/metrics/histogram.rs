//! A log-bucketed histogram of nanosecond values for per-token samples,
//! whose count grows with every token and must not be stored one by one.
//!
//! Values below 2,048 ns have a bucket each; above, every power of two is
//! split into 1,024 buckets, so a bucket is at most 1/1024 (0.098%) of its
//! values wide. A bucket keeps its count and exact sum and reports its mean,
//! so the error of any percentile is below 0.1%, and zero when a bucket
//! holds one distinct value (the usual case: a step's tokens share a gap).
//! Mean, min and max are exact.

const SUB_BITS: u32 = 10;
const EXACT: u64 = 1 << (SUB_BITS + 1);

#[derive(Clone, Debug, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    sums: Vec<u128>,
    n: u64,
    sum: u128,
    min: u64,
    max: u64,
}

/// The bucket of `v` (for [`Histogram::record_at`], when one value goes to several histograms).
#[inline]
pub fn index(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let shift = e - SUB_BITS;
    let sub = (v >> shift) - (1 << SUB_BITS);
    (EXACT + u64::from(e - SUB_BITS - 1) * (1 << SUB_BITS) + sub) as usize
}

impl Histogram {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&mut self, v: u64) {
        self.record_n(v, 1);
    }

    /// Records `v` `n` times: the same as `n` calls of [`Histogram::record`].
    pub fn record_n(&mut self, v: u64, n: u64) {
        self.record_at(index(v), v, n);
    }

    /// [`Histogram::record_n`] with `i` = `index(v)`, computed once by the caller.
    #[inline]
    pub fn record_at(&mut self, i: usize, v: u64, n: u64) {
        debug_assert_eq!(i, index(v));
        self.record_bucket(i, n, u128::from(v) * u128::from(n), v, v);
    }

    /// Records `n` values adding up to `sum`, between `min` and `max`,
    /// all in the bucket of `min` (see [`Run`]): the same as recording
    /// them one by one.
    #[inline]
    fn record_bucket(&mut self, i: usize, n: u64, sum: u128, min: u64, max: u64) {
        if n == 0 {
            return;
        }
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
            self.sums.resize(i + 1, 0);
        }
        self.counts[i] += n;
        self.sums[i] += sum;
        self.min = if self.n == 0 { min } else { self.min.min(min) };
        self.max = self.max.max(max);
        self.n += n;
        self.sum += sum;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum as f64 / self.n as f64)
    }

    pub fn max(&self) -> Option<u64> {
        (self.n > 0).then_some(self.max)
    }

    pub fn min(&self) -> Option<u64> {
        (self.n > 0).then_some(self.min)
    }

    /// The value of the `rank`-th smallest sample (0-based), as its bucket's mean.
    fn value_at(&self, rank: u64) -> f64 {
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                return self.sums[i] as f64 / c as f64;
            }
        }
        self.max as f64
    }

    /// Percentile `q` (0-100) by linear interpolation between closest ranks.
    pub fn percentile(&self, q: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let r = q / 100.0 * (self.n - 1) as f64;
        let lo = r.floor() as u64;
        let frac = r - lo as f64;
        let a = self.value_at(lo);
        if frac == 0.0 {
            return Some(a);
        }
        let b = self.value_at(lo + 1);
        Some(a + (b - a) * frac)
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &Histogram) {
        if other.n == 0 {
            return;
        }
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
            self.sums.resize(other.counts.len(), 0);
        }
        for (i, (&c, &s)) in other.counts.iter().zip(&other.sums).enumerate() {
            self.counts[i] += c;
            self.sums[i] += s;
        }
        self.min = if self.n == 0 { other.min } else { self.min.min(other.min) };
        self.max = self.max.max(other.max);
        self.n += other.n;
        self.sum += other.sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::percentile::percentile_sorted;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn buckets_are_contiguous_and_narrow() {
        let mut last = index(EXACT - 1);
        for v in EXACT..EXACT * 64 {
            let i = index(v);
            assert!(i == last || i == last + 1, "gap at {v}");
            last = i;
        }
        for v in [EXACT, 1 << 20, (1 << 40) + 12345, u64::MAX / 3] {
            let i = index(v);
            let lo = (0..=v).rev().take(1 << 22).take_while(|&x| index(x) == i).last().unwrap();
            assert!(((v - lo) as f64) / (v as f64) < 1.0 / 1024.0 + 1e-12);
        }
    }

    #[test]
    fn percentiles_are_within_a_tenth_of_a_percent_of_exact() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut xs: Vec<u64> = (0..50_000).map(|_| rng.random_range(1_000..200_000_000u64)).collect();
        let mut h = Histogram::new();
        xs.iter().for_each(|&x| h.record(x));
        xs.sort_unstable();
        let exact: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        for q in [0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            let want = percentile_sorted(&exact, q).unwrap();
            let got = h.percentile(q).unwrap();
            assert!((got - want).abs() / want < 0.001, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.max(), Some(*xs.last().unwrap()));
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64;
        assert!((h.mean().unwrap() - mean).abs() < 1e-6 * mean);
    }

    #[test]
    fn repeated_values_come_back_exactly() {
        let mut h = Histogram::new();
        for _ in 0..3 {
            h.record(4_493_333);
        }
        h.record(25_250_000);
        assert_eq!(h.percentile(50.0), Some(4_493_333.0));
        assert_eq!(h.percentile(100.0), Some(25_250_000.0));
        // numpy: p90 of [a, a, a, b] = a + 0.7 * (b - a)
        let want = 4_493_333.0 + 0.7 * (25_250_000.0 - 4_493_333.0);
        assert!((h.percentile(90.0).unwrap() - want).abs() < 1e-6);
    }

    #[test]
    fn recording_n_times_at_once_equals_recording_one_by_one() {
        let (mut once, mut each) = (Histogram::new(), Histogram::new());
        for (v, n) in [(7u64, 3u64), (4_493_333, 0), (4_493_333, 5), (3, 1), (90_000_000, 2)] {
            once.record_n(v, n);
            (0..n).for_each(|_| each.record(v));
        }
        assert_eq!((once.count(), once.min(), once.max(), once.mean()), (11, Some(3), Some(90_000_000), each.mean()));
        assert_eq!((once.counts, once.sums), (each.counts, each.sums));
    }

    #[test]
    fn merging_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
        for v in [5u64, 3_000, 7_000_000, 9] {
            a.record(v);
            all.record(v);
        }
        for v in [11u64, 80_000_000] {
            b.record(v);
            all.record(v);
        }
        a.merge(&b);
        for q in [0.0, 50.0, 99.0] {
            assert_eq!(a.percentile(q), all.percentile(q));
        }
        assert_eq!((a.count(), a.min(), a.max()), (all.count(), all.min(), all.max()));
    }
}

/// Values on their way into a [`Histogram`], gathered while they fall in
/// one bucket (a decode batch's step durations grow by a few nanoseconds a
/// step, so thousands in a row share a bucket): the histogram they reach
/// is the same as if each were recorded at once, since a bucket keeps a
/// count and a sum and the histogram a count, a sum, a minimum and a maximum.
#[derive(Clone, Debug, Default)]
pub struct Run {
    bucket: usize,
    n: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Run {
    /// `v`, `n` times, into `h` (now or later).
    #[inline]
    pub fn add(&mut self, h: &mut Histogram, v: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = index(v);
        if i != self.bucket || self.n == 0 {
            self.flush(h);
            *self = Run { bucket: i, n: 0, sum: 0, min: v, max: v };
        }
        self.n += n;
        self.sum += u128::from(v) * u128::from(n);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Everything gathered goes into `h`.
    #[inline]
    pub fn flush(&mut self, h: &mut Histogram) {
        h.record_bucket(self.bucket, self.n, self.sum, self.min, self.max);
        self.n = 0;
    }

    /// `h` with what is gathered.
    pub fn with<'a>(&self, h: &'a Histogram) -> std::borrow::Cow<'a, Histogram> {
        match self.n {
            0 => std::borrow::Cow::Borrowed(h),
            _ => {
                let mut h = h.clone();
                h.record_bucket(self.bucket, self.n, self.sum, self.min, self.max);
                std::borrow::Cow::Owned(h)
            }
        }
    }
}
