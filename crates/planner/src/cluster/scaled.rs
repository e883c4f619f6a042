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
use super::router::{Load, RouterState, Weights};
use super::timeline::{FleetState, Watch};
use super::{ClusterRun, OnReplica, ReplicaCounts, submit};
use crate::intake::Content;
use crate::run_driver::{Cx, MissedWindow, Next, Place, SimError, Topology};
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
    /// Its pool, an index into [`Scaled::pools`].
    pool: usize,
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
    /// Each pool's (one, unnamed, without `cluster.pools`).
    pub pools: Vec<PoolRun>,
    /// Requests routed to each pool.
    pub requests_by_pool: Vec<u64>,
    /// When the run ended.
    pub end_s: f64,
}

/// One pool of the fleet, as the run starts it.
pub struct PoolSpec {
    /// `None` for the one pool of a cluster without `cluster.pools`.
    pub name: Option<String>,
    pub cfg: EngineConfig,
    /// GPUs of one replica.
    pub gpus: u32,
    /// Replicas ready at the start.
    pub initial: u32,
    /// Its autoscaler (`None`: a fixed pool).
    pub hpa: Option<Hpa>,
    /// Per GPU an hour.
    pub price: Option<f64>,
}

/// What one pool did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolRun {
    pub name: Option<String>,
    pub gpu_hours: f64,
    pub cost: Option<f64>,
    pub peak: u32,
    pub scale_ups: u64,
    pub scale_downs: u64,
}

/// A pool and its state during the run.
struct Pool {
    spec: PoolSpec,
    next_decision: u64,
    /// Routing instants to its replicas within the signal window.
    routed: VecDeque<u64>,
    /// GPU-nanoseconds of its replicas that have left (per GPU).
    gpu_ns_done: u128,
    peak: u32,
    /// Its one-token steps a second and its KV blocks (the routers' weights).
    speed: f64,
    blocks: f64,
}

/// The next own event of the topology.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Due {
    Ready,
    Window,
    Decide(usize),
    Step(usize),
}

/// Autoscaled replicas behind a router ([`Topology`]; see the module docs).
pub struct Scaled<'a> {
    slots: Vec<Slot>,
    pools: Vec<Pool>,
    /// Whether the routers weigh replicas (more than one pool).
    weighted: bool,
    speed: Vec<f64>,
    blocks: Vec<f64>,
    router: &'a mut RouterState,
    run: ClusterRun,
    outstanding: Vec<u64>,
    loads: Vec<Load>,
    ready_mask: Vec<bool>,
    content: Content,
    watch: Watch,
    due: Due,
    events: Vec<ScaleEvent>,
    peak: u32,
    /// The latest instant the run reached.
    now: u64,
    lives: Vec<Life>,
    decisions: u64,
    /// Requests routed to each pool.
    routed_by_pool: Vec<u64>,
    /// Each slot's next step start (`NEVER`: none), kept as engines change.
    next_at: Vec<u64>,
    /// The earliest instant a starting replica becomes ready (`NEVER`:
    /// none), kept as phases change.
    ready_at: u64,
    /// The replica of each request in flight.
    owner: super::in_flight::InFlight<u32>,
    /// End the run at the first window that misses the window SLO
    /// ([`Scaled::stop_at_missed_window`]).
    stop_at_miss: bool,
}

impl<'a> Scaled<'a> {
    /// The fleet of `pools` (at least one, with a replica at the start in
    /// all), behind `router`.
    pub fn new(pools: Vec<PoolSpec>, router: &'a mut RouterState, watch: Watch) -> Scaled<'a> {
        let weighted = pools.len() > 1;
        let pools: Vec<Pool> = pools
            .into_iter()
            .map(|spec| {
                let floor = spec.cfg.cost.step(1, 0).total_s;
                // An engine's KV blocks are its capacity's (`Engine::kv_blocks_total`).
                let blocks = f64::from(spec.cfg.capacity.num_blocks).max(1.0);
                Pool {
                    next_decision: spec.hpa.as_ref().map_or(NEVER, |h| nanos(h.config().period_s)),
                    routed: VecDeque::new(),
                    gpu_ns_done: 0,
                    peak: spec.initial,
                    speed: 1.0 / floor.max(1e-12),
                    blocks,
                    spec,
                }
            })
            .collect();
        let mut slots = Vec::new();
        let mut lives = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            for _ in 0..pool.spec.initial {
                let (slot, life) = (slots.len(), lives.len());
                let engine = Engine::new(pool.spec.cfg.clone());
                slots.push(Slot { engine, pool: p, phase: Phase::Ready, life, since: 0, ready_at: 0 });
                lives.push(Life { slot, asked: 0, ready: Some(0), ..Life::default() });
            }
        }
        let content = Content::new(&slots[0].engine);
        let n = slots.len();
        let speed = slots.iter().map(|s| pools[s.pool].speed).collect();
        let blocks = slots.iter().map(|s| pools[s.pool].blocks).collect();
        let peak = n as u32;
        let n_pools = pools.len();
        Scaled {
            slots,
            pools,
            weighted,
            speed,
            blocks,
            router,
            run: ClusterRun { replicas: vec![ReplicaCounts::default(); n], ..ClusterRun::default() },
            outstanding: vec![0; n],
            loads: vec![Load::default(); n],
            ready_mask: vec![true; n],
            content,
            watch,
            due: Due::Ready,
            events: Vec::new(),
            peak,
            now: 0,
            lives,
            decisions: 0,
            routed_by_pool: vec![0; n_pools],
            next_at: vec![NEVER; n],
            ready_at: NEVER,
            owner: Default::default(),
            stop_at_miss: false,
        }
    }

    /// With `true`, the run ends with [`SimError::WindowMissed`] as soon
    /// as a window misses the window SLO: for a search that only needs to
    /// know whether every window meets (`llmsim capacity --over-time`'s
    /// static fleet). The windows before it are as a whole run has them.
    pub fn stop_at_missed_window(mut self, stop: bool) -> Self {
        self.stop_at_miss = stop;
        self
    }

    /// Slot `r`'s engine changed: its next step.
    fn refresh(&mut self, r: usize) {
        self.next_at[r] = self.slots[r].engine.next_step_at().map_or(NEVER, |t| t.as_nanos());
    }

    /// Phases changed: the next readiness.
    fn refresh_ready(&mut self) {
        self.ready_at =
            (self.slots.iter()).filter(|s| s.phase == Phase::Starting).map(|s| s.ready_at).min().unwrap_or(NEVER);
    }

    /// Replicas in `phase`, of pool `pool` or of all.
    fn count(&self, pool: Option<usize>, phase: Phase) -> u32 {
        self.slots.iter().filter(|s| s.phase == phase && pool.is_none_or(|p| s.pool == p)).count() as u32
    }

    /// Pool `p`'s GPU-hours from the start to `at`.
    fn pool_gpu_hours(&self, p: usize, at: u64) -> f64 {
        let live: u128 = (self.slots.iter())
            .filter(|s| s.pool == p && s.phase != Phase::Off)
            .map(|s| u128::from(at.saturating_sub(s.since)))
            .sum();
        (self.pools[p].gpu_ns_done + live) as f64 * f64::from(self.pools[p].spec.gpus) / 3.6e12
    }

    /// GPU-hours and their cost (`None` if no pool has a price) from the start to `at`.
    fn gpu_hours(&self, at: u64) -> (f64, Option<f64>) {
        let mut hours = 0.0;
        let mut cost: Option<f64> = None;
        for p in 0..self.pools.len() {
            let h = self.pool_gpu_hours(p, at);
            hours += h;
            if let Some(price) = self.pools[p].spec.price {
                *cost.get_or_insert(0.0) += price * h;
            }
        }
        (hours, cost)
    }

    fn fleet_state(&self, at: u64) -> FleetState {
        let ready: Vec<&Slot> = self.slots.iter().filter(|s| s.phase == Phase::Ready).collect();
        let kv_use = match ready.len() {
            0 => 0.0,
            n => ready.iter().map(|s| kv_use(&s.engine)).sum::<f64>() / n as f64,
        };
        let (gpu_hours, cost) = self.gpu_hours(at);
        let pools = match self.weighted {
            false => Vec::new(),
            true => (0..self.pools.len())
                .map(|p| {
                    let c = |phase| self.count(Some(p), phase);
                    (c(Phase::Ready), c(Phase::Starting), c(Phase::Draining))
                })
                .collect(),
        };
        FleetState {
            ready: ready.len() as u32,
            starting: self.count(None, Phase::Starting),
            draining: self.count(None, Phase::Draining),
            queue: self.slots.iter().map(|s| (s.engine.num_waiting() + s.engine.num_pending()) as u64).sum(),
            kv_use,
            gpu_hours,
            cost,
            pools,
        }
    }

    fn next_ready(&self) -> u64 {
        self.ready_at
    }

    /// The earliest step: its start and slot (lowest index on ties).
    fn next_step(&self) -> Option<(u64, usize)> {
        let mut best = (NEVER, 0);
        for (i, &t) in self.next_at.iter().enumerate() {
            if t < best.0 {
                best = (t, i);
            }
        }
        (best.0 != NEVER).then_some(best)
    }

    /// Replica `r` leaves at `at`: its GPUs stop counting.
    fn leave(&mut self, r: usize, at: u64) {
        let s = &mut self.slots[r];
        self.pools[s.pool].gpu_ns_done += u128::from(at.saturating_sub(s.since));
        s.phase = Phase::Off;
        self.ready_mask[r] = false;
        let life = &mut self.lives[s.life];
        life.drain.get_or_insert(at);
        life.left = Some(at);
    }

    /// What pool `p`'s autoscaler reads now.
    fn reading(&mut self, p: usize, now: u64, signal: Signal, window_s: f64) -> Reading {
        let ready = self.count(Some(p), Phase::Ready);
        let starting = self.count(Some(p), Phase::Starting);
        let on_ready = |f: &dyn Fn(&Engine) -> f64| -> f64 {
            (self.slots.iter()).filter(|s| s.pool == p && s.phase == Phase::Ready).map(|s| f(&s.engine)).sum()
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
                let routed = &mut self.pools[p].routed;
                while routed.front().is_some_and(|&t| t <= cut) {
                    routed.pop_front();
                }
                routed.len() as f64 / window_s
            }
        };
        Reading::PerReplica { sum, ready, starting }
    }

    /// Pool `p`'s autoscaler decides at `now`; errs past [`MAX_DECISIONS`].
    fn decide(&mut self, p: usize, now: u64) -> Result<(), String> {
        self.decisions += 1;
        if self.decisions > MAX_DECISIONS {
            return Err(format!(
                "the autoscaler would decide more than {MAX_DECISIONS} times (every cluster.autoscale.period_s while \
                 requests are still to come): set a longer period_s, or a workload that ends sooner"
            ));
        }
        let Some(hpa) = &self.pools[p].spec.hpa else { return Ok(()) };
        let (signal, window_s, period) = (hpa.config().signal, hpa.config().window_s, hpa.config().period_s);
        let cold = nanos(hpa.config().cold_start.total_s());
        let reading = self.reading(p, now, signal, window_s);
        let current = self.count(Some(p), Phase::Ready) + self.count(Some(p), Phase::Starting);
        let pool = &mut self.pools[p];
        pool.next_decision = now.saturating_add(nanos(period));
        let Some(hpa) = &mut pool.spec.hpa else { return Ok(()) };
        let to = hpa.decide(SimTime::from_nanos(now), current, reading);
        if to == current {
            return Ok(());
        }
        let name = pool.spec.name.clone();
        self.events.push(ScaleEvent { t_s: now as f64 / 1e9, from: current, to, pool: name });
        if to > current {
            for _ in current..to {
                self.start_one(p, now, cold);
            }
            self.pools[p].peak = self.pools[p].peak.max(to);
        } else {
            for _ in to..current {
                self.remove_one(p, now);
            }
        }
        let all = self.count(None, Phase::Ready) + self.count(None, Phase::Starting);
        self.peak = self.peak.max(all);
        Ok(())
    }

    fn start_one(&mut self, p: usize, now: u64, cold: u64) {
        let ready_at = now.saturating_add(cold);
        let phase = if cold == 0 { Phase::Ready } else { Phase::Starting };
        let life = self.lives.len();
        let engine = Engine::new(self.pools[p].spec.cfg.clone());
        let slot = Slot { engine, pool: p, phase, life, since: now, ready_at };
        let (speed, blocks) = (self.pools[p].speed, self.pools[p].blocks);
        let r = match self.slots.iter().position(|s| s.phase == Phase::Off) {
            Some(r) => {
                self.slots[r] = slot;
                (self.speed[r], self.blocks[r]) = (speed, blocks);
                self.next_at[r] = NEVER;
                r
            }
            None => {
                self.slots.push(slot);
                self.run.replicas.push(ReplicaCounts::default());
                self.outstanding.push(0);
                self.loads.push(Load::default());
                self.ready_mask.push(false);
                self.speed.push(speed);
                self.blocks.push(blocks);
                self.next_at.push(NEVER);
                self.slots.len() - 1
            }
        };
        self.ready_mask[r] = phase == Phase::Ready;
        let ready = (phase == Phase::Ready).then_some(now);
        self.lives.push(Life { slot: r, asked: now, ready, ..Life::default() });
    }

    /// Removes one replica of pool `p`: its newest starting one, else its
    /// newest ready one.
    fn remove_one(&mut self, p: usize, now: u64) {
        let newest = |phase: Phase, key: fn(&Slot) -> u64| {
            (self.slots.iter().enumerate())
                .filter(|(_, s)| s.pool == p && s.phase == phase)
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

    /// The window just closed, if it missed the window SLO.
    fn missed_window(&self) -> Option<MissedWindow> {
        let row = self.watch.rows.last().filter(|w| w.slo_met == Some(false))?;
        Some(MissedWindow {
            index: self.watch.rows.len() as u64 - 1,
            start_s: row.start_s,
            end_s: row.end_s,
            gpu_hours: row.gpu_hours,
            cost: row.cost,
            peak_replicas: self.peak,
        })
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
        let decision = (self.pools.iter().enumerate()).fold((NEVER, Due::Ready), |best, (p, pool)| {
            if pool.next_decision < best.0 { (pool.next_decision, Due::Decide(p)) } else { best }
        });
        let own = [
            (self.next_ready(), Due::Ready),
            (self.watch.next_close().as_nanos(), Due::Window),
            decision,
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
        let keep = cx.run.setup.keep_requests;
        let placed = &mut self.run.placement.requests;
        if keep && placed.len() <= req.id as usize {
            placed.resize(req.id as usize + 1, None);
        }
        let context = self.pools[0].spec.cfg.context_length;
        if submit::rejected_for_context(&req, context, &mut cx.run.tap, cx.source, now) {
            let at = SimTime::from_nanos(req.arrival.as_nanos().saturating_sub(cx.run.tap.delay_ns));
            self.watch.rejected(req.id, at);
            return Ok(());
        }
        self.content.read(&req, &*cx.source);
        let engines = self.slots.iter().map(|s| &s.engine);
        let ready = Some(&*self.ready_mask);
        submit::gather(self.router, engines, &self.outstanding, &mut self.loads, &self.content, &req, ready);
        let arrival = submit::arrival(&self.content, &req, cx.source.session());
        let weights = self.weighted.then_some(Weights { speed: &self.speed, blocks: &self.blocks });
        let r = self.router.route_weighted(&arrival, &self.loads, Some(&self.ready_mask), weights);
        if keep {
            self.run.placement.requests[req.id as usize] = Some(r as u32);
        }
        self.owner.insert(req.id, r as u32);
        self.outstanding[r] += 1;
        self.routed_by_pool[self.slots[r].pool] += 1;
        let pool = &mut self.pools[self.slots[r].pool];
        if pool.spec.hpa.as_ref().is_some_and(|h| h.config().signal == Signal::Rate) {
            pool.routed.push_back(now.as_nanos());
        }
        let mut o = OnReplica::colocated(&mut self.run.replicas[r], &mut cx.run.tap, false);
        o.watch = Some(&mut self.watch);
        let id = req.id;
        if self.content.submit(&mut self.slots[r].engine, req, &mut o).is_err() {
            self.outstanding[r] -= 1;
            self.owner.end(id);
            cx.source.rejected(id, now);
        }
        self.refresh(r);
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
            Due::Ready => {
                self.become_ready();
                self.refresh_ready();
            }
            Due::Window => {
                self.close_window(now).map_err(|why| SimError::Stalled { why, progress: cx.run.at })?;
                if let Some(window) = self.missed_window().filter(|_| self.stop_at_miss) {
                    return Err(SimError::WindowMissed { window: Box::new(window), progress: cx.run.at });
                }
            }
            Due::Decide(p) => {
                self.decide(p, now).map_err(|why| SimError::Stalled { why, progress: cx.run.at })?;
                self.refresh_ready();
            }
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
                self.refresh(r);
                let clock = self.slots[r].engine.clock();
                self.now = self.now.max(clock.as_nanos());
                cx.run.check_clock(clock)?;
                after_step(Place { pool: None, replica: r }, &self.slots[r].engine, cx.run.tap.inner);
            }
        }
        Ok(())
    }

    fn ended(&mut self, id: RequestId) {
        let Some(r) = self.owner.end(id) else { return };
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
        let (gpu_hours, _) = self.gpu_hours(end);
        let pools = (0..self.pools.len())
            .map(|p| {
                let pool = &self.pools[p];
                let h = self.pool_gpu_hours(p, end);
                let changes = |up: bool| {
                    (self.events.iter()).filter(|e| e.pool == pool.spec.name && (e.to > e.from) == up).count() as u64
                };
                PoolRun {
                    name: pool.spec.name.clone(),
                    gpu_hours: h,
                    cost: pool.spec.price.map(|c| c * h),
                    peak: pool.peak,
                    scale_ups: changes(true),
                    scale_downs: changes(false),
                }
            })
            .collect();
        let requests_by_pool = self.routed_by_pool.clone();
        ScaledRun {
            requests_by_pool,
            pools,
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
