//! `llmsim diff PREDICTED MEASURED`: compare a prediction with a load test.
//!
//! Exit codes: 0 every compared figure is within the tolerance; 1 the
//! comparison failed (a figure outside it, nothing comparable, or the
//! measurement flagged its own lag); 2 bad usage or an unreadable file.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{CliError, print, write_output};
use llmsim_analysis::diff::{self, Comparison};
use llmsim_analysis::measured::{self, LoadLevel, Measured};
use llmsim_planner::metrics::RunResult;
use llmsim_scenario::config::ConfigError;

#[derive(Debug, Args)]
#[command(after_help = "Exit codes: 0 every compared figure is within the tolerance; 1 the comparison failed \
(a figure outside it, nothing comparable, or the measurement reported its own lag); 2 bad usage or an \
unreadable file.")]
pub struct DiffArgs {
    /// A `llmsim run --json` result (several, one per line or in a JSON
    /// array, pair with the measured levels in order).
    pub predicted: PathBuf,
    /// A measured result: `llmsim bench --json`, `vllm bench serve
    /// --save-result` (also `--append-result`), sglang bench_serving JSONL,
    /// guidellm benchmarks.json, AIPerf's profile_export_aiperf.json or
    /// profile_export.jsonl, genai-perf's profile_export_genai_perf.json,
    /// llmperf's *_summary.json, or an inference-perf
    /// stage_N_lifecycle_metrics.json.
    pub measured: PathBuf,
    /// Largest relative error that passes, e.g. 10% or 2.5%.
    #[arg(long, default_value = "10%", value_name = "PERCENT")]
    pub tolerance: String,
    /// Compare only this measured load level (1-based), for files with
    /// several.
    #[arg(long, value_name = "N")]
    pub level: Option<usize>,
    /// Gate only on these figures (repeatable or comma-separated), e.g.
    /// --metric ttft.p50,itl.p50,throughput.output; the others are shown.
    #[arg(long = "metric", value_name = "ID", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Also write the comparison as JSON here; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn execute(a: DiffArgs) -> Result<(), CliError> {
    let tolerance = diff::parse_tolerance(&a.tolerance).map_err(|e| CliError::Usage(e.to_string()))?;
    diff::check_metrics(&a.metrics).map_err(|e| CliError::Usage(e.to_string()))?;
    let predicted = read_predicted(&a.predicted)?;
    let (measured, docs) = measured::load_docs(&a.measured)?;
    let pairs = pair(&predicted, &measured, a.level)?;
    let comparisons: Vec<Comparison> =
        pairs.iter().map(|(p, l)| diff::compare(p, l, measured.tool, tolerance, &a.metrics)).collect();
    // An `llmsim bench` file against `llmsim serve` carries the server's
    // summary: its figures go beside the client's.
    let measured_doc = match docs.as_slice() {
        [one] if comparisons.len() == 1 => Some(&one.head),
        _ => None,
    };
    let text: Vec<String> = comparisons
        .iter()
        .map(|c| {
            let mut t = diff::table::render(c, &a.predicted.display().to_string(), &a.measured.display().to_string());
            if let Some(s) = measured_doc.and_then(|d| diff::server::section(d, c)) {
                t.push('\n');
                t.push_str(&s);
            }
            t
        })
        .collect();
    if let Some(path) = &a.json {
        write_output(path, llmsim_core::util::to_json(&comparisons).as_bytes())?;
    }
    if a.json.as_deref() != Some(Path::new("-")) {
        print(&text.join("\n"))?;
    }
    let failed = comparisons.iter().filter(|c| c.failed()).count();
    if failed > 0 {
        let lines: Vec<String> = comparisons
            .iter()
            .filter(|c| c.failed())
            .map(|c| format!("{}: {}", c.level, diff::table::detail(c)))
            .collect();
        return Err(CliError::Failure(format!("the comparison failed: {}", lines.join("; "))));
    }
    Ok(())
}

/// Every run result in the file.
fn read_predicted(file: &Path) -> Result<Vec<RunResult>, CliError> {
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Prediction, file)?;
    let docs = measured::json::documents(&text, file)?;
    docs.into_iter()
        .map(|doc| {
            if let Ok(tool) = measured::sniff(&doc) {
                let msg = format!(
                    "this is a {} result (a measurement); PREDICTED must be an `llmsim run --json` result \
                     (did you swap the two files?)",
                    tool.name()
                );
                return Err(ConfigError::new(file, "", msg).into());
            }
            serde_json::from_value::<RunResult>(doc).map_err(|e| {
                let msg = format!("not an `llmsim run --json` result: {e}");
                CliError::from(ConfigError::new(file, "", msg))
            })
        })
        .collect()
}

/// Which prediction goes with which measured level.
fn pair<'a>(
    predicted: &'a [RunResult],
    measured: &'a Measured,
    level: Option<usize>,
) -> Result<Vec<(&'a RunResult, &'a LoadLevel)>, CliError> {
    let n = measured.levels.len();
    if level.is_some() || (predicted.len() == 1 && n == 1) {
        if predicted.len() != 1 {
            return Err(CliError::Usage(format!(
                "--level picks one measured level, but the predicted file has {} results",
                predicted.len()
            )));
        }
        let l = measured.pick(level, "--level").map_err(|e| CliError::Usage(e.to_string()))?;
        return Ok(vec![(&predicted[0], l)]);
    }
    if predicted.len() == n {
        return Ok(predicted.iter().zip(&measured.levels).collect());
    }
    if predicted.len() == 1 {
        return Err(CliError::Usage(measured.pick(None, "--level").err().map(|e| e.to_string()).unwrap_or_default()));
    }
    Err(CliError::Usage(format!(
        "the predicted file has {} results but {} has {n} load levels: give one prediction per level, in \
         order, or one prediction and --level N:\n{}",
        predicted.len(),
        measured.file.display(),
        measured.level_list().trim_end()
    )))
}
