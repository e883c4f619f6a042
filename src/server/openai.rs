//! The OpenAI request bodies we read and the response bodies we write,
//! with vLLM's behaviour where the two differ.
//!
//! Requests: unknown fields are accepted and ignored (as vLLM does); the
//! fields that change what or when we answer are validated with vLLM's
//! messages. Responses: the shapes vLLM sends (`chat.completion`,
//! `chat.completion.chunk`, `text_completion`, a usage chunk with empty
//! `choices`), built from a [`Reply`] that knows the answer's tokens.

use serde::{Deserialize, Serialize};

use super::errors::ApiError;
use super::stats::Finish;
use super::stop::Stops;

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(flatten)]
    pub common: Common,
    pub max_completion_tokens: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Prompt,
    #[serde(flatten)]
    pub common: Common,
}

/// Fields both endpoints share.
#[derive(Debug, Deserialize)]
pub struct Common {
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub n: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
    pub continuous_usage_stats: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

/// A message's content: text, or a list of parts of which the text ones count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// A completions prompt: text, one text in a list, or token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u64>),
    IdLists(Vec<Vec<u64>>),
}

impl ChatMessage {
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// Parses a request body, naming the JSON path of a schema error. The body
/// must be one JSON value: anything but whitespace after it is refused as
/// vLLM refuses it ([`ApiError::extra_data`]).
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = if inner.is_syntax() || inner.is_eof() {
            format!("The request body is not valid JSON: {inner}")
        } else if matches!(path.as_str(), "." | "?" | "") {
            format!("Invalid request body: {inner}")
        } else {
            format!("Invalid request body at `{path}`: {inner}")
        };
        let err = ApiError::bad_request(msg);
        if matches!(path.as_str(), "." | "?" | "") { err } else { err.with_param(&path) }
    })?;
    if de.end().is_err() {
        return Err(ApiError::extra_data(extra_data_offset(body)));
    }
    Ok(value)
}

/// Where the text after a body's first JSON value starts, in characters
/// (Python's `JSONDecodeError.pos`, which vLLM reports): the first
/// character after the value and the JSON whitespace that follows it.
fn extra_data_offset(body: &[u8]) -> usize {
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<serde::de::IgnoredAny>();
    let _ = values.next();
    let end = values.byte_offset();
    let rest = body[end..].iter().take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')).count();
    String::from_utf8_lossy(&body[..end + rest]).chars().count()
}

/// Validated request options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub stream: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    /// As sent (at least 1): a value over the context is refused with the
    /// number the client sent, not a clamped one.
    pub max_tokens: Option<u64>,
    pub seed: Option<u64>,
    pub stops: Vec<String>,
}

impl Common {
    /// Checks the options vLLM checks, with its messages. `max_tokens` is
    /// the value that applies (`max_completion_tokens` wins in chat).
    pub fn options(&self, max_tokens: Option<i64>) -> Result<Options, ApiError> {
        if let Some(n) = self.n.filter(|&n| n != 1) {
            let msg = if n < 1 {
                format!("n must be at least 1, got {n}.")
            } else {
                format!("n={n} is not supported: llmsim simulates one sequence per request (n must be 1).")
            };
            return Err(ApiError::bad_request(msg).with_param("n"));
        }
        let stream = self.stream.unwrap_or(false);
        if self.stream_options.is_some() && !stream {
            return Err(ApiError::bad_request("Stream options can only be defined when `stream=True`.")
                .with_param("stream_options"));
        }
        let max_tokens = match max_tokens {
            Some(m) if m < 1 => {
                return Err(
                    ApiError::bad_request(format!("max_tokens must be at least 1, got {m}.")).with_param("max_tokens")
                );
            }
            Some(m) => Some(m.unsigned_abs()),
            None => None,
        };
        let stops = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        let opts = self.stream_options.as_ref();
        Ok(Options {
            stream,
            include_usage: opts.and_then(|o| o.include_usage).unwrap_or(false),
            continuous_usage: opts.and_then(|o| o.continuous_usage_stats).unwrap_or(false),
            max_tokens,
            seed: self.seed.map(|s| s as u64),
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
        })
    }
}

/// Which endpoint, for the response shapes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completion,
}

/// The answer's tokens and how they end: what the engine's `N` is.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub pieces: Vec<String>,
    /// The engine's output length (at least 1: an empty answer still ends
    /// with one end-of-sequence token).
    pub output: u32,
    pub finish: Finish,
    /// The stop string that ended the answer, if any.
    pub stop_reason: Option<String>,
}

/// Plans the answer's tokens: `tokens` are the answer's (concatenating to
/// `answer`), read lazily and at most `max_tokens` of them. `stop` ends the
/// answer as vLLM does ([`Stops`]: the text before the stop string, which
/// is not returned; the token that completed it is the last one, its text
/// and any after the cut empty); otherwise `max_tokens` truncates, finish
/// `length`.
pub fn plan<'a>(
    answer: &'a str,
    tokens: impl IntoIterator<Item = &'a str>,
    stops: Option<&Stops>,
    max_tokens: u32,
) -> Plan {
    let limit = max_tokens as usize;
    let mut tokens = tokens.into_iter();
    let taken: Vec<&str> = tokens.by_ref().take(limit).collect();
    let hit = stops.and_then(|s| s.find(taken.iter().copied(), limit));
    let (pieces, finish, stop_reason) = match hit {
        Some(hit) => {
            let mut start = 0;
            let pieces = taken[..=hit.token]
                .iter()
                .map(|t| {
                    let end = start + t.len();
                    let piece = answer[start.min(hit.cut)..end.min(hit.cut)].to_string();
                    start = end;
                    piece
                })
                .collect();
            (pieces, Finish::Stop, Some(hit.stop))
        }
        None => {
            let finish = if tokens.next().is_some() { Finish::Length } else { Finish::Stop };
            (taken.into_iter().map(str::to_string).collect::<Vec<_>>(), finish, None)
        }
    };
    let output = u32::try_from(pieces.len()).unwrap_or(u32::MAX).max(1);
    Plan { pieces, output, finish, stop_reason }
}

/// Everything needed to write one request's response bodies.
#[derive(Clone, Debug)]
pub struct Reply {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub plan: Plan,
    pub prompt_tokens: u32,
    pub options: Options,
    /// With prefix caching on: the prompt tokens found in the cache, known
    /// once the request was admitted (`super::prefix`).
    pub cached_tokens: Option<u32>,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: u32,
    total_tokens: u32,
    completion_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Serialize)]
struct PromptTokensDetails {
    cached_tokens: u32,
}

#[derive(Serialize)]
struct Chunk<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<C>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Option<()>,
    finish_reason: Option<&'a str>,
    stop_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct ChatMessageOut<'a> {
    role: &'static str,
    content: &'a str,
    tool_calls: [(); 0],
}

#[derive(Serialize)]
struct FullChatChoice<'a> {
    index: u32,
    message: ChatMessageOut<'a>,
    logprobs: Option<()>,
    finish_reason: &'a str,
    stop_reason: Option<&'a str>,
}

/// One server-sent event carrying JSON.
fn frame<T: Serialize>(value: &T) -> String {
    // invariant: these structs hold only strings and numbers.
    format!("data: {}\n\n", serde_json::to_string(value).unwrap_or_default())
}

impl Reply {
    fn usage(&self, completion: u32) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            total_tokens: self.prompt_tokens + completion,
            completion_tokens: completion,
            prompt_tokens_details: self.cached_tokens.map(|cached_tokens| PromptTokensDetails { cached_tokens }),
        }
    }

    /// The text of token `index` (1-based); empty for the end-of-sequence
    /// token of an empty answer.
    pub fn piece(&self, index: u32) -> &str {
        self.plan.pieces.get(index as usize - 1).map_or("", String::as_str)
    }

    pub fn text(&self) -> String {
        self.plan.pieces.concat()
    }

    fn chunk<C: Serialize>(&self, choices: Vec<C>, usage: Option<Usage>) -> String {
        let object = if self.api == Api::Chat { "chat.completion.chunk" } else { "text_completion" };
        frame(&Chunk { id: &self.id, object, created: self.created, model: &self.model, choices, usage })
    }

    /// The first chat chunk: the assistant role, no content yet.
    pub fn role_frame(&self) -> String {
        let delta = Delta { role: Some("assistant"), content: Some("") };
        self.chunk(vec![ChatChoice { index: 0, delta, logprobs: None, finish_reason: None, stop_reason: None }], None)
    }

    /// The chunk of token `index`.
    pub fn token_frame(&self, index: u32) -> String {
        let usage = self.options.continuous_usage.then(|| self.usage(index));
        let text = self.piece(index);
        match self.api {
            Api::Chat => {
                let delta = Delta { role: None, content: Some(text) };
                self.chunk(
                    vec![ChatChoice { index: 0, delta, logprobs: None, finish_reason: None, stop_reason: None }],
                    usage,
                )
            }
            Api::Completion => self.chunk(
                vec![TextChoice { index: 0, text, logprobs: None, finish_reason: None, stop_reason: None }],
                usage,
            ),
        }
    }

    /// The finish chunk, the usage chunk if asked for.
    pub fn end_frames(&self) -> String {
        let finish = Some(self.plan.finish.as_str());
        let stop = self.plan.stop_reason.as_deref();
        let usage = self.options.continuous_usage.then(|| self.usage(self.plan.output));
        let mut out = match self.api {
            Api::Chat => {
                let delta = Delta { role: None, content: Some("") };
                self.chunk(
                    vec![ChatChoice { index: 0, delta, logprobs: None, finish_reason: finish, stop_reason: stop }],
                    usage,
                )
            }
            Api::Completion => self.chunk(
                vec![TextChoice { index: 0, text: "", logprobs: None, finish_reason: finish, stop_reason: stop }],
                usage,
            ),
        };
        if self.options.include_usage {
            out.push_str(&self.chunk::<ChatChoice>(Vec::new(), Some(self.usage(self.plan.output))));
        }
        out
    }

    /// The non-streaming response body.
    pub fn full_body(&self) -> String {
        let text = self.text();
        let finish = self.plan.finish.as_str();
        let stop = self.plan.stop_reason.as_deref();
        let usage = self.usage(self.plan.output);
        let value = match self.api {
            Api::Chat => serde_json::json!({
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [FullChatChoice {
                    index: 0,
                    message: ChatMessageOut { role: "assistant", content: &text, tool_calls: [] },
                    logprobs: None,
                    finish_reason: finish,
                    stop_reason: stop,
                }],
                "usage": usage,
                "prompt_logprobs": null,
            }),
            Api::Completion => serde_json::json!({
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [TextChoice { index: 0, text: &text, logprobs: None, finish_reason: Some(finish), stop_reason: stop }],
                "usage": usage,
            }),
        };
        value.to_string()
    }
}

/// An error after the stream started: one error frame, then `[DONE]`.
pub fn error_frames(err: &ApiError) -> String {
    format!("data: {}\n\ndata: [DONE]\n\n", err.json())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&str> {
        s.split_inclusive(' ').collect()
    }

    fn stops(list: &[&str]) -> Stops {
        Stops::new(list.iter().map(|s| s.to_string()).collect()).unwrap().unwrap()
    }

    #[test]
    fn stop_strings_end_the_answer_before_the_first_match() {
        let text = "one two three four";
        let p = plan(text, words(text), Some(&stops(&["three", "two"])), 100);
        assert_eq!(p.pieces.concat(), "one ");
        // "two" completes in the second token ("two "), which is the last.
        assert_eq!(p.pieces, vec!["one ", ""]);
        assert_eq!((p.output, p.finish, p.stop_reason.as_deref()), (2, Finish::Stop, Some("two")));
    }

    #[test]
    fn a_stop_across_tokens_cuts_the_earlier_token_too() {
        let text = "ab cd ef";
        // "b cd" starts in token 1 ("ab ") and completes in token 2 ("cd ").
        let p = plan(text, words(text), Some(&stops(&["b cd"])), 100);
        assert_eq!(p.pieces, vec!["a", ""]);
        assert_eq!((p.output, p.stop_reason.as_deref()), (2, Some("b cd")));
        // A stop that completes after max_tokens does not count.
        let p = plan(text, words(text), Some(&stops(&["b cd"])), 1);
        assert_eq!((p.pieces, p.finish, p.stop_reason), (vec!["ab ".to_string()], Finish::Length, None));
    }

    #[test]
    fn max_tokens_truncates_with_finish_length() {
        let p = plan("a b c d", words("a b c d"), None, 2);
        assert_eq!(p.pieces, vec!["a ", "b "]);
        assert_eq!((p.output, p.finish), (2, Finish::Length));
        let p = plan("a b", words("a b"), None, 2);
        assert_eq!((p.output, p.finish), (2, Finish::Stop), "an answer that ends at max_tokens ends by itself");
    }

    #[test]
    fn an_empty_answer_is_one_end_of_sequence_token() {
        let p = plan("", words(""), None, 5);
        assert_eq!((p.output, p.pieces.len()), (1, 0));
    }

    #[test]
    fn a_body_with_anything_after_its_json_value_is_vllms_extra_data() {
        let e = parse::<serde_json::Value>(br#"{"a":1} trailing"#).unwrap_err();
        // `{"a":1}` is 7 characters, then a space: the extra data starts at 8.
        assert_eq!((e.status.as_u16(), e.kind(), e.param.as_deref()), (400, "Bad Request", Some("body.8")));
        assert!(e.message.contains("'loc': ('body', 8), 'msg': 'JSON decode error'"), "{}", e.message);
        assert!(e.message.contains("'ctx': {'error': 'Extra data'}"), "{}", e.message);
        let e = parse::<serde_json::Value>(br#"{"a":1}{"x":1}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.7"));
        // Offsets count characters, as Python does: "é" is one.
        let e = parse::<serde_json::Value>("{\"a\":\"é\"}\n x".as_bytes()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.11"));
        assert!(parse::<serde_json::Value>(b" {\"a\":1} \r\n").is_ok(), "whitespace around the value is fine");
    }

    #[test]
    fn options_reject_what_vllm_rejects() {
        let common = |json: &str| -> Common { serde_json::from_str(json).unwrap() };
        let e = common(r#"{"n": 2}"#).options(None).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("n"));
        let e = common(r#"{"stream_options": {"include_usage": true}}"#).options(None).unwrap_err();
        assert_eq!(e.message, "Stream options can only be defined when `stream=True`.");
        let e = common("{}").options(Some(0)).unwrap_err();
        assert_eq!(e.message, "max_tokens must be at least 1, got 0.");
        let o = common(r#"{"stream": true, "stop": "x", "seed": 7, "unknown": 1}"#).options(Some(5)).unwrap();
        assert_eq!((o.stream, o.max_tokens, o.seed, o.stops), (true, Some(5), Some(7), vec!["x".to_string()]));
    }
}
