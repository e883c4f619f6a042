//! What a fit may change: `--fit KEY[=LO:HI],...`.
//!
//! Any numeric scenario key can be fitted, each within bounds. The keys a
//! calibration profile holds (efficiency and the overhead terms) have
//! default bounds; any other key needs its bounds written out, because no
//! default range suits every key (a bandwidth, a block count).

use llmsim_scenario::config::keys::{self, Kind};

/// Fitted unless `--fit` says otherwise: how close the engine comes to the
/// datasheet's compute and memory peaks, and what it pays per step and per
/// request.
pub const DEFAULT_KEYS: [&str; 4] =
    ["efficiency.compute", "efficiency.memory", "latency.step_overhead_ms", "latency.request_overhead_ms"];

/// Default bounds, inclusive, for the keys a calibration profile holds.
pub const DEFAULT_BOUNDS: [(&str, f64, f64); 15] = [
    ("efficiency.compute", 0.05, 1.0),
    ("efficiency.memory", 0.05, 1.0),
    ("latency.step_overhead_ms", 0.0, 50.0),
    ("latency.request_overhead_ms", 0.0, 500.0),
    ("latency.per_layer_overhead_us", 0.0, 500.0),
    ("latency.per_sequence_overhead_us", 0.0, 500.0),
    ("efficiency.gemm_half_tokens", 0.0, 1024.0),
    ("efficiency.attention_compute", 0.2, 1.0),
    ("efficiency.attention_memory", 0.05, 1.0),
    ("efficiency.allreduce", 0.1, 10.0),
    ("efficiency.expert_gemm", 0.1, 4.0),
    ("latency.allreduce_us", 0.5, 100.0),
    ("latency.eager_layer_us", 0.0, 500.0),
    ("latency.per_expert_us", 0.0, 100.0),
    ("latency.resend_jitter_ms", 0.0, 200.0),
];

/// A belief about a key before any run is seen: a typical value and how
/// far from it the key plausibly lies (one standard deviation). It weighs
/// in the fit as much as one more measured figure off by
/// [`PRIOR_WEIGHT_LOG_ERROR`] would when the key sits one `sigma` away.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Prior {
    pub mean: f64,
    pub sigma: f64,
}

/// The log error a prior's `sigma` is worth: a key one `sigma` from its
/// prior costs the loss what one more figure per run off by 10% would.
pub const PRIOR_WEIGHT_LOG_ERROR: f64 = 0.1;

/// Priors of the keys a profile holds, from what the kernels and engines
/// are known to reach (docs/calibration.md, "Priors"): GEMMs 50-75% of the
/// dense peak, streaming reads 75-90% of the bandwidth, FlashAttention
/// 40-75% of the 16-bit peak, paged KV reads 50-90%, a few ms of host work
/// a step, a few microseconds a kernel launch or a small all-reduce.
pub const DEFAULT_PRIORS: [(&str, Prior); 15] = [
    ("efficiency.compute", Prior { mean: 0.6, sigma: 0.2 }),
    ("efficiency.memory", Prior { mean: 0.8, sigma: 0.1 }),
    ("latency.step_overhead_ms", Prior { mean: 2.0, sigma: 2.0 }),
    ("latency.request_overhead_ms", Prior { mean: 5.0, sigma: 10.0 }),
    ("latency.per_layer_overhead_us", Prior { mean: 10.0, sigma: 10.0 }),
    ("latency.per_sequence_overhead_us", Prior { mean: 10.0, sigma: 20.0 }),
    ("efficiency.gemm_half_tokens", Prior { mean: 32.0, sigma: 64.0 }),
    ("efficiency.attention_compute", Prior { mean: 0.5, sigma: 0.2 }),
    ("efficiency.attention_memory", Prior { mean: 0.7, sigma: 0.2 }),
    ("efficiency.allreduce", Prior { mean: 1.0, sigma: 0.5 }),
    ("efficiency.expert_gemm", Prior { mean: 1.0, sigma: 0.5 }),
    ("latency.allreduce_us", Prior { mean: 8.0, sigma: 5.0 }),
    ("latency.eager_layer_us", Prior { mean: 30.0, sigma: 30.0 }),
    ("latency.per_expert_us", Prior { mean: 3.0, sigma: 3.0 }),
    ("latency.resend_jitter_ms", Prior { mean: 5.0, sigma: 10.0 }),
];

/// The default prior of `key`, if it has one.
pub fn default_prior(key: &str) -> Option<Prior> {
    DEFAULT_PRIORS.iter().find(|(k, _)| *k == key).map(|(_, p)| *p)
}

/// Parses `--prior KEY=MEAN:SIGMA` entries for the fitted `keys`.
pub fn parse_priors(specs: &[String], keys: &[FitKey]) -> Result<Vec<(String, Prior)>, String> {
    let mut out: Vec<(String, Prior)> = Vec::new();
    for item in specs.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        let bad = || {
            format!(
                "--prior `{item}`: give KEY=MEAN:SIGMA with a finite MEAN and SIGMA > 0, e.g. efficiency.compute=0.6:0.2"
            )
        };
        let (key, v) = item.split_once('=').ok_or_else(bad)?;
        let key = key.trim();
        if !keys.iter().any(|k| k.key == key) {
            return Err(format!("--prior `{key}` is not a fitted key: fit it with --fit, or drop the prior"));
        }
        let (m, s) = v.split_once(':').ok_or_else(bad)?;
        let (mean, sigma): (f64, f64) = (m.trim().parse().map_err(|_| bad())?, s.trim().parse().map_err(|_| bad())?);
        if !(mean.is_finite() && sigma.is_finite() && sigma > 0.0) {
            return Err(bad());
        }
        if out.iter().any(|(k, _)| k == key) {
            return Err(format!("--prior names `{key}` twice"));
        }
        out.push((key.to_string(), Prior { mean, sigma }));
    }
    Ok(out)
}

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
