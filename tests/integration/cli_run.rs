//! Integration tests: `llmsim run`, `trace` and `explain` on shipped scenarios.

use crate::support::*;
use serde_json::Value;

/// Every scenario file users can run directly.
fn shipped_scenarios() -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["scenarios", "scenarios/workloads", "scenarios/deployments"] {
        for entry in std::fs::read_dir(repo(dir)).expect("scenario dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yml") {
                out.push(path.strip_prefix(root()).expect("inside repo").display().to_string());
            }
        }
    }
    out.sort();
    assert!(out.len() >= 9, "{out:?}");
    out
}

fn run_json(args: &[&str]) -> Value {
    let out = TestCommand::new(&["run"]).arg(args[0]).arg("--json").arg("-").args_from(&args[1..]).ok();
    serde_json::from_str(&out.stdout()).expect("result JSON")
}

trait ArgsFrom {
    fn args_from(self, rest: &[&str]) -> Self;
}

impl ArgsFrom for TestCommand {
    fn args_from(mut self, rest: &[&str]) -> Self {
        for a in rest {
            self = self.arg(a);
        }
        self
    }
}

#[test]
fn run_prints_capacity_latencies_and_throughput_for_the_base_scenario() {
    let out = TestCommand::new(&["run", "scenarios/base.yml"]).ok().stdout();
    for want in [
        "7,609 blocks x 16 = 121,744 tokens",
        "211 requests of 576 tokens fit",
        "watermark 76 blocks",
        "TTFT",
        "ITL",
        "TPOT",
        "E2E",
        "queue",
        "req/s",
        "mean batch",
        "preemptions",
        "rejected",
    ] {
        assert!(out.contains(want), "summary lacks {want:?}:\n{out}");
    }
}

#[test]
fn every_shipped_scenario_runs_and_completes_requests() {
    for s in shipped_scenarios() {
        let v = run_json(&[&s]);
        let completed = v["requests"]["completed"].as_u64().expect("completed");
        assert!(completed > 0, "{s}: nothing completed");
        assert_eq!(v["requests"]["rejected"], 0, "{s}");
    }
}

#[test]
fn the_result_json_has_every_key_of_the_contract() {
    let v = run_json(&["scenarios/base.yml"]);
    let stats = ["mean", "p50", "p90", "p99", "max"];
    let paths: Vec<String> = [
        "capacity.num_blocks",
        "capacity.block_size",
        "capacity.kv_tokens",
        "capacity.watermark_blocks",
        "requests.completed",
        "requests.rejected",
        "throughput.duration_s",
        "throughput.requests_per_s",
        "throughput.input_tokens_per_s",
        "throughput.output_tokens_per_s",
        "steps.count",
        "steps.mean_batch_size",
        "steps.max_batch_size",
        "steps.mean_tokens",
        "kv.peak_blocks",
        "kv.mean_usage",
        "preemptions",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(
        ["ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms", "steps.duration_ms"]
            .iter()
            .flat_map(|m| stats.iter().map(move |s| format!("{m}.{s}"))),
    )
    .collect();
    for p in &paths {
        let node = p.split('.').fold(&v, |node, k| &node[k]);
        assert!(node.is_number(), "{p} is {node}");
    }
    assert_eq!(v["capacity"]["num_blocks"], 7609);
    assert_eq!(v["requests"]["completed"], 2000);
}

#[test]
fn the_same_scenario_twice_gives_byte_identical_json() {
    let a = TestCommand::new(&["run", "scenarios/workloads/closed-loop.yml", "--json", "-"]).ok().stdout();
    let b = TestCommand::new(&["run", "scenarios/workloads/closed-loop.yml", "--json", "-"]).ok().stdout();
    assert_eq!(a, b);
    let c = TestCommand::new(&["run", "scenarios/base.yml", "--json", "-"]).ok().stdout();
    let d = TestCommand::new(&["run", "scenarios/base.yml", "--json", "-"]).ok().stdout();
    assert_eq!(c, d);
}

#[test]
fn a_different_seed_gives_different_arrivals() {
    let a = TestCommand::new(&["trace", "scenarios/base.yml", "-o", "-"]).ok().stdout();
    let b = TestCommand::new(&["trace", "scenarios/base.yml", "-o", "-", "--seed", "43"]).ok().stdout();
    assert_ne!(a, b);
    assert_eq!(a.lines().count(), b.lines().count());
}

#[test]
fn replaying_a_generated_trace_reproduces_the_run_exactly() {
    let dir = tempdir();
    for s in ["scenarios/base.yml", "scenarios/workloads/closed-loop.yml", "scenarios/workloads/gamma-bursty.yml"] {
        let trace = dir.path().join("trace.csv");
        TestCommand::new(&["trace", s, "-o"]).arg(&trace).ok();
        let original = run_json(&[s]);
        let set = format!("workload.arrivals={{trace: {}}}", trace.display());
        let replay = TestCommand::new(&["run", s, "--json", "-", "--set", &set])
            .arg("--set")
            .arg("workload.prompt_tokens=null")
            .arg("--set")
            .arg("workload.output_tokens=null")
            .arg("--set")
            .arg("workload.requests=null")
            .ok();
        let replay: Value = serde_json::from_str(&replay.stdout()).expect("json");
        for key in ["requests", "throughput", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms", "steps", "kv"] {
            assert_eq!(original[key], replay[key], "{s}: {key} differs after replay");
        }
    }
}

#[test]
fn explain_prints_a_valid_scenario_that_runs_identically() {
    let out = TestCommand::new(&["explain", "scenarios/workloads/closed-loop.yml"]).ok().stdout();
    assert!(out.contains("max_num_sequences: 64") && out.contains("watermark: 0.01"), "{out}");
    assert!(out.contains("gpu_memory_utilization: 0.9"), "defaults are filled in:\n{out}");
    assert!(out.contains("7,609 blocks"), "{out}");
    let dir = tempdir();
    let effective = write(dir.path(), "effective.yml", &out);
    let a = run_json(&["scenarios/workloads/closed-loop.yml"]);
    let b = run_json(&[effective.to_str().expect("utf-8 path")]);
    assert_eq!(a, b);
}

#[test]
fn explain_key_prints_the_keys_row_and_its_value_here() {
    let out = TestCommand::new(&[
        "explain",
        "scenarios/base.yml",
        "--set",
        "scheduler.max_batch_tokens=2048",
        "--key",
        "scheduler.max_batch_tokens",
        "--key",
        "hardware.hbm_gib",
    ])
    .ok()
    .stdout();
    // The value after --set, the default, the range and the meaning.
    for line in ["  here       2048", "  unset      8192", "  allowed    whole, 1 to ", "max_num_batched_tokens"] {
        assert!(out.contains(line), "`{line}` missing:\n{out}");
    }
    // base.yml names h100-80gb: 80 GiB; no default, a reason for the range.
    assert!(
        out.contains("hardware.hbm_gib\n  holds      a number\n  here       80.0\n  unset      required\n"),
        "{out}"
    );
    let typo = TestCommand::new(&["explain", "scenarios/base.yml", "--key", "sheduler.max_batch_tokens"]).fails_with(2);
    assert!(typo.stderr().contains("did you mean `scheduler.max_batch_tokens`"), "{}", typo.stderr());
}

#[test]
fn a_set_of_the_wrong_shape_is_refused_with_the_keys_row() {
    let e = TestCommand::new(&["run", "scenarios/base.yml", "--set", "workload.requests=many"]).fails_with(2);
    let text = e.stderr();
    assert!(text.contains("got the string \"many\" (after --set overrides)"), "{text}");
    assert!(text.contains("\n  workload.requests: allowed: "), "the key's row follows:\n{text}");
    let e = TestCommand::new(&["run", "scenarios/base.yml", "--set", "scheduler.max_batch_tokens=0"]).fails_with(2);
    let text = e.stderr();
    assert!(text.contains("\n  scheduler.max_batch_tokens: allowed: whole, 1 to 100,000,000; unset: 8192; "), "{text}");
}

#[test]
fn run_with_explain_prints_the_configuration_then_the_summary() {
    let out = TestCommand::new(&["run", "scenarios/workloads/trace-replay.yml", "--explain"]).ok().stdout();
    let config = out.find("effective configuration").expect("explanation");
    let summary = out.find("throughput").expect("summary");
    assert!(config < summary);
}

#[test]
fn set_and_seed_override_the_scenario() {
    let base = run_json(&["scenarios/base.yml", "--set", "workload.requests=50"]);
    assert_eq!(base["requests"]["completed"], 50);
    let small =
        run_json(&["scenarios/base.yml", "--set", "workload.requests=50", "--set", "model.kv_cache.num_blocks=100"]);
    assert_eq!(small["capacity"]["num_blocks"], 100);
    let seeded = run_json(&["scenarios/base.yml", "--set", "workload.requests=50", "--seed", "1"]);
    assert_eq!(seeded["seed"], 1);
    assert_ne!(seeded["ttft_ms"], base["ttft_ms"]);
}

#[test]
fn requests_and_steps_csv_have_a_row_each() {
    let dir = tempdir();
    let (req, steps) = (dir.path().join("r.csv"), dir.path().join("s.csv"));
    let json = dir.path().join("out.json");
    TestCommand::new(&["run", "scenarios/workloads/trace-replay.yml", "--quiet", "--requests-csv"])
        .arg(&req)
        .arg("--steps-csv")
        .arg(&steps)
        .arg("--json")
        .arg(&json)
        .ok();
    let result: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    let req = std::fs::read_to_string(&req).expect("requests csv");
    let header = req.lines().next().expect("header");
    assert_eq!(
        header,
        "id,arrival_s,prompt_tokens,output_tokens,status,queue_ms,ttft_ms,e2e_ms,tpot_ms,max_itl_ms,preemptions"
    );
    assert_eq!(req.lines().count(), 11);
    assert!(req.lines().nth(3).expect("row").starts_with("2,0.031000000,96,12,finished,"), "{req}");
    let steps = std::fs::read_to_string(&steps).expect("steps csv");
    assert!(steps.starts_with("index,start_s,duration_ms,batch_size,tokens,prefill_tokens,kv_blocks_used,"));
    assert_eq!(steps.lines().count() as u64, result["steps"]["count"].as_u64().expect("count") + 1);
}

#[test]
fn a_closed_summary_pipe_is_not_an_error() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmsim"))
        .args(["trace", "scenarios/base.yml", "-o", "-"])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn requests_over_the_context_are_counted_as_rejected_not_errors() {
    let v = run_json(&["scenarios/base.yml", "--set", "workload.requests=20", "--set", "model.context_length=540"]);
    assert_eq!(v["requests"]["rejected"], 20);
    assert_eq!(v["requests"]["rejected_context_length"], 20);
    assert_eq!(v["requests"]["completed"], 0);
    assert!(v["ttft_ms"]["p50"].is_null());
}

#[test]
fn prompts_that_can_never_fit_are_counted_as_rejected() {
    // 40 blocks of 16 = 640 tokens; 1% watermark of 40 is 0 blocks: a
    // 700-token prompt can never fit, a 500-token one can.
    let v = run_json(&[
        "scenarios/base.yml",
        "--set",
        "workload.requests=30",
        "--set",
        "model.kv_cache.num_blocks=40",
        "--set",
        "workload.prompt_tokens={choice: {values: [500, 700]}}",
    ]);
    let rejected = v["requests"]["rejected_kv_capacity"].as_u64().expect("count");
    assert!(rejected > 0 && rejected < 30, "{v}");
    assert_eq!(v["requests"]["completed"].as_u64().expect("count") + rejected, 30);
    let out = TestCommand::new(&["run", "scenarios/base.yml", "--set", "workload.requests=30"])
        .arg("--set")
        .arg("model.kv_cache.num_blocks=40")
        .arg("--set")
        .arg("workload.prompt_tokens=700")
        .ok()
        .stdout();
    assert!(out.contains("30 never fit in KV"), "{out}");
}

/// docs/engine.md section 3, step 1: every request that arrived by a step's start joins
/// it. An idle engine used to start its next step at the first waiting
/// arrival's time, admitting only that one while the others, which arrived
/// during the previous step, waited a step more: at 400 req/s of one-token
/// answers the base model served 222 req/s with TTFTs growing to 4 s.
#[test]
fn requests_that_arrive_during_a_step_all_join_the_next_one() {
    let r = run_json(&[
        "scenarios/base.yml",
        "--set",
        "workload.arrivals={constant: {rate: 400}}",
        "--set",
        "workload.prompt_tokens=16",
        "--set",
        "workload.output_tokens=1",
        "--set",
        "workload.requests=2000",
    ]);
    // Arrivals come every 2.5 ms, so a step of about 4.5 ms holds at most
    // two requests of 16 + 1 tokens. It reads the weights and their KV:
    // (6.74e9 x 2 + 2 x 17 x 524,288) bytes / 3000 GB/s = 4.4993 ms; its
    // compute (2 x 32 tokens x 2 x 6.74e9 FLOPs / 989 TFLOPS = 0.87 ms)
    // hides under it. A request waits at most one step for the running one
    // to end and is answered by the next: TTFT at most two such steps.
    let step_ms = (6.74e9 * 2.0 + 2.0 * 17.0 * 524_288.0) / 3000e9 * 1e3;
    let ttft_max = r["ttft_ms"]["max"].as_f64().unwrap();
    assert!(ttft_max <= 2.0 * step_ms + 1e-6, "TTFT max {ttft_max} ms, more than two steps of {step_ms} ms");
    // The last arrival is at 1999 / 400 s; it finishes within two steps.
    let duration = r["throughput"]["duration_s"].as_f64().unwrap();
    assert!(duration <= 1999.0 / 400.0 + 2.0 * step_ms / 1e3 + 1e-9, "{duration}");
    assert_eq!(r["requests"]["completed"], 2000);
}

#[test]
fn itl_counts_the_gaps_of_completed_requests_only() {
    // 40 blocks of 16 tokens hold 640: requests of 200 + up to 800 tokens
    // outgrow the cache, are preempted and rejected after tokens of their
    // own. ITL, like TTFT and TPOT, is over the completed requests: its
    // count is the sum of (output - 1) over the finished rows of the
    // per-request CSV. It once counted the rejected requests' gaps too.
    let dir = tempdir();
    for seed in ["1", "2", "3"] {
        for extra in [&[][..], &["--exact"][..], &["--set", "cluster={replicas: 2, router: round_robin}"][..]] {
            let (json, csv) = (dir.path().join("r.json"), dir.path().join("r.csv"));
            let mut cmd = TestCommand::new(&["run", "scenarios/base.yml", "-q"]);
            for a in ["model.kv_cache.num_blocks=40", "workload.requests=40", "workload.prompt_tokens=200"] {
                cmd = cmd.arg("--set").arg(a);
            }
            cmd = cmd.arg("--set").arg("workload.output_tokens={uniform: [100, 800]}");
            cmd = cmd.arg("--set").arg(format!("workload.seed={seed}"));
            for a in extra {
                cmd = cmd.arg(a);
            }
            cmd.arg("--json").arg(&json).arg("--requests-csv").arg(&csv).ok();
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            let text = std::fs::read_to_string(&csv).unwrap();
            let mut lines = text.lines();
            let header: Vec<&str> = lines.next().unwrap().split(',').collect();
            let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
            let (status, output) = (col("status"), col("output_tokens"));
            let mut gaps = 0u64;
            for line in lines {
                let cells: Vec<&str> = line.split(',').collect();
                if cells[status] == "finished" {
                    gaps += cells[output].parse::<u64>().unwrap() - 1;
                }
            }
            assert!(
                v["requests"]["rejected_kv_capacity"].as_u64().unwrap() > 0,
                "seed {seed} {extra:?}: none rejected"
            );
            assert!(v["requests"]["completed"].as_u64().unwrap() > 0, "seed {seed} {extra:?}: none completed");
            assert_eq!(v["itl_ms"]["count"].as_u64(), Some(gaps), "seed {seed} {extra:?}");
        }
    }
}

#[test]
fn replaying_the_trace_of_a_closed_loop_on_a_cluster_reproduces_its_run() {
    // A closed loop's arrivals follow the answers, so `llmsim trace` must
    // simulate the cluster the scenario names, not one engine (it once
    // did: the replay then differed).
    let dir = tempdir();
    let closed = "workload.arrivals={closed: {concurrency: 24, think_time_s: 0.05}}";
    let cases: [(&str, &[&str]); 2] = [
        ("scenarios/workloads/closed-loop.yml", &["cluster={replicas: 3, router: least_outstanding}"]),
        ("scenarios/clusters/disagg.yml", &[closed, "workload.requests=300"]),
    ];
    for (s, sets) in cases {
        let trace = dir.path().join("trace.csv");
        let with_sets = |mut cmd: TestCommand| {
            for set in sets {
                cmd = cmd.arg("--set").arg(set);
            }
            cmd
        };
        with_sets(TestCommand::new(&["trace", s, "-o"]).arg(&trace)).ok();
        let original: Value =
            serde_json::from_str(&with_sets(TestCommand::new(&["run", s, "--json", "-"])).ok().stdout()).unwrap();
        let set = format!("workload.arrivals={{trace: {}}}", trace.display());
        let mut replay = with_sets(TestCommand::new(&["run", s, "--json", "-"]));
        for unset in ["workload.prompt_tokens=null", "workload.output_tokens=null", "workload.requests=null"] {
            replay = replay.arg("--set").arg(unset);
        }
        let replay: Value = serde_json::from_str(&replay.arg("--set").arg(&set).ok().stdout()).expect("json");
        assert!(original["requests"]["completed"].as_u64().unwrap() > 100, "{s}");
        for key in ["requests", "throughput", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms", "steps", "kv"] {
            assert_eq!(original[key], replay[key], "{s}: {key} differs after replay");
        }
    }
}

/// The short closed loop of the long-run tests: 64 users, 32 prompt and 4
/// output tokens, no think time.
const SHORT_CLOSED: [&str; 8] = [
    "--set",
    "workload.prompt_tokens=32",
    "--set",
    "workload.output_tokens=4",
    "--set",
    "workload.arrivals={closed: {concurrency: 64, think_time_s: 0}}",
    "--set",
    "workload.requests=50000",
];

/// Issue 34: `--steps-csv`, `--trace-events` and `--plot` kept every step
/// and event in memory until the end (a 10M-request closed loop aborted
/// allocating 5.9 GB; these 50,000 requests took about 400 MB). They are
/// written as the run goes: the run fits in 256 MiB of address space, and
/// every row and event is there.
#[test]
fn a_long_run_writes_every_streamed_output_in_bounded_memory() {
    let dir = tempdir();
    let p = |n: &str| dir.path().join(n);
    let out = TestCommand::new(&["run", "scenarios/base.yml", "-q", "--json", "-"])
        .args_from(&SHORT_CLOSED)
        .arg("--steps-csv")
        .arg(p("steps.csv"))
        .arg("--trace-events")
        .arg(p("trace.json"))
        .arg("--plot")
        .arg(p("plot"))
        .bounded(300, 256);
    assert_eq!(out.code(), 0, "{}", out.describe());
    let result: Value = serde_json::from_str(&out.stdout()).expect("result JSON");
    let steps = result["steps"]["count"].as_u64().expect("steps");
    assert_eq!(result["requests"]["completed"], 50_000);
    let csv = std::fs::read_to_string(p("steps.csv")).expect("steps csv");
    assert_eq!(csv.lines().count() as u64, steps + 1);
    let trace = std::fs::read_to_string(p("trace.json")).expect("trace");
    assert!(trace.starts_with("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"));
    assert!(trace.ends_with("}\n]}\n"));
    let count = |name: &str| trace.lines().filter(|l| l.contains(&format!("\"name\":\"{name}\""))).count() as u64;
    assert_eq!(count("step"), steps);
    assert_eq!(count("finished"), 50_000);
    assert_eq!(count("thread_name"), 50_001, "the steps track and one per request");
    let svg = std::fs::read_to_string(p("plot/timeline.svg")).expect("timeline");
    assert!(svg.contains("step ms (max)"));
    // No scratch file is left beside the outputs.
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["plot", "steps.csv", "trace.json"]);
}

/// An output that cannot be written fails before the run (before, the run
/// went to its end first, here a stall: exit 2), and a run that fails
/// leaves no output it had started.
#[test]
fn an_unwritable_output_fails_first_and_a_failed_run_leaves_no_output() {
    let dir = tempdir();
    // Every request is too long for the context: the closed loop stalls.
    let stalling = [
        "run",
        "scenarios/base.yml",
        "-q",
        "--set",
        "workload.arrivals={closed: {concurrency: 2, think_time_s: 0}}",
        "--set",
        "workload.requests=null",
        "--set",
        "workload.duration_s=10",
        "--set",
        "workload.prompt_tokens=40000",
    ];
    let missing = dir.path().join("no/such/dir/steps.csv");
    TestCommand::new(&stalling)
        .arg("--steps-csv")
        .arg(&missing)
        .fails_with(1)
        .stderr_has(&["cannot write", "no/such/dir/steps.csv"]);
    for flag in ["--trace-events", "--steps-csv"] {
        TestCommand::new(&stalling).arg(flag).arg(dir.path()).fails_with(1).stderr_has(&["cannot write"]);
    }
    let same = dir.path().join("same.csv");
    TestCommand::new(&stalling)
        .arg("--steps-csv")
        .arg(&same)
        .arg("--trace-events")
        .arg(&same)
        .fails_with(2)
        .stderr_has(&["--steps-csv and --trace-events both write", "its own file"]);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    TestCommand::new(&stalling)
        .arg("--steps-csv")
        .arg(out.join("s.csv"))
        .arg("--trace-events")
        .arg(out.join("t.json"))
        .arg("--plot")
        .arg(out.join("plot"))
        .fails_with(2)
        .stderr_has(&["the run stopped"]);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "the failed run left files");
}

/// Outputs on stdout come in the same order as before they were streamed:
/// the result JSON, then the steps CSV, then the trace.
#[test]
fn streamed_outputs_on_stdout_follow_the_result_json() {
    let run = |flags: &[&str]| {
        let out =
            TestCommand::new(&["run", "scenarios/base.yml", "--set", "workload.requests=40"]).args_from(flags).ok();
        out.stdout()
    };
    let json = run(&["--json", "-"]);
    let steps = run(&["--steps-csv", "-"]);
    let trace = run(&["--trace-events", "-"]);
    assert!(json.starts_with('{') && steps.starts_with("index,") && trace.starts_with("{\"displayTimeUnit\""));
    let all = run(&["--trace-events", "-", "--steps-csv", "-", "--json", "-"]);
    assert_eq!(all, format!("{json}{steps}{trace}"));
}

/// `llmsim trace` writes each request's class, and a trace workload with
/// that `class` column replays the same classes: the per-class results
/// match the generated run's.
#[test]
fn a_traced_workload_keeps_its_classes() {
    let dir = tempdir();
    let csv = dir.path().join("classes.csv");
    let base = "scenarios/workloads/priority-classes.yml";
    TestCommand::new(&["trace", base, "--set", "workload.requests=400", "-o"]).arg(csv.to_str().unwrap()).ok();
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("arrival_s,prompt_tokens,output_tokens,class\n"), "{}", &text[..80]);
    let interactive = text.lines().filter(|l| l.ends_with(",interactive")).count();
    assert!((60..=140).contains(&interactive), "{interactive} of 400 interactive, expected about 100");
    let generated = run_json(&[base, "--set", "workload.requests=400"]);
    let replayed = run_json(&[
        base,
        "--set",
        &format!("workload.arrivals={{trace: {}}}", csv.display()),
        "--set",
        "workload.requests=null",
        "--set",
        "workload.prompt_tokens=null",
        "--set",
        "workload.output_tokens=null",
    ]);
    assert_eq!(generated["classes"], replayed["classes"]);
    assert_eq!(replayed["classes"][0]["requests"]["total"], interactive as u64);
}

/// Under `engine: sglang` a prefix cache is SGLang's radix cache, whose
/// admission reserves `new_token_ratio` (0.7 at start) of each running
/// request's remaining output whatever the clients send; without it,
/// `ignore_eos` requests reserve their output whole and never retract.
#[test]
fn sglang_with_its_radix_cache_admits_against_a_ratio_of_seven_tenths() {
    let run = |caching: &str, ratio: Option<&str>| {
        let mut args = vec![
            "scenarios/experiments/bases/sglang-burst.yml".to_string(),
            "--set".into(),
            "workload.arrivals={poisson: {rate: 20}}".into(),
            "--set".into(),
            "workload.requests=64".into(),
            "--set".into(),
            "workload.prompt_tokens=128".into(),
            "--set".into(),
            "workload.output_tokens=512".into(),
            "--set".into(),
            format!("model.kv_cache.prefix_caching={caching}"),
        ];
        if let Some(r) = ratio {
            args.extend(["--set".to_string(), format!("scheduler.new_token_ratio={r}")]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let v = run_json(&refs);
        let figures = |k: &str| v[k].to_string();
        (v["preemptions"].as_u64().expect("preemptions"), figures("ttft_ms"), figures("tpot_ms"), figures("e2e_ms"))
    };
    let radix = run("true", None);
    assert_eq!(radix, run("true", Some("0.7")), "the radix cache's default ratio is 0.7");
    assert_eq!(radix, run("false", Some("0.7")), "unique prompts: the cache changes only the ratio");
    let whole = run("false", None);
    assert_eq!(whole.0, 0, "reserving every output whole never retracts");
    assert!(radix.0 > 0, "the ratio admits more than fits and retracts: {radix:?}");
    assert_ne!(radix.1, whole.1);
    // The summary says which reservation ran.
    let summary = |caching: &str| {
        TestCommand::new(&["run", "scenarios/experiments/bases/sglang-burst.yml"])
            .arg("--set")
            .arg(format!("model.kv_cache.prefix_caching={caching}"))
            .ok()
            .stdout()
    };
    let on = summary("true");
    assert!(on.contains("SGLang's scheduler (max_prefill_tokens 16384, new_token_ratio 0.7)"), "{on}");
    let off = summary("false");
    assert!(off.contains("SGLang's scheduler (max_prefill_tokens 16384, remaining output reserved whole)"), "{off}");
}
