//! `--steps-csv` written as the run goes: [`StepsCsv`] is an observer
//! that writes each step's row when the step ends, so a run's memory does
//! not grow with its steps. The rows are those of [`csv_out::steps_with`]
//! and, with a cluster, [`cluster::steps`], byte for byte: a cluster's
//! driver names each step's replica before it ([`Observer::replica`]).

use std::io::Write;

use super::{cluster, csv_out};
use llmsim_core::engine::{Observer, StepRecord, Stretch};
use llmsim_scenario::config::Scenario;

/// An [`Observer`] writing one CSV row per step to `W`.
pub struct StepsCsv<W: Write> {
    out: csv::Writer<W>,
    /// KV blocks of a replica (and of a decode one, with pools).
    blocks: [u32; 2],
    prefix_caching: bool,
    /// With a cluster: `Some(decode_base)` (the replica columns).
    cluster: Option<Option<u32>>,
    /// The replica whose steps come next.
    replica: Option<u32>,
    /// The first write error; nothing is written after it.
    error: Option<csv::Error>,
}

impl<W: Write> StepsCsv<W> {
    /// The table of a run of `scenario`, its header written at once.
    pub fn new(out: W, scenario: &Scenario) -> StepsCsv<W> {
        let cluster = scenario.cluster.as_ref().map(|_| cluster::decode_base(scenario));
        let prefix_caching = scenario.prefix_caching();
        let mut out = csv::Writer::from_writer(out);
        let header = match cluster {
            None => csv_out::step_header(prefix_caching),
            Some(base) => cluster::step_header(prefix_caching, base),
        };
        let error = out.write_record(header).err();
        StepsCsv { out, blocks: cluster::replica_blocks(scenario), prefix_caching, cluster, replica: None, error }
    }

    /// The writer, every row flushed to it, or the first write error.
    pub fn finish(mut self) -> csv::Result<W> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.into_inner().map_err(|e| csv::Error::from(e.into_error()))
    }
}

impl<W: Write> Observer for StepsCsv<W> {
    fn replica(&mut self, replica: u32) {
        self.replica = Some(replica);
    }

    fn step(&mut self, s: &StepRecord) {
        if self.error.is_some() {
            return;
        }
        let row = match self.cluster {
            None => csv_out::step_row(s, self.blocks[0], self.prefix_caching),
            Some(base) => cluster::step_row(s, self.replica, self.blocks, self.prefix_caching, base),
        };
        self.error = self.out.write_record(row).err();
    }

    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        for step in s.steps {
            self.step(step);
        }
    }
}
