//! `llmsim trace`: the requests a scenario generates, as a trace CSV.
//!
//! Open-loop and trace workloads do not depend on the engine; a closed loop
//! does (a user's next request follows its previous answer), so the
//! scenario is simulated and the arrivals it produced are written.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, ScenarioArgs, csv_failure, write_output};
use crate::engine::{Observer, RequestId};
use crate::metrics::CollectorOptions;
use crate::time::SimTime;
use crate::workload::trace::{self, TraceRow};

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Output CSV file; `-` for stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

/// Remembers every arrival.
#[derive(Default)]
struct Arrivals(Vec<TraceRow>);

impl Observer for Arrivals {
    fn arrived(&mut self, _id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.0.push(TraceRow { arrival: at, prompt, output });
    }
}

/// The trace rows a scenario produces.
pub fn generate(scenario: &crate::config::Scenario) -> Result<Vec<TraceRow>, crate::sim::SimError> {
    generate_with_progress(scenario, &mut |_| {})
}

fn generate_with_progress(
    scenario: &crate::config::Scenario,
    progress: &mut dyn FnMut(&crate::sim::Progress),
) -> Result<Vec<TraceRow>, crate::sim::SimError> {
    let mut rows = Arrivals::default();
    crate::sim::run_with_progress(scenario, CollectorOptions::default(), &mut rows, progress)?;
    Ok(rows.0)
}

pub fn execute(a: TraceArgs) -> Result<(), CliError> {
    let scenario = a.scenario.load()?;
    let mut progress = super::progress::RunProgress::new(&scenario, true);
    let rows = generate_with_progress(&scenario, &mut |p| progress.update(p));
    progress.finish();
    let rows = rows.map_err(|e| CliError::sim(&scenario, e))?;
    let mut bytes = Vec::new();
    trace::write(&mut bytes, &rows).map_err(|e| csv_failure(&a.output, e))?;
    write_output(&a.output, &bytes)
}
