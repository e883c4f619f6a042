//! The result JSON: the stable contract (docs/results.md).
//!
//! # Wire format
//!
//! `llmsim run SCENARIO --json FILE` writes one [`RunResult`] object. Keys in
//! the contract (docs/results.md) never change without bumping `schema_version`; the
//! others may be added to. Times are milliseconds (`*_ms`) or seconds
//! (`*_s`); latency summaries are `{count, mean, p50, p90, p99, max}` over
//! completed requests (ITL over every gap between two tokens of a request),
//! `null` when there is no sample. Percentiles interpolate linearly between
//! closest ranks, as numpy and `vllm bench serve` do. `deployment`
//! (`{gpus, tensor_parallel, parameters, active_parameters,
//! kv_bytes_per_token_per_gpu}`) is written for a model with an
//! architecture and left out otherwise.

use serde::{Deserialize, Serialize};

pub use super::percentile::Stats;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: u32,
    pub scenario: String,
    pub seed: u64,
    pub capacity: CapacityOut,
    pub requests: RequestsOut,
    pub throughput: ThroughputOut,
    /// Arrival to first token.
    pub ttft_ms: Stats,
    /// Every gap between consecutive tokens of a request, pooled.
    pub itl_ms: Stats,
    /// Per request: `(last token - first token) / (N - 1)`, for `N > 1`.
    pub tpot_ms: Stats,
    /// Arrival to last token.
    pub e2e_ms: Stats,
    /// Arrival to the start of the first step that schedules the request.
    pub queue_ms: Stats,
    pub steps: StepsOut,
    pub kv: KvOut,
    /// Preemptions over the run (a request may suffer several).
    pub preemptions: u64,
    /// The deployment (docs/deployments.md). Present only when
    /// the model has an architecture, so a scenario without deployment keys's JSON keeps
    /// its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentOut>,
    /// Only with `kv_cache.prefix_caching: true` (absent otherwise, so
    /// results without it keep their bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache: Option<PrefixCacheOut>,
    /// With `cluster:` only (docs/clusters.md; absent otherwise, so
    /// results without it keep their bytes): the router's name, the GPUs
    /// of the whole cluster (replicas times tensor degree), each replica's
    /// figures by index, and `imbalance`, max over mean of requests per
    /// replica. The figures above are the aggregate over every replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<ReplicaOut>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imbalance: Option<f64>,
    /// With `cluster.prefill`/`cluster.decode` only (docs/clusters.md):
    /// each pool's step and KV figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolsOut>,
    /// With pools only: the KV transfer of every request handed from a
    /// prefill replica to a decode replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_ms: Option<Stats>,
    /// With `speculative:` only (docs/speculative.md): vLLM's
    /// spec-decoding counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeOut>,
    /// With `workload.classes` only (docs/priorities.md): each class's
    /// figures, in the order the scenario gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<ClassOut>>,
    /// With `model.kv_cache.offload` only (docs/offload.md): each tier's
    /// loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<Vec<OffloadTierOut>>,
    /// With `lora:` only (docs/lora.md): the adapters' slot copies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<LoraOut>,
    /// With `cluster.autoscale` or `cluster.timeline` only
    /// (docs/clusters.md): GPU-hours, cost, the autoscaler's changes and
    /// the windows that missed the SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_time: Option<super::over_time::OverTimeOut>,
}

/// LoRA over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoraOut {
    /// Adapters on the model.
    pub adapters: u64,
    /// GPU slots: the most distinct adapters a step used.
    pub max_loras: u32,
    /// Copies of an adapter from host memory into a slot.
    pub loads: u64,
    /// Seconds steps waited for those copies.
    pub load_s: f64,
    /// Bytes of one slot on one GPU (at `max_lora_rank`).
    pub slot_bytes_per_gpu: f64,
}

/// One offload tier's figures over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OffloadTierOut {
    /// `cpu` or `disk`.
    pub tier: String,
    /// Blocks it holds (its size in whole blocks).
    pub capacity_blocks: u64,
    /// Prompt tokens loaded from it instead of computed, over every
    /// admission.
    pub loaded_tokens: u64,
    /// `loaded_tokens` over the tokens the admissions looked up (the
    /// denominator of `prefix_cache.hit_rate`): its share beside the GPU's.
    pub hit_rate: f64,
    /// Seconds steps waited for its loads.
    pub load_s: f64,
}

/// One class's figures: its requests and latencies as the run-wide ones
/// are counted, its throughput over the whole run's duration (so the
/// classes' rates add up to the run's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassOut {
    pub name: String,
    pub priority: i32,
    pub weight: f64,
    pub requests: RequestsOut,
    pub throughput: ThroughputOut,
    pub ttft_ms: Stats,
    pub itl_ms: Stats,
    pub tpot_ms: Stats,
    pub e2e_ms: Stats,
    pub queue_ms: Stats,
    pub preemptions: u64,
}

/// Speculative decoding's counters, named as vLLM's `/metrics` names them
/// (`vllm:spec_decode_num_drafts` and so on) and its log line's rates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeculativeOut {
    /// Verify steps of a request (each checks one run of drafts).
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    /// Accepted drafts at each position (0-based).
    pub num_accepted_tokens_per_pos: Vec<u64>,
    /// `num_accepted_tokens / num_draft_tokens`.
    pub acceptance_rate: f64,
    /// `1 + num_accepted_tokens / num_drafts`: tokens a verify step released,
    /// before any cut at the request's last token.
    pub mean_acceptance_length: f64,
    /// `num_accepted_tokens_per_pos / num_drafts`.
    pub acceptance_by_position: Vec<f64>,
}

impl SpeculativeOut {
    /// The derived rates of the counters.
    pub fn from_counts(num_drafts: u64, num_draft_tokens: u64, per_pos: Vec<u64>) -> SpeculativeOut {
        let accepted: u64 = per_pos.iter().sum();
        let ratio = |a: u64, b: u64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
        SpeculativeOut {
            num_drafts,
            num_draft_tokens,
            num_accepted_tokens: accepted,
            acceptance_rate: ratio(accepted, num_draft_tokens),
            mean_acceptance_length: 1.0 + ratio(accepted, num_drafts),
            acceptance_by_position: per_pos.iter().map(|&a| ratio(a, num_drafts)).collect(),
            num_accepted_tokens_per_pos: per_pos,
        }
    }
}

/// The two pools of a disaggregated cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolsOut {
    pub prefill: PoolOut,
    pub decode: PoolOut,
}

/// One pool's figures: its replicas' steps pooled, its KV peak the
/// largest replica's, its capacity one replica's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolOut {
    pub replicas: u32,
    pub router: String,
    /// Replicas times tensor degree.
    pub gpus: u32,
    pub capacity: CapacityOut,
    /// Requests routed to the pool's replicas.
    pub requests: u64,
    pub steps: StepsOut,
    pub kv: KvOut,
    pub preemptions: u64,
    /// Max over mean of requests per replica of the pool.
    pub imbalance: f64,
}

/// One engine's deployment: `gpus` is what a replica costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeploymentOut {
    pub gpus: u32,
    pub tensor_parallel: u32,
    /// Parameters used for weight bytes (the architecture's, or an explicit override).
    pub parameters: u64,
    /// Parameters one token uses (fewer than `parameters` for a mixture of experts).
    pub active_parameters: u64,
    /// With pipeline stages, a GPU of the largest stage's share.
    pub kv_bytes_per_token_per_gpu: u64,
    /// Pipeline stages, when more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel: Option<u32>,
}

impl DeploymentOut {
    /// The figures of a scenario whose model has an architecture.
    pub fn of(s: &llmsim_scenario::config::Scenario) -> Option<DeploymentOut> {
        s.model.architecture.as_ref()?;
        let d = &s.deployment;
        Some(DeploymentOut {
            gpus: d.gpus(),
            tensor_parallel: d.tensor_parallel,
            parameters: d.parameters.round() as u64,
            active_parameters: d.active_parameters.round() as u64,
            kv_bytes_per_token_per_gpu: d.kv_bytes_per_token_held(),
            pipeline_parallel: d.pipeline.map(|p| p.stages),
        })
    }
}

/// Prefix-cache lookups (docs/prefix-caching.md): every admission, first
/// or after a preemption, queries its `P + g` known tokens once and hits
/// `c` of them. Tokens, as vLLM's `vllm:prefix_cache_queries_total` and
/// `vllm:prefix_cache_hits_total` count them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefixCacheOut {
    pub queried_tokens: u64,
    pub hit_tokens: u64,
    /// `hit_tokens / queried_tokens` (0 when nothing was queried).
    pub hit_rate: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapacityOut {
    pub num_blocks: u32,
    pub block_size: u32,
    pub kv_tokens: u64,
    pub watermark_blocks: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestsOut {
    /// Every request submitted.
    pub total: u64,
    pub completed: u64,
    /// Both kinds below.
    pub rejected: u64,
    /// `prompt + output > context_length`.
    pub rejected_context_length: u64,
    /// The known length could never fit beside the watermark.
    pub rejected_kv_capacity: u64,
    /// Withdrawn by the client (real-time server only).
    pub aborted: u64,
    /// Prompt and output tokens of completed requests.
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputOut {
    /// Last token time minus first arrival.
    pub duration_s: f64,
    pub requests_per_s: f64,
    pub input_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepsOut {
    pub count: u64,
    pub mean_batch_size: f64,
    pub max_batch_size: u32,
    pub mean_tokens: f64,
    pub duration_ms: Stats,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvOut {
    pub peak_blocks: u32,
    /// `peak_blocks / num_blocks`.
    pub peak_usage: f64,
    /// Blocks in use as a fraction of `num_blocks`, averaged over steps
    /// weighted by their duration (idle time excluded).
    pub mean_usage: f64,
}

/// One replica's figures in the result JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaOut {
    pub requests: u64,
    pub output_tokens: u64,
    pub peak_kv_blocks: u32,
    pub preemptions: u64,
    pub steps: u64,
    /// With prefix caching only: hit tokens over queried tokens there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_hit_rate: Option<f64>,
}
