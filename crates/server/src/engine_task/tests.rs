//! The live driver on tokio's paused clock: time only moves when every task
//! waits, straight to the next deadline, so these tests check exact
//! nanoseconds without sleeping for real.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use super::*;
use crate::protocol::FeedRequest;
use crate::telemetry::Busy;
use crate::telemetry::{Gauges, ModelTelemetry};
use llmsim_core::engine::EngineConfig;
use llmsim_planner::cluster::router::RouterState;
use llmsim_planner::workload::TraceSource;
use llmsim_scenario::trace::TraceRow;

fn base_config() -> EngineConfig {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/base.yml"));
    llmsim_scenario::config::load_scenario(path).expect("base scenario").engine_config()
}

/// A KV cache small enough that a burst of long requests preempts.
fn tight_config() -> EngineConfig {
    let mut cfg = base_config();
    cfg.capacity.num_blocks = 120;
    cfg.capacity.watermark_blocks = 1;
    cfg.max_batch_tokens = 2048;
    cfg
}

struct Harness {
    commands: UnboundedSender<Command>,
    clock: Clock,
    sinks: Sinks,
    next_ticket: u64,
}

impl Harness {
    fn start(cfg: EngineConfig) -> Harness {
        let clock = Clock::start();
        let sinks = Sinks {
            stats: Arc::new(Mutex::new(ModelTelemetry::new(cfg.context_length))),
            gauges: Arc::new(Gauges::default()),
            recorder: None,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(EngineTask::new(Engine::new(cfg), rx, clock, sinks.clone()).run());
        Harness { commands: tx, clock, sinks, next_ticket: 0 }
    }

    /// `replicas` engines of `cfg` behind `policy` (seed 7).
    fn fleet(cfg: EngineConfig, replicas: usize, policy: llmsim_scenario::config::Router) -> Harness {
        let clock = Clock::start();
        let all: Vec<Sinks> = (0..replicas)
            .map(|_| Sinks {
                stats: Arc::new(Mutex::new(ModelTelemetry::new(cfg.context_length))),
                gauges: Arc::new(Gauges::default()),
                recorder: None,
            })
            .collect();
        let engines = all.iter().map(|s| Replica::new(Engine::new(cfg.clone()), s.clone())).collect();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(EngineTask::fleet(engines, RouterState::new(policy, 1.0, 7), rx, clock).run());
        Harness { commands: tx, clock, sinks: all[0].clone(), next_ticket: 0 }
    }

    /// Submits a request stamped now; returns its ticket and event channel.
    fn submit(&mut self, prompt: u32, output: u32) -> (u64, UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let submit = Submit { ticket, req: request(self.clock.now(), prompt, output), events: tx };
        self.commands.send(Command::Submit(submit)).expect("engine task alive");
        (ticket, rx)
    }
}

/// A plain request: stops on its own, no max_tokens, summary epoch 0.
fn request(stamp: SimTime, prompt: u32, output: u32) -> FeedRequest {
    FeedRequest {
        stamp,
        prompt,
        output,
        finish: Finish::Stop,
        max_tokens: None,
        n: 1,
        epoch: 0,
        hashes: Vec::new(),
        session: None,
        priority: 0,
        lora: 0,
    }
}

/// Everything a request's channel said, with the clock when each token came.
#[derive(Debug, Default)]
struct Seen {
    accepted: Option<(RequestId, SimTime)>,
    replica: u32,
    tokens: Vec<SimTime>,
    received_at: Vec<SimTime>,
    story: Option<Story>,
}

async fn collect(clock: Clock, mut rx: UnboundedReceiver<Event>) -> Seen {
    let mut seen = Seen::default();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Accepted { id, arrival, replica } => {
                seen.accepted = Some((id, arrival));
                seen.replica = replica;
            }
            Event::Token { due, .. } => {
                seen.tokens.push(due);
                seen.received_at.push(clock.now());
            }
            Event::Done(story) => {
                seen.story = Some(*story);
                break;
            }
            Event::Rejected(_) | Event::Busy(_) => break,
        }
    }
    seen
}

/// Token times per request id, from the offline driver on the same trace.
fn offline(cfg: EngineConfig, rows: Vec<TraceRow>) -> BTreeMap<RequestId, Vec<SimTime>> {
    struct Tokens(BTreeMap<RequestId, Vec<SimTime>>);
    impl Observer for Tokens {
        fn token(&mut self, id: RequestId, at: SimTime, _index: u32) {
            self.0.entry(id).or_default().push(at);
        }
    }
    let mut engine = Engine::new(cfg);
    let limit = llmsim_planner::workload::Limit { requests: None, until: None };
    let mut source = TraceSource::new(Arc::new(rows), limit);
    let mut tokens = Tokens(BTreeMap::new());
    let (single, setup) = (llmsim_planner::sim::Single::new(&mut engine), Default::default());
    llmsim_planner::run_driver::drive(single, &mut source, &mut tokens, &setup, |_, _, _| {}, &mut |_| {})
        .expect("the offline run stays within the run limits");
    tokens.0
}

#[tokio::test(start_paused = true)]
async fn a_lone_request_gets_each_token_exactly_when_the_offline_engine_says() {
    let mut h = Harness::start(base_config());
    let (_, rx) = h.submit(512, 8);
    let seen = collect(h.clock, rx).await;
    let (id, arrival) = seen.accepted.expect("accepted");
    let expected = offline(base_config(), vec![TraceRow { arrival, prompt: 512, output: 8 }]);
    assert_eq!(seen.tokens, expected[&id]);
    // tokio's timer wheel has millisecond resolution: a deadline fires on
    // the next whole millisecond, never before it.
    for (got, due) in seen.received_at.iter().zip(&seen.tokens) {
        assert!(got >= due && got.nanos_since(*due) < 1_000_000, "released at {got}, due at {due}");
    }
    let story = seen.story.expect("done");
    assert_eq!(story.rec.tokens, 8);
    assert_eq!(story.steps, 8);
    let lag = lock(&h.sinks.stats).window.lag.clone();
    assert_eq!(lag.count(), 8);
    assert!(lag.max().is_some_and(|m| m < 1_000_000), "lag is measured: {:?}", lag.max());
}

#[tokio::test(start_paused = true)]
async fn live_equals_offline_for_staggered_arrivals_with_preemptions() {
    let mut h = Harness::start(tight_config());
    let mut waiters = Vec::new();
    let mut lengths = Vec::new();
    for i in 0..40u32 {
        // Arrivals 0 to 3 ms apart, landing inside steps as well as between them.
        let gap = u64::from((i * 7919) % 3_000) * 1_000;
        tokio::time::sleep(std::time::Duration::from_nanos(gap)).await;
        let (prompt, output) = (200 + (i * 37) % 600, 5 + (i * 13) % 60);
        let (_, rx) = h.submit(prompt, output);
        lengths.push((prompt, output));
        waiters.push(tokio::spawn(collect(h.clock, rx)));
    }
    let mut live = BTreeMap::new();
    let mut rows = Vec::new();
    let mut preemptions = 0;
    for (w, (prompt, output)) in waiters.into_iter().zip(lengths) {
        let seen = w.await.expect("collector");
        let (id, arrival) = seen.accepted.expect("accepted");
        preemptions += seen.story.as_ref().map_or(0, |s| s.rec.preemptions);
        rows.push(TraceRow { arrival, prompt, output });
        live.insert(id, seen.tokens);
    }
    assert!(preemptions > 0, "the tight KV cache should preempt");
    assert_eq!(live, offline(tight_config(), rows));
}

#[tokio::test(start_paused = true)]
async fn an_arrival_during_a_computed_step_joins_the_next_step() {
    let mut h = Harness::start(base_config());
    let (_, first) = h.submit(8000, 2);
    // The first step (a long prefill) starts at 0; arrive in the middle of it.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let (_, second) = h.submit(16, 2);
    let a = collect(h.clock, first).await;
    let b = collect(h.clock, second).await;
    let first_end = a.tokens[0];
    let (_, arrival) = b.accepted.expect("accepted");
    assert_eq!(arrival, SimTime::from_nanos(50_000_000), "the stamp was after the step start, so it is kept");
    let story = b.story.expect("done");
    assert_eq!(story.rec.first_scheduled, Some(first_end), "it is first scheduled in the step after");
}

#[tokio::test(start_paused = true)]
async fn a_stale_stamp_is_clamped_after_the_last_computed_step_start() {
    let mut h = Harness::start(base_config());
    let (_, first) = h.submit(8000, 2);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // Stamped at 1 ms, but received after the step starting at 0 was computed.
    let (tx, rx) = mpsc::unbounded_channel();
    let submit = Submit { ticket: 99, req: request(SimTime::from_nanos(1_000_000), 16, 1), events: tx };
    h.commands.send(Command::Submit(submit)).unwrap();
    let b = collect(h.clock, rx).await;
    assert_eq!(b.accepted.map(|a| a.1), Some(SimTime::from_nanos(1_000_000)), "max(stamp, 0 + 1 ns) = stamp");
    drop(first);
    let (_, late) = h.submit(16, 1);
    let c = collect(h.clock, late).await;
    assert!(c.accepted.expect("accepted").1 > SimTime::from_nanos(1_000_000), "arrivals never go back");
}

#[tokio::test(start_paused = true)]
async fn an_abort_frees_the_blocks_at_once() {
    let mut h = Harness::start(base_config());
    let mut channels = Vec::new();
    for _ in 0..10 {
        channels.push(h.submit(1000, 500));
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let gauges = h.sinks.gauges.clone();
    assert_eq!(gauges.running.load(std::sync::atomic::Ordering::Relaxed), 10);
    assert!(gauges.kv_used.load(std::sync::atomic::Ordering::Relaxed) > 0);
    for (ticket, _) in &channels {
        h.commands.send(Command::Abort { ticket: *ticket }).unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    assert_eq!(gauges.running.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(gauges.kv_used.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(lock(&h.sinks.stats).prom.success[Finish::Abort as usize], 10);
}

#[tokio::test(start_paused = true)]
async fn a_prompt_that_can_never_fit_is_rejected_not_left_waiting() {
    let mut h = Harness::start(tight_config());
    let (_, rx) = h.submit(120 * 16, 1);
    let mut rx = rx;
    assert!(matches!(rx.recv().await, Some(Event::Accepted { .. })));
    assert_eq!(rx.recv().await, Some(Event::Rejected(RejectReason::NeverFits)));
}

/// Token times per request id and each request's replica, from the
/// planner's cluster loop on the same trace.
fn offline_fleet(
    cfg: EngineConfig,
    replicas: usize,
    policy: llmsim_scenario::config::Router,
    rows: Vec<TraceRow>,
) -> (BTreeMap<RequestId, Vec<SimTime>>, Vec<Option<u32>>) {
    struct Tokens(BTreeMap<RequestId, Vec<SimTime>>);
    impl Observer for Tokens {
        fn token(&mut self, id: RequestId, at: SimTime, _index: u32) {
            self.0.entry(id).or_default().push(at);
        }
    }
    let mut engines: Vec<Engine> = (0..replicas).map(|_| Engine::new(cfg.clone())).collect();
    let mut router = RouterState::new(policy, 1.0, 7);
    let limit = llmsim_planner::workload::Limit { requests: None, until: None };
    let mut source = TraceSource::new(Arc::new(rows), limit);
    let mut tokens = Tokens(BTreeMap::new());
    let replicas = llmsim_planner::cluster::Replicas::new(&mut engines, &mut router);
    let setup = llmsim_planner::run_driver::Setup::default();
    let run = llmsim_planner::run_driver::drive(replicas, &mut source, &mut tokens, &setup, |_, _, _| {}, &mut |_| {})
        .expect("the offline run stays within the run limits");
    (tokens.0, run.placement.requests)
}

/// Replicas on the wall clock route and time every request as the
/// planner's cluster loop does on the recorded (clamped) arrivals: the
/// same replica for every request, the same token times to the
/// nanosecond, for each router the server can run without sessions or
/// block hashes. Arrivals land inside steps, between them, and while
/// other replicas are mid-step.
#[tokio::test(start_paused = true)]
async fn a_fleet_routes_and_times_as_the_planners_cluster_loop() {
    use llmsim_scenario::config::Router;
    for policy in [Router::RoundRobin, Router::Random, Router::LeastOutstanding, Router::LeastKv] {
        let mut h = Harness::fleet(tight_config(), 3, policy);
        let mut waiters = Vec::new();
        let mut lengths = Vec::new();
        for i in 0..60u32 {
            let gap = u64::from((i * 7919) % 2_000) * 1_000;
            tokio::time::sleep(std::time::Duration::from_nanos(gap)).await;
            let (prompt, output) = (200 + (i * 37) % 900, 5 + (i * 13) % 80);
            let (_, rx) = h.submit(prompt, output);
            lengths.push((prompt, output));
            waiters.push(tokio::spawn(collect(h.clock, rx)));
        }
        let mut live = BTreeMap::new();
        let mut placed = Vec::new();
        let mut rows = Vec::new();
        for (w, (prompt, output)) in waiters.into_iter().zip(lengths) {
            let seen = w.await.expect("collector");
            let (id, arrival) = seen.accepted.expect("accepted");
            rows.push(TraceRow { arrival, prompt, output });
            live.insert(id, seen.tokens);
            placed.push(Some(seen.replica));
        }
        let used: std::collections::BTreeSet<_> = placed.iter().collect();
        assert_eq!(used.len(), 3, "{policy:?}: every replica got requests: {placed:?}");
        let (offline_tokens, offline_placed) = offline_fleet(tight_config(), 3, policy, rows);
        assert_eq!(placed, offline_placed, "{policy:?}: the same replica for every request");
        assert_eq!(live, offline_tokens, "{policy:?}: the same token times");
    }
}

#[tokio::test(start_paused = true)]
async fn round_robin_alternates_and_each_replica_has_its_own_gauges() {
    let mut h = Harness::fleet(base_config(), 2, llmsim_scenario::config::Router::RoundRobin);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (_, rx) = h.submit(100, 3);
        seen.push(collect(h.clock, rx).await.replica);
    }
    // One at a time: 0, 1, 0, 1 (the k-th routed request to k mod 2).
    assert_eq!(seen, [0, 1, 0, 1]);
    assert_eq!(lock(&h.sinks.stats).window.submitted, 2, "replica 0 counted its own two");
}

/// The first event on a request's channel.
async fn first(rx: &mut UnboundedReceiver<Event>) -> Event {
    rx.recv().await.expect("an event")
}

#[tokio::test(start_paused = true)]
async fn queued_tokens_count_whole_prompts_until_the_first_token_and_aborts_give_them_back() {
    let clock = Clock::start();
    let sinks = Sinks {
        stats: Arc::new(Mutex::new(ModelTelemetry::new(4096))),
        gauges: Arc::new(Gauges::default()),
        recorder: None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let limits = Arc::new(Admission::new(None, Some(100)));
    tokio::spawn(EngineTask::new(Engine::new(base_config()), rx, clock, sinks.clone()).with_admission(limits).run());
    let mut h = Harness { commands: tx, clock, sinks, next_ticket: 0 };
    // 60 in prefill, then 120: the third sees 120 >= 100 and is refused
    // (its own 10 tokens are not added: 60 + 10 < 100 would not matter).
    let (a, mut ra) = h.submit(60, 5);
    let (_, mut rb) = h.submit(60, 5);
    let (_, mut rc) = h.submit(10, 5);
    assert!(matches!(first(&mut ra).await, Event::Accepted { .. }));
    assert!(matches!(first(&mut rb).await, Event::Accepted { .. }));
    assert_eq!(first(&mut rc).await, Event::Busy(Busy::Tokens));
    // A leaves before its first token: 60 left, so the next is admitted.
    h.commands.send(Command::Abort { ticket: a }).unwrap();
    let (_, mut rd) = h.submit(10, 5);
    assert!(matches!(first(&mut rd).await, Event::Accepted { .. }));
    // B's first token takes its 60 out: after it, 10 (D) are left in prefill
    // or none at all, either way below 100.
    assert!(matches!(first(&mut rb).await, Event::Token { index: 1, .. }));
    let (_, mut re) = h.submit(10, 5);
    assert!(matches!(first(&mut re).await, Event::Accepted { .. }));
    assert_eq!(lock(&h.sinks.stats).prom.admission_rejections, [0, 1]);
}

#[tokio::test(start_paused = true)]
async fn queued_requests_count_every_choice_and_a_refused_request_takes_no_engine_id() {
    let clock = Clock::start();
    let sinks = Sinks {
        stats: Arc::new(Mutex::new(ModelTelemetry::new(4096))),
        gauges: Arc::new(Gauges::default()),
        recorder: None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let limits = Arc::new(Admission::new(Some(3), None));
    tokio::spawn(EngineTask::new(Engine::new(base_config()), rx, clock, sinks.clone()).with_admission(limits).run());
    let send = |tx: &UnboundedSender<Command>, ticket: u64, n: u32| {
        let (etx, erx) = mpsc::unbounded_channel();
        let req = FeedRequest { n, ..request(clock.now(), 20, 50) };
        tx.send(Command::Submit(Submit { ticket, req, events: etx })).unwrap();
        erx
    };
    // A request with n = 2 sends its first choice with n = 2, its second with 0.
    let mut a0 = send(&tx, 0, 2);
    let mut a1 = send(&tx, 1, 0);
    let mut b = send(&tx, 2, 2); // 2 + 2 > 3
    let mut c = send(&tx, 3, 1); // 2 + 1 = 3: allowed
    let mut d = send(&tx, 4, 1); // 3 + 1 > 3
    let ids: Vec<Event> = vec![first(&mut a0).await, first(&mut a1).await];
    assert!(matches!(ids[0], Event::Accepted { id: 0, .. }) && matches!(ids[1], Event::Accepted { id: 1, .. }));
    assert_eq!(first(&mut b).await, Event::Busy(Busy::Requests));
    assert!(matches!(first(&mut c).await, Event::Accepted { id: 2, .. }), "the refused request took no id");
    assert_eq!(first(&mut d).await, Event::Busy(Busy::Requests));
    assert_eq!(lock(&sinks.stats).prom.admission_rejections, [2, 0]);
    assert_eq!(lock(&sinks.stats).prom.success, [0; 4], "a refusal is not a finished request");
}
