//! `llmsim serve`, and the server's composition root: the runtimes and
//! threads are built here and handed in; the `server` modules create none.
//! The handlers run on a multi-threaded tokio runtime (`--workers`); each
//! model's driver (`server::Driver`: engine task or fixed timer) on a
//! thread with a single-threaded runtime of its own.
//!
//! Load the models and responses (a broken file stops here, with the same
//! errors as `run`, before any traffic), bind, print where we listen, and
//! serve until SIGINT, SIGTERM or SIGHUP. On the way out, the record files
//! are completed (requests still in flight are written as `in_flight`).
//! SIGHUP stops the server like the other two: a server started from a
//! terminal that closes, or by a supervisor that signals hang-up, must not
//! lose its record.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::CliError;
use llmsim_server::models::load_models;
use llmsim_server::{App, Clock, Driver, Options, Responses, conn};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The models file: names, engines and their settings.
    #[arg(long, value_name = "FILE", default_value = "scenarios/serve/models.yml")]
    pub models: PathBuf,
    /// Scripted answers (responses.yml); without it, the built-in answers.
    #[arg(long, value_name = "FILE")]
    pub responses: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (printed at start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Write each request's arrival and lengths as a trace CSV (one file per
    /// model when several are served), with the simulated times used.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Largest request body accepted; larger ones get HTTP 413.
    #[arg(long, value_name = "BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Also export vLLM's deprecated metric names (gpu_cache_usage_perc,
    /// time_per_output_token_seconds) that some routers still scrape.
    #[arg(long)]
    pub legacy_metrics: bool,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Connections open at once; past it new ones wait to be accepted.
    /// Default 10000, lowered to fit the open-file limit.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds a connection may take to send a whole request head (also
    /// closes idle keep-alive connections).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub header_timeout: f64,
    /// Seconds a request body may take to arrive; later, HTTP 408.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub body_timeout: f64,
    /// vLLM's flag: every response carries an `X-Request-Id` header (the
    /// request's own, else a new one).
    #[arg(long)]
    pub enable_request_id_headers: bool,
    /// End every stream with one `: llmsim ...` SSE comment line per choice
    /// (its simulated story). Off by default: guidellm counts a comment
    /// line as a chunk.
    #[arg(long)]
    pub stream_comments: bool,
}

/// The longest timeout a flag may ask for (one day).
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// A timeout flag's value as a duration, or a usage error.
fn timeout(flag: &str, secs: f64) -> Result<std::time::Duration, CliError> {
    if secs.is_finite() && secs > 0.0 && secs <= MAX_TIMEOUT_S {
        return Ok(std::time::Duration::from_secs_f64(secs));
    }
    let secs = super::bench::short(secs);
    Err(CliError::Usage(format!("{flag} {secs} is not allowed: give seconds in (0, {MAX_TIMEOUT_S}]")))
}

pub fn execute(a: ServeArgs) -> Result<(), CliError> {
    let header_timeout = timeout("--header-timeout", a.header_timeout)?;
    let body_timeout = timeout("--body-timeout", a.body_timeout)?;
    if a.max_connections == Some(0) {
        return Err(CliError::Usage("--max-connections 0 is not allowed: must be >= 1".into()));
    }
    let (max_connections, lowered) = conn::connection_cap(a.max_connections, conn::open_file_limit());
    let models = load_models(&a.models)?;
    refuse_pools(&models)?;
    let responses = match &a.responses {
        Some(path) => Responses::load(path)?,
        None => Responses::builtin(),
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = a.workers.filter(|&n| n > 0) {
        builder.worker_threads(n);
    }
    let runtime = builder.build().map_err(|e| CliError::Failure(format!("cannot start the async runtime: {e}")))?;
    let options = Options {
        max_body_bytes: a.max_body_bytes,
        legacy_metrics: a.legacy_metrics,
        record: a.record.clone(),
        max_connections,
        header_timeout,
        body_timeout,
        request_id_headers: a.enable_request_id_headers,
        stream_comments: a.stream_comments,
    };
    if let Some(why) = lowered {
        eprintln!("llmsim serve: {why}");
    }
    runtime.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| CliError::Failure(format!("cannot listen on {addr}: {e}")))?;
        let (app, drivers) = App::new(&models, responses, options, Clock::start_precise())
            .map_err(|e| CliError::Failure(e.to_string()))?;
        for driver in drivers {
            spawn_driver(driver)?;
        }
        let local =
            listener.local_addr().map_err(|e| CliError::Failure(format!("cannot read the bound address: {e}")))?;
        announce(&app, local)?;
        llmsim_server::serve(listener, app.clone(), shutdown_signal())
            .await
            .map_err(|e| CliError::Failure(format!("the server failed: {e}")))?;
        app.finish_records();
        eprintln!("llmsim serve: stopped");
        Ok(())
    })
}

/// Runs a model's driver (engine task or fixed timer) on a thread of its
/// own with its own timer, so its deadlines never queue behind the handlers
/// it wakes. The thread ends when the server drops its handles to the model.
fn spawn_driver(driver: Driver) -> Result<(), CliError> {
    let name = driver.name;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| CliError::Failure(format!("cannot start the runtime for model {name}: {e}")))?;
    let task = driver.task;
    std::thread::Builder::new()
        .name(format!("model {name}"))
        .spawn(move || runtime.block_on(task))
        .map(|_| ())
        .map_err(|e| CliError::Failure(format!("cannot start the thread for model {name}: {e}")))
}

/// The first stdout line is the address (tests and scripts read it).
fn announce(app: &App, local: std::net::SocketAddr) -> Result<(), CliError> {
    let names: Vec<&str> = app.models.iter().map(|m| m.spec.name.as_str()).collect();
    let mut out = std::io::stdout().lock();
    let text = format!(
        "llmsim serve: listening on http://{local}\nllmsim serve: models: {} (OpenAI base_url http://{local}/v1)\n",
        names.join(", ")
    );
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Failure(format!("cannot write to stdout: {e}")))?;
    for path in app.record_paths() {
        eprintln!("llmsim serve: recording requests to {}", path.display());
    }
    Ok(())
}

/// Completes on SIGINT (Ctrl-C), SIGTERM or SIGHUP, saying which.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let (term, hangup) = {
        use tokio::signal::unix::SignalKind;
        (unix_signal(SignalKind::terminate()), unix_signal(SignalKind::hangup()))
    };
    #[cfg(not(unix))]
    let (term, hangup) = (std::future::pending::<()>(), std::future::pending::<()>());
    let name = tokio::select! {
        () = ctrl_c => "SIGINT",
        () = term => "SIGTERM",
        () = hangup => "SIGHUP",
    };
    eprintln!("llmsim serve: {name}: stopping");
}

/// Completes when the signal arrives (never, if it cannot be watched).
#[cfg(unix)]
async fn unix_signal(kind: tokio::signal::unix::SignalKind) {
    match tokio::signal::unix::signal(kind) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

/// `llmsim serve` runs replicas behind one router; prefill/decode pools
/// (`cluster.prefill`/`cluster.decode`) are simulated by `llmsim run` only.
fn refuse_pools(models: &llmsim_server::models::ModelsFile) -> Result<(), CliError> {
    for (i, m) in models.models.iter().enumerate() {
        if m.cluster().is_some_and(|c| c.disagg.is_some()) {
            return Err(llmsim_scenario::config::ConfigError::new(
                &models.source,
                format!("models[{i}].cluster"),
                format!(
                    "model `{}` has prefill/decode pools (cluster.prefill, cluster.decode), which llmsim serve \
                     does not run: serve it colocated (cluster: {{ replicas: N, router: ... }}), or simulate \
                     the pools with llmsim run",
                    m.name
                ),
            )
            .into());
        }
        if let Some(c) = m.cluster().filter(|c| c.timeline.is_some()) {
            let key = if c.autoscale.is_some() || !c.pools.is_empty() { "autoscale/pools" } else { "timeline" };
            return Err(llmsim_scenario::config::ConfigError::new(
                &models.source,
                format!("models[{i}].cluster"),
                format!(
                    "model `{}` has cluster {key} (cluster.autoscale, cluster.pools, cluster.timeline), which llmsim \
                     serve does not run: serve a fixed fleet (cluster: {{ replicas: N }}), or simulate it over time \
                     with llmsim run",
                    m.name
                ),
            )
            .into());
        }
    }
    Ok(())
}
