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
/// Its v2 line (the `v2` feature), not v3: v3 keeps freed pages for a
/// second before returning them (`purge_delay` 1,000 ms against v2's 10),
/// so a run whose vectors double holds their old buffers: the million
/// mixed requests peaked at 116 MB under v3 and 69 MB under v2, the
/// shipped H100 calibration at 172 MB and 57 MB, at the same speed on one
/// thread and 3-7% slower on two (docs/performance.md).
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
