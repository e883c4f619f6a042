//! The bench result: `vllm bench serve`'s JSON schema plus `llmsim_*` keys,
//! and the table printed at the end.
//!
//! # Wire format
//!
//! Every vLLM key we write keeps vLLM's name and meaning
//! (docs/bench-diff.md, "JSON"): summary statistics
//! `{mean,median,std,p50,p90,p99}_{ttft,tpot,itl,e2el}_ms` (population std,
//! numpy linear percentiles, as with `--percentile-metrics
//! ttft,tpot,itl,e2el --metric-percentiles 50,90,99`), measured from the
//! send; the `--save-detailed` arrays in dispatch order with failed
//! requests present as zeros and their error text; `start_times` are
//! seconds since the measured run began (vLLM's are `perf_counter`
//! values: an arbitrary epoch either way); `queue_times` are how long each
//! request waited in the client before it was sent (vLLM: the concurrency
//! semaphore; here: lateness against the schedule). A closed loop is
//! written as vLLM writes `--request-rate inf --max-concurrency C`.
//! `generated_texts` is not written.
//!
//! Ours, all prefixed `llmsim_`: `version`, `seed`, `base_url`, `mode`,
//! `warmup`, `timeout_s`, `scheduled_times` (s, same epoch as
//! `start_times`), `from_scheduled` (TTFT and E2E stats measured from the
//! scheduled arrival, which includes client lateness: coordinated
//! omission), `failures` (counts by kind), `client_health`,
//! `sessions` (with `--turns`: each request's conversation),
//! `server_summary` (the server's `/metrics/summary`, verbatim) and
//! `warnings` (what `llmsim diff` treats as the measurement flagging
//! itself).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::client::Endpoint;
use super::health::{Health, WARN_P99_MS};
use super::{BenchRun, Load, Measurement, ServerSummary};
use llmsim_analysis::measured::vllm::mean_std;
use llmsim_planner::metrics::percentile::percentile_sorted;

/// The result JSON, in vLLM's key order for the keys it shares.
#[derive(Debug, Serialize)]
pub struct BenchJson {
    pub date: String,
    pub endpoint_type: &'static str,
    pub backend: &'static str,
    pub label: Option<String>,
    pub model_id: String,
    pub tokenizer_id: &'static str,
    pub num_prompts: u64,
    pub request_rate: Value,
    pub burstiness: f64,
    pub max_concurrency: Option<u32>,
    pub duration: f64,
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub input_lens: Vec<u32>,
    pub output_lens: Vec<u32>,
    pub ttfts: Vec<f64>,
    pub itls: Vec<Vec<f64>>,
    pub latencies: Vec<f64>,
    pub start_times: Vec<f64>,
    pub queue_times: Vec<f64>,
    pub errors: Vec<String>,
    pub max_output_tokens_per_s: f64,
    pub max_concurrent_requests: u64,
    #[serde(flatten)]
    pub stats: BTreeMap<String, f64>,
    pub llmsim_version: &'static str,
    pub llmsim_seed: u64,
    pub llmsim_base_url: String,
    pub llmsim_mode: &'static str,
    pub llmsim_warmup: u64,
    pub llmsim_timeout_s: f64,
    pub llmsim_scheduled_times: Vec<f64>,
    pub llmsim_from_scheduled: BTreeMap<String, f64>,
    pub llmsim_failures: BTreeMap<&'static str, u64>,
    /// Failures by finer kind (`http_429`, `stream_cut`, ...).
    pub llmsim_failures_by_kind: BTreeMap<String, u64>,
    pub llmsim_client_health: Health,
    /// With `--shared-prefix`, or whenever the server reported
    /// `usage.prompt_tokens_details.cached_tokens`: its totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llmsim_prefix_cache: Option<PrefixCache>,
    /// With `--turns`: each request's conversation, in the order of the
    /// arrays (turn `index mod turns` of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llmsim_sessions: Option<Vec<u64>>,
    pub llmsim_server_summary: Option<Value>,
    pub llmsim_warnings: Vec<String>,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Millisecond samples of one request, measured from `from_ns`.
fn ttft_ms(r: &Measurement, from_ns: u64) -> Option<f64> {
    Some(r.chunks_ns.first()?.saturating_sub(from_ns) as f64 / 1e6)
}
fn e2e_ms(r: &Measurement, from_ns: u64) -> Option<f64> {
    Some(r.chunks_ns.last()?.saturating_sub(from_ns) as f64 / 1e6)
}

/// `{mean,median,std,p50,p90,p99}_{metric}_ms` of `samples` (0.0 when there
/// are none, as vLLM writes them).
fn stat_keys(out: &mut BTreeMap<String, f64>, metric: &str, mut samples: Vec<f64>) {
    samples.sort_by(f64::total_cmp);
    let (mean, std) = if samples.is_empty() { (0.0, 0.0) } else { mean_std(&samples) };
    let p = |q: f64| percentile_sorted(&samples, q).unwrap_or(0.0);
    out.insert(format!("mean_{metric}_ms"), mean);
    out.insert(format!("median_{metric}_ms"), p(50.0));
    out.insert(format!("std_{metric}_ms"), std);
    for q in [50u32, 90, 99] {
        out.insert(format!("p{q}_{metric}_ms"), p(f64::from(q)));
    }
}

/// Per-request TPOT in ms: (last - first) / (tokens - 1), tokens > 1.
fn tpot_ms(r: &Measurement) -> Option<f64> {
    let (first, last) = (r.chunks_ns.first()?, r.chunks_ns.last()?);
    (r.output_tokens > 1).then(|| last.saturating_sub(*first) as f64 / 1e6 / f64::from(r.output_tokens - 1))
}

/// Builds the JSON of a finished bench; `date` is `YYYYMMDD-HHMMSS`.
/// Prompt tokens the server found in its prefix cache, over the completed
/// requests that reported them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrefixCache {
    /// Completed requests whose usage carried `cached_tokens`.
    pub reported: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens` (0 with no prompt token).
    pub hit_rate: f64,
}

fn prefix_cache(run: &BenchRun) -> Option<PrefixCache> {
    let with: Vec<&Measurement> = run.records.iter().filter(|r| r.ok() && r.cached_tokens.is_some()).collect();
    if with.is_empty() && run.config.shared_prefix.is_none() {
        return None;
    }
    let prompt_tokens: u64 = with.iter().map(|r| u64::from(r.prompt_tokens)).sum();
    let cached_tokens: u64 = with.iter().map(|r| u64::from(r.cached_tokens.unwrap_or(0))).sum();
    let hit_rate = if prompt_tokens > 0 { cached_tokens as f64 / prompt_tokens as f64 } else { 0.0 };
    Some(PrefixCache { reported: with.len() as u64, prompt_tokens, cached_tokens, hit_rate })
}

pub fn to_json(run: &BenchRun, date: String) -> BenchJson {
    let cfg = &run.config;
    let ok: Vec<&Measurement> = run.records.iter().filter(|r| r.ok()).collect();
    let total_in: u64 = ok.iter().map(|r| u64::from(r.prompt_tokens)).sum();
    let total_out: u64 = ok.iter().map(|r| u64::from(r.output_tokens)).sum();
    let per_s = |x: u64| if run.duration_s > 0.0 { x as f64 / run.duration_s } else { 0.0 };
    let mut stats = BTreeMap::new();
    stat_keys(&mut stats, "ttft", ok.iter().filter_map(|r| ttft_ms(r, r.sent_ns)).collect());
    stat_keys(&mut stats, "tpot", ok.iter().filter_map(|r| tpot_ms(r)).collect());
    let gaps = ok.iter().flat_map(|r| r.chunks_ns.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64 / 1e6)).collect();
    stat_keys(&mut stats, "itl", gaps);
    stat_keys(&mut stats, "e2el", ok.iter().filter_map(|r| e2e_ms(r, r.sent_ns)).collect());
    let mut from_scheduled = BTreeMap::new();
    stat_keys(&mut from_scheduled, "ttft", ok.iter().filter_map(|r| ttft_ms(r, r.scheduled_ns)).collect());
    stat_keys(&mut from_scheduled, "e2el", ok.iter().filter_map(|r| e2e_ms(r, r.scheduled_ns)).collect());
    let mut failures: BTreeMap<&'static str, u64> = ["connect", "http", "timeout", "stream"].map(|k| (k, 0)).into();
    for f in run.records.iter().filter_map(|r| r.failure.as_ref()) {
        *failures.entry(f.kind()).or_default() += 1;
    }
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for f in run.records.iter().filter_map(|r| r.failure.as_ref()) {
        *by_kind.entry(f.detail()).or_default() += 1;
    }
    let (request_rate, burstiness, max_concurrency, mode) = match cfg.load {
        Load::Open { rate, burstiness } => (serde_json::json!(rate), burstiness, None, "open"),
        Load::Closed { concurrency } => (Value::String("inf".into()), 1.0, Some(concurrency), "closed"),
    };
    let server_summary = match &run.server {
        ServerSummary::Read(v) => Some(v.clone()),
        _ => None,
    };
    let (endpoint_type, backend) = match cfg.endpoint {
        Endpoint::Completions => ("openai", "openai"),
        Endpoint::Chat => ("openai-chat", "openai-chat"),
    };
    BenchJson {
        date,
        endpoint_type,
        backend,
        label: cfg.label.clone(),
        model_id: cfg.model.clone(),
        tokenizer_id: "llmsim-builtin",
        num_prompts: cfg.requests,
        request_rate,
        burstiness,
        max_concurrency,
        duration: run.duration_s,
        completed: ok.len() as u64,
        failed: (run.records.len() - ok.len()) as u64,
        total_input_tokens: total_in,
        total_output_tokens: total_out,
        request_throughput: per_s(ok.len() as u64),
        request_goodput: None,
        output_throughput: per_s(total_out),
        total_token_throughput: per_s(total_in + total_out),
        input_lens: run.records.iter().map(|r| r.prompt_tokens).collect(),
        output_lens: run.records.iter().map(|r| r.output_tokens).collect(),
        ttfts: run.records.iter().map(|r| ttft_ms(r, r.sent_ns).map_or(0.0, |x| x / 1e3)).collect(),
        itls: run
            .records
            .iter()
            .map(|r| r.chunks_ns.windows(2).map(|w| secs(w[1].saturating_sub(w[0]))).collect())
            .collect(),
        latencies: run.records.iter().map(|r| e2e_ms(r, r.sent_ns).map_or(0.0, |x| x / 1e3)).collect(),
        start_times: run.records.iter().map(|r| secs(r.sent_ns)).collect(),
        queue_times: run.records.iter().map(|r| secs(r.sent_ns.saturating_sub(r.scheduled_ns))).collect(),
        errors: run.records.iter().map(|r| r.failure.as_ref().map_or(String::new(), |f| f.message())).collect(),
        max_output_tokens_per_s: peak_tokens_per_s(&ok),
        max_concurrent_requests: peak_concurrency(&ok),
        stats,
        llmsim_version: env!("CARGO_PKG_VERSION"),
        llmsim_seed: cfg.seed,
        llmsim_base_url: cfg.base_url.clone(),
        llmsim_mode: mode,
        llmsim_warmup: cfg.warmup,
        llmsim_timeout_s: cfg.timeout.as_secs_f64(),
        llmsim_scheduled_times: run.schedule_ns.iter().map(|&n| secs(n)).collect(),
        llmsim_from_scheduled: from_scheduled,
        llmsim_failures: failures,
        llmsim_failures_by_kind: by_kind,
        llmsim_client_health: run.health.clone(),
        llmsim_prefix_cache: prefix_cache(run),
        llmsim_sessions: cfg.turns.map(|_| run.records.iter().map(|r| r.session.unwrap_or(0)).collect()),
        llmsim_server_summary: server_summary.clone(),
        llmsim_warnings: warnings(&run.health, server_summary.as_ref().map(|s| for_model(s, &cfg.model))),
    }
}

/// vLLM's `max_output_tokens_per_s`: the most tokens in one 1-second bucket.
fn peak_tokens_per_s(ok: &[&Measurement]) -> f64 {
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    for t in ok.iter().flat_map(|r| &r.chunks_ns) {
        *buckets.entry(t / 1_000_000_000).or_default() += 1;
    }
    buckets.values().copied().max().unwrap_or(0) as f64
}

/// vLLM's `max_concurrent_requests`: the most requests active during one
/// 1-second bucket (a request spanning a boundary counts in both, as there).
fn peak_concurrency(ok: &[&Measurement]) -> u64 {
    let mut buckets: BTreeMap<u64, u64> = BTreeMap::new();
    for r in ok {
        let end = r.chunks_ns.last().copied().unwrap_or(r.sent_ns);
        for b in r.sent_ns / 1_000_000_000..=end / 1_000_000_000 {
            *buckets.entry(b).or_default() += 1;
        }
    }
    buckets.values().copied().max().unwrap_or(0)
}

/// The client's and the server's lag warnings.
pub fn warnings(health: &Health, server: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = health.warning().into_iter().collect();
    if let Some(lag) = server.and_then(server_lag_p99_ms).filter(|l| *l > WARN_P99_MS) {
        out.push(format!(
            "server lag: the server released tokens {lag:.1} ms after their simulated due time at p99 (above \
             {WARN_P99_MS} ms): its observed latencies include its own lateness"
        ));
    }
    out
}

/// The part of `llmsim serve`'s `/metrics/summary` about `model`
/// (`models.NAME`), or the whole document for a server with one flat
/// summary.
pub fn for_model<'a>(summary: &'a Value, model: &str) -> &'a Value {
    summary.get("models").and_then(|m| m.get(model)).unwrap_or(summary)
}

/// The server's token-release lag p99 in ms (`lag_ms.p99`).
pub fn server_lag_p99_ms(model_summary: &Value) -> Option<f64> {
    model_summary.pointer("/lag_ms/p99")?.as_f64()
}

/// A latency figure from a model's summary: `side` is `observed` or
/// `simulated`, `metric` `ttft`/`itl`/`tpot`/`e2e`, `stat`
/// `mean`/`p50`/`p90`/`p99` (`{side}.{metric}_ms.{stat}`).
pub fn server_figure(model_summary: &Value, side: &str, metric: &str, stat: &str) -> Option<f64> {
    model_summary.pointer(&format!("/{side}/{metric}_ms/{stat}"))?.as_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BenchConfig, client::Failure};
    use std::time::Duration;

    fn rec(index: u64, scheduled_ns: u64, sent_ns: u64, chunks_ns: Vec<u64>) -> Measurement {
        let output_tokens = chunks_ns.len() as u32;
        Measurement {
            index,
            scheduled_ns,
            sent_ns,
            chunks_ns,
            prompt_tokens: 10,
            output_tokens,
            cached_tokens: None,
            failure: None,
            session: None,
        }
    }

    fn run(records: Vec<Measurement>) -> BenchRun {
        let config = BenchConfig {
            base_url: "http://x".into(),
            model: "m".into(),
            load: Load::Open { rate: 2.0, burstiness: 1.0 },
            requests: records.len() as u64,
            prompt_tokens: 10,
            output_tokens: 3,
            warmup: 0,
            seed: 0,
            timeout: Duration::from_secs(5),
            endpoint: Endpoint::Completions,
            label: None,
            shared_prefix: None,
            turns: None,
        };
        BenchRun {
            config,
            schedule_ns: vec![],
            records,
            duration_s: 2.0,
            health: Health::default(),
            server: ServerSummary::Absent,
        }
    }

    #[test]
    fn figures_follow_vllms_definitions_and_failures_stay_in_the_arrays() {
        let ms = 1_000_000;
        let mut failed = rec(1, 500 * ms, 500 * ms, vec![]);
        failed.failure = Some(Failure::Timeout);
        failed.output_tokens = 0;
        let j = to_json(&run(vec![rec(0, 0, 2 * ms, vec![12 * ms, 22 * ms, 42 * ms]), failed]), "d".into());
        assert_eq!((j.completed, j.failed), (1, 1));
        assert_eq!(j.output_lens, vec![3, 0]);
        assert_eq!(j.errors, vec!["".to_string(), "timed out".to_string()]);
        assert!((j.stats["mean_ttft_ms"] - 10.0).abs() < 1e-9, "from the send");
        assert!((j.llmsim_from_scheduled["mean_ttft_ms"] - 12.0).abs() < 1e-9, "from the schedule");
        assert!((j.stats["mean_tpot_ms"] - 15.0).abs() < 1e-9);
        assert!((j.stats["mean_itl_ms"] - 15.0).abs() < 1e-9);
        assert!((j.stats["p99_e2el_ms"] - 40.0).abs() < 1e-9);
        assert!((j.queue_times[0] - 0.002).abs() < 1e-12);
        assert_eq!(j.itls[1], Vec::<f64>::new());
        assert_eq!(j.llmsim_failures["timeout"], 1);
        assert!((j.output_throughput - 1.5).abs() < 1e-12);
    }

    #[test]
    fn server_figures_and_lag_are_found_in_the_summary() {
        let m = serde_json::json!({"simulated": {"ttft_ms": {"p50": 12.5}}, "lag_ms": {"p99": 9.0}});
        let s = serde_json::json!({"schema_version": 1, "models": {"m": m, "other": {}}});
        let s = for_model(&s, "m");
        assert_eq!(server_figure(s, "simulated", "ttft", "p50"), Some(12.5));
        assert_eq!(server_figure(s, "observed", "ttft", "p50"), None);
        let w = warnings(&Health::default(), Some(s));
        assert!(w[0].starts_with("server lag"), "{w:?}");
    }
}
