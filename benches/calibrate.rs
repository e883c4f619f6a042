//! Calibration speed: a 4-parameter fit (efficiency.compute,
//! efficiency.memory, latency.step_overhead_ms, latency.request_overhead_ms)
//! over 6 measured runs of 1,000 requests each, on one thread.
//!
//! The measured files are `run --requests-csv` outputs of the base scenario
//! with hidden values (those of the parameter-recovery test), at six rates
//! and lengths; the fit starts at the datasheet peaks with no overheads.
//! `cargo bench --bench calibrate` prints the wall time (best of three),
//! the evaluations and the fitted values. It asserts nothing: speed is
//! measured here, never in a test. Issue 11's target: under 10 s.
//!
//! `cargo bench --bench calibrate -- shipped` times the shipped H100
//! calibration instead, as a user runs it (`llmsim calibrate
//! scenarios/fidelity/h100-vllm.yml scenarios/fidelity/h100-inference-perf.csv`:
//! 20 runs, 4 keys, leave-one-out, every core), once, then once with
//! `--full-stages`: issue 33's goal was under 60 s on 2 cores
//! (docs/calibration.md, "Speed").
//!
//! `cargo bench --bench calibrate -- aic` times a fit over the 991
//! closed-loop AIConfigurator rows on Hopper (`llmsim calibrate
//! scenarios/fidelity/hopper-vllm.yml scenarios/fidelity/aic-hopper.csv
//! --include-saturated --no-leave-one-out`: 4 keys, every core), sampled
//! (the default) and, with `aic --whole`, replaying every row at every
//! evaluation (`--sample-runs 0`, about half an hour): issue 33's goal
//! was under 5 minutes (docs/calibration.md, "Sampled fits").

use std::path::Path;
use std::time::Instant;

use llmsim_analysis::calibrate::runs::{self, LoadOptions, ScenarioSource};
use llmsim_analysis::calibrate::{self as cal, Setup, keys};
use llmsim_scenario::config::{Override, load_scenario_with};

const HIDDEN: [(&str, &str); 4] = [
    ("efficiency.compute", "0.55"),
    ("efficiency.memory", "0.8"),
    ("latency.step_overhead_ms", "3"),
    ("latency.request_overhead_ms", "12"),
];

const SHAPES: [(&str, &str, &str); 6] = [
    ("4", "512", "128"),
    ("14", "512", "128"),
    ("2", "2048", "64"),
    ("3", "128", "512"),
    ("4", "2048", "256"),
    ("8", "1024", "32"),
];

fn set(key: &str, value: &str) -> Override {
    Override::parse(&format!("{key}={value}")).expect("valid override")
}

/// The shipped H100 calibration, as a process, as a user runs it (long
/// stages from a steady window) and with `--full-stages` (every stage
/// simulated whole); prints each wall time and the report's optimiser and
/// leave-one-out lines.
fn shipped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for extra in [None, Some("--full-stages")] {
        let t = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_llmsim"))
            .arg("calibrate")
            .arg(root.join("scenarios/fidelity/h100-vllm.yml"))
            .arg(root.join("scenarios/fidelity/h100-inference-perf.csv"))
            .args(extra)
            .output()
            .expect("run llmsim calibrate");
        let wall = t.elapsed().as_secs_f64();
        assert!(out.status.success(), "llmsim calibrate failed: {}", String::from_utf8_lossy(&out.stderr));
        let report = String::from_utf8_lossy(&out.stdout);
        let how = extra.unwrap_or("steady windows (the default)");
        println!("shipped H100 calibration (20 runs, 4 keys, leave-one-out), {how}: {wall:.1} s wall");
        println!("  {}", String::from_utf8_lossy(&out.stderr).trim());
        for line in report.lines().filter(|l| l.starts_with("optimiser") || l.contains("leave-one-experiment-out (")) {
            println!("  {}", line.trim());
        }
    }
}

/// The fit over the 991 AIConfigurator rows, as a process: sampled, and
/// with `whole` every row at every evaluation too; prints each wall time
/// and the report's optimiser line and fitted values.
fn aic(whole: bool) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ways: &[Option<&str>] = if whole { &[None, Some("0")] } else { &[None] };
    for samples in ways {
        let t = Instant::now();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_llmsim"));
        cmd.arg("calibrate")
            .arg(root.join("scenarios/fidelity/hopper-vllm.yml"))
            .arg(root.join("scenarios/fidelity/aic-hopper.csv"))
            .args(["--include-saturated", "--no-leave-one-out"]);
        if let Some(n) = samples {
            cmd.args(["--sample-runs", n]);
        }
        let out = cmd.output().expect("run llmsim calibrate");
        let wall = t.elapsed().as_secs_f64();
        assert!(out.status.success(), "llmsim calibrate failed: {}", String::from_utf8_lossy(&out.stderr));
        let how = if samples.is_some() { "every row at every evaluation" } else { "sampled (the default)" };
        println!("991 AIConfigurator rows (4 keys, no leave-one-out), {how}: {wall:.1} s wall");
        println!("  {}", String::from_utf8_lossy(&out.stderr).trim());
        let report = String::from_utf8_lossy(&out.stdout);
        let mut lines = report.lines().skip_while(|l| !l.starts_with("optimiser"));
        for line in lines.by_ref().take(7) {
            println!("  {}", line.trim_end());
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "shipped") {
        shipped();
        return;
    }
    if args.iter().any(|a| a == "aic") {
        aic(args.iter().any(|a| a == "--whole"));
        return;
    }
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/base.yml");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut files = Vec::new();
    for (i, (rate, prompt, output)) in SHAPES.iter().enumerate() {
        let mut o: Vec<Override> = HIDDEN.iter().map(|(k, v)| set(k, v)).collect();
        o.extend([
            set("workload.requests", "1000"),
            set("workload.arrivals.poisson.rate", rate),
            set("workload.prompt_tokens", prompt),
            set("workload.output_tokens", output),
        ]);
        let s = load_scenario_with(&base, &o).expect("scenario");
        let out = llmsim_planner::Run::new(&s).go().expect("simulation");
        let path = dir.path().join(format!("measured-{i}.csv"));
        std::fs::write(&path, llmsim_planner::report::csv_out::requests(&out.requests).expect("csv")).expect("write");
        files.push(path);
    }
    let src = ScenarioSource::load(&base, &[]).expect("base scenario");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool");
    let setup = Setup { leave_one_out: false, ..Setup::new(keys::parse(&[]).expect("keys")) };
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..3 {
        let runs: Vec<_> =
            files.iter().flat_map(|f| runs::load(&src, f, &LoadOptions::default()).expect("runs").runs).collect();
        let t = Instant::now();
        let o = pool.install(|| cal::calibrate(runs, Vec::new(), &setup)).expect("fit");
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(o);
    }
    let o = last.expect("ran");
    println!("calibrate: 4 keys, 6 runs of 1,000 requests, 1 thread");
    println!("  best of 3: {best:.2} s ({} loss evaluations, each replaying all 6 runs)", o.fit.evals);
    println!("  (the timed part also predicts every run uncalibrated and calibrated for the report)");
    for (k, x) in o.setup.keys.iter().zip(&o.fit.x) {
        println!("  {:<30} {x}", k.key);
    }
}
