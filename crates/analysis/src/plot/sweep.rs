//! `llmsim sweep --plot DIR`: each latency's p50 and p99 against the first
//! axis, one line per value of the second axis, SLO lines where given.
//!
//! Files are named after the metric (`ttft_p99_ms.svg`). With three or more
//! axes there is one file per combination of the others' values
//! (`ttft_p99_ms_1.svg`, ...; the title names the combination). A first
//! axis of numbers is a numeric x axis; of names (hardware profiles), one
//! tick per name in axis order. With several seeds each point carries its
//! 95% interval as an error bar.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{EndLabel, Plot, PlotError, color, draw_end_labels, err, y_range};
use crate::capacity::Slo;
use crate::sweep::metric::{Family, Metric, Stat};
use crate::sweep::output::short_key;
use crate::sweep::{PointResult, SweepData};

pub const FAMILIES: [Family; 5] = [Family::Ttft, Family::Itl, Family::Tpot, Family::E2e, Family::Queue];
pub const STATS: [Stat; 2] = [Stat::P50, Stat::P99];
const SIZE: (u32, u32) = (900, 560);

// Indexing by coordinates below is safe (invariant): the data comes from a
// plan, or from shard files that passed `SweepData::check`.

/// Every plot of a sweep.
pub fn plots(data: &SweepData, slos: &[Slo]) -> Result<Vec<Plot>, PlotError> {
    if data.axes.is_empty() {
        return Err(PlotError::NoAxis);
    }
    let groups = groups(data);
    let mut out = Vec::new();
    for f in FAMILIES {
        for s in STATS {
            let m = Metric::Latency(f, s);
            for (g, (title, points)) in groups.iter().enumerate() {
                let file =
                    if groups.len() > 1 { format!("{}_{}.svg", m.name(), g + 1) } else { format!("{}.svg", m.name()) };
                let bound = slos.iter().find(|slo| slo.metric == m).map(|slo| slo.bound);
                out.push(Plot { file, svg: draw(data, m, points, title, bound)? });
            }
        }
    }
    Ok(out)
}

/// Points split by the values of axes 3 and up, with a title suffix each.
fn groups(data: &SweepData) -> Vec<(String, Vec<&PointResult>)> {
    let mut out: Vec<(Vec<usize>, String, Vec<&PointResult>)> = Vec::new();
    for p in &data.points {
        let rest: Vec<usize> = p.coords.iter().skip(2).copied().collect();
        match out.iter_mut().find(|(k, _, _)| *k == rest) {
            Some((_, _, v)) => v.push(p),
            None => {
                let title = data
                    .axes
                    .iter()
                    .zip(&p.coords)
                    .skip(2)
                    .map(|(a, &i)| format!("{}={}", short_key(&a.key), a.labels[i]))
                    .collect::<Vec<_>>()
                    .join(", ");
                out.push((rest, title, vec![p]));
            }
        }
    }
    out.into_iter().map(|(_, t, v)| (t, v)).collect()
}

/// A curve: its label and (x, mean, ci95) points in first-axis order.
struct Line {
    label: String,
    points: Vec<(f64, f64, Option<f64>)>,
}

fn lines(data: &SweepData, m: Metric, points: &[&PointResult], x_of: &dyn Fn(usize) -> f64) -> Vec<Line> {
    let second = data.axes.get(1);
    let count = second.map_or(1, |a| a.labels.len());
    (0..count)
        .map(|j| {
            let label = match second {
                Some(a) => format!("{}={}", short_key(&a.key), a.labels[j]),
                None => m.name(),
            };
            let mut pts: Vec<(usize, f64, f64, Option<f64>)> = points
                .iter()
                .filter(|p| second.is_none() || p.coords.get(1) == Some(&j))
                .filter_map(|p| {
                    let s = p.summary(m);
                    s.mean.map(|y| (p.coords[0], x_of(p.coords[0]), y, s.ci95))
                })
                .collect();
            // By x, so an axis written out of order still draws a clean line.
            pts.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            Line { label, points: pts.into_iter().map(|(_, x, y, c)| (x, y, c)).collect() }
        })
        .collect()
}

fn draw(
    data: &SweepData,
    m: Metric,
    points: &[&PointResult],
    group: &str,
    slo: Option<f64>,
) -> Result<String, PlotError> {
    let first = &data.axes[0];
    let numeric: Option<Vec<f64>> = first.values.iter().map(serde_json::Value::as_f64).collect();
    let x_of = |i: usize| numeric.as_ref().map_or(i as f64, |v| v[i]);
    let lines = lines(data, m, points, &x_of);
    let xs: Vec<f64> = (0..first.labels.len()).map(x_of).collect();
    let (x_lo, x_hi) = xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    let pad = if x_hi > x_lo { (x_hi - x_lo) * 0.04 } else { 1.0 };
    let y_hi =
        lines.iter().flat_map(|l| l.points.iter().map(|(_, y, c)| y + c.unwrap_or(0.0))).chain(slo).fold(0.0, f64::max);
    let Metric::Latency(family, stat) = m else { return Err(PlotError::NotLatency) };
    let mut title = format!("{} {} (ms) vs {}", family.title(), stat.name(), first.key);
    if !group.is_empty() {
        title.push_str(&format!(" [{group}]"));
    }
    let right = 24 + 7 * lines.iter().map(|l| l.label.len()).max().unwrap_or(8).max(12) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .margin_right(right)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((x_lo - pad)..(x_hi + pad), y_range(y_hi))
            .map_err(err)?;
        let labels = first.labels.clone();
        let numeric_x = numeric.is_some();
        let fmt_x = move |x: &f64| {
            if numeric_x {
                format_num(*x)
            } else {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            }
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(first.key.as_str())
            .y_desc(format!("{} (ms)", m.name()))
            .x_label_formatter(&fmt_x)
            .y_label_formatter(&|y| format_num(*y));
        if !numeric_x {
            mesh.x_labels(first.labels.len());
        }
        mesh.draw().map_err(err)?;
        let mut ends = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            draw_line(&mut chart, l, color(i))?;
            if let Some(&(x, y, _)) = l.points.last() {
                ends.push(EndLabel { text: l.label.clone(), at: chart.backend_coord(&(x, y)), color: color(i) });
            }
        }
        if let Some(bound) = slo {
            let style = ShapeStyle::from(&BLACK).stroke_width(2);
            let dash = DashedLineSeries::new([(x_lo - pad, bound), (x_hi + pad, bound)], 8, 5, style);
            chart.draw_series(dash).map_err(err)?;
            ends.push(EndLabel {
                text: format!("SLO {} ms", format_num(bound)),
                at: chart.backend_coord(&(x_hi + pad, bound)),
                color: BLACK,
            });
        }
        draw_end_labels(&root, ends)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The line, a dot at each point, and 95% error bars when there are several seeds.
fn draw_line(chart: &mut Chart<'_, '_>, l: &Line, c: RGBColor) -> Result<(), PlotError> {
    let style = ShapeStyle::from(&c).stroke_width(2);
    chart.draw_series(LineSeries::new(l.points.iter().map(|(x, y, _)| (*x, *y)), style)).map_err(err)?;
    chart.draw_series(l.points.iter().map(|(x, y, _)| Circle::new((*x, *y), 3, c.filled()))).map_err(err)?;
    let bars = l.points.iter().filter_map(|(x, y, ci)| ci.map(|c| (*x, *y, c)));
    chart
        .draw_series(bars.map(|(x, y, ci)| ErrorBar::new_vertical(x, (y - ci).max(0.0), y, y + ci, c, 8)))
        .map_err(err)?;
    Ok(())
}

/// A tick or bound without needless decimals.
pub fn format_num(x: f64) -> String {
    if x == x.round() && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{}", (x * 1000.0).round() / 1000.0)
    }
}
