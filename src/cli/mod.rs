//! The command line: argument parsing and one module per subcommand. Only
//! `main` turns a [`CliError`] into an exit code.

pub mod bench;
pub mod calibrate;
pub mod capacity;
pub mod diff;
pub mod experiments;
pub mod explain;
pub mod fidelity;
pub mod kernels;
pub mod merge;
pub mod progress;
pub mod run;
pub mod runtime;
pub mod serve;
pub mod sweep;
pub mod trace;

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use llmsim_scenario::config::{ConfigError, Override, Scenario};

#[derive(Debug, Parser)]
#[command(
    name = "llmsim",
    version,
    about = "Capacity planner for LLM serving: a vLLM-style engine in virtual time",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Predict a scenario: TTFT, ITL, TPOT, E2E, throughput, KV use.
    Run(run::RunArgs),
    /// Write the requests a scenario generates as a trace CSV.
    Trace(trace::TraceArgs),
    /// Print the effective configuration (every default filled in) and the
    /// derived capacity.
    Explain(explain::ExplainArgs),
    /// Run a scenario over axes of values (cartesian product, in parallel).
    Sweep(sweep::SweepArgs),
    /// Join the shard files of a sweep into what one run would have written.
    Merge(merge::MergeArgs),
    /// Find the highest arrival rate that meets every SLO.
    Capacity(capacity::CapacityArgs),
    /// Run every experiment in scenarios/experiments/ and write its table to
    /// results/ (or, with --check, fail if results/ is out of date).
    Experiments(experiments::ExperimentsArgs),
    /// Serve an OpenAI-compatible API whose tokens are timed by the engine
    /// in real time.
    Serve(serve::ServeArgs),
    /// Load-test an OpenAI-compatible server and write a vLLM-style result.
    Bench(bench::BenchArgs),
    /// Compare a prediction (`run --json`) with a measured load test.
    Diff(diff::DiffArgs),
    /// Fit efficiency and overhead figures to measured runs and write a
    /// calibration profile.
    Calibrate(calibrate::CalibrateArgs),
    /// Predict real measured runs before and after calibration: write
    /// results/fidelity.md and the shipped calibration profile.
    Fidelity(fidelity::FidelityArgs),
    /// Turn NVIDIA AIConfigurator's measured kernel tables (CSV) into a
    /// hardware profile's `kernels:`.
    Kernels(kernels::KernelsArgs),
}

/// Why a command failed, and so which exit code `main` uses.
#[derive(Debug)]
pub enum CliError {
    /// Bad usage or configuration (exit 2).
    Usage(String),
    /// The work could not be done, e.g. an output file could not be written (exit 1).
    Failure(String),
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> Self {
        CliError::Usage(e.to_string())
    }
}

impl From<llmsim_scenario::input::InputError> for CliError {
    fn from(e: llmsim_scenario::input::InputError) -> Self {
        CliError::Usage(e.to_string())
    }
}

impl From<llmsim_scenario::trace::TraceError> for CliError {
    fn from(e: llmsim_scenario::trace::TraceError) -> Self {
        CliError::Usage(e.to_string())
    }
}

impl CliError {
    /// A run that stopped at a run limit: the scenario is beyond what llmsim
    /// simulates, a configuration problem (exit 2).
    pub fn sim(scenario: &Scenario, e: llmsim_planner::run_driver::SimError) -> CliError {
        CliError::Usage(format!("{}: {e}", scenario.source.display()))
    }

    pub fn message(&self) -> &str {
        match self {
            CliError::Usage(m) | CliError::Failure(m) => m,
        }
    }
}

pub fn dispatch(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Run(a) => run::execute(a),
        Command::Trace(a) => trace::execute(a),
        Command::Explain(a) => explain::execute(a),
        Command::Sweep(a) => sweep::execute_sweep(a),
        Command::Merge(a) => merge::execute(a),
        Command::Capacity(a) => capacity::execute(a),
        Command::Experiments(a) => experiments::execute(a),
        Command::Serve(a) => serve::execute(a),
        Command::Bench(a) => bench::execute(a),
        Command::Diff(a) => diff::execute(a),
        Command::Calibrate(a) => calibrate::execute(a),
        Command::Fidelity(a) => fidelity::execute(a),
        Command::Kernels(a) => kernels::execute(a),
    }
}

/// A scenario file and the changes made to it on the command line.
#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Scenario YAML file (see scenarios/).
    pub scenario: PathBuf,
    /// Override a scenario key before validation, e.g.
    /// --set scheduler.max_batch_tokens=2048 (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub set: Vec<String>,
    /// Override workload.seed.
    #[arg(long)]
    pub seed: Option<u64>,
}

impl ScenarioArgs {
    pub fn overrides(&self) -> Result<Vec<Override>, CliError> {
        let mut all = self
            .set
            .iter()
            .map(|s| Override::parse(s).map_err(|e| CliError::Usage(format!("--set {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(seed) = self.seed {
            all.push(Override {
                path: vec!["workload".into(), "seed".into()],
                value: llmsim_scenario::yaml::Value::Number(seed.into()),
            });
        }
        Ok(all)
    }

    pub fn load(&self) -> Result<Scenario, CliError> {
        Ok(llmsim_scenario::config::load_scenario_with(&self.scenario, &self.overrides()?)?)
    }
}

/// Writes bytes to a file, or to stdout for `-`.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    if path == Path::new("-") {
        return print_bytes(bytes);
    }
    std::fs::write(path, bytes).map_err(|e| cannot_write(path, e))
}

/// A failure to write `path`, naming it.
fn cannot_write(path: &Path, e: impl std::fmt::Display) -> CliError {
    CliError::Failure(format!("cannot write {}: {e}", path.display()))
}

/// Writes a CSV to a file, or to stdout for `-`, as `write` makes it
/// (buffered), not built in memory first; a closed pipe is not a failure,
/// as for [`print_bytes`].
pub fn write_output_with<F>(path: &Path, write: F) -> Result<(), CliError>
where
    F: FnOnce(&mut dyn Write) -> csv::Result<()>,
{
    let failed = |e: csv::Error| match e.kind() {
        csv::ErrorKind::Io(io) if path == Path::new("-") && io.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(csv_failure(path, e)),
    };
    if path == Path::new("-") {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        return write(&mut out).or_else(failed);
    }
    let file = std::fs::File::create(path).map_err(|e| cannot_write(path, e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
    write(&mut out).or_else(failed)?;
    out.into_inner().map_err(|e| cannot_write(path, e.error()))?;
    Ok(())
}

/// Prints to stdout; a closed pipe (`| head`) is not a failure.
pub fn print_bytes(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Failure(format!("cannot write to stdout: {e}"))),
    }
}

pub fn print(text: &str) -> Result<(), CliError> {
    print_bytes(text.as_bytes())
}

/// Turns a CSV export error into a failure naming the file.
pub fn csv_failure(what: &Path, e: csv::Error) -> CliError {
    cannot_write(what, e)
}
