//! From axes to points: the cartesian product, first axis outermost, each
//! point a validated scenario; and the sweep's fingerprint.

use std::path::PathBuf;

use super::axis::Axis;
use super::{AxisData, MAX_POINTS};
use llmsim_scenario::config::{Arrivals, Override, Scenario};

/// What to run: a base scenario, overrides applied to every point, then
/// one value of each axis.
#[derive(Clone, Debug)]
pub struct Plan {
    pub base: PathBuf,
    pub fixed: Vec<Override>,
    pub axes: Vec<Axis>,
    /// Runs per point, with seeds `seed, seed + 1, ...` (see [`seeds_of`]).
    pub seeds: u32,
}

/// A sweep whose points cannot all be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("the sweep has more than {MAX_POINTS} points; split it into several sweeps")]
    TooManyPoints,
    /// Point `number` (from 1) of `total`, its axis values, and why its
    /// scenario is not valid.
    #[error("point {number} of {total} ({values}): {source}")]
    BadPoint { number: usize, total: usize, values: String, source: Box<llmsim_scenario::config::ConfigError> },
}

/// Most points [`Plan::points_with`] loads in one parallel batch: enough
/// to keep every core busy, few enough that a bad point stops the loading
/// soon after it.
const BATCH: usize = 1024;

/// One point of the sweep.
#[derive(Clone, Debug)]
pub struct Point {
    pub index: usize,
    /// For each axis, the index of its value.
    pub coords: Vec<usize>,
    pub scenario: Scenario,
}

impl Plan {
    /// Adds one `--set` argument: `KEY=a,b,c` (or a range) as an axis,
    /// `KEY=value` as a plain override. The error is the message for the
    /// user, the argument named.
    pub fn add_set(&mut self, text: &str) -> Result<(), String> {
        match super::axis::parse_set(text).map_err(|e| format!("--set {e}"))? {
            super::axis::SetArg::Fixed(o) => self.fixed.push(o),
            super::axis::SetArg::Axis(axis) if self.axes.iter().any(|b| b.key == axis.key) => {
                return Err(format!("--set {text}: `{}` is already an axis; give all its values at once", axis.key));
            }
            super::axis::SetArg::Axis(axis) => self.axes.push(axis),
        }
        Ok(())
    }

    /// How many points the product has.
    pub fn count(&self) -> Result<usize, PlanError> {
        let mut n: usize = 1;
        for a in &self.axes {
            n = n.checked_mul(a.values.len()).filter(|&n| n <= MAX_POINTS).ok_or(PlanError::TooManyPoints)?;
        }
        Ok(n)
    }

    /// The axis value indices of point `index`: the last axis varies fastest.
    pub fn coords(&self, mut index: usize) -> Vec<usize> {
        let mut coords = vec![0; self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            coords[i] = index % a.values.len();
            index /= a.values.len();
        }
        coords
    }

    /// The fixed overrides, then one per axis, in axis order.
    pub fn overrides(&self, coords: &[usize]) -> Vec<Override> {
        let mut all = self.fixed.clone();
        all.extend(self.axes.iter().zip(coords).map(|(a, &i)| a.at(i)));
        all
    }

    /// `key=value` for each axis of a point, for messages.
    pub fn describe(&self, coords: &[usize]) -> String {
        let parts: Vec<String> = self
            .axes
            .iter()
            .zip(coords)
            .map(|(a, &i)| format!("{}={}", a.key, super::axis::label(&a.values[i])))
            .collect();
        if parts.is_empty() { "the base scenario".into() } else { parts.join(", ") }
    }

    /// Loads and validates every point (in parallel on the current rayon
    /// pool), so a bad value stops the sweep before anything runs. The error
    /// is the first bad point's, whatever the thread count, and no point
    /// far past it is loaded: see [`Plan::points_with`].
    pub fn points(&self) -> Result<Vec<Point>, PlanError> {
        self.points_with(&llmsim_scenario::config::load_scenario_with)
    }

    /// [`Plan::points`], each point's scenario made by `load` (the base
    /// file and the point's overrides). Points are loaded in batches in
    /// point order, the first of one point and each next one twice as
    /// large (up to 1,024), the points of a batch in parallel: a
    /// batch with a bad point ends the loading, and its lowest bad point
    /// is the first of the sweep (every earlier batch was good). So a bad
    /// first point costs one load, not one per point of the axis.
    pub fn points_with<L>(&self, load: &L) -> Result<Vec<Point>, PlanError>
    where
        L: Fn(&std::path::Path, &[Override]) -> Result<Scenario, llmsim_scenario::config::ConfigError> + Sync,
    {
        use rayon::prelude::*;
        let n = self.count()?;
        let mut points = Vec::with_capacity(n.min(BATCH));
        let mut size = 1;
        while points.len() < n {
            let batch = points.len()..(points.len() + size).min(n);
            let loaded: Vec<Result<Point, PlanError>> = batch
                .into_par_iter()
                .map(|index| {
                    let coords = self.coords(index);
                    load(&self.base, &self.overrides(&coords))
                        .map(|scenario| Point { index, coords: coords.clone(), scenario })
                        .map_err(|source| PlanError::BadPoint {
                            number: index + 1,
                            total: n,
                            values: self.describe(&coords),
                            source: Box::new(source),
                        })
                })
                .collect();
            for p in loaded {
                points.push(p?);
            }
            size = (size * 2).min(BATCH);
        }
        Ok(points)
    }

    pub fn axes_data(&self) -> Vec<AxisData> {
        self.axes
            .iter()
            .map(|a| AxisData {
                key: a.key.clone(),
                labels: a.labels(),
                values: a.values.iter().map(|v| serde_json::to_value(v).unwrap_or(serde_json::Value::Null)).collect(),
            })
            .collect()
    }

    /// A hash of everything that decides the sweep's output: the llmsim
    /// version, the seeds, the axes and every point's effective scenario
    /// (a trace's rows and its content and class columns included).
    /// Shards of one sweep share it.
    pub fn fingerprint(&self, points: &[Point]) -> String {
        let mut h = Fnv::new();
        h.add(b"llmsim-sweep\n");
        h.add(env!("CARGO_PKG_VERSION").as_bytes());
        h.add(&self.seeds.to_le_bytes());
        for a in &self.axes {
            h.add(a.key.as_bytes());
            for l in a.labels() {
                h.add(l.as_bytes());
            }
        }
        for p in points {
            h.add(llmsim_scenario::config::effective_yaml(&p.scenario).as_bytes());
            if let Arrivals::Trace(t) = &p.scenario.workload.arrivals {
                for r in t.rows.iter() {
                    h.add(&r.arrival.as_nanos().to_le_bytes());
                    h.add(&r.prompt.to_le_bytes());
                    h.add(&r.output.to_le_bytes());
                }
                // Content columns (prefix caching), only when the trace has them.
                for c in t.content.iter().flat_map(|c| c.rows.iter()) {
                    if let Some(p) = &c.prefix {
                        h.add(p.id.as_bytes());
                        h.add(&p.tokens.to_le_bytes());
                    }
                    h.add(&c.parent.unwrap_or(u32::MAX).to_le_bytes());
                    for id in &c.hash_ids {
                        h.add(&id.to_le_bytes());
                    }
                }
                // The `class` column (with `workload.classes`).
                if let Some(classes) = &t.classes {
                    h.add(b"classes");
                    h.add(classes);
                }
            }
        }
        format!("{:016x}", h.0)
    }
}

/// The seeds point runs use: the scenario's own seed first (so one seed
/// reproduces `llmsim run`), then the next integers. Seed `s + i` is
/// rerun alone with `llmsim run --seed s+i`.
pub fn seeds_of(scenario: &Scenario, n: u32) -> Vec<u64> {
    (0..u64::from(n)).map(|i| scenario.workload.seed.wrapping_add(i)).collect()
}

/// FNV-1a, 64 bits: small, stable across platforms and Rust versions.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::axis::{SetArg, parse_set};

    fn plan(sets: &[&str]) -> Plan {
        let axes = sets
            .iter()
            .map(|s| match parse_set(s) {
                Ok(SetArg::Axis(a)) => a,
                other => panic!("{other:?}"),
            })
            .collect();
        let base = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/base.yml"));
        Plan { base, fixed: vec![Override::parse("workload.requests=20").unwrap()], axes, seeds: 1 }
    }

    #[test]
    fn the_first_axis_is_outermost() {
        let p = plan(&["scheduler.max_batch_tokens=1024,2048", "workload.arrivals.poisson.rate=1,2,3"]);
        assert_eq!(p.count(), Ok(6));
        let coords: Vec<Vec<usize>> = (0..6).map(|i| p.coords(i)).collect();
        assert_eq!(coords, [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]);
        let points = p.points().unwrap();
        assert_eq!(points[4].scenario.scheduler.max_batch_tokens, 2048);
        assert_eq!(points[4].scenario.workload.arrivals, Arrivals::Poisson { rate: 2.0 });
        assert_eq!(points[4].scenario.workload.requests, Some(20));
    }

    #[test]
    fn no_axes_is_one_point() {
        let p = plan(&[]);
        assert_eq!(p.count(), Ok(1));
        assert_eq!(p.points().unwrap().len(), 1);
    }

    #[test]
    fn a_bad_point_is_named() {
        let p = plan(&["scheduler.max_batch_tokens=1024,0"]);
        let e = p.points().unwrap_err().to_string();
        assert!(e.starts_with("point 2 of 2 (scheduler.max_batch_tokens=0): "), "{e}");
        assert!(e.contains("must be a whole number from 1"), "{e}");
    }

    #[test]
    fn of_several_bad_points_the_first_is_named() {
        let p = plan(&["scheduler.max_batch_tokens=1024,-1,2048,0"]);
        for _ in 0..5 {
            assert!(p.points().unwrap_err().to_string().starts_with("point 2 of 4 (scheduler.max_batch_tokens=-1)"));
        }
    }

    /// Issue 34: a 100,000-point axis whose first value is invalid loaded
    /// every point before saying so (26 s). Now the first batch, of one
    /// point, ends it.
    #[test]
    fn a_bad_first_point_stops_the_loading_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let p = plan(&["scheduler.max_batch_tokens=0:99999:1"]);
        assert_eq!(p.count(), Ok(100_000));
        let loads = AtomicUsize::new(0);
        let counted = |file: &std::path::Path, o: &[Override]| {
            loads.fetch_add(1, Ordering::Relaxed);
            llmsim_scenario::config::load_scenario_with(file, o)
        };
        let e = p.points_with(&counted).unwrap_err().to_string();
        assert!(e.starts_with("point 1 of 100000 (scheduler.max_batch_tokens=0): "), "{e}");
        assert!(e.contains("must be a whole number from 1"), "{e}");
        assert_eq!(loads.load(Ordering::Relaxed), 1);
    }

    /// A bad point later on: loading stops within the batch that holds
    /// it (no later batch is loaded), and the error is still the first
    /// bad point's.
    #[test]
    fn a_bad_later_point_stops_the_loading_within_its_batch() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let p = plan(&["workload.requests=1:20000:1"]);
        let loads = AtomicUsize::new(0);
        let bad = |file: &std::path::Path, o: &[Override]| {
            loads.fetch_add(1, Ordering::Relaxed);
            let s = llmsim_scenario::config::load_scenario_with(file, o)?;
            // Points 10 and 11 (of values 10 and 11) fail.
            match s.workload.requests {
                Some(10 | 11) => llmsim_scenario::config::load_scenario_with(
                    file,
                    &[Override::parse("scheduler.max_batch_tokens=0").unwrap()],
                ),
                _ => Ok(s),
            }
        };
        let e = p.points_with(&bad).unwrap_err().to_string();
        assert!(e.starts_with("point 10 of 20000 (workload.requests=10): "), "{e}");
        // Batches 1, 2, 4, 8 hold points 1 to 15.
        assert_eq!(loads.load(Ordering::Relaxed), 15);
        // A good sweep still gets every point, in order.
        let q = plan(&["workload.requests=1:3000:1"]);
        let points = q.points().unwrap();
        assert_eq!(points.len(), 3000);
        assert!(
            points.iter().enumerate().all(|(i, p)| p.index == i && p.scenario.workload.requests == Some(i as u64 + 1))
        );
    }

    #[test]
    fn the_fingerprint_follows_the_points() {
        let a = plan(&["scheduler.max_batch_tokens=1024,2048"]);
        let b = plan(&["scheduler.max_batch_tokens=1024,4096"]);
        let fa = a.fingerprint(&a.points().unwrap());
        assert_eq!(fa, a.fingerprint(&a.points().unwrap()));
        assert_ne!(fa, b.fingerprint(&b.points().unwrap()));
        let mut c = a.clone();
        c.seeds = 3;
        assert_ne!(fa, c.fingerprint(&c.points().unwrap()));
    }

    #[test]
    fn the_fingerprint_follows_a_traces_class_column() {
        use llmsim_core::time::SimTime;
        use llmsim_scenario::config::Trace;
        use llmsim_scenario::trace::TraceRow;
        let a = plan(&[]);
        let mut points = a.points().unwrap();
        let rows = std::sync::Arc::new(vec![TraceRow { arrival: SimTime::ZERO, prompt: 10, output: 5 }; 2]);
        let trace = |classes: Option<Vec<u8>>| {
            let classes = classes.map(std::sync::Arc::new);
            Arrivals::Trace(Trace { path: "t.csv".into(), rows: rows.clone(), content: None, classes })
        };
        let mut print = |classes| {
            points[0].scenario.workload.arrivals = trace(classes);
            a.fingerprint(&points)
        };
        let (none, ab, ba) = (print(None), print(Some(vec![0, 1])), print(Some(vec![1, 0])));
        assert!(none != ab && ab != ba && none != ba, "{none} {ab} {ba}");
        assert_eq!(ab, print(Some(vec![0, 1])));
    }

    #[test]
    fn seeds_start_at_the_scenario_seed() {
        let p = plan(&[]).points().unwrap();
        assert_eq!(seeds_of(&p[0].scenario, 3), [42, 43, 44]);
    }

    #[test]
    fn too_many_points_is_an_error() {
        let p = plan(&["workload.requests=1:1000:1", "scheduler.max_batch_tokens=1:1001:1"]);
        assert!(p.count().unwrap_err().to_string().contains("more than 1000000 points"));
    }
}
