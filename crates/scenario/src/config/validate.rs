//! Stage two: every range and cross-field rule, checked once, building the
//! [`Scenario`] the engine consumes. Messages name the key path, the value
//! and what is allowed.

use std::path::Path;
use std::sync::Arc;

// The checker, the defaults and the shared section checks live below the
// builders that use them; the old paths stay.
pub(crate) use super::check::Check;
pub use super::check::{
    DEFAULT_BLOCK_SIZE, DEFAULT_BYTES_PER_PARAMETER, DEFAULT_EFFICIENCY, DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_NUM_SEQUENCES, DEFAULT_MIN_LENGTH, DEFAULT_SEED, DEFAULT_WATERMARK,
};
use super::num::short_float;
use super::raw::*;
use super::scenario::*;
use super::schema;
pub(crate) use super::sections::{hardware_of, run_limits, scheduler};
use super::{ConfigError, deployment};
use crate::trace::ClassColumn;

/// Builds the scenario from its raw form. `file` is the scenario's path.
pub fn scenario(mut raw: RawScenario, file: &Path) -> Result<Scenario, ConfigError> {
    let ck = Check { file };
    let calibration = super::calibration::apply(&mut raw, file)?;
    let hardware = hardware_of(&raw.hardware, file)?;
    // Pools (prefill/decode, or mixed) rebuild the deployment from the raw sections.
    let pool_base = raw.cluster.as_ref().filter(|c| c.has_pools() || c.pools.is_some()).map(|_| pool_base(&raw));
    let built = deployment::build(&ck, raw.model, raw.parallelism, &hardware)?;
    let scheduler = scheduler(&ck, &raw.scheduler)?;
    let latency = latency(&ck, &raw.latency)?;
    let e = &raw.efficiency;
    let opt = |key: &str, v: Option<f64>| v.map(|v| ck.real_at(key, v)).transpose();
    let mut efficiency = Efficiency {
        compute: ck.real_at("efficiency.compute", e.compute.unwrap_or(DEFAULT_EFFICIENCY))?,
        memory: ck.real_at("efficiency.memory", e.memory.unwrap_or(DEFAULT_EFFICIENCY))?,
        gemm_half_tokens: opt("efficiency.gemm_half_tokens", e.gemm_half_tokens)?,
        attention_compute: opt("efficiency.attention_compute", e.attention_compute)?,
        attention_memory: opt("efficiency.attention_memory", e.attention_memory)?,
        allreduce: opt("efficiency.allreduce", e.allreduce)?,
        expert_gemm: opt("efficiency.expert_gemm", e.expert_gemm)?,
    };
    let mut hardware = hardware;
    let (mut latency, mut calibration) = (latency, calibration);
    // A calibration's per-operator keys need the layers and shapes of an
    // architecture; a model given as two numbers keeps the roofline form
    // and the calibration's other keys (explain says which were left out).
    if built.model.architecture.is_none()
        && let Some(used) = calibration.as_mut()
    {
        let from_profile = |k: &str| used.keys.iter().any(|c| c.key == k && c.scenario.is_none());
        let needs: Vec<&'static str> = crate::config::scenario::PER_OPERATOR_KEYS
            .iter()
            .copied()
            .chain(["latency.per_layer_overhead_us"])
            .collect();
        if needs.iter().all(|k| !is_set(&efficiency, &latency, k) || from_profile(k)) {
            for k in &needs {
                if used.keys.iter().any(|c| c.key == *k) {
                    used.unused.push(k);
                }
            }
            used.keys.retain(|c| !needs.contains(&c.key));
            efficiency.clear_per_operator(&mut latency);
            latency.per_layer_overhead_us = 0.0;
        }
    }
    if latency.per_layer_overhead_us > 0.0 && built.model.architecture.is_none() {
        return Err(ck.err(
            "latency.per_layer_overhead_us",
            "needs a model architecture (its layer count): describe the model with model: NAME, \
             model.architecture or model.hf_config, or use step_overhead_ms",
        ));
    }
    match efficiency.per_operator_key(&latency) {
        Some(key) if built.model.architecture.is_none() => {
            return Err(ck.err(
                key,
                "prices each operator of a step (the per-operator form), which needs a model architecture: \
                 describe the model with model: NAME, model.architecture or model.hf_config",
            ));
        }
        // The roofline form reads no kernel table: drop it, so `explain`
        // shows only what is used.
        None => hardware.kernels = None,
        Some(_) => {}
    }
    let workload = workload(&ck, raw.workload)?;
    let engine = match raw.engine.as_deref() {
        None => EngineKind::Vllm,
        Some(name) => EngineKind::parse(name).map_err(|m| ck.err("engine", m))?,
    };
    let speculative = match raw.speculative {
        None => None,
        Some(r) => {
            let cx = super::speculative::Context {
                model: &built.model,
                deployment: &built.deployment,
                parallelism: built.parallelism.as_ref(),
                hardware: &hardware,
                engine,
                pools: raw.cluster.as_ref().is_some_and(|c| c.has_pools()),
            };
            Some(super::speculative::build(&ck, r, &cx)?)
        }
    };
    if scheduler.policy() == PolicyName::Priority {
        if engine != EngineKind::Vllm {
            return Err(ck.err(
                "scheduler.policy",
                format!(
                    "priority is vLLM's --scheduling-policy; engine: {} has no priority policy in llmsim: use \
                     engine: vllm, or leave scheduler.policy out",
                    engine.as_str()
                ),
            ));
        }
        if raw.cluster.as_ref().is_some_and(|c| c.has_pools()) {
            return Err(ck.err(
                "scheduler.policy",
                "priority is not modelled with prefill/decode pools (cluster.prefill, cluster.decode): use \
                 replicas, or leave scheduler.policy out",
            ));
        }
    }
    let pools = raw.cluster.as_ref().is_some_and(|c| c.has_pools());
    offload_allowed(&ck, &built.model, engine, pools)?;
    sglang_allowed(&ck, &scheduler, engine, pools)?;
    let cx = super::lora::Context {
        model: &built.model,
        deployment: &built.deployment,
        engine,
        pools,
        speculative: speculative.is_some(),
    };
    let lora = raw.lora.map(|r| super::lora::build(&ck, r, &cx)).transpose()?;
    let drafter = speculative.as_ref().and_then(|s| s.drafter.as_ref());
    let extra =
        deployment::Resident { drafter, lora_bytes: lora.as_ref().map_or(0.0, super::lora::Lora::resident_bytes) };
    let capacity = deployment::capacity(&ck, &built.model, &built.deployment, &hardware, extra)?;
    let name = raw
        .name
        .unwrap_or_else(|| file.file_stem().map_or_else(|| "scenario".into(), |s| s.to_string_lossy().into_owned()));
    let mut scenario = Scenario {
        name,
        description: raw.description,
        engine,
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
        cluster: None,
        speculative,
        lora,
    };
    scenario.cluster = raw.cluster.map(|c| super::cluster::build(&ck, c, &scenario, pool_base)).transpose()?;
    run_limits(&ck, &scenario)?;
    block_ids_fit(&ck, &scenario)?;
    offload_fits(&ck, &scenario)?;
    super::sections::chunking_fits(&ck, &scenario)?;
    Ok(scenario)
}

/// `model.kv_cache.offload` needs prefix caching, vLLM's scheduler and
/// no pools.
fn offload_allowed(ck: &Check, m: &Model, engine: EngineKind, pools: bool) -> Result<(), ConfigError> {
    if m.kv_cache.offload.is_none() {
        return Ok(());
    }
    let why = if !m.kv_cache.prefix_caching {
        Some("needs model.kv_cache.prefix_caching: true (the tiers hold cached blocks by content)".to_string())
    } else if engine != EngineKind::Vllm {
        Some(format!("is modelled under engine: vllm only, not engine: {}", engine.as_str()))
    } else if pools {
        Some("is not modelled with prefill/decode pools (cluster.prefill, cluster.decode)".to_string())
    } else {
        None
    };
    match why {
        Some(why) => Err(ck.err("model.kv_cache.offload", why)),
        None => Ok(()),
    }
}

/// `engine: sglang` is modelled on one engine or replicas; the
/// scheduler's engine-specific keys ([`super::sections::engine_keys`]).
fn sglang_allowed(ck: &Check, s: &Scheduler, engine: EngineKind, pools: bool) -> Result<(), ConfigError> {
    if engine == EngineKind::Sglang && pools {
        return Err(ck.err(
            "engine",
            "sglang is not modelled with prefill/decode pools (cluster.prefill, cluster.decode): use replicas, \
             or engine: vllm",
        ));
    }
    super::sections::engine_keys(ck, s, engine)
}

/// Every offload tier holds at least one block.
fn offload_fits(ck: &Check, s: &Scenario) -> Result<(), ConfigError> {
    let (Some(o), Some(tiers)) = (&s.model.kv_cache.offload, s.offload_tiers()) else { return Ok(()) };
    for ((name, t), core) in o.tiers().into_iter().zip(&tiers.tiers) {
        if core.blocks == 0 {
            let block = s.deployment.kv_bytes_per_token * u64::from(s.capacity.block_size);
            return Err(ck.err(
                &format!("model.kv_cache.offload.{name}.gib"),
                format!(
                    "{} is smaller than one KV block ({} bytes: {} tokens of {} bytes): give at least {:.6} GiB",
                    short_float(t.gib),
                    llmsim_core::util::thousands(block),
                    s.capacity.block_size,
                    llmsim_core::util::thousands(s.deployment.kv_bytes_per_token),
                    block as f64 / 1024f64.powi(3)
                ),
            ));
        }
    }
    Ok(())
}

/// Whether per-operator key `k` is set.
fn is_set(e: &Efficiency, l: &Latency, k: &str) -> bool {
    match k {
        "efficiency.gemm_half_tokens" => e.gemm_half_tokens.is_some(),
        "efficiency.attention_compute" => e.attention_compute.is_some(),
        "efficiency.attention_memory" => e.attention_memory.is_some(),
        "efficiency.allreduce" => e.allreduce.is_some(),
        "efficiency.expert_gemm" => e.expert_gemm.is_some(),
        "latency.allreduce_us" => l.allreduce_us.is_some(),
        "latency.eager_layer_us" => l.eager_layer_us.is_some(),
        "latency.per_layer_overhead_us" => l.per_layer_overhead_us > 0.0,
        _ => l.per_expert_us.is_some(),
    }
}

/// A trace with `block_ids` (a `llmsim serve --record` file) names blocks
/// of its own block size: replaying it with another one would share the
/// wrong tokens.
fn block_ids_fit(ck: &Check, s: &Scenario) -> Result<(), ConfigError> {
    let Arrivals::Trace(t) = &s.workload.arrivals else { return Ok(()) };
    let recorded = t.content.as_ref().and_then(|c| c.rows.iter().find_map(|r| r.blocks.as_ref()));
    let bs = s.capacity.block_size;
    match recorded {
        Some(b) if b.block_size != bs => Err(ck.err(
            "workload.arrivals.trace",
            format!(
                "{}: its block_ids count blocks of {} tokens, but model.kv_cache.block_size is {bs}; \
                 replay it with block_size {} (the recording model's)",
                t.path, b.block_size, b.block_size
            ),
        )),
        _ => Ok(()),
    }
}

fn latency(ck: &Check, raw: &RawLatency) -> Result<Latency, ConfigError> {
    let real = |key: &str, v: Option<f64>| ck.real_at(&format!("latency.{key}"), v.unwrap_or(0.0));
    let opt = |key: &str, v: Option<f64>| v.map(|v| ck.real_at(&format!("latency.{key}"), v)).transpose();
    Ok(Latency {
        step_overhead_ms: real("step_overhead_ms", raw.step_overhead_ms)?,
        request_overhead_ms: real("request_overhead_ms", raw.request_overhead_ms)?,
        per_layer_overhead_us: real("per_layer_overhead_us", raw.per_layer_overhead_us)?,
        per_sequence_overhead_us: real("per_sequence_overhead_us", raw.per_sequence_overhead_us)?,
        allreduce_us: opt("allreduce_us", raw.allreduce_us)?,
        eager_layer_us: opt("eager_layer_us", raw.eager_layer_us)?,
        per_expert_us: opt("per_expert_us", raw.per_expert_us)?,
        resend_jitter_ms: opt("resend_jitter_ms", raw.resend_jitter_ms)?,
    })
}

pub(crate) fn workload(ck: &Check, raw: RawWorkload) -> Result<Workload, ConfigError> {
    let requests = raw.requests.map(|n| ck.whole_at("workload.requests", n)).transpose()?;
    let duration_s = raw.duration_s.map(|d| ck.real_at("workload.duration_s", d)).transpose()?;
    let hash_block_size = raw.hash_block_size.map(|n| ck.whole32_at("workload.hash_block_size", n)).transpose()?;
    let (mut arrivals, class_column) = arrivals(ck, raw.arrivals, hash_block_size, duration_s)?;
    let classes = raw.classes.map(|c| classes(ck, c)).transpose()?.unwrap_or_default();
    if let (Arrivals::Trace(t), Some(column)) = (&mut arrivals, class_column)
        && !classes.is_empty()
    {
        t.classes = Some(Arc::new(trace_classes(ck, &t.path, &classes, column)?));
    }
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
                groups: ck.whole32_at("workload.shared_prefix.groups", sp.groups)?,
                tokens: ck.whole32_at("workload.shared_prefix.tokens", sp.tokens)?,
            })
        })
        .transpose()?;
    if raw.sessions.is_some() && matches!(arrivals, Arrivals::Curve(_)) {
        return Err(ck.err(
            "workload.sessions",
            "not modelled with a rate curve (conversations start at one rate): use poisson, gamma or constant \
             arrivals with sessions",
        ));
    }
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
        classes,
        rate_class: None,
    })
}

/// `workload.classes`: 1 to [`MAX_CLASSES`] classes with distinct names,
/// positive weights and priorities within `i32`.
fn classes(ck: &Check, raw: Vec<RawClass>) -> Result<Vec<Class>, ConfigError> {
    let p = "workload.classes";
    if raw.is_empty() || raw.len() > MAX_CLASSES {
        return Err(ck.err(
            p,
            format!("{} classes are not allowed: give 1 to {MAX_CLASSES} ({{name, weight, priority}} each)", raw.len()),
        ));
    }
    let mut out: Vec<Class> = Vec::with_capacity(raw.len());
    for (i, c) in raw.into_iter().enumerate() {
        let name = c.name.map(|n| n.trim().to_string()).unwrap_or_default();
        if name.is_empty() {
            return Err(ck.err(&format!("{p}[{i}].name"), "missing: every class has a name (interactive, batch, ...)"));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(ck.err(&format!("{p}[{i}].name"), format!("`{name}` is named twice: class names must differ")));
        }
        let weight = c.weight.unwrap_or(1.0);
        if !(weight.is_finite() && weight > 0.0 && weight <= 1e9) {
            return Err(ck.err(
                &format!("{p}[{i}].weight"),
                format!(
                    "{} is not allowed: must be above 0 and at most 1e9 (a share of the arrivals)",
                    short_float(weight)
                ),
            ));
        }
        let priority = c.priority.unwrap_or(0);
        let priority = i32::try_from(priority).map_err(|_| {
            ck.err(
                &format!("{p}[{i}].priority"),
                format!("{priority} is not allowed: must be a whole number from {} to {}", i32::MIN, i32::MAX),
            )
        })?;
        out.push(Class { name, weight, priority });
    }
    Ok(out)
}

/// A trace's `class` column as indices into `workload.classes`: every
/// name it holds must be one of them.
fn trace_classes(ck: &Check, path: &str, classes: &[Class], column: ClassColumn) -> Result<Vec<u8>, ConfigError> {
    let mut index = Vec::with_capacity(column.names.len());
    for (k, name) in column.names.iter().enumerate() {
        match classes.iter().position(|c| c.name == *name) {
            Some(i) => index.push(i as u8),
            None => {
                let row = column.of_row.iter().position(|&r| usize::from(r) == k).unwrap_or(0);
                let known: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
                return Err(ck.err(
                    "workload.arrivals.trace",
                    format!(
                        "{path}: row {} names class `{}`, which is not in workload.classes ({})",
                        row + 1,
                        llmsim_core::util::short_text(name),
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(column.of_row.iter().map(|&r| index[usize::from(r)]).collect())
}

fn sessions(ck: &Check, raw: RawSessions) -> Result<Sessions, ConfigError> {
    let p = "workload.sessions.think_s";
    let think_s = match raw.think_s {
        None => Seconds::Fixed(0.0),
        Some(RawSeconds::Fixed(x)) => Seconds::Fixed(ck.real_at(p, x)?),
        Some(RawSeconds::Dist(RawSecondsDist::Uniform([lo, hi]))) => {
            let lo = ck.real_at(&format!("{p}.uniform[0]"), lo)?;
            let hi = ck.real_at(&format!("{p}.uniform[1]"), hi)?;
            if hi < lo {
                return Err(ck.err(
                    &format!("{p}.uniform"),
                    format!("[{lo}, {hi}] is not allowed: the upper bound must be >= the lower"),
                ));
            }
            Seconds::Uniform { lo, hi }
        }
        Some(RawSeconds::Dist(RawSecondsDist::Exponential(m))) => {
            Seconds::Exponential { mean: ck.real_at(&format!("{p}.exponential.mean"), m.mean)? }
        }
    };
    Ok(Sessions { turns: length(ck, "workload.sessions.turns", raw.turns)?, think_s })
}

fn arrivals(
    ck: &Check,
    raw: RawArrivals,
    hash_block_size: Option<u32>,
    duration_s: Option<f64>,
) -> Result<(Arrivals, Option<ClassColumn>), ConfigError> {
    let p = "workload.arrivals";
    let mut column = None;
    let arrivals = match raw {
        RawArrivals::Poisson { rate } => Arrivals::Poisson { rate: ck.real_at(&format!("{p}.poisson.rate"), rate)? },
        RawArrivals::Gamma { rate, burstiness } => Arrivals::Gamma {
            rate: ck.real_at(&format!("{p}.gamma.rate"), rate)?,
            burstiness: ck.real_at(&format!("{p}.gamma.burstiness"), burstiness)?,
        },
        RawArrivals::Constant { rate } => Arrivals::Constant { rate: ck.real_at(&format!("{p}.constant.rate"), rate)? },
        RawArrivals::Closed { concurrency, think_time_s, ramp_s } => Arrivals::Closed {
            concurrency: ck.whole32_at(&format!("{p}.closed.concurrency"), concurrency)?,
            think_time_s: ck.real_at(&format!("{p}.closed.think_time_s"), think_time_s.unwrap_or(0.0))?,
            ramp_s: ck.real_at(&format!("{p}.closed.ramp_s"), ramp_s.unwrap_or(0.0))?,
        },
        RawArrivals::Trace(path) => {
            let resolved = ck.file.parent().unwrap_or(Path::new("")).join(&path);
            let (rows, content, classes) = crate::trace::read_with_classes(&resolved, hash_block_size)?;
            column = classes;
            Arrivals::Trace(Trace { path, rows: Arc::new(rows), content: content.map(Arc::new), classes: None })
        }
        RawArrivals::Curve(c) => Arrivals::Curve(super::curve::build(ck, c, duration_s)?),
    };
    Ok((arrivals, column))
}

pub(crate) fn length(ck: &Check, path: &str, raw: RawLength) -> Result<Length, ConfigError> {
    // Messages name `{path}.min`; the range is the key's, `{path}.{form}.min`.
    let bounds = |form: &str, min: Option<i64>, max: Option<i64>| -> Result<(u32, Option<u32>), ConfigError> {
        let (min_key, max_key) = (format!("{path}.{form}.min"), format!("{path}.{form}.max"));
        let min = min.unwrap_or(i64::from(DEFAULT_MIN_LENGTH));
        let lo = ck.whole32(&format!("{path}.min"), min, schema::range(&min_key))?;
        let hi = max.map(|m| ck.whole32(&format!("{path}.max"), m, schema::range(&max_key))).transpose()?;
        if let Some(hi) = hi.filter(|&h| h < lo) {
            return Err(ck.err(&format!("{path}.max"), format!("{hi} is not allowed: must be >= min ({lo})")));
        }
        Ok((lo, hi))
    };
    Ok(match raw {
        RawLength::Fixed(n) => Length::Fixed(ck.whole32_at(path, n)?),
        RawLength::Dist(RawDist::Uniform([lo, hi])) => {
            let lo = ck.whole32_at(&format!("{path}.uniform[0]"), lo)?;
            let hi = ck.whole32_at(&format!("{path}.uniform[1]"), hi)?;
            if hi < lo {
                return Err(ck.err(
                    &format!("{path}.uniform"),
                    format!("[{lo}, {hi}] is not allowed: the upper bound must be >= the lower"),
                ));
            }
            Length::Uniform { lo, hi }
        }
        RawLength::Dist(RawDist::Normal(m)) => {
            let (min, max) = bounds("normal", m.min, m.max)?;
            Length::Normal {
                mean: ck.real_at(&format!("{path}.normal.mean"), m.mean)?,
                std: ck.real_at(&format!("{path}.normal.std"), m.std)?,
                min,
                max,
            }
        }
        RawLength::Dist(RawDist::Lognormal(m)) => {
            let (min, max) = bounds("lognormal", m.min, m.max)?;
            Length::Lognormal {
                mean: ck.real_at(&format!("{path}.lognormal.mean"), m.mean)?,
                std: ck.real_at(&format!("{path}.lognormal.std"), m.std)?,
                min,
                max,
            }
        }
        RawLength::Dist(RawDist::Exponential(m)) => {
            let (min, max) = bounds("exponential", m.min, m.max)?;
            let mean = ck.real_at(&format!("{path}.exponential.mean"), m.mean)?;
            Length::Exponential { mean, min, max }
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
        .map(|(i, &v)| ck.whole32_at(&format!("{path}.values[{i}]"), v))
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
            .map(|(i, &x)| ck.real_at(&format!("{path}.weights[{i}]"), x))
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(Length::Choice { values, weights })
}

/// The raw sections a pool's scenario is rebuilt from.
fn pool_base(raw: &RawScenario) -> super::cluster::PoolBase {
    super::cluster::PoolBase {
        model: raw.model.clone(),
        parallelism: raw.parallelism.clone(),
        scheduler: raw.scheduler.clone(),
    }
}
