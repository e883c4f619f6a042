//! The autoscaled fleet's rules, checked from its outputs against figures
//! derived by hand from the scenario and the per-request records (never
//! from the topology's own helpers).

use super::Life;
use crate::cluster::tests::scenario;
use crate::metrics::{RequestRecord, Status};
use crate::run::run_scaled;

const S: u64 = 1_000_000_000;

/// The life of `slot` that held the replica at `at` (asked for at or before).
fn life_at(lives: &[Life], slot: usize, at: u64) -> Option<&Life> {
    lives.iter().rfind(|l| l.slot == slot && l.asked <= at)
}

/// Requests per slot, with where each went.
fn placed(records: &[RequestRecord], placement: &crate::metrics::Placement) -> Vec<(usize, RequestRecord)> {
    records
        .iter()
        .map(|r| (placement.requests[r.id as usize].expect("every request placed") as usize, r.clone()))
        .collect()
}

/// A step of load on one replica: 2 req/s, then 30 from 60 s. The
/// autoscaler may add one replica a period, each ready 50 s after it is
/// asked for.
const STEP_OF_LOAD: &str = "workload:
  seed: 3
  arrivals: {curve: {steps: [[0, 2], [60, 30]]}}
  duration_s: 240
  prompt_tokens: 512
  output_tokens: 128
cluster:
  replicas: 1
  router: least_outstanding
  autoscale: {max_replicas: 3, target: 4, scale_up: {pods: 1}, cold_start: {engine_start_s: 20, graph_capture_s: 30}}
";

#[test]
fn a_cold_start_delays_readiness_by_exactly_its_total_and_a_starting_replica_gets_no_request() {
    let (out, run) = run_scaled(&scenario(STEP_OF_LOAD)).unwrap();
    let events = &out.result.over_time.as_ref().unwrap().autoscale.as_ref().unwrap().events;
    assert!(!events.is_empty(), "the step of load scaled nothing");
    // Decisions come every 15 s; one replica a period (pods: 1).
    for e in events {
        assert_eq!((e.t_s * 1e9).round() as u64 % (15 * S), 0, "{e:?}");
        assert!(e.to <= e.from + 1, "{e:?}");
    }
    // Every replica asked for is ready exactly 20 + 30 s later.
    let added: Vec<&Life> = run.lives.iter().filter(|l| l.asked > 0).collect();
    assert_eq!(added.len(), 2);
    for l in &added {
        assert_eq!(l.ready, Some(l.asked + 50 * S), "{l:?}");
    }
    // No request goes to a replica before it is ready (or after it was
    // asked to go); the first arrival at or after the first new replica's
    // readiness goes to it (it has nothing outstanding, the first one has
    // a queue).
    let placement = out.placement.as_ref().unwrap();
    let mut by_arrival = placed(&out.requests, placement);
    by_arrival.sort_by_key(|(_, r)| (r.arrival, r.id));
    for (slot, r) in &by_arrival {
        let t = r.arrival.as_nanos();
        let life = life_at(&run.lives, *slot, t).expect("a replica in the slot");
        assert!(life.ready.is_some_and(|ready| ready <= t), "request {} sent to a starting replica: {life:?}", r.id);
        assert!(life.drain.is_none_or(|d| t < d), "request {} sent to a draining replica: {life:?}", r.id);
    }
    let first_new = added[0];
    let ready = first_new.ready.unwrap();
    let (slot, r) = by_arrival.iter().find(|(_, r)| r.arrival.as_nanos() >= ready).unwrap();
    assert_eq!(*slot, first_new.slot, "request {} at {} s", r.id, r.arrival.as_secs_f64());
}

/// A burst of 40 req/s for two minutes on 2 replicas, then 2 req/s: the
/// fleet grows, then shrinks with no stabilization while long requests
/// are still running on the replicas it removes.
const BURST_THEN_CALM: &str = "workload:
  seed: 5
  arrivals: {curve: {steps: [[0, 40], [120, 2]]}}
  duration_s: 400
  prompt_tokens: 256
  output_tokens: {uniform: [200, 1200]}
cluster:
  replicas: 2
  router: round_robin
  autoscale:
    max_replicas: 8
    target: 10
    scale_down: {stabilization_s: 0}
    cold_start: {engine_start_s: 10}
";

#[test]
fn draining_loses_no_request_and_a_drained_replica_leaves_when_its_last_request_ends() {
    let (out, run) = run_scaled(&scenario(BURST_THEN_CALM)).unwrap();
    let q = &out.result.requests;
    assert_eq!(q.rejected, 0);
    assert_eq!(q.completed as usize, out.requests.len(), "every request finishes exactly once");
    assert!(out.requests.iter().all(|r| r.status == Status::Finished && r.tokens == r.output));
    // Some replica was asked to go while it still had requests.
    let drained: Vec<&Life> =
        run.lives.iter().filter(|l| l.drain.is_some_and(|d| l.left.is_some_and(|e| e > d))).collect();
    assert!(!drained.is_empty(), "no replica drained: {:?}", run.lives);
    let placement = out.placement.as_ref().unwrap();
    for (slot, r) in placed(&out.requests, placement) {
        let life = life_at(&run.lives, slot, r.arrival.as_nanos()).unwrap();
        assert!(life.drain.is_none_or(|d| r.arrival.as_nanos() < d));
        // It leaves no earlier than its last request's last token.
        if let Some(left) = life.left {
            assert!(r.last_token.unwrap().as_nanos() <= left, "request {} outlived its replica {life:?}", r.id);
        }
    }
    for l in &drained {
        // ... and exactly at the last one's end.
        let last = placed(&out.requests, placement)
            .iter()
            .filter(|(s, r)| *s == l.slot && r.arrival.as_nanos() >= l.asked && r.arrival.as_nanos() < l.drain.unwrap())
            .map(|(_, r)| r.last_token.unwrap().as_nanos())
            .max()
            .unwrap();
        assert_eq!(l.left, Some(last), "{l:?}");
    }
}

/// numpy's default percentile (linear between closest ranks).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let r = q / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (r.floor() as usize, (r.floor() as usize + 1).min(sorted.len() - 1));
    sorted[lo] + (sorted[hi] - sorted[lo]) * (r - r.floor())
}

#[test]
fn each_window_counts_its_own_requests_and_gpu_hours_accrue_by_the_clock() {
    let mut s = scenario(
        "workload:
  seed: 9
  arrivals: {poisson: {rate: 25}}
  duration_s: 95
  prompt_tokens: {uniform: [64, 2048]}
  output_tokens: {uniform: [16, 256]}
cluster:
  replicas: 2
  router: least_kv
  timeline: {window_s: 20, slo: {ttft_p99_ms: 45}}
",
    );
    s.hardware.cost_per_hour = Some(3.0);
    let (out, _) = run_scaled(&s).unwrap();
    let o = out.result.over_time.as_ref().unwrap();
    let end = o.end_s;
    // A fixed fleet of 2 one-GPU replicas from 0 to the end, at 3 an hour.
    assert!((o.gpu_hours - 2.0 * end / 3600.0).abs() < 1e-12, "{} vs {}", o.gpu_hours, 2.0 * end / 3600.0);
    assert!((o.cost.unwrap() - 3.0 * o.gpu_hours).abs() < 1e-12);
    assert_eq!(o.windows as usize, out.windows.len());
    assert_eq!(out.windows.len(), (end / 20.0).ceil() as usize);
    let recs = &out.requests;
    let mut missed = Vec::new();
    for w in &out.windows {
        let (a, b) = ((w.start_s * 1e9).round() as u64, (w.end_s * 1e9).round() as u64);
        let inside = |t: u64| a <= t && t < b || (t == b && b == (end * 1e9).round() as u64);
        let width = (b - a) as f64 / 1e9;
        let offered = recs.iter().filter(|r| inside(r.arrival.as_nanos())).count() as f64;
        assert!((w.offered_rps - offered / width).abs() < 1e-9, "{w:?}");
        let served = recs.iter().filter(|r| r.last_token.is_some_and(|t| inside(t.as_nanos()))).count() as f64;
        assert!((w.served_rps - served / width).abs() < 1e-9, "{w:?}");
        let mut ttft: Vec<f64> = (recs.iter())
            .filter_map(|r| {
                r.first_token
                    .filter(|t| inside(t.as_nanos()))
                    .map(|t| (t.as_nanos() - r.arrival.as_nanos()) as f64 / 1e6)
            })
            .collect();
        ttft.sort_by(f64::total_cmp);
        assert_eq!(w.first_tokens as usize, ttft.len());
        if ttft.is_empty() {
            assert_eq!(w.ttft_p99_ms, None);
        } else {
            let p99 = percentile(&ttft, 99.0);
            assert!((w.ttft_p99_ms.unwrap() - p99).abs() < 1e-9, "{w:?} vs {p99}");
            assert!((w.ttft_p50_ms.unwrap() - percentile(&ttft, 50.0)).abs() < 1e-9);
            if p99 > 45.0 {
                missed.push(w.start_s);
            }
        }
        assert_eq!(w.slo_met, Some(ttft.is_empty() || percentile(&ttft, 99.0) <= 45.0));
        assert_eq!((w.ready, w.starting, w.draining), (2, 0, 0));
        assert!((w.gpu_hours - 2.0 * w.end_s / 3600.0).abs() < 1e-12);
    }
    // Some windows miss the bound and some meet it, so both paths are seen.
    assert!(!missed.is_empty() && missed.len() < out.windows.len(), "{missed:?}");
    assert_eq!(o.slo_missed_windows.as_ref(), Some(&missed));
}

#[test]
fn the_same_seed_gives_the_same_result_and_rows() {
    let s = scenario(BURST_THEN_CALM);
    let (a, _) = run_scaled(&s).unwrap();
    let (b, _) = run_scaled(&s).unwrap();
    assert_eq!(llmsim_core::util::to_json(&a.result), llmsim_core::util::to_json(&b.result));
    assert_eq!(a.windows, b.windows);
}

const POOLS_LOAD: &str = "workload:
  seed: 4
  arrivals: {poisson: {rate: 30}}
  duration_s: 60
  prompt_tokens: {uniform: [64, 1024]}
  output_tokens: {uniform: [16, 200]}
";

#[test]
fn one_pool_runs_as_the_same_fleet_without_pools() {
    let plain = scenario(&format!("{POOLS_LOAD}cluster: {{replicas: 3, router: least_outstanding, timeline: {{}}}}\n"));
    let pooled =
        scenario(&format!("{POOLS_LOAD}cluster: {{router: least_outstanding, pools: [{{name: a, replicas: 3}}]}}\n"));
    let (a, _) = run_scaled(&plain).unwrap();
    let (mut b, _) = run_scaled(&pooled).unwrap();
    let pools = b.result.over_time.as_mut().unwrap().pools.take().unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].requests, a.result.requests.total);
    assert_eq!(llmsim_core::util::to_json(&a.result), llmsim_core::util::to_json(&b.result));
}

#[test]
fn mixed_pools_count_their_own_gpu_hours_cost_and_requests() {
    // A pool of 2 replicas of the base card at 2.5 a GPU-hour and a pool
    // of 1 on a slower card (a quarter of the bandwidth) at 0.9.
    let s = scenario(&format!(
        "{POOLS_LOAD}cluster:
  router: least_outstanding
  pools:
    - {{name: fast, replicas: 2, cost_per_hour: 2.5}}
    - name: slow
      replicas: 1
      cost_per_hour: 0.9
      hardware: {{name: slow, hbm_gib: 48, memory_bandwidth_gbps: 864, peak_tflops: 362}}
"
    ));
    let (out, _) = run_scaled(&s).unwrap();
    let o = out.result.over_time.as_ref().unwrap();
    let pools = o.pools.as_ref().unwrap();
    let end = o.end_s;
    let (fast, slow) = (&pools[0], &pools[1]);
    assert_eq!((fast.name.as_str(), slow.name.as_str(), slow.hardware.as_str()), ("fast", "slow", "slow"));
    assert!((fast.gpu_hours - 2.0 * end / 3600.0).abs() < 1e-12);
    assert!((slow.gpu_hours - end / 3600.0).abs() < 1e-12);
    assert!((fast.cost.unwrap() - 2.5 * fast.gpu_hours).abs() < 1e-12);
    assert!((o.cost.unwrap() - (2.5 * 2.0 + 0.9) * end / 3600.0).abs() < 1e-9);
    assert_eq!(fast.requests + slow.requests, out.result.requests.total);
    // Each pool's requests are those placed on its replicas (slots 0, 1 and 2).
    let placement = out.placement.as_ref().unwrap();
    let on = |slots: &[u32]| placement.requests.iter().flatten().filter(|r| slots.contains(r)).count() as u64;
    assert_eq!((on(&[0, 1]), on(&[2])), (fast.requests, slow.requests));
    // The slower replica is weighed lower: it takes fewer than a third.
    assert!(slow.requests * 3 < out.result.requests.total, "{slow:?}");
    assert!(out.windows.iter().all(|w| w.pools == [(2, 0, 0), (1, 0, 0)]));
}
