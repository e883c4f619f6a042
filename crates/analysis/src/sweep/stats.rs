//! How sure a number is: the mean over seeds and a 95% confidence interval
//! from Student's t distribution.
//!
//! With `n` seeds giving values `x_i`, mean `m` and sample standard deviation
//! `s` (divisor `n - 1`), the interval is `m ± t(0.975, n - 1) * s / sqrt(n)`:
//! the usual two-sided 95% interval for a mean when the spread is estimated
//! from the same few runs. It assumes the per-seed values are independent
//! and roughly normal, which holds for means and percentiles of runs long
//! enough to contain many requests.

use serde::{Deserialize, Serialize};

/// `t(0.975, df)` for `df` = 1..=30 (standard tables).
const T_975: [f64; 30] = [
    12.706_204_736,
    4.302_652_730,
    3.182_446_305,
    2.776_445_105,
    2.570_581_836,
    2.446_911_851,
    2.364_624_252,
    2.306_004_135,
    2.262_157_163,
    2.228_138_852,
    2.200_985_160,
    2.178_812_830,
    2.160_368_656,
    2.144_786_688,
    2.131_449_546,
    2.119_905_299,
    2.109_815_578,
    2.100_922_040,
    2.093_024_054,
    2.085_963_447,
    2.079_613_845,
    2.073_873_068,
    2.068_657_610,
    2.063_898_562,
    2.059_538_553,
    2.055_529_439,
    2.051_830_516,
    2.048_407_142,
    2.045_229_642,
    2.042_272_456,
];

/// The 0.975 quantile of Student's t with `df` degrees of freedom (`df >= 1`).
/// Beyond the table, the Cornish-Fisher expansion around the normal
/// quantile, accurate to better than 1e-6 there.
pub fn t_975(df: u64) -> f64 {
    if (1..=30).contains(&df) {
        return T_975[df as usize - 1];
    }
    let z: f64 = 1.959_963_984_540_054;
    let v = df.max(1) as f64;
    let (z3, z5, z7, z9) = (z.powi(3), z.powi(5), z.powi(7), z.powi(9));
    z + (z3 + z) / (4.0 * v)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v.powi(3))
        + (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / (92160.0 * v.powi(4))
}

/// A metric over seeds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Seeds that produced a value.
    pub n: usize,
    pub mean: Option<f64>,
    /// Half-width of the 95% interval: the interval is `mean ± ci95`.
    /// `None` with fewer than two values.
    pub ci95: Option<f64>,
}

impl Estimate {
    /// Of the values that exist; missing ones (no samples) are skipped.
    pub fn of(values: &[Option<f64>]) -> Estimate {
        let xs: Vec<f64> = values.iter().flatten().copied().collect();
        let n = xs.len();
        if n == 0 {
            return Estimate { n, mean: None, ci95: None };
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let ci95 = (n >= 2).then(|| {
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            t_975(n as u64 - 1) * var.sqrt() / (n as f64).sqrt()
        });
        Estimate { n, mean: Some(mean), ci95 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Student's t density.
    fn density(t: f64, v: f64) -> f64 {
        let c = libm::exp(libm::lgamma((v + 1.0) / 2.0) - libm::lgamma(v / 2.0)) / (v * std::f64::consts::PI).sqrt();
        c * (1.0 + t * t / v).powf(-(v + 1.0) / 2.0)
    }

    /// P(0 <= T <= x) by Simpson's rule.
    fn mass(x: f64, v: f64) -> f64 {
        let n = 20_000;
        let h = x / n as f64;
        let f = |i: usize| density(i as f64 * h, v);
        let inner: f64 = (1..n).map(|i| if i % 2 == 1 { 4.0 * f(i) } else { 2.0 * f(i) }).sum();
        h / 3.0 * (f(0) + inner + f(n))
    }

    #[test]
    fn the_table_and_the_expansion_are_the_975_quantile() {
        for df in [1, 2, 3, 5, 10, 17, 29, 30, 31, 45, 100, 1000] {
            let m = mass(t_975(df), df as f64);
            assert!((m - 0.475).abs() < 2e-6, "df {df}: mass {m}");
        }
    }

    #[test]
    fn the_interval_of_known_values() {
        // 1, 2, 3: mean 2, s = 1, t(0.975, 2) = 4.3027 -> 4.3027 / sqrt(3).
        let s = Estimate::of(&[Some(1.0), Some(2.0), Some(3.0)]);
        assert_eq!(s.mean, Some(2.0));
        assert!((s.ci95.unwrap() - 4.302_652_730 / 3f64.sqrt()).abs() < 1e-12);
        assert_eq!(Estimate::of(&[Some(5.0)]), Estimate { n: 1, mean: Some(5.0), ci95: None });
        assert_eq!(Estimate::of(&[None, None]), Estimate { n: 0, mean: None, ci95: None });
        let same = Estimate::of(&[Some(4.0), None, Some(4.0)]);
        assert_eq!((same.n, same.ci95), (2, Some(0.0)));
    }
}
