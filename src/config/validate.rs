//! Stage two: every range and cross-field rule, checked once, building the
//! [`Scenario`] the engine consumes. Messages name the key path, the value
//! and what is allowed.

use std::path::Path;
use std::sync::Arc;

use super::raw::*;
use super::scenario::*;
use super::{ConfigError, hardware};
use crate::engine::{Capacity, CapacityInput};

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

/// Builds the scenario from its raw form. `file` is the scenario's path.
pub fn scenario(raw: RawScenario, file: &Path) -> Result<Scenario, ConfigError> {
    let ck = Check { file };
    let hardware = hardware_of(&raw.hardware, file)?;
    let model = model(&ck, raw.model)?;
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
    let latency = Latency {
        step_overhead_ms: ck.non_negative("latency.step_overhead_ms", raw.latency.step_overhead_ms.unwrap_or(0.0))?,
    };
    let efficiency = Efficiency {
        compute: ck.fraction("efficiency.compute", raw.efficiency.compute.unwrap_or(1.0))?,
        memory: ck.fraction("efficiency.memory", raw.efficiency.memory.unwrap_or(1.0))?,
    };
    let workload = workload(&ck, raw.workload)?;
    let capacity = Capacity::compute(&CapacityInput {
        hbm_gib: hardware.hbm_gib,
        gpu_memory_utilization: model.kv_cache.gpu_memory_utilization,
        parameters_billions: model.weights.parameters_billions,
        bytes_per_parameter: model.weights.bytes_per_parameter,
        kv_bytes_per_token: model.kv_cache.bytes_per_token,
        block_size: model.kv_cache.block_size,
        watermark: model.kv_cache.watermark,
        num_blocks_override: model.kv_cache.num_blocks,
    })
    .map_err(|e| ck.err("model.weights", e.to_string()))?;
    let name = raw
        .name
        .unwrap_or_else(|| file.file_stem().map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned()));
    Ok(Scenario {
        name,
        description: raw.description,
        hardware,
        model,
        scheduler,
        latency,
        efficiency,
        workload,
        source: file.to_path_buf(),
        capacity,
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
        cost_per_hour: raw.cost_per_hour.map(|c| ck.non_negative(&p("cost_per_hour"), c)).transpose()?,
    })
}

pub(crate) fn model(ck: &Check, raw: RawModel) -> Result<Model, ConfigError> {
    let kv = raw.kv_cache;
    Ok(Model {
        name: raw.name.unwrap_or_else(|| "model".into()),
        context_length: ck.count("model.context_length", raw.context_length, 2)?,
        weights: Weights {
            parameters_billions: ck.positive("model.weights.parameters_billions", raw.weights.parameters_billions)?,
            bytes_per_parameter: ck.positive(
                "model.weights.bytes_per_parameter",
                raw.weights.bytes_per_parameter.unwrap_or(DEFAULT_BYTES_PER_PARAMETER),
            )?,
        },
        kv_cache: KvCache {
            bytes_per_token: u64::from(ck.count("model.kv_cache.bytes_per_token", kv.bytes_per_token, 1)?),
            block_size: match kv.block_size {
                Some(b) => ck.count("model.kv_cache.block_size", b, 1)?,
                None => DEFAULT_BLOCK_SIZE,
            },
            gpu_memory_utilization: ck.fraction(
                "model.kv_cache.gpu_memory_utilization",
                kv.gpu_memory_utilization.unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION),
            )?,
            watermark: ck.open_fraction("model.kv_cache.watermark", kv.watermark.unwrap_or(DEFAULT_WATERMARK))?,
            num_blocks: kv
                .num_blocks
                .map(|n| ck.count("model.kv_cache.num_blocks", n, 1).map(u64::from))
                .transpose()?,
            prefix_caching: kv.prefix_caching.unwrap_or(false),
        },
    })
}

pub(crate) fn workload(ck: &Check, raw: RawWorkload) -> Result<Workload, ConfigError> {
    let requests = raw.requests.map(|n| ck.count("workload.requests", n, 1).map(u64::from)).transpose()?;
    let duration_s = raw.duration_s.map(|d| ck.positive("workload.duration_s", d)).transpose()?;
    let hash_block_size = raw.hash_block_size.map(|n| ck.count("workload.hash_block_size", n, 1)).transpose()?;
    let arrivals = arrivals(ck, raw.arrivals, hash_block_size)?;
    let is_trace = matches!(arrivals, Arrivals::Trace(_));
    let arrivals_block_size = match &arrivals {
        Arrivals::Trace(t) => t.content.as_ref().and_then(|c| c.hash_block_size),
        _ => None,
    };
    if let Some(n) = hash_block_size {
        let jsonl =
            matches!(&arrivals, Arrivals::Trace(t) if t.content.as_ref().is_some_and(|c| c.hash_block_size.is_some()));
        if !jsonl {
            return Err(ck.err(
                "workload.hash_block_size",
                format!("{n} is not allowed here: it only applies to a JSONL trace with hash_ids (Mooncake style)"),
            ));
        }
    }
    let only_generated = |key: &str, given: bool| -> Result<(), ConfigError> {
        if given && is_trace {
            return Err(ck.err(
                &format!("workload.{key}"),
                "not allowed with a trace: use the trace's prefix_id, prefix_tokens and session_id columns",
            ));
        }
        Ok(())
    };
    only_generated("shared_prefix", raw.shared_prefix.is_some())?;
    only_generated("sessions", raw.sessions.is_some())?;
    let shared_prefix = raw
        .shared_prefix
        .map(|sp| {
            Ok::<_, ConfigError>(SharedPrefix {
                groups: ck.count("workload.shared_prefix.groups", sp.groups, 1)?,
                tokens: ck.count("workload.shared_prefix.tokens", sp.tokens, 1)?,
            })
        })
        .transpose()?;
    let sessions = raw.sessions.map(|se| sessions(ck, se)).transpose()?;
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
        shared_prefix,
        sessions,
        // A JSONL trace shows the block size it was read with, default included.
        hash_block_size: match &arrivals_block_size {
            Some(bs) => Some(*bs),
            None => hash_block_size,
        },
    })
}

fn sessions(ck: &Check, raw: RawSessions) -> Result<Sessions, ConfigError> {
    let p = "workload.sessions.think_s";
    let think_s = match raw.think_s {
        None => Seconds::Fixed(0.0),
        Some(RawSeconds::Fixed(x)) => Seconds::Fixed(ck.non_negative(p, x)?),
        Some(RawSeconds::Dist(RawSecondsDist::Uniform([lo, hi]))) => {
            let lo = ck.non_negative(&format!("{p}.uniform[0]"), lo)?;
            let hi = ck.non_negative(&format!("{p}.uniform[1]"), hi)?;
            if hi < lo {
                return Err(ck.err(
                    &format!("{p}.uniform"),
                    format!("[{lo}, {hi}] is not allowed: the upper bound must be >= the lower"),
                ));
            }
            Seconds::Uniform { lo, hi }
        }
        Some(RawSeconds::Dist(RawSecondsDist::Exponential(m))) => {
            Seconds::Exponential { mean: ck.positive(&format!("{p}.exponential.mean"), m.mean)? }
        }
    };
    Ok(Sessions { turns: length(ck, "workload.sessions.turns", raw.turns)?, think_s })
}

fn arrivals(ck: &Check, raw: RawArrivals, hash_block_size: Option<u32>) -> Result<Arrivals, ConfigError> {
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
            let (rows, content) = crate::workload::trace::read_with_content(&resolved, hash_block_size)?;
            Arrivals::Trace(Trace { path, rows: Arc::new(rows), content: content.map(Arc::new) })
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
