//! Prefix caching in `llmsim serve` (docs/prefix-caching.md, "In the server"):
//! hits on real token ids, `usage.prompt_tokens_details.cached_tokens`,
//! vLLM's prefix-cache counters, and a recording that replays offline to
//! the same hits. Expected figures are derived by hand from the built-in
//! tokenizer's rules (README "Prompt tokens"): in `"a" + " a" x (n - 1)`
//! every word is one token, so such a prompt is `n` tokens.

use super::harness::*;
use crate::support::*;

/// A scheduler with prefix caching on (blocks of 16 tokens) and the same
/// model without it.
const MODELS: &str = "
models:
  - name: cached
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288, block_size: 16, prefix_caching: true}
    scheduler: {max_batch_tokens: 8192, max_num_sequences: 64}
  - name: plain
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288, block_size: 16}
";

/// `n` one-token words, the first without a leading space.
fn words(word: &str, n: usize) -> String {
    let mut s = word.to_string();
    for _ in 1..n {
        s.push(' ');
        s.push_str(word);
    }
    s
}

fn completion(model: &str, prompt: &str, extra: &str) -> String {
    let p = serde_json::to_string(prompt).expect("json");
    format!(r#"{{"model":"{model}","prompt":{p},"max_tokens":4{extra}}}"#)
}

fn cached(v: &serde_json::Value) -> Option<u64> {
    v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64()
}

#[test]
fn two_requests_sharing_a_two_block_prefix_report_32_cached_tokens() {
    let server = Server::start_with(MODELS, &[]);
    // A shared head of 40 tokens ("a" x 40), then 10 tokens of each
    // request's own (" b" x 10, " c" x 10, ...): 50 prompt tokens.
    let head = words("a", 40);
    let prompt = |w: &str| format!("{head} {}", words(w, 10));
    let first = server.post("/v1/completions", &completion("cached", &prompt("b"), ""));
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json();
    assert_eq!(first["usage"]["prompt_tokens"], 50);
    assert_eq!(cached(&first), Some(0), "nothing is cached yet: {first}");
    // The second request shares tokens 0..40: blocks [0,16) and [16,32) are
    // the same ids, block [32,48) holds " b" in one and " c" in the other.
    // It may look up floor((50 - 1) / 16) = 3 blocks and hits 2: 32 tokens.
    let second = server.post("/v1/completions", &completion("cached", &prompt("c"), "")).json();
    assert_eq!(cached(&second), Some(32), "{second}");
    // Streamed, the final usage chunk carries it (chat this time): the
    // framing `<|im_start|>user\n` (3 tokens) comes before the content, so
    // two chats whose contents share 40 tokens share 43: 2 blocks again.
    let chat = |w: &str, extra: &str| server.chat("cached", &prompt(w), extra);
    let c1 = chat("d", r#""max_tokens":4"#).json();
    assert_eq!(c1["usage"]["prompt_tokens"], 3 + 50 + 2 + 3);
    assert_eq!(cached(&c1), Some(0), "a chat's framing differs from a completion's first token");
    let streamed = chat("e", r#""max_tokens":4,"stream":true,"stream_options":{"include_usage":true}"#);
    let events = streamed.events();
    let usage: serde_json::Value = serde_json::from_str(&events[events.len() - 2]).expect("usage chunk");
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert_eq!(cached(&usage), Some(32), "{usage}");
    // vLLM's counters, in tokens: every admission queries its prompt (no
    // preemption here) and finds the cached tokens.
    let queries = "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"cached\"}";
    let hits = "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"cached\"}";
    assert_eq!(server.metric(queries), Some((50 + 50 + 58 + 58) as f64));
    assert_eq!(server.metric(hits), Some((32 + 32) as f64));
    // Without prefix caching: no details in the usage, counters at zero.
    let plain = server.post("/v1/completions", &completion("plain", &prompt("b"), "")).json();
    // (vLLM's whole response has the key, null.)
    assert!(plain["usage"]["prompt_tokens_details"].is_null(), "{plain}");
    let plain_q = "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"plain\"}";
    assert_eq!(server.metric(plain_q), Some(0.0));
    server.stop();
}

#[test]
fn a_conversation_resent_with_its_answer_hits_its_whole_history() {
    let server = Server::start_with(MODELS, &[]);
    // The test responses echo the last user message, so the answer is known:
    // 30 tokens of "x", and max_tokens 30 takes all of it.
    let question = words("x", 30);
    let t1 = server.chat("cached", &question, r#""max_tokens":30"#).json();
    let answer = t1["choices"][0]["message"]["content"].as_str().expect("answer").to_string();
    assert_eq!(answer, question);
    // Turn 1: P = 3 + 30 + 2 + 3 = 38, N = 30; the engine computed the first
    // 67 tokens, so floor(67 / 16) = 4 blocks hold its history.
    assert_eq!(t1["usage"]["prompt_tokens"], 38);
    let msgs = serde_json::json!([
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "more"},
    ]);
    let body = format!(r#"{{"model":"cached","max_tokens":2,"messages":{msgs}}}"#);
    let t2 = server.post("/v1/chat/completions", &body).json();
    // Turn 2 starts with turn 1's 38 prompt tokens and its 30 answer tokens.
    assert_eq!(t2["usage"]["prompt_tokens"], 38 + 30 + 2 + 3 + 1 + 2 + 3);
    assert_eq!(cached(&t2), Some(64), "{t2}");
    server.stop();
}

/// The scenario the recording model runs: prefix caching, a small cache and
/// a small budget, so hits, evictions and chunked prefills all happen.
fn cached_scenario() -> String {
    test_scenario(
        "cached",
        8192,
        "block_size: 16, num_blocks: 120, prefix_caching: true",
        "max_batch_tokens: 512, max_num_sequences: 16",
        "",
    )
}

#[test]
fn a_recorded_session_with_shared_prefixes_replays_to_the_same_hits() {
    let dir = tempdir();
    let record = dir.path().join("rec.csv");
    let (server, scenario) = Server::from_scenario(dir.path(), "cached", &cached_scenario(), &record_flags(&record));
    let port = server.port;
    // Three system prompts of different lengths, each user's own question,
    // and every third client a second turn that resends its first answer.
    staggered_clients(24, 9, move |i| {
        let system = words(["s", "t", "u"][i % 3], [100, 180, 60][i % 3]);
        let question = words(&format!("q{}", i % 5), 10 + i);
        let mut msgs = vec![
            serde_json::json!({"role": "system", "content": system}),
            serde_json::json!({"role": "user", "content": question}),
        ];
        let send = |msgs: &[serde_json::Value]| {
            let body = format!(r#"{{"model":"cached","max_tokens":20,"messages":{}}}"#, serde_json::json!(msgs));
            let r = http(port, "POST", "/v1/chat/completions", &body);
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()
        };
        let first = send(&msgs);
        if i % 3 == 0 {
            let answer = first["choices"][0]["message"]["content"].clone();
            msgs.push(serde_json::json!({"role": "assistant", "content": answer}));
            msgs.push(serde_json::json!({"role": "user", "content": "go on"}));
            send(&msgs);
        }
    });
    let hits = server.metric("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"cached\"}").expect("hits");
    let queries = server.metric("vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"cached\"}").expect("q");
    server.stop();
    let recorded = read(&record);
    assert!(recorded.lines().next().unwrap_or_default().ends_with(",cached_tokens,block_ids,block_size"), "{recorded}");
    let (offline, result) = replay(dir.path(), &scenario, &record);
    let live = pick(&recorded, &REPLAYED);
    assert_eq!(live.len(), 32, "24 first turns and 8 second turns");
    assert_eq!(live, pick(&offline, &REPLAYED), "live:\n{recorded}\noffline:\n{offline}");
    // Hits: the server's counters are the offline prediction's.
    let p = &result["prefix_cache"];
    assert_eq!(p["hit_tokens"].as_f64(), Some(hits), "{p}");
    assert_eq!(p["queried_tokens"].as_f64(), Some(queries), "{p}");
    assert!(hits > 0.0 && hits < queries, "the session should hit some and miss some: {p}");
    // Per request: the cached tokens the server reported are the offline ones.
    let cached = |text: &str| pick(text, &["id", "cached_tokens"]);
    assert_eq!(cached(&recorded), cached(&offline));
    let second_turns_hit = cached(&recorded).iter().filter(|r| r[1].parse::<u32>().unwrap_or(0) >= 64).count();
    assert!(second_turns_hit >= 8, "second turns and shared system prompts hit whole blocks:\n{recorded}");
}

#[test]
fn a_recording_replayed_with_another_block_size_or_broken_ids_is_refused() {
    let dir = tempdir();
    let scenario = write(dir.path(), "cached.yml", &cached_scenario());
    let run = |csv: &str| {
        let trace = write(dir.path(), "t.csv", csv);
        TestCommand::new(&["run"])
            .arg(&scenario)
            .arg("--set")
            .arg(format!("workload={{arrivals: {{trace: {}}}}}", trace.display()))
            .arg("-q")
            .fails_with(2)
    };
    // 40 + 9 - 1 = 48 tokens: 3 full blocks of 16 (6 of 8); 40 + 17 - 1 = 56:
    // 7 full blocks of 8.
    let head = "arrival_s,prompt_tokens,output_tokens,block_ids,block_size\n";
    run(&format!("{head}0.5,40,9,0-1,16\n")).stderr_has(&["line 2, column block_ids", "2 ids", "3 full blocks of 16"]);
    run(&format!("{head}0.5,40,9,0-3,16\n")).stderr_has(&["line 2, column block_ids", "more ids than the row's 3"]);
    run(&format!("{head}0.5,40,9,0-2,8\n")).stderr_has(&["line 2, column block_ids", "3 ids", "6 full blocks of 8"]);
    run(&format!("{head}0.5,40,17,0-6,8\n"))
        .stderr_has(&["block_ids count blocks of 8 tokens, but model.kv_cache.block_size is 16"]);
    run(&format!("{head}0.5,40,9,2-0,16\n")).stderr_has(&["`2-0` is not a range"]);
    run(&format!("{head}0.5,40,9,0 x 2,16\n")).stderr_has(&["`x` is not an id"]);
    run(&format!("{head}0.5,40,9,0-2,\n")).stderr_has(&["column block_size", "block_ids need the block size"]);
    run(&format!("{head}0.5,40,9,0-2,16\n0.6,40,17,0-4,8\n"))
        .stderr_has(&["line 3, column block_size", "differs from the 16 of the rows before"]);
    run("arrival_s,prompt_tokens,output_tokens,block_ids\n0.5,40,9,0-2\n")
        .stderr_has(&["columns block_ids and block_size go together"]);
    run("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens,block_ids,block_size\n0.5,40,9,sys,16,0-2,16\n")
        .stderr_has(&["given with prefix_id or session_id"]);
}

/// The `cached` model as a scenario file, with a cache that holds every
/// prefix (no `num_blocks`: the whole memory left by the weights).
fn big_cache() -> String {
    test_scenario(
        "big",
        4096,
        "block_size: 16, prefix_caching: true",
        "max_batch_tokens: 8192, max_num_sequences: 64",
        "",
    )
}

#[test]
fn a_shared_prefix_bench_measures_the_hits_the_planner_predicts_from_its_trace() {
    let dir = tempdir();
    let (server, _) = Server::from_scenario(dir.path(), "big", &big_cache(), &[]);
    for (endpoint, framing) in [("completions", 0u64), ("chat", 3)] {
        let (json, trace) = (dir.path().join(format!("{endpoint}.json")), dir.path().join(format!("{endpoint}.csv")));
        TestCommand::new(&["bench", "--base-url"])
            .arg(format!("http://127.0.0.1:{}", server.port))
            .arg("--model")
            .arg("big")
            .arg("--endpoint")
            .arg(endpoint)
            .arg("--rate")
            .arg("40")
            .arg("--requests")
            .arg("40")
            .arg("--prompt-tokens")
            .arg("20")
            .arg("--output-tokens")
            .arg("5")
            .arg("--shared-prefix")
            .arg("4:100")
            .arg("--json")
            .arg(&json)
            .arg("--trace")
            .arg(&trace)
            .arg("-q")
            .ok();
        let measured: serde_json::Value = serde_json::from_str(&read(&json)).expect("bench JSON");
        let live = &measured["llmsim_prefix_cache"];
        assert_eq!(live["reported"], 40, "{live}");
        // By hand: the first request of each of the 4 groups misses; the
        // other 36 find the prefix's full blocks: the 100 prefix tokens (and
        // on the chat endpoint the 3 tokens of `<|im_start|>user\n` before
        // them) hold floor((100 + framing) / 16) = 6 blocks of 16.
        let expected = 36 * ((100 + framing) / 16) * 16;
        assert_eq!(live["cached_tokens"].as_u64(), Some(expected), "{endpoint}: {live}");
        let out = dir.path().join(format!("{endpoint}-offline.json"));
        TestCommand::new(&["run"])
            .arg(dir.path().join("big.yml"))
            .arg("--set")
            .arg(format!("workload={{arrivals: {{trace: {}}}}}", trace.display()))
            .arg("--json")
            .arg(&out)
            .arg("-q")
            .ok();
        let predicted: serde_json::Value = serde_json::from_str(&read(&out)).expect("result JSON");
        let p = &predicted["prefix_cache"];
        assert_eq!(p["hit_tokens"].as_u64(), Some(expected), "{endpoint}: {p}");
        assert_eq!(p["queried_tokens"], live["prompt_tokens"], "{endpoint}: {p} vs {live}");
    }
    server.stop();
}

#[test]
fn bad_shared_prefix_flags_are_refused() {
    for (flag, fragment) in [
        ("4", "give GROUPS:TOKENS"),
        ("0:100", "GROUPS must be a whole number in [1, 1000000]"),
        ("4:0", "TOKENS must be a whole number in [1, 1000000]"),
        ("4:x", "TOKENS must be"),
        ("x:5", "GROUPS must be"),
    ] {
        let mut cmd = TestCommand::new(&["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "1"]);
        for a in ["--requests", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--shared-prefix", flag] {
            cmd = cmd.arg(a);
        }
        cmd.fails_with(2).stderr_has(&[&format!("--shared-prefix `{flag}` is not allowed"), fragment]);
    }
}

#[test]
fn a_multi_turn_bench_hits_each_history_the_planner_predicts() {
    let dir = tempdir();
    let (server, _) = Server::from_scenario(dir.path(), "big", &big_cache(), &[]);
    let (json, trace) = (dir.path().join("turns.json"), dir.path().join("turns.csv"));
    let flags = [
        "--model",
        "big",
        "--endpoint",
        "chat",
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--prompt-tokens",
        "20",
        "--output-tokens",
        "5",
        "--turns",
        "3",
        "--think-time",
        "0.01",
    ];
    with(TestCommand::new(&["bench", "--base-url"]).arg(format!("http://127.0.0.1:{}", server.port)), &flags)
        .arg("--json")
        .arg(&json)
        .arg("--trace")
        .arg(&trace)
        .arg("-q")
        .ok();
    // By hand, each of the 2 conversations: turn 1 has P = 20 and N = 5;
    // turn 2 resends them plus 20 new tokens (P = 45), turn 3 likewise
    // (P = 45 + 5 + 20 = 70). Turn 2 finds the floor((20 + 5 - 1) / 16) = 1
    // block turn 1 computed, turn 3 the floor((45 + 5 - 1) / 16) = 3 blocks
    // turn 2 computed: 16 and 48 tokens, 64 a conversation.
    let per_turn = [(20u64, 0u64), (45, 16), (70, 48)];
    let measured: serde_json::Value = serde_json::from_str(&read(&json)).expect("bench JSON");
    let live = &measured["llmsim_prefix_cache"];
    assert_eq!(live["reported"], 6, "{live}");
    assert_eq!(live["prompt_tokens"].as_u64(), Some(2 * (20 + 45 + 70)), "{live}");
    assert_eq!(live["cached_tokens"].as_u64(), Some(2 * 64), "{live}");
    assert_eq!(measured["llmsim_sessions"], serde_json::json!([0, 0, 0, 1, 1, 1]));
    let sent = read(&trace);
    assert!(sent.starts_with("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens,session_id\n"), "{sent}");
    for conv in ["c0", "c1"] {
        let prompts: Vec<&str> = sent
            .lines()
            .filter(|l| l.ends_with(&format!(",{conv}")))
            .map(|l| l.split(',').nth(1).expect("prompt_tokens"))
            .collect();
        assert_eq!(prompts, ["20", "45", "70"], "{sent}");
    }
    // The planner, on the trace the bench wrote, predicts the same hit for
    // every turn.
    let (out, reqs) = (dir.path().join("predicted.json"), dir.path().join("requests.csv"));
    TestCommand::new(&["run"])
        .arg(dir.path().join("big.yml"))
        .arg("--trace-from")
        .arg(&trace)
        .arg("--json")
        .arg(&out)
        .arg("--requests-csv")
        .arg(&reqs)
        .arg("-q")
        .ok();
    let predicted: serde_json::Value = serde_json::from_str(&read(&out)).expect("result JSON");
    assert_eq!(predicted["prefix_cache"]["hit_tokens"], live["cached_tokens"], "{predicted}");
    let csv = read(&reqs);
    let header: Vec<&str> = csv.lines().next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}: {csv}"));
    let (prompt, cached_col) = (col("prompt_tokens"), col("cached_tokens"));
    let mut rows: Vec<(u64, u64)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[prompt].parse().expect("prompt"), f[cached_col].parse().expect("cached"))
        })
        .collect();
    rows.sort_unstable();
    let mut expected: Vec<(u64, u64)> = per_turn.iter().chain(&per_turn).copied().collect();
    expected.sort_unstable();
    assert_eq!(rows, expected, "{csv}");
    server.stop();
}

#[test]
fn bad_turns_flags_are_refused() {
    let base = ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--rate", "1", "--requests", "4"];
    for (extra, fragment) in [
        (&["--prompt-tokens", "20", "--output-tokens", "2", "--turns", "2"][..], "--turns 2 needs --endpoint chat"),
        (
            &["--endpoint", "chat", "--prompt-tokens", "20", "--output-tokens", "2", "--turns", "0"][..],
            "--turns 0 is not allowed: must be in [1, 10000]",
        ),
        (
            &["--endpoint", "chat", "--prompt-tokens", "20", "--output-tokens", "2", "--turns", "2", "--think-time=-1"]
                [..],
            "--think-time -1 is not allowed",
        ),
        (
            &[
                "--endpoint",
                "chat",
                "--prompt-tokens",
                "20",
                "--output-tokens",
                "2",
                "--turns",
                "2",
                "--shared-prefix",
                "2:10",
            ][..],
            "--turns 2 with --shared-prefix is not supported",
        ),
        (
            &["--endpoint", "chat", "--prompt-tokens", "10", "--output-tokens", "2", "--turns", "2"][..],
            "give at least 11",
        ),
    ] {
        with(TestCommand::new(&base), extra).fails_with(2).stderr_has(&[fragment]);
    }
}

fn with(cmd: TestCommand, args: &[&str]) -> TestCommand {
    args.iter().fold(cmd, |c, a| c.arg(a))
}
