//! `llmsim capacity`: the highest rate that meets every SLO, and what it
//! takes to serve a target rate.

use std::path::PathBuf;
use std::sync::LazyLock;

use clap::Args;

use super::{CliError, ScenarioArgs, print, write_output};
use crate::capacity::search::SearchError;
use crate::capacity::{Options, Slo, report, search};

static SLO_HELP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "An SLO, METRIC=BOUND: met when the run's metric is <= BOUND, in the metric's unit (ms for \
         *_ms), e.g. ttft_p99_ms=500 or preemptions=0 (repeatable; every SLO must hold). Latencies \
         also decide which requests count as good. METRIC is one of: {}",
        crate::sweep::metric::slo_names()
    )
});

#[derive(Debug, Args)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    #[arg(long, value_name = "METRIC=BOUND", required = true, help = SLO_HELP.as_str())]
    pub slo: Vec<String>,
    /// The rate the fleet must serve (req/s): prints the replicas needed,
    /// with requests split evenly between them.
    #[arg(long, value_name = "REQ/S")]
    pub target_rate: Option<f64>,
    /// Stop when the highest passing and lowest failing rates are within
    /// this fraction of each other.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.01)]
    pub precision: f64,
    /// Requests per probe, instead of max(2000, 100/(1-q)) for the highest
    /// SLO quantile q (and longer runs where E2E is long).
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Write the search and its answer as JSON; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Do not print the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

fn options(a: &CapacityArgs) -> Result<Options, CliError> {
    let usage = |m: String| CliError::Usage(m);
    let slos =
        a.slo.iter().map(|s| Slo::parse(s).map_err(|e| usage(format!("--slo {e}")))).collect::<Result<_, _>>()?;
    if !(a.precision > 0.0 && a.precision <= 0.5) {
        return Err(usage(format!("--precision {}: must be in (0, 0.5], e.g. 0.01 for 1%", a.precision)));
    }
    if let Some(t) = a.target_rate.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(usage(format!("--target-rate {t}: must be a rate above 0 req/s")));
    }
    if a.requests == Some(0) {
        return Err(usage("--requests 0: a probe needs at least one request".into()));
    }
    Ok(Options { slos, precision: a.precision, requests: a.requests, target_rate: a.target_rate })
}

pub fn execute(a: CapacityArgs) -> Result<(), CliError> {
    let opts = options(&a)?;
    let scenario = a.scenario.load()?;
    let found = search(&scenario, &opts).map_err(|e| match e {
        SearchError::NoRate(_) => CliError::Usage(e.to_string()),
        SearchError::Run { .. } => CliError::Usage(format!("{}: {e}", scenario.source.display())),
        SearchError::Unreachable { .. } => CliError::Failure(e.to_string()),
    })?;
    if let Some(path) = &a.json {
        write_output(path, crate::report::to_json(&found).as_bytes())?;
    }
    let to_stdout = a.json.as_deref() == Some(std::path::Path::new("-"));
    if !a.quiet && !to_stdout {
        print(&report::render(&found))?;
    }
    Ok(())
}
