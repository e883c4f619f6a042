//! Calibration: fit the numbers a datasheet does not give (how close the
//! engine comes to peak compute and bandwidth, what it pays per step and
//! per request) to measured runs, by simulation in the loop.
//!
//! Every candidate replays every run (rayon over runs; each run is one
//! single-threaded simulation, and the loss adds their terms in run order,
//! so the result is the same at any thread count). The loss is the mean
//! over runs of each run's mean squared log error over the chosen metrics
//! it has measured: `mean_r mean_m ln(predicted / measured)^2`. A log error
//! treats 10% high and 10% low alike and weighs a 20 ms TTFT and a 5 s E2E
//! equally. The minimiser ([`optim`]) is deterministic.
//!
//! Runs that were saturated ([`runs`]) are left out of the fit unless asked
//! (their figures say the engine fell behind, not how fast it runs) and are
//! still predicted. Each run is also predicted by a fit on the others
//! (leave one group out: an inference-perf directory's stages, a table's
//! `group`), which says how well the fit carries to runs it has not seen.

pub mod fidelity;
pub mod identify;
pub mod keys;
pub mod optim;
pub mod profile;
pub mod render;
pub mod runs;
pub mod steady;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use crate::sweep::metric::{Family, Metric, Stat};
use keys::FitKey;
use runs::Run;

/// The loss of a run whose prediction lacks a figure (no request
/// completed): as if it were off by a factor of 1,000.
pub const MISSING_PENALTY: f64 = 47.71; // ln(1000)^2

/// What calibration fails on: bad input (exit 2) or work that failed (exit 1).
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    Input(String),
    Work(String),
}

/// Which metrics the loss uses.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricChoice {
    /// TTFT mean and p90, TPOT mean (ITL mean where TPOT is not measured),
    /// E2E mean and p90.
    Default,
    Listed(Vec<Metric>),
}

/// The default loss metrics, in report order.
pub fn default_metrics() -> [Metric; 5] {
    [
        Metric::Latency(Family::Ttft, Stat::Mean),
        Metric::Latency(Family::Ttft, Stat::P90),
        Metric::Latency(Family::Tpot, Stat::Mean),
        Metric::Latency(Family::E2e, Stat::Mean),
        Metric::Latency(Family::E2e, Stat::P90),
    ]
}

/// The metrics `--metrics` accepts: latencies and throughputs.
pub fn loss_metric_allowed(m: Metric) -> bool {
    matches!(m, Metric::Latency(..) | Metric::RequestsPerS | Metric::InputTokensPerS | Metric::OutputTokensPerS)
}

impl MetricChoice {
    /// The loss metrics of `run`: the chosen ones it has measured.
    pub fn for_run(&self, run: &Run) -> Vec<Metric> {
        let has = |m: &Metric| run.measured.contains_key(m);
        match self {
            MetricChoice::Listed(list) => list.iter().copied().filter(has).collect(),
            MetricChoice::Default => default_metrics()
                .into_iter()
                .filter_map(|m| {
                    let itl = Metric::Latency(Family::Itl, Stat::Mean);
                    match m {
                        Metric::Latency(Family::Tpot, Stat::Mean) if !has(&m) && has(&itl) => Some(itl),
                        _ => has(&m).then_some(m),
                    }
                })
                .collect(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            MetricChoice::Default => "ttft_mean_ms, ttft_p90_ms, tpot_mean_ms (itl_mean_ms where TPOT is not \
                                      measured), e2e_mean_ms, e2e_p90_ms"
                .into(),
            MetricChoice::Listed(l) => l.iter().map(|m| m.name()).collect::<Vec<_>>().join(", "),
        }
    }
}

/// How a log error `e = ln(predicted / measured)` counts in the loss.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Loss {
    /// `e^2`: the loss, and the default.
    Squared,
    /// `c^2 ln(1 + (e/c)^2)` (Cauchy): like `e^2` for errors well below
    /// `c`, growing only logarithmically beyond. A run near its knee can be
    /// off tenfold for a few percent of speed; with the squared loss that
    /// one run weighs as much as 580 runs off by 10%, with this one at
    /// `c = ln 1.1` as much as 9. `c` is a log error (`ln 1.1` = 10%).
    Cauchy(f64),
}

impl Loss {
    /// `squared` or `cauchy:PCT` (PCT a percentage in (0, 1000]).
    pub fn parse(text: &str) -> Result<Loss, String> {
        let t = text.trim();
        if t == "squared" {
            return Ok(Loss::Squared);
        }
        let bad = || {
            format!(
                "--loss `{t}` is not allowed: give `squared` or `cauchy:PCT` with PCT a percentage in (0, 1000], e.g. cauchy:25"
            )
        };
        let pct: f64 =
            t.strip_prefix("cauchy:").ok_or_else(bad)?.trim().trim_end_matches('%').parse().map_err(|_| bad())?;
        if !(pct.is_finite() && pct > 0.0 && pct <= 1000.0) {
            return Err(bad());
        }
        Ok(Loss::Cauchy((1.0 + pct / 100.0).ln()))
    }

    /// The least-squares residual whose square is this loss of `e`.
    pub fn residual(self, e: f64) -> f64 {
        match self {
            Loss::Squared => e,
            Loss::Cauchy(c) => e.signum() * c * (1.0 + (e / c).powi(2)).ln().sqrt(),
        }
    }

    pub fn describe(self) -> String {
        match self {
            Loss::Squared => "squared log error".into(),
            Loss::Cauchy(c) => format!("Cauchy loss c^2 ln(1 + (e/c)^2) of the log error e, c = {c:.4}"),
        }
    }
}

/// What leave-one-out leaves out together.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LeaveOut {
    /// A run's group: an experiment's load stages, a table's `group`.
    Experiment,
    /// Every run of one model.
    Model,
    /// Every run of one measured source.
    Source,
}

impl LeaveOut {
    pub fn parse(text: &str) -> Result<LeaveOut, String> {
        match text.trim() {
            "experiment" => Ok(LeaveOut::Experiment),
            "model" => Ok(LeaveOut::Model),
            "source" => Ok(LeaveOut::Source),
            other => Err(format!("--leave-out `{other}` is not allowed: give experiment, model or source")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LeaveOut::Experiment => "experiment",
            LeaveOut::Model => "model",
            LeaveOut::Source => "source",
        }
    }

    /// The group `run` is left out with.
    pub fn group(self, run: &Run) -> &str {
        match self {
            LeaveOut::Experiment => &run.group,
            LeaveOut::Model => &run.model,
            LeaveOut::Source => &run.origin,
        }
    }
}

/// How to calibrate.
#[derive(Clone, Debug)]
pub struct Setup {
    pub keys: Vec<FitKey>,
    pub metrics: MetricChoice,
    pub loss: Loss,
    /// Fit saturated runs too.
    pub include_saturated: bool,
    /// Predict each group from a fit on the others.
    pub leave_one_out: bool,
    /// What a group is, for each leave-one-out pass (the first is the
    /// one reports show by default).
    pub leave_out: Vec<LeaveOut>,
    /// A prior for each key (by position; empty: none).
    pub priors: Vec<Option<keys::Prior>>,
    pub optim: optim::Settings,
    /// Fit this many of the runs first (spread evenly over them), then
    /// finish on all of them from there; only when there are more than
    /// twice as many ([`fit_full`]). `None`: every evaluation replays
    /// every run.
    pub sample_runs: Option<usize>,
}

impl Setup {
    pub fn new(keys: Vec<FitKey>) -> Setup {
        Setup {
            keys,
            metrics: MetricChoice::Default,
            loss: Loss::Squared,
            include_saturated: false,
            leave_one_out: true,
            leave_out: vec![LeaveOut::Experiment],
            priors: Vec::new(),
            optim: optim::Settings::default(),
            sample_runs: None,
        }
    }
}

/// Figures predicted for one run, by metric.
pub type Figures = BTreeMap<Metric, f64>;

/// Simulates `run` with the fitted keys at `x` (none: as the scenario has them).
pub fn predict(run: &Run, keys: &[FitKey], x: &[f64]) -> Result<Figures, Error> {
    let scenario = run.base.scenario(keys, x).map_err(|e| Error::Work(format!("{}: {e}", run.name)))?;
    if run.base.steady
        && let Some(result) = steady::predict(&scenario)
    {
        return Ok(figures(run, &result));
    }
    // A candidate the engine cannot finish within its run limits (say, a
    // bound so slow that simulated time runs past the limit) predicts
    // nothing: every loss metric of the run counts the missing penalty.
    // Only the summary is read, so no request's record is kept.
    let Ok(out) = llmsim_planner::Run::new(&scenario).summary_only(true).go() else {
        return Ok(Figures::new());
    };
    Ok(figures(run, &out.result))
}

/// The figures of `result` that `run` measured, and the default metrics.
fn figures(run: &Run, result: &llmsim_planner::metrics::RunResult) -> Figures {
    let mut wanted: Vec<Metric> = run.measured.keys().copied().collect();
    wanted.extend(default_metrics());
    wanted.into_iter().filter_map(|m| m.value(result).filter(|v| v.is_finite()).map(|v| (m, v))).collect()
}

/// Simulations already run in one calibration, by run and candidate: the
/// minimiser comes back to points it has seen (each difference step starts
/// from the best point; a coordinate search steps back), every
/// leave-one-out fold starts at the full fit and takes its first Jacobian
/// around it, and the report predicts at the fitted values. A simulation
/// is a pure function of its scenario, so a remembered prediction is the
/// one a rerun would give: the output does not depend on what was reused,
/// nor on which thread ran it first.
#[derive(Default)]
pub struct Memo {
    seen: Mutex<HashMap<MemoKey, Figures>>,
    simulated: AtomicUsize,
    reused: AtomicUsize,
}

/// A run (by name: names are unique in a calibration) and each fitted key
/// with its value as the scenario gets it (a whole-number key rounded).
type MemoKey = (String, Vec<(String, u64)>);

impl Memo {
    fn key(run: &Run, keys: &[FitKey], x: &[f64]) -> MemoKey {
        let values = keys
            .iter()
            .zip(x)
            .map(|(k, v)| {
                let v = if k.integer { v.round() } else { *v };
                // -0.0 and 0.0 give the same scenario.
                (k.key.clone(), if v == 0.0 { 0 } else { v.to_bits() })
            })
            .collect();
        (run.name.clone(), values)
    }

    /// [`predict`], or what it gave before for the same run and values.
    pub fn predict(&self, run: &Run, keys: &[FitKey], x: &[f64]) -> Result<Figures, Error> {
        let key = Memo::key(run, keys, x);
        if let Some(f) = self.seen.lock().map_err(poisoned)?.get(&key) {
            self.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(f.clone());
        }
        let f = predict(run, keys, x)?;
        self.simulated.fetch_add(1, Ordering::Relaxed);
        self.seen.lock().map_err(poisoned)?.insert(key, f.clone());
        Ok(f)
    }

    /// Simulations run and predictions reused so far. With several
    /// threads two may simulate the same point at once, so the split (not
    /// the output) can vary with the thread count.
    pub fn counts(&self) -> (usize, usize) {
        (self.simulated.load(Ordering::Relaxed), self.reused.load(Ordering::Relaxed))
    }
}

fn poisoned<T>(_: T) -> Error {
    Error::Work("a simulation thread panicked".into())
}

/// Predictions of `runs` at `x`, in parallel, in run order.
pub fn predict_all(runs: &[&Run], keys: &[FitKey], x: &[f64]) -> Result<Vec<Figures>, Error> {
    predict_all_with(&Memo::default(), runs, keys, x)
}

/// [`predict_all`] through `memo`.
pub fn predict_all_with(memo: &Memo, runs: &[&Run], keys: &[FitKey], x: &[f64]) -> Result<Vec<Figures>, Error> {
    let done = heaviest_first(runs.len(), |i| runs[i])
        .par_iter()
        .with_max_len(1)
        .map(|&i| (i, memo.predict(runs[i], keys, x)))
        .collect();
    in_order(done)
}

/// The indices `0..n` with the runs expected to simulate longest first
/// (stable among equals), each its own task (`with_max_len(1)`: rayon
/// would otherwise hand a thread a whole slice of them), so that on a few
/// cores one long run does not start last and leave the other cores idle
/// while it finishes. Only the order of the work changes; results are put
/// back in run order.
fn heaviest_first<'a>(n: usize, run: impl Fn(usize) -> &'a Run) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let weight: Vec<f64> = order.iter().map(|&i| weight(run(i))).collect();
    order.sort_by(|&a, &b| weight[b].total_cmp(&weight[a]));
    order
}

/// A rough cost of simulating `run`: its requests times their mean
/// output (a decode step per token dominates), from the scenario alone.
fn weight(run: &Run) -> f64 {
    let s = &run.base.validated;
    let w = &s.workload;
    let requests = match (w.requests, run.base.trace.as_ref()) {
        (_, Some(rows)) => rows.len() as f64,
        (Some(n), None) => n as f64,
        (None, None) => w.rate().unwrap_or(1.0) * w.duration_s.unwrap_or(1.0),
    };
    let (prompt, output) = s.mean_lengths();
    requests * (output + prompt / 256.0 + 1.0)
}

/// `(index, result)` pairs back in index order; the first error by index.
fn in_order(mut done: Vec<(usize, Result<Figures, Error>)>) -> Result<Vec<Figures>, Error> {
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// The residuals at `x`: for each run and each of its loss metrics,
/// `ln(predicted / measured) / sqrt(R * M_r)` (R runs, M_r metrics of run
/// r), so their sum of squares is the loss. A missing prediction counts as
/// [`MISSING_PENALTY`].
pub fn residuals(
    runs: &[&Run],
    metrics: &MetricChoice,
    kind: Loss,
    keys: &[FitKey],
    x: &[f64],
) -> Result<Vec<f64>, Error> {
    residuals_with(&Memo::default(), runs, metrics, kind, keys, x)
}

/// [`residuals`] through `memo`.
pub fn residuals_with(
    memo: &Memo,
    runs: &[&Run],
    metrics: &MetricChoice,
    kind: Loss,
    keys: &[FitKey],
    x: &[f64],
) -> Result<Vec<f64>, Error> {
    let figures = predict_all_with(memo, runs, keys, x)?;
    let mut out = Vec::new();
    for (r, fig) in runs.iter().zip(&figures) {
        let ms = metrics.for_run(r);
        let w = 1.0 / ((runs.len() * ms.len().max(1)) as f64).sqrt();
        for m in &ms {
            let e = match (fig.get(m), r.measured.get(m)) {
                (Some(p), Some(q)) if *p > 0.0 && *q > 0.0 => (p / q).ln(),
                _ => MISSING_PENALTY.sqrt(),
            };
            out.push(kind.residual(e) * w);
        }
    }
    Ok(out)
}

/// The loss over `runs` at `x`.
pub fn loss(runs: &[&Run], metrics: &MetricChoice, kind: Loss, keys: &[FitKey], x: &[f64]) -> Result<f64, Error> {
    Ok(residuals(runs, metrics, kind, keys, x)?.iter().map(|r| r * r).sum())
}

/// A fit's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// Rounded to 5 significant digits (what a profile stores).
    pub x: Vec<f64>,
    pub loss: f64,
    pub evals: usize,
    /// Whether the optimiser's stopping rule ended the fit, not its
    /// budget ([`optim::Minimum::converged`]).
    pub converged: bool,
}

/// Fits `keys` to `runs` from `start` (values, not unit coordinates),
/// reusing the simulations in `memo`.
pub fn fit(memo: &Memo, runs: &[&Run], setup: &Setup, start: &[f64], settings: &optim::Settings) -> Result<Fit, Error> {
    Ok(fit_at(memo, runs, setup, start, settings)?.0)
}

/// [`fit`], and the minimiser's last Jacobian when it was simulated at the
/// minimum ([`optim::Minimum::jacobian`]).
fn fit_at(
    memo: &Memo,
    runs: &[&Run],
    setup: &Setup,
    start: &[f64],
    settings: &optim::Settings,
) -> Result<(Fit, Option<Jacobian>), Error> {
    let keys = &setup.keys;
    let to_x = |u: &[f64]| -> Vec<f64> { keys.iter().zip(u).map(|(k, u)| k.from_unit(*u)).collect() };
    let u0: Vec<f64> = keys.iter().zip(start).map(|(k, x)| k.to_unit(*x)).collect();
    let objective = |u: &[f64]| objective_residuals(memo, runs, setup, &to_x(u));
    let m = optim::minimize(objective, &u0, settings)?;
    let x: Vec<f64> = to_x(&m.x).into_iter().zip(keys).map(|(v, k)| round_sig(v, k)).collect();
    let r = objective_residuals(memo, runs, setup, &x)?;
    Ok((Fit { x, loss: r.iter().map(|r| r * r).sum(), evals: m.evals, converged: m.converged }, m.jacobian))
}

/// A Jacobian of the objective in the unit box: its difference step and
/// its columns, one a key.
type Jacobian = (f64, Vec<Vec<f64>>);

/// The first fit of a sampled calibration ([`Setup::sample_runs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// How many runs it fitted.
    pub runs: usize,
    /// Its evaluations (each replays the sample alone) and its loss on them.
    pub evals: usize,
    pub loss: f64,
}

/// The full fit of `runs` from `start`. With [`Setup::sample_runs`] `n`
/// and more than `2n` runs, it first walks towards the minimum on `n`
/// runs spread evenly over them ([`spread`]: each model, source and load
/// the runs hold in turn is sampled), at the widest difference step with
/// secant steps, then goes on from there on every run the same way, a
/// stage that ends after [`FINISH_FAILURES`] failed trials, with no
/// coordinate search. Most of a fit's evaluations walk towards the
/// minimum; the sample takes that walk at a fraction of the cost, and the
/// runs it left out move the end point by a step or two
/// (docs/calibration.md, "Sampled fits").
///
/// Also returns the finish's last Jacobian when it was simulated at the
/// minimum, which [`identify::identify_from`] reads instead of simulating
/// the same points again.
pub fn fit_full(
    memo: &Memo,
    runs: &[&Run],
    setup: &Setup,
    start: &[f64],
) -> Result<(Fit, Option<Sampled>, Option<Jacobian>), Error> {
    let n = match setup.sample_runs {
        Some(n) if n > 0 && runs.len() > 2 * n && !setup.keys.is_empty() => n,
        _ => return Ok((fit(memo, runs, setup, start, &setup.optim)?, None, None)),
    };
    let sample = spread(runs, n);
    let widest = setup.optim.diff_steps.first().map_or_else(Vec::new, |h| vec![*h]);
    let walk = optim::Settings { diff_steps: widest.clone(), polish: false, secant: true, ..setup.optim.clone() };
    let coarse = fit(memo, &sample, setup, start, &walk)?;
    let finish = optim::Settings {
        max_evals: setup.optim.max_evals.saturating_sub(coarse.evals).max(10),
        max_failures: FINISH_FAILURES,
        ..walk
    };
    let (mut full, jacobian) = fit_at(memo, runs, setup, &coarse.x, &finish)?;
    // A walk the budget ended left the finish less than it needed.
    full.converged &= coarse.converged;
    Ok((full, Some(Sampled { runs: sample.len(), evals: coarse.evals, loss: coarse.loss }), jacobian))
}

/// Failed trial steps from one Jacobian that end a sampled fit's finish
/// on every run ([`optim::Settings::max_failures`]): three, a step damped
/// 64-fold, each trial a whole evaluation of every run.
pub const FINISH_FAILURES: usize = 3;

/// `n` of `runs` spread evenly over them, in their order: the runs at
/// `floor((i + 1/2) len / n)`.
pub fn spread<'a>(runs: &[&'a Run], n: usize) -> Vec<&'a Run> {
    let len = runs.len();
    (0..n.min(len)).map(|i| runs[(2 * i + 1) * len / (2 * n.min(len))]).collect()
}

/// What the fit minimises: the runs' residuals, then a row for each key's
/// prior ([`identify::prior_rows`]).
pub fn objective_residuals(memo: &Memo, runs: &[&Run], setup: &Setup, x: &[f64]) -> Result<Vec<f64>, Error> {
    let mut r = residuals_with(memo, runs, &setup.metrics, setup.loss, &setup.keys, x)?;
    if setup.priors.iter().any(Option::is_some) {
        r.extend(identify::prior_rows(setup, identify::row_scale(runs, setup), x));
    }
    Ok(r)
}

/// `v` to 5 significant digits (whole numbers for an integer key), kept in bounds.
pub fn round_sig(v: f64, k: &FitKey) -> f64 {
    if k.integer || v == 0.0 {
        return v.round().clamp(k.lo, k.hi);
    }
    let r: f64 = format!("{v:.4e}").parse().unwrap_or(v);
    r.clamp(k.lo, k.hi)
}

/// One run's figures under each model.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutcome {
    pub index: usize,
    /// In the fit (not saturated, or saturated runs included; not held out).
    pub in_fit: bool,
    pub holdout: bool,
    pub loss_metrics: Vec<Metric>,
    pub uncalibrated: Figures,
    pub calibrated: Figures,
    /// Predicted by a fit on the other groups, and that fit's values
    /// (the first leave-one-out pass).
    pub loo: Option<(Figures, Vec<f64>)>,
    /// Predicted by each pass's fit without the run's group, by pass.
    pub loo_by: Vec<Option<Figures>>,
}

/// Each left-out run's figures and the values of the fold that predicted it, by run index.
type FoldFigures = BTreeMap<usize, (Figures, Vec<f64>)>;

/// One leave-one-out pass: what it leaves out, and each fold's group and
/// fitted values.
#[derive(Clone, Debug, PartialEq)]
pub struct FoldSet {
    pub leave_out: LeaveOut,
    pub folds: Vec<(String, Vec<f64>)>,
    /// How many folds the budget ended before the stopping rule did
    /// ([`Fit::converged`]); `None` when not known (a fold replayed from a
    /// record that did not keep it).
    pub at_budget: Option<usize>,
}

/// A fit found before (`llmsim fidelity` keeps them in
/// results/fidelity-fits.yml): replaying it predicts every run at the same
/// values without fitting again.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    pub fit: Fit,
    pub start_loss: f64,
    pub folds: Vec<FoldSet>,
}

/// Everything a calibration found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub setup: Setup,
    pub runs: Vec<Run>,
    /// How many of `runs` (the first ones) are the fit's inputs; the rest
    /// are held out.
    pub fitted_inputs: usize,
    pub start: Vec<f64>,
    pub start_loss: f64,
    pub fit: Fit,
    /// The sample's fit the full one started from, if any.
    pub sampled: Option<Sampled>,
    /// Whether the runs identify each key.
    pub identified: Vec<identify::Identification>,
    pub outcomes: Vec<RunOutcome>,
    /// Measured runs the engine cannot represent: listed, never simulated
    /// ([`calibrate`] leaves this empty; the caller adds what it loaded).
    pub excluded: Vec<runs::Excluded>,
    /// Simulations run and reused ([`Memo::counts`]).
    pub simulations: (usize, usize),
    /// Each leave-one-out pass's folds.
    pub folds: Vec<FoldSet>,
}

impl Outcome {
    pub fn fit_runs(&self) -> impl Iterator<Item = (&Run, &RunOutcome)> {
        self.runs.iter().zip(&self.outcomes).filter(|(_, o)| o.in_fit)
    }
}

/// Checks the inputs, fits, predicts every run each way and leaves each
/// group out in turn. `runs` come first, then `holdout`.
pub fn calibrate(runs: Vec<Run>, holdout: Vec<Run>, setup: &Setup) -> Result<Outcome, Error> {
    calibrate_or_replay(runs, holdout, setup, None)
}

/// [`calibrate`], or with `recorded`, the same outcome from values found
/// before: every run predicted at them, no fit.
pub fn calibrate_or_replay(
    runs: Vec<Run>,
    holdout: Vec<Run>,
    setup: &Setup,
    recorded: Option<&Recorded>,
) -> Result<Outcome, Error> {
    let fitted_inputs = runs.len();
    let in_fit: Vec<bool> = runs.iter().map(|r| setup.include_saturated || r.not_fitted.is_none()).collect();
    let all: Vec<Run> = runs.into_iter().chain(holdout).collect();
    check_names(&all)?;
    if !in_fit.iter().any(|b| *b) {
        let list: Vec<String> =
            all.iter().take(fitted_inputs).map(|r| format!("  {}: {}", r.name, r.why_not_fitted())).collect();
        return Err(Error::Input(format!(
            "every run is saturated, so none can be fitted (a saturated run shows the engine fell behind, not how \
             fast it runs; --include-saturated fits them anyway):\n{}",
            list.join("\n")
        )));
    }
    let fit_runs: Vec<&Run> =
        all.iter().take(fitted_inputs).zip(&in_fit).filter(|(_, b)| **b).map(|(r, _)| r).collect();
    for r in fit_runs.iter().chain(all[fitted_inputs..].iter().collect::<Vec<_>>().iter()) {
        if setup.metrics.for_run(r).is_empty() {
            let has: Vec<String> = r.measured.keys().map(|m| m.name()).collect();
            return Err(Error::Input(format!(
                "run {} ({}) has none of the loss metrics ({}); it has: {}; choose others with --metrics",
                r.name,
                r.source,
                setup.metrics.describe(),
                if has.is_empty() { "nothing".into() } else { has.join(", ") }
            )));
        }
    }
    let start = start_values(&fit_runs, &setup.keys)?;
    check_bounds_are_valid(fit_runs[0], &setup.keys, &start)?;
    let memo = Memo::default();
    let (start_loss, fit, sampled, jacobian) = match recorded {
        // Nothing fitted: the loss is the scenario's own.
        Some(_) if setup.keys.is_empty() => {
            let loss = objective_residuals(&memo, &fit_runs, setup, &[])?.iter().map(|r| r * r).sum();
            (loss, Fit { x: Vec::new(), loss, evals: 0, converged: true }, None, None)
        }
        Some(r) => (r.start_loss, r.fit.clone(), None, None),
        None => {
            let start_loss = objective_residuals(&memo, &fit_runs, setup, &start)?.iter().map(|r| r * r).sum();
            let (fit, sampled, jacobian) = fit_full(&memo, &fit_runs, setup, &start)?;
            (start_loss, fit, sampled, jacobian)
        }
    };
    let identified = match jacobian.and_then(|(h, cols)| identify::identify_from(&fit_runs, setup, &fit.x, h, &cols)) {
        Some(found) => found,
        None => identify::identify(&memo, &fit_runs, setup, &fit.x)?,
    };
    let refs: Vec<&Run> = all.iter().collect();
    let uncalibrated = predict_all_with(&memo, &refs, &[], &[])?;
    let calibrated = predict_all_with(&memo, &refs, &setup.keys, &fit.x)?;
    let mut passes: Vec<(FoldSet, FoldFigures)> = Vec::new();
    if setup.leave_one_out {
        for (p, mode) in setup.leave_out.iter().enumerate() {
            let given = recorded.and_then(|r| r.folds.get(p)).filter(|f| f.leave_out == *mode);
            passes.push(leave_one_out(&memo, &all, &in_fit, setup, *mode, &fit, given)?);
        }
    }
    let outcomes = (0..all.len())
        .map(|i| RunOutcome {
            index: i,
            in_fit: i < fitted_inputs && in_fit[i],
            holdout: i >= fitted_inputs,
            loss_metrics: setup.metrics.for_run(&all[i]),
            uncalibrated: uncalibrated[i].clone(),
            calibrated: calibrated[i].clone(),
            loo: passes.first().and_then(|(_, m)| m.get(&i).cloned()),
            loo_by: passes.iter().map(|(_, m)| m.get(&i).map(|(f, _)| f.clone())).collect(),
        })
        .collect();
    let folds = passes.into_iter().map(|(f, _)| f).collect();
    Ok(Outcome {
        setup: setup.clone(),
        runs: all,
        fitted_inputs,
        start,
        start_loss,
        fit,
        sampled,
        identified,
        outcomes,
        excluded: Vec::new(),
        simulations: memo.counts(),
        folds,
    })
}

fn check_names(all: &[Run]) -> Result<(), Error> {
    let mut seen = std::collections::BTreeSet::new();
    for r in all {
        if !seen.insert(r.name.as_str()) {
            return Err(Error::Input(format!("two measured runs are named `{}`: give them different names", r.name)));
        }
    }
    Ok(())
}

/// The fit starts where the scenario is; every fitted run must agree on it
/// and lie within the bounds.
fn start_values(runs: &[&Run], keys: &[FitKey]) -> Result<Vec<f64>, Error> {
    let value = |r: &Run, k: &FitKey| {
        r.base.value_of(&k.key).unwrap_or(if k.key.starts_with("latency.") { 0.0 } else { (k.lo + k.hi) / 2.0 })
    };
    let mut start = Vec::new();
    for k in keys {
        let x = value(runs[0], k);
        for r in runs {
            let v = value(r, k);
            if !k.contains(v) {
                return Err(Error::Input(format!(
                    "--fit {}={}:{}: the bounds exclude the start: run {} has {} = {v}; widen the bounds or change the \
                     scenario",
                    k.key, k.lo, k.hi, r.name, k.key
                )));
            }
        }
        start.push(x);
    }
    Ok(start)
}

/// Each bound must be a value the scenario accepts.
fn check_bounds_are_valid(run: &Run, keys: &[FitKey], start: &[f64]) -> Result<(), Error> {
    for (i, k) in keys.iter().enumerate() {
        for bound in [k.lo, k.hi] {
            let mut x = start.to_vec();
            x[i] = bound;
            if let Err(e) = run.base.scenario(keys, &x) {
                return Err(Error::Input(format!(
                    "--fit {}={}:{}: the bound {bound} is not a valid value: {}",
                    k.key, k.lo, k.hi, e.message
                )));
            }
        }
    }
    Ok(())
}

/// For every group of fitted runs (grouped by `mode`), the others' fit
/// and its predictions of the group's runs, by run index; with `given`,
/// each fold's values as found before (no fit). Needs two groups or more.
/// Each fold starts at the full fit with half the evaluation budget.
fn leave_one_out(
    memo: &Memo,
    all: &[Run],
    in_fit: &[bool],
    setup: &Setup,
    mode: LeaveOut,
    full: &Fit,
    given: Option<&FoldSet>,
) -> Result<(FoldSet, FoldFigures), Error> {
    let mut groups: Vec<String> = Vec::new();
    for (r, _) in all.iter().zip(in_fit).filter(|(_, b)| **b) {
        let g = mode.group(r);
        if !groups.iter().any(|x| x == g) {
            groups.push(g.to_string());
        }
    }
    let empty = FoldSet { leave_out: mode, folds: Vec::new(), at_budget: Some(0) };
    if groups.len() < 2 {
        return Ok((empty, BTreeMap::new()));
    }
    // Each fold starts at the full fit, a few steps from its own minimum:
    // Levenberg-Marquardt at the widest difference step (the finest alone
    // is lost in the simulation's jumps) then the finest, no coordinate
    // search, half the budget. Its first Jacobian is the full fit's runs
    // around the full fit, simulated once here for every fold (a fold's
    // runs are among them), in parallel.
    let settings = optim::Settings {
        max_evals: fold_budget(setup.optim.max_evals),
        diff_steps: match setup.optim.diff_steps.as_slice() {
            [first, .., last] => vec![*first, *last],
            one => one.to_vec(),
        },
        polish: false,
        ..setup.optim.clone()
    };
    if let (None, Some(h)) = (given, setup.optim.diff_steps.first()) {
        let fitted: Vec<&Run> = all.iter().zip(in_fit).filter(|(_, b)| **b).map(|(r, _)| r).collect();
        prime_jacobian(memo, &fitted, &setup.keys, &full.x, *h)?;
    }
    // Each fold's values, and whether its fit converged (`None`: given).
    type Fold = (Vec<f64>, Option<bool>, Vec<(usize, (Figures, Vec<f64>))>);
    let folds: Vec<Result<Fold, Error>> = groups
        .par_iter()
        .map(|g| {
            let (x, converged) = match given.and_then(|f| f.folds.iter().find(|(name, _)| name == g)) {
                Some((_, x)) => (x.clone(), None),
                None => {
                    let train: Vec<&Run> =
                        all.iter().zip(in_fit).filter(|(r, b)| **b && mode.group(r) != g).map(|(r, _)| r).collect();
                    let f = fit(memo, &train, setup, &full.x, &settings)?;
                    (f.x, Some(f.converged))
                }
            };
            let members: Vec<usize> = (0..in_fit.len()).filter(|&i| in_fit[i] && mode.group(&all[i]) == g).collect();
            let refs: Vec<&Run> = members.iter().map(|&i| &all[i]).collect();
            let figures = predict_all_with(memo, &refs, &setup.keys, &x)?;
            Ok((x.clone(), converged, members.into_iter().zip(figures).map(|(i, fig)| (i, (fig, x.clone()))).collect()))
        })
        .collect();
    let mut out = BTreeMap::new();
    let mut set = empty;
    let (mut replayed, mut ended) = (0, 0);
    for (g, fold) in groups.into_iter().zip(folds) {
        let (x, converged, members) = fold?;
        set.folds.push((g, x));
        match converged {
            Some(c) => ended += usize::from(!c),
            None => replayed += 1,
        }
        out.extend(members);
    }
    // Replayed folds keep what their record knew; a mix is not known.
    set.at_budget = match given {
        Some(g) if replayed == set.folds.len() => g.at_budget,
        _ if replayed == 0 => Some(ended),
        _ => None,
    };
    Ok((set, out))
}

/// A leave-one-out fold's budget under a fit's `max_evals`: half, at least 10.
pub fn fold_budget(max_evals: usize) -> usize {
    (max_evals / 2).max(10)
}

/// Simulates `runs` at the points of a Jacobian with difference step `h`
/// around `x` (values), as [`fit`] from `x` will ask for them, all in
/// parallel, into `memo`.
fn prime_jacobian(memo: &Memo, runs: &[&Run], keys: &[FitKey], x: &[f64], h: f64) -> Result<(), Error> {
    let u: Vec<f64> = keys.iter().zip(x).map(|(k, x)| k.to_unit(*x)).collect();
    let points: Vec<Vec<f64>> = optim::difference_points(&u, h)
        .into_iter()
        .map(|p| keys.iter().zip(&p).map(|(k, u)| k.from_unit(*u)).collect())
        .collect();
    // Each run weighed once; its points are as heavy as each other.
    let work: Vec<(&Run, &Vec<f64>)> = heaviest_first(runs.len(), |i| runs[i])
        .into_iter()
        .flat_map(|i| points.iter().map(move |p| (runs[i], p)))
        .collect();
    work.par_iter().with_max_len(1).try_for_each(|&(r, p)| memo.predict(r, keys, p).map(|_| ()))
}

/// `(predicted - measured) / measured` in percent.
pub fn error_pct(predicted: Option<f64>, measured: f64) -> Option<f64> {
    predicted.map(|p| (p - measured) / measured * 100.0)
}

/// The median of absolute values (`None` for none).
pub fn median_abs(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().map(|x| x.abs()).collect();
    v.sort_by(f64::total_cmp);
    llmsim_planner::metrics::percentile::percentile_sorted(&v, 50.0)
}

#[cfg(test)]
mod tests;
