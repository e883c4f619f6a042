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
mod lanes;
pub mod router;
mod submit;
#[cfg(test)]
mod tests;

use crate::metrics::{Collector, CollectorOptions, RunOutput};
use crate::run_driver::{Delayed, Progress, RunLimits, SimError, Stepping, Tap};
use crate::workload::{AnySource, Source};
use llmsim_core::engine::{Engine, Observer, RejectReason, RequestId, StepRecord, Stretch};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::{Cluster, Scenario};
use router::{Load, RouterState};
use submit::Content;

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

/// Runs a scenario with a `cluster:` and collects its metrics: the
/// aggregate figures over all requests (steps pooled over replicas, so
/// `kv.peak_blocks` is the largest replica's), plus `router`, `gpus`,
/// `replicas` and `imbalance`.
pub fn run<O: Observer>(
    scenario: &Scenario,
    cluster: &Cluster,
    options: CollectorOptions,
    summary: bool,
    extra: &mut O,
    progress: &mut dyn FnMut(&Progress),
    stepping: Stepping,
) -> Result<RunOutput, SimError> {
    let mut source = AnySource::new(scenario);
    run_from(scenario, cluster, &mut source, options, summary, extra, progress, stepping)
}

/// [`run`] with the requests of `source` (made for `scenario`; e.g. one
/// that keeps its rows for `llmsim trace`).
#[allow(clippy::too_many_arguments)]
pub fn run_from<O: Observer>(
    scenario: &Scenario,
    cluster: &Cluster,
    source: &mut AnySource,
    options: CollectorOptions,
    summary: bool,
    extra: &mut O,
    progress: &mut dyn FnMut(&Progress),
    stepping: Stepping,
) -> Result<RunOutput, SimError> {
    if let Some(d) = &cluster.disagg {
        return disagg::run(scenario, cluster, d, source, options, summary, extra, progress);
    }
    let cfg = scenario.engine_config();
    let mut engines: Vec<Engine> = (0..cluster.replicas).map(|_| Engine::new(cfg.clone())).collect();
    let mut collector = Collector::new(&scenario.capacity, options).summary_only_if(summary);
    let weight = cluster.overlap_weight.unwrap_or(llmsim_scenario::config::cluster::DEFAULT_OVERLAP_WEIGHT);
    let mut router = RouterState::new(cluster.router, weight, scenario.workload.seed);
    let delay_ns = llmsim_core::time::secs_to_nanos(scenario.latency.request_overhead_ms / 1e3);
    let stretches = stepping == Stepping::MacroSteps && !options.keep_steps && arrivals_are_fixed(scenario);
    let setup = Setup { limits: RunLimits::default(), delay_ns, keep_steps: options.keep_steps, stretches };
    let run =
        drive_cluster(&mut engines, &mut router, source, &mut (&mut collector, extra), &setup, |_, _, _| {}, progress)?;
    let mut out = collector.finish(scenario);
    let caching = scenario.model.kv_cache.prefix_caching;
    let r = &mut out.result;
    r.router = Some(cluster.router.as_str().to_string());
    r.gpus = Some(cluster.replicas * scenario.deployment.gpus());
    r.replicas = Some(run.replicas.iter().map(|s| s.out(caching)).collect());
    r.imbalance = Some(imbalance(&run.replicas));
    out.placement = Some(run.placement);
    Ok(out)
}

/// How a cluster run is driven.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Setup {
    pub limits: RunLimits,
    /// `latency.request_overhead_ms` in nanoseconds: a request is routed
    /// and joins its replica that long after it arrives.
    pub delay_ns: u64,
    /// Record the replica of every step ([`Placement::steps`], with
    /// [`CollectorOptions::keep_steps`]).
    pub keep_steps: bool,
    /// Take decode stretches, each replica up to the next arrival in
    /// turn (docs/clusters.md, "Speed"): the same results, but the
    /// replicas' events reach the observer replica by replica, not in
    /// time order. Only for a source whose arrivals do not follow from
    /// finishes ([`arrivals_are_fixed`]) and without `keep_steps` (the
    /// kept steps would be in that order); ignored otherwise.
    pub stretches: bool,
}

/// Whether the scenario's arrivals are fixed in advance (an open loop or
/// a trace, without sessions): no finish brings a request forward, so
/// replicas may run ahead of each other up to the next arrival.
pub fn arrivals_are_fixed(scenario: &Scenario) -> bool {
    let w = &scenario.workload;
    w.sessions.is_none() && !matches!(w.arrivals, llmsim_scenario::config::scenario::Arrivals::Closed { .. })
}

/// The global loop over `engines` (the replicas) and `source`.
/// `after_step` sees the replica that stepped, by index, after each step.
pub fn drive_cluster<S, O, F>(
    engines: &mut [Engine],
    router: &mut RouterState,
    source: &mut S,
    obs: &mut O,
    setup: &Setup,
    mut after_step: F,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ClusterRun, SimError>
where
    S: Source,
    O: Observer,
    F: FnMut(usize, &Engine, &mut O),
{
    if setup.stretches && !setup.keep_steps {
        return lanes::drive_lanes(engines, router, source, obs, setup, after_step, progress);
    }
    let tap = &mut Tap { inner: obs, done: Vec::new(), rejected: 0, delay_ns: setup.delay_ns };
    // A delay of 0 changes no time.
    let source = &mut Delayed { inner: source, ns: setup.delay_ns };
    let limits = &setup.limits;
    let mut at = Progress::default();
    let mut run = ClusterRun { replicas: vec![ReplicaCounts::default(); engines.len()], ..ClusterRun::default() };
    let mut outstanding = vec![0u64; engines.len()];
    let mut loads = vec![Load::default(); engines.len()];
    let Some(first) = engines.first() else { return Ok(run) };
    let context = first.config().context_length;
    let mut content = Content::new(first);
    // Each replica's next step start (`u64::MAX` for none), updated when
    // it steps or is handed a request (nothing else changes it).
    let mut next: Vec<u64> = engines.iter().map(next_nanos).collect();
    loop {
        let next_step = earliest_step(&next);
        if let Some(when) = source.peek()
            && next_step.is_none_or(|(t, _)| when <= t)
        {
            // An arrival no later than every replica's next step: route it.
            let Some(req) = submit::pop_arrival(source, when, &mut at, limits, tap)? else { continue };
            let placed = &mut run.placement.requests;
            if placed.len() <= req.id as usize {
                placed.resize(req.id as usize + 1, None);
            }
            if !submit::rejected_for_context(&req, context, tap, source, when) {
                content.read(&req, source);
                let r = submit::route(router, engines, &outstanding, &mut loads, &content, &req, source.session());
                placed[req.id as usize] = Some(r as u32);
                outstanding[r] += 1;
                let mut o = OnReplica { stats: &mut run.replicas[r], inner: &mut *tap, told: false };
                if content.submit(&mut engines[r], req, &mut o).is_err() {
                    outstanding[r] -= 1;
                    source.rejected(req.id, when);
                }
                next[r] = next_nanos(&engines[r]);
            }
            if let Some(why) = source.stalled() {
                return Err(SimError::Stalled { why, progress: at });
            }
            continue;
        }
        let Some((start, r)) = next_step else { break };
        at.now = start;
        if start > limits.max_time {
            return Err(SimError::TimeLimit { at: start, limit: limits.max_time, progress: at });
        }
        tap.inner.replica(r as u32);
        let mut o = OnReplica { stats: &mut run.replicas[r], inner: &mut *tap, told: false };
        let stepped = engines[r].step(&mut o).is_some();
        next[r] = next_nanos(&engines[r]);
        if stepped {
            submit::count_step(&mut at, limits, progress)?;
            if setup.keep_steps {
                run.placement.steps.push(r as u32);
            }
        }
        if engines[r].clock() > limits.max_time {
            return Err(SimError::TimeLimit { at: engines[r].clock(), limit: limits.max_time, progress: at });
        }
        after_step(r, &engines[r], tap.inner);
        for (id, when, finished) in tap.done.drain(..) {
            if let Some(Some(replica)) = run.placement.requests.get(id as usize) {
                outstanding[*replica as usize] -= 1;
            }
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

/// Counts one replica's events into its [`ReplicaCounts`] and forwards them.
pub(crate) struct OnReplica<'a, O> {
    stats: &'a mut ReplicaCounts,
    inner: &'a mut O,
    /// The request's arrival was told (and counted) when it was routed
    /// ahead ([`lanes`]): the engine's `arrived` events are dropped.
    told: bool,
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
        self.inner.arrived(id, at, prompt, output);
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.inner.scheduled(id, at, tokens, computed);
    }
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
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
        self.inner.preempted(id, at);
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.stats.output_tokens += 1;
        self.inner.token(id, at, index);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
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
        self.inner.step(step);
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.stats.prefix_queried += u64::from(queried);
        self.stats.prefix_hit += u64::from(hit);
        self.inner.prefix_lookup(id, at, queried, hit);
    }
}
