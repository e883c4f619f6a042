//! What a `cluster:` adds to the summary and the CSV tables: a line on the
//! cluster, a table of replicas, and a last `replica` column in the
//! requests and steps CSVs (only with a cluster, so other tables keep
//! their bytes).

use std::fmt::Write;

use super::csv_out::{self, RequestColumn};
use super::thousands;
use crate::cluster::Placement;
use crate::config::{Cluster, Scenario};
use crate::engine::StepRecord;
use crate::metrics::{RequestRecord, RunResult};

/// `4 replicas x 2 GPUs (TP 2) = 8 GPUs, router least_outstanding`.
pub fn cluster_line(s: &Scenario, c: &Cluster) -> String {
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
    out
}

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
    for (i, x) in replicas.iter().enumerate() {
        let _ = write!(
            out,
            "  {:<7} {:>9} {:>13} {:>9} {:>11} {:>9}",
            i,
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
}

/// `--requests-csv` of a cluster run: the usual columns, then `replica`
/// (empty for a request rejected before routing).
pub fn requests(records: &[RequestRecord], prefix_caching: bool, placement: &Placement) -> csv::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut columns: Vec<RequestColumn> = csv_out::REQUEST_COLUMNS.to_vec();
    if prefix_caching {
        columns.extend(csv_out::PREFIX_REQUEST_COLUMNS);
    }
    let mut header = csv_out::request_header(&columns);
    header.push("replica");
    w.write_record(header)?;
    for r in records {
        let mut row = csv_out::request_row(r, &columns);
        let replica = placement.requests.get(r.id as usize).copied().flatten();
        row.push(replica.map_or_else(String::new, |x| x.to_string()));
        w.write_record(row)?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// `--steps-csv` of a cluster run: the usual columns, then `replica`.
/// `index` is the step's number on its replica.
pub fn steps(
    steps: &[StepRecord],
    num_blocks: u32,
    prefix_caching: bool,
    placement: &Placement,
) -> csv::Result<Vec<u8>> {
    let plain = csv_out::steps_with(steps, num_blocks, prefix_caching)?;
    let mut r = csv::ReaderBuilder::new().has_headers(false).from_reader(plain.as_slice());
    let mut w = csv::Writer::from_writer(Vec::new());
    for (i, row) in r.records().enumerate() {
        let mut row = row?;
        match i {
            0 => row.push_field("replica"),
            _ => row.push_field(&placement.steps.get(i - 1).map_or_else(String::new, |x| x.to_string())),
        }
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}
