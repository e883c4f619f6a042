//! Sweeps: one scenario run over the cartesian product of axis values, with
//! several seeds per point if asked, in parallel, split into shards if the
//! sweep outgrows one machine.
//!
//! A point is one validated scenario and runs single-threaded (the engine is
//! sequential by nature); points run side by side on a rayon pool. Each run
//! depends only on its scenario and seed, and results are gathered in point
//! order, so the output bytes are the same at any thread count and for any
//! split into shards once merged.
//!
//! The pieces: [`axis`] and [`mod@file`] read axes; [`plan`] makes points;
//! [`exec`] runs them; [`output`] renders CSV, JSON and the terminal table;
//! [`shard`] writes and merges shard files; [`metric`] names the metrics;
//! [`stats`] gives means and confidence intervals over seeds.

pub mod axis;
pub mod exec;
pub mod file;
pub mod metric;
pub mod output;
pub mod plan;
pub mod shard;
pub mod stats;

use serde::{Deserialize, Serialize};

use llmsim_planner::metrics::RunResult;
use metric::Metric;
use stats::Estimate;

/// Most points one sweep may have.
pub const MAX_POINTS: usize = 1_000_000;

/// An axis as reported: its key, its values and how they are written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AxisData {
    pub key: String,
    pub labels: Vec<String>,
    pub values: Vec<serde_json::Value>,
}

/// What one point produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    pub index: usize,
    pub coords: Vec<usize>,
    pub seeds: Vec<u64>,
    /// One result per seed, in seed order.
    pub results: Vec<RunResult>,
}

impl PointResult {
    /// A metric over this point's seeds.
    pub fn summary(&self, m: Metric) -> Estimate {
        let values: Vec<Option<f64>> = self.results.iter().map(|r| m.value(r)).collect();
        Estimate::of(&values)
    }
}

impl SweepData {
    /// Checks the shape that the renderers index into: every point has one
    /// coordinate per axis, within the axis, and one result per seed. Data
    /// made by [`exec`] always has it; a shard file is checked on reading.
    pub fn check(&self) -> Result<(), Misshapen> {
        for a in &self.axes {
            if a.labels.is_empty() || a.labels.len() != a.values.len() {
                return Err(Misshapen::Axis { key: a.key.clone(), labels: a.labels.len(), values: a.values.len() });
            }
        }
        for p in &self.points {
            let inside =
                p.coords.len() == self.axes.len() && p.coords.iter().zip(&self.axes).all(|(&c, a)| c < a.labels.len());
            let seeds = p.seeds.len() == self.seeds as usize && p.results.len() == p.seeds.len();
            if !inside || !seeds {
                return Err(Misshapen::Point { index: p.index });
            }
        }
        Ok(())
    }
}

/// Sweep data whose shape does not hold ([`SweepData::check`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Misshapen {
    #[error("axis `{key}` has {labels} labels for {values} values")]
    Axis { key: String, labels: usize, values: usize },
    #[error("point {index} does not match the sweep's axes and seeds")]
    Point { index: usize },
}

/// A sweep's results, complete or one shard's part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepData {
    pub axes: Vec<AxisData>,
    /// Seeds per point.
    pub seeds: u32,
    /// In point order.
    pub points: Vec<PointResult>,
}
