//! One top-level object of a measured file, its per-request arrays held
//! as plain numbers as they are parsed (see the parent module's docs).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::num_str;

/// Per-request arrays no reader uses, skipped as they are parsed.
pub const SKIPPED: [&str; 6] = [
    "generated_texts",
    "queue_times",
    "server_queue_times",
    "server_ttfts",
    "llmsim_scheduled_times",
    "llmsim_sessions",
];

/// A top-level JSON value: an object's keys but its per-request arrays in
/// `head` (or, for anything but an object, that value), the arrays in
/// `arrays`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Doc {
    pub head: Value,
    pub arrays: PerRequest,
}

/// An object's per-request arrays. A list is `None` when the key is
/// absent or its value is not a list of numbers (numeric strings and
/// `"inf"`/`"NaN"` count as numbers, as [`super::num`] reads them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerRequest {
    pub input_lens: Option<Vec<f64>>,
    pub output_lens: Option<Vec<f64>>,
    pub ttfts: Option<Vec<f64>>,
    pub latencies: Option<Vec<f64>>,
    pub start_times: Option<Vec<f64>>,
    /// One list of gaps per request; `None` unless every row is a list of numbers.
    pub itls: Option<Ragged>,
    pub errors: Errors,
}

/// Lists of numbers of different lengths, in one allocation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ragged {
    values: Vec<f64>,
    /// Where each row ends in `values`.
    ends: Vec<usize>,
}

impl Ragged {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.values[start..self.ends[i]]
    }

    pub fn rows(&self) -> impl Iterator<Item = &[f64]> {
        (0..self.len()).map(|i| self.row(i))
    }

    pub fn push(&mut self, row: &[f64]) {
        self.values.extend_from_slice(row);
        self.ends.push(self.values.len());
    }
}

/// An object's `errors` list: `""` (or anything but a string) for a
/// request that succeeded, the error text for one that failed.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Errors {
    #[default]
    Absent,
    /// There, but not a list (`null`).
    NotAList,
    /// Whether each request succeeded.
    Ok(Vec<bool>),
}

impl Errors {
    /// Whether each request succeeded, if the list is there.
    pub fn flags(&self) -> Option<&[bool]> {
        match self {
            Errors::Ok(f) => Some(f),
            _ => None,
        }
    }
}

impl Doc {
    /// The object's per-request lists as numbers, back in the JSON tree.
    pub fn into_value(self) -> Value {
        let Value::Object(mut m) = self.head else { return self.head };
        let a = self.arrays;
        let list = |xs: Vec<f64>| Value::Array(xs.into_iter().map(Value::from).collect());
        for (key, xs) in [
            ("input_lens", a.input_lens),
            ("output_lens", a.output_lens),
            ("ttfts", a.ttfts),
            ("latencies", a.latencies),
            ("start_times", a.start_times),
        ] {
            if let Some(xs) = xs {
                m.insert(key.into(), list(xs));
            }
        }
        if let Some(r) = a.itls {
            m.insert("itls".into(), Value::Array(r.rows().map(|row| list(row.to_vec())).collect()));
        }
        if let Errors::Ok(flags) = a.errors {
            let texts = flags.into_iter().map(|ok| Value::from(if ok { "" } else { "error" })).collect();
            m.insert("errors".into(), Value::Array(texts));
        }
        Value::Object(m)
    }
}

/// A top-level value: one document, or a top-level array of objects
/// (`vllm bench sweep`'s `summary.json`) as its documents.
pub enum Top {
    One(Doc),
    Many(Vec<Doc>),
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Top, D::Error> {
        d.deserialize_any(TopVisitor)
    }
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Doc, D::Error> {
        Ok(match Top::deserialize(d)? {
            Top::One(doc) => doc,
            Top::Many(docs) => Doc::from(Value::Array(docs.into_iter().map(Doc::into_value).collect())),
        })
    }
}

impl From<Value> for Doc {
    fn from(head: Value) -> Doc {
        Doc { head, arrays: PerRequest::default() }
    }
}

/// Visitor methods for the values a visitor has no use for: scalars give
/// `$v`, lists and maps are read to their end and give `$v`.
macro_rules! anything_else_is {
    ($v:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($v)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($v)
        }
    };
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut head = Map::new();
        let mut a = PerRequest::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "input_lens" => a.input_lens = map.next_value::<NumList>()?.0,
                "output_lens" => a.output_lens = map.next_value::<NumList>()?.0,
                "ttfts" => a.ttfts = map.next_value::<NumList>()?.0,
                "latencies" => a.latencies = map.next_value::<NumList>()?.0,
                "start_times" => a.start_times = map.next_value::<NumList>()?.0,
                "itls" => a.itls = map.next_value::<RaggedList>()?.0,
                "errors" => a.errors = map.next_value::<Errors>()?,
                k if SKIPPED.contains(&k) => {
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    let v: Value = map.next_value()?;
                    head.insert(key, v);
                }
            }
        }
        Ok(Top::One(Doc { head: Value::Object(head), arrays: a }))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        let mut docs = Vec::new();
        while let Some(d) = seq.next_element::<Doc>()? {
            docs.push(d);
        }
        if docs.iter().all(|d| d.head.is_object()) {
            return Ok(Top::Many(docs));
        }
        Ok(Top::One(Doc::from(Value::Array(docs.into_iter().map(Doc::into_value).collect()))))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Top, E> {
        Ok(Top::One(Doc::from(Value::from(v))))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Top, E> {
        Ok(Top::One(Doc::from(Value::from(v))))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Top, E> {
        Ok(Top::One(Doc::from(Value::from(v))))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Top, E> {
        Ok(Top::One(Doc::from(Value::from(v))))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Top, E> {
        Ok(Top::One(Doc::from(Value::from(v))))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Top, E> {
        Ok(Top::One(Doc::from(Value::Null)))
    }
}

/// A list of numbers, or `None` (see [`PerRequest`]).
struct NumList(Option<Vec<f64>>);

impl<'de> Deserialize<'de> for NumList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NumList, D::Error> {
        d.deserialize_any(NumListVisitor)
    }
}

struct NumListVisitor;

impl<'de> Visitor<'de> for NumListVisitor {
    type Value = NumList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of numbers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NumList, A::Error> {
        let mut out = Some(Vec::new());
        while let Some(Lenient(x)) = seq.next_element()? {
            match (&mut out, x) {
                (Some(v), Some(x)) => v.push(x),
                _ => out = None,
            }
        }
        Ok(NumList(out))
    }

    anything_else_is!(NumList(None));
}

/// One element of a number list: the number, or `None`.
struct Lenient(Option<f64>);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Lenient, D::Error> {
        d.deserialize_any(LenientVisitor)
    }
}

struct LenientVisitor;

impl<'de> Visitor<'de> for LenientVisitor {
    type Value = Lenient;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Lenient, E> {
        Ok(Lenient(Some(v as f64)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Lenient, E> {
        Ok(Lenient(Some(v as f64)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Lenient, E> {
        Ok(Lenient(Some(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Lenient, E> {
        Ok(Lenient(num_str(v)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Lenient, E> {
        Ok(Lenient(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Lenient, E> {
        Ok(Lenient(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Lenient, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Lenient, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }
}

/// A list of number lists, or `None` (see [`PerRequest::itls`]).
struct RaggedList(Option<Ragged>);

impl<'de> Deserialize<'de> for RaggedList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RaggedList, D::Error> {
        d.deserialize_any(RaggedVisitor)
    }
}

struct RaggedVisitor;

impl<'de> Visitor<'de> for RaggedVisitor {
    type Value = RaggedList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of lists of numbers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RaggedList, A::Error> {
        let mut out = Some(Ragged::default());
        while let Some(NumList(row)) = seq.next_element()? {
            match (&mut out, row) {
                (Some(r), Some(row)) => r.push(&row),
                _ => out = None,
            }
        }
        if let Some(r) = &mut out {
            r.values.shrink_to_fit();
            r.ends.shrink_to_fit();
        }
        Ok(RaggedList(out))
    }

    anything_else_is!(RaggedList(None));
}

impl<'de> Deserialize<'de> for Errors {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Errors, D::Error> {
        d.deserialize_any(ErrorsVisitor)
    }
}

struct ErrorsVisitor;

impl<'de> Visitor<'de> for ErrorsVisitor {
    type Value = Errors;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of error texts")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Errors, A::Error> {
        let mut flags = Vec::new();
        while let Some(Succeeded(ok)) = seq.next_element()? {
            flags.push(ok);
        }
        Ok(Errors::Ok(flags))
    }

    anything_else_is!(Errors::NotAList);
}

/// One entry of `errors`: true unless it is a non-empty string.
struct Succeeded(bool);

impl<'de> Deserialize<'de> for Succeeded {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Succeeded, D::Error> {
        d.deserialize_any(SucceededVisitor)
    }
}

struct SucceededVisitor;

impl<'de> Visitor<'de> for SucceededVisitor {
    type Value = Succeeded;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an error text")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Succeeded, E> {
        Ok(Succeeded(v.is_empty()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Succeeded, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Succeeded(true))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Succeeded, E> {
        Ok(Succeeded(true))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Succeeded, E> {
        Ok(Succeeded(true))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Succeeded, E> {
        Ok(Succeeded(true))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Succeeded, E> {
        Ok(Succeeded(true))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Succeeded, E> {
        Ok(Succeeded(true))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Succeeded, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Succeeded(true))
    }
}
