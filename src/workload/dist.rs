//! Random variates from a seeded ChaCha stream.
//!
//! Hand-written on top of `libm` rather than `rand_distr` so that the same
//! seed gives the same numbers on every platform: `libm` is pure Rust, while
//! std's `ln`/`exp` defer to the system's math library, whose last bits may
//! differ between machines. The algorithms are textbook: inverse CDF for the
//! exponential, Marsaglia's polar method for the normal, Marsaglia-Tsang for
//! the gamma.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::config::Length;

/// Uniform in the open interval (0, 1).
pub fn open01(rng: &mut ChaCha8Rng) -> f64 {
    loop {
        let u: f64 = rng.random();
        if u > 0.0 {
            return u;
        }
    }
}

/// Exponential with the given mean.
pub fn exponential(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    -mean * libm::log(open01(rng))
}

/// Standard normal (Marsaglia's polar method; the second variate is dropped
/// so that each call consumes a self-contained run of the stream).
pub fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    loop {
        let u = 2.0 * rng.random::<f64>() - 1.0;
        let v = 2.0 * rng.random::<f64>() - 1.0;
        let s = u * u + v * v;
        if s > 0.0 && s < 1.0 {
            return u * libm::sqrt(-2.0 * libm::log(s) / s);
        }
    }
}

/// Gamma with `shape` and `scale` (Marsaglia-Tsang; shape < 1 by boosting).
pub fn gamma(rng: &mut ChaCha8Rng, shape: f64, scale: f64) -> f64 {
    if shape < 1.0 {
        let boost = libm::pow(open01(rng), 1.0 / shape);
        return gamma(rng, shape + 1.0, scale) * boost;
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / libm::sqrt(9.0 * d);
    loop {
        let x = standard_normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = open01(rng);
        if libm::log(u) < 0.5 * x * x + d - d * v + d * libm::log(v) {
            return d * v * scale;
        }
    }
}

/// One token count from `len`, clamped to its bounds (always >= 1).
pub fn sample_length(rng: &mut ChaCha8Rng, len: &Length) -> u32 {
    let clamp = |x: f64, min: u32, max: Option<u32>| -> u32 {
        let hi = f64::from(max.unwrap_or(u32::MAX));
        libm::round(x).clamp(f64::from(min.max(1)), hi) as u32
    };
    match len {
        Length::Fixed(n) => *n,
        Length::Uniform { lo, hi } => rng.random_range(*lo..=*hi),
        Length::Normal { mean, std, min, max } => clamp(mean + std * standard_normal(rng), *min, *max),
        Length::Lognormal { mean, std, min, max } => {
            let sigma2 = libm::log(1.0 + (std * std) / (mean * mean));
            let mu = libm::log(*mean) - sigma2 / 2.0;
            let x = libm::exp(mu + libm::sqrt(sigma2) * standard_normal(rng));
            clamp(x, *min, *max)
        }
        Length::Exponential { mean, min, max } => clamp(exponential(rng, *mean), *min, *max),
        Length::Choice { values, weights } => {
            let total: f64 = weights.iter().sum();
            let mut x = rng.random::<f64>() * total;
            for (v, w) in values.iter().zip(weights) {
                if x < *w {
                    return *v;
                }
                x -= w;
            }
            values[values.len() - 1]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(7)
    }

    fn mean_and_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        (m, xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n)
    }

    #[test]
    fn exponential_has_its_mean() {
        let mut r = rng();
        let xs: Vec<f64> = (0..200_000).map(|_| exponential(&mut r, 0.05)).collect();
        let (m, v) = mean_and_var(&xs);
        assert!((m - 0.05).abs() < 0.0005, "{m}");
        assert!((v - 0.0025).abs() < 0.0001, "{v}");
    }

    #[test]
    fn gamma_has_shape_times_scale_mean_and_shape_times_scale_squared_variance() {
        for shape in [0.5, 1.0, 4.0] {
            let mut r = rng();
            let xs: Vec<f64> = (0..200_000).map(|_| gamma(&mut r, shape, 2.0)).collect();
            let (m, v) = mean_and_var(&xs);
            assert!((m - 2.0 * shape).abs() / (2.0 * shape) < 0.01, "shape {shape}: mean {m}");
            assert!((v - 4.0 * shape).abs() / (4.0 * shape) < 0.03, "shape {shape}: var {v}");
        }
    }

    #[test]
    fn lengths_respect_their_bounds_and_means() {
        let mut r = rng();
        let normal = Length::Normal { mean: 100.0, std: 300.0, min: 5, max: Some(400) };
        let xs: Vec<u32> = (0..10_000).map(|_| sample_length(&mut r, &normal)).collect();
        assert!(xs.iter().all(|&x| (5..=400).contains(&x)));
        let logn = Length::Lognormal { mean: 500.0, std: 200.0, min: 1, max: None };
        let ys: Vec<f64> = (0..100_000).map(|_| f64::from(sample_length(&mut r, &logn))).collect();
        let (m, v) = mean_and_var(&ys);
        assert!((m - 500.0).abs() < 5.0, "{m}");
        assert!((v.sqrt() - 200.0).abs() < 5.0, "{}", v.sqrt());
        let uni = Length::Uniform { lo: 3, hi: 5 };
        let zs: Vec<u32> = (0..1000).map(|_| sample_length(&mut r, &uni)).collect();
        assert!(zs.contains(&3) && zs.contains(&5) && zs.iter().all(|z| (3..=5).contains(z)));
        let choice = Length::Choice { values: vec![10, 20], weights: vec![3.0, 1.0] };
        let tens = (0..10_000).filter(|_| sample_length(&mut r, &choice) == 10).count();
        assert!((tens as f64 / 10_000.0 - 0.75).abs() < 0.02);
    }
}
