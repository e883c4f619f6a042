//! The state every handler shares ([`App`]): the served models, each with
//! its driver's command channel ([`Backend`]) and measurements, the
//! scripted answers, the clock and the server's options.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc::{self, UnboundedSender};

use super::clock::Clock;
use super::engine_task::{EngineTask, Replica};
use super::errors::ApiError;
use super::models::{EngineKind, FixedTiming, ModelsFile, ServedModel};
use super::protocol::{Command, Schedule, Sinks, lock};
use super::record::{self, Recorder};
use super::telemetry::{Admission, Gauges, ModelTelemetry};
use super::{conn, faults, fixed, prefix, tokenize};
use llmsim_content::Responses;
use llmsim_core::engine::Engine;
use llmsim_planner::cluster::router::RouterState;
use llmsim_scenario::config::Router;
use llmsim_scenario::config::cluster::DEFAULT_OVERLAP_WEIGHT;

/// How [`App::new`] fails: a file `--record` asks for cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("cannot create the record file {}: {source}", path.display())]
    RecordFile { path: std::path::PathBuf, source: std::io::Error },
    #[error("cannot create the fault file {}: {source}", path.display())]
    FaultFile { path: std::path::PathBuf, source: std::io::Error },
}

/// How a model's tokens are timed.
pub enum Backend {
    Scheduler { commands: UnboundedSender<Command> },
    Fixed { timing: FixedTiming, timer: UnboundedSender<Schedule> },
}

/// One served model: its spec, its driver and its measurements.
pub struct ModelHandle {
    pub spec: ServedModel,
    pub backend: Backend,
    /// Each replica's measurements, by replica index (one for a model
    /// without `cluster:`); the record file is shared.
    pub replicas: Vec<Sinks>,
    /// Handler-side request keys.
    pub tickets: AtomicU64,
    pub tokenizer: tokenize::Tokenizer,
    /// Requests that passed validation, in arrival order (fault picks).
    pub arrivals: AtomicU64,
    /// Faults injected, by kind (`faults::NAMES` order).
    pub faults_seen: [AtomicU64; 7],
    /// `--record`'s fault file, when the model injects faults.
    pub fault_log: Option<Mutex<faults::FaultLog>>,
    /// vLLM's admission limits and the counts the engine task publishes
    /// for them (never refuses without limits, or for a `fixed` model).
    pub admission: Arc<Admission>,
}

impl ModelHandle {
    /// The model's record file, if `--record` was given.
    pub fn recorder(&self) -> Option<&Arc<Mutex<Recorder>>> {
        self.replicas.first().and_then(|s| s.recorder.as_ref())
    }

    /// Whether the model runs as replicas behind a router (`cluster:`): its
    /// answers then name their replica (`x-llmsim-replica`).
    pub fn clustered(&self) -> bool {
        self.spec.cluster().is_some()
    }
}

/// A model's driver: the engine task of a `scheduler` model or the timer
/// of a `fixed` one, a future that ends when the server's handles to it
/// are gone. Run it where its deadlines never queue behind the handlers
/// it wakes (the command line gives each its own thread and runtime).
pub struct Driver {
    /// The model's name (for the thread's name and errors).
    pub name: String,
    pub task: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Driver {
    fn new(name: &str, task: impl Future<Output = ()> + Send + 'static) -> Driver {
        Driver { name: name.to_string(), task: Box::pin(task) }
    }
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
    /// vLLM's `--enable-request-id-headers`: every response carries
    /// `X-Request-Id` (the request's, else a new one).
    pub request_id_headers: bool,
    /// End each stream with the `: llmsim ...` comment lines (`sse`).
    pub stream_comments: bool,
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
            request_id_headers: false,
            stream_comments: false,
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
    /// Answers planned at once on the blocking pool (one fewer than the
    /// machine's cores, at least one): planning is CPU work linear in the
    /// planned tokens, and 30 of them at once on 2 cores starved the
    /// runtime's workers, so `/health` took up to 360 ms. Waiters queue
    /// in arrival order without holding a thread.
    pub planning: tokio::sync::Semaphore,
}

/// How many answers may be planned at once: all cores but one (which the
/// runtime's workers and the engine tasks keep), at least one.
fn planning_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1)).max(1)
}

impl App {
    /// Builds the state on `clock`, and each model's driver (its engine
    /// task or fixed timer) for the caller to run: the command line runs
    /// each on a thread and runtime of its own (`cli::serve`), tests on
    /// theirs. Nothing here starts a thread or a runtime. Fails only if a
    /// record file cannot be created.
    pub fn new(
        file: &ModelsFile,
        responses: Responses,
        options: Options,
        clock: Clock,
    ) -> Result<(Arc<App>, Vec<Driver>), AppError> {
        let mut models = Vec::new();
        let mut drivers = Vec::new();
        for spec in &file.models {
            let recorder = match &options.record {
                Some(path) => {
                    let path = record::path_for(path, &spec.name, file.models.len());
                    let r = Recorder::create_for(&path, prefix::recorded_block_size(spec), spec.cluster().is_some())
                        .map_err(|source| AppError::RecordFile { path: path.clone(), source })?;
                    Some(Arc::new(Mutex::new(r)))
                }
                None => None,
            };
            let count = match &spec.engine {
                EngineKind::Scheduler(s) => s.replicas(),
                EngineKind::Fixed(_) => 1,
            };
            let replicas: Vec<Sinks> = (0..count)
                .map(|_| Sinks {
                    stats: Arc::new(Mutex::new(ModelTelemetry::new(spec.context_length))),
                    gauges: Arc::new(Gauges::default()),
                    recorder: recorder.clone(),
                })
                .collect();
            let admission = Arc::new(Admission::new(spec.queue.max_num_queued_reqs, spec.queue.max_num_queued_tokens));
            let backend = match &spec.engine {
                EngineKind::Fixed(t) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    drivers.push(Driver::new(&spec.name, fixed::FixedTimer::new(rx, clock).run()));
                    Backend::Fixed { timing: *t, timer: tx }
                }
                EngineKind::Scheduler(s) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let engines =
                        replicas.iter().map(|sinks| Replica::new(Engine::new(s.engine.clone()), sinks.clone()));
                    let router = match &s.cluster {
                        Some(c) => {
                            RouterState::new(c.router, c.overlap_weight.unwrap_or(DEFAULT_OVERLAP_WEIGHT), s.seed)
                        }
                        None => RouterState::new(Router::RoundRobin, DEFAULT_OVERLAP_WEIGHT, s.seed),
                    };
                    let task =
                        EngineTask::fleet(engines.collect(), router, rx, clock).with_admission(admission.clone());
                    drivers.push(Driver::new(&spec.name, task.run()));
                    Backend::Scheduler { commands: tx }
                }
            };
            let tokenizer = spec.tokenizer.clone();
            let fault_log = match (&options.record, &spec.faults) {
                (Some(path), Some(_)) => {
                    let path = faults::log_path(&record::path_for(path, &spec.name, file.models.len()));
                    let log = faults::FaultLog::create(&path)
                        .map_err(|source| AppError::FaultFile { path: path.clone(), source })?;
                    Some(Mutex::new(log))
                }
                _ => None,
            };
            models.push(ModelHandle {
                spec: spec.clone(),
                backend,
                replicas,
                tickets: AtomicU64::new(0),
                tokenizer,
                arrivals: AtomicU64::new(0),
                faults_seen: Default::default(),
                fault_log,
                admission,
            });
        }
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let app = Arc::new(App {
            models,
            responses,
            clock,
            created,
            epoch: AtomicU64::new(0),
            http_errors: Mutex::new(BTreeMap::new()),
            next_response: AtomicU64::new(0),
            limits: Arc::new(conn::Limits::new(options.max_connections, options.header_timeout, options.body_timeout)),
            planning: tokio::sync::Semaphore::new(planning_slots()),
            options,
        });
        Ok((app, drivers))
    }

    /// The model a request names, or the first one when it names none
    /// (vLLM serves its default model then); a LoRA adapter's name is its
    /// model's.
    pub fn model(&self, name: Option<&str>) -> Result<&ModelHandle, ApiError> {
        self.model_and_adapter(name).map(|(m, _)| m)
    }

    /// [`App::model`] and the LoRA adapter the name chose: `k + 1` for the
    /// model's adapter `k` (docs/lora.md), 0 for the model itself. A
    /// model's own name wins over an adapter of the same name.
    pub fn model_and_adapter(&self, name: Option<&str>) -> Result<(&ModelHandle, u16), ApiError> {
        let Some(n) = name else {
            return self.models.first().map(|m| (m, 0)).ok_or_else(|| ApiError::unknown_model(""));
        };
        if let Some(m) = self.models.iter().find(|m| m.spec.name == n) {
            return Ok((m, 0));
        }
        for m in &self.models {
            if let crate::models::EngineKind::Scheduler(s) = &m.spec.engine
                && let Some(k) = s.adapters.iter().position(|a| a == n)
            {
                return Ok((m, k as u16 + 1));
            }
        }
        Err(ApiError::unknown_model(n))
    }

    pub fn count_error(&self, status: u16) {
        *lock(&self.http_errors).entry(status).or_insert(0) += 1;
    }

    /// Paths of the record files, in model order.
    pub fn record_paths(&self) -> Vec<PathBuf> {
        self.models.iter().filter_map(|m| m.recorder().map(|r| lock(r).path().to_path_buf())).collect()
    }

    /// Writes what is left of every record file (requests still in flight
    /// are written as such).
    pub fn finish_records(&self) {
        for m in &self.models {
            if let Some(r) = m.recorder() {
                lock(r).finish();
            }
        }
    }
}
