//! `llmsim calibrate SCENARIO MEASURED...`: fit efficiency and overhead
//! figures to measured runs, report how well they predict, and write a
//! calibration profile.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{CliError, ScenarioArgs, print, write_output};
use llmsim_analysis::calibrate::runs::{self, Excluded, LoadOptions, Loaded, ScenarioSource};
use llmsim_analysis::calibrate::{self, Error, MetricChoice, Setup, keys, optim, profile, render};
use llmsim_analysis::sweep::metric::Metric;

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Measured runs: per-request JSON (llmsim bench, vllm bench serve
    /// --save-detailed, guidellm, AIPerf profile_export.jsonl), a trace CSV with ttft_ms/e2e_ms columns,
    /// a measured table CSV (sweep-style columns), or an inference-perf run
    /// directory.
    #[arg(required = true, value_name = "MEASURED")]
    pub measured: Vec<PathBuf>,
    /// Keys to fit, comma-separated or repeated, each KEY or KEY=LO:HI
    /// (default: efficiency.compute, efficiency.memory,
    /// latency.step_overhead_ms, latency.request_overhead_ms).
    #[arg(long, value_name = "KEY[=LO:HI],...")]
    pub fit: Vec<String>,
    /// Loss metrics, sweep names (default: ttft_mean_ms, ttft_p90_ms,
    /// tpot_mean_ms or itl_mean_ms, e2e_mean_ms, e2e_p90_ms).
    #[arg(long, value_name = "M,...", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// How a run's log errors count: `squared` (default) or `cauchy:PCT`,
    /// which counts errors beyond about PCT percent less and less, so a run
    /// near its knee does not decide the fit alone (e.g. cauchy:25).
    #[arg(long, value_name = "squared|cauchy:PCT", default_value = "squared")]
    pub loss: String,
    /// Write the calibration profile here (efficiency and latency keys only).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Measured runs to predict with the fit but not fit on.
    #[arg(long, value_name = "MEASURED", num_args = 1..)]
    pub holdout: Vec<PathBuf>,
    /// Fit saturated runs too (failures, or a queue still growing).
    #[arg(long)]
    pub include_saturated: bool,
    /// Skip the leave-one-out fits.
    #[arg(long)]
    pub no_leave_one_out: bool,
    /// Fit nothing: predict every run with the scenario as it is (its
    /// calibration profile applied) and report the errors, e.g. to check a
    /// shipped profile against your own measured runs.
    #[arg(long, conflicts_with_all = ["fit", "prior", "output"])]
    pub no_fit: bool,
    /// Simulate at most this many seconds of each inference-perf stage or
    /// table row with a duration (their figures are steady-state figures).
    #[arg(long, value_name = "SECONDS", conflicts_with = "full_stages")]
    pub sample_s: Option<f64>,
    /// Simulate every long stationary stage whole. By default a stage of
    /// one arrival rate that runs for minutes is predicted from a window
    /// of it that has reached its steady state (docs/calibration.md,
    /// "Long stages"): within 1% of the whole stage, several times faster.
    #[arg(long)]
    pub full_stages: bool,
    /// Most loss evaluations of one fit.
    #[arg(long, value_name = "N", default_value_t = 400)]
    pub max_evals: usize,
    /// Fit first on this many runs spread evenly over the fitted ones,
    /// then finish on all of them from there (docs/calibration.md,
    /// "Sampled fits"); only when more than twice as many runs are
    /// fitted. 0 fits on every run throughout.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub sample_runs: usize,
    /// Worker threads (default: RAYON_NUM_THREADS, else one per core).
    /// Output bytes do not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Keep only the rows of an AIConfigurator silicon CSV whose COLUMN
    /// holds one of the values (repeatable; every one must hold), e.g.
    /// --where system=h200_sxm --where backend=vllm.
    #[arg(long = "where", value_name = "COLUMN=V1|V2")]
    pub filters: Vec<String>,
    /// Requests each user of an AIConfigurator run sends (the benchmark
    /// AIConfigurator generates sends 20).
    #[arg(long, value_name = "N", default_value_t = llmsim_analysis::measured::aic::DEFAULT_ROUNDS,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub aic_rounds: u32,
    /// A prior for a fitted key: its typical value and one standard
    /// deviation (repeatable). Keys a profile holds have default priors
    /// (docs/calibration.md); this replaces one.
    #[arg(long, value_name = "KEY=MEAN:SIGMA")]
    pub prior: Vec<String>,
    /// Fit without priors, on the runs alone.
    #[arg(long)]
    pub no_priors: bool,
    /// What leave-one-out leaves out together: an experiment (a load test's
    /// stages, a table's group), a model, or a measured source; several,
    /// comma-separated, run one pass each (the first is the one shown).
    #[arg(long, value_name = "experiment|model|source", default_value = "experiment")]
    pub leave_out: String,
}

/// The loss metrics `--metrics` names.
pub fn parse_metrics(names: &[String]) -> Result<MetricChoice, String> {
    if names.is_empty() {
        return Ok(MetricChoice::Default);
    }
    let mut out = Vec::new();
    for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let allowed: Vec<String> =
            Metric::all().into_iter().filter(|m| calibrate::loss_metric_allowed(*m)).map(|m| m.name()).collect();
        let m = Metric::parse(n).filter(|m| calibrate::loss_metric_allowed(*m)).ok_or_else(|| {
            let near = llmsim_core::util::nearest(n, allowed.iter().map(String::as_str))
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            format!("--metrics `{n}` is not a loss metric{near}; choose from {}", allowed.join(", "))
        })?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    Ok(MetricChoice::Listed(out))
}

/// `--loss squared` or `--loss cauchy:PCT` (PCT in (0, 1000]).
pub fn parse_loss(text: &str) -> Result<calibrate::Loss, String> {
    calibrate::Loss::parse(text)
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        match e {
            Error::Input(m) => CliError::Usage(m),
            Error::Work(m) => CliError::Failure(m),
        }
    }
}

/// Loads every run of `files` on the scenario, and the runs they exclude.
pub fn load_runs(src: &ScenarioSource, files: &[PathBuf], opts: &LoadOptions) -> Result<Loaded, CliError> {
    let mut out = Loaded::default();
    for f in files {
        out.extend(runs::load(src, f, opts)?);
    }
    Ok(out)
}

/// Refuses measured files whose every run is excluded: nothing to fit.
fn check_not_all_excluded(loaded: &Loaded) -> Result<(), CliError> {
    if !loaded.runs.is_empty() || loaded.excluded.is_empty() {
        return Ok(());
    }
    let list: Vec<String> =
        loaded.excluded.iter().map(|e| format!("  {} ({}): {}", e.name, e.source, e.reason)).collect();
    Err(CliError::Usage(format!(
        "every measured run is excluded (the engine cannot represent it), so none can be fitted:\n{}",
        list.join("\n")
    )))
}

pub fn execute(a: CalibrateArgs) -> Result<(), CliError> {
    let keys = if a.no_fit { Vec::new() } else { keys::parse(&a.fit).map_err(|e| CliError::Usage(e.to_string()))? };
    let metrics = parse_metrics(&a.metrics).map_err(CliError::Usage)?;
    let loss = parse_loss(&a.loss).map_err(CliError::Usage)?;
    if let Some(out) = &a.output
        && let Some(k) = keys.iter().find(|k| !profile::storable(&k.key))
    {
        return Err(CliError::Usage(format!(
            "-o {}: a calibration profile holds only efficiency and latency keys ({}); `{}` belongs in a \
             scenario: fit it without -o, or drop it from --fit",
            out.display(),
            llmsim_scenario::config::calibration::KEYS.join(", "),
            k.key
        )));
    }
    if let Some(s) = a.sample_s.filter(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(CliError::Usage(format!("--sample-s {s} is not allowed: give seconds greater than 0")));
    }
    if a.max_evals < 10 {
        return Err(CliError::Usage(format!("--max-evals {} is too few: give 10 or more", a.max_evals)));
    }
    let src = ScenarioSource::load(&a.scenario.scenario, &a.scenario.overrides()?)?;
    let aic_filters = a
        .filters
        .iter()
        .map(|f| llmsim_analysis::measured::aic::Filter::parse(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::Usage)?;
    let leave_out = a
        .leave_out
        .split(',')
        .map(calibrate::LeaveOut::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::Usage)?;
    let opts = LoadOptions { sample_s: a.sample_s, aic_filters, aic_rounds: a.aic_rounds, steady: !a.full_stages };
    let fit_runs = load_runs(&src, &a.measured, &opts)?;
    check_not_all_excluded(&fit_runs)?;
    let holdout = load_runs(&src, &a.holdout, &opts)?;
    let excluded: Vec<Excluded> = fit_runs.excluded.into_iter().chain(holdout.excluded).collect();
    let given = keys::parse_priors(&a.prior, &keys).map_err(CliError::Usage)?;
    if a.no_priors && !given.is_empty() {
        return Err(CliError::Usage("--prior and --no-priors contradict each other: give one".into()));
    }
    let priors = keys
        .iter()
        .map(|k| match given.iter().find(|(g, _)| *g == k.key) {
            Some((_, p)) => Some(*p),
            None if a.no_priors => None,
            None => keys::default_prior(&k.key),
        })
        .collect();
    let setup = Setup {
        priors,
        keys,
        metrics,
        loss,
        include_saturated: a.include_saturated,
        leave_one_out: !a.no_leave_one_out && !a.no_fit,
        leave_out,
        optim: optim::Settings { max_evals: a.max_evals, ..optim::Settings::default() },
        sample_runs: (a.sample_runs > 0).then_some(a.sample_runs),
    };
    let pool = super::runtime::pool(Some(a.threads))?;
    // With --no-fit the "fit" is the scenario as it is, recorded as found.
    let none = a.no_fit.then(|| calibrate::Recorded {
        fit: calibrate::Fit { x: Vec::new(), loss: 0.0, evals: 0, converged: true },
        start_loss: 0.0,
        folds: Vec::new(),
    });
    let mut outcome =
        pool.install(|| calibrate::calibrate_or_replay(fit_runs.runs, holdout.runs, &setup, none.as_ref()))?;
    outcome.excluded = excluded;
    // On stderr: with several threads the split between simulations run
    // and reused can vary, the report cannot.
    eprintln!("{} simulations run, {} reused", outcome.simulations.0, outcome.simulations.1);
    let scenario = a.scenario.scenario.display().to_string();
    print(&render::render(&outcome, &scenario))?;
    if let Some(path) = &a.output {
        let name = path.file_stem().map_or_else(|| "calibration".into(), |s| s.to_string_lossy().into_owned());
        write_output(path, profile::render(&outcome, &name, &scenario, &command_line()).as_bytes())?;
        if path != Path::new("-") {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// This command as a shell would take it back: `llmsim` and the arguments
/// given, each quoted where it needs to be, but for `--threads` (the fit is
/// the same at any count) and the directory of `-o` (its file name is the
/// profile's name). The profile records it, so the fit can be run again as
/// it was.
fn command_line() -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./=,:-+@%".contains(c);
    let quote = |a: &str| match !a.is_empty() && a.chars().all(plain) {
        true => a.to_string(),
        false => format!("'{}'", a.replace('\'', "'\\''")),
    };
    let mut out = vec!["llmsim".to_string()];
    let mut args = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--threads" => {
                args.next();
            }
            _ if a.starts_with("--threads=") => {}
            "-o" | "--output" => {
                let file = args.next().unwrap_or_default();
                let name = Path::new(&file).file_name().map_or(file.clone(), |n| n.to_string_lossy().into_owned());
                out.push(a);
                out.push(quote(&name));
            }
            _ => out.push(quote(&a)),
        }
    }
    out.join(" ")
}
