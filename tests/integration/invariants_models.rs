//! Seeded randomized runs over generated deployments: architectures (dense
//! and mixture-of-experts, odd head shapes), tensor parallelism, FP8 and
//! INT4 weights, FP8 KV, explicit overrides and every overhead term. Each
//! runs under the shared checker of `invariants.rs` (scheduling, KV and
//! time invariants) plus a cost checker that recomputes every step's
//! compute, memory and duration from the events with the docs/deployments.md
//! formulas written out here, independently of the engine's code.

use std::collections::BTreeMap;

use llmsim_core::engine::{Observer, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::invariants::{Coverage, check_scenario, length, pick};
use llmsim_planner::run_driver::RunLimits;

/// How many deployments one test run generates.
const SCENARIOS: u64 = 500;

/// The generated figures, kept to recompute costs by hand.
#[derive(Clone, Debug, Default)]
struct Deployment {
    layers: f64,
    hidden: f64,
    heads: f64,
    kv_heads: u64,
    head_dim: f64,
    intermediate: f64,
    vocab: f64,
    tied: bool,
    experts: f64,
    per_token: f64,
    expert_width: f64,
    shared_width: f64,
    tp: u64,
    bytes_per_parameter: f64,
    kv_element: f64,
    explicit_kv: Option<u64>,
    peak: f64,
    peak_fp8: Option<f64>,
    bandwidth: f64,
    link: (f64, f64),
    efficiency: (f64, f64),
    overhead_ms: f64,
    per_layer_us: f64,
    per_sequence_us: f64,
}

impl Deployment {
    fn q(&self) -> f64 {
        self.heads * self.head_dim
    }
    fn attention(&self) -> f64 {
        2.0 * self.hidden * self.q() + 2.0 * self.hidden * self.kv_heads as f64 * self.head_dim
    }
    fn expert(&self) -> f64 {
        3.0 * self.hidden * self.expert_width
    }
    fn router_and_shared(&self) -> f64 {
        self.hidden * self.experts + 3.0 * self.hidden * self.shared_width
    }
    fn ffn(&self, experts_used: f64) -> f64 {
        if self.experts > 0.0 {
            experts_used * self.expert() + self.router_and_shared()
        } else {
            3.0 * self.hidden * self.intermediate
        }
    }
    fn parameters(&self) -> f64 {
        let embed = self.vocab * self.hidden * if self.tied { 1.0 } else { 2.0 };
        self.layers * (self.attention() + self.ffn(self.experts)) + embed + (2.0 * self.layers + 1.0) * self.hidden
    }
    /// KV bytes a token on one GPU.
    fn kv_per_gpu(&self) -> f64 {
        let heads_here = self.kv_heads.div_ceil(self.tp) as f64;
        match self.explicit_kv {
            Some(b) => ((b as f64) * heads_here / self.kv_heads as f64).ceil(),
            None => 2.0 * self.layers * heads_here * self.head_dim * self.kv_element,
        }
    }

    /// (compute s, memory s, total s) of a step, by the formulas.
    fn step(&self, t: &Shape) -> (f64, f64, f64) {
        let tokens = t.tokens as f64;
        let active = self.attention() + self.ffn(self.per_token);
        let flops = 2.0 * self.layers * active * tokens
            + 4.0 * self.layers * self.q() * t.pairs as f64
            + 2.0 * self.hidden * self.vocab * t.sampled as f64;
        let fp8 = self.peak_fp8.filter(|_| self.bytes_per_parameter == 1.0);
        let tp = self.tp as f64;
        let compute = flops / (tp * fp8.unwrap_or(self.peak) * 1e12 * self.efficiency.0);
        let touched = if self.experts > 0.0 {
            self.experts * (1.0 - (1.0 - self.per_token / self.experts).powf(tokens))
        } else {
            0.0
        };
        let read = (self.parameters() - self.layers * self.experts * self.expert()
            + self.layers * touched * self.expert())
            * self.bytes_per_parameter;
        let memory = (read / tp + t.sum_ctx as f64 * self.kv_per_gpu()) / (self.bandwidth * 1e9 * self.efficiency.1);
        let comm = if self.tp > 1 {
            let bytes = tokens * self.hidden * 2.0;
            2.0 * self.layers * (self.link.1 * 1e-6 + 2.0 * (tp - 1.0) / tp * bytes / (self.link.0 * 1e9))
        } else {
            0.0
        };
        let overheads = self.overhead_ms / 1e3
            + self.layers * self.per_layer_us / 1e6
            + t.batch as f64 * self.per_sequence_us / 1e6;
        (compute, memory, compute.max(memory) + comm + overheads)
    }
}

/// A step as the events describe it.
#[derive(Default)]
struct Shape {
    tokens: u64,
    sum_ctx: u64,
    pairs: u128,
    sampled: u64,
    batch: u64,
}

/// Recomputes every step's cost from the events.
struct CostCheck {
    d: Deployment,
    /// (prompt, generated) of each request.
    reqs: BTreeMap<RequestId, (u32, u32)>,
    shape: Shape,
    errors: Vec<String>,
    steps: u64,
    comm_steps: u64,
}

impl CostCheck {
    fn fail(&mut self, msg: String) {
        if self.errors.len() < 5 {
            self.errors.push(msg);
        }
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-15
}

impl Observer for CostCheck {
    fn arrived(&mut self, id: RequestId, _at: SimTime, prompt: u32, _output: u32) {
        self.reqs.insert(id, (prompt, 0));
    }

    fn scheduled(&mut self, id: RequestId, _at: SimTime, tokens: u32, computed: u32) {
        let (prompt, generated) = self.reqs[&id];
        let (n, c) = (u64::from(tokens), u64::from(computed));
        let s = &mut self.shape;
        s.tokens += n;
        s.sum_ctx += c + n;
        s.pairs += u128::from(n) * u128::from(c) + u128::from(n) * u128::from(n + 1) / 2;
        s.sampled += u64::from(computed + tokens == prompt + generated);
        s.batch += 1;
    }

    fn preempted(&mut self, _id: RequestId, _at: SimTime) {}

    fn token(&mut self, id: RequestId, _at: SimTime, index: u32) {
        if let Some(r) = self.reqs.get_mut(&id) {
            r.1 = index;
        }
    }

    fn step(&mut self, r: &StepRecord) {
        let shape = std::mem::take(&mut self.shape);
        let (compute, memory, total) = self.d.step(&shape);
        self.steps += 1;
        self.comm_steps += u64::from(self.d.tp > 1);
        if !close(r.compute_s, compute) || !close(r.memory_s, memory) {
            self.fail(format!(
                "step {}: compute {} / memory {} s, formulas {compute} / {memory}",
                r.index, r.compute_s, r.memory_s
            ));
        }
        let want = (total * 1e9).round().max(1.0);
        let got = r.duration_nanos() as f64;
        if (got - want).abs() > 1.0 + 1e-9 * want {
            self.fail(format!("step {}: {got} ns, formulas {want} ns", r.index));
        }
    }
}

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// A random deployment scenario and the figures it was made from.
fn generate(i: u64) -> (String, Deployment) {
    let mut rng = ChaCha8Rng::seed_from_u64(0xDE_9107 + i);
    let heads: u64 = pick(&mut rng, &[1, 2, 4, 8, 16, 32, 64]);
    let head_dim: u64 = pick(&mut rng, &[16, 64, 128]);
    // sometimes a head_dim that is not hidden / heads (as Qwen3)
    let hidden = if rng.random_range(0..4) == 0 { heads * head_dim / 2 + 8 } else { heads * head_dim };
    let kv_heads = pick(&mut rng, &divisors(heads));
    let layers: u64 = pick(&mut rng, &[1, 2, 4, 32, 80]);
    let moe = rng.random_range(0..10) < 3;
    let experts: u64 = if moe { pick(&mut rng, &[2, 4, 8, 16, 64]) } else { 0 };
    let per_token = if moe { rng.random_range(1..=experts.min(8)) } else { 0 };
    let tp = pick(&mut rng, &divisors(heads).into_iter().filter(|d| *d <= 8).collect::<Vec<_>>());
    let mut d = Deployment {
        layers: layers as f64,
        hidden: hidden as f64,
        heads: heads as f64,
        kv_heads,
        head_dim: head_dim as f64,
        intermediate: pick(&mut rng, &[64.0, 4096.0, 28672.0]),
        vocab: pick(&mut rng, &[100.0, 32000.0, 152064.0]),
        tied: rng.random_range(0..4) == 0,
        experts: experts as f64,
        per_token: per_token as f64,
        expert_width: pick(&mut rng, &[64.0, 1024.0, 14336.0]),
        shared_width: if moe { pick(&mut rng, &[0.0, 0.0, 512.0]) } else { 0.0 },
        tp,
        bytes_per_parameter: pick(&mut rng, &[2.0, 1.0, 0.5]),
        kv_element: pick(&mut rng, &[2.0, 1.0]),
        explicit_kv: (rng.random_range(0..5) == 0).then(|| rng.random_range(1..500_000)),
        peak: pick(&mut rng, &[100.0, 989.0]),
        peak_fp8: (rng.random_range(0..2) == 0).then_some(1979.0),
        bandwidth: pick(&mut rng, &[300.0, 3350.0]),
        link: (pick(&mut rng, &[50.0, 300.0]), pick(&mut rng, &[0.0, 10.0, 25.0])),
        efficiency: (pick(&mut rng, &[1.0, 0.6]), pick(&mut rng, &[1.0, 0.8])),
        overhead_ms: pick(&mut rng, &[0.0, 0.0, 1.5]),
        per_layer_us: pick(&mut rng, &[0.0, 0.0, 20.0, 75.0]),
        per_sequence_us: pick(&mut rng, &[0.0, 0.0, 5.0]),
    };
    // A step must cost at least 1 us (config::limits::MIN_STEP_SECONDS):
    // a tiny model whose weights read in under 2 us carries an overhead.
    let weights_read_s = d.parameters() * d.bytes_per_parameter / d.tp as f64 / (d.bandwidth * 1e9);
    if weights_read_s < 2e-6 && d.overhead_ms == 0.0 {
        d.overhead_ms = 0.002;
    }
    let mut arch = format!(
        "{{layers: {layers}, hidden_size: {hidden}, attention_heads: {heads}, kv_heads: {kv_heads}, head_dim: {head_dim}, \
         vocab_size: {}, tie_word_embeddings: {}",
        d.vocab, d.tied
    );
    if moe {
        arch += &format!(
            ", experts: {experts}, experts_per_token: {per_token}, expert_intermediate_size: {}, \
             shared_expert_intermediate_size: {}}}",
            d.expert_width, d.shared_width
        );
    } else {
        arch += &format!(", intermediate_size: {}}}", d.intermediate);
    }
    let link = if rng.random_range(0..2) == 0 {
        format!("{{bandwidth_gbps: {}, latency_us: {}}}", d.link.0, d.link.1)
    } else {
        format!("{{bandwidth_gbps: {{{tp}: {}, 99: 1}}, latency_us: {{{tp}: {}, 99: 1}}}}", d.link.0, d.link.1)
    };
    let fp8 = d.peak_fp8.map(|p| format!(", peak_tflops_fp8: {p}")).unwrap_or_default();
    let kv_dtype = if d.kv_element == 1.0 { "fp8" } else { "auto" };
    let explicit_kv = d.explicit_kv.map(|b| format!(", bytes_per_token: {b}")).unwrap_or_default();
    // mostly a small measured pool (preemption, rejection); sometimes the
    // formula on a very large GPU, which every generated model fits
    let (hbm, num_blocks) = match rng.random_range(0..5) {
        0 => (100_000, String::new()),
        _ => (80, format!(", num_blocks: {}", pick(&mut rng, &[1, 3, 8, 20, 64, 200, 1000]))),
    };
    let block_size = pick(&mut rng, &[1, 4, 16, 32]);
    let context = pick(&mut rng, &[16, 256, 2048, 32768]);
    let scale = pick(&mut rng, &[4, 32, 300, 1500]);
    let arrivals = match rng.random_range(0..3) {
        0 => format!("poisson: {{rate: {}}}", pick(&mut rng, &[5.0, 50.0, 5000.0])),
        1 => format!("constant: {{rate: {}}}", pick(&mut rng, &[1.0, 1000.0])),
        _ => format!("closed: {{concurrency: {}}}", pick(&mut rng, &[1, 3, 16, 64])),
    };
    let text = format!(
        "name: dep-{i}
hardware: {{hbm_gib: {hbm}, memory_bandwidth_gbps: {bw}, peak_tflops: {peak}{fp8}, interconnect: {link}}}
model:
  context_length: {context}
  architecture: {arch}
  weights: {{bytes_per_parameter: {bpp}}}
  kv_cache: {{dtype: {kv_dtype}, block_size: {block_size}, watermark: {watermark}{num_blocks}{explicit_kv}}}
parallelism: {{tensor: {tp}}}
scheduler: {{max_batch_tokens: {budget}, max_num_sequences: {seqs}}}
latency: {{step_overhead_ms: {step}, per_layer_overhead_us: {layer}, per_sequence_overhead_us: {seq}, request_overhead_ms: {req}}}
efficiency: {{compute: {ec}, memory: {em}}}
workload:
  seed: {seed}
  arrivals: {{{arrivals}}}
  requests: {requests}
  prompt_tokens: {prompt}
  output_tokens: {output}
",
        bw = d.bandwidth,
        peak = d.peak,
        bpp = d.bytes_per_parameter,
        watermark = pick(&mut rng, &[0.0, 0.01, 0.1]),
        budget = pick(&mut rng, &[1, 16, 256, 2048, 8192]),
        seqs = pick(&mut rng, &[1, 4, 64, 256]),
        step = d.overhead_ms,
        layer = d.per_layer_us,
        seq = d.per_sequence_us,
        req = pick(&mut rng, &[0.0, 0.0, 0.5, 20.0]),
        ec = d.efficiency.0,
        em = d.efficiency.1,
        seed = rng.random_range(0..1000),
        requests = rng.random_range(1..=100),
        prompt = length(&mut rng, scale),
        output = length(&mut rng, scale / 2 + 1),
    );
    (text, d)
}

#[test]
fn every_generated_deployment_keeps_the_invariants_and_costs_its_steps_by_the_formulas() {
    let mut cov = Coverage::default();
    let (mut moe_steps, mut tp_steps, mut computed_capacity) = (0, 0, 0);
    for i in 0..SCENARIOS {
        let (text, d) = generate(i);
        let s = crate::invariants::scenario(&text);
        if !s.capacity.overridden {
            // floor((hbm * 2^30 * 0.9 - parameters * bytes / t) / (kv a GPU * block size)), capped at u32
            let usable = 100_000.0 * 1_073_741_824.0 * 0.9 - d.parameters() * d.bytes_per_parameter / d.tp as f64;
            let blocks = (usable / (d.kv_per_gpu() * f64::from(s.capacity.block_size))).floor();
            assert_eq!(f64::from(s.capacity.num_blocks), blocks.min(f64::from(u32::MAX)), "scenario {i}\n{text}");
            computed_capacity += 1;
        }
        let mut costs = CostCheck {
            d: d.clone(),
            reqs: BTreeMap::new(),
            shape: Shape::default(),
            errors: Vec::new(),
            steps: 0,
            comm_steps: 0,
        };
        let label = format!("scenario {i}");
        if let Err(e) = check_scenario(&label, &text, &s, &RunLimits::default(), &mut cov, &mut costs) {
            panic!("{label} stopped at a run limit: {e}\n{text}");
        }
        assert!(costs.errors.is_empty(), "scenario {i}: {:#?}\n{text}", costs.errors);
        if d.experts > 0.0 {
            moe_steps += costs.steps;
        }
        tp_steps += costs.comm_steps;
    }
    assert!(
        moe_steps > 10_000 && tp_steps > 10_000 && computed_capacity > 50,
        "{moe_steps} {tp_steps} {computed_capacity}"
    );
    assert!(cov.preemptions > 500, "{cov:?}");
    assert!(cov.rejected_context > 50 && cov.rejected_kv > 50, "{cov:?}");
    assert!(cov.finished > cov.requests / 2, "{cov:?}");
    eprintln!(
        "deployment invariants held over {SCENARIOS} scenarios: {cov:?}, {moe_steps} MoE steps, {tp_steps} TP steps"
    );
}
