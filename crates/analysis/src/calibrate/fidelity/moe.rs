//! The MoE stage of a per-operator suite: after the main fit, the fixed
//! time for each touched expert (`latency.per_expert_us`, [`FIXED`]) is
//! set to 0 and the routed experts' GEMMs' rate over the dense GEMMs'
//! (`efficiency.expert_gemm`, [`KEY`]) is fitted alone on every MoE run of
//! the suite (the held-out ones included: MLA, expert and data
//! parallelism, formats of their own), the other keys fixed at the main
//! fit's values; each MoE model is then predicted by the stage fitted on
//! the other MoE models (leave one model out), which is the figure that
//! says whether the term transfers to a model it never saw.
//!
//! Why a stage and not a refit: the main fit's MoE runs (Mixtral, vLLM
//! 0.12's Qwen3-235B) alone set the experts' cost, and it did not
//! transfer (docs/calibration.md). One key over a few hundred closed loops
//! takes minutes; refitting all fourteen keys with every MoE row in the
//! fit takes hours a suite on two cores. The main fit's other keys do not
//! depend on it for a dense run (a dense step touches no expert), so the
//! dense runs' predictions are the main fit's.
//!
//! Why the experts' rate and not a fixed time an expert: the time each
//! model wants beyond the GEMMs' goes as one over the tensor split within
//! a model and, per byte of the expert a GPU holds, is the same for
//! models that take the same kernels (docs/calibration.md, "Per byte of
//! the expert"), as a slower GEMM's is; a fixed time an expert is
//! neither.

use serde::{Deserialize, Serialize};

use super::super::render::{Model, errors_where};
use super::super::runs::Run;
use super::super::{Error, Figures, Fit, FoldSet, LeaveOut, Outcome, Recorded, Setup, keys, median_abs};
use super::{Suite, med, pct};
use crate::sweep::metric::{Family, Metric, Stat};

/// The key the stage fits.
pub const KEY: &str = "efficiency.expert_gemm";

/// The main fits' fixed time for each touched expert: the stage sets it to
/// 0, the experts' GEMMs at their own rate taking its place.
pub const FIXED: &str = "latency.per_expert_us";

/// Most loss evaluations of the stage's fit (each leave-one-model-out fold
/// gets half): one key converges in a few dozen (Hopper vLLM's in 70; at
/// the 40 of before, four suites' stages were cut short, as their records
/// say).
pub const MAX_EVALS: usize = 100;

/// The stage as `results/fidelity-fits.yml` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageRecord {
    pub key: String,
    pub fitted: f64,
    pub start_loss: f64,
    pub loss: f64,
    pub evaluations: usize,
    /// Whether the stopping rule ended the stage's fit, not its budget.
    pub converged: bool,
    /// How many leave-one-model-out folds their budget ended; absent from
    /// the stages fitted before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_budget: Option<usize>,
    /// Each left-out model and the value fitted without it.
    pub folds: Vec<(String, f64)>,
}

impl StageRecord {
    pub fn of(stage: &Stage) -> StageRecord {
        let o = &stage.outcome;
        StageRecord {
            key: KEY.into(),
            fitted: o.fit.x[0],
            start_loss: o.start_loss,
            loss: o.fit.loss,
            evaluations: o.fit.evals,
            converged: o.fit.converged,
            at_budget: o.folds.first().and_then(|f| f.at_budget),
            folds: o
                .folds
                .first()
                .map(|f| f.folds.iter().map(|(g, x)| (g.clone(), x[0])).collect())
                .unwrap_or_default(),
        }
    }

    fn recorded(&self) -> Option<Recorded> {
        (self.key == KEY).then(|| Recorded {
            fit: Fit { x: vec![self.fitted], loss: self.loss, evals: self.evaluations, converged: self.converged },
            start_loss: self.start_loss,
            folds: vec![FoldSet {
                leave_out: LeaveOut::Model,
                folds: self.folds.iter().map(|(g, x)| (g.clone(), vec![*x])).collect(),
                at_budget: self.at_budget,
            }],
        })
    }
}

/// What the stage found.
pub struct Stage {
    /// The stage's calibration over the suite's MoE runs: `uncalibrated`
    /// is the main fit's prediction, `calibrated` the stage's (what the
    /// shipped profiles give), pass 0 leave-one-model-out.
    pub outcome: Outcome,
    /// Each stage run's index among the suite's runs.
    pub index: Vec<usize>,
}

impl Stage {
    /// The stage's outcome of the suite's run `i`, if it is a MoE run.
    pub fn of_run(&self, i: usize) -> Option<&super::super::RunOutcome> {
        self.index.iter().position(|&j| j == i).map(|p| &self.outcome.outcomes[p])
    }
}

/// Whether `run` serves a mixture-of-experts model.
pub fn is_moe(run: &Run) -> bool {
    run.base.validated.model.architecture.as_ref().is_some_and(|a| a.experts > 0)
}

/// Whether a suite runs the stage: its main fit prices the experts.
pub fn applies(suite: &Suite) -> bool {
    suite.keys.contains(&FIXED)
}

/// The main fit's values with [`FIXED`] at 0.
fn without_fixed(main: &Outcome) -> Vec<f64> {
    let mut x = main.fit.x.clone();
    if let Some(k) = main.setup.keys.iter().position(|k| k.key == FIXED) {
        x[k] = 0.0;
    }
    x
}

/// How the stage fits: the suite's loss and priors, one key, leave one model out.
pub fn setup(suite: &Suite) -> Result<Setup, Error> {
    let keys = keys::parse(&[KEY.to_string()]).map_err(|e| Error::Input(e.to_string()))?;
    let loss = super::super::Loss::parse(suite.loss).map_err(Error::Input)?;
    let priors = keys.iter().map(|k| if suite.priors { keys::default_prior(&k.key) } else { None }).collect();
    let optim = super::super::optim::Settings { max_evals: MAX_EVALS, ..super::super::optim::Settings::default() };
    Ok(Setup { loss, leave_out: vec![LeaveOut::Model], priors, optim, ..Setup::new(keys) })
}

/// Fits (or, with `replay`, takes the recorded) stage on `main`'s MoE
/// runs; `None` when the suite has none in the fit.
/// Without a record and `may_fit` false (`--check`, `--replay`), a suite
/// with MoE runs is an error.
pub fn run(suite: &Suite, main: &Outcome, replay: Option<&StageRecord>, may_fit: bool) -> Result<Option<Stage>, Error> {
    let mut runs = Vec::new();
    let mut index = Vec::new();
    let x = without_fixed(main);
    for (i, r) in main.runs.iter().enumerate().filter(|(_, r)| is_moe(r)) {
        let base = r.base.with_values(&main.setup.keys, &x).map_err(|e| Error::Work(format!("{}: {e}", r.name)))?;
        // A held-out run is fitted here; a run that is not fitted for what
        // was measured (saturated, an unclear client) stays out.
        let saturated = if r.is_held_out() { None } else { r.not_fitted.clone() };
        runs.push(Run { base, not_fitted: saturated, ..r.clone() });
        index.push(i);
    }
    if !runs.iter().any(|r| r.not_fitted.is_none()) {
        return Ok(None);
    }
    let setup = setup(suite)?;
    let recorded = replay.and_then(StageRecord::recorded);
    if recorded.is_none() && !may_fit {
        return Err(Error::Input(format!(
            "{} has no MoE stage of suite `{}`: run `llmsim fidelity --refit {}.moe` and commit the result",
            super::RECORD,
            suite.id,
            suite.id
        )));
    }
    let outcome = super::super::calibrate_or_replay(runs, Vec::new(), &setup, recorded.as_ref())?;
    Ok(Some(Stage { outcome, index }))
}

/// `main` as the shipped profiles give it: [`FIXED`] at 0, and every MoE
/// run predicted at the stage's value (which the profiles add).
pub fn apply(main: &mut Outcome, stage: &Stage) {
    main.fit.x = without_fixed(main);
    // Set, not fitted: at its lower bound, no interval.
    if let Some(id) = main.identified.iter_mut().find(|d| d.key == FIXED) {
        *id = super::super::identify::Identification {
            fitted: 0.0,
            std: None,
            identified: false,
            at_bound: true,
            ..id.clone()
        };
    }
    for (oc, &i) in stage.outcome.outcomes.iter().zip(&stage.index) {
        main.outcomes[i].calibrated = oc.calibrated.clone();
    }
}

/// The stage's section of a suite in `results/fidelity.md`; `main_fixed`
/// is the main fit's [`FIXED`].
pub fn section(stage: &Stage, main_fixed: f64) -> String {
    let o = &stage.outcome;
    let (ttft, tpot) = (Metric::Latency(Family::Ttft, Stat::Mean), Metric::Latency(Family::Tpot, Stat::Mean));
    let fitted = o.outcomes.iter().filter(|x| x.in_fit).count();
    let k = &o.setup.keys[0];
    let id = o.identified.first();
    let interval = id.and_then(|d| d.interval(k)).map_or_else(String::new, |(a, b)| {
        format!(", 95% interval {} to {}", super::super::render::num(a), super::super::render::num(b))
    });
    let mut models: Vec<&str> = Vec::new();
    for (r, _) in o.fit_runs() {
        if !models.contains(&r.model.as_str()) {
            models.push(&r.model);
        }
    }
    models.sort_unstable();
    // Where `calibrate` started it: the scenario's value, or the middle of
    // the bounds where the scenario sets none.
    let set = o.runs.first().is_some_and(|r| r.base.value_of(KEY).is_some());
    let start = if set { "the scenario's value" } else { "the middle of its bounds" };
    let mut md = format!(
        "\n### MoE stage: `{KEY}` on every MoE run\n\nAfter the main fit, `{FIXED}` (a fixed time for each expert a \
         layer's tokens touch; the main fit's {main_fixed}) is set to 0 and `{KEY}` (the routed experts' GEMMs' rate \
         over the dense GEMMs') alone is fitted on the suite's {fitted} MoE runs (held-out ones included), every \
         other key at the main fit's value: {} ({start}) -> {} (loss {:.4} -> {:.4} in {} \
         evaluations{interval}; 16-bit experts run at the dense rate whatever it is; {}). The shipped profiles hold \
         both, and the tables above predict with them (but for their leave-one-out columns, which are the main \
         fit's folds). *At start*: the main fit's values with no fixed time an expert and `{KEY}` at its start. \
         Each model below is also predicted by the stage fitted on the other MoE models (leave-one-model-out): \
         that column is the transfer figure, against issue 29's goal TPOT <= 15% and TTFT <= 25%. Median \
         |error|:\n\n\
         | model | runs | TPOT at start | TPOT stage | TPOT leave-model-out | TTFT at start | TTFT stage | TTFT \
         leave-model-out | value without it |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        o.start[0],
        o.fit.x[0],
        o.start_loss,
        o.fit.loss,
        o.fit.evals,
        super::stopping(o, None),
    );
    let folds = o.folds.first();
    // The six medians of a row: TPOT, then TTFT, each by the main fit, the
    // stage and the stage without the run's model.
    let cells = |keep: &dyn Fn(&Run) -> bool| {
        let mut out = Vec::new();
        for m in [tpot, ttft] {
            for model in [Model::Uncalibrated, Model::Calibrated, Model::Pass(0)] {
                out.push(med(median_abs(&errors_where(o, m, model, &|r, oc| oc.in_fit && keep(r)))));
            }
        }
        out.join(" | ")
    };
    for name in &models {
        let keep = |r: &Run| r.model == *name;
        let n = o.fit_runs().filter(|(r, _)| keep(r)).count();
        let without = folds
            .and_then(|f| f.folds.iter().find(|(g, _)| g == name))
            .map_or_else(|| "-".into(), |(_, x)| x[0].to_string());
        md.push_str(&format!("| {name} | {n} | {} | {without} |\n", cells(&keep)));
    }
    let (a, b) = (
        median_abs(&errors_where(o, tpot, Model::Pass(0), &|_, oc| oc.in_fit)),
        median_abs(&errors_where(o, ttft, Model::Pass(0), &|_, oc| oc.in_fit)),
    );
    let verdict = match (a, b) {
        (Some(a), Some(b)) if a <= 15.0 && b <= 25.0 => "met",
        (Some(_), Some(_)) => "**not met**",
        _ => "-",
    };
    md.push_str(&format!(
        "| all | {fitted} | {} | |\n\nGoal (leave-one-model-out, every MoE run): {verdict}. Signed median \
         (leave-one-model-out): TPOT {}, TTFT {}.\n",
        cells(&|_| true),
        pct(signed(o, tpot)),
        pct(signed(o, ttft)),
    ));
    md
}

fn signed(o: &Outcome, m: Metric) -> Option<f64> {
    let mut e = errors_where(o, m, Model::Pass(0), &|_, oc| oc.in_fit);
    e.sort_by(f64::total_cmp);
    llmsim_planner::metrics::percentile::percentile_sorted(&e, 50.0)
}

/// What the stage predicts of suite run `i` for a held-out table: leaving
/// its model out when the stage has it, else the calibrated figures.
pub fn held_out_figures<'a>(stage: Option<&'a Stage>, main: &'a Outcome, i: usize) -> Option<&'a Figures> {
    match stage.and_then(|s| s.of_run(i)) {
        // A model no fold left out (the suite's only MoE model) keeps the
        // main fit's prediction, which never saw a held-out run.
        Some(oc) => oc.loo_by.first().and_then(Option::as_ref).or(Some(&oc.uncalibrated)),
        None => Some(&main.outcomes[i].calibrated),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::super::super::runs::{self, LoadOptions, ScenarioSource};
    use super::super::super::{Recorded, calibrate_or_replay, predict};
    use super::*;

    fn repo(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
    }

    const SUITE: Suite = Suite { loss: "squared", priors: false, ..super::super::SUITES[2] };

    /// Hopper vLLM rows at 4 and 8 users, two requests a user: two of each
    /// of three MoE models, and two of a dense model.
    fn rows() -> Vec<Run> {
        let src = ScenarioSource::load(&repo("scenarios/fidelity/hopper-vllm.yml"), &[]).unwrap();
        let filters = ["backend=vllm", "batch_size=4|8", "isl=1024", "osl=1024"]
            .iter()
            .map(|f| crate::measured::aic::Filter::parse(f).unwrap())
            .collect();
        let opts = LoadOptions { aic_filters: filters, aic_rounds: 2, ..LoadOptions::default() };
        let loaded = runs::load(&src, &repo("scenarios/fidelity/aic-hopper.csv"), &opts).unwrap();
        let mut out: Vec<Run> = Vec::new();
        for model in ["gpt-oss-120b", "minimax-m2", "kimi-k2"] {
            out.extend(loaded.runs.iter().filter(|r| r.model == model).take(2).cloned());
        }
        out.extend(loaded.runs.iter().filter(|r| !is_moe(r)).take(2).cloned());
        out
    }

    /// The values the "measured" figures are made with: the main fit's
    /// memory efficiency (the scenario has 0.8), no fixed time an expert,
    /// and an experts' rate the stage must find.
    const MEMORY: f64 = 0.6;
    const HIDDEN: f64 = 0.5;
    /// The main fit's fixed time an expert, which the stage sets to 0.
    const MAIN_FIXED: f64 = 3.0;

    /// A main outcome replayed at (MEMORY, 3 us an expert), every MoE run
    /// held out, each run's figures simulated at (MEMORY, 0 us, HIDDEN).
    fn main_outcome() -> Outcome {
        let made_with = keys::parse(&[format!("efficiency.memory,{FIXED},{KEY}")]).unwrap();
        let keys = keys::parse(&[format!("efficiency.memory,{FIXED}")]).unwrap();
        let mut runs = rows();
        assert_eq!(runs.len(), 8, "{:?}", runs.iter().map(|r| &r.name).collect::<Vec<_>>());
        for r in &mut runs {
            let fig = predict(r, &made_with, &[MEMORY, 0.0, HIDDEN]).unwrap();
            for (m, v) in &mut r.measured {
                *v = fig[m];
            }
            r.not_fitted = is_moe(r).then_some(runs::NotFitted::HeldOut);
        }
        let setup = Setup { leave_one_out: false, ..Setup::new(keys) };
        let recorded = Recorded {
            fit: Fit { x: vec![MEMORY, MAIN_FIXED], loss: 0.0, evals: 0, converged: true },
            start_loss: 0.0,
            folds: Vec::new(),
        };
        calibrate_or_replay(runs, Vec::new(), &setup, Some(&recorded)).unwrap()
    }

    /// The stage sets the fixed time an expert to 0, fits the experts' rate
    /// alone on every MoE run (held-out ones included) with the main fit's
    /// other values written into their scenarios, finds the value the
    /// figures were made with, leaves each model out, and `apply` changes
    /// the MoE runs' predictions only.
    #[test]
    fn the_stage_finds_the_hidden_experts_rate_and_changes_only_moe_runs() {
        let mut main = main_outcome();
        let tpot = Metric::Latency(Family::Tpot, Stat::Mean);
        // at the main fit's 3 us an expert the MoE runs are off, the dense ones exact
        for (r, oc) in main.runs.iter().zip(&main.outcomes) {
            let e = (oc.calibrated[&tpot] / r.measured[&tpot] - 1.0) * 100.0;
            if is_moe(r) {
                assert!(e.abs() > 1.0, "{}: {e}", r.name);
            } else {
                assert!(e.abs() < 1e-9, "{}: {e}", r.name);
            }
        }
        let stage = run(&SUITE, &main, None, true).unwrap().expect("MoE runs");
        assert_eq!(stage.index, vec![0, 1, 2, 3, 4, 5], "the six MoE runs, in order");
        assert!(stage.outcome.outcomes.iter().all(|oc| oc.in_fit), "held-out runs are fitted here");
        let got = stage.outcome.fit.x[0];
        assert!((got - HIDDEN).abs() <= 0.02 * HIDDEN, "fitted {got}, hidden {HIDDEN}");
        // the scenario sets no rate: the fit starts at the middle of [0.1, 4]
        let text = section(&stage, MAIN_FIXED);
        assert!(text.contains("the main fit's 3) is set to 0"), "{text}");
        assert!(text.contains(": 2.05 (the middle of its bounds) -> "), "{text}");
        let folds = &stage.outcome.folds[0].folds;
        assert_eq!(
            folds.iter().map(|(g, _)| g.as_str()).collect::<Vec<_>>(),
            ["gpt-oss-120b", "minimax-m2", "kimi-k2"]
        );
        for (g, x) in folds {
            assert!((x[0] - HIDDEN).abs() <= 0.03 * HIDDEN, "without {g}: {}", x[0]);
        }
        // the record replays to the same outcome, and --check without it fails
        let record = StageRecord::of(&stage);
        let replayed = run(&SUITE, &main, Some(&record), false).unwrap().unwrap();
        assert_eq!(replayed.outcome.outcomes, stage.outcome.outcomes);
        let missing = format!("{:?}", run(&SUITE, &main, None, false).err().expect("no record"));
        assert!(missing.contains("--refit hopper-vllm.moe"), "{missing}");
        // a record of the former stage (a fixed time an expert) is not replayed
        let former = StageRecord { key: FIXED.into(), ..record };
        assert!(run(&SUITE, &main, Some(&former), false).is_err());
        let dense_before = main.outcomes[6].calibrated.clone();
        apply(&mut main, &stage);
        assert_eq!(main.fit.x, vec![MEMORY, 0.0], "the fixed time an expert is 0");
        assert_eq!(main.outcomes[6].calibrated, dense_before);
        for (r, oc) in main.runs.iter().zip(&main.outcomes).take(6) {
            let e = (oc.calibrated[&tpot] / r.measured[&tpot] - 1.0) * 100.0;
            assert!(e.abs() < 1.0, "{}: {e}", r.name);
        }
        // a held-out run's table figure is the fold's that never saw its model
        let fig = held_out_figures(Some(&stage), &main, 0).unwrap();
        assert_eq!(Some(fig), stage.outcome.outcomes[0].loo_by[0].as_ref());
    }

    /// Where the suite's scenario sets a rate, the stage starts there, and
    /// its section says so rather than naming the middle of the bounds.
    #[test]
    fn the_stage_starts_at_a_rate_the_scenario_sets() {
        let mut main = main_outcome();
        let rate = keys::parse(&[KEY.to_string()]).unwrap();
        for r in &mut main.runs {
            r.base = r.base.with_values(&rate, &[1.0]).unwrap();
        }
        let stage = run(&SUITE, &main, None, true).unwrap().expect("MoE runs");
        assert_eq!(stage.outcome.start, vec![1.0]);
        let text = section(&stage, MAIN_FIXED);
        assert!(text.contains(": 1 (the scenario's value) -> "), "{text}");
        assert!(!text.contains("middle of its bounds"), "{text}");
    }

    /// `--refit` takes a suite's id, or `ID.moe` for a suite with the
    /// stage; anything else is refused before a suite runs.
    #[test]
    fn refit_names_a_suite_or_its_moe_stage() {
        let mode = super::super::Mode::Fit { refit: vec!["rtx-vllm.moe".into()] };
        let err = super::super::generate_with(&repo("."), &mode, &mut |_, _| {}).err();
        let text = format!("{err:?}");
        assert!(text.contains("`rtx-vllm.moe` is not a suite") && text.contains("`ID.moe` refits only"), "{text}");
        assert!(applies(&super::super::SUITES[2]) && !applies(&super::super::SUITES[1]));
    }
}
