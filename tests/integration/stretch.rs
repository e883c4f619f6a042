//! Decode stretches (macro-steps, `crates/core/src/engine/stretch.rs`) against the
//! step-by-step path (`--exact`): on generated scenarios, both must give
//! the same result JSON, the same per-request records, the same step
//! records and the same sequence of observer events, byte for byte. The
//! issue allows 0.1% on every figure; the stretch computes each step from
//! the same formulas with the same rounding, so the test demands equality,
//! which is stronger. The scenarios lean towards long outputs, few
//! arrivals and tight KV caches, so stretches are common and meet block
//! boundaries, arrivals, finishes and full caches.

use llmsim_core::engine::{Observer, RejectReason, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_core::util::to_json;
use llmsim_planner::metrics::{CollectorOptions, RunOutput};
use llmsim_planner::run_driver::Stepping;
use llmsim_scenario::config::Scenario;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::invariants::{length, pick, scenario};

/// Every event, in order, as text.
#[derive(Default)]
struct Events(Vec<String>);

impl Observer for Events {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.0.push(format!("arrived {id} {at} {prompt} {output}"));
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.0.push(format!("scheduled {id} {at} {tokens} {computed}"));
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.0.push(format!("preempted {id} {at}"));
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.0.push(format!("token {id} {at} {index}"));
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.0.push(format!("finished {id} {at}"));
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.0.push(format!("rejected {id} {at} {reason:?}"));
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.0.push(format!("lookup {id} {at} {queried} {hit}"));
    }
    fn step(&mut self, s: &StepRecord) {
        self.0.push(format!("step {s:?}"));
    }
}

/// A scenario where decode stretches are common.
fn generate(i: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(0x57_2E7C + i);
    let block_size = pick(&mut rng, &[1, 4, 16, 32]);
    let num_blocks = pick(&mut rng, &[8, 40, 200, 1000, 20000]);
    let budget = pick(&mut rng, &[8, 64, 512, 8192]);
    let max_seqs = pick(&mut rng, &[1, 4, 16, 64, 256]);
    let arrivals = match rng.random_range(0..4) {
        0 => format!("poisson: {{rate: {}}}", pick(&mut rng, &[0.5, 5.0, 50.0, 500.0])),
        1 => format!("constant: {{rate: {}}}", pick(&mut rng, &[1.0, 20.0, 400.0])),
        _ => format!(
            "closed: {{concurrency: {}, think_time_s: {}}}",
            pick(&mut rng, &[1, 3, 16, 64]),
            pick(&mut rng, &[0.0, 0.0, 0.005, 0.2])
        ),
    };
    let engine = match rng.random_range(0..3) {
        // A model as two numbers (docs/engine.md).
        0 | 1 => format!(
            "hardware: {{hbm_gib: 80, memory_bandwidth_gbps: {}, peak_tflops: {}}}
model:
  context_length: 32768
  weights: {{parameters_billions: {}}}
  kv_cache: {{bytes_per_token: 131072, block_size: {block_size}, num_blocks: {num_blocks}}}
latency: {{step_overhead_ms: {}, per_sequence_overhead_us: {}, request_overhead_ms: {}}}",
            pick(&mut rng, &[300, 3000]),
            pick(&mut rng, &[100, 989]),
            pick(&mut rng, &[0.5, 7.0, 70.0]),
            pick(&mut rng, &[0.0, 0.0, 1.5]),
            pick(&mut rng, &[0.0, 0.0, 7.0]),
            pick(&mut rng, &[0.0, 0.0, 3.0]),
        ),
        // An architecture with tensor parallelism (docs/deployments.md).
        _ => format!(
            "hardware: h100-80gb
model: {{preset: llama-3.1-70b, context_length: 32768, kv_cache: {{block_size: {block_size}, num_blocks: {num_blocks}}}}}
parallelism: {{tensor: {}}}
latency: {{per_sequence_overhead_us: {}}}",
            pick(&mut rng, &[4, 8]),
            pick(&mut rng, &[0.0, 5.0]),
        ),
    };
    let (prompt_scale, output_scale) = (pick(&mut rng, &[8, 64, 600]), pick(&mut rng, &[40, 300, 1200]));
    format!(
        "name: stretch-{i}
{engine}
scheduler: {{max_batch_tokens: {budget}, max_num_sequences: {max_seqs}}}
workload:
  seed: {seed}
  arrivals: {{{arrivals}}}
  requests: {requests}
  prompt_tokens: {prompt}
  output_tokens: {output}
",
        seed = rng.random_range(0..1000),
        requests = rng.random_range(1..=150),
        prompt = length(&mut rng, prompt_scale),
        output = length(&mut rng, output_scale),
    )
}

/// Counts the steps taken in stretches, and the stretches that admitted
/// requests, their steps and joiners (with prefix caching: those looked
/// up, and those that hit).
#[derive(Default)]
struct Joins {
    stretched: u64,
    stretches: u64,
    steps: u64,
    joined: u64,
    looked_up: u64,
    hit: u64,
}

impl Observer for Joins {
    fn decode_stretch(&mut self, s: &llmsim_core::engine::Stretch<'_>) {
        self.stretched += s.steps.len() as u64;
        if !s.joins.is_empty() {
            self.stretches += 1;
            self.steps += s.steps.len() as u64;
            self.joined += s.joins.len() as u64;
            self.looked_up += s.joins.iter().filter(|j| j.prefix_hit.is_some()).count() as u64;
            self.hit += s.joins.iter().filter(|j| j.prefix_hit.is_some_and(|c| c > 0)).count() as u64;
        }
    }
}

fn run(s: &Scenario, stepping: Stepping) -> (Result<RunOutput, String>, Events, Joins) {
    let mut extra = (Events::default(), Joins::default());
    let run = llmsim_planner::Run::new(s).options(CollectorOptions { keep_steps: true }).stepping(stepping);
    let out = run.observed(&mut extra).map_err(|e| e.to_string());
    (out, extra.0, extra.1)
}

/// Runs scenario `i` (`text`) step by step and with stretches and asserts
/// the same result JSON, request and step records, error and observer
/// events. Returns the step-by-step result (if the run succeeded) and what
/// the stretches admitted.
fn same_both_ways(i: u64, text: &str) -> (Option<RunOutput>, Joins) {
    let s = scenario(text);
    let (exact, exact_events, _) = run(&s, Stepping::Exact);
    let (fast, fast_events, fast_joins) = run(&s, Stepping::MacroSteps);
    let out = match (exact, fast) {
        (Ok(a), Ok(b)) => {
            assert_eq!(to_json(&a.result), to_json(&b.result), "result JSON, scenario {i}:\n{text}");
            assert_eq!(a.requests, b.requests, "request records, scenario {i}:\n{text}");
            assert_eq!(a.steps, b.steps, "step records, scenario {i}:\n{text}");
            Some(a)
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "the same error, scenario {i}:\n{text}");
            None
        }
        (a, b) => panic!("scenario {i}: exact {:?}, stretches {:?}\n{text}", a.err(), b.err()),
    };
    if let Some(k) =
        (0..exact_events.0.len().max(fast_events.0.len())).find(|&k| exact_events.0.get(k) != fast_events.0.get(k))
    {
        panic!(
            "event {k} differs: {:?} (step by step) against {:?} (stretches), scenario {i}:\n{text}",
            exact_events.0.get(k),
            fast_events.0.get(k)
        );
    }
    (out, fast_joins)
}

impl Joins {
    fn add(&mut self, o: &Joins) {
        self.stretched += o.stretched;
        self.stretches += o.stretches;
        self.steps += o.steps;
        self.joined += o.joined;
        self.looked_up += o.looked_up;
        self.hit += o.hit;
    }
}

#[test]
fn decode_stretches_give_the_same_bytes_as_the_step_by_step_path() {
    let (mut steps, mut runs_with_long_outputs) = (0u64, 0u64);
    let mut joins = Joins::default();
    for i in 0..160 {
        let text = generate(i);
        let (out, fast_joins) = same_both_ways(i, &text);
        joins.add(&fast_joins);
        if let Some(a) = out {
            steps += a.result.steps.count;
            runs_with_long_outputs += u64::from(a.result.tpot_ms.count > 0);
        }
    }
    // The generator must exercise the stretches, not only short runs.
    assert!(steps > 200_000, "only {steps} steps over the generated scenarios");
    assert!(runs_with_long_outputs > 100, "{runs_with_long_outputs} runs with a TPOT");
    // Arrivals must join stretches too (with and without a request
    // overhead): 1,764 requests joined 226 stretches of 124,512 steps in all
    // when this was written.
    println!(
        "{steps} steps; {} of them in {} stretches that admitted {} requests",
        joins.steps, joins.stretches, joins.joined
    );
    assert!(
        joins.joined > 500 && joins.steps > 50_000,
        "too few stretches with joiners: {steps} steps, {}",
        joins.steps
    );
}

/// Runs the generated scenarios with an architecture (Llama-3.1-70B at
/// TP 4 or 8), each rewritten by `rewrite` (`None` skips it), both ways,
/// and checks that enough of them ran for enough steps.
fn architecture_variants(rewrite: impl Fn(u64, &str) -> Option<String>) {
    let (mut runs, mut steps) = (0, 0u64);
    for i in 0..120 {
        let text = generate(i);
        if !text.contains("preset: llama-3.1-70b") {
            continue;
        }
        let Some(text) = rewrite(i, &text) else { continue };
        let (out, _) = same_both_ways(i, &text);
        runs += 1;
        steps += out.map_or(0, |a| a.result.steps.count);
    }
    assert!(runs >= 20 && steps > 20_000, "{runs} runs, {steps} steps");
}

/// Multi-head latent attention prices decode pairs apart from prefill
/// ones (its absorbed form), in the roofline and the per-operator form:
/// the stretches must count them as the steps do. The generated scenarios
/// with an architecture, on DeepSeek-V3 in FP8 with the h200-vllm
/// calibration (per operator) or without it (roofline).
#[test]
fn latent_attention_stretches_give_the_same_bytes_as_the_step_by_step_path() {
    architecture_variants(|i, text| {
        let hardware = if i % 2 == 0 { "hardware: h200\ncalibration: h200-vllm" } else { "hardware: h200" };
        Some(
            text.replace("preset: llama-3.1-70b", "preset: deepseek-v3, weights: {bytes_per_parameter: 1}")
                .replace("hardware: h100-80gb", hardware),
        )
    });
}

/// The same with sliding-window layers (gpt-oss-120b: 18 of 36 layers see
/// 128 tokens): a stretch runs only while every request's window is full,
/// and prices each decode's window reads and pairs as the step does; the
/// generated prompts are short enough that many requests are younger than
/// their window at first.
#[test]
fn sliding_window_stretches_give_the_same_bytes_as_the_step_by_step_path() {
    architecture_variants(|_, text| {
        (!text.contains("prefix_caching: true")).then(|| text.replace("preset: llama-3.1-70b", "preset: gpt-oss-120b"))
    });
}

/// The same with pipeline stages (docs/deployments.md): a step is priced
/// on its busiest micro-batch, whose size depends on the largest request
/// in the step, so the stretches must track it as the steps do; TP 4 x
/// PP 2 hands off inside a node, TP 8 x PP 2 or 4 between nodes.
#[test]
fn pipeline_stretches_give_the_same_bytes_as_the_step_by_step_path() {
    architecture_variants(|i, text| {
        let text = text.replace("parallelism: {tensor: 4}", "parallelism: {tensor: 4, pipeline: 2}").replace(
            "parallelism: {tensor: 8}",
            &format!("parallelism: {{tensor: 8, pipeline: {}}}", if i % 3 == 0 { 4 } else { 2 }),
        );
        assert!(text.contains("pipeline:"), "{text}");
        Some(text)
    });
}

/// TensorRT-LLM's and SGLang's schedulers (`engine: trtllm`, `engine:
/// sglang`): their stretches run while nothing waits and end before an
/// arrival joins (SGLang's `new_token_ratio` decays once a decode step, and
/// its `batch_is_full` latch opens when a request leaves, inside them too;
/// with mixed chunks a prefill step decodes, and so is never in one).
/// Every generated scenario under each engine's settings in turn, with and
/// without prefix caching; both ways must give the same bytes, and a
/// fortieth of the steps at least must be taken in stretches (or this
/// compares the step-by-step path with itself).
#[test]
fn other_engines_stretches_give_the_same_bytes_as_the_step_by_step_path() {
    let engines = [
        "engine: sglang",
        "engine: sglang\nscheduler_extra: {new_token_ratio: 0.7}",
        "engine: sglang\nscheduler_extra: {mixed_chunk: true}",
        "engine: sglang\nscheduler_extra: {mixed_chunk: true, max_prefill_tokens: 40}",
        "engine: trtllm",
        "engine: trtllm\nscheduler_extra: {capacity_scheduler_policy: MAX_UTILIZATION}",
        "engine: trtllm\nscheduler_extra: {capacity_scheduler_policy: STATIC_BATCH}",
        "engine: trtllm\nscheduler_extra: {context_chunking_policy: FIRST_COME_FIRST_SERVED}",
        "engine: trtllm\nscheduler_extra: {capacity_scheduler_policy: MAX_UTILIZATION, context_chunking_policy: EQUAL_PROGRESS}",
    ];
    let mut by_engine = vec![(0u64, 0u64); engines.len()];
    let n = engines.len() as u64;
    for i in 0..20 * n {
        let k = (i % n) as usize;
        // An odd number of settings: each with and without prefix caching.
        let base = if i % 2 == 0 { generate(2000 + i) } else { generate_prefix(2000 + i) };
        let (engine, extra) = engines[k]
            .split_once("\nscheduler_extra: {")
            .map_or((engines[k], ""), |(e, x)| (e, x.trim_end_matches('}')));
        let mut text = base.replacen("scheduler: {", &format!("{engine}\nscheduler: {{"), 1);
        if !extra.is_empty() {
            text = text.replacen("max_num_sequences: ", &format!("{extra}, max_num_sequences: "), 1);
        }
        if extra.contains("chunking") {
            // Chunks are whole blocks: the budget holds one at least.
            text = text.replacen("max_batch_tokens: 8,", "max_batch_tokens: 64,", 1);
        }
        let (out, joins) = same_both_ways(i, &text);
        assert_eq!(joins.joined, 0, "a request joined a stretch under {engine}, scenario {i}:\n{text}");
        by_engine[k].0 += out.map_or(0, |a| a.result.steps.count);
        by_engine[k].1 += joins.stretched;
    }
    for (k, &(steps, stretched)) in by_engine.iter().enumerate() {
        println!("{}: {stretched} of {steps} steps in stretches", engines[k]);
    }
    for (k, &(steps, stretched)) in by_engine.iter().enumerate() {
        // Their generated loads queue often (a waiting request ends a
        // stretch under these engines): 4% to 26% of the steps were in
        // stretches when this was written.
        assert!(steps > 10_000 && stretched * 40 > steps, "{}: {stretched} of {steps} steps in stretches", engines[k]);
    }
}

/// The stretches must actually be taken, or the test above compares the
/// step-by-step path with itself: a steady decode batch takes far fewer
/// engine calls with stretches than steps.
#[test]
fn a_steady_decode_batch_runs_in_stretches() {
    use llmsim_core::engine::Engine;
    use llmsim_planner::workload::{AnySource, Source};
    let text = "name: steady
hardware: {hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
model:
  context_length: 32768
  weights: {parameters_billions: 7}
  kv_cache: {bytes_per_token: 131072, block_size: 16, num_blocks: 20000}
scheduler: {max_batch_tokens: 8192, max_num_sequences: 64}
workload:
  seed: 1
  arrivals: {closed: {concurrency: 8}}
  requests: 8
  prompt_tokens: 100
  output_tokens: 500
";
    let s = scenario(text);
    let mut engine = Engine::new(s.engine_config());
    let mut source = AnySource::new(&s);
    while let Some(r) = source.pop() {
        engine.submit(r, &mut ()).unwrap();
    }
    // The prefill step, then one stretch of 498 steps (each request stops
    // one step short of its 500th token), then the last step.
    assert!(engine.step(&mut ()).is_some());
    let never = SimTime::from_nanos(u64::MAX);
    assert_eq!(engine.decode_stretch(never, never, u64::MAX, &mut ()), 498);
    assert_eq!(engine.decode_stretch(never, never, u64::MAX, &mut ()), 0, "the next step finishes requests");
    assert!(engine.step(&mut ()).is_some());
    assert!(engine.is_idle());
}

/// [`generate`] with prefix caching: unique prompts, shared prefixes or
/// multi-turn sessions, over the same small caches (evictions are common).
fn generate_prefix(i: u64) -> String {
    let text = generate(1000 + i).replacen("num_blocks: ", "prefix_caching: true, num_blocks: ", 1);
    let mut rng = ChaCha8Rng::seed_from_u64(0x9F_E71C + i);
    let extra = match rng.random_range(0..4) {
        0 => String::new(),
        1 => format!(
            "  shared_prefix: {{groups: {}, tokens: {}}}\n",
            pick(&mut rng, &[1, 2, 8]),
            pick(&mut rng, &[16, 100, 384])
        ),
        2 => format!("  sessions: {{turns: {}, think_s: 0.01}}\n", pick(&mut rng, &[2, 4])),
        _ => format!(
            "  shared_prefix: {{groups: 2, tokens: {}}}\n  sessions: {{turns: 3, think_s: 0}}\n",
            pick(&mut rng, &[8, 200])
        ),
    };
    text + &extra
}

#[test]
fn decode_stretches_with_prefix_caching_give_the_same_bytes_as_the_step_by_step_path() {
    // Joiners are looked up inside the stretch, after the step's block
    // crossings and fills: the same hits, evictions, cached-block counts,
    // lookup events and figures as Engine::step.
    let mut steps = 0u64;
    let mut joins = Joins::default();
    for i in 0..120 {
        let text = generate_prefix(i);
        let (out, fast_joins) = same_both_ways(i, &text);
        joins.add(&fast_joins);
        steps += out.map_or(0, |a| a.result.steps.count);
    }
    println!(
        "{steps} steps; {} of them in {} stretches that admitted {} requests ({} looked up, {} hit)",
        joins.steps, joins.stretches, joins.joined, joins.looked_up, joins.hit
    );
    // The prefix-caching joiners must be taken, or this compares the
    // step-by-step path with itself.
    assert!(joins.looked_up == joins.joined, "a joiner without a lookup");
    assert!(joins.looked_up > 500 && joins.hit > 100, "too few prefix-cache joiners: {}", joins.looked_up);
}

#[test]
fn a_stretch_through_finishes_gives_the_events_of_step_by_step_in_one_call() {
    // `Engine::decode_stretch_through`, which no driver calls: eight
    // requests of 100 prompt tokens and 100, 150, ..., 450 output tokens
    // decode together after their prefill step. Through finishes, one call
    // runs every step left: the longest releases tokens 2 to 450 in 449
    // steps, and the others finish inside it, each told to the driver at
    // its end, in the order the step-by-step path finishes them.
    use llmsim_core::engine::{Engine, Request};
    let text = "name: through
hardware: {hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
model:
  context_length: 32768
  weights: {parameters_billions: 7}
  kv_cache: {bytes_per_token: 131072, block_size: 16, num_blocks: 20000}
scheduler: {max_batch_tokens: 8192, max_num_sequences: 64}
workload: {arrivals: {poisson: {rate: 1}}, requests: 8, prompt_tokens: 100, output_tokens: 100}
";
    let s = scenario(text);
    let mut exact = Engine::new(s.engine_config());
    for id in 0..8u64 {
        let req = Request::new(id, SimTime::ZERO, 100, 100 + 50 * id as u32);
        exact.submit(req, &mut ()).unwrap();
    }
    let mut stretched = exact.clone();
    let mut want = Events::default();
    while exact.step(&mut want).is_some() {}
    assert!(exact.is_idle());
    let finishes: Vec<&String> = want.0.iter().filter(|e| e.starts_with("finished")).collect();
    assert_eq!(finishes.len(), 8);

    let mut got = Events::default();
    assert!(stretched.step(&mut got).is_some(), "the prefill step");
    let never = SimTime::from_nanos(u64::MAX);
    let mut told = Vec::new();
    let mut on_finish = |id: RequestId, at: SimTime| {
        told.push(format!("finished {id} {at}"));
        never
    };
    assert_eq!(stretched.decode_stretch_through(never, never, u64::MAX, &mut on_finish, &mut got), 449);
    assert!(stretched.is_idle() && stretched.kv_blocks_used() == 0);
    assert_eq!(stretched.clock(), exact.clock());
    assert_eq!(told.iter().collect::<Vec<_>>(), finishes, "the finishes told to the driver");
    assert!(got.0 == want.0, "the events differ from the step-by-step path's");
}
