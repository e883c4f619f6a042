//! The diff as a table people read: one row per figure, the verdict at the
//! end of each, the definitions compared and the overall result below.

use std::fmt::Write;

use super::{Comparison, Verdict};

fn num(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(v) if v.abs() >= 1000.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
    }
}

fn err(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |e| format!("{e:+.1}%"))
}

fn verdict(v: &Verdict) -> &'static str {
    match v {
        Verdict::Within => "ok",
        Verdict::Outside => "OUTSIDE",
        Verdict::NotSelected => "(not selected)",
        Verdict::NotCompared => "not compared",
    }
}

/// One comparison as text.
pub fn render(c: &Comparison, predicted: &str, measured: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "predicted  {predicted} ({} requests completed)", c.predicted_requests);
    let n = c.measured_requests.map_or("?".into(), |n| n.to_string());
    let _ = writeln!(out, "measured   {measured}: {}, {} ({n} requests completed)", c.tool, c.level);
    let _ = writeln!(out, "tolerance  {}%", c.tolerance_pct);
    let _ = writeln!(out);
    let _ = writeln!(out, "  {:<18} {:>12} {:>12} {:>9}  verdict", "metric (ms, /s)", "predicted", "measured", "error");
    for r in &c.rows {
        let mut line = format!(
            "  {:<18} {:>12} {:>12} {:>9}  {}",
            r.id,
            num(r.predicted),
            num(r.measured),
            err(r.error_pct),
            verdict(&r.verdict)
        );
        if let Some(note) = &r.note {
            let _ = write!(line, ": {note}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "definitions compared");
    for d in &c.definitions {
        let _ = writeln!(out, "  {d}");
    }
    let other_load = c.predicted_requests != c.measured_requests.unwrap_or(c.predicted_requests);
    if let (true, Some(why)) = (other_load, &c.unreplayable) {
        let _ = writeln!(
            out,
            "note: {} predicted vs {n} measured requests; {measured} cannot be replayed to compare the same load: \
             {why}",
            c.predicted_requests
        );
    } else if other_load {
        let _ = writeln!(
            out,
            "note: {} predicted vs {n} measured requests: predict on the measured requests with \
             `llmsim run SCENARIO --trace-from {measured}` to compare the same load",
            c.predicted_requests
        );
    }
    for w in &c.warnings {
        let _ = writeln!(out, "WARNING: the measurement flagged itself: {w}");
    }
    let _ = writeln!(out, "{}", summary_line(c));
    out
}

/// `result: PASSED: ...`.
pub fn summary_line(c: &Comparison) -> String {
    format!("result: {}: {}", if c.failed() { "FAILED" } else { "PASSED" }, detail(c))
}

/// How many figures were outside, and why else it failed.
pub fn detail(c: &Comparison) -> String {
    let (outside, compared) = (c.outside(), c.compared());
    let mut line = format!("{outside} of {compared} compared figures outside ±{}%", c.tolerance_pct);
    if compared == 0 {
        line.push_str(" (nothing could be compared)");
    }
    if !c.warnings.is_empty() {
        line.push_str("; the measurement reported lag, so its figures may be inflated by the measuring side");
    }
    line
}
