//! Integration tests: sweeps, shards and merge, capacity search, plots and
//! trace events, and their errors.

use std::path::Path;

use crate::support::*;

/// Several arguments at once (kept here, not in the shared support module).
trait ArgsExt {
    fn args(self, args: &[&str]) -> Self;
}

impl ArgsExt for TestCommand {
    fn args(self, args: &[&str]) -> Self {
        args.iter().fold(self, |c, a| c.arg(a))
    }
}

/// A small, fast base: 60 requests of the base model.
const SMALL: &[&str] = &["--set", "workload.requests=60"];

fn sweep(extra: &[&str]) -> TestCommand {
    let mut args = vec!["sweep", "scenarios/base.yml"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    TestCommand::new(&args)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const TWO_AXES: &[&str] =
    &["--set", "workload.arrivals.poisson.rate=10:30:10", "--set", "scheduler.max_batch_tokens=512,8192"];

#[test]
fn a_sweep_writes_one_csv_row_per_point_in_axis_order_with_units_in_the_header() {
    let dir = tempdir();
    let csv = dir.path().join("out.csv");
    sweep(TWO_AXES).arg("--csv").arg(&csv).ok();
    let text = read(&csv);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + 6);
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(header[..4], ["workload.arrivals.poisson.rate", "scheduler.max_batch_tokens", "completed", "rejected"]);
    for col in ["ttft_p50_ms", "ttft_p99_ms", "itl_p99_ms", "tpot_mean_ms", "e2e_max_ms", "queue_p90_ms"] {
        assert!(header.contains(&col), "{col} missing from {header:?}");
    }
    assert!(header.contains(&"output_tokens_per_s") && header.contains(&"kv_peak_frac"));
    let axes: Vec<String> = lines[1..].iter().map(|l| l.split(',').take(2).collect::<Vec<_>>().join(",")).collect();
    assert_eq!(axes, ["10,512", "10,8192", "20,512", "20,8192", "30,512", "30,8192"]);
    assert!(lines[1..].iter().all(|l| l.split(',').nth(2) == Some("60")), "every point completes its 60 requests");
}

#[test]
fn a_sweep_point_matches_a_plain_run_of_the_same_scenario() {
    let dir = tempdir();
    let (sweep_json, run_json) = (dir.path().join("s.json"), dir.path().join("r.json"));
    sweep(&["--set", "scheduler.max_batch_tokens=512,2048", "--json"]).arg(&sweep_json).ok();
    TestCommand::new(&["run", "scenarios/base.yml", "--set", "workload.requests=60"])
        .args(&["--set", "scheduler.max_batch_tokens=2048", "--json"])
        .arg(&run_json)
        .ok();
    let points = json(&sweep_json);
    assert_eq!(points[1]["axes"]["scheduler.max_batch_tokens"], 2048);
    assert_eq!(points[1]["seeds"], serde_json::json!([42]));
    assert_eq!(points[1]["results"][0], json(&run_json));
    assert_eq!(points[1]["summary"]["ttft_p99_ms"]["mean"], json(&run_json)["ttft_ms"]["p99"]);
}

#[test]
fn the_output_bytes_are_the_same_at_one_and_two_threads() {
    let dir = tempdir();
    let mut outputs = Vec::new();
    for (i, (env, flag)) in [("1", "0"), ("2", "0"), ("1", "2"), ("2", "1")].iter().enumerate() {
        let (csv, js) = (dir.path().join(format!("{i}.csv")), dir.path().join(format!("{i}.json")));
        sweep(TWO_AXES)
            .args(&["--seeds", "2", "--threads", flag])
            .env("RAYON_NUM_THREADS", env)
            .arg("--csv")
            .arg(&csv)
            .arg("--json")
            .arg(&js)
            .ok();
        outputs.push((std::fs::read(&csv).unwrap(), std::fs::read(&js).unwrap()));
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]), "outputs differ between thread counts");
}

#[test]
fn seeds_give_the_mean_and_a_95_percent_interval_of_every_metric() {
    let dir = tempdir();
    let (csv, js) = (dir.path().join("s.csv"), dir.path().join("s.json"));
    sweep(&["--set", "workload.arrivals.poisson.rate=20,40", "--seeds", "3", "--csv"])
        .arg(&csv)
        .arg("--json")
        .arg(&js)
        .ok();
    let text = read(&csv);
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}"));
    let row: Vec<&str> = text.lines().nth(2).unwrap().split(',').collect();
    let points = json(&js);
    let p = &points[1];
    assert_eq!(p["seeds"], serde_json::json!([42, 43, 44]));
    let values: Vec<f64> = (0..3).map(|i| p["results"][i]["ttft_ms"]["p99"].as_f64().unwrap()).collect();
    let mean = values.iter().sum::<f64>() / 3.0;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let ci = 4.302_652_730 * sd / 3f64.sqrt();
    assert!((row[col("ttft_p99_ms")].parse::<f64>().unwrap() - mean).abs() < 1e-3);
    assert!((row[col("ttft_p99_ms_ci95")].parse::<f64>().unwrap() - ci).abs() < 1e-3);
    assert!((p["summary"]["ttft_p99_ms"]["ci95"].as_f64().unwrap() - ci).abs() < 1e-9);
    assert!(ci > 0.0, "three seeds of a Poisson workload differ");
}

#[test]
fn a_sweep_file_names_its_base_and_axes_and_the_command_line_adds_more() {
    let dir = tempdir();
    let csv = dir.path().join("out.csv");
    TestCommand::new(&["sweep", "scenarios/sweeps/hardware.yml", "--set", "workload.requests=30"])
        .args(&["--set", "efficiency.memory=0.5,1.0", "--csv"])
        .arg(&csv)
        .ok();
    let text = read(&csv);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("workload.arrivals.poisson.rate,hardware,efficiency.memory,completed"),
        "{}",
        lines[0]
    );
    assert_eq!(lines.len(), 1 + 4 * 3 * 2);
    assert!(lines[1].starts_with("1,h100-80gb,0.5,30,"), "{}", lines[1]);
    assert!(lines[3].starts_with("1,a100-80gb,0.5,"), "{}", lines[3]);
}

#[test]
fn a_hardware_axis_runs_each_profile() {
    let dir = tempdir();
    let js = dir.path().join("out.json");
    sweep(&["--set", "hardware=h100-80gb,a100-80gb,l40s", "--json"])
        .arg(&js)
        .arg("--plot")
        .arg(dir.path().join("p"))
        .ok();
    let svg = read(&dir.path().join("p/itl_p50_ms.svg"));
    let texts = svg_texts(&roxmltree::Document::parse(&svg).unwrap());
    for name in ["h100-80gb", "a100-80gb", "l40s"] {
        assert!(texts.iter().any(|t| t == name), "profile names are the x ticks: {texts:?}");
    }
    assert_eq!(lines_in(&roxmltree::Document::parse(&svg).unwrap(), "#4E79A7"), [3]);
    let points = json(&js);
    let blocks: Vec<u64> =
        (0..3).map(|i| points[i]["results"][0]["capacity"]["num_blocks"].as_u64().unwrap()).collect();
    assert_eq!(points[2]["axes"]["hardware"], "l40s");
    assert!(blocks[0] == blocks[1] && blocks[2] < blocks[0], "80, 80 and 48 GiB: {blocks:?}");
    let itl = |i: usize| points[i]["results"][0]["itl_ms"]["p50"].as_f64().unwrap();
    assert!(itl(0) < itl(1) && itl(1) < itl(2), "3350, 2039 and 864 GB/s");
}

#[test]
fn shards_merge_into_the_bytes_one_run_writes() {
    let dir = tempdir();
    let p = |name: &str| dir.path().join(name);
    let args = [TWO_AXES, &["--seeds", "2"]].concat();
    sweep(&args).arg("--csv").arg(p("one.csv")).arg("--json").arg(p("one.json")).arg("--plot").arg(p("one")).ok();
    for k in [2, 0, 1] {
        sweep(&args).arg("--shard").arg(format!("{k}/3")).arg("-o").arg(p(&format!("shard{k}.json"))).ok();
    }
    let shard1 = json(&p("shard1.json"));
    assert_eq!((shard1["shard"].as_u64(), shard1["shards"].as_u64()), (Some(1), Some(3)));
    assert_eq!(shard1["point_indices"], serde_json::json!([1, 4]));
    assert_eq!(shard1["fingerprint"].as_str().map(str::len), Some(16));
    TestCommand::new(&["merge"])
        .arg(p("shard1.json"))
        .arg(p("shard2.json"))
        .arg(p("shard0.json"))
        .arg("--csv")
        .arg(p("merged.csv"))
        .arg("--json")
        .arg(p("merged.json"))
        .arg("--plot")
        .arg(p("merged"))
        .ok();
    assert_eq!(std::fs::read(p("one.csv")).unwrap(), std::fs::read(p("merged.csv")).unwrap());
    assert_eq!(std::fs::read(p("one.json")).unwrap(), std::fs::read(p("merged.json")).unwrap());
    let svg = "ttft_p99_ms.svg";
    assert_eq!(std::fs::read(p("one").join(svg)).unwrap(), std::fs::read(p("merged").join(svg)).unwrap());
}

#[test]
fn merge_refuses_shards_of_different_sweeps() {
    let dir = tempdir();
    let p = |name: &str| dir.path().join(name);
    sweep(&["--set", "scheduler.max_batch_tokens=512,1024", "--shard", "0/2", "-o"]).arg(p("a0.json")).ok();
    sweep(&["--set", "scheduler.max_batch_tokens=512,2048", "--shard", "1/2", "-o"]).arg(p("b1.json")).ok();
    TestCommand::new(&["merge"])
        .arg(p("a0.json"))
        .arg(p("b1.json"))
        .arg("--csv")
        .arg(p("x.csv"))
        .fails_with(2)
        .stderr_has(&["a0.json and ", "b1.json are shards of different sweeps"]);
    assert!(!p("x.csv").exists());
}

#[test]
fn merge_refuses_missing_and_duplicate_shards() {
    let dir = tempdir();
    let p = |name: &str| dir.path().join(name);
    for k in [0, 2] {
        sweep(TWO_AXES).arg("--shard").arg(format!("{k}/3")).arg("-o").arg(p(&format!("s{k}.json"))).ok();
    }
    TestCommand::new(&["merge"])
        .arg(p("s0.json"))
        .arg(p("s2.json"))
        .fails_with(2)
        .stderr_has(&["missing shard 1 of 3 (have 0, 2)"]);
    TestCommand::new(&["merge"])
        .arg(p("s0.json"))
        .arg(p("s0.json"))
        .fails_with(2)
        .stderr_has(&["are both shard 0 of 3"]);
    let other = write(dir.path(), "other.json", "{\"hello\": 1}");
    TestCommand::new(&["merge"]).arg(&other).fails_with(2).stderr_has(&["other.json: not a shard file"]);
}

#[test]
fn a_shard_that_does_not_exist_is_refused() {
    sweep(&["--shard", "3/2", "-o", "x.json"])
        .fails_with(2)
        .stderr_has(&["--shard 3/2: there is no shard 3 of 2; shards are numbered from 0 to 1"]);
    sweep(&["--shard", "0/2"]).fails_with(2).stderr_has(&["--shard 0/2: give the shard file to write with --output"]);
}

#[test]
fn an_unknown_key_path_gets_the_nearest_valid_one() {
    sweep(&["--set", "sheduler.max_batch_tokens=512,1024"]).fails_with(2).stderr_has(&[
        "--set unknown key path `sheduler.max_batch_tokens`",
        "did you mean `scheduler.max_batch_tokens`?",
    ]);
    TestCommand::new(&["run", "scenarios/base.yml", "--set", "workload.arrivals.poison.rate=3"])
        .fails_with(2)
        .stderr_has(&["did you mean `workload.arrivals.poisson.rate`?"]);
    sweep(&["--set", "scheduler.chunked_prefill_mode_flag=1,2"]).fails_with(2).stderr_has(&[
        "keys under `scheduler`: capacity_scheduler_policy, context_chunking_policy, cuda_graph_max_tokens",
    ]);
}

#[test]
fn a_value_of_the_wrong_type_is_refused_before_anything_runs() {
    sweep(&["--set", "scheduler.max_batch_tokens=2048,lots"])
        .fails_with(2)
        .stderr_has(&["`scheduler.max_batch_tokens` expects a whole number, got the string \"lots\""]);
    sweep(&["--set", "scheduler.max_batch_tokens=2048,0"])
        .fails_with(2)
        .stderr_has(&["point 2 of 2 (scheduler.max_batch_tokens=0)", "scheduler.max_batch_tokens: 0 is not allowed"]);
}

#[test]
fn an_empty_axis_and_a_zero_step_are_refused() {
    sweep(&["--set", "workload.arrivals.poisson.rate="]).fails_with(2).stderr_has(&["the axis is empty"]);
    sweep(&["--set", "workload.arrivals.poisson.rate=1,,2"])
        .fails_with(2)
        .stderr_has(&["value 2 of the axis is empty"]);
    sweep(&["--set", "workload.arrivals.poisson.rate=10:100:0"])
        .fails_with(2)
        .stderr_has(&["has a zero step; the step must be greater than 0"]);
    let dir = tempdir();
    let file = write(dir.path(), "s.yml", "base: x.yml\naxes:\n  - key: workload.requests\n    values: []\n");
    write(dir.path(), "x.yml", "");
    TestCommand::new(&["sweep"])
        .arg(&file)
        .fails_with(2)
        .stderr_has(&["s.yml:3: axes[0]: `workload.requests`: the axis is empty"]);
}

#[test]
fn a_sweep_file_must_name_a_base_that_exists() {
    let dir = tempdir();
    let file = write(dir.path(), "s.yml", "# a sweep\nbase: missing.yml\naxes: []\n");
    TestCommand::new(&["sweep"])
        .arg(&file)
        .fails_with(2)
        .stderr_has(&["s.yml:2: base: the base scenario", "missing.yml does not exist"]);
}

#[test]
fn no_progress_bar_or_stray_output_when_not_on_a_terminal() {
    let out = sweep(TWO_AXES).ok();
    assert_eq!(out.stderr(), "", "stderr is not a terminal: no progress bar");
    assert!(out.stdout().contains("ttft p99"));
    let quiet = sweep(&[TWO_AXES, &["--quiet"]].concat()).ok();
    assert_eq!((quiet.stdout(), quiet.stderr()), (String::new(), String::new()));
}

/// Attribute `name` of an element, or "".
fn attr<'a>(n: &roxmltree::Node<'a, 'a>, name: &str) -> &'a str {
    n.attribute(name).unwrap_or("")
}

fn svg_texts(doc: &roxmltree::Document) -> Vec<String> {
    doc.descendants().filter(|n| n.has_tag_name("text")).map(|n| n.text().unwrap_or("").trim().to_string()).collect()
}

/// The number of points of every polyline drawn in `color`.
fn lines_in(doc: &roxmltree::Document, color: &str) -> Vec<usize> {
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline") && attr(n, "stroke").eq_ignore_ascii_case(color))
        .map(|n| attr(&n, "points").split_whitespace().count())
        .collect()
}

#[test]
fn sweep_plots_draw_a_labelled_line_per_second_axis_value_and_the_slo() {
    let dir = tempdir();
    let plots = dir.path().join("plots");
    sweep(TWO_AXES).arg("--plot").arg(&plots).args(&["--slo", "ttft_p99_ms=50", "-q"]).ok();
    let mut names: Vec<String> =
        std::fs::read_dir(&plots).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let expect: Vec<String> = ["e2e", "itl", "queue", "tpot", "ttft"]
        .iter()
        .flat_map(|f| ["p50", "p99"].map(|s| format!("{f}_{s}_ms.svg")))
        .collect();
    assert_eq!(names, expect);
    let text = read(&plots.join("ttft_p99_ms.svg"));
    let doc = roxmltree::Document::parse(&text).expect("valid XML");
    assert!(doc.root_element().has_tag_name("svg"));
    let texts = svg_texts(&doc);
    for label in ["max_batch_tokens=512", "max_batch_tokens=8192", "SLO 50 ms", "workload.arrivals.poisson.rate"] {
        assert!(texts.iter().any(|t| t == label), "no text {label:?} in {texts:?}");
    }
    // One line of three points (rates 10, 20, 30) per budget, in the first two palette colours.
    assert_eq!(lines_in(&doc, "#4E79A7"), [3]);
    assert_eq!(lines_in(&doc, "#F28E2B"), [3]);
    // The p50 plot has no SLO line.
    let p50 = read(&plots.join("ttft_p50_ms.svg"));
    assert!(!svg_texts(&roxmltree::Document::parse(&p50).unwrap()).iter().any(|t| t.starts_with("SLO")));
}

#[test]
fn a_sweep_plot_with_seeds_draws_error_bars_and_with_no_axis_is_refused() {
    let dir = tempdir();
    let plots = dir.path().join("p");
    sweep(&["--set", "workload.arrivals.poisson.rate=10,20", "--seeds", "3", "-q", "--plot"]).arg(&plots).ok();
    let text = read(&plots.join("itl_p99_ms.svg"));
    let doc = roxmltree::Document::parse(&text).unwrap();
    // One line of two points, and per point an error bar of three strokes.
    assert_eq!(lines_in(&doc, "#4E79A7"), [2]);
    let bar_strokes = doc.descendants().filter(|n| n.has_tag_name("line") && attr(n, "stroke") == "#4E79A7").count();
    assert_eq!(bar_strokes, 2 * 3);
    assert!(svg_texts(&doc).iter().any(|t| t == "itl_p99_ms"), "a single line is labelled with its metric");
    sweep(&["--plot"]).arg(&plots).fails_with(2).stderr_has(&["--plot needs at least one axis"]);
}

#[test]
fn run_plot_draws_the_timeline_of_batch_kv_queue_and_step_duration() {
    let dir = tempdir();
    TestCommand::new(&["run", "scenarios/base.yml", "--set", "workload.requests=100", "-q", "--plot"])
        .arg(dir.path().join("t"))
        .ok();
    let text = read(&dir.path().join("t/timeline.svg"));
    let doc = roxmltree::Document::parse(&text).unwrap();
    let texts = svg_texts(&doc);
    for label in ["batch size", "KV usage %", "waiting", "step ms (mean)", "step ms (max)", "simulated time (s)"] {
        assert!(texts.iter().any(|t| t == label), "no {label:?} in {texts:?}");
    }
    // Four panels of one series each, the last with two: five long lines.
    let long = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline") && attr(n, "points").split_whitespace().count() > 50)
        .count();
    assert_eq!(long, 5);
}

/// A run with chunked prefill and preemptions.
fn busy_run(dir: &Path) -> (serde_json::Value, serde_json::Value) {
    let (trace, result) = (dir.join("trace.json"), dir.join("result.json"));
    TestCommand::new(&["run", "scenarios/base.yml", "-q"])
        .args(&["--set", "workload.requests=200", "--set", "workload.arrivals.poisson.rate=50"])
        .args(&["--set", "model.kv_cache.num_blocks=200", "--set", "scheduler.max_batch_tokens=256"])
        .arg("--trace-events")
        .arg(&trace)
        .arg("--json")
        .arg(&result)
        .ok();
    (json(&trace), json(&result))
}

#[test]
fn trace_events_have_a_slice_per_step_and_a_track_per_request() {
    let dir = tempdir();
    let (trace, result) = busy_run(dir.path());
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let named = |ph: &str, name: &str| events.iter().filter(|e| e["ph"] == ph && e["name"] == name).collect::<Vec<_>>();
    let tokens =
        |ph: &str, name: &str| named(ph, name).iter().map(|e| e["args"]["tokens"].as_u64().unwrap()).sum::<u64>();
    let preemptions = result["preemptions"].as_u64().unwrap();
    assert!(preemptions > 0, "the run must preempt to test preemptions");
    assert_eq!(named("X", "step").len() as u64, result["steps"]["count"].as_u64().unwrap());
    assert!(named("X", "step").iter().all(|e| e["args"]["batch"].is_u64() && e["dur"].as_f64() > Some(0.0)));
    let tracks = named("M", "thread_name");
    assert_eq!(tracks.len(), 1 + 200, "the steps track and one per request");
    assert_eq!(tracks[1]["args"]["name"], "request 0");
    assert_eq!(named("i", "preempted").len() as u64, preemptions);
    assert_eq!(named("X", "queued").len() as u64, 200 + preemptions, "queued on arrival and after each preemption");
    assert_eq!(named("i", "first token").len(), 200);
    assert_eq!(named("i", "finished").len(), 200);
    // Budget 256, prompts of 512: every prompt in two chunks or more.
    assert!(named("X", "prefill").len() >= 400);
    assert_eq!(tokens("X", "prefill"), 200 * 512);
    assert!(!named("X", "recompute").is_empty());
    let step_tokens: u64 = named("X", "step").iter().map(|e| e["args"]["tokens"].as_u64().unwrap()).sum();
    assert_eq!(step_tokens, tokens("X", "prefill") + tokens("X", "recompute") + tokens("X", "decode"));
    assert!(!named("C", "kv blocks used").is_empty());
}

/// A scenario served one request per step: one prefill of 512 tokens, one
/// output token (see crates/analysis/src/capacity/tests.rs for the closed form).
const ONE_AT_A_TIME: &str = "
hardware: { hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989 }
model:
  context_length: 4096
  weights: { parameters_billions: 6.74 }
  kv_cache: { bytes_per_token: 524288 }
scheduler: { max_batch_tokens: 512, max_num_sequences: 1 }
workload:
  arrivals: { constant: { rate: 1 } }
  requests: 100
  prompt_tokens: 512
  output_tokens: 1
";

#[test]
fn capacity_finds_the_rate_at_which_a_step_outlasts_the_arrival_gap() {
    let dir = tempdir();
    let scenario = write(dir.path(), "one.yml", ONE_AT_A_TIME);
    let out = dir.path().join("cap.json");
    // The step: compute-bound, 2 * 6.74e9 * 512 / 989e12 s.
    let d_ns = (2.0f64 * 6.74e9 * 512.0 / 989e12 * 1e9).round();
    let exact = 1e9 / d_ns;
    TestCommand::new(&["capacity"])
        .arg(&scenario)
        .args(&["--slo", &format!("ttft_p99_ms={}", 1.5 * d_ns / 1e6), "--requests", "2000", "--json"])
        .arg(&out)
        .ok();
    let r = json(&out);
    let max = r["max_rate_rps"].as_f64().unwrap();
    assert!(max <= exact * (1.0 + 1e-9) && max >= 0.99 * exact, "{max} vs {exact}");
    assert!((r["saturation_rps"].as_f64().unwrap() - exact).abs() < 1e-6 * exact);
    assert_eq!(r["arrivals"], "constant");
}

#[test]
fn capacity_reports_the_binding_slo_replicas_goodput_and_attainment() {
    let dir = tempdir();
    let out = dir.path().join("cap.json");
    TestCommand::new(&["capacity", "scenarios/base.yml", "--slo", "ttft_p50_ms=10", "--slo", "e2e_p50_ms=5000"])
        // One seed: a probe's figures are then one run's, so goodput and
        // attainment relate exactly (over seeds they are means of each).
        .args(&["--requests", "400", "--target-rate", "250", "--seeds", "1", "--json"])
        .arg(&out)
        .ok()
        .stderr_has(&[]);
    let r = json(&out);
    let max = r["max_rate_rps"].as_f64().unwrap();
    assert!(max > 0.0 && max <= r["saturation_rps"].as_f64().unwrap());
    assert_eq!(r["binding_slo"], "ttft_p50_ms");
    assert_eq!(r["replicas"].as_u64(), Some((250.0 / max).ceil() as u64));
    assert!(r["cost_per_million_output_tokens"].is_null(), "base.yml's hardware has no price");
    let probes = r["probes"].as_array().unwrap();
    assert!(probes.len() >= 4);
    for p in probes {
        // base.yml rejects nothing, so every request completes: goodput
        // (good requests / duration) is attainment x completed / duration.
        let att = p["slo_attainment_pct"].as_f64().unwrap();
        let (goodput, rps) = (p["goodput_rps"].as_f64().unwrap(), p["requests_per_s"].as_f64().unwrap());
        assert!((0.0..=100.0).contains(&att), "{p}");
        assert!((goodput - att / 100.0 * rps).abs() <= 1e-9 * rps.max(1.0), "{p}");
    }
    let low =
        probes.iter().min_by(|a, b| a["rate_rps"].as_f64().partial_cmp(&b["rate_rps"].as_f64()).unwrap()).unwrap();
    assert_eq!(low["pass"], true);
    assert!(low["slo_attainment_pct"].as_f64().unwrap() > 50.0);
}

#[test]
fn capacity_prices_a_million_output_tokens_when_the_hardware_has_a_cost() {
    let dir = tempdir();
    let out = dir.path().join("cap.json");
    TestCommand::new(&[
        "capacity",
        "scenarios/sweeps/chat-h100.yml",
        "--slo",
        "ttft_p99_ms=1000",
        "--requests",
        "300",
        "-q",
    ])
    .arg("--json")
    .arg(&out)
    .ok();
    let r = json(&out);
    let tokens_per_s = r["at_max_rate"]["output_tokens_per_s"].as_f64().unwrap();
    let expect = 2.5 / (tokens_per_s * 3600.0) * 1e6;
    assert!((r["cost_per_million_output_tokens"].as_f64().unwrap() - expect).abs() < 1e-9);
}

#[test]
fn capacity_lists_the_slo_metrics_in_help_and_when_one_is_unknown() {
    let help = TestCommand::new(&["capacity", "--help"]).ok().stdout();
    for m in ["ttft_p99_ms", "itl_p50_ms", "e2e_mean_ms", "tpot_p90_ms", "queue_p99_ms"] {
        assert!(help.contains(m), "{m} missing from --help");
    }
    TestCommand::new(&["capacity", "scenarios/base.yml", "--slo", "latency_p99_ms=100"]).fails_with(2).stderr_has(&[
        "--slo `latency_p99_ms=100`: `latency_p99_ms` is not a metric",
        "SLO metrics are completed,",
        "ttft_mean_ms",
    ]);
    sweep(&["--set", "workload.seed=1,2", "--slo", "ttft_p98_ms=1"]).fails_with(2).stderr_has(&["is not a metric"]);
}

#[test]
fn capacity_says_when_an_slo_is_unreachable_even_at_the_lowest_rate() {
    TestCommand::new(&["capacity", "scenarios/base.yml", "--slo", "ttft_p50_ms=1", "--requests", "200"])
        .fails_with(1)
        .stderr_has(&[
            "no rate meets every SLO: even at the lowest rate",
            "ttft_p50_ms = ",
            "(bound 1)",
            "best achieved",
        ]);
    TestCommand::new(&["capacity", "scenarios/base.yml", "--slo", "ttft_p50_ms=100"])
        .args(&["--set", "workload.arrivals={closed: {concurrency: 4}}"])
        .fails_with(2)
        .stderr_has(&["workload.arrivals is a closed loop"]);
}

#[test]
fn a_key_cannot_be_both_an_axis_and_a_plain_override() {
    sweep(&["--set", "scheduler.max_batch_tokens=512,1024", "--set", "scheduler.max_batch_tokens=2048"])
        .fails_with(2)
        .stderr_has(&["`scheduler.max_batch_tokens` is both an axis and a plain override"]);
    sweep(&["--set", "workload.seed=1,2", "--set", "workload.seed=3,4"])
        .fails_with(2)
        .stderr_has(&["`workload.seed` is already an axis"]);
}

#[test]
fn merge_refuses_a_damaged_shard_file_without_panicking() {
    let dir = tempdir();
    let p = dir.path().join("s0.json");
    sweep(&["--set", "scheduler.max_batch_tokens=512,1024", "--shard", "0/1", "-o"]).arg(&p).ok();
    let mut shard = json(&p);
    shard["data"]["points"][1]["coords"] = serde_json::json!([7]);
    std::fs::write(&p, serde_json::to_string(&shard).unwrap()).unwrap();
    TestCommand::new(&["merge"])
        .arg(&p)
        .args(&["--plot"])
        .arg(dir.path().join("plots"))
        .fails_with(2)
        .stderr_has(&["s0.json: damaged shard file: point 1 does not match the sweep's axes and seeds"]);
}

#[test]
fn a_run_wide_metric_can_be_an_slo_and_bind() {
    let dir = tempdir();
    let out = dir.path().join("cap.json");
    TestCommand::new(&["capacity", "scenarios/base.yml", "--set", "model.kv_cache.num_blocks=200"])
        .args(&["--slo", "preemptions=0", "--slo", "ttft_p99_ms=10000", "--requests", "300", "-q", "--json"])
        .arg(&out)
        .ok();
    let r = json(&out);
    assert_eq!(r["binding_slo"], "preemptions");
    assert_eq!(r["at_max_rate"]["slo_values"]["preemptions"], 0.0);
    let failed = r["probes"].as_array().unwrap().iter().filter(|p| p["pass"] == false);
    assert!(failed.clone().count() > 0 && failed.clone().all(|p| p["slo_values"]["preemptions"].as_f64() > Some(0.0)));
}
