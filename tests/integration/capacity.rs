//! Integration tests: `llmsim capacity` against an independent rate sweep,
//! and the bounds of its options. (The search's other behaviour is tested
//! in `sweep.rs` and, against a closed form, in crates/analysis/src/capacity/tests.rs.)

use std::path::Path;

use llmsim_planner::metrics::{RequestRecord, Status};
use llmsim_scenario::config::{Override, load_scenario_with};
use rayon::prelude::*;

use crate::support::*;

fn set(key: &str, value: &str) -> Override {
    Override::parse(&format!("{key}={value}")).expect("valid override")
}

/// Requests finished per second over the second half of the arrival window
/// (from the first to the last arrival): the throughput a run keeps up once
/// the empty start is behind it and before the final drain. Computed from the
/// per-request records alone.
fn served_over_second_half(requests: &[RequestRecord]) -> f64 {
    let ns = |t: llmsim_core::time::SimTime| t.nanos_since(llmsim_core::time::SimTime::ZERO);
    let first = requests.iter().map(|r| ns(r.arrival)).min().unwrap();
    let last = requests.iter().map(|r| ns(r.arrival)).max().unwrap();
    let half = first + (last - first) / 2;
    let finished = requests
        .iter()
        .filter(|r| r.status == Status::Finished)
        .filter_map(|r| r.last_token.map(ns))
        .filter(|&t| t > half && t <= last)
        .count();
    finished as f64 / ((last - half) as f64 / 1e9)
}

/// The mean over `seeds` of [`served_over_second_half`] for the base model
/// at Poisson `rate` with `n` requests.
fn sweep_point(rate: f64, seeds: &[u64], n: u64) -> f64 {
    let base = repo("scenarios/base.yml");
    let served: Vec<f64> = seeds
        .iter()
        .map(|seed| {
            let o = [
                set("workload.arrivals", &format!("{{poisson: {{rate: {rate}}}}}")),
                set("workload.requests", &n.to_string()),
                set("workload.seed", &seed.to_string()),
            ];
            let s = load_scenario_with(&base, &o).expect("scenario");
            served_over_second_half(&llmsim_planner::Run::new(&s).go().expect("within the run limits").requests)
        })
        .collect();
    served.iter().sum::<f64>() / served.len() as f64
}

/// `llmsim capacity scenarios/base.yml` with `args` after it.
fn capacity(args: &[&str]) -> TestCommand {
    args.iter().fold(TestCommand::new(&["capacity", "scenarios/base.yml"]), |c, a| c.arg(a))
}

fn capacity_json(args: &[&str], out: &Path) -> serde_json::Value {
    capacity(args).arg("-q").arg("--json").arg(out).ok();
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

/// The sweep a user would run to find saturation by hand, and what they
/// would read off it: Poisson rates 60 to 100 req/s in steps of 2 on the
/// base model, five seeds that capacity does not use (it runs 42, 43, 44),
/// 20,000 requests each (capacity's saturation probe size). A point keeps
/// up when its served throughput over the second half of the arrival window
/// (mean over seeds) is at least 98% of the offered rate; the highest
/// sustained throughput is the most served at a point that keeps up.
/// Capacity's saturation must be within 5% of it.
#[test]
fn saturation_on_the_base_model_is_within_5_percent_of_the_most_a_rate_sweep_sustains() {
    let seeds = [1001, 1002, 1003, 1004, 1005];
    let rates: Vec<f64> = (0..=20).map(|i| 60.0 + 2.0 * f64::from(i)).collect();
    let served: Vec<f64> = rates.par_iter().map(|&r| sweep_point(r, &seeds, 20_000)).collect();
    let table: Vec<String> = rates.iter().zip(&served).map(|(r, s)| format!("{r}: {s:.2}")).collect();
    let keeps_up: Vec<(f64, f64)> =
        rates.iter().zip(&served).map(|(r, s)| (*r, *s)).filter(|(r, s)| *s >= 0.98 * r).collect();
    // The grid brackets saturation: its lowest rate keeps up, its highest does not.
    assert!(keeps_up.first().map(|p| p.0) == Some(60.0) && keeps_up.last().map(|p| p.0) < Some(100.0), "{table:?}");
    let (best_rate, best) = keeps_up.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();

    let dir = tempdir();
    let r = capacity_json(&["--slo", "ttft_p99_ms=1000"], &dir.path().join("cap.json"));
    let saturation = r["saturation_rps"].as_f64().unwrap();
    let why = format!("saturation {saturation:.2} against the sweep's best {best:.2} at {best_rate}: {table:?}");
    eprintln!("{why}");
    assert!((saturation - best).abs() <= 0.05 * best, "{why}");
    // The burst figure it replaced is a fifth lower: this test fails on it.
    let burst = r["burst_rps"].as_f64().unwrap();
    assert!(burst < 0.85 * best, "burst {burst}: {why}");
    // The SLO search may go up to saturation and no further.
    let max = r["max_rate_rps"].as_f64().unwrap();
    assert!(max > burst && max <= saturation, "max rate {max}: {why}");
    assert_eq!(r["seeds"], serde_json::json!([42, 43, 44]));
}

#[test]
fn capacity_refuses_more_requests_than_a_probe_can_hold() {
    // 10^9 requests a probe used to abort allocating 1.5 GB.
    capacity(&["--slo", "ttft_p99_ms=1000", "--requests", "1000000000"])
        .fails_with(2)
        .stderr_has(&["--requests 1000000000: a probe runs 100 to 1,000,000 requests a seed"]);
    capacity(&["--slo", "ttft_p99_ms=1000", "--requests", "99"])
        .fails_with(2)
        .stderr_has(&["--requests 99: a probe runs 100 to 1,000,000"]);
}

#[test]
fn capacity_refuses_out_of_range_seeds_precision_and_target_rate() {
    let run =
        |extra: &[&str]| extra.iter().fold(capacity(&["--slo", "ttft_p99_ms=1000"]), |c, a| c.arg(a)).fails_with(2);
    run(&["--seeds", "0"]).stderr_has(&["--seeds 0: must be from 1 to 100"]);
    run(&["--seeds", "101"]).stderr_has(&["--seeds 101: must be from 1 to 100"]);
    // A precision finer than float spacing used to bisect forever.
    run(&["--precision", "1e-300"]).stderr_has(&["--precision 1e-300: must be from 0.0001 to 0.5"]);
    run(&["--target-rate", "1e300"]).stderr_has(&["--target-rate 1e300: must be a rate above 0 and at most 1e9"]);
}

/// A search small enough to run twice in a test, whose probes near the
/// limit miss on some seeds.
const SEARCH_OF_2000: [&str; 4] = ["--slo", "ttft_p99_ms=200", "--requests", "2000"];

/// `args` and one more flag.
fn with<'a>(args: &[&'a str], flag: &'a str) -> Vec<&'a str> {
    args.iter().copied().chain([flag]).collect()
}

/// The early stop as a user sees it: the same answer as `--full-probes`,
/// the failing probes marked, every stopped seed's probe missing when run
/// whole.
#[test]
fn capacity_stops_a_failing_probe_early_and_answers_as_a_full_search_does() {
    let dir = tempdir();
    let args = SEARCH_OF_2000;
    let early = capacity_json(&args, &dir.path().join("early.json"));
    let full_args = with(&args, "--full-probes");
    let full = capacity_json(&full_args, &dir.path().join("full.json"));
    for key in ["max_rate_rps", "max_rate_upper_rps", "at_max_rate", "binding_slo", "saturation_rps"] {
        assert_eq!(early[key], full[key], "{key}");
    }
    let (e, f) = (early["probes"].as_array().unwrap(), full["probes"].as_array().unwrap());
    assert_eq!(e.len(), f.len());
    let mut stopped = 0;
    for (p, w) in e.iter().zip(f) {
        assert_eq!((&p["rate_rps"], &p["pass"]), (&w["rate_rps"], &w["pass"]), "{p} against {w}");
        assert!(w.get("stopped").is_none(), "{w}");
        match p.get("stopped").and_then(|s| s.as_u64()) {
            Some(k) => {
                stopped += k;
                assert_eq!(p["failed"], serde_json::json!(["ttft_p99_ms"]), "{p}");
                assert!(w["slo_values"]["ttft_p99_ms"].as_f64().unwrap() > 200.0, "run whole it misses: {w}");
            }
            None => assert_eq!(p, w),
        }
    }
    assert!(stopped >= 1, "the test needs a stopped seed: {e:?}");
    let text = capacity(&args).ok().stdout();
    assert!(text.contains("missed") && text.contains("stopped"), "{text}");
    assert!(!capacity(&full_args).ok().stdout().contains("stopped"));
}

#[test]
fn capacity_brackets_with_short_probes_and_rests_its_answer_on_full_ones() {
    let dir = tempdir();
    let args = SEARCH_OF_2000;
    let plain = capacity_json(&args, &dir.path().join("plain.json"));
    let bracket_args = with(&args, "--bracket");
    let bracketed = capacity_json(&bracket_args, &dir.path().join("bracket.json"));
    let probes = bracketed["probes"].as_array().unwrap();
    // Short probes run a quarter of the requests and guide the search.
    assert!(probes.iter().any(|p| p["short"] == true && p["requests"] == 500), "{probes:?}");
    assert!(probes.iter().all(|p| (p["short"] == true) == (p["requests"] == 500)), "{probes:?}");
    // The rate met and the rate missed are full probes.
    let (lo, hi) = (bracketed["max_rate_rps"].as_f64().unwrap(), bracketed["max_rate_upper_rps"].as_f64().unwrap());
    assert_eq!(bracketed["at_max_rate"]["requests"], 2000);
    assert!(bracketed["at_max_rate"].get("short").is_none());
    let full_at = |rate: f64| probes.iter().find(|p| p.get("short").is_none() && p["rate_rps"].as_f64() == Some(rate));
    assert_eq!(full_at(hi).map(|p| &p["pass"]), Some(&serde_json::json!(false)), "{probes:?}");
    assert!(hi - lo <= 0.01 * lo + 1e-12);
    // Near the limit the verdicts of 3 seeds are not monotone in the rate
    // (here a full probe at 71.65 misses where the plain search's at 71.64
    // met), so the two answers differ within that band, not beyond it.
    let plo = plain["max_rate_rps"].as_f64().unwrap();
    assert!((lo - plo).abs() <= 0.03 * plo, "{lo} against {plo}");
    // Fewer requests simulated in the SLO search.
    let requests = |r: &serde_json::Value| -> u64 {
        r["probes"].as_array().unwrap().iter().map(|p| p["requests"].as_u64().unwrap()).sum()
    };
    assert!(requests(&bracketed) < requests(&plain), "{} vs {}", requests(&bracketed), requests(&plain));
    let text = capacity(&bracket_args).ok().stdout();
    assert!(text.contains("short"), "{text}");
    assert!(!capacity(&args).ok().stdout().contains("short"));
    capacity(&["--over-time", "--bracket"]).fails_with(2).stderr_has(&["--bracket"]);
}
