use super::*;
use crate::workload::Source;
use std::path::Path;

fn scenario(extra: &str) -> Scenario {
    let text = format!(
        "hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}\nmodel:\n  context_length: 4096\n  \
         weights: {{parameters_billions: 7}}\n  kv_cache: {{bytes_per_token: 131072}}\nworkload:\n  seed: 5\n  \
         arrivals: {{poisson: {{rate: 10}}}}\n  requests: 40000\n  prompt_tokens: 10\n  output_tokens: 5\n{extra}"
    );
    let file = Path::new("classes.yml");
    let raw = llmsim_scenario::config::parse_str(&text, file).unwrap_or_else(|e| panic!("{e}"));
    llmsim_scenario::config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn shares_follow_the_weights_over_several_seeds() {
    for seed in [1u64, 2, 3] {
        let mut s =
            scenario("  classes:\n    - {name: a, weight: 1, priority: 0}\n    - {name: b, weight: 3, priority: 7}\n");
        s.workload.seed = seed;
        let c = Classes::of(&s).unwrap();
        let n = 40_000u64;
        let b = (0..n).filter(|&id| c.class_of(id) == 1).count() as f64 / n as f64;
        // 3/4 expected; the standard error of a share of 40,000 is 0.0022.
        assert!((b - 0.75).abs() < 0.011, "seed {seed}: share of b {b}");
        assert_eq!(c.priority_of(0), [0, 7][c.class_of(0)]);
    }
}

#[test]
fn a_request_keeps_its_class_whatever_else_changes() {
    let a = Classes::of(&scenario("  classes: [{name: x}, {name: y}]\n")).unwrap();
    let mut other = scenario("  classes: [{name: x}, {name: y}]\n");
    other.workload.arrivals =
        llmsim_scenario::config::Arrivals::Closed { concurrency: 3, think_time_s: 0.0, ramp_s: 0.0 };
    let b = Classes::of(&other).unwrap();
    let ids = [0u64, 1, 2, 17, 999, 39_999];
    assert!(ids.iter().all(|&id| a.class_of(id) == b.class_of(id)));
    // Not all one class: the draws differ between ids.
    let first = a.class_of(0);
    assert!((0..64).any(|id| a.class_of(id) != first));
}

#[test]
fn the_source_stamps_priorities_and_leaves_the_rest_alone() {
    let plain = scenario("");
    let classed =
        scenario("  classes:\n    - {name: hi, weight: 1, priority: -3}\n    - {name: lo, weight: 1, priority: 4}\n");
    let c = Classes::of(&classed).unwrap();
    let (mut a, mut b) = (crate::workload::AnySource::new(&plain), crate::workload::AnySource::new(&classed));
    for _ in 0..500 {
        let (x, y) = (a.pop().unwrap(), b.pop().unwrap());
        assert_eq!((x.id, x.arrival, x.prompt, x.output, x.priority), (y.id, y.arrival, y.prompt, y.output, 0));
        assert_eq!(y.priority, [-3, 4][c.class_of(y.id)]);
    }
}
