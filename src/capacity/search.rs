//! The probes and the bisection of [`crate::capacity`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::slo::{RequestItl, Slo, good_requests};
use crate::config::{Arrivals, Scenario};
use crate::metrics::{CollectorOptions, RunResult};

/// Rate of the saturation probe: everything arrives at once.
pub const BURST_RATE: f64 = 1e6;
/// The lowest rate probed, as a fraction of saturation.
pub const LOWEST_FRACTION: f64 = 0.01;
/// A probe's arrivals must span this many mean E2Es.
pub const E2E_MULTIPLE: f64 = 20.0;
pub const MIN_REQUESTS: u64 = 2000;
pub const MAX_REQUESTS: u64 = 1_000_000;

#[derive(Clone, Debug)]
pub struct Options {
    pub slos: Vec<Slo>,
    /// Relative width of the final bracket, e.g. 0.01.
    pub precision: f64,
    /// Requests per probe instead of the rule.
    pub requests: Option<u64>,
    /// Rate the fleet must serve, for the replica count.
    pub target_rate: Option<f64>,
}

/// One run at one rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Probe {
    pub rate_rps: f64,
    pub requests: u64,
    pub pass: bool,
    /// The run's value of each SLO's metric, by name.
    pub slo_values: BTreeMap<String, Option<f64>>,
    /// SLOs the run missed.
    pub failed: Vec<String>,
    /// Requests per second that met every SLO (over the run's duration).
    pub goodput_rps: f64,
    /// Percent of all requests (rejected ones included) that met every SLO.
    pub slo_attainment_pct: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub e2e_mean_ms: Option<f64>,
}

/// What the search found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub arrivals: String,
    pub slos: Vec<String>,
    pub precision: f64,
    pub requests_per_probe: u64,
    pub requests_rule: String,
    pub saturation_rps: f64,
    pub max_rate_rps: f64,
    /// The lowest failing rate (or saturation): the limit lies in
    /// `[max_rate_rps, max_rate_upper_rps)`.
    pub max_rate_upper_rps: f64,
    /// The SLO that fails first as the rate grows; `None` when every SLO
    /// holds up to saturation.
    pub binding_slo: Option<String>,
    /// `"slo"` or `"saturation"`: what stops the rate from growing.
    pub limited_by: String,
    pub at_max_rate: Probe,
    pub cost_per_hour: Option<f64>,
    pub cost_per_million_output_tokens: Option<f64>,
    pub target_rate_rps: Option<f64>,
    pub replicas: Option<u64>,
    pub rate_per_replica_rps: Option<f64>,
    pub fleet_cost_per_hour: Option<f64>,
    /// In the order they ran.
    pub probes: Vec<Probe>,
}

/// Why there is no answer.
#[derive(Clone, Debug, PartialEq)]
pub enum SearchError {
    /// The scenario's arrivals have no rate to vary.
    NoRate(String),
    /// Even the lowest rate misses an SLO; `best` is that probe.
    Unreachable { saturation_rps: f64, best: Box<Probe>, slos: Vec<Slo> },
    /// A probe stopped at a run limit ([`crate::sim::SimError`]).
    Run { rate_rps: f64, error: crate::sim::SimError },
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
                     throughput {:.3} req/s), {}; best achieved: {}",
                    best.rate_rps,
                    saturation_rps,
                    missed.join(", "),
                    all.join(", ")
                )
            }
        }
    }
}

/// The probe size rule (see the module docs of [`crate::capacity`]).
pub fn requests_for(slos: &[Slo]) -> u64 {
    let q = slos.iter().map(quantile).fold(0.5, f64::max);
    MIN_REQUESTS.max((100.0 / (1.0 - q)).round() as u64)
}

fn quantile(s: &Slo) -> f64 {
    match s.metric {
        crate::sweep::metric::Metric::Latency(_, stat) => stat.quantile(),
        _ => 0.5,
    }
}

/// A scenario whose open-loop rate is `rate`, with `n` requests.
fn at_rate(base: &Scenario, rate: f64, n: u64) -> Scenario {
    let mut s = base.clone();
    s.workload.arrivals = match s.workload.arrivals {
        Arrivals::Poisson { .. } => Arrivals::Poisson { rate },
        Arrivals::Gamma { burstiness, .. } => Arrivals::Gamma { rate, burstiness },
        Arrivals::Constant { .. } => Arrivals::Constant { rate },
        other => other,
    };
    s.workload.requests = Some(n);
    s.workload.duration_s = None;
    s
}

/// Runs one probe.
pub fn probe(base: &Scenario, slos: &[Slo], rate: f64, n: u64) -> Result<(Probe, RunResult), SearchError> {
    let mut itl = RequestItl::default();
    let out = crate::sim::run_observed(&at_rate(base, rate, n), CollectorOptions::default(), &mut itl)
        .map_err(|error| SearchError::Run { rate_rps: rate, error })?;
    let r = out.result;
    let good = good_requests(slos, &out.requests, &itl);
    let failed: Vec<String> = slos.iter().filter(|s| !s.holds(&r)).map(Slo::name).collect();
    let per_s = |x: u64| if r.throughput.duration_s > 0.0 { x as f64 / r.throughput.duration_s } else { 0.0 };
    let p = Probe {
        rate_rps: rate,
        requests: n,
        pass: failed.is_empty(),
        slo_values: slos.iter().map(|s| (s.name(), s.value(&r))).collect(),
        failed,
        goodput_rps: per_s(good),
        slo_attainment_pct: 100.0 * good as f64 / r.requests.total.max(1) as f64,
        requests_per_s: r.throughput.requests_per_s,
        output_tokens_per_s: r.throughput.output_tokens_per_s,
        e2e_mean_ms: r.e2e_ms.mean,
    };
    Ok((p, r))
}

/// A probe at `rate`, rerun longer if it passes but its arrivals span fewer
/// than [`E2E_MULTIPLE`] mean E2Es.
fn steady_probe(
    base: &Scenario,
    opts: &Options,
    rate: f64,
    n: u64,
    log: &mut Vec<Probe>,
) -> Result<Probe, SearchError> {
    let (p, _) = probe(base, &opts.slos, rate, n)?;
    let span_s = n as f64 / rate;
    let e2e_s = p.e2e_mean_ms.unwrap_or(0.0) / 1e3;
    if opts.requests.is_none() && p.pass && span_s < E2E_MULTIPLE * e2e_s {
        let more = ((E2E_MULTIPLE * e2e_s * rate / 1000.0).ceil() as u64 * 1000).clamp(n, MAX_REQUESTS);
        if more > n {
            log.push(p);
            let (longer, _) = probe(base, &opts.slos, rate, more)?;
            log.push(longer.clone());
            return Ok(longer);
        }
    }
    log.push(p.clone());
    Ok(p)
}

/// The whole search.
pub fn search(base: &Scenario, opts: &Options) -> Result<Report, SearchError> {
    let kind = match &base.workload.arrivals {
        Arrivals::Poisson { .. } => "poisson",
        Arrivals::Gamma { .. } => "gamma",
        Arrivals::Constant { .. } => "constant",
        Arrivals::Closed { .. } => return Err(SearchError::NoRate("a closed loop".into())),
        Arrivals::Trace(_) => return Err(SearchError::NoRate("a trace".into())),
    };
    let n = opts.requests.unwrap_or_else(|| requests_for(&opts.slos));
    let mut log = Vec::new();
    let (burst, _) = probe(base, &opts.slos, BURST_RATE, n)?;
    let saturation = burst.requests_per_s;
    if saturation <= 0.0 {
        // Nothing completes at all (every request rejected): no rate helps.
        return Err(SearchError::Unreachable { saturation_rps: 0.0, best: Box::new(burst), slos: opts.slos.clone() });
    }
    let lowest = steady_probe(base, opts, saturation * LOWEST_FRACTION, n, &mut log)?;
    if !lowest.pass {
        return Err(SearchError::Unreachable {
            saturation_rps: saturation,
            best: Box::new(lowest),
            slos: opts.slos.clone(),
        });
    }
    let top = steady_probe(base, opts, saturation, n, &mut log)?;
    let (mut lo, mut hi, mut best, mut first_fail) = (lowest.rate_rps, saturation, lowest, None);
    if top.pass {
        lo = saturation;
        best = top;
    } else {
        first_fail = Some(top);
        while hi - lo > opts.precision * lo {
            let mid = (lo + hi) / 2.0;
            let p = steady_probe(base, opts, mid, n, &mut log)?;
            if p.pass {
                lo = mid;
                best = p;
            } else {
                hi = mid;
                first_fail = Some(p);
            }
        }
    }
    let binding = first_fail.as_ref().and_then(|p| most_violated(&opts.slos, p));
    Ok(finish(base, opts, kind, n, saturation, (lo, hi), best, binding, log))
}

/// The failed SLO with the largest value/bound.
fn most_violated(slos: &[Slo], p: &Probe) -> Option<String> {
    let ratio = |s: &Slo| {
        let v = p.slo_values.get(&s.name()).copied().flatten();
        v.map_or(f64::INFINITY, |v| v / s.bound)
    };
    slos.iter().filter(|s| p.failed.contains(&s.name())).max_by(|a, b| ratio(a).total_cmp(&ratio(b))).map(Slo::name)
}

#[allow(clippy::too_many_arguments)]
fn finish(
    base: &Scenario,
    opts: &Options,
    kind: &str,
    n: u64,
    saturation: f64,
    (lo, hi): (f64, f64),
    best: Probe,
    binding: Option<String>,
    probes: Vec<Probe>,
) -> Report {
    let cost = base.hardware.cost_per_hour;
    let replicas = opts.target_rate.map(|t| (t / lo).ceil().max(1.0) as u64);
    Report {
        scenario: base.name.clone(),
        arrivals: kind.to_string(),
        slos: opts.slos.iter().map(Slo::to_string).collect(),
        precision: opts.precision,
        requests_per_probe: n,
        requests_rule: match opts.requests {
            Some(_) => "--requests".into(),
            None => format!(
                "max({MIN_REQUESTS}, 100 / (1 - q)) with q the highest SLO quantile; longer if the arrivals \
                 span fewer than {E2E_MULTIPLE} mean E2Es"
            ),
        },
        saturation_rps: saturation,
        max_rate_rps: lo,
        max_rate_upper_rps: hi,
        limited_by: if binding.is_some() { "slo" } else { "saturation" }.into(),
        binding_slo: binding,
        cost_per_hour: cost,
        cost_per_million_output_tokens: cost
            .filter(|_| best.output_tokens_per_s > 0.0)
            .map(|c| c / (best.output_tokens_per_s * 3600.0) * 1e6),
        at_max_rate: best,
        target_rate_rps: opts.target_rate,
        replicas,
        rate_per_replica_rps: opts.target_rate.zip(replicas).map(|(t, r)| t / r as f64),
        fleet_cost_per_hour: cost.zip(replicas).map(|(c, r)| c * r as f64),
        probes,
    }
}
