//! Streaming answers as server-sent events, framed as vLLM frames them:
//! `data: {json}\n\n` per chunk (chat: a role chunk first), one chunk per
//! token, a finish chunk, a usage chunk when `stream_options.include_usage`
//! is set, then `data: [DONE]`. Before `[DONE]` comes one SSE comment line
//! (`: llmsim ...`) with the request's simulated story, which SSE clients
//! ignore and curious humans read. An error after the stream started is one
//! error frame, then `data: [DONE]`.
//!
//! The body is a stream that owns the request's feed: when the client goes
//! away, hyper drops the body, the feed is dropped, and the request is
//! aborted at once.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::feed::{Feed, FeedEvent};
use super::openai::{self, Api};
use super::routes::{Ctx, explain, feed_error};
use super::stats::Observed;
use crate::time::SimTime;

enum Phase {
    Start,
    Tokens,
    End,
}

struct Streamer {
    ctx: Ctx,
    feed: Feed,
    phase: Phase,
    obs: Observed,
    last: Option<SimTime>,
}

/// The streaming response for an accepted request.
pub fn response(ctx: Ctx, feed: Feed) -> Response {
    let phase = if ctx.reply.api == Api::Chat { Phase::Start } else { Phase::Tokens };
    let head = [
        ("x-llmsim-engine", ctx.handle().spec.engine.as_str().to_string()),
        ("x-llmsim-request-id", ctx.accepted.id.to_string()),
        ("x-llmsim-arrival-s", ctx.accepted.arrival.to_string()),
        ("x-llmsim-prompt-tokens", ctx.reply.prompt_tokens.to_string()),
        ("x-llmsim-output-tokens", ctx.reply.plan.output.to_string()),
    ];
    let state = Streamer { ctx, feed, phase, obs: Observed::default(), last: None };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        let bytes = s.advance().await?;
        Some((Ok::<Bytes, Infallible>(Bytes::from(bytes)), s))
    });
    let mut resp = (StatusCode::OK, Body::from_stream(stream)).into_response();
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

impl Streamer {
    /// The next piece of the body, or None when it is complete.
    async fn advance(&mut self) -> Option<String> {
        match self.phase {
            Phase::Start => {
                self.phase = Phase::Tokens;
                Some(self.ctx.reply.role_frame())
            }
            Phase::Tokens => {
                let ev = self.feed.next().await;
                Some(self.on_event(ev))
            }
            Phase::End => None,
        }
    }

    fn on_event(&mut self, ev: FeedEvent) -> String {
        match ev {
            FeedEvent::Token { index, due } => {
                self.ctx.observe_token(&mut self.obs, &mut self.last, due);
                self.ctx.reply.token_frame(index)
            }
            FeedEvent::Done(story) => {
                self.phase = Phase::End;
                self.ctx.report(&mut self.obs, self.last);
                super::prefix::set_cached(&mut self.ctx, &story);
                let mut out = self.ctx.reply.end_frames();
                let max_lag = self.obs.delivery_lags_ns.iter().copied().max();
                let fields: Vec<String> = explain(&self.ctx, &story, max_lag)
                    .into_iter()
                    .map(|(k, v)| format!("{}={v}", k.trim_start_matches("x-llmsim-").replace('-', "_")))
                    .collect();
                out.push_str(&format!(": llmsim {}\n\ndata: [DONE]\n\n", fields.join(" ")));
                out
            }
            other => {
                self.phase = Phase::End;
                let err = feed_error(self.ctx.handle(), &self.ctx.reply, &other);
                self.ctx.app.count_error(err.status.as_u16());
                openai::error_frames(&err)
            }
        }
    }
}
