//! Reading benchmark JSON the way Python writes it.
//!
//! The tools we read are Python programs, and Python's `json` module writes
//! things strict JSON parsers refuse: bare `Infinity`, `-Infinity` and `NaN`
//! tokens (vLLM's `burstiness` when the user passed `inf`, SGLang's default
//! `request_rate`), and several objects in one file separated by newlines
//! (`vllm bench serve --append-result`, SGLang's JSONL). This module turns
//! such a file into a list of `serde_json::Value`s and offers lenient number
//! readers (numbers, numeric strings, `"inf"`).

use std::path::Path;

use serde_json::Value;

use crate::config::ConfigError;

/// The bare tokens Python writes for non-finite floats, longest first so
/// `-Infinity` wins over a `-` followed by `Infinity`.
const BARE_TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];

/// Every top-level JSON value in `text`: one object, several objects
/// separated by whitespace, or (flattened) a top-level array of objects.
pub fn documents(text: &str, file: &Path) -> Result<Vec<Value>, ConfigError> {
    let clean = quote_bare_tokens(text);
    let mut out = Vec::new();
    for item in serde_json::Deserializer::from_str(&clean).into_iter::<Value>() {
        match item {
            Ok(Value::Array(items)) if items.iter().all(Value::is_object) => out.extend(items),
            Ok(v) => out.push(v),
            Err(e) => {
                let msg = format!("not valid JSON: {}", strip_position(&e.to_string()));
                return Err(ConfigError::new(file, format!("column {}", e.column()), msg).at_line(Some(e.line())));
            }
        }
    }
    if out.is_empty() {
        return Err(ConfigError::new(file, "", "the file is empty: expected a JSON result"));
    }
    Ok(out)
}

/// serde_json ends its messages with "at line L column C"; we report the
/// position ourselves.
fn strip_position(msg: &str) -> &str {
    msg.rfind(" at line ").map_or(msg, |i| &msg[..i])
}

/// Rewrites bare `Infinity`, `-Infinity` and `NaN` outside strings as the
/// strings `"Infinity"`, `"-Infinity"` and `"NaN"`, which [`num`] reads back
/// as floats. Lines and columns before each token are unchanged.
pub fn quote_bare_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if let Some(tok) = BARE_TOKENS.iter().find(|t| rest.starts_with(**t)) {
            out.push('"');
            out.push_str(tok);
            out.push('"');
            rest = &rest[tok.len()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A number written as a JSON number, a numeric string (`"1"`, vLLM
/// metadata), or a non-finite spelling (`"inf"`, `"Infinity"`, `"NaN"`).
pub fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.trim() {
            "inf" | "Infinity" | "+inf" => Some(f64::INFINITY),
            "-inf" | "-Infinity" => Some(f64::NEG_INFINITY),
            "nan" | "NaN" => Some(f64::NAN),
            t => t.parse().ok(),
        },
        _ => None,
    }
}

/// `obj[key]` as a number.
pub fn num_at(obj: &Value, key: &str) -> Option<f64> {
    obj.get(key).and_then(num)
}

/// `obj[key]` as a finite number.
pub fn finite_at(obj: &Value, key: &str) -> Option<f64> {
    num_at(obj, key).filter(|x| x.is_finite())
}

/// The value at a dotted path (`metrics.request_totals.successful`).
pub fn at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(obj, |v, key| v.get(key))
}

/// A list of numbers at `key`; `None` if absent or not all numbers.
pub fn num_list(obj: &Value, key: &str) -> Option<Vec<f64>> {
    obj.get(key)?.as_array()?.iter().map(num).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_non_finite_tokens_become_strings_outside_strings_only() {
        let text = r#"{"a": Infinity, "b": -Infinity, "c": NaN, "d": "NaN Infinity \" Infinity"}"#;
        let docs = documents(text, Path::new("x.json")).unwrap();
        let d = &docs[0];
        assert_eq!(num_at(d, "a"), Some(f64::INFINITY));
        assert_eq!(num_at(d, "b"), Some(f64::NEG_INFINITY));
        assert!(num_at(d, "c").unwrap().is_nan());
        assert_eq!(d["d"], Value::String("NaN Infinity \" Infinity".into()));
    }

    #[test]
    fn several_objects_and_top_level_arrays_are_split_into_documents() {
        let docs = documents("{\"a\":1}\n{\"a\":2}", Path::new("x")).unwrap();
        assert_eq!(docs.len(), 2);
        let docs = documents("[{\"a\":1},{\"a\":2},{\"a\":3}]", Path::new("x")).unwrap();
        assert_eq!(docs.len(), 3);
    }

    #[test]
    fn broken_json_names_the_file_and_line() {
        let e = documents("{\"a\": 1,\n \"b\": }", Path::new("r.json")).unwrap_err().to_string();
        assert!(e.starts_with("r.json:2: column"), "{e}");
        assert!(e.contains("not valid JSON"), "{e}");
        let e = documents("  \n", Path::new("r.json")).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
    }

    #[test]
    fn numbers_may_be_written_as_strings() {
        let v: Value = serde_json::json!({"tp": "1", "rate": "inf", "x": 2.5, "s": "abc"});
        assert_eq!(num_at(&v, "tp"), Some(1.0));
        assert_eq!(num_at(&v, "rate"), Some(f64::INFINITY));
        assert_eq!(finite_at(&v, "rate"), None);
        assert_eq!(num_at(&v, "x"), Some(2.5));
        assert_eq!(num_at(&v, "s"), None);
    }
}
