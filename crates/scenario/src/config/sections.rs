//! Sections checked the same way for a scenario (`validate`) and for a
//! cluster's pool (`cluster`): `hardware:`, `scheduler:` and the rules
//! that bound a run's work. Below both, so the pool builder does not reach
//! into the scenario builder that calls it.

use std::path::Path;

use super::ConfigError;
use super::check::{Check, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_NUM_SEQUENCES};
use super::num::short_float;
use super::raw::{RawHardware, RawScheduler};
use super::scenario::{CapacityName, ChunkingName, EngineKind, Hardware, PolicyName, Scenario, Scheduler};
use super::{deployment, hardware};
use super::{limits, schema};
use llmsim_core::util::thousands;

/// `scheduler:` (or a pool's, merged over it), defaults filled in.
pub(crate) fn scheduler(ck: &Check, raw: &RawScheduler) -> Result<Scheduler, ConfigError> {
    Ok(Scheduler {
        max_batch_tokens: match raw.max_batch_tokens {
            Some(v) => ck.whole32_at("scheduler.max_batch_tokens", v)?,
            None => DEFAULT_MAX_BATCH_TOKENS,
        },
        max_num_sequences: match raw.max_num_sequences {
            Some(v) => ck.whole32_at("scheduler.max_num_sequences", v)?,
            None => DEFAULT_MAX_NUM_SEQUENCES,
        },
        cuda_graph_max_tokens: raw
            .cuda_graph_max_tokens
            .map(|v| ck.whole32_at("scheduler.cuda_graph_max_tokens", v))
            .transpose()?,
        policy_given: match raw.policy.as_deref() {
            None => None,
            Some("fcfs") => Some(PolicyName::Fcfs),
            Some("priority") => Some(PolicyName::Priority),
            Some(other) => {
                return Err(ck.err(
                    "scheduler.policy",
                    format!(
                        "`{}` is not a scheduling policy; the policies are {} (vLLM's --scheduling-policy)",
                        llmsim_core::util::short_text(other),
                        PolicyName::KNOWN.join(", ")
                    ),
                ));
            }
        },
        new_token_ratio: raw.new_token_ratio.map(|v| ck.real_at("scheduler.new_token_ratio", v)).transpose()?,
        mixed_chunk: raw.mixed_chunk,
        max_prefill_tokens: raw
            .max_prefill_tokens
            .map(|v| ck.whole32_at("scheduler.max_prefill_tokens", v))
            .transpose()?,
        capacity_scheduler_policy: trtllm_name(
            ck,
            "capacity_scheduler_policy",
            raw.capacity_scheduler_policy.as_deref(),
            CapacityName::parse,
            CapacityName::KNOWN,
        )?,
        context_chunking_policy: trtllm_name(
            ck,
            "context_chunking_policy",
            raw.context_chunking_policy.as_deref(),
            ChunkingName::parse,
            ChunkingName::KNOWN,
        )?,
    })
}

/// `scheduler.new_token_ratio`, `mixed_chunk` and `max_prefill_tokens`
/// are SGLang's keys alone, the capacity and
/// chunking policies TensorRT-LLM's (a scenario's scheduler, or a pool's).
pub(crate) fn engine_keys(ck: &Check, s: &Scheduler, engine: EngineKind) -> Result<(), ConfigError> {
    for (key, given, owner) in [
        ("scheduler.capacity_scheduler_policy", s.capacity_scheduler_policy.is_some(), EngineKind::Trtllm),
        ("scheduler.context_chunking_policy", s.context_chunking_policy.is_some(), EngineKind::Trtllm),
        ("scheduler.new_token_ratio", s.new_token_ratio.is_some(), EngineKind::Sglang),
        ("scheduler.mixed_chunk", s.mixed_chunk.is_some(), EngineKind::Sglang),
        ("scheduler.max_prefill_tokens", s.max_prefill_tokens.is_some(), EngineKind::Sglang),
    ] {
        if given && engine != owner {
            let whose = if owner == EngineKind::Trtllm { "TensorRT-LLM's" } else { "SGLang's" };
            return Err(ck.err(
                key,
                format!("is {whose}: it needs engine: {}, not engine: {}", owner.as_str(), engine.as_str()),
            ));
        }
    }
    Ok(())
}

/// `scheduler.<key>`, one of TensorRT-LLM's policy names (`known`), if
/// given.
fn trtllm_name<T>(
    ck: &Check,
    key: &str,
    given: Option<&str>,
    parse: fn(&str) -> Option<T>,
    known: &str,
) -> Result<Option<T>, ConfigError> {
    let Some(v) = given else { return Ok(None) };
    let what = key.replace('_', " ");
    parse(v).map(Some).ok_or_else(|| {
        ck.err(
            &format!("scheduler.{key}"),
            format!("`{}` is not a {what}; TensorRT-LLM's are {known}", llmsim_core::util::short_text(v)),
        )
    })
}

/// TensorRT-LLM's chunked prefill cuts prompts to whole KV blocks: a
/// budget below one block would never give a long prompt a chunk.
pub(crate) fn chunking_fits(ck: &Check, s: &Scenario) -> Result<(), ConfigError> {
    let (budget, block) = (s.scheduler.max_batch_tokens, s.capacity.block_size);
    if s.scheduler.context_chunking_policy.is_some() && budget < block {
        return Err(ck.err(
            "scheduler.max_batch_tokens",
            format!(
                "{} is less than one KV block ({} tokens): scheduler.context_chunking_policy cuts prompts to \
                 whole blocks, so a longer prompt would never get a chunk; give at least {}",
                thousands(u64::from(budget)),
                thousands(u64::from(block)),
                thousands(u64::from(block))
            ),
        ));
    }
    Ok(())
}

/// Rules that bound the work of one run (see [`limits`]): the cheapest
/// step costs at least [`limits::MIN_STEP_SECONDS`], and an open loop
/// limited only by its duration would not issue more than
/// [`limits::MAX_REQUESTS`] requests.
pub(crate) fn run_limits(ck: &Check, s: &Scenario) -> Result<(), ConfigError> {
    let cheapest = s.engine_config().cost.step(1, 1).total_s;
    if cheapest.is_nan() || cheapest < limits::MIN_STEP_SECONDS {
        return Err(ck.err(
            "model.weights.parameters_billions",
            format!(
                "the cheapest step of this model on this hardware (one token, the weights read once) \
                 costs {:.3} ns; llmsim needs at least {} ns a step, as a real step's kernel launches \
                 and scheduling alone take longer: this model is too small for the hardware; use a \
                 larger model or set latency.step_overhead_ms (e.g. 0.01)",
                cheapest * 1e9,
                thousands((limits::MIN_STEP_SECONDS * 1e9) as u64)
            ),
        ));
    }
    let w = &s.workload;
    let rate = match &w.arrivals {
        // A curve's mean rate over the run.
        super::scenario::Arrivals::Curve(c) => {
            w.duration_s.map(|d| super::curve::RateCurve::new(c, d).cumulative(d) / d)
        }
        _ => w.rate(),
    };
    if let (Some(rate), Some(d), None) = (rate, w.duration_s, w.requests) {
        let expected = rate * d;
        if expected > limits::MAX_SUMMARY_REQUESTS as f64 {
            return Err(ck.err(
                "workload.duration_s",
                format!(
                    "{} req/s for {} s is about {} requests; a run may issue at most {}: \
                     set workload.requests, or a shorter duration_s",
                    short_float(rate),
                    short_float(d),
                    short_float(expected.round()),
                    thousands(limits::MAX_SUMMARY_REQUESTS)
                ),
            ));
        }
    }
    Ok(())
}

/// `hardware:` is a profile name or an inline mapping.
pub(crate) fn hardware_of(value: &crate::yaml::Value, file: &Path) -> Result<Hardware, ConfigError> {
    match value {
        crate::yaml::Value::String(name) => {
            let found = hardware::find(name, file)?;
            let raw: RawHardware = super::parse_str(&found.text, &found.file)?;
            hardware_fields(raw, &found.file, "", name)
        }
        crate::yaml::Value::Mapping(_) => {
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
    // A profile file names its keys without `hardware.`; the range is the key's.
    let real = |k: &str, v: f64| ck.real(&p(k), v, schema::range(&format!("hardware.{k}")));
    Ok(Hardware {
        name: raw.name.unwrap_or_else(|| fallback.to_string()),
        hbm_gib: real("hbm_gib", raw.hbm_gib)?,
        memory_bandwidth_gbps: real("memory_bandwidth_gbps", raw.memory_bandwidth_gbps)?,
        peak_tflops: real("peak_tflops", raw.peak_tflops)?,
        peak_tflops_fp8: raw.peak_tflops_fp8.map(|x| real("peak_tflops_fp8", x)).transpose()?,
        peak_tflops_fp4: raw.peak_tflops_fp4.map(|x| real("peak_tflops_fp4", x)).transpose()?,
        interconnect: raw.interconnect.map(|i| deployment::interconnect(&ck, i, &p)).transpose()?,
        gpus_per_node: raw
            .gpus_per_node
            .map(|g| ck.whole32(&p("gpus_per_node"), g, schema::range("hardware.gpus_per_node")))
            .transpose()?,
        send_recv: raw.send_recv.map(|l| deployment::point_to_point(&ck, l, "send_recv", &p)).transpose()?,
        network: raw.network.map(|l| deployment::point_to_point(&ck, l, "network", &p)).transpose()?,
        cost_per_hour: raw.cost_per_hour.map(|c| real("cost_per_hour", c)).transpose()?,
        kernels: raw
            .kernels
            .as_ref()
            .map(|k| super::kernels::parse(&ck, k, &p("kernels")).map(std::sync::Arc::new))
            .transpose()?,
    })
}
