//! Streaming answers as server-sent events, framed as vLLM frames them:
//! `data: {json}\n\n` per chunk (chat: a role chunk per choice first), one
//! chunk per token, the last token's chunk carrying `finish_reason` (for an
//! answer that ends with its end-of-sequence token, that chunk's text is
//! empty), a usage chunk when `stream_options.include_usage` is set, then
//! `data: [DONE]`. With `--stream-comments`, one SSE comment line per
//! choice (`: llmsim ...`) with its simulated story comes before `[DONE]`:
//! most SSE clients skip comments, but guidellm counts the line as a chunk,
//! so it is off by default and a stream is then exactly what vLLM sends.
//! An error after the stream started is one error frame, then
//! `data: [DONE]`.
//!
//! With several choices (`n`, or a list of prompts) each is its own engine
//! request with its own feed, and their chunks interleave in the order
//! their tokens come due, as vLLM's do.
//!
//! The body is a stream that owns the requests' feeds: when the client goes
//! away, hyper drops the body, the feeds are dropped, and the requests are
//! aborted at once.

use std::pin::Pin;

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, SelectAll, Stream, StreamExt};

use super::context::{Ctx, explain, feed_error};
use super::faults::Kind;
use super::feed::{Feed, FeedEvent};
use super::openai::{self, Api};
use super::telemetry::{Observed, Story};
use llmsim_core::time::SimTime;

type Events = Pin<Box<dyn Stream<Item = (usize, FeedEvent)> + Send>>;

/// One choice's events, ending after its last one.
fn events(choice: usize, feed: Feed) -> Events {
    Box::pin(stream::unfold(Some(feed), move |feed| async move {
        let mut feed = feed?;
        let ev = feed.next().await;
        let more = matches!(ev, FeedEvent::Token { .. });
        Some(((choice, ev), more.then_some(feed)))
    }))
}

enum Phase {
    Start,
    Tokens,
    End,
}

/// What was seen of one choice.
#[derive(Default)]
struct Seen {
    obs: Observed,
    last: Option<SimTime>,
    story: Option<Box<Story>>,
}

struct Streamer {
    ctx: Ctx,
    events: SelectAll<Events>,
    phase: Phase,
    seen: Vec<Seen>,
    open: usize,
    /// Token chunks sent, and whether the injected fault has happened.
    sent: u32,
    faulted: bool,
}

/// How long a `cut` waits for the tokens before it to be written.
const CUT_GRACE_MS: u64 = 20;

/// What the body does next.
enum Next {
    Bytes(String),
    /// Close the connection without finishing the body (a `cut` fault).
    Cut,
}

/// The streaming response for accepted requests (one feed per choice).
pub fn response(ctx: Ctx, feeds: Vec<Feed>) -> Response {
    let phase = if ctx.reply.api == Api::Chat { Phase::Start } else { Phase::Tokens };
    let first = &ctx.reply.choices[0];
    let mut head = vec![
        ("x-llmsim-engine", ctx.handle().spec.engine.as_str().to_string()),
        ("x-llmsim-request-id", ctx.accepted[0].id.to_string()),
        ("x-llmsim-arrival-s", ctx.accepted[0].arrival.to_string()),
        ("x-llmsim-prompt-tokens", ctx.reply.prompt_tokens.to_string()),
        ("x-llmsim-output-tokens", first.plan.output.to_string()),
    ];
    if ctx.handle().clustered() {
        // The first choice's replica (each choice's is in its `: llmsim` line).
        head.push(("x-llmsim-replica", ctx.accepted[0].replica.to_string()));
    }
    let open = feeds.len();
    let seen = (0..open).map(|_| Seen::default()).collect();
    let events = stream::select_all(feeds.into_iter().enumerate().map(|(i, f)| events(i, f)));
    let state = Streamer { ctx, events, phase, seen, open, sent: 0, faulted: false };
    let body = stream::unfold(state, |mut s| async move {
        match s.advance().await? {
            Next::Bytes(bytes) => Some((Ok(Bytes::from(bytes)), s)),
            Next::Cut => {
                s.phase = Phase::End;
                Some((Err(std::io::Error::other("llmsim fault injection: connection cut")), s))
            }
        }
    });
    let mut resp = (StatusCode::OK, Body::from_stream(body)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    for (name, value) in head {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    resp
}

/// A stream that fails before its first token: HTTP 200 (the head is
/// sent), the error as one event, then `data: [DONE]`, as vLLM streams an
/// error its engine raises when it takes the request.
pub fn error_response(err: &super::errors::ApiError) -> Response {
    let mut resp = (StatusCode::OK, openai::error_frames(err)).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

impl Streamer {
    /// The next piece of the body, or None when it is complete.
    async fn advance(&mut self) -> Option<Next> {
        match self.phase {
            Phase::Start => {
                self.phase = Phase::Tokens;
                Some(Next::Bytes(self.ctx.reply.role_frames()))
            }
            Phase::Tokens => {
                if let Some(next) = self.fault().await {
                    return Some(next);
                }
                let Some((choice, ev)) = self.events.next().await else {
                    self.phase = Phase::End;
                    return Some(Next::Bytes(self.end()));
                };
                if matches!(ev, FeedEvent::Token { .. }) {
                    self.sent += 1;
                }
                Some(Next::Bytes(self.on_event(choice, ev)))
            }
            Phase::End => None,
        }
    }

    /// The injected fault, once its token count is reached.
    async fn fault(&mut self) -> Option<Next> {
        let kind = self.ctx.fault?;
        let after = match kind {
            Kind::Stall { after_tokens, .. } | Kind::Cut { after_tokens } | Kind::Malformed { after_tokens } => {
                after_tokens
            }
            _ => return None,
        };
        if self.faulted || self.sent < after {
            return None;
        }
        self.faulted = true;
        match kind {
            Kind::Stall { stall_ms, .. } => {
                tokio::time::sleep(std::time::Duration::from_millis(stall_ms)).await;
                None
            }
            Kind::Cut { .. } => {
                // hyper drops what it has not written yet when a body fails:
                // give the tokens already sent time to leave first.
                tokio::time::sleep(std::time::Duration::from_millis(CUT_GRACE_MS)).await;
                Some(Next::Cut)
            }
            _ => {
                // A chunk whose JSON stops half way, as a broken proxy sends.
                let whole = self.ctx.reply.token_frame(0, 1);
                let json = whole.trim_start_matches("data: ").trim_end();
                let mut half = json.len() / 2;
                while !json.is_char_boundary(half) {
                    half -= 1;
                }
                Some(Next::Bytes(format!("data: {}\n\n", &json[..half])))
            }
        }
    }

    fn on_event(&mut self, choice: usize, ev: FeedEvent) -> String {
        match ev {
            FeedEvent::Token { index, due } => {
                let seen = &mut self.seen[choice];
                self.ctx.observe_token(&mut seen.obs, &mut seen.last, due);
                self.ctx.reply.token_frame(choice, index)
            }
            FeedEvent::Done(story) => {
                let seen = &mut self.seen[choice];
                self.ctx.report(choice, &mut seen.obs, seen.last);
                // The prompt's hit is the first choice's first admission
                // (later choices of the same prompt find its blocks too).
                if choice == 0 {
                    self.ctx.note_cached(&story);
                }
                seen.story = Some(story);
                self.open -= 1;
                if self.open == 0 {
                    self.phase = Phase::End;
                    return self.end();
                }
                String::new()
            }
            other => {
                self.phase = Phase::End;
                let c = &self.ctx.reply.choices[choice];
                let err = feed_error(self.ctx.handle(), c.prompt_tokens, c.plan.output, &other);
                self.ctx.app.count_error(err.status.as_u16());
                openai::error_frames(&err)
            }
        }
    }

    /// Usage, the explanation comments and `[DONE]`.
    fn end(&mut self) -> String {
        let mut out = self.ctx.reply.usage_frame();
        let comments = if self.ctx.app.options.stream_comments { self.seen.as_slice() } else { &[] };
        for (i, seen) in comments.iter().enumerate() {
            let Some(story) = &seen.story else { continue };
            let max_lag = seen.obs.delivery_lags_ns.iter().copied().max();
            let fields: Vec<String> = explain(&self.ctx, i, story, max_lag)
                .into_iter()
                .map(|(k, v)| format!("{}={v}", k.trim_start_matches("x-llmsim-").replace('-', "_")))
                .collect();
            out.push_str(&format!(": llmsim {}\n\n", fields.join(" ")));
        }
        out.push_str("data: [DONE]\n\n");
        out
    }
}
