//! The messages between request handlers and a model's driver, in one
//! place that both sides depend on (and that depends on neither): what a
//! handler submits ([`FeedRequest`] in a [`Command`]), what the scheduler's
//! engine task and the fixed model's timer answer on each request's own
//! channel ([`Event`]), what a fixed timer is handed ([`Schedule`]), where
//! a driver's measurements go ([`Sinks`]), and the [`lock`] helper every
//! side uses on those shared counters.
//!
//! Who speaks it: `feed` (the handler side), `engine_task` (a `scheduler`
//! model's driver) and `fixed` (a `fixed` model's timer).

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;

use super::record::Recorder;
use super::telemetry::{Busy, Finish, Gauges, ModelTelemetry, Story};
use llmsim_core::engine::{RejectReason, RequestId};
use llmsim_core::time::SimTime;

/// What a handler asks for.
#[derive(Clone, Debug)]
pub struct FeedRequest {
    pub stamp: SimTime,
    pub prompt: u32,
    pub output: u32,
    pub finish: Finish,
    pub max_tokens: Option<u32>,
    /// The request's `n`, observed once per request (0 for the second and
    /// later choices of one request).
    pub n: u32,
    pub epoch: u64,
    /// With prefix caching: the hashes of the request's full blocks
    /// (`super::prefix`); empty otherwise.
    pub hashes: Vec<u64>,
    /// The conversation the request belongs to (`x-session-id` header, else
    /// the body's `user`), hashed: what `session_affinity` routes by.
    pub session: Option<u64>,
    /// The body's `priority` (0 unless the model schedules by priority),
    /// saturated to `i32`.
    pub priority: i32,
    /// The LoRA adapter the request's `model` named: `k + 1` for the
    /// model's adapter `k`, 0 for the base model.
    pub lora: u16,
}

/// What a handler asks of the engine task.
#[derive(Debug)]
pub enum Command {
    Submit(Submit),
    /// The client went away: free the request's blocks now.
    Abort {
        ticket: u64,
    },
}

#[derive(Debug)]
pub struct Submit {
    /// The handler's key for the request (aborts name it).
    pub ticket: u64,
    pub req: FeedRequest,
    pub events: UnboundedSender<Event>,
}

/// What a driver tells a handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Submitted with this engine id and (clamped) arrival, to this
    /// replica (0 for a model without replicas).
    Accepted {
        id: RequestId,
        arrival: SimTime,
        replica: u32,
    },
    /// The `index`-th token (1-based), due at `due`.
    Token {
        index: u32,
        due: SimTime,
    },
    Done(Box<Story>),
    Rejected(RejectReason),
    /// Turned away by one of vLLM's admission limits before it reached
    /// the engine (a 503).
    Busy(Busy),
}

/// A `fixed` request's tokens to release: `n` of them, the first at
/// `first_due`, then one every `itl_ns`.
#[derive(Debug)]
pub struct Schedule {
    pub first_due: SimTime,
    pub itl_ns: u64,
    pub n: u32,
    pub events: UnboundedSender<Event>,
}

/// Shared outputs of a model's driver.
#[derive(Clone)]
pub struct Sinks {
    pub stats: Arc<Mutex<ModelTelemetry>>,
    pub gauges: Arc<Gauges>,
    pub recorder: Option<Arc<Mutex<Recorder>>>,
}

/// Locks a mutex, recovering from a poisoned one (a panicking holder cannot
/// leave these counters in a state worse than slightly stale).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
