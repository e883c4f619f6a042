//! Odd input found by trying it (docs/scenario.md, "Input limits"): each case used to hang, abort,
//! exhaust memory or print a wrong number, and must now end quickly with
//! exit 0 and sound numbers, or exit 2 and a message that names the key,
//! the value and what is allowed. Every run is guarded (a time and memory
//! bound far above normal), so a regression shows as a failure, not a hung
//! test binary.

use crate::support::*;

const BASE: &str = "scenarios/base.yml";
/// The guard: seconds before a run counts as hung, and MiB of address space.
const HANG_S: u64 = 60;
const MEM_MIB: u64 = 4096;

/// `llmsim run BASE --set ...` under the guard.
fn run_set(sets: &[&str]) -> Out {
    let mut cmd = TestCommand::new(&["run", BASE]);
    for s in sets {
        cmd = cmd.arg("--set").arg(s);
    }
    cmd.bounded(HANG_S, MEM_MIB)
}

/// Expects exit 2 with every fragment on stderr.
fn refused(out: &Out, fragments: &[&str]) {
    assert_eq!(out.code(), 2, "expected exit 2\n{}", out.describe());
    out.stderr_has(fragments);
}

/// A scenario file in a temp dir.
fn scenario(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempdir();
    let path = write(dir.path(), "s.yml", text);
    (dir, path)
}

const CLOSED_DURATION: [&str; 3] = [
    "workload.arrivals={closed: {concurrency: 2, think_time_s: 0}}",
    "workload.requests=null",
    "workload.duration_s=10",
];

#[test]
fn a_closed_loop_whose_prompts_exceed_the_context_stops_instead_of_looping_at_one_instant() {
    let mut sets = CLOSED_DURATION.to_vec();
    sets.push("workload.prompt_tokens=40000");
    refused(&run_set(&sets), &["the run stopped at t = 0.000000000 s", "more than 100 per user", "rejected"]);
}

#[test]
fn a_closed_loop_whose_requests_never_fit_the_kv_cache_stops_too() {
    let mut sets = CLOSED_DURATION.to_vec();
    sets.extend(["workload.prompt_tokens=30000", "model.kv_cache.num_blocks=100"]);
    refused(&run_set(&sets), &["the closed loop issued 201 requests at that instant", "think_time_s 0"]);
}

#[test]
fn an_all_rejected_closed_loop_with_a_request_count_ends_and_counts_every_rejection() {
    // 300 rejections of one user at t = 0: the count, not the stall
    // guard, ends it.
    let out = run_set(&[
        "workload.arrivals={closed: {concurrency: 1, think_time_s: 0}}",
        "workload.requests=300",
        "workload.prompt_tokens=40000",
    ]);
    assert_eq!(out.code(), 0, "{}", out.describe());
    assert!(out.stdout().contains("0 completed, 300 rejected (300 over context"), "{}", out.describe());
}

#[test]
fn a_closed_loop_rejected_one_nanosecond_apart_stops_at_the_request_limit() {
    // Time advances (think 1 ns), so it is not stalled, but it would issue
    // 2e10 requests before its duration: the request limit stops it (that
    // of a run that keeps every record, here; a summary's is 100 times
    // higher and would take minutes to reach).
    let dir = tempdir();
    let mut cmd = TestCommand::new(&["run", BASE]).arg("--requests-csv").arg(dir.path().join("r.csv"));
    for s in [
        "workload.arrivals={closed: {concurrency: 2, think_time_s: 1e-9}}",
        "workload.requests=null",
        "workload.duration_s=10",
        "workload.prompt_tokens=40000",
    ] {
        cmd = cmd.arg("--set").arg(s);
    }
    let out = cmd.bounded(HANG_S, MEM_MIB);
    refused(
        &out,
        &[
            "after issuing 10,000,000 requests (10,000,000 rejected)",
            "without --requests-csv it keeps none and may issue 1,000,000,000",
            "check why requests are rejected",
        ],
    );
}

#[test]
fn more_requests_than_requests_csv_may_keep_are_refused_before_the_run() {
    // 10,000,001 would run for half a minute and 1 GB before the request
    // limit stopped it; the count is known up front.
    let dir = tempdir();
    let out = TestCommand::new(&["run", BASE, "--set", "workload.requests=10000001", "--requests-csv"])
        .arg(dir.path().join("r.csv"))
        .bounded(HANG_S, MEM_MIB);
    refused(&out, &["--requests-csv", "at most 10,000,000 requests", "workload.requests is 10,000,001"]);
    assert!(!dir.path().join("r.csv").exists(), "nothing written");
}

#[test]
fn lognormal_moments_beyond_the_token_range_are_refused() {
    let out = run_set(&["workload.prompt_tokens={lognormal: {mean: 1e300, std: 1e300}}"]);
    refused(&out, &["workload.prompt_tokens.lognormal.mean", "1e300 is not allowed", "[1, 4,294,967,295]"]);
    let out = run_set(&["workload.prompt_tokens={normal: {mean: 500, std: 1e300}}"]);
    refused(&out, &["workload.prompt_tokens.normal.std", "1e300 is not allowed"]);
}

#[test]
fn the_widest_allowed_lognormal_still_gives_real_prompts() {
    // std/mean at the edge of the range: sigma^2 = ln(1 + 4.29e9^2) ~ 44.4.
    let out = run_set(&[
        "workload.prompt_tokens={lognormal: {mean: 1, std: 4294967295, max: 1000}}",
        "workload.requests=200",
    ]);
    assert_eq!(out.code(), 0, "{}", out.describe());
    let s = out.stdout();
    let line = s.lines().find(|l| l.starts_with("throughput")).expect("throughput line");
    assert!(!line.contains(" 0 input tok/s"), "{line}");
}

#[test]
fn a_bandwidth_or_rate_of_1e_minus_300_is_refused_with_its_range() {
    refused(
        &run_set(&["hardware.memory_bandwidth_gbps=1e-300"]),
        &["hardware.memory_bandwidth_gbps: 1e-300 is not allowed: must be in [1, 1,000,000]"],
    );
    refused(
        &run_set(&["workload.arrivals.poisson.rate=1e-300"]),
        &["workload.arrivals.poisson.rate: 1e-300 is not allowed: must be in [1e-6, 1,000,000,000]"],
    );
}

#[test]
fn a_run_that_would_pass_the_time_limit_stops_and_never_prints_a_saturated_time() {
    // 2000 requests at one per 11.6 days span 63 years: past the limit.
    let out = run_set(&["workload.arrivals.poisson.rate=1e-6"]);
    refused(&out, &["simulated time would reach", "past the limit of 1,000,000,000 s"]);
    assert!(!out.stderr().contains("18446744073"), "{}", out.describe());
    assert!(out.stdout().is_empty(), "no summary of a run that did not finish\n{}", out.describe());
}

#[test]
fn a_billion_users_or_requests_are_refused_before_anything_is_allocated() {
    refused(
        &run_set(&["workload.arrivals={closed: {concurrency: 1000000000}}"]),
        &["workload.arrivals.closed.concurrency: 1000000000 is not allowed", "from 1 to 1,000,000"],
    );
    refused(
        &run_set(&["workload.requests=1000000001"]),
        &["workload.requests: 1000000001 is not allowed", "from 1 to 1,000,000,000"],
    );
    refused(
        &run_set(&["workload.arrivals.poisson.rate=1e9", "workload.requests=null", "workload.duration_s=1e9"]),
        &["workload.duration_s", "about 1e18 requests", "at most 1,000,000,000"],
    );
}

#[test]
fn a_long_run_on_a_pipe_draws_no_progress() {
    // 40,000 requests take about 370,000 steps: several progress reports,
    // none drawn because stderr is not a terminal.
    let out = run_set(&["workload.requests=40000", "workload.arrivals.poisson.rate=25"]);
    assert_eq!(out.code(), 0, "{}", out.describe());
    assert_eq!(out.stderr(), "", "{}", out.describe());
}

const TINY: &str = "name: tiny
hardware: { name: h, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989 }
model:
  context_length: 4096
  weights: { parameters_billions: PARAMS }
  kv_cache: { bytes_per_token: 1 }
latency: { step_overhead_ms: OVERHEAD }
workload:
  arrivals: { closed: { concurrency: 1, think_time_s: 0 } }
  duration_s: 1
  prompt_tokens: 1
  output_tokens: 1
";

fn tiny(params: &str, overhead: &str) -> Out {
    let (_d, path) = scenario(&TINY.replace("PARAMS", params).replace("OVERHEAD", overhead));
    TestCommand::new(&["run"]).arg(&path).bounded(HANG_S, MEM_MIB)
}

#[test]
fn a_model_whose_step_costs_under_a_microsecond_is_refused() {
    refused(&tiny("0.000000001", "0"), &["model.weights.parameters_billions: 1e-9 is not allowed"]);
    // 1e3 parameters x 2 bytes / 3000 GB/s = 0.667 ns a step.
    refused(
        &tiny("0.000001", "0"),
        &["model.weights.parameters_billions", "costs 0.667 ns", "at least 1,000 ns a step", "step_overhead_ms"],
    );
}

#[test]
fn the_same_model_with_a_step_overhead_runs_a_bounded_number_of_steps() {
    // A step: max(2 * 1e3 params / 989e12 FLOP/s, (2e3 weight bytes + 2 KV
    // bytes) / 3e12 B/s) = 0.6673 ns, plus 10 us overhead: 10,001 ns once
    // rounded. One user, one one-token request a step: arrivals at
    // k * 10,001 ns < 1 s, so k = 0 ..= 99,990.
    let out = tiny("0.000001", "0.01");
    assert_eq!(out.code(), 0, "{}", out.describe());
    let expected = 1_000_000_000u64.div_ceil(10_001);
    assert_eq!(expected, 99_991);
    assert!(out.stdout().contains("requests   99,991 completed"), "{}", out.describe());
}

#[test]
fn gamma_burstiness_of_1e308_is_refused_and_the_largest_allowed_one_ends() {
    refused(
        &run_set(&[
            "workload.arrivals={gamma: {rate: 10, burstiness: 1e308}}",
            "workload.requests=null",
            "workload.duration_s=10",
        ]),
        &["workload.arrivals.gamma.burstiness: 1e308 is not allowed", "[0.001, 1,000]"],
    );
    let out = run_set(&[
        "workload.arrivals={gamma: {rate: 10, burstiness: 1000}}",
        "workload.requests=null",
        "workload.duration_s=10",
    ]);
    assert_eq!(out.code(), 0, "{}", out.describe());
    // Shape 1000 is nearly constant gaps of 0.1 s (sd 3%): the first at 0,
    // about 100 more before 10 s (the sum of 100 gaps has sd 0.03 s).
    let s = out.stdout();
    let line = s.lines().find(|l| l.starts_with("requests")).expect("requests line");
    let n: u64 = line.split_whitespace().nth(1).unwrap().replace(',', "").parse().unwrap();
    assert!((99..=102).contains(&n), "{line}");
}

#[test]
fn trace_shows_bursty_arrivals_spread_over_time() {
    let out = TestCommand::new(&[
        "trace",
        BASE,
        "--set",
        "workload.arrivals={gamma: {rate: 10, burstiness: 1000}}",
        "--set",
        "workload.requests=5",
        "-o",
        "-",
    ])
    .bounded(HANG_S, MEM_MIB);
    assert_eq!(out.code(), 0, "{}", out.describe());
    let arrivals: Vec<f64> =
        out.stdout().lines().skip(1).map(|l| l.split(',').next().unwrap().parse().unwrap()).collect();
    // Gaps of 0.1 s within a few percent (shape 1000: sd 3%).
    for w in arrivals.windows(2) {
        assert!((w[1] - w[0] - 0.1).abs() < 0.02, "{arrivals:?}");
    }
}

#[test]
fn deeply_nested_yaml_is_refused_before_the_parser_sees_it() {
    // 100,000 levels took 19 s in libyaml before serde_yaml's recursion
    // limit fired; the pre-scan's own message shows it never got there.
    let deep = format!("name: x\nworkload: {}1{}\n", "[ ".repeat(100_000), " ]".repeat(100_000));
    let (_d, path) = scenario(&deep);
    for cmd in ["run", "explain", "trace"] {
        let mut c = TestCommand::new(&[cmd]).arg(&path);
        if cmd == "trace" {
            c = c.arg("-o").arg("-");
        }
        refused(&c.bounded(HANG_S, MEM_MIB), &["s.yml:2", "nested more than 64 levels deep"]);
    }
    let out = TestCommand::new(&["sweep"]).arg(&path).bounded(HANG_S, MEM_MIB);
    refused(&out, &["nested more than 64 levels deep"]);
    let value = format!("workload.prompt_tokens={}1{}", "[".repeat(1000), "]".repeat(1000));
    refused(&run_set(&[&value]), &["nested more than 64 levels deep"]);
}

#[test]
fn one_number_grammar_reads_hex_exponents_and_whole_floats_in_files_and_in_set() {
    let text = std::fs::read_to_string(repo(BASE)).unwrap();
    let write_as = |duration: &str, rate: &str, budget: &str, seed: &str| {
        text.replace("requests: 2000", &format!("duration_s: {duration}"))
            .replace("rate: 20", &format!("rate: {rate}"))
            .replace("max_batch_tokens: 8192", &format!("max_batch_tokens: {budget}"))
            .replace("seed: 42", &format!("seed: {seed}"))
    };
    let json = |text: String| {
        let (_d, path) = scenario(&text);
        let out = TestCommand::new(&["run", "--json", "-"]).arg(&path).bounded(HANG_S, MEM_MIB);
        assert_eq!(out.code(), 0, "{}", out.describe());
        out.stdout()
    };
    let decimal = json(write_as("30", "20", "8192", "42"));
    assert_eq!(json(write_as("0x1E", "0x14", "8.192e3", "0x2A")), decimal);
    assert_eq!(json(write_as("3e1", "20.0", "0o20000", "42.0")), decimal);
    // --set reads them the same way.
    let set = |sets: &[&str]| {
        let mut all = vec!["workload.requests=null"];
        all.extend(sets);
        let out = run_set(&all);
        assert_eq!(out.code(), 0, "{}", out.describe());
        out.stdout()
    };
    assert_eq!(
        set(&[
            "workload.duration_s=0x1E",
            "workload.arrivals.poisson.rate=20.0",
            "scheduler.max_batch_tokens=0x2000",
            "workload.seed=4.2e1"
        ]),
        set(&["workload.duration_s=30"])
    );
}

#[test]
fn messages_use_the_users_words_and_shorten_absurd_values() {
    let nines = "9".repeat(300);
    let cases: Vec<(String, Vec<&str>)> = vec![
        ("workload.arrivals=poisson".into(), vec!["expected one of poisson: {rate}", "got the string \"poisson\""]),
        ("workload.arrivals=5".into(), vec!["workload.arrivals", "got the number 5"]),
        ("workload.prompt_tokens={lognormal: 5}".into(), vec!["expected a mapping, got the number 5"]),
        ("model.weights=3".into(), vec!["model.weights", "expected a mapping, got the number 3"]),
        ("workload.requests=2.5".into(), vec!["2.5 is not a whole number"]),
        (format!("workload.requests={nines}"), vec!["workload.requests", "a number this large is not allowed"]),
        (format!("workload.duration_s={nines}"), vec!["workload.duration_s: 1e300 is not allowed"]),
        (format!("name={nines}x"), vec![]),
    ];
    for (set, fragments) in cases {
        let out = run_set(&[&set]);
        let err = out.stderr();
        for leak in ["Value::Tagged", "struct Raw", "Raw", "i64", "f64", "u64", &nines] {
            assert!(!err.contains(leak), "{set}: leaks {leak:?}\n{err}");
        }
        if fragments.is_empty() {
            continue;
        }
        refused(&out, &fragments);
        assert!(err.len() < 600, "{set}: {err}");
    }
}

#[test]
fn a_file_written_with_300_digits_or_underscores_gets_a_short_message() {
    let text = std::fs::read_to_string(repo(BASE)).unwrap();
    for (to, fragments) in [
        (format!("requests: {}", "9".repeat(300)), vec!["workload.requests", "this large"]),
        ("requests: 1_000".to_string(), vec!["workload.requests", "without underscores"]),
        ("requests: \"2000\"".to_string(), vec!["workload.requests", "remove the quotes"]),
        ("requests: 1e400".to_string(), vec!["workload.requests", "1e400 is too large"]),
        ("requests: 02000".to_string(), vec!["workload.requests", "leading zero"]),
    ] {
        let (_d, path) = scenario(&text.replace("requests: 2000", &to));
        let out = TestCommand::new(&["run"]).arg(&path).bounded(HANG_S, MEM_MIB);
        refused(&out, &fragments);
        assert!(out.stderr().len() < 400, "{}", out.stderr());
    }
}

#[test]
fn a_sweep_point_that_reaches_a_run_limit_fails_the_sweep_naming_the_point() {
    let out = TestCommand::new(&["sweep", BASE, "--set", "workload.arrivals.poisson.rate=20,1e-6", "-q"])
        .bounded(HANG_S, MEM_MIB);
    refused(&out, &["point 2 of 2 (workload.arrivals.poisson.rate=1e-6), seed 42", "past the limit"]);
    assert!(out.stdout().is_empty(), "no table of a sweep that did not finish\n{}", out.describe());
}

#[test]
fn trace_and_capacity_stop_at_the_run_limits_too() {
    let out = TestCommand::new(&["trace", BASE, "--set", "workload.arrivals.poisson.rate=1e-6", "-o", "-"])
        .bounded(HANG_S, MEM_MIB);
    refused(&out, &["past the limit of 1,000,000,000 s"]);
    assert!(out.stdout().is_empty(), "{}", out.describe());
    // 100 T parameters read at 1 GB/s: 2e5 s a step; the burst probe of
    // 5,000 requests passes the time limit.
    let out = TestCommand::new(&["capacity", BASE, "--slo", "ttft_p99_ms=500", "--requests", "5000"])
        .arg("--set")
        .arg("hardware.memory_bandwidth_gbps=1")
        .arg("--set")
        .arg("model.weights.parameters_billions=100000")
        .arg("--set")
        .arg("model.kv_cache.num_blocks=100000")
        .bounded(HANG_S, MEM_MIB);
    refused(&out, &["the probe at", "past the limit of 1,000,000,000 s"]);
}

#[test]
fn a_shared_prefix_longer_than_the_context_is_refused_without_hashing_it() {
    // 4,294,967,295 tokens (inside the documented range) are 268 million
    // blocks: their hashes once took 2 GB and aborted or hung, though every
    // such request is over the 8,192-token context and refused unseen.
    let prefix = "workload.shared_prefix={tokens: 4294967295, groups: 2}";
    for extra in [&[][..], &["--exact"][..], &["--set", "cluster={replicas: 3, router: prefix_affinity}"][..]] {
        let mut cmd = TestCommand::new(&["run", BASE, "--json", "-", "-q"]);
        for s in [prefix, "model.kv_cache.prefix_caching=true", "workload.requests=20"] {
            cmd = cmd.arg("--set").arg(s);
        }
        for a in extra {
            cmd = cmd.arg(a);
        }
        let out = cmd.bounded(HANG_S, 1024);
        assert_eq!(out.code(), 0, "{extra:?}\n{}", out.describe());
        let v: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
        assert_eq!(v["requests"]["rejected_context_length"], 20, "{extra:?}");
    }
}

#[test]
fn many_arrivals_at_one_instant_are_not_quadratic() {
    // 400,000 requests at t = 0 behind one sequence slot: every decode
    // stretch once walked the whole waiting queue, 8e10 visits (over a
    // minute); now a count kept as requests come and go answers at once
    // (under a second). The guard is 30 s, not a speed test.
    let dir = tempdir();
    let mut rows = String::from("arrival_s,prompt_tokens,output_tokens\n");
    for _ in 0..400_000 {
        rows.push_str("0,16,4\n");
    }
    write(dir.path(), "t.csv", &rows);
    let path = write(
        dir.path(),
        "s.yml",
        "name: burst\nhardware: h100-80gb\nmodel: {preset: llama-3.1-8b}\nscheduler: {max_num_sequences: 1}\n\
         workload:\n  arrivals: {trace: t.csv}\n",
    );
    for exact in [false, true] {
        let mut cmd = TestCommand::new(&["run", "--json", "-", "-q"]).arg(&path);
        if exact {
            cmd = cmd.arg("--exact");
        }
        let out = cmd.bounded(30, MEM_MIB);
        assert_eq!(out.code(), 0, "exact {exact}\n{}", out.describe());
        let v: serde_json::Value = serde_json::from_str(&out.stdout()).unwrap();
        assert_eq!(v["requests"]["completed"], 400_000, "exact {exact}");
    }
}
