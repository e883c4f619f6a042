//! Routers on hand-built states, the visibility rule, and the cluster
//! loop against single engines.

use std::collections::VecDeque;
use std::path::Path;

use super::router::{Arrival, Load, RouterState};
use super::*;
use crate::metrics::{Collector, CollectorOptions, RequestRecord};
use crate::run_driver::{Setup, drive};
use crate::workload::Source;
use llmsim_core::engine::{Engine, Request};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::{self, Router};

fn loads(xs: &[(u64, u64, u32)]) -> Vec<Load> {
    xs.iter().map(|&(outstanding, active_blocks, hit_blocks)| Load { outstanding, active_blocks, hit_blocks }).collect()
}

fn router(policy: Router) -> RouterState {
    RouterState::new(policy, 1.0, 7)
}

const NO_SESSION: Arrival = Arrival { prompt_blocks: 10, session: None };

#[test]
fn round_robin_sends_the_kth_request_to_k_mod_r_whatever_the_load() {
    let mut r = router(Router::RoundRobin);
    let l = loads(&[(9, 900, 0), (0, 0, 0), (5, 5, 0)]);
    let picks: Vec<usize> = (0..7).map(|_| r.route(&NO_SESSION, &l)).collect();
    assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
}

#[test]
fn least_outstanding_picks_the_fewest_and_the_lowest_index_on_ties() {
    let mut r = router(Router::LeastOutstanding);
    assert_eq!(r.route(&NO_SESSION, &loads(&[(3, 0, 0), (1, 99, 0), (2, 0, 0)])), 1);
    assert_eq!(r.route(&NO_SESSION, &loads(&[(2, 0, 0), (1, 0, 0), (1, 0, 0)])), 1);
    assert_eq!(r.route(&NO_SESSION, &loads(&[(0, 50, 0), (0, 0, 0)])), 0);
}

#[test]
fn least_kv_picks_the_fewest_active_blocks_and_the_lowest_index_on_ties() {
    let mut r = router(Router::LeastKv);
    assert_eq!(r.route(&NO_SESSION, &loads(&[(0, 40, 0), (9, 39, 0), (0, 41, 0)])), 1);
    assert_eq!(r.route(&NO_SESSION, &loads(&[(0, 40, 0), (9, 39, 0), (0, 39, 0)])), 1);
    assert_eq!(r.route(&NO_SESSION, &loads(&[(5, 0, 0), (0, 0, 0)])), 0);
}

#[test]
fn prefix_affinity_weighs_missed_blocks_against_active_ones() {
    // A prompt of 10 blocks. Costs with weight 1: 1*(10-8)+5 = 7,
    // 1*(10-0)+0 = 10, 1*(10-2)+0 = 8: the cached replica wins.
    let a = Arrival { prompt_blocks: 10, session: None };
    let l = loads(&[(0, 5, 8), (0, 0, 0), (0, 0, 2)]);
    assert_eq!(RouterState::new(Router::PrefixAffinity, 1.0, 0).route(&a, &l), 0);
    // Weight 0.25: 0.5+5 = 5.5, 2.5+0 = 2.5, 2+0 = 2: the emptiest partly-cached one.
    assert_eq!(RouterState::new(Router::PrefixAffinity, 0.25, 0).route(&a, &l), 2);
    // Weight 0: only load counts; ties (1 and 2 at 0) go to the lowest index.
    assert_eq!(RouterState::new(Router::PrefixAffinity, 0.0, 0).route(&a, &l), 1);
    // Equal costs: 1*(10-4)+3 = 9 and 1*(10-1)+0 = 9: the lower index.
    let tie = loads(&[(0, 3, 4), (0, 0, 1)]);
    assert_eq!(RouterState::new(Router::PrefixAffinity, 1.0, 0).route(&a, &tie), 0);
}

#[test]
fn session_affinity_keeps_a_conversation_where_its_first_turn_went() {
    let mut r = router(Router::SessionAffinity);
    let turn = |s| Arrival { prompt_blocks: 1, session: Some(s) };
    // First turns go by least_outstanding.
    assert_eq!(r.route(&turn(7), &loads(&[(2, 0, 0), (1, 0, 0)])), 1);
    assert_eq!(r.route(&turn(8), &loads(&[(0, 0, 0), (1, 0, 0)])), 0);
    // Later turns follow, however loaded their replica now is.
    assert_eq!(r.route(&turn(7), &loads(&[(0, 0, 0), (50, 0, 0)])), 1);
    assert_eq!(r.route(&turn(8), &loads(&[(50, 0, 0), (0, 0, 0)])), 0);
    // No session: least_outstanding, lowest index on ties.
    assert_eq!(r.route(&NO_SESSION, &loads(&[(4, 0, 0), (4, 0, 0)])), 0);
}

#[test]
fn random_is_uniform_seeded_and_in_range() {
    let l = loads(&[(0, 0, 0); 4]);
    let draws = |seed| {
        let mut r = RouterState::new(Router::Random, 1.0, seed);
        (0..4000).map(|_| r.route(&NO_SESSION, &l)).collect::<Vec<_>>()
    };
    assert_eq!(draws(3), draws(3));
    assert_ne!(draws(3), draws(4));
    let mut counts = [0u32; 4];
    for d in draws(3) {
        counts[d] += 1;
    }
    // 1000 expected each; sd = sqrt(4000 * 1/4 * 3/4) = 27.4, so 5 sd is 137.
    for c in counts {
        assert!((863..=1137).contains(&c), "{counts:?}");
    }
}

#[test]
fn imbalance_is_max_over_mean_of_requests() {
    let s = |n| ReplicaCounts { requests: n, ..ReplicaCounts::default() };
    assert_eq!(imbalance(&[s(6), s(2), s(4)]), 1.5);
    assert_eq!(imbalance(&[s(5), s(5)]), 1.0);
    assert_eq!(imbalance(&[s(0), s(0)]), 1.0);
}

/// A scenario from YAML text (the base model of docs/engine.md unless `model` is given).
pub(crate) fn scenario(extra: &str) -> Scenario {
    let text = format!(
        "hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: 32768
  weights: {{parameters_billions: 6.74}}
  kv_cache: {{bytes_per_token: 524288, block_size: 16}}
scheduler: {{max_num_sequences: 64}}
{extra}"
    );
    let file = Path::new("cluster-test.yml");
    let raw = config::parse_str(&text, file).unwrap_or_else(|e| panic!("{e}"));
    config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}"))
}

/// Requests handed over as they are.
struct Fixed(VecDeque<Request>);

impl Source for Fixed {
    fn peek(&self) -> Option<SimTime> {
        self.0.front().map(|r| r.arrival)
    }
    fn pop(&mut self) -> Option<Request> {
        self.0.pop_front()
    }
}

fn req(id: u64, at: SimTime, prompt: u32, output: u32) -> Request {
    Request::new(id, at, prompt, output)
}

/// Runs `requests` on `replicas` engines of `s` behind `policy`; returns
/// the per-request records and where each went.
fn run_fixed(
    s: &Scenario,
    replicas: usize,
    policy: Router,
    requests: Vec<Request>,
) -> (Vec<RequestRecord>, ClusterRun) {
    let mut engines: Vec<Engine> = (0..replicas).map(|_| Engine::new(s.engine_config())).collect();
    let mut router = RouterState::new(policy, 1.0, 0);
    let mut collector = Collector::new(&s.capacity, CollectorOptions { keep_steps: true });
    let setup = Setup { keep_steps: true, ..Setup::default() };
    let run = drive(
        Replicas::new(&mut engines, &mut router),
        &mut Fixed(requests.into()),
        &mut collector,
        &setup,
        |_, e: &Engine, _: &mut Collector| e.check_invariants().unwrap(),
        &mut |_| {},
    )
    .unwrap();
    (collector.requests().to_vec(), run)
}

/// The end of a lone step of `prompt` tokens on a fresh engine of `s`.
fn lone_step_end(s: &Scenario, prompt: u32) -> SimTime {
    let mut e = Engine::new(s.engine_config());
    e.submit(req(0, SimTime::ZERO, prompt, 1), &mut ()).unwrap();
    e.step(&mut ()).unwrap().end
}

#[test]
fn a_step_starting_exactly_at_an_arrival_runs_after_the_routing_and_can_include_it() {
    let s = scenario("workload: {arrivals: {constant: {rate: 1}}, requests: 1, prompt_tokens: 1, output_tokens: 1}");
    let d = lone_step_end(&s, 512);
    // Request 0 (3 tokens to generate) runs on replica 0; its second step
    // starts at d, exactly when request 2 arrives, and round robin sends
    // request 2 to replica 0: that step includes it.
    let requests = vec![req(0, SimTime::ZERO, 512, 3), req(1, SimTime::ZERO, 512, 1), req(2, d, 100, 1)];
    let (records, run) = run_fixed(&s, 2, Router::RoundRobin, requests);
    assert_eq!(run.placement.requests, [Some(0), Some(1), Some(0)]);
    assert_eq!(records[2].first_scheduled, Some(d), "the step at d took the request routed at d");
}

#[test]
fn the_router_sees_the_end_of_every_step_that_started_before_the_arrival() {
    let s = scenario("workload: {arrivals: {constant: {rate: 1}}, requests: 1, prompt_tokens: 1, output_tokens: 1}");
    let d = lone_step_end(&s, 512);
    let one_ns_before = SimTime::from_nanos(d.as_nanos() - 1);
    // Request 0 (one token) finishes at d in the step that starts at 0.
    // Request 1 arrives 1 ns before d: that step started before it, so its
    // end is seen (the spec's lookahead): replica 0 has nothing
    // outstanding, and the tie goes to replica 0.
    let (_, run) =
        run_fixed(&s, 2, Router::LeastOutstanding, vec![req(0, SimTime::ZERO, 512, 1), req(1, one_ns_before, 64, 1)]);
    assert_eq!(run.placement.requests, [Some(0), Some(0)]);
    // With two tokens, request 0 is still outstanding after that step: replica 1.
    let (_, run) =
        run_fixed(&s, 2, Router::LeastOutstanding, vec![req(0, SimTime::ZERO, 512, 2), req(1, one_ns_before, 64, 1)]);
    assert_eq!(run.placement.requests, [Some(0), Some(1)]);
    // Two arrivals at the same instant: the first is counted before the second is routed.
    let (_, run) = run_fixed(&s, 3, Router::LeastOutstanding, (0..3).map(|i| req(i, SimTime::ZERO, 64, 1)).collect());
    assert_eq!(run.placement.requests, [Some(0), Some(1), Some(2)]);
}

#[test]
fn least_kv_counts_queued_requests_by_their_whole_length() {
    let s = scenario("workload: {arrivals: {constant: {rate: 1}}, requests: 1, prompt_tokens: 1, output_tokens: 1}");
    // At t = 0 nothing has run: request 0 (ceil(1600/16) = 100 blocks
    // queued) goes to replica 0, request 1 (ceil(160/16) = 10) to replica
    // 1, request 2 (10 blocks) to replica 1 (10 < 100), request 3 to
    // replica 1 again (20 < 100), ...
    let prompts = [1600, 160, 160, 160];
    let requests = prompts.iter().enumerate().map(|(i, &p)| req(i as u64, SimTime::ZERO, p, 1)).collect();
    let (_, run) = run_fixed(&s, 2, Router::LeastKv, requests);
    assert_eq!(run.placement.requests, [Some(0), Some(1), Some(1), Some(1)]);
}

#[test]
fn round_robin_replicas_are_single_engines_fed_every_rth_request() {
    let s = scenario("workload: {arrivals: {constant: {rate: 1}}, requests: 1, prompt_tokens: 1, output_tokens: 1}");
    // Constant rate, 3 ms apart, lengths varying so that batches form.
    let requests: Vec<Request> = (0..240u64)
        .map(|i| req(i, SimTime::from_nanos(i * 3_000_000), 100 + (i as u32 * 37) % 900, 5 + (i as u32 * 13) % 60))
        .collect();
    for r in [1usize, 2, 3, 5] {
        let (cluster, run) = run_fixed(&s, r, Router::RoundRobin, requests.clone());
        for j in 0..r {
            let mine: Vec<Request> = requests.iter().copied().skip(j).step_by(r).collect();
            let ids: Vec<u64> = mine.iter().map(|q| q.id).collect();
            let renumbered = mine.iter().enumerate().map(|(k, q)| Request { id: k as u64, ..*q }).collect();
            let mut engine = Engine::new(s.engine_config());
            let mut alone = Collector::new(&s.capacity, CollectorOptions::default());
            let single = crate::sim::Single::new(&mut engine);
            drive(single, &mut Fixed(renumbered), &mut alone, &Setup::default(), |_, _, _| {}, &mut |_| {}).unwrap();
            for (k, &id) in ids.iter().enumerate() {
                let (a, b) = (&alone.requests()[k], &cluster[id as usize]);
                assert_eq!(run.placement.requests[id as usize], Some(j as u32));
                assert_eq!(RequestRecord { id, ..a.clone() }, *b, "{r} replicas, replica {j}, request {id}");
            }
        }
    }
}

/// Mixed pools' weights, worked by hand.
#[test]
fn weighted_routers_follow_speed_and_kv_size() {
    use super::router::Weights;
    let a = Arrival::default();
    let loads = |o: [u64; 2], blocks: [u64; 2]| {
        [0, 1].map(|i| Load { outstanding: o[i], active_blocks: blocks[i], hit_blocks: 0 })
    };
    let (speed, blocks) = ([2.0, 1.0], [1000.0, 300.0]);
    let w = Some(Weights { speed: &speed, blocks: &blocks });
    // Smooth weighted round robin, speeds 2:1: totals [2,1] pick 0 (-1,1),
    // [1,2] pick 1 (1,-1), [3,0] pick 0 (0,0), then again.
    let mut rr = RouterState::new(Router::RoundRobin, 1.0, 1);
    let picks: Vec<usize> = (0..6).map(|_| rr.route_weighted(&a, &loads([0, 0], [0, 0]), None, w)).collect();
    assert_eq!(picks, [0, 1, 0, 0, 1, 0]);
    // Least outstanding by (n + 1) / speed: 3 on the fast one (2) against
    // 1 on the slow one (2): a tie, the lower index; 4 against 1: the slow one.
    let mut lo = RouterState::new(Router::LeastOutstanding, 1.0, 1);
    assert_eq!(lo.route_weighted(&a, &loads([3, 1], [0, 0]), None, w), 0);
    assert_eq!(lo.route_weighted(&a, &loads([4, 1], [0, 0]), None, w), 1);
    // Least KV by the fraction of blocks: 100 of 1,000 against 60 of 300.
    let mut kv = RouterState::new(Router::LeastKv, 1.0, 1);
    assert_eq!(kv.route_weighted(&a, &loads([0, 0], [100, 60]), None, w), 0);
    assert_eq!(kv.route_weighted(&a, &loads([0, 0], [400, 60]), None, w), 1);
    // Random: about two thirds to the fast one.
    let mut r = RouterState::new(Router::Random, 1.0, 3);
    let fast = (0..3000).filter(|_| r.route_weighted(&a, &loads([0, 0], [0, 0]), None, w) == 0).count();
    assert!((1900..2100).contains(&fast), "{fast}");
    // Only ready replicas: the slow one alone.
    let mut rr = RouterState::new(Router::RoundRobin, 1.0, 1);
    assert_eq!(rr.route_weighted(&a, &loads([0, 0], [0, 0]), Some(&[false, true]), w), 1);
}
