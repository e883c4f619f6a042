//! Percentiles by linear interpolation between closest ranks: numpy's
//! default, which `vllm bench serve` also uses.

use serde::{Deserialize, Serialize};

/// Percentile `q` (0-100) of an ascending slice.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    percentile_ranked(sorted.len(), q, |r| sorted[r])
}

/// Percentile `q` (0-100) of `n` values, `at(r)` giving the value of rank `r`.
fn percentile_ranked(n: usize, q: f64, at: impl Fn(usize) -> f64) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let r = q / 100.0 * (n - 1) as f64;
    let lo = r.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = r - lo as f64;
    Some(at(lo) + (at(hi) - at(lo)) * frac)
}

/// Summary of a latency in milliseconds. All fields are `null` when there
/// were no samples (no request completed, or none had two tokens).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub count: u64,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Stats {
    /// From nanosecond samples, reported in milliseconds. Only the ranks
    /// the percentiles read are put in place (`select_nth_unstable`, O(n)
    /// each), not the whole list: the same values as sorting it.
    pub fn from_nanos(mut xs: Vec<u64>) -> Stats {
        let n = xs.len();
        if n == 0 {
            return Stats { count: 0, mean: None, p50: None, p90: None, p99: None, max: None };
        }
        let sum: u128 = xs.iter().map(|&x| u128::from(x)).sum();
        // The two closest ranks of each percentile, and the last, ascending.
        let mut ranks: Vec<usize> = [50.0, 90.0, 99.0]
            .iter()
            .flat_map(|&q| {
                let lo = (q / 100.0 * (n - 1) as f64).floor() as usize;
                [lo, (lo + 1).min(n - 1)]
            })
            .chain([n - 1])
            .collect();
        ranks.sort_unstable();
        ranks.dedup();
        let mut start = 0;
        for &r in &ranks {
            // Everything before `start` is at most every value from it on.
            xs[start..].select_nth_unstable(r - start);
            start = r + 1;
        }
        let at = |r: usize| xs[r] as f64 / 1e6;
        let p = |q: f64| percentile_ranked(n, q, at);
        Stats {
            count: n as u64,
            mean: Some(sum as f64 / n as f64 / 1e6),
            p50: p(50.0),
            p90: p(90.0),
            p99: p(99.0),
            max: Some(at(n - 1)),
        }
    }

    /// From a nanosecond histogram, reported in milliseconds.
    pub fn from_histogram(h: &super::Histogram) -> Stats {
        let ms = |x: Option<f64>| x.map(|v| v / 1e6);
        Stats {
            count: h.count(),
            mean: ms(h.mean()),
            p50: ms(h.percentile(50.0)),
            p90: ms(h.percentile(90.0)),
            p99: ms(h.percentile(99.0)),
            max: ms(h.max().map(|m| m as f64)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_numpy_linear_interpolation() {
        let xs = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(percentile_sorted(&xs, 50.0), Some(3.0));
        // numpy.percentile([1,2,3,4,10], 90) == 7.6
        assert!((percentile_sorted(&xs, 90.0).unwrap() - 7.6).abs() < 1e-12);
        assert!((percentile_sorted(&xs, 99.0).unwrap() - 9.76).abs() < 1e-12);
        assert_eq!(percentile_sorted(&xs, 100.0), Some(10.0));
        assert_eq!(percentile_sorted(&[], 50.0), None);
        assert_eq!(percentile_sorted(&[4.0], 99.0), Some(4.0));
    }

    #[test]
    fn stats_from_unsorted_nanos_equal_those_of_the_sorted_list() {
        // 1..=1000 ms shuffled by a fixed stride: p50 interpolates 500.5,
        // p90 900.1, p99 990.01, by numpy's rule on the sorted list.
        let xs: Vec<u64> = (0..1000u64).map(|i| (i * 379 % 1000 + 1) * 1_000_000).collect();
        let s = Stats::from_nanos(xs);
        assert_eq!((s.count, s.max), (1000, Some(1000.0)));
        assert!((s.p50.unwrap() - 500.5).abs() < 1e-9, "{:?}", s.p50);
        assert!((s.p90.unwrap() - 900.1).abs() < 1e-9, "{:?}", s.p90);
        assert!((s.p99.unwrap() - 990.01).abs() < 1e-9, "{:?}", s.p99);
        assert_eq!(s.mean, Some(500.5));
        let one = Stats::from_nanos(vec![7_000_000]);
        assert_eq!((one.p50, one.p99, one.max), (Some(7.0), Some(7.0), Some(7.0)));
        assert_eq!(Stats::from_nanos(vec![]), Stats::default());
    }

    #[test]
    fn stats_are_in_milliseconds() {
        let s = Stats::from_nanos(vec![2_000_000, 1_000_000, 3_000_000]);
        assert_eq!((s.count, s.mean, s.p50, s.max), (3, Some(2.0), Some(2.0), Some(3.0)));
    }
}
