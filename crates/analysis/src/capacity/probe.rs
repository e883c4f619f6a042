//! One probe of [`crate::capacity`]: a rate run on every seed, what it
//! measured, and why a search has no answer. Below the searches
//! (`saturation`, `search`, `fleet`), which all run probes.

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::Serialize;

use super::slo::{RequestItl, Slo, SloCut, good_requests};
use llmsim_planner::metrics::RunResult;
use llmsim_planner::run_driver::SimError;
use llmsim_scenario::config::Scenario;

/// The most requests a probe runs on one seed (`--requests` included): a
/// probe keeps a record per request, about 150 bytes each.
pub const MAX_REQUESTS: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct Options {
    pub slos: Vec<Slo>,
    /// Relative width of the final bracket, e.g. 0.01.
    pub precision: f64,
    /// Requests per probe and seed instead of the rules.
    pub requests: Option<u64>,
    /// Rate the fleet must serve, for the replica count.
    pub target_rate: Option<f64>,
    /// Seeds every probe runs: the scenario's seed and the next ones.
    pub seeds: u32,
    /// Probes of the searches' steps stop a seed's run as soon as an SLO
    /// is certain to be missed ([`SloCut`]); `false`: every run to its
    /// end (`--full-probes`).
    pub early_stop: bool,
    /// The SLO search brackets the limit with short probes first and then
    /// confirms its ends with full ones (`--bracket`;
    /// [`super::search::slo_search`]).
    pub bracket: bool,
}

/// One rate, run on every seed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    pub rate_rps: f64,
    /// Requests a seed.
    pub requests: u64,
    /// Every SLO held on every seed.
    pub pass: bool,
    /// Seeds on which every SLO held.
    pub seeds_met: usize,
    /// Each SLO's metric by name: the worst (largest) value over the seeds.
    pub slo_values: BTreeMap<String, Option<f64>>,
    /// SLOs missed on at least one seed.
    pub failed: Vec<String>,
    /// Requests per second that met every SLO (over the run's duration),
    /// mean over seeds.
    pub goodput_rps: f64,
    /// Percent of all requests (rejected ones included) that met every SLO,
    /// mean over seeds.
    pub slo_attainment_pct: f64,
    /// Mean over seeds.
    pub requests_per_s: f64,
    /// Mean over seeds.
    pub output_tokens_per_s: f64,
    /// Mean over the seeds that have one.
    pub e2e_mean_ms: Option<f64>,
    /// Seeds whose run stopped early, once an SLO was certain to be missed
    /// ([`SloCut`]): they count among the seeds that missed, and the
    /// figures above are the other seeds' (0 and `null` when every seed
    /// stopped).
    #[serde(skip_serializing_if = "is_zero")]
    pub stopped: usize,
    /// A short probe of `--bracket` ([`super::search::slo_search`]): it only
    /// guides the search; the rates the answer rests on ran full.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub short: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Why there is no answer.
#[derive(Clone, Debug, PartialEq)]
pub enum SearchError {
    /// The scenario's arrivals have no rate to vary.
    NoRate(String),
    /// Even the lowest rate misses an SLO; `best` is that probe.
    Unreachable { saturation_rps: f64, best: Box<Probe>, slos: Vec<Slo> },
    /// The waiting queue grows at every rate tried.
    NeverSustained { burst_rps: f64, lowest_rps: f64 },
    /// A probe stopped at a run limit ([`llmsim_planner::run_driver::SimError`]).
    Run { rate_rps: f64, error: llmsim_planner::run_driver::SimError },
}

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchError::Run { rate_rps, error } => write!(f, "the probe at {rate_rps:.3} req/s: {error}"),
            SearchError::NoRate(kind) => write!(
                f,
                "capacity varies an arrival rate, and workload.arrivals is {kind}: use poisson, gamma or \
                 constant, e.g. --set 'workload.arrivals={{poisson: {{rate: 1}}}}'"
            ),
            SearchError::Unreachable { saturation_rps, .. } if *saturation_rps <= 0.0 => write!(
                f,
                "no rate meets every SLO: no request completes even with the engine saturated (every request \
                 was rejected; `llmsim run` says why)"
            ),
            SearchError::NeverSustained { burst_rps, lowest_rps } => write!(
                f,
                "no rate is sustained: the waiting queue keeps growing at every rate tried, down to {lowest_rps:.3e} \
                 req/s (a burst of every request at once completes {burst_rps:.3} req/s); `llmsim run --plot` shows \
                 the queue"
            ),
            SearchError::Unreachable { saturation_rps, best, slos } => {
                let missed: Vec<String> = slos
                    .iter()
                    .filter(|s| best.failed.contains(&s.name()))
                    .map(|s| {
                        let v = best.slo_values.get(&s.name()).copied().flatten();
                        format!(
                            "{} = {} (bound {})",
                            s.name(),
                            v.map_or("no value".into(), |v| format!("{v:.3}")),
                            s.bound
                        )
                    })
                    .collect();
                let all: Vec<String> = best
                    .slo_values
                    .iter()
                    .map(|(n, v)| format!("{n} {}", v.map_or("-".into(), |v| format!("{v:.3}"))))
                    .collect();
                write!(
                    f,
                    "no rate meets every SLO: even at the lowest rate, {:.4} req/s (1% of the saturation \
                     throughput {:.3} req/s), {} (the worst of its seeds); best achieved: {}",
                    best.rate_rps,
                    saturation_rps,
                    missed.join(", "),
                    all.join(", ")
                )
            }
        }
    }
}

/// A scenario whose open-loop rate is `rate`, with `n` requests.
/// (With `capacity --class`, `rate` is that class's: [`llmsim_scenario::config::Workload::with_rate`].)
pub fn at_rate(base: &Scenario, rate: f64, n: u64) -> Scenario {
    let mut s = base.clone();
    s.workload = base.workload.with_rate(rate);
    s.workload.requests = Some(n);
    s.workload.duration_s = None;
    s
}

/// Runs one probe on the scenario's own seed, to its end.
pub fn probe_seed(base: &Scenario, slos: &[Slo], rate: f64, n: u64) -> Result<(Probe, RunResult), SearchError> {
    let mut itl = RequestItl::default();
    let run = llmsim_planner::Run::new(&at_rate(base, rate, n)).observed(&mut itl);
    let out = run.map_err(|error| SearchError::Run { rate_rps: rate, error })?;
    Ok(judged(slos, rate, n, out, &itl))
}

/// [`probe_seed`], also showing the run's events to `extra`; with `cut`,
/// the run stops as soon as an SLO is certain to be missed ([`SloCut`]),
/// and the probe (its `stopped` 1) has no run result.
pub fn probe_seed_observed<O: llmsim_core::engine::Observer>(
    base: &Scenario,
    slos: &[Slo],
    rate: f64,
    n: u64,
    extra: &mut O,
    cut: bool,
) -> Result<(Probe, Option<RunResult>), SearchError> {
    let mut itl = RequestItl::default();
    let mut watch = if cut { SloCut::new(slos, n) } else { None };
    let run = match &mut watch {
        Some(w) => llmsim_planner::Run::new(&at_rate(base, rate, n)).observed(&mut (&mut itl, (w, extra))),
        None => llmsim_planner::Run::new(&at_rate(base, rate, n)).observed(&mut (&mut itl, extra)),
    };
    match run {
        Ok(out) => {
            let (p, r) = judged(slos, rate, n, out, &itl);
            Ok((p, Some(r)))
        }
        // The watch stopped it; another observer's stop is not an answer.
        Err(SimError::Cut { progress }) => match watch.map(|w| w.missed).filter(|m| !m.is_empty()) {
            Some(missed) => Ok((stopped_probe(slos, rate, n, missed), None)),
            None => Err(SearchError::Run { rate_rps: rate, error: SimError::Cut { progress } }),
        },
        Err(error) => Err(SearchError::Run { rate_rps: rate, error }),
    }
}

/// The probe of a run that ended: its SLO values, verdict and goodput.
fn judged(
    slos: &[Slo],
    rate: f64,
    n: u64,
    out: llmsim_planner::metrics::RunOutput,
    itl: &RequestItl,
) -> (Probe, RunResult) {
    let r = out.result;
    let good = good_requests(slos, &out.requests, itl);
    let failed: Vec<String> = slos.iter().filter(|s| !s.holds(&r)).map(Slo::name).collect();
    let per_s = |x: u64| if r.throughput.duration_s > 0.0 { x as f64 / r.throughput.duration_s } else { 0.0 };
    let p = Probe {
        rate_rps: rate,
        requests: n,
        pass: failed.is_empty(),
        seeds_met: usize::from(failed.is_empty()),
        slo_values: slos.iter().map(|s| (s.name(), s.value(&r))).collect(),
        failed,
        goodput_rps: per_s(good),
        slo_attainment_pct: 100.0 * good as f64 / r.requests.total.max(1) as f64,
        requests_per_s: r.throughput.requests_per_s,
        output_tokens_per_s: r.throughput.output_tokens_per_s,
        e2e_mean_ms: r.e2e_ms.mean,
        stopped: 0,
        short: false,
    };
    (p, r)
}

/// The probe of a seed whose run stopped once `missed` were certain to be
/// missed: no figures.
fn stopped_probe(slos: &[Slo], rate: f64, n: u64, missed: Vec<String>) -> Probe {
    Probe {
        rate_rps: rate,
        requests: n,
        pass: false,
        seeds_met: 0,
        slo_values: slos.iter().map(|s| (s.name(), None)).collect(),
        failed: missed,
        goodput_rps: 0.0,
        slo_attainment_pct: 0.0,
        requests_per_s: 0.0,
        output_tokens_per_s: 0.0,
        e2e_mean_ms: None,
        stopped: 1,
        short: false,
    }
}

/// Runs one rate on every seed (in parallel; the result does not depend on
/// the thread count) and combines them: it passes when every seed met every
/// SLO, its SLO values are the worst over seeds, the rest are means.
pub fn probe(base: &Scenario, slos: &[Slo], seeds: &[u64], rate: f64, n: u64, cut: bool) -> Result<Probe, SearchError> {
    let runs: Vec<Probe> = seeds
        .par_iter()
        .map(|&seed| {
            let mut s = base.clone();
            s.workload.seed = seed;
            probe_seed_observed(&s, slos, rate, n, &mut (), cut).map(|p| p.0)
        })
        .collect::<Result<_, _>>()?;
    Ok(combine(slos, rate, n, &runs))
}

pub(crate) fn combine(slos: &[Slo], rate: f64, n: u64, runs: &[Probe]) -> Probe {
    // The figures are the seeds' that ran to the end.
    let whole = runs.iter().filter(|p| p.stopped == 0);
    let k = whole.clone().count().max(1) as f64;
    let mean = |f: fn(&Probe) -> f64| whole.clone().map(f).sum::<f64>() / k;
    let worst = |name: &str| {
        runs.iter()
            .filter_map(|p| p.slo_values.get(name).copied().flatten())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    let failed: Vec<String> =
        slos.iter().map(Slo::name).filter(|name| runs.iter().any(|p| p.failed.contains(name))).collect();
    let e2es: Vec<f64> = runs.iter().filter_map(|p| p.e2e_mean_ms).collect();
    Probe {
        rate_rps: rate,
        requests: n,
        pass: failed.is_empty(),
        seeds_met: runs.iter().filter(|p| p.pass).count(),
        slo_values: slos.iter().map(|s| (s.name(), worst(&s.name()))).collect(),
        failed,
        goodput_rps: mean(|p| p.goodput_rps),
        slo_attainment_pct: mean(|p| p.slo_attainment_pct),
        requests_per_s: mean(|p| p.requests_per_s),
        output_tokens_per_s: mean(|p| p.output_tokens_per_s),
        e2e_mean_ms: (!e2es.is_empty()).then(|| e2es.iter().sum::<f64>() / e2es.len() as f64),
        stopped: runs.iter().map(|p| p.stopped).sum(),
        short: false,
    }
}
