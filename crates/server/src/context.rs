//! A request in progress as the response writers (`routes` for a whole
//! answer, `sse` for a stream) see it: the reply being written, the
//! engine requests behind its choices, and what both writers need from it:
//! the error for a request the engine turned away ([`feed_error`]) and the
//! `x-llmsim-*` explanation of its simulated story ([`explain`]).

use std::sync::Arc;

use super::app::{App, ModelHandle};
use super::errors::ApiError;
use super::faults::Kind;
use super::feed::{Accepted, FeedEvent};
use super::models::EngineKind;
use super::openai::Reply;
use super::protocol::lock;
use super::telemetry::{Busy, Observed, Story};
use llmsim_core::engine::RejectReason;
use llmsim_core::time::SimTime;

/// One request in progress, as the response writers see it.
pub struct Ctx {
    pub app: Arc<App>,
    pub model: usize,
    pub reply: Reply,
    /// When the request was received.
    pub stamp: SimTime,
    /// Each choice's engine request, in `reply.choices` order.
    pub accepted: Vec<Accepted>,
    pub epoch: u64,
    /// An injected mid-answer fault (stall, cut, malformed).
    pub fault: Option<Kind>,
}

impl Ctx {
    pub fn handle(&self) -> &ModelHandle {
        &self.app.models[self.model]
    }

    /// Notes a token handed over now, due at `due`.
    pub fn observe_token(&self, obs: &mut Observed, last: &mut Option<SimTime>, due: SimTime) {
        let now = self.app.clock.now();
        match *last {
            None => obs.ttft_ns = Some(now.nanos_since(self.stamp)),
            Some(prev) => obs.gaps_ns.push(now.nanos_since(prev)),
        }
        obs.delivery_lags_ns.push(now.nanos_since(due));
        *last = Some(now);
    }

    /// Notes a finished request's cached tokens in its reply, so its usage
    /// carries `prompt_tokens_details.cached_tokens` (only with prefix
    /// caching on: without it the usage keeps its shape).
    pub fn note_cached(&mut self, story: &Story) {
        if super::prefix::caching(&self.handle().spec) {
            self.reply.cached_tokens = Some(story.rec.cached_tokens.unwrap_or(0));
        }
    }

    /// Reports what the handler observed of choice `choice`, once it is
    /// done (to its replica's measurements).
    pub fn report(&self, choice: usize, obs: &mut Observed, last: Option<SimTime>) {
        obs.e2e_ns = last.map(|t| t.nanos_since(self.stamp));
        let replica = self.accepted.get(choice).map_or(0, |a| a.replica as usize);
        if let Some(sinks) = self.handle().replicas.get(replica) {
            lock(&sinks.stats).observed(obs, self.epoch);
        }
    }
}

/// vLLM 0.33's 503 for a request over `max_num_queued_reqs` or
/// `max_num_queued_tokens`: a `GracefulHTTPError`, whose `type` is the HTTP
/// status phrase and whose `param` is null; no Retry-After header.
pub fn busy_error(busy: Busy) -> ApiError {
    ApiError {
        message: busy.message().to_string(),
        kind: Some("Service Unavailable"),
        ..ApiError::http(axum::http::StatusCode::SERVICE_UNAVAILABLE)
    }
}

/// The error for a request the engine turned away (or a server going down).
pub fn feed_error(model: &ModelHandle, prompt: u32, output: u32, ev: &FeedEvent) -> ApiError {
    match (ev, &model.spec.engine) {
        (FeedEvent::Rejected(RejectReason::NeverFits), EngineKind::Scheduler(s)) => {
            let cap = &s.engine.capacity;
            ApiError::never_fits(prompt, cap.num_blocks, cap.block_size, cap.watermark_blocks)
        }
        (FeedEvent::Busy(busy), _) => busy_error(*busy),
        (FeedEvent::Rejected(RejectReason::ContextLength), _) => {
            ApiError::max_tokens_too_large(model.spec.context_length, prompt, &output.to_string())
        }
        _ => ApiError::internal("The engine stopped before the request finished (the server is shutting down)."),
    }
}

/// Why the response took as long as it did: the simulated story of the
/// request, as `x-llmsim-*` header names and values.
pub fn explain(ctx: &Ctx, choice: usize, story: &Story, max_lag_ns: Option<u64>) -> Vec<(String, String)> {
    let r = &story.rec;
    let ms = |ns: Option<u64>| ns.map_or_else(|| "-".to_string(), |v| format!("{:.3}", v as f64 / 1e6));
    let span = |a: Option<SimTime>, b: Option<SimTime>| a.zip(b).map(|(a, b)| b.nanos_since(a));
    let mean_batch = if story.steps > 0 { story.batch_sum as f64 / f64::from(story.steps) } else { 0.0 };
    let mut out = vec![
        ("x-llmsim-engine", ctx.handle().spec.engine.as_str().to_string()),
        ("x-llmsim-request-id", ctx.accepted[choice].id.to_string()),
        ("x-llmsim-arrival-s", r.arrival.to_string()),
        ("x-llmsim-queue-ms", ms(r.queue_ns())),
        ("x-llmsim-prefill-ms", ms(span(r.first_scheduled, r.first_token))),
        ("x-llmsim-ttft-ms", ms(r.ttft_ns())),
        ("x-llmsim-decode-ms", ms(span(r.first_token, r.last_token))),
        ("x-llmsim-e2e-ms", ms(r.e2e_ns())),
        ("x-llmsim-preemptions", r.preemptions.to_string()),
        ("x-llmsim-steps", story.steps.to_string()),
        ("x-llmsim-mean-batch", format!("{mean_batch:.2}")),
        ("x-llmsim-prompt-tokens", r.prompt.to_string()),
        ("x-llmsim-output-tokens", r.tokens.to_string()),
    ];
    if let Some(lag) = max_lag_ns {
        out.push(("x-llmsim-max-lag-ms", ms(Some(lag))));
    }
    if ctx.handle().clustered() {
        out.push(("x-llmsim-replica", ctx.accepted[choice].replica.to_string()));
    }
    out.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
