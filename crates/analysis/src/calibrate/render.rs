//! The calibration report, as text: what was fitted and how, the fitted
//! values, the runs left out and why, each run's loss metrics measured and
//! predicted three ways (uncalibrated, calibrated, leave-one-out) with
//! errors, and the median absolute errors.

use super::{Outcome, error_pct, median_abs};
use crate::sweep::metric::Metric;

/// A number as the report prints it: two decimals, or four below 10.
pub fn num(x: f64) -> String {
    if x.abs() < 10.0 { format!("{x:.4}") } else { format!("{x:.2}") }
}

fn pct(e: Option<f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{e:+.1}%"))
}

/// Which prediction a median is over.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Model {
    Uncalibrated,
    Calibrated,
    LeaveOneOut,
    /// The leave-one-out pass at this index of `Setup::leave_out`.
    Pass(usize),
}

/// What `model` predicted of `metric` for a run.
pub fn prediction(oc: &super::RunOutcome, metric: Metric, model: Model) -> Option<f64> {
    match model {
        Model::Uncalibrated => oc.uncalibrated.get(&metric).copied(),
        Model::Calibrated => oc.calibrated.get(&metric).copied(),
        Model::LeaveOneOut => oc.loo.as_ref()?.0.get(&metric).copied(),
        Model::Pass(p) => oc.loo_by.get(p)?.as_ref()?.get(&metric).copied(),
    }
}

/// The errors (percent) of `metric` under `model` over the runs that
/// `keep` holds for and that measured it.
pub fn errors_where(
    o: &Outcome,
    metric: Metric,
    model: Model,
    keep: &dyn Fn(&super::Run, &super::RunOutcome) -> bool,
) -> Vec<f64> {
    o.runs
        .iter()
        .zip(&o.outcomes)
        .filter(|(r, oc)| keep(r, oc))
        .filter_map(|(r, oc)| error_pct(prediction(oc, metric, model), *r.measured.get(&metric)?))
        .collect()
}

/// Median absolute error (percent) of `metric` over the runs in the fit
/// (or, with `holdout`, the held-out runs) that have it, under `model`.
pub fn median_error(o: &Outcome, metric: Metric, model: Model, holdout: bool) -> Option<f64> {
    median_abs(&errors_where(o, metric, model, &|_, oc| if holdout { oc.holdout } else { oc.in_fit }))
}

/// Median absolute error of `metric` under `model` over the runs in the
/// fit for which `keep` holds.
pub fn median_error_where(
    o: &Outcome,
    metric: Metric,
    model: Model,
    keep: &dyn Fn(&super::Run) -> bool,
) -> Option<f64> {
    median_abs(&errors_where(o, metric, model, &|r, oc| oc.in_fit && keep(r)))
}

/// The loss metrics that appear in any run, in first-seen order.
pub fn metrics_seen(o: &Outcome) -> Vec<Metric> {
    let mut out: Vec<Metric> = Vec::new();
    for oc in &o.outcomes {
        for m in &oc.loss_metrics {
            if !out.contains(m) {
                out.push(*m);
            }
        }
    }
    out
}

/// The report's first lines: what was fitted to what, the loss, how long
/// stages were simulated.
fn header(o: &Outcome, scenario: &str, fit_count: usize, excluded: usize, holdout: usize) -> String {
    let s = &o.setup;
    let mut out = format!(
        "calibrate  {scenario} against {} measured runs: {fit_count} in the fit, {excluded} excluded as saturated, \
         {holdout} held out\n",
        o.runs.len(),
    );
    out.push_str(&format!("loss       mean over runs of the mean {} of {}\n", s.loss.describe(), s.metrics.describe()));
    let sampled = o.runs.iter().filter(|r| r.base.steady && super::steady::sampled(&r.base.validated)).count();
    if sampled > 0 {
        out.push_str(&format!(
            "stages     {sampled} long stationary stages predicted from a steady window of each where one is found \
             (docs/calibration.md, \"Long stages\"; --full-stages simulates them whole)\n"
        ));
    }
    out
}

/// The whole report.
/// What the optimiser line adds when the budget, not the stopping rule,
/// ended the fit ([`super::Fit::converged`]).
fn budget_note(o: &Outcome) -> String {
    if o.fit.converged {
        return String::new();
    }
    format!(
        "\n           NOT CONVERGED: the budget (--max-evals {}) ended the fit before the stopping rule; another budget \
         gives other values: raise it",
        o.setup.optim.max_evals
    )
}

/// The report's optimiser line: what ran, its evaluations and loss, and
/// whether its budget cut it short.
fn optimiser_line(o: &Outcome, fit_count: usize) -> String {
    if o.setup.keys.is_empty() {
        return format!("optimiser  nothing fitted: the scenario as it is, loss {:.6}\n\n", o.fit.loss);
    }
    if let Some(sm) = &o.sampled {
        return format!(
            "optimiser  Levenberg-Marquardt in the bounds with secant steps on {} of the {} runs ({} evaluations, loss on \
             them {:.6}), then on every run from there: {} evaluations, loss {:.6} -> {:.6}{}\n\n",
            sm.runs,
            fit_count,
            sm.evals,
            sm.loss,
            o.fit.evals,
            o.start_loss,
            o.fit.loss,
            budget_note(o)
        );
    }
    format!(
        "optimiser  Levenberg-Marquardt in the bounds, then coordinate search: {} evaluations, loss {:.6} -> {:.6}{}\n\n",
        o.fit.evals,
        o.start_loss,
        o.fit.loss,
        budget_note(o)
    )
}

pub fn render(o: &Outcome, scenario: &str) -> String {
    let s = &o.setup;
    let fit_count = o.outcomes.iter().filter(|x| x.in_fit).count();
    let excluded: Vec<_> = o.runs.iter().zip(&o.outcomes).filter(|(_, x)| !x.in_fit && !x.holdout).collect();
    let holdout = o.outcomes.iter().filter(|x| x.holdout).count();
    let mut out = header(o, scenario, fit_count, excluded.len(), holdout);
    out.push_str(&optimiser_line(o, fit_count));
    out.push_str(&format!(
        "  {:<34} {:>12} {:>12}   {:<16} {:<22} {}\n",
        "fitted key", "start", "fitted", "bounds", "prior (mean +- sd)", "95% interval: verdict"
    ));
    for (i, k) in s.keys.iter().enumerate() {
        let id = o.identified.get(i);
        let prior =
            id.and_then(|d| d.prior).map_or_else(|| "none".into(), |p| format!("{} +- {}", num(p.mean), num(p.sigma)));
        let verdict = match id {
            Some(d) => match d.interval(k) {
                Some((lo, hi)) => format!("[{}, {}]: {}", num(lo), num(hi), d.verdict()),
                None => d.verdict().to_string(),
            },
            None => String::new(),
        };
        out.push_str(&format!(
            "  {:<34} {:>12} {:>12}   {:<16} {:<22} {}\n",
            k.key,
            num(o.start[i]),
            num(o.fit.x[i]),
            format!("[{}, {}]", k.lo, k.hi),
            prior,
            verdict
        ));
    }
    let weak: Vec<&str> = o.identified.iter().filter(|d| !d.identified || d.at_bound).map(|d| d.key.as_str()).collect();
    if !weak.is_empty() {
        out.push_str(&format!(
            "  not identified by these runs (their value is the prior's or a bound's, not a measurement): {}\n",
            weak.join(", ")
        ));
    }
    if !excluded.is_empty() {
        out.push_str("\nexcluded (saturated; predicted, not fitted; --include-saturated fits them)\n");
        for (r, _) in &excluded {
            out.push_str(&format!("  {}: {}\n", r.name, r.why_not_fitted()));
        }
    }
    if !o.excluded.is_empty() {
        out.push_str("\nnot simulated (the measured file excludes them: the engine cannot represent them)\n");
        for e in &o.excluded {
            let figures: Vec<String> = e.measured.iter().map(|(m, v)| format!("{} {}", m.name(), num(*v))).collect();
            out.push_str(&format!("  {} ({}): {}\n", e.name, e.source, e.reason));
            if !figures.is_empty() {
                out.push_str(&format!("    measured: {}\n", figures.join(", ")));
            }
        }
    }
    out.push_str(&format!(
        "\nruns: measured and predicted ({}), error = (predicted - measured) / measured\n",
        "ms; requests and tokens per second"
    ));
    out.push_str(&format!(
        "  {:<40} {:<20} {:>11} {:>12} {:>8} {:>11} {:>8} {:>13} {:>8}\n",
        "run", "metric", "measured", "uncalibrated", "error", "calibrated", "error", "leave-one-out", "error"
    ));
    for (r, oc) in o.runs.iter().zip(&o.outcomes) {
        let tag = match (oc.in_fit, oc.holdout) {
            (true, _) => "",
            (false, true) => " [held out]",
            (false, false) => " [saturated]",
        };
        for (j, m) in oc.loss_metrics.iter().enumerate() {
            let measured = r.measured[m];
            let u = oc.uncalibrated.get(m).copied();
            let c = oc.calibrated.get(m).copied();
            let l = oc.loo.as_ref().and_then(|(f, _)| f.get(m).copied());
            let name = if j == 0 { format!("{}{tag}", r.name) } else { String::new() };
            out.push_str(&format!(
                "  {:<40} {:<20} {:>11} {:>12} {:>8} {:>11} {:>8} {:>13} {:>8}\n",
                truncate(&name, 40),
                m.name(),
                num(measured),
                u.map_or("-".into(), num),
                pct(error_pct(u, measured)),
                c.map_or("-".into(), num),
                pct(error_pct(c, measured)),
                l.map_or("-".into(), num),
                pct(error_pct(l, measured)),
            ));
        }
    }
    out.push_str(&format!("\nmedian absolute error over the {fit_count} runs in the fit\n"));
    out.push_str(&format!("  {:<20} {:>12} {:>11} {:>13}\n", "metric", "uncalibrated", "calibrated", "leave-one-out"));
    for m in metrics_seen(o) {
        let cell = |model| median_error(o, m, model, false).map_or("-".into(), |e| format!("{e:.1}%"));
        out.push_str(&format!(
            "  {:<20} {:>12} {:>11} {:>13}\n",
            m.name(),
            cell(Model::Uncalibrated),
            cell(Model::Calibrated),
            cell(Model::LeaveOneOut)
        ));
    }
    if !s.keys.is_empty() && !o.outcomes.iter().any(|x| x.loo.is_some()) {
        out.push_str("  (leave-one-out needs runs of two groups or more)\n");
    }
    for (p, mode) in s.leave_out.iter().enumerate() {
        if o.folds.get(p).is_none_or(|f| f.folds.is_empty()) {
            continue;
        }
        let cells: Vec<String> = metrics_seen(o)
            .into_iter()
            .map(|m| {
                let e = median_error(o, m, Model::Pass(p), false).map_or("-".into(), |e| format!("{e:.1}%"));
                format!("{} {e}", m.name())
            })
            .collect();
        let ended = match o.folds[p].at_budget {
            Some(k) if k > 0 => {
                format!(", {k} ended by their budget of {} evaluations", super::fold_budget(s.optim.max_evals))
            }
            _ => String::new(),
        };
        out.push_str(&format!(
            "  leave-one-{}-out ({} folds{ended}): {}\n",
            mode.name(),
            o.folds[p].folds.len(),
            cells.join(", ")
        ));
    }
    if holdout > 0 {
        out.push_str(&format!("\nmedian absolute error over the {holdout} held-out runs (not in the fit)\n"));
        out.push_str(&format!("  {:<20} {:>12} {:>11}\n", "metric", "uncalibrated", "calibrated"));
        for m in metrics_seen(o) {
            let cell = |model| median_error(o, m, model, true).map_or("-".into(), |e| format!("{e:.1}%"));
            out.push_str(&format!(
                "  {:<20} {:>12} {:>11}\n",
                m.name(),
                cell(Model::Uncalibrated),
                cell(Model::Calibrated)
            ));
        }
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).chain(['…']).collect() }
}
