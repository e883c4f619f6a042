//! guidellm `benchmarks.json`: one load level per element of `benchmarks`.
//!
//! Shapes by version (docs/bench-diff.md): the strategy sits at
//! `config.strategy` (0.4 and later) or `args.strategy` (0.3 and before);
//! the metric distributions at `metrics.<name>.successful` in every version.
//! Two definitions differ from vLLM's and are kept apart: guidellm's
//! `inter_token_latency_ms` is the per-request mean decode step (vLLM's
//! TPOT), weighted by tokens, and its `time_per_output_token_ms` includes
//! the TTFT. Rates (`*_per_second`) use the `mean`, which is count over the
//! measurement window.

use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{at, finite_at, num, num_at};
use super::{Dist, LoadLevel, MeasuredRequest, MetricKind, Strategy, Throughput};

/// Every benchmark of a report.
pub fn levels(doc: &Value) -> Result<Vec<LoadLevel>, String> {
    let list = doc.get("benchmarks").and_then(Value::as_array).ok_or("benchmarks: expected a list of benchmarks")?;
    list.iter().enumerate().map(|(i, b)| level(b).map_err(|m| format!("benchmarks[{i}]: {m}"))).collect()
}

fn level(b: &Value) -> Result<LoadLevel, String> {
    let metrics = b.get("metrics").filter(|m| m.is_object()).ok_or("metrics: missing")?;
    let strategy_obj = at(b, "config.strategy").or_else(|| at(b, "args.strategy")).unwrap_or(&Value::Null);
    let (label, strategy) = strategy(strategy_obj);
    let completed = count(metrics, b, "successful");
    let failed = match (count(metrics, b, "errored"), count(metrics, b, "incomplete")) {
        (None, None) => None,
        (e, i) => Some(e.unwrap_or(0) + i.unwrap_or(0)),
    };
    let dists = distributions(metrics);
    Ok(LoadLevel {
        label,
        strategy,
        duration_s: finite_at(b, "duration"),
        completed,
        failed,
        throughput: Throughput {
            requests_per_s: rate(metrics, "requests_per_second"),
            input_tokens_per_s: rate(metrics, "prompt_tokens_per_second"),
            output_tokens_per_s: rate(metrics, "output_tokens_per_second"),
            total_tokens_per_s: rate(metrics, "tokens_per_second"),
        },
        requests: requests(b, completed),
        health: Vec::new(),
        spec_decode: None,
        not_compared: not_compared(metrics),
        metrics: dists,
    })
}

/// What the file holds that no prediction is compared with: its
/// time_per_output_token_ms includes the TTFT.
fn not_compared(metrics: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if at(metrics, "time_per_output_token_ms.successful").is_some_and(Value::is_object) {
        out.push(
            "guidellm time_per_output_token_ms ((last token - request sent) / output tokens, includes the TTFT) \
             has no predicted counterpart"
                .into(),
        );
    }
    out
}

/// The load-level label guidellm itself prints (`constant@22.52`).
fn strategy(s: &Value) -> (String, Strategy) {
    let kind = s.get("type_").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("unknown");
    let rate = finite_at(s, "rate");
    let max_concurrency = num_at(s, "max_concurrency").map(|c| c as u64);
    match kind {
        "synchronous" => (kind.into(), Strategy::Closed { concurrency: 1 }),
        "concurrent" => {
            let n = num_at(s, "streams").map_or(0, |c| c as u64);
            (format!("concurrent@{n}"), Strategy::Closed { concurrency: n })
        }
        "throughput" => (kind.into(), Strategy::Open { rate: None, burstiness: None, max_concurrency }),
        "constant" | "poisson" => {
            // A constant schedule is the limit of infinite burstiness.
            let burstiness = Some(if kind == "constant" { f64::INFINITY } else { 1.0 });
            let label = rate.map_or(kind.to_string(), |r| format!("{kind}@{r:.2}"));
            (label, Strategy::Open { rate, burstiness, max_concurrency })
        }
        other => (other.into(), Strategy::Other(other.into())),
    }
}

/// `metrics.request_totals.<status>` (0.4+) or `request_totals.<status>` (0.3).
fn count(metrics: &Value, b: &Value, status: &str) -> Option<u64> {
    let v = metrics.get("request_totals").or_else(|| b.get("request_totals"))?.get(status)?;
    num(v).map(|x| x as u64)
}

fn rate(metrics: &Value, name: &str) -> Option<f64> {
    at(metrics, &format!("{name}.successful.mean")).and_then(num).filter(|x| x.is_finite())
}

fn distributions(metrics: &Value) -> BTreeMap<MetricKind, Dist> {
    let wanted = [
        (MetricKind::Ttft, "time_to_first_token_ms", 1.0, false),
        (MetricKind::DecodeMean, "inter_token_latency_ms", 1.0, true),
        (MetricKind::E2e, "request_latency", 1e3, false),
    ];
    let mut out = BTreeMap::new();
    for (kind, name, to_ms, token_weighted) in wanted {
        if let Some(s) = at(metrics, &format!("{name}.successful")).filter(|s| s.is_object()) {
            out.insert(kind, dist(s, name, to_ms, token_weighted));
        }
    }
    out
}

/// A DistributionSummary, scaled to milliseconds.
fn dist(s: &Value, name: &str, to_ms: f64, token_weighted: bool) -> Dist {
    let ms = |k: &str| finite_at(s, k).map(|x| x * to_ms);
    let mut percentiles = BTreeMap::new();
    if let Some(p) = s.get("percentiles").and_then(Value::as_object) {
        for (key, v) in p {
            if let (Some(t), Some(x)) = (key.strip_prefix('p').and_then(tenths), num(v).filter(|x| x.is_finite())) {
                percentiles.insert(t, x * to_ms);
            }
        }
    }
    if let Some(m) = ms("median") {
        percentiles.entry(500).or_insert(m);
    }
    Dist {
        field: name.to_string(),
        count: num_at(s, "count").map(|c| c as u64),
        mean: ms("mean"),
        std: ms("std_dev"),
        percentiles,
        token_weighted,
        recomputed: Vec::new(),
        mean_recomputed: false,
    }
}

/// guidellm's percentile keys: `p001` = 0.1 %, `p01` = 1 %, `p999` = 99.9 %,
/// otherwise whole percents. Returns tenths of a percent.
fn tenths(key: &str) -> Option<u32> {
    match key {
        "001" => Some(1),
        "999" => Some(999),
        k => k.parse::<u32>().ok().filter(|p| *p <= 100).map(|p| p * 10),
    }
}

/// The sampled requests, usable only when every successful one was kept.
fn requests(b: &Value, completed: Option<u64>) -> Result<Vec<MeasuredRequest>, String> {
    let sample_size = at(b, "config.sample_size").or_else(|| at(b, "args.sample_size")).and_then(num);
    let ok = at(b, "requests.successful").and_then(Value::as_array);
    let Some(ok) = ok else {
        return Err("the benchmark has no per-request data (requests.successful)".into());
    };
    if let Some(n) = sample_size.filter(|_| completed != Some(ok.len() as u64)) {
        return Err(format!(
            "guidellm kept only a sample of the requests (sample_size {n}: {} of {} successful), so the \
             run cannot be replayed; rerun guidellm without a sample size",
            ok.len(),
            completed.map_or("?".into(), |c| c.to_string())
        ));
    }
    ok.iter()
        .enumerate()
        .map(|(j, r)| request(r).ok_or(format!("requests.successful[{j}]: no send time or token counts")))
        .collect()
}

fn request(r: &Value) -> Option<MeasuredRequest> {
    let sent = finite_at(r, "request_start_time")
        .or_else(|| at(r, "info.timings.request_start").and_then(num))
        .or_else(|| finite_at(r, "start_time"))?;
    Some(MeasuredRequest {
        sent_s: sent,
        prompt_tokens: num_at(r, "prompt_tokens")? as u32,
        output_tokens: num_at(r, "output_tokens")? as u32,
        ok: true,
        ttft_ms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_keys_follow_guidellm_naming() {
        assert_eq!(tenths("001"), Some(1));
        assert_eq!(tenths("01"), Some(10));
        assert_eq!(tenths("05"), Some(50));
        assert_eq!(tenths("50"), Some(500));
        assert_eq!(tenths("999"), Some(999));
    }

    #[test]
    fn strategies_become_labels_and_kinds() {
        let (l, s) = strategy(&serde_json::json!({"type_": "constant", "rate": 22.523, "max_concurrency": 512}));
        assert_eq!(l, "constant@22.52");
        assert!(matches!(s, Strategy::Open { rate: Some(_), burstiness: Some(b), .. } if b.is_infinite()));
        let (l, s) = strategy(&serde_json::json!({"type_": "concurrent", "streams": 4}));
        assert_eq!((l.as_str(), s), ("concurrent@4", Strategy::Closed { concurrency: 4 }));
    }
}
