//! Stage two of responses.yml: every rule checked once, building the
//! [`Responses`] the server consults. Messages name the key path, the value
//! and what is allowed; nothing that loads can fail later.

use std::collections::BTreeMap;
use std::path::Path;

use regex::Regex;

use super::prefilter::{self, Prefilter};
use super::raw::{RawEntry, RawResponses, RawSynthetic};
use super::template::{LAST_USER_MESSAGE, MODEL, Template};
use super::{AnswerKind, ArgSpec, DEFAULT_SEED, Entry, MAX_SYNTHETIC_TOKENS, Matcher, Responses, ToolCallSpec};
use llmsim_scenario::config::check::Check;
use llmsim_scenario::config::{self, ConfigError};

/// Builds the responses from their raw form. `file` names it in errors.
pub fn responses(raw: RawResponses, file: &Path) -> Result<Responses, ConfigError> {
    let ck = Check { file };
    let mut ids = BTreeMap::new();
    let entries = raw
        .responses
        .into_iter()
        .enumerate()
        .map(|(i, e)| entry(&ck, i, e, &mut ids))
        .collect::<Result<Vec<_>, _>>()?;
    let d = raw.default;
    let default = answer(
        &ck,
        "default",
        AnswerFields { content: d.content, variants: d.variants, synthetic: d.synthetic, tool_call: None },
        None,
    )?;
    Ok(Responses { seed: raw.seed.unwrap_or(DEFAULT_SEED), entries, default })
}

/// The answer keys of an entry or of `default`.
struct AnswerFields {
    content: Option<String>,
    variants: Option<Vec<String>>,
    synthetic: Option<RawSynthetic>,
    tool_call: Option<llmsim_scenario::yaml::Value>,
}

fn entry(ck: &Check, i: usize, e: RawEntry, ids: &mut BTreeMap<String, usize>) -> Result<Entry, ConfigError> {
    let path = format!("responses[{i}]");
    let id = id(ck, &path, e.id.as_deref(), i, ids)?;
    let matcher = matcher(ck, &path, &e)?;
    let regex = match &matcher {
        Matcher::Regex { regex, .. } => Some(regex),
        _ => None,
    };
    let fields =
        AnswerFields { content: e.content, variants: e.variants, synthetic: e.synthetic, tool_call: e.tool_call };
    let answer = answer(ck, &path, fields, regex)?;
    Ok(Entry { id, matcher, answer })
}

/// The entry's id, or `responses[i]`; unique, and never "default".
fn id(
    ck: &Check,
    path: &str,
    given: Option<&str>,
    i: usize,
    ids: &mut BTreeMap<String, usize>,
) -> Result<String, ConfigError> {
    let key = format!("{path}.id");
    let id = match given {
        None => path.to_string(),
        Some(s) if s.trim().is_empty() => {
            return Err(ck.err(&key, "an empty id is not allowed: give a name or leave id out"));
        }
        Some("default") => {
            return Err(ck.err(&key, "\"default\" is reserved for the answer when nothing matches: pick another id"));
        }
        Some(s) => s.to_string(),
    };
    if let Some(first) = ids.insert(id.clone(), i) {
        return Err(ck.err(&key, format!("\"{id}\" is already the id of responses[{first}]: ids must be unique")));
    }
    Ok(id)
}

fn matcher(ck: &Check, path: &str, e: &RawEntry) -> Result<Matcher, ConfigError> {
    let given: Vec<&str> = [
        ("exact", e.exact.is_some()),
        ("regex", e.regex.is_some()),
        ("starts_with", e.starts_with.is_some()),
        ("contains", e.contains.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    match given.as_slice() {
        [] => {
            return Err(ck.err(
                path,
                "no matcher: give one of exact, regex, starts_with, contains (the answer when nothing matches is \
                 `default`)",
            ));
        }
        [_] => {}
        [a, b, ..] => return Err(ck.err(path, format!("both {a} and {b}: give exactly one matcher per entry"))),
    }
    let ignore_case = e.ignore_case.unwrap_or(false);
    let fold = |s: &str| if ignore_case { prefilter::lowercase(s) } else { s.to_string() };
    if let Some(re) = &e.regex {
        if e.ignore_case.is_some() {
            return Err(ck.err(
                &format!("{path}.ignore_case"),
                "not allowed with regex: start the regex with (?i) to ignore case",
            ));
        }
        return regex(ck, &format!("{path}.regex"), re);
    }
    if let Some(v) = &e.exact {
        let patterns = exact(ck, &format!("{path}.exact"), v)?;
        return Ok(Matcher::Exact { patterns: patterns.iter().map(|s| fold(s)).collect(), ignore_case });
    }
    if let Some(s) = &e.starts_with {
        let key = format!("{path}.starts_with");
        not_empty(ck, &key, s)?;
        if s.trim_start() != s {
            return Err(never_matches(ck, &key, s));
        }
        return Ok(Matcher::StartsWith { pattern: fold(s), ignore_case });
    }
    let s = e.contains.as_deref().unwrap_or_default();
    not_empty(ck, &format!("{path}.contains"), s)?;
    Ok(Matcher::Contains { pattern: fold(s), ignore_case })
}

/// One string or a non-empty list of strings, none with surrounding spaces.
fn exact(ck: &Check, key: &str, v: &llmsim_scenario::yaml::Value) -> Result<Vec<String>, ConfigError> {
    use llmsim_scenario::yaml::Value;
    let one = |key: &str, v: &Value| match v {
        Value::String(s) if s.trim() != s => Err(never_matches(ck, key, s)),
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Err(ck.err(key, format!("expected a string, got the number {n}: quote it, \"{n}\""))),
        other => Err(ck.err(key, format!("expected a string, got {}", config::describe_value(other)))),
    };
    match v {
        Value::Sequence(items) if items.is_empty() => {
            Err(ck.err(key, "an empty list is not allowed: give at least one message to match"))
        }
        Value::Sequence(items) => items.iter().enumerate().map(|(j, item)| one(&format!("{key}[{j}]"), item)).collect(),
        Value::Mapping(_) | Value::Null | Value::Tagged(_) => {
            Err(ck.err(key, format!("expected a string or a list of strings, got {}", config::describe_value(v))))
        }
        single => one(key, single).map(|s| vec![s]),
    }
}

fn regex(ck: &Check, key: &str, pattern: &str) -> Result<Matcher, ConfigError> {
    let regex = Regex::new(pattern).map_err(|e| ck.err(key, format!("'{pattern}' is not a valid regex: {e}")))?;
    if let Some(name) = regex.capture_names().flatten().find(|n| [LAST_USER_MESSAGE, MODEL].contains(n)) {
        return Err(ck.err(
            key,
            format!("the group name `{name}` is reserved for the template variable {{{name}}}: rename the group"),
        ));
    }
    // The same syntax the regex crate just accepted; if it ever differed,
    // no prefilter only costs speed.
    let prefilter = regex_syntax::parse(pattern).ok().and_then(|hir| Prefilter::of(&hir));
    Ok(Matcher::Regex { regex, prefilter })
}

fn not_empty(ck: &Check, key: &str, s: &str) -> Result<(), ConfigError> {
    if s.is_empty() {
        return Err(ck.err(key, "an empty string matches every message: use `default` for a catch-all answer"));
    }
    Ok(())
}

fn never_matches(ck: &Check, key: &str, s: &str) -> ConfigError {
    ck.err(
        key,
        format!("{s:?} starts or ends with whitespace, which can never match: the message is trimmed before matching"),
    )
}

/// The answer of an entry (`regex` gives its named groups) or of `default`.
fn answer(ck: &Check, path: &str, f: AnswerFields, regex: Option<&Regex>) -> Result<AnswerKind, ConfigError> {
    let given: Vec<&str> = [
        ("content", f.content.is_some()),
        ("variants", f.variants.is_some()),
        ("synthetic", f.synthetic.is_some()),
        ("tool_call", f.tool_call.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if let [a, b, ..] = given.as_slice() {
        return Err(ck.err(path, format!("both {a} and {b}: give exactly one answer per entry")));
    }
    let template = |key: String, src: &str| -> Result<Template, ConfigError> {
        if src.is_empty() {
            return Err(ck.err(&key, "an empty answer is not allowed: a response has at least one token"));
        }
        Template::parse(src, regex).map_err(|m| ck.err(&key, m))
    };
    if let Some(c) = f.content {
        return Ok(AnswerKind::Content(template(format!("{path}.content"), &c)?));
    }
    if let Some(vs) = f.variants {
        if vs.is_empty() {
            return Err(ck.err(&format!("{path}.variants"), "an empty list is not allowed: give at least one variant"));
        }
        let ts = vs.iter().enumerate().map(|(j, v)| template(format!("{path}.variants[{j}]"), v));
        return Ok(AnswerKind::Variants(ts.collect::<Result<_, _>>()?));
    }
    if let Some(t) = f.tool_call {
        return tool_call(ck, &format!("{path}.tool_call"), &t, regex);
    }
    match f.synthetic {
        Some(s) => synthetic(ck, &format!("{path}.synthetic.tokens"), s),
        None => Err(ck.err(path, "no answer: give one of content, variants, synthetic, tool_call")),
    }
}

/// `tool_call: NAME` or `tool_call: {name: NAME, arguments: {key: value}}`;
/// string argument values are templates, others are taken as JSON.
fn tool_call(
    ck: &Check,
    key: &str,
    v: &llmsim_scenario::yaml::Value,
    regex: Option<&Regex>,
) -> Result<AnswerKind, ConfigError> {
    use llmsim_scenario::yaml::Value;
    let tool_name = |key: &str, v: Option<&Value>| match v {
        Some(Value::String(s)) if !s.trim().is_empty() && s.trim() == s => Ok(s.clone()),
        Some(Value::String(s)) => {
            Err(ck.err(key, format!("{s:?} is not allowed: a tool name, not empty, without surrounding spaces")))
        }
        Some(other) => {
            Err(ck.err(key, format!("expected a tool name (a string), got {}", config::describe_value(other))))
        }
        None => Err(ck.err(key, "missing: the name of the tool to call")),
    };
    let map = match v {
        Value::String(_) => {
            return Ok(AnswerKind::ToolCall(ToolCallSpec { name: tool_name(key, Some(v))?, arguments: Vec::new() }));
        }
        Value::Mapping(m) => m,
        other => {
            return Err(ck.err(
                key,
                format!("expected a tool name or {{name, arguments}}, got {}", config::describe_value(other)),
            ));
        }
    };
    for k in map.keys() {
        if !matches!(k.as_str(), Some("name" | "arguments")) {
            let shown = k.as_str().map_or_else(|| config::describe_value(k), str::to_string);
            return Err(ck.err(&format!("{key}.{shown}"), "unknown key: a tool call has `name` and `arguments`"));
        }
    }
    let name = tool_name(&format!("{key}.name"), map.get("name"))?;
    let mut arguments = Vec::new();
    match map.get("arguments") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(args)) => {
            for (k, val) in args {
                let Some(arg) = k.as_str() else {
                    return Err(ck.err(
                        &format!("{key}.arguments"),
                        format!("argument names are strings, got {}", config::describe_value(k)),
                    ));
                };
                let at = format!("{key}.arguments.{arg}");
                let spec = match val {
                    Value::String(s) => ArgSpec::Template(Template::parse(s, regex).map_err(|m| ck.err(&at, m))?),
                    other => ArgSpec::Json(serde_json::to_value(other).map_err(|e| {
                        ck.err(&at, format!("cannot be written as JSON ({e}): use strings, numbers, booleans, lists and mappings with string keys"))
                    })?),
                };
                arguments.push((arg.to_string(), spec));
            }
        }
        Some(other) => {
            return Err(ck.err(
                &format!("{key}.arguments"),
                format!("expected a mapping of argument names to values, got {}", config::describe_value(other)),
            ));
        }
    }
    Ok(AnswerKind::ToolCall(ToolCallSpec { name, arguments }))
}

fn synthetic(ck: &Check, key: &str, s: RawSynthetic) -> Result<AnswerKind, ConfigError> {
    let [lo, hi] = s.tokens;
    let bound = |j: usize, v: i64| -> Result<u64, ConfigError> {
        match u64::try_from(v) {
            Ok(n @ 1..=MAX_SYNTHETIC_TOKENS) => Ok(n),
            _ => Err(ck.err(
                &format!("{key}[{j}]"),
                format!("{v} is not allowed: must be a whole number from 1 to {MAX_SYNTHETIC_TOKENS}"),
            )),
        }
    };
    let (lo, hi) = (bound(0, lo)?, bound(1, hi)?);
    if hi < lo {
        return Err(ck.err(key, format!("[{lo}, {hi}] is not allowed: the upper bound must be >= the lower")));
    }
    Ok(AnswerKind::Synthetic { lo, hi })
}
