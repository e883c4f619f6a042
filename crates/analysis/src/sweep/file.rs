//! Sweep files: a base scenario, fixed overrides and axes, in YAML.
//!
//! ```yaml
//! base: chat-h100.yml            # relative to this file
//! set:                           # optional: applied before the axes
//!   workload.requests: 2000
//! axes:                          # first axis outermost
//!   - key: scheduler.max_batch_tokens
//!     values: [2048, 4096, 8192]
//!   - key: workload.arrivals.poisson.rate
//!     range: { from: 4, to: 40, step: 4 }
//! seeds: 1                       # optional; --seeds wins
//! ```
//!
//! Read in two stages like scenarios: serde structs that refuse unknown
//! keys, then checks that name the file, the key path and the line.

use std::path::{Path, PathBuf};

use llmsim_scenario::yaml::Value;
use serde::Deserialize;

use super::axis::{self, Axis, AxisError};
use llmsim_scenario::config::{ConfigError, Override};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    base: String,
    #[serde(default)]
    set: llmsim_scenario::yaml::Mapping,
    #[serde(default)]
    axes: Vec<RawAxis>,
    seeds: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAxis {
    key: String,
    values: Option<Vec<Value>>,
    range: Option<RawRange>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    from: llmsim_scenario::yaml::Number,
    to: llmsim_scenario::yaml::Number,
    step: llmsim_scenario::yaml::Number,
}

/// A sweep file, checked.
#[derive(Clone, Debug)]
pub struct SweepFile {
    /// The base scenario, resolved against the sweep file's directory.
    pub base: PathBuf,
    pub fixed: Vec<Override>,
    pub axes: Vec<Axis>,
    pub seeds: Option<u32>,
}

/// Whether a YAML file is a sweep file (it has `base:` or `axes:`) rather
/// than a scenario.
pub fn is_sweep_file(text: &str) -> bool {
    // A text the pre-scan refuses is no sweep file; reading it as a
    // scenario then reports why.
    if llmsim_scenario::yaml::precheck(text).is_err() {
        return false;
    }
    match llmsim_scenario::yaml::from_str::<Value>(text) {
        Ok(Value::Mapping(m)) => m.contains_key("base") || m.contains_key("axes"),
        _ => false,
    }
}

/// Reads and checks a sweep file.
pub fn load(file: &Path) -> Result<SweepFile, ConfigError> {
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Sweep, file)?;
    let raw: RawSweep = llmsim_scenario::config::parse_str(&text, file)?;
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).map(|i| i + 1);
    let err = |path: String, msg: String, needle: &str| ConfigError::new(file, path, msg).at_line(line_of(needle));
    let mut fixed = Vec::new();
    for (k, v) in raw.set {
        let key = axis::label(&k);
        Override::parse_key(&key)
            .and_then(|kind| llmsim_scenario::config::keys::check_value(&key, kind, &v))
            .map_err(|e| err(format!("set.{key}"), e.to_string(), &key))?;
        fixed.push(Override { path: key.split('.').map(str::to_string).collect(), value: v });
    }
    let mut axes: Vec<Axis> = Vec::new();
    for (i, a) in raw.axes.into_iter().enumerate() {
        let at = format!("axes[{i}]");
        let needle = a.key.clone();
        let values = match (a.values, a.range) {
            (Some(v), None) => v,
            (None, Some(r)) => {
                range_values(&a.key, &r).map_err(|e| err(format!("{at}.range"), e.to_string(), &needle))?
            }
            _ => {
                return Err(err(
                    at,
                    format!("axis `{}`: give either values: [...] or range: {{from, to, step}}", a.key),
                    &needle,
                ));
            }
        };
        let axis = Axis::new(&a.key, values).map_err(|e| err(at.clone(), e.to_string(), &needle))?;
        if axes.iter().any(|b| b.key == axis.key) {
            return Err(err(at, format!("`{}` is already an axis; list its values in one axis", axis.key), &needle));
        }
        axes.push(axis);
    }
    let seeds = match raw.seeds {
        None => None,
        Some(n) if (1..=10_000).contains(&n) => Some(n as u32),
        Some(n) => return Err(err("seeds".into(), format!("{n} is not allowed: must be from 1 to 10000"), "seeds")),
    };
    let base = file.parent().unwrap_or(Path::new("")).join(&raw.base);
    if !base.is_file() {
        let msg = format!("the base scenario {} does not exist (a path relative to this file)", base.display());
        return Err(err("base".into(), msg, "base:"));
    }
    Ok(SweepFile { base, fixed, axes, seeds })
}

fn range_values(key: &str, r: &RawRange) -> Result<Vec<Value>, AxisError> {
    let kind = Override::parse_key(key)?;
    let nums = [&r.from, &r.to, &r.step];
    let whole = nums.iter().all(|n| n.is_i64());
    let decimals = nums.iter().map(|n| n.to_string().split_once('.').map_or(0, |(_, f)| f.len().min(12))).max();
    let f = |n: &llmsim_scenario::yaml::Number| n.as_f64().unwrap_or(f64::NAN);
    Ok(axis::range(f(&r.from), f(&r.to), f(&r.step), whole, decimals.unwrap_or(0), kind)?)
}
