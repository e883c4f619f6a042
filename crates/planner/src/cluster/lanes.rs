//! Colocated replicas in decode stretches (docs/clusters.md, "Speed"), a
//! [`Topology`] of the run loop: the same results as the step-by-step
//! [`super::Replicas`], in far fewer calls.
//!
//! Between two routings the replicas do not interact: a replica's steps
//! depend on its own requests only, and, for a source whose arrivals do
//! not follow from finishes (an open loop or a trace without sessions),
//! no event of one replica changes another's. So the run goes in
//! rounds (each a [`Topology::event`] of the loop). Let `H` be the next arrival not routed yet. Each replica in
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

use super::router::RouterState;
use super::{ClusterRun, Fleet, OnReplica, ReplicaCounts};
use crate::run_driver::{Cx, Looping, Next, Place, SimError, Topology};
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

/// [`super::Replicas`] in decode stretches; see the module docs for when
/// it may be used.
pub struct Lanes<'a> {
    fleet: Fleet<'a>,
    /// Each replica's requests routed ahead and not yet handed over.
    lanes: Vec<VecDeque<Request>>,
    /// Routing ahead ([`AHEAD`] a replica a round), or one arrival a round.
    ahead: bool,
    /// A round is due: every replica runs up to the next arrival.
    round_due: bool,
    /// Arrivals left to route before the next round.
    budget: usize,
    /// The last round ran every replica to its end (no arrival was left).
    drained: bool,
}

impl<'a> Lanes<'a> {
    pub fn new(engines: &'a mut [Engine], router: &'a mut RouterState) -> Lanes<'a> {
        let ahead = engines.first().is_some_and(|e| !e.config().prefix_caching)
            && matches!(router.policy(), Router::RoundRobin | Router::Random);
        let lanes = vec![VecDeque::new(); engines.len()];
        let fleet = Fleet::new(engines, router);
        Lanes { fleet, lanes, ahead, round_due: true, budget: 0, drained: false }
    }
}

impl Topology for Lanes<'_> {
    type Out = ClusterRun;

    fn next<S: Source>(&mut self, source: &S) -> Next {
        if self.fleet.engines.is_empty() {
            return Next::Done;
        }
        match (self.round_due, source.peek()) {
            (true, _) | (false, None) if !self.drained => Next::Event(None),
            (false, Some(when)) => Next::Arrival(when),
            _ => Next::Done,
        }
    }

    fn arrive<S: Source, O: Observer>(&mut self, req: Request, cx: &mut Cx<'_, S, O>) -> Result<(), SimError> {
        self.budget = self.budget.saturating_sub(1);
        self.round_due = self.budget == 0;
        let Some(r) = self.fleet.route(&req, cx, self.ahead) else { return Ok(()) };
        if self.ahead {
            // Told now, in id order; the replica takes it when it is due.
            self.fleet.run.replicas[r].requests += 1;
            cx.run.tap.arrived(req.id, req.arrival, req.prompt, req.output);
            self.lanes[r].push_back(req);
        } else {
            self.fleet.hand_over(r, req, cx);
        }
        Ok(())
    }

    /// A round: every replica runs every step that starts before the next
    /// arrival not routed yet.
    fn event<S, O, F>(&mut self, cx: &mut Cx<'_, S, O>, after_step: &mut F) -> Result<(), SimError>
    where
        S: Source,
        O: Observer,
        F: FnMut(Place, &Engine, &mut O),
    {
        let horizon = cx.source.peek().unwrap_or(NEVER);
        let fleet = &mut self.fleet;
        for r in 0..fleet.engines.len() {
            let mut lane = Lane {
                queue: &mut self.lanes[r],
                horizon,
                outstanding: &mut fleet.outstanding,
                placement: &fleet.run.placement.requests,
                source: &mut *cx.source,
            };
            cx.run.tap.inner.replica(r as u32);
            advance(&mut fleet.engines[r], &mut lane, &mut fleet.run.replicas[r], &mut cx.run)?;
            after_step(Place { pool: None, replica: r }, &fleet.engines[r], cx.run.tap.inner);
        }
        self.drained = horizon == NEVER;
        self.round_due = false;
        self.budget = if self.ahead { AHEAD * fleet.engines.len() } else { 1 };
        Ok(())
    }

    fn finish(self) -> ClusterRun {
        self.fleet.run
    }
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
    run: &mut Looping<'_, O>,
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
        run.start_at(start)?;
        let mut o = OnReplica::colocated(&mut *stats, &mut run.tap, true);
        // Every request of the lane due by the step's start joins it.
        while lane.queue.front().is_some_and(|q| q.arrival <= start) {
            let Some(req) = lane.queue.pop_front() else { break };
            if engine.submit(req, &mut o).is_err() {
                lane.ended(req.id, req.arrival, false);
            }
        }
        let limits = &run.setup.limits;
        let max_steps = limits.max_steps.saturating_sub(run.at.steps).min(STRETCH_STEPS);
        let stretch = engine.decode_stretch_admitting(limits.max_time, max_steps, lane, &mut o);
        if stretch > 0 {
            run.count_stretch(stretch);
        } else if engine.step(&mut o).is_some() {
            run.count_step()?;
        }
        run.check_clock(engine.clock())?;
        for (id, when, finished) in run.tap.done.drain(..) {
            lane.ended(id, when, finished);
        }
        if let Some(why) = lane.source.stalled() {
            return Err(SimError::Stalled { why, progress: run.at });
        }
    }
}
