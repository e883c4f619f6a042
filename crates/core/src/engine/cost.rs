//! The roofline step cost (docs/engine.md section 3, step 4, and docs/deployments.md
//! sections 1 and 2).
//!
//! A step costs whichever is larger: the FLOPs of the tokens it computes, or
//! the bytes it must read (the weights once, plus every scheduled request's
//! KV after the step), plus fixed overheads. Without an architecture the
//! model is two numbers and the docs/engine.md formulas apply unchanged; with one
//! ([`deployment`]) attention, the LM head, experts, tensor parallelism and
//! its all-reduces are costed too.

pub mod deployment;
pub mod operators;

pub use deployment::{DeploymentCost, DeploymentInput, ExpertWeights, Link, Wide, WideComm};
pub use operators::{Curve, GemmTable, KernelTables, OperatorInput, Operators};

/// Hardware and model figures folded into the roofline rates.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CostModel {
    /// Model parameters (not billions).
    pub parameters: f64,
    /// Weight bytes one GPU holds (all of them at tensor parallelism 1).
    pub weight_bytes: f64,
    /// KV bytes per token one GPU holds.
    pub kv_bytes_per_token: f64,
    /// Effective FLOP/s of the whole engine:
    /// `tensor * peak_tflops * 1e12 * efficiency.compute`.
    pub flops_per_s: f64,
    /// Effective bytes/s of one GPU: `memory_bandwidth_gbps * 1e9 * efficiency.memory`.
    pub bytes_per_s: f64,
    /// `latency.step_overhead_ms`, in seconds.
    pub overhead_s: f64,
    /// `latency.per_sequence_overhead_us`, in seconds.
    pub per_sequence_s: f64,
    /// The architecture's terms, when the model has one.
    pub deployment: Option<DeploymentCost>,
    /// Pipeline parallelism, when the model is split into stages.
    pub pipeline: Option<Pipeline>,
}

/// Pipeline parallelism (docs/deployments.md, "Pipeline parallelism"):
/// `stages` groups of the tensor-parallel GPUs, each holding a run of the
/// layers (vLLM's split: `floor(layers / stages)` each, one more for the
/// `layers mod stages` stages before the last), with as many
/// micro-batches in flight as stages (vLLM's batch queue). A step's
/// requests split into `k = min(stages, batch)` micro-batches; each goes
/// through every stage and `stages - 1` hand-offs of its activations, and
/// each stage runs the `k` micro-batches one after the other. A step ends
/// when its busiest micro-batch has been through every stage, or when the
/// largest stage has run all `k` of them, whichever is later:
///
/// ```text
/// m        = max(ceil(T / k), largest request's tokens)     (the busiest micro-batch's tokens)
/// busiest  = the step's shape scaled by m / T (context, pairs, samples, requests; rounded up)
/// period   = cost(busiest) * max(1, k * ceil(layers / stages) / layers)
///            + (stages - 1) * (handoff_latency + m * 2 * hidden * 2 / t / link)
/// ```
///
/// `cost(busiest)` is the whole model's time on one tensor-parallel
/// group at that micro-batch: a stage runs its layers' share of it, and
/// the busiest micro-batch visits every stage. The stage GPUs idle for
/// the rest of the period (the bubble): with `k < stages` micro-batches
/// most of it, with `k = stages` balanced ones only the hand-offs.
#[derive(Copy, Clone, Debug, PartialEq, serde::Serialize)]
pub struct Pipeline {
    pub stages: u32,
    /// The model's layers, and the most any stage holds (`ceil(layers / stages)`).
    pub layers: u64,
    pub stage_layers: u64,
    /// One hand-off's fixed time, seconds.
    pub handoff_fixed_s: f64,
    /// One hand-off's time per token of the micro-batch, seconds.
    pub handoff_s_per_token: f64,
}

/// A step as the pipeline runs it ([`Pipeline::split`]).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct PipelineStep {
    /// Micro-batches in flight: `min(stages, batch)`.
    pub micro_batches: u64,
    /// The busiest micro-batch's shape.
    pub busiest: StepShape,
    /// What the largest stage running all `k` micro-batches adds to the
    /// busiest one's pass: `max(1, k * stage_layers / layers)`.
    pub stage_factor: f64,
    /// Its `stages - 1` hand-offs, seconds.
    pub handoffs_s: f64,
}

impl Pipeline {
    /// The busiest micro-batch of step `s` and its hand-offs.
    pub fn split(&self, s: &StepShape) -> PipelineStep {
        let k = u64::from(self.stages).min(s.batch).max(1);
        let largest = if s.largest == 0 { s.tokens } else { s.largest.min(s.tokens) };
        let m = s.tokens.div_ceil(k).max(largest);
        let busiest = if m >= s.tokens || s.tokens == 0 {
            *s
        } else {
            // ceil(x * m / T) in integers, so a micro-batch never rounds to less.
            let share = |x: u64| ((u128::from(x) * u128::from(m)).div_ceil(u128::from(s.tokens))) as u64;
            let share128 = |x: u128| (x * u128::from(m)).div_ceil(u128::from(s.tokens));
            StepShape {
                tokens: m,
                sum_ctx: share(s.sum_ctx),
                attention_pairs: share128(s.attention_pairs),
                decode_pairs: share128(s.decode_pairs).min(share128(s.attention_pairs)),
                sampled: share(s.sampled),
                batch: share(s.batch).max(1),
                window_ctx: share(s.window_ctx),
                window_pairs: share128(s.window_pairs),
                largest: largest.min(m),
            }
        };
        let handoffs = f64::from(self.stages - 1);
        let handoffs_s = if s.tokens == 0 {
            0.0
        } else {
            handoffs * (self.handoff_fixed_s + self.handoff_s_per_token * busiest.tokens as f64)
        };
        let stage_factor = (k as f64 * self.stage_layers as f64 / self.layers.max(1) as f64).max(1.0);
        PipelineStep { micro_batches: k, busiest, stage_factor, handoffs_s }
    }
}

/// What the cost of a step depends on, summed over its scheduled requests
/// while the batch is built. Request `i` computes `n_i` new tokens on top of
/// `c_i` cached ones.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct StepShape {
    /// `T = sum(n_i)`.
    pub tokens: u64,
    /// `sum(c_i + n_i)`: KV tokens after the step.
    pub sum_ctx: u64,
    /// `sum(n_i * c_i + n_i * (n_i + 1) / 2)`: causal attention pairs.
    pub attention_pairs: u128,
    /// Of `attention_pairs`, those of requests computing one token
    /// (`n_i = 1`): `sum(c_i + 1)` over them. Multi-head latent attention
    /// prices them in its decode form; other attention prices every pair alike.
    pub decode_pairs: u128,
    /// Requests that sample a token at the step's end.
    pub sampled: u64,
    /// Requests scheduled.
    pub batch: u64,
    /// Sliding-window layers only (0 without them): the KV tokens they
    /// read, `sum(min(c_i + n_i, window - 1 + n_i))`, and their (query,
    /// key) pairs, each query seeing at most `window` keys.
    pub window_ctx: u64,
    pub window_pairs: u128,
    /// The most tokens one request computes in the step (`max(n_i)`; 0
    /// when not tracked, read as `tokens`). Only pipeline parallelism
    /// reads it: a request's tokens stay in one micro-batch.
    pub largest: u64,
}

impl StepShape {
    /// Attention FLOPs of the step: `per_pair * pairs`, or with a decode
    /// form (MLA) `per_pair * (pairs - decode_pairs) + decode * decode_pairs`.
    pub fn attention_flops(&self, per_pair: f64, decode: Option<f64>) -> f64 {
        match decode {
            None => per_pair * self.attention_pairs as f64,
            Some(d) => per_pair * (self.attention_pairs - self.decode_pairs) as f64 + d * self.decode_pairs as f64,
        }
    }
}

/// The parts of one step's duration, in seconds.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct StepCost {
    pub compute_s: f64,
    pub memory_s: f64,
    /// All-reduces of tensor parallelism.
    pub comm_s: f64,
    /// Fixed terms: step, per layer and per sequence overheads.
    pub overhead_s: f64,
    /// `max(compute, memory) + comm + overhead`.
    pub total_s: f64,
}

impl StepCost {
    pub fn compute_bound(&self) -> bool {
        self.compute_s > self.memory_s
    }
}

/// The inputs of [`CostModel::new`], named so call sites read clearly.
#[derive(Clone, Debug)]
pub struct CostInput {
    /// The model's size when it has no architecture (the architecture's
    /// figure, or an explicit override of it, is in `deployment`).
    pub parameters_billions: f64,
    pub bytes_per_parameter: f64,
    /// KV bytes per token of one GPU.
    pub kv_bytes_per_token: u64,
    pub peak_tflops: f64,
    pub memory_bandwidth_gbps: f64,
    pub compute_efficiency: f64,
    pub memory_efficiency: f64,
    pub step_overhead_ms: f64,
    pub per_sequence_overhead_us: f64,
    pub deployment: Option<DeploymentInput>,
    /// Pipeline parallelism; needs `deployment`.
    pub pipeline: Option<Pipeline>,
}

impl CostModel {
    pub fn new(i: &CostInput) -> CostModel {
        let bytes_per_s = i.memory_bandwidth_gbps * 1e9 * i.memory_efficiency;
        let overhead_s = i.step_overhead_ms / 1000.0;
        let per_sequence_s = i.per_sequence_overhead_us / 1e6;
        let kv_bytes_per_token = i.kv_bytes_per_token as f64;
        if let Some(d) = &i.deployment {
            let t = f64::from(d.tensor_parallel);
            return CostModel {
                parameters: d.parameters,
                weight_bytes: d.weight_bytes(i.bytes_per_parameter) / t,
                kv_bytes_per_token,
                flops_per_s: t * d.roofline_peak_tflops() * 1e12 * i.compute_efficiency,
                bytes_per_s,
                overhead_s,
                per_sequence_s,
                pipeline: i.pipeline,
                deployment: Some(DeploymentCost::new(
                    d,
                    i.bytes_per_parameter,
                    &operators::Rates {
                        peak_tflops: d.peak_tflops,
                        compute_efficiency: i.compute_efficiency,
                        bandwidth: i.memory_bandwidth_gbps * 1e9,
                        memory_efficiency: i.memory_efficiency,
                        bytes_per_parameter: i.bytes_per_parameter,
                        kv_bytes_per_token,
                        window_kv_bytes_per_token: d.window_kv_bytes_per_token,
                        per_layer_overhead_us: d.per_layer_overhead_us,
                    },
                )),
            };
        }
        let parameters = i.parameters_billions * 1e9;
        CostModel {
            parameters,
            weight_bytes: parameters * i.bytes_per_parameter,
            kv_bytes_per_token,
            flops_per_s: i.peak_tflops * 1e12 * i.compute_efficiency,
            bytes_per_s,
            overhead_s,
            per_sequence_s,
            deployment: None,
            pipeline: None,
        }
    }

    /// Cost of a step computing `tokens` tokens whose requests hold
    /// `sum_ctx` tokens of KV after the step, by the docs/engine.md formulas
    /// (the model as two numbers; no per-sequence term).
    pub fn step(&self, tokens: u64, sum_ctx: u64) -> StepCost {
        let compute_s = 2.0 * self.parameters * tokens as f64 / self.flops_per_s;
        let memory_s = (self.weight_bytes + sum_ctx as f64 * self.kv_bytes_per_token) / self.bytes_per_s;
        let overhead_s = self.overhead_s;
        StepCost { compute_s, memory_s, comm_s: 0.0, overhead_s, total_s: compute_s.max(memory_s) + overhead_s }
    }

    /// Cost of a step of this shape: the docs/engine.md formulas without an
    /// architecture (plus `batch * per_sequence_overhead`, which adds
    /// exactly zero at its default), docs/deployments.md's with one.
    pub fn cost(&self, s: &StepShape) -> StepCost {
        let Some(p) = &self.pipeline else { return self.one_pass(s) };
        let split = p.split(s);
        let mut c = self.one_pass(&split.busiest);
        if split.stage_factor > 1.0 {
            let f = split.stage_factor;
            (c.compute_s, c.memory_s, c.comm_s, c.overhead_s, c.total_s) =
                (c.compute_s * f, c.memory_s * f, c.comm_s * f, c.overhead_s * f, c.total_s * f);
        }
        c.comm_s += split.handoffs_s;
        c.total_s += split.handoffs_s;
        c
    }

    /// One pass of `s` through every layer on one tensor-parallel group.
    fn one_pass(&self, s: &StepShape) -> StepCost {
        if let Some(d) = &self.deployment {
            return d.cost(self, s);
        }
        let mut c = self.step(s.tokens, s.sum_ctx);
        if self.per_sequence_s > 0.0 {
            c.overhead_s += s.batch as f64 * self.per_sequence_s;
            c.total_s = c.compute_s.max(c.memory_s) + c.overhead_s;
        }
        c
    }

    /// Duration of a step in whole nanoseconds (rounded to nearest, at least 1).
    pub fn step_nanos(&self, tokens: u64, sum_ctx: u64) -> u64 {
        crate::time::secs_to_nanos(self.step(tokens, sum_ctx).total_s).max(1)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The base model of docs/engine.md on the H100-like card.
    pub(crate) fn base_input() -> CostInput {
        CostInput {
            parameters_billions: 6.74,
            bytes_per_parameter: 2.0,
            kv_bytes_per_token: 524_288,
            peak_tflops: 989.0,
            memory_bandwidth_gbps: 3000.0,
            compute_efficiency: 1.0,
            memory_efficiency: 1.0,
            step_overhead_ms: 0.0,
            per_sequence_overhead_us: 0.0,
            deployment: None,
            pipeline: None,
        }
    }

    pub(crate) fn base_cost() -> CostModel {
        CostModel::new(&base_input())
    }

    /// `b` requests decoding one token each at context `c` (written out,
    /// not from the engine's pair counts).
    pub(crate) fn decode(b: u64, c: u64) -> StepShape {
        let pairs = u128::from(b * (c + 1));
        StepShape {
            tokens: b,
            sum_ctx: b * (c + 1),
            attention_pairs: pairs,
            decode_pairs: pairs,
            sampled: b,
            batch: b,
            ..StepShape::default()
        }
    }

    /// One request computing a `n`-token chunk that completes its prompt
    /// on `c` cached tokens: pairs `n*c + n*(n+1)/2`, one token sampled.
    pub(crate) fn prefill(n: u64, c: u64) -> StepShape {
        let pairs = u128::from(n * c + n * (n + 1) / 2);
        StepShape { tokens: n, sum_ctx: c + n, attention_pairs: pairs, sampled: 1, batch: 1, ..StepShape::default() }
    }

    fn ms(x: f64) -> f64 {
        x * 1000.0
    }

    #[test]
    fn one_short_request_decoding_alone_costs_the_weights_4_49_ms() {
        // A 16-token prompt decoding its first token: ctx 17 tokens.
        let c = base_cost().step(1, 17);
        assert!((ms(c.total_s) - 4.49).abs() < 0.01, "{}", ms(c.total_s));
        assert!(!c.compute_bound());
        // weights alone: 13.48 GB / 3000 GB/s
        assert!((ms(base_cost().step(1, 0).total_s) - 4.493_333).abs() < 1e-5);
    }

    #[test]
    fn twenty_nine_requests_at_4k_context_cost_about_25_ms() {
        let c = base_cost().step(29, 29 * 4096);
        assert!((ms(c.total_s) - 25.25).abs() < 0.01, "{}", ms(c.total_s));
        assert!(!c.compute_bound());
    }

    #[test]
    fn all_prefill_step_costs_112_ms_at_8192_tokens_and_28_ms_at_2048() {
        let big = base_cost().step(8192, 8192);
        let small = base_cost().step(2048, 2048);
        assert!((ms(big.total_s) - 111.65).abs() < 0.01, "{}", ms(big.total_s));
        assert!((ms(small.total_s) - 27.91).abs() < 0.01, "{}", ms(small.total_s));
        assert!(big.compute_bound() && small.compute_bound());
    }

    #[test]
    fn one_512_prompt_among_64_decodes_hides_under_memory_time() {
        // 64 decodes at 538 tokens of context each, plus a 512-token prompt.
        let sum_ctx = 64 * 538 + 512;
        let one = base_cost().step(64 + 512, sum_ctx);
        assert!((ms(one.compute_s) - 7.85).abs() < 0.01, "{}", ms(one.compute_s));
        assert!((ms(one.memory_s) - 10.6).abs() < 0.05, "{}", ms(one.memory_s));
        assert_eq!(one.total_s, one.memory_s);
        let three = base_cost().step(64 + 3 * 512, 64 * 538 + 3 * 512);
        assert!(three.compute_bound());
        assert!((ms(three.total_s) - 21.8).abs() < 0.05, "{}", ms(three.total_s));
    }

    /// The decode stretch with prefix caching skips pricing a step before
    /// its joiners are known while a step of `budget` tokens, `max_seqs`
    /// requests and `max_seqs * context` KV tokens would still end in time
    /// (stretch.rs, `worst_ns`): that rests on the cost without a
    /// deployment never exceeding that step's. Checked here on random
    /// hardware and shapes within those bounds, against the formula of
    /// docs/engine.md written out (not through `step`).
    #[test]
    fn no_step_within_the_bounds_costs_more_than_the_largest_one() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
        for _ in 0..2000 {
            let input = CostInput {
                parameters_billions: rng.random_range(0.1..500.0),
                kv_bytes_per_token: rng.random_range(1_000..2_000_000),
                peak_tflops: rng.random_range(10.0..2000.0),
                memory_bandwidth_gbps: rng.random_range(100.0..8000.0),
                compute_efficiency: rng.random_range(0.05..1.0),
                memory_efficiency: rng.random_range(0.05..1.0),
                step_overhead_ms: rng.random_range(0.0..5.0),
                per_sequence_overhead_us: if rng.random_bool(0.5) { rng.random_range(0.0..50.0) } else { 0.0 },
                ..base_input()
            };
            let model = CostModel::new(&input);
            let (budget, max_seqs, context) =
                (rng.random_range(1..16_384u64), rng.random_range(1..1024u64), rng.random_range(1..131_072u64));
            let worst =
                StepShape { tokens: budget, sum_ctx: max_seqs * context, batch: max_seqs, ..StepShape::default() };
            let by_hand = |s: &StepShape| {
                let compute = 2.0 * input.parameters_billions * 1e9 * s.tokens as f64
                    / (input.peak_tflops * 1e12 * input.compute_efficiency);
                let bytes = input.parameters_billions * 1e9 * input.bytes_per_parameter
                    + s.sum_ctx as f64 * input.kv_bytes_per_token as f64;
                let memory = bytes / (input.memory_bandwidth_gbps * 1e9 * input.memory_efficiency);
                compute.max(memory)
                    + input.step_overhead_ms / 1e3
                    + s.batch as f64 * input.per_sequence_overhead_us / 1e6
            };
            let top = model.cost(&worst).total_s;
            assert!((top - by_hand(&worst)).abs() <= 1e-9 * top, "{top} against {}", by_hand(&worst));
            for _ in 0..20 {
                let batch = rng.random_range(1..=max_seqs);
                let shape = StepShape {
                    tokens: rng.random_range(1..=budget),
                    sum_ctx: rng.random_range(0..=batch * context),
                    batch,
                    ..StepShape::default()
                };
                let c = model.cost(&shape).total_s;
                assert!(c <= top, "{shape:?} costs {c} s, more than the largest step's {top} s");
                assert!((c - by_hand(&shape)).abs() <= 1e-9 * c.max(1e-12), "{c} against {}", by_hand(&shape));
            }
        }
    }

    /// The base model split into pipeline stages with a 10 us + 1 ns a
    /// token hand-off; every figure below is worked from the docs/engine.md
    /// formulas by hand (13.48 GB of weights at 3,000 GB/s, 524,288 KV
    /// bytes a token, 2 x 6.74e9 FLOPs a token at 989 TFLOPS).
    fn piped(stages: u32, layers: u64) -> CostModel {
        let mut m = base_cost();
        m.pipeline = Some(Pipeline {
            stages,
            layers,
            stage_layers: layers.div_ceil(u64::from(stages)),
            handoff_fixed_s: 10e-6,
            handoff_s_per_token: 1e-9,
        });
        m
    }

    #[test]
    fn a_pipelined_decode_step_costs_its_busiest_micro_batch_plus_the_hand_offs() {
        // Four decodes at context 100 over 2 stages: 2 micro-batches of 2,
        // each holding half the step's KV (202 tokens).
        let shape = StepShape { tokens: 4, sum_ctx: 404, batch: 4, largest: 1, ..StepShape::default() };
        let c = piped(2, 32).cost(&shape);
        let memory = (13.48e9 + 202.0 * 524_288.0) / 3e12; // 4.528635 ms
        assert!((ms(c.memory_s) - 4.528_635).abs() < 1e-6, "{}", ms(c.memory_s));
        assert!((c.total_s - (memory + 10e-6 + 2e-9)).abs() < 1e-12, "{}", ms(c.total_s));
        assert!((ms(c.comm_s) - 0.010_002).abs() < 1e-9);
        // Four stages: four micro-batches of one request, three hand-offs.
        let c = piped(4, 32).cost(&shape);
        let memory = (13.48e9 + 101.0 * 524_288.0) / 3e12;
        assert!((c.total_s - (memory + 3.0 * (10e-6 + 1e-9))).abs() < 1e-12, "{}", ms(c.total_s));
        // One stage is no pipeline at all.
        assert_eq!(piped(1, 32).cost(&shape), base_cost().cost(&shape));
    }

    #[test]
    fn a_prompt_stays_in_one_micro_batch_and_an_uneven_split_waits_for_the_largest_stage() {
        // A 1,000-token prompt beside one decode at context 100: the prompt
        // cannot split, so the busiest micro-batch is its 1,000 tokens and
        // ceil(1,101 x 1,000 / 1,001) = 1,100 tokens of KV.
        let shape = StepShape { tokens: 1001, sum_ctx: 1101, batch: 2, largest: 1000, ..StepShape::default() };
        let c = piped(2, 32).cost(&shape);
        let compute = 2.0 * 6.74e9 * 1000.0 / 989e12; // 13.6299 ms
        assert!((ms(c.compute_s) - ms(compute)).abs() < 1e-9);
        assert!((ms(c.memory_s) - ms((13.48e9 + 1100.0 * 524_288.0) / 3e12)).abs() < 1e-9);
        assert!((c.total_s - (compute + 10e-6 + 1000e-9)).abs() < 1e-12, "{}", ms(c.total_s));
        // 61 layers in 2 stages of 31 and 30 (vLLM's split): two decodes
        // make 2 micro-batches, and the 31-layer stage runs both, so the
        // step lasts 2 x 31/61 of a micro-batch's pass.
        let decode = StepShape { tokens: 2, sum_ctx: 202, batch: 2, largest: 1, ..StepShape::default() };
        let pass = (13.48e9 + 101.0 * 524_288.0) / 3e12;
        let c = piped(2, 61).cost(&decode);
        assert!((c.total_s - (pass * 62.0 / 61.0 + 10e-6 + 1e-9)).abs() < 1e-12, "{}", ms(c.total_s));
        // One decode: one micro-batch, whose pass through both stages is the step.
        let one = StepShape { tokens: 1, sum_ctx: 101, batch: 1, largest: 1, ..StepShape::default() };
        assert!((piped(2, 61).cost(&one).total_s - (pass + 10e-6 + 1e-9)).abs() < 1e-12);
    }

    #[test]
    fn overhead_and_efficiency_apply_as_documented() {
        let mut input = CostInput { memory_efficiency: 0.5, step_overhead_ms: 2.0, ..base_input() };
        let c = CostModel::new(&input).step(1, 0);
        assert!((ms(c.total_s) - (2.0 * 4.493_333 + 2.0)).abs() < 1e-4);
        input.compute_efficiency = 0.5;
        let p = CostModel::new(&input).step(8192, 0);
        assert!((ms(p.compute_s) - 2.0 * 111.65).abs() < 0.02);
    }
}
