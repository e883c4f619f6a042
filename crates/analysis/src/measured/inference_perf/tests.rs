use super::*;

const CONFIG: &str = "
api: { type: completion, streaming: true }
data:
  type: shared_prefix
  shared_prefix: { num_groups: 10, num_prompts_per_group: 10, system_prompt_len: 100, question_len: 466, output_len: 247 }
load:
  type: constant
  stages: [ { rate: 5.0, duration: 600 }, { rate: 10.0, duration: 600 } ]
server: { type: vllm, ignore_eos: true }
";

fn stage_json(ttft_s: f64, e2e_s: f64, failures: u64, achieved: f64, done: f64) -> String {
    format!(
        r#"{{"load_summary": {{"count": 10, "achieved_rate": {achieved}}},
            "successes": {{"count": 10,
              "latency": {{"time_to_first_token": {{"mean": {ttft_s}, "median": {ttft_s}, "p90": {ttft_s}, "p99": {ttft_s}, "max": {ttft_s}}},
                           "request_latency": {{"mean": {e2e_s}, "median": {e2e_s}, "p90": {e2e_s}, "p99": {e2e_s}, "max": {e2e_s}}}}},
              "throughput": {{"requests_per_sec": {done}, "input_tokens_per_sec": 100.0}},
              "prompt_len": {{"mean": 591.63}}}},
            "failures": {{"count": {failures}}}}}"#
    )
}

fn write_dir(root: &Path, config: &str, stages: &[String]) -> PathBuf {
    let results = root.join("results");
    std::fs::create_dir_all(&results).unwrap();
    std::fs::write(results.join("config.yaml"), config).unwrap();
    for (i, s) in stages.iter().enumerate() {
        std::fs::write(results.join(format!("stage_{i}_lifecycle_metrics.json")), s).unwrap();
    }
    root.to_path_buf()
}

#[test]
fn reads_stages_data_and_figures_in_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let stages = [stage_json(0.025, 1.8, 0, 5.0, 4.99), stage_json(0.030, 2.2, 0, 10.0, 9.97)];
    let root = write_dir(dir.path(), CONFIG, &stages);
    assert!(is_run_dir(&root) && is_run_dir(&root.join("results")));
    let run = load(&root).unwrap();
    assert_eq!(run.load, LoadType::Constant);
    assert_eq!(run.distinct_prompts(), 100);
    assert!(run.ignore_eos && run.streaming);
    assert_eq!(run.stages.len(), 2);
    let s = &run.stages[1];
    assert_eq!((s.rate, s.duration_s), (10.0, 600.0));
    assert!((s.ttft.mean.unwrap() - 30.0).abs() < 1e-9);
    assert!((s.e2e.p90.unwrap() - 2200.0).abs() < 1e-9);
    assert_eq!(s.prompt_len_mean, Some(591.63));
    assert_eq!(s.saturated(), None);
}

#[test]
fn failures_or_lagging_completions_mark_a_stage_saturated() {
    let dir = tempfile::tempdir().unwrap();
    let stages = [stage_json(0.02, 1.0, 3, 4.0, 3.9), stage_json(0.02, 1.0, 0, 4.0, 3.2)];
    let run = load(&write_dir(dir.path(), CONFIG, &stages)).unwrap();
    assert!(run.stages[0].saturated().unwrap().contains("3 of 13 requests failed"));
    assert!(run.stages[1].saturated().unwrap().contains("the queue grew"));
}

#[test]
fn other_data_and_load_types_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CONFIG.replace("type: shared_prefix", "type: random");
    let e = load(&write_dir(dir.path(), &cfg, &[stage_json(0.02, 1.0, 0, 5.0, 5.0)])).unwrap_err();
    assert!(e.path == "data.type" && e.message.contains("only shared_prefix"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let cfg = CONFIG.replace("type: constant", "type: concurrent");
    let e = load(&write_dir(dir.path(), &cfg, &[stage_json(0.02, 1.0, 0, 5.0, 5.0)])).unwrap_err();
    assert!(e.message.contains("load type `concurrent`"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let e = load(&write_dir(dir.path(), CONFIG, &[stage_json(0.02, 1.0, 0, 5.0, 5.0)])).unwrap_err();
    assert!(e.to_string().contains("stage_1_lifecycle_metrics.json") && e.message.contains("no such file"), "{e}");
    let empty = tempfile::tempdir().unwrap();
    assert!(load(empty.path()).unwrap_err().message.contains("not an inference-perf run directory"));
}
