//! An autoscaled fleet (docs/clusters.md, "Autoscaling"), and any fleet
//! with `cluster.timeline`: replicas behind a router, step by step as
//! [`super::Replicas`], whose number changes as Kubernetes' HPA rule
//! ([`super::hpa`]) decides, every `period_s`.
//!
//! A replica is **off**, **starting** (asked for, loading its weights,
//! starting its engine, capturing its CUDA graphs: `cold_start`'s total),
//! **ready** (the router sees it) or **draining** (asked to go: it takes no
//! new request and leaves when its last one ends). A scale-up starts new
//! replicas, each a fresh engine (empty cache) in the lowest free slot; a
//! scale-down removes starting replicas first, the most recently asked
//! for first, then ready ones, the most recently ready first (Kubernetes'
//! ReplicaSet deletes not-ready pods first, then the newest). The
//! replicas ready at the start (`cluster.replicas`) are warm.
//!
//! **Order at one instant**: replicas becoming ready, a window's end, the
//! autoscaler's decision, then an arrival (so a replica ready at that
//! instant can take it, and a window ending then does not count it), then
//! the steps (so a step starting then can include it, as in
//! [`super::Replicas`]).
//! At a decision or a window's end, every replica has run every step that
//! starts strictly before it (the router's own view).
//!
//! The run ends when no arrival is left and no replica has a step to run;
//! windows and decisions go on through idle gaps before that.

use std::collections::VecDeque;

use super::hpa::{Hpa, Reading};
use super::router::{Arrival, Load, RouterState};
use super::timeline::{FleetState, Watch};
use super::{ClusterRun, OnReplica, ReplicaCounts, submit};
use crate::intake::Content;
use crate::run_driver::{Cx, Next, Place, SimError, Topology};
use crate::workload::Source;
use llmsim_core::engine::{Engine, EngineConfig, Observer, Request, RequestId};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::autoscale::Signal;

const NEVER: u64 = u64::MAX;

/// Most decisions one run's autoscaler makes (a decision every second for
/// 115 days); past it the run stops with an error instead of running on
/// through an idle gap of years.
pub const MAX_DECISIONS: u64 = 10_000_000;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    Off,
    Starting,
    Ready,
    Draining,
}

/// One slot of the fleet: a replica's engine and where it is in its life.
struct Slot {
    engine: Engine,
    phase: Phase,
    /// Its entry in [`Scaled::lives`].
    life: usize,
    /// When it was asked for (its GPUs count from then).
    since: u64,
    /// When it is (or was) ready.
    ready_at: u64,
}

pub use crate::metrics::over_time::ScaleEvent;

/// One replica's life in a slot, in nanoseconds (`None`: not yet, at the
/// run's end).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Life {
    pub slot: usize,
    pub asked: u64,
    pub ready: Option<u64>,
    /// When it was asked to go (it drains from then, or leaves at once).
    pub drain: Option<u64>,
    pub left: Option<u64>,
}

/// What an autoscaled run adds to a cluster's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaledRun {
    /// Every replica's life, in the order they were asked for.
    pub lives: Vec<Life>,
    pub cluster: ClusterRun,
    pub events: Vec<ScaleEvent>,
    pub rows: Vec<super::timeline::WindowRow>,
    /// Most replicas asked for at once (ready plus starting).
    pub peak: u32,
    pub gpu_hours: f64,
    /// When the run ended.
    pub end_s: f64,
}

/// The next own event of the topology.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Due {
    Ready,
    Window,
    Decide,
    Step(usize),
}

/// Autoscaled replicas behind a router ([`Topology`]; see the module docs).
pub struct Scaled<'a> {
    slots: Vec<Slot>,
    cfg: EngineConfig,
    router: &'a mut RouterState,
    run: ClusterRun,
    outstanding: Vec<u64>,
    loads: Vec<Load>,
    ready_mask: Vec<bool>,
    content: Content,
    hpa: Option<Hpa>,
    next_decision: u64,
    watch: Watch,
    /// Routing instants within the signal window (the `rate` signal).
    routed: VecDeque<u64>,
    gpus: u32,
    /// GPU-nanoseconds of replicas that have left.
    gpu_ns_done: u128,
    due: Due,
    events: Vec<ScaleEvent>,
    peak: u32,
    /// The latest instant the run reached.
    now: u64,
    lives: Vec<Life>,
    decisions: u64,
}

impl<'a> Scaled<'a> {
    /// `initial` warm replicas of `cfg` on `gpus` GPUs each; `hpa` the
    /// autoscaler (`None`: a fixed fleet with a timeline).
    pub fn new(
        cfg: EngineConfig,
        initial: u32,
        gpus: u32,
        router: &'a mut RouterState,
        hpa: Option<Hpa>,
        watch: Watch,
    ) -> Scaled<'a> {
        let slots: Vec<Slot> = (0..initial as usize)
            .map(|i| Slot { engine: Engine::new(cfg.clone()), phase: Phase::Ready, life: i, since: 0, ready_at: 0 })
            .collect();
        let lives =
            (0..initial as usize).map(|slot| Life { slot, asked: 0, ready: Some(0), ..Life::default() }).collect();
        let content = Content::new(&slots[0].engine);
        let n = slots.len();
        let next_decision = hpa.as_ref().map_or(NEVER, |h| nanos(h.config().period_s));
        Scaled {
            slots,
            cfg,
            router,
            run: ClusterRun { replicas: vec![ReplicaCounts::default(); n], ..ClusterRun::default() },
            outstanding: vec![0; n],
            loads: vec![Load::default(); n],
            ready_mask: vec![true; n],
            content,
            hpa,
            next_decision,
            watch,
            routed: VecDeque::new(),
            gpus,
            gpu_ns_done: 0,
            due: Due::Ready,
            events: Vec::new(),
            peak: initial,
            now: 0,
            lives,
            decisions: 0,
        }
    }

    fn count(&self, phase: Phase) -> u32 {
        self.slots.iter().filter(|s| s.phase == phase).count() as u32
    }

    /// GPU-hours from the start to `at`.
    fn gpu_hours(&self, at: u64) -> f64 {
        let live: u128 =
            (self.slots.iter()).filter(|s| s.phase != Phase::Off).map(|s| u128::from(at.saturating_sub(s.since))).sum();
        (self.gpu_ns_done + live) as f64 * f64::from(self.gpus) / 3.6e12
    }

    fn fleet_state(&self, at: u64) -> FleetState {
        let ready: Vec<&Slot> = self.slots.iter().filter(|s| s.phase == Phase::Ready).collect();
        let kv_use = match ready.len() {
            0 => 0.0,
            n => ready.iter().map(|s| kv_use(&s.engine)).sum::<f64>() / n as f64,
        };
        FleetState {
            ready: ready.len() as u32,
            starting: self.count(Phase::Starting),
            draining: self.count(Phase::Draining),
            queue: self.slots.iter().map(|s| (s.engine.num_waiting() + s.engine.num_pending()) as u64).sum(),
            kv_use,
            gpu_hours: self.gpu_hours(at),
        }
    }

    fn next_ready(&self) -> u64 {
        (self.slots.iter()).filter(|s| s.phase == Phase::Starting).map(|s| s.ready_at).min().unwrap_or(NEVER)
    }

    /// The earliest step: its start and slot (lowest index on ties).
    fn next_step(&self) -> Option<(u64, usize)> {
        let mut best = (NEVER, 0);
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(t) = s.engine.next_step_at()
                && t.as_nanos() < best.0
            {
                best = (t.as_nanos(), i);
            }
        }
        (best.0 != NEVER).then_some(best)
    }

    /// Replica `r` leaves at `at`: its GPUs stop counting.
    fn leave(&mut self, r: usize, at: u64) {
        let s = &mut self.slots[r];
        self.gpu_ns_done += u128::from(at.saturating_sub(s.since));
        s.phase = Phase::Off;
        self.ready_mask[r] = false;
        let life = &mut self.lives[s.life];
        life.drain.get_or_insert(at);
        life.left = Some(at);
    }

    /// What the autoscaler reads now.
    fn reading(&mut self, now: u64, signal: Signal, window_s: f64) -> Reading {
        let ready = self.count(Phase::Ready);
        let starting = self.count(Phase::Starting);
        let on_ready = |f: &dyn Fn(&Engine) -> f64| -> f64 {
            (self.slots.iter()).filter(|s| s.phase == Phase::Ready).map(|s| f(&s.engine)).sum()
        };
        let sum = match signal {
            Signal::TtftP99Ms => {
                let value = self.watch.recent_ttft_p99_ms(SimTime::from_nanos(now), window_s);
                return Reading::Fleet { value, ready };
            }
            Signal::Waiting => on_ready(&|e| (e.num_waiting() + e.num_pending()) as f64),
            Signal::Outstanding => on_ready(&|e| (e.num_running() + e.num_waiting() + e.num_pending()) as f64),
            Signal::KvUse => on_ready(&kv_use),
            Signal::Rate => {
                let cut = now.saturating_sub(nanos(window_s));
                while self.routed.front().is_some_and(|&t| t <= cut) {
                    self.routed.pop_front();
                }
                self.routed.len() as f64 / window_s
            }
        };
        Reading::PerReplica { sum, ready, starting }
    }

    /// The autoscaler decides at `now`; errs past [`MAX_DECISIONS`].
    fn decide(&mut self, now: u64) -> Result<(), String> {
        self.decisions += 1;
        if self.decisions > MAX_DECISIONS {
            return Err(format!(
                "the autoscaler would decide more than {MAX_DECISIONS} times (every cluster.autoscale.period_s while \
                 requests are still to come): set a longer period_s, or a workload that ends sooner"
            ));
        }
        let Some(hpa) = &self.hpa else { return Ok(()) };
        let (signal, window_s, period) = (hpa.config().signal, hpa.config().window_s, hpa.config().period_s);
        let cold = nanos(hpa.config().cold_start.total_s());
        let reading = self.reading(now, signal, window_s);
        let current = self.count(Phase::Ready) + self.count(Phase::Starting);
        let Some(hpa) = &mut self.hpa else { return Ok(()) };
        let to = hpa.decide(SimTime::from_nanos(now), current, reading);
        self.next_decision = now.saturating_add(nanos(period));
        if to == current {
            return Ok(());
        }
        self.events.push(ScaleEvent { t_s: now as f64 / 1e9, from: current, to });
        if to > current {
            for _ in current..to {
                self.start_one(now, cold);
            }
            self.peak = self.peak.max(to);
        } else {
            for _ in to..current {
                self.remove_one(now);
            }
        }
        Ok(())
    }

    fn start_one(&mut self, now: u64, cold: u64) {
        let ready_at = now.saturating_add(cold);
        let phase = if cold == 0 { Phase::Ready } else { Phase::Starting };
        let life = self.lives.len();
        let slot = Slot { engine: Engine::new(self.cfg.clone()), phase, life, since: now, ready_at };
        let r = match self.slots.iter().position(|s| s.phase == Phase::Off) {
            Some(r) => {
                self.slots[r] = slot;
                r
            }
            None => {
                self.slots.push(slot);
                self.run.replicas.push(ReplicaCounts::default());
                self.outstanding.push(0);
                self.loads.push(Load::default());
                self.ready_mask.push(false);
                self.slots.len() - 1
            }
        };
        self.ready_mask[r] = phase == Phase::Ready;
        let ready = (phase == Phase::Ready).then_some(now);
        self.lives.push(Life { slot: r, asked: now, ready, ..Life::default() });
    }

    /// Removes one replica: the newest starting one, else the newest ready.
    fn remove_one(&mut self, now: u64) {
        let newest = |phase: Phase, key: fn(&Slot) -> u64| {
            (self.slots.iter().enumerate())
                .filter(|(_, s)| s.phase == phase)
                .max_by_key(|(i, s)| (key(s), *i))
                .map(|(i, _)| i)
        };
        if let Some(r) = newest(Phase::Starting, |s| s.since) {
            self.leave(r, now);
            return;
        }
        let Some(r) = newest(Phase::Ready, |s| s.ready_at) else { return };
        self.ready_mask[r] = false;
        self.lives[self.slots[r].life].drain = Some(now);
        if self.outstanding[r] == 0 {
            self.leave(r, now);
        } else {
            self.slots[r].phase = Phase::Draining;
        }
    }

    fn become_ready(&mut self) {
        let t = self.next_ready();
        for (r, s) in self.slots.iter_mut().enumerate() {
            if s.phase == Phase::Starting && s.ready_at == t {
                s.phase = Phase::Ready;
                self.ready_mask[r] = true;
                self.lives[s.life].ready = Some(t);
            }
        }
    }

    /// Closes the windows that end by `at` (at most one a call).
    fn close_window(&mut self, at: u64) -> Result<(), String> {
        let state = self.fleet_state(at);
        self.watch.close(SimTime::from_nanos(at), state)
    }
}

impl Topology for Scaled<'_> {
    type Out = ScaledRun;

    fn next<S: Source>(&mut self, source: &S) -> Next {
        let step = self.next_step();
        let arrival = source.peek();
        if arrival.is_none() && step.is_none() {
            return Next::Done;
        }
        let own = [
            (self.next_ready(), Due::Ready),
            (self.watch.next_close().as_nanos(), Due::Window),
            (self.next_decision, Due::Decide),
            step.map_or((NEVER, Due::Ready), |(t, r)| (t, Due::Step(r))),
        ];
        // The earliest, the first listed on ties; an arrival goes before
        // a step at its instant, after the other events.
        let (t, due) = own.iter().fold((NEVER, Due::Ready), |best, &(t, d)| if t < best.0 { (t, d) } else { best });
        let step_next = matches!(due, Due::Step(_));
        match arrival {
            Some(a) if a.as_nanos() < t || (a.as_nanos() == t && step_next) => Next::Arrival(a),
            _ => {
                self.due = due;
                Next::Event(Some(SimTime::from_nanos(t)))
            }
        }
    }

    fn arrive<S: Source, O: Observer>(&mut self, req: Request, cx: &mut Cx<'_, S, O>) -> Result<(), SimError> {
        let now = cx.run.at.now;
        self.now = self.now.max(now.as_nanos());
        self.watch.offered(SimTime::from_nanos(req.arrival.as_nanos().saturating_sub(cx.run.tap.delay_ns)));
        let placed = &mut self.run.placement.requests;
        if placed.len() <= req.id as usize {
            placed.resize(req.id as usize + 1, None);
        }
        let context = self.cfg.context_length;
        if submit::rejected_for_context(&req, context, &mut cx.run.tap, cx.source, now) {
            self.watch.rejected(SimTime::from_nanos(req.arrival.as_nanos().saturating_sub(cx.run.tap.delay_ns)));
            return Ok(());
        }
        self.content.read(&req, &*cx.source);
        let affinity = self.router.policy() == llmsim_scenario::config::Router::PrefixAffinity;
        for (i, s) in self.slots.iter().enumerate() {
            let hit = (affinity && self.ready_mask[i]).then(|| self.content.affinity(req.prompt));
            self.loads[i] = Load::of(&s.engine, self.outstanding[i], hit);
        }
        let block_size = u64::from(self.content.block_size().max(1));
        let arrival =
            Arrival { prompt_blocks: u64::from(req.prompt).div_ceil(block_size), session: cx.source.session() };
        let r = self.router.route_among(&arrival, &self.loads, Some(&self.ready_mask));
        self.run.placement.requests[req.id as usize] = Some(r as u32);
        self.outstanding[r] += 1;
        if self.hpa.as_ref().is_some_and(|h| h.config().signal == Signal::Rate) {
            self.routed.push_back(now.as_nanos());
        }
        let mut o = OnReplica::colocated(&mut self.run.replicas[r], &mut cx.run.tap, false);
        o.watch = Some(&mut self.watch);
        if self.content.submit(&mut self.slots[r].engine, req, &mut o).is_err() {
            self.outstanding[r] -= 1;
            cx.source.rejected(req.id, now);
        }
        Ok(())
    }

    fn event<S, O, F>(&mut self, cx: &mut Cx<'_, S, O>, after_step: &mut F) -> Result<(), SimError>
    where
        S: Source,
        O: Observer,
        F: FnMut(Place, &Engine, &mut O),
    {
        let now = cx.run.at.now.as_nanos();
        self.now = self.now.max(now);
        match self.due {
            Due::Ready => self.become_ready(),
            Due::Window => {
                self.close_window(now).map_err(|why| SimError::Stalled { why, progress: cx.run.at })?;
            }
            Due::Decide => self.decide(now).map_err(|why| SimError::Stalled { why, progress: cx.run.at })?,
            Due::Step(r) => {
                cx.run.tap.inner.replica(r as u32);
                let mut o = OnReplica::colocated(&mut self.run.replicas[r], &mut cx.run.tap, false);
                o.watch = Some(&mut self.watch);
                let stepped = self.slots[r].engine.step(&mut o).is_some();
                if stepped {
                    cx.run.count_step()?;
                    if cx.run.setup.keep_steps {
                        self.run.placement.steps.push(r as u32);
                    }
                }
                let clock = self.slots[r].engine.clock();
                self.now = self.now.max(clock.as_nanos());
                cx.run.check_clock(clock)?;
                after_step(Place { pool: None, replica: r }, &self.slots[r].engine, cx.run.tap.inner);
            }
        }
        Ok(())
    }

    fn ended(&mut self, id: RequestId) {
        let Some(Some(r)) = self.run.placement.requests.get(id as usize).copied() else { return };
        let r = r as usize;
        self.outstanding[r] -= 1;
        if self.slots[r].phase == Phase::Draining && self.outstanding[r] == 0 {
            let at = self.slots[r].engine.clock().as_nanos();
            self.leave(r, at);
        }
    }

    fn finish(mut self) -> ScaledRun {
        // The last windows close at the run's end, a partial one included.
        let end = self.now;
        let mut closed = Ok(());
        while closed.is_ok() && self.watch.next_close().as_nanos() <= end {
            closed = self.close_window(self.watch.next_close().as_nanos());
        }
        if closed.is_ok() && self.watch.closed_until().as_nanos() < end {
            let _ = self.close_window(end);
        }
        let gpu_hours = self.gpu_hours(end);
        ScaledRun {
            lives: self.lives,
            rows: std::mem::take(&mut self.watch.rows),
            cluster: self.run,
            events: self.events,
            peak: self.peak,
            gpu_hours,
            end_s: end as f64 / 1e9,
        }
    }
}

fn kv_use(e: &Engine) -> f64 {
    match e.kv_blocks_total() {
        0 => 0.0,
        t => f64::from(e.kv_blocks_used()) / f64::from(t),
    }
}

fn nanos(s: f64) -> u64 {
    SimTime::from_secs_f64(s).as_nanos()
}

#[cfg(test)]
mod tests;
