//! The HPA rule against sequences worked by hand from Kubernetes' rules
//! (the module docs), never from the code's own helpers.

use super::{Hpa, Reading};
use llmsim_core::time::SimTime;
use llmsim_scenario::config::autoscale::{Autoscale, ColdStart, ScaleRules, Signal};

/// Kubernetes' default behaviour, target 8 outstanding, 1 to 20 replicas.
fn defaults() -> Autoscale {
    Autoscale {
        min_replicas: 1,
        max_replicas: 20,
        signal: Signal::Outstanding,
        target: 8.0,
        period_s: 15.0,
        tolerance: 0.1,
        window_s: 60.0,
        scale_up: ScaleRules { stabilization_s: 0.0, pods: Some(4), percent: Some(100.0), period_s: 15.0 },
        scale_down: ScaleRules { stabilization_s: 300.0, pods: None, percent: Some(100.0), period_s: 15.0 },
        cold_start: ColdStart { load_gbps: None, engine_start_s: 0.0, graph_capture_s: 0.0, weight_bytes: 0.0 },
    }
}

fn at(s: f64) -> SimTime {
    SimTime::from_secs_f64(s)
}

fn ready(sum: f64, ready: u32) -> Reading {
    Reading::PerReplica { sum, ready, starting: 0 }
}

#[test]
fn a_step_of_load_scales_up_by_four_then_to_the_metric() {
    let mut h = Hpa::new(&defaults());
    // 80 outstanding on 2 ready replicas: 40 each, 5x the target of 8.
    // The metric asks for ceil(80 / 8) = 10; the period started at 2, so
    // at most max(2 + 4, ceil(2 * 2)) = 6.
    assert_eq!(h.decide(at(15.0), 2, ready(80.0, 2)), 6);
    // 15 s later the 4 new ones are still starting (no metric): counted at
    // 0 above the target, ratio' = 80 / 6 / 8 = 1.67, ceil(80 / 8) = 10.
    // The change at 15 s is exactly one period old, so no longer counted:
    // the period starts at 6, limit max(10, 12) = 12.
    let r = Reading::PerReplica { sum: 80.0, ready: 2, starting: 4 };
    assert_eq!(h.decide(at(30.0), 6, r), 10);
    // Load at the target on all ten: nothing moves.
    assert_eq!(h.decide(at(45.0), 10, ready(80.0, 10)), 10);
}

#[test]
fn within_the_tolerance_nothing_moves() {
    let h = Hpa::new(&defaults());
    // 4 replicas at 8.75 each: ratio 1.09375, within the tolerance.
    assert_eq!(h.recommend(4, ready(35.0, 4)), 4);
    // 9.0 each: ratio 1.125, past it: ceil(36 / 8) = 5.
    assert_eq!(h.recommend(4, ready(36.0, 4)), 5);
    // 7.3 each: ratio 0.9125, within 0.1 below: stays.
    assert_eq!(h.recommend(4, ready(29.2, 4)), 4);
    // No ready replica, or no TTFT sample: stays.
    assert_eq!(h.recommend(3, Reading::PerReplica { sum: 0.0, ready: 0, starting: 3 }), 3);
    assert_eq!(h.recommend(3, Reading::Fleet { value: None, ready: 3 }), 3);
}

#[test]
fn the_stabilization_window_holds_a_scale_down_for_300_s() {
    let mut h = Hpa::new(&defaults());
    // Ten replicas busy at the target, recommended at 15 and 30 s.
    assert_eq!(h.decide(at(15.0), 10, ready(80.0, 10)), 10);
    assert_eq!(h.decide(at(30.0), 10, ready(80.0, 10)), 10);
    // The load falls to 16 in all: the metric asks for ceil(16 / 8) = 2,
    // but the recommendations of the last 300 s (10 at 15 and 30 s) hold
    // the count at 10 ...
    for k in 3..22 {
        assert_eq!(h.decide(at(15.0 * f64::from(k)), 10, ready(16.0, 10)), 10, "t = {} s", 15 * k);
    }
    // ... until 330 s, when the 10 of 30 s is exactly 300 s old and drops
    // out: every recommendation left is 2. A scale-down of 100% a period
    // allows trunc(10 * 0) = 0, min_replicas 1: the 2 stands.
    assert_eq!(h.decide(at(330.0), 10, ready(16.0, 10)), 2);
}

#[test]
fn starting_replicas_count_at_the_target_when_scaling_down() {
    let mut cfg = defaults();
    cfg.scale_down.stabilization_s = 0.0;
    let mut h = Hpa::new(&cfg);
    // 4 ready at 2 each (ratio 0.25) and 2 starting, counted at the
    // target 8: ratio' = (8 + 16) / 6 / 8 = 0.5, ceil(24 / 8) = 3.
    let r = Reading::PerReplica { sum: 8.0, ready: 4, starting: 2 };
    assert_eq!(h.decide(at(15.0), 6, r), 3);
    // Above the target, starting ones count 0: 4 ready at 10 (ratio 1.25)
    // and 1 starting: ratio' = 40 / 5 / 8 = 1.0, within the tolerance.
    let r = Reading::PerReplica { sum: 40.0, ready: 4, starting: 1 };
    assert_eq!(h.recommend(5, r), 5);
}

#[test]
fn a_fleet_ttft_scales_by_its_ratio_to_the_target() {
    let mut cfg = defaults();
    cfg.signal = Signal::TtftP99Ms;
    cfg.target = 500.0;
    let h = Hpa::new(&cfg);
    // p99 1,500 ms on 3 ready, target 500: ceil(3 * 3) = 9.
    assert_eq!(h.recommend(3, Reading::Fleet { value: Some(1500.0), ready: 3 }), 9);
    // 200 ms: ceil(3 * 0.4) = 2.
    assert_eq!(h.recommend(3, Reading::Fleet { value: Some(200.0), ready: 3 }), 2);
}

#[test]
fn a_percent_policy_limits_each_period_from_its_start() {
    let mut cfg = defaults();
    cfg.scale_down = ScaleRules { stabilization_s: 0.0, pods: None, percent: Some(50.0), period_s: 60.0 };
    let mut h = Hpa::new(&cfg);
    // 10 replicas nearly idle: the metric asks for 1; 50% of 10 a period: 5.
    assert_eq!(h.decide(at(15.0), 10, ready(1.0, 10)), 5);
    // 15 s later the period (60 s) still started at 10: the limit is 5.
    assert_eq!(h.decide(at(30.0), 5, ready(1.0, 5)), 5);
    assert_eq!(h.decide(at(60.0), 5, ready(1.0, 5)), 5);
    // At 75 s the removal at 15 s is exactly 60 s old: the period starts
    // at 5, trunc(2.5) = 2.
    assert_eq!(h.decide(at(75.0), 5, ready(1.0, 5)), 2);
}

#[test]
fn the_count_stays_within_min_and_max() {
    let mut cfg = defaults();
    cfg.scale_up.pods = Some(100);
    cfg.scale_down.stabilization_s = 0.0;
    let mut h = Hpa::new(&cfg);
    // 800 outstanding asks for 100; max_replicas is 20.
    assert_eq!(h.decide(at(15.0), 10, ready(800.0, 10)), 20);
    // Idle asks for 0; min_replicas is 1.
    assert_eq!(h.decide(at(30.0), 20, ready(0.0, 20)), 1);
}
