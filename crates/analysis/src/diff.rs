//! Predicted vs measured: the figures of an `llmsim run` result next to a
//! measured load level, with the relative error of each and a verdict
//! against a tolerance, so CI can gate on a prediction.
//!
//! Only like is compared with like. Each measured distribution carries the
//! definition it was mapped to ([`MetricKind`]); a predicted figure is
//! compared only with a measured one of the same definition, and a figure
//! the file does not have (vLLM writes only p99 by default) is shown as not
//! compared, never estimated. The definitions compared are part of the
//! output.

pub mod server;
pub mod table;

use serde::Serialize;

use crate::measured::{Dist, LoadLevel, MetricKind, Tool};
use llmsim_planner::metrics::{RunResult, Stats};

/// The latency rows: label, predicted field, measured definition.
const LATENCIES: [(&str, &str, MetricKind); 4] = [
    ("ttft", "ttft_ms", MetricKind::Ttft),
    ("itl", "itl_ms", MetricKind::ChunkGap),
    ("tpot", "tpot_ms", MetricKind::DecodeMean),
    ("e2e", "e2e_ms", MetricKind::E2e),
];

/// Statistic name and percentile (tenths of a percent; 0 = the mean).
const STATS: [(&str, u32); 4] = [("mean", 0), ("p50", 500), ("p90", 900), ("p99", 990)];

const THROUGHPUTS: [&str; 4] = ["requests", "input", "output", "total"];

/// Every metric id `--metric` accepts, finest first within a group.
pub fn metric_ids() -> Vec<String> {
    let mut ids = Vec::new();
    for (name, _, _) in LATENCIES {
        ids.push(name.to_string());
        ids.extend(STATS.iter().map(|(s, _)| format!("{name}.{s}")));
    }
    ids.push("throughput".into());
    ids.extend(THROUGHPUTS.iter().map(|t| format!("throughput.{t}")));
    ids.push("speculative".into());
    ids.extend(SPECULATIVE.iter().map(|t| format!("speculative.{t}")));
    ids
}

/// Speculative decoding's rows (docs/speculative.md), with either side drafting.
const SPECULATIVE: [&str; 2] = ["acceptance_length", "acceptance_rate"];

/// A `--tolerance` or `--metric` argument of `llmsim diff` that cannot be
/// used, with what is allowed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ArgError {
    #[error("--tolerance `{0}` is not allowed: give a percentage >= 0, e.g. 10% or 2.5%")]
    Tolerance(String),
    #[error(
        "--metric `{name}` is not a metric{}; choose from: {}",
        .near.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default(),
        .allowed.join(", ")
    )]
    Metric { name: String, near: Option<String>, allowed: Vec<String> },
}

/// A relative tolerance: `10%` or `10` (percent).
pub fn parse_tolerance(text: &str) -> Result<f64, ArgError> {
    let t = text.trim();
    let number = t.strip_suffix('%').unwrap_or(t).trim();
    match number.parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p / 100.0),
        _ => Err(ArgError::Tolerance(text.to_string())),
    }
}

/// Checks `--metric` names, suggesting the nearest valid one.
pub fn check_metrics(names: &[String]) -> Result<(), ArgError> {
    let ids = metric_ids();
    for n in names {
        if !ids.contains(n) {
            let near = llmsim_core::util::nearest(n, ids.iter().map(String::as_str)).map(str::to_string);
            return Err(ArgError::Metric { name: n.clone(), near, allowed: ids });
        }
    }
    Ok(())
}

/// How one figure fared.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Within,
    Outside,
    /// Shown for information: `--metric` did not select it.
    NotSelected,
    /// One side lacks it (the reason is in `note`).
    NotCompared,
}

/// One compared figure.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `ttft.p50`, `throughput.output`.
    pub id: String,
    pub predicted: Option<f64>,
    pub measured: Option<f64>,
    /// `(predicted - measured) / measured`, in percent.
    pub error_pct: Option<f64>,
    pub verdict: Verdict,
    /// Why not compared, or a qualifier (recomputed, token-weighted).
    pub note: Option<String>,
}

/// A prediction against one measured load level.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub level: String,
    pub tool: &'static str,
    pub tolerance_pct: f64,
    pub predicted_requests: u64,
    pub measured_requests: Option<u64>,
    pub rows: Vec<Row>,
    /// Which definitions were compared, one line each.
    pub definitions: Vec<String>,
    /// The measurement's own warnings (client or server lag).
    pub warnings: Vec<String>,
    /// Why the measured level's requests cannot be replayed by `--trace-from`
    /// (`None`: they can).
    #[serde(skip)]
    pub unreplayable: Option<String>,
}

impl Comparison {
    pub fn outside(&self) -> usize {
        self.rows.iter().filter(|r| r.verdict == Verdict::Outside).count()
    }
    pub fn compared(&self) -> usize {
        self.rows.iter().filter(|r| matches!(r.verdict, Verdict::Within | Verdict::Outside)).count()
    }
    /// Failed: a figure outside the tolerance, nothing compared, or the
    /// measurement flagged itself (its figures may be the client's doing).
    pub fn failed(&self) -> bool {
        self.outside() > 0 || self.compared() == 0 || !self.warnings.is_empty()
    }
}

/// Compares `pred` with `level`. `selected` is the `--metric` list (empty:
/// everything).
pub fn compare(pred: &RunResult, level: &LoadLevel, tool: Tool, tolerance: f64, selected: &[String]) -> Comparison {
    let is_selected =
        |id: &str| selected.is_empty() || selected.iter().any(|s| id == s || id.starts_with(&format!("{s}.")));
    let mut rows = Vec::new();
    let mut definitions = Vec::new();
    for (name, field, kind) in LATENCIES {
        let p = predicted_stats(pred, field);
        let m = level.metrics.get(&kind);
        definitions.push(definition(name, field, kind, m, tool));
        for (stat, q) in STATS {
            let id = format!("{name}.{stat}");
            let (pv, mv, note) = latency_pair(p, m, q);
            rows.push(row(id.clone(), pv, mv, note, tolerance, is_selected(&id)));
        }
    }
    let t = &pred.throughput;
    let mt = &level.throughput;
    let pairs = [
        (t.requests_per_s, mt.requests_per_s),
        (t.input_tokens_per_s, mt.input_tokens_per_s),
        (t.output_tokens_per_s, mt.output_tokens_per_s),
        (t.total_tokens_per_s, mt.total_tokens_per_s),
    ];
    for (name, (pv, mv)) in THROUGHPUTS.iter().zip(pairs) {
        let id = format!("throughput.{name}");
        let note = mv.is_none().then(|| "the file has no such throughput".to_string());
        rows.push(row(id.clone(), Some(pv), mv, note, tolerance, is_selected(&id)));
    }
    definitions
        .push(format!("throughput: predicted over (last token - first arrival); measured over {}", window(tool)));
    if pred.speculative.is_some() || level.spec_decode.is_some() {
        speculative_rows(pred, level, tolerance, &is_selected, &mut rows, &mut definitions);
    }
    definitions.extend(level.not_compared.iter().map(|why| format!("not compared: {why}")));
    Comparison {
        level: format!("{} ({})", level.label, level.strategy),
        tool: tool.name(),
        tolerance_pct: tolerance * 100.0,
        predicted_requests: pred.requests.completed,
        measured_requests: level.completed,
        rows,
        definitions,
        warnings: level.health.clone(),
        unreplayable: level.requests.as_ref().err().cloned(),
    }
}

/// The mean acceptance length and the acceptance rate (percent), when the
/// prediction drafts or the measured server did: a scenario that drafts
/// against a server that did not (or the other way round) is shown, never
/// compared.
fn speculative_rows(
    pred: &RunResult,
    level: &LoadLevel,
    tolerance: f64,
    is_selected: &dyn Fn(&str) -> bool,
    rows: &mut Vec<Row>,
    definitions: &mut Vec<String>,
) {
    let p = pred.speculative.as_ref();
    let m = level.spec_decode;
    let why = match (p, m) {
        (None, _) => Some("the scenario has no speculative: the measured server drafted".to_string()),
        (_, None) => Some("the file has no spec_decode figures (the server exported no counters)".to_string()),
        _ => None,
    };
    let pairs = [
        (p.map(|s| s.mean_acceptance_length), m.and_then(|m| m.acceptance_length)),
        (p.map(|s| s.acceptance_rate * 100.0), m.and_then(|m| m.acceptance_rate_pct)),
    ];
    for (name, (pv, mv)) in SPECULATIVE.iter().zip(pairs) {
        let id = format!("speculative.{name}");
        let note = why.clone().or_else(|| mv.is_none().then(|| "not in the file".to_string()));
        rows.push(row(id.clone(), pv, mv, note, tolerance, is_selected(&id)));
    }
    definitions.push(
        "speculative: predicted mean_acceptance_length (1 + kept drafts / verify steps) and acceptance_rate (kept \
         / drafted, in %) vs the file's spec_decode_acceptance_length and spec_decode_acceptance_rate (the \
         server's counters over the run)"
            .into(),
    );
}

fn predicted_stats<'a>(pred: &'a RunResult, field: &str) -> &'a Stats {
    match field {
        "ttft_ms" => &pred.ttft_ms,
        "itl_ms" => &pred.itl_ms,
        "tpot_ms" => &pred.tpot_ms,
        _ => &pred.e2e_ms,
    }
}

/// Predicted and measured values of one statistic, and a note.
fn latency_pair(p: &Stats, m: Option<&Dist>, q: u32) -> (Option<f64>, Option<f64>, Option<String>) {
    let pv = match q {
        0 => p.mean,
        500 => p.p50,
        900 => p.p90,
        _ => p.p99,
    };
    let Some(m) = m else {
        return (pv, None, Some("the file has no figure of this definition".into()));
    };
    let mv = if q == 0 { m.mean } else { m.percentile(q) };
    let note = match mv {
        None => Some("not in the file (never estimated)".to_string()),
        Some(_) if (q == 0 && m.mean_recomputed) || (q != 0 && m.recomputed.contains(&q)) => {
            Some("measured value computed from the per-request arrays".into())
        }
        Some(_) if m.token_weighted => Some("measured distribution is token-weighted".into()),
        Some(_) => None,
    };
    (pv, mv, note)
}

fn row(id: String, pv: Option<f64>, mv: Option<f64>, note: Option<String>, tol: f64, selected: bool) -> Row {
    let error_pct = match (pv, mv) {
        (Some(p), Some(m)) if m != 0.0 => Some((p - m) / m.abs() * 100.0),
        (Some(0.0), Some(_)) => Some(0.0),
        _ => None,
    };
    let note = match (&note, pv, mv) {
        (None, None, _) => Some("no predicted value (no sample)".into()),
        (None, Some(_), Some(m)) if m == 0.0 && error_pct.is_none() => Some("measured 0: no relative error".into()),
        _ => note,
    };
    let verdict = match error_pct {
        _ if !selected => Verdict::NotSelected,
        None => Verdict::NotCompared,
        Some(e) if e.abs() <= tol * 100.0 + 1e-9 => Verdict::Within,
        Some(_) => Verdict::Outside,
    };
    Row { id, predicted: pv, measured: mv, error_pct, verdict, note }
}

/// One line saying what was compared for a latency row.
fn definition(name: &str, field: &str, kind: MetricKind, m: Option<&Dist>, tool: Tool) -> String {
    let predicted = match kind {
        MetricKind::Ttft => "arrival at the engine -> first token",
        MetricKind::ChunkGap => "every gap between two tokens of a request, pooled",
        MetricKind::DecodeMean => "per request (last token - first token) / (tokens - 1)",
        MetricKind::E2e => "arrival at the engine -> last token",
    };
    let Some(m) = m else {
        return format!("{name}: predicted {field} ({predicted}); {} has no figure of this definition", tool.name());
    };
    let mut line =
        format!("{name}: predicted {field} ({predicted}) vs {} `{}` ({})", tool.name(), m.field, kind.definition());
    if kind == MetricKind::ChunkGap {
        line.push_str("; equal to per-token gaps when the server streams one token per chunk");
    }
    if m.token_weighted {
        line.push_str("; measured percentiles are token-weighted");
    }
    line
}

fn window(tool: Tool) -> &'static str {
    match tool {
        Tool::Guidellm => "guidellm's measurement window (warm-up and cool-down excluded)",
        Tool::Llmsim => "the bench's run (first scheduled arrival to the last response)",
        Tool::Aiperf => "AIPerf's profiling phase (warm-up excluded; from records: first send to last response)",
        Tool::GenaiPerf => "genai-perf's window (first send to the last response)",
        Tool::InferencePerf => "inference-perf's stage (its successful requests)",
        Tool::Llmperf => {
            "llmperf's run (its completed requests a minute over 60; output tokens re-counted by its Llama-2 tokenizer)"
        }
        _ => "the tool's run (start of sending to the last response)",
    }
}
