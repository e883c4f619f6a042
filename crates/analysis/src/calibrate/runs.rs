//! Measured runs, whatever file they came in, as one thing a fit can use:
//! a scenario to simulate (at any candidate values of the fitted keys) and
//! the figures measured, by sweep metric name.
//!
//! Known shapes, sniffed:
//! * a **per-request JSON** that `llmsim diff` reads (`llmsim bench`,
//!   `vllm bench serve --save-detailed`, guidellm without sampling): each
//!   load level is a run, its successful requests replayed exactly as
//!   `llmsim run --trace-from` does (send times relative to the first, the
//!   token counts measured);
//! * a **trace CSV with measured latencies** (`arrival_s, prompt_tokens,
//!   output_tokens` and `ttft_ms` and/or `e2e_ms`, optionally `tpot_ms` and
//!   `status`: the shape of `llmsim serve --record` and `llmsim run
//!   --requests-csv`): the rows replayed as written;
//! * an **inference-perf run directory**: each load stage is a run (see
//!   [`crate::measured::inference_perf`]): its `G x U` fixed prompts are
//!   `shared_prefix: {groups: G x U, tokens: system_prompt_len +
//!   question_len}` and `prompt_tokens` is the rest of the client's mean
//!   prompt length (the README's inference-perf mapping); turning prefix
//!   caching on is the scenario's choice;
//! * a **measured table** CSV (see [`crate::measured::table`]): each row
//!   is a run, its settings applied to the scenario; a row with `excluded`
//!   text is a run the engine cannot represent, kept as an [`Excluded`]
//!   (listed with its reason and figures, never simulated).
//!
//! A run is **saturated** when it cannot tell what the engine costs, only
//! that it fell behind: any request failed, or the queue was still growing
//! at the end (per-request data: the median TTFT of the last fifth of the
//! requests, by send time, is over twice that of the second fifth
//! and over 100 ms above it; inference-perf: completions more than 10%
//! behind sends; a table says so in its `failed` or `saturated` column).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use llmsim_scenario::yaml::Value;

use super::keys::FitKey;
use crate::measured::inference_perf::{self, InferencePerfRun, LoadType};
use crate::measured::{LoadLevel, MetricKind, Tool, aic, table};
use crate::sweep::metric::{Family, Metric, Stat};
use llmsim_planner::metrics::percentile::percentile_sorted;
use llmsim_scenario::config::{Arrivals, ConfigError, Override, Scenario, Trace};
use llmsim_scenario::input::{self, Kind};
use llmsim_scenario::trace::TraceRow;

/// The measured-file shapes, for messages.
pub const KNOWN_SHAPES: &str = "known shapes: a per-request JSON (llmsim bench, vllm bench serve --save-detailed, \
     guidellm benchmarks.json without sampling); a trace CSV with measured latencies (arrival_s, prompt_tokens, \
     output_tokens and ttft_ms and/or e2e_ms, as llmsim serve --record and llmsim run --requests-csv write); a \
     measured table CSV (columns named by scenario keys and sweep metrics, as a sweep CSV); an inference-perf run \
     directory (config.yaml and stage_N_lifecycle_metrics.json)";

/// Which kind of input a run came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InputKind {
    PerRequest(Tool),
    TraceCsv,
    InferencePerf,
    Table,
    Aic,
}

impl InputKind {
    pub fn name(self) -> &'static str {
        match self {
            InputKind::PerRequest(t) => t.name(),
            InputKind::TraceCsv => "trace CSV",
            InputKind::InferencePerf => "inference-perf",
            InputKind::Table => "measured table",
            InputKind::Aic => "AIConfigurator silicon CSV",
        }
    }
}

/// What the engine is given for one run.
#[derive(Clone, Debug)]
pub struct Base {
    /// The scenario file (relative paths, error messages).
    pub file: PathBuf,
    /// The run's effective scenario as YAML (hardware and model inline, so
    /// building a candidate reads no file).
    pub value: Value,
    /// Replayed instead of the scenario's workload.
    pub trace: Option<Arc<Vec<TraceRow>>>,
    /// `value`, validated: what reports read (a trace run's workload is
    /// the placeholder the trace replaces).
    pub validated: Arc<Scenario>,
    /// Predicted from its steady state when it is a long stationary stage
    /// ([`super::steady`]), else simulated whole.
    pub steady: bool,
}

/// One measured run.
#[derive(Clone, Debug)]
pub struct Run {
    pub name: String,
    /// Runs of one group are left out together in leave-one-out.
    pub group: String,
    /// Where its figures were read.
    pub source: String,
    pub kind: InputKind,
    pub base: Base,
    /// Measured figures (milliseconds, per second), by sweep metric.
    pub measured: BTreeMap<Metric, f64>,
    /// Why it is left out of fits by default.
    pub not_fitted: Option<NotFitted>,
    /// What a reader should know about how it is modelled.
    pub notes: Vec<String>,
    /// The model it served (the scenario's model name): runs of one model
    /// are left out together by `--leave-out model`.
    pub model: String,
    /// The measured source it came from (a file, or a file and the part of
    /// it one source measured): `--leave-out source` groups by it.
    pub origin: String,
}

impl Run {
    /// Whether it is held out of the fit by kind ([`NotFitted::HeldOut`]):
    /// predicted to check that the fit transfers, never fitted.
    pub fn is_held_out(&self) -> bool {
        self.not_fitted == Some(NotFitted::HeldOut)
    }

    /// Whether it runs prefill and decode pools ([`NotFitted::Disaggregated`]):
    /// predicted, fitted by no stage.
    pub fn is_disaggregated(&self) -> bool {
        self.not_fitted == Some(NotFitted::Disaggregated)
    }

    /// Why it is not fitted, as reports print it ("" when it is).
    pub fn why_not_fitted(&self) -> String {
        self.not_fitted.as_ref().map(NotFitted::to_string).unwrap_or_default()
    }
}

/// Why a run is predicted but left out of fits by default.
#[derive(Clone, Debug, PartialEq)]
pub enum NotFitted {
    /// It cannot tell what the engine costs: requests failed, its queue
    /// grew, or its measured file marks it (the text says which).
    Saturated(String),
    /// A kind of model or deployment the suites hold out ([`HELD_OUT`]).
    HeldOut,
    /// Its measured cycle needs an implausible prefill: its prompts must
    /// have hit a prefix cache (`implausible_prefill`).
    CachedPrompts(String),
    /// Its id names another concurrency than it ran (`concurrency_unclear`).
    UnclearClient(String),
    /// From a source some of whose runs are set aside for how their
    /// client ran: its client is not known either.
    SameSource(String),
    /// Prefill and decode pools ([`DISAGGREGATED`]): predicted at the
    /// shipped profile's values, fitted by no stage.
    Disaggregated,
}

impl std::fmt::Display for NotFitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotFitted::HeldOut => f.write_str(HELD_OUT),
            NotFitted::Disaggregated => f.write_str(DISAGGREGATED),
            NotFitted::Saturated(why)
            | NotFitted::CachedPrompts(why)
            | NotFitted::UnclearClient(why)
            | NotFitted::SameSource(why) => f.write_str(why),
        }
    }
}

/// A measured run the engine cannot represent (a measured table's
/// `excluded` row): listed with its reason wherever runs are reported,
/// never simulated nor fitted.
#[derive(Clone, Debug, PartialEq)]
pub struct Excluded {
    pub name: String,
    pub source: String,
    pub reason: String,
    /// Measured figures, by sweep metric.
    pub measured: BTreeMap<Metric, f64>,
}

/// Every run of one measured input, and the runs it excludes.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    pub runs: Vec<Run>,
    pub excluded: Vec<Excluded>,
}

impl Loaded {
    fn runs(runs: Vec<Run>) -> Loaded {
        Loaded { runs, excluded: Vec::new() }
    }

    /// Appends another input's runs and exclusions.
    pub fn extend(&mut self, other: Loaded) {
        self.runs.extend(other.runs);
        self.excluded.extend(other.excluded);
    }
}

/// How runs are built.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Simulate at most this many seconds of an inference-perf stage or a
    /// table row that sets `workload.duration_s` (a steady-state sample).
    pub sample_s: Option<f64>,
    /// Rows of an AIConfigurator silicon CSV to keep.
    pub aic_filters: Vec<aic::Filter>,
    /// Requests of an AIConfigurator run per user (0: [`aic::DEFAULT_ROUNDS`]).
    pub aic_rounds: u32,
    /// Without `sample_s`: predict a long stationary stage from a window
    /// of it ([`super::steady`]) instead of simulating it whole.
    pub steady: bool,
}

/// The scenario a run is simulated on, with `--set` overrides applied.
pub struct ScenarioSource {
    pub file: PathBuf,
    pub value: Value,
}

impl ScenarioSource {
    /// Reads the scenario and applies overrides; validates it once so its
    /// own mistakes are reported before any measured file is read.
    pub fn load(file: &Path, overrides: &[Override]) -> Result<ScenarioSource, ConfigError> {
        llmsim_scenario::config::load_scenario_with(file, overrides)?;
        let text = input::read_text(Kind::Scenario, file)?;
        let mut value: Value = llmsim_scenario::config::parse_str(&text, file)?;
        for o in overrides {
            o.apply(&mut value, file)?;
        }
        Ok(ScenarioSource { file: file.to_path_buf(), value })
    }

    /// The run's base: `settings` applied, then validated; a trace replaces
    /// the workload.
    fn base(&self, settings: &[Override], trace: Option<Vec<TraceRow>>, label: &str) -> Result<Base, ConfigError> {
        let mut value = self.value.clone();
        for o in settings {
            o.apply(&mut value, &self.file).map_err(|e| in_run(e, label))?;
        }
        if trace.is_some() {
            set_placeholder_workload(&mut value);
        }
        let scenario = build(&value, &self.file).map_err(|e| in_run(e, label))?;
        let mut effective: Value = llmsim_scenario::yaml::from_str(&llmsim_scenario::config::effective_yaml(&scenario))
            .map_err(|e| ConfigError::new(&self.file, "", format!("cannot restate the scenario: {e}")))?;
        if trace.is_some() {
            set_placeholder_workload(&mut effective);
        }
        let validated = Arc::new(scenario);
        Ok(Base { file: self.file.clone(), value: effective, trace: trace.map(Arc::new), validated, steady: false })
    }
}

fn in_run(mut e: ConfigError, label: &str) -> ConfigError {
    e.message.push_str(&format!(" (for measured run {label})"));
    e
}

/// A valid workload that a trace replaces.
fn set_placeholder_workload(value: &mut Value) {
    let placeholder: Value = llmsim_scenario::yaml::from_str(
        "{arrivals: {constant: {rate: 1}}, requests: 1, prompt_tokens: 1, output_tokens: 1}",
    )
    .unwrap_or(Value::Null);
    if let Value::Mapping(m) = value {
        let seed = m.get("workload").and_then(|w| w.get("seed")).cloned();
        let mut w = placeholder;
        if let (Some(seed), Value::Mapping(wm)) = (seed, &mut w) {
            wm.insert(Value::String("seed".into()), seed);
        }
        m.insert(Value::String("workload".into()), w);
    }
}

fn build(value: &Value, file: &Path) -> Result<Scenario, ConfigError> {
    let raw = llmsim_scenario::config::parse_value(value.clone(), file, "")?;
    llmsim_scenario::config::validate::scenario(raw, file)
}

impl Base {
    /// `value` with each fitted key at its value.
    fn value_at(&self, keys: &[FitKey], x: &[f64]) -> Result<Value, ConfigError> {
        let mut value = self.value.clone();
        for (k, v) in keys.iter().zip(x) {
            let number = if k.integer { Value::Number((v.round() as i64).into()) } else { Value::Number((*v).into()) };
            let path = k.key.split('.').map(str::to_string).collect();
            Override { path, value: number }.apply(&mut value, &self.file)?;
        }
        Ok(value)
    }

    /// This base with each fitted key's value written into its scenario:
    /// what a later stage of a fit starts from.
    pub fn with_values(&self, keys: &[FitKey], x: &[f64]) -> Result<Base, ConfigError> {
        Ok(Base { value: self.value_at(keys, x)?, ..self.clone() })
    }

    /// The scenario with each fitted key at its value.
    pub fn scenario(&self, keys: &[FitKey], x: &[f64]) -> Result<Scenario, ConfigError> {
        let value = self.value_at(keys, x)?;
        let mut s = build(&value, &self.file)?;
        if let Some(rows) = &self.trace {
            let w = &mut s.workload;
            w.arrivals = Arrivals::Trace(Trace {
                path: "(measured requests)".into(),
                rows: Arc::clone(rows),
                content: None,
                classes: None,
            });
            w.requests = None;
            w.duration_s = None;
            w.prompt_tokens = None;
            w.output_tokens = None;
        }
        Ok(s)
    }

    /// The value a key has in this run's scenario (the fit's start).
    pub fn value_of(&self, key: &str) -> Option<f64> {
        let mut node = &self.value;
        for seg in key.split('.') {
            node = node.get(seg)?;
        }
        node.as_f64()
    }
}

/// Loads every run of one measured input, and the runs it excludes; each
/// run's model is its scenario's model name.
pub fn load(src: &ScenarioSource, measured: &Path, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    let mut loaded = load_any(src, measured, opts)?;
    for r in &mut loaded.runs {
        r.base.steady = opts.steady && opts.sample_s.is_none() && r.base.trace.is_none();
        if r.model.is_empty() {
            r.model =
                r.base.value.get("model").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").into();
        }
    }
    Ok(loaded)
}

fn load_any(src: &ScenarioSource, measured: &Path, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    if measured.is_dir() {
        if inference_perf::is_run_dir(measured) {
            return from_inference_perf(src, &inference_perf::load(measured)?, opts).map(Loaded::runs);
        }
        return Err(ConfigError::new(measured, "", format!("a directory of an unknown shape; {KNOWN_SHAPES}")));
    }
    let mut reader = input::open(Kind::Measured, measured)?;
    if matches!(reader.first_non_space()?, Some(b'{' | b'[')) {
        return from_json(src, reader, measured).map(Loaded::runs);
    }
    let first = first_line(reader)?;
    let headers: Vec<&str> = first.split(',').map(str::trim).collect();
    if headers.contains(&"arrival_s") {
        return from_trace_csv(src, measured).map(Loaded::runs);
    }
    let text = input::read_text(Kind::Measured, measured)?;
    if aic::looks_like_aic(&headers) {
        return from_aic(src, &aic::parse(&text, measured, &opts.aic_filters)?, opts);
    }
    if table::looks_like_table(&headers) {
        return from_table(src, &table::parse(&text, measured)?, opts);
    }
    Err(ConfigError::new(measured, "", format!("a file of an unknown shape; {KNOWN_SHAPES}")))
}

/// The first line that is not a `#` comment (a CSV's header).
fn first_line(mut input: input::Input) -> Result<String, input::InputError> {
    let mut line = String::new();
    loop {
        line.clear();
        let n = input.read_line(&mut line).map_err(|e| input.error(&e))?;
        if n == 0 || !line.trim_start().starts_with('#') {
            return Ok(line.trim_end().to_string());
        }
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

// ---- per-request JSON -------------------------------------------------------

fn from_json(src: &ScenarioSource, input: input::Input, file: &Path) -> Result<Vec<Run>, ConfigError> {
    let (measured, docs) = crate::measured::read(input)?;
    let several = measured.levels.len() > 1;
    let mut runs = Vec::new();
    for (i, level) in measured.levels.iter().enumerate() {
        let name =
            if several { format!("{} level {} ({})", file_name(file), i + 1, level.label) } else { file_name(file) };
        let (rows, skipped) = level.trace_rows().map_err(|m| {
            ConfigError::new(file, "", format!("cannot replay {}: {m} (calibrate replays every request)", level.label))
        })?;
        let base = src.base(&[], Some(rows), &name)?;
        let mut notes = Vec::new();
        let measured_figures = level_figures(level, &mut notes);
        let failed = level.failed.unwrap_or(0).max(skipped as u64);
        let trend = match measured.tool {
            Tool::Guidellm => None,
            Tool::Aiperf => requests_trend(level),
            _ => docs.get(i).and_then(json_trend),
        };
        let saturated = match failed {
            0 => trend,
            n => Some(format!("{n} requests failed")),
        }
        .map(NotFitted::Saturated);
        runs.push(Run {
            name,
            group: format!("{}#{}", file.display(), i + 1),
            source: if several { format!("{} level {}", file.display(), i + 1) } else { file.display().to_string() },
            kind: InputKind::PerRequest(measured.tool),
            base,
            measured: measured_figures,
            not_fitted: saturated,
            notes,
            model: String::new(),
            origin: file.display().to_string(),
        });
    }
    Ok(runs)
}

/// A level's figures by sweep metric: like with like, as `llmsim diff`.
fn level_figures(level: &LoadLevel, notes: &mut Vec<String>) -> BTreeMap<Metric, f64> {
    let mut out = BTreeMap::new();
    let kinds = [
        (MetricKind::Ttft, Family::Ttft),
        (MetricKind::DecodeMean, Family::Tpot),
        (MetricKind::ChunkGap, Family::Itl),
        (MetricKind::E2e, Family::E2e),
    ];
    for (kind, family) in kinds {
        let Some(d) = level.metrics.get(&kind) else { continue };
        if d.token_weighted {
            notes.push(format!("`{}` is token-weighted: not used", d.field));
            continue;
        }
        let stats = [(Stat::Mean, d.mean), (Stat::P50, d.percentile(500)), (Stat::P90, d.percentile(900))];
        for (stat, v) in stats.into_iter().chain([(Stat::P99, d.percentile(990))]) {
            if let Some(v) = v.filter(|v| v.is_finite() && *v > 0.0) {
                out.insert(Metric::Latency(family, stat), v);
            }
        }
    }
    let t = &level.throughput;
    for (m, v) in [
        (Metric::RequestsPerS, t.requests_per_s),
        (Metric::InputTokensPerS, t.input_tokens_per_s),
        (Metric::OutputTokensPerS, t.output_tokens_per_s),
    ] {
        if let Some(v) = v.filter(|v| v.is_finite() && *v > 0.0) {
            out.insert(m, v);
        }
    }
    out
}

/// The TTFT trend of a vLLM-schema object with per-request arrays.
fn json_trend(doc: &crate::measured::json::Doc) -> Option<String> {
    let a = &doc.arrays;
    let (sent, ttft) = (a.start_times.as_ref()?, a.ttfts.as_ref()?);
    if sent.len() != ttft.len() {
        return None;
    }
    let errors = a.errors.flags();
    let ok = |i: usize| errors.and_then(|e| e.get(i)).is_none_or(|ok| *ok);
    let points = (0..sent.len()).filter(|&i| ok(i)).map(|i| (sent[i], ttft[i] * 1e3)).collect();
    growing_queue(points)
}

/// The TTFT trend of a level whose requests carry their TTFT (AIPerf's records).
fn requests_trend(level: &LoadLevel) -> Option<String> {
    let requests = level.requests.as_ref().ok()?;
    growing_queue(requests.iter().filter(|r| r.ok).filter_map(|r| Some((r.sent_s, r.ttft_ms?))).collect())
}

/// Whether TTFT grew through the run: `points` are (send time, TTFT ms).
pub fn growing_queue(mut points: Vec<(f64, f64)>) -> Option<String> {
    points.retain(|(s, t)| s.is_finite() && t.is_finite());
    if points.len() < 10 {
        return None;
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = points.len();
    let median = |k: usize| {
        let mut xs: Vec<f64> = points[k * n / 5..(k + 1) * n / 5].iter().map(|p| p.1).collect();
        xs.sort_by(f64::total_cmp);
        percentile_sorted(&xs, 50.0).unwrap_or(0.0)
    };
    let (second, last) = (median(1), median(4));
    (last > 2.0 * second && last - second > 100.0).then(|| {
        format!(
            "the queue was still growing: the median TTFT rose from {second:.0} ms (second fifth of the requests) \
             to {last:.0} ms (last fifth)"
        )
    })
}

// ---- trace CSV with measured latencies ---------------------------------------

/// Per-request columns a measured trace may carry.
const LATENCY_COLUMNS: [&str; 3] = ["ttft_ms", "e2e_ms", "tpot_ms"];

/// A trace CSV with measured latencies, read twice as a stream: once as a
/// trace, once for the latency columns.
fn from_trace_csv(src: &ScenarioSource, file: &Path) -> Result<Vec<Run>, ConfigError> {
    let (all, _) = llmsim_scenario::trace::read_input(input::open(Kind::Measured, file)?, None)?;
    let second = input::open(Kind::Measured, file)?;
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(second);
    let headers = reader.headers().map_err(|e| ConfigError::new(file, "line 1", e.to_string()))?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    let [ttft_col, e2e_col, tpot_col] = LATENCY_COLUMNS.map(col);
    if ttft_col.is_none() && e2e_col.is_none() {
        return Err(ConfigError::new(
            file,
            "line 1",
            "a trace without measured latencies (no ttft_ms or e2e_ms column): there is nothing to fit against; \
             replay it with `llmsim run --trace-from`, or add the measured columns",
        ));
    }
    let status_col = col("status");
    let mut rows = Vec::new();
    let mut samples: [Vec<f64>; 3] = Default::default();
    let mut trend = Vec::new();
    let (mut failed, mut end_s, mut out_tokens, mut in_tokens) = (0u64, 0.0f64, 0u64, 0u64);
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| ConfigError::new(file, format!("row {}", i + 2), e.to_string()))?;
        let line = record.position().map_or(i + 2, |p| p.line() as usize);
        let cell = |c: Option<usize>| c.and_then(|c| record.get(c)).unwrap_or("");
        let number = |c: Option<usize>, name: &str| -> Result<Option<f64>, ConfigError> {
            let v = cell(c);
            if v.is_empty() {
                return Ok(None);
            }
            v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0).map(Some).ok_or_else(|| {
                ConfigError::new(file, format!("line {line}, column {name}"), format!("`{v}` is not a number of ms"))
            })
        };
        let status = cell(status_col);
        let ok_status = matches!(status, "" | "finished" | "ok" | "success");
        let (ttft, e2e) = (number(ttft_col, "ttft_ms")?, number(e2e_col, "e2e_ms")?);
        let row = all[i];
        if !ok_status || (ttft_col.is_some() && ttft.is_none()) || (e2e_col.is_some() && e2e.is_none()) {
            failed += 1;
            continue;
        }
        let tpot = match number(tpot_col, "tpot_ms")? {
            Some(t) => Some(t),
            None if tpot_col.is_none() && row.output > 1 => {
                ttft.zip(e2e).map(|(t, e)| (e - t) / f64::from(row.output - 1))
            }
            None => None,
        };
        for (slot, v) in samples.iter_mut().zip([ttft, e2e, tpot]) {
            slot.extend(v);
        }
        if let Some(t) = ttft {
            trend.push((row.arrival.as_secs_f64(), t));
        }
        if let Some(e) = e2e {
            end_s = end_s.max(row.arrival.as_secs_f64() + e / 1e3);
        }
        out_tokens += u64::from(row.output);
        in_tokens += u64::from(row.prompt);
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(ConfigError::new(file, "", "no request succeeded, so there is nothing to fit against"));
    }
    let mut measured = BTreeMap::new();
    for (family, xs) in [Family::Ttft, Family::E2e, Family::Tpot].into_iter().zip(samples.iter_mut()) {
        summarise(family, xs, &mut measured);
    }
    let first_s = rows[0].arrival.as_secs_f64();
    if e2e_col.is_some() && end_s > first_s {
        let span = end_s - first_s;
        measured.insert(Metric::RequestsPerS, rows.len() as f64 / span);
        measured.insert(Metric::InputTokensPerS, in_tokens as f64 / span);
        measured.insert(Metric::OutputTokensPerS, out_tokens as f64 / span);
    }
    let name = file_name(file);
    let base = src.base(&[], Some(rows), &name)?;
    let saturated = if failed > 0 { Some(format!("{failed} requests failed")) } else { growing_queue(trend) }
        .map(NotFitted::Saturated);
    Ok(vec![Run {
        name,
        group: file.display().to_string(),
        source: file.display().to_string(),
        kind: InputKind::TraceCsv,
        base,
        measured,
        not_fitted: saturated,
        notes: Vec::new(),
        model: String::new(),
        origin: file.display().to_string(),
    }])
}

/// Mean, p50, p90, p99 and max of per-request samples, as vLLM computes them.
fn summarise(family: Family, xs: &mut [f64], out: &mut BTreeMap<Metric, f64>) {
    if xs.is_empty() {
        return;
    }
    xs.sort_by(f64::total_cmp);
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let stats = [
        (Stat::Mean, Some(mean)),
        (Stat::P50, percentile_sorted(xs, 50.0)),
        (Stat::P90, percentile_sorted(xs, 90.0)),
        (Stat::P99, percentile_sorted(xs, 99.0)),
        (Stat::Max, xs.last().copied()),
    ];
    for (stat, v) in stats {
        if let Some(v) = v.filter(|v| *v > 0.0) {
            out.insert(Metric::Latency(family, stat), v);
        }
    }
}

// ---- inference-perf ----------------------------------------------------------

fn from_inference_perf(
    src: &ScenarioSource,
    ip: &InferencePerfRun,
    opts: &LoadOptions,
) -> Result<Vec<Run>, ConfigError> {
    let dir_name = {
        let d = if ip.dir.file_name().is_some_and(|n| n == "results") { ip.dir.parent() } else { Some(&*ip.dir) };
        d.map_or_else(|| ip.dir.display().to_string(), file_name)
    };
    let d = &ip.data;
    let mut runs = Vec::new();
    for stage in &ip.stages {
        let name = format!("{dir_name} stage {} ({} req/s)", stage.index, stage.rate);
        // The tool cycles through G x U fixed prompts (system prompt +
        // question), so the whole of each is a shared prefix; the prompt
        // is the rest of what the client counted (the template tokens).
        let fixed = d.system_prompt_len.saturating_add(d.question_len);
        let groups = ip.distinct_prompts().max(1);
        let counted = stage.prompt_len_mean.map_or(f64::from(fixed) + 1.0, f64::round);
        let prompt = (counted - f64::from(fixed)).max(1.0).min(f64::from(u32::MAX)) as u32;
        let duration = opts.sample_s.map_or(stage.duration_s, |s| s.min(stage.duration_s));
        let kind = match ip.load {
            LoadType::Constant => "constant",
            LoadType::Poisson => "poisson",
        };
        let workload = format!(
            "{{arrivals: {{{kind}: {{rate: {}}}}}, duration_s: {duration}, shared_prefix: {{groups: {groups}, \
             tokens: {fixed}}}, prompt_tokens: {prompt}, output_tokens: {}}}",
            stage.rate, d.output_len
        );
        let settings = [workload_override(&workload)?, seed_override(&src.value)];
        let base = src.base(&settings, None, &name)?;
        let mut measured = BTreeMap::new();
        for (family, l) in [(Family::Ttft, &stage.ttft), (Family::E2e, &stage.e2e)] {
            for (stat, v) in
                [(Stat::Mean, l.mean), (Stat::P50, l.p50), (Stat::P90, l.p90), (Stat::P99, l.p99), (Stat::Max, l.max)]
            {
                if let Some(v) = v.filter(|v| *v > 0.0) {
                    measured.insert(Metric::Latency(family, stat), v);
                }
            }
        }
        let mut notes = vec![format!(
            "one of {groups} fixed prompts of {fixed} tokens (shared_prefix) then {prompt} tokens (the rest of \
             the client's mean count), output {} tokens (nominal){}",
            d.output_len,
            if duration < stage.duration_s {
                format!("; {duration} s of the {} s stage simulated", stage.duration_s)
            } else {
                String::new()
            }
        )];
        if let (true, Some(e), Some(t)) = (ip.fixed_output() && d.output_len > 1, stage.e2e.mean, stage.ttft.mean) {
            measured.insert(Metric::Latency(Family::Tpot, Stat::Mean), (e - t) / f64::from(d.output_len - 1));
            notes.push("TPOT mean derived as (E2E mean - TTFT mean) / (output - 1)".into());
        }
        for (m, v) in
            [(Metric::RequestsPerS, stage.requests_per_s), (Metric::InputTokensPerS, stage.input_tokens_per_s)]
        {
            if let Some(v) = v.filter(|v| *v > 0.0) {
                measured.insert(m, v);
            }
        }
        runs.push(Run {
            name,
            group: dir_name.clone(),
            source: stage.file.display().to_string(),
            kind: InputKind::InferencePerf,
            base,
            measured,
            not_fitted: stage.saturated().map(NotFitted::Saturated),
            notes,
            model: String::new(),
            origin: dir_name.clone(),
        });
    }
    Ok(runs)
}

fn workload_override(yaml: &str) -> Result<Override, ConfigError> {
    let value = Override::parse_value(yaml).map_err(|m| ConfigError::new(Path::new("(workload)"), "workload", m))?;
    Ok(Override { path: vec!["workload".into()], value })
}

/// Keeps the scenario's seed when the workload is replaced.
fn seed_override(scenario: &Value) -> Override {
    let seed = scenario.get("workload").and_then(|w| w.get("seed")).cloned().unwrap_or(Value::Number(0.into()));
    Override { path: vec!["workload".into(), "seed".into()], value: seed }
}

// ---- measured table ------------------------------------------------------------

fn from_table(src: &ScenarioSource, t: &table::MeasuredTable, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    let mut runs = Vec::new();
    let mut excluded = Vec::new();
    for row in &t.rows {
        if let Some(reason) = &row.excluded {
            excluded.push(Excluded {
                name: row.name.clone(),
                source: format!("{} line {}", t.file.display(), row.line),
                reason: reason.clone(),
                measured: row.measured.clone(),
            });
            continue;
        }
        let mut settings = row.settings.clone();
        let mut notes = Vec::new();
        if let Some(cap) = opts.sample_s {
            let own = settings.iter().rev().find(|o| o.key() == "workload.duration_s").map(|o| o.value.clone());
            let scenario_s = src.value.get("workload").and_then(|w| w.get("duration_s")).cloned();
            let d = own.or(scenario_s).and_then(|v| v.as_f64());
            if let Some(d) = d.filter(|d| *d > cap) {
                settings.push(Override { path: vec!["workload".into(), "duration_s".into()], value: cap.into() });
                notes.push(format!("{cap} s of the {d} s run simulated"));
            }
        }
        let label = format!("{} ({} line {})", row.name, file_name(&t.file), row.line);
        let base = src.base(&settings, None, &label)?;
        runs.push(Run {
            name: row.name.clone(),
            group: row.group.clone().unwrap_or_else(|| row.name.clone()),
            source: format!("{} line {}", t.file.display(), row.line),
            kind: InputKind::Table,
            base,
            measured: row.measured.clone(),
            not_fitted: row.saturation().map(NotFitted::Saturated),
            notes,
            model: String::new(),
            origin: t.file.display().to_string(),
        });
    }
    Ok(Loaded { runs, excluded })
}

// ---- AIConfigurator silicon CSV -------------------------------------------------

/// The engine settings the runs were served with, by backend: the
/// benchmark configuration AIConfigurator generates for them (its
/// `rule_plugin/benchmark` rules): a step budget of `concurrency + isl +
/// 1,500` tokens, a context of `isl + osl + 1,500`, CUDA graphs captured
/// for every batch up to the concurrency; vLLM's 0.9 memory utilisation
/// and its 1,024 sequences (or the concurrency, if more). An SGLang row
/// runs mixed chunks of at most `isl + 1,500` prompt tokens
/// ([`sglang_mixed_budget`]): under `engine: sglang` (`sglang_rules`) as
/// SGLang's own keys, under vLLM's rules as a step budget.
fn aic_settings(
    r: &aic::AicRow,
    layout: Option<aic::Layout>,
    rounds: u32,
    sglang_rules: bool,
) -> Vec<(String, String)> {
    let (isl, osl) = (u64::from(r.isl), u64::from(r.osl));
    // `batch_size` is a rank's users; the scheduler's limits are a rank's.
    let c = r.batch_size.unwrap_or(1);
    let layout = layout.unwrap_or(aic::Layout::tensor_only(r.tp.unwrap_or(1)));
    let users = u64::from(c) * u64::from(layout.data);
    let sglang = r.backend == "sglang";
    let budget = match sglang {
        true if sglang_rules => sglang_chunk(r),
        true => sglang_mixed_budget(r),
        false => token_budget(r, u64::from(c) + isl + 1500),
    };
    let mut out = model_settings(r);
    if sglang && sglang_rules {
        out.push(("scheduler.mixed_chunk".into(), "true".into()));
        out.push(("scheduler.max_prefill_tokens".into(), (isl + 1500).to_string()));
    }
    out.extend(parallelism_settings("parallelism.", layout));
    out.extend([
        ("scheduler.max_batch_tokens".into(), budget.to_string()),
        ("scheduler.max_num_sequences".into(), c.max(1024).to_string()),
        ("scheduler.cuda_graph_max_tokens".into(), c.to_string()),
        ("workload".into(), closed_loop(users, rounds, isl, osl)),
    ]);
    out
}

/// The step budget of an SGLang run under vLLM's rules. AIConfigurator
/// serves them with mixed chunks (`--enable-mixed-chunk`) and
/// `--max-prefill-tokens isl + 1,500`: a prefill step carries one decode
/// token of every running request, and its prompt tokens are at most
/// `max_prefill_tokens` (and SGLang's chunk, `chunked_prefill_size`)
/// less the running requests. A vLLM budget counts the decode tokens
/// too, so that is `min(isl + 1,500, chunk)` ([`sglang_chunk`]).
fn sglang_mixed_budget(r: &aic::AicRow) -> u64 {
    (u64::from(r.isl) + 1500).min(sglang_chunk(r))
}

/// SGLang's `chunked_prefill_size` for the row's GPU, its default by the
/// GPU's memory: 8,192 below 160 GB (A100, H100, H20, H200), else 16,384.
fn sglang_chunk(r: &aic::AicRow) -> u64 {
    let small = ["a100", "h100", "h20", "h200"].iter().any(|g| r.system.split('_').next() == Some(*g));
    if small { 8192 } else { 16_384 }
}

/// A batch-token budget as the engine sets it: TensorRT-LLM's
/// `max_num_tokens` in multiples of 32.
fn token_budget(r: &aic::AicRow, tokens: u64) -> u64 {
    if r.backend == "trtllm" { tokens.div_ceil(32) * 32 } else { tokens }
}

/// The closed loop of an AIConfigurator run: `users`, each sending
/// `rounds` requests of the row's lengths.
fn closed_loop(users: u64, rounds: u32, isl: u64, osl: u64) -> String {
    format!(
        "{{arrivals: {{closed: {{concurrency: {users}}}}}, requests: {}, prompt_tokens: {isl}, output_tokens: {osl}}}",
        users * u64::from(rounds)
    )
}

/// `layout` as `parallelism` keys under `at` (degrees of 1 left out but TP's).
fn parallelism_settings(at: &str, layout: aic::Layout) -> Vec<(String, String)> {
    let mut out = vec![(format!("{at}tensor"), layout.tensor.to_string())];
    for (key, degree) in [("data", layout.data), ("expert", layout.expert), ("expert_tensor", layout.expert_tensor)] {
        if degree > 1 {
            out.push((format!("{at}{key}"), degree.to_string()));
        }
    }
    out
}

/// A disaggregated row as a scenario (docs/calibration.md, "Disaggregated
/// runs"): the decode pool's engine at the top (so the scenario alone
/// is valid), `cluster.prefill` and `cluster.decode` with the pools'
/// workers, parallelism and batch limits, routed `least_outstanding`, and
/// the KV hand-over over the hardware profile's network link (one NIC).
/// `None` when the profile (found as the scenario in `file` finds it)
/// gives no network link.
fn disagg_settings(r: &aic::AicRow, rounds: u32, file: &Path) -> Option<Vec<(String, String)>> {
    let (isl, osl) = (u64::from(r.isl), u64::from(r.osl));
    let (moe, node) = (r.moe(), r.node_gpus());
    let layout = |p: &aic::Pool| p.layout(moe, node).unwrap_or(aic::Layout::tensor_only(p.tp.unwrap_or(1)));
    // A prefill rank runs `batch` prompts a step; a decode rank serves
    // `batch` users (and recomputes a preempted one).
    let scheduler = |kind: aic::PoolKind| {
        let batch = r.pool(kind).batch_size.unwrap_or(1);
        let tokens = match kind {
            aic::PoolKind::Prefill => u64::from(batch) * isl,
            aic::PoolKind::Decode => u64::from(batch) + isl + 1500,
        };
        [
            ("max_batch_tokens", token_budget(r, tokens).to_string()),
            ("max_num_sequences", batch.to_string()),
            ("cuda_graph_max_tokens", batch.to_string()),
        ]
    };
    let (bandwidth, latency_us) = network_link(r.hardware()?, file)?;
    let mut out = model_settings(r);
    let decode = r.pool(aic::PoolKind::Decode);
    out.extend(parallelism_settings("parallelism.", layout(decode)));
    out.extend(scheduler(aic::PoolKind::Decode).map(|(k, v)| (format!("scheduler.{k}"), v)));
    for kind in [aic::PoolKind::Prefill, aic::PoolKind::Decode] {
        let p = r.pool(kind);
        let at = format!("cluster.{}.", kind.name());
        out.push((format!("{at}replicas"), p.workers.unwrap_or(1).to_string()));
        out.push((format!("{at}router"), "least_outstanding".into()));
        out.extend(parallelism_settings(&format!("{at}parallelism."), layout(p)));
        out.extend(scheduler(kind).map(|(k, v)| (format!("{at}scheduler.{k}"), v)));
    }
    out.push(("cluster.kv_transfer.bandwidth_gbps".into(), llmsim_scenario::yaml::Number::from(bandwidth).to_string()));
    out.push((
        "cluster.kv_transfer.latency_ms".into(),
        llmsim_scenario::yaml::Number::from(latency_us / 1000.0).to_string(),
    ));
    out.push(("workload".into(), closed_loop(r.users().unwrap_or(1), rounds, isl, osl)));
    Some(out)
}

/// The `network` link (GB/s, us) of hardware profile `name`, looked up
/// as a scenario in `file` looks it up (`hardware/NAME.yml`, then the
/// shipped one).
fn network_link(name: &str, file: &Path) -> Option<(f64, f64)> {
    let found = llmsim_scenario::config::hardware::find(name, file).ok()?;
    let profile: Value = llmsim_scenario::yaml::from_str(&found.text).ok()?;
    let net = profile.get("network")?;
    Some((net.get("bandwidth_gbps")?.as_f64()?, net.get("latency_us")?.as_f64()?))
}

/// What every AIConfigurator row's scenario sets: the GPU, the model,
/// its weights and the memory the cache may take.
fn model_settings(r: &aic::AicRow) -> Vec<(String, String)> {
    let (isl, osl) = (u64::from(r.isl), u64::from(r.osl));
    let mut out: Vec<(String, String)> = vec![
        ("hardware".into(), r.hardware().unwrap_or("").into()),
        ("model.preset".into(), r.preset().unwrap_or("").into()),
        ("model.context_length".into(), (isl + osl + 1500).to_string()),
    ];
    let sixteen = r.gemm_quant_mode.is_empty();
    let nvfp4 = r.gemm_quant_mode == "nvfp4";
    match r.format() {
        // Sliding-window layers (gpt-oss) run without prefix caching
        // (docs/deployments.md); the closed loop's prompts are unique.
        Some(aic::Format::Preset) => out.push(("model.kv_cache.prefix_caching".into(), "false".into())),
        // NVIDIA's NVFP4 checkpoints: every linear layer at NVFP4, run at
        // the FP4 peak (only on GPUs that have one).
        _ if nvfp4 => out.push(("model.weights.dtype".into(), "nvfp4".into())),
        Some(aic::Format::Bytes) | None => {
            out.push(("model.weights.bytes_per_parameter".into(), r.bytes_per_parameter().to_string()));
        }
        Some(aic::Format::Dtype) => {
            out.push(("model.weights.dtype".into(), if sixteen { "bf16" } else { "fp8" }.into()));
        }
        Some(aic::Format::Int4Experts) => {
            out.push(("model.weights.dtype".into(), "bf16".into()));
            out.push(("model.weights.expert_dtype".into(), "int4".into()));
        }
    }
    out.push(("model.kv_cache.gpu_memory_utilization".into(), "0.9".into()));
    out
}

/// Why a disaggregated row is predicted but never fitted.
pub const DISAGGREGATED: &str = "held out: prefill and decode pools (disaggregated); predicted at the shipped \
    profile's values, fitted by no stage";

/// Why a row of an AIConfigurator file is predicted but not fitted: a
/// kind of model or deployment the suites hold out (`AicRow::frontier`).
pub const HELD_OUT: &str = "held out: MLA, sliding windows, a format of its own, or expert or data parallelism; \
    predicted by the fit of the other runs to check that it transfers";

fn from_aic(src: &ScenarioSource, f: &aic::AicFile, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    let rounds = if opts.aic_rounds == 0 { aic::DEFAULT_ROUNDS } else { opts.aic_rounds };
    // The suite's scheduler, which sets how an SGLang row is served.
    let sglang_rules = src.value.get("engine").and_then(Value::as_str) == Some("sglang");
    let mut out = Loaded::default();
    // The same measurement filed twice (a later dump that re-encodes an
    // earlier one's parallelism): the first row that llmsim can run is kept.
    let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for r in &f.rows {
        let source = format!("{} line {}", f.file.display(), r.line);
        let mut measured = BTreeMap::new();
        measured.insert(Metric::Latency(Family::Ttft, Stat::Mean), r.ttft_ms);
        measured.insert(Metric::Latency(Family::Tpot, Stat::Mean), r.tpot_ms);
        // Exact figures: the bits of both times.
        let key = format!(
            "{} {} {} {} {} {} {} {}",
            r.model_path,
            r.system,
            r.backend,
            r.mode,
            r.isl,
            r.osl,
            r.ttft_ms.to_bits(),
            r.tpot_ms.to_bits()
        );
        // The copy's line is its source; the reason is one for every copy,
        // so tables count them together.
        let reason = r.unsupported().or_else(|| {
            (!seen.insert(key)).then(|| {
                "the same measurement (model, GPU, engine, mode, lengths, TTFT and TPOT) as an earlier row, filed again"
                    .to_string()
            })
        });
        if let Some(reason) = reason {
            out.excluded.push(Excluded { name: r.id.clone(), source, reason, measured });
            continue;
        }
        // The row's parallelism, read once: its settings, notes and group.
        let disagg = r.mode == "disagg";
        let layout = if disagg { None } else { r.layout(r.moe()).ok() };
        let pairs = match disagg {
            // llmsim's SGLang scheduler has no pools: a disaggregated row
            // of a suite fitted under it runs under vLLM's rules.
            true => disagg_settings(r, rounds, &src.file).map(|mut p| {
                if sglang_rules {
                    p.push(("engine".into(), "vllm".into()));
                }
                p
            }),
            false => Some(aic_settings(r, layout, rounds, sglang_rules)),
        };
        let Some(pairs) = pairs else {
            let reason = format!("disaggregated on `{}`, whose hardware profile gives no network link", r.system);
            out.excluded.push(Excluded { name: r.id.clone(), source, reason, measured });
            continue;
        };
        let mut settings = Vec::new();
        for (key, value) in pairs {
            let value = Override::parse_value(&value).map_err(|m| ConfigError::new(&f.file, &key, m))?;
            settings.push(Override { path: key.split('.').map(str::to_string).collect(), value });
        }
        settings.push(seed_override(&src.value));
        let label = format!("{} ({} line {})", r.id, file_name(&f.file), r.line);
        // A deployment the engine refuses (heads that do not divide, a
        // link without figures at its size) is listed with the reason.
        let base = match src.base(&settings, None, &label) {
            Ok(b) => b,
            Err(e) if disagg || r.frontier() => {
                // The engine's own words, without the run's name that
                // `in_run` adds, so the tables count one reason once.
                let first = e.message.lines().next().unwrap_or("");
                let first = first.split(" (for measured run ").next().unwrap_or(first);
                let reason = format!("the engine refuses it: {}: {first}", e.path);
                out.excluded.push(Excluded { name: r.id.clone(), source, reason, measured });
                continue;
            }
            Err(e) => return Err(e),
        };
        let model =
            base.value.get("model").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
        let (mut notes, group) = describe(r, layout, rounds);
        if disagg && sglang_rules {
            notes.push("under vLLM's rules: `engine: sglang` has no prefill/decode pools".into());
        }
        let saturated = if disagg {
            Some(NotFitted::Disaggregated)
        } else if r.frontier() {
            Some(NotFitted::HeldOut)
        } else {
            concurrency_unclear(r)
                .map(NotFitted::UnclearClient)
                .or_else(|| implausible_prefill(r, &base).map(NotFitted::CachedPrompts))
        };
        out.runs.push(Run {
            name: r.id.clone(),
            group,
            source,
            kind: InputKind::Aic,
            not_fitted: saturated,
            base,
            measured,
            notes,
            model,
            origin: format!("{}: {}", file_name(&f.file), r.family()),
        });
    }
    // A source some of whose runs must have hit a prefix cache ran its
    // other runs with the same client: what their prefill cost is unknown
    // too, so none of them is fitted.
    // A source some of whose runs are set aside for how its client ran
    // (prompts that must have hit a prefix cache, an id that contradicts
    // the concurrency) ran its other runs with the same client: none of
    // them is fitted.
    type Kind = fn(&NotFitted) -> bool;
    let kinds: [(Kind, &str); 2] = [
        (
            |n| matches!(n, NotFitted::CachedPrompts(_)),
            "runs that must have hit a prefix cache: its client's prompts are not known to be unique",
        ),
        (
            |n| matches!(n, NotFitted::UnclearClient(_)),
            "runs whose id contradicts their batch_size: what its client ran is not known",
        ),
    ];
    for (kind, why) in kinds {
        let mut by: Vec<(String, usize)> = Vec::new();
        for r in out.runs.iter().filter(|r| r.not_fitted.as_ref().is_some_and(kind)) {
            match by.iter_mut().find(|(o, _)| *o == r.origin) {
                Some(e) => e.1 += 1,
                None => by.push((r.origin.clone(), 1)),
            }
        }
        for r in out.runs.iter_mut().filter(|r| r.not_fitted.is_none()) {
            if let Some((origin, n)) = by.iter().find(|(o, _)| *o == r.origin) {
                r.not_fitted = Some(NotFitted::SameSource(format!("from the same source ({origin}) as {n} {why}")));
            }
        }
    }
    Ok(out)
}

/// An AIConfigurator run's note (engine, GPUs and parallelism, users,
/// lengths, requests) and its group (engine, GPU, model, format and
/// parallelism: `tp8 dp1 ep8`, or `disagg p1 tp8 dp1 ep8 d9 tp8 dp1 ep8`).
fn describe(r: &aic::AicRow, layout: Option<aic::Layout>, rounds: u32) -> (Vec<String>, String) {
    let disagg = r.mode == "disagg";
    let tp = r.tp.unwrap_or(1);
    let users = r.users().unwrap_or(1);
    let shape = match layout {
        _ if disagg => pools_text(r),
        Some(l) if l.data > 1 || l.expert > 1 => format!("x{} ({})", l.gpus(), layout_text(l)),
        _ => format!("x{tp}"),
    };
    let notes = vec![format!(
        "{} {} on {} {shape}: {users} users, {} / {} tokens, {} requests",
        r.backend,
        r.backend_version,
        r.system,
        r.isl,
        r.osl,
        users * u64::from(rounds)
    )];
    let short = |l: aic::Layout| match l.expert_tensor {
        1 => format!("dp{} ep{}", l.data, l.expert),
        g => format!("dp{} ep{} etp{g}", l.data, l.expert),
    };
    let shape = if disagg {
        let pool = |kind: aic::PoolKind| {
            let p = r.pool(kind);
            let l = p.layout(r.moe(), r.node_gpus()).ok();
            format!(
                "{}{} tp{} {}",
                &kind.name()[..1],
                p.workers.unwrap_or(1),
                p.tp.unwrap_or(1),
                l.map_or(String::new(), short)
            )
        };
        format!("disagg {} {}", pool(aic::PoolKind::Prefill), pool(aic::PoolKind::Decode))
    } else {
        let wide = layout.filter(|l| l.data > 1 || l.expert > 1).map_or(String::new(), |l| format!(" {}", short(l)));
        format!("tp{tp}{wide}")
    };
    (notes, format!("{} {} {} {} {shape}", r.backend, r.system, r.model_path, r.gemm_quant_mode))
}

/// A layout as the notes write it: `TP 8, DP 1, EP 8` (`, MoE TP g` when above 1).
fn layout_text(l: aic::Layout) -> String {
    let split = if l.expert_tensor > 1 { format!(", MoE TP {}", l.expert_tensor) } else { String::new() };
    format!("TP {}, DP {}, EP {}{split}", l.tensor, l.data, l.expert)
}

/// A disaggregated row's pools as the notes write them: `prefill 1 x 8
/// GPUs (TP 8, DP 1, EP 8), decode 9 x 8 GPUs (...)`.
fn pools_text(r: &aic::AicRow) -> String {
    let pool = |kind: aic::PoolKind| {
        let p = r.pool(kind);
        match p.layout(r.moe(), r.node_gpus()) {
            Ok(l) => format!("{} {} x {} GPUs ({})", kind.name(), p.workers.unwrap_or(1), l.gpus(), layout_text(l)),
            Err(_) => format!("{} {} x TP {}", kind.name(), p.workers.unwrap_or(1), p.tp.unwrap_or(1)),
        }
    };
    format!("{}, {}", pool(aic::PoolKind::Prefill), pool(aic::PoolKind::Decode))
}

/// A row whose id names a concurrency (`_c288_`) other than its
/// `batch_size x attention_dp_size` (GB200's Qwen3-32B rows name twice
/// theirs): which one the client ran is unclear, so it is predicted at
/// `batch_size`, not fitted.
fn concurrency_unclear(r: &aic::AicRow) -> Option<String> {
    let named = r.id.split('_').find_map(|part| part.strip_prefix('c').and_then(|n| n.parse::<u64>().ok()))?;
    let users = u64::from(r.batch_size?) * u64::from(r.attention_dp.unwrap_or(1));
    (named != users).then(|| {
        format!("its id says {named} users, its batch_size x attention_dp_size {users}: which ran is not known")
    })
}

/// A run whose measured cycle would need the prompts' prefill alone to
/// run above 60% of the weights' dense peak (fitted GEMM efficiencies on
/// Hopper are near 50%): its prompts must have hit a prefix cache the
/// file does not record, so it cannot tell what a prefill costs. Kept out
/// of fits, still predicted.
fn implausible_prefill(r: &aic::AicRow, base: &Base) -> Option<String> {
    let get = |path: &[&str]| path.iter().try_fold(&base.value, |v, k| v.get(*k)).and_then(Value::as_f64);
    let own = match r.gemm_quant_mode.as_str() {
        "nvfp4" => get(&["hardware", "peak_tflops_fp4"]),
        _ if r.bytes_per_parameter() == 1.0 => get(&["hardware", "peak_tflops_fp8"]),
        _ => None,
    };
    let peak = own.or_else(|| get(&["hardware", "peak_tflops"]))?;
    let scenario = base.scenario(&[], &[]).ok()?;
    let active = scenario.model.architecture.as_ref()?.active_parameters() as f64;
    let c = f64::from(r.batch_size?);
    let cycle_s = (r.ttft_ms + f64::from(r.osl.saturating_sub(1)) * r.tpot_ms) / 1e3;
    let share = c / cycle_s * f64::from(r.isl) * 2.0 * active / (f64::from(r.tp.unwrap_or(1)) * peak * 1e12);
    (share > 0.6).then(|| {
        format!(
            "implausible without prefix-cache hits: the measured cycle needs the prefill alone at {:.0}% of the \
             weights' dense peak",
            share * 100.0
        )
    })
}

#[cfg(test)]
mod tests;
