//! `llmsim merge`: join the shard files of a sweep into the CSV, JSON and
//! plots one unsplit run would have written, byte for byte.

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use super::sweep::SweepOutputs;
use llmsim_analysis::sweep::shard::{ShardFile, merge};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Shard files written by `llmsim sweep --shard K/N --output FILE`, in
    /// any order; every shard of the sweep is needed.
    #[arg(required = true, value_name = "SHARD")]
    pub shards: Vec<PathBuf>,
    #[command(flatten)]
    pub out: SweepOutputs,
}

pub fn execute(a: MergeArgs) -> Result<(), CliError> {
    a.out.slos()?;
    let data = merge(read_shards(&a.shards)?).map_err(|e| CliError::Usage(e.to_string()))?;
    a.out.write(&data)
}

/// Reads and checks shard files (`llmsim merge`, `capacity --over-time --shards`).
pub fn read_shards(paths: &[PathBuf]) -> Result<Vec<(PathBuf, ShardFile)>, CliError> {
    let mut shards = Vec::with_capacity(paths.len());
    for path in paths {
        let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Shard, path)?;
        let file = ShardFile::parse(&path.display().to_string(), &text).map_err(|e| CliError::Usage(e.to_string()))?;
        shards.push((path.clone(), file));
    }
    Ok(shards)
}
