//! Saturation: the highest open-loop rate the engine sustains, judged by
//! whether its waiting queue keeps growing (see [`crate::capacity`]).

use rayon::prelude::*;
use serde::Serialize;

use super::probe::{SearchError, at_rate};
use llmsim_core::engine::{Observer, RequestId};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::Scenario;

/// A rate is sustained while the waiting queue grows, from the third to the
/// fourth quarter of the arrival window, by at most this fraction of the
/// requests that arrive in a quarter.
pub const GROWTH_LIMIT: f64 = 0.02;
/// Requests a seed in a saturation probe, unless `--requests` says otherwise.
pub const REQUESTS: u64 = 20_000;
/// The bracket grows (or shrinks) by this factor a probe.
pub const STEP: f64 = 1.25;
/// Probes the bracket may take in one direction before giving up (a factor
/// of 1.25^64 = 1.6e6 from the burst figure).
pub const MAX_BRACKET_PROBES: u32 = 64;
/// No rate above this is probed (arrivals a microsecond apart).
pub const MAX_RATE: f64 = 1e6;

/// What one seed's run shows about its waiting queue. The arrival window
/// runs from the first to the last arrival; its second half is split into
/// the third and fourth quarters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Trend {
    /// Time-averaged length of the waiting queue over the third quarter.
    pub waiting_q3: f64,
    /// The same over the fourth quarter.
    pub waiting_q4: f64,
    /// Requests that arrived in the second half.
    pub arrived: u64,
    /// Requests that finished in the second half.
    pub finished: u64,
    /// Length of the second half, in seconds.
    pub half_s: f64,
}

impl Trend {
    /// Waiting-queue growth as a fraction of a quarter's arrivals: the
    /// share of the offered load the engine did not keep up with.
    pub fn growth(&self) -> f64 {
        growth(&[*self])
    }
}

/// Pooled over seeds: total growth over total arrivals a quarter.
pub(crate) fn growth(trends: &[Trend]) -> f64 {
    let grew: f64 = trends.iter().map(|t| t.waiting_q4 - t.waiting_q3).sum();
    let quarter: f64 = trends.iter().map(|t| t.arrived as f64 / 2.0).sum();
    if quarter > 0.0 { grew / quarter } else { 0.0 }
}

/// Where a request is, for [`QueueWatch`].
#[derive(Copy, Clone, PartialEq, Eq)]
enum Place {
    Waiting,
    Running,
    Gone,
}

/// Collects the waiting queue as a client sees it: a request waits from its
/// arrival until it is first scheduled, and again from a preemption until it
/// is rescheduled. This is counted from the events' own times, so it does
/// not depend on when the driver hands arrivals to the engine.
#[derive(Default)]
pub struct QueueWatch {
    /// Arrival times, in arrival order.
    arrivals: Vec<u64>,
    finishes: Vec<u64>,
    /// Changes of the waiting queue other than arrivals: -1 when a waiting
    /// request is scheduled or rejected, +1 when a running one is preempted.
    changes: Vec<(u64, i64)>,
    place: Vec<Place>,
}

fn ns(t: SimTime) -> u64 {
    t.nanos_since(SimTime::ZERO)
}

impl QueueWatch {
    fn leave(&mut self, id: RequestId, at: SimTime, to: Place) {
        if let Some(p) = self.place.get_mut(id as usize) {
            if *p == Place::Waiting {
                self.changes.push((ns(at), -1));
            }
            *p = to;
        }
    }
}

impl Observer for QueueWatch {
    fn arrived(&mut self, id: RequestId, at: SimTime, _prompt: u32, _output: u32) {
        self.arrivals.push(ns(at));
        let i = id as usize;
        if self.place.len() <= i {
            self.place.resize(i + 1, Place::Gone);
        }
        self.place[i] = Place::Waiting;
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, _tokens: u32, _computed: u32) {
        self.leave(id, at, Place::Running);
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        if let Some(p) = self.place.get_mut(id as usize) {
            *p = Place::Waiting;
            self.changes.push((ns(at), 1));
        }
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.finishes.push(ns(at));
        self.leave(id, at, Place::Gone);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, _reason: llmsim_core::engine::RejectReason) {
        self.leave(id, at, Place::Gone);
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.leave(id, at, Place::Gone);
    }
}

impl QueueWatch {
    pub fn trend(&self) -> Trend {
        let (Some(&first), Some(&last)) = (self.arrivals.first(), self.arrivals.last()) else {
            return Trend::default();
        };
        let half = first + (last - first) / 2;
        let q3 = first + (last - first) / 4 * 3;
        let mut deltas: Vec<(u64, i64)> =
            self.arrivals.iter().map(|&t| (t, 1)).chain(self.changes.iter().copied()).collect();
        deltas.sort_by_key(|&(t, _)| t);
        let in_half = |t: &&u64| **t > half && **t <= last;
        Trend {
            waiting_q3: mean_waiting(&deltas, half, q3),
            waiting_q4: mean_waiting(&deltas, q3, last),
            arrived: self.arrivals.iter().filter(in_half).count() as u64,
            finished: self.finishes.iter().filter(in_half).count() as u64,
            half_s: (last - half) as f64 / 1e9,
        }
    }
}

/// The waiting queue, given as time-sorted changes, averaged over `[a, b)`.
fn mean_waiting(deltas: &[(u64, i64)], a: u64, b: u64) -> f64 {
    if b <= a {
        return 0.0;
    }
    // Changes before `a` only set the level; the area runs from `a` to `b`.
    let (mut level, mut at, mut area) = (0i64, a, 0.0);
    for &(t, d) in deltas.iter().take_while(|(t, _)| *t < b) {
        if t > at {
            area += (t - at) as f64 * level as f64;
            at = t;
        }
        level += d;
    }
    area += (b - at) as f64 * level as f64;
    area / (b - a) as f64
}

/// One saturation probe: the same rate on every seed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SaturationProbe {
    pub rate_rps: f64,
    /// Requests a seed.
    pub requests: u64,
    pub sustained: bool,
    /// Pooled over seeds: the growth of the waiting queue from the third to
    /// the fourth quarter of the arrival window, as a fraction of a quarter's
    /// arrivals.
    pub queue_growth: f64,
    /// The same for each seed alone, in seed order.
    pub queue_growth_by_seed: Vec<f64>,
    /// Pooled over seeds: requests finished per second over the second half
    /// of the arrival window.
    pub served_rps: f64,
    /// Mean over seeds of the mean E2E.
    #[serde(skip)]
    pub e2e_mean_ms: Option<f64>,
}

/// Runs `rate` on every seed.
pub fn probe(base: &Scenario, seeds: &[u64], rate: f64, n: u64) -> Result<SaturationProbe, SearchError> {
    let runs: Vec<(Trend, Option<f64>)> = seeds
        .par_iter()
        .map(|&seed| {
            let mut s = at_rate(base, rate, n);
            s.workload.seed = seed;
            let mut watch = QueueWatch::default();
            let out = llmsim_planner::Run::new(&s)
                .observed(&mut watch)
                .map_err(|error| SearchError::Run { rate_rps: rate, error })?;
            Ok((watch.trend(), out.result.e2e_ms.mean))
        })
        .collect::<Result<_, SearchError>>()?;
    let trends: Vec<Trend> = runs.iter().map(|r| r.0).collect();
    let g = growth(&trends);
    let half_s: f64 = trends.iter().map(|t| t.half_s).sum();
    let finished: u64 = trends.iter().map(|t| t.finished).sum();
    let e2es: Vec<f64> = runs.iter().filter_map(|r| r.1).collect();
    Ok(SaturationProbe {
        rate_rps: rate,
        requests: n,
        sustained: g <= GROWTH_LIMIT,
        queue_growth: g,
        queue_growth_by_seed: trends.iter().map(Trend::growth).collect(),
        served_rps: if half_s > 0.0 { finished as f64 / half_s } else { 0.0 },
        e2e_mean_ms: (!e2es.is_empty()).then(|| e2es.iter().sum::<f64>() / e2es.len() as f64),
    })
}

/// What the saturation search found.
#[derive(Clone, Debug, PartialEq)]
pub struct Saturation {
    /// The highest throughput served at a sustained rate (each probe's
    /// served figure capped at its offered rate).
    pub rps: f64,
    pub sustained_rate_rps: f64,
    /// The lowest rate found not sustained; `None` when every rate up to
    /// [`MAX_RATE`] was.
    pub unsustained_rate_rps: Option<f64>,
    pub probes: Vec<SaturationProbe>,
}

/// How a saturation probe is sized.
#[derive(Copy, Clone, Debug)]
pub struct Sizing {
    /// Requests a seed to start with.
    pub requests: u64,
    /// Whether a sustained probe whose arrivals span fewer than
    /// `e2e_multiple` mean E2Es is rerun longer (up to `max_requests`).
    pub extend: bool,
    pub e2e_multiple: f64,
    pub max_requests: u64,
}

/// A probe, rerun longer when it is sustained but too short to show a
/// trend against its own E2E.
fn sized_probe(
    base: &Scenario,
    seeds: &[u64],
    rate: f64,
    size: Sizing,
    log: &mut Vec<SaturationProbe>,
) -> Result<SaturationProbe, SearchError> {
    let n = size.requests;
    let p = probe(base, seeds, rate, n)?;
    let span_s = n as f64 / rate;
    let e2e_s = p.e2e_mean_ms.unwrap_or(0.0) / 1e3;
    if size.extend && p.sustained && span_s < size.e2e_multiple * e2e_s {
        let more = ((size.e2e_multiple * e2e_s * rate / 1000.0).ceil() as u64 * 1000).clamp(n, size.max_requests);
        if more > n {
            log.push(p);
            let longer = probe(base, seeds, rate, more)?;
            log.push(longer.clone());
            return Ok(longer);
        }
    }
    log.push(p.clone());
    Ok(p)
}

/// Brackets the sustained rate starting from `start` (the burst
/// throughput), growing or shrinking by [`STEP`], then bisects until the
/// bracket is within `precision` of its lower end. `None`: no rate down to
/// `start / STEP^64` is sustained.
/// A probe that stops at a run limit is an error.
pub fn find(
    base: &Scenario,
    seeds: &[u64],
    start: f64,
    precision: f64,
    size: Sizing,
) -> Result<Option<Saturation>, SearchError> {
    let mut log = Vec::new();
    let first = sized_probe(base, seeds, start.min(MAX_RATE), size, &mut log)?;
    let (mut lo, mut hi) = if first.sustained {
        let mut lo = first;
        let mut hi = None;
        for _ in 0..MAX_BRACKET_PROBES {
            let rate = lo.rate_rps * STEP;
            if rate > MAX_RATE {
                break;
            }
            let p = sized_probe(base, seeds, rate, size, &mut log)?;
            if p.sustained {
                lo = p;
            } else {
                hi = Some(p);
                break;
            }
        }
        (lo, hi)
    } else {
        let mut hi = first;
        let mut lo = None;
        for _ in 0..MAX_BRACKET_PROBES {
            let p = sized_probe(base, seeds, hi.rate_rps / STEP, size, &mut log)?;
            if p.sustained {
                lo = Some(p);
                break;
            }
            hi = p;
        }
        let Some(lo) = lo else { return Ok(None) };
        (lo, Some(hi))
    };
    while let Some(h) = hi.as_ref().filter(|h| h.rate_rps - lo.rate_rps > precision * lo.rate_rps) {
        let mid = (lo.rate_rps + h.rate_rps) / 2.0;
        if mid <= lo.rate_rps || mid >= h.rate_rps {
            break;
        }
        let p = sized_probe(base, seeds, mid, size, &mut log)?;
        if p.sustained {
            lo = p;
        } else {
            hi = Some(p);
        }
    }
    let rps = log.iter().filter(|p| p.sustained).map(|p| p.served_rps.min(p.rate_rps)).fold(0.0, f64::max);
    Ok(Some(Saturation {
        rps,
        sustained_rate_rps: lo.rate_rps,
        unsustained_rate_rps: hi.map(|h| h.rate_rps),
        probes: log,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_core::engine::RejectReason;

    fn t(ms: u64) -> SimTime {
        SimTime::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn the_waiting_queue_is_averaged_over_time_by_hand() {
        // 0 until 10 ms, 2 until 30, 1 until 40, 0 after.
        let deltas = [(10, 1), (10, 1), (30, -1), (40, -1)];
        assert_eq!(mean_waiting(&deltas, 0, 40), (20.0 * 2.0 + 10.0) / 40.0);
        assert_eq!(mean_waiting(&deltas, 20, 35), (10.0 * 2.0 + 5.0) / 15.0);
        assert_eq!(mean_waiting(&deltas, 40, 50), 0.0);
        assert_eq!(mean_waiting(&deltas, 5, 5), 0.0);
    }

    #[test]
    fn a_request_waits_from_arrival_to_scheduling_and_from_preemption_to_rescheduling() {
        let mut w = QueueWatch::default();
        w.arrived(0, t(0), 10, 5); // waits 0..4
        w.arrived(1, t(0), 10, 5); // waits 0..8, preempted at 20, back at 28
        w.arrived(2, t(2), 10, 5); // rejected from the queue at 6
        w.arrived(3, t(40), 10, 5); // over the context: rejected as it arrives
        w.scheduled(0, t(4), 10, 0);
        w.rejected(2, t(6), RejectReason::NeverFits);
        w.scheduled(1, t(8), 10, 0);
        w.scheduled(0, t(10), 1, 10); // already running: no change
        w.preempted(1, t(20));
        w.scheduled(1, t(28), 11, 0);
        w.rejected(3, t(40), RejectReason::ContextLength);
        w.finished(0, t(30));
        let mut deltas: Vec<(u64, i64)> = w.arrivals.iter().map(|&a| (a, 1)).chain(w.changes.iter().copied()).collect();
        deltas.sort_by_key(|d| d.0);
        let ms = 1_000_000;
        // Area: 4 + 8 + 4 + 8 request-ms over 40 ms.
        assert_eq!(mean_waiting(&deltas, 0, 40 * ms), 24.0 / 40.0);
        assert_eq!(mean_waiting(&deltas, 40 * ms, 50 * ms), 0.0);
        assert_eq!(w.finishes, vec![30 * ms]);
    }
}
