//! Priority scheduling in `llmsim serve` (docs/priorities.md, "In the
//! server"): the body's `priority` orders the waiting queue of a model
//! whose scheduler has `policy: priority`, and a model without it refuses
//! a priority other than 0 as vLLM does.

use std::time::Instant;

use super::harness::*;

/// One request at a time, so the waiting queue's order is the order the
/// requests run in; the same model without priority scheduling.
const MODELS: &str = "
models:
  - name: ranked
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288, block_size: 16}
    scheduler: {max_num_sequences: 1, policy: priority}
  - name: plain
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288, block_size: 16}
";

fn body(model: &str, max_tokens: u32, priority: i64) -> String {
    format!(
        r#"{{"model":"{model}","prompt":"a b c","max_tokens":{max_tokens},"ignore_eos":true,"priority":{priority}}}"#
    )
}

#[test]
fn a_higher_priority_request_overtakes_a_waiting_lower_one() {
    let server = Server::start_with(MODELS, &[]);
    let port = server.port;
    // A holds the one slot for about 200 decode steps (~0.9 s); B (priority
    // 5) then C (priority -1) wait behind it. C runs first: its 60 tokens
    // end about 0.27 s before B's.
    let start = Instant::now();
    let a = std::thread::spawn(move || http(port, "POST", "/v1/completions", &body("ranked", 200, 0)));
    std::thread::sleep(std::time::Duration::from_millis(150));
    let b = std::thread::spawn(move || {
        let r = http(port, "POST", "/v1/completions", &body("ranked", 60, 5));
        (r, start.elapsed())
    });
    std::thread::sleep(std::time::Duration::from_millis(150));
    let c = std::thread::spawn(move || {
        let r = http(port, "POST", "/v1/completions", &body("ranked", 60, -1));
        (r, start.elapsed())
    });
    let a = a.join().unwrap();
    let (b, b_done) = b.join().unwrap();
    let (c, c_done) = c.join().unwrap();
    for r in [&a, &b, &c] {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(c_done < b_done, "priority -1 ended at {c_done:?}, after priority 5 at {b_done:?}");
    server.stop();
}

#[test]
fn a_model_without_priority_scheduling_refuses_a_priority_as_vllm_does() {
    let server = Server::start_with(MODELS, &[]);
    let refused = server.post("/v1/completions", &body("plain", 3, 2));
    assert_eq!(refused.status, 400, "{}", refused.body);
    let err = refused.json();
    assert_eq!(err["error"]["message"], "Got priority 2 but Priority scheduling is not enabled.", "{err}");
    // 0 is the default and always allowed; a priority that is not an
    // integer is a validation error naming the field; the server goes on.
    assert_eq!(server.post("/v1/completions", &body("plain", 3, 0)).status, 200);
    let typed = server.post("/v1/completions", r#"{"model":"ranked","prompt":"a","max_tokens":2,"priority":"high"}"#);
    assert_eq!(typed.status, 400, "{}", typed.body);
    assert!(typed.body.contains("priority"), "{}", typed.body);
    assert_eq!(server.post("/v1/completions", &body("ranked", 3, -7)).status, 200);
    server.stop();
}
