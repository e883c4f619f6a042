//! The OpenAI request bodies we read and the response bodies we write,
//! with vLLM's behaviour where the two differ.
//!
//! Requests: unknown fields are accepted and ignored (as vLLM does); the
//! fields that change what or when we answer are validated with vLLM's
//! messages. Responses: the shapes vLLM sends (`chat.completion`,
//! `chat.completion.chunk`, `text_completion`, a usage chunk with empty
//! `choices`), built from a [`Reply`] that knows the answer's tokens.

use serde::Serialize;

use super::answer::Pieces;
pub use super::answer::{Lengths, Plan};
pub use super::api::Api;
use super::errors::ApiError;
use super::stop::Stops;
use super::telemetry::Finish;

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

/// Plans the answer as vLLM's engine would end it.
///
/// The model's output is the scripted answer's `tokens`, then its
/// end-of-sequence token (EOS), which is a generated token like any other:
/// it counts in `usage.completion_tokens` and its text is empty. vLLM
/// checks, after each token (its `check_stop`): fewer than `min_tokens` so
/// far, go on; the token is EOS, finish `stop`; the output reached
/// `max_tokens`, finish `length`. Stop strings are checked on the text of
/// each token once the output is longer than `min_tokens` ([`Stops`]): the
/// text ends before the stop string (after it with `include_stop`) and the
/// token that completed it is the last, finish `stop`.
///
/// So an answer of k tokens ends with EOS as token k + 1 when `max_tokens`
/// allows it (finish `stop`, k + 1 completion tokens) and with finish
/// `length` at exactly `max_tokens` = k. Where the model must go on past
/// the script (`ignore_eos`, or `min_tokens` > k, as EOS cannot be sampled
/// before `min_tokens`), it continues with `more(n)`: n further tokens of
/// deterministic filler; with `min_tokens` it then ends with EOS right
/// after `min_tokens`.
pub fn plan<'a>(
    tokens: impl IntoIterator<Item = &'a str>,
    more: impl FnOnce(usize) -> Vec<String>,
    stops: Option<&Stops>,
    lengths: Lengths,
) -> Plan {
    let limit = lengths.max_tokens.max(1) as usize;
    let min = lengths.min_tokens as usize;
    let mut content: Vec<String> = tokens.into_iter().take(limit + 1).map(str::to_string).collect();
    // Content tokens before EOS, when the model may end by itself.
    let natural = (!lengths.ignore_eos).then(|| content.len().max(min));
    let want = natural.map_or(limit, |c| c.min(limit));
    if content.len() > want {
        content.truncate(want);
    } else if content.len() < want {
        content.extend(more(want - content.len()));
    }
    let hit = stops.and_then(|s| s.find_after(&content, want, min));
    if let Some(hit) = hit {
        let cut = if lengths.include_stop { hit.end } else { hit.cut };
        let mut start = 0;
        let pieces: Vec<String> = content[..=hit.token]
            .iter()
            .map(|t| {
                let end = start + t.len();
                let piece = t[..end.min(cut).saturating_sub(start)].to_string();
                start = end;
                piece
            })
            .collect();
        let output = pieces.len() as u32;
        return Plan { pieces: Pieces::owned(pieces), output, finish: Finish::Stop, stop_reason: Some(hit.stop) };
    }
    let finish = match natural {
        Some(c) if c < limit => {
            content.push(String::new());
            Finish::Stop
        }
        _ => Finish::Length,
    };
    let output = u32::try_from(content.len()).unwrap_or(u32::MAX);
    Plan { pieces: Pieces::owned(content), output, finish, stop_reason: None }
}

/// One choice of a response: a sequence the engine generates.
#[derive(Clone, Debug)]
pub struct Choice {
    pub index: u32,
    pub plan: Plan,
    /// Tokens of the prompt this choice answers.
    pub prompt_tokens: u32,
    /// `max_tokens` as the engine gets it: sent or defaulted, clamped to
    /// what the context leaves after the prompt (vLLM's `get_max_tokens`).
    pub max_tokens: u32,
    /// Text put before the answer (`echo`): the completions prompt, or the
    /// chat's last message when it is the assistant's.
    pub echo: String,
    /// Synthetic logprobs, if asked for: made for each token as it is sent.
    pub logprobs: Option<super::logprobs::Synth>,
    /// The tool call the answer makes, if any (`super::tools`): its tokens
    /// are the call's text, sent as tool-call deltas.
    pub tools: Option<super::tools::ToolPlan>,
}

impl Choice {
    /// The text of token `index` (1-based).
    pub fn piece(&self, index: u32) -> String {
        self.plan.pieces.at(index as usize - 1).0
    }

    pub fn text(&self) -> String {
        self.plan.pieces.concat()
    }
}

/// Everything needed to write one request's response bodies.
#[derive(Clone, Debug)]
pub struct Reply {
    pub api: Api,
    pub id: String,
    /// Unix seconds when the request was received (vLLM stamps each
    /// response; every chunk of a stream carries the same value).
    pub created: u64,
    pub model: String,
    pub choices: Vec<Choice>,
    /// Prompt tokens of the request: each prompt counted once, however many
    /// choices answer it.
    pub prompt_tokens: u32,
    pub options: super::request::Options,
    /// With prefix caching on: the prompt tokens found in the cache, known
    /// once the request was admitted (`super::prefix`).
    pub cached_tokens: Option<u32>,
}

/// A key vLLM sends as `null`: `Some(None)` is written as `null`, `None`
/// leaves the key out (vLLM's stream chunks are serialised with
/// `exclude_unset`, so which null keys a chunk has depends on what its
/// constructor set).
type NullKey = Option<Option<u8>>;
const NULL: NullKey = Some(None);

/// `UsageInfo` as each place serialises it (vLLM 0.33).
#[derive(Clone, Copy, PartialEq)]
enum UsageAt {
    /// A whole response (`model_dump()`): every key, nulls included.
    Whole,
    /// The stream's usage chunk (`exclude_none`): no null keys.
    Final,
    /// Chat `continuous_usage_stats` (`exclude_unset`): the constructor
    /// sets `completion_tokens_details` (to null without a reasoning parser).
    ChatChunk,
    /// Completions `continuous_usage_stats`: the three counts.
    TextChunk,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: u32,
    total_tokens: u32,
    completion_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<Option<PromptTokensDetails>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_tokens_details: NullKey,
}

#[derive(Serialize)]
struct PromptTokensDetails {
    cached_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    created_cache_tokens: NullKey,
    #[serde(skip_serializing_if = "Option::is_none")]
    multimodal_tokens: NullKey,
}

/// The null keys a chunk carries besides its choices and usage.
#[derive(Clone, Copy)]
enum ChunkKind {
    /// Chat's first chunk per choice: `prompt_token_ids`, `prompt_text`.
    Role,
    /// A token's chunk: `kv_transfer_params`.
    Token,
    /// Chat's echo chunk and the usage chunk: none.
    Plain,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: NullKey,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_text: NullKey,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_transfer_params: NullKey,
}

/// A chat stream choice: `stop_reason` and `weight_versions` only on the
/// last chunk, `token_ids` on every token's chunk (vLLM sets them there).
#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<serde_json::Value>,
    finish_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_ids: NullKey,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight_versions: NullKey,
}

impl<'a> ChatChoice<'a> {
    /// A chunk before the tokens (role, echo): no token keys.
    fn opening(index: u32, delta: Delta<'a>) -> ChatChoice<'a> {
        ChatChoice {
            index,
            delta,
            logprobs: None,
            finish_reason: None,
            stop_reason: None,
            token_ids: None,
            weight_versions: None,
        }
    }

    /// A token's chunk; `end` is the finish and stop reasons of the last.
    fn token(
        index: u32,
        delta: Delta<'a>,
        logprobs: Option<serde_json::Value>,
        end: Option<(&'a str, Option<&'a str>)>,
    ) -> ChatChoice<'a> {
        ChatChoice {
            index,
            delta,
            logprobs,
            finish_reason: end.map(|(f, _)| f),
            stop_reason: end.map(|(_, s)| s),
            token_ids: NULL,
            weight_versions: end.and(NULL),
        }
    }
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<super::tools::DeltaCall<'a>>,
}

/// A completions stream choice: vLLM sets every key on every chunk.
#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Option<serde_json::Value>,
    finish_reason: Option<&'a str>,
    stop_reason: Option<&'a str>,
    prompt_token_ids: Option<u8>,
    token_ids: Option<u8>,
    weight_versions: Option<u8>,
}

/// One server-sent event carrying JSON.
fn frame<T: Serialize>(value: &T) -> String {
    // invariant: these structs hold only strings, numbers and JSON values.
    format!("data: {}\n\n", serde_json::to_string(value).unwrap_or_default())
}

impl Reply {
    fn usage(&self, completion: u32, at: UsageAt) -> Usage {
        let whole = at == UsageAt::Whole;
        let details = self.cached_tokens.map(|cached_tokens| PromptTokensDetails {
            cached_tokens,
            created_cache_tokens: if whole { NULL } else { None },
            multimodal_tokens: if whole { NULL } else { None },
        });
        Usage {
            prompt_tokens: self.prompt_tokens,
            total_tokens: self.prompt_tokens + completion,
            completion_tokens: completion,
            prompt_tokens_details: match at {
                UsageAt::Whole => Some(details),
                UsageAt::Final => details.map(Some),
                UsageAt::ChatChunk | UsageAt::TextChunk => None,
            },
            completion_tokens_details: if matches!(at, UsageAt::Whole | UsageAt::ChatChunk) { NULL } else { None },
        }
    }

    /// The usage of a chunk with `continuous_usage_stats`.
    fn running_usage(&self, completion: u32) -> Option<Usage> {
        let at = if self.api == Api::Chat { UsageAt::ChatChunk } else { UsageAt::TextChunk };
        self.options.continuous_usage.then(|| self.usage(completion, at))
    }

    /// Completion tokens of every choice.
    pub fn completion_tokens(&self) -> u32 {
        self.choices.iter().map(|c| c.plan.output).sum()
    }

    fn chunk<C: Serialize>(&self, choices: Vec<C>, usage: Option<Usage>, kind: ChunkKind) -> String {
        let object = if self.api == Api::Chat { "chat.completion.chunk" } else { "text_completion" };
        let role = matches!(kind, ChunkKind::Role);
        frame(&Chunk {
            id: &self.id,
            object,
            created: self.created,
            model: &self.model,
            choices,
            usage,
            prompt_token_ids: if role { NULL } else { None },
            prompt_text: if role { NULL } else { None },
            kv_transfer_params: if matches!(kind, ChunkKind::Token) { NULL } else { None },
        })
    }

    /// The chat stream's opening chunks: one per choice with the assistant
    /// role and empty content, then (with `echo`) the echoed message.
    pub fn role_frames(&self) -> String {
        let mut out = String::new();
        for c in &self.choices {
            let delta = Delta { role: Some("assistant"), content: Some(""), tool_calls: Vec::new() };
            let choice = ChatChoice::opening(c.index, delta);
            out.push_str(&self.chunk(vec![choice], self.running_usage(0), ChunkKind::Role));
        }
        for c in self.choices.iter().filter(|c| !c.echo.is_empty()) {
            let delta = Delta { role: None, content: Some(&c.echo), tool_calls: Vec::new() };
            let choice = ChatChoice::opening(c.index, delta);
            out.push_str(&self.chunk(vec![choice], self.running_usage(0), ChunkKind::Plain));
        }
        out
    }

    /// The chunk of token `index` (1-based) of choice `choice` (its place in
    /// `choices`). The last token's chunk carries the finish reason, as
    /// vLLM's does: for an answer that ends with EOS its text is empty.
    pub fn token_frame(&self, choice: usize, index: u32) -> String {
        let c = &self.choices[choice];
        let usage = self.running_usage(index);
        let last = index >= c.plan.output;
        let finish = last.then(|| c.plan.finish.as_str());
        let stop = if last { c.plan.stop_reason.as_deref() } else { None };
        // The token's text and the bytes and characters before it, read
        // from the answer's cursor (one token per call when sent in order).
        let (piece, prev_bytes, prev_chars) = c.plan.pieces.at(index as usize - 1);
        let logprobs = c.logprobs.as_ref().map(|lp| {
            let echo = if self.api == Api::Completion { c.echo.chars().count() } else { 0 };
            let one = lp.at(&piece, index as usize - 1);
            super::logprobs::stream_json(self.api, std::slice::from_ref(&one), echo + prev_chars)
        });
        match self.api {
            Api::Chat if c.tools.is_some() => self.tool_frame(c, index, (&piece, prev_bytes), logprobs, usage),
            Api::Chat => {
                let delta = Delta { role: None, content: Some(&piece), tool_calls: Vec::new() };
                let choice = ChatChoice::token(c.index, delta, logprobs, finish.map(|f| (f, stop)));
                self.chunk(vec![choice], usage, ChunkKind::Token)
            }
            Api::Completion => {
                let echoed;
                let text = if index == 1 && !c.echo.is_empty() {
                    echoed = format!("{}{piece}", c.echo);
                    echoed.as_str()
                } else {
                    piece.as_str()
                };
                let choice = TextChoice {
                    index: c.index,
                    text,
                    logprobs,
                    finish_reason: finish,
                    stop_reason: stop,
                    prompt_token_ids: None,
                    token_ids: None,
                    weight_versions: None,
                };
                self.chunk(vec![choice], usage, ChunkKind::Token)
            }
        }
    }

    /// The chunk of token `index` of a tool-call answer (text `piece`,
    /// `prev` bytes after the answer's start): vLLM's tool-call delta, or
    /// nothing for a token of the call's markup (unless it is the last, or
    /// logprobs must be sent).
    fn tool_frame(
        &self,
        c: &Choice,
        index: u32,
        (piece, prev): (&str, usize),
        logprobs: Option<serde_json::Value>,
        usage: Option<Usage>,
    ) -> String {
        let Some(plan) = &c.tools else { return String::new() };
        // A call's text is the script's (bounded), so it is read whole.
        let generated = c.text();
        let cur = prev + piece.len();
        let last = index >= c.plan.output;
        let d = plan.delta(&generated, prev, cur).unwrap_or_default();
        if d.content.is_none() && d.tool_calls.is_empty() && !last && logprobs.is_none() {
            return String::new();
        }
        let finish = last.then(|| plan.finish(c.plan.finish.as_str(), plan.announced(generated.len())));
        let stop = if last { c.plan.stop_reason.as_deref() } else { None };
        let delta = Delta { role: None, content: d.content, tool_calls: d.tool_calls };
        let choice = ChatChoice::token(c.index, delta, logprobs, finish.map(|f| (f, stop)));
        self.chunk(vec![choice], usage, ChunkKind::Token)
    }

    /// The usage chunk, if `stream_options.include_usage` asked for it.
    pub fn usage_frame(&self) -> String {
        if !self.options.include_usage {
            return String::new();
        }
        self.chunk::<ChatChoice>(
            Vec::new(),
            Some(self.usage(self.completion_tokens(), UsageAt::Final)),
            ChunkKind::Plain,
        )
    }

    /// The non-streaming response body.
    pub fn full_body(&self) -> String {
        let usage = self.usage(self.completion_tokens(), UsageAt::Whole);
        let choices: Vec<serde_json::Value> = self
            .choices
            .iter()
            .map(|c| {
                let text = format!("{}{}", c.echo, c.text());
                let logprobs = c.logprobs.as_ref().map(|lp| {
                    super::logprobs::full_json(self.api, &lp.all(c.plan.pieces.iter()), c.echo.chars().count())
                });
                let finish = c.plan.finish.as_str();
                match self.api {
                    Api::Chat => {
                        let mut message = serde_json::json!({"role": "assistant", "content": text, "refusal": null,
                            "annotations": null, "audio": null, "function_call": null, "reasoning": null});
                        let mut finish = finish.to_string();
                        if let Some(plan) = &c.tools {
                            // vLLM's message for a tool-call answer; an empty
                            // `tool_calls` is left out, as vLLM 0.33 leaves it.
                            let m = plan.message(&c.text(), &finish);
                            message["content"] = match m.content {
                                Some(content) => serde_json::Value::String(format!("{}{content}", c.echo)),
                                None if c.echo.is_empty() => serde_json::Value::Null,
                                None => serde_json::Value::String(c.echo.clone()),
                            };
                            if !m.tool_calls.is_empty() {
                                message["tool_calls"] = serde_json::Value::Array(m.tool_calls);
                            }
                            finish = m.finish_reason;
                        }
                        serde_json::json!({
                            "index": c.index,
                            "message": message,
                            "logprobs": logprobs,
                            "finish_reason": finish,
                            "stop_reason": c.plan.stop_reason,
                            "token_ids": null,
                            "routed_experts": null,
                            "weight_versions": null,
                        })
                    }
                    Api::Completion => serde_json::json!({
                        "index": c.index,
                        "text": text,
                        "logprobs": logprobs,
                        "finish_reason": finish,
                        "stop_reason": c.plan.stop_reason,
                        "token_ids": null,
                        "prompt_logprobs": null,
                        "prompt_token_ids": null,
                        "routed_experts": null,
                        "weight_versions": null,
                    }),
                }
            })
            .collect();
        let object = if self.api == Api::Chat { "chat.completion" } else { "text_completion" };
        let mut value = serde_json::json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "service_tier": null,
            "system_fingerprint": null,
            "usage": usage,
        });
        if self.api == Api::Chat {
            value["prompt_logprobs"] = serde_json::Value::Null;
            value["prompt_token_ids"] = serde_json::Value::Null;
            value["prompt_text"] = serde_json::Value::Null;
        }
        value["kv_transfer_params"] = serde_json::Value::Null;
        value["ec_transfer_params"] = serde_json::Value::Null;
        value["metrics"] = serde_json::Value::Null;
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

    /// Filler the tests can recognise: `n` tokens "+0", "+1", ...
    fn more(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("+{i}")).collect()
    }

    fn run(text: &str, stop: Option<&[&str]>, l: Lengths) -> Plan {
        let s = stop.map(stops);
        plan(words(text), more, s.as_ref(), l)
    }

    fn eos() -> String {
        String::new()
    }

    #[test]
    fn an_answer_ends_with_its_end_of_sequence_token_when_max_tokens_allows() {
        // "a b" is 2 tokens; EOS is token 3: finish stop, 3 completion tokens.
        let p = run("a b", None, Lengths::cap(5));
        assert_eq!(p.pieces.to_vec(), vec!["a ".to_string(), "b".to_string(), eos()]);
        assert_eq!((p.output, p.finish), (3, Finish::Stop));
        // max_tokens 3 still allows EOS (vLLM checks EOS before length).
        assert_eq!(run("a b", None, Lengths::cap(3)).finish, Finish::Stop);
        // An answer that ends exactly at max_tokens never gets to EOS: length.
        let p = run("a b", None, Lengths::cap(2));
        assert_eq!((p.pieces.concat(), p.output, p.finish), ("a b".to_string(), 2, Finish::Length));
        let p = run("a b c d", None, Lengths::cap(2));
        assert_eq!(
            (p.pieces.to_vec(), p.output, p.finish),
            (vec!["a ".to_string(), "b ".to_string()], 2, Finish::Length)
        );
    }

    #[test]
    fn an_empty_answer_is_one_end_of_sequence_token() {
        let p = run("", None, Lengths::cap(5));
        assert_eq!((p.pieces.to_vec(), p.output, p.finish), (vec![eos()], 1, Finish::Stop));
    }

    #[test]
    fn ignore_eos_runs_to_max_tokens_with_deterministic_filler() {
        let l = Lengths { ignore_eos: true, ..Lengths::cap(5) };
        let p = run("a b", None, l);
        assert_eq!(p.pieces.to_vec(), vec!["a ", "b", "+0", "+1", "+2"]);
        assert_eq!((p.output, p.finish), (5, Finish::Length));
        // A long answer is cut at max_tokens as usual.
        let p = run("a b c d e f g", None, l);
        assert_eq!((p.pieces.concat(), p.output, p.finish), ("a b c d e ".to_string(), 5, Finish::Length));
        // Stop strings still end it.
        let p = run("a b", Some(&["+1"]), l);
        assert_eq!((p.pieces.concat(), p.output, p.finish), ("a b+0".to_string(), 4, Finish::Stop));
    }

    #[test]
    fn min_tokens_holds_eos_and_stop_strings_back() {
        // 2 answer tokens, min 4: filler to 4, then EOS as token 5.
        let l = Lengths { min_tokens: 4, ..Lengths::cap(10) };
        let p = run("a b", None, l);
        assert_eq!(p.pieces.to_vec(), vec!["a ".to_string(), "b".to_string(), "+0".into(), "+1".into(), eos()]);
        assert_eq!((p.output, p.finish), (5, Finish::Stop));
        // min_tokens = max_tokens: no room for EOS, finish length.
        let p = run("a b", None, Lengths { min_tokens: 4, ..Lengths::cap(4) });
        assert_eq!((p.output, p.finish), (4, Finish::Length));
        // A stop string completing in token 2 <= min_tokens 2 does not count;
        // the same string completing in token 4 > 2 does.
        let p = run("x y x y z", Some(&["y"]), Lengths { min_tokens: 2, ..Lengths::cap(10) });
        assert_eq!((p.pieces.concat(), p.output, p.stop_reason.as_deref()), ("x y x ".to_string(), 4, Some("y")));
        // Above min_tokens the answer ends by itself as usual.
        let p = run("a b c", None, Lengths { min_tokens: 1, ..Lengths::cap(10) });
        assert_eq!((p.output, p.finish), (4, Finish::Stop));
    }

    #[test]
    fn stop_strings_end_the_answer_before_the_first_match() {
        let p = run("one two three four", Some(&["three", "two"]), Lengths::cap(100));
        assert_eq!(p.pieces.concat(), "one ");
        // "two" completes in the second token ("two "), which is the last.
        assert_eq!(p.pieces.to_vec(), vec!["one ", ""]);
        assert_eq!((p.output, p.finish, p.stop_reason.as_deref()), (2, Finish::Stop, Some("two")));
        // include_stop_str_in_output keeps it (and cuts what follows it in the token).
        let l = Lengths { include_stop: true, ..Lengths::cap(100) };
        let p = run("one two three four", Some(&["tw"]), l);
        assert_eq!(
            (p.pieces.to_vec(), p.stop_reason.as_deref()),
            (vec!["one ".to_string(), "tw".to_string()], Some("tw"))
        );
    }

    #[test]
    fn a_stop_across_tokens_cuts_the_earlier_token_too() {
        // "b cd" starts in token 1 ("ab ") and completes in token 2 ("cd ").
        let p = run("ab cd ef", Some(&["b cd"]), Lengths::cap(100));
        assert_eq!(p.pieces.to_vec(), vec!["a", ""]);
        assert_eq!((p.output, p.stop_reason.as_deref()), (2, Some("b cd")));
        // A stop that completes after max_tokens does not count.
        let p = run("ab cd ef", Some(&["b cd"]), Lengths::cap(1));
        assert_eq!((p.pieces.to_vec(), p.finish, p.stop_reason), (vec!["ab ".to_string()], Finish::Length, None));
    }

    #[test]
    fn a_body_with_anything_after_its_json_value_is_vllms_extra_data() {
        let e = parse::<serde_json::Value>(br#"{"a":1} trailing"#).unwrap_err();
        // `{"a":1}` is 7 characters, then a space: the extra data starts at 8.
        assert_eq!((e.status.as_u16(), e.kind(), e.param.as_deref()), (400, "Bad Request", Some("body.8")));
        assert!(
            e.message.contains("'loc': 'body.8', 'msg': 'JSON decode error', 'input': '<dict of 0 items>'"),
            "{}",
            e.message
        );
        assert!(e.message.contains("'ctx': {'error': 'Extra data'}"), "{}", e.message);
        let e = parse::<serde_json::Value>(br#"{"a":1}{"x":1}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.7"));
        // Offsets count characters, as Python does: "é" is one.
        let e = parse::<serde_json::Value>("{\"a\":\"é\"}\n x".as_bytes()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.11"));
        assert!(parse::<serde_json::Value>(b" {\"a\":1} \r\n").is_ok(), "whitespace around the value is fine");
    }
}
