//! Turning engine events into the numbers users read: per-request records,
//! latency summaries and run-wide totals (docs/engine.md section 5).

pub mod fold;
pub mod histogram;
pub mod over_time;
pub mod percentile;
pub mod result;

pub use histogram::Histogram;
pub use result::{RunResult, Stats};

use std::collections::BTreeMap;

use llmsim_core::engine::{KvBudget, Observer, RejectReason, RequestId, StepRecord, Stretch};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::Scenario;
use result::*;

/// How a request ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Still in the engine when the collector finished.
    InFlight,
    Finished,
    Rejected(RejectReason),
    Aborted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InFlight => "in_flight",
            Status::Finished => "finished",
            Status::Rejected(r) => r.as_str(),
            Status::Aborted => "aborted",
        }
    }
}

/// Everything measured about one request.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub id: RequestId,
    pub arrival: SimTime,
    pub prompt: u32,
    pub output: u32,
    pub first_scheduled: Option<SimTime>,
    pub first_token: Option<SimTime>,
    pub last_token: Option<SimTime>,
    pub tokens: u32,
    pub preemptions: u32,
    /// Longest gap between two of its tokens (its worst stall).
    pub max_gap_ns: u64,
    pub status: Status,
    /// With prefix caching: prompt tokens found in the cache at its first
    /// admission (`None` before it is admitted, or without caching).
    pub cached_tokens: Option<u32>,
    /// With `workload.classes`: its class, an index into them (else 0).
    pub class: u8,
}

/// What one released token was, for a request's latency figures.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TokenGap {
    /// The first token: nanoseconds since arrival.
    First { ttft_ns: u64 },
    /// A later token: nanoseconds since the previous one.
    Next { gap_ns: u64 },
    /// A later token released with the previous one (speculative
    /// decoding's verified drafts): one streamed chunk, as `vllm bench
    /// serve` sees it, so no gap of its own.
    Same,
}

impl TokenGap {
    /// `(ttft_ns, gap_ns)`: at most one of them is set.
    pub fn split(self) -> (Option<u64>, Option<u64>) {
        match self {
            TokenGap::First { ttft_ns } => (Some(ttft_ns), None),
            TokenGap::Next { gap_ns } => (None, Some(gap_ns)),
            TokenGap::Same => (None, None),
        }
    }
}

impl RequestRecord {
    /// A request that has arrived and nothing else yet.
    pub fn new(id: RequestId, arrival: SimTime, prompt: u32, output: u32) -> RequestRecord {
        RequestRecord {
            id,
            arrival,
            prompt,
            output,
            first_scheduled: None,
            first_token: None,
            last_token: None,
            tokens: 0,
            preemptions: 0,
            max_gap_ns: 0,
            status: Status::InFlight,
            cached_tokens: None,
            class: 0,
        }
    }

    /// Records its `index`-th token (1-based), released at `at`.
    pub fn add_token(&mut self, at: SimTime, index: u32) -> TokenGap {
        let gap = match self.last_token {
            None => {
                self.first_token = Some(at);
                TokenGap::First { ttft_ns: at.nanos_since(self.arrival) }
            }
            Some(last) if last == at => TokenGap::Same,
            Some(last) => {
                let gap_ns = at.nanos_since(last);
                self.max_gap_ns = self.max_gap_ns.max(gap_ns);
                TokenGap::Next { gap_ns }
            }
        };
        self.last_token = Some(at);
        self.tokens = index;
        gap
    }

    pub fn queue_ns(&self) -> Option<u64> {
        self.first_scheduled.map(|t| t.nanos_since(self.arrival))
    }
    pub fn ttft_ns(&self) -> Option<u64> {
        self.first_token.map(|t| t.nanos_since(self.arrival))
    }
    pub fn e2e_ns(&self) -> Option<u64> {
        self.last_token.map(|t| t.nanos_since(self.arrival))
    }
    /// `(last - first) / (N - 1)` for a finished request with `N > 1`.
    pub fn tpot_ns(&self) -> Option<f64> {
        match (self.first_token, self.last_token) {
            (Some(f), Some(l)) if self.tokens > 1 => Some(l.nanos_since(f) as f64 / f64::from(self.tokens - 1)),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct CollectorOptions {
    /// Keep every step record until the end ([`RunOutput::steps`]), for
    /// callers that want them whole; `llmsim run` writes its steps CSV,
    /// trace and timeline as the steps come instead (`src/cli/run/outputs.rs`).
    pub keep_steps: bool,
}

/// What a finished run produced.
#[derive(Clone, Debug)]
pub struct RunOutput {
    pub result: RunResult,
    /// Every request's record, unless the collector was
    /// [`Collector::summary_only`] (then only those still in flight at the
    /// end, if any).
    pub requests: Vec<RequestRecord>,
    /// Empty unless `keep_steps` was set.
    pub steps: Vec<StepRecord>,
    /// With `cluster:` only: the replica of every request and kept step.
    pub placement: Option<Placement>,
    /// With `cluster.autoscale` or `cluster.timeline` only: each window's
    /// row (docs/clusters.md, "Results over time").
    pub windows: Vec<over_time::WindowRow>,
}

/// Records dropped in one go once this many leading ones have ended (and
/// they are at least half of those kept), in a summary-only collector.
const DROP_AT: usize = 4096;

/// An [`Observer`] that measures.
///
/// Each request's record lives while it is in flight; when it ends its
/// figures are folded into the run's totals ([`fold`]). By default the
/// records are kept too, for per-request outputs; a
/// [`Collector::summary_only`] one drops them, so a run's memory stays flat
/// in its requests (the records of requests that arrived while the oldest
/// one still in flight was running, at most).
pub struct Collector {
    options: CollectorOptions,
    num_blocks: u32,
    /// The records of requests `base..base + requests.len()`.
    requests: Vec<RequestRecord>,
    base: u64,
    /// Drop records once folded.
    summary_only: bool,
    /// Leading records that have ended (summary only).
    ended_prefix: usize,
    totals: fold::Totals,
    itl: Histogram,
    /// ITL gaps not yet in `itl`: `(gap, count)`. The tokens of a step
    /// mostly share one gap, so equal gaps in a row are recorded at once.
    itl_run: histogram::Run,
    step_ns: Histogram,
    /// Step durations not yet in `step_ns`.
    step_run: histogram::Run,
    steps: Vec<StepRecord>,
    step_count: u64,
    batch_sum: u64,
    batch_max: u32,
    token_sum: u64,
    kv_peak: u32,
    /// Sum over steps of blocks used x duration (block-nanoseconds).
    kv_weighted: u128,
    busy_ns: u128,
    preemptions: u64,
    /// Prefix-cache lookups: tokens queried and found, over every admission.
    prefix_queried: u64,
    prefix_hit: u64,
    /// Scratch space of the stretch fold.
    stretch_buf: StretchBuf,
    /// Prompt + output tokens above which a request might be rejected
    /// after its first tokens (its KV could outgrow the cache, less the
    /// watermark, and a preemption then ends it).
    fits_tokens: u64,
    /// The ITL gaps of in-flight requests that might be rejected: they
    /// join `itl` when the request finishes, never if it is rejected, so
    /// ITL is over completed requests as TTFT and TPOT are.
    at_risk: BTreeMap<RequestId, Vec<u64>>,
    /// Speculative decoding's counters, from the first verified draft.
    spec: Option<SpecTotals>,
    /// With `workload.classes`: each class's figures.
    per_class: Option<Box<PerClass>>,
    /// With KV offload: prompt tokens loaded from each tier.
    kv_loaded: Vec<u64>,
    /// With LoRA: how many times each adapter was copied into a slot.
    lora_loads: Vec<u64>,
}

/// Each class's counts, folded requests, ITL and preemptions.
struct PerClass {
    classes: crate::workload::classes::Classes,
    arrived: Vec<u64>,
    totals: Vec<fold::Totals>,
    itl: Vec<Histogram>,
    preemptions: Vec<u64>,
}

/// Speculative decoding's counters as vLLM keeps them: verify steps of a
/// request, draft tokens, and accepted drafts by position (the server's
/// `/metrics` keeps the same).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecTotals {
    pub drafts: u64,
    pub draft_tokens: u64,
    pub accepted_per_pos: Vec<u64>,
}

impl SpecTotals {
    /// One verify step: `drafted` drafts, the leading `accepted` kept.
    pub fn add(&mut self, drafted: u32, accepted: u32) {
        self.drafts += 1;
        self.draft_tokens += u64::from(drafted);
        if self.accepted_per_pos.len() < drafted as usize {
            self.accepted_per_pos.resize(drafted as usize, 0);
        }
        for n in &mut self.accepted_per_pos[..accepted as usize] {
            *n += 1;
        }
    }

    pub fn accepted(&self) -> u64 {
        self.accepted_per_pos.iter().sum()
    }
}

impl PerClass {
    /// Each class's figures; rates over the run's `duration_s`.
    fn summarize(&self, duration_s: f64) -> Vec<ClassOut> {
        let per_s = |x: u64| if duration_s > 0.0 { x as f64 / duration_s } else { 0.0 };
        (0..self.classes.len())
            .map(|k| {
                let t = &self.totals[k];
                let (input_tokens, output_tokens) = (t.input_tokens, t.output_tokens);
                ClassOut {
                    name: self.classes.names[k].clone(),
                    priority: self.classes.priorities[k],
                    weight: self.classes.weights[k],
                    requests: RequestsOut {
                        total: self.arrived[k],
                        completed: t.completed,
                        rejected: t.rejected_ctx + t.rejected_kv,
                        rejected_context_length: t.rejected_ctx,
                        rejected_kv_capacity: t.rejected_kv,
                        aborted: t.aborted,
                        input_tokens,
                        output_tokens,
                    },
                    throughput: ThroughputOut {
                        duration_s,
                        requests_per_s: per_s(t.completed),
                        input_tokens_per_s: per_s(input_tokens),
                        output_tokens_per_s: per_s(output_tokens),
                        total_tokens_per_s: per_s(input_tokens + output_tokens),
                    },
                    ttft_ms: t.ttft.stats(),
                    itl_ms: Stats::from_histogram(&self.itl[k]),
                    tpot_ms: t.tpot.stats(),
                    e2e_ms: t.e2e.stats(),
                    queue_ms: t.queue.stats(),
                    preemptions: self.preemptions[k],
                }
            })
            .collect()
    }
}

/// Scratch space of [`Collector`]'s decode-stretch fold, kept between stretches.
#[derive(Clone, Debug, Default)]
struct StretchBuf {
    later_max: Vec<u64>,
    present: Vec<i64>,
    ended: Vec<(u32, usize)>,
    /// Joiners' later gaps as step ranges: `(last, first, joiner)`, and
    /// the longest step of each range, by joiner.
    ranges: Vec<(usize, usize, usize)>,
    longest: Vec<u64>,
    /// Steps `(index, duration)` with no longer step after them so far.
    stack: Vec<(usize, u64)>,
}

impl StretchBuf {
    /// The longest of the steps in each of `ranges`, into `longest`, in
    /// O(k + q log k): a sweep keeps the steps not outlasted by a later one
    /// (their durations decrease), and a range ending at the sweep's step
    /// takes the first of them at or after its start.
    fn range_maxima(&mut self, steps: &[StepRecord], joins: usize) {
        self.longest.clear();
        self.longest.resize(joins, 0);
        self.ranges.sort_unstable();
        self.stack.clear();
        let mut next = 0;
        for (e, step) in steps.iter().enumerate() {
            if next == self.ranges.len() {
                break;
            }
            let d = step.duration_nanos();
            while self.stack.last().is_some_and(|&(_, top)| top <= d) {
                self.stack.pop();
            }
            self.stack.push((e, d));
            while let Some(&(last, first, q)) = self.ranges.get(next).filter(|r| r.0 == e) {
                debug_assert!(first <= last);
                let at = self.stack.partition_point(|&(i, _)| i < first);
                self.longest[q] = self.stack[at].1;
                next += 1;
            }
        }
    }
}

impl Collector {
    /// A collector for an engine with `capacity` (its blocks are the
    /// denominator of KV usage; see also [`Collector::fits_tokens`]).
    pub fn new(capacity: &KvBudget, options: CollectorOptions) -> Collector {
        Collector {
            options,
            num_blocks: capacity.num_blocks,
            fits_tokens: capacity.admissible_tokens(),
            at_risk: BTreeMap::new(),
            spec: None,
            per_class: None,
            kv_loaded: Vec::new(),
            lora_loads: Vec::new(),
            requests: Vec::new(),
            base: 0,
            summary_only: false,
            ended_prefix: 0,
            totals: fold::Totals::default(),
            itl: Histogram::new(),
            itl_run: histogram::Run::default(),
            step_ns: Histogram::new(),
            step_run: histogram::Run::default(),
            steps: Vec::new(),
            step_count: 0,
            batch_sum: 0,
            batch_max: 0,
            token_sum: 0,
            kv_peak: 0,
            kv_weighted: 0,
            busy_ns: 0,
            preemptions: 0,
            prefix_queried: 0,
            prefix_hit: 0,
            stretch_buf: StretchBuf::default(),
        }
    }

    /// Reports each of `classes` too (the result's `classes`); a request's
    /// class is found from its id ([`crate::workload::classes`]).
    pub fn classes(mut self, classes: Option<crate::workload::classes::Classes>) -> Collector {
        self.per_class = classes.map(|classes| {
            let n = classes.len();
            Box::new(PerClass {
                classes,
                arrived: vec![0; n],
                totals: (0..n).map(|_| fold::Totals::default()).collect(),
                itl: (0..n).map(|_| Histogram::new()).collect(),
                preemptions: vec![0; n],
            })
        });
        self
    }

    /// Keeps no record of a request once it has ended: the summary is the
    /// same, [`RunOutput::requests`] holds only requests still in flight.
    pub fn summary_only(mut self) -> Collector {
        self.summary_only = true;
        self
    }

    pub fn options(&self) -> CollectorOptions {
        self.options
    }

    /// Whether it drops a request's record when the request ends.
    pub fn is_summary_only(&self) -> bool {
        self.summary_only
    }

    /// [`Collector::summary_only`] if `summary`.
    pub fn summary_only_if(self, summary: bool) -> Collector {
        match summary {
            true => self.summary_only(),
            false => self,
        }
    }

    /// Room for `n` records at once when every record is kept (`llmsim
    /// run --requests-csv`), where doubling would leave up to half again
    /// unused at the end (about 1 GB at 10 million requests). Pages not
    /// yet written cost no memory, so a count the run does not reach
    /// costs nothing.
    pub fn reserve_records(mut self, n: usize) -> Collector {
        if !self.summary_only {
            self.requests.reserve_exact(n);
        }
        self
    }

    /// The record of request `id`, which ids index directly (from `base`).
    #[inline]
    fn rec(&mut self, id: RequestId) -> Option<&mut RequestRecord> {
        let i = id.checked_sub(self.base)?;
        self.requests.get_mut(i as usize)
    }

    /// The records kept: every request's, unless [`Collector::summary_only`].
    pub fn requests(&self) -> &[RequestRecord] {
        &self.requests
    }

    /// Requests over `tokens` (prompt + output) might be rejected after
    /// their first tokens: with several engines, the smallest one's
    /// [`KvBudget::admissible_tokens`].
    pub fn fits_tokens(mut self, tokens: u64) -> Collector {
        self.fits_tokens = tokens;
        self
    }

    /// Request `id` ended with `status`: its figures join the totals (once).
    fn end(&mut self, id: RequestId, status: Status) {
        let class = self.rec(id).map_or(0, |r| usize::from(r.class));
        if let Some(gaps) = self.at_risk.remove(&id)
            && status == Status::Finished
        {
            for gap in gaps {
                self.itl_add(gap, 1);
                if let Some(pc) = &mut self.per_class {
                    pc.itl[class].record(gap);
                }
            }
        }
        let Some(r) = self.rec(id) else { return };
        if r.status != Status::InFlight {
            r.status = status;
            return;
        }
        r.status = status;
        let i = (id - self.base) as usize;
        self.totals.fold(&self.requests[i]);
        if let Some(pc) = &mut self.per_class {
            pc.totals[class].fold(&self.requests[i]);
        }
        if self.summary_only {
            while self.ended_prefix < self.requests.len() && self.requests[self.ended_prefix].status != Status::InFlight
            {
                self.ended_prefix += 1;
            }
            if self.ended_prefix >= DROP_AT && self.ended_prefix * 2 >= self.requests.len() {
                self.requests.drain(..self.ended_prefix);
                self.base += self.ended_prefix as u64;
                self.ended_prefix = 0;
            }
        }
    }

    /// `n` ITL gaps of `gap_ns` each.
    #[inline]
    fn itl_add(&mut self, gap_ns: u64, n: u64) {
        self.itl_run.add(&mut self.itl, gap_ns, n);
    }

    /// ITL so far, the pending run of gaps included.
    fn itl(&self) -> std::borrow::Cow<'_, Histogram> {
        self.itl_run.with(&self.itl)
    }

    /// The summary over everything seen so far.
    pub fn finish(self, scenario: &Scenario) -> RunOutput {
        let mut result = self.summarize(&scenario.name, scenario.workload.seed, &scenario.capacity);
        result.deployment = result::DeploymentOut::of(scenario);
        if scenario.prefix_caching() {
            result.prefix_cache = Some(self.prefix_cache());
        }
        // With `speculative:` the block is there even before any draft is
        // verified (its counters at 0), so its keys do not come and go.
        if let Some(sp) = &scenario.speculative {
            let mut per_pos = result.speculative.take().map_or_else(Vec::new, |o| o.num_accepted_tokens_per_pos);
            per_pos.resize(per_pos.len().max(sp.num_speculative_tokens as usize), 0);
            let (drafts, tokens) = self.spec.as_ref().map_or((0, 0), |t| (t.drafts, t.draft_tokens));
            result.speculative = Some(result::SpeculativeOut::from_counts(drafts, tokens, per_pos));
        }
        if let (Some(o), Some(core)) = (&scenario.model.kv_cache.offload, scenario.offload_tiers()) {
            let queried = self.prefix_queried;
            let tiers = (o.tiers().into_iter().zip(&core.tiers).enumerate())
                .map(|(i, ((name, _), t))| {
                    let loaded = self.kv_loaded.get(i).copied().unwrap_or(0);
                    let bs = u64::from(scenario.capacity.block_size.max(1));
                    OffloadTierOut {
                        tier: name.to_string(),
                        capacity_blocks: t.blocks,
                        loaded_tokens: loaded,
                        hit_rate: if queried > 0 { loaded as f64 / queried as f64 } else { 0.0 },
                        load_s: (loaded / bs) as f64 * t.block_s,
                    }
                })
                .collect();
            result.offload = Some(tiers);
        }
        if let Some(l) = &scenario.lora {
            let core = l.core(&scenario.hardware, scenario.efficiency.compute, scenario.efficiency.memory);
            let loads: u64 = self.lora_loads.iter().sum();
            let load_s = (self.lora_loads.iter().zip(&core.load_s)).map(|(&n, s)| n as f64 * s).sum();
            result.lora = Some(result::LoraOut {
                adapters: l.adapters.len() as u64,
                max_loras: l.max_loras,
                loads,
                load_s,
                slot_bytes_per_gpu: l.slot_bytes_per_gpu(),
            });
        }
        let requests = match self.summary_only {
            false => self.requests,
            true => self.requests.into_iter().filter(|r| r.status == Status::InFlight).collect(),
        };
        RunOutput { result, requests, steps: self.steps, placement: None, windows: Vec::new() }
    }

    /// The sum over steps of KV blocks used times the step's duration
    /// (block-nanoseconds), and the steps' total duration (nanoseconds):
    /// `kv.mean_usage` is their ratio over the blocks.
    pub fn kv_time(&self) -> (u128, u128) {
        (self.kv_weighted, self.busy_ns)
    }

    /// Prefix-cache totals over every admission so far.
    pub fn prefix_cache(&self) -> PrefixCacheOut {
        let (queried, hit) = (self.prefix_queried, self.prefix_hit);
        PrefixCacheOut {
            queried_tokens: queried,
            hit_tokens: hit,
            hit_rate: if queried > 0 { hit as f64 / queried as f64 } else { 0.0 },
        }
    }

    pub fn summarize(&self, name: &str, seed: u64, cap: &llmsim_core::engine::KvBudget) -> RunResult {
        // The ended requests are in the totals; those still in flight
        // count in the total, the first arrival and the last token only.
        let mut t = fold::Totals {
            first_arrival: self.totals.first_arrival,
            last_token: self.totals.last_token,
            ..fold::Totals::default()
        };
        self.requests.iter().filter(|r| r.status == Status::InFlight).for_each(|r| t.see_times(r));
        let total = self.base + self.requests.len() as u64;
        let done = &self.totals;
        let (rejected_ctx, rejected_kv) = (done.rejected_ctx, done.rejected_kv);
        let (input_tokens, output_tokens) = (done.input_tokens, done.output_tokens);
        let duration_s = match (t.first_arrival, t.last_token) {
            (Some(a), Some(b)) => b.nanos_since(a) as f64 / 1e9,
            _ => 0.0,
        };
        let per_s = |x: u64| if duration_s > 0.0 { x as f64 / duration_s } else { 0.0 };
        let steps = self.step_count.max(1) as f64;
        RunResult {
            schema_version: SCHEMA_VERSION,
            scenario: name.to_string(),
            seed,
            capacity: CapacityOut {
                num_blocks: cap.num_blocks,
                block_size: cap.block_size,
                kv_tokens: cap.kv_tokens,
                watermark_blocks: cap.watermark_blocks,
            },
            requests: RequestsOut {
                total,
                completed: done.completed,
                rejected: rejected_ctx + rejected_kv,
                rejected_context_length: rejected_ctx,
                rejected_kv_capacity: rejected_kv,
                aborted: done.aborted,
                input_tokens,
                output_tokens,
            },
            throughput: ThroughputOut {
                duration_s,
                requests_per_s: per_s(done.completed),
                input_tokens_per_s: per_s(input_tokens),
                output_tokens_per_s: per_s(output_tokens),
                total_tokens_per_s: per_s(input_tokens + output_tokens),
            },
            ttft_ms: done.ttft.stats(),
            itl_ms: Stats::from_histogram(&self.itl()),
            tpot_ms: done.tpot.stats(),
            e2e_ms: done.e2e.stats(),
            queue_ms: done.queue.stats(),
            steps: StepsOut {
                count: self.step_count,
                mean_batch_size: self.batch_sum as f64 / steps,
                max_batch_size: self.batch_max,
                mean_tokens: self.token_sum as f64 / steps,
                duration_ms: Stats::from_histogram(&self.step_run.with(&self.step_ns)),
            },
            kv: KvOut {
                peak_blocks: self.kv_peak,
                peak_usage: f64::from(self.kv_peak) / f64::from(self.num_blocks.max(1)),
                mean_usage: if self.busy_ns > 0 {
                    self.kv_weighted as f64 / self.busy_ns as f64 / f64::from(self.num_blocks.max(1))
                } else {
                    0.0
                },
            },
            preemptions: self.preemptions,
            deployment: None,
            prefix_cache: None,
            router: None,
            gpus: None,
            replicas: None,
            imbalance: None,
            over_time: None,
            pools: None,
            kv_transfer_ms: None,
            speculative: self
                .spec
                .as_ref()
                .map(|s| result::SpeculativeOut::from_counts(s.drafts, s.draft_tokens, s.accepted_per_pos.clone())),
            classes: self.per_class.as_ref().map(|pc| pc.summarize(duration_s)),
            offload: None,
            lora: None,
        }
    }
}

impl Observer for Collector {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        debug_assert_eq!(id, self.base + self.requests.len() as u64, "ids must be 0, 1, 2, ...");
        let mut record = RequestRecord::new(id, at, prompt, output);
        if let Some(pc) = &mut self.per_class {
            let k = pc.classes.class_of(id);
            pc.arrived[k] += 1;
            record.class = k as u8;
        }
        self.requests.push(record);
        if u64::from(prompt) + u64::from(output) > self.fits_tokens {
            self.at_risk.insert(id, Vec::new());
        }
    }

    fn scheduled(&mut self, id: RequestId, at: SimTime, _tokens: u32, _computed: u32) {
        if let Some(r) = self.rec(id) {
            r.first_scheduled.get_or_insert(at);
        }
    }

    fn preempted(&mut self, id: RequestId, _at: SimTime) {
        self.preemptions += 1;
        let Some(r) = self.rec(id) else { return };
        r.preemptions += 1;
        let class = usize::from(r.class);
        if let Some(pc) = &mut self.per_class {
            pc.preemptions[class] += 1;
        }
    }

    fn lora_loaded(&mut self, adapter: u32, _at: SimTime) {
        let a = adapter as usize;
        if self.lora_loads.len() <= a {
            self.lora_loads.resize(a + 1, 0);
        }
        self.lora_loads[a] += 1;
    }
    fn kv_loaded(&mut self, _id: RequestId, _at: SimTime, tier: u32, tokens: u32) {
        let t = tier as usize;
        if self.kv_loaded.len() <= t {
            self.kv_loaded.resize(t + 1, 0);
        }
        self.kv_loaded[t] += u64::from(tokens);
    }

    fn speculated(&mut self, _id: RequestId, _at: SimTime, drafted: u32, accepted: u32) {
        self.spec.get_or_insert_with(SpecTotals::default).add(drafted, accepted);
    }

    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        let Some(r) = self.rec(id) else { return };
        let class = usize::from(r.class);
        if let TokenGap::Next { gap_ns } = r.add_token(at, index) {
            match self.at_risk.get_mut(&id) {
                Some(gaps) => gaps.push(gap_ns),
                None => {
                    self.itl_add(gap_ns, 1);
                    if let Some(pc) = &mut self.per_class {
                        pc.itl[class].record(gap_ns);
                    }
                }
            }
        }
    }

    /// The stretch's figures in O(B log B + k log k): each request's first
    /// gap is its own (a joiner's first token gives its TTFT), the later
    /// ones are the durations of the steps it takes part in, which every
    /// request in them shares.
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        if self.per_class.is_some() {
            // Each request's gaps go to its class: the events one by one.
            return llmsim_core::engine::events::replay_stretch(self, s);
        }
        let (Some(first), k) = (s.steps.first(), s.steps.len()) else { return };
        // A request decoding without a token seen here (a collector that
        // joined late): the events one by one.
        // So does one with a request that might yet be rejected (its gaps
        // are kept apart until it ends).
        let risky = |c: &Collector| {
            s.arrivals.iter().any(|a| u64::from(a.prompt) + u64::from(a.output) > c.fits_tokens)
                || (!c.at_risk.is_empty()
                    && (s.requests.iter().any(|(id, _, _)| c.at_risk.contains_key(id))
                        || s.joins.iter().any(|j| c.at_risk.contains_key(&j.id))))
        };
        if s.requests.iter().any(|&(id, _, _)| self.rec(id).is_some_and(|r| r.last_token.is_none())) || risky(self) {
            llmsim_core::engine::events::replay_stretch(self, s);
            return;
        }
        let mut buf = std::mem::take(&mut self.stretch_buf);
        let running = s.requests.len();
        // later_max[j]: the longest of steps 1..=j (0 for j = 0).
        buf.later_max.clear();
        buf.later_max.push(0);
        let mut longest = 0;
        buf.later_max.extend(s.steps[1..].iter().map(|step| {
            longest = longest.max(step.duration_nanos());
            longest
        }));
        // present[j]: requests with a gap ending in step j (j >= 1), as
        // differences from step to step.
        buf.present.clear();
        buf.present.resize(k + 1, 0);
        for (&(id, _, g), &(n, _)) in s.requests.iter().zip(s.spans) {
            buf.present[1] += 1;
            buf.present[n as usize] -= 1;
            let Some(r) = self.rec(id) else { continue };
            let Some(prev) = r.last_token else { continue };
            let gap = first.end.nanos_since(prev);
            r.max_gap_ns = r.max_gap_ns.max(gap).max(buf.later_max[n as usize - 1]);
            r.last_token = Some(s.steps[n as usize - 1].end);
            r.tokens = g + n;
            self.itl_add(gap, 1);
        }
        for a in s.arrivals {
            self.arrived(a.id, a.arrival, a.prompt, a.output);
        }
        if !s.joins.is_empty() {
            buf.ranges.clear();
            let spans = s.joins.iter().zip(&s.spans[running..]).enumerate();
            let later = spans.filter(|&(_, (_, &(n, _)))| n >= 2);
            buf.ranges.extend(later.map(|(q, (j, &(n, _)))| ((j.step + n - 1) as usize, j.step as usize + 1, q)));
            buf.range_maxima(s.steps, s.joins.len());
        }
        for (q, (j, &(n, _))) in s.joins.iter().zip(&s.spans[running..]).enumerate() {
            let (a, n) = (j.step as usize, n as usize);
            if let Some(hit) = j.prefix_hit {
                self.prefix_lookup(j.id, s.steps[a].start, j.prompt, hit);
            }
            let Some(r) = self.rec(j.id) else { continue };
            // (A request preempted in its prefill was scheduled before.)
            r.first_scheduled.get_or_insert(s.steps[a].start);
            r.add_token(s.steps[a].end, 1);
            if n >= 2 {
                // Its later gaps: steps a + 1 ..= a + n - 1.
                r.max_gap_ns = buf.longest[q];
                r.last_token = Some(s.steps[a + n - 1].end);
                r.tokens = n as u32;
                buf.present[a + 1] += 1;
                buf.present[a + n] -= 1;
            }
        }
        // Each step's duration is the gap of every request with a gap
        // ending in it (from the second step on), and a step duration:
        // its bucket is found once for both histograms. A stretch's steps
        // grow longer from one to the next (their KV grows), so they
        // seldom share a bucket: they go straight into the histograms,
        // not through the runs (the same counts and sums either way).
        self.itl_run.flush(&mut self.itl);
        self.step_run.flush(&mut self.step_ns);
        let mut present = 0i64;
        for (j, step) in s.steps.iter().enumerate() {
            let d = step.duration_nanos();
            let i = histogram::index(d);
            if j > 0 {
                present += buf.present[j];
                self.itl.record_at(i, d, present as u64);
            }
            self.step_ns.record_at(i, d, 1);
            self.step_sums(step, d);
        }
        // Finishes in the order the steps one by one send them: by step,
        // then in running order (the joiners after the running requests).
        buf.ended.clear();
        let last = |i: usize, n: u32| match i.checked_sub(running) {
            None => n,
            Some(q) => s.joins[q].step + n,
        };
        let ended = (s.spans.iter().enumerate()).filter(|&(_, &(_, finished))| finished);
        buf.ended.extend(ended.map(|(i, &(n, _))| (last(i, n), i)));
        buf.ended.sort_unstable();
        for &(_, i) in &buf.ended {
            let id = match i.checked_sub(running) {
                None => s.requests[i].0,
                Some(q) => s.joins[q].id,
            };
            self.end(id, Status::Finished);
        }
        self.stretch_buf = buf;
    }

    fn finished(&mut self, id: RequestId, _at: SimTime) {
        self.end(id, Status::Finished);
    }

    fn rejected(&mut self, id: RequestId, _at: SimTime, reason: RejectReason) {
        self.end(id, Status::Rejected(reason));
    }

    fn aborted(&mut self, id: RequestId, _at: SimTime) {
        self.end(id, Status::Aborted);
    }

    fn prefix_lookup(&mut self, id: RequestId, _at: SimTime, queried: u32, hit: u32) {
        self.prefix_queried += u64::from(queried);
        self.prefix_hit += u64::from(hit);
        if let Some(r) = self.rec(id) {
            r.cached_tokens.get_or_insert(hit);
        }
    }

    fn step(&mut self, step: &StepRecord) {
        let d = step.duration_nanos();
        self.step_run.add(&mut self.step_ns, d, 1);
        self.step_sums(step, d);
    }
}

impl Collector {
    /// [`Observer::step`] but for the step-duration histogram (`d` is the
    /// step's duration).
    #[inline]
    fn step_sums(&mut self, step: &StepRecord, d: u64) {
        self.step_count += 1;
        self.batch_sum += u64::from(step.batch_size);
        self.batch_max = self.batch_max.max(step.batch_size);
        self.token_sum += u64::from(step.tokens);
        self.kv_peak = self.kv_peak.max(step.kv_blocks_used);
        self.kv_weighted += u128::from(step.kv_blocks_used) * u128::from(d);
        self.busy_ns += u128::from(d);
        if self.options.keep_steps {
            self.steps.push(step.clone());
        }
    }
}

/// Where every request and step ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// By request id: its replica, `None` if it was never routed
    /// (rejected for its length on arrival).
    pub requests: Vec<Option<u32>>,
    /// The replica of every step the collector kept, in the same order
    /// (empty unless steps are kept). With pools, prefill replicas are
    /// `0..decode_base` and decode replica `d` is `decode_base + d`.
    pub steps: Vec<u32>,
    /// With pools only: by request id, its decode replica (in the decode
    /// pool, from 0), `None` if it never reached one.
    pub decode: Vec<Option<u32>>,
    /// With pools only: the prefill pool's replica count.
    pub decode_base: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verify step's tokens share one instant: one ITL gap, as `vllm
    /// bench serve` sees one chunk; the counters follow vLLM's.
    #[test]
    fn tokens_of_one_verify_step_are_one_gap_and_the_drafts_are_counted() {
        let cap = KvBudget {
            num_blocks: 100,
            block_size: 16,
            kv_tokens: 1600,
            watermark_blocks: 1,
            weight_bytes: 0.0,
            usable_bytes: 0.0,
            block_bytes: 0,
            overridden: true,
            window_blocks: 0,
        };
        let mut c = Collector::new(&cap, CollectorOptions::default());
        let ms = |x: u64| SimTime::from_nanos(x * 1_000_000);
        c.arrived(0, ms(0), 10, 6);
        c.scheduled(0, ms(0), 10, 0);
        c.token(0, ms(10), 1);
        // Step 2 (10 to 15 ms): 3 drafts, 2 kept: tokens 2, 3, 4 at 15 ms.
        c.speculated(0, ms(15), 3, 2);
        for i in 2..=4 {
            c.token(0, ms(15), i);
        }
        // Step 3 (15 to 21 ms): 3 drafts, none kept, but only 2 tokens owed.
        c.speculated(0, ms(21), 3, 0);
        c.token(0, ms(21), 5);
        // Step 4: 2 drafts (the cut by the budget), 1 kept: token 6.
        c.speculated(0, ms(27), 2, 1);
        c.token(0, ms(27), 6);
        c.finished(0, ms(27));
        let r = c.summarize("t", 0, &cap);
        // Gaps 5, 6 and 6 ms; TPOT (27 - 10) / 5 = 3.4 ms.
        assert_eq!(r.itl_ms.count, 3);
        assert!((r.itl_ms.max.unwrap() - 6.0).abs() < 0.01 && (r.itl_ms.p50.unwrap() - 6.0).abs() < 0.01);
        assert!((r.tpot_ms.mean.unwrap() - 3.4).abs() < 1e-9);
        let s = r.speculative.expect("counted");
        assert_eq!((s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens), (3, 8, 3));
        assert_eq!(s.num_accepted_tokens_per_pos, vec![2, 1, 0]);
        assert!((s.acceptance_rate - 3.0 / 8.0).abs() < 1e-12);
        assert!((s.mean_acceptance_length - 2.0).abs() < 1e-12);
        assert_eq!(s.acceptance_by_position, vec![2.0 / 3.0, 1.0 / 3.0, 0.0]);
    }
}
