//! What an unset key means, where the code holds it as a constant: vLLM's
//! defaults where it has one, llmsim's choices elsewhere. The builders
//! fill them in and the key table (`schema.rs`) shows them, so the two
//! cannot differ. Imports nothing, so both can use it.

/// vLLM's defaults where it has one (docs/scenario.md).
pub const DEFAULT_BLOCK_SIZE: u32 = 16;
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;
pub const DEFAULT_WATERMARK: f64 = 0.01;
pub const DEFAULT_MAX_NUM_SEQUENCES: u32 = 256;
/// vLLM V1's default `max_num_batched_tokens` for online serving on large GPUs.
pub const DEFAULT_MAX_BATCH_TOKENS: u32 = 8192;
pub const DEFAULT_BYTES_PER_PARAMETER: f64 = 2.0;
pub const DEFAULT_SEED: u64 = 0;
/// Where vLLM has no such key: llmsim's choices.
pub const DEFAULT_EFFICIENCY: f64 = 1.0;
pub const DEFAULT_TENSOR_PARALLEL: u32 = 1;
/// Off, unlike vLLM V1: a scenario turns it on (docs/prefix-caching.md).
pub const DEFAULT_PREFIX_CACHING: bool = false;
pub const DEFAULT_REPLICAS: u32 = 1;
/// A length distribution's `min`.
pub const DEFAULT_MIN_LENGTH: u32 = 1;
/// `prefix_affinity`'s `overlap_weight`: Dynamo's default `kv_overlap_score_weight`.
pub const DEFAULT_OVERLAP_WEIGHT: f64 = 1.0;

// `cluster.autoscale` and `cluster.timeline` (Kubernetes' HPA defaults).
/// The default HPA sync period (`--horizontal-pod-autoscaler-sync-period`).
pub const DEFAULT_PERIOD_S: f64 = 15.0;
/// The default HPA tolerance (`--horizontal-pod-autoscaler-tolerance`).
pub const DEFAULT_TOLERANCE: f64 = 0.1;
/// The window a `rate` or `ttft_p99_ms` signal is measured over.
pub const DEFAULT_SIGNAL_WINDOW_S: f64 = 60.0;
/// The default scale-down stabilization window.
pub const DEFAULT_DOWN_STABILIZATION_S: f64 = 300.0;
/// The default scale-up limit: 4 replicas a period (or 100%).
pub const DEFAULT_UP_PODS: u32 = 4;
/// The default limit in percent of the replicas at the period's start.
pub const DEFAULT_PERCENT: f64 = 100.0;
/// The default width of a timeline window.
pub const DEFAULT_WINDOW_S: f64 = 60.0;
