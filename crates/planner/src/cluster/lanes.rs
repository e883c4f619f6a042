//! The colocated cluster loop with decode stretches (docs/clusters.md,
//! "Speed"): the same results as the step-by-step loop of
//! [`super::drive_cluster`], in far fewer calls.
//!
//! Between two routings the replicas do not interact: a replica's steps
//! depend on its own requests only, and, for a source whose arrivals do
//! not follow from finishes (an open loop or a trace without sessions),
//! no event of one replica changes another's. So the loop goes in
//! rounds. Let `H` be the next arrival not routed yet. Each replica in
//! turn runs every step that starts before `H`, in decode stretches
//! ([`Engine::decode_stretch_admitting`]) where it can and through
//! [`Engine::step`] where it cannot, exactly as the single-engine driver
//! ([`crate::sim`]) runs one engine up to its next arrival. Then the
//! arrivals are routed:
//!
//! - **Ahead** (routers that read no replica state, `round_robin` and
//!   `random`, without prefix caching): up to [`AHEAD`] per replica are
//!   routed at once, each into its replica's lane (a queue of requests
//!   routed but not yet due). A replica's stretches admit its lane's
//!   requests as they come due, as the single engine's stretches admit
//!   arrivals, and stop before a step starting at or after `H`.
//! - **Caught up** (every other router, or prefix caching): one arrival is
//!   routed when every replica has run every step starting before it, and
//!   handed to its replica at once, as in the step-by-step loop; the
//!   stretches between two arrivals stop before the next one.
//!
//! What differs from the step-by-step loop is only the order in which the
//! replicas' events reach the observer: one replica's steps up to `H`,
//! then the next one's, not all replicas' steps in time order. Every
//! figure the collector makes is a sum of integers, a maximum or a sorted
//! list, so the results are the same to the bit (the exactness test
//! `cluster_exact` compares them). Arrivals reach the observer in id
//! order, when they are routed. Where the order shows (kept steps, steps
//! and events listed as they happen for `--steps-csv`, `--plot` and
//! `--trace-events` ([`Stepping::MacroStepsInOrder`](crate::run_driver::Stepping)),
//! a closed loop or sessions whose next arrival follows from a finish)
//! the caller takes the step-by-step loop instead.

use std::collections::VecDeque;

use super::router::{Arrival, Load, RouterState};
use super::submit::{self, Content};
use super::{ClusterRun, OnReplica, ReplicaCounts, Setup};
use crate::run_driver::{Delayed, PROGRESS_EVERY, Progress, RunLimits, SimError, Tap};
use crate::workload::Source;
use llmsim_core::engine::stretch::{Arrivals, Due};
use llmsim_core::engine::{Engine, Observer, Request, RequestId};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::Router;

/// Requests routed ahead per replica in one round.
const AHEAD: usize = 64;

/// Steps one stretch takes at most (as the single-engine driver; a
/// lane's stretches are mostly shorter, ended by routing rounds).
const STRETCH_STEPS: u64 = 1024;

const NEVER: SimTime = SimTime::from_nanos(u64::MAX);

/// [`super::drive_cluster`] with decode stretches; see the module docs
/// for when it may be used.
pub(super) fn drive_lanes<S, O, F>(
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
    let tap = &mut Tap { inner: obs, done: Vec::new(), rejected: 0, delay_ns: setup.delay_ns };
    let source = &mut Delayed { inner: source, ns: setup.delay_ns };
    let limits = &setup.limits;
    let mut at = Progress::default();
    let n = engines.len();
    let mut run = ClusterRun { replicas: vec![ReplicaCounts::default(); n], ..ClusterRun::default() };
    let mut outstanding = vec![0u64; n];
    let mut loads = vec![Load::default(); n];
    let Some(first) = engines.first() else { return Ok(run) };
    let context = first.config().context_length;
    let block_size = u64::from(first.config().capacity.block_size.max(1));
    let ahead = matches!(router.policy(), Router::RoundRobin | Router::Random) && !first.config().prefix_caching;
    let mut content = Content::new(first);
    let mut lanes: Vec<VecDeque<Request>> = vec![VecDeque::new(); n];
    loop {
        // Every replica runs every step that starts before the next
        // arrival not routed yet.
        let horizon = source.peek().unwrap_or(NEVER);
        for r in 0..n {
            let mut lane = Lane {
                queue: &mut lanes[r],
                horizon,
                outstanding: &mut outstanding,
                placement: &run.placement.requests,
                source: &mut *source,
            };
            tap.inner.replica(r as u32);
            advance(&mut engines[r], &mut lane, &mut run.replicas[r], tap, limits, &mut at, progress)?;
            after_step(r, &engines[r], tap.inner);
        }
        if source.peek().is_none() {
            break;
        }
        let count = if ahead { AHEAD * n } else { 1 };
        for _ in 0..count {
            let Some(when) = source.peek() else { break };
            let Some(req) = submit::pop_arrival(source, when, &mut at, limits, tap)? else { break };
            let placed = &mut run.placement.requests;
            if placed.len() <= req.id as usize {
                placed.resize(req.id as usize + 1, None);
            }
            if !submit::rejected_for_context(&req, context, tap, source, when) {
                let r = if ahead {
                    // The router reads no replica state: only their number.
                    let arrival = Arrival { prompt_blocks: u64::from(req.prompt).div_ceil(block_size), session: None };
                    router.route(&arrival, &loads)
                } else {
                    content.read(&req, source);
                    submit::route(router, engines, &outstanding, &mut loads, &content, &req, source.session())
                };
                placed[req.id as usize] = Some(r as u32);
                outstanding[r] += 1;
                if ahead {
                    // Told now, in id order; the replica takes it when it is due.
                    run.replicas[r].requests += 1;
                    tap.arrived(req.id, req.arrival, req.prompt, req.output);
                    lanes[r].push_back(req);
                } else {
                    let mut o = OnReplica { stats: &mut run.replicas[r], inner: &mut *tap, told: false };
                    if content.submit(&mut engines[r], req, &mut o).is_err() {
                        outstanding[r] -= 1;
                        source.rejected(req.id, when);
                    }
                }
            }
            if let Some(why) = source.stalled() {
                return Err(SimError::Stalled { why, progress: at });
            }
        }
    }
    Ok(run)
}

/// One replica's view of the arrivals during a round: its lane (requests
/// routed to it and not yet handed over, in arrival order) and the
/// horizon, the next arrival not routed yet, which may come to any
/// replica.
struct Lane<'a, S> {
    queue: &'a mut VecDeque<Request>,
    horizon: SimTime,
    outstanding: &'a mut [u64],
    placement: &'a [Option<u32>],
    source: &'a mut S,
}

impl<S: Source> Lane<'_, S> {
    /// Request `id` ended (finished, or rejected when `finished` is false).
    fn ended(&mut self, id: RequestId, when: SimTime, finished: bool) {
        if let Some(Some(replica)) = self.placement.get(id as usize) {
            self.outstanding[*replica as usize] -= 1;
        }
        match finished {
            true => self.source.done(id, when),
            false => self.source.rejected(id, when),
        }
    }
}

impl<S: Source> Arrivals for Lane<'_, S> {
    fn next_at(&mut self) -> Option<SimTime> {
        Some(self.queue.front().map_or(self.horizon, |q| q.arrival.min(self.horizon)))
    }

    fn due(&mut self, at: SimTime, k: usize) -> Due {
        if at >= self.horizon {
            // The next arrival may come here and join this step.
            return Due::Refused;
        }
        match self.queue.get(k) {
            Some(req) if req.arrival <= at => Due::Request(*req),
            _ => Due::None,
        }
    }

    fn take(&mut self, k: usize) {
        self.queue.drain(..k);
    }

    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.ended(id, at, true);
    }
}

/// Runs replica `engine` through every step that starts
/// before the lane's horizon, as the single-engine driver runs an engine
/// up to its next arrival.
fn advance<S: Source, O: Observer>(
    engine: &mut Engine,
    lane: &mut Lane<'_, S>,
    stats: &mut ReplicaCounts,
    tap: &mut Tap<'_, O>,
    limits: &RunLimits,
    at: &mut Progress,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(), SimError> {
    loop {
        let start = match engine.next_step_at() {
            Some(t) => t,
            None => match lane.queue.front() {
                Some(req) => req.arrival.max(engine.clock()),
                None => return Ok(()),
            },
        };
        if start >= lane.horizon {
            return Ok(());
        }
        at.now = start;
        if start > limits.max_time {
            return Err(SimError::TimeLimit { at: start, limit: limits.max_time, progress: *at });
        }
        let mut o = OnReplica { stats: &mut *stats, inner: &mut *tap, told: true };
        // Every request of the lane due by the step's start joins it.
        while lane.queue.front().is_some_and(|q| q.arrival <= start) {
            let Some(req) = lane.queue.pop_front() else { break };
            if engine.submit(req, &mut o).is_err() {
                lane.ended(req.id, req.arrival, false);
            }
        }
        let max_steps = limits.max_steps.saturating_sub(at.steps).min(STRETCH_STEPS);
        let stretch = engine.decode_stretch_admitting(limits.max_time, max_steps, lane, &mut o);
        if stretch > 0 {
            at.steps += stretch;
            if at.steps / PROGRESS_EVERY != (at.steps - stretch) / PROGRESS_EVERY {
                progress(at);
            }
        } else if engine.step(&mut o).is_some() {
            submit::count_step(at, limits, progress)?;
        }
        if engine.clock() > limits.max_time {
            return Err(SimError::TimeLimit { at: engine.clock(), limit: limits.max_time, progress: *at });
        }
        for (id, when, finished) in tap.done.drain(..) {
            lane.ended(id, when, finished);
        }
        if let Some(why) = lane.source.stalled() {
            return Err(SimError::Stalled { why, progress: *at });
        }
    }
}
