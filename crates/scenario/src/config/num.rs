//! One number grammar for every numeric key of every YAML file (scenario,
//! hardware profile, models file) and every `--set` value.
//!
//! A number is a YAML number as the YAML 1.2 core schema resolves it:
//! `20`, `-3`, `2.5`, `1e3`, `.5`, `0x3C`, `0o17`, `0b101`, `.inf`, `.nan`.
//! A key that takes a whole number accepts any of these whose value is
//! whole (`1e6`, `2000.0`, `0x10`). Text is never a number: `"20"` (quoted),
//! `1_000` and `0123` are refused with a message saying how to write them.
//! Ranges are checked afterwards by validation, which names the allowed range.
//!
//! serde_yaml resolves a scalar differently depending on the type asked for
//! (`deserialize_f64` rejects `0x1E`, `deserialize_i64` rejects `1e3`), and
//! differently again when the value went through a `serde_yaml::Value`
//! (`--set`, one-key enums). The functions here always ask for "any" value
//! and convert it themselves, so every path resolves numbers alike. They go
//! through a newtype struct named [`NUMBER`] or [`WHOLE`] so that the key
//! tracer ([`super::keys`]) can still see what each key holds.

use std::fmt;

pub use llmsim_core::util::{short_float, short_int, short_text};
use serde::Deserializer;
use serde::de::{self, Error as _, MapAccess, SeqAccess, Visitor};

/// The newtype name under which a real number is read.
pub const NUMBER: &str = "$llmsim::number";
/// The newtype name under which a whole number is read.
pub const WHOLE: &str = "$llmsim::whole";

/// A YAML number, before conversion.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// The value if it is whole, else a message.
    pub fn whole(self) -> Result<i128, String> {
        match self {
            Num::Int(i) => Ok(i),
            Num::Float(f) if f.is_finite() && f.fract() == 0.0 => {
                // Beyond i128 only by a typo; keep the sign, saturate.
                Ok(if f >= i128::MAX as f64 {
                    i128::MAX
                } else if f <= i128::MIN as f64 {
                    i128::MIN
                } else {
                    f as i128
                })
            }
            Num::Float(f) => Err(format!("{} is not a whole number", short_float(f))),
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::Int(i) => f.write_str(&short_int(*i)),
            Num::Float(x) => f.write_str(&short_float(*x)),
        }
    }
}

/// Why `s` (text where a number was expected) is not a number.
pub fn not_a_number(s: &str) -> String {
    not_a(s, "a number")
}

/// Why `s` is not `what` ("a number", "a whole number").
fn not_a(s: &str, what: &str) -> String {
    let t = s.trim();
    let numeric = |x: &str| x.parse::<f64>().is_ok();
    let words = ["inf", "infinity", "nan"];
    if numeric(t) && !words.iter().any(|w| t.trim_start_matches(['+', '-']).eq_ignore_ascii_case(w)) {
        let v: f64 = t.parse().unwrap_or(f64::NAN);
        if v.is_infinite() {
            return format!("{} is too large: numbers must lie within +-1.8e308", short_text(t));
        }
        let digits = t.trim_start_matches(['+', '-']);
        if digits.len() > 1 && digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit()) {
            return format!("`{t}` has a leading zero, which YAML reads as text: write {v} (or 0o... for octal)");
        }
        return format!("expected {what}, got the string \"{}\": remove the quotes", short_text(t));
    }
    if t.contains('_') && numeric(&t.replace('_', "")) {
        return format!("`{}` is text, not a number: write numbers without underscores", short_text(t));
    }
    format!("expected {what}, got the string \"{}\"", short_text(t))
}

/// Reads any YAML value that is a number; `.0` names what the key wants.
struct NumVisitor(&'static str);

impl<'de> Visitor<'de> for NumVisitor {
    type Value = Num;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
        Ok(Num::Int(i128::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
        Ok(Num::Int(i128::from(v)))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Num, E> {
        Ok(Num::Int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Num, E> {
        Ok(i128::try_from(v).map_or(Num::Float(v as f64), Num::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
        Ok(Num::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
        Err(E::custom(not_a(v, self.0)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Num, E> {
        Err(E::custom(format!("expected {}, got the boolean {v}", self.0)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
        Err(E::custom(format!("expected {}, got nothing (null)", self.0)))
    }

    fn visit_none<E: de::Error>(self) -> Result<Num, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Num, A::Error> {
        Err(A::Error::custom(format!("expected {}, got a list", self.0)))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Num, A::Error> {
        Err(A::Error::custom(format!("expected {}, got a mapping", self.0)))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Num, D::Error> {
        d.deserialize_any(self)
    }
}

/// Reads a number through the newtype `name` (see the module doc).
pub fn read<'de, D: Deserializer<'de>>(d: D, name: &'static str) -> Result<Num, D::Error> {
    let what = if name == WHOLE { "a whole number" } else { "a number" };
    d.deserialize_newtype_struct(name, NumVisitor(what))
}

/// A real number key.
pub fn real<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    read(d, NUMBER).map(Num::as_f64)
}

/// A whole-number key, as `i64`. Values beyond `i64` saturate to its ends,
/// which every range refuses as "too large"/"too small".
pub fn whole<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = read(d, WHOLE)?.whole().map_err(D::Error::custom)?;
    Ok(n.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

/// A seed: a whole number from 0 to 2^64 - 1.
pub fn seed<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = read(d, WHOLE)?;
    let w = n.whole().map_err(D::Error::custom)?;
    u64::try_from(w)
        .map_err(|_| D::Error::custom(format!("{n} is not allowed: a seed is a whole number from 0 to {}", u64::MAX)))
}

/// Optional forms of the above, for `Option<_>` fields (with
/// `#[serde(default)]`). A null value is "not given".
macro_rules! optional {
    ($name:ident, $inner:ident, $ty:ty) => {
        pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$ty>, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Option<$ty>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a number")
                }
                fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                    Ok(None)
                }
                fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                    Ok(None)
                }
                fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                    $inner(d).map(Some)
                }
            }
            d.deserialize_option(V)
        }
    };
}

optional!(opt_real, real, f64);
optional!(opt_whole, whole, i64);
optional!(opt_seed, seed, u64);

/// A list of real numbers.
pub fn real_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    list(d, NUMBER).map(|v| v.into_iter().map(Num::as_f64).collect())
}

/// A list of whole numbers (saturating like [`whole`]).
pub fn whole_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<i64>, D::Error> {
    list(d, WHOLE)?
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            n.whole()
                .map(|w| w.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
                .map_err(|e| D::Error::custom(format!("[{i}]: {e}")))
        })
        .collect()
}

/// An optional list of real numbers.
pub fn opt_real_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f64>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Vec<f64>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of numbers")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            real_list(d).map(Some)
        }
    }
    d.deserialize_option(V)
}

/// A pair of whole numbers (`uniform: [lo, hi]`).
pub fn whole_pair<'de, D: Deserializer<'de>>(d: D) -> Result<[i64; 2], D::Error> {
    let v = whole_list(d)?;
    match v[..] {
        [a, b] => Ok([a, b]),
        _ => Err(D::Error::custom(format!("expected two numbers [lo, hi], got a list of {}", v.len()))),
    }
}

/// `[lo, hi]` of real numbers.
pub fn real_pair<'de, D: Deserializer<'de>>(d: D) -> Result<[f64; 2], D::Error> {
    let v = real_list(d)?;
    match v[..] {
        [a, b] => Ok([a, b]),
        _ => Err(D::Error::custom(format!("expected two numbers [lo, hi], got a list of {}", v.len()))),
    }
}

fn list<'de, D: Deserializer<'de>>(d: D, name: &'static str) -> Result<Vec<Num>, D::Error> {
    struct Item(&'static str);
    impl<'de> de::DeserializeSeed<'de> for Item {
        type Value = Num;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Num, D::Error> {
            read(d, self.0)
        }
    }
    struct V(&'static str);
    impl<'de> Visitor<'de> for V {
        type Value = Vec<Num>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of numbers")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Num>, A::Error> {
            let mut out = Vec::new();
            while let Some(n) = seq.next_element_seed(Item(self.0))? {
                out.push(n);
            }
            Ok(out)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<Num>, E> {
            Err(E::custom(format!("expected a list of numbers, got the string \"{}\"", short_text(v))))
        }
        fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<Num>, A::Error> {
            Err(A::Error::custom("expected a list of numbers, got a mapping"))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Vec<Num>, E> {
            Err(E::custom("expected a list of numbers, got nothing (null)"))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Vec<Num>, E> {
            Err(E::custom(format!("expected a list of numbers, got the boolean {v}")))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Vec<Num>, E> {
            Err(E::custom(format!("expected a list of numbers, got the number {v}")))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Vec<Num>, E> {
            Err(E::custom(format!("expected a list of numbers, got the number {v}")))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Vec<Num>, E> {
            Err(E::custom(format!("expected a list of numbers, got the number {}", short_float(v))))
        }
    }
    d.deserialize_seq(V(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct T {
        #[serde(deserialize_with = "real")]
        x: f64,
        #[serde(deserialize_with = "whole")]
        n: i64,
        #[serde(default, deserialize_with = "opt_seed")]
        s: Option<u64>,
    }

    fn text(yaml: &str) -> Result<T, String> {
        crate::yaml::from_str::<T>(yaml).map_err(|e| e.to_string())
    }

    fn value(yaml: &str) -> Result<T, String> {
        let v: crate::yaml::Value = crate::yaml::from_str(yaml).unwrap();
        crate::yaml::from_value::<T>(v).map_err(|e| e.to_string())
    }

    #[test]
    fn every_spelling_of_a_number_reads_the_same_from_text_and_from_a_value() {
        for (x, n, want_x, want_n) in [
            ("0x1E", "0x10", 30.0, 16),
            ("30", "1e3", 30.0, 1000),
            ("2.5", "2000.0", 2.5, 2000),
            ("0o17", "0b101", 15.0, 5),
            ("+7", "-0x2", 7.0, -2),
            (".5", "1e18", 0.5, 1_000_000_000_000_000_000),
        ] {
            let yaml = format!("{{x: {x}, n: {n}}}");
            for got in [text(&yaml), value(&yaml)] {
                let t = got.unwrap_or_else(|e| panic!("{yaml}: {e}"));
                assert_eq!((t.x, t.n), (want_x, want_n), "{yaml}");
            }
        }
    }

    #[test]
    fn huge_values_saturate_and_are_shown_short() {
        let t = text("{x: 1e300, n: 99999999999999999999999}").unwrap();
        assert_eq!((t.x, t.n), (1e300, i64::MAX));
        let t = text("{x: -1, n: -1e300}").unwrap();
        assert_eq!(t.n, i64::MIN);
        assert_eq!(short_float(1e300), "1e300");
        assert_eq!(short_int(10i128.pow(30)), "1e30");
        assert_eq!(short_text(&"9".repeat(300)), format!("{}... (300 characters)", "9".repeat(40)));
    }

    #[test]
    fn text_and_fractions_get_a_message_in_user_words() {
        let e = text("{x: 1, n: 2.5}").unwrap_err();
        assert!(e.contains("2.5 is not a whole number"), "{e}");
        let e = text("{x: \"20\", n: 1}").unwrap_err();
        assert!(e.contains("got the string \"20\": remove the quotes"), "{e}");
        let e = text("{x: 1e400, n: 1}").unwrap_err();
        assert!(e.contains("1e400 is too large"), "{e}");
        let e = text("{x: 1_000, n: 1}").unwrap_err();
        assert!(e.contains("without underscores"), "{e}");
        let e = text("{x: 1, n: 0123}").unwrap_err();
        assert!(e.contains("leading zero") && e.contains("write 123"), "{e}");
        let e = text("{x: [1], n: 1}").unwrap_err();
        assert!(e.contains("expected a number, got a list"), "{e}");
        let e = text(&format!("{{x: {}x, n: 1}}", "9".repeat(300))).unwrap_err();
        assert!(e.contains("(301 characters)") && e.len() < 200, "{e}");
        let e = text("{x: 1, n: 1, s: -1}").unwrap_err();
        assert!(e.contains("a seed is a whole number from 0"), "{e}");
        assert_eq!(text("{x: 1, n: 1, s: 0x2A}").unwrap().s, Some(42));
        assert_eq!(text("{x: 1, n: 1, s: ~}").unwrap().s, None);
    }
}
