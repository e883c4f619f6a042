//! `llmsim fidelity`: how close the predictions come to real measured runs,
//! before and after calibration, as `results/fidelity.md`; and the shipped
//! profile fitted on the same runs, `hardware/calibrations/h100-vllm.yml`.
//!
//! The measured figures are the project's own transcriptions (a measured
//! table whose header comments say where every figure came from); the raw
//! files stay outside the repository. Each run is predicted three ways: at
//! the scenario's datasheet peaks (uncalibrated), with the fit on every run
//! (what the shipped profile holds), and with a fit that never saw it
//! (leave one experiment out: both load stages of an experiment are left
//! out together, so a stage is never predicted by a fit on its sibling).
//!
//! The goal the issue sets is the leave-one-experiment-out median absolute
//! error on the non-overloaded H100 runs: E2E mean at most 7%, TTFT mean at
//! most 18%, beside the published anchor (6.7% and 17.6%, quoted in issue 11
//! for the best published simulator over 36 held-out H100 runs; that source
//! is not in this repository). The table says whether it is met.
//!
//! Same files, same bytes: the fit is deterministic at any thread count.

use std::path::{Path, PathBuf};

use crate::yaml::Value;

use super::render::{Model, median_error};
use super::runs::{LoadOptions, Run, ScenarioSource};
use super::{Error, Outcome, Setup, error_pct, keys, profile};
use crate::sweep::metric::{Family, Metric, Stat};

/// One set of measured runs and how they are simulated and fitted.
pub struct Suite {
    pub title: &'static str,
    /// Relative to the repository root.
    pub scenario: &'static str,
    pub measured: &'static str,
    /// Seconds of each load stage simulated (a steady-state sample).
    pub sample_s: Option<f64>,
    /// The profile the fit on every run is written to, by name.
    pub profile: Option<&'static str>,
    /// Whether the goal (and the published anchor) applies.
    pub goal: bool,
    /// What the reader should know: provenance and what is not modelled.
    pub about: &'static str,
}

/// The suites `llmsim fidelity` runs.
pub const SUITES: [Suite; 2] = [
    Suite {
        title: "H100 SXM, vLLM, inference-perf load tests (BLIS training data)",
        scenario: "scenarios/fidelity/h100-vllm.yml",
        measured: "scenarios/fidelity/h100-inference-perf.csv",
        sample_s: Some(30.0),
        profile: Some("h100-vllm"),
        goal: true,
        about: "16 inference-perf load tests of vLLM (early 2026) on 1, 2 and 4 H100 SXM GPUs, one row per load \
            stage, transcribed from github.com/inference-sim/training (commit ed5c1d2, `default_args/`; the \
            measured file's header says how each figure was read). Constant arrivals, fixed prompt and output \
            lengths (`ignore_eos`), streaming completions, `max_num_batched_tokens` 2048, `max_num_seqs` 128. \
            Prefix caching is on, as it was in vLLM: the tool cycles through 100 fixed prompts (system prompt \
            + question), simulated as `shared_prefix` (groups 100) with the template tokens as the unique rest. \
            Each stage ran 600 or 1,200 s; the first 60 s of it are simulated (the queue settles within a few \
            seconds below the knee). TPOT mean is derived as (E2E mean - TTFT mean) / (output - 1). The four \
            `reasoning` experiments overloaded the server (requests failed): they are predicted, never fitted, \
            and not in the medians.\n\n\
            The fit uses `llmsim calibrate`'s defaults (the four keys, the squared log error). \
            The overloaded runs are not predicted to overload: the \
            simulated decode step at their batch is faster than the real one.",
    },
    Suite {
        title: "RTX 4090 and RTX PRO 6000, vLLM 0.19, per-request runs (LLMServingSim validation data)",
        scenario: "scenarios/fidelity/vllm-rtx.yml",
        measured: "scenarios/fidelity/vllm-rtx.csv",
        sample_s: None,
        profile: None,
        goal: false,
        about: "4 runs of vLLM 0.19.0's offline driver, 300 ShareGPT requests each at about 10.3 req/s, \
            transcribed from github.com/casys-kaist/LLMServingSim (commit 5daddb2, `bench/examples/`; the \
            measured file's header says how each figure was read). Each run is replayed request by request \
            (`scenarios/fidelity/traces/`): the arrival each request was queued at, its exact prompt and \
            output lengths (`min_tokens = max_tokens`, `ignore_eos`). `max_num_batched_tokens` 2048, \
            `max_num_seqs` 256 on the RTX 4090 (with vLLM's own 2,588 KV blocks: the run is KV-bound and \
            preempts heavily) and 128 on the RTX PRO 6000, prefix caching on. Every run queues: 300 requests \
            arrive within 30 s and take 64 to 184 s to serve, so TTFT is mostly waiting time and measures \
            throughput more than a prefill. Qwen3-32B ran on 2 GPUs over PCIe; no all-reduce time was measured \
            for them, so its link (16 GB/s, 20 us) is what the source's own simulator was configured with. \
            Qwen3-30B-A3B ran data parallel 2 with expert parallelism, which llmsim cannot represent: it is \
            listed, not simulated.\n\n\
            The fit uses `llmsim calibrate`'s defaults (the four keys, the squared log error) over the three \
            simulated runs, one GPU and model each; leave-one-out predicts each run from a fit on the other \
            two. No profile is shipped from it: a fit across two GPUs is not a profile of either.",
    },
];

/// The published anchor and the goal, by metric: (anchor %, goal %).
pub const GOALS: [(Metric, f64, f64); 2] =
    [(Metric::Latency(Family::E2e, Stat::Mean), 6.7, 7.0), (Metric::Latency(Family::Ttft, Stat::Mean), 17.6, 18.0)];

/// A file `fidelity` writes, relative to the repository root.
pub struct Generated {
    pub path: PathBuf,
    pub text: String,
}

/// Runs every suite from `root`; the table and the profiles.
pub fn generate(root: &Path) -> Result<Vec<Generated>, Error> {
    generate_with(root, &mut |_, _| {})
}

/// [`generate`], telling `done` each suite's outcome as it finishes.
pub fn generate_with(root: &Path, done: &mut dyn FnMut(&Suite, &Outcome)) -> Result<Vec<Generated>, Error> {
    let mut sections = Vec::new();
    let mut out = Vec::new();
    for suite in &SUITES {
        let o = run_suite(root, suite)?;
        done(suite, &o);
        sections.push(section(suite, &o));
        if let Some(name) = suite.profile {
            out.push(Generated {
                path: PathBuf::from(format!("hardware/calibrations/{name}.yml")),
                text: profile::render(&o, name, suite.scenario),
            });
        }
    }
    let mut md = String::from(
        "# Fidelity: predictions against real measured runs\n\n\
         Generated by `llmsim fidelity` from the measured tables under `scenarios/fidelity/`; CI runs \
         `llmsim fidelity --check`, which fails when this file or the shipped calibration profile is not what \
         the engine gives now. Errors are (predicted - measured) / measured. *Uncalibrated*: the scenario's \
         datasheet peaks, no overheads. *Calibrated*: `efficiency.compute`, `efficiency.memory`, \
         `latency.step_overhead_ms` and `latency.request_overhead_ms` fitted by `llmsim calibrate` on every \
         non-overloaded run of the suite (for H100, the shipped profile). *Leave-one-out*: fitted on the other \
         experiments only (both stages of an experiment are left out together). Runs the engine cannot \
         represent are listed under *Not simulated* with the reason, never dropped.\n",
    );
    for s in sections {
        md.push('\n');
        md.push_str(&s);
    }
    out.insert(0, Generated { path: PathBuf::from("results/fidelity.md"), text: md });
    Ok(out)
}

/// Loads, fits and leaves each experiment out.
pub fn run_suite(root: &Path, suite: &Suite) -> Result<Outcome, Error> {
    let src = ScenarioSource::load(&root.join(suite.scenario), &[]).map_err(|e| Error::Input(e.to_string()))?;
    let opts = LoadOptions { sample_s: suite.sample_s };
    let loaded = super::runs::load(&src, &root.join(suite.measured), &opts).map_err(|e| Error::Input(e.to_string()))?;
    let setup = Setup::new(default_keys());
    let mut o = super::calibrate(loaded.runs, Vec::new(), &setup)?;
    o.excluded = loaded.excluded;
    Ok(o)
}

fn default_keys() -> Vec<keys::FitKey> {
    keys::parse(&[]).unwrap_or_default()
}

fn pct(e: Option<f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{e:+.1}%"))
}

fn med(e: Option<f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{e:.1}%"))
}

/// A number as the table shows it: one decimal, or two below 100.
fn ms(x: f64) -> String {
    if x.abs() < 100.0 { format!("{x:.2}") } else { format!("{x:.1}") }
}

/// The features a run's simulation used, from its scenario.
pub fn features(run: &Run) -> String {
    let v = &run.base.value;
    let get = |path: &str| -> Option<&Value> {
        let mut node = v;
        for seg in path.split('.') {
            node = node.get(seg)?;
        }
        Some(node)
    };
    let mut out = Vec::new();
    let tp = get("parallelism.tensor").and_then(Value::as_u64).unwrap_or(1);
    out.push(format!("TP {tp}"));
    if get("model.architecture.experts").and_then(Value::as_u64).unwrap_or(0) > 0 {
        out.push("MoE".into());
    }
    out.push("chunked prefill".into());
    let prefix = get("model.kv_cache.prefix_caching").and_then(Value::as_bool).unwrap_or(false);
    out.push(if prefix { "prefix caching".into() } else { "no prefix caching".into() });
    out.join(", ")
}

fn setting(run: &Run, path: &str) -> String {
    let mut node = &run.base.value;
    for seg in path.split('.') {
        match node.get(seg) {
            Some(n) => node = n,
            None => return "-".into(),
        }
    }
    match node {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "-".into(),
    }
}

/// The metrics the tables show per run and per GPU.
const SHOWN: [Metric; 3] = [
    Metric::Latency(Family::Ttft, Stat::Mean),
    Metric::Latency(Family::E2e, Stat::Mean),
    Metric::Latency(Family::Tpot, Stat::Mean),
];

/// The GPU a run was simulated on: its hardware profile's name.
fn gpu(run: &Run) -> String {
    setting(run, "hardware.name")
}

/// The requests a run replays: a measured file's, or its scenario's trace.
fn trace_rows(run: &Run) -> Option<std::sync::Arc<Vec<crate::trace::TraceRow>>> {
    if let Some(rows) = &run.base.trace {
        return Some(std::sync::Arc::clone(rows));
    }
    match run.base.scenario(&[], &[]).ok()?.workload.arrivals {
        crate::config::Arrivals::Trace(t) => Some(t.rows),
        _ => None,
    }
}

/// How the load was offered: a rate, or the replayed requests.
fn load_cell(run: &Run) -> String {
    match trace_rows(run) {
        Some(rows) => {
            let span = rows.last().map_or(0.0, |r| r.arrival.as_secs_f64());
            format!("{} requests in {span:.1} s", rows.len())
        }
        None => {
            let rate = setting(run, "workload.arrivals.constant.rate");
            if rate == "-" { rate } else { format!("{rate} req/s") }
        }
    }
}

/// Prompt and output tokens: as set, or a trace's means.
fn lengths_cell(run: &Run) -> String {
    match trace_rows(run) {
        Some(rows) if !rows.is_empty() => {
            let n = rows.len() as f64;
            let prompt = rows.iter().map(|r| f64::from(r.prompt)).sum::<f64>() / n;
            let output = rows.iter().map(|r| f64::from(r.output)).sum::<f64>() / n;
            format!("mean {prompt:.0} / {output:.0}")
        }
        _ => format!("{} / {}", setting(run, "workload.prompt_tokens"), setting(run, "workload.output_tokens")),
    }
}

/// Median absolute error of `m` under `model` over the fitted runs on `gpu`.
fn gpu_median(o: &Outcome, gpu_name: &str, m: Metric, model: Model) -> Option<f64> {
    let errors: Vec<f64> = o
        .fit_runs()
        .filter(|(r, _)| gpu(r) == gpu_name)
        .filter_map(|(r, oc)| {
            let q = *r.measured.get(&m)?;
            let p = match model {
                Model::Uncalibrated => oc.uncalibrated.get(&m).copied(),
                Model::Calibrated => oc.calibrated.get(&m).copied(),
                Model::LeaveOneOut => oc.loo.as_ref()?.0.get(&m).copied(),
            };
            error_pct(p, q)
        })
        .collect();
    super::median_abs(&errors)
}

/// One suite's section of `results/fidelity.md`.
pub fn section(suite: &Suite, o: &Outcome) -> String {
    let fit_count = o.outcomes.iter().filter(|x| x.in_fit).count();
    let groups: std::collections::BTreeSet<&str> =
        o.runs.iter().zip(&o.outcomes).filter(|(_, x)| x.in_fit).map(|(r, _)| r.group.as_str()).collect();
    let mut md = format!("## {}\n\n{}\n\n", suite.title, suite.about);
    let overloaded = o.runs.len() - fit_count;
    md.push_str(&format!(
        "Scenario `{}`, measured `{}`. {} runs: {fit_count} in the fit (from {} experiments), {overloaded} \
         overloaded{}.\n\n",
        suite.scenario,
        suite.measured,
        o.runs.len() + o.excluded.len(),
        groups.len(),
        if o.excluded.is_empty() { String::new() } else { format!(", {} not simulated", o.excluded.len()) }
    ));
    md.push_str(&format!("### Median absolute error over the {fit_count} non-overloaded runs\n\n"));
    if suite.goal {
        md.push_str(
            "| metric | uncalibrated | calibrated | leave-one-experiment-out | published anchor | goal (leave-one-out) |\n\
             |---|---:|---:|---:|---:|---|\n",
        );
    } else {
        md.push_str("| metric | uncalibrated | calibrated | leave-one-experiment-out |\n|---|---:|---:|---:|\n");
    }
    for m in super::render::metrics_seen(o) {
        let cell = |model| med(median_error(o, m, model, false));
        let mut row = format!(
            "| {} | {} | {} | {} |",
            m.name(),
            cell(Model::Uncalibrated),
            cell(Model::Calibrated),
            cell(Model::LeaveOneOut)
        );
        if suite.goal {
            let (anchor, goal) = match GOALS.iter().find(|(g, _, _)| *g == m) {
                Some((_, a, g)) => {
                    let loo = median_error(o, m, Model::LeaveOneOut, false);
                    let verdict = match loo {
                        Some(e) if e <= *g => "met",
                        Some(_) => "**not met**",
                        None => "-",
                    };
                    (format!("{a}%"), format!("<= {g}%: {verdict}"))
                }
                None => ("-".into(), "-".into()),
            };
            row.push_str(&format!(" {anchor} | {goal} |"));
        }
        md.push_str(&row);
        md.push('\n');
    }
    let mut gpus: Vec<String> = Vec::new();
    for (r, _) in o.fit_runs() {
        if !gpus.contains(&gpu(r)) {
            gpus.push(gpu(r));
        }
    }
    md.push_str(&format!("\n### By GPU\n\nMedian absolute error over each GPU's {fit_count_word} runs (uncalibrated / calibrated / leave-one-out).\n\n", fit_count_word = "non-overloaded"));
    md.push_str("| GPU | runs |");
    for m in SHOWN {
        md.push_str(&format!(" {} |", m.name()));
    }
    md.push_str("\n|---|---:|---:|---:|---:|\n");
    for g in &gpus {
        let n = o.fit_runs().filter(|(r, _)| gpu(r) == *g).count();
        md.push_str(&format!("| {g} | {n} |"));
        for m in SHOWN {
            let cells: Vec<String> = [Model::Uncalibrated, Model::Calibrated, Model::LeaveOneOut]
                .map(|model| med(gpu_median(o, g, m, model)))
                .to_vec();
            md.push_str(&format!(" {} |", cells.join(" / ")));
        }
        md.push('\n');
    }
    let written = suite.profile.map_or_else(String::new, |p| format!(" (`hardware/calibrations/{p}.yml`)"));
    md.push_str(&format!(
        "\nFitted on all {fit_count} runs{written}, loss {:.4} -> {:.4} in {} evaluations:\n\n",
        o.start_loss, o.fit.loss, o.fit.evals
    ));
    for (k, x) in o.setup.keys.iter().zip(&o.fit.x) {
        md.push_str(&format!("- `{}` = {x} (bounds {} to {})\n", k.key, k.lo, k.hi));
    }
    md.push_str("\n### Runs\n\nMeasured, then each prediction with its error. Times in ms.\n\n");
    md.push_str(
        "| run | GPU | model | features | load | prompt / output | TTFT mean | uncal. | loo | E2E mean | uncal. | loo \
         | TPOT mean | uncal. | loo |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (r, oc) in o.runs.iter().zip(&o.outcomes) {
        let name = if oc.in_fit { r.name.clone() } else { format!("{} (overloaded: {})", r.name, sat(r)) };
        let mut row = format!(
            "| {name} | {} | {} | {} | {} | {} |",
            gpu(r),
            setting(r, "model.name"),
            features(r),
            load_cell(r),
            lengths_cell(r)
        );
        for m in SHOWN {
            let Some(q) = r.measured.get(&m).copied() else {
                row.push_str(" - | - | - |");
                continue;
            };
            let u = oc.uncalibrated.get(&m).copied();
            let l = oc.loo.as_ref().and_then(|(f, _)| f.get(&m).copied());
            let cell = |p: Option<f64>| {
                p.map_or_else(|| "-".into(), |p| format!("{} ({})", ms(p), pct(error_pct(Some(p), q))))
            };
            row.push_str(&format!(" {} | {} | {} |", ms(q), cell(u), if oc.in_fit { cell(l) } else { "-".into() }));
        }
        md.push_str(&row);
        md.push('\n');
    }
    if !o.excluded.is_empty() {
        md.push_str("\n### Not simulated\n\nListed with what was measured; the engine cannot represent them.\n\n");
        md.push_str("| run | why | TTFT mean | E2E mean | TPOT mean |\n|---|---|---:|---:|---:|\n");
        for e in &o.excluded {
            let fig = |m: &Metric| e.measured.get(m).map_or_else(|| "-".into(), |v| ms(*v));
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                e.name,
                e.reason,
                fig(&SHOWN[0]),
                fig(&SHOWN[1]),
                fig(&SHOWN[2])
            ));
        }
    }
    md
}

fn sat(r: &Run) -> String {
    r.saturated.clone().unwrap_or_default()
}
