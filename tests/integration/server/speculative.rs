//! Speculative decoding in `llmsim serve` (docs/speculative.md, "In the
//! server"): verified drafts arrive several tokens a step, the stream still
//! carries every token, and `/metrics` has vLLM's `spec_decode` counters.

use super::harness::*;

/// A drafting model whose drafts are always kept (k = 3), and the same
/// model without speculative decoding.
const MODELS: &str = "
models:
  - name: drafting
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288, block_size: 16}
    speculative: {method: ngram, num_speculative_tokens: 3, acceptance_rate: 1}
  - name: plain
    engine: scheduler
    hardware: {name: test, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
    model:
      context_length: 4096
      weights: {parameters_billions: 6.74}
      kv_cache: {bytes_per_token: 524288, block_size: 16}
";

#[test]
fn kept_drafts_release_four_tokens_a_step_and_count_in_vllms_counters() {
    let server = Server::start_with(MODELS, &[]);
    let body = r#"{"model":"drafting","prompt":"a b c d e f g h i j k l","max_tokens":9,"stream":true}"#;
    let streamed = server.post("/v1/completions", body);
    assert_eq!(streamed.status, 200, "{}", streamed.body);
    // Every token is streamed: 9 content chunks, then the finish chunk
    // and [DONE].
    let events = streamed.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let texts: Vec<String> = events[..events.len() - 1]
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_string))
        .filter(|t| !t.is_empty())
        .collect();
    // The echo of the prompt's first 9 words, one token a chunk.
    assert_eq!(texts.concat(), "a b c d e f g h i", "{events:?}");
    assert_eq!(texts.len(), 9, "{events:?}");
    let whole = server
        .post("/v1/completions", r#"{"model":"drafting","prompt":"a b c d e f g h i j k l","max_tokens":9}"#)
        .json();
    assert_eq!(whole["usage"]["completion_tokens"], 9, "{whole}");
    // Each request: step 1 samples token 1; step 2 verifies 3 drafts, keeps
    // all, releases tokens 2-5; step 3 the same, tokens 6-9. Two requests:
    // 4 verify steps, 12 drafts, 12 kept, 4 at each position.
    let labels = "{engine=\"0\",model_name=\"drafting\"}";
    assert_eq!(server.metric(&format!("vllm:spec_decode_num_drafts_total{labels}")), Some(4.0));
    assert_eq!(server.metric(&format!("vllm:spec_decode_num_draft_tokens_total{labels}")), Some(12.0));
    assert_eq!(server.metric(&format!("vllm:spec_decode_num_accepted_tokens_total{labels}")), Some(12.0));
    for pos in 0..3 {
        let series = format!(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine=\"0\",model_name=\"drafting\",position=\"{pos}\"}}"
        );
        assert_eq!(server.metric(&series), Some(4.0), "{series}");
    }
    // A model that does not draft has none of the family.
    let metrics = server.get("/metrics").body;
    assert!(!metrics.contains("model_name=\"plain\",position"), "{metrics}");
    assert!(
        !metrics.lines().any(|l| l.starts_with("vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"plain\""))
    );
    server.stop();
}
