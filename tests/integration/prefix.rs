//! Integration tests: prefix caching through the command line. The outputs
//! it adds appear only when it is on, hits of a trace with content columns
//! and of a Mooncake-style trace come out as derived by hand, `llmsim
//! trace` writes what replays exactly, and every bad input listed in docs/prefix-caching.md
//! ("Outputs") exits 2 with a message naming the file, the place and what is allowed.

use crate::support::*;
use serde_json::Value;

const BASE: &str = "scenarios/base.yml";

fn json(out: &Out) -> Value {
    serde_json::from_str(&out.stdout()).expect("result JSON")
}

#[test]
fn without_the_flag_no_output_changes_and_with_it_the_cache_columns_appear() {
    let dir = tempdir();
    let run = |extra: &[&str], tag: &str| {
        let (req, steps) = (dir.path().join(format!("r{tag}.csv")), dir.path().join(format!("s{tag}.csv")));
        let mut cmd = TestCommand::new(&["run", BASE, "--json", "-", "--set", "workload.requests=300"]);
        for a in extra {
            cmd = cmd.arg(a);
        }
        let out = cmd.arg("--requests-csv").arg(&req).arg("--steps-csv").arg(&steps).ok();
        let read = |p: &std::path::Path| std::fs::read_to_string(p).expect("csv");
        (out.stdout(), read(&req), read(&steps))
    };
    let plain = run(&[], "0");
    let off = run(&["--set", "model.kv_cache.prefix_caching=false"], "1");
    assert_eq!(plain, off, "an explicit false is the default, byte for byte");
    assert!(!plain.0.contains("prefix_cache"));
    assert!(!plain.1.lines().next().unwrap().contains("cached_tokens"));
    assert!(!plain.2.lines().next().unwrap().contains("cached_blocks"));
    let on = run(&["--set", "model.kv_cache.prefix_caching=true"], "2");
    let result: Value = serde_json::from_str(&on.0).unwrap();
    let pc = &result["prefix_cache"];
    assert_eq!(pc["hit_tokens"], 0, "unique prompts never hit");
    assert_eq!(pc["queried_tokens"], 300 * 512, "300 requests of 512 prompt tokens, none preempted");
    assert!(on.1.lines().next().unwrap().ends_with(",preemptions,cached_tokens"));
    assert!(on.2.lines().next().unwrap().ends_with(",memory_ms,cached_blocks,evictions"));
    // Unique content changes no timing: the same schedule either way.
    let plain_result: Value = serde_json::from_str(&plain.0).unwrap();
    for key in ["requests", "throughput", "ttft_ms", "itl_ms", "e2e_ms", "steps", "kv", "preemptions"] {
        assert_eq!(plain_result[key], result[key], "{key}");
    }
}

#[test]
fn a_trace_with_content_columns_hits_as_derived_by_hand() {
    // scenarios/workloads/prefix-trace.csv, block size 16. The last token
    // of a request is never computed, so a request of P + N tokens leaves
    // floor((P + N - 1) / 16) full blocks registered.
    // row 0: support-bot prefix, first of its kind          -> 0
    // row 1: support-bot (1,000 tokens): floor(1000/16)*16  -> 992
    // row 2: code-bot, first of its kind                     -> 0
    // row 3: continues row 0 (1,200 + 80): floor(1279/16)*16 -> 1,264
    // row 4: support-bot                                     -> 992
    // row 5: continues row 2 (700 + 60): floor(759/16)*16    -> 752
    // row 6: continues row 3 (1,400 + 90): floor(1489/16)*16 -> 1,488
    let dir = tempdir();
    let csv = dir.path().join("requests.csv");
    let out = TestCommand::new(&["run", "scenarios/workloads/prefix-trace.yml", "--json", "-", "--requests-csv"])
        .arg(&csv)
        .ok();
    let text = std::fs::read_to_string(&csv).unwrap();
    let cached: Vec<&str> = text.lines().skip(1).map(|l| l.rsplit(',').next().unwrap()).collect();
    assert_eq!(cached, ["0", "992", "0", "1264", "992", "752", "1488"]);
    let r = json(&out);
    assert_eq!(r["prefix_cache"]["hit_tokens"], 992 + 1264 + 992 + 752 + 1488);
    assert_eq!(r["prefix_cache"]["queried_tokens"], 1200 + 1150 + 700 + 1400 + 1300 + 900 + 1600);
}

#[test]
fn a_mooncake_trace_shares_the_blocks_its_hash_ids_share() {
    // Block size 512 per id, 16 in the engine. Row 1 shares ids 1 and 2
    // with row 0, whose 1,000 tokens cover id 1 and the first 488 tokens of
    // id 2: the first floor(1000 / 16) = 62 engine blocks (992 tokens) are
    // the same tokens; block 62 mixes row 0's answer in. Row 2 shares
    // nothing.
    let dir = tempdir();
    write(
        dir.path(),
        "t.jsonl",
        "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 4, \"hash_ids\": [1, 2]}
{\"timestamp\": 500, \"input_length\": 1500, \"output_length\": 4, \"hash_ids\": [1, 2, 3]}
{\"timestamp\": 500.5, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [9]}
",
    );
    let scenario = std::fs::read_to_string(repo("scenarios/workloads/mooncake.yml"))
        .unwrap()
        .replace("mooncake-trace.jsonl", &dir.path().join("t.jsonl").display().to_string());
    let path = write(dir.path(), "m.yml", &scenario);
    let csv = dir.path().join("r.csv");
    TestCommand::new(&["run"]).arg(&path).arg("--quiet").arg("--requests-csv").arg(&csv).ok();
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows[1][1], "0.500000000", "timestamps are milliseconds");
    let cached: Vec<&str> = rows.iter().map(|r| *r.last().unwrap()).collect();
    assert_eq!(cached, ["0", "992", "0"]);
}

#[test]
fn the_summary_prints_the_hit_rate() {
    let out = TestCommand::new(&["run", "scenarios/workloads/prefix-trace.yml"]).ok().stdout();
    assert!(out.contains("prefix caching on"), "{out}");
    assert!(out.contains("prefix     hit rate 66.5%: 5,488 of 8,250 prompt tokens found in the cache"), "{out}");
    let plain = TestCommand::new(&["run", BASE, "--set", "workload.requests=20"]).ok().stdout();
    assert!(!plain.contains("hit rate") && !plain.contains("prefix caching"), "{plain}");
}

#[test]
fn a_generated_trace_of_prefixes_and_sessions_replays_to_the_same_result() {
    let dir = tempdir();
    for s in ["scenarios/workloads/shared-prefix.yml", "scenarios/workloads/sessions.yml"] {
        let trace = dir.path().join("trace.csv");
        TestCommand::new(&["trace", s, "-o"]).arg(&trace).arg("--set").arg("workload.requests=400").ok();
        let text = std::fs::read_to_string(&trace).unwrap();
        assert!(
            text.starts_with("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens,session_id\n"),
            "{}",
            &text[..200]
        );
        assert!(text.contains(",sys:0,"), "the drawn groups are named");
        let original = TestCommand::new(&["run", s, "--json", "-", "--set", "workload.requests=400"]).ok();
        let replay = TestCommand::new(&["run", s, "--json", "-", "--trace-from"]).arg(&trace).ok();
        let (a, b) = (json(&original), json(&replay));
        for key in ["requests", "throughput", "ttft_ms", "itl_ms", "e2e_ms", "steps", "kv", "prefix_cache"] {
            assert_eq!(a[key], b[key], "{s}: {key} differs after replay");
        }
        assert!(a["prefix_cache"]["hit_tokens"].as_u64().unwrap() > 0);
    }
}

#[test]
fn the_same_prefix_scenario_gives_the_same_bytes_twice() {
    let run = || TestCommand::new(&["run", "scenarios/workloads/sessions.yml", "--json", "-"]).ok().stdout();
    assert_eq!(run(), run());
}

// ---- bad input: exit 2, naming the place and what is allowed ----

fn trace_scenario(dir: &std::path::Path, trace_name: &str, trace: &str, extra: &str) -> std::path::PathBuf {
    write(dir, trace_name, trace);
    write(
        dir,
        "s.yml",
        &format!(
            "hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: 32768
  weights: {{parameters_billions: 6.74}}
  kv_cache: {{bytes_per_token: 524288, prefix_caching: true}}
workload:
  arrivals: {{trace: {trace_name}}}
{extra}"
        ),
    )
}

#[test]
fn prefix_tokens_larger_than_the_prompt_are_refused_naming_the_line() {
    let dir = tempdir();
    let csv = "arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,sys,50\n1,100,5,sys,120\n";
    let path = trace_scenario(dir.path(), "t.csv", csv, "");
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&[
        "t.csv",
        "line 3, column prefix_tokens",
        "120 is larger than prompt_tokens 100",
    ]);
}

#[test]
fn a_session_row_shorter_than_its_history_is_refused_naming_both_lines() {
    let dir = tempdir();
    let csv = "arrival_s,prompt_tokens,output_tokens,session_id\n0,100,50,u1\n1,30,5,u2\n2,120,5,u1\n";
    let path = trace_scenario(dir.path(), "t.csv", csv, "");
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&[
        "t.csv",
        "line 4, column prompt_tokens",
        "120 is shorter than the history it continues",
        "session `u1` was last at line 2",
        "100 + output_tokens 50 = 150",
    ]);
}

#[test]
fn zero_groups_are_refused() {
    TestCommand::new(&["run", BASE, "--set", "workload.shared_prefix={groups: 0, tokens: 100}"])
        .fails_with(2)
        .stderr_has(&["workload.shared_prefix.groups", "0 is not allowed", "from 1"]);
}

#[test]
fn hash_ids_that_do_not_match_the_block_size_are_refused() {
    let dir = tempdir();
    let jsonl = "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 4, \"hash_ids\": [1, 2]}
{\"timestamp\": 1, \"input_length\": 1100, \"output_length\": 4, \"hash_ids\": [1, 2]}
";
    let path = trace_scenario(dir.path(), "t.jsonl", jsonl, "");
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&[
        "t.jsonl",
        "line 2, hash_ids",
        "2 hash ids for 1100 input tokens",
        "ceil(1100 / 512) = 3",
        "workload.hash_block_size",
    ]);
    // The same file is consistent with 600 tokens per id (2 ids each).
    let path = trace_scenario(dir.path(), "t.jsonl", jsonl, "  hash_block_size: 600\n");
    TestCommand::new(&["run"]).arg(&path).arg("--quiet").ok();
}

#[test]
fn content_keys_in_the_wrong_place_are_refused() {
    let dir = tempdir();
    let csv = "arrival_s,prompt_tokens,output_tokens\n0,100,5\n";
    let path = trace_scenario(dir.path(), "t.csv", csv, "  shared_prefix: {groups: 2, tokens: 10}\n");
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&[
        "workload.shared_prefix",
        "not allowed with a trace",
        "prefix_id",
    ]);
    let path = trace_scenario(dir.path(), "t.csv", csv, "  hash_block_size: 64\n");
    TestCommand::new(&["run"])
        .arg(&path)
        .fails_with(2)
        .stderr_has(&["workload.hash_block_size", "only applies to a JSONL trace"]);
    let csv = "arrival_s,prompt_tokens,output_tokens,prefix_id\n0,100,5,x\n";
    let path = trace_scenario(dir.path(), "t.csv", csv, "");
    TestCommand::new(&["run"])
        .arg(&path)
        .fails_with(2)
        .stderr_has(&["line 1", "prefix_id and prefix_tokens go together"]);
    TestCommand::new(&["run", BASE, "--set", "workload.sessions={turns: 0}"])
        .fails_with(2)
        .stderr_has(&["workload.sessions.turns", "0 is not allowed"]);
    TestCommand::new(&["run", BASE, "--set", "workload.sessions={turns: 2, think_s: -1}"])
        .fails_with(2)
        .stderr_has(&["workload.sessions.think_s", "-1 is not allowed"]);
}

/// Issue 34: prefix caching with `num_blocks` at its largest reserved a
/// hash index of 32 MB in each replica up front, and 2,000 replicas
/// aborted allocating 64 GB. The index grows by use now (docs/prefix-caching.md:
/// a huge `num_blocks` costs nothing until used): the run fits in 512 MiB
/// of address space.
#[test]
fn two_thousand_replicas_at_the_largest_num_blocks_run_in_little_memory() {
    let out = TestCommand::new(&[
        "run",
        BASE,
        "--json",
        "-",
        "-q",
        "--set",
        "model.kv_cache.prefix_caching=true",
        "--set",
        "model.kv_cache.num_blocks=4294967295",
        "--set",
        "cluster={replicas: 2000}",
        "--set",
        "workload.requests=2000",
    ])
    .bounded(120, 512);
    assert_eq!(out.code(), 0, "{}", out.describe());
    let result = json(&out);
    assert_eq!(result["requests"]["completed"], 2000);
    assert_eq!(result["replicas"].as_array().map(Vec::len), Some(2000));
}
