//! Reading benchmark JSON the way Python writes it.
//!
//! The tools we read are Python programs, and Python's `json` module writes
//! things strict JSON parsers refuse: bare `Infinity`, `-Infinity` and `NaN`
//! tokens (vLLM's `burstiness` when the user passed `inf`, SGLang's default
//! `request_rate`), and several objects in one file separated by newlines
//! (`vllm bench serve --append-result`, SGLang's JSONL). This module reads
//! such a file as a stream ([`QuoteBare`] quotes the bare tokens as the
//! bytes go by) into a list of [`Doc`]s, and offers lenient number readers
//! (numbers, numeric strings, `"inf"`).
//!
//! A `--save-detailed` file is mostly its per-request arrays (`itls`: one
//! number per streamed chunk): a [`Doc`] holds those as plain `f64`s (8
//! bytes a number, where a JSON tree takes 32 and the text about 20) and
//! skips the ones nothing reads (`generated_texts`), so a file of hundreds
//! of megabytes is read in about its own size of memory.

use std::io::{self, Read};
use std::path::Path;

use serde_json::Value;

use llmsim_scenario::config::ConfigError;
use llmsim_scenario::input::{InputError, Kind};

mod doc;
mod quote;

pub use doc::{Doc, Errors, PerRequest, Ragged};
pub use quote::QuoteBare;

/// Every top-level JSON value in `text`: one object, several objects
/// separated by whitespace, or (flattened) a top-level array of objects.
/// For small files (a prediction, a summary); measured files with
/// per-request arrays are read with [`read_docs`].
pub fn documents(text: &str, file: &Path) -> Result<Vec<Value>, ConfigError> {
    let clean = io::BufReader::new(QuoteBare::new(text.as_bytes()));
    let mut out = Vec::new();
    for item in serde_json::Deserializer::from_reader(clean).into_iter::<Value>() {
        match item.map_err(|e| json_error(file, Kind::Measured, e))? {
            Value::Array(items) if items.iter().all(Value::is_object) => out.extend(items),
            v => out.push(v),
        }
    }
    if out.is_empty() {
        return Err(ConfigError::new(file, "", "the file is empty: expected a JSON result"));
    }
    Ok(out)
}

/// Every top-level JSON value read from `reader` as it is read (see
/// [`documents`]), each a [`Doc`]; `kind` is the file's, for the message
/// of a read past its limit.
pub fn read_docs<R: Read>(reader: R, file: &Path, kind: Kind) -> Result<Vec<Doc>, ConfigError> {
    // serde_json reads an `io::Read` a byte at a time: the adapter's output
    // goes through a buffer of its own.
    let clean = io::BufReader::with_capacity(64 << 10, QuoteBare::new(io::BufReader::new(reader)));
    let mut out = Vec::new();
    for item in serde_json::Deserializer::from_reader(clean).into_iter::<doc::Top>() {
        match item.map_err(|e| json_error(file, kind, e))? {
            doc::Top::One(d) => out.push(d),
            doc::Top::Many(ds) => out.extend(ds),
        }
    }
    if out.is_empty() {
        return Err(ConfigError::new(file, "", "the file is empty: expected a JSON result"));
    }
    Ok(out)
}

/// A JSON error: an IO error is the input's (its limit), any other the
/// JSON's own, at its line and column.
pub(crate) fn json_error(file: &Path, kind: Kind, e: serde_json::Error) -> ConfigError {
    if e.is_io() {
        return InputError::from_io(file, kind, &io::Error::from(e)).into();
    }
    let msg = format!("not valid JSON: {}", strip_position(&e.to_string()));
    ConfigError::new(file, format!("column {}", e.column()), msg).at_line(Some(e.line()))
}

/// serde_json ends its messages with "at line L column C"; we report the
/// position ourselves.
pub(crate) fn strip_position(msg: &str) -> &str {
    msg.rfind(" at line ").map_or(msg, |i| &msg[..i])
}

/// A number written as a JSON number, a numeric string (`"1"`, vLLM
/// metadata), or a non-finite spelling (`"inf"`, `"Infinity"`, `"NaN"`).
pub fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => num_str(s),
        _ => None,
    }
}

/// A number written as a string (see [`num`]).
pub fn num_str(s: &str) -> Option<f64> {
    match s.trim() {
        "inf" | "Infinity" | "+inf" => Some(f64::INFINITY),
        "-inf" | "-Infinity" => Some(f64::NEG_INFINITY),
        "nan" | "NaN" => Some(f64::NAN),
        t => t.parse().ok(),
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
mod tests;
