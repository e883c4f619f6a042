//! Stage two: every range and cross-field rule, checked once, building the
//! [`Scenario`] the engine consumes. Messages name the key path, the value
//! and what is allowed.

use std::path::Path;
use std::sync::Arc;

use super::raw::*;
use super::scenario::*;
use super::{ConfigError, deployment, hardware};

/// vLLM's defaults where it has one (SCENARIO.md).
pub const DEFAULT_BLOCK_SIZE: u32 = 16;
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;
pub const DEFAULT_WATERMARK: f64 = 0.01;
pub const DEFAULT_MAX_NUM_SEQUENCES: u32 = 256;
/// vLLM V1's default `max_num_batched_tokens` for online serving on large GPUs.
pub const DEFAULT_MAX_BATCH_TOKENS: u32 = 8192;
pub const DEFAULT_BYTES_PER_PARAMETER: f64 = 2.0;
pub const DEFAULT_SEED: u64 = 0;

/// Checks values against their allowed ranges, naming `file` in errors.
pub(crate) struct Check<'a> {
    pub file: &'a Path,
}

impl Check<'_> {
    pub fn err(&self, path: &str, msg: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file, path, msg)
    }

    pub fn finite(&self, path: &str, v: f64) -> Result<f64, ConfigError> {
        if v.is_finite() { Ok(v) } else { Err(self.err(path, format!("{v} is not allowed: must be a finite number"))) }
    }

    /// `v > 0`.
    pub fn positive(&self, path: &str, v: f64) -> Result<f64, ConfigError> {
        if self.finite(path, v)? > 0.0 {
            Ok(v)
        } else {
            Err(self.err(path, format!("{v} is not allowed: must be greater than 0")))
        }
    }

    /// `v >= 0`.
    pub fn non_negative(&self, path: &str, v: f64) -> Result<f64, ConfigError> {
        if self.finite(path, v)? >= 0.0 {
            Ok(v)
        } else {
            Err(self.err(path, format!("{v} is not allowed: must be 0 or more")))
        }
    }

    /// `0 < v <= 1`.
    pub fn fraction(&self, path: &str, v: f64) -> Result<f64, ConfigError> {
        if self.finite(path, v)? > 0.0 && v <= 1.0 {
            Ok(v)
        } else {
            Err(self.err(path, format!("{v} is not allowed: must be in (0, 1]")))
        }
    }

    /// `0 <= v < 1`.
    pub fn open_fraction(&self, path: &str, v: f64) -> Result<f64, ConfigError> {
        if self.finite(path, v)? >= 0.0 && v < 1.0 {
            Ok(v)
        } else {
            Err(self.err(path, format!("{v} is not allowed: must be in [0, 1)")))
        }
    }

    /// A whole number in `[min, u32::MAX]`.
    pub fn count(&self, path: &str, v: i64, min: i64) -> Result<u32, ConfigError> {
        if v >= min && v <= i64::from(u32::MAX) {
            Ok(v as u32)
        } else {
            Err(self.err(path, format!("{v} is not allowed: must be a whole number from {min} to {}", u32::MAX)))
        }
    }
}

/// Most `latency.request_overhead_ms` allowed: an hour.
pub const MAX_REQUEST_OVERHEAD_MS: f64 = 3_600_000.0;
/// Most `latency.per_layer_overhead_us` and `per_sequence_overhead_us`: a second.
pub const MAX_FINE_OVERHEAD_US: f64 = 1_000_000.0;

/// Builds the scenario from its raw form. `file` is the scenario's path.
pub fn scenario(mut raw: RawScenario, file: &Path) -> Result<Scenario, ConfigError> {
    let ck = Check { file };
    let calibration = super::calibration::apply(&mut raw, file)?;
    let hardware = hardware_of(&raw.hardware, file)?;
    let built = deployment::build(&ck, raw.model, raw.parallelism, &hardware)?;
    let scheduler = Scheduler {
        max_batch_tokens: match raw.scheduler.max_batch_tokens {
            Some(v) => ck.count("scheduler.max_batch_tokens", v, 1)?,
            None => DEFAULT_MAX_BATCH_TOKENS,
        },
        max_num_sequences: match raw.scheduler.max_num_sequences {
            Some(v) => ck.count("scheduler.max_num_sequences", v, 1)?,
            None => DEFAULT_MAX_NUM_SEQUENCES,
        },
    };
    let latency = latency(&ck, &raw.latency)?;
    if latency.per_layer_overhead_us > 0.0 && built.model.architecture.is_none() {
        return Err(ck.err(
            "latency.per_layer_overhead_us",
            "needs a model architecture (its layer count): describe the model with model: NAME, \
             model.architecture or model.hf_config, or use step_overhead_ms",
        ));
    }
    let efficiency = Efficiency {
        compute: ck.fraction("efficiency.compute", raw.efficiency.compute.unwrap_or(1.0))?,
        memory: ck.fraction("efficiency.memory", raw.efficiency.memory.unwrap_or(1.0))?,
    };
    let workload = workload(&ck, raw.workload)?;
    let capacity = deployment::capacity(&ck, &built.model, &built.deployment, &hardware)?;
    let name = raw
        .name
        .unwrap_or_else(|| file.file_stem().map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned()));
    Ok(Scenario {
        name,
        description: raw.description,
        hardware,
        model: built.model,
        parallelism: built.parallelism,
        scheduler,
        latency,
        efficiency,
        workload,
        source: file.to_path_buf(),
        capacity,
        deployment: built.deployment,
        calibration,
    })
}

fn latency(ck: &Check, raw: &RawLatency) -> Result<Latency, ConfigError> {
    let bounded = |key: &str, v: Option<f64>, max: f64| -> Result<f64, ConfigError> {
        let path = format!("latency.{key}");
        let v = ck.non_negative(&path, v.unwrap_or(0.0))?;
        if v > max {
            return Err(ck.err(&path, format!("{v} is not allowed: must be at most {max}")));
        }
        Ok(v)
    };
    Ok(Latency {
        step_overhead_ms: ck.non_negative("latency.step_overhead_ms", raw.step_overhead_ms.unwrap_or(0.0))?,
        request_overhead_ms: bounded("request_overhead_ms", raw.request_overhead_ms, MAX_REQUEST_OVERHEAD_MS)?,
        per_layer_overhead_us: bounded("per_layer_overhead_us", raw.per_layer_overhead_us, MAX_FINE_OVERHEAD_US)?,
        per_sequence_overhead_us: bounded(
            "per_sequence_overhead_us",
            raw.per_sequence_overhead_us,
            MAX_FINE_OVERHEAD_US,
        )?,
    })
}

/// `hardware:` is a profile name or an inline mapping.
pub(crate) fn hardware_of(value: &serde_yaml::Value, file: &Path) -> Result<Hardware, ConfigError> {
    match value {
        serde_yaml::Value::String(name) => {
            let found = hardware::find(name, file)?;
            let raw: RawHardware = super::parse_str(&found.text, &found.file)?;
            hardware_fields(raw, &found.file, "", name)
        }
        serde_yaml::Value::Mapping(_) => {
            let raw: RawHardware = super::parse_value(value.clone(), file, "hardware")?;
            hardware_fields(raw, file, "hardware.", "inline")
        }
        other => Err(ConfigError::new(
            file,
            "hardware",
            format!(
                "expected a profile name or a mapping with hbm_gib, memory_bandwidth_gbps, \
                 peak_tflops; got {}",
                super::describe_value(other)
            ),
        )),
    }
}

fn hardware_fields(raw: RawHardware, file: &Path, prefix: &str, fallback: &str) -> Result<Hardware, ConfigError> {
    let ck = Check { file };
    let p = |k: &str| format!("{prefix}{k}");
    Ok(Hardware {
        name: raw.name.unwrap_or_else(|| fallback.to_string()),
        hbm_gib: ck.positive(&p("hbm_gib"), raw.hbm_gib)?,
        memory_bandwidth_gbps: ck.positive(&p("memory_bandwidth_gbps"), raw.memory_bandwidth_gbps)?,
        peak_tflops: ck.positive(&p("peak_tflops"), raw.peak_tflops)?,
        peak_tflops_fp8: raw.peak_tflops_fp8.map(|x| ck.positive(&p("peak_tflops_fp8"), x)).transpose()?,
        interconnect: raw.interconnect.map(|i| deployment::interconnect(&ck, i, &p)).transpose()?,
        cost_per_hour: raw.cost_per_hour.map(|c| ck.non_negative(&p("cost_per_hour"), c)).transpose()?,
    })
}

pub(crate) fn workload(ck: &Check, raw: RawWorkload) -> Result<Workload, ConfigError> {
    let requests = raw.requests.map(|n| ck.count("workload.requests", n, 1).map(u64::from)).transpose()?;
    let duration_s = raw.duration_s.map(|d| ck.positive("workload.duration_s", d)).transpose()?;
    let arrivals = arrivals(ck, raw.arrivals)?;
    let is_trace = matches!(arrivals, Arrivals::Trace(_));
    if !is_trace && requests.is_none() && duration_s.is_none() {
        return Err(ck.err("workload", "the workload never ends: set workload.requests, workload.duration_s or both"));
    }
    let length = |key: &str, raw: Option<RawLength>| -> Result<Option<Length>, ConfigError> {
        match (raw, is_trace) {
            (Some(_), true) => Err(ck.err(
                &format!("workload.{key}"),
                "not allowed with a trace: the trace's rows give every request's lengths",
            )),
            (None, true) => Ok(None),
            (None, false) => Err(ck.err(
                &format!("workload.{key}"),
                "missing: give a token count (512) or a distribution (uniform: [256, 1024])",
            )),
            (Some(r), false) => length(ck, &format!("workload.{key}"), r).map(Some),
        }
    };
    Ok(Workload {
        seed: raw.seed.unwrap_or(DEFAULT_SEED),
        prompt_tokens: length("prompt_tokens", raw.prompt_tokens)?,
        output_tokens: length("output_tokens", raw.output_tokens)?,
        arrivals,
        requests,
        duration_s,
    })
}

fn arrivals(ck: &Check, raw: RawArrivals) -> Result<Arrivals, ConfigError> {
    let p = "workload.arrivals";
    Ok(match raw {
        RawArrivals::Poisson { rate } => Arrivals::Poisson { rate: ck.positive(&format!("{p}.poisson.rate"), rate)? },
        RawArrivals::Gamma { rate, burstiness } => Arrivals::Gamma {
            rate: ck.positive(&format!("{p}.gamma.rate"), rate)?,
            burstiness: ck.positive(&format!("{p}.gamma.burstiness"), burstiness)?,
        },
        RawArrivals::Constant { rate } => {
            Arrivals::Constant { rate: ck.positive(&format!("{p}.constant.rate"), rate)? }
        }
        RawArrivals::Closed { concurrency, think_time_s } => Arrivals::Closed {
            concurrency: ck.count(&format!("{p}.closed.concurrency"), concurrency, 1)?,
            think_time_s: ck.non_negative(&format!("{p}.closed.think_time_s"), think_time_s.unwrap_or(0.0))?,
        },
        RawArrivals::Trace(path) => {
            let resolved = ck.file.parent().unwrap_or(Path::new("")).join(&path);
            let rows = crate::workload::trace::read(&resolved)?;
            Arrivals::Trace(Trace { path, rows: Arc::new(rows) })
        }
    })
}

pub(crate) fn length(ck: &Check, path: &str, raw: RawLength) -> Result<Length, ConfigError> {
    let bounds = |min: Option<i64>, max: Option<i64>| -> Result<(u32, Option<u32>), ConfigError> {
        let lo = ck.count(&format!("{path}.min"), min.unwrap_or(1), 1)?;
        let hi = max.map(|m| ck.count(&format!("{path}.max"), m, 1)).transpose()?;
        if let Some(hi) = hi.filter(|&h| h < lo) {
            return Err(ck.err(&format!("{path}.max"), format!("{hi} is not allowed: must be >= min ({lo})")));
        }
        Ok((lo, hi))
    };
    Ok(match raw {
        RawLength::Fixed(n) => Length::Fixed(ck.count(path, n, 1)?),
        RawLength::Dist(RawDist::Uniform([lo, hi])) => {
            let lo = ck.count(&format!("{path}.uniform[0]"), lo, 1)?;
            let hi = ck.count(&format!("{path}.uniform[1]"), hi, 1)?;
            if hi < lo {
                return Err(ck.err(
                    &format!("{path}.uniform"),
                    format!("[{lo}, {hi}] is not allowed: the upper bound must be >= the lower"),
                ));
            }
            Length::Uniform { lo, hi }
        }
        RawLength::Dist(RawDist::Normal(m)) => {
            let (min, max) = bounds(m.min, m.max)?;
            Length::Normal {
                mean: ck.positive(&format!("{path}.normal.mean"), m.mean)?,
                std: ck.non_negative(&format!("{path}.normal.std"), m.std)?,
                min,
                max,
            }
        }
        RawLength::Dist(RawDist::Lognormal(m)) => {
            let (min, max) = bounds(m.min, m.max)?;
            Length::Lognormal {
                mean: ck.positive(&format!("{path}.lognormal.mean"), m.mean)?,
                std: ck.non_negative(&format!("{path}.lognormal.std"), m.std)?,
                min,
                max,
            }
        }
        RawLength::Dist(RawDist::Exponential(m)) => {
            let (min, max) = bounds(m.min, m.max)?;
            Length::Exponential { mean: ck.positive(&format!("{path}.exponential.mean"), m.mean)?, min, max }
        }
        RawLength::Dist(RawDist::Choice(c)) => choice(ck, &format!("{path}.choice"), c)?,
    })
}

fn choice(ck: &Check, path: &str, c: RawChoice) -> Result<Length, ConfigError> {
    if c.values.is_empty() {
        return Err(ck.err(&format!("{path}.values"), "an empty list is not allowed: give at least one length"));
    }
    let values = c
        .values
        .iter()
        .enumerate()
        .map(|(i, &v)| ck.count(&format!("{path}.values[{i}]"), v, 1))
        .collect::<Result<Vec<_>, _>>()?;
    let weights = match c.weights {
        None => vec![1.0; values.len()],
        Some(w) if w.len() != values.len() => {
            return Err(ck.err(
                &format!("{path}.weights"),
                format!("{} weights for {} values: give one weight per value", w.len(), values.len()),
            ));
        }
        Some(w) => w
            .iter()
            .enumerate()
            .map(|(i, &x)| ck.positive(&format!("{path}.weights[{i}]"), x))
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(Length::Choice { values, weights })
}
