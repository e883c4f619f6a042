//! Tool-call arguments made up from the tool's JSON schema.
//!
//! A scripted tool call (`tool_call:` in responses.yml) may give some
//! arguments; the rest come from the `parameters` schema the client sent
//! with the tool, so a call always has the fields a client's code looks
//! for. Values are a fixed function of the schema and a hash (the request's
//! seed, the entry and the prompt), so the same request gets the same call.
//!
//! What is read of a schema: `type` (one or a list, `null` picked last),
//! `enum` and `const`, `properties` with `required` (required properties
//! always, others about half of the time), `items` with
//! `minItems`/`maxItems`, `minimum`/`maximum` (and the exclusive forms),
//! `minLength`/`maxLength`, `anyOf`/`oneOf` (one branch), `default` is not
//! used (a made-up call shows made-up values). Anything else is ignored;
//! a schema without a type gives a string. Past a nesting depth of 8 values
//! are `null`, so a recursive schema cannot run away.
//!
//! [`python_json`] writes a value as Python's `json.dumps(..., ensure_ascii=False)`
//! does (`", "` and `": "` separators), the text vLLM puts in a call's
//! `arguments`.

use serde_json::{Map, Number, Value};

use super::choice::{Stream, WORDS};
use crate::util::finalise;

/// Deepest nesting generated; deeper values are `null`.
const MAX_DEPTH: usize = 8;

/// The arguments of a call to a tool with `schema` (its `parameters`):
/// `given` (the script's) first, then every other property the schema
/// generates. Not an object schema (or none): `given` alone.
pub fn arguments(schema: Option<&Value>, given: &Map<String, Value>, hash: u64) -> Map<String, Value> {
    let mut rng = Stream(finalise(hash));
    let mut out = given.clone();
    if let Some(Value::Object(made)) = schema.map(|s| value(s, &mut rng, 0)) {
        for (k, v) in made {
            out.entry(k).or_insert(v);
        }
    }
    out
}

/// A value that fits `schema`.
pub fn value(schema: &Value, rng: &mut Stream, depth: usize) -> Value {
    let Some(s) = schema.as_object() else { return Value::String(word(rng)) };
    if depth >= MAX_DEPTH {
        return Value::Null;
    }
    if let Some(c) = s.get("const") {
        return c.clone();
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && !options.is_empty()
    {
        return options[rng.below(options.len())].clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = s.get(key)
            && !branches.is_empty()
        {
            // Prefer a branch that is not `null`, as a model fills a field.
            let real: Vec<&Value> = branches.iter().filter(|b| type_of(b) != Some("null")).collect();
            let pick = if real.is_empty() { &branches[0] } else { real[rng.below(real.len())] };
            return value(pick, rng, depth + 1);
        }
    }
    let kind = type_of(schema).unwrap_or(if s.contains_key("properties") { "object" } else { "string" });
    match kind {
        "object" => object(s, rng, depth),
        "array" => array(s, rng, depth),
        "integer" => integer(s, rng),
        "number" => number(s, rng),
        "boolean" => Value::Bool(rng.below(2) == 1),
        "null" => Value::Null,
        _ => string(s, rng),
    }
}

/// The schema's type: the first of a list that is not `null`.
fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t.as_str()),
        Value::Array(ts) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            names.iter().find(|t| **t != "null").or(names.first()).copied()
        }
        _ => None,
    }
}

fn object(s: &Map<String, Value>, rng: &mut Stream, depth: usize) -> Value {
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
    let mut out = Map::new();
    if let Some(Value::Object(props)) = s.get("properties") {
        for (name, sub) in props {
            // Decide first, so whether a property is there does not shift
            // the values of the ones after it.
            let keep = required.contains(&name.as_str()) || rng.below(2) == 1;
            let v = value(sub, rng, depth + 1);
            if keep {
                out.insert(name.clone(), v);
            }
        }
    }
    Value::Object(out)
}

fn array(s: &Map<String, Value>, rng: &mut Stream, depth: usize) -> Value {
    let lo = s.get("minItems").and_then(Value::as_u64).unwrap_or(1).min(16);
    let hi = s.get("maxItems").and_then(Value::as_u64).unwrap_or(3).clamp(lo, 16);
    let n = lo + rng.below((hi - lo + 1) as usize) as u64;
    let item = s.get("items").cloned().unwrap_or(Value::Null);
    Value::Array((0..n).map(|_| value(&item, rng, depth + 1)).collect())
}

/// The bounds of a number schema: `[lo, hi]`, from `minimum`/`maximum`
/// (or the exclusive forms, moved in by `step`), else `[0, 100]`.
fn bounds(s: &Map<String, Value>, step: f64) -> (f64, f64) {
    let num = |k: &str| s.get(k).and_then(Value::as_f64).filter(|v| v.is_finite());
    let lo = num("minimum").or(num("exclusiveMinimum").map(|v| v + step));
    let hi = num("maximum").or(num("exclusiveMaximum").map(|v| v - step));
    match (lo, hi) {
        (Some(lo), Some(hi)) if hi >= lo => (lo, hi),
        (Some(lo), _) => (lo, lo + 100.0),
        (None, Some(hi)) => (hi - 100.0, hi),
        _ => (0.0, 100.0),
    }
}

fn integer(s: &Map<String, Value>, rng: &mut Stream) -> Value {
    let (lo, hi) = bounds(s, 1.0);
    // Saturating casts: a bound past i64 (e.g. 1e308) becomes i64's own.
    let (lo, hi) = (lo.ceil() as i64, hi.floor() as i64);
    if hi < lo {
        return Value::Number(lo.into());
    }
    // In i128 so the widest span, i64::MIN..=i64::MAX, neither overflows
    // nor becomes a remainder by zero.
    let span = (i128::from(hi) - i128::from(lo) + 1) as u128;
    let v = i128::from(lo) + (u128::from(rng.next()) % span) as i128;
    Value::Number(i64::try_from(v).unwrap_or(hi).into())
}

/// A number with at most two decimals (Python writes it the same way).
fn number(s: &Map<String, Value>, rng: &mut Stream) -> Value {
    let (lo, hi) = bounds(s, 0.01);
    let cents = ((hi - lo) * 100.0).floor().max(0.0);
    // Two decimals while the cents are countable exactly (2^53); beyond,
    // a point between the bounds, mixed so no sum overflows to infinity.
    let v = if cents < 9.0e15 {
        ((lo * 100.0).ceil() + (rng.next() % (cents as u64 + 1)) as f64) / 100.0
    } else {
        let f = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        lo * (1.0 - f) + hi * f
    };
    Number::from_f64(v.clamp(lo, hi)).map_or(Value::Null, Value::Number)
}

fn string(s: &Map<String, Value>, rng: &mut Stream) -> Value {
    let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0).min(1024) as usize;
    let max = s.get("maxLength").and_then(Value::as_u64).map(|m| m as usize);
    let mut text = word(rng);
    while text.chars().count() < min {
        text.push(' ');
        text.push_str(&word(rng));
    }
    if let Some(max) = max {
        text = text.chars().take(max).collect();
    }
    Value::String(text)
}

fn word(rng: &mut Stream) -> String {
    WORDS[rng.below(WORDS.len())].to_string()
}

/// A hash of byte strings (FNV-1a 64, a 0xFF byte after each part, then
/// the SplitMix64 finaliser): what call ids and made-up calls are seeded by.
pub fn hash_of(parts: &[&[u8]]) -> u64 {
    finalise(crate::util::fnv1a(parts.iter().flat_map(|part| part.iter().copied().chain([0xFF]))))
}

/// `value` as Python's `json.dumps(value, ensure_ascii=False)` writes it
/// (the writer structured output uses too).
pub fn python_json(value: &Value) -> String {
    crate::content::structured::json_text(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn made(schema: Value, seed: u64) -> Value {
        value(&schema, &mut Stream(finalise(seed)), 0)
    }

    #[test]
    fn values_follow_the_schema_and_repeat_for_the_same_seed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "temp": {"type": "number", "minimum": -10.5, "maximum": -10.0},
                "tags": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2},
                "kind": {"const": "forecast"},
            },
            "required": ["city", "days", "unit", "temp", "tags", "kind"],
        });
        for seed in 0..50 {
            let v = made(schema.clone(), seed);
            assert!(v["city"].as_str().is_some_and(|c| WORDS.contains(&c)), "{v}");
            assert!((1..=7).contains(&v["days"].as_i64().unwrap()), "{v}");
            assert!(["celsius", "fahrenheit"].contains(&v["unit"].as_str().unwrap()), "{v}");
            let t = v["temp"].as_f64().unwrap();
            assert!((-10.5..=-10.0).contains(&t) && ((t * 100.0).round() - t * 100.0).abs() < 1e-9, "{v}");
            assert_eq!(v["tags"].as_array().unwrap().len(), 2);
            assert!(v["tags"][0].is_boolean());
            assert_eq!(v["kind"], "forecast");
            assert_eq!(made(schema.clone(), seed), v, "same seed, same value");
        }
        let days: std::collections::BTreeSet<i64> =
            (0..200).map(|s| made(schema.clone(), s)["days"].as_i64().unwrap()).collect();
        assert_eq!(days.len(), 7, "every day from 1 to 7 comes up: {days:?}");
    }

    #[test]
    fn optional_properties_come_and_go_but_required_ones_stay() {
        let schema = json!({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a"]});
        let with_b = (0..100).filter(|&s| made(schema.clone(), s).get("b").is_some()).count();
        assert!((20..=80).contains(&with_b), "about half have b: {with_b}");
        assert!((0..100).all(|s| made(schema.clone(), s).get("a").is_some()));
    }

    #[test]
    fn given_arguments_win_and_the_rest_come_from_the_schema() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer", "minimum": 3, "maximum": 3}}, "required": ["city", "n"]});
        let mut given = Map::new();
        given.insert("city".into(), json!("Paris"));
        let args = arguments(Some(&schema), &given, 9);
        assert_eq!(Value::Object(args), json!({"city": "Paris", "n": 3}));
        assert_eq!(Value::Object(arguments(None, &given, 9)), json!({"city": "Paris"}));
    }

    #[test]
    fn bounds_at_the_ends_of_f64_give_a_value_inside_them() {
        // 1e308 once made the span overflow into a remainder by zero.
        for seed in 0..50 {
            let i = made(json!({"type": "integer", "minimum": -1e308, "maximum": 1e308}), seed);
            assert!(i.is_i64(), "{i}");
            let i = made(json!({"type": "integer", "maximum": 1e308}), seed).as_f64().unwrap();
            assert!(i <= 1e308, "{i}");
            let n = made(json!({"type": "number", "minimum": -1e308, "maximum": 1e308}), seed).as_f64().unwrap();
            assert!(n.is_finite() && (-1e308..=1e308).contains(&n), "{n}");
            let n = made(json!({"type": "number", "minimum": 1e308}), seed).as_f64().unwrap();
            assert!(n.is_finite() && n >= 1e308, "{n}");
            let n = made(json!({"type": "number", "exclusiveMaximum": -1e308}), seed).as_f64().unwrap();
            assert!(n.is_finite() && n <= -1e308, "{n}");
        }
    }

    #[test]
    fn odd_schemas_give_a_value_and_never_run_away() {
        assert!(made(json!({"type": ["null", "integer"]}), 1).is_i64());
        assert!(made(json!({"anyOf": [{"type": "null"}, {"type": "boolean"}]}), 1).is_boolean());
        assert!(made(json!(true), 1).is_string());
        // A schema that contains itself nine deep stops at the limit with null.
        let mut deep = json!({"type": "integer"});
        for _ in 0..10 {
            deep = json!({"type": "object", "properties": {"x": deep}, "required": ["x"]});
        }
        let v = made(deep, 1);
        let mut at = &v;
        for _ in 0..8 {
            at = &at["x"];
        }
        assert_eq!(*at, Value::Null, "{v}");
    }

    #[test]
    fn python_json_uses_pythons_separators_and_keeps_unicode() {
        let v = json!({"b": [1, 2.5, 3.0], "a": "é\"", "c": {"d": null, "e": true}});
        assert_eq!(python_json(&v), r#"{"a": "é\"", "b": [1, 2.5, 3.0], "c": {"d": null, "e": true}}"#);
    }
}
