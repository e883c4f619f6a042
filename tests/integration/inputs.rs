//! Inputs users really have (issue 34): measured files past the old 4 MiB
//! limit, and traces whose arrivals are far into the simulated time.

use std::fmt::Write as _;
use std::path::Path;

use crate::support::*;

const BASE: &str = "scenarios/base.yml";

/// A `vllm bench serve --save-detailed` result of `n` requests of about
/// 120 output tokens (6 MB at 3,000), its summary
/// without TTFT statistics so they come from the arrays, and `burstiness`
/// written as Python writes infinity. Returns the TTFTs in seconds.
fn vllm_detailed(path: &Path, n: usize) -> Vec<f64> {
    let mut s = String::from(
        "{\"date\": \"20260412-101530\", \"backend\": \"vllm\", \"label\": null, \"model_id\": \"m\", \
         \"request_rate\": 4.0, \"burstiness\": Infinity, \"max_concurrency\": null, \"duration\": 500.0, ",
    );
    let _ = write!(s, "\"completed\": {n}, \"failed\": 0, \"request_throughput\": 4.0, ");
    let (mut ttfts, mut itls, mut lat, mut start, mut ins, mut outs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let out = 100 + i % 41;
        let ttft = 0.03 + (i % 97) as f64 * 0.000_313_371_1;
        let gaps: Vec<f64> =
            (0..out - 1).map(|j| 0.006_512_345_678 + ((i * 31 + j) % 53) as f64 * 0.000_057_1).collect();
        lat.push(ttft + gaps.iter().sum::<f64>());
        itls.push(format!("[{}]", gaps.iter().map(|g| format!("{g:?}")).collect::<Vec<_>>().join(", ")));
        ttfts.push(ttft);
        start.push(84_211.541_826_040_67 + i as f64 * 0.25);
        ins.push(400 + i % 200);
        outs.push(out);
    }
    let list = |xs: &[f64]| xs.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", ");
    let ints = |xs: &[usize]| xs.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    let _ = write!(
        s,
        "\"input_lens\": [{}], \"output_lens\": [{}], \"ttfts\": [{}], \"itls\": [{}], \"latencies\": [{}], \
         \"start_times\": [{}], \"generated_texts\": [{}], \"errors\": [{}], \"mean_tpot_ms\": 8.0}}",
        ints(&ins),
        ints(&outs),
        list(&ttfts),
        itls.join(", "),
        list(&lat),
        list(&start),
        vec!["\" The capital of France is Paris, a city known for its art.\""; n].join(", "),
        vec!["\"\""; n].join(", ")
    );
    std::fs::write(path, s).unwrap();
    ttfts
}

/// numpy's linear percentile of ascending `xs`.
fn percentile(xs: &[f64], q: f64) -> f64 {
    let pos = (xs.len() - 1) as f64 * q / 100.0;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(xs.len() - 1);
    xs[lo] + (xs[hi] - xs[lo]) * (pos - lo as f64)
}

#[test]
fn a_measured_file_past_the_old_4_mib_limit_is_read_by_diff_calibrate_and_run() {
    let dir = tempdir();
    let measured = dir.path().join("vllm-detailed.json");
    let ttfts = vllm_detailed(&measured, 3_000);
    let size = std::fs::metadata(&measured).unwrap().len();
    assert!(size > 5 << 20, "the file is {size} bytes: it must pass the old 4 MiB limit");

    // The library reads it as a stream: the TTFT figures come from the
    // arrays, as computed here independently.
    let m = llmsim_analysis::measured::load(&measured).unwrap();
    let ttft = &m.levels[0].metrics[&llmsim_analysis::measured::MetricKind::Ttft];
    let mut ms: Vec<f64> = ttfts.iter().map(|t| t * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    assert_eq!(ttft.count, Some(3_000));
    assert!((ttft.mean.unwrap() - ms.iter().sum::<f64>() / 3_000.0).abs() < 1e-9);
    assert!((ttft.percentile(900).unwrap() - percentile(&ms, 90.0)).abs() < 1e-9);
    assert_eq!(m.levels[0].strategy.to_string(), "open loop 4 req/s, constant gaps", "burstiness Infinity read");

    let pred = dir.path().join("pred.json");
    let out = TestCommand::new(&["run", BASE, "-q", "--trace-from"]).arg(&measured).arg("--json").arg(&pred).ok();
    out.stderr_has(&["replaying 3000 requests of", "(vllm bench serve, rate 4)"]);
    let out = TestCommand::new(&["diff"]).arg(&pred).arg(&measured).output();
    assert!(out.code() == 0 || out.code() == 1, "{}", out.describe());
    assert!(out.stdout().contains("ttft.p50"), "{}", out.describe());
    let out = TestCommand::new(&["calibrate", BASE, "--no-fit"]).arg(&measured).ok();
    assert!(out.stdout().contains("vllm-detailed.json") && out.stdout().contains("ttft_mean_ms"), "{}", out.describe());
}

#[test]
fn a_trace_written_far_into_simulated_time_replays_to_the_nanosecond() {
    // Issue 34: arrivals near 1.5e8 s lost nanoseconds when read back, so
    // the replay differed from the run that wrote the trace.
    let dir = tempdir();
    let d = dir.path();
    let head = "hardware: { hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989 }\n\
                model: { context_length: 4096, weights: { parameters_billions: 7 }, kv_cache: { bytes_per_token: 524288 } }\n";
    let generated = write(
        d,
        "gen.yml",
        &format!(
            "{head}workload: {{ seed: 5, arrivals: {{ poisson: {{ rate: 1e-6 }} }}, requests: 200, prompt_tokens: 64, output_tokens: 8 }}\n"
        ),
    );
    let replay = write(d, "replay.yml", &format!("{head}workload: {{ arrivals: {{ trace: t.csv }} }}\n"));
    TestCommand::new(&["trace"]).arg(&generated).arg("-o").arg(d.join("t.csv")).ok();
    let trace = std::fs::read_to_string(d.join("t.csv")).unwrap();
    let last = trace.lines().last().unwrap();
    let last_s: f64 = last.split(',').next().unwrap().parse().unwrap();
    assert!(last_s > 1.5e8, "the trace must reach past 2^53 ns: {last}");
    for (scenario, csv) in [(&generated, "a.csv"), (&replay, "b.csv")] {
        TestCommand::new(&["run", "-q"]).arg(scenario).arg("--requests-csv").arg(d.join(csv)).ok();
    }
    let (a, b) = (std::fs::read_to_string(d.join("a.csv")).unwrap(), std::fs::read_to_string(d.join("b.csv")).unwrap());
    assert_eq!(a.lines().count(), 201);
    let diff = a.lines().zip(b.lines()).find(|(x, y)| x != y);
    assert!(diff.is_none(), "the replay differs: {diff:?}");

    // At the edge of the time range: arrivals a thousand seconds before
    // the limit, to the nanosecond, come out as written.
    let edge = "arrival_s,prompt_tokens,output_tokens\n999999000.123456789,64,8\n999999000.123456790,64,8\n";
    write(d, "t.csv", edge);
    TestCommand::new(&["run", "-q"]).arg(&replay).arg("--requests-csv").arg(d.join("c.csv")).ok();
    let c = std::fs::read_to_string(d.join("c.csv")).unwrap();
    assert!(c.contains("999999000.123456789") && c.contains("999999000.123456790"), "{c}");
}
