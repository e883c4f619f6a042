//! What a run measured, by name: every number of the result JSON by key
//! path (`ttft_ms.p50`, `throughput.output_tokens_per_s`, `kv.peak_blocks`),
//! plus figures some experiments need that the result JSON does not carry
//! (the longest freeze a preempted stream sees, the most requests running at
//! once, the cost of pure decode steps, the total tokens computed). Those
//! come from the per-request records and from an observer that tallies
//! steps as they happen, so no run keeps its steps in memory.

use std::collections::BTreeMap;

use crate::sweep::stats::Estimate;
use llmsim_core::engine::{Observer, StepRecord};
use llmsim_planner::metrics::{Collector, CollectorOptions, RequestRecord, RunResult};
use llmsim_scenario::config::Scenario;

/// Metrics computed here, with what each one is (for errors and docs/experiments.md).
pub const DERIVED: &[(&str, &str)] = &[
    ("max_running", "most requests running at once (max over steps of the running queue's length)"),
    ("max_gap_ms", "longest gap between two tokens of any request (exact, not from a histogram)"),
    ("preempted_requests", "requests preempted at least once"),
    (
        "preempted_max_gap_ms",
        "longest gap between two tokens of a request that was preempted: the longest freeze a preempted stream sees",
    ),
    ("decode_steps", "steps that computed no prompt or recompute tokens"),
    ("decode_step_ms", "mean duration of those pure decode steps"),
    ("decode_step_ms_per_stream", "their total duration over their total batch size: decode step time per stream"),
    ("work_tokens", "tokens computed over the run: prompts, recomputes and decodes"),
    ("prefill_work_tokens", "of those, the tokens of requests that were not decoding"),
    ("busy_s", "sum of all step durations"),
    ("queue_share", "queue_ms.mean / ttft_ms.mean: the share of TTFT spent waiting to be scheduled"),
];

/// The metrics of one run. `None`: nothing to measure (no sample).
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub values: BTreeMap<String, Option<f64>>,
}

impl Measured {
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).copied().flatten()
    }
}

/// A row's metrics over its seeds: for each, the mean over the seeds that
/// have a value and the half-width of its 95% Student-t interval (what
/// `llmsim sweep --seeds` reports), and how many seeds ran.
#[derive(Clone, Debug, PartialEq)]
pub struct OverSeeds {
    pub seeds: usize,
    pub values: BTreeMap<String, Estimate>,
}

/// [`Summary::of`], except that seeds agreeing exactly give that value and
/// an interval of exactly 0 (a mean of equal floats can differ from them in
/// the last bit, and an exact prediction must still pass).
fn summarize(xs: &[Option<f64>]) -> Estimate {
    let present: Vec<f64> = xs.iter().flatten().copied().collect();
    match present.split_first() {
        Some((first, rest)) if present.len() >= 2 && rest.iter().all(|x| x.to_bits() == first.to_bits()) => {
            Estimate { n: present.len(), mean: Some(*first), ci95: Some(0.0) }
        }
        _ => Estimate::of(xs),
    }
}

impl OverSeeds {
    /// Summarises one row's runs, one per seed.
    pub fn of(runs: &[Measured]) -> OverSeeds {
        let mut names: Vec<&String> = runs.iter().flat_map(|m| m.values.keys()).collect();
        names.sort();
        names.dedup();
        let values = names
            .into_iter()
            .map(|n| {
                let xs: Vec<Option<f64>> = runs.iter().map(|m| m.get(n)).collect();
                (n.clone(), summarize(&xs))
            })
            .collect();
        OverSeeds { seeds: runs.len(), values }
    }

    /// The metric's summary; `None` when no seed has a value.
    pub fn get(&self, name: &str) -> Option<Estimate> {
        self.values.get(name).copied().filter(|s| s.mean.is_some())
    }

    /// The mean, when every seed has a value.
    pub fn mean(&self, name: &str) -> Option<f64> {
        self.get(name).and_then(|s| s.mean)
    }

    /// The half-width of the 95% interval of the mean (0 for one seed, or
    /// when every seed gave the same value).
    pub fn ci95(&self, name: &str) -> f64 {
        self.get(name).and_then(|s| s.ci95).unwrap_or(0.0)
    }

    /// Every seed has a value.
    pub fn complete(&self, name: &str) -> bool {
        self.get(name).is_some_and(|s| s.n == self.seeds)
    }
}

/// A row's run that stopped at a run limit: the scenario's file and name,
/// and the limit.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{} ({name}): {source}", .file.display())]
pub struct MeasureFailed {
    pub file: std::path::PathBuf,
    pub name: String,
    pub source: llmsim_planner::run_driver::SimError,
}

/// Runs the scenario and measures it; a run that stops at a run limit
/// ([`llmsim_planner::run_driver::SimError`]) is an error naming the scenario.
pub fn measure(s: &Scenario) -> Result<Measured, MeasureFailed> {
    let mut tally = StepTally::default();
    let out = llmsim_planner::Run::new(s).observed(&mut tally).map_err(|source| MeasureFailed {
        file: s.source.clone(),
        name: s.name.clone(),
        source,
    })?;
    let mut values = result_values(&out.result);
    values.extend(tally.values());
    values.extend(request_values(&out.requests));
    let share = match (out.result.queue_ms.mean, out.result.ttft_ms.mean) {
        (Some(q), Some(t)) if t > 0.0 => Some(q / t),
        _ => None,
    };
    values.insert("queue_share".into(), share);
    Ok(Measured { values })
}

/// Every metric name a run of `s` has, sorted.
pub fn names(s: &Scenario) -> Vec<String> {
    // `finish`, not `summarize`: it adds what the scenario turns on (prefix_cache.*).
    let classes = llmsim_planner::workload::classes::Classes::of(s);
    let empty = Collector::new(&s.capacity, CollectorOptions::default()).classes(classes).finish(s).result;
    let mut all: Vec<String> = result_values(&empty).into_keys().collect();
    all.extend(DERIVED.iter().map(|(n, _)| (*n).to_string()));
    if s.cluster.is_some() {
        // The result JSON's cluster figures (docs/clusters.md), absent from an empty single-engine result.
        all.extend(["imbalance", "gpus"].map(String::from));
    }
    if let Some(c) = s.cluster.as_ref().filter(|c| c.timeline.is_some()) {
        // Results over time (docs/clusters.md).
        let keys = ["window_s", "windows", "end_s", "gpu_hours", "cost", "peak_replicas", "slo_missed"];
        all.extend(keys.map(|k| format!("over_time.{k}")));
        if c.autoscale.is_some() {
            let keys = ["target", "min_replicas", "max_replicas", "cold_start_s", "scale_ups", "scale_downs"];
            all.extend(keys.map(|k| format!("over_time.autoscale.{k}")));
            all.extend(["t_s", "from", "to"].map(|k| format!("over_time.autoscale.events.0.{k}")));
        }
    }
    if s.cluster.as_ref().is_some_and(|c| c.disagg.is_some()) {
        // Prefill/decode pools: the KV transfer and each pool's counts.
        all.extend(["count", "mean", "p50", "p90", "p99", "max"].map(|k| format!("kv_transfer_ms.{k}")));
        for pool in ["prefill", "decode"] {
            all.extend(["requests", "preemptions", "imbalance", "gpus"].map(|k| format!("pools.{pool}.{k}")));
        }
    }
    all.sort();
    all
}

/// The result JSON's numbers (and nulls) by dotted key path.
fn result_values(r: &RunResult) -> BTreeMap<String, Option<f64>> {
    let mut out = BTreeMap::new();
    if let Ok(v) = serde_json::to_value(r) {
        flatten("", &v, &mut out);
    }
    out
}

fn flatten(path: &str, v: &serde_json::Value, out: &mut BTreeMap<String, Option<f64>>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                flatten(&p, v, out);
            }
        }
        // List elements by index (`speculative.acceptance_by_position.2`),
        // as the scenario's variables are.
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{path}.{i}"), v, out);
            }
        }
        Value::Number(n) => {
            out.insert(path.to_string(), n.as_f64());
        }
        Value::Null => {
            out.insert(path.to_string(), None);
        }
        _ => {}
    }
}

/// Figures from the per-request records.
fn request_values(requests: &[RequestRecord]) -> BTreeMap<String, Option<f64>> {
    let ms = |ns: u64| ns as f64 / 1e6;
    let preempted: Vec<&RequestRecord> = requests.iter().filter(|r| r.preemptions > 0).collect();
    BTreeMap::from([
        ("max_gap_ms".to_string(), requests.iter().map(|r| r.max_gap_ns).max().map(ms)),
        ("preempted_requests".to_string(), Some(preempted.len() as f64)),
        ("preempted_max_gap_ms".to_string(), preempted.iter().map(|r| r.max_gap_ns).max().map(ms)),
    ])
}

/// Sums over steps, kept as they happen.
#[derive(Default)]
struct StepTally {
    max_running: u32,
    work_tokens: u64,
    prefill_tokens: u64,
    busy_ns: u128,
    decode_steps: u64,
    decode_ns: u128,
    decode_batch: u64,
}

impl Observer for StepTally {
    fn step(&mut self, s: &StepRecord) {
        let d = u128::from(s.duration_nanos());
        self.max_running = self.max_running.max(s.running);
        self.work_tokens += u64::from(s.tokens);
        self.prefill_tokens += u64::from(s.prefill_tokens);
        self.busy_ns += d;
        if s.prefill_tokens == 0 {
            self.decode_steps += 1;
            self.decode_ns += d;
            self.decode_batch += u64::from(s.batch_size);
        }
    }
}

impl StepTally {
    fn values(&self) -> BTreeMap<String, Option<f64>> {
        let decode_ms = self.decode_ns as f64 / 1e6;
        let per = |n: u64| (n > 0).then(|| decode_ms / n as f64);
        BTreeMap::from([
            ("max_running".to_string(), Some(f64::from(self.max_running))),
            ("work_tokens".to_string(), Some(self.work_tokens as f64)),
            ("prefill_work_tokens".to_string(), Some(self.prefill_tokens as f64)),
            ("busy_s".to_string(), Some(self.busy_ns as f64 / 1e9)),
            ("decode_steps".to_string(), Some(self.decode_steps as f64)),
            ("decode_step_ms".to_string(), per(self.decode_steps)),
            ("decode_step_ms_per_stream".to_string(), per(self.decode_batch)),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_core::time::SimTime;

    fn step(prefill: u32, batch: u32, running: u32, ms: u64) -> StepRecord {
        StepRecord {
            index: 0,
            start: SimTime::ZERO,
            end: SimTime::ZERO.plus_nanos(ms * 1_000_000),
            batch_size: batch,
            tokens: batch + prefill,
            prefill_tokens: prefill,
            sum_ctx: 0,
            kv_blocks_used: 0,
            running,
            waiting: 0,
            preempted: 0,
            compute_s: 0.0,
            memory_s: 0.0,
            cached_blocks: 0,
            evictions: 0,
        }
    }

    #[test]
    fn the_step_tally_separates_pure_decode_steps() {
        let mut t = StepTally::default();
        t.step(&step(512, 4, 4, 10));
        t.step(&step(0, 4, 5, 6));
        t.step(&step(0, 2, 2, 4));
        let v = t.values();
        assert_eq!(v["max_running"], Some(5.0));
        assert_eq!(v["decode_steps"], Some(2.0));
        assert_eq!(v["decode_step_ms"], Some(5.0));
        assert_eq!(v["decode_step_ms_per_stream"], Some(10.0 / 6.0));
        assert_eq!(v["work_tokens"], Some(512.0 + 10.0));
        assert_eq!(v["busy_s"], Some(0.020));
    }

    #[test]
    fn a_row_over_seeds_is_the_mean_and_the_student_t_interval() {
        let run = |x: Option<f64>| Measured { values: BTreeMap::from([("m".to_string(), x)]) };
        let rows = OverSeeds::of(&[run(Some(1.0)), run(Some(2.0)), run(Some(3.0))]);
        assert_eq!(rows.mean("m"), Some(2.0));
        // s = 1, t(0.975, 2) = 4.3027: half-width 4.3027 / sqrt(3).
        assert!((rows.ci95("m") - 4.302_652_730 / 3f64.sqrt()).abs() < 1e-12);
        assert!(rows.complete("m"));
        let partial = OverSeeds::of(&[run(Some(1.0)), run(None)]);
        assert!(!partial.complete("m") && partial.mean("m") == Some(1.0) && partial.ci95("m") == 0.0);
        assert_eq!(OverSeeds::of(&[run(None), run(None)]).get("m"), None);
        // Equal values: that value exactly, and no interval.
        let x = 0.1 + 0.2;
        let same = OverSeeds::of(&[run(Some(x)), run(Some(x)), run(Some(x))]);
        assert_eq!((same.mean("m"), same.ci95("m")), (Some(x), 0.0));
    }

    #[test]
    fn no_decode_step_means_no_decode_figure() {
        let mut t = StepTally::default();
        t.step(&step(100, 1, 1, 3));
        assert_eq!(t.values()["decode_step_ms"], None);
    }
}
