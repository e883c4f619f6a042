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

use super::SweepData;

pub const FORMAT: &str = "llmsim-sweep-shard";
pub const FORMAT_VERSION: u32 = 1;

/// Shard `k` of `n` (0-based).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ShardSpec {
    pub k: usize,
    pub n: usize,
}

impl ShardSpec {
    /// Parses `K/N` with `0 <= K < N`.
    pub fn parse(text: &str) -> Result<ShardSpec, String> {
        let bad = || format!("--shard {text}: expected K/N, shard K of N counted from 0 (0/4, 1/4, 2/4, 3/4)");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let k: usize = k.trim().parse().map_err(|_| bad())?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(format!("--shard {text}: the number of shards must be at least 1"));
        }
        if k >= n {
            return Err(format!(
                "--shard {text}: there is no shard {k} of {n}; shards are numbered from 0 to {}",
                n - 1
            ));
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

    /// Reads one shard file's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<ShardFile, String> {
        let probe: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("{file}: not a shard file (not JSON: {e})"))?;
        if probe.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(format!("{file}: not a shard file (write one with `llmsim sweep --shard K/N --output FILE`)"));
        }
        let v = probe.get("format_version").and_then(serde_json::Value::as_u64);
        if v != Some(u64::from(FORMAT_VERSION)) {
            return Err(format!("{file}: shard format version {v:?}; this llmsim reads version {FORMAT_VERSION}"));
        }
        let shard: ShardFile = serde_json::from_value(probe).map_err(|e| format!("{file}: damaged shard file: {e}"))?;
        shard.data.check().map_err(|e| format!("{file}: damaged shard file: {e}"))?;
        Ok(shard)
    }
}

/// Joins shard files into the data of the whole sweep, refusing shards of
/// different sweeps, duplicates and gaps.
pub fn merge(shards: Vec<(PathBuf, ShardFile)>) -> Result<SweepData, String> {
    let Some((first_path, first)) = shards.first() else {
        return Err("no shard files given".into());
    };
    let name = |p: &PathBuf| p.display().to_string();
    for (path, s) in &shards {
        if s.fingerprint != first.fingerprint || s.points_total != first.points_total || s.data.axes != first.data.axes
        {
            return Err(format!(
                "{} and {} are shards of different sweeps (fingerprints {} and {}); merge shards of one sweep",
                name(first_path),
                name(path),
                first.fingerprint,
                s.fingerprint
            ));
        }
        if s.shards != first.shards {
            return Err(format!(
                "{} is shard {} of {} but {} is shard {} of {}: a sweep must be split one way",
                name(first_path),
                first.shard,
                first.shards,
                name(path),
                s.shard,
                s.shards
            ));
        }
        check_indices(&name(path), s)?;
    }
    let mut by_shard: BTreeMap<usize, &PathBuf> = BTreeMap::new();
    for (path, s) in &shards {
        if let Some(other) = by_shard.insert(s.shard, path) {
            return Err(format!("{} and {} are both shard {} of {}", name(other), name(path), s.shard, s.shards));
        }
    }
    let missing: Vec<String> = (0..first.shards).filter(|k| !by_shard.contains_key(k)).map(|k| k.to_string()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing shard{} {} of {} (have {}); every shard 0..{} is needed",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", "),
            first.shards,
            by_shard.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(", "),
            first.shards - 1
        ));
    }
    let mut points: Vec<_> = shards.iter().flat_map(|(_, s)| s.data.points.iter().cloned()).collect();
    points.sort_by_key(|p| p.index);
    Ok(SweepData { axes: first.data.axes.clone(), seeds: first.data.seeds, points })
}

/// A shard holds exactly its interleaved slice.
fn check_indices(file: &str, s: &ShardFile) -> Result<(), String> {
    if s.shards == 0 || s.shard >= s.shards {
        return Err(format!("{file}: shard {} of {} does not exist", s.shard, s.shards));
    }
    let expect: Vec<usize> = (s.shard..s.points_total).step_by(s.shards).collect();
    let have: Vec<usize> = s.data.points.iter().map(|p| p.index).collect();
    if have != expect || s.point_indices != expect {
        return Err(format!(
            "{file}: shard {} of {} should hold points {:?} but holds {:?}",
            s.shard, s.shards, expect, have
        ));
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
            ShardSpec::parse("3/2").unwrap_err().contains("there is no shard 3 of 2; shards are numbered from 0 to 1")
        );
        assert!(ShardSpec::parse("2/2").is_err());
        assert!(ShardSpec::parse("0/0").unwrap_err().contains("at least 1"));
        assert!(ShardSpec::parse("a/2").unwrap_err().contains("expected K/N"));
        assert!(ShardSpec::parse("1").is_err());
    }

    #[test]
    fn shards_interleave() {
        let s = ShardSpec { k: 1, n: 3 };
        let mine: Vec<usize> = (0..10).filter(|&i| s.owns(i)).collect();
        assert_eq!(mine, [1, 4, 7]);
    }
}
