//! The KV budget: how many KV blocks the engine has, computed once at start-up (docs/engine.md section 1; with
//! tensor parallelism, docs/deployments.md: each of `t` GPUs holds
//! `weight_bytes / t` of weights and its share of every token's KV).

use std::fmt;

/// `GiB` = 2^30 bytes.
pub const GIB: f64 = 1_073_741_824.0;

/// What the KV budget formula needs; all validated positive by the config.
#[derive(Clone, Debug, PartialEq)]
pub struct KvBudgetInput {
    pub hbm_gib: f64,
    pub gpu_memory_utilization: f64,
    /// The whole model's weights: `parameters * bytes_per_parameter`.
    pub weight_bytes: f64,
    /// GPUs the weights are split over (1 without tensor parallelism).
    pub tensor_parallel: u32,
    /// KV bytes per token on one GPU.
    pub kv_bytes_per_token: u64,
    pub block_size: u32,
    pub watermark: f64,
    /// `kv_cache.num_blocks`: measured capacity that overrides the formula.
    pub num_blocks_override: Option<u64>,
    /// Blocks each running request holds for its sliding-window layers
    /// beside its tokens' blocks (0 without them).
    pub window_blocks: u32,
    /// Data and expert parallelism: `data` ranks, each with the blocks one
    /// of its GPUs holds, and the routed experts' bytes spread over
    /// `expert` GPUs instead of split over `tensor_parallel`.
    pub wide: Option<WideKv>,
}

/// See [`KvBudgetInput::wide`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct WideKv {
    pub data: u32,
    pub expert: u32,
    pub expert_weight_bytes: f64,
}

/// The derived KV budget the engine runs with (shown as `capacity` in
/// the summary and the result JSON, whose names are the user's contract).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KvBudget {
    pub num_blocks: u32,
    pub block_size: u32,
    pub kv_tokens: u64,
    pub watermark_blocks: u32,
    /// Weight bytes on one GPU.
    pub weight_bytes: f64,
    /// Bytes left for KV on one GPU.
    pub usable_bytes: f64,
    pub block_bytes: u64,
    /// True when `kv_cache.num_blocks` was given instead of computed.
    pub overridden: bool,
    /// Blocks a request holds for its sliding-window layers, whatever its
    /// length (0 without them).
    #[serde(skip_serializing_if = "is_zero")]
    pub window_blocks: u32,
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

/// The weights (plus the reserved share) do not leave room for one block.
#[derive(Clone, Debug, PartialEq)]
pub struct KvBudgetError {
    pub weight_bytes: f64,
    pub budget_bytes: f64,
    pub block_bytes: u64,
}

impl fmt::Display for KvBudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.weight_bytes + self.block_bytes as f64 - self.budget_bytes;
        write!(
            f,
            "the model does not fit: weights take {:.2} GB of the {:.2} GB that \
             hbm_gib x gpu_memory_utilization allows, leaving no room for one KV block \
             of {} bytes (short by {:.2} GB); use a larger GPU, a higher \
             gpu_memory_utilization, fewer bytes_per_parameter, or set kv_cache.num_blocks",
            self.weight_bytes / 1e9,
            self.budget_bytes / 1e9,
            self.block_bytes,
            short / 1e9
        )
    }
}

impl KvBudget {
    pub fn compute(input: &KvBudgetInput) -> Result<KvBudget, KvBudgetError> {
        let weight_bytes = match input.wide {
            None => input.weight_bytes / f64::from(input.tensor_parallel.max(1)),
            Some(w) => {
                (input.weight_bytes - w.expert_weight_bytes) / f64::from(input.tensor_parallel.max(1))
                    + w.expert_weight_bytes / f64::from(w.expert.max(1))
            }
        };
        let ranks = input.wide.map_or(1, |w| u64::from(w.data.max(1)));
        let budget_bytes = input.hbm_gib * GIB * input.gpu_memory_utilization;
        let usable_bytes = budget_bytes - weight_bytes;
        let block_bytes = input.kv_bytes_per_token * u64::from(input.block_size);
        let (blocks, overridden) = match input.num_blocks_override {
            Some(n) => (n, true),
            None => {
                let n = (usable_bytes / block_bytes as f64).floor();
                if n < 1.0 {
                    return Err(KvBudgetError { weight_bytes, budget_bytes, block_bytes });
                }
                // Each rank holds its own requests' KV: its GPU's blocks.
                ((n as u64).saturating_mul(ranks), false)
            }
        };
        // u32 blocks address 2^32 * block_size tokens: far beyond any GPU.
        let num_blocks = blocks.min(u64::from(u32::MAX)) as u32;
        let watermark_blocks = (input.watermark * f64::from(num_blocks)).floor() as u32;
        Ok(KvBudget {
            num_blocks,
            block_size: input.block_size,
            kv_tokens: u64::from(num_blocks) * u64::from(input.block_size),
            watermark_blocks,
            weight_bytes,
            usable_bytes,
            block_bytes,
            overridden,
            window_blocks: input.window_blocks,
        })
    }

    /// Blocks that hold `tokens` tokens, and the window's (a request's
    /// sliding-window layers) beside them.
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.block_size)) + u64::from(self.window_blocks)
    }

    /// Tokens of KV `blocks` held by a request cover (its window's blocks
    /// hold none of them).
    pub fn tokens_in(&self, blocks: u32) -> u64 {
        u64::from(blocks.saturating_sub(self.window_blocks)) * u64::from(self.block_size)
    }

    /// The admission rule's bound (docs/engine.md section 3, step 3): a
    /// request whose known length needs more blocks than this (the blocks
    /// beside the watermark) never fits and is rejected.
    pub fn admissible_blocks(&self) -> u64 {
        u64::from(self.num_blocks.saturating_sub(self.watermark_blocks))
    }

    /// The longest request (prompt + output tokens) that is never
    /// rejected once admitted: [`KvBudget::admissible_blocks`] full blocks.
    pub fn admissible_tokens(&self) -> u64 {
        self.admissible_blocks() * u64::from(self.block_size)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn base_input() -> KvBudgetInput {
        KvBudgetInput {
            hbm_gib: 80.0,
            gpu_memory_utilization: 0.9,
            weight_bytes: 6.74 * 1e9 * 2.0,
            tensor_parallel: 1,
            kv_bytes_per_token: 524_288,
            block_size: 16,
            watermark: 0.01,
            num_blocks_override: None,
            window_blocks: 0,
            wide: None,
        }
    }

    #[test]
    fn base_model_has_7609_blocks_121744_tokens_and_76_watermark_blocks() {
        let cap = KvBudget::compute(&base_input()).unwrap();
        assert_eq!(cap.num_blocks, 7_609);
        assert_eq!(cap.kv_tokens, 121_744);
        assert_eq!(cap.watermark_blocks, 76);
        // (7,609 - 76) blocks of 16 tokens.
        assert_eq!((cap.admissible_blocks(), cap.admissible_tokens()), (7_533, 120_528));
        assert_eq!(cap.weight_bytes, 13.48e9);
    }

    #[test]
    fn num_blocks_override_replaces_the_formula() {
        let mut input = base_input();
        input.num_blocks_override = Some(6_750);
        let cap = KvBudget::compute(&input).unwrap();
        assert_eq!((cap.num_blocks, cap.kv_tokens, cap.watermark_blocks), (6_750, 108_000, 67));
        assert!(cap.overridden);
    }

    #[test]
    fn weights_larger_than_memory_is_an_error_naming_the_numbers() {
        let mut input = base_input();
        input.hbm_gib = 12.0;
        let err = KvBudget::compute(&input).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("13.48 GB"), "{msg}");
        assert!(msg.contains("11.60 GB"), "{msg}");
        assert!(msg.contains("short by"), "{msg}");
    }

    #[test]
    fn llama_3_1_8b_on_an_h100_has_29_205_blocks() {
        // (80 GiB * 0.9 - 8,030,261,248 * 2) / (131,072 * 16)
        // = (77,309,411,328 - 16,060,522,496) / 2,097,152 = 29,205.3
        let input = KvBudgetInput {
            weight_bytes: 8_030_261_248.0 * 2.0,
            kv_bytes_per_token: 131_072,
            hbm_gib: 80.0,
            ..base_input()
        };
        assert_eq!(KvBudget::compute(&input).unwrap().num_blocks, 29_205);
    }

    #[test]
    fn tensor_parallel_gpus_each_hold_a_share_of_the_weights_and_of_the_kv() {
        // Llama 3.1 70B: 141,107,412,992 bytes of weights; KV a token per GPU
        // 2*80*ceil(8/t)*128*2. Blocks = floor((77,309,411,328 - weights/t) / (kv*16)).
        let cases = [
            // (77,309,411,328 - 70,553,706,496) / (163,840*16) = 6,755,704,832 / 2,621,440 = 2,577.1
            (2, 163_840, 2_577),
            // (77,309,411,328 - 35,276,853,248) / 1,310,720 = 32,068.3
            (4, 81_920, 32_068),
            // (77,309,411,328 - 17,638,426,624) / 655,360 = 91,050.4
            (8, 40_960, 91_050),
        ];
        for (t, kv, blocks) in cases {
            let input = KvBudgetInput {
                weight_bytes: 141_107_412_992.0,
                tensor_parallel: t,
                kv_bytes_per_token: kv,
                ..base_input()
            };
            let cap = KvBudget::compute(&input).unwrap();
            assert_eq!(cap.num_blocks, blocks, "TP {t}");
            assert_eq!(cap.weight_bytes, 141_107_412_992.0 / f64::from(t));
        }
        // TP 1: 141.1 GB of weights against 77.3 GB
        let one = KvBudgetInput { weight_bytes: 141_107_412_992.0, kv_bytes_per_token: 327_680, ..base_input() };
        assert!(KvBudget::compute(&one).is_err());
    }
}
