//! `serve --record FILE`: the requests a model received, as a trace CSV
//! that `llmsim run` replays (crate::workload::trace format), plus the
//! simulated times the server used, so anyone can check that the offline
//! run predicts the same timeline.
//!
//! Columns: `arrival_s,prompt_tokens,output_tokens` (the trace; arrivals
//! are the engine's clamped arrivals, see `engine_task`), then `id,status,
//! queue_ms,ttft_ms,e2e_ms,max_itl_ms,preemptions`, formatted exactly like
//! `llmsim run --requests-csv` so the columns compare as text. The trace
//! reader ignores the extra columns.
//!
//! A trace must be in arrival order but requests finish out of order, so a
//! row is written once it and every earlier row are complete; the file is
//! flushed after every write, so a killed server loses only rows still in
//! flight. On shutdown the rest are written with status `in_flight`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::metrics::RequestRecord;
use crate::time::SimTime;

pub const COLUMNS: [&str; 10] = [
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "id",
    "status",
    "queue_ms",
    "ttft_ms",
    "e2e_ms",
    "max_itl_ms",
    "preemptions",
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
}

struct Row {
    rec: RequestRecord,
    done: bool,
}

impl Recorder {
    /// Creates the file and writes the header.
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        let file = File::create(path)?;
        let mut out = csv::Writer::from_writer(BufWriter::new(file));
        out.write_record(COLUMNS)?;
        out.flush()?;
        Ok(Recorder {
            path: path.to_path_buf(),
            out: Some(out),
            rows: BTreeMap::new(),
            next_id: 0,
            last_arrival: SimTime::ZERO,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a row for a request arriving at `arrival` (clamped so rows
    /// never go back in time) and returns its id and arrival.
    pub fn begin(&mut self, arrival: SimTime, prompt: u32, output: u32) -> (u64, SimTime) {
        let arrival = arrival.max(self.last_arrival);
        self.last_arrival = arrival;
        let id = self.next_id;
        self.next_id += 1;
        let rec = RequestRecord::new(id, arrival, prompt, output);
        self.rows.insert(id, Row { rec, done: false });
        (id, arrival)
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
            self.write(&row.rec);
            wrote = true;
        }
        if wrote && let Some(out) = &mut self.out {
            let _ = out.flush().map_err(|e| self.fail(e.into()));
        }
    }

    fn write(&mut self, r: &RequestRecord) {
        let Some(out) = &mut self.out else { return };
        let ms = |ns: Option<u64>| ns.map_or_else(String::new, |v| format!("{:.6}", v as f64 / 1e6));
        let max_itl = (r.tokens > 1).then_some(r.max_gap_ns);
        let result = out.write_record([
            r.arrival.to_string(),
            r.prompt.to_string(),
            r.output.to_string(),
            r.id.to_string(),
            r.status.as_str().to_string(),
            ms(r.queue_ns()),
            ms(r.ttft_ns()),
            ms(r.e2e_ns()),
            ms(max_itl),
            r.preemptions.to_string(),
        ]);
        if let Err(e) = result {
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
    use crate::metrics::Status;

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
        let rows = crate::workload::trace::parse(&text, &path).unwrap();
        assert_eq!(rows.len(), 2);
    }

    #[test]
    fn several_models_get_one_file_each() {
        assert_eq!(path_for(Path::new("out/rec.csv"), "a/b", 2), PathBuf::from("out/rec.a_b.csv"));
        assert_eq!(path_for(Path::new("out/rec.csv"), "a", 1), PathBuf::from("out/rec.csv"));
    }
}
