//! `llmsim explain`: what will run, with nothing left to guess.

mod deployment;

use clap::Args;

use super::{CliError, ScenarioArgs, print};
use llmsim_core::util::thousands;
use llmsim_planner::report::summary;
use llmsim_scenario::config::Scenario;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// The effective configuration as a valid scenario, then derived figures
/// as comments.
pub fn render(s: &Scenario) -> String {
    let mut out = format!("# effective configuration of {} (defaults filled in)\n", s.source.display());
    out.push_str(&llmsim_scenario::config::effective_yaml(s));
    out.push_str("# derived\n");
    match &s.model.architecture {
        None => plain(s, &mut out),
        Some(a) => deployment::render(s, a, &mut out),
    }
    if let Some(c) = &s.calibration {
        out.push_str(&llmsim_scenario::config::calibration::explain(c));
    }
    out
}

/// The derived figures of a model given as two numbers (docs/engine.md).
fn plain(s: &Scenario, out: &mut String) {
    let c = &s.capacity;
    let cost = s.engine_config().cost;
    let decode = cost.step(1, 0);
    let prefill = cost.step(u64::from(s.scheduler.max_batch_tokens), u64::from(s.scheduler.max_batch_tokens));
    out.push_str(&format!(
        "#   weights       {:.3} GB = {} B parameters x {} bytes\n",
        c.weight_bytes / 1e9,
        s.model.weights.parameters_billions.unwrap_or(0.0),
        s.model.weights.bytes_per_parameter
    ));
    if !c.overridden {
        out.push_str(&format!(
            "#   usable        {:.3} GB = {} GiB x {} - weights\n",
            c.usable_bytes / 1e9,
            s.hardware.hbm_gib,
            s.model.kv_cache.gpu_memory_utilization
        ));
    }
    out.push_str(&format!("#   block         {} bytes = {} tokens\n", thousands(c.block_bytes), c.block_size));
    out.push_str(&format!("#   capacity      {}\n", summary::capacity_line(s)));
    out.push_str(&format!(
        "#   decode floor  {:.3} ms a step (weights only)\n#   full prefill  {:.3} ms for a step of {} tokens ({})\n",
        decode.total_s * 1e3,
        prefill.total_s * 1e3,
        s.scheduler.max_batch_tokens,
        if prefill.compute_bound() { "compute-bound" } else { "memory-bound" }
    ));
    if s.latency.per_sequence_overhead_us > 0.0 || s.latency.request_overhead_ms > 0.0 {
        out.push_str(&format!("#   overheads     {}\n", deployment::overheads(s)));
    }
}

pub fn execute(a: ExplainArgs) -> Result<(), CliError> {
    print(&render(&a.scenario.load()?))
}
