//! Every bound on input, in one place: the allowed range of each numeric
//! key and the limits of one run, each with the reason for it.
//!
//! Each scenario key's row in [`crate::config::schema`] cites the row of
//! [`row`] that bounds it, and validation takes the range from there
//! ([`crate::config::check::Check::real_at`]); the
//! offline driver stops a run that reaches a run limit (`llmsim_planner::sim`),
//! and the table of input limits in `docs/scenario.md` is generated from
//! [`table`] ([`crate::config::reference`]) and checked by a test, so the
//! documentation cannot drift from the code.
//!
//! The ranges are wide: each admits every real deployment by orders of
//! magnitude and exists to turn a typo (`1e300`, `1e-300`) into a clear
//! error instead of a saturated clock, an allocation failure or a run that
//! never ends.

use std::fmt;

use llmsim_core::util::thousands;

/// An allowed range of a number.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Range {
    /// A real number from `lo` to `hi`; `open_lo`/`open_hi` exclude the end.
    Real { lo: f64, open_lo: bool, hi: f64, open_hi: bool },
    /// A whole number from `lo` to `hi`, both included.
    Whole { lo: u64, hi: u64 },
}

impl Range {
    pub const fn closed(lo: f64, hi: f64) -> Range {
        Range::Real { lo, open_lo: false, hi, open_hi: false }
    }

    /// `(lo, hi]`: above `lo`, at most `hi`.
    pub const fn above(lo: f64, hi: f64) -> Range {
        Range::Real { lo, open_lo: true, hi, open_hi: false }
    }

    /// `[lo, hi)`.
    pub const fn below(lo: f64, hi: f64) -> Range {
        Range::Real { lo, open_lo: false, hi, open_hi: true }
    }

    pub const fn whole(lo: u64, hi: u64) -> Range {
        Range::Whole { lo, hi }
    }

    /// Whether `v` lies in the range (NaN never does).
    pub fn contains(&self, v: f64) -> bool {
        match *self {
            Range::Real { lo, open_lo, hi, open_hi } => {
                let above = if open_lo { v > lo } else { v >= lo };
                let below = if open_hi { v < hi } else { v <= hi };
                above && below
            }
            Range::Whole { lo, hi } => v.fract() == 0.0 && v >= lo as f64 && v <= hi as f64,
        }
    }

    /// Whether whole number `v` lies in the range.
    pub fn contains_whole(&self, v: i128) -> bool {
        match *self {
            Range::Whole { lo, hi } => v >= i128::from(lo) && v <= i128::from(hi),
            Range::Real { .. } => self.contains(v as f64),
        }
    }
}

impl fmt::Display for Range {
    /// `(0, 1]` for real ranges, `1 to 10,000,000` for whole ones.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Range::Real { lo, open_lo, hi, open_hi } => write!(
                f,
                "{}{}, {}{}",
                if open_lo { '(' } else { '[' },
                number(lo),
                number(hi),
                if open_hi { ')' } else { ']' }
            ),
            Range::Whole { lo, hi } => write!(f, "whole, {} to {}", thousands(lo), thousands(hi)),
        }
    }
}

/// A number as a person writes it: `0.001`, `1,000,000`, `1e15`.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e13 {
        let s = thousands(v.abs() as u64);
        if v < 0.0 { format!("-{s}") } else { s }
    } else if v != 0.0 && (v.abs() >= 1e13 || v.abs() < 1e-4) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Memory per GPU.
pub const HBM_GIB: Range = Range::above(0.0, 1e6);
/// An offload tier's size: up to a petabyte.
pub const OFFLOAD_GIB: Range = Range::above(0.0, 1e6);
/// An offload tier's load bandwidth, GB/s a GPU: from a slow disk to far
/// beyond any PCIe or NVLink-C2C link.
pub const OFFLOAD_BANDWIDTH_GBPS: Range = Range::above(0.0, 1e4);
/// Below 1 GB/s a step of any real model takes minutes; 1 PB/s is 300x an H100.
pub const MEMORY_BANDWIDTH_GBPS: Range = Range::closed(1.0, 1e6);
pub const PEAK_TFLOPS: Range = Range::closed(0.001, 1e6);
pub const COST_PER_HOUR: Range = Range::closed(0.0, 1e6);
/// The all-reduce link's bandwidth: PCIe 3 is about 12 GB/s, NVLink 5 900.
pub const INTERCONNECT_BANDWIDTH_GBPS: Range = Range::closed(1.0, 1e6);
pub const INTERCONNECT_LATENCY_US: Range = Range::closed(0.0, 1e6);
/// GPUs of one engine (and the GPU counts of an interconnect table).
pub const TENSOR_PARALLEL: Range = Range::whole(1, 4096);
pub const DATA_PARALLEL: Range = Range::whole(1, 1024);
/// Pipeline stages: past the layers of any model.
pub const PIPELINE_PARALLEL: Range = Range::whole(1, 256);
/// GPUs one node joins (an NVL72 rack: 72).
pub const GPUS_PER_NODE: Range = Range::whole(1, 4096);
pub const EXPERT_IMBALANCE: Range = Range::closed(1.0, 64.0);
/// An architecture's sizes (layers, widths, heads, vocabulary, experts);
/// the whole model is checked separately against its parameter count.
pub const ARCH_SIZE: Range = Range::whole(1, u32::MAX as u64);
/// [`ARCH_SIZE`] where 0 means "none" (experts, a shared expert's width).
pub const ARCH_SIZE_OR_ZERO: Range = Range::whole(0, u32::MAX as u64);
pub const CONTEXT_LENGTH: Range = Range::whole(2, 100_000_000);
pub const PARAMETERS_BILLIONS: Range = Range::closed(1e-6, 1e5);
pub const BYTES_PER_PARAMETER: Range = Range::closed(0.1, 16.0);
pub const KV_BYTES_PER_TOKEN: Range = Range::whole(1, 1_000_000_000);
pub const BLOCK_SIZE: Range = Range::whole(1, 65_536);
pub const GPU_MEMORY_UTILIZATION: Range = Range::above(0.0, 1.0);
pub const WATERMARK: Range = Range::below(0.0, 1.0);
pub const NUM_BLOCKS: Range = Range::whole(1, u32::MAX as u64);
pub const MAX_BATCH_TOKENS: Range = Range::whole(1, 100_000_000);
pub const MAX_NUM_SEQUENCES: Range = Range::whole(1, 1_000_000);
pub const STEP_OVERHEAD_MS: Range = Range::closed(0.0, 60_000.0);
pub const REQUEST_OVERHEAD_MS: Range = Range::closed(0.0, 3_600_000.0);
/// `latency.per_layer_overhead_us` and `per_sequence_overhead_us`.
pub const FINE_OVERHEAD_US: Range = Range::closed(0.0, 1_000_000.0);
pub const EFFICIENCY: Range = Range::closed(0.001, 1.0);
/// `efficiency.gemm_half_tokens`: 0 (off) to far beyond any step.
pub const GEMM_HALF_TOKENS: Range = Range::closed(0.0, 1e6);
/// `efficiency.allreduce`: the engine's all-reduce may beat NCCL's bus bandwidth.
pub const ALLREDUCE_EFFICIENCY: Range = Range::closed(0.01, 100.0);
/// `efficiency.expert_gemm`: the fused-MoE kernels against a dense GEMM.
pub const EXPERT_GEMM_EFFICIENCY: Range = Range::closed(0.01, 100.0);
/// `scheduler.cuda_graph_max_tokens`: 0 (no graphs) to vLLM's largest.
pub const CUDA_GRAPH_MAX_TOKENS: Range = Range::whole(0, 1_000_000);
pub const SEED: Range = Range::whole(0, u64::MAX);
/// Draft tokens a speculative step proposes (the core's most).
pub const SPECULATIVE_TOKENS: Range = Range::whole(1, llmsim_core::engine::speculative::MAX_TOKENS as u64);
/// `lora.max_loras`: GPU slots for adapters.
pub const LORA_SLOTS: Range = Range::whole(1, 256);
/// A LoRA adapter's rank (vLLM's largest `--max-lora-rank` is 512).
pub const LORA_RANK: Range = Range::whole(1, 512);
/// `lora.count`: adapters on one model (a request names one by a `u16`).
pub const LORA_ADAPTERS: Range = Range::whole(1, 4096);
/// `lora.zipf`: 0 (uniform) to a single adapter taking nearly all.
pub const LORA_ZIPF: Range = Range::closed(0.0, 10.0);
/// `lora.base_weight`: 0 (every request names an adapter) or a weight.
pub const LORA_BASE_WEIGHT: Range = Range::closed(0.0, 1e15);
/// `lora.load_bandwidth_gbps`: host memory to one GPU.
pub const LORA_LOAD_GBPS: Range = Range::above(0.0, 1e4);
/// `scheduler.new_token_ratio`: SGLang's ratio, above 0 and at most 1.
pub const NEW_TOKEN_RATIO: Range = Range::above(0.0, 1.0);
/// `scheduler.max_prefill_tokens`: SGLang's prompt tokens a step.
pub const MAX_PREFILL_TOKENS: Range = Range::whole(1, 100_000_000);
/// A probability.
pub const PROBABILITY: Range = Range::closed(0.0, 1.0);
pub const REQUESTS: Range = Range::whole(1, MAX_SUMMARY_REQUESTS);
pub const DURATION_S: Range = Range::closed(1e-9, MAX_SIM_SECONDS);
/// From one request in 11.6 days to one a nanosecond, the clock's resolution.
pub const RATE: Range = Range::closed(1e-6, 1e9);
pub const BURSTINESS: Range = Range::closed(0.001, 1000.0);
/// A daily curve's rates: 0 to one a nanosecond.
pub const CURVE_RATE: Range = Range::closed(0.0, 1e9);
/// An hour of the day.
pub const HOUR: Range = Range::below(0.0, 24.0);
pub const CONCURRENCY: Range = Range::whole(1, 1_000_000);
pub const THINK_TIME_S: Range = Range::closed(0.0, MAX_SIM_SECONDS);
/// An exponential think time's mean: above 0 (a mean of 0 is a fixed 0).
pub const THINK_MEAN_S: Range = Range::above(0.0, MAX_SIM_SECONDS);
/// System prompts of `workload.shared_prefix`: each is one content key.
pub const PREFIX_GROUPS: Range = Range::whole(1, 100_000_000);
/// Token counts: prompt and output lengths, their bounds, `choice` values.
pub const TOKENS: Range = Range::whole(1, u32::MAX as u64);
pub const LENGTH_MEAN: Range = Range::closed(1.0, u32::MAX as f64);
pub const LENGTH_STD: Range = Range::closed(0.0, u32::MAX as f64);
pub const CHOICE_WEIGHT: Range = Range::above(0.0, 1e15);
/// The serve models file's `fixed` engine: prompt tokens a second.
pub const PREFILL_TOKENS_PER_S: Range = Range::closed(0.001, 1e12);
/// Replicas of one cluster: each is a whole engine kept in memory.
pub const REPLICAS: Range = Range::whole(1, 10_000);
/// `prefix_affinity`'s weight of a missed block against a busy one.
pub const OVERLAP_WEIGHT: Range = Range::closed(0.0, 1e6);
/// `cluster.kv_transfer.bandwidth_gbps`: above 0 (a link that moves
/// nothing would never hand a request over).
pub const KV_TRANSFER_GBPS: Range = Range::above(0.0, 1e6);
/// `cluster.kv_transfer.latency_ms`.
pub const KV_TRANSFER_MS: Range = Range::closed(0.0, 60_000.0);
/// `cluster.autoscale.target`: above 0 (a target of 0 asks for infinite replicas).
pub const AUTOSCALE_TARGET: Range = Range::above(0.0, 1e9);
/// The autoscaler's sync period and signal window, in seconds: a second
/// to a day (Kubernetes' sync period is 15 s; KEDA polls every 30 s).
pub const AUTOSCALE_PERIOD_S: Range = Range::closed(1.0, 86_400.0);
/// HPA's tolerance: 0 (act on any difference) up to, not at, 1.
pub const AUTOSCALE_TOLERANCE: Range = Range::below(0.0, 1.0);
/// A stabilization window: Kubernetes allows 0 to an hour.
pub const STABILIZATION_S: Range = Range::closed(0.0, 3600.0);
/// A `Pods` scaling policy: replicas a period.
pub const SCALE_PODS: Range = Range::whole(1, 10_000);
/// A `Percent` scaling policy.
pub const SCALE_PERCENT: Range = Range::above(0.0, 10_000.0);
/// A part of a cold start, in seconds: up to a day.
pub const COLD_START_S: Range = Range::closed(0.0, 86_400.0);
/// `cluster.autoscale.cold_start.load_gbps`.
pub const LOAD_GBPS: Range = Range::closed(0.001, 1e4);
/// A whole cold start (the weights' load and the rest), in seconds: a week.
pub const MAX_COLD_START_S: f64 = 604_800.0;
/// A timeline window: a second to a day.
pub const WINDOW_S: Range = Range::closed(1.0, 86_400.0);
/// A window's latency bound, in ms.
pub const WINDOW_SLO_MS: Range = Range::closed(0.0, 1e9);
/// A trace row's arrival.
pub const ARRIVAL_S: Range = Range::closed(0.0, MAX_SIM_SECONDS);

/// The simulated clock stops here (about 31.7 years): far below where
/// integer nanoseconds saturate (about 584 years), so no time is ever
/// clipped. A run that would pass it stops with an error.
pub const MAX_SIM_SECONDS: f64 = 1e9;
/// Requests one run may issue when it keeps each request's record (`llmsim
/// run --requests-csv`, and a trace's rows): about 104 bytes a request
/// (1.04 GB at the limit, measured), about 3 s a million with the CSV.
pub const MAX_REQUESTS: u64 = 10_000_000;
/// Requests a generated workload may issue in a run that keeps no record
/// of a request once it has ended (the summary `llmsim run` prints, sweeps,
/// `capacity --over-time`): memory is flat in requests, so the bound is
/// time, about 4 hours at a fleet's 70,000 requests a second.
pub const MAX_SUMMARY_REQUESTS: u64 = 1_000_000_000;
/// Engine steps one run may take: about an hour at 0.4 µs a step.
pub const MAX_STEPS: u64 = 10_000_000_000;
/// The cheapest step (one token, the weights read once, plus the step
/// overhead) must cost at least this: a real step launches kernels and
/// schedules, which takes longer. It bounds the steps per simulated second.
pub const MIN_STEP_SECONDS: f64 = 1e-6;
/// A closed loop whose users are rejected again and again at one instant
/// (think time 0) makes no progress in time: it stops once it has issued
/// this many requests per user at one instant.
pub const SAME_INSTANT_ROUNDS: u64 = 100;
/// Largest YAML file (scenario, hardware, models, sweep, experiment) and
/// small JSON file (a Hugging Face config, an `llmsim run --json` result).
/// Each kind of file has its limit in [`crate::input::Kind::limit`].
pub const MAX_YAML_BYTES: usize = 4 << 20;
/// Deepest `[`/`{` nesting in a YAML file or `--set` value.
pub const MAX_YAML_DEPTH: usize = 64;
/// Largest trace file (CSV or JSONL), read as a stream.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
/// Largest measured file (a benchmark's per-request JSON, a measured trace
/// or table, a kernel table): a `vllm bench serve --save-detailed` file of
/// 2,000 requests of 120 tokens is 5.8 MB, so 1 GiB holds about 370,000.
pub const MAX_MEASURED_BYTES: u64 = 1 << 30;
/// Largest sweep shard (`llmsim merge`): a point's results take about
/// 3 KB, so 1 GiB holds hundreds of thousands of points.
pub const MAX_SHARD_BYTES: u64 = 1 << 30;
/// Largest `tokenizer.json`: those of released models take 2 to 35 MB.
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// One row of the table of input limits (`docs/scenario.md`).
#[derive(Debug)]
pub struct Limit {
    pub key: &'static str,
    pub range: Range,
    pub why: &'static str,
}

/// The rows of the table of input limits, one `static` each so a key row
/// of [`crate::config::schema`] can cite the row that bounds it: the
/// range lives here once, with the reason for it.
pub mod row {
    use super::Limit;

    pub static HBM_GIB: Limit =
        Limit { key: "hardware.hbm_gib", range: super::HBM_GIB, why: "GiB per GPU; a petabyte is beyond any device" };

    pub static MEMORY_BANDWIDTH_GBPS: Limit = Limit {
        key: "hardware.memory_bandwidth_gbps",
        range: super::MEMORY_BANDWIDTH_GBPS,
        why: "below 1 GB/s a step of a real model takes minutes; 1 PB/s is 300x an H100",
    };

    pub static PEAK_TFLOPS: Limit = Limit {
        key: "hardware.peak_tflops",
        range: super::PEAK_TFLOPS,
        why: "a CPU core reaches about 0.1 TFLOPS; 1 EFLOPS is 1000x an H100",
    };

    pub static PEAK_TFLOPS_FP8: Limit = Limit {
        key: "hardware.peak_tflops_fp8",
        range: super::PEAK_TFLOPS,
        why: "as peak_tflops, for 1-byte weights of a model with an architecture",
    };

    pub static PEAK_TFLOPS_FP4: Limit = Limit {
        key: "hardware.peak_tflops_fp4",
        range: super::PEAK_TFLOPS,
        why: "as peak_tflops, for FP4 weights of a model with an architecture",
    };

    pub static COST_PER_HOUR: Limit =
        Limit { key: "hardware.cost_per_hour", range: super::COST_PER_HOUR, why: "price of one GPU-hour" };

    pub static INTERCONNECT_BANDWIDTH_GBPS: Limit = Limit {
        key: "hardware.interconnect.bandwidth_gbps",
        range: super::INTERCONNECT_BANDWIDTH_GBPS,
        why: "PCIe 3 is about 12 GB/s, NVLink 5 900 GB/s",
    };

    pub static INTERCONNECT_LATENCY_US: Limit =
        Limit { key: "hardware.interconnect.latency_us", range: super::INTERCONNECT_LATENCY_US, why: "up to a second" };

    pub static TENSOR_PARALLEL: Limit = Limit {
        key: "parallelism.tensor, interconnect GPU counts",
        range: super::TENSOR_PARALLEL,
        why: "tensor-parallel groups span at most a few nodes (16-64 GPUs)",
    };

    pub static DATA_PARALLEL: Limit = Limit {
        key: "parallelism.data",
        range: super::DATA_PARALLEL,
        why: "wide expert-parallel deployments run 8 to a few hundred ranks (GB200 NVL72: 72)",
    };

    pub static PIPELINE_PARALLEL: Limit = Limit {
        key: "parallelism.pipeline",
        range: super::PIPELINE_PARALLEL,
        why: "stages of at least one layer; the largest models have about 128 layers",
    };

    pub static GPUS_PER_NODE: Limit = Limit {
        key: "hardware.gpus_per_node",
        range: super::GPUS_PER_NODE,
        why: "8 in an HGX node, 72 in an NVL72 rack",
    };

    pub static SEND_RECV_BANDWIDTH_GBPS: Limit = Limit {
        key: "hardware.send_recv.bandwidth_gbps, hardware.network.bandwidth_gbps",
        range: super::INTERCONNECT_BANDWIDTH_GBPS,
        why: "as interconnect.bandwidth_gbps (a 400 Gb/s NIC is 50 GB/s)",
    };

    pub static SEND_RECV_LATENCY_US: Limit = Limit {
        key: "hardware.send_recv.latency_us, hardware.network.latency_us",
        range: super::INTERCONNECT_LATENCY_US,
        why: "up to a second",
    };

    pub static EXPERT_PARALLEL: Limit =
        Limit { key: "parallelism.expert", range: super::TENSOR_PARALLEL, why: "tensor x data, the engine's GPUs" };

    pub static EXPERT_TENSOR: Limit = Limit {
        key: "parallelism.expert_tensor",
        range: super::TENSOR_PARALLEL,
        why: "expert x expert_tensor is the engine's GPUs",
    };

    pub static EXPERT_IMBALANCE: Limit = Limit {
        key: "parallelism.expert_imbalance",
        range: super::EXPERT_IMBALANCE,
        why: "1 is uniform routing; the busiest GPU cannot take more than every token",
    };

    pub static ARCH_SIZE: Limit = Limit {
        key: "model.architecture sizes",
        range: super::ARCH_SIZE,
        why: "counted in 32 bits (experts and shared_expert_intermediate_size may be 0); the whole model at most 1e15 parameters",
    };

    pub static CONTEXT_LENGTH: Limit = Limit {
        key: "model.context_length",
        range: super::CONTEXT_LENGTH,
        why: "10x the longest context of any released model",
    };

    pub static PARAMETERS_BILLIONS: Limit = Limit {
        key: "model.weights.parameters_billions",
        range: super::PARAMETERS_BILLIONS,
        why: "a thousand to 100 trillion parameters",
    };

    pub static BYTES_PER_PARAMETER: Limit = Limit {
        key: "model.weights.bytes_per_parameter",
        range: super::BYTES_PER_PARAMETER,
        why: "1-bit weights are 0.125 bytes, fp64 8",
    };

    pub static KV_BYTES_PER_TOKEN: Limit = Limit {
        key: "model.kv_cache.bytes_per_token",
        range: super::KV_BYTES_PER_TOKEN,
        why: "a 405B model needs about 0.5 MB a token",
    };

    pub static BLOCK_SIZE: Limit =
        Limit { key: "model.kv_cache.block_size", range: super::BLOCK_SIZE, why: "vLLM uses 1 to 256" };

    pub static GPU_MEMORY_UTILIZATION: Limit = Limit {
        key: "model.kv_cache.gpu_memory_utilization",
        range: super::GPU_MEMORY_UTILIZATION,
        why: "a share of the GPU's memory",
    };

    pub static WATERMARK: Limit =
        Limit { key: "model.kv_cache.watermark", range: super::WATERMARK, why: "a share of the KV blocks" };

    pub static NUM_BLOCKS: Limit =
        Limit { key: "model.kv_cache.num_blocks", range: super::NUM_BLOCKS, why: "blocks are counted in 32 bits" };

    pub static MAX_BATCH_TOKENS: Limit =
        Limit { key: "scheduler.max_batch_tokens", range: super::MAX_BATCH_TOKENS, why: "the longest context" };

    pub static MAX_NUM_SEQUENCES: Limit = Limit {
        key: "scheduler.max_num_sequences",
        range: super::MAX_NUM_SEQUENCES,
        why: "1000x vLLM's default of 256 (or 1024)",
    };

    pub static STEP_OVERHEAD_MS: Limit =
        Limit { key: "latency.step_overhead_ms", range: super::STEP_OVERHEAD_MS, why: "a minute a step" };

    pub static REQUEST_OVERHEAD_MS: Limit = Limit {
        key: "latency.request_overhead_ms, latency.resend_jitter_ms",
        range: super::REQUEST_OVERHEAD_MS,
        why: "an hour a request",
    };

    pub static FINE_OVERHEAD_US: Limit = Limit {
        key: "latency.per_layer_overhead_us, latency.per_sequence_overhead_us",
        range: super::FINE_OVERHEAD_US,
        why: "a second a layer or a sequence",
    };

    pub static EFFICIENCY: Limit = Limit {
        key: "efficiency.compute, efficiency.memory, efficiency.attention_compute, efficiency.attention_memory",
        range: super::EFFICIENCY,
        why: "a share of the datasheet peak; below 0.1% is a typo",
    };

    pub static GEMM_HALF_TOKENS: Limit = Limit {
        key: "efficiency.gemm_half_tokens",
        range: super::GEMM_HALF_TOKENS,
        why: "a GEMM's half-efficiency point, in tokens; 0 is off",
    };

    pub static ALLREDUCE_EFFICIENCY: Limit = Limit {
        key: "efficiency.allreduce",
        range: super::ALLREDUCE_EFFICIENCY,
        why: "the engine's all-reduce against the link's NCCL bandwidth",
    };

    pub static EXPERT_GEMM_EFFICIENCY: Limit = Limit {
        key: "efficiency.expert_gemm",
        range: super::EXPERT_GEMM_EFFICIENCY,
        why: "the routed experts' GEMMs against the dense GEMMs' rate",
    };

    pub static ALLREDUCE_US: Limit =
        Limit { key: "latency.allreduce_us", range: super::INTERCONNECT_LATENCY_US, why: "as interconnect.latency_us" };

    pub static LAUNCH_OVERHEAD_US: Limit = Limit {
        key: "latency.eager_layer_us, latency.per_expert_us",
        range: super::FINE_OVERHEAD_US,
        why: "a second a layer",
    };

    pub static CUDA_GRAPH_MAX_TOKENS: Limit = Limit {
        key: "scheduler.cuda_graph_max_tokens",
        range: super::CUDA_GRAPH_MAX_TOKENS,
        why: "vLLM captures up to 512 by default",
    };

    pub static SEED: Limit = Limit { key: "workload.seed", range: super::SEED, why: "any 64-bit seed" };

    pub static SPECULATIVE_TOKENS: Limit = Limit {
        key: "speculative.num_speculative_tokens",
        range: super::SPECULATIVE_TOKENS,
        why: "vLLM's examples draft 1 to 7; a step's acceptance draws are laid out for 32",
    };

    pub static LORA_SLOTS: Limit = Limit {
        key: "lora.max_loras",
        range: super::LORA_SLOTS,
        why: "GPU slots, each holding an adapter at max_lora_rank",
    };

    pub static LORA_RANK: Limit = Limit {
        key: "lora.max_lora_rank, lora.rank, lora.adapters[].rank",
        range: super::LORA_RANK,
        why: "vLLM's --max-lora-rank goes to 512",
    };

    pub static LORA_ADAPTERS: Limit =
        Limit { key: "lora.count, lora.adapters", range: super::LORA_ADAPTERS, why: "adapters on one model" };

    pub static LORA_ZIPF: Limit =
        Limit { key: "lora.zipf", range: super::LORA_ZIPF, why: "0 is uniform; 10 gives the first almost all" };

    pub static LORA_LOAD_GBPS: Limit = Limit {
        key: "lora.load_bandwidth_gbps",
        range: super::LORA_LOAD_GBPS,
        why: "GB/s from host memory to a GPU; PCIe 5.0 x16 is 64",
    };

    pub static LORA_BASE_WEIGHT: Limit = Limit {
        key: "lora.base_weight",
        range: super::LORA_BASE_WEIGHT,
        why: "relative to the adapters' weights; 0: every request names an adapter",
    };

    pub static NEW_TOKEN_RATIO: Limit = Limit {
        key: "scheduler.new_token_ratio",
        range: super::NEW_TOKEN_RATIO,
        why: "SGLang caps its ratio at 1; 0 would reserve nothing",
    };

    pub static MAX_PREFILL_TOKENS: Limit = Limit {
        key: "scheduler.max_prefill_tokens",
        range: super::MAX_PREFILL_TOKENS,
        why: "as `scheduler.max_batch_tokens`: the longest context",
    };

    pub static ACCEPTANCE: Limit = Limit {
        key: "speculative.acceptance_rate, speculative.acceptance_by_position",
        range: super::PROBABILITY,
        why: "a probability",
    };

    pub static DRAFT_PARAMETERS_BILLIONS: Limit = Limit {
        key: "speculative.draft_parameters_billions",
        range: super::PARAMETERS_BILLIONS,
        why: "as model.weights.parameters_billions (and no more than the model's)",
    };

    pub static DRAFT_KV_BYTES_PER_TOKEN: Limit = Limit {
        key: "speculative.draft_kv_bytes_per_token",
        range: super::KV_BYTES_PER_TOKEN,
        why: "as model.kv_cache.bytes_per_token",
    };

    pub static SPECULATIVE_SEED: Limit = Limit { key: "speculative.seed", range: super::SEED, why: "any 64-bit seed" };

    pub static REQUESTS: Limit = Limit {
        key: "workload.requests",
        range: super::REQUESTS,
        why: "memory is flat in requests (with run --requests-csv, which keeps every record, at most 10,000,000)",
    };

    pub static DURATION_S: Limit = Limit {
        key: "workload.duration_s",
        range: super::DURATION_S,
        why: "1 ns to the simulated-time limit (about 31.7 years)",
    };

    pub static RATE: Limit = Limit {
        key: "workload.arrivals.{poisson,gamma,constant}.rate",
        range: super::RATE,
        why: "one request in 11.6 days to one a nanosecond (the clock's resolution)",
    };

    pub static BURSTINESS: Limit = Limit {
        key: "workload.arrivals.gamma.burstiness",
        range: super::BURSTINESS,
        why: "`vllm bench serve` uses 0.1 to 10; at 1000 the gaps are already constant within 3%",
    };

    pub static CURVE_RATE: Limit = Limit {
        key: "workload.arrivals.curve.daily.{peak,trough}",
        range: super::CURVE_RATE,
        why: "0 (no arrivals) to one a nanosecond, as workload.arrivals.poisson.rate",
    };

    pub static CURVE_BURSTINESS: Limit = Limit {
        key: "workload.arrivals.curve.burstiness",
        range: super::BURSTINESS,
        why: "as workload.arrivals.gamma.burstiness",
    };

    pub static HOUR: Limit = Limit {
        key: "workload.arrivals.curve.daily.{peak_hour,start_hour}",
        range: super::HOUR,
        why: "an hour of the day, 0 up to 24",
    };

    pub static CONCURRENCY: Limit = Limit {
        key: "workload.arrivals.closed.concurrency",
        range: super::CONCURRENCY,
        why: "users are kept in memory; 1000x a large benchmark",
    };

    pub static THINK_TIME_S: Limit = Limit {
        key: "workload.arrivals.closed.think_time_s",
        range: super::THINK_TIME_S,
        why: "up to the simulated-time limit",
    };

    pub static RAMP_S: Limit = Limit {
        key: "workload.arrivals.closed.ramp_s",
        range: super::THINK_TIME_S,
        why: "up to the simulated-time limit",
    };

    pub static HASH_BLOCK_SIZE: Limit =
        Limit { key: "workload.hash_block_size", range: super::BLOCK_SIZE, why: "as model.kv_cache.block_size" };

    pub static PREFIX_GROUPS: Limit = Limit {
        key: "workload.shared_prefix.groups",
        range: super::PREFIX_GROUPS,
        why: "distinct system prompts; each is drawn per request",
    };

    pub static PREFIX_TOKENS: Limit =
        Limit { key: "workload.shared_prefix.tokens", range: super::TOKENS, why: "counted in 32 bits" };

    pub static SESSION_THINK_S: Limit = Limit {
        key: "workload.sessions.think_s, its uniform bounds",
        range: super::THINK_TIME_S,
        why: "up to the simulated-time limit",
    };

    pub static THINK_MEAN_S: Limit = Limit {
        key: "workload.sessions.think_s.exponential.mean",
        range: super::THINK_MEAN_S,
        why: "a mean of 0 is a fixed 0",
    };

    pub static TOKENS: Limit = Limit {
        key: "token counts: fixed lengths, uniform bounds, min, max, choice values",
        range: super::TOKENS,
        why: "counted in 32 bits",
    };

    pub static LENGTH_MEAN: Limit = Limit {
        key: "normal, lognormal, exponential: mean",
        range: super::LENGTH_MEAN,
        why: "samples are whole tokens, at least 1",
    };

    pub static LENGTH_STD: Limit =
        Limit { key: "normal, lognormal: std", range: super::LENGTH_STD, why: "up to the largest token count" };

    pub static CHOICE_WEIGHT: Limit = Limit {
        key: "choice: weights",
        range: super::CHOICE_WEIGHT,
        why: "relative weights; their sum stays exact enough",
    };

    pub static REPLICAS: Limit = Limit {
        key: "cluster.replicas",
        range: super::REPLICAS,
        why: "each replica is a whole engine in memory; 10,000 is far beyond any fleet behind one router",
    };

    pub static OVERLAP_WEIGHT: Limit = Limit {
        key: "cluster.overlap_weight",
        range: super::OVERLAP_WEIGHT,
        why: "weight of a missed prompt block against a busy block; Dynamo's default is 1",
    };

    pub static KV_TRANSFER_GBPS: Limit = Limit {
        key: "cluster.kv_transfer.bandwidth_gbps",
        range: super::KV_TRANSFER_GBPS,
        why: "GB/s of the prefill-to-decode link; 0 would never hand a request over",
    };

    pub static KV_TRANSFER_MS: Limit =
        Limit { key: "cluster.kv_transfer.latency_ms", range: super::KV_TRANSFER_MS, why: "a minute" };

    pub static AUTOSCALE_REPLICAS: Limit = Limit {
        key: "cluster.autoscale.{min,max}_replicas",
        range: super::REPLICAS,
        why: "as cluster.replicas; at least 1 (no scale to zero)",
    };

    pub static AUTOSCALE_TARGET: Limit = Limit {
        key: "cluster.autoscale.target",
        range: super::AUTOSCALE_TARGET,
        why: "above 0: a target of 0 would ask for infinitely many replicas (kv_use: at most 1)",
    };

    pub static AUTOSCALE_PERIOD_S: Limit = Limit {
        key: "cluster.autoscale.{period_s,window_s,scale_up.period_s,scale_down.period_s}",
        range: super::AUTOSCALE_PERIOD_S,
        why: "a second to a day; Kubernetes' sync period is 15 s; a run may decide at most 10,000,000 times",
    };

    pub static AUTOSCALE_TOLERANCE: Limit = Limit {
        key: "cluster.autoscale.tolerance",
        range: super::AUTOSCALE_TOLERANCE,
        why: "a fraction of the target; 1 would never scale down",
    };

    pub static STABILIZATION_S: Limit = Limit {
        key: "cluster.autoscale.{scale_up,scale_down}.stabilization_s",
        range: super::STABILIZATION_S,
        why: "Kubernetes allows 0 to 3,600 s",
    };

    pub static SCALE_PODS: Limit = Limit {
        key: "cluster.autoscale.{scale_up,scale_down}.pods",
        range: super::SCALE_PODS,
        why: "as cluster.replicas",
    };

    pub static SCALE_PERCENT: Limit = Limit {
        key: "cluster.autoscale.{scale_up,scale_down}.percent",
        range: super::SCALE_PERCENT,
        why: "above 0; a scale-down limit at or past 100% allows removing every replica (min_replicas still holds)",
    };

    pub static COLD_START_S: Limit = Limit {
        key: "cluster.autoscale.cold_start.{engine_start_s,graph_capture_s}",
        range: super::COLD_START_S,
        why: "up to a day",
    };

    pub static LOAD_GBPS: Limit = Limit {
        key: "cluster.autoscale.cold_start.load_gbps",
        range: super::LOAD_GBPS,
        why: "GB/s from the weights' source (a megabyte a second and up); the whole cold start may last at most a week",
    };

    pub static WINDOW_S: Limit = Limit {
        key: "cluster.timeline.window_s",
        range: super::WINDOW_S,
        why: "a second to a day; the windows are kept in memory",
    };

    pub static WINDOW_SLO_MS: Limit = Limit {
        key: "cluster.timeline.slo.{ttft,itl}_{p50,p99}_ms",
        range: super::WINDOW_SLO_MS,
        why: "milliseconds, 0 or more",
    };

    pub static TRACE_ARRIVAL_S: Limit =
        Limit { key: "trace CSV: arrival_s", range: super::ARRIVAL_S, why: "the simulated-time limit" };

    pub static TRACE_TOKENS: Limit =
        Limit { key: "trace CSV: prompt_tokens, output_tokens", range: super::TOKENS, why: "counted in 32 bits" };

    pub static SERVE_FIXED_MS: Limit = Limit {
        key: "serve models file: fixed.ttft_overhead_ms, fixed.itl_ms",
        range: super::STEP_OVERHEAD_MS,
        why: "a minute",
    };

    pub static SERVE_PREFILL_TOKENS_PER_S: Limit = Limit {
        key: "serve models file: fixed.prefill_tokens_per_s",
        range: super::PREFILL_TOKENS_PER_S,
        why: "keeps the time to first token finite",
    };

    pub static OFFLOAD_GIB: Limit = Limit {
        key: "model.kv_cache.offload.{cpu,disk}.gib",
        range: super::OFFLOAD_GIB,
        why: "GiB of KV a tier holds for one engine; a petabyte is beyond any host",
    };

    pub static OFFLOAD_BANDWIDTH_GBPS: Limit = Limit {
        key: "model.kv_cache.offload.{cpu,disk}.bandwidth_gbps",
        range: super::OFFLOAD_BANDWIDTH_GBPS,
        why: "GB/s each GPU loads from the tier; 10 TB/s is far beyond PCIe 6 or NVLink-C2C",
    };

    pub static SERVE_CONTEXT_LENGTH: Limit = Limit {
        key: "serve models file: fixed.context_length",
        range: super::CONTEXT_LENGTH,
        why: "as model.context_length",
    };
}

/// The rows about scenario keys, in the order the page shows them; each
/// is cited by at least one key row (a test checks).
pub static SCENARIO_ROWS: &[&Limit] = &[
    &row::HBM_GIB,
    &row::MEMORY_BANDWIDTH_GBPS,
    &row::PEAK_TFLOPS,
    &row::PEAK_TFLOPS_FP8,
    &row::PEAK_TFLOPS_FP4,
    &row::COST_PER_HOUR,
    &row::INTERCONNECT_BANDWIDTH_GBPS,
    &row::INTERCONNECT_LATENCY_US,
    &row::GPUS_PER_NODE,
    &row::SEND_RECV_BANDWIDTH_GBPS,
    &row::SEND_RECV_LATENCY_US,
    &row::TENSOR_PARALLEL,
    &row::DATA_PARALLEL,
    &row::PIPELINE_PARALLEL,
    &row::EXPERT_PARALLEL,
    &row::EXPERT_TENSOR,
    &row::EXPERT_IMBALANCE,
    &row::ARCH_SIZE,
    &row::CONTEXT_LENGTH,
    &row::PARAMETERS_BILLIONS,
    &row::BYTES_PER_PARAMETER,
    &row::KV_BYTES_PER_TOKEN,
    &row::BLOCK_SIZE,
    &row::GPU_MEMORY_UTILIZATION,
    &row::WATERMARK,
    &row::NUM_BLOCKS,
    &row::MAX_BATCH_TOKENS,
    &row::MAX_NUM_SEQUENCES,
    &row::STEP_OVERHEAD_MS,
    &row::REQUEST_OVERHEAD_MS,
    &row::FINE_OVERHEAD_US,
    &row::EFFICIENCY,
    &row::GEMM_HALF_TOKENS,
    &row::ALLREDUCE_EFFICIENCY,
    &row::EXPERT_GEMM_EFFICIENCY,
    &row::ALLREDUCE_US,
    &row::LAUNCH_OVERHEAD_US,
    &row::CUDA_GRAPH_MAX_TOKENS,
    &row::SPECULATIVE_TOKENS,
    &row::OFFLOAD_GIB,
    &row::OFFLOAD_BANDWIDTH_GBPS,
    &row::ACCEPTANCE,
    &row::NEW_TOKEN_RATIO,
    &row::MAX_PREFILL_TOKENS,
    &row::LORA_SLOTS,
    &row::LORA_RANK,
    &row::LORA_ADAPTERS,
    &row::LORA_ZIPF,
    &row::LORA_BASE_WEIGHT,
    &row::LORA_LOAD_GBPS,
    &row::DRAFT_PARAMETERS_BILLIONS,
    &row::DRAFT_KV_BYTES_PER_TOKEN,
    &row::SPECULATIVE_SEED,
    &row::SEED,
    &row::REQUESTS,
    &row::DURATION_S,
    &row::RATE,
    &row::BURSTINESS,
    &row::CURVE_RATE,
    &row::CURVE_BURSTINESS,
    &row::HOUR,
    &row::CONCURRENCY,
    &row::THINK_TIME_S,
    &row::RAMP_S,
    &row::HASH_BLOCK_SIZE,
    &row::PREFIX_GROUPS,
    &row::PREFIX_TOKENS,
    &row::SESSION_THINK_S,
    &row::THINK_MEAN_S,
    &row::TOKENS,
    &row::LENGTH_MEAN,
    &row::LENGTH_STD,
    &row::CHOICE_WEIGHT,
    &row::REPLICAS,
    &row::OVERLAP_WEIGHT,
    &row::KV_TRANSFER_GBPS,
    &row::KV_TRANSFER_MS,
    &row::AUTOSCALE_REPLICAS,
    &row::AUTOSCALE_TARGET,
    &row::AUTOSCALE_PERIOD_S,
    &row::AUTOSCALE_TOLERANCE,
    &row::STABILIZATION_S,
    &row::SCALE_PODS,
    &row::SCALE_PERCENT,
    &row::COLD_START_S,
    &row::LOAD_GBPS,
    &row::WINDOW_S,
    &row::WINDOW_SLO_MS,
];

/// The rows about other files (a trace, the serve models file).
pub static OTHER_ROWS: &[&Limit] = &[
    &row::TRACE_ARRIVAL_S,
    &row::TRACE_TOKENS,
    &row::SERVE_FIXED_MS,
    &row::SERVE_PREFILL_TOKENS_PER_S,
    &row::SERVE_CONTEXT_LENGTH,
];

/// Every row of the table of input limits: the scenario's, then the other files'.
pub fn table() -> impl Iterator<Item = &'static Limit> {
    SCENARIO_ROWS.iter().chain(OTHER_ROWS).copied()
}

/// The table of input limits, row by row (`docs/scenario.md` holds it;
/// a test keeps the page equal to it).
pub fn readme_rows() -> Vec<String> {
    table()
        .map(|l| {
            let key = if l.key.contains(' ') { l.key.to_string() } else { format!("`{}`", l.key) };
            format!("| {key} | {} | {} |", l.range, l.why)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_state_every_limit_as_the_code_has_it() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/scenario.md")).unwrap();
        for row in readme_rows() {
            assert!(readme.contains(&row), "docs/scenario.md lacks the row\n{row}");
        }
        for (what, value) in [
            ("simulated time", format!("{} s", thousands(MAX_SIM_SECONDS as u64))),
            ("requests", thousands(MAX_REQUESTS)),
            ("summary requests", thousands(MAX_SUMMARY_REQUESTS)),
            ("steps", thousands(MAX_STEPS)),
            ("same-instant", format!("{SAME_INSTANT_ROUNDS} requests per user")),
            ("YAML depth", format!("{MAX_YAML_DEPTH} levels")),
        ] {
            assert!(readme.contains(&value), "docs/scenario.md lacks the {what} limit {value}");
        }
    }

    #[test]
    fn ranges_include_and_exclude_their_ends_as_written() {
        assert_eq!(Range::above(0.0, 1.0).to_string(), "(0, 1]");
        assert_eq!(Range::below(0.0, 1.0).to_string(), "[0, 1)");
        assert_eq!(REQUESTS.to_string(), "whole, 1 to 1,000,000,000");
        assert_eq!(DURATION_S.to_string(), "[1e-9, 1,000,000,000]");
        assert_eq!(CHOICE_WEIGHT.to_string(), "(0, 1e15]");
        assert!(!Range::above(0.0, 1.0).contains(0.0) && Range::above(0.0, 1.0).contains(1.0));
        assert!(Range::below(0.0, 1.0).contains(0.0) && !Range::below(0.0, 1.0).contains(1.0));
        assert!(!RATE.contains(f64::NAN) && !RATE.contains(f64::INFINITY));
        assert!(!REQUESTS.contains(1.5) && REQUESTS.contains(1e9) && !REQUESTS.contains(1_000_000_001.0));
        assert!(SEED.contains_whole(i128::from(u64::MAX)) && !SEED.contains_whole(-1));
    }

    #[test]
    fn numbers_read_as_written() {
        assert_eq!(number(0.001), "0.001");
        assert_eq!(number(1e6), "1,000,000");
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(-2.0), "-2");
        assert_eq!(number(1e-9), "1e-9");
    }

    #[test]
    fn the_time_limit_is_far_from_where_nanoseconds_saturate() {
        // u64 nanoseconds reach 2^64 - 1 ns = 18,446,744,073.7 s. The
        // clock may pass the limit by one step or one gap before the driver
        // sees it; those are checked in saturating arithmetic, so the
        // margin only has to keep the limit itself exact.
        let saturation_s = 18_446_744_073.709_552;
        assert!(MAX_SIM_SECONDS * 10.0 < saturation_s);
        assert_eq!((MAX_SIM_SECONDS * 1e9) as u64, 1_000_000_000_000_000_000);
    }
}
