//! A sweep's results as bytes: CSV (one row per point), JSON (every full
//! result) and the compact terminal table. Pure functions of [`SweepData`],
//! so `llmsim merge` writes exactly what one run would have.
//!
//! # CSV
//!
//! One column per axis (its key, cells as written), then one per metric of
//! [`Metric::all`], named with its unit (`ttft_p99_ms`, `requests_per_s`,
//! `kv_peak_frac`). With `--seeds N > 1` each metric cell is the mean over
//! seeds and is followed by `<name>_ci95`, the half-width of its 95%
//! interval. Empty cells: no sample (e.g. TPOT when every output is 1 token).
//!
//! # JSON
//!
//! An array with one object per point, in point order:
//! `{"point", "axes": {key: value, ...} (axis order), "seeds": [...],
//! "summary": {metric: {n, mean, ci95}}, "results": [RunResult, ...]}`;
//! `results` holds one full result (docs/results.md) per seed.

use std::fmt::Write;

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::metric::{Family, Metric, Stat};
use super::stats::Estimate;
use super::{PointResult, SweepData};
use llmsim_planner::metrics::RunResult;

/// The CSV text.
pub fn csv(data: &SweepData) -> csv::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let many = data.seeds > 1;
    let mut header: Vec<String> = data.axes.iter().map(|a| a.key.clone()).collect();
    for m in Metric::all() {
        header.push(m.name());
        if many {
            header.push(format!("{}_ci95", m.name()));
        }
    }
    w.write_record(&header)?;
    for p in &data.points {
        let mut row = axis_labels(data, p);
        for m in Metric::all() {
            let s = p.summary(m);
            row.push(s.mean.map(|x| m.format(x)).unwrap_or_default());
            if many {
                row.push(s.ci95.map(|x| format!("{x:.*}", m.decimals().max(3))).unwrap_or_default());
            }
        }
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

fn axis_labels(data: &SweepData, p: &PointResult) -> Vec<String> {
    data.axes.iter().zip(&p.coords).map(|(a, &i)| a.labels.get(i).cloned().unwrap_or_default()).collect()
}

/// A list of pairs written as a JSON object in list order.
struct Ordered<K, V>(Vec<(K, V)>);

impl<K: Serialize, V: Serialize> Serialize for Ordered<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[derive(serde::Serialize)]
struct PointOut<'a> {
    point: usize,
    axes: Ordered<&'a str, &'a serde_json::Value>,
    seeds: &'a [u64],
    summary: Ordered<String, Estimate>,
    results: &'a [RunResult],
}

/// The JSON text.
pub fn json(data: &SweepData) -> String {
    let points: Vec<PointOut> = data
        .points
        .iter()
        .map(|p| PointOut {
            point: p.index,
            axes: Ordered(
                data.axes
                    .iter()
                    .zip(&p.coords)
                    .map(|(a, &i)| (a.key.as_str(), a.values.get(i).unwrap_or(&serde_json::Value::Null)))
                    .collect(),
            ),
            seeds: &p.seeds,
            summary: Ordered(Metric::all().into_iter().map(|m| (m.name(), p.summary(m))).collect()),
            results: &p.results,
        })
        .collect();
    llmsim_core::util::to_json(&points)
}

/// The metrics the terminal table shows.
const TABLE: [(&str, Metric); 8] = [
    ("ttft p50", Metric::Latency(Family::Ttft, Stat::P50)),
    ("ttft p99", Metric::Latency(Family::Ttft, Stat::P99)),
    ("itl p50", Metric::Latency(Family::Itl, Stat::P50)),
    ("itl p99", Metric::Latency(Family::Itl, Stat::P99)),
    ("e2e p99", Metric::Latency(Family::E2e, Stat::P99)),
    ("req/s", Metric::RequestsPerS),
    ("out tok/s", Metric::OutputTokensPerS),
    ("preempt", Metric::Preemptions),
];

/// A compact table: the axes, then latencies (ms) and throughput; with
/// several seeds, `mean±ci95`.
pub fn table(data: &SweepData) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut head: Vec<String> = data.axes.iter().map(|a| short_key(&a.key)).collect();
    head.extend(TABLE.iter().map(|(h, _)| (*h).to_string()));
    rows.push(head);
    for p in &data.points {
        let mut row = axis_labels(data, p);
        for (_, m) in TABLE {
            let s = p.summary(m);
            let d = if matches!(m, Metric::Latency(..)) { 2 } else { m.decimals().min(1) };
            let cell = match (s.mean, s.ci95) {
                (None, _) => "-".to_string(),
                (Some(x), None) => format!("{x:.d$}"),
                (Some(x), Some(c)) => format!("{x:.d$}±{c:.d$}"),
            };
            row.push(cell);
        }
        rows.push(row);
    }
    let cols = rows[0].len(); // invariant: the header row is always there
    let width: Vec<usize> = (0..cols).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    let naxes = data.axes.len();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(
                |(c, cell)| {
                    if c < naxes { format!("{cell:<w$}", w = width[c]) } else { format!("{cell:>w$}", w = width[c]) }
                },
            )
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    if data.points.is_empty() {
        out.push_str("(no points)\n");
    }
    let _ = writeln!(out, "latencies in ms{}", if data.seeds > 1 { "; mean±95% CI over seeds" } else { "" });
    out
}

/// The last segment of a key path, or the last two if the last is generic.
pub fn short_key(key: &str) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    match parts.as_slice() {
        [.., a, b] if matches!(*b, "rate" | "mean" | "std" | "max" | "min") => format!("{a}.{b}"),
        [.., b] => (*b).to_string(),
        [] => String::new(),
    }
}
