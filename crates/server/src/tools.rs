//! Tool calls, as vLLM answers them.
//!
//! vLLM's behaviour depends on two server flags, which a served model sets
//! with keys of the same names ([`ToolCalling`]): `tool_call_parser` (vLLM's
//! `--tool-call-parser`, how the model writes a call) and
//! `enable_auto_tool_choice` (`--enable-auto-tool-choice`). As vLLM 0.33's
//! renderer decides, for a chat request with `tools`:
//!
//! | `tool_choice` | no parser | parser | parser + auto |
//! |---|---|---|---|
//! | `"none"` | text | text | text |
//! | `"auto"` (the default with tools) | 400 | text | a call when the script has one |
//! | `"required"` | 400 | a call | a call |
//! | `{"type": "function", "function": {"name": f}}` | 400 | a call of `f` | a call of `f` |
//!
//! What the model generates for a call, and so how many output tokens it
//! costs, is the text vLLM's structured output or the parser reads: a named
//! call is its arguments JSON, `"required"` a JSON list `[{"name": ...,
//! "parameters": ...}]`, `"auto"` the parser's format (hermes:
//! `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`; llama3_json:
//! `{"name": ..., "parameters": ...}`). The call comes from the responses
//! script (`tool_call:` entries, matched only when the request offers the
//! tool); `"required"` without a scripted call picks one of the offered
//! tools by the seed, a named choice calls that tool; arguments the script
//! does not give are made up from the tool's schema
//! (`content::responses::args`). After a tool result (the last message's
//! role is `tool`) `"auto"` answers in text, so an agent loop ends.
//!
//! A whole answer carries `tool_calls` (ids `chatcmpl-tool-<32 hex>`, a
//! function of the seed, the prompt and the choice) and `finish_reason`
//! `"tool_calls"`, except for a named choice, which vLLM reports as
//! `"stop"`; `content` is `""` for a forced call and `null` for an auto one.
//! A stream sends vLLM's deltas: the first chunk of a call carries its
//! `id`, `type`, `index` and `function.name` with the arguments so far,
//! later chunks only new `function.arguments`; the tokens of the markup
//! around the arguments send no chunk. An answer that `max_tokens` or a
//! stop string cut before the call's text ended is read as vLLM's parser
//! reads broken output: a named call keeps what arguments it has,
//! `"required"` gives no call and empty content, `"auto"` gives the text
//! as content.
//!
//! Tool definitions are part of the prompt, as a chat template puts them:
//! [`frame`] adds them to the system message (the Hermes/Qwen template's
//! wording), so they count toward prompt tokens and the prefix cache.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::errors::ApiError;
use llmsim_content::responses::ToolCallAnswer;
use llmsim_content::responses::args;

/// How a model writes a call (vLLM's `--tool-call-parser`). The format
/// only changes the text, so the tokens, a call takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    Hermes,
    Llama3Json,
}

/// The parser names a models file may give.
pub const PARSERS: &[(&str, Parser)] = &[("hermes", Parser::Hermes), ("llama3_json", Parser::Llama3Json)];

/// A served model's tool-calling flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolCalling {
    pub parser: Option<Parser>,
    /// `enable_auto_tool_choice`.
    pub auto: bool,
}

impl ToolCalling {
    /// Checks the models-file keys; an error is (key, message).
    pub fn from_keys(parser: Option<&str>, auto: bool) -> Result<ToolCalling, (&'static str, String)> {
        let parser = match parser {
            None => None,
            Some(name) => Some(PARSERS.iter().find(|(n, _)| *n == name).map(|(_, p)| *p).ok_or_else(|| {
                let names: Vec<&str> = PARSERS.iter().map(|(n, _)| *n).collect();
                (
                    "tool_call_parser",
                    format!(
                        "`{name}` is not a parser llmsim writes: use one of {} (the format only changes how many \
                         tokens a call takes)",
                        names.join(", ")
                    ),
                )
            })?),
        };
        if auto && parser.is_none() {
            return Err((
                "enable_auto_tool_choice",
                "needs tool_call_parser, as vLLM's --enable-auto-tool-choice needs --tool-call-parser".into(),
            ));
        }
        Ok(ToolCalling { parser, auto })
    }
}

/// A tool the request offers.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    /// The function's `parameters` schema, if it has one.
    pub parameters: Option<Value>,
    /// The tool as sent, for the prompt.
    pub definition: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// A chat request's `tools` and `tool_choice` (checked by `request`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolsIn {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
}

/// What an answer may do with the tools.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Text,
    Auto(Parser),
    Required,
    Named(String),
}

/// The mode of a request on a model, or vLLM's 400 when the model's flags
/// do not allow its `tool_choice`.
pub fn mode(cfg: &ToolCalling, tools: Option<&ToolsIn>) -> Result<Mode, ApiError> {
    let Some(t) = tools else { return Ok(Mode::Text) };
    let refuse = |m: String| Err(ApiError::bad_request(m).with_param("tool_choice"));
    match (&t.choice, cfg.parser) {
        (ToolChoice::None, _) => Ok(Mode::Text),
        (ToolChoice::Auto, None) => {
            refuse("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set".into())
        }
        (ToolChoice::Required, None) => refuse("tool_choice=\"required\" requires --tool-call-parser to be set".into()),
        (ToolChoice::Named(f), None) => {
            refuse(format!("tool_choice=function \"{f}\" requires --tool-call-parser to be set"))
        }
        (ToolChoice::Auto, Some(p)) => Ok(if cfg.auto { Mode::Auto(p) } else { Mode::Text }),
        (ToolChoice::Required, Some(_)) => Ok(Mode::Required),
        (ToolChoice::Named(f), Some(_)) => Ok(Mode::Named(f.clone())),
    }
}

/// The tools a scripted answer may call: none in text mode or, with
/// `"auto"`, right after a tool result; the named one; else all.
pub fn offered(mode: &Mode, tools: Option<&ToolsIn>, last_role: Option<&str>) -> Vec<String> {
    let all = || tools.map_or_else(Vec::new, |t| t.tools.iter().map(|x| x.name.clone()).collect());
    match mode {
        Mode::Text => Vec::new(),
        Mode::Auto(_) if last_role == Some("tool") => Vec::new(),
        Mode::Auto(_) | Mode::Required => all(),
        Mode::Named(f) => vec![f.clone()],
    }
}

/// The tools block a chat template adds to the system message (the
/// Hermes / Qwen2.5 template's wording, one tool's JSON a line).
pub fn prompt_block(tools: &[Tool]) -> String {
    let mut out = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with \
         function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        out.push('\n');
        out.push_str(&args::python_json(&t.definition));
    }
    out.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within \
         <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": \
         <args-json-object>}\n</tool_call>",
    );
    out
}

/// Puts the tools into a chat's messages (role, content): appended to the
/// first message when it is the system's, else a system message first.
pub fn frame(messages: &mut Vec<(String, String)>, tools: &[Tool]) {
    let block = prompt_block(tools);
    match messages.first_mut() {
        Some((role, content)) if role == "system" => {
            content.push_str("\n\n");
            content.push_str(&block);
        }
        _ => messages.insert(0, ("system".to_string(), block)),
    }
}

/// One call of an answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as the model writes them (Python's `json.dumps`).
    pub arguments: String,
}

/// A tool-call answer: its calls, the text the model generates for them,
/// and where each call's arguments lie in that text (byte ranges).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolPlan {
    pub mode: Mode,
    pub calls: Vec<Call>,
    pub text: String,
    spans: Vec<(usize, usize)>,
}

/// The answer's call, if it makes one: the script's (`scripted`), else a
/// tool the mode forces. `hash` (seed, prompt, choice) seeds the made-up
/// parts and the call id.
pub fn plan_call(mode: &Mode, tools: &ToolsIn, scripted: Option<&ToolCallAnswer>, hash: u64) -> Option<ToolPlan> {
    let schema = |name: &str| tools.tools.iter().find(|t| t.name == name).and_then(|t| t.parameters.as_ref());
    let (name, arguments) = match (mode, scripted) {
        (Mode::Text, _) => return None,
        (_, Some(s)) => (s.name.clone(), args::arguments(schema(&s.name), &s.arguments, s.hash)),
        (Mode::Auto(_), None) => return None,
        (Mode::Named(f), None) => (f.clone(), args::arguments(schema(f), &Map::new(), hash)),
        (Mode::Required, None) => {
            let t = tools.tools.get((hash % tools.tools.len().max(1) as u64) as usize)?;
            (t.name.clone(), args::arguments(t.parameters.as_ref(), &Map::new(), hash))
        }
    };
    let arguments = args::python_json(&Value::Object(arguments));
    let name_json = Value::String(name.clone()).to_string();
    let (before, after) = match mode {
        Mode::Named(_) => (String::new(), String::new()),
        Mode::Required => (format!("[{{\"name\": {name_json}, \"parameters\": "), "}]".to_string()),
        Mode::Auto(Parser::Hermes) => {
            (format!("<tool_call>\n{{\"name\": {name_json}, \"arguments\": "), "}\n</tool_call>".to_string())
        }
        Mode::Auto(Parser::Llama3Json) | Mode::Text => {
            (format!("{{\"name\": {name_json}, \"parameters\": "), "}".to_string())
        }
    };
    let text = format!("{before}{arguments}{after}");
    let spans = vec![(before.len(), before.len() + arguments.len())];
    let call = Call { id: call_id(hash), name, arguments };
    Some(ToolPlan { mode: mode.clone(), calls: vec![call], text, spans })
}

/// `chatcmpl-tool-` and 32 hex digits, as vLLM's ids look, from `hash`.
fn call_id(hash: u64) -> String {
    let a = args::hash_of(&[&hash.to_le_bytes(), b"id-a"]);
    let b = args::hash_of(&[&hash.to_le_bytes(), b"id-b"]);
    format!("chatcmpl-tool-{a:016x}{b:016x}")
}

/// A whole answer's message fields.
#[derive(Debug, PartialEq)]
pub struct Message {
    /// `content`: `""` for a forced call, `null` for an auto one.
    pub content: Option<String>,
    pub tool_calls: Vec<Value>,
    pub finish_reason: String,
}

/// One tool call in a stream delta, in vLLM's field order.
#[derive(Debug, Serialize, PartialEq)]
pub struct DeltaCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    index: usize,
    function: DeltaFunction<'a>,
}

#[derive(Debug, Serialize, PartialEq)]
struct DeltaFunction<'a> {
    /// Absent, or `null` on later chunks of a `"required"` call (vLLM sets it).
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Option<&'a str>>,
    arguments: &'a str,
}

/// What a stream chunk carries for the tools: calls and, after an auto
/// call, text the model went on with.
#[derive(Debug, Default, PartialEq)]
pub struct Delta<'a> {
    pub content: Option<&'a str>,
    pub tool_calls: Vec<DeltaCall<'a>>,
}

impl ToolPlan {
    /// Whether `generated` (the answer's text) is the whole call text.
    fn complete(&self, generated: &str) -> bool {
        generated == self.text
    }

    /// The finish reason vLLM reports: `tool_calls` for a call that ended
    /// by itself, except a named one.
    pub fn finish<'a>(&self, finish: &'a str, called: bool) -> &'a str {
        if called && finish == "stop" && !matches!(self.mode, Mode::Named(_)) { "tool_calls" } else { finish }
    }

    /// A whole answer's message, for the generated text and the engine's
    /// finish reason.
    pub fn message(&self, generated: &str, finish: &str) -> Message {
        let call = |c: &Call, arguments: &str| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}});
        let (content, tool_calls) = match &self.mode {
            Mode::Named(_) if generated.trim().is_empty() => (Some(String::new()), Vec::new()),
            Mode::Named(_) => (Some(String::new()), vec![call(&self.calls[0], generated)]),
            _ if !self.complete(generated) => match self.mode {
                Mode::Required => (Some(String::new()), Vec::new()),
                _ => (Some(generated.to_string()), Vec::new()),
            },
            Mode::Required => (Some(String::new()), self.calls.iter().map(|c| call(c, &c.arguments)).collect()),
            _ => (None, self.calls.iter().map(|c| call(c, &c.arguments)).collect()),
        };
        let finish_reason = self.finish(finish, !tool_calls.is_empty()).to_string();
        Message { content, tool_calls, finish_reason }
    }

    /// The end of call `j`'s arguments in `generated`: a named call's run
    /// to the end of the text.
    fn args_end(&self, j: usize, generated: &str) -> usize {
        match self.mode {
            Mode::Named(_) => generated.len(),
            _ => self.spans[j].1.min(generated.len()),
        }
    }

    /// Whether some call was announced once the text reached `upto` bytes.
    pub fn announced(&self, upto: usize) -> bool {
        self.spans.first().is_some_and(|&(s, _)| upto > s)
    }

    /// The delta of the chunk whose token took the text from `prev` to
    /// `cur` bytes of `generated`; None when the token sends nothing.
    pub fn delta<'a>(&'a self, generated: &'a str, prev: usize, cur: usize) -> Option<Delta<'a>> {
        let mut d = Delta::default();
        for (j, &(start, _)) in self.spans.iter().enumerate() {
            if cur <= start {
                break;
            }
            let end = self.args_end(j, generated);
            let c = &self.calls[j];
            if prev > start {
                let new = generated.get(prev.max(start)..cur.min(end).max(prev.max(start))).unwrap_or("");
                let named = matches!(self.mode, Mode::Named(_));
                if named || !new.is_empty() {
                    let name = if self.mode == Mode::Required { Some(None) } else { None };
                    let function = DeltaFunction { name, arguments: new };
                    d.tool_calls.push(DeltaCall { id: None, kind: None, index: j, function });
                }
            } else {
                let so_far = generated.get(start..cur.min(end).max(start)).unwrap_or("");
                let function = DeltaFunction { name: Some(Some(&c.name)), arguments: so_far };
                d.tool_calls.push(DeltaCall { id: Some(&c.id), kind: Some("function"), index: j, function });
            }
        }
        if matches!(self.mode, Mode::Auto(_)) && generated.starts_with(&self.text) && cur > self.text.len() {
            d.content = generated.get(prev.max(self.text.len())..cur).filter(|s| !s.is_empty());
        }
        (d.content.is_some() || !d.tool_calls.is_empty()).then_some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> ToolsIn {
        let definition = json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
        let parameters = Some(definition["function"]["parameters"].clone());
        ToolsIn { tools: vec![Tool { name: "get_weather".into(), parameters, definition }], choice: ToolChoice::Auto }
    }

    fn scripted(city: &str) -> ToolCallAnswer {
        let mut arguments = Map::new();
        arguments.insert("city".into(), json!(city));
        ToolCallAnswer { name: "get_weather".into(), arguments, hash: 1 }
    }

    fn delta_json(p: &ToolPlan, generated: &str, prev: usize, cur: usize) -> Option<Value> {
        p.delta(generated, prev, cur).map(|d| {
            let mut v = json!({});
            if let Some(c) = d.content {
                v["content"] = json!(c);
            }
            if !d.tool_calls.is_empty() {
                v["tool_calls"] = serde_json::to_value(&d.tool_calls).unwrap();
            }
            v
        })
    }

    #[test]
    fn the_flags_decide_as_vllms_renderer_does() {
        let off = ToolCalling::default();
        let parser = ToolCalling { parser: Some(Parser::Hermes), auto: false };
        let auto = ToolCalling { parser: Some(Parser::Hermes), auto: true };
        let mut t = weather();
        let e = mode(&off, Some(&t)).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.message.as_str(), e.param.as_deref()),
            (
                400,
                "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
                Some("tool_choice")
            )
        );
        assert_eq!(mode(&parser, Some(&t)).unwrap(), Mode::Text, "auto without the auto flag answers text");
        assert_eq!(mode(&auto, Some(&t)).unwrap(), Mode::Auto(Parser::Hermes));
        t.choice = ToolChoice::Required;
        assert_eq!(
            mode(&off, Some(&t)).unwrap_err().message,
            "tool_choice=\"required\" requires --tool-call-parser to be set"
        );
        assert_eq!(mode(&parser, Some(&t)).unwrap(), Mode::Required);
        t.choice = ToolChoice::Named("get_weather".into());
        assert_eq!(
            mode(&off, Some(&t)).unwrap_err().message,
            "tool_choice=function \"get_weather\" requires --tool-call-parser to be set"
        );
        assert_eq!(mode(&parser, Some(&t)).unwrap(), Mode::Named("get_weather".into()));
        t.choice = ToolChoice::None;
        assert_eq!(mode(&off, Some(&t)).unwrap(), Mode::Text);
        assert_eq!(mode(&off, None).unwrap(), Mode::Text);
    }

    #[test]
    fn auto_calls_nothing_right_after_a_tool_result() {
        let t = weather();
        let m = Mode::Auto(Parser::Hermes);
        assert_eq!(offered(&m, Some(&t), Some("user")), vec!["get_weather".to_string()]);
        assert!(offered(&m, Some(&t), Some("tool")).is_empty());
        assert_eq!(offered(&Mode::Required, Some(&t), Some("tool")), vec!["get_weather".to_string()]);
        assert!(offered(&Mode::Text, Some(&t), Some("user")).is_empty());
    }

    #[test]
    fn each_mode_writes_the_text_vllm_reads() {
        let t = weather();
        let s = scripted("Paris");
        let p = plan_call(&Mode::Auto(Parser::Hermes), &t, Some(&s), 7).unwrap();
        assert_eq!(
            p.text,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
        );
        let p = plan_call(&Mode::Auto(Parser::Llama3Json), &t, Some(&s), 7).unwrap();
        assert_eq!(p.text, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
        let p = plan_call(&Mode::Required, &t, Some(&s), 7).unwrap();
        assert_eq!(p.text, "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}]");
        let p = plan_call(&Mode::Named("get_weather".into()), &t, Some(&s), 7).unwrap();
        assert_eq!(
            (p.text.as_str(), p.calls[0].arguments.as_str()),
            ("{\"city\": \"Paris\"}", "{\"city\": \"Paris\"}")
        );
        assert!(p.calls[0].id.starts_with("chatcmpl-tool-") && p.calls[0].id.len() == 14 + 32, "{}", p.calls[0].id);
        // No script: auto answers in text, required and named make one up.
        assert_eq!(plan_call(&Mode::Auto(Parser::Hermes), &t, None, 7), None);
        let p = plan_call(&Mode::Required, &t, None, 7).unwrap();
        assert_eq!(p.calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&p.calls[0].arguments).unwrap();
        assert!(args["city"].is_string(), "{args}");
        assert_eq!(plan_call(&Mode::Required, &t, None, 7), Some(p), "same hash, same call");
    }

    #[test]
    fn a_whole_answer_has_vllms_content_and_finish_reason() {
        let t = weather();
        let s = scripted("Oslo");
        let p = plan_call(&Mode::Auto(Parser::Hermes), &t, Some(&s), 3).unwrap();
        let m = p.message(&p.text, "stop");
        let id = p.calls[0].id.clone();
        assert_eq!(m.content, None);
        assert_eq!(
            m.tool_calls,
            vec![
                json!({"id": id, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}})
            ]
        );
        assert_eq!(m.finish_reason, "tool_calls");
        // Cut by max_tokens: the parser finds no call; the text is content.
        let m = p.message("<tool_call>\n{\"name\"", "length");
        assert_eq!(
            (m.content.as_deref(), m.tool_calls.len(), m.finish_reason.as_str()),
            (Some("<tool_call>\n{\"name\""), 0, "length")
        );
        let p = plan_call(&Mode::Required, &t, Some(&s), 3).unwrap();
        let m = p.message(&p.text, "stop");
        assert_eq!((m.content.as_deref(), m.tool_calls.len(), m.finish_reason.as_str()), (Some(""), 1, "tool_calls"));
        assert_eq!(p.message("[{\"na", "length").tool_calls.len(), 0);
        let p = plan_call(&Mode::Named("get_weather".into()), &t, Some(&s), 3).unwrap();
        let m = p.message(&p.text, "stop");
        assert_eq!((m.content.as_deref(), m.tool_calls.len(), m.finish_reason.as_str()), (Some(""), 1, "stop"));
        let m = p.message("{\"ci", "length");
        assert_eq!(m.tool_calls[0]["function"]["arguments"], "{\"ci");
    }

    #[test]
    fn a_stream_announces_the_call_once_then_sends_argument_pieces() {
        let t = weather();
        let p = plan_call(&Mode::Required, &t, Some(&scripted("Rome")), 3).unwrap();
        let g = p.text.clone();
        let start = g.find("{\"city").unwrap();
        // Markup before the arguments sends nothing.
        assert_eq!(delta_json(&p, &g, 0, start), None);
        let id = p.calls[0].id.clone();
        assert_eq!(
            delta_json(&p, &g, start - 2, start + 3),
            Some(json!({"tool_calls": [{"id": id, "type": "function", "index": 0,
                "function": {"name": "get_weather", "arguments": "{\"c"}}]}))
        );
        assert_eq!(
            delta_json(&p, &g, start + 3, start + 6),
            Some(json!({"tool_calls": [{"index": 0, "function": {"name": null, "arguments": "ity"}}]}))
        );
        // The closing `}]` is markup again.
        assert_eq!(delta_json(&p, &g, g.len() - 2, g.len()), None);
        // A named call: every token, even the empty end-of-sequence one.
        let p = plan_call(&Mode::Named("get_weather".into()), &t, Some(&scripted("Rome")), 3).unwrap();
        let g = p.text.clone();
        assert_eq!(
            delta_json(&p, &g, g.len(), g.len()),
            Some(json!({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}))
        );
        // Auto: text the model goes on with after the call is content.
        let p = plan_call(&Mode::Auto(Parser::Hermes), &t, Some(&scripted("Rome")), 3).unwrap();
        let g = format!("{} more", p.text);
        assert_eq!(delta_json(&p, &g, p.text.len(), g.len()), Some(json!({"content": " more"})));
    }

    #[test]
    fn tools_go_into_the_system_message() {
        let t = weather();
        let mut m = vec![("user".to_string(), "hi".to_string())];
        frame(&mut m, &t.tools);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].0, "system");
        assert!(m[0].1.contains("<tools>\n{\"function\": {\"name\": \"get_weather\""), "{}", m[0].1);
        let mut m = vec![("system".to_string(), "Be brief.".to_string()), ("user".to_string(), "hi".to_string())];
        frame(&mut m, &t.tools);
        assert_eq!(m.len(), 2);
        assert!(m[0].1.starts_with("Be brief.\n\n# Tools\n"), "{}", m[0].1);
    }
}
