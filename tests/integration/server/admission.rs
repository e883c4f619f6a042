//! vLLM 0.33's admission limits (`--max-num-queued-reqs`,
//! `--max-num-queued-tokens`, the models file's keys of the same names):
//! a full server answers 503 "The engine is currently busy" without
//! Retry-After and counts the refusal in `vllm:admission_rejections_total`.
//! Before these keys, llmsim had no bound and answered 200 to every request.

use std::io::Read;
use std::net::TcpStream;

use super::harness::*;

/// One engine that runs one sequence at a time, so a second request waits.
fn models(limits: &str) -> String {
    format!(
        "
models:
  - name: one
    engine: scheduler
    hardware: {{name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
    model:
      context_length: 4096
      weights: {{parameters_billions: 6.74}}
      kv_cache: {{bytes_per_token: 524288}}
    scheduler: {{max_batch_tokens: 8192, max_num_sequences: 1}}
    {limits}
"
    )
}

/// "long a": the `long` script answers 3,000 tokens, so a stream stays in
/// flight for seconds. Its prompt is 2 content tokens ("long", " a") + 5
/// for the message's ChatML framing + 3 for the reply's priming = 10.
const LONG: &str = "long a";
const LONG_PROMPT_TOKENS: u32 = 10;

/// Opens a streamed chat of `n` choices and reads up to the end of its
/// head; the connection stays open (the request stays in flight).
fn open_stream(server: &Server, n: u32) -> (TcpStream, String) {
    let mut s = connect(server.port);
    send(&mut s, "POST", "/v1/chat/completions", &chat_body("one", LONG, &format!(r#""stream":true,"n":{n}"#)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("the response head");
        head.push(byte[0]);
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

/// Reads the stream until `count` SSE `data:` frames have arrived.
fn read_frames(s: &mut TcpStream, count: usize) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&seen).matches("data: ").count() < count {
        let k = s.read(&mut buf).expect("stream bytes");
        assert!(k > 0, "the stream ended early");
        seen.extend_from_slice(&buf[..k]);
    }
}

fn assert_busy(r: &Resp) {
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(
        r.json(),
        serde_json::json!({"error": {"message": "The engine is currently busy", "type": "ServiceUnavailableError",
            "param": null, "code": 503}})
    );
    assert_eq!(r.header("retry-after"), None, "vLLM sends no Retry-After");
}

fn rejections(server: &Server, reason: &str) -> Option<f64> {
    server.metric(&format!("vllm:admission_rejections_total{{model_name=\"one\",reason=\"{reason}\"}}"))
}

#[test]
fn past_max_num_queued_reqs_a_request_gets_vllms_503_and_is_counted_once_whatever_its_n() {
    let server = Server::start_with(&models("max_num_queued_reqs: 3"), &[]);
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(0.0));
    // n = 2 in flight: 2 of 3 slots (each choice is one).
    let (_a, head) = open_stream(&server, 2);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // 2 + 2 > 3: refused, and counted once although it asked for two.
    assert_busy(&server.chat("one", LONG, r#""n":2"#));
    // 2 + 1 = 3 is allowed (vLLM refuses only past the bound).
    let (_b, head) = open_stream(&server, 1);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // 3 + 1 > 3.
    assert_busy(&server.chat("one", LONG, ""));
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(2.0));
    assert_eq!(rejections(&server, "max_num_queued_tokens"), Some(0.0));
    // Refused requests never reached the engine: 3 sequences in it, 1 running.
    assert_eq!(server.metric("vllm:num_requests_running{engine=\"0\",model_name=\"one\"}"), Some(1.0));
    assert_eq!(server.metric("vllm:num_requests_waiting{engine=\"0\",model_name=\"one\"}"), Some(2.0));
    // Closing the streams frees the slots.
    drop((_a, _b));
    server.wait_for(10, "the aborted streams to leave", |s| {
        s.metric("vllm:num_requests_waiting{engine=\"0\",model_name=\"one\"}") == Some(0.0)
            && s.metric("vllm:num_requests_running{engine=\"0\",model_name=\"one\"}") == Some(0.0)
    });
    assert_eq!(server.chat("one", "hello", "").status, 200);
}

#[test]
fn max_num_queued_tokens_counts_the_prompts_still_in_prefill_and_refuses_once_they_reach_it() {
    let limits = format!("max_num_queued_tokens: {LONG_PROMPT_TOKENS}");
    let server = Server::start_with(&models(&limits), &[]);
    // A runs; once its first token is out it no longer counts.
    let (mut a, head) = open_stream(&server, 1);
    assert!(head.contains(&format!("x-llmsim-prompt-tokens: {LONG_PROMPT_TOKENS}")), "{head}");
    read_frames(&mut a, 2); // the role chunk, then the first token
    // B waits behind A (one sequence at a time): 10 prompt tokens in
    // prefill. It was admitted at 0 < 10.
    let (_b, head) = open_stream(&server, 1);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // 10 >= 10: refused, however short the new prompt.
    assert_busy(&server.chat("one", "x", r#""max_tokens":1"#));
    assert_eq!(rejections(&server, "max_num_queued_tokens"), Some(1.0));
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(0.0));
}

#[test]
fn the_limits_are_checked_in_the_models_file() {
    let dir = crate::support::tempdir();
    for (limits, want) in [
        ("max_num_queued_reqs: 0", "models[0].max_num_queued_reqs: 0 is not allowed"),
        ("max_num_queued_tokens: -5", "models[0].max_num_queued_tokens: -5 is not allowed"),
        ("max_num_queued_reqs: 2.5", "models[0].max_num_queued_reqs"),
    ] {
        let path = crate::support::write(dir.path(), "models.yml", &models(limits));
        let out = crate::support::TestCommand::new(&["serve", "--port", "0", "--models"]).arg(&path).fails_with(2);
        assert!(out.stderr().contains(want), "{limits}: {}", out.stderr());
    }
    let fixed = "models:\n  - name: f\n    engine: fixed\n    max_num_queued_reqs: 4\n    fixed: {context_length: \
                 100, prefill_tokens_per_s: 1000, itl_ms: 1}\n";
    let path = crate::support::write(dir.path(), "models.yml", fixed);
    let out = crate::support::TestCommand::new(&["serve", "--port", "0", "--models"]).arg(&path).fails_with(2);
    assert!(out.stderr().contains("models[0].max_num_queued_reqs: not used by the fixed engine"), "{}", out.stderr());
}
