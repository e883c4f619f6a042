//! Structured output over a real socket: `response_format` and
//! `structured_outputs` give content that satisfies the constraint
//! (checked by the `jsonschema` and `regex` crates, not by llmsim), priced
//! and streamed as its tokens and cut by `max_tokens`; the refusals carry
//! vLLM 0.33's sentences (written out by hand from its validators).

use serde_json::{Value, json};

use super::harness::*;

/// What the openai SDK's `.parse()` sends for a Pydantic model with a
/// nested model, a list of them and an enum (strict mode).
fn person() -> Value {
    json!({
        "$defs": {
            "Color": {"enum": ["red", "green", "blue"], "title": "Color", "type": "string"},
            "Pet": {"properties": {"name": {"title": "Name", "type": "string"},
                "age": {"title": "Age", "type": "integer", "minimum": 0, "maximum": 30}},
                "required": ["name", "age"], "title": "Pet", "type": "object", "additionalProperties": false}
        },
        "properties": {
            "name": {"title": "Name", "type": "string"},
            "favourite": {"$ref": "#/$defs/Color"},
            "pets": {"items": {"$ref": "#/$defs/Pet"}, "title": "Pets", "type": "array"},
            "born": {"format": "date", "title": "Born", "type": "string"}
        },
        "required": ["name", "favourite", "pets", "born"], "title": "Person", "type": "object",
        "additionalProperties": false
    })
}

fn json_schema(extra: &str) -> String {
    let rf = json!({"type": "json_schema", "json_schema": {"name": "Person", "schema": person(), "strict": true}});
    let sep = if extra.is_empty() { "" } else { "," };
    format!(r#""response_format":{rf}{sep}{extra}"#)
}

fn valid(schema: &Value, text: &str) -> bool {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    jsonschema::options().should_validate_formats(true).build(schema).unwrap().is_valid(&v)
}

/// Tokens of `text` by the server's tokenizer.
fn count(server: &Server, text: &str) -> u64 {
    let body = json!({"model": "fixed", "prompt": text}).to_string();
    server.post("/tokenize", &body).json()["count"].as_u64().unwrap()
}

fn error(r: &Resp) -> (u16, String, Value) {
    let v = r.json();
    (r.status, v["error"]["message"].as_str().unwrap_or_default().to_string(), v["error"]["param"].clone())
}

#[test]
fn a_json_schema_is_answered_with_json_it_accepts_priced_as_its_tokens() {
    let server = Server::start();
    let r = server.chat("fixed", "Describe a person", &json_schema(r#""seed":7"#));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(valid(&person(), &content), "{content}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // The content's tokens, then the end-of-sequence token.
    assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(count(&server, &content) + 1));
    // Same seed, same bytes; the stream sends the same text in pieces.
    let again = server.chat("fixed", "Describe a person", &json_schema(r#""seed":7"#)).json();
    assert_eq!(again["choices"][0]["message"]["content"], content.as_str());
    let s = server.chat("fixed", "Describe a person", &json_schema(r#""seed":7,"stream":true"#));
    let streamed: String = s
        .events()
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(streamed, content);
    // Other seeds, other people, all valid.
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..10 {
        let v = server.chat("fixed", "Describe a person", &json_schema(&format!(r#""seed":{seed}"#))).json();
        let c = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        assert!(valid(&person(), &c), "{c}");
        seen.insert(c);
    }
    assert!(seen.len() > 5, "{seen:?}");
}

#[test]
fn max_tokens_cuts_the_json_with_finish_reason_length() {
    let server = Server::start();
    let whole = server.chat("fixed", "Describe a person", &json_schema(r#""seed":3"#)).json();
    let full = whole["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let v = server.chat("fixed", "Describe a person", &json_schema(r#""seed":3,"max_tokens":5"#)).json();
    let cut = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert!(full.starts_with(cut) && cut.len() < full.len(), "{cut:?} of {full:?}");
}

#[test]
fn every_form_of_constraint_is_honoured_on_chat_and_completions() {
    let server = Server::start();
    let content = |r: Resp| -> String {
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let c = &v["choices"][0];
        c["message"]["content"].as_str().or(c["text"].as_str()).unwrap().to_string()
    };
    let choice = content(server.chat("fixed", "Pick", r#""structured_outputs":{"choice":["yes","no","maybe so"]}"#));
    assert!(["yes", "no", "maybe so"].contains(&choice.as_str()), "{choice}");
    let re = r"[A-Z]{3}-\d{2,4}";
    let body = json!({"structured_outputs": {"regex": re}}).to_string();
    let text = content(server.chat("fixed", "Code?", &body[1..body.len() - 1]));
    assert!(regex::Regex::new(&format!("^(?:{re})$")).unwrap().is_match(&text), "{text}");
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}},
        "required": ["n"]});
    // `json` as a schema object and as a string holding one.
    for json_field in [schema.clone(), Value::String(schema.to_string())] {
        let body = json!({"structured_outputs": {"json": json_field}}).to_string();
        let text = content(server.chat("fixed", "n?", &body[1..body.len() - 1]));
        assert!(valid(&schema, &text), "{text}");
    }
    for body in [r#""response_format":{"type":"json_object"}"#, r#""structured_outputs":{"json_object":true}"#] {
        let text = content(server.chat("fixed", "Anything", body));
        assert!(serde_json::from_str::<Value>(&text).unwrap().is_object(), "{text}");
    }
    // `text` constrains nothing: the script's answer (an echo) comes back.
    assert_eq!(content(server.chat("fixed", "plain words", r#""response_format":{"type":"text"}"#)), "plain words");
    // Completions read the same fields.
    let body = json!({"model": "fixed", "prompt": "Code?", "max_tokens": 50, "structured_outputs": {"regex": re}});
    let text = content(server.post("/v1/completions", &body.to_string()));
    assert!(regex::Regex::new(&format!("^(?:{re})$")).unwrap().is_match(&text), "{text}");
    let body = json!({"model": "fixed", "prompt": "n?", "max_tokens": 50,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}});
    assert!(valid(&schema, &content(server.post("/v1/completions", &body.to_string()))));
}

#[test]
fn the_removed_guided_fields_are_ignored_as_vllm_0_33_ignores_them() {
    let server = Server::start();
    let v = server.chat("fixed", "just text", r#""guided_json":{"type":"object"},"guided_choice":["a","b"]"#).json();
    assert_eq!(v["choices"][0]["message"]["content"], "just text");
}

#[test]
fn refusals_carry_vllms_sentences_and_the_server_keeps_serving() {
    let server = Server::start();
    let none_specified = "You must use one kind of structured outputs constraint but none are specified: {'json': \
        None, 'regex': None, 'choice': None, 'grammar': None, 'json_object': None, 'disable_any_whitespace': False, \
        'disable_additional_properties': False, 'whitespace_pattern': None, 'structural_tag': None, '_backend': \
        None, '_backend_was_auto': False}";
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            r#""response_format":{"type":"json_schema"}"#,
            "When response_format type is 'json_schema', the 'json_schema' field must be provided. \
             (parameter=response_format)",
            json!("response_format"),
        ),
        (
            r#""response_format":{"type":"json_schema","json_schema":{"name":"x"}}"#,
            none_specified,
            json!("response_format"),
        ),
        (
            r#""structured_outputs":{"regex":"a","choice":["a"]}"#,
            "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
            Value::Null,
        ),
        (
            r#""structured_outputs":{"regex":"a"},"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}"#,
            "You can only either use constraints for structured outputs or tools, not both.",
            Value::Null,
        ),
        (
            r#""structured_outputs":{"regex":"a","grammar":"root ::= \"a\""}"#,
            "You can only use one kind of structured outputs constraint but multiple are specified: \
             {'json': None, 'regex': 'a', 'choice': None, 'grammar': 'root ::= \"a\"', 'json_object': None, \
             'disable_any_whitespace': False, 'disable_additional_properties': False, 'whitespace_pattern': None, \
             'structural_tag': None, '_backend': None, '_backend_was_auto': False}",
            Value::Null,
        ),
        (
            r#""structured_outputs":{"grammar":"root ::= \"a\""}"#,
            "llmsim cannot generate text for a `grammar` (EBNF/Lark) constraint; use `json`, `regex` or `choice`.",
            json!("structured_outputs"),
        ),
        (
            r#""response_format":{"type":"structural_tag","format":{"type":"const_string","value":"x"}}"#,
            "llmsim cannot generate text for a `structural_tag` constraint; use `json`, `regex` or `choice`.",
            json!("response_format"),
        ),
        (
            r#""structured_outputs":{"regex":"a("}"#,
            "Failed to transform regex into a grammar: unclosed group",
            json!("structured_outputs"),
        ),
        (
            r#""response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","minItems":100000}}}"#,
            "minItems 100000 is more than llmsim generates (1024)",
            json!("response_format"),
        ),
        (
            r#""response_format":{"type":"yaml"}"#,
            "1 validation error:\n  {'type': 'literal_error', 'loc': 'body.response_format.type', 'msg': \
             \"Input should be 'text', 'json_object', 'json_schema' or 'structural_tag'\", 'input': 'yaml'}",
            json!("body.response_format.type"),
        ),
        (
            r#""response_format":{"type":"json_schema","json_schema":{"schema":{}}}"#,
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.response_format.json_schema.name', \
             'msg': 'Field required', 'input': '<dict of 1 items>'}",
            json!("body.response_format.json_schema.name"),
        ),
    ];
    for (extra, message, param) in cases {
        let r = server.chat("fixed", "hi", extra);
        assert_eq!(error(&r), (400, message.to_string(), param), "{extra}");
    }
    // A recursive model that always requires itself: a 400, not a hang.
    let forever = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "A", "schema":
        {"$defs": {"A": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "required": ["a"]}},
         "$ref": "#/$defs/A"}}}})
    .to_string();
    let r = server.chat("fixed", "hi", &forever[1..forever.len() - 1]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(error(&r).1.contains("deeper than 64 levels"), "{}", r.body);
    let v = server.chat("fixed", "still here", "").json();
    assert_eq!(v["choices"][0]["message"]["content"], "still here");
}
