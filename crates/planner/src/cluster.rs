//! Replicas behind a router (docs/clusters.md): one global
//! discrete-event loop over every replica's steps and the arrivals.
//!
//! Each replica is an independent [`Engine`] of the scenario's model,
//! hardware and parallelism. The loop always does the earliest thing next:
//! the step with the earliest start (the lowest replica index on ties), or
//! the next arrival if it comes no later than that step. So, **what the
//! router sees** at an arrival at `t`: every replica has run every step
//! that starts strictly before `t`, end effects included (even a step that
//! ends after `t`: a deliberate, deterministic lookahead); a step starting
//! exactly at `t` runs after the routing and can include the request.
//!
//! Closed loops and sessions work as with one engine: a request's end is
//! reported to the source right after the step that ends it, so its user's
//! next request is known before any later event. Context-length rejections
//! happen before routing and take no round-robin turn.
//!
//! With one replica the loop makes exactly the calls the single-engine
//! driver ([`crate::sim`]) makes, in the same order, so every latency is
//! the same (a test checks it). The work per event is one pass over the
//! replicas: finding the earliest step and, at an arrival, the router's
//! view of every replica.
//!
//! That is the step-by-step loop (`--exact`). By default, when arrivals
//! are fixed in advance, `lanes.rs` runs the same rules in decode
//! stretches, replica by replica up to the next arrival, with the same
//! results (docs/clusters.md, "Speed").

// Plain data the results carry; they live with the metrics so metrics
// need not import the cluster.
pub use crate::metrics::Placement;
pub use crate::metrics::result::ReplicaOut;
pub mod disagg;
pub mod hpa;
pub mod in_flight;
mod lanes;
pub mod router;
pub mod scaled;
mod submit;
#[cfg(test)]
pub(crate) mod tests;
pub mod timeline;

use crate::intake::Content;
use crate::metrics::Collector;
use crate::run_driver::{Cx, Next, Place, SimError, Topology};
use crate::workload::Source;
pub use lanes::Lanes;
use llmsim_core::engine::{Engine, Observer, RejectReason, Request, RequestId, StepRecord, Stretch};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::Scenario;
use router::{Load, RouterState};

/// What one replica did, for the result's `replicas` list.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// Requests routed to it.
    pub requests: u64,
    /// Tokens it released.
    pub output_tokens: u64,
    pub peak_kv_blocks: u32,
    pub preemptions: u64,
    pub steps: u64,
    /// Prefix-cache tokens queried and found there.
    pub prefix_queried: u64,
    pub prefix_hit: u64,
}

/// What a cluster run adds to a single engine's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterRun {
    pub replicas: Vec<ReplicaCounts>,
    pub placement: Placement,
}

impl ReplicaCounts {
    pub fn out(&self, prefix_caching: bool) -> ReplicaOut {
        let rate = match self.prefix_queried {
            0 => 0.0,
            q => self.prefix_hit as f64 / q as f64,
        };
        ReplicaOut {
            requests: self.requests,
            output_tokens: self.output_tokens,
            peak_kv_blocks: self.peak_kv_blocks,
            preemptions: self.preemptions,
            steps: self.steps,
            prefix_hit_rate: prefix_caching.then_some(rate),
        }
    }
}

/// Max over mean of requests per replica (1 when nothing was routed).
pub fn imbalance(replicas: &[ReplicaCounts]) -> f64 {
    let total: u64 = replicas.iter().map(|r| r.requests).sum();
    let max = replicas.iter().map(|r| r.requests).max().unwrap_or(0);
    match total {
        0 => 1.0,
        _ => max as f64 * replicas.len() as f64 / total as f64,
    }
}

/// Whether the scenario's arrivals are fixed in advance (an open loop or
/// a trace, without sessions): no finish brings a request forward, so
/// replicas may run ahead of each other up to the next arrival
/// ([`Lanes`]).
pub fn arrivals_are_fixed(scenario: &Scenario) -> bool {
    let w = &scenario.workload;
    w.sessions.is_none() && !matches!(w.arrivals, llmsim_scenario::config::scenario::Arrivals::Closed { .. })
}

/// The replicas and their router, and what a run keeps of them: what
/// [`Replicas`] and [`Lanes`] share.
pub(crate) struct Fleet<'a> {
    pub(crate) engines: &'a mut [Engine],
    router: &'a mut RouterState,
    pub(crate) run: ClusterRun,
    /// Requests routed to each replica and not ended.
    pub(crate) outstanding: Vec<u64>,
    loads: Vec<Load>,
    /// `None` without replicas.
    content: Option<Content>,
}

impl<'a> Fleet<'a> {
    fn new(engines: &'a mut [Engine], router: &'a mut RouterState) -> Fleet<'a> {
        let n = engines.len();
        Fleet {
            run: ClusterRun { replicas: vec![ReplicaCounts::default(); n], ..ClusterRun::default() },
            outstanding: vec![0; n],
            loads: vec![Load::default(); n],
            content: engines.first().map(Content::new),
            engines,
            router,
        }
    }

    fn is_empty(&self) -> bool {
        self.content.is_none()
    }

    /// Routes `req`, just taken from the source: its replica, or `None`
    /// when it is over the context and rejected before routing (it takes
    /// no router turn). `blind`: the router reads no replica state (only
    /// their number), so none is gathered.
    pub(crate) fn route<S: Source, O: Observer>(
        &mut self,
        req: &Request,
        cx: &mut Cx<'_, S, O>,
        blind: bool,
    ) -> Option<usize> {
        let content = self.content.as_mut()?;
        let placed = &mut self.run.placement.requests;
        if placed.len() <= req.id as usize {
            placed.resize(req.id as usize + 1, None);
        }
        let context = self.engines[0].config().context_length;
        if submit::rejected_for_context(req, context, &mut cx.run.tap, cx.source, cx.run.at.now) {
            return None;
        }
        let r = if blind {
            self.router.route(&submit::arrival(content, req, None), &self.loads)
        } else {
            content.read(req, &*cx.source);
            let (engines, outstanding) = (&*self.engines, &self.outstanding);
            submit::route(self.router, engines, outstanding, &mut self.loads, content, req, cx.source.session())
        };
        placed[req.id as usize] = Some(r as u32);
        self.outstanding[r] += 1;
        Some(r)
    }

    /// Hands `req` (the request routed last) to replica `r`.
    pub(crate) fn hand_over<S: Source, O: Observer>(&mut self, r: usize, req: Request, cx: &mut Cx<'_, S, O>) {
        let Some(content) = &self.content else { return };
        let mut o = OnReplica::colocated(&mut self.run.replicas[r], &mut cx.run.tap, false);
        if content.submit(&mut self.engines[r], req, &mut o).is_err() {
            self.outstanding[r] -= 1;
            cx.source.rejected(req.id, cx.run.at.now);
        }
    }

    /// Request `id` ended.
    pub(crate) fn ended(&mut self, id: RequestId) {
        if let Some(Some(replica)) = self.run.placement.requests.get(id as usize) {
            self.outstanding[*replica as usize] -= 1;
        }
    }
}

/// Replicas behind a router, step by step ([`Topology`]; see the module
/// docs): the earliest step runs next, an arrival first if it comes no
/// later.
pub struct Replicas<'a> {
    fleet: Fleet<'a>,
    /// Each replica's next step start (`u64::MAX` for none), updated when
    /// it steps or is handed a request (nothing else changes it).
    next: Vec<u64>,
    /// The replica whose step [`Topology::next`] announced.
    stepping: usize,
}

impl<'a> Replicas<'a> {
    pub fn new(engines: &'a mut [Engine], router: &'a mut RouterState) -> Replicas<'a> {
        let next = engines.iter().map(next_nanos).collect();
        Replicas { fleet: Fleet::new(engines, router), next, stepping: 0 }
    }
}

impl Topology for Replicas<'_> {
    type Out = ClusterRun;

    fn next<S: Source>(&mut self, source: &S) -> Next {
        if self.fleet.is_empty() {
            return Next::Done;
        }
        let next_step = earliest_step(&self.next);
        match (source.peek(), next_step) {
            // An arrival no later than every replica's next step: route it.
            (Some(when), None) => Next::Arrival(when),
            (Some(when), Some((t, _))) if when <= t => Next::Arrival(when),
            (_, Some((t, r))) => {
                self.stepping = r;
                Next::Event(Some(t))
            }
            (None, None) => Next::Done,
        }
    }

    fn arrive<S: Source, O: Observer>(&mut self, req: Request, cx: &mut Cx<'_, S, O>) -> Result<(), SimError> {
        if let Some(r) = self.fleet.route(&req, cx, false) {
            self.fleet.hand_over(r, req, cx);
            self.next[r] = next_nanos(&self.fleet.engines[r]);
        }
        Ok(())
    }

    fn event<S, O, F>(&mut self, cx: &mut Cx<'_, S, O>, after_step: &mut F) -> Result<(), SimError>
    where
        S: Source,
        O: Observer,
        F: FnMut(Place, &Engine, &mut O),
    {
        let (r, fleet) = (self.stepping, &mut self.fleet);
        cx.run.tap.inner.replica(r as u32);
        let mut o = OnReplica::colocated(&mut fleet.run.replicas[r], &mut cx.run.tap, false);
        let stepped = fleet.engines[r].step(&mut o).is_some();
        self.next[r] = next_nanos(&fleet.engines[r]);
        if stepped {
            cx.run.count_step()?;
            if cx.run.setup.keep_steps {
                fleet.run.placement.steps.push(r as u32);
            }
        }
        cx.run.check_clock(fleet.engines[r].clock())?;
        after_step(Place { pool: None, replica: r }, &fleet.engines[r], cx.run.tap.inner);
        Ok(())
    }

    fn ended(&mut self, id: RequestId) {
        self.fleet.ended(id);
    }

    fn finish(self) -> ClusterRun {
        self.fleet.run
    }
}

/// When `engine`'s next step starts, in nanoseconds (`u64::MAX` for none).
fn next_nanos(engine: &Engine) -> u64 {
    engine.next_step_at().map_or(u64::MAX, SimTime::as_nanos)
}

/// The earliest next step over the replicas' next step starts: its start
/// and replica, the lowest index on ties.
fn earliest_step(next: &[u64]) -> Option<(SimTime, usize)> {
    let mut best = (u64::MAX, 0);
    for (r, &t) in next.iter().enumerate() {
        if t < best.0 {
            best = (t, r);
        }
    }
    (best.0 != u64::MAX).then(|| (SimTime::from_nanos(best.0), best.1))
}

/// What a disaggregated loop remembers of a request between its pools.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Known {
    pub(crate) prompt: u32,
    pub(crate) output: u32,
    pub(crate) session: Option<u64>,
}

/// Requests whose first token a prefill step released, and when.
pub(crate) type Handed = Vec<(RequestId, SimTime)>;

/// Counts one replica's events into its [`ReplicaCounts`] (and, in a
/// disaggregated cluster, its pool's collector) and forwards them.
pub(crate) struct OnReplica<'a, O> {
    pub(crate) stats: &'a mut ReplicaCounts,
    pub(crate) inner: &'a mut O,
    /// The request's arrival was told (and counted) when it was routed
    /// ahead ([`lanes`]): the engine's `arrived` events are dropped.
    pub(crate) told: bool,
    /// The pool's own collector (steps and preemptions), in a
    /// disaggregated cluster.
    pub(crate) pool: Option<&'a mut Collector>,
    /// On a prefill replica: every request's real lengths, and the
    /// requests handed over. An arrival is reported with its real output
    /// length and the end of a request with more tokens to come is a
    /// hand-off, not a finish.
    pub(crate) prefill: Option<(&'a [Known], &'a mut Handed)>,
    /// An autoscaled fleet's per-window gatherer.
    pub(crate) watch: Option<&'a mut timeline::Watch>,
}

impl<'a, O> OnReplica<'a, O> {
    /// A colocated replica's (`told`: see the field).
    pub(crate) fn colocated(stats: &'a mut ReplicaCounts, inner: &'a mut O, told: bool) -> OnReplica<'a, O> {
        OnReplica { stats, inner, told, pool: None, prefill: None, watch: None }
    }
}

impl<O: Observer> Observer for OnReplica<'_, O> {
    fn replica(&mut self, replica: u32) {
        self.inner.replica(replica);
    }
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        if self.told {
            return;
        }
        self.stats.requests += 1;
        if let Some(w) = &mut self.watch {
            w.arrived(id, at);
        }
        let output = match &self.prefill {
            Some((known, _)) => known.get(id as usize).map_or(output, |k| k.output),
            None => output,
        };
        self.inner.arrived(id, at, prompt, output);
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.inner.scheduled(id, at, tokens, computed);
    }
    fn speculated(&mut self, id: RequestId, at: SimTime, drafted: u32, accepted: u32) {
        self.inner.speculated(id, at, drafted, accepted);
    }
    fn kv_loaded(&mut self, id: RequestId, at: SimTime, tier: u32, tokens: u32) {
        self.inner.kv_loaded(id, at, tier, tokens);
    }
    fn lora_loaded(&mut self, adapter: u32, at: SimTime) {
        self.inner.lora_loaded(adapter, at);
    }
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        if self.pool.is_some() || self.prefill.is_some() {
            // (Pools step one by one; were it otherwise, their events
            // would go through the hooks above.)
            return llmsim_core::engine::events::replay_stretch(self, s);
        }
        // What the steps one by one would count: a token per step a
        // request takes part in, every step and its blocks.
        self.stats.steps += s.steps.len() as u64;
        let peak = s.steps.iter().map(|st| st.kv_blocks_used).max().unwrap_or(0);
        self.stats.peak_kv_blocks = self.stats.peak_kv_blocks.max(peak);
        self.stats.output_tokens += s.spans.iter().map(|&(n, _)| u64::from(n)).sum::<u64>();
        // The joiners' prefix-cache lookups (the replay's `prefix_lookup`
        // events): the whole prompt queried, `hit` tokens found.
        for j in s.joins {
            if let Some(hit) = j.prefix_hit {
                self.stats.prefix_queried += u64::from(j.prompt);
                self.stats.prefix_hit += u64::from(hit);
            }
        }
        if self.told {
            self.inner.decode_stretch(&Stretch { arrivals: &[], ..*s });
        } else {
            self.stats.requests += s.arrivals.len() as u64;
            self.inner.decode_stretch(s);
        }
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.stats.preemptions += 1;
        if let Some(pool) = &mut self.pool {
            pool.preempted(id, at);
        }
        self.inner.preempted(id, at);
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.stats.output_tokens += 1;
        if let Some(w) = &mut self.watch {
            w.token(id, at, index);
        }
        self.inner.token(id, at, index);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        if let Some((known, handed)) = &mut self.prefill
            && known.get(id as usize).is_some_and(|k| k.output > 1)
        {
            handed.push((id, at));
            return;
        }
        if let Some(w) = &mut self.watch {
            w.finished(id, at);
        }
        self.inner.finished(id, at);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        if let Some(w) = &mut self.watch {
            w.rejected(id, at);
        }
        self.inner.rejected(id, at, reason);
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.inner.aborted(id, at);
    }
    fn step(&mut self, step: &StepRecord) {
        self.stats.steps += 1;
        self.stats.peak_kv_blocks = self.stats.peak_kv_blocks.max(step.kv_blocks_used);
        if let Some(pool) = &mut self.pool {
            pool.step(step);
        }
        self.inner.step(step);
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.stats.prefix_queried += u64::from(queried);
        self.stats.prefix_hit += u64::from(hit);
        self.inner.prefix_lookup(id, at, queried, hit);
    }
}
