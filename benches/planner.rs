//! Planner speed: 100,000 Poisson requests of 512 prompt / 128 output tokens
//! at 90% of saturation on the base model of docs/engine.md, on one thread.
//!
//! `cargo bench --bench planner` prints simulated requests and output tokens
//! per second of wall time and the process's peak memory. It asserts
//! nothing: speed is measured here, never in a test.
//!
//! Then the same 100,000 requests at the same rate with prefix caching on,
//! twice: with unique prompts (every block hashed, registered and evicted,
//! no hit: the cache's pure cost) and with 384 of the 512 prompt tokens one
//! of 8 shared system prompts (`shared_prefix`), and the wall time of each
//! as a multiple of the run without the cache. The three runs alternate,
//! five rounds, best of five each.
//!
//! Then the cost of a deployment (docs/deployments.md): 100,000 requests from 64
//! closed-loop users through the same KV pool, once with the model as two
//! numbers and once as Llama 3.1 70B on four GPUs (architecture, attention,
//! LM head, all-reduces). A closed loop without think time schedules the
//! same steps whatever they cost, so the two runs do the same scheduling
//! work and differ only in the cost model.
//!
//! Then a cluster (docs/clusters.md): 1,000,000 constant-rate
//! requests on 16 replicas behind round robin at 16 times the rate, against
//! the same 1,000,000 requests on one engine at the single rate. Round
//! robin feeds each replica every 16th request at the single engine's
//! spacing, so both runs take about the same number of steps in total and
//! differ in the cluster loop's work (earliest step over 16 replicas,
//! routing every arrival).

use std::path::Path;
use std::time::Instant;

use llmsim::config::{Override, load_scenario_with};
use llmsim::metrics::CollectorOptions;

fn set(key: &str, value: &str) -> Override {
    Override::parse(&format!("{key}={value}")).expect("valid override")
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Best wall time of three runs, and the last run's result.
fn best_of_3(s: &llmsim::config::Scenario) -> (f64, llmsim::metrics::RunResult) {
    let mut best = f64::INFINITY;
    let mut result = None;
    for _ in 0..3 {
        let t = Instant::now();
        let out = llmsim::sim::run(s, CollectorOptions::default()).expect("within the run limits");
        best = best.min(t.elapsed().as_secs_f64());
        result = Some(out.result);
    }
    (best, result.expect("ran"))
}

/// The deployment's cost against the plain model's on identical schedules.
fn deployment_overhead(base: &Path) {
    let common = [
        set("workload.arrivals", "{closed: {concurrency: 64}}"),
        set("workload.requests", "100000"),
        set("workload.prompt_tokens", "512"),
        set("workload.output_tokens", "128"),
        set("model.kv_cache.num_blocks", "20000"),
    ];
    let plain = load_scenario_with(base, &common).expect("scenario");
    let mut deployed = common.to_vec();
    deployed.extend([
        set("hardware", "h100-80gb"),
        set("model", "{preset: llama-3.1-70b, context_length: 32768, kv_cache: {num_blocks: 20000}}"),
        set("parallelism.tensor", "4"),
    ]);
    let deployed = load_scenario_with(base, &deployed).expect("scenario");
    let (t_plain, r_plain) = best_of_3(&plain);
    let (t_dep, r_dep) = best_of_3(&deployed);
    println!();
    println!("deployment overhead   100,000 requests, 64 closed-loop users, 512/128 tokens, 20,000 blocks");
    println!("  plain model         {t_plain:.3} s wall, {} steps", r_plain.steps.count);
    println!("  llama-3.1-70b, TP 4 {t_dep:.3} s wall, {} steps", r_dep.steps.count);
    println!(
        "  ratio               {:.3}x (same schedule: {})",
        t_dep / t_plain,
        r_plain.steps.count == r_dep.steps.count
    );
}

/// A 16-replica cluster against one engine on the same requests.
fn cluster_overhead(base: &Path, rate: f64) {
    let common = [
        set("workload.requests", "1000000"),
        set("workload.prompt_tokens", "512"),
        set("workload.output_tokens", "128"),
    ];
    let mut one = common.to_vec();
    one.push(set("workload.arrivals", &format!("{{constant: {{rate: {rate}}}}}")));
    let mut sixteen = common.to_vec();
    sixteen.extend([
        set("workload.arrivals", &format!("{{constant: {{rate: {}}}}}", rate * 16.0)),
        set("cluster", "{replicas: 16, router: round_robin}"),
    ]);
    let (one, sixteen) =
        (load_scenario_with(base, &one).expect("scenario"), load_scenario_with(base, &sixteen).expect("scenario"));
    let (t_one, r_one) = best_of_3(&one);
    let (t_16, r_16) = best_of_3(&sixteen);
    println!();
    println!("cluster overhead      1,000,000 constant-rate requests, 512/128 tokens, round robin");
    println!("  one engine          {t_one:.3} s wall, {} steps, {rate:.2} req/s", r_one.steps.count);
    println!("  16 replicas         {t_16:.3} s wall, {} steps, {:.2} req/s", r_16.steps.count, rate * 16.0);
    println!(
        "  ratio               {:.3}x wall, {:.3}x per step",
        t_16 / t_one,
        (t_16 / r_16.steps.count as f64) / (t_one / r_one.steps.count as f64)
    );
}

fn main() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/base.yml");
    let shape = [set("workload.output_tokens", "128"), set("workload.prompt_tokens", "512")];

    // Saturation: the completion rate under sustained overload. A burst
    // start phase-locks the batch into cohorts that prefill together and
    // understates it (35.8 req/s here), so a first burst run only gives a
    // lower bound; the second run offers 1.5x that bound as Poisson
    // arrivals (43.8). This is the effect `llmsim capacity` measures
    // saturation around (docs/sweep-capacity.md, "Phase-locking"): its sustained-rate
    // search finds 43.5 req/s on this shape, within 1% of this figure,
    // which only sets the offered load.
    let throughput = |rate: f64| {
        let mut o = shape.to_vec();
        o.extend([
            set("workload.arrivals", &format!("{{poisson: {{rate: {rate}}}}}")),
            set("workload.requests", "20000"),
        ]);
        let s = load_scenario_with(&base, &o).expect("scenario");
        llmsim::sim::run(&s, CollectorOptions::default())
            .expect("within the run limits")
            .result
            .throughput
            .requests_per_s
    };
    let saturation = throughput(1.5 * throughput(1000.0));
    let rate = 0.9 * saturation;

    let mut load = shape.to_vec();
    load.extend([
        set("workload.arrivals", &format!("{{poisson: {{rate: {rate}}}}}")),
        set("workload.requests", "100000"),
    ]);
    // Each configuration runs once per round, rounds interleaved, best of
    // five kept: a load change on a shared machine then hits all three
    // alike instead of one, and the ratios stay meaningful.
    let caching = set("model.kv_cache.prefix_caching", "true");
    let configs: [Vec<Override>; 3] = [
        vec![],
        vec![caching.clone()],
        vec![
            caching.clone(),
            set("workload.shared_prefix", "{groups: 8, tokens: 384}"),
            set("workload.prompt_tokens", "128"),
        ],
    ];
    let scenarios: Vec<_> = configs
        .iter()
        .map(|extra| {
            let mut o = load.clone();
            o.extend_from_slice(extra);
            load_scenario_with(&base, &o).expect("scenario")
        })
        .collect();
    let mut best = [f64::INFINITY; 3];
    let mut results = [None, None, None];
    for _ in 0..5 {
        for (i, s) in scenarios.iter().enumerate() {
            let t = Instant::now();
            let out = llmsim::sim::run(s, CollectorOptions::default()).expect("within the run limits");
            best[i] = best[i].min(t.elapsed().as_secs_f64());
            results[i] = Some(out.result);
        }
    }
    let [r, unique, shared] = results.map(|r| r.expect("ran"));
    let best_plain = best[0];
    println!("saturation            {saturation:.2} req/s (512/128 tokens, base model)");
    println!("offered rate          {rate:.2} req/s (90%)");
    println!(
        "simulated             {} requests, {} output tokens, {} steps",
        r.requests.completed, r.requests.output_tokens, r.steps.count
    );
    println!("wall time (best of 5) {best_plain:.3} s");
    println!(
        "speed                 {:.0} requests/s, {:.0} output tokens/s of wall time",
        r.requests.completed as f64 / best_plain,
        r.requests.output_tokens as f64 / best_plain
    );
    println!("peak memory (VmHWM)   {:.1} MiB", peak_rss_mib().unwrap_or(f64::NAN));
    println!(
        "prediction            TTFT p99 {:.1} ms, ITL p99 {:.2} ms",
        r.ttft_ms.p99.unwrap_or(0.0),
        r.itl_ms.p99.unwrap_or(0.0)
    );

    for (label, t, r) in [("prefix caching, unique", best[1], &unique), ("prefix caching, shared", best[2], &shared)] {
        let pc = r.prefix_cache.as_ref().expect("prefix_cache");
        println!(
            "{label}: {t:.3} s best of 5 = {:.2}x the run without the cache; {:.0} requests/s; hit rate {:.1}%, \
             TTFT p99 {:.1} ms",
            t / best_plain,
            r.requests.completed as f64 / t,
            pc.hit_rate * 100.0,
            r.ttft_ms.p99.unwrap_or(0.0)
        );
    }
    deployment_overhead(&base);
    cluster_overhead(&base, rate);
}
