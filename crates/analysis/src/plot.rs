//! SVG plots with plotters: sweep curves and a run's timeline.
//!
//! Only plotters' SVG backend is used, with no font feature: text is written
//! as SVG `<text>` for the viewer to render, and plotters' built-in width
//! estimate places it. No fontconfig, freetype or other system library is
//! needed to build or run. Every line carries its own label at its right
//! end (nudged apart when they would overlap), so a plot reads without a
//! legend.
//!
//! Plotting is pure: data in, SVG text out. The CLI writes the files.

pub mod fleet;
pub mod sweep;
pub mod timeline;

use plotters::coord::Shift;
use plotters::prelude::*;

/// One SVG file to write.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    pub file: String,
    pub svg: String,
}

/// Distinct colours (Tableau 10), in order of use.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0xba, 0xb0, 0xac),
];

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A plotters error as a [`PlotError`].
pub fn err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// Why a plot was not drawn.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlotError {
    /// A sweep with no axis has nothing to draw against.
    #[error("--plot needs at least one axis: the plots draw metrics against the first axis")]
    NoAxis,
    /// Only latency metrics are drawn (an internal misuse).
    #[error("not a latency")]
    NotLatency,
    /// The plotting library failed (its reason, as it debug-prints it).
    #[error("cannot draw the plot: {0}")]
    Draw(String),
}

/// A label to put at the right end of a line, in pixels.
pub struct EndLabel {
    pub text: String,
    pub at: (i32, i32),
    pub color: RGBColor,
}

/// Draws labels just right of their points, pushed apart vertically so
/// that none overlaps the one above.
pub fn draw_end_labels(area: &DrawingArea<SVGBackend<'_>, Shift>, mut labels: Vec<EndLabel>) -> Result<(), PlotError> {
    const GAP: i32 = 14;
    labels.sort_by_key(|l| l.at.1);
    let mut last = i32::MIN / 2;
    for l in labels {
        let y = l.at.1.max(last + GAP);
        last = y;
        let style = TextStyle::from(("sans-serif", 13).into_font()).color(&l.color).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Left,
                plotters::style::text_anchor::VPos::Center,
            ),
        );
        area.draw(&Text::new(l.text, (l.at.0 + 8, y), style)).map_err(err)?;
    }
    Ok(())
}

/// One line of a panel: its label, colour and points.
pub struct Line<'a> {
    pub label: &'a str,
    pub color: RGBColor,
    pub points: &'a [(f64, f64)],
}

/// Draws one panel of lines over `0..t_end` on `area` (the y axis from 0
/// to the highest point), each line `stroke` wide; adds each line's end
/// label to `labels`, to be drawn over the whole figure.
pub fn line_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    (t_end, x_desc): (f64, &str),
    lines: &[Line<'_>],
    stroke: u32,
    labels: &mut Vec<EndLabel>,
) -> Result<(), PlotError> {
    let hi = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(8)
        .margin_right(130)
        .x_label_area_size(30)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..t_end, y_range(hi))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_labels(5)
        .x_label_formatter(&|x| sweep::format_num(*x))
        .y_label_formatter(&|y| sweep::format_num(*y))
        .draw()
        .map_err(err)?;
    for l in lines {
        let style = ShapeStyle::from(&l.color).stroke_width(stroke);
        chart.draw_series(LineSeries::new(l.points.iter().copied(), style)).map_err(err)?;
        if let Some(&end) = l.points.last() {
            labels.push(EndLabel { text: l.label.to_string(), at: chart.backend_coord(&end), color: l.color });
        }
    }
    Ok(())
}

/// `0..=hi` padded by 10%, never empty.
pub fn y_range(hi: f64) -> std::ops::Range<f64> {
    if hi.is_finite() && hi > 0.0 { 0.0..hi * 1.1 } else { 0.0..1.0 }
}
