//! Integration tests: `llmsim capacity --over-time` (the cheapest policy
//! for a fleet over time) against each policy run on its own with
//! `llmsim run`, the static fleet against the counts around it, and the
//! same bytes at any thread count and from shards.

use serde_json::Value;

use crate::support::*;

/// A quarter of an hour: 4 req/s, 24 from minute 5 to 10, then 4 again, on
/// H100s autoscaled from 1 to 8; a window misses when its p99 TTFT passes
/// 1 s.
const SCENARIO: &str = "name: plan-small
hardware: { name: h100-80gb, hbm_gib: 80, memory_bandwidth_gbps: 3350, peak_tflops: 989, cost_per_hour: 2.5 }
model:
  name: base-6.7b
  context_length: 32768
  weights: { parameters_billions: 6.74, bytes_per_parameter: 2 }
  kv_cache: { bytes_per_token: 524288, block_size: 16 }
scheduler: { max_batch_tokens: 8192, max_num_sequences: 64 }
workload:
  seed: 3
  arrivals:
    curve:
      steps: [[0, 4], [300, 24], [600, 4]]
  duration_s: 900
  prompt_tokens: { uniform: [200, 2000] }
  output_tokens: { uniform: [50, 500] }
cluster:
  router: least_outstanding
  autoscale:
    min_replicas: 1
    max_replicas: 8
    target: 16
    period_s: 15
    cold_start: { engine_start_s: 30 }
  timeline:
    window_s: 60
    slo: { ttft_p99_ms: 1000 }
";

const AXES: [&str; 2] = ["cluster.autoscale.target=4,8,16", "cluster.autoscale.min_replicas=1,2"];

fn json(out: &Out) -> Value {
    serde_json::from_str(&out.stdout()).unwrap_or_else(|e| panic!("not JSON: {e}\n{}", out.describe()))
}

/// `llmsim capacity --over-time` on the scenario with the axes, as JSON.
fn plan(file: &std::path::Path, extra: &[&str]) -> Out {
    let mut cmd = TestCommand::new(&["capacity"]).arg(file).arg("--over-time").arg("--json").arg("-");
    for a in AXES {
        cmd = cmd.arg("--set").arg(a);
    }
    for a in extra {
        cmd = cmd.arg(a);
    }
    cmd.bounded(300, 4096)
}

/// One run's (cost, GPU-hours, missed windows), from `llmsim run --json`.
fn run(file: &std::path::Path, sets: &[String]) -> (f64, f64, u64) {
    let mut cmd = TestCommand::new(&["run"]).arg(file).arg("--json").arg("-").arg("--quiet");
    for s in sets {
        cmd = cmd.arg("--set").arg(s);
    }
    let out = cmd.ok();
    let v = json(&out);
    let ot = &v["over_time"];
    (ot["cost"].as_f64().unwrap(), ot["gpu_hours"].as_f64().unwrap(), ot["slo_missed"].as_u64().unwrap())
}

#[test]
fn the_cheapest_plan_is_the_cheapest_policy_that_meets_every_window() {
    let dir = tempdir();
    let file = write(dir.path(), "plan.yml", SCENARIO);
    let out = plan(&file, &[]);
    assert_eq!(out.code(), 0, "{}", out.describe());
    let p = json(&out);
    // Each policy on its own, judged here: every window met, then the
    // lowest cost, then the earlier point.
    let mut best: Option<(f64, usize)> = None;
    let (mut meeting, mut missing) = (0, 0);
    let candidates = p["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 6);
    for (i, (target, min)) in [4, 8, 16].iter().flat_map(|t| [1, 2].map(move |m| (t, m))).enumerate() {
        let sets = [format!("cluster.autoscale.target={target}"), format!("cluster.autoscale.min_replicas={min}")];
        let (cost, gpu_hours, missed) = run(&file, &sets);
        let c = &candidates[i];
        assert_eq!(c["values"], format!("cluster.autoscale.target={target}, cluster.autoscale.min_replicas={min}"));
        assert_eq!(c["cost"].as_f64(), Some(cost), "point {}", i + 1);
        assert_eq!(c["gpu_hours"].as_f64(), Some(gpu_hours), "point {}", i + 1);
        assert_eq!(c["missed"].as_u64(), Some(missed), "point {}", i + 1);
        assert_eq!(c["meets"].as_bool(), Some(missed == 0), "point {}", i + 1);
        if missed == 0 {
            meeting += 1;
            if best.is_none_or(|(b, _)| cost < b) {
                best = Some((cost, i));
            }
        } else {
            missing += 1;
        }
    }
    // The scenario is chosen so the choice matters: some policies miss.
    assert!(meeting >= 1 && missing >= 1, "{meeting} meet, {missing} miss: the test needs both\n{}", out.describe());
    assert_eq!(p["cheapest"].as_u64(), best.map(|b| b.1 as u64), "{}", out.describe());
    assert_eq!(p["price"], "cost");

    // The static fleet: n fixed replicas meet, n - 1 do not.
    let f = &p["static_fleet"];
    let n = f["replicas"].as_u64().expect("a static fleet meets");
    let fixed = |n: u64| run(&file, &["cluster.autoscale=null".into(), format!("cluster.replicas={n}")]);
    let (cost, gpu_hours, missed) = fixed(n);
    assert_eq!(missed, 0);
    assert_eq!(f["at_replicas"]["cost"].as_f64(), Some(cost));
    assert_eq!(f["at_replicas"]["gpu_hours"].as_f64(), Some(gpu_hours));
    // 900 s of arrivals and the drain: n GPUs at 2.5 an hour, at least.
    assert!(gpu_hours >= n as f64 * 900.0 / 3600.0 - 1e-9);
    if n > 1 {
        assert!(fixed(n - 1).2 > 0, "{} static replicas meet too", n - 1);
    }
    let saving = 1.0 - best.unwrap().0 / cost;
    assert!((p["saving"].as_f64().unwrap() - saving).abs() < 1e-12);
    assert!(out.stdout().contains("\"cheapest\""));
}

#[test]
fn the_plan_is_the_same_at_any_thread_count_and_from_shards() {
    let dir = tempdir();
    let file = write(dir.path(), "plan.yml", SCENARIO);
    let one = plan(&file, &["--threads", "1"]);
    let two = plan(&file, &["--threads", "2"]);
    assert_eq!(one.code(), 0, "{}", one.describe());
    assert_eq!(one.stdout(), two.stdout(), "threads 1 and 2 differ");
    // The policies run as a sweep in two shards, then judged here.
    let mut shards = Vec::new();
    for k in 0..2 {
        let path = dir.path().join(format!("s{k}.json"));
        let mut cmd = TestCommand::new(&["sweep"]).arg(&file).arg("--quiet");
        for a in AXES {
            cmd = cmd.arg("--set").arg(a);
        }
        cmd.arg("--shard").arg(format!("{k}/2")).arg("--output").arg(&path).ok();
        shards.push(path);
    }
    let mut extra: Vec<String> = vec!["--shards".into()];
    extra.extend(shards.iter().map(|p| p.display().to_string()));
    let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
    let merged = plan(&file, &refs);
    assert_eq!(merged.code(), 0, "{}", merged.describe());
    assert_eq!(one.stdout(), merged.stdout(), "shards and one run differ");
    // Shards of another sweep are refused.
    let other = plan(&file, &["--set", "workload.seed=4", "--shards", &shards[0].display().to_string()]);
    assert_eq!(other.code(), 2, "{}", other.describe());
    other.stderr_has(&["is a shard of another sweep"]);
}

#[test]
fn a_fraction_of_windows_lets_a_policy_through_that_misses_a_few() {
    // 40 req/s for the five minutes (2 before and after): every policy
    // misses a window or more while new replicas start.
    let dir = tempdir();
    let text = SCENARIO.replace("[[0, 4], [300, 24], [600, 4]]", "[[0, 2], [300, 40], [600, 2]]");
    let file = write(dir.path(), "plan.yml", &text);
    let all = plan(&file, &[]);
    assert_eq!(all.code(), 1, "{}", all.describe());
    all.stderr_has(&["no policy of the search met the window SLO"]);
    assert_eq!(json(&all)["cheapest"], Value::Null);
    let some = plan(&file, &["--windows", "0.8"]);
    assert_eq!(some.code(), 0, "{}", some.describe());
    let some = json(&some);
    // 16 windows (900 s and the drain): 0.8 allows floor(0.2 * 16) = 3 to miss.
    for c in some["candidates"].as_array().unwrap() {
        assert_eq!(c["windows"].as_u64(), Some(16), "{c}");
        assert_eq!(c["meets"].as_bool(), Some(c["missed"].as_u64().unwrap() <= 3), "{c}");
    }
    let chosen = &some["candidates"][some["cheapest"].as_u64().unwrap() as usize];
    assert!((1..=3).contains(&chosen["missed"].as_u64().unwrap()), "{chosen}");
}

/// Each window's (end_s, slo_met, gpu_hours, cost) of `n` fixed replicas
/// run to the end, from `llmsim run --timeline`.
fn fixed_windows(dir: &std::path::Path, file: &std::path::Path, n: u64) -> Vec<(f64, String, f64, f64)> {
    let csv = dir.join(format!("windows-{n}.csv"));
    TestCommand::new(&["run"])
        .arg(file)
        .arg("--quiet")
        .arg("--set")
        .arg("cluster.autoscale=null")
        .arg("--set")
        .arg(format!("cluster.replicas={n}"))
        .arg("--timeline")
        .arg(&csv)
        .ok();
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}: {header:?}"));
    let (end, met, hours, cost) = (col("end_s"), col("slo_met"), col("gpu_hours"), col("cost"));
    lines
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (c[end].parse().unwrap(), c[met].to_string(), c[hours].parse().unwrap(), c[cost].parse().unwrap())
        })
        .collect()
}

#[test]
fn a_static_probe_that_misses_a_window_stops_there_and_the_answer_is_the_same() {
    let dir = tempdir();
    let file = write(dir.path(), "plan.yml", SCENARIO);
    let early = plan(&file, &[]);
    let full = plan(&file, &["--full-probes"]);
    assert_eq!(early.code(), 0, "{}", early.describe());
    assert_eq!(full.code(), 0, "{}", full.describe());
    let (early, full) = (json(&early), json(&full));
    // Only the failing probes' figures differ: the policies, the answer
    // and the meeting probe are the same.
    assert_eq!(early["candidates"], full["candidates"]);
    assert_eq!(early["cheapest"], full["cheapest"]);
    assert_eq!(early["saving"], full["saving"]);
    assert_eq!(early["static_fleet"]["replicas"], full["static_fleet"]["replicas"]);
    assert_eq!(early["static_fleet"]["at_replicas"], full["static_fleet"]["at_replicas"]);
    let probes = early["static_fleet"]["probes"].as_array().unwrap();
    let whole = full["static_fleet"]["probes"].as_array().unwrap();
    assert_eq!(probes.len(), whole.len());
    let mut stopped = 0;
    for (p, w) in probes.iter().zip(whole) {
        assert_eq!((&p["replicas"], &p["meets"]), (&w["replicas"], &w["meets"]), "{p} against {w}");
        assert!(w.get("stopped_at_s").is_none(), "--full-probes stops no probe: {w}");
        if p["meets"].as_bool().unwrap() {
            assert_eq!(p, w, "a probe that meets runs to its end");
            continue;
        }
        // The run of that many fixed replicas to its end: the probe stopped
        // at its first missed window, with that window's figures.
        let n = p["replicas"].as_u64().unwrap();
        let rows = fixed_windows(dir.path(), &file, n);
        let first = rows.iter().position(|r| r.1 == "false").expect("a failing probe misses a window");
        let (end, _, hours, cost) = &rows[first];
        assert_eq!(p["stopped_at_s"].as_f64(), Some(*end), "{p}");
        assert_eq!(p["windows"].as_u64(), Some(first as u64 + 1), "{p}");
        assert_eq!(p["missed"].as_u64(), Some(1), "{p}");
        assert_eq!(p["gpu_hours"].as_f64(), Some(*hours), "{p}");
        assert_eq!(p["cost"].as_f64(), Some(*cost), "{p}");
        // Run to the end, the same count misses that window and maybe more.
        assert_eq!(w["windows"].as_u64(), Some(rows.len() as u64), "{w}");
        assert!(w["missed"].as_u64().unwrap() >= 1, "{w}");
        stopped += 1;
    }
    assert!(stopped >= 1, "the test needs a failing probe: {probes:?}");
    // A fraction of windows below 1 runs every probe to its end.
    let some = json(&plan(&file, &["--windows", "0.9"]));
    let probes = some["static_fleet"]["probes"].as_array().unwrap();
    assert!(probes.iter().any(|p| p["meets"] == false), "the test needs a failing probe: {probes:?}");
    for p in probes {
        assert!(p.get("stopped_at_s").is_none(), "{p}");
        assert_eq!(p["windows"].as_u64(), Some(16), "{p}");
    }
}

#[test]
fn a_run_stopped_at_its_first_missed_window_reports_that_window_and_the_fleet_so_far() {
    use llmsim_planner::run_driver::SimError;
    use llmsim_scenario::config::{Override, load_scenario_with};
    let dir = tempdir();
    let file = write(dir.path(), "plan.yml", SCENARIO);
    let set = |kv: &str| Override::parse(kv).unwrap();
    // One fixed replica misses a window of this day (the static search's
    // failing probes above start there).
    let s = load_scenario_with(&file, &[set("cluster.autoscale=null"), set("cluster.replicas=1")]).unwrap();
    let rows = fixed_windows(dir.path(), &file, 1);
    let first = rows.iter().position(|r| r.1 == "false").expect("one replica misses a window");
    match llmsim_planner::Run::new(&s).summary_only(true).stop_at_missed_window(true).go() {
        Err(SimError::WindowMissed { window, .. }) => {
            assert_eq!(window.index, first as u64);
            assert_eq!(window.end_s, rows[first].0);
            assert_eq!(window.gpu_hours, rows[first].2);
            // A static fleet of one: its peak is one replica.
            assert_eq!(window.peak_replicas, 1);
        }
        other => panic!("expected a stop at window {first}: {:?}", other.map(|o| o.result.over_time)),
    }
}
