//! What a `cluster:` adds to the summary and the CSV tables: a line on the
//! cluster, a table of replicas, and a last `replica` column in the
//! requests and steps CSVs (only with a cluster, so other tables keep
//! their bytes). With prefill/decode pools: a table of the pools and the
//! KV transfers, a `decode_replica` column in the requests CSV, and a
//! `pool` column in the steps CSV (whose `replica` is then the index in
//! that pool).

use std::fmt::Write;

use super::csv_out::{self, RequestColumn};
use crate::metrics::Placement;
use crate::metrics::{RequestRecord, RunResult};
use llmsim_core::engine::StepRecord;
use llmsim_core::util::thousands;
use llmsim_scenario::config::{Cluster, Scenario};

/// `4 replicas x 2 GPUs (TP 2) = 8 GPUs, router least_outstanding`.
pub fn cluster_line(s: &Scenario, c: &Cluster) -> String {
    if let Some(d) = &c.disagg {
        let pool = |name: &str, p: &llmsim_scenario::config::cluster::Pool| {
            let per = p.gpus_per_replica();
            format!(
                "{name} {} x {per} GPU{} ({}, {}{})",
                p.replicas,
                if per == 1 { "" } else { "s" },
                p.scenario.hardware.name,
                p.router.as_str(),
                p.overlap_weight.map_or_else(String::new, |w| format!(" {w}"))
            )
        };
        return format!(
            "{} + {} = {} GPUs, KV transfer {} GB/s + {} ms",
            pool("prefill", &d.prefill),
            pool("decode", &d.decode),
            thousands(u64::from(c.gpus(s))),
            d.kv_transfer.bandwidth_gbps,
            d.kv_transfer.latency_ms
        );
    }
    if !c.pools.is_empty() {
        let each: Vec<String> = (c.pools.iter())
            .map(|p| {
                let auto = p.autoscale.as_ref().map_or_else(String::new, |a| {
                    format!(
                        ", autoscaled {} to {} on {} (target {})",
                        a.min_replicas,
                        a.max_replicas,
                        a.signal.as_str(),
                        a.target
                    )
                });
                format!("{} {} x {} ({}{auto})", p.name, p.replicas, p.gpus_per_replica(), p.scenario.hardware.name)
            })
            .collect();
        return format!("pools {}; router {}", each.join(", "), c.router.as_str());
    }
    let per = s.deployment.gpus();
    let mut out = format!(
        "{} replica{} x {per} GPU{} = {} GPUs, router {}",
        c.replicas,
        if c.replicas == 1 { "" } else { "s" },
        if per == 1 { "" } else { "s" },
        thousands(u64::from(c.replicas) * u64::from(per)),
        c.router.as_str()
    );
    if let Some(w) = c.overlap_weight {
        let _ = write!(out, " (overlap_weight {w})");
    }
    if let Some(a) = &c.autoscale {
        let _ = write!(
            out,
            "; autoscaled {} to {} on {} (target {}), cold start {:.1} s",
            a.min_replicas,
            a.max_replicas,
            a.signal.as_str(),
            a.target,
            a.cold_start.total_s()
        );
    }
    out
}

/// The lines of `over_time` (docs/clusters.md, "Results over time").
pub fn over_time_lines(out: &mut String, r: &RunResult) {
    let Some(o) = &r.over_time else { return };
    let cost = o.cost.map_or_else(String::new, |c| format!(", cost {c:.2}"));
    let _ = writeln!(
        out,
        "over time  {} windows of {} s to {:.1} s: {:.2} GPU-hours{cost}, at most {} replicas",
        thousands(o.windows),
        o.window_s,
        o.end_s,
        o.gpu_hours,
        o.peak_replicas
    );
    if let Some(a) = &o.autoscale {
        let _ = writeln!(
            out,
            "autoscale  {} scale-ups, {} scale-downs ({} to {} replicas on {}, target {})",
            a.scale_ups, a.scale_downs, a.min_replicas, a.max_replicas, a.signal, a.target
        );
    }
    for p in o.pools.iter().flatten() {
        let cost = p.cost.map_or_else(String::new, |c| format!(", cost {c:.2}"));
        let _ = writeln!(
            out,
            "pool       {}: {} x {} GPU{}, {} requests, {:.2} GPU-hours{cost}, at most {} replicas, {} up, {} down",
            p.name,
            p.hardware,
            p.gpus_per_replica,
            if p.gpus_per_replica == 1 { "" } else { "s" },
            thousands(p.requests),
            p.gpu_hours,
            p.peak_replicas,
            p.scale_ups,
            p.scale_downs
        );
    }
    if let Some(missed) = &o.slo_missed_windows {
        let first: Vec<String> = missed.iter().take(8).map(|s| format!("{s}")).collect();
        let more = if missed.len() > 8 { ", ..." } else { "" };
        let _ = writeln!(
            out,
            "slo        {} of {} windows missed it{}",
            thousands(missed.len() as u64),
            thousands(o.windows),
            if missed.is_empty() { String::new() } else { format!(" (starting at {} s{more})", first.join(", ")) }
        );
    }
}

/// The timeline CSV: one row per window (`llmsim run --timeline FILE`);
/// with `cluster.pools`, each pool's `ready_NAME, starting_NAME,
/// draining_NAME` last.
pub fn windows_csv(rows: &[crate::metrics::over_time::WindowRow], pools: &[String]) -> csv::Result<Vec<u8>> {
    let mut w = csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new());
    let mut header: Vec<String> = WINDOW_COLUMNS.iter().map(|c| c.to_string()).collect();
    for p in pools {
        header.extend(["ready", "starting", "draining"].map(|k| format!("{k}_{p}")));
    }
    w.write_record(&header)?;
    let opt = |v: Option<f64>| v.map_or_else(String::new, |v| v.to_string());
    for r in rows {
        let mut cells = vec![
            r.start_s.to_string(),
            r.end_s.to_string(),
            r.offered_rps.to_string(),
            r.served_rps.to_string(),
            r.rejected.to_string(),
            r.ready.to_string(),
            r.starting.to_string(),
            r.draining.to_string(),
            r.queue.to_string(),
            r.kv_use.to_string(),
            r.first_tokens.to_string(),
            opt(r.ttft_p50_ms),
            opt(r.ttft_p99_ms),
            opt(r.itl_p50_ms),
            opt(r.itl_p99_ms),
            r.slo_met.map_or_else(String::new, |m| m.to_string()),
            r.gpu_hours.to_string(),
            opt(r.cost),
        ];
        for &(ready, starting, draining) in &r.pools {
            cells.extend([ready, starting, draining].map(|n| n.to_string()));
        }
        w.write_record(&cells)?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// The timeline CSV's columns before the pools'.
const WINDOW_COLUMNS: [&str; 18] = [
    "start_s",
    "end_s",
    "offered_rps",
    "served_rps",
    "rejected",
    "ready",
    "starting",
    "draining",
    "queue",
    "kv_use",
    "first_tokens",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "slo_met",
    "gpu_hours",
    "cost",
];

/// The replicas table and the imbalance, if the result has them.
pub fn replica_table(out: &mut String, r: &RunResult) {
    let (Some(replicas), Some(imbalance)) = (&r.replicas, r.imbalance) else { return };
    let _ = writeln!(out);
    let caching = replicas.iter().any(|x| x.prefix_hit_rate.is_some());
    let _ = write!(
        out,
        "  {:<7} {:>9} {:>13} {:>9} {:>11} {:>9}",
        "replica", "requests", "output tok", "steps", "peak KV", "preempt"
    );
    let _ = writeln!(out, "{}", if caching { format!(" {:>9}", "hit rate") } else { String::new() });
    // With pools: prefill replicas `p0, p1, ...`, then decode ones `d0, ...`.
    let base = r.pools.as_ref().map(|p| p.prefill.replicas as usize);
    for (i, x) in replicas.iter().enumerate() {
        let name = match base {
            Some(b) if i >= b => format!("d{}", i - b),
            Some(_) => format!("p{i}"),
            None => i.to_string(),
        };
        let _ = write!(
            out,
            "  {:<7} {:>9} {:>13} {:>9} {:>11} {:>9}",
            name,
            thousands(x.requests),
            thousands(x.output_tokens),
            thousands(x.steps),
            thousands(u64::from(x.peak_kv_blocks)),
            thousands(x.preemptions)
        );
        match x.prefix_hit_rate {
            Some(h) => {
                let _ = writeln!(out, " {:>8.1}%", h * 100.0);
            }
            None => out.push('\n'),
        }
    }
    let _ = writeln!(out, "imbalance  {imbalance:.3} (most requests on one replica over the mean)");
    pools(out, r);
}

/// Each pool's figures and the KV transfers, if the result has pools.
fn pools(out: &mut String, r: &RunResult) {
    let Some(p) = &r.pools else { return };
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<8} {:>8} {:>5} {:>9} {:>9} {:>10} {:>11} {:>11} {:>9} {:>9}",
        "pool", "replicas", "GPUs", "requests", "steps", "mean batch", "peak KV", "KV blocks", "preempt", "imbalance"
    );
    for (name, x) in [("prefill", &p.prefill), ("decode", &p.decode)] {
        let _ = writeln!(
            out,
            "  {:<8} {:>8} {:>5} {:>9} {:>9} {:>10.1} {:>11} {:>11} {:>9} {:>9.3}",
            name,
            x.replicas,
            x.gpus,
            thousands(x.requests),
            thousands(x.steps.count),
            x.steps.mean_batch_size,
            thousands(u64::from(x.kv.peak_blocks)),
            thousands(u64::from(x.capacity.num_blocks)),
            thousands(x.preemptions),
            x.imbalance
        );
    }
    if let Some(t) = &r.kv_transfer_ms {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        let _ = writeln!(
            out,
            "kv transfer {} transfers, mean {} ms, p50 {}, p99 {}, max {}",
            thousands(t.count),
            ms(t.mean),
            ms(t.p50),
            ms(t.p99),
            ms(t.max)
        );
    }
}

/// `--requests-csv` of a cluster run, written to `out` as the rows are
/// made: the usual columns, then `replica` (empty for a request rejected
/// before routing).
pub fn write_requests<W: std::io::Write>(
    out: W,
    records: &[RequestRecord],
    prefix_caching: bool,
    placement: &Placement,
) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let mut columns: Vec<RequestColumn> = csv_out::REQUEST_COLUMNS.to_vec();
    if prefix_caching {
        columns.extend(csv_out::PREFIX_REQUEST_COLUMNS);
    }
    let mut header = csv_out::request_header(&columns);
    header.push("replica");
    let pools = placement.decode_base.is_some();
    if pools {
        header.push("decode_replica");
    }
    w.write_record(header)?;
    let shown = |x: Option<u32>| x.map_or_else(String::new, |x| x.to_string());
    for r in records {
        let mut row = csv_out::request_row(r, &columns);
        row.push(shown(placement.requests.get(r.id as usize).copied().flatten()));
        if pools {
            row.push(shown(placement.decode.get(r.id as usize).copied().flatten()));
        }
        w.write_record(row)?;
    }
    w.flush()?;
    Ok(())
}

/// `--steps-csv` of a cluster run: the usual columns, then `replica`.
/// `index` is the step's number on its replica, and `kv_usage` is over
/// that replica's blocks: `blocks[0]` for a colocated replica or a
/// prefill one, `blocks[1]` for a decode one ([`replica_blocks`]).
pub fn steps(
    steps: &[StepRecord],
    blocks: [u32; 2],
    prefix_caching: bool,
    placement: &Placement,
) -> csv::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(step_header(prefix_caching, placement.decode_base))?;
    for (i, s) in steps.iter().enumerate() {
        let replica = placement.steps.get(i).copied();
        w.write_record(step_row(s, replica, blocks, prefix_caching, placement.decode_base))?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// The header of a cluster's steps table: the usual columns, `replica`,
/// and with pools (`decode_base`, the first decode replica) `pool`.
pub fn step_header(prefix_caching: bool, decode_base: Option<u32>) -> Vec<&'static str> {
    let mut header = csv_out::step_header(prefix_caching);
    header.push("replica");
    if decode_base.is_some() {
        header.push("pool");
    }
    header
}

/// The cells of step `s` of a cluster run, which ran on `replica` (with
/// pools, prefill replicas first, decode ones from `decode_base`).
pub fn step_row(
    s: &StepRecord,
    replica: Option<u32>,
    blocks: [u32; 2],
    prefix_caching: bool,
    decode_base: Option<u32>,
) -> Vec<String> {
    let (index, pool) = match (replica, decode_base) {
        (None, None) => (String::new(), None),
        (Some(x), None) => (x.to_string(), None),
        // With pools: the replica's index in its pool, then the pool.
        (Some(x), Some(base)) if x >= base => ((x - base).to_string(), Some("decode")),
        (Some(x), Some(_)) => (x.to_string(), Some("prefill")),
        (None, Some(_)) => (String::new(), Some("")),
    };
    let mut row = csv_out::step_row(s, blocks_of(replica, decode_base, blocks), prefix_caching);
    row.push(index);
    row.extend(pool.map(str::to_string));
    row
}

/// The KV blocks of `replica` (none: the first): `blocks[1]` for a
/// decode replica (from `decode_base`, with pools), else `blocks[0]`
/// ([`replica_blocks`]).
pub fn blocks_of(replica: Option<u32>, decode_base: Option<u32>, blocks: [u32; 2]) -> u32 {
    match (replica, decode_base) {
        (Some(x), Some(base)) if x >= base => blocks[1],
        _ => blocks[0],
    }
}

/// The KV blocks of one replica of `s`'s cluster, for [`steps`]: a
/// colocated replica's (the scenario's) twice, or a prefill replica's and
/// a decode replica's (each pool's own hardware, parallelism and cache).
pub fn replica_blocks(s: &Scenario) -> [u32; 2] {
    match s.cluster.as_ref().and_then(|c| c.disagg.as_ref()) {
        Some(d) => [d.prefill.scenario.capacity.num_blocks, d.decode.scenario.capacity.num_blocks],
        None => [s.capacity.num_blocks; 2],
    }
}

/// With prefill and decode pools: the first decode replica (the prefill
/// pool's replica count), as [`Placement::decode_base`] numbers them.
pub fn decode_base(s: &Scenario) -> Option<u32> {
    s.cluster.as_ref().and_then(|c| c.disagg.as_ref()).map(|d| d.prefill.replicas)
}
