//! Decode stretches in the cluster loop (`crates/planner/src/cluster/lanes.rs`) against
//! its step-by-step path (`--exact`): on generated cluster scenarios over
//! every router, open and closed loops, sessions, shared prefixes, prefix
//! caching, small caches and overload, both must give the same result
//! JSON, the same per-request records, the same placement and the same
//! events. The events reach the observer replica by replica with
//! stretches, not in time order, so they are compared as a multiset (and
//! each request's own events in order). The test also demands that
//! stretches were taken and that arrivals were routed ahead into them,
//! so it fails if the new path is never used.

use std::collections::BTreeMap;

use llmsim_core::engine::{Observer, RejectReason, RequestId, StepRecord, Stretch};
use llmsim_core::time::SimTime;
use llmsim_core::util::to_json;
use llmsim_planner::metrics::RunOutput;
use llmsim_planner::run_driver::Stepping;
use llmsim_scenario::config::Scenario;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support_cluster::{Shape, random_engine, scenario};

/// Every event as text: each request's in order, and the steps.
#[derive(Default)]
struct Events {
    by_request: BTreeMap<RequestId, Vec<String>>,
    steps: Vec<String>,
    /// Stretches seen, their steps, and requests that joined one.
    stretches: u64,
    stretch_steps: u64,
    joined: u64,
}

impl Events {
    fn push(&mut self, id: RequestId, e: String) {
        self.by_request.entry(id).or_default().push(e);
    }
}

impl Observer for Events {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.push(id, format!("arrived {at} {prompt} {output}"));
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.push(id, format!("scheduled {at} {tokens} {computed}"));
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.push(id, format!("preempted {at}"));
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.push(id, format!("token {at} {index}"));
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.push(id, format!("finished {at}"));
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.push(id, format!("rejected {at} {reason:?}"));
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.push(id, format!("lookup {at} {queried} {hit}"));
    }
    fn step(&mut self, s: &StepRecord) {
        self.steps.push(format!("{s:?}"));
    }
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        self.stretches += 1;
        self.stretch_steps += s.steps.len() as u64;
        self.joined += s.joins.len() as u64;
        llmsim_core::engine::events::replay_stretch(self, s);
    }
}

/// A random small cluster scenario (`support_cluster`'s engines) with
/// replicas and a router; every other one decode-heavy and open-loop, so
/// stretches are long and admit arrivals.
fn generate(i: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(0xC1_0057 + i);
    let caching = rng.random_bool(0.4);
    let routers = ["round_robin", "random", "least_outstanding", "least_kv", "session_affinity", "prefix_affinity"];
    let mut router = routers[rng.random_range(0..routers.len())];
    if router == "prefix_affinity" && !caching {
        router = "round_robin";
    }
    let replicas = [1, 2, 3, 5, 16][rng.random_range(0..5)];
    let shape = Shape { blocks: [40, 120, 2000], gamma: true, max_prefix: 300 };
    let mut engine = random_engine(&mut rng, &shape, caching);
    if i.is_multiple_of(2) {
        // Open loop, longer outputs, more requests.
        let rate = [20, 200, 2000][rng.random_range(0..3)];
        let start = engine.find("  arrivals:").expect("arrivals");
        let end = start + engine[start..].find('\n').expect("line end");
        engine.replace_range(start..end, &format!("  arrivals: {{poisson: {{rate: {rate}}}}}"));
        engine = engine.replace("output_tokens: {uniform: [1, 80]}", "output_tokens: {uniform: [1, 400]}");
        let start = engine.find("  requests:").expect("requests");
        let end = start + engine[start..].find('\n').expect("line end");
        engine.replace_range(start..end, &format!("  requests: {}", rng.random_range(100..600)));
    }
    format!("name: cluster-exact-{i}\n{engine}cluster: {{replicas: {replicas}, router: {router}}}\n")
}

fn run(s: &Scenario, stepping: Stepping) -> (Result<RunOutput, String>, Events) {
    let mut events = Events::default();
    let out = llmsim_planner::Run::new(s).stepping(stepping).observed(&mut events).map_err(|e| e.to_string());
    (out, events)
}

#[test]
fn cluster_stretches_give_the_same_results_as_the_step_by_step_loop() {
    let (mut steps, mut stretch_steps, mut joined, mut stretches) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..120 {
        let text = generate(i);
        let s = scenario(&text);
        let (exact, mut exact_events) = run(&s, Stepping::Exact);
        let (fast, mut fast_events) = run(&s, Stepping::MacroSteps);
        assert_eq!(exact_events.stretches, 0, "the exact loop took a stretch, scenario {i}");
        stretches += fast_events.stretches;
        stretch_steps += fast_events.stretch_steps;
        joined += fast_events.joined;
        match (exact, fast) {
            (Ok(a), Ok(b)) => {
                assert_eq!(to_json(&a.result), to_json(&b.result), "result JSON, scenario {i}:\n{text}");
                assert_eq!(a.requests, b.requests, "request records, scenario {i}:\n{text}");
                assert_eq!(a.placement, b.placement, "placement, scenario {i}:\n{text}");
                steps += a.result.steps.count;
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "the same error, scenario {i}:\n{text}"),
            (a, b) => panic!("scenario {i}: exact {:?}, stretches {:?}\n{text}", a.err(), b.err()),
        }
        assert!(exact_events.by_request == fast_events.by_request, "per-request events differ, scenario {i}:\n{text}");
        exact_events.steps.sort_unstable();
        fast_events.steps.sort_unstable();
        assert!(exact_events.steps == fast_events.steps, "step records differ, scenario {i}:\n{text}");
    }
    println!("{steps} steps; {stretch_steps} of them in {stretches} stretches, {joined} requests joined one");
    // The new path must be taken, and arrivals routed ahead must join stretches.
    assert!(steps > 50_000, "only {steps} steps over the generated scenarios");
    assert!(stretch_steps * 4 > steps, "too few steps in stretches: {stretch_steps} of {steps}");
    assert!(joined > 500, "too few requests joined a stretch: {joined}");
}
