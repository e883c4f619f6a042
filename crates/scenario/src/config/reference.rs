//! The generated parts of `docs/scenario.md`: every key path a scenario
//! accepts (the list `--set` checks against, [`super::keys`]), with what it
//! holds, its default where the code has a constant for it, and its allowed
//! range ([`super::limits`]); the table of input limits; the run bounds;
//! the size limit of each kind of file; and the shipped hardware profiles.
//!
//! The page holds these between `<!-- generated:NAME -->` and
//! `<!-- /generated:NAME -->` markers. A test regenerates each part and
//! fails when the page differs, so the reference cannot drift from the
//! code. After changing a key, a range or a profile, rewrite the page with
//! `cargo test --release -p llmsim-scenario --lib config::reference -- --ignored write_scenario_reference`.

use std::path::Path;

use super::keys::{self, Kind};
use super::limits::{self, Range};
use super::raw::{RawByGpus, RawHardware};
use super::validate as v;
use llmsim_core::util::thousands;

/// The page these parts live in, relative to the repository root.
pub const PAGE: &str = "docs/scenario.md";

/// Every generated part, by marker name.
pub fn parts() -> Vec<(&'static str, String)> {
    vec![
        ("keys", key_table()),
        ("limits", limit_table()),
        ("bounds", bound_table()),
        ("files", file_table()),
        ("hardware", hardware_table()),
    ]
}

/// Defaults the code holds as constants (the rest are described in words
/// on the page: required, computed, or off).
fn default_of(path: &str) -> Option<String> {
    let d = match path {
        "model.kv_cache.block_size" => v::DEFAULT_BLOCK_SIZE.to_string(),
        "model.kv_cache.gpu_memory_utilization" => v::DEFAULT_GPU_MEMORY_UTILIZATION.to_string(),
        "model.kv_cache.watermark" => v::DEFAULT_WATERMARK.to_string(),
        "scheduler.max_num_sequences" => v::DEFAULT_MAX_NUM_SEQUENCES.to_string(),
        "scheduler.max_batch_tokens" => v::DEFAULT_MAX_BATCH_TOKENS.to_string(),
        "model.weights.bytes_per_parameter" => v::DEFAULT_BYTES_PER_PARAMETER.to_string(),
        "workload.seed" => v::DEFAULT_SEED.to_string(),
        _ => return None,
    };
    Some(d)
}

/// The range of a key path, from the limits table (rows name one path, or
/// several separated by `, `, or a `{a,b,c}` alternative).
fn range_of(path: &str) -> Option<Range> {
    let named = limits::TABLE.iter().find(|l| row_names(l.key).iter().any(|k| k == path)).map(|l| l.range);
    named.or_else(|| grouped_range(path))
}

/// Ranges the limits table states for a group of keys in words: an
/// architecture's sizes, and the parts of a token-length distribution.
fn grouped_range(path: &str) -> Option<Range> {
    if let Some(size) = path.strip_prefix("model.architecture.") {
        return match size {
            "tie_word_embeddings" => None,
            "experts" | "shared_expert_intermediate_size" => Some(limits::ARCH_SIZE_OR_ZERO),
            _ => Some(limits::ARCH_SIZE),
        };
    }
    let rest = ["workload.prompt_tokens", "workload.output_tokens"].iter().find_map(|k| path.strip_prefix(k))?;
    let leaf = rest.rsplit('.').next().unwrap_or("");
    match (rest, leaf) {
        ("" | ".uniform" | ".choice.values", _) | (_, "min" | "max") => Some(limits::TOKENS),
        (_, "mean") => Some(limits::LENGTH_MEAN),
        (_, "std") => Some(limits::LENGTH_STD),
        (".choice.weights", _) => Some(limits::CHOICE_WEIGHT),
        _ => None,
    }
}

/// The exact key paths a limits row names (descriptive rows name none).
fn row_names(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in key.split(", ") {
        // Rows described in words ("token counts: ...", "its uniform
        // bounds") name no key there.
        if key.contains(':') || part.contains(' ') || !part.contains('.') {
            continue;
        }
        match (part.find('{'), part.find('}')) {
            (Some(a), Some(b)) if a < b => {
                for alt in part[a + 1..b].split(',') {
                    out.push(format!("{}{alt}{}", &part[..a], &part[b + 1..]));
                }
            }
            _ => out.push(part.to_string()),
        }
    }
    out
}

fn kind_words(kind: Kind) -> &'static str {
    match kind {
        Kind::Mapping => "a mapping",
        other => other.describe(),
    }
}

/// One row per key path, in path order.
pub fn key_table() -> String {
    let mut s = String::from("| key | holds | default | allowed |\n| --- | --- | --- | --- |\n");
    for (path, kind) in keys::all() {
        let default = default_of(path).map(|d| format!("`{d}`")).unwrap_or_default();
        let allowed = range_of(path).map(|r| r.to_string()).unwrap_or_default();
        s.push_str(&format!("| `{path}` | {} | {default} | {allowed} |\n", kind_words(*kind)));
    }
    s
}

/// The table of input limits: every numeric key, its range and why.
pub fn limit_table() -> String {
    let mut s = String::from("| key | allowed | why |\n| --- | --- | --- |\n");
    for row in limits::readme_rows() {
        s.push_str(&row);
        s.push('\n');
    }
    s
}

/// The bounds of one run, from the constants the driver checks.
pub fn bound_table() -> String {
    let rows = [
        (
            "simulated time".to_string(),
            format!("{} s (about 31.7 years)", thousands(limits::MAX_SIM_SECONDS as u64)),
            "integer nanoseconds saturate at 584 years; no time is ever clipped",
        ),
        (
            "requests issued (also trace rows; an open loop's `rate x duration_s` is checked up front)".into(),
            thousands(limits::MAX_REQUESTS),
            "about 110 bytes a request: 1.1 GB; about 0.4 s a million",
        ),
        ("engine steps".into(), thousands(limits::MAX_STEPS), "about 7 minutes at 0.4 us a step"),
        (
            "the cheapest step (one token, the weights read once, plus `step_overhead_ms`)".into(),
            format!("at least {} us, else the scenario is refused", limits::MIN_STEP_SECONDS * 1e6),
            "a real step's kernel launches take longer; it bounds the steps per simulated second",
        ),
        (
            "a closed loop without `workload.requests`".into(),
            format!("at most {} requests per user at one instant", limits::SAME_INSTANT_ROUNDS),
            "with `think_time_s: 0`, users rejected on arrival would resend at the same instant for ever",
        ),
        (
            "YAML depth".into(),
            format!("{} levels of `[`/`{{` nesting, checked before parsing", limits::MAX_YAML_DEPTH),
            "libyaml is quadratic in nesting: 100,000 levels took 19 s",
        ),
        (
            "file sizes".into(),
            "one limit per kind of file, [below](#input-files)".into(),
            "a read stops at the limit plus one byte, whatever the file is",
        ),
    ];
    let mut s = String::from("| bound | limit | why |\n| --- | --- | --- |\n");
    for (what, limit, why) in rows {
        s.push_str(&format!("| {what} | {limit} | {why} |\n"));
    }
    s
}

/// Every kind of file llmsim reads, its size limit and how it is read
/// ([`crate::input`]).
pub fn file_table() -> String {
    let mut s = String::from("| file | at most | read |\n| --- | --- | --- |\n");
    for kind in crate::input::Kind::ALL {
        s.push_str(&format!("| {} | {} | {} |\n", kind.files(), crate::input::bytes(kind.limit()), kind.reading()));
    }
    s
}

fn by_gpus(x: &RawByGpus, unit: &str) -> String {
    match x {
        RawByGpus::Fixed(v) => format!("{}{unit}", limits::number(*v)),
        RawByGpus::ByCount(pairs) => pairs
            .iter()
            .map(|(gpus, v)| format!("{}{unit} at {gpus}", limits::number(*v)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The profiles shipped in `hardware/` (and built into the binary).
pub fn hardware_table() -> String {
    let mut s = String::from(
        "| name | HBM GiB | bandwidth GB/s | dense 16-bit TFLOPS | dense FP8 TFLOPS | all-reduce (tensor parallelism) |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for (name, text) in super::hardware::BUILTIN {
        let file = format!("hardware/{name}.yml");
        let hw: RawHardware = match super::parse_str(text, Path::new(&file)) {
            Ok(hw) => hw,
            Err(e) => return format!("{file} does not parse: {e}\n"),
        };
        let fp8 = hw.peak_tflops_fp8.map(limits::number).unwrap_or_else(|| "none".into());
        let link = match &hw.interconnect {
            Some(i) => format!(
                "latency {}; bus bandwidth {}",
                by_gpus(&i.latency_us, " us"),
                by_gpus(&i.bandwidth_gbps, " GB/s")
            ),
            None => "none: give `hardware.interconnect` inline".into(),
        };
        s.push_str(&format!(
            "| [`{name}`](../{file}) | {} | {} | {} | {fp8} | {link} |\n",
            limits::number(hw.hbm_gib),
            limits::number(hw.memory_bandwidth_gbps),
            limits::number(hw.peak_tflops)
        ));
    }
    s
}

/// The reference page lacks a marker of a generated part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{PAGE} lacks the marker {0}")]
pub struct MissingMarker(pub String);

/// Replaces every generated part of `page` with its current text. Fails
/// when a marker is missing.
pub fn rewrite(page: &str) -> Result<String, MissingMarker> {
    let mut out = page.to_string();
    for (name, body) in parts() {
        let (open, close) = (format!("<!-- generated:{name} -->\n"), format!("<!-- /generated:{name} -->"));
        let a = out.find(&open).ok_or_else(|| MissingMarker(open.trim_end().to_string()))? + open.len();
        let b = out[a..].find(&close).ok_or_else(|| MissingMarker(close.clone()))? + a;
        out.replace_range(a..b, &body);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_path() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(PAGE)
    }

    #[test]
    fn the_scenario_reference_page_is_what_the_code_generates() {
        let page = std::fs::read_to_string(page_path()).unwrap();
        let fresh = rewrite(&page).unwrap();
        if fresh != page {
            let line = page.lines().zip(fresh.lines()).position(|(a, b)| a != b).unwrap_or(0) + 1;
            panic!(
                "{PAGE} differs from the code at line {line}; rewrite it with\n  cargo test --release -p llmsim-scenario --lib \
                 config::reference -- --ignored write_scenario_reference"
            );
        }
    }

    #[test]
    #[ignore = "rewrites docs/scenario.md; run by name after changing a key, range or profile"]
    fn write_scenario_reference() {
        let page = std::fs::read_to_string(page_path()).unwrap();
        std::fs::write(page_path(), rewrite(&page).unwrap()).unwrap();
    }

    #[test]
    fn every_limit_row_that_names_a_key_names_a_real_one() {
        // A renamed key must not leave its range behind in the table.
        let all = keys::all();
        for l in limits::TABLE {
            for k in row_names(l.key) {
                assert!(all.contains_key(&k), "limits row `{}` names `{k}`, which is not a scenario key", l.key);
            }
        }
    }

    #[test]
    fn ranges_are_found_for_single_and_grouped_rows() {
        assert_eq!(range_of("workload.arrivals.gamma.rate"), Some(limits::RATE));
        assert_eq!(range_of("efficiency.memory"), Some(limits::EFFICIENCY));
        assert_eq!(range_of("model.context_length"), Some(limits::CONTEXT_LENGTH));
        assert_eq!(range_of("workload.arrivals"), None);
        assert_eq!(range_of("model.architecture.experts"), Some(limits::ARCH_SIZE_OR_ZERO));
        assert_eq!(range_of("workload.prompt_tokens.lognormal.std"), Some(limits::LENGTH_STD));
        assert_eq!(range_of("workload.output_tokens.normal.max"), Some(limits::TOKENS));
    }
}
