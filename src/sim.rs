//! The virtual-time driver: feeds a workload to the engine and runs steps
//! back to back, jumping over idle gaps. Simulated time is whatever the
//! engine says; no clock is read.

use crate::config::Scenario;
use crate::engine::prefix::hash::request_block_hashes;
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
pub fn drive_with<S, O, F>(engine: &mut Engine, source: &mut S, obs: &mut O, mut after_step: F)
where
    S: Source,
    O: Observer,
    F: FnMut(&Engine, &mut O),
{
    let mut tap = Tap { inner: obs, done: Vec::new() };
    let hashing = engine.config().prefix_caching;
    let block_size = engine.config().capacity.block_size;
    let mut hashes = Vec::new();
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
            let submitted = match hashing {
                // Content hashes only matter, and are only made, with prefix caching.
                true => {
                    request_block_hashes(&req, source.segments(), block_size, &mut hashes);
                    engine.submit_with_hashes(req, &hashes, &mut tap)
                }
                false => engine.submit(req, &mut tap),
            };
            if submitted.is_err() {
                source.rejected(req.id, at);
            }
        }
        engine.step(&mut tap);
        after_step(engine, tap.inner);
        for (id, at, finished) in tap.done.drain(..) {
            match finished {
                true => source.done(id, at),
                false => source.rejected(id, at),
            }
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
    drive(&mut engine, &mut source, &mut (&mut collector, extra));
    collector.finish(scenario)
}

/// Forwards events and remembers which requests are done (and whether
/// they finished), for closed loops and sessions.
struct Tap<'a, O> {
    inner: &'a mut O,
    done: Vec<(RequestId, SimTime, bool)>,
}

impl<O: Observer> Observer for Tap<'_, O> {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.inner.arrived(id, at, prompt, output);
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
}
