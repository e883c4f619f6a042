//! A transformer's shape and what follows from it (docs/deployments.md):
//! parameter counts, KV bytes per token, and the FLOPs of a step.
//!
//! The formulas count weight matrices only: no biases, gated MLPs (three
//! matrices), two norms a layer and a final one, the embedding and an
//! untied LM head. A mixture-of-experts layer holds every expert, a router
//! (`hidden x experts`) and an optional shared expert; a token runs
//! `experts_per_token` of them; the first `first_dense_layers` layers of a
//! mixture of experts (DeepSeek's `first_k_dense_replace`) have a dense MLP
//! instead. Multi-head latent attention ([`Mla`]) replaces the Q, K, V and
//! O projections by low-rank ones and caches one latent vector a token a
//! layer. Everything is integer arithmetic on `u64`: the largest model
//! shipped (about a trillion parameters) is far below 2^64.

use serde::Serialize;

/// A validated architecture: every default filled in (see the config).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Architecture {
    pub layers: u64,
    pub hidden_size: u64,
    pub attention_heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// The dense MLP's width; absent for a mixture of experts that gives
    /// `expert_intermediate_size` instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intermediate_size: Option<u64>,
    pub vocab_size: u64,
    pub tie_word_embeddings: bool,
    /// 0 for a dense model.
    pub experts: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub experts_per_token: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub expert_intermediate_size: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub shared_expert_intermediate_size: u64,
    /// Leading layers with a dense MLP in a mixture of experts
    /// (`first_k_dense_replace`); 0 when every layer has experts.
    #[serde(skip_serializing_if = "is_zero")]
    pub first_dense_layers: u64,
    /// Multi-head latent attention; `head_dim` is then
    /// `qk_nope_head_dim + qk_rope_head_dim` and `kv_heads` the heads.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    /// Sliding-window attention: a layer of this kind attends to the last
    /// `sliding_window` tokens only and keeps only their KV (0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub sliding_window: u64,
    /// How many of the layers are sliding-window ones (`layer_types`).
    #[serde(skip_serializing_if = "is_zero")]
    pub sliding_layers: u64,
    /// Biases on Q, K, V and O (HF's `attention_bias`; gpt-oss).
    #[serde(skip_serializing_if = "is_false")]
    pub attention_bias: bool,
    /// Biases on the MLPs, experts and router (gpt-oss).
    #[serde(skip_serializing_if = "is_false")]
    pub mlp_bias: bool,
    /// A learned sink logit per head a layer (gpt-oss): weights, no KV.
    #[serde(skip_serializing_if = "is_false")]
    pub attention_sinks: bool,
    /// Multi-token-prediction modules (DeepSeek's `num_nextn_predict_layers`):
    /// weights of the checkpoint that the engines load only to draft tokens
    /// for speculative decoding, so not in [`Architecture::parameters`]
    /// ([`Architecture::mtp_parameters`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub mtp_layers: u64,
}

/// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): Q through a
/// rank-`q_lora_rank` bottleneck (none when 0), K and V from one
/// `kv_lora_rank` latent a token plus a shared `qk_rope_head_dim` RoPE key.
/// The cache holds the latent and the RoPE key: `kv_lora_rank +
/// qk_rope_head_dim` elements a token a layer, the same on every GPU of a
/// tensor-parallel group (vLLM replicates it).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mla {
    pub kv_lora_rank: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub q_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn is_false(x: &bool) -> bool {
    !*x
}

impl Architecture {
    pub fn is_moe(&self) -> bool {
        self.experts > 0
    }

    /// `attention_heads * head_dim`.
    pub fn q_dim(&self) -> u64 {
        self.attention_heads * self.head_dim
    }

    /// `kv_heads * head_dim`.
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    /// Q, K, V and O projections of one layer. With MLA: `q_a` (`hidden x
    /// q_lora`, or none) and `q_b` (`q_lora x heads*(nope+rope)`, or
    /// `hidden x ...` without a Q bottleneck), `kv_a` (`hidden x
    /// (kv_lora+rope)`), `kv_b` (`kv_lora x heads*(nope+v)`), `o`
    /// (`heads*v x hidden`), and the two latent norms (`q_lora + kv_lora`).
    pub fn attention_parameters(&self) -> u64 {
        let h = self.hidden_size;
        let Some(m) = &self.mla else {
            let bias = if self.attention_bias { self.q_dim() + 2 * self.kv_dim() + h } else { 0 };
            let sinks = if self.attention_sinks { self.attention_heads } else { 0 };
            return h * self.q_dim() + 2 * h * self.kv_dim() + self.q_dim() * h + bias + sinks;
        };
        let heads = self.attention_heads;
        let q = match m.q_lora_rank {
            0 => h * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim),
            r => h * r + r * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) + r,
        };
        let kv = h * (m.kv_lora_rank + m.qk_rope_head_dim)
            + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
            + m.kv_lora_rank;
        q + kv + heads * m.v_head_dim * h
    }

    /// Layers with experts: all but the first `first_dense_layers` of a
    /// mixture of experts, none of a dense model.
    pub fn moe_layers(&self) -> u64 {
        if self.is_moe() { self.layers - self.first_dense_layers } else { 0 }
    }

    /// Layers with a dense MLP.
    pub fn dense_layers(&self) -> u64 {
        self.layers - self.moe_layers()
    }

    /// A gated MLP of width `i`: `3 * hidden * i`, plus `2i + hidden` of
    /// biases with `mlp_bias`.
    fn gated_mlp(&self, i: u64) -> u64 {
        let bias = if self.mlp_bias && i > 0 { 2 * i + self.hidden_size } else { 0 };
        3 * self.hidden_size * i + bias
    }

    /// One dense gated MLP: `3 * hidden * intermediate_size`.
    pub fn mlp_parameters(&self) -> u64 {
        self.gated_mlp(self.intermediate_size.unwrap_or(0))
    }

    /// One expert: `3 * hidden * expert_intermediate_size`.
    pub fn expert_parameters(&self) -> u64 {
        self.gated_mlp(self.expert_intermediate_size)
    }

    /// The router plus the shared expert of one MoE layer.
    fn router_and_shared(&self) -> u64 {
        let router_bias = if self.mlp_bias { self.experts } else { 0 };
        self.hidden_size * self.experts + router_bias + self.gated_mlp(self.shared_expert_intermediate_size)
    }

    /// One expert layer's MLP part: every expert plus router and shared expert.
    fn moe_ffn_parameters(&self) -> u64 {
        self.experts * self.expert_parameters() + self.router_and_shared()
    }

    /// One expert layer's MLP part as one token sees it: `experts_per_token` experts.
    fn active_moe_ffn_parameters(&self) -> u64 {
        self.experts_per_token * self.expert_parameters() + self.router_and_shared()
    }

    /// A layer with experts (a dense model's layer when it has none).
    pub fn layer_parameters(&self) -> u64 {
        let ffn = if self.is_moe() { self.moe_ffn_parameters() } else { self.mlp_parameters() };
        self.attention_parameters() + ffn
    }

    /// The weights one token multiplies in a layer with experts (in a
    /// dense model's layer when it has none).
    pub fn active_layer_parameters(&self) -> u64 {
        let ffn = if self.is_moe() { self.active_moe_ffn_parameters() } else { self.mlp_parameters() };
        self.attention_parameters() + ffn
    }

    /// Every layer's weights: `layers * attention + dense_layers * mlp +
    /// moe_layers * (experts * expert + router + shared)`.
    pub fn all_layer_parameters(&self) -> u64 {
        self.layers * self.attention_parameters()
            + self.dense_layers() * self.mlp_parameters()
            + self.moe_layers() * self.moe_ffn_parameters()
    }

    /// The layers' weights one token multiplies: as
    /// [`Architecture::all_layer_parameters`] with `experts_per_token` experts.
    pub fn active_all_layer_parameters(&self) -> u64 {
        self.layers * self.attention_parameters()
            + self.dense_layers() * self.mlp_parameters()
            + self.moe_layers() * self.active_moe_ffn_parameters()
    }

    /// The embedding, plus the LM head unless it is tied to it.
    pub fn embedding_parameters(&self) -> u64 {
        self.vocab_size * self.hidden_size * if self.tie_word_embeddings { 1 } else { 2 }
    }

    /// Two norms a layer and the final one.
    pub fn norm_parameters(&self) -> u64 {
        (2 * self.layers + 1) * self.hidden_size
    }

    /// Every weight of the model.
    pub fn parameters(&self) -> u64 {
        self.all_layer_parameters() + self.embedding_parameters() + self.norm_parameters()
    }

    /// The multi-token-prediction modules' weights, DeepSeek-V3's layout:
    /// each is one more layer of the model's last kind (with experts in a
    /// mixture of experts) and its two norms, the projection of the joined
    /// embedding and hidden state (`2 hidden x hidden`), three norms
    /// (`enorm`, `hnorm`, the shared head's), and its own copy of the
    /// embedding and LM head (the checkpoint stores them; vLLM loads them).
    pub fn mtp_parameters(&self) -> u64 {
        let h = self.hidden_size;
        let layer = self.layer_parameters() + 2 * h;
        self.mtp_layers * (layer + 2 * h * h + 3 * h + self.vocab_size * h * 2)
    }

    /// The weights one token uses (all of them for a dense model).
    pub fn active_parameters(&self) -> u64 {
        self.active_all_layer_parameters() + self.embedding_parameters() + self.norm_parameters()
    }

    /// Expert weights over all layers: the part of the model a step may skip.
    pub fn all_expert_parameters(&self) -> u64 {
        self.moe_layers() * self.experts * self.expert_parameters()
    }

    /// KV heads each of `tensor` GPUs holds: `ceil(kv_heads / tensor)`
    /// (heads are replicated when `tensor` exceeds them).
    pub fn kv_heads_per_gpu(&self, tensor: u64) -> u64 {
        self.kv_heads.div_ceil(tensor.max(1))
    }

    /// Layers attending to the whole context (all but the sliding-window ones).
    pub fn full_layers(&self) -> u64 {
        self.layers - self.sliding_layers
    }

    /// Bytes of K and V per token on one of `tensor` GPUs in the layers
    /// that keep every token (all layers without sliding windows):
    /// `2 * full_layers * ceil(kv_heads / tensor) * head_dim * element_bytes`;
    /// with MLA `layers * (kv_lora_rank + qk_rope_head_dim) * element_bytes`
    /// on every GPU.
    pub fn kv_bytes_per_token(&self, element_bytes: u64, tensor: u64) -> u64 {
        match &self.mla {
            Some(m) => self.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * element_bytes,
            None => 2 * self.full_layers() * self.kv_heads_per_gpu(tensor) * self.head_dim * element_bytes,
        }
    }

    /// The same for the sliding-window layers, which keep a token only
    /// while it is in the window: `2 * sliding_layers * ceil(kv_heads /
    /// tensor) * head_dim * element_bytes`.
    pub fn window_kv_bytes_per_token(&self, element_bytes: u64, tensor: u64) -> u64 {
        2 * self.sliding_layers * self.kv_heads_per_gpu(tensor) * self.head_dim * element_bytes
    }

    /// A GPU's share of `bytes` of KV a token given for the whole model:
    /// `ceil(bytes * ceil(kv_heads / tensor) / kv_heads)`, or all of it
    /// with MLA (the latent is not split).
    pub fn kv_bytes_on_gpu(&self, bytes: u64, tensor: u64) -> u64 {
        if self.mla.is_some() { bytes } else { (bytes * self.kv_heads_per_gpu(tensor)).div_ceil(self.kv_heads) }
    }

    /// FLOPs of the linear layers per token computed: `2 * active layer weights`.
    pub fn linear_flops_per_token(&self) -> u64 {
        2 * self.active_all_layer_parameters()
    }

    /// FLOPs of causal attention (QK^T and AV) per (query, key) pair of a
    /// prefill: `4 * layers * q_dim`; with MLA, K and V expanded from the
    /// latent: `2 * layers * heads * (nope + rope + v)`.
    pub fn attention_flops_per_pair(&self) -> u64 {
        match &self.mla {
            Some(m) => {
                2 * self.layers * self.attention_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            }
            None => 4 * self.full_layers() * self.q_dim(),
        }
    }

    /// The same for the sliding-window layers, per pair inside the window:
    /// `4 * sliding_layers * q_dim`.
    pub fn window_attention_flops_per_pair(&self) -> u64 {
        4 * self.sliding_layers * self.q_dim()
    }

    /// FLOPs per pair of a decode (a request computing one token): as
    /// [`Architecture::attention_flops_per_pair`], except with MLA, which
    /// decodes in the absorbed form vLLM and SGLang use (the query moved
    /// into the latent space, attention over `kv_lora + rope` keys and
    /// `kv_lora` values): `2 * layers * heads * (2 * kv_lora + rope)`.
    pub fn decode_attention_flops_per_pair(&self) -> u64 {
        match &self.mla {
            Some(m) => 2 * self.layers * self.attention_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim),
            None => self.attention_flops_per_pair(),
        }
    }

    /// FLOPs of the LM head per sampled token: `2 * hidden * vocab_size`.
    pub fn head_flops_per_sample(&self) -> u64 {
        2 * self.hidden_size * self.vocab_size
    }
}

/// (query, key) pairs of causal attention when `new` tokens are computed on
/// top of `cached` ones: `new * cached + new * (new + 1) / 2`.
pub fn attention_pairs(new: u64, cached: u64) -> u128 {
    let (n, c) = (u128::from(new), u128::from(cached));
    n * c + n * (n + 1) / 2
}

/// Of [`attention_pairs`], those of a decode: `c + 1` when `new` is 1, else 0.
pub fn decode_pairs(new: u64, cached: u64) -> u128 {
    if new == 1 { u128::from(cached) + 1 } else { 0 }
}

/// Tokens of KV a sliding-window layer reads when `new` tokens are
/// computed on top of `cached` ones: those of the first query's window
/// and every new one, `min(cached + new, window - 1 + new)`.
pub fn window_ctx(new: u64, cached: u64, window: u64) -> u64 {
    (cached + new).min(window.saturating_sub(1) + new)
}

/// (query, key) pairs of a sliding-window layer: query `p` (1-based
/// position) attends to `min(p, window)` keys, summed over `p = cached +
/// 1 ..= cached + new`.
pub fn window_pairs(new: u64, cached: u64, window: u64) -> u128 {
    let (c, end, w) = (u128::from(cached), u128::from(cached + new), u128::from(window));
    if end <= w {
        return attention_pairs(new, cached);
    }
    if c >= w {
        return u128::from(new) * w;
    }
    // positions c+1..=w grow, the rest see the whole window
    attention_pairs((w - c) as u64, cached) + (end - w) * w
}

/// [`touched_experts`] of one model, read from a table for the step sizes
/// below the one where it reaches `experts` (every expert touched, to the
/// last bit): a step's cost then needs no `pow` (6-12% of a MoE run's time
/// when computed each step). The table holds the very values
/// [`touched_experts`] gives, so the costs are the same bits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TouchedExperts {
    experts: u64,
    per_token: u64,
    /// `touched_experts(experts, per_token, t)` for `t < table.len()`.
    table: Vec<f64>,
    /// From this step size on (when the table ended there), every expert.
    all_from: Option<u64>,
}

/// Most entries of a [`TouchedExperts`] table (32 KiB); larger steps
/// compute theirs.
const TOUCHED_TABLE: u64 = 4096;

impl TouchedExperts {
    pub fn new(experts: u64, per_token: u64) -> TouchedExperts {
        let mut t = TouchedExperts { experts, per_token, table: Vec::new(), all_from: None };
        if experts == 0 {
            return t;
        }
        let all = experts as f64;
        for tokens in 0..TOUCHED_TABLE {
            let v = touched_experts(experts, per_token, tokens);
            // `1 - miss^T` is 1 exactly from here on (`miss^T` only falls).
            if v == all {
                t.all_from = Some(tokens);
                break;
            }
            t.table.push(v);
        }
        t
    }

    /// `touched_experts(experts, per_token, tokens)`.
    pub fn at(&self, tokens: u64) -> f64 {
        if let Some(v) = self.table.get(tokens as usize) {
            return *v;
        }
        match self.all_from {
            Some(from) if tokens >= from => self.experts as f64,
            _ => touched_experts(self.experts, self.per_token, tokens),
        }
    }
}

/// Experts a step of `tokens` tokens touches on average in one layer:
/// `experts * (1 - (1 - experts_per_token / experts)^tokens)`, each token
/// picking its experts independently and uniformly.
pub fn touched_experts(experts: u64, experts_per_token: u64, tokens: u64) -> f64 {
    if experts == 0 {
        return 0.0;
    }
    let e = experts as f64;
    let miss = 1.0 - experts_per_token as f64 / e;
    e * (1.0 - libm::pow(miss, tokens as f64))
}

#[cfg(test)]
pub(crate) mod tests;
