//! Percentiles by linear interpolation between closest ranks: numpy's
//! default, which `vllm bench serve` also uses.

use serde::{Deserialize, Serialize};

/// Percentile `q` (0-100) of an ascending slice.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let r = q / 100.0 * (n - 1) as f64;
    let lo = r.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    let frac = r - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
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
    /// From nanosecond samples, reported in milliseconds.
    pub fn from_nanos(mut xs: Vec<u64>) -> Stats {
        xs.sort_unstable();
        let ms: Vec<f64> = xs.iter().map(|&x| x as f64 / 1e6).collect();
        let sum: u128 = xs.iter().map(|&x| u128::from(x)).sum();
        Stats {
            count: ms.len() as u64,
            mean: (!xs.is_empty()).then(|| sum as f64 / xs.len() as f64 / 1e6),
            p50: percentile_sorted(&ms, 50.0),
            p90: percentile_sorted(&ms, 90.0),
            p99: percentile_sorted(&ms, 99.0),
            max: ms.last().copied(),
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
    fn stats_are_in_milliseconds() {
        let s = Stats::from_nanos(vec![2_000_000, 1_000_000, 3_000_000]);
        assert_eq!((s.count, s.mean, s.p50, s.max), (3, Some(2.0), Some(2.0), Some(3.0)));
    }
}
