//! Unit tests of the scheduling rules, each on a tiny hand-checked case.

use super::*;
use crate::engine::kv_budget::KvBudget;
use crate::engine::sglang::SglangOptions;
use std::collections::VecDeque;

/// Records every event as a short string, in order.
#[derive(Default)]
struct Log(Vec<String>);

impl Observer for Log {
    fn scheduled(&mut self, id: RequestId, _at: SimTime, tokens: u32, computed: u32) {
        self.0.push(format!("sched {id} {tokens}@{computed}"));
    }
    fn preempted(&mut self, id: RequestId, _at: SimTime) {
        self.0.push(format!("preempt {id}"));
    }
    fn token(&mut self, id: RequestId, _at: SimTime, index: u32) {
        self.0.push(format!("token {id}#{index}"));
    }
    fn finished(&mut self, id: RequestId, _at: SimTime) {
        self.0.push(format!("finish {id}"));
    }
    fn rejected(&mut self, id: RequestId, _at: SimTime, reason: RejectReason) {
        self.0.push(format!("reject {id} {}", reason.as_str()));
    }
    fn aborted(&mut self, id: RequestId, _at: SimTime) {
        self.0.push(format!("abort {id}"));
    }
    fn lora_loaded(&mut self, adapter: u32, _at: SimTime) {
        self.0.push(format!("load lora {adapter}"));
    }
}

impl Log {
    fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.0)
    }
}

struct Limits {
    num_blocks: u32,
    block_size: u32,
    watermark_blocks: u32,
    budget: u32,
    max_seqs: u32,
    context: u32,
}

fn engine(l: Limits) -> Engine {
    Engine::new(EngineConfig {
        capacity: KvBudget {
            num_blocks: l.num_blocks,
            block_size: l.block_size,
            kv_tokens: u64::from(l.num_blocks) * u64::from(l.block_size),
            watermark_blocks: l.watermark_blocks,
            weight_bytes: 13.48e9,
            usable_bytes: 0.0,
            block_bytes: 0,
            overridden: true,
            window_blocks: 0,
        },
        max_batch_tokens: l.budget,
        max_num_sequences: l.max_seqs,
        context_length: l.context,
        cost: cost::tests::base_cost(),
        prefix_caching: false,
        policy: Policy::Vllm,
        speculative: None,
        scheduling_policy: Default::default(),
        offload: None,
        lora: None,
        sglang: Default::default(),
        trtllm: Default::default(),
    })
}

/// [`engine`] under TensorRT-LLM's scheduler ([`Policy::Trtllm`]).
fn trtllm(l: Limits) -> Engine {
    let mut e = engine(l);
    e.cfg.policy = Policy::Trtllm;
    e
}

fn limits() -> Limits {
    Limits { num_blocks: 100, block_size: 4, watermark_blocks: 0, budget: 64, max_seqs: 8, context: 1000 }
}

fn req(id: u64, at_ns: u64, prompt: u32, output: u32) -> Request {
    Request::new(id, SimTime::from_nanos(at_ns), prompt, output)
}

#[test]
fn an_engine_holds_its_capacity_s_blocks_with_or_without_prefix_caching() {
    // A fleet weighs its pools by `capacity.num_blocks` without building
    // an engine (`cluster::scaled`): both KV managers must hold exactly it.
    for prefix_caching in [false, true] {
        let mut cfg = engine(limits()).cfg.clone();
        cfg.prefix_caching = prefix_caching;
        cfg.capacity.num_blocks = 37;
        let e = Engine::new(cfg);
        assert_eq!((e.kv_blocks_total(), e.kv_blocks_used()), (37, 0), "prefix caching {prefix_caching}");
    }
}

#[test]
fn a_lone_request_prefills_in_one_step_then_decodes_one_token_a_step() {
    let mut e = engine(limits());
    let mut log = Log::default();
    e.submit(req(0, 0, 10, 3), &mut log).unwrap();
    let s1 = e.step(&mut log).unwrap();
    assert_eq!((s1.tokens, s1.batch_size, s1.prefill_tokens), (10, 1, 10));
    assert_eq!(s1.kv_blocks_used, 3, "admission takes ceil(10/4) blocks at once");
    let s2 = e.step(&mut log).unwrap();
    assert_eq!((s2.tokens, s2.sum_ctx, s2.prefill_tokens), (1, 11, 0));
    assert_eq!(s2.start, s1.end, "steps are back to back");
    e.step(&mut log).unwrap();
    assert!(e.step(&mut log).is_none());
    assert_eq!(
        log.take(),
        ["sched 0 10@0", "token 0#1", "sched 0 1@10", "token 0#2", "sched 0 1@11", "token 0#3", "finish 0"]
    );
    assert_eq!(e.kv_blocks_used(), 0);
}

#[test]
fn a_lone_decode_step_takes_the_weights_time() {
    let mut e = engine(limits());
    e.submit(req(0, 0, 16, 2), &mut ()).unwrap();
    e.step(&mut ()).unwrap();
    let decode = e.step(&mut ()).unwrap();
    // (13.48e9 + 17 * 524288) / 3e12 s
    let expect = ((13.48e9 + 17.0 * 524_288.0) / 3e12 * 1e9_f64).round() as u64;
    assert_eq!(decode.duration_nanos(), expect);
    assert!((decode.duration_nanos() as f64 / 1e6 - 4.49).abs() < 0.01);
}

#[test]
fn a_long_prompt_is_chunked_by_the_token_budget() {
    let mut e = engine(Limits { budget: 8, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 20, 1), &mut log).unwrap();
    while e.step(&mut log).is_some() {}
    assert_eq!(log.take(), ["sched 0 8@0", "sched 0 8@8", "sched 0 4@16", "token 0#1", "finish 0"]);
}

#[test]
fn running_requests_go_first_and_admission_fills_the_rest_of_the_budget() {
    let mut e = engine(Limits { budget: 12, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 4, 5), &mut log).unwrap();
    e.step(&mut log).unwrap();
    e.submit(req(1, 1, 20, 5), &mut log).unwrap();
    log.take();
    let s = e.step(&mut log).unwrap();
    assert_eq!(log.take(), ["sched 0 1@4", "sched 1 11@0", "token 0#2"]);
    assert_eq!((s.batch_size, s.tokens), (2, 12));
}

#[test]
fn arrivals_after_the_step_start_wait_for_the_next_step() {
    let mut e = engine(limits());
    let mut log = Log::default();
    e.submit(req(0, 0, 4, 2), &mut log).unwrap();
    let first = e.step(&mut log).unwrap();
    // arrives during the first step: joins at its end
    e.submit(req(1, first.end.as_nanos() - 1, 4, 1), &mut log).unwrap();
    let second = e.step(&mut log).unwrap();
    assert_eq!(second.start, first.end);
    assert_eq!(second.batch_size, 2);
}

#[test]
fn an_idle_engine_jumps_to_the_next_arrival() {
    let mut e = engine(limits());
    e.submit(req(0, 5_000_000_000, 4, 1), &mut ()).unwrap();
    assert_eq!(e.next_step_at(), Some(SimTime::from_nanos(5_000_000_000)));
    let s = e.step(&mut ()).unwrap();
    assert_eq!(s.start.as_nanos(), 5_000_000_000);
}

#[test]
fn a_request_longer_than_the_context_is_rejected_on_arrival() {
    let mut e = engine(Limits { context: 100, ..limits() });
    let mut log = Log::default();
    assert_eq!(e.submit(req(0, 0, 90, 11), &mut log), Err(RejectReason::ContextLength));
    assert!(e.submit(req(1, 0, 90, 10), &mut log).is_ok());
    assert_eq!(log.take(), ["reject 0 rejected_context_length"]);
}

#[test]
fn a_prompt_that_could_never_fit_is_rejected_at_the_head_of_the_queue() {
    // 10 blocks of 4 tokens, watermark 2: at most 8 blocks = 32 tokens admitted.
    let mut e = engine(Limits { num_blocks: 10, watermark_blocks: 2, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 33, 1), &mut log).unwrap();
    e.submit(req(1, 0, 32, 1), &mut log).unwrap();
    e.step(&mut log).unwrap();
    assert_eq!(log.take(), ["reject 0 rejected_kv_capacity", "sched 1 32@0", "token 1#1", "finish 1"]);
}

#[test]
fn admission_keeps_the_watermark_free_and_blocks_the_head_of_the_line() {
    // 10 blocks, watermark 2. Request 0 takes 5 blocks; request 1 needs 4
    // (5 + 4 > 10 - 2): it waits, and request 2 (1 block) may not skip it.
    let mut e = engine(Limits { num_blocks: 10, watermark_blocks: 2, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 20, 3), &mut log).unwrap();
    e.submit(req(1, 0, 16, 1), &mut log).unwrap();
    e.submit(req(2, 0, 4, 1), &mut log).unwrap();
    let s = e.step(&mut log).unwrap();
    assert_eq!((s.batch_size, s.kv_blocks_used, s.waiting), (1, 5, 2));
}

#[test]
fn max_num_sequences_caps_the_running_set() {
    let mut e = engine(Limits { max_seqs: 2, ..limits() });
    for id in 0..4 {
        e.submit(req(id, 0, 4, 3), &mut ()).unwrap();
    }
    let s = e.step(&mut ()).unwrap();
    assert_eq!((s.batch_size, s.running, s.waiting), (2, 2, 2));
}

#[test]
fn growth_that_does_not_fit_preempts_the_newest_and_blocks_admission() {
    // 4 blocks of 4 tokens, no watermark. Two requests of 8 prompt tokens
    // fill all 4 blocks after prefill; the first decode needs a fifth block.
    let mut e = engine(Limits { num_blocks: 4, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 8, 4), &mut log).unwrap();
    e.submit(req(1, 0, 8, 4), &mut log).unwrap();
    e.step(&mut log).unwrap();
    log.take();
    e.submit(req(2, 1, 1, 1), &mut log).unwrap();
    let s = e.step(&mut log).unwrap();
    assert_eq!(s.preempted, 1);
    assert_eq!(s.batch_size, 1, "no admission in a step that preempted");
    assert_eq!(log.take(), ["preempt 1", "sched 0 1@8", "token 0#2"]);
    // next step: request 1 is back at the front of waiting, ahead of 2
    let s = e.step(&mut log).unwrap();
    assert_eq!(s.preempted, 0);
    let events = log.take();
    assert_eq!(events[..2], ["sched 0 1@9", "token 0#3"]);
    assert_eq!(e.num_waiting(), 2, "request 1 needs 9 tokens = 3 blocks; only 1 free");
}

#[test]
fn a_preempted_request_recomputes_its_prompt_and_generated_tokens() {
    let mut e = engine(Limits { num_blocks: 4, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 8, 3), &mut log).unwrap();
    e.submit(req(1, 0, 8, 3), &mut log).unwrap();
    while e.step(&mut log).is_some() {}
    let events = log.take();
    assert!(events.contains(&"preempt 1".to_string()));
    // after 0 finishes, 1 recomputes 8 prompt + 1 generated token, then samples #2
    let i = events.iter().position(|e| e == "finish 0").unwrap();
    assert_eq!(events[i + 1], "sched 1 9@0");
    assert_eq!(events[i + 2], "token 1#2");
    assert_eq!(events.last().unwrap(), "finish 1");
}

#[test]
fn a_request_that_preempts_itself_stops_the_running_pass() {
    // One request alone outgrows the whole cache: it preempts itself, then is
    // rejected at the head of the queue because it can never fit again.
    let mut e = engine(Limits { num_blocks: 2, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 8, 5), &mut log).unwrap();
    while e.next_step_at().is_some() {
        e.step(&mut log);
    }
    assert_eq!(log.take(), ["sched 0 8@0", "token 0#1", "preempt 0", "reject 0 rejected_kv_capacity"]);
    assert_eq!(e.kv_blocks_used(), 0);
    assert!(e.is_idle());
}

#[test]
fn abort_frees_blocks_wherever_the_request_is() {
    let mut e = engine(Limits { max_seqs: 1, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 8, 10), &mut log).unwrap();
    e.submit(req(1, 0, 8, 10), &mut log).unwrap();
    e.submit(req(2, 10_000_000_000, 8, 10), &mut log).unwrap();
    e.step(&mut log).unwrap();
    assert_eq!((e.num_running(), e.num_waiting(), e.num_pending()), (1, 1, 1));
    let now = e.clock();
    assert!(e.abort(0, now, &mut log));
    assert!(e.abort(1, now, &mut log));
    assert!(e.abort(2, now, &mut log));
    assert!(!e.abort(2, now, &mut log), "twice is a no-op");
    assert_eq!(e.kv_blocks_used(), 0);
    assert!(e.is_idle());
}

/// The base model of docs/engine.md: 7,609 blocks of 16 tokens, watermark 76.
fn base_engine(budget: u32, max_seqs: u32) -> Engine {
    let cap = KvBudget::compute(&kv_budget::tests::base_input()).unwrap();
    Engine::new(EngineConfig {
        capacity: cap,
        max_batch_tokens: budget,
        max_num_sequences: max_seqs,
        context_length: 32_768,
        cost: cost::tests::base_cost(),
        prefix_caching: false,
        policy: Policy::Vllm,
        speculative: None,
        scheduling_policy: Default::default(),
        offload: None,
        lora: None,
        sglang: Default::default(),
        trtllm: Default::default(),
    })
}

fn ms(step: &StepRecord) -> f64 {
    step.duration_nanos() as f64 / 1e6
}

#[test]
fn the_engine_prefills_8192_tokens_in_112_ms_and_2048_in_28_ms() {
    for (budget, want) in [(8192, 111.65), (2048, 27.91)] {
        let mut e = base_engine(budget, 64);
        e.submit(req(0, 0, 20_000, 1), &mut ()).unwrap();
        let first = e.step(&mut ()).unwrap();
        assert_eq!(first.tokens, budget);
        assert!((ms(&first) - want).abs() < 0.01, "budget {budget}: {} ms", ms(&first));
    }
}

#[test]
fn the_engine_decodes_29_requests_at_4k_context_in_about_25_ms() {
    // A budget large enough to prefill all 29 in one step, so the decode
    // step that follows has the whole batch at 4,096 tokens of context.
    let mut e = base_engine(131_072, 64);
    for id in 0..29 {
        e.submit(req(id, 0, 4095, 2), &mut ()).unwrap();
    }
    let mut last = None;
    while let Some(s) = e.step(&mut ()) {
        last = Some(s);
    }
    let decode = last.unwrap();
    assert_eq!((decode.batch_size, decode.tokens, decode.sum_ctx), (29, 29, 29 * 4096));
    assert!((ms(&decode) - 25.25).abs() < 0.01, "{}", ms(&decode));
}

#[test]
fn a_512_token_prompt_among_64_decodes_hides_under_memory_but_three_do_not() {
    for (prompts, compute_bound, want) in [(1u64, false, 10.6), (3, true, 21.8)] {
        let mut e = base_engine(8192, 67);
        for id in 0..64 {
            e.submit(req(id, 0, 512, 100), &mut ()).unwrap();
        }
        // Prefill (4 steps of 8192 tokens), then decode until every stream
        // holds 537 tokens of KV.
        for _ in 0..4 + 25 {
            e.step(&mut ()).unwrap();
        }
        let now = e.clock();
        for id in 0..prompts {
            e.submit(Request::new(64 + id, now, 512, 1), &mut ()).unwrap();
        }
        let s = e.step(&mut ()).unwrap();
        assert_eq!((s.batch_size as u64, s.tokens as u64), (64 + prompts, 64 + 512 * prompts));
        assert!((s.compute_s * 1e3 - 7.85 * (64.0 + 512.0 * prompts as f64) / 576.0).abs() < 0.01);
        assert_eq!(s.compute_s > s.memory_s, compute_bound);
        assert!((ms(&s) - want).abs() < 0.06, "{prompts} prompts: {} ms", ms(&s));
    }
}

/// The driver side of a stretch that admits: requests in arrival order.
#[derive(Default)]
struct Queue {
    reqs: VecDeque<Request>,
    finished: Vec<(RequestId, SimTime)>,
}

impl stretch::Arrivals for Queue {
    fn next_at(&mut self) -> Option<SimTime> {
        self.reqs.front().map(|r| r.arrival)
    }
    fn due(&mut self, at: SimTime, k: usize) -> stretch::Due {
        match self.reqs.get(k) {
            Some(r) if r.arrival <= at => stretch::Due::Request(*r),
            _ => stretch::Due::None,
        }
    }
    fn take(&mut self, k: usize) {
        self.reqs.drain(..k);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.finished.push((id, at));
    }
}

#[test]
fn a_request_arriving_mid_stretch_joins_it_with_its_whole_prompt() {
    // Base model (13.48 GB of weights, 3000 GB/s, 512 KiB of KV a token):
    // every step below is memory bound, (13.48e9 + sum_ctx * 524,288) /
    // 3e12 s, rounded to the nanosecond.
    let mut e = engine(limits());
    let mut log = Log::default();
    e.submit(req(0, 0, 6, 5), &mut log).unwrap();
    // Prefill: sum_ctx 6, 13,483,145,728 / 3e12 s = 4,494,381.9 ns.
    let prefill = e.step(&mut log).unwrap();
    assert_eq!(prefill.end, SimTime::from_nanos(4_494_382));
    log.take();
    // Request 1 (10 + 3 tokens) arrives as the stretch's first step ends:
    // that step is request 0 decoding on 6 tokens, sum_ctx 7,
    // 13,483,670,016 / 3e12 s = 4,494,556.7 ns.
    let first_end = 4_494_382 + 4_494_557;
    let mut queue = Queue::default();
    queue.reqs.push_back(req(1, first_end, 10, 3));
    let never = SimTime::from_nanos(u64::MAX);
    let mut steps = Vec::new();
    let ran = e.decode_stretch_admitting(never, 100, &mut queue, &mut (&mut log, StepLog(&mut steps)));
    assert_eq!(ran, 4, "two decode steps of request 0, then both finish in the fourth");
    // Joining step: 1 decode (c 7 -> 8) + a 10-token prompt: 11 tokens,
    // sum_ctx 8 + 10 = 18, 13,489,437,184 / 3e12 s = 4,496,479.1 ns;
    // blocks 2 (request 0, 8 tokens in blocks of 4) + ceil(10 / 4) = 5.
    let join = &steps[1];
    assert_eq!(join.start, SimTime::from_nanos(first_end));
    assert_eq!(join.end, SimTime::from_nanos(first_end + 4_496_479));
    assert_eq!((join.batch_size, join.tokens, join.prefill_tokens, join.sum_ctx), (2, 11, 10, 18));
    assert_eq!((join.kv_blocks_used, join.running, join.waiting), (5, 2, 0));
    // Then both decode: sum_ctx 9 + 11 = 20 (request 0 crosses into a
    // third block: 6 used), then 10 + 12 = 22, each finishing there.
    assert_eq!(steps[2].duration_nanos(), 4_496_829);
    assert_eq!((steps[2].tokens, steps[2].sum_ctx, steps[2].kv_blocks_used), (2, 20, 6));
    assert_eq!(steps[3].duration_nanos(), 4_497_178);
    assert_eq!((steps[3].sum_ctx, steps[3].kv_blocks_used, steps[3].index), (22, 6, 4));
    let end = SimTime::from_nanos(first_end + 4_496_479 + 4_496_829 + 4_497_178);
    assert_eq!(queue.finished, vec![(0, end), (1, end)]);
    assert!(e.is_idle() && e.kv_blocks_used() == 0);
    #[rustfmt::skip]
    assert_eq!(log.take(), [
        "sched 0 1@6", "token 0#2",
        "sched 0 1@7", "sched 1 10@0", "token 0#3", "token 1#1",
        "sched 0 1@8", "sched 1 1@10", "token 0#4", "token 1#2",
        "sched 0 1@9", "sched 1 1@11", "token 0#5", "finish 0", "token 1#3", "finish 1",
    ]);
}

/// Keeps the step records a stretch replays.
struct StepLog<'a>(&'a mut Vec<StepRecord>);

impl Observer for StepLog<'_> {
    fn step(&mut self, step: &StepRecord) {
        self.0.push(step.clone());
    }
}

/// TensorRT-LLM's `GUARANTEED_NO_EVICT`: the two requests of the vLLM
/// preemption case above (4 blocks of 4 tokens, prompts of 8, 4 output
/// tokens: 11 tokens of KV at completion, 3 blocks each). The first
/// reserves 3 of the 4 blocks, so the second waits, unpreempted, until the
/// first has finished: 1 prefill + 3 decodes, then its own.
#[test]
fn trtllm_admits_only_what_completes_and_never_preempts() {
    let mut e = trtllm(Limits { num_blocks: 4, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 8, 4), &mut log).unwrap();
    e.submit(req(1, 0, 8, 4), &mut log).unwrap();
    let mut steps = Vec::new();
    while let Some(s) = e.step(&mut log) {
        steps.push(s);
    }
    assert!(steps.iter().all(|s| s.preempted == 0 && s.batch_size == 1), "one at a time, nothing preempted");
    let events = log.take();
    let finish0 = events.iter().position(|e| e == "finish 0").unwrap();
    assert_eq!(
        events[..finish0 + 2],
        [
            "sched 0 8@0",
            "token 0#1",
            "sched 0 1@8",
            "token 0#2",
            "sched 0 1@9",
            "token 0#3",
            "sched 0 1@10",
            "token 0#4",
            "finish 0",
            "sched 1 8@0"
        ]
    );
    assert_eq!(steps.len(), 8);
    assert_eq!(e.kv_blocks_used(), 0);
    // The same two under vLLM's rules preempt (the test above).
    let mut v = engine(Limits { num_blocks: 4, ..limits() });
    v.submit(req(0, 0, 8, 4), &mut ()).unwrap();
    v.submit(req(1, 0, 8, 4), &mut ()).unwrap();
    let mut preempted = 0;
    while let Some(s) = v.step(&mut ()) {
        preempted += s.preempted;
    }
    assert!(preempted > 0);
}

/// Chunked prefill is off: a prompt runs whole or waits, and nothing
/// behind it skips ahead. A budget of 12 with one decode running leaves
/// 11 tokens, where vLLM would chunk a 20-token prompt to 11 (the test
/// above). A prompt longer than the whole budget (which TensorRT-LLM
/// refuses) runs in chunks of the whole budget once the engine is idle.
#[test]
fn trtllm_runs_a_prompt_whole_or_not_at_all() {
    let mut e = trtllm(Limits { budget: 12, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 4, 5), &mut log).unwrap();
    e.step(&mut log).unwrap();
    e.submit(req(1, 1, 10, 5), &mut log).unwrap();
    e.submit(req(2, 1, 3, 5), &mut log).unwrap();
    log.take();
    // 1 decode + the 10-token prompt = 11; the 3-token one does not fit
    // the 1 left, and nothing skips ahead of it.
    let s = e.step(&mut log).unwrap();
    assert_eq!(log.take(), ["sched 0 1@4", "sched 1 10@0", "token 0#2", "token 1#1"]);
    assert_eq!((s.batch_size, s.tokens), (2, 11));
    let s = e.step(&mut log).unwrap();
    assert_eq!(log.take(), ["sched 0 1@5", "sched 1 1@10", "sched 2 3@0", "token 0#3", "token 1#2", "token 2#1"]);
    assert_eq!(s.tokens, 5);
    // A 20-token prompt behind a decode waits until the engine is idle,
    // then takes the whole budget a step: 12, then 8.
    let mut e = trtllm(Limits { budget: 12, ..limits() });
    e.submit(req(0, 0, 4, 3), &mut log).unwrap();
    e.step(&mut log).unwrap();
    e.submit(req(1, 1, 20, 1), &mut log).unwrap();
    log.take();
    while e.step(&mut log).is_some() {}
    assert_eq!(
        log.take(),
        [
            "sched 0 1@4",
            "token 0#2",
            "sched 0 1@5",
            "token 0#3",
            "finish 0",
            "sched 1 12@0",
            "sched 1 8@12",
            "token 1#1",
            "finish 1"
        ]
    );
}

/// A request whose completion needs more blocks than the cache has is
/// rejected, not left to wait forever (12 + 9 - 1 = 20 tokens: 5 blocks of
/// 4, against 4), even when its prompt alone would fit.
#[test]
fn trtllm_rejects_a_request_that_could_never_complete() {
    let mut e = trtllm(Limits { num_blocks: 4, ..limits() });
    let mut log = Log::default();
    e.submit(req(0, 0, 12, 9), &mut log).unwrap();
    e.submit(req(1, 0, 4, 2), &mut log).unwrap();
    while e.step(&mut log).is_some() {}
    let events = log.take();
    assert_eq!(events[0], "reject 0 rejected_kv_capacity");
    assert_eq!(events.last().unwrap(), "finish 1");
}

/// [`trtllm`] with a capacity policy and chunked prefill.
fn trtllm_with(l: Limits, capacity: trtllm::CapacityPolicy, chunking: Option<trtllm::ChunkingPolicy>) -> Engine {
    let mut e = trtllm(l);
    e.cfg.trtllm = trtllm::Trtllm { capacity, chunking };
    e
}

/// `MAX_UTILIZATION` on the two requests of the no-evict test above (4
/// blocks of 4; prompts of 8, 4 tokens out): both fit their prompts (2 +
/// 2 blocks) and start together; at the second step the first one's 9th
/// token needs a third block, none is free, and the newest started one
/// is paused (its 2 blocks freed). It resumes once the first has
/// finished (its 3 blocks free), recomputing its 8 + 1 tokens: 7 steps,
/// against the no-evict policy's 8.
#[test]
fn trtllm_max_utilization_admits_for_the_next_step_and_pauses_the_newest() {
    let mut e = trtllm_with(Limits { num_blocks: 4, ..limits() }, trtllm::CapacityPolicy::MaxUtilization, None);
    let mut log = Log::default();
    e.submit(req(0, 0, 8, 4), &mut log).unwrap();
    e.submit(req(1, 0, 8, 4), &mut log).unwrap();
    let mut steps = Vec::new();
    while let Some(s) = e.step(&mut log) {
        steps.push((s.batch_size, s.tokens, s.preempted));
    }
    assert_eq!(steps, [(2, 16, 0), (1, 1, 1), (1, 1, 0), (1, 1, 0), (1, 9, 0), (1, 1, 0), (1, 1, 0)]);
    let events = log.take();
    assert_eq!(events[..5], ["sched 0 8@0", "sched 1 8@0", "token 0#1", "token 1#1", "preempt 1"]);
    let finish0 = events.iter().position(|e| e == "finish 0").unwrap();
    assert_eq!(events[finish0 + 1], "sched 1 9@0");
    assert_eq!(events.last().unwrap(), "finish 1");
}

/// `STATIC_BATCH`: a request arriving while a batch generates waits for
/// the whole batch to end (3 tokens out: steps 1 to 3), and starts at
/// step 4; under `GUARANTEED_NO_EVICT` it joins at step 2.
#[test]
fn trtllm_static_batch_waits_for_the_batch_to_end() {
    let first_step_of_2 = |capacity| {
        let mut e = trtllm_with(limits(), capacity, None);
        let mut log = Log::default();
        e.submit(req(0, 0, 8, 3), &mut log).unwrap();
        e.submit(req(1, 0, 8, 3), &mut log).unwrap();
        e.submit(req(2, 1, 8, 3), &mut log).unwrap();
        let mut n = 0;
        loop {
            n += 1;
            e.step(&mut log).unwrap();
            if log.take().iter().any(|e| e == "sched 2 8@0") {
                return n;
            }
        }
    };
    assert_eq!(first_step_of_2(trtllm::CapacityPolicy::StaticBatch), 4);
    assert_eq!(first_step_of_2(trtllm::CapacityPolicy::GuaranteedNoEvict), 2);
}

/// Chunked prefill, first come first served: behind one decode a budget
/// of 12 leaves 11 tokens; a 20-token prompt gets them cut down to whole
/// blocks of 4 (8), then 8 again, then its last 4 (vLLM's rules give it
/// 11, then 9; without chunking it waits for an idle step).
#[test]
fn trtllm_chunked_prefill_first_come_cuts_to_whole_blocks() {
    let fcfs = Some(trtllm::ChunkingPolicy::FirstComeFirstServed);
    let mut e = trtllm_with(Limits { budget: 12, ..limits() }, trtllm::CapacityPolicy::GuaranteedNoEvict, fcfs);
    let mut log = Log::default();
    e.submit(req(0, 0, 4, 5), &mut log).unwrap();
    e.step(&mut log).unwrap();
    e.submit(req(1, 1, 20, 2), &mut log).unwrap();
    log.take();
    for _ in 0..3 {
        e.step(&mut log).unwrap();
    }
    assert_eq!(
        log.take(),
        [
            "sched 0 1@4",
            "sched 1 8@0",
            "token 0#2",
            "sched 0 1@5",
            "sched 1 8@8",
            "token 0#3",
            "sched 0 1@6",
            "sched 1 4@16",
            "token 0#4",
            "token 1#1"
        ]
    );
}

/// Chunked prefill: three 20-token prompts at once, budget 12, blocks of
/// 4. Equal progress starts all three with a block's worth each (three
/// times 4); first come first served gives the first all 12 and the
/// others wait.
#[test]
fn trtllm_chunked_prefill_equal_progress_starts_every_prompt() {
    let first_step = |chunking| {
        let mut e = trtllm_with(Limits { budget: 12, ..limits() }, trtllm::CapacityPolicy::GuaranteedNoEvict, chunking);
        let mut log = Log::default();
        for id in 0..3 {
            e.submit(req(id, 0, 20, 2), &mut log).unwrap();
        }
        e.step(&mut log).unwrap();
        log.take()
    };
    let equal = first_step(Some(trtllm::ChunkingPolicy::EqualProgress));
    assert_eq!(equal, ["sched 0 4@0", "sched 1 4@0", "sched 2 4@0"]);
    let fcfs = first_step(Some(trtllm::ChunkingPolicy::FirstComeFirstServed));
    assert_eq!(fcfs, ["sched 0 12@0"]);
}

/// Speculative decoding (docs/speculative.md) on the base model, blocks of
/// 16 tokens: `k` drafts a step, each kept with probability `q` given the
/// earlier ones were, drafted for free (n-gram).
fn speculative_engine(accept: Vec<f64>, budget: u32, lookahead: u32) -> Engine {
    let mut e = base_engine(budget, 64);
    let spec = Speculative { tokens: accept.len() as u32, accept, seed: 1, lookahead, draft: None };
    e.cfg.speculative = Some(spec.clone());
    e.spec_rng = Some(spec.rng());
    e
}

/// Records drafts beside the other events.
#[derive(Default)]
struct SpecLog(Log, Vec<(RequestId, u32, u32)>);

impl Observer for SpecLog {
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.0.scheduled(id, at, tokens, computed);
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.0.token(id, at, index);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.0.finished(id, at);
    }
    fn speculated(&mut self, id: RequestId, _at: SimTime, drafted: u32, accepted: u32) {
        self.1.push((id, drafted, accepted));
        self.0.0.push(format!("verify {id} {accepted}/{drafted}"));
    }
}

#[test]
fn verified_drafts_release_several_tokens_a_step_and_the_last_step_stops_at_n() {
    // Every draft accepted, k = 3, a 16-token prompt and 6 output tokens:
    // step 0 prefills and samples token 1, step 1 verifies 3 drafts and
    // releases tokens 2-5, step 2 needs only token 6.
    let mut e = speculative_engine(vec![1.0; 3], 8192, 0);
    let mut log = SpecLog::default();
    e.submit(req(0, 0, 16, 6), &mut log).unwrap();
    let steps: Vec<StepRecord> = std::iter::from_fn(|| e.step(&mut log)).collect();
    assert_eq!(
        log.0.take(),
        [
            "sched 0 16@0",
            "token 0#1",
            "sched 0 4@16",
            "verify 0 3/3",
            "token 0#2",
            "token 0#3",
            "token 0#4",
            "token 0#5",
            "sched 0 4@20",
            "verify 0 3/3",
            "token 0#6",
            "finish 0",
        ]
    );
    // Each step priced as the target computing all its tokens: 4 tokens
    // on 20 and then 24 tokens of KV (docs/engine.md's formula by hand).
    let want = |t: f64, ctx: f64| {
        let compute = 2.0 * 6.74e9 * t / 989e12;
        let memory = (13.48e9 + ctx * 524_288.0) / 3e12;
        compute.max(memory) * 1e3
    };
    assert_eq!((steps[1].tokens, steps[1].sum_ctx), (4, 20));
    assert_eq!((steps[2].tokens, steps[2].sum_ctx), (4, 24));
    for (s, ctx) in steps[1..].iter().zip([20.0, 24.0]) {
        assert!((ms(s) - want(4.0, ctx)).abs() < 1e-5, "{} against {}", ms(s), want(4.0, ctx));
    }
    assert_eq!(e.kv_blocks_used(), 0);
}

#[test]
fn rejected_drafts_lose_their_kv_and_the_step_still_releases_one_token() {
    let mut e = speculative_engine(vec![0.0; 3], 8192, 0);
    let mut log = SpecLog::default();
    e.submit(req(0, 0, 16, 3), &mut log).unwrap();
    while e.step(&mut log).is_some() {
        e.check_invariants().unwrap();
    }
    // c goes 16 -> 16 + 4 - 3 = 17 -> 18: the rejected drafts' KV is gone.
    assert_eq!(
        log.0.take(),
        [
            "sched 0 16@0",
            "token 0#1",
            "sched 0 4@16",
            "verify 0 0/3",
            "token 0#2",
            "sched 0 4@17",
            "verify 0 0/3",
            "token 0#3",
            "finish 0"
        ]
    );
}

#[test]
fn drafts_count_in_the_token_budget_and_are_cut_to_it() {
    // Budget 6: two decoding requests with 3 drafts each want 8 tokens;
    // the first takes 4, the second the 2 left (its last sampled token and
    // one draft), and only the one draft is verified.
    let mut e = speculative_engine(vec![1.0; 3], 6, 0);
    let mut log = SpecLog::default();
    e.submit(req(0, 0, 3, 10), &mut log).unwrap();
    e.submit(req(1, 0, 3, 10), &mut log).unwrap();
    e.step(&mut log).unwrap(); // both prompts: 6 tokens
    log.0.take();
    let s = e.step(&mut log).unwrap();
    assert_eq!(s.tokens, 6);
    assert_eq!(
        log.0.take(),
        [
            "sched 0 4@3",
            "sched 1 2@3",
            "verify 0 3/3",
            "token 0#2",
            "token 0#3",
            "token 0#4",
            "token 0#5",
            "verify 1 1/1",
            "token 1#2",
            "token 1#3"
        ]
    );
}

#[test]
fn a_gpu_drafter_reserves_lookahead_slots_and_a_preempted_request_drops_its_drafts() {
    // 16-token blocks, k = 3 with lookahead 3: after its prompt of 16
    // (one block), the verify step computes tokens 17-20 and reserves 3
    // more slots: ceil(23 / 16) = 2 blocks.
    let mut e = speculative_engine(vec![0.5; 3], 8192, 3);
    e.submit(req(0, 0, 16, 50), &mut ()).unwrap();
    e.step(&mut ()).unwrap();
    assert_eq!(e.kv_blocks_used(), 1);
    e.step(&mut ()).unwrap();
    assert_eq!(e.kv_blocks_used(), 2);
    e.check_invariants().unwrap();
    let slot = e.running[0];
    assert_eq!(e.slots[slot as usize].drafts, 3);
    e.running.pop();
    e.preempt(slot, e.clock(), &mut ());
    assert_eq!(e.slots[slot as usize].drafts, 0);
    e.check_invariants().unwrap();
}

#[test]
fn the_same_requests_accept_the_same_drafts_alone_or_together() {
    // A request's draws hang on its id and position only: run alone or
    // beside 7 others, request 0 sees the same verify outcomes.
    let outcomes = |others: u64| {
        let mut e = speculative_engine(vec![0.8, 0.6, 0.4], 8192, 3);
        let mut log = SpecLog::default();
        for id in 0..=others {
            e.submit(req(id, 0, 40 + id as u32, 60), &mut log).unwrap();
        }
        while e.step(&mut log).is_some() {
            e.check_invariants().unwrap();
        }
        log.1.into_iter().filter(|r| r.0 == 0).collect::<Vec<_>>()
    };
    let alone = outcomes(0);
    assert!(alone.iter().any(|r| r.2 == 0) && alone.iter().any(|r| r.2 == 3), "{alone:?}");
    assert_eq!(alone, outcomes(7));
}

/// [`engine`] under vLLM's priority policy ([`SchedulingPolicy::Priority`]).
fn by_priority(l: Limits) -> Engine {
    let mut e = engine(l);
    e.cfg.scheduling_policy = SchedulingPolicy::Priority;
    e
}

fn prio(id: u64, at_ns: u64, prompt: u32, output: u32, priority: i32) -> Request {
    Request { priority, ..req(id, at_ns, prompt, output) }
}

#[test]
fn priority_orders_the_waiting_queue_by_priority_then_arrival_then_id() {
    // One request at a time (max_seqs 1), each done in one step: the
    // order they run in is the queue's.
    let order = |mut e: Engine| {
        let mut log = Log::default();
        for (id, p) in [(0, 5), (1, 0), (2, -1), (3, 0)] {
            e.submit(prio(id, 0, 4, 1, p), &mut log).unwrap();
        }
        while e.step(&mut log).is_some() {}
        let events = log.take();
        events.iter().filter(|e| e.starts_with("sched")).map(|e| e[6..7].to_string()).collect::<Vec<_>>().join("")
    };
    assert_eq!(order(by_priority(Limits { max_seqs: 1, ..limits() })), "2130");
    assert_eq!(order(engine(Limits { max_seqs: 1, ..limits() })), "0123", "FCFS ignores priorities");
}

#[test]
fn priority_preempts_the_lowest_class_and_unschedules_it_if_already_in_the_step() {
    // 4 blocks of 4 tokens, no watermark. Request 0 (priority 1) runs
    // first; request 1 (priority 0) joins in step 2. In step 3 request 0
    // takes a third block for its 9th token, then request 1 needs a
    // block for its 5th: the victim is request 0 (the larger priority),
    // already in the step, so it leaves the batch, its three blocks free.
    let run = |mut e: Engine| {
        let mut log = Log::default();
        e.submit(prio(0, 0, 7, 5, 1), &mut log).unwrap();
        e.step(&mut log).unwrap();
        let at = e.clock().as_nanos();
        e.submit(prio(1, at, 4, 5, 0), &mut log).unwrap();
        e.step(&mut log).unwrap();
        let early = log.take();
        let s3 = e.step(&mut log).unwrap();
        let third = log.take();
        // Request 2 (priority 0) arrives after the preemption.
        let at = e.clock().as_nanos();
        e.submit(prio(2, at, 4, 1, 0), &mut log).unwrap();
        e.step(&mut log).unwrap();
        (early, s3, third, log.take(), e)
    };
    let (early, s3, third, fourth, e) = run(by_priority(Limits { num_blocks: 4, ..limits() }));
    assert_eq!(early, ["sched 0 7@0", "token 0#1", "sched 0 1@7", "sched 1 4@0", "token 0#2", "token 1#1"]);
    assert_eq!(third, ["preempt 0", "sched 1 1@4", "token 1#2"]);
    assert_eq!((s3.preempted, s3.batch_size, s3.tokens, s3.sum_ctx), (1, 1, 1, 5), "request 0's token left the step");
    assert_eq!(s3.kv_blocks_used, 2, "request 1's two blocks; request 0's three are free");
    // Request 0 went back to its place by priority, behind request 2 (the
    // same 1 free block would hold request 2, never request 0's 9 tokens).
    assert_eq!(fourth, ["sched 1 1@5", "sched 2 4@0", "token 1#3", "token 2#1", "finish 2"]);
    assert_eq!(e.num_waiting(), 1);
    e.check_invariants().unwrap();

    // FCFS: the newest (request 1) preempts itself, and request 0, back
    // at the front, would block request 2.
    let (_, s3, third, fourth, _) = run(engine(Limits { num_blocks: 4, ..limits() }));
    assert_eq!(third, ["sched 0 1@8", "preempt 1", "token 0#3"]);
    assert_eq!((s3.preempted, s3.batch_size), (1, 1));
    assert_eq!(fourth, ["sched 0 1@9", "token 0#4"], "request 1 (5 tokens, 2 blocks) waits at the front, 1 block free");
}

#[test]
fn priority_breaks_equal_arrivals_by_id_as_real_arrival_times_would() {
    // Two running requests of one priority that arrived at the same
    // simulated instant: the later id is the later arrival, and the victim.
    let mut e = by_priority(Limits { num_blocks: 4, ..limits() });
    let mut log = Log::default();
    e.submit(prio(0, 0, 8, 4, 0), &mut log).unwrap();
    e.submit(prio(1, 0, 8, 4, 0), &mut log).unwrap();
    e.step(&mut log).unwrap();
    log.take();
    let s = e.step(&mut log).unwrap();
    assert_eq!(s.preempted, 1);
    assert_eq!(log.take(), ["preempt 1", "sched 0 1@8", "token 0#2"]);
    e.check_invariants().unwrap();
}

/// [`engine`] with LoRA: `max_loras` slots, adapter `i` loading in
/// `(i + 1)` ms, 1 us of adapter math a token, 100 us to read a slot.
fn with_lora(l: Limits, max_loras: u32) -> Engine {
    let mut e = engine(l);
    e.cfg.lora = Some(lora::Lora { max_loras, load_s: vec![0.001, 0.002, 0.003], token_s: 1e-6, slot_read_s: 1e-4 });
    e.lora_slots = Some(Box::default());
    e
}

fn on(id: u64, prompt: u32, output: u32, lora: u16) -> Request {
    Request { lora, ..req(id, 0, prompt, output) }
}

#[test]
fn a_full_set_of_adapters_skips_a_waiting_request_and_admits_the_ones_behind_it() {
    // One slot. Requests 0 and 2 use adapter 1, request 1 adapter 2,
    // request 3 the base model; all arrive at 0. Step 1 admits 0, skips 1
    // (a second adapter), admits 2 (adapter 1 is in the step) and 3 (no
    // adapter); step 2 decodes them and still skips 1, whose adapter
    // joins only once the running requests of adapter 1 are gone.
    let mut e = with_lora(limits(), 1);
    let mut log = Log::default();
    for r in [on(0, 4, 2, 1), on(1, 4, 2, 2), on(2, 4, 2, 1), on(3, 4, 2, 0)] {
        e.submit(r, &mut log).unwrap();
    }
    e.step(&mut log).unwrap();
    assert_eq!(
        log.take(),
        ["sched 0 4@0", "sched 2 4@0", "sched 3 4@0", "load lora 0", "token 0#1", "token 2#1", "token 3#1"]
    );
    assert_eq!(e.num_waiting(), 1, "request 1 keeps its place");
    e.step(&mut log).unwrap();
    let second = log.take();
    assert!(!second.iter().any(|x| x.contains("sched 1")), "{second:?}");
    e.step(&mut log).unwrap();
    // Its adapter takes the one slot over adapter 1.
    assert_eq!(log.take(), ["sched 1 4@0", "load lora 1", "token 1#1"]);
    e.step(&mut log).unwrap();
    assert_eq!(log.take(), ["sched 1 1@4", "token 1#2", "finish 1"], "a resident adapter loads once");
}

#[test]
fn the_adapters_add_their_loads_and_math_to_the_step() {
    // The same batch (requests 0 and 2 on adapter 1, 3 on the base
    // model) with and without LoRA: the first step is longer by adapter
    // 0's load (1 ms) and the math: 8 adapter tokens x 1 us against one
    // slot read of 100 us, the larger, so 1.1 ms in all; the decode step
    // after it by max(2 x 1 us, 100 us) = 0.1 ms.
    let run = |mut e: Engine| {
        let mut log = Log::default();
        for r in [on(0, 4, 2, 1), on(2, 4, 2, 1), on(3, 4, 2, 0)] {
            e.submit(r, &mut log).unwrap();
        }
        let a = e.step(&mut log).unwrap();
        let b = e.step(&mut log).unwrap();
        (a.end.as_nanos() - a.start.as_nanos(), b.end.as_nanos() - b.start.as_nanos())
    };
    let (plain, adapters) = (run(engine(limits())), run(with_lora(limits(), 1)));
    assert!((adapters.0 as i64 - plain.0 as i64 - 1_100_000).abs() <= 1, "{plain:?} {adapters:?}");
    assert!((adapters.1 as i64 - plain.1 as i64 - 100_000).abs() <= 1, "{plain:?} {adapters:?}");
}

#[test]
fn a_step_of_base_model_requests_pays_nothing_for_lora() {
    let run = |mut e: Engine| {
        let mut log = Log::default();
        e.submit(on(0, 10, 3, 0), &mut log).unwrap();
        let mut ends = Vec::new();
        while let Some(s) = e.step(&mut log) {
            ends.push(s.end.as_nanos());
        }
        (ends, log.take())
    };
    assert_eq!(run(engine(limits())), run(with_lora(limits(), 2)));
}

/// [`engine`] under SGLang's scheduler ([`Policy::Sglang`]), with its
/// `new_token_ratio` start (`None`: `ignore_eos`).
fn sglang(l: Limits, ratio: Option<f64>) -> Engine {
    let mut e = engine(l);
    e.cfg.policy = Policy::Sglang;
    e.cfg.sglang.ratio = ratio;
    e.sg.ratio = ratio.unwrap_or(1.0);
    e
}

#[test]
fn sglang_runs_a_prefill_step_alone_before_decoding() {
    // Request 1 arrives after request 0's prefill: SGLang's next step is
    // request 1's prefill alone (request 0 waits), then both decode; vLLM
    // decodes request 0 in the same step as request 1's prompt.
    let run = |mut e: Engine| {
        let mut log = Log::default();
        e.submit(req(0, 0, 8, 3), &mut log).unwrap();
        e.step(&mut log).unwrap();
        let at = e.clock().as_nanos();
        e.submit(req(1, at, 8, 2), &mut log).unwrap();
        while e.step(&mut log).is_some() {}
        log.take()
    };
    assert_eq!(
        run(sglang(limits(), None)),
        [
            "sched 0 8@0",
            "token 0#1",
            "sched 1 8@0",
            "token 1#1",
            "sched 0 1@8",
            "sched 1 1@8",
            "token 0#2",
            "token 1#2",
            "finish 1",
            "sched 0 1@9",
            "token 0#3",
            "finish 0"
        ]
    );
    let vllm = run(engine(limits()));
    assert_eq!(vllm[2..4], ["sched 0 1@8", "sched 1 8@0"], "{vllm:?}");
}

/// [`sglang`] with `--enable-mixed-chunk` and `--max-prefill-tokens`.
fn sglang_mixed(l: Limits, mixed_chunk: bool, max_prefill_tokens: u32) -> Engine {
    let mut e = sglang(l, None);
    e.cfg.sglang = SglangOptions { mixed_chunk, max_prefill_tokens, ..e.cfg.sglang };
    e
}

#[test]
fn sglang_with_mixed_chunks_decodes_the_running_requests_in_a_prefill_step() {
    // As above, with `--enable-mixed-chunk`: request 1's prefill step also
    // decodes request 0 (after the prompt), so request 0 ends a step sooner.
    let mut e = sglang_mixed(limits(), true, 16_384);
    let mut log = Log::default();
    e.submit(req(0, 0, 8, 3), &mut log).unwrap();
    e.step(&mut log).unwrap();
    assert_eq!(log.take(), ["sched 0 8@0", "token 0#1"]);
    let at = e.clock().as_nanos();
    e.submit(req(1, at, 8, 2), &mut log).unwrap();
    let mut steps = Vec::new();
    while e.step(&mut log).is_some() {
        steps.push(log.take());
    }
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0], ["sched 1 8@0", "sched 0 1@8", "token 1#1", "token 0#2"]);
    assert_eq!(steps[1][..2], ["sched 0 1@9", "sched 1 1@8"]);
}

#[test]
fn sglang_with_mixed_chunks_takes_the_decode_tokens_out_of_max_prefill_tokens() {
    // Three requests of 4 prompt tokens run (prefilled in step 1), then
    // three prompts of 10 wait, `max_prefill_tokens` 13. Without mixed
    // chunks step 2 takes prompts while tokens are left (13 -> 3 -> -7):
    // two of them, and nothing decodes. With mixed chunks the three
    // decodes come out first (13 - 3 = 10 -> 0): one prompt, and the three
    // running requests decode in the same step.
    let step2 = |mixed: bool| {
        let mut e = sglang_mixed(limits(), mixed, 13);
        let mut log = Log::default();
        for id in 0..3 {
            e.submit(req(id, 0, 4, 50), &mut log).unwrap();
        }
        e.step(&mut log).unwrap();
        assert_eq!(log.take().iter().filter(|x| x.starts_with("sched")).count(), 3);
        let at = e.clock().as_nanos();
        for id in 3..6 {
            e.submit(req(id, at, 10, 5), &mut log).unwrap();
        }
        e.step(&mut log).unwrap();
        log.take().into_iter().filter(|x| x.starts_with("sched")).collect::<Vec<_>>()
    };
    assert_eq!(step2(false), ["sched 3 10@0", "sched 4 10@0"]);
    assert_eq!(step2(true), ["sched 3 10@0", "sched 0 1@4", "sched 1 1@4", "sched 2 1@4"]);
}

#[test]
fn sglang_reserves_the_whole_output_stops_at_the_first_misfit_and_latches() {
    // 10 blocks of 4 = 40 tokens. Request 0 (8 + 12) needs 8 + 12 + 1 = 21
    // < 40: admitted, 19 left; request 1 (the same) needs 21 >= 19: the pass
    // stops there, latched, though request 2 (2 + 1: 4 tokens) would fit
    // behind it. Nothing more is admitted until request 0 leaves, 12 steps
    // later; then 1 and 2 together.
    let mut e = sglang(Limits { num_blocks: 10, ..limits() }, None);
    let mut log = Log::default();
    for r in [req(0, 0, 8, 12), req(1, 0, 8, 12), req(2, 0, 2, 1)] {
        e.submit(r, &mut log).unwrap();
    }
    let mut first_of = std::collections::BTreeMap::new();
    let mut step = 0;
    while e.step(&mut log).is_some() {
        step += 1;
        for ev in log.take() {
            if let Some(id) = ev.strip_prefix("sched ").and_then(|r| r.split(' ').next()) {
                first_of.entry(id.to_string()).or_insert(step);
            }
        }
    }
    assert_eq!(first_of.into_iter().collect::<Vec<_>>(), [("0".into(), 1), ("1".into(), 13), ("2".into(), 13)]);
    // vLLM admits all three at once (their prompts fit the blocks).
    let mut v = engine(Limits { num_blocks: 10, ..limits() });
    for r in [req(0, 0, 8, 12), req(1, 0, 8, 12), req(2, 0, 2, 1)] {
        v.submit(r, &mut log).unwrap();
    }
    v.step(&mut log).unwrap();
    assert_eq!(log.take().iter().filter(|x| x.starts_with("sched")).count(), 3);
}

#[test]
fn sglang_with_a_ratio_over_admits_then_retracts_the_least_advanced() {
    // 5 blocks of 4. Request 0 (4 + 9) alone: after its prefill it holds
    // one block, 16 tokens free. Request 1 (4 + 9) arrives: it needs 14;
    // with ignore_eos request 0 reserves its 8 remaining tokens (16 - 8 =
    // 8 < 14: wait), with a ratio of 0.1 only 0.8 (admitted). Both then
    // need 3 blocks to finish, 6 > 5: a decode step lacks a block and
    // retracts request 1 (fewer tokens generated), which ends last.
    let run = |mut e: Engine| {
        let mut log = Log::default();
        e.submit(req(0, 0, 4, 9), &mut log).unwrap();
        e.step(&mut log).unwrap();
        let at = e.clock().as_nanos();
        e.submit(req(1, at, 4, 9), &mut log).unwrap();
        while e.step(&mut log).is_some() {
            e.check_invariants().unwrap();
        }
        log.take()
    };
    let pos = |l: &[String], x: &str| l.iter().position(|e| e == x).unwrap_or_else(|| panic!("{x} in {l:?}"));
    let ratio = run(sglang(Limits { num_blocks: 5, ..limits() }, Some(0.1)));
    assert_eq!(ratio[2], "sched 1 4@0", "admitted at once: {ratio:?}");
    assert!(ratio.iter().any(|x| x == "preempt 1") && !ratio.iter().any(|x| x == "preempt 0"), "{ratio:?}");
    assert!(pos(&ratio, "finish 0") < pos(&ratio, "finish 1"));
    let eos = run(sglang(Limits { num_blocks: 5, ..limits() }, None));
    assert!(!eos.iter().any(|x| x.starts_with("preempt")), "{eos:?}");
    assert!(pos(&eos, "finish 0") < pos(&eos, "sched 1 4@0"), "{eos:?}");
}

#[test]
fn sglang_decays_its_ratio_every_decode_step_and_resets_it_when_idle() {
    // Start 0.7, floor 0.14 x 0.7 = 0.098: each decode step takes
    // (0.7 - 0.098) / 600 = 0.001003 off. A request of 4 + 30 tokens has
    // one prefill step and 29 decode steps: 0.7 - 29 x 0.001003.
    let mut e = sglang(limits(), Some(0.7));
    let mut log = Log::default();
    e.submit(req(0, 0, 4, 30), &mut log).unwrap();
    while e.step(&mut log).is_some() {}
    let decayed = 0.7 - 29.0 * (0.7 - 0.098) / 600.0;
    assert!((e.sg.ratio - decayed).abs() < 1e-12, "{}", e.sg.ratio);
    // Idle, then a new request: its (prefill) step starts from 0.7 again.
    let at = e.clock().as_nanos() + 1_000_000;
    e.submit(req(1, at, 4, 2), &mut log).unwrap();
    e.step(&mut log).unwrap();
    assert_eq!(e.sg.ratio, 0.7);
}

#[test]
fn an_sglang_stretch_leaves_the_ratio_and_the_latch_as_its_steps_do() {
    // Requests 0 and 1 (8 + 40, 8 + 20) decode together after their
    // prefill; with `batch_is_full` latched and nothing waiting, one engine
    // steps 30 times, the other takes the same 30 steps as one stretch
    // through request 1's finish. The ratio decays from 0.7 by
    // (0.7 - 0.098) / 600 a step: 0.7 - 30 x 0.001003333... (never at its
    // floor of 0.098 here), the latch opens when request 1 leaves, and
    // both engines hold the same bits.
    let start = || {
        let mut e = sglang(limits(), Some(0.7));
        e.submit(req(0, 0, 8, 40), &mut ()).unwrap();
        e.submit(req(1, 0, 8, 20), &mut ()).unwrap();
        e.step(&mut ()).unwrap();
        e.sg.full = true;
        e
    };
    let mut stepped = start();
    for _ in 0..30 {
        stepped.step(&mut ()).unwrap();
    }
    let mut stretched = start();
    let never = SimTime::from_nanos(u64::MAX);
    let mut finished = Vec::new();
    let mut on_finish = |id: RequestId, _: SimTime| {
        finished.push(id);
        never
    };
    assert_eq!(stretched.decode_stretch_through(never, never, 30, &mut on_finish, &mut ()), 30);
    assert_eq!(finished, [1]);
    let expected = (0..30).fold(0.7f64, |r, _| r - (0.7 - 0.7 * 0.14) / 600.0);
    assert!((expected - (0.7 - 30.0 * 0.602 / 600.0)).abs() < 1e-12, "{expected}");
    assert_eq!(stepped.sg.ratio.to_bits(), expected.to_bits());
    assert_eq!(stretched.sg.ratio.to_bits(), expected.to_bits());
    assert!(!stepped.sg.full && !stretched.sg.full, "the latch opens when request 1 leaves");
    assert_eq!(stretched.clock(), stepped.clock());
    assert_eq!(stretched.running.len(), 1);
}
