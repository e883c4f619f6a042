//! vLLM parity over a real socket: lengths (EOS, `ignore_eos`,
//! `min_tokens`), validation, routes, logprobs, `n` and lists of prompts.
//! Each test writes the shape vLLM answers with next to the assertion.
//!
//! The test responses echo the last user message (or the completions
//! prompt), so content and token counts are known: "say: x" style
//! prefixes are not used here, the message itself comes back.

use serde_json::Value;

use super::harness::*;

const MESSAGE: &str = "The quick brown fox jumps over the lazy dog";
/// Built-in tokenizer: "The", " quick", " brown", " fox", " jumps", " over",
/// " the", " lazy", " dog".
const MESSAGE_TOKENS: u64 = 9;

fn choice(v: &Value) -> &Value {
    &v["choices"][0]
}

fn chunks(r: &Resp) -> Vec<Value> {
    r.events().iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).expect("chunk JSON")).collect()
}

fn error(r: &Resp, status: u16) -> (String, String, Value) {
    assert_eq!(r.status, status, "{}", r.body);
    let v = r.json();
    assert_eq!(v["error"]["code"], status);
    (
        v["error"]["type"].as_str().unwrap().to_string(),
        v["error"]["message"].as_str().unwrap().to_string(),
        v["error"]["param"].clone(),
    )
}

#[test]
fn an_answer_ends_with_eos_and_at_exactly_max_tokens_with_length() {
    let server = Server::start();
    // vLLM: 9 content tokens, then EOS as token 10: finish "stop", 10
    // completion tokens (the EOS token counts).
    let v = server.chat("fixed", MESSAGE, "").json();
    assert_eq!(
        (choice(&v)["finish_reason"].as_str(), &v["usage"]["completion_tokens"]),
        (Some("stop"), &Value::from(MESSAGE_TOKENS + 1))
    );
    assert_eq!(choice(&v)["message"]["content"], MESSAGE);
    // max_tokens = 10 leaves room for EOS: still "stop".
    let v = server.chat("fixed", MESSAGE, r#""max_tokens":10"#).json();
    assert_eq!(choice(&v)["finish_reason"], "stop");
    // max_tokens = 9: the 9th token hits the cap before EOS: "length", same text.
    let v = server.chat("fixed", MESSAGE, r#""max_tokens":9"#).json();
    assert_eq!(
        (choice(&v)["finish_reason"].as_str(), &v["usage"]["completion_tokens"]),
        (Some("length"), &Value::from(9))
    );
    assert_eq!(choice(&v)["message"]["content"], MESSAGE);
    // Streamed, the 9th token's chunk carries finish_reason "length" itself.
    let r = server.chat("fixed", MESSAGE, r#""max_tokens":9,"stream":true"#);
    let c = chunks(&r);
    assert_eq!(c.len(), 1 + 9, "role, 9 tokens:\n{}", r.body);
    assert_eq!(
        (c[9]["choices"][0]["delta"]["content"].as_str(), c[9]["choices"][0]["finish_reason"].as_str()),
        (Some(" dog"), Some("length"))
    );
    assert!(c[1..9].iter().all(|x| x["choices"][0]["finish_reason"].is_null()));
}

#[test]
fn ignore_eos_generates_exactly_max_tokens() {
    let server = Server::start();
    // vLLM with ignore_eos: max_tokens tokens, finish "length".
    for model in ["sched", "fixed"] {
        let v = server.chat(model, "hi", r#""max_tokens":40,"ignore_eos":true,"seed":3"#).json();
        assert_eq!(choice(&v)["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], 40);
        let text = choice(&v)["message"]["content"].as_str().unwrap().to_string();
        assert!(text.starts_with("hi ") && text.len() > 40, "the answer, then filler: {text:?}");
        // Deterministic: the same request gets the same text.
        let again = server.chat(model, "hi", r#""max_tokens":40,"ignore_eos":true,"seed":3"#).json();
        assert_eq!(choice(&again)["message"]["content"], text.as_str());
    }
    // Streamed with usage: 40 token chunks, the last with "length", usage 40.
    let r = server.chat(
        "fixed",
        "hi",
        r#""max_tokens":40,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}"#,
    );
    let c = chunks(&r);
    assert_eq!(c.len(), 1 + 40 + 1);
    assert_eq!(c[40]["choices"][0]["finish_reason"], "length");
    assert_eq!(c[41]["usage"]["completion_tokens"], 40);
    // Completions too (what `vllm bench serve --ignore-eos` sends).
    let v =
        server.post("/v1/completions", r#"{"model":"sched","prompt":"hi","max_tokens":25,"ignore_eos":true}"#).json();
    assert_eq!(
        (choice(&v)["finish_reason"].as_str(), &v["usage"]["completion_tokens"]),
        (Some("length"), &Value::from(25))
    );
}

#[test]
fn min_tokens_holds_back_the_end_and_stop_strings() {
    let server = Server::start();
    // "hi" is 1 token; min_tokens 5: EOS cannot come before token 6, so 5
    // tokens then EOS: finish "stop", 6 completion tokens.
    let v = server.chat("fixed", "hi", r#""min_tokens":5"#).json();
    assert_eq!(
        (choice(&v)["finish_reason"].as_str(), &v["usage"]["completion_tokens"]),
        (Some("stop"), &Value::from(6))
    );
    // A stop string inside the first min_tokens tokens does not count:
    // "quick" completes in token 2 <= 3; "lazy" in token 8 > 3 does.
    let v = server.chat("fixed", MESSAGE, r#""min_tokens":3,"stop":["quick","lazy"]"#).json();
    assert_eq!(choice(&v)["message"]["content"], "The quick brown fox jumps over the ");
    assert_eq!((choice(&v)["stop_reason"].as_str(), &v["usage"]["completion_tokens"]), (Some("lazy"), &Value::from(8)));
    // min_tokens over max_tokens: vLLM's 400.
    let (kind, msg, param) = error(&server.chat("fixed", "hi", r#""max_tokens":3,"min_tokens":4"#), 400);
    assert_eq!(
        (kind.as_str(), msg.as_str(), param),
        ("BadRequestError", "min_tokens must be less than or equal to max_tokens=3, got 4.", Value::from("min_tokens"))
    );
}

#[test]
fn include_stop_str_in_output_keeps_the_stop_string() {
    let server = Server::start();
    let v = server.chat("fixed", MESSAGE, r#""stop":"lazy","include_stop_str_in_output":true"#).json();
    assert_eq!(choice(&v)["message"]["content"], "The quick brown fox jumps over the lazy");
    assert_eq!(
        (choice(&v)["finish_reason"].as_str(), choice(&v)["stop_reason"].as_str()),
        (Some("stop"), Some("lazy"))
    );
    assert_eq!(v["usage"]["completion_tokens"], 8, "the token that completed the stop is the last");
}

#[test]
fn sampling_fields_are_validated_with_vllms_status_wording_and_param() {
    let server = Server::start();
    // Wrong types: pydantic's error, type "Bad Request".
    let (kind, msg, param) = error(&server.chat("sched", "hi", r#""temperature":"hot""#), 400);
    // vLLM 0.33 (validation_exception_handler): the location dotted, param
    // the same.
    assert_eq!((kind.as_str(), param), ("Bad Request", Value::from("body.temperature")));
    assert_eq!(
        msg,
        "1 validation error:\n  {'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'hot'}"
    );
    let (_, msg, param) = error(&server.chat("sched", "hi", r#""max_tokens":"many""#), 400);
    assert_eq!(param, "body.max_tokens");
    assert!(msg.contains("'type': 'int_parsing', 'loc': 'body.max_tokens', "), "{msg}");
    // Ranges: SamplingParams, type "BadRequestError".
    let cases = [
        (r#""top_p":7"#, "top_p must be in (0, 1], got 7.0. (parameter=top_p, value=7.0)", "top_p"),
        (
            r#""temperature":-1"#,
            "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
            "temperature",
        ),
        (
            r#""temperature":2.5"#,
            "temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)",
            "temperature",
        ),
        (r#""presence_penalty":3"#, "presence_penalty must be in [-2, 2], got 3.0.", "presence_penalty"),
        (r#""top_k":-5"#, "top_k must be 0 (disable), or at least 1, got -5.", "top_k"),
        (
            r#""logprobs":true,"top_logprobs":21"#,
            "Requested sample logprobs of 21, which is greater than max allowed: 20",
            "top_logprobs",
        ),
        (r#""stop":["ok",""]"#, "stop cannot contain an empty string.", "stop"),
    ];
    for (extra, want, field) in cases {
        let (kind, msg, param) = error(&server.chat("sched", "hi", extra), 400);
        assert_eq!((kind.as_str(), msg.as_str(), param), ("BadRequestError", want, Value::from(field)), "{extra}");
    }
    // Model validators on the raw body: vLLM 0.33 raises VLLMValidationError
    // there, which pydantic does not wrap: "BadRequestError", the sentence
    // with its parameter.
    let (kind, msg, param) = error(&server.chat("sched", "hi", r#""top_logprobs":2"#), 400);
    assert_eq!(
        (kind.as_str(), msg.as_str(), param),
        (
            "BadRequestError",
            "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
            Value::from("top_logprobs")
        )
    );
    // Unknown extra fields are accepted, as vLLM accepts them; so are lax
    // types pydantic converts ("5" for an integer).
    let ok = server.chat("sched", "hi", r#""not_a_field":[1,2],"best_of":4,"max_tokens":"5""#);
    assert_eq!(ok.status, 200, "{}", ok.body);
}

#[test]
fn tools_without_tool_call_flags_are_refused_as_vllm_refuses_them() {
    let server = Server::start();
    let tools = r#""tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]"#;
    // tool_choice defaults to "auto" when tools are given: vLLM without
    // --enable-auto-tool-choice answers this 400.
    for extra in [tools.to_string(), format!(r#"{tools},"tool_choice":"auto""#)] {
        let (kind, msg, _) = error(&server.chat("sched", "hi", &extra), 400);
        assert_eq!(
            (kind.as_str(), msg.as_str()),
            (
                "BadRequestError",
                "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"
            )
        );
    }
    // tool_choice "none" ignores the tools.
    assert_eq!(server.chat("sched", "hi", &format!(r#"{tools},"tool_choice":"none""#)).status, 200);
    let (_, msg, param) = error(&server.chat("sched", "hi", r#""tool_choice":"auto""#), 400);
    assert_eq!(param, "tool_choice");
    assert!(msg.contains("When using `tool_choice`, `tools` must be set."), "{msg}");
}

#[test]
fn created_is_stamped_per_response() {
    let server = Server::start();
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let before = now();
    let v = server.chat("fixed", "hi", "").json();
    let created = v["created"].as_u64().unwrap();
    assert!((before..=now()).contains(&created), "created {created} is when the request came, not server start");
    let models = server.get("/v1/models").json();
    assert!(models["data"][0]["created"].as_u64().unwrap() >= created);
}

#[test]
fn tokenize_detokenize_version_ping_models_and_405_answer_as_vllm() {
    let server = Server::start();
    // /ping (GET and POST) and /health: 200.
    assert_eq!(server.get("/ping").status, 200);
    assert_eq!(server.post("/ping", "").status, 200);
    assert_eq!(server.get("/version").json()["version"], env!("CARGO_PKG_VERSION"));
    // /tokenize: count, max_model_len, tokens; token_strs on request.
    let v = server.post("/tokenize", r#"{"model":"sched","prompt":"Hello world","return_token_strs":true}"#).json();
    assert_eq!((&v["count"], &v["max_model_len"]), (&Value::from(2), &Value::from(4096)));
    assert_eq!(v["tokens"].as_array().unwrap().len(), 2);
    assert_eq!(v["token_strs"], serde_json::json!(["Hello", " world"]));
    let plain = server.post("/tokenize", r#"{"prompt":"Hello world"}"#).json();
    assert_eq!(
        (&plain["tokens"], &plain["token_strs"]),
        (&v["tokens"], &Value::Null),
        "same ids, no strings by default"
    );
    // Chat: the template's framing counts, as in a chat request's usage.
    let v =
        server.post("/tokenize", r#"{"model":"sched","messages":[{"role":"user","content":"Hello world"}]}"#).json();
    assert_eq!(v["count"], 2 + 5 + 3);
    let usage = server.chat("sched", "Hello world", "").json()["usage"]["prompt_tokens"].clone();
    assert_eq!(v["count"], usage, "/tokenize counts what the request is charged");
    // /detokenize with the built-in tokenizer: a 400 saying why.
    let (_, msg, param) = error(&server.post("/detokenize", r#"{"model":"sched","tokens":[1,2]}"#), 400);
    assert_eq!(param, "tokens");
    assert!(msg.contains("built-in tokenizer"), "{msg}");
    // A wrong method: vLLM's http_exception_handler body.
    let r = server.get("/v1/completions");
    assert_eq!(
        r.json(),
        serde_json::json!({"error": {"message": "Method Not Allowed", "type": "Method Not Allowed", "param": null, "code": 405}})
    );
    // /v1/models: vLLM's card with a permission object.
    let m = server.get("/v1/models").json();
    let card = &m["data"][0];
    assert_eq!(
        (&card["object"], &card["owned_by"], &card["max_model_len"]),
        (&Value::from("model"), &Value::from("vllm"), &Value::from(4096))
    );
    assert_eq!(card["permission"][0]["object"], "model_permission");
}

#[test]
fn logprobs_come_in_vllms_shapes_deterministically() {
    let server = Server::start();
    // Chat: logprobs.content[i] = {token, logprob, bytes, top_logprobs[k]}.
    let extra = r#""logprobs":true,"top_logprobs":3,"seed":5"#;
    let v = server.chat("fixed", MESSAGE, extra).json();
    let content = choice(&v)["logprobs"]["content"].as_array().unwrap().clone();
    assert_eq!(content.len() as u64, MESSAGE_TOKENS + 1, "one per output token, EOS included");
    assert_eq!(content[1]["token"], " quick");
    assert_eq!(content[1]["bytes"], serde_json::json!(" quick".as_bytes()));
    for t in &content {
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!((&top[0]["token"], &top[0]["logprob"]), (&t["token"], &t["logprob"]), "sampled token first");
        assert!(t["logprob"].as_f64().unwrap() < 0.0);
    }
    assert_eq!(
        server.chat("fixed", MESSAGE, extra).json()["choices"][0]["logprobs"],
        choice(&v)["logprobs"],
        "same seed, same logprobs"
    );
    // Without logprobs: null.
    assert!(choice(&server.chat("fixed", MESSAGE, "").json())["logprobs"].is_null());
    // Streamed chat: each token chunk carries its own entry.
    let r = server.chat("fixed", "hi", r#""logprobs":true,"stream":true"#);
    let c = chunks(&r);
    assert_eq!(c[1]["choices"][0]["logprobs"]["content"][0]["token"], "hi");
    assert_eq!(c[1]["choices"][0]["logprobs"]["content"][0]["top_logprobs"], serde_json::json!([]), "top_logprobs 0");
    // Completions: {text_offset, token_logprobs, tokens, top_logprobs[{tok: lp}]}.
    let v = server.post("/v1/completions", r#"{"model":"fixed","prompt":"a b c","logprobs":2}"#).json();
    let lp = &choice(&v)["logprobs"];
    assert_eq!(lp["tokens"], serde_json::json!(["a", " b", " c", ""]));
    assert_eq!(lp["text_offset"], serde_json::json!([0, 1, 3, 5]));
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 4);
}

#[test]
fn n_and_lists_of_prompts_give_one_choice_each_with_vllms_indices_and_usage() {
    let server = Server::start();
    // Chat n=3: choices 0..2, prompt counted once, completion tokens summed.
    let v = server.chat("sched", "hi", r#""n":3,"max_tokens":6,"ignore_eos":true"#).json();
    let idx: Vec<u64> = v["choices"].as_array().unwrap().iter().map(|c| c["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, vec![0, 1, 2]);
    let one = server.chat("sched", "hi", r#""max_tokens":6,"ignore_eos":true"#).json();
    assert_eq!(v["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]);
    assert_eq!(v["usage"]["completion_tokens"], 18);
    let texts: Vec<&str> =
        v["choices"].as_array().unwrap().iter().map(|c| c["message"]["content"].as_str().unwrap()).collect();
    assert!(texts[0] != texts[1] && texts[1] != texts[2], "sampled sequences differ: {texts:?}");
    // Completions with two prompts and n=2: index = prompt * n + sample.
    let v = server.post("/v1/completions", r#"{"model":"fixed","prompt":["a b","c"],"n":2,"max_tokens":5}"#).json();
    let got: Vec<(u64, String)> = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["index"].as_u64().unwrap(), c["text"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(got, vec![(0, "a b".into()), (1, "a b".into()), (2, "c".into()), (3, "c".into())]);
    // Prompts: 2 + 1 tokens, each counted once; outputs 3 + 3 + 2 + 2 (EOS included).
    assert_eq!((&v["usage"]["prompt_tokens"], &v["usage"]["completion_tokens"]), (&Value::from(3), &Value::from(10)));
    // Streamed chat n=2: a role chunk per choice, both choices finish.
    let r = server.chat("fixed", "hi", r#""n":2,"stream":true"#);
    let c = chunks(&r);
    let roles: Vec<u64> = c
        .iter()
        .filter(|x| x["choices"][0]["delta"]["role"] == "assistant")
        .map(|x| x["choices"][0]["index"].as_u64().unwrap())
        .collect();
    assert_eq!(roles, vec![0, 1]);
    let finished: Vec<u64> = c
        .iter()
        .filter(|x| !x["choices"][0]["finish_reason"].is_null())
        .map(|x| x["choices"][0]["index"].as_u64().unwrap())
        .collect();
    assert_eq!(finished.len(), 2);
    // llmsim's bounds: at most 1,024 sequences and 2 Mi planned tokens a request.
    let (_, msg, param) = error(&server.chat("fixed", "hi", r#""n":1025"#), 400);
    assert_eq!(param, "n");
    assert!(msg.contains("asks for 1025 sequences; llmsim plans at most 1024"), "{msg}");
    let (_, msg, _) = error(&server.chat("fixed", "hi", r#""n":1024,"max_tokens":4000"#), 400);
    assert_eq!(
        msg,
        "this request may generate up to 4096000 tokens (sequences x max_tokens); llmsim plans at most 2097152 per request: lower n or max_tokens."
    );
    // vLLM counts n once per request in its histogram.
    assert_eq!(server.metric("vllm:request_params_n_count{engine=\"0\",model_name=\"sched\"}"), Some(2.0));
}

#[test]
fn echo_puts_the_prompt_before_the_answer() {
    let server = Server::start();
    // vLLM completions echo: text = prompt + completion.
    let v = server.post("/v1/completions", r#"{"model":"fixed","prompt":"a b","echo":true}"#).json();
    assert_eq!(choice(&v)["text"], "a ba b");
    let r = server.post("/v1/completions", r#"{"model":"fixed","prompt":"a b","echo":true,"stream":true}"#);
    assert_eq!(chunks(&r)[0]["choices"][0]["text"], "a ba", "the first chunk carries the prompt");
}

/// Fixed models that each inject one kind of fault into every request, and
/// a one-sequence scheduler model whose queue holds one request.
const FAULT_MODELS: &str = "
models:
  - name: f429
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {seed: 1, rate: 1, kinds: [{kind: http_429, retry_after_s: 2}]}
  - name: f503
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {rate: 1, kinds: [{kind: http_503}]}
  - name: stall
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {rate: 1, kinds: [{kind: stall, after_tokens: 2, stall_ms: 400}]}
  - name: cut
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {rate: 1, kinds: [{kind: cut, after_tokens: 3}]}
  - name: malformed
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {rate: 1, kinds: [{kind: malformed, after_tokens: 1}]}
  - name: half
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    faults: {seed: 9, rate: 0.5, kinds: [{kind: http_500}]}
  - name: queue
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 8192
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288}
    scheduler: {max_batch_tokens: 8192, max_num_sequences: 1}
    faults: {max_waiting: 1}
";

#[test]
fn injected_faults_answer_as_configured_and_are_counted_and_recorded() {
    let dir = crate::support::tempdir();
    let record = dir.path().join("served.csv");
    let server = Server::start_with(FAULT_MODELS, &["--record", record.to_str().unwrap()]);
    // http_429: before the first byte, with retry-after, in vLLM's HTTP-error envelope.
    let r = server.chat("f429", "hi", "");
    assert_eq!((r.status, r.header("retry-after")), (429, Some("2")));
    assert_eq!(
        r.json(),
        serde_json::json!({"error": {"message": "Too Many Requests", "type": "Too Many Requests", "param": null, "code": 429}})
    );
    assert_eq!(server.chat("f503", "hi", r#""stream":true"#).status, 503);
    // stall: the stream pauses 400 ms after two tokens, then finishes.
    let t = std::time::Instant::now();
    let r = server.chat("stall", MESSAGE, r#""stream":true"#);
    assert!(t.elapsed() >= std::time::Duration::from_millis(400), "{:?}", t.elapsed());
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    // cut: role + 3 tokens, then the connection closes: no finish, no [DONE].
    let r = server.chat("cut", MESSAGE, r#""stream":true"#);
    let ev = r.events();
    assert_eq!(ev.len(), 1 + 3, "{}", r.body);
    assert!(!r.body.contains("[DONE]") && !r.body.contains("finish_reason\":\"stop"));
    // malformed: one event's JSON is cut in half; the stream goes on to [DONE].
    let r = server.chat("malformed", MESSAGE, r#""stream":true"#);
    let bad = r.events().iter().filter(|e| *e != "[DONE]" && serde_json::from_str::<Value>(e).is_err()).count();
    assert_eq!(bad, 1, "{}", r.body);
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    // A whole (non-streamed) malformed answer is cut-in-half JSON.
    let r = server.chat("malformed", MESSAGE, "");
    assert!(serde_json::from_str::<Value>(&r.body).is_err() && r.body.starts_with('{'), "{}", r.body);
    // rate 0.5: the same seed gives the same faults, near half of them.
    let statuses: Vec<u16> = (0..40).map(|_| server.chat("half", "hi", "").status).collect();
    let failed = statuses.iter().filter(|&&s| s == 500).count();
    assert!((10..=30).contains(&failed), "{statuses:?}");
    assert!(statuses.iter().all(|&s| s == 200 || s == 500));
    // Counted per kind in /metrics.
    let m = |model: &str, kind: &str| {
        server.metric(&format!("llmsim:faults_injected_total{{engine=\"0\",kind=\"{kind}\",model_name=\"{model}\"}}"))
    };
    assert_eq!(m("f429", "http_429"), Some(1.0));
    assert_eq!(m("cut", "cut"), Some(1.0));
    assert_eq!(m("malformed", "malformed"), Some(2.0));
    assert_eq!(m("half", "http_500"), Some(failed as f64));
    server.stop();
    // Recorded beside each model's record file.
    let log = read(&dir.path().join("served.half.faults.csv"));
    assert_eq!(log.lines().next(), Some("at_s,request,kind"));
    assert_eq!(log.lines().count(), 1 + failed);
    let picked: Vec<u64> = log.lines().skip(1).map(|l| l.split(',').nth(1).unwrap().parse().unwrap()).collect();
    let want: Vec<u64> = statuses.iter().enumerate().filter(|(_, s)| **s == 500).map(|(i, _)| i as u64).collect();
    assert_eq!(picked, want, "the request numbers of the 500s");
}

#[test]
fn max_waiting_turns_requests_away_with_429_while_the_queue_is_full() {
    let server = Server::start_with(FAULT_MODELS, &[]);
    let port = server.port;
    // One sequence at a time: a long answer runs, a second waits...
    let long = std::thread::spawn(move || {
        http(port, "POST", "/v1/chat/completions", &chat_body("queue", "hi", r#""max_tokens":400,"ignore_eos":true"#))
    });
    server.wait_for(10, "the first request running", |s| {
        s.metric("vllm:num_requests_running{engine=\"0\",model_name=\"queue\"}") == Some(1.0)
    });
    let waiting = std::thread::spawn(move || {
        http(port, "POST", "/v1/chat/completions", &chat_body("queue", "hi", r#""max_tokens":5"#))
    });
    server.wait_for(10, "the second request waiting", |s| {
        s.metric("vllm:num_requests_waiting{engine=\"0\",model_name=\"queue\"}") == Some(1.0)
    });
    // ...and a third finds the queue full.
    let r = server.chat("queue", "hi", r#""max_tokens":5"#);
    assert_eq!((r.status, r.header("retry-after")), (429, Some("1")), "{}", r.body);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("faults.max_waiting"));
    assert_eq!(long.join().unwrap().status, 200);
    assert_eq!(waiting.join().unwrap().status, 200);
    assert_eq!(
        server.metric("llmsim:faults_injected_total{engine=\"0\",kind=\"queue_full\",model_name=\"queue\"}"),
        Some(1.0)
    );
}

#[test]
fn a_model_with_a_tokenizer_json_counts_and_streams_its_tokens() {
    let dir = crate::support::tempdir();
    // A word-level tokenizer made here: whitespace pre-tokenizer, seven words.
    let tokenizer = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2,"the":3,"quick":4,"fox":5,",":6},
        "unk_token":"[UNK]"}}"#;
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer).unwrap();
    let models = format!(
        "models:\n  - name: words\n    engine: fixed\n    tokenizer: {}\n    fixed: {{context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}}\n",
        dir.path().join("tokenizer.json").display()
    );
    let server = Server::start_with(&models, &[]);
    // "hello, world 123456": hello / , / world / 123456 (the built-in one counts 6).
    let v = server.post("/tokenize", r#"{"prompt":"hello, world 123456"}"#).json();
    assert_eq!((&v["count"], &v["tokens"]), (&Value::from(4), &serde_json::json!([1, 6, 2, 0])));
    assert_eq!(server.post("/detokenize", r#"{"tokens":[1,2]}"#).json()["prompt"], "hello world");
    // Usage and the streamed chunks follow the model's tokens.
    let v = server.post("/v1/completions", r#"{"prompt":"hello, world 123456"}"#).json();
    assert_eq!(v["usage"]["prompt_tokens"], 4);
    assert_eq!(v["usage"]["completion_tokens"], 4 + 1, "4 tokens and EOS");
    let r = server.post("/v1/completions", r#"{"prompt":"hello, world 123456","stream":true}"#);
    let texts: Vec<String> = chunks(&r).iter().map(|c| c["choices"][0]["text"].as_str().unwrap().to_string()).collect();
    assert_eq!(texts, vec!["hello", ", ", "world ", "123456", ""]);
    // A token-id prompt is decoded for the responses script.
    let v = server.post("/v1/completions", r#"{"prompt":[1,2]}"#).json();
    assert_eq!(choice(&v)["text"], "hello world");
    // The vocabulary has 7 ids (0-6): 7 is outside it (vLLM's 400).
    assert_eq!(server.post("/v1/completions", r#"{"prompt":[6],"max_tokens":1}"#).status, 200);
    let (_, msg, _) = error(&server.post("/v1/completions", r#"{"prompt":[6,7],"max_tokens":1}"#), 400);
    assert_eq!(msg, "Token id 7 is out of vocabulary");
    // A broken tokenizer file stops serve before it listens, naming the key.
    std::fs::write(dir.path().join("tokenizer.json"), "{not json").unwrap();
    let out = crate::support::TestCommand::new(&["serve", "--port", "0", "--models"])
        .arg(server.dir.path().join("models.yml"))
        .output();
    assert_eq!(out.code(), 2, "{}", out.describe());
    assert!(out.stderr().contains("models[0].tokenizer: cannot read"), "{}", out.describe());
}

#[test]
fn bench_counts_each_injected_fault_by_kind() {
    let models = "
models:
  - name: flaky
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 1000000, itl_ms: 1}
    faults:
      seed: 5
      rate: 0.6
      kinds: [{kind: http_429}, {kind: http_503}, {kind: cut, after_tokens: 2}, {kind: malformed, after_tokens: 1}, {kind: stall, after_tokens: 1, stall_ms: 20}]
";
    let server = Server::start_with(models, &[]);
    let dir = crate::support::tempdir();
    let json = dir.path().join("bench.json");
    let mut cmd =
        crate::support::TestCommand::new(&["bench", "--base-url"]).arg(format!("http://127.0.0.1:{}", server.port));
    for a in ["--model", "flaky", "--rate", "200", "--requests", "60", "--prompt-tokens", "32", "--output-tokens", "8"]
    {
        cmd = cmd.arg(a);
    }
    let out = cmd.arg("--seed").arg("1").arg("-q").arg("--json").arg(&json).output();
    assert!(json.exists(), "{}", out.describe());
    let b: Value = serde_json::from_str(&read(&json)).unwrap();
    let by_kind = &b["llmsim_failures_by_kind"];
    let server_faults = &b["llmsim_server_summary"]["models"]["flaky"]["faults"];
    // Every fault the server injected before or during a stream is a failure
    // of its own kind on the client; a stall is not a failure.
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    assert_eq!(n(by_kind, "http_429"), n(server_faults, "http_429"), "{by_kind} vs {server_faults}");
    assert_eq!(n(by_kind, "http_503"), n(server_faults, "http_503"));
    assert_eq!(n(by_kind, "stream_cut"), n(server_faults, "cut"));
    assert_eq!(n(by_kind, "stream_malformed"), n(server_faults, "malformed"));
    let injected: u64 = ["http_429", "http_503", "cut", "malformed", "stall"].iter().map(|k| n(server_faults, k)).sum();
    assert!(injected > 20 && n(server_faults, "stall") > 0, "60% of 60 requests: {server_faults}");
    assert_eq!(b["failed"].as_u64().unwrap(), injected - n(server_faults, "stall"));
}

#[test]
fn diff_shows_the_servers_figures_beside_the_clients() {
    let server = Server::start();
    let dir = crate::support::tempdir();
    let (bench, predicted) = (dir.path().join("bench.json"), dir.path().join("predicted.json"));
    let mut cmd =
        crate::support::TestCommand::new(&["bench", "--base-url"]).arg(format!("http://127.0.0.1:{}", server.port));
    for a in ["--model", "sched", "--rate", "20", "--requests", "20", "--prompt-tokens", "64", "--output-tokens", "16"]
    {
        cmd = cmd.arg(a);
    }
    let out = cmd.arg("-q").arg("--json").arg(&bench).output();
    assert_eq!(out.code(), 0, "{}", out.describe());
    let out = crate::support::TestCommand::new(&["run", "scenarios/base.yml", "-q", "--trace-from"])
        .arg(&bench)
        .arg("--json")
        .arg(&predicted)
        .output();
    assert_eq!(out.code(), 0, "{}", out.describe());
    let out = crate::support::TestCommand::new(&["diff"]).arg(&predicted).arg(&bench).output();
    let text = out.stdout();
    assert!(text.contains("server-side figures (llmsim serve /metrics/summary of model `sched`, ms)"), "{text}");
    // The server-observed TTFT p50 printed is the summary's.
    let b: Value = serde_json::from_str(&read(&bench)).unwrap();
    let obs = b["llmsim_server_summary"]["models"]["sched"]["observed"]["ttft_ms"]["p50"].as_f64().unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("ttft.p50 ") && l.split_whitespace().count() == 6)
        .expect("a ttft.p50 row with six columns");
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[3], format!("{obs:.3}"), "{line}");
    let client: f64 = cols[2].parse().unwrap();
    let overhead: f64 = cols[5].parse().unwrap();
    assert!((overhead - (client - obs)).abs() < 0.0015, "client minus server observed: {line}");
}

/// Sends `body` to `path` with exactly the headers given (besides Host,
/// Connection and Content-Length): no Content-Type unless one is listed.
fn post_with(server: &Server, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    use std::io::{Read, Write};
    let mut s = connect(server.port);
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes())).expect("send");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse(&raw)
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn the_response_id_is_formed_from_x_request_id_or_the_body_request_id() {
    let server = Server::start();
    let body = chat_body("fixed", "hi", "");
    // vLLM 0.33: "chatcmpl-" + the X-Request-Id header, else the body's
    // request_id, else a new id; completions "cmpl-".
    let v = post_with(&server, "/v1/chat/completions", &[JSON, ("X-Request-Id", "trace-7")], &body).json();
    assert_eq!(v["id"], "chatcmpl-trace-7");
    let with_field = chat_body("fixed", "hi", r#""request_id":"mine-1""#);
    assert_eq!(server.post("/v1/chat/completions", &with_field).json()["id"], "chatcmpl-mine-1");
    let v = post_with(&server, "/v1/chat/completions", &[JSON, ("X-Request-Id", "hdr")], &with_field).json();
    assert_eq!(v["id"], "chatcmpl-hdr", "the header wins");
    let r = post_with(
        &server,
        "/v1/completions",
        &[JSON, ("X-Request-Id", "c-9")],
        r#"{"model":"fixed","prompt":"hi","stream":true}"#,
    );
    let ids: Vec<Value> = chunks(&r).iter().map(|c| c["id"].clone()).collect();
    assert!(!ids.is_empty() && ids.iter().all(|id| id == "cmpl-c-9"), "{}", r.body);
    // Neither: llmsim numbers it.
    let id = server.chat("fixed", "hi", "").json()["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("chatcmpl-llmsim-"), "{id}");
    // vLLM answers no X-Request-Id header unless --enable-request-id-headers.
    assert_eq!(
        post_with(&server, "/v1/chat/completions", &[JSON, ("X-Request-Id", "a")], &body).header("x-request-id"),
        None
    );
    // request_id must be a string (pydantic).
    let (kind, _, _) = error(&server.chat("fixed", "hi", r#""request_id":5"#), 400);
    assert_eq!(kind, "Bad Request");
}

#[test]
fn enable_request_id_headers_echoes_the_id_on_every_response() {
    let server = Server::start_with(MODELS, &["--enable-request-id-headers"]);
    let body = chat_body("fixed", "hi", "");
    let r = post_with(&server, "/v1/chat/completions", &[JSON, ("X-Request-Id", "echo-me")], &body);
    assert_eq!(r.header("x-request-id"), Some("echo-me"));
    // Without one, a new id of 32 hex digits (vLLM: uuid4().hex), on every
    // route, errors included.
    for r in [server.get("/health"), server.chat("nope", "hi", ""), server.chat("fixed", "hi", "")] {
        let id = r.header("x-request-id").unwrap_or_else(|| panic!("no x-request-id: {r:?}")).to_string();
        assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }
}

#[test]
fn a_body_without_a_json_content_type_is_vllms_400() {
    let server = Server::start();
    let body = chat_body("fixed", "hi", "");
    let unsupported = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed";
    for headers in [&[][..], &[("Content-Type", "text/plain")][..], &[("Content-Type", "application/jsonx")][..]] {
        for path in ["/v1/chat/completions", "/v1/completions", "/tokenize"] {
            let r = post_with(&server, path, headers, &body);
            let (kind, msg, param) = error(&r, 400);
            assert_eq!(
                (kind.as_str(), msg.as_str(), param),
                ("Bad Request", unsupported, Value::Null),
                "{path} {headers:?}"
            );
        }
    }
    // Parameters and case are fine: only the media type is compared.
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let r = post_with(&server, "/v1/chat/completions", &[("Content-Type", ct)], &body);
        assert_eq!(r.status, 200, "{ct}: {}", r.body);
    }
    // FastAPI reads the body as JSON before vLLM's check when the type is
    // missing or JSON-like: broken JSON is then a JSON error, not 415-ish.
    let r = post_with(&server, "/v1/chat/completions", &[], "{\"a\":1} x");
    let (_, msg, _) = error(&r, 400);
    assert!(msg.contains("'type': 'json_invalid'"), "{msg}");
    let r = post_with(&server, "/v1/chat/completions", &[("Content-Type", "application/vnd.api+json")], &body);
    assert_eq!(error(&r, 400).1, unsupported);
}

#[test]
fn prompt_token_ids_outside_the_vocabulary_are_vllms_400() {
    let server = Server::start();
    // The built-in tokenizer's id space: 2^17 hashed ids and the two ChatML
    // markers, so 131073 is the last id and 131074 the first outside.
    let ok = server.post("/v1/completions", r#"{"model":"fixed","prompt":[1,131073],"max_tokens":2}"#);
    assert_eq!(ok.status, 200, "{}", ok.body);
    let (kind, msg, param) =
        error(&server.post("/v1/completions", r#"{"model":"fixed","prompt":[1,131074,200000],"max_tokens":2}"#), 400);
    assert_eq!(
        (kind.as_str(), msg.as_str(), param),
        ("BadRequestError", "Token id 200000 is out of vocabulary", Value::Null)
    );
    // A negative id is reported before a large one.
    let (_, msg, _) =
        error(&server.post("/v1/completions", r#"{"model":"fixed","prompt":[[5],[999999,-3]],"max_tokens":2}"#), 400);
    assert_eq!(msg, "Token id -3 is out of vocabulary");
    // Streamed, vLLM has sent its 200 when the engine refuses the ids: the
    // error is the stream's one event, then [DONE].
    let r = server.post("/v1/completions", r#"{"model":"fixed","prompt":[131074],"stream":true,"max_tokens":2}"#);
    assert_eq!(r.status, 200);
    let events = r.events();
    assert_eq!(events.len(), 2, "{}", r.body);
    let e: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(
        (e["error"]["message"].as_str(), e["error"]["code"].as_u64()),
        (Some("Token id 131074 is out of vocabulary"), Some(400))
    );
    assert_eq!(events[1], "[DONE]");
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> =
        v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[test]
fn whole_responses_carry_every_key_vllm_0_33_serialises_nulls_included() {
    let server = Server::start();
    // vLLM 0.33 answers a whole response with `model_dump()`: every field of
    // ChatCompletionResponse, ChatCompletionResponseChoice, ChatMessage
    // (less an empty tool_calls) and UsageInfo, nulls included.
    let v = server.chat("fixed", MESSAGE, "").json();
    assert_eq!(
        keys(&v),
        [
            "choices",
            "created",
            "ec_transfer_params",
            "id",
            "kv_transfer_params",
            "metrics",
            "model",
            "object",
            "prompt_logprobs",
            "prompt_text",
            "prompt_token_ids",
            "service_tier",
            "system_fingerprint",
            "usage"
        ]
    );
    assert_eq!(
        keys(choice(&v)),
        [
            "finish_reason",
            "index",
            "logprobs",
            "message",
            "routed_experts",
            "stop_reason",
            "token_ids",
            "weight_versions"
        ]
    );
    assert_eq!(
        keys(&choice(&v)["message"]),
        ["annotations", "audio", "content", "function_call", "reasoning", "refusal", "role"]
    );
    assert_eq!(
        keys(&v["usage"]),
        ["completion_tokens", "completion_tokens_details", "prompt_tokens", "prompt_tokens_details", "total_tokens"]
    );
    assert!(choice(&v)["stop_reason"].is_null() && v["usage"]["prompt_tokens_details"].is_null());
    let v = server.post("/v1/completions", r#"{"model":"fixed","prompt":"hi"}"#).json();
    assert_eq!(
        keys(&v),
        [
            "choices",
            "created",
            "ec_transfer_params",
            "id",
            "kv_transfer_params",
            "metrics",
            "model",
            "object",
            "service_tier",
            "system_fingerprint",
            "usage"
        ]
    );
    assert_eq!(
        keys(choice(&v)),
        [
            "finish_reason",
            "index",
            "logprobs",
            "prompt_logprobs",
            "prompt_token_ids",
            "routed_experts",
            "stop_reason",
            "text",
            "token_ids",
            "weight_versions"
        ]
    );
}

#[test]
fn stream_chunks_carry_the_keys_vllm_0_33_sets_on_each() {
    let server = Server::start();
    // Chunks are `model_dump_json(exclude_unset=True)`: a key is there when
    // the chunk's constructor set it, even to None; the usage chunk is
    // also `exclude_none`.
    let r = server.chat("fixed", "hi", r#""stream":true,"stream_options":{"include_usage":true}"#);
    let c = chunks(&r);
    assert_eq!(c.len(), 4, "role, \"hi\", EOS, usage:\n{}", r.body);
    // Role chunk: prompt_token_ids and prompt_text set (to None).
    assert_eq!(keys(&c[0]), ["choices", "created", "id", "model", "object", "prompt_text", "prompt_token_ids"]);
    assert_eq!(keys(&c[0]["choices"][0]), ["delta", "finish_reason", "index", "logprobs"]);
    assert_eq!(keys(&c[0]["choices"][0]["delta"]), ["content", "role"]);
    // A token: token_ids on the choice, kv_transfer_params on the chunk.
    assert_eq!(keys(&c[1]), ["choices", "created", "id", "kv_transfer_params", "model", "object"]);
    assert_eq!(keys(&c[1]["choices"][0]), ["delta", "finish_reason", "index", "logprobs", "token_ids"]);
    assert_eq!(keys(&c[1]["choices"][0]["delta"]), ["content"]);
    // The last token: stop_reason (null: it ended with EOS) and weight_versions.
    assert_eq!(
        keys(&c[2]["choices"][0]),
        ["delta", "finish_reason", "index", "logprobs", "stop_reason", "token_ids", "weight_versions"]
    );
    assert!(c[2]["choices"][0]["stop_reason"].is_null());
    // Usage: no null keys.
    assert_eq!(keys(&c[3]), ["choices", "created", "id", "model", "object", "usage"]);
    assert_eq!(keys(&c[3]["usage"]), ["completion_tokens", "prompt_tokens", "total_tokens"]);
    // Continuous usage in chat sets completion_tokens_details (None).
    let r = server.chat(
        "fixed",
        "hi",
        r#""stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}"#,
    );
    let c = chunks(&r);
    assert_eq!(
        keys(&c[1]["usage"]),
        ["completion_tokens", "completion_tokens_details", "prompt_tokens", "total_tokens"]
    );
    // Completions set every choice key on every chunk.
    let r = server.post(
        "/v1/completions",
        r#"{"model":"fixed","prompt":"hi","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#,
    );
    let c = chunks(&r);
    assert_eq!(keys(&c[0]), ["choices", "created", "id", "kv_transfer_params", "model", "object", "usage"]);
    assert_eq!(
        keys(&c[0]["choices"][0]),
        [
            "finish_reason",
            "index",
            "logprobs",
            "prompt_token_ids",
            "stop_reason",
            "text",
            "token_ids",
            "weight_versions"
        ]
    );
    assert_eq!(keys(&c[0]["usage"]), ["completion_tokens", "prompt_tokens", "total_tokens"]);
}
