//! JSON values that a JSON Schema accepts.
//!
//! Read of a schema: `type` (one or a list; `null` only when nothing else
//! is allowed), `enum`, `const`, `$ref` (local pointers: `#`, `#/$defs/X`,
//! `#/definitions/X`, as Pydantic emits them), `allOf` (merged), `anyOf` /
//! `oneOf` (one branch, not `null` when another is there), `properties`
//! with `required` (required ones always, others about half of the time),
//! `additionalProperties` (values for required names without a property),
//! `minProperties`, `items`, `prefixItems` (and the older array form of
//! `items`), `minItems` / `maxItems`, `uniqueItems`, `minLength` /
//! `maxLength`, `pattern` (`super::pattern`), `format` (`date`,
//! `date-time`, `time`, `email`, `uuid`, `uri`, `hostname`, `ipv4`, `ipv6`,
//! `duration`), `minimum` / `maximum` and the exclusive forms (numbers, and
//! draft 4's booleans), `multipleOf`. A schema without a type takes one
//! from its keywords (`properties`: object, `items`: array, ...), else it
//! is a string. `true` and `{}` give a word; `false` is refused.
//!
//! Without bounds an integer lies in [0, 100] and a number in [0, 100]
//! with two decimals; an array has one to four items; a string is a few
//! words. Caps are [`Limits`]'s.

use serde_json::{Map, Number, Value};

use super::{Limits, Refused, Rng, pattern};

/// Sample words for strings and keys.
const WORDS: &[&str] = &[
    "alpha", "amber", "apple", "atlas", "basil", "birch", "cedar", "cobalt", "coral", "delta", "ember", "falcon",
    "fern", "garnet", "harbor", "indigo", "iris", "jade", "juniper", "kestrel", "lagoon", "linen", "maple", "meadow",
    "nova", "oak", "onyx", "orbit", "pebble", "pine", "quartz", "raven", "river", "saffron", "sierra", "slate",
    "summit", "thistle", "tundra", "umber", "violet", "willow", "zephyr",
];

/// A value that `schema` accepts.
pub fn generate(schema: &Value, rng: &mut Rng) -> Result<Value, Refused> {
    let mut g = Gen { root: schema, rng, values: 0 };
    g.value(schema, 0)
}

/// Any JSON object: one to three word keys with words, integers or booleans.
pub fn any_object(rng: &mut Rng) -> Value {
    let mut out = Map::new();
    for _ in 0..1 + rng.below(3) {
        let key = word(rng).to_string();
        let v = match rng.below(3) {
            0 => Value::String(word(rng).to_string()),
            1 => Value::Number((rng.below(101) as u64).into()),
            _ => Value::Bool(rng.below(2) == 1),
        };
        out.insert(key, v);
    }
    Value::Object(out)
}

fn word(rng: &mut Rng) -> &'static str {
    WORDS[rng.below(WORDS.len())]
}

fn refuse<T>(msg: impl Into<String>) -> Result<T, Refused> {
    Err(Refused(msg.into()))
}

struct Gen<'a, 'r> {
    root: &'a Value,
    rng: &'r mut Rng,
    values: usize,
}

/// The keys that only describe a value.
const ANNOTATIONS: &[&str] = &["title", "description", "default", "examples", "$comment", "deprecated", "readOnly"];

impl Gen<'_, '_> {
    fn pressed(&self, depth: usize) -> bool {
        depth >= Limits::SOFT_DEPTH || self.values >= Limits::SOFT_VALUES
    }

    fn value(&mut self, schema: &Value, depth: usize) -> Result<Value, Refused> {
        if depth > Limits::DEPTH {
            return refuse(format!(
                "the schema nests deeper than {} levels (a recursive $ref that is always required?)",
                Limits::DEPTH
            ));
        }
        self.values += 1;
        if self.values > Limits::VALUES {
            return refuse(format!("the schema needs more than {} values, more than llmsim generates", Limits::VALUES));
        }
        let s = match schema {
            Value::Bool(true) => return Ok(Value::String(word(self.rng).to_string())),
            Value::Bool(false) => return refuse("a `false` schema accepts no value"),
            Value::Object(s) => s,
            _ => return refuse("a schema must be an object or a boolean"),
        };
        if s.contains_key("$ref") || s.contains_key("allOf") {
            let merged = self.flatten(s, depth)?;
            return self.value(&Value::Object(merged), depth + 1);
        }
        if let Some(c) = s.get("const") {
            return Ok(c.clone());
        }
        if let Some(options) = s.get("enum") {
            let Some(o) = options.as_array().filter(|o| !o.is_empty()) else {
                return refuse("`enum` must list at least one value");
            };
            // Only the options of the schema's `type`, when it has one.
            let fits: Vec<&Value> = o.iter().filter(|v| s.get("type").is_none_or(|t| of_type(v, t))).collect();
            if fits.is_empty() {
                return refuse("no `enum` value is of the schema's `type`");
            }
            return Ok(fits[self.rng.below(fits.len())].clone());
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = s.get(key) {
                let Some(branches) = branches.as_array().filter(|b| !b.is_empty()) else {
                    return refuse(format!("`{key}` must list at least one schema"));
                };
                let pick = self.branch(branches, depth);
                let mut rest = s.clone();
                rest.remove(key);
                let merged = merge(rest, &self.resolve(&branches[pick])?)?;
                return self.value(&Value::Object(merged), depth + 1);
            }
        }
        match self.kind(s, depth) {
            "object" => self.object(s, depth),
            "array" => self.array(s, depth),
            "integer" => integer(s, self.rng),
            "number" => number(s, self.rng),
            "boolean" => Ok(Value::Bool(self.rng.below(2) == 1)),
            "null" => Ok(Value::Null),
            _ => self.string(s),
        }
    }

    /// Which branch of an `anyOf`/`oneOf`: one that is not `null` (under
    /// pressure one that ends soonest: `null`, then a scalar).
    fn branch(&mut self, branches: &[Value], depth: usize) -> usize {
        let kind = |b: &Value| b.get("type").and_then(Value::as_str).map(str::to_string);
        if self.pressed(depth) {
            let ends = |b: &Value| match kind(b).as_deref() {
                Some("null") => 0,
                Some("object" | "array") | None => 2,
                Some(_) => 1,
            };
            return (0..branches.len()).min_by_key(|&i| ends(&branches[i])).unwrap_or(0);
        }
        let real: Vec<usize> = (0..branches.len()).filter(|&i| kind(&branches[i]).as_deref() != Some("null")).collect();
        if real.is_empty() { 0 } else { real[self.rng.below(real.len())] }
    }

    /// The schema's type: a listed one (not `null` when another is
    /// there), else one its keywords imply.
    fn kind(&mut self, s: &Map<String, Value>, depth: usize) -> &'static str {
        const KINDS: &[&str] = &["object", "array", "integer", "number", "boolean", "null", "string"];
        let known = |t: &str| KINDS.iter().copied().find(|k| *k == t);
        match s.get("type") {
            Some(Value::String(t)) => return known(t).unwrap_or("string"),
            Some(Value::Array(ts)) => {
                let names: Vec<&'static str> = ts.iter().filter_map(Value::as_str).filter_map(known).collect();
                let real: Vec<&'static str> = names.iter().copied().filter(|t| *t != "null").collect();
                if real.is_empty() {
                    return names.first().copied().unwrap_or("string");
                }
                if self.pressed(depth)
                    && let Some(scalar) = real.iter().find(|t| !matches!(**t, "object" | "array"))
                {
                    return scalar;
                }
                return real[self.rng.below(real.len())];
            }
            _ => {}
        }
        let has = |keys: &[&str]| keys.iter().any(|k| s.contains_key(*k));
        if has(&["properties", "required", "additionalProperties", "minProperties"]) {
            "object"
        } else if has(&["items", "prefixItems", "minItems", "maxItems"]) {
            "array"
        } else if has(&["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"]) {
            "number"
        } else {
            "string"
        }
    }

    /// The schema a `$ref` points at (local pointers only).
    fn target(&self, reference: &str) -> Result<&Value, Refused> {
        let Some(pointer) = reference.strip_prefix('#') else {
            return refuse(format!(
                "`$ref` {reference:?} is not a local reference (`#/...`); llmsim resolves no others"
            ));
        };
        let pointer = pointer.replace("~1", "/").replace("~0", "~");
        self.root.pointer(&pointer).ok_or_else(|| Refused(format!("`$ref` {reference:?} points at nothing")))
    }

    /// `s` with its `$ref` resolved (one step).
    fn resolve(&self, s: &Value) -> Result<Value, Refused> {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let mut rest = s.as_object().cloned().unwrap_or_default();
                rest.remove("$ref");
                match self.target(r)? {
                    Value::Object(t) => merge(t.clone(), &Value::Object(rest)).map(Value::Object),
                    other => Ok(other.clone()),
                }
            }
            None => Ok(s.clone()),
        }
    }

    /// `s` with its `$ref` and `allOf` merged into one schema (refs inside
    /// `allOf` members resolved, nested `allOf`s flattened).
    fn flatten(&self, s: &Map<String, Value>, depth: usize) -> Result<Map<String, Value>, Refused> {
        if depth > Limits::DEPTH {
            return refuse(format!("the schema's `$ref`/`allOf` chain is deeper than {} levels", Limits::DEPTH));
        }
        let mut own = s.clone();
        let reference = own.remove("$ref");
        let all = own.remove("allOf");
        let mut out = Map::new();
        if let Some(r) = reference {
            let Some(r) = r.as_str() else { return refuse("`$ref` must be a string") };
            match self.target(r)? {
                Value::Object(t) => out = self.flatten(t, depth + 1)?,
                Value::Bool(true) => {}
                _ => return refuse(format!("`$ref` {r:?} points at a schema that accepts no value")),
            }
        }
        if let Some(all) = all {
            let Some(all) = all.as_array() else { return refuse("`allOf` must be a list of schemas") };
            for member in all {
                match member {
                    Value::Object(m) => out = merge(out, &Value::Object(self.flatten(m, depth + 1)?))?,
                    Value::Bool(true) => {}
                    _ => return refuse("an `allOf` member accepts no value"),
                }
            }
        }
        merge(out, &Value::Object(own))
    }

    fn object(&mut self, s: &Map<String, Value>, depth: usize) -> Result<Value, Refused> {
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
        let empty = Map::new();
        let props = s.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let extra = s.get("additionalProperties").cloned().unwrap_or(Value::Bool(true));
        let mut out = Map::new();
        for (name, sub) in props {
            // Decide first, so whether one property is there does not shift
            // the values of the ones after it.
            let keep = required.contains(&name.as_str()) || (!self.pressed(depth) && self.rng.below(2) == 1);
            if keep {
                out.insert(name.clone(), self.value(sub, depth + 1)?);
            }
        }
        for name in required.iter().filter(|n| !props.contains_key(**n)) {
            out.insert((*name).to_string(), self.extra_value(&extra, name, depth)?);
        }
        let min = count(s, "minProperties").unwrap_or(0);
        if min > Limits::ITEMS {
            return refuse(format!("minProperties {min} is more than llmsim generates ({})", Limits::ITEMS));
        }
        let mut k = 0;
        while (out.len() as u64) < min {
            let spare = props.keys().find(|p| !out.contains_key(*p)).cloned();
            match spare {
                Some(p) => {
                    let v = self.value(&props[&p], depth + 1)?;
                    out.insert(p, v);
                }
                None => {
                    k += 1;
                    let name = format!("{}_{k}", word(self.rng));
                    let v = self.extra_value(&extra, &name, depth)?;
                    out.insert(name, v);
                }
            }
        }
        if let Some(max) = count(s, "maxProperties")
            && out.len() as u64 > max
        {
            return refuse("the object's required properties are more than its maxProperties");
        }
        Ok(Value::Object(out))
    }

    /// A value for a property the `properties` do not name.
    fn extra_value(&mut self, extra: &Value, name: &str, depth: usize) -> Result<Value, Refused> {
        match extra {
            Value::Bool(false) => {
                refuse(format!("`{name}` is required, but additionalProperties is false and no property describes it"))
            }
            Value::Object(_) => self.value(extra, depth + 1),
            _ => Ok(Value::String(word(self.rng).to_string())),
        }
    }

    fn array(&mut self, s: &Map<String, Value>, depth: usize) -> Result<Value, Refused> {
        // `prefixItems` (2020-12), or `items` as a list (drafts 4 to 2019).
        let (prefix, rest) = match (s.get("prefixItems"), s.get("items")) {
            (Some(Value::Array(p)), items) => (p.as_slice(), items),
            (_, Some(Value::Array(p))) => (p.as_slice(), s.get("additionalItems")),
            (_, items) => (&[][..], items),
        };
        let min = count(s, "minItems").unwrap_or(0);
        let max = count(s, "maxItems");
        if min > Limits::ITEMS {
            return refuse(format!("minItems {min} is more than llmsim generates ({})", Limits::ITEMS));
        }
        let closed = matches!(rest, Some(Value::Bool(false)));
        let max = match (max, closed) {
            (Some(m), true) => Some(m.min(prefix.len() as u64)),
            (None, true) => Some(prefix.len() as u64),
            (m, false) => m,
        };
        if max.is_some_and(|m| m < min) {
            return refuse(
                "the array's minItems is more than the items it may have (maxItems, or a closed prefixItems)",
            );
        }
        let base = if min == 0 && max != Some(0) { 1 } else { min };
        let hi = max.unwrap_or(base + 3).min(base + 3).max(base);
        let n = if self.pressed(depth) { min } else { base + self.rng.below((hi - base + 1) as usize) as u64 };
        let unique = s.get("uniqueItems").and_then(Value::as_bool).unwrap_or(false);
        let any = Value::Bool(true);
        let mut out: Vec<Value> = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            let item = prefix.get(i).or(rest).unwrap_or(&any);
            let mut v = self.value(item, depth + 1)?;
            let mut tries = 0;
            while unique && out.contains(&v) {
                tries += 1;
                if tries > 16 {
                    return refuse("could not make the array's items unique (uniqueItems)");
                }
                v = self.value(item, depth + 1)?;
            }
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn string(&mut self, s: &Map<String, Value>) -> Result<Value, Refused> {
        let min = count(s, "minLength").unwrap_or(0);
        let max = count(s, "maxLength");
        if min > Limits::STRING {
            return refuse(format!("minLength {min} is more than llmsim generates ({} characters)", Limits::STRING));
        }
        if max.is_some_and(|m| m < min) {
            return refuse("the string's minLength is more than its maxLength");
        }
        let fits = |t: &str| {
            let n = t.chars().count() as u64;
            n >= min && max.is_none_or(|m| n <= m)
        };
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            let hir = pattern::parse(p)?;
            for _ in 0..32 {
                let t = pattern::generate(&hir, self.rng)?;
                if fits(&t) {
                    return Ok(Value::String(t));
                }
            }
            return refuse(format!("found no string of the pattern {p:?} within minLength and maxLength"));
        }
        if let Some(f) = s.get("format").and_then(Value::as_str)
            && let Some(t) = format(f, self.rng)
            && fits(&t)
        {
            return Ok(Value::String(t));
        }
        let mut text = word(self.rng).to_string();
        while (text.chars().count() as u64) < min {
            text.push(' ');
            text.push_str(word(self.rng));
        }
        if let Some(max) = max {
            text = text.chars().take(max as usize).collect();
        }
        Ok(Value::String(text))
    }
}

/// Two schemas that must both hold, as one: properties merged (a name in
/// both becomes the `allOf` of the two), `required` joined, `type` and
/// `enum` intersected, lower bounds the larger and upper bounds the
/// smaller; any other keyword both set must be equal (else refused:
/// llmsim does not combine them). Annotations of `a` are kept.
fn merge(mut a: Map<String, Value>, b: &Value) -> Result<Map<String, Value>, Refused> {
    let Some(b) = b.as_object() else {
        return match b {
            Value::Bool(true) => Ok(a),
            _ => refuse("a schema to combine accepts no value"),
        };
    };
    for (k, v) in b {
        match (k.as_str(), a.get_mut(k)) {
            ("properties", Some(Value::Object(ap))) => {
                if let Some(bp) = v.as_object() {
                    for (name, sub) in bp {
                        let both = match ap.remove(name) {
                            Some(old) => serde_json::json!({"allOf": [old, sub]}),
                            None => sub.clone(),
                        };
                        ap.insert(name.clone(), both);
                    }
                }
            }
            ("required", Some(Value::Array(ar))) => {
                for r in v.as_array().into_iter().flatten() {
                    if !ar.contains(r) {
                        ar.push(r.clone());
                    }
                }
            }
            ("type", Some(old)) => *old = types_of_both(old, v)?,
            ("enum", Some(Value::Array(old))) => {
                let Some(new) = v.as_array() else { return refuse("`enum` must be a list") };
                old.retain(|x| new.contains(x));
                if old.is_empty() {
                    return refuse("the `enum`s of combined schemas share no value");
                }
            }
            (
                "minimum" | "exclusiveMinimum" | "minLength" | "minItems" | "minProperties",
                Some(old @ Value::Number(_)),
            ) if v.is_number() => {
                if v.as_f64() > old.as_f64() {
                    *old = v.clone();
                }
            }
            (
                "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties",
                Some(old @ Value::Number(_)),
            ) if v.is_number() => {
                if v.as_f64() < old.as_f64() {
                    *old = v.clone();
                }
            }
            (k, Some(_)) if ANNOTATIONS.contains(&k) => {}
            (k, Some(old)) if old != v => {
                return refuse(format!("combined schemas set `{k}` differently; llmsim does not combine them"));
            }
            _ => {
                a.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(a)
}

/// Whether `v` is of the type(s) `t` names.
fn of_type(v: &Value, t: &Value) -> bool {
    let is = |name: &str| match name {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    };
    match t {
        Value::String(n) => is(n),
        Value::Array(ns) => ns.iter().filter_map(Value::as_str).any(is),
        _ => true,
    }
}

/// The types both `a` and `b` allow (`integer` is a `number`), refused
/// when none.
fn types_of_both(a: &Value, b: &Value) -> Result<Value, Refused> {
    let list = |t: &Value| -> Vec<String> {
        match t {
            Value::String(s) => vec![s.clone()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            _ => Vec::new(),
        }
    };
    let (la, lb) = (list(a), list(b));
    let mut both = Vec::new();
    for t in &la {
        let allowed = lb.contains(t) || (t == "integer" && lb.iter().any(|x| x == "number"));
        if allowed && !both.contains(t) {
            both.push(t.clone());
        }
    }
    for t in &lb {
        if t == "integer" && la.iter().any(|x| x == "number") && !both.contains(t) {
            both.push(t.clone());
        }
    }
    match both.len() {
        0 => refuse(format!("combined schemas allow no common type ({a} and {b})")),
        1 => Ok(Value::String(both.remove(0))),
        _ => Ok(Value::Array(both.into_iter().map(Value::String).collect())),
    }
}

/// A value of a string `format`, or None for a format llmsim does not know.
fn format(f: &str, rng: &mut Rng) -> Option<String> {
    let mut n = |lo: usize, hi: usize| lo + rng.below(hi - lo + 1);
    Some(match f {
        "date" => format!("{:04}-{:02}-{:02}", n(1990, 2030), n(1, 12), n(1, 28)),
        "date-time" => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            n(1990, 2030),
            n(1, 12),
            n(1, 28),
            n(0, 23),
            n(0, 59),
            n(0, 59)
        ),
        "time" => format!("{:02}:{:02}:{:02}Z", n(0, 23), n(0, 59), n(0, 59)),
        "duration" => format!("P{}DT{}H", n(0, 30), n(0, 23)),
        "email" => format!("{}.{}@example.com", WORDS[n(0, WORDS.len() - 1)], WORDS[n(0, WORDS.len() - 1)]),
        "hostname" => format!("{}.example.com", WORDS[n(0, WORDS.len() - 1)]),
        "uri" => format!("https://example.com/{}", WORDS[n(0, WORDS.len() - 1)]),
        "ipv4" => format!("{}.{}.{}.{}", n(1, 254), n(0, 255), n(0, 255), n(1, 254)),
        "ipv6" => format!("2001:db8::{:x}:{:x}", n(0, 0xffff), n(1, 0xffff)),
        "uuid" => {
            let a = rng.draw();
            let b = rng.draw();
            format!(
                "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xfff,
                8 + (b >> 62),
                (b >> 48) & 0xfff,
                b & 0xffff_ffff_ffff
            )
        }
        _ => return None,
    })
}

/// `[lo, hi]` of a number schema: `minimum`/`maximum`, the exclusive forms
/// (numbers, or draft 4's booleans beside `minimum`/`maximum`) moved in by
/// `step`; one bound alone spans 100 from it, none gives [0, 100].
fn bounds(s: &Map<String, Value>, step: f64) -> Result<(f64, f64), Refused> {
    let num = |k: &str| s.get(k).and_then(Value::as_f64).filter(|v| v.is_finite());
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
    let mut lo = num("minimum").map(|m| if flag("exclusiveMinimum") { (m + step).max(m.next_up()) } else { m });
    let mut hi = num("maximum").map(|m| if flag("exclusiveMaximum") { (m - step).min(m.next_down()) } else { m });
    // Past 2^53 a step vanishes in rounding: at least the next float.
    if let Some(e) = num("exclusiveMinimum") {
        let above = (e + step).max(e.next_up());
        lo = Some(lo.map_or(above, |l| l.max(above)));
    }
    if let Some(e) = num("exclusiveMaximum") {
        let below = (e - step).min(e.next_down());
        hi = Some(hi.map_or(below, |h| h.min(below)));
    }
    let (lo, hi) = match (lo, hi) {
        (Some(lo), Some(hi)) => (lo, hi),
        (Some(lo), None) => (lo, lo + 100.0),
        (None, Some(hi)) => (hi - 100.0, hi),
        (None, None) => (0.0, 100.0),
    };
    if hi < lo {
        return refuse("the number's minimum is above its maximum");
    }
    Ok((lo, hi))
}

/// A count keyword (`minItems`, `maxLength`, ...): a whole number, or a
/// float such as `1e12` (saturated).
fn count(s: &Map<String, Value>, k: &str) -> Option<u64> {
    let v = s.get(k)?;
    v.as_u64().or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

/// A positive `multipleOf`, if the schema has one.
fn multiple_of(s: &Map<String, Value>) -> Result<Option<f64>, Refused> {
    match s.get("multipleOf").map(Value::as_f64) {
        None => Ok(None),
        Some(Some(m)) if m > 0.0 && m.is_finite() => Ok(Some(m)),
        Some(_) => refuse("multipleOf must be a positive number"),
    }
}

fn integer(s: &Map<String, Value>, rng: &mut Rng) -> Result<Value, Refused> {
    let (lo, hi) = bounds(s, 1.0)?;
    // Saturating casts: a bound past i64 (1e308) becomes i64's own.
    let (lo, hi) = (lo.ceil() as i64, hi.floor() as i64);
    if hi < lo {
        return refuse("no integer lies between the schema's bounds");
    }
    let step = match multiple_of(s)? {
        None => 1i128,
        Some(m) if m.fract() == 0.0 && m < 9.0e15 => m as i128,
        Some(_) => return refuse("llmsim generates integers only for a whole-number multipleOf"),
    };
    // Multiples k * step in [lo, hi], in i128 so no span overflows.
    let first = i128::from(lo).div_euclid(step) + i128::from(i128::from(lo).rem_euclid(step) != 0);
    let last = i128::from(hi).div_euclid(step);
    if last < first {
        return refuse("no multiple of multipleOf lies between the schema's bounds");
    }
    let span = (last - first + 1) as u128;
    let k = first + (u128::from(rng.draw()) % span) as i128;
    Ok(Value::Number(i64::try_from(k * step).unwrap_or(hi).into()))
}

/// A number: a multiple of `multipleOf`, else one with at most two decimals.
fn number(s: &Map<String, Value>, rng: &mut Rng) -> Result<Value, Refused> {
    let strict = s.get("exclusiveMinimum").is_some() || s.get("exclusiveMaximum").is_some();
    let (lo, hi) = match bounds(s, 0.01) {
        // An open interval narrower than 0.01: its middle.
        Err(_) if strict => {
            let (a, b) = bounds(s, 0.0)?;
            let mid = a / 2.0 + b / 2.0;
            if mid <= a || mid >= b {
                return refuse("no number lies between the schema's exclusive bounds");
            }
            return Number::from_f64(mid).map(Value::Number).ok_or_else(|| Refused("no finite number fits".into()));
        }
        other => other?,
    };
    if let Some(m) = multiple_of(s)? {
        let (first, last) = ((lo / m).ceil(), (hi / m).floor());
        if last < first || !first.is_finite() || !last.is_finite() {
            return refuse("no multiple of multipleOf lies between the schema's bounds");
        }
        let span = (last - first).min(1.0e15) as u64 + 1;
        let k = first + (rng.draw() % span) as f64;
        return Number::from_f64(k * m).map(Value::Number).ok_or_else(|| Refused("no finite number fits".into()));
    }
    let cents = ((hi - lo) * 100.0).floor().max(0.0);
    // Two decimals while the cents are countable exactly (2^53); beyond,
    // a point between the bounds, mixed so no sum overflows to infinity.
    let v = if cents < 9.0e15 {
        ((lo * 100.0).ceil() + (rng.draw() % (cents as u64 + 1)) as f64) / 100.0
    } else {
        let f = (rng.draw() >> 11) as f64 / (1u64 << 53) as f64;
        lo * (1.0 - f) + hi * f
    };
    Number::from_f64(v.clamp(lo, hi)).map(Value::Number).ok_or_else(|| Refused("no finite number fits".into()))
}
