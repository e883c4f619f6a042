//! `--requests-csv` and `--steps-csv`: one row per request, one per step.
//!
//! The request row is written by [`RequestColumn::cell`] alone: `llmsim run
//! --requests-csv` and `llmsim serve --record` (llmsim_server::record) pick
//! their columns from it, so a column both files carry is the same text
//! byte for byte. Times ending in `_ms` are milliseconds with six decimals
//! (nanosecond resolution); `arrival_s` is seconds with nine.

use crate::metrics::RequestRecord;
use llmsim_core::engine::StepRecord;

/// Milliseconds of a nanosecond duration with six decimals (empty for
/// none).
fn ms(ns: Option<u64>) -> String {
    ns.map_or_else(String::new, |v| format!("{:.6}", v as f64 / 1e6))
}

/// One column of a request row.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RequestColumn {
    Id,
    ArrivalS,
    PromptTokens,
    OutputTokens,
    Status,
    QueueMs,
    TtftMs,
    E2eMs,
    TpotMs,
    MaxItlMs,
    Preemptions,
    /// Prompt tokens found in the prefix cache at the first admission.
    CachedTokens,
}

impl RequestColumn {
    pub fn name(self) -> &'static str {
        match self {
            RequestColumn::Id => "id",
            RequestColumn::ArrivalS => "arrival_s",
            RequestColumn::PromptTokens => "prompt_tokens",
            RequestColumn::OutputTokens => "output_tokens",
            RequestColumn::Status => "status",
            RequestColumn::QueueMs => "queue_ms",
            RequestColumn::TtftMs => "ttft_ms",
            RequestColumn::E2eMs => "e2e_ms",
            RequestColumn::TpotMs => "tpot_ms",
            RequestColumn::MaxItlMs => "max_itl_ms",
            RequestColumn::Preemptions => "preemptions",
            RequestColumn::CachedTokens => "cached_tokens",
        }
    }

    /// The cell of this column for `r`. Latencies are empty for requests
    /// that never produced the event; `max_itl_ms` needs two tokens.
    pub fn cell(self, r: &RequestRecord) -> String {
        match self {
            RequestColumn::Id => r.id.to_string(),
            RequestColumn::ArrivalS => r.arrival.to_string(),
            RequestColumn::PromptTokens => r.prompt.to_string(),
            RequestColumn::OutputTokens => r.output.to_string(),
            RequestColumn::Status => r.status.as_str().to_string(),
            RequestColumn::QueueMs => ms(r.queue_ns()),
            RequestColumn::TtftMs => ms(r.ttft_ns()),
            RequestColumn::E2eMs => ms(r.e2e_ns()),
            RequestColumn::TpotMs => r.tpot_ns().map_or_else(String::new, |v| format!("{:.6}", v / 1e6)),
            RequestColumn::MaxItlMs => ms((r.tokens > 1).then_some(r.max_gap_ns)),
            RequestColumn::Preemptions => r.preemptions.to_string(),
            RequestColumn::CachedTokens => r.cached_tokens.map_or_else(String::new, |c| c.to_string()),
        }
    }
}

/// The header of a row of `columns`.
pub fn request_header(columns: &[RequestColumn]) -> Vec<&'static str> {
    columns.iter().map(|c| c.name()).collect()
}

/// The cells of `r` in the order of `columns`.
pub fn request_row(r: &RequestRecord, columns: &[RequestColumn]) -> Vec<String> {
    columns.iter().map(|c| c.cell(r)).collect()
}

/// The columns of `--requests-csv`.
pub const REQUEST_COLUMNS: [RequestColumn; 11] = [
    RequestColumn::Id,
    RequestColumn::ArrivalS,
    RequestColumn::PromptTokens,
    RequestColumn::OutputTokens,
    RequestColumn::Status,
    RequestColumn::QueueMs,
    RequestColumn::TtftMs,
    RequestColumn::E2eMs,
    RequestColumn::TpotMs,
    RequestColumn::MaxItlMs,
    RequestColumn::Preemptions,
];

/// Added at the end of each table when prefix caching is on (and only
/// then, so tables without it keep their bytes).
pub const PREFIX_REQUEST_COLUMNS: [RequestColumn; 1] = [RequestColumn::CachedTokens];
pub const PREFIX_STEP_COLUMNS: [&str; 2] = ["cached_blocks", "evictions"];

/// One row per request, in id (arrival) order.
pub fn requests(records: &[RequestRecord]) -> csv::Result<Vec<u8>> {
    let mut out = Vec::new();
    write_requests(&mut out, records, false)?;
    Ok(out)
}

/// [`requests`] written to `out` as the rows are made, so a run of
/// millions of requests does not hold its CSV beside its records; with
/// `prefix_caching`, a last column `cached_tokens`: the prompt tokens
/// found in the cache at the request's first admission (empty if it was
/// never admitted).
pub fn write_requests<W: std::io::Write>(out: W, records: &[RequestRecord], prefix_caching: bool) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let columns: Vec<RequestColumn> = match prefix_caching {
        false => REQUEST_COLUMNS.to_vec(),
        true => REQUEST_COLUMNS.iter().chain(&PREFIX_REQUEST_COLUMNS).copied().collect(),
    };
    w.write_record(request_header(&columns))?;
    for r in records {
        w.write_record(request_row(r, &columns))?;
    }
    w.flush()?;
    Ok(())
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
    w.write_record(step_header(prefix_caching))?;
    for s in steps {
        w.write_record(step_row(s, num_blocks, prefix_caching))?;
    }
    w.into_inner().map_err(|e| csv::Error::from(e.into_error()))
}

/// The header of a steps table: [`STEP_COLUMNS`], then
/// [`PREFIX_STEP_COLUMNS`] with `prefix_caching`.
pub fn step_header(prefix_caching: bool) -> Vec<&'static str> {
    let cache: &[&'static str] = if prefix_caching { &PREFIX_STEP_COLUMNS } else { &[] };
    STEP_COLUMNS.iter().chain(cache).copied().collect()
}

/// The cells of step `s` of an engine with `num_blocks` KV blocks (its
/// `kv_usage` is `kv_blocks_used / num_blocks`).
pub fn step_row(s: &StepRecord, num_blocks: u32, prefix_caching: bool) -> Vec<String> {
    let mut row = vec![
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
    ];
    if prefix_caching {
        row.extend([s.cached_blocks.to_string(), s.evictions.to_string()]);
    }
    row
}
