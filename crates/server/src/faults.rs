//! Fault injection: per model, seeded and deterministic, what goes wrong
//! with which request, beyond what vLLM or its stand-ins do mid-stream.
//!
//! ```yaml
//! models:
//!   - name: flaky
//!     ...
//!     faults:
//!       seed: 7            # optional, default 0
//!       rate: 0.1          # fraction of requests that get a fault
//!       kinds:             # which fault, weighted (default weight 1)
//!         - {kind: http_429, retry_after_s: 2}
//!         - {kind: http_500}
//!         - {kind: http_503}
//!         - {kind: stall, after_tokens: 3, stall_ms: 500}
//!         - {kind: cut, after_tokens: 5}
//!         - {kind: malformed, after_tokens: 2}
//!       max_waiting: 32    # queue cap: 429 while this many requests wait
//! ```
//!
//! The k-th request a model accepts (k from 0, in arrival order) gets a
//! fault when a hash of (seed, k) falls under `rate`, and which one by a
//! second hash over the weights: the same arrival order gives the same
//! faults. Kinds:
//!
//! - `http_429` (with `retry-after`), `http_500`, `http_503`: the answer
//!   before the first byte, in vLLM's HTTP error envelope; the request never
//!   reaches the engine.
//! - `stall`: after `after_tokens` tokens the stream sends nothing for
//!   `stall_ms`, then goes on (the engine does not wait: what was due
//!   meanwhile comes at once). A whole answer comes `stall_ms` late.
//! - `cut`: after `after_tokens` tokens the connection is closed without
//!   the end of the body (the request is aborted in the engine, as a client
//!   disconnect is). A whole answer is cut before its body.
//! - `malformed`: after `after_tokens` tokens one SSE event carries JSON
//!   cut in half; the stream then goes on. A whole answer's body is its
//!   JSON cut in half.
//! - `max_waiting`: a request that arrives while the model's engine has
//!   this many requests waiting gets 429 with `retry-after: 1`, as a
//!   rate-limiting gateway in front of vLLM would answer (vLLM itself
//!   queues without bound unless `--max-num-queued-reqs` /
//!   `--max-num-queued-tokens` are set, and then answers 503: the models
//!   file's keys of those names, `super::engine_task`). Only `scheduler`
//!   models queue.
//!
//! Every fault is counted in `/metrics` as
//! `llmsim:faults_injected_total{kind=...}` and, with `--record`, written
//! to `<record>.faults.csv` (`at_s,request,kind`).

use llmsim_core::util::{splitmix, unit};

use std::path::Path;

use serde::Deserialize;

use llmsim_scenario::config::ConfigError;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Http429 {
        retry_after_s: u64,
    },
    Http500,
    Http503,
    Stall {
        after_tokens: u32,
        stall_ms: u64,
    },
    Cut {
        after_tokens: u32,
    },
    Malformed {
        after_tokens: u32,
    },
    /// `max_waiting` turned the request away.
    QueueFull,
}

/// Every kind's name, in `/metrics` order.
pub const NAMES: [&str; 7] = ["http_429", "http_500", "http_503", "stall", "cut", "malformed", "queue_full"];

impl Kind {
    pub fn name(&self) -> &'static str {
        NAMES[self.slot()]
    }

    /// Index into [`NAMES`].
    pub fn slot(&self) -> usize {
        match self {
            Kind::Http429 { .. } => 0,
            Kind::Http500 => 1,
            Kind::Http503 => 2,
            Kind::Stall { .. } => 3,
            Kind::Cut { .. } => 4,
            Kind::Malformed { .. } => 5,
            Kind::QueueFull => 6,
        }
    }
}

/// A model's validated fault settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Faults {
    pub seed: u64,
    pub rate: f64,
    /// Kinds with their weights (positive).
    pub kinds: Vec<(Kind, f64)>,
    pub max_waiting: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFaults {
    seed: Option<u64>,
    rate: Option<f64>,
    kinds: Option<Vec<RawKind>>,
    max_waiting: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKind {
    kind: String,
    weight: Option<f64>,
    retry_after_s: Option<f64>,
    after_tokens: Option<i64>,
    stall_ms: Option<f64>,
}

/// Longest stall: an hour.
const MAX_STALL_MS: f64 = 3_600_000.0;

impl Faults {
    /// Validates a model's `faults` section; errors name `at` (its key
    /// path), the value and what is allowed.
    pub fn parse(value: &llmsim_scenario::yaml::Value, file: &Path, at: &str) -> Result<Faults, ConfigError> {
        let raw: RawFaults = llmsim_scenario::yaml::from_value(value.clone())
            .map_err(|e| ConfigError::new(file, at, format!("{e}; see `llmsim serve --help` for the faults keys")))?;
        let rate = raw.rate.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&rate) {
            return Err(ConfigError::new(
                file,
                format!("{at}.rate"),
                format!("{rate} is not allowed: give a fraction in [0, 1]"),
            ));
        }
        let max_waiting = match raw.max_waiting {
            Some(m) if m < 0 => {
                return Err(ConfigError::new(
                    file,
                    format!("{at}.max_waiting"),
                    format!("{m} is not allowed: must be >= 0"),
                ));
            }
            m => m.map(i64::unsigned_abs),
        };
        let mut kinds = Vec::new();
        for (i, k) in raw.kinds.unwrap_or_default().into_iter().enumerate() {
            let p = |key: &str| format!("{at}.kinds[{i}].{key}");
            let weight = k.weight.unwrap_or(1.0);
            if !(weight.is_finite() && weight > 0.0) {
                return Err(ConfigError::new(file, p("weight"), format!("{weight} is not allowed: must be > 0")));
            }
            let after = |k: &RawKind| -> Result<u32, ConfigError> {
                match k.after_tokens {
                    None => Err(ConfigError::new(file, p("after_tokens"), "missing: how many tokens before the fault")),
                    Some(n) if !(0..=i64::from(u32::MAX)).contains(&n) => {
                        Err(ConfigError::new(file, p("after_tokens"), format!("{n} is not allowed: must be >= 0")))
                    }
                    Some(n) => Ok(n as u32),
                }
            };
            let kind = match k.kind.as_str() {
                "http_429" => {
                    let r = k.retry_after_s.unwrap_or(1.0);
                    if !(r.is_finite() && (0.0..=86_400.0).contains(&r)) {
                        return Err(ConfigError::new(
                            file,
                            p("retry_after_s"),
                            format!("{r} is not allowed: give seconds in [0, 86400]"),
                        ));
                    }
                    Kind::Http429 { retry_after_s: r.ceil() as u64 }
                }
                "http_500" => Kind::Http500,
                "http_503" => Kind::Http503,
                "stall" => {
                    let ms = k.stall_ms.unwrap_or(f64::NAN);
                    if !(ms.is_finite() && ms > 0.0 && ms <= MAX_STALL_MS) {
                        return Err(ConfigError::new(
                            file,
                            p("stall_ms"),
                            format!("{ms} is not allowed: give milliseconds in (0, {MAX_STALL_MS}]"),
                        ));
                    }
                    Kind::Stall { after_tokens: after(&k)?, stall_ms: ms.round().max(1.0) as u64 }
                }
                "cut" => Kind::Cut { after_tokens: after(&k)? },
                "malformed" => Kind::Malformed { after_tokens: after(&k)? },
                other => {
                    return Err(ConfigError::new(
                        file,
                        p("kind"),
                        format!(
                            "`{other}` is not a fault kind: use http_429, http_500, http_503, stall, cut or malformed"
                        ),
                    ));
                }
            };
            kinds.push((kind, weight));
        }
        if rate > 0.0 && kinds.is_empty() {
            return Err(ConfigError::new(
                file,
                format!("{at}.kinds"),
                "missing: a rate above 0 needs at least one kind",
            ));
        }
        Ok(Faults { seed: raw.seed.unwrap_or(0), rate, kinds, max_waiting })
    }

    /// The fault of the model's `k`-th request (from 0), if any.
    pub fn pick(&self, k: u64) -> Option<Kind> {
        if self.kinds.is_empty() {
            return None;
        }
        let h = splitmix(self.seed ^ splitmix(k));
        if unit(h) >= self.rate {
            return None;
        }
        let total: f64 = self.kinds.iter().map(|(_, w)| w).sum();
        let mut x = unit(splitmix(h)) * total;
        for (kind, w) in &self.kinds {
            if x < *w {
                return Some(*kind);
            }
            x -= w;
        }
        self.kinds.last().map(|(k, _)| *k)
    }
}

/// `--record`'s fault file of one model: `at_s,request,kind`, flushed per
/// line.
pub struct FaultLog {
    out: std::io::BufWriter<std::fs::File>,
}

impl FaultLog {
    pub fn create(path: &Path) -> std::io::Result<FaultLog> {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        out.write_all(b"at_s,request,kind\n")?;
        out.flush()?;
        Ok(FaultLog { out })
    }

    /// One line: when (seconds since the server started), the model's
    /// request number, the kind.
    pub fn write(&mut self, at: llmsim_core::time::SimTime, request: u64, kind: Kind) {
        use std::io::Write;
        let _ = writeln!(self.out, "{at},{request},{}", kind.name()).and_then(|()| self.out.flush());
    }
}

/// The fault file beside a model's record file (`x.csv` → `x.faults.csv`).
pub fn log_path(record: &Path) -> std::path::PathBuf {
    let stem = record.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    record.with_file_name(format!("{stem}.faults.csv"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Faults, String> {
        let v: llmsim_scenario::yaml::Value = llmsim_scenario::yaml::from_str(yaml).unwrap();
        Faults::parse(&v, Path::new("models.yml"), "models[0].faults").map_err(|e| e.to_string())
    }

    #[test]
    fn faults_are_seeded_deterministic_and_near_their_rate() {
        let f =
            parse("{seed: 3, rate: 0.25, kinds: [{kind: http_500}, {kind: cut, after_tokens: 2, weight: 3}]}").unwrap();
        let picks: Vec<Option<Kind>> = (0..4000).map(|k| f.pick(k)).collect();
        assert_eq!(picks, (0..4000).map(|k| f.pick(k)).collect::<Vec<_>>());
        let hit = picks.iter().filter(|p| p.is_some()).count();
        // 1,000 expected; binomial sd ~27: a 5-sd band.
        assert!((865..=1135).contains(&hit), "{hit}");
        let cut = picks.iter().filter(|p| matches!(p, Some(Kind::Cut { after_tokens: 2 }))).count();
        assert!((cut as f64 / hit as f64 - 0.75).abs() < 0.06, "weights 1:3 give 75% cuts: {cut}/{hit}");
        let other = parse("{seed: 4, rate: 0.25, kinds: [{kind: http_500}]}").unwrap();
        assert_ne!(
            picks.iter().map(Option::is_some).collect::<Vec<_>>(),
            (0..4000).map(|k| other.pick(k).is_some()).collect::<Vec<_>>()
        );
        assert!(parse("{rate: 0}").unwrap().pick(0).is_none());
        assert_eq!(parse("{rate: 1, kinds: [{kind: http_503}]}").unwrap().pick(9), Some(Kind::Http503));
    }

    #[test]
    fn bad_fault_settings_name_the_key() {
        let e = parse("{rate: 2, kinds: [{kind: http_500}]}").unwrap_err();
        assert!(e.contains("models[0].faults.rate: 2 is not allowed"), "{e}");
        let e = parse("{rate: 0.5, kinds: [{kind: teapot}]}").unwrap_err();
        assert!(e.contains("models[0].faults.kinds[0].kind: `teapot` is not a fault kind"), "{e}");
        let e = parse("{rate: 0.5, kinds: [{kind: stall, after_tokens: 1}]}").unwrap_err();
        assert!(e.contains("kinds[0].stall_ms: NaN is not allowed"), "{e}");
        let e = parse("{rate: 0.5, kinds: [{kind: cut}]}").unwrap_err();
        assert!(e.contains("kinds[0].after_tokens: missing"), "{e}");
        let e = parse("{rate: 0.5}").unwrap_err();
        assert!(e.contains("faults.kinds: missing"), "{e}");
        let e = parse("{rate: 0.5, kinds: [], colour: red}").unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
        assert_eq!(parse("{max_waiting: 4}").unwrap().max_waiting, Some(4));
        assert_eq!(log_path(Path::new("/t/served.m.csv")), Path::new("/t/served.m.faults.csv"));
    }
}
