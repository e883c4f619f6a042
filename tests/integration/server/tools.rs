//! Tool calls over a real socket, as vLLM 0.33 answers them: refused
//! without its tool flags, text for `"auto"` without
//! `--enable-auto-tool-choice`, and with the flags deterministic calls from
//! the responses script (harness `RESPONSES`: "weather in CITY" calls
//! `get_weather` with that city) or made up from the tool's schema. The
//! expected bodies are written out by hand from vLLM's serializers.

use serde_json::{Value, json};

use super::harness::*;

/// `plain` has no tool flags, `parser` only `--tool-call-parser hermes`,
/// `agent` both flags.
const MODELS: &str = "
models:
  - name: plain
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
  - name: parser
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    tool_call_parser: hermes
  - name: agent
    engine: fixed
    fixed: {context_length: 4096, prefill_tokens_per_s: 100000, itl_ms: 1}
    tool_call_parser: hermes
    enable_auto_tool_choice: true
";

/// One tool whose arguments are all known: `unit` has one allowed value,
/// and the script gives `city`.
const TOOLS: &str = r#""tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius"]}},"required":["city","unit"]}}}]"#;

/// The arguments as vLLM writes them (Python's `json.dumps`).
const PARIS_ARGS: &str = r#"{"city": "Paris", "unit": "celsius"}"#;

const NAMED: &str = r#""tool_choice":{"type":"function","function":{"name":"get_weather"}}"#;

fn tools(extra: &str) -> String {
    if extra.is_empty() { TOOLS.to_string() } else { format!("{TOOLS},{extra}") }
}

fn chunks(r: &Resp) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.body);
    r.events().iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).expect("chunk JSON")).collect()
}

/// Tokens of `text` by the server's tokenizer (a completions prompt).
fn count(server: &Server, text: &str) -> u64 {
    let body = json!({"model": "agent", "prompt": text}).to_string();
    server.post("/tokenize", &body).json()["count"].as_u64().unwrap()
}

fn is_call_id(id: &Value) -> bool {
    id.as_str().is_some_and(|s| {
        s.strip_prefix("chatcmpl-tool-").is_some_and(|h| h.len() == 32 && h.chars().all(|c| c.is_ascii_hexdigit()))
    })
}

#[test]
fn without_a_parser_every_tool_choice_but_none_is_vllms_400() {
    let server = Server::start_with(MODELS, &[]);
    let cases = [
        ("", "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"),
        (r#""tool_choice":"required""#, "tool_choice=\"required\" requires --tool-call-parser to be set"),
        (NAMED, "tool_choice=function \"get_weather\" requires --tool-call-parser to be set"),
    ];
    for (extra, message) in cases {
        let r = server.chat("plain", "What is the weather in Paris?", &tools(extra));
        assert_eq!(r.status, 400, "{}", r.body);
        let v = r.json();
        assert_eq!(
            v,
            json!({"error": {"message": message, "type": "BadRequestError", "param": "tool_choice", "code": 400}})
        );
    }
    let v = server.chat("plain", "What is the weather in Paris?", &tools(r#""tool_choice":"none""#)).json();
    assert_eq!(v["choices"][0]["message"]["content"], "What is the weather in Paris?");
}

#[test]
fn auto_without_enable_auto_tool_choice_answers_text() {
    let server = Server::start_with(MODELS, &[]);
    let v = server.chat("parser", "What is the weather in Paris?", &tools("")).json();
    let c = &v["choices"][0];
    assert_eq!(c["message"]["content"], "What is the weather in Paris?");
    assert_eq!(c["message"].get("tool_calls"), None, "vLLM 0.33 leaves an empty tool_calls out");
    assert_eq!(c["finish_reason"], "stop");
}

#[test]
fn auto_with_the_flags_calls_the_scripted_tool() {
    let server = Server::start_with(MODELS, &[]);
    let v = server.chat("agent", "What is the weather in Paris?", &tools("")).json();
    let c = &v["choices"][0];
    let id = c["message"]["tool_calls"][0]["id"].clone();
    assert!(is_call_id(&id), "{id}");
    assert_eq!(
        c["message"],
        json!({"role": "assistant", "content": null, "refusal": null, "annotations": null, "audio": null,
            "function_call": null, "reasoning": null,
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "get_weather", "arguments": PARIS_ARGS}}]})
    );
    assert_eq!(c["finish_reason"], "tool_calls");
    // The model generated hermes' call text, then its end-of-sequence token.
    let text = format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {PARIS_ARGS}}}\n</tool_call>");
    assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(count(&server, &text) + 1));
    // Same request, same call (id included); another seed, another id.
    let again = server.chat("agent", "What is the weather in Paris?", &tools("")).json();
    assert_eq!(again["choices"][0]["message"], c["message"]);
    let other = server.chat("agent", "What is the weather in Paris?", &tools(r#""seed":99"#)).json();
    assert_ne!(other["choices"][0]["message"]["tool_calls"][0]["id"], id);
    // A message the script has no call for is answered in text.
    let v = server.chat("agent", "hello there", &tools("")).json();
    assert_eq!(v["choices"][0]["message"]["content"], "hello there");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[test]
fn a_streamed_call_is_announced_once_then_sent_as_argument_pieces() {
    let server = Server::start_with(MODELS, &[]);
    let extra = tools(r#""stream":true,"stream_options":{"include_usage":true}"#);
    let c = chunks(&server.chat("agent", "What is the weather in Paris?", &extra));
    assert_eq!(c[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    let deltas: Vec<&Value> = c[1..].iter().filter(|x| !x["choices"].as_array().unwrap().is_empty()).collect();
    // The first tool-call chunk names the call, as vLLM's does.
    let first = &deltas[0]["choices"][0]["delta"]["tool_calls"][0];
    assert!(is_call_id(&first["id"]), "{first}");
    assert_eq!(
        (&first["type"], &first["index"], &first["function"]["name"]),
        (&json!("function"), &json!(0), &json!("get_weather"))
    );
    // Later chunks carry only the index and new argument text.
    let mut args = first["function"]["arguments"].as_str().unwrap().to_string();
    for d in &deltas[1..] {
        let delta = &d["choices"][0]["delta"];
        assert_eq!(delta.get("content"), None, "no content in a call: {delta}");
        if let Some(calls) = delta.get("tool_calls") {
            let call = calls[0].as_object().unwrap();
            let keys: Vec<&String> = call.keys().collect();
            assert_eq!(keys, ["function", "index"], "{delta}");
            args.push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(args, PARIS_ARGS);
    let last = deltas.last().unwrap();
    assert_eq!(
        (&last["choices"][0]["finish_reason"], &last["choices"][0]["delta"]),
        (&json!("tool_calls"), &json!({}))
    );
    // The markup's tokens (`<tool_call>`, the name) sent no chunk of their own.
    let usage = &c.last().unwrap()["usage"];
    assert!((deltas.len() as u64) < usage["completion_tokens"].as_u64().unwrap(), "{} chunks", deltas.len());
}

#[test]
fn required_and_named_choices_call_even_without_auto() {
    let server = Server::start_with(MODELS, &[]);
    // "required": the scripted call; content "" and finish "tool_calls".
    let v = server.chat("parser", "What is the weather in Paris?", &tools(r#""tool_choice":"required""#)).json();
    let m = &v["choices"][0]["message"];
    assert_eq!(
        (&m["content"], &m["tool_calls"][0]["function"]),
        (&json!(""), &json!({"name": "get_weather", "arguments": PARIS_ARGS}))
    );
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    // Generated text: `[{"name": "get_weather", "parameters": ARGS}]`, then EOS.
    let text = format!("[{{\"name\": \"get_weather\", \"parameters\": {PARIS_ARGS}}}]");
    assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(count(&server, &text) + 1));
    // Named, no scripted call for the message: arguments from the schema
    // (a word for `city`, the one allowed `unit`); vLLM reports "stop".
    let v = server.chat("parser", "hello there", &tools(NAMED)).json();
    let m = &v["choices"][0]["message"];
    assert_eq!((&m["content"], &m["tool_calls"][0]["function"]["name"]), (&json!(""), &json!("get_weather")));
    let args: Value = serde_json::from_str(m["tool_calls"][0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string() && args["unit"] == "celsius", "{args}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // Streamed named: every token is an arguments delta, the end-of-sequence
    // token's one empty, with finish "stop".
    let c = chunks(&server.chat("parser", "hello there", &tools(&format!(r#"{NAMED},"stream":true"#))));
    let last = &c.last().unwrap()["choices"][0];
    assert_eq!(last["delta"], json!({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}));
    assert_eq!(last["finish_reason"], "stop");
    let streamed: String = c[1..]
        .iter()
        .map(|x| x["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, m["tool_calls"][0]["function"]["arguments"].as_str().unwrap());
    // Streamed required: later chunks carry `"name": null`, as vLLM's do.
    let c = chunks(&server.chat(
        "parser",
        "What is the weather in Paris?",
        &tools(r#""tool_choice":"required","stream":true"#),
    ));
    let later: Vec<&Value> = c.iter().skip(2).filter_map(|x| x["choices"][0]["delta"].get("tool_calls")).collect();
    assert!(!later.is_empty());
    assert!(later.iter().all(|t| t[0]["function"]["name"].is_null() && t[0].get("id").is_none()), "{later:?}");
}

#[test]
fn after_a_tool_result_auto_answers_in_text() {
    let server = Server::start_with(MODELS, &[]);
    let body = json!({
        "model": "agent",
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function",
                "function": {"name": "get_weather", "arguments": PARIS_ARGS}}]},
            {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": "18 degrees"}
        ],
        "tools": serde_json::from_str::<Value>(&format!("{{{TOOLS}}}")).unwrap()["tools"],
    });
    let v = server.post("/v1/chat/completions", &body.to_string()).json();
    assert_eq!(v["choices"][0]["message"]["content"], "What is the weather in Paris?");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[test]
fn a_call_cut_by_max_tokens_comes_back_as_vllms_parser_reads_it() {
    let server = Server::start_with(MODELS, &[]);
    // Auto: no complete call, so the text so far is the content.
    let v = server.chat("agent", "What is the weather in Paris?", &tools(r#""max_tokens":3"#)).json();
    let c = &v["choices"][0];
    assert_eq!((&c["finish_reason"], c["message"].get("tool_calls")), (&json!("length"), None));
    let content = c["message"]["content"].as_str().unwrap();
    let full = format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {PARIS_ARGS}}}\n</tool_call>");
    assert!(!content.is_empty() && full.starts_with(content), "{content}");
    // Required: no call and empty content.
    let v = server
        .chat("parser", "What is the weather in Paris?", &tools(r#""tool_choice":"required","max_tokens":3"#))
        .json();
    let c = &v["choices"][0];
    assert_eq!(
        (&c["message"]["content"], c["message"].get("tool_calls"), &c["finish_reason"]),
        (&json!(""), None, &json!("length"))
    );
}

#[test]
fn tool_definitions_count_toward_the_prompt() {
    let server = Server::start_with(MODELS, &[]);
    let plain = server.chat("agent", "hello there", "").json()["usage"]["prompt_tokens"].as_u64().unwrap();
    let with = server.chat("agent", "hello there", &tools("")).json()["usage"]["prompt_tokens"].as_u64().unwrap();
    // The Hermes template's system message: its text plus 5 tokens of
    // message framing (docs/serve.md: 5 per message).
    let tool = r#"{"function": {"name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius"]}}, "required": ["city", "unit"], "type": "object"}}, "type": "function"}"#;
    let block = format!(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function \
         signatures within <tools></tools> XML tags:\n<tools>\n{tool}\n</tools>\n\nFor each function call, return a \
         json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
    );
    assert_eq!(with, plain + count(&server, &block) + 5);
    // /tokenize counts the same prompt.
    let body = json!({"model": "agent", "messages": [{"role": "user", "content": "hello there"}],
        "tools": serde_json::from_str::<Value>(&format!("{{{TOOLS}}}")).unwrap()["tools"]});
    assert_eq!(server.post("/tokenize", &body.to_string()).json()["count"].as_u64(), Some(with));
}
