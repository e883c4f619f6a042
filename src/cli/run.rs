//! `llmsim run`: predict one scenario.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, ScenarioArgs, csv_failure, print, write_output};
use crate::metrics::CollectorOptions;
use crate::report;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Write the result JSON (ENGINE.md section 6) here; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per request here.
    #[arg(long, value_name = "FILE")]
    pub requests_csv: Option<PathBuf>,
    /// Write one CSV row per step here.
    #[arg(long, value_name = "FILE")]
    pub steps_csv: Option<PathBuf>,
    /// Print the effective configuration before the summary.
    #[arg(long)]
    pub explain: bool,
    /// Do not print the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn execute(a: RunArgs) -> Result<(), CliError> {
    let scenario = a.scenario.load()?;
    if a.explain {
        print(&super::explain::render(&scenario))?;
    }
    let options = CollectorOptions { keep_steps: a.steps_csv.is_some() };
    let out = crate::sim::run(&scenario, options);
    if let Some(path) = &a.json {
        write_output(path, report::to_json(&out.result).as_bytes())?;
    }
    if let Some(path) = &a.requests_csv {
        let bytes = report::csv_out::requests(&out.requests).map_err(|e| csv_failure(path, e))?;
        write_output(path, &bytes)?;
    }
    if let Some(path) = &a.steps_csv {
        let bytes =
            report::csv_out::steps(&out.steps, scenario.capacity.num_blocks).map_err(|e| csv_failure(path, e))?;
        write_output(path, &bytes)?;
    }
    let to_stdout =
        [&a.json, &a.requests_csv, &a.steps_csv].iter().any(|p| p.as_deref() == Some(std::path::Path::new("-")));
    if !a.quiet && !to_stdout {
        print(&report::summary::render(&scenario, &out.result))?;
    }
    Ok(())
}
