//! The `llmsim` binary: parse arguments, run, map errors to exit codes.
//! Exit codes: 0 success, 1 the work failed, 2 bad usage or configuration.

use std::process::ExitCode;

use clap::Parser;
use llmsim::cli::{Cli, CliError, dispatch};

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
