//! Random variates from a seeded ChaCha stream.
//!
//! Hand-written on top of `libm` rather than `rand_distr` so that the same
//! seed gives the same numbers on every platform: `libm` is pure Rust, while
//! std's `ln`/`exp` defer to the system's math library, whose last bits may
//! differ between machines. The algorithms are textbook: inverse CDF for the
//! exponential, Marsaglia's polar method for the normal, Marsaglia-Tsang for
//! the gamma.
//!
//! The conversions from the generator's raw words to numbers are written
//! here too ([`fn@unit`], [`uniform_u32`]) rather than taken from `rand`, so
//! that a `rand` upgrade cannot change a single output byte: the only thing
//! used from the rand crates is the ChaCha8 keystream itself (`next_u32`,
//! `next_u64`), whose words a test recomputes from the ChaCha definition.
//! Both conversions reproduce, bit for bit, what rand 0.10 computed, so
//! results made before they were written here did not move.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use llmsim_scenario::config::Length;

/// 2^-53: one unit in the last place of a number in [0.5, 1).
const TWO_POW_MINUS_53: f64 = 1.0 / 9_007_199_254_740_992.0;

/// Uniform in [0, 1): the top 53 bits of one 64-bit draw times 2^-53, so
/// every value is a multiple of 2^-53 (rand 0.10's `random::<f64>()`).
pub fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * TWO_POW_MINUS_53
}

/// Uniform over `lo..=hi` (`lo <= hi`) by the widening multiply: the high
/// half of a 32-bit draw times the range, with a second draw when the low
/// half is in the biased zone (rand 0.10's `random_range(lo..=hi)`, its
/// default, not the `unbiased` feature).
pub fn uniform_u32(rng: &mut ChaCha8Rng, lo: u32, hi: u32) -> u32 {
    let range = hi.wrapping_sub(lo).wrapping_add(1);
    if range == 0 {
        return rng.next_u32();
    }
    let wide = u64::from(rng.next_u32()) * u64::from(range);
    let (mut result, low) = ((wide >> 32) as u32, wide as u32);
    if low > range.wrapping_neg() {
        let next_high = ((u64::from(rng.next_u32()) * u64::from(range)) >> 32) as u32;
        if low.checked_add(next_high).is_none() {
            result += 1;
        }
    }
    lo.wrapping_add(result)
}

/// Uniform in the open interval (0, 1).
pub fn open01(rng: &mut ChaCha8Rng) -> f64 {
    loop {
        let u = unit(rng);
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
        let u = 2.0 * unit(rng) - 1.0;
        let v = 2.0 * unit(rng) - 1.0;
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

/// One token count from `len`, clamped to its bounds; always at least 1,
/// in release builds too.
pub fn sample_length(rng: &mut ChaCha8Rng, len: &Length) -> u32 {
    draw_length(rng, len).max(1)
}

/// Rounds and clamps a real sample to `[max(min, 1), max]`. Validation
/// keeps the parameters finite, so `x` is a number; should it ever be NaN
/// it becomes the lower bound, never `NaN as u32` = 0.
fn clamp_length(x: f64, min: u32, max: Option<u32>) -> u32 {
    let lo = f64::from(min.max(1));
    let hi = f64::from(max.unwrap_or(u32::MAX)).max(lo);
    if x.is_nan() { lo as u32 } else { libm::round(x).clamp(lo, hi) as u32 }
}

fn draw_length(rng: &mut ChaCha8Rng, len: &Length) -> u32 {
    let clamp = clamp_length;
    match len {
        Length::Fixed(n) => *n,
        Length::Uniform { lo, hi } => uniform_u32(rng, *lo, *hi),
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
            let mut x = unit(rng) * total;
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

    /// The ChaCha8 keystream of `seed_from_u64(seed)` with `set_stream(k)`,
    /// recomputed from the definitions: rand_core's PCG32 expansion of the
    /// seed into the 256-bit key, then ChaCha with 4 double rounds, a
    /// 64-bit block counter from 0 (state words 12, 13) and the stream as
    /// the 64-bit nonce (words 14, 15), each block's 16 words in order.
    fn keystream(seed: u64, k: u64, words: usize) -> Vec<u32> {
        let mut state = seed;
        let key: Vec<u32> = (0..8)
            .map(|_| {
                state = state.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(0xA176_54E4_6FBE_17F3);
                let xorshifted = (((state >> 18) ^ state) >> 27) as u32;
                xorshifted.rotate_right((state >> 59) as u32)
            })
            .collect();
        let mut out = Vec::new();
        for block in 0u64.. {
            if out.len() >= words {
                break;
            }
            let mut s = [0u32; 16];
            s[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
            s[4..12].copy_from_slice(&key);
            s[12..].copy_from_slice(&[block as u32, (block >> 32) as u32, k as u32, (k >> 32) as u32]);
            let mut x = s;
            let qr = |x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize| {
                x[a] = x[a].wrapping_add(x[b]);
                x[d] = (x[d] ^ x[a]).rotate_left(16);
                x[c] = x[c].wrapping_add(x[d]);
                x[b] = (x[b] ^ x[c]).rotate_left(12);
                x[a] = x[a].wrapping_add(x[b]);
                x[d] = (x[d] ^ x[a]).rotate_left(8);
                x[c] = x[c].wrapping_add(x[d]);
                x[b] = (x[b] ^ x[c]).rotate_left(7);
            };
            for _ in 0..4 {
                for (a, b, c, d) in [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)] {
                    qr(&mut x, a, b, c, d);
                }
                for (a, b, c, d) in [(0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)] {
                    qr(&mut x, a, b, c, d);
                }
            }
            out.extend(x.iter().zip(&s).map(|(a, b)| a.wrapping_add(*b)));
        }
        out.truncate(words);
        out
    }

    #[test]
    fn the_generator_is_the_chacha8_keystream_of_the_definition() {
        // Seed 42's prompt-length stream, across the 64-word buffer edge.
        let words = keystream(42, 1, 200);
        let mut rng = crate::workload::stream(42, 1);
        let got: Vec<u32> = (0..200).map(|_| rng.next_u32()).collect();
        assert_eq!(got, words);
        // Two words make a u64, low word first.
        let mut rng = crate::workload::stream(42, 1);
        assert_eq!(rng.next_u64(), u64::from(words[0]) | (u64::from(words[1]) << 32));
    }

    #[test]
    fn unit_and_uniform_are_pinned_to_the_raw_words() {
        let w = keystream(7, 0, 8);
        let mut rng = crate::workload::stream(7, 0);
        // unit: the top 53 bits of (w1 << 32 | w0), times 2^-53.
        let raw = (u64::from(w[1]) << 32) | u64::from(w[0]);
        let want = (raw >> 11) as f64 / 9_007_199_254_740_992.0;
        assert_eq!(unit(&mut rng), want);
        // uniform 1..=6 from w2: high half of w2 * 6, unless the low half
        // lands in the top 4 values of 2^32 (then w3 decides a carry).
        let wide = u64::from(w[2]) * 6;
        assert!(wide as u32 <= 6u32.wrapping_neg(), "this seed needs no second draw");
        assert_eq!(uniform_u32(&mut rng, 1, 6), 1 + (wide >> 32) as u32);
        // Pinned numbers, so a change in the keystream itself shows too.
        assert_eq!(&w[..4], &[0x23d7_43bb, 0x2865_5334, 0x2e9b_293a, 0x2b01_59d3][..]);
    }

    #[test]
    fn own_conversions_match_what_rand_0_10_computed() {
        use rand::RngExt;
        let mut ours = rng();
        let mut theirs = rng();
        for i in 0..200_000u32 {
            assert_eq!(unit(&mut ours).to_bits(), theirs.random::<f64>().to_bits(), "draw {i}");
            let (lo, hi) = (i % 7, i % 7 + [0, 1, 5, 999, 1 << 31, u32::MAX - 7][(i % 6) as usize]);
            assert_eq!(uniform_u32(&mut ours, lo, hi), theirs.random_range(lo..=hi), "draw {i}");
        }
    }

    #[test]
    fn absurd_moments_never_give_a_zero_or_nan_length() {
        let mut r = rng();
        for len in [
            Length::Lognormal { mean: 1e300, std: 1e300, min: 1, max: None },
            Length::Lognormal { mean: 1.0, std: 4e9, min: 3, max: Some(10) },
            Length::Normal { mean: 1.0, std: 1e300, min: 1, max: None },
            Length::Exponential { mean: 1e300, min: 1, max: None },
        ] {
            for _ in 0..1000 {
                let x = sample_length(&mut r, &len);
                assert!(x >= 1, "{len:?} gave {x}");
            }
        }
        assert_eq!(clamp_length(f64::NAN, 0, None), 1);
        assert_eq!(clamp_length(f64::NAN, 5, Some(9)), 5);
        assert_eq!(clamp_length(f64::INFINITY, 1, Some(9)), 9);
        assert_eq!(clamp_length(f64::NEG_INFINITY, 2, None), 2);
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
