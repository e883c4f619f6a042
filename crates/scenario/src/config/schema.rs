//! One row per scenario key: what it means, what an unset key means, and
//! the range a number must lie in. The generated key table of
//! `docs/scenario.md` is printed from these rows ([`super::reference`]),
//! validation takes its ranges from them ([`range`]), a `--set` of the
//! wrong shape quotes its row ([`Key::hint`]), and `llmsim explain --key`
//! prints it.
//!
//! Which keys exist is not written here: [`super::keys::all`] traces them
//! from the raw serde structs, so parsing and `--set` cannot disagree. A
//! row's `path` names keys of that list, with `{a,b}` for alternatives
//! (`{,cluster.prefill.,cluster.decode.}hardware.hbm_gib` is the same key
//! at the top and under each pool). Tests hold the two together: every
//! key is covered by exactly one row, every row names only real keys, has
//! a meaning and a default, and every numeric key has a range or says why
//! it has none. A range is cited from the table of input limits
//! ([`crate::limits::row`]), which keeps the reason for it.
//!
//! Adding a key: a field in `raw.rs`, a row here, and its use (the check
//! in a builder with [`range`], the field of the validated `Scenario`).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::defaults::{
    DEFAULT_BLOCK_SIZE, DEFAULT_EFFICIENCY, DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_MAX_BATCH_TOKENS,
    DEFAULT_MAX_NUM_SEQUENCES, DEFAULT_MIN_LENGTH, DEFAULT_OVERLAP_WEIGHT, DEFAULT_PREFIX_CACHING, DEFAULT_REPLICAS,
    DEFAULT_SEED, DEFAULT_TENSOR_PARALLEL, DEFAULT_WATERMARK,
};
use crate::limits::{self, Limit, Range, row};
use crate::trace::MOONCAKE_BLOCK_SIZE;

/// One key (or one family of keys, see the module docs).
pub struct Key {
    /// The key path, `{a,b}` marking alternatives (one may be empty).
    pub path: &'static str,
    /// One sentence: what the key means, in which unit.
    pub doc: &'static str,
    /// What leaving the key out means.
    pub unset: Unset,
    /// The range a number must lie in.
    pub range: Bound,
}

/// What an unset key means: a value (from the code's constant) or words.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Unset {
    Whole(u64),
    Real(f64),
    Flag(bool),
    /// "required", "none: ...", "computed from ...", "the scenario's".
    Words(&'static str),
}

/// The range of a key.
#[derive(Copy, Clone, Debug)]
pub enum Bound {
    /// The range of this row of the table of input limits.
    Limit(&'static Limit),
    /// A range other than its limits row shows, which the row's reason
    /// states (an architecture size that may be 0).
    Within(&'static Range, &'static Limit),
    /// A number with no range of its own, and why.
    Unranged(&'static str),
    /// Not a number (text, a flag, a mapping).
    None,
}

impl Bound {
    pub fn range(&self) -> Option<&'static Range> {
        match self {
            Bound::Limit(l) => Some(&l.range),
            Bound::Within(r, _) => Some(r),
            Bound::Unranged(_) | Bound::None => None,
        }
    }

    /// The limits row that gives the reason for the range.
    pub fn limit(&self) -> Option<&'static Limit> {
        match self {
            Bound::Limit(l) | Bound::Within(_, l) => Some(l),
            Bound::Unranged(_) | Bound::None => None,
        }
    }
}

impl Key {
    /// The key table's "allowed" cell: the range, why a number has none,
    /// or nothing for text, flags and mappings.
    pub fn allowed(&self) -> String {
        match self.range {
            Bound::Unranged(why) => why.to_string(),
            b => b.range().map(|r| r.to_string()).unwrap_or_default(),
        }
    }

    /// The row in a sentence or two, for `--set` errors and `explain --key`:
    /// the range, what unset means, and the meaning.
    pub fn hint(&self) -> String {
        let allowed = self.allowed();
        let range = if allowed.is_empty() { String::new() } else { format!("allowed: {allowed}; ") };
        format!("{range}unset: {}; {}", self.unset.plain(), self.doc)
    }
}

impl Unset {
    /// As a line of text shows it after "unset:": no backticks, no "unset: ".
    pub fn plain(&self) -> String {
        let shown = self.shown().replace('`', "");
        shown.strip_prefix("unset: ").map_or(shown.clone(), str::to_string)
    }

    /// As the key table shows it.
    pub fn shown(&self) -> String {
        match self {
            Unset::Whole(v) => format!("`{v}`"),
            Unset::Real(v) => format!("`{}`", limits::number(*v)),
            Unset::Flag(b) => format!("`{b}`"),
            Unset::Words(w) => (*w).to_string(),
        }
    }
}

const fn key(path: &'static str, doc: &'static str, unset: Unset, range: Bound) -> Key {
    Key { path, doc, unset, range }
}

use Bound::{Limit as In, None as Plain};
use Unset::{Flag, Real, Whole, Words};

const REQUIRED: Unset = Words("required");
const NONE: Unset = Words("none");
const PER_OPERATOR: Unset = Words("none: the roofline form");

/// Every key of a scenario, grouped as `docs/scenario.md` describes them.
pub static KEYS: &[Key] = &[
    key("name", "The scenario's name in reports.", Words("the file name"), Plain),
    key("description", "Free text about the scenario, shown by `explain`.", NONE, Plain),
    key(
        "calibration",
        "A calibration profile by name (`hardware/calibrations/NAME.yml`) or file, relative to the scenario; it fills the `efficiency` and `latency` keys the scenario leaves unset.",
        Words("none: the datasheet roofline"),
        Plain,
    ),
    key(
        "engine",
        "Whose scheduler the engine follows: `vllm` (vLLM V1: chunked prefill, running requests first, preemption by recompute) `trtllm` (TensorRT-LLM's default: a request is admitted only while every admitted request's blocks to completion fit, with its whole prompt in the step, and nothing is preempted) or `sglang` (prefill steps first, never mixed with decode; admission reserves the running requests' remaining output; decode retracts the least advanced request when blocks run out), docs/engine.md, \"The engine's scheduler\".",
        Words("`vllm`"),
        Plain,
    ),
    key(
        "speculative",
        "Speculative decoding as vLLM's `--speculative-config` runs it: a drafter proposes tokens that the model verifies in its next step ([speculative decoding](speculative.md)).",
        Words("none: one token a decode step"),
        Plain,
    ),
    key(
        "speculative.method",
        "The drafter: `ngram` (prompt lookup on the CPU, free), `eagle` or `eagle3` (a one-layer head on the model's hidden states), `mtp` (the checkpoint's multi-token-prediction module; needs `model.architecture.mtp_layers`), or `draft_model` (a smaller model of its own).",
        REQUIRED,
        Plain,
    ),
    key(
        "speculative.num_speculative_tokens",
        "Draft tokens proposed after each sampled token and verified in the next step (`k`); they count in `scheduler.max_batch_tokens`.",
        REQUIRED,
        In(&row::SPECULATIVE_TOKENS),
    ),
    key(
        "speculative.acceptance_rate",
        "The probability that a draft token is accepted given the ones before it were; give it or `acceptance_by_position`.",
        Words("none: acceptance_by_position"),
        In(&row::ACCEPTANCE),
    ),
    key(
        "speculative.acceptance_by_position",
        "vLLM's per-position acceptance rates, one a draft position, not increasing (its log's \"Per-position acceptance rate\"); give it or `acceptance_rate`.",
        Words("none: acceptance_rate"),
        In(&row::ACCEPTANCE),
    ),
    key(
        "speculative.draft_model",
        "The draft model for `draft_model` (a model file by name, with an architecture), or a head of another shape for `eagle`/`eagle3`; it runs at the model's tensor parallelism.",
        Words("none: the head is derived from the model's architecture"),
        Plain,
    ),
    key(
        "speculative.draft_parameters_billions",
        "The drafter's size when it has no architecture (beside a model given as two numbers), in billions of parameters.",
        Words("none: from the draft's architecture"),
        In(&row::DRAFT_PARAMETERS_BILLIONS),
    ),
    key(
        "speculative.draft_kv_bytes_per_token",
        "The drafter's KV bytes a token, all its layers, beside `draft_parameters_billions`.",
        Words("none: from the draft's architecture"),
        In(&row::DRAFT_KV_BYTES_PER_TOKEN),
    ),
    key(
        "speculative.seed",
        "Seed of the acceptance draws (ChaCha8, one stream a request).",
        Words("`workload.seed`, mixed with a constant"),
        In(&row::SPECULATIVE_SEED),
    ),
    key(
        "lora",
        "LoRA adapters on the model, as vLLM's `--enable-lora` serves them: a step uses at most `max_loras` distinct adapters, each copied into a GPU slot from host memory when missing, and the adapters' math adds to the step ([LoRA adapters](lora.md)); needs an architecture without experts or latent attention, `engine: vllm`, no pools and no `speculative`.",
        Words("none: every request runs on the base model"),
        Plain,
    ),
    key(
        "lora.max_loras",
        "GPU slots (vLLM's `--max-loras`): the most distinct adapters one step may use; a waiting request whose adapter would be one more is skipped and keeps its place. Each slot holds an adapter at `max_lora_rank`, set aside from the KV cache.",
        Whole(1),
        In(&row::LORA_SLOTS),
    ),
    key(
        "lora.max_lora_rank",
        "The slots' rank (vLLM's `--max-lora-rank`: 1, 8, 16, 32, 64, 128, 256, 320 or 512); the batched kernels compute at it, and no adapter may be larger.",
        Whole(16),
        In(&row::LORA_RANK),
    ),
    key(
        "lora.load_bandwidth_gbps",
        "GB/s at which an adapter is copied from host memory into a GPU slot (each GPU its share); the step that needs it waits.",
        Real(25.0),
        In(&row::LORA_LOAD_GBPS),
    ),
    key(
        "lora.target_modules",
        "The linear modules each adapter has: any of `q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`.",
        Words("all seven"),
        Plain,
    ),
    key(
        "lora.base_weight",
        "Requests on the base model (no adapter), a weight beside the adapters' weights.",
        Real(0.0),
        In(&row::LORA_BASE_WEIGHT),
    ),
    key(
        "lora.adapters",
        "The adapters, `{name, rank, weight}` each (rank 1 to `max_lora_rank`, default `max_lora_rank`; weight above 0, default 1): a request names one by `name` (`model` in serve), drawn by weight from its id; give this or `count`.",
        Words("none: `count`"),
        Plain,
    ),
    key(
        "lora.count",
        "Instead of `adapters`: this many adapters, `lora-1` to `lora-N`, all of rank `rank`.",
        Words("none: `adapters`"),
        In(&row::LORA_ADAPTERS),
    ),
    key("lora.rank", "With `count`: the adapters' rank.", Whole(16), In(&row::LORA_RANK)),
    key(
        "lora.zipf",
        "With `count`: adapter k's weight is `k^-zipf` (0: all equally popular).",
        Real(0.0),
        In(&row::LORA_ZIPF),
    ),
    // The GPU, at the top and under each pool.
    key(
        "{,cluster.prefill.,cluster.decode.}hardware",
        "The GPU: a profile name from `hardware/` or an inline mapping of its figures; under a pool, it replaces the scenario's.",
        Words("required (a pool: the scenario's)"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.name",
        "The GPU's name in reports.",
        Words("the profile's name; `inline` for a mapping"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.description",
        "Free text about the profile, such as its sources.",
        NONE,
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.hbm_gib",
        "Memory of one GPU, in GiB.",
        REQUIRED,
        In(&row::HBM_GIB),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.memory_bandwidth_gbps",
        "Memory bandwidth of one GPU, in GB/s (10^9 bytes a second), from the datasheet.",
        REQUIRED,
        In(&row::MEMORY_BANDWIDTH_GBPS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.peak_tflops",
        "Dense 16-bit tensor TFLOPS of one GPU (without sparsity), from the datasheet.",
        REQUIRED,
        In(&row::PEAK_TFLOPS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.peak_tflops_fp8",
        "Dense FP8 TFLOPS of one GPU, used for FP8 and INT8 weights (or 1-byte weights without a dtype) of a model with an architecture.",
        Words("none: `peak_tflops`"),
        In(&row::PEAK_TFLOPS_FP8),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.peak_tflops_fp4",
        "Dense FP4 TFLOPS of one GPU (Blackwell, MI355X), used for `nvfp4` and `mxfp4` weights of a model with an architecture.",
        Words("none: `peak_tflops` (FP4 weights run W4A16)"),
        In(&row::PEAK_TFLOPS_FP4),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.cost_per_hour",
        "Price of one GPU-hour, for the cost per million tokens (`llmsim capacity`).",
        Words("none: no cost figures"),
        In(&row::COST_PER_HOUR),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.interconnect",
        "The all-reduce link between the GPUs of one engine, needed when `parallelism.tensor` is above 1.",
        Words("none: no tensor parallelism"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.interconnect.bandwidth_gbps",
        "The all-reduce's bus bandwidth in GB/s: one figure, or one per GPU count (`{2: 248, 4: 289}`, each count from 1 to 4,096).",
        Words("required in `interconnect`"),
        In(&row::INTERCONNECT_BANDWIDTH_GBPS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.interconnect.latency_us",
        "The fixed time of one all-reduce in microseconds: one figure, or one per GPU count.",
        Words("required in `interconnect`"),
        In(&row::INTERCONNECT_LATENCY_US),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.gpus_per_node",
        "GPUs one node's NVLink joins: pipeline stages past it hand off over `network`.",
        Whole(8),
        In(&row::GPUS_PER_NODE),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.send_recv",
        "Point-to-point sends between two GPUs of one node (NVLink), for pipeline hand-offs: time = latency_us + bytes / bandwidth_gbps.",
        Words("none: no pipeline inside a node"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.send_recv.bandwidth_gbps",
        "Bandwidth of one send in GB/s (nccl-tests sendrecv_perf's busbw).",
        Words("required in `send_recv`"),
        In(&row::SEND_RECV_BANDWIDTH_GBPS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.send_recv.latency_us",
        "The fixed time of one send in microseconds.",
        Words("required in `send_recv`"),
        In(&row::SEND_RECV_LATENCY_US),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.network",
        "Point-to-point sends between GPUs of two nodes (one GPU's InfiniBand or RoCE NIC), for pipeline hand-offs across nodes.",
        Words("none: no pipeline across nodes"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.network.bandwidth_gbps",
        "Bandwidth of one GPU's NIC in GB/s (400 Gb/s is 50).",
        Words("required in `network`"),
        In(&row::SEND_RECV_BANDWIDTH_GBPS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.network.latency_us",
        "The fixed time of one send between nodes in microseconds.",
        Words("required in `network`"),
        In(&row::SEND_RECV_LATENCY_US),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}hardware.kernels",
        "Measured kernel times (all-reduce, GEMM; `llmsim kernels`) that the per-operator form reads instead of its formulas.",
        Words("none: the formulas"),
        Plain,
    ),
    // The model.
    key("model", "The model: a name from `models/` (short for `model.preset`) or a mapping.", REQUIRED, Plain),
    key(
        "model.name",
        "The model's name in reports.",
        Words("the preset's, or the HF config's folder; else `model`"),
        Plain,
    ),
    key(
        "model.preset",
        "A model file by name (`models/NAME.yml`), giving the architecture and context length; one of `preset`, `hf_config`, `architecture`.",
        NONE,
        Plain,
    ),
    key(
        "model.hf_config",
        "A Hugging Face `config.json`, relative to the scenario, giving the architecture and context length.",
        NONE,
        Plain,
    ),
    key(
        "model.context_length",
        "The longest prompt plus output a request may have, in tokens (vLLM's `max_model_len`); a longer request is rejected on arrival.",
        Words("required (a preset or HF config gives `max_position_embeddings`)"),
        In(&row::CONTEXT_LENGTH),
    ),
    key(
        "model.architecture",
        "The model's shapes, named as a Hugging Face `config.json` names them ([deployments](deployments.md)).",
        Words("none: the preset's or HF config's, else the weights and KV sizes as given"),
        Plain,
    ),
    key("model.architecture.layers", "Transformer layers (`num_hidden_layers`).", REQUIRED, In(&row::ARCH_SIZE)),
    key(
        "model.architecture.hidden_size",
        "Width of the residual stream (`hidden_size`).",
        REQUIRED,
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.attention_heads",
        "Query heads of a layer (`num_attention_heads`).",
        REQUIRED,
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.kv_heads",
        "Key/value heads of a layer (`num_key_value_heads`); fewer than the query heads is grouped-query attention.",
        Words("`attention_heads`"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.head_dim",
        "Width of one head (`head_dim`).",
        Words("`hidden_size / attention_heads`"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.intermediate_size",
        "MLP width of a dense layer (`intermediate_size`).",
        Words("required for a dense model"),
        In(&row::ARCH_SIZE),
    ),
    key("model.architecture.vocab_size", "Tokens in the vocabulary (`vocab_size`).", REQUIRED, In(&row::ARCH_SIZE)),
    key(
        "model.architecture.tie_word_embeddings",
        "Whether the output projection shares the embedding's weights (`tie_word_embeddings`).",
        Flag(false),
        Plain,
    ),
    key(
        "model.architecture.experts",
        "Experts of a mixture-of-experts layer (`num_local_experts`); 0 is a dense model.",
        Whole(0),
        Bound::Within(&limits::ARCH_SIZE_OR_ZERO, &row::ARCH_SIZE),
    ),
    key(
        "model.architecture.experts_per_token",
        "Experts each token is routed to (`num_experts_per_tok`).",
        Words("required with experts"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.expert_intermediate_size",
        "MLP width of one expert (`moe_intermediate_size`).",
        Words("`intermediate_size`"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.shared_expert_intermediate_size",
        "MLP width of the shared expert every token also uses (`shared_expert_intermediate_size`, or `n_shared_experts x moe_intermediate_size`); 0 is none.",
        Whole(0),
        Bound::Within(&limits::ARCH_SIZE_OR_ZERO, &row::ARCH_SIZE),
    ),
    key(
        "model.architecture.first_dense_layers",
        "Leading layers of a mixture of experts with a dense MLP of `intermediate_size` instead of experts (`first_k_dense_replace`).",
        Whole(0),
        Bound::Within(&limits::ARCH_SIZE_OR_ZERO, &row::ARCH_SIZE),
    ),
    key(
        "model.architecture.mtp_layers",
        "Multi-token-prediction modules (`num_nextn_predict_layers`, DeepSeek's layout): their weights are counted and shown by `explain`, not loaded (vLLM, SGLang and TensorRT-LLM load them only to draft tokens for speculative decoding).",
        Whole(0),
        Bound::Within(&limits::ARCH_SIZE_OR_ZERO, &row::ARCH_SIZE),
    ),
    key(
        "model.architecture.kv_lora_rank",
        "Width of the latent of multi-head latent attention (`kv_lora_rank`): with it the KV cache holds `kv_lora_rank + qk_rope_head_dim` elements a token a layer, on every GPU.",
        Words("none: grouped-query attention"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.q_lora_rank",
        "Rank of MLA's query bottleneck (`q_lora_rank`); 0 is none.",
        Whole(0),
        Bound::Within(&limits::ARCH_SIZE_OR_ZERO, &row::ARCH_SIZE),
    ),
    key(
        "model.architecture.qk_nope_head_dim",
        "MLA: the part of a query and key head without rotary embedding (`qk_nope_head_dim`).",
        Words("required with kv_lora_rank"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.qk_rope_head_dim",
        "MLA: the rotary part of a query and key head, one key a token shared by the heads (`qk_rope_head_dim`).",
        Words("required with kv_lora_rank"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.v_head_dim",
        "MLA: the width of a value head (`v_head_dim`).",
        Words("required with kv_lora_rank"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.sliding_window",
        "Tokens a sliding-window layer attends to and keeps (`sliding_window`); needs sliding_layers.",
        Words("none: every layer attends to the whole context"),
        In(&row::ARCH_SIZE),
    ),
    key(
        "model.architecture.sliding_layers",
        "How many layers use the sliding window (the `sliding_attention` entries of `layer_types`; all layers for Mistral-7B v0.1).",
        Words("none"),
        Bound::Within(&limits::ARCH_SIZE_OR_ZERO, &row::ARCH_SIZE),
    ),
    key(
        "model.architecture.attention_bias",
        "Biases on the Q, K, V and O projections (`attention_bias`).",
        Flag(false),
        Plain,
    ),
    key(
        "model.architecture.mlp_bias",
        "Biases on the MLPs, experts and router (gpt-oss has them).",
        Flag(false),
        Plain,
    ),
    key(
        "model.architecture.attention_sinks",
        "A learned sink logit per head a layer (gpt-oss): weights only, no KV.",
        Flag(false),
        Plain,
    ),
    key("model.weights", "The size of the weights.", Words("computed from the architecture"), Plain),
    key(
        "model.weights.parameters_billions",
        "Parameters in billions; beside an architecture, an override of the count it gives.",
        Words("required without an architecture (computed from it)"),
        In(&row::PARAMETERS_BILLIONS),
    ),
    key(
        "model.weights.bytes_per_parameter",
        "Bytes of one weight: 2 for 16-bit, 1 for FP8, 0.5 for INT4; beside `dtype`, an override of the format's bytes.",
        Words("the dtype's bytes, else 2"),
        In(&row::BYTES_PER_PARAMETER),
    ),
    key(
        "model.weights.dtype",
        "The weights' format: `bf16`, `fp16`, `fp8`, `int8`, `int4` (W4A16, AWQ/GPTQ), `nvfp4` or `mxfp4`; sets the bytes a weight (scales included) and the peak their GEMMs run at; needs an architecture.",
        Words("none: read from bytes_per_parameter (1 byte is FP8, else 16-bit)"),
        Plain,
    ),
    key(
        "model.weights.expert_dtype",
        "The routed experts' format when it differs from the rest's (gpt-oss: `mxfp4` experts, 16-bit attention); same names as `dtype`.",
        Words("none: the experts are stored as the rest"),
        Plain,
    ),
    key(
        "model.kv_cache",
        "The KV cache: its size per token, its blocks and the memory it gets.",
        Words("vLLM's"),
        Plain,
    ),
    key(
        "model.kv_cache.bytes_per_token",
        "KV bytes of one token, all layers, K and V; beside an architecture, an override.",
        Words("required without an architecture (computed from it)"),
        In(&row::KV_BYTES_PER_TOKEN),
    ),
    key(
        "model.kv_cache.dtype",
        "The KV cache's element type, as vLLM's `--kv-cache-dtype` (`auto` is the model's 16 bits, `fp8` one byte); needs an architecture.",
        Words("`auto` with an architecture"),
        Plain,
    ),
    key(
        "model.kv_cache.block_size",
        "Tokens of one KV block (vLLM's `--block-size`).",
        Whole(DEFAULT_BLOCK_SIZE as u64),
        In(&row::BLOCK_SIZE),
    ),
    key(
        "model.kv_cache.gpu_memory_utilization",
        "The share of each GPU's memory the engine may use for weights, activations and KV (vLLM's `--gpu-memory-utilization`).",
        Real(DEFAULT_GPU_MEMORY_UTILIZATION),
        In(&row::GPU_MEMORY_UTILIZATION),
    ),
    key(
        "model.kv_cache.watermark",
        "The share of KV blocks kept free when admitting a request, so running requests can grow (vLLM's watermark).",
        Real(DEFAULT_WATERMARK),
        In(&row::WATERMARK),
    ),
    key(
        "model.kv_cache.num_blocks",
        "KV blocks of one engine as measured (vLLM's \"# GPU blocks\"), overriding the formula.",
        Words("computed from the memory left after the weights"),
        In(&row::NUM_BLOCKS),
    ),
    key(
        "model.kv_cache.prefix_caching",
        "Identify KV blocks by content and share them between requests (vLLM's `--enable-prefix-caching`, on by default in V1; [prefix caching](prefix-caching.md)).",
        Flag(DEFAULT_PREFIX_CACHING),
        Plain,
    ),
    key(
        "model.kv_cache.offload",
        "KV offload tiers below the prefix cache, as LMCache and vLLM's offloading connector add them: every cached block is written through to each tier, and an admission loads the blocks after its GPU hit that a tier holds instead of computing them ([KV offload](offload.md)); needs `prefix_caching`, `engine: vllm` and no pools.",
        NONE,
        Plain,
    ),
    key(
        "model.kv_cache.offload.{cpu,disk}",
        "A tier: host memory (`cpu`, looked up first) or local disk (`disk`), each `{gib, bandwidth_gbps}`.",
        NONE,
        Plain,
    ),
    key(
        "model.kv_cache.offload.{cpu,disk}.gib",
        "GiB of KV the tier holds for one engine (all of its GPUs' shares); at least one block.",
        REQUIRED,
        In(&row::OFFLOAD_GIB),
    ),
    key(
        "model.kv_cache.offload.{cpu,disk}.bandwidth_gbps",
        "GB/s each GPU loads its share of a block from the tier at (PCIe 5 x16 gives about 50, a local NVMe drive 3 to 7).",
        REQUIRED,
        In(&row::OFFLOAD_BANDWIDTH_GBPS),
    ),
    // One engine, at the top and under each pool.
    key(
        "{,cluster.prefill.,cluster.decode.}parallelism",
        "How one engine splits the model over its GPUs; under a pool, it replaces the scenario's.",
        Words("one GPU (a pool: the scenario's)"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}parallelism.tensor",
        "GPUs one engine splits each layer over (vLLM's `--tensor-parallel-size`); above 1 it needs an architecture and the hardware's interconnect.",
        Whole(DEFAULT_TENSOR_PARALLEL as u64),
        In(&row::TENSOR_PARALLEL),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}parallelism.data",
        "Attention data-parallel ranks inside one engine, each with its own batch and KV (vLLM's `--data-parallel-size` beside expert parallelism, SGLang's DP attention); a mixture of experts only (a dense model's is `cluster.replicas`).",
        Whole(1),
        In(&row::DATA_PARALLEL),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}parallelism.expert",
        "GPUs the routed experts spread over, whole (expert parallelism); `tensor x data` when used, as vLLM's `--enable-expert-parallel`.",
        Whole(1),
        In(&row::EXPERT_PARALLEL),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}parallelism.expert_tensor",
        "GPUs each expert-parallel group splits its experts over (MoE tensor parallelism inside expert parallelism: TensorRT-LLM's `moe_tp_size`, SGLang's `--tp` over `--ep`); `expert x expert_tensor = tensor x data`, with data 1.",
        Whole(1),
        In(&row::EXPERT_TENSOR),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}parallelism.expert_imbalance",
        "The busiest GPU's routed tokens over the mean (1: uniform routing); scales the experts' FLOPs and the all-to-all bytes a step waits for.",
        Real(1.0),
        In(&row::EXPERT_IMBALANCE),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}parallelism.pipeline",
        "Pipeline stages, each of `parallelism.tensor` GPUs holding `layers / pipeline` of the layers, with as many micro-batches in flight (vLLM's `--pipeline-parallel-size`); hand-offs over `hardware.send_recv` inside a node, `hardware.network` between nodes; not beside `data` or `expert`.",
        Whole(1),
        In(&row::PIPELINE_PARALLEL),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler",
        "The engine's batch limits; under a pool, merged over the scenario's key by key.",
        Words("vLLM's"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.max_batch_tokens",
        "Tokens one step may schedule (vLLM's `max_num_batched_tokens`); a longer prompt is prefilled in chunks.",
        Whole(DEFAULT_MAX_BATCH_TOKENS as u64),
        In(&row::MAX_BATCH_TOKENS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.max_num_sequences",
        "Requests one step may hold (vLLM's `max_num_seqs`).",
        Whole(DEFAULT_MAX_NUM_SEQUENCES as u64),
        In(&row::MAX_NUM_SEQUENCES),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.cuda_graph_max_tokens",
        "Per-operator form: the largest step, in tokens, run as a CUDA graph (vLLM's `max_cudagraph_capture_size`); larger steps pay `latency.eager_layer_us`.",
        Words("vLLM's: `min(2 * max_num_sequences, 512, max_batch_tokens)`"),
        In(&row::CUDA_GRAPH_MAX_TOKENS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.policy",
        "The order of the waiting queue and of preemption (vLLM's `--scheduling-policy`): `fcfs`, or `priority` (waiting requests by their class's priority, then arrival; a preemption takes the lowest priority first), [priorities](priorities.md); `priority` needs `engine: vllm` and no pools.",
        Words("`fcfs`"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.new_token_ratio",
        "`engine: sglang` only: SGLang reserves this share of each running request's remaining output at admission (its `new_token_ratio`: `0.7 x schedule_conservativeness` at start, decaying over 600 decode steps to 0.14 of that, reset after a retraction), retracting when decode runs out of blocks ([the engine](engine.md#the-engines-scheduler-engine-sglang)). SGLang does so with its radix cache on whatever the clients send; with the cache off (`prefix_caching: false`) and clients that send `ignore_eos` it reserves the remaining output whole.",
        Words(
            "0.7 with `prefix_caching: true` (SGLang's radix cache, its default); without it, none: the remaining output reserved whole (`--disable-radix-cache` with clients that send `ignore_eos`, as SGLang's `bench_serving` and `vllm bench serve` do)",
        ),
        In(&row::NEW_TOKEN_RATIO),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.mixed_chunk",
        "`engine: sglang` only: SGLang's `--enable-mixed-chunk`: a prefill step also decodes every running request (but the one being chunked), whose tokens come out of the step's chunk and `max_prefill_tokens` first ([the engine](engine.md#the-engines-scheduler-engine-sglang)).",
        Words("`false`: prefill steps hold prompts only (SGLang's default)"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.max_prefill_tokens",
        "`engine: sglang` only: SGLang's `--max-prefill-tokens`, the prompt tokens one prefill step takes (the step's chunk, `max_batch_tokens`, bounds it too).",
        Whole(llmsim_core::engine::sglang::MAX_PREFILL_TOKENS as u64),
        In(&row::MAX_PREFILL_TOKENS),
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.capacity_scheduler_policy",
        "`engine: trtllm` only: TensorRT-LLM's capacity scheduler policy (its `scheduler_config.capacity_scheduler_policy`, in any case): `GUARANTEED_NO_EVICT` (admit while every admitted request's blocks to completion fit; nothing paused), `MAX_UTILIZATION` (admit while the next step's blocks fit; a running request's growth that does not fit pauses the newest started request, recomputed later) or `STATIC_BATCH` (as the first, admitting only while no request is generating), [the engine](engine.md#the-engines-scheduler-engine-trtllm).",
        Words("`GUARANTEED_NO_EVICT`"),
        Plain,
    ),
    key(
        "{,cluster.prefill.,cluster.decode.}scheduler.context_chunking_policy",
        "`engine: trtllm` only: chunked prefill on (TensorRT-LLM's `enable_chunked_prefill`) with this `context_chunking_policy`: `FIRST_COME_FIRST_SERVED` (prompts in order take what the decodes leave, a cut chunk rounded down to whole KV blocks) or `EQUAL_PROGRESS` (the prompts take a block's worth each in turn), [the engine](engine.md#the-engines-scheduler-engine-trtllm).",
        Words("none: chunked prefill off, every prompt whole in one step"),
        Plain,
    ),
    // Time terms.
    key("latency", "Fixed times added to steps and requests.", Words("0 each"), Plain),
    key(
        "latency.step_overhead_ms",
        "Time added to every engine step (scheduling, kernel launches), in ms.",
        Real(0.0),
        In(&row::STEP_OVERHEAD_MS),
    ),
    key(
        "latency.request_overhead_ms",
        "Time from a request's arrival to its reaching the engine (API server, tokenization), in ms.",
        Real(0.0),
        In(&row::REQUEST_OVERHEAD_MS),
    ),
    key(
        "latency.per_layer_overhead_us",
        "Time added to every step per layer of the model, in microseconds (needs an architecture).",
        Real(0.0),
        In(&row::FINE_OVERHEAD_US),
    ),
    key(
        "latency.per_sequence_overhead_us",
        "Time added to a step per request it holds, in microseconds.",
        Real(0.0),
        In(&row::FINE_OVERHEAD_US),
    ),
    key(
        "latency.resend_jitter_ms",
        "Closed loops: each request leaves a seeded uniform draw below this many ms later than its think time says, so users do not stay in lockstep.",
        Real(0.0),
        In(&row::REQUEST_OVERHEAD_MS),
    ),
    key(
        "latency.allreduce_us",
        "Per-operator form: the fixed time of the engine's own all-reduce, in microseconds; a message takes the faster of it and NCCL's.",
        Words("none: NCCL's only"),
        In(&row::ALLREDUCE_US),
    ),
    key(
        "latency.eager_layer_us",
        "Per-operator form: host time per layer of a step run without a CUDA graph, in microseconds.",
        PER_OPERATOR,
        In(&row::LAUNCH_OVERHEAD_US),
    ),
    key(
        "latency.per_expert_us",
        "Per-operator form: the least time of one expert's GEMMs in a layer, in microseconds.",
        PER_OPERATOR,
        In(&row::LAUNCH_OVERHEAD_US),
    ),
    key(
        "efficiency",
        "Calibration factors: the share of the datasheet peaks a step reaches.",
        Words("1 each: the datasheet roofline"),
        Plain,
    ),
    key(
        "efficiency.compute",
        "The share of the datasheet TFLOPS a step's matrix work reaches.",
        Real(DEFAULT_EFFICIENCY),
        In(&row::EFFICIENCY),
    ),
    key(
        "efficiency.memory",
        "The share of the datasheet bandwidth a step's reads (weights and KV) reach.",
        Real(DEFAULT_EFFICIENCY),
        In(&row::EFFICIENCY),
    ),
    key(
        "efficiency.gemm_half_tokens",
        "Per-operator form: the tokens at which a GEMM reaches half of `efficiency.compute` (0: every GEMM reaches all of it).",
        PER_OPERATOR,
        In(&row::GEMM_HALF_TOKENS),
    ),
    key(
        "efficiency.attention_compute",
        "Per-operator form: the share of the 16-bit peak attention's FLOPs reach.",
        PER_OPERATOR,
        In(&row::EFFICIENCY),
    ),
    key(
        "efficiency.attention_memory",
        "Per-operator form: the share of the bandwidth attention's KV reads reach.",
        PER_OPERATOR,
        In(&row::EFFICIENCY),
    ),
    key(
        "efficiency.allreduce",
        "Per-operator form: the engine's all-reduce bandwidth as a multiple of the link's NCCL bus bandwidth.",
        PER_OPERATOR,
        In(&row::ALLREDUCE_EFFICIENCY),
    ),
    key(
        "efficiency.expert_gemm",
        "Per-operator form: the routed experts' GEMMs' rate as a multiple of the dense GEMMs' when the experts are \
         narrower than 16 bits (their analytic times are divided by it; 1: the same).",
        PER_OPERATOR,
        In(&row::EXPERT_GEMM_EFFICIENCY),
    ),
    // The workload.
    key("workload", "The requests: when they arrive and how long they are.", REQUIRED, Plain),
    key(
        "workload.seed",
        "Seed of the arrival gaps and lengths (ChaCha8, one stream each).",
        Whole(DEFAULT_SEED),
        In(&row::SEED),
    ),
    key(
        "workload.arrivals",
        "When requests arrive: one of `poisson`, `gamma`, `constant`, `closed`, `trace` or `curve`.",
        REQUIRED,
        Plain,
    ),
    key(
        "workload.arrivals.{poisson,gamma,constant}",
        "An open loop at a mean rate: exponential gaps (`poisson`), gamma gaps (`gamma`) or equal gaps (`constant`), from t = 0.",
        NONE,
        Plain,
    ),
    key(
        "workload.arrivals.{poisson,gamma,constant}.rate",
        "The mean arrival rate, in requests a second.",
        REQUIRED,
        In(&row::RATE),
    ),
    key(
        "workload.arrivals.gamma.burstiness",
        "The gamma distribution's shape, as `vllm bench serve --burstiness`: below 1 burstier than Poisson, 1 Poisson, above 1 more even.",
        REQUIRED,
        In(&row::BURSTINESS),
    ),
    key(
        "workload.arrivals.closed",
        "A closed loop: users that each send a request, wait for its end and their think time, and send again.",
        NONE,
        Plain,
    ),
    key(
        "workload.arrivals.closed.concurrency",
        "Users of the closed loop, each with at most one request in flight (`vllm bench serve --max-concurrency`).",
        REQUIRED,
        In(&row::CONCURRENCY),
    ),
    key(
        "workload.arrivals.closed.think_time_s",
        "Seconds a user waits after a request ends (or is rejected) before sending the next.",
        Real(0.0),
        In(&row::THINK_TIME_S),
    ),
    key(
        "workload.arrivals.closed.ramp_s",
        "Seconds over which the users start: user u of N first sends at u * ramp_s / N.",
        Real(0.0),
        In(&row::RAMP_S),
    ),
    key(
        "workload.arrivals.trace",
        "A trace to replay (a CSV, or a Mooncake-style JSONL file), relative to the scenario: each request's arrival and lengths.",
        NONE,
        Plain,
    ),
    key(
        "workload.arrivals.curve",
        "An open loop whose rate changes over time: one of `points`, `steps` or `daily`, times the `bursts` that cover an instant; Poisson arrivals at that rate (gamma with `burstiness`), the first when the rate's integral reaches the first gap ([clusters](clusters.md#a-rate-that-changes-over-time)).",
        NONE,
        Plain,
    ),
    key(
        "workload.arrivals.curve.points",
        "`[[time_s, rate], ...]`, in time order from `[0, rate]`: straight lines between the points, the last rate holding after them (requests a second, 0 to 1e9).",
        Words("none: `steps` or `daily`"),
        Plain,
    ),
    key(
        "workload.arrivals.curve.steps",
        "`[[time_s, rate], ...]`, in time order from `[0, rate]`: each rate holds until the next point's time.",
        Words("none: `points` or `daily`"),
        Plain,
    ),
    key(
        "workload.arrivals.curve.daily",
        "A daily wave: a cosine from `trough` to `peak` requests a second, highest at `peak_hour`, the run starting at `start_hour` (sampled as straight lines a minute long); needs `workload.duration_s`, at most 366 days.",
        Words("none: `points` or `steps`"),
        Plain,
    ),
    key(
        "workload.arrivals.curve.daily.peak",
        "The wave's highest rate, in requests a second.",
        REQUIRED,
        In(&row::CURVE_RATE),
    ),
    key(
        "workload.arrivals.curve.daily.trough",
        "The wave's lowest rate, twelve hours from the peak (at most `peak`).",
        REQUIRED,
        In(&row::CURVE_RATE),
    ),
    key("workload.arrivals.curve.daily.peak_hour", "The hour of the day of the peak.", REQUIRED, In(&row::HOUR)),
    key(
        "workload.arrivals.curve.daily.start_hour",
        "The hour of the day at which the run starts.",
        Real(0.0),
        In(&row::HOUR),
    ),
    key(
        "workload.arrivals.curve.bursts",
        "`[{start_s, duration_s, factor}, ...]`: the rate times `factor` (0, an outage, to 1e6) from `start_s` for `duration_s` seconds; overlapping bursts multiply.",
        Words("none"),
        Plain,
    ),
    key(
        "workload.arrivals.curve.burstiness",
        "Gamma gaps of this shape in the curve's rescaled time, as `workload.arrivals.gamma.burstiness`: below 1 burstier than Poisson.",
        Words("none: Poisson"),
        In(&row::CURVE_BURSTINESS),
    ),
    key(
        "workload.requests",
        "Requests to issue (of a trace, the first this many rows).",
        Words("unset: `duration_s` ends the run (one of the two, except for a trace)"),
        In(&row::REQUESTS),
    ),
    key(
        "workload.duration_s",
        "Seconds of arrivals: no request arrives at or after it.",
        Words("unset: `requests` ends the run"),
        In(&row::DURATION_S),
    ),
    key(
        "workload.hash_block_size",
        "JSONL traces only: tokens per `hash_ids` entry.",
        Whole(MOONCAKE_BLOCK_SIZE as u64),
        In(&row::HASH_BLOCK_SIZE),
    ),
    key(
        "workload.shared_prefix",
        "Every request starts with one of `groups` system prompts of `tokens` tokens; `prompt_tokens` is the rest.",
        NONE,
        Plain,
    ),
    key(
        "workload.shared_prefix.groups",
        "Distinct system prompts, one drawn per request.",
        REQUIRED,
        In(&row::PREFIX_GROUPS),
    ),
    key("workload.shared_prefix.tokens", "Tokens of each system prompt.", REQUIRED, In(&row::PREFIX_TOKENS)),
    key(
        "workload.classes",
        "Request classes, a list of `{name, weight, priority}`: each request is one class, drawn by weight (default 1) from its own seeded stream, or named by a trace's `class` column; it carries the class's vLLM priority (default 0, lower first) and results report each class ([priorities](priorities.md)); 1 to 64 classes.",
        NONE,
        Plain,
    ),
    key(
        "workload.sessions",
        "Multi-turn conversations: each turn's prompt holds the conversation so far ([prefix caching](prefix-caching.md)).",
        NONE,
        Plain,
    ),
    key(
        "workload.sessions.think_s",
        "Seconds between a turn's answer and the next turn: a number, `uniform: [lo, hi]` or `exponential: {mean}`.",
        Real(0.0),
        In(&row::SESSION_THINK_S),
    ),
    key(
        "workload.sessions.think_s.uniform",
        "`[lo, hi]`: think times drawn uniformly between the two, in seconds.",
        REQUIRED,
        In(&row::SESSION_THINK_S),
    ),
    key("workload.sessions.think_s.exponential", "Exponentially distributed think times.", NONE, Plain),
    key(
        "workload.sessions.think_s.exponential.mean",
        "The mean think time, in seconds.",
        REQUIRED,
        In(&row::THINK_MEAN_S),
    ),
    // Lengths: a whole number or a distribution.
    key(
        "workload.prompt_tokens",
        "Prompt tokens of each request (beside a shared prefix, the rest): a whole number or a distribution.",
        Words("required (not for traces)"),
        In(&row::TOKENS),
    ),
    key(
        "workload.output_tokens",
        "Tokens generated for each request: a whole number or a distribution.",
        Words("required (not for traces)"),
        In(&row::TOKENS),
    ),
    key(
        "workload.sessions.turns",
        "Requests (turns) of each conversation: a whole number or a distribution.",
        REQUIRED,
        In(&row::TOKENS),
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.uniform",
        "`[lo, hi]`: lengths drawn uniformly between the two, both included.",
        REQUIRED,
        In(&row::TOKENS),
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.{normal,lognormal,exponential}",
        "Lengths from a normal, lognormal or exponential distribution, rounded and clamped to `[min, max]`.",
        NONE,
        Plain,
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.{normal,lognormal,exponential}.mean",
        "The mean of the lengths themselves.",
        REQUIRED,
        In(&row::LENGTH_MEAN),
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.{normal,lognormal}.std",
        "The standard deviation of the lengths themselves.",
        REQUIRED,
        In(&row::LENGTH_STD),
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.{normal,lognormal,exponential}.min",
        "The shortest length drawn: shorter draws become it.",
        Whole(DEFAULT_MIN_LENGTH as u64),
        In(&row::TOKENS),
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.{normal,lognormal,exponential}.max",
        "The longest length drawn: longer draws become it.",
        Words("none"),
        In(&row::TOKENS),
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.choice",
        "Lengths drawn from a list of values, with optional weights.",
        NONE,
        Plain,
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.choice.values",
        "The lengths to draw from.",
        REQUIRED,
        In(&row::TOKENS),
    ),
    key(
        "workload.{prompt_tokens,output_tokens,sessions.turns}.choice.weights",
        "The relative weight of each value, one per value.",
        Words("equal weights"),
        In(&row::CHOICE_WEIGHT),
    ),
    // Replicas and pools.
    key(
        "cluster",
        "Replicas of the engine behind a router, or prefill and decode pools ([clusters](clusters.md)).",
        Words("none: one engine"),
        Plain,
    ),
    key(
        "cluster.{,prefill.,decode.}replicas",
        "Engines behind the router (under a pool, that pool's), each a whole copy of the model on its own GPUs.",
        Whole(DEFAULT_REPLICAS as u64),
        In(&row::REPLICAS),
    ),
    key(
        "cluster.{,prefill.,decode.}router",
        "How a request picks a replica: `round_robin`, `random`, `least_outstanding`, `least_kv`, `prefix_affinity` (needs prefix caching; not for decode) or `session_affinity`.",
        Words("`round_robin`"),
        Plain,
    ),
    key(
        "cluster.{,prefill.,decode.}overlap_weight",
        "`prefix_affinity` only: the weight of a missed prompt block against a busy block (Dynamo's `kv_overlap_score_weight`).",
        Real(DEFAULT_OVERLAP_WEIGHT),
        In(&row::OVERLAP_WEIGHT),
    ),
    key(
        "cluster.{prefill,decode}",
        "A pool of prefill/decode disaggregation: the replicas that run prompts, or those that generate the tokens after; keys left out take the scenario's.",
        Words("none; with pools, both are required"),
        Plain,
    ),
    key(
        "cluster.kv_transfer",
        "With pools: the link that moves a prompt's KV from a prefill replica to a decode replica.",
        Words("required with pools"),
        Plain,
    ),
    key(
        "cluster.kv_transfer.bandwidth_gbps",
        "The link's bandwidth in GB/s (10^9 bytes a second).",
        Words("required with pools"),
        In(&row::KV_TRANSFER_GBPS),
    ),
    key(
        "cluster.kv_transfer.latency_ms",
        "The fixed time of one transfer, in ms.",
        Real(0.0),
        In(&row::KV_TRANSFER_MS),
    ),
    key(
        "cluster.autoscale",
        "Replicas added and removed as the load goes, by Kubernetes' HPA rule, with cold starts and draining ([clusters](clusters.md#autoscaling)); colocated replicas only.",
        Words("none: a fixed fleet"),
        Plain,
    ),
    key(
        "cluster.autoscale.{min,max}_replicas",
        "The fewest and most replicas the autoscaler runs (ready plus starting); `cluster.replicas`, if given, is how many are ready at the start.",
        Words("min 1; max required"),
        In(&row::AUTOSCALE_REPLICAS),
    ),
    key(
        "cluster.autoscale.signal",
        "What the autoscaler reads: `waiting`, `outstanding` (running + waiting), `kv_use` (fraction of blocks) or `rate` (requests a second over `window_s`), each an average over ready replicas, or `ttft_p99_ms` (the fleet's, over `window_s`).",
        Words("`outstanding`"),
        Plain,
    ),
    key(
        "cluster.autoscale.target",
        "The signal's target value (HPA's `averageValue`, or `value` for `ttft_p99_ms`).",
        Words("required"),
        In(&row::AUTOSCALE_TARGET),
    ),
    key(
        "cluster.autoscale.period_s",
        "How often the autoscaler decides (the HPA sync period), in seconds; the first decision is one period in.",
        Real(super::defaults::DEFAULT_PERIOD_S),
        In(&row::AUTOSCALE_PERIOD_S),
    ),
    key(
        "cluster.autoscale.tolerance",
        "No change while the signal is within this fraction of the target (HPA's tolerance).",
        Real(super::defaults::DEFAULT_TOLERANCE),
        In(&row::AUTOSCALE_TOLERANCE),
    ),
    key(
        "cluster.autoscale.window_s",
        "The window the `rate` and `ttft_p99_ms` signals are measured over, in seconds.",
        Real(super::defaults::DEFAULT_SIGNAL_WINDOW_S),
        In(&row::AUTOSCALE_PERIOD_S),
    ),
    key(
        "cluster.autoscale.{scale_up,scale_down}",
        "One direction's HPA `behavior`: a stabilization window and the most replicas (`pods`) or percent a period may change; naming `pods` or `percent` replaces both defaults.",
        Words("up: 0 s, 4 pods or 100% a 15 s period; down: 300 s, 100% a 15 s period"),
        Plain,
    ),
    key(
        "cluster.autoscale.{scale_up,scale_down}.stabilization_s",
        "Recommendations this recent count: a scale-up takes the lowest of them, a scale-down the highest.",
        Words("up 0, down 300"),
        In(&row::STABILIZATION_S),
    ),
    key(
        "cluster.autoscale.{scale_up,scale_down}.pods",
        "A `Pods` policy: at most this many replicas added (removed) a period.",
        Words("up 4; down none"),
        In(&row::SCALE_PODS),
    ),
    key(
        "cluster.autoscale.{scale_up,scale_down}.percent",
        "A `Percent` policy: at most this percent of the replicas at the period's start added (removed) a period.",
        Real(super::defaults::DEFAULT_PERCENT),
        In(&row::SCALE_PERCENT),
    ),
    key(
        "cluster.autoscale.{scale_up,scale_down}.period_s",
        "The period both policies count changes over, in seconds.",
        Real(super::defaults::DEFAULT_PERIOD_S),
        In(&row::AUTOSCALE_PERIOD_S),
    ),
    key(
        "cluster.autoscale.cold_start",
        "What a new replica waits for before the router sees it: its weights at `load_gbps`, then `engine_start_s`, then `graph_capture_s`.",
        Words("none: ready at once"),
        Plain,
    ),
    key(
        "cluster.autoscale.cold_start.load_gbps",
        "GB/s a new replica reads its weights (all its GPUs') at, from disk, a registry or object storage.",
        Words("none: no load time"),
        In(&row::LOAD_GBPS),
    ),
    key(
        "cluster.autoscale.cold_start.{engine_start_s,graph_capture_s}",
        "Seconds of engine start-up (process, memory profiling, KV allocation) and of CUDA-graph capture.",
        Real(0.0),
        In(&row::COLD_START_S),
    ),
    key(
        "cluster.pools",
        "Replicas on GPUs of their own kinds behind one router, a list of `{name, replicas, hardware, parallelism, scheduler, cost_per_hour, autoscale}` (each key as at the top, `cost_per_hour` a GPU-hour replacing the hardware's); the routers weigh replicas by speed ([clusters](clusters.md#mixed-pools)); 1 to 16 pools.",
        Words("none: one kind of replica"),
        Plain,
    ),
    key(
        "cluster.timeline",
        "Results per window of time ([clusters](clusters.md#results-over-time)): `llmsim run --timeline FILE` writes the rows; the result JSON gains GPU-hours, cost and the windows that missed the SLO.",
        Words("none (with `autoscale`: 60 s windows)"),
        Plain,
    ),
    key(
        "cluster.timeline.window_s",
        "A window's width, in seconds.",
        Real(super::defaults::DEFAULT_WINDOW_S),
        In(&row::WINDOW_S),
    ),
    key(
        "cluster.timeline.slo",
        "Bounds each window's latency percentiles must meet (a window with no sample meets them).",
        Words("none"),
        Plain,
    ),
    key(
        "cluster.timeline.slo.{ttft,itl}_{p50,p99}_ms",
        "The bound on a window's TTFT or ITL p50 or p99, in ms.",
        Words("none"),
        In(&row::WINDOW_SLO_MS),
    ),
];

/// The key paths a row's `path` names: each `{a,b}` expanded.
pub fn expand(pattern: &str) -> Vec<String> {
    let Some(open) = pattern.find('{') else { return vec![pattern.to_string()] };
    let close = open + pattern[open..].find('}').expect("a `{` without `}` in a schema path");
    let rest = expand(&pattern[close + 1..]);
    pattern[open + 1..close]
        .split(',')
        .flat_map(|alt| rest.iter().map(move |r| format!("{}{alt}{r}", &pattern[..open])))
        .collect()
}

/// Every key path and its row. A path named by two rows keeps the first
/// (a test refuses that).
fn index() -> &'static BTreeMap<String, &'static Key> {
    static INDEX: OnceLock<BTreeMap<String, &'static Key>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut map = BTreeMap::new();
        for k in KEYS {
            for path in expand(k.path) {
                map.entry(path).or_insert(k);
            }
        }
        map
    })
}

/// The row of a key path; a list item's path (`...uniform[1]`) is its list's.
pub fn row_of(path: &str) -> Option<&'static Key> {
    let path = path.find('[').map_or(path, |i| &path[..i]);
    index().get(path).copied()
}

/// The allowed range of a key path (see [`row_of`]). Validation asks for
/// the ranges of the keys it checks: a key without one is a mistake in
/// this table, caught by its tests.
pub fn range(path: &str) -> &'static Range {
    match row_of(path).and_then(|k| k.range.range()) {
        Some(r) => r,
        None => panic!("config/schema.rs has no range for the key `{path}`"),
    }
}

#[cfg(test)]
mod tests;
