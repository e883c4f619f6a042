//! The clock of `workload.arrivals.curve` (docs/clusters.md, "A rate
//! that changes over time"): unit-mean gaps (exponential, or gamma of
//! shape `burstiness`) summed to `S`, each arrival at the time the
//! curve's expected count reaches `S` (time rescaling: a Poisson process
//! of rate 1 mapped through the inverse of the rate's integral is a
//! Poisson process of the curve's rate).

use llmsim_core::time::SimTime;
use llmsim_scenario::config::curve::{Curve, RateCurve};
use rand_chacha::ChaCha8Rng;

use super::dist;

/// Where the curve's count has got to.
#[derive(Clone, Debug)]
pub struct CurveClock {
    rate: RateCurve,
    burstiness: Option<f64>,
    /// The rescaled time of the last arrival.
    s: f64,
    cursor: usize,
}

impl CurveClock {
    /// The clock of `curve` for a run of `horizon_s` (a daily wave's
    /// samples end there).
    pub fn new(curve: &Curve, horizon_s: f64) -> CurveClock {
        CurveClock { rate: RateCurve::new(curve, horizon_s), burstiness: curve.burstiness, s: 0.0, cursor: 0 }
    }

    /// The next arrival, drawing its gap from `rng`; `None` once the
    /// curve's count never reaches it (the rate ended at 0).
    pub fn next(&mut self, rng: &mut ChaCha8Rng) -> Option<SimTime> {
        let gap = match self.burstiness {
            None => dist::exponential(rng, 1.0),
            Some(b) => dist::gamma(rng, b, 1.0 / b),
        };
        self.s += gap;
        self.rate.time_at(self.s, &mut self.cursor).map(SimTime::from_secs_f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_scenario::config::curve::{Burst, Shape};

    /// Arrivals of `curve` until `end` s, counted in the windows between
    /// `edges`.
    fn counts(curve: &Curve, seed: u64, end: f64, edges: &[f64]) -> Vec<u64> {
        let mut clock = CurveClock::new(curve, end);
        let mut rng = crate::workload::stream(seed, 0);
        let mut n = vec![0u64; edges.len() - 1];
        let mut last = SimTime::ZERO;
        while let Some(at) = clock.next(&mut rng) {
            assert!(at >= last, "arrivals go forward");
            last = at;
            let t = at.as_secs_f64();
            if t >= end {
                break;
            }
            if let Some(w) = edges.windows(2).position(|w| w[0] <= t && t < w[1]) {
                n[w] += 1;
            }
        }
        n
    }

    /// 10 a second for 100 s, then 50, tripled on [150, 160): 1,000,
    /// 2,500, 1,500 and 2,000 expected in the four windows. Each count
    /// lies within 4 standard deviations (sqrt of the count for Poisson;
    /// twice the variance for gamma gaps of shape 0.5), on every seed.
    #[test]
    fn counts_in_each_window_follow_the_curve() {
        let edges = [0.0, 100.0, 150.0, 160.0, 200.0];
        let expected = [1_000.0, 2_500.0, 1_500.0, 2_000.0];
        for burstiness in [None, Some(0.5)] {
            let curve = Curve {
                shape: Shape::Steps(vec![[0.0, 10.0], [100.0, 50.0]]),
                bursts: vec![Burst { start_s: 150.0, duration_s: 10.0, factor: 3.0 }],
                burstiness,
            };
            let spread = burstiness.map_or(1.0, |b| 1.0 / b);
            for seed in 1..=4 {
                let n = counts(&curve, seed, 200.0, &edges);
                for (k, (&got, &want)) in n.iter().zip(&expected).enumerate() {
                    let sd = (want * spread).sqrt();
                    assert!(
                        (got as f64 - want).abs() < 4.0 * sd,
                        "seed {seed}, {burstiness:?}: window {k} has {got}, expected {want} +- {sd:.0}"
                    );
                }
            }
        }
    }

    /// A rate that falls to 0 ends the arrivals: a ramp from 2 a second
    /// to 0 over 100 s expects 100 arrivals in all.
    #[test]
    fn a_curve_that_ends_at_zero_ends_the_arrivals() {
        let curve = Curve { shape: Shape::Points(vec![[0.0, 2.0], [100.0, 0.0]]), bursts: vec![], burstiness: None };
        let mut totals = Vec::new();
        for seed in 1..=4 {
            let mut clock = CurveClock::new(&curve, 0.0);
            let mut rng = crate::workload::stream(seed, 0);
            let mut n = 0u64;
            while let Some(at) = clock.next(&mut rng) {
                assert!(at.as_secs_f64() <= 100.0);
                n += 1;
            }
            assert!((n as f64 - 100.0).abs() < 40.0, "seed {seed}: {n}");
            totals.push(n);
        }
        let mean = totals.iter().sum::<u64>() as f64 / totals.len() as f64;
        assert!((mean - 100.0).abs() < 20.0, "{totals:?}");
    }
}
