//! `llmsim run`: predict one scenario.

mod outputs;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use super::{CliError, ScenarioArgs, csv_failure, print, write_output};
use llmsim_planner::Run;
use llmsim_planner::report;
use llmsim_planner::run_driver::Stepping;
use llmsim_scenario::config::{Arrivals, Scenario, Trace};

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Write the result JSON (docs/results.md) here; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per request here.
    #[arg(long, value_name = "FILE")]
    pub requests_csv: Option<PathBuf>,
    /// Write one CSV row per step here.
    #[arg(long, value_name = "FILE")]
    pub steps_csv: Option<PathBuf>,
    /// Write one CSV row per window of time (offered and served rate,
    /// replicas, queue, KV use, TTFT and ITL percentiles, SLO, GPU-hours,
    /// cost) here; needs `cluster.autoscale` or `cluster.timeline`.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Draw the run's timeline (batch size, KV usage, waiting queue, step
    /// duration over simulated time) as DIR/timeline.svg; with
    /// `cluster.autoscale` or `cluster.timeline`, also DIR/fleet.svg (load,
    /// replicas and p99 TTFT per window).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Write a Chrome trace-event JSON (open it in ui.perfetto.dev): one
    /// slice per step, one track per request; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub trace_events: Option<PathBuf>,
    /// Run every engine step one by one instead of taking decode stretches
    /// (steps where every running request only decodes) in one call each.
    /// Both give the same bytes (docs/engine.md, "Decode stretches"); this
    /// is the reference path, for checking.
    #[arg(long)]
    pub exact: bool,
    /// Print the effective configuration before the summary.
    #[arg(long)]
    pub explain: bool,
    /// Do not print the summary.
    #[arg(long, short)]
    pub quiet: bool,
    /// Replay the requests of a measured result (llmsim bench, vllm bench
    /// serve --save-detailed, guidellm, AIPerf profile_export.jsonl) instead of the scenario's workload:
    /// the same send times and token counts, on the scenario's engine. A
    /// trace CSV (e.g. from `llmsim serve --record`) is replayed as is.
    #[arg(long, value_name = "MEASURED")]
    pub trace_from: Option<PathBuf>,
    /// Which load level of --trace-from to replay (1-based), for files with several.
    #[arg(long, value_name = "N", requires = "trace_from")]
    pub trace_level: Option<usize>,
}

pub fn execute(a: RunArgs) -> Result<(), CliError> {
    distinct_outputs(&a)?;
    let mut scenario = a.scenario.load()?;
    if a.timeline.is_some() && scenario.cluster.as_ref().is_none_or(|c| c.timeline.is_none()) {
        return Err(CliError::Usage(
            "--timeline writes the rows of cluster.timeline: the scenario has neither cluster.timeline nor \
             cluster.autoscale (add `timeline: {window_s: 60}` under cluster:)"
                .to_string(),
        ));
    }
    if let Some(file) = &a.trace_from {
        eprintln!("{}", replay_measured(&mut scenario, file, a.trace_level)?);
    }
    let most = llmsim_scenario::limits::MAX_REQUESTS;
    if let (Some(n), Some(_)) = (scenario.workload.requests.filter(|&n| n > most), &a.requests_csv) {
        return Err(CliError::Usage(format!(
            "--requests-csv keeps every request's record, so a run with it may issue at most {} requests: \
             workload.requests is {} (set fewer, or drop --requests-csv: without it a run keeps no record and \
             may issue {})",
            llmsim_core::util::thousands(most),
            llmsim_core::util::thousands(n),
            llmsim_core::util::thousands(llmsim_scenario::limits::MAX_SUMMARY_REQUESTS),
        )));
    }
    if a.explain {
        print(&super::explain::render(&scenario))?;
    }
    // The steps CSV, the trace events and the timeline are written as the
    // run goes (memory flat in requests and steps); their files are
    // opened now, so one that cannot be written fails before the run.
    let wanted = outputs::Wanted {
        steps_csv: a.steps_csv.as_deref(),
        plot: a.plot.is_some(),
        trace_events: a.trace_events.as_deref(),
    };
    let mut streamed = outputs::Streamed::open(&scenario, wanted)?;
    let mut progress = super::progress::RunProgress::new(&scenario, !a.quiet);
    let mut report = |p: &llmsim_planner::run_driver::Progress| progress.update(p);
    // Per-request records only when a per-request output is asked for:
    // otherwise memory stays flat in requests.
    let run = Run::new(&scenario).summary_only(a.requests_csv.is_none()).progress(&mut report);
    let out = match &mut streamed {
        // Listed as they happen: a cluster's replicas stay in time order.
        Some(s) => run.stepping(if a.exact { Stepping::Exact } else { Stepping::MacroStepsInOrder }).observed(s),
        None => run.stepping(if a.exact { Stepping::Exact } else { Stepping::MacroSteps }).go(),
    };
    progress.finish();
    let out = out.map_err(|e| CliError::sim(&scenario, e))?;
    if let Some(path) = &a.json {
        write_output(path, llmsim_core::util::to_json(&out.result).as_bytes())?;
    }
    if let Some(path) = &a.requests_csv {
        let caching = scenario.prefix_caching();
        // Streamed: at 10 million requests the CSV is about 1 GB, which
        // would otherwise sit beside the records.
        super::write_output_with(path, |w| match &out.placement {
            Some(p) => report::cluster::write_requests(w, &out.requests, caching, p),
            None => report::csv_out::write_requests(w, &out.requests, caching),
        })?;
    }
    let pools: Vec<String> =
        scenario.cluster.as_ref().map(|c| c.pools.iter().map(|p| p.name.clone()).collect()).unwrap_or_default();
    if let (Some(dir), Some(c)) = (&a.plot, scenario.cluster.as_ref().and_then(|c| c.timeline.as_ref())) {
        let plot = llmsim_analysis::plot::fleet::plot(&scenario.name, &out.windows, c.slo.ttft_p99_ms, &pools)
            .map_err(|e| CliError::Failure(e.to_string()))?;
        super::sweep::write_plots(dir, &[plot])?;
    }
    if let Some(path) = &a.timeline {
        let bytes = report::cluster::windows_csv(&out.windows, &pools).map_err(|e| csv_failure(path, e))?;
        write_output(path, &bytes)?;
    }
    if let Some(s) = &mut streamed {
        s.finish_steps()?;
        if let (Some(dir), Some(timeline)) = (&a.plot, s.timeline()) {
            let plot = llmsim_analysis::plot::timeline::plot(&scenario.name, timeline)
                .map_err(|e| CliError::Failure(e.to_string()))?;
            super::sweep::write_plots(dir, &[plot])?;
        }
        s.finish_trace(report::cluster::decode_base(&scenario))?;
    }
    let to_stdout = [&a.json, &a.requests_csv, &a.steps_csv, &a.trace_events, &a.timeline]
        .iter()
        .any(|p| p.as_deref() == Some(std::path::Path::new("-")));
    if !a.quiet && !to_stdout {
        print(&report::summary::render(&scenario, &out.result))?;
    }
    Ok(())
}

/// Refuses two outputs to one file (stdout, `-`, may take several): the
/// streamed ones write theirs while the run goes, so one would garble the
/// other.
fn distinct_outputs(a: &RunArgs) -> Result<(), CliError> {
    let named = [
        ("--json", &a.json),
        ("--requests-csv", &a.requests_csv),
        ("--steps-csv", &a.steps_csv),
        ("--trace-events", &a.trace_events),
        ("--timeline", &a.timeline),
    ];
    let files: Vec<(&str, &PathBuf)> = named
        .iter()
        .filter_map(|(flag, p)| p.as_ref().map(|p| (*flag, p)))
        .filter(|(_, p)| *p != Path::new("-"))
        .collect();
    for (i, (flag, path)) in files.iter().enumerate() {
        if let Some((other, _)) = files[..i].iter().find(|(_, p)| p == path) {
            return Err(CliError::Usage(format!(
                "{other} and {flag} both write {}: give each output its own file",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Replaces the scenario's workload with the successful requests of a
/// measured file, arriving when they were sent (relative to the first).
/// Send times, not intended arrivals, because measured TTFT and E2E start
/// at the send: the engine then sees what the server saw. Returns a note
/// saying what is replayed.
pub fn replay_measured(scenario: &mut Scenario, file: &Path, level: Option<usize>) -> Result<String, CliError> {
    let mut input = llmsim_scenario::input::open(llmsim_scenario::input::Kind::Measured, file)?;
    if !matches!(input.first_non_space()?, Some(b'{' | b'[')) {
        let (rows, content) = llmsim_scenario::trace::read_input(input, None)?;
        let note = format!("replaying {} requests of the trace {} on {}", rows.len(), file.display(), scenario.name);
        set_trace(scenario, file, rows);
        if let Arrivals::Trace(t) = &mut scenario.workload.arrivals {
            t.content = content.map(Arc::new);
        }
        return Ok(note);
    }
    let (measured, _) = llmsim_analysis::measured::read(input)?;
    let chosen = measured.pick(level, "--trace-level").map_err(|e| CliError::Usage(e.to_string()))?;
    let (rows, skipped) = chosen
        .trace_rows()
        .map_err(|m| CliError::Usage(format!("{}: cannot replay {}: {m}", file.display(), chosen.label)))?;
    let mut note = format!(
        "replaying {} requests of {} ({}, {}) on {}",
        rows.len(),
        file.display(),
        measured.tool.name(),
        chosen.label,
        scenario.name
    );
    if skipped > 0 {
        note.push_str(&format!("; {skipped} failed requests left out"));
    }
    set_trace(scenario, file, rows);
    Ok(note)
}

/// Makes `rows` the scenario's whole workload.
fn set_trace(scenario: &mut Scenario, file: &Path, rows: Vec<llmsim_scenario::trace::TraceRow>) {
    let w = &mut scenario.workload;
    w.arrivals =
        Arrivals::Trace(Trace { path: file.display().to_string(), rows: Arc::new(rows), content: None, classes: None });
    w.requests = None;
    w.duration_s = None;
    w.prompt_tokens = None;
    w.output_tokens = None;
    w.shared_prefix = None;
    w.sessions = None;
    w.hash_block_size = None;
}
