//! `llmsim sweep`: a scenario over axes of values, points in parallel.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{CliError, csv_failure, print, write_output};
use llmsim_analysis::capacity::Slo;
use llmsim_analysis::plot::Plot;
use llmsim_analysis::sweep::exec::{ExecOptions, execute};
use llmsim_analysis::sweep::plan::Plan;
use llmsim_analysis::sweep::shard::{ShardFile, ShardSpec};
use llmsim_analysis::sweep::{SweepData, file, output};
use llmsim_scenario::config::Override;

/// Most seeds per point.
pub const MAX_SEEDS: u32 = 10_000;

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// A sweep file (base scenario and axes, see scenarios/sweeps/) or a
    /// scenario file.
    pub file: PathBuf,
    /// An axis: KEY=a,b,c or KEY=lo:hi:step (inclusive), e.g.
    /// --set workload.arrivals.poisson.rate=10:100:10, --set
    /// hardware=h100-80gb,a100-80gb; or, with one value, a plain override.
    /// Repeatable. Points are the cartesian product, first axis outermost
    /// (a sweep file's axes come first). Plain overrides apply before axes.
    #[arg(long = "set", value_name = "KEY=VALUES")]
    pub set: Vec<String>,
    /// Set workload.seed for every point.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs per point, with seeds s, s+1, ..., s+N-1 (s = the point's
    /// workload.seed); metrics become means with a 95% Student-t interval.
    #[arg(long, value_name = "N")]
    pub seeds: Option<u32>,
    /// Worker threads (default: RAYON_NUM_THREADS, else one per core).
    /// Output bytes do not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Run only shard K of N (K from 0 to N-1; points K, K+N, K+2N, ...)
    /// and write a shard file with --output; join shards with `llmsim merge`.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// The shard file to write (with --shard).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub out: SweepOutputs,
}

/// Where a sweep's results go (shared with `llmsim merge`).
#[derive(Debug, Clone, Args)]
pub struct SweepOutputs {
    /// Write one CSV row per point (axis values, then metrics with units in
    /// the column names); `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write a JSON array of every point's full results; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write SVG plots (p50 and p99 of each latency against the first axis,
    /// one line per value of the second) into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Draw an SLO line on the plots: METRIC=BOUND in ms, e.g.
    /// ttft_p99_ms=500 (repeatable).
    #[arg(long, value_name = "METRIC=MS")]
    pub slo: Vec<String>,
    /// Print no table and no progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

impl SweepOutputs {
    pub fn slos(&self) -> Result<Vec<Slo>, CliError> {
        let slos: Vec<Slo> = self
            .slo
            .iter()
            .map(|s| Slo::parse(s).map_err(|e| CliError::Usage(format!("--slo {e}"))))
            .collect::<Result<_, _>>()?;
        if let Some(s) = slos.iter().find(|s| s.class.is_some()) {
            return Err(CliError::Usage(format!(
                "--slo {}: the plots draw run-wide figures; a class's SLO is checked by `llmsim capacity`",
                s.name()
            )));
        }
        Ok(slos)
    }

    /// Writes the CSV, JSON and plots asked for and prints the table.
    pub fn write(&self, data: &SweepData) -> Result<(), CliError> {
        let slos = self.slos()?;
        if let Some(path) = &self.csv {
            write_output(path, &output::csv(data).map_err(|e| csv_failure(path, e))?)?;
        }
        if let Some(path) = &self.json {
            write_output(path, output::json(data).as_bytes())?;
        }
        if let Some(dir) = &self.plot {
            write_plots(
                dir,
                &llmsim_analysis::plot::sweep::plots(data, &slos).map_err(|e| CliError::Usage(e.to_string()))?,
            )?;
        }
        let to_stdout = [&self.csv, &self.json].iter().any(|p| p.as_deref() == Some(Path::new("-")));
        if !self.quiet && !to_stdout {
            print(&output::table(data))?;
        }
        Ok(())
    }
}

/// Writes plots into `dir`, creating it.
pub fn write_plots(dir: &Path, plots: &[Plot]) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::Failure(format!("cannot create {}: {e}", dir.display())))?;
    for p in plots {
        write_output(&dir.join(&p.file), p.svg.as_bytes())?;
    }
    Ok(())
}

/// The plan the arguments describe.
fn plan(a: &SweepArgs) -> Result<Plan, CliError> {
    let usage = CliError::Usage;
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Sweep, &a.file)?;
    let mut plan = if file::is_sweep_file(&text) {
        let f = file::load(&a.file)?;
        Plan { base: f.base, fixed: f.fixed, axes: f.axes, seeds: f.seeds.unwrap_or(1) }
    } else {
        Plan { base: a.file.clone(), fixed: Vec::new(), axes: Vec::new(), seeds: 1 }
    };
    for s in &a.set {
        plan.add_set(s).map_err(CliError::Usage)?;
    }
    if let Some(o) = plan.fixed.iter().find(|o| plan.axes.iter().any(|a| a.key == o.key())) {
        return Err(usage(format!("`{}` is both an axis and a plain override; keep one", o.key())));
    }
    if let Some(seed) = a.seed {
        plan.fixed.push(Override { path: vec!["workload".into(), "seed".into()], value: seed.into() });
    }
    if let Some(n) = a.seeds {
        plan.seeds = n;
    }
    if !(1..=MAX_SEEDS).contains(&plan.seeds) {
        return Err(usage(format!("--seeds {}: must be from 1 to {MAX_SEEDS}", plan.seeds)));
    }
    Ok(plan)
}

/// The shard to run, after checking the outputs fit it.
fn shard(a: &SweepArgs) -> Result<Option<ShardSpec>, CliError> {
    let Some(text) = &a.shard else {
        if a.output.is_some() {
            return Err(CliError::Usage("--output writes a shard file: use it with --shard K/N".into()));
        }
        return Ok(None);
    };
    let spec = ShardSpec::parse(text).map_err(|e| CliError::Usage(e.to_string()))?;
    if a.output.is_none() {
        return Err(CliError::Usage(format!("--shard {text}: give the shard file to write with --output FILE")));
    }
    if a.out.csv.is_some() || a.out.json.is_some() || a.out.plot.is_some() {
        return Err(CliError::Usage(format!(
            "--shard {text}: a shard writes only its shard file (--output); `llmsim merge` writes the CSV, JSON and plots"
        )));
    }
    Ok(Some(spec))
}

pub fn execute_sweep(a: SweepArgs) -> Result<(), CliError> {
    let plan = plan(&a)?;
    let spec = shard(&a)?;
    a.out.slos()?;
    let pool = super::runtime::pool(Some(a.threads))?;
    let points = pool.install(|| plan.points()).map_err(|e| CliError::Usage(e.to_string()))?;
    let opts = ExecOptions { progress: !a.out.quiet, shard: spec };
    let data =
        execute(&plan, &points, &pool, opts).map_err(|e| CliError::Usage(format!("{}: {e}", a.file.display())))?;
    match (spec, &a.output) {
        (Some(spec), Some(path)) => {
            let file = ShardFile::new(spec, plan.fingerprint(&points), points.len(), data);
            write_output(path, llmsim_core::util::to_json(&file).as_bytes())?;
            if !a.out.quiet && path != Path::new("-") {
                print(&output::table(&file.data))?;
            }
            Ok(())
        }
        _ => a.out.write(&data),
    }
}
