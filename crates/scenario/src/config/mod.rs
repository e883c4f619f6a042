//! Scenario and hardware files (docs/scenario.md), read in two stages: `raw`
//! mirrors the YAML with serde, `validate` checks every rule and builds the
//! [`Scenario`]. Nothing else in the crate reads configuration.

pub mod architecture;
pub mod autoscale;
pub mod calibration;
pub mod check;
pub mod cluster;
pub mod curve;
pub mod defaults;
pub mod deployment;
pub mod error;
pub mod hardware;
pub mod kernels;
pub mod keys;
pub mod lora;
pub mod num;
pub mod onekey;
pub mod overrides;
pub mod presets;
pub mod raw;
pub mod reference;
pub mod scenario;
pub mod schema;
pub mod sections;
pub mod speculative;
pub mod validate;

use std::path::Path;

use serde::de::DeserializeOwned;

pub use error::ConfigError;
// Moved below the config (they import nothing from it); the old paths stay.
pub use crate::{limits, yaml};
pub use overrides::Override;
pub use scenario::*;

/// Reads and validates a scenario file.
pub fn load_scenario(file: &Path) -> Result<Scenario, ConfigError> {
    load_scenario_with(file, &[])
}

/// Reads a scenario file, applies `--set` overrides, and validates.
pub fn load_scenario_with(file: &Path, overrides: &[Override]) -> Result<Scenario, ConfigError> {
    let text = crate::input::read_text(crate::input::Kind::Scenario, file)?;
    // Parsing the text first gives line numbers for the file's own mistakes.
    let raw: raw::RawScenario = parse_str(&text, file)?;
    if overrides.is_empty() {
        return validate::scenario(raw, file);
    }
    let mut value = yaml_value(&text, file)?;
    for o in overrides {
        o.apply(&mut value, file)?;
    }
    // The failing key's row of the key table follows: its range, default
    // and meaning, for the value a user just typed.
    let with_overrides = |mut e: ConfigError| {
        e.message.push_str(" (after --set overrides)");
        if let Some(row) = schema::row_of(&e.path) {
            e.message.push_str(&format!("\n  {}: {}", e.path, row.hint()));
        }
        e
    };
    let raw: raw::RawScenario = parse_value(value, file, "").map_err(with_overrides)?;
    validate::scenario(raw, file).map_err(with_overrides)
}

/// Whether `path` names something to read (a file, a pipe, a device), not
/// a folder or nothing: a profile found by name is read, and its errors
/// shown, once it exists.
pub(crate) fn is_a_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_dir())
}

/// Parses YAML text into a value after [`yaml::precheck`].
pub fn yaml_value(text: &str, file: &Path) -> Result<crate::yaml::Value, ConfigError> {
    precheck(text, file)?;
    crate::yaml::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        ConfigError::new(file, "", yaml::user_words(&format!("YAML syntax error: {e}"))).at_line(line)
    })
}

fn precheck(text: &str, file: &Path) -> Result<(), ConfigError> {
    yaml::precheck(text).map_err(|r| ConfigError::new(file, "", r.message).at_line(r.line))
}

/// Deserialises YAML text, reporting the key path and line of any error.
pub fn parse_str<T: DeserializeOwned>(text: &str, file: &Path) -> Result<T, ConfigError> {
    precheck(text, file)?;
    // A syntax error has no key path; report it as what it is. Skipping
    // every value resolves no scalar, so only the syntax is checked here.
    if let Err(e) = crate::yaml::from_str::<serde::de::IgnoredAny>(text) {
        let line = e.location().map(|l| l.line());
        let msg = yaml::user_words(&format!("YAML syntax error: {e}"));
        return Err(ConfigError::new(file, "", msg).at_line(line));
    }
    let de = crate::yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = clean_path(&e.path().to_string());
        let inner = e.into_inner();
        let line = inner.location().map(|l| l.line());
        let msg = yaml::user_words(&strip_path_prefix(&strip_location(&inner.to_string()), &path));
        ConfigError::new(file, path, msg).at_line(line)
    })
}

/// Deserialises an already-parsed YAML value found at `prefix` in `file`.
pub fn parse_value<T: DeserializeOwned>(
    value: crate::yaml::Value,
    file: &Path,
    prefix: &str,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = clean_path(&e.path().to_string());
        let path = match (prefix.is_empty(), inner.is_empty()) {
            (true, _) => inner,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{inner}"),
        };
        ConfigError::new(file, path, yaml::user_words(&strip_location(&e.into_inner().to_string())))
    })
}

/// serde_yaml starts some messages with (part of) the key path, which the
/// error already shows.
fn strip_path_prefix(msg: &str, path: &str) -> String {
    if let Some((head, rest)) = msg.split_once(": ")
        && !head.is_empty()
        && !head.contains(' ')
        && (path == head || path.starts_with(&format!("{head}.")))
    {
        return rest.to_string();
    }
    msg.to_string()
}

/// serde_path_to_error writes `.` for the root; we write nothing.
fn clean_path(p: &str) -> String {
    if p == "." { String::new() } else { p.to_string() }
}

/// serde_yaml appends "at line L column C"; the line is shown separately.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// A short description of a YAML value for error messages.
pub fn describe_value(v: &crate::yaml::Value) -> String {
    match v {
        crate::yaml::Value::Null => "nothing (null)".into(),
        crate::yaml::Value::Bool(b) => format!("the boolean {b}"),
        crate::yaml::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => format!("the number {i}"),
            (_, Some(u), _) => format!("the number {u}"),
            (_, _, Some(f)) => format!("the number {}", num::short_float(f)),
            _ => format!("the number {n}"),
        },
        crate::yaml::Value::String(s) => format!("the string \"{}\"", num::short_text(s)),
        crate::yaml::Value::Sequence(_) => "a list".into(),
        crate::yaml::Value::Mapping(_) => "a mapping".into(),
        crate::yaml::Value::Tagged(t) => format!("the tagged value !{}", t.tag),
    }
}

/// The effective configuration as YAML: every default filled in, the
/// hardware inline. It is itself a valid scenario.
pub fn effective_yaml(s: &Scenario) -> String {
    let rendered = crate::yaml::to_value(s).and_then(|v| crate::yaml::to_string(&untag(v)));
    rendered.unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

/// Writes serde_yaml's `!kind value` enums as `kind: value`, the form users write.
fn untag(v: crate::yaml::Value) -> crate::yaml::Value {
    use crate::yaml::Value;
    match v {
        Value::Tagged(t) => {
            let key = t.tag.to_string().trim_start_matches('!').to_string();
            let mut m = crate::yaml::Mapping::new();
            m.insert(Value::String(key), untag(t.value));
            Value::Mapping(m)
        }
        Value::Mapping(m) => Value::Mapping(m.into_iter().map(|(k, v)| (k, untag(v))).collect()),
        Value::Sequence(s) => Value::Sequence(s.into_iter().map(untag).collect()),
        other => other,
    }
}

/// The built-in names and the stem of every `.yml` file in `dirs`, sorted
/// and without repeats: what a named profile, model or calibration may be.
pub(crate) fn yml_names<'a>(builtin: impl Iterator<Item = &'a str>, dirs: &[std::path::PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = builtin.map(str::to_string).collect();
    for dir in dirs {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "yml")
                && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
            {
                names.push(stem.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}
