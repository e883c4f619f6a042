//! Running a sweep's points on a rayon pool the caller built (the CLI's
//! `cli::runtime`), with a progress bar when a person is watching.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use super::plan::{Plan, Point, seeds_of};
use super::shard::ShardSpec;
use super::{PointResult, SweepData};
use llmsim_planner::metrics::RunResult;

/// A run of a sweep that stopped at a run limit: point `number` (from 1)
/// of `total`, its axis values and seed, and the limit it reached.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("point {number} of {total} ({values}), seed {seed}: {source}")]
pub struct RunFailed {
    pub number: usize,
    pub total: usize,
    pub values: String,
    pub seed: u64,
    pub source: llmsim_planner::run_driver::SimError,
}

/// How to run.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecOptions {
    /// Draw a progress bar on stderr if it is a terminal.
    pub progress: bool,
    /// Run only this shard's points.
    pub shard: Option<ShardSpec>,
}

/// Runs the points (of the shard, if any) with every seed on `pool` and
/// gathers the results in point order. A run that stops at a run limit
/// ([`llmsim_planner::run_driver::SimError`]) fails the sweep, naming the first such point
/// and seed in point order (the same at any thread count).
pub fn execute(
    plan: &Plan,
    points: &[Point],
    pool: &rayon::ThreadPool,
    opts: ExecOptions,
) -> Result<SweepData, RunFailed> {
    let mine: Vec<&Point> = points.iter().filter(|p| opts.shard.is_none_or(|s| s.owns(p.index))).collect();
    let tasks: Vec<(usize, u64)> = mine
        .iter()
        .enumerate()
        .flat_map(|(i, p)| seeds_of(&p.scenario, plan.seeds).into_iter().map(move |s| (i, s)))
        .collect();
    let bar = progress_bar(tasks.len() as u64, opts.progress);
    let results: Vec<Result<RunResult, llmsim_planner::run_driver::SimError>> = pool.install(|| {
        tasks
            .par_iter()
            .map(|&(i, seed)| {
                let r = run_one(&mine[i].scenario, seed);
                bar.inc(1);
                r
            })
            .collect()
    });
    bar.finish_and_clear();
    let n = points.len();
    let results = results
        .into_iter()
        .zip(&tasks)
        .map(|(r, &(i, seed))| {
            r.map_err(|source| {
                let p = mine[i];
                RunFailed { number: p.index + 1, total: n, values: plan.describe(&p.coords), seed, source }
            })
        })
        .collect::<Result<Vec<RunResult>, RunFailed>>()?;
    let per = plan.seeds as usize;
    let points = mine
        .iter()
        .zip(results.chunks(per.max(1)))
        .map(|(p, rs)| PointResult {
            index: p.index,
            coords: p.coords.clone(),
            seeds: seeds_of(&p.scenario, plan.seeds),
            results: rs.to_vec(),
        })
        .collect();
    Ok(SweepData { axes: plan.axes_data(), seeds: plan.seeds, points })
}

/// One run of one point with one seed.
pub fn run_one(
    scenario: &llmsim_scenario::config::Scenario,
    seed: u64,
) -> Result<RunResult, llmsim_planner::run_driver::SimError> {
    let mut s = scenario.clone();
    s.workload.seed = seed;
    // Only the result is kept: no request's record outlives it (memory
    // flat in requests; the result is the same).
    llmsim_planner::Run::new(&s).summary_only(true).go().map(|out| out.result)
}

/// Points done, rate and ETA; hidden unless stderr is a terminal.
fn progress_bar(len: u64, wanted: bool) -> ProgressBar {
    if !wanted || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {per_sec}, ETA {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr()).with_style(style)
}
