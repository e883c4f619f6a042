//! The probes and the searches of [`crate::capacity`].

use serde::Serialize;

// A probe and its error live below the searches; the old paths stay.
pub use super::probe::{MAX_REQUESTS, Options, Probe, SearchError, at_rate, probe, probe_seed};
use super::saturation::{self, SaturationProbe, Sizing};
use super::slo::Slo;
use llmsim_scenario::config::{Arrivals, Scenario};

/// Rate of the burst probe: everything arrives at once.
pub const BURST_RATE: f64 = 1e6;
/// The lowest rate probed, as a fraction of saturation.
pub const LOWEST_FRACTION: f64 = 0.01;
/// The SLO search steps up from the lowest rate by this factor.
pub const SLO_STEP: f64 = 2.0;
/// A probe's arrivals must span this many mean E2Es.
pub const E2E_MULTIPLE: f64 = 20.0;
pub const MIN_REQUESTS: u64 = 2000;
/// The fewest `--requests` allows: a saturation probe needs a second half
/// with enough arrivals to show a trend.
pub const FEWEST_REQUESTS: u64 = 100;
/// `--bracket`: the short probes run this fraction of the probe size.
pub const BRACKET_DIVISOR: u64 = 4;
/// Default seeds a probe runs.
pub const SEEDS: u32 = 3;
/// The most seeds a probe may run.
pub const MAX_SEEDS: u32 = 100;

/// What the search found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResult {
    pub scenario: String,
    pub arrivals: String,
    pub slos: Vec<String>,
    pub precision: f64,
    /// Every probe runs these seeds.
    pub seeds: Vec<u64>,
    pub requests_per_probe: u64,
    pub requests_rule: String,
    /// Requests a seed of the saturation probes (before any rerun).
    pub saturation_requests_per_probe: u64,
    /// The highest throughput served at a sustained rate: requests finished
    /// per second over the second half of the arrival window, pooled over
    /// seeds, capped at the offered rate, the most of any sustained probe.
    pub saturation_rps: f64,
    /// The highest rate found sustained.
    pub sustained_rate_rps: f64,
    /// The lowest rate found not sustained (`None`: none up to 10^6 req/s).
    pub unsustained_rate_rps: Option<f64>,
    /// Requests finished per second when every request arrives at once (on
    /// the scenario's seed): phase-locked, usually below saturation.
    pub burst_rps: f64,
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
    /// GPUs one replica uses (its tensor degree); written when above 1.
    #[serde(skip_serializing_if = "is_one")]
    pub gpus_per_replica: u32,
    /// Price of one replica-hour: `hardware.cost_per_hour` x `gpus_per_replica`.
    pub cost_per_hour: Option<f64>,
    pub cost_per_million_output_tokens: Option<f64>,
    pub target_rate_rps: Option<f64>,
    pub replicas: Option<u64>,
    pub rate_per_replica_rps: Option<f64>,
    pub fleet_cost_per_hour: Option<f64>,
    /// The saturation search, in the order the probes ran.
    pub saturation_probes: Vec<SaturationProbe>,
    /// The SLO search, in the order the probes ran.
    pub probes: Vec<Probe>,
    /// With `--target-rate` and a `cluster:`: the fewest replicas whose
    /// simulated cluster meets every SLO at the target rate
    /// ([`super::fleet`]). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<super::fleet::Fleet>,
    /// With `--target-rate` and prefill/decode pools: the split of the
    /// GPU budget that meets every SLO ([`super::fleet::split`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<super::fleet::Split>,
    /// With `--class NAME` (docs/priorities.md): the class whose rate was
    /// varied (every rate above is that class's alone) and the rate of the
    /// other classes beside it, as the scenario gives them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_classes_rps: Option<f64>,
}

fn is_one(x: &u32) -> bool {
    *x == 1
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

/// A probe at `rate`, rerun longer if it passes but its arrivals span fewer
/// than [`E2E_MULTIPLE`] mean E2Es.
fn steady_probe(
    base: &Scenario,
    opts: &Options,
    seeds: &[u64],
    rate: f64,
    n: u64,
    log: &mut Vec<Probe>,
    cut: bool,
) -> Result<Probe, SearchError> {
    let p = probe(base, &opts.slos, seeds, rate, n, cut)?;
    let span_s = n as f64 / rate;
    let e2e_s = p.e2e_mean_ms.unwrap_or(0.0) / 1e3;
    if opts.requests.is_none() && p.pass && span_s < E2E_MULTIPLE * e2e_s {
        let more = ((E2E_MULTIPLE * e2e_s * rate / 1000.0).ceil() as u64 * 1000).clamp(n, MAX_REQUESTS);
        if more > n {
            log.push(p);
            let longer = probe(base, &opts.slos, seeds, rate, more, cut)?;
            log.push(longer.clone());
            return Ok(longer);
        }
    }
    log.push(p.clone());
    Ok(p)
}

/// The whole search: saturation first, then the SLOs below it.
pub fn search(base: &Scenario, opts: &Options) -> Result<SearchResult, SearchError> {
    let kind = match &base.workload.arrivals {
        Arrivals::Poisson { .. } => "poisson",
        Arrivals::Gamma { .. } => "gamma",
        Arrivals::Constant { .. } => "constant",
        Arrivals::Closed { .. } => return Err(SearchError::NoRate("a closed loop".into())),
        Arrivals::Trace(_) => return Err(SearchError::NoRate("a trace".into())),
        Arrivals::Curve(_) => return Err(SearchError::NoRate("a rate curve".into())),
    };
    let seeds = crate::sweep::plan::seeds_of(base, opts.seeds.max(1));
    let n = opts.requests.unwrap_or_else(|| requests_for(&opts.slos));
    let (burst, _) = probe_seed(base, &opts.slos, BURST_RATE, n)?;
    if burst.requests_per_s <= 0.0 {
        // Nothing completes at all (every request rejected): no rate helps.
        return Err(SearchError::Unreachable { saturation_rps: 0.0, best: Box::new(burst), slos: opts.slos.clone() });
    }
    let size = Sizing {
        requests: opts.requests.unwrap_or(saturation::REQUESTS),
        extend: opts.requests.is_none(),
        e2e_multiple: E2E_MULTIPLE,
        max_requests: MAX_REQUESTS,
    };
    let sat = saturation::find(base, &seeds, burst.requests_per_s, opts.precision, size)?.ok_or(
        SearchError::NeverSustained {
            burst_rps: burst.requests_per_s,
            lowest_rps: burst.requests_per_s.min(saturation::MAX_RATE)
                / saturation::STEP.powi(saturation::MAX_BRACKET_PROBES as i32),
        },
    )?;
    let saturation = sat.rps;
    let mut log = Vec::new();
    // The lowest rate runs whole: when it misses, its figures are the error's.
    let lowest = steady_probe(base, opts, &seeds, saturation * LOWEST_FRACTION, n, &mut log, false)?;
    if !lowest.pass {
        return Err(SearchError::Unreachable {
            saturation_rps: saturation,
            best: Box::new(lowest),
            slos: opts.slos.clone(),
        });
    }
    let short = bracket_requests(opts, n);
    let mut run = |rate: f64, length: Length| match length {
        Length::Full => steady_probe(base, opts, &seeds, rate, n, &mut log, opts.early_stop),
        Length::Short => {
            let mut p = probe(base, &opts.slos, &seeds, rate, short.unwrap_or(n), opts.early_stop)?;
            p.short = true;
            log.push(p.clone());
            Ok(p)
        }
    };
    let Bracket { lo, hi, best, first_fail } =
        slo_search(lowest, saturation, opts.precision, short.is_some(), &mut run)?;
    let binding = first_fail.as_ref().and_then(|p| most_violated(&opts.slos, p));
    let found = Found { kind, seeds, n, burst_rps: burst.requests_per_s, sat, bracket: (lo, hi), best, binding };
    Ok(finish(base, opts, found, log))
}

/// With `--bracket`, the requests a seed of the SLO search's short probes:
/// a [`BRACKET_DIVISOR`]th of the probe size, when that is at least
/// [`FEWEST_REQUESTS`] (else no bracketing).
pub fn bracket_requests(opts: &Options, n: u64) -> Option<u64> {
    Some(n / BRACKET_DIVISOR).filter(|s| opts.bracket && *s >= FEWEST_REQUESTS)
}

/// How long a probe of the SLO search runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Length {
    /// The probe size (and longer when its arrivals span too few E2Es).
    Full,
    /// A bracketing probe: [`bracket_requests`].
    Short,
}

/// Where the SLO search stands: `lo` met (`best` is its probe), `hi` is the
/// lowest rate that missed (`first_fail`), or saturation when none did.
#[derive(Clone, Debug)]
pub struct Bracket {
    pub lo: f64,
    pub hi: f64,
    pub best: Probe,
    pub first_fail: Option<Probe>,
}

/// The SLO search above a `lowest` probe that met, up to `saturation`:
/// doubling the rate until an SLO misses, then bisecting to `precision`.
/// With `bracket`, that search first runs on short probes, and its two ends
/// are then confirmed by full ones (moving outwards, by `precision` and
/// then twice as far each time, until a full probe meets below and one
/// misses above) before the bisection goes on with full probes: every
/// probe the answer rests on (the rate met, the rate missed) ran full.
pub fn slo_search(
    lowest: Probe,
    saturation: f64,
    precision: f64,
    bracket: bool,
    run: &mut dyn FnMut(f64, Length) -> Result<Probe, SearchError>,
) -> Result<Bracket, SearchError> {
    let start = Bracket { lo: lowest.rate_rps, hi: saturation, best: lowest, first_fail: None };
    if !bracket {
        return climb(start, saturation, precision, Length::Full, run);
    }
    let short = climb(start.clone(), saturation, precision, Length::Short, run)?;
    let confirmed = confirm(&short, start, saturation, precision, run)?;
    bisect(confirmed, precision, Length::Full, run)
}

/// Doubles the rate from `b.lo` until a probe misses or saturation is met,
/// then bisects.
fn climb(
    mut b: Bracket,
    saturation: f64,
    precision: f64,
    length: Length,
    run: &mut dyn FnMut(f64, Length) -> Result<Probe, SearchError>,
) -> Result<Bracket, SearchError> {
    while b.first_fail.is_none() && b.lo < saturation {
        let rate = (b.lo * SLO_STEP).min(saturation);
        let p = run(rate, length)?;
        if p.pass {
            b.lo = rate;
            b.best = p;
        } else {
            b.hi = rate;
            b.first_fail = Some(p);
        }
    }
    bisect(b, precision, length, run)
}

/// Halves `[lo, hi)` until it is within `precision` of `lo` (when a probe missed).
fn bisect(
    mut b: Bracket,
    precision: f64,
    length: Length,
    run: &mut dyn FnMut(f64, Length) -> Result<Probe, SearchError>,
) -> Result<Bracket, SearchError> {
    while b.first_fail.is_some() && b.hi - b.lo > precision * b.lo {
        let mid = (b.lo + b.hi) / 2.0;
        if mid <= b.lo || mid >= b.hi {
            break;
        }
        let p = run(mid, length)?;
        if p.pass {
            b.lo = mid;
            b.best = p;
        } else {
            b.hi = mid;
            b.first_fail = Some(p);
        }
    }
    Ok(b)
}

/// Full probes at the ends of the `short` bracket, moving outwards until
/// one meets below and one misses above (or saturation meets); `start` is
/// the lowest probe, which ran full.
fn confirm(
    short: &Bracket,
    mut b: Bracket,
    saturation: f64,
    precision: f64,
    run: &mut dyn FnMut(f64, Length) -> Result<Probe, SearchError>,
) -> Result<Bracket, SearchError> {
    // The short lower end, then lower until a full probe meets.
    let (mut rate, mut step) = (short.lo, precision * short.lo);
    while rate > b.lo {
        let p = run(rate, Length::Full)?;
        if p.pass {
            b.lo = rate;
            b.best = p;
            break;
        }
        b.hi = rate;
        b.first_fail = Some(p);
        rate = (rate - step).max(b.lo);
        step *= 2.0;
    }
    if b.first_fail.is_some() || short.first_fail.is_none() {
        return Ok(b);
    }
    // The short upper end, then higher until a full probe misses.
    let (mut rate, mut step) = (short.hi, precision * short.lo);
    loop {
        let p = run(rate, Length::Full)?;
        if !p.pass {
            b.hi = rate;
            b.first_fail = Some(p);
            return Ok(b);
        }
        b.lo = rate;
        b.best = p;
        if rate >= saturation {
            return Ok(b);
        }
        rate = (rate + step).min(saturation);
        step *= 2.0;
    }
}

/// The failed SLO with the largest value/bound.
fn most_violated(slos: &[Slo], p: &Probe) -> Option<String> {
    let ratio = |s: &Slo| {
        let v = p.slo_values.get(&s.name()).copied().flatten();
        v.map_or(f64::INFINITY, |v| v / s.bound)
    };
    slos.iter().filter(|s| p.failed.contains(&s.name())).max_by(|a, b| ratio(a).total_cmp(&ratio(b))).map(Slo::name)
}

/// What the searches found, for [`finish`].
struct Found {
    kind: &'static str,
    seeds: Vec<u64>,
    n: u64,
    burst_rps: f64,
    sat: saturation::Saturation,
    bracket: (f64, f64),
    best: Probe,
    binding: Option<String>,
}

fn finish(base: &Scenario, opts: &Options, f: Found, probes: Vec<Probe>) -> SearchResult {
    let gpus = base.deployment.gpus();
    let cost = base.hardware.cost_per_hour.map(|c| c * f64::from(gpus));
    let (lo, hi) = f.bracket;
    let replicas = opts.target_rate.map(|t| (t / lo).ceil().max(1.0) as u64);
    let best = f.best;
    SearchResult {
        scenario: base.name.clone(),
        arrivals: f.kind.to_string(),
        slos: opts.slos.iter().map(Slo::to_string).collect(),
        precision: opts.precision,
        seeds: f.seeds,
        requests_per_probe: f.n,
        requests_rule: match opts.requests {
            Some(_) => "--requests".into(),
            None => format!(
                "max({MIN_REQUESTS}, 100 / (1 - q)) with q the highest SLO quantile; longer if the arrivals \
                 span fewer than {E2E_MULTIPLE} mean E2Es"
            ),
        },
        saturation_requests_per_probe: opts.requests.unwrap_or(saturation::REQUESTS),
        saturation_rps: f.sat.rps,
        sustained_rate_rps: f.sat.sustained_rate_rps,
        unsustained_rate_rps: f.sat.unsustained_rate_rps,
        burst_rps: f.burst_rps,
        max_rate_rps: lo,
        max_rate_upper_rps: hi,
        limited_by: if f.binding.is_some() { "slo" } else { "saturation" }.into(),
        binding_slo: f.binding,
        gpus_per_replica: gpus,
        cost_per_hour: cost,
        cost_per_million_output_tokens: cost
            .filter(|_| best.output_tokens_per_s > 0.0)
            .map(|c| c / (best.output_tokens_per_s * 3600.0) * 1e6),
        at_max_rate: best,
        target_rate_rps: opts.target_rate,
        replicas,
        rate_per_replica_rps: opts.target_rate.zip(replicas).map(|(t, r)| t / r as f64),
        fleet_cost_per_hour: cost.zip(replicas).map(|(c, r)| c * r as f64),
        saturation_probes: f.sat.probes,
        probes,
        fleet: None,
        split: None,
        class: base.workload.rate_class.and_then(|k| base.workload.classes.get(k)).map(|c| c.name.clone()),
        other_classes_rps: base.workload.rate_class.and_then(|k| {
            let w = &base.workload;
            let sum: f64 = w.classes.iter().map(|c| c.weight).sum();
            let own = w.classes.get(k)?.weight;
            w.rate().map(|r| r * (sum - own) / sum)
        }),
    }
}
