//! Requests over their whole life: clients that go away mid-stream, and a
//! recorded session replayed offline to the nanosecond.

use std::io::Read;

use super::harness::*;
use crate::support::*;

#[test]
fn cutting_500_streams_midway_frees_every_slot_and_block() {
    let server = Server::start();
    // About 300 prompt tokens: 64 such requests fit in the KV cache.
    let long = format!("long {}", "word ".repeat(300));
    let body = chat_body("sched", &long, r#""stream":true"#);
    let mut streams = Vec::new();
    for _ in 0..500 {
        let mut s = connect(server.port);
        send(&mut s, "POST", "/v1/chat/completions", &body);
        streams.push(s);
    }
    // Every stream has started (its role chunk arrived) before any is cut.
    for s in &mut streams {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("data: ") {
            let n = s.read(&mut buf).expect("read a stream");
            assert!(n > 0, "stream closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
    }
    let running = r#"vllm:num_requests_running{engine="0",model_name="sched"}"#;
    let waiting = r#"vllm:num_requests_waiting{engine="0",model_name="sched"}"#;
    let kv = r#"vllm:kv_cache_usage_perc{engine="0",model_name="sched"}"#;
    server.wait_for(10, "max_num_sequences (64) running, the rest waiting", |s| {
        s.metric(running) == Some(64.0) && s.metric(waiting) == Some(436.0)
    });
    assert!(server.metric(kv).unwrap() > 0.0);
    drop(streams);
    server.wait_for(10, "0 running, 0 waiting and 0% KV", |s| {
        s.metric(running) == Some(0.0) && s.metric(waiting) == Some(0.0) && s.metric(kv) == Some(0.0)
    });
    let aborted = r#"vllm:request_success_total{engine="0",finished_reason="abort",model_name="sched"}"#;
    assert_eq!(server.metric(aborted), Some(500.0));
    assert_eq!(server.chat("sched", "still serving", "").status, 200);
}

#[test]
fn a_client_that_leaves_a_whole_response_aborts_it_too() {
    let server = Server::start();
    let long = format!("long {}", "word ".repeat(10));
    let mut s = connect(server.port);
    send(&mut s, "POST", "/v1/chat/completions", &chat_body("fixed", &long, ""));
    let running = r#"vllm:num_requests_running{engine="0",model_name="fixed"}"#;
    server.wait_for(10, "the request to run", |s| s.metric(running) == Some(1.0));
    drop(s);
    server.wait_for(10, "the request to be aborted", |s| s.metric(running) == Some(0.0));
}

/// A scenario with a small KV cache and a small prefill budget, so the
/// recorded session has chunked prefills, batching and preemptions.
fn tight() -> String {
    test_scenario("tight", 8192, "num_blocks: 150", "max_batch_tokens: 512, max_num_sequences: 16", "")
}

#[test]
fn a_recorded_session_replays_offline_to_the_nanosecond() {
    let dir = tempdir();
    let record = dir.path().join("rec.csv");
    let (server, scenario) = Server::from_scenario(dir.path(), "tight", &tight(), &record_flags(&record));
    let port = server.port;
    staggered_clients(24, 7, move |i| {
        let words = "word ".repeat(50 + 37 * i % 300);
        let r = http(port, "POST", "/v1/chat/completions", &chat_body("tight", &words, r#""max_tokens":40"#));
        assert_eq!(r.status, 200, "{}", r.body);
    });
    server.stop();
    let recorded = read(&record);
    let (offline, _) = replay(dir.path(), &scenario, &record);
    let live = pick(&recorded, &REPLAYED);
    assert_eq!(live.len(), 24);
    assert!(live.iter().any(|r| r[9] != "0"), "the session should include preemptions:\n{recorded}");
    assert_eq!(live, pick(&offline, &REPLAYED), "live:\n{recorded}\noffline:\n{offline}");
}
