//! `llmsim serve`: an OpenAI-compatible HTTP server with no model, whose
//! tokens are released at the times the planner's engine computes, on the
//! wall clock instead of virtual time.
//!
//! What is said and when it is sent are separate: `content` (responses.yml
//! matching and the tokenizer) decides the answer's tokens; a model's
//! engine decides when each is due. A `scheduler` model runs the planner
//! core in one engine task (`engine_task`) fed by commands; a `fixed` model
//! has a timer task (`fixed`) that releases each request's tokens at its
//! own due times. The command line (`cli::serve`, the composition root)
//! runs each driver on a thread of its own. A request's
//! `feed` is its handler's view of either. Handlers (`routes`, `sse`) stream
//! tokens as they come due, and everything measured lands in `stats`, read
//! by `/metrics` (`prom`) and `/metrics/summary` (`summary`).

pub mod answer;
pub mod api;
pub mod app;
pub mod clock;
pub mod conn;
pub mod context;
pub mod engine_task;
pub mod errors;
pub mod faults;
pub mod feed;
pub mod fixed;
pub mod logprobs;
pub mod models;
pub mod openai;
pub mod percentiles;
pub mod prefix;
pub mod prom;
pub mod protocol;
pub mod record;
pub mod request;
pub mod routes;
pub mod sse;
pub mod stop;
pub mod telemetry;
pub mod tokenize;
pub mod tools;

use std::sync::Arc;

pub use app::{App, Backend, Driver, ModelHandle, Options};
pub use clock::Clock;
pub use llmsim_content::Responses;

/// Serves `app` on `listener` until `shutdown` completes; open streams get
/// a short grace period, then are cut. Connections are capped and timed as
/// `conn` says.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = Arc::clone(&app.limits);
    conn::serve(listener, routes::router(app), limits, shutdown).await
}
