//! `llmsim trace`: the requests a scenario generates, as a trace CSV.
//!
//! Open-loop and trace workloads do not depend on the engine; a closed loop
//! does (a user's next request follows its previous answer), and so do
//! sessions, so the scenario is simulated and the arrivals it produced are
//! written. With a shared prefix or sessions, the drawn `prefix_id`,
//! `prefix_tokens` and `session_id` go in columns of their own, so any tool
//! can replay exactly what was simulated.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, ScenarioArgs, csv_failure, write_output};
use llmsim_core::engine::{Engine, Observer, RequestId};
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
    progress: &mut dyn FnMut(&llmsim_planner::sim::Progress),
) -> Result<Generated, llmsim_planner::sim::SimError> {
    let mut rows = Recorded::default();
    let mut source = AnySource::new(scenario);
    source.keep_rows();
    if let Some(cluster) = &scenario.cluster {
        // The cluster decides when a closed loop's users send again.
        let options = llmsim_planner::metrics::CollectorOptions::default();
        let stepping = llmsim_planner::sim::Stepping::Exact;
        llmsim_planner::cluster::run_from(
            scenario,
            cluster,
            &mut source,
            options,
            true,
            &mut rows,
            progress,
            stepping,
        )?;
        return Ok((rows.0, source.row_content()));
    }
    let mut engine = Engine::new(scenario.engine_config());
    let limits = llmsim_planner::sim::RunLimits::default();
    let delay_ns = llmsim_core::time::secs_to_nanos(scenario.latency.request_overhead_ms / 1e3);
    llmsim_planner::sim::drive_limited(&mut engine, &mut source, &mut rows, &limits, delay_ns, |_, _| {}, progress)?;
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
    let mut bytes = Vec::new();
    trace::write_with_content(&mut bytes, &rows, content.as_deref()).map_err(|e| csv_failure(&a.output, e))?;
    write_output(&a.output, &bytes)
}
