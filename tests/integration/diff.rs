//! Integration tests: measured-file parsers (the shared sample files are the
//! fixtures), `llmsim diff` and `llmsim run --trace-from`.

use std::path::{Path, PathBuf};

use llmsim_analysis::measured::{self, MetricKind, Strategy, Tool};
use serde_json::Value;

use crate::support::*;

fn fixture(name: &str) -> PathBuf {
    repo(&format!("tests/integration/fixtures/{name}"))
}

fn json_of(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn the_vllm_sample_parses_and_its_figures_equal_the_files_numbers() {
    let m = measured::load(&fixture("vllm-bench-serve.json")).unwrap();
    let raw = json_of(&fixture("vllm-bench-serve.json"));
    assert_eq!(m.tool, Tool::Vllm);
    assert_eq!(m.levels.len(), 1);
    let l = &m.levels[0];
    assert_eq!(l.strategy, Strategy::Open { rate: Some(4.0), burstiness: Some(1.0), max_concurrency: None });
    assert_eq!((l.completed, l.failed), (Some(8), Some(0)));
    assert_eq!(l.throughput.requests_per_s, raw["request_throughput"].as_f64());
    assert_eq!(l.throughput.output_tokens_per_s, raw["output_throughput"].as_f64());
    for (kind, stem) in [
        (MetricKind::Ttft, "ttft"),
        (MetricKind::DecodeMean, "tpot"),
        (MetricKind::ChunkGap, "itl"),
        (MetricKind::E2e, "e2el"),
    ] {
        let d = &l.metrics[&kind];
        assert_eq!(d.mean, raw[format!("mean_{stem}_ms")].as_f64(), "{stem}");
        assert_eq!(d.percentile(500), raw[format!("median_{stem}_ms")].as_f64(), "{stem}");
        assert_eq!(d.percentile(900), raw[format!("p90_{stem}_ms")].as_f64(), "{stem}");
        assert_eq!(d.percentile(990), raw[format!("p99_{stem}_ms")].as_f64(), "{stem}");
        assert!(d.recomputed.is_empty() && !d.mean_recomputed, "the file had every figure");
    }
    let requests = l.requests.as_ref().unwrap();
    assert_eq!(requests.len(), 8);
    assert_eq!(requests[2].prompt_tokens, 550);
    assert_eq!(requests[2].output_tokens, 135);
}

#[test]
fn recomputing_the_vllm_samples_summary_from_its_arrays_gives_the_same_figures() {
    let raw = json_of(&fixture("vllm-bench-serve.json"));
    let mut stripped = raw.clone();
    let obj = stripped.as_object_mut().unwrap();
    obj.retain(|k, _| !k.ends_with("_ms"));
    let m = measured::parse(&stripped.to_string(), Path::new("stripped.json")).unwrap();
    let l = &m.levels[0];
    for (kind, stem) in [
        (MetricKind::Ttft, "ttft"),
        (MetricKind::DecodeMean, "tpot"),
        (MetricKind::ChunkGap, "itl"),
        (MetricKind::E2e, "e2el"),
    ] {
        let d = &l.metrics[&kind];
        assert_eq!(d.recomputed, vec![500, 900, 990], "{stem}");
        assert!(d.mean_recomputed, "{stem}: the mean came from the arrays too");
        let want = |k: &str| raw[format!("{k}_{stem}_ms")].as_f64().unwrap();
        assert!(close(d.mean.unwrap(), want("mean")), "{stem} mean");
        assert!(close(d.std.unwrap(), want("std")), "{stem} std (population)");
        assert!(close(d.percentile(500).unwrap(), want("median")), "{stem} p50");
        assert!(close(d.percentile(900).unwrap(), want("p90")), "{stem} p90");
        assert!(close(d.percentile(990).unwrap(), want("p99")), "{stem} p99");
    }
}

#[test]
fn the_vllm_append_file_has_one_level_per_line_and_no_requests_to_replay() {
    let m = measured::load(&fixture("vllm-bench-serve-append.json")).unwrap();
    let rates: Vec<String> = m.levels.iter().map(|l| l.strategy.to_string()).collect();
    assert_eq!(rates, ["open loop 2 req/s", "open loop 8 req/s", "open loop 16 req/s, max concurrency 8"]);
    assert_eq!(m.levels[1].metrics[&MetricKind::Ttft].percentile(500), Some(76.48280832676141));
    assert_eq!(m.levels[2].metrics[&MetricKind::E2e].percentile(990), Some(1581.280615165032));
    assert!(m.levels.iter().all(|l| l.requests.as_ref().is_err_and(|e| e.contains("--save-detailed"))));
}

#[test]
fn the_sglang_sample_maps_e2e_latency_and_keeps_its_fixed_percentiles() {
    let m = measured::load(&fixture("sglang-bench-serving.jsonl")).unwrap();
    let text = std::fs::read_to_string(fixture("sglang-bench-serving.jsonl")).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(m.tool, Tool::Sglang);
    assert_eq!(m.levels.len(), 2);
    let e2e = &m.levels[0].metrics[&MetricKind::E2e];
    assert_eq!(e2e.field, "e2e_latency");
    assert_eq!(e2e.percentile(900), first["p90_e2e_latency_ms"].as_f64());
    assert_eq!(e2e.percentile(950), first["p95_e2e_latency_ms"].as_f64());
    assert_eq!(m.levels[0].metrics[&MetricKind::ChunkGap].mean, first["mean_itl_ms"].as_f64());
    assert_eq!(m.levels[0].throughput.input_tokens_per_s, first["input_throughput"].as_f64());
}

#[test]
fn the_guidellm_sample_gives_one_level_per_benchmark_with_its_own_definitions() {
    let m = measured::load(&fixture("guidellm-report.json")).unwrap();
    let raw = json_of(&fixture("guidellm-report.json"));
    assert_eq!(m.tool, Tool::Guidellm);
    let labels: Vec<&str> = m.levels.iter().map(|l| l.label.as_str()).collect();
    assert_eq!(labels, ["synchronous", "constant@22.52"]);
    assert_eq!(m.levels[0].strategy, Strategy::Closed { concurrency: 1 });
    let b = &raw["benchmarks"][1]["metrics"];
    let l = &m.levels[1];
    let s = |name: &str, stat: &str| b[name]["successful"]["percentiles"][stat].as_f64().unwrap();
    assert_eq!(l.metrics[&MetricKind::Ttft].percentile(500), Some(s("time_to_first_token_ms", "p50")));
    let itl = &l.metrics[&MetricKind::DecodeMean];
    assert_eq!((itl.field.as_str(), itl.token_weighted), ("inter_token_latency_ms", true));
    assert_eq!(itl.percentile(990), Some(s("inter_token_latency_ms", "p99")));
    assert_eq!(itl.percentile(1), Some(s("inter_token_latency_ms", "p001")));
    assert!(
        l.not_compared.iter().any(|n| n.contains("time_per_output_token_ms") && n.contains("includes the TTFT")),
        "guidellm's TTFT-inclusive time per token is said not compared: {:?}",
        l.not_compared
    );
    assert_eq!(l.metrics.len(), 3, "TTFT, the decode mean and E2E only: {:?}", l.metrics.keys());
    assert!(!l.metrics.contains_key(&MetricKind::ChunkGap), "guidellm has no pooled chunk gaps");
    assert!(close(l.metrics[&MetricKind::E2e].percentile(500).unwrap(), s("request_latency", "p50") * 1e3));
    assert_eq!(l.throughput.requests_per_s, b["requests_per_second"]["successful"]["mean"].as_f64());
    assert_eq!((l.completed, l.failed), (Some(16), Some(0)));
    assert!(l.requests.as_ref().is_err_and(|e| e.contains("sample_size 1")));
}

#[test]
fn files_from_unsupported_tools_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let ip = dir.path().join("summary_lifecycle_metrics.json");
    std::fs::write(&ip, r#"{"load_summary": {"count": 3}, "successes": {}}"#).unwrap();
    let out = TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"]).arg(&ip).fails_with(2);
    out.stderr_has(&["summary_lifecycle_metrics.json", "inference-perf's summary of every stage", "supported:"]);
    let per_request = dir.path().join("per_request_lifecycle_metrics.json");
    std::fs::write(&per_request, r#"[{"start_time": 1.0, "end_time": 2.0, "request": "{}", "info": {}}]"#).unwrap();
    let out = TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"]).arg(&per_request).fails_with(2);
    out.stderr_has(&["per_request_lifecycle_metrics.json, which says no stage"]);
    let responses = dir.path().join("m_individual_responses.json");
    std::fs::write(&responses, r#"[{"ttft_s": 0.1, "end_to_end_latency_s": 0.3, "number_output_tokens": 14}]"#)
        .unwrap();
    let out = TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"]).arg(&responses).fails_with(2);
    out.stderr_has(&["individual_responses.json", "_summary.json is read"]);
    let sweep = dir.path().join("profile_export_aiperf_sweep.json");
    std::fs::write(&sweep, r#"{"aggregation_type": "sweep", "per_combination_metrics": []}"#).unwrap();
    let out = TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"]).arg(&sweep).fails_with(2);
    out.stderr_has(&["AIPerf aggregate", "`sweep`", "profile_export.jsonl"]);
}

/// Each metric's mean and `percentiles` equal the file's `avg` and `pNN`
/// of its `tag` (AIPerf's and genai-perf's summaries, in ms).
fn assert_stats_as_in_the_file(
    l: &measured::LoadLevel,
    raw: &Value,
    tags: &[(MetricKind, &str)],
    percentiles: &[(u32, &str)],
) {
    for &(kind, tag) in tags {
        let d = &l.metrics[&kind];
        assert_eq!(d.mean, raw[tag]["avg"].as_f64(), "{tag}");
        for &(tenths, p) in percentiles {
            assert_eq!(d.percentile(tenths), raw[tag][p].as_f64(), "{tag} {p}");
        }
    }
}

#[test]
fn the_aiperf_summary_is_compared_with_its_own_numbers_but_not_replayed() {
    let m = measured::load(&fixture("aiperf-profile_export_aiperf.json")).unwrap();
    let raw = json_of(&fixture("aiperf-profile_export_aiperf.json"));
    assert_eq!((m.tool, m.levels.len()), (Tool::Aiperf, 1));
    let l = &m.levels[0];
    // The sample is the rate-8 leg of a Poisson sweep.
    assert_eq!(l.strategy, Strategy::Open { rate: Some(8.0), burstiness: Some(1.0), max_concurrency: None });
    assert_eq!((l.completed, l.failed), (Some(24), Some(0)));
    assert_eq!(l.duration_s, raw["benchmark_duration"]["avg"].as_f64());
    assert_eq!(l.throughput.requests_per_s, raw["request_throughput"]["avg"].as_f64());
    assert_eq!(l.throughput.input_tokens_per_s, raw["input_token_throughput"]["avg"].as_f64());
    let tags = [
        (MetricKind::Ttft, "time_to_first_token"),
        (MetricKind::DecodeMean, "inter_token_latency"),
        (MetricKind::ChunkGap, "inter_chunk_latency"),
        (MetricKind::E2e, "request_latency"),
    ];
    assert_stats_as_in_the_file(l, &raw, &tags, &[(10, "p1"), (500, "p50"), (900, "p90"), (990, "p99")]);
    for (kind, tag) in tags {
        assert_eq!(raw[tag]["unit"], "ms", "{tag}");
        assert!(l.metrics[&kind].recomputed.is_empty());
    }
    let out = TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"])
        .arg(fixture("aiperf-profile_export_aiperf.json"))
        .fails_with(2);
    out.stderr_has(&["no per-request data", "profile_export.jsonl"]);
}

#[test]
fn the_genai_perf_summary_is_compared_with_its_own_numbers() {
    let file = fixture("genai-perf-profile_export_genai_perf.json");
    let (m, raw) = (measured::load(&file).unwrap(), json_of(&file));
    let l = &m.levels[0];
    assert_eq!((m.tool, &l.strategy), (Tool::GenaiPerf, &Strategy::Closed { concurrency: 2 }));
    assert_eq!(raw["input_config"]["perf_analyzer"]["stimulus"]["concurrency"], 2);
    assert_eq!(l.completed, raw["request_count"]["avg"].as_f64().map(|x| x as u64));
    assert_eq!(l.throughput.output_tokens_per_s, raw["output_token_throughput"]["avg"].as_f64());
    let tags = [
        (MetricKind::Ttft, "time_to_first_token"),
        (MetricKind::DecodeMean, "inter_token_latency"),
        (MetricKind::E2e, "request_latency"),
    ];
    assert_stats_as_in_the_file(l, &raw, &tags, &[(990, "p99")]);
    assert!(!l.metrics.contains_key(&MetricKind::ChunkGap), "genai-perf has no pooled chunk gaps");
    let out = TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"]).arg(&file).fails_with(2);
    out.stderr_has(&["cannot replay concurrency 2", "counts no tokens"]);
}

#[test]
fn the_llmperf_summary_is_one_closed_loop_with_its_own_numbers() {
    let file = fixture("llmperf-summary.json");
    let (m, raw) = (measured::load(&file).unwrap(), json_of(&file));
    let l = &m.levels[0];
    assert_eq!((m.tool, &l.strategy), (Tool::Llmperf, &Strategy::Closed { concurrency: 3 }));
    let ttft = &l.metrics[&MetricKind::Ttft];
    assert!(close(ttft.mean.unwrap(), raw["results_ttft_s_mean"].as_f64().unwrap() * 1e3));
    assert!(close(ttft.percentile(990).unwrap(), raw["results_ttft_s_quantiles_p99"].as_f64().unwrap() * 1e3));
    let e2e = l.metrics[&MetricKind::E2e].percentile(500).unwrap();
    assert!(close(e2e, raw["results_end_to_end_latency_s_quantiles_p50"].as_f64().unwrap() * 1e3));
    assert!(!l.metrics.contains_key(&MetricKind::DecodeMean) && !l.metrics.contains_key(&MetricKind::ChunkGap));
    let per_min = raw["results_num_completed_requests_per_min"].as_f64().unwrap();
    assert!(close(l.throughput.requests_per_s.unwrap(), per_min / 60.0));
    assert_eq!(l.completed, raw["results_num_completed_requests"].as_u64());
}

#[test]
fn an_inference_perf_stage_file_gives_its_ttft_e2e_and_throughputs() {
    let file = fixture("inference-perf-stage_1_lifecycle_metrics.json");
    let (m, raw) = (measured::load(&file).unwrap(), json_of(&file));
    let l = &m.levels[0];
    let open = Strategy::Open { rate: Some(8.0), burstiness: None, max_concurrency: None };
    assert_eq!((m.tool, &l.strategy), (Tool::InferencePerf, &open));
    let lat = &raw["successes"]["latency"];
    let ttft = &l.metrics[&MetricKind::Ttft];
    assert!(close(ttft.mean.unwrap(), lat["time_to_first_token"]["mean"].as_f64().unwrap() * 1e3));
    assert!(close(ttft.percentile(500).unwrap(), lat["time_to_first_token"]["median"].as_f64().unwrap() * 1e3));
    let e2e = l.metrics[&MetricKind::E2e].percentile(990).unwrap();
    assert!(close(e2e, lat["request_latency"]["p99"].as_f64().unwrap() * 1e3));
    assert_eq!(l.metrics.len(), 2, "its chunk-timed TPOT and ITL are not read");
    assert_eq!((l.completed, l.failed), (raw["successes"]["count"].as_u64(), Some(0)));
    assert_eq!(l.throughput.output_tokens_per_s, raw["successes"]["throughput"]["output_tokens_per_sec"].as_f64());
}

#[test]
fn aiperf_records_are_replayed_and_their_statistics_computed_as_aiperf_does() {
    let dir = tempfile::tempdir().unwrap();
    let records = fixture("aiperf-profile_export.jsonl");
    // Figures worked from the three records outside llmsim (Python, numpy's
    // linear percentiles): their TTFTs, the 45 chunk gaps pooled, the span
    // from the first request_start_ns to the last request_end_ns.
    let m = measured::load(&records).unwrap();
    let l = &m.levels[0];
    assert_eq!((m.tool, l.completed, l.failed), (Tool::Aiperf, Some(3), Some(0)));
    assert!(close(l.metrics[&MetricKind::Ttft].mean.unwrap(), 83.71534366666667));
    assert!(close(l.metrics[&MetricKind::Ttft].percentile(900).unwrap(), 90.6049034));
    assert_eq!(l.metrics[&MetricKind::ChunkGap].count, Some(45));
    assert!(close(l.metrics[&MetricKind::ChunkGap].mean.unwrap(), 12.484602022222223));
    assert!(close(l.metrics[&MetricKind::ChunkGap].percentile(990).unwrap(), 18.68749712));
    assert!(close(l.metrics[&MetricKind::E2e].percentile(500).unwrap(), 269.429569));
    assert!(close(l.throughput.requests_per_s.unwrap(), 3.6793334839317233));
    let (pred, csv) = (dir.path().join("pred.json"), dir.path().join("requests.csv"));
    TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"])
        .arg(&records)
        .arg("--json")
        .arg(&pred)
        .arg("--requests-csv")
        .arg(&csv)
        .ok()
        .stderr_has(&["replaying 3 requests", "NVIDIA AIPerf"]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    // Sent 0, 0.139699707 and 0.5459355 s after the first (request_start_ns
    // differences); 70, 49 and 77 prompt tokens, 16 out.
    assert_eq!(rows.len(), 3);
    for (row, start) in rows.iter().zip(["0,0.000000000,70,16,", "1,0.139699707,49,16,", "2,0.545935500,77,16,"]) {
        assert!(row.starts_with(start), "{text}");
    }
    let out = TestCommand::new(&["diff"]).arg(&pred).arg(&records).arg("--tolerance").arg("10000%").ok();
    let text = out.stdout();
    for want in ["NVIDIA AIPerf", "profiling records", "83.715", "inter_chunk_latency", "computed from the"] {
        assert!(text.contains(want), "{want} not in {text}");
    }
}

/// Predicts the vLLM sample's own requests; returns the result file.
fn predict_vllm_sample(dir: &Path) -> PathBuf {
    let pred = dir.join("pred.json");
    TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"])
        .arg(fixture("vllm-bench-serve.json"))
        .arg("--json")
        .arg(&pred)
        .ok()
        .stderr_has(&["replaying 8 requests"]);
    pred
}

#[test]
fn trace_from_replays_the_measured_send_times_and_lengths() {
    let dir = tempdir();
    let csv = dir.path().join("req.csv");
    TestCommand::new(&["run", "scenarios/base.yml", "-q", "--trace-from"])
        .arg(fixture("vllm-bench-serve.json"))
        .arg("--requests-csv")
        .arg(&csv)
        .ok();
    let raw = json_of(&fixture("vllm-bench-serve.json"));
    let starts: Vec<f64> = raw["start_times"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let mut reader = csv::Reader::from_path(&csv).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 8);
    for (i, row) in rows.iter().enumerate() {
        let arrival: f64 = row[1].parse().unwrap();
        assert!((arrival - (starts[i] - starts[0])).abs() < 1e-6, "request {i}: {arrival}");
        assert_eq!(row[2], raw["input_lens"][i].to_string(), "prompt of {i}");
        assert_eq!(row[3], raw["output_lens"][i].to_string(), "output of {i}");
        assert_eq!(&row[4], "finished");
    }
}

#[test]
fn trace_from_also_replays_a_trace_csv_like_a_trace_workload() {
    let dir = tempdir();
    let trace = write(dir.path(), "t.csv", "arrival_s,prompt_tokens,output_tokens,id\n0.5,100,4,a\n0.75,200,8,b\n");
    let scenario = std::fs::read_to_string(repo("scenarios/base.yml")).unwrap().replace(
        "  arrivals:\n    poisson: { rate: 20 }\n  requests: 2000\n  prompt_tokens: 512\n  output_tokens: 64",
        "  arrivals:\n    trace: t.csv",
    );
    let with_trace = write(dir.path(), "s.yml", &scenario);
    let a = TestCommand::new(&["run", "--json", "-"]).arg(&with_trace).ok().stdout();
    let b = TestCommand::new(&["run", "scenarios/base.yml", "--json", "-", "--trace-from"]).arg(&trace).ok();
    b.stderr_has(&["replaying 2 requests of the trace"]);
    let (mut a, mut b): (Value, Value) =
        (serde_json::from_str(&a).unwrap(), serde_json::from_str(&b.stdout()).unwrap());
    assert_eq!(a["requests"]["completed"], 2);
    a["scenario"] = Value::Null;
    b["scenario"] = Value::Null;
    assert_eq!(a, b);
    let bad = write(dir.path(), "bad.csv", "arrival_s,prompt_tokens\n0,1\n");
    TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"])
        .arg(&bad)
        .fails_with(2)
        .stderr_has(&["bad.csv", "missing column `output_tokens`"]);
}

#[test]
fn trace_from_explains_files_without_replayable_requests() {
    let cases = [
        ("vllm-bench-serve-append.json", Some("2"), "--save-detailed"),
        ("vllm-bench-serve-append.json", None, "choose one with --trace-level N"),
        ("guidellm-report.json", Some("1"), "sample_size"),
        ("sglang-bench-serving.jsonl", Some("2"), "does not save when each request was sent"),
        ("vllm-bench-serve.json", Some("3"), "--trace-level 3 is out of range"),
    ];
    for (file, level, why) in cases {
        let mut cmd = TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"]).arg(fixture(file));
        if let Some(l) = level {
            cmd = cmd.arg("--trace-level").arg(l);
        }
        cmd.fails_with(2).stderr_has(&[file, why]);
    }
}

#[test]
fn diff_prints_every_figure_with_its_error_and_fails_outside_the_tolerance() {
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let out = TestCommand::new(&["diff"]).arg(&pred).arg(fixture("vllm-bench-serve.json")).fails_with(1);
    out.stderr_has(&["the comparison failed", "outside ±10%"]);
    let text = out.stdout();
    for id in ["ttft.p50", "itl.p99", "tpot.mean", "e2e.p90", "throughput.output", "OUTSIDE"] {
        assert!(text.contains(id), "{id} missing:\n{text}");
    }
    assert!(text.contains("definitions compared"), "{text}");
    assert!(text.contains("vllm bench serve `itl` (every gap between consecutive streamed chunks, pooled)"), "{text}");
}

#[test]
fn diff_passes_within_a_wide_tolerance_and_writes_json() {
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let report = dir.path().join("diff.json");
    let out = TestCommand::new(&["diff", "--tolerance", "100000%", "--json"])
        .arg(&report)
        .arg(&pred)
        .arg(fixture("vllm-bench-serve.json"))
        .ok();
    assert!(out.stdout().contains("result: PASSED: 0 of 20 compared figures outside"), "{}", out.stdout());
    let j = json_of(&report);
    let ttft = j[0]["rows"].as_array().unwrap().iter().find(|r| r["id"] == "ttft.p50").unwrap();
    assert_eq!(ttft["measured"].as_f64(), Some(54.72745479211764));
    assert_eq!(ttft["verdict"], "within");
}

#[test]
fn diff_gates_only_on_the_selected_metrics() {
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let text = std::fs::read_to_string(&pred).unwrap();
    let mut p: Value = serde_json::from_str(&text).unwrap();
    // Make the predicted TTFT p50 equal the measured one: only it is gated.
    p["ttft_ms"]["p50"] = serde_json::json!(54.72745479211764 * 1.05);
    std::fs::write(&pred, p.to_string()).unwrap();
    let out = TestCommand::new(&["diff", "--metric", "ttft.p50"]).arg(&pred).arg(fixture("vllm-bench-serve.json")).ok();
    assert!(out.stdout().contains("(not selected)"), "{}", out.stdout());
    assert!(out.stdout().contains("0 of 1 compared"), "{}", out.stdout());
}

#[test]
fn missing_percentiles_are_shown_as_not_compared_never_invented() {
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let measured = write(
        dir.path(),
        "default.json",
        r#"{"backend": "vllm", "model_id": "m", "burstiness": 1.0, "request_rate": 4.0, "completed": 8,
            "request_throughput": 2.0, "output_throughput": 250.0, "total_token_throughput": 1250.0,
            "mean_ttft_ms": 50.0, "median_ttft_ms": 50.0, "std_ttft_ms": 1.0, "p99_ttft_ms": 70.0}"#,
    );
    let out = TestCommand::new(&["diff", "--tolerance", "100000%"]).arg(&pred).arg(&measured).ok();
    let text = out.stdout();
    let line = |id: &str| text.lines().find(|l| l.trim_start().starts_with(id)).unwrap_or_default().to_string();
    assert!(line("ttft.p90").contains("not compared: not in the file (never estimated)"), "{text}");
    assert!(line("ttft.p99").contains("ok"), "{text}");
    assert!(line("itl.p50").contains("not compared"), "{text}");
}

#[test]
fn figures_computed_from_the_arrays_say_so_the_mean_too() {
    // vLLM writes no e2el summary keys by default: the mean and the
    // percentiles then come from `latencies`, and each row says so.
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let mut raw = json_of(&fixture("vllm-bench-serve.json"));
    raw.as_object_mut().unwrap().retain(|k, _| !k.ends_with("_e2el_ms"));
    let measured = write(dir.path(), "no-e2el.json", &raw.to_string());
    let out = TestCommand::new(&["diff", "--tolerance", "100000%"]).arg(&pred).arg(&measured).ok();
    let text = out.stdout();
    let line = |id: &str| text.lines().find(|l| l.trim_start().starts_with(id)).unwrap_or_default().to_string();
    for id in ["e2e.mean", "e2e.p50", "e2e.p99"] {
        assert!(line(id).contains("computed from the per-request arrays"), "{id}:\n{text}");
    }
    for id in ["ttft.mean", "ttft.p50"] {
        assert!(!line(id).contains("computed"), "{id} is the file's own figure:\n{text}");
    }
}

#[test]
fn a_measurement_that_flagged_its_own_lag_fails_the_diff_loudly() {
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let mut m = json_of(&fixture("vllm-bench-serve.json"));
    m["llmsim_version"] = "0.1.0".into();
    m["llmsim_warnings"] = serde_json::json!(["client lag: the bench's 10 ms ticker woke up 9.0 ms late at p99"]);
    let measured = write(dir.path(), "lagged.json", &m.to_string());
    let out = TestCommand::new(&["diff", "--tolerance", "100000%"]).arg(&pred).arg(&measured).fails_with(1);
    assert!(out.stdout().contains("WARNING: the measurement flagged itself: client lag"), "{}", out.stdout());
    out.stderr_has(&["the comparison failed", "reported lag"]);
}

#[test]
fn diff_pairs_levels_in_order_or_by_level_and_explains_mismatches() {
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let append = fixture("vllm-bench-serve-append.json");
    TestCommand::new(&["diff"]).arg(&pred).arg(&append).fails_with(2).stderr_has(&[
        "3 load levels",
        "--level N",
        "2. rate 8",
    ]);
    let out = TestCommand::new(&["diff", "--level", "2", "--tolerance", "100000%"]).arg(&pred).arg(&append).ok();
    assert!(out.stdout().contains("rate 8 (open loop 8 req/s)"), "{}", out.stdout());
    let one = std::fs::read_to_string(&pred).unwrap();
    let three = write(dir.path(), "three.json", &format!("{one}\n{one}\n{one}"));
    let out = TestCommand::new(&["diff", "--tolerance", "100000%"]).arg(&three).arg(&append).ok();
    assert_eq!(out.stdout().matches("result: PASSED").count(), 3, "{}", out.stdout());
    let two = write(dir.path(), "two.json", &format!("[{one},{one}]"));
    TestCommand::new(&["diff"]).arg(&two).arg(&append).fails_with(2).stderr_has(&["2 results", "3 load levels"]);
}

#[test]
fn diff_refuses_bad_arguments_with_exit_2() {
    let dir = tempdir();
    let pred = predict_vllm_sample(dir.path());
    let vllm = fixture("vllm-bench-serve.json");
    TestCommand::new(&["diff"]).arg(&vllm).arg(&vllm).fails_with(2).stderr_has(&["did you swap the two files?"]);
    TestCommand::new(&["diff", "--tolerance", "ten"])
        .arg(&pred)
        .arg(&vllm)
        .fails_with(2)
        .stderr_has(&["--tolerance `ten`", "percentage"]);
    TestCommand::new(&["diff", "--metric", "ttft.p95"]).arg(&pred).arg(&vllm).fails_with(2).stderr_has(&[
        "--metric `ttft.p95`",
        "did you mean",
        "ttft.p50",
    ]);
    let broken = write(dir.path(), "broken.json", "{\"backend\": \"vllm\",\n  \"mean_ttft_ms\": }");
    TestCommand::new(&["diff"]).arg(&pred).arg(&broken).fails_with(2).stderr_has(&["broken.json:2", "not valid JSON"]);
    TestCommand::new(&["diff"])
        .arg(&pred)
        .arg(dir.path().join("nope.json"))
        .fails_with(2)
        .stderr_has(&["no such file"]);
}

/// `vllm bench serve` writes the server's spec-decoding figures; `diff`
/// compares them with a prediction that drafts, and shows (never compares)
/// them when only one side drafts.
#[test]
fn diff_compares_the_acceptance_with_the_measured_spec_decode_figures() {
    let dir = tempdir();
    let pred = dir.path().join("pred.json");
    let spec = [
        "--set",
        "speculative.method=ngram",
        "--set",
        "speculative.num_speculative_tokens=3",
        "--set",
        "speculative.acceptance_rate=0.7",
    ];
    let mut run =
        TestCommand::new(&["run", "scenarios/base.yml", "--trace-from"]).arg(fixture("vllm-bench-serve.json"));
    for a in spec {
        run = run.arg(a);
    }
    run.arg("--json").arg(&pred).ok();
    let predicted = json_of(&pred)["speculative"].clone();
    let length = predicted["mean_acceptance_length"].as_f64().unwrap();
    let rate = predicted["acceptance_rate"].as_f64().unwrap() * 100.0;
    let mut measured = json_of(&fixture("vllm-bench-serve.json"));
    // Measured: 10% above the predicted length, 50% above the rate.
    measured["spec_decode_acceptance_length"] = serde_json::json!(length * 1.1);
    measured["spec_decode_acceptance_rate"] = serde_json::json!(rate * 1.5);
    let file = write(dir.path(), "spec.json", &measured.to_string());
    let report = dir.path().join("diff.json");
    let out = TestCommand::new(&["diff", "--tolerance", "20%", "--metric", "speculative", "--json"])
        .arg(&report)
        .arg(&pred)
        .arg(&file)
        .fails_with(1);
    assert!(out.stdout().contains("1 of 2 compared figures outside"), "{}", out.stdout());
    let rows = json_of(&report)[0]["rows"].as_array().unwrap().clone();
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap().clone();
    assert_eq!(row("speculative.acceptance_length")["verdict"], "within");
    assert!(close(row("speculative.acceptance_length")["error_pct"].as_f64().unwrap(), 100.0 / 1.1 - 100.0));
    assert_eq!(row("speculative.acceptance_rate")["verdict"], "outside");
    // A server that drafted against a scenario that does not: shown, not compared.
    let plain = predict_vllm_sample(dir.path());
    let out = TestCommand::new(&["diff", "--tolerance", "100000%"]).arg(&plain).arg(&file).ok();
    let text = out.stdout();
    let line = text.lines().find(|l| l.trim_start().starts_with("speculative.acceptance_length")).unwrap_or_default();
    assert!(line.contains("not compared") && line.contains("the measured server drafted"), "{text}");
}
