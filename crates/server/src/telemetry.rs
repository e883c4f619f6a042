//! What the server measures, per model: Prometheus families (monotonic
//! since start, read by `/metrics`) and a summary window (reset by
//! `POST /metrics/summary/reset`, read by `/metrics/summary`).
//!
//! Latency observations come from two places. The engine task (or the
//! fixed-engine feed) reports *simulated* times: the timeline the engine
//! computed, which is what the Prometheus histograms show and what `llmsim
//! run` predicts. Request handlers report *observed* times: when each chunk
//! was actually handed to the connection, measured from when the request
//! was received. Every observation carries the summary epoch its request
//! started in; a reset bumps the epoch, so requests that straddle a reset
//! never pollute the new window.

use std::sync::atomic::{AtomicU64, Ordering};

use llmsim_core::time::SimTime;
use llmsim_planner::metrics::{Histogram, RequestRecord};

/// How a request ended, as vLLM's `finished_reason` label spells it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
    Abort,
    Error,
}

impl Finish {
    pub const ALL: [Finish; 4] = [Finish::Stop, Finish::Length, Finish::Abort, Finish::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
            Finish::Error => "error",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A Prometheus histogram: per-bucket counts (the last is `+Inf`), sum, count.
#[derive(Clone, Debug, PartialEq)]
pub struct PromHist {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl PromHist {
    pub fn new(bounds: Vec<f64>) -> PromHist {
        let n = bounds.len() + 1;
        PromHist { bounds, counts: vec![0; n], sum: 0.0, count: 0 }
    }

    pub fn observe(&mut self, v: f64) {
        self.observe_n(v, 1);
    }

    /// `n` observations of the same value.
    pub fn observe_n(&mut self, v: f64, n: u64) {
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        self.counts[i] += n;
        self.sum += v * n as f64;
        self.count += n;
    }
}

/// vLLM's bucket layouts (vLLM's `vllm/v1/metrics/loggers.py`; the expected exposition is tests/integration/server/vllm-metrics.expected.prom).
pub mod buckets {
    pub const TTFT: &[f64] = &[
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
        160.0, 640.0, 2560.0,
    ];
    pub const ITL: &[f64] =
        &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
    pub const REQUEST: &[f64] = &[
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
        1920.0, 7680.0,
    ];
    pub const ITERATION_TOKENS: &[f64] =
        &[1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
    pub const PARAMS_N: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];
    pub const PREEMPTIONS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0];

    /// 1, 2, 5, 10, 20, 50, ... up to `max`, as vLLM builds token-count buckets.
    pub fn one_two_five(max: u32) -> Vec<f64> {
        let mut out = Vec::new();
        let mut scale = 1u64;
        loop {
            for m in [1, 2, 5] {
                let v = m * scale;
                if v > u64::from(max) {
                    return out;
                }
                out.push(v as f64);
            }
            scale *= 10;
        }
    }
}

/// Which of vLLM's admission limits turned a request away (the models
/// file's `max_num_queued_reqs`, `max_num_queued_tokens`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Busy {
    /// In-flight requests plus the new one's `n` would pass `max_num_queued_reqs`.
    Requests = 0,
    /// The prompts of requests in prefill add up to `max_num_queued_tokens` or more.
    Tokens = 1,
}

impl Busy {
    pub const ALL: [Busy; 2] = [Busy::Requests, Busy::Tokens];

    /// The `reason` label of `vllm:admission_rejections_total`: the flag that fired.
    pub fn reason(self) -> &'static str {
        match self {
            Busy::Requests => "max_num_queued_reqs",
            Busy::Tokens => "max_num_queued_tokens",
        }
    }

    /// The 503's message: vLLM 0.33's `QueueOverflowError` and
    /// `MaxQueuedTokensError` (`vllm/exceptions.py`), word for word.
    pub fn message(self) -> &'static str {
        match self {
            Busy::Requests => {
                "The engine is currently busy and cannot accept new requests. Please try again later or on a \
                 different instance."
            }
            Busy::Tokens => {
                "The engine has reached its prefill token backlog limit. Please try again later or on a \
                 different instance."
            }
        }
    }
}

/// A model's admission state, shared by its engine task (which keeps the
/// counts) and its request handlers (which check them before planning an
/// answer, as vLLM's serving layer calls `check_admission` before it
/// renders the prompt). Without limits nothing is ever refused.
#[derive(Debug, Default)]
pub struct Admission {
    /// `max_num_queued_reqs`.
    pub max_reqs: Option<u64>,
    /// `max_num_queued_tokens`.
    pub max_tokens: Option<u64>,
    /// Sequences in the engine and not ended (waiting or running).
    unfinished: AtomicU64,
    /// Prompt tokens of those no token of which has been handed out.
    prefilling: AtomicU64,
}

impl Admission {
    pub fn new(max_reqs: Option<u64>, max_tokens: Option<u64>) -> Admission {
        Admission { max_reqs, max_tokens, ..Admission::default() }
    }

    /// vLLM's `check_admission`: the limit, if any, that refuses a request
    /// of `n` sequences when `unfinished` sequences are in flight and
    /// `prefilling` prompt tokens are still in prefill. Requests first
    /// (`unfinished + n > max`), then tokens (`prefilling >= max`: the new
    /// prompt's own tokens are not added).
    /// `n` is as sent (the preflight runs before `n` is checked, so vLLM
    /// compares a negative one as it is).
    pub fn refuses(&self, n: i64, unfinished: u64, prefilling: u64) -> Option<Busy> {
        if self.max_reqs.is_some_and(|max| i128::from(unfinished) + i128::from(n) > i128::from(max)) {
            return Some(Busy::Requests);
        }
        if self.max_tokens.is_some_and(|max| prefilling >= max) {
            return Some(Busy::Tokens);
        }
        None
    }

    /// [`Admission::refuses`] on the counts the engine task last published.
    pub fn preflight(&self, n: i64) -> Option<Busy> {
        self.refuses(n, self.unfinished.load(Ordering::Acquire), self.prefilling.load(Ordering::Acquire))
    }

    /// The engine task publishes its counts after each change.
    pub fn publish(&self, unfinished: u64, prefilling: u64) {
        self.unfinished.store(unfinished, Ordering::Release);
        self.prefilling.store(prefilling, Ordering::Release);
    }
}

/// The Prometheus side: counters and histograms since the server started.
#[derive(Clone, Debug)]
pub struct Prom {
    pub preemptions: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    /// By [`Finish`].
    pub success: [u64; 4],
    pub request_prompt_tokens: PromHist,
    pub request_generation_tokens: PromHist,
    pub iteration_tokens: PromHist,
    pub params_n: PromHist,
    pub params_max_tokens: PromHist,
    pub ttft: PromHist,
    pub itl: PromHist,
    pub request_tpot: PromHist,
    pub e2e: PromHist,
    pub queue: PromHist,
    pub inference: PromHist,
    pub prefill: PromHist,
    pub decode: PromHist,
    pub num_preemptions: PromHist,
    /// Prefix-cache lookups: tokens queried and found (`prefix`).
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    /// Requests turned away with 503 by vLLM's admission limits, by
    /// [`Busy`] (`vllm:admission_rejections_total{reason}`).
    pub admission_rejections: [u64; 2],
    /// Speculative decoding (`vllm:spec_decode_*`).
    pub spec: llmsim_planner::metrics::SpecTotals,
}

impl Prom {
    fn new(context_length: u32) -> Prom {
        let h = |b: &[f64]| PromHist::new(b.to_vec());
        let tokens = || PromHist::new(buckets::one_two_five(context_length));
        Prom {
            preemptions: 0,
            prompt_tokens: 0,
            generation_tokens: 0,
            success: [0; 4],
            request_prompt_tokens: tokens(),
            request_generation_tokens: tokens(),
            iteration_tokens: h(buckets::ITERATION_TOKENS),
            params_n: h(buckets::PARAMS_N),
            params_max_tokens: tokens(),
            ttft: h(buckets::TTFT),
            itl: h(buckets::ITL),
            request_tpot: h(buckets::ITL),
            e2e: h(buckets::REQUEST),
            queue: h(buckets::REQUEST),
            inference: h(buckets::REQUEST),
            prefill: h(buckets::REQUEST),
            decode: h(buckets::REQUEST),
            num_preemptions: h(buckets::PREEMPTIONS),
            prefix_queries: 0,
            prefix_hits: 0,
            admission_rejections: [0; 2],
            spec: Default::default(),
        }
    }
}

/// The summary window: counts and latency distributions since the last reset.
#[derive(Clone, Debug, Default)]
pub struct Window {
    pub epoch: u64,
    /// Server time of the reset (or start).
    pub since: SimTime,
    pub submitted: u64,
    pub completed: u64,
    pub aborted: u64,
    pub rejected: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    pub preemptions: u64,
    pub sim_ttft: Histogram,
    pub sim_itl: Histogram,
    pub sim_tpot: Histogram,
    pub sim_e2e: Histogram,
    pub sim_queue: Histogram,
    pub obs_ttft: Histogram,
    pub obs_itl: Histogram,
    pub obs_e2e: Histogram,
    /// Release time minus due time, per token, where the engine releases it.
    pub lag: Histogram,
    /// Hand-over to the connection minus due time, per token, in the handler.
    pub delivery_lag: Histogram,
}

impl Window {
    /// Adds another replica's window of the same epoch to this one (the
    /// model's summary is over all its replicas).
    pub fn merge(&mut self, o: &Window) {
        self.submitted += o.submitted;
        self.completed += o.completed;
        self.aborted += o.aborted;
        self.rejected += o.rejected;
        self.prompt_tokens += o.prompt_tokens;
        self.output_tokens += o.output_tokens;
        self.preemptions += o.preemptions;
        for (a, b) in [
            (&mut self.sim_ttft, &o.sim_ttft),
            (&mut self.sim_itl, &o.sim_itl),
            (&mut self.sim_tpot, &o.sim_tpot),
            (&mut self.sim_e2e, &o.sim_e2e),
            (&mut self.sim_queue, &o.sim_queue),
            (&mut self.obs_ttft, &o.obs_ttft),
            (&mut self.obs_itl, &o.obs_itl),
            (&mut self.obs_e2e, &o.obs_e2e),
            (&mut self.lag, &o.lag),
            (&mut self.delivery_lag, &o.delivery_lag),
        ] {
            a.merge(b);
        }
    }
}

/// What a handler saw of one request, in nanoseconds since it was received.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub ttft_ns: Option<u64>,
    pub gaps_ns: Vec<u64>,
    pub e2e_ns: Option<u64>,
    pub delivery_lags_ns: Vec<u64>,
}

/// Everything the simulated engine did with one request: its record, and
/// how many steps it was in and how full they were (the explanation headers).
#[derive(Clone, Debug, PartialEq)]
pub struct Story {
    pub rec: RequestRecord,
    pub steps: u32,
    pub batch_sum: u64,
}

/// One model's measurements.
#[derive(Clone, Debug)]
pub struct ModelTelemetry {
    pub prom: Prom,
    pub window: Window,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl ModelTelemetry {
    pub fn new(context_length: u32) -> ModelTelemetry {
        ModelTelemetry { prom: Prom::new(context_length), window: Window::default() }
    }

    fn window(&mut self, epoch: u64) -> Option<&mut Window> {
        (self.window.epoch == epoch).then_some(&mut self.window)
    }

    /// Starts a new summary window.
    pub fn reset(&mut self, epoch: u64, now: SimTime) {
        self.window = Window { epoch, since: now, ..Window::default() };
    }

    pub fn accepted(&mut self, prompt: u32, epoch: u64) {
        self.prom.prompt_tokens += u64::from(prompt);
        if let Some(w) = self.window(epoch) {
            w.submitted += 1;
            w.prompt_tokens += u64::from(prompt);
        }
    }

    /// A simulated token: the first (`gap_ns` None, with its TTFT) or a later one.
    pub fn token(&mut self, ttft_ns: Option<u64>, gap_ns: Option<u64>, epoch: u64) {
        self.prom.generation_tokens += 1;
        if let Some(t) = ttft_ns {
            self.prom.ttft.observe(secs(t));
        }
        if let Some(g) = gap_ns {
            self.prom.itl.observe(secs(g));
        }
        if let Some(w) = self.window(epoch) {
            w.output_tokens += 1;
            if let Some(t) = ttft_ns {
                w.sim_ttft.record(t);
            }
            if let Some(g) = gap_ns {
                w.sim_itl.record(g);
            }
        }
    }

    /// `n` later tokens, each `gap_ns` after the one before (a fixed model).
    pub fn gaps(&mut self, gap_ns: u64, n: u64, epoch: u64) {
        self.prom.generation_tokens += n;
        self.prom.itl.observe_n(secs(gap_ns), n);
        if let Some(w) = self.window(epoch) {
            w.output_tokens += n;
            for _ in 0..n {
                w.sim_itl.record(gap_ns);
            }
        }
    }

    /// Tokens released late by these amounts.
    pub fn lags(&mut self, lags_ns: &[u64]) {
        for &l in lags_ns {
            self.window.lag.record(l);
        }
    }

    /// `n` tokens whose release was `lag_ns` late.
    pub fn lag(&mut self, lag_ns: u64, n: usize) {
        for _ in 0..n {
            self.window.lag.record(lag_ns);
        }
    }

    /// A prefix-cache lookup at an admission: `queried` tokens, `hit` found.
    pub fn prefix_lookup(&mut self, queried: u32, hit: u32) {
        self.prom.prefix_queries += u64::from(queried);
        self.prom.prefix_hits += u64::from(hit);
    }

    /// A verify step of one request: `drafted` drafts, the leading
    /// `accepted` kept.
    pub fn speculated(&mut self, drafted: u32, accepted: u32) {
        self.prom.spec.add(drafted, accepted);
    }

    pub fn step(&mut self, tokens: u32, preempted: u32) {
        self.prom.iteration_tokens.observe(f64::from(tokens));
        self.prom.preemptions += u64::from(preempted);
        self.window.preemptions += u64::from(preempted);
    }

    pub fn finished(&mut self, story: &Story, finish: Finish, max_tokens: Option<u32>, n: u32, epoch: u64) {
        let r = &story.rec;
        let p = &mut self.prom;
        p.success[finish.index()] += 1;
        p.request_prompt_tokens.observe(f64::from(r.prompt));
        p.request_generation_tokens.observe(f64::from(r.tokens));
        // Request parameters are observed once per request (its first choice).
        if n > 0 {
            p.params_n.observe(f64::from(n));
            if let Some(m) = max_tokens {
                p.params_max_tokens.observe(f64::from(m));
            }
        }
        p.num_preemptions.observe(f64::from(r.preemptions));
        let span = |a: Option<SimTime>, b: Option<SimTime>| match (a, b) {
            (Some(a), Some(b)) => Some(b.nanos_since(a)),
            _ => None,
        };
        let observe = |h: &mut PromHist, v: Option<u64>| v.map(|v| h.observe(secs(v)));
        observe(&mut p.e2e, r.e2e_ns());
        observe(&mut p.queue, r.queue_ns());
        observe(&mut p.inference, span(r.first_scheduled, r.last_token));
        observe(&mut p.prefill, span(r.first_scheduled, r.first_token));
        observe(&mut p.decode, span(r.first_token, r.last_token));
        if let Some(t) = r.tpot_ns() {
            p.request_tpot.observe(t / 1e9);
        }
        if let Some(w) = self.window(epoch) {
            w.completed += 1;
            if let Some(v) = r.e2e_ns() {
                w.sim_e2e.record(v);
            }
            if let Some(v) = r.queue_ns() {
                w.sim_queue.record(v);
            }
            if let Some(v) = r.tpot_ns() {
                w.sim_tpot.record(v.round() as u64);
            }
        }
    }

    pub fn aborted(&mut self, epoch: u64) {
        self.prom.success[Finish::Abort.index()] += 1;
        if let Some(w) = self.window(epoch) {
            w.aborted += 1;
        }
    }

    /// A request turned away by an admission limit (503): counted once per
    /// request, whatever its `n`, as vLLM counts it. Not a finished request.
    pub fn admission_rejected(&mut self, busy: Busy) {
        self.prom.admission_rejections[busy as usize] += 1;
    }

    pub fn rejected(&mut self, epoch: u64) {
        self.prom.success[Finish::Error.index()] += 1;
        if let Some(w) = self.window(epoch) {
            w.rejected += 1;
        }
    }

    pub fn observed(&mut self, o: &Observed, epoch: u64) {
        let Some(w) = self.window(epoch) else { return };
        if let Some(v) = o.ttft_ns {
            w.obs_ttft.record(v);
        }
        if let Some(v) = o.e2e_ns {
            w.obs_e2e.record(v);
        }
        o.gaps_ns.iter().for_each(|&g| w.obs_itl.record(g));
        o.delivery_lags_ns.iter().for_each(|&g| w.delivery_lag.record(g));
    }
}

/// Live engine state, written by whoever drives the model and read by
/// `/metrics` without a lock.
#[derive(Debug, Default)]
pub struct Gauges {
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    pub kv_used: AtomicU64,
    pub kv_total: AtomicU64,
}

impl Gauges {
    pub fn set(&self, running: u64, waiting: u64, kv_used: u64) {
        self.running.store(running, Ordering::Relaxed);
        self.waiting.store(waiting, Ordering::Relaxed);
        self.kv_used.store(kv_used, Ordering::Relaxed);
    }

    pub fn kv_usage(&self) -> f64 {
        let total = self.kv_total.load(Ordering::Relaxed);
        if total == 0 { 0.0 } else { self.kv_used.load(Ordering::Relaxed) as f64 / total as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_buckets_stop_at_the_context_length() {
        assert_eq!(buckets::one_two_five(600), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]);
    }

    #[test]
    fn a_value_on_a_bound_lands_in_that_bucket() {
        let mut h = PromHist::new(vec![1.0, 2.0]);
        h.observe(1.0);
        h.observe(1.5);
        h.observe_n(9.0, 2);
        assert_eq!(h.counts, vec![1, 1, 2]);
        assert_eq!((h.count, h.sum), (4, 20.5));
    }

    #[test]
    fn observations_from_before_a_reset_are_ignored() {
        let mut s = ModelTelemetry::new(100);
        s.accepted(10, 0);
        s.reset(1, SimTime::from_nanos(5));
        s.accepted(10, 0);
        s.rejected(0);
        assert_eq!(s.window.submitted, 0);
        assert_eq!(s.window.rejected, 0);
        assert_eq!(s.prom.prompt_tokens, 20, "Prometheus counters never reset");
        s.accepted(3, 1);
        assert_eq!(s.window.submitted, 1);
    }
}
