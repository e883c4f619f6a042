//! A model's own chat template: the Jinja `chat_template` of its
//! `tokenizer_config.json`, rendered as vLLM renders it (transformers'
//! `apply_chat_template`), so a chat prompt's tokens are the model's.
//!
//! Where the template comes from, first found wins:
//!
//! 1. `chat_template: FILE` in the models file (vLLM's `--chat-template`),
//!    a Jinja file relative to the models file;
//! 2. `chat_template.jinja` next to the `tokenizer.json` (how transformers
//!    saves templates since 4.43);
//! 3. `chat_template` in the `tokenizer_config.json` next to the
//!    `tokenizer.json`: a string, or a list of `{name, template}` of which
//!    `default` is used, and `tool_use` when the request has tools.
//!
//! The special tokens of `tokenizer_config.json` (`bos_token`, `eos_token`,
//! ..., strings or `{"content": ...}`) are the template's variables, as
//! transformers passes its `special_tokens_map`.
//!
//! The Jinja environment is transformers': `trim_blocks`, `lstrip_blocks`,
//! loop controls, `raise_exception(msg)`, `strftime_now(fmt)` (UTC) and a
//! `tojson` that writes what Python's `json.dumps(ensure_ascii=False)`
//! writes; Python's string and dict methods come from minijinja-contrib's
//! pycompat. Each message is what vLLM's `parse_chat_messages` hands the
//! template: `role`, `content` (text parts joined with `\n`, or, when the
//! template loops over a message's content, a list of `{"type": "text",
//! "text": ...}`), `name`, an assistant's `tool_calls` with their
//! `arguments` parsed into a mapping and its `reasoning`, a tool result's
//! `tool_call_id`. Tools are `{"type": "function", "function": {"name",
//! "description", "parameters", ...}}` as vLLM's pydantic model dumps them.
//!
//! A template that does not parse stops the server at startup; one that
//! fails to render (`raise_exception`, a type error) answers the request
//! with a 400 carrying the template's message. Rendering is bounded by
//! [`FUEL`] instructions, so a looping template cannot hold a worker.

use std::path::Path;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

/// The most Jinja instructions one render may run (minijinja's fuel): a
/// template rendering a few thousand messages uses well under a tenth of
/// it; a template that loops without end stops after about a second.
pub const FUEL: u64 = 20_000_000;

/// Names of the special tokens transformers passes to a template.
const SPECIAL_TOKENS: [&str; 7] =
    ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

/// A compiled chat template with its special tokens.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Whether a `tool_use` template exists besides `default`.
    tool_use: bool,
    /// The template's variables from tokenizer_config.json.
    specials: Vec<(String, Value)>,
    /// Messages' content as a list of parts (vLLM's "openai" content
    /// format), because the template loops over it.
    content_parts: bool,
    /// Where the template came from, for messages.
    pub source: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("source", &self.source).finish()
    }
}

/// What a chat request gives its template, read from the body as sent
/// (key order kept, as Python keeps it, since `tojson` shows it).
#[derive(Clone, Debug, Default)]
pub struct ChatInput {
    messages: Vec<Value>,
    tools: Option<Vec<Value>>,
    documents: Option<Value>,
    kwargs: Vec<(String, Value)>,
    add_generation_prompt: bool,
    continue_final_message: bool,
    /// Tokenize the rendered prompt with the tokenizer's special tokens
    /// (vLLM's `add_special_tokens`, false for chat: the template has them).
    pub add_special_tokens: bool,
}

impl ChatInput {
    /// The template's inputs in a chat request's body (`messages`, `tools`,
    /// `documents`, `chat_template_kwargs`, `add_generation_prompt`,
    /// `continue_final_message`, `add_special_tokens`, with vLLM's
    /// defaults); None when the body is not a JSON object.
    pub fn from_body(body: &[u8]) -> Option<ChatInput> {
        let v: Value = serde_json::from_slice(body).ok()?;
        if v.kind() != ValueKind::Map {
            return None;
        }
        let get = |k: &str| v.get_attr(k).ok().filter(|x| !x.is_undefined() && !x.is_none());
        let flag = |k: &str, default: bool| match get(k) {
            Some(b) if b.kind() == ValueKind::Bool => b.is_true(),
            _ => default,
        };
        let list = |x: Option<Value>| -> Vec<Value> {
            x.filter(|x| x.kind() == ValueKind::Seq)
                .and_then(|x| x.try_iter().ok().map(Iterator::collect))
                .unwrap_or_default()
        };
        let kwargs = get("chat_template_kwargs")
            .filter(|k| k.kind() == ValueKind::Map)
            .and_then(|k| {
                let keys = k.try_iter().ok()?;
                Some(keys.filter_map(|key| Some((key.as_str()?.to_string(), k.get_item(&key).ok()?))).collect())
            })
            .unwrap_or_default();
        let tools = get("tools").map(|t| list(Some(t)).iter().map(tool).collect());
        Some(ChatInput {
            messages: list(get("messages")),
            tools,
            documents: get("documents"),
            kwargs,
            add_generation_prompt: flag("add_generation_prompt", true),
            continue_final_message: flag("continue_final_message", false),
            add_special_tokens: flag("add_special_tokens", false),
        })
    }
}

/// A tool as vLLM's `ChatCompletionToolsParam.model_dump()` gives it:
/// `type`, then `function` with `name`, `description` and `parameters`
/// (null when absent) and any other keys as sent, then the tool's other keys.
fn tool(t: &Value) -> Value {
    let f = t.get_attr("function").unwrap_or_default();
    let mut func: Vec<(Value, Value)> = ["name", "description", "parameters"]
        .iter()
        .map(|k| (Value::from(*k), f.get_attr(k).ok().filter(|x| !x.is_undefined()).unwrap_or(Value::from(()))))
        .collect();
    func.extend(extra(&f, &["name", "description", "parameters"]));
    let mut out = vec![
        (Value::from("type"), t.get_attr("type").ok().filter(|x| !x.is_undefined()).unwrap_or(Value::from("function"))),
        (Value::from("function"), Value::from_pairs(func)),
    ];
    out.extend(extra(t, &["type", "function"]));
    Value::from_pairs(out)
}

/// A mapping's entries other than `skip`, in order.
fn extra(map: &Value, skip: &[&str]) -> Vec<(Value, Value)> {
    if map.kind() != ValueKind::Map {
        return Vec::new();
    }
    map.try_iter()
        .map(|keys| {
            keys.filter(|k| k.as_str().is_none_or(|s| !skip.contains(&s)))
                .filter_map(|k| Some((k.clone(), map.get_item(&k).ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A chat template that cannot be read, parsed or rendered.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

impl ChatTemplate {
    /// The template for a `tokenizer.json` (see the module's list of
    /// places); None when there is none. `explicit` is the models file's
    /// `chat_template:`, resolved.
    pub fn find(tokenizer_json: &Path, explicit: Option<&Path>) -> Result<Option<ChatTemplate>, TemplateError> {
        let dir = tokenizer_json.parent().unwrap_or(Path::new(""));
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = if config_path.is_file() {
            let text = read(&config_path)?;
            serde_json::from_str(&text)
                .map_err(|e| TemplateError(format!("{} is not JSON: {e}", config_path.display())))?
        } else {
            serde_json::Value::Null
        };
        let jinja = dir.join("chat_template.jinja");
        let (templates, source) = if let Some(file) = explicit {
            (vec![("default".to_string(), read(file)?)], file.display().to_string())
        } else if jinja.is_file() {
            (vec![("default".to_string(), read(&jinja)?)], jinja.display().to_string())
        } else {
            let at = format!("{}: chat_template", config_path.display());
            match config.get("chat_template") {
                None | Some(serde_json::Value::Null) => return Ok(None),
                Some(serde_json::Value::String(s)) => (vec![("default".to_string(), s.clone())], at),
                Some(serde_json::Value::Array(items)) => {
                    let named: Option<Vec<(String, String)>> = items
                        .iter()
                        .map(|i| Some((i.get("name")?.as_str()?.to_string(), i.get("template")?.as_str()?.to_string())))
                        .collect();
                    let Some(named) = named else {
                        return Err(TemplateError(format!(
                            "{at}: a list must hold {{\"name\", \"template\"}} strings"
                        )));
                    };
                    (named, at)
                }
                Some(_) => return Err(TemplateError(format!("{at}: must be a string or a list of named templates"))),
            }
        };
        if !templates.iter().any(|(n, _)| n == "default") {
            let names: Vec<&str> = templates.iter().map(|(n, _)| n.as_str()).collect();
            return Err(TemplateError(format!(
                "{source}: no template named `default` (named: {}); llmsim uses `default`, and `tool_use` for \
                 requests with tools",
                names.join(", ")
            )));
        }
        let mut specials = Vec::new();
        for name in SPECIAL_TOKENS {
            let text = match config.get(name) {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(v) => v.get("content").and_then(|c| c.as_str()).map(str::to_string),
                None => None,
            };
            if let Some(text) = text {
                specials.push((name.to_string(), Value::from(text)));
            }
        }
        if let Some(extra) = config.get("additional_special_tokens").and_then(|v| v.as_array()) {
            let texts: Vec<Value> = extra
                .iter()
                .filter_map(|t| t.as_str().or_else(|| t.get("content")?.as_str()))
                .map(Value::from)
                .collect();
            specials.push(("additional_special_tokens".to_string(), Value::from(texts)));
        }
        ChatTemplate::compile(templates, specials, source).map(Some)
    }

    /// Compiles named templates (one named `default`).
    pub fn compile(
        templates: Vec<(String, String)>,
        specials: Vec<(String, Value)>,
        source: String,
    ) -> Result<ChatTemplate, TemplateError> {
        let content_parts = templates.iter().any(|(_, t)| loops_over_content(t));
        let tool_use = templates.iter().any(|(n, _)| n == "tool_use");
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError(format!("the Jinja syntax settings: {e}")))?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_fuel(Some(FUEL));
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        for (name, text) in templates {
            env.add_template_owned(name.clone(), text)
                .map_err(|e| TemplateError(format!("{source}: the chat template `{name}` does not parse: {e}")))?;
        }
        Ok(ChatTemplate { env, tool_use, specials, content_parts, source })
    }

    /// The prompt text of a chat: the template rendered with the request's
    /// messages, tools and flags (`continue_final_message` cuts the text
    /// after the last message's content, as transformers does).
    pub fn render(&self, chat: &ChatInput) -> Result<String, TemplateError> {
        let messages: Vec<Value> = chat.messages.iter().map(|m| self.message(m)).collect();
        let mut ctx: Vec<(String, Value)> = self.specials.clone();
        for (k, v) in &chat.kwargs {
            ctx.retain(|(name, _)| name != k);
            ctx.push((k.clone(), v.clone()));
        }
        let fixed = ["messages", "tools", "documents", "add_generation_prompt"];
        ctx.retain(|(k, _)| !fixed.contains(&k.as_str()));
        ctx.push(("messages".into(), Value::from(messages.clone())));
        ctx.push(("tools".into(), chat.tools.clone().map_or(Value::from(()), Value::from)));
        ctx.push(("documents".into(), chat.documents.clone().unwrap_or(Value::from(()))));
        ctx.push(("add_generation_prompt".into(), Value::from(chat.add_generation_prompt)));
        let name = if self.tool_use && chat.tools.is_some() { "tool_use" } else { "default" };
        let template = self.env.get_template(name).map_err(|e| TemplateError(e.to_string()))?;
        let mut text = template.render(Value::from_pairs(ctx)).map_err(|e| TemplateError(render_error(&e)))?;
        if chat.continue_final_message {
            text = cut_after_final(text, messages.last())?;
        }
        Ok(text)
    }

    /// One message as vLLM's `parse_chat_messages` gives it to a template.
    fn message(&self, m: &Value) -> Value {
        let get = |k: &str| m.get_attr(k).ok().filter(|x| !x.is_undefined() && !x.is_none());
        let role = get("role").unwrap_or(Value::from(""));
        let role_str = role.as_str().unwrap_or("").to_string();
        let texts: Vec<String> = match get("content") {
            None => Vec::new(),
            Some(c) if c.kind() == ValueKind::String => vec![c.as_str().unwrap_or("").to_string()],
            Some(c) => c
                .try_iter()
                .map(|parts| {
                    parts
                        .filter_map(|p| {
                            if let Some(s) = p.as_str() {
                                return Some(s.to_string());
                            }
                            let kind = p.get_attr("type").ok()?;
                            match kind.as_str()? {
                                "text" | "input_text" | "output_text" => {
                                    Some(p.get_attr("text").ok()?.as_str()?.to_string())
                                }
                                "refusal" => Some(p.get_attr("refusal").ok()?.as_str()?.to_string()),
                                _ => None,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        let content = if self.content_parts && role_str != "tool" {
            Value::from(
                texts
                    .into_iter()
                    .map(|t| Value::from_pairs([("type", Value::from("text")), ("text", Value::from(t))]))
                    .collect::<Vec<_>>(),
            )
        } else {
            Value::from(texts.join("\n"))
        };
        let mut out: Vec<(&str, Value)> = vec![("role", role), ("content", content)];
        if role_str == "assistant" {
            if let Some(calls) = get("tool_calls").filter(|c| c.len().unwrap_or(0) > 0) {
                let calls: Vec<Value> =
                    calls.try_iter().map(|it| it.map(|c| tool_call(&c)).collect()).unwrap_or_default();
                out.push(("tool_calls", Value::from(calls)));
            }
            if let Some(r) = get("reasoning").or_else(|| get("reasoning_content")) {
                out.push(("reasoning", r.clone()));
                out.push(("reasoning_content", r));
            }
        }
        if role_str == "tool"
            && let Some(id) = m.get_attr("tool_call_id").ok().filter(|x| !x.is_undefined())
        {
            out.push(("tool_call_id", id));
        }
        if let Some(name) = get("name").filter(|n| n.kind() == ValueKind::String) {
            out.push(("name", name));
        }
        Value::from_pairs(out)
    }
}

/// A tool call with its `arguments` string parsed into a mapping (`{}` when
/// it is not JSON), as vLLM's `_postprocess_messages` does.
fn tool_call(c: &Value) -> Value {
    let f = c.get_attr("function").unwrap_or_default();
    let args = f.get_attr("arguments").unwrap_or_default();
    let parsed = match args.as_str() {
        Some(s) => serde_json::from_str::<Value>(s).unwrap_or_else(|_| Value::from_pairs(Vec::<(Value, Value)>::new())),
        None if matches!(args.kind(), ValueKind::Map | ValueKind::Seq) => args,
        None => Value::from_pairs(Vec::<(Value, Value)>::new()),
    };
    let mut func = extra(&f, &["arguments"]);
    func.push((Value::from("arguments"), parsed));
    let mut out = extra(c, &["function"]);
    out.push((Value::from("function"), Value::from_pairs(func)));
    Value::from_pairs(out)
}

/// vLLM's "openai" content format: the template iterates over a message's
/// content (`for part in message['content']`, `message.content`).
fn loops_over_content(source: &str) -> bool {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(r#"for\s+\w+\s+in\s+\w+\s*(\[\s*['"]content['"]\s*\]|\.content)\s*(%|\||if)"#)
            .unwrap_or_else(|e| unreachable!("a fixed regex: {e}"))
    })
    .is_match(source)
}

/// transformers' `continue_final_message`: the text up to the end of the
/// last message's content, so the model continues it.
fn cut_after_final(text: String, last: Option<&Value>) -> Result<String, TemplateError> {
    let content = last.and_then(|m| m.get_attr("content").ok()).unwrap_or_default();
    let final_text = match content.as_str() {
        Some(s) => s.to_string(),
        None => content
            .try_iter()
            .ok()
            .and_then(|parts| {
                let parts: Vec<Value> = parts.collect();
                parts.iter().rev().find_map(|p| p.get_attr("text").ok()?.as_str().map(str::to_string))
            })
            .ok_or_else(|| TemplateError("continue_final_message is set but the final message has no text".into()))?,
    };
    let stripped = final_text.trim();
    let Some(at) = text.rfind(stripped) else {
        return Err(TemplateError(
            "continue_final_message is set but the final message does not appear in the chat after applying the \
             chat template! This can happen if the chat template deletes portions of the final message. Please \
             verify the chat template and final message in your chat to ensure they are compatible."
                .into(),
        ));
    };
    let lead = final_text.trim_start();
    let end = if text[at..].starts_with(lead) { at + lead.len() } else { at + stripped.len() };
    Ok(text[..end].to_string())
}

/// The message of a render error: the template's own for
/// `raise_exception`, minijinja's otherwise.
fn render_error(e: &Error) -> String {
    match e.kind() {
        ErrorKind::InvalidOperation if e.name().is_none() || e.detail().is_some() => {
            e.detail().map_or_else(|| e.to_string(), str::to_string)
        }
        ErrorKind::OutOfFuel => format!(
            "the chat template did not finish rendering within {FUEL} instructions (llmsim's bound on a template)"
        ),
        _ => format!("the chat template failed to render: {e}"),
    }
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// transformers' `strftime_now`: the time now, formatted (UTC; `%Y %y %m
/// %d %e %H %M %S %j %b %B %a %A %p %I %%`, other directives as written).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    strftime(&format, secs)
}

/// `format` for `secs` since the Unix epoch, UTC.
pub fn strftime(format: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (y, m, d) = llmsim_core::util::civil_date(days);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let before: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = before[(m - 1) as usize] + d + i64::from(leap && m > 2);
    // 1970-01-01 was a Thursday.
    let wday = (days.rem_euclid(7) + 3) % 7;
    let month = MONTHS[(m - 1) as usize];
    let day = DAYS[wday as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('I') => out.push_str(&format!("{:02}", if h % 12 == 0 { 12 } else { h % 12 })),
            Some('p') => out.push_str(if h < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&day[..3]),
            Some('A') => out.push_str(day),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// transformers' `tojson`: Python's `json.dumps(x, ensure_ascii=False,
/// indent=indent, separators=separators, sort_keys=sort_keys)`.
fn tojson(v: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        Some(i) if i.is_none() => None,
        Some(i) => match i.as_i64() {
            Some(n) => Some(" ".repeat(n.clamp(0, 64) as usize)),
            None => Some(i.as_str().unwrap_or("").to_string()),
        },
        None => None,
    };
    let (item, key) = match separators.filter(|s| !s.is_none()) {
        Some(s) => {
            let a = s.get_item_by_index(0)?.as_str().unwrap_or(",").to_string();
            let b = s.get_item_by_index(1)?.as_str().unwrap_or(":").to_string();
            (a, b)
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let style = Json { indent, item, key, sort: sort_keys.unwrap_or(false) };
    let mut out = String::new();
    style.write(&v, 0, &mut out)?;
    Ok(Value::from(out))
}

struct Json {
    indent: Option<String>,
    item: String,
    key: String,
    sort: bool,
}

impl Json {
    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(ind) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    }

    fn write(&self, v: &Value, depth: usize, out: &mut String) -> Result<(), Error> {
        if depth > 256 {
            return Err(Error::new(ErrorKind::InvalidOperation, "tojson: nested too deeply"));
        }
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if let Some(i) = v.as_i64() {
                    out.push_str(&i.to_string());
                } else {
                    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                    out.push_str(&py_float(f));
                }
            }
            ValueKind::String => string(v.as_str().unwrap_or(""), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.open_close(items.len(), '[', ']', depth, out, |i, out| self.write(&items[i], depth + 1, out))?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort {
                    keys.sort_by_key(Value::to_string);
                }
                self.open_close(keys.len(), '{', '}', depth, out, |i, out| {
                    string(&keys[i].to_string(), out);
                    out.push_str(&self.key);
                    self.write(&v.get_item(&keys[i])?, depth + 1, out)
                })?;
            }
            _ => string(&v.to_string(), out),
        }
        Ok(())
    }

    fn open_close(
        &self,
        n: usize,
        open: char,
        close: char,
        depth: usize,
        out: &mut String,
        mut each: impl FnMut(usize, &mut String) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if n == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..n {
            if i > 0 {
                out.push_str(&self.item);
            }
            self.newline(depth + 1, out);
            each(i, out)?;
        }
        self.newline(depth, out);
        out.push(close);
        Ok(())
    }
}

/// A float as Python's `repr` writes it in JSON.
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    let s = format!("{f:?}");
    // Rust writes 1e20 as "1e20"; Python as "1e+20".
    match s.split_once('e') {
        Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
        _ => s,
    }
}

/// A JSON string as Python writes it with `ensure_ascii=False`.
fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn read(path: &Path) -> Result<String, TemplateError> {
    std::fs::read_to_string(path).map_err(|e| TemplateError(format!("cannot read {}: {e}", path.display())))
}

#[cfg(test)]
mod tests;
