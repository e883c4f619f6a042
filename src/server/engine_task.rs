//! The live driver: one task per `scheduler` model owns its [`Engine`] and
//! runs it on the wall clock (in the server, on a thread and runtime of its
//! own, built by the command line: `cli::serve`). Handlers talk to it only through commands
//! (no lock around the scheduler); it answers each request on that
//! request's own unbounded channel, which it never waits on.
//!
//! Time: a [`SimTime`] is nanoseconds since the server started. The loop
//! asks the engine when the next step starts (S), waits until the wall
//! clock gets there, computes the step [S, E] at once, then waits until E
//! and releases the step's tokens, recording how late it was (lag). The
//! next step starts at E whatever the lateness: the timeline is anchored.
//! Every wait is a deadline (`sleep_until`), never a chain of sleeps, and
//! commands are served while waiting.
//!
//! Arrivals: the handler stamps a request when it is received; the task
//! sets `arrival = max(stamp, start of the last computed step + 1 ns,
//! previous arrival)`. Arrivals so never go back and never join a step that
//! was already computed. This clamp is the only rounding between the live
//! server and `llmsim run` on the recorded trace: with the clamped arrivals
//! the two produce the same timeline to the nanosecond.

use std::collections::HashMap;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::clock::Clock;
use super::protocol::{Command, Event, Sinks, Submit, lock};
use super::stats::{Finish, Story};
use crate::engine::{Engine, Observer, RejectReason, Request, RequestId, StepRecord};
use crate::metrics::{RequestRecord, Status};
use crate::time::SimTime;

/// A request the engine holds.
struct Live {
    ticket: u64,
    events: UnboundedSender<Event>,
    story: Story,
    finish: Finish,
    max_tokens: Option<u32>,
    n: u32,
    epoch: u64,
}

/// What a step produced, kept until its end time.
enum Out {
    Token(RequestId, u32),
    Finished(RequestId),
    Rejected(RequestId, RejectReason),
}

/// Routes engine events to the live requests and buffers releases.
struct Router<'a> {
    live: &'a mut HashMap<RequestId, Live>,
    out: &'a mut Vec<Out>,
    in_step: &'a mut Vec<RequestId>,
    /// Prefix-cache lookups of the step: (tokens queried, hit).
    lookups: Vec<(u32, u32)>,
}

impl Observer for Router<'_> {
    fn scheduled(&mut self, id: RequestId, at: SimTime, _tokens: u32, _computed: u32) {
        if let Some(l) = self.live.get_mut(&id) {
            l.story.rec.first_scheduled.get_or_insert(at);
            l.story.steps += 1;
            self.in_step.push(id);
        }
    }
    fn preempted(&mut self, id: RequestId, _at: SimTime) {
        if let Some(l) = self.live.get_mut(&id) {
            l.story.rec.preemptions += 1;
        }
    }
    fn token(&mut self, id: RequestId, _at: SimTime, index: u32) {
        self.out.push(Out::Token(id, index));
    }
    fn finished(&mut self, id: RequestId, _at: SimTime) {
        self.out.push(Out::Finished(id));
    }
    fn rejected(&mut self, id: RequestId, _at: SimTime, reason: RejectReason) {
        self.out.push(Out::Rejected(id, reason));
    }
    fn prefix_lookup(&mut self, id: RequestId, _at: SimTime, queried: u32, hit: u32) {
        if let Some(l) = self.live.get_mut(&id) {
            // As the planner's collector: a request's cached tokens are its
            // hit at its first admission; the counters add every lookup.
            l.story.rec.cached_tokens.get_or_insert(hit);
        }
        self.lookups.push((queried, hit));
    }
    fn step(&mut self, step: &StepRecord) {
        for id in self.in_step.drain(..) {
            if let Some(l) = self.live.get_mut(&id) {
                l.story.batch_sum += u64::from(step.batch_size);
            }
        }
    }
}

/// The task's state. Build with [`EngineTask::new`], run with [`EngineTask::run`].
pub struct EngineTask {
    engine: Engine,
    rx: UnboundedReceiver<Command>,
    clock: Clock,
    sinks: Sinks,
    live: HashMap<RequestId, Live>,
    tickets: HashMap<u64, RequestId>,
    next_id: RequestId,
    last_arrival: SimTime,
    /// Start of the last step computed: later arrivals must come after it.
    last_step_start: Option<SimTime>,
    out: Vec<Out>,
    in_step: Vec<RequestId>,
}

impl EngineTask {
    pub fn new(engine: Engine, rx: UnboundedReceiver<Command>, clock: Clock, sinks: Sinks) -> EngineTask {
        sinks.gauges.kv_total.store(u64::from(engine.kv_blocks_total()), std::sync::atomic::Ordering::Relaxed);
        EngineTask {
            engine,
            rx,
            clock,
            sinks,
            live: HashMap::new(),
            tickets: HashMap::new(),
            next_id: 0,
            last_arrival: SimTime::ZERO,
            last_step_start: None,
            out: Vec::new(),
            in_step: Vec::new(),
        }
    }

    /// Runs until every command sender is gone.
    pub async fn run(mut self) {
        let mut idle_steps = 0;
        loop {
            if !self.drain(None) {
                return;
            }
            let Some(start) = self.engine.next_step_at().filter(|_| idle_steps < 2) else {
                idle_steps = 0;
                match self.rx.recv().await {
                    Some(cmd) => self.handle(cmd, None),
                    None => return,
                }
                continue;
            };
            if self.clock.now() < start {
                if !self.wait_until(start, None).await {
                    return;
                }
                continue;
            }
            let record = self.step();
            match record {
                Some(r) => {
                    idle_steps = 0;
                    if !self.wait_until(r.end, Some(r.end)).await {
                        return;
                    }
                    self.release(r.end, r.tokens, r.preempted);
                }
                None => {
                    // Nothing was scheduled (e.g. a preemption emptied the
                    // batch); retry once, then wait for a command.
                    idle_steps += 1;
                    let now = self.clock.now();
                    self.release(now, 0, 0);
                }
            }
        }
    }

    fn step(&mut self) -> Option<StepRecord> {
        let mut router =
            Router { live: &mut self.live, out: &mut self.out, in_step: &mut self.in_step, lookups: Vec::new() };
        let record = self.engine.step(&mut router);
        let lookups = router.lookups;
        self.in_step.clear();
        if !lookups.is_empty() {
            let mut stats = lock(&self.sinks.stats);
            for (queried, hit) in lookups {
                stats.prefix_lookup(queried, hit);
            }
        }
        if let Some(r) = &record {
            self.last_step_start = Some(r.start);
        }
        self.update_gauges();
        record
    }

    /// Serves commands until the wall clock reaches `t`. `step_end` is the
    /// end of the step in flight, if any (aborts are stamped with it).
    /// Returns false when every sender is gone.
    async fn wait_until(&mut self, t: SimTime, step_end: Option<SimTime>) -> bool {
        let sleep = tokio::time::sleep_until(self.clock.instant(self.clock.coarse(t)));
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                biased;
                () = &mut sleep => {
                    self.clock.finish_wait(t).await;
                    return true;
                }
                cmd = self.rx.recv() => match cmd {
                    Some(cmd) => {
                        self.handle(cmd, step_end);
                        if !self.drain(step_end) {
                            return false;
                        }
                    }
                    None => return false,
                },
            }
        }
    }

    /// Handles every command already queued. False when the channel closed.
    fn drain(&mut self, step_end: Option<SimTime>) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => self.handle(cmd, step_end),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        self.update_gauges();
        true
    }

    fn handle(&mut self, cmd: Command, step_end: Option<SimTime>) {
        match cmd {
            Command::Submit(s) => self.submit(s),
            Command::Abort { ticket } => {
                let at = step_end.unwrap_or_else(|| self.clock.now().max(self.engine.clock()));
                self.abort(ticket, at);
            }
        }
    }

    fn submit(&mut self, Submit { ticket, req: s, events }: Submit) {
        let floor = self.last_step_start.map_or(SimTime::ZERO, |t| t.plus_nanos(1));
        let arrival = s.stamp.max(floor).max(self.last_arrival);
        self.last_arrival = arrival;
        let id = self.next_id;
        self.next_id += 1;
        if let Some(rec) = &self.sinks.recorder {
            let (rid, _) = lock(rec).begin_with_blocks(arrival, s.prompt, s.output, &s.hashes);
            debug_assert_eq!(rid, id, "recorder and engine ids agree");
        }
        let request = Request { id, arrival, prompt: s.prompt, output: s.output };
        let rec = RequestRecord::new(id, arrival, s.prompt, s.output);
        let live = Live {
            ticket,
            events,
            story: Story { rec, steps: 0, batch_sum: 0 },
            finish: s.finish,
            max_tokens: s.max_tokens,
            n: s.n,
            epoch: s.epoch,
        };
        match self.engine.submit_with_hashes(request, &s.hashes, &mut ()) {
            Ok(()) => {
                let _ = live.events.send(Event::Accepted { id, arrival });
                lock(&self.sinks.stats).accepted(s.prompt, s.epoch);
                self.tickets.insert(ticket, id);
                self.live.insert(id, live);
            }
            Err(reason) => self.end_rejected(live, reason),
        }
    }

    fn abort(&mut self, ticket: u64, at: SimTime) {
        let Some(id) = self.tickets.remove(&ticket) else { return };
        let Some(mut live) = self.live.remove(&id) else { return };
        self.engine.abort(id, at, &mut ());
        live.story.rec.status = Status::Aborted;
        lock(&self.sinks.stats).aborted(live.epoch);
        self.record(&live.story.rec);
    }

    /// Hands the buffered step output to the handlers at `due`.
    fn release(&mut self, due: SimTime, tokens: u32, preempted: u32) {
        let lag = self.clock.now().nanos_since(due);
        let mut rejected = Vec::new();
        let mut stats = lock(&self.sinks.stats);
        if tokens > 0 {
            stats.step(tokens, preempted);
        }
        let mut released = 0;
        for out in self.out.drain(..) {
            match out {
                Out::Token(id, index) => {
                    let Some(l) = self.live.get_mut(&id) else { continue };
                    let (ttft, gap) = l.story.rec.add_token(due, index).split();
                    stats.token(ttft, gap, l.epoch);
                    released += 1;
                    let _ = l.events.send(Event::Token { index, due });
                }
                Out::Finished(id) => {
                    let Some(mut l) = self.live.remove(&id) else { continue };
                    self.tickets.remove(&l.ticket);
                    l.story.rec.status = Status::Finished;
                    stats.finished(&l.story, l.finish, l.max_tokens, l.n, l.epoch);
                    if let Some(rec) = &self.sinks.recorder {
                        lock(rec).complete(&l.story.rec);
                    }
                    let _ = l.events.send(Event::Done(Box::new(l.story)));
                }
                Out::Rejected(id, reason) => {
                    let Some(l) = self.live.remove(&id) else { continue };
                    self.tickets.remove(&l.ticket);
                    stats.rejected(l.epoch);
                    rejected.push((l, reason));
                }
            }
        }
        stats.lag(lag, released);
        drop(stats);
        for (l, reason) in rejected {
            self.end_rejected(l, reason);
        }
    }

    fn end_rejected(&mut self, mut live: Live, reason: RejectReason) {
        live.story.rec.status = Status::Rejected(reason);
        if reason == RejectReason::ContextLength {
            lock(&self.sinks.stats).rejected(live.epoch);
        }
        self.record(&live.story.rec);
        let _ = live.events.send(Event::Rejected(reason));
    }

    fn record(&self, rec: &RequestRecord) {
        if let Some(r) = &self.sinks.recorder {
            lock(r).complete(rec);
        }
    }

    fn update_gauges(&self) {
        let e = &self.engine;
        let waiting = e.num_waiting() + e.num_pending();
        self.sinks.gauges.set(e.num_running() as u64, waiting as u64, u64::from(e.kv_blocks_used()));
    }
}

#[cfg(test)]
mod tests;
