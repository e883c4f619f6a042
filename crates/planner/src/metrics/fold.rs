//! What the summary keeps of a request once it has ended, so that a run's
//! memory does not grow with its requests (docs/results.md, "Memory").
//!
//! A request's record is folded in when it finishes, is rejected or is
//! aborted: counts and token totals, the first arrival and the last token,
//! and its TTFT, E2E, queue time and TPOT as samples. A latency keeps its
//! samples one by one, and its percentiles are exact, up to
//! [`EXACT_SAMPLES`] completed requests; past that it moves them into a
//! [`Histogram`] (relative error of a percentile below 0.1%, which
//! docs/engine.md section 5 allows where memory demands it; count, mean
//! and max stay exact), so memory stays flat however many requests a run
//! has.

use super::percentile::{Stats, percentile_sorted};
use super::{Histogram, RejectReason, RequestRecord, Status};
use llmsim_core::time::SimTime;

/// Samples a latency keeps one by one before it moves to a histogram:
/// 2 MiB a latency. Every shipped result has far fewer completed requests
/// (20,000 at most), so their percentiles are exact.
pub const EXACT_SAMPLES: usize = 1 << 18;

/// Nanosecond samples of one latency: exact up to [`EXACT_SAMPLES`], then
/// a histogram.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    exact: Vec<u64>,
    hist: Option<Histogram>,
}

impl Samples {
    pub fn push(&mut self, v: u64) {
        // Moved to the histogram before the vector would grow past
        // EXACT_SAMPLES (a push there doubles it: 4 MiB a latency for a
        // moment, and memory the allocator holds on to).
        if self.hist.is_none() && self.exact.len() == EXACT_SAMPLES {
            let mut h = Histogram::new();
            self.exact.iter().for_each(|&x| h.record(x));
            self.exact = Vec::new();
            self.hist = Some(h);
        }
        match &mut self.hist {
            Some(h) => h.record(v),
            None => self.exact.push(v),
        }
    }

    /// The summary in milliseconds ([`Stats::from_nanos`] while exact).
    pub fn stats(&self) -> Stats {
        match &self.hist {
            Some(h) => Stats::from_histogram(h),
            None => Stats::from_nanos(self.exact.clone()),
        }
    }
}

/// TPOT samples in milliseconds: exact up to [`EXACT_SAMPLES`], then a
/// histogram of the nanosecond values rounded to the nearest nanosecond
/// (for percentiles only: the mean stays the exact mean of the
/// milliseconds).
#[derive(Clone, Debug, Default)]
pub struct MsSamples {
    exact: Vec<f64>,
    hist: Option<Histogram>,
    /// Sum of the millisecond values once in the histogram, in units of
    /// 2^-[`SUM_FRACTION_BITS`] ms: an integer sum is the same in any
    /// order (a cluster's replicas finish requests in a different order
    /// with decode stretches than step by step, docs/clusters.md "Speed");
    /// each value is truncated to a multiple of 2^-56 ms (1.4e-17 ms), far
    /// below the rounding of an f64 sum.
    sum: i128,
    max: f64,
}

/// Fraction bits of [`MsSamples`]'s fixed-point sum: values below 2^40
/// ms, 2^30 of them, still fit an `i128`.
const SUM_FRACTION_BITS: i32 = 56;

/// `ms` in units of 2^-[`SUM_FRACTION_BITS`] ms (truncated below that).
fn fixed(ms: f64) -> i128 {
    (ms * 2f64.powi(SUM_FRACTION_BITS)) as i128
}

impl MsSamples {
    pub fn push(&mut self, ms: f64) {
        // As [`Samples::push`]: to the histogram before the vector doubles.
        if self.hist.is_none() && self.exact.len() == EXACT_SAMPLES {
            let mut h = Histogram::new();
            for &x in &self.exact {
                h.record((x * 1e6).round() as u64);
                self.sum += fixed(x);
                self.max = self.max.max(x);
            }
            self.exact = Vec::new();
            self.hist = Some(h);
        }
        let Some(h) = &mut self.hist else {
            self.exact.push(ms);
            return;
        };
        h.record((ms * 1e6).round() as u64);
        self.sum += fixed(ms);
        self.max = self.max.max(ms);
    }

    pub fn stats(&self) -> Stats {
        let Some(h) = &self.hist else {
            let mut xs = self.exact.clone();
            // Values equal by `total_cmp` have equal bits: an unstable sort
            // gives the same list as a stable one.
            xs.sort_unstable_by(f64::total_cmp);
            return stats_ms(&xs);
        };
        let ms = |x: Option<f64>| x.map(|v| v / 1e6);
        Stats {
            count: h.count(),
            mean: Some(self.sum as f64 / 2f64.powi(SUM_FRACTION_BITS) / h.count() as f64),
            p50: ms(h.percentile(50.0)),
            p90: ms(h.percentile(90.0)),
            p99: ms(h.percentile(99.0)),
            max: Some(self.max),
        }
    }
}

/// Stats of ascending millisecond values.
pub fn stats_ms(sorted: &[f64]) -> Stats {
    Stats {
        count: sorted.len() as u64,
        mean: (!sorted.is_empty()).then(|| sorted.iter().sum::<f64>() / sorted.len() as f64),
        p50: percentile_sorted(sorted, 50.0),
        p90: percentile_sorted(sorted, 90.0),
        p99: percentile_sorted(sorted, 99.0),
        max: sorted.last().copied(),
    }
}

/// The run-wide figures of every request folded in so far.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub completed: u64,
    pub rejected_ctx: u64,
    pub rejected_kv: u64,
    pub aborted: u64,
    /// Prompt and output tokens of completed requests.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub first_arrival: Option<SimTime>,
    pub last_token: Option<SimTime>,
    pub ttft: Samples,
    pub e2e: Samples,
    pub queue: Samples,
    pub tpot: MsSamples,
}

impl Totals {
    /// Every request's arrival and last token, ended or not.
    pub fn see_times(&mut self, r: &RequestRecord) {
        self.first_arrival = Some(self.first_arrival.map_or(r.arrival, |a| a.min(r.arrival)));
        if let Some(t) = r.last_token {
            self.last_token = Some(self.last_token.map_or(t, |l| l.max(t)));
        }
    }

    /// Folds in a request that has ended (its status is final).
    pub fn fold(&mut self, r: &RequestRecord) {
        self.see_times(r);
        match r.status {
            Status::Finished => {
                self.completed += 1;
                self.input_tokens += u64::from(r.prompt);
                self.output_tokens += u64::from(r.tokens);
                if let Some(x) = r.ttft_ns() {
                    self.ttft.push(x);
                }
                if let Some(x) = r.e2e_ns() {
                    self.e2e.push(x);
                }
                if let Some(x) = r.queue_ns() {
                    self.queue.push(x);
                }
                if let Some(x) = r.tpot_ns() {
                    self.tpot.push(x / 1e6);
                }
            }
            Status::Rejected(RejectReason::ContextLength) => self.rejected_ctx += 1,
            Status::Rejected(RejectReason::NeverFits) => self.rejected_kv += 1,
            Status::Aborted => self.aborted += 1,
            Status::InFlight => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn samples_are_exact_up_to_the_cap_then_within_a_tenth_of_a_percent() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let xs: Vec<u64> = (0..EXACT_SAMPLES + 50_000).map(|_| rng.random_range(1_000..900_000_000u64)).collect();
        let mut s = Samples::default();
        xs[..EXACT_SAMPLES].iter().for_each(|&x| s.push(x));
        assert_eq!(s.stats(), Stats::from_nanos(xs[..EXACT_SAMPLES].to_vec()), "exact below the cap");
        xs[EXACT_SAMPLES..].iter().for_each(|&x| s.push(x));
        assert!(s.hist.is_some() && s.exact.is_empty(), "moved to the histogram");
        let (got, want) = (s.stats(), Stats::from_nanos(xs.clone()));
        assert_eq!((got.count, got.max), (want.count, want.max));
        // The mean: the same exact sum divided the same way.
        assert_eq!(got.mean, want.mean);
        for (g, w) in [(got.p50, want.p50), (got.p90, want.p90), (got.p99, want.p99)] {
            let (g, w) = (g.unwrap(), w.unwrap());
            assert!((g - w).abs() / w < 0.001, "{g} vs {w}");
        }
    }

    #[test]
    fn tpot_samples_keep_their_mean_and_max_past_the_cap() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        let xs: Vec<f64> = (0..EXACT_SAMPLES + 10_000).map(|_| rng.random_range(1.0..80.0f64)).collect();
        let mut s = MsSamples::default();
        xs.iter().for_each(|&x| s.push(x));
        let mut sorted = xs.clone();
        sorted.sort_by(f64::total_cmp);
        let (got, want) = (s.stats(), stats_ms(&sorted));
        assert_eq!((got.count, got.max), (want.count, want.max));
        let (gm, wm) = (got.mean.unwrap(), want.mean.unwrap());
        assert!((gm - wm).abs() / wm < 1e-9, "{gm} vs {wm}");
        // The same samples in another order give the same mean, to the bit.
        let mut reversed = MsSamples::default();
        xs.iter().rev().for_each(|&x| reversed.push(x));
        assert_eq!(reversed.stats().mean, got.mean, "the mean does not depend on the order");
        for (g, w) in [(got.p50, want.p50), (got.p90, want.p90), (got.p99, want.p99)] {
            let (g, w) = (g.unwrap(), w.unwrap());
            assert!((g - w).abs() / w < 0.001, "{g} vs {w}");
        }
    }
}
