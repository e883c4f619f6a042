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
use super::submit;
use super::{Handed, Known, OnReplica, ReplicaCounts, imbalance};
use crate::intake::Content;
use crate::metrics::result::{KvOut, PoolOut, PoolsOut};
use crate::metrics::{Collector, RunOutput, Stats};
use crate::run_driver::{Cx, Next, Place, PoolKind, Progress, SimError, Topology};
use crate::workload::Source;
use llmsim_core::engine::{Engine, Observer, Request, RequestId};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::cluster::{DEFAULT_OVERLAP_WEIGHT, KvTransfer, Pool};

/// The KV transfer between the pools.
#[derive(Clone, Debug, PartialEq)]
pub struct KvLink {
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

/// Each pool's steps and preemptions, measured by a collector of its own.
pub struct PoolCollectors {
    pub prefill: Collector,
    pub decode: Collector,
}

/// Fills in what a disaggregated run adds to the aggregate result: `gpus`,
/// `replicas` (prefill ones, then decode ones), `imbalance` (the larger
/// pool's), `pools`, `kv_transfer_ms` and the placement (`capacity` is a
/// prefill replica's, `kv.peak_blocks` the largest replica's).
pub(crate) fn add_pools(
    out: &mut RunOutput,
    gpus: u32,
    caching: bool,
    pools: [&Pool; 2],
    run: DisaggRun,
    per_pool: &PoolCollectors,
) {
    let r = &mut out.result;
    r.gpus = Some(gpus);
    let outs = run.prefill.iter().map(|s| s.out(caching)).chain(run.decode.iter().map(|s| s.out(false)));
    r.replicas = Some(outs.collect());
    let (pi, di) = (imbalance(&run.prefill), imbalance(&run.decode));
    r.imbalance = Some(pi.max(di));
    let shown = PoolsOut {
        prefill: pool_out(pools[0], &per_pool.prefill, &run.prefill, pi),
        decode: pool_out(pools[1], &per_pool.decode, &run.decode, di),
    };
    if shown.prefill.capacity.num_blocks != shown.decode.capacity.num_blocks {
        r.kv = pooled_kv(r.kv.peak_blocks, [&per_pool.prefill, &per_pool.decode], [&shown.prefill, &shown.decode]);
    }
    r.pools = Some(shown);
    r.kv_transfer_ms = Some(Stats::from_nanos(run.transfers_ns.clone()));
    out.placement = Some(run.placement);
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
pub(crate) fn engines(pool: &Pool, prefill: bool) -> Vec<Engine> {
    let mut cfg = pool.scenario.engine_config();
    cfg.prefix_caching &= prefill;
    (0..pool.replicas).map(|_| Engine::new(cfg.clone())).collect()
}

/// A pool's router; the decode pool's `random` draws from a seed of its own.
pub(crate) fn router(pool: &Pool, seed: u64, which: u64) -> RouterState {
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

/// What [`Topology::next`] announced.
#[derive(Copy, Clone, Debug)]
enum Pending {
    Transfer,
    Step(PoolKind, usize),
}

/// The prefill and decode pools, their routers and the KV transfers
/// between them ([`Topology`]; see the module docs).
pub struct Pools<'a> {
    prefill: &'a mut [Engine],
    decode: &'a mut [Engine],
    prefill_router: &'a mut RouterState,
    decode_router: &'a mut RouterState,
    per_pool: &'a mut PoolCollectors,
    link: KvLink,
    run: DisaggRun,
    /// `None` without replicas in either pool.
    content: Option<Content>,
    decode_block_size: u64,
    outstanding: [Vec<u64>; 2],
    loads: Vec<Load>,
    known: Vec<Known>,
    transfers: BinaryHeap<Transfer>,
    handed: Handed,
    next: NextSteps,
    pending: Pending,
}

impl<'a> Pools<'a> {
    pub fn new(
        prefill: &'a mut [Engine],
        decode: &'a mut [Engine],
        routers: [&'a mut RouterState; 2],
        per_pool: &'a mut PoolCollectors,
        link: KvLink,
    ) -> Pools<'a> {
        let [prefill_router, decode_router] = routers;
        let mut run = DisaggRun {
            prefill: vec![ReplicaCounts::default(); prefill.len()],
            decode: vec![ReplicaCounts::default(); decode.len()],
            ..DisaggRun::default()
        };
        run.placement.decode_base = Some(prefill.len() as u32);
        let content = match (prefill.first(), decode.first()) {
            (Some(first), Some(_)) => Some(Content::new(first)),
            _ => None,
        };
        Pools {
            decode_block_size: decode.first().map_or(1, |d| u64::from(d.config().capacity.block_size)),
            outstanding: [vec![0; prefill.len()], vec![0; decode.len()]],
            loads: vec![Load::default(); prefill.len().max(decode.len())],
            next: NextSteps::new(prefill, decode),
            known: Vec::new(),
            transfers: BinaryHeap::new(),
            handed: Vec::new(),
            pending: Pending::Transfer,
            content,
            run,
            prefill,
            decode,
            prefill_router,
            decode_router,
            per_pool,
            link,
        }
    }

    /// A transfer ends: the request is routed to a decode replica.
    fn end_transfer(&mut self) {
        let Some(Reverse((end, _, id))) = self.transfers.pop() else { return };
        let k = self.known[id as usize];
        for (r, e) in self.decode.iter().enumerate() {
            self.loads[r] = Load::of(e, self.outstanding[1][r], None);
        }
        let arrival =
            Arrival { prompt_blocks: u64::from(k.prompt).div_ceil(self.decode_block_size), session: k.session };
        let r = self.decode_router.route(&arrival, &self.loads[..self.decode.len()]);
        self.run.placement.decode[id as usize] = Some(r as u32);
        self.outstanding[1][r] += 1;
        self.run.decode[r].requests += 1;
        self.decode[r].submit_transferred(Request::new(id, end, k.prompt, k.output));
        self.next.update(PoolKind::Decode, r, &self.decode[r]);
    }

    /// Starts moving the KV of the requests `handed` over by prefill replica
    /// `r` (their first tokens released), each over `cluster.kv_transfer`; stops the
    /// run when a transfer would end past its time limit.
    fn start_transfers(&mut self, r: usize, max_time: SimTime, at: Progress) -> Result<(), SimError> {
        let (known, link, run, transfers) = (&self.known, &self.link, &mut self.run, &mut self.transfers);
        for (id, when) in self.handed.drain(..) {
            self.outstanding[0][r] -= 1;
            let bytes = u64::from(known[id as usize].prompt) * link.kv_bytes_per_token;
            // In seconds first: a link slow enough to saturate the clock
            // must not hand the request over at the end of time.
            let secs = link.kv_transfer.secs(bytes);
            // (Never NaN: the bandwidth is validated above 0 and finite.)
            if secs >= max_time.as_nanos().saturating_sub(when.as_nanos()) as f64 / 1e9 {
                let t = &link.kv_transfer;
                let why = format!(
                    "moving request {id}'s KV ({} bytes) over cluster.kv_transfer ({} GB/s + {} ms) would take {} \
                     s and end past the limit of {} s: the link is far too slow for this workload",
                    llmsim_core::util::thousands(bytes),
                    llmsim_core::util::short_float(t.bandwidth_gbps),
                    llmsim_core::util::short_float(t.latency_ms),
                    llmsim_core::util::short_float(secs),
                    llmsim_core::util::thousands(max_time.as_nanos() / 1_000_000_000),
                );
                return Err(SimError::Stalled { why, progress: Progress { now: when, ..at } });
            }
            let ns = llmsim_core::time::secs_to_nanos(secs);
            run.transfers_ns.push(ns);
            transfers.push(Reverse((when.plus_nanos(ns), run.transfers_ns.len() as u64, id)));
        }
        Ok(())
    }
}

impl Topology for Pools<'_> {
    type Out = DisaggRun;

    fn next<S: Source>(&mut self, source: &S) -> Next {
        if self.content.is_none() {
            return Next::Done;
        }
        let next_step = self.next.earliest();
        let next_transfer = self.transfers.peek().map(|Reverse((t, _, _))| *t);
        let next_other = match (next_step, next_transfer) {
            (Some((s, _, _)), Some(t)) => Some(s.min(t)),
            (s, t) => s.map(|x| x.0).or(t),
        };
        if let Some(when) = source.peek()
            && next_other.is_none_or(|t| when <= t)
        {
            return Next::Arrival(when);
        }
        match (next_transfer, next_step) {
            (Some(end), s) if s.is_none_or(|(s, _, _)| end <= s) => {
                self.pending = Pending::Transfer;
                Next::Event(Some(end))
            }
            (_, Some((start, kind, r))) => {
                self.pending = Pending::Step(kind, r);
                Next::Event(Some(start))
            }
            _ => Next::Done,
        }
    }

    /// An arrival is routed to a prefill replica.
    fn arrive<S: Source, O: Observer>(&mut self, req: Request, cx: &mut Cx<'_, S, O>) -> Result<(), SimError> {
        let Some(content) = &mut self.content else { return Ok(()) };
        let when = cx.run.at.now;
        let i = req.id as usize;
        if self.known.len() <= i {
            self.known.resize(i + 1, Known::default());
            self.run.placement.requests.resize(i + 1, None);
            self.run.placement.decode.resize(i + 1, None);
        }
        self.known[i] = Known { prompt: req.prompt, output: req.output, session: cx.source.session() };
        let context = self.prefill[0].config().context_length;
        if submit::rejected_for_context(&req, context, &mut cx.run.tap, cx.source, when) {
            return Ok(());
        }
        content.read(&req, &*cx.source);
        let (engines, outstanding) = (&*self.prefill, &self.outstanding[0]);
        let session = self.known[i].session;
        let r = submit::route(self.prefill_router, engines, outstanding, &mut self.loads, content, &req, session);
        self.run.placement.requests[i] = Some(r as u32);
        self.outstanding[0][r] += 1;
        let mut o = on_prefill(&mut self.run.prefill[r], self.per_pool, &mut cx.run.tap, &self.known, &mut self.handed);
        // It runs there as if its output were 1 token.
        if content.submit(&mut self.prefill[r], Request { output: 1, ..req }, &mut o).is_err() {
            self.outstanding[0][r] -= 1;
            cx.source.rejected(req.id, when);
        }
        self.next.update(PoolKind::Prefill, r, &self.prefill[r]);
        Ok(())
    }

    fn event<S, O, F>(&mut self, cx: &mut Cx<'_, S, O>, after_step: &mut F) -> Result<(), SimError>
    where
        S: Source,
        O: Observer,
        F: FnMut(Place, &Engine, &mut O),
    {
        let (kind, r) = match self.pending {
            Pending::Transfer => {
                self.end_transfer();
                return Ok(());
            }
            Pending::Step(kind, r) => (kind, r),
        };
        let base = if kind == PoolKind::Decode { self.prefill.len() } else { 0 };
        let tap = &mut cx.run.tap;
        tap.inner.replica((base + r) as u32);
        let (engine, stepped) = match kind {
            PoolKind::Prefill => {
                let mut o = on_prefill(&mut self.run.prefill[r], self.per_pool, tap, &self.known, &mut self.handed);
                let stepped = self.prefill[r].step(&mut o).is_some();
                (&self.prefill[r], stepped)
            }
            PoolKind::Decode => {
                let (stats, pool) = (&mut self.run.decode[r], &mut self.per_pool.decode);
                let mut o = OnReplica { stats, inner: tap, told: false, pool: Some(pool), prefill: None, watch: None };
                let stepped = self.decode[r].step(&mut o).is_some();
                (&self.decode[r], stepped)
            }
        };
        self.next.update(kind, r, engine);
        if stepped {
            cx.run.count_step()?;
            if cx.run.setup.keep_steps {
                self.run.placement.steps.push((base + r) as u32);
            }
        }
        cx.run.check_clock(engine.clock())?;
        after_step(Place { pool: Some(kind), replica: r }, engine, cx.run.tap.inner);
        // First tokens released (by a prefill step): their KV starts moving.
        if !self.handed.is_empty() {
            self.start_transfers(r, cx.run.setup.limits.max_time, cx.run.at)?;
        }
        Ok(())
    }

    fn ended(&mut self, _id: RequestId) {
        if let Pending::Step(kind, r) = self.pending {
            self.outstanding[kind as usize][r] -= 1;
        }
    }

    fn finish(self) -> DisaggRun {
        self.run
    }
}

/// The observer of a prefill replica's submission or step.
fn on_prefill<'a, O>(
    stats: &'a mut ReplicaCounts,
    per_pool: &'a mut PoolCollectors,
    inner: &'a mut O,
    known: &'a [Known],
    handed: &'a mut Handed,
) -> OnReplica<'a, O> {
    OnReplica {
        stats,
        inner,
        told: false,
        pool: Some(&mut per_pool.prefill),
        prefill: Some((known, handed)),
        watch: None,
    }
}
