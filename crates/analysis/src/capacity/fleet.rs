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
//!
//! With prefill/decode pools ([`split`]), `--target-rate R --gpus N`
//! tries every prefill:decode split of `N` GPUs at R instead.
//!
//! A fleet probe is sized to the fleet: the single engine's probe size
//! (the capacity rule) for every replica, up to the search's most, so each
//! replica sees as many requests as one engine's probe does and the
//! arrivals span as long. A count passes only when every SLO holds *and*
//! the rate is sustained: the waiting queue, over every replica, grows by
//! at most [`saturation::GROWTH_LIMIT`] of a quarter's arrivals from the third to the
//! fourth quarter of the arrival window (the saturation test). Without
//! it, a probe too short to build a queue passed fleets far too small.

use serde::Serialize;

use super::probe::{MAX_REQUESTS, Options, Probe, SearchError, combine, probe_seed_observed};
use super::saturation;
use llmsim_scenario::config::{Scenario, limits};
use rayon::prelude::*;

/// What `fleet_probe` failed on besides the SLOs.
pub const NOT_SUSTAINED: &str = "sustained rate (the waiting queue grows)";

/// A probe of a fleet of `replicas` replicas (`s` has them) at `rate`:
/// `n` requests a replica, up to [`MAX_REQUESTS`]; when every SLO holds,
/// the queue test too (see the module docs). Returns the probe (its
/// `pass` false and [`NOT_SUSTAINED`] among `failed` when the queue grows)
/// and the queue growth (`None` when the SLOs already failed).
fn fleet_probe(
    s: &Scenario,
    opts: &Options,
    seeds: &[u64],
    rate: f64,
    n: u64,
    replicas: u32,
) -> Result<(Probe, Option<f64>), SearchError> {
    let n = n.saturating_mul(u64::from(replicas)).clamp(n, MAX_REQUESTS.max(n));
    // One run a seed feeds both tests: the SLOs ([`probe`]'s figures) and
    // the queue ([`saturation::probe`]'s), the same runs each would make.
    let runs: Vec<(Probe, saturation::Trend)> = seeds
        .par_iter()
        .map(|&seed| {
            let mut one = s.clone();
            one.workload.seed = seed;
            let mut watch = saturation::QueueWatch::default();
            let (p, _) = probe_seed_observed(&one, &opts.slos, rate, n, &mut watch, opts.early_stop)?;
            Ok((p, watch.trend()))
        })
        .collect::<Result<_, SearchError>>()?;
    let probes: Vec<Probe> = runs.iter().map(|r| r.0.clone()).collect();
    let mut p = combine(&opts.slos, rate, n, &probes);
    if !p.pass {
        return Ok((p, None));
    }
    let trends: Vec<saturation::Trend> = runs.iter().map(|r| r.1).collect();
    let growth = saturation::growth(&trends);
    if growth > saturation::GROWTH_LIMIT {
        p.pass = false;
        p.seeds_met = 0;
        p.failed.push(NOT_SUSTAINED.into());
    }
    Ok((p, Some(growth)))
}

/// One replica count tried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetProbe {
    pub replicas: u32,
    /// The waiting queue's growth over the probe (see the module docs);
    /// `None` when an SLO already failed.
    pub queue_growth: Option<f64>,
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
    /// The naive estimate alone (the target rate over one replica's max
    /// rate) is past the most replicas a cluster may have: not simulated,
    /// since two probes of that fleet at the largest probe size take
    /// minutes and the search could try no count above the limit anyway.
    OverLimit {
        rate: f64,
        estimate: u64,
        max: u32,
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
            FleetError::OverLimit { rate, estimate, max } => write!(
                f,
                "no fleet meets every SLO at {rate:.3} req/s: at one replica's max rate it needs {estimate} \
                 replicas, more than a cluster may have ({max}; cluster.replicas); the fleet search was not run"
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
    if estimate > u64::from(max) {
        return Err(FleetError::OverLimit { rate, estimate, max });
    }
    let mut log = Vec::new();
    let run = |k: u32, log: &mut Vec<FleetProbe>| -> Result<Probe, FleetError> {
        let (p, queue_growth) =
            fleet_probe(&with_replicas(base, k), opts, seeds, rate, n, k).map_err(FleetError::Search)?;
        log.push(FleetProbe { replicas: k, queue_growth, probe: p.clone() });
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

/// One prefill:decode split tried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitProbe {
    pub prefill_replicas: u32,
    pub decode_replicas: u32,
    pub gpus: u32,
    /// The largest SLO value over its bound, over the SLOs (at most 1
    /// when every SLO holds); `None` when no SLO has a value.
    pub worst_slo_ratio: Option<f64>,
    /// The waiting queue's growth over the probe (see the module docs);
    /// `None` when an SLO already failed.
    pub queue_growth: Option<f64>,
    #[serde(flatten)]
    pub probe: Probe,
}

/// What the prefill:decode split search found (docs/clusters.md): of
/// every split of the GPU budget (each pool at least one replica, as many
/// decode replicas as the GPUs left allow), the one that meets every SLO
/// at the target rate with the most headroom (the lowest worst SLO
/// ratio; fewer prefill replicas on ties).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Split {
    pub target_rate_rps: f64,
    pub gpu_budget: u32,
    pub prefill_replicas: u32,
    pub decode_replicas: u32,
    pub gpus: u32,
    pub cost_per_hour: Option<f64>,
    /// The probe at the chosen split.
    pub at_split: Probe,
    /// Every split tried, by prefill replicas.
    pub probes: Vec<SplitProbe>,
}

/// Splits tried at most (a budget that allows more is refused).
pub const MAX_SPLITS: usize = 64;

/// Why no split was found.
#[derive(Clone, Debug, PartialEq)]
pub enum SplitError {
    /// The budget cannot hold one replica of each pool, or allows too many splits.
    Budget(String),
    /// No split meets every SLO; the closest one.
    NonePass {
        closest: Box<SplitProbe>,
        tried: usize,
    },
    Search(SearchError),
}

impl std::fmt::Display for SplitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitError::Budget(why) => f.write_str(why),
            SplitError::NonePass { closest, tried } => write!(
                f,
                "no prefill:decode split of the GPUs meets every SLO at {:.3} req/s: of the {tried} splits tried, \
                 the closest ({} prefill + {} decode replicas) still misses {}",
                closest.probe.rate_rps,
                closest.prefill_replicas,
                closest.decode_replicas,
                closest.probe.failed.join(", ")
            ),
            SplitError::Search(e) => e.fmt(f),
        }
    }
}

/// The largest SLO value over its bound.
fn worst_ratio(opts: &Options, p: &Probe) -> Option<f64> {
    let ratio = |s: &super::slo::Slo| {
        let v = p.slo_values.get(&s.name()).copied().flatten()?;
        Some(match s.bound {
            b if b > 0.0 => v / b,
            _ if v <= 0.0 => 0.0,
            _ => f64::INFINITY,
        })
    };
    opts.slos.iter().filter_map(ratio).fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))
}

/// The scenario with `prefill` and `decode` replicas in its pools.
fn with_split(base: &Scenario, prefill: u32, decode: u32) -> Scenario {
    let mut s = base.clone();
    if let Some(c) = &mut s.cluster
        && let Some(d) = &mut c.disagg
    {
        d.prefill.replicas = prefill;
        d.decode.replicas = decode;
        c.replicas = prefill + decode;
    }
    s
}

/// Searches the prefill:decode split of `budget` GPUs for `base`'s pools
/// (it must have them) at `rate`: every split with at least one replica
/// in each pool and as many decode replicas as the GPUs left allow.
pub fn split(
    base: &Scenario,
    opts: &Options,
    seeds: &[u64],
    rate: f64,
    n: u64,
    budget: u32,
) -> Result<Split, SplitError> {
    let Some(d) = base.cluster.as_ref().and_then(|c| c.disagg.as_ref()) else {
        return Err(SplitError::Budget("the scenario has no cluster.prefill/cluster.decode pools to split".into()));
    };
    let (gp, gd) = (d.prefill.gpus_per_replica(), d.decode.gpus_per_replica());
    let splits: Vec<(u32, u32)> = (1..)
        .take_while(|&p: &u32| u64::from(p) * u64::from(gp) + u64::from(gd) <= u64::from(budget))
        .map(|p| (p, (budget - p * gp) / gd))
        .collect();
    if splits.is_empty() {
        return Err(SplitError::Budget(format!(
            "--gpus {budget}: too few for one prefill replica ({gp} GPUs) and one decode replica ({gd} GPUs)"
        )));
    }
    if splits.len() > MAX_SPLITS {
        return Err(SplitError::Budget(format!(
            "--gpus {budget}: allows {} prefill:decode splits, more than the {MAX_SPLITS} one search tries; \
             give a smaller budget, or larger replicas (parallelism.tensor)",
            splits.len()
        )));
    }
    // Every split runs whole: the failing ones' SLO values rank them (the
    // closest is the answer when none meets).
    let opts = &Options { early_stop: false, ..opts.clone() };
    let mut probes = Vec::with_capacity(splits.len());
    for (p, k) in splits {
        let (probe, queue_growth) =
            fleet_probe(&with_split(base, p, k), opts, seeds, rate, n, p + k).map_err(SplitError::Search)?;
        let gpus = p * gp + k * gd;
        probes.push(SplitProbe {
            prefill_replicas: p,
            decode_replicas: k,
            gpus,
            worst_slo_ratio: worst_ratio(opts, &probe),
            queue_growth,
            probe,
        });
    }
    let key = |x: &SplitProbe| x.worst_slo_ratio.unwrap_or(f64::INFINITY);
    // The lowest worst ratio, the first (fewest prefill replicas) on ties.
    let best = |pass: bool| {
        probes.iter().filter(|x| x.probe.pass == pass).fold(None, |b: Option<&SplitProbe>, x| match b {
            Some(b) if key(b) <= key(x) => Some(b),
            _ => Some(x),
        })
    };
    let Some(chosen) = best(true) else {
        let closest = best(false).cloned().map(Box::new);
        let tried = probes.len();
        return Err(match closest {
            Some(closest) => SplitError::NonePass { closest, tried },
            None => SplitError::Budget("no split was tried".into()),
        });
    };
    let cost = |pool: &llmsim_scenario::config::cluster::Pool, replicas: u32| {
        pool.scenario.hardware.cost_per_hour.map(|c| c * f64::from(replicas * pool.gpus_per_replica()))
    };
    let cost_per_hour = match (cost(&d.prefill, chosen.prefill_replicas), cost(&d.decode, chosen.decode_replicas)) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    Ok(Split {
        target_rate_rps: rate,
        gpu_budget: budget,
        prefill_replicas: chosen.prefill_replicas,
        decode_replicas: chosen.decode_replicas,
        gpus: chosen.gpus,
        cost_per_hour,
        at_split: chosen.probe.clone(),
        probes: probes.clone(),
    })
}
