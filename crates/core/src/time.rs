//! Simulated time as integer nanoseconds.
//!
//! Every instant in the engine is a [`SimTime`]: nanoseconds since the start
//! of the run (offline) or since the server started (real time). Integers
//! make the timeline exact and totally ordered; same-time events are ordered
//! by request id, which is the order requests arrived in.

use std::fmt;

/// An instant on the simulated timeline, in nanoseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);

    pub const fn from_nanos(ns: u64) -> Self {
        SimTime(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Rounds to the nearest nanosecond; negative and NaN map to zero.
    pub fn from_secs_f64(secs: f64) -> Self {
        SimTime(secs_to_nanos(secs))
    }

    /// Reads decimal seconds (`12.345678901`, `1.5e3`, `+.5`) exactly,
    /// rounded to the nearest nanosecond (halves up): the inverse of
    /// [`SimTime`]'s `Display` for every instant, where going through `f64`
    /// loses nanoseconds past 2^53 ns (104 days). `None` for other
    /// spellings (negative, `inf`, `nan`, hex) and past `u64::MAX` ns.
    pub fn from_decimal_secs(text: &str) -> Option<SimTime> {
        let s = text.strip_prefix('+').unwrap_or(text);
        let (mantissa, exp) = match s.find(['e', 'E']) {
            Some(i) => (&s[..i], parse_exponent(&s[i + 1..])?),
            None => (s, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if int.len() + frac.len() == 0 || !all_digits(int) || !all_digits(frac) {
            return None;
        }
        // The digits, and where the point falls among them once the value
        // is in nanoseconds: digits before `point` are whole nanoseconds.
        let digits = int.bytes().chain(frac.bytes()).map(|b| u64::from(b - b'0'));
        let point = int.len() as i64 + exp + 9;
        let mut ns: u64 = 0;
        let mut round_up = false;
        for (i, d) in digits.enumerate() {
            let i = i as i64;
            if i >= point {
                round_up = i == point && d >= 5;
                break;
            }
            ns = ns.checked_mul(10)?.checked_add(d)?;
        }
        let pad = point - (int.len() + frac.len()) as i64;
        if ns != 0 && pad > 0 {
            ns = ns.checked_mul(10u64.checked_pow(u32::try_from(pad).ok()?)?)?;
        }
        ns.checked_add(u64::from(round_up)).map(SimTime)
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// This instant plus a duration in nanoseconds.
    pub const fn plus_nanos(self, ns: u64) -> Self {
        SimTime(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self` (zero if `earlier` is later).
    pub const fn nanos_since(self, earlier: SimTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Seconds to whole nanoseconds, rounded to nearest (halves away from
/// zero, as `f64::round`); negative and NaN give 0, and past `u64::MAX`
/// (infinity included) `u64::MAX`.
///
/// Every step's duration goes through here, so it rounds inline instead
/// of calling libm's `round`: for `0 < x < 2^53` the truncation `t` is
/// exact and so is `x - t` (at most as many significant bits as `x`), and
/// from 2^53 on `x` is a whole number and `x - t` is 0, so `t + (x - t >=
/// 0.5)` is `x.round()` exactly; from 2^64 on the cast saturates as
/// `x.round() as u64` does.
#[inline]
pub fn secs_to_nanos(secs: f64) -> u64 {
    if secs.is_nan() || secs <= 0.0 { 0 } else { round_positive(secs * 1e9) }
}

/// `x.round() as u64` for `x > 0` (see [`secs_to_nanos`]).
#[inline]
fn round_positive(x: f64) -> u64 {
    // Below 2^63 ns (292 years: every step) the signed casts are single
    // instructions; the unsigned ones are not.
    if x < 9_223_372_036_854_775_808.0 {
        let t = x as i64;
        (t + i64::from(x - t as f64 >= 0.5)) as u64
    } else {
        round_huge(x)
    }
}

#[cold]
fn round_huge(x: f64) -> u64 {
    let t = x as u64;
    if x - t as f64 >= 0.5 { t.saturating_add(1) } else { t }
}

/// A decimal exponent's digits (`-3`, `+12`), saturated far beyond any
/// that leaves a nanosecond count in range.
fn parse_exponent(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let e = digits.bytes().fold(0i64, |e, b| (e * 10 + i64::from(b - b'0')).min(1 << 40));
    Some(if negative { -e } else { e })
}

impl fmt::Display for SimTime {
    /// Seconds with nine decimals: exact, and what the trace CSV uses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_exact_seconds_with_nine_decimals() {
        assert_eq!(SimTime::from_nanos(1_500_000_001).to_string(), "1.500000001");
        assert_eq!(SimTime::ZERO.to_string(), "0.000000000");
    }

    #[test]
    fn decimal_seconds_read_back_every_displayed_instant_exactly() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        // 1.5e8 s is where f64 seconds lose nanoseconds (the trace of issue
        // 34); 1e18 ns is the simulated-time limit; u64::MAX the end.
        let mut all = vec![0, 1, 999_999_999, 150_000_000_123_456_789, 1_000_000_000_000_000_000, u64::MAX];
        all.extend((0..2000).map(|_| rng.random_range(0..=1_000_000_000_000_000_000u64)));
        for ns in all {
            let t = SimTime::from_nanos(ns);
            assert_eq!(SimTime::from_decimal_secs(&t.to_string()), Some(t), "{t}");
        }
        let lossy: f64 = "150000000.123456789".parse().unwrap();
        assert_ne!(SimTime::from_secs_f64(lossy).as_nanos(), 150_000_000_123_456_789, "f64 loses the nanoseconds");
    }

    #[test]
    fn decimal_seconds_take_every_spelling_f64_takes_and_round_half_up() {
        let ns = |s: &str| SimTime::from_decimal_secs(s).map(SimTime::as_nanos);
        assert_eq!(ns("1.5"), Some(1_500_000_000));
        assert_eq!(ns("+.5"), Some(500_000_000));
        assert_eq!(ns("2."), Some(2_000_000_000));
        assert_eq!(ns("1.5e3"), Some(1_500_000_000_000));
        assert_eq!(ns("15E-1"), Some(1_500_000_000));
        assert_eq!(ns("1e-9"), Some(1));
        assert_eq!(ns("0.0000000005"), Some(1), "half a nanosecond rounds up");
        assert_eq!(ns("0.00000000049999"), Some(0));
        assert_eq!(ns("1.0000000014999"), Some(1_000_000_001));
        assert_eq!(ns("0000000000000000000000000001"), Some(1_000_000_000), "leading zeros are not digits");
        assert_eq!(ns("0e999999999999999999999"), Some(0));
        assert_eq!(ns("1e-99999999999999999999"), Some(0));
        assert_eq!(ns("1e999999999999999999999"), None);
        assert_eq!(ns("18446744073.709551615"), Some(u64::MAX));
        assert_eq!(ns("18446744073.709551616"), None, "past u64::MAX ns");
        for bad in ["", ".", "-1", "inf", "NaN", "0x10", "1e", "1e+", "1..2", "1,5", " 1", "e5"] {
            assert_eq!(ns(bad), None, "{bad:?}");
        }
        // Where f64 is exact (below 2^53 ns), both agree.
        for s in ["0.25", "12.5", "3600.000000001", "1e3", "86400.123456789"] {
            assert_eq!(ns(s), Some(SimTime::from_secs_f64(s.parse().unwrap()).as_nanos()), "{s}");
        }
    }

    #[test]
    fn seconds_round_trip_through_display() {
        for ns in [0u64, 1, 999_999_999, 123_456_789_012, 3_600_000_000_123] {
            let t = SimTime::from_nanos(ns);
            let back: f64 = t.to_string().parse().unwrap();
            assert_eq!(SimTime::from_secs_f64(back), t);
        }
    }

    #[test]
    fn negative_and_nan_seconds_clamp_to_zero() {
        assert_eq!(secs_to_nanos(-1.0), 0);
        assert_eq!(secs_to_nanos(f64::NAN), 0);
    }

    /// `secs * 1e9` rounded by libm, written out here independently.
    fn by_libm(secs: f64) -> u64 {
        if secs.is_nan() || secs <= 0.0 { 0 } else { (secs * 1e9).round() as u64 }
    }

    #[test]
    fn nanos_round_halves_away_from_zero() {
        assert_eq!(round_positive(2.5), 3);
        assert_eq!(round_positive(0.5), 1);
        assert_eq!(round_positive(1.5), 2);
        assert_eq!(round_positive(0.499_999_999_999_999_94), 0); // the f64 just below 0.5
        assert_eq!(round_positive(2.499_999_999_999_999_6), 2);
        assert_eq!(round_positive(4_503_599_627_370_495.5), 4_503_599_627_370_496); // 2^52 - 0.5
        assert_eq!(round_positive(9_007_199_254_740_993.0), 9_007_199_254_740_992); // 2^53 + 1 is 2^53 as f64
        assert_eq!(round_positive(1.4), 1);
        assert_eq!(round_positive(9_223_372_036_854_775_808.0), 1 << 63); // 2^63, past the signed cast
        assert_eq!(round_positive(9_223_372_036_854_774_784.0), (1 << 63) - 1024); // the f64 just below 2^63
        assert_eq!(secs_to_nanos(0.004_493_333_333), 4_493_333);
        assert_eq!(secs_to_nanos(f64::INFINITY), u64::MAX);
        assert_eq!(secs_to_nanos(1e300), u64::MAX);
        assert_eq!(secs_to_nanos(f64::MIN_POSITIVE), 0);
    }

    #[test]
    fn nanos_round_as_libm_does_on_random_and_edge_values() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut xs: Vec<f64> = Vec::new();
        // Halves, their neighbours and values around the powers of two up to 2^70 ns.
        for e in 0..71 {
            let p = (2f64).powi(e);
            for x in [p - 1.0, p - 0.5, p, p + 0.5, p + 1.0] {
                for y in [x, f64::from_bits(x.to_bits() + 1), f64::from_bits(x.to_bits().saturating_sub(1))] {
                    xs.push(y / 1e9);
                }
            }
        }
        // Random bit patterns of positive finite values, and random spans of a step.
        for _ in 0..200_000 {
            let bits = rng.random_range(0..0x7ff0_0000_0000_0000u64);
            xs.push(f64::from_bits(bits));
            xs.push(rng.random_range(1e-9..100.0));
            xs.push(rng.random_range(0u64..1 << 40) as f64 / 1e9 + 0.5e-9);
        }
        for x in xs {
            assert_eq!(secs_to_nanos(x), by_libm(x), "{x:e} s");
        }
    }
}
