//! The `llmsim` binary: parse arguments, run, map errors to exit codes.
//! Exit codes: 0 success, 1 the work failed, 2 bad usage or configuration.

use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, CliError, dispatch};

mod cli;

/// mimalloc instead of glibc's malloc: a calibration runs tens of thousands
/// of simulations on rayon's threads, each growing block pools of up to
/// tens of MB; under glibc the freed memory fragmented across its
/// per-thread arenas and a fit over 131 runs grew past 15 GB (20 GB after
/// five minutes). mimalloc returns it: the same fit stays near 200 MB.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llmsim: error: {}", e.message());
            ExitCode::from(match e {
                CliError::Usage(_) => 2,
                CliError::Failure(_) => 1,
            })
        }
    }
}
