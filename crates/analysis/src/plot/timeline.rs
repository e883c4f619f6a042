//! `llmsim run --plot DIR`: the run over simulated time in four stacked
//! panels: batch size, KV cache usage, waiting queue and step duration.
//!
//! The data is gathered as the run goes ([`Timeline`], an observer), in
//! memory that does not grow with the run. Up to [`MAX_POINTS`] steps,
//! each step is a point. Past that, steps fall into time bins whose width
//! is a power of two nanoseconds, at most [`MAX_POINTS`] of them from
//! time 0: when a step starts past the last bin, the width doubles and
//! neighbouring bins merge. So between 1,000 and 2,000 bins cover the
//! run, each drawn at the mean of its steps (the step-duration panel also
//! at their max, so slow prefill steps stay visible); empty bins are
//! skipped. (Before the outputs were written as the run goes, the bins
//! were 2,000 equal slices of the run's length, which needs every step
//! kept until the end.)

use plotters::prelude::*;

use super::{Line, Plot, PlotError, color, draw_end_labels, err, line_panel};
use llmsim_core::engine::{Observer, StepRecord, Stretch};

pub const MAX_POINTS: usize = 2000;
pub const FILE: &str = "timeline.svg";

/// One panel's series: label and (time s, value) points.
struct Series {
    label: &'static str,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

struct Panel {
    title: &'static str,
    series: Vec<Series>,
}

/// The steps of a run as they come, bounded: the points (or bins) the
/// panels draw. An [`Observer`] of the run's `step` events; with a
/// cluster, each step's KV usage is over its own replica's blocks.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// KV blocks of a replica, and of a decode one with pools (see
    /// [`llmsim_planner::report::cluster::replica_blocks`]).
    blocks: [u32; 2],
    /// With pools: the first decode replica.
    decode_base: Option<u32>,
    /// The replica whose steps come next ([`Observer::replica`]).
    replica: Option<u32>,
    /// One per step, while there are at most [`MAX_POINTS`].
    points: Vec<Point>,
    /// Past [`MAX_POINTS`] steps: the bins, `points` then empty.
    bins: Option<Bins>,
    /// The last step's end (s): the time axis ends there.
    t_end: Option<f64>,
}

/// The four panels' values of one step: batch size, KV usage (%),
/// waiting requests, duration (ms).
type Values = [f64; 4];

#[derive(Copy, Clone, Debug)]
struct Point {
    start_ns: u64,
    v: Values,
}

/// Time bins `k << shift .. (k + 1) << shift` nanoseconds, `k` below
/// [`MAX_POINTS`]: how many steps started in each, their sums and their
/// longest duration.
#[derive(Clone, Debug)]
struct Bins {
    shift: u32,
    bins: Vec<Bin>,
}

#[derive(Copy, Clone, Debug, Default)]
struct Bin {
    steps: u32,
    sum: Values,
    max_ms: f64,
}

impl Bin {
    fn add(&mut self, v: Values) {
        self.steps += 1;
        for (s, x) in self.sum.iter_mut().zip(v) {
            *s += x;
        }
        self.max_ms = self.max_ms.max(v[3]);
    }

    fn merge(a: Bin, b: Bin) -> Bin {
        match (a.steps, b.steps) {
            (0, _) => b,
            (_, 0) => a,
            _ => Bin {
                steps: a.steps + b.steps,
                sum: [0, 1, 2, 3].map(|i| a.sum[i] + b.sum[i]),
                max_ms: a.max_ms.max(b.max_ms),
            },
        }
    }
}

impl Bins {
    /// The narrowest bins that hold a step starting at `start_ns`.
    fn holding(start_ns: u64) -> Bins {
        let mut shift = 0;
        while start_ns >> shift >= MAX_POINTS as u64 {
            shift += 1;
        }
        Bins { shift, bins: vec![Bin::default(); MAX_POINTS] }
    }

    fn add(&mut self, start_ns: u64, v: Values) {
        while start_ns >> self.shift >= MAX_POINTS as u64 {
            // Twice as wide: bins 2i and 2i + 1 become bin i.
            for i in 0..MAX_POINTS / 2 {
                self.bins[i] = Bin::merge(self.bins[2 * i], self.bins[2 * i + 1]);
            }
            self.bins[MAX_POINTS / 2..].fill(Bin::default());
            self.shift += 1;
        }
        self.bins[(start_ns >> self.shift) as usize].add(v);
    }
}

impl Timeline {
    /// An empty timeline of a run whose replicas have `blocks` KV blocks
    /// (`blocks[1]` for decode replicas `decode_base..` with pools).
    pub fn new(blocks: [u32; 2], decode_base: Option<u32>) -> Timeline {
        Timeline { blocks, decode_base, replica: None, points: Vec::new(), bins: None, t_end: None }
    }

    /// Adds step `s` of a replica with `num_blocks` KV blocks.
    pub fn add(&mut self, s: &StepRecord, num_blocks: u32) {
        let v = [
            f64::from(s.batch_size),
            100.0 * f64::from(s.kv_blocks_used) / f64::from(num_blocks.max(1)),
            f64::from(s.waiting),
            s.duration_nanos() as f64 / 1e6,
        ];
        let start_ns = s.start.as_nanos();
        self.t_end = Some(s.end.as_secs_f64());
        if let Some(b) = &mut self.bins {
            return b.add(start_ns, v);
        }
        if self.points.len() < MAX_POINTS {
            return self.points.push(Point { start_ns, v });
        }
        let latest = self.points.iter().map(|p| p.start_ns).max().unwrap_or(0).max(start_ns);
        let mut b = Bins::holding(latest);
        for p in std::mem::take(&mut self.points) {
            b.add(p.start_ns, p.v);
        }
        b.add(start_ns, v);
        self.bins = Some(b);
    }

    /// The KV blocks of the replica whose step comes next.
    fn num_blocks(&self) -> u32 {
        llmsim_planner::report::cluster::blocks_of(self.replica, self.decode_base, self.blocks)
    }

    /// Each drawn point: its time (s), the values' means and the longest
    /// duration.
    fn buckets(&self) -> Vec<Bucket> {
        match &self.bins {
            None => {
                self.points.iter().map(|p| Bucket { t: p.start_ns as f64 / 1e9, mean: p.v, max_ms: p.v[3] }).collect()
            }
            Some(b) => (b.bins.iter().enumerate())
                .filter(|(_, bin)| bin.steps > 0)
                .map(|(k, bin)| Bucket {
                    t: ((k as u64) << b.shift) as f64 / 1e9,
                    mean: bin.sum.map(|x| x / f64::from(bin.steps)),
                    max_ms: bin.max_ms,
                })
                .collect(),
        }
    }
}

impl Observer for Timeline {
    fn replica(&mut self, replica: u32) {
        self.replica = Some(replica);
    }

    fn step(&mut self, s: &StepRecord) {
        self.add(s, self.num_blocks());
    }

    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        for step in s.steps {
            self.step(step);
        }
    }
}

/// The timeline plot of `t`.
pub fn plot(title: &str, t: &Timeline) -> Result<Plot, PlotError> {
    let buckets = t.buckets();
    let series = |label: &'static str, i: usize| mean(label, &buckets, i);
    let panels = [
        Panel { title: "batch size (requests in the step)", series: vec![series("batch size", 0)] },
        Panel { title: "KV cache usage (% of blocks)", series: vec![series("KV usage %", 1)] },
        Panel { title: "waiting queue (requests)", series: vec![series("waiting", 2)] },
        Panel {
            title: "step duration (ms)",
            // The max first, so the mean is drawn over it.
            series: vec![max("step ms (max)", &buckets), series("step ms (mean)", 3)],
        },
    ];
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 1000)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&format!("{title}: timeline over simulated time"), ("sans-serif", 20)).map_err(err)?;
        let t_end = t.t_end.unwrap_or(1.0).max(1e-9);
        let mut labels = Vec::new();
        for (area, panel) in root.split_evenly((4, 1)).iter().zip(&panels) {
            let lines: Vec<Line<'_>> =
                panel.series.iter().map(|s| Line { label: s.label, color: s.color, points: &s.points }).collect();
            line_panel(area, panel.title, (t_end, "simulated time (s)"), &lines, 1, &mut labels)?;
        }
        draw_end_labels(&root, labels)?;
        root.present().map_err(err)?;
    }
    Ok(Plot { file: FILE.into(), svg })
}

/// A drawn point: start time (s), the means of the values in it and
/// the longest step duration (ms).
#[derive(Clone, Copy)]
struct Bucket {
    t: f64,
    mean: Values,
    max_ms: f64,
}

/// Panel value `i`'s means.
fn mean(label: &'static str, b: &[Bucket], i: usize) -> Series {
    Series { label, color: color(0), points: b.iter().map(|b| (b.t, b.mean[i])).collect() }
}

/// The longest step durations.
fn max(label: &'static str, b: &[Bucket]) -> Series {
    Series { label, color: color(1), points: b.iter().map(|b| (b.t, b.max_ms)).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_core::time::SimTime;

    fn step(start_ms: u64, used: u32) -> StepRecord {
        StepRecord {
            index: 0,
            start: SimTime::from_nanos(start_ms * 1_000_000),
            end: SimTime::from_nanos((start_ms + 1) * 1_000_000),
            batch_size: 1,
            tokens: 1,
            prefill_tokens: 0,
            sum_ctx: 1,
            kv_blocks_used: used,
            running: 1,
            waiting: 0,
            preempted: 0,
            compute_s: 0.0,
            memory_s: 0.0,
            cached_blocks: 0,
            evictions: 0,
        }
    }

    /// Steps on replicas, as a cluster's driver reports them.
    fn feed(t: &mut Timeline, steps: &[(u32, StepRecord)]) {
        for (r, s) in steps {
            t.replica(*r);
            t.step(s);
        }
    }

    /// A prefill replica of 100 blocks and a decode replica of 40, each
    /// using 10: 10% and 25% (by hand), not 10% twice (the bug where every
    /// step was divided by the top-level scenario's blocks).
    #[test]
    fn kv_usage_is_over_each_steps_own_replicas_blocks() {
        // Steps 0 and 2 ran on prefill replica 0, step 1 on decode replica 0.
        let steps = [(0, step(0, 10)), (1, step(1, 10)), (0, step(2, 30))];
        let mut pools = Timeline::new([100, 40], Some(1));
        feed(&mut pools, &steps);
        let percent: Vec<f64> = pools.buckets().iter().map(|b| b.mean[1]).collect();
        assert_eq!(percent, [10.0, 25.0, 30.0]);
        // Without pools every step is over the one replica size.
        let mut colocated = Timeline::new([100, 100], None);
        feed(&mut colocated, &steps);
        let percent: Vec<f64> = colocated.buckets().iter().map(|b| b.mean[1]).collect();
        assert_eq!(percent, [10.0, 10.0, 30.0]);
    }

    #[test]
    fn up_to_max_points_steps_each_step_is_a_point() {
        let mut t = Timeline::new([100, 100], None);
        for i in 0..MAX_POINTS as u64 {
            t.step(&step(i, (i % 100) as u32));
        }
        let b = t.buckets();
        assert_eq!(b.len(), MAX_POINTS);
        assert_eq!((b[7].t, b[7].mean[1], b[7].max_ms), (0.007, 7.0, 1.0));
        assert!(t.bins.is_none());
    }

    /// Past `MAX_POINTS` steps the timeline holds bins, never more than
    /// `MAX_POINTS` however long the run, and each is its steps' mean
    /// and max.
    #[test]
    fn a_long_run_is_binned_in_bounded_memory() {
        let mut t = Timeline::new([100, 100], None);
        // A step a millisecond; every tenth one uses 90 blocks and lasts
        // 10 ms longer (as `step` makes them: 1 ms each).
        let n = 1_000_000u64;
        for i in 0..n {
            let mut s = step(i, if i % 10 == 0 { 90 } else { 0 });
            if i % 10 == 0 {
                s.end = s.end.plus_nanos(10_000_000);
            }
            t.step(&s);
            assert!(t.points.len() <= MAX_POINTS);
            assert!(t.bins.as_ref().is_none_or(|b| b.bins.len() == MAX_POINTS));
        }
        let b = t.buckets();
        assert!((MAX_POINTS / 2..=MAX_POINTS).contains(&b.len()), "{} bins", b.len());
        // Bins of 2^29 ns (0.54 s) hold 536 or 537 steps from time 0 on:
        // the last step starts at 999.999 s, in bin 1,862.
        let width = b[1].t - b[0].t;
        assert_eq!(width, (1u64 << 29) as f64 / 1e9);
        assert_eq!(b.len(), 1863);
        for bin in &b[..b.len() - 1] {
            // A tenth of the steps use 90% of the blocks.
            assert!((bin.mean[1] - 9.0).abs() < 0.2, "{}", bin.mean[1]);
            assert_eq!(bin.max_ms, 11.0);
        }
        assert_eq!(t.t_end, Some(1000.0));
    }
}
