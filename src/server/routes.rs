//! The HTTP surface: routes, body limits, and turning a request into a
//! feed and a response (streamed or whole).
//!
//! A completion request goes: read the body (413 over the limit), parse
//! (400 naming the JSON path), find the model (404), count prompt tokens
//! and plan the answer (content), check the context (400, vLLM wording),
//! hand it to the model's feed, then answer. Every error is counted and
//! the server keeps serving.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::content::{Query, tokenizer};
use super::errors::ApiError;
use super::feed::{Accepted, Feed, FeedEvent, FeedRequest};
use super::openai::{self, Api, ChatRequest, CompletionRequest, Options, Prompt, Reply};
use super::prefix::PromptContent;
use super::sse;
use super::stats::{Observed, Story};
use super::stop::Stops;
use super::{App, ModelHandle};
use crate::config::models::EngineKind;
use crate::engine::RejectReason;
use crate::time::SimTime;

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/metrics/summary", get(summary))
        .route("/metrics/summary/reset", post(reset))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

async fn health() -> StatusCode {
    StatusCode::OK
}

/// An unknown path, in the envelope (see `errors` for why not FastAPI's
/// bare `{"detail": ...}`).
async fn not_found(State(app): State<Arc<App>>) -> Response {
    respond(&app, Err(ApiError::http(StatusCode::NOT_FOUND)))
}

/// A known path with the wrong method (axum adds the `Allow` header).
async fn method_not_allowed(State(app): State<Arc<App>>) -> Response {
    respond(&app, Err(ApiError::http(StatusCode::METHOD_NOT_ALLOWED)))
}

async fn models(State(app): State<Arc<App>>) -> Response {
    let data: Vec<serde_json::Value> = app
        .models
        .iter()
        .map(|m| {
            serde_json::json!({
                "id": m.spec.name,
                "object": "model",
                "created": app.created,
                "owned_by": "llmsim",
                "root": m.spec.name,
                "parent": null,
                "max_model_len": m.spec.context_length,
                "permission": [],
            })
        })
        .collect();
    json_response(StatusCode::OK, serde_json::json!({"object": "list", "data": data}).to_string())
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let mut resp = super::prom::render(&app).into_response();
    let ct = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    resp
}

async fn summary(State(app): State<Arc<App>>) -> Response {
    json_response(StatusCode::OK, super::summary::render(&app))
}

async fn reset(State(app): State<Arc<App>>) -> Response {
    super::summary::reset(&app);
    json_response(StatusCode::OK, super::summary::render(&app))
}

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let stamp = app.clock.now();
    respond(&app, handle(&app, Api::Chat, stamp, &headers, body).await)
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let stamp = app.clock.now();
    respond(&app, handle(&app, Api::Completion, stamp, &headers, body).await)
}

fn respond(app: &App, result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(|e| {
        app.count_error(e.status.as_u16());
        e.into_response()
    })
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Reads the body, refusing more than the limit and a body that has not
/// arrived within `--body-timeout`.
async fn read_body(app: &App, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let limit = app.options.max_body_bytes;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if let Some(len) = declared.filter(|&len: &u64| len > limit as u64) {
        return Err(ApiError::too_large(len, limit));
    }
    let timeout = app.options.body_timeout;
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(read) => read.map_err(|_| ApiError::too_large(limit as u64 + 1, limit)),
        Err(_) => {
            app.limits.body_timeouts.hit();
            Err(ApiError::body_timeout(timeout.as_secs_f64()))
        }
    }
}

/// A parsed request, ready to plan: what the content side needs.
struct Parsed {
    model: Option<String>,
    prompt_tokens: usize,
    last_user_message: String,
    options: Options,
    /// A chat without messages (refused once the model is known, as vLLM
    /// checks the model first).
    empty: bool,
    /// The prompt, for prefix caching (`prefix`).
    content: PromptContent,
}

fn parse_chat(body: &[u8]) -> Result<Parsed, ApiError> {
    let req: ChatRequest = openai::parse(body)?;
    let texts: Vec<(String, String)> = req.messages.iter().map(|m| (m.role.clone(), m.text())).collect();
    let prompt_tokens = tokenizer::count_chat(texts.iter().map(|(r, c)| (r.as_str(), c.as_str())));
    let last_user_message = texts.iter().rev().find(|(r, _)| r == "user").map(|(_, c)| c.clone()).unwrap_or_default();
    let options = req.common.options(req.max_completion_tokens.or(req.common.max_tokens))?;
    let empty = req.messages.is_empty();
    Ok(Parsed {
        model: req.model,
        prompt_tokens,
        last_user_message,
        options,
        empty,
        content: PromptContent::Chat(texts),
    })
}

/// vLLM's completions default `max_tokens` (the legacy OpenAI default).
const COMPLETIONS_DEFAULT_MAX_TOKENS: u32 = 16;

fn parse_completion(body: &[u8]) -> Result<Parsed, ApiError> {
    let req: CompletionRequest = openai::parse(body)?;
    let many =
        || ApiError::bad_request("llmsim takes one prompt per request; send a list of one.").with_param("prompt");
    let ids = match &req.prompt {
        Prompt::Ids(ids) => Some(PromptContent::Ids(ids.clone())),
        Prompt::IdLists(v) if v.len() == 1 => Some(PromptContent::Ids(v[0].clone())),
        _ => None,
    };
    let (text, tokens) = match req.prompt {
        Prompt::Text(t) => {
            let n = tokenizer::count(&t);
            (t, n)
        }
        Prompt::Texts(mut v) if v.len() == 1 => {
            let t = v.remove(0);
            let n = tokenizer::count(&t);
            (t, n)
        }
        Prompt::Ids(ids) => (String::new(), ids.len()),
        Prompt::IdLists(v) if v.len() == 1 => (String::new(), v[0].len()),
        Prompt::Texts(_) | Prompt::IdLists(_) => return Err(many()),
    };
    let mut options = req.common.options(req.common.max_tokens)?;
    options.max_tokens = Some(options.max_tokens.unwrap_or(COMPLETIONS_DEFAULT_MAX_TOKENS.into()));
    let content = ids.unwrap_or_else(|| PromptContent::Text(text.clone()));
    // An empty prompt still holds one token (the beginning of sequence).
    Ok(Parsed {
        model: req.model,
        prompt_tokens: tokens.max(1),
        last_user_message: text,
        options,
        empty: false,
        content,
    })
}

async fn handle(
    app: &Arc<App>,
    api: Api,
    stamp: SimTime,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_body(app, headers, body).await?;
    let parsed = match api {
        Api::Chat => parse_chat(&body)?,
        Api::Completion => parse_completion(&body)?,
    };
    let model = app.model(parsed.model.as_deref())?;
    if parsed.empty {
        return Err(ApiError::bad_request("`messages` must contain at least one message.").with_param("messages"));
    }
    let (reply, parsed) = if parsed.options.stops.is_empty() {
        (plan_reply(app, model, api, &parsed)?, parsed)
    } else {
        // Stop strings cost time linear in their size and the answer's
        // (`stop`): plan on the blocking pool, so `/health` and other
        // requests never wait behind a large stop list.
        let (app, index) = (Arc::clone(app), model_index(app, model));
        tokio::task::spawn_blocking(move || plan_reply(&app, &app.models[index], api, &parsed).map(|r| (r, parsed)))
            .await
            .map_err(|e| ApiError::internal(format!("planning the answer failed: {e}")))??
    };
    let epoch = app.epoch.load(Ordering::SeqCst);
    let req = FeedRequest {
        stamp,
        prompt: reply.prompt_tokens,
        output: reply.plan.output,
        finish: reply.plan.finish,
        // Checked against the context in `plan_reply`, so it fits.
        max_tokens: parsed.options.max_tokens.map(|m| u32::try_from(m).unwrap_or(u32::MAX)),
        epoch,
        hashes: super::prefix::for_model(model, &parsed.content, &reply),
    };
    let (feed, accepted) = Feed::start(model, app.clock, req).await.map_err(|ev| feed_error(model, &reply, &ev))?;
    let ctx = Ctx { app: app.clone(), model: model_index(app, model), reply, stamp, accepted, epoch };
    if ctx.reply.options.stream { Ok(sse::response(ctx, feed)) } else { whole(ctx, feed).await }
}

fn model_index(app: &App, model: &ModelHandle) -> usize {
    app.models.iter().position(|m| std::ptr::eq(m, model)).unwrap_or(0)
}

/// Checks the context (vLLM's rules and wording) and plans the answer.
fn plan_reply(app: &App, model: &ModelHandle, api: Api, parsed: &Parsed) -> Result<Reply, ApiError> {
    let context = model.spec.context_length;
    let prompt = u32::try_from(parsed.prompt_tokens).unwrap_or(u32::MAX);
    if prompt >= context {
        return Err(ApiError::prompt_too_long(context, prompt));
    }
    // `m` is at most i64::MAX, so the sum cannot overflow.
    if let Some(m) = parsed.options.max_tokens.filter(|&m| u64::from(prompt) + m > u64::from(context)) {
        return Err(ApiError::max_tokens_too_large(context, prompt, m));
    }
    // vLLM's default: whatever the context leaves (and a value that passed
    // the check above is at most that).
    let max_tokens = parsed.options.max_tokens.map_or(context - prompt, |m| u32::try_from(m).unwrap_or(u32::MAX));
    let query =
        Query { last_user_message: &parsed.last_user_message, model: &model.spec.name, seed: parsed.options.seed };
    let answer = app.responses.answer(&query);
    let stops = Stops::new(parsed.options.stops.clone())?;
    let plan = openai::plan(&answer.text, tokenizer::tokens(&answer.text), stops.as_ref(), max_tokens);
    let n = app.next_response.fetch_add(1, Ordering::Relaxed);
    let id = match api {
        Api::Chat => format!("chatcmpl-llmsim-{n}"),
        Api::Completion => format!("cmpl-llmsim-{n}"),
    };
    Ok(Reply {
        api,
        id,
        created: app.created,
        model: model.spec.name.clone(),
        plan,
        prompt_tokens: prompt,
        options: parsed.options.clone(),
        cached_tokens: None,
    })
}

/// The error for a request the engine turned away (or a server going down).
pub fn feed_error(model: &ModelHandle, reply: &Reply, ev: &FeedEvent) -> ApiError {
    match (ev, &model.spec.engine) {
        (FeedEvent::Rejected(RejectReason::NeverFits), EngineKind::Scheduler(s)) => {
            let cap = &s.engine.capacity;
            ApiError::never_fits(reply.prompt_tokens, cap.num_blocks, cap.block_size, cap.watermark_blocks)
        }
        (FeedEvent::Rejected(RejectReason::ContextLength), _) => {
            ApiError::max_tokens_too_large(model.spec.context_length, reply.prompt_tokens, reply.plan.output.into())
        }
        _ => ApiError::internal("The engine stopped before the request finished (the server is shutting down)."),
    }
}

/// One request in progress, as the response writers see it.
pub struct Ctx {
    pub app: Arc<App>,
    pub model: usize,
    pub reply: Reply,
    /// When the request was received.
    pub stamp: SimTime,
    pub accepted: Accepted,
    pub epoch: u64,
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

    /// Reports what the handler observed, once the request is done.
    pub fn report(&self, obs: &mut Observed, last: Option<SimTime>) {
        obs.e2e_ns = last.map(|t| t.nanos_since(self.stamp));
        super::engine_task::lock(&self.handle().sinks.stats).observed(obs, self.epoch);
    }
}

/// The non-streaming answer: wait for every token, then one JSON body with
/// the explanation headers.
async fn whole(mut ctx: Ctx, mut feed: Feed) -> Result<Response, ApiError> {
    let mut obs = Observed::default();
    let mut last = None;
    let story = loop {
        match feed.next().await {
            FeedEvent::Token { due, .. } => ctx.observe_token(&mut obs, &mut last, due),
            FeedEvent::Done(story) => break story,
            other => return Err(feed_error(ctx.handle(), &ctx.reply, &other)),
        }
    };
    ctx.report(&mut obs, last);
    super::prefix::set_cached(&mut ctx, &story);
    let max_lag = obs.delivery_lags_ns.iter().copied().max().unwrap_or(0);
    let mut resp = json_response(StatusCode::OK, ctx.reply.full_body());
    for (name, value) in explain(&ctx, &story, Some(max_lag)) {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(&value)) {
            resp.headers_mut().insert(n, v);
        }
    }
    Ok(resp)
}

/// Why the response took as long as it did: the simulated story of the
/// request, as `x-llmsim-*` header names and values.
pub fn explain(ctx: &Ctx, story: &Story, max_lag_ns: Option<u64>) -> Vec<(String, String)> {
    let r = &story.rec;
    let ms = |ns: Option<u64>| ns.map_or_else(|| "-".to_string(), |v| format!("{:.3}", v as f64 / 1e6));
    let span = |a: Option<SimTime>, b: Option<SimTime>| a.zip(b).map(|(a, b)| b.nanos_since(a));
    let mean_batch = if story.steps > 0 { story.batch_sum as f64 / f64::from(story.steps) } else { 0.0 };
    let mut out = vec![
        ("x-llmsim-engine", ctx.handle().spec.engine.as_str().to_string()),
        ("x-llmsim-request-id", ctx.accepted.id.to_string()),
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
    out.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
