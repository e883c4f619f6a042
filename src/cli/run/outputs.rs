//! `llmsim run`'s outputs that are written as the run goes, so that a run's
//! memory stays flat in its requests and steps with every output on
//! (docs/results.md, "Long runs"): the steps CSV (a row per step as it
//! ends), the trace events (each event as it happens) and the timeline
//! plot (bounded bins, drawn at the end).
//!
//! Where the bytes go: a file output is created before the run (a path
//! that cannot be written fails before any work) and written as the run
//! goes; a run that fails removes it. An output to stdout (`-`) is spooled
//! to a scratch file and printed at the end, in the same order as the
//! outputs written whole (the result JSON first). The trace file starts
//! with metadata events that depend on the whole run (a track per
//! request), so its events go to a scratch file beside it and are copied
//! after that head at the end.

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cli::CliError;
use llmsim_analysis::plot::timeline::Timeline;
use llmsim_core::engine::events::replay_stretch;
use llmsim_core::engine::{Observer, RejectReason, RequestId, StepRecord, Stretch};
use llmsim_core::time::SimTime;
use llmsim_planner::perfetto::{self, TraceEvents};
use llmsim_planner::report::stream::StepsCsv;
use llmsim_scenario::config::Scenario;

/// The outputs a run writes as it goes (an [`Observer`] of the run).
pub struct Streamed {
    steps: Option<(StepsCsv<BufWriter<File>>, Sink)>,
    timeline: Option<Timeline>,
    trace: Option<TraceOut>,
}

/// The trace events, written to a scratch file as they come, and the
/// trace file, written at the end.
struct TraceOut {
    events: TraceEvents<BufWriter<File>>,
    scratch: Scratch,
    sink: Sink,
    file: BufWriter<File>,
}

/// Which outputs to stream, and where.
pub struct Wanted<'a> {
    pub steps_csv: Option<&'a Path>,
    pub plot: bool,
    pub trace_events: Option<&'a Path>,
}

impl Streamed {
    /// Opens the outputs asked for (none: `None`). Fails, before the run,
    /// on a destination that cannot be written.
    pub fn open(scenario: &Scenario, wanted: Wanted<'_>) -> Result<Option<Streamed>, CliError> {
        if wanted.steps_csv.is_none() && !wanted.plot && wanted.trace_events.is_none() {
            return Ok(None);
        }
        let steps = match wanted.steps_csv {
            Some(path) => {
                let (sink, file) = Sink::create(path)?;
                Some((StepsCsv::new(file, scenario), sink))
            }
            None => None,
        };
        let trace = match wanted.trace_events {
            Some(path) => {
                // The file is written at the end; the events go beside it.
                let (sink, file) = Sink::create(path)?;
                let (scratch, events) = Scratch::create(path)?;
                Some(TraceOut { events: TraceEvents::new(events), scratch, sink, file })
            }
            None => None,
        };
        let blocks = llmsim_planner::report::cluster::replica_blocks(scenario);
        let timeline =
            wanted.plot.then(|| Timeline::new(blocks, llmsim_planner::report::cluster::decode_base(scenario)));
        Ok(Some(Streamed { steps, timeline, trace }))
    }

    /// Ends the steps CSV: flushed to its file (or printed).
    pub fn finish_steps(&mut self) -> Result<(), CliError> {
        let Some((csv, sink)) = self.steps.take() else { return Ok(()) };
        let file = csv.finish().map_err(|e| sink.failed(e))?;
        sink.commit(file)
    }

    /// The timeline gathered, if a plot was asked for.
    pub fn timeline(&self) -> Option<&Timeline> {
        self.timeline.as_ref()
    }

    /// Ends the trace: its head, the events, its end, to its file (or
    /// printed). `decode_base`: with pools, the first decode replica.
    pub fn finish_trace(&mut self, decode_base: Option<u32>) -> Result<(), CliError> {
        let Some(TraceOut { events, scratch, sink, file: mut out }) = self.trace.take() else { return Ok(()) };
        let (body, head) = events.finish().map_err(|e| sink.failed(e))?;
        let mut body = body.into_inner().map_err(|e| sink.failed(e.into_error()))?;
        let written = (|| {
            head.write(&mut out, decode_base)?;
            body.rewind()?;
            std::io::copy(&mut body, &mut out)?;
            out.write_all(perfetto::END.as_bytes())
        })();
        written.map_err(|e| sink.failed(e))?;
        drop(scratch);
        sink.commit(out)
    }
}

impl Observer for Streamed {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        if let Some(t) = &mut self.trace {
            t.events.arrived(id, at, prompt, output);
        }
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        if let Some(t) = &mut self.trace {
            t.events.scheduled(id, at, tokens, computed);
        }
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        if let Some(t) = &mut self.trace {
            t.events.preempted(id, at);
        }
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        if let Some(t) = &mut self.trace {
            t.events.token(id, at, index);
        }
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        if let Some(t) = &mut self.trace {
            t.events.finished(id, at);
        }
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        if let Some(t) = &mut self.trace {
            t.events.rejected(id, at, reason);
        }
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        if let Some(t) = &mut self.trace {
            t.events.aborted(id, at);
        }
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        if let Some(t) = &mut self.trace {
            t.events.prefix_lookup(id, at, queried, hit);
        }
    }
    fn replica(&mut self, replica: u32) {
        if let Some((s, _)) = &mut self.steps {
            s.replica(replica);
        }
        if let Some(t) = &mut self.timeline {
            t.replica(replica);
        }
        if let Some(t) = &mut self.trace {
            t.events.replica(replica);
        }
    }
    fn step(&mut self, step: &StepRecord) {
        if let Some((s, _)) = &mut self.steps {
            s.step(step);
        }
        if let Some(t) = &mut self.timeline {
            t.step(step);
        }
        if let Some(t) = &mut self.trace {
            t.events.step(step);
        }
    }
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        // The trace needs every event; the tables only the steps.
        if self.trace.is_some() {
            return replay_stretch(self, s);
        }
        if let Some((c, _)) = &mut self.steps {
            c.decode_stretch(s);
        }
        if let Some(t) = &mut self.timeline {
            t.decode_stretch(s);
        }
    }
}

/// Tells scratch files of one process apart.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Where an output's bytes go: its file, written as the run goes (and
/// removed if the run fails), or, for `-`, a scratch file printed at the
/// end.
struct Sink {
    dest: PathBuf,
    /// The file written, while it may still be removed (a regular file,
    /// not a symlink, this run created or truncated).
    created: Option<PathBuf>,
    /// For `-`: the scratch file holding the bytes.
    spool: Option<Scratch>,
}

impl Sink {
    fn create(dest: &Path) -> Result<(Sink, BufWriter<File>), CliError> {
        if dest == Path::new("-") {
            let (spool, file) = Scratch::create(dest)?;
            return Ok((Sink { dest: dest.to_path_buf(), created: None, spool: Some(spool) }, file));
        }
        // A regular file (new, or truncated now) may be removed if the run
        // fails; a device, a pipe or a symlink (`/dev/stdout`) never is.
        let before = std::fs::symlink_metadata(dest).ok();
        let file = File::create(dest).map_err(|e| cannot_write(dest, e))?;
        let regular = before.map_or_else(|| file.metadata().is_ok_and(|m| m.is_file()), |m| m.is_file());
        let sink = Sink { dest: dest.to_path_buf(), created: regular.then(|| dest.to_path_buf()), spool: None };
        Ok((sink, BufWriter::new(file)))
    }

    fn failed(&self, e: impl std::fmt::Display) -> CliError {
        cannot_write(&self.dest, e)
    }

    /// The bytes are all written: flushed to the file, or printed.
    fn commit(mut self, file: BufWriter<File>) -> Result<(), CliError> {
        let mut file = file.into_inner().map_err(|e| self.failed(e.into_error()))?;
        self.created = None;
        if self.spool.is_none() {
            return Ok(());
        }
        file.rewind().map_err(|e| self.failed(e))?;
        let mut out = std::io::stdout().lock();
        match std::io::copy(&mut file, &mut out).and_then(|_| out.flush()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(CliError::Failure(format!("cannot write to stdout: {e}"))),
        }
    }
}

impl Drop for Sink {
    /// A run that failed leaves no partial output behind.
    fn drop(&mut self) {
        if let Some(path) = self.created.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A scratch file, removed when dropped: beside the output it serves
/// (the same disk, which will hold the output anyway), or in the system's
/// temporary directory for stdout, a device or a symlink.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn create(dest: &Path) -> Result<(Scratch, BufWriter<File>), CliError> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("llmsim-{}-{n}.part", std::process::id());
        let beside = dest != Path::new("-") && std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file());
        let path = match (beside, dest.file_name()) {
            (true, Some(file)) => {
                let dir = dest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                dir.join(format!(".{}.{name}", file.to_string_lossy()))
            }
            _ => std::env::temp_dir().join(name),
        };
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).map_err(|e| {
            CliError::Failure(format!("cannot write {} (scratch space for {}): {e}", path.display(), dest.display()))
        })?;
        Ok((Scratch { path }, BufWriter::new(file)))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn cannot_write(path: &Path, e: impl std::fmt::Display) -> CliError {
    CliError::Failure(format!("cannot write {}: {e}", path.display()))
}
