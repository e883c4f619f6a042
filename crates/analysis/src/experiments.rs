//! Experiments as code: the simulator's claims as tables anyone can
//! regenerate, each checked against a prediction written down before the run.
//!
//! An experiment file (`scenarios/experiments/*.yml`) names a base scenario,
//! the one key it changes and the levels, the metrics to tabulate, and its
//! predictions: closed-form expressions over the configuration (`expr`,
//! `vars`) with a tolerance. [`load_dir`] validates every file before
//! anything runs; [`run`] simulates every variant of every experiment on
//! each of its seeds in parallel and returns them in file and level order,
//! so the output is the same bytes at any thread count; `render` turns outcomes into the
//! committed `results/` tables and `check` compares them with what is
//! committed.

pub mod check;
pub mod expr;
pub mod measure;
pub mod render;
pub mod spec;
pub mod vars;

use std::path::Path;

use rayon::prelude::*;

pub use check::{Generated, Mismatch};
use llmsim_scenario::config::ConfigError;
pub use measure::{MeasureFailed, Measured, OverSeeds};
pub use spec::Spec;

/// An experiment and what each of its rows measured over its seeds.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub spec: Spec,
    /// One per row, in row order.
    pub measured: Vec<OverSeeds>,
}

/// Loads and validates every experiment file in `dir`, in file-name order.
pub fn load_dir(dir: &Path) -> Result<Vec<Spec>, ConfigError> {
    spec::files_in(dir)?.iter().map(|f| spec::load(f)).collect()
}

/// Runs every row of every experiment on each of its seeds, on `pool`
/// (built by the CLI, `cli::runtime`). Runs are independent; results come
/// back in order, the same at any thread count.
pub fn run(specs: Vec<Spec>, pool: &rayon::ThreadPool) -> Result<Vec<Outcome>, MeasureFailed> {
    // (experiment, row, seed) in order.
    let points: Vec<(usize, usize, llmsim_scenario::config::Scenario)> = specs
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.rows.iter().enumerate().flat_map(move |(r, row)| {
                crate::sweep::plan::seeds_of(&row.scenario, s.seeds).into_iter().map(move |seed| {
                    let mut scenario = row.scenario.clone();
                    scenario.workload.seed = seed;
                    (i, r, scenario)
                })
            })
        })
        .collect();
    let measured: Vec<(usize, usize, Measured)> = pool.install(|| {
        points.par_iter().map(|(i, r, s)| measure::measure(s).map(|m| (*i, *r, m))).collect::<Result<_, _>>()
    })?;
    let mut runs: Vec<Vec<Vec<Measured>>> = specs.iter().map(|s| vec![Vec::new(); s.rows.len()]).collect();
    for (i, r, m) in measured {
        runs[i][r].push(m);
    }
    Ok(specs
        .into_iter()
        .zip(runs)
        .map(|(spec, rows)| Outcome { spec, measured: rows.iter().map(|seeds| OverSeeds::of(seeds)).collect() })
        .collect())
}

/// Every results file: `README.md`, then `<name>.md` per experiment.
/// `spec_dir` is the experiments directory as readers should see it.
pub fn render_all(outcomes: &[Outcome], spec_dir: &str) -> Vec<Generated> {
    let mut files = vec![("README.md".to_string(), render::index(outcomes, spec_dir))];
    files.extend(outcomes.iter().map(|o| (format!("{}.md", o.spec.name), render::experiment(o, spec_dir))));
    files
}

/// A directory as given on the command line, with `/` separators and no
/// `./`, so the generated text does not depend on how it was spelled.
pub fn display_dir(dir: &Path) -> String {
    let parts: Vec<String> = dir
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.is_empty() { ".".to_string() } else { parts.join("/").replace("//", "/") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_dir_drops_dot_segments_and_uses_slashes() {
        assert_eq!(display_dir(Path::new("./scenarios/experiments/")), "scenarios/experiments");
        assert_eq!(display_dir(Path::new(".")), ".");
    }
}
