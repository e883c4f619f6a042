//! Long stationary stages predicted from their steady state
//! (docs/calibration.md, "Long stages").
//!
//! A load-test stage of constant or Poisson arrivals at one rate runs for
//! 600 or 1,200 s, and below its knee the engine settles within seconds.
//! `calibrate` then simulates a window of it: the first `W` seconds of the
//! very same arrivals (the workload's streams are drawn in order, so a
//! shorter `duration_s` gives a prefix of the stage's requests), and builds
//! the stage's per-request figures from three parts of the window, by
//! arrival:
//!
//! - the **head**, its first quarter: the cold start (the first request of
//!   each system prompt misses the prefix cache, the batch fills up), which
//!   the stage has once;
//! - the **tail**, the arrivals within the window's longest E2E of its
//!   end: the drain, where no later request competes (the stage has it
//!   once too);
//! - the **middle**, everything between: the steady state, repeated in
//!   order to stand for every request of the stage between its head and
//!   its tail.
//!
//! The window is taken as steady when the middle's two halves agree: the
//! mean TTFT, E2E and TPOT of its first half within [`AGREE`] of its
//! second's, no request preempted or unfinished, and the middle at least
//! half the window. Otherwise the window doubles; once it would pass half
//! the stage, the stage is simulated whole. The percentiles and means are computed from the built
//! list exactly as a run computes them from its requests; throughput is
//! the stage's count over the window's duration stretched by the arrival
//! time the window did not simulate. What is not per request (ITL, step
//! times, batch size, KV use) is the window's own.

use llmsim_planner::metrics::{RequestRecord, RunResult, Stats, Status, fold};
use llmsim_planner::workload::{AnySource, Source};
use llmsim_scenario::config::{Arrivals, Scenario};

/// The first window, in seconds (at least [`MIN_REQUESTS`] arrivals and
/// four cycles through a shared prefix's groups).
pub const MIN_WINDOW_S: f64 = 60.0;
/// Arrivals the first window holds at least.
pub const MIN_REQUESTS: f64 = 400.0;
/// How close the middle's two halves must be (relative, each mean).
pub const AGREE: f64 = 0.005;
/// The stated tolerance: each TPOT and E2E figure `calibrate` fits (TPOT
/// mean, E2E mean and p90) of a stage predicted from a window is within
/// this of the whole stage's (relative), on the shipped H100 stages at two
/// sets of values, tested.
pub const TOLERANCE: f64 = 0.01;
/// The same for TTFT (mean and p90). TTFT moves most: under constant
/// arrivals it beats slowly (a few percent from one 15 s stretch to the
/// next) with the phase of the arrivals against the steps, which no window
/// shorter than the stage averages out.
pub const TOLERANCE_TTFT: f64 = 0.03;

/// The stage's figures from a window of it, or `None` when the scenario is
/// not a long stationary stage or no window shorter than half of it is
/// steady (the caller then simulates it whole). An error of the window's
/// simulation is `None` as well: the whole stage reports it.
pub fn predict(s: &Scenario) -> Option<RunResult> {
    let (full_s, mut window) = (stationary(s)?, first_window(s)?);
    let (count, last_arrival) = arrivals(s)?;
    while window * 2.0 <= full_s {
        let mut w = s.clone();
        w.workload.duration_s = Some(window);
        let out = llmsim_planner::Run::new(&w).go().ok()?;
        if let Some(r) = extrapolate(&out.result, &out.requests, window, count, last_arrival) {
            return Some(r);
        }
        window *= 2.0;
    }
    None
}

/// Whether [`predict`] tries a window of `s` (a long stationary stage):
/// what the report says of its runs.
pub fn sampled(s: &Scenario) -> bool {
    stationary(s).zip(first_window(s)).is_some_and(|(full, w)| w * 2.0 <= full)
}

/// The first window: [`MIN_WINDOW_S`], at least [`MIN_REQUESTS`] arrivals
/// and four cycles through a shared prefix's groups.
fn first_window(s: &Scenario) -> Option<f64> {
    let rate = s.workload.rate().filter(|r| *r > 0.0)?;
    let cycle = s.workload.shared_prefix.as_ref().map_or(0.0, |p| f64::from(p.groups) / rate);
    Some(MIN_WINDOW_S.max(MIN_REQUESTS / rate).max(4.0 * cycle))
}

/// The stage's duration, if `s` is one stage of one rate: open-loop
/// constant, Poisson or gamma arrivals limited by `duration_s` alone,
/// without sessions, classes, a cluster, speculative decoding or LoRA
/// (whose figures are not per request alone or not stationary).
fn stationary(s: &Scenario) -> Option<f64> {
    let w = &s.workload;
    let open = matches!(w.arrivals, Arrivals::Constant { .. } | Arrivals::Poisson { .. } | Arrivals::Gamma { .. });
    let plain = w.requests.is_none()
        && w.sessions.is_none()
        && w.classes.is_empty()
        && s.cluster.is_none()
        && s.speculative.is_none()
        && s.lora.is_none();
    w.duration_s.filter(|d| open && plain && d.is_finite())
}

/// The stage's request count and its last arrival, in seconds, drawn from
/// the workload itself (no simulation); `None` past the exact-sample count.
fn arrivals(s: &Scenario) -> Option<(usize, f64)> {
    let mut source = AnySource::new(s);
    let (mut count, mut last) = (0usize, 0.0);
    while let Some(r) = source.pop() {
        count += 1;
        last = r.arrival.as_secs_f64();
        if count > fold::EXACT_SAMPLES {
            return None;
        }
    }
    Some((count, last))
}

/// The stage's result from a window of `window` seconds, if it is steady.
fn extrapolate(
    result: &RunResult,
    records: &[RequestRecord],
    window: f64,
    count: usize,
    last_arrival: f64,
) -> Option<RunResult> {
    if result.preemptions > 0 || records.iter().any(|r| r.status != Status::Finished) {
        return None;
    }
    // The drain: a request arriving within the longest E2E of the end may
    // have run with fewer others than in the steady state.
    let longest = records.iter().filter_map(RequestRecord::e2e_ns).max()? as f64 / 1e9;
    let (head_end, tail_start) = (window / 4.0, window - longest);
    if tail_start - head_end < window / 2.0 {
        return None;
    }
    let at = |r: &RequestRecord| r.arrival.as_secs_f64();
    let head: Vec<&RequestRecord> = records.iter().filter(|r| at(r) < head_end).collect();
    let middle: Vec<&RequestRecord> = records.iter().filter(|r| at(r) >= head_end && at(r) < tail_start).collect();
    let tail: Vec<&RequestRecord> = records.iter().filter(|r| at(r) >= tail_start).collect();
    let (first, second) = middle.split_at(middle.len() / 2);
    for figure in [RequestRecord::ttft_ns as fn(&RequestRecord) -> Option<u64>, RequestRecord::e2e_ns] {
        let (a, b) = (mean(first.iter().filter_map(|r| figure(r))), mean(second.iter().filter_map(|r| figure(r))));
        if !agree(a?, b?) {
            return None;
        }
    }
    let tpot = |rs: &[&RequestRecord]| {
        let v: Vec<f64> = rs.iter().filter_map(|r| r.tpot_ns()).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    if let (Some(a), Some(b)) = (tpot(first), tpot(second))
        && !agree(a, b)
    {
        return None;
    }
    let fill = count.checked_sub(head.len() + tail.len())?;
    if middle.is_empty() || fill < middle.len() {
        return None;
    }
    let stage: Vec<&RequestRecord> =
        head.into_iter().chain((0..fill).map(|i| middle[i % middle.len()])).chain(tail).collect();
    let window_last = records.iter().map(at).fold(0.0, f64::max);
    let mut out = result.clone();
    let nanos = |f: fn(&RequestRecord) -> Option<u64>| Stats::from_nanos(stage.iter().filter_map(|r| f(r)).collect());
    out.ttft_ms = nanos(RequestRecord::ttft_ns);
    out.e2e_ms = nanos(RequestRecord::e2e_ns);
    out.queue_ms = nanos(RequestRecord::queue_ns);
    let mut tpot_ms: Vec<f64> = stage.iter().filter_map(|r| r.tpot_ns()).map(|x| x / 1e6).collect();
    tpot_ms.sort_unstable_by(f64::total_cmp);
    out.tpot_ms = fold::stats_ms(&tpot_ms);
    let input: u64 = stage.iter().map(|r| u64::from(r.prompt)).sum();
    let output: u64 = stage.iter().map(|r| u64::from(r.tokens)).sum();
    let duration_s = result.throughput.duration_s + (last_arrival - window_last);
    let per_s = |x: u64| if duration_s > 0.0 { x as f64 / duration_s } else { 0.0 };
    out.requests.total = count as u64;
    out.requests.completed = count as u64;
    out.requests.input_tokens = input;
    out.requests.output_tokens = output;
    out.throughput.duration_s = duration_s;
    out.throughput.requests_per_s = per_s(count as u64);
    out.throughput.input_tokens_per_s = per_s(input);
    out.throughput.output_tokens_per_s = per_s(output);
    out.throughput.total_tokens_per_s = per_s(input + output);
    Some(out)
}

fn mean(xs: impl Iterator<Item = u64>) -> Option<f64> {
    let (mut sum, mut n) = (0u128, 0u64);
    for x in xs {
        sum += u128::from(x);
        n += 1;
    }
    (n > 0).then(|| sum as f64 / n as f64)
}

fn agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= AGREE * a.abs().max(b.abs())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::calibrate::runs::{self, LoadOptions, ScenarioSource};
    use crate::sweep::metric::{Family, Metric};
    use llmsim_core::time::SimTime;
    use llmsim_scenario::config::Override;

    fn repo(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
    }

    /// A finished request: arrival `a` s, TTFT `ttft` ms, E2E `e2e` ms,
    /// `tokens` tokens of a 100-token prompt.
    fn finished(id: u64, a: f64, ttft: f64, e2e: f64, tokens: u32) -> RequestRecord {
        let arrival = SimTime::from_secs_f64(a);
        let mut r = RequestRecord::new(id, arrival, 100, tokens);
        r.first_scheduled = Some(arrival);
        r.first_token = Some(SimTime::from_secs_f64(a + ttft / 1e3));
        r.last_token = Some(SimTime::from_secs_f64(a + e2e / 1e3));
        r.tokens = tokens;
        r.status = Status::Finished;
        r
    }

    /// A window of 100 s, one arrival a second: 50 ms TTFT in the first
    /// quarter, 10 ms after, 20 ms for the last two; 2 s E2E each.
    fn window(middle_ttft: impl Fn(u64) -> f64) -> Vec<RequestRecord> {
        (0..100u64)
            .map(|i| {
                let ttft = match i {
                    0..25 => 50.0,
                    98.. => 20.0,
                    _ => middle_ttft(i),
                };
                finished(i, i as f64, ttft, 2000.0, 11)
            })
            .collect()
    }

    fn shell() -> RunResult {
        let s = llmsim_scenario::config::load_scenario_with(
            &repo("scenarios/base.yml"),
            &[Override::parse("workload.requests=5").unwrap()],
        )
        .unwrap();
        let mut r = llmsim_planner::Run::new(&s).go().unwrap().result;
        r.throughput.duration_s = 101.0;
        r.preemptions = 0;
        r
    }

    #[test]
    fn a_steady_window_stands_for_its_stage_by_hand() {
        // A stage of 1,000 requests, one a second, the last at 999 s. The
        // longest E2E is 2 s, so the tail is the arrivals at 98 and 99 s;
        // the head the 25 before 25 s; the middle's 73 are repeated to
        // fill the 1,000 - 25 - 2 = 973 between.
        let out = extrapolate(&shell(), &window(|_| 10.0), 100.0, 1000, 999.0).expect("steady");
        let ttft_mean = (25.0 * 50.0 + 973.0 * 10.0 + 2.0 * 20.0) / 1000.0;
        assert!((out.ttft_ms.mean.unwrap() - ttft_mean).abs() < 1e-9, "{:?}", out.ttft_ms);
        assert_eq!(out.ttft_ms.count, 1000);
        // Sorted, rank 0.9 x 999 = 899.1 falls among the 973 tens.
        assert!((out.ttft_ms.p90.unwrap() - 10.0).abs() < 1e-9);
        assert!((out.ttft_ms.max.unwrap() - 50.0).abs() < 1e-9);
        assert!((out.e2e_ms.mean.unwrap() - 2000.0).abs() < 1e-6);
        // TPOT (2,000 - TTFT) / 10: 195 ms, 199 ms or 198 ms.
        let tpot = (25.0 * 195.0 + 973.0 * 199.0 + 2.0 * 198.0) / 1000.0;
        assert!((out.tpot_ms.mean.unwrap() - tpot).abs() < 1e-9);
        // Throughput over the window's 101 s plus the 900 s of arrivals
        // it did not simulate.
        assert_eq!(out.requests.completed, 1000);
        assert!((out.throughput.duration_s - 1001.0).abs() < 1e-9);
        assert!((out.throughput.requests_per_s - 1000.0 / 1001.0).abs() < 1e-12);
        assert_eq!(out.requests.input_tokens, 100_000);
        assert_eq!(out.requests.output_tokens, 11_000);
    }

    #[test]
    fn a_window_that_is_not_steady_is_refused() {
        let shell = shell();
        // The middle's second half 1% slower than its first: refused (0.5% allowed).
        assert!(extrapolate(&shell, &window(|i| if i < 61 { 10.0 } else { 10.1 }), 100.0, 1000, 999.0).is_none());
        // 0.4% slower: taken.
        assert!(extrapolate(&shell, &window(|i| if i < 61 { 10.0 } else { 10.04 }), 100.0, 1000, 999.0).is_some());
        // A drain longer than a quarter of the window: refused.
        let mut long = window(|_| 10.0);
        long[40] = finished(40, 40.0, 10.0, 30_000.0, 11);
        assert!(extrapolate(&shell, &long, 100.0, 1000, 999.0).is_none());
        // A preemption, or a request not finished: refused.
        let mut preempted = shell.clone();
        preempted.preemptions = 1;
        assert!(extrapolate(&preempted, &window(|_| 10.0), 100.0, 1000, 999.0).is_none());
        let mut open = window(|_| 10.0);
        open[50].status = Status::InFlight;
        assert!(extrapolate(&shell, &open, 100.0, 1000, 999.0).is_none());
        // A stage shorter than the window's parts: refused.
        assert!(extrapolate(&shell, &window(|_| 10.0), 100.0, 90, 89.0).is_none());
    }

    #[test]
    fn only_long_stationary_stages_are_sampled() {
        let load = |sets: &[&str]| {
            let o: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
            llmsim_scenario::config::load_scenario_with(&repo("scenarios/base.yml"), &o).unwrap()
        };
        let stage = ["workload.requests=null", "workload.duration_s=600"];
        assert_eq!(stationary(&load(&stage)), Some(600.0));
        assert_eq!(stationary(&load(&["workload.duration_s=600", "workload.requests=100"])), None);
        let closed = [&stage[..], &["workload.arrivals={closed: {concurrency: 4}}"]].concat();
        assert_eq!(stationary(&load(&closed)), None);
        // Shorter than two first windows: simulated whole.
        assert!(predict(&load(&["workload.requests=null", "workload.duration_s=100"])).is_none());
    }

    /// The stated tolerance: on the shipped H100 stages (600-1,200 s), at
    /// the scenario's values and at fitted ones, every figure the fit uses
    /// within [`TOLERANCE`] of the whole stage's ([`TOLERANCE_TTFT`] for TTFT).
    #[test]
    fn the_shipped_stages_are_within_the_stated_tolerance_of_whole_stages() {
        use crate::calibrate::{FitKey, default_metrics, keys, predict};
        let src = ScenarioSource::load(&repo("scenarios/fidelity/h100-vllm.yml"), &[]).unwrap();
        let csv = repo("scenarios/fidelity/h100-inference-perf.csv");
        let load = |steady| {
            let opts = LoadOptions { steady, ..LoadOptions::default() };
            runs::load(&src, &csv, &opts).unwrap().runs.into_iter().filter(|r| r.not_fitted.is_none()).collect()
        };
        let (sampled, whole): (Vec<runs::Run>, Vec<runs::Run>) = (load(true), load(false));
        assert_eq!(sampled.len(), 20);
        let keys: Vec<FitKey> = keys::parse(&[]).unwrap();
        let names: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(
            names,
            ["efficiency.compute", "efficiency.memory", "latency.step_overhead_ms", "latency.request_overhead_ms"]
        );
        let (mut windows, mut worst) = (0, 0.0f64);
        for x in [vec![1.0, 1.0, 0.0, 0.0], vec![0.9781, 0.7597, 0.34, 24.77]] {
            for (s, w) in sampled.iter().zip(&whole) {
                windows += usize::from(super::predict(&s.base.scenario(&keys, &x).unwrap()).is_some());
                let (a, b) = (predict(s, &keys, &x).unwrap(), predict(w, &keys, &x).unwrap());
                for m in default_metrics() {
                    let (a, b) = (a[&m], b[&m]);
                    let off = (a / b - 1.0).abs();
                    let ttft = matches!(m, Metric::Latency(Family::Ttft, _));
                    let allowed = if ttft { TOLERANCE_TTFT } else { TOLERANCE };
                    worst = worst.max(off);
                    assert!(off <= allowed, "{} {}: {a} from a window, {b} whole", s.name, m.name());
                }
            }
        }
        // The windows were taken (the test is not of whole stages twice).
        assert!(windows >= 30, "{windows} of 40 predictions from a window");
        assert!(worst > 0.0);
    }
}
