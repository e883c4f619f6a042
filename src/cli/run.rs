//! `llmsim run`: predict one scenario.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, ScenarioArgs, csv_failure, print, write_output};
use crate::metrics::CollectorOptions;
use crate::report;
use crate::trace_events::TraceEvents;

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
    /// Draw the run's timeline (batch size, KV usage, waiting queue, step
    /// duration over simulated time) as DIR/timeline.svg.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Write a Chrome trace-event JSON (open it in ui.perfetto.dev): one
    /// slice per step, one track per request; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub trace_events: Option<PathBuf>,
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
    let options = CollectorOptions { keep_steps: a.steps_csv.is_some() || a.plot.is_some() };
    let mut trace = a.trace_events.as_ref().map(|_| TraceEvents::new());
    let out = match &mut trace {
        Some(t) => crate::sim::run_observed(&scenario, options, t),
        None => crate::sim::run(&scenario, options),
    };
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
    if let Some(dir) = &a.plot {
        let plot = crate::plot::timeline::plot(&scenario.name, &out.steps, scenario.capacity.num_blocks)
            .map_err(CliError::Failure)?;
        super::sweep::write_plots(dir, &[plot])?;
    }
    if let (Some(path), Some(t)) = (&a.trace_events, trace) {
        write_output(path, t.render().as_bytes())?;
    }
    let to_stdout = [&a.json, &a.requests_csv, &a.steps_csv, &a.trace_events]
        .iter()
        .any(|p| p.as_deref() == Some(std::path::Path::new("-")));
    if !a.quiet && !to_stdout {
        print(&report::summary::render(&scenario, &out.result))?;
    }
    Ok(())
}
