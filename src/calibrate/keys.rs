//! What a fit may change: `--fit KEY[=LO:HI],...`.
//!
//! Any numeric scenario key can be fitted, each within bounds. The keys a
//! calibration profile holds (efficiency and the overhead terms) have
//! default bounds; any other key needs its bounds written out, because no
//! default range suits every key (a bandwidth, a block count).

use crate::config::keys::{self, Kind};

/// Fitted unless `--fit` says otherwise: how close the engine comes to the
/// datasheet's compute and memory peaks, and what it pays per step and per
/// request.
pub const DEFAULT_KEYS: [&str; 4] =
    ["efficiency.compute", "efficiency.memory", "latency.step_overhead_ms", "latency.request_overhead_ms"];

/// Default bounds, inclusive, for the keys a calibration profile holds.
pub const DEFAULT_BOUNDS: [(&str, f64, f64); 6] = [
    ("efficiency.compute", 0.05, 1.0),
    ("efficiency.memory", 0.05, 1.0),
    ("latency.step_overhead_ms", 0.0, 50.0),
    ("latency.request_overhead_ms", 0.0, 500.0),
    ("latency.per_layer_overhead_us", 0.0, 500.0),
    ("latency.per_sequence_overhead_us", 0.0, 500.0),
];

/// One fitted key and its bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct FitKey {
    pub key: String,
    pub lo: f64,
    pub hi: f64,
    /// A whole-number key: candidates are rounded.
    pub integer: bool,
}

impl FitKey {
    /// `x` in `[lo, hi]` from `u` in `[0, 1]`.
    pub fn from_unit(&self, u: f64) -> f64 {
        let x = self.lo + u.clamp(0.0, 1.0) * (self.hi - self.lo);
        if self.integer { x.round() } else { x }
    }

    /// `u` in `[0, 1]` from `x` in `[lo, hi]`.
    pub fn to_unit(&self, x: f64) -> f64 {
        if self.hi > self.lo { ((x - self.lo) / (self.hi - self.lo)).clamp(0.0, 1.0) } else { 0.0 }
    }

    pub fn contains(&self, x: f64) -> bool {
        x >= self.lo && x <= self.hi
    }
}

/// A `--fit` entry that cannot be used, with the key and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitKeyError {
    #[error("--fit names `{0}` twice")]
    Twice(String),
    /// Not a scenario key ([`keys::check_path`]'s reason).
    #[error("--fit {0}")]
    UnknownKey(String),
    #[error("--fit `{key}` is not a numeric key (it holds {holds}); fit keys are numbers such as {}", DEFAULT_KEYS.join(", "))]
    NotNumeric { key: String, holds: String },
    #[error("--fit `{0}` has no default bounds: write them as {0}=LO:HI (for example {0}=1:100)")]
    NoBounds(String),
    #[error("--fit `{key}={text}`: bounds are LO:HI, two finite numbers with LO < HI (e.g. 0:20)")]
    BadBounds { key: String, text: String },
}

/// Parses `--fit` entries (each may hold several, comma-separated, outside
/// brackets): `KEY` or `KEY=LO:HI`. Empty: the default keys.
pub fn parse(specs: &[String]) -> Result<Vec<FitKey>, FitKeyError> {
    let items: Vec<String> =
        specs.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    if items.is_empty() {
        return DEFAULT_KEYS.iter().map(|k| parse_one(k)).collect();
    }
    let mut out: Vec<FitKey> = Vec::new();
    for item in &items {
        let key = parse_one(item)?;
        if out.iter().any(|k| k.key == key.key) {
            return Err(FitKeyError::Twice(key.key));
        }
        out.push(key);
    }
    Ok(out)
}

fn parse_one(item: &str) -> Result<FitKey, FitKeyError> {
    let (key, bounds) = match item.split_once('=') {
        Some((k, b)) => (k.trim(), Some(b.trim())),
        None => (item.trim(), None),
    };
    let kind = keys::check_path(key).map_err(|e| FitKeyError::UnknownKey(e.to_string()))?;
    let integer = match kind {
        Kind::Number | Kind::NumberOrMapping => false,
        Kind::Integer => true,
        other => {
            return Err(FitKeyError::NotNumeric { key: key.to_string(), holds: other.describe().to_string() });
        }
    };
    let (lo, hi) = match bounds {
        Some(b) => parse_bounds(key, b)?,
        None => DEFAULT_BOUNDS
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, lo, hi)| (*lo, *hi))
            .ok_or_else(|| FitKeyError::NoBounds(key.to_string()))?,
    };
    Ok(FitKey { key: key.to_string(), lo, hi, integer })
}

fn parse_bounds(key: &str, text: &str) -> Result<(f64, f64), FitKeyError> {
    let bad = || FitKeyError::BadBounds { key: key.to_string(), text: text.to_string() };
    let (lo, hi) = text.split_once(':').ok_or_else(bad)?;
    let (lo, hi): (f64, f64) = (lo.trim().parse().map_err(|_| bad())?, hi.trim().parse().map_err(|_| bad())?);
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return Err(bad());
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &[&str]) -> Result<Vec<FitKey>, String> {
        parse(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>()).map_err(|e| e.to_string())
    }

    #[test]
    fn no_fit_means_the_four_default_keys_with_their_bounds() {
        let k = p(&[]).unwrap();
        assert_eq!(k.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(), DEFAULT_KEYS);
        assert_eq!((k[0].lo, k[0].hi), (0.05, 1.0));
        assert_eq!((k[3].lo, k[3].hi), (0.0, 500.0));
    }

    #[test]
    fn keys_and_bounds_are_read_from_lists_and_repeats() {
        let k = p(&["efficiency.memory,latency.per_layer_overhead_us=0:100", "model.kv_cache.num_blocks=100:5000"])
            .unwrap();
        assert_eq!(k.len(), 3);
        assert_eq!((k[1].lo, k[1].hi, k[1].integer), (0.0, 100.0, false));
        assert!(k[2].integer);
        assert_eq!(k[2].from_unit(0.5), 2550.0);
        assert_eq!(k[1].to_unit(25.0), 0.25);
    }

    #[test]
    fn bad_keys_and_bounds_say_what_is_allowed() {
        let e = p(&["efficency.compute"]).unwrap_err();
        assert!(e.contains("did you mean `efficiency.compute`"), "{e}");
        let e = p(&["workload.arrivals"]).unwrap_err();
        assert!(e.contains("not a numeric key"), "{e}");
        let e = p(&["name"]).unwrap_err();
        assert!(e.contains("not a numeric key (it holds a string)"), "{e}");
        let e = p(&["hardware.memory_bandwidth_gbps"]).unwrap_err();
        assert!(e.contains("no default bounds") && e.contains("=LO:HI"), "{e}");
        let e = p(&["efficiency.compute=1:0.5"]).unwrap_err();
        assert!(e.contains("LO < HI"), "{e}");
        let e = p(&["efficiency.compute=a:b"]).unwrap_err();
        assert!(e.contains("two finite numbers"), "{e}");
        let e = p(&["efficiency.compute,efficiency.compute"]).unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }
}
