//! Every key path a scenario accepts, so `--set` can say "unknown key path:
//! did you mean ..." and "expected a whole number" before anything runs.
//!
//! The list is derived from the raw serde structs themselves, not kept by
//! hand: a tracing [`serde::Deserializer`] walks each type and records the
//! field names, enum variants and leaf types the derived code asks for. A
//! field added to a raw struct is therefore in the list the moment it
//! compiles. Values the raw structs read through `serde_yaml::Value` (a
//! hardware profile name or mapping, the one-key arrival enum, a length or a
//! distribution) are opaque to the tracer; [`OPAQUE`] says how to expand
//! each, and a test fails if the tracer finds an opaque key that table lacks.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use crate::yaml::Value;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};

use super::raw::{RawArrivals, RawDist, RawHardware, RawModel, RawScenario, RawSecondsDist};

/// What a key holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Integer,
    Number,
    Text,
    Bool,
    List,
    /// A mapping of further keys (a struct, or a one-key enum).
    Mapping,
    /// `hardware`: a profile name or an inline mapping.
    NameOrMapping,
    /// `model`: a model name or a mapping.
    ModelOrMapping,
    /// An interconnect figure: a number or a mapping by GPU count.
    NumberOrMapping,
    /// A token length: a whole number or a distribution mapping.
    CountOrMapping,
    /// A duration: a number of seconds or a distribution mapping.
    SecondsOrMapping,
    /// Read through `serde_yaml::Value` and not yet expanded (see [`OPAQUE`]).
    Opaque,
}

impl Kind {
    /// Whether `v` has the right shape for this key; `null` (unset) always does.
    pub fn accepts(self, v: &Value) -> bool {
        match (self, v) {
            (_, Value::Null) => true,
            (Kind::Integer | Kind::CountOrMapping, Value::Number(n)) => is_whole(n),
            (Kind::Number, Value::Number(_)) => true,
            (Kind::Text, Value::String(_)) | (Kind::Bool, Value::Bool(_)) => true,
            (Kind::List, Value::Sequence(_)) | (Kind::Mapping, Value::Mapping(_)) => true,
            (Kind::NameOrMapping | Kind::ModelOrMapping, Value::String(_) | Value::Mapping(_)) => true,
            (Kind::NumberOrMapping, Value::Number(_) | Value::Mapping(_)) => true,
            (Kind::CountOrMapping, Value::Mapping(_)) => true,
            (Kind::SecondsOrMapping, Value::Number(_) | Value::Mapping(_)) => true,
            (Kind::Opaque, _) => true,
            _ => false,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Kind::Integer => "a whole number",
            Kind::Number => "a number",
            Kind::Text => "a string",
            Kind::Bool => "true or false",
            Kind::List => "a list",
            Kind::Mapping => "a mapping",
            Kind::NameOrMapping => "a hardware profile name or a mapping",
            Kind::ModelOrMapping => "a model name (scenarios/models/) or a mapping",
            Kind::NumberOrMapping => "a number or a mapping by GPU count ({2: 248, 4: 289})",
            Kind::CountOrMapping => "a whole number of tokens or a distribution mapping",
            Kind::SecondsOrMapping => "a number of seconds or a distribution mapping",
            Kind::Opaque => "a YAML value",
        }
    }
}

/// A whole number in the one grammar ([`super::num`]): `7`, `0x10`, `1e3`.
fn is_whole(n: &crate::yaml::Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// Traces a raw type under a key path.
pub type Expand = fn(&str) -> BTreeMap<String, Kind>;

/// How an opaque key is expanded: its kind and, if it is a mapping, the raw
/// type that reads it.
pub struct Expansion {
    pub path: &'static str,
    pub kind: Kind,
    pub trace: Option<Expand>,
}

/// The keys the raw structs read through `serde_yaml::Value` (or a
/// hand-written `Deserialize`). A key inside another's expansion comes
/// after it.
pub const OPAQUE: &[Expansion] = &[
    Expansion { path: "hardware", kind: Kind::NameOrMapping, trace: Some(trace::<RawHardware>) },
    Expansion { path: "hardware.interconnect.bandwidth_gbps", kind: Kind::NumberOrMapping, trace: None },
    Expansion { path: "hardware.interconnect.latency_us", kind: Kind::NumberOrMapping, trace: None },
    Expansion { path: "hardware.kernels", kind: Kind::Mapping, trace: None },
    Expansion { path: "cluster.prefill.hardware", kind: Kind::NameOrMapping, trace: Some(trace::<RawHardware>) },
    Expansion {
        path: "cluster.prefill.hardware.interconnect.bandwidth_gbps",
        kind: Kind::NumberOrMapping,
        trace: None,
    },
    Expansion { path: "cluster.prefill.hardware.interconnect.latency_us", kind: Kind::NumberOrMapping, trace: None },
    Expansion { path: "cluster.prefill.hardware.kernels", kind: Kind::Mapping, trace: None },
    Expansion { path: "cluster.decode.hardware", kind: Kind::NameOrMapping, trace: Some(trace::<RawHardware>) },
    Expansion { path: "cluster.decode.hardware.interconnect.bandwidth_gbps", kind: Kind::NumberOrMapping, trace: None },
    Expansion { path: "cluster.decode.hardware.interconnect.latency_us", kind: Kind::NumberOrMapping, trace: None },
    Expansion { path: "cluster.decode.hardware.kernels", kind: Kind::Mapping, trace: None },
    Expansion { path: "model", kind: Kind::ModelOrMapping, trace: Some(trace::<RawModel>) },
    Expansion { path: "workload.arrivals", kind: Kind::Mapping, trace: Some(trace::<RawArrivals>) },
    Expansion { path: "workload.prompt_tokens", kind: Kind::CountOrMapping, trace: Some(trace::<RawDist>) },
    Expansion { path: "workload.output_tokens", kind: Kind::CountOrMapping, trace: Some(trace::<RawDist>) },
    Expansion { path: "workload.sessions.turns", kind: Kind::CountOrMapping, trace: Some(trace::<RawDist>) },
    Expansion { path: "workload.sessions.think_s", kind: Kind::SecondsOrMapping, trace: Some(trace::<RawSecondsDist>) },
];

/// Every valid key path of a scenario and what it holds, in path order.
pub fn all() -> &'static BTreeMap<String, Kind> {
    static KEYS: OnceLock<BTreeMap<String, Kind>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = trace::<RawScenario>("");
        for e in OPAQUE {
            if keys.contains_key(e.path) {
                keys.insert(e.path.to_string(), e.kind);
                if let Some(expand) = e.trace {
                    keys.extend(expand(e.path).into_iter().filter(|(k, _)| k != e.path));
                }
            }
        }
        keys
    })
}

/// A `--set` key path or value the scenario schema does not take.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KeyError {
    /// `hint`: the nearest valid path, or what is valid under the
    /// longest valid prefix.
    #[error("unknown key path `{path}`; {hint}")]
    Unknown { path: String, hint: String },
    /// `about`: the key's row of [`super::schema`] (range, default,
    /// meaning), after a line break, or empty for a key without one.
    #[error("`{path}` expects {expects}, got {got}{about}")]
    Shape { path: String, expects: String, got: String, about: String },
    #[error("`{key}`: a key path is names joined by dots, like scheduler.max_batch_tokens")]
    Malformed { key: String },
    #[error("`{text}`: expected KEY.PATH=VALUE")]
    NoValue { text: String },
    /// The value was refused before parsing (size, nesting).
    #[error("`{value}`: {why}")]
    Refused { value: String, why: String },
    #[error("`{value}`: not a YAML value: {why}")]
    NotYaml { value: String, why: String },
}

/// Checks a dotted key path; the error says what is near or what is valid.
pub fn check_path(path: &str) -> Result<Kind, KeyError> {
    let keys = all();
    if let Some(kind) = keys.get(path) {
        return Ok(*kind);
    }
    if let Some(found) = pool_path(path) {
        return found;
    }
    // A key inside a list or a plain value is never valid.
    let hint = match llmsim_core::util::nearest(path, keys.keys().map(String::as_str)) {
        Some(near) => format!("did you mean `{near}`?"),
        None => {
            let parent = longest_valid_prefix(path);
            let children = children_of(&parent);
            match (parent.is_empty(), children.is_empty()) {
                (_, true) => format!("`{parent}` holds {}, not further keys", keys[&parent].describe()),
                (true, false) => format!("top-level keys: {}", children.join(", ")),
                (false, false) => format!("keys under `{parent}`: {}", children.join(", ")),
            }
        }
    };
    Err(KeyError::Unknown { path: path.to_string(), hint })
}

/// A key inside one of `cluster.pools`, by its position from 0:
/// `cluster.pools.1.autoscale.target`, `cluster.pools.0.replicas`. A pool
/// holds `name`, `replicas`, `cost_per_hour`, `autoscale` (the keys of
/// `cluster.autoscale`) and the top-level `hardware`, `parallelism` and
/// `scheduler`. `None` when `path` is not under `cluster.pools.N`.
fn pool_path(path: &str) -> Option<Result<Kind, KeyError>> {
    let rest = path.strip_prefix("cluster.pools.")?;
    let (index, key) = rest.split_once('.').unwrap_or((rest, ""));
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let unknown = |hint: String| Err(KeyError::Unknown { path: path.to_string(), hint });
    let head = key.split('.').next().unwrap_or("");
    Some(match head {
        "name" if key == head => Ok(Kind::Text),
        "replicas" if key == head => Ok(Kind::Integer),
        "cost_per_hour" if key == head => Ok(Kind::Number),
        "autoscale" => {
            let inner = format!("cluster.{key}");
            match all().get(&inner) {
                Some(kind) => Ok(*kind),
                None => {
                    unknown(format!("keys under `cluster.pools.{index}.autoscale` are those of `cluster.autoscale`"))
                }
            }
        }
        "hardware" | "parallelism" | "scheduler" => match all().get(key) {
            Some(kind) => Ok(*kind),
            None => unknown(format!("keys under `cluster.pools.{index}.{head}` are those of the top-level `{head}`")),
        },
        _ => unknown(format!(
            "keys under `cluster.pools.{index}`: name, replicas, cost_per_hour, autoscale, hardware, parallelism, scheduler"
        )),
    })
}

/// Checks a value against the key's kind.
pub fn check_value(path: &str, kind: Kind, value: &Value) -> Result<(), KeyError> {
    if kind.accepts(value) {
        Ok(())
    } else {
        Err(KeyError::Shape {
            path: path.to_string(),
            expects: kind.describe().to_string(),
            got: super::describe_value(value),
            about: super::schema::row_of(path).map(|r| format!("\n  {path}: {}", r.hint())).unwrap_or_default(),
        })
    }
}

fn longest_valid_prefix(path: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    (1..parts.len()).rev().map(|n| parts[..n].join(".")).find(|p| all().contains_key(p)).unwrap_or_default()
}

/// The names directly under `parent` (`""` for the top level).
pub fn children_of(parent: &str) -> Vec<String> {
    let prefix = if parent.is_empty() { String::new() } else { format!("{parent}.") };
    all()
        .keys()
        .filter_map(|k| k.strip_prefix(&prefix))
        .filter(|rest| !rest.is_empty() && !rest.contains('.'))
        .map(str::to_string)
        .collect()
}

/// Traces type `T`, naming its keys under `prefix`.
pub fn trace<T: DeserializeOwned>(prefix: &str) -> BTreeMap<String, Kind> {
    trace_with_plain::<T>(prefix).0
}

/// [`trace`], and the keys that read a number outside [`super::num`].
pub fn trace_with_plain<T: DeserializeOwned>(prefix: &str) -> (BTreeMap<String, Kind>, BTreeSet<String>) {
    let log = RefCell::new(Log::default());
    let mut todo: Vec<Vec<&'static str>> = vec![Vec::new()];
    let mut seen: BTreeSet<Vec<&'static str>> = BTreeSet::new();
    while let Some(target) = todo.pop() {
        if !seen.insert(target.clone()) {
            continue;
        }
        let tracer = Tracer { log: &log, at: Vec::new(), target: &target };
        // The run ends with an error (a missing field, an opaque value)
        // once it has reached its target; only what it recorded matters.
        let _ = T::deserialize(tracer);
        let found = std::mem::take(&mut log.borrow_mut().children);
        todo.extend(found.into_iter().filter(|p| !seen.contains(p)));
    }
    let join = |p: &[&str]| match (prefix.is_empty(), p.is_empty()) {
        (true, _) => p.join("."),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}.{}", p.join(".")),
    };
    let log = log.into_inner();
    let plain = log.plain_numbers.iter().map(|p| join(p)).collect();
    (log.kinds.iter().map(|(p, k)| (join(p), *k)).filter(|(p, _)| !p.is_empty()).collect(), plain)
}

#[derive(Default)]
struct Log {
    /// Every path seen and what it holds.
    kinds: BTreeMap<Vec<&'static str>, Kind>,
    /// Paths found in this run, to visit next.
    children: Vec<Vec<&'static str>>,
    /// Keys read as a plain number type rather than through
    /// [`super::num`]: they would not follow the one number grammar.
    plain_numbers: BTreeSet<Vec<&'static str>>,
}

/// Walks towards `target`, recording what it meets there.
struct Tracer<'a> {
    log: &'a RefCell<Log>,
    at: Vec<&'static str>,
    target: &'a [&'static str],
}

#[derive(Debug)]
struct Stop(String);

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Stop(msg.to_string())
    }
}

impl<'a> Tracer<'a> {
    fn arrived(&self) -> bool {
        self.at.len() >= self.target.len()
    }

    fn record(&self, kind: Kind) {
        let mut log = self.log.borrow_mut();
        let entry = log.kinds.entry(self.at.clone()).or_insert(kind);
        if *entry == Kind::Opaque || kind != Kind::Opaque {
            *entry = kind;
        }
    }

    /// Records `names` under this path, to be visited later.
    fn discover(&self, names: &'static [&'static str]) {
        self.record(Kind::Mapping);
        let mut log = self.log.borrow_mut();
        for name in names {
            let mut p = self.at.clone();
            p.push(name);
            log.kinds.entry(p.clone()).or_insert(Kind::Opaque);
            log.children.push(p);
        }
    }

    /// The next step towards the target.
    fn next(&self) -> Option<&'static str> {
        self.target.get(self.at.len()).copied()
    }

    fn child(&self, name: &'static str) -> Tracer<'a> {
        let mut at = self.at.clone();
        at.push(name);
        Tracer { log: self.log, at, target: self.target }
    }

    fn leaf<V>(self, kind: Kind, value: Result<V, Stop>) -> Result<V, Stop> {
        if self.arrived() {
            self.record(kind);
        }
        value
    }

    /// A leaf read as a bare `f64`/`i64`/...: recorded, and noted as
    /// outside the number grammar.
    fn plain_number<V>(self, kind: Kind, value: Result<V, Stop>) -> Result<V, Stop> {
        if self.arrived() {
            self.log.borrow_mut().plain_numbers.insert(self.at.clone());
        }
        self.leaf(kind, value)
    }
}

macro_rules! leaves {
    ($($method:ident => $kind:expr, $visit:ident($($value:expr)?);)*) => {
        $(fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
            self.leaf($kind, v.$visit($($value)?))
        })*
    };
}

macro_rules! plain_numbers {
    ($($method:ident => $kind:expr, $visit:ident($value:expr);)*) => {
        $(fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
            self.plain_number($kind, v.$visit($value))
        })*
    };
}

impl<'de> de::Deserializer<'de> for Tracer<'_> {
    type Error = Stop;

    plain_numbers! {
        deserialize_i8 => Kind::Integer, visit_i8(0);
        deserialize_i16 => Kind::Integer, visit_i16(0);
        deserialize_i32 => Kind::Integer, visit_i32(0);
        deserialize_i64 => Kind::Integer, visit_i64(0);
        deserialize_u8 => Kind::Integer, visit_u8(0);
        deserialize_u16 => Kind::Integer, visit_u16(0);
        deserialize_u32 => Kind::Integer, visit_u32(0);
        deserialize_u64 => Kind::Integer, visit_u64(0);
        deserialize_f32 => Kind::Number, visit_f32(0.0);
        deserialize_f64 => Kind::Number, visit_f64(0.0);
    }

    leaves! {
        deserialize_bool => Kind::Bool, visit_bool(false);
        deserialize_char => Kind::Text, visit_char('x');
        deserialize_str => Kind::Text, visit_str("");
        deserialize_string => Kind::Text, visit_str("");
        deserialize_bytes => Kind::List, visit_bytes(&[]);
        deserialize_byte_buf => Kind::List, visit_bytes(&[]);
        deserialize_unit => Kind::Opaque, visit_unit();
        deserialize_identifier => Kind::Text, visit_str("");
        deserialize_ignored_any => Kind::Opaque, visit_unit();
    }

    /// Only a `serde_yaml::Value` (or a hand-written `Deserialize`) asks
    /// for "anything": the key is opaque; stop here.
    fn deserialize_any<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Stop> {
        self.record(Kind::Opaque);
        Err(Stop("opaque".into()))
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_some(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, _name: &'static str, v: V) -> Result<V::Value, Stop> {
        self.deserialize_unit(v)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, v: V) -> Result<V::Value, Stop> {
        match name {
            super::num::NUMBER => self.leaf(Kind::Number, v.visit_f64(0.0)),
            super::num::WHOLE => self.leaf(Kind::Integer, v.visit_i64(0)),
            _ => v.visit_newtype_struct(self),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.leaf(Kind::List, v.visit_seq(Items { left: 0 }))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Stop> {
        self.leaf(Kind::List, v.visit_seq(Items { left: len }))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(self, _n: &'static str, len: usize, v: V) -> Result<V::Value, Stop> {
        self.deserialize_tuple(len, v)
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.leaf(Kind::Mapping, v.visit_map(Fields { tracer: None, names: &[], pos: 0 }))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Stop> {
        if self.arrived() {
            self.discover(fields);
            return Err(Stop("reached".into()));
        }
        let Some(next) = self.next().and_then(|n| fields.iter().find(|f| **f == n)) else {
            return Err(Stop("no such field".into()));
        };
        let child = self.child(next);
        v.visit_map(Fields { tracer: Some(child), names: std::slice::from_ref(next), pos: 0 })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Stop> {
        if self.arrived() {
            self.discover(variants);
            return Err(Stop("reached".into()));
        }
        let Some(next) = self.next().and_then(|n| variants.iter().find(|f| **f == n)) else {
            return Err(Stop("no such variant".into()));
        };
        v.visit_enum(Variant { tracer: self.child(next), name: next })
    }
}

/// A sequence of `left` zeros (for fixed-size arrays).
struct Items {
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Items {
    type Error = Stop;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Stop> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(0i64.into_deserializer()).map(Some)
    }
}

/// The one field on the way to the target.
struct Fields<'a> {
    tracer: Option<Tracer<'a>>,
    names: &'static [&'static str],
    pos: usize,
}

impl<'de> de::MapAccess<'de> for Fields<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Stop> {
        let Some(name) = self.names.get(self.pos) else { return Ok(None) };
        self.pos += 1;
        seed.deserialize(name.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        match self.tracer.take() {
            Some(t) => seed.deserialize(t),
            None => Err(Stop("no value".into())),
        }
    }
}

/// The enum variant on the way to the target.
struct Variant<'a> {
    tracer: Tracer<'a>,
    name: &'static str,
}

impl<'de, 'a> de::EnumAccess<'de> for Variant<'a> {
    type Error = Stop;
    type Variant = Tracer<'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Tracer<'a>), Stop> {
        let value = seed.deserialize(self.name.into_deserializer())?;
        Ok((value, self.tracer))
    }
}

impl<'de> de::VariantAccess<'de> for Tracer<'_> {
    type Error = Stop;

    fn unit_variant(self) -> Result<(), Stop> {
        self.record(Kind::Opaque);
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Stop> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Stop> {
        de::Deserializer::deserialize_tuple(self, len, v)
    }

    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], v: V) -> Result<V::Value, Stop> {
        de::Deserializer::deserialize_struct(self, "", fields, v)
    }
}

#[cfg(test)]
mod tests;
