//! The checker every builder in `config/` uses (`Check`: a value
//! against its allowed range, the key's in [`super::schema`], an error
//! naming the file and key path). Below the builders (`validate`, `deployment`,
//! `architecture`, `cluster`), so none of them needs another for it.

use std::path::Path;

use super::ConfigError;
use super::limits::Range;
use super::num::short_float;
use super::schema;
use llmsim_core::util::thousands;

// The defaults moved to `defaults` (the key table reads them too); the old paths stay.
pub use super::defaults::*;

/// Checks values against their allowed ranges, naming `file` in errors.
pub struct Check<'a> {
    pub file: &'a Path,
}

impl Check<'_> {
    pub fn err(&self, path: &str, msg: impl std::fmt::Display) -> ConfigError {
        ConfigError::new(self.file, path, msg)
    }

    /// A real number in `range` (see [`super::limits`]).
    pub fn real(&self, path: &str, v: f64, range: &Range) -> Result<f64, ConfigError> {
        if range.contains(v) {
            return Ok(v);
        }
        let why =
            if v.is_finite() { format!("must be in {range}") } else { format!("must be a finite number in {range}") };
        Err(self.err(path, format!("{} is not allowed: {why}", short_float(v))))
    }

    /// A whole number in `range` (see [`super::limits`]). Values read as `i64`
    /// saturate at its ends ([`super::num::whole`]): those were too large
    /// (or too small) to show.
    pub fn whole(&self, path: &str, v: i64, range: &Range) -> Result<u64, ConfigError> {
        if range.contains_whole(i128::from(v)) {
            return Ok(v as u64);
        }
        let allowed = match range {
            Range::Whole { lo, hi } => format!("a whole number from {} to {}", thousands(*lo), thousands(*hi)),
            Range::Real { .. } => format!("in {range}"),
        };
        Err(self.err(path, format!("{} is not allowed: must be {allowed}", shown(v))))
    }

    /// [`Check::real`] in the range [`super::schema`] gives key `path`.
    pub fn real_at(&self, path: &str, v: f64) -> Result<f64, ConfigError> {
        self.real(path, v, schema::range(path))
    }

    /// [`Check::whole`] in the range [`super::schema`] gives key `path`.
    pub fn whole_at(&self, path: &str, v: i64) -> Result<u64, ConfigError> {
        self.whole(path, v, schema::range(path))
    }

    /// [`Check::whole32`] in the range [`super::schema`] gives key `path`.
    pub fn whole32_at(&self, path: &str, v: i64) -> Result<u32, ConfigError> {
        self.whole32(path, v, schema::range(path))
    }

    /// [`Check::whole`] for a range within `u32`.
    pub fn whole32(&self, path: &str, v: i64, range: &Range) -> Result<u32, ConfigError> {
        self.whole(path, v, range).map(|n| n.min(u64::from(u32::MAX)) as u32)
    }
}

/// A whole number for a message; the saturated ends of `i64` stand for
/// values too large to show.
fn shown(v: i64) -> String {
    match v {
        i64::MAX => "a number this large".into(),
        i64::MIN => "a number this small".into(),
        _ => v.to_string(),
    }
}
