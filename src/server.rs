//! `llmsim serve`: an OpenAI-compatible HTTP server with no model, whose
//! tokens are released at the times the planner's engine computes, on the
//! wall clock instead of virtual time.
//!
//! What is said and when it is sent are separate: `content` (responses.yml
//! matching and the tokenizer) decides the answer's tokens; a model's
//! engine decides when each is due. A `scheduler` model runs the planner
//! core in one engine task (`engine_task`) fed by commands; a `fixed` model
//! has a timer task (`fixed`) that releases each request's tokens at its
//! own due times. Each driver runs on a thread of its own. A request's
//! `feed` is its handler's view of either. Handlers (`routes`, `sse`) stream
//! tokens as they come due, and everything measured lands in `stats`, read
//! by `/metrics` (`prom`) and `/metrics/summary` (`summary`).

pub mod conn;
pub mod engine_task;
pub mod errors;
pub mod faults;
pub mod feed;
pub mod fixed;
pub mod logprobs;
pub mod openai;
pub mod percentiles;
pub mod prefix;
pub mod prom;
pub mod record;
pub mod request;
pub mod routes;
pub mod sse;
pub mod stop;
pub mod telemetry;
pub mod tokenize;

pub use crate::content;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedSender};

use crate::config::models::{EngineKind, FixedTiming, ModelsFile, ServedModel};
use crate::engine::Engine;
use crate::time::SimTime;
use engine_task::{Command, EngineTask, Sinks, lock};
use errors::ApiError;
use record::Recorder;
use telemetry::{Gauges, ModelTelemetry};

pub use content::Responses;

/// The server's timeline: nanoseconds since it started, on tokio's clock
/// (which tests can pause and advance).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: tokio::time::Instant,
    /// Finish the engine task's waits with a sub-millisecond sleep (see
    /// [`Clock::sleep_until`]); off on a paused clock, where it means nothing.
    precise: bool,
}

impl Clock {
    /// A clock for tests: plain tokio timers, so a paused clock drives it.
    pub fn start() -> Clock {
        Clock { base: tokio::time::Instant::now(), precise: false }
    }

    /// The server's clock, with precise waits.
    pub fn start_precise() -> Clock {
        Clock { precise: true, ..Clock::start() }
    }

    /// When a coarse wait for `t` should end: tokio's timer fires on whole
    /// milliseconds (rounding up), so a precise clock wakes a millisecond
    /// early and finishes with [`Clock::finish_wait`].
    pub fn coarse(&self, t: SimTime) -> SimTime {
        if self.precise { SimTime::from_nanos(t.as_nanos().saturating_sub(1_000_000)) } else { t }
    }

    /// Sleeps out the rest of a wait for `t` on the blocking pool (OS
    /// timers have microsecond resolution); a no-op on a plain clock.
    pub async fn finish_wait(&self, t: SimTime) {
        if !self.precise {
            return;
        }
        let rest = self.instant(t).saturating_duration_since(tokio::time::Instant::now());
        if !rest.is_zero() {
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
        }
    }

    pub fn now(&self) -> SimTime {
        SimTime::from_nanos(u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The wall-clock instant of a simulated time.
    pub fn instant(&self, t: SimTime) -> tokio::time::Instant {
        self.base + Duration::from_nanos(t.as_nanos())
    }
}

/// How a model's tokens are timed.
pub enum Backend {
    Scheduler { commands: UnboundedSender<Command> },
    Fixed { timing: FixedTiming, timer: UnboundedSender<fixed::Schedule> },
}

/// One served model: its spec, its driver and its measurements.
pub struct ModelHandle {
    pub spec: ServedModel,
    pub backend: Backend,
    pub sinks: Sinks,
    /// Handler-side request keys.
    pub tickets: AtomicU64,
    pub tokenizer: tokenize::Tokenizer,
    /// Requests that passed validation, in arrival order (fault picks).
    pub arrivals: AtomicU64,
    /// Faults injected, by kind (`faults::NAMES` order).
    pub faults_seen: [AtomicU64; 7],
    /// `--record`'s fault file, when the model injects faults.
    pub fault_log: Option<Mutex<faults::FaultLog>>,
}

/// Server options besides the models and responses.
#[derive(Clone, Debug)]
pub struct Options {
    pub max_body_bytes: usize,
    /// Also export metric names vLLM deprecated but some routers still read.
    pub legacy_metrics: bool,
    /// `--record FILE`.
    pub record: Option<PathBuf>,
    /// Connections open at once (see `conn`).
    pub max_connections: usize,
    /// How long a connection may take to send a request head.
    pub header_timeout: Duration,
    /// How long a request body may take to arrive after its head.
    pub body_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_body_bytes: 8 * 1024 * 1024,
            legacy_metrics: false,
            record: None,
            max_connections: conn::DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// The shared state every handler sees.
pub struct App {
    pub models: Vec<ModelHandle>,
    pub responses: Responses,
    pub clock: Clock,
    /// Unix seconds at start, for the `created` fields.
    pub created: u64,
    pub options: Options,
    /// The summary window's epoch (bumped by a reset).
    pub epoch: AtomicU64,
    /// Error responses by status since start.
    pub http_errors: Mutex<BTreeMap<u16, u64>>,
    pub next_response: AtomicU64,
    /// Connection limits and what they turned away.
    pub limits: Arc<conn::Limits>,
}

impl App {
    /// Builds the state and spawns one engine task per scheduler model.
    /// Call inside a tokio runtime. Fails only if a record file cannot be
    /// created.
    pub fn start(file: &ModelsFile, responses: Responses, options: Options) -> Result<Arc<App>, String> {
        let clock = Clock::start_precise();
        let mut models = Vec::new();
        for spec in &file.models {
            let recorder = match &options.record {
                Some(path) => {
                    let path = record::path_for(path, &spec.name, file.models.len());
                    let r = Recorder::create_with_blocks(&path, prefix::recorded_block_size(spec))
                        .map_err(|e| format!("cannot create the record file {}: {e}", path.display()))?;
                    Some(Arc::new(Mutex::new(r)))
                }
                None => None,
            };
            let sinks = Sinks {
                stats: Arc::new(Mutex::new(ModelTelemetry::new(spec.context_length))),
                gauges: Arc::new(Gauges::default()),
                recorder,
            };
            let backend = match &spec.engine {
                EngineKind::Fixed(t) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    spawn_driver(&spec.name, fixed::FixedTimer::new(rx, clock).run())?;
                    Backend::Fixed { timing: *t, timer: tx }
                }
                EngineKind::Scheduler(s) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let task = EngineTask::new(Engine::new(s.engine.clone()), rx, clock, sinks.clone());
                    spawn_driver(&spec.name, task.run())?;
                    Backend::Scheduler { commands: tx }
                }
            };
            let tokenizer = spec.tokenizer.clone();
            let fault_log = match (&options.record, &spec.faults) {
                (Some(path), Some(_)) => {
                    let path = faults::log_path(&record::path_for(path, &spec.name, file.models.len()));
                    let log = faults::FaultLog::create(&path)
                        .map_err(|e| format!("cannot create the fault file {}: {e}", path.display()))?;
                    Some(Mutex::new(log))
                }
                _ => None,
            };
            models.push(ModelHandle {
                spec: spec.clone(),
                backend,
                sinks,
                tickets: AtomicU64::new(0),
                tokenizer,
                arrivals: AtomicU64::new(0),
                faults_seen: Default::default(),
                fault_log,
            });
        }
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Ok(Arc::new(App {
            models,
            responses,
            clock,
            created,
            epoch: AtomicU64::new(0),
            http_errors: Mutex::new(BTreeMap::new()),
            next_response: AtomicU64::new(0),
            limits: Arc::new(conn::Limits::new(options.max_connections, options.header_timeout, options.body_timeout)),
            options,
        }))
    }

    /// The model a request names, or the first one when it names none
    /// (vLLM serves its default model then).
    pub fn model(&self, name: Option<&str>) -> Result<&ModelHandle, ApiError> {
        match name {
            None => self.models.first().ok_or_else(|| ApiError::unknown_model("")),
            Some(n) => self.models.iter().find(|m| m.spec.name == n).ok_or_else(|| ApiError::unknown_model(n)),
        }
    }

    pub fn count_error(&self, status: u16) {
        *lock(&self.http_errors).entry(status).or_insert(0) += 1;
    }

    /// Paths of the record files, in model order.
    pub fn record_paths(&self) -> Vec<PathBuf> {
        self.models.iter().filter_map(|m| m.sinks.recorder.as_ref().map(|r| lock(r).path().to_path_buf())).collect()
    }

    /// Writes what is left of every record file (requests still in flight
    /// are written as such).
    pub fn finish_records(&self) {
        for m in &self.models {
            if let Some(r) = &m.sinks.recorder {
                lock(r).finish();
            }
        }
    }
}

/// Runs a model's driver (engine task or fixed timer) on a thread of its
/// own with its own timer, so its deadlines never queue behind the handlers
/// it wakes.
fn spawn_driver(name: &str, driver: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the runtime for model {name}: {e}"))?;
    std::thread::Builder::new()
        .name(format!("model {name}"))
        .spawn(move || runtime.block_on(driver))
        .map(|_| ())
        .map_err(|e| format!("cannot start the thread for model {name}: {e}"))
}

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
