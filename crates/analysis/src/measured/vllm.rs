//! `vllm bench serve --save-result` objects, and the two schemas that copy
//! it: SGLang's `bench_serving` lines and our own `llmsim bench` JSON.
//!
//! Summary statistics are `{mean,median,std,pNN}_{metric}_ms`; which
//! percentiles exist depends on `--metric-percentiles` (default only p99),
//! and which metrics on `--percentile-metrics` (default without `e2el`).
//! When the per-request arrays are present (`--save-detailed`; `latencies`
//! always in recent versions) a statistic the summary lacks is computed from
//! them exactly as vLLM does (numpy linear percentiles, population std) and
//! marked as recomputed. Nothing is filled in without the samples.

use std::collections::BTreeMap;

use serde_json::Value;

use super::json::{Doc, Errors, PerRequest, Ragged, finite_at, num, num_at};
use super::{Dist, LoadLevel, MeasuredRequest, MetricKind, Strategy, Throughput, Tool};
use llmsim_planner::metrics::percentile::percentile_sorted;

/// The percentiles the diff compares (tenths of a percent).
pub const COMPARED: [u32; 3] = [500, 900, 990];

/// One load level from one result object.
pub fn level(d: &Doc, tool: Tool, index: usize) -> LoadLevel {
    let doc = &d.head;
    let strategy = strategy(doc);
    let samples = Samples::from(d);
    let mut metrics = BTreeMap::new();
    for (kind, stem) in stems(tool) {
        let from_file = summary_dist(doc, stem);
        let from_arrays = samples.as_ref().and_then(|s| s.of(kind));
        if let Some(d) = merge(from_file, from_arrays, stem) {
            metrics.insert(kind, d);
        }
    }
    LoadLevel {
        label: label(doc, &strategy, index),
        strategy,
        duration_s: finite_at(doc, "duration"),
        completed: num_at(doc, "completed").map(|x| x as u64),
        failed: num_at(doc, "failed").map(|x| x as u64),
        throughput: throughput(doc),
        metrics,
        requests: requests(&d.arrays, tool),
        health: health(doc),
        spec_decode: spec_decode(doc),
        not_compared: Vec::new(),
    }
}

/// `spec_decode_acceptance_length` and `spec_decode_acceptance_rate` (a
/// percentage), present when the server exposes vLLM's spec-decoding
/// counters.
fn spec_decode(doc: &Value) -> Option<super::SpecDecode> {
    let d = super::SpecDecode {
        acceptance_length: finite_at(doc, "spec_decode_acceptance_length"),
        acceptance_rate_pct: finite_at(doc, "spec_decode_acceptance_rate"),
    };
    (d.acceptance_length.is_some() || d.acceptance_rate_pct.is_some()).then_some(d)
}

/// Metric stems by definition (docs/bench-diff.md, "Why definitions, not names").
fn stems(tool: Tool) -> [(MetricKind, &'static str); 4] {
    let e2e = if tool == Tool::Sglang { "e2e_latency" } else { "e2el" };
    [
        (MetricKind::Ttft, "ttft"),
        (MetricKind::DecodeMean, "tpot"),
        (MetricKind::ChunkGap, "itl"),
        (MetricKind::E2e, e2e),
    ]
}

fn strategy(doc: &Value) -> Strategy {
    let rate = num_at(doc, "request_rate").filter(|r| r.is_finite());
    let max_concurrency = num_at(doc, "max_concurrency").map(|c| c as u64);
    match (rate, max_concurrency) {
        (None, Some(c)) => Strategy::Closed { concurrency: c },
        _ => Strategy::Open { rate, burstiness: num_at(doc, "burstiness"), max_concurrency },
    }
}

fn label(doc: &Value, strategy: &Strategy, index: usize) -> String {
    let name = doc.get("label").and_then(Value::as_str).or_else(|| doc.get("tag").and_then(Value::as_str));
    match name {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => strategy.label().unwrap_or_else(|| format!("run {}", index + 1)),
    }
}

fn throughput(doc: &Value) -> Throughput {
    let duration = finite_at(doc, "duration").filter(|d| *d > 0.0);
    let input = finite_at(doc, "input_throughput").or_else(|| Some(finite_at(doc, "total_input_tokens")? / duration?));
    Throughput {
        requests_per_s: finite_at(doc, "request_throughput"),
        input_tokens_per_s: input,
        output_tokens_per_s: finite_at(doc, "output_throughput"),
        total_tokens_per_s: finite_at(doc, "total_token_throughput").or_else(|| finite_at(doc, "total_throughput")),
    }
}

/// The summary statistics of `stem` written in the file, if any.
fn summary_dist(doc: &Value, stem: &str) -> Option<Dist> {
    let obj = doc.as_object()?;
    let suffix = format!("_{stem}_ms");
    let mut d = Dist { field: stem.to_string(), ..Dist::default() };
    let mut any = false;
    for (key, value) in obj {
        let Some(stat) = key.strip_suffix(&suffix) else { continue };
        let Some(x) = num(value).filter(|x| x.is_finite()) else { continue };
        any = true;
        match stat {
            "mean" => d.mean = Some(x),
            "std" => d.std = Some(x),
            "median" => {
                d.percentiles.insert(500, x);
            }
            p => {
                if let Some(tenths) = p.strip_prefix('p').and_then(tenths_of) {
                    d.percentiles.insert(tenths, x);
                }
            }
        }
    }
    any.then_some(d)
}

/// `"99"` -> 990, `"99.9"` -> 999, `"50"` -> 500.
pub fn tenths_of(p: &str) -> Option<u32> {
    let x: f64 = p.parse().ok()?;
    let t = (x * 10.0).round();
    ((0.0..=1000.0).contains(&t) && (t - x * 10.0).abs() < 1e-6).then_some(t as u32)
}

/// The file's summary, completed from the arrays where it lacks something.
fn merge(file: Option<Dist>, arrays: Option<Vec<f64>>, stem: &str) -> Option<Dist> {
    let samples = arrays.filter(|s| !s.is_empty());
    let mut d = match (file, &samples) {
        (Some(d), _) => d,
        (None, Some(_)) => Dist { field: stem.to_string(), ..Dist::default() },
        (None, None) => return None,
    };
    if let Some(sorted) = samples {
        d.count = Some(sorted.len() as u64);
        let (mean, std) = mean_std(&sorted);
        if d.mean.is_none() {
            (d.mean, d.mean_recomputed) = (Some(mean), true);
        }
        d.std.get_or_insert(std);
        for q in COMPARED {
            if !d.percentiles.contains_key(&q)
                && let Some(x) = percentile_sorted(&sorted, f64::from(q) / 10.0)
            {
                d.percentiles.insert(q, x);
                d.recomputed.push(q);
            }
        }
    }
    Some(d)
}

/// Mean and population standard deviation (numpy's `std`, ddof = 0).
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// The per-request arrays of a result, successful requests only.
pub struct Samples<'a> {
    ttft_s: Option<Vec<f64>>,
    e2e_s: Option<Vec<f64>>,
    output_lens: Option<Vec<f64>>,
    /// Every request's gaps and whether it succeeded (all when `None`).
    itls_s: Option<(&'a Ragged, Option<&'a [bool]>)>,
}

impl<'a> Samples<'a> {
    /// `None` when it cannot tell which requests failed: no `errors` list
    /// and a failure count other than zero.
    fn from(d: &'a Doc) -> Option<Samples<'a>> {
        let a: &PerRequest = &d.arrays;
        let errors: Option<&[bool]> = match &a.errors {
            Errors::Ok(flags) => Some(flags),
            Errors::NotAList => return None,
            Errors::Absent if num_at(&d.head, "failed") == Some(0.0) => None,
            Errors::Absent => return None,
        };
        // The successful requests' entries, if the errors list covers them all.
        let ok = |xs: &Option<Vec<f64>>| -> Option<Vec<f64>> {
            let xs = xs.as_ref()?;
            match errors {
                Some(e) if e.len() == xs.len() => {
                    Some(xs.iter().zip(e).filter(|(_, ok)| **ok).map(|(x, _)| *x).collect())
                }
                Some(_) => None,
                None => Some(xs.clone()),
            }
        };
        let itls = a.itls.as_ref().filter(|rows| errors.is_none_or(|e| e.len() == rows.len()));
        Some(Samples {
            ttft_s: ok(&a.ttfts),
            e2e_s: ok(&a.latencies),
            output_lens: ok(&a.output_lens),
            itls_s: itls.map(|rows| (rows, errors)),
        })
    }

    /// Ascending millisecond samples of `kind`, if the arrays allow.
    fn of(&self, kind: MetricKind) -> Option<Vec<f64>> {
        let mut ms: Vec<f64> = match kind {
            MetricKind::Ttft => self.ttft_s.as_ref()?.iter().map(|s| s * 1e3).collect(),
            MetricKind::E2e => self.e2e_s.as_ref()?.iter().map(|s| s * 1e3).collect(),
            MetricKind::ChunkGap => {
                let (rows, errors) = self.itls_s?;
                let ok = |i: &usize| errors.is_none_or(|e| e[*i]);
                let n = (0..rows.len()).filter(ok).map(|i| rows.row(i).len()).sum();
                let mut ms = Vec::with_capacity(n);
                for i in (0..rows.len()).filter(ok) {
                    ms.extend(rows.row(i).iter().map(|s| s * 1e3));
                }
                ms
            }
            MetricKind::DecodeMean => {
                let (t, e, n) = (self.ttft_s.as_ref()?, self.e2e_s.as_ref()?, self.output_lens.as_ref()?);
                t.iter().zip(e).zip(n).filter(|(_, n)| **n > 1.0).map(|((t, e), n)| (e - t) / (n - 1.0) * 1e3).collect()
            }
        };
        ms.sort_by(f64::total_cmp);
        Some(ms)
    }
}

fn requests(a: &PerRequest, tool: Tool) -> Result<Vec<MeasuredRequest>, String> {
    if tool == Tool::Sglang {
        return Err("SGLang bench_serving does not save when each request was sent, so its requests cannot be \
                    replayed"
            .into());
    }
    let (Some(input), Some(output), Some(start)) = (&a.input_lens, &a.output_lens, &a.start_times) else {
        return Err("the file has no per-request data (input_lens, output_lens, start_times): rerun vllm bench \
                    serve with --save-detailed"
            .into());
    };
    if input.len() != output.len() || input.len() != start.len() {
        return Err(format!(
            "per-request arrays differ in length (input_lens {}, output_lens {}, start_times {})",
            input.len(),
            output.len(),
            start.len()
        ));
    }
    let errors = a.errors.flags();
    Ok((0..input.len())
        .map(|i| MeasuredRequest {
            sent_s: start[i],
            prompt_tokens: input[i].max(0.0) as u32,
            output_tokens: output[i].max(0.0) as u32,
            ok: errors.and_then(|e| e.get(i)).is_none_or(|ok| *ok) && output[i] > 0.0,
            ttft_ms: None,
        })
        .collect())
}

/// Our own bench's warnings about itself (`llmsim_warnings`).
fn health(doc: &Value) -> Vec<String> {
    let list = doc.get("llmsim_warnings").and_then(Value::as_array);
    list.map(|w| w.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_names_become_tenths() {
        assert_eq!(tenths_of("99"), Some(990));
        assert_eq!(tenths_of("99.9"), Some(999));
        assert_eq!(tenths_of("50"), Some(500));
        assert_eq!(tenths_of("x"), None);
        assert_eq!(tenths_of("99.95"), None);
    }

    #[test]
    fn missing_percentiles_come_from_the_arrays_and_are_marked() {
        let doc = serde_json::json!({
            "backend": "vllm", "model_id": "m", "mean_ttft_ms": 20.0, "p99_ttft_ms": 29.8, "median_ttft_ms": 20.0,
            "request_throughput": 1.0, "completed": 3, "failed": 0,
            "ttfts": [0.01, 0.02, 0.03], "latencies": [0.1, 0.2, 0.3], "errors": ["", "", ""],
        });
        let l = level(&serde_json::from_value(doc).unwrap(), Tool::Vllm, 0);
        let ttft = &l.metrics[&MetricKind::Ttft];
        assert_eq!(ttft.percentile(990), Some(29.8), "the file's own figure wins");
        assert!((ttft.percentile(900).unwrap() - 28.0).abs() < 1e-9);
        assert_eq!(ttft.recomputed, vec![900]);
        assert_eq!((ttft.mean, ttft.mean_recomputed), (Some(20.0), false), "the file's mean stays and is not marked");
        let e2e = &l.metrics[&MetricKind::E2e];
        assert_eq!(e2e.recomputed, vec![500, 900, 990]);
        // (100 + 200 + 300) / 3 ms, by hand.
        assert!((e2e.mean.unwrap() - 200.0).abs() < 1e-9 && e2e.mean_recomputed, "{e2e:?}");
        assert!(!l.metrics.contains_key(&MetricKind::ChunkGap), "no itl in the file or arrays");
    }

    #[test]
    fn without_an_error_list_nothing_is_recomputed_from_itls() {
        let doc = serde_json::json!({"mean_itl_ms": 5.0, "itls": [[0.005]]});
        let doc: Doc = serde_json::from_value(doc).unwrap();
        assert_eq!(Samples::from(&doc).map(|s| s.of(MetricKind::ChunkGap)), None);
    }
}
