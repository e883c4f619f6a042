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

/// Seconds to whole nanoseconds, rounded to nearest; negative and NaN give 0.
pub fn secs_to_nanos(secs: f64) -> u64 {
    if secs.is_nan() || secs <= 0.0 { 0 } else { (secs * 1e9).round() as u64 }
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
}
