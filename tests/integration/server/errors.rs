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
    // vLLM 0.33 writes the location dotted and names it as param.
    assert_eq!(
        msg,
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages', 'msg': 'Input should be a valid \
         list', 'input': 'hello'}"
    );
    assert_eq!(r.json()["error"]["param"], "body.messages");

    let r = server.post(chat, r#"{"model":"sched"}"#);
    let msg = envelope(&r, 400, "Bad Request");
    assert_eq!(
        msg,
        "1 validation error:\n  {'type': 'missing', 'loc': 'body.messages', 'msg': 'Field required', 'input': \
         '<dict of 1 items>'}"
    );

    let r = server.chat("gpt-9", "hi", "");
    assert_eq!(envelope(&r, 404, "NotFoundError"), "The model `gpt-9` does not exist.");
    assert_eq!(r.json()["error"]["param"], "model");

    let r = server.chat("sched", "hi", r#""max_tokens":5000"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert!(msg.starts_with("max_tokens=5000 cannot be greater than max_model_len=4096. "), "{msg}");

    let long = "word ".repeat(3000);
    let r = server.post("/v1/completions", &format!(r#"{{"model":"sched","prompt":"{long}"}}"#));
    let msg = envelope(&r, 413, "RequestEntityTooLargeError");
    assert!(msg.contains("at most 4096"), "{msg}");

    let r = server.chat("sched", "hi", r#""n":0"#);
    assert_eq!(envelope(&r, 400, "BadRequestError"), "n must be at least 1, got 0.");

    let r = server.chat("sched", "hi", r#""max_tokens":0"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert_eq!(msg, "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)");

    // vLLM 0.33's model validators raise VLLMValidationError, which pydantic
    // does not wrap: a BadRequestError with the parameter suffix.
    let r = server.chat("sched", "hi", r#""stream_options":{"include_usage":true}"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert_eq!(msg, "Stream options can only be defined when `stream=True`. (parameter=stream_options)");
    assert_eq!(r.json()["error"]["param"], "stream_options");

    let ok = server.chat("sched", "still here", r#""some_unknown_field":{"x":1}"#);
    assert_eq!(ok.status, 200, "unknown fields are ignored and the server still serves: {}", ok.body);
    let summary = server.get("/metrics/summary").json();
    assert_eq!(summary["http_errors"]["400"], 7);
    assert_eq!(summary["http_errors"]["404"], 1);
    assert_eq!(summary["http_errors"]["413"], 1);
}

/// A fixed model with a 20-token context: the length rules below are
/// worked out by hand from it.
const SMALL: &str = "models:\n  - name: small\n    engine: fixed\n    fixed: {context_length: 20, \
                     prefill_tokens_per_s: 1000, itl_ms: 1}\n";

fn completion(server: &Server, body: &str) -> Resp {
    server.post("/v1/completions", &format!(r#"{{"model":"small",{body}}}"#))
}

#[test]
fn max_tokens_past_what_the_prompt_leaves_is_clamped_as_vllm_0_33_does() {
    let server = Server::start_with(SMALL, &[]);
    // "a b c" is 3 built-in tokens: 20 - 3 = 17 left. vLLM 0.33 clamps
    // max_tokens 19 to 17 and serves (older vLLM and llmsim answered 400).
    let v = completion(&server, r#""prompt":"a b c","max_tokens":19,"ignore_eos":true"#).json();
    assert_eq!(v["usage"]["prompt_tokens"], 3, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 17, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    // Exactly the whole context is allowed too (the clamp makes it 17).
    let v = completion(&server, r#""prompt":"a b c","max_tokens":20,"ignore_eos":true"#).json();
    assert_eq!(v["usage"]["completion_tokens"], 17, "{v}");
    // A chat without max_tokens may use what the context leaves: "hi" is 1
    // token + 5 of ChatML framing + 3 for the reply's priming = 9; 11 left.
    let r = server.chat("small", "hi", r#""ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}"#);
    let last = r.events().iter().rev().find(|e| e.contains("\"usage\"")).cloned().expect("usage chunk");
    let usage: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(
        (usage["usage"]["prompt_tokens"].as_u64(), usage["usage"]["completion_tokens"].as_u64()),
        (Some(9), Some(11))
    );
    // vLLM's engine gets the clamped value, and so does its
    // request_params_max_tokens histogram: 17 + 17 + 11 for the three above.
    let sum = server.metric(r#"vllm:request_params_max_tokens_sum{engine="0",model_name="small"}"#);
    assert_eq!(sum, Some(45.0));
    // min_tokens is checked against the clamped value: 17, not 19.
    let r = completion(&server, r#""prompt":"a b c","max_tokens":19,"min_tokens":18"#);
    assert_eq!(envelope(&r, 400, "BadRequestError"), "min_tokens must be less than or equal to max_tokens=17, got 18.");
}

#[test]
fn a_prompt_of_no_tokens_is_vllms_empty_decoder_prompt_400_and_the_server_keeps_serving() {
    let server = Server::start_with(SMALL, &[]);
    // `[""]`, `[[]]`, `[]`, and one empty prompt among others: each is a
    // prompt of 0 tokens, which vLLM's input processor refuses.
    for prompt in [r#"[""]"#, "[[]]", "[]", r#"["a b", ""]"#, "[[1, 2], []]"] {
        for stream in ["false", "true"] {
            let r = completion(&server, &format!(r#""prompt":{prompt},"max_tokens":3,"stream":{stream}"#));
            assert_eq!(envelope(&r, 400, "BadRequestError"), "The decoder prompt cannot be empty", "{prompt}");
            assert_eq!(r.json()["error"]["param"], serde_json::Value::Null, "{prompt}");
        }
    }
    // `""` itself is the request validator's, which names the field.
    let r = completion(&server, r#""prompt":"","max_tokens":3"#);
    let msg = envelope(&r, 400, "BadRequestError");
    assert!(msg.starts_with("Either prompt or prompt_embeds must be provided and non-empty."), "{msg}");
    let v = completion(&server, r#""prompt":["a b"],"max_tokens":3,"ignore_eos":true"#).json();
    assert_eq!(v["usage"]["prompt_tokens"], 2, "{v}");
}

#[test]
fn only_a_max_tokens_over_the_whole_context_is_refused_with_vllms_wording() {
    let server = Server::start_with(SMALL, &[]);
    let r = completion(&server, r#""prompt":"a b c","max_tokens":21"#);
    assert_eq!(
        envelope(&r, 400, "BadRequestError"),
        "max_tokens=21 cannot be greater than max_model_len=20. Please request fewer output tokens. \
         (parameter=max_tokens, value=21)"
    );
    assert_eq!(r.json()["error"]["param"], "max_tokens");
    // The completions default (16) counts as sent: a context under it is
    // refused whatever the prompt, as vLLM's TokenizeParams refuses it.
    let tiny = Server::start_with(&SMALL.replace("context_length: 20", "context_length: 12"), &[]);
    let r = completion(&tiny, r#""prompt":"a""#);
    assert_eq!(
        envelope(&r, 400, "BadRequestError"),
        "max_tokens=16 cannot be greater than max_model_len=12. Please request fewer output tokens. \
         (parameter=max_tokens, value=16)"
    );
    // Chat names the field it came from.
    let r = server.chat("small", "hi", r#""max_completion_tokens":25"#);
    assert_eq!(
        envelope(&r, 400, "BadRequestError"),
        "max_completion_tokens=25 cannot be greater than max_model_len=20. Please request fewer output tokens. \
         (parameter=max_completion_tokens, value=25)"
    );
    assert_eq!(r.json()["error"]["param"], "max_completion_tokens");
}

#[test]
fn a_prompt_over_the_context_gets_vllm_0_33s_wording() {
    let server = Server::start_with(SMALL, &[]);
    // 22 text tokens: vLLM tokenizes with truncation at context + 1, so it
    // reports "at least 21".
    let words = "w ".repeat(22);
    let r = completion(&server, &format!(r#""prompt":"{}","max_tokens":1"#, words.trim_end()));
    assert_eq!(
        envelope(&r, 400, "BadRequestError"),
        "This model's maximum context length is 20 tokens. However, your prompt contains at least 21 input \
         tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input \
         prompt. (parameter=input_tokens, value=21)"
    );
    assert_eq!(r.json()["error"]["param"], "input_tokens");
    // vLLM checks the context before the sampling parameters: with a bad
    // temperature too, the prompt is what is reported.
    let r = completion(&server, &format!(r#""prompt":"{}","temperature":-1"#, words.trim_end()));
    assert!(envelope(&r, 400, "BadRequestError").contains("at least 21 input tokens"), "{}", r.body);
    let r = completion(&server, r#""prompt":"a","max_tokens":21,"temperature":-1"#);
    assert!(envelope(&r, 400, "BadRequestError").starts_with("max_tokens=21 cannot be greater"), "{}", r.body);
    // Token ids are counted as sent: 25.
    let ids: Vec<String> = (1..=25).map(|i| i.to_string()).collect();
    let r = completion(&server, &format!(r#""prompt":[{}],"max_tokens":1"#, ids.join(",")));
    let msg = envelope(&r, 400, "BadRequestError");
    assert!(msg.contains("your prompt contains 25 input tokens, which exceeds"), "{msg}");
    assert!(msg.ends_with("(parameter=input_tokens, value=25)"), "{msg}");
    // A prompt of exactly the context passes the length check and leaves 0
    // tokens: SamplingParams refuses max_tokens 0.
    let exact = "w ".repeat(20);
    let r = completion(&server, &format!(r#""prompt":"{}","max_tokens":5"#, exact.trim_end()));
    assert_eq!(
        envelope(&r, 400, "BadRequestError"),
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    );
    // 19 tokens leave 1: served.
    let nineteen = "w ".repeat(19);
    let v = completion(&server, &format!(r#""prompt":"{}","max_tokens":5"#, nineteen.trim_end())).json();
    assert_eq!((v["usage"]["prompt_tokens"].as_u64(), v["usage"]["completion_tokens"].as_u64()), (Some(19), Some(1)));
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
