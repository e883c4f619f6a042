//! `llmsim capacity --over-time`: the cheapest fleet policy that meets the
//! window SLOs over a run of changing load, against the static fleet that
//! does (docs/clusters.md, "The cheapest plan").
//!
//! The policies are the points of a sweep ([`crate::sweep`]): the scenario
//! with `--set` axes over its autoscaler's or pools' knobs
//! (`cluster.autoscale.target=8,12,16`, `cluster.pools.1.autoscale.max_replicas=4,8`,
//! `cluster.pools.0.replicas=1,2,3`), run in parallel with the sweep's
//! runner (and its shards: [`judge`] reads merged shard data as well).
//! A point **meets** the plan when, on every seed, the windows that missed
//! `cluster.timeline.slo` are at most `floor((1 - fraction) * windows)`
//! (`--windows FRACTION`, default 1: every window). Its price is the mean
//! over seeds of `over_time.cost` when every run has a price, else of
//! `over_time.gpu_hours`. The plan is the point that meets at the lowest
//! price; ties go to the fewer missed windows, then the earlier point.
//!
//! **The static fleet** is the scenario's first pool (or its one kind of
//! replica) at a fixed count `N`, no autoscaler, the same load and windows:
//! the smallest `N` that meets, found by [`static_fleet`]: counts from 1
//! doubling up to the search's limit, three probes a round in parallel,
//! then three-way cuts of the bracket, each probe on every seed. Meeting is
//! taken to be monotone in `N` (more replicas never miss more windows),
//! which holds for the routers' load spreading but is not proven: the
//! probes are reported. The probes do not depend on the thread count.

use rayon::prelude::*;
use serde::Serialize;

use crate::sweep::{AxisData, PointResult, SweepData};
use llmsim_planner::metrics::RunResult;
use llmsim_planner::run_driver::{MissedWindow, SimError};
use llmsim_scenario::config::{Cluster, FleetPool, Scenario};

/// Probes a round of the static search.
pub const PROBES_A_ROUND: u32 = 3;

/// What the plan must meet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Need {
    /// The fraction of windows that must meet the SLO (0 to 1).
    pub fraction: f64,
}

impl Need {
    /// Windows out of `windows` that may miss.
    pub fn allowed(self, windows: u64) -> u64 {
        // The epsilon keeps 0.99 x 100 windows at 1 allowed, not 0.
        ((1.0 - self.fraction) * windows as f64 + 1e-9).floor().max(0.0) as u64
    }
}

/// How one run did over its windows.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub windows: u64,
    /// Windows that missed the SLO.
    pub missed: u64,
    pub gpu_hours: f64,
    pub cost: Option<f64>,
    pub peak_replicas: u32,
    /// Where a run stopped at its first missed window ended (the figures
    /// above are up to there); `None` for a whole run.
    pub stopped_at_s: Option<f64>,
}

/// Why a run cannot be judged.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum JudgeError {
    #[error("the run has no over_time results: give the scenario cluster.timeline or cluster.autoscale")]
    NoTimeline,
    #[error("the run has no window SLO: give cluster.timeline.slo (or --slo)")]
    NoSlo,
}

impl Verdict {
    pub fn of(r: &RunResult) -> Result<Verdict, JudgeError> {
        let ot = r.over_time.as_ref().ok_or(JudgeError::NoTimeline)?;
        Ok(Verdict {
            windows: ot.windows,
            missed: ot.slo_missed.ok_or(JudgeError::NoSlo)?,
            gpu_hours: ot.gpu_hours,
            cost: ot.cost,
            peak_replicas: ot.peak_replicas,
            stopped_at_s: None,
        })
    }

    /// A run that stopped at its first missed window
    /// ([`llmsim_planner::Run::stop_at_missed_window`]): the windows up to
    /// and with it, one missed; the peak is the run's up to there.
    pub fn stopped(w: &MissedWindow) -> Verdict {
        Verdict {
            windows: w.index + 1,
            missed: 1,
            gpu_hours: w.gpu_hours,
            cost: w.cost,
            peak_replicas: w.peak_replicas,
            stopped_at_s: Some(w.end_s),
        }
    }
}

/// One policy (sweep point) over its seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Candidate {
    /// Its point, from 1.
    pub point: usize,
    /// `key=value` for each axis.
    pub values: String,
    /// Means over seeds.
    pub gpu_hours: f64,
    pub cost: Option<f64>,
    pub windows: u64,
    /// The most over seeds.
    pub missed: u64,
    pub peak_replicas: u32,
    pub meets: bool,
}

/// Seeds' verdicts summed up: means of the prices, the worst of the rest.
fn pooled(verdicts: &[Verdict], need: Need) -> (f64, Option<f64>, u64, u64, u32, bool) {
    let n = verdicts.len().max(1) as f64;
    let gpu_hours = verdicts.iter().map(|v| v.gpu_hours).sum::<f64>() / n;
    let cost = verdicts.iter().map(|v| v.cost).sum::<Option<f64>>().map(|c| c / n);
    let windows = verdicts.iter().map(|v| v.windows).max().unwrap_or(0);
    let missed = verdicts.iter().map(|v| v.missed).max().unwrap_or(0);
    let peak = verdicts.iter().map(|v| v.peak_replicas).max().unwrap_or(0);
    let meets = verdicts.iter().all(|v| v.missed <= need.allowed(v.windows));
    (gpu_hours, cost, windows, missed, peak, meets)
}

/// What the plans are compared by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Price {
    /// `over_time.cost`: every run had a price.
    Cost,
    /// `over_time.gpu_hours`: some run had no price.
    GpuHours,
}

impl Price {
    pub fn of(self, gpu_hours: f64, cost: Option<f64>) -> Option<f64> {
        match self {
            Price::Cost => cost,
            Price::GpuHours => Some(gpu_hours),
        }
    }
}

/// The sweep's points judged, in point order, the price they are compared
/// by, and the cheapest that meets (an index into the candidates).
pub fn judge(
    data: &SweepData,
    describe: impl Fn(&PointResult) -> String,
    need: Need,
) -> Result<Judged, (usize, JudgeError)> {
    let mut out = Vec::with_capacity(data.points.len());
    for p in &data.points {
        let verdicts = p.results.iter().map(Verdict::of).collect::<Result<Vec<_>, _>>().map_err(|e| (p.index, e))?;
        let (gpu_hours, cost, windows, missed, peak_replicas, meets) = pooled(&verdicts, need);
        out.push(Candidate {
            point: p.index + 1,
            values: describe(p),
            gpu_hours,
            cost,
            windows,
            missed,
            peak_replicas,
            meets,
        });
    }
    let price = if out.iter().all(|c| c.cost.is_some()) { Price::Cost } else { Price::GpuHours };
    let key = |c: &Candidate| price.of(c.gpu_hours, c.cost).unwrap_or(f64::INFINITY);
    let cheapest = (0..out.len())
        .filter(|&i| out[i].meets)
        .min_by(|&a, &b| key(&out[a]).total_cmp(&key(&out[b])).then(out[a].missed.cmp(&out[b].missed)).then(a.cmp(&b)));
    Ok(Judged { candidates: out, price, cheapest })
}

/// The policies judged ([`judge`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    /// In point order.
    pub candidates: Vec<Candidate>,
    pub price: Price,
    /// The cheapest that meets: an index into `candidates`.
    pub cheapest: Option<usize>,
}

/// One probe of the static search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StaticProbe {
    pub replicas: u32,
    pub gpu_hours: f64,
    pub cost: Option<f64>,
    pub windows: u64,
    pub missed: u64,
    pub meets: bool,
    /// When some seed's run stopped at its first missed window (the
    /// search's early stop, [`Stop`]): the earliest such end, and the
    /// figures above are up to each run's stop. Absent for whole runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_at_s: Option<f64>,
}

/// Whether the static search's runs may end at their first missed window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// When every window must meet (`--windows 1`), a run ends at its
    /// first missed window: that probe fails whatever follows. With a
    /// fraction below 1 the windows allowed to miss depend on how many
    /// the whole run has, so runs go to the end.
    AtFirstMiss,
    /// Every run to its end (`--full-probes`).
    Never,
}

/// The static fleet's search and answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StaticFleet {
    /// The pool it is made of (`null`: the fleet's one kind of replica).
    pub pool: Option<String>,
    pub hardware: String,
    pub gpus_per_replica: u32,
    /// The smallest count that meets; `null` when none up to `limit` did.
    pub replicas: Option<u32>,
    pub limit: u32,
    /// That count's probe.
    pub at_replicas: Option<StaticProbe>,
    /// Every probe, in the order they ran.
    pub probes: Vec<StaticProbe>,
}

/// The scenario's fleet as `n` fixed replicas of its first pool (or its one
/// kind), no autoscaler; everything else as it is.
pub fn static_variant(s: &Scenario, n: u32) -> Scenario {
    let mut out = s.clone();
    if let Some(c) = out.cluster.as_mut() {
        *c = Cluster { replicas: n, autoscale: None, pools: first_pool(&c.pools, n), ..c.clone() };
    }
    out
}

fn first_pool(pools: &[FleetPool], n: u32) -> Vec<FleetPool> {
    pools.first().map(|p| vec![FleetPool { replicas: n, autoscale: None, ..p.clone() }]).unwrap_or_default()
}

/// Runs the static fleet of `n` replicas on every seed.
fn probe(s: &Scenario, n: u32, seeds: &[u64], need: Need, stop: Stop) -> Result<StaticProbe, StaticError> {
    let fleet = static_variant(s, n);
    let early = stop == Stop::AtFirstMiss && need.allowed(u64::MAX) == 0;
    let verdicts = seeds
        .par_iter()
        .map(|&seed| {
            let mut one = fleet.clone();
            one.workload.seed = seed;
            let run = llmsim_planner::Run::new(&one).summary_only(true).stop_at_missed_window(early).go();
            match run {
                Ok(out) => Verdict::of(&out.result).map_err(StaticError::Judge),
                Err(SimError::WindowMissed { window, .. }) => Ok(Verdict::stopped(&window)),
                Err(source) => Err(StaticError::Run { replicas: n, seed, source }),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (gpu_hours, cost, windows, missed, _, meets) = pooled(&verdicts, need);
    let stopped_at_s = verdicts.iter().filter_map(|v| v.stopped_at_s).min_by(f64::total_cmp);
    Ok(StaticProbe { replicas: n, gpu_hours, cost, windows, missed, meets, stopped_at_s })
}

/// Why the static search stopped.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StaticError {
    #[error("the static fleet of {replicas} replicas, seed {seed}: {source}")]
    Run { replicas: u32, seed: u64, source: SimError },
    #[error("the static fleet: {0}")]
    Judge(JudgeError),
}

/// The smallest fixed count of the first pool's replicas, from 1 to
/// `limit`, that meets `need` on every seed (see the module's notes).
/// Probes run on the current rayon pool.
pub fn static_fleet(
    s: &Scenario,
    seeds: &[u64],
    need: Need,
    limit: u32,
    stop: Stop,
) -> Result<StaticFleet, StaticError> {
    let limit = limit.max(1);
    let mut probes: Vec<StaticProbe> = Vec::new();
    let pass = smallest(limit, |round| {
        let got = round.par_iter().map(|&n| probe(s, n, seeds, need, stop)).collect::<Result<Vec<_>, _>>()?;
        let meets = got.iter().map(|p| p.meets).collect();
        probes.extend(got);
        Ok(meets)
    })?;
    let first = s.cluster.as_ref().and_then(|c| c.pools.first());
    let replica = first.map_or(s, |p| &*p.scenario);
    Ok(StaticFleet {
        pool: first.map(|p| p.name.clone()),
        hardware: replica.hardware.name.clone(),
        gpus_per_replica: replica.deployment.gpus(),
        replicas: pass,
        limit,
        at_replicas: pass.and_then(|n| probes.iter().find(|p| p.replicas == n).cloned()),
        probes,
    })
}

/// The smallest count from 1 to `limit` that `meets` (taken to be monotone),
/// asking `round` about up to [`PROBES_A_ROUND`] counts at a time: 1, 2, 4,
/// ... (the limit last) until one meets, then three counts evenly inside
/// the bracket `(highest failing, lowest meeting]` until it is one wide.
/// `None` when no count up to the limit meets.
pub fn smallest<E>(limit: u32, mut round: impl FnMut(&[u32]) -> Result<Vec<bool>, E>) -> Result<Option<u32>, E> {
    let mut seen: Vec<(u32, bool)> = Vec::new();
    let mut ask = |counts: Vec<u32>, seen: &mut Vec<(u32, bool)>| -> Result<(u32, Option<u32>), E> {
        let meets = round(&counts)?;
        seen.extend(counts.into_iter().zip(meets));
        let pass = seen.iter().filter(|p| p.1).map(|p| p.0).min();
        let fail = seen.iter().filter(|p| !p.1 && pass.is_none_or(|h| p.0 < h)).map(|p| p.0).max().unwrap_or(0);
        Ok((fail, pass))
    };
    let (mut fail, mut pass) = (0, None);
    let mut next = 1u32;
    while pass.is_none() && next <= limit {
        let mut counts = Vec::new();
        while counts.len() < PROBES_A_ROUND as usize && next <= limit {
            counts.push(next);
            next = if next == limit { limit + 1 } else { next.saturating_mul(2).min(limit) };
        }
        (fail, pass) = ask(counts, &mut seen)?;
    }
    while let Some(hi) = pass.filter(|&hi| hi - fail > 1) {
        let width = u64::from(hi - fail);
        let mut counts: Vec<u32> = (1..=u64::from(PROBES_A_ROUND))
            .map(|k| fail + (width * k / u64::from(PROBES_A_ROUND + 1)) as u32)
            .collect();
        counts.retain(|&n| n > fail && n < hi);
        counts.dedup();
        (fail, pass) = ask(counts, &mut seen)?;
    }
    Ok(pass)
}

/// The search's answer, as `--json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OverTimePlan {
    pub scenario: String,
    pub seeds: Vec<u64>,
    /// The window SLO, `name<=bound` each.
    pub slo: Vec<String>,
    pub window_s: f64,
    /// The fraction of windows that must meet.
    pub windows_needed: f64,
    pub price: Price,
    pub axes: Vec<AxisData>,
    /// Every policy, in point order.
    pub candidates: Vec<Candidate>,
    /// The plan: an index into `candidates`.
    pub cheapest: Option<usize>,
    pub static_fleet: Option<StaticFleet>,
    /// `1 - plan / static` in the price's unit.
    pub saving: Option<f64>,
}

impl OverTimePlan {
    /// The saving of the plan against the static fleet, when both exist.
    pub fn saving_of(&self) -> Option<f64> {
        let plan = self.cheapest.map(|i| &self.candidates[i])?;
        let fleet = self.static_fleet.as_ref()?.at_replicas.as_ref()?;
        let (a, b) = (self.price.of(plan.gpu_hours, plan.cost)?, self.price.of(fleet.gpu_hours, fleet.cost)?);
        (b > 0.0).then(|| 1.0 - a / b)
    }
}

#[cfg(test)]
mod tests;
