//! `response_format` and `structured_outputs`: the constraint a request
//! puts on its answer, read as vLLM 0.33 reads it.
//!
//! vLLM turns both fields into one `StructuredOutputsParams`: the body's
//! `structured_outputs` (`json`, `regex`, `choice`, `grammar`,
//! `json_object`, `structural_tag`, and options), then `response_format`
//! on top (`json_object` sets `json_object`, `json_schema` sets `json` to
//! its `schema`, `structural_tag` sets `structural_tag`; `text` nothing).
//! It refuses, and so does llmsim, with vLLM's sentences:
//!
//! - `response_format` `json_schema` without `json_schema` (a model
//!   validator, `parameter=response_format`);
//! - more than one of `json`, `regex`, `choice` in `structured_outputs`,
//!   or one of them with a named `tool_choice` (model validators);
//! - a `structured_outputs` with no constraint or more than one of the six
//!   kinds, and a `response_format` that adds a second one or none (a
//!   `json_schema` without `schema`): `StructuredOutputsParams`'s check,
//!   whose message lists the parameters as Python prints them;
//! - field types (pydantic's errors, as for every other field).
//!
//! What llmsim cannot generate is refused with a 400 that says so, rather
//! than answered with text that breaks the constraint: a `grammar`
//! (EBNF/Lark) and a `structural_tag`. The old `guided_json`,
//! `guided_regex`, `guided_choice` and `guided_grammar` fields are gone
//! from vLLM 0.33's request models, which ignore unknown fields, so llmsim
//! ignores them too.

use serde_json::{Map, Value};

use super::{ApiError, Reader, Seg, py_repr, py_str, value_error};
use llmsim_content::structured::Constraint;

/// The six kinds of constraint, in `StructuredOutputsParams`' order.
const KINDS: [&str; 6] = ["json", "regex", "choice", "grammar", "json_object", "structural_tag"];

/// A model validator's `VLLMValidationError` without a parameter: vLLM
/// 0.33 raises it past pydantic (it is no `ValueError`), so the answer is
/// the sentence alone, type `BadRequestError`, `param` null.
fn plain_value_error(sentence: &str) -> ApiError {
    ApiError::bad_request(sentence)
}

/// vLLM's model validators on the raw body (`validate_response_format`,
/// `check_structured_outputs_count`).
pub(super) fn before(map: &Map<String, Value>) -> Result<(), ApiError> {
    if let Some(Value::Object(rf)) = map.get("response_format")
        && rf.get("type").and_then(Value::as_str) == Some("json_schema")
        && rf.get("json_schema").is_none_or(Value::is_null)
    {
        return Err(value_error(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            "response_format",
        ));
    }
    if let Some(Value::Object(so)) = map.get("structured_outputs") {
        let count = ["json", "regex", "choice"].iter().filter(|k| so.get(**k).is_some_and(|v| !v.is_null())).count();
        if count > 1 {
            return Err(plain_value_error(
                "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
            ));
        }
        // vLLM compares `data.get("tool_choice", "none")`: absent is
        // "none", but an explicit null or a named choice is neither.
        let named = match map.get("tool_choice") {
            None => false,
            Some(Value::String(s)) => !matches!(s.as_str(), "none" | "auto" | "required"),
            Some(_) => true,
        };
        if count > 0 && named {
            return Err(plain_value_error(
                "You can only either use constraints for structured outputs or tools, not both.",
            ));
        }
    }
    Ok(())
}

/// The parameters as sent (`StructuredOutputsParams`).
#[derive(Default)]
struct Params {
    /// Each kind's value, `None` when not given.
    kinds: [Option<Value>; 6],
    disable_any_whitespace: bool,
    disable_additional_properties: bool,
    whitespace_pattern: Option<String>,
}

impl Params {
    fn count(&self) -> usize {
        self.kinds.iter().filter(|k| k.is_some()).count()
    }

    /// `self.__dict__` as Python prints it in vLLM's messages.
    fn repr(&self) -> String {
        let py = |v: &Option<Value>| v.as_ref().map_or_else(|| "None".to_string(), py_repr);
        let flag = |b: bool| if b { "True" } else { "False" };
        let mut out = String::from("{");
        for (i, k) in KINDS[..5].iter().enumerate() {
            out.push_str(&format!("'{k}': {}, ", py(&self.kinds[i])));
        }
        out.push_str(&format!(
            "'disable_any_whitespace': {}, 'disable_additional_properties': {}, 'whitespace_pattern': {}, \
             'structural_tag': {}, '_backend': None, '_backend_was_auto': False}}",
            flag(self.disable_any_whitespace),
            flag(self.disable_additional_properties),
            self.whitespace_pattern.as_deref().map_or_else(|| "None".to_string(), py_str),
            py(&self.kinds[5]),
        ));
        out
    }

    /// `StructuredOutputsParams.__post_init__`'s sentence, if it refuses.
    fn post_init(&self) -> Option<String> {
        match self.count() {
            1 => None,
            0 => Some(format!(
                "You must use one kind of structured outputs constraint but none are specified: {}",
                self.repr()
            )),
            _ => Some(format!(
                "You can only use one kind of structured outputs constraint but multiple are specified: {}",
                self.repr()
            )),
        }
    }
}

fn at(field: &str, path: &[&str]) -> Vec<Seg> {
    std::iter::once(field).chain(path.iter().copied()).map(|k| Seg::Key(k.to_string())).collect()
}

/// `response_format`'s constraint: `None` for none or `text`, else the
/// kind's index in [`KINDS`] and its value (a `json_schema`'s `schema`
/// may be absent: `None`).
fn response_format(r: &mut Reader) -> Option<(usize, Option<Value>)> {
    let v = r.get("response_format")?;
    let Some(rf) = v.as_object() else {
        r.fail(
            at("response_format", &[]),
            "model_type",
            "Input should be a valid dictionary or instance of ResponseFormat",
            v,
        );
        return None;
    };
    let kind = match rf.get("type") {
        None => {
            r.fail(at("response_format", &["type"]), "missing", "Field required", v);
            return None;
        }
        Some(t) => match t.as_str() {
            Some(k @ ("text" | "json_object" | "json_schema" | "structural_tag")) => k,
            _ => {
                r.fail(
                    at("response_format", &["type"]),
                    "literal_error",
                    "Input should be 'text', 'json_object', 'json_schema' or 'structural_tag'",
                    t,
                );
                return None;
            }
        },
    };
    match kind {
        "json_object" => Some((4, Some(Value::Bool(true)))),
        "structural_tag" => Some((5, Some(v.clone()))),
        "json_schema" => {
            // `before` refused a missing one.
            let js = rf.get("json_schema")?;
            let Some(o) = js.as_object() else {
                r.fail(
                    at("response_format", &["json_schema"]),
                    "model_type",
                    "Input should be a valid dictionary or instance of JsonSchemaResponseFormat",
                    js,
                );
                return None;
            };
            match o.get("name") {
                Some(Value::String(_)) => {}
                Some(other) => r.fail(
                    at("response_format", &["json_schema", "name"]),
                    "string_type",
                    "Input should be a valid string",
                    other,
                ),
                None => r.fail(at("response_format", &["json_schema", "name"]), "missing", "Field required", js),
            }
            match o.get("schema") {
                None | Some(Value::Null) => Some((0, None)),
                Some(s @ Value::Object(_)) => Some((0, Some(s.clone()))),
                Some(other) => {
                    r.fail(
                        at("response_format", &["json_schema", "schema"]),
                        "dict_type",
                        "Input should be a valid dictionary",
                        other,
                    );
                    None
                }
            }
        }
        _ => None,
    }
}

/// `structured_outputs` with pydantic's type checks of its fields.
fn structured_outputs(r: &mut Reader) -> Option<Params> {
    let v = r.get("structured_outputs")?;
    let Some(o) = v.as_object() else {
        r.fail(
            at("structured_outputs", &[]),
            "dataclass_type",
            "Input should be a dictionary or an instance of StructuredOutputsParams",
            v,
        );
        return None;
    };
    let mut inner = Reader { map: o, errors: Vec::new() };
    let mut p = Params {
        disable_any_whitespace: inner.boolean("disable_any_whitespace").unwrap_or(false),
        disable_additional_properties: inner.boolean("disable_additional_properties").unwrap_or(false),
        whitespace_pattern: inner.string("whitespace_pattern"),
        ..Params::default()
    };
    for (i, k) in KINDS.iter().enumerate() {
        let Some(x) = inner.get(k) else { continue };
        let ok = match *k {
            "json" => x.is_string() || x.is_object(),
            "choice" => x.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            "json_object" => inner.boolean(k).is_some(),
            _ => x.is_string(),
        };
        if ok {
            p.kinds[i] = Some(x.clone());
        } else if *k != "json_object" {
            let (kind, msg) = match *k {
                "json" => ("dict_type", "Input should be a valid string or dictionary"),
                "choice" => ("list_type", "Input should be a valid list of strings"),
                _ => ("string_type", "Input should be a valid string"),
            };
            inner.fail(vec![Seg::Key(k.to_string())], kind, msg, x);
        }
    }
    let clean = inner.errors.is_empty();
    for mut e in inner.errors {
        e.loc.insert(0, Seg::Key("structured_outputs".into()));
        r.errors.push(e);
    }
    clean.then_some(p)
}

/// The request's constraint, if it has one; type errors go to `r`, other
/// refusals are returned.
pub(super) fn read(r: &mut Reader) -> Result<Option<Constraint>, ApiError> {
    let rf = response_format(r);
    let given = structured_outputs(r);
    if !r.errors.is_empty() {
        return Ok(None);
    }
    if let Some(p) = &given
        && let Some(sentence) = p.post_init()
    {
        // `StructuredOutputsParams.__post_init__` raises
        // `VLLMValidationError` without a parameter: not wrapped by pydantic.
        return Err(plain_value_error(&sentence));
    }
    let (params, param) = match (given, rf) {
        (None, None) => return Ok(None),
        (Some(p), None) => (p, "structured_outputs"),
        (p, Some((i, value))) => {
            let mut p = p.unwrap_or_default();
            p.kinds[i] = value;
            // vLLM builds the merged parameters anew, and checks them again.
            if let Some(sentence) = p.post_init() {
                return Err(ApiError::bad_request(sentence).with_param("response_format"));
            }
            (p, "response_format")
        }
    };
    let refuse = |m: String| Err(ApiError::bad_request(m).with_param(param));
    let Some(i) = params.kinds.iter().position(Option::is_some) else { return Ok(None) };
    let value = params.kinds[i].clone().unwrap_or(Value::Null);
    let constraint = match KINDS[i] {
        "json" => {
            let schema = match value {
                Value::String(s) => match serde_json::from_str::<Value>(&s) {
                    Ok(v) => v,
                    Err(_) => return refuse("Invalid JSON grammar specification.".into()),
                },
                v => v,
            };
            if !schema.is_object() && !schema.is_boolean() {
                return refuse("The JSON schema must be an object or a boolean.".into());
            }
            Constraint::Json(schema)
        }
        "regex" => Constraint::Regex(value.as_str().unwrap_or_default().to_string()),
        "choice" => {
            let options: Vec<String> =
                value.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
            if options.is_empty() {
                return refuse("`choice` must list at least one string.".into());
            }
            Constraint::Choice(options)
        }
        "json_object" if value == Value::Bool(true) => Constraint::JsonObject,
        "json_object" => return Ok(None),
        "grammar" => {
            return refuse(
                "llmsim cannot generate text for a `grammar` (EBNF/Lark) constraint; use `json`, `regex` or `choice`."
                    .into(),
            );
        }
        _ => {
            return refuse(
                "llmsim cannot generate text for a `structural_tag` constraint; use `json`, `regex` or `choice`."
                    .into(),
            );
        }
    };
    match constraint.check() {
        Ok(()) => Ok(Some(constraint)),
        Err(e) => refuse(e.0),
    }
}
