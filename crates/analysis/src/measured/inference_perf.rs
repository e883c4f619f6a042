//! inference-perf (kubernetes-sigs/inference-perf) run directories: the
//! load stages and data shape from its configuration, and each stage's
//! measured figures from `stage_N_lifecycle_metrics.json`.
//!
//! A run directory is the tool's output directory (`config.yaml` beside
//! the `stage_*_lifecycle_metrics.json` files) or the directory above it
//! holding a `results/` subdirectory. `config.yaml` is the configuration
//! the tool resolved (every default filled in), so it is read first;
//! `profile.yaml` (the configuration as the user wrote it, the same schema)
//! is the fallback. The two can disagree: when a profile's key is unknown
//! to the tool's version, the resolved file shows the default it used
//! instead, and that is what the load test did.
//!
//! What is read:
//! * `load.type` (`constant`: fixed gaps of 1/rate; `poisson`) and
//!   `load.stages` (`rate`, `duration` in seconds);
//! * `data.type: shared_prefix` with `num_groups`, `num_prompts_per_group`,
//!   `system_prompt_len`, `question_len`, `output_len` (other data types
//!   are refused: their lengths are not in the configuration);
//! * `server.ignore_eos` (the output length is then exact);
//! * per stage: `successes.count`, `failures.count`,
//!   `load_summary.achieved_rate`, `successes.throughput`,
//!   `successes.prompt_len.mean`, and the `time_to_first_token` and
//!   `request_latency` distributions (seconds; `median` is p50).
//!
//! What is not: `time_per_output_token` and `inter_token_latency` count
//! streamed chunks, and vLLM sends about two SSE events a token (the
//! samples' p25 gap is a few microseconds), so both are about half the
//! real decode step; `output_len` is counted on the client and comes out
//! lower than what was generated. With a fixed output length (`ignore_eos`
//! and a single `output_len`) every request's TPOT is
//! `(E2E - TTFT) / (N - 1)`, so the mean TPOT is exactly
//! `(E2E mean - TTFT mean) / (N - 1)`; that derived figure stands in for
//! the tool's.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::json::{at, finite_at};
use llmsim_scenario::config::ConfigError;

/// How arrivals were spaced.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LoadType {
    /// Fixed gaps of `1/rate`.
    Constant,
    Poisson,
}

/// `data.shared_prefix`: `num_groups` system prompts, each shared by
/// `num_prompts_per_group` prompts; every request uses one of the
/// `num_groups * num_prompts_per_group` prompts, in turn.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedPrefixData {
    pub num_groups: u32,
    pub num_prompts_per_group: u32,
    pub system_prompt_len: u32,
    pub question_len: u32,
    pub output_len: u32,
}

/// A latency distribution in milliseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latency {
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

/// One load stage and what was measured in it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub index: usize,
    pub rate: f64,
    pub duration_s: f64,
    pub file: PathBuf,
    pub successes: u64,
    pub failures: u64,
    /// Requests sent per second.
    pub achieved_rate: Option<f64>,
    /// Successful requests per second (completions).
    pub requests_per_s: Option<f64>,
    pub input_tokens_per_s: Option<f64>,
    /// Mean prompt length the client counted (system prompt, question and
    /// template tokens).
    pub prompt_len_mean: Option<f64>,
    pub ttft: Latency,
    pub e2e: Latency,
}

/// A parsed inference-perf run directory.
#[derive(Clone, Debug, PartialEq)]
pub struct InferencePerfRun {
    pub dir: PathBuf,
    /// The configuration file read.
    pub config: PathBuf,
    pub load: LoadType,
    pub data: SharedPrefixData,
    pub ignore_eos: bool,
    pub streaming: bool,
    pub stages: Vec<Stage>,
}

/// Whether `dir` looks like an inference-perf run directory.
pub fn is_run_dir(dir: &Path) -> bool {
    dir.is_dir() && results_dir(dir).is_some()
}

/// The directory holding the lifecycle files: `dir` or `dir/results`.
fn results_dir(dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), dir.join("results")]
        .into_iter()
        .find(|d| d.join("stage_0_lifecycle_metrics.json").is_file() || d.join("config.yaml").is_file())
}

/// Reads a run directory.
pub fn load(dir: &Path) -> Result<InferencePerfRun, ConfigError> {
    let results = results_dir(dir).ok_or_else(|| {
        ConfigError::new(
            dir,
            "",
            "not an inference-perf run directory: expected config.yaml and stage_N_lifecycle_metrics.json \
             in it or in its results/ subdirectory",
        )
    })?;
    let config = [results.join("config.yaml"), dir.join("profile.yaml"), results.join("profile.yaml")]
        .into_iter()
        .find(|f| f.is_file())
        .ok_or_else(|| {
            ConfigError::new(&results, "", "no config.yaml or profile.yaml: the load stages and data shape are unknown")
        })?;
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::MeasuredConfig, &config)?;
    let cfg: llmsim_scenario::yaml::Value = llmsim_scenario::config::parse_str(&text, &config)?;
    let cfg: Value = serde_json::to_value(&cfg)
        .map_err(|e| ConfigError::new(&config, "", format!("cannot read the configuration: {e}")))?;
    let err = |path: &str, m: String| ConfigError::new(&config, path, m);
    let load = match at(&cfg, "load.type").and_then(Value::as_str) {
        Some("constant") => LoadType::Constant,
        Some("poisson") => LoadType::Poisson,
        other => {
            return Err(err(
                "load.type",
                format!("{} is not supported: constant and poisson load stages are", describe(other)),
            ));
        }
    };
    let data = shared_prefix(&cfg).map_err(|(p, m)| err(&p, m))?;
    let ignore_eos = at(&cfg, "server.ignore_eos").and_then(Value::as_bool).unwrap_or(false);
    let streaming = at(&cfg, "api.streaming").and_then(Value::as_bool).unwrap_or(false);
    let stage_list = at(&cfg, "load.stages").and_then(Value::as_array).filter(|s| !s.is_empty());
    let stage_list =
        stage_list.ok_or_else(|| err("load.stages", "missing or empty: no load stage to replay".into()))?;
    let mut stages = Vec::new();
    for (i, s) in stage_list.iter().enumerate() {
        let path = format!("load.stages[{i}]");
        let rate = finite_at(s, "rate").filter(|r| *r > 0.0);
        let duration = finite_at(s, "duration").filter(|d| *d > 0.0);
        let (Some(rate), Some(duration_s)) = (rate, duration) else {
            return Err(err(&path, "expected a rate and a duration, both greater than 0".into()));
        };
        let file = results.join(format!("stage_{i}_lifecycle_metrics.json"));
        stages.push(stage(i, rate, duration_s, &file)?);
    }
    Ok(InferencePerfRun { dir: dir.to_path_buf(), config, load, data, ignore_eos, streaming, stages })
}

fn describe(v: Option<&str>) -> String {
    v.map_or_else(|| "a missing load type".to_string(), |t| format!("load type `{t}`"))
}

fn shared_prefix(cfg: &Value) -> Result<SharedPrefixData, (String, String)> {
    let kind = at(cfg, "data.type").and_then(Value::as_str).unwrap_or("");
    if kind != "shared_prefix" {
        return Err((
            "data.type".into(),
            format!(
                "`{kind}` is not supported: only shared_prefix data gives every length in the configuration \
                 (for other data, give the runs as a measured table)"
            ),
        ));
    }
    let count = |key: &str, min: u64| -> Result<u32, (String, String)> {
        let path = format!("data.shared_prefix.{key}");
        match at(cfg, &path).and_then(Value::as_u64) {
            Some(n) if n >= min && u32::try_from(n).is_ok() => Ok(n as u32),
            _ => Err((path, format!("expected a whole number >= {min}"))),
        }
    };
    Ok(SharedPrefixData {
        num_groups: count("num_groups", 1)?,
        num_prompts_per_group: count("num_prompts_per_group", 1)?,
        system_prompt_len: count("system_prompt_len", 0)?,
        question_len: count("question_len", 1)?,
        output_len: count("output_len", 1)?,
    })
}

fn stage(index: usize, rate: f64, duration_s: f64, file: &Path) -> Result<Stage, ConfigError> {
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Measured, file)?;
    let docs = super::json::documents(&text, file)?;
    let doc = &docs[0];
    let ms = |path: &str| -> Latency {
        let d = at(doc, path);
        let get = |k: &str| d.and_then(|d| finite_at(d, k)).map(|s| s * 1e3);
        Latency { mean: get("mean"), p50: get("median"), p90: get("p90"), p99: get("p99"), max: get("max") }
    };
    let successes = at(doc, "successes.count").and_then(Value::as_u64).ok_or_else(|| {
        ConfigError::new(file, "successes.count", "missing: not an inference-perf lifecycle metrics file")
    })?;
    Ok(Stage {
        index,
        rate,
        duration_s,
        file: file.to_path_buf(),
        successes,
        failures: at(doc, "failures.count").and_then(Value::as_u64).unwrap_or(0),
        achieved_rate: at(doc, "load_summary").and_then(|l| finite_at(l, "achieved_rate")),
        requests_per_s: at(doc, "successes.throughput").and_then(|t| finite_at(t, "requests_per_sec")),
        input_tokens_per_s: at(doc, "successes.throughput").and_then(|t| finite_at(t, "input_tokens_per_sec")),
        prompt_len_mean: at(doc, "successes.prompt_len").and_then(|p| finite_at(p, "mean")),
        ttft: ms("successes.latency.time_to_first_token"),
        e2e: ms("successes.latency.request_latency"),
    })
}

/// Whether `doc` is one stage's `stage_N_lifecycle_metrics.json` (its
/// `load_summary` has the stage's `requested_rate` or `send_duration`; the
/// run's `summary_lifecycle_metrics.json` has neither).
pub fn is_stage_file(doc: &Value) -> bool {
    doc.get("successes").is_some()
        && doc
            .get("load_summary")
            .is_some_and(|l| l.get("requested_rate").is_some() || l.get("send_duration").is_some())
}

/// One stage's lifecycle metrics as a load level for `llmsim diff`: TTFT
/// and E2E (seconds in the file), the counts and the throughputs. Its
/// `time_per_output_token` and `inter_token_latency` time tokens by the
/// chunk they arrived in (see the module's docs), so they are not read.
pub fn stage_level(doc: &Value) -> super::LoadLevel {
    use super::{Dist, MetricKind, Strategy, Throughput};
    let load = doc.get("load_summary").unwrap_or(&Value::Null);
    let users = finite_at(load, "concurrency").filter(|c| *c >= 1.0).map(|c| c as u64);
    let rate = finite_at(load, "requested_rate").filter(|r| *r > 0.0);
    let strategy = match (users, rate) {
        (Some(c), _) => Strategy::Closed { concurrency: c },
        (None, Some(r)) => Strategy::Open { rate: Some(r), burstiness: None, max_concurrency: None },
        (None, None) => Strategy::Other("load not in the stage file".into()),
    };
    let label = strategy.label().unwrap_or_else(|| "stage".into());
    let dist = |name: &str| -> Option<Dist> {
        let stats = at(doc, &format!("successes.latency.{name}")).filter(|s| s.is_object())?;
        let ms = |k: &str| finite_at(stats, k).map(|x| x * 1e3);
        let mut d = Dist { field: name.to_string(), mean: ms("mean"), ..Dist::default() };
        for (key, v) in stats.as_object()? {
            if let Some(p) = if key == "median" { Some("50") } else { key.strip_prefix('p') } {
                d.set_percentile(p, v, 1e3);
            }
        }
        Some(d)
    };
    let mut metrics = std::collections::BTreeMap::new();
    for (kind, name) in [(MetricKind::Ttft, "time_to_first_token"), (MetricKind::E2e, "request_latency")] {
        if let Some(d) = dist(name) {
            metrics.insert(kind, d);
        }
    }
    let tput = |k: &str| at(doc, "successes.throughput").and_then(|t| finite_at(t, k));
    super::LoadLevel {
        label,
        strategy,
        duration_s: None,
        completed: at(doc, "successes.count").and_then(Value::as_u64),
        failed: at(doc, "failures.count").and_then(Value::as_u64),
        throughput: Throughput {
            requests_per_s: tput("requests_per_sec"),
            input_tokens_per_s: tput("input_tokens_per_sec"),
            output_tokens_per_s: tput("output_tokens_per_sec"),
            total_tokens_per_s: tput("total_tokens_per_sec"),
        },
        metrics,
        requests: Err("an inference-perf stage file has no per-request data (its per_request_lifecycle_metrics.json \
                       does not say which stage a request belonged to)"
            .into()),
        health: Vec::new(),
        spec_decode: None,
        not_compared: vec![
            "inference-perf's time_per_output_token and inter_token_latency time each token by the chunk it \
             arrived in (docs/bench-diff.md, \"inference-perf\")"
                .into(),
        ],
    }
}

impl InferencePerfRun {
    /// The prompts the data cycles through.
    pub fn distinct_prompts(&self) -> u32 {
        self.data.num_groups.saturating_mul(self.data.num_prompts_per_group)
    }

    /// The output length is exact: `ignore_eos` with one fixed `output_len`.
    pub fn fixed_output(&self) -> bool {
        self.ignore_eos
    }
}

impl Stage {
    /// Why the stage counts as saturated, if it does: requests failed, or
    /// completions fell more than 10% behind sends (the queue grew).
    pub fn saturated(&self) -> Option<String> {
        let total = self.successes + self.failures;
        if self.failures > 0 {
            return Some(format!("{} of {total} requests failed", self.failures));
        }
        if let (Some(sent), Some(done)) = (self.achieved_rate, self.requests_per_s)
            && done < 0.9 * sent
        {
            return Some(format!(
                "completions ({done:.3}/s) fell more than 10% behind sends ({sent:.3}/s): the queue grew"
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests;
