//! `GET /metrics`: Prometheus text with vLLM's metric names, labels and
//! bucket layouts, so routers, autoscalers and dashboards built for vLLM
//! scrape us unchanged.
//!
//! Written by hand rather than through a Prometheus crate because vLLM's
//! quirks are the contract: counters are exposed with `_total` (Python's
//! client appends it), `vllm:iteration_tokens_total` is a histogram despite
//! its name, the success counter's label is `finished_reason`, labels are
//! sorted by name (`engine`, `le`, `model_name`, as `prometheus_client`
//! writes them), and numbers print as Python prints floats (`1.0`).
//! `vllm:cache_config_info` also carries `model_name` (vLLM's does not:
//! one vLLM serves one model, llmsim may serve several).
//! `tests/integration/server/vllm-metrics.expected.prom`, written by hand
//! from vLLM's metric definitions, is what the names, types, labels and
//! buckets are checked against. One series per served model and replica:
//! a model with `cluster:` exposes each replica's series under
//! `engine="<index>"`, as vLLM's data-parallel mode labels each engine's
//! (`engine="0"` for a model without replicas; faults, picked before
//! routing, stay one series a model, on engine 0). Latency
//! histograms hold the *simulated* times (what the engine computed), which
//! are what a vLLM would have reported; the observed ones are in
//! `/metrics/summary`. `_created` samples are not exported.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::app::{App, ModelHandle};
use super::models::EngineKind;
use super::protocol::lock;
use super::telemetry::{Busy, Finish, Gauges, ModelTelemetry, Prom, PromHist};

/// One replica's values at scrape time (a model without replicas has one).
struct Snapshot<'a> {
    model: &'a ModelHandle,
    /// The replica's index: the `engine` label, as vLLM's data-parallel
    /// mode labels each engine's series.
    replica: usize,
    gauges: &'a Gauges,
    stats: ModelTelemetry,
}

/// The whole exposition, models in file order, each model's replicas in
/// index order.
pub fn render(app: &App) -> String {
    let snaps: Vec<Snapshot> = app
        .models
        .iter()
        .flat_map(|m| {
            m.replicas.iter().enumerate().map(move |(replica, sinks)| Snapshot {
                model: m,
                replica,
                gauges: &sinks.gauges,
                stats: lock(&sinks.stats).clone(),
            })
        })
        .collect();
    render_snapshots(&snaps, app.options.legacy_metrics)
}

fn render_snapshots(snaps: &[Snapshot], legacy: bool) -> String {
    let mut out = String::new();
    gauges(&mut out, snaps, legacy);
    counters(&mut out, snaps);
    admission(&mut out, snaps);
    histograms(&mut out, snaps, legacy);
    faults(&mut out, snaps);
    out
}

/// `llmsim:faults_injected_total{kind}` (not a vLLM family: vLLM injects
/// no faults), only when some model has a `faults` section.
fn faults(out: &mut String, snaps: &[Snapshot]) {
    if snaps.iter().all(|s| s.model.spec.faults.is_none()) {
        return;
    }
    let name = "llmsim:faults_injected_total";
    head(out, name, "counter", "Faults llmsim injected (models.yml faults), by kind.");
    // Faults are picked per model, before routing: one series a model.
    for s in snaps.iter().filter(|s| s.model.spec.faults.is_some() && s.replica == 0) {
        for (i, kind) in super::faults::NAMES.iter().enumerate() {
            let l = labels_with(s, &[("kind", (*kind).to_string())]);
            sample(out, name, &l, s.model.faults_seen[i].load(Ordering::Relaxed) as f64);
        }
    }
}

/// Python's float formatting for the values we produce.
pub fn num(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v.fract() == 0.0 && v.abs() < 1e16 { format!("{v:.1}") } else { format!("{v:?}") }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A replica's labels plus `extra`, sorted by name.
fn labels_with(s: &Snapshot, extra: &[(&str, String)]) -> String {
    let mut all = base_labels(s);
    all.extend(extra.iter().cloned());
    sorted(all)
}

fn labels(s: &Snapshot) -> String {
    labels_with(s, &[])
}

/// `k="v"` pairs sorted by name, comma-separated.
fn sorted(mut pairs: Vec<(&str, String)>) -> String {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect::<Vec<_>>().join(",")
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

fn sample(out: &mut String, name: &str, labels: &str, v: f64) {
    let _ = writeln!(out, "{name}{{{labels}}} {}", num(v));
}

/// A family's name, help text and how to read its value.
type Family<T, V> = (&'static str, &'static str, fn(&T) -> V);

fn gauges(out: &mut String, snaps: &[Snapshot], legacy: bool) {
    let g = |s: &Snapshot, f: fn(&Gauges) -> f64| f(s.gauges);
    let families: Vec<Family<Gauges, f64>> = vec![
        ("vllm:num_requests_running", "Number of requests in model execution batches.", |g| {
            g.running.load(Ordering::Relaxed) as f64
        }),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", |g| {
            g.waiting.load(Ordering::Relaxed) as f64
        }),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", |g| g.kv_usage()),
    ];
    let mut all = families;
    if legacy {
        all.push((
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage (deprecated alias). 1 means 100 percent usage.",
            |g| g.kv_usage(),
        ));
    }
    for (name, help, f) in all {
        head(out, name, "gauge", help);
        for s in snaps {
            sample(out, name, &labels(s), g(s, f));
        }
    }
    head(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.");
    for s in snaps {
        let (block, blocks) = match &s.model.spec.engine {
            EngineKind::Scheduler(m) => (m.engine.capacity.block_size, m.engine.capacity.num_blocks),
            EngineKind::Fixed(_) => (0, 0),
        };
        let l = labels_with(s, &[("block_size", block.to_string()), ("num_gpu_blocks", blocks.to_string())]);
        sample(out, "vllm:cache_config_info", &l, 1.0);
    }
}

fn counters(out: &mut String, snaps: &[Snapshot]) {
    let families: [Family<Prom, u64>; 5] = [
        ("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", |p| p.preemptions),
        ("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", |p| {
            p.prefix_queries
        }),
        ("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", |p| p.prefix_hits),
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", |p| p.prompt_tokens),
        ("vllm:generation_tokens_total", "Number of generation tokens processed.", |p| p.generation_tokens),
    ];
    for (name, help, f) in families {
        head(out, name, "counter", help);
        for s in snaps {
            sample(out, name, &labels(s), f(&s.stats.prom) as f64);
        }
    }
    speculative(out, snaps);
    let name = "vllm:request_success_total";
    head(out, name, "counter", "Count of successfully processed requests.");
    for s in snaps {
        for (i, f) in Finish::ALL.iter().enumerate() {
            let l = labels_with(s, &[("finished_reason", f.as_str().to_string())]);
            sample(out, name, &l, s.stats.prom.success[i] as f64);
        }
    }
}

/// vLLM's speculative-decoding counters (`vllm/v1/spec_decode/metrics.py`),
/// for the models that draft (docs/speculative.md); `vllm bench serve`
/// reads them around a run for its `spec_decode_*` results. Per position,
/// a `position` label from 0 to `k - 1`, every series made up front.
fn speculative(out: &mut String, snaps: &[Snapshot]) {
    let drafting: Vec<(&Snapshot, u32)> = snaps
        .iter()
        .filter_map(|s| match &s.model.spec.engine {
            EngineKind::Scheduler(m) => m.engine.speculative.as_ref().map(|sp| (s, sp.tokens)),
            EngineKind::Fixed(_) => None,
        })
        .collect();
    if drafting.is_empty() {
        return;
    }
    let families: [Family<Prom, u64>; 3] = [
        ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", |p| p.spec.drafts),
        ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", |p| p.spec.draft_tokens),
        ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", |p| p.spec.accepted()),
    ];
    for (name, help, f) in families {
        head(out, name, "counter", help);
        for (s, _) in &drafting {
            sample(out, name, &labels(s), f(&s.stats.prom) as f64);
        }
    }
    let name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    head(out, name, "counter", "Accepted tokens per draft position.");
    for (s, k) in &drafting {
        for pos in 0..*k as usize {
            let n = s.stats.prom.spec.accepted_per_pos.get(pos).copied().unwrap_or(0);
            sample(out, name, &labels_with(s, &[("position", pos.to_string())]), n as f64);
        }
    }
}

/// `vllm:admission_rejections_total{model_name,reason}`: admission checks
/// refused with 503 by `max_num_queued_reqs` / `max_num_queued_tokens`,
/// one per refusal whatever the request's `n` (vLLM 0.33.0's
/// `vllm/v1/metrics/loggers.py`: name, help text, labels, and both
/// reasons' series made up front). vLLM counts them in the API server,
/// before any engine, so the family has no `engine` label: one series a
/// model and reason (the counts live on replica 0's telemetry).
fn admission(out: &mut String, snaps: &[Snapshot]) {
    let name = "vllm:admission_rejections_total";
    head(out, name, "counter", "Number of admission attempts rejected by a queue limit, by reason.");
    for s in snaps.iter().filter(|s| s.replica == 0) {
        for busy in Busy::ALL {
            let l = sorted(vec![("model_name", escape(&s.model.spec.name)), ("reason", busy.reason().to_string())]);
            sample(out, name, &l, s.stats.prom.admission_rejections[busy as usize] as f64);
        }
    }
}

fn histograms(out: &mut String, snaps: &[Snapshot], legacy: bool) {
    type Pick = fn(&Prom) -> &PromHist;
    let mut families: Vec<(&str, &str, Pick)> = vec![
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", |p| &p.request_prompt_tokens),
        ("vllm:request_generation_tokens", "Number of generation tokens processed.", |p| &p.request_generation_tokens),
        ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", |p| &p.iteration_tokens),
        ("vllm:request_params_n", "Histogram of the n request parameter.", |p| &p.params_n),
        ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", |p| &p.params_max_tokens),
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", |p| &p.ttft),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", |p| &p.itl),
    ];
    if legacy {
        families.push((
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds (deprecated alias of inter_token_latency).",
            |p| &p.itl,
        ));
    }
    families.extend([
        (
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            (|p| &p.request_tpot) as Pick,
        ),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", |p| &p.e2e),
        ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", |p| &p.queue),
        ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", |p| {
            &p.inference
        }),
        ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", |p| &p.prefill),
        ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", |p| &p.decode),
        ("vllm:request_num_preemptions", "Number of preemptions per finished request.", |p| &p.num_preemptions),
    ]);
    for (name, help, pick) in families {
        head(out, name, "histogram", help);
        for s in snaps {
            histogram(out, name, &base_labels(s), pick(&s.stats.prom));
        }
    }
}

fn base_labels(s: &Snapshot) -> Vec<(&'static str, String)> {
    vec![("engine", s.replica.to_string()), ("model_name", escape(&s.model.spec.name))]
}

/// A histogram's samples; `labels` are the series' labels, to which the
/// buckets add `le` in its sorted place.
fn histogram(out: &mut String, name: &str, labels: &[(&str, String)], h: &PromHist) {
    let mut cumulative = 0;
    for (i, count) in h.counts.iter().enumerate() {
        cumulative += count;
        let le = h.bounds.get(i).map_or_else(|| "+Inf".to_string(), |&b| num(b));
        let mut with_le = labels.to_vec();
        with_le.push(("le", le));
        let _ = writeln!(out, "{name}_bucket{{{}}} {}", sorted(with_le), num(cumulative as f64));
    }
    let plain = sorted(labels.to_vec());
    let _ = writeln!(out, "{name}_count{{{plain}}} {}", num(h.count as f64));
    let _ = writeln!(out, "{name}_sum{{{plain}}} {}", num(h.sum));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_python_floats() {
        assert_eq!(num(3.0), "3.0");
        assert_eq!(num(0.001), "0.001");
        assert_eq!(num(2560.0), "2560.0");
        assert_eq!(num(0.25), "0.25");
        assert_eq!(num(f64::INFINITY), "+Inf");
    }

    #[test]
    fn a_histogram_is_cumulative_with_inf_count_and_sum() {
        let mut h = PromHist::new(vec![0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(3.0);
        let mut out = String::new();
        histogram(&mut out, "x", &[("model_name", "m".into()), ("engine", "0".into())], &h);
        assert_eq!(
            out,
            "x_bucket{engine=\"0\",le=\"0.1\",model_name=\"m\"} 1.0\n\
             x_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 2.0\n\
             x_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 3.0\n\
             x_count{engine=\"0\",model_name=\"m\"} 3.0\n\
             x_sum{engine=\"0\",model_name=\"m\"} 3.55\n"
        );
    }
}
