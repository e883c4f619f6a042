//! Tool-call arguments made up from the tool's JSON schema.
//!
//! A scripted tool call (`tool_call:` in responses.yml) may give some
//! arguments; the rest come from the `parameters` schema the client sent
//! with the tool, so a call always has the fields a client's code looks
//! for. Values are a fixed function of the schema and a hash (the request's
//! seed, the entry and the prompt), so the same request gets the same call.
//!
//! The values come from structured output's schema generator
//! ([`crate::structured::schema`]): every keyword it reads
//! (`$ref`/`$defs`, `multipleOf`, `format`, `pattern`, combinators, ...)
//! holds for a made-up call as for a `response_format` answer, required
//! properties always and others about half of the time. A schema the
//! generator refuses (impossible, or past its caps) gives the script's
//! arguments alone, as does a schema that is not an object's.
//!
//! [`python_json`] writes a value as Python's `json.dumps(..., ensure_ascii=False)`
//! does (`", "` and `": "` separators), the text vLLM puts in a call's
//! `arguments`.

use serde_json::{Map, Value};

use crate::structured::schema;
use llmsim_core::util::{Stream, finalise};

/// The arguments of a call to a tool with `schema` (its `parameters`):
/// `given` (the script's) first, then every other property the schema
/// generates. Not an object schema (or none, or one the generator
/// refuses): `given` alone.
pub fn arguments(parameters: Option<&Value>, given: &Map<String, Value>, hash: u64) -> Map<String, Value> {
    let mut out = given.clone();
    if let Some(Ok(Value::Object(made))) = parameters.map(|s| schema::generate(s, &mut Stream(finalise(hash)))) {
        for (k, v) in made {
            out.entry(k).or_insert(v);
        }
    }
    out
}

/// A hash of byte strings (FNV-1a 64, a 0xFF byte after each part, then
/// the SplitMix64 finaliser): what call ids and made-up calls are seeded by.
pub fn hash_of(parts: &[&[u8]]) -> u64 {
    finalise(llmsim_core::util::fnv1a(parts.iter().flat_map(|part| part.iter().copied().chain([0xFF]))))
}

/// `value` as Python's `json.dumps(value, ensure_ascii=False)` writes it
/// (the writer structured output uses too).
pub fn python_json(value: &Value) -> String {
    crate::structured::json_text(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn made(schema: Value, seed: u64) -> Value {
        Value::Object(arguments(Some(&schema), &Map::new(), seed))
    }

    #[test]
    fn values_follow_the_schema_and_repeat_for_the_same_seed() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "temp": {"type": "number", "minimum": -10.5, "maximum": -10.0},
                "tags": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2},
                "kind": {"const": "forecast"},
                "step": {"type": "integer", "multipleOf": 5, "minimum": 1, "maximum": 19},
                "place": {"$ref": "#/$defs/Place"},
            },
            "$defs": {"Place": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                "required": ["zip"]}},
            "required": ["city", "days", "unit", "temp", "tags", "kind", "step", "place"],
        });
        for seed in 0..50 {
            let v = made(schema.clone(), seed);
            assert!(v["city"].as_str().is_some_and(|c| !c.is_empty()), "{v}");
            assert!((1..=7).contains(&v["days"].as_i64().unwrap()), "{v}");
            assert!(["celsius", "fahrenheit"].contains(&v["unit"].as_str().unwrap()), "{v}");
            let t = v["temp"].as_f64().unwrap();
            assert!((-10.5..=-10.0).contains(&t), "{v}");
            assert_eq!(v["tags"].as_array().unwrap().len(), 2);
            assert!(v["tags"][0].is_boolean());
            assert_eq!(v["kind"], "forecast");
            // Kept since the generator is structured output's: multipleOf and
            // $ref were ignored before (a step of 3, a place of any shape).
            assert!([5, 10, 15].contains(&v["step"].as_i64().unwrap()), "{v}");
            let zip = v["place"]["zip"].as_str().unwrap();
            assert!(zip.len() == 5 && zip.bytes().all(|b| b.is_ascii_digit()), "{v}");
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
        let one = |s: Value, seed| {
            made(json!({"type": "object", "properties": {"x": s}, "required": ["x"]}), seed)["x"].clone()
        };
        for seed in 0..50 {
            let i = one(json!({"type": "integer", "minimum": -1e308, "maximum": 1e308}), seed);
            assert!(i.is_i64() || i.is_u64() || i.as_f64().is_some_and(f64::is_finite), "{i}");
            let n = one(json!({"type": "number", "minimum": -1e308, "maximum": 1e308}), seed).as_f64().unwrap();
            assert!(n.is_finite() && (-1e308..=1e308).contains(&n), "{n}");
            let n = one(json!({"type": "number", "minimum": 1e308}), seed).as_f64().unwrap();
            assert!(n.is_finite() && n >= 1e308, "{n}");
        }
    }

    #[test]
    fn an_impossible_or_runaway_schema_leaves_the_scripts_arguments_alone() {
        let mut given = Map::new();
        given.insert("city".into(), json!("Paris"));
        let impossible = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}},
                                "required": ["n"]});
        assert_eq!(Value::Object(arguments(Some(&impossible), &given, 1)), json!({"city": "Paris"}));
        // Always-required recursion has no finite value.
        let runaway = json!({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}},
                              "required": ["next"]}}, "$ref": "#/$defs/N"});
        assert_eq!(Value::Object(arguments(Some(&runaway), &given, 1)), json!({"city": "Paris"}));
        // Not an object schema: the script's alone.
        assert_eq!(Value::Object(arguments(Some(&json!({"type": "integer"})), &given, 1)), json!({"city": "Paris"}));
    }

    #[test]
    fn python_json_uses_pythons_separators_and_keeps_unicode() {
        let v = json!({"b": [1, 2.5, 3.0], "a": "é\"", "c": {"d": null, "e": true}});
        assert_eq!(python_json(&v), r#"{"a": "é\"", "b": [1, 2.5, 3.0], "c": {"d": null, "e": true}}"#);
    }
}
