//! `calibration: NAME` or `calibration: FILE` in a scenario: fitted
//! efficiency and overhead figures from a calibration profile (what
//! `llmsim calibrate -o` writes), filling in the keys the scenario leaves
//! unset.
//!
//! A profile may set only keys under `efficiency` and `latency`: those are
//! what a fit against measured runs finds (how close the engine comes to
//! the datasheet, and what it pays per step and per request). Hardware,
//! model and scheduler facts belong to the scenario. Keys the scenario
//! sets itself (in its file or with `--set`) win over the profile's, and
//! [`CalibrationUse`] records which value came from where, for `explain`.
//!
//! A NAME (no `/`, no `.yml`) is looked up as `hardware/calibrations/NAME.yml`
//! next to the scenario and in every directory above it, then among the
//! profiles compiled into the binary; a FILE is relative to the scenario.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ConfigError;
pub use super::presets::Found;
use super::presets::{Shelf, Unknown};
use super::raw::{RawEfficiency, RawLatency, RawScenario};
use crate::input::{Kind, Reason};

/// The shipped profiles, by name (copies of `hardware/calibrations/`).
pub const BUILTIN: &[(&str, &str)] = &[
    ("b200-trtllm", include_str!("../../../../hardware/calibrations/b200-trtllm.yml")),
    ("b200-vllm", include_str!("../../../../hardware/calibrations/b200-vllm.yml")),
    ("h100-trtllm", include_str!("../../../../hardware/calibrations/h100-trtllm.yml")),
    ("h100-vllm", include_str!("../../../../hardware/calibrations/h100-vllm.yml")),
    ("h200-sglang", include_str!("../../../../hardware/calibrations/h200-sglang.yml")),
    ("h200-trtllm", include_str!("../../../../hardware/calibrations/h200-trtllm.yml")),
    ("h200-vllm", include_str!("../../../../hardware/calibrations/h200-vllm.yml")),
];

/// Every key a profile may set, in the order `explain` lists them.
pub const KEYS: [&str; 15] = [
    "efficiency.compute",
    "efficiency.memory",
    "efficiency.gemm_half_tokens",
    "efficiency.attention_compute",
    "efficiency.attention_memory",
    "efficiency.allreduce",
    "efficiency.expert_gemm",
    "latency.step_overhead_ms",
    "latency.request_overhead_ms",
    "latency.per_layer_overhead_us",
    "latency.per_sequence_overhead_us",
    "latency.allreduce_us",
    "latency.eager_layer_us",
    "latency.per_expert_us",
    "latency.resend_jitter_ms",
];

/// Top-level keys of a profile that describe the fit and are not read.
const METADATA: [&str; 3] = ["name", "description", "fit"];

/// A calibration profile as written: the keys it sets, and its metadata.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCalibration {
    pub name: Option<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub efficiency: RawEfficiency,
    #[serde(default)]
    pub latency: RawLatency,
    /// How the values were found (`llmsim calibrate` writes the runs, the
    /// errors and its version here); never read by a scenario.
    pub fit: Option<crate::yaml::Value>,
}

/// Which calibration a scenario used and where each of its keys came from.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationUse {
    /// As the scenario wrote it.
    pub reference: String,
    /// The file read (`<built-in ...>` for a compiled-in profile).
    pub file: PathBuf,
    pub keys: Vec<CalibratedKey>,
    /// Keys of the profile left out: its per-operator keys, for a model
    /// without an architecture (they price shapes it does not have).
    pub unused: Vec<&'static str>,
}

/// One key the profile sets.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibratedKey {
    pub key: &'static str,
    pub calibrated: f64,
    /// The scenario's own value, when it set the key itself (it wins).
    pub scenario: Option<f64>,
}

impl RawCalibration {
    /// The values it sets, by key, in [`KEYS`] order.
    pub fn values(&self) -> Vec<(&'static str, f64)> {
        let e = &self.efficiency;
        let l = &self.latency;
        let all = [
            e.compute,
            e.memory,
            e.gemm_half_tokens,
            e.attention_compute,
            e.attention_memory,
            e.allreduce,
            e.expert_gemm,
            l.step_overhead_ms,
            l.request_overhead_ms,
            l.per_layer_overhead_us,
            l.per_sequence_overhead_us,
            l.allreduce_us,
            l.eager_layer_us,
            l.per_expert_us,
            l.resend_jitter_ms,
        ];
        KEYS.iter().zip(all).filter_map(|(k, v)| v.map(|v| (*k, v))).collect()
    }
}

/// Reads a profile's text, refusing keys outside `efficiency` and `latency`.
pub fn parse(text: &str, file: &Path) -> Result<RawCalibration, ConfigError> {
    let value: crate::yaml::Value = super::parse_str(text, file)?;
    let crate::yaml::Value::Mapping(map) = &value else {
        return Err(ConfigError::new(file, "", "a calibration profile is a mapping with efficiency and latency keys"));
    };
    for key in map.keys() {
        let name = key.as_str().unwrap_or("");
        if !(name == "efficiency" || name == "latency" || METADATA.contains(&name)) {
            return Err(ConfigError::new(
                file,
                name,
                format!(
                    "a calibration profile sets only keys under efficiency and latency (those a fit finds: {}); \
                     `{name}` belongs in the scenario",
                    KEYS.join(", ")
                ),
            ));
        }
    }
    let raw: RawCalibration = super::parse_str(text, file)?;
    if raw.values().is_empty() {
        return Err(ConfigError::new(
            file,
            "",
            format!("the profile sets no key; give at least one of {}", KEYS.join(", ")),
        ));
    }
    Ok(raw)
}

/// The calibration profiles: `hardware/calibrations/NAME.yml`
/// ([`super::presets`]).
pub const SHELF: Shelf = Shelf {
    folder: "hardware/calibrations",
    shipped_from: "hardware/calibrations",
    builtin: BUILTIN,
    kind: Kind::Calibration,
    dots: false,
};

/// Finds the profile a scenario in `scenario_file` names: a file path
/// (with a `/` or ending in `.yml`/`.yaml`, relative to the scenario), or
/// a profile name.
pub fn find(reference: &str, scenario_file: &Path) -> Result<Found, ConfigError> {
    let err = |m: String| ConfigError::new(scenario_file, "calibration", m);
    let is_file = reference.contains('/') || reference.ends_with(".yml") || reference.ends_with(".yaml");
    if is_file {
        let file = scenario_file.parent().unwrap_or(Path::new("")).join(reference);
        let text = crate::input::read_text(Kind::Calibration, &file).map_err(|e| {
            err(match &e.reason {
                Reason::Cannot(why) => format!("cannot read the calibration file {}: {why}", file.display()),
                _ => format!("the calibration file {}: {}", file.display(), e.message()),
            })
        })?;
        return Ok(Found { file, text });
    }
    SHELF.find(reference, scenario_file)?.map_err(|Unknown { hint, known }| {
        err(format!(
            "unknown calibration `{reference}`{hint}; known profiles (hardware/calibrations/): {}; \
             or give a file path ending in .yml",
            known.join(", ")
        ))
    })
}

/// Every profile name reachable from this scenario, sorted.
pub fn known_names(scenario_file: &Path) -> Vec<String> {
    SHELF.known_names(scenario_file)
}

/// Fills the keys `raw` leaves unset from its calibration, if it names one.
pub fn apply(raw: &mut RawScenario, file: &Path) -> Result<Option<CalibrationUse>, ConfigError> {
    let Some(reference) = raw.calibration.clone() else {
        return Ok(None);
    };
    let found = find(&reference, file)?;
    let profile = parse(&found.text, &found.file)?;
    let mut keys = Vec::new();
    for (key, calibrated) in profile.values() {
        let slot = slot(raw, key);
        let scenario = *slot;
        if scenario.is_none() {
            *slot = Some(calibrated);
        }
        keys.push(CalibratedKey { key, calibrated, scenario });
    }
    Ok(Some(CalibrationUse { reference, file: found.file, keys, unused: Vec::new() }))
}

/// The scenario's field for a calibration key.
fn slot<'a>(raw: &'a mut RawScenario, key: &str) -> &'a mut Option<f64> {
    let (e, l): (&mut RawEfficiency, &mut RawLatency) = (&mut raw.efficiency, &mut raw.latency);
    match key {
        "efficiency.compute" => &mut e.compute,
        "efficiency.memory" => &mut e.memory,
        "latency.step_overhead_ms" => &mut l.step_overhead_ms,
        "latency.request_overhead_ms" => &mut l.request_overhead_ms,
        "latency.per_layer_overhead_us" => &mut l.per_layer_overhead_us,
        "efficiency.gemm_half_tokens" => &mut e.gemm_half_tokens,
        "efficiency.attention_compute" => &mut e.attention_compute,
        "efficiency.attention_memory" => &mut e.attention_memory,
        "efficiency.allreduce" => &mut e.allreduce,
        "efficiency.expert_gemm" => &mut e.expert_gemm,
        "latency.allreduce_us" => &mut l.allreduce_us,
        "latency.eager_layer_us" => &mut l.eager_layer_us,
        "latency.per_expert_us" => &mut l.per_expert_us,
        "latency.resend_jitter_ms" => &mut l.resend_jitter_ms,
        _ => &mut l.per_sequence_overhead_us,
    }
}

/// `explain`'s lines: the profile, then each key and where its value came from.
pub fn explain(c: &CalibrationUse) -> String {
    let mut out = format!("# calibration   `{}`: {}\n", c.reference, c.file.display());
    for k in &c.keys {
        let line = match k.scenario {
            None => format!("#   {:<32} {} (from the calibration)\n", k.key, k.calibrated),
            Some(own) => format!(
                "#   {:<32} {own} (set by the scenario, which wins; the calibration has {})\n",
                k.key, k.calibrated
            ),
        };
        out.push_str(&line);
    }
    if !c.unused.is_empty() {
        out.push_str(&format!(
            "#   not used: {} (they need a model architecture; this model has none)\n",
            c.unused.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests;
