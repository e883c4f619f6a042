use super::*;
use llmsim_scenario::config::{Arrivals, load_scenario};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

fn source(rel: &str) -> ScenarioSource {
    ScenarioSource::load(&repo(rel), &[]).unwrap()
}

fn metric(f: Family, s: Stat) -> Metric {
    Metric::Latency(f, s)
}

#[test]
fn a_run_s_restated_scenario_is_the_scenario() {
    // Every shipped deployment (MLA, sliding windows, expert and data
    // parallelism, formats of their own), beside a plain scenario.
    let mut rels: Vec<String> = std::fs::read_dir(repo("scenarios/deployments"))
        .unwrap()
        .map(|e| format!("scenarios/deployments/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|r| r.ends_with(".yml"))
        .collect();
    rels.sort();
    assert!(rels.len() >= 10, "{rels:?}");
    rels.extend(["scenarios/base.yml".into(), "scenarios/workloads/mixed-lengths.yml".into()]);
    for rel in rels.iter().map(String::as_str) {
        let src = source(rel);
        let base = src.base(&[], None, "x").unwrap();
        let again = base.scenario(&[], &[]).unwrap();
        let original = load_scenario(&repo(rel)).unwrap();
        assert_eq!(
            llmsim_scenario::config::effective_yaml(&again),
            llmsim_scenario::config::effective_yaml(&original),
            "{rel}: building from the restated YAML changes nothing"
        );
        assert_eq!(again.capacity, original.capacity, "{rel}");
    }
}

#[test]
fn fitted_keys_are_set_on_the_run_s_scenario() {
    let src = source("scenarios/deployments/llama-3.1-70b-tp4-h100.yml");
    let base = src.base(&[], None, "x").unwrap();
    let keys = super::super::keys::parse(&["efficiency.memory,hardware.interconnect.latency_us=1:50".into()]).unwrap();
    let s = base.scenario(&keys, &[0.7, 20.0]).unwrap();
    assert_eq!(s.efficiency.memory, 0.7);
    let i = s.hardware.interconnect.as_ref().unwrap();
    assert_eq!(format!("{:?}", i.latency_us), format!("{:?}", llmsim_scenario::config::ByGpus::Fixed(20.0)));
    assert_eq!(base.value_of("efficiency.memory"), Some(1.0));
    assert_eq!(base.value_of("latency.request_overhead_ms"), Some(2.0));
}

#[test]
fn a_vllm_result_with_per_request_data_is_replayed_and_mapped_like_with_like() {
    let src = source("scenarios/deployments/llama-3.1-8b-h100.yml");
    let file = repo("tests/integration/fixtures/vllm-bench-serve.json");
    let runs = load(&src, &file, &LoadOptions::default()).unwrap().runs;
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(r.name, "vllm-bench-serve.json");
    assert_eq!(r.kind, InputKind::PerRequest(Tool::Vllm));
    assert_eq!(r.base.trace.as_ref().unwrap().len(), 8);
    assert!((r.measured[&metric(Family::Ttft, Stat::Mean)] - 55.65167322534846).abs() < 1e-9);
    assert!((r.measured[&metric(Family::Tpot, Stat::P90)] - 9.424403810336916).abs() < 1e-9);
    assert!((r.measured[&metric(Family::E2e, Stat::P99)] - 1288.154790137029).abs() < 1e-9);
    assert!((r.measured[&Metric::RequestsPerS] - 2.4712985589075447).abs() < 1e-12);
    assert_eq!(r.not_fitted, None);
    let s = r.base.scenario(&[], &[]).unwrap();
    assert!(matches!(s.workload.arrivals, Arrivals::Trace(_)));
}

#[test]
fn a_trace_with_measured_latencies_gives_its_own_summary_and_leaves_failures_out() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.csv");
    // Four requests; the third failed. TPOT is derived where not given.
    std::fs::write(
        &file,
        "arrival_s,prompt_tokens,output_tokens,status,ttft_ms,e2e_ms\n\
         0.0,100,11,finished,10,110\n0.5,100,11,finished,20,220\n1.0,100,11,rejected_kv_capacity,,\n\
         1.5,100,21,finished,30,330\n",
    )
    .unwrap();
    let runs = load(&source("scenarios/base.yml"), &file, &LoadOptions::default()).unwrap().runs;
    let r = &runs[0];
    assert_eq!(r.base.trace.as_ref().unwrap().len(), 3);
    assert_eq!(r.not_fitted, Some(NotFitted::Saturated("1 requests failed".into())));
    assert_eq!(r.measured[&metric(Family::Ttft, Stat::Mean)], 20.0);
    assert_eq!(r.measured[&metric(Family::Ttft, Stat::P90)], 28.0); // 20 + 0.8 * (30 - 20)
    assert_eq!(r.measured[&metric(Family::E2e, Stat::Max)], 330.0);
    // TPOT (e2e - ttft) / (out - 1): 10, 20, 15.
    assert_eq!(r.measured[&metric(Family::Tpot, Stat::Mean)], 15.0);
    // Three requests from 0 s to the last token at 1.5 + 0.33 s.
    assert!((r.measured[&Metric::RequestsPerS] - 3.0 / 1.83).abs() < 1e-12);
}

#[test]
fn a_trace_without_latencies_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(&file, "arrival_s,prompt_tokens,output_tokens\n0,10,10\n").unwrap();
    let e = load(&source("scenarios/base.yml"), &file, &LoadOptions::default()).unwrap_err();
    assert!(e.message.contains("nothing to fit against"), "{e}");
}

#[test]
fn files_of_unknown_shape_name_the_known_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.csv");
    std::fs::write(&file, "a,b\n1,2\n").unwrap();
    let e = load(&source("scenarios/base.yml"), &file, &LoadOptions::default()).unwrap_err();
    assert!(e.message.contains("unknown shape") && e.message.contains("inference-perf run directory"), "{e}");
    let e = load(&source("scenarios/base.yml"), dir.path(), &LoadOptions::default()).unwrap_err();
    assert!(e.message.contains("a directory of an unknown shape"), "{e}");
    let e = load(
        &source("scenarios/base.yml"),
        &repo("tests/integration/fixtures/aiperf-profile_export_aiperf.json"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert!(e.message.contains("no per-request data") && e.message.contains("profile_export.jsonl"), "{e}");
}

#[test]
fn aiperf_records_are_a_run_replayed_request_by_request() {
    let src = source("scenarios/deployments/llama-3.1-8b-h100.yml");
    let runs = load(&src, &repo("tests/integration/fixtures/aiperf-profile_export.jsonl"), &LoadOptions::default())
        .unwrap()
        .runs;
    let r = &runs[0];
    assert_eq!((runs.len(), r.kind), (1, InputKind::PerRequest(Tool::Aiperf)));
    assert_eq!(r.base.trace.as_ref().unwrap().len(), 3);
    // The mean of the three records' TTFTs, worked outside llmsim.
    assert!((r.measured[&metric(Family::Ttft, Stat::Mean)] - 83.71534366666667).abs() < 1e-9);
    assert_eq!(r.not_fitted, None);
}

#[test]
fn a_table_row_is_a_run_with_its_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(
        &file,
        "# a published table\nrun,group,workload.arrivals.poisson.rate,workload.duration_s,ttft_mean_ms,e2e_mean_ms\n\
         low,a,2,600,20,400\nhigh,a,10,600,40,700\n",
    )
    .unwrap();
    let opts = LoadOptions { sample_s: Some(60.0), ..LoadOptions::default() };
    let runs = load(&source("scenarios/base.yml"), &file, &opts).unwrap().runs;
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[1].name.as_str(), runs[1].group.as_str()), ("high", "a"));
    let s = runs[1].base.scenario(&[], &[]).unwrap();
    assert!(matches!(s.workload.arrivals, Arrivals::Poisson { rate } if rate == 10.0));
    assert_eq!(s.workload.duration_s, Some(60.0), "sampled");
    assert!(runs[1].notes[0].contains("60 s of the 600 s run"), "{:?}", runs[1].notes);
    assert_eq!(runs[0].measured[&metric(Family::E2e, Stat::Mean)], 400.0);
}

#[test]
fn a_table_setting_the_scenario_cannot_take_names_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(&file, "run,scheduler.max_batch_tokens,ttft_mean_ms\nr1,0,20\n").unwrap();
    let e = load(&source("scenarios/base.yml"), &file, &LoadOptions::default()).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("scheduler.max_batch_tokens") && text.contains("for measured run r1"), "{text}");
}

fn inference_perf_dir(root: &Path) {
    let results = root.join("results");
    std::fs::create_dir_all(&results).unwrap();
    std::fs::write(
        results.join("config.yaml"),
        "api: {type: completion, streaming: true}\n\
         data: {type: shared_prefix, shared_prefix: {num_groups: 10, num_prompts_per_group: 10, system_prompt_len: 100, question_len: 466, output_len: 247}}\n\
         load: {type: constant, stages: [{rate: 5, duration: 600}, {rate: 10, duration: 600}]}\n\
         server: {type: vllm, ignore_eos: true}\n",
    )
    .unwrap();
    for (i, (ttft, e2e, failures)) in [(0.025, 1.81, 0), (0.030, 2.2, 7)].iter().enumerate() {
        let lat = |x: f64| format!(r#"{{"mean": {x}, "median": {x}, "p90": {x}, "p99": {x}, "max": {x}}}"#);
        std::fs::write(
            results.join(format!("stage_{i}_lifecycle_metrics.json")),
            format!(
                r#"{{"load_summary": {{"achieved_rate": 5.0}}, "successes": {{"count": 3000,
                    "latency": {{"time_to_first_token": {}, "request_latency": {}, "time_per_output_token": {}}},
                    "throughput": {{"requests_per_sec": 4.99}}, "prompt_len": {{"mean": 591.63}}}},
                    "failures": {{"count": {failures}}}}}"#,
                lat(*ttft),
                lat(*e2e),
                lat(0.0036)
            ),
        )
        .unwrap();
    }
}

#[test]
fn an_inference_perf_stage_is_a_constant_rate_run_with_nominal_output_and_derived_tpot() {
    let dir = tempfile::tempdir().unwrap();
    inference_perf_dir(dir.path());
    let src = source("scenarios/deployments/llama-3.1-8b-h100.yml");
    let runs = load(&src, dir.path(), &LoadOptions { sample_s: Some(30.0), ..LoadOptions::default() }).unwrap().runs;
    assert_eq!(runs.len(), 2);
    let r = &runs[0];
    assert!(r.name.ends_with("stage 0 (5 req/s)"), "{}", r.name);
    assert_eq!(r.group, runs[1].group);
    let s = r.base.scenario(&[], &[]).unwrap();
    assert!(matches!(s.workload.arrivals, Arrivals::Constant { rate } if rate == 5.0));
    assert_eq!(s.workload.duration_s, Some(30.0));
    // 10 x 10 fixed prompts of 100 + 466 tokens; the client counted 591.63
    // on average, so 592 - 566 = 26 template tokens are the rest.
    let sp = s.workload.shared_prefix.as_ref().expect("shared prefix");
    assert_eq!((sp.groups, sp.tokens), (100, 566));
    assert_eq!(s.workload.prompt_tokens, Some(llmsim_scenario::config::Length::Fixed(26)));
    assert_eq!(s.workload.output_tokens, Some(llmsim_scenario::config::Length::Fixed(247)));
    assert_eq!(s.workload.seed, load_scenario(&src.file).unwrap().workload.seed, "the scenario's seed stays");
    // (1810 - 25) / 246, not the tool's chunk-based 3.6 ms.
    let tpot = r.measured[&metric(Family::Tpot, Stat::Mean)];
    assert!((tpot - 1785.0 / 246.0).abs() < 1e-9, "{tpot}");
    assert_eq!(r.not_fitted, None);
    assert_eq!(runs[1].not_fitted, Some(NotFitted::Saturated("7 of 3007 requests failed".into())));
}

#[test]
fn a_queue_growing_through_the_run_is_saturation_and_a_steady_one_is_not() {
    let steady: Vec<(f64, f64)> = (0..100).map(|i| (f64::from(i), 40.0 + f64::from(i % 7))).collect();
    assert_eq!(growing_queue(steady), None);
    let growing: Vec<(f64, f64)> = (0..100).map(|i| (f64::from(i), 20.0 + 30.0 * f64::from(i))).collect();
    let why = growing_queue(growing).unwrap();
    assert!(why.contains("still growing") && why.contains("last fifth"), "{why}");
    // A short warm-up (the first fifth fast) is not growth.
    let warm: Vec<(f64, f64)> = (0..100).map(|i| (f64::from(i), if i < 20 { 5.0 } else { 60.0 })).collect();
    assert_eq!(growing_queue(warm), None);
    // Small absolute growth is not saturation.
    let small: Vec<(f64, f64)> = (0..100).map(|i| (f64::from(i), 1.0 + 0.5 * f64::from(i))).collect();
    assert_eq!(growing_queue(small), None);
}
