//! `llmsim fidelity`: predict real measured runs before and after
//! calibration and write `results/fidelity.md` and the shipped calibration
//! profile; with `--check`, fail when either is not what a fresh run gives.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, print};
use llmsim_analysis::calibrate::fidelity;

#[derive(Debug, Args)]
pub struct FidelityArgs {
    /// The repository root the suites' files are read from and written to.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub root: PathBuf,
    /// Write nothing; predict every run at the recorded fits and fail,
    /// naming the first differing line, if a committed file differs.
    #[arg(long)]
    pub check: bool,
    /// Fit nothing: write every file from the fits results/fidelity-fits.yml
    /// records (after a change that moves no fitted value).
    #[arg(long, conflicts_with_all = ["check", "refit"])]
    pub replay: bool,
    /// Fit only these suites (comma-separated ids), predicting the others at
    /// the values results/fidelity-fits.yml records (default: fit every suite).
    #[arg(long, value_name = "ID,...", value_delimiter = ',')]
    pub refit: Vec<String>,
    /// Worker threads (default: one per core). The output is the same at
    /// any count.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

pub fn execute(a: FidelityArgs) -> Result<(), CliError> {
    let pool = super::runtime::pool(a.threads.map(usize::from))?;
    // How much each suite simulated, on stderr: the split between runs and
    // reuses can vary with the thread count, the files cannot.
    let mut done = |suite: &fidelity::Suite, o: &llmsim_analysis::calibrate::Outcome| {
        let (ran, reused) = o.simulations;
        eprintln!("{}: {ran} simulations run, {reused} reused", suite.id);
    };
    let mode = match (a.check, a.replay) {
        (true, _) => fidelity::Mode::Check,
        (_, true) => fidelity::Mode::Replay,
        _ => fidelity::Mode::Fit { refit: a.refit.clone() },
    };
    let files = pool.install(|| fidelity::generate_with(&a.root, &mode, &mut done))?;
    let mut out = String::new();
    for f in &files {
        let path = a.root.join(&f.path);
        if a.check {
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            if committed != f.text {
                let line = committed.lines().zip(f.text.lines()).position(|(x, y)| x != y);
                let at = line.map_or_else(|| "its end".to_string(), |l| format!("line {}", l + 1));
                return Err(CliError::Failure(format!(
                    "{} differs from a fresh run at {at}: run `llmsim fidelity` and commit the result",
                    path.display()
                )));
            }
            out.push_str(&format!("{} is current\n", f.path.display()));
        } else {
            std::fs::write(&path, &f.text)
                .map_err(|e| CliError::Failure(format!("cannot write {}: {e}", path.display())))?;
            out.push_str(&format!("wrote {}\n", f.path.display()));
        }
    }
    print(&out)
}
