//! The live driver: one task per `scheduler` model owns its engines (one
//! per replica) and runs them on the wall clock (in the server, on a
//! thread and runtime of its own, built by the command line: `cli::serve`).
//! Handlers talk to it only through commands (no lock around the
//! scheduler); it answers each request on that request's own unbounded
//! channel, which it never waits on.
//!
//! Time: a [`SimTime`] is nanoseconds since the server started. For each
//! replica the loop asks the engine when its next step starts (S), waits
//! until the wall clock gets there, computes the step [S, E] at once, then
//! waits until E and releases the step's tokens, recording how late it was
//! (lag). The next step starts at E whatever the lateness: the timeline is
//! anchored. With several replicas the task always does the earliest of
//! their next events (a release at some E, a step at some S; releases
//! first, then the lowest replica). Every wait is a deadline
//! (`sleep_until`), never a chain of sleeps, and commands are served while
//! waiting.
//!
//! Arrivals: the handler stamps a request when it is received; the task
//! sets `arrival = max(stamp, start of the last computed step (of any
//! replica) + 1 ns, previous arrival)`. Arrivals so never go back and never
//! join a step that was already computed. This clamp is the only rounding
//! between the live server and `llmsim run` on the recorded trace: with the
//! clamped arrivals the two produce the same timeline to the nanosecond.
//!
//! Replicas (`cluster:` in the models file): before a request is routed,
//! every step of every replica that starts strictly before its arrival is
//! computed (they are all due by then), so the router sees exactly what the
//! planner's cluster loop shows it (`llmsim_planner::cluster`, docs/clusters.md),
//! and routes with the same code (`llmsim_planner::cluster::router`). A request too
//! long for the context is turned away before routing and takes no
//! round-robin turn, as in the planner. `session_affinity` routes by the
//! request's session key (the `x-session-id` header, else the body's
//! `user`; see `routes::session_key`): a session's first request goes to
//! the least outstanding replica and every later one follows it; a request
//! without a key routes as `least_outstanding`, as the planner's do. The
//! server cannot tell when a conversation ends, so it never forgets one
//! (a map entry per distinct key for the server's lifetime).
//!
//! Admission (vLLM's `--max-num-queued-reqs`, `--max-num-queued-tokens`,
//! the models file's keys of the same names; vLLM 0.33.0's
//! `AsyncLLM.check_admission`): vLLM checks twice, in its serving layer
//! before it renders the prompt (`_preflight(request.n or 1)`, done by the
//! handler on the counts this task publishes in its [`Admission`]) and as a
//! request enters the engine, once per prompt with the prompt's `n` (done
//! here, on the exact counts). A request is refused (503) when the
//! sequences in flight (waiting or running, every choice counted) plus its
//! `n` would pass `max_num_queued_reqs`, else when the prompt tokens of the
//! sequences still in prefill (no token handed out yet; the whole prompt,
//! however much of it is computed or cached; each choice its own prompt)
//! already add up to `max_num_queued_tokens`. The counts are the model's,
//! over all its replicas, as vLLM's are the API server's over all its
//! data-parallel ranks. A refused request takes no engine id and never
//! reaches the record file.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::clock::Clock;
use super::protocol::{Command, Event, Sinks, Submit, lock};
use super::telemetry::{Admission, Finish, Story};
use llmsim_core::engine::{Engine, Observer, RejectReason, Request, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_planner::cluster::router::{Arrival, Load, RouterState};
use llmsim_planner::metrics::{RequestRecord, Status};
use llmsim_scenario::config::Router;

/// A request the engine holds.
struct Live {
    ticket: u64,
    replica: usize,
    events: UnboundedSender<Event>,
    story: Story,
    finish: Finish,
    max_tokens: Option<u32>,
    n: u32,
    epoch: u64,
    /// Prompt tokens, counted toward `max_num_queued_tokens` until the
    /// first token is handed out.
    prompt: u32,
    prefilling: bool,
}

/// What a step produced, kept until its end time.
enum Out {
    Token(RequestId, u32),
    Finished(RequestId),
    Rejected(RequestId, RejectReason),
}

/// Sends engine events to the live requests and buffers releases.
struct StepObserver<'a> {
    live: &'a mut HashMap<RequestId, Live>,
    out: &'a mut Vec<Out>,
    in_step: &'a mut Vec<RequestId>,
    /// Prefix-cache lookups of the step: (tokens queried, hit).
    lookups: Vec<(u32, u32)>,
    /// Speculative decoding's verifies of the step: (drafted, accepted).
    verified: Vec<(u32, u32)>,
    /// Requests that finished or were rejected in the step.
    ended: u64,
}

impl Observer for StepObserver<'_> {
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
        self.ended += 1;
        self.out.push(Out::Finished(id));
    }
    fn rejected(&mut self, id: RequestId, _at: SimTime, reason: RejectReason) {
        self.ended += 1;
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
    fn speculated(&mut self, _id: RequestId, _at: SimTime, drafted: u32, accepted: u32) {
        self.verified.push((drafted, accepted));
    }
    fn step(&mut self, step: &StepRecord) {
        for id in self.in_step.drain(..) {
            if let Some(l) = self.live.get_mut(&id) {
                l.story.batch_sum += u64::from(step.batch_size);
            }
        }
    }
}

/// One replica: its engine, its measurements, the step it computed and
/// has not released yet, and what the router counts of it.
pub struct Replica {
    engine: Engine,
    sinks: Sinks,
    /// The step computed and not yet released (its tokens go out at its end).
    in_flight: Option<StepRecord>,
    out: Vec<Out>,
    /// Steps in a row that scheduled nothing (see [`EngineTask::run`]).
    idle_steps: u32,
    /// Requests routed here and not ended (the router's `outstanding`).
    outstanding: u64,
}

impl Replica {
    pub fn new(engine: Engine, sinks: Sinks) -> Replica {
        sinks.gauges.kv_total.store(u64::from(engine.kv_blocks_total()), std::sync::atomic::Ordering::Relaxed);
        Replica { engine, sinks, in_flight: None, out: Vec::new(), idle_steps: 0, outstanding: 0 }
    }

    /// When this replica next does something, and what.
    fn next(&self) -> Option<(SimTime, Due)> {
        match &self.in_flight {
            Some(r) => Some((r.end, Due::Release)),
            None => self.engine.next_step_at().filter(|_| self.idle_steps < 2).map(|t| (t, Due::Step)),
        }
    }

    fn update_gauges(&self) {
        let e = &self.engine;
        let waiting = e.num_waiting() + e.num_pending();
        self.sinks.gauges.set(e.num_running() as u64, waiting as u64, u64::from(e.kv_blocks_used()));
    }
}

/// A replica's next event; releases order before steps at the same time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Release,
    Step,
}

/// How a wait ended.
enum Woke {
    /// The deadline came.
    Due,
    /// A command was served first (the next event may have changed).
    Command,
    /// Every sender is gone.
    Closed,
}

/// The task's state. Build with [`EngineTask::new`] (one engine) or
/// [`EngineTask::fleet`], run with [`EngineTask::run`].
pub struct EngineTask {
    replicas: Vec<Replica>,
    router: RouterState,
    rx: UnboundedReceiver<Command>,
    clock: Clock,
    live: HashMap<RequestId, Live>,
    tickets: HashMap<u64, RequestId>,
    next_id: RequestId,
    last_arrival: SimTime,
    /// Start of the last step computed (any replica): later arrivals must
    /// come after it.
    last_step_start: Option<SimTime>,
    in_step: Vec<RequestId>,
    /// vLLM's admission limits (none by default), and the counts they
    /// bound, published for the handlers' preflight check.
    admission: Arc<Admission>,
    /// Prompt tokens of the live requests no token of which has been
    /// handed out (what `max_num_queued_tokens` bounds).
    prefill_tokens: u64,
}

impl EngineTask {
    /// A model served by one engine.
    pub fn new(engine: Engine, rx: UnboundedReceiver<Command>, clock: Clock, sinks: Sinks) -> EngineTask {
        EngineTask::fleet(vec![Replica::new(engine, sinks)], RouterState::new(Router::RoundRobin, 1.0, 0), rx, clock)
    }

    /// A model served by `replicas` (at least one) behind `router`.
    pub fn fleet(
        replicas: Vec<Replica>,
        router: RouterState,
        rx: UnboundedReceiver<Command>,
        clock: Clock,
    ) -> EngineTask {
        assert!(!replicas.is_empty(), "a model needs at least one replica (the models file checks it)");
        EngineTask {
            replicas,
            router,
            rx,
            clock,
            live: HashMap::new(),
            tickets: HashMap::new(),
            next_id: 0,
            last_arrival: SimTime::ZERO,
            last_step_start: None,
            in_step: Vec::new(),
            admission: Arc::default(),
            prefill_tokens: 0,
        }
    }

    /// Turns requests away as vLLM's `--max-num-queued-reqs` and
    /// `--max-num-queued-tokens` do (see the module docs).
    pub fn with_admission(mut self, admission: Arc<Admission>) -> EngineTask {
        self.admission = admission;
        self
    }

    /// Tells the handlers' preflight check the current counts.
    fn publish(&self) {
        self.admission.publish(self.live.len() as u64, self.prefill_tokens);
    }

    /// Takes a request that ends out of the prefill count.
    fn end_prefill(prefill_tokens: &mut u64, live: &mut Live) {
        if live.prefilling {
            live.prefilling = false;
            *prefill_tokens -= u64::from(live.prompt);
        }
    }

    /// Runs until every command sender is gone.
    ///
    /// A step that schedules nothing (e.g. a preemption emptied the batch)
    /// is retried once; then the replica waits until a command reaches it
    /// (or until no replica has anything to do and any command comes).
    pub async fn run(mut self) {
        loop {
            if !self.drain() {
                return;
            }
            let Some((at, due, r)) = self.next_event() else {
                for rep in &mut self.replicas {
                    rep.idle_steps = 0;
                }
                match self.rx.recv().await {
                    Some(cmd) => self.handle(cmd),
                    None => return,
                }
                continue;
            };
            if self.clock.now() < at {
                match self.wait_until(at).await {
                    Woke::Closed => return,
                    Woke::Command => continue,
                    // A step's start is looked up again (a command served
                    // while waiting may have moved it); a release's end is fixed.
                    Woke::Due if due == Due::Step => continue,
                    Woke::Due => {}
                }
            }
            self.fire(r, due);
        }
    }

    /// The earliest next event over the replicas: (time, kind, replica).
    fn next_event(&self) -> Option<(SimTime, Due, usize)> {
        let mut best: Option<(SimTime, Due, usize)> = None;
        for (r, rep) in self.replicas.iter().enumerate() {
            if let Some((t, due)) = rep.next()
                && best.is_none_or(|b| (t, due, r) < b)
            {
                best = Some((t, due, r));
            }
        }
        best
    }

    fn fire(&mut self, r: usize, due: Due) {
        match due {
            Due::Release => {
                if let Some(step) = self.replicas[r].in_flight.take() {
                    self.release(r, step.end, step.tokens, step.preempted);
                }
            }
            Due::Step => match self.step(r) {
                Some(step) => {
                    self.replicas[r].idle_steps = 0;
                    self.replicas[r].in_flight = Some(step);
                }
                None => {
                    self.replicas[r].idle_steps += 1;
                    let now = self.clock.now();
                    self.release(r, now, 0, 0);
                }
            },
        }
    }

    /// Does every event due strictly before `t` (all are due by the time a
    /// request stamped `t` is handled), so the router sees every step that
    /// starts before an arrival, as in the planner's cluster loop.
    fn catch_up(&mut self, t: SimTime) {
        while let Some((_, due, r)) = self.next_event().filter(|e| e.0 < t) {
            self.fire(r, due);
        }
    }

    fn step(&mut self, r: usize) -> Option<StepRecord> {
        let rep = &mut self.replicas[r];
        let mut obs = StepObserver {
            live: &mut self.live,
            out: &mut rep.out,
            in_step: &mut self.in_step,
            lookups: Vec::new(),
            verified: Vec::new(),
            ended: 0,
        };
        let record = rep.engine.step(&mut obs);
        let (lookups, verified, ended) = (obs.lookups, obs.verified, obs.ended);
        self.in_step.clear();
        rep.outstanding = rep.outstanding.saturating_sub(ended);
        if !lookups.is_empty() || !verified.is_empty() {
            let mut stats = lock(&rep.sinks.stats);
            for (queried, hit) in lookups {
                stats.prefix_lookup(queried, hit);
            }
            for (drafted, accepted) in verified {
                stats.speculated(drafted, accepted);
            }
        }
        if let Some(rec) = &record {
            self.last_step_start = Some(self.last_step_start.map_or(rec.start, |t| t.max(rec.start)));
        }
        rep.update_gauges();
        record
    }

    /// Serves commands until the wall clock reaches `t` or a command came.
    async fn wait_until(&mut self, t: SimTime) -> Woke {
        let sleep = tokio::time::sleep_until(self.clock.instant(self.clock.coarse(t)));
        tokio::pin!(sleep);
        tokio::select! {
            biased;
            () = &mut sleep => {
                self.clock.finish_wait(t).await;
                Woke::Due
            }
            cmd = self.rx.recv() => match cmd {
                Some(cmd) => {
                    self.handle(cmd);
                    if self.drain() { Woke::Command } else { Woke::Closed }
                }
                None => Woke::Closed,
            },
        }
    }

    /// Handles every command already queued. False when the channel closed.
    fn drain(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => self.handle(cmd),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
        for rep in &self.replicas {
            rep.update_gauges();
        }
        true
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(s) => self.submit(s),
            Command::Abort { ticket } => self.abort(ticket),
        }
        self.publish();
    }

    fn submit(&mut self, Submit { ticket, req: s, events }: Submit) {
        // The first choice of each prompt carries its `n` (the others 0):
        // vLLM checks once per prompt, counting `n` sequences.
        if s.n > 0
            && let Some(busy) = self.admission.refuses(i64::from(s.n), self.live.len() as u64, self.prefill_tokens)
        {
            lock(&self.replicas[0].sinks.stats).admission_rejected(busy);
            let _ = events.send(Event::Busy(busy));
            return;
        }
        let floor = self.last_step_start.map_or(SimTime::ZERO, |t| t.plus_nanos(1));
        let arrival = s.stamp.max(floor).max(self.last_arrival);
        self.last_arrival = arrival;
        let id = self.next_id;
        self.next_id += 1;
        let recorder = self.replicas[0].sinks.recorder.clone();
        if let Some(rec) = &recorder {
            let (rid, _) = lock(rec).begin_with_blocks(arrival, s.prompt, s.output, &s.hashes);
            debug_assert_eq!(rid, id, "recorder and engine ids agree");
        }
        let request = Request { id, arrival, prompt: s.prompt, output: s.output, priority: s.priority, lora: s.lora };
        let rec = RequestRecord::new(id, arrival, s.prompt, s.output);
        let mut live = Live {
            ticket,
            replica: 0,
            events,
            story: Story { rec, steps: 0, batch_sum: 0 },
            finish: s.finish,
            max_tokens: s.max_tokens,
            n: s.n,
            epoch: s.epoch,
            prompt: s.prompt,
            prefilling: false,
        };
        let context = u64::from(self.replicas[0].engine.config().context_length);
        if self.replicas.len() > 1 && u64::from(s.prompt) + u64::from(s.output) > context {
            // Turned away before routing, as the planner's cluster loop does.
            return self.end_rejected(live, RejectReason::ContextLength);
        }
        self.catch_up(arrival);
        let r = self.route(&s.hashes, s.prompt, s.session);
        live.replica = r;
        if let Some(rec) = &recorder {
            lock(rec).place(id, r as u32);
        }
        let rep = &mut self.replicas[r];
        rep.idle_steps = 0;
        match rep.engine.submit_with_hashes(request, &s.hashes, &mut ()) {
            Ok(()) => {
                rep.outstanding += 1;
                live.prefilling = true;
                self.prefill_tokens += u64::from(s.prompt);
                let _ = live.events.send(Event::Accepted { id, arrival, replica: r as u32 });
                lock(&rep.sinks.stats).accepted(s.prompt, s.epoch);
                self.tickets.insert(ticket, id);
                self.live.insert(id, live);
            }
            Err(reason) => self.end_rejected(live, reason),
        }
    }

    /// The replica for a request with these block hashes (empty without
    /// prefix caching), prompt length and session key.
    fn route(&mut self, hashes: &[u64], prompt: u32, session: Option<u64>) -> usize {
        if self.replicas.len() == 1 {
            return 0;
        }
        let affinity = self.router.policy() == Router::PrefixAffinity;
        let loads: Vec<Load> = self
            .replicas
            .iter()
            .map(|rep| Load::of(&rep.engine, rep.outstanding, affinity.then_some((hashes, prompt))))
            .collect();
        let block_size = u64::from(self.replicas[0].engine.config().capacity.block_size);
        let arrival = Arrival { prompt_blocks: u64::from(prompt).div_ceil(block_size), session };
        self.router.route(&arrival, &loads)
    }

    /// The client went away: the request ends now, or at the end of its
    /// replica's step in flight (whose tokens it already had a share in).
    fn abort(&mut self, ticket: u64) {
        let Some(id) = self.tickets.remove(&ticket) else { return };
        let Some(mut live) = self.live.remove(&id) else { return };
        Self::end_prefill(&mut self.prefill_tokens, &mut live);
        let rep = &mut self.replicas[live.replica];
        let at = match &rep.in_flight {
            Some(step) => step.end,
            None => self.clock.now().max(rep.engine.clock()),
        };
        rep.engine.abort(id, at, &mut ());
        rep.outstanding = rep.outstanding.saturating_sub(1);
        rep.idle_steps = 0;
        live.story.rec.status = Status::Aborted;
        lock(&rep.sinks.stats).aborted(live.epoch);
        let sinks = rep.sinks.clone();
        Self::record(&sinks, &live.story.rec);
    }

    /// Hands replica `r`'s buffered step output to the handlers at `due`.
    fn release(&mut self, r: usize, due: SimTime, tokens: u32, preempted: u32) {
        let lag = self.clock.now().nanos_since(due);
        // The counts go out before any event does, once for the whole
        // step: a client that has seen its first token (or its end) and
        // sends again must find its prompt out of the backlog (its slot
        // free) at the handler's preflight check, which reads the published
        // counts from another thread. Below, only the events.
        let mut ending = 0;
        for out in &self.replicas[r].out {
            let (Out::Token(id, _) | Out::Finished(id) | Out::Rejected(id, _)) = out;
            if let Some(l) = self.live.get_mut(id) {
                Self::end_prefill(&mut self.prefill_tokens, l);
                ending += u64::from(!matches!(out, Out::Token(..)));
            }
        }
        self.admission.publish(self.live.len() as u64 - ending, self.prefill_tokens);
        let mut rejected = Vec::new();
        let rep = &mut self.replicas[r];
        let mut stats = lock(&rep.sinks.stats);
        if tokens > 0 {
            stats.step(tokens, preempted);
        }
        let mut released = 0;
        for out in rep.out.drain(..) {
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
                    if let Some(rec) = &rep.sinks.recorder {
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
        let sinks = self.replicas[live.replica].sinks.clone();
        if reason == RejectReason::ContextLength {
            lock(&sinks.stats).rejected(live.epoch);
        }
        Self::record(&sinks, &live.story.rec);
        let _ = live.events.send(Event::Rejected(reason));
    }

    fn record(sinks: &Sinks, rec: &RequestRecord) {
        if let Some(r) = &sinks.recorder {
            lock(r).complete(rec);
        }
    }
}

#[cfg(test)]
mod tests;
