//! The table `llmsim bench` prints: client figures from the schedule and
//! from the send, and the server's observed and simulated figures when it
//! has a `/metrics/summary`, side by side over the same requests.

use std::fmt::Write;

use serde_json::Value;

use super::result::{BenchJson, server_figure};
use super::{BenchRun, Load, ServerSummary};
use llmsim_core::util::opt;

/// The whole printed report.
pub fn render(run: &BenchRun, j: &BenchJson) -> String {
    let mut out = String::new();
    let c = &run.config;
    let load = match c.load {
        Load::Open { rate, burstiness: 1.0 } => format!("open loop, poisson {rate} req/s"),
        Load::Open { rate, burstiness } => format!("open loop, gamma {rate} req/s, burstiness {burstiness}"),
        Load::Closed { concurrency } => format!("closed loop, {concurrency} users"),
    };
    let _ = writeln!(out, "target     {} model {}", c.base_url, c.model);
    let _ = writeln!(
        out,
        "load       {load}, {} requests of {} prompt -> {} output tokens, warm-up {}, seed {}",
        c.requests,
        c.sent_prompt_tokens(),
        c.output_tokens,
        c.warmup,
        c.seed
    );
    if let Some((groups, tokens)) = c.shared_prefix {
        let _ = writeln!(out, "           each prompt starts with one of {groups} shared prefixes of {tokens} tokens");
    }
    if let Some(t) = c.turns {
        let sent = run.records.len() as u64;
        let _ = writeln!(
            out,
            "           {} conversations of {} turns, {} s think time: each turn resends the conversation and adds {} \
             tokens{}",
            t.conversations(c.requests),
            t.turns,
            t.think_s,
            c.prompt_tokens,
            if sent < c.requests {
                format!("; {} turns not sent (an earlier turn of their conversation failed)", c.requests - sent)
            } else {
                String::new()
            }
        );
    }
    let f = |k: &str| j.llmsim_failures.get(k).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "requests   {} completed, {} failed (connect {}, http {}, timeout {}, stream {})",
        j.completed,
        j.failed,
        f("connect"),
        f("http"),
        f("timeout"),
        f("stream")
    );
    if !j.llmsim_failures_by_kind.is_empty() {
        let kinds: Vec<String> = j.llmsim_failures_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(out, "           by kind: {}", kinds.join(", "));
    }
    if let Some(first) = j.errors.iter().find(|e| !e.is_empty()) {
        let _ = writeln!(out, "           first error: {first}");
    }
    let input = j.total_input_tokens as f64 / j.duration.max(f64::MIN_POSITIVE);
    let _ = writeln!(
        out,
        "throughput {:.2} req/s, {input:.0} input tok/s, {:.0} output tok/s over {:.3} s",
        j.request_throughput, j.output_throughput, j.duration
    );
    if let Some(p) = &j.llmsim_prefix_cache {
        let _ = match p.reported {
            0 => writeln!(out, "prefix     the server reported no cached tokens (usage.prompt_tokens_details)"),
            n => writeln!(
                out,
                "prefix     hit rate {:.1}%: {} of {} prompt tokens cached, over the {n} requests reporting it",
                p.hit_rate * 100.0,
                p.cached_tokens,
                p.prompt_tokens
            ),
        };
    }
    let h = &j.llmsim_client_health;
    let _ = writeln!(
        out,
        "client     {} ms ticker late by p50 {} / p99 {} / max {} ms; CPU {} of one core ({} cores)",
        h.tick_ms,
        opt(h.lateness_p50_ms, 2),
        opt(h.lateness_p99_ms, 2),
        opt(h.lateness_max_ms, 2),
        h.cpu_percent.map_or("unknown".into(), |c| format!("{c:.0}%")),
        h.cpu_cores
    );
    let _ = writeln!(out, "server     {}", server_line(&run.server));
    let model = server_summary(&run.server).map(|s| super::result::for_model(s, &c.model));
    if let Some(faults) = model.and_then(|m| m.get("faults")).and_then(Value::as_object) {
        let kinds: Vec<String> =
            faults.iter().filter(|(_, n)| n.as_u64().unwrap_or(0) > 0).map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            out,
            "           server injected faults: {}",
            if kinds.is_empty() { "none".into() } else { kinds.join(", ") }
        );
    }
    let _ = writeln!(out);
    table(&mut out, j, server_summary(&run.server).map(|s| super::result::for_model(s, &c.model)));
    let late = j.queue_times.iter().copied().fold(0.0, f64::max) * 1e3;
    if late > 1.0 {
        let _ = writeln!(
            out,
            "\nsends were up to {late:.1} ms behind schedule: latencies from the schedule include that wait \
             (coordinated omission), latencies from the send do not"
        );
    }
    for w in &j.llmsim_warnings {
        let _ = writeln!(out, "\nWARNING: {w}");
    }
    out
}

fn server_line(s: &ServerSummary) -> String {
    match s {
        ServerSummary::Read(_) => "/metrics/summary reset after warm-up and read at the end".into(),
        ServerSummary::Absent => "no /metrics/summary (not an llmsim server): client figures only".into(),
        ServerSummary::Failed(m) => format!("no server figures: {m}"),
    }
}

fn server_summary(s: &ServerSummary) -> Option<&Value> {
    match s {
        ServerSummary::Read(v) => Some(v),
        _ => None,
    }
}

/// Rows of figures, one column per point of view.
fn table(out: &mut String, j: &BenchJson, server: Option<&Value>) {
    let server_cols = server.is_some();
    let _ = write!(out, "  {:<10} {:>14} {:>14}", "ms", "client:sched", "client:send");
    if server_cols {
        let _ = write!(out, " {:>14} {:>14}", "server:observed", "server:simulated");
    }
    let _ = writeln!(out);
    let rows = [("TTFT", "ttft", "ttft"), ("ITL", "itl", "itl"), ("TPOT", "tpot", "tpot"), ("E2E", "e2el", "e2e")];
    for (name, key, server_key) in rows {
        for stat in ["mean", "p50", "p90", "p99"] {
            let client = |m: &std::collections::BTreeMap<String, f64>| m.get(&format!("{stat}_{key}_ms")).copied();
            let from_send = client(&j.stats);
            // ITL and TPOT do not depend on when the request was sent.
            let from_sched = if matches!(key, "ttft" | "e2el") { client(&j.llmsim_from_scheduled) } else { from_send };
            let label = format!("{name} {stat}");
            let _ = write!(out, "  {label:<10} {:>14} {:>14}", opt(from_sched, 2), opt(from_send, 2));
            if let Some(s) = server {
                let _ = write!(
                    out,
                    " {:>14} {:>14}",
                    opt(server_figure(s, "observed", server_key, stat), 2),
                    opt(server_figure(s, "simulated", server_key, stat), 2)
                );
            }
            let _ = writeln!(out);
        }
    }
}
