//! Replicas behind a router in `llmsim serve` (a model's `cluster:`), on a
//! real socket: the replica in every answer, the per-replica metric labels,
//! prefix affinity, the record that replays to the planner's cluster run,
//! and the config errors.

use std::io::{Read, Write};

use super::harness::*;
use crate::support::*;

/// The test model of `harness::MODELS` (a base model on a test GPU), as
/// `NAME` with the given `cluster:` and extra `kv_cache` keys.
fn fleet_model(name: &str, cluster: &str, kv_extra: &str) -> String {
    format!(
        "
  - name: {name}
    hardware: {{name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
    model:
      context_length: 4096
      weights: {{parameters_billions: 6.74}}
      kv_cache: {{bytes_per_token: 524288{kv_extra}}}
    scheduler: {{max_batch_tokens: 8192, max_num_sequences: 64}}
    cluster: {cluster}
"
    )
}

fn words(word: &str, n: usize) -> String {
    vec![word; n].join(" ")
}

#[test]
fn round_robin_alternates_replicas_and_labels_each_ones_metrics() {
    let models = format!("models:{}{}", fleet_model("rr", "{replicas: 2, router: round_robin}", ""), {
        // A plain model beside it: no replica header, engine="0" only.
        "  - name: fixed\n    engine: fixed\n    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}\n"
    });
    let server = Server::start_with(&models, &["--stream-comments"]);
    let mut seen = Vec::new();
    for i in 0..4 {
        let r = server.chat("rr", &format!("hello {i}"), r#""max_tokens":3"#);
        assert_eq!(r.status, 200, "{}", r.body);
        seen.push(r.header("x-llmsim-replica").expect("replica header").to_string());
    }
    // One request at a time: the k-th routed request goes to k mod 2.
    assert_eq!(seen, ["0", "1", "0", "1"]);
    // A stream carries its replica in the head and in its `: llmsim` line.
    let r = server.chat("rr", "streamed", r#""max_tokens":3,"stream":true"#);
    assert_eq!(r.header("x-llmsim-replica"), Some("0"));
    assert!(r.body.contains(" replica=0"), "{}", r.body);
    assert_eq!(server.chat("fixed", "hi", "").header("x-llmsim-replica"), None, "a plain model names no replica");
    // Each replica's series under engine="<index>" (vLLM's data-parallel labels).
    let done = |engine: u32| {
        let series = format!(r#"vllm:e2e_request_latency_seconds_count{{engine="{engine}",model_name="rr"}}"#);
        server.metric(&series)
    };
    assert_eq!((done(0), done(1)), (Some(3.0), Some(2.0)));
    for engine in ["0", "1"] {
        let kv = format!(r#"vllm:kv_cache_usage_perc{{engine="{engine}",model_name="rr"}}"#);
        assert_eq!(server.metric(&kv), Some(0.0), "{kv}");
        let ttft = format!(r#"vllm:time_to_first_token_seconds_count{{engine="{engine}",model_name="rr"}}"#);
        assert!(server.metric(&ttft).is_some_and(|n| n >= 2.0), "{ttft}");
    }
    assert_eq!(server.metric(r#"vllm:num_requests_running{engine="2",model_name="rr"}"#), None, "two replicas only");
    assert_eq!(server.metric(r#"vllm:num_requests_running{engine="1",model_name="fixed"}"#), None);
    // The summary adds the replicas over its aggregate figures.
    let summary = server.get("/metrics/summary").json();
    let m = &summary["models"]["rr"];
    assert_eq!(m["requests"]["completed"], 5, "{m}");
    let per: Vec<u64> =
        m["replicas"].as_array().expect("replicas").iter().map(|r| r["completed"].as_u64().unwrap()).collect();
    assert_eq!(per, [3, 2]);
    assert!(summary["models"]["fixed"].get("replicas").is_none());
}

/// Two replicas with prefix caching behind `prefix_affinity`: while a long
/// answer on prefix A runs on replica 0, a prompt on prefix B goes to the
/// idle replica 1; then B's and A's next prompts follow their cached
/// prefixes (round robin would send them to 0 and 1).
#[test]
fn prefix_affinity_sends_repeated_prefixes_to_the_replica_that_holds_them() {
    let cluster = "{replicas: 2, router: prefix_affinity}";
    let models = format!("models:{}", fleet_model("pa", cluster, ", block_size: 16, prefix_caching: true"));
    let server = Server::start_with(&models, &[]);
    let running = |engine: u32| format!(r#"vllm:num_requests_running{{engine="{engine}",model_name="pa"}}"#);
    // 200 tokens of each prefix, then each request's own words.
    let prompt = |head: &str, own: &str| format!("{} {}", words(head, 200), words(own, 8));
    let long = |head: &str, own: &str| {
        let body = format!(
            r#"{{"model":"pa","prompt":{},"max_tokens":2000,"ignore_eos":true,"stream":true}}"#,
            serde_json::json!(prompt(head, own))
        );
        let mut s = connect(server.port);
        send(&mut s, "POST", "/v1/completions", &body);
        s
    };
    let a1 = long("a", "one");
    server.wait_for(10, "A's first request to run on replica 0", |s| s.metric(&running(0)) == Some(1.0));
    let b1 = long("b", "one");
    server.wait_for(10, "B's first request to run on replica 1", |s| s.metric(&running(1)) == Some(1.0));
    let short = |head: &str, own: &str| {
        let body = format!(r#"{{"model":"pa","prompt":{},"max_tokens":2}}"#, serde_json::json!(prompt(head, own)));
        let r = server.post("/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", r.body);
        let cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().expect("cached_tokens");
        (r.header("x-llmsim-replica").expect("replica").to_string(), cached)
    };
    let (b2, b2_cached) = short("b", "two");
    let (a2, a2_cached) = short("a", "two");
    assert_eq!((b2.as_str(), a2.as_str()), ("1", "0"), "each prefix goes where it is cached");
    // The 200 shared tokens fill floor(200 / 16) = 12 blocks of 16.
    assert_eq!((b2_cached, a2_cached), (192, 192));
    drop((a1, b1));
}

/// `session_affinity` in the server: a session's requests stay on the
/// replica of its first, whatever the load. Alice's long stream holds
/// replica 0 (all idle: the lowest index), Bob then goes to an idle replica
/// (1), and Alice's next request must follow her first to the busy replica
/// 0, where least_outstanding (the fallback for a request without a key)
/// would pick idle replica 1 again. The key is the `x-session-id` header,
/// else the body's `user`; a header wins over the body.
#[test]
fn session_affinity_keeps_a_session_on_the_replica_of_its_first_request() {
    let models = format!("models:{}", fleet_model("sa", "{replicas: 3, router: session_affinity}", ""));
    let server = Server::start_with(&models, &[]);
    let running = |engine: u32| format!(r#"vllm:num_requests_running{{engine="{engine}",model_name="sa"}}"#);
    let body = chat_body("sa", "hold", r#""max_tokens":2000,"ignore_eos":true,"stream":true,"user":"alice""#);
    let mut held = connect(server.port);
    send(&mut held, "POST", "/v1/chat/completions", &body);
    server.wait_for(10, "alice's first request to run on replica 0", |s| s.metric(&running(0)) == Some(1.0));
    let replica = |extra: &str| {
        let r = server.chat("sa", "hi", &format!(r#""max_tokens":2,{extra}"#));
        assert_eq!(r.status, 200, "{}", r.body);
        r.header("x-llmsim-replica").expect("replica header").to_string()
    };
    assert_eq!(replica(r#""user":"bob""#), "1", "a new session goes to the least outstanding replica");
    assert_eq!(replica(r#""user":"alice""#), "0", "alice follows her first request");
    assert_eq!(replica(r#""user":"bob""#), "1", "bob follows his");
    assert_eq!(replica(r#""n":1"#), "1", "no key: least outstanding, lowest index on ties");
    // The header names the session and wins over `user`.
    let body = chat_body("sa", "hi", r#""max_tokens":2,"user":"bob""#);
    let mut s = connect(server.port);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nx-session-id: alice\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    assert!(raw.to_ascii_lowercase().contains("x-llmsim-replica: 0\r\n"), "{raw}");
    drop(held);
}

/// A scenario with three replicas of a small-KV engine: chunked prefills,
/// batching and preemptions on each.
fn tight_fleet(router: &str, kv_extra: &str) -> String {
    test_scenario(
        "fleet",
        8192,
        &format!("num_blocks: 150{kv_extra}"),
        "max_batch_tokens: 512, max_num_sequences: 16",
        &format!(
            "cluster: {{replicas: 3, router: {router}}}
"
        ),
    )
}

/// Serves `scenario`, sends 30 overlapping chats (every third resends a
/// shared head), and checks the record against `llmsim run` on it: the
/// same replica and the same times for every request.
fn record_replays_to_the_planners_cluster_run(scenario: &str) {
    let dir = tempdir();
    let record = dir.path().join("rec.csv");
    let (server, path) = Server::from_scenario(dir.path(), "fleet", scenario, &record_flags(&record));
    let port = server.port;
    staggered_clients(30, 6, move |i| {
        let text =
            format!("{} {}", words(["s", "t"][i % 2], 60 + 40 * (i % 3)), words(&format!("q{i}"), 20 + i * 11 % 200));
        let r = http(port, "POST", "/v1/chat/completions", &chat_body("fleet", &text, r#""max_tokens":40"#));
        assert_eq!(r.status, 200, "{}", r.body);
    });
    server.stop();
    let recorded = read(&record);
    assert!(recorded.lines().next().unwrap_or_default().ends_with(",replica"), "{recorded}");
    let (offline, result) = replay(dir.path(), &path, &record);
    let cols: Vec<&str> = REPLAYED.iter().copied().chain(["replica"]).collect();
    let live = pick(&recorded, &cols);
    assert_eq!(live.len(), 30);
    assert_eq!(live, pick(&offline, &cols), "live:\n{recorded}\noffline:\n{offline}");
    let used: std::collections::BTreeSet<&str> = live.iter().map(|r| r[10].as_str()).collect();
    assert_eq!(used.len(), 3, "every replica served some: {live:?}");
    assert_eq!(result["replicas"].as_array().map(Vec::len), Some(3), "{result}");
}

#[test]
fn a_least_kv_fleet_records_a_session_the_planner_replays_to_the_nanosecond() {
    record_replays_to_the_planners_cluster_run(&tight_fleet("least_kv", ""));
}

#[test]
fn a_prefix_affinity_fleet_records_a_session_the_planner_replays_to_the_nanosecond() {
    record_replays_to_the_planners_cluster_run(&tight_fleet(
        "prefix_affinity",
        ", block_size: 16, prefix_caching: true",
    ));
}

#[test]
fn bad_cluster_settings_stop_the_server_at_start_with_exit_2() {
    let dir = tempdir();
    let model = |cluster: &str, kv: &str| format!("models:{}", fleet_model("m", cluster, kv));
    let cases = [
        (model("{replicas: 0}", ""), vec!["models[0].cluster.replicas", "0"]),
        (
            model("{replicas: 2, router: fastest}", ""),
            vec!["models[0].cluster.router", "unknown router `fastest`", "round_robin", "prefix_affinity"],
        ),
        (model("{replicas: 2, router: prefix_affinity}", ""), vec!["models[0].cluster.router", "prefix_caching"]),
        (
            "models:\n  - name: f\n    engine: fixed\n    fixed: {context_length: 4096, prefill_tokens_per_s: 1000, \
             itl_ms: 1}\n    cluster: {replicas: 2}\n"
                .to_string(),
            vec!["models[0].cluster", "not used by the fixed engine"],
        ),
    ];
    for (text, fragments) in cases {
        let models = write(dir.path(), "models.yml", &text);
        let out = TestCommand::new(&["serve", "--port", "0", "--models"]).arg(&models).bounded(30, 1024);
        assert_eq!(out.code(), 2, "{}\n{}", text, out.describe());
        out.stderr_has(&fragments);
    }
}
