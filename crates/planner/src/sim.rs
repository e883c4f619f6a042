//! One engine as a [`Topology`] of the run loop ([`crate::run_driver::drive`]):
//! the workload is fed to the engine and steps run back to back, jumping
//! over idle gaps. Simulated time is whatever the engine says; no clock is
//! read.
//!
//! `latency.request_overhead_ms` (docs/deployments.md) lives on the
//! driver's side: a request reaches the engine that long after it
//! arrives, while every latency (queue time included) still counts from
//! the client's arrival, which is what observers are told.

use std::collections::VecDeque;

use crate::intake::Content;
use crate::run_driver::{Cx, Next, Place, SimError, Topology};
use crate::workload::Source;
use llmsim_core::engine::stretch::{Arrivals, Due};
use llmsim_core::engine::{Engine, Observer, Request};
use llmsim_core::time::SimTime;

/// One engine ([`Topology`]): every request that has arrived by a step's
/// start joins it (docs/engine.md section 3, step 1); an idle engine's
/// next step starts at the next arrival, but never before its clock.
/// With [`Stepping::MacroSteps`](crate::run_driver::Stepping), decode
/// stretches run in one call each, admitting the arrivals the
/// step-by-step path would admit whole.
pub struct Single<'a> {
    engine: &'a mut Engine,
    intake: Intake,
}

impl<'a> Single<'a> {
    pub fn new(engine: &'a mut Engine) -> Single<'a> {
        let intake = Intake::new(engine);
        Single { engine, intake }
    }
}

impl Topology for Single<'_> {
    type Out = ();

    fn next<S: Source>(&mut self, source: &S) -> Next {
        if let Some(h) = self.intake.held.front() {
            // A stretch took these from the source and left them out:
            // they join before any later arrival.
            return Next::Event(Some(self.engine.next_step_at().unwrap_or(h.req.arrival)));
        }
        match (self.engine.next_step_at(), source.peek()) {
            (Some(start), Some(when)) if when <= start => Next::Arrival(when),
            (Some(start), _) => Next::Event(Some(start)),
            (None, Some(when)) => Next::Arrival(when),
            (None, None) => Next::Done,
        }
    }

    fn arrive<S: Source, O: Observer>(&mut self, req: Request, cx: &mut Cx<'_, S, O>) -> Result<(), SimError> {
        self.intake.submit(self.engine, cx.source, &mut cx.run.tap, req);
        Ok(())
    }

    fn event<S, O, F>(&mut self, cx: &mut Cx<'_, S, O>, after_step: &mut F) -> Result<(), SimError>
    where
        S: Source,
        O: Observer,
        F: FnMut(Place, &Engine, &mut O),
    {
        if !self.intake.held.is_empty() {
            return self.intake.join_held(self.engine, cx);
        }
        let engine = &mut *self.engine;
        let stretch = match cx.run.setup.stepping {
            crate::run_driver::Stepping::Exact => 0,
            _ => self.intake.stretch(engine, cx),
        };
        if stretch == 0 && !self.intake.held.is_empty() {
            // The first step of the stretch left arrivals out: they join
            // the queue now and that step goes through `Engine::step`.
            return Ok(());
        }
        if stretch > 0 {
            cx.run.count_stretch(stretch);
        } else if engine.step(&mut cx.run.tap).is_some() {
            cx.run.count_step()?;
        }
        cx.run.check_clock(engine.clock())?;
        after_step(Place { pool: None, replica: 0 }, engine, cx.run.tap.inner);
        Ok(())
    }

    fn finish(self) {}
}

/// How requests reach the engine of a [`Single`]: their content (with
/// prefix caching, block hashes); the requests a stretch took from the
/// source but did not admit (in order), with their content; spare content
/// buffers.
struct Intake {
    content: Content,
    held: VecDeque<Held>,
    spare: Vec<Vec<u64>>,
}

impl Intake {
    fn new(engine: &Engine) -> Intake {
        Intake { content: Content::new(engine), held: VecDeque::new(), spare: Vec::new() }
    }

    /// The requests a stretch took from the source and left out join
    /// the engine's queue, in order (their content was taken when the
    /// stretch popped them).
    fn join_held<S: Source, O: Observer>(
        &mut self,
        engine: &mut Engine,
        cx: &mut Cx<'_, S, O>,
    ) -> Result<(), SimError> {
        while let Some(h) = self.held.pop_front() {
            let submitted = self.content.submit_taken(engine, h.req, &h.hashes, h.own_tail, &mut cx.run.tap);
            self.spare.push(h.hashes);
            if submitted.is_err() {
                cx.source.rejected(h.req.id, h.req.arrival);
            }
            cx.check_stalled()?;
        }
        Ok(())
    }

    /// Submits a request just taken from the source, with its content's
    /// hashes when they matter.
    fn submit<S: Source, O: Observer>(
        &mut self,
        engine: &mut Engine,
        source: &mut S,
        tap: &mut crate::run_driver::Tap<'_, O>,
        req: Request,
    ) {
        let when = req.arrival;
        // Content hashes only matter, and are only made, with prefix
        // caching, and for requests the engine does not refuse for their
        // length (which could be billions of tokens).
        self.content.read(&req, source);
        let submitted = self.content.submit(engine, req, tap);
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
    fn stretch<S: Source, O: Observer>(&mut self, engine: &mut Engine, cx: &mut Cx<'_, S, O>) -> u64 {
        let limits = &cx.run.setup.limits;
        let max_steps = limits.max_steps.saturating_sub(cx.run.at.steps).min(STRETCH_STEPS);
        let mut feed = Feed {
            source: &mut *cx.source,
            intake: self,
            requests: &mut cx.run.at.requests,
            max_requests: limits.max_requests,
        };
        engine.decode_stretch_admitting(limits.max_time, max_steps, &mut feed, &mut cx.run.tap)
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
            // As `Intake::submit` reads it.
            let own_tail = self.intake.content.read_into(&req, &*self.source, &mut hashes);
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
