//! The OpenAI surface as a client sees it: SSE framing, whole responses,
//! explanation headers, models, health, metrics and the summary.

use super::harness::*;
use llmsim_content::tokenizer;

const MESSAGE: &str = "The quick brown fox jumps over the lazy dog";

#[test]
fn a_streamed_chat_sends_role_tokens_finish_usage_comment_and_done() {
    let server = Server::start_with(MODELS, &["--stream-comments"]);
    let r = server.chat("sched", MESSAGE, r#""stream":true,"stream_options":{"include_usage":true}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("text/event-stream; charset=utf-8"));
    assert_eq!(r.header("x-llmsim-engine"), Some("scheduler"));
    assert_eq!(r.header("x-llmsim-request-id"), Some("0"));
    // vLLM: the answer's n tokens, then the end-of-sequence token, which
    // counts as a completion token and whose chunk (empty text) carries
    // finish_reason "stop".
    let n = tokenizer::count(MESSAGE);
    assert_eq!(r.header("x-llmsim-output-tokens"), Some((n + 1).to_string().as_str()));
    let events = r.events();
    assert_eq!(events.len(), 1 + n + 1 + 1 + 1, "role, {n} tokens, EOS with finish, usage, [DONE]:\n{}", r.body);
    let chunk = |i: usize| -> serde_json::Value { serde_json::from_str(&events[i]).expect("chunk JSON") };
    let role = chunk(0);
    assert_eq!(role["object"], "chat.completion.chunk");
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
    let text: String =
        (1..=n).map(|i| chunk(i)["choices"][0]["delta"]["content"].as_str().unwrap().to_string()).collect();
    assert_eq!(text, MESSAGE);
    assert!((1..=n).all(|i| chunk(i)["choices"][0]["finish_reason"].is_null()));
    assert_eq!(chunk(n + 1)["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunk(n + 1)["choices"][0]["delta"]["content"], "", "the EOS token has no text");
    let usage = chunk(n + 2);
    assert_eq!(usage["choices"], serde_json::json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], n + 1);
    assert_eq!(usage["usage"]["total_tokens"], usage["usage"]["prompt_tokens"].as_u64().unwrap() + n as u64 + 1);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert!(r.body.contains("\n\n: llmsim engine=scheduler request_id=0 "), "explanation comment:\n{}", r.body);
    assert!(r.body.ends_with("\n\ndata: [DONE]\n\n"));
    // Without --stream-comments (the default) the stream has no comment
    // line: every line is a data event or blank, as vLLM's.
    let plain = Server::start().chat("sched", MESSAGE, r#""stream":true"#);
    assert!(!plain.body.contains(": llmsim"), "{}", plain.body);
    assert!(plain.body.lines().all(|l| l.is_empty() || l.starts_with("data: ")), "{}", plain.body);
    assert!(plain.body.ends_with("}\n\ndata: [DONE]\n\n"), "{}", plain.body);
    let ids: Vec<String> = (0..=n + 2).map(|i| chunk(i)["id"].as_str().unwrap().to_string()).collect();
    assert!(ids.iter().all(|id| id == &ids[0] && id.starts_with("chatcmpl-")));
}

#[test]
fn a_whole_chat_answer_carries_usage_and_explanation_headers() {
    let server = Server::start();
    let r = server.chat("sched", MESSAGE, "");
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "sched");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], MESSAGE);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // The answer's tokens plus the end-of-sequence token, as vLLM counts.
    let n = tokenizer::count(MESSAGE) as u64 + 1;
    assert_eq!(v["usage"]["completion_tokens"], n);
    assert_eq!(r.header("x-llmsim-output-tokens"), Some(n.to_string().as_str()));
    assert_eq!(r.header("x-llmsim-engine"), Some("scheduler"));
    assert_eq!(r.header("x-llmsim-preemptions"), Some("0"));
    assert_eq!(r.header("x-llmsim-steps"), Some(n.to_string().as_str()), "one step per token when alone");
    let ms = |h: &str| -> f64 { r.header(h).unwrap_or_else(|| panic!("header {h}")).parse().expect("ms") };
    let ttft = ms("x-llmsim-ttft-ms");
    assert!((4.0..6.0).contains(&ttft), "a short prompt alone on the base model takes one ~4.5 ms step: {ttft}");
    // TTFT is the queue plus the one step, which reads the 13.48 GB of
    // weights at 3000 GB/s: at least 4.493 ms.
    let queue = ms("x-llmsim-queue-ms");
    assert!(queue >= 0.0 && queue + 4.493 <= ttft + 0.001, "queue {queue} ms within TTFT {ttft} ms");
    assert!((ms("x-llmsim-e2e-ms") - ttft - ms("x-llmsim-decode-ms")).abs() < 0.002);
}

#[test]
fn max_tokens_truncates_with_finish_length_and_stop_ends_early() {
    let server = Server::start();
    let r = server.chat("fixed", MESSAGE, r#""max_completion_tokens":3,"max_tokens":100"#);
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "max_completion_tokens wins over max_tokens");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    let r = server.chat("fixed", MESSAGE, r#""stop":["lazy"]"#);
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "The quick brown fox jumps over the ");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["stop_reason"], "lazy");
}

#[test]
fn completions_stream_text_chunks_and_default_to_16_tokens() {
    let server = Server::start();
    let long = "w ".repeat(40);
    let body = format!(r#"{{"model":"fixed","prompt":{},"stream":true}}"#, serde_json::to_string(long.trim()).unwrap());
    let r = server.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.body);
    let events = r.events();
    // vLLM: 16 token chunks (its default max_tokens), the 16th carrying
    // finish_reason "length" and its text, then [DONE].
    assert_eq!(events.len(), 16 + 1, "16 tokens, the last with finish_reason, [DONE]");
    let first: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["object"], "text_completion");
    assert!(first["id"].as_str().unwrap().starts_with("cmpl-"));
    let finish: serde_json::Value = serde_json::from_str(&events[15]).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    assert_eq!(finish["choices"][0]["text"], " w", "the 16th token of \"w w w ...\"");
    let whole = server.post("/v1/completions", r#"{"model":"fixed","prompt":"hello there","max_tokens":50}"#);
    let v = whole.json();
    assert_eq!(v["choices"][0]["text"], "hello there");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(whole.header("x-llmsim-engine"), Some("fixed"));
}

#[test]
fn models_health_and_unknown_paths_answer_like_vllm() {
    let server = Server::start();
    let m = server.get("/v1/models").json();
    let ids: Vec<&str> = m["data"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["sched", "tiny-kv", "fixed"]);
    assert_eq!(m["data"][0]["max_model_len"], 4096);
    assert_eq!(server.get("/health").status, 200);
    // vLLM's http_exception_handler shape: the status phrase as type and message.
    let nf = server.get("/v2/nothing");
    assert_eq!(nf.status, 404);
    assert_eq!(nf.header("content-type"), Some("application/json"));
    assert_eq!(
        nf.json(),
        serde_json::json!({"error": {"message": "Not Found", "type": "Not Found", "param": null, "code": 404}})
    );
    let na = server.get("/v1/chat/completions");
    assert_eq!(na.status, 405);
    assert_eq!(na.header("allow"), Some("POST"));
    assert_eq!(
        na.json(),
        serde_json::json!({"error": {"message": "Method Not Allowed", "type": "Method Not Allowed", "param": null, "code": 405}})
    );
    let summary = server.get("/metrics/summary").json();
    assert_eq!((summary["http_errors"]["404"].as_u64(), summary["http_errors"]["405"].as_u64()), (Some(1), Some(1)));
}

#[test]
fn a_request_without_a_model_goes_to_the_first_model() {
    let server = Server::start();
    let r = server.post("/v1/chat/completions", r#"{"messages":[{"role":"user","content":"hi"}]}"#);
    assert_eq!(r.json()["model"], "sched");
}

/// One metric family of an exposition: its type, label names (without
/// `le`) and bucket bounds.
#[derive(Debug, PartialEq)]
struct Family {
    kind: String,
    labels: std::collections::BTreeSet<String>,
    buckets: Vec<String>,
}

/// Reads Prometheus text into families; checks every sample's labels are
/// sorted by name, as prometheus_client writes them.
fn families(text: &str) -> std::collections::BTreeMap<String, Family> {
    let mut out: std::collections::BTreeMap<String, Family> = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            let f = Family { kind: kind.into(), labels: Default::default(), buckets: Vec::new() };
            out.insert(name.into(), f);
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, _value) = line.rsplit_once(' ').expect("sample line");
        let (name, labels) = series.split_once('{').map_or((series, ""), |(n, l)| (n, l.trim_end_matches('}')));
        let pairs: Vec<(String, String)> = labels
            .split("\",")
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once("=\"").expect("label");
                (k.to_string(), v.trim_end_matches('"').to_string())
            })
            .collect();
        let keys: Vec<&String> = pairs.iter().map(|(k, _)| k).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "labels not sorted by name: {line}");
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|base| out.get(*base).is_some_and(|f| f.kind == "histogram")))
            .unwrap_or(name);
        let f = out.get_mut(family).unwrap_or_else(|| panic!("sample without a TYPE: {line}"));
        for (k, v) in pairs {
            if k == "le" {
                if name.ends_with("_bucket") && !f.buckets.contains(&v) {
                    f.buckets.push(v);
                }
            } else {
                f.labels.insert(k);
            }
        }
    }
    out
}

/// vLLM families llmsim does not export, and why.
const NOT_EXPORTED: &[(&str, &str)] = &[
    ("vllm:num_requests_waiting_by_reason", "the engine has one waiting queue and no deferral"),
    ("vllm:engine_sleep_state", "the simulated engine never sleeps"),
    ("vllm:external_prefix_cache_queries_total", "no KV connector"),
    ("vllm:external_prefix_cache_hits_total", "no KV connector"),
    ("vllm:mm_cache_queries_total", "no multi-modal inputs"),
    ("vllm:mm_cache_hits_total", "no multi-modal inputs"),
    ("vllm:prompt_tokens_by_source_total", "newest family; the prefix_cache counters carry the hits"),
    ("vllm:prompt_tokens_cached_total", "newest family; the prefix_cache counters carry the hits"),
    ("vllm:prompt_tokens_recomputed_total", "newest family; the prefix_cache counters carry the hits"),
    ("vllm:request_max_num_generation_tokens", "n is always 1: equal to request_params_max_tokens"),
    ("vllm:request_prefill_kv_computed_tokens", "not yet: prompt tokens minus cached tokens per request"),
];

/// Labels llmsim adds to a vLLM family, and why.
const EXTRA_LABELS: &[(&str, &str, &str)] =
    &[("vllm:cache_config_info", "model_name", "one llmsim process may serve several models")];

#[test]
fn metrics_have_vllms_names_types_labels_and_buckets() {
    let server = Server::start_with(
        "models:\n  - name: fixed\n    engine: fixed\n    fixed: {context_length: 1000, ttft_overhead_ms: 5, \
         prefill_tokens_per_s: 100000, itl_ms: 1}\n",
        &[],
    );
    assert_eq!(server.chat("fixed", MESSAGE, "").status, 200);
    assert_eq!(server.chat("fixed", MESSAGE, r#""max_tokens":2"#).status, 200);
    let text = server.get("/metrics").body;
    let ours = families(&text);
    let vllm = families(&read(&crate::support::repo("tests/integration/server/vllm-metrics.expected.prom")));
    for (name, f) in &ours {
        let v = vllm.get(name).unwrap_or_else(|| panic!("{name} is not a vLLM metric"));
        assert_eq!(f.kind, v.kind, "{name}: type");
        assert_eq!(f.buckets, v.buckets, "{name}: buckets");
        let extra: Vec<&String> = f.labels.difference(&v.labels).collect();
        let allowed = |l: &String| EXTRA_LABELS.iter().any(|(n, x, _)| n == name && x == l);
        assert!(extra.iter().all(|l| allowed(l)), "{name}: labels {extra:?} that vLLM does not have");
        if name != "vllm:cache_config_info" {
            // An info gauge's labels are a config's fields, which vary by version.
            assert_eq!(f.labels, v.labels, "{name}: labels");
        }
    }
    for name in vllm.keys().filter(|n| !ours.contains_key(*n)) {
        assert!(NOT_EXPORTED.iter().any(|(n, _)| n == name), "vLLM exports {name}; export it or say why not");
    }
    for (name, _) in NOT_EXPORTED {
        assert!(!ours.contains_key(*name), "{name} is exported now: take it off NOT_EXPORTED");
    }
    assert!(
        text.contains("vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"fixed\"} 1.0")
    );
    assert!(!text.contains("vllm:gpu_cache_usage_perc"), "legacy names only with --legacy-metrics");
}

#[test]
fn legacy_metric_names_are_exported_on_request() {
    let server = Server::start_with(MODELS, &["--legacy-metrics"]);
    let text = server.get("/metrics").body;
    assert!(text.contains("vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"sched\"} 0.0"));
    assert!(text.contains("# TYPE vllm:time_per_output_token_seconds histogram"));
}

#[test]
fn the_summary_counts_a_window_that_a_reset_starts_over() {
    let server = Server::start();
    for _ in 0..3 {
        assert_eq!(server.chat("sched", MESSAGE, "").status, 200);
    }
    let s = server.get("/metrics/summary").json();
    let m = &s["models"]["sched"];
    assert_eq!(m["requests"]["completed"], 3);
    assert_eq!(m["engine"], "scheduler");
    assert_eq!(m["simulated"]["ttft_ms"]["count"], 3);
    assert_eq!(m["observed"]["ttft_ms"]["count"], 3);
    assert!(m["lag_ms"]["count"].as_u64().unwrap() > 0);
    let sim = m["simulated"]["ttft_ms"]["p50"].as_f64().unwrap();
    let obs = m["observed"]["ttft_ms"]["p50"].as_f64().unwrap();
    assert!(obs >= sim, "a token is never handed over before it is due: observed {obs} < simulated {sim}");
    let reset = server.post("/metrics/summary/reset", "");
    assert_eq!(reset.status, 200);
    assert_eq!(reset.json()["models"]["sched"]["requests"]["completed"], 0);
    assert!(reset.json()["models"]["sched"]["simulated"]["ttft_ms"]["p50"].is_null());
    assert_eq!(server.chat("sched", MESSAGE, "").status, 200);
    let s = server.get("/metrics/summary").json();
    assert_eq!(s["models"]["sched"]["requests"]["completed"], 1);
    assert_eq!(
        server.metric("vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"sched\"}"),
        Some(4.0),
        "Prometheus counters never reset"
    );
}

#[test]
fn the_request_seed_picks_the_answer_deterministically() {
    let server = Server::start();
    let answer = |seed: u64| -> String {
        let r = server.chat("fixed", "pick one", &format!(r#""seed":{seed}"#));
        r.json()["choices"][0]["message"]["content"].as_str().expect("content").to_string()
    };
    let answers: Vec<String> = (0..12).map(answer).collect();
    assert_eq!(answer(3), answers[3], "the same seed gives the same answer");
    let distinct: std::collections::BTreeSet<&String> = answers.iter().collect();
    assert!(distinct.len() > 1, "different seeds pick different variants: {answers:?}");
}

#[test]
fn continuous_usage_stats_put_usage_on_every_token_chunk() {
    let server = Server::start();
    let extra = r#""stream":true,"stream_options":{"continuous_usage_stats":true}"#;
    let events = server.chat("fixed", MESSAGE, extra).events();
    let n = tokenizer::count(MESSAGE);
    for (i, e) in events[1..=n].iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(e).expect("chunk");
        assert_eq!(v["usage"]["completion_tokens"], i + 1, "{e}");
    }
}
