//! Splitting a sweep across machines: `--shard K/N` runs points `K, K + N,
//! K + 2N, ...` (interleaved, so every shard gets a fair mix of cheap and
//! costly points) and writes a shard file; `llmsim merge` checks the shard
//! files belong together and writes what one unsplit run would have.
//!
//! Shards are numbered from 0, like a Kubernetes Indexed Job's
//! `JOB_COMPLETION_INDEX` and a Slurm array started at 0.
//!
//! # Shard file
//!
//! JSON: `{"format": "llmsim-sweep-shard", "format_version": 1,
//! "llmsim_version", "fingerprint", "shard": K, "shards": N,
//! "points_total", "point_indices": [...], "data": SweepData}`. The
//! fingerprint hashes the version, the seeds, the axes and every point's
//! effective scenario, so shards of different sweeps never merge.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Misshapen, SweepData};

pub const FORMAT: &str = "llmsim-sweep-shard";
pub const FORMAT_VERSION: u32 = 1;

/// A `--shard` text, a shard file or a set of shard files that cannot be
/// used; each names the text or the files.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("--shard {text}: expected K/N, shard K of N counted from 0 (0/4, 1/4, 2/4, 3/4)")]
    Form { text: String },
    #[error("--shard {text}: the number of shards must be at least 1")]
    NoShards { text: String },
    #[error("--shard {text}: there is no shard {k} of {n}; shards are numbered from 0 to {}", .n - 1)]
    NoSuchShard { text: String, k: usize, n: usize },
    #[error("{file}: not a shard file (not JSON: {why})")]
    NotJson { file: String, why: String },
    #[error("{file}: not a shard file (write one with `llmsim sweep --shard K/N --output FILE`)")]
    NotAShard { file: String },
    #[error("{file}: shard format version {version:?}; this llmsim reads version {FORMAT_VERSION}")]
    Version { file: String, version: Option<u64> },
    #[error("{file}: damaged shard file: {why}")]
    Damaged { file: String, why: String },
    #[error("no shard files given")]
    NoFiles,
    #[error(
        "{first} and {other} are shards of different sweeps (fingerprints {first_fingerprint} and \
         {other_fingerprint}); merge shards of one sweep"
    )]
    OtherSweep { first: String, other: String, first_fingerprint: String, other_fingerprint: String },
    #[error(
        "{first} is shard {first_k} of {first_n} but {other} is shard {other_k} of {other_n}: a sweep must be split one way"
    )]
    OtherSplit { first: String, first_k: usize, first_n: usize, other: String, other_k: usize, other_n: usize },
    #[error("{first} and {other} are both shard {k} of {n}")]
    Twice { first: String, other: String, k: usize, n: usize },
    #[error(
        "missing shard{} {} of {n} (have {}); every shard 0..{} is needed",
        if .missing.len() > 1 { "s" } else { "" },
        list(.missing),
        list(.have),
        .n - 1
    )]
    Missing { missing: Vec<usize>, n: usize, have: Vec<usize> },
    #[error("{file}: shard {k} of {n} does not exist")]
    Nonexistent { file: String, k: usize, n: usize },
    #[error("{file}: shard {k} of {n} should hold points {expect:?} but holds {have:?}")]
    WrongPoints { file: String, k: usize, n: usize, expect: Vec<usize>, have: Vec<usize> },
}

/// `0, 2, 3`.
fn list(ks: &[usize]) -> String {
    ks.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
}

/// Shard `k` of `n` (0-based).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ShardSpec {
    pub k: usize,
    pub n: usize,
}

impl ShardSpec {
    /// Parses `K/N` with `0 <= K < N`.
    pub fn parse(text: &str) -> Result<ShardSpec, ShardError> {
        let bad = || ShardError::Form { text: text.to_string() };
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let k: usize = k.trim().parse().map_err(|_| bad())?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(ShardError::NoShards { text: text.to_string() });
        }
        if k >= n {
            return Err(ShardError::NoSuchShard { text: text.to_string(), k, n });
        }
        Ok(ShardSpec { k, n })
    }

    pub fn owns(&self, index: usize) -> bool {
        index % self.n == self.k
    }
}

/// What a shard writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardFile {
    pub format: String,
    pub format_version: u32,
    pub llmsim_version: String,
    pub fingerprint: String,
    pub shard: usize,
    pub shards: usize,
    pub points_total: usize,
    pub point_indices: Vec<usize>,
    pub data: SweepData,
}

impl ShardFile {
    pub fn new(spec: ShardSpec, fingerprint: String, points_total: usize, data: SweepData) -> ShardFile {
        ShardFile {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            llmsim_version: env!("CARGO_PKG_VERSION").into(),
            fingerprint,
            shard: spec.k,
            shards: spec.n,
            points_total,
            point_indices: data.points.iter().map(|p| p.index).collect(),
            data,
        }
    }

    /// Reads one shard file's text; `file` names it in errors. The text is
    /// read three times and never into a JSON tree (a shard may hold
    /// hundreds of megabytes): for its syntax, for its format and version
    /// (every other key skipped), and into the shard.
    pub fn parse(file: &str, text: &str) -> Result<ShardFile, ShardError> {
        let damaged = |why: String| ShardError::Damaged { file: file.to_string(), why };
        serde_json::from_str::<serde::de::IgnoredAny>(text)
            .map_err(|e| ShardError::NotJson { file: file.to_string(), why: e.to_string() })?;
        let probe = serde_json::from_str::<Probe>(text).unwrap_or_default();
        if probe.format.as_ref().and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(ShardError::NotAShard { file: file.to_string() });
        }
        let v = probe.format_version.as_ref().and_then(serde_json::Value::as_u64);
        if v != Some(u64::from(FORMAT_VERSION)) {
            return Err(ShardError::Version { file: file.to_string(), version: v });
        }
        let shard: ShardFile = serde_json::from_str(text).map_err(|e| damaged(e.to_string()))?;
        shard.data.check().map_err(|e: Misshapen| damaged(e.to_string()))?;
        Ok(shard)
    }
}

/// The keys of a shard file that say what it is; the rest is skipped.
#[derive(Default, Deserialize)]
struct Probe {
    format: Option<serde_json::Value>,
    format_version: Option<serde_json::Value>,
}

/// Joins shard files into the data of the whole sweep, refusing shards of
/// different sweeps, duplicates and gaps.
pub fn merge(shards: Vec<(PathBuf, ShardFile)>) -> Result<SweepData, ShardError> {
    let Some((first_path, first)) = shards.first() else {
        return Err(ShardError::NoFiles);
    };
    let name = |p: &PathBuf| p.display().to_string();
    for (path, s) in &shards {
        if s.fingerprint != first.fingerprint || s.points_total != first.points_total || s.data.axes != first.data.axes
        {
            return Err(ShardError::OtherSweep {
                first: name(first_path),
                other: name(path),
                first_fingerprint: first.fingerprint.clone(),
                other_fingerprint: s.fingerprint.clone(),
            });
        }
        if s.shards != first.shards {
            return Err(ShardError::OtherSplit {
                first: name(first_path),
                first_k: first.shard,
                first_n: first.shards,
                other: name(path),
                other_k: s.shard,
                other_n: s.shards,
            });
        }
        check_indices(&name(path), s)?;
    }
    let mut by_shard: BTreeMap<usize, &PathBuf> = BTreeMap::new();
    for (path, s) in &shards {
        if let Some(other) = by_shard.insert(s.shard, path) {
            return Err(ShardError::Twice { first: name(other), other: name(path), k: s.shard, n: s.shards });
        }
    }
    let missing: Vec<usize> = (0..first.shards).filter(|k| !by_shard.contains_key(k)).collect();
    if !missing.is_empty() {
        return Err(ShardError::Missing { missing, n: first.shards, have: by_shard.keys().copied().collect() });
    }
    let mut points: Vec<_> = shards.iter().flat_map(|(_, s)| s.data.points.iter().cloned()).collect();
    points.sort_by_key(|p| p.index);
    Ok(SweepData { axes: first.data.axes.clone(), seeds: first.data.seeds, points })
}

/// A shard holds exactly its interleaved slice.
fn check_indices(file: &str, s: &ShardFile) -> Result<(), ShardError> {
    if s.shards == 0 || s.shard >= s.shards {
        return Err(ShardError::Nonexistent { file: file.to_string(), k: s.shard, n: s.shards });
    }
    let expect: Vec<usize> = (s.shard..s.points_total).step_by(s.shards).collect();
    let have: Vec<usize> = s.data.points.iter().map(|p| p.index).collect();
    if have != expect || s.point_indices != expect {
        return Err(ShardError::WrongPoints { file: file.to_string(), k: s.shard, n: s.shards, expect, have });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_numbered_from_zero() {
        assert_eq!(ShardSpec::parse("0/2"), Ok(ShardSpec { k: 0, n: 2 }));
        assert_eq!(ShardSpec::parse(" 1 / 2 "), Ok(ShardSpec { k: 1, n: 2 }));
        assert!(
            ShardSpec::parse("3/2")
                .unwrap_err()
                .to_string()
                .contains("there is no shard 3 of 2; shards are numbered from 0 to 1")
        );
        assert!(ShardSpec::parse("2/2").is_err());
        assert!(ShardSpec::parse("0/0").unwrap_err().to_string().contains("at least 1"));
        assert!(ShardSpec::parse("a/2").unwrap_err().to_string().contains("expected K/N"));
        assert!(ShardSpec::parse("1").is_err());
    }

    #[test]
    fn shards_interleave() {
        let s = ShardSpec { k: 1, n: 3 };
        let mine: Vec<usize> = (0..10).filter(|&i| s.owns(i)).collect();
        assert_eq!(mine, [1, 4, 7]);
    }
}
