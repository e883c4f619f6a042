//! Measured results from the load-testing tools people already run, turned
//! into one normalised model so `llmsim diff` can compare them with a
//! prediction and `llmsim run --trace-from` can replay their requests.
//!
//! Why a normalised model: the tools share metric *names* but not their
//! *meanings* (docs/bench-diff.md, "Why definitions, not names"). vLLM's `itl` is every gap
//! between streamed chunks, pooled; guidellm's `inter_token_latency_ms` is a
//! per-request mean decode step, weighted by tokens; guidellm's "TPOT"
//! includes the TTFT. Each parser maps a tool's fields onto a
//! [`MetricKind`] by definition, never by name, and records which field it
//! came from so the diff can print what was compared.
//!
//! Supported: `llmsim bench` JSON, `vllm bench serve --save-result` (one
//! object, the `--append-result` multi-object file, and the JSON array of
//! `vllm bench sweep`), SGLang `bench_serving` JSONL, guidellm
//! `benchmarks.json`, NVIDIA AIPerf's `profile_export_aiperf.json` and
//! `profile_export.jsonl`, genai-perf's `profile_export_genai_perf.json`,
//! llmperf's `*_summary.json`, and inference-perf's
//! `stage_N_lifecycle_metrics.json`.
//! Other tools' files are recognised and refused with a message naming the
//! tool.

pub mod aic;
pub mod aic_kernels;
pub mod aiperf;
pub mod guidellm;
pub mod inference_perf;
pub mod json;
pub mod llmperf;
pub mod table;
pub mod vllm;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use llmsim_core::time::SimTime;
use llmsim_scenario::config::ConfigError;
use llmsim_scenario::input::Kind;
use llmsim_scenario::trace::TraceRow;

/// The tool that wrote a measured file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Tool {
    Llmsim,
    Vllm,
    Sglang,
    Guidellm,
    Aiperf,
    GenaiPerf,
    Llmperf,
    InferencePerf,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Llmsim => "llmsim bench",
            Tool::Vllm => "vllm bench serve",
            Tool::Sglang => "sglang bench_serving",
            Tool::Guidellm => "guidellm",
            Tool::Aiperf => "NVIDIA AIPerf",
            Tool::GenaiPerf => "genai-perf",
            Tool::Llmperf => "llmperf",
            Tool::InferencePerf => "inference-perf",
        }
    }
}

/// What a latency distribution measures, whatever the tool calls it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MetricKind {
    /// First streamed token minus the request's send time.
    Ttft,
    /// Per request: (last token - first token) / (output tokens - 1).
    DecodeMean,
    /// Every gap between consecutive streamed chunks, pooled over requests.
    ChunkGap,
    /// Last token (or end of response) minus the send time.
    E2e,
}

impl MetricKind {
    /// The definition, as the diff prints it.
    pub fn definition(self) -> &'static str {
        match self {
            MetricKind::Ttft => "first token - request sent",
            MetricKind::DecodeMean => "per request (last token - first token) / (output tokens - 1)",
            MetricKind::ChunkGap => "every gap between consecutive streamed chunks, pooled",
            MetricKind::E2e => "last token - request sent",
        }
    }
}

/// A latency distribution in milliseconds. Percentile keys are tenths of a
/// percent (`500` = p50, `999` = p99.9), so no float is used as a map key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dist {
    /// The tool's own name for it (`itl`, `inter_token_latency_ms`).
    pub field: String,
    pub count: Option<u64>,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub percentiles: BTreeMap<u32, f64>,
    /// Weighted by tokens (guidellm), not one sample per request or gap.
    pub token_weighted: bool,
    /// Percentiles this parser computed from per-request arrays because the
    /// file's summary did not have them (tenths of a percent).
    pub recomputed: Vec<u32>,
    /// The mean, computed the same way.
    pub mean_recomputed: bool,
}

impl Dist {
    /// Percentile `tenths` (e.g. 900 = p90), if the file has it.
    pub fn percentile(&self, tenths: u32) -> Option<f64> {
        self.percentiles.get(&tenths).copied()
    }
}

/// How load was offered at one level.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// Open loop at `rate` req/s (`None`: as fast as possible).
    Open {
        rate: Option<f64>,
        burstiness: Option<f64>,
        max_concurrency: Option<u64>,
    },
    /// Closed loop with this many concurrent users.
    Closed {
        concurrency: u64,
    },
    Other(String),
}

/// Throughputs over the tool's own measurement window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Throughput {
    pub requests_per_s: Option<f64>,
    pub input_tokens_per_s: Option<f64>,
    pub output_tokens_per_s: Option<f64>,
    pub total_tokens_per_s: Option<f64>,
}

/// One measured request, for replay.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredRequest {
    /// When it was sent, in seconds on the tool's clock (arbitrary epoch).
    pub sent_s: f64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub ok: bool,
    /// Its TTFT in ms, where the reader keeps it per request (AIPerf's
    /// records; vLLM's arrays are read from the file's objects instead).
    pub ttft_ms: Option<f64>,
}

/// One load level: one run of vLLM/SGLang, one guidellm benchmark.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadLevel {
    pub label: String,
    pub strategy: Strategy,
    pub duration_s: Option<f64>,
    pub completed: Option<u64>,
    pub failed: Option<u64>,
    pub throughput: Throughput,
    pub metrics: BTreeMap<MetricKind, Dist>,
    /// Every request of the level, or why there are none.
    pub requests: Result<Vec<MeasuredRequest>, String>,
    /// Warnings the measuring side raised about itself (client or server
    /// lag): figures past that point may be inflated by the measurement.
    pub health: Vec<String>,
    /// Speculative decoding's figures, when the file has them (`vllm bench
    /// serve` reads the server's `spec_decode` counters around a run).
    pub spec_decode: Option<SpecDecode>,
    /// Figures the file has that the reader leaves out, each with why (the
    /// diff lists them under its definitions).
    pub not_compared: Vec<String>,
}

/// `spec_decode_acceptance_length` and `spec_decode_acceptance_rate` (in
/// percent) of a `vllm bench serve` result.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecDecode {
    pub acceptance_length: Option<f64>,
    pub acceptance_rate_pct: Option<f64>,
}

/// A parsed measured file.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub file: PathBuf,
    pub tool: Tool,
    pub levels: Vec<LoadLevel>,
}

impl Strategy {
    /// The level's label from its load (`rate 8`, `concurrency 32`), when
    /// it has a rate or users.
    pub fn label(&self) -> Option<String> {
        match self {
            Strategy::Open { rate: Some(r), .. } => Some(format!("rate {r}")),
            Strategy::Closed { concurrency } => Some(format!("concurrency {concurrency}")),
            _ => None,
        }
    }
}

impl Dist {
    /// Records percentile `p` (`"50"`, `"99.9"`) at `v * scale` when `p`
    /// names one and `v` is a finite number.
    pub fn set_percentile(&mut self, p: &str, v: &Value, scale: f64) {
        if let (Some(t), Some(x)) = (vllm::tenths_of(p), json::num(v).filter(|x| x.is_finite())) {
            self.percentiles.insert(t, x * scale);
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Open { rate: None, .. } => write!(f, "open loop, all at once"),
            Strategy::Open { rate: Some(r), burstiness, max_concurrency } => {
                write!(f, "open loop {} req/s", (r * 1000.0).round() / 1000.0)?;
                match burstiness {
                    Some(b) if b.is_infinite() => write!(f, ", constant gaps")?,
                    Some(b) if *b != 1.0 => write!(f, ", burstiness {b}")?,
                    _ => {}
                }
                if let Some(c) = max_concurrency {
                    write!(f, ", max concurrency {c}")?;
                }
                Ok(())
            }
            Strategy::Closed { concurrency } => write!(f, "closed loop, {concurrency} users"),
            Strategy::Other(s) => write!(f, "{s}"),
        }
    }
}

/// Reads and parses a measured file as it is read ([`llmsim_scenario::input`]).
pub fn load(file: &Path) -> Result<Measured, ConfigError> {
    Ok(load_docs(file)?.0)
}

/// [`load`], with the file's top-level objects (their keys, and their
/// per-request arrays as numbers) for readers that need more than the
/// levels.
pub fn load_docs(file: &Path) -> Result<(Measured, Vec<json::Doc>), ConfigError> {
    read(llmsim_scenario::input::open(Kind::Measured, file)?)
}

/// [`load_docs`] of a file already open. AIPerf's records are read record
/// by record into numbers, with no objects returned.
pub fn read(mut input: llmsim_scenario::input::Input) -> Result<(Measured, Vec<json::Doc>), ConfigError> {
    let (file, kind) = (input.file().to_path_buf(), input.kind());
    if aiperf::starts_records(input.peek(4096)?) {
        return Ok((aiperf::read_records(input, &file, kind)?, Vec::new()));
    }
    let docs = json::read_docs(input, &file, kind)?;
    Ok((from_docs(&docs, &file)?, docs))
}

/// Parses measured-file text; `file` names it in errors.
pub fn parse(text: &str, file: &Path) -> Result<Measured, ConfigError> {
    from_docs(&json::read_docs(text.as_bytes(), file, Kind::Measured)?, file)
}

/// The levels of a measured file's objects.
fn from_docs(docs: &[json::Doc], file: &Path) -> Result<Measured, ConfigError> {
    let first = sniff(&docs[0].head).map_err(|m| ConfigError::new(file, "", m))?;
    if first == Tool::Aiperf && aiperf::is_record(&docs[0].head) {
        return aiperf::from_values(docs.iter().map(|d| &d.head), file);
    }
    let mut levels = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let where_ = if docs.len() > 1 { format!("object {}", i + 1) } else { String::new() };
        let tool = sniff(&doc.head).map_err(|m| ConfigError::new(file, &where_, m))?;
        if tool != first && !(matches!(tool, Tool::Llmsim | Tool::Vllm) && matches!(first, Tool::Llmsim | Tool::Vllm)) {
            let msg =
                format!("a {} result after a {} result: one file must come from one tool", tool.name(), first.name());
            return Err(ConfigError::new(file, where_, msg));
        }
        match tool {
            Tool::Guidellm => levels.extend(guidellm::levels(&doc.head).map_err(|m| ConfigError::new(file, "", m))?),
            Tool::Llmperf => levels.push(llmperf::level(&doc.head)),
            Tool::InferencePerf => levels.push(inference_perf::stage_level(&doc.head)),
            Tool::GenaiPerf => {
                levels.push(aiperf::genai_perf_level(&doc.head).map_err(|m| ConfigError::new(file, &where_, m))?)
            }
            Tool::Aiperf if aiperf::is_summary(&doc.head) => {
                levels.push(aiperf::summary_level(&doc.head).map_err(|m| ConfigError::new(file, &where_, m))?)
            }
            Tool::Aiperf => {
                let msg = "an AIPerf record beside a summary: one file must hold one of AIPerf's files";
                return Err(ConfigError::new(file, where_, msg));
            }
            _ => levels.push(vllm::level(doc, tool, i)),
        }
    }
    if levels.is_empty() {
        return Err(ConfigError::new(file, "benchmarks", "the file has no benchmarks"));
    }
    Ok(Measured { file: file.to_path_buf(), tool: first, levels })
}

/// The formats [`sniff`] recognises, for its errors.
const SUPPORTED: &str = "supported: llmsim bench JSON, vllm bench serve --save-result (also --append-result), \
                         sglang bench_serving JSONL, guidellm benchmarks.json, AIPerf profile_export_aiperf.json \
                         and profile_export.jsonl, genai-perf profile_export_genai_perf.json, llmperf *_summary.json, \
                         inference-perf stage_N_lifecycle_metrics.json";

/// An object whose tool [`sniff`] does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnknownTool {
    #[error("expected a JSON object (a benchmark result)")]
    NotAnObject,
    /// Recognised as another tool's output, named.
    #[error("this file comes from {0}, which is not supported here ({SUPPORTED})")]
    Unsupported(&'static str),
    #[error("not a benchmark result this tool knows ({SUPPORTED})")]
    Unknown,
    /// AIPerf's summary over a sweep's runs or a run's trials.
    #[error(
        "this is an NVIDIA AIPerf aggregate (aggregation_type `{0}`), a summary of several runs: give one run's \
         profile_export_aiperf.json or profile_export.jsonl (a sweep writes one directory a value, rate_* or \
         concurrency_*)"
    )]
    AiperfAggregate(String),
    /// genai-perf's `profile_export.json`.
    #[error(
        "this is perf_analyzer's raw export (genai-perf's profile_export.json), which counts no tokens: give the \
         profile_export_genai_perf.json written beside it ({SUPPORTED})"
    )]
    PerfAnalyzerRaw,
}

/// A `--level` (or `--trace-level`) that picks no level of a file: out of
/// range, or missing where the file has several. `levels` is the list of
/// [`Measured::level_list`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LevelError {
    #[error("{flag} {n} is out of range: {} has {count} load levels:\n{levels}", .file.display())]
    OutOfRange { flag: String, n: usize, file: PathBuf, count: usize, levels: String },
    #[error("{} has {count} load levels; choose one with {flag} N:\n{levels}", .file.display())]
    Choose { flag: String, file: PathBuf, count: usize, levels: String },
}

/// Why a level's requests cannot be replayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The file has no per-request data; why (from [`LoadLevel::requests`]).
    #[error("{0}")]
    NoRequests(String),
    #[error("no request succeeded, so there is nothing to replay")]
    NoneSucceeded,
}

/// Which tool wrote this object, by its keys (docs/bench-diff.md, "How a file's tool is recognised").
pub fn sniff(doc: &Value) -> Result<Tool, UnknownTool> {
    let has = |k: &str| doc.get(k).is_some();
    if !doc.is_object() {
        return Err(UnknownTool::NotAnObject);
    }
    if has("llmsim_version") {
        return Ok(Tool::Llmsim);
    }
    if has("benchmarks") {
        return Ok(Tool::Guidellm);
    }
    if let Some(kind) = doc.get("aggregation_type") {
        return Err(UnknownTool::AiperfAggregate(kind.as_str().unwrap_or("?").to_string()));
    }
    if aiperf::is_summary(doc) || aiperf::is_record(doc) {
        return Ok(Tool::Aiperf);
    }
    if doc.pointer("/time_to_first_token/unit").is_some() && has("input_config") {
        return Ok(Tool::GenaiPerf);
    }
    if llmperf::is_summary(doc) {
        return Ok(Tool::Llmperf);
    }
    if inference_perf::is_stage_file(doc) {
        return Ok(Tool::InferencePerf);
    }
    if has("request_throughput") && has("backend") {
        if has("burstiness") || has("model_id") {
            return Ok(Tool::Vllm);
        }
        if has("mean_e2e_latency_ms") || has("server_info") || has("mean_ttft_ms") {
            return Ok(Tool::Sglang);
        }
    }
    let other = if has("end_to_end_latency_s") && has("ttft_s") && has("number_output_tokens") {
        Some("llmperf's individual_responses.json (its *_summary.json is read)")
    } else if has("start_time") && has("end_time") && has("info") && has("request") {
        Some(
            "inference-perf's per_request_lifecycle_metrics.json, which says no stage (each stage_N_lifecycle_metrics.json is read)",
        )
    } else if has("load_summary") && has("successes") {
        Some("inference-perf's summary of every stage (each stage_N_lifecycle_metrics.json is read)")
    } else if has("experiments") {
        return Err(UnknownTool::PerfAnalyzerRaw);
    } else if has("capacity") && has("ttft_ms") && has("itl_ms") {
        Some("llmsim run (a prediction, not a measurement)")
    } else {
        None
    };
    Err(match other {
        Some(tool) => UnknownTool::Unsupported(tool),
        None => UnknownTool::Unknown,
    })
}

impl Measured {
    /// Levels as `1. label (strategy)` lines, for messages.
    pub fn level_list(&self) -> String {
        self.levels.iter().enumerate().map(|(i, l)| format!("  {}. {} ({})\n", i + 1, l.label, l.strategy)).collect()
    }

    /// The level chosen by a 1-based `--level`, or the only one.
    pub fn pick(&self, level: Option<usize>, flag: &str) -> Result<&LoadLevel, LevelError> {
        let (flag, file, count) = (flag.to_string(), self.file.clone(), self.levels.len());
        let levels = self.level_list().trim_end().to_string();
        match level {
            Some(n) if (1..=self.levels.len()).contains(&n) => Ok(&self.levels[n - 1]),
            Some(n) => Err(LevelError::OutOfRange { flag, n, file, count, levels }),
            None if self.levels.len() == 1 => Ok(&self.levels[0]),
            None => Err(LevelError::Choose { flag, file, count, levels }),
        }
    }
}

impl LoadLevel {
    /// The successful requests as trace rows: arrivals relative to the first
    /// send, in send order. Failed requests are left out (they have no
    /// output length to replay); the count of those is returned too.
    pub fn trace_rows(&self) -> Result<(Vec<TraceRow>, usize), ReplayError> {
        let requests = self.requests.as_ref().map_err(|why| ReplayError::NoRequests(why.clone()))?;
        let mut ok: Vec<&MeasuredRequest> = requests.iter().filter(|r| r.ok && r.output_tokens > 0).collect();
        if ok.is_empty() {
            return Err(ReplayError::NoneSucceeded);
        }
        ok.sort_by(|a, b| a.sent_s.total_cmp(&b.sent_s));
        let t0 = ok[0].sent_s;
        let rows = ok
            .iter()
            .map(|r| TraceRow {
                arrival: SimTime::from_secs_f64(r.sent_s - t0),
                prompt: r.prompt_tokens.max(1),
                output: r.output_tokens,
            })
            .collect();
        Ok((rows, requests.len() - ok.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_tools_are_named_when_refused() {
        let aiperf = serde_json::json!({"schema_version": "1.4", "aiperf_version": "0.13.0"});
        assert_eq!(sniff(&aiperf), Ok(Tool::Aiperf));
        let sweep = serde_json::json!({"aggregation_type": "sweep", "per_combination_metrics": []});
        let e = sniff(&sweep).unwrap_err().to_string();
        assert!(e.contains("AIPerf aggregate") && e.contains("sweep") && e.contains("rate_*"), "{e}");
        let genai = serde_json::json!({"time_to_first_token": {"unit": "ms"}, "input_config": {}});
        assert_eq!(sniff(&genai), Ok(Tool::GenaiPerf));
        let raw = serde_json::json!({"experiments": [], "version": "x"});
        assert!(sniff(&raw).unwrap_err().to_string().contains("profile_export_genai_perf.json"));
        let run = serde_json::json!({"capacity": {}, "ttft_ms": {}, "itl_ms": {}});
        assert!(sniff(&run).unwrap_err().to_string().contains("prediction"));
        assert!(sniff(&serde_json::json!({"x": 1})).unwrap_err().to_string().contains("supported:"));
    }

    #[test]
    fn trace_rows_are_relative_sorted_and_skip_failures() {
        let req =
            |sent_s, output_tokens, ok| MeasuredRequest { sent_s, prompt_tokens: 5, output_tokens, ok, ttft_ms: None };
        let level = LoadLevel {
            label: "x".into(),
            strategy: Strategy::Other("x".into()),
            duration_s: None,
            completed: None,
            failed: None,
            throughput: Throughput::default(),
            metrics: BTreeMap::new(),
            requests: Ok(vec![req(10.5, 3, true), req(10.25, 2, true), req(10.0, 0, false)]),
            health: vec![],
            spec_decode: None,
            not_compared: Vec::new(),
        };
        let (rows, skipped) = level.trace_rows().unwrap();
        assert_eq!(skipped, 1);
        assert_eq!(rows[0], TraceRow { arrival: SimTime::ZERO, prompt: 5, output: 2 });
        assert_eq!(rows[1].arrival, SimTime::from_nanos(250_000_000));
    }
}
