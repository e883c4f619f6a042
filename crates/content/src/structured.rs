//! Structured output: text that satisfies the constraint a request puts on
//! its answer, as a model under vLLM's structured-output backends writes it.
//!
//! A [`Constraint`] is one of the kinds llmsim generates: a JSON Schema
//! ([`schema`]), any JSON object, a regular expression ([`pattern`]) or a
//! choice among strings. [`Constraint::text`] gives the answer's text, a
//! fixed function of the constraint and a hash (the request's seed, prompt
//! and choice), so the same request gets the same bytes. The server then
//! treats it as any answer: it is tokenized, priced and streamed as those
//! tokens, and `max_tokens` can cut it (finish reason `length`).
//!
//! JSON is written as a model under vLLM writes it by default, one line
//! with `", "` and `": "` separators ([`json_text`], Python's `json.dumps`
//! layout). Object keys come out sorted: the request's schema reaches
//! llmsim as a parsed map, which keeps no order.
//!
//! Everything is bounded: nesting, values per answer, items, string length
//! and regex output have caps ([`Limits`]), and a constraint that cannot be
//! met within them (or at all: `false`, `minimum` above `maximum`) is
//! [`Refused`] with a sentence for the client, never a panic or a hang.

pub mod pattern;
pub mod schema;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

use llmsim_core::util::finalise;

/// What a request constrains its answer to.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// A JSON Schema (`response_format` `json_schema`, `structured_outputs.json`).
    Json(Value),
    /// Any JSON object (`response_format` `json_object`, `structured_outputs.json_object`).
    JsonObject,
    /// A string the regular expression matches in full (`structured_outputs.regex`).
    Regex(String),
    /// One of the strings (`structured_outputs.choice`).
    Choice(Vec<String>),
}

/// Why a constraint cannot be generated: a sentence for a 400.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The caps every generator keeps to.
pub struct Limits;

impl Limits {
    /// Deepest nesting of a JSON value (a recursive `$ref` that is always
    /// required runs into it and is refused).
    pub const DEPTH: usize = 64;
    /// Past this depth optional properties are left out, arrays take their
    /// fewest items and `anyOf` prefers a branch that ends, so a recursive
    /// schema closes.
    pub const SOFT_DEPTH: usize = 6;
    /// Most JSON values in one answer.
    pub const VALUES: usize = 20_000;
    /// Past this many values, the same as past [`Limits::SOFT_DEPTH`].
    pub const SOFT_VALUES: usize = 2_000;
    /// Most `minItems` / `minProperties` honoured.
    pub const ITEMS: u64 = 1_024;
    /// Most `minLength` honoured, in characters.
    pub const STRING: u64 = 8_192;
    /// Most bytes a regex match may take.
    pub const TEXT: usize = 65_536;
}

/// Every choice a generator makes comes from one seeded SplitMix64 stream.
pub use llmsim_core::util::Stream as Rng;

/// The stream of a structured answer seeded by `hash`.
pub fn rng(hash: u64) -> Rng {
    Rng(finalise(hash ^ 0x5354_5255_4354_5552))
}

impl Constraint {
    /// Whether llmsim can generate the constraint: it generates once and
    /// gives the reason when it cannot.
    pub fn check(&self) -> Result<(), Refused> {
        if let Constraint::Regex(re) = self {
            pattern::parse(re)?;
        }
        self.text(0).map(|_| ())
    }

    /// The answer's text for `hash`.
    pub fn text(&self, hash: u64) -> Result<String, Refused> {
        let mut rng = rng(hash);
        match self {
            Constraint::Json(s) => json_checked(s, &mut rng),
            Constraint::JsonObject => Ok(json_text(&schema::any_object(&mut rng))),
            Constraint::Regex(re) => pattern::generate(&pattern::parse(re)?, &mut rng),
            Constraint::Choice(options) if options.is_empty() => Err(Refused("`choice` lists no string".into())),
            Constraint::Choice(options) => Ok(options[rng.below(options.len())].clone()),
        }
    }
}

/// Tries per answer before a schema the generator cannot satisfy is refused.
const ATTEMPTS: usize = 8;

/// A value of `schema` that a full JSON Schema validator accepts: the
/// generator reads the common keywords, and its combinations (`allOf`,
/// `enum` against `type`, bounds of merged members) can miss; a value the
/// validator refuses is drawn again, and after [`ATTEMPTS`] the schema is
/// refused. A schema the validator cannot compile is left to the
/// generator, which refuses what it cannot read.
fn json_checked(schema: &Value, rng: &mut Rng) -> Result<String, Refused> {
    let validator = jsonschema::options().should_validate_formats(true).build(schema).ok();
    let mut why = String::new();
    for _ in 0..ATTEMPTS {
        let v = schema::generate(schema, rng)?;
        match validator.as_ref().map(|val| val.validate(&v)) {
            None | Some(Ok(())) => return Ok(json_text(&v)),
            Some(Err(e)) => why = e.to_string(),
        }
    }
    Err(Refused(format!(
        "llmsim could not make up a value this schema accepts in {ATTEMPTS} tries (the last: {why}); \
         simplify the schema"
    )))
}

/// `value` as Python's `json.dumps(value, ensure_ascii=False)` writes it
/// (`", "` and `": "` separators, floats as Python prints them).
pub fn json_text(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Python's `repr` of a finite float: `3.0`, `2.5` (JSON has no others).
fn py_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e16 { format!("{v:.1}") } else { format!("{v:?}") }
}

fn write(v: &Value, out: &mut String) {
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => write_object(m, out),
        Value::Number(n) if n.is_f64() => out.push_str(&py_float(n.as_f64().unwrap_or(0.0))),
        other => out.push_str(&other.to_string()),
    }
}

fn write_object(m: &Map<String, Value>, out: &mut String) {
    out.push('{');
    for (i, (k, x)) in m.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&Value::String(k.clone()).to_string());
        out.push_str(": ");
        write(x, out);
    }
    out.push('}');
}
