//! `llmsim capacity --over-time`: the cheapest policy for a fleet over
//! time, from a sweep of its knobs (`--set KEY=a,b,c`), against the static
//! fleet that meets the same window SLO.

use std::path::Path;

use super::{CapacityArgs, CliError, print, write_output};
use llmsim_analysis::capacity::over_time::{self, Need, OverTimePlan};
use llmsim_analysis::sweep::SweepData;
use llmsim_analysis::sweep::exec::{ExecOptions, execute};
use llmsim_analysis::sweep::plan::{Plan, Point, seeds_of};
use llmsim_analysis::sweep::shard::merge;
use llmsim_scenario::config::{Override, Scenario};

/// The most replicas a static fleet may have (the scenario's bound on
/// `cluster.replicas`).
const MAX_REPLICAS: u32 = 10_000;

/// The window percentiles `--slo` may bound with `--over-time`.
const WINDOW_SLOS: [&str; 4] = ["ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"];

/// `--slo NAME=BOUND` as `cluster.timeline.slo.NAME=BOUND`.
fn window_slo(text: &str) -> Result<Override, CliError> {
    let usage = |why: &str| {
        CliError::Usage(format!(
            "--slo {text}: {why}; with --over-time an SLO bounds every window's percentile (one of {}) in ms, \
             e.g. ttft_p99_ms=500",
            WINDOW_SLOS.join(", ")
        ))
    };
    let (name, bound) = text.split_once('=').ok_or_else(|| usage("expected NAME=BOUND"))?;
    if !WINDOW_SLOS.contains(&name.trim()) {
        return Err(usage(&format!("`{}` is not a window percentile", name.trim())));
    }
    Override::parse_checked(&format!("cluster.timeline.slo.{}={}", name.trim(), bound.trim()))
        .map_err(|e| usage(&e.to_string()))
}

/// The sweep of policies the arguments describe.
fn plan(a: &CapacityArgs, seeds: u32) -> Result<Plan, CliError> {
    let mut plan = Plan { base: a.scenario.scenario.clone(), fixed: Vec::new(), axes: Vec::new(), seeds };
    for s in &a.scenario.set {
        plan.add_set(s).map_err(CliError::Usage)?;
    }
    for s in &a.slo {
        plan.fixed.push(window_slo(s)?);
    }
    if let Some(seed) = a.scenario.seed {
        plan.fixed.push(Override { path: vec!["workload".into(), "seed".into()], value: seed.into() });
    }
    Ok(plan)
}

/// The largest fleet the scenario can have (its pools' fixed counts and
/// autoscalers' maxima), doubled: where the static search stops by default.
fn default_limit(s: &Scenario) -> u32 {
    let Some(c) = &s.cluster else { return 8 };
    let most = match c.pools.is_empty() {
        true => c.autoscale.as_ref().map_or(c.replicas, |a| a.max_replicas),
        false => c.pools.iter().map(|p| p.autoscale.as_ref().map_or(p.replicas, |a| a.max_replicas)).sum(),
    };
    most.saturating_mul(2).clamp(8, MAX_REPLICAS)
}

/// Multiples of the autoscaler's target tried when no `--set` gives an axis.
pub const DEFAULT_TARGETS: [f64; 5] = [0.5, 0.75, 1.0, 1.5, 2.0];

/// Without axes, a scenario with `cluster.autoscale` searches its target at
/// [`DEFAULT_TARGETS`] times the one given (a `kv_use` target at most 1).
fn default_axis(plan: &Plan, s: &Scenario) -> Option<llmsim_analysis::sweep::axis::Axis> {
    use llmsim_scenario::config::autoscale::Signal;
    let a = s.cluster.as_ref()?.autoscale.as_ref().filter(|_| plan.axes.is_empty())?;
    let cap = if a.signal == Signal::KvUse { 1.0 } else { f64::INFINITY };
    let mut targets: Vec<f64> = DEFAULT_TARGETS.iter().map(|m| (a.target * m).min(cap)).collect();
    targets.dedup();
    let values = targets.into_iter().map(|t| llmsim_scenario::yaml::Value::Number(t.into())).collect();
    llmsim_analysis::sweep::axis::Axis::new("cluster.autoscale.target", values).ok()
}

/// The policies' results: run here, or read from a sweep's shard files.
fn results(a: &CapacityArgs, plan: &Plan, points: &[Point], pool: &rayon::ThreadPool) -> Result<SweepData, CliError> {
    let source = a.scenario.scenario.display();
    if a.shards.is_empty() {
        let opts = ExecOptions { progress: !a.quiet, shard: None };
        return execute(plan, points, pool, opts).map_err(|e| CliError::Usage(format!("{source}: {e}")));
    }
    let shards = super::super::merge::read_shards(&a.shards)?;
    let theirs = shards[0].1.fingerprint.clone();
    let ours = plan.fingerprint(points);
    if theirs != ours {
        return Err(CliError::Usage(format!(
            "--shards: {} is a shard of another sweep (fingerprint {theirs}; this search's is {ours}): run the \
             shards as `llmsim sweep {source}` with the same --set values (the window SLO included, as \
             --set cluster.timeline.slo.NAME=BOUND) and --seeds",
            a.shards[0].display()
        )));
    }
    merge(shards).map_err(|e| CliError::Usage(e.to_string()))
}

pub fn execute_over_time(a: &CapacityArgs) -> Result<(), CliError> {
    if !(a.windows.is_finite() && (0.0..=1.0).contains(&a.windows) && a.windows > 0.0) {
        return Err(CliError::Usage(format!(
            "--windows {:?}: the fraction of windows that must meet the SLO, above 0 and at most 1 (1: every window)",
            a.windows
        )));
    }
    let seeds = a.seeds.unwrap_or(1);
    if !(1..=llmsim_analysis::capacity::search::MAX_SEEDS).contains(&seeds) {
        return Err(CliError::Usage(format!(
            "--seeds {seeds}: must be from 1 to {}",
            llmsim_analysis::capacity::search::MAX_SEEDS
        )));
    }
    let mut plan = plan(a, seeds)?;
    let pool = super::super::runtime::pool(Some(a.threads))?;
    let mut points = pool.install(|| plan.points()).map_err(|e| CliError::Usage(e.to_string()))?;
    if let Some(axis) = default_axis(&plan, &points[0].scenario) {
        plan.axes.push(axis);
        points = pool.install(|| plan.points()).map_err(|e| CliError::Usage(e.to_string()))?;
    }
    let base = &points[0].scenario;
    let source = base.source.display().to_string();
    let Some(timeline) = base.cluster.as_ref().and_then(|c| c.timeline.as_ref()) else {
        return Err(CliError::Usage(format!(
            "{source}: --over-time judges a fleet window by window: give the scenario cluster.autoscale, \
             cluster.pools or cluster.timeline"
        )));
    };
    let bounds = timeline.slo.bounds();
    if bounds.is_empty() {
        return Err(CliError::Usage(format!(
            "{source}: no window SLO: give cluster.timeline.slo in the scenario or --slo NAME=BOUND \
             ({})",
            WINDOW_SLOS.join(", ")
        )));
    }
    let limit = match a.static_max {
        Some(n) if !(1..=MAX_REPLICAS).contains(&n) => {
            return Err(CliError::Usage(format!("--static-max {n}: must be from 1 to {}", MAX_REPLICAS)));
        }
        Some(n) => n,
        None => default_limit(base),
    };
    let need = Need { fraction: a.windows };
    let data = results(a, &plan, &points, &pool)?;
    let describe = |p: &llmsim_analysis::sweep::PointResult| plan.describe(&p.coords);
    let judged = over_time::judge(&data, describe, need)
        .map_err(|(i, e)| CliError::Usage(format!("{source}: point {}: {e}", i + 1)))?;
    let seed_list = seeds_of(base, seeds);
    let stop = if a.full_probes { over_time::Stop::Never } else { over_time::Stop::AtFirstMiss };
    let static_fleet = pool
        .install(|| over_time::static_fleet(base, &seed_list, need, limit, stop))
        .map_err(|e| CliError::Usage(format!("{source}: {e}")))?;
    let mut found = OverTimePlan {
        scenario: source,
        seeds: seed_list,
        slo: bounds.iter().map(|(n, b)| format!("{n}<={b}")).collect(),
        window_s: timeline.window_s,
        windows_needed: a.windows,
        price: judged.price,
        axes: data.axes.clone(),
        candidates: judged.candidates,
        cheapest: judged.cheapest,
        static_fleet: Some(static_fleet),
        saving: None,
    };
    found.saving = found.saving_of();
    if let Some(path) = &a.json {
        write_output(path, llmsim_core::util::to_json(&found).as_bytes())?;
    }
    if !a.quiet && a.json.as_deref() != Some(Path::new("-")) {
        print(&llmsim_analysis::capacity::render::over_time(&found))?;
    }
    if found.cheapest.is_none() {
        return Err(CliError::Failure(
            "no policy of the search met the window SLO: widen its knobs (a higher max_replicas or min_replicas, a lower target) or allow a fraction of windows to miss (--windows)"
                .into(),
        ));
    }
    Ok(())
}
