//! `serve --record FILE`: the requests a model received, as a trace CSV
//! that `llmsim run` replays (llmsim_scenario::trace format), plus the
//! simulated times the server used, so anyone can check that the offline
//! run predicts the same timeline.
//!
//! Columns: `arrival_s,prompt_tokens,output_tokens` (the trace; arrivals
//! are the engine's clamped arrivals, see `engine_task`), then `id,status,
//! queue_ms,ttft_ms,e2e_ms,max_itl_ms,preemptions`, written by the same
//! cell writer as `llmsim run --requests-csv`
//! ([`llmsim_planner::report::csv_out::RequestColumn`]) so the columns compare as
//! text. The trace reader ignores the extra columns.
//!
//! With prefix caching on for the model, `cached_tokens` follows (the
//! request's hit at its first admission, as `--requests-csv` with prefix
//! caching), and two more columns say what the
//! requests shared: `block_ids,block_size` (llmsim_scenario::trace::Blocks),
//! the id of every full block the engine could compute, equal ids for equal
//! content, so the replay hits exactly the blocks the server hit. The ids
//! are the order in which the server first saw each distinct block hash,
//! kept in a map of 16 bytes a distinct block for the server's lifetime.
//!
//! A model served by replicas (`cluster:`) adds a last `replica` column:
//! the replica the router picked (empty for a request turned away before
//! routing), as `llmsim run --requests-csv` writes it for a cluster, so a
//! replay of the record on the model's scenario can be compared with it.
//!
//! A trace must be in arrival order but requests finish out of order, so a
//! row is written once it and every earlier row are complete; the file is
//! flushed after every write, so a killed server loses only rows still in
//! flight. On shutdown the rest are written with status `in_flight`.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use llmsim_core::time::SimTime;
use llmsim_planner::metrics::RequestRecord;
use llmsim_planner::report::csv_out::{self, RequestColumn};
use llmsim_scenario::trace::{BLOCK_COLUMNS, Blocks};

/// The record file's columns: the trace's three, then the outcome.
pub const COLUMNS: [RequestColumn; 10] = [
    RequestColumn::ArrivalS,
    RequestColumn::PromptTokens,
    RequestColumn::OutputTokens,
    RequestColumn::Id,
    RequestColumn::Status,
    RequestColumn::QueueMs,
    RequestColumn::TtftMs,
    RequestColumn::E2eMs,
    RequestColumn::MaxItlMs,
    RequestColumn::Preemptions,
];

/// Writes one model's record file.
pub struct Recorder {
    path: PathBuf,
    out: Option<csv::Writer<BufWriter<File>>>,
    /// Rows begun and not yet written, by id.
    rows: BTreeMap<u64, Row>,
    /// Ids are handed out in arrival order by whoever drives the model.
    next_id: u64,
    last_arrival: SimTime,
    /// With prefix caching: the block size, and each distinct block hash's
    /// id (looked up, never iterated).
    blocks: Option<(u32, HashMap<u64, u64>)>,
    /// Whether the file has the `replica` column.
    replicated: bool,
}

struct Row {
    rec: RequestRecord,
    done: bool,
    /// The `block_ids` cell.
    blocks: String,
    replica: Option<u32>,
}

impl Recorder {
    /// Creates the file and writes the header.
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        Recorder::create_with_blocks(path, None)
    }

    /// [`Recorder::create`]; with `block_size` (a model with prefix
    /// caching on) also the `block_ids,block_size` columns.
    pub fn create_with_blocks(path: &Path, block_size: Option<u32>) -> std::io::Result<Recorder> {
        Recorder::create_for(path, block_size, false)
    }

    /// [`Recorder::create_with_blocks`]; `replicated` (a model served by
    /// replicas) adds the `replica` column.
    pub fn create_for(path: &Path, block_size: Option<u32>, replicated: bool) -> std::io::Result<Recorder> {
        let file = File::create(path)?;
        let mut out = csv::Writer::from_writer(BufWriter::new(file));
        let mut header = csv_out::request_header(&COLUMNS);
        if block_size.is_some() {
            header.extend(csv_out::request_header(&csv_out::PREFIX_REQUEST_COLUMNS));
            header.extend(BLOCK_COLUMNS);
        }
        if replicated {
            header.push("replica");
        }
        out.write_record(header)?;
        out.flush()?;
        Ok(Recorder {
            path: path.to_path_buf(),
            out: Some(out),
            rows: BTreeMap::new(),
            next_id: 0,
            last_arrival: SimTime::ZERO,
            blocks: block_size.map(|bs| (bs, HashMap::new())),
            replicated,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a row for a request arriving at `arrival` (clamped so rows
    /// never go back in time) and returns its id and arrival.
    pub fn begin(&mut self, arrival: SimTime, prompt: u32, output: u32) -> (u64, SimTime) {
        self.begin_with_blocks(arrival, prompt, output, &[])
    }

    /// [`Recorder::begin`] for a request whose full blocks have `hashes`
    /// (with prefix caching; ignored without).
    pub fn begin_with_blocks(&mut self, arrival: SimTime, prompt: u32, output: u32, hashes: &[u64]) -> (u64, SimTime) {
        let blocks = match &mut self.blocks {
            Some((bs, seen)) => {
                let mut ids = Vec::with_capacity(hashes.len());
                for &h in hashes {
                    let next = seen.len() as u64;
                    ids.push(*seen.entry(h).or_insert(next));
                }
                Blocks { ids, block_size: *bs }.ranges()
            }
            None => String::new(),
        };
        let arrival = arrival.max(self.last_arrival);
        self.last_arrival = arrival;
        let id = self.next_id;
        self.next_id += 1;
        let rec = RequestRecord::new(id, arrival, prompt, output);
        self.rows.insert(id, Row { rec, done: false, blocks, replica: None });
        (id, arrival)
    }

    /// Notes the replica row `id` was routed to.
    pub fn place(&mut self, id: u64, replica: u32) {
        if let Some(row) = self.rows.get_mut(&id) {
            row.replica = Some(replica);
        }
    }

    /// Completes row `rec.id` and writes every row that is now ready.
    pub fn complete(&mut self, rec: &RequestRecord) {
        if let Some(row) = self.rows.get_mut(&rec.id) {
            row.rec = rec.clone();
            row.done = true;
        }
        self.write_ready(false);
    }

    /// Writes every remaining row (in flight ones as such) and flushes.
    pub fn finish(&mut self) {
        self.write_ready(true);
    }

    fn write_ready(&mut self, all: bool) {
        let mut wrote = false;
        while let Some(entry) = self.rows.first_entry() {
            if !all && !entry.get().done {
                break;
            }
            let row = entry.remove();
            self.write(&row.rec, row.blocks, row.replica);
            wrote = true;
        }
        if wrote && let Some(out) = &mut self.out {
            let _ = out.flush().map_err(|e| self.fail(e.into()));
        }
    }

    fn write(&mut self, r: &RequestRecord, blocks: String, replica: Option<u32>) {
        let Some(out) = &mut self.out else { return };
        let mut row = csv_out::request_row(r, &COLUMNS);
        if let Some((bs, _)) = &self.blocks {
            row.extend(csv_out::request_row(r, &csv_out::PREFIX_REQUEST_COLUMNS));
            row.extend([blocks, bs.to_string()]);
        }
        if self.replicated {
            row.push(replica.map_or_else(String::new, |x| x.to_string()));
        }
        if let Err(e) = out.write_record(row) {
            self.fail(e);
        }
    }

    /// Reports a write error once and stops recording.
    fn fail(&mut self, e: csv::Error) {
        eprintln!("llmsim serve: cannot write the record file {}: {e}; recording stops", self.path.display());
        self.out = None;
    }
}

/// Where `--record FILE` writes model `name`'s rows: FILE itself when one
/// model is served, else FILE with `.NAME` before its extension.
pub fn path_for(file: &Path, name: &str, models: usize) -> PathBuf {
    if models == 1 {
        return file.to_path_buf();
    }
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match file.extension() {
        Some(ext) => format!("{stem}.{safe}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{safe}"),
    };
    file.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_planner::metrics::Status;

    #[test]
    fn rows_are_written_in_arrival_order_once_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.csv");
        let mut r = Recorder::create(&path).unwrap();
        let (a, _) = r.begin(SimTime::from_nanos(1_000), 5, 2);
        let (b, _) = r.begin(SimTime::from_nanos(500), 6, 3);
        let mut done_b = r.rows[&b].rec.clone();
        done_b.status = Status::Finished;
        r.complete(&done_b);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "row b waits for row a:\n{text}");
        let mut done_a = r.rows[&a].rec.clone();
        done_a.status = Status::Aborted;
        r.complete(&done_a);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "0.000001000,5,2,0,aborted,,,,,0");
        assert_eq!(lines[2], "0.000001000,6,3,1,finished,,,,,0", "arrivals never go back");
        let rows = llmsim_scenario::trace::parse(&text, &path).unwrap();
        assert_eq!(rows.len(), 2);
    }

    #[test]
    fn a_record_row_and_a_requests_csv_row_are_the_same_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.csv");
        let mut r = Recorder::create(&path).unwrap();
        let (id, _) = r.begin(SimTime::from_nanos(2_000_000_123), 40, 3);
        let mut rec = r.rows[&id].rec.clone();
        // Scheduled 1.5 ms after arrival, first token 4.25 ms after it, two
        // more tokens 1 ms and 3.000001 ms apart.
        rec.first_scheduled = Some(SimTime::from_nanos(2_001_500_123));
        rec.first_token = Some(SimTime::from_nanos(2_004_250_123));
        rec.last_token = Some(SimTime::from_nanos(2_008_250_124));
        rec.tokens = 3;
        rec.max_gap_ns = 3_000_001;
        rec.preemptions = 1;
        rec.status = Status::Finished;
        r.complete(&rec);
        let recorded = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            recorded.lines().nth(1),
            Some("2.000000123,40,3,0,finished,1.500000,4.250000,8.250001,3.000001,1"),
            "arithmetic by hand: queue 1.5 ms, TTFT 4.25 ms, E2E 8.250001 ms, max ITL 3.000001 ms"
        );
        let run =
            String::from_utf8(llmsim_planner::report::csv_out::requests(std::slice::from_ref(&rec)).unwrap()).unwrap();
        let table = |text: &str| -> BTreeMap<String, String> {
            let mut lines = text.lines();
            let head: Vec<String> = lines.next().unwrap().split(',').map(str::to_string).collect();
            head.into_iter().zip(lines.next().unwrap().split(',').map(str::to_string)).collect()
        };
        let (rec_row, run_row) = (table(&recorded), table(&run));
        let shared: Vec<&String> = rec_row.keys().filter(|k| run_row.contains_key(*k)).collect();
        assert_eq!(shared.len(), 10, "every record column is a --requests-csv column");
        for k in shared {
            assert_eq!(rec_row[k], run_row[k], "column {k}");
        }
    }

    #[test]
    fn several_models_get_one_file_each() {
        assert_eq!(path_for(Path::new("out/rec.csv"), "a/b", 2), PathBuf::from("out/rec.a_b.csv"));
        assert_eq!(path_for(Path::new("out/rec.csv"), "a", 1), PathBuf::from("out/rec.csv"));
    }
}
