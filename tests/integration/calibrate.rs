//! Integration tests of `llmsim calibrate`: measured files written by
//! llmsim itself are fitted back, the profile is used by a scenario, the
//! output does not depend on the thread count, and every bad input exits 2
//! with a message.

use std::path::{Path, PathBuf};

use crate::support::*;

const BASE: &str = "scenarios/base.yml";

/// `llmsim run --requests-csv` of the base scenario with a hidden step
/// overhead of 4 ms and request overhead of 15 ms, at a rate and lengths.
fn measured(dir: &Path, name: &str, rate: &str, prompt: &str, output: &str) -> PathBuf {
    let path = dir.join(name);
    TestCommand::new(&["run", BASE, "--set", "latency.step_overhead_ms=4", "--set", "latency.request_overhead_ms=15"])
        .arg("--set")
        .arg(format!("workload.arrivals.poisson.rate={rate}"))
        .arg("--set")
        .arg(format!("workload.prompt_tokens={prompt}"))
        .arg("--set")
        .arg(format!("workload.output_tokens={output}"))
        .args(&["--set", "workload.requests=300", "--requests-csv"])
        .arg(&path)
        .ok();
    path
}

trait Args {
    fn args(self, a: &[&str]) -> Self;
}

impl Args for TestCommand {
    fn args(mut self, a: &[&str]) -> Self {
        for x in a {
            self = self.arg(x);
        }
        self
    }
}

fn two_runs(dir: &Path) -> Vec<PathBuf> {
    vec![measured(dir, "light.csv", "4", "512", "128"), measured(dir, "long.csv", "2", "2048", "64")]
}

const FIT: &str = "latency.step_overhead_ms,latency.request_overhead_ms";

#[test]
fn a_fit_finds_the_hidden_overheads_and_its_profile_is_used_by_a_scenario() {
    let dir = tempdir();
    let files = two_runs(dir.path());
    let profile = dir.path().join("lab.yml");
    // On the runs alone: two runs pin both keys, and no prior pulls them.
    let out = TestCommand::new(&["calibrate", BASE, "--fit", FIT, "--no-priors", "-o"])
        .arg(&profile)
        .arg(&files[0])
        .arg(&files[1])
        .ok()
        .stdout();
    assert!(out.contains("2 in the fit, 0 excluded as saturated, 0 held out"), "{out}");
    assert!(out.contains("leave-one-out"), "{out}");
    let text = std::fs::read_to_string(&profile).unwrap();
    let value: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let step = value["latency"]["step_overhead_ms"].as_f64().unwrap();
    let request = value["latency"]["request_overhead_ms"].as_f64().unwrap();
    assert!((step - 4.0).abs() <= 0.08, "step overhead {step}, hidden 4");
    assert!((request - 15.0).abs() <= 0.3, "request overhead {request}, hidden 15");
    assert_eq!(value["fit"]["llmsim_version"].as_str(), Some(env!("CARGO_PKG_VERSION")));
    // The command that fits it again: as given, -o by its file name.
    let command = value["fit"]["command"].as_str().unwrap();
    let expected = format!(
        "llmsim calibrate {BASE} --fit {FIT} --no-priors -o lab.yml {} {}",
        files[0].display(),
        files[1].display()
    );
    assert_eq!(command, expected);
    assert_eq!(value["fit"]["runs"].as_sequence().map(Vec::len), Some(2));
    // A scenario naming the profile by file gets its values; its own win.
    let base = std::fs::read_to_string(repo(BASE)).unwrap();
    let scenario = base.replace("name: base-h100\n", "name: calibrated\ncalibration: lab.yml\n");
    let path = write(dir.path(), "calibrated.yml", &scenario);
    let explain = TestCommand::new(&["explain"]).arg(&path).ok().stdout();
    assert!(explain.contains("latency.request_overhead_ms") && explain.contains("(from the calibration)"), "{explain}");
    assert!(
        explain.contains("latency.step_overhead_ms") && explain.contains("set by the scenario, which wins"),
        "{explain}"
    );
}

#[test]
fn the_output_is_the_same_at_one_and_two_threads() {
    let dir = tempdir();
    let files = two_runs(dir.path());
    let run = |threads: &str, out: &Path| {
        TestCommand::new(&["calibrate", BASE, "--fit", FIT, "--max-evals", "60", "--threads", threads, "-o"])
            .arg(out)
            .arg(&files[0])
            .arg(&files[1])
            .ok()
            .stdout()
    };
    std::fs::create_dir_all(dir.path().join("1")).unwrap();
    std::fs::create_dir_all(dir.path().join("2")).unwrap();
    let (a, b) = (dir.path().join("1/p.yml"), dir.path().join("2/p.yml"));
    assert!(run("1", &a) == run("2", &b), "the report differs between 1 and 2 threads");
    let (a, b) = (std::fs::read_to_string(&a).unwrap(), std::fs::read_to_string(&b).unwrap());
    assert!(a == b, "the profile differs between 1 and 2 threads:\n{a}\n---\n{b}");
}

/// `--sample-runs 1` over three runs (more than twice one): the report
/// names the sample, the fit still finds the hidden overheads, and the
/// bytes do not depend on the thread count.
#[test]
fn a_sampled_fit_names_its_sample_finds_the_values_and_is_the_same_at_any_thread_count() {
    let dir = tempdir();
    let mut files = two_runs(dir.path());
    files.push(measured(dir.path(), "busy.csv", "8", "1024", "32"));
    let run =
        |threads: &str| {
            let mut c = TestCommand::new(&["calibrate", BASE, "--fit", FIT, "--no-priors", "--no-leave-one-out"])
                .args(&["--sample-runs", "1", "--threads", threads]);
            for f in &files {
                c = c.arg(f);
            }
            c.ok().stdout()
        };
    let out = run("2");
    assert!(out.contains("with secant steps on 1 of the 3 runs"), "{out}");
    assert!(out == run("1"), "the report differs between 1 and 2 threads");
    let value = |key: &str| -> f64 {
        let line = out.lines().find(|l| l.trim_start().starts_with(key)).unwrap_or_else(|| panic!("{key}: {out}"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let (step, request) = (value("latency.step_overhead_ms"), value("latency.request_overhead_ms"));
    assert!((step - 4.0).abs() <= 0.08, "step overhead {step}, hidden 4\n{out}");
    assert!((request - 15.0).abs() <= 0.3, "request overhead {request}, hidden 15\n{out}");
}

#[test]
fn a_held_out_run_is_predicted_not_fitted() {
    let dir = tempdir();
    let files = two_runs(dir.path());
    let out = TestCommand::new(&["calibrate", BASE, "--fit", "latency.request_overhead_ms", "--no-leave-one-out"])
        .arg(&files[0])
        .arg("--holdout")
        .arg(&files[1])
        .ok()
        .stdout();
    assert!(out.contains("1 in the fit, 0 excluded as saturated, 1 held out"), "{out}");
    assert!(out.contains("long.csv [held out]") && out.contains("held-out runs (not in the fit)"), "{out}");
}

#[test]
fn bad_calibration_inputs_exit_2_with_the_reason() {
    let dir = tempdir();
    let file = measured(dir.path(), "m.csv", "4", "512", "128");
    let calibrate = |extra: &[&str]| TestCommand::new(&["calibrate", BASE]).args(extra).arg(&file).fails_with(2);
    // A measured file of an unknown shape names the known shapes.
    let odd = write(dir.path(), "odd.csv", "a,b\n1,2\n");
    TestCommand::new(&["calibrate", BASE]).arg(&odd).fails_with(2).stderr_has(&[
        "odd.csv",
        "unknown shape",
        "known shapes",
    ]);
    // A run with no metric the loss needs.
    calibrate(&["--metrics", "itl_mean_ms"]).stderr_has(&["none of the loss metrics", "ttft_mean_ms"]);
    let bare = write(dir.path(), "bare.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,10\n");
    TestCommand::new(&["calibrate", BASE]).arg(&bare).fails_with(2).stderr_has(&["without measured latencies"]);
    // A --fit key that is not numeric, or not a key at all.
    calibrate(&["--fit", "model.name"]).stderr_has(&["not a numeric key"]);
    calibrate(&["--fit", "efficiency.computer"]).stderr_has(&["did you mean `efficiency.compute`"]);
    // A loss that is not one of the two.
    calibrate(&["--loss", "cauchy:0"]).stderr_has(&["--loss `cauchy:0` is not allowed", "cauchy:PCT"]);
    calibrate(&["--loss", "huber"]).stderr_has(&["give `squared` or `cauchy:PCT`"]);
    // Bounds that exclude the start (the scenario has efficiency 1.0).
    calibrate(&["--fit", "efficiency.compute=0.2:0.9"]).stderr_has(&["the bounds exclude the start"]);
    // A key a profile cannot hold, with -o.
    calibrate(&["--fit", "scheduler.max_num_sequences=8:128", "-o", "x.yml"])
        .stderr_has(&["only efficiency and latency keys"]);
    // Every run saturated.
    let table = write(
        dir.path(),
        "table.csv",
        "run,workload.arrivals.poisson.rate,ttft_mean_ms,failed\nfast,40,900,12\nfaster,80,4000,300\n",
    );
    TestCommand::new(&["calibrate", BASE])
        .arg(&table)
        .fails_with(2)
        .stderr_has(&["every run is saturated", "fast: 12 requests failed"]);
}

#[test]
fn a_calibration_profile_with_keys_outside_efficiency_and_latency_exits_2() {
    let dir = tempdir();
    write(dir.path(), "bad.yml", "name: bad\nefficiency: { compute: 0.5 }\nscheduler: { max_batch_tokens: 512 }\n");
    let base = std::fs::read_to_string(repo(BASE)).unwrap();
    let path = write(dir.path(), "s.yml", &base.replace("name: base-h100\n", "name: s\ncalibration: bad.yml\n"));
    TestCommand::new(&["run"]).arg(&path).fails_with(2).stderr_has(&[
        "bad.yml",
        "scheduler",
        "only keys under efficiency and latency",
    ]);
    let path = write(dir.path(), "t.yml", &base.replace("name: base-h100\n", "name: t\ncalibration: h100-vlm\n"));
    TestCommand::new(&["run"])
        .arg(&path)
        .fails_with(2)
        .stderr_has(&["unknown calibration `h100-vlm`", "did you mean `h100-vllm`"]);
}

#[test]
fn the_shipped_h100_profile_is_found_by_name() {
    let dir = tempdir();
    let base = std::fs::read_to_string(repo(BASE)).unwrap();
    let text = base
        .replace("name: base-h100\n", "name: s\ncalibration: h100-vllm\n")
        .replace("latency:\n  step_overhead_ms: 0\n", "")
        .replace("efficiency:\n  compute: 1.0\n  memory: 1.0\n", "");
    let path = write(dir.path(), "s.yml", &text);
    let explain = TestCommand::new(&["explain"]).arg(&path).ok().stdout();
    assert!(explain.contains("# calibration   `h100-vllm`"), "{explain}");
    assert!(explain.contains("efficiency.memory") && explain.contains("(from the calibration)"), "{explain}");
}

#[test]
fn a_table_row_marked_excluded_is_listed_never_simulated() {
    let dir = tempdir();
    // Two runs llmsim can represent and one it cannot; the excluded row's
    // model is not even a preset, which would fail if it were simulated.
    let table = write(
        dir.path(),
        "table.csv",
        "run,workload.arrivals.poisson.rate,model.preset,ttft_mean_ms,e2e_mean_ms,excluded\n\
         light,4,,30,900,\n\
         heavy,8,,40,1100,\n\
         moe,4,no-such-model,50,1500,\"expert parallelism is not modelled\"\n",
    );
    let out = TestCommand::new(&["calibrate", BASE, "--fit", "latency.step_overhead_ms", "--no-leave-one-out"])
        .arg(&table)
        .ok()
        .stdout();
    assert!(out.contains("2 in the fit, 0 excluded as saturated"), "{out}");
    assert!(out.contains("not simulated (the measured file excludes them"), "{out}");
    assert!(out.contains("moe (") && out.contains("table.csv line 4): expert parallelism is not modelled"), "{out}");
    assert!(out.contains("ttft_mean_ms 50.00") && out.contains("e2e_mean_ms 1500.00"), "{out}");
    // Every row excluded: nothing to fit, exit 2 naming them.
    let none = write(
        dir.path(),
        "none.csv",
        "run,ttft_mean_ms,excluded\nmoe-a,50,expert parallelism\nmoe-b,60,expert parallelism\n",
    );
    TestCommand::new(&["calibrate", BASE]).arg(&none).fails_with(2).stderr_has(&[
        "every measured run is excluded",
        "moe-a",
        "none.csv line 3",
        "expert parallelism",
    ]);
}

#[test]
fn no_fit_predicts_the_runs_with_the_scenario_as_it_is() {
    let dir = tempdir();
    let files = two_runs(dir.path());
    // The scenario that produced the runs predicts them exactly; the base
    // scenario, without the hidden overheads (4 ms a step, 15 ms a request),
    // predicts every TTFT low.
    let base = std::fs::read_to_string(repo(BASE)).unwrap();
    assert!(base.contains("\n  step_overhead_ms: 0\n"), "base.yml changed: update this test");
    let hidden = base.replace("\n  step_overhead_ms: 0\n", "\n  step_overhead_ms: 4\n  request_overhead_ms: 15\n");
    let hidden = write(dir.path(), "hidden.yml", &hidden);
    let check = |scenario: &Path| {
        TestCommand::new(&["calibrate", "--no-fit"]).arg(scenario).arg(&files[0]).arg(&files[1]).ok().stdout()
    };
    let exact = check(&hidden);
    assert!(exact.contains("nothing fitted: the scenario as it is, loss 0.000000"), "{exact}");
    assert!(!exact.contains("leave-one-out needs"), "{exact}");
    let off = check(&repo(BASE));
    let line = off.lines().find(|l| l.trim_start().starts_with("ttft_mean_ms") && l.contains('%')).unwrap();
    let cells: Vec<&str> = line.split_whitespace().collect();
    let err: f64 = cells[1].trim_end_matches('%').parse().unwrap();
    assert!(err > 20.0, "the base scenario lacks 15 ms a request, so its TTFT is far off: {line}");
    // --no-fit writes no profile and refuses to be asked for one.
    TestCommand::new(&["calibrate", "--no-fit", "-o", "p.yml"]).arg(&hidden).arg(&files[0]).fails_with(2);
}

/// A table of long load-test stages is predicted from steady windows by
/// default (the report says so), `--full-stages` simulates them whole
/// (no such line, figures within the stated tolerance), and the two flags
/// that choose how much of a stage runs cannot be given together.
#[test]
fn long_stages_are_predicted_from_a_steady_window_unless_asked_whole() {
    let dir = tempdir();
    // Two 600 s stages of the base scenario (Poisson arrivals); the
    // measured figures only need to exist.
    let table = write(
        dir.path(),
        "stages.csv",
        "run,workload.arrivals.poisson.rate,workload.duration_s,workload.requests,ttft_mean_ms,e2e_mean_ms\n\
         slow,2,600,null,40,900\nbusy,4,600,null,45,1000\n",
    );
    let report =
        |extra: &[&str]| TestCommand::new(&["calibrate", "--no-fit", BASE]).args(extra).arg(&table).ok().stdout();
    let steady = report(&[]);
    assert!(steady.contains("stages     2 long stationary stages predicted from a steady window"), "{steady}");
    let whole = report(&["--full-stages"]);
    assert!(!whole.contains("stages     "), "{whole}");
    let e2e = |out: &str, run: &str| -> f64 {
        let mut lines = out.lines().skip_while(|l| !l.trim_start().starts_with(run));
        let line = lines.find(|l| l.contains("e2e_mean_ms")).unwrap();
        line.split_whitespace().skip_while(|c| *c != "e2e_mean_ms").nth(2).unwrap().parse().unwrap()
    };
    // The busy stage settles within its first window (so its figures are
    // the window's, not the whole stage's); a Poisson stage at 2 req/s
    // may not, and then runs whole.
    assert_ne!(e2e(&steady, "busy"), e2e(&whole, "busy"), "the busy stage was not taken from a window");
    for run in ["slow", "busy"] {
        let (a, b) = (e2e(&steady, run), e2e(&whole, run));
        assert!((a / b - 1.0).abs() <= 0.01, "{run}: {a} from a window, {b} whole");
    }
    TestCommand::new(&["calibrate", "--full-stages", "--sample-s", "30", BASE])
        .arg(&table)
        .fails_with(2)
        .stderr_has(&["--full-stages", "--sample-s"]);
}
