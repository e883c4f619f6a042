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

use super::answer::Head;
use super::app::{App, ModelHandle};
use super::context::{Ctx, busy_error, explain, feed_error};
use super::errors::ApiError;
use super::faults::Kind;
use super::feed::{Feed, FeedEvent};
use super::models::EngineKind;
use super::openai::{self, Api, Choice, Lengths, Reply};
use super::prefix::PromptContent;
use super::protocol::{FeedRequest, lock};
use super::request::{self, Parsed, PromptIn};
use super::sse;
use super::stop::Stops;
use super::telemetry::Observed;
use super::tokenize::{ChatInput, TemplateError};
use super::tools::{self, Mode};
use llmsim_content::Query;
use llmsim_content::responses::args;
use llmsim_core::time::SimTime;

pub fn router(app: Arc<App>) -> Router {
    let echo_ids = app.options.request_id_headers;
    let routes = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/ping", get(health).post(health))
        .route("/version", get(version))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/metrics/summary", get(summary))
        .route("/metrics/summary/reset", post(reset))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app);
    if echo_ids { routes.layer(axum::middleware::from_fn(echo_request_id)) } else { routes }
}

/// vLLM's `--enable-request-id-headers` middleware: every response gets an
/// `X-Request-Id` header, the request's own, else a new one (vLLM: a random
/// uuid4; llmsim: 32 hex digits numbered from start, so runs replay).
async fn echo_request_id(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = request.headers().get("x-request-id").cloned().unwrap_or_else(|| {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let hi = llmsim_core::util::fnv1a(n.to_le_bytes());
        let lo = llmsim_core::util::fnv1a(hi.to_le_bytes());
        HeaderValue::from_str(&format!("{hi:016x}{lo:016x}")).unwrap_or(HeaderValue::from_static("0"))
    });
    let mut resp = next.run(request).await;
    resp.headers_mut().append(HeaderName::from_static("x-request-id"), id);
    resp
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

/// vLLM's model cards: `created` stamped per response, a permission
/// object, `owned_by` "vllm" (clients written for vLLM see what they expect).
async fn models(State(app): State<Arc<App>>) -> Response {
    let created = unix_now();
    // Each model, then its LoRA adapters (vLLM's `show_available_models`:
    // an adapter's `parent` is its base model, its `max_model_len` null).
    let mut entries: Vec<(String, Option<&str>, Option<u32>)> = Vec::new();
    for m in &app.models {
        entries.push((m.spec.name.clone(), None, Some(m.spec.context_length)));
        if let crate::models::EngineKind::Scheduler(s) = &m.spec.engine {
            entries.extend(s.adapters.iter().map(|a| (a.clone(), Some(m.spec.name.as_str()), None)));
        }
    }
    let data: Vec<serde_json::Value> = entries
        .iter()
        .enumerate()
        .map(|(i, (name, parent, max_model_len))| {
            serde_json::json!({
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": name,
                "parent": parent,
                "max_model_len": max_model_len,
                "permission": [{
                    "id": format!("modelperm-llmsim-{i}"),
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": false,
                    "allow_sampling": true,
                    "allow_logprobs": true,
                    "allow_search_indices": false,
                    "allow_view": true,
                    "allow_fine_tuning": false,
                    "organization": "*",
                    "group": null,
                    "is_blocking": false,
                }],
            })
        })
        .collect();
    json_response(StatusCode::OK, serde_json::json!({"object": "list", "data": data}).to_string())
}

/// `GET /version`: vLLM answers its package version; llmsim answers its own.
async fn version() -> Response {
    json_response(StatusCode::OK, serde_json::json!({"version": env!("CARGO_PKG_VERSION")}).to_string())
}

/// `POST /tokenize`: vLLM's answer (`count`, `max_model_len`, `tokens`,
/// `token_strs`) for a completions `prompt` or chat `messages`, counted by
/// the model's tokenizer (chat: with the template framing, as the prompt of
/// a chat request is counted).
async fn tokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let body = read_body(&app, &headers, body).await?;
        let value = json_body(&headers, &body)?;
        let obj = value.as_object().cloned().unwrap_or_default();
        let model = app.model(obj.get("model").and_then(|m| m.as_str()))?;
        let want_strs = obj.get("return_token_strs").and_then(serde_json::Value::as_bool).unwrap_or(false);
        let (ids, strs) = if obj.contains_key("messages") {
            let mut parsed = request::read(Api::Chat, &value)?;
            let templated = match ChatInput::from_body(&body) {
                // Rendered on the blocking pool, as a chat request's is.
                Some(c) if model.tokenizer.chat_template().is_some() => {
                    let tok = model.tokenizer.clone();
                    tokio::task::spawn_blocking(move || tok.template_ids(&c))
                        .await
                        .map_err(|e| ApiError::internal(format!("rendering the chat template failed: {e}")))?
                }
                _ => None,
            };
            frame_tools(&mut parsed);
            match (templated, &parsed.prompts[0]) {
                (Some(ids), _) => (ids.map_err(template_error)?, Vec::new()),
                (None, PromptIn::Chat(m)) => model.tokenizer.encode_chat(m),
                _ => (Vec::new(), Vec::new()),
            }
        } else {
            let Some(prompt) = obj.get("prompt").and_then(|p| p.as_str()) else {
                return Err(
                    ApiError::bad_request("`prompt` (a string) or `messages` is required.").with_param("prompt")
                );
            };
            (model.tokenizer.encode(prompt), model.tokenizer.pieces(prompt))
        };
        let count = ids.len();
        // vLLM's `convert_ids_to_tokens`; the built-in tokenizer has no
        // vocabulary, so its strings are the tokens' text.
        let strs = want_strs.then(|| model.tokenizer.token_strs(&ids).unwrap_or(strs));
        let out = serde_json::json!({
            "count": count,
            "max_model_len": model.spec.context_length,
            "tokens": ids,
            "token_strs": strs,
        });
        Ok(json_response(StatusCode::OK, out.to_string()))
    }
    .await;
    respond(&app, result)
}

/// `POST /detokenize`: the text of token ids, when the model's tokenizer
/// has a vocabulary (a `tokenizer.json`); the built-in one has none.
async fn detokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let body = read_body(&app, &headers, body).await?;
        let value = json_body(&headers, &body)?;
        let model = app.model(value.get("model").and_then(|m| m.as_str()))?;
        let Some(list) = value.get("tokens").and_then(|t| t.as_array()) else {
            return Err(ApiError::bad_request("`tokens` (a list of token ids) is required.").with_param("tokens"));
        };
        let ids: Option<Vec<u64>> = list.iter().map(serde_json::Value::as_u64).collect();
        let Some(ids) = ids else {
            return Err(ApiError::bad_request("`tokens` must be a list of non-negative integers.").with_param("tokens"));
        };
        match model.tokenizer.decode(&ids) {
            Some(text) => Ok(json_response(StatusCode::OK, serde_json::json!({"prompt": text}).to_string())),
            None => Err(ApiError::bad_request(format!(
                "model `{}` uses llmsim's built-in tokenizer, whose token ids are hashes of the text and cannot be \
                 turned back into text; give the model a `tokenizer:` (a tokenizer.json) to detokenize.",
                model.spec.name
            ))
            .with_param("tokens")),
        }
    }
    .await;
    respond(&app, result)
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let mut resp = super::prom::render(&app).into_response();
    let ct = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    resp
}

async fn summary(State(app): State<Arc<App>>) -> Response {
    json_response(StatusCode::OK, super::percentiles::render(&app))
}

async fn reset(State(app): State<Arc<App>>) -> Response {
    super::percentiles::reset(&app);
    json_response(StatusCode::OK, super::percentiles::render(&app))
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

/// A body that could not be read: over the limit (413, without a length:
/// the reading stopped there), else malformed (a bad chunk size, a
/// connection cut short: 400 with the reason).
fn body_error(e: axum::Error, limit: usize) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return ApiError::too_large_unknown(limit);
        }
        source = err.source();
    }
    ApiError::bad_request(format!("The request body could not be read: {e}."))
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
        Ok(read) => read.map_err(|e| body_error(e, limit)),
        Err(_) => {
            app.limits.body_timeouts.hit();
            Err(ApiError::body_timeout(timeout.as_secs_f64()))
        }
    }
}

/// A JSON endpoint's body as vLLM 0.33 (FastAPI) reads it: the body is
/// parsed as JSON first when the `Content-Type` is missing or JSON-like
/// (`application/json`, `application/*+json`), so a broken body is
/// `json_invalid` then; next vLLM's `validate_json_request` refuses any
/// media type but exactly `application/json` (parameters such as
/// `charset` allowed); the request's fields are read after both.
fn json_body(headers: &HeaderMap, body: &[u8]) -> Result<serde_json::Value, ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()).to_lowercase());
    let json_like = content_type.as_deref().is_none_or(|ct| {
        let essence = ct.split(';').next().unwrap_or_default().trim();
        essence
            .split_once('/')
            .is_some_and(|(main, sub)| main == "application" && (sub == "json" || sub.ends_with("+json")))
    });
    let parsed = if json_like && !body.is_empty() { Some(openai::parse(body)?) } else { None };
    let media = content_type.as_deref().map_or("", |ct| ct.split(';').next().unwrap_or_default());
    if media != "application/json" {
        return Err(ApiError::unsupported_media_type());
    }
    match parsed {
        Some(v) => Ok(v),
        None => openai::parse(body),
    }
}

/// The base of a response's `id`, as vLLM forms it: the `X-Request-Id`
/// header, else the body's `request_id`; llmsim numbers the rest (vLLM
/// draws 16 random hex digits), so a replayed session gets the same ids.
fn request_id(app: &App, headers: &HeaderMap, body_id: Option<String>) -> String {
    if let Some(h) = headers.get("x-request-id") {
        return String::from_utf8_lossy(h.as_bytes()).into_owned();
    }
    body_id.unwrap_or_else(|| format!("llmsim-{}", app.next_response.fetch_add(1, Ordering::Relaxed)))
}

/// The first prompt token id outside the model's vocabulary, as vLLM's
/// input processor checks each prompt (a negative id first, else the
/// largest), once the context and sampling checks passed.
fn out_of_vocabulary(model: &ModelHandle, prompts: &[PromptIn]) -> Option<ApiError> {
    let vocab = model.tokenizer.vocab_size();
    prompts.iter().find_map(|p| {
        let PromptIn::Ids(ids) = p else { return None };
        let (min, max) = (ids.iter().min()?, ids.iter().max()?);
        if *min < 0 {
            return Some(ApiError::out_of_vocabulary(*min));
        }
        (u64::try_from(*max).unwrap_or(0) >= vocab).then(|| ApiError::out_of_vocabulary(*max))
    })
}

/// Most sequences (prompts x n) one request may ask for: each is an engine
/// request with its own plan (vLLM allows n up to 16,384 a prompt).
const MAX_CHOICES: u64 = 1_024;

/// Most output tokens one request may plan (sequences x their
/// `max_tokens`): planning reads each answer once (its tokens are made
/// again as they are sent, `super::answer`), so this bounds a request's
/// planning time.
const MAX_PLANNED_TOKENS: u64 = 2 << 20;

/// vLLM's completions default `max_tokens` (the legacy OpenAI default).
const COMPLETIONS_DEFAULT_MAX_TOKENS: u64 = 16;

async fn handle(
    app: &Arc<App>,
    api: Api,
    stamp: SimTime,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let created = unix_now();
    let body = read_body(app, headers, body).await?;
    let value = json_body(headers, &body)?;
    let mut parsed = request::read(api, &value)?;
    if api == Api::Chat {
        parsed.chat = ChatInput::from_body(&body);
    }
    let (model, lora) = app.model_and_adapter(parsed.model.as_deref())?;
    let adapter_name = if lora != 0 { parsed.model.clone() } else { None };
    // vLLM's `_preflight(request.n or 1)`: after the body's validation and
    // the model check, before the prompt is rendered (so before any
    // context, tool or vocabulary error); several prompts count `n` here.
    let n = if parsed.fields.n == 0 { 1 } else { parsed.fields.n };
    if let Some(busy) = model.admission.preflight(n) {
        lock(&model.replicas[0].stats).admission_rejected(busy);
        return Err(busy_error(busy));
    }
    // vLLM's refusals of a `tool_choice` the model's flags do not allow.
    let mode = tools::mode(&model.spec.tools, parsed.tools.as_ref())?;
    if matches!(parsed.prompts.first(), Some(PromptIn::Chat(m)) if m.is_empty()) {
        return Err(ApiError::bad_request("`messages` must contain at least one message.").with_param("messages"));
    }
    frame_tools(&mut parsed);
    // Checked in `plan_reply`, after the context, as vLLM orders them.
    let mut options = parsed.fields.unchecked();
    if api == Api::Completion && parsed.fields.max_tokens.is_none() {
        options.max_tokens = Some(COMPLETIONS_DEFAULT_MAX_TOKENS);
    }
    let index = model_index(app, model);
    let body_id = parsed.request_id.take();
    let vocabulary = out_of_vocabulary(model, &parsed.prompts);
    // With prefix caching on, each prompt's content is hashed per choice.
    let contents: Vec<PromptContent> = match super::prefix::caching(&model.spec) {
        true => parsed.prompts.iter().map(PromptContent::from).collect(),
        false => Vec::new(),
    };
    // A model's chat template renders on the pool too (up to its fuel bound).
    let reply = if needs_pool(&options) || (api == Api::Chat && model.tokenizer.chat_template().is_some()) {
        // Stop strings and long answers (`ignore_eos`, `min_tokens`) cost
        // time linear in their size: plan on the blocking pool, so
        // `/health` and other requests never wait behind them.
        // At most `App::planning` at once: the cores left over answer
        // `/health` and stream tokens.
        let permit = app.planning.acquire().await.map_err(|e| ApiError::internal(format!("planning closed: {e}")))?;
        let app2 = Arc::clone(app);
        let planned =
            tokio::task::spawn_blocking(move || plan_reply(&app2, index, api, &parsed, &mode, options, created)).await;
        drop(permit);
        planned.map_err(|e| ApiError::internal(format!("planning the answer failed: {e}")))??
    } else {
        plan_reply(app, index, api, &parsed, &mode, options, created)?
    };
    let mut reply = reply;
    if let Some(name) = adapter_name {
        // vLLM answers with the name the request sent: the adapter's.
        reply.model = name;
    }
    reply.id = format!("{}{}", if api == Api::Chat { "chatcmpl-" } else { "cmpl-" }, request_id(app, headers, body_id));
    if let Some(err) = vocabulary {
        // vLLM finds it when the engine takes the request: a stream has
        // already answered 200, so it gets the error as its one event.
        if !reply.options.stream {
            return Err(err);
        }
        app.count_error(err.status.as_u16());
        return Ok(sse::error_response(&err));
    }
    // vLLM's engine refuses a priority it does not schedule by.
    let priority = reply.options.priority;
    let by_priority = matches!(&model.spec.engine, EngineKind::Scheduler(s)
        if s.engine.scheduling_policy == llmsim_core::engine::SchedulingPolicy::Priority);
    if priority != 0 && !by_priority {
        return Err(request::priority_not_enabled(priority));
    }
    let fault = inject(app, model)?;
    let epoch = app.epoch.load(Ordering::SeqCst);
    let n = reply.options.n.max(1);
    let session = session_key(headers, &value);
    let mut feeds = Vec::with_capacity(reply.choices.len());
    let mut accepted = Vec::with_capacity(reply.choices.len());
    for c in &reply.choices {
        let req = FeedRequest {
            stamp,
            prompt: c.prompt_tokens,
            output: c.plan.output,
            finish: c.plan.finish,
            // Clamped to the context in `plan_reply`, as vLLM's engine sees it.
            max_tokens: Some(c.max_tokens),
            n: if c.index % reply.options.n == 0 { reply.options.n } else { 0 },
            epoch,
            hashes: contents.get((c.index / n) as usize).map_or_else(Vec::new, |content| {
                super::prefix::for_model(&model.spec, content, c.prompt_tokens, &c.plan)
            }),
            session,
            priority: priority.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            lora,
        };
        let (feed, acc) = match Feed::start(model, app.clock, req).await {
            Ok(started) => started,
            // Refused by `check_admission` as the engine takes it (the
            // preflight passed on older counts): vLLM has answered a stream
            // 200 by then, and sends the 503's body as its one event.
            Err(ev @ FeedEvent::Busy(_)) if reply.options.stream => {
                let err = feed_error(model, c.prompt_tokens, c.plan.output, &ev);
                app.count_error(err.status.as_u16());
                return Ok(sse::error_response(&err));
            }
            Err(ev) => return Err(feed_error(model, c.prompt_tokens, c.plan.output, &ev)),
        };
        feeds.push(feed);
        accepted.push(acc);
    }
    let ctx = Ctx { app: app.clone(), model: index, reply, stamp, accepted, epoch, fault };
    if ctx.reply.options.stream { Ok(sse::response(ctx, feeds)) } else { whole(ctx, feeds).await }
}

/// The conversation a request belongs to, for `session_affinity`: the
/// `x-session-id` header (what session-aware gateways set), else the
/// OpenAI body's `user` (the end user's id), hashed (FNV-1a, the same on
/// every machine); `None` without either (or with an empty one).
fn session_key(headers: &HeaderMap, body: &serde_json::Value) -> Option<u64> {
    let header = headers.get("x-session-id").map(|v| v.as_bytes());
    let key = header.or_else(|| body.get("user").and_then(|u| u.as_str()).map(str::as_bytes))?;
    if key.is_empty() {
        return None;
    }
    Some(llmsim_core::util::fnv1a(key.iter().copied()))
}

/// Picks this request's fault (`faults`), counts and logs it; the faults
/// that answer before the first byte are the error returned.
fn inject(app: &App, model: &ModelHandle) -> Result<Option<Kind>, ApiError> {
    let Some(f) = &model.spec.faults else { return Ok(None) };
    let k = model.arrivals.fetch_add(1, Ordering::Relaxed);
    let waiting: u64 = model.replicas.iter().map(|s| s.gauges.waiting.load(Ordering::Relaxed)).sum();
    let kind = if f.max_waiting.is_some_and(|m| waiting >= m) { Some(Kind::QueueFull) } else { f.pick(k) };
    let Some(kind) = kind else { return Ok(None) };
    model.faults_seen[kind.slot()].fetch_add(1, Ordering::Relaxed);
    if let Some(log) = &model.fault_log {
        lock(log).write(app.clock.now(), k, kind);
    }
    let http = |status: StatusCode| ApiError::http(status);
    match kind {
        Kind::Http429 { retry_after_s } => {
            Err(ApiError { retry_after: Some(retry_after_s), ..http(StatusCode::TOO_MANY_REQUESTS) })
        }
        Kind::Http500 => Err(http(StatusCode::INTERNAL_SERVER_ERROR)),
        Kind::Http503 => Err(http(StatusCode::SERVICE_UNAVAILABLE)),
        Kind::QueueFull => Err(ApiError {
            message: format!(
                "Too many requests waiting: model `{}` has {waiting} waiting and accepts at most {} (faults.max_waiting).",
                model.spec.name,
                f.max_waiting.unwrap_or(0)
            ),
            retry_after: Some(1),
            ..http(StatusCode::TOO_MANY_REQUESTS)
        }),
        other => Ok(Some(other)),
    }
}

/// Unix seconds now: each response's `created` (vLLM stamps every response
/// when it builds it).
fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn needs_pool(o: &request::Options) -> bool {
    !o.stops.is_empty() || o.ignore_eos || o.min_tokens > 0 || o.n > 1 || o.logprobs.is_some()
}

fn model_index(app: &App, model: &ModelHandle) -> usize {
    app.models.iter().position(|m| std::ptr::eq(m, model)).unwrap_or(0)
}

/// Counts a prompt's tokens with the model's tokenizer; returns the count
/// and the text the responses script matches and `echo` repeats.
fn prompt_tokens(
    model: &ModelHandle,
    p: &PromptIn,
    chat: Option<&ChatInput>,
) -> Result<(usize, String, String), ApiError> {
    let tok = &model.tokenizer;
    Ok(match p {
        PromptIn::Chat(messages) => {
            // The model's chat template when it has one, else ChatML.
            let n = match chat.and_then(|c| tok.template_ids(c)) {
                Some(ids) => ids.map_err(template_error)?.len(),
                None => tok.count_chat(messages.iter().map(|(r, c)| (r.as_str(), c.as_str()))),
            };
            let last_user =
                messages.iter().rev().find(|(r, _)| r == "user").map(|(_, c)| c.clone()).unwrap_or_default();
            // Chat `echo` repeats the last message when it is the assistant's.
            let echo = messages.last().filter(|(r, _)| r == "assistant").map(|(_, c)| c.clone()).unwrap_or_default();
            (n, last_user, echo)
        }
        PromptIn::Text(t) => (tok.count(t), t.clone(), t.clone()),
        PromptIn::Ids(ids) => {
            let ids: Vec<u64> = ids.iter().map(|&i| u64::try_from(i).unwrap_or(u64::MAX)).collect();
            let text = tok.decode(&ids).unwrap_or_default();
            (ids.len(), text.clone(), text)
        }
    })
}

/// A chat template that failed to render: a 400 with its message, as
/// vLLM answers a `jinja2.TemplateError`.
fn template_error(e: TemplateError) -> ApiError {
    ApiError::bad_request(e.0)
}

/// Puts a chat's tool definitions into its prompt, as a chat template does
/// (`tools::frame`), so they count toward prompt tokens.
fn frame_tools(parsed: &mut Parsed) {
    if let (Some(t), Some(PromptIn::Chat(messages))) = (&parsed.tools, parsed.prompts.first_mut()) {
        tools::frame(messages, &t.tools);
    }
}

/// Checks the context (vLLM's rules and wording) and plans every choice.
fn plan_reply(
    app: &App,
    index: usize,
    api: Api,
    parsed: &Parsed,
    mode: &Mode,
    options: request::Options,
    created: u64,
) -> Result<Reply, ApiError> {
    let model = &app.models[index];
    let context = model.spec.context_length;
    let stops = Stops::new(options.stops.clone())?;
    // vLLM 0.33's order: a max_tokens over the whole context is refused
    // before the prompt is read; then each prompt over the context; then
    // the sampling parameters; below the context max_tokens is clamped
    // (per prompt, below).
    if let Some(m) = options.max_tokens.filter(|&m| m > u64::from(context)) {
        let sent = options.max_tokens_sent.clone().unwrap_or_else(|| m.to_string());
        return Err(ApiError::max_tokens_over_context(options.max_tokens_param, &sent, context));
    }
    let mut counted = Vec::with_capacity(parsed.prompts.len());
    for prompt in &parsed.prompts {
        let (count, text, echo) = prompt_tokens(model, prompt, parsed.chat.as_ref())?;
        let ids = matches!(prompt, PromptIn::Ids(_));
        if count == 0 {
            return Err(ApiError::empty_prompt());
        }
        if count as u64 > u64::from(context) {
            return Err(ApiError::prompt_too_long(context, count as u64, !ids));
        }
        counted.push((count, text, echo));
    }
    parsed.fields.check()?;
    let wanted = parsed.prompts.len() as u64 * u64::from(options.n);
    if wanted > MAX_CHOICES {
        return Err(ApiError::bad_request(format!(
            "{} prompts x n={} asks for {wanted} sequences; llmsim plans at most {MAX_CHOICES} per request.",
            parsed.prompts.len(),
            options.n
        ))
        .with_param("n"));
    }
    let mut planned = 0u64;
    let mut choices = Vec::new();
    let mut total_prompt = 0u32;
    for (p, (prompt, (count, text, echo))) in parsed.prompts.iter().zip(counted).enumerate() {
        let (last_role, turns) = match prompt {
            PromptIn::Chat(m) => (m.last().map(|(r, _)| r.as_str()), m.len()),
            _ => (None, 0),
        };
        let offered = tools::offered(mode, parsed.tools.as_ref(), last_role);
        let max_tokens = clamp_to_context(context, count, matches!(prompt, PromptIn::Ids(_)), &options)?;
        let prompt_n = u32::try_from(count).unwrap_or(u32::MAX);
        total_prompt = total_prompt.saturating_add(prompt_n);
        let lengths = Lengths {
            max_tokens,
            min_tokens: options.min_tokens,
            ignore_eos: options.ignore_eos,
            include_stop: options.include_stop,
        };
        planned += u64::from(max_tokens) * u64::from(options.n);
        if planned > MAX_PLANNED_TOKENS {
            return Err(ApiError::bad_request(format!(
                "this request may generate up to {planned} tokens (sequences x max_tokens); llmsim plans at most \
                 {MAX_PLANNED_TOKENS} per request: lower n or max_tokens."
            ))
            .with_param(options.max_tokens_param));
        }
        for j in 0..options.n {
            // Sample j of n answers with its own seed, so the n choices differ
            // as sampled sequences do, and replay the same for the same seed.
            let seed = options.seed.map(|s| if j == 0 { s } else { s.wrapping_add(u64::from(j)) });
            let seed = match (seed, j) {
                (Some(s), _) => Some(s),
                (None, 0) => None,
                (None, j) => Some(app.responses.seed().wrapping_add(u64::from(j))),
            };
            let query = Query { last_user_message: &text, model: &model.spec.name, seed, tools: &offered };
            let answer = app.responses.answer(&query);
            let choice_index = u32::try_from(p).unwrap_or(u32::MAX).saturating_mul(options.n).saturating_add(j);
            // A call's id and made-up parts: seed, message, turn and choice.
            let call_hash = args::hash_of(&[
                &seed.unwrap_or(app.responses.seed()).to_le_bytes(),
                text.as_bytes(),
                &(turns as u64).to_le_bytes(),
                &choice_index.to_le_bytes(),
            ]);
            let call =
                parsed.tools.as_ref().and_then(|t| tools::plan_call(mode, t, answer.tool_call.as_ref(), call_hash));
            // Structured output (`response_format`, `structured_outputs`):
            // text that satisfies it, unless the answer is a tool call.
            let made = match (&call, &parsed.structured) {
                (None, Some(c)) => Some(c.text(call_hash).map_err(|e| ApiError::bad_request(e.0))?),
                _ => None,
            };
            let text = call.as_ref().map(|c| c.text.as_str()).or(made.as_deref()).unwrap_or(&answer.text);
            let head = Head::of(text, &model.tokenizer);
            let filler_seed = seed.unwrap_or(app.responses.seed()) ^ ((p as u64) << 32);
            // Read once to end it; its tokens are made again as they are sent.
            let plan = super::answer::plan_lazy(head, &model.tokenizer, filler_seed, stops.as_ref(), lengths);
            let logprobs = options.logprobs.map(|top| super::logprobs::Synth {
                top,
                seed: options.seed.unwrap_or(0),
                choice: choice_index,
            });
            let echo = if options.echo { echo.clone() } else { String::new() };
            choices.push(Choice {
                index: choice_index,
                plan,
                prompt_tokens: prompt_n,
                max_tokens,
                echo,
                logprobs,
                tools: call,
            });
        }
    }
    Ok(Reply {
        api,
        // Formed by the caller (`request_id`).
        id: String::new(),
        created,
        model: model.spec.name.clone(),
        choices,
        prompt_tokens: total_prompt,
        options,
        cached_tokens: None,
    })
}

/// vLLM 0.33's length rules for one prompt of `count` tokens (`ids`: sent
/// as token ids, so counted whole; text is tokenized with truncation one
/// past the context): a prompt over the context is refused, else
/// `max_tokens` (or its default) is clamped to what the context leaves
/// (`get_max_tokens`), and the sampling checks that depend on it run on the
/// clamped value (a prompt that fills the context leaves 0: "at least 1").
fn clamp_to_context(context: u32, count: usize, ids: bool, options: &request::Options) -> Result<u32, ApiError> {
    let count = count as u64;
    if count > u64::from(context) {
        return Err(ApiError::prompt_too_long(context, count, !ids));
    }
    let room = context - count as u32;
    let max_tokens = options.max_tokens.map_or(room, |m| room.min(u32::try_from(m).unwrap_or(u32::MAX)));
    if max_tokens < 1 {
        return Err(request::max_tokens_below_one("0"));
    }
    if options.min_tokens > max_tokens {
        return Err(request::min_tokens_over_max(options.min_tokens, max_tokens));
    }
    Ok(max_tokens)
}

/// The non-streaming answer: wait for every choice's tokens, then one
/// JSON body with the explanation headers (of the first choice).
async fn whole(mut ctx: Ctx, feeds: Vec<Feed>) -> Result<Response, ApiError> {
    let waits = feeds.into_iter().enumerate().map(|(i, mut feed)| {
        let ctx = &ctx;
        async move {
            let mut obs = Observed::default();
            let mut last = None;
            let story = loop {
                match feed.next().await {
                    FeedEvent::Token { due, .. } => ctx.observe_token(&mut obs, &mut last, due),
                    FeedEvent::Done(story) => break story,
                    other => {
                        let c = &ctx.reply.choices[i];
                        return Err(feed_error(ctx.handle(), c.prompt_tokens, c.plan.output, &other));
                    }
                }
            };
            ctx.report(i, &mut obs, last);
            Ok((story, obs.delivery_lags_ns.iter().copied().max().unwrap_or(0)))
        }
    });
    let done = futures_util::future::join_all(waits).await;
    let mut stories = Vec::with_capacity(done.len());
    for d in done {
        stories.push(d?);
    }
    let max_lag = stories.iter().map(|(_, l)| *l).max().unwrap_or(0);
    // The prompt's hit is the first choice's first admission.
    if let Some((story, _)) = stories.first() {
        ctx.note_cached(story);
    }
    let mut body = ctx.reply.full_body();
    match ctx.fault {
        Some(Kind::Stall { stall_ms, .. }) => tokio::time::sleep(std::time::Duration::from_millis(stall_ms)).await,
        Some(Kind::Cut { .. }) => return Ok(cut_response()),
        Some(Kind::Malformed { .. }) => {
            let mut half = body.len() / 2;
            while !body.is_char_boundary(half) {
                half -= 1;
            }
            body.truncate(half);
        }
        _ => {}
    }
    let mut resp = json_response(StatusCode::OK, body);
    if let Some((story, _)) = stories.first() {
        for (name, value) in explain(&ctx, 0, story, Some(max_lag)) {
            if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(&value)) {
                resp.headers_mut().insert(n, v);
            }
        }
    }
    Ok(resp)
}

/// A response whose body breaks before its first byte: the client sees the
/// status line and headers, then the connection closes.
fn cut_response() -> Response {
    let broken = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("llmsim fault injection: connection cut"))
    });
    let mut resp = (StatusCode::OK, Body::from_stream(broken)).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
