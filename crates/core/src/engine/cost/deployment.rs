//! The step cost of a model with an architecture, on `t` tensor-parallel
//! GPUs (docs/deployments.md):
//!
//! ```text
//! flops   = 2*active_layers*T + 4*layers*q_dim*pairs + 2*hidden*vocab*S
//!           (MLA: prefill and decode pairs each at their form's FLOPs)
//! compute = flops / (t * peak * 1e12 * efficiency.compute)
//! touched = experts * (1 - (1 - experts_per_token/experts)^T)      (0 when dense)
//! read    = (parameters - moe_layers*experts*expert + moe_layers*touched*expert) * bytes_per_parameter
//! memory  = (read / t + sum_ctx * kv_bytes_per_token_per_gpu) / (bandwidth * 1e9 * efficiency.memory)
//! comm    = 2 * layers * (latency + 2*(t-1)/t * T*hidden*2 / interconnect_bandwidth)   (0 at t = 1)
//! step    = max(compute, memory) + comm + step_overhead + layers*per_layer + batch*per_sequence
//! ```
//!
//! Everything that does not depend on the step is folded into rates once,
//! so a step costs a handful of multiplications (and one `pow` for a
//! mixture of experts).

use serde::Serialize;

pub use super::operators::ExpertWeights;
use super::{CostModel, StepCost, StepShape};
use crate::engine::arch::{Architecture, TouchedExperts};

/// An all-reduce link at the engine's tensor degree.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct Link {
    /// Bus bandwidth of an all-reduce, GB/s.
    pub bandwidth_gbps: f64,
    /// Fixed cost of one all-reduce, microseconds.
    pub latency_us: f64,
}

/// What [`DeploymentCost::new`] needs besides the common cost inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct DeploymentInput {
    pub architecture: Architecture,
    /// The architecture's parameter count, or an explicit override of it
    /// (`weights.parameters_billions`), which then sets the bytes read.
    pub parameters: f64,
    pub tensor_parallel: u32,
    /// The peak that applies: `peak_tflops_fp8` for 1-byte weights when the
    /// hardware gives it, else `peak_tflops`.
    pub peak_tflops: f64,
    /// Required when `tensor_parallel > 1`; unused at 1.
    pub link: Option<Link>,
    pub per_layer_overhead_us: f64,
    /// The per-operator form's inputs, when the scenario uses it.
    pub operators: Option<super::operators::OperatorInput>,
    /// Sliding-window layers: their window and the KV bytes a token they
    /// hold on one GPU (0 and 0 without them).
    pub sliding_window: u64,
    pub window_kv_bytes_per_token: u64,
    /// The routed experts' weights when their precision differs from the
    /// rest's (`model.weights.expert_dtype`, e.g. gpt-oss's MXFP4 experts
    /// beside 16-bit attention).
    pub expert_weights: Option<ExpertWeights>,
    /// Data and expert parallelism (docs/deployments.md), when used.
    pub wide: Option<Wide>,
}

/// Attention data parallelism and expert parallelism inside one engine:
/// `data` ranks of `tensor_parallel` GPUs each, with their own batches and
/// KV, and the routed experts spread whole over `expert` GPUs. The step is
/// priced for balanced ranks: each holds `1/data` of the batch.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Wide {
    pub data: u32,
    /// Expert-parallel groups: each holds `experts / expert` whole experts.
    pub expert: u32,
    /// GPUs each group splits its experts over (MoE tensor parallelism
    /// inside expert parallelism: TensorRT-LLM's `moe_tp_size`, SGLang's
    /// `--tp` over `--ep`); `expert x expert_tensor = tensor x data`.
    pub expert_tensor: u32,
    /// The busiest GPU's expert tokens over the mean (1: uniform routing).
    pub imbalance: f64,
    /// The link between the `expert` GPUs, for the all-to-all dispatch and
    /// combine of a mixture-of-experts layer (`None` when `expert` is 1).
    pub expert_link: Option<Link>,
}

impl DeploymentInput {
    /// All GPUs' weight bytes at `bytes_per_parameter` (the experts at
    /// their own bytes when they have them).
    pub fn weight_bytes(&self, bytes_per_parameter: f64) -> f64 {
        match self.expert_weights {
            None => self.parameters * bytes_per_parameter,
            Some(e) => {
                let experts = self.architecture.all_expert_parameters() as f64;
                (self.parameters - experts) * bytes_per_parameter + experts * e.bytes_per_parameter
            }
        }
    }

    /// The one peak of the roofline form: `peak_tflops`, or with experts
    /// of their own precision the harmonic mean weighted by the parameters
    /// a token uses, `active / (rest/peak + experts/expert_peak)`, so
    /// each weight's two FLOPs a token run at its own peak (attention and
    /// the head are priced at that mean, a small error; the per-operator
    /// form prices each GEMM at its own).
    pub fn roofline_peak_tflops(&self) -> f64 {
        let Some(e) = self.expert_weights else { return self.peak_tflops };
        let a = &self.architecture;
        let experts = (a.moe_layers() * a.experts_per_token * a.expert_parameters()) as f64;
        let active = a.active_parameters() as f64;
        active / ((active - experts) / self.peak_tflops + experts / e.peak_tflops)
    }
}

/// The architecture's terms of the step cost, folded into rates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeploymentCost {
    pub tensor_parallel: u32,
    pub layers: u64,
    /// `2 * layers * active_layer`.
    pub linear_flops_per_token: f64,
    /// `4 * layers * q_dim` (MLA: its prefill form, docs/deployments.md).
    pub attention_flops_per_pair: f64,
    /// MLA only: FLOPs per pair of a decode, in the absorbed form; other
    /// attention prices decode pairs as prefill ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_attention_flops_per_pair: Option<f64>,
    /// `2 * hidden * vocab_size`.
    pub head_flops_per_sample: f64,
    /// The sliding-window layers' window (0 without them).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub sliding_window: u64,
    /// Sliding-window layers: `4 * sliding_layers * q_dim`, and their KV
    /// bytes a token on one GPU (both 0 without them).
    #[serde(skip_serializing_if = "is_zero")]
    pub window_attention_flops_per_pair: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub window_kv_bytes_per_token: f64,
    pub experts: u64,
    pub experts_per_token: u64,
    /// Experts touched by a step's tokens, by table.
    #[serde(skip)]
    pub touched: TouchedExperts,
    /// Bytes every step reads on one GPU: all weights but the experts', over `t`.
    pub always_read_bytes: f64,
    /// Bytes of one expert in every layer on one GPU, per expert touched.
    pub expert_read_bytes: f64,
    /// `2 * layers * latency` (0 at `t = 1`).
    pub comm_fixed_s: f64,
    /// `2 * layers * 2*(t-1)/t * hidden * 2 / bandwidth`, per token (0 at `t = 1`).
    pub comm_s_per_token: f64,
    /// `layers * per_layer_overhead`.
    pub layers_overhead_s: f64,
    /// The per-operator form, when the scenario uses it (it then prices
    /// every step).
    pub operators: Option<super::operators::Operators>,
    /// Data and expert parallelism's terms, when used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wide: Option<WideCost>,
}

/// [`Wide`] folded into rates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WideCost {
    pub data: f64,
    pub expert: f64,
    pub expert_tensor: f64,
    pub imbalance: f64,
    /// `2 * moe_layers * experts_per_token * expert`: the routed experts'
    /// FLOPs a token (in `linear_flops_per_token`).
    pub expert_flops_per_token: f64,
    /// All-reduces inside a rank: one a layer after attention, one more a
    /// dense layer (0 at `tensor` 1): fixed seconds, and seconds a token of
    /// the rank.
    pub rank_allreduce_fixed_s: f64,
    pub rank_allreduce_s_per_token: f64,
    /// All-to-all of the mixture-of-experts layers (0 with one rank, where
    /// the experts' outputs join the attention's all-reduce as under
    /// tensor parallelism): `2 * moe_layers * latency`, and seconds a
    /// token of the engine.
    pub all_to_all_fixed_s: f64,
    pub all_to_all_s_per_token: f64,
}

/// What a step of the wide form spends on communication, seconds.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct WideComm {
    pub allreduce_s: f64,
    pub all_to_all_s: f64,
}

impl DeploymentCost {
    /// `rates` are the common inputs the per-operator form needs.
    pub fn new(d: &DeploymentInput, bytes_per_parameter: f64, rates: &super::operators::Rates) -> DeploymentCost {
        let a = &d.architecture;
        let t = f64::from(d.tensor_parallel);
        let layers = a.layers as f64;
        let experts = a.all_expert_parameters() as f64;
        let expert_bpp = d.expert_weights.map_or(bytes_per_parameter, |e| e.bytes_per_parameter);
        let (comm_fixed_s, comm_s_per_token) = match d.link {
            Some(link) if d.tensor_parallel > 1 => (
                2.0 * layers * link.latency_us * 1e-6,
                2.0 * layers * (2.0 * (t - 1.0) / t) * (a.hidden_size as f64 * 2.0) / (link.bandwidth_gbps * 1e9),
            ),
            _ => (0.0, 0.0),
        };
        let wide = d.wide.map(|w| WideCost::new(a, d, &w));
        let operators = d.operators.as_ref().map(|o| {
            let wide_ops = wide.as_ref().map(|w| super::operators::WideOperators {
                data: w.data,
                expert: w.expert,
                expert_tensor: w.expert_tensor,
                imbalance: w.imbalance,
                allreduce_calls: (a.layers + if w.data > 1.0 { a.dense_layers() } else { a.layers }) as f64,
                all_to_all_fixed_s: w.all_to_all_fixed_s,
                all_to_all_s_per_token: w.all_to_all_s_per_token,
            });
            let (a, t, link) = (&d.architecture, d.tensor_parallel, d.link);
            super::operators::Operators::new(a, t, link, rates, o, d.expert_weights, wide_ops)
        });
        DeploymentCost {
            tensor_parallel: d.tensor_parallel,
            layers: a.layers,
            linear_flops_per_token: a.linear_flops_per_token() as f64,
            attention_flops_per_pair: a.attention_flops_per_pair() as f64,
            decode_attention_flops_per_pair: a.mla.map(|_| a.decode_attention_flops_per_pair() as f64),
            head_flops_per_sample: a.head_flops_per_sample() as f64,
            sliding_window: if d.window_kv_bytes_per_token > 0 { d.sliding_window } else { 0 },
            window_attention_flops_per_pair: a.window_attention_flops_per_pair() as f64,
            window_kv_bytes_per_token: d.window_kv_bytes_per_token as f64,
            experts: a.experts,
            experts_per_token: a.experts_per_token,
            // One table a model: the per-operator terms built theirs.
            touched: operators
                .as_ref()
                .map_or_else(|| TouchedExperts::new(a.experts, a.experts_per_token), |o| o.touched.clone()),
            always_read_bytes: (d.parameters - experts) * bytes_per_parameter / t,
            expert_read_bytes: (a.moe_layers() * a.expert_parameters()) as f64 * expert_bpp / t,
            comm_fixed_s,
            comm_s_per_token,
            layers_overhead_s: layers * d.per_layer_overhead_us / 1e6,
            wide,
            operators,
        }
    }

    /// Weight bytes one GPU reads in a step of `tokens` tokens.
    pub fn weight_read_bytes(&self, tokens: u64) -> f64 {
        if self.experts == 0 {
            return self.always_read_bytes;
        }
        self.always_read_bytes + self.touched.at(tokens) * self.expert_read_bytes
    }

    /// The all-reduces of a step of `tokens` tokens.
    pub fn comm_s(&self, tokens: u64) -> f64 {
        self.comm_fixed_s + self.comm_s_per_token * tokens as f64
    }

    /// Out of line: the docs/engine.md path never calls it.
    #[inline(never)]
    pub fn cost(&self, m: &CostModel, s: &StepShape) -> StepCost {
        if let Some(ops) = &self.operators {
            return ops.cost(m, s);
        }
        if let Some(w) = &self.wide {
            return self.wide_cost(w, m, s);
        }
        let mut flops = self.linear_flops_per_token * s.tokens as f64
            + s.attention_flops(self.attention_flops_per_pair, self.decode_attention_flops_per_pair)
            + self.head_flops_per_sample * s.sampled as f64;
        let mut read = self.weight_read_bytes(s.tokens) + s.sum_ctx as f64 * m.kv_bytes_per_token;
        if s.window_ctx > 0 {
            flops += self.window_attention_flops_per_pair * s.window_pairs as f64;
            read += s.window_ctx as f64 * self.window_kv_bytes_per_token;
        }
        let compute_s = flops / m.flops_per_s;
        let memory_s = read / m.bytes_per_s;
        let comm_s = self.comm_s(s.tokens);
        let overhead_s = m.overhead_s + self.layers_overhead_s + s.batch as f64 * m.per_sequence_s;
        StepCost { compute_s, memory_s, comm_s, overhead_s, total_s: compute_s.max(memory_s) + comm_s + overhead_s }
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

impl WideCost {
    fn new(a: &Architecture, d: &DeploymentInput, w: &Wide) -> WideCost {
        let t = f64::from(d.tensor_parallel);
        let hidden_bytes = a.hidden_size as f64 * 2.0;
        let (rank_allreduce_fixed_s, rank_allreduce_s_per_token) = match d.link {
            Some(link) if d.tensor_parallel > 1 => {
                // With one rank the experts' outputs are summed by an
                // all-reduce, as under tensor parallelism.
                let second = if w.data > 1 { a.dense_layers() } else { a.layers };
                let calls = (a.layers + second) as f64;
                (
                    calls * link.latency_us * 1e-6,
                    calls * (2.0 * (t - 1.0) / t) * hidden_bytes / (link.bandwidth_gbps * 1e9),
                )
            }
            _ => (0.0, 0.0),
        };
        let e = f64::from(w.expert);
        let (all_to_all_fixed_s, all_to_all_s_per_token) = match w.expert_link {
            // A token of the engine: one GPU of `e` dispatches `1/e` of
            // them, each to `experts_per_token` experts, `(e-1)/e` of them
            // off the GPU, 16-bit activations; the combine sends them back.
            Some(link) if w.data > 1 && w.expert > 1 => {
                let calls = 2.0 * a.moe_layers() as f64;
                let bytes = a.experts_per_token as f64 * hidden_bytes * (e - 1.0) / e / e * w.imbalance;
                (calls * link.latency_us * 1e-6, calls * bytes / (link.bandwidth_gbps * 1e9))
            }
            _ => (0.0, 0.0),
        };
        WideCost {
            data: f64::from(w.data),
            expert: e,
            expert_tensor: f64::from(w.expert_tensor),
            imbalance: w.imbalance,
            expert_flops_per_token: 2.0 * (a.moe_layers() * a.experts_per_token * a.expert_parameters()) as f64,
            rank_allreduce_fixed_s,
            rank_allreduce_s_per_token,
            all_to_all_fixed_s,
            all_to_all_s_per_token,
        }
    }
}

impl DeploymentCost {
    /// The communication of a wide step of `tokens` tokens (the engine's).
    pub fn wide_comm(&self, tokens: u64) -> Option<WideComm> {
        let w = self.wide.as_ref()?;
        if tokens == 0 {
            return Some(WideComm::default());
        }
        let n = tokens as f64;
        Some(WideComm {
            allreduce_s: w.rank_allreduce_fixed_s + w.rank_allreduce_s_per_token * n / w.data,
            all_to_all_s: w.all_to_all_fixed_s + w.all_to_all_s_per_token * n,
        })
    }

    /// The roofline of one GPU of a wide engine: its rank's `1/data` of
    /// the batch through attention and the rest over `tensor` GPUs, its
    /// `1/expert` of the experts' tokens (times the imbalance), the
    /// weights it holds and touches, its rank's KV.
    fn wide_cost(&self, w: &WideCost, m: &CostModel, s: &StepShape) -> StepCost {
        let t = f64::from(self.tensor_parallel);
        let n = s.tokens as f64;
        let rank_flops = (self.linear_flops_per_token - w.expert_flops_per_token) * n
            + s.attention_flops(self.attention_flops_per_pair, self.decode_attention_flops_per_pair)
            + self.head_flops_per_sample * s.sampled as f64
            + self.window_attention_flops_per_pair * s.window_pairs as f64;
        // A GPU holds `1/expert` of the experts, `1/expert_tensor` of each.
        let shards = w.expert * w.expert_tensor;
        let gpu_flops = rank_flops / (w.data * t) + w.expert_flops_per_token * n * w.imbalance / shards;
        // `m.flops_per_s` is the rank's `tensor` GPUs together.
        let compute_s = gpu_flops * t / m.flops_per_s;
        let touched = self.touched.at(s.tokens);
        let read = self.always_read_bytes
            + touched * self.expert_read_bytes * t / shards
            + (s.sum_ctx as f64 * m.kv_bytes_per_token + s.window_ctx as f64 * self.window_kv_bytes_per_token) / w.data;
        let memory_s = read / m.bytes_per_s;
        let comm = self.wide_comm(s.tokens).unwrap_or_default();
        let comm_s = comm.allreduce_s + comm.all_to_all_s;
        let overhead_s = m.overhead_s + self.layers_overhead_s + s.batch as f64 / w.data * m.per_sequence_s;
        StepCost { compute_s, memory_s, comm_s, overhead_s, total_s: compute_s.max(memory_s) + comm_s + overhead_s }
    }
}

#[cfg(test)]
mod tests;
