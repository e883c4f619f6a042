//! `llmsim run --plot DIR` of a fleet with `cluster.autoscale` or
//! `cluster.timeline`: DIR/fleet.svg, three panels on one time axis, one
//! point per window at its end: the load (offered and served requests a
//! second), the replicas (ready, and ready plus starting), and the p99
//! TTFT with the SLO's bound as a flat line when there is one. Time is in
//! hours when the run is longer than two.

use plotters::prelude::*;

use super::{Line, Plot, PlotError, color, draw_end_labels, err, line_panel};
use llmsim_planner::metrics::over_time::WindowRow;

pub const FILE: &str = "fleet.svg";

struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// The fleet plot of `rows`; `ttft_bound_ms` is the SLO's `ttft_p99_ms`,
/// `pools` the names of `cluster.pools` (each pool's ready replicas get a
/// line of their own).
pub fn plot(title: &str, rows: &[WindowRow], ttft_bound_ms: Option<f64>, pools: &[String]) -> Result<Plot, PlotError> {
    // Hours past two hours of simulated time.
    let last = rows.last().map_or(1.0, |w| w.end_s);
    let (unit, per) = if last > 7200.0 { ("h", 3600.0) } else { ("s", 1.0) };
    let at = |f: &dyn Fn(&WindowRow) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter().filter_map(|w| f(w).map(|v| (w.end_s / per, v))).collect()
    };
    let line =
        |label: &str, i: usize, points: Vec<(f64, f64)>| Series { label: label.to_string(), color: color(i), points };
    let t_end = (last / per).max(1e-9);
    let mut ttft = vec![line("TTFT p99", 0, at(&|w| w.ttft_p99_ms))];
    if let Some(b) = ttft_bound_ms {
        ttft.push(line("SLO", 3, vec![(0.0, b), (t_end, b)]));
    }
    let mut replicas = vec![
        line("asked for", 1, at(&|w| Some(f64::from(w.ready + w.starting)))),
        line("ready", 0, at(&|w| Some(f64::from(w.ready)))),
    ];
    for (i, name) in pools.iter().enumerate() {
        let points = at(&|w| w.pools.get(i).map(|p| f64::from(p.0)));
        replicas.push(line(&format!("ready {name}"), 4 + i, points));
    }
    let panels = [
        (
            "load (requests a second)",
            vec![line("offered", 0, at(&|w| Some(w.offered_rps))), line("served", 1, at(&|w| Some(w.served_rps)))],
        ),
        ("replicas", replicas),
        ("TTFT p99 of the window's first tokens (ms)", ttft),
    ];
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 800)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&format!("{title}: the fleet over simulated time"), ("sans-serif", 20)).map_err(err)?;
        let mut labels = Vec::new();
        let x_desc = format!("simulated time ({unit})");
        for (area, (caption, series)) in root.split_evenly((3, 1)).iter().zip(&panels) {
            let lines: Vec<Line<'_>> =
                series.iter().map(|s| Line { label: &s.label, color: s.color, points: &s.points }).collect();
            line_panel(area, caption, (t_end, &x_desc), &lines, 2, &mut labels)?;
        }
        draw_end_labels(&root, labels)?;
        root.present().map_err(err)?;
    }
    Ok(Plot { file: FILE.into(), svg })
}
