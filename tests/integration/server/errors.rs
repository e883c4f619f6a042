//! Every error a client can cause, in vLLM's envelope with its status and
//! wording, and the server still serving afterwards; and broken config
//! files stopping the server before it listens.

use super::harness::*;
use crate::support::*;

/// Asserts a vLLM error envelope and returns its message.
fn envelope(r: &Resp, status: u16, kind: &str) -> String {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["error"]["code"], status, "{}", r.body);
    assert_eq!(v["error"]["type"], kind, "{}", r.body);
    v["error"]["message"].as_str().expect("message").to_string()
}

#[test]
fn every_client_error_gets_vllms_envelope_and_the_server_keeps_serving() {
    let server = Server::start_with(MODELS, &["--max-body-bytes", "4096"]);
    let chat = "/v1/chat/completions";

    let msg = envelope(&server.post(chat, "{not json"), 400, "BadRequestError");
    assert!(msg.starts_with("The request body is not valid JSON"), "{msg}");

    // vLLM: pydantic's error through its validation handler, type "Bad Request".
    let r = server.post(chat, r#"{"model":"sched","messages":"hello"}"#);
    let msg = envelope(&r, 400, "Bad Request");
    assert_eq!(
        msg,
        "1 validation error:\n  {'type': 'list_type', 'loc': ('body', 'messages'), 'msg': 'Input should be a valid \
         list', 'input': 'hello'}"
    );
    assert_eq!(r.json()["error"]["param"], "messages");

    let r = server.post(chat, r#"{"model":"sched"}"#);
    let msg = envelope(&r, 400, "Bad Request");
    assert!(msg.contains("{'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required'"), "{msg}");

    let r = server.chat("gpt-9", "hi", "");
    assert_eq!(envelope(&r, 404, "NotFoundError"), "The model `gpt-9` does not exist.");
    assert_eq!(r.json()["error"]["param"], "model");

    let r = server.chat("sched", "hi", r#""max_tokens":5000"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert!(
        msg.starts_with(
            "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context \
                         length is 4096 tokens and your request has "
        ),
        "{msg}"
    );

    let long = "word ".repeat(3000);
    let r = server.post("/v1/completions", &format!(r#"{{"model":"sched","prompt":"{long}"}}"#));
    let msg = envelope(&r, 413, "RequestEntityTooLargeError");
    assert!(msg.contains("at most 4096"), "{msg}");

    let r = server.chat("sched", "hi", r#""n":0"#);
    assert_eq!(envelope(&r, 400, "BadRequestError"), "n must be at least 1, got 0.");

    let r = server.chat("sched", "hi", r#""max_tokens":0"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert_eq!(msg, "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)");

    let r = server.chat("sched", "hi", r#""stream_options":{"include_usage":true}"#);
    let msg = envelope(&r, 400, "Bad Request");
    assert!(msg.contains("Value error, Stream options can only be defined when `stream=True`."), "{msg}");
    assert_eq!(r.json()["error"]["param"], "stream_options");

    let ok = server.chat("sched", "still here", r#""some_unknown_field":{"x":1}"#);
    assert_eq!(ok.status, 200, "unknown fields are ignored and the server still serves: {}", ok.body);
    let summary = server.get("/metrics/summary").json();
    assert_eq!(summary["http_errors"]["400"], 7);
    assert_eq!(summary["http_errors"]["404"], 1);
    assert_eq!(summary["http_errors"]["413"], 1);
}

#[test]
fn a_prompt_alone_over_the_context_gets_vllms_wording() {
    let server = Server::start_with(
        "models:\n  - name: small\n    engine: fixed\n    fixed: {context_length: 10, prefill_tokens_per_s: 1000, \
         itl_ms: 1}\n",
        &[],
    );
    let r = server.post("/v1/completions", r#"{"model":"small","prompt":"a b c d e f g h i j k l"}"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert!(
        msg.starts_with("This model's maximum context length is 10 tokens. However, your request has ")
            && msg.ends_with(" input tokens. Please reduce the length of the input messages."),
        "{msg}"
    );
}

#[test]
fn a_prompt_that_never_fits_in_kv_is_an_error_streamed_or_not() {
    let server = Server::start();
    let long = "word ".repeat(400);
    let r = server.chat("tiny-kv", &long, r#""max_tokens":1"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert!(msg.contains("can never fit in the KV cache: it has 8 blocks of 16 tokens"), "{msg}");

    let r = server.chat("tiny-kv", &long, r#""max_tokens":1,"stream":true"#);
    assert_eq!(r.status, 200, "the stream had started");
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let err: serde_json::Value = serde_json::from_str(&events[events.len() - 2]).expect("error frame");
    assert_eq!(err["error"]["code"], 400);
    assert!(err["error"]["message"].as_str().unwrap().contains("can never fit"));
    assert_eq!(server.chat("tiny-kv", "short", "").status, 200, "and the model still serves");
}

#[test]
fn a_broken_models_file_stops_serve_before_it_listens() {
    let dir = tempdir();
    let models = write(dir.path(), "models.yml", &MODELS.replace("max_num_sequences: 64", "max_num_sequences: -1"));
    TestCommand::new(&["serve", "--port", "0", "--models"]).arg(&models).fails_with(2).stderr_has(&[
        "models.yml",
        "models[0].scheduler.max_num_sequences",
        "-1 is not allowed",
    ]);
    let models = write(dir.path(), "typo.yml", &MODELS.replace("engine: fixed", "engine: fixd"));
    TestCommand::new(&["serve", "--port", "0", "--models"]).arg(&models).fails_with(2).stderr_has(&[
        "typo.yml:",
        "models[2].engine",
        "unknown variant `fixd`",
    ]);
    TestCommand::new(&["serve", "--port", "0", "--models", "nowhere.yml"])
        .fails_with(2)
        .stderr_has(&["nowhere.yml", "no such file"]);
}
