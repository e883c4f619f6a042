//! `llmsim kernels`: NVIDIA AIConfigurator's measured kernel tables (as CSV)
//! turned into the `kernels:` a hardware profile carries for the
//! per-operator cost form (docs/calibration.md, "Measured kernel tables").

use std::path::PathBuf;

use clap::Args;

use super::{CliError, write_output};
use llmsim_analysis::measured::aic_kernels::{self, Table};
use llmsim_core::engine::cost::KernelTables;

#[derive(Debug, Args)]
pub struct KernelsArgs {
    /// AIConfigurator `gemm_perf` tables as CSV (gemm_dtype, m, n, k, latency in ms).
    #[arg(long, value_name = "CSV")]
    pub gemm: Vec<PathBuf>,
    /// AIConfigurator `custom_allreduce_perf` tables as CSV (num_gpus,
    /// message_size in elements, latency in ms): the engine's own all-reduce.
    #[arg(long, value_name = "CSV")]
    pub custom_allreduce: Vec<PathBuf>,
    /// AIConfigurator `nccl_perf` tables as CSV (their all_reduce rows of
    /// half): used for a GPU count no custom table gives.
    #[arg(long, value_name = "CSV")]
    pub nccl: Vec<PathBuf>,
    /// Where the figures were measured (kept as `kernels.source`).
    #[arg(long, value_name = "TEXT")]
    pub source: Option<String>,
    /// Write the YAML here (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn execute(a: KernelsArgs) -> Result<(), CliError> {
    if a.gemm.is_empty() && a.custom_allreduce.is_empty() && a.nccl.is_empty() {
        return Err(CliError::Usage(
            "give at least one table: --gemm, --custom-allreduce or --nccl (AIConfigurator's CSV tables)".into(),
        ));
    }
    let mut t = KernelTables { source: a.source.clone(), ..KernelTables::default() };
    let mut note = String::new();
    let inputs = [(Table::Gemm, &a.gemm), (Table::CustomAllreduce, &a.custom_allreduce), (Table::Nccl, &a.nccl)];
    for (table, files) in inputs {
        for f in files {
            let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::KernelTable, f)?;
            let rows = aic_kernels::import(&text, f, table, &mut t)?;
            note.push_str(&format!("{}: {rows} rows\n", f.display()));
        }
    }
    let yaml = aic_kernels::render(&t);
    match &a.output {
        Some(path) => {
            write_output(path, yaml.as_bytes())?;
            eprintln!("{note}wrote {}", path.display());
        }
        None => super::print(&yaml)?,
    }
    Ok(())
}
