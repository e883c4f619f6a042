//! Enums written as a one-key mapping (`poisson: {rate: 20}`), the form
//! docs/scenario.md uses, read straight from the YAML text.
//!
//! serde_yaml itself only reads `!poisson {rate: 20}`. Reading the mapping
//! here, instead of through a `serde_yaml::Value`, keeps the line numbers
//! and the key path of every error inside the enum, and lets numbers inside
//! it follow the same grammar as everywhere else ([`super::num`]).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, Error as _, MapAccess, VariantAccess, Visitor};
use serde::{Deserialize, forward_to_deserialize_any};

use super::num::{short_float, short_text};

/// An enum read from a one-key mapping; `FORMS` lists the kinds for messages.
pub trait OneKey {
    /// E.g. "poisson: {rate}, gamma: {rate, burstiness}, ...".
    const FORMS: &'static str;
}

/// `#[serde(deserialize_with = "onekey::read")]` for a one-key enum field.
pub fn read<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + OneKey,
{
    d.deserialize_any(OneKeyVisitor::<T>(PhantomData))
}

/// Reads `T` from a mapping that must have exactly one key, the kind.
pub fn from_map<'de, A, T>(mut map: A) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de> + OneKey,
{
    let value = T::deserialize(OneKeyMap { map: &mut map, forms: T::FORMS })?;
    if let Some(extra) = map.next_key::<KeyText>()? {
        return Err(A::Error::custom(format!(
            "expected exactly one key naming the kind, found another: `{}`; the kinds are {}",
            extra.0,
            T::FORMS
        )));
    }
    Ok(value)
}

/// What a non-mapping value is, in a message.
pub fn got(what: impl fmt::Display, forms: &str) -> String {
    format!("expected one of {forms}; got {what}")
}

struct OneKeyVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + OneKey> Visitor<'de> for OneKeyVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "one of {}", T::FORMS)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        from_map(map)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Err(E::custom(got(format_args!("the string \"{}\"", short_text(v)), T::FORMS)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Err(E::custom(got(format_args!("the number {v}"), T::FORMS)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Err(E::custom(got(format_args!("the number {v}"), T::FORMS)))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<T, E> {
        Err(E::custom(got(format_args!("the number {}", super::num::short_int(v)), T::FORMS)))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<T, E> {
        Err(E::custom(got(format_args!("the number {}", short_float(v as f64)), T::FORMS)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Err(E::custom(got(format_args!("the number {}", short_float(v)), T::FORMS)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        Err(E::custom(got(format_args!("the boolean {v}"), T::FORMS)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Err(E::custom(got("nothing (null)", T::FORMS)))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(A::Error::custom(got("a list", T::FORMS)))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(A::Error::custom(format!(
            "YAML tags (!kind) are not used here: write the kind as a key, one of {}",
            T::FORMS
        )))
    }
}

/// A mapping key as text, for messages.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(short_text(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(short_float(v)))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".into()))
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<KeyText, A::Error> {
                Ok(KeyText("a mapping".into()))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<KeyText, A::Error> {
                Ok(KeyText("a list".into()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The mapping seen as an enum: its first key is the variant.
struct OneKeyMap<'a, A> {
    map: &'a mut A,
    forms: &'static str,
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for OneKeyMap<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, A::Error> {
        Err(A::Error::custom(got("a mapping", self.forms)))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, A::Error> {
        v.visit_enum(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

impl<'de, 'a, A: MapAccess<'de>> EnumAccess<'de> for OneKeyMap<'a, A> {
    type Error = A::Error;
    type Variant = Value<'a, A>;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Value<'a, A>), A::Error> {
        match self.map.next_key_seed(seed)? {
            Some(key) => Ok((key, Value { map: self.map })),
            None => {
                Err(A::Error::custom(format!("an empty mapping: give one key naming the kind, one of {}", self.forms)))
            }
        }
    }
}

/// The value under the kind's key.
struct Value<'a, A> {
    map: &'a mut A,
}

impl<'de, A: MapAccess<'de>> VariantAccess<'de> for Value<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.map.next_value::<()>()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, A::Error> {
        struct Seed<V>(usize, V);
        impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Seed<V> {
            type Value = V::Value;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
                d.deserialize_tuple(self.0, self.1)
            }
        }
        self.map.next_value_seed(Seed(len, v))
    }

    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], v: V) -> Result<V::Value, A::Error> {
        struct Seed<V>(&'static [&'static str], V);
        impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for Seed<V> {
            type Value = V::Value;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
                d.deserialize_struct("", self.0, self.1)
            }
        }
        self.map.next_value_seed(Seed(fields, v))
    }
}
