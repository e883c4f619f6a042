use super::*;
use crate::config::Override;

/// A scenario using every optional key at least once (lengths and arrivals
/// are enums: their other forms are checked key by key below).
const FULL: &str = r#"
name: full
description: every key
hardware: { name: x, description: d, hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989, cost_per_hour: 2.5 }
model:
  name: m
  context_length: 4096
  weights: { parameters_billions: 7, bytes_per_parameter: 2 }
  kv_cache: { bytes_per_token: 524288, block_size: 16, gpu_memory_utilization: 0.9, watermark: 0.01, num_blocks: 100 }
scheduler: { max_batch_tokens: 2048, max_num_sequences: 8 }
latency: { step_overhead_ms: 1 }
efficiency: { compute: 0.5, memory: 0.5 }
workload:
  seed: 1
  arrivals: { gamma: { rate: 2, burstiness: 0.5 } }
  requests: 10
  duration_s: 5
  prompt_tokens: { normal: { mean: 100, std: 10, min: 1, max: 200 } }
  output_tokens: { choice: { values: [1, 2], weights: [1, 1] } }
"#;

fn paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Value::Mapping(m) = v {
        for (k, child) in m {
            let Value::String(k) = k else { continue };
            let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            out.push(p.clone());
            paths(child, &p, out);
        }
    }
}

#[test]
fn the_full_example_parses_and_each_of_its_keys_is_listed() {
    let value: Value = crate::yaml::from_str(FULL).unwrap();
    crate::config::parse_str::<RawScenario>(FULL, std::path::Path::new("full.yml")).expect("the example is valid");
    let mut found = Vec::new();
    paths(&value, "", &mut found);
    assert!(found.len() > 40, "{found:?}");
    for p in found {
        assert!(all().contains_key(&p), "{p} is accepted by the parser but missing from the key list");
    }
}

#[test]
fn the_only_opaque_keys_are_the_ones_with_an_expansion() {
    // The top level, and inside every expansion (a key may be opaque within one).
    let mut traced = trace::<RawScenario>("");
    for e in OPAQUE {
        if let Some(expand) = e.trace {
            traced.extend(expand(e.path).into_iter().filter(|(k, _)| k != e.path));
        }
    }
    let opaque: BTreeSet<&str> = traced.iter().filter(|(_, k)| **k == Kind::Opaque).map(|(p, _)| p.as_str()).collect();
    let expanded: BTreeSet<&str> = OPAQUE.iter().map(|e| e.path).collect();
    assert_eq!(opaque, expanded, "a raw field is read as a raw YAML value: add it to OPAQUE");
    assert!(all().values().all(|k| *k != Kind::Opaque), "{:?}", all());
}

#[test]
fn the_list_names_the_documented_keys_with_their_kinds() {
    let expect = [
        ("hardware", Kind::NameOrMapping),
        ("hardware.cost_per_hour", Kind::Number),
        ("model.kv_cache.num_blocks", Kind::Integer),
        ("scheduler.max_batch_tokens", Kind::Integer),
        ("latency.step_overhead_ms", Kind::Number),
        ("workload.seed", Kind::Integer),
        ("workload.arrivals", Kind::Mapping),
        ("workload.arrivals.poisson.rate", Kind::Number),
        ("workload.arrivals.gamma.burstiness", Kind::Number),
        ("workload.arrivals.closed.think_time_s", Kind::Number),
        ("workload.arrivals.trace", Kind::Text),
        ("workload.prompt_tokens", Kind::CountOrMapping),
        ("workload.prompt_tokens.uniform", Kind::List),
        ("workload.output_tokens.lognormal.std", Kind::Number),
        ("workload.output_tokens.choice.weights", Kind::List),
        ("name", Kind::Text),
    ];
    for (path, kind) in expect {
        assert_eq!(all().get(path), Some(&kind), "{path}");
    }
}

fn sample(kind: Kind) -> &'static str {
    match kind {
        Kind::Integer | Kind::CountOrMapping => "7",
        Kind::Number | Kind::SecondsOrMapping => "0.5",
        Kind::Text | Kind::NameOrMapping => "h100-80gb",
        Kind::ModelOrMapping => "llama-3.1-8b",
        Kind::NumberOrMapping => "{2: 248, 4: 289}",
        Kind::Bool => "true",
        Kind::List => "[1, 2]",
        Kind::Mapping | Kind::Opaque => "{}",
    }
}

#[test]
fn the_parser_knows_every_listed_key() {
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/base.yml")).unwrap();
    let file = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/base.yml"));
    for (path, kind) in all() {
        let mut value: Value = crate::yaml::from_str(&base).unwrap();
        // A key inside a one-key enum replaces the whole enum.
        for e in OPAQUE.iter().filter(|e| path.starts_with(&format!("{}.", e.path))) {
            Override::parse(&format!("{}=null", e.path)).unwrap().apply(&mut value, file).unwrap();
        }
        let o = Override::parse(&format!("{path}={}", sample(*kind))).unwrap_or_else(|e| panic!("{e}"));
        o.apply(&mut value, file).unwrap();
        if let Err(e) = crate::config::parse_value::<RawScenario>(value, file, "") {
            assert!(!e.message.contains("unknown"), "{path}: {e}");
        }
    }
}

#[test]
fn a_typo_gets_the_nearest_key() {
    let e = check_path("sheduler.max_batch_tokens").unwrap_err().to_string();
    assert!(e.contains("did you mean `scheduler.max_batch_tokens`"), "{e}");
    let e = check_path("workload.arrivals.poisson.rat").unwrap_err().to_string();
    assert!(e.contains("`workload.arrivals.poisson.rate`"), "{e}");
}

#[test]
fn a_stranger_gets_the_valid_keys_of_its_parent() {
    let e = check_path("scheduler.preemption_mode_setting").unwrap_err().to_string();
    assert!(
        e.contains("keys under `scheduler`: capacity_scheduler_policy, context_chunking_policy, cuda_graph_max_tokens"),
        "{e}"
    );
    let e = check_path("scheduler.max_batch_tokens.something.deeper").unwrap_err().to_string();
    assert!(e.contains("holds a whole number, not further keys"), "{e}");
    let e = check_path("completely_unrelated_thing").unwrap_err().to_string();
    assert!(e.contains("top-level keys: calibration, cluster, description, efficiency, engine, hardware"), "{e}");
}

#[test]
fn values_of_the_wrong_shape_are_refused() {
    let n = |s: &str| crate::yaml::from_str::<Value>(s).unwrap();
    assert!(check_value("k", Kind::Integer, &n("2048")).is_ok());
    let e = check_value("scheduler.max_batch_tokens", Kind::Integer, &n("abc")).unwrap_err().to_string();
    let (first, about) = e.split_once('\n').expect("a second line from the key's row");
    assert_eq!(first, "`scheduler.max_batch_tokens` expects a whole number, got the string \"abc\"");
    // The key's row of config/schema.rs, written out here by hand.
    assert!(about.starts_with("  scheduler.max_batch_tokens: allowed: whole, 1 to 100,000,000; "), "{about}");
    assert!(about.contains("unset: 8192; "), "{about}");
    // A key without a row (none exists) would get no second line; `k` is not a key.
    assert!(!check_value("k", Kind::Integer, &n("abc")).unwrap_err().to_string().contains('\n'));
    assert!(check_value("k", Kind::Integer, &n("1.5")).is_err());
    assert!(check_value("k", Kind::Number, &n("3")).is_ok());
    assert!(check_value("k", Kind::NameOrMapping, &n("h100-80gb")).is_ok());
    assert!(check_value("k", Kind::CountOrMapping, &n("{uniform: [1, 2]}")).is_ok());
    assert!(check_value("k", Kind::CountOrMapping, &n("abc")).is_err());
    assert!(check_value("k", Kind::Text, &n("null")).is_ok());
}

/// A stand-in for a raw struct that gains a field.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Grown {
    old: i64,
    inner: Option<GrownInner>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct GrownInner {
    rate: f64,
    added_later: Option<String>,
}

#[test]
fn a_field_added_to_a_struct_is_listed_without_editing_the_list() {
    let keys = trace::<Grown>("top");
    let names: Vec<&str> = keys.keys().map(String::as_str).collect();
    assert_eq!(names, ["top", "top.inner", "top.inner.added_later", "top.inner.rate", "top.old"]);
    assert_eq!(keys["top.inner.added_later"], Kind::Text);
}

#[test]
fn plain_parse_checks_the_path_and_checked_parse_also_the_shape() {
    assert!(Override::parse("sheduler.max_batch_tokens=1").unwrap_err().to_string().contains("did you mean"));
    // Callers that only validate a key (with a dummy value) keep working.
    assert!(Override::parse("hardware=0").is_ok());
    assert!(Override::parse("scheduler.max_batch_tokens=abc").is_ok());
    let e = Override::parse_checked("scheduler.max_batch_tokens=abc").unwrap_err().to_string();
    assert!(e.contains("expects a whole number"), "{e}");
    assert!(Override::parse_checked("hardware=a100-80gb").is_ok());
}

#[test]
fn every_numeric_key_reads_the_one_number_grammar() {
    // A field typed f64/i64/u64 without `deserialize_with = "num::..."`
    // would read `0x1E` or `1e3` differently from its neighbours.
    let mut plain = trace_with_plain::<RawScenario>("").1;
    plain.extend(trace_with_plain::<RawHardware>("hardware").1);
    plain.extend(trace_with_plain::<RawArrivals>("workload.arrivals").1);
    plain.extend(trace_with_plain::<RawDist>("workload.prompt_tokens").1);
    assert!(plain.is_empty(), "read outside config::num: {plain:?}");
    // (The server's models file has the same check in llmsim-server.)
    let numeric: Vec<&String> =
        all().iter().filter(|(_, k)| matches!(k, Kind::Number | Kind::Integer)).map(|(p, _)| p).collect();
    assert!(numeric.len() > 25, "{numeric:?}");
}

#[test]
fn whole_number_keys_take_a_whole_number_however_it_is_written() {
    let n = |s: &str| crate::yaml::from_str::<Value>(s).unwrap();
    for ok in ["7", "0x10", "1e3", "2000.0", "0o17"] {
        assert!(check_value("k", Kind::Integer, &n(ok)).is_ok(), "{ok}");
        assert!(check_value("k", Kind::CountOrMapping, &n(ok)).is_ok(), "{ok}");
    }
    assert!(check_value("k", Kind::Integer, &n("2.5")).is_err());
    assert!(check_value("k", Kind::Integer, &n(".inf")).is_err());
}
