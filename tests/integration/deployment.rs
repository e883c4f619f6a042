//! Integration tests: deployments (docs/deployments.md) through
//! the CLI: every bad input exits 2 naming the key, the file and what is
//! allowed; run, explain and capacity show the deployment; the request
//! overhead shifts every latency by exactly itself.

use serde_json::Value;

use crate::support::*;

const WORKLOAD: &str =
    "workload: {arrivals: {poisson: {rate: 1}}, requests: 5, prompt_tokens: 100, output_tokens: 10}\n";

/// A scenario file (and any other files) in a fresh directory.
fn scenario(text: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempdir();
    for (name, body) in files {
        write(dir.path(), name, body);
    }
    let path = write(dir.path(), "deploy.yml", &format!("{text}\n{WORKLOAD}"));
    (dir, path)
}

fn refused(text: &str, files: &[(&str, &str)], fragments: &[&str]) {
    let (_dir, path) = scenario(text, files);
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(fragments);
}

fn run_json(path: &str, sets: &[&str]) -> Value {
    let mut cmd = TestCommand::new(&["run", path, "--json", "-"]);
    for s in sets {
        cmd = cmd.arg("--set").arg(s);
    }
    serde_json::from_str(&cmd.ok().stdout()).expect("result JSON")
}

/// Mixtral 8x7B's config.json, the fields llmsim reads.
const MIXTRAL: &str = r#"{"hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
 "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
 "num_local_experts": 8, "sliding_window": null, "tie_word_embeddings": false, "vocab_size": 32000}"#;

const HF: &str = "hardware: h100-80gb\nmodel: {hf_config: config.json}\nparallelism: {tensor: 2}";

#[test]
fn a_tensor_degree_that_does_not_divide_the_heads_exits_2() {
    refused(
        "hardware: h100-80gb\nmodel: llama-3.1-70b\nparallelism: {tensor: 6}",
        &[],
        &["deploy.yml", "parallelism.tensor: 6 does not divide the 64 attention heads", "allowed: 1, 2, 4, 8"],
    );
}

#[test]
fn tensor_parallelism_without_an_interconnect_exits_2() {
    refused(
        "hardware: l40s\nmodel: llama-3.1-8b\nparallelism: {tensor: 2}",
        &[],
        &["deploy.yml", "hardware.interconnect: missing", "hardware `l40s` gives none", "bandwidth_gbps"],
    );
}

#[test]
fn tensor_parallelism_without_an_architecture_exits_2() {
    refused(
        "hardware: h100-80gb\nmodel: {context_length: 4096, weights: {parameters_billions: 7}, \
         kv_cache: {bytes_per_token: 524288}}\nparallelism: {tensor: 2}",
        &[],
        &["deploy.yml", "parallelism.tensor: 2 needs a model architecture"],
    );
}

#[test]
fn an_hf_config_missing_a_field_exits_2_naming_the_field_and_the_file() {
    let config = MIXTRAL.replace(r#""vocab_size": 32000"#, r#""n_layer": 1"#);
    refused(HF, &[("config.json", &config)], &["config.json: vocab_size: missing"]);
}

#[test]
fn an_hf_config_of_an_unsupported_shape_exits_2() {
    let windowed = MIXTRAL.replace(r#""sliding_window": null"#, r#""sliding_window": 4096"#);
    refused(
        HF,
        &[("config.json", &windowed)],
        &["config.json: sliding_window", "this config's pattern is not described", "kv_cache.bytes_per_token"],
    );
    let latent = MIXTRAL.replace(r#""vocab_size""#, r#""kv_lora_rank": 512, "vocab_size""#);
    // Latent attention is read now; one missing head width is named.
    refused(
        HF,
        &[("config.json", &latent)],
        &["config.json: qk_nope_head_dim: missing", "multi-head latent attention"],
    );
}

#[test]
fn more_experts_a_token_than_experts_exits_2() {
    let config = MIXTRAL.replace(r#""num_experts_per_tok": 2"#, r#""num_experts_per_tok": 12"#);
    refused(HF, &[("config.json", &config)], &["config.json: num_experts_per_tok: 12 is not allowed", "8 experts"]);
    refused(
        "hardware: h100-80gb\nmodel: {context_length: 64, architecture: {layers: 2, hidden_size: 64, attention_heads: 4, \
         vocab_size: 10, experts: 2, experts_per_token: 3, expert_intermediate_size: 8}}",
        &[],
        &["model.architecture.experts_per_token: 3 is not allowed"],
    );
}

#[test]
fn a_config_json_that_is_not_json_exits_2() {
    refused(HF, &[("config.json", "num_hidden_layers: 32\n")], &["config.json: not a JSON file"]);
}

#[test]
fn weights_larger_than_the_gpus_exit_2_saying_by_how_much_and_which_tp_fits() {
    refused(
        "hardware: h100-80gb\nmodel: llama-3.1-70b",
        &[],
        &["model.weights: the model does not fit", "141.11 GB", "short by 63.80 GB", "parallelism.tensor: 2 fits"],
    );
}

#[test]
fn pipeline_parallelism_past_the_layers_exits_2() {
    refused(
        "hardware: h100-80gb\nmodel: llama-3.1-8b\nparallelism: {pipeline: 40}",
        &[],
        &["parallelism.pipeline: 40 is more stages than the 32 layers", "allowed: 1 to 32"],
    );
}

#[test]
fn a_bad_set_on_a_deployment_key_exits_2() {
    TestCommand::new(&["run", "scenarios/deployments/llama-3.1-70b-tp4-h100.yml", "--set", "parallelism.tensr=2"])
        .fails_with(2)
        .stderr_has(&["parallelism.tensr", "did you mean `parallelism.tensor`"]);
    TestCommand::new(&["run", "scenarios/deployments/llama-3.1-8b-h100.yml", "--set", "model.kv_cache.dtype=fp4"])
        .fails_with(2)
        .stderr_has(&["model.kv_cache.dtype", "`fp4` is not one of"]);
}

#[test]
fn the_result_json_describes_the_deployment_only_when_there_is_one() {
    let v = run_json("scenarios/deployments/llama-3.1-70b-tp4-h100.yml", &["workload.requests=20"]);
    let d = &v["deployment"];
    assert_eq!(d["gpus"], 4);
    assert_eq!(d["tensor_parallel"], 4);
    assert_eq!(d["parameters"], 70_553_706_496u64);
    assert_eq!(d["active_parameters"], 70_553_706_496u64);
    // 2 * 80 layers * (8 / 4) KV heads * 128 * 2 bytes
    assert_eq!(d["kv_bytes_per_token_per_gpu"], 81_920);
    // (77,309,411,328 - 35,276,853,248) / (81,920 * 16)
    assert_eq!(v["capacity"]["num_blocks"], 32_068);
    let mixtral = run_json("scenarios/deployments/mixtral-8x7b-tp2-h100.yml", &["workload.requests=20"]);
    assert_eq!(mixtral["deployment"]["active_parameters"], 12_879_925_248u64);
    // fp8 KV over 2 GPUs: 2 * 32 * 4 * 128 * 1
    assert_eq!(mixtral["deployment"]["kv_bytes_per_token_per_gpu"], 32_768);
    let base = run_json("scenarios/base.yml", &["workload.requests=20"]);
    assert!(base.get("deployment").is_none(), "a scenario without deployment keys's JSON gains no key");
}

#[test]
fn the_summary_has_a_deployment_line_and_explain_every_derived_figure() {
    let out =
        TestCommand::new(&["run", "scenarios/deployments/llama-3.1-70b-tp4-h100.yml", "--set", "workload.requests=20"])
            .ok()
            .stdout();
    assert!(
        out.contains("deployment llama-3.1-70b, bf16 weights, 16-bit KV, 4 x h100-80gb (TP 4): 35.28 GB of weights"),
        "{out}"
    );
    assert!(out.contains("per layer 75 us"), "{out}");
    let explain = TestCommand::new(&["explain", "scenarios/deployments/llama-3.1-70b-tp4-h100.yml"]).ok().stdout();
    for want in [
        "#   architecture  model `llama-3.1-70b`",
        "#   parameters    70,553,706,496 = 80 layers x 855,638,016",
        "#   active        70,553,706,496 a token (dense",
        "35.277 GB a GPU over TP 4",
        "327,680 bytes = 2 x 80 layers x 8 KV heads x 128 x 2 bytes",
        "81,920 a GPU (2 of 8 KV heads)",
        "#   compute peak  4 x 989 TFLOPS",
        "#   interconnect  12.9 us",
        "#   decode floor  batch 1 at context 0",
        "batch 128 (max_num_sequences)",
        "#   full prefill  one prompt of 2048 tokens",
        "#   comm ",
        "80 layers x 75 us = 6.000 ms a step",
    ] {
        assert!(explain.contains(want), "explain lacks {want:?}:\n{explain}");
    }
    // the base scenario's explain output has none of it
    let base = TestCommand::new(&["explain", "scenarios/base.yml"]).ok().stdout();
    assert!(!base.contains("parallelism") && !base.contains("architecture") && !base.contains("interconnect"));
}

/// DeepSeek-V3 FP8 on two nodes of 8 H200 (TP 8 x PP 2): explain says
/// how the layers split, what a GPU holds, and where a step's time goes,
/// hand-offs and bubble included. Figures worked by hand: 671,026,404,352
/// x 31/61 / 8 = 42.627 GB; 61 x 576 bytes of FP8 latent x 31/61 = 17,856;
/// a hand-off between nodes 10 us + 2 x 7,168 x 2 / 8 = 3,584 bytes a token
/// at 50 GB/s = 71.68 ns, so 8,192 tokens take 0.597 ms.
#[test]
fn a_pipeline_deployment_explains_its_stages_hand_offs_and_bubble() {
    let path = "scenarios/deployments/deepseek-v3-pp2-tp8-h200.yml";
    let explain = TestCommand::new(&["explain", path]).ok().stdout();
    for want in [
        "42.627 GB a GPU: over TP 8 in the largest of 2 pipeline stages (31 of the 61 layers; 16 GPUs)",
        "a GPU of the largest pipeline stage holds 31 of the 61 layers' share: 17,856 bytes",
        "#   pipeline      2 stages of at most 31 of the 61 layers",
        "decode of 256: 2 micro-batches, the busiest 128 tokens",
        "prefill of 8192: 1 micro-batch, the busiest 8192 tokens",
        "+ hand-offs 0.597 ms",
        "pipeline bubble",
        // docs/deployments.md: DeepSeek-V3's MTP module, apart from the weights
        "13,463,426,048 parameters in 1 multi-token-prediction module (mtp_layers;",
        "not in the weights below",
    ] {
        assert!(explain.contains(want), "explain lacks {want:?}:\n{explain}");
    }
    let out = TestCommand::new(&["run", path, "--set", "workload.requests=64"]).ok().stdout();
    assert!(out.contains("16 x h200 (TP 8 x PP 2): 42.63 GB of weights and 17,856 bytes"), "{out}");
    assert!(out.contains("hand-off 10.0 us + 71.68 ns a token"), "{out}");
}

#[test]
fn explain_says_which_input_won_an_override() {
    let explain = TestCommand::new(&["explain", "scenarios/deployments/llama-3.1-8b-h100.yml"])
        .arg("--set")
        .arg("model.weights.parameters_billions=9")
        .arg("--set")
        .arg("model.kv_cache.bytes_per_token=100000")
        .ok()
        .stdout();
    assert!(explain.contains(
        "9,000,000,000 (model.weights.parameters_billions, which wins over the architecture's 8,030,261,248"
    ));
    assert!(
        explain.contains("100,000 bytes (model.kv_cache.bytes_per_token, which wins over the architecture's 131,072")
    );
}

/// One 512-token request on the base model, with `sets` on top: its
/// prefill step (compute-bound, 2 * 6.74e9 * 512 / 989e12 = 6.978 ms)
/// releases its only token.
fn lone_request(sets: &[&str]) -> Value {
    let dir = tempdir();
    let trace = write(dir.path(), "one.csv", "arrival_s,prompt_tokens,output_tokens\n0.5,512,1\n");
    let arrivals = format!("workload.arrivals={{trace: {}}}", trace.display());
    let mut all = vec![arrivals.as_str(), "workload.prompt_tokens=null", "workload.output_tokens=null"];
    all.push("workload.requests=null");
    all.extend_from_slice(sets);
    run_json("scenarios/base.yml", &all)
}

#[test]
fn the_request_overhead_delays_the_engine_and_counts_in_every_latency() {
    let plain = lone_request(&[]);
    let delayed = lone_request(&["latency.request_overhead_ms=5"]);
    let ms = |v: &Value, k: &str| v[k]["mean"].as_f64().unwrap();
    // 2 * 6.74e9 * 512 / 989e12 s = 6,978,523.8 ns, rounded
    assert!((ms(&plain, "ttft_ms") - 6.978_524).abs() < 1e-9, "{}", ms(&plain, "ttft_ms"));
    assert_eq!(ms(&plain, "queue_ms"), 0.0);
    for k in ["ttft_ms", "e2e_ms", "queue_ms"] {
        assert!((ms(&delayed, k) - ms(&plain, k) - 5.0).abs() < 1e-9, "{k}");
    }
    // the step itself is unchanged
    assert_eq!(delayed["steps"]["duration_ms"], plain["steps"]["duration_ms"]);
}

#[test]
fn the_per_sequence_overhead_adds_to_every_step_per_request() {
    let plain = lone_request(&[]);
    let v = lone_request(&["latency.per_sequence_overhead_us=250"]);
    let step = |v: &Value| v["steps"]["duration_ms"]["mean"].as_f64().unwrap();
    // one request in the step: + 250 us
    assert!((step(&v) - step(&plain) - 0.25).abs() < 1e-9, "{} {}", step(&v), step(&plain));
}

#[test]
fn capacity_prices_a_replica_at_its_gpu_count() {
    let dir = tempdir();
    let out = dir.path().join("cap.json");
    let set = "hardware={name: h100, hbm_gib: 80, memory_bandwidth_gbps: 3350, peak_tflops: 989, cost_per_hour: 3, \
               interconnect: {bandwidth_gbps: 300, latency_us: 10}}";
    TestCommand::new(&["capacity", "scenarios/deployments/llama-3.1-70b-tp4-h100.yml", "--slo", "ttft_p50_ms=2000"])
        .args_list(&["--set", set, "--requests", "300", "--target-rate", "20", "--json"])
        .arg(&out)
        .ok();
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(r["gpus_per_replica"], 4);
    assert_eq!(r["cost_per_hour"], 12.0);
    let replicas = r["replicas"].as_f64().unwrap();
    assert_eq!(r["fleet_cost_per_hour"].as_f64().unwrap(), 12.0 * replicas);
    let base = dir.path().join("base.json");
    TestCommand::new(&["capacity", "scenarios/base.yml", "--slo", "ttft_p50_ms=100", "--requests", "300", "--json"])
        .arg(&base)
        .ok();
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    assert!(b.get("gpus_per_replica").is_none());
}

trait ArgsList {
    fn args_list(self, args: &[&str]) -> Self;
}

impl ArgsList for TestCommand {
    fn args_list(mut self, args: &[&str]) -> Self {
        for a in args {
            self = self.arg(a);
        }
        self
    }
}

#[test]
fn every_shipped_deployment_runs_the_same_at_any_thread_count() {
    for s in ["scenarios/deployments/llama-3.1-70b-tp4-h100.yml", "scenarios/deployments/mixtral-8x7b-tp2-h100.yml"] {
        let a = TestCommand::new(&["run", s, "--json", "-"]).env("RAYON_NUM_THREADS", "1").ok().stdout();
        let b = TestCommand::new(&["run", s, "--json", "-"]).env("RAYON_NUM_THREADS", "2").ok().stdout();
        assert_eq!(a, b, "{s}");
    }
}
