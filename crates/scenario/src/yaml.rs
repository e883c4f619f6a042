//! YAML: the one module that names `serde_yaml` (deprecated upstream), so
//! a maintained fork can replace it here alone (`tests/integration/structure.rs`
//! keeps it so). It re-exports the value types and the four conversions the
//! crate uses, and holds what every YAML text goes through before and after
//! the parser: a cheap scan that refuses absurd sizes and nesting before the
//! parser sees them, and the rewording of parser messages into the words
//! users write.
//!
//! libyaml's scanner is quadratic in the depth of `[`/`{` nesting (100,000
//! levels took 19 s before serde_yaml's recursion limit fired), so the
//! depth is measured here first, in one linear pass.

use std::sync::OnceLock;

use regex::Regex;
use serde::Serialize;
use serde::de::DeserializeOwned;
pub use serde_yaml::{Deserializer, Error, Mapping, Number, Value};

use crate::limits::{MAX_YAML_BYTES, MAX_YAML_DEPTH};
use llmsim_core::util::{short_float, short_text};

/// Parses YAML text into `T` (call [`precheck`] first on untrusted text).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_yaml::from_str(text)
}

/// Converts a parsed [`Value`] into `T`.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_yaml::from_value(value)
}

/// `value` as YAML text.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    serde_yaml::to_string(value)
}

/// `value` as a YAML [`Value`].
pub fn to_value<T: Serialize>(value: T) -> Result<Value, Error> {
    serde_yaml::to_value(value)
}

/// Why a text was refused before parsing, and on which line.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub line: Option<usize>,
    pub message: String,
}

/// Refuses a text over [`MAX_YAML_BYTES`] or nested deeper than
/// [`MAX_YAML_DEPTH`] flow levels (`[` and `{`).
///
/// The scan follows YAML's quoting closely enough to be safe in both
/// directions: brackets inside quoted strings and comments do not count,
/// and a bracket that cannot open a flow collection (inside a plain word,
/// `a[b`) does not either. A closing bracket never takes the depth below 0.
pub fn precheck(text: &str) -> Result<(), Refused> {
    if text.len() > MAX_YAML_BYTES {
        return Err(Refused {
            line: None,
            message: format!(
                "the file is {} bytes; a YAML file may have at most {} ({} MiB)",
                llmsim_core::util::thousands(text.len() as u64),
                llmsim_core::util::thousands(MAX_YAML_BYTES as u64),
                MAX_YAML_BYTES >> 20
            ),
        });
    }
    #[derive(PartialEq)]
    enum State {
        Plain,
        Double,
        Single,
        Comment,
    }
    let mut state = State::Plain;
    let mut depth = 0usize;
    let mut line = 1usize;
    // The previous character, for "may a token start here?".
    let mut prev = '\n';
    // Inside a plain word outside any flow collection (`a[b`), where
    // brackets and quotes are ordinary characters.
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            if state == State::Comment {
                state = State::Plain;
            }
        }
        if c.is_whitespace() {
            in_word = false;
        }
        let boundary = !in_word && (prev.is_whitespace() || matches!(prev, '[' | '{' | ',' | ':' | '-' | '?'));
        match state {
            State::Comment => {}
            State::Double => match c {
                '\\' => {
                    chars.next();
                }
                '"' => state = State::Plain,
                _ => {}
            },
            State::Single => {
                if c == '\'' {
                    if chars.peek() == Some(&'\'') {
                        chars.next();
                    } else {
                        state = State::Plain;
                    }
                }
            }
            State::Plain => match c {
                '#' if prev.is_whitespace() => state = State::Comment,
                '"' if boundary => state = State::Double,
                '\'' if boundary => state = State::Single,
                '[' | '{' if boundary || depth > 0 => {
                    depth += 1;
                    if depth > MAX_YAML_DEPTH {
                        return Err(Refused {
                            line: Some(line),
                            message: format!(
                                "nested more than {MAX_YAML_DEPTH} levels deep ([ and {{ inside each other); \
                                 no llmsim file needs more than a few"
                            ),
                        });
                    }
                }
                ']' | '}' if depth > 0 => depth -= 1,
                c if depth == 0 && !c.is_whitespace() && !matches!(c, ':' | '-' | '?' | ',') => in_word = true,
                _ => {}
            },
        }
        prev = c;
    }
    Ok(())
}

/// Rewrites serde's and serde_yaml's phrasing ("invalid type: integer `5`,
/// expected struct RawMoments") into user words ("expected a mapping, got
/// the number 5"), and shortens absurdly long values.
pub fn user_words(msg: &str) -> String {
    static INVALID: OnceLock<Regex> = OnceLock::new();
    static LENGTH: OnceLock<Regex> = OnceLock::new();
    static LONG: OnceLock<Regex> = OnceLock::new();
    // invariant: the three patterns are constants (every call of this
    // function's tests compiles them); no user text reaches `Regex::new`.
    let invalid = INVALID
        .get_or_init(|| Regex::new(r"^(?s)(.*?)invalid (?:type|value): (.+?), expected (.+)$").expect("static regex"));
    let length = LENGTH.get_or_init(|| Regex::new(r"invalid length (\d+), expected (.+)$").expect("static regex"));
    let long = LONG.get_or_init(|| Regex::new(r"[^\s,;]{61,}").expect("static regex"));
    let mut out = if let Some(c) = invalid.captures(msg) {
        format!("{}expected {}, got {}", &c[1], expected(&c[3]), unexpected(&c[2]))
    } else if let Some(c) = length.captures(msg) {
        let what = expected(&c[2]);
        format!("{}expected {what}, got {} items", &msg[..c.get(0).map_or(0, |m| m.start())], &c[1])
    } else {
        msg.to_string()
    };
    if out.contains("recursion limit exceeded") {
        out = out.replace("recursion limit exceeded", "nested too deeply (more than 128 levels of mappings and lists)");
    }
    long.replace_all(&out, |c: &regex::Captures| short_text(&c[0])).into_owned()
}

/// serde's name for what it wanted, in user words.
fn expected(e: &str) -> String {
    let e = e.trim();
    let plain = match e {
        "i8" | "i16" | "i32" | "i64" | "i128" | "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "isize" => {
            "a whole number"
        }
        "f32" | "f64" => "a number",
        "a sequence" | "sequence" => "a list",
        "a map" | "map" => "a mapping",
        "a string" | "string" | "a borrowed string" => "text",
        "a boolean" | "bool" => "true or false",
        "unit" => "nothing",
        "a YAML tag starting with '!'" | "a Value::Tagged enum" => "a mapping with one key naming the kind",
        "fewer elements in sequence" => "fewer items",
        _ => "",
    };
    if !plain.is_empty() {
        return plain.to_string();
    }
    if e.starts_with("struct variant") || e.starts_with("struct ") {
        return "a mapping".into();
    }
    if e.starts_with("tuple variant") || e.starts_with("tuple struct") || e.starts_with("a tuple") {
        return "a list".into();
    }
    if e.starts_with("newtype variant") || e.starts_with("enum ") {
        return "a value".into();
    }
    if e.starts_with("unit variant") {
        return "a name".into();
    }
    e.to_string()
}

/// serde's description of what it found, in user words.
fn unexpected(u: &str) -> String {
    let u = u.trim();
    let inner = |prefix: &str| u.strip_prefix(prefix).map(|r| r.trim_matches('`').to_string());
    if let Some(n) = inner("integer ") {
        return format!("the number {}", short_text(&n));
    }
    if let Some(n) = inner("floating point ") {
        let v: f64 = n.parse().unwrap_or(f64::NAN);
        return format!("the number {}", if v.is_nan() { short_text(&n) } else { short_float(v) });
    }
    if let Some(b) = inner("boolean ") {
        return format!("the boolean {b}");
    }
    if let Some(s) = u.strip_prefix("string ") {
        let s = s.trim_matches('"');
        return format!("the string \"{}\"", short_text(s));
    }
    match u {
        "unit value" | "unit" => "nothing (null)".into(),
        "map" => "a mapping".into(),
        "sequence" => "a list".into(),
        "unit variant" | "newtype variant" | "tuple variant" | "struct variant" | "enum" => {
            "a tagged value (!kind)".into()
        }
        other => short_text(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_flow_nesting_is_refused_with_its_line() {
        let deep = format!("a: 1\nb: {}1{}\n", "[".repeat(65), "]".repeat(65));
        let e = precheck(&deep).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("more than 64 levels"), "{}", e.message);
        let ok = format!("b: {}1{}\n", "[".repeat(64), "]".repeat(64));
        assert!(precheck(&ok).is_ok());
    }

    #[test]
    fn brackets_in_quotes_comments_and_words_do_not_count() {
        let text = format!(
            "name: \"{}\"\nd: '{}'\n# {}\nw: a{}\nx: [1, 2]\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100),
            "[".repeat(100)
        );
        assert!(precheck(&text).is_ok());
        // Closing brackets in quotes cannot hide real depth.
        let sneaky = format!("x: {}\"{}\", {}", "[".repeat(60), "]".repeat(10), "[".repeat(10));
        assert!(precheck(&sneaky).is_err());
    }

    #[test]
    fn a_huge_file_is_refused_by_size() {
        let e = precheck(&"#".repeat(MAX_YAML_BYTES + 1)).unwrap_err();
        assert!(e.message.contains("at most 4,194,304"), "{}", e.message);
    }

    #[test]
    fn parser_phrasing_becomes_user_words() {
        assert_eq!(
            user_words("invalid type: integer `5`, expected struct RawMoments"),
            "expected a mapping, got the number 5"
        );
        assert_eq!(
            user_words("lognormal: invalid type: floating point `1000.0`, expected i64"),
            "lognormal: expected a whole number, got the number 1000"
        );
        assert_eq!(
            user_words("invalid type: string \"lots\", expected f64"),
            "expected a number, got the string \"lots\""
        );
        assert_eq!(
            user_words("invalid type: unit value, expected a Value::Tagged enum"),
            "expected a mapping with one key naming the kind, got nothing (null)"
        );
        let long = user_words(&format!("unknown field `{}`, expected `rate`", "x".repeat(300)));
        assert!(long.contains("(302 characters)") && long.len() < 120, "{long}");
    }
}
