//! ray-project llmperf's `<name>_summary.json` (docs/bench-diff.md,
//! "llmperf"): one flattened object, one closed loop of
//! `num_concurrent_requests` users. Latencies are seconds,
//! `results_<metric>_{mean, stddev, quantiles_pNN}` (pandas' linear
//! quantiles). Its `inter_token_latency_s` is each request's (TTFT + the
//! later content gaps) over its count of SSE events, the role and finish
//! events included: no definition the engine predicts, so it is not read.
//! Neither file has send times, so a run cannot be replayed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{finite_at, num_at};
use super::{Dist, LoadLevel, MetricKind, Strategy, Throughput};

/// Whether `doc` is an llmperf summary.
pub fn is_summary(doc: &Value) -> bool {
    doc.get("results_ttft_s_mean").is_some()
}

/// The one level of a summary.
pub fn level(doc: &Value) -> LoadLevel {
    let users = num_at(doc, "num_concurrent_requests").filter(|n| n.is_finite() && *n >= 1.0).map(|n| n as u64);
    let strategy = match users {
        Some(c) => Strategy::Closed { concurrency: c },
        None => Strategy::Other("num_concurrent_requests missing".into()),
    };
    let label = strategy.label().unwrap_or_else(|| "run".into());
    let mut metrics = BTreeMap::new();
    for (kind, stem) in [(MetricKind::Ttft, "ttft_s"), (MetricKind::E2e, "end_to_end_latency_s")] {
        if let Some(d) = dist(doc, stem) {
            metrics.insert(kind, d);
        }
    }
    LoadLevel {
        label,
        strategy,
        duration_s: None,
        completed: num_at(doc, "results_num_completed_requests").filter(|n| *n >= 0.0).map(|n| n as u64),
        failed: num_at(doc, "results_number_errors").filter(|n| *n >= 0.0).map(|n| n as u64),
        throughput: Throughput {
            requests_per_s: finite_at(doc, "results_num_completed_requests_per_min").map(|n| n / 60.0),
            input_tokens_per_s: None,
            output_tokens_per_s: finite_at(doc, "results_mean_output_throughput_token_per_s"),
            total_tokens_per_s: None,
        },
        metrics,
        requests: Err("llmperf's files have no send times (individual_responses.json has none), so the run cannot \
                       be replayed"
            .into()),
        health: Vec::new(),
        spec_decode: None,
        not_compared: Vec::new(),
    }
}

/// `results_<stem>_*` in milliseconds, if the summary has any of them.
fn dist(doc: &Value, stem: &str) -> Option<Dist> {
    let prefix = format!("results_{stem}_");
    let ms = |key: &str| finite_at(doc, &format!("{prefix}{key}")).map(|s| s * 1e3);
    let mut d = Dist { field: format!("results_{stem}"), mean: ms("mean"), std: ms("stddev"), ..Dist::default() };
    for (key, v) in doc.as_object()? {
        if let Some(p) = key.strip_prefix(&prefix).and_then(|k| k.strip_prefix("quantiles_p")) {
            d.set_percentile(p, v, 1e3);
        }
    }
    (d.mean.is_some() || !d.percentiles.is_empty()).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_is_one_closed_loop_in_milliseconds() {
        let doc = serde_json::json!({
            "num_concurrent_requests": 3, "results_ttft_s_mean": 0.09, "results_ttft_s_quantiles_p90": 0.108,
            "results_ttft_s_stddev": 0.012, "results_end_to_end_latency_s_quantiles_p50": 0.2326,
            "results_inter_token_latency_s_mean": 0.017, "results_num_completed_requests": 12,
            "results_number_errors": 1, "results_num_completed_requests_per_min": 150.0,
            "results_mean_output_throughput_token_per_s": 40.5
        });
        let l = level(&doc);
        assert_eq!((l.label.as_str(), &l.strategy), ("concurrency 3", &Strategy::Closed { concurrency: 3 }));
        let ttft = &l.metrics[&MetricKind::Ttft];
        assert_eq!((ttft.mean, ttft.percentile(900)), (Some(90.0), Some(108.0)));
        assert_eq!(l.metrics[&MetricKind::E2e].percentile(500), Some(232.6));
        assert_eq!(l.metrics.len(), 2, "its inter-token latency is of no predicted definition");
        assert_eq!((l.completed, l.failed, l.throughput.requests_per_s), (Some(12), Some(1), Some(2.5)));
        assert!(l.requests.is_err_and(|e| e.contains("no send times")));
    }
}
