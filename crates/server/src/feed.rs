//! A request's token feed, as a handler sees it: the engine task's events
//! for a `scheduler` model, or the timer task's for a `fixed` model (whose
//! metrics the feed keeps, as no engine task does). Either way the handler gets tokens at their due times,
//! then the simulated story, and dropping the feed early (the client went
//! away) aborts the request at once.

use std::sync::atomic::Ordering;

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use super::app::{Backend, ModelHandle};
use super::clock::Clock;
use super::models::FixedTiming;
use super::protocol::{Command, Event, FeedRequest, Schedule, Sinks, Submit, lock};
use super::telemetry::{Busy, Finish, Story};
use llmsim_core::engine::{RejectReason, RequestId};
use llmsim_core::time::SimTime;
use llmsim_planner::metrics::{RequestRecord, Status, TokenGap};

#[derive(Clone, Debug, PartialEq)]
pub enum FeedEvent {
    Token {
        index: u32,
        due: SimTime,
    },
    Done(Box<Story>),
    Rejected(RejectReason),
    /// Turned away by an admission limit (`max_num_queued_*`): a 503.
    Busy(Busy),
    /// The engine task is gone (the server is shutting down).
    Lost,
}

/// The request as accepted: its id and (clamped) arrival.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Accepted {
    pub id: RequestId,
    pub arrival: SimTime,
    /// The replica it runs on (0 without replicas).
    pub replica: u32,
}

pub struct Feed {
    kind: Kind,
}

enum Kind {
    Engine { events: UnboundedReceiver<Event>, guard: AbortGuard },
    Fixed(Box<FixedFeed>),
}

impl Feed {
    /// Hands the request to the model. Err carries a rejection on arrival.
    pub async fn start(model: &ModelHandle, clock: Clock, req: FeedRequest) -> Result<(Feed, Accepted), FeedEvent> {
        let ticket = model.tickets.fetch_add(1, Ordering::Relaxed);
        match &model.backend {
            Backend::Scheduler { commands } => start_engine(commands, ticket, req).await,
            Backend::Fixed { timing, timer } => {
                FixedFeed::start(*timing, timer, clock, model.replicas[0].clone(), ticket, req)
            }
        }
    }

    pub async fn next(&mut self) -> FeedEvent {
        match &mut self.kind {
            Kind::Engine { events, guard } => {
                let ev = match events.recv().await {
                    Some(Event::Token { index, due }) => FeedEvent::Token { index, due },
                    Some(Event::Done(story)) => FeedEvent::Done(story),
                    Some(Event::Rejected(r)) => FeedEvent::Rejected(r),
                    Some(Event::Busy(b)) => FeedEvent::Busy(b),
                    Some(Event::Accepted { .. }) | None => FeedEvent::Lost,
                };
                if !matches!(ev, FeedEvent::Token { .. }) {
                    guard.armed = false;
                }
                ev
            }
            Kind::Fixed(f) => f.next().await,
        }
    }
}

async fn start_engine(
    commands: &UnboundedSender<Command>,
    ticket: u64,
    req: FeedRequest,
) -> Result<(Feed, Accepted), FeedEvent> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let submit = Submit { ticket, req, events: tx };
    if commands.send(Command::Submit(submit)).is_err() {
        return Err(FeedEvent::Lost);
    }
    // From here on, dropping this future (client gone) aborts the request.
    let guard = AbortGuard { commands: commands.clone(), ticket, armed: true };
    match rx.recv().await {
        Some(Event::Accepted { id, arrival, replica }) => {
            Ok((Feed { kind: Kind::Engine { events: rx, guard } }, Accepted { id, arrival, replica }))
        }
        Some(Event::Rejected(r)) => Err(FeedEvent::Rejected(r)),
        Some(Event::Busy(b)) => Err(FeedEvent::Busy(b)),
        _ => Err(FeedEvent::Lost),
    }
}

/// Sends `Abort` when dropped while armed: the client went away.
struct AbortGuard {
    commands: UnboundedSender<Command>,
    ticket: u64,
    armed: bool,
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Command::Abort { ticket: self.ticket });
        }
    }
}

/// One request of a `fixed` model: TTFT = overhead + prompt / rate after
/// arrival, then one token every ITL, released by the model's timer task.
/// No shared state besides the metrics.
struct FixedFeed {
    clock: Clock,
    timing: FixedTiming,
    events: UnboundedReceiver<Event>,
    sinks: Sinks,
    story: Story,
    finish: Finish,
    max_tokens: Option<u32>,
    n: u32,
    epoch: u64,
    next: u32,
    done: bool,
    /// Measurements not yet in the shared stats: they are added once, when
    /// the request ends, to keep a lock off the per-token path.
    unflushed: Unflushed,
}

#[derive(Default)]
struct Unflushed {
    ttft_ns: Option<u64>,
    gaps: u64,
    lags_ns: Vec<u64>,
}

impl FixedFeed {
    fn start(
        timing: FixedTiming,
        timer: &UnboundedSender<Schedule>,
        clock: Clock,
        sinks: Sinks,
        ticket: u64,
        req: FeedRequest,
    ) -> Result<(Feed, Accepted), FeedEvent> {
        let (id, arrival) = match &sinks.recorder {
            Some(r) => lock(r).begin(req.stamp, req.prompt, req.output),
            None => (ticket, req.stamp),
        };
        sinks.gauges.running.fetch_add(1, Ordering::Relaxed);
        lock(&sinks.stats).accepted(req.prompt, req.epoch);
        let rec =
            RequestRecord { first_scheduled: Some(arrival), ..RequestRecord::new(id, arrival, req.prompt, req.output) };
        let (tx, events) = mpsc::unbounded_channel();
        let first_due = arrival.plus_nanos(timing.ttft_ns(req.prompt));
        let schedule = Schedule { first_due, itl_ns: timing.itl_ns, n: req.output, events: tx };
        let feed = FixedFeed {
            clock,
            timing,
            events,
            sinks,
            story: Story { rec, steps: 0, batch_sum: 0 },
            finish: req.finish,
            max_tokens: req.max_tokens,
            n: req.n,
            epoch: req.epoch,
            next: 1,
            done: false,
            unflushed: Unflushed::default(),
        };
        // Dropping the feed (and with it the receiver) is what tells the
        // timer the request is gone, so it is built before any error.
        let feed = Feed { kind: Kind::Fixed(Box::new(feed)) };
        timer.send(schedule).map_err(|_| FeedEvent::Lost)?;
        Ok((feed, Accepted { id, arrival, replica: 0 }))
    }

    async fn next(&mut self) -> FeedEvent {
        if self.done {
            return FeedEvent::Lost;
        }
        if self.next > self.story.rec.output {
            self.done = true;
            self.sinks.gauges.running.fetch_sub(1, Ordering::Relaxed);
            self.story.rec.status = Status::Finished;
            let sinks = self.sinks.clone();
            let mut stats = lock(&sinks.stats);
            self.flush(&mut stats);
            stats.finished(&self.story, self.finish, self.max_tokens, self.n, self.epoch);
            drop(stats);
            if let Some(r) = &self.sinks.recorder {
                lock(r).complete(&self.story.rec);
            }
            return FeedEvent::Done(Box::new(self.story.clone()));
        }
        let Some(Event::Token { index, due }) = self.events.recv().await else {
            return FeedEvent::Lost;
        };
        let lag = self.clock.now().nanos_since(due);
        let token = self.story.rec.add_token(due, index);
        self.next += 1;
        let u = &mut self.unflushed;
        match token {
            TokenGap::First { ttft_ns } => u.ttft_ns = Some(ttft_ns),
            TokenGap::Next { .. } => u.gaps += 1,
            TokenGap::Same => {}
        }
        u.lags_ns.push(lag);
        FeedEvent::Token { index, due }
    }

    /// Adds the request's token measurements to the shared stats.
    fn flush(&mut self, stats: &mut super::telemetry::ModelTelemetry) {
        let u = std::mem::take(&mut self.unflushed);
        if u.ttft_ns.is_some() {
            stats.token(u.ttft_ns, None, self.epoch);
        }
        stats.gaps(self.timing.itl_ns, u.gaps, self.epoch);
        stats.lags(&u.lags_ns);
    }
}

impl Drop for FixedFeed {
    fn drop(&mut self) {
        if !self.done {
            self.sinks.gauges.running.fetch_sub(1, Ordering::Relaxed);
            let sinks = self.sinks.clone();
            let mut stats = lock(&sinks.stats);
            self.flush(&mut stats);
            stats.aborted(self.epoch);
            drop(stats);
            self.story.rec.status = Status::Aborted;
            if let Some(r) = &self.sinks.recorder {
                lock(r).complete(&self.story.rec);
            }
        }
    }
}
