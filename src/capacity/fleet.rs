//! Fleet sizing by simulation: with `--target-rate R` and a scenario that
//! has a `cluster:`, the smallest replica count whose *simulated* cluster
//! (its router, every replica an engine of the scenario) meets every SLO
//! at R, on every seed.
//!
//! The search doubles the replica count from the naive estimate's lower
//! neighbour down to 1 (1, 2, 4, ...) until a count passes, then bisects
//! between the last failing and the first passing count. It assumes that
//! more replicas never hurt, which holds for every router here at a fixed
//! rate. Each probe runs the scenario's arrival process at R with the
//! probe's request count, so it sees routing imbalance and cache affinity
//! that `ceil(R / one replica's max rate)` ignores; both answers are
//! reported.

use serde::Serialize;

use super::search::{Options, Probe, SearchError, probe};
use crate::config::{Scenario, limits};

/// One replica count tried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetProbe {
    pub replicas: u32,
    #[serde(flatten)]
    pub probe: Probe,
}

/// What the fleet search found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fleet {
    pub router: String,
    pub target_rate_rps: f64,
    /// The fewest replicas that met every SLO at the target rate.
    pub replicas: u32,
    /// `replicas` x GPUs a replica (its tensor degree).
    pub gpus: u64,
    pub cost_per_hour: Option<f64>,
    /// The probe at `replicas`.
    pub at_replicas: Probe,
    /// The probes, in the order they ran.
    pub probes: Vec<FleetProbe>,
}

/// Why no fleet was found.
#[derive(Clone, Debug, PartialEq)]
pub enum FleetError {
    /// Even the most replicas allowed miss an SLO at the target rate.
    TooMany {
        replicas: u32,
        probe: Box<Probe>,
    },
    Search(SearchError),
}

impl std::fmt::Display for FleetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FleetError::TooMany { replicas, probe } => write!(
                f,
                "no fleet meets every SLO at {:.3} req/s: {replicas} replicas (the most tried) still miss {}",
                probe.rate_rps,
                probe.failed.join(", ")
            ),
            FleetError::Search(e) => e.fmt(f),
        }
    }
}

/// The scenario with `replicas` replicas (its cluster must be set).
fn with_replicas(base: &Scenario, replicas: u32) -> Scenario {
    let mut s = base.clone();
    if let Some(c) = &mut s.cluster {
        c.replicas = replicas;
    }
    s
}

/// Searches the fewest replicas of `base`'s cluster that meet every SLO at
/// `rate`, starting near `estimate` (the naive count; at least 1).
pub fn size(
    base: &Scenario,
    opts: &Options,
    seeds: &[u64],
    rate: f64,
    n: u64,
    estimate: u64,
) -> Result<Fleet, FleetError> {
    let cluster = base.cluster.as_ref().map_or("round_robin", |c| c.router.as_str()).to_string();
    let max = match limits::REPLICAS {
        limits::Range::Whole { hi, .. } => hi as u32,
        limits::Range::Real { hi, .. } => hi as u32,
    };
    let mut log = Vec::new();
    let run = |k: u32, log: &mut Vec<FleetProbe>| -> Result<Probe, FleetError> {
        let p = probe(&with_replicas(base, k), &opts.slos, seeds, rate, n).map_err(FleetError::Search)?;
        log.push(FleetProbe { replicas: k, probe: p.clone() });
        Ok(p)
    };
    // Grow from just below the estimate until a count passes.
    let mut lo = 0u32; // the largest count known to fail (0: none tried)
    let mut k = (estimate.clamp(1, u64::from(max)) as u32).saturating_sub(1).max(1);
    let (mut hi, mut best) = loop {
        let p = run(k, &mut log)?;
        if p.pass {
            break (k, p);
        }
        lo = k;
        if k >= max {
            return Err(FleetError::TooMany { replicas: k, probe: Box::new(p) });
        }
        k = k.saturating_mul(2).min(max);
    };
    // Then bisect (lo, hi]: lo fails (or is 0), hi passes.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let p = run(mid, &mut log)?;
        if p.pass {
            (hi, best) = (mid, p);
        } else {
            lo = mid;
        }
    }
    let gpus = u64::from(hi) * u64::from(base.deployment.gpus());
    Ok(Fleet {
        router: cluster,
        target_rate_rps: rate,
        replicas: hi,
        gpus,
        cost_per_hour: base.hardware.cost_per_hour.map(|c| c * gpus as f64),
        at_replicas: best,
        probes: log,
    })
}
