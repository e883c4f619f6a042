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
