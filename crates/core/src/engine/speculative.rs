//! Speculative decoding as vLLM V1 runs it (docs/speculative.md).
//!
//! After every step in which a request samples a token, a drafter proposes
//! `k` draft tokens for it. In its next step the request is scheduled for
//! its last sampled token plus the drafts (`1 + k` tokens, counted in the
//! step's token budget and cut to what the budget leaves); the target model
//! verifies them in that one forward pass. Of `d` drafts, the leading `a`
//! that the target agrees with are kept, plus one token the target samples
//! after them, so the step releases `1 + a` tokens (no more than the
//! request still owes); the KV of the `d - a` rejected drafts is dropped
//! (its blocks stay allocated, the slots are overwritten later).
//!
//! Acceptance is drawn, not computed: draft `i` (0-based) is accepted with
//! probability `q_i` given every earlier one was. The draws of a request's
//! step come from a ChaCha stream keyed by the seed, the request's id and
//! its generated-token count, so a request accepts the same drafts at the
//! same point of its answer whatever else runs beside it, and a run is
//! reproducible to the byte.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::cost::{CostModel, StepShape};
use super::events::RequestId;

/// The most draft tokens a step proposes (vLLM's examples use up to 7;
/// beyond this the draws of one step could overlap the next's).
pub const MAX_TOKENS: u32 = 32;

/// Speculative decoding's rules and costs, derived once from the config.
#[derive(Clone, Debug, PartialEq)]
pub struct Speculative {
    /// `k` (vLLM's `num_speculative_tokens`), 1 to [`MAX_TOKENS`].
    pub tokens: u32,
    /// `q_i` for `i` in `0..k`: the probability that draft `i` is accepted
    /// given that drafts `0..i` were. vLLM's per-position acceptance rate
    /// `r_i` is their running product.
    pub accept: Vec<f64>,
    /// Seeds the acceptance draws.
    pub seed: u64,
    /// KV slots a running request is given beyond the tokens it is
    /// scheduled for (vLLM's `num_lookahead_tokens`: `k` for drafters that
    /// run on the GPU and write KV, 0 for n-gram).
    pub lookahead: u32,
    /// The drafter's forward passes, or `None` when drafting costs the GPU
    /// nothing (n-gram matching runs on the CPU, overlapped).
    pub draft: Option<Box<CostModel>>,
}

/// The drafter's passes over one step ([`Speculative::draft_time`]).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct DraftPasses {
    /// The first pass, over every token the target computed in the step.
    pub first_s: f64,
    /// Each of the `k - 1` later passes, one token a drafting request.
    pub later_s: f64,
    /// `first_s + (k - 1) * later_s`.
    pub total_s: f64,
}

impl Speculative {
    /// The expected tokens a verify step releases with all `k` drafts
    /// scheduled: `1 + r_0 + ... + r_{k-1}` (vLLM's mean acceptance length).
    pub fn mean_acceptance_length(&self) -> f64 {
        1.0 + self.position_rates().iter().sum::<f64>()
    }

    /// `r_i`: the share of steps with `k` drafts whose draft `i` is
    /// accepted (vLLM's per-position acceptance rate).
    pub fn position_rates(&self) -> Vec<f64> {
        let mut r = 1.0;
        self.accept
            .iter()
            .map(|q| {
                r *= q;
                r
            })
            .collect()
    }

    /// A fresh generator for the draws ([`Speculative::accepted`]).
    pub fn rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.seed)
    }

    /// How many of `drafted` drafts request `id` keeps in the step after
    /// its `generated`-th token: the leading run of accepted draws.
    /// Stream `id`, words from `2 * MAX_TOKENS * generated` on: each
    /// `(request, generated)` pair owns its own draws, and `generated`
    /// grows by at least one from a request's step to its next.
    pub fn accepted(&self, rng: &mut ChaCha8Rng, id: RequestId, generated: u32, drafted: u32) -> u32 {
        rng.set_stream(id);
        rng.set_word_pos(u128::from(generated) * 2 * u128::from(MAX_TOKENS));
        let mut kept = 0;
        for &q in self.accept.iter().take(drafted as usize) {
            let u: f64 = rng.random();
            if u >= q {
                break;
            }
            kept += 1;
        }
        kept
    }

    /// The drafter's time in a step of shape `s` (the target's), of which
    /// `drafting` requests sample a token and propose drafts, holding
    /// `drafting_ctx` tokens of KV after the step: a first pass over the
    /// step's tokens (the drafter reads the target's hidden states of
    /// every position, so it keeps its own KV whole), then `k - 1` passes
    /// of one token for each drafting request (vLLM's EAGLE proposer, which
    /// its draft-model and MTP proposers follow).
    pub fn draft_time(&self, s: &StepShape, drafting: u64, drafting_ctx: u64) -> DraftPasses {
        let Some(model) = &self.draft else { return DraftPasses::default() };
        if s.tokens == 0 {
            return DraftPasses::default();
        }
        let first_s = model.cost(s).total_s;
        let later_s = if drafting == 0 || self.tokens < 2 {
            0.0
        } else {
            // Pass j reads one more token of KV for each request than pass
            // j - 1; priced at the middle pass's context.
            let ctx = drafting_ctx + drafting * u64::from(self.tokens) / 2;
            let pairs = u128::from(ctx);
            let later = StepShape {
                tokens: drafting,
                sum_ctx: ctx,
                attention_pairs: pairs,
                decode_pairs: pairs,
                sampled: drafting,
                batch: drafting,
                largest: 1,
                ..StepShape::default()
            };
            model.cost(&later).total_s
        };
        let total_s = first_s + f64::from(self.tokens - 1) * later_s;
        DraftPasses { first_s, later_s, total_s }
    }
}

/// A steady decode step of `b` requests at context `c` each, with and
/// without speculative decoding ([`Speculative::decode_vs_verify`]).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Comparison {
    /// One token each: the plain decode step, seconds.
    pub decode_s: f64,
    /// `k + 1` tokens each (the last sampled token and `k` drafts), seconds.
    pub verify_s: f64,
    /// The drafter's passes in that step, seconds.
    pub draft_s: f64,
    /// `(verify_s + draft_s) / mean_acceptance_length`: a token's share.
    pub per_token_s: f64,
}

impl Speculative {
    /// The step of `b` requests at context `c` priced both ways by `cost`
    /// (the model's), each request expecting
    /// [`Speculative::mean_acceptance_length`] tokens from a verify step.
    pub fn decode_vs_verify(&self, cost: &CostModel, b: u64, c: u64) -> Comparison {
        let window = cost.deployment.as_ref().map_or(0, |d| d.sliding_window);
        let shape = |n: u64| {
            let pairs = u128::from(b) * super::arch::attention_pairs(n, c);
            let (wctx, wpairs) = match window {
                0 => (0, 0),
                w => (b * super::arch::window_ctx(n, c, w), u128::from(b) * super::arch::window_pairs(n, c, w)),
            };
            StepShape {
                tokens: b * n,
                sum_ctx: b * (c + n),
                attention_pairs: pairs,
                decode_pairs: if n == 1 { pairs } else { 0 },
                sampled: b,
                batch: b,
                window_ctx: wctx,
                window_pairs: wpairs,
                largest: n,
            }
        };
        let k = u64::from(self.tokens);
        let verify = shape(k + 1);
        let decode_s = cost.cost(&shape(1)).total_s;
        let verify_s = cost.cost(&verify).total_s;
        let draft_s = self.draft_time(&verify, b, verify.sum_ctx).total_s;
        let per_token_s = (verify_s + draft_s) / self.mean_acceptance_length();
        Comparison { decode_s, verify_s, draft_s, per_token_s }
    }

    /// The smallest batch, up to `max_batch`, at which a token costs more
    /// with speculative decoding than without at context `c` (where it
    /// stops paying), or `None` if it pays at every batch up to there.
    /// Batches past 4,096 are tried in steps of 1/64 of the batch.
    pub fn break_even(&self, cost: &CostModel, max_batch: u64, c: u64) -> Option<u64> {
        let mut b = 1;
        while b <= max_batch {
            let x = self.decode_vs_verify(cost, b, c);
            if x.per_token_s >= x.decode_s {
                return Some(b);
            }
            b += if b < 4096 { 1 } else { b / 64 };
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(accept: Vec<f64>) -> Speculative {
        Speculative { tokens: accept.len() as u32, accept, seed: 7, lookahead: 0, draft: None }
    }

    #[test]
    fn per_position_rates_are_the_running_products() {
        let s = spec(vec![0.8, 0.75, 0.5]);
        let r = s.position_rates();
        assert_eq!(r.len(), 3);
        // 0.8, 0.8 x 0.75 = 0.6, 0.6 x 0.5 = 0.3, written out by hand.
        for (got, want) in r.iter().zip([0.8, 0.6, 0.3]) {
            assert!((got - want).abs() < 1e-12, "{got} against {want}");
        }
        assert!((s.mean_acceptance_length() - 2.7).abs() < 1e-12);
    }

    #[test]
    fn certain_and_impossible_drafts_are_always_and_never_kept() {
        let mut rng = spec(vec![1.0]).rng();
        assert_eq!(spec(vec![1.0; 5]).accepted(&mut rng, 3, 10, 5), 5);
        assert_eq!(spec(vec![1.0; 5]).accepted(&mut rng, 3, 10, 2), 2, "only what was drafted");
        assert_eq!(spec(vec![0.0; 5]).accepted(&mut rng, 3, 10, 5), 0);
        // The first rejection ends the run even if later drafts would pass.
        assert_eq!(spec(vec![1.0, 0.0, 1.0]).accepted(&mut rng, 3, 10, 3), 1);
    }

    #[test]
    fn draws_depend_on_the_request_and_its_position_only() {
        let s = spec(vec![0.6; 4]);
        let mut a = s.rng();
        let mut b = s.rng();
        let first: Vec<u32> = (0..200).map(|g| s.accepted(&mut a, 5, g, 4)).collect();
        // Interleaved with other requests' draws, in another order.
        let mut again = vec![0; 200];
        for g in (0..200).rev() {
            s.accepted(&mut b, 6, g, 4);
            again[g as usize] = s.accepted(&mut b, 5, g, 4);
        }
        assert_eq!(first, again);
    }

    #[test]
    fn the_kept_share_matches_the_rates_over_many_draws() {
        // Over 40,000 steps per seed, the share of steps keeping draft i
        // is r_i within 0.01 (about 4 standard errors at r = 0.5).
        let rates = [0.7, 0.7 * 0.6, 0.7 * 0.6 * 0.5];
        for seed in [1, 2, 3] {
            let s = Speculative { seed, ..spec(vec![0.7, 0.6, 0.5]) };
            let mut rng = s.rng();
            let mut kept = [0u32; 3];
            let n = 40_000u32;
            for i in 0..n {
                let a = s.accepted(&mut rng, u64::from(i % 97), i / 97 * 3, 3);
                for k in kept.iter_mut().take(a as usize) {
                    *k += 1;
                }
            }
            for (k, r) in kept.iter().zip(rates) {
                let share = f64::from(*k) / f64::from(n);
                assert!((share - r).abs() < 0.01, "seed {seed}: {share} against {r}");
            }
        }
    }

    #[test]
    fn it_pays_while_decode_is_memory_bound_and_stops_where_compute_catches_up() {
        // The base model (13.48 GB of weights at 3,000 GB/s, 2 x 6.74e9
        // FLOPs a token at 989 TFLOPS, 524,288 KV bytes a token), free
        // n-gram drafts, k = 3, every draft accepted: a verify step of b
        // requests at context 0 computes 4b tokens and reads 4b tokens of
        // KV. Decode: max(13.6299e-6 b, (13.48e9 + 524,288 b) / 3e12);
        // verify / 4: max(13.6299e-6 b, (13.48e9 + 2,097,152 b) / 12e12),
        // compute-bound from b = 84. Verify wins while its compute is below
        // decode's memory time: 13.6299e-6 b < 4.49333e-3 + 1.74763e-7 b,
        // so b < 333.95; at b = 334 decode is compute-bound too and the two
        // are equal: no gain.
        let s = spec(vec![1.0; 3]);
        let cost = super::super::cost::tests::base_cost();
        let one = s.decode_vs_verify(&cost, 1, 0);
        let decode = (13.48e9 + 524_288.0) / 3e12;
        let verify = (13.48e9 + 4.0 * 524_288.0) / 3e12;
        assert!((one.decode_s - decode).abs() < 1e-12, "{one:?}");
        assert!((one.verify_s - verify).abs() < 1e-12, "{one:?}");
        assert!((one.per_token_s - verify / 4.0).abs() < 1e-12);
        assert_eq!(s.break_even(&cost, 1024, 0), Some(334));
        assert_eq!(s.break_even(&cost, 300, 0), None);
        // Drafts never accepted: a verify step costs at least a decode
        // step and yields one token, so it never pays.
        assert_eq!(spec(vec![0.0; 3]).break_even(&cost, 1024, 0), Some(1));
    }

    #[test]
    fn an_n_gram_drafter_costs_nothing() {
        let s = spec(vec![0.5; 3]);
        let shape = StepShape { tokens: 4, sum_ctx: 400, batch: 1, ..StepShape::default() };
        assert_eq!(s.draft_time(&shape, 1, 100).total_s, 0.0);
    }

    #[test]
    fn a_draft_model_runs_one_pass_over_the_step_then_k_minus_1_decodes() {
        // The base model of docs/engine.md as its own drafter (weights
        // 13.48 GB at 3,000 GB/s, 524,288 KV bytes a token), k = 3: a
        // verify step of 2 requests at context 100 with 3 drafts each
        // (8 tokens, 208 KV tokens after it).
        let s = Speculative { draft: Some(Box::new(super::super::cost::tests::base_cost())), ..spec(vec![0.5; 3]) };
        let shape = StepShape { tokens: 8, sum_ctx: 208, batch: 2, sampled: 2, ..StepShape::default() };
        let p = s.draft_time(&shape, 2, 208);
        let first = (13.48e9 + 208.0 * 524_288.0) / 3e12;
        // Later passes at 208 + 2 x 3 / 2 = 211 tokens of KV.
        let later = (13.48e9 + 211.0 * 524_288.0) / 3e12;
        assert!((p.first_s - first).abs() < 1e-12, "{} against {first}", p.first_s);
        assert!((p.later_s - later).abs() < 1e-12, "{} against {later}", p.later_s);
        assert!((p.total_s - (first + 2.0 * later)).abs() < 1e-12);
    }
}
