//! A transformer's shape and what follows from it (docs/deployments.md):
//! parameter counts, KV bytes per token, and the FLOPs of a step.
//!
//! The formulas count weight matrices only: no biases, gated MLPs (three
//! matrices), two norms a layer and a final one, the embedding and an
//! untied LM head. A mixture-of-experts layer holds every expert, a router
//! (`hidden x experts`) and an optional shared expert; a token runs
//! `experts_per_token` of them. Everything is integer arithmetic on `u64`:
//! the largest model shipped (405 B parameters) is far below 2^64.

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
}

fn is_zero(x: &u64) -> bool {
    *x == 0
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

    /// Q, K, V and O projections of one layer.
    pub fn attention_parameters(&self) -> u64 {
        let h = self.hidden_size;
        h * self.q_dim() + 2 * h * self.kv_dim() + self.q_dim() * h
    }

    /// One dense gated MLP: `3 * hidden * intermediate_size`.
    pub fn mlp_parameters(&self) -> u64 {
        3 * self.hidden_size * self.intermediate_size.unwrap_or(0)
    }

    /// One expert: `3 * hidden * expert_intermediate_size`.
    pub fn expert_parameters(&self) -> u64 {
        3 * self.hidden_size * self.expert_intermediate_size
    }

    /// The router plus the shared expert of one MoE layer.
    fn router_and_shared(&self) -> u64 {
        self.hidden_size * self.experts + 3 * self.hidden_size * self.shared_expert_intermediate_size
    }

    /// One layer's MLP part: the dense MLP, or every expert plus router and shared expert.
    fn ffn_parameters(&self) -> u64 {
        if self.is_moe() {
            self.experts * self.expert_parameters() + self.router_and_shared()
        } else {
            self.mlp_parameters()
        }
    }

    /// One layer's MLP part as one token sees it: `experts_per_token` experts.
    fn active_ffn_parameters(&self) -> u64 {
        if self.is_moe() {
            self.experts_per_token * self.expert_parameters() + self.router_and_shared()
        } else {
            self.mlp_parameters()
        }
    }

    pub fn layer_parameters(&self) -> u64 {
        self.attention_parameters() + self.ffn_parameters()
    }

    /// The weights one token multiplies in one layer.
    pub fn active_layer_parameters(&self) -> u64 {
        self.attention_parameters() + self.active_ffn_parameters()
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
        self.layers * self.layer_parameters() + self.embedding_parameters() + self.norm_parameters()
    }

    /// The weights one token uses (all of them for a dense model).
    pub fn active_parameters(&self) -> u64 {
        self.layers * self.active_layer_parameters() + self.embedding_parameters() + self.norm_parameters()
    }

    /// Expert weights over all layers: the part of the model a step may skip.
    pub fn all_expert_parameters(&self) -> u64 {
        self.layers * self.experts * self.expert_parameters()
    }

    /// KV heads each of `tensor` GPUs holds: `ceil(kv_heads / tensor)`
    /// (heads are replicated when `tensor` exceeds them).
    pub fn kv_heads_per_gpu(&self, tensor: u64) -> u64 {
        self.kv_heads.div_ceil(tensor.max(1))
    }

    /// Bytes of K and V per token on one of `tensor` GPUs:
    /// `2 * layers * ceil(kv_heads / tensor) * head_dim * element_bytes`.
    pub fn kv_bytes_per_token(&self, element_bytes: u64, tensor: u64) -> u64 {
        2 * self.layers * self.kv_heads_per_gpu(tensor) * self.head_dim * element_bytes
    }

    /// FLOPs of the linear layers per token computed: `2 * layers * active_layer`.
    pub fn linear_flops_per_token(&self) -> u64 {
        2 * self.layers * self.active_layer_parameters()
    }

    /// FLOPs of causal attention (QK^T and AV) per (query, key) pair:
    /// `4 * layers * q_dim`.
    pub fn attention_flops_per_pair(&self) -> u64 {
        4 * self.layers * self.q_dim()
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
