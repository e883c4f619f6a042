//! The per-operator step cost (docs/engine.md, "The per-operator form").
//!
//! The roofline form prices a step as one kernel: the larger of all its
//! FLOPs and all its bytes. A GPU runs a step as a sequence of kernels,
//! each bound by its own resource: a decode step's GEMMs stream weights
//! while its attention streams KV, and a prefill chunk's GEMMs are
//! compute-bound while the decodes beside it still read their KV. This
//! form adds the kernels' times up:
//!
//! ```text
//! M        = tokens in the step (T); per expert, M_e = T * k / touched
//! ramp_scale = min(1, bytes_per_parameter / bytes of the peak's precision)   (W4A16 at the 16-bit peak: 0.53125/2)
//! gemm(M, n, k) = table(M)                       if the hardware measured this shape
//!               = max(2*M*n*k / (peak_w * compute * M / (M + half)),   half = gemm_half_tokens * ramp_scale
//!                     (n*k*bytes_per_parameter + 2*M*(n + k)) / (bandwidth * memory))
//! linear   = layers * sum over the layer's GEMMs (per GPU shapes) + the LM head at M = S
//!            + layers * touched * per_expert_us          (a fixed cost for each expert a layer's tokens touch)
//!            (an expert's analytic GEMM times / expert_gemm when its weights are narrower than 16 bits)
//! attention = 4*layers*q_dim/t * pairs / (peak_16 * attention_compute)
//!           + sum_ctx * kv_bytes_per_token_per_gpu / (bandwidth * attention_memory)
//! comm     = 2 * layers * allreduce(M * hidden * 2 bytes)          (t > 1)
//! allreduce(b) = min(nccl(b), allreduce_us + 2(t-1)/t * b / (link bandwidth * efficiency.allreduce))
//! nccl(b)  = the measured table at t GPUs, else link latency + 2(t-1)/t * b / link bandwidth
//! gpu      = linear + attention + comm + layers * per_layer_overhead
//! gpu      = max(gpu, layers * eager_layer_us)    when T > cuda_graph_max_tokens (no CUDA graph)
//! step     = gpu + step_overhead + batch * per_sequence_overhead
//! ```
//!
//! With attention data parallelism `d` and expert parallelism `e`
//! (docs/deployments.md) one GPU of the busiest rank is priced: its rank
//! runs `T/d` tokens through the GEMMs split over `t` (attention, router,
//! shared and dense MLPs), `1/d` of the pairs, context and samples, and
//! `layers + dense layers` all-reduces of its `T/d` tokens (`2 * layers`
//! at `d = 1`, where the experts' outputs are summed as under TP); the GPU
//! holds `experts/e` whole experts and runs `touched/e` of them at
//! `imbalance * M_e` tokens each; with `d > 1` each MoE layer adds the
//! all-to-all dispatch and combine of the roofline form; `T/d` against
//! the largest CUDA graph (a rank's), `batch/d` sequences.
//!
//! Every term grows with the step's tokens, context, pairs, samples and
//! batch, so a larger step never costs less (the stretch's bounds rely on
//! it). Everything that does not depend on the step is folded in once.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::{CostModel, StepCost, StepShape};
use crate::engine::arch::{Architecture, TouchedExperts};

/// A measured curve: `(x, microseconds)` points with strictly increasing
/// `x`, interpolated linearly; below the first point the first time, above
/// the last the last segment's slope carried on (never below the last
/// time).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Curve {
    pub points: Vec<(f64, f64)>,
}

impl Curve {
    /// The time at `x`, in microseconds. The points are checked when the
    /// profile is read: at least one, `x` strictly increasing, times
    /// positive and finite.
    pub fn at(&self, x: f64) -> f64 {
        let p = &self.points;
        let Some(&(x0, y0)) = p.first() else { return 0.0 };
        if x <= x0 || p.len() == 1 {
            return y0;
        }
        // The first point at or past x.
        let i = p.partition_point(|&(px, _)| px < x);
        let (a, b) = if i >= p.len() { (p[p.len() - 2], p[p.len() - 1]) } else { (p[i - 1], p[i]) };
        let y = a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0);
        if i >= p.len() { y.max(b.1) } else { y }
    }
}

/// Measured GEMM times of one weight shape: `n` outputs, `k` inputs (per
/// GPU), at the weights' precision; `us` by token count.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GemmTable {
    pub n: u64,
    pub k: u64,
    /// `bf16`, `fp8` or `int4`: the weights' precision it was measured at.
    pub dtype: String,
    pub us: Curve,
}

/// A hardware profile's measured kernel times (`kernels:`), read only in
/// the per-operator form.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KernelTables {
    /// Where the figures were measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// NCCL all-reduce time by message bytes, by GPU count.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allreduce: BTreeMap<u32, Curve>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gemm: Vec<GemmTable>,
}

/// Serialises shared tables as the YAML a profile gives them in.
pub fn serialize_tables<S: serde::Serializer>(t: &Option<Arc<KernelTables>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => KernelTables::serialize(t, s),
        None => s.serialize_none(),
    }
}

impl KernelTables {
    pub fn gemm(&self, n: u64, k: u64, dtype: &str) -> Option<&Curve> {
        self.gemm.iter().find(|g| g.n == n && g.k == k && g.dtype == dtype).map(|g| &g.us)
    }
}

/// The per-operator form's own inputs (efficiency and latency keys).
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorInput {
    /// `efficiency.gemm_half_tokens`: tokens at which a GEMM reaches half
    /// of `efficiency.compute` (0: every GEMM at `efficiency.compute`).
    pub gemm_half_tokens: f64,
    /// The weights' bytes over the bytes of the precision their peak is
    /// native to (at most 1): W4A16 at the 16-bit peak streams a quarter of
    /// a 16-bit GEMM's bytes, so its ramp (the small-M floor) is a quarter.
    pub ramp_scale: f64,
    /// `efficiency.attention_compute`, of the 16-bit peak.
    pub attention_compute: f64,
    /// `efficiency.attention_memory`: of the bandwidth, for KV reads.
    pub attention_memory: f64,
    /// `latency.allreduce_us`: the engine's own all-reduce (vLLM's custom
    /// all-reduce), when given.
    pub allreduce_us: Option<f64>,
    /// `efficiency.allreduce`: the engine's all-reduce bandwidth over the link's.
    pub allreduce_efficiency: f64,
    /// `latency.per_expert_us`: a fixed cost for each expert a layer's tokens touch.
    pub per_expert_us: f64,
    /// `efficiency.expert_gemm`: the routed experts' GEMMs' rate over the
    /// dense GEMMs' when they are stored in fewer than 16 bits (their
    /// analytic times are divided by it; 16-bit experts at the dense rate).
    pub expert_gemm_efficiency: f64,
    /// `latency.eager_layer_us`: host time per layer of a step run without a CUDA graph.
    pub eager_layer_us: f64,
    /// `scheduler.cuda_graph_max_tokens`: the largest step run as a CUDA graph.
    pub cuda_graph_max_tokens: u64,
    /// The 16-bit peak, TFLOPS (attention runs at it).
    pub peak16_tflops: f64,
    /// The weights' precision, to find measured GEMMs.
    pub dtype: &'static str,
    pub kernels: Option<Arc<KernelTables>>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The routed experts' own precision: bytes a weight and the peak their
/// GEMMs run at.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ExpertWeights {
    pub bytes_per_parameter: f64,
    pub peak_tflops: f64,
    /// The measured-GEMM table's dtype for them (`bf16`, `fp8`, `int4`).
    pub dtype: &'static str,
    /// As [`OperatorInput::ramp_scale`], for the experts' own format.
    pub ramp_scale: f64,
}

/// One GEMM of a layer on one GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Gemm {
    pub name: &'static str,
    pub n: f64,
    pub k: f64,
    /// Measured times for this shape, when the hardware has them.
    #[serde(skip)]
    pub table: Option<Curve>,
}

/// The all-reduce of tensor parallelism, at the engine's degree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllReduce {
    /// `2 (t-1)/t`: bytes each GPU sends per byte reduced.
    pub factor: f64,
    /// The link's fixed cost and bus bandwidth (B/s).
    pub latency_s: f64,
    pub bandwidth: f64,
    /// Measured NCCL times at this degree.
    #[serde(skip)]
    pub table: Option<Curve>,
    /// The engine's own path: fixed cost (s) and bandwidth (B/s).
    pub custom: Option<(f64, f64)>,
}

impl AllReduce {
    /// NCCL's time for `bytes`: the measured table, else the link's line.
    pub fn nccl_s(&self, bytes: f64) -> f64 {
        match &self.table {
            Some(c) => c.at(bytes) * 1e-6,
            None => self.latency_s + self.factor * bytes / self.bandwidth,
        }
    }

    /// One all-reduce of `bytes`: the faster of NCCL and the engine's own.
    pub fn seconds(&self, bytes: f64) -> f64 {
        let nccl = self.nccl_s(bytes);
        match self.custom {
            Some((fixed, bw)) => nccl.min(fixed + self.factor * bytes / bw),
            None => nccl,
        }
    }
}

/// The per-operator terms, folded into rates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Operators {
    pub layers: f64,
    /// The GEMMs every token runs in one layer (attention projections,
    /// a dense MLP or a MoE layer's router and shared expert).
    pub dense: Vec<Gemm>,
    /// With leading dense layers (`first_dense_layers`): the router and
    /// shared expert, run in the `moe_layers` only, and the dense MLP, run
    /// in the others; `dense` then holds the attention projections alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub moe_only: Vec<Gemm>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dense_only: Vec<Gemm>,
    /// Layers with experts (`layers` unless some lead dense).
    #[serde(skip)]
    pub moe_layers: f64,
    /// One expert's GEMMs (MoE only).
    pub expert: Vec<Gemm>,
    pub experts: u64,
    pub experts_per_token: u64,
    /// Experts touched by a step's tokens, by table.
    #[serde(skip)]
    pub touched: TouchedExperts,
    pub head: Gemm,
    /// `peak_w * 1e12 * efficiency.compute`, one GPU.
    pub gemm_flops_per_s: f64,
    /// `efficiency.gemm_half_tokens` scaled by the weights' `ramp_scale`,
    /// and by the routed experts' own.
    pub gemm_half_tokens: f64,
    pub expert_half_tokens: f64,
    /// `bandwidth * efficiency.memory`, one GPU.
    pub weight_bytes_per_s: f64,
    /// `latency.per_expert_us` in seconds: each touched expert's fixed cost in a layer.
    pub per_expert_s: f64,
    /// `efficiency.expert_gemm` for experts narrower than 16 bits (1 for
    /// 16-bit ones): an expert GEMM's analytic time is divided by it.
    pub expert_gemm_efficiency: f64,
    pub bytes_per_parameter: f64,
    /// The routed experts' peak and bytes a weight (the rest's unless
    /// `model.weights.expert_dtype` differs).
    pub expert_gemm_flops_per_s: f64,
    pub expert_bytes_per_parameter: f64,
    /// `4 * layers * q_dim / t`.
    pub attention_flops_per_pair: f64,
    /// MLA: a decode pair's FLOPs on one GPU, in the absorbed form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_attention_flops_per_pair: Option<f64>,
    /// Sliding-window layers: FLOPs a pair and KV bytes a token on one GPU.
    #[serde(skip_serializing_if = "is_zero")]
    pub window_attention_flops_per_pair: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub window_kv_bytes_per_token: f64,
    /// `peak_16 * 1e12 * attention_compute`.
    pub attention_flops_per_s: f64,
    /// KV bytes a token on one GPU.
    pub kv_bytes_per_token: f64,
    /// `bandwidth * attention_memory`.
    pub kv_bytes_per_s: f64,
    /// `2 * layers` all-reduces of `hidden * 2` bytes a token (none at t = 1).
    pub allreduce: Option<AllReduce>,
    pub hidden_bytes: f64,
    /// `layers * per_layer_overhead`, s.
    pub layers_overhead_s: f64,
    /// `layers * eager_layer_us`, s: the least a step without a graph takes.
    pub eager_floor_s: f64,
    pub cuda_graph_max_tokens: u64,
    /// Data and expert parallelism, when used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wide: Option<WideOperators>,
}

/// The per-operator form's terms of data and expert parallelism.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WideOperators {
    pub data: f64,
    pub expert: f64,
    /// GPUs each expert group splits its experts over (1: whole experts).
    pub expert_tensor: f64,
    pub imbalance: f64,
    /// All-reduces a step inside a rank: one a layer after attention, one
    /// more a dense layer, or every layer with one rank.
    pub allreduce_calls: f64,
    /// The MoE layers' all-to-all: fixed seconds a step, and seconds a
    /// token of the engine (both 0 with one rank).
    pub all_to_all_fixed_s: f64,
    pub all_to_all_s_per_token: f64,
}

/// A step's time by operator, seconds (what `explain` shows).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct OperatorTimes {
    /// Every GEMM (linear layers, experts, LM head).
    pub gemm_s: f64,
    /// Of `gemm_s`: GEMMs bound by their weight reads.
    pub gemm_memory_bound_s: f64,
    pub attention_compute_s: f64,
    pub attention_memory_s: f64,
    /// All-reduces, and with data parallelism the MoE all-to-all.
    pub comm_s: f64,
    /// Of `comm_s`: the all-to-all.
    pub all_to_all_s: f64,
    /// `layers * per_layer_overhead`, plus what the eager floor adds.
    pub fixed_s: f64,
}

impl OperatorTimes {
    /// The GPU's time: every kernel one after the other.
    pub fn gpu_s(&self) -> f64 {
        self.gemm_s + self.attention_compute_s + self.attention_memory_s + self.comm_s + self.fixed_s
    }
}

/// What [`Operators::new`] needs of the common cost inputs.
pub struct Rates {
    /// The weights' peak (TFLOPS) and `efficiency.compute`.
    pub peak_tflops: f64,
    pub compute_efficiency: f64,
    /// Bandwidth of one GPU, B/s, and `efficiency.memory`.
    pub bandwidth: f64,
    pub memory_efficiency: f64,
    pub bytes_per_parameter: f64,
    pub kv_bytes_per_token: f64,
    /// Sliding-window layers' KV bytes a token on one GPU (0 without them).
    pub window_kv_bytes_per_token: u64,
    pub per_layer_overhead_us: f64,
}

impl Operators {
    /// `experts`: the routed experts' own precision; `wide`: data and
    /// expert parallelism.
    pub fn new(
        a: &Architecture,
        t: u32,
        link: Option<super::Link>,
        r: &Rates,
        o: &OperatorInput,
        experts: Option<ExpertWeights>,
        wide: Option<WideOperators>,
    ) -> Operators {
        let tf = f64::from(t);
        let h = a.hidden_size as f64;
        let q_heads = a.attention_heads as f64 / tf;
        let kv_heads = a.kv_heads_per_gpu(u64::from(t)) as f64;
        let hd = a.head_dim as f64;
        let tables = o.kernels.as_deref();
        let gemm_of = |dtype: &str, name: &'static str, n: f64, k: f64| {
            // A measured shape matches whole numbers of outputs and inputs.
            let whole = n.fract() == 0.0 && k.fract() == 0.0;
            let table = tables.filter(|_| whole).and_then(|kt| kt.gemm(n as u64, k as u64, dtype).cloned());
            Gemm { name, n, k, table }
        };
        let gemm = |name: &'static str, n: f64, k: f64| gemm_of(o.dtype, name, n, k);
        let expert_dtype = experts.map_or(o.dtype, |e| e.dtype);
        let mut dense = match &a.mla {
            None => vec![gemm("qkv", (q_heads + 2.0 * kv_heads) * hd, h), gemm("o", h, q_heads * hd)],
            // The latent down-projections are whole on every GPU (vLLM
            // replicates them); the up-projections and `o` split by heads.
            Some(m) => {
                let (nope, rope, v, kv_lora) =
                    (m.qk_nope_head_dim as f64, m.qk_rope_head_dim as f64, m.v_head_dim as f64, m.kv_lora_rank as f64);
                let mut g = match m.q_lora_rank {
                    0 => vec![gemm("q", q_heads * (nope + rope), h)],
                    r => vec![gemm("q_a", r as f64, h), gemm("q_b", q_heads * (nope + rope), r as f64)],
                };
                g.push(gemm("kv_a", kv_lora + rope, h));
                g.push(gemm("kv_b", q_heads * (nope + v), kv_lora));
                g.push(gemm("o", h, q_heads * v));
                g
            }
        };
        let mlp = |g: &mut Vec<Gemm>| {
            let i = a.intermediate_size.unwrap_or(0) as f64 / tf;
            g.push(gemm("gate_up", 2.0 * i, h));
            g.push(gemm("down", h, i));
        };
        let (mut expert, mut moe_only, mut dense_only) = (Vec::new(), Vec::new(), Vec::new());
        if a.is_moe() {
            let per_moe_layer = if a.first_dense_layers > 0 { &mut moe_only } else { &mut dense };
            per_moe_layer.push(gemm("router", a.experts as f64, h));
            if a.shared_expert_intermediate_size > 0 {
                let i = a.shared_expert_intermediate_size as f64 / tf;
                per_moe_layer.push(gemm("shared_gate_up", 2.0 * i, h));
                per_moe_layer.push(gemm("shared_down", h, i));
            }
            if a.first_dense_layers > 0 {
                mlp(&mut dense_only);
            }
            // Under expert parallelism a GPU holds whole experts, or its
            // `1/expert_tensor` of each of its group's.
            let i = a.expert_intermediate_size as f64 / wide.as_ref().map_or(tf, |w| w.expert_tensor);
            expert.push(gemm_of(expert_dtype, "expert_gate_up", 2.0 * i, h));
            expert.push(gemm_of(expert_dtype, "expert_down", h, i));
        } else {
            mlp(&mut dense);
        }
        let allreduce = match link {
            Some(link) if t > 1 => {
                let bandwidth = link.bandwidth_gbps * 1e9;
                Some(AllReduce {
                    factor: 2.0 * (tf - 1.0) / tf,
                    latency_s: link.latency_us * 1e-6,
                    bandwidth,
                    table: tables.and_then(|kt| kt.allreduce.get(&t).cloned()),
                    custom: o.allreduce_us.map(|us| (us * 1e-6, bandwidth * o.allreduce_efficiency)),
                })
            }
            _ => None,
        };
        let layers = a.layers as f64;
        let expert_bytes_per_parameter = experts.map_or(r.bytes_per_parameter, |e| e.bytes_per_parameter);
        Operators {
            layers,
            dense,
            moe_only,
            dense_only,
            moe_layers: a.moe_layers() as f64,
            expert,
            experts: a.experts,
            experts_per_token: a.experts_per_token,
            touched: TouchedExperts::new(a.experts, a.experts_per_token),
            head: gemm("lm_head", a.vocab_size as f64 / tf, h),
            gemm_flops_per_s: r.peak_tflops * 1e12 * r.compute_efficiency,
            gemm_half_tokens: o.gemm_half_tokens * o.ramp_scale,
            expert_half_tokens: o.gemm_half_tokens * experts.map_or(o.ramp_scale, |e| e.ramp_scale),
            weight_bytes_per_s: r.bandwidth * r.memory_efficiency,
            per_expert_s: o.per_expert_us * 1e-6,
            expert_gemm_efficiency: if expert_bytes_per_parameter < 2.0 { o.expert_gemm_efficiency } else { 1.0 },
            bytes_per_parameter: r.bytes_per_parameter,
            expert_gemm_flops_per_s: experts.map_or(r.peak_tflops, |e| e.peak_tflops) * 1e12 * r.compute_efficiency,
            expert_bytes_per_parameter,
            attention_flops_per_pair: a.attention_flops_per_pair() as f64 / tf,
            decode_attention_flops_per_pair: a.mla.map(|_| a.decode_attention_flops_per_pair() as f64 / tf),
            window_attention_flops_per_pair: a.window_attention_flops_per_pair() as f64 / tf,
            window_kv_bytes_per_token: r.window_kv_bytes_per_token as f64,
            attention_flops_per_s: o.peak16_tflops * 1e12 * o.attention_compute,
            kv_bytes_per_token: r.kv_bytes_per_token,
            kv_bytes_per_s: r.bandwidth * o.attention_memory,
            allreduce,
            hidden_bytes: h * 2.0,
            layers_overhead_s: layers * r.per_layer_overhead_us * 1e-6,
            eager_floor_s: layers * o.eager_layer_us * 1e-6,
            cuda_graph_max_tokens: o.cuda_graph_max_tokens,
            wide,
        }
    }

    /// One GEMM at `m` tokens: (seconds, whether bound by its weight reads).
    pub fn gemm_s(&self, g: &Gemm, m: f64) -> (f64, bool) {
        self.gemm_at(g, m, self.gemm_flops_per_s, self.bytes_per_parameter, self.gemm_half_tokens)
    }

    /// An expert's GEMM at `m` tokens, at the experts' own precision; its
    /// analytic time at `efficiency.expert_gemm` of the dense GEMMs' rate
    /// (a measured table is the kernel's own time).
    fn expert_gemm_s(&self, g: &Gemm, m: f64) -> (f64, bool) {
        let (s, memory_bound) =
            self.gemm_at(g, m, self.expert_gemm_flops_per_s, self.expert_bytes_per_parameter, self.expert_half_tokens);
        if g.table.is_some() { (s, memory_bound) } else { (s / self.expert_gemm_efficiency, memory_bound) }
    }

    fn gemm_at(&self, g: &Gemm, m: f64, flops_per_s: f64, bytes_per_parameter: f64, half: f64) -> (f64, bool) {
        if let Some(c) = &g.table {
            return (c.at(m) * 1e-6, false);
        }
        // 2*m*n*k / (flops * m / (m + half)) = 2*n*k*(m + half) / flops
        let compute = 2.0 * g.n * g.k * (m + half) / flops_per_s;
        let bytes = g.n * g.k * bytes_per_parameter + 2.0 * m * (g.n + g.k);
        let memory = bytes / self.weight_bytes_per_s;
        if memory >= compute { (memory, true) } else { (compute, false) }
    }

    /// The step's time by operator.
    pub fn times(&self, s: &StepShape) -> OperatorTimes {
        let Some(w) = &self.wide else { return self.times_of(s, s.tokens as f64, 1.0, 1.0, 1.0) };
        let rank = s.tokens as f64 / w.data;
        let mut out = self.times_of(s, rank, w.data, w.expert, w.imbalance);
        if s.tokens > 0 {
            out.all_to_all_s = w.all_to_all_fixed_s + w.all_to_all_s_per_token * s.tokens as f64;
            out.comm_s += out.all_to_all_s;
        }
        out
    }

    /// One GPU of a rank of `m` tokens, among `d` ranks, holding `1/e` of
    /// the experts (each 1 without data and expert parallelism).
    fn times_of(&self, s: &StepShape, m: f64, d: f64, e: f64, imbalance: f64) -> OperatorTimes {
        let mut out = OperatorTimes::default();
        let mut add = |(secs, memory_bound): (f64, bool), times: f64| {
            out.gemm_s += secs * times;
            if memory_bound {
                out.gemm_memory_bound_s += secs * times;
            }
        };
        if s.tokens > 0 {
            for g in &self.dense {
                add(self.gemm_s(g, m), self.layers);
            }
            for g in &self.moe_only {
                add(self.gemm_s(g, m), self.moe_layers);
            }
            for g in &self.dense_only {
                add(self.gemm_s(g, m), self.layers - self.moe_layers);
            }
            if self.experts > 0 {
                // Every token of the engine is routed: the experts touched
                // are the engine's, `1/e` of them on this GPU.
                let touched = self.touched.at(s.tokens);
                let per_expert = (s.tokens as f64 * self.experts_per_token as f64 / touched).max(1.0);
                let here = touched / e;
                for g in &self.expert {
                    add(self.expert_gemm_s(g, per_expert * imbalance), self.moe_layers * here);
                }
                out.fixed_s += self.moe_layers * here * self.per_expert_s;
            }
        }
        if s.sampled > 0 {
            add(self.gemm_s(&self.head, s.sampled as f64 / d), 1.0);
        }
        if let Some(ar) = self.allreduce.as_ref().filter(|_| s.tokens > 0) {
            let calls = self.wide.as_ref().map_or(2.0 * self.layers, |w| w.allreduce_calls);
            out.comm_s = calls * ar.seconds(m * self.hidden_bytes);
        }
        out.attention_compute_s = s
            .attention_flops(self.attention_flops_per_pair, self.decode_attention_flops_per_pair)
            / d
            / self.attention_flops_per_s;
        out.attention_memory_s = s.sum_ctx as f64 / d * self.kv_bytes_per_token / self.kv_bytes_per_s;
        if s.window_ctx > 0 {
            out.attention_compute_s +=
                self.window_attention_flops_per_pair * (s.window_pairs as f64 / d) / self.attention_flops_per_s;
            out.attention_memory_s += s.window_ctx as f64 / d * self.window_kv_bytes_per_token / self.kv_bytes_per_s;
        }
        out.fixed_s += self.layers_overhead_s;
        let busy = out.gpu_s();
        if m > self.cuda_graph_max_tokens as f64 && busy < self.eager_floor_s {
            out.fixed_s += self.eager_floor_s - busy;
        }
        out
    }

    /// The step's cost: the kernels one after the other, then the host's
    /// per-step work. `compute_s` and `memory_s` are the time of the
    /// kernels bound by each; `overhead_s` the fixed terms.
    pub fn cost(&self, m: &CostModel, s: &StepShape) -> StepCost {
        let t = self.times(s);
        let compute_s = t.gemm_s - t.gemm_memory_bound_s + t.attention_compute_s;
        let memory_s = t.gemm_memory_bound_s + t.attention_memory_s;
        let batch = s.batch as f64 / self.wide.as_ref().map_or(1.0, |w| w.data);
        let overhead_s = t.fixed_s + m.overhead_s + batch * m.per_sequence_s;
        StepCost {
            compute_s,
            memory_s,
            comm_s: t.comm_s,
            overhead_s,
            total_s: t.gpu_s() + m.overhead_s + batch * m.per_sequence_s,
        }
    }
}

#[cfg(test)]
mod tests;
