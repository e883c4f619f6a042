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
    /// Explain one key instead (repeatable): what it holds, its value in
    /// this scenario, its default, its range and what it means, from the
    /// key table (config/schema.rs, docs/scenario.md).
    #[arg(long = "key", value_name = "KEY.PATH")]
    pub key: Vec<String>,
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
    if let Some(c) = &s.cluster {
        let pooled = c.pools.iter().filter_map(|p| p.autoscale.as_ref().map(|a| (format!(" ({})", p.name), a)));
        for (name, a) in c.autoscale.as_ref().map(|a| (String::new(), a)).into_iter().chain(pooled) {
            out.push_str(&cold_start_line(&name, &a.cold_start));
        }
    }
    if let Some(c) = &s.calibration {
        out.push_str(&llmsim_scenario::config::calibration::explain(c));
    }
    out
}

/// `#   cold start    ...`: a new replica's wait, worked out.
fn cold_start_line(pool: &str, c: &llmsim_scenario::config::autoscale::ColdStart) -> String {
    let load = match c.load_gbps {
        Some(g) => format!("weights {:.3} GB at {g} GB/s ({:.3} s)", c.weight_bytes / 1e9, c.load_s()),
        None => "weights 0 s (no load_gbps)".to_string(),
    };
    format!(
        "#   cold start{pool} {:.3} s = {load} + engine start {} s + graph capture {} s\n",
        c.total_s(),
        c.engine_start_s,
        c.graph_capture_s
    )
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

/// One key's row of the key table and its value in `s`.
pub fn render_key(s: &Scenario, path: &str) -> Result<String, CliError> {
    use llmsim_scenario::config::{overrides::Override, schema};
    let kind = Override::parse_key(path).map_err(|e| CliError::Usage(format!("--key {e}")))?;
    let path = path.trim();
    let effective: llmsim_scenario::yaml::Value =
        llmsim_scenario::yaml::from_str(&llmsim_scenario::config::effective_yaml(s)).unwrap_or_default();
    let value = path.split('.').try_fold(&effective, |v, k| v.get(k));
    let shown = match value {
        Some(v) => llmsim_scenario::yaml::to_string(v).unwrap_or_default().trim_end().replace('\n', "\n             "),
        None => "unset".to_string(),
    };
    let mut out = format!("{path}\n  holds      {}\n  here       {shown}\n", kind.describe());
    match schema::row_of(path) {
        Some(row) => {
            let allowed = row.allowed();
            out.push_str(&format!("  unset      {}\n", row.unset.plain()));
            if !allowed.is_empty() {
                out.push_str(&format!("  allowed    {allowed}\n"));
            }
            if let Some(limit) = row.range.limit() {
                out.push_str(&format!("  why        {}\n", limit.why));
            }
            out.push_str(&format!("  meaning    {}\n", row.doc));
        }
        None => out.push_str("  (a key of a mapping; see the keys under it in docs/scenario.md)\n"),
    }
    Ok(out)
}

pub fn execute(a: ExplainArgs) -> Result<(), CliError> {
    let s = a.scenario.load()?;
    if a.key.is_empty() {
        return print(&render(&s));
    }
    let rows = a.key.iter().map(|k| render_key(&s, k)).collect::<Result<Vec<_>, _>>()?;
    print(&rows.join("\n"))
}
