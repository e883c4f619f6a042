//! The leanest step-by-step loop of docs/engine.md's rules that this
//! benchmark could write: the speed limit `llmsim run` is measured against.
//!
//! It runs the same rules as `Engine::step` (arrivals join `waiting`;
//! running requests oldest first take `min(remaining, budget)` tokens,
//! growth that does not fit preempts the newest; admission from the head
//! of `waiting` beside the watermark, only in a step that preempted
//! nothing; the roofline duration; tokens and finishes at the step's end)
//! for a model given as two numbers, with no prefix caching, no
//! per-sequence overhead and no request overhead. It keeps sums only (no
//! percentiles, no per-request records, no observer), on requests parsed
//! beforehand. It shares no code with the engine: only the scenario's
//! numbers, and `secs_to_nanos` so that durations round the same way and
//! the step counts can be compared.

use std::collections::VecDeque;

use llmsim_core::time::secs_to_nanos;
use llmsim_scenario::config::Scenario;

/// One request of the trace: arrival in nanoseconds, prompt and output tokens.
#[derive(Copy, Clone, Debug)]
pub struct Req {
    pub arrival: u64,
    pub prompt: u32,
    pub output: u32,
}

/// What the loop sums.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sums {
    pub steps: u64,
    pub completed: u64,
    pub rejected: u64,
    pub preemptions: u64,
    pub output_tokens: u64,
    /// Sums over completed requests, nanoseconds.
    pub ttft_ns: u128,
    pub e2e_ns: u128,
    /// Busy time: the sum of step durations.
    pub busy_ns: u128,
    /// The last token's time.
    pub end_ns: u64,
}

#[derive(Copy, Clone, Debug)]
struct Seq {
    arrival: u64,
    prompt: u32,
    output: u32,
    generated: u32,
    computed: u32,
    blocks: u32,
    first_token: u64,
    /// Tokens scheduled in the step being built.
    n: u32,
}

/// The numbers of the rules, read from the scenario.
pub struct Rules {
    budget: u32,
    max_seqs: usize,
    context: u64,
    block_size: u32,
    num_blocks: u32,
    watermark: u32,
    /// `2 * parameters`, FLOP/s, weight bytes, KV bytes a token, bytes/s,
    /// the step overhead in seconds.
    params2: f64,
    flops: f64,
    weight_bytes: f64,
    kv_bytes: f64,
    bytes_per_s: f64,
    overhead_s: f64,
}

impl Rules {
    pub fn of(s: &Scenario) -> Rules {
        let cfg = s.engine_config();
        let c = &cfg.cost;
        assert!(c.deployment.is_none() && c.per_sequence_s == 0.0 && !cfg.prefix_caching, "the lean loop's rules");
        Rules {
            budget: cfg.max_batch_tokens,
            max_seqs: cfg.max_num_sequences as usize,
            context: u64::from(cfg.context_length),
            block_size: cfg.capacity.block_size,
            num_blocks: cfg.capacity.num_blocks,
            watermark: cfg.capacity.watermark_blocks,
            params2: 2.0 * c.parameters,
            flops: c.flops_per_s,
            weight_bytes: c.weight_bytes,
            kv_bytes: c.kv_bytes_per_token,
            bytes_per_s: c.bytes_per_s,
            overhead_s: c.overhead_s,
        }
    }

    fn blocks(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_size)
    }

    /// The step's duration in nanoseconds, docs/engine.md section 3 step 4.
    #[inline]
    fn step_ns(&self, tokens: u64, sum_ctx: u64) -> u64 {
        let compute = self.params2 * tokens as f64 / self.flops;
        let memory = (self.weight_bytes + sum_ctx as f64 * self.kv_bytes) / self.bytes_per_s;
        secs_to_nanos(compute.max(memory) + self.overhead_s).max(1)
    }
}

/// Runs `reqs` (in arrival order) through the rules and returns the sums.
pub fn run(s: &Scenario, reqs: &[Req]) -> Sums {
    let r = Rules::of(s);
    let mut sums = Sums::default();
    let mut waiting: VecDeque<Seq> = VecDeque::new();
    let mut running: Vec<Seq> = Vec::new();
    let mut free = r.num_blocks;
    let mut clock = 0u64;
    let mut next = 0usize;
    loop {
        let start = if !running.is_empty() || !waiting.is_empty() {
            clock
        } else if next < reqs.len() {
            reqs[next].arrival.max(clock)
        } else {
            break;
        };
        while next < reqs.len() && reqs[next].arrival <= start {
            let q = reqs[next];
            next += 1;
            if u64::from(q.prompt) + u64::from(q.output) > r.context {
                sums.rejected += 1;
                continue;
            }
            let seq = Seq {
                arrival: q.arrival,
                prompt: q.prompt,
                output: q.output,
                generated: 0,
                computed: 0,
                blocks: 0,
                first_token: 0,
                n: 0,
            };
            waiting.push_back(seq);
        }
        let mut budget = r.budget;
        let mut preempted = 0u32;
        let mut scheduled = 0usize;
        // Running requests, oldest first.
        let mut i = 0;
        'running: while i < running.len() && budget > 0 {
            let s = running[i];
            let n = (s.prompt + s.generated - s.computed).min(budget);
            let need = r.blocks(s.computed + n).saturating_sub(s.blocks);
            while need > free {
                let mut victim = running.pop().expect("request i is running");
                free += victim.blocks;
                victim.blocks = 0;
                victim.computed = 0;
                waiting.push_front(victim);
                preempted += 1;
                if running.len() == i {
                    break 'running;
                }
            }
            free -= need;
            let s = &mut running[i];
            s.blocks += need;
            s.n = n;
            budget -= n;
            scheduled += 1;
            i += 1;
        }
        sums.preemptions += u64::from(preempted);
        // Admission from the head of waiting.
        if preempted == 0 {
            while let Some(head) = waiting.front() {
                let need = r.blocks(head.prompt + head.generated);
                if i64::from(r.num_blocks) - i64::from(need) < i64::from(r.watermark) {
                    waiting.pop_front();
                    sums.rejected += 1;
                    continue;
                }
                if budget == 0
                    || running.len() >= r.max_seqs
                    || i64::from(free) - i64::from(need) < i64::from(r.watermark)
                {
                    break;
                }
                let mut s = waiting.pop_front().expect("head");
                free -= need;
                s.blocks = need;
                s.n = (s.prompt + s.generated).min(budget);
                budget -= s.n;
                running.push(s);
                scheduled += 1;
            }
        }
        if scheduled == 0 {
            continue;
        }
        // The step's shape and duration: the scheduled requests are the
        // first `scheduled` of `running`.
        let (mut tokens, mut sum_ctx) = (0u64, 0u64);
        for s in &running[..scheduled] {
            tokens += u64::from(s.n);
            sum_ctx += u64::from(s.computed + s.n);
        }
        let d = r.step_ns(tokens, sum_ctx);
        let end = start + d;
        sums.steps += 1;
        sums.busy_ns += u128::from(d);
        // Emit: tokens at the step's end, finished requests free their blocks.
        let mut any_done = false;
        for s in &mut running[..scheduled] {
            s.computed += s.n;
            if s.computed < s.prompt + s.generated {
                continue;
            }
            s.generated += 1;
            if s.generated == 1 {
                s.first_token = end;
            }
            if s.generated == s.output {
                free += s.blocks;
                any_done = true;
                sums.completed += 1;
                sums.output_tokens += u64::from(s.output);
                sums.ttft_ns += u128::from(s.first_token - s.arrival);
                sums.e2e_ns += u128::from(end - s.arrival);
                sums.end_ns = end;
            }
        }
        if any_done {
            running.retain(|s| s.generated < s.output);
        }
        clock = end;
    }
    sums
}
