//! `llmsim trace`: the requests a scenario generates, as a trace CSV.
//!
//! Open-loop and trace workloads do not depend on the engine; a closed loop
//! does (a user's next request follows its previous answer), and so do
//! sessions, so the scenario is simulated and the arrivals it produced are
//! written. With a shared prefix or sessions, the drawn `prefix_id`,
//! `prefix_tokens` and `session_id` go in columns of their own, and with
//! `workload.classes` each request's class goes in a `class` column, so any
//! tool can replay exactly what was simulated.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, ScenarioArgs, csv_failure, write_output};
use llmsim_core::engine::{Observer, RequestId};
use llmsim_core::time::SimTime;
use llmsim_planner::workload::AnySource;
use llmsim_scenario::config::Arrivals;
use llmsim_scenario::trace::{self, RowContent, TraceRow};

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
struct Recorded(Vec<TraceRow>);

impl Observer for Recorded {
    fn arrived(&mut self, _id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.0.push(TraceRow { arrival: at, prompt, output });
    }
}

/// Rows and, with shared content, their content columns.
pub type Generated = (Vec<TraceRow>, Option<Vec<RowContent>>);

fn generate_with_progress(
    scenario: &llmsim_scenario::config::Scenario,
    progress: &mut dyn FnMut(&llmsim_planner::run_driver::Progress),
) -> Result<Generated, llmsim_planner::run_driver::SimError> {
    let mut rows = Recorded::default();
    let mut source = AnySource::new(scenario);
    source.keep_rows();
    // The engines decide when a closed loop's users send again.
    llmsim_planner::Run::new(scenario)
        .source(&mut source)
        .summary_only(true)
        .stepping(llmsim_planner::run_driver::Stepping::Exact)
        .progress(progress)
        .observed(&mut rows)?;
    Ok((rows.0, source.row_content()))
}

pub fn execute(a: TraceArgs) -> Result<(), CliError> {
    let scenario = a.scenario.load()?;
    let mut progress = super::progress::RunProgress::new(&scenario, true);
    let generated = generate_with_progress(&scenario, &mut |p| progress.update(p));
    progress.finish();
    let (rows, content) = generated.map_err(|e| CliError::sim(&scenario, e))?;
    if let Arrivals::Trace(t) = &scenario.workload.arrivals
        && t.content.as_ref().is_some_and(|c| c.hash_block_size.is_some())
    {
        eprintln!(
            "note: {} lists hash_ids, which the trace CSV has no column for: the rows are written without them",
            t.path
        );
    }
    let content = content.filter(|c| c.iter().any(|r| r.prefix.is_some() || r.session.is_some()));
    // With workload.classes, each row's class (rows are in id order).
    let classes = llmsim_planner::workload::classes::Classes::of(&scenario);
    let names: Option<Vec<&str>> =
        classes.as_ref().map(|c| (0..rows.len() as u64).map(|id| c.names[c.class_of(id)].as_str()).collect());
    let mut bytes = Vec::new();
    trace::write_with_classes(&mut bytes, &rows, content.as_deref(), names.as_deref())
        .map_err(|e| csv_failure(&a.output, e))?;
    write_output(&a.output, &bytes)
}
