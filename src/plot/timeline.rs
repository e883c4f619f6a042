//! `llmsim run --plot DIR`: the run over simulated time in four stacked
//! panels: batch size, KV cache usage, waiting queue and step duration.
//!
//! A run has one point per step; beyond [`MAX_POINTS`] steps they are
//! grouped into equal time buckets and each panel draws the bucket's mean
//! (the step-duration panel also its max, so slow prefill steps stay
//! visible).

use plotters::prelude::*;

use super::{EndLabel, Plot, PlotError, color, draw_end_labels, err, y_range};
use crate::engine::StepRecord;

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

/// The timeline of a run's steps; `blocks_of(i)`, the KV blocks of the
/// replica that ran step `i`, turns its blocks into a fraction.
pub fn plot(title: &str, steps: &[StepRecord], blocks_of: &dyn Fn(usize) -> u32) -> Result<Plot, PlotError> {
    let metric = |f: fn(&StepRecord) -> f64| buckets(steps, |_, s| f(s));
    let panels = [
        Panel {
            title: "batch size (requests in the step)",
            series: vec![mean("batch size", metric(|s| f64::from(s.batch_size)))],
        },
        Panel {
            title: "KV cache usage (% of blocks)",
            series: vec![mean("KV usage %", kv_usage_percent(steps, blocks_of))],
        },
        Panel { title: "waiting queue (requests)", series: vec![mean("waiting", metric(|s| f64::from(s.waiting)))] },
        Panel {
            title: "step duration (ms)",
            series: {
                // The max first, so the mean is drawn over it.
                let b = metric(|s| s.duration_nanos() as f64 / 1e6);
                vec![max("step ms (max)", b.clone()), mean("step ms (mean)", b)]
            },
        },
    ];
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 1000)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&format!("{title}: timeline over simulated time"), ("sans-serif", 20)).map_err(err)?;
        let t_end = steps.last().map_or(1.0, |s| s.end.as_secs_f64()).max(1e-9);
        let mut labels = Vec::new();
        for (area, panel) in root.split_evenly((4, 1)).iter().zip(&panels) {
            let hi = panel.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
            let mut chart = ChartBuilder::on(area)
                .caption(panel.title, ("sans-serif", 15))
                .margin(8)
                .margin_right(130)
                .x_label_area_size(30)
                .y_label_area_size(56)
                .build_cartesian_2d(0.0..t_end, y_range(hi))
                .map_err(err)?;
            chart
                .configure_mesh()
                .x_desc("simulated time (s)")
                .y_labels(5)
                .x_label_formatter(&|x| super::sweep::format_num(*x))
                .y_label_formatter(&|y| super::sweep::format_num(*y))
                .draw()
                .map_err(err)?;
            for s in &panel.series {
                let c = s.color;
                chart
                    .draw_series(LineSeries::new(s.points.iter().copied(), ShapeStyle::from(&c).stroke_width(1)))
                    .map_err(err)?;
                if let Some(&end) = s.points.last() {
                    labels.push(EndLabel { text: s.label.to_string(), at: chart.backend_coord(&end), color: c });
                }
            }
        }
        draw_end_labels(&root, labels)?;
        root.present().map_err(err)?;
    }
    Ok(Plot { file: FILE.into(), svg })
}

/// A bucket: start time (s), mean and max of the values in it.
#[derive(Clone, Copy)]
struct Bucket {
    t: f64,
    mean: f64,
    max: f64,
}

fn mean(label: &'static str, b: Vec<Bucket>) -> Series {
    Series { label, color: color(0), points: b.iter().map(|b| (b.t, b.mean)).collect() }
}

fn max(label: &'static str, b: Vec<Bucket>) -> Series {
    Series { label, color: color(1), points: b.iter().map(|b| (b.t, b.max)).collect() }
}

/// One bucket per step, or [`MAX_POINTS`] equal time buckets (empty ones
/// skipped) when there are more steps.
/// Each step's KV usage in percent of its own replica's blocks, bucketed.
fn kv_usage_percent(steps: &[StepRecord], blocks_of: &dyn Fn(usize) -> u32) -> Vec<Bucket> {
    buckets(steps, |i, s| 100.0 * f64::from(s.kv_blocks_used) / f64::from(blocks_of(i).max(1)))
}

fn buckets(steps: &[StepRecord], f: impl Fn(usize, &StepRecord) -> f64) -> Vec<Bucket> {
    if steps.len() <= MAX_POINTS {
        return steps
            .iter()
            .enumerate()
            .map(|(i, s)| Bucket { t: s.start.as_secs_f64(), mean: f(i, s), max: f(i, s) })
            .collect();
    }
    let end = steps.last().map_or(0, |s| s.end.as_nanos()).max(1);
    let width = end.div_ceil(MAX_POINTS as u64).max(1);
    let mut out: Vec<(u64, f64, f64, u32)> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let k = s.start.as_nanos() / width;
        let v = f(i, s);
        match out.last_mut() {
            Some(b) if b.0 == k => {
                b.1 += v;
                b.2 = b.2.max(v);
                b.3 += 1;
            }
            _ => out.push((k, v, v, 1)),
        }
    }
    out.into_iter()
        .map(|(k, sum, max, n)| Bucket { t: (k * width) as f64 / 1e9, mean: sum / f64::from(n), max })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Placement;
    use crate::report::cluster::step_blocks;
    use crate::time::SimTime;

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

    /// A prefill replica of 100 blocks and a decode replica of 40, each
    /// using 10: 10% and 25% (by hand), not 10% twice (the bug where every
    /// step was divided by the top-level scenario's blocks).
    #[test]
    fn kv_usage_is_over_each_steps_own_replicas_blocks() {
        let steps = [step(0, 10), step(1, 10), step(2, 30)];
        // Steps 0 and 2 ran on prefill replica 0, step 1 on decode replica 0.
        let placement = Placement { steps: vec![0, 1, 0], decode_base: Some(1), ..Placement::default() };
        let blocks_of = |i: usize| step_blocks(&placement, [100, 40], i);
        let percent: Vec<f64> = kv_usage_percent(&steps, &blocks_of).iter().map(|b| b.mean).collect();
        assert_eq!(percent, [10.0, 25.0, 30.0]);
        // Without pools every step is over the one replica size.
        let colocated = Placement { steps: vec![0, 1, 0], decode_base: None, ..Placement::default() };
        let blocks_of = |i: usize| step_blocks(&colocated, [100, 100], i);
        let percent: Vec<f64> = kv_usage_percent(&steps, &blocks_of).iter().map(|b| b.mean).collect();
        assert_eq!(percent, [10.0, 10.0, 30.0]);
    }
}
