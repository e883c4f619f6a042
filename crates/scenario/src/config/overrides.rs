//! `--set key.path=value`: change one key of a scenario before validation.

use std::path::Path;

use crate::yaml::{Mapping, Value};

use super::ConfigError;
use super::keys::KeyError;

/// One override: a dotted key path and a YAML value.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub path: Vec<String>,
    pub value: Value,
}

impl Override {
    /// Parses `a.b.c=value`; the value is read as YAML (`8192` is a number,
    /// `h100-80gb` a string, `[1, 2]` a list). The key path must be one the
    /// scenario schema has (see [`super::keys`]), so a typo is caught, with
    /// the nearest valid path, before any file is read.
    pub fn parse(text: &str) -> Result<Override, KeyError> {
        let (key, value) = text.split_once('=').ok_or_else(|| KeyError::NoValue { text: text.to_string() })?;
        Self::parse_key(key)?;
        let value = Self::parse_value(value)?;
        Ok(Override { path: key.trim().split('.').map(str::to_string).collect(), value })
    }

    /// [`Override::parse`], and the value must have the key's shape (a whole
    /// number for `scheduler.max_batch_tokens`, ...).
    pub fn parse_checked(text: &str) -> Result<Override, KeyError> {
        let o = Self::parse(text)?;
        let kind = Self::parse_key(&o.key())?;
        super::keys::check_value(&o.key(), kind, &o.value)?;
        Ok(o)
    }

    /// Checks a key path on its own; returns what the key holds.
    pub fn parse_key(key: &str) -> Result<super::keys::Kind, KeyError> {
        let key = key.trim();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(KeyError::Malformed { key: key.to_string() });
        }
        super::keys::check_path(key)
    }

    /// Reads one value as YAML, under the same limits and number grammar
    /// as a file. A whole number too large for 64 bits becomes a float
    /// (as it would read in a file), so validation can say it is too large.
    pub fn parse_value(value: &str) -> Result<Value, KeyError> {
        let text = value.trim();
        let shown = super::num::short_text(text);
        crate::yaml::precheck(text).map_err(|r| KeyError::Refused { value: shown.clone(), why: r.message })?;
        match crate::yaml::from_str(text) {
            Ok(v) => Ok(v),
            Err(_) if is_decimal_integer(text) => {
                Ok(Value::Number(crate::yaml::Number::from(text.parse::<f64>().unwrap_or(f64::INFINITY))))
            }
            Err(e) => Err(KeyError::NotYaml { value: shown, why: crate::yaml::user_words(&e.to_string()) }),
        }
    }

    pub fn key(&self) -> String {
        self.path.join(".")
    }

    /// Sets the key in `root`, creating missing mappings on the way. A
    /// hardware profile given by name is expanded first when a key inside
    /// it is overridden; `model: NAME` becomes `model: {preset: NAME}`.
    pub fn apply(&self, root: &mut Value, file: &Path) -> Result<(), ConfigError> {
        if self.path.len() > 1 && self.path[0] == "hardware" {
            expand_hardware(root, file)?;
        }
        if self.path.len() > 1 && self.path[0] == "model" {
            expand_model_name(root);
        }
        let mut node = root;
        for (i, seg) in self.path.iter().enumerate() {
            if let Some(k) = list_index(&self.path[..i], seg) {
                node = self.item(node, k, &self.path[..i], file)?;
                if i + 1 == self.path.len() {
                    *node = self.value.clone();
                    return Ok(());
                }
                continue;
            }
            if node.is_null() {
                *node = Value::Mapping(Mapping::new());
            }
            let map = match node {
                Value::Mapping(m) => m,
                other => {
                    return Err(ConfigError::new(
                        file,
                        self.path[..i].join("."),
                        format!("--set {}: cannot set a key inside {}", self.key(), super::describe_value(other)),
                    ));
                }
            };
            let key = Value::String(seg.clone());
            if i + 1 == self.path.len() {
                map.insert(key, self.value.clone());
                return Ok(());
            }
            node = map.entry(key).or_insert(Value::Null);
        }
        Ok(())
    }
}

impl Override {
    /// Item `k` of the list at `at` (`cluster.pools`), named in the error
    /// when the list is shorter or absent.
    fn item<'a>(
        &self,
        node: &'a mut Value,
        k: usize,
        at: &[String],
        file: &Path,
    ) -> Result<&'a mut Value, ConfigError> {
        let at = at.join(".");
        let len = match &*node {
            Value::Sequence(items) => items.len(),
            other => {
                return Err(ConfigError::new(
                    file,
                    at.clone(),
                    format!("--set {}: `{at}` is {}, not a list to index", self.key(), super::describe_value(other)),
                ));
            }
        };
        match node {
            Value::Sequence(items) if k < len => Ok(&mut items[k]),
            _ => Err(ConfigError::new(
                file,
                at.clone(),
                format!("--set {}: `{at}` has {len} entries (counted from 0)", self.key()),
            )),
        }
    }
}

/// A list position in a key path: a number after `cluster.pools` (the one
/// list whose items `--set` reaches, see [`super::keys::check_path`]).
fn list_index(before: &[String], seg: &str) -> Option<usize> {
    (before == ["cluster", "pools"] && !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()))
        .then(|| seg.parse().ok())
        .flatten()
}

/// Replaces `model: NAME` with `model: {preset: NAME}`, so keys can be set beside it.
fn expand_model_name(root: &mut Value) {
    let Some(Value::String(name)) = root.get("model").cloned() else {
        return;
    };
    if let Value::Mapping(m) = root {
        let mut model = Mapping::new();
        model.insert(Value::String("preset".into()), Value::String(name));
        m.insert(Value::String("model".into()), Value::Mapping(model));
    }
}

/// `-123`, `+45`, `678`: digits with at most a sign.
fn is_decimal_integer(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Replaces `hardware: NAME` with the profile's mapping.
fn expand_hardware(root: &mut Value, file: &Path) -> Result<(), ConfigError> {
    let Some(Value::String(name)) = root.get("hardware").cloned() else {
        return Ok(());
    };
    let found = super::hardware::find(&name, file)?;
    let profile = super::yaml_value(&found.text, &found.file)?;
    if let Value::Mapping(m) = root {
        m.insert(Value::String("hardware".into()), profile);
    }
    Ok(())
}
