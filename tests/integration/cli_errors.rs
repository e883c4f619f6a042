//! Integration tests: every bad input exits 2 with a message naming the
//! file, the key path (or CSV line), the value and what is allowed, and
//! never panics.

use crate::support::*;

const BASE: &str = "scenarios/base.yml";

/// Runs `llmsim run` on the base scenario with overrides; expects exit 2.
fn bad_set(sets: &[&str], fragments: &[&str]) {
    let mut cmd = TestCommand::new(&["run", BASE]);
    for s in sets {
        cmd = cmd.arg("--set").arg(s);
    }
    cmd.fails_with(2).stderr_has(fragments);
}

/// The base scenario with one textual edit, written to a temp file.
fn edited(from: &str, to: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let text = std::fs::read_to_string(repo(BASE)).expect("base");
    assert!(text.contains(from), "{from}");
    let dir = tempdir();
    let path = write(dir.path(), "edited.yml", &text.replace(from, to));
    (dir, path)
}

#[test]
fn a_missing_scenario_file_is_named() {
    TestCommand::new(&["run", "no/such/scenario.yml"]).fails_with(2).stderr_has(&[
        "no/such/scenario.yml",
        "cannot read the file",
        "no such file",
    ]);
}

#[test]
fn a_yaml_syntax_error_names_the_file_and_line() {
    let dir = tempdir();
    let path = write(dir.path(), "broken.yml", "name: x\nmodel:\n  context_length: 4096\n\tweights: {}\n");
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&["broken.yml:4", "YAML syntax error", "tab"]);
}

#[test]
fn an_unknown_key_names_its_path_and_the_allowed_keys() {
    let (_d, path) = edited("max_batch_tokens: 8192", "max_batch_token: 8192");
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&[
        "edited.yml:22",
        "scheduler.max_batch_token",
        "unknown field `max_batch_token`",
        "`max_batch_tokens`",
    ]);
}

#[test]
fn a_wrong_type_names_the_path_the_value_and_the_type() {
    let (_d, path) = edited("max_batch_tokens: 8192", "max_batch_tokens: lots");
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&[
        "edited.yml:22",
        "scheduler.max_batch_tokens",
        "\"lots\"",
        "expected a whole number",
    ]);
}

#[test]
fn zero_or_negative_rates_are_refused() {
    bad_set(
        &["workload.arrivals.poisson.rate=0"],
        &["base.yml", "workload.arrivals.poisson.rate", "0 is not allowed", "must be in [1e-6, 1,000,000,000]"],
    );
    bad_set(&["workload.arrivals={gamma: {rate: -2, burstiness: 1}}"], &["workload.arrivals.gamma.rate", "-2"]);
    bad_set(&["workload.arrivals={gamma: {rate: 2, burstiness: 0}}"], &["workload.arrivals.gamma.burstiness"]);
    bad_set(&["workload.arrivals={constant: {rate: -1}}"], &["workload.arrivals.constant.rate", "-1"]);
    bad_set(
        &["workload.arrivals={closed: {concurrency: 0}}"],
        &["workload.arrivals.closed.concurrency", "0 is not allowed"],
    );
}

#[test]
fn zero_or_negative_sizes_and_speeds_are_refused() {
    bad_set(&["model.kv_cache.block_size=0"], &["model.kv_cache.block_size", "0 is not allowed", "from 1"]);
    bad_set(&["hardware.memory_bandwidth_gbps=0"], &["hardware.memory_bandwidth_gbps", "must be in [1, 1,000,000]"]);
    bad_set(&["hardware.peak_tflops=-989"], &["hardware.peak_tflops", "-989"]);
    bad_set(&["workload.requests=0"], &["workload.requests", "0 is not allowed"]);
    bad_set(&["workload.requests=-5"], &["workload.requests", "-5"]);
    bad_set(&["scheduler.max_num_sequences=0"], &["scheduler.max_num_sequences"]);
    bad_set(&["model.kv_cache.bytes_per_token=0"], &["model.kv_cache.bytes_per_token"]);
    bad_set(&["workload.prompt_tokens=0"], &["workload.prompt_tokens", "0 is not allowed"]);
    bad_set(&["workload.output_tokens={uniform: [10, 5]}"], &["workload.output_tokens.uniform", "[10, 5]"]);
}

#[test]
fn efficiency_must_be_a_share_of_the_peak() {
    bad_set(&["efficiency.compute=1.5"], &["efficiency.compute", "1.5", "[0.001, 1]"]);
    bad_set(&["efficiency.memory=0"], &["efficiency.memory", "[0.001, 1]"]);
}

#[test]
fn watermark_must_be_below_one() {
    bad_set(&["model.kv_cache.watermark=1"], &["model.kv_cache.watermark", "[0, 1)"]);
    bad_set(&["model.kv_cache.watermark=-0.1"], &["model.kv_cache.watermark", "-0.1"]);
}

#[test]
fn weights_larger_than_memory_say_by_how_much() {
    bad_set(
        &["model.weights.parameters_billions=70"],
        &["model.weights", "does not fit", "140.00 GB", "77.31 GB", "short by 62.70 GB"],
    );
}

#[test]
fn an_unknown_hardware_name_lists_the_known_ones() {
    bad_set(
        &["hardware=h100-80g"],
        &["unknown hardware profile `h100-80g`", "did you mean `h100-80gb`", "a100-40gb", "rtx-4090"],
    );
}

#[test]
fn every_shipped_hardware_profile_loads() {
    let mut names: Vec<String> = std::fs::read_dir(repo("hardware"))
        .expect("hardware/")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".yml").map(str::to_string))
        .collect();
    names.sort();
    assert!(names.len() >= 16, "{names:?}");
    for name in &names {
        let set = format!("hardware={name}");
        let out = TestCommand::new(&["explain", BASE, "--set", &set]).ok().stdout();
        assert!(out.contains(&format!("name: {name}")), "{out}");
        let profile = std::fs::read_to_string(repo(&format!("hardware/{name}.yml"))).expect("profile");
        assert!(profile.contains("datasheet") || profile.contains("whitepaper"), "{name} names no source");
    }
}

/// Runs the base scenario on a trace file with the given text.
fn bad_trace(text: &str, fragments: &[&str]) {
    let dir = tempdir();
    let trace = write(dir.path(), "bad.csv", text);
    let set = format!("workload.arrivals={{trace: {}}}", trace.display());
    bad_set(&[&set, "workload.prompt_tokens=null", "workload.output_tokens=null"], fragments);
}

#[test]
fn a_trace_with_a_missing_column_is_refused() {
    bad_trace("arrival_s,prompt_tokens\n0,5\n", &["bad.csv", "line 1", "missing column `output_tokens`"]);
}

#[test]
fn a_trace_with_a_non_number_names_the_line_and_column() {
    bad_trace(
        "arrival_s,prompt_tokens,output_tokens\n0,5,5\n0.5,five,5\n",
        &["bad.csv", "line 3, column prompt_tokens", "`five`"],
    );
    bad_trace("arrival_s,prompt_tokens,output_tokens\nsoon,5,5\n", &["line 2, column arrival_s", "`soon`"]);
}

#[test]
fn a_trace_with_negative_or_decreasing_arrivals_is_refused() {
    bad_trace("arrival_s,prompt_tokens,output_tokens\n-0.5,5,5\n", &["line 2, column arrival_s", "-0.5", ">= 0"]);
    bad_trace(
        "arrival_s,prompt_tokens,output_tokens\n1,5,5\n0.5,5,5\n",
        &["line 3, column arrival_s", "must not decrease"],
    );
}

#[test]
fn an_empty_trace_is_refused() {
    bad_trace("arrival_s,prompt_tokens,output_tokens\n", &["bad.csv", "no requests"]);
}

#[test]
fn a_missing_trace_file_is_named() {
    bad_set(
        &["workload.arrivals={trace: no-such-trace.csv}", "workload.prompt_tokens=null", "workload.output_tokens=null"],
        &["no-such-trace.csv", "no such file"],
    );
}

#[test]
fn a_workload_that_never_ends_is_refused() {
    bad_set(&["workload.requests=null"], &["workload", "never ends"]);
}

#[test]
fn an_engine_llmsim_does_not_model_is_named_with_the_ones_it_does() {
    bad_set(&["engine=tgi"], &["base.yml", "engine", "unknown engine `tgi`", "vllm, trtllm, sglang"]);
    // SGLang's ratio is its key alone, and in range.
    bad_set(&["scheduler.new_token_ratio=0.7"], &["scheduler.new_token_ratio", "needs engine: sglang"]);
    bad_set(&["engine=sglang", "scheduler.new_token_ratio=0"], &["scheduler.new_token_ratio", "0 is not allowed"]);
    // and so are its mixed chunks and prefill cap
    bad_set(&["scheduler.mixed_chunk=true"], &["scheduler.mixed_chunk", "needs engine: sglang"]);
    bad_set(&["scheduler.max_prefill_tokens=2500"], &["scheduler.max_prefill_tokens", "needs engine: sglang"]);
    bad_set(&["engine=sglang", "scheduler.max_prefill_tokens=0"], &["scheduler.max_prefill_tokens", "0"]);
    bad_set(&["engine=sglang", "scheduler.mixed_chunk=maybe"], &["scheduler.mixed_chunk"]);
    let out = TestCommand::new(&["explain", BASE, "--set", "engine=sglang", "--set", "scheduler.mixed_chunk=true"])
        .ok()
        .stdout();
    assert!(out.contains("mixed_chunk: true"), "{out}");
    let out =
        TestCommand::new(&["run", BASE, "--set", "engine=sglang", "--set", "workload.requests=100"]).ok().stdout();
    assert!(out.contains("100 completed"), "{out}");
    // trtllm runs, and the effective configuration says so; vLLM's is the default, unsaid
    let out = TestCommand::new(&["explain", BASE, "--set", "engine=trtllm"]).ok().stdout();
    assert!(out.contains("\nengine: trtllm\n"), "{out}");
    let out = TestCommand::new(&["explain", BASE]).ok().stdout();
    assert!(!out.contains("engine:"), "{out}");
}

#[test]
fn tensorrt_llm_policies_are_its_keys_alone_and_named_when_wrong() {
    let capacity = "scheduler.capacity_scheduler_policy";
    let chunking = "scheduler.context_chunking_policy";
    bad_set(&[&format!("{capacity}=MAX_UTILIZATION")], &[capacity, "needs engine: trtllm, not engine: vllm"]);
    bad_set(
        &["engine=sglang", &format!("{chunking}=EQUAL_PROGRESS")],
        &[chunking, "needs engine: trtllm, not engine: sglang"],
    );
    bad_set(
        &["engine=trtllm", &format!("{capacity}=MAX_EVICT")],
        &[
            capacity,
            "`MAX_EVICT` is not a capacity scheduler policy",
            "GUARANTEED_NO_EVICT, MAX_UTILIZATION, STATIC_BATCH",
        ],
    );
    bad_set(
        &["engine=trtllm", &format!("{chunking}=LAST_COME")],
        &[chunking, "`LAST_COME` is not a context chunking policy", "FIRST_COME_FIRST_SERVED, EQUAL_PROGRESS"],
    );
    // A budget under one block of 16 would never give a long prompt a chunk.
    bad_set(
        &["engine=trtllm", &format!("{chunking}=FIRST_COME_FIRST_SERVED"), "scheduler.max_batch_tokens=8"],
        &["scheduler.max_batch_tokens", "8 is less than one KV block (16 tokens)", "at least 16"],
    );
    // Any case is TensorRT-LLM's spelling; the effective configuration shows its.
    let out = TestCommand::new(&[
        "explain",
        BASE,
        "--set",
        "engine=trtllm",
        "--set",
        &format!("{capacity}=max_utilization"),
        "--set",
        &format!("{chunking}=equal_progress"),
    ])
    .ok()
    .stdout();
    assert!(out.contains("capacity_scheduler_policy: MAX_UTILIZATION\n"), "{out}");
    assert!(out.contains("context_chunking_policy: EQUAL_PROGRESS\n"), "{out}");
}

#[test]
fn bad_offload_settings_name_the_key_and_a_good_one_reports_its_loads() {
    let tier = "model.kv_cache.offload={cpu: {gib: 64, bandwidth_gbps: 50}}";
    bad_set(&[tier], &["base.yml", "model.kv_cache.offload", "needs model.kv_cache.prefix_caching: true"]);
    let caching = "model.kv_cache.prefix_caching=true";
    bad_set(
        &[caching, "model.kv_cache.offload={cpu: {gib: 0.001, bandwidth_gbps: 50}}"],
        &["model.kv_cache.offload.cpu.gib", "0.001 is smaller than one KV block (8,388,608 bytes"],
    );
    bad_set(
        &[caching, "model.kv_cache.offload={cpu: {gib: 64}}"],
        &["model.kv_cache.offload.cpu.bandwidth_gbps", "missing"],
    );
    bad_set(&[caching, "model.kv_cache.offload={}"], &["model.kv_cache.offload", "empty"]);
    bad_set(
        &[caching, "model.kv_cache.offload={cpu: {gib: -1, bandwidth_gbps: 5}}"],
        &["offload.cpu.gib", "-1 is not allowed"],
    );
    bad_set(
        &[caching, "model.kv_cache.offload={cpu: {gib: 1, bandwidth_gbps: 0}}"],
        &["offload.cpu.bandwidth_gbps", "0 is not allowed"],
    );
    bad_set(
        &[caching, "model.kv_cache.offload={tape: {gib: 1, bandwidth_gbps: 1}}"],
        &["model.kv_cache.offload", "tape"],
    );
    bad_set(&[caching, tier, "engine=trtllm"], &["model.kv_cache.offload", "engine: trtllm"]);
    // A good one runs and says what it loaded.
    let out = TestCommand::new(&["run", BASE, "--set", "workload.requests=100", "--set", caching, "--set", tier])
        .ok()
        .stdout();
    assert!(out.contains("offload    cpu: ") && out.contains("% of prompt tokens loaded"), "{out}");
}

#[test]
fn bad_lora_settings_name_the_key_and_a_good_one_reports_its_copies() {
    let model = "model=llama-3.1-8b";
    let lora = |x: &str| format!("lora={x}");
    bad_set(&[&lora("{count: 4}")], &["base.yml", "lora", "needs the model's architecture"]);
    bad_set(&[model, &lora("{count: 4, rank: 0}")], &["lora.rank", "0 is not allowed"]);
    bad_set(&[model, &lora("{count: 4, rank: 32}")], &["lora.rank", "more than lora.max_lora_rank (16)"]);
    bad_set(&[model, &lora("{count: 4, max_lora_rank: 24}")], &["lora.max_lora_rank", "24 is not allowed"]);
    bad_set(&[model, &lora("{max_loras: 2}")], &["lora.adapters", "missing"]);
    bad_set(&[model, &lora("{count: 2, adapters: [{name: a}]}")], &["lora.count", "not both"]);
    bad_set(&[model, &lora("{adapters: [{name: a}, {name: a}]}")], &["lora.adapters[1].name", "named twice"]);
    bad_set(&[model, &lora("{adapters: [{name: a, weight: 0}]}")], &["lora.adapters[0].weight", "0 is not allowed"]);
    bad_set(&[model, &lora("{count: 4, target_modules: [w1]}")], &["lora.target_modules[0]", "unknown module `w1`"]);
    bad_set(&[model, &lora("{count: 4, max_loras: 0}")], &["lora.max_loras", "0 is not allowed"]);
    bad_set(&[model, &lora("{count: 4, load_bandwidth_gbps: .nan}")], &["lora.load_bandwidth_gbps", "not allowed"]);
    bad_set(&[model, &lora("{count: 4, colour: red}")], &["lora", "colour"]);
    bad_set(&["model=mixtral-8x7b", &lora("{count: 2}")], &["lora", "dense models"]);
    bad_set(&[model, "engine=trtllm", &lora("{count: 2}")], &["lora", "engine: trtllm"]);
    // A good one runs and says what it copied: 4 adapters of rank 16 on
    // Llama-3.1-8B, a slot 16 x 32 layers x 81,920 x 2 bytes.
    let good = lora("{count: 4, max_loras: 2}");
    let out = TestCommand::new(&["run", BASE, "--set", "workload.requests=100", "--set", model, "--set", &good])
        .ok()
        .stdout();
    assert!(out.contains("lora       4 adapters, 2 GPU slots of 83,886,080 bytes: "), "{out}");
}

#[test]
fn bad_priority_settings_name_the_key_and_a_good_one_reports_each_class() {
    let classes = "workload.classes=[{name: chat, priority: 0}, {name: batch, weight: 3, priority: 1}]";
    bad_set(
        &["scheduler.policy=lifo"],
        &["base.yml", "scheduler.policy", "`lifo` is not a scheduling policy", "fcfs, priority"],
    );
    bad_set(&["workload.classes=[]"], &["workload.classes", "0 classes are not allowed"]);
    bad_set(&["workload.classes=[{weight: 2}]"], &["workload.classes[0].name", "missing"]);
    bad_set(&["workload.classes=[{name: a}, {name: a}]"], &["workload.classes[1].name", "`a` is named twice"]);
    bad_set(&["workload.classes=[{name: a, weight: 0}]"], &["workload.classes[0].weight", "0 is not allowed"]);
    bad_set(&["workload.classes=[{name: a, weight: .nan}]"], &["workload.classes[0].weight", "not allowed"]);
    bad_set(&["workload.classes=[{name: a, priority: 3000000000}]"], &["workload.classes[0].priority", "3000000000"]);
    bad_set(&["workload.classes=[{name: a, urgency: 1}]"], &["workload.classes", "urgency"]);
    bad_set(&["scheduler.policy=priority", "engine=trtllm", classes], &["scheduler.policy", "engine: trtllm"]);
    // A trace naming a class that is not in the mix.
    let dir = tempdir();
    let trace = write(dir.path(), "t.csv", "arrival_s,prompt_tokens,output_tokens,class\n0,10,5,chat\n0.1,10,5,bulk\n");
    let text = std::fs::read_to_string(repo(BASE)).expect("base").replace(
        "  arrivals:\n    poisson: { rate: 20 }\n  requests: 2000\n  prompt_tokens: 512\n  output_tokens: 64",
        &format!("  arrivals: {{trace: {}}}\n  classes: [{{name: chat}}, {{name: batch}}]", trace.display()),
    );
    let path = write(dir.path(), "traced.yml", &text);
    TestCommand::new(&["run", path.to_str().unwrap()]).fails_with(2).stderr_has(&[
        "workload.arrivals.trace",
        "row 2 names class `bulk`, which is not in workload.classes (chat, batch)",
    ]);
    // A good one runs and reports each class.
    let out = TestCommand::new(&[
        "run",
        BASE,
        "--set",
        "workload.requests=200",
        "--set",
        "scheduler.policy=priority",
        "--set",
        classes,
    ])
    .ok()
    .stdout();
    assert!(
        out.contains("priority scheduling") && out.contains("classes chat 25% priority 0, batch 75% priority 1"),
        "{out}"
    );
    assert!(out.contains("  chat ") && out.contains("  batch "), "{out}");
}

#[test]
fn bad_speculative_settings_name_the_key_and_a_good_one_runs() {
    let spec = ["speculative.method=ngram", "speculative.num_speculative_tokens=3"];
    let with = |extra: &str| -> Vec<String> { spec.iter().map(|s| s.to_string()).chain([extra.to_string()]).collect() };
    let bad = |extra: &str, parts: &[&str]| {
        let sets = with(extra);
        bad_set(&sets.iter().map(String::as_str).collect::<Vec<_>>(), parts);
    };
    bad("speculative.acceptance_rate=1.5", &["base.yml", "speculative.acceptance_rate", "1.5 is not allowed"]);
    bad("speculative.acceptance_by_position=[0.5, 0.7, 0.1]", &["acceptance_by_position[1]", "cannot exceed"]);
    bad_set(
        &[spec[0], spec[1], "speculative.acceptance_rate=0.5", "speculative.draft_model=llama-3.2-1b"],
        &["speculative.draft_model", "not allowed with method ngram"],
    );
    bad_set(&["speculative.method=medusa"], &["speculative.method", "unknown method `medusa`"]);
    // A good one runs, says what it drafts, and reports vLLM's counters.
    let sets = with("speculative.acceptance_rate=0.7");
    let mut args = vec!["run", BASE, "--set", "workload.requests=50"];
    for s in &sets {
        args.extend(["--set", s.as_str()]);
    }
    let out = TestCommand::new(&args).ok().stdout();
    assert!(out.contains("speculative ngram, 3 draft tokens a step, acceptance 0.7 a token (2.53 tokens"), "{out}");
    assert!(out.contains("speculative ") && out.contains("draft tokens accepted, mean acceptance length"), "{out}");
}

#[test]
fn an_unknown_arrival_kind_lists_the_kinds() {
    bad_set(
        &["workload.arrivals={poison: {rate: 3}}"],
        &["workload.arrivals", "unknown variant `poison`", "`poisson`", "`closed`"],
    );
}

#[test]
fn a_malformed_set_is_a_usage_error() {
    TestCommand::new(&["run", BASE, "--set", "nonsense"]).fails_with(2).stderr_has(&["--set", "KEY.PATH=VALUE"]);
}

#[test]
fn an_unknown_subcommand_or_flag_is_a_usage_error() {
    TestCommand::new(&["frobnicate"]).fails_with(2);
    TestCommand::new(&["run", BASE, "--no-such-flag"]).fails_with(2);
}

#[test]
fn an_unwritable_output_file_is_a_failure_not_a_usage_error() {
    TestCommand::new(&["run", BASE, "--set", "workload.requests=5", "--json", "/no/such/dir/out.json"])
        .fails_with(1)
        .stderr_has(&["/no/such/dir/out.json", "cannot write"]);
}

#[test]
fn a_bad_rate_curve_names_the_point_or_key_and_what_is_allowed() {
    let curve = |c: &str| format!("workload.arrivals={{curve: {c}}}");
    let p = "workload.arrivals.curve";
    bad_set(
        &[&curve("{points: [[0, 5], [10, 2], [5, 1]]}")],
        &[&format!("{p}.points[2]"), "not after the point before it (10 s)"],
    );
    bad_set(&[&curve("{steps: [[1, 5]]}")], &[&format!("{p}.steps[0]"), "the curve starts at time 0"]);
    bad_set(&[&curve("{points: [[0, -5]]}")], &[&format!("{p}.points[0]"), "rate -5 is not allowed"]);
    bad_set(&[&curve("{points: [[0, 5, 3]]}")], &[&format!("{p}.points[0]"), "each point is [time_s, rate]"]);
    bad_set(&[&curve("{points: [[0, 5]], steps: [[0, 5]]}")], &[p, "give exactly one of points"]);
    bad_set(&[&curve("{points: [[0, 0]]}")], &[p, "is 0 everywhere"]);
    bad_set(
        &[&curve("{daily: {peak: 5, trough: 9, peak_hour: 14}}")],
        &[&format!("{p}.daily.trough"), "above the peak"],
    );
    bad_set(&[&curve("{daily: {peak: 5, trough: 1, peak_hour: 25}}")], &[&format!("{p}.daily.peak_hour"), "[0, 24)"]);
    bad_set(
        &[&curve("{daily: {peak: 5, trough: 1, peak_hour: 14}}"), "workload.requests=100"],
        &["workload.duration_s", "a daily curve needs the run's length"],
    );
    bad_set(
        &[&curve("{points: [[0, 5]], bursts: [{start_s: 10, duration_s: -3, factor: 2}]}")],
        &[&format!("{p}.bursts[0].duration_s"), "-3 is not allowed"],
    );
    bad_set(&[&curve("{points: [[0, 5]], burstiness: 0}")], &[&format!("{p}.burstiness"), "[0.001, 1,000]"]);
    bad_set(
        &[&curve("{points: [[0, 5]]}"), "workload.sessions={turns: 3}"],
        &["workload.sessions", "not modelled with a rate curve"],
    );
    bad_set(
        &[&curve("{points: [[0, 1e9]], bursts: [{start_s: 0, duration_s: 1, factor: 2}]}")],
        &[p, "reaches 2000000000 requests a second"],
    );
    // A good one runs, says what it expects, and `trace` writes its arrivals
    // in time order: 5 a second for 10 s, then 20 for 10 s (250 expected).
    let good = curve("{steps: [[0, 5], [10, 20]]}");
    let with_good = |cmd: &str, extra: &[&str]| {
        let mut args =
            vec![cmd, BASE, "--set", &good, "--set", "workload.requests=null", "--set", "workload.duration_s=20"];
        args.extend_from_slice(extra);
        TestCommand::new(&args).ok().stdout()
    };
    let out = with_good("run", &[]);
    assert!(out.contains("rate curve of 2 steps, peak 20 req/s, about 250 requests expected"), "{out}");
    let dir = tempdir();
    let csv = dir.path().join("t.csv");
    with_good("trace", &["-o", csv.to_str().unwrap()]);
    let text = std::fs::read_to_string(&csv).unwrap();
    let times: Vec<f64> = text.lines().skip(1).map(|l| l.split(',').next().unwrap().parse().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]) && times.iter().all(|&t| t < 20.0), "{text}");
    let early = times.iter().filter(|&&t| t < 10.0).count() as f64;
    let late = times.len() as f64 - early;
    // 50 and 200 expected: within 4 standard deviations.
    assert!((early - 50.0).abs() < 4.0 * 50f64.sqrt() && (late - 200.0).abs() < 4.0 * 200f64.sqrt(), "{early} {late}");
}

#[test]
fn bad_autoscaling_names_the_key_and_what_is_allowed() {
    let a = |extra: &str| format!("cluster={{replicas: 2, autoscale: {{max_replicas: 4, target: 8{extra}}}}}");
    bad_set(
        &["cluster={autoscale: {min_replicas: 5, max_replicas: 3, target: 8}}"],
        &["base.yml", "cluster.autoscale.min_replicas", "5 is above max_replicas (3)"],
    );
    bad_set(&[&a(", target: 0").replace("target: 8, ", "")], &["cluster.autoscale.target", "0 is not allowed"]);
    bad_set(&["cluster={autoscale: {max_replicas: 4}}"], &["cluster.autoscale.target", "missing"]);
    bad_set(&["cluster={autoscale: {target: 4}}"], &["cluster.autoscale.max_replicas", "missing"]);
    bad_set(&["cluster={replicas: 9, autoscale: {max_replicas: 4, target: 8}}"], &["cluster.replicas", "outside"]);
    bad_set(&[&a(", signal: gpu_util")], &["cluster.autoscale.signal", "unknown signal `gpu_util`", "kv_use"]);
    bad_set(&[&a(", signal: kv_use")], &["cluster.autoscale.target", "kv_use is a fraction"]);
    bad_set(&[&a(", tolerance: 1")], &["cluster.autoscale.tolerance", "1 is not allowed"]);
    bad_set(&[&a(", scale_up: {stabilization_s: 7200}")], &["cluster.autoscale.scale_up.stabilization_s", "7200"]);
    bad_set(&[&a(", scale_down: {pods: 0}")], &["cluster.autoscale.scale_down.pods", "0 is not allowed"]);
    bad_set(&[&a(", cold_start: {load_gbps: 0}")], &["cluster.autoscale.cold_start.load_gbps", "0 is not allowed"]);
    bad_set(
        &["workload.requests=null", "workload.duration_s=600", &a(", cold_start: {load_gbps: 0.001}")],
        &["cluster.autoscale.cold_start", "weights 13480.0 s", "longer than the run's 600 s"],
    );
    bad_set(&[&a(", cold_start: {warmup_s: 3}")], &["cluster.autoscale.cold_start", "warmup_s"]);
    // A cold start longer than the arrivals last.
    bad_set(
        &[
            "workload.requests=null",
            "workload.duration_s=60",
            &a(", cold_start: {engine_start_s: 50, graph_capture_s: 20}"),
        ],
        &["cluster.autoscale.cold_start", "ready 70.0 s after it is asked for", "longer than the run's 60 s"],
    );
    bad_set(
        &["cluster={replicas: 2, timeline: {window_s: 0.5}}"],
        &["cluster.timeline.window_s", "0.5 is not allowed"],
    );
    bad_set(
        &["cluster={replicas: 2, timeline: {slo: {ttft_p99_ms: -1}}}"],
        &["cluster.timeline.slo.ttft_p99_ms", "-1 is not allowed"],
    );
    bad_set(&["cluster={replicas: 2, timeline: {slo: {e2e_p99_ms: 5}}}"], &["cluster.timeline.slo", "e2e_p99_ms"]);
    // --timeline without a timeline is a usage error.
    TestCommand::new(&["run", BASE, "--timeline", "-"]).fails_with(2).stderr_has(&["--timeline", "cluster.timeline"]);
    // A good one runs and writes its rows.
    let dir = tempdir();
    let csv = dir.path().join("t.csv");
    TestCommand::new(&["run", BASE, "-q", "--set", &a(", cold_start: {engine_start_s: 5}"), "--timeline"])
        .arg(&csv)
        .ok();
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("start_s,end_s,offered_rps,served_rps,"), "{text}");
}

#[test]
fn bad_pools_name_the_pool_and_the_key() {
    let pools = |p: &str| format!("cluster={{pools: [{p}]}}");
    bad_set(&[&pools("{name: a, replicas: 0}")], &["cluster.pools[0].replicas", "0 is not allowed"]);
    bad_set(&[&pools("{replicas: 2}")], &["cluster.pools[0].name", "missing"]);
    bad_set(&[&pools("{name: a}, {name: a}")], &["cluster.pools[1].name", "`a` names two pools"]);
    bad_set(&[&pools("{name: 'a b'}")], &["cluster.pools[0].name", "1 to 32 letters"]);
    bad_set(&["cluster={pools: []}"], &["cluster.pools", "0 pools"]);
    bad_set(&["cluster={replicas: 2, pools: [{name: a}]}"], &["cluster.replicas", "conflicts with cluster.pools"]);
    bad_set(&[&pools("{name: a, hardware: nowhere}")], &["cluster.pools[0].hardware", "nowhere"]);
    bad_set(&[&pools("{name: a, cost_per_hour: -1}")], &["cluster.pools[0].cost_per_hour", "-1 is not allowed"]);
    bad_set(
        &[&pools("{name: a, autoscale: {min_replicas: 4, max_replicas: 2, target: 3}}")],
        &["cluster.pools[0].autoscale.min_replicas", "above max_replicas"],
    );
    bad_set(&[&pools("{name: a, autoscale: {max_replicas: 2, target: 0}}")], &["cluster.pools[0].autoscale.target"]);
    // capacity and serve refuse a fleet over time.
    TestCommand::new(&["capacity", BASE, "--slo", "ttft_p99_ms=500", "--set", &pools("{name: a, replicas: 2}")])
        .fails_with(2)
        .stderr_has(&["capacity sizes a fixed fleet", "cluster.pools"]);
}

#[test]
fn a_trace_of_wall_clock_times_replays_from_its_first_row() {
    let dir = tempdir();
    let trace = write(
        dir.path(),
        "day.csv",
        "timestamp,prompt_tokens,output_tokens\n2026-12-05T09:00:00Z,100,10\n2026-12-05T09:00:02.5Z,100,10\n",
    );
    let set = format!("workload.arrivals={{trace: {}}}", trace.display());
    let csv = dir.path().join("out.csv");
    let args = ["trace", BASE, "--set", &set, "--set", "workload.prompt_tokens=null", "--set"];
    TestCommand::new(&args)
        .arg("workload.output_tokens=null")
        .arg("--set")
        .arg("workload.requests=null")
        .arg("-o")
        .arg(&csv)
        .ok();
    let text = std::fs::read_to_string(&csv).unwrap();
    let arrivals: Vec<&str> = text.lines().skip(1).map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(arrivals, ["0.000000000", "2.500000000"], "{text}");
    bad_trace("timestamp,prompt_tokens,output_tokens\n09:00,1,1\n08:00,1,1\n", &["line 3, column timestamp"]);
}

#[test]
fn bad_over_time_searches_name_the_option_and_what_is_allowed() {
    const DAY: &str = "scenarios/clusters/autoscale-day.yml";
    const POOLS: &str = "scenarios/clusters/day-pools.yml";
    let over = |file: &str, extra: &[&str]| {
        let mut cmd = TestCommand::new(&["capacity", file, "--over-time"]);
        for a in extra {
            cmd = cmd.arg(a);
        }
        cmd.bounded(60, 2048)
    };
    let refused = |file: &str, extra: &[&str], fragments: &[&str]| {
        let out = over(file, extra);
        assert_eq!(out.code(), 2, "{extra:?}\n{}", out.describe());
        out.stderr_has(fragments);
    };
    refused(BASE, &[], &["--over-time judges a fleet window by window", "cluster.autoscale"]);
    for w in ["--windows=0", "--windows=1.5", "--windows=-0.1", "--windows=NaN"] {
        refused(DAY, &[w], &["--windows", "above 0 and at most 1"]);
    }
    refused(DAY, &["--slo", "ttft_p90_ms=500"], &["`ttft_p90_ms` is not a window percentile", "itl_p99_ms"]);
    refused(DAY, &["--slo", "ttft_p99_ms=fast"], &["--slo ttft_p99_ms=fast", "expects a number"]);
    refused(DAY, &["--slo", "ttft_p99_ms=-5"], &["cluster.timeline.slo.ttft_p99_ms"]);
    refused(DAY, &["--static-max", "0"], &["--static-max 0", "from 1 to 10000"]);
    refused(DAY, &["--set", "cluster.timeline.slo=null"], &["no window SLO", "cluster.timeline.slo"]);
    refused(DAY, &["--set", "cluster.autoscale.target=0,4"], &["point 1 of 2", "cluster.autoscale.target"]);
    refused(DAY, &["--shards", "nowhere.json"], &["nowhere.json"]);
    refused(POOLS, &["--set", "cluster.pools.2.replicas=1,2"], &["`cluster.pools` has 2 entries (counted from 0)"]);
    refused(POOLS, &["--set", "cluster.pools.0.speed=1,2"], &["unknown key path `cluster.pools.0.speed`", "replicas"]);
    refused(POOLS, &["--set", "cluster.pools.1.autoscale.aim=1,2"], &["those of `cluster.autoscale`"]);
    refused(
        DAY,
        &["--set", "cluster.pools.0.replicas=1,2"],
        &["`cluster.pools` is nothing (null), not a list to index"],
    );
    // Options of the other search, and options without --over-time.
    refused(DAY, &["--target-rate", "5"], &["--target-rate"]);
    TestCommand::new(&["capacity", DAY, "--slo", "ttft_p99_ms=500", "--windows", "0.5"])
        .fails_with(2)
        .stderr_has(&["--over-time"]);
    // A pool's key is set by its position, for run as for the search.
    let out = TestCommand::new(&["explain", POOLS, "--set", "cluster.pools.1.autoscale.target=7"]).ok();
    assert!(out.stdout().contains("target: 7.0"), "{}", out.describe());
}
