//! The capacity search as text for a terminal. The JSON is the
//! [`Report`] serialised as is.
//!
//! # Wire format
//!
//! `llmsim capacity --json FILE` writes one object: `scenario`, `arrivals`
//! (the process whose rate was varied), `slos`, `precision`,
//! `requests_per_probe`, `requests_rule`, `saturation_rps`, `max_rate_rps`
//! (highest passing probe), `max_rate_upper_rps` (lowest failing probe, or
//! saturation), `binding_slo` (null when only saturation limits),
//! `limited_by`, `at_max_rate` (a probe), `gpus_per_replica` (written
//! when a replica is more than one GPU: its tensor degree),
//! `cost_per_hour` (of one replica: the GPU's price x its GPUs),
//! `cost_per_million_output_tokens`, `target_rate_rps`, `replicas`,
//! `rate_per_replica_rps`, `fleet_cost_per_hour` (null when not asked or
//! not known) and `probes`: each `{rate_rps, requests, pass, slo_values,
//! failed, goodput_rps, slo_attainment_pct, requests_per_s,
//! output_tokens_per_s, e2e_mean_ms}` in the order they ran.

use std::fmt::Write;

use super::Report;
use crate::report::thousands;

/// The summary `llmsim capacity` prints.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario    {} ({} arrivals, {} requests a probe)",
        r.scenario,
        r.arrivals,
        thousands(r.requests_per_probe)
    );
    let _ = writeln!(out, "SLOs        {}", r.slos.join(", "));
    let _ = writeln!(out, "saturation  {:.3} req/s (every request queued at once)", r.saturation_rps);
    let _ = writeln!(out);
    let names: Vec<&String> = r.at_max_rate.slo_values.keys().collect();
    let mut head = format!("  {:>12}  {:>8}  {:<4}", "rate req/s", "requests", "SLOs");
    for n in &names {
        let _ = write!(head, "  {n:>14}");
    }
    let _ = writeln!(out, "{head}  {:>13}  {:>10}", "goodput req/s", "attainment");
    let mut probes = r.probes.clone();
    probes.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps).then(a.requests.cmp(&b.requests)));
    for p in &probes {
        let mut row =
            format!("  {:>12.3}  {:>8}  {:<4}", p.rate_rps, thousands(p.requests), if p.pass { "met" } else { "miss" });
        for n in &names {
            let v = p.slo_values.get(*n).copied().flatten();
            let _ = write!(row, "  {:>14}", v.map_or("-".into(), |v| format!("{v:.2}")));
        }
        let _ = writeln!(out, "{row}  {:>13.3}  {:>9.2}%", p.goodput_rps, p.slo_attainment_pct);
    }
    let _ = writeln!(out);
    let why = match &r.binding_slo {
        Some(s) => {
            format!("bound by {s}; the limit is below {:.3}, precision {}%", r.max_rate_upper_rps, r.precision * 100.0)
        }
        None => "every SLO holds up to saturation".into(),
    };
    let _ = writeln!(out, "max rate    {:.3} req/s ({why})", r.max_rate_rps);
    let m = &r.at_max_rate;
    let _ = writeln!(
        out,
        "at max rate goodput {:.3} req/s, SLO attainment {:.2}%, {:.0} output tok/s",
        m.goodput_rps, m.slo_attainment_pct, m.output_tokens_per_s
    );
    let g = r.gpus_per_replica;
    if let (Some(c), Some(per_m)) = (r.cost_per_hour, r.cost_per_million_output_tokens) {
        let of = if g > 1 { format!(" of {g} GPUs") } else { String::new() };
        let _ = writeln!(out, "cost        {per_m:.4} per million output tokens ({c} an hour per replica{of})");
    }
    if let (Some(t), Some(n), Some(each)) = (r.target_rate_rps, r.replicas, r.rate_per_replica_rps) {
        let fleet = r.fleet_cost_per_hour.map(|c| format!(", {c:.2} an hour")).unwrap_or_default();
        let gpus = if g > 1 { format!(", {} GPUs", n * u64::from(g)) } else { String::new() };
        let _ = writeln!(out, "replicas    {n} for {t} req/s ({each:.3} req/s each{gpus}{fleet})");
    }
    out
}
