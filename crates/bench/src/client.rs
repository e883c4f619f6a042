//! One streamed completion over HTTP, timed chunk by chunk.
//!
//! HTTP client: reqwest without default features (HTTP/1.1 only, no TLS,
//! no proxy lookup): a well-kept client on hyper that already does
//! connection pooling, chunked bodies and timeouts, so this module only
//! parses Server-Sent Events. TLS is left out because the targets are
//! local servers; `https://` URLs are refused up front with a clear error.
//!
//! A chunk counts as a token when it carries non-empty text (completions
//! `choices[0].text`, chat `choices[0].delta.content` or reasoning): the
//! opening role-only chat chunk, the finish chunk and the usage chunk are
//! not tokens. Token counts come from the final `usage` chunk
//! (`stream_options.include_usage`), as vLLM's client does, else from the
//! chunk count.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// Why a request failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// Could not connect (refused, unreachable).
    Connect(String),
    /// The server answered with an error status.
    Http { status: u16, body: String },
    /// No complete answer within the per-request timeout.
    Timeout,
    /// The stream carried an error event or ended without a token.
    Stream(String),
    /// The connection broke in the middle of the stream.
    Cut(String),
    /// An SSE event's payload was not JSON.
    Malformed(String),
}

impl Failure {
    /// The counter it belongs to in the report.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Connect(_) => "connect",
            Failure::Http { .. } => "http",
            Failure::Timeout => "timeout",
            Failure::Stream(_) | Failure::Cut(_) | Failure::Malformed(_) => "stream",
        }
    }

    /// The finer kind, for `llmsim_failures_by_kind`: `http_<status>`,
    /// `stream_cut`, `stream_malformed`, `stream_error`, `connect`,
    /// `timeout`.
    pub fn detail(&self) -> String {
        match self {
            Failure::Http { status, .. } => format!("http_{status}"),
            Failure::Cut(_) => "stream_cut".into(),
            Failure::Malformed(_) => "stream_malformed".into(),
            Failure::Stream(_) => "stream_error".into(),
            other => other.kind().into(),
        }
    }

    pub fn message(&self) -> String {
        match self {
            Failure::Connect(m) => format!("connection failed: {m}"),
            Failure::Http { status, body } => format!("HTTP {status}: {body}"),
            Failure::Timeout => "timed out".into(),
            Failure::Stream(m) => format!("stream error: {m}"),
            Failure::Cut(m) => format!("stream cut: {m}"),
            Failure::Malformed(m) => format!("malformed stream: {m}"),
        }
    }
}

/// A finished stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    /// When each token chunk arrived.
    pub chunks: Vec<Instant>,
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens` (a server with prefix
    /// caching reporting it).
    pub cached_tokens: Option<u32>,
    /// The answer's text (`choices[0].delta.content` or `.text`), kept
    /// only when asked for (a multi-turn bench resends it).
    pub text: Option<String>,
}

/// What one request produced.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub sent: Instant,
    pub result: Result<Reply, Failure>,
    /// The prompt's tokens by the built-in tokenizer, when the sender
    /// counted them (a multi-turn bench: its prompts grow turn by turn).
    pub counted: Option<u32>,
}

/// Which OpenAI endpoint is loaded.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

pub struct Client {
    http: reqwest::Client,
    base: String,
    model: String,
    endpoint: Endpoint,
    timeout: Duration,
}

impl Client {
    pub fn new(base: &str, model: &str, endpoint: Endpoint, timeout: Duration) -> Result<Client, super::BenchError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| super::BenchError::Client(e.to_string()))?;
        Ok(Client { http, base: base.trim_end_matches('/').to_string(), model: model.to_string(), endpoint, timeout })
    }

    /// Streams one completion of `prompt`, pinned to `max_tokens`.
    pub async fn complete(&self, prompt: &str, max_tokens: u32) -> Exchange {
        let (path, body) = self.body(prompt, max_tokens);
        self.send(path, body, Reply::default()).await
    }

    /// Streams one chat completion of a whole conversation (`(role,
    /// content)` per message), pinned to `max_tokens`, keeping the answer's
    /// text for the next turn.
    pub async fn converse(&self, messages: &[(&str, &str)], max_tokens: u32) -> Exchange {
        let counted = llmsim_content::tokenizer::count_chat(messages.iter().copied()) as u32;
        let messages: Vec<Value> =
            messages.iter().map(|(role, content)| serde_json::json!({"role": role, "content": content})).collect();
        let mut body = self.common(max_tokens);
        body["messages"] = Value::Array(messages);
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let reply = Reply { text: Some(String::new()), ..Reply::default() };
        Exchange { counted: Some(counted), ..self.send("/v1/chat/completions", body, reply).await }
    }

    async fn send(&self, path: &str, body: Vec<u8>, reply: Reply) -> Exchange {
        let url = format!("{}{path}", self.base);
        let sent = Instant::now();
        let result = match tokio::time::timeout(self.timeout, self.stream(&url, body, reply)).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Timeout),
        };
        Exchange { sent, result, counted: None }
    }

    fn common(&self, max_tokens: u32) -> Value {
        serde_json::json!({
            "model": self.model,
            "max_tokens": max_tokens,
            "ignore_eos": true,
            "temperature": 0,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    }

    fn body(&self, prompt: &str, max_tokens: u32) -> (&'static str, Vec<u8>) {
        let common = self.common(max_tokens);
        let (path, extra) = match self.endpoint {
            Endpoint::Completions => ("/v1/completions", ("prompt", Value::String(prompt.to_string()))),
            Endpoint::Chat => {
                ("/v1/chat/completions", ("messages", serde_json::json!([{"role": "user", "content": prompt}])))
            }
        };
        let mut body = common;
        body[extra.0] = extra.1;
        (path, serde_json::to_vec(&body).unwrap_or_default())
    }

    async fn stream(&self, url: &str, body: Vec<u8>, mut reply: Reply) -> Result<Reply, Failure> {
        let request = self.http.post(url).header("content-type", "application/json").body(body);
        let mut resp = request.send().await.map_err(transport)?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(Failure::Http { status: status.as_u16(), body: excerpt(&text) });
        }
        let mut lines = SseLines::default();
        let cut = |e: reqwest::Error| match transport(e) {
            Failure::Stream(m) => Failure::Cut(m),
            other => other,
        };
        while let Some(bytes) = resp.chunk().await.map_err(cut)? {
            let now = Instant::now();
            for payload in lines.feed(&bytes) {
                match event(&payload, &mut reply)? {
                    Step::Token => reply.chunks.push(now),
                    Step::Done => return finish(reply),
                    Step::Other => {}
                }
            }
        }
        // Some servers close the stream without `[DONE]`; a reply with
        // tokens is still a reply.
        finish(reply)
    }

    /// Whether the server answers at all: any HTTP answer to `GET
    /// {base}/health` will do (vLLM's and ours are 200; others may be 404).
    /// Like `vllm bench serve`'s initial test request, it stops a bench
    /// against a wrong address before anything is built or sent.
    pub async fn reachable(&self) -> Result<(), String> {
        let url = format!("{}/health", self.base);
        match tokio::time::timeout(self.timeout, self.http.get(url).send()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(transport(e).message()),
            Err(_) => Err("timed out".into()),
        }
    }

    /// POSTs to a path and returns the status, or a connection error.
    pub async fn post(&self, path: &str) -> Result<u16, String> {
        let url = format!("{}{path}", self.base);
        let fut = self.http.post(url).send();
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(r)) => Ok(r.status().as_u16()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("timed out".into()),
        }
    }

    /// GETs a JSON document; `Ok(None)` when the server answers 404/405.
    pub async fn get_json(&self, path: &str) -> Result<Option<Value>, String> {
        let url = format!("{}{path}", self.base);
        let fut = async {
            let r = self.http.get(url).send().await.map_err(|e| e.to_string())?;
            if matches!(r.status().as_u16(), 404 | 405) {
                return Ok(None);
            }
            if !r.status().is_success() {
                return Err(format!("HTTP {}", r.status().as_u16()));
            }
            let text = r.text().await.map_err(|e| e.to_string())?;
            serde_json::from_str(&text).map(Some).map_err(|e| format!("not JSON: {e}"))
        };
        tokio::time::timeout(self.timeout, fut).await.unwrap_or_else(|_| Err("timed out".into()))
    }
}

/// A reply without a single token has no TTFT: it counts as failed.
fn finish(reply: Reply) -> Result<Reply, Failure> {
    if reply.chunks.is_empty() {
        return Err(Failure::Stream("the stream ended without any token".into()));
    }
    Ok(reply)
}

fn transport(e: reqwest::Error) -> Failure {
    if e.is_connect() {
        let mut msg = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            msg = s.to_string();
            source = s.source();
        }
        Failure::Connect(msg)
    } else if e.is_timeout() {
        Failure::Timeout
    } else {
        Failure::Stream(e.to_string())
    }
}

/// The first 200 characters of a body, on one line.
fn excerpt(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(200).collect()
}

/// Splits a byte stream into SSE `data:` payloads.
#[derive(Default)]
pub struct SseLines {
    buf: Vec<u8>,
}

impl SseLines {
    /// Adds bytes; returns the payloads of the complete `data:` lines.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(data) = line.strip_prefix("data:") {
                out.push(data.trim_start().to_string());
            }
        }
        out
    }
}

/// What one SSE payload means for the reply.
#[derive(Debug, PartialEq)]
pub enum Step {
    Token,
    Done,
    Other,
}

/// Reads one payload: a token, the end, usage (recorded), or an error.
pub fn event(payload: &str, reply: &mut Reply) -> Result<Step, Failure> {
    if payload == "[DONE]" {
        return Ok(Step::Done);
    }
    let v: Value = serde_json::from_str(payload).map_err(|e| Failure::Malformed(format!("bad SSE JSON: {e}")))?;
    if let Some(err) = v.get("error") {
        let msg = err.get("message").and_then(Value::as_str).map_or_else(|| err.to_string(), str::to_string);
        return Err(Failure::Stream(msg));
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).map(|x| x as u32);
        reply.prompt_tokens = n("prompt_tokens").or(reply.prompt_tokens);
        reply.completion_tokens = n("completion_tokens").or(reply.completion_tokens);
        let cached = u.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64);
        reply.cached_tokens = cached.map(|x| x as u32).or(reply.cached_tokens);
    }
    let choice = v.get("choices").and_then(Value::as_array).and_then(|c| c.first());
    if let (Some(kept), Some(c)) = (reply.text.as_mut(), choice) {
        for p in ["/text", "/delta/content"] {
            kept.push_str(c.pointer(p).and_then(Value::as_str).unwrap_or_default());
        }
    }
    let text = |c: &Value| -> bool {
        let s = |p: &str| c.pointer(p).and_then(Value::as_str).is_some_and(|t| !t.is_empty());
        s("/text") || s("/delta/content") || s("/delta/reasoning_content") || s("/delta/reasoning")
    };
    Ok(if choice.is_some_and(text) { Step::Token } else { Step::Other })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_lines_survive_being_split_anywhere() {
        let stream = b"data: {\"a\":1}\r\n\r\n: comment\n\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let mut l = SseLines::default();
            let mut got = l.feed(&stream[..cut]);
            got.extend(l.feed(&stream[cut..]));
            assert_eq!(got, vec!["{\"a\":1}".to_string(), "[DONE]".to_string()], "cut at {cut}");
        }
    }

    #[test]
    fn only_chunks_with_text_are_tokens_and_usage_is_kept() {
        let mut r = Reply::default();
        let role = r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        assert_eq!(event(role, &mut r).unwrap(), Step::Other);
        assert_eq!(event(r#"{"choices":[{"delta":{"content":" hi"}}]}"#, &mut r).unwrap(), Step::Token);
        assert_eq!(event(r#"{"choices":[{"text":" hi","finish_reason":null}]}"#, &mut r).unwrap(), Step::Token);
        assert_eq!(event(r#"{"choices":[{"text":"","finish_reason":"length"}]}"#, &mut r).unwrap(), Step::Other);
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#;
        assert_eq!(event(usage, &mut r).unwrap(), Step::Other);
        assert_eq!((r.prompt_tokens, r.completion_tokens), (Some(7), Some(3)));
        assert_eq!(event("[DONE]", &mut r).unwrap(), Step::Done);
    }

    #[test]
    fn error_events_and_garbage_fail_the_request() {
        let mut r = Reply::default();
        let e = event(r#"{"error":{"message":"no KV room","code":400}}"#, &mut r).unwrap_err();
        assert_eq!(e, Failure::Stream("no KV room".into()));
        assert!(matches!(event("{nope", &mut r), Err(Failure::Malformed(_))));
        assert_eq!(Failure::Malformed(String::new()).detail(), "stream_malformed");
        assert_eq!(Failure::Http { status: 429, body: String::new() }.detail(), "http_429");
        assert_eq!(Failure::Cut(String::new()).kind(), "stream");
    }
}
