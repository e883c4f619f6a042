//! The generators checked by independent validators: the `jsonschema`
//! crate for JSON Schema (formats on) and the `regex` crate for full
//! matches, over many seeds.

use serde_json::{Value, json};

use super::*;

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::options().should_validate_formats(true).build(schema).expect("a valid schema")
}

/// Every seed's text parses as JSON that the schema accepts.
fn always_valid(schema: Value, seeds: u64) -> Vec<Value> {
    let v = validator(&schema);
    let c = Constraint::Json(schema.clone());
    (0..seeds)
        .map(|seed| {
            let text = c.text(seed).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let errors: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "seed {seed}: {text} breaks the schema: {errors:?}");
            value
        })
        .collect()
}

/// What the openai SDK's `.parse()` sends for a Pydantic model with a
/// nested model, a list of them, an enum and an optional field (strict mode:
/// everything required, no additional properties).
fn pydantic() -> Value {
    json!({
        "$defs": {
            "Color": {"enum": ["red", "green", "blue"], "title": "Color", "type": "string"},
            "Address": {
                "properties": {
                    "street": {"title": "Street", "type": "string"},
                    "zip": {"pattern": "^[0-9]{5}$", "title": "Zip", "type": "string"}
                },
                "required": ["street", "zip"], "title": "Address", "type": "object", "additionalProperties": false
            }
        },
        "properties": {
            "name": {"title": "Name", "type": "string"},
            "age": {"maximum": 120, "minimum": 0, "title": "Age", "type": "integer"},
            "color": {"$ref": "#/$defs/Color"},
            "home": {"$ref": "#/$defs/Address"},
            "addresses": {"items": {"$ref": "#/$defs/Address"}, "title": "Addresses", "type": "array"},
            "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Nickname"}
        },
        "required": ["name", "age", "color", "home", "addresses", "nickname"],
        "title": "Person", "type": "object", "additionalProperties": false
    })
}

#[test]
fn a_pydantic_model_gets_every_field_filled_validly() {
    let values = always_valid(pydantic(), 300);
    let colors: std::collections::BTreeSet<&str> = values.iter().filter_map(|v| v["color"].as_str()).collect();
    assert_eq!(colors.len(), 3, "every enum value comes up: {colors:?}");
    assert!(values.iter().all(|v| v["nickname"].is_string()), "a model fills an optional field");
    assert!(values.iter().all(|v| !v["addresses"].as_array().unwrap().is_empty()));
}

#[test]
fn the_same_hash_gives_the_same_bytes_and_others_differ() {
    let c = Constraint::Json(pydantic());
    assert_eq!(c.text(42).unwrap(), c.text(42).unwrap());
    let distinct: std::collections::BTreeSet<String> = (0..20).map(|s| c.text(s).unwrap()).collect();
    assert!(distinct.len() > 15, "{}", distinct.len());
}

#[test]
fn text_is_one_line_with_pythons_separators() {
    let t = Constraint::Json(json!({"type": "object", "properties": {"a": {"const": 1}, "b": {"const": [true, null]}},
        "required": ["a", "b"]}))
    .text(1)
    .unwrap();
    assert_eq!(t, "{\"a\": 1, \"b\": [true, null]}");
}

#[test]
fn recursive_schemas_close() {
    let tree = json!({
        "$defs": {"Node": {"type": "object", "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
        }, "required": ["value", "children"]}},
        "$ref": "#/$defs/Node"
    });
    always_valid(tree, 100);
    // Pydantic's self-reference through an optional field.
    let linked = json!({
        "$defs": {"Item": {"type": "object", "properties": {
            "name": {"type": "string"},
            "next": {"anyOf": [{"$ref": "#/$defs/Item"}, {"type": "null"}]}
        }, "required": ["name", "next"]}},
        "$ref": "#/$defs/Item"
    });
    always_valid(linked, 100);
}

#[test]
fn numbers_keep_every_bound() {
    let schema = json!({"type": "object", "properties": {
        "a": {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 6},
        "b": {"type": "integer", "multipleOf": 7, "minimum": -20, "maximum": 20},
        "c": {"type": "number", "multipleOf": 0.25, "minimum": 1, "maximum": 2},
        "d": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.001},
        "e": {"type": "integer", "minimum": -1e308, "maximum": 1e308},
        "f": {"type": "number", "minimum": 1e308},
        "g": {"type": "number", "exclusiveMaximum": -1e308},
        "i": {"type": "number"}
    }, "required": ["a", "b", "c", "d", "e", "f", "g", "i"]});
    let values = always_valid(schema, 200);
    let a: std::collections::BTreeSet<i64> = values.iter().map(|v| v["a"].as_i64().unwrap()).collect();
    assert_eq!(a, [4, 5].into_iter().collect(), "only 4 and 5 lie strictly between 3 and 6");
    // Draft 4's boolean form of the exclusive bounds.
    let draft4 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 5,
        "exclusiveMinimum": true, "maximum": 7, "exclusiveMaximum": true});
    assert!(always_valid(draft4, 50).iter().all(|v| v == 6));
}

#[test]
fn strings_keep_lengths_patterns_and_formats() {
    let schema = json!({"type": "object", "properties": {
        "short": {"type": "string", "maxLength": 3},
        "long": {"type": "string", "minLength": 40, "maxLength": 45},
        "exact": {"type": "string", "minLength": 0, "maxLength": 0},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,5}$"},
        "loose": {"type": "string", "pattern": "ab+c"},
        "date": {"type": "string", "format": "date"},
        "when": {"type": "string", "format": "date-time"},
        "time": {"type": "string", "format": "time"},
        "mail": {"type": "string", "format": "email"},
        "id": {"type": "string", "format": "uuid"},
        "uri": {"type": "string", "format": "uri"},
        "ip": {"type": "string", "format": "ipv4"},
        "ip6": {"type": "string", "format": "ipv6"},
        "host": {"type": "string", "format": "hostname"},
        "other": {"type": "string", "format": "a-format-nobody-knows"}
    }, "required": ["short", "long", "exact", "code", "loose", "date", "when", "time", "mail", "id", "uri", "ip",
        "ip6", "host", "other"]});
    always_valid(schema, 200);
}

#[test]
fn arrays_objects_and_combinators() {
    let schema = json!({"type": "object", "properties": {
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false,
            "minItems": 2},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c", "d"]}, "minItems": 2, "maxItems": 4,
            "uniqueItems": true},
        "none": {"type": "array", "maxItems": 0},
        "both": {"allOf": [{"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            {"properties": {"y": {"type": "string"}}, "required": ["y"]}]},
        "one": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        "fixed": {"const": {"k": [1, 2]}},
        "maybe": {"type": ["string", "null"]},
        "nothing": {"type": "null"},
        "flag": {"type": "boolean"},
        "open": {"type": "object", "additionalProperties": {"type": "integer"}, "required": ["p", "q"],
            "minProperties": 4},
        "any": {},
        "yes": true,
        "typeless": {"properties": {"z": {"type": "integer"}}, "required": ["z"]}
    }, "required": ["pair", "tags", "none", "both", "one", "fixed", "maybe", "nothing", "flag", "open", "any",
        "yes", "typeless"]});
    always_valid(schema, 200);
    // Drafts 4 to 2019: `items` as a list, then `additionalItems`.
    let old = json!({"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "array",
        "items": [{"type": "boolean"}, {"type": "integer"}], "additionalItems": false, "minItems": 1});
    always_valid(old, 50);
}

#[test]
fn json_object_and_choice() {
    let object = validator(&json!({"type": "object"}));
    for seed in 0..100 {
        let v: Value = serde_json::from_str(&Constraint::JsonObject.text(seed).unwrap()).unwrap();
        assert!(object.is_valid(&v) && !v.as_object().unwrap().is_empty(), "{v}");
    }
    let c = Constraint::Choice(vec!["yes".into(), "no".into(), "maybe later".into()]);
    let seen: std::collections::BTreeSet<String> = (0..100).map(|s| c.text(s).unwrap()).collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(Constraint::Choice(Vec::new()).check().is_err());
}

#[test]
fn regex_output_matches_in_full() {
    let patterns = [
        r"\d{3}-\d{4}",
        r"(cat|dog)s?",
        r"[a-z]+@[a-z]+\.(com|org)",
        r"^[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})*$",
        r".{5}",
        r"\w+\s\w+",
        r"(?i)hello",
        r"[^a-z]{4}",
        r"\p{Greek}{3}",
        r"(a|b)*c?",
        r"x{0}y",
        r"",
    ];
    for p in patterns {
        let full = regex::Regex::new(&format!("^(?:{p})$")).unwrap();
        let c = Constraint::Regex(p.to_string());
        c.check().unwrap();
        for seed in 0..200 {
            let t = c.text(seed).unwrap();
            assert!(full.is_match(&t), "{p:?} does not match {t:?} in full");
        }
    }
}

#[track_caller]
fn refusal(c: Constraint) -> String {
    c.check().expect_err("refused").0
}

#[test]
fn impossible_or_huge_constraints_are_refused_not_generated() {
    let r = refusal(Constraint::Regex("a(".into()));
    assert!(r.starts_with("Failed to transform regex into a grammar: "), "{r}");
    assert!(!r.contains('\n'), "{r}");
    assert!(refusal(Constraint::Regex("a{1000}{1000}".into())).contains("longer than llmsim generates"));
    // Bytes that are not UTF-8 do not parse; an empty class matches nothing.
    assert!(refusal(Constraint::Regex("(?s-u:[\\x80-\\xff])".into())).starts_with("Failed to transform regex"));
    assert!(refusal(Constraint::Regex("a[^\\s\\S]".into())).contains("no character"));
    assert!(refusal(Constraint::Json(json!(false))).contains("accepts no value"));
    assert!(refusal(Constraint::Json(json!({"type": "array", "minItems": 1_000_000}))).contains("minItems 1000000"));
    assert!(refusal(Constraint::Json(json!({"type": "string", "minLength": 1e12}))).contains("minLength"));
    assert!(refusal(Constraint::Json(json!({"type": "integer", "minimum": 5, "maximum": 4}))).contains("above"));
    assert!(
        refusal(Constraint::Json(json!({"type": "integer", "minimum": 1, "maximum": 6, "multipleOf": 7})))
            .contains("multiple")
    );
    assert!(refusal(Constraint::Json(json!({"$ref": "#/$defs/Nope"}))).contains("points at nothing"));
    assert!(refusal(Constraint::Json(json!({"$ref": "https://example.com/s.json"}))).contains("not a local reference"));
    // A model that requires itself has no finite value.
    let forever = json!({"$defs": {"A": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
        "required": ["a"]}}, "$ref": "#/$defs/A"});
    assert!(refusal(Constraint::Json(forever)).contains("deeper than"));
    let cycle = json!({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"});
    assert!(refusal(Constraint::Json(cycle)).contains("deeper than"));
    // Wide and deep at once: many values, refused by count, not run.
    let mut wide = json!({"type": "integer"});
    for _ in 0..5 {
        wide = json!({"type": "array", "items": wide, "minItems": 1000});
    }
    assert!(refusal(Constraint::Json(wide)).contains("values"));
    let closed = json!({"type": "object", "required": ["x"], "additionalProperties": false});
    assert!(refusal(Constraint::Json(closed)).contains("additionalProperties is false"));
}

#[test]
fn combined_schemas_are_intersected_or_refused_never_answered_wrong() {
    // Found by the server's fuzz slice: `allOf` of an object and an integer
    // gave an integer (the last member's type won).
    let impossible = json!({"allOf": [{"type": "object", "properties": {}}, {"type": "integer"}]});
    assert!(Constraint::Json(impossible).text(1).is_err());
    let impossible = json!({"allOf": [{"type": "boolean"}, {"type": "integer"}]});
    assert!(Constraint::Json(impossible).text(1).is_err());
    // Bounds of both members hold: an integer from 5 to 7.
    let both = json!({"allOf": [{"type": "number", "minimum": 5}, {"type": "integer", "maximum": 7}]});
    for seed in 0..100 {
        let v: Value = serde_json::from_str(&Constraint::Json(both.clone()).text(seed).unwrap()).unwrap();
        let n = v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"));
        assert!((5..=7).contains(&n), "{v}");
    }
    // Enums are intersected, and filtered by the type.
    let e = json!({"allOf": [{"enum": ["a", "b", 3]}, {"enum": ["b", 3, "c"]}], "type": "string"});
    for seed in 0..50 {
        assert_eq!(Constraint::Json(e.clone()).text(seed).unwrap(), "\"b\"");
    }
    assert!(Constraint::Json(json!({"type": "integer", "enum": ["a", "b"]})).text(1).is_err());
}

#[test]
fn a_value_the_generator_gets_wrong_is_drawn_again_or_refused() {
    // `not` is a keyword the generator does not read: the validator catches
    // the values it breaks, so every answer served satisfies the schema.
    let s = json!({"type": "integer", "minimum": 1, "maximum": 3, "not": {"const": 2}});
    let v = validator(&s);
    for seed in 0..100 {
        if let Ok(text) = Constraint::Json(s.clone()).text(seed) {
            let x: Value = serde_json::from_str(&text).unwrap();
            assert!(v.is_valid(&x), "{x}");
        }
    }
    // A schema no generated value meets is refused, naming the tries.
    let never = json!({"type": "integer", "minimum": 1, "maximum": 1, "not": {"const": 1}});
    let e = Constraint::Json(never).text(1).unwrap_err();
    assert!(e.0.contains("could not make up a value this schema accepts in 8 tries"), "{e}");
}
