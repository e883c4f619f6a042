//! Clusters (docs/clusters.md), checked from outside: seeded
//! randomized scenarios over every router with open and closed loops,
//! sessions, shared prefixes, small caches and overload; one replica gives
//! exactly the single engine's results; bad cluster input exits 2.

use std::collections::BTreeMap;

use llmsim_core::engine::{Engine, Observer, RejectReason, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_planner::cluster::Replicas;
use llmsim_planner::cluster::router::RouterState;
use llmsim_planner::metrics::{Collector, CollectorOptions};
use llmsim_planner::run_driver::{Setup, drive};
use llmsim_planner::workload::{AnySource, Source};
use llmsim_scenario::config::Router;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::*;
use crate::support_cluster::{Shape, random_engine, scenario};

/// A random small scenario; `cluster` is appended as given.
fn random_scenario(rng: &mut ChaCha8Rng, cluster: &str) -> String {
    let caching = rng.random_bool(0.5) || cluster.contains("prefix_affinity");
    let shape = Shape { blocks: [40, 120, 2000], gamma: true, max_prefix: 300 };
    format!("{}{cluster}", random_engine(rng, &shape, caching))
}

/// Records every request's terminal events and the replica of every
/// event that names one (from the stepping replica).
#[derive(Default)]
struct Ends {
    arrived: u64,
    /// id -> its arrival at the client.
    arrival_of: BTreeMap<RequestId, u64>,
    /// id -> (finished or rejected events, rejected before routing)
    ends: BTreeMap<RequestId, (u32, bool)>,
    /// Events since the last step, waiting for its replica.
    pending: Vec<RequestId>,
    /// id -> replicas that produced its tokens or its end.
    seen_on: BTreeMap<RequestId, Vec<usize>>,
    tokens: u64,
}

impl Observer for Ends {
    fn arrived(&mut self, id: RequestId, at: SimTime, _: u32, _: u32) {
        self.arrived += 1;
        self.arrival_of.insert(id, at.as_nanos());
    }
    fn token(&mut self, id: RequestId, _: SimTime, _: u32) {
        self.tokens += 1;
        self.pending.push(id);
    }
    fn finished(&mut self, id: RequestId, _: SimTime) {
        self.ends.entry(id).or_default().0 += 1;
        self.pending.push(id);
    }
    fn rejected(&mut self, id: RequestId, _: SimTime, reason: RejectReason) {
        let e = self.ends.entry(id).or_default();
        e.0 += 1;
        if reason == RejectReason::ContextLength {
            e.1 = true;
        } else {
            self.pending.push(id);
        }
    }
    fn step(&mut self, _: &StepRecord) {}
}

#[test]
fn every_request_ends_once_on_one_replica_and_every_replica_keeps_its_invariants() {
    let mut totals = BTreeMap::<&str, u64>::new();
    for seed in 0..300u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let policy = Router::ALL[rng.random_range(0..Router::ALL.len())];
        let replicas = rng.random_range(1..6usize);
        let weight = [0.0, 1.0, 4.0][rng.random_range(0..3)];
        let cluster = match policy {
            Router::PrefixAffinity => {
                format!("cluster: {{replicas: {replicas}, router: prefix_affinity, overlap_weight: {weight}}}\n")
            }
            p => format!("cluster: {{replicas: {replicas}, router: {}}}\n", p.as_str()),
        };
        let text = random_scenario(&mut rng, &cluster);
        let s = scenario(&text);
        let mut engines: Vec<Engine> = (0..replicas).map(|_| Engine::new(s.engine_config())).collect();
        let mut router = RouterState::new(policy, weight, s.workload.seed);
        let mut source = AnySource::new(&s);
        let mut obs = Ends::default();
        let delay_ns = (s.latency.request_overhead_ms * 1e6) as u64;
        let setup = Setup { delay_ns, ..Setup::default() };
        let run = drive(
            Replicas::new(&mut engines, &mut router),
            &mut source,
            &mut obs,
            &setup,
            |place, e: &Engine, o: &mut Ends| {
                let r = place.replica;
                e.check_invariants().unwrap_or_else(|err| panic!("seed {seed}, replica {r}: {err}"));
                for id in o.pending.drain(..) {
                    o.seen_on.entry(id).or_default().push(r);
                }
            },
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let ctx = format!("seed {seed}\n{text}");
        assert!(engines.iter().all(Engine::is_idle), "{ctx}");
        assert_eq!(obs.ends.len() as u64, obs.arrived, "every arrival ends: {ctx}");
        for (&id, &(ends, before_routing)) in &obs.ends {
            assert_eq!(ends, 1, "request {id} ended {ends} times: {ctx}");
            let placed = run.placement.requests[id as usize];
            assert_eq!(placed.is_none(), before_routing, "request {id}: {ctx}");
            if let Some(r) = placed {
                let on = obs.seen_on.get(&id).map(Vec::as_slice).unwrap_or_default();
                assert!(on.iter().all(|&x| x == r as usize), "request {id} placed on {r}, ran on {on:?}: {ctx}");
                assert!(!on.is_empty(), "request {id} ended on no replica: {ctx}");
            }
        }
        let routed = run.placement.requests.iter().flatten().count() as u64;
        assert_eq!(run.replicas.iter().map(|x| x.requests).sum::<u64>(), routed, "{ctx}");
        assert_eq!(run.replicas.iter().map(|x| x.output_tokens).sum::<u64>(), obs.tokens, "{ctx}");
        for (r, x) in run.replicas.iter().enumerate() {
            let count = run.placement.requests.iter().filter(|p| **p == Some(r as u32)).count() as u64;
            assert_eq!(x.requests, count, "replica {r}: {ctx}");
            assert!(x.peak_kv_blocks <= engines[r].kv_blocks_total(), "{ctx}");
        }
        *totals.entry(policy.as_str()).or_default() += 1;
        *totals.entry("requests").or_default() += obs.arrived;
        *totals.entry("rejected before routing").or_default() += obs.ends.values().filter(|e| e.1).count() as u64;
        *totals.entry("preemptions").or_default() += run.replicas.iter().map(|x| x.preemptions).sum::<u64>();
    }
    // The generator reaches every router, rejections and preemptions.
    for key in ["rejected before routing", "preemptions"].into_iter().chain(Router::ALL.map(Router::as_str)) {
        assert!(totals.get(key).copied().unwrap_or(0) > 5, "{key}: {totals:?}");
    }
    eprintln!("cluster invariants held: {totals:?}");
}

#[test]
fn one_replica_gives_the_single_engine_results_with_any_router() {
    for seed in 0..60u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(1000 + seed);
        let text = random_scenario(&mut rng, "");
        let plain =
            llmsim_planner::Run::new(&scenario(&text)).options(CollectorOptions { keep_steps: true }).go().unwrap();
        let caching = text.contains("prefix_caching: true");
        for policy in Router::ALL {
            if policy == Router::PrefixAffinity && !caching {
                continue;
            }
            let with = format!("{text}cluster: {{replicas: 1, router: {}}}\n", policy.as_str());
            let one =
                llmsim_planner::Run::new(&scenario(&with)).options(CollectorOptions { keep_steps: true }).go().unwrap();
            let mut result = one.result.clone();
            assert_eq!(result.replicas.as_ref().map(Vec::len), Some(1));
            assert_eq!(result.imbalance, Some(1.0));
            (result.router, result.gpus, result.replicas, result.imbalance) = (None, None, None, None);
            let ctx = format!("seed {seed}, {}\n{text}", policy.as_str());
            assert_eq!(result, plain.result, "{ctx}");
            assert_eq!(one.requests, plain.requests, "{ctx}");
            assert_eq!(one.steps, plain.steps, "{ctx}");
        }
    }
}

#[test]
fn a_scenario_without_a_cluster_writes_no_cluster_fields_or_columns() {
    let dir = tempdir();
    let (json, req, steps) = (dir.path().join("r.json"), dir.path().join("r.csv"), dir.path().join("s.csv"));
    TestCommand::new(&["run", "scenarios/base.yml", "-q", "--set", "workload.requests=50", "--json"])
        .arg(&json)
        .arg("--requests-csv")
        .arg(&req)
        .arg("--steps-csv")
        .arg(&steps)
        .ok();
    let text = std::fs::read_to_string(&json).unwrap();
    for key in ["\"replicas\"", "\"imbalance\"", "\"router\"", "\"gpus\""] {
        assert!(!text.contains(key), "{key} in {text}");
    }
    for f in [&req, &steps] {
        let head = std::fs::read_to_string(f).unwrap();
        assert!(!head.lines().next().unwrap().contains("replica"), "{head}");
    }
}

#[test]
fn a_cluster_run_reports_replicas_imbalance_and_replica_columns() {
    let dir = tempdir();
    let (json, req, steps) = (dir.path().join("r.json"), dir.path().join("r.csv"), dir.path().join("s.csv"));
    let mut cmd = TestCommand::new(&["run", "scenarios/base.yml", "--set", "workload.requests=90"]);
    for a in ["--set", "cluster.replicas=3", "--set", "cluster.router=round_robin", "--json"] {
        cmd = cmd.arg(a);
    }
    let out = cmd.arg(&json).arg("--requests-csv").arg(&req).arg("--steps-csv").arg(&steps).ok();
    let stdout = out.stdout();
    for want in ["cluster    3 replicas x 1 GPU = 3 GPUs, router round_robin", "imbalance  1.000"] {
        assert!(stdout.contains(want), "{want}\n{stdout}");
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["router"], "round_robin");
    assert_eq!(v["gpus"], 3);
    assert_eq!(v["imbalance"], 1.0);
    let replicas = v["replicas"].as_array().unwrap();
    // 90 requests, round robin over 3: 30 each, 64 tokens each.
    for r in replicas {
        assert_eq!(r["requests"], 30);
        assert_eq!(r["output_tokens"], 30 * 64);
    }
    let rows = std::fs::read_to_string(&req).unwrap();
    let mut lines = rows.lines();
    assert!(lines.next().unwrap().ends_with(",replica"));
    for (k, line) in lines.enumerate() {
        assert!(line.ends_with(&format!(",{}", k % 3)), "{line}");
    }
    let steps = std::fs::read_to_string(&steps).unwrap();
    let per: Vec<usize> =
        (0..3).map(|r| steps.lines().skip(1).filter(|l| l.ends_with(&format!(",{r}"))).count()).collect();
    for (r, n) in per.iter().enumerate() {
        assert_eq!(*n as u64, replicas[r]["steps"].as_u64().unwrap());
    }
}

#[test]
fn bad_cluster_input_exits_2_with_what_is_allowed() {
    let bad = |sets: &[&str], fragments: &[&str]| {
        let mut cmd = TestCommand::new(&["run", "scenarios/base.yml"]);
        for s in sets {
            cmd = cmd.arg("--set").arg(s);
        }
        cmd.fails_with(2).stderr_has(fragments);
    };
    bad(&["cluster.replicas=0"], &["cluster.replicas", "0 is not allowed", "1 to 10,000"]);
    bad(
        &["cluster.router=fastest"],
        &[
            "cluster.router",
            "unknown router `fastest`",
            "round_robin, random, least_outstanding, least_kv, prefix_affinity, session_affinity",
        ],
    );
    bad(&["cluster.router=prefix_affinity"], &["cluster.router", "prefix_caching is off"]);
    bad(
        &["cluster.router=least_kv", "cluster.overlap_weight=2"],
        &["cluster.overlap_weight", "prefix_affinity router only"],
    );
    bad(
        &["cluster.router=prefix_affinity", "model.kv_cache.prefix_caching=true", "cluster.overlap_weight=-1"],
        &["cluster.overlap_weight", "-1 is not allowed"],
    );
}

#[test]
fn capacity_sizes_a_fleet_by_simulating_the_cluster_at_the_target_rate() {
    let dir = tempdir();
    let json = dir.path().join("cap.json");
    let mut cmd = TestCommand::new(&["capacity", "scenarios/base.yml", "-q", "--slo", "ttft_p99_ms=200"]);
    for a in ["--target-rate", "200", "--set", "cluster.router=least_outstanding", "--seeds", "2"] {
        cmd = cmd.arg(a);
    }
    cmd.arg("--requests").arg("3000").arg("--json").arg(&json).ok();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let fleet = &v["fleet"];
    let k = fleet["replicas"].as_u64().unwrap();
    assert_eq!(fleet["router"], "least_outstanding");
    assert_eq!(fleet["gpus"].as_u64(), Some(k));
    assert_eq!(fleet["at_replicas"]["pass"], true);
    // The answer is the smallest count that passed: k passed, k - 1 was
    // tried and failed (or k is 1), and no smaller count passed.
    let probes = fleet["probes"].as_array().unwrap();
    for p in probes {
        let (n, pass) = (p["replicas"].as_u64().unwrap(), p["pass"].as_bool().unwrap());
        assert_eq!(pass, n >= k, "{p}");
        assert_eq!(p["rate_rps"].as_f64(), Some(200.0));
    }
    assert!(k == 1 || probes.iter().any(|p| p["replicas"].as_u64() == Some(k - 1)));
    // One replica's max rate is below 200 req/s, so the fleet needs more than one.
    assert!(v["max_rate_rps"].as_f64().unwrap() < 200.0 && k > 1, "{v}");
}

#[test]
fn sweep_varies_the_router_and_the_replica_count_as_axes() {
    let dir = tempdir();
    let csv = dir.path().join("sweep.csv");
    let mut cmd = TestCommand::new(&["sweep", "scenarios/clusters/chat-fleet.yml", "-q"]);
    for a in ["--set", "workload.requests=400", "--set", "cluster.router=round_robin,prefix_affinity"] {
        cmd = cmd.arg(a);
    }
    cmd.arg("--set").arg("cluster.replicas=1,3").arg("--csv").arg(&csv).ok();
    let text = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let (router, replicas) = (
        header.iter().position(|h| *h == "cluster.router").expect("a router column"),
        header.iter().position(|h| *h == "cluster.replicas").expect("a replicas column"),
    );
    let points: Vec<(String, String)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            (cells[router].to_string(), cells[replicas].to_string())
        })
        .collect();
    assert_eq!(points.len(), 4, "{text}");
    for want in [("round_robin", "1"), ("round_robin", "3"), ("prefix_affinity", "1"), ("prefix_affinity", "3")] {
        assert!(points.contains(&(want.0.to_string(), want.1.to_string())), "{want:?} in {text}");
    }
}

/// A source that hides where each request's own content starts, so the
/// cluster loop hashes every block (the path before it hashed only the
/// shared ones); it counts the requests whose own content it hid.
struct EveryBlockHashed<'a> {
    inner: AnySource,
    hidden: &'a std::cell::Cell<u64>,
    /// Hide `own_from` (every block is hashed); else forward it.
    hide: bool,
}

impl Source for EveryBlockHashed<'_> {
    fn peek(&self) -> Option<SimTime> {
        self.inner.peek()
    }
    fn pop(&mut self) -> Option<llmsim_core::engine::Request> {
        self.inner.pop()
    }
    fn segments(&self) -> &[llmsim_core::engine::prefix::hash::Segment] {
        self.inner.segments()
    }
    fn own_from(&self) -> Option<usize> {
        let own = self.inner.own_from();
        if !self.hide {
            return own;
        }
        if own.is_some() {
            self.hidden.set(self.hidden.get() + 1);
        }
        None
    }
    fn block_hashes(&self) -> Option<&[u64]> {
        self.inner.block_hashes()
    }
    fn session(&self) -> Option<u64> {
        self.inner.session()
    }
    fn done(&mut self, id: RequestId, at: SimTime) {
        self.inner.done(id, at);
    }
    fn stalled(&self) -> Option<String> {
        self.inner.stalled()
    }
    fn rejected(&mut self, id: RequestId, at: SimTime) {
        self.inner.rejected(id, at);
    }
}

#[test]
fn a_prefix_cached_cluster_gives_the_same_results_hashing_only_shared_blocks_as_hashing_every_block() {
    let hidden = std::cell::Cell::new(0u64);
    for seed in 0..120u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(7000 + seed);
        let policy = Router::ALL[rng.random_range(0..Router::ALL.len())];
        let replicas = rng.random_range(2..5usize);
        // prefix_affinity in the text turns prefix caching on.
        let text = random_scenario(&mut rng, "# prefix_affinity\n");
        let s = scenario(&text);
        let run = |every: bool| {
            let mut engines: Vec<Engine> = (0..replicas).map(|_| Engine::new(s.engine_config())).collect();
            let mut router = RouterState::new(policy, 1.0, s.workload.seed);
            let mut collector = Collector::new(&s.capacity, CollectorOptions { keep_steps: true });
            let delay_ns = (s.latency.request_overhead_ms * 1e6) as u64;
            let setup = Setup { delay_ns, keep_steps: true, ..Setup::default() };
            let mut source = EveryBlockHashed { inner: AnySource::new(&s), hidden: &hidden, hide: every };
            let placed = drive(
                Replicas::new(&mut engines, &mut router),
                &mut source,
                &mut collector,
                &setup,
                |_, _, _| {},
                &mut |_| {},
            );
            (placed.unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}")), collector.finish(&s))
        };
        let ((shared_run, shared), (every_run, every)) = (run(false), run(true));
        let ctx = format!("seed {seed}, {} x {replicas}\n{text}", policy.as_str());
        assert_eq!(shared_run, every_run, "{ctx}");
        assert_eq!(shared.result, every.result, "{ctx}");
        assert_eq!(shared.requests, every.requests, "{ctx}");
        assert_eq!(shared.steps, every.steps, "{ctx}");
    }
    // The two paths differ on many requests: sessions' last turns and shared prefixes' own tokens.
    assert!(hidden.get() > 1000, "{}", hidden.get());
}

/// `Run::summary_only` (what `llmsim run` uses without `--requests-csv`)
/// keeps no record of a request that ended, in a cluster as on one
/// engine, and gives the same result as a run keeping every record.
#[test]
fn a_summary_cluster_run_keeps_no_ended_request_and_gives_the_same_result() {
    let pools = "cluster: {prefill: {replicas: 2, router: least_outstanding}, decode: {replicas: 3, \
                 router: round_robin}, kv_transfer: {bandwidth_gbps: 50, latency_ms: 1}}\n";
    for seed in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(7000 + seed);
        let cluster = match seed % 2 {
            0 => "cluster: {replicas: 3, router: least_outstanding}\n",
            _ => pools,
        };
        let text = random_scenario(&mut rng, cluster);
        let s = scenario(&text);
        let kept = llmsim_planner::Run::new(&s).go().unwrap();
        let summary = llmsim_planner::Run::new(&s).summary_only(true).go().unwrap();
        let ctx = format!("seed {seed}\n{text}");
        assert_eq!(summary.result, kept.result, "{ctx}");
        // Every request ended (finished or rejected): none is held.
        let ended = kept.result.requests.completed + kept.result.requests.rejected;
        assert_eq!(ended, kept.result.requests.total, "{ctx}");
        assert_eq!(kept.requests.len() as u64, kept.result.requests.total, "{ctx}");
        assert!(summary.requests.is_empty(), "{} records kept: {ctx}", summary.requests.len());
    }
}

#[test]
fn a_fleet_that_capacity_answers_sustains_the_target_rate_in_a_long_run() {
    // A fleet probe once ran one engine's 2,000 requests across the whole
    // fleet: too short to build a queue, it passed 16 round-robin replicas
    // for 2,000 req/s (125 req/s each, where one engine serves at most
    // about 95). Checked here by a run ten times longer than a probe, at
    // the answer: it must serve the rate and meet the SLO.
    let dir = tempdir();
    let json = dir.path().join("cap.json");
    let mut cmd = TestCommand::new(&["capacity", "scenarios/base.yml", "-q", "--slo", "ttft_p99_ms=2000"]);
    for a in ["--target-rate", "2000", "--set", "cluster={replicas: 1, router: round_robin}", "--seeds", "1"] {
        cmd = cmd.arg(a);
    }
    cmd.arg("--json").arg(&json).ok();
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let k = v["fleet"]["replicas"].as_u64().unwrap();
    let probes = v["fleet"]["probes"].as_array().unwrap();
    assert!(probes.iter().filter(|p| p["pass"] == true).all(|p| p["queue_growth"].as_f64().unwrap() <= 0.02));
    let requests = 2000 * k * 10;
    let mut run = TestCommand::new(&["run", "scenarios/base.yml", "--json", "-", "-q"]);
    for set in [
        format!("cluster={{replicas: {k}, router: round_robin}}"),
        "workload.arrivals={poisson: {rate: 2000}}".into(),
        format!("workload.requests={requests}"),
    ] {
        run = run.arg("--set").arg(set);
    }
    let r: serde_json::Value = serde_json::from_str(&run.ok().stdout()).unwrap();
    let served = r["requests"]["completed"].as_f64().unwrap() / r["throughput"]["duration_s"].as_f64().unwrap();
    assert!(served >= 0.97 * 2000.0, "{k} replicas serve {served:.0} req/s of 2000");
    // The probe's p99 is of 44,000 requests, this one's of ten times as
    // many: at the smallest passing count the two may sit either side of
    // the bound (22 replicas: 2,063 ms here), but not far from it. A fleet
    // that cannot keep up has a p99 that grows with the run (16 replicas: 61 s).
    let p99 = r["ttft_ms"]["p99"].as_f64().unwrap();
    assert!(p99 <= 1.25 * 2000.0, "{k} replicas: TTFT p99 {p99} ms, far over the 2,000 ms SLO");
}

#[test]
fn a_target_rate_past_what_the_most_replicas_can_serve_is_refused_without_minutes_of_probes() {
    // Found by the fuzz slice: `--target-rate 1e9` on a fleet simulated
    // 10,000 replicas at a million requests a probe, twice, for minutes.
    // One engine of base.yml serves about 95 req/s within the SLO, so 10^9
    // req/s needs about 10^7 replicas, past cluster.replicas' 10,000.
    let mut cmd = TestCommand::new(&["capacity", "scenarios/base.yml", "-q", "--slo", "ttft_p99_ms=2000"]);
    for a in ["--target-rate", "1e9", "--set", "cluster={replicas: 1, router: round_robin}", "--seeds", "1"] {
        cmd = cmd.arg(a);
    }
    let out = cmd.bounded(60, 2048);
    assert_eq!(out.code(), 1, "{}", out.describe());
    let err = out.stderr();
    assert!(err.contains("no fleet meets every SLO at 1000000000.000 req/s"), "{err}");
    assert!(err.contains("more than a cluster may have (10000; cluster.replicas)"), "{err}");
    // The estimate printed is the target over one replica's max rate:
    // between 10^9 / 200 and 10^9 / 50 for an engine near 95 req/s.
    let n: u64 = err.split("it needs ").nth(1).and_then(|t| t.split(' ').next()).unwrap().parse().unwrap();
    assert!((5_000_000..=20_000_000).contains(&n), "{err}");
}

/// The outputs `llmsim run` writes as the run goes put each step on the
/// replica the driver names before it (`Observer::replica`): the streamed
/// steps CSV is, byte for byte, the table made at the end from the kept
/// steps and their placement, colocated and with pools; and the trace
/// puts each step on its replica's process, as many as that replica took.
#[test]
fn streamed_steps_and_trace_events_put_each_step_on_its_replica() {
    use llmsim_planner::perfetto::TraceEvents;
    use llmsim_planner::report::{cluster as table, csv_out, stream::StepsCsv};
    use llmsim_planner::run_driver::Stepping;
    use llmsim_scenario::config::{Override, load_scenario_with};
    for file in ["scenarios/clusters/chat-fleet.yml", "scenarios/clusters/disagg.yml", "scenarios/base.yml"] {
        let sets = [Override::parse("workload.requests=300").unwrap()];
        let s = load_scenario_with(&repo(file), &sets).unwrap();
        let caching = s.model.kv_cache.prefix_caching;
        let mut csv = StepsCsv::new(Vec::new(), &s);
        let mut trace = TraceEvents::new(Vec::new());
        let run = llmsim_planner::Run::new(&s).options(CollectorOptions { keep_steps: true });
        let out = run.stepping(Stepping::MacroStepsInOrder).observed(&mut (&mut csv, &mut trace)).unwrap();
        let whole = match &out.placement {
            Some(p) => table::steps(&out.steps, table::replica_blocks(&s), caching, p),
            None => csv_out::steps_with(&out.steps, s.capacity.num_blocks, caching),
        };
        assert_eq!(String::from_utf8(csv.finish().unwrap()), String::from_utf8(whole.unwrap()), "{file}");
        let text = trace.render(table::decode_base(&s));
        let events: serde_json::Value = serde_json::from_str(&text).unwrap();
        let events = events["traceEvents"].as_array().unwrap();
        let mut per_pid = BTreeMap::<u64, u64>::new();
        for e in events.iter().filter(|e| e["name"] == "step") {
            *per_pid.entry(e["pid"].as_u64().unwrap()).or_default() += 1;
        }
        let names: Vec<&str> = (events.iter())
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        match &out.result.replicas {
            None => {
                assert_eq!(per_pid.keys().copied().collect::<Vec<_>>(), [1], "{file}: one engine's process");
                assert_eq!(names, ["engine", "requests"]);
            }
            Some(replicas) => {
                // Replica r is process 3 + r and took that replica's steps.
                let want: BTreeMap<u64, u64> =
                    replicas.iter().enumerate().map(|(r, x)| (3 + r as u64, x.steps)).filter(|&(_, n)| n > 0).collect();
                assert_eq!(per_pid, want, "{file}");
                let first = if s.cluster.as_ref().unwrap().disagg.is_some() { "prefill 0" } else { "replica 0" };
                assert_eq!(names[0], first, "{file}");
                assert_eq!(names.len(), replicas.len() + 1, "{file}");
            }
        }
    }
}

/// A random `cluster.autoscale` (and its timeline) for a fleet of at most 5.
fn random_autoscale(rng: &mut ChaCha8Rng) -> (String, bool) {
    use llmsim_scenario::config::autoscale::Signal;
    let policy = Router::ALL[rng.random_range(0..Router::ALL.len())];
    let signal = Signal::ALL[rng.random_range(0..Signal::ALL.len())];
    let target = match signal {
        Signal::KvUse => [0.05, 0.3, 0.9][rng.random_range(0..3)],
        Signal::TtftP99Ms => [20.0, 200.0, 2000.0][rng.random_range(0..3)],
        _ => [0.5, 2.0, 10.0][rng.random_range(0..3)],
    };
    let (min, max) = (rng.random_range(1..3u32), rng.random_range(3..6u32));
    let replicas = rng.random_range(min..=max);
    let router = match policy {
        Router::PrefixAffinity => "prefix_affinity\n  overlap_weight: 1".to_string(),
        p => p.as_str().to_string(),
    };
    let text = format!(
        "cluster:
  replicas: {replicas}
  router: {router}
  autoscale:
    min_replicas: {min}
    max_replicas: {max}
    signal: {}
    target: {target}
    period_s: {}
    window_s: {}
    scale_down: {{stabilization_s: {}}}
    cold_start: {{engine_start_s: {}}}
  timeline: {{window_s: {}}}
",
        signal.as_str(),
        [1, 2, 5][rng.random_range(0..3)],
        [1, 10][rng.random_range(0..2)],
        [0, 3, 300][rng.random_range(0..3)],
        [0.0, 2.0, 8.0][rng.random_range(0..3)],
        [1, 5][rng.random_range(0..2)],
    );
    (text, policy == Router::PrefixAffinity)
}

#[test]
fn autoscaled_fleets_end_every_request_once_and_keep_the_invariants() {
    use llmsim_planner::cluster::scaled::{PoolSpec, Scaled};
    use llmsim_planner::cluster::{hpa::Hpa, timeline::Watch};
    let mut totals = BTreeMap::<&str, u64>::new();
    for seed in 0..200u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(7000 + seed);
        let (cluster, affinity) = random_autoscale(&mut rng);
        let caching = affinity || rng.random_bool(0.5);
        let shape = Shape { blocks: [40, 120, 2000], gamma: true, max_prefix: 300 };
        let text = format!("{}{cluster}", random_engine(&mut rng, &shape, caching));
        let s = scenario(&text);
        let c = s.cluster.as_ref().unwrap();
        let a = c.autoscale.as_ref().unwrap();
        let mut router = RouterState::new(c.router, c.overlap_weight.unwrap_or(1.0), s.workload.seed);
        let mut source = AnySource::new(&s);
        let mut obs = (Ends::default(), Clock::default());
        let delay_ns = (s.latency.request_overhead_ms * 1e6) as u64;
        let setup = Setup { delay_ns, ..Setup::default() };
        let watch = Watch::new(1.0, delay_ns, Default::default(), true);
        let pool = PoolSpec {
            name: None,
            cfg: s.engine_config(),
            gpus: 1,
            initial: c.replicas,
            hpa: Some(Hpa::new(a)),
            price: None,
        };
        let fleet = Scaled::new(vec![pool], &mut router, watch);
        let ctx = format!("seed {seed}\n{text}");
        let run = drive(
            fleet,
            &mut source,
            &mut obs,
            &setup,
            |place, e: &Engine, o: &mut (Ends, Clock)| {
                e.check_invariants().unwrap_or_else(|err| panic!("seed {seed}, replica {}: {err}", place.replica));
                o.0.pending.clear();
            },
            &mut |_| {},
        )
        .unwrap_or_else(|e| panic!("{e}\n{ctx}"));
        let (ends, clock) = &obs;
        assert_eq!(ends.ends.len() as u64, ends.arrived, "every arrival ends: {ctx}");
        for (&id, &(n, before_routing)) in &ends.ends {
            assert_eq!(n, 1, "request {id} ended {n} times: {ctx}");
            let placed = run.cluster.placement.requests[id as usize];
            assert_eq!(placed.is_none(), before_routing, "request {id}: {ctx}");
        }
        assert!(clock.backwards.is_none(), "time went backwards: {:?}: {ctx}", clock.backwards);
        assert_eq!(run.cluster.replicas.iter().map(|x| x.output_tokens).sum::<u64>(), ends.tokens, "{ctx}");
        // Every replica's life is in order, within min and max, and every
        // request went to a ready replica that was not draining.
        let mut asked: Vec<(u64, i64)> = Vec::new();
        for l in &run.lives {
            let ready = l.ready.unwrap_or(u64::MAX);
            assert!(l.asked <= ready && l.drain.is_none_or(|d| d >= l.asked), "{l:?}: {ctx}");
            assert!(l.left.is_none_or(|e| l.drain.is_some_and(|d| e >= d)), "{l:?}: {ctx}");
            asked.push((l.asked, 1));
            if let Some(d) = l.drain {
                asked.push((d, -1));
            }
        }
        asked.sort();
        let mut live = 0i64;
        for (i, &(t, d)) in asked.iter().enumerate() {
            live += d;
            if asked.get(i + 1).is_none_or(|n| n.0 != t) {
                assert!((a.min_replicas as i64..=a.max_replicas as i64).contains(&live), "{live} at {t}: {ctx}");
            }
        }
        for (id, slot) in run.cluster.placement.requests.iter().enumerate() {
            let Some(slot) = slot else { continue };
            let at = ends.arrival_of.get(&(id as u64)).copied().unwrap_or(0) + delay_ns;
            let life = run.lives.iter().rfind(|l| l.slot == *slot as usize && l.asked <= at).unwrap();
            assert!(life.ready.is_some_and(|r| r <= at) && life.drain.is_none_or(|d| at < d), "{id} {life:?}: {ctx}");
        }
        *totals.entry("runs").or_default() += 1;
        *totals.entry("requests").or_default() += ends.arrived;
        *totals.entry("scale-ups").or_default() += run.events.iter().filter(|e| e.to > e.from).count() as u64;
        *totals.entry("scale-downs").or_default() += run.events.iter().filter(|e| e.to < e.from).count() as u64;
        *totals.entry("drained with requests").or_default() +=
            run.lives.iter().filter(|l| l.drain.is_some_and(|d| l.left.is_some_and(|e| e > d))).count() as u64;
        *totals.entry("removed while starting").or_default() +=
            run.lives.iter().filter(|l| l.ready.is_none() && l.left.is_some()).count() as u64;
    }
    for key in ["scale-ups", "scale-downs", "drained with requests", "removed while starting"] {
        assert!(totals.get(key).copied().unwrap_or(0) > 3, "{key}: {totals:?}");
    }
    eprintln!("autoscaled fleet invariants held: {totals:?}");
}

/// Whether any event's time went backwards for its request, or a step
/// started before its replica's previous step ended.
#[derive(Default)]
struct Clock {
    last: BTreeMap<RequestId, u64>,
    backwards: Option<String>,
}

impl Observer for Clock {
    fn token(&mut self, id: RequestId, at: SimTime, _: u32) {
        let t = at.as_nanos();
        let last = self.last.entry(id).or_insert(0);
        if t < *last && self.backwards.is_none() {
            self.backwards = Some(format!("request {id}: a token at {t} after one at {last}"));
        }
        *last = t;
    }
    fn step(&mut self, s: &StepRecord) {
        if s.end < s.start && self.backwards.is_none() {
            self.backwards = Some(format!("a step ends at {:?} before it starts at {:?}", s.end, s.start));
        }
    }
}

#[test]
fn an_autoscaled_sweep_gives_the_same_bytes_at_one_and_two_threads() {
    let dir = tempdir();
    let mut outputs = Vec::new();
    for threads in ["1", "2"] {
        let js = dir.path().join(format!("{threads}.json"));
        let args = [
            "sweep",
            "scenarios/experiments/bases/autoscale-burst.yml",
            "--set",
            "cluster.autoscale.cold_start.engine_start_s=120,600",
            "--set",
            "workload.duration_s=900",
            "--seeds",
            "2",
            "--threads",
            threads,
            "--json",
        ];
        TestCommand::new(&args).arg(&js).ok();
        outputs.push(std::fs::read(&js).unwrap());
    }
    assert_eq!(outputs[0], outputs[1], "outputs differ between thread counts");
    let points: serde_json::Value = serde_json::from_slice(&outputs[0]).unwrap();
    assert!(points[0]["results"][0]["over_time"]["autoscale"]["scale_ups"].as_u64().unwrap() > 0);
}

#[test]
fn an_autoscaled_run_in_summary_mode_gives_the_same_result() {
    // Summary mode forgets each request when it ends (the fleet's owner
    // and the timeline's flights as the collector's records): the result
    // must not change, over generated fleets, pools and windows.
    for seed in 0..40u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(9100 + seed);
        let (cluster, affinity) = random_autoscale(&mut rng);
        let caching = affinity || rng.random_bool(0.5);
        let shape = Shape { blocks: [40, 120, 2000], gamma: true, max_prefix: 300 };
        let text = format!("{}{cluster}", random_engine(&mut rng, &shape, caching));
        let s = scenario(&text);
        let full = llmsim_planner::Run::new(&s).go().unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let summary = llmsim_planner::Run::new(&s).summary_only(true).go().unwrap();
        let json = |r: &llmsim_planner::metrics::RunResult| serde_json::to_string(r).unwrap();
        assert_eq!(json(&full.result), json(&summary.result), "seed {seed}\n{text}");
        assert!(full.result.over_time.is_some());
        assert!(summary.requests.is_empty() || summary.requests.len() < full.requests.len(), "seed {seed}");
    }
}
