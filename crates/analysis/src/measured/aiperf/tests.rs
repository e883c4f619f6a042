use std::path::Path;

use serde_json::json;

use super::*;

/// A record as AIPerf 0.13 writes one, of a request sent at `start_ns`.
fn record(start_ns: u64, ttft: f64, gaps: &[f64], prompt: u32, phase: &str) -> String {
    let e2e = ttft + gaps.iter().sum::<f64>();
    let out = gaps.len() + 1;
    let itl = if out > 1 { (e2e - ttft) / (out - 1) as f64 } else { 0.0 };
    json!({
        "metadata": {"session_num": 0, "request_start_ns": start_ns, "request_end_ns": start_ns + (e2e * 1e6) as u64,
                     "benchmark_phase": phase, "was_cancelled": false},
        "metrics": {"time_to_first_token": {"value": ttft, "unit": "ms"},
                    "inter_chunk_latency": {"value": gaps, "unit": "ms"},
                    "inter_token_latency": {"value": itl, "unit": "ms"},
                    "request_latency": {"value": e2e, "unit": "ms"},
                    "input_sequence_length": {"value": prompt, "unit": "tokens"},
                    "output_sequence_length": {"value": out, "unit": "tokens"},
                    "http_req_duration": {"value": e2e, "unit": "ms"}}
    })
    .to_string()
}

fn read(text: &str) -> Result<Measured, ConfigError> {
    read_records(text.as_bytes(), Path::new("r.jsonl"), Kind::Measured)
}

#[test]
fn records_make_one_level_of_the_profiling_phase() {
    let base = 1_795_940_862_238_983_721u64;
    let text = [
        record(base - 5_000_000_000, 500.0, &[1.0], 9, "warmup"),
        record(base, 90.0, &[10.0, 12.0, 14.0], 70, "profiling"),
        record(base + 250_000_000, 80.0, &[11.0, 13.0], 60, "profiling"),
        record(base + 500_000_000, 100.0, &[20.0], 50, "profiling"),
    ]
    .join("\n");
    let m = read(&text).unwrap();
    assert_eq!(m.tool, Tool::Aiperf);
    let l = &m.levels[0];
    assert_eq!((l.completed, l.failed), (Some(3), Some(0)));
    // TTFTs 80, 90, 100: the mean 90, numpy's linear p90 98.
    let ttft = &l.metrics[&MetricKind::Ttft];
    assert_eq!((ttft.count, ttft.mean), (Some(3), Some(90.0)));
    assert!((ttft.percentile(900).unwrap() - 98.0).abs() < 1e-9);
    // Six gaps pooled: 10, 11, 12, 13, 14, 20; their median 12.5.
    let gaps = &l.metrics[&MetricKind::ChunkGap];
    assert_eq!(gaps.count, Some(6));
    assert!((gaps.percentile(500).unwrap() - 12.5).abs() < 1e-9);
    // Per request (e2e - ttft) / (out - 1): 12, 12, 20.
    let tpot = &l.metrics[&MetricKind::DecodeMean];
    assert!((tpot.mean.unwrap() - 44.0 / 3.0).abs() < 1e-9);
    assert_eq!(tpot.recomputed, vec![500, 900, 990]);
    // Sends relative to the first, exact to the nanosecond.
    let sent: Vec<f64> = l.requests.as_ref().unwrap().iter().map(|r| r.sent_s).collect();
    assert_eq!(sent, vec![0.0, 0.25, 0.5]);
    let (rows, skipped) = l.trace_rows().unwrap();
    assert_eq!((rows.len(), skipped), (3, 0));
    assert_eq!((rows[0].prompt, rows[0].output, rows[2].output), (70, 4, 2));
    // The span: first send to the last response (0.5 s + 120 ms).
    assert!((l.duration_s.unwrap() - 0.62).abs() < 1e-9);
    assert!((l.throughput.requests_per_s.unwrap() - 3.0 / 0.62).abs() < 1e-9);
    assert!((l.throughput.input_tokens_per_s.unwrap() - 180.0 / 0.62).abs() < 1e-9);
}

#[test]
fn failed_and_cancelled_records_count_as_failed_and_are_not_replayed() {
    let ok = record(1_000_000_000, 90.0, &[10.0], 70, "profiling");
    let mut failed: Value = serde_json::from_str(&record(2_000_000_000, 90.0, &[10.0], 70, "profiling")).unwrap();
    failed["error"] = json!({"code": 500, "type": "Internal Server Error", "message": "boom"});
    let mut cancelled: Value = serde_json::from_str(&record(3_000_000_000, 90.0, &[10.0], 70, "profiling")).unwrap();
    cancelled["metadata"]["was_cancelled"] = json!(true);
    let l = read(&format!("{ok}\n{failed}\n{cancelled}")).unwrap().levels.remove(0);
    assert_eq!((l.completed, l.failed), (Some(1), Some(2)));
    assert_eq!(l.metrics[&MetricKind::Ttft].count, Some(1));
    let (rows, skipped) = l.trace_rows().unwrap();
    assert_eq!((rows.len(), skipped), (1, 2));
    // 0.1.x wrote `"error": null` on success.
    let mut old: Value = serde_json::from_str(&ok).unwrap();
    old["error"] = Value::Null;
    assert_eq!(read(&old.to_string()).unwrap().levels[0].completed, Some(1));
}

#[test]
fn records_in_another_key_order_read_the_same() {
    let text = [record(1_000, 90.0, &[10.0, 11.0], 70, "profiling"), record(2_000, 95.0, &[9.0], 71, "profiling")];
    let fast = read(&text.join("\n")).unwrap();
    // `metrics` first: read as JSON values, then as records.
    let reordered: Vec<String> = text
        .iter()
        .map(|t| {
            let v: Value = serde_json::from_str(t).unwrap();
            format!("{{\"metrics\": {}, \"metadata\": {}}}", v["metrics"], v["metadata"])
        })
        .collect();
    let slow = super::super::parse(&reordered.join("\n"), Path::new("r.jsonl")).unwrap();
    assert_eq!(fast.levels, slow.levels);
    assert!(starts_records(b"  {\n  \"metadata\": {\"a\": 1, \"request_start_ns\": 5}, \"metrics\""));
    let guidellm = b"{\"metadata\": {\"guidellm_version\": \"0.8\"}, \"request_start_ns\": 1";
    assert!(!starts_records(guidellm));
    assert!(!starts_records(b"{\"metrics\": {"));
}

#[test]
fn bad_records_are_named_by_their_number() {
    let good = record(1_000, 90.0, &[10.0], 70, "profiling");
    let bad_unit = good.replace("\"unit\":\"ms\"", "\"unit\":\"fortnights\"");
    let e = read(&format!("{good}\n{bad_unit}")).unwrap_err().to_string();
    assert!(e.contains("record 2") && e.contains("fortnights") && e.contains("r.jsonl"), "{e}");
    let e = read(&format!("{good}\n{{\"metadata\": 5}}")).unwrap_err().to_string();
    assert!(e.contains("record 2") && e.contains("not an AIPerf record"), "{e}");
    let e = read(&format!("{good}\n{{\"metadata\": {{")).unwrap_err().to_string();
    assert!(e.contains("not valid JSON") || e.contains("EOF"), "{e}");
    let e = read(&record(1, 90.0, &[10.0], 70, "warmup")).unwrap_err().to_string();
    assert!(e.contains("no profiling-phase records") && e.contains("1 warm-up"), "{e}");
    let huge = good.replace("\"value\":70}", "\"value\":1e12}");
    assert_ne!(huge, good, "the record has a 70-token prompt to change");
    let e = read(&huge).unwrap_err().to_string();
    assert!(e.contains("record 1") && e.contains("input_sequence_length") && e.contains("4294967295"), "{e}");
    let e = read(&good.replace("\"value\":90.0", "\"value\":\"soon\"")).unwrap_err().to_string();
    assert!(e.contains("`soon` is not a number"), "{e}");
}

#[test]
fn a_record_without_lengths_is_compared_but_not_replayed() {
    let mut v: Value = serde_json::from_str(&record(1_000, 90.0, &[10.0], 70, "profiling")).unwrap();
    v["metrics"].as_object_mut().unwrap().remove("input_sequence_length");
    let l = read(&v.to_string()).unwrap().levels.remove(0);
    assert_eq!(l.metrics[&MetricKind::Ttft].mean, Some(90.0));
    assert!(l.trace_rows().is_err_and(|e| e.to_string().contains("record 1 has no")));
}

#[test]
fn the_summary_reads_its_phase_and_units() {
    let doc = json!({
        "aiperf_version": "0.13.0",
        "time_to_first_token": {"unit": "sec", "avg": 0.09, "p50": 0.085, "p99": 0.1, "std": 0.01, "count": 24},
        "request_latency": {"unit": "ms", "avg": 275.0, "p90": 288.0},
        "benchmark_duration": {"unit": "sec", "avg": 3.2},
        "request_throughput": {"unit": "requests/sec", "avg": 7.2},
        "error_summary": [{"error_details": {"code": 500}, "count": 2}],
        "input_config": {"phases": [{"kind": "warmup", "type": "poisson", "rate": 1.0},
                                    {"kind": "profiling", "type": "concurrency", "concurrency": 32}]},
        "is_complete": false
    });
    let l = summary_level(&doc).unwrap();
    assert_eq!((l.label.as_str(), &l.strategy), ("concurrency 32", &Strategy::Closed { concurrency: 32 }));
    let ttft = &l.metrics[&MetricKind::Ttft];
    assert_eq!((ttft.mean, ttft.percentile(500), ttft.percentile(990)), (Some(90.0), Some(85.0), Some(100.0)));
    assert_eq!(l.metrics[&MetricKind::E2e].percentile(900), Some(288.0));
    assert_eq!((l.duration_s, l.failed, l.throughput.requests_per_s), (Some(3.2), Some(2), Some(7.2)));
    assert!(l.health[0].contains("did not complete"));
    assert!(l.requests.as_ref().is_err_and(|e| e.contains("profile_export.jsonl")));
    let mut gamma = doc.clone();
    gamma["input_config"]["phases"][1] = json!({"kind": "profiling", "type": "gamma", "rate": 8.0, "smoothness": 2.0});
    let l = summary_level(&gamma).unwrap();
    assert_eq!(l.strategy, Strategy::Open { rate: Some(8.0), burstiness: Some(2.0), max_concurrency: None });
    assert_eq!(l.label, "rate 8");
    let mut bad = doc;
    bad["request_latency"]["unit"] = json!("parsecs");
    assert!(summary_level(&bad).unwrap_err().contains("request_latency.unit: `parsecs`"));
}

#[test]
fn genai_perf_reads_its_load_in_either_config_shape() {
    let stats = json!({"unit": "ms", "avg": 20.0, "p50": 19.0});
    let new =
        json!({"inter_token_latency": stats, "input_config": {"perf_analyzer": {"stimulus": {"request_rate": 2.5}}}});
    let l = genai_perf_level(&new).unwrap();
    let constant = Strategy::Open { rate: Some(2.5), burstiness: Some(f64::INFINITY), max_concurrency: None };
    assert_eq!((l.label.as_str(), &l.strategy), ("rate 2.5", &constant));
    assert_eq!(l.metrics[&MetricKind::DecodeMean].percentile(500), Some(19.0));
    let old = json!({"time_to_first_token": stats, "input_config": {"concurrency": 4, "request_rate": null}});
    assert_eq!(genai_perf_level(&old).unwrap().strategy, Strategy::Closed { concurrency: 4 });
    let none = json!({"time_to_first_token": stats, "input_config": {}});
    assert!(matches!(genai_perf_level(&none).unwrap().strategy, Strategy::Other(_)));
}
