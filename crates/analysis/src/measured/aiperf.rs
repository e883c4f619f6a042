//! NVIDIA AIPerf's result files (docs/bench-diff.md, "AIPerf").
//!
//! Two files of one run, each read as one load level:
//!
//! * `profile_export_aiperf.json`, the summary: one object with
//!   `aiperf_version`, one key a metric (`{unit, avg, p1 ... p99, std,
//!   count}`) and the resolved `input_config`, whose profiling phase says
//!   how load was offered (`type` `concurrency`, `poisson`, `constant` or
//!   `gamma`, with `rate` and/or `concurrency`). It has no per-request
//!   data, so it can be compared but not replayed.
//! * `profile_export.jsonl`, the records (AIPerf's default
//!   `--export-level records`): one object a request, `{metadata:
//!   {request_start_ns, request_end_ns, benchmark_phase, ...}, metrics:
//!   {tag: {value, unit}}, error?}`. Its profiling-phase records are the
//!   level (warm-up ones are left out, as AIPerf leaves them out of its
//!   summary): the statistics computed from them as AIPerf computes them
//!   (numpy linear percentiles), its requests replayable. A records file
//!   is read record by record into plain numbers (a request's chunk gaps
//!   are 8 bytes each), so it takes less memory than its size: a 410 MB
//!   file of 20,000 requests of 1,000 chunks, 285 MB at the peak.
//!
//! Definitions (AIPerf's `metrics/types`): `time_to_first_token` is first
//! content response - request start, `inter_token_latency` the request's
//! (request_latency - TTFT) / (output tokens - 1) (vLLM's TPOT),
//! `inter_chunk_latency` every gap between streamed chunks, pooled (vLLM's
//! ITL), `request_latency` last content response - request start.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::Value;

use llmsim_planner::metrics::percentile::percentile_sorted;
use llmsim_scenario::config::ConfigError;
use llmsim_scenario::input::Kind;

use super::json::{QuoteBare, at, finite_at, num, num_str};
use super::vllm::{COMPARED, mean_std};
use super::{Dist, LoadLevel, Measured, MeasuredRequest, MetricKind, Strategy, Throughput, Tool};

/// The latency metrics read, by definition and AIPerf tag.
const METRICS: [(MetricKind, &str); 4] = [
    (MetricKind::Ttft, "time_to_first_token"),
    (MetricKind::DecodeMean, "inter_token_latency"),
    (MetricKind::ChunkGap, "inter_chunk_latency"),
    (MetricKind::E2e, "request_latency"),
];

/// AIPerf's tag of a metric read.
fn tag(kind: MetricKind) -> &'static str {
    METRICS.iter().find(|(k, _)| *k == kind).map_or("", |(_, t)| t)
}

/// Whether `doc` is an AIPerf summary (`profile_export_aiperf.json`).
pub fn is_summary(doc: &Value) -> bool {
    doc.get("aiperf_version").is_some() && doc.get("aggregation_type").is_none()
}

/// Whether `doc` is one request's record of `profile_export.jsonl`.
pub fn is_record(doc: &Value) -> bool {
    doc.get("metrics").is_some_and(Value::is_object)
        && doc.get("metadata").is_some_and(|m| m.get("request_start_ns").is_some())
}

/// Whether a file's first bytes open a records object as AIPerf writes
/// one (`{"metadata": {... "request_start_ns": ...}`: its metadata first,
/// a flat object), so it can be read record by record. Other files with a
/// `metadata` first (guidellm's) go the general way.
pub fn starts_records(prefix: &[u8]) -> bool {
    let mut rest = prefix.trim_ascii_start();
    let Some(after) = rest.strip_prefix(b"{") else { return false };
    rest = after.trim_ascii_start();
    let Some(after) = rest.strip_prefix(b"\"metadata\"") else { return false };
    let Some(end) = after.iter().position(|&b| b == b'}') else { return false };
    after[..end].windows(18).any(|w| w == b"\"request_start_ns\"")
}

// ---- the summary --------------------------------------------------------------

/// The one level of a summary.
pub fn summary_level(doc: &Value) -> Result<LoadLevel, String> {
    let requests = "AIPerf's summary has no per-request data: replay the profile_export.jsonl written beside it \
                    (AIPerf's default --export-level records)";
    stats_level(doc, strategy(doc), requests)
}

/// The one level of genai-perf's `profile_export_genai_perf.json`, which
/// AIPerf's summary continues: the same metric objects (its
/// `inter_token_latency` the same per-request definition, rounded to the
/// nanosecond; no pooled chunk gaps), the load at
/// `input_config.perf_analyzer.stimulus` (0.0.13 on) or the flat
/// `concurrency` / `request_rate` (0.0.12 and before). perf_analyzer's
/// request rate spaces requests evenly by default.
pub fn genai_perf_level(doc: &Value) -> Result<LoadLevel, String> {
    let ic = doc.get("input_config").unwrap_or(&Value::Null);
    let stimulus = at(ic, "perf_analyzer.stimulus").unwrap_or(ic);
    let users = finite_at(stimulus, "concurrency").filter(|c| *c >= 1.0).map(|c| c as u64);
    let rate = finite_at(stimulus, "request_rate").filter(|r| *r > 0.0);
    let strategy = match (users, rate) {
        (_, Some(r)) => Strategy::Open { rate: Some(r), burstiness: Some(f64::INFINITY), max_concurrency: None },
        (Some(c), None) => Strategy::Closed { concurrency: c },
        (None, None) => Strategy::Other("load not recorded (no perf_analyzer.stimulus)".into()),
    };
    let load = (strategy.label().unwrap_or_else(|| "run".into()), strategy);
    let requests = "genai-perf's summary has no per-request data, and perf_analyzer's profile_export.json \
                    counts no tokens (genai-perf counts them with its tokenizer), so the run cannot be replayed";
    stats_level(doc, load, requests)
}

/// A level of one metric object a key, as AIPerf and genai-perf write them.
fn stats_level(doc: &Value, (label, strategy): (String, Strategy), requests: &str) -> Result<LoadLevel, String> {
    let mut metrics = BTreeMap::new();
    for (kind, tag) in METRICS {
        if let Some(stats) = doc.get(tag).filter(|s| s.is_object()) {
            metrics.insert(kind, summary_dist(stats, tag)?);
        }
    }
    let avg = |tag: &str| at(doc, tag).and_then(|s| finite_at(s, "avg"));
    let failed = avg("error_request_count").map(|x| x as u64).or_else(|| {
        let list = doc.get("error_summary")?.as_array()?;
        Some(list.iter().map(|e| e.get("count").and_then(num).unwrap_or(0.0) as u64).sum())
    });
    let mut health = Vec::new();
    if doc.get("was_cancelled").and_then(Value::as_bool) == Some(true) {
        health.push("AIPerf says the run was cancelled (was_cancelled: true)".to_string());
    }
    if doc.get("is_complete").and_then(Value::as_bool) == Some(false) {
        health.push("AIPerf says the run did not complete (is_complete: false)".to_string());
    }
    Ok(LoadLevel {
        label,
        strategy,
        duration_s: duration_s(doc)?,
        completed: avg("completed_request_count").or_else(|| avg("request_count")).map(|x| x as u64),
        failed,
        throughput: Throughput {
            requests_per_s: avg("request_throughput"),
            input_tokens_per_s: avg("input_token_throughput"),
            output_tokens_per_s: avg("output_token_throughput"),
            total_tokens_per_s: avg("total_token_throughput"),
        },
        metrics,
        requests: Err(requests.into()),
        health,
        spec_decode: None,
        not_compared: Vec::new(),
    })
}

/// `benchmark_duration` in seconds (AIPerf writes `sec`).
fn duration_s(doc: &Value) -> Result<Option<f64>, String> {
    let Some(d) = doc.get("benchmark_duration") else { return Ok(None) };
    let Some(x) = finite_at(d, "avg") else { return Ok(None) };
    let unit = d.get("unit").and_then(Value::as_str);
    Ok(Some(to_ms(unit, x).map_err(|m| format!("benchmark_duration.unit: {m}"))? / 1e3))
}

/// The profiling phase's load, and the label it gives the level.
fn strategy(doc: &Value) -> (String, Strategy) {
    let phases = at(doc, "input_config.phases").and_then(Value::as_array);
    let phase = phases.and_then(|ps| {
        let kind = |p: &Value| p.get("kind").and_then(Value::as_str) == Some("profiling");
        let warmup = |p: &Value| p.get("kind").and_then(Value::as_str) == Some("warmup");
        ps.iter().find(|p| kind(p)).or_else(|| ps.iter().rfind(|p| !warmup(p)))
    });
    let Some(phase) = phase else {
        return ("run".into(), Strategy::Other("load not recorded (no input_config.phases)".into()));
    };
    let rate = finite_at(phase, "rate").filter(|r| *r > 0.0);
    let users = finite_at(phase, "concurrency").filter(|c| *c >= 1.0).map(|c| c as u64);
    let kind = phase.get("type").and_then(Value::as_str).unwrap_or("unknown");
    let open = |burstiness: Option<f64>| Strategy::Open { rate, burstiness, max_concurrency: users };
    let strategy = match kind {
        "concurrency" => match users {
            Some(concurrency) => Strategy::Closed { concurrency },
            None => Strategy::Other("concurrency phase without a concurrency".into()),
        },
        "poisson" => open(Some(1.0)),
        "constant" => open(Some(f64::INFINITY)),
        // AIPerf's smoothness is vLLM's burstiness (docs/bench-diff.md).
        "gamma" => open(finite_at(phase, "smoothness").or_else(|| finite_at(phase, "arrival_smoothness"))),
        other => Strategy::Other(format!("AIPerf phase type {other}")),
    };
    (strategy.label().unwrap_or_else(|| kind.to_string()), strategy)
}

/// One metric's `{unit, avg, std, count, pNN}`, in milliseconds.
fn summary_dist(stats: &Value, tag: &str) -> Result<Dist, String> {
    let unit = stats.get("unit").and_then(Value::as_str);
    let scale = to_ms(unit, 1.0).map_err(|m| format!("{tag}.unit: {m}"))?;
    let mut d = Dist { field: tag.to_string(), ..Dist::default() };
    d.count = finite_at(stats, "count").map(|c| c as u64);
    d.mean = finite_at(stats, "avg").map(|x| x * scale);
    d.std = finite_at(stats, "std").map(|x| x * scale);
    for (key, v) in stats.as_object().into_iter().flatten() {
        if let Some(p) = key.strip_prefix('p') {
            d.set_percentile(p, v, scale);
        }
    }
    Ok(d)
}

/// `x` in `unit` as milliseconds: AIPerf's time units; none means ms.
fn to_ms(unit: Option<&str>, x: f64) -> Result<f64, String> {
    match unit {
        None | Some("ms") => Ok(x),
        Some("s" | "sec") => Ok(x * 1e3),
        Some("us") => Ok(x / 1e3),
        Some("ns") => Ok(x / 1e6),
        Some(u) => Err(format!("`{u}` is not a time unit this reader knows (ms, sec, s, us, ns)")),
    }
}

// ---- the records --------------------------------------------------------------

/// One line of `profile_export.jsonl`, what is read of it.
#[derive(Deserialize)]
pub struct Record {
    metadata: Meta,
    #[serde(default)]
    metrics: Metrics,
    /// Present (and not `null`) when the request failed.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Meta {
    request_start_ns: Option<u64>,
    request_end_ns: Option<u64>,
    benchmark_phase: Option<String>,
    #[serde(default)]
    was_cancelled: bool,
}

#[derive(Default, Deserialize)]
struct Metrics {
    time_to_first_token: Option<Scalar>,
    inter_token_latency: Option<Scalar>,
    request_latency: Option<Scalar>,
    input_sequence_length: Option<Scalar>,
    output_sequence_length: Option<Scalar>,
    inter_chunk_latency: Option<List>,
}

#[derive(Deserialize)]
struct Scalar {
    #[serde(default)]
    value: Num,
    unit: Option<String>,
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    value: Nums,
    unit: Option<String>,
}

/// A number as AIPerf writes one: a number, `null` (non-finite), or a
/// numeric string.
#[derive(Default)]
struct Num(Option<f64>);

/// A list of [`Num`]s (a lone number is a list of one).
#[derive(Default)]
struct Nums(Vec<Option<f64>>);

struct NumVisitor;

impl Visitor<'_> for NumVisitor {
    type Value = Option<f64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<f64>, E> {
        Ok(Some(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<f64>, E> {
        Ok(Some(v as f64))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<f64>, E> {
        Ok(Some(v as f64))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<f64>, E> {
        num_str(v).map(Some).ok_or_else(|| E::custom(format!("`{v}` is not a number")))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<f64>, E> {
        Ok(None)
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        d.deserialize_any(NumVisitor).map(Num)
    }
}

struct NumsVisitor;

impl<'de> Visitor<'de> for NumsVisitor {
    type Value = Vec<Option<f64>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of numbers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(Num(x)) = seq.next_element()? {
            out.push(x);
        }
        Ok(out)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(vec![Some(v)])
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(vec![Some(v as f64)])
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(vec![Some(v as f64)])
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
}

impl<'de> Deserialize<'de> for Nums {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Nums, D::Error> {
        d.deserialize_any(NumsVisitor).map(Nums)
    }
}

/// A scalar metric of a record in milliseconds (`None` when absent or not finite).
fn scalar_ms(s: &Option<Scalar>, tag: &str) -> Result<Option<f64>, String> {
    let Some(s) = s else { return Ok(None) };
    let Some(x) = s.value.0.filter(|x| x.is_finite()) else { return Ok(None) };
    to_ms(s.unit.as_deref(), x).map(Some).map_err(|m| format!("metrics.{tag}.unit: {m}"))
}

/// A token count of a record (`None` when absent, not finite or negative;
/// an error past what a request can hold).
fn tokens(s: &Option<Scalar>, tag: &str) -> Result<Option<u32>, String> {
    let Some(x) = s.as_ref().and_then(|s| s.value.0).filter(|x| x.is_finite() && *x >= 0.0) else { return Ok(None) };
    if x > f64::from(u32::MAX) {
        return Err(format!("metrics.{tag}: {x} tokens is more than a request can hold (at most {})", u32::MAX));
    }
    Ok(Some(x as u32))
}

/// The profiling phase's records, folded as they are read.
#[derive(Default)]
pub struct Records {
    /// The first record's send, in ns: sends are kept relative to it.
    base_ns: Option<u64>,
    requests: Vec<MeasuredRequest>,
    /// Why the requests cannot be replayed, from the first record that says.
    unreplayable: Option<String>,
    samples: BTreeMap<MetricKind, Vec<f64>>,
    span_ns: Option<(u64, u64)>,
    completed: u64,
    failed: u64,
    warmup: u64,
    tokens_in: f64,
    tokens_out: f64,
}

impl Records {
    /// Adds record `n` (1-based, for messages).
    pub fn add(&mut self, r: Record, n: usize) -> Result<(), String> {
        if r.metadata.benchmark_phase.as_deref().is_some_and(|p| p != "profiling") {
            self.warmup += 1;
            return Ok(());
        }
        let m = &r.metrics;
        let ok = r.error.is_none() && !r.metadata.was_cancelled;
        let (start, end) = (r.metadata.request_start_ns, r.metadata.request_end_ns);
        if let Some(s) = start {
            let (lo, hi) = self.span_ns.get_or_insert((s, end.unwrap_or(s)));
            *lo = (*lo).min(s);
            *hi = (*hi).max(end.unwrap_or(s)).max(s);
        }
        if !ok {
            self.failed += 1;
        }
        let prompt = tokens(&m.input_sequence_length, "input_sequence_length")?;
        let output = tokens(&m.output_sequence_length, "output_sequence_length")?;
        let ttft_ms = scalar_ms(&m.time_to_first_token, "time_to_first_token")?;
        match (start, prompt, output) {
            (Some(s), Some(p), Some(o)) => {
                let base = *self.base_ns.get_or_insert(s);
                let sent_s = (i128::from(s) - i128::from(base)) as f64 / 1e9;
                let ok = ok && o > 0;
                self.requests.push(MeasuredRequest { sent_s, prompt_tokens: p, output_tokens: o, ok, ttft_ms });
            }
            _ if ok && self.unreplayable.is_none() => {
                self.unreplayable = Some(format!(
                    "record {n} has no request_start_ns, input_sequence_length or output_sequence_length"
                ));
            }
            _ => {}
        }
        if !ok {
            return Ok(());
        }
        self.completed += 1;
        self.tokens_in += f64::from(prompt.unwrap_or(0));
        self.tokens_out += f64::from(output.unwrap_or(0));
        if let Some(x) = ttft_ms {
            self.samples.entry(MetricKind::Ttft).or_default().push(x);
        }
        for (kind, s) in [(MetricKind::DecodeMean, &m.inter_token_latency), (MetricKind::E2e, &m.request_latency)] {
            if let Some(x) = scalar_ms(s, tag(kind))? {
                self.samples.entry(kind).or_default().push(x);
            }
        }
        if let Some(gaps) = &m.inter_chunk_latency {
            let scale =
                to_ms(gaps.unit.as_deref(), 1.0).map_err(|e| format!("metrics.inter_chunk_latency.unit: {e}"))?;
            let out = self.samples.entry(MetricKind::ChunkGap).or_default();
            out.extend(gaps.value.0.iter().flatten().filter(|x| x.is_finite()).map(|x| x * scale));
        }
        Ok(())
    }

    /// The level the records make.
    pub fn level(self) -> Result<LoadLevel, String> {
        let completed = self.completed;
        if completed + self.failed == 0 {
            let why = if self.warmup > 0 { format!(" ({} warm-up records only)", self.warmup) } else { String::new() };
            return Err(format!("the file has no profiling-phase records{why}"));
        }
        let metrics = self
            .samples
            .into_iter()
            .filter(|(_, xs)| !xs.is_empty())
            .map(|(kind, mut xs)| {
                xs.sort_by(f64::total_cmp);
                let (mean, std) = mean_std(&xs);
                let mut d = Dist { field: tag(kind).to_string(), count: Some(xs.len() as u64), ..Dist::default() };
                (d.mean, d.std, d.mean_recomputed) = (Some(mean), Some(std), true);
                for q in COMPARED {
                    if let Some(x) = percentile_sorted(&xs, f64::from(q) / 10.0) {
                        d.percentiles.insert(q, x);
                        d.recomputed.push(q);
                    }
                }
                (kind, d)
            })
            .collect();
        let duration = self.span_ns.map(|(lo, hi)| (hi - lo) as f64 / 1e9).filter(|d| *d > 0.0);
        let per_s = |x: f64| duration.map(|d| x / d);
        Ok(LoadLevel {
            label: "profiling records".into(),
            strategy: Strategy::Other("load not in the records: see profile_export_aiperf.json".into()),
            duration_s: duration,
            completed: Some(completed),
            failed: Some(self.failed),
            throughput: Throughput {
                requests_per_s: per_s(completed as f64),
                input_tokens_per_s: per_s(self.tokens_in),
                output_tokens_per_s: per_s(self.tokens_out),
                total_tokens_per_s: per_s(self.tokens_in + self.tokens_out),
            },
            metrics,
            requests: match self.unreplayable {
                Some(why) => Err(why),
                None => Ok(self.requests),
            },
            health: Vec::new(),
            spec_decode: None,
            not_compared: Vec::new(),
        })
    }
}

/// A records file read record by record (see the module's docs).
pub fn read_records<R: Read>(reader: R, file: &Path, kind: Kind) -> Result<Measured, ConfigError> {
    let clean = BufReader::with_capacity(64 << 10, QuoteBare::new(BufReader::new(reader)));
    let mut records = Records::default();
    let stream = serde_json::Deserializer::from_reader(clean).into_iter::<Record>();
    for (i, item) in stream.enumerate() {
        let record = item.map_err(|e| record_error(file, kind, i + 1, e))?;
        records.add(record, i + 1).map_err(|m| ConfigError::new(file, format!("record {}", i + 1), m))?;
    }
    finish(records, file)
}

/// Records already parsed as JSON values (a file whose objects do not
/// start with `metadata`).
pub fn from_values<'a>(docs: impl Iterator<Item = &'a Value>, file: &Path) -> Result<Measured, ConfigError> {
    let mut records = Records::default();
    for (i, doc) in docs.enumerate() {
        let where_ = format!("record {}", i + 1);
        if !is_record(doc) {
            let msg = "not an AIPerf record (metadata.request_start_ns and metrics): one file must come from one tool";
            return Err(ConfigError::new(file, where_, msg));
        }
        let record = Record::deserialize(doc)
            .map_err(|e| ConfigError::new(file, &where_, format!("not an AIPerf record: {e}")))?;
        records.add(record, i + 1).map_err(|m| ConfigError::new(file, &where_, m))?;
    }
    finish(records, file)
}

fn finish(records: Records, file: &Path) -> Result<Measured, ConfigError> {
    let level = records.level().map_err(|m| ConfigError::new(file, "", m))?;
    Ok(Measured { file: file.to_path_buf(), tool: Tool::Aiperf, levels: vec![level] })
}

/// A record that is not valid JSON, or not a record.
fn record_error(file: &Path, kind: Kind, n: usize, e: serde_json::Error) -> ConfigError {
    if e.is_data() {
        let msg = format!("not an AIPerf record: {}", super::json::strip_position(&e.to_string()));
        return ConfigError::new(file, format!("record {n}"), msg).at_line(Some(e.line()));
    }
    super::json::json_error(file, kind, e)
}

#[cfg(test)]
mod tests;
