//! `llmsim calibrate -o FILE`: the calibration profile a scenario reads
//! with `calibration: FILE` (or by name from `hardware/calibrations/`).
//!
//! Wire format (YAML): `name`, `description`, then the fitted keys under
//! `efficiency:` and `latency:` (the only keys a profile may set), then
//! `fit:`, which scenarios never read: the llmsim version, the command
//! that fits it again, the scenario,
//! each key's start, fitted value and bounds, the loss metrics, function
//! and values,
//! every run with its source and whether it was in the fit (or why not;
//! runs the measured file excludes are listed too, never simulated),
//! its errors in percent (calibrated and leave-one-out, per loss metric),
//! and the median absolute errors.

use std::collections::BTreeMap;

use serde::Serialize;

use super::render::{Model, median_error, metrics_seen};
use super::{Outcome, error_pct};

/// Keys a profile can hold: those under `efficiency.` and `latency.`.
pub fn storable(key: &str) -> bool {
    llmsim_scenario::config::calibration::KEYS.contains(&key)
}

#[derive(Serialize)]
struct Profile {
    name: String,
    description: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    efficiency: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    latency: BTreeMap<String, f64>,
    fit: FitRecord,
}

#[derive(Serialize)]
struct FitRecord {
    llmsim_version: &'static str,
    /// The command that fits it again (same version, same files: the same
    /// profile, byte for byte).
    command: String,
    scenario: String,
    keys: Vec<KeyRecord>,
    loss_metrics: String,
    loss_function: String,
    loss: LossRecord,
    evaluations: usize,
    /// Whether the optimiser's stopping rule ended the fit (`false`: the
    /// budget did first; another budget gives other values).
    converged: bool,
    median_abs_error_pct: BTreeMap<String, Medians>,
    runs: Vec<RunRecord>,
}

#[derive(Serialize)]
struct KeyRecord {
    key: String,
    start: f64,
    fitted: f64,
    bounds: [f64; 2],
    /// `[mean, sigma]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    prior: Option<[f64; 2]>,
    /// The 95% interval the runs and the prior leave.
    #[serde(skip_serializing_if = "Option::is_none")]
    interval: Option<[f64; 2]>,
    /// identified, at a bound, or not identified (held by its prior).
    #[serde(skip_serializing_if = "Option::is_none")]
    identified: Option<String>,
}

#[derive(Serialize)]
struct LossRecord {
    start: f64,
    fitted: f64,
}

#[derive(Serialize)]
struct Medians {
    #[serde(skip_serializing_if = "Option::is_none")]
    uncalibrated: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    calibrated: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    leave_one_out: Option<f64>,
}

#[derive(Serialize)]
struct RunRecord {
    name: String,
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    excluded: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    error_pct: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    leave_one_out_error_pct: BTreeMap<String, f64>,
}

/// What the fit of `o` did to each of its keys.
fn key_records(o: &Outcome) -> impl Iterator<Item = KeyRecord> + '_ {
    o.setup.keys.iter().enumerate().map(|(i, k)| {
        let id = o.identified.get(i);
        KeyRecord {
            key: k.key.clone(),
            start: o.start[i],
            fitted: o.fit.x[i],
            bounds: [k.lo, k.hi],
            prior: id.and_then(|d| d.prior).map(|p| [p.mean, p.sigma]),
            interval: id.and_then(|d| d.interval(k)).map(|(a, b)| [round5(a), round5(b)]),
            identified: id.map(|d| d.verdict().to_string()),
        }
    })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The profile's YAML text. `name` is its name (the file's stem).
/// The profile `name` of outcome `o`, fitted with `scenario` by `command`.
pub fn render(o: &Outcome, name: &str, scenario: &str, command: &str) -> String {
    render_staged(o, None, name, scenario, command, "")
}

/// [`render`], with the keys a later `stage` fitted on some of the runs
/// (its values, after the main fit's) and `note` added to the description
/// (how they were fitted after the others).
pub fn render_staged(
    o: &Outcome,
    stage: Option<&Outcome>,
    name: &str,
    scenario: &str,
    command: &str,
    note: &str,
) -> String {
    let mut efficiency = BTreeMap::new();
    let mut latency = BTreeMap::new();
    let staged = stage.into_iter().flat_map(|s| s.setup.keys.iter().zip(&s.fit.x));
    for (k, x) in o.setup.keys.iter().zip(&o.fit.x).chain(staged) {
        if let Some(rest) = k.key.strip_prefix("efficiency.") {
            efficiency.insert(rest.to_string(), *x);
        } else if let Some(rest) = k.key.strip_prefix("latency.") {
            latency.insert(rest.to_string(), *x);
        }
    }
    let metrics = metrics_seen(o);
    let median_abs_error_pct = metrics
        .iter()
        .map(|m| {
            let med = |model| median_error(o, *m, model, false).map(round2);
            let medians = Medians {
                uncalibrated: med(Model::Uncalibrated),
                calibrated: med(Model::Calibrated),
                leave_one_out: med(Model::LeaveOneOut),
            };
            (m.name(), medians)
        })
        .collect();
    let runs = o
        .runs
        .iter()
        .zip(&o.outcomes)
        .map(|(r, oc)| {
            let errors = |fig: Option<&super::Figures>| -> BTreeMap<String, f64> {
                let Some(fig) = fig else { return BTreeMap::new() };
                oc.loss_metrics
                    .iter()
                    .filter_map(|m| Some((m.name(), round2(error_pct(fig.get(m).copied(), r.measured[m])?))))
                    .collect()
            };
            let excluded = match (oc.in_fit, oc.holdout) {
                (true, _) => None,
                (false, true) => Some("held out".to_string()),
                (false, false) if r.is_held_out() || r.is_disaggregated() => Some(r.why_not_fitted()),
                (false, false) => Some(format!("saturated: {}", r.why_not_fitted())),
            };
            RunRecord {
                name: r.name.clone(),
                source: r.source.clone(),
                excluded,
                error_pct: errors(Some(&oc.calibrated)),
                leave_one_out_error_pct: errors(oc.loo.as_ref().map(|(f, _)| f)),
            }
        })
        .chain(o.excluded.iter().map(|e| RunRecord {
            name: e.name.clone(),
            source: e.source.clone(),
            excluded: Some(format!("not simulated: {}", e.reason)),
            error_pct: BTreeMap::new(),
            leave_one_out_error_pct: BTreeMap::new(),
        }))
        .collect();
    let fit_count = o.outcomes.iter().filter(|x| x.in_fit).count();
    let profile = Profile {
        name: name.to_string(),
        description: format!("fitted by llmsim calibrate on {fit_count} measured runs with {scenario}{note}"),
        efficiency,
        latency,
        fit: FitRecord {
            llmsim_version: env!("CARGO_PKG_VERSION"),
            command: command.to_string(),
            scenario: scenario.to_string(),
            keys: key_records(o).chain(stage.into_iter().flat_map(key_records)).collect(),
            loss_metrics: o.setup.metrics.describe(),
            loss_function: o.setup.loss.describe(),
            loss: LossRecord { start: o.start_loss, fitted: o.fit.loss },
            evaluations: o.fit.evals,
            converged: o.fit.converged,
            median_abs_error_pct,
            runs,
        },
    };
    let body = llmsim_scenario::yaml::to_string(&profile).unwrap_or_else(|e| format!("# cannot render: {e}\n"));
    format!(
        "# A calibration profile written by `llmsim calibrate` ({}).\n# Use it with `calibration: {name}` \
         (from hardware/calibrations/) or `calibration: <path>.yml` in a scenario;\n# keys the scenario sets \
         itself win. Scenarios read only `efficiency` and `latency`; `fit` records how they were found.\n{body}",
        env!("CARGO_PKG_VERSION")
    )
}

/// `v` to 5 significant digits.
fn round5(v: f64) -> f64 {
    format!("{v:.4e}").parse().unwrap_or(v)
}
