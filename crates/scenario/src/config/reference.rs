//! The generated parts of `docs/scenario.md`: every key path a scenario
//! accepts (the list `--set` checks against, [`super::keys`]), with what it
//! holds, and its default, allowed range and meaning from its row of
//! [`super::schema`]; the table of input limits; the run bounds;
//! the size limit of each kind of file; and the shipped hardware profiles.
//!
//! The page holds these between `<!-- generated:NAME -->` and
//! `<!-- /generated:NAME -->` markers. A test regenerates each part and
//! fails when the page differs, so the reference cannot drift from the
//! code. After changing a key, a range or a profile, rewrite the page with
//! `cargo test --release -p llmsim-scenario --lib config::reference -- --ignored write_scenario_reference`.

use std::path::Path;

use super::keys::{self, Kind};
use super::limits;
use super::raw::{RawByGpus, RawHardware};
use super::schema;
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

fn kind_words(kind: Kind) -> &'static str {
    match kind {
        Kind::Mapping => "a mapping",
        other => other.describe(),
    }
}

/// One row per key path, in path order, from its row of [`schema`].
pub fn key_table() -> String {
    let mut s = String::from("| key | holds | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n");
    for (path, kind) in keys::all() {
        let Some(row) = schema::row_of(path) else {
            s.push_str(&format!("| `{path}` | {} | | | (no row in config/schema.rs) |\n", kind_words(*kind)));
            continue;
        };
        s.push_str(&format!(
            "| `{path}` | {} | {} | {} | {} |\n",
            kind_words(*kind),
            row.unset.shown(),
            row.allowed(),
            row.doc
        ));
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
            "requests issued by a run that keeps every request's record (`run --requests-csv`), and trace rows".into(),
            thousands(limits::MAX_REQUESTS),
            "about 104 bytes a request: 1.04 GB; about 3 s a million with the CSV written",
        ),
        (
            "requests issued by any other run (`workload.requests`; an open loop's `rate x duration_s` is checked up front)"
                .into(),
            thousands(limits::MAX_SUMMARY_REQUESTS),
            "no record outlives its request: memory flat; about 4 hours at a fleet's 70,000 a second",
        ),
        ("engine steps".into(), thousands(limits::MAX_STEPS), "about an hour at 0.4 us a step"),
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
        "| name | HBM GiB | bandwidth GB/s | dense 16-bit TFLOPS | dense FP8 TFLOPS | dense FP4 TFLOPS | all-reduce (tensor parallelism) |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (name, text) in super::hardware::BUILTIN {
        let file = format!("hardware/{name}.yml");
        let hw: RawHardware = match super::parse_str(text, Path::new(&file)) {
            Ok(hw) => hw,
            Err(e) => return format!("{file} does not parse: {e}\n"),
        };
        let fp8 = hw.peak_tflops_fp8.map(limits::number).unwrap_or_else(|| "none".into());
        let fp4 = hw.peak_tflops_fp4.map(limits::number).unwrap_or_else(|| "none".into());
        let link = match &hw.interconnect {
            Some(i) => format!(
                "latency {}; bus bandwidth {}",
                by_gpus(&i.latency_us, " us"),
                by_gpus(&i.bandwidth_gbps, " GB/s")
            ),
            None => "none: give `hardware.interconnect` inline".into(),
        };
        s.push_str(&format!(
            "| [`{name}`](../{file}) | {} | {} | {} | {fp8} | {fp4} | {link} |\n",
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
}
