//! Prefill/decode disaggregation (docs/clusters.md): a prefill pool and a
//! decode pool of replicas, each behind its own router, and the KV
//! transfer between them, in one global discrete-event loop.
//!
//! 1. An arrival is routed to a prefill replica and runs there as if its
//!    output were 1 token: its first token is released at that step's end
//!    (its TTFT), and its blocks are freed there. A request with `N = 1`
//!    is then finished.
//! 2. Its prompt's KV (`P * kv_bytes_per_token` bytes, the whole model's)
//!    moves in `latency_ms / 1000 + bytes / (bandwidth_gbps * 1e9)` s;
//!    transfers do not contend.
//! 3. When it ends, the request is routed to a decode replica
//!    ([`Engine::submit_transferred`]): `g = 1`, `c = P` at admission,
//!    which needs `ceil((P+1)/bs)` blocks beside the watermark; it decodes
//!    until `g = N`, and a preemption there recomputes `P + g` tokens
//!    locally. The gap between its first and second tokens (transfer and
//!    decode queue) is part of its ITL, as a client sees it.
//!
//! The loop always does the earliest thing next; at equal times an
//! arrival first, then a transfer's end (the earliest-started first), then
//! the step with the earliest start (prefill replicas before decode ones,
//! then the lowest index). So each router sees what the colocated
//! cluster's does (crate::cluster): every step that starts strictly
//! before the event, end effects included.
//!
//! Decode replicas run without prefix caching (the KV arrives by
//! transfer; no lookup is made there), so `prefix_cache` figures are the
//! prefill pool's.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::router::{Arrival, Load, RouterState};
use super::submit::{self, Content};
use super::{ReplicaCounts, imbalance};
use crate::metrics::result::{KvOut, PoolOut, PoolsOut};
use crate::metrics::{Collector, CollectorOptions, RunOutput, Stats};
use crate::run_driver::{Delayed, Progress, RunLimits, SimError, Tap};
use crate::workload::{AnySource, Source};
use llmsim_core::engine::{Engine, Observer, RejectReason, Request, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::cluster::{DEFAULT_OVERLAP_WEIGHT, Disagg, KvTransfer, Pool};
use llmsim_scenario::config::{Cluster, Scenario};

/// Which pool a replica is in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Prefill,
    Decode,
}

/// How a disaggregated run is driven.
#[derive(Clone, Debug, PartialEq)]
pub struct DisaggSetup {
    pub limits: RunLimits,
    /// `latency.request_overhead_ms` in nanoseconds (paid once, before prefill).
    pub delay_ns: u64,
    /// Record the replica of every step (`Placement::steps`, with
    /// `CollectorOptions::keep_steps`).
    pub keep_steps: bool,
    pub kv_transfer: KvTransfer,
    /// The whole model's KV bytes per token.
    pub kv_bytes_per_token: u64,
}

/// What a disaggregated run adds to a single engine's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DisaggRun {
    pub prefill: Vec<ReplicaCounts>,
    pub decode: Vec<ReplicaCounts>,
    pub placement: super::Placement,
    /// Every transfer's duration, in nanoseconds, in the order they started.
    pub transfers_ns: Vec<u64>,
}

/// The two pools' engines and routers.
pub struct Pools<'a> {
    pub prefill: &'a mut [Engine],
    pub decode: &'a mut [Engine],
    pub prefill_router: &'a mut RouterState,
    pub decode_router: &'a mut RouterState,
}

/// Each pool's steps and preemptions, measured by a collector of its own.
pub struct PoolCollectors {
    pub prefill: Collector,
    pub decode: Collector,
}

/// Runs a scenario whose cluster has pools and collects its metrics: the
/// aggregate figures over all requests (steps pooled over both pools,
/// `capacity` a prefill replica's, `kv.peak_blocks` the largest
/// replica's), plus `gpus`, `replicas` (prefill ones, then decode ones),
/// `imbalance` (the larger pool's), `pools` and `kv_transfer_ms`.
#[allow(clippy::too_many_arguments)]
pub fn run<O: Observer>(
    scenario: &Scenario,
    cluster: &Cluster,
    d: &Disagg,
    source: &mut AnySource,
    options: CollectorOptions,
    summary: bool,
    extra: &mut O,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunOutput, SimError> {
    let mut prefill = engines(&d.prefill, true);
    let mut decode = engines(&d.decode, false);
    let seed = scenario.workload.seed;
    let mut prefill_router = router(&d.prefill, seed, 0);
    let mut decode_router = router(&d.decode, seed, 1);
    let first = &d.prefill.scenario;
    // A request may be rejected in either pool: the smaller one decides.
    let fits =
        crate::metrics::fits_tokens(&first.capacity).min(crate::metrics::fits_tokens(&d.decode.scenario.capacity));
    let mut collector = Collector::new(&first.capacity, options).summary_only_if(summary).fits_tokens(fits);
    let mut per_pool = PoolCollectors {
        prefill: Collector::new(&first.capacity, CollectorOptions::default()).summary_only_if(summary),
        decode: Collector::new(&d.decode.scenario.capacity, CollectorOptions::default()).summary_only_if(summary),
    };
    let setup = DisaggSetup {
        limits: RunLimits::default(),
        delay_ns: llmsim_core::time::secs_to_nanos(scenario.latency.request_overhead_ms / 1e3),
        keep_steps: options.keep_steps,
        kv_transfer: d.kv_transfer.clone(),
        kv_bytes_per_token: first.deployment.kv_bytes_per_token,
    };
    let pools = Pools {
        prefill: &mut prefill,
        decode: &mut decode,
        prefill_router: &mut prefill_router,
        decode_router: &mut decode_router,
    };
    let obs = &mut (&mut collector, extra);
    let run = drive_disagg(pools, source, obs, &mut per_pool, &setup, |_, _, _, _| {}, progress)?;
    // `capacity` is one replica's of the first pool.
    let mut out = collector.finish(first);
    let caching = scenario.model.kv_cache.prefix_caching;
    let r = &mut out.result;
    r.gpus = Some(cluster.gpus(scenario));
    let outs = run.prefill.iter().map(|s| s.out(caching)).chain(run.decode.iter().map(|s| s.out(false)));
    r.replicas = Some(outs.collect());
    let (pi, di) = (imbalance(&run.prefill), imbalance(&run.decode));
    r.imbalance = Some(pi.max(di));
    let pools = PoolsOut {
        prefill: pool_out(&d.prefill, &per_pool.prefill, &run.prefill, pi),
        decode: pool_out(&d.decode, &per_pool.decode, &run.decode, di),
    };
    if pools.prefill.capacity.num_blocks != pools.decode.capacity.num_blocks {
        r.kv = pooled_kv(r.kv.peak_blocks, [&per_pool.prefill, &per_pool.decode], [&pools.prefill, &pools.decode]);
    }
    r.pools = Some(pools);
    r.kv_transfer_ms = Some(Stats::from_nanos(run.transfers_ns.clone()));
    out.placement = Some(run.placement);
    Ok(out)
}

/// The aggregate KV figures of pools whose replicas differ in blocks:
/// each step's usage is over its own replica's blocks, so `peak_usage` is
/// the higher pool's and `mean_usage` the duration-weighted mean of every
/// step's usage (`peak_blocks` stays the largest replica's count). Pools
/// of equal blocks keep the single collector's figures, to the bit.
fn pooled_kv(peak_blocks: u32, c: [&Collector; 2], p: [&PoolOut; 2]) -> KvOut {
    let (mut usage_ns, mut busy_ns) = (0.0, 0u128);
    for (c, p) in c.iter().zip(p) {
        let (weighted, busy) = c.kv_time();
        usage_ns += weighted as f64 / f64::from(p.capacity.num_blocks.max(1));
        busy_ns += busy;
    }
    KvOut {
        peak_blocks,
        peak_usage: p[0].kv.peak_usage.max(p[1].kv.peak_usage),
        mean_usage: if busy_ns > 0 { usage_ns / busy_ns as f64 } else { 0.0 },
    }
}

/// A pool's engines; the decode pool's without prefix caching.
fn engines(pool: &Pool, prefill: bool) -> Vec<Engine> {
    let mut cfg = pool.scenario.engine_config();
    cfg.prefix_caching &= prefill;
    (0..pool.replicas).map(|_| Engine::new(cfg.clone())).collect()
}

/// A pool's router; the decode pool's `random` draws from a seed of its own.
fn router(pool: &Pool, seed: u64, which: u64) -> RouterState {
    let weight = pool.overlap_weight.unwrap_or(DEFAULT_OVERLAP_WEIGHT);
    RouterState::new(pool.router, weight, seed.wrapping_add(which.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}

fn pool_out(pool: &Pool, c: &Collector, counts: &[ReplicaCounts], imbalance: f64) -> PoolOut {
    let s = &pool.scenario;
    let sum = c.summarize(&s.name, s.workload.seed, &s.capacity);
    PoolOut {
        replicas: pool.replicas,
        router: pool.router.as_str().to_string(),
        gpus: pool.gpus(),
        capacity: sum.capacity,
        requests: counts.iter().map(|x| x.requests).sum(),
        steps: sum.steps,
        kv: sum.kv,
        preemptions: sum.preemptions,
        imbalance,
    }
}

/// A transfer in flight: ends at `.0.0`; `.0.1` orders equal ends by start.
type Transfer = Reverse<(SimTime, u64, RequestId)>;

/// Each replica's next step start (prefill replicas, then decode ones),
/// `u64::MAX` for none: kept as the replicas change (a replica's next step
/// changes only when it steps or is handed a request), so finding the
/// earliest is one pass over a small array, not over the engines.
struct NextSteps {
    at: Vec<u64>,
    decode_base: usize,
}

impl NextSteps {
    fn new(prefill: &[Engine], decode: &[Engine]) -> NextSteps {
        let mut next = NextSteps { at: vec![u64::MAX; prefill.len() + decode.len()], decode_base: prefill.len() };
        (0..prefill.len()).for_each(|r| next.update(PoolKind::Prefill, r, &prefill[r]));
        (0..decode.len()).for_each(|r| next.update(PoolKind::Decode, r, &decode[r]));
        next
    }

    /// Replica `r` of pool `kind`, `engine`, changed.
    fn update(&mut self, kind: PoolKind, r: usize, engine: &Engine) {
        let i = if kind == PoolKind::Decode { self.decode_base + r } else { r };
        self.at[i] = engine.next_step_at().map_or(u64::MAX, SimTime::as_nanos);
    }

    /// The earliest next step over both pools: its start, pool and
    /// replica (prefill replicas before decode ones on ties, then the
    /// lowest index).
    fn earliest(&self) -> Option<(SimTime, PoolKind, usize)> {
        let mut best = (u64::MAX, 0);
        for (i, &t) in self.at.iter().enumerate() {
            if t < best.0 {
                best = (t, i);
            }
        }
        let (t, i) = best;
        if t == u64::MAX {
            return None;
        }
        Some(match i.checked_sub(self.decode_base) {
            None => (SimTime::from_nanos(t), PoolKind::Prefill, i),
            Some(r) => (SimTime::from_nanos(t), PoolKind::Decode, r),
        })
    }
}

/// What the loop remembers of a request between its pools.
#[derive(Copy, Clone, Debug, Default)]
struct Known {
    prompt: u32,
    output: u32,
    session: Option<u64>,
}

/// The global loop over both pools, the transfers and `source`.
/// `after_step` sees the pool and replica that stepped after each step.
pub fn drive_disagg<S, O, F>(
    pools: Pools<'_>,
    source: &mut S,
    obs: &mut O,
    per_pool: &mut PoolCollectors,
    setup: &DisaggSetup,
    mut after_step: F,
    progress: &mut dyn FnMut(&Progress),
) -> Result<DisaggRun, SimError>
where
    S: Source,
    O: Observer,
    F: FnMut(PoolKind, usize, &Engine, &mut O),
{
    let tap = &mut Tap { inner: obs, done: Vec::new(), rejected: 0, delay_ns: setup.delay_ns };
    // A delay of 0 changes no time.
    let source = &mut Delayed { inner: source, ns: setup.delay_ns };
    let Pools { prefill, decode, prefill_router, decode_router } = pools;
    let limits = &setup.limits;
    let mut at = Progress::default();
    let mut run = DisaggRun {
        prefill: vec![ReplicaCounts::default(); prefill.len()],
        decode: vec![ReplicaCounts::default(); decode.len()],
        ..DisaggRun::default()
    };
    run.placement.decode_base = Some(prefill.len() as u32);
    let (Some(first), Some(first_decode)) = (prefill.first(), decode.first()) else { return Ok(run) };
    let decode_block_size = u64::from(first_decode.config().capacity.block_size);
    let context = first.config().context_length;
    let mut content = Content::new(first);
    let mut outstanding = [vec![0u64; prefill.len()], vec![0u64; decode.len()]];
    let mut loads = vec![Load::default(); prefill.len().max(decode.len())];
    let mut known: Vec<Known> = Vec::new();
    let mut transfers: BinaryHeap<Transfer> = BinaryHeap::new();
    let mut handed: Handed = Vec::new();
    let mut next = NextSteps::new(prefill, decode);
    loop {
        let next_step = next.earliest();
        let next_transfer = transfers.peek().map(|Reverse((t, _, _))| *t);
        let next_other = match (next_step, next_transfer) {
            (Some((s, _, _)), Some(t)) => Some(s.min(t)),
            (s, t) => s.map(|x| x.0).or(t),
        };
        if let Some(when) = source.peek()
            && next_other.is_none_or(|t| when <= t)
        {
            // An arrival: route it to a prefill replica.
            let Some(req) = submit::pop_arrival(source, when, &mut at, limits, tap)? else { continue };
            let i = req.id as usize;
            if known.len() <= i {
                known.resize(i + 1, Known::default());
                run.placement.requests.resize(i + 1, None);
                run.placement.decode.resize(i + 1, None);
            }
            known[i] = Known { prompt: req.prompt, output: req.output, session: source.session() };
            if !submit::rejected_for_context(&req, context, tap, source, when) {
                content.read(&req, source);
                let r = submit::route(
                    prefill_router,
                    prefill,
                    &outstanding[0],
                    &mut loads,
                    &content,
                    &req,
                    known[i].session,
                );
                run.placement.requests[i] = Some(r as u32);
                outstanding[0][r] += 1;
                let mut o = on_prefill(&mut run.prefill[r], per_pool, tap, &known, &mut handed);
                // It runs there as if its output were 1 token.
                if content.submit(&mut prefill[r], Request { output: 1, ..req }, &mut o).is_err() {
                    outstanding[0][r] -= 1;
                    source.rejected(req.id, when);
                }
                next.update(PoolKind::Prefill, r, &prefill[r]);
            }
            if let Some(why) = source.stalled() {
                return Err(SimError::Stalled { why, progress: at });
            }
            continue;
        }
        if let Some(end) = next_transfer
            && next_step.is_none_or(|(s, _, _)| end <= s)
        {
            // A transfer ends: route the request to a decode replica.
            let Some(Reverse((end, _, id))) = transfers.pop() else { continue };
            at.now = end;
            let k = known[id as usize];
            for (r, e) in decode.iter().enumerate() {
                loads[r] = Load::of(e, outstanding[1][r], None);
            }
            let arrival =
                Arrival { prompt_blocks: u64::from(k.prompt).div_ceil(decode_block_size), session: k.session };
            let r = decode_router.route(&arrival, &loads[..decode.len()]);
            run.placement.decode[id as usize] = Some(r as u32);
            outstanding[1][r] += 1;
            run.decode[r].requests += 1;
            decode[r].submit_transferred(Request { id, arrival: end, prompt: k.prompt, output: k.output });
            next.update(PoolKind::Decode, r, &decode[r]);
            continue;
        }
        let Some((start, kind, r)) = next_step else { break };
        at.now = start;
        if start > limits.max_time {
            return Err(SimError::TimeLimit { at: start, limit: limits.max_time, progress: at });
        }
        let base = if kind == PoolKind::Decode { prefill.len() } else { 0 };
        tap.inner.replica((base + r) as u32);
        let (engine, stepped) = match kind {
            PoolKind::Prefill => {
                let mut o = on_prefill(&mut run.prefill[r], per_pool, tap, &known, &mut handed);
                let stepped = prefill[r].step(&mut o).is_some();
                (&prefill[r], stepped)
            }
            PoolKind::Decode => {
                let mut o =
                    OnPool { stats: &mut run.decode[r], pool: &mut per_pool.decode, inner: &mut *tap, prefill: None };
                let stepped = decode[r].step(&mut o).is_some();
                (&decode[r], stepped)
            }
        };
        next.update(kind, r, engine);
        if stepped {
            submit::count_step(&mut at, limits, progress)?;
            if setup.keep_steps {
                run.placement.steps.push((base + r) as u32);
            }
        }
        if engine.clock() > limits.max_time {
            return Err(SimError::TimeLimit { at: engine.clock(), limit: limits.max_time, progress: at });
        }
        after_step(kind, r, engine, tap.inner);
        // First tokens released (by a prefill step): their KV starts moving.
        if !handed.is_empty() {
            start_transfers(&mut handed, &mut outstanding[0][r], &known, setup, &mut run, &mut transfers, at)?;
        }
        let pool = kind as usize;
        for (id, when, finished) in tap.done.drain(..) {
            outstanding[pool][r] -= 1;
            match finished {
                true => source.done(id, when),
                false => source.rejected(id, when),
            }
        }
        if let Some(why) = source.stalled() {
            return Err(SimError::Stalled { why, progress: at });
        }
    }
    Ok(run)
}

/// Starts moving the KV of the requests `handed` over by a prefill replica
/// (their first tokens released), each over `setup.kv_transfer`; stops the
/// run when a transfer would end past its time limit.
fn start_transfers(
    handed: &mut Handed,
    outstanding: &mut u64,
    known: &[Known],
    setup: &DisaggSetup,
    run: &mut DisaggRun,
    transfers: &mut BinaryHeap<Transfer>,
    at: Progress,
) -> Result<(), SimError> {
    let limits = &setup.limits;
    for (id, when) in handed.drain(..) {
        *outstanding -= 1;
        let bytes = u64::from(known[id as usize].prompt) * setup.kv_bytes_per_token;
        // In seconds first: a link slow enough to saturate the clock
        // must not hand the request over at the end of time.
        let secs = setup.kv_transfer.secs(bytes);
        // (Never NaN: the bandwidth is validated above 0 and finite.)
        if secs >= limits.max_time.as_nanos().saturating_sub(when.as_nanos()) as f64 / 1e9 {
            let t = &setup.kv_transfer;
            let why = format!(
                "moving request {id}'s KV ({} bytes) over cluster.kv_transfer ({} GB/s + {} ms) would take {} \
                 s and end past the limit of {} s: the link is far too slow for this workload",
                llmsim_core::util::thousands(bytes),
                llmsim_core::util::short_float(t.bandwidth_gbps),
                llmsim_core::util::short_float(t.latency_ms),
                llmsim_core::util::short_float(secs),
                llmsim_core::util::thousands(limits.max_time.as_nanos() / 1_000_000_000),
            );
            return Err(SimError::Stalled { why, progress: Progress { now: when, ..at } });
        }
        let ns = llmsim_core::time::secs_to_nanos(secs);
        run.transfers_ns.push(ns);
        transfers.push(Reverse((when.plus_nanos(ns), run.transfers_ns.len() as u64, id)));
    }
    Ok(())
}

/// The observer of a prefill replica's submission or step.
fn on_prefill<'a, O>(
    stats: &'a mut ReplicaCounts,
    per_pool: &'a mut PoolCollectors,
    inner: &'a mut O,
    known: &'a [Known],
    handed: &'a mut Handed,
) -> OnPool<'a, O> {
    OnPool { stats, pool: &mut per_pool.prefill, inner, prefill: Some((known, handed)) }
}

/// Counts one replica's events into its [`ReplicaCounts`] and its pool's
/// collector, and forwards them. On a prefill replica (`prefill` set),
/// an arrival is reported with its real output length and the end of a
/// request with more tokens to come is a hand-off, not a finish.
struct OnPool<'a, O> {
    stats: &'a mut ReplicaCounts,
    pool: &'a mut Collector,
    inner: &'a mut O,
    prefill: Option<(&'a [Known], &'a mut Handed)>,
}

/// Requests whose first token a prefill step released, and when.
type Handed = Vec<(RequestId, SimTime)>;

impl<O: Observer> Observer for OnPool<'_, O> {
    fn replica(&mut self, replica: u32) {
        self.inner.replica(replica);
    }
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.stats.requests += 1;
        let output = match &self.prefill {
            Some((known, _)) => known.get(id as usize).map_or(output, |k| k.output),
            None => output,
        };
        self.inner.arrived(id, at, prompt, output);
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.inner.scheduled(id, at, tokens, computed);
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.stats.preemptions += 1;
        self.pool.preempted(id, at);
        self.inner.preempted(id, at);
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.stats.output_tokens += 1;
        self.inner.token(id, at, index);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        if let Some((known, handed)) = &mut self.prefill
            && known.get(id as usize).is_some_and(|k| k.output > 1)
        {
            handed.push((id, at));
            return;
        }
        self.inner.finished(id, at);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.inner.rejected(id, at, reason);
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.inner.aborted(id, at);
    }
    fn step(&mut self, step: &StepRecord) {
        self.stats.steps += 1;
        self.stats.peak_kv_blocks = self.stats.peak_kv_blocks.max(step.kv_blocks_used);
        self.pool.step(step);
        self.inner.step(step);
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.stats.prefix_queried += u64::from(queried);
        self.stats.prefix_hit += u64::from(hit);
        self.inner.prefix_lookup(id, at, queried, hit);
    }
}
