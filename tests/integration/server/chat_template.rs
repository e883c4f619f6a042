//! A model's own chat template (`server::tokenize::template`): chat prompts
//! rendered by the `chat_template` of the tokenizer_config.json next to its
//! tokenizer.json, counted and tokenized as the model does; the template's
//! errors; and, with Python's `jinja2` and `tokenizers`, the same count as
//! transformers and vLLM make on a Llama-3-style fixture.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::harness::*;
use crate::support::*;

/// A word-level tokenizer with four special tokens (ids 3-6).
const WORDS: &str = r#"{"version":"1.0","truncation":null,"padding":null,
    "added_tokens":[
      {"id":3,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
      {"id":4,"content":"<|user|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
      {"id":5,"content":"<|assistant|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
      {"id":6,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
    "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
    "model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2,"<s>":3,"<|user|>":4,"<|assistant|>":5,"</s>":6},
    "unk_token":"[UNK]"}}"#;

/// Writes the tokenizer, a tokenizer_config.json with `template` (a JSON
/// string) and a models file naming the tokenizer; returns the models text.
fn model_dir(dir: &std::path::Path, template: &str) -> String {
    std::fs::write(dir.join("tokenizer.json"), WORDS).unwrap();
    let config = format!(r#"{{"bos_token": "<s>", "eos_token": {{"content": "</s>"}}, "chat_template": {template}}}"#);
    std::fs::write(dir.join("tokenizer_config.json"), config).unwrap();
    format!(
        "models:\n  - name: words\n    engine: fixed\n    tokenizer: {}\n    fixed: {{context_length: 4096, \
         prefill_tokens_per_s: 100000, itl_ms: 1}}\n",
        dir.join("tokenizer.json").display()
    )
}

const TEMPLATE: &str = r#""{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system messages, please') }}{% endif %}<|{{ m.role }}|> {{ m.content }} {{ eos_token }} {% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}""#;

#[test]
fn a_chat_is_rendered_by_the_models_template_and_counted_in_its_tokens() {
    let dir = tempdir();
    let server = Server::start_with(&model_dir(dir.path(), TEMPLATE), &[]);
    // "<s><|user|> hello world </s> <|assistant|>": <s> <|user|> hello world
    // </s> <|assistant|> = [3, 4, 1, 2, 6, 5]; ChatML framing would count
    // 2 + 5 + 3 = 10, with ids past the vocabulary.
    let body = r#"{"messages":[{"role":"user","content":"hello world"}],"return_token_strs":true}"#;
    let v = server.post("/tokenize", body).json();
    assert_eq!(v["tokens"], serde_json::json!([3, 4, 1, 2, 6, 5]), "{v}");
    assert_eq!(v["count"], 6);
    // Vocabulary strings (convert_ids_to_tokens), specials included.
    assert_eq!(v["token_strs"], serde_json::json!(["<s>", "<|user|>", "hello", "world", "</s>", "<|assistant|>"]));
    let v = server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"hello world"}]}"#).json();
    assert_eq!(v["usage"]["prompt_tokens"], 6, "{v}");
    // add_generation_prompt: false drops <|assistant|>; a content list is
    // its text parts joined with a newline ("hello\nworld": two words).
    let body = r#"{"add_generation_prompt":false,"messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":"world"}]}]}"#;
    assert_eq!(server.post("/tokenize", body).json()["tokens"], serde_json::json!([3, 4, 1, 2, 6]));
    // /detokenize keeps special tokens, as vLLM's does (no decoder: joined by spaces).
    assert_eq!(server.post("/detokenize", r#"{"tokens":[3,1,2,6]}"#).json()["prompt"], "<s> hello world </s>");
    // The template's raise_exception: a 400 with its message, and the server goes on.
    for path in ["/tokenize", "/v1/chat/completions"] {
        let r = server.post(path, r#"{"messages":[{"role":"system","content":"hi"}]}"#);
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert_eq!(r.json()["error"]["message"], "no system messages, please", "{path}");
    }
    assert_eq!(server.get("/health").status, 200);
}

#[test]
fn a_looping_template_is_stopped_and_a_broken_one_stops_serve() {
    let dir = tempdir();
    // 10^8 iterations: the fuel bound ends it with a 400 instead of
    // holding the worker, and /health answers meanwhile.
    let looping = r#""{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}""#;
    let server = Server::start_with(&model_dir(dir.path(), looping), &[]);
    let port = server.port;
    let slow = std::thread::spawn(move || {
        let t = Instant::now();
        let r = http(port, "POST", "/v1/chat/completions", r#"{"messages":[{"role":"user","content":"hi"}]}"#);
        (r, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    assert_eq!(server.get("/health").status, 200);
    assert!(t.elapsed() < Duration::from_millis(500), "/health took {:?}", t.elapsed());
    let (r, took) = slow.join().unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("did not finish rendering within 20000000 instructions"), "{}", r.body);
    assert!(took < Duration::from_secs(30), "{took:?}");
    drop(server);
    // A template that does not parse stops serve before it listens.
    let models = model_dir(dir.path(), r#""{% for m in messages %}""#);
    std::fs::write(dir.path().join("models.yml"), &models).unwrap();
    let out = TestCommand::new(&["serve", "--port", "0", "--models"]).arg(dir.path().join("models.yml")).output();
    assert_eq!(out.code(), 2, "{}", out.describe());
    assert!(
        out.stderr().contains("models[0].tokenizer") && out.stderr().contains("does not parse"),
        "{}",
        out.describe()
    );
    // `chat_template:` without a tokenizer is refused, naming the key.
    std::fs::write(
        dir.path().join("models.yml"),
        "models:\n  - name: m\n    engine: fixed\n    chat_template: t.jinja\n    fixed: {context_length: 4096, \
         prefill_tokens_per_s: 100000, itl_ms: 1}\n",
    )
    .unwrap();
    let out = TestCommand::new(&["serve", "--port", "0", "--models"]).arg(dir.path().join("models.yml")).output();
    assert_eq!(out.code(), 2, "{}", out.describe());
    assert!(out.stderr().contains("models[0].chat_template: needs `tokenizer`"), "{}", out.describe());
}

#[test]
fn a_models_file_chat_template_overrides_the_tokenizer_config() {
    let dir = tempdir();
    let mut models = model_dir(dir.path(), TEMPLATE);
    // vLLM's --chat-template: a file; here one without the BOS and the priming.
    std::fs::write(dir.path().join("plain.jinja"), "{% for m in messages %}{{ m.content }} {% endfor %}").unwrap();
    models.push_str(&format!("    chat_template: {}\n", dir.path().join("plain.jinja").display()));
    let server = Server::start_with(&models, &[]);
    let v: Value = server.post("/tokenize", r#"{"messages":[{"role":"user","content":"hello world"}]}"#).json();
    assert_eq!(v["tokens"], serde_json::json!([1, 2]), "{v}");
}

fn python_with(modules: &str) -> Option<String> {
    ["python3", "python"].into_iter().map(str::to_string).find(|python| {
        Command::new(python).args(["-c", &format!("import {modules}")]).output().is_ok_and(|o| o.status.success())
    })
}

#[test]
#[ignore = "needs python3 with the tokenizers and jinja2 packages (pip install tokenizers jinja2); CI runs it: cargo \
            test --release --test integration -- --ignored chat_template_python"]
fn chat_template_python_reference_counts_the_same_prompt_tokens() {
    let python = python_with("tokenizers, jinja2").expect(
        "python3 with `tokenizers` and `jinja2` is missing: `pip install tokenizers jinja2` (.ci/run does) and run again",
    );
    let fixture = repo("tests/fixtures/chat-template");
    let models = format!(
        "models:\n  - name: llama\n    engine: fixed\n    tokenizer: {}\n    fixed: {{context_length: 8192, \
         prefill_tokens_per_s: 100000, itl_ms: 1}}\n",
        fixture.join("tokenizer.json").display()
    );
    let server = Server::start_with(&models, &[]);
    let out = Command::new(python)
        .arg(repo("tests/python/chat_template_count.py"))
        .arg(format!("http://127.0.0.1:{}", server.port))
        .arg("llama")
        .arg(&fixture)
        .output()
        .expect("run the python reference");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server\n{}", server.stderr());
    assert!(stdout.contains("chat template: all checks passed"), "{stdout}");
}
