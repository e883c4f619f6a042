//! The virtual-time driver: feeds a workload to the engine and runs steps
//! back to back, jumping over idle gaps. Simulated time is whatever the
//! engine says; no clock is read.
//!
//! `latency.request_overhead_ms` (docs/deployments.md) lives here, on
//! the driver's side: a request reaches the engine that long after it
//! arrives, while every latency (queue time included) still counts from
//! the client's arrival, which is what observers are told.
//!
//! Every run is bounded ([`RunLimits`], from [`llmsim_scenario::config::limits`]):
//! simulated time, requests issued and engine steps. A run that reaches a
//! bound stops with a [`SimError`] saying which and what to change, rather
//! than running for hours, exhausting memory, or saturating the clock and
//! reporting a wrong number.

use std::collections::VecDeque;

use crate::metrics::{Collector, CollectorOptions, RunOutput};
use llmsim_core::engine::prefix::hash::{BlockHashes, request_block_hashes, request_shared_hashes};
use llmsim_core::engine::stretch::{Arrivals, Due};
use llmsim_core::engine::{Engine, Observer, Request};
use llmsim_scenario::config::Scenario;
// The run's bounds, progress and stop error live below `sim` and `cluster`
// (both drive engines); the old paths stay.
// (Also re-exported for the crate: `crate::sim::{Tap, ..}` was their path.)
use crate::run_driver::fits_context;
pub(crate) use crate::run_driver::{Delayed, PROGRESS_EVERY, Tap};
pub use crate::run_driver::{Progress, RunLimits, SimError};
use crate::workload::{AnySource, Source};
use llmsim_core::time::SimTime;

/// Runs `source` through `engine` until both are exhausted, within the
/// default [`RunLimits`].
pub fn drive<S: Source, O: Observer>(engine: &mut Engine, source: &mut S, obs: &mut O) -> Result<(), SimError> {
    drive_with(engine, source, obs, |_, _| {})
}

/// [`drive`], calling `after_step` with the engine and the observer after
/// every step (tests use it to check invariants between steps).
pub fn drive_with<S, O, F>(engine: &mut Engine, source: &mut S, obs: &mut O, after_step: F) -> Result<(), SimError>
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    drive_limited(engine, source, obs, &RunLimits::default(), 0, after_step, &mut |_| {})
}

/// [`drive_with`], each request reaching the engine `delay_ns` after its
/// arrival; observers see the arrival itself.
pub fn drive_delayed<S, O, F>(
    engine: &mut Engine,
    source: &mut S,
    obs: &mut O,
    delay_ns: u64,
    after_step: F,
) -> Result<(), SimError>
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    drive_limited(engine, source, obs, &RunLimits::default(), delay_ns, after_step, &mut |_| {})
}

/// The driver itself: [`drive_delayed`] within `limits`, reporting
/// progress every `PROGRESS_EVERY` (65,536) steps.
pub fn drive_limited<S, O, F>(
    engine: &mut Engine,
    source: &mut S,
    obs: &mut O,
    limits: &RunLimits,
    delay_ns: u64,
    after_step: F,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(), SimError>
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    drive_stepping(engine, source, obs, limits, delay_ns, Stepping::Exact, after_step, progress)
}

/// How the driver advances the engine (kept in `run_driver`, which the
/// cluster loops share, so `cluster` need not import `sim`).
pub use crate::run_driver::Stepping;

/// [`drive_limited`], choosing how the engine advances.
#[allow(clippy::too_many_arguments)]
pub fn drive_stepping<S, O, F>(
    engine: &mut Engine,
    source: &mut S,
    obs: &mut O,
    limits: &RunLimits,
    delay_ns: u64,
    stepping: Stepping,
    after_step: F,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(), SimError>
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    let mut tap = Tap { inner: obs, done: Vec::new(), rejected: 0, delay_ns };
    if delay_ns == 0 {
        drive_loop(engine, source, &mut tap, limits, stepping, after_step, progress)
    } else {
        let mut delayed = Delayed { inner: source, ns: delay_ns };
        drive_loop(engine, &mut delayed, &mut tap, limits, stepping, after_step, progress)
    }
}

fn drive_loop<S, O, F>(
    engine: &mut Engine,
    source: &mut S,
    tap: &mut Tap<'_, O>,
    limits: &RunLimits,
    stepping: Stepping,
    mut after_step: F,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(), SimError>
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    let mut at = Progress::default();
    let mut intake = Intake::new(engine);
    loop {
        // An idle engine's next step starts at the next arrival, but never
        // before the engine's clock: requests that arrived while the last
        // step ran all join the next one (docs/engine.md section 3, step 1).
        let start = match engine.next_step_at() {
            Some(t) => t,
            None => match source.peek() {
                Some(t) => t.max(engine.clock()),
                None => break,
            },
        };
        at.now = start;
        if start > limits.max_time {
            return Err(SimError::TimeLimit { at: start, limit: limits.max_time, progress: at });
        }
        intake.join_due(engine, source, tap, limits, start, &mut at)?;
        let stretch = match stepping {
            Stepping::MacroSteps | Stepping::MacroStepsInOrder => intake.stretch(engine, source, tap, limits, &mut at),
            Stepping::Exact => 0,
        };
        if stretch == 0 && !intake.held.is_empty() {
            // The first step of the stretch left arrivals out: they join
            // the queue now and that step goes through `Engine::step`.
            continue;
        }
        if stretch > 0 {
            at.steps += stretch;
            if at.steps / PROGRESS_EVERY != (at.steps - stretch) / PROGRESS_EVERY {
                progress(&at);
            }
        } else if engine.step(tap).is_some() {
            at.steps += 1;
            if at.steps > limits.max_steps {
                return Err(SimError::TooManySteps { limit: limits.max_steps, progress: at });
            }
            if at.steps % PROGRESS_EVERY == 0 {
                progress(&at);
            }
        }
        if engine.clock() > limits.max_time {
            return Err(SimError::TimeLimit { at: engine.clock(), limit: limits.max_time, progress: at });
        }
        after_step(engine, tap.inner);
        for (id, when, finished) in tap.done.drain(..) {
            match finished {
                true => source.done(id, when),
                false => source.rejected(id, when),
            }
        }
        if let Some(why) = source.stalled() {
            return Err(SimError::Stalled { why, progress: at });
        }
    }
    Ok(())
}

/// How requests reach the engine in [`drive_loop`]: with prefix caching,
/// each with its content's block hashes; the requests a stretch took from
/// the source but did not admit (in order), with their content; spare
/// content buffers.
struct Intake {
    hashing: bool,
    block_size: u32,
    /// Longer requests are refused for their length: no content is made.
    context: u32,
    hashes: BlockHashes,
    held: VecDeque<Held>,
    spare: Vec<Vec<u64>>,
}

impl Intake {
    fn new(engine: &Engine) -> Intake {
        Intake {
            hashing: engine.config().prefix_caching,
            block_size: engine.config().capacity.block_size,
            context: engine.config().context_length,
            hashes: BlockHashes::default(),
            held: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// Every request that has arrived by the step's `start` joins it
    /// (first those a stretch took from the source but left out).
    fn join_due<S: Source, O: Observer>(
        &mut self,
        engine: &mut Engine,
        source: &mut S,
        tap: &mut Tap<'_, O>,
        limits: &RunLimits,
        start: SimTime,
        at: &mut Progress,
    ) -> Result<(), SimError> {
        loop {
            if let Some(h) = self.held.pop_front() {
                // Its content was taken when the stretch popped it.
                let submitted = match (self.hashing, h.own_tail) {
                    (true, true) => engine.submit_with_content(h.req, &h.hashes, tap),
                    (true, false) => engine.submit_with_hashes(h.req, &h.hashes, tap),
                    (false, _) => engine.submit(h.req, tap),
                };
                self.spare.push(h.hashes);
                if submitted.is_err() {
                    source.rejected(h.req.id, h.req.arrival);
                }
            } else {
                if source.peek().is_none_or(|when| when > start) {
                    return Ok(());
                }
                let Some(req) = source.pop() else { return Ok(()) };
                at.requests += 1;
                if at.requests > limits.max_requests {
                    let (limit, rejected) = (limits.max_requests, tap.rejected);
                    return Err(SimError::TooManyRequests { limit, rejected, progress: *at });
                }
                self.submit(engine, source, tap, req);
            }
            if let Some(why) = source.stalled() {
                return Err(SimError::Stalled { why, progress: *at });
            }
        }
    }

    /// Submits a request just taken from the source, with its content's
    /// hashes when they matter.
    fn submit<S: Source, O: Observer>(
        &mut self,
        engine: &mut Engine,
        source: &mut S,
        tap: &mut Tap<'_, O>,
        req: Request,
    ) {
        let when = req.arrival;
        let submitted = match self.hashing && fits_context(&req, self.context) {
            // Content hashes only matter, and are only made, with prefix
            // caching, and for requests the engine does not refuse for
            // their length (which could be billions of tokens).
            true => match (source.block_hashes(), source.own_from()) {
                (Some(named), _) => engine.submit_with_hashes(req, named, tap),
                // Blocks of the request's own content are not hashed:
                // nothing else can hit them (docs/prefix-caching.md, "Speed").
                (None, Some(own_from)) => {
                    request_shared_hashes(&req, source.segments(), own_from, self.block_size, &mut self.hashes);
                    engine.submit_with_content(req, &self.hashes, tap)
                }
                (None, None) => {
                    request_block_hashes(&req, source.segments(), self.block_size, &mut self.hashes);
                    engine.submit_with_hashes(req, &self.hashes, tap)
                }
            },
            false => engine.submit(req, tap),
        };
        if submitted.is_err() {
            source.rejected(req.id, when);
        }
    }

    /// Takes a decode stretch (0 steps when the engine is not in one).
    /// Arrivals the step-by-step path would admit whole join the stretch
    /// (with prefix caching, with their content); any other stops it
    /// before its step, or one that would break a limit: the next call of
    /// `step` then meets it as the step-by-step path would. A finish inside
    /// the stretch is told to the source at once, as after a step: a
    /// closed loop's next arrival may follow from it.
    fn stretch<S: Source, O: Observer>(
        &mut self,
        engine: &mut Engine,
        source: &mut S,
        tap: &mut Tap<'_, O>,
        limits: &RunLimits,
        at: &mut Progress,
    ) -> u64 {
        let max_steps = limits.max_steps.saturating_sub(at.steps).min(STRETCH_STEPS);
        let mut feed = Feed { source, intake: self, requests: &mut at.requests, max_requests: limits.max_requests };
        engine.decode_stretch_admitting(limits.max_time, max_steps, &mut feed, tap)
    }
}

/// Steps one stretch takes at most, so its scratch space stays small:
/// its step records (96 bytes each, about 100 KB here) stay in a core's
/// second-level cache together with the state of the requests in flight.
/// At 4096 (400 KB) they pushed that state out: every request's pool
/// slot, content buffer and engine slot came back from memory (the
/// shared-prefix run missed a 1 MB cache 2.2M times, now 0.45M; about
/// 12% of its time). Where a stretch is cut changes no figure (the
/// result JSON of the plain, unique and shared-prefix runs of
/// docs/performance.md is the same at 4096, 1024 and 512); shorter
/// stretches cost set-up work (512: +1% instructions, 128: +7%).
const STRETCH_STEPS: u64 = 1024;

/// A request a stretch took from the source and did not hand to the
/// engine, with its content as the driver would submit it (taken when it
/// was popped: a source's content is that of the request popped last).
struct Held {
    req: Request,
    /// Its block hashes (empty without prefix caching) and whether the
    /// blocks past them are its own ([`Engine::submit_with_content`]).
    hashes: Vec<u64>,
    own_tail: bool,
}

/// The source as a stretch sees it ([`Arrivals`]): requests due by a
/// step's start are taken from the source (counted as issued, as the
/// driver counts them) and held until the engine admits them; those it
/// leaves out stay in `held`, and the driver submits them first.
struct Feed<'a, S> {
    source: &'a mut S,
    /// The driver's intake: the held requests, spare content buffers, and
    /// (with prefix caching) how each request's content is taken as it is
    /// popped.
    intake: &'a mut Intake,
    requests: &'a mut u64,
    max_requests: u64,
}

impl<S: Source> Arrivals for Feed<'_, S> {
    fn next_at(&mut self) -> Option<SimTime> {
        if self.source.stalled().is_some() {
            return Some(SimTime::ZERO);
        }
        match self.intake.held.front() {
            Some(h) => Some(h.req.arrival),
            None => self.source.peek(),
        }
    }

    fn due(&mut self, at: SimTime, k: usize) -> Due {
        while self.intake.held.len() <= k {
            match self.source.peek() {
                Some(when) if when <= at => {}
                _ => return Due::None,
            }
            // The driver reports these (the request limit, a stall).
            if *self.requests >= self.max_requests || self.source.stalled().is_some() {
                return Due::Refused;
            }
            let Some(req) = self.source.pop() else { return Due::None };
            *self.requests += 1;
            let mut hashes = self.intake.spare.pop().unwrap_or_default();
            hashes.clear();
            let mut own_tail = false;
            if self.intake.hashing && fits_context(&req, self.intake.context) {
                // As the driver submits it (see `drive_loop`).
                let (source, bs, memo) = (&*self.source, self.intake.block_size, &mut self.intake.hashes);
                match (source.block_hashes(), source.own_from()) {
                    (Some(named), _) => hashes.extend_from_slice(named),
                    // The hashes made go with the request, and the memo
                    // takes its empty buffer (no copy).
                    (None, Some(own_from)) => {
                        request_shared_hashes(&req, source.segments(), own_from, bs, memo);
                        std::mem::swap(&mut hashes, &mut **memo);
                        own_tail = true;
                    }
                    (None, None) => {
                        request_block_hashes(&req, source.segments(), bs, memo);
                        std::mem::swap(&mut hashes, &mut **memo);
                    }
                }
            }
            self.intake.held.push_back(Held { req, hashes, own_tail });
        }
        if self.source.stalled().is_some() {
            return Due::Refused;
        }
        Due::Request(self.intake.held[k].req)
    }

    fn take(&mut self, k: usize) {
        for h in self.intake.held.drain(..k) {
            self.intake.spare.push(h.hashes);
        }
    }

    fn content(&self, k: usize) -> (&[u64], bool) {
        let h = &self.intake.held[k];
        (&h.hashes, h.own_tail)
    }

    fn move_content(&mut self, k: usize, buf: &mut Vec<u64>) -> bool {
        let h = &mut self.intake.held[k];
        std::mem::swap(buf, &mut h.hashes);
        h.own_tail
    }

    fn finished(&mut self, id: llmsim_core::engine::RequestId, at: SimTime) {
        self.source.done(id, at);
    }
}

/// Runs a scenario and collects its metrics.
pub fn run(scenario: &Scenario, options: CollectorOptions) -> Result<RunOutput, SimError> {
    run_observed(scenario, options, &mut ())
}

/// Runs a scenario, collecting metrics and also showing every event to `extra`.
pub fn run_observed<O: Observer>(
    scenario: &Scenario,
    options: CollectorOptions,
    extra: &mut O,
) -> Result<RunOutput, SimError> {
    run_with_progress(scenario, options, extra, &mut |_| {})
}

/// [`run_observed`], reporting progress now and then (for a progress bar).
pub fn run_with_progress<O: Observer>(
    scenario: &Scenario,
    options: CollectorOptions,
    extra: &mut O,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunOutput, SimError> {
    run_collecting(scenario, Collector::new(&scenario.capacity, options), extra, progress, Stepping::default())
}

/// [`run_with_progress`] for a caller that reads only the summary: no
/// per-request record is kept once a request has ended
/// ([`Collector::summary_only`]), so memory stays flat in requests. The
/// result is the same; [`RunOutput::requests`] holds only requests still
/// in flight (a `cluster:` run's collectors too).
pub fn run_summary<O: Observer>(
    scenario: &Scenario,
    options: CollectorOptions,
    extra: &mut O,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunOutput, SimError> {
    let collector = Collector::new(&scenario.capacity, options).summary_only();
    run_collecting(scenario, collector, extra, progress, Stepping::default())
}

/// Runs a scenario into `collector` ([`Collector::summary_only`] or not),
/// advancing the engine as `stepping` says.
pub fn run_collecting<O: Observer>(
    scenario: &Scenario,
    mut collector: Collector,
    extra: &mut O,
    progress: &mut dyn FnMut(&Progress),
    stepping: Stepping,
) -> Result<RunOutput, SimError> {
    if let Some(cluster) = &scenario.cluster {
        // The cluster's own collectors, with the options the caller gave,
        // keeping records only if it does.
        let (options, summary) = (collector.options(), collector.is_summary_only());
        return crate::cluster::run(scenario, cluster, options, summary, extra, progress, stepping);
    }
    let mut engine = Engine::new(scenario.engine_config());
    let mut source = AnySource::new(scenario);
    let limits = RunLimits::default();
    let delay_ns = llmsim_core::time::secs_to_nanos(scenario.latency.request_overhead_ms / 1e3);
    let obs = &mut (&mut collector, extra);
    drive_stepping(&mut engine, &mut source, obs, &limits, delay_ns, stepping, |_, _| {}, progress)?;
    Ok(collector.finish(scenario))
}
