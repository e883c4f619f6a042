//! What every virtual-time driver shares: the single-engine loop of
//! [`crate::sim`] and the cluster loops of [`crate::cluster`] bound a run
//! the same way ([`RunLimits`], from [`llmsim_scenario::config::limits`]), report
//! [`Progress`] the same way, stop with the same [`SimError`], delay
//! arrivals by `latency.request_overhead_ms` with `Delayed` and watch
//! requests end through `Tap`. It sits below both, so `sim` can hand a
//! `cluster:` scenario to `cluster` without a circle.

use std::fmt;

use crate::workload::Source;
use llmsim_core::engine::{Observer, RejectReason, RequestId, StepRecord};
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
                 may issue; set workload.requests, or a shorter workload.duration_s{}",
                progress.now,
                thousands(*limit),
                thousands(*rejected),
                if *rejected * 2 > *limit {
                    ", and check why requests are rejected (too long for the context or the KV cache)"
                } else {
                    ""
                }
            ),
            SimError::TooManySteps { limit, progress } => write!(
                f,
                "the run stopped at t = {} s after {} engine steps, the most one run may take (about 7 \
                 minutes of work); set fewer workload.requests or a shorter workload.duration_s",
                progress.now,
                thousands(*limit),
            ),
            SimError::Stalled { why, progress } => write!(f, "the run stopped at t = {} s: {why}", progress.now),
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
