//! Seeded randomized runs over generated scenarios, checking the engine's
//! invariants from outside: an observer keeps its own model of every
//! request (tokens, KV blocks held, queue state) and compares it with what
//! the engine reports after every step.

use std::collections::BTreeSet;
use std::path::Path;

use llmsim_core::engine::{Engine, Observer, RejectReason, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_planner::run_driver::{RunLimits, Setup, SimError, drive};
use llmsim_planner::sim::Single;
use llmsim_planner::workload::AnySource;
use llmsim_scenario::config::{self, Scenario};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How many scenarios one test run generates.
const SCENARIOS: u64 = 1_200;

#[derive(Clone, Debug, Default)]
struct Req {
    prompt: u32,
    output: u32,
    generated: u32,
    computed: u32,
    held: u32,
    terminal: u32,
    finished: bool,
    /// Speculative decoding: drafts proposed for its next step.
    drafts: u32,
    /// `(priority, arrival at the engine, id)`: the priority policy's
    /// order (docs/priorities.md).
    key: (i32, SimTime, u64),
}

/// An independent model of the engine's bookkeeping, fed by its events.
pub(crate) struct Checker {
    block_size: u32,
    budget: u32,
    max_seqs: u32,
    reqs: Vec<Req>,
    used: u64,
    freed_this_step: u64,
    scheduled_this_step: BTreeSet<RequestId>,
    admitted_this_step: u32,
    tokens_this_step: u64,
    last_time: SimTime,
    last_step_end: SimTime,
    steps: u64,
    preemptions: u64,
    rejected: [u64; 2],
    errors: Vec<String>,
    /// Speculative decoding (docs/speculative.md): `k`, the lookahead
    /// slots a running request is given, and the context length that caps
    /// the drafts; the requests that received tokens in the step.
    spec: Option<(u32, u32, u32)>,
    tokened_this_step: BTreeSet<RequestId>,
    pub(crate) verified: u64,
    /// Under `scheduler.policy: priority`: each request's class (for its
    /// priority) and the delay before it reaches the engine; the keys of
    /// the requests admitted in the step.
    priority: Option<(llmsim_planner::workload::classes::Classes, u64)>,
    admitted_keys: Vec<(i32, SimTime, u64)>,
    pub(crate) priority_checks: u64,
    /// Under `engine: sglang`: an admission holds its first chunk's
    /// blocks only, and a step is all prompt tokens or all decodes; the
    /// step's (prompt, decode) entries.
    sglang: bool,
    kinds_this_step: (u32, u32),
}

impl Checker {
    pub(crate) fn new(s: &Scenario) -> Checker {
        Checker {
            block_size: s.capacity.block_size,
            budget: s.scheduler.max_batch_tokens,
            max_seqs: s.scheduler.max_num_sequences,
            reqs: Vec::new(),
            used: 0,
            freed_this_step: 0,
            scheduled_this_step: BTreeSet::new(),
            admitted_this_step: 0,
            tokens_this_step: 0,
            last_time: SimTime::ZERO,
            last_step_end: SimTime::ZERO,
            steps: 0,
            preemptions: 0,
            rejected: [0; 2],
            errors: Vec::new(),
            spec: s.engine_config().speculative.map(|sp| (sp.tokens, sp.lookahead, s.model.context_length)),
            tokened_this_step: BTreeSet::new(),
            verified: 0,
            priority: (s.scheduler.policy() == config::PolicyName::Priority).then(|| {
                let classes = llmsim_planner::workload::classes::Classes::of(s).expect("classes with priority");
                (classes, llmsim_core::time::secs_to_nanos(s.latency.request_overhead_ms / 1e3))
            }),
            admitted_keys: Vec::new(),
            priority_checks: 0,
            sglang: s.engine == config::EngineKind::Sglang,
            kinds_this_step: (0, 0),
        }
    }

    /// Under priority: the running requests (holding blocks, not ended).
    fn running_keys(&self) -> impl Iterator<Item = (i32, SimTime, u64)> + '_ {
        self.reqs.iter().filter(|r| r.held > 0 && r.terminal == 0).map(|r| r.key)
    }

    fn fail(&mut self, msg: String) {
        if self.errors.len() < 5 {
            self.errors.push(msg);
        }
    }

    fn blocks(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_size)
    }

    fn time(&mut self, at: SimTime, what: &str) {
        if at < self.last_time {
            self.fail(format!("time went back at {what}: {at} < {}", self.last_time));
        }
        self.last_time = at;
    }

    fn set_held(&mut self, id: RequestId, blocks: u32) {
        let r = &mut self.reqs[id as usize];
        self.used = self.used + u64::from(blocks) - u64::from(r.held);
        r.held = blocks;
    }

    fn live(&self) -> usize {
        self.reqs.iter().filter(|r| r.terminal == 0).count()
    }

    /// Compares the model with the engine between steps.
    pub(crate) fn after_step(&mut self, engine: &Engine) {
        if let Err(e) = engine.check_invariants() {
            self.fail(format!("engine: {e}"));
        }
        if u64::from(engine.kv_blocks_used()) != self.used {
            self.fail(format!("engine uses {} blocks, requests hold {}", engine.kv_blocks_used(), self.used));
        }
        if engine.kv_blocks_used() > engine.kv_blocks_total() {
            self.fail("more blocks used than exist".into());
        }
        let queued = engine.num_running() + engine.num_waiting() + engine.num_pending();
        if queued != self.live() {
            self.fail(format!("{queued} requests in the engine's queues, {} live", self.live()));
        }
    }
}

impl Observer for Checker {
    fn arrived(&mut self, id: RequestId, _at: SimTime, prompt: u32, output: u32) {
        if id as usize != self.reqs.len() {
            self.fail(format!("id {id} out of order"));
        }
        let key = match &self.priority {
            Some((c, delay)) => (c.priority_of(id), _at.plus_nanos(*delay), id),
            None => (0, _at, id),
        };
        self.reqs.push(Req { prompt, output, key, ..Req::default() });
    }

    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.time(at, "scheduled");
        if !self.scheduled_this_step.insert(id) {
            self.fail(format!("request {id} scheduled twice in one step"));
        }
        let r = self.reqs[id as usize].clone();
        if r.terminal > 0 {
            self.fail(format!("request {id} scheduled after it ended"));
        }
        if computed != r.computed {
            self.fail(format!("request {id}: engine says {computed} computed, model {}", r.computed));
        }
        let known = r.prompt + r.generated;
        // Drafts ride along only while decoding (one known token left).
        if r.drafts > 0 && r.computed + 1 != known {
            self.fail(format!("request {id} holds {} drafts with {} of {known} computed", r.drafts, r.computed));
        }
        if tokens == 0 || r.computed + tokens > known + r.drafts {
            self.fail(format!(
                "request {id}: {tokens} tokens with {} of {known} computed and {} drafts",
                r.computed, r.drafts
            ));
        }
        // Lookahead slots only in a step that verifies drafts.
        let lookahead = if r.computed + tokens > known { self.spec.map_or(0, |(_, l, _)| l) } else { 0 };
        // A decode: one token after the prompt (and tokens) computed.
        let decode = r.generated > 0 && r.computed + 1 == known && tokens == 1;
        if decode {
            self.kinds_this_step.1 += 1;
        } else {
            self.kinds_this_step.0 += 1;
        }
        let want = if r.held == 0 {
            // admission takes the whole known length at once (SGLang: the
            // blocks of the tokens it computes)
            self.admitted_this_step += 1;
            self.admitted_keys.push(r.key);
            if self.sglang { self.blocks(r.computed + tokens) } else { self.blocks(known) }
        } else {
            r.held.max(self.blocks(r.computed + tokens + lookahead))
        };
        self.set_held(id, want);
        self.reqs[id as usize].computed += tokens;
        self.reqs[id as usize].drafts = 0;
        self.tokens_this_step += u64::from(tokens);
    }

    fn speculated(&mut self, id: RequestId, at: SimTime, drafted: u32, accepted: u32) {
        self.time(at, "speculated");
        self.verified += 1;
        let r = &mut self.reqs[id as usize];
        let known = r.prompt + r.generated;
        if self.spec.is_none() || drafted == 0 || accepted > drafted || r.computed != known + drafted {
            let c = r.computed;
            self.fail(format!("request {id}: verified {accepted} of {drafted} drafts with {c} of {known} computed"));
            return;
        }
        r.computed -= drafted - accepted;
    }

    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.time(at, "preempted");
        if self.scheduled_this_step.contains(&id) {
            self.fail(format!("request {id} preempted after being scheduled in the same step"));
        }
        // Under priority the victim is the running request with the
        // largest key.
        if self.priority.is_some() {
            self.priority_checks += 1;
            let top = self.running_keys().max();
            if top != Some(self.reqs[id as usize].key) {
                self.fail(format!("request {id} preempted, but the largest running key is {top:?}"));
            }
        }
        self.preemptions += 1;
        self.set_held(id, 0);
        self.reqs[id as usize].computed = 0;
        self.reqs[id as usize].drafts = 0;
    }

    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.time(at, "token");
        let r = &mut self.reqs[id as usize];
        r.generated += 1;
        let (g, known, computed) = (r.generated, r.prompt + r.generated - 1, r.computed);
        if index != g {
            self.fail(format!("request {id}: token #{index} but {g} generated"));
        }
        // With drafts a step releases several tokens: the KV matches the
        // last one's (checked at the step's end).
        if self.spec.is_some() {
            self.tokened_this_step.insert(id);
        } else if computed != known {
            self.fail(format!("request {id} sampled with {computed} of {known} tokens computed"));
        }
    }

    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.time(at, "finished");
        let r = self.reqs[id as usize].clone();
        if r.generated != r.output {
            self.fail(format!("request {id} finished with {} of {} tokens", r.generated, r.output));
        }
        self.freed_this_step += u64::from(r.held);
        self.set_held(id, 0);
        let r = &mut self.reqs[id as usize];
        r.terminal += 1;
        r.finished = true;
    }

    fn rejected(&mut self, id: RequestId, _at: SimTime, reason: RejectReason) {
        self.rejected[(reason == RejectReason::NeverFits) as usize] += 1;
        if self.reqs[id as usize].held != 0 {
            self.fail(format!("request {id} rejected while holding KV"));
        }
        self.reqs[id as usize].terminal += 1;
    }

    fn step(&mut self, s: &StepRecord) {
        self.steps += 1;
        if s.start < self.last_step_end || s.end <= s.start {
            self.fail(format!("step {} runs {}..{} after {}", s.index, s.start, s.end, self.last_step_end));
        }
        self.last_step_end = s.end;
        // SGLang's budget (its chunked_prefill_size) bounds prefill steps;
        // a decode step takes every running request.
        let decode_only = self.sglang && self.kinds_this_step.0 == 0;
        if (s.tokens > self.budget && !decode_only) || u64::from(s.tokens) != self.tokens_this_step {
            self.fail(format!(
                "step {}: {} tokens, {} scheduled, budget {}",
                s.index, s.tokens, self.tokens_this_step, self.budget
            ));
        }
        if s.batch_size > self.max_seqs || s.running > self.max_seqs {
            self.fail(format!("step {}: batch {} over max_num_sequences {}", s.index, s.batch_size, self.max_seqs));
        }
        if s.batch_size as usize != self.scheduled_this_step.len() {
            self.fail(format!(
                "step {}: batch {} but {} scheduled",
                s.index,
                s.batch_size,
                self.scheduled_this_step.len()
            ));
        }
        if u64::from(s.kv_blocks_used) != self.used + self.freed_this_step {
            self.fail(format!(
                "step {}: {} blocks reported, model {}",
                s.index,
                s.kv_blocks_used,
                self.used + self.freed_this_step
            ));
        }
        if self.sglang && self.kinds_this_step.0 > 0 && self.kinds_this_step.1 > 0 {
            self.fail(format!(
                "step {}: SGLang mixed {} prompt entries with {} decodes",
                s.index, self.kinds_this_step.0, self.kinds_this_step.1
            ));
        }
        self.kinds_this_step = (0, 0);
        if s.preempted > 0 && self.admitted_this_step > 0 {
            self.fail(format!("step {}: admitted requests in a step that preempted", s.index));
        }
        // Under priority the step admitted a prefix of the waiting
        // requests in key order: in order, and no request left waiting
        // (arrived by the step's start) comes before one admitted.
        if self.priority.is_some() && !self.admitted_keys.is_empty() {
            self.priority_checks += 1;
            if self.admitted_keys.windows(2).any(|w| w[0] >= w[1]) {
                self.fail(format!("step {}: admitted out of key order: {:?}", s.index, self.admitted_keys));
            }
            let last = self.admitted_keys[self.admitted_keys.len() - 1];
            let start = s.start;
            let skipped = (self.reqs.iter())
                .find(|r| r.held == 0 && r.terminal == 0 && r.key.1 <= start && r.key < last && !r.finished);
            if let Some(r) = skipped {
                self.fail(format!("step {}: {:?} left waiting behind admitted {last:?}", s.index, r.key));
            }
        }
        self.admitted_keys.clear();
        if let Some((k, _, context)) = self.spec {
            for id in std::mem::take(&mut self.tokened_this_step) {
                let r = &mut self.reqs[id as usize];
                let known = r.prompt + r.generated;
                // (A finished request may have kept drafts past its end.)
                if r.finished {
                    continue;
                }
                if r.computed + 1 != known {
                    let c = r.computed;
                    self.fail(format!("request {id} released its tokens with {c} of {known} computed"));
                    continue;
                }
                r.drafts = k.min(context - known);
            }
        }
        self.scheduled_this_step.clear();
        self.freed_this_step = 0;
        self.admitted_this_step = 0;
        self.tokens_this_step = 0;
    }
}

pub(crate) fn pick<T: Copy>(rng: &mut ChaCha8Rng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

pub(crate) fn length(rng: &mut ChaCha8Rng, scale: u32) -> String {
    let mean = rng.random_range(1..=scale);
    match rng.random_range(0..6) {
        0 | 1 => mean.to_string(),
        2 => format!("{{uniform: [{}, {}]}}", mean.div_ceil(2), mean + mean / 2),
        3 => format!("{{normal: {{mean: {mean}, std: {}}}}}", mean / 2 + 1),
        4 => format!("{{lognormal: {{mean: {mean}, std: {}, max: {}}}}}", mean, scale * 2),
        _ => format!("{{choice: {{values: [1, {mean}, {}], weights: [1, 3, 1]}}}}", mean * 2),
    }
}

/// A random scenario: small caches, tight budgets and overload are common.
fn generate(i: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(0xC0FFEE + i);
    let block_size = pick(&mut rng, &[1, 2, 4, 8, 16, 32]);
    let num_blocks = pick(&mut rng, &[1, 3, 8, 20, 64, 200, 1000]);
    let watermark = pick(&mut rng, &[0.0, 0.0, 0.01, 0.05, 0.2]);
    let budget = pick(&mut rng, &[1, 7, 16, 64, 256, 2048, 8192]);
    let max_seqs = pick(&mut rng, &[1, 2, 4, 16, 64, 256]);
    let context = pick(&mut rng, &[16, 256, 2048, 32768]);
    let scale = pick(&mut rng, &[4, 32, 300, 1500]);
    let arrivals = match rng.random_range(0..5) {
        0 => format!("poisson: {{rate: {}}}", pick(&mut rng, &[0.5, 5.0, 50.0, 500.0, 5000.0])),
        1 => format!(
            "gamma: {{rate: {}, burstiness: {}}}",
            pick(&mut rng, &[5.0, 100.0, 2000.0]),
            pick(&mut rng, &[0.1, 0.5, 3.0])
        ),
        2 => format!("constant: {{rate: {}}}", pick(&mut rng, &[1.0, 40.0, 1000.0])),
        _ => format!(
            "closed: {{concurrency: {}, think_time_s: {}}}",
            pick(&mut rng, &[1, 3, 16, 64]),
            pick(&mut rng, &[0.0, 0.0, 0.005, 0.2])
        ),
    };
    format!(
        "name: gen-{i}
hardware: {{hbm_gib: 80, memory_bandwidth_gbps: {bw}, peak_tflops: {tf}}}
model:
  context_length: {context}
  weights: {{parameters_billions: {params}}}
  kv_cache: {{bytes_per_token: 131072, block_size: {block_size}, watermark: {watermark}, num_blocks: {num_blocks}}}
scheduler: {{max_batch_tokens: {budget}, max_num_sequences: {max_seqs}}}
latency: {{step_overhead_ms: {overhead}}}
workload:
  seed: {seed}
  arrivals: {{{arrivals}}}
  requests: {requests}
  prompt_tokens: {prompt}
  output_tokens: {output}
",
        bw = pick(&mut rng, &[300, 3000]),
        tf = pick(&mut rng, &[100, 989]),
        params = pick(&mut rng, &[0.5, 7.0, 70.0]),
        overhead = pick(&mut rng, &[0.0, 0.0, 1.5]),
        seed = rng.random_range(0..1000),
        requests = rng.random_range(1..=120),
        prompt = length(&mut rng, scale),
        output = length(&mut rng, scale / 2 + 1),
    )
}

/// Validates generated scenario text; a generator must only make valid ones.
pub fn scenario(text: &str) -> Scenario {
    let file = Path::new("generated.yml");
    let raw = config::parse_str(text, file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Totals over all generated runs, to prove the hard cases were exercised.
#[derive(Default, Debug)]
pub struct Coverage {
    pub runs: u64,
    pub requests: u64,
    pub finished: u64,
    pub preemptions: u64,
    pub rejected_context: u64,
    pub rejected_kv: u64,
    pub steps: u64,
    /// Runs that stopped at a run limit, by kind.
    pub stalled: u64,
    pub time_limit: u64,
    pub request_limit: u64,
    pub step_limit: u64,
}

/// Runs `s` within `limits`, checking the invariants after every step.
/// A run that finishes must leave the engine idle with every request ended
/// exactly once; a run that stops at a limit must have kept the invariants
/// up to that point. Panics (naming `label` and `text`) on a broken
/// invariant; returns how the run ended. Other generators (architectures,
/// prefix caching) call this with their own scenarios, and `extra`, another
/// observer that checks more. Requests reach the engine after the
/// scenario's request overhead.
pub fn check_scenario<X: Observer>(
    label: &str,
    text: &str,
    s: &Scenario,
    limits: &RunLimits,
    cov: &mut Coverage,
    extra: &mut X,
) -> Result<(), SimError> {
    let mut engine = Engine::new(s.engine_config());
    let mut source = AnySource::new(s);
    let mut checker = Checker::new(s);
    let delay = llmsim_core::time::secs_to_nanos(s.latency.request_overhead_ms / 1e3);
    let mut both = (&mut checker, extra);
    let setup = Setup { limits: *limits, delay_ns: delay, ..Setup::default() };
    let ended =
        drive(Single::new(&mut engine), &mut source, &mut both, &setup, |_, e, c| c.0.after_step(e), &mut |_| {});
    if ended.is_ok() {
        for (id, r) in checker.reqs.iter().enumerate() {
            if r.terminal != 1 {
                checker.errors.push(format!("request {id} ended {} times", r.terminal));
                break;
            }
        }
        assert!(engine.is_idle(), "{label}: engine not idle at the end\n{text}");
    } else if let Some((id, r)) = checker.reqs.iter().enumerate().find(|(_, r)| r.terminal > 1) {
        checker.errors.push(format!("request {id} ended {} times", r.terminal));
    }
    assert!(checker.errors.is_empty(), "{label}: {:#?}\n{text}", checker.errors);
    cov.runs += 1;
    cov.requests += checker.reqs.len() as u64;
    cov.finished += checker.reqs.iter().filter(|r| r.finished).count() as u64;
    cov.preemptions += checker.preemptions;
    cov.rejected_context += checker.rejected[0];
    cov.rejected_kv += checker.rejected[1];
    cov.steps += checker.steps;
    match &ended {
        Ok(()) => {}
        Err(SimError::Stalled { .. }) => cov.stalled += 1,
        Err(SimError::TimeLimit { .. }) => cov.time_limit += 1,
        Err(SimError::TooManyRequests { .. }) => cov.request_limit += 1,
        Err(SimError::TooManySteps { .. }) => cov.step_limit += 1,
        Err(e @ (SimError::WindowMissed { .. } | SimError::Cut { .. })) => {
            panic!("{label}: nothing asked this run to stop early: {e}")
        }
    }
    ended
}

fn check_one(i: u64, cov: &mut Coverage) {
    let text = generate(i);
    let s = scenario(&text);
    let label = format!("scenario {i}");
    if let Err(e) = check_scenario(&label, &text, &s, &RunLimits::default(), cov, &mut ()) {
        panic!("{label} stopped at a run limit: {e}\n{text}");
    }
}

#[test]
fn every_generated_scenario_keeps_the_engine_invariants() {
    let mut cov = Coverage::default();
    for i in 0..SCENARIOS {
        check_one(i, &mut cov);
    }
    // The generator must actually reach the hard cases.
    assert!(cov.preemptions > 1_000, "{cov:?}");
    assert!(cov.rejected_context > 100 && cov.rejected_kv > 100, "{cov:?}");
    assert!(cov.finished > cov.requests / 2, "{cov:?}");
    eprintln!("invariants held over {SCENARIOS} scenarios: {cov:?}");
}

/// Speculative decoding on the same generated scenarios: drafts of 1 to 7
/// tokens kept at a random rate, drafted free (n-gram) or by a small draft
/// model on the GPU (lookahead slots, the drafter's passes in every step).
/// The checker models drafts, verifies and several tokens a step; every
/// request still ends once with exactly its tokens.
#[test]
fn generated_scenarios_with_speculative_decoding_keep_the_invariants() {
    let (mut cov, mut verified) = (Coverage::default(), 0);
    for i in 0..SCENARIOS / 4 {
        let mut rng = ChaCha8Rng::seed_from_u64(0x5bec + i);
        let k = rng.random_range(1..=7u32);
        let rate = pick(&mut rng, &[0.0, 0.3, 0.7, 0.95, 1.0]);
        let drafter = match rng.random_bool(0.5) {
            true => "method: ngram".to_string(),
            false => "method: draft_model, draft_parameters_billions: 0.1, draft_kv_bytes_per_token: 4096".into(),
        };
        let spec = format!(
            "speculative: {{{drafter}, num_speculative_tokens: {k}, acceptance_rate: {rate}}}
"
        );
        let text = generate(i).replacen("scheduler:", &format!("{spec}scheduler:"), 1);
        let s = scenario(&text);
        let label = format!("speculative scenario {i}");
        let mut counted = VerifyCount(0);
        if let Err(e) = check_scenario(&label, &text, &s, &RunLimits::default(), &mut cov, &mut counted) {
            panic!("{label} stopped at a run limit: {e}\n{text}");
        }
        verified += counted.0;
    }
    assert!(cov.preemptions > 100 && verified > 10_000, "{cov:?}, {verified} verifies");
    assert!(cov.finished > cov.requests / 2, "{cov:?}");
    eprintln!("invariants held over {} speculative scenarios: {cov:?}, {verified} verifies", SCENARIOS / 4);
}

/// vLLM's priority policy on the same generated scenarios, with two to
/// four classes of random priorities and weights: the invariants hold, and
/// the checker confirms each preemption's victim is the running request
/// with the largest `(priority, arrival, id)` and each step admits the
/// waiting requests in that order.
#[test]
fn generated_scenarios_under_priority_scheduling_keep_the_invariants_and_the_order() {
    let mut cov = Coverage::default();
    let mut checks = 0;
    for i in 0..SCENARIOS / 4 {
        let mut rng = ChaCha8Rng::seed_from_u64(0x9e10 + i);
        let n = rng.random_range(2..=4);
        let classes: Vec<String> = (0..n)
            .map(|k| {
                let (w, p) = (pick(&mut rng, &[1, 2, 5]), pick(&mut rng, &[-2, 0, 0, 1, 3]));
                format!("{{name: c{k}, weight: {w}, priority: {p}}}")
            })
            .collect();
        let text = generate(i).replacen("max_num_sequences:", "policy: priority, max_num_sequences:", 1).replacen(
            "  seed:",
            &format!("  classes: [{}]\n  seed:", classes.join(", ")),
            1,
        );
        let s = scenario(&text);
        let label = format!("priority scenario {i}");
        let mut engine = Engine::new(s.engine_config());
        let mut source = AnySource::new(&s);
        let mut checker = Checker::new(&s);
        let delay = llmsim_core::time::secs_to_nanos(s.latency.request_overhead_ms / 1e3);
        let setup = Setup { limits: RunLimits::default(), delay_ns: delay, ..Setup::default() };
        let mut both = (&mut checker, &mut ());
        let ended =
            drive(Single::new(&mut engine), &mut source, &mut both, &setup, |_, e, c| c.0.after_step(e), &mut |_| {});
        assert!(checker.errors.is_empty(), "{label}: {:#?}\n{text}", checker.errors);
        assert!(ended.is_ok(), "{label}: {ended:?}");
        assert!(checker.reqs.iter().all(|r| r.terminal == 1), "{label}: a request did not end exactly once");
        checks += checker.priority_checks;
        cov.preemptions += checker.preemptions;
        cov.requests += checker.reqs.len() as u64;
        cov.finished += checker.reqs.iter().filter(|r| r.finished).count() as u64;
    }
    assert!(cov.preemptions > 100 && checks > 1_000, "{cov:?}, {checks} order checks");
    eprintln!("priority order held over {} scenarios: {cov:?}, {checks} order checks", SCENARIOS / 4);
}

/// Counts verify events.
struct VerifyCount(u64);

impl Observer for VerifyCount {
    fn speculated(&mut self, _: RequestId, _: SimTime, _: u32, _: u32) {
        self.0 += 1;
    }
}

/// TensorRT-LLM's scheduler (`engine: trtllm`) on the same generated
/// scenarios, under each capacity policy, with chunked prefill off and
/// under both chunking policies: the invariants hold (the engine's check
/// includes that the running requests' blocks to completion are free
/// under the no-evict policies), and nothing is preempted except under
/// `MAX_UTILIZATION`, which does pause.
#[test]
fn generated_scenarios_under_trtllm_keep_the_invariants_and_never_preempt() {
    let capacities = ["GUARANTEED_NO_EVICT", "MAX_UTILIZATION", "STATIC_BATCH"];
    let chunkings =
        ["", "context_chunking_policy: FIRST_COME_FIRST_SERVED, ", "context_chunking_policy: EQUAL_PROGRESS, "];
    let mut no_evict = Coverage::default();
    let mut max_util = Coverage::default();
    for i in 0..SCENARIOS / 4 {
        let capacity = capacities[(i % 3) as usize];
        let chunking = chunkings[(i / 3 % 3) as usize];
        let with = |chunking: &str| {
            let engine = format!("engine: trtllm\nscheduler: {{capacity_scheduler_policy: {capacity}, {chunking}");
            generate(i).replacen("scheduler: {", &engine, 1)
        };
        // Chunks are whole blocks: a budget under one block is refused
        // with chunking (tests/integration/cli_errors.rs), so those run
        // without.
        let mut text = with(chunking);
        if config::parse_str(&text, Path::new("g.yml"))
            .and_then(|r| config::validate::scenario(r, Path::new("g.yml")))
            .is_err_and(|e| e.message.contains("less than one KV block"))
        {
            text = with("");
        }
        let s = scenario(&text);
        let label = format!("trtllm scenario {i} ({capacity}, {chunking})");
        let cov = if capacity == "MAX_UTILIZATION" { &mut max_util } else { &mut no_evict };
        if let Err(e) = check_scenario(&label, &text, &s, &RunLimits::default(), cov, &mut ()) {
            panic!("{label} stopped at a run limit: {e}\n{text}");
        }
    }
    assert_eq!(no_evict.preemptions, 0, "{no_evict:?}");
    assert!(no_evict.rejected_kv > 10 && no_evict.finished > no_evict.requests / 2, "{no_evict:?}");
    assert!(max_util.preemptions > 0 && max_util.finished > max_util.requests / 2, "{max_util:?}");
}

/// SGLang's scheduler (`engine: sglang`) on the same generated scenarios,
/// half of them with a `new_token_ratio` (over-admission, then
/// retraction): the invariants hold, and every request ends.
#[test]
fn generated_scenarios_under_sglang_keep_the_invariants() {
    let mut cov = Coverage::default();
    for i in 0..SCENARIOS / 4 {
        let engine = match i % 2 {
            0 => "engine: sglang\nscheduler: {",
            _ => "engine: sglang\nscheduler: {new_token_ratio: 0.7, ",
        };
        let text = generate(i).replacen("scheduler: {", engine, 1);
        let s = scenario(&text);
        let label = format!("sglang scenario {i}");
        if let Err(e) = check_scenario(&label, &text, &s, &RunLimits::default(), &mut cov, &mut ()) {
            panic!("{label} stopped at a run limit: {e}\n{text}");
        }
    }
    assert!(cov.preemptions > 0 && cov.finished > cov.requests / 2, "{cov:?}");
}

/// How an extreme scenario must end.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Expect {
    /// Finishes, or stops at the time, request or step limit (huge
    /// workloads on purpose), never stalled.
    FinishOrLimit,
    /// A closed loop of users always rejected at once, with think time 0
    /// and only a duration: stalled.
    Stalled,
    /// A closed loop with think time 0 and only a duration whose random
    /// lengths may all be rejected: [`Expect::FinishOrLimit`] or stalled.
    MayStall,
    /// Always rejected, with a request count: finishes, every request
    /// rejected, none finished.
    AllRejected,
}

/// Scenarios at the edges of every range ([`llmsim_scenario::config::limits`]),
/// with `duration_s` as often as `requests`, and users whose requests
/// are always rejected. Past hangs and aborts (tests/integration/limits.rs) went unseen because
/// the plain generator never went there.
fn generate_extreme(i: u64) -> (String, Expect) {
    let mut rng = ChaCha8Rng::seed_from_u64(0xE7_7E3E + i);
    let context: u64 = pick(&mut rng, &[2, 64, 4096, 100_000_000]);
    let block_size: u64 = pick(&mut rng, &[1, 16, 65_536]);
    let num_blocks: u64 = pick(&mut rng, &[1, 2, 50, 4_294_967_295]);
    let watermark = pick(&mut rng, &[0.0, 0.5, 0.999]);
    let budget = pick(&mut rng, &[1, 3, 8192, 100_000_000]);
    let max_seqs = pick(&mut rng, &[1, 2, 1_000_000]);
    // The cheapest step must cost 1 us: tiny models carry an overhead.
    let (params, overhead) = pick(&mut rng, &[(0.000001, 0.001), (0.5, 0.0), (0.5, 60_000.0), (100_000.0, 0.0)]);
    let bw = pick(&mut rng, &[1, 3000, 1_000_000]);
    let tf = pick(&mut rng, &[0.001, 989.0, 1_000_000.0]);
    let rejected = rng.random_range(0..4) == 0;
    let closed = rejected || rng.random_range(0..3) == 0;
    let think = pick(&mut rng, &[0.0, 0.0, 1e-9, 0.5, 1e3]);
    let arrivals = if closed {
        format!("closed: {{concurrency: {}, think_time_s: {think}}}", pick(&mut rng, &[1, 3, 1000]))
    } else {
        match rng.random_range(0..3) {
            0 => format!("poisson: {{rate: {}}}", pick(&mut rng, &[1e-6, 1.0, 1e9])),
            1 => format!(
                "gamma: {{rate: {}, burstiness: {}}}",
                pick(&mut rng, &[1e-6, 5.0, 1e9]),
                pick(&mut rng, &[0.001, 1.0, 1000.0])
            ),
            _ => format!("constant: {{rate: {}}}", pick(&mut rng, &[1e-6, 10.0, 1e9])),
        }
    };
    // Always rejected: longer than the context, or a prompt that never fits
    // beside the watermark (admission counts the prompt's blocks only).
    let too_long = (context + 1).min(u64::from(u32::MAX));
    let watermark_blocks = (watermark * num_blocks as f64).floor() as i128;
    let never_fits =
        |p: u64| i128::from(num_blocks) - i128::from(p.div_ceil(block_size)) < watermark_blocks && p < context;
    let tiny_cache = context >= 2 && never_fits(context - 1);
    let length = |rng: &mut ChaCha8Rng| -> String {
        match rng.random_range(0..6) {
            0 => "1".into(),
            1 => (context / 2).max(1).to_string(),
            2 => format!("{{lognormal: {{mean: 1, std: 4294967295, max: {}}}}}", context.max(1)),
            3 => format!("{{normal: {{mean: 4294967295, std: 4294967295, min: 1, max: {}}}}}", context.max(1)),
            4 => "{exponential: {mean: 4294967295, max: 7}}".into(),
            _ => format!("{{uniform: [1, {}]}}", context.clamp(1, u64::from(u32::MAX))),
        }
    };
    let (prompt, output) = if rejected {
        let prompt = if tiny_cache && rng.random_range(0..2) == 0 { context - 1 } else { too_long };
        (prompt.max(1).to_string(), "1".to_string())
    } else {
        (length(&mut rng), length(&mut rng))
    };
    // Open loops by duration stay under the request limit up front.
    let rate_bound: f64 = if arrivals.contains("1000000000") { 1e-3 } else { 10.0 };
    // 5000 requests one per 11.6 days span 1.6e10 s: past the time limit.
    let count = |rng: &mut ChaCha8Rng| if rng.random_range(0..8) == 0 { 5000 } else { rng.random_range(1..=200) };
    let (requests, duration) = match rng.random_range(0..3) {
        0 => (Some(count(&mut rng)), None),
        1 => (None, Some(pick(&mut rng, &[1e-9, 0.001, rate_bound]))),
        _ => (Some(count(&mut rng)), Some(pick(&mut rng, &[1e-9, 5.0]))),
    };
    let always_rejected = prompt.parse::<u64>().is_ok_and(|p| p + 1 > context || never_fits(p));
    assert!(!rejected || always_rejected, "generator: {prompt} is not always rejected");
    let expect = match (rejected, requests, think) {
        (true, None, 0.0) => Expect::Stalled,
        (true, Some(_), _) if duration.is_none() => Expect::AllRejected,
        (false, None, t) if closed && t == 0.0 => Expect::MayStall,
        _ => Expect::FinishOrLimit,
    };
    let mut text = format!(
        "name: extreme-{i}
hardware: {{hbm_gib: 80, memory_bandwidth_gbps: {bw}, peak_tflops: {tf}}}
model:
  context_length: {context}
  weights: {{parameters_billions: {params}}}
  kv_cache: {{bytes_per_token: 131072, block_size: {block_size}, watermark: {watermark}, num_blocks: {num_blocks}}}
scheduler: {{max_batch_tokens: {budget}, max_num_sequences: {max_seqs}}}
latency: {{step_overhead_ms: {overhead}}}
workload:
  seed: {seed}
  arrivals: {{{arrivals}}}
  prompt_tokens: {prompt}
  output_tokens: {output}
",
        seed = rng.random_range(0..u64::MAX),
    );
    if let Some(n) = requests {
        text.push_str(&format!("  requests: {n}\n"));
    }
    if let Some(d) = duration {
        text.push_str(&format!("  duration_s: {d}\n"));
    }
    (text, expect)
}

/// Extreme scenarios per test run.
const EXTREME: u64 = 1_000;

#[test]
fn extreme_scenarios_keep_the_invariants_and_end_or_stop_at_a_limit() {
    // Lower run limits keep the slice fast; the limits' logic is the same.
    let limits = RunLimits { max_requests: 5_000, max_steps: 50_000, ..RunLimits::default() };
    let mut cov = Coverage::default();
    let mut seen = std::collections::BTreeMap::new();
    for i in 0..EXTREME {
        let (text, expect) = generate_extreme(i);
        let s = scenario(&text);
        let label = format!("extreme scenario {i} ({expect:?})");
        let before = (cov.finished, cov.requests);
        let ended = check_scenario(&label, &text, &s, &limits, &mut cov, &mut ());
        match (expect, &ended) {
            (Expect::Stalled, Err(SimError::Stalled { .. })) => {}
            // 1000 users x 100 rounds pass the lowered request limit first.
            (Expect::Stalled, Err(SimError::TooManyRequests { limit, rejected, .. })) if rejected == limit => {}
            (Expect::AllRejected, Ok(())) => {
                assert_eq!(cov.finished, before.0, "{label}: a request finished\n{text}");
                assert!(cov.requests > before.1, "{label}: nothing issued\n{text}");
            }
            (Expect::FinishOrLimit | Expect::MayStall, Ok(()) | Err(SimError::TimeLimit { .. }))
            | (
                Expect::FinishOrLimit | Expect::MayStall,
                Err(SimError::TooManyRequests { .. } | SimError::TooManySteps { .. }),
            )
            | (Expect::MayStall, Err(SimError::Stalled { .. })) => {}
            _ => panic!("{label} ended {ended:?}\n{text}"),
        }
        *seen.entry(format!("{expect:?}")).or_insert(0) += 1;
    }
    // Every kind of ending was reached.
    assert!(cov.stalled > 10 && cov.time_limit > 0 && cov.request_limit > 0, "{cov:?} {seen:?}");
    assert!(seen.get("AllRejected").is_some_and(|&n| n > 10), "{seen:?}");
    assert!(cov.finished > 1000 && cov.rejected_context > 100 && cov.rejected_kv > 10, "{cov:?}");
    eprintln!("extreme invariants held over {EXTREME} scenarios: {cov:?} {seen:?}");
}
