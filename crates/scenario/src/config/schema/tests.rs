//! The key table against the keys the raw structs take, the limits table
//! and what validation enforces.

use std::path::Path;

use super::*;
use crate::config::check::Check;
use crate::config::keys::{self, Kind};
use crate::config::{Override, load_scenario_with};
use crate::yaml::Value;

fn is_numeric(kind: Kind) -> bool {
    matches!(kind, Kind::Integer | Kind::Number | Kind::NumberOrMapping | Kind::CountOrMapping | Kind::SecondsOrMapping)
}

#[test]
fn every_key_has_exactly_one_row() {
    for path in keys::all().keys() {
        let rows: Vec<&str> = KEYS.iter().filter(|k| expand(k.path).contains(path)).map(|k| k.path).collect();
        assert_eq!(rows.len(), 1, "`{path}` should be named by exactly one row of config/schema.rs, not {rows:?}");
    }
}

#[test]
fn every_row_names_only_real_keys() {
    // A renamed or removed key must not leave its row behind.
    for k in KEYS {
        for path in expand(k.path) {
            assert!(keys::all().contains_key(&path), "schema row `{}` names `{path}`, which is not a key", k.path);
        }
    }
}

#[test]
fn every_row_has_a_meaning_and_a_default() {
    for k in KEYS {
        assert!(k.doc.len() > 10 && k.doc.ends_with('.'), "`{}` needs a one-sentence meaning", k.path);
        assert!(!k.doc.contains('|') && !k.doc.contains('\n'), "`{}`: its meaning breaks the table", k.path);
        if let Unset::Words(w) = k.unset {
            assert!(!w.trim().is_empty(), "`{}` needs a default (a value, or words: required, none, ...)", k.path);
        }
    }
}

#[test]
fn every_numeric_key_has_a_range_or_says_why_not() {
    for (path, kind) in keys::all() {
        let row = row_of(path).unwrap();
        match row.range {
            Bound::Limit(_) | Bound::Within(..) => {}
            Bound::Unranged(why) => assert!(!why.trim().is_empty(), "`{path}`: say why it has no range"),
            Bound::None => assert!(!is_numeric(*kind), "`{path}` holds {}: give it a range", kind.describe()),
        }
        if !is_numeric(*kind) && *kind != Kind::List {
            assert!(row.range.range().is_none(), "`{path}` holds {}, which has no range", kind.describe());
        }
    }
}

#[test]
fn every_limits_row_about_the_scenario_bounds_some_key() {
    let cited: Vec<&Limit> = KEYS.iter().filter_map(|k| k.range.limit()).collect();
    for l in limits::SCENARIO_ROWS {
        assert!(cited.iter().any(|c| std::ptr::eq(*c, *l)), "limits row `{}` bounds no key of config/schema.rs", l.key);
    }
    for c in cited {
        assert!(limits::SCENARIO_ROWS.iter().any(|l| std::ptr::eq(c, *l)), "`{}` is not in SCENARIO_ROWS", c.key);
    }
}

#[test]
fn paths_expand_their_alternatives() {
    assert_eq!(expand("a.{b,c}.d"), ["a.b.d", "a.c.d"]);
    assert_eq!(expand("{,x.}y.{p,q}"), ["y.p", "y.q", "x.y.p", "x.y.q"]);
    assert_eq!(
        row_of("workload.prompt_tokens.uniform[1]").map(|k| k.path),
        row_of("workload.output_tokens.uniform").map(|k| k.path)
    );
    assert_eq!(range("cluster.decode.hardware.hbm_gib"), &limits::HBM_GIB);
    assert_eq!(range("model.architecture.experts"), &limits::ARCH_SIZE_OR_ZERO);
    assert_eq!(range("workload.sessions.turns.normal.std"), &limits::LENGTH_STD);
}

/// A scenario that sets nearly every numeric key.
const ONE_ENGINE: &str = "
hardware: {name: t, hbm_gib: 80, memory_bandwidth_gbps: 3350, peak_tflops: 989, peak_tflops_fp8: 1979, cost_per_hour: 2,
           interconnect: {bandwidth_gbps: 350, latency_us: 10}}
model:
  context_length: 8192
  architecture: {layers: 32, hidden_size: 4096, attention_heads: 32, kv_heads: 8, head_dim: 128,
                 intermediate_size: 14336, vocab_size: 128256}
  weights: {parameters_billions: 8, bytes_per_parameter: 2}
  kv_cache: {bytes_per_token: 131072, block_size: 16, gpu_memory_utilization: 0.9, watermark: 0.01,
             num_blocks: 1000, prefix_caching: true}
parallelism: {tensor: 2, pipeline: 1}
scheduler: {max_batch_tokens: 8192, max_num_sequences: 256, cuda_graph_max_tokens: 512}
latency: {step_overhead_ms: 1, request_overhead_ms: 1, per_layer_overhead_us: 1, per_sequence_overhead_us: 1,
          allreduce_us: 5, eager_layer_us: 10, per_expert_us: 1, resend_jitter_ms: 1}
efficiency: {compute: 0.8, memory: 0.8, gemm_half_tokens: 64, attention_compute: 0.5, attention_memory: 0.5,
             allreduce: 1, expert_gemm: 0.5}
workload:
  seed: 1
  arrivals: {gamma: {rate: 10, burstiness: 1}}
  requests: 10
  duration_s: 10
  prompt_tokens: {normal: {mean: 100, std: 10, min: 1, max: 200}}
  output_tokens: {exponential: {mean: 20, min: 1, max: 50}}
  shared_prefix: {groups: 2, tokens: 10}
  sessions: {turns: {lognormal: {mean: 3, std: 1, min: 1, max: 5}}, think_s: {exponential: {mean: 1}}}
cluster: {replicas: 2, router: prefix_affinity, overlap_weight: 1}
";

/// Pools, a closed loop and the other length forms.
const POOLS: &str = "
hardware: h100-80gb
model: {preset: llama-3.1-8b, kv_cache: {prefix_caching: true}}
workload:
  arrivals: {closed: {concurrency: 4, think_time_s: 1, ramp_s: 1}}
  requests: 10
  prompt_tokens: {lognormal: {mean: 100, std: 10, min: 1, max: 200}}
  output_tokens: 10
  sessions: {turns: 2, think_s: 1}
cluster:
  prefill:
    replicas: 1
    router: prefix_affinity
    overlap_weight: 1
    hardware: {hbm_gib: 80, memory_bandwidth_gbps: 3350, peak_tflops: 989, peak_tflops_fp8: 1979, cost_per_hour: 2,
               interconnect: {bandwidth_gbps: 350, latency_us: 10}}
    parallelism: {tensor: 1}
    scheduler: {max_batch_tokens: 8192, max_num_sequences: 256, cuda_graph_max_tokens: 512}
  decode:
    replicas: 1
    hardware: {hbm_gib: 80, memory_bandwidth_gbps: 3350, peak_tflops: 989, peak_tflops_fp8: 1979, cost_per_hour: 2,
               interconnect: {bandwidth_gbps: 350, latency_us: 10}}
    parallelism: {tensor: 1}
    scheduler: {max_batch_tokens: 8192, max_num_sequences: 256, cuda_graph_max_tokens: 512}
  kv_transfer: {bandwidth_gbps: 50, latency_ms: 1}
";

/// A value just outside `range`, as `--set` text, and the message the
/// checker gives for it (none for a range of every 64-bit number).
fn outside(path: &str, range: &Range) -> Option<(String, String)> {
    let ck = Check { file: Path::new("x") };
    Some(match *range {
        Range::Whole { lo: 0, hi } if hi >= i64::MAX as u64 => return None,
        Range::Whole { lo, hi } => {
            let v = if lo > 0 { lo as i64 - 1 } else { hi as i64 + 1 };
            (v.to_string(), ck.whole(path, v, range).unwrap_err().message)
        }
        Range::Real { lo, open_lo, hi, open_hi } => {
            let v = if open_lo {
                lo
            } else if open_hi {
                hi
            } else if lo > 0.0 {
                lo / 2.0
            } else {
                hi * 2.0
            };
            (format!("{v:?}"), ck.real(path, v, range).unwrap_err().message)
        }
    })
}

fn set_in(doc: &Value, path: &str) -> bool {
    let mut node = doc;
    for seg in path.split('.') {
        match node.get(seg) {
            Some(n) => node = n,
            None => return false,
        }
    }
    true
}

#[test]
fn validation_enforces_the_range_of_each_row() {
    // Every numeric key the two scenarios set, just outside its range:
    // the error is the checker's, for the table's range.
    let dir = tempfile::tempdir().unwrap();
    let mut checked = Vec::new();
    for (name, text) in [("one.yml", ONE_ENGINE), ("pools.yml", POOLS)] {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        load_scenario_with(&file, &[]).unwrap_or_else(|e| panic!("{name} should load: {e}"));
        let doc: Value = crate::yaml::from_str(text).unwrap();
        for (path, kind) in keys::all() {
            let Some(range) = row_of(path).and_then(|k| k.range.range()) else { continue };
            if !is_numeric(*kind) || !set_in(&doc, path) {
                continue;
            }
            let Some((value, message)) = outside(path, range) else { continue };
            let o = Override::parse(&format!("{path}={value}")).unwrap();
            let e = match load_scenario_with(&file, &[o]) {
                Ok(_) => panic!("{path}={value} should be refused"),
                Err(e) => e,
            };
            // A distribution's bounds are named without its form (`...prompt_tokens.min`).
            let short = ["normal", "lognormal", "exponential"].map(|f| path.replace(&format!(".{f}."), "."));
            assert!(e.path == *path || short.contains(&e.path), "{path}={value}: {e}");
            assert!(e.message.starts_with(&message), "{path}={value}: {e}\nexpected {message}");
            checked.push(path.clone());
        }
    }
    assert!(checked.len() >= 80, "only {} keys checked: {checked:?}", checked.len());
}
