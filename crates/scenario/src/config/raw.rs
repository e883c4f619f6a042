//! Stage one: serde structs that mirror the YAML exactly.
//!
//! Unknown keys are errors (`deny_unknown_fields`). Numbers are read as
//! `f64`/`i64` so that a negative or zero value reaches validation, which
//! says what is allowed, instead of failing as an opaque type error. Every
//! number goes through [`super::num`], so `0x1E`, `30` and `3e1` mean the
//! same wherever they are written; a test checks that no field reads a
//! number any other way.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::num::{self, Num, short_text};
use super::onekey::{self, OneKey};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: Option<String>,
    pub description: Option<String>,
    /// A calibration profile by name (`hardware/calibrations/NAME.yml`) or
    /// file: fills the `efficiency` and `latency` keys left unset.
    pub calibration: Option<String>,
    /// Whose scheduler: `vllm` (default) or `trtllm`.
    pub engine: Option<String>,
    /// A profile name (a file in `hardware/`) or an inline mapping.
    pub hardware: crate::yaml::Value,
    /// A model name (a file in `scenarios/models/`) or a mapping.
    #[serde(deserialize_with = "model_or_name")]
    pub model: RawModel,
    #[serde(default)]
    pub parallelism: RawParallelism,
    #[serde(default)]
    pub scheduler: RawScheduler,
    #[serde(default)]
    pub latency: RawLatency,
    #[serde(default)]
    pub efficiency: RawEfficiency,
    pub workload: RawWorkload,
    /// Replicas behind a router (docs/clusters.md).
    pub cluster: Option<RawCluster>,
    /// Speculative decoding (docs/speculative.md).
    pub speculative: Option<RawSpeculative>,
    /// LoRA adapters on the model (docs/lora.md).
    pub lora: Option<RawLora>,
}

/// `lora:` as written (vLLM's `--enable-lora` flags and the adapters).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLora {
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max_loras: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max_lora_rank: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub load_bandwidth_gbps: Option<f64>,
    pub target_modules: Option<Vec<String>>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub base_weight: Option<f64>,
    /// The adapters one by one ...
    pub adapters: Option<Vec<RawAdapter>>,
    /// ... or `count` of them, `lora-1` to `lora-N`, of rank `rank`,
    /// the k-th's weight `k^-zipf`.
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub count: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub rank: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub zipf: Option<f64>,
}

/// One entry of `lora.adapters`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdapter {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub rank: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub weight: Option<f64>,
}

/// `speculative:` as written (vLLM's `--speculative-config`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpeculative {
    /// `ngram`, `eagle`, `eagle3`, `mtp` or `draft_model`.
    pub method: Option<String>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub num_speculative_tokens: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub acceptance_rate: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real_list")]
    pub acceptance_by_position: Option<Vec<f64>>,
    /// A model file by name (`scenarios/models/NAME.yml` or built in).
    pub draft_model: Option<String>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub draft_parameters_billions: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub draft_kv_bytes_per_token: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_seed")]
    pub seed: Option<u64>,
}

/// `cluster:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub replicas: Option<i64>,
    pub router: Option<String>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub overlap_weight: Option<f64>,
    /// Prefill/decode disaggregation (docs/clusters.md): the two pools
    /// and the KV transfer between them.
    pub prefill: Option<RawPool>,
    pub decode: Option<RawPool>,
    pub kv_transfer: Option<RawKvTransfer>,
    /// Autoscaling of the replicas (docs/clusters.md, "Autoscaling").
    pub autoscale: Option<RawAutoscale>,
    /// Results per window of time (docs/clusters.md, "Results over time").
    pub timeline: Option<RawTimeline>,
    /// Pools of replicas on their own GPUs (docs/clusters.md, "Mixed pools").
    pub pools: Option<Vec<RawFleetPool>>,
}

/// One of `cluster.pools` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFleetPool {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub replicas: Option<i64>,
    /// A profile name or an inline mapping, replacing the scenario's.
    pub hardware: Option<crate::yaml::Value>,
    pub parallelism: Option<RawParallelism>,
    pub scheduler: Option<RawScheduler>,
    /// Per GPU an hour, replacing the hardware's `cost_per_hour`.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub cost_per_hour: Option<f64>,
    pub autoscale: Option<RawAutoscale>,
}

/// `cluster.autoscale` as written (Kubernetes' HPA, with its names in
/// snake case).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAutoscale {
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub min_replicas: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max_replicas: Option<i64>,
    pub signal: Option<String>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub target: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub period_s: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub tolerance: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub window_s: Option<f64>,
    pub scale_up: Option<RawScaleRules>,
    pub scale_down: Option<RawScaleRules>,
    pub cold_start: Option<RawColdStart>,
}

/// `cluster.autoscale.scale_up` / `scale_down` (HPA's `behavior`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScaleRules {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub stabilization_s: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub pods: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub percent: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub period_s: Option<f64>,
}

/// `cluster.autoscale.cold_start`: what a new replica waits for.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawColdStart {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub load_gbps: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub engine_start_s: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub graph_capture_s: Option<f64>,
}

/// `cluster.timeline` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTimeline {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub window_s: Option<f64>,
    pub slo: Option<RawWindowSlo>,
}

/// `cluster.timeline.slo`: bounds each window's latency percentiles.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWindowSlo {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub ttft_p50_ms: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub ttft_p99_ms: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub itl_p50_ms: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub itl_p99_ms: Option<f64>,
}

/// `cluster.prefill` / `cluster.decode` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub replicas: Option<i64>,
    pub router: Option<String>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub overlap_weight: Option<f64>,
    /// A profile name or an inline mapping, replacing the scenario's.
    pub hardware: Option<crate::yaml::Value>,
    pub parallelism: Option<RawParallelism>,
    pub scheduler: Option<RawScheduler>,
}

/// `cluster.kv_transfer` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKvTransfer {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub bandwidth_gbps: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub latency_ms: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHardware {
    pub name: Option<String>,
    pub description: Option<String>,
    #[serde(deserialize_with = "num::real")]
    pub hbm_gib: f64,
    #[serde(deserialize_with = "num::real")]
    pub memory_bandwidth_gbps: f64,
    #[serde(deserialize_with = "num::real")]
    pub peak_tflops: f64,
    /// Dense FP8 TFLOPS, used for 1-byte weights of a model with an architecture.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub peak_tflops_fp8: Option<f64>,
    /// Dense FP4 TFLOPS (Blackwell, MI355X), used for `nvfp4`/`mxfp4` weights.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub peak_tflops_fp4: Option<f64>,
    /// The all-reduce link between GPUs of one engine (tensor parallelism).
    pub interconnect: Option<RawInterconnect>,
    /// GPUs one node's NVLink joins (8 unless given).
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub gpus_per_node: Option<i64>,
    /// Point-to-point sends between two GPUs of one node (pipeline hand-offs).
    pub send_recv: Option<RawLink>,
    /// Point-to-point sends between GPUs of two nodes: one GPU's NIC.
    pub network: Option<RawLink>,
    /// Price of one GPU-hour, for cost per million tokens.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub cost_per_hour: Option<f64>,
    /// Measured kernel times (all-reduce, GEMM) the per-operator cost form
    /// reads; checked row by row in `config/kernels.rs`.
    pub kernels: Option<crate::yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLink {
    #[serde(deserialize_with = "num::real")]
    pub bandwidth_gbps: f64,
    #[serde(deserialize_with = "num::real")]
    pub latency_us: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInterconnect {
    pub bandwidth_gbps: RawByGpus,
    pub latency_us: RawByGpus,
}

/// A number, or a mapping from GPU count to a number (`{2: 248, 4: 289}`).
#[derive(Debug, Clone, PartialEq)]
pub enum RawByGpus {
    Fixed(f64),
    ByCount(Vec<(i64, f64)>),
}

impl<'de> Deserialize<'de> for RawByGpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use crate::yaml::Value;
        use serde::de::Error;
        let number = |v: &Value| v.as_f64().filter(|_| v.is_number());
        match crate::yaml::Value::deserialize(d)? {
            v @ Value::Number(_) => Ok(RawByGpus::Fixed(number(&v).unwrap_or(f64::NAN))),
            Value::Mapping(m) => {
                let mut out = Vec::new();
                for (k, v) in m {
                    let (Some(gpus), Some(x)) = (k.as_i64(), number(&v)) else {
                        return Err(D::Error::custom(format!(
                            "expected GPU count: number pairs like {{2: 248, 4: 289}}; got {}: {}",
                            super::describe_value(&k),
                            super::describe_value(&v)
                        )));
                    };
                    out.push((gpus, x));
                }
                Ok(RawByGpus::ByCount(out))
            }
            other => Err(D::Error::custom(format!(
                "expected a number or a mapping by GPU count ({{2: 248, 4: 289}}); got {}",
                super::describe_value(&other)
            ))),
        }
    }
}

/// `model:` as written: every key optional, checked in validation.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    /// A model file by name: `scenarios/models/NAME.yml` (or built in).
    /// `model: NAME` is short for `model: {preset: NAME}`.
    pub preset: Option<String>,
    pub name: Option<String>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub context_length: Option<i64>,
    pub architecture: Option<RawArchitecture>,
    /// A Hugging Face `config.json`, relative to the scenario.
    pub hf_config: Option<String>,
    #[serde(default)]
    pub weights: RawWeights,
    #[serde(default)]
    pub kv_cache: RawKvCache,
}

/// docs/deployments.md's fields (the HF `config.json` names in comments).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArchitecture {
    /// `num_hidden_layers`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub layers: Option<i64>,
    /// `hidden_size`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub hidden_size: Option<i64>,
    /// `num_attention_heads`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub attention_heads: Option<i64>,
    /// `num_key_value_heads`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub kv_heads: Option<i64>,
    /// `head_dim`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub head_dim: Option<i64>,
    /// `intermediate_size`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub intermediate_size: Option<i64>,
    /// `vocab_size`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub vocab_size: Option<i64>,
    /// `tie_word_embeddings`
    pub tie_word_embeddings: Option<bool>,
    /// `num_local_experts` or `num_experts`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub experts: Option<i64>,
    /// `num_experts_per_tok`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub experts_per_token: Option<i64>,
    /// `moe_intermediate_size`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub expert_intermediate_size: Option<i64>,
    /// `shared_expert_intermediate_size` (`n_shared_experts *
    /// moe_intermediate_size` in a DeepSeek config)
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub shared_expert_intermediate_size: Option<i64>,
    /// `first_k_dense_replace`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub first_dense_layers: Option<i64>,
    /// `kv_lora_rank`: multi-head latent attention
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub kv_lora_rank: Option<i64>,
    /// `q_lora_rank`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub q_lora_rank: Option<i64>,
    /// `qk_nope_head_dim`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub qk_nope_head_dim: Option<i64>,
    /// `qk_rope_head_dim`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub qk_rope_head_dim: Option<i64>,
    /// `v_head_dim`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub v_head_dim: Option<i64>,
    /// `sliding_window`: the window of the sliding-window layers
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub sliding_window: Option<i64>,
    /// How many `layer_types` are `sliding_attention`
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub sliding_layers: Option<i64>,
    /// `attention_bias`: biases on Q, K, V and O
    pub attention_bias: Option<bool>,
    /// Biases on the MLPs, experts and router (gpt-oss)
    pub mlp_bias: Option<bool>,
    /// A sink logit per head a layer (gpt-oss)
    pub attention_sinks: Option<bool>,
    /// `num_nextn_predict_layers`: multi-token-prediction modules
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub mtp_layers: Option<i64>,
}

/// A model file in `scenarios/models/`: the facts of one model.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModelFile {
    pub name: Option<String>,
    pub description: Option<String>,
    /// Where the figures come from.
    pub source: Option<String>,
    /// `max_position_embeddings`.
    #[serde(deserialize_with = "num::whole")]
    pub context_length: i64,
    pub architecture: RawArchitecture,
    /// The checkpoint's format, a default the scenario's
    /// `model.weights.dtype`/`expert_dtype` replace.
    #[serde(default)]
    pub weights: RawModelFileWeights,
}

/// `weights:` of a model file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModelFileWeights {
    pub dtype: Option<String>,
    pub expert_dtype: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeights {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub parameters_billions: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub bytes_per_parameter: Option<f64>,
    /// `bf16`, `fp8`, `int4`, `nvfp4`, `mxfp4`, ...: sets the bytes and the peak.
    pub dtype: Option<String>,
    /// The routed experts' own dtype (gpt-oss: `mxfp4` experts, 16-bit rest).
    pub expert_dtype: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKvCache {
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub bytes_per_token: Option<i64>,
    /// `auto` (16-bit), `fp8`, ... as vLLM's `--kv-cache-dtype`.
    pub dtype: Option<String>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub block_size: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub gpu_memory_utilization: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub watermark: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub num_blocks: Option<i64>,
    pub prefix_caching: Option<bool>,
    /// KV offload tiers below the prefix cache (docs/offload.md).
    pub offload: Option<RawOffload>,
}

/// `model.kv_cache.offload`: host memory and local disk.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffload {
    pub cpu: Option<RawTier>,
    pub disk: Option<RawTier>,
}

/// One offload tier: its size and the bandwidth a GPU loads from it at.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTier {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub gib: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub bandwidth_gbps: Option<f64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScheduler {
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max_batch_tokens: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max_num_sequences: Option<i64>,
    /// The largest step run as a CUDA graph (per-operator form only).
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub cuda_graph_max_tokens: Option<i64>,
    /// `fcfs` (default) or `priority` (vLLM's `--scheduling-policy`).
    pub policy: Option<String>,
    /// `engine: sglang` only: `new_token_ratio`'s start.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub new_token_ratio: Option<f64>,
    /// `engine: sglang` only: `--enable-mixed-chunk`.
    pub mixed_chunk: Option<bool>,
    /// `engine: sglang` only: `--max-prefill-tokens`.
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max_prefill_tokens: Option<i64>,
    /// `engine: trtllm` only: TensorRT-LLM's `capacity_scheduler_policy`.
    pub capacity_scheduler_policy: Option<String>,
    /// `engine: trtllm` only: chunked prefill with this
    /// `context_chunking_policy`.
    pub context_chunking_policy: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLatency {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub step_overhead_ms: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub request_overhead_ms: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub per_layer_overhead_us: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub per_sequence_overhead_us: Option<f64>,
    /// Per-operator form: the fixed cost of the engine's own all-reduce.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub allreduce_us: Option<f64>,
    /// Per-operator form: host time per layer of a step without a CUDA graph.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub eager_layer_us: Option<f64>,
    /// Per-operator form: the least time of one expert's GEMMs in a layer.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub per_expert_us: Option<f64>,
    /// Closed loops: each request leaves up to this much later, uniformly.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub resend_jitter_ms: Option<f64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParallelism {
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub tensor: Option<i64>,
    /// Pipeline stages, each holding `layers / pipeline` of the layers.
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub pipeline: Option<i64>,
    /// Attention data-parallel ranks inside one engine (mixture of experts).
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub data: Option<i64>,
    /// Expert parallelism: GPUs the routed experts spread over (`tensor x data`).
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub expert: Option<i64>,
    /// GPUs each expert-parallel group splits its experts over.
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub expert_tensor: Option<i64>,
    /// The busiest GPU's expert tokens over the mean.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub expert_imbalance: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEfficiency {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub compute: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub memory: Option<f64>,
    /// Per-operator form: tokens at which a GEMM reaches half of `compute`.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub gemm_half_tokens: Option<f64>,
    /// Per-operator form: attention's FLOPs, of the 16-bit peak.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub attention_compute: Option<f64>,
    /// Per-operator form: attention's KV reads, of the bandwidth.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub attention_memory: Option<f64>,
    /// Per-operator form: the engine's all-reduce bandwidth over the link's.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub allreduce: Option<f64>,
    /// Per-operator form: the routed experts' GEMMs' rate over the dense GEMMs'.
    #[serde(default, deserialize_with = "num::opt_real")]
    pub expert_gemm: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    #[serde(default, deserialize_with = "num::opt_seed")]
    pub seed: Option<u64>,
    #[serde(deserialize_with = "onekey::read")]
    pub arrivals: RawArrivals,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub requests: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub duration_s: Option<f64>,
    pub prompt_tokens: Option<RawLength>,
    pub output_tokens: Option<RawLength>,
    pub shared_prefix: Option<RawSharedPrefix>,
    pub sessions: Option<RawSessions>,
    /// Tokens per `hash_ids` entry of a JSONL (Mooncake-style) trace.
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub hash_block_size: Option<i64>,
    /// Request classes (docs/priorities.md).
    pub classes: Option<Vec<RawClass>>,
}

/// One entry of `workload.classes`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClass {
    pub name: Option<String>,
    /// Its share of the arrivals, relative to the others' (default 1).
    #[serde(default, deserialize_with = "num::opt_real")]
    pub weight: Option<f64>,
    /// vLLM's request priority: lower is served first (default 0).
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub priority: Option<i64>,
}

/// `workload.shared_prefix`: every request starts with one of `groups`
/// system prompts of `tokens` tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSharedPrefix {
    #[serde(deserialize_with = "num::whole")]
    pub groups: i64,
    #[serde(deserialize_with = "num::whole")]
    pub tokens: i64,
}

/// `workload.sessions`: multi-turn conversations.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    pub turns: RawLength,
    #[serde(default)]
    pub think_s: Option<RawSeconds>,
}

/// A duration in seconds: a plain number or a distribution.
#[derive(Debug)]
pub enum RawSeconds {
    Fixed(f64),
    Dist(RawSecondsDist),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawSecondsDist {
    Uniform(#[serde(deserialize_with = "num::real_pair")] [f64; 2]),
    Exponential(RawSecondsMean),
}

impl OneKey for RawSecondsDist {
    const FORMS: &'static str = "a number of seconds, uniform: [lo, hi], exponential: {mean}";
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecondsMean {
    #[serde(deserialize_with = "num::real")]
    pub mean: f64,
}

impl NumberOrDist for RawSeconds {
    type Dist = RawSecondsDist;
    fn fixed(n: Num) -> Result<Self, String> {
        Ok(RawSeconds::Fixed(n.as_f64()))
    }
    fn dist(d: RawSecondsDist) -> Self {
        RawSeconds::Dist(d)
    }
}

impl<'de> Deserialize<'de> for RawSeconds {
    /// A number (the one grammar) or a one-key distribution mapping.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrDistVisitor::<RawSeconds>(PhantomData))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawArrivals {
    Poisson {
        #[serde(deserialize_with = "num::real")]
        rate: f64,
    },
    Gamma {
        #[serde(deserialize_with = "num::real")]
        rate: f64,
        #[serde(deserialize_with = "num::real")]
        burstiness: f64,
    },
    Constant {
        #[serde(deserialize_with = "num::real")]
        rate: f64,
    },
    Closed {
        #[serde(deserialize_with = "num::whole")]
        concurrency: i64,
        #[serde(default, deserialize_with = "num::opt_real")]
        think_time_s: Option<f64>,
        #[serde(default, deserialize_with = "num::opt_real")]
        ramp_s: Option<f64>,
    },
    Trace(String),
    Curve(RawCurve),
}

impl OneKey for RawArrivals {
    const FORMS: &'static str = "poisson: {rate}, gamma: {rate, burstiness}, constant: {rate}, \
        closed: {concurrency, think_time_s, ramp_s}, trace: FILE.csv, \
        curve: {points | steps | daily, bursts, burstiness}";
}

/// `workload.arrivals.curve` (config/curve.rs).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCurve {
    pub points: Option<Vec<RawPoint>>,
    pub steps: Option<Vec<RawPoint>>,
    pub daily: Option<RawDaily>,
    pub bursts: Option<Vec<RawBurst>>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub burstiness: Option<f64>,
}

/// `[time_s, rate]`.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct RawPoint(#[serde(deserialize_with = "num::real_list")] pub Vec<f64>);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDaily {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub peak: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub trough: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub peak_hour: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub start_hour: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBurst {
    #[serde(default, deserialize_with = "num::opt_real")]
    pub start_s: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub duration_s: Option<f64>,
    #[serde(default, deserialize_with = "num::opt_real")]
    pub factor: Option<f64>,
}

/// A length: a plain integer, or one of the distributions.
#[derive(Debug)]
pub enum RawLength {
    Fixed(i64),
    Dist(RawDist),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawDist {
    Uniform(#[serde(deserialize_with = "num::whole_pair")] [i64; 2]),
    Normal(RawMoments),
    Lognormal(RawMoments),
    Exponential(RawMean),
    Choice(RawChoice),
}

impl OneKey for RawDist {
    const FORMS: &'static str = "a token count, uniform: [lo, hi], normal: {mean, std}, \
        lognormal: {mean, std}, exponential: {mean}, choice: {values, weights}";
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMoments {
    #[serde(deserialize_with = "num::real")]
    pub mean: f64,
    #[serde(deserialize_with = "num::real")]
    pub std: f64,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub min: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMean {
    #[serde(deserialize_with = "num::real")]
    pub mean: f64,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub min: Option<i64>,
    #[serde(default, deserialize_with = "num::opt_whole")]
    pub max: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChoice {
    #[serde(deserialize_with = "num::whole_list")]
    pub values: Vec<i64>,
    #[serde(default, deserialize_with = "num::opt_real_list")]
    pub weights: Option<Vec<f64>>,
}

impl NumberOrDist for RawLength {
    type Dist = RawDist;
    fn fixed(n: Num) -> Result<Self, String> {
        let n = n.whole().map_err(|e| format!("{e}: a length is a whole number of tokens"))?;
        Ok(RawLength::Fixed(n.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64))
    }
    fn dist(d: RawDist) -> Self {
        RawLength::Dist(d)
    }
}

impl<'de> Deserialize<'de> for RawLength {
    /// A number (the one grammar, whole) or a one-key distribution mapping.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrDistVisitor::<RawLength>(PhantomData))
    }
}

/// A value that is either a plain number or a one-key distribution
/// mapping (`RawLength`, `RawSeconds`): one visitor reads both, so the
/// number grammar and the refusals are the same wherever such a key is.
trait NumberOrDist: Sized {
    /// The one-key mapping of distributions.
    type Dist: OneKey + serde::de::DeserializeOwned;
    /// A plain number, or why it is not allowed here.
    fn fixed(n: Num) -> Result<Self, String>;
    fn dist(d: Self::Dist) -> Self;
}

struct NumberOrDistVisitor<T>(PhantomData<T>);

impl<T: NumberOrDist> NumberOrDistVisitor<T> {
    fn fixed<E: de::Error>(n: Num) -> Result<T, E> {
        T::fixed(n).map_err(E::custom)
    }
    fn refuse<E: de::Error>(what: impl fmt::Display) -> Result<T, E> {
        Err(E::custom(onekey::got(what, T::Dist::FORMS)))
    }
}

impl<'de, T: NumberOrDist> Visitor<'de> for NumberOrDistVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "one of {}", T::Dist::FORMS)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Self::fixed(Num::Int(i128::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Self::fixed(Num::Int(i128::from(v)))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
        Self::fixed(Num::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<T, E> {
        Self::fixed(i128::try_from(v).map_or(Num::Float(v as f64), Num::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Self::fixed(Num::Float(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        onekey::from_map(map).map(T::dist)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        let why = num::not_a_number(v);
        if why.starts_with("expected a number") {
            Self::refuse(format_args!("the string \"{}\"", short_text(v)))
        } else {
            Err(E::custom(why))
        }
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        Self::refuse(format_args!("the boolean {v}"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Self::refuse("nothing (null)")
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(A::Error::custom(onekey::got("a list", T::Dist::FORMS)))
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(A::Error::custom(format!(
            "YAML tags (!kind) are not used here: write the kind as a key, one of {}",
            T::Dist::FORMS
        )))
    }
}

/// `model: NAME` or `model: {...}`. A mapping is read straight from the
/// document (so errors inside it keep their line); a name becomes
/// `{preset: NAME}`.
pub fn model_or_name<'de, D: Deserializer<'de>>(d: D) -> Result<RawModel, D::Error> {
    struct ModelVisitor;
    impl<'de> serde::de::Visitor<'de> for ModelVisitor {
        type Value = RawModel;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a model name (a file in scenarios/models/) or a mapping")
        }
        fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<RawModel, E> {
            Ok(RawModel { preset: Some(name.to_string()), ..RawModel::default() })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawModel, A::Error> {
            RawModel::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(ModelVisitor)
}

/// [`model_or_name`] for an optional field (`#[serde(default)]` covers absence).
pub fn some_model_or_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawModel>, D::Error> {
    model_or_name(d).map(Some)
}
