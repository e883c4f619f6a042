//! `--requests-csv` and `--steps-csv`: one row per request, one per step.

use crate::engine::StepRecord;
use crate::metrics::RequestRecord;

/// Seconds of a nanosecond duration with nine decimals.
fn ms(ns: Option<u64>) -> String {
    ns.map_or_else(String::new, |v| format!("{:.6}", v as f64 / 1e6))
}

pub const REQUEST_COLUMNS: [&str; 11] = [
    "id",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "status",
    "queue_ms",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "max_itl_ms",
    "preemptions",
];

/// One row per request, in id (arrival) order. Latencies are empty for
/// requests that never produced the event.
pub fn requests(records: &[RequestRecord]) -> csv::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(REQUEST_COLUMNS)?;
    for r in records {
        let max_itl = (r.tokens > 1).then_some(r.max_gap_ns);
        w.write_record([
            r.id.to_string(),
            r.arrival.to_string(),
            r.prompt.to_string(),
            r.output.to_string(),
            r.status.as_str().to_string(),
            ms(r.queue_ns()),
            ms(r.ttft_ns()),
            ms(r.e2e_ns()),
            r.tpot_ns().map_or_else(String::new, |v| format!("{:.6}", v / 1e6)),
            ms(max_itl),
            r.preemptions.to_string(),
        ])?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

pub const STEP_COLUMNS: [&str; 13] = [
    "index",
    "start_s",
    "duration_ms",
    "batch_size",
    "tokens",
    "prefill_tokens",
    "kv_blocks_used",
    "kv_usage",
    "running",
    "waiting",
    "preempted",
    "compute_ms",
    "memory_ms",
];

/// One row per step.
pub fn steps(steps: &[StepRecord], num_blocks: u32) -> csv::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(STEP_COLUMNS)?;
    for s in steps {
        w.write_record([
            s.index.to_string(),
            s.start.to_string(),
            ms(Some(s.duration_nanos())),
            s.batch_size.to_string(),
            s.tokens.to_string(),
            s.prefill_tokens.to_string(),
            s.kv_blocks_used.to_string(),
            format!("{:.6}", f64::from(s.kv_blocks_used) / f64::from(num_blocks.max(1))),
            s.running.to_string(),
            s.waiting.to_string(),
            s.preempted.to_string(),
            format!("{:.6}", s.compute_s * 1e3),
            format!("{:.6}", s.memory_s * 1e3),
        ])?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}
