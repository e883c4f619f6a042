//! The capacity search as text for a terminal. The JSON is the
//! [`SearchResult`] serialised as is.
//!
//! # Wire format
//!
//! `llmsim capacity --json FILE` writes one object: `scenario`, `arrivals`
//! (the process whose rate was varied), `slos`, `precision`, `seeds` (every
//! probe runs each of them), `requests_per_probe` and `requests_rule` (SLO
//! probes, requests a seed), `saturation_requests_per_probe`,
//! `saturation_rps` (the most requests a second served at a sustained
//! rate), `sustained_rate_rps` and `unsustained_rate_rps` (the saturation
//! bracket; the latter null when every rate up to 10^6 req/s was
//! sustained), `burst_rps` (every request at once, one seed), `max_rate_rps`
//! (highest passing probe), `max_rate_upper_rps` (lowest failing probe, or
//! saturation), `binding_slo` (null when only saturation limits),
//! `limited_by`, `at_max_rate` (a probe), `gpus_per_replica` (written
//! when a replica is more than one GPU: its tensor degree),
//! `cost_per_hour` (of one replica: the GPU's price x its GPUs),
//! `cost_per_million_output_tokens`, `target_rate_rps`, `replicas`,
//! `rate_per_replica_rps`, `fleet_cost_per_hour` (null when not asked or
//! not known), `saturation_probes`: each `{rate_rps, requests, sustained,
//! queue_growth, queue_growth_by_seed, served_rps}`, and `probes`: each
//! `{rate_rps, requests, pass, seeds_met, slo_values (worst over seeds),
//! failed, goodput_rps, slo_attainment_pct, requests_per_s,
//! output_tokens_per_s, e2e_mean_ms}` (means over seeds), plus `stopped`
//! (seeds whose run ended early, written when above 0; the figures are
//! then the other seeds'), both in the order they ran. With `--class NAME`: `class` and `other_classes_rps` (the
//! varied class, and the other classes' rate beside it).

use std::fmt::Write;

use super::SearchResult;
use llmsim_core::util::thousands;

/// The summary `llmsim capacity` prints.
pub fn render(r: &SearchResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario    {} ({} arrivals, {} requests a probe on each of {})",
        r.scenario,
        r.arrivals,
        thousands(r.requests_per_probe),
        seeds(&r.seeds)
    );
    let _ = writeln!(out, "SLOs        {}", r.slos.join(", "));
    if let (Some(class), Some(others)) = (&r.class, r.other_classes_rps) {
        let _ = writeln!(
            out,
            "class       {class}: every rate below is {class}'s alone, beside the other classes' {others:.3} req/s"
        );
    }
    let limit = match r.unsustained_rate_rps {
        Some(u) => format!("the queue grows from {u:.3} req/s offered"),
        None => format!("every rate up to {:.0} req/s was", super::saturation::MAX_RATE),
    };
    let _ = writeln!(
        out,
        "saturation  {:.3} req/s, the most served at a sustained rate (sustained up to {:.3} req/s offered; {limit})",
        r.saturation_rps, r.sustained_rate_rps
    );
    let _ = writeln!(
        out,
        "burst       {:.3} req/s with every request queued at once ({:+.1}% against saturation)",
        r.burst_rps,
        (r.burst_rps / r.saturation_rps - 1.0) * 100.0
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  saturation search ({} requests a seed): sustained while the waiting queue grows by at most {}% \
         of the arrivals",
        thousands(r.saturation_requests_per_probe),
        super::saturation::GROWTH_LIMIT * 100.0
    );
    let _ = writeln!(out, "  {:>12}  {:>8}  {:>12}  {:>12}", "rate req/s", "requests", "queue growth", "served req/s");
    let mut sat = r.saturation_probes.clone();
    sat.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps).then(a.requests.cmp(&b.requests)));
    for p in &sat {
        let _ = writeln!(
            out,
            "  {:>12.3}  {:>8}  {:>11.2}%  {:>12.3}  {}",
            p.rate_rps,
            thousands(p.requests),
            if p.queue_growth.abs() < 5e-5 { 0.0 } else { p.queue_growth * 100.0 },
            p.served_rps,
            if p.sustained { "sustained" } else { "grows" }
        );
    }
    let _ = writeln!(out);
    slo_table(&mut out, r);
    let _ = writeln!(out);
    let why = match &r.binding_slo {
        Some(s) => {
            format!("bound by {s}; the limit is below {:.3}, precision {}%", r.max_rate_upper_rps, r.precision * 100.0)
        }
        None => "every SLO holds up to saturation, the highest sustained rate".into(),
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
    if let Some(f) = &r.fleet {
        let cost = f.cost_per_hour.map(|c| format!(", {c:.2} an hour")).unwrap_or_default();
        let tried: Vec<String> =
            f.probes.iter().map(|p| format!("{} {}", p.replicas, if p.probe.pass { "met" } else { "miss" })).collect();
        let _ = writeln!(
            out,
            "fleet       {} replicas behind {} meet every SLO at {} req/s in simulation ({} GPUs{cost}); tried {}",
            f.replicas,
            f.router,
            f.target_rate_rps,
            f.gpus,
            tried.join(", ")
        );
    }
    if let Some(s) = &r.split {
        let cost = s.cost_per_hour.map(|c| format!(", {c:.2} an hour")).unwrap_or_default();
        let tried: Vec<String> = s
            .probes
            .iter()
            .map(|p| {
                format!("{}:{} {}", p.prefill_replicas, p.decode_replicas, if p.probe.pass { "met" } else { "miss" })
            })
            .collect();
        let _ = writeln!(
            out,
            "split       {} prefill + {} decode replicas of {} GPUs meet every SLO at {} req/s with the most \
             headroom ({} GPUs{cost}); tried {}",
            s.prefill_replicas,
            s.decode_replicas,
            s.gpu_budget,
            s.target_rate_rps,
            s.gpus,
            tried.join(", ")
        );
    }
    out
}

/// The SLO search's probes, one row each, by rate.
fn slo_table(out: &mut String, r: &SearchResult) {
    let stopped = match r.probes.iter().any(|p| p.stopped > 0) {
        true => "; stopped: seeds whose run ended once an SLO was certain to be missed, --full-probes runs them whole",
        false => "",
    };
    let short = match r.probes.iter().any(|p| p.short) {
        true => "; short: --bracket's probes, which only guide the search",
        false => "",
    };
    let _ = writeln!(out, "  SLO search (met: on every seed; values: the worst seed{stopped}{short})");
    let names: Vec<&String> = r.at_max_rate.slo_values.keys().collect();
    let mut head = format!("  {:>12}  {:>8}  {:<5}", "rate req/s", "requests", "SLOs");
    for n in &names {
        let _ = write!(head, "  {n:>14}");
    }
    let _ = writeln!(out, "{head}  {:>13}  {:>10}", "goodput req/s", "attainment");
    let mut probes = r.probes.clone();
    probes.sort_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps).then(a.requests.cmp(&b.requests)));
    for p in &probes {
        let mut row = format!("  {:>12.3}  {:>8}  {:<5}", p.rate_rps, thousands(p.requests), met(p, r.seeds.len()));
        for n in &names {
            let v = p.slo_values.get(*n).copied().flatten();
            // A stopped seed has no value: what the others show is not the worst.
            let shown = match v {
                _ if p.stopped > 0 && p.failed.contains(*n) => "missed".into(),
                Some(v) => format!("{v:.2}"),
                None => "-".into(),
            };
            let _ = write!(row, "  {shown:>14}");
        }
        let mut notes: Vec<String> = Vec::new();
        match p.stopped {
            0 => {
                let _ = write!(row, "  {:>13.3}  {:>9.2}%", p.goodput_rps, p.slo_attainment_pct);
            }
            k if k >= r.seeds.len() => {
                let _ = write!(row, "  {:>13}  {:>10}", "-", "-");
                notes.push("stopped".into());
            }
            k => {
                let _ = write!(row, "  {:>13.3}  {:>9.2}%", p.goodput_rps, p.slo_attainment_pct);
                notes.push(format!("{k} stopped"));
            }
        }
        if p.short {
            notes.push("short".into());
        }
        if !notes.is_empty() {
            let _ = write!(row, "  {}", notes.join(", "));
        }
        let _ = writeln!(out, "{row}");
    }
}

/// `met`, `miss`, or how many seeds met when some did.
fn met(p: &super::Probe, seeds: usize) -> String {
    match p.seeds_met {
        _ if p.pass => "met".into(),
        0 => "miss".into(),
        k => format!("{k}/{seeds}"),
    }
}

/// `seed 42` or `seeds 42-44`.
fn seeds(s: &[u64]) -> String {
    match s {
        [one] => format!("seed {one}"),
        [first, .., last] => format!("{} seeds ({first}-{last})", s.len()),
        [] => "no seed".into(),
    }
}

/// The summary `llmsim capacity --over-time` prints: every policy, the
/// plan, the static fleet and the saving. The JSON is the
/// [`super::over_time::OverTimePlan`] serialised as is.
pub fn over_time(p: &super::over_time::OverTimePlan) -> String {
    use super::over_time::Price;
    let mut out = String::new();
    let need = match p.windows_needed {
        f if f >= 1.0 => "every window".to_string(),
        f => format!("{}% of windows", f * 100.0),
    };
    let _ = writeln!(out, "scenario    {} ({})", p.scenario, seeds(&p.seeds));
    let _ = writeln!(out, "SLO         {} in {need} of {} s", p.slo.join(", "), p.window_s);
    let unit = match p.price {
        Price::Cost => "cost",
        Price::GpuHours => "GPU-h",
    };
    let shown = |g: f64, c: Option<f64>| p.price.of(g, c).map_or("-".into(), |v| format!("{v:.2}"));
    let _ = writeln!(out, "policies    {} (price: {unit})", p.candidates.len());
    let _ = writeln!(
        out,
        "  {:>5}  {:>10}  {:>8}  {:>7}  {:>5}  {:<5}  policy",
        "point", unit, "GPU-h", "missed", "peak", "meets"
    );
    for (i, c) in p.candidates.iter().enumerate() {
        let mark = if p.cheapest == Some(i) { "<- plan" } else { "" };
        let _ = writeln!(
            out,
            "  {:>5}  {:>10}  {:>8.2}  {:>7}  {:>5}  {:<5}  {} {mark}",
            c.point,
            shown(c.gpu_hours, c.cost),
            c.gpu_hours,
            format!("{}/{}", c.missed, c.windows),
            c.peak_replicas,
            if c.meets { "yes" } else { "no" },
            c.values
        );
    }
    match p.cheapest.map(|i| &p.candidates[i]) {
        Some(c) => {
            let _ = writeln!(
                out,
                "plan        point {}: {} ({unit} {}, {:.2} GPU-h, {} of {} windows missed, peak {} replicas)",
                c.point,
                c.values,
                shown(c.gpu_hours, c.cost),
                c.gpu_hours,
                c.missed,
                c.windows,
                c.peak_replicas
            );
        }
        None => {
            let _ = writeln!(out, "plan        none: no policy met the SLO in {need}");
        }
    }
    if let Some(f) = &p.static_fleet {
        let kind = match &f.pool {
            Some(pool) => format!("pool {pool}'s replicas ({}, {} GPU a replica)", f.hardware, f.gpus_per_replica),
            None => format!("replicas of {} ({} GPU a replica)", f.hardware, f.gpus_per_replica),
        };
        match (&f.replicas, &f.at_replicas) {
            (Some(n), Some(s)) => {
                let _ = writeln!(
                    out,
                    "static      {n} {kind}: {unit} {}, {:.2} GPU-h, {} of {} windows missed ({} probes)",
                    shown(s.gpu_hours, s.cost),
                    s.gpu_hours,
                    s.missed,
                    s.windows,
                    f.probes.len()
                );
            }
            _ => {
                let _ = writeln!(out, "static      none up to {} {kind} met the SLO in {need}", f.limit);
            }
        }
    }
    if let Some(s) = p.saving {
        let _ = writeln!(out, "saving      {:.1}% of the static fleet's {unit}", s * 100.0);
    }
    out
}
