//! Reading and validating a request body as vLLM does.
//!
//! vLLM (0.33) validates a body in three layers, and llmsim keeps them
//! apart so each error comes out as vLLM's would:
//!
//! 1. **Field types** (pydantic, lax mode): a field of the wrong type is a
//!    400 with type `Bad Request`, written as vLLM 0.33's
//!    `validation_exception_handler` writes pydantic's errors: each as
//!    Python prints its dict, the location dotted and the input summarised
//!    (`{'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input
//!    should be a valid number, unable to parse string as a number',
//!    'input': 'hot'}`), at most 10 listed, `param` the first's location
//!    (`body.temperature`). Lax mode accepts what pydantic accepts: `"5"`
//!    for an integer, `1` for a boolean, `2.0` for an integer.
//! 2. **Model validators** that run on the raw body (`stream_options`
//!    without `stream`, `top_logprobs` without `logprobs`, `tool_choice`
//!    without `tools`, an empty completions prompt): vLLM 0.33 raises
//!    `VLLMValidationError` there, which pydantic passes through (it is no
//!    `ValueError`), so the answer is type `BadRequestError` with the
//!    sentence and its `(parameter=..., value=...)` suffix.
//! 3. **Sampling parameters** (`SamplingParams._verify_args`, after the
//!    model is found): type `BadRequestError`, vLLM's sentence with its
//!    `(parameter=..., value=...)` suffix where vLLM gives one.
//!
//! One deliberate difference: a sampling check's `param` always names the
//! field, where vLLM leaves it null for the checks that name no parameter.
//! Another: a union-typed field (`stop`, `prompt`) of the wrong type is
//! one error here, where pydantic lists one per branch of the union.
//!
//! Unknown fields are accepted and ignored, as vLLM accepts them (it logs
//! them at debug level). `best_of` is one: vLLM's V1 engine removed it and
//! its request models no longer declare it, so it is ignored.

use serde_json::{Map, Value};

use super::api::Api;
use super::errors::ApiError;
use super::tools::{Tool, ToolChoice, ToolsIn};
use llmsim_content::structured::Constraint;

mod structured;

/// vLLM's `max_logprobs` default: the most `logprobs` / `top_logprobs` a
/// request may ask for.
pub const MAX_LOGPROBS: i64 = 20;

/// vLLM's `VLLM_MAX_N_SEQUENCES` default.
pub const MAX_N: i64 = 16_384;

/// Most prompts in one completions request (vLLM's
/// `VLLM_MAX_COMPLETION_PROMPTS` default).
pub const MAX_PROMPTS: usize = 1_024;

/// A chat's messages or one completions prompt.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptIn {
    /// (role, text) of every message, in order.
    Chat(Vec<(String, String)>),
    Text(String),
    /// Token ids as sent (pydantic's `list[int]`: negative ids pass here
    /// and are refused as out of vocabulary later, as vLLM refuses them).
    Ids(Vec<i64>),
}

/// A request that passed the type and model-validator layers.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub api: Api,
    pub model: Option<String>,
    /// One for chat; one or more for completions.
    pub prompts: Vec<PromptIn>,
    pub fields: Fields,
    /// A chat's `tools` and `tool_choice` (`server::tools`), when it has tools.
    pub tools: Option<ToolsIn>,
    /// A chat's inputs to the model's chat template (set by the routes from
    /// the body as sent, `server::tokenize::template`).
    pub chat: Option<crate::tokenize::ChatInput>,
    /// What `response_format` / `structured_outputs` constrain the answer to.
    pub structured: Option<Constraint>,
    /// The body's `request_id` (vLLM's field; its response `id` is formed
    /// from it when no `X-Request-Id` header is sent).
    pub request_id: Option<String>,
}

/// The fields that shape the answer, as sent (checked by
/// [`Fields::options`]).
#[derive(Clone, Debug, Default)]
pub struct Fields {
    pub stream: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub stream_options_set: bool,
    pub max_tokens: Option<i64>,
    /// Which field `max_tokens` came from (for messages).
    pub max_tokens_param: &'static str,
    /// `max_tokens` as sent when it is past i64 (e.g. `1e300`): messages
    /// show it, not the clamped value.
    pub max_tokens_sent: Option<String>,
    pub min_tokens: i64,
    pub n: i64,
    pub seed: Option<i64>,
    pub stop: Vec<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub ignore_eos: bool,
    pub include_stop_str_in_output: bool,
    pub echo: bool,
    /// Chat `logprobs: true` gives `top_logprobs` (default 0); completions
    /// `logprobs: k`.
    pub logprobs: Option<i64>,
    /// A chat request (names `top_logprobs` in errors).
    pub chat: bool,
    /// vLLM's `priority` (lower first; honoured by a scheduler model with
    /// `scheduler.policy: priority`, docs/priorities.md).
    pub priority: i64,
}

/// Validated options, what the planner and the writers need.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub stream: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    /// As sent (at least 1): a value over the context is refused with the
    /// number the client sent, not a clamped one.
    pub max_tokens: Option<u64>,
    pub max_tokens_param: &'static str,
    /// See [`Fields::max_tokens_sent`].
    pub max_tokens_sent: Option<String>,
    pub min_tokens: u32,
    pub n: u32,
    pub seed: Option<u64>,
    pub stops: Vec<String>,
    pub ignore_eos: bool,
    pub include_stop: bool,
    pub echo: bool,
    /// Top alternatives per token when logprobs are asked for.
    pub logprobs: Option<u32>,
    /// vLLM's request `priority`, as sent.
    pub priority: i64,
}

/// One pydantic error: its type, where, the message and the input.
struct TypeError {
    kind: &'static str,
    loc: Vec<Seg>,
    msg: &'static str,
    input: String,
}

#[derive(Clone)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A location as vLLM 0.33's validation handler writes it, in the message
/// and as `param` (`clean_loc_for_param`): `body`, then each key or index,
/// joined with dots (`body.messages.0.content`).
fn dotted_loc(loc: &[Seg]) -> String {
    let mut out = String::from("body");
    for s in loc {
        match s {
            Seg::Key(k) => out.push_str(&format!(".{k}")),
            Seg::Index(i) => out.push_str(&format!(".{i}")),
        }
    }
    out
}

/// What vLLM 0.33's validation handler shows of an error's input
/// (`_summarize_error_input`), as Python prints it inside the error: a
/// string (cut at 200 characters), a list or object described by its size,
/// anything else as Python's `str` of it, so a number shows as a string.
pub fn summarize_input(v: &Value) -> String {
    let cut = |t: String| {
        if t.chars().count() > 200 { format!("{}...[truncated]", t.chars().take(200).collect::<String>()) } else { t }
    };
    let text = match v {
        Value::String(t) => cut(t.clone()),
        Value::Array(a) => format!("<list of {} items>", a.len()),
        Value::Object(o) => format!("<dict of {} items>", o.len()),
        other => cut(py_repr(other)),
    };
    py_str(&text)
}

/// Python's `repr` of a string.
pub fn py_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr` of a float.
pub fn py_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v.fract() == 0.0 && v.abs() < 1e16 { format!("{v:.1}") } else { format!("{v:?}") }
}

/// Python's `repr` of a JSON value as Python reads it, cut at 200
/// characters (a body can be megabytes).
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    repr_into(v, &mut out);
    if out.chars().count() > 200 {
        let cut: String = out.chars().take(200).collect();
        return format!("{cut}...");
    }
    out
}

fn repr_into(v: &Value, out: &mut String) {
    if out.len() > 400 {
        return;
    }
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => out.push_str(&i.to_string()),
            (_, Some(u)) => out.push_str(&u.to_string()),
            _ => out.push_str(&py_float(n.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(s) => out.push_str(&py_str(s)),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_into(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&py_str(k));
                out.push_str(": ");
                repr_into(x, out);
            }
            out.push('}');
        }
    }
}

/// Most errors vLLM 0.33's validation handler lists, and the longest text
/// of one (`_MAX_REPORTED_ERRORS`, `_MAX_ERROR_CHARS`).
const MAX_REPORTED_ERRORS: usize = 10;
const MAX_ERROR_CHARS: usize = 1000;

/// The 400 for pydantic errors, as vLLM 0.33's `validation_exception_handler`
/// writes it: type `Bad Request`, each error as Python prints its dict
/// (the location dotted, the input summarised, at most 1,000 characters),
/// at most 10 listed, and `param` the first error's dotted location.
fn type_errors(errors: &[TypeError]) -> ApiError {
    let n = errors.len();
    let label = if n == 1 { "error" } else { "errors" };
    let mut message = format!("{n} validation {label}:\n");
    for e in errors.iter().take(MAX_REPORTED_ERRORS) {
        let mut text = format!(
            "{{'type': '{}', 'loc': {}, 'msg': {}, 'input': {}}}",
            e.kind,
            py_str(&dotted_loc(&e.loc)),
            py_str(e.msg),
            e.input
        );
        if text.chars().count() > MAX_ERROR_CHARS {
            text = format!("{}...[truncated]", text.chars().take(MAX_ERROR_CHARS).collect::<String>());
        }
        message.push_str(&format!("  {text}\n"));
    }
    if n > MAX_REPORTED_ERRORS {
        message.push_str(&format!("  ...and {} more {label}\n", n - MAX_REPORTED_ERRORS));
    }
    let param = errors.first().map(|e| dotted_loc(&e.loc));
    ApiError { param, kind: Some("Bad Request"), ..ApiError::bad_request(message.trim_end()) }
}

/// A model validator's refusal. vLLM 0.33's validators raise
/// `VLLMValidationError`, which pydantic does not wrap (it is no
/// `ValueError`): vLLM's error handler answers it as any request error,
/// type `BadRequestError`, the sentence with its `(parameter=...)` suffix.
pub fn value_error(sentence: &str, param: &str) -> ApiError {
    ApiError::bad_request(format!("{sentence} (parameter={param})")).with_param(param)
}

/// [`value_error`] for a validator that also names the value (Python's
/// `str` of it: a string as it is, anything else as its `repr`).
fn value_error_with(sentence: &str, param: &str, value: &Value) -> ApiError {
    let shown = value.as_str().map_or_else(|| py_repr(value), str::to_string);
    ApiError::bad_request(format!("{sentence} (parameter={param}, value={shown})")).with_param(param)
}

/// A `SamplingParams` refusal: vLLM's sentence with its suffix.
pub fn sampling_error(sentence: &str, param: &str, value: Option<String>, suffix: bool) -> ApiError {
    let message = if !suffix {
        sentence.to_string()
    } else {
        match value {
            Some(v) => format!("{sentence} (parameter={param}, value={v})"),
            None => format!("{sentence} (parameter={param})"),
        }
    };
    ApiError::bad_request(message).with_param(param)
}

/// `SamplingParams`' refusal of a `max_tokens` below 1: vLLM names
/// `max_tokens` whichever field the value came from (the sampling
/// parameter is called that), and a prompt that fills the whole context
/// leaves 0.
pub fn max_tokens_below_one(shown: &str) -> ApiError {
    let s = format!("max_tokens must be at least 1, got {shown}.");
    sampling_error(&s, "max_tokens", Some(shown.to_string()), true)
}

/// vLLM's refusal of a `priority` other than 0 when the engine does not
/// schedule by priority (`--scheduling-policy fcfs`, its default).
pub fn priority_not_enabled(priority: i64) -> ApiError {
    ApiError::bad_request(format!("Got priority {priority} but Priority scheduling is not enabled."))
}

/// `SamplingParams`' refusal of `min_tokens` over the (clamped) `max_tokens`.
pub fn min_tokens_over_max(min_tokens: u32, max_tokens: u32) -> ApiError {
    let s = format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.");
    sampling_error(&s, "min_tokens", None, false)
}

/// Reads typed fields, collecting pydantic's errors.
struct Reader<'a> {
    map: &'a Map<String, Value>,
    errors: Vec<TypeError>,
}

fn key(k: &str) -> Vec<Seg> {
    vec![Seg::Key(k.to_string())]
}

impl<'a> Reader<'a> {
    fn get(&self, k: &str) -> Option<&'a Value> {
        self.map.get(k).filter(|v| !v.is_null())
    }

    fn fail(&mut self, loc: Vec<Seg>, kind: &'static str, msg: &'static str, v: &Value) {
        self.errors.push(TypeError { kind, loc, msg, input: summarize_input(v) });
    }

    fn string(&mut self, k: &str) -> Option<String> {
        let v = self.get(k)?;
        match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                self.fail(key(k), "string_type", "Input should be a valid string", v);
                None
            }
        }
    }

    fn int(&mut self, k: &str) -> Option<i64> {
        let v = self.get(k)?;
        let r = int_of(v);
        match r {
            Ok(i) => Some(i),
            Err((kind, msg)) => {
                self.fail(key(k), kind, msg, v);
                None
            }
        }
    }

    /// The number at `k` as sent, if it is a whole number past i64 that
    /// [`Reader::int`] clamps (`1e300`, `1e19`).
    fn sent_if_clamped(&self, k: &str) -> Option<String> {
        match self.get(k)? {
            Value::Number(n) if n.as_i64().is_none() => Some(n.to_string()),
            Value::String(t) if t.trim().parse::<i64>().is_err() => Some(t.trim().to_string()),
            _ => None,
        }
    }

    fn float(&mut self, k: &str) -> Option<f64> {
        let v = self.get(k)?;
        match float_of(v) {
            Ok(f) => Some(f),
            Err((kind, msg)) => {
                self.fail(key(k), kind, msg, v);
                None
            }
        }
    }

    fn boolean(&mut self, k: &str) -> Option<bool> {
        let v = self.get(k)?;
        match bool_of(v) {
            Ok(b) => Some(b),
            Err((kind, msg)) => {
                self.fail(key(k), kind, msg, v);
                None
            }
        }
    }
}

type Fail = (&'static str, &'static str);

fn int_of(v: &Value) -> Result<i64, Fail> {
    const PARSE: Fail = ("int_parsing", "Input should be a valid integer, unable to parse string as an integer");
    const FRACTION: Fail = ("int_from_float", "Input should be a valid integer, got a number with a fractional part");
    match v {
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Ok(i);
            }
            if n.as_u64().is_some() {
                return Ok(i64::MAX);
            }
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() != 0.0 || !f.is_finite() {
                return Err(FRACTION);
            }
            Ok(f.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
        }
        Value::String(s) => {
            let t = s.trim();
            if let Ok(i) = t.parse::<i64>() {
                return Ok(i);
            }
            match t.parse::<f64>() {
                Ok(f) if f.is_finite() && f.fract() == 0.0 => Ok(f as i64),
                Ok(f) if f.is_finite() => Err(FRACTION),
                _ => Err(PARSE),
            }
        }
        _ => Err(("int_type", "Input should be a valid integer")),
    }
}

fn float_of(v: &Value) -> Result<f64, Fail> {
    match v {
        Value::Bool(b) => Ok(f64::from(u8::from(*b))),
        Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => {
            let t = s.trim().to_ascii_lowercase();
            match t.as_str() {
                "inf" | "+inf" | "infinity" | "+infinity" => Ok(f64::INFINITY),
                "-inf" | "-infinity" => Ok(f64::NEG_INFINITY),
                "nan" | "+nan" | "-nan" => Ok(f64::NAN),
                _ => t.parse::<f64>().map_err(|_| {
                    ("float_parsing", "Input should be a valid number, unable to parse string as a number")
                }),
            }
        }
        _ => Err(("float_type", "Input should be a valid number")),
    }
}

fn bool_of(v: &Value) -> Result<bool, Fail> {
    const PARSE: Fail = ("bool_parsing", "Input should be a valid boolean, unable to interpret input");
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Number(n) => match n.as_f64() {
            Some(0.0) => Ok(false),
            Some(1.0) => Ok(true),
            _ => Err(PARSE),
        },
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "0" | "off" | "f" | "false" | "n" | "no" => Ok(false),
            "1" | "on" | "t" | "true" | "y" | "yes" => Ok(true),
            _ => Err(PARSE),
        },
        _ => Err(("bool_type", "Input should be a valid boolean")),
    }
}

/// Parses and validates a body's JSON value for `api` (layers 1 and 2).
pub fn read(api: Api, body: &Value) -> Result<Parsed, ApiError> {
    let Some(map) = body.as_object() else {
        return Err(type_errors(&[TypeError {
            kind: "model_attributes_type",
            loc: Vec::new(),
            msg: "Input should be a valid dictionary or object to extract fields from",
            input: summarize_input(body),
        }]));
    };
    // Layer 2 runs on the raw body, before the field types.
    before_validators(api, map)?;
    let mut r = Reader { map, errors: Vec::new() };
    let model = r.string("model");
    let mut f = Fields {
        stream: r.boolean("stream").unwrap_or(false),
        n: r.int("n").unwrap_or(1),
        seed: r.int("seed"),
        temperature: r.float("temperature"),
        top_p: r.float("top_p"),
        top_k: r.int("top_k"),
        min_p: r.float("min_p"),
        presence_penalty: r.float("presence_penalty"),
        frequency_penalty: r.float("frequency_penalty"),
        repetition_penalty: r.float("repetition_penalty"),
        min_tokens: r.int("min_tokens").unwrap_or(0),
        priority: r.int("priority").unwrap_or(0),
        ignore_eos: r.boolean("ignore_eos").unwrap_or(false),
        include_stop_str_in_output: r.boolean("include_stop_str_in_output").unwrap_or(false),
        echo: r.boolean("echo").unwrap_or(false),
        max_tokens_param: "max_tokens",
        chat: api == Api::Chat,
        ..Fields::default()
    };
    if let Some(so) = r.get("stream_options") {
        match so.as_object() {
            Some(o) => {
                f.stream_options_set = true;
                let mut inner = Reader { map: o, errors: Vec::new() };
                f.include_usage = inner.boolean("include_usage").unwrap_or(false);
                f.continuous_usage = inner.boolean("continuous_usage_stats").unwrap_or(false);
                for mut e in inner.errors {
                    e.loc.insert(0, Seg::Key("stream_options".into()));
                    r.errors.push(e);
                }
            }
            None => r.fail(
                key("stream_options"),
                "model_type",
                "Input should be a valid dictionary or instance of StreamOptions",
                so,
            ),
        }
    }
    f.stop = read_stop(&mut r);
    r.int("priority");
    r.string("user");
    let request_id = r.string("request_id");
    if let Some(ids) = r.get("stop_token_ids") {
        int_list(&mut r, "stop_token_ids", ids);
    }
    let mut tools = None;
    let prompts = match api {
        Api::Chat => {
            let max_completion = r.int("max_completion_tokens");
            let max_tokens = r.int("max_tokens");
            (f.max_tokens, f.max_tokens_param) = match max_completion {
                Some(m) => (Some(m), "max_completion_tokens"),
                None => (max_tokens, "max_tokens"),
            };
            f.max_tokens_sent = r.sent_if_clamped(f.max_tokens_param);
            let logprobs = r.boolean("logprobs").unwrap_or(false);
            let top = r.int("top_logprobs").unwrap_or(0);
            f.logprobs = logprobs.then_some(top);
            tools = read_tools(&mut r);
            vec![read_messages(&mut r)]
        }
        Api::Completion => {
            f.max_tokens = r.int("max_tokens");
            f.max_tokens_sent = r.sent_if_clamped("max_tokens");
            f.logprobs = r.int("logprobs");
            r.string("suffix");
            read_prompts(&mut r)
        }
    };
    let structured = structured::read(&mut r)?;
    if !r.errors.is_empty() {
        return Err(type_errors(&r.errors));
    }
    Ok(Parsed { api, model, prompts, fields: f, tools, chat: None, structured, request_id })
}

/// `tools` (pydantic's checks of each tool's shape) and `tool_choice`
/// (whose values `tool_usage` checked): "auto" when tools come without one.
fn read_tools(r: &mut Reader) -> Option<ToolsIn> {
    let v = r.get("tools")?;
    let Some(items) = v.as_array() else {
        r.fail(key("tools"), "list_type", "Input should be a valid list", v);
        return None;
    };
    let mut tools = Vec::with_capacity(items.len());
    for (i, t) in items.iter().enumerate() {
        let at = |path: &[&str]| {
            let mut loc = vec![Seg::Key("tools".into()), Seg::Index(i)];
            loc.extend(path.iter().map(|k| Seg::Key(k.to_string())));
            loc
        };
        let Some(o) = t.as_object() else {
            r.fail(at(&[]), "model_type", "Input should be a valid dictionary or object", t);
            continue;
        };
        let Some(function) = o.get("function") else {
            r.fail(at(&["function"]), "missing", "Field required", t);
            continue;
        };
        let Some(f) = function.as_object() else {
            r.fail(at(&["function"]), "model_type", "Input should be a valid dictionary or object", function);
            continue;
        };
        let name = match f.get("name") {
            Some(Value::String(n)) => n.clone(),
            Some(other) => {
                r.fail(at(&["function", "name"]), "string_type", "Input should be a valid string", other);
                continue;
            }
            None => {
                r.fail(at(&["function", "name"]), "missing", "Field required", function);
                continue;
            }
        };
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => None,
            Some(p @ Value::Object(_)) => Some(p.clone()),
            Some(other) => {
                r.fail(at(&["function", "parameters"]), "dict_type", "Input should be a valid dictionary", other);
                continue;
            }
        };
        tools.push(Tool { name, parameters, definition: t.clone() });
    }
    let choice = match r.map.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => ToolChoice::Auto,
        },
        Some(c) => {
            ToolChoice::Named(c.pointer("/function/name").and_then(Value::as_str).unwrap_or_default().to_string())
        }
    };
    Some(ToolsIn { tools, choice })
}

fn int_list(r: &mut Reader, k: &str, v: &Value) -> Option<Vec<i64>> {
    let Some(items) = v.as_array() else {
        r.fail(key(k), "list_type", "Input should be a valid list", v);
        return None;
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, x) in items.iter().enumerate() {
        match int_of(x) {
            Ok(n) => out.push(n),
            Err((kind, msg)) => {
                r.fail(vec![Seg::Key(k.into()), Seg::Index(i)], kind, msg, x);
                return None;
            }
        }
    }
    Some(out)
}

fn read_stop(r: &mut Reader) -> Vec<String> {
    let Some(v) = r.get("stop") else { return Vec::new() };
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, x) in items.iter().enumerate() {
                match x.as_str() {
                    Some(s) => out.push(s.to_string()),
                    None => r.fail(
                        vec![Seg::Key("stop".into()), Seg::Index(i)],
                        "string_type",
                        "Input should be a valid string",
                        x,
                    ),
                }
            }
            out
        }
        _ => {
            r.fail(key("stop"), "list_type", "Input should be a valid list", v);
            Vec::new()
        }
    }
}

fn read_messages(r: &mut Reader) -> PromptIn {
    let Some(v) = r.map.get("messages") else {
        let body = Value::Object(r.map.clone());
        r.fail(key("messages"), "missing", "Field required", &body);
        return PromptIn::Chat(Vec::new());
    };
    let Some(items) = v.as_array() else {
        r.fail(key("messages"), "list_type", "Input should be a valid list", v);
        return PromptIn::Chat(Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        let at = |k: &str| vec![Seg::Key("messages".into()), Seg::Index(i), Seg::Key(k.into())];
        let Some(o) = m.as_object() else {
            r.fail(
                vec![Seg::Key("messages".into()), Seg::Index(i)],
                "model_type",
                "Input should be a valid dictionary or object",
                m,
            );
            continue;
        };
        let role = match o.get("role") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                r.fail(at("role"), "string_type", "Input should be a valid string", other);
                continue;
            }
            None => {
                r.fail(at("role"), "missing", "Field required", m);
                continue;
            }
        };
        let text = match o.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                texts.join("\n")
            }
            Some(other) => {
                r.fail(at("content"), "string_type", "Input should be a valid string", other);
                continue;
            }
        };
        out.push((role, text));
    }
    PromptIn::Chat(out)
}

fn read_prompts(r: &mut Reader) -> Vec<PromptIn> {
    let Some(v) = r.get("prompt") else { return Vec::new() };
    let wrong = |r: &mut Reader| {
        r.fail(key("prompt"), "string_type", "Input should be a valid string", v);
        Vec::new()
    };
    match v {
        Value::String(s) => vec![PromptIn::Text(s.clone())],
        // pydantic takes `[]` as an empty list of token ids (the first
        // member of vLLM's union), which the engine then refuses as empty.
        Value::Array(items) if items.is_empty() => vec![PromptIn::Ids(Vec::new())],
        Value::Array(items) => {
            if items.iter().all(|x| x.is_string()) {
                items.iter().map(|x| PromptIn::Text(x.as_str().unwrap_or_default().to_string())).collect()
            } else if items.iter().all(Value::is_number) {
                match int_list(r, "prompt", v) {
                    Some(ids) => vec![PromptIn::Ids(ids)],
                    None => Vec::new(),
                }
            } else if items.iter().all(Value::is_array) {
                let mut out = Vec::new();
                for (i, x) in items.iter().enumerate() {
                    let k = format!("prompt[{i}]");
                    match int_list(r, &k, x) {
                        Some(ids) => out.push(PromptIn::Ids(ids)),
                        None => return Vec::new(),
                    }
                }
                out
            } else {
                wrong(r)
            }
        }
        _ => wrong(r),
    }
}

/// vLLM's `mode="before"` model validators, on the raw body.
fn before_validators(api: Api, map: &Map<String, Value>) -> Result<(), ApiError> {
    let truthy = |k: &str| match map.get(k) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    };
    structured::before(map)?;
    if truthy("stream_options") && !truthy("stream") {
        return Err(value_error("Stream options can only be defined when `stream=True`.", "stream_options"));
    }
    let logprob_fields: &[&str] = match api {
        Api::Chat => &["prompt_logprobs", "top_logprobs"],
        Api::Completion => &["prompt_logprobs", "logprobs"],
    };
    for k in logprob_fields {
        if let Some(v) = map.get(*k).filter(|v| !v.is_null())
            && !v.is_number()
        {
            return Err(value_error_with(&format!("`{k}` must be an integer."), k, v));
        }
    }
    let num = |k: &str| map.get(k).and_then(Value::as_f64);
    if let Some(p) = num("prompt_logprobs") {
        if truthy("stream") && (p > 0.0 || p == -1.0) {
            return Err(value_error("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs"));
        }
        if p < 0.0 && p != -1.0 {
            let v = &map["prompt_logprobs"];
            return Err(value_error_with("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", v));
        }
    }
    match api {
        Api::Chat => {
            if let Some(t) = num("top_logprobs") {
                if t < 0.0 && t != -1.0 {
                    let v = &map["top_logprobs"];
                    return Err(value_error_with("`top_logprobs` must be a positive value or -1.", "top_logprobs", v));
                }
                if (t == -1.0 || t > 0.0) && !truthy("logprobs") {
                    return Err(value_error(
                        "when using `top_logprobs`, `logprobs` must be set to true.",
                        "top_logprobs",
                    ));
                }
            }
            tool_usage(map)?;
        }
        Api::Completion => {
            if let Some(l) = num("logprobs")
                && l < 0.0
                && l != -1.0
            {
                return Err(value_error_with(
                    "`logprobs` must be a positive value or -1.",
                    "logprobs",
                    &map["logprobs"],
                ));
            }
            let prompt = map.get("prompt");
            let empty = matches!(prompt, None | Some(Value::Null)) || prompt.and_then(Value::as_str) == Some("");
            if empty {
                return Err(value_error("Either prompt or prompt_embeds must be provided and non-empty.", "prompt"));
            }
            if let Some(list) = prompt.and_then(Value::as_array)
                && !list.iter().all(Value::is_number)
                && list.len() > MAX_PROMPTS
            {
                return Err(value_error(
                    &format!(
                        "prompt list length {} exceeds the maximum allowed count of {MAX_PROMPTS}. To increase this \
                         limit, set the VLLM_MAX_COMPLETION_PROMPTS environment variable.",
                        list.len()
                    ),
                    "prompt",
                ));
            }
        }
    }
    Ok(())
}

/// vLLM's `check_tool_usage`.
fn tool_usage(map: &Map<String, Value>) -> Result<(), ApiError> {
    let tools = map.get("tools").filter(|v| !v.is_null());
    if tools.and_then(Value::as_array).is_some_and(Vec::is_empty) {
        return Err(value_error(
            "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
            "tools",
        ));
    }
    let choice = match map.get("tool_choice") {
        Some(c) => c,
        None if tools.is_some() => return Ok(()),
        None => return Ok(()),
    };
    if choice.as_str() == Some("none") || choice.is_null() {
        return Ok(());
    }
    let Some(tools) = tools else {
        return Err(value_error("When using `tool_choice`, `tools` must be set.", "tool_choice"));
    };
    if let Some(s) = choice.as_str() {
        if s != "auto" && s != "required" {
            return Err(value_error(
                &format!(
                    "Invalid value for `tool_choice`: {s}! Only named tools, \"none\", \"auto\" or \"required\" are supported."
                ),
                "tool_choice",
            ));
        }
        return Ok(());
    }
    let usage = "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
    let Some(obj) = choice.as_object() else {
        return Err(value_error(
            &format!(
                "Invalid value for `tool_choice`: {}! Only named tools, \"none\", \"auto\" or \"required\" are supported.",
                py_repr(choice)
            ),
            "tool_choice",
        ));
    };
    let Some(function) = obj.get("function").and_then(Value::as_object) else {
        let f = obj.get("function").map_or_else(|| "None".to_string(), py_repr);
        return Err(value_error(
            &format!("Invalid value for `function`: `{f}` in `tool_choice`! {usage}"),
            "tool_choice.function",
        ));
    };
    let Some(name) = function.get("name") else {
        return Err(value_error(
            &format!("Expected field `name` in `function` in `tool_choice`! {usage}"),
            "tool_choice.function.name",
        ));
    };
    let name = match name.as_str() {
        Some(n) if !n.is_empty() => n,
        _ => {
            return Err(value_error(
                &format!("Invalid `name` in `function`: `{}` in `tool_choice`! {usage}", py_repr(name)),
                "tool_choice.function.name",
            ));
        }
    };
    let known = tools
        .as_array()
        .is_some_and(|list| list.iter().any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name)));
    if !known {
        return Err(value_error(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            "tool_choice",
        ));
    }
    Ok(())
}

impl Fields {
    /// [`Fields::check`], then [`Fields::unchecked`].
    pub fn options(&self) -> Result<Options, ApiError> {
        self.check()?;
        Ok(self.unchecked())
    }

    /// `SamplingParams._verify_args` and vLLM's logprobs limit, in vLLM's
    /// order and wording (layer 3). vLLM runs them after its context
    /// checks, so the server calls this once the prompts are counted.
    pub fn check(&self) -> Result<(), ApiError> {
        let n = self.n;
        if n < 1 {
            return Err(sampling_error(&format!("n must be at least 1, got {n}."), "n", None, false));
        }
        if n > MAX_N {
            return Err(sampling_error(
                &format!(
                    "n must be at most {MAX_N}, got {n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES \
                     environment variable."
                ),
                "n",
                None,
                false,
            ));
        }
        let range = |v: Option<f64>, lo: f64, hi: f64| v.is_some_and(|x| !(lo..=hi).contains(&x) || x.is_nan());
        if range(self.presence_penalty, -2.0, 2.0) {
            let v = py_float(self.presence_penalty.unwrap_or_default());
            return Err(sampling_error(
                &format!("presence_penalty must be in [-2, 2], got {v}."),
                "presence_penalty",
                None,
                false,
            ));
        }
        if range(self.frequency_penalty, -2.0, 2.0) {
            let v = py_float(self.frequency_penalty.unwrap_or_default());
            return Err(sampling_error(
                &format!("frequency_penalty must be in [-2, 2], got {v}."),
                "frequency_penalty",
                None,
                false,
            ));
        }
        if let Some(r) = self.repetition_penalty {
            if !r.is_finite() {
                return Err(sampling_error(
                    &format!("repetition_penalty must be a finite number, got {}.", py_float(r)),
                    "repetition_penalty",
                    None,
                    false,
                ));
            }
            if r <= 0.0 {
                return Err(sampling_error(
                    &format!("repetition_penalty must be greater than zero, got {}.", py_float(r)),
                    "repetition_penalty",
                    None,
                    false,
                ));
            }
        }
        if let Some(t) = self.temperature {
            let v = py_float(t);
            if !t.is_finite() {
                let s = format!("temperature must be a finite number, got {v}.");
                return Err(sampling_error(&s, "temperature", Some(v), true));
            }
            if t < 0.0 {
                let s = format!("temperature must be non-negative, got {v}.");
                return Err(sampling_error(&s, "temperature", Some(v), true));
            }
            if t > 2.0 {
                let s = format!("temperature must be in [0, 2], got {v}.");
                return Err(sampling_error(&s, "temperature", Some(v), true));
            }
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            let v = py_float(p);
            return Err(sampling_error(&format!("top_p must be in (0, 1], got {v}."), "top_p", Some(v), true));
        }
        if let Some(k) = self.top_k
            && k < -1
        {
            return Err(sampling_error(
                &format!("top_k must be 0 (disable), or at least 1, got {k}."),
                "top_k",
                None,
                false,
            ));
        }
        if range(self.min_p, 0.0, 1.0) {
            let v = py_float(self.min_p.unwrap_or_default());
            return Err(sampling_error(&format!("min_p must be in [0, 1], got {v}."), "min_p", None, false));
        }
        if let Some(m) = self.max_tokens
            && m < 1
        {
            let shown = self.max_tokens_sent.clone().unwrap_or_else(|| m.to_string());
            return Err(max_tokens_below_one(&shown));
        }
        if self.min_tokens < 0 {
            return Err(sampling_error(
                &format!("min_tokens must be greater than or equal to 0, got {}.", self.min_tokens),
                "min_tokens",
                None,
                false,
            ));
        }
        // `min_tokens` over `max_tokens` is checked against the value vLLM
        // clamps to the context ([`min_tokens_over_max`]), once the prompt
        // is counted.
        if let Some(l) = self.logprobs {
            if l != -1 && l < 0 {
                let s = format!("logprobs must be non-negative or -1, got {l}.");
                return Err(sampling_error(&s, "logprobs", Some(l.to_string()), true));
            }
            // The input processor's limit (`max_logprobs`, default 20); -1
            // asks for the whole vocabulary, which it also caps.
            let asked = if l == -1 { i64::MAX } else { l };
            if asked > MAX_LOGPROBS {
                let shown = if l == -1 { "the full vocabulary".to_string() } else { l.to_string() };
                let param = if self.chat { "top_logprobs" } else { "logprobs" };
                return Err(ApiError::bad_request(format!(
                    "Requested sample logprobs of {shown}, which is greater than max allowed: {MAX_LOGPROBS}"
                ))
                .with_param(param));
            }
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(sampling_error("stop cannot contain an empty string.", "stop", None, false));
        }
        if let Some(t) = self.temperature
            && t < 1e-5
            && n > 1
        {
            return Err(sampling_error(&format!("n must be 1 when using greedy sampling, got {n}."), "n", None, false));
        }
        Ok(())
    }

    /// The options as sent, unchecked (see [`Fields::check`]): a
    /// `max_tokens` below 1 is left out here, so only the check reports it.
    pub fn unchecked(&self) -> Options {
        let n = self.n;
        Options {
            stream: self.stream,
            include_usage: self.include_usage,
            continuous_usage: self.continuous_usage,
            max_tokens: self.max_tokens.filter(|&m| m >= 1).map(i64::unsigned_abs),
            max_tokens_param: self.max_tokens_param,
            max_tokens_sent: self.max_tokens_sent.clone(),
            min_tokens: u32::try_from(self.min_tokens).unwrap_or(u32::MAX),
            n: u32::try_from(n).unwrap_or(u32::MAX),
            seed: self.seed.map(|s| s as u64),
            stops: self.stop.clone(),
            ignore_eos: self.ignore_eos,
            include_stop: self.include_stop_str_in_output,
            echo: self.echo,
            logprobs: self
                .logprobs
                .map(|l| if l == -1 { MAX_LOGPROBS as u32 } else { l.clamp(0, MAX_LOGPROBS) as u32 }),
            priority: self.priority,
        }
    }
}

#[cfg(test)]
mod tests;
