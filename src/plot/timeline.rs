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

/// The timeline of a run's steps; `num_blocks` turns blocks into a fraction.
pub fn plot(title: &str, steps: &[StepRecord], num_blocks: u32) -> Result<Plot, PlotError> {
    let blocks = f64::from(num_blocks.max(1));
    let metric = |f: fn(&StepRecord) -> f64| buckets(steps, f);
    let panels = [
        Panel {
            title: "batch size (requests in the step)",
            series: vec![mean("batch size", metric(|s| f64::from(s.batch_size)))],
        },
        Panel {
            title: "KV cache usage (% of blocks)",
            series: vec![mean("KV usage %", buckets(steps, |s| 100.0 * f64::from(s.kv_blocks_used) / blocks))],
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
fn buckets(steps: &[StepRecord], f: impl Fn(&StepRecord) -> f64) -> Vec<Bucket> {
    if steps.len() <= MAX_POINTS {
        return steps.iter().map(|s| Bucket { t: s.start.as_secs_f64(), mean: f(s), max: f(s) }).collect();
    }
    let end = steps.last().map_or(0, |s| s.end.as_nanos()).max(1);
    let width = end.div_ceil(MAX_POINTS as u64).max(1);
    let mut out: Vec<(u64, f64, f64, u32)> = Vec::new();
    for s in steps {
        let k = s.start.as_nanos() / width;
        let v = f(s);
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
