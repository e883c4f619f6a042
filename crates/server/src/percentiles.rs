//! `GET /metrics/summary` and `POST /metrics/summary/reset`: latency
//! percentiles a load test can read directly, over a window a benchmark
//! starts after its warm-up.
//!
//! # Wire format
//!
//! ```text
//! {
//!   "schema_version": 1,
//!   "window_s": 12.5,                 // wall seconds since start or last reset
//!   "http_errors": {"400": 2},        // error responses since start, by status
//!   "models": {
//!     "NAME": {
//!       "engine": "scheduler" | "fixed",
//!       "requests": {"submitted", "completed", "aborted", "rejected", "in_flight"},
//!       "tokens": {"prompt", "output"},
//!       "throughput": {"requests_per_s", "output_tokens_per_s"},   // over window_s
//!       "preemptions": 0,
//!       "simulated": {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms"},
//!       "observed": {"ttft_ms", "itl_ms", "e2e_ms"},
//!       "lag_ms": Stats,              // token release time - due time
//!       "delivery_lag_ms": Stats,     // hand-over to the connection - due time
//!       "gauges": {"running", "waiting", "kv_cache_usage"},
//!       "replicas": [{"submitted", "completed", "gauges"}]   // models with `cluster:` only
//!     }
//!   }
//! }
//! ```
//!
//! Every `Stats` is `{count, mean, p50, p90, p99, max}` in milliseconds
//! (`null` without samples), as in `llmsim run --json`. Simulated times
//! are the engine's timeline (what `llmsim run` predicts); observed times
//! are measured by the handler from when the request was received to when
//! each chunk was handed to the connection. Only requests that arrived
//! after the reset count; `requests.*` and `tokens.*` count in the window.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::app::App;
use super::protocol::lock;
use super::telemetry::{Gauges, Window};
use llmsim_planner::metrics::Stats;

#[derive(Serialize)]
struct Summary {
    schema_version: u32,
    window_s: f64,
    http_errors: BTreeMap<String, u64>,
    models: BTreeMap<String, ModelSummary>,
}

#[derive(Serialize)]
struct ModelSummary {
    engine: &'static str,
    requests: Requests,
    tokens: Tokens,
    throughput: Throughput,
    preemptions: u64,
    simulated: Simulated,
    observed: ObservedOut,
    lag_ms: Stats,
    delivery_lag_ms: Stats,
    gauges: GaugesOut,
    /// Faults injected since start, by kind (models with `faults` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    faults: Option<BTreeMap<&'static str, u64>>,
    /// A model with `cluster:`: each replica's requests in the window and
    /// gauges, by replica index (the figures above are over all of them).
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<Vec<ReplicaSummary>>,
}

#[derive(Serialize)]
struct ReplicaSummary {
    submitted: u64,
    completed: u64,
    gauges: GaugesOut,
}

#[derive(Serialize)]
struct Requests {
    submitted: u64,
    completed: u64,
    aborted: u64,
    rejected: u64,
    in_flight: u64,
}

#[derive(Serialize)]
struct Tokens {
    prompt: u64,
    output: u64,
}

#[derive(Serialize)]
struct Throughput {
    requests_per_s: f64,
    output_tokens_per_s: f64,
}

#[derive(Serialize)]
struct Simulated {
    ttft_ms: Stats,
    itl_ms: Stats,
    tpot_ms: Stats,
    e2e_ms: Stats,
    queue_ms: Stats,
}

#[derive(Serialize)]
struct ObservedOut {
    ttft_ms: Stats,
    itl_ms: Stats,
    e2e_ms: Stats,
}

#[derive(Serialize)]
struct GaugesOut {
    running: u64,
    waiting: u64,
    kv_cache_usage: f64,
}

/// The summary JSON.
pub fn render(app: &App) -> String {
    let now = app.clock.now();
    let mut window_s = 0.0;
    let mut models = BTreeMap::new();
    for m in &app.models {
        let windows: Vec<Window> = m.replicas.iter().map(|s| lock(&s.stats).window.clone()).collect();
        let mut w = windows[0].clone();
        for other in &windows[1..] {
            w.merge(other);
        }
        let secs = now.nanos_since(w.since) as f64 / 1e9;
        window_s = secs;
        let gauges = |g: &Gauges| GaugesOut {
            running: g.running.load(Ordering::Relaxed),
            waiting: g.waiting.load(Ordering::Relaxed),
            kv_cache_usage: g.kv_usage(),
        };
        let (used, total) = m.replicas.iter().fold((0, 0), |(u, t), s| {
            (u + s.gauges.kv_used.load(Ordering::Relaxed), t + s.gauges.kv_total.load(Ordering::Relaxed))
        });
        let all = GaugesOut {
            running: m.replicas.iter().map(|s| s.gauges.running.load(Ordering::Relaxed)).sum(),
            waiting: m.replicas.iter().map(|s| s.gauges.waiting.load(Ordering::Relaxed)).sum(),
            kv_cache_usage: if total == 0 { 0.0 } else { used as f64 / total as f64 },
        };
        let mut summary = model_summary(&w, secs, m.spec.engine.as_str(), all);
        summary.replicas = m.clustered().then(|| {
            windows
                .iter()
                .zip(&m.replicas)
                .map(|(w, s)| ReplicaSummary {
                    submitted: w.submitted,
                    completed: w.completed,
                    gauges: gauges(&s.gauges),
                })
                .collect()
        });
        summary.faults = m.spec.faults.as_ref().map(|_| {
            super::faults::NAMES
                .iter()
                .enumerate()
                .map(|(i, k)| (*k, m.faults_seen[i].load(Ordering::Relaxed)))
                .collect()
        });
        models.insert(m.spec.name.clone(), summary);
    }
    let http_errors = lock(&app.http_errors).iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let s = Summary { schema_version: 1, window_s, http_errors, models };
    // invariant: plain data always serialises.
    serde_json::to_string_pretty(&s).unwrap_or_default()
}

fn model_summary(w: &Window, secs: f64, engine: &'static str, gauges: GaugesOut) -> ModelSummary {
    let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
    let h = Stats::from_histogram;
    ModelSummary {
        engine,
        requests: Requests {
            submitted: w.submitted,
            completed: w.completed,
            aborted: w.aborted,
            rejected: w.rejected,
            in_flight: w.submitted.saturating_sub(w.completed + w.aborted + w.rejected),
        },
        tokens: Tokens { prompt: w.prompt_tokens, output: w.output_tokens },
        throughput: Throughput { requests_per_s: per_s(w.completed), output_tokens_per_s: per_s(w.output_tokens) },
        preemptions: w.preemptions,
        simulated: Simulated {
            ttft_ms: h(&w.sim_ttft),
            itl_ms: h(&w.sim_itl),
            tpot_ms: h(&w.sim_tpot),
            e2e_ms: h(&w.sim_e2e),
            queue_ms: h(&w.sim_queue),
        },
        observed: ObservedOut { ttft_ms: h(&w.obs_ttft), itl_ms: h(&w.obs_itl), e2e_ms: h(&w.obs_e2e) },
        lag_ms: h(&w.lag),
        delivery_lag_ms: h(&w.delivery_lag),
        gauges,
        faults: None,
        replicas: None,
    }
}

/// Starts a new window for every model: requests that arrived before it
/// no longer count.
pub fn reset(app: &App) {
    // The windows move to the new epoch before new requests are stamped
    // with it, so every request stamped with it is counted from its start.
    let epoch = app.epoch.load(Ordering::SeqCst) + 1;
    let now = app.clock.now();
    for m in &app.models {
        for s in &m.replicas {
            lock(&s.stats).reset(epoch, now);
        }
    }
    app.epoch.store(epoch, Ordering::SeqCst);
}
