//! The composition root of the planner's threads: the rayon pools that
//! `sweep`, `experiments`, `calibrate` and `fidelity` run their points on,
//! and the tokio runtime `llmsim bench` sends its requests from. Library
//! modules take a pool or a runtime as an argument and never build one, so
//! what runs where is decided here, in the CLI layer, in one place. (The
//! server's runtimes and threads are built in [`super::serve`].)

use super::CliError;

/// A pool of `threads` workers; `None` or `Some(0)` is one per core.
/// Results do not depend on the count: every run is single-threaded and
/// gathered in order.
pub fn pool(threads: Option<usize>) -> Result<rayon::ThreadPool, CliError> {
    let mut builder = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        builder = builder.num_threads(n);
    }
    builder.build().map_err(|e| match threads {
        Some(n) => CliError::Failure(format!("cannot start {n} worker threads: {e}")),
        None => CliError::Failure(format!("cannot start worker threads: {e}")),
    })
}

/// The runtime of `llmsim bench`: two workers (the machines this is built
/// for have two cores; more threads only add switching).
pub fn bench_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Failure(format!("cannot start the async runtime: {e}")))
}
