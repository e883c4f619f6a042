//! Fuzzing the inputs (docs/development.md, "Fuzzing"): property tests of the config, number and
//! trace parsers (proptest), a mutation harness over the shipped scenarios,
//! hardware profiles, sweep files and trace CSVs driving `run`, `explain`,
//! `sweep`, `capacity` and `trace`, and the corpus of cases that once hung,
//! aborted or printed a wrong number (`fuzz_corpus/`).
//!
//! The oracle: every case ends with exit 0 or 2, never a panic, an abort,
//! a kill by the time or memory guard, or a printed NaN/infinity/saturated
//! clock. Test runs use a bounded slice; `LLMSIM_FUZZ_CASES=N` runs N
//! mutation cases (and N proptest cases per property) and
//! `LLMSIM_FUZZ_SEED=S` starts the mutations elsewhere (docs/development.md, "Fuzzing").
//! A failing mutation case is written to `target/fuzz-failures/` with the
//! command that failed, ready to be added to `fuzz_corpus/`.

use std::path::{Path, PathBuf};

use llmsim_core::engine::Engine;
use llmsim_planner::run_driver::{RunLimits, Setup, SimError, drive};
use llmsim_planner::sim::Single;
use llmsim_planner::workload::AnySource;
use llmsim_scenario::config::keys::{self, Kind};
use llmsim_scenario::config::{self, Override, limits};
use llmsim_scenario::trace as trace_csv;
use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::*;

/// Cases of the bounded slice unless `LLMSIM_FUZZ_CASES` says otherwise.
pub(crate) fn cases(default: u32) -> u32 {
    std::env::var("LLMSIM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub(crate) fn seed() -> u64 {
    std::env::var("LLMSIM_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x1155_0009)
}

fn config(default: u32) -> ProptestConfig {
    ProptestConfig { cases: cases(default), failure_persistence: None, ..ProptestConfig::default() }
}

/// Words a message must never show: internal type names.
pub(crate) const LEAKS: [&str; 6] =
    ["Value::Tagged", "struct Raw", "RawScenario", "RawWorkload", "expected i64", "expected f64"];

fn assert_user_words(msg: &str) {
    for leak in LEAKS {
        assert!(!msg.contains(leak), "leaks {leak:?}: {msg}");
    }
    assert!(msg.len() < 2_000, "a message of {} bytes: {}", msg.len(), &msg[..300]);
}

/// A string of arbitrary characters, YAML punctuation made likely.
fn wild_text(max: usize) -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        3 => proptest::sample::select(vec![
            ':', ' ', '\n', '-', '[', ']', '{', '}', ',', '"', '\'', '#', '!', '&', '*', '|', '>', '0', '1', '9', '.',
            'e', 'x', '_', '~'
        ]),
        1 => any::<char>(),
    ];
    proptest::collection::vec(ch, 0..max).prop_map(|v| v.into_iter().collect())
}

/// Edge spellings of numbers and not-quite numbers.
const EDGE_VALUES: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "0.5",
    "2.5",
    "1e300",
    "-1e300",
    "1e-300",
    "1e-9",
    "1e9",
    "1e400",
    ".nan",
    ".inf",
    "-.inf",
    "0x7fffffffffffffff",
    "0xffffffffffffffff",
    "99999999999999999999999",
    "4294967295",
    "4294967296",
    "1000000000",
    "10000001",
    "1_000",
    "\"12\"",
    "~",
    "[]",
    "{}",
    "0o17",
    "0x1E",
    "true",
    "0123",
    "-0",
    "1e15",
    "65537",
];

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(EDGE_VALUES).prop_map(str::to_string),
        1 => any::<f64>().prop_map(|x| format!("{x:?}")),
        1 => any::<f64>().prop_map(|x| format!("{x:e}")),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| format!("0x{n:x}")),
        1 => (1u32..100_000).prop_map(|n| n.to_string()),
    ]
}

fn base_text() -> String {
    std::fs::read_to_string(repo("scenarios/base.yml")).expect("base.yml")
}

/// Validates text as a scenario file, in-process.
fn load_text(text: &str) -> Result<config::Scenario, config::ConfigError> {
    let file = Path::new("fuzz.yml");
    let raw = config::parse_str(text, file)?;
    config::validate::scenario(raw, file)
}

/// Every numeric key's value lies in its documented range.
fn assert_in_limits(s: &config::Scenario) {
    let h = &s.hardware;
    assert!(limits::MEMORY_BANDWIDTH_GBPS.contains(h.memory_bandwidth_gbps), "{h:?}");
    assert!(limits::PEAK_TFLOPS.contains(h.peak_tflops) && limits::HBM_GIB.contains(h.hbm_gib), "{h:?}");
    assert!(s.model.weights.parameters_billions.is_none_or(|p| limits::PARAMETERS_BILLIONS.contains(p)));
    assert!(limits::CONTEXT_LENGTH.contains(f64::from(s.model.context_length)));
    assert!(limits::EFFICIENCY.contains(s.efficiency.compute) && limits::EFFICIENCY.contains(s.efficiency.memory));
    assert!(s.workload.requests.is_none_or(|n| limits::REQUESTS.contains(n as f64)));
    assert!(s.workload.duration_s.is_none_or(|d| limits::DURATION_S.contains(d)));
    assert!(s.engine_config().cost.step(1, 1).total_s >= limits::MIN_STEP_SECONDS);
}

/// Runs a validated scenario within small limits: it must end, with the
/// invariants the engine checks itself.
fn run_small(s: &config::Scenario) -> Result<(), SimError> {
    let mut engine = Engine::new(s.engine_config());
    let mut source = AnySource::new(s);
    let limits = RunLimits { max_requests: 2_000, max_steps: 20_000, ..RunLimits::default() };
    let setup = Setup { limits, ..Setup::default() };
    drive(
        Single::new(&mut engine),
        &mut source,
        &mut (),
        &setup,
        |_, e, _| {
            if let Err(msg) = e.check_invariants() {
                panic!("engine invariant broken: {msg}");
            }
        },
        &mut |_| {},
    )
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn arbitrary_text_as_a_scenario_is_refused_in_user_words_or_accepted(
        text in prop_oneof![wild_text(300), (0usize..40, wild_text(60)).prop_map(|(line, junk)| {
            let base = base_text();
            let mut lines: Vec<&str> = base.lines().collect();
            let i = line % lines.len();
            lines[i] = &junk;
            lines.join("\n")
        })]
    ) {
        match load_text(&text) {
            Ok(s) => { assert_in_limits(&s); let _ = run_small(&s); }
            Err(e) => assert_user_words(&e.to_string()),
        }
    }

    #[test]
    fn any_value_of_any_numeric_key_is_refused_with_its_key_or_kept_in_range(
        key in proptest::sample::select(
            keys::all().iter().filter(|(_, k)| matches!(k, Kind::Number | Kind::Integer)).map(|(p, _)| p.clone()).collect::<Vec<_>>()
        ),
        value in number_text(),
    ) {
        let base = repo("scenarios/base.yml");
        let mut overrides = Vec::new();
        // A key inside a one-key enum needs that kind: give its siblings.
        if let Some(kind) = key.strip_prefix("workload.arrivals.").and_then(|r| r.split('.').next()) {
            let whole = match kind {
                "poisson" | "constant" => format!("{{{kind}: {{rate: 5}}}}"),
                "gamma" => "{gamma: {rate: 5, burstiness: 1}}".into(),
                _ => "{closed: {concurrency: 2, think_time_s: 0}}".into(),
            };
            overrides.push(Override::parse(&format!("workload.arrivals={whole}")).unwrap());
        }
        if let Some(rest) = key.strip_prefix("workload.prompt_tokens.") {
            let kind = rest.split('.').next().unwrap();
            let whole = match kind {
                "uniform" => "{uniform: [1, 9]}".to_string(),
                "choice" => "{choice: {values: [1, 2]}}".to_string(),
                "exponential" => "{exponential: {mean: 9}}".to_string(),
                _ => format!("{{{kind}: {{mean: 9, std: 2}}}}"),
            };
            overrides.push(Override::parse(&format!("workload.prompt_tokens={whole}")).unwrap());
        }
        match Override::parse(&format!("{key}={value}")) {
            Err(e) => assert_user_words(&e.to_string()),
            Ok(o) => {
                overrides.push(o);
                match config::load_scenario_with(&base, &overrides) {
                    Ok(s) => { assert_in_limits(&s); let _ = run_small(&s); }
                    Err(e) => assert_user_words(&e.to_string()),
                }
            }
        }
    }

    #[test]
    fn a_real_number_reads_the_same_however_it_is_spelled_in_a_file_and_in_set(x in 1e-6f64..1e9) {
        let base = base_text();
        for spelled in [format!("{x:?}"), format!("{x:e}"), format!("{x:E}")] {
            let s = load_text(&base.replace("rate: 20", &format!("rate: {spelled}"))).unwrap();
            let o = Override::parse(&format!("workload.arrivals.poisson.rate={spelled}")).unwrap();
            let t = config::load_scenario_with(&repo("scenarios/base.yml"), &[o]).unwrap();
            for got in [&s.workload.arrivals, &t.workload.arrivals] {
                prop_assert_eq!(got, &config::Arrivals::Poisson { rate: x });
            }
        }
    }

    #[test]
    fn a_whole_number_reads_the_same_in_decimal_hex_octal_and_float(n in 1u64..=10_000_000) {
        let base = base_text();
        for spelled in [n.to_string(), format!("0x{n:x}"), format!("0o{n:o}"), format!("{n}.0"), format!("{:e}", n as f64)] {
            let s = load_text(&base.replace("requests: 2000", &format!("requests: {spelled}"))).unwrap();
            prop_assert_eq!(s.workload.requests, Some(n), "{}", spelled);
            let o = Override::parse(&format!("workload.requests={spelled}")).unwrap();
            let t = config::load_scenario_with(&repo("scenarios/base.yml"), &[o]).unwrap();
            prop_assert_eq!(t.workload.requests, Some(n), "{}", spelled);
        }
    }

    #[test]
    fn trace_csv_rows_are_refused_by_line_or_read_back_exactly(
        rows in proptest::collection::vec((number_text(), number_text(), number_text()), 0..12),
        header in proptest::sample::select(vec![
            "arrival_s,prompt_tokens,output_tokens", "id,arrival_s,prompt_tokens,output_tokens,x",
            "arrival_s,prompt_tokens", "",
        ]),
    ) {
        let mut text = format!("{header}\n");
        for (a, p, o) in &rows {
            text.push_str(&format!("{a},{p},{o}\n"));
        }
        let file = Path::new("fuzz.csv");
        match trace_csv::parse(&text, file) {
            Err(e) => assert_user_words(&e.to_string()),
            Ok(parsed) => {
                prop_assert!(!parsed.is_empty());
                for w in parsed.windows(2) {
                    prop_assert!(w[0].arrival <= w[1].arrival);
                }
                for r in &parsed {
                    prop_assert!(r.prompt >= 1 && r.output >= 1);
                    prop_assert!(limits::ARRIVAL_S.contains(r.arrival.as_secs_f64()));
                }
                let mut out = Vec::new();
                trace_csv::write(&mut out, &parsed).unwrap();
                let again = trace_csv::parse(std::str::from_utf8(&out).unwrap(), file).unwrap();
                prop_assert_eq!(again, parsed);
            }
        }
    }

    #[test]
    fn any_set_argument_parses_or_says_why(text in wild_text(80)) {
        if let Err(e) = Override::parse_checked(&text) {
            assert_user_words(&e.to_string());
        }
    }
}

/// A text mutation of a YAML or CSV file.
pub(crate) fn mutate(text: &str, rng: &mut ChaCha8Rng, csv: bool) -> (String, String) {
    let lines: Vec<&str> = text.lines().collect();
    let pick_line = |rng: &mut ChaCha8Rng| rng.random_range(0..lines.len().max(1));
    let numbers: Vec<(usize, usize)> = {
        let mut spans = Vec::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
                spans.push((start, i));
            } else {
                i += 1;
            }
        }
        spans
    };
    match rng.random_range(0..10) {
        0..=3 if !numbers.is_empty() => {
            let (a, b) = numbers[rng.random_range(0..numbers.len())];
            let v = EDGE_VALUES[rng.random_range(0..EDGE_VALUES.len())];
            let v = if csv { v.trim_matches('"') } else { v };
            (format!("{}{}{}", &text[..a], v, &text[b..]), format!("number {} -> {v}", &text[a..b]))
        }
        4 => {
            let i = pick_line(rng);
            let mut l = lines.clone();
            if !l.is_empty() {
                l.remove(i);
            }
            (l.join("\n"), format!("delete line {}", i + 1))
        }
        5 => {
            let i = pick_line(rng);
            let mut l = lines.clone();
            if let Some(line) = lines.get(i) {
                l.insert(i, line);
            }
            (l.join("\n"), format!("duplicate line {}", i + 1))
        }
        6 => {
            let cut = rng.random_range(0..text.len().max(1));
            let cut = (0..=cut).rev().find(|&c| text.is_char_boundary(c)).unwrap_or(0);
            (text[..cut].to_string(), format!("truncate at byte {cut}"))
        }
        7 => {
            let depth = [10, 65, 5000, 50_000][rng.random_range(0..4)];
            let i = pick_line(rng);
            let mut l: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            if let Some(line) = l.get_mut(i)
                && let Some((k, _)) = line.split_once(':')
            {
                *line = format!("{k}: {}1{}", "[".repeat(depth), "]".repeat(depth));
            }
            (l.join("\n"), format!("nest line {} {depth} deep", i + 1))
        }
        8 if !csv => {
            // The shapes behind past hangs.
            let shapes = [
                "  arrivals: {closed: {concurrency: 3, think_time_s: 0}}\n  duration_s: 5\n",
                "  prompt_tokens: 4294967295\n",
                "  prompt_tokens: {lognormal: {mean: 1e300, std: 1e300}}\n",
                "  arrivals: {gamma: {rate: 10, burstiness: 1e308}}\n",
                "  arrivals: {closed: {concurrency: 1000000000}}\n",
            ];
            let shape = shapes[rng.random_range(0..shapes.len())];
            let mut out = text.to_string();
            if let Some(at) = out.find("\nworkload:\n") {
                out.insert_str(at + "\nworkload:\n".len(), shape);
            }
            (out, format!("insert {}", shape.trim()))
        }
        _ => {
            let at = rng.random_range(0..text.len().max(1));
            let at = (0..=at).rev().find(|&c| text.is_char_boundary(c)).unwrap_or(0);
            let junk = ["\t", "\0", ":", "- ", "{", "]", "\"", "'", "\u{feff}", "é", "!!binary ", "*x", "&x "];
            let j = junk[rng.random_range(0..junk.len())];
            (format!("{}{}{}", &text[..at], j, &text[at..]), format!("insert {j:?} at byte {at}"))
        }
    }
}

/// A cluster key set to an edge: the shapes behind past silent wrong
/// figures and aborts (a KV link of 1e-12 GB/s, a fleet of thousands, a
/// shared prefix of 2^32 - 1 tokens), appended under `cluster:` or the
/// workload as the file allows.
pub(crate) fn mutate_cluster(text: &str, rng: &mut ChaCha8Rng) -> (String, String) {
    let shapes = [
        "  kv_transfer: { bandwidth_gbps: 1e-12, latency_ms: 0 }\n",
        "  kv_transfer: { bandwidth_gbps: 1e-10, latency_ms: 1e9 }\n",
        "  replicas: 100000\n",
        "  replicas: 0\n",
        "  router: prefix_affinity\n",
        "  prefill: { replicas: 1e6, router: least_kv }\n",
        "  decode: { replicas: 1, router: round_robin }\n",
        "  autoscale: { max_replicas: 64, target: 1e-9, period_s: 1, scale_up: { pods: 10000 } }\n",
        "  autoscale: { min_replicas: 3, max_replicas: 2, target: 1 }\n",
        "  autoscale: { max_replicas: 3, target: 1e9, tolerance: 0, scale_down: { stabilization_s: 0, percent: 1e4 } }\n",
        "  autoscale: { max_replicas: 4, target: 0.5, signal: ttft_p99_ms, window_s: 1, cold_start: { load_gbps: 0.001 } }\n",
        "  timeline: { window_s: 1, slo: { ttft_p99_ms: 0, itl_p50_ms: 1e9 } }\n",
    ];
    let workload = [
        "  shared_prefix: { tokens: 4294967295, count: 3 }\n",
        "  arrivals: {closed: {concurrency: 64, think_time_s: 0}}\n  duration_s: 3\n",
        "  arrivals: {poisson: {rate: 1e9}}\n",
    ];
    let mut out = text.to_string();
    if rng.random_range(0..2) == 0 && out.contains("\ncluster:\n") {
        let shape = shapes[rng.random_range(0..shapes.len())];
        let at = out.find("\ncluster:\n").unwrap() + "\ncluster:\n".len();
        out.insert_str(at, shape);
        (out, format!("cluster: insert {}", shape.trim()))
    } else if out.contains("\nworkload:\n") {
        let shape = workload[rng.random_range(0..workload.len())];
        let at = out.find("\nworkload:\n").unwrap() + "\nworkload:\n".len();
        out.insert_str(at, shape);
        (out, format!("workload: insert {}", shape.trim()))
    } else {
        let shape = shapes[rng.random_range(0..shapes.len())];
        (format!("{out}\ncluster:\n{shape}"), format!("append cluster: {}", shape.trim()))
    }
}

/// How a mutated scenario would run, judged in-process within small
/// limits: a workload that needs more than those is valid but long, and
/// only `explain` runs it through the binary.
#[derive(Debug, PartialEq)]
enum Pre {
    Invalid,
    Small,
    Big,
}

fn precheck(file: &Path, sets: &[&str]) -> Pre {
    let overrides: Result<Vec<Override>, _> = sets.iter().map(|s| Override::parse(s)).collect();
    let Ok(overrides) = overrides else { return Pre::Invalid };
    match config::load_scenario_with(file, &overrides) {
        Err(_) => Pre::Invalid,
        Ok(s) => match run_small(&s) {
            Ok(()) => Pre::Small,
            Err(SimError::Stalled { progress, .. }) if progress.requests < 2_000 => Pre::Small,
            Err(_) => Pre::Big,
        },
    }
}

/// The shipped files the harness mutates.
struct Seeds {
    scenarios: Vec<PathBuf>,
    hardware: Vec<PathBuf>,
    sweeps: Vec<PathBuf>,
    /// Clusters (replicas, routers, disaggregation) and deployments (real
    /// architectures, TP, overheads): the cluster, capacity and
    /// disaggregated paths.
    fleets: Vec<PathBuf>,
}

fn shipped() -> Seeds {
    let yml = |dir: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(repo(dir))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yml"))
            .collect();
        v.sort();
        v
    };
    let mut scenarios = vec![repo("scenarios/base.yml")];
    scenarios.extend(yml("scenarios/workloads"));
    scenarios.extend(yml("scenarios/models"));
    scenarios.extend(yml("scenarios/experiments/bases"));
    scenarios.push(repo("scenarios/sweeps/chat-h100.yml"));
    let sweeps = vec![repo("scenarios/sweeps/rate-by-budget.yml"), repo("scenarios/sweeps/hardware.yml")];
    let mut fleets = yml("scenarios/clusters");
    fleets.extend(yml("scenarios/deployments"));
    Seeds { scenarios, hardware: yml("hardware"), sweeps, fleets }
}

/// One mutation case: files in a temp dir and the command to run.
struct Case {
    dir: tempfile::TempDir,
    args: Vec<String>,
    what: String,
    pre: Pre,
}

fn make_case(i: u64, seeds: &Seeds) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed() ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let dir = tempdir();
    let d = dir.path();
    let kind = rng.random_range(0..13);
    let (file, what, sets): (PathBuf, String, Vec<String>) = if kind >= 10 {
        // A cluster or deployment scenario, mutated, with the cluster shapes
        // behind past silent wrong figures made likely.
        let src = &seeds.fleets[rng.random_range(0..seeds.fleets.len())];
        let text = std::fs::read_to_string(src).unwrap();
        let name = src.file_name().unwrap().to_string_lossy().to_string();
        let (mutated, how) = if kind == 12 { mutate_cluster(&text, &mut rng) } else { mutate(&text, &mut rng, false) };
        (write(d, &name, &mutated), format!("{name}: {how}"), Vec::new())
    } else if kind < 6 {
        // A scenario (and the trace CSV next to it, if it has one).
        let src = &seeds.scenarios[rng.random_range(0..seeds.scenarios.len())];
        let text = std::fs::read_to_string(src).unwrap();
        let name = src.file_name().unwrap().to_string_lossy().to_string();
        let (mutated, how) = mutate(&text, &mut rng, false);
        let path = write(d, &name, &mutated);
        if text.contains("trace-replay.csv") {
            let csv = std::fs::read_to_string(repo("scenarios/workloads/trace-replay.csv")).unwrap();
            write(d, "trace-replay.csv", &csv);
        }
        (path, format!("{name}: {how}"), Vec::new())
    } else if kind < 7 {
        // The trace CSV, replayed by its scenario.
        let csv = std::fs::read_to_string(repo("scenarios/workloads/trace-replay.csv")).unwrap();
        let (mutated, how) = mutate(&csv, &mut rng, true);
        write(d, "trace-replay.csv", &mutated);
        let yml = std::fs::read_to_string(repo("scenarios/workloads/trace-replay.yml")).unwrap();
        (write(d, "trace-replay.yml", &yml), format!("trace-replay.csv: {how}"), Vec::new())
    } else if kind < 8 {
        // A hardware profile, named by a scenario next to it.
        let src = &seeds.hardware[rng.random_range(0..seeds.hardware.len())];
        let (mutated, how) = mutate(&std::fs::read_to_string(src).unwrap(), &mut rng, false);
        write(d, "hardware/fuzzhw.yml", &mutated);
        let base = base_text();
        let start = base.find("hardware:").unwrap();
        let end = base.find("model:").unwrap();
        let text = format!("{}hardware: fuzzhw\n{}", &base[..start], &base[end..]);
        (write(d, "s.yml", &text), format!("hardware/{}: {how}", src.file_name().unwrap().to_string_lossy()), vec![])
    } else if kind < 9 {
        // A sweep file (with its base next to it).
        let src = &seeds.sweeps[rng.random_range(0..seeds.sweeps.len())];
        let (mutated, how) = mutate(&std::fs::read_to_string(src).unwrap(), &mut rng, false);
        let base = std::fs::read_to_string(repo("scenarios/sweeps/chat-h100.yml")).unwrap();
        write(d, "chat-h100.yml", &base);
        let name = src.file_name().unwrap().to_string_lossy().to_string();
        (write(d, &name, &mutated), format!("{name}: {how}"), Vec::new())
    } else {
        // An unmutated scenario with an edge value set on a numeric key.
        let src = &seeds.scenarios[rng.random_range(0..seeds.scenarios.len())];
        let numeric: Vec<&String> =
            keys::all().iter().filter(|(_, k)| matches!(k, Kind::Number | Kind::Integer)).map(|(p, _)| p).collect();
        let key = numeric[rng.random_range(0..numeric.len())];
        let v = EDGE_VALUES[rng.random_range(0..EDGE_VALUES.len())];
        let name = src.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(src).unwrap();
        if text.contains("trace-replay.csv") {
            write(
                d,
                "trace-replay.csv",
                &std::fs::read_to_string(repo("scenarios/workloads/trace-replay.csv")).unwrap(),
            );
        }
        // Every third such case under TensorRT-LLM's scheduler, and every
        // third with speculative decoding (its keys first, so an edge value
        // on one of them wins), chosen by the case's number, so the random
        // draws stay those of before.
        let mut sets = vec![format!("{key}={v}")];
        match i % 3 {
            0 => {
                // Under each capacity policy, with chunked prefill off and
                // under both chunking policies.
                sets.push("engine=trtllm".into());
                let capacity = ["GUARANTEED_NO_EVICT", "MAX_UTILIZATION", "STATIC_BATCH"][(i / 3 % 3) as usize];
                sets.push(format!("scheduler.capacity_scheduler_policy={capacity}"));
                match i / 9 % 3 {
                    0 => {}
                    1 => sets.push("scheduler.context_chunking_policy=FIRST_COME_FIRST_SERVED".into()),
                    _ => sets.push("scheduler.context_chunking_policy=EQUAL_PROGRESS".into()),
                }
            }
            1 => {
                let method = ["ngram", "eagle", "draft_model"][(i / 3 % 3) as usize];
                let mut spec = vec![
                    format!("speculative.method={method}"),
                    "speculative.num_speculative_tokens=3".to_string(),
                    "speculative.acceptance_rate=0.7".to_string(),
                ];
                if method == "draft_model" {
                    spec.push("speculative.draft_parameters_billions=0.5".into());
                    spec.push("speculative.draft_kv_bytes_per_token=4096".into());
                }
                spec.append(&mut sets);
                sets = spec;
            }
            // And every sixth with request classes under the priority
            // policy (docs/priorities.md), every other sixth with a KV
            // offload tier below prefix caching (docs/offload.md).
            _ if !(i / 3).is_multiple_of(2) => {
                let mut off = vec![
                    "model.kv_cache.prefix_caching=true".to_string(),
                    "model.kv_cache.offload={cpu: {gib: 16, bandwidth_gbps: 50}, disk: {gib: 200, bandwidth_gbps: 5}}"
                        .to_string(),
                ];
                off.append(&mut sets);
                sets = off;
            }
            _ => {
                let mut prio = vec![
                    "scheduler.policy=priority".to_string(),
                    "workload.classes=[{name: chat, weight: 1, priority: -1}, {name: batch, weight: 3, priority: 2}]"
                        .to_string(),
                ];
                // Half of them with LoRA adapters on a dense model
                // (docs/lora.md).
                if (i / 6).is_multiple_of(2) {
                    prio.push("model=llama-3.1-8b".to_string());
                    prio.push("lora={count: 8, max_loras: 2, zipf: 1, base_weight: 1}".to_string());
                }
                prio.append(&mut sets);
                sets = prio;
            }
        }
        (write(d, &name, &text), format!("{name} --set {}", sets.join(" --set ")), sets)
    };
    let is_sweep_file = what.starts_with("rate-by-budget") || what.starts_with("hardware.yml");
    let set_refs: Vec<&str> = sets.iter().map(String::as_str).collect();
    let command = ["run", "explain", "trace", "sweep", "capacity"][rng.random_range(0..5)];
    let command = if is_sweep_file { "sweep" } else { command };
    let mut args = vec![command.to_string(), file.display().to_string()];
    for s in &sets {
        args.extend(["--set".to_string(), s.clone()]);
    }
    let pre = if is_sweep_file {
        sweep_precheck(&file)
    } else if command == "capacity" {
        let mut small = set_refs.clone();
        small.extend(["workload.requests=100", "workload.duration_s=null"]);
        precheck(&file, &small)
    } else {
        precheck(&file, &set_refs)
    };
    match command {
        "trace" => args.extend(["-o".into(), "-".into()]),
        "capacity" if kind >= 10 => {
            // A fleet: the replica count for a target rate, found by the fleet
            // or split search with its sustained-rate test.
            let rate = ["5", "40", "1e-3", "1e9", "0"][rng.random_range(0..5)];
            args.extend(["--slo".into(), "ttft_p99_ms=500".into(), "--requests".into(), "100".into()]);
            args.extend(["--target-rate".into(), rate.into()]);
        }
        "capacity" => args.extend(["--slo".into(), "ttft_p99_ms=500".into(), "--requests".into(), "100".into()]),
        "sweep" if !is_sweep_file => {
            let v = EDGE_VALUES[rng.random_range(0..EDGE_VALUES.len())];
            args.extend(["--set".into(), format!("scheduler.max_batch_tokens=512,{v}")]);
        }
        _ => {}
    }
    if pre == Pre::Big {
        args[0] = "explain".into();
        args.retain(|a| a != "-o" && a != "-");
        if let Some(i) = args.iter().position(|a| a == "--slo") {
            args.truncate(i);
        }
        if let Some(i) = args.iter().position(|a| a.starts_with("scheduler.max_batch_tokens=512,")) {
            args.truncate(i - 1);
        }
    }
    Case { dir, args, what, pre }
}

/// A sweep file whose points are all small enough to run.
fn sweep_precheck(file: &Path) -> Pre {
    let Ok(f) = llmsim_analysis::sweep::file::load(file) else { return Pre::Invalid };
    let mut n = 1usize;
    for a in &f.axes {
        n = n.saturating_mul(a.values.len());
    }
    if n > 40 {
        return Pre::Big;
    }
    let mut worst = Pre::Small;
    for i in 0..n {
        let mut rest = i;
        let mut overrides = f.fixed.clone();
        for a in f.axes.iter().rev() {
            overrides.push(a.at(rest % a.values.len()));
            rest /= a.values.len();
        }
        let sets: Vec<String> = overrides.iter().map(|o| format!("{}={}", o.key(), value_text(&o.value))).collect();
        let refs: Vec<&str> = sets.iter().map(String::as_str).collect();
        match precheck(&f.base, &refs) {
            Pre::Big => return Pre::Big,
            Pre::Invalid => worst = Pre::Invalid,
            Pre::Small => {}
        }
    }
    worst
}

fn value_text(v: &serde_yaml::Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// What went wrong with a case, if anything.
fn judge(out: &Out, case: &Case) -> Option<String> {
    let code = out.code();
    let err = out.stderr();
    if code == -1 {
        return Some(format!("killed (hang or out of memory; precheck {:?})", case.pre));
    }
    // capacity exits 1 when no rate meets the SLOs: the work failed, as
    // documented, not the input.
    // Likewise a fleet or split search that no replica count meets.
    let unreachable = case.args[0] == "capacity"
        && code == 1
        && [
            "no rate meets every SLO",
            "no fleet meets every SLO",
            "no prefill:decode split of the GPUs meets every SLO",
        ]
        .iter()
        .any(|m| err.contains(m));
    if code != 0 && code != 2 && !unreachable {
        return Some(format!("exit {code}"));
    }
    if err.contains("panicked") {
        return Some("panicked".into());
    }
    if code == 2 {
        if !err.starts_with("llmsim: error: ") && !err.contains("\nllmsim: error: ") {
            return Some("exit 2 without an error message".into());
        }
        for leak in LEAKS {
            if err.contains(leak) {
                return Some(format!("message leaks {leak:?}"));
            }
        }
        if err.len() > 3_000 {
            return Some(format!("a {}-byte message", err.len()));
        }
    }
    if code == 0 && case.args[0] == "run" {
        let s = out.stdout();
        // A saturated clock shows as 18446744073.7 s (a seed may be 2^64 - 1).
        for bad in ["NaN", " inf ", "18446744073."] {
            if s.contains(bad) {
                return Some(format!("printed {bad:?}"));
            }
        }
        // A run that ends with exit 0 accounts for its requests: none
        // completed and none rejected is a silent failure (a stalled link,
        // a lost request), not a result.
        if s.contains("requests   0 completed, 0 rejected") {
            return Some("exit 0 with no request completed or rejected".into());
        }
    }
    None
}

#[test]
fn mutations_of_the_shipped_files_end_with_exit_0_or_2_under_the_guard() {
    let seeds = shipped();
    let n = u64::from(cases(240));
    let mut failures = Vec::new();
    let mut tally = std::collections::BTreeMap::<String, u32>::new();
    for i in 0..n {
        let case = make_case(i, &seeds);
        let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        let out = TestCommand::new(&args).current_dir(case.dir.path()).bounded(60, 4096);
        *tally.entry(format!("{} exit {}", case.args[0], out.code())).or_default() += 1;
        if let Some(why) = judge(&out, &case) {
            let keep = repo("target/fuzz-failures").join(format!("case-{i}"));
            let _ = std::fs::create_dir_all(&keep);
            for e in std::fs::read_dir(case.dir.path()).into_iter().flatten().flatten() {
                let _ = std::fs::copy(e.path(), keep.join(e.file_name()));
            }
            let _ = std::fs::write(keep.join("command.txt"), case.args.join(" "));
            failures.push(format!("case {i} ({}): llmsim {}: {why}\n{}", case.what, case.args.join(" "), out.stderr()));
        }
    }
    eprintln!("{n} mutation cases: {tally:?}");
    assert!(
        failures.is_empty(),
        "{} of {n} cases failed (kept in target/fuzz-failures):\n{}",
        failures.len(),
        failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n---\n")
    );
    // The slice exercised both outcomes of several commands.
    let seen = |c: &str, code: i32| tally.get(&format!("{c} exit {code}")).copied().unwrap_or(0);
    assert!(seen("explain", 0) > 0 && seen("explain", 2) > 0 && seen("run", 2) > 0, "{tally:?}");
    // Each command ran to an answer at least once: a slice whose every case
    // of a command is refused (say, by a raised minimum of a flag the
    // harness passes) tests nothing of it.
    // (Sweeps: a mutated sweep file rarely stays valid, about 1 in 30;
    // judged only when the slice ran enough of them.)
    let sweeps = seen("sweep", 0) + seen("sweep", 2);
    for c in ["run", "trace", "capacity", "sweep"] {
        if c != "sweep" || sweeps >= 100 {
            assert!(seen(c, 0) + seen(c, 1) > 0, "no `{c}` case ran to an answer: {tally:?}");
        }
    }
}

/// The corpus: each file in `fuzz_corpus/` once hung, aborted, printed a
/// wrong number or an unreadable message. Its first line is
/// `# llmsim ARGS`, with `{}` for the file's path; comment lines after it
/// may say `# expect: N` (0 or 2) and `# stderr: TEXT` (stderr has it).
#[test]
fn every_corpus_case_ends_quickly_with_exit_0_or_2() {
    let dir = repo("tests/integration/fuzz_corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fuzz_corpus/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "the corpus has {} cases", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let first = text.lines().next().unwrap_or("");
        let args =
            first.strip_prefix("# llmsim ").unwrap_or_else(|| panic!("{}: no `# llmsim ARGS` line", file.display()));
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
        let expect = header.iter().find_map(|l| l.strip_prefix("# expect: ")).map(|c| c.trim().parse::<i32>().unwrap());
        let wanted: Vec<&str> = header.iter().filter_map(|l| l.strip_prefix("# stderr: ")).collect();
        let path = file.display().to_string();
        let args: Vec<String> = shell_words(args).into_iter().map(|a| a.replace("{}", &path)).collect();
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = TestCommand::new(&refs).current_dir(&dir).bounded(60, 4096);
        let code = out.code();
        assert!(code == 0 || code == 2, "{}: llmsim {}\n{}", file.display(), args.join(" "), out.describe());
        assert!(!out.stderr().contains("panicked"), "{}\n{}", file.display(), out.describe());
        if let Some(want) = expect {
            assert_eq!(code, want, "{}: llmsim {}\n{}", file.display(), args.join(" "), out.describe());
        }
        out.stderr_has(&wanted);
        assert_user_words(&out.stderr());
    }
}

/// Splits a command line on spaces, keeping 'single-quoted' words whole.
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}
