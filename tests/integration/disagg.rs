//! Prefill/decode disaggregation (docs/clusters.md), checked from outside:
//! seeded randomized scenarios with pools (every request on exactly one
//! prefill and at most one decode replica, ending once, every replica's
//! KV invariants after every step), a hand-worked TTFT and transfer
//! example, pools with one-token answers matching a colocated cluster,
//! and bad pool input exiting 2.

use std::collections::BTreeMap;
use std::path::Path;

use llmsim_core::engine::{Engine, Observer, RejectReason, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_planner::cluster::disagg::{KvLink, PoolCollectors, Pools};
use llmsim_planner::cluster::router::RouterState;
use llmsim_planner::metrics::{Collector, CollectorOptions};
use llmsim_planner::run_driver::{PoolKind, Setup, drive};
use llmsim_planner::workload::AnySource;
use llmsim_scenario::config::Router;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::*;
use crate::support_cluster::{Shape, random_engine, scenario};

/// Routers a decode pool may use (it does no cache lookup).
const DECODE_ROUTERS: [Router; 5] =
    [Router::RoundRobin, Router::Random, Router::LeastOutstanding, Router::LeastKv, Router::SessionAffinity];

/// A random small scenario with prefill and decode pools.
fn random_scenario(rng: &mut ChaCha8Rng) -> (String, Router, Router, usize, usize) {
    let caching = rng.random_bool(0.5);
    let mut prefill_router = Router::ALL[rng.random_range(0..Router::ALL.len())];
    if prefill_router == Router::PrefixAffinity && !caching {
        prefill_router = Router::LeastKv;
    }
    let decode_router = DECODE_ROUTERS[rng.random_range(0..DECODE_ROUTERS.len())];
    let (p, d) = (rng.random_range(1..4usize), rng.random_range(1..5usize));
    // Prefixes short enough for the smallest decode cache (60 one-token blocks).
    let shape = Shape { blocks: [60, 200, 2000], gamma: false, max_prefix: 50 };
    let engine = random_engine(rng, &shape, caching);
    // The decode pool sometimes has its own scheduler or a smaller GPU.
    let decode_extra = match rng.random_range(0..3) {
        0 => String::new(),
        1 => format!(", scheduler: {{max_num_sequences: {}}}", [1, 4, 64][rng.random_range(0..3)]),
        _ => ", hardware: {hbm_gib: 40, memory_bandwidth_gbps: 1500, peak_tflops: 312}".to_string(),
    };
    let overlap = if prefill_router == Router::PrefixAffinity { ", overlap_weight: 2" } else { "" };
    let text = format!(
        "{engine}cluster:
  prefill: {{replicas: {p}, router: {pr}{overlap}}}
  decode: {{replicas: {d}, router: {dr}{decode_extra}}}
  kv_transfer: {{bandwidth_gbps: {bw}, latency_ms: {lat}}}
",
        pr = prefill_router.as_str(),
        dr = decode_router.as_str(),
        bw = [0.5, 50.0][rng.random_range(0..2)],
        lat = [0.0, 1.0][rng.random_range(0..2)],
    );
    (text, prefill_router, decode_router, p, d)
}

/// Every request's events, and where each came from.
#[derive(Default)]
struct Seen {
    arrived: BTreeMap<RequestId, u32>,
    /// id -> (finished or rejected events, rejected before routing)
    ends: BTreeMap<RequestId, (u32, bool)>,
    /// Token and end events since the last step: (id, token index, 0 for an end).
    pending: Vec<(RequestId, u32)>,
    /// id -> (pool, replica, token index) of every token and end.
    seen_on: BTreeMap<RequestId, Vec<(PoolKind, usize, u32)>>,
    tokens: u64,
}

impl Observer for Seen {
    fn arrived(&mut self, id: RequestId, _: SimTime, _: u32, output: u32) {
        *self.arrived.entry(id).or_default() += 1;
        assert!(output >= 1);
    }
    fn token(&mut self, id: RequestId, _: SimTime, index: u32) {
        self.tokens += 1;
        self.pending.push((id, index));
    }
    fn finished(&mut self, id: RequestId, _: SimTime) {
        self.ends.entry(id).or_default().0 += 1;
        self.pending.push((id, 0));
    }
    fn rejected(&mut self, id: RequestId, _: SimTime, reason: RejectReason) {
        let e = self.ends.entry(id).or_default();
        e.0 += 1;
        if reason == RejectReason::ContextLength {
            e.1 = true;
        } else {
            self.pending.push((id, 0));
        }
    }
    fn step(&mut self, _: &StepRecord) {}
}

#[test]
fn every_request_runs_on_one_prefill_and_one_decode_replica_and_every_replica_keeps_its_invariants() {
    let mut totals = BTreeMap::<String, u64>::new();
    for seed in 0..250u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (text, pr, dr, p, d) = random_scenario(&mut rng);
        let s = scenario(&text);
        let disagg = s.cluster.as_ref().and_then(|c| c.disagg.as_ref()).expect("pools");
        let mut prefill: Vec<Engine> = (0..p).map(|_| Engine::new(disagg.prefill.scenario.engine_config())).collect();
        let mut cfg = disagg.decode.scenario.engine_config();
        cfg.prefix_caching = false;
        let mut decode: Vec<Engine> = (0..d).map(|_| Engine::new(cfg.clone())).collect();
        let mut prefill_router = RouterState::new(pr, 2.0, s.workload.seed);
        let mut decode_router = RouterState::new(dr, 1.0, s.workload.seed + 1);
        let mut source = AnySource::new(&s);
        let mut obs = Seen::default();
        let mut per_pool = PoolCollectors {
            prefill: Collector::new(&s.capacity, CollectorOptions::default()),
            decode: Collector::new(&disagg.decode.scenario.capacity, CollectorOptions::default()),
        };
        let setup = Setup { delay_ns: (s.latency.request_overhead_ms * 1e6) as u64, ..Setup::default() };
        let link = KvLink { kv_transfer: disagg.kv_transfer.clone(), kv_bytes_per_token: 524_288 };
        let routers = [&mut prefill_router, &mut decode_router];
        let pools = Pools::new(&mut prefill, &mut decode, routers, &mut per_pool, link);
        let run = drive(
            pools,
            &mut source,
            &mut obs,
            &setup,
            |place, e: &Engine, o: &mut Seen| {
                let (kind, r) = (place.pool.expect("a pool"), place.replica);
                e.check_invariants().unwrap_or_else(|err| panic!("seed {seed}, {kind:?} replica {r}: {err}"));
                for (id, index) in o.pending.drain(..) {
                    o.seen_on.entry(id).or_default().push((kind, r, index));
                }
            },
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let ctx = format!("seed {seed}\n{text}");
        assert!(prefill.iter().chain(&decode).all(Engine::is_idle), "{ctx}");
        assert!(obs.arrived.values().all(|&n| n == 1), "each request arrives once: {ctx}");
        assert_eq!(obs.ends.len(), obs.arrived.len(), "every arrival ends: {ctx}");
        for (&id, &(ends, before_routing)) in &obs.ends {
            assert_eq!(ends, 1, "request {id} ended {ends} times: {ctx}");
            let (placed, decoded) = (run.placement.requests[id as usize], run.placement.decode[id as usize]);
            assert_eq!(placed.is_none(), before_routing, "request {id}: {ctx}");
            let on = obs.seen_on.get(&id).map(Vec::as_slice).unwrap_or_default();
            // Its first token comes from its prefill replica, every later
            // one and its end (if it got past its first token) from its decode replica.
            for &(kind, r, index) in on {
                match kind {
                    PoolKind::Prefill => {
                        assert_eq!(Some(r as u32), placed, "request {id}: {ctx}");
                        assert!(index <= 1, "request {id} got token {index} on a prefill replica: {ctx}");
                    }
                    PoolKind::Decode => {
                        assert_eq!(Some(r as u32), decoded, "request {id}: {ctx}");
                        assert!(index != 1, "request {id}'s first token on a decode replica: {ctx}");
                    }
                }
            }
            if decoded.is_some() {
                assert!(placed.is_some(), "request {id} decoded without a prefill: {ctx}");
                assert!(on.iter().any(|x| x.0 == PoolKind::Decode), "request {id} never reached decode: {ctx}");
                *totals.entry("decoded".into()).or_default() += 1;
            }
        }
        assert_eq!(
            run.prefill.iter().map(|x| x.requests).sum::<u64>(),
            run.placement.requests.iter().flatten().count() as u64
        );
        assert_eq!(
            run.decode.iter().map(|x| x.requests).sum::<u64>(),
            run.placement.decode.iter().flatten().count() as u64
        );
        assert_eq!(run.transfers_ns.len() as u64, run.decode.iter().map(|x| x.requests).sum::<u64>(), "{ctx}");
        let tokens: u64 = run.prefill.iter().chain(&run.decode).map(|x| x.output_tokens).sum();
        assert_eq!(tokens, obs.tokens, "{ctx}");
        *totals.entry(format!("prefill {}", pr.as_str())).or_default() += 1;
        *totals.entry(format!("decode {}", dr.as_str())).or_default() += 1;
        *totals.entry("decode preemptions".into()).or_default() +=
            run.decode.iter().map(|x| x.preemptions).sum::<u64>();
        let rejected = obs.ends.keys().filter(|&&id| {
            obs.seen_on.get(&id).is_some_and(|v| v.iter().any(|x| x.0 == PoolKind::Decode && x.2 == 0))
                && run.placement.decode[id as usize].is_some()
        });
        *totals.entry("ended on decode".into()).or_default() += rejected.count() as u64;
    }
    for key in ["decoded", "decode preemptions", "ended on decode"] {
        assert!(totals.get(key).copied().unwrap_or(0) > 5, "{key}: {totals:?}");
    }
    for r in Router::ALL {
        assert!(totals.get(&format!("prefill {}", r.as_str())).copied().unwrap_or(0) > 3, "{totals:?}");
    }
    eprintln!("disaggregation invariants held: {totals:?}");
}

/// A hand-worked request. 1 B parameters of 2 bytes read at 1,000 GB/s:
/// 2 ms a step; 1,000 TFLOPS: 2 us of compute a token; 1,000 KV bytes a
/// token: 1 ns of reading a token of context.
const HAND: &str = "hardware: {hbm_gib: 80, memory_bandwidth_gbps: 1000, peak_tflops: 1000}
model:
  context_length: 4096
  weights: {parameters_billions: 1}
  kv_cache: {bytes_per_token: 1000, block_size: 16, num_blocks: 100}
workload:
  arrivals: {constant: {rate: 1}}
  requests: 1
  prompt_tokens: 1000
  output_tokens: 3
cluster:
  prefill: {replicas: 1}
  decode: {replicas: 1}
  kv_transfer: {bandwidth_gbps: 1, latency_ms: 2}
";

#[test]
fn a_hand_worked_request_takes_its_ttft_from_prefill_and_pays_the_transfer_in_its_itl() {
    let out = llmsim_planner::Run::new(&scenario(HAND)).go().unwrap();
    let r = &out.requests[0];
    // Prefill, at 0: compute 2e9 * 1000 / 1e15 = 2 ms; memory
    // (2e9 + 1000 * 1000) / 1e12 = 2.001 ms: the first token at 2.001 ms.
    assert_eq!(r.first_token, Some(SimTime::from_nanos(2_001_000)));
    // Transfer: 2 ms + 1000 * 1000 bytes / 1e9 B/s = 3 ms, to 5.001 ms.
    // Decode with c = 1000: memory (2e9 + 1000 * 1001) / 1e12 = 2.001001
    // ms, token 2 at 7.002001 ms; then c = 1001: 2.001002 ms, token 3 at
    // 9.003003 ms.
    assert_eq!(r.last_token, Some(SimTime::from_nanos(9_003_003)));
    let res = &out.result;
    assert_eq!(res.ttft_ms.p50, Some(2.001));
    assert_eq!(res.itl_ms.max, Some(5.001001), "transfer and decode step in the first gap");
    assert_eq!(res.e2e_ms.max, Some(9.003003));
    let t = res.kv_transfer_ms.as_ref().unwrap();
    assert_eq!((t.count, t.max), (1, Some(3.0)));
    let pools = res.pools.as_ref().unwrap();
    assert_eq!((pools.prefill.steps.count, pools.decode.steps.count), (1, 2));
    assert_eq!((pools.prefill.requests, pools.decode.requests), (1, 1));
    // Blocks: ceil(1000/16) = 63 on prefill; ceil(1001/16) = 63, then
    // ceil(1002/16) = 63 on decode.
    assert_eq!((pools.prefill.kv.peak_blocks, pools.decode.kv.peak_blocks), (63, 63));
    assert_eq!(res.gpus, Some(2));
    assert_eq!(res.requests.completed, 1);
    assert_eq!(res.requests.output_tokens, 3);
}

#[test]
fn one_token_answers_never_leave_the_prefill_pool_and_match_a_colocated_cluster() {
    for seed in 0..20u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(500 + seed);
        let (text, pr, _, p, _) = random_scenario(&mut rng);
        let text = text.replace("output_tokens: {uniform: [1, 80]}", "output_tokens: 1");
        let pooled =
            llmsim_planner::Run::new(&scenario(&text)).options(CollectorOptions { keep_steps: true }).go().unwrap();
        let head = text.split("cluster:").next().unwrap();
        let overlap = if pr == Router::PrefixAffinity { ", overlap_weight: 2" } else { "" };
        let colocated = format!("{head}cluster: {{replicas: {p}, router: {}{overlap}}}\n", pr.as_str());
        let plain = llmsim_planner::Run::new(&scenario(&colocated))
            .options(CollectorOptions { keep_steps: true })
            .go()
            .unwrap();
        let ctx = format!("seed {seed}\n{text}");
        let pools = pooled.result.pools.as_ref().unwrap();
        assert_eq!(pools.decode.requests + pools.decode.steps.count, 0, "{ctx}");
        assert_eq!(pooled.result.kv_transfer_ms.as_ref().map(|t| t.count), Some(0), "{ctx}");
        assert_eq!(pooled.requests, plain.requests, "{ctx}");
        assert_eq!(pooled.steps, plain.steps, "{ctx}");
        assert_eq!(pooled.result.ttft_ms, plain.result.ttft_ms, "{ctx}");
        assert_eq!(pooled.result.kv, plain.result.kv, "{ctx}");
    }
}

#[test]
fn a_pooled_run_is_byte_identical_from_run_to_run_and_reports_pools() {
    let dir = tempdir();
    let run = |name: &str| {
        let (json, req, steps) = (
            dir.path().join(format!("{name}.json")),
            dir.path().join(format!("{name}.csv")),
            dir.path().join(format!("{name}-s.csv")),
        );
        let out =
            TestCommand::new(&["run", "scenarios/clusters/disagg.yml", "--set", "workload.requests=300", "--json"])
                .arg(&json)
                .arg("--requests-csv")
                .arg(&req)
                .arg("--steps-csv")
                .arg(&steps)
                .ok();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        (out.stdout(), read(&json), read(&req), read(&steps))
    };
    let (a, b) = (run("a"), run("b"));
    assert_eq!(a.1, b.1);
    assert_eq!(a.2, b.2);
    assert_eq!(a.3, b.3);
    for want in ["prefill 1 x 1 GPU", "decode 3 x 1 GPU", "kv transfer"] {
        assert!(a.0.contains(want), "{want}\n{}", a.0);
    }
    let v: serde_json::Value = serde_json::from_str(&a.1).unwrap();
    assert_eq!(v["pools"]["prefill"]["replicas"], 1);
    assert_eq!(v["pools"]["decode"]["replicas"], 3);
    assert_eq!(v["gpus"], 4);
    // 1,000 tokens x 524,288 bytes over 50 GB/s, plus 1 ms: 11.48576 ms.
    assert_eq!(v["kv_transfer_ms"]["max"], 11.48576);
    assert!(a.2.lines().next().unwrap().ends_with(",replica,decode_replica"), "{}", a.2);
    assert!(a.3.lines().next().unwrap().ends_with(",replica,pool"), "{}", a.3);
    let decode_rows = a.3.lines().filter(|l| l.ends_with(",decode")).count();
    assert_eq!(decode_rows as u64, v["pools"]["decode"]["steps"]["count"].as_u64().unwrap());
}

#[test]
fn a_cluster_without_pools_writes_no_pool_fields() {
    let dir = tempdir();
    let json = dir.path().join("r.json");
    TestCommand::new(&["run", "scenarios/clusters/chat-fleet.yml", "-q", "--set", "workload.requests=200", "--json"])
        .arg(&json)
        .ok();
    let text = std::fs::read_to_string(&json).unwrap();
    for key in ["\"pools\"", "\"kv_transfer_ms\""] {
        assert!(!text.contains(key), "{key} in {text}");
    }
}

/// Bad pool input: exit 2, naming the key and what is allowed.
#[test]
fn bad_pools_exit_2_with_a_clear_error() {
    // A 14.4 GiB decode GPU: 14.4 x 2^30 x 0.9 - 13.48e9 bytes of weights
    // leave 435.7 MB, 51 blocks of 16 x 524,288 bytes; the 1,000-token
    // prompt and its first token need ceil(1001/16) = 63.
    let small = "cluster.decode.hardware={hbm_gib: 14.4, memory_bandwidth_gbps: 3000, peak_tflops: 989}";
    let cases: [(&str, &[&str]); 5] = [
        (
            "cluster.kv_transfer.bandwidth_gbps=0",
            &["cluster.kv_transfer.bandwidth_gbps", "0 is not allowed", "(0, 1,000,000]"],
        ),
        ("cluster.replicas=4", &["cluster.replicas", "conflicts with cluster.prefill/cluster.decode"]),
        ("cluster.router=least_kv", &["cluster.router", "each pool has its own router"]),
        (
            small,
            &[
                "cluster.decode",
                "cannot hold one request's prompt",
                "shortest prompt (1000 tokens)",
                "need 63 blocks",
                "has 51 blocks",
            ],
        ),
        ("cluster.decode.router=prefix_affinity", &["cluster.decode.router", "no cache lookup"]),
    ];
    for (set, fragments) in cases {
        TestCommand::new(&["run", "scenarios/clusters/disagg.yml", "-q", "--set", set])
            .fails_with(2)
            .stderr_has(fragments);
    }
}

#[test]
fn a_link_too_slow_to_end_a_transfer_in_time_stops_the_run_with_the_figure() {
    // 1,000 prompt tokens x 524,288 bytes = 524,288,000 bytes; at 1e-12 GB/s
    // that is 5.24e11 s (plus 1 ms), past the 1e9 s limit. It once ended
    // at u64::MAX ns, never reached decode, and exited 0 with 0 completed.
    for (bw, secs) in [("1e-12", "524288000000.001"), ("1e-10", "5242880000.001")] {
        TestCommand::new(&["run", "scenarios/clusters/disagg.yml", "-q", "--set", "workload.requests=50", "--set"])
            .arg(format!("cluster.kv_transfer.bandwidth_gbps={bw}"))
            .fails_with(2)
            .stderr_has(&["524,288,000 bytes", &format!("would take {secs} s"), "limit of 1,000,000,000 s"]);
    }
}

#[test]
fn serve_refuses_a_model_with_pools() {
    let dir = tempdir();
    let models = write(
        dir.path(),
        "models.yml",
        &format!("models:\n  - name: pooled\n    scenario: {}\n", repo("scenarios/clusters/disagg.yml").display()),
    );
    TestCommand::new(&["serve", "--port", "0", "--models"]).arg(&models).fails_with(2).stderr_has(&[
        "models[0].cluster",
        "prefill/decode pools",
        "llmsim run",
    ]);
}

#[test]
fn capacity_splits_the_gpus_between_the_pools_and_picks_the_split_with_the_most_headroom() {
    let dir = tempdir();
    let json = dir.path().join("c.json");
    TestCommand::new(&["capacity", "scenarios/clusters/disagg.yml", "-q", "--slo", "ttft_p99_ms=60"])
        .arg("--slo")
        .arg("itl_p99_ms=10")
        .arg("--target-rate")
        .arg("24")
        .arg("--gpus")
        .arg("4")
        .arg("--seeds")
        .arg("1")
        .arg("--requests")
        .arg("1500")
        .arg("--json")
        .arg(&json)
        .ok();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let split = &v["split"];
    let probes = split["probes"].as_array().unwrap();
    // 4 one-GPU replicas: 1:3, 2:2, 3:1.
    let layouts: Vec<(u64, u64)> = probes
        .iter()
        .map(|p| (p["prefill_replicas"].as_u64().unwrap(), p["decode_replicas"].as_u64().unwrap()))
        .collect();
    assert_eq!(layouts, [(1, 3), (2, 2), (3, 1)]);
    // The choice, from the probes' own figures: of those meeting both
    // SLOs, the lowest largest value over bound.
    let ratio = |p: &serde_json::Value| {
        let v = &p["slo_values"];
        (v["ttft_p99_ms"].as_f64().unwrap() / 60.0).max(v["itl_p99_ms"].as_f64().unwrap() / 10.0)
    };
    let passing: Vec<&serde_json::Value> = probes.iter().filter(|p| p["pass"] == true).collect();
    assert!(!passing.is_empty(), "{split}");
    let best = passing.iter().min_by(|a, b| ratio(a).total_cmp(&ratio(b))).unwrap();
    assert_eq!(split["prefill_replicas"], best["prefill_replicas"], "{split}");
    assert_eq!(split["decode_replicas"], best["decode_replicas"], "{split}");
    assert!(ratio(best) <= 1.0);
    assert_eq!(split["gpu_budget"], 4);
    // --gpus needs pools.
    TestCommand::new(&["capacity", "scenarios/base.yml", "-q", "--slo", "ttft_p99_ms=60", "--target-rate", "5"])
        .arg("--gpus")
        .arg("4")
        .fails_with(2)
        .stderr_has(&["--gpus 4", "no cluster.prefill/cluster.decode"]);
}

/// A decode pool on smaller GPUs has fewer blocks than the prefill pool:
/// every steps-CSV row's `kv_usage` is over its own replica's blocks, and
/// so are the pools' and the aggregate KV figures.
#[test]
fn kv_usage_is_over_each_replicas_own_blocks_when_the_pools_differ() {
    let dir = tempdir();
    let file = write(
        dir.path(),
        "pools.yml",
        "name: pools
hardware: { name: big, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989 }
model:
  name: base-6.7b
  context_length: 8192
  weights: { parameters_billions: 6.74, bytes_per_parameter: 2 }
  kv_cache: { bytes_per_token: 524288, block_size: 16, gpu_memory_utilization: 0.9 }
scheduler: { max_batch_tokens: 8192, max_num_sequences: 256 }
workload:
  seed: 3
  arrivals: { poisson: { rate: 30 } }
  requests: 300
  prompt_tokens: 1000
  output_tokens: { uniform: [100, 300] }
cluster:
  prefill: { replicas: 1 }
  decode: { replicas: 2, hardware: { name: small, hbm_gib: 40, memory_bandwidth_gbps: 3000, peak_tflops: 989 } }
  kv_transfer: { bandwidth_gbps: 50 }
",
    );
    // Blocks by hand: floor((hbm_gib x 2^30 x 0.9 - 6.74e9 x 2 bytes) / (524,288 x 16)).
    // 80 GiB: (77,309,411,328 - 13,480,000,000) / 8,388,608 = 7,609.06;
    // 40 GiB: (38,654,705,664 - 13,480,000,000) / 8,388,608 = 3,001.06.
    let (prefill_blocks, decode_blocks) = (7609.0, 3001.0);
    let (json, steps) = (dir.path().join("r.json"), dir.path().join("s.csv"));
    let out = TestCommand::new(&["run"]).arg(&file).arg("--json").arg(&json).arg("--steps-csv").arg(&steps).ok();
    let text = std::fs::read_to_string(&steps).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("{name}"));
    let (used_at, usage_at, dur_at, pool_at) =
        (col("kv_blocks_used"), col("kv_usage"), col("duration_ms"), col("pool"));
    // Per pool: peak blocks, sum of used x ns; and both pools' usage x ns and ns.
    let (mut peak, mut usage_ns, mut busy_ns) = ([0.0f64; 2], 0.0, 0.0);
    for line in text.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let used: f64 = cells[used_at].parse().unwrap();
        let (p, blocks) = match cells[pool_at] {
            "prefill" => (0, prefill_blocks),
            "decode" => (1, decode_blocks),
            other => panic!("pool {other}: {line}"),
        };
        assert_eq!(cells[usage_at], format!("{:.6}", used / blocks), "{line}");
        let ns = (cells[dur_at].parse::<f64>().unwrap() * 1e6).round();
        peak[p] = peak[p].max(used);
        usage_ns += used / blocks * ns;
        busy_ns += ns;
    }
    // The test can fail: the decode pool held KV (its rows differ from the prefill pool's ratio).
    assert!(peak[1] > 100.0, "{peak:?}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let pools = &v["pools"];
    assert_eq!(pools["prefill"]["capacity"]["num_blocks"], 7609);
    assert_eq!(pools["decode"]["capacity"]["num_blocks"], 3001);
    let close = |got: &serde_json::Value, want: f64| {
        let got = got.as_f64().unwrap();
        assert!((got - want).abs() <= 1e-9 * want.max(1.0), "{got} vs {want}");
    };
    close(&pools["prefill"]["kv"]["peak_usage"], peak[0] / prefill_blocks);
    close(&pools["decode"]["kv"]["peak_usage"], peak[1] / decode_blocks);
    assert_eq!(v["kv"]["peak_blocks"].as_f64(), Some(peak[0].max(peak[1])));
    close(&v["kv"]["peak_usage"], (peak[0] / prefill_blocks).max(peak[1] / decode_blocks));
    close(&v["kv"]["mean_usage"], usage_ns / busy_ns);
    // The summary shows each pool's capacity.
    let stdout = out.stdout();
    for want in ["capacity   prefill replica 7,609 blocks", "decode replica 3,001 blocks"] {
        assert!(stdout.contains(want), "{want}\n{stdout}");
    }
}
