//! Experiment files: read in two stages like scenarios. `RawSpec` mirrors
//! the YAML (unknown keys are errors); [`load`] checks everything that can
//! be checked before a run (the base loads, every level makes a valid
//! variant that differs from the base in the varied key only, every metric
//! exists, every expression parses and evaluates to a finite number in
//! every row) and computes the predictions, so a run never fails half-way.

use std::path::{Path, PathBuf};

use llmsim_scenario::yaml::Value;
use serde::Deserialize;

use super::expr::{self, Expr};
use super::measure;
use super::vars::{self, Vars, render_flow};
use llmsim_scenario::config::{self, ConfigError, Override, Scenario};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    pub title: String,
    pub hypothesis: String,
    /// The base scenario, relative to the experiment file.
    pub base: String,
    /// One `{key, levels}` mapping, or a list of them (each row still
    /// changes one key of the base).
    pub vary: Value,
    /// Metrics to tabulate for every row.
    pub metrics: Vec<String>,
    /// Show each metric's ratio to the first row too.
    #[serde(default)]
    pub compare_to_first: bool,
    /// Named expressions, in order; each may use the ones above it.
    #[serde(default, rename = "let")]
    pub lets: llmsim_scenario::yaml::Mapping,
    pub predictions: Vec<RawPrediction>,
    /// Observations written after looking at the results.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Seeds every row runs on (default [`SEEDS`]): the base's
    /// `workload.seed` and the next ones.
    pub seeds: Option<i64>,
}

/// Seeds a row runs on unless the file says otherwise.
pub const SEEDS: u32 = 5;
/// The fewest and most seeds a file may ask for: a verdict rests on an
/// interval, which needs two.
pub const SEED_RANGE: (u32, u32) = (2, 100);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSeries {
    pub key: String,
    pub levels: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrediction {
    pub metric: String,
    /// An expression for every row, or a list with one per row.
    pub expect: Value,
    /// `5%` (relative to the prediction) or a number (absolute, in the
    /// metric's unit).
    pub tolerance: Value,
    /// One line on what a miss shows, written after seeing the FAIL.
    pub on_miss: Option<String>,
}

/// A validated experiment, its variants built and its predictions computed.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The file's stem: the results file is `<name>.md`.
    pub name: String,
    pub file: PathBuf,
    pub title: String,
    pub hypothesis: String,
    /// As written in the file.
    pub base_path: String,
    pub base: Scenario,
    /// The varied keys, one per series.
    pub keys: Vec<String>,
    pub rows: Vec<Row>,
    pub metrics: Vec<String>,
    pub compare_to_first: bool,
    pub lets: Vec<Formula>,
    pub predictions: Vec<Prediction>,
    pub notes: Vec<String>,
    /// Seeds every row runs on.
    pub seeds: u32,
}

/// One variant: the base with `key` set to `level`.
#[derive(Clone, Debug)]
pub struct Row {
    pub key: String,
    pub level: Value,
    pub scenario: Scenario,
}

/// A named or anonymous expression and its source text.
#[derive(Clone, Debug)]
pub struct Formula {
    pub name: String,
    pub source: String,
    pub expr: Expr,
}

#[derive(Clone, Debug)]
pub struct Prediction {
    pub metric: String,
    /// One formula for every row, or one per row.
    pub expect: Vec<Formula>,
    pub tolerance: Tolerance,
    pub on_miss: Option<String>,
    /// The predicted value of each row.
    pub values: Vec<f64>,
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Tolerance {
    /// A fraction of the predicted value.
    Relative(f64),
    /// In the metric's unit.
    Absolute(f64),
}

impl Tolerance {
    /// The largest distance from the prediction it allows.
    pub fn limit(&self, predicted: f64) -> f64 {
        match *self {
            Tolerance::Relative(f) => f * predicted.abs(),
            Tolerance::Absolute(a) => a,
        }
    }

    /// The verdict: the whole interval `mean ± half` lies within the
    /// tolerance of the prediction, `|mean - predicted| + half <= limit`.
    /// With `half` the 95% Student-t half-width over seeds, a pass says the
    /// mean over all seeds is within tolerance with 95% confidence, and no
    /// single lucky (or unlucky) seed decides it.
    pub fn allows(&self, predicted: f64, mean: f64, half: f64) -> bool {
        (mean - predicted).abs() + half <= self.limit(predicted)
    }
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Tolerance::Relative(x) => write!(f, "{}%", x * 100.0),
            Tolerance::Absolute(0.0) => write!(f, "exact"),
            Tolerance::Absolute(a) => write!(f, "±{a}"),
        }
    }
}

/// Every `*.yml` file directly in `dir`, sorted by name.
pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| ConfigError::new(dir, "", format!("cannot read the directory: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ConfigError::new(dir, "", "no experiment files (*.yml) in this directory"));
    }
    Ok(files)
}

/// Reads and validates one experiment file.
pub fn load(file: &Path) -> Result<Spec, ConfigError> {
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::Experiment, file)?;
    if looks_like_a_scenario(&text) {
        return Err(ConfigError::new(
            file,
            "",
            "this is a scenario, not an experiment: every *.yml file in the experiments directory is an \
             experiment; put base scenarios in a subdirectory such as bases/",
        ));
    }
    let raw: RawSpec = config::parse_str(&text, file)?;
    let err = |path: &str, msg: String| ConfigError::new(file, path, msg);
    let name = file_name(file)?;
    for (key, text) in [("title", &raw.title), ("hypothesis", &raw.hypothesis)] {
        if text.trim().is_empty() {
            return Err(err(key, "must not be empty".into()));
        }
    }
    let base_file = file.parent().unwrap_or(Path::new("")).join(&raw.base);
    let base = config::load_scenario(&base_file).map_err(|e| err("base", e.to_string()))?;
    let series = series(&raw.vary, file)?;
    let rows = rows(&series, &base_file, &base, file)?;
    let known = measure::names(&base);
    for (i, m) in raw.metrics.iter().enumerate() {
        check_metric(m, &known).map_err(|msg| err(&format!("metrics[{i}]"), msg))?;
    }
    if raw.metrics.is_empty() {
        return Err(err("metrics", "give at least one metric to tabulate".into()));
    }
    let lets = lets(&raw.lets, file)?;
    if raw.predictions.is_empty() {
        return Err(err("predictions", "give at least one prediction: an experiment checks a claim".into()));
    }
    let mut predictions = Vec::new();
    for (i, p) in raw.predictions.into_iter().enumerate() {
        predictions.push(prediction(p, i, &known, &lets, &base, &rows, file)?);
    }
    check_lets_used(&lets, &predictions, file)?;
    let seeds = match raw.seeds {
        None => SEEDS,
        Some(n) if (i64::from(SEED_RANGE.0)..=i64::from(SEED_RANGE.1)).contains(&n) => n as u32,
        Some(n) => {
            return Err(err(
                "seeds",
                format!(
                    "{n} is not allowed: from {} to {} (a verdict rests on the 95% interval over seeds, which needs two)",
                    SEED_RANGE.0, SEED_RANGE.1
                ),
            ));
        }
    };
    Ok(Spec {
        seeds,
        name,
        file: file.to_path_buf(),
        title: raw.title.trim().to_string(),
        hypothesis: raw.hypothesis.trim().to_string(),
        base_path: raw.base,
        base,
        keys: series.iter().map(|s| s.key.clone()).collect(),
        rows,
        metrics: raw.metrics,
        compare_to_first: raw.compare_to_first,
        lets,
        predictions,
        notes: raw.notes,
    })
}

/// A mapping with a scenario's keys and none of an experiment's.
fn looks_like_a_scenario(text: &str) -> bool {
    if llmsim_scenario::yaml::precheck(text).is_err() {
        return false;
    }
    let Ok(Value::Mapping(m)) = llmsim_scenario::yaml::from_str::<Value>(text) else {
        return false;
    };
    let has = |k: &str| m.contains_key(k);
    has("workload") && has("model") && !has("vary") && !has("predictions")
}

/// The results file is named after the experiment file, so the stem must
/// make a plain file name.
fn file_name(file: &Path) -> Result<String, ConfigError> {
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let plain = !stem.is_empty() && stem.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !plain || stem.eq_ignore_ascii_case("readme") {
        return Err(ConfigError::new(
            file,
            "",
            format!("`{stem}` cannot name a results file: use letters, digits, `-`, `_` and `.`, and not README"),
        ));
    }
    Ok(stem)
}

/// `vary:` as one mapping or a list of them.
fn series(vary: &Value, file: &Path) -> Result<Vec<RawSeries>, ConfigError> {
    let list: Vec<(String, Value)> = match vary {
        Value::Sequence(items) => items.iter().enumerate().map(|(i, v)| (format!("vary[{i}]"), v.clone())).collect(),
        other => vec![("vary".to_string(), other.clone())],
    };
    if list.is_empty() {
        return Err(ConfigError::new(file, "vary", "give one {key, levels} mapping (or a list of them)"));
    }
    let mut out = Vec::new();
    for (path, v) in list {
        let s: RawSeries = config::parse_value(v, file, &path)?;
        if s.levels.is_empty() {
            return Err(ConfigError::new(file, format!("{path}.levels"), "give at least one level"));
        }
        Override::parse(&format!("{}=0", s.key)).map_err(|e| ConfigError::new(file, format!("{path}.key"), e))?;
        out.push(s);
    }
    Ok(out)
}

/// Builds every variant and checks it differs from the base in its key only.
fn rows(series: &[RawSeries], base_file: &Path, base: &Scenario, file: &Path) -> Result<Vec<Row>, ConfigError> {
    let base_value = vars::effective_value(base);
    let mut rows = Vec::new();
    for (s_index, s) in series.iter().enumerate() {
        let prefix = if series.len() == 1 { "vary".to_string() } else { format!("vary[{s_index}]") };
        for (i, level) in s.levels.iter().enumerate() {
            let path = format!("{prefix}.levels[{i}]");
            let o = Override { path: s.key.split('.').map(str::to_string).collect(), value: level.clone() };
            let scenario = config::load_scenario_with(base_file, &[o])
                .map_err(|e| ConfigError::new(file, &path, format!("{} = {}: {e}", s.key, render_flow(level))))?;
            let changed = vars::differing_paths(&base_value, &vars::effective_value(&scenario));
            if let Some(other) = changed.iter().find(|p| !under(p, &s.key)) {
                return Err(ConfigError::new(
                    file,
                    &path,
                    format!(
                        "{} = {} also changes `{other}`: every variant must differ from the base in the varied key only",
                        s.key,
                        render_flow(level)
                    ),
                ));
            }
            rows.push(Row { key: s.key.clone(), level: level.clone(), scenario });
        }
    }
    Ok(rows)
}

/// `path` is `key` or inside it.
pub fn under(path: &str, key: &str) -> bool {
    path == key || path.strip_prefix(key).is_some_and(|rest| rest.starts_with('.'))
}

fn check_metric(m: &str, known: &[String]) -> Result<(), String> {
    if known.iter().any(|k| k == m) {
        return Ok(());
    }
    let hint = llmsim_core::util::nearest(m, known.iter().map(String::as_str))
        .map(|h| format!(" (did you mean `{h}`?)"))
        .unwrap_or_default();
    let derived: Vec<&str> = measure::DERIVED.iter().map(|(n, _)| *n).collect();
    Err(format!(
        "unknown metric `{m}`{hint}; metrics are the result JSON's numbers by key path (ttft_ms.p50, \
         throughput.output_tokens_per_s, kv.peak_blocks, ...) and {}",
        derived.join(", ")
    ))
}

/// Expression text from a YAML string or number.
fn source_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn formula(name: &str, v: &Value, file: &Path, path: &str) -> Result<Formula, ConfigError> {
    let source = source_of(v).ok_or_else(|| {
        ConfigError::new(file, path, format!("expected an expression, got {}", config::describe_value(v)))
    })?;
    let expr = expr::parse(&source).map_err(|e| ConfigError::new(file, path, format!("{}: {e}", quoted(&source))))?;
    Ok(Formula { name: name.to_string(), source, expr })
}

/// An expression as an error quotes it: whole up to 80 characters, else
/// its start and its length.
fn quoted(source: &str) -> String {
    let n = source.chars().count();
    if n <= 80 {
        return format!("`{source}`");
    }
    let head: String = source.chars().take(60).collect();
    format!("`{head}...` ({n} characters)")
}

fn lets(map: &llmsim_scenario::yaml::Mapping, file: &Path) -> Result<Vec<Formula>, ConfigError> {
    let mut out: Vec<Formula> = Vec::new();
    for (k, v) in map {
        let Value::String(name) = k else {
            return Err(ConfigError::new(file, "let", format!("`{}` is not a name", render_flow(k))));
        };
        let path = format!("let.{name}");
        let plain = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain {
            return Err(ConfigError::new(file, &path, "a let name is letters, digits and `_` (no dots)"));
        }
        if name == "base" || vars::DERIVED.iter().any(|(d, _)| d == name) {
            return Err(ConfigError::new(file, &path, format!("`{name}` is a built-in variable: choose another name")));
        }
        out.push(formula(name, v, file, &path)?);
    }
    Ok(out)
}

fn prediction(
    p: RawPrediction,
    i: usize,
    known: &[String],
    lets: &[Formula],
    base: &Scenario,
    rows: &[Row],
    file: &Path,
) -> Result<Prediction, ConfigError> {
    let at = |k: &str| format!("predictions[{i}].{k}");
    check_metric(&p.metric, known).map_err(|m| ConfigError::new(file, at("metric"), m))?;
    let tolerance = tolerance(&p.tolerance).map_err(|m| ConfigError::new(file, at("tolerance"), m))?;
    let expect = match &p.expect {
        Value::Sequence(items) => {
            if items.len() != rows.len() {
                return Err(ConfigError::new(
                    file,
                    at("expect"),
                    format!(
                        "{} expressions for {} rows: give one for every row, or a single one",
                        items.len(),
                        rows.len()
                    ),
                ));
            }
            let paths = (0..items.len()).map(|r| format!("{}[{r}]", at("expect")));
            items.iter().zip(paths).map(|(v, path)| formula("", v, file, &path)).collect::<Result<Vec<_>, _>>()?
        }
        other => vec![formula("", other, file, &at("expect"))?],
    };
    let base_vars = Vars::of(base);
    let mut values = Vec::new();
    for (r, row) in rows.iter().enumerate() {
        let (f, path) =
            if expect.len() == 1 { (&expect[0], at("expect")) } else { (&expect[r], format!("{}[{r}]", at("expect"))) };
        let mut ev = Evaluator::new(lets, &base_vars, row);
        let v = ev
            .eval(&f.expr, lets.len())
            .map_err(|m| ConfigError::new(file, &path, format!("row {} ({}): {m}", r + 1, row_label(row))))?;
        if !v.is_finite() {
            return Err(ConfigError::new(
                file,
                &path,
                format!("row {} ({}): `{}` evaluates to {v}", r + 1, row_label(row), f.source),
            ));
        }
        values.push(v);
    }
    Ok(Prediction { metric: p.metric, expect, tolerance, on_miss: p.on_miss, values })
}

fn row_label(row: &Row) -> String {
    format!("{} = {}", row.key, render_flow(&row.level))
}

fn tolerance(v: &Value) -> Result<Tolerance, String> {
    let bad = || {
        format!(
            "expected a percentage like `5%` (relative to the prediction) or a number (absolute, in the metric's \
             unit), 0 or more; got {}",
            config::describe_value(v)
        )
    };
    match v {
        Value::Number(n) => n.as_f64().filter(|x| x.is_finite() && *x >= 0.0).map(Tolerance::Absolute).ok_or_else(bad),
        Value::String(s) => s
            .trim()
            .strip_suffix('%')
            .and_then(|x| x.trim().parse::<f64>().ok())
            .filter(|x| x.is_finite() && *x >= 0.0)
            .map(|x| Tolerance::Relative(x / 100.0))
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A let that no prediction reaches is almost certainly a mistake.
fn check_lets_used(lets: &[Formula], predictions: &[Prediction], file: &Path) -> Result<(), ConfigError> {
    let mut used: Vec<&str> =
        predictions.iter().flat_map(|p| p.expect.iter().flat_map(|f| f.expr.variables())).collect();
    for l in lets.iter().rev() {
        if used.contains(&l.name.as_str()) {
            used.extend(l.expr.variables());
        } else {
            return Err(ConfigError::new(file, format!("let.{}", l.name), "defined but no prediction uses it"));
        }
    }
    Ok(())
}

/// Resolves names for one row: lets (each seeing only those above it),
/// `level`, `base.` + a key path, then the row's own variables.
struct Evaluator<'a> {
    lets: &'a [Formula],
    memo: Vec<Option<f64>>,
    base: &'a Vars,
    row: Vars,
    level: &'a Value,
}

impl<'a> Evaluator<'a> {
    fn new(lets: &'a [Formula], base: &'a Vars, row: &'a Row) -> Evaluator<'a> {
        let mut vars = Vars::of(&row.scenario);
        if let Some(x) = row.level.as_f64() {
            vars.set("level", x);
        }
        Evaluator { lets, memo: vec![None; lets.len()], base, row: vars, level: &row.level }
    }

    /// Evaluates `e` seeing the first `visible` lets.
    fn eval(&mut self, e: &Expr, visible: usize) -> Result<f64, String> {
        e.eval(&mut |name| self.value(name, visible))
    }

    fn value(&mut self, name: &str, visible: usize) -> Result<f64, String> {
        let lets = self.lets;
        if let Some(j) = lets[..visible].iter().position(|l| l.name == name) {
            if let Some(v) = self.memo[j] {
                return Ok(v);
            }
            let v = self.eval(&lets[j].expr, j).map_err(|m| format!("in let `{name}`: {m}"))?;
            self.memo[j] = Some(v);
            return Ok(v);
        }
        if lets[visible..].iter().any(|l| l.name == name) {
            return Err(format!("`{name}` is defined further down in `let`: a let may use only the ones above it"));
        }
        if name == "level" && self.level.as_f64().is_none() {
            return Err(format!(
                "`level` is {} here, not a number: read the scenario's own key path instead",
                render_flow(self.level)
            ));
        }
        if let Some(path) = name.strip_prefix("base.") {
            return self.base.get(path).map_err(|e| format!("in the base scenario: {e}"));
        }
        self.row.get(name).map_err(|e| e.to_string())
    }
}
