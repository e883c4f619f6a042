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

/// Added at the end of each table when prefix caching is on (and only
/// then, so tables without it keep their bytes).
pub const PREFIX_REQUEST_COLUMNS: [&str; 1] = ["cached_tokens"];
pub const PREFIX_STEP_COLUMNS: [&str; 2] = ["cached_blocks", "evictions"];

/// One row per request, in id (arrival) order. Latencies are empty for
/// requests that never produced the event.
pub fn requests(records: &[RequestRecord]) -> csv::Result<Vec<u8>> {
    requests_with(records, false)
}

/// [`requests`]; with `prefix_caching`, a last column `cached_tokens`: the
/// prompt tokens found in the cache at the request's first admission
/// (empty if it was never admitted).
pub fn requests_with(records: &[RequestRecord], prefix_caching: bool) -> csv::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    match prefix_caching {
        false => w.write_record(REQUEST_COLUMNS)?,
        true => w.write_record(REQUEST_COLUMNS.iter().chain(&PREFIX_REQUEST_COLUMNS))?,
    }
    for r in records {
        let max_itl = (r.tokens > 1).then_some(r.max_gap_ns);
        let cached = prefix_caching.then(|| r.cached_tokens.map_or_else(String::new, |c| c.to_string()));
        w.write_record(
            [
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
            ]
            .into_iter()
            .chain(cached),
        )?;
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
    steps_with(steps, num_blocks, false)
}

/// [`steps`]; with `prefix_caching`, two last columns: `cached_blocks`
/// (blocks holding a content hash, in use or free, at the step's record)
/// and `evictions` (cached blocks the step's allocations reused).
pub fn steps_with(steps: &[StepRecord], num_blocks: u32, prefix_caching: bool) -> csv::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    match prefix_caching {
        false => w.write_record(STEP_COLUMNS)?,
        true => w.write_record(STEP_COLUMNS.iter().chain(&PREFIX_STEP_COLUMNS))?,
    }
    for s in steps {
        let cache = prefix_caching.then(|| [s.cached_blocks.to_string(), s.evictions.to_string()]);
        w.write_record(
            [
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
            ]
            .into_iter()
            .chain(cache.into_iter().flatten()),
        )?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}
