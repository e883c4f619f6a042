//! The virtual-time driver: feeds a workload to the engine and runs steps
//! back to back, jumping over idle gaps. Simulated time is whatever the
//! engine says; no clock is read.
//!
//! `latency.request_overhead_ms` (DEPLOYMENT.md section 2) lives here, on
//! the driver's side: a request reaches the engine that long after it
//! arrives, while every latency (queue time included) still counts from
//! the client's arrival, which is what observers are told.

use crate::config::Scenario;
use crate::engine::{Engine, Observer, RejectReason, RequestId, StepRecord};
use crate::metrics::{Collector, CollectorOptions, RunOutput};
use crate::time::SimTime;
use crate::workload::{AnySource, Source};

/// Runs `source` through `engine` until both are exhausted.
pub fn drive<S: Source, O: Observer>(engine: &mut Engine, source: &mut S, obs: &mut O) {
    drive_with(engine, source, obs, |_, _| {});
}

/// [`drive`], calling `after_step` with the engine and the observer after
/// every step (tests use it to check invariants between steps).
pub fn drive_with<S, O, F>(engine: &mut Engine, source: &mut S, obs: &mut O, after_step: F)
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    drive_loop(engine, source, &mut Tap { inner: obs, done: Vec::new(), delay_ns: 0 }, after_step);
}

/// [`drive_with`], each request reaching the engine `delay_ns` after its
/// arrival; observers see the arrival itself.
pub fn drive_delayed<S, O, F>(engine: &mut Engine, source: &mut S, obs: &mut O, delay_ns: u64, after_step: F)
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    let mut tap = Tap { inner: obs, done: Vec::new(), delay_ns };
    if delay_ns == 0 {
        drive_loop(engine, source, &mut tap, after_step);
    } else {
        drive_loop(engine, &mut Delayed { inner: source, ns: delay_ns }, &mut tap, after_step);
    }
}

fn drive_loop<S, O, F>(engine: &mut Engine, source: &mut S, tap: &mut Tap<'_, O>, mut after_step: F)
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    loop {
        let start = match engine.next_step_at() {
            Some(t) => t,
            None => match source.peek() {
                Some(t) => t,
                None => break,
            },
        };
        // Every request that has arrived by the step's start joins it.
        while let Some(at) = source.peek().filter(|&at| at <= start) {
            let Some(req) = source.pop() else { break };
            if engine.submit(req, tap).is_err() {
                source.done(req.id, at);
            }
        }
        engine.step(tap);
        after_step(engine, tap.inner);
        for (id, at) in tap.done.drain(..) {
            source.done(id, at);
        }
    }
}

/// Runs a scenario and collects its metrics.
pub fn run(scenario: &Scenario, options: CollectorOptions) -> RunOutput {
    run_observed(scenario, options, &mut ())
}

/// Runs a scenario, collecting metrics and also showing every event to `extra`.
pub fn run_observed<O: Observer>(scenario: &Scenario, options: CollectorOptions, extra: &mut O) -> RunOutput {
    let mut engine = Engine::new(scenario.engine_config());
    let mut source = AnySource::new(scenario);
    let mut collector = Collector::new(scenario.capacity.num_blocks, options);
    let delay_ns = crate::time::secs_to_nanos(scenario.latency.request_overhead_ms / 1e3);
    drive_delayed(&mut engine, &mut source, &mut (&mut collector, extra), delay_ns, |_, _| {});
    collector.finish(scenario)
}

/// A source whose requests reach the engine `ns` after they arrive.
struct Delayed<'a, S> {
    inner: &'a mut S,
    ns: u64,
}

impl<S: Source> Source for Delayed<'_, S> {
    fn peek(&self) -> Option<SimTime> {
        self.inner.peek().map(|t| t.plus_nanos(self.ns))
    }
    fn pop(&mut self) -> Option<crate::engine::Request> {
        let mut req = self.inner.pop()?;
        req.arrival = req.arrival.plus_nanos(self.ns);
        Some(req)
    }
    fn done(&mut self, id: RequestId, at: SimTime) {
        self.inner.done(id, at);
    }
}

/// Forwards events and remembers which requests are done, for closed
/// loops; reports arrivals at the client's time (before the delay).
struct Tap<'a, O> {
    inner: &'a mut O,
    done: Vec<(RequestId, SimTime)>,
    delay_ns: u64,
}

impl<O: Observer> Observer for Tap<'_, O> {
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
        self.done.push((id, at));
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.inner.rejected(id, at, reason);
        // Rejections on arrival are reported by `submit`'s result instead.
        if reason != RejectReason::ContextLength {
            self.done.push((id, at));
        }
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.inner.aborted(id, at);
    }
    fn step(&mut self, step: &StepRecord) {
        self.inner.step(step);
    }
}
