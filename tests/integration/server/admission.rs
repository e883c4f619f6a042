//! vLLM 0.33's admission limits (`--max-num-queued-reqs`,
//! `--max-num-queued-tokens`, the models file's keys of the same names),
//! as the 0.33.0 wheel has them (`AsyncLLM.check_admission`,
//! `QueueOverflowError` / `MaxQueuedTokensError`, `create_error_response`):
//! a full server answers 503 with one message per limit, `type` "Service
//! Unavailable", no Retry-After, counts the refusal in
//! `vllm:admission_rejections_total`, and checks before it reads the prompt
//! (so a full server answers 503 to a request it would refuse with 400).
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

/// vLLM 0.33.0's `QueueOverflowError` (vllm/exceptions.py).
const QUEUE_FULL: &str =
    "The engine is currently busy and cannot accept new requests. Please try again later or on a different instance.";
/// vLLM 0.33.0's `MaxQueuedTokensError`.
const BACKLOG_FULL: &str =
    "The engine has reached its prefill token backlog limit. Please try again later or on a different instance.";

/// vLLM's envelope for a `GracefulHTTPError`: `type` is the status phrase,
/// `param` null, and no Retry-After anywhere.
fn assert_busy(r: &Resp, message: &str) {
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(
        r.json(),
        serde_json::json!({"error": {"message": message, "type": "Service Unavailable", "param": null, "code": 503}})
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
    assert_busy(&server.chat("one", LONG, r#""n":2"#), QUEUE_FULL);
    // 2 + 1 = 3 is allowed (vLLM refuses only past the bound).
    let (_b, head) = open_stream(&server, 1);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // 3 + 1 > 3.
    assert_busy(&server.chat("one", LONG, ""), QUEUE_FULL);
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(2.0));
    assert_eq!(rejections(&server, "max_num_queued_tokens"), Some(0.0));
    // Refused requests never reached the engine: 3 sequences in it, 1 running.
    // The gauges are published after the engine task has handled every
    // queued command (as vLLM's are per step), which can be just after the
    // stream's head went out, so they are awaited; a refused request that
    // had reached the engine would keep `waiting` at 3 or more (its 3,000
    // tokens take seconds) and time this out.
    let gauges = |s: &Server| {
        (
            s.metric("vllm:num_requests_running{engine=\"0\",model_name=\"one\"}"),
            s.metric("vllm:num_requests_waiting{engine=\"0\",model_name=\"one\"}"),
        )
    };
    server.wait_for(10, "1 running and 2 waiting", |s| gauges(s) == (Some(1.0), Some(2.0)));
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
    assert_busy(&server.chat("one", "x", r#""max_tokens":1"#), BACKLOG_FULL);
    assert_eq!(rejections(&server, "max_num_queued_tokens"), Some(1.0));
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(0.0));
}

#[test]
fn the_limits_are_checked_in_the_models_file() {
    let dir = crate::support::tempdir();
    for (limits, want) in [
        ("max_num_queued_reqs: -1", "models[0].max_num_queued_reqs: -1 is not allowed"),
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

#[test]
fn a_limit_of_zero_refuses_every_request_each_with_its_own_message() {
    // vLLM's SchedulerConfig has both keys `ge=0`: 0 is allowed. With no
    // request in flight, 0 + 1 > 0 refuses by requests; 0 >= 0 by tokens.
    let server = Server::start_with(&models("max_num_queued_reqs: 0"), &[]);
    assert_busy(&server.chat("one", "hello", ""), QUEUE_FULL);
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(1.0));
    let server = Server::start_with(&models("max_num_queued_tokens: 0"), &[]);
    assert_busy(&server.chat("one", "hello", ""), BACKLOG_FULL);
    assert_eq!(rejections(&server, "max_num_queued_tokens"), Some(1.0));
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(0.0));
}

#[test]
fn a_full_server_refuses_before_it_reads_the_prompt_but_after_the_body_and_the_model() {
    // vLLM's serving layer calls `_preflight(request.n or 1)` right after
    // the model check, before rendering: a prompt too long for the context,
    // a token id outside the vocabulary or an unknown `tool_choice` function
    // gets the 503, not their 400s. The body's validation and the model
    // lookup come first.
    let long = "word ".repeat(5000);
    let out_of_vocabulary = r#"{"model":"one","prompt":[-1, 5],"max_tokens":1}"#;
    let over_context = r#"{"model":"one","prompt":"hi","max_tokens":100000}"#;
    // Without a limit each of them is a 400.
    let open = Server::start_with(&models(""), &[]);
    assert_eq!(open.chat("one", &long, "").status, 400);
    assert_eq!(open.post("/v1/completions", out_of_vocabulary).status, 400);
    assert_eq!(open.post("/v1/completions", over_context).status, 400);
    drop(open);
    let server = Server::start_with(&models("max_num_queued_reqs: 0"), &[]);
    assert_busy(&server.chat("one", &long, ""), QUEUE_FULL);
    assert_busy(&server.post("/v1/completions", out_of_vocabulary), QUEUE_FULL);
    assert_busy(&server.post("/v1/completions", over_context), QUEUE_FULL);
    // Pydantic's checks and the model check run first.
    let r = server.chat("one", "hello", r#""temperature":"hot""#);
    assert_eq!(r.status, 400, "{}", r.body);
    let r = server.chat("nope", "hello", "");
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(rejections(&server, "max_num_queued_reqs"), Some(3.0));
    // `n: 0` counts as 1 (`request.n or 1`), so it is refused here too
    // (its own 400 would come later).
    assert_busy(&server.chat("one", "hello", r#""n":0"#), QUEUE_FULL);
}

#[test]
fn the_counter_is_vllms_family_with_both_reasons_from_the_start() {
    // vllm/v1/metrics/loggers.py (0.33.0): `vllm:admission_rejections`,
    // labels [model_name, reason], both reasons' series made up front.
    let server = Server::start_with(&models("max_num_queued_reqs: 4"), &[]);
    let text = server.get("/metrics").body;
    let want = "# HELP vllm:admission_rejections_total Number of admission attempts rejected by a queue limit, by \
                reason.\n# TYPE vllm:admission_rejections_total counter\n\
                vllm:admission_rejections_total{model_name=\"one\",reason=\"max_num_queued_reqs\"} 0.0\n\
                vllm:admission_rejections_total{model_name=\"one\",reason=\"max_num_queued_tokens\"} 0.0\n";
    assert!(text.contains(want), "{text}");
    // Where vLLM registers it: after the success counter, before the histograms.
    let at = |family: &str| text.find(&format!("# HELP {family} ")).unwrap_or_else(|| panic!("{family}"));
    assert!(at("vllm:request_success_total") < at("vllm:admission_rejections_total"));
    assert!(at("vllm:admission_rejections_total") < at("vllm:request_prompt_tokens"));
}
