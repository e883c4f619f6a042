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
    assert_eq!((kind.as_str(), param), ("Bad Request", Value::from("temperature")));
    assert_eq!(
        msg,
        "1 validation error:\n  {'type': 'float_parsing', 'loc': ('body', 'temperature'), 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'hot'}"
    );
    let (_, msg, param) = error(&server.chat("sched", "hi", r#""max_tokens":"many""#), 400);
    assert_eq!(param, "max_tokens");
    assert!(msg.contains("'type': 'int_parsing', 'loc': ('body', 'max_tokens')"), "{msg}");
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
    // Model validators on the raw body: "Bad Request" with the parameter.
    let (kind, msg, param) = error(&server.chat("sched", "hi", r#""top_logprobs":2"#), 400);
    assert_eq!((kind.as_str(), param), ("Bad Request", Value::from("top_logprobs")));
    assert!(msg.contains("when using `top_logprobs`, `logprobs` must be set to true."), "{msg}");
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
