//! The one run loop of every virtual-time driver, and what the drivers
//! share. [`drive`] is the skeleton: the clock, the arrivals, the run's
//! bounds ([`RunLimits`], from [`llmsim_scenario::config::limits`]),
//! progress, requests ending, stalls and the delay of
//! `latency.request_overhead_ms` (`Delayed`, `Tap`). What differs per
//! topology is a small [`Topology`]: what comes next, how an arrival is
//! placed, and how the topology's own event (a step, a decode stretch, a
//! transfer's end) runs:
//!
//! - [`crate::sim::Single`]: one engine;
//! - [`crate::cluster::Replicas`]: replicas behind a router, step by step,
//!   and `Lanes` (`cluster/lanes.rs`), the same replicas in decode
//!   stretches when arrivals are fixed in advance;
//! - [`crate::cluster::disagg::Pools`]: prefill and decode pools and the KV
//!   transfers between them.
//!
//! A scenario is run through the builder [`crate::Run`], which picks the
//! topology. The real-time server drives the same engine and router
//! (`llmsim_server`), on the wall clock.

use std::fmt;

use crate::workload::Source;
use llmsim_core::engine::{Engine, Observer, RejectReason, Request, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_core::util::thousands;
use llmsim_scenario::config::limits;

/// The bounds of one run ([`limits`]); tests lower them.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RunLimits {
    /// No step may start or end after this instant.
    pub max_time: SimTime,
    pub max_requests: u64,
    pub max_steps: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_time: SimTime::from_secs_f64(limits::MAX_SIM_SECONDS),
            max_requests: limits::MAX_REQUESTS,
            max_steps: limits::MAX_STEPS,
        }
    }
}

/// How far a run has got, for a progress display.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Progress {
    pub now: SimTime,
    pub requests: u64,
    pub steps: u64,
}

/// A run stopped at a limit instead of finishing. Its metrics are not
/// reported: they would describe a run that did not happen.
#[derive(Clone, Debug, PartialEq)]
pub enum SimError {
    /// Simulated time would pass [`RunLimits::max_time`].
    TimeLimit { at: SimTime, limit: SimTime, progress: Progress },
    /// More requests than [`RunLimits::max_requests`].
    TooManyRequests { limit: u64, rejected: u64, progress: Progress },
    /// More steps than [`RunLimits::max_steps`].
    TooManySteps { limit: u64, progress: Progress },
    /// The source cannot make progress in time (see [`Source::stalled`]).
    Stalled { why: String, progress: Progress },
    /// A window of a fleet over time missed `cluster.timeline.slo`, and
    /// the run was asked to end at the first that did
    /// ([`crate::Run::stop_at_missed_window`]): an answer, not a fault.
    WindowMissed { window: Box<MissedWindow>, progress: Progress },
    /// The observer had what it was run for and asked the run to end
    /// ([`Observer::wants_stop`]): an answer, not a fault.
    Cut { progress: Progress },
}

/// The window that ended a run asked to stop at the first miss: its
/// figures as its row has them (GPU-hours and cost from the run's start
/// to the window's end).
#[derive(Clone, Debug, PartialEq)]
pub struct MissedWindow {
    /// Its number, from 0: the windows before it all met the SLO.
    pub index: u64,
    pub start_s: f64,
    pub end_s: f64,
    pub gpu_hours: f64,
    pub cost: Option<f64>,
    /// Most replicas at once up to the window's end.
    pub peak_replicas: u32,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::TimeLimit { at, limit, progress } => write!(
                f,
                "the run stopped after {} requests and {} steps: simulated time would reach {} s, past the \
                 limit of {} s (about 31.7 years); a step or a gap between arrivals is far too long for \
                 this workload: check the hardware's speed, the arrival rate and the think time",
                thousands(progress.requests),
                thousands(progress.steps),
                shown_secs(*at),
                shown_secs(*limit),
            ),
            SimError::TooManyRequests { limit, rejected, progress } => write!(
                f,
                "the run stopped at t = {} s after issuing {} requests ({} rejected), the most one run \
                 may issue{}; set workload.requests, or a shorter workload.duration_s{}",
                progress.now,
                thousands(*limit),
                thousands(*rejected),
                if *limit == limits::MAX_REQUESTS {
                    format!(
                        " while it keeps every request's record (without --requests-csv it keeps none and may \
                         issue {})",
                        thousands(limits::MAX_SUMMARY_REQUESTS)
                    )
                } else {
                    String::new()
                },
                if *rejected * 2 > *limit {
                    ", and check why requests are rejected (too long for the context or the KV cache)"
                } else {
                    ""
                }
            ),
            SimError::TooManySteps { limit, progress } => write!(
                f,
                "the run stopped at t = {} s after {} engine steps, the most one run may take (about an \
                 hour of work); set fewer workload.requests or a shorter workload.duration_s",
                progress.now,
                thousands(*limit),
            ),
            SimError::Stalled { why, progress } => write!(f, "the run stopped at t = {} s: {why}", progress.now),
            SimError::WindowMissed { window, progress } => write!(
                f,
                "the run stopped at t = {} s, as asked, at its first window that missed cluster.timeline.slo \
                 (window {} from {} s to {} s)",
                progress.now, window.index, window.start_s, window.end_s
            ),
            SimError::Cut { progress } => write!(
                f,
                "the run stopped at t = {} s, as asked, once its observer had what it needed (a search's early \
                 stop)",
                progress.now
            ),
        }
    }
}

impl std::error::Error for SimError {}

/// Seconds for a message, saturated values included.
fn shown_secs(t: SimTime) -> String {
    thousands(t.as_nanos() / 1_000_000_000)
}

/// Steps between two progress reports.
pub(crate) const PROGRESS_EVERY: u64 = 1 << 16;

/// A source whose requests reach the engine `ns` after they arrive.
pub(crate) struct Delayed<'a, S> {
    pub(crate) inner: &'a mut S,
    pub(crate) ns: u64,
}

impl<S: Source> Source for Delayed<'_, S> {
    fn peek(&self) -> Option<SimTime> {
        self.inner.peek().map(|t| t.plus_nanos(self.ns))
    }
    fn pop(&mut self) -> Option<llmsim_core::engine::Request> {
        let mut req = self.inner.pop()?;
        req.arrival = req.arrival.plus_nanos(self.ns);
        Some(req)
    }
    fn segments(&self) -> &[llmsim_core::engine::prefix::hash::Segment] {
        self.inner.segments()
    }
    fn block_hashes(&self) -> Option<&[u64]> {
        self.inner.block_hashes()
    }
    fn own_from(&self) -> Option<usize> {
        self.inner.own_from()
    }
    fn session(&self) -> Option<u64> {
        self.inner.session()
    }
    fn done(&mut self, id: RequestId, at: SimTime) {
        self.inner.done(id, at);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime) {
        self.inner.rejected(id, at);
    }
    fn stalled(&self) -> Option<String> {
        self.inner.stalled()
    }
}

/// Forwards events and remembers which requests are done (and whether
/// they finished), for closed loops and sessions; reports arrivals at the
/// client's time (before the delay).
pub(crate) struct Tap<'a, O> {
    pub(crate) inner: &'a mut O,
    pub(crate) done: Vec<(RequestId, SimTime, bool)>,
    /// Requests rejected so far, for messages.
    pub(crate) rejected: u64,
    pub(crate) delay_ns: u64,
}

impl<O: Observer> Observer for Tap<'_, O> {
    fn replica(&mut self, replica: u32) {
        self.inner.replica(replica);
    }
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.inner.arrived(id, SimTime::from_nanos(at.as_nanos().saturating_sub(self.delay_ns)), prompt, output);
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.inner.scheduled(id, at, tokens, computed);
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.inner.preempted(id, at);
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.inner.token(id, at, index);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.inner.finished(id, at);
        self.done.push((id, at, true));
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.inner.rejected(id, at, reason);
        self.rejected += 1;
        // Rejections on arrival are reported by `submit`'s result instead.
        if reason != RejectReason::ContextLength {
            self.done.push((id, at, false));
        }
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.inner.aborted(id, at);
    }
    fn step(&mut self, step: &StepRecord) {
        self.inner.step(step);
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.inner.prefix_lookup(id, at, queried, hit);
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
    fn wants_stop(&self) -> bool {
        self.inner.wants_stop()
    }
    fn decode_stretch(&mut self, s: &llmsim_core::engine::Stretch<'_>) {
        // The driver told the source of its finishes already
        // (`Engine::decode_stretch_through`); its joiners arrived at the
        // client's time, before the delay.
        if self.delay_ns == 0 || s.arrivals.is_empty() {
            return self.inner.decode_stretch(s);
        }
        let ns = self.delay_ns;
        let arrivals: Vec<llmsim_core::engine::Arrived> = (s.arrivals.iter())
            .map(|a| llmsim_core::engine::Arrived {
                arrival: SimTime::from_nanos(a.arrival.as_nanos().saturating_sub(ns)),
                ..*a
            })
            .collect();
        self.inner.decode_stretch(&llmsim_core::engine::Stretch { arrivals: &arrivals, ..*s });
    }
}

/// How the driver advances the engine.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Stepping {
    /// Decode stretches in one call each ([`Engine::decode_stretch`](llmsim_core::engine::Engine::decode_stretch)):
    /// the same step records, token times and figures as [`Stepping::Exact`],
    /// to the nanosecond, with less work per step. `after_step` runs once
    /// per stretch.
    #[default]
    MacroSteps,
    /// [`Stepping::MacroSteps`], but every event reaches the observers in
    /// time order: a cluster's replicas never run ahead of each other
    /// (its decode stretches replica by replica are left out), as with
    /// [`Stepping::Exact`]. For outputs that list steps and events as
    /// they happen (`llmsim run --steps-csv`, `--trace-events`, `--plot`).
    /// A single engine's events are in time order either way.
    MacroStepsInOrder,
    /// Every step through [`Engine::step`](llmsim_core::engine::Engine::step) (`llmsim run --exact`).
    Exact,
}

/// Whether `req` is within `context` tokens (else the engine refuses it
/// and its content hashes, which could be billions, are not made).
pub(crate) fn fits_context(req: &llmsim_core::engine::Request, context: u32) -> bool {
    u64::from(req.prompt) + u64::from(req.output) <= u64::from(context)
}

/// How a run is driven, whatever its topology.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Setup {
    pub limits: RunLimits,
    /// `latency.request_overhead_ms` in nanoseconds: a request reaches its
    /// engine (or router) that long after it arrives; observers see the
    /// arrival itself.
    pub delay_ns: u64,
    pub stepping: Stepping,
    /// Record the replica of every step ([`crate::metrics::Placement::steps`]).
    pub keep_steps: bool,
    /// Record the replica of every request ([`crate::metrics::Placement::requests`]);
    /// off in summary mode, where memory stays flat in requests. (The
    /// autoscaled fleet reads it; the other topologies keep it always.)
    pub keep_requests: bool,
}

impl Default for Setup {
    /// Step by step ([`Stepping::Exact`]: every step through
    /// `Engine::step`, `after_step` after each), within the default
    /// limits, without delay. [`crate::Run`] takes stretches by default.
    fn default() -> Self {
        Setup {
            limits: RunLimits::default(),
            delay_ns: 0,
            stepping: Stepping::Exact,
            keep_steps: false,
            keep_requests: true,
        }
    }
}

/// Which pool a replica is in (a disaggregated cluster's).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Prefill,
    Decode,
}

/// The engine that stepped, as `after_step` is told.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// `None` for one engine or colocated replicas.
    pub pool: Option<PoolKind>,
    /// Its index among the replicas (of its pool); 0 for one engine.
    pub replica: usize,
}

/// What a topology does next.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// The source's next arrival, due at this instant, comes first.
    Arrival(SimTime),
    /// The topology's own event comes first, starting at this instant
    /// (checked against the time limit) when it has one.
    Event(Option<SimTime>),
    /// Nothing is left to do.
    Done,
}

/// The run as a topology sees it: the source (delayed) and the rest of
/// the loop's state.
pub struct Cx<'a, S, O> {
    pub(crate) source: &'a mut S,
    pub(crate) run: Looping<'a, O>,
}

/// The loop's state apart from the source: the observer (tapped), how far
/// the run has got, its set-up and progress report.
pub struct Looping<'a, O> {
    pub(crate) tap: Tap<'a, O>,
    pub(crate) at: Progress,
    pub(crate) setup: &'a Setup,
    pub(crate) progress: &'a mut dyn FnMut(&Progress),
}

impl<O: Observer> Looping<'_, O> {
    /// Counts a step that ran, within the step limit, reporting progress
    /// every [`PROGRESS_EVERY`] steps.
    pub(crate) fn count_step(&mut self) -> Result<(), SimError> {
        self.at.steps += 1;
        if self.at.steps > self.setup.limits.max_steps {
            return Err(SimError::TooManySteps { limit: self.setup.limits.max_steps, progress: self.at });
        }
        if self.at.steps.is_multiple_of(PROGRESS_EVERY) {
            (self.progress)(&self.at);
        }
        Ok(())
    }

    /// Counts the `n` steps of a decode stretch (which kept within the
    /// step limit), reporting progress if they crossed a report.
    pub(crate) fn count_stretch(&mut self, n: u64) {
        self.at.steps += n;
        if self.at.steps / PROGRESS_EVERY != (self.at.steps - n) / PROGRESS_EVERY {
            (self.progress)(&self.at);
        }
    }

    /// Stops the run if an engine's clock passed the time limit.
    pub(crate) fn check_clock(&self, clock: SimTime) -> Result<(), SimError> {
        let limit = self.setup.limits.max_time;
        match clock > limit {
            true => Err(SimError::TimeLimit { at: clock, limit, progress: self.at }),
            false => Ok(()),
        }
    }

    /// Something is about to happen at `start`: progress is there, and
    /// the run stops if it is past the time limit.
    pub(crate) fn start_at(&mut self, start: SimTime) -> Result<(), SimError> {
        self.at.now = start;
        self.check_clock(start)
    }

    /// Counts a request taken from the source, within the request limit.
    pub(crate) fn count_request(&mut self) -> Result<(), SimError> {
        self.at.requests += 1;
        let limit = self.setup.limits.max_requests;
        match self.at.requests > limit {
            true => Err(SimError::TooManyRequests { limit, rejected: self.tap.rejected, progress: self.at }),
            false => Ok(()),
        }
    }
}

impl<S: Source, O: Observer> Cx<'_, S, O> {
    /// Stops the run if the source cannot go on ([`Source::stalled`]).
    pub(crate) fn check_stalled(&self) -> Result<(), SimError> {
        match self.source.stalled() {
            Some(why) => Err(SimError::Stalled { why, progress: self.run.at }),
            None => Ok(()),
        }
    }

    /// Takes the next arrival, due at `when`, from the source within the
    /// limits (`None` if the source had nothing after all).
    fn pop_arrival(&mut self, when: SimTime) -> Result<Option<Request>, SimError> {
        self.run.start_at(when)?;
        let Some(req) = self.source.pop() else { return Ok(None) };
        self.run.count_request()?;
        Ok(Some(req))
    }
}

/// Most events in a row a run may take without progress (a step, an
/// arrival, a request ending, a rejection or the clock moving): far more
/// than any instant holds (window closes, decisions and readiness are a
/// handful an instant), so only a rule that cannot make progress reaches it.
pub const MAX_IDLE_EVENTS: u64 = 1_000_000;

/// The drivers' guard against an event loop that makes no progress: an
/// engine whose step schedules nothing while requests wait would otherwise
/// loop at one instant for ever.
#[derive(Default)]
struct Idle {
    /// What progress looked like after the last event that made some.
    seen: (SimTime, u64, u64, u64, u64),
    ended: u64,
    events: u64,
}

impl Idle {
    fn after_event<O: Observer>(&mut self, run: &Looping<'_, O>) -> Result<(), SimError> {
        let now = (run.at.now, run.at.requests, run.at.steps, run.tap.rejected, self.ended + run.tap.done.len() as u64);
        if now != self.seen {
            (self.seen, self.events) = (now, 0);
            return Ok(());
        }
        self.events += 1;
        if self.events < MAX_IDLE_EVENTS {
            return Ok(());
        }
        Err(SimError::Stalled {
            why: format!(
                "{} events in a row took no step, issued or ended no request and did not move the clock: a \
                 scheduling rule that cannot make progress with this scenario (please report it)",
                thousands(MAX_IDLE_EVENTS)
            ),
            progress: run.at,
        })
    }
}

/// One way of arranging engines (one engine, replicas behind a router,
/// prefill and decode pools): the part of a run [`drive`] leaves to it.
pub trait Topology {
    /// What the run adds to what the observer saw (per-replica counts,
    /// where each request went).
    type Out;

    /// What comes next: the source's next arrival, or the topology's own
    /// event, whichever is earlier (arrivals first on ties, so a step
    /// starting at an arrival's instant can include it).
    fn next<S: Source>(&mut self, source: &S) -> Next;

    /// Places `req`, just taken from the source (routing it, or handing
    /// it to the engine).
    fn arrive<S: Source, O: Observer>(&mut self, req: Request, cx: &mut Cx<'_, S, O>) -> Result<(), SimError>;

    /// Runs the event [`Topology::next`] announced, counting its steps
    /// (`Looping::count_step`), checking the engines' clocks and calling
    /// `after_step` after each engine's step or stretch.
    fn event<S, O, F>(&mut self, cx: &mut Cx<'_, S, O>, after_step: &mut F) -> Result<(), SimError>
    where
        S: Source,
        O: Observer,
        F: FnMut(Place, &Engine, &mut O);

    /// Request `id` ended (finished, or rejected after it was placed).
    fn ended(&mut self, _id: RequestId) {}

    fn finish(self) -> Self::Out;
}

/// Runs `source` through `topology` until both are done, showing every
/// event to `obs` and calling `after_step` after every step (tests check
/// invariants there); `progress` hears how far the run has got now and
/// then.
pub fn drive<T, S, O, F>(
    topology: T,
    source: &mut S,
    obs: &mut O,
    setup: &Setup,
    after_step: F,
    progress: &mut dyn FnMut(&Progress),
) -> Result<T::Out, SimError>
where
    T: Topology,
    S: Source,
    O: Observer,
    F: FnMut(Place, &Engine, &mut O),
{
    // A delay of 0 changes no time; without the wrapper the loop is a
    // little leaner.
    match setup.delay_ns {
        0 => skeleton(topology, source, obs, setup, after_step, progress),
        ns => skeleton(topology, &mut Delayed { inner: source, ns }, obs, setup, after_step, progress),
    }
}

fn skeleton<T, S, O, F>(
    mut topology: T,
    source: &mut S,
    obs: &mut O,
    setup: &Setup,
    mut after_step: F,
    progress: &mut dyn FnMut(&Progress),
) -> Result<T::Out, SimError>
where
    T: Topology,
    S: Source,
    O: Observer,
    F: FnMut(Place, &Engine, &mut O),
{
    let tap = Tap { inner: obs, done: Vec::new(), rejected: 0, delay_ns: setup.delay_ns };
    let mut cx = Cx { source, run: Looping { tap, at: Progress::default(), setup, progress } };
    let mut idle = Idle::default();
    loop {
        match topology.next(&*cx.source) {
            Next::Arrival(when) => {
                let Some(req) = cx.pop_arrival(when)? else { continue };
                topology.arrive(req, &mut cx)?;
            }
            Next::Event(start) => {
                if let Some(t) = start {
                    cx.run.start_at(t)?;
                }
                topology.event(&mut cx, &mut after_step)?;
                idle.after_event(&cx.run)?;
                // Told after the step, so a closed loop's next request
                // follows from the finish before any later event.
                for (id, when, finished) in cx.run.tap.done.drain(..) {
                    idle.ended += 1;
                    topology.ended(id);
                    match finished {
                        true => cx.source.done(id, when),
                        false => cx.source.rejected(id, when),
                    }
                }
            }
            Next::Done => return Ok(topology.finish()),
        }
        cx.check_stalled()?;
        if cx.run.tap.wants_stop() {
            return Err(SimError::Cut { progress: cx.run.at });
        }
    }
}

#[cfg(test)]
mod tests;
