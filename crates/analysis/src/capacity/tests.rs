//! The search against a case solvable by hand.
//!
//! One request at a time (`max_num_sequences: 1`, a budget of exactly one
//! prompt), each a 512-token prompt and one output token, so every request
//! is served by exactly one prefill step of duration `d`. Under constant
//! arrivals with gap `g = 1/rate`: if `g >= d` every request finds the
//! engine idle and its TTFT is exactly `d`; if `g < d` the queue grows by
//! `d - g` per request and the last TTFT is `d + (n - 1)(d - g)`. So with an
//! SLO `ttft_max_ms <= 1.5 d` the answer is `1/d`, and the saturation
//! throughput is `1/d` too. Above `1/d` the waiting queue grows at
//! `rate - 1/d` requests a second, so between the third and the fourth
//! quarter of the arrival window it grows by `(rate - 1/d) * span / 4`,
//! against `rate * span / 4` arrivals: the growth fraction is
//! `1 - 1 / (rate * d)`.

use super::saturation::{self, Sizing};
use super::search::{Options, SearchError, probe_seed as probe, search};
use super::slo::Slo;
use llmsim_scenario::config::Scenario;

const YAML: &str = "
hardware: { hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989, cost_per_hour: 3.6 }
model:
  context_length: 4096
  weights: { parameters_billions: 6.74, bytes_per_parameter: 2 }
  kv_cache: { bytes_per_token: 524288 }
scheduler: { max_batch_tokens: 512, max_num_sequences: 1 }
workload:
  seed: 7
  arrivals: { constant: { rate: 1 } }
  requests: 100
  prompt_tokens: 512
  output_tokens: 1
";

fn scenario() -> Scenario {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one-at-a-time.yml");
    std::fs::write(&file, YAML).unwrap();
    llmsim_scenario::config::load_scenario(&file).unwrap()
}

/// The step's duration from the roofline formula of docs/engine.md, by hand:
/// compute-bound, 2 * 6.74e9 * 512 / 989e12 s = 6.978 ms (memory: 4.58 ms).
fn step_ns() -> u64 {
    let compute: f64 = 2.0 * 6.74e9 * 512.0 / 989e12;
    let memory = (6.74e9 * 2.0 + 512.0 * 524_288.0) / 3000e9;
    assert!(compute > memory);
    (compute * 1e9).round() as u64
}

fn options(bound_ms: f64) -> Options {
    Options {
        slos: vec![Slo::parse(&format!("ttft_max_ms={bound_ms}")).unwrap()],
        precision: 0.01,
        requests: Some(2000),
        target_rate: Some(1000.0),
        seeds: 3,
        early_stop: true,
        bracket: false,
    }
}

#[test]
fn below_the_step_rate_every_ttft_is_one_step_and_above_it_the_queue_grows() {
    let d = step_ns() as f64 / 1e6;
    let slos = options(1.5 * d).slos;
    let rate = 1e9 / step_ns() as f64;
    let (below, r) = probe(&scenario(), &slos, 0.95 * rate, 2000).unwrap();
    assert!(below.pass);
    assert_eq!(r.ttft_ms.max, Some(d));
    assert_eq!(r.ttft_ms.p50, Some(d));
    assert_eq!(below.slo_attainment_pct, 100.0);
    let (above, r) = probe(&scenario(), &slos, 1.05 * rate, 2000).unwrap();
    assert!(!above.pass);
    // The last of n requests waits (n - 1)(d - g) longer than the first.
    let g = 1e3 / (1.05 * rate);
    let expect = d + 1999.0 * (d - g);
    assert!((r.ttft_ms.max.unwrap() - expect).abs() < 0.01, "{:?} vs {expect}", r.ttft_ms.max);
}

#[test]
fn the_search_finds_the_rate_where_a_step_outlasts_the_arrival_gap() {
    let d_ns = step_ns();
    let exact = 1e9 / d_ns as f64;
    let report = search(&scenario(), &options(1.5 * d_ns as f64 / 1e6)).unwrap();
    // Served over the second half: whole steps of d in a window of about
    // 1000 gaps, so within 0.2% of 1/d.
    assert!((report.saturation_rps - exact).abs() < 2e-3 * exact, "{} vs {exact}", report.saturation_rps);
    // The offered rate may overshoot by the 2% allowance, never more (the
    // growth fraction 1 - 1/(rate d) reaches 2% at rate = 1/(0.98 d)).
    assert!(report.sustained_rate_rps >= exact * 0.99 && report.sustained_rate_rps <= exact / 0.98);
    assert!(report.unsustained_rate_rps.unwrap() > exact / 0.98 * 0.99);
    // The burst figure is exactly 1/d here: one request a step, nothing to lock.
    assert!((report.burst_rps - exact).abs() < 1e-6 * exact, "{} vs {exact}", report.burst_rps);
    // Constant arrivals exactly at saturation keep up (gap == step), so the
    // search may stop at saturation itself; it never passes above 1/d.
    assert!(report.max_rate_rps <= exact * (1.0 + 1e-9), "{} vs {exact}", report.max_rate_rps);
    assert!(report.max_rate_rps >= exact * 0.99, "{} vs {exact}", report.max_rate_rps);
    assert_eq!(report.replicas, Some((1000.0 / report.max_rate_rps).ceil() as u64));
    // One output token per request: cost = 3.6 / (rate * 3600) * 1e6.
    let per_m = report.cost_per_million_output_tokens.unwrap();
    let tokens_per_s = report.at_max_rate.output_tokens_per_s;
    assert!((per_m - 3.6 / (tokens_per_s * 3600.0) * 1e6).abs() < 1e-9);
    assert!(report.probes.iter().all(|p| p.pass == (p.rate_rps <= exact * (1.0 + 1e-9))), "{:#?}", report.probes);
    // Stepping up from 1% of saturation by x2: 1%, 2%, 4%, ..., 64%, then
    // saturation itself (which fails or passes), then bisection.
    let rates: Vec<f64> = report.probes.iter().map(|p| p.rate_rps / report.saturation_rps).collect();
    for (k, r) in rates.iter().take(7).enumerate() {
        assert!((r - 0.01 * 2f64.powi(k as i32)).abs() < 1e-9, "{rates:?}");
    }
    assert!((rates[7] - 1.0).abs() < 1e-9, "{rates:?}");
}

#[test]
fn the_queue_growth_is_the_share_of_arrivals_the_engine_falls_behind_by() {
    let d = step_ns() as f64 / 1e9;
    let size = Sizing { requests: 4000, extend: false, e2e_multiple: 20.0, max_requests: 4000 };
    let seeds = [7];
    // Below 1/d every request finds the engine idle: nothing ever waits.
    let below = saturation::probe(&scenario(), &seeds, 0.95 / d, size.requests).unwrap();
    assert_eq!(below.queue_growth, 0.0);
    assert!(below.sustained);
    // Served over the second half: the offered rate, to a request or two.
    assert!((below.served_rps * d - 0.95).abs() < 0.002, "{}", below.served_rps * d);
    // Above it the queue grows by 1 - 1/(rate d) of the arrivals.
    for over in [1.01, 1.05, 1.5] {
        let p = saturation::probe(&scenario(), &seeds, over / d, size.requests).unwrap();
        let expect = 1.0 - 1.0 / over;
        assert!((p.queue_growth - expect).abs() < 0.002, "at {over}/d: {} vs {expect}", p.queue_growth);
        assert_eq!(p.sustained, expect <= saturation::GROWTH_LIMIT);
        // It serves one request a step whatever the rate.
        assert!((p.served_rps * d - 1.0).abs() < 0.002, "{}", p.served_rps * d);
    }
}

#[test]
fn the_saturation_search_brackets_from_the_burst_figure_in_steps_of_a_quarter() {
    let d = step_ns() as f64 / 1e9;
    let size = Sizing { requests: 2000, extend: false, e2e_multiple: 20.0, max_requests: 2000 };
    // From far below: 0.5/d grows x1.25 until the queue grows, then bisects.
    let found = saturation::find(&scenario(), &[7], 0.5 / d, 0.01, size).unwrap().unwrap();
    let rates: Vec<f64> = found.probes.iter().map(|p| p.rate_rps * d).collect();
    for (k, r) in rates.iter().take(4).enumerate() {
        assert!((r - 0.5 * 1.25f64.powi(k as i32)).abs() < 1e-9, "{rates:?}");
    }
    assert!((found.rps * d - 1.0).abs() < 2e-3, "{}", found.rps * d);
    // From far above: shrinks by 1.25 until sustained.
    let found = saturation::find(&scenario(), &[7], 3.0 / d, 0.01, size).unwrap().unwrap();
    assert!(!found.probes[0].sustained && (found.probes[1].rate_rps * d - 2.4).abs() < 1e-9);
    assert!((found.rps * d - 1.0).abs() < 2e-3, "{}", found.rps * d);
    let (lo, hi) = (found.sustained_rate_rps, found.unsustained_rate_rps.unwrap());
    assert!(hi - lo <= 0.01 * lo && lo * d <= 1.0 / 0.98 && hi * d > 1.0, "[{lo}, {hi}] vs 1/d = {}", 1.0 / d);
}

#[test]
fn a_tighter_slo_binds_below_saturation_and_is_named() {
    // Poisson arrivals queue well before saturation: a median queue time of
    // half a step is missed long before a loose TTFT bound is.
    let d_ms = step_ns() as f64 / 1e6;
    let mut opts = options(100.0 * d_ms);
    opts.slos.push(Slo::parse(&format!("queue_p50_ms={}", 0.5 * d_ms)).unwrap());
    let mut s = scenario();
    s.workload.arrivals = llmsim_scenario::config::Arrivals::Poisson { rate: 1.0 };
    let report = search(&s, &opts).unwrap();
    assert_eq!(report.binding_slo.as_deref(), Some("queue_p50_ms"));
    assert_eq!(report.limited_by, "slo");
    assert!(report.max_rate_rps < report.saturation_rps);
}

#[test]
fn an_slo_below_one_step_is_unreachable_and_reports_the_best_achieved() {
    let d_ms = step_ns() as f64 / 1e6;
    let err = search(&scenario(), &options(0.5 * d_ms)).unwrap_err();
    let SearchError::Unreachable { best, .. } = &err else { panic!("{err}") };
    assert_eq!(best.slo_values["ttft_max_ms"], Some(d_ms));
    let text = err.to_string();
    assert!(text.contains("no rate meets every SLO") && text.contains(&format!("ttft_max_ms = {d_ms:.3}")), "{text}");
}

#[test]
fn a_closed_loop_has_no_rate_to_search() {
    let mut s = scenario();
    s.workload.arrivals = llmsim_scenario::config::Arrivals::Closed { concurrency: 4, think_time_s: 0.0, ramp_s: 0.0 };
    let err = search(&s, &options(10.0)).unwrap_err();
    assert!(err.to_string().contains("workload.arrivals is a closed loop"), "{err}");
}

#[test]
fn probes_are_sized_by_the_highest_quantile() {
    let slos = |names: &[&str]| names.iter().map(|n| Slo::parse(&format!("{n}=1")).unwrap()).collect::<Vec<_>>();
    assert_eq!(super::search::requests_for(&slos(&["ttft_p50_ms"])), 2000);
    assert_eq!(super::search::requests_for(&slos(&["ttft_p50_ms", "itl_p99_ms"])), 10_000);
    assert_eq!(super::search::requests_for(&slos(&["e2e_max_ms"])), 100_000);
}

#[test]
fn when_every_request_is_rejected_no_rate_helps() {
    let mut s = scenario();
    s.model.context_length = 100;
    let err = search(&s, &options(1e6)).unwrap_err();
    assert!(matches!(&err, SearchError::Unreachable { saturation_rps, .. } if *saturation_rps == 0.0), "{err}");
    assert!(err.to_string().contains("no request completes even with the engine saturated"), "{err}");
}

/// Counts the requests that finished, to see where a run stopped.
#[derive(Default)]
struct Finishes(u64);

impl llmsim_core::engine::Observer for Finishes {
    fn finished(&mut self, _id: llmsim_core::engine::RequestId, _at: llmsim_core::time::SimTime) {
        self.0 += 1;
    }
}

/// The probe at `over` times the step rate with `slo`, cut: (stopped,
/// requests finished before the stop).
fn cut_at(slo: &str, over: f64) -> (super::search::Probe, u64) {
    let slos = vec![Slo::parse(slo).unwrap()];
    let rate = over * 1e9 / step_ns() as f64;
    let mut seen = Finishes::default();
    let (p, r) = super::probe::probe_seed_observed(&scenario(), &slos, rate, 2000, &mut seen, true).unwrap();
    assert!(r.is_none(), "{slo}: the run went to its end: {p:?}");
    assert_eq!((p.stopped, p.pass, p.failed.clone()), (1, false, vec![slos[0].name()]), "{slo}");
    (p, seen.0)
}

#[test]
fn a_probe_stops_at_the_request_that_makes_its_slo_certain_to_be_missed() {
    // Above the step rate request i (from 0) has TTFT d + i (d - g) (the
    // module's notes), one finishing a step: the stop comes at the first
    // request that settles the statistic, counted here by hand.
    let d = step_ns() as f64 / 1e6;
    let over = 1.25;
    let g = d / over;
    let ttft = |i: u64| d + i as f64 * (d - g);
    // (Between two requests' TTFTs, 3 d and 3.2 d, not on one.)
    let bound = 3.1 * d;
    let first_above = (0..).find(|&i| ttft(i) > bound).unwrap();
    // max: the first value above the bound.
    let (_, n) = cut_at(&format!("ttft_max_ms={bound}"), over);
    assert_eq!(n, first_above + 1);
    // p99 of at most 2,000 values: rank floor(0.99 x 1,999) = 1,979, so 21
    // values above settle it; the watch waits for 2 more (23).
    let (_, n) = cut_at(&format!("ttft_p99_ms={bound}"), over);
    assert_eq!(n, first_above + 23);
    // The mean of at most 2,000 values: once the sum passes 2,000 x bound.
    let (_, n) = cut_at(&format!("ttft_mean_ms={}", 0.1 * bound), over);
    let mut sum = 0.0;
    let settled = (0..).find(|&i| {
        sum += ttft(i);
        sum / 2000.0 > 0.1 * bound
    });
    let settled = settled.unwrap();
    assert!(n.abs_diff(settled + 1) <= 1, "stopped after {n}, by hand {}", settled + 1);
    // One output token: E2E is the TTFT.
    let (_, n) = cut_at(&format!("e2e_max_ms={bound}"), over);
    assert_eq!(n, first_above + 1);
    // Below the step rate nothing waits: the run goes to its end.
    let slos = vec![Slo::parse(&format!("ttft_max_ms={bound}")).unwrap()];
    let rate = 0.95e9 / step_ns() as f64;
    let (p, r) = super::probe::probe_seed_observed(&scenario(), &slos, rate, 2000, &mut (), true).unwrap();
    assert!(p.pass && p.stopped == 0 && r.is_some());
}

#[test]
fn only_slos_settled_by_finished_requests_are_watched() {
    use super::slo::SloCut;
    let watched = |t: &str| SloCut::new(&[Slo::parse(t).unwrap()], 100).is_some();
    for t in ["ttft_p50_ms=1", "e2e_p90_ms=1", "queue_mean_ms=1", "tpot_max_ms=1"] {
        assert!(watched(t), "{t}");
    }
    for t in ["itl_p99_ms=1", "step_p99_ms=1", "preemptions=0", "kv_peak_frac=0.5", "gold:ttft_p99_ms=1"] {
        assert!(!watched(t), "{t}");
    }
    // Past the exact samples the run's percentiles come from a histogram.
    let many = llmsim_planner::metrics::fold::EXACT_SAMPLES as u64 + 1;
    assert!(SloCut::new(&[Slo::parse("ttft_p99_ms=1").unwrap()], many).is_none());
}

#[test]
fn a_stopped_probe_never_stops_a_run_that_meets_and_the_search_ends_where_it_did() {
    // Poisson arrivals on several seeds around saturation, with SLOs of every
    // watched kind: each cut run misses its SLO when run whole, and the
    // searches with and without the stop find the same rate.
    let d_ms = step_ns() as f64 / 1e6;
    let mut s = scenario();
    s.workload.arrivals = llmsim_scenario::config::Arrivals::Poisson { rate: 1.0 };
    let slos: Vec<Slo> = [
        format!("ttft_p99_ms={}", 4.0 * d_ms),
        format!("e2e_p50_ms={}", 1.5 * d_ms),
        format!("queue_mean_ms={}", 0.5 * d_ms),
        format!("ttft_max_ms={}", 8.0 * d_ms),
    ]
    .iter()
    .map(|t| Slo::parse(t).unwrap())
    .collect();
    let (mut cut, mut whole_misses) = (0, 0);
    for slo in &slos {
        for seed in [1, 2, 3] {
            for over in [0.6, 0.8, 0.9, 1.0, 1.1] {
                s.workload.seed = seed;
                let rate = over * 1e9 / step_ns() as f64;
                let one = std::slice::from_ref(slo);
                let (p, _) = super::probe::probe_seed_observed(&s, one, rate, 2000, &mut (), true).unwrap();
                let (w, r) = probe(&s, one, rate, 2000).unwrap();
                whole_misses += usize::from(!w.pass);
                if p.stopped == 1 {
                    cut += 1;
                    assert!(!w.pass, "{} at {over}/d, seed {seed}: stopped, but the whole run meets: {:?}", slo, r);
                } else {
                    assert_eq!(p, w, "{slo} at {over}/d, seed {seed}");
                }
            }
        }
    }
    assert!(cut >= 10 && whole_misses >= cut, "the test needs stopped runs: {cut} of {whole_misses} misses");
    let mut opts = options(100.0 * d_ms);
    opts.slos = slos;
    let stopped = search(&s, &opts).unwrap();
    opts.early_stop = false;
    let full = search(&s, &opts).unwrap();
    assert_eq!(stopped.max_rate_rps, full.max_rate_rps);
    assert_eq!(stopped.max_rate_upper_rps, full.max_rate_upper_rps);
    assert_eq!(stopped.at_max_rate, full.at_max_rate);
    assert!(stopped.probes.iter().any(|p| p.stopped > 0), "{:#?}", stopped.probes);
    assert!(full.probes.iter().all(|p| p.stopped == 0));
    assert_eq!(stopped.probes.len(), full.probes.len());
}

/// Asks the run to stop after its first finish.
struct StopAfterOne(bool);

impl llmsim_core::engine::Observer for StopAfterOne {
    fn finished(&mut self, _id: llmsim_core::engine::RequestId, _at: llmsim_core::time::SimTime) {
        self.0 = true;
    }
    fn wants_stop(&self) -> bool {
        self.0
    }
}

#[test]
fn a_stop_the_slo_watch_did_not_ask_for_is_an_error_not_a_missed_probe() {
    let slos = vec![Slo::parse("ttft_max_ms=1e9").unwrap()];
    for cut in [false, true] {
        let mut other = StopAfterOne(false);
        let got = super::probe::probe_seed_observed(&scenario(), &slos, 10.0, 100, &mut other, cut);
        let Err(SearchError::Run { error, .. }) = got else { panic!("cut {cut}: {got:?}") };
        assert!(matches!(error, llmsim_planner::run_driver::SimError::Cut { .. }), "{error}");
    }
}

/// A probe at `rate` whose verdict is `pass`, for the search's logic alone.
fn verdict(rate: f64, pass: bool, short: bool) -> super::search::Probe {
    super::search::Probe {
        rate_rps: rate,
        requests: if short { 500 } else { 2000 },
        pass,
        seeds_met: usize::from(pass),
        slo_values: Default::default(),
        failed: if pass { vec![] } else { vec!["ttft_p99_ms".into()] },
        goodput_rps: 0.0,
        slo_attainment_pct: 0.0,
        requests_per_s: rate,
        output_tokens_per_s: 0.0,
        e2e_mean_ms: None,
        stopped: 0,
        short,
    }
}

/// Runs [`super::search::slo_search`] from 0.1 req/s up to a saturation of
/// 20 on verdicts given by thresholds: a full probe meets up to `full`, a
/// short one up to `short`. Returns the bracket and every probe run.
fn search_on(full: f64, short: f64, bracket: bool) -> (super::search::Bracket, Vec<(f64, super::search::Length)>) {
    use super::search::Length;
    let mut ran = Vec::new();
    let mut run = |rate: f64, length: Length| {
        ran.push((rate, length));
        let limit = if length == Length::Short { short } else { full };
        Ok(verdict(rate, rate <= limit, length == Length::Short))
    };
    let b = super::search::slo_search(verdict(0.1, true, false), 20.0, 0.01, bracket, &mut run).unwrap();
    (b, ran)
}

#[test]
fn bracketing_rests_its_answer_on_full_probes_whichever_way_the_short_ones_err() {
    use super::search::Length;
    // Full probes meet up to 7 req/s; short ones up to 9 (too hopeful), 5
    // (too strict), 7 (right), or everywhere (saturation).
    for short in [9.0, 5.0, 7.0, 100.0] {
        let (b, ran) = search_on(7.0, short, true);
        // The limit lies in [lo, hi) at the search's precision, by full probes.
        assert!(b.lo <= 7.0 && b.hi > 7.0, "short {short}: [{}, {})", b.lo, b.hi);
        assert!(b.hi - b.lo <= 0.01 * b.lo, "short {short}: [{}, {})", b.lo, b.hi);
        assert!(!b.best.short && b.best.pass && b.best.rate_rps == b.lo);
        let fail = b.first_fail.as_ref().expect("a full probe missed");
        assert!(!fail.short && !fail.pass && fail.rate_rps == b.hi);
        assert!(ran.contains(&(b.lo, Length::Full)) && ran.contains(&(b.hi, Length::Full)), "{ran:?}");
        // The short probes come first, the full ones after.
        let first_full = ran.iter().position(|r| r.1 == Length::Full).unwrap();
        assert!(ran[first_full..].iter().all(|r| r.1 == Length::Full), "{ran:?}");
    }
    // Right short probes: their bracket is confirmed by two full probes,
    // and the answer is the plain search's.
    let (b, ran) = search_on(7.0, 7.0, true);
    assert_eq!(ran.iter().filter(|r| r.1 == Length::Full).count(), 2, "{ran:?}");
    let (plain, plain_ran) = search_on(7.0, 7.0, false);
    assert_eq!((b.lo, b.hi), (plain.lo, plain.hi));
    assert!(plain_ran.iter().all(|r| r.1 == Length::Full));
    // Without bracketing, the plain search by hand: 0.2, 0.4, ..., 6.4, 12.8
    // (which misses), then the bisection of [6.4, 12.8).
    let rates: Vec<f64> = plain_ran.iter().map(|r| r.0).collect();
    assert_eq!(&rates[..7], &[0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8]);
    assert!((rates[7] - 9.6).abs() < 1e-12, "{rates:?}");
    // Every rate met up to saturation: the answer is saturation, confirmed full.
    let (b, ran) = search_on(100.0, 100.0, true);
    assert!(b.lo == 20.0 && b.hi == 20.0 && b.first_fail.is_none() && !b.best.short);
    assert_eq!(ran.last(), Some(&(20.0, Length::Full)));
    // Short probes that met everywhere while full ones miss above 7: the
    // full probe at saturation misses, and the confirmation walks down.
    let (b, _) = search_on(7.0, 100.0, true);
    assert!(b.lo <= 7.0 && b.hi > 7.0);
}

#[test]
fn a_bracketed_search_finds_the_step_rate_on_full_probes() {
    // The by-hand case: the limit is 1/d. With --bracket the short probes
    // (a quarter of the 2,000 requests) guide the search, and the rates
    // the answer rests on ran with every request.
    let d_ns = step_ns();
    let exact = 1e9 / d_ns as f64;
    let mut opts = options(1.5 * d_ns as f64 / 1e6);
    opts.bracket = true;
    let report = search(&scenario(), &opts).unwrap();
    assert!(report.max_rate_rps <= exact * (1.0 + 1e-9) && report.max_rate_rps >= exact * 0.99, "{report:#?}");
    assert_eq!(report.at_max_rate.requests, 2000);
    assert!(!report.at_max_rate.short);
    assert!(report.probes.iter().any(|p| p.short && p.requests == 500), "{:#?}", report.probes);
    let upper = report.probes.iter().find(|p| !p.short && p.rate_rps == report.max_rate_upper_rps);
    assert!(upper.is_some_and(|p| !p.pass) || report.max_rate_upper_rps == report.saturation_rps);
    // Each probe's verdict is the by-hand one, short or full.
    assert!(report.probes.iter().all(|p| p.pass == (p.rate_rps <= exact * (1.0 + 1e-9))), "{:#?}", report.probes);
    // Fewer requests a probe than the plain search.
    opts.bracket = false;
    let plain = search(&scenario(), &opts).unwrap();
    let requests = |r: &super::search::SearchResult| r.probes.iter().map(|p| p.requests).sum::<u64>();
    assert!(requests(&report) < requests(&plain), "{} vs {}", requests(&report), requests(&plain));
}
