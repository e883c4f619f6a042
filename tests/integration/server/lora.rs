//! LoRA adapters in `llmsim serve` (docs/lora.md, "In the server"): a
//! scheduler model's adapters are listed in `/v1/models` after it, a
//! request chooses one by its `model`, and a step holds at most
//! `max_loras` distinct adapters, so a request for another waits while
//! later requests for a resident one go ahead.

use std::time::Instant;

use super::harness::*;

const MODELS: &str = "
models:
  - name: base
    engine: scheduler
    hardware: h100-80gb
    model: llama-3.1-8b
    lora:
      max_loras: 1
      adapters: [{name: sql}, {name: chat, rank: 8}]
";

fn body(model: &str, max_tokens: u32) -> String {
    format!(r#"{{"model":"{model}","prompt":"a b c","max_tokens":{max_tokens},"ignore_eos":true}}"#)
}

#[test]
fn adapters_are_listed_after_their_model_and_chosen_by_name() {
    let server = Server::start_with(MODELS, &[]);
    let list = server.get("/v1/models").json();
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["base", "sql", "chat"], "{list}");
    let sql = &list["data"][1];
    assert_eq!((sql["parent"].as_str(), sql["max_model_len"].is_null()), (Some("base"), true), "{sql}");
    assert!(list["data"][0]["parent"].is_null(), "{list}");
    let answer = server.post("/v1/completions", &body("sql", 3));
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["model"], "sql", "vLLM answers with the adapter's name");
    let unknown = server.post("/v1/completions", &body("poetry", 3));
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(unknown.json()["error"]["message"], "The model `poetry` does not exist.");
    assert_eq!(server.post("/v1/completions", &body("base", 3)).status, 200, "the server goes on");
    server.stop();
}

#[test]
fn with_one_slot_a_request_for_another_adapter_waits_and_a_later_one_for_the_resident_goes_ahead() {
    let server = Server::start_with(MODELS, &[]);
    let port = server.port;
    // A (sql) decodes 300 tokens (~1.5 s of ~5 ms steps). B (chat) comes
    // 0.15 s later and waits for the one slot; C (sql) comes 0.15 s after
    // B, joins A's steps at once and ends long before A, so before B.
    let start = Instant::now();
    let a = std::thread::spawn(move || http(port, "POST", "/v1/completions", &body("sql", 300)));
    std::thread::sleep(std::time::Duration::from_millis(150));
    let b = std::thread::spawn(move || {
        let r = http(port, "POST", "/v1/completions", &body("chat", 20));
        (r, start.elapsed())
    });
    std::thread::sleep(std::time::Duration::from_millis(150));
    let c = std::thread::spawn(move || {
        let r = http(port, "POST", "/v1/completions", &body("sql", 20));
        (r, start.elapsed())
    });
    let a = a.join().unwrap();
    let (b, b_done) = b.join().unwrap();
    let (c, c_done) = c.join().unwrap();
    for r in [&a, &b, &c] {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(c_done < b_done, "sql (resident) ended at {c_done:?}, after chat (waiting for the slot) at {b_done:?}");
    server.stop();
}
