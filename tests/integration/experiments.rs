//! Integration tests: `llmsim experiments`, the committed results and the
//! rules every experiment file follows.

use std::path::Path;

use llmsim_analysis::experiments::{self, spec, vars};
use serde_yaml::Value;

use crate::support::*;

/// A small, fast base scenario for spec-validation tests.
const BASE: &str = "\
hardware: { hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989 }
model:
  context_length: 32768
  weights: { parameters_billions: 6.74, bytes_per_parameter: 2 }
  kv_cache: { bytes_per_token: 524288 }
scheduler: { max_batch_tokens: 8192, max_num_sequences: 64 }
workload:
  arrivals: { closed: { concurrency: 4 } }
  requests: 8
  prompt_tokens: 128
  output_tokens: 16
";

/// A valid experiment over [`BASE`]; tests break one piece of it.
const SPEC: &str = "\
title: Small
hypothesis: Decode steps cost the weights plus the KV.
base: bases/base.yml
vary:
  key: workload.arrivals.closed.concurrency
  levels: [1, 2, 4]
metrics: [decode_step_ms, ttft_ms.p50]
let:
  batch: level
predictions:
  - metric: decode_step_ms
    expect: (weights_read_s + batch * (prompt_mean + output_mean / 2) * kv_read_s_per_token) * 1000
    tolerance: 5%
";

/// A directory holding [`BASE`] and the experiment `spec` as `small.yml`.
fn spec_dir(spec: &str) -> tempfile::TempDir {
    let dir = tempdir();
    write(dir.path(), "specs/bases/base.yml", BASE);
    write(dir.path(), "specs/small.yml", spec);
    dir
}

fn run_specs(dir: &Path) -> TestCommand {
    let specs = dir.join("specs");
    let results = dir.join("results");
    TestCommand::new(&["experiments", "--dir"]).arg(specs).arg("--results").arg(results)
}

/// The value at a dotted key path, if any.
fn lookup<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(v, |node, seg| node.get(seg))
}

/// Equal YAML values, numbers compared by value (`0` is `0.0`).
fn same(a: Option<&Value>, b: &Value) -> bool {
    match (a.and_then(Value::as_f64), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == Some(b),
    }
}

#[test]
fn committed_results_are_current() {
    TestCommand::new(&["experiments", "--check"]).ok();
}

/// The experiment files: every `*.yml` directly in `scenarios/experiments/`.
fn experiment_files() -> usize {
    let entries = std::fs::read_dir(repo("scenarios/experiments")).unwrap().flatten();
    entries.filter(|e| e.path().extension().is_some_and(|x| x == "yml")).count()
}

#[test]
fn every_experiment_file_loads_and_has_its_table_and_index_line() {
    let specs = experiments::load_dir(&repo("scenarios/experiments")).unwrap();
    assert_eq!(specs.len(), experiment_files());
    assert!(specs.len() >= 9, "{}", specs.len());
    let index = std::fs::read_to_string(repo("results/README.md")).unwrap();
    for s in &specs {
        assert!(repo(&format!("results/{}.md", s.name)).is_file(), "no table for {}", s.name);
        assert_eq!(index.matches(&format!("]({}.md)", s.name)).count(), 1, "{} in the index", s.name);
    }
}

#[test]
fn every_variant_differs_from_its_base_in_exactly_the_varied_key() {
    for s in experiments::load_dir(&repo("scenarios/experiments")).unwrap() {
        let base = vars::effective_value(&s.base);
        for row in &s.rows {
            let variant = vars::effective_value(&row.scenario);
            let changed = vars::differing_paths(&base, &variant);
            let what = format!("{}: {} = {:?}", s.name, row.key, row.level);
            assert!(changed.iter().all(|p| spec::under(p, &row.key)), "{what} also changes {changed:?}");
            assert!(same(lookup(&variant, &row.key), &row.level), "{what}: the level did not take effect");
            let same_as_base = same(lookup(&base, &row.key), &row.level);
            assert_eq!(changed.is_empty(), same_as_base, "{what}: changed {changed:?}");
        }
    }
}

#[test]
fn output_is_byte_identical_on_one_thread_and_on_several() {
    let dir = tempdir();
    for (threads, out) in [("1", "one"), ("3", "three")] {
        TestCommand::new(&["experiments", "--threads", threads, "--results"]).arg(dir.path().join(out)).ok();
    }
    let names: Vec<_> = std::fs::read_dir(dir.path().join("one")).unwrap().flatten().map(|e| e.file_name()).collect();
    // a table per experiment and the index
    assert_eq!(names.len(), experiment_files() + 1);
    for name in names {
        let one = std::fs::read(dir.path().join("one").join(&name)).unwrap();
        let three = std::fs::read(dir.path().join("three").join(&name)).unwrap();
        assert!(one == three, "{name:?} differs between 1 and 3 threads");
    }
}

/// A copy of the committed results in a temporary directory.
fn copy_of_results() -> tempfile::TempDir {
    let dir = tempdir();
    for entry in std::fs::read_dir(repo("results")).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

fn check_against(dir: &Path) -> TestCommand {
    TestCommand::new(&["experiments", "--check", "--results"]).arg(dir)
}

#[test]
fn check_passes_on_an_untouched_copy_of_the_results() {
    let dir = copy_of_results();
    let out = check_against(dir.path()).ok();
    let files = format!("is current ({} files)", experiment_files() + 1);
    assert!(out.stdout().contains(&files), "{}", out.describe());
}

#[test]
fn check_names_the_first_differing_line_of_a_modified_results_file() {
    let dir = copy_of_results();
    let file = dir.path().join("05-preemption.md");
    let text = std::fs::read_to_string(&file).unwrap();
    let (n, line) = text.lines().enumerate().find(|(_, l)| l.starts_with("| 0.01 |")).unwrap();
    std::fs::write(&file, text.replacen(line, "| 0.01 | 5 | 6 |", 1)).unwrap();
    check_against(dir.path()).fails_with(1).stderr_has(&[
        &format!("05-preemption.md:{} differs from a fresh run", n + 1),
        "committed: `| 0.01 | 5 | 6 |`",
        &format!("generated: `{line}`"),
        "run `llmsim experiments`",
    ]);
}

#[test]
fn check_fails_on_a_missing_or_stale_results_file() {
    let dir = copy_of_results();
    std::fs::remove_file(dir.path().join("README.md")).unwrap();
    check_against(dir.path()).fails_with(1).stderr_has(&["README.md is missing"]);
    let dir = copy_of_results();
    write(dir.path(), "08-gone.md", "# an experiment that no longer exists\n");
    check_against(dir.path()).fails_with(1).stderr_has(&["08-gone.md is not generated by any experiment"]);
}

#[test]
fn a_valid_spec_writes_its_table_and_an_index() {
    let dir = spec_dir(SPEC);
    let out = run_specs(dir.path()).ok();
    assert!(out.stdout().contains("3 of   3 predictions pass"), "{}", out.describe());
    let table = std::fs::read_to_string(dir.path().join("results/small.md")).unwrap();
    assert!(table.contains("| concurrency | predicted | simulated | error | result |"), "{table}");
    assert!(table.contains("- `batch` = `level`"), "{table}");
    let index = std::fs::read_to_string(dir.path().join("results/README.md")).unwrap();
    assert!(index.contains("| [Small](small.md) | 3/3 pass | Decode steps cost the weights plus the KV. |"), "{index}");
}

#[test]
fn an_unknown_key_in_a_spec_is_an_error_naming_file_line_and_key() {
    let dir = spec_dir(&SPEC.replace("    tolerance: 5%", "    tolerence: 5%"));
    run_specs(dir.path()).fails_with(2).stderr_has(&["small.yml:13: predictions[0]", "unknown field `tolerence`"]);
}

#[test]
fn a_scenario_among_the_experiment_files_is_an_error_saying_where_bases_go() {
    let dir = spec_dir(SPEC);
    write(dir.path(), "specs/stray.yml", BASE);
    run_specs(dir.path()).fails_with(2).stderr_has(&["stray.yml: this is a scenario, not an experiment", "bases/"]);
}

#[test]
fn an_unknown_variable_in_an_expression_is_an_error() {
    let dir = spec_dir(&SPEC.replace("expect: (weights_read_s", "expect: (weights_reed_s"));
    run_specs(dir.path()).fails_with(2).stderr_has(&[
        "small.yml: predictions[0].expect: row 1 (workload.arrivals.closed.concurrency = 1):",
        "unknown variable `weights_reed_s` (did you mean `weights_read_s`?)",
    ]);
}

#[test]
fn a_variable_path_that_is_not_a_scenario_key_is_an_error() {
    let dir = spec_dir(&SPEC.replace("batch: level", "batch: scheduler.max_num_sequencs"));
    run_specs(dir.path()).fails_with(2).stderr_has(&[
        "predictions[0].expect",
        "in let `batch`: `scheduler.max_num_sequencs` is not a key of the scenario",
        "did you mean `scheduler.max_num_sequences`?",
    ]);
}

#[test]
fn an_unknown_metric_is_an_error_with_a_suggestion() {
    let dir =
        spec_dir(&SPEC.replace("metrics: [decode_step_ms, ttft_ms.p50]", "metrics: [decode_step_ms, ttft_ms.p05]"));
    run_specs(dir.path()).fails_with(2).stderr_has(&["metrics[1]: unknown metric `ttft_ms.p05` (did you mean"]);
}

#[test]
fn a_varied_key_that_is_not_a_scenario_key_is_an_error_suggesting_the_nearest() {
    let dir = spec_dir(&SPEC.replace("key: workload.arrivals.closed.concurrency", "key: scheduler.max_batch_tokenz"));
    run_specs(dir.path()).fails_with(2).stderr_has(&[
        "small.yml: vary.key",
        "unknown key path `scheduler.max_batch_tokenz`",
        "did you mean `scheduler.max_batch_tokens`",
    ]);
}

#[test]
fn a_let_must_be_used_and_may_only_use_lets_above_it() {
    let unused = SPEC.replace("  batch: level\n", "  batch: level\n  spare: 2\n");
    run_specs(spec_dir(&unused).path()).fails_with(2).stderr_has(&["let.spare: defined but no prediction uses it"]);
    let order = SPEC.replace("  batch: level\n", "  batch: n\n  n: level\n");
    run_specs(spec_dir(&order).path()).fails_with(2).stderr_has(&["`n` is defined further down in `let`"]);
}

#[test]
fn a_bad_expression_or_tolerance_is_an_error_naming_the_column_or_the_allowed_forms() {
    let syntax = SPEC.replace("expect: (weights_read_s", "expect: ((weights_read_s");
    run_specs(spec_dir(&syntax).path())
        .fails_with(2)
        .stderr_has(&["predictions[0].expect: `((weights", "expected `)`"]);
    let tol = SPEC.replace("tolerance: 5%", "tolerance: five percent");
    run_specs(spec_dir(&tol).path())
        .fails_with(2)
        .stderr_has(&["predictions[0].tolerance: expected a percentage like `5%`"]);
}

#[test]
fn a_wrong_prediction_is_kept_as_a_fail_with_a_prompt_for_its_note() {
    let dir = spec_dir(&SPEC.replace(") * 1000\n", ") * 2000\n"));
    // A FAIL is a result, not an error.
    run_specs(dir.path()).ok();
    let table = std::fs::read_to_string(dir.path().join("results/small.md")).unwrap();
    assert!(table.contains("**Result: 0 of 3 predictions pass.**"), "{table}");
    assert_eq!(table.matches("| **FAIL** |").count(), 3, "{table}");
    assert!(table.contains("## What the misses show\n\n- `decode_step_ms`: _no note yet"), "{table}");
}

#[test]
fn an_expression_nested_too_deeply_is_an_error_not_a_stack_overflow() {
    // 100,000 unary minus signs used to overflow the parser's stack.
    let signs = format!("expect: {}1\n", "-".repeat(100_000));
    let dir = spec_dir(&SPEC.replace(
        "expect: (weights_read_s + batch * (prompt_mean + output_mean / 2) * kv_read_s_per_token) * 1000\n",
        &signs,
    ));
    let out = run_specs(dir.path()).fails_with(2);
    out.stderr_has(&["predictions[0].expect", "(100001 characters): at column 102", "nests more than 100 levels deep"]);
    assert!(out.stderr().len() < 1000, "the error quotes the start of the expression, not all of it");
    // A long flat chain builds a deep tree too (evaluating it recursed as deep).
    let chain = format!("expect: {}1\n", "1 + ".repeat(100_000));
    let dir = spec_dir(&SPEC.replace(
        "expect: (weights_read_s + batch * (prompt_mean + output_mean / 2) * kv_read_s_per_token) * 1000\n",
        &chain,
    ));
    run_specs(dir.path()).fails_with(2).stderr_has(&["predictions[0].expect", "nests more than 100 levels deep"]);
}

#[test]
fn the_documented_verdicts_are_the_generated_ones() {
    // Each row of the table of experiments in docs/experiments.md ends in
    // the verdict the generated index gives (which `experiments --check`
    // keeps current). A row the README still carries must agree too.
    let page = std::fs::read_to_string(repo("docs/experiments.md")).unwrap();
    let readme = std::fs::read_to_string(repo("README.md")).unwrap();
    let index = std::fs::read_to_string(repo("results/README.md")).unwrap();
    let specs = experiments::load_dir(&repo("scenarios/experiments")).unwrap();
    for s in &specs {
        let generated = index
            .lines()
            .find(|l| l.contains(&format!("]({}.md)", s.name)))
            .and_then(|l| l.split(" | ").nth(1))
            .unwrap_or_else(|| panic!("{} is not in the index", s.name));
        let row_of = |text: &str| {
            text.lines().find(|l| l.starts_with('|') && l.contains(&format!("| `{}` |", s.name))).map(str::to_string)
        };
        let row = row_of(&page).unwrap_or_else(|| panic!("{} is not in docs/experiments.md's table", s.name));
        assert!(
            row.trim_end().ends_with(&format!("| {generated} |")),
            "docs/experiments.md: {row}\nindex: {generated}"
        );
        if let Some(row) = row_of(&readme) {
            assert!(row.trim_end().ends_with(&format!("| {generated} |")), "README: {row}\nindex: {generated}");
        }
    }
}

#[test]
fn a_verdict_needs_at_least_two_seeds_and_the_table_says_how_many_ran() {
    run_specs(spec_dir(&format!("{SPEC}seeds: 1\n")).path())
        .fails_with(2)
        .stderr_has(&["small.yml: seeds: 1 is not allowed: from 2 to 100"]);
    let dir = spec_dir(&format!("{SPEC}seeds: 3\n"));
    run_specs(dir.path()).ok();
    let table = std::fs::read_to_string(dir.path().join("results/small.md")).unwrap();
    assert!(table.contains("Every row runs on 3 seeds"), "{table}");
    assert!(table.contains("the whole interval lies within its tolerance"), "{table}");
}
