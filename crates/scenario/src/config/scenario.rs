//! Stage two's product: the validated scenario the engine and drivers use.
//!
//! Every default is filled in. It serialises back to the YAML schema (with
//! the hardware inline), which is what `llmsim explain` prints: the output
//! is itself a valid scenario.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Serialize, Serializer};

pub use super::architecture::ArchitectureOrigin;
use crate::trace::{TraceContent, TraceRow};
use llmsim_core::engine::arch::Architecture;
use llmsim_core::engine::cost::{DeploymentInput, Link};
use llmsim_core::engine::{CostInput, CostModel, EngineConfig, KvBudget};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub hardware: Hardware,
    pub model: Model,
    /// Shown when the model has an architecture (tensor parallelism needs one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<Parallelism>,
    /// Whose scheduler the engine follows (shown when not vLLM's).
    #[serde(skip_serializing_if = "EngineKind::is_vllm")]
    pub engine: EngineKind,
    pub scheduler: Scheduler,
    pub latency: Latency,
    pub efficiency: Efficiency,
    pub workload: Workload,
    /// Replicas behind a router (docs/clusters.md); `None` is one engine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Cluster>,
    /// Speculative decoding (docs/speculative.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
    /// LoRA adapters on the model (docs/lora.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lora: Option<Lora>,
    /// The file it was read from.
    #[serde(skip)]
    pub source: PathBuf,
    #[serde(skip)]
    pub capacity: KvBudget,
    /// Derived figures of the deployment (docs/deployments.md).
    #[serde(skip)]
    pub deployment: Deployment,
    /// The calibration profile the scenario named, and which of its keys
    /// were used (the effective configuration shows the values themselves).
    #[serde(skip)]
    pub calibration: Option<super::calibration::CalibrationUse>,
}

/// SGLang's `new_token_ratio` start by default: `SGLANG_INIT_NEW_TOKEN_RATIO`
/// (0.7) x `schedule_conservativeness` (1.0).
pub const SGLANG_RADIX_RATIO: f64 = 0.7;

/// `engine:`: whose scheduling rules the core follows (docs/engine.md,
/// "The engine's scheduler").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    #[default]
    Vllm,
    Trtllm,
    Sglang,
}

impl EngineKind {
    /// The names `engine:` takes.
    pub const KNOWN: &'static str = "vllm, trtllm, sglang";

    pub fn is_vllm(&self) -> bool {
        *self == EngineKind::Vllm
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Trtllm => "trtllm",
            EngineKind::Sglang => "sglang",
        }
    }

    /// The core's scheduling policy.
    pub fn policy(self) -> llmsim_core::engine::Policy {
        match self {
            EngineKind::Vllm => llmsim_core::engine::Policy::Vllm,
            EngineKind::Trtllm => llmsim_core::engine::Policy::Trtllm,
            EngineKind::Sglang => llmsim_core::engine::Policy::Sglang,
        }
    }

    /// `engine:` as written, or why it is not an engine llmsim models.
    pub fn parse(name: &str) -> Result<EngineKind, String> {
        match name.trim() {
            "vllm" => Ok(EngineKind::Vllm),
            "trtllm" => Ok(EngineKind::Trtllm),
            "sglang" => Ok(EngineKind::Sglang),
            other => Err(format!(
                "unknown engine `{}`; the engines are {}",
                super::num::short_text(other),
                EngineKind::KNOWN
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Hardware {
    pub name: String,
    pub hbm_gib: f64,
    pub memory_bandwidth_gbps: f64,
    pub peak_tflops: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_tflops_fp8: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_tflops_fp4: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interconnect: Option<Interconnect>,
    /// GPUs one node's NVLink joins (`None`: 8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<u32>,
    /// Point-to-point sends inside a node and between nodes (pipeline hand-offs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_recv: Option<Link>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Link>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<f64>,
    /// Measured kernel times; kept only when the per-operator form reads
    /// them (validation drops them otherwise, so `explain` shows what is used).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "llmsim_core::engine::cost::operators::serialize_tables"
    )]
    pub kernels: Option<std::sync::Arc<llmsim_core::engine::cost::KernelTables>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Model {
    pub name: String,
    pub context_length: u32,
    /// Expanded from a preset or an HF config, so the effective
    /// configuration stands alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Architecture>,
    pub weights: Weights,
    pub kv_cache: KvCache,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Weights {
    /// Required without an architecture; with one, an explicit override.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters_billions: Option<f64>,
    pub bytes_per_parameter: f64,
    /// The weights' format, when given (it sets the peak they run at).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtype: Option<WeightDtype>,
    /// The routed experts' format, when it differs from the rest's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_dtype: Option<WeightDtype>,
}

/// `model.weights.dtype`: how the weights are stored and which of the
/// GPU's peaks their GEMMs run at (docs/deployments.md, "Weight formats").
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WeightDtype {
    Bf16,
    Fp16,
    /// W8A8 FP8 (DeepSeek-V3's block-scaled FP8, `fp8` checkpoints).
    Fp8,
    /// W8A8 INT8 (SmoothQuant, `w8a8` checkpoints): the 8-bit peak.
    Int8,
    /// W4A16 INT4 (AWQ, GPTQ): 4 bits and a 16-bit scale per group of
    /// 128; dequantized to 16 bits for the GEMM.
    Int4,
    /// NVFP4: 4 bits and an FP8 scale per 16.
    Nvfp4,
    /// MXFP4 (OCP microscaling): 4 bits and an 8-bit scale per 32.
    Mxfp4,
}

/// Which of a GPU's peaks a weight format's GEMMs run at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PeakClass {
    Sixteen,
    Eight,
    Four,
}

impl PeakClass {
    /// The hardware key of this class's peak.
    pub fn key(self) -> &'static str {
        match self {
            PeakClass::Sixteen => "peak_tflops",
            PeakClass::Eight => "peak_tflops_fp8",
            PeakClass::Four => "peak_tflops_fp4",
        }
    }
}

impl WeightDtype {
    pub const ALL: [WeightDtype; 7] = [
        WeightDtype::Bf16,
        WeightDtype::Fp16,
        WeightDtype::Fp8,
        WeightDtype::Int8,
        WeightDtype::Int4,
        WeightDtype::Nvfp4,
        WeightDtype::Mxfp4,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Fp16 => "fp16",
            WeightDtype::Fp8 => "fp8",
            WeightDtype::Int8 => "int8",
            WeightDtype::Int4 => "int4",
            WeightDtype::Nvfp4 => "nvfp4",
            WeightDtype::Mxfp4 => "mxfp4",
        }
    }

    /// Bytes a weight, block scales included.
    pub fn bytes(self) -> f64 {
        match self {
            WeightDtype::Bf16 | WeightDtype::Fp16 => 2.0,
            WeightDtype::Fp8 | WeightDtype::Int8 => 1.0,
            // (4 + 16/128) / 8
            WeightDtype::Int4 => 0.515625,
            // (4 + 8/16) / 8
            WeightDtype::Nvfp4 => 0.5625,
            // (4 + 8/32) / 8
            WeightDtype::Mxfp4 => 0.53125,
        }
    }

    /// The peak the format's GEMMs want: INT4 is dequantized to 16 bits
    /// (W4A16); the FP4 formats run W4A4 where the GPU has an FP4 peak.
    pub fn peak_class(self) -> PeakClass {
        match self {
            WeightDtype::Bf16 | WeightDtype::Fp16 | WeightDtype::Int4 => PeakClass::Sixteen,
            WeightDtype::Fp8 | WeightDtype::Int8 => PeakClass::Eight,
            WeightDtype::Nvfp4 | WeightDtype::Mxfp4 => PeakClass::Four,
        }
    }

    /// The per-operator form's measured-GEMM dtype (`config/kernels.rs`).
    pub fn kernel_dtype(self) -> &'static str {
        match self.peak_class() {
            PeakClass::Sixteen if self == WeightDtype::Int4 => "int4",
            PeakClass::Sixteen => "bf16",
            PeakClass::Eight => "fp8",
            PeakClass::Four => "fp4",
        }
    }
}

impl Serialize for WeightDtype {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvCache {
    /// Required without an architecture; with one, an explicit override.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_token: Option<u64>,
    /// With an architecture only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtype: Option<KvDtype>,
    pub block_size: u32,
    pub gpu_memory_utilization: f64,
    pub watermark: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_blocks: Option<u64>,
    /// Always shown (false by default, unlike vLLM V1), so `llmsim explain`
    /// says whether it ran.
    pub prefix_caching: bool,
    /// KV offload tiers (docs/offload.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<Offload>,
}

/// `model.kv_cache.offload`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Offload {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<OffloadTier>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<OffloadTier>,
}

/// One offload tier as given.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OffloadTier {
    pub gib: f64,
    pub bandwidth_gbps: f64,
}

impl Offload {
    /// The tiers given, fastest first, with their names.
    pub fn tiers(&self) -> Vec<(&'static str, &OffloadTier)> {
        [("cpu", &self.cpu), ("disk", &self.disk)].into_iter().filter_map(|(n, t)| t.as_ref().map(|t| (n, t))).collect()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scheduler {
    pub max_batch_tokens: u32,
    pub max_num_sequences: u32,
    /// Per-operator form: the largest step run as a CUDA graph (vLLM's
    /// default when unset: `min(2 * max_num_sequences, 512, max_batch_tokens)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_graph_max_tokens: Option<u32>,
    /// vLLM's `--scheduling-policy`, shown when given (unset: FCFS, and
    /// the effective configuration of a scenario without it stays as it
    /// was); read it through [`Scheduler::policy`].
    #[serde(rename = "policy", skip_serializing_if = "Option::is_none")]
    pub policy_given: Option<PolicyName>,
    /// `engine: sglang`: `new_token_ratio`'s start (SGLang's 0.7 x
    /// `schedule_conservativeness`); unset, [`SGLANG_RADIX_RATIO`] with
    /// prefix caching on (SGLang's radix cache: its admission uses the
    /// ratio whatever the clients send), else running requests reserve
    /// their remaining output whole (`--disable-radix-cache` with clients
    /// that send `ignore_eos`). Read it through
    /// [`Scenario::sglang_ratio`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_token_ratio: Option<f64>,
    /// `engine: sglang`: `--enable-mixed-chunk`, shown when given (unset:
    /// off, SGLang's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mixed_chunk: Option<bool>,
    /// `engine: sglang`: `--max-prefill-tokens`, shown when given (unset:
    /// SGLang's 16,384).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_prefill_tokens: Option<u32>,
    /// `engine: trtllm`: TensorRT-LLM's capacity scheduler policy, shown
    /// when given (unset: `GUARANTEED_NO_EVICT`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_scheduler_policy: Option<CapacityName>,
    /// `engine: trtllm`: chunked prefill on, with this chunking policy
    /// (unset: off, TensorRT-LLM's PyTorch backend's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_chunking_policy: Option<ChunkingName>,
}

/// `scheduler.capacity_scheduler_policy` (TensorRT-LLM's
/// `CapacitySchedulerPolicy`, spelled as its `scheduler_config` takes it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CapacityName {
    GuaranteedNoEvict,
    MaxUtilization,
    StaticBatch,
}

impl CapacityName {
    pub const KNOWN: &'static str = "GUARANTEED_NO_EVICT, MAX_UTILIZATION, STATIC_BATCH";

    /// TensorRT-LLM's spelling, in any case.
    pub fn parse(s: &str) -> Option<CapacityName> {
        match s.trim().to_ascii_uppercase().as_str() {
            "GUARANTEED_NO_EVICT" => Some(CapacityName::GuaranteedNoEvict),
            "MAX_UTILIZATION" => Some(CapacityName::MaxUtilization),
            "STATIC_BATCH" => Some(CapacityName::StaticBatch),
            _ => None,
        }
    }

    pub fn core(self) -> llmsim_core::engine::trtllm::CapacityPolicy {
        use llmsim_core::engine::trtllm::CapacityPolicy as C;
        match self {
            CapacityName::GuaranteedNoEvict => C::GuaranteedNoEvict,
            CapacityName::MaxUtilization => C::MaxUtilization,
            CapacityName::StaticBatch => C::StaticBatch,
        }
    }
}

/// `scheduler.context_chunking_policy` (TensorRT-LLM's
/// `ContextChunkingPolicy`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ChunkingName {
    FirstComeFirstServed,
    EqualProgress,
}

impl ChunkingName {
    pub const KNOWN: &'static str = "FIRST_COME_FIRST_SERVED, EQUAL_PROGRESS";

    /// TensorRT-LLM's spelling, in any case.
    pub fn parse(s: &str) -> Option<ChunkingName> {
        match s.trim().to_ascii_uppercase().as_str() {
            "FIRST_COME_FIRST_SERVED" => Some(ChunkingName::FirstComeFirstServed),
            "EQUAL_PROGRESS" => Some(ChunkingName::EqualProgress),
            _ => None,
        }
    }

    pub fn core(self) -> llmsim_core::engine::trtllm::ChunkingPolicy {
        use llmsim_core::engine::trtllm::ChunkingPolicy as C;
        match self {
            ChunkingName::FirstComeFirstServed => C::FirstComeFirstServed,
            ChunkingName::EqualProgress => C::EqualProgress,
        }
    }
}

/// `scheduler.policy` (docs/priorities.md).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    #[default]
    Fcfs,
    Priority,
}

impl PolicyName {
    pub const KNOWN: [&'static str; 2] = ["fcfs", "priority"];

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyName::Fcfs => "fcfs",
            PolicyName::Priority => "priority",
        }
    }

    /// The core's policy.
    pub fn core(self) -> llmsim_core::engine::SchedulingPolicy {
        match self {
            PolicyName::Fcfs => llmsim_core::engine::SchedulingPolicy::Fcfs,
            PolicyName::Priority => llmsim_core::engine::SchedulingPolicy::Priority,
        }
    }
}

impl Scheduler {
    /// `scheduler.policy`, FCFS unless given.
    pub fn policy(&self) -> PolicyName {
        self.policy_given.unwrap_or_default()
    }

    /// The largest step run as a CUDA graph: as given, else vLLM's default
    /// (`max_cudagraph_capture_size = min(2 * max_num_seqs, 512)`, capped by
    /// `max_num_batched_tokens`).
    pub fn graph_max_tokens(&self) -> u32 {
        self.cuda_graph_max_tokens
            .unwrap_or_else(|| self.max_num_sequences.saturating_mul(2).min(512).min(self.max_batch_tokens))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Latency {
    pub step_overhead_ms: f64,
    /// A request reaches the engine this long after it arrives.
    #[serde(skip_serializing_if = "is_zero")]
    pub request_overhead_ms: f64,
    /// Per step, times the layers (needs an architecture).
    #[serde(skip_serializing_if = "is_zero")]
    pub per_layer_overhead_us: f64,
    /// Per step, times the requests scheduled in it.
    #[serde(skip_serializing_if = "is_zero")]
    pub per_sequence_overhead_us: f64,
    /// Per-operator form: the fixed cost of one of the engine's own all-reduces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allreduce_us: Option<f64>,
    /// Per-operator form: host time per layer of a step without a CUDA graph.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eager_layer_us: Option<f64>,
    /// Per-operator form: the fixed cost of each expert a layer's tokens touch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_expert_us: Option<f64>,
    /// Closed loops: a user's every request leaves up to this much later
    /// than its think time says, uniformly (the turnaround of the client
    /// and the server's front end varies, which keeps users from staying
    /// in lockstep).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resend_jitter_ms: Option<f64>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Efficiency {
    pub compute: f64,
    pub memory: f64,
    /// Per-operator form: tokens at which a GEMM reaches half of `compute`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gemm_half_tokens: Option<f64>,
    /// Per-operator form: attention's FLOPs, of the 16-bit peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_compute: Option<f64>,
    /// Per-operator form: attention's KV reads, of the bandwidth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_memory: Option<f64>,
    /// Per-operator form: the engine's all-reduce bandwidth over the link's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allreduce: Option<f64>,
    /// Per-operator form: the routed experts' GEMMs' rate over the dense
    /// GEMMs' (1: the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_gemm: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Workload {
    pub seed: u64,
    pub arrivals: Arrivals,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// `None` only for trace workloads, whose rows carry the lengths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<Length>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<Length>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_prefix: Option<SharedPrefix>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Sessions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash_block_size: Option<u32>,
    /// Request classes, in the order given (docs/priorities.md); empty
    /// without `workload.classes`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<Class>,
    /// Not a key: `llmsim capacity --class`'s knob. When set, a rate given
    /// to [`Workload::with_rate`] is this class's alone, the other classes
    /// keeping the rates the scenario gives them.
    #[serde(skip)]
    pub rate_class: Option<usize>,
}

impl Workload {
    /// The open-loop arrival rate, if the arrivals have one.
    pub fn rate(&self) -> Option<f64> {
        match self.arrivals {
            Arrivals::Poisson { rate } | Arrivals::Gamma { rate, .. } | Arrivals::Constant { rate } => Some(rate),
            _ => None,
        }
    }

    /// The same workload at open-loop rate `rate` (arrivals without a rate
    /// unchanged). With [`Workload::rate_class`] `k`, `rate` is class `k`'s:
    /// the arrivals run at the others' rates (their shares of the
    /// scenario's rate) plus `rate`, and the weights become those rates.
    pub fn with_rate(&self, rate: f64) -> Workload {
        let mut w = self.clone();
        let total = match (self.rate_class, self.rate()) {
            (Some(k), Some(base)) if k < self.classes.len() => {
                let sum: f64 = self.classes.iter().map(|c| c.weight).sum();
                for (i, c) in w.classes.iter_mut().enumerate() {
                    c.weight = if i == k { rate } else { base * c.weight / sum };
                }
                w.classes.iter().map(|c| c.weight).sum()
            }
            _ => rate,
        };
        w.arrivals = match w.arrivals {
            Arrivals::Poisson { .. } => Arrivals::Poisson { rate: total },
            Arrivals::Gamma { burstiness, .. } => Arrivals::Gamma { rate: total, burstiness },
            Arrivals::Constant { .. } => Arrivals::Constant { rate: total },
            other => other,
        };
        w
    }
}

/// One of `workload.classes`: a name, a share of the arrivals and the
/// priority its requests carry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Class {
    pub name: String,
    pub weight: f64,
    pub priority: i32,
}

/// The most classes a workload may have.
pub const MAX_CLASSES: usize = 64;

/// `workload.shared_prefix`: each request starts with one of `groups`
/// system prompts of `tokens` tokens (content `sys:<group>`), drawn
/// uniformly from its own seeded stream; `prompt_tokens` is the unique rest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SharedPrefix {
    pub groups: u32,
    pub tokens: u32,
}

/// `workload.sessions`: arrivals start conversations of `turns` turns;
/// turn `j+1` arrives `think_s` after turn `j`'s last token, its prompt
/// being turn `j`'s prompt and answer plus `prompt_tokens` new ones.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sessions {
    pub turns: Length,
    pub think_s: Seconds,
}

/// A duration distribution, in seconds (never negative).
#[derive(Clone, Debug, PartialEq)]
pub enum Seconds {
    Fixed(f64),
    Uniform { lo: f64, hi: f64 },
    Exponential { mean: f64 },
}

impl Seconds {
    pub fn mean(&self) -> f64 {
        match self {
            Seconds::Fixed(x) => *x,
            Seconds::Uniform { lo, hi } => (lo + hi) / 2.0,
            Seconds::Exponential { mean } => *mean,
        }
    }
}

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Mean {
            mean: f64,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "snake_case")]
        enum Tagged {
            Uniform([f64; 2]),
            Exponential(Mean),
        }
        match self {
            Seconds::Fixed(x) => s.serialize_f64(*x),
            Seconds::Uniform { lo, hi } => Tagged::Uniform([*lo, *hi]).serialize(s),
            Seconds::Exponential { mean } => Tagged::Exponential(Mean { mean: *mean }).serialize(s),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    Poisson {
        rate: f64,
    },
    Gamma {
        rate: f64,
        burstiness: f64,
    },
    Constant {
        rate: f64,
    },
    Closed {
        concurrency: u32,
        think_time_s: f64,
        /// Users start evenly over this many seconds (0: all at t = 0, as
        /// `vllm bench serve`, AIPerf and genai-perf start them).
        #[serde(skip_serializing_if = "is_zero")]
        ramp_s: f64,
    },
    Trace(Trace),
    /// An open loop whose rate changes over time (config/curve.rs).
    Curve(super::curve::Curve),
}

/// A trace file and its rows, read and checked at load time.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// As written in the scenario (relative to it).
    pub path: String,
    pub rows: Arc<Vec<TraceRow>>,
    /// The content columns (`prefix_id`, `prefix_tokens`, `session_id`) or
    /// a JSONL trace's `hash_ids`, when the file has them.
    pub content: Option<Arc<TraceContent>>,
    /// With `workload.classes` and a `class` column: each row's class, an
    /// index into `workload.classes`.
    pub classes: Option<Arc<Vec<u8>>>,
}

impl Serialize for Trace {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.path)
    }
}

/// A token-length distribution. Samples are clamped to `[min, max]`
/// (`min` defaults to 1).
#[derive(Clone, Debug, PartialEq)]
pub enum Length {
    Fixed(u32),
    Uniform { lo: u32, hi: u32 },
    Normal { mean: f64, std: f64, min: u32, max: Option<u32> },
    Lognormal { mean: f64, std: f64, min: u32, max: Option<u32> },
    Exponential { mean: f64, min: u32, max: Option<u32> },
    Choice { values: Vec<u32>, weights: Vec<f64> },
}

impl Length {
    /// The distribution's mean before clamping (what a user would quote).
    pub fn mean(&self) -> f64 {
        match self {
            Length::Fixed(n) => f64::from(*n),
            Length::Uniform { lo, hi } => (f64::from(*lo) + f64::from(*hi)) / 2.0,
            Length::Normal { mean, .. } | Length::Lognormal { mean, .. } | Length::Exponential { mean, .. } => *mean,
            Length::Choice { values, weights } => {
                let total: f64 = weights.iter().sum();
                values.iter().zip(weights).map(|(v, w)| f64::from(*v) * w).sum::<f64>() / total
            }
        }
    }

    /// The largest value it can produce, if bounded.
    pub fn max(&self) -> Option<u32> {
        match self {
            Length::Fixed(n) => Some(*n),
            Length::Uniform { hi, .. } => Some(*hi),
            Length::Normal { max, .. } | Length::Lognormal { max, .. } | Length::Exponential { max, .. } => *max,
            Length::Choice { values, .. } => values.iter().copied().max(),
        }
    }
}

impl Serialize for Length {
    /// A fixed length is a plain number; the others are one-key mappings,
    /// the form users write.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Moments {
            mean: f64,
            #[serde(skip_serializing_if = "Option::is_none")]
            std: Option<f64>,
            min: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            max: Option<u32>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "snake_case")]
        enum Tagged<'a> {
            Uniform([u32; 2]),
            Normal(Moments),
            Lognormal(Moments),
            Exponential(Moments),
            Choice { values: &'a [u32], weights: &'a [f64] },
        }
        let tagged = match self {
            Length::Fixed(n) => return s.serialize_u32(*n),
            Length::Uniform { lo, hi } => Tagged::Uniform([*lo, *hi]),
            Length::Normal { mean, std, min, max } => {
                Tagged::Normal(Moments { mean: *mean, std: Some(*std), min: *min, max: *max })
            }
            Length::Lognormal { mean, std, min, max } => {
                Tagged::Lognormal(Moments { mean: *mean, std: Some(*std), min: *min, max: *max })
            }
            Length::Exponential { mean, min, max } => {
                Tagged::Exponential(Moments { mean: *mean, std: None, min: *min, max: *max })
            }
            Length::Choice { values, weights } => Tagged::Choice { values, weights },
        };
        tagged.serialize(s)
    }
}

/// The keys that switch the per-operator cost form on (docs/engine.md).
pub const PER_OPERATOR_KEYS: [&str; 8] = [
    "efficiency.gemm_half_tokens",
    "efficiency.attention_compute",
    "efficiency.attention_memory",
    "efficiency.allreduce",
    "efficiency.expert_gemm",
    "latency.allreduce_us",
    "latency.eager_layer_us",
    "latency.per_expert_us",
];

impl Efficiency {
    /// Unsets every per-operator key (here and in `latency`).
    pub fn clear_per_operator(&mut self, latency: &mut Latency) {
        self.gemm_half_tokens = None;
        self.attention_compute = None;
        self.attention_memory = None;
        self.allreduce = None;
        self.expert_gemm = None;
        latency.allreduce_us = None;
        latency.eager_layer_us = None;
        latency.per_expert_us = None;
    }

    /// The first per-operator key set, if any (`latency` holds the others).
    pub fn per_operator_key(&self, latency: &Latency) -> Option<&'static str> {
        let set = [
            self.gemm_half_tokens.is_some(),
            self.attention_compute.is_some(),
            self.attention_memory.is_some(),
            self.allreduce.is_some(),
            self.expert_gemm.is_some(),
            latency.allreduce_us.is_some(),
            latency.eager_layer_us.is_some(),
            latency.per_expert_us.is_some(),
        ];
        PER_OPERATOR_KEYS.iter().zip(set).find(|(_, s)| *s).map(|(k, _)| *k)
    }
}

impl Scenario {
    /// Whether steps are priced per operator (docs/engine.md): some
    /// per-operator key is set. The key that did it, for messages.
    pub fn per_operator(&self) -> Option<&'static str> {
        self.efficiency.per_operator_key(&self.latency)
    }

    /// The engine's limits and costs.
    /// `latency.request_overhead_ms` in nanoseconds: how long after its
    /// arrival a request reaches the engine (docs/deployments.md).
    pub fn request_delay_ns(&self) -> u64 {
        llmsim_core::time::secs_to_nanos(self.latency.request_overhead_ms / 1e3)
    }

    /// `model.kv_cache.prefix_caching`: blocks are shared by content, and
    /// the outputs gain their cache columns.
    pub fn prefix_caching(&self) -> bool {
        self.model.kv_cache.prefix_caching
    }

    /// `new_token_ratio`'s start under `engine: sglang`: the scenario's,
    /// else SGLang's default start with its radix cache on (its
    /// `add_one_req` reserves that share of every running request's
    /// remaining output, `ignore_eos` or not; only with the cache
    /// disabled does an `ignore_eos` request take the exact path, which
    /// llmsim prices as the output reserved whole: `None`).
    pub fn sglang_ratio(&self) -> Option<f64> {
        let radix = self.engine == EngineKind::Sglang && self.prefix_caching();
        self.scheduler.new_token_ratio.or(radix.then_some(SGLANG_RADIX_RATIO))
    }

    /// The settings SGLang's scheduler runs with (under another engine
    /// they are unused): its ratio, mixed chunks and prefill token cap,
    /// SGLang's defaults where the scenario gives none.
    pub fn sglang_options(&self) -> llmsim_core::engine::sglang::SglangOptions {
        llmsim_core::engine::sglang::SglangOptions {
            ratio: self.sglang_ratio(),
            mixed_chunk: self.scheduler.mixed_chunk.unwrap_or(false),
            max_prefill_tokens: self
                .scheduler
                .max_prefill_tokens
                .unwrap_or(llmsim_core::engine::sglang::MAX_PREFILL_TOKENS),
        }
    }

    /// GPUs of one engine (`parallelism.tensor`, 1 without an architecture).
    pub fn tensor_parallel(&self) -> u32 {
        self.deployment.tensor_parallel
    }

    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            capacity: self.capacity.clone(),
            // Each data-parallel rank schedules with these limits.
            max_batch_tokens: self.scheduler.max_batch_tokens.saturating_mul(self.deployment.data_parallel()),
            max_num_sequences: self.scheduler.max_num_sequences.saturating_mul(self.deployment.data_parallel()),
            context_length: self.model.context_length,
            cost: self.cost_model(&self.model, &self.deployment, true),
            prefix_caching: self.prefix_caching(),
            policy: self.engine.policy(),
            scheduling_policy: self.scheduler.policy().core(),
            offload: self.offload_tiers(),
            lora: self.lora.as_ref().map(|l| l.core(&self.hardware, self.efficiency.compute, self.efficiency.memory)),
            sglang: self.sglang_options(),
            trtllm: llmsim_core::engine::trtllm::Trtllm {
                capacity: self.scheduler.capacity_scheduler_policy.map(CapacityName::core).unwrap_or_default(),
                chunking: self.scheduler.context_chunking_policy.map(ChunkingName::core),
            },
            speculative: self.speculative.as_ref().map(|s| llmsim_core::engine::Speculative {
                tokens: s.num_speculative_tokens,
                accept: s.conditional(),
                seed: s.draw_seed(self.workload.seed),
                lookahead: if s.method.on_gpu() { s.num_speculative_tokens } else { 0 },
                draft: s.drafter.as_ref().map(|d| Box::new(self.cost_model(&d.model, &d.deployment, false))),
            }),
        }
    }

    /// The core's offload tiers: each holds `gib` of whole blocks (every
    /// GPU's share) and loads a block in its per-GPU share over
    /// `bandwidth_gbps`.
    pub fn offload_tiers(&self) -> Option<llmsim_core::engine::offload::Offload> {
        let o = self.model.kv_cache.offload.as_ref()?;
        let bs = u64::from(self.capacity.block_size);
        let block = (self.deployment.kv_bytes_per_token * bs).max(1) as f64;
        let per_gpu = (self.deployment.kv_bytes_per_token_per_gpu * bs) as f64;
        let tiers = (o.tiers().into_iter())
            .map(|(_, t)| llmsim_core::engine::offload::Tier {
                blocks: (t.gib * 1024f64.powi(3) / block).floor() as u64,
                block_s: per_gpu / (t.bandwidth_gbps * 1e9),
            })
            .collect();
        Some(llmsim_core::engine::offload::Offload { tiers })
    }

    /// The step cost of `model` deployed as `deployment` on this
    /// scenario's hardware, efficiencies and latencies; without the
    /// `host` terms (the step and per-sequence overheads) for a drafter,
    /// whose passes run inside the model's step.
    fn cost_model(&self, model: &Model, deployment: &Deployment, host: bool) -> CostModel {
        CostModel::new(&CostInput {
            parameters_billions: model.weights.parameters_billions.unwrap_or(0.0),
            bytes_per_parameter: model.weights.bytes_per_parameter,
            kv_bytes_per_token: deployment.kv_bytes_per_token_per_gpu,
            peak_tflops: self.hardware.peak_tflops,
            memory_bandwidth_gbps: self.hardware.memory_bandwidth_gbps,
            compute_efficiency: self.efficiency.compute,
            memory_efficiency: self.efficiency.memory,
            step_overhead_ms: if host { self.latency.step_overhead_ms } else { 0.0 },
            per_sequence_overhead_us: if host { self.latency.per_sequence_overhead_us } else { 0.0 },
            deployment: deployment.cost_input_for(self, model),
            pipeline: deployment.pipeline,
        })
    }

    /// Mean prompt and output lengths of the workload (of the trace rows
    /// for a trace). A shared prefix counts in the prompt. With sessions,
    /// the mean over the turns of a conversation of the mean number of
    /// turns `T`: turn `j` carries `j` prompt draws and `j - 1` answers, so
    /// the mean prompt is `L + p (T + 1) / 2 + o (T - 1) / 2` (an estimate:
    /// the exact figure depends on the turn distribution's shape).
    pub fn mean_lengths(&self) -> (f64, f64) {
        let w = &self.workload;
        if let Arrivals::Trace(t) = &w.arrivals {
            let n = t.rows.len().max(1) as f64;
            let p: f64 = t.rows.iter().map(|r| f64::from(r.prompt)).sum();
            let o: f64 = t.rows.iter().map(|r| f64::from(r.output)).sum();
            return (p / n, o / n);
        }
        let mean = |l: &Option<Length>| l.as_ref().map_or(0.0, Length::mean);
        let (p, o) = (mean(&w.prompt_tokens), mean(&w.output_tokens));
        let prefix = w.shared_prefix.as_ref().map_or(0.0, |sp| f64::from(sp.tokens));
        match &w.sessions {
            None => (prefix + p, o),
            Some(sessions) => {
                let turns = sessions.turns.mean();
                (prefix + p * (turns + 1.0) / 2.0 + o * (turns - 1.0) / 2.0, o)
            }
        }
    }
}

// The deployment's validated types (built by `deployment`).

/// `parallelism:` (pipeline parallelism is refused).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Parallelism {
    pub tensor: u32,
    /// Attention data-parallel ranks (1: none).
    #[serde(skip_serializing_if = "is_one")]
    pub data: u32,
    /// Expert parallelism's GPUs (1: none).
    #[serde(skip_serializing_if = "is_one")]
    pub expert: u32,
    /// GPUs each expert group splits its experts over (1: whole experts).
    #[serde(skip_serializing_if = "is_one")]
    pub expert_tensor: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_imbalance: Option<f64>,
    /// Pipeline stages (1: none).
    #[serde(skip_serializing_if = "is_one")]
    pub pipeline: u32,
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

/// A figure that may depend on the GPU count.
#[derive(Clone, Debug, PartialEq)]
pub enum ByGpus {
    Fixed(f64),
    /// Sorted by GPU count.
    ByCount(Vec<(u32, f64)>),
}

impl ByGpus {
    pub fn at(&self, gpus: u32) -> Option<f64> {
        match self {
            ByGpus::Fixed(x) => Some(*x),
            ByGpus::ByCount(m) => m.iter().find(|(g, _)| *g == gpus).map(|(_, x)| *x),
        }
    }
}

impl Serialize for ByGpus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            ByGpus::Fixed(x) => s.serialize_f64(*x),
            ByGpus::ByCount(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (g, x) in m {
                    map.serialize_entry(g, x)?;
                }
                map.end()
            }
        }
    }
}

/// `hardware.interconnect`: an all-reduce's bus bandwidth and fixed latency.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Interconnect {
    pub bandwidth_gbps: ByGpus,
    pub latency_us: ByGpus,
}

/// `kv_cache.dtype`, as vLLM's `--kv-cache-dtype` names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KvDtype {
    /// The model's 16-bit dtype.
    Auto,
    Bf16,
    Fp16,
    Fp8,
    Fp8E4m3,
    Fp8E5m2,
}

impl KvDtype {
    pub const ALL: [KvDtype; 6] =
        [KvDtype::Auto, KvDtype::Bf16, KvDtype::Fp16, KvDtype::Fp8, KvDtype::Fp8E4m3, KvDtype::Fp8E5m2];

    pub fn as_str(self) -> &'static str {
        match self {
            KvDtype::Auto => "auto",
            KvDtype::Bf16 => "bf16",
            KvDtype::Fp16 => "fp16",
            KvDtype::Fp8 => "fp8",
            KvDtype::Fp8E4m3 => "fp8_e4m3",
            KvDtype::Fp8E5m2 => "fp8_e5m2",
        }
    }

    pub fn element_bytes(self) -> u64 {
        match self {
            KvDtype::Auto | KvDtype::Bf16 | KvDtype::Fp16 => 2,
            KvDtype::Fp8 | KvDtype::Fp8E4m3 | KvDtype::Fp8E5m2 => 1,
        }
    }
}

impl Serialize for KvDtype {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Which input a figure came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FigureSource {
    /// Given in the scenario, which has no architecture.
    Given,
    /// Derived from the architecture.
    Architecture,
    /// Given in the scenario beside an architecture, which it overrides.
    Override,
}

/// What the deployment comes to: the figures the engine and the reports use.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    pub architecture_origin: Option<ArchitectureOrigin>,
    pub tensor_parallel: u32,
    /// Parameters used for weight bytes and bytes read.
    pub parameters: f64,
    pub parameters_from: FigureSource,
    /// Parameters one token uses (all of them for a dense model).
    pub active_parameters: f64,
    /// All GPUs' weights: `parameters * bytes_per_parameter`.
    pub weight_bytes: f64,
    /// KV bytes per token of the whole model.
    pub kv_bytes_per_token: u64,
    pub kv_from: FigureSource,
    pub kv_bytes_per_token_per_gpu: u64,
    /// Sliding-window layers' KV bytes a token, whole model and one GPU
    /// (0 without them; `kv_bytes_per_token` then counts the full layers).
    pub window_kv_bytes_per_token: u64,
    pub window_kv_bytes_per_token_per_gpu: u64,
    /// The compute peak of the weights' GEMMs (per GPU, before
    /// efficiency); of all but the routed experts when those have their own.
    pub peak_tflops: f64,
    /// Which peak that is, and why.
    pub peak: PeakUse,
    /// The routed experts' own format and peak (`model.weights.expert_dtype`).
    pub expert_peak: Option<(f64, PeakUse)>,
    /// The all-reduce link at this tensor degree (`None` at 1).
    pub link: Option<Link>,
    /// Data and expert parallelism, when used.
    pub wide: Option<llmsim_core::engine::cost::Wide>,
    /// Pipeline parallelism, when used: its stages and hand-offs.
    pub pipeline: Option<llmsim_core::engine::Pipeline>,
}

impl Default for Deployment {
    fn default() -> Self {
        Deployment {
            architecture_origin: None,
            tensor_parallel: 1,
            parameters: 0.0,
            parameters_from: FigureSource::Given,
            active_parameters: 0.0,
            weight_bytes: 0.0,
            kv_bytes_per_token: 0,
            kv_from: FigureSource::Given,
            kv_bytes_per_token_per_gpu: 0,
            window_kv_bytes_per_token: 0,
            window_kv_bytes_per_token_per_gpu: 0,
            peak_tflops: 0.0,
            peak: PeakUse::default(),
            expert_peak: None,
            wide: None,
            link: None,
            pipeline: None,
        }
    }
}

/// Which of the hardware's peaks a class of weights runs at.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PeakUse {
    /// The weights' format: as given, or read from `bytes_per_parameter`.
    pub dtype: String,
    /// The hardware key whose figure is used.
    pub key: &'static str,
    /// The format's own peak is missing from the hardware and `key` stands in.
    pub fallback: Option<&'static str>,
}

impl PeakUse {
    /// `bytes` a weight over the bytes of the precision this peak is native
    /// to (2 at `peak_tflops`, 1 at `peak_tflops_fp8`, 0.5 at
    /// `peak_tflops_fp4`), at most 1: the per-operator form's GEMM ramp
    /// shrinks by it for weights narrower than the arithmetic (W4A16).
    pub fn ramp_scale(&self, bytes: f64) -> f64 {
        let native = match self.key {
            "peak_tflops_fp8" => 1.0,
            "peak_tflops_fp4" => 0.5,
            _ => 2.0,
        };
        (bytes / native).min(1.0)
    }
}

impl Deployment {
    /// Whether every weight computes at `peak_tflops_fp8`.
    pub fn peak_is_fp8(&self) -> bool {
        self.peak.key == "peak_tflops_fp8" && self.expert_peak.is_none()
    }

    /// GPUs one engine (one replica) uses: `tensor x data x pipeline`.
    pub fn gpus(&self) -> u32 {
        self.tensor_parallel * self.wide.map_or(1, |w| w.data) * self.pipeline_stages()
    }

    /// Pipeline stages (1 without pipeline parallelism).
    pub fn pipeline_stages(&self) -> u32 {
        self.pipeline.map_or(1, |p| p.stages)
    }

    /// KV bytes a token one GPU holds: its tensor-parallel share, and with
    /// pipeline stages the largest stage's layers' share of that.
    pub fn kv_bytes_per_token_held(&self) -> u64 {
        match self.pipeline {
            None => self.kv_bytes_per_token_per_gpu,
            Some(p) => (self.kv_bytes_per_token_per_gpu * p.stage_layers).div_ceil(p.layers),
        }
    }

    /// Attention data-parallel ranks (1 without them).
    pub fn data_parallel(&self) -> u32 {
        self.wide.map_or(1, |w| w.data)
    }

    /// The architecture's cost terms, when the model has one.
    pub fn cost_input(&self, s: &Scenario) -> Option<DeploymentInput> {
        self.cost_input_for(s, &s.model)
    }

    /// [`Deployment::cost_input`] of `model` (the scenario's, or a
    /// speculative drafter's) on the scenario's hardware and efficiencies.
    pub fn cost_input_for(&self, s: &Scenario, model: &Model) -> Option<DeploymentInput> {
        let architecture = model.architecture.clone()?;
        Some(DeploymentInput {
            sliding_window: architecture.sliding_window,
            window_kv_bytes_per_token: self.window_kv_bytes_per_token_per_gpu,
            architecture,
            parameters: self.parameters,
            tensor_parallel: self.tensor_parallel,
            peak_tflops: self.peak_tflops,
            link: self.link,
            wide: self.wide,
            expert_weights: self.expert_peak.as_ref().map(|(tflops, peak)| {
                let bytes = model.weights.expert_dtype.map_or(0.0, WeightDtype::bytes);
                llmsim_core::engine::cost::ExpertWeights {
                    bytes_per_parameter: bytes,
                    peak_tflops: *tflops,
                    dtype: model.weights.expert_dtype.map_or("bf16", WeightDtype::kernel_dtype),
                    ramp_scale: peak.ramp_scale(bytes),
                }
            }),
            per_layer_overhead_us: s.latency.per_layer_overhead_us,
            operators: s.per_operator().map(|_| {
                let e = &s.efficiency;
                let bpp = model.weights.bytes_per_parameter;
                llmsim_core::engine::cost::OperatorInput {
                    gemm_half_tokens: e.gemm_half_tokens.unwrap_or(0.0),
                    ramp_scale: self.peak.ramp_scale(bpp),
                    attention_compute: e.attention_compute.unwrap_or(e.compute),
                    attention_memory: e.attention_memory.unwrap_or(e.memory),
                    allreduce_us: s.latency.allreduce_us,
                    allreduce_efficiency: e.allreduce.unwrap_or(1.0),
                    per_expert_us: s.latency.per_expert_us.unwrap_or(0.0),
                    expert_gemm_efficiency: e.expert_gemm.unwrap_or(1.0),
                    eager_layer_us: s.latency.eager_layer_us.unwrap_or(0.0),
                    cuda_graph_max_tokens: u64::from(s.scheduler.graph_max_tokens()),
                    peak16_tflops: s.hardware.peak_tflops,
                    dtype: if let Some(d) = model.weights.dtype {
                        d.kernel_dtype()
                    } else if bpp <= 0.5 {
                        "int4"
                    } else if bpp <= 1.0 {
                        "fp8"
                    } else {
                        "bf16"
                    },
                    kernels: s.hardware.kernels.clone(),
                }
            }),
        })
    }
}

// The `speculative:` types (config/speculative.rs builds them).

/// The drafter, as vLLM's `--speculative-config` names its methods.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Prompt lookup: drafts copied from earlier text, on the CPU.
    Ngram,
    /// A one-layer head on the model's last hidden state (EAGLE-1/2).
    Eagle,
    /// EAGLE-3: a one-layer head on three of the model's hidden states,
    /// with its own 32,000-token LM head.
    Eagle3,
    /// The checkpoint's multi-token-prediction module (DeepSeek's).
    Mtp,
    /// A smaller model of its own.
    DraftModel,
}

impl Method {
    pub const KNOWN: &'static str = "ngram, eagle, eagle3, mtp, draft_model";

    pub(crate) fn parse(name: &str) -> Option<Method> {
        Some(match name.trim() {
            "ngram" => Method::Ngram,
            "eagle" => Method::Eagle,
            "eagle3" => Method::Eagle3,
            "mtp" => Method::Mtp,
            "draft_model" => Method::DraftModel,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Ngram => "ngram",
            Method::Eagle => "eagle",
            Method::Eagle3 => "eagle3",
            Method::Mtp => "mtp",
            Method::DraftModel => "draft_model",
        }
    }

    /// Whether the drafter runs on the GPU and writes KV of its own (then
    /// vLLM reserves `k` lookahead slots a request and the drafter's
    /// layers share the model's blocks).
    pub fn on_gpu(self) -> bool {
        self != Method::Ngram
    }
}

/// A validated `speculative:`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Speculative {
    pub method: Method,
    pub num_speculative_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance_by_position: Option<Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_parameters_billions: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_kv_bytes_per_token: Option<u64>,
    /// Given, or `None`: drawn from the workload's seed
    /// ([`Speculative::draw_seed`]), so a run on another seed draws again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// What drafts on the GPU (`None` for n-gram).
    #[serde(skip)]
    pub drafter: Option<Drafter>,
}

/// The drafter on the GPU: what a pass costs and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Drafter {
    /// Priced as this model (its architecture, or two numbers).
    pub model: Model,
    pub deployment: Deployment,
    /// Weight bytes it adds to the model's, all GPUs (shared embeddings
    /// and LM heads not counted twice).
    pub resident_bytes: f64,
    /// Its KV bytes a token on one GPU, held in the model's blocks.
    pub kv_bytes_per_token_per_gpu: u64,
    /// One line for `explain`.
    pub about: String,
}

impl Speculative {
    /// The acceptance draws' seed: `speculative.seed`, or the workload's
    /// mixed with a constant (so its ChaCha streams are not the arrival
    /// generator's).
    pub fn draw_seed(&self, workload_seed: u64) -> u64 {
        self.seed.unwrap_or(workload_seed ^ 0x7370_6563_6465_636f)
    }

    /// `1 + r_0 + ... + r_(k-1)`: the tokens a verify step with every
    /// draft scheduled releases on average (vLLM's mean acceptance length).
    pub fn mean_acceptance_length(&self) -> f64 {
        let k = self.num_speculative_tokens as i32;
        match (&self.acceptance_by_position, self.acceptance_rate) {
            (Some(r), _) => 1.0 + r.iter().sum::<f64>(),
            (None, a) => {
                let a = a.unwrap_or(0.0);
                (0..=k).map(|i| a.powi(i)).sum()
            }
        }
    }

    /// `q_i`: draft `i`'s acceptance given the earlier ones were.
    pub fn conditional(&self) -> Vec<f64> {
        let k = self.num_speculative_tokens as usize;
        match &self.acceptance_by_position {
            None => vec![self.acceptance_rate.unwrap_or(0.0); k],
            Some(r) => {
                let mut prev = 1.0;
                r.iter()
                    .map(|&x| {
                        let q = if prev > 0.0 { (x / prev).min(1.0) } else { 0.0 };
                        prev = x;
                        q
                    })
                    .collect()
            }
        }
    }
}

// The `cluster:` types live here because a pool holds the Scenario its
// replicas run and a Scenario holds its Cluster; config/cluster.rs builds
// them (docs/clusters.md).

/// A validated `cluster:`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    /// Engines in the cluster: with pools, both pools' replicas.
    pub replicas: u32,
    /// With pools, the prefill pool's.
    pub router: Router,
    /// `prefix_affinity` only (shown only with it).
    pub overlap_weight: Option<f64>,
    /// `cluster.prefill` / `cluster.decode`: prefill/decode disaggregation.
    pub disagg: Option<Box<Disagg>>,
    /// `cluster.autoscale`: replicas added and removed as the load goes.
    pub autoscale: Option<super::autoscale::Autoscale>,
    /// `cluster.timeline` (implied by `autoscale`): results per window.
    pub timeline: Option<super::autoscale::Timeline>,
    /// `cluster.pools`: replicas on GPUs of their own kinds (empty without).
    pub pools: Vec<FleetPool>,
}

/// One of `cluster.pools` (docs/clusters.md, "Mixed pools").
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetPool {
    pub name: String,
    /// Ready at the start.
    pub replicas: u32,
    /// Per GPU an hour (the pool's, else its hardware's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<super::autoscale::Autoscale>,
    #[serde(flatten)]
    pub given: PoolOverrides,
    /// The scenario one replica of this pool runs (no `cluster`).
    #[serde(skip)]
    pub scenario: Box<Scenario>,
}

impl FleetPool {
    /// GPUs of one replica.
    pub fn gpus_per_replica(&self) -> u32 {
        self.scenario.deployment.gpus()
    }
}

/// What a pool (`cluster.pools[]`, `cluster.prefill`, `cluster.decode`)
/// overrides of the scenario, as given (resolved), so `llmsim explain`
/// shows them; the pool's scenario holds them applied.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hardware: Option<Hardware>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<Parallelism>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<Scheduler>,
}

/// Prefill/decode disaggregation (docs/clusters.md).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Disagg {
    pub prefill: Pool,
    pub decode: Pool,
    pub kv_transfer: KvTransfer,
}

/// One pool of replicas: its router and what it overrides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pool {
    pub replicas: u32,
    pub router: Router,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap_weight: Option<f64>,
    #[serde(flatten)]
    pub given: PoolOverrides,
    /// The scenario one replica of this pool runs: the base scenario with
    /// the overrides applied (and no `cluster`).
    #[serde(skip)]
    pub scenario: Box<Scenario>,
}

impl Pool {
    /// GPUs of one replica (its tensor degree).
    pub fn gpus_per_replica(&self) -> u32 {
        self.scenario.deployment.gpus()
    }

    /// GPUs of the whole pool.
    pub fn gpus(&self) -> u32 {
        self.replicas * self.gpus_per_replica()
    }
}

/// `cluster.kv_transfer`: a prompt's KV moves in
/// `latency_ms / 1000 + P * kv_bytes_per_token / (bandwidth_gbps * 1e9)` s.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvTransfer {
    /// GB/s (10^9 bytes a second) of one link.
    pub bandwidth_gbps: f64,
    pub latency_ms: f64,
}

impl KvTransfer {
    /// The transfer time of `bytes`, in seconds (not saturated).
    pub fn secs(&self, bytes: u64) -> f64 {
        self.latency_ms / 1e3 + bytes as f64 / (self.bandwidth_gbps * 1e9)
    }
}

impl Cluster {
    /// GPUs of the whole cluster (every pool, tensor degrees counted).
    pub fn gpus(&self, s: &Scenario) -> u32 {
        if !self.pools.is_empty() {
            return self.pools.iter().map(|p| p.replicas * p.gpus_per_replica()).sum();
        }
        match &self.disagg {
            Some(d) => d.prefill.gpus() + d.decode.gpus(),
            None => self.replicas * s.deployment.gpus(),
        }
    }
}

impl Serialize for Cluster {
    /// The form a user writes: `replicas`/`router`, or the pools.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Plain<'a> {
            replicas: u32,
            router: Router,
            #[serde(skip_serializing_if = "Option::is_none")]
            overlap_weight: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            autoscale: Option<&'a super::autoscale::Autoscale>,
            #[serde(skip_serializing_if = "Option::is_none")]
            timeline: Option<&'a super::autoscale::Timeline>,
        }
        #[derive(Serialize)]
        struct Pooled<'a> {
            router: Router,
            #[serde(skip_serializing_if = "Option::is_none")]
            overlap_weight: Option<f64>,
            pools: &'a [FleetPool],
            #[serde(skip_serializing_if = "Option::is_none")]
            timeline: Option<&'a super::autoscale::Timeline>,
        }
        if !self.pools.is_empty() {
            let p = Pooled {
                router: self.router,
                overlap_weight: self.overlap_weight,
                pools: &self.pools,
                timeline: self.timeline.as_ref(),
            };
            return p.serialize(s);
        }
        match &self.disagg {
            Some(d) => d.serialize(s),
            None => Plain {
                replicas: self.replicas,
                router: self.router,
                overlap_weight: self.overlap_weight,
                autoscale: self.autoscale.as_ref(),
                timeline: self.timeline.as_ref(),
            }
            .serialize(s),
        }
    }
}

/// How a request picks its replica (docs/clusters.md).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    RoundRobin,
    Random,
    LeastOutstanding,
    LeastKv,
    PrefixAffinity,
    SessionAffinity,
}

impl Router {
    pub const ALL: [Router; 6] = [
        Router::RoundRobin,
        Router::Random,
        Router::LeastOutstanding,
        Router::LeastKv,
        Router::PrefixAffinity,
        Router::SessionAffinity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Router::RoundRobin => "round_robin",
            Router::Random => "random",
            Router::LeastOutstanding => "least_outstanding",
            Router::LeastKv => "least_kv",
            Router::PrefixAffinity => "prefix_affinity",
            Router::SessionAffinity => "session_affinity",
        }
    }

    pub fn parse(name: &str) -> Option<Router> {
        Router::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The known names, for messages.
    pub fn known() -> String {
        Router::ALL.map(Router::as_str).join(", ")
    }
}

// The default `overlap_weight` lives with the other defaults; the old path stays.
pub use super::defaults::DEFAULT_OVERLAP_WEIGHT;

/// Bytes of an adapter's parameter: vLLM's `lora_dtype` is the model's
/// activation dtype, 16 bits on every shipped model.
pub const LORA_BYTES_PER_PARAMETER: u64 = 2;

/// A validated `lora:`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Lora {
    pub max_loras: u32,
    pub max_lora_rank: u32,
    pub load_bandwidth_gbps: f64,
    pub target_modules: Vec<String>,
    /// Requests on the base model, relative to the adapters' weights.
    pub base_weight: f64,
    pub adapters: Vec<Adapter>,
    /// What follows from the model's shapes.
    #[serde(skip)]
    pub derived: LoraFigures,
}

/// One adapter.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Adapter {
    pub name: String,
    pub rank: u32,
    pub weight: f64,
}

/// Figures of the adapters on this model and deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoraFigures {
    /// `sum over layers and all seven modules of (in + out)`: a slot of
    /// rank r holds `r` times this many parameters. vLLM wraps every
    /// linear module of the model whatever the adapters target, so the
    /// slots and the kernels span them all.
    pub width: u64,
    /// The same sum over `target_modules` only: an adapter of rank r has
    /// `r` times this many parameters, the ones copied into a slot.
    pub target_width: u64,
    /// GPUs each adapter is split over (the tensor-parallel degree).
    pub tensor_parallel: u32,
}

impl Lora {
    /// Parameters of a slot of rank `rank` (all GPUs, every module).
    pub fn parameters(&self, rank: u32) -> u64 {
        u64::from(rank) * self.derived.width
    }

    /// Parameters of an adapter of rank `rank` (all GPUs, its target
    /// modules).
    pub fn adapter_parameters(&self, rank: u32) -> u64 {
        u64::from(rank) * self.derived.target_width
    }

    /// Bytes one GPU reserves for the slots: `max_loras` adapters at
    /// `max_lora_rank`, each GPU its `1 / tensor` share.
    pub fn slot_bytes_per_gpu(&self) -> f64 {
        self.parameters(self.max_lora_rank) as f64 * LORA_BYTES_PER_PARAMETER as f64
            / f64::from(self.derived.tensor_parallel.max(1))
    }

    /// Bytes all GPUs reserve for the slots (the weights the KV budget
    /// sets aside beside the model's).
    pub fn resident_bytes(&self) -> f64 {
        f64::from(self.max_loras) * self.parameters(self.max_lora_rank) as f64 * LORA_BYTES_PER_PARAMETER as f64
    }

    /// The core's figures on `hw` at the given efficiencies.
    pub fn core(
        &self,
        hw: &Hardware,
        compute_efficiency: f64,
        memory_efficiency: f64,
    ) -> llmsim_core::engine::lora::Lora {
        let tp = f64::from(self.derived.tensor_parallel.max(1));
        let bytes = |params: u64| params as f64 * LORA_BYTES_PER_PARAMETER as f64 / tp;
        // Shrink (x A) and expand (x B) at the slots' rank: 2 FLOPs a
        // multiply-add, `max_lora_rank x width` of them a token, split over
        // the GPUs.
        let flops = 2.0 * self.parameters(self.max_lora_rank) as f64 / tp;
        llmsim_core::engine::lora::Lora {
            max_loras: self.max_loras,
            load_s: (self.adapters.iter())
                .map(|a| bytes(self.adapter_parameters(a.rank)) / (self.load_bandwidth_gbps * 1e9))
                .collect(),
            token_s: flops / (hw.peak_tflops * 1e12 * compute_efficiency),
            slot_read_s: bytes(self.parameters(self.max_lora_rank))
                / (hw.memory_bandwidth_gbps * 1e9 * memory_efficiency),
        }
    }
}
