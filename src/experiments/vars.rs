//! The numbers a prediction may read, and what makes two scenarios differ.
//!
//! A prediction is written over the configuration, so its variables are the
//! validated scenario itself: every number of its effective YAML (defaults
//! filled in, hardware inline) by key path, plus the derived figures of
//! ENGINE.md that a derivation keeps needing (weight bytes, blocks, the
//! roofline rates). Key paths are those a user writes in a scenario file or
//! after `--set`, so `model.kv_cache.bytes_per_token` means what it says.

use std::collections::BTreeMap;

use serde_yaml::Value;

use crate::config::{Arrivals, Scenario};

/// Derived variables, with what each one is (for errors and the README).
pub const DERIVED: &[(&str, &str)] = &[
    ("parameters", "model parameters: parameters_billions x 1e9"),
    ("weight_bytes", "parameters x bytes_per_parameter"),
    ("kv_bytes_per_token", "model.kv_cache.bytes_per_token"),
    ("block_size", "tokens per KV block"),
    ("block_bytes", "kv_bytes_per_token x block_size"),
    ("num_blocks", "KV blocks (computed, or kv_cache.num_blocks)"),
    ("kv_tokens", "num_blocks x block_size"),
    ("watermark_blocks", "floor(watermark x num_blocks)"),
    ("flops_per_s", "peak_tflops x 1e12 x efficiency.compute"),
    ("bytes_per_s", "memory_bandwidth_gbps x 1e9 x efficiency.memory"),
    ("overhead_s", "latency.step_overhead_ms / 1000"),
    ("weights_read_s", "weight_bytes / bytes_per_s: the memory time of a step with no KV"),
    ("kv_read_s_per_token", "kv_bytes_per_token / bytes_per_s: memory time per token of context"),
    ("compute_s_per_token", "2 x parameters / flops_per_s: compute time per token computed"),
    ("prompt_mean", "mean prompt length (of the distribution, or of the trace)"),
    ("output_mean", "mean output length"),
    ("trace.requests", "rows of the trace (trace workloads only)"),
    ("trace.prompt_tokens_sum", "sum of the trace's prompt lengths"),
    ("trace.prompt_tokens_max", "longest prompt of the trace"),
    ("trace.output_tokens_sum", "sum of the trace's output lengths"),
    ("trace.output_tokens_max", "longest output of the trace"),
    ("level", "the row's level, when it is a number"),
];

/// Why a name has no value.
#[derive(Clone, Debug, PartialEq)]
pub enum VarError {
    /// A dotted path that is not a key of the scenario.
    NotAKey { name: String, hint: Option<String> },
    /// A key whose value is not a number.
    NotANumber { name: String, what: String },
    /// Neither a key path nor a derived variable nor a `let`.
    Unknown { name: String, hint: Option<String> },
}

impl std::fmt::Display for VarError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hint = |h: &Option<String>| h.as_ref().map(|h| format!(" (did you mean `{h}`?)")).unwrap_or_default();
        match self {
            VarError::NotAKey { name, hint: h } => write!(
                f,
                "`{name}` is not a key of the scenario{}; variables are the scenario's numbers by key path \
                 (as `llmsim explain` prints them), derived figures, `level`, `base.` + a key path, and `let` names",
                hint(h)
            ),
            VarError::NotANumber { name, what } => write!(f, "`{name}` is {what}, not a number"),
            VarError::Unknown { name, hint: h } => {
                let derived: Vec<&str> = DERIVED.iter().map(|(n, _)| *n).collect();
                write!(
                    f,
                    "unknown variable `{name}`{}; known: scenario key paths (model.kv_cache.bytes_per_token, ...), \
                     `base.` + a key path, `let` names, and {}",
                    hint(h),
                    derived.join(", ")
                )
            }
        }
    }
}

/// A scenario's variables: its numbers by key path, the derived figures,
/// and every other key (so a non-number is reported as such).
#[derive(Clone, Debug, Default)]
pub struct Vars {
    numbers: BTreeMap<String, f64>,
    /// Keys whose value is not a number, with a description of the value.
    others: BTreeMap<String, String>,
}

impl Vars {
    pub fn of(s: &Scenario) -> Vars {
        let mut vars = Vars::default();
        vars.flatten("", &effective_value(s));
        vars.derive(s);
        vars
    }

    /// Adds (or replaces) one variable.
    pub fn set(&mut self, name: &str, value: f64) {
        self.numbers.insert(name.to_string(), value);
    }

    pub fn get(&self, name: &str) -> Result<f64, VarError> {
        if let Some(v) = self.numbers.get(name) {
            return Ok(*v);
        }
        if let Some(what) = self.others.get(name) {
            return Err(VarError::NotANumber { name: name.to_string(), what: what.clone() });
        }
        let hint = crate::util::nearest(name, self.numbers.keys().map(String::as_str)).map(str::to_string);
        let is_path = name.contains('.') && !DERIVED.iter().any(|(d, _)| d.split('.').next() == name.split('.').next());
        if is_path {
            Err(VarError::NotAKey { name: name.to_string(), hint })
        } else {
            Err(VarError::Unknown { name: name.to_string(), hint })
        }
    }

    fn flatten(&mut self, path: &str, v: &Value) {
        let join = |seg: &str| if path.is_empty() { seg.to_string() } else { format!("{path}.{seg}") };
        match v {
            Value::Mapping(m) => {
                for (k, v) in m {
                    let seg = match k {
                        Value::String(s) => s.clone(),
                        other => render_flow(other),
                    };
                    self.flatten(&join(&seg), v);
                }
                if !path.is_empty() {
                    self.others.insert(path.to_string(), "a mapping".into());
                }
            }
            Value::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.flatten(&join(&i.to_string()), item);
                }
                self.others.insert(path.to_string(), "a list".into());
            }
            Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    self.numbers.insert(path.to_string(), x);
                }
            }
            other => {
                self.others.insert(path.to_string(), crate::config::describe_value(other));
            }
        }
    }

    fn derive(&mut self, s: &Scenario) {
        let cost = s.engine_config().cost;
        let cap = &s.capacity;
        let (prompt, output) = s.mean_lengths();
        let figures = [
            ("parameters", cost.parameters),
            ("weight_bytes", cost.weight_bytes),
            ("kv_bytes_per_token", cost.kv_bytes_per_token),
            ("block_size", f64::from(cap.block_size)),
            ("block_bytes", cap.block_bytes as f64),
            ("num_blocks", f64::from(cap.num_blocks)),
            ("kv_tokens", cap.kv_tokens as f64),
            ("watermark_blocks", f64::from(cap.watermark_blocks)),
            ("flops_per_s", cost.flops_per_s),
            ("bytes_per_s", cost.bytes_per_s),
            ("overhead_s", cost.overhead_s),
            ("weights_read_s", cost.weight_bytes / cost.bytes_per_s),
            ("kv_read_s_per_token", cost.kv_bytes_per_token / cost.bytes_per_s),
            ("compute_s_per_token", 2.0 * cost.parameters / cost.flops_per_s),
            ("prompt_mean", prompt),
            ("output_mean", output),
        ];
        for (name, value) in figures {
            self.set(name, value);
        }
        if let Arrivals::Trace(t) = &s.workload.arrivals {
            let sum = |f: fn(&crate::workload::trace::TraceRow) -> u32| t.rows.iter().map(|r| f64::from(f(r))).sum();
            let max =
                |f: fn(&crate::workload::trace::TraceRow) -> u32| f64::from(t.rows.iter().map(f).max().unwrap_or(0));
            self.set("trace.requests", t.rows.len() as f64);
            self.set("trace.prompt_tokens_sum", sum(|r| r.prompt));
            self.set("trace.prompt_tokens_max", max(|r| r.prompt));
            self.set("trace.output_tokens_sum", sum(|r| r.output));
            self.set("trace.output_tokens_max", max(|r| r.output));
        }
    }
}

/// The validated scenario as a YAML value: what `llmsim explain` prints.
pub fn effective_value(s: &Scenario) -> Value {
    serde_yaml::from_str(&crate::config::effective_yaml(s)).unwrap_or(Value::Null)
}

/// Every key path at which `a` and `b` differ (a key present in one only
/// counts), in key order.
pub fn differing_paths(a: &Value, b: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into("", a, b, &mut out);
    out
}

fn diff_into(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    let join = |seg: &str| if path.is_empty() { seg.to_string() } else { format!("{path}.{seg}") };
    match (a, b) {
        (Value::Mapping(ma), Value::Mapping(mb)) => {
            let mut keys: Vec<&Value> = ma.keys().chain(mb.keys().filter(|k| !ma.contains_key(*k))).collect();
            keys.sort_by_key(|k| render_flow(k));
            for k in keys {
                let seg = render_flow(k);
                match (ma.get(k), mb.get(k)) {
                    (Some(x), Some(y)) => diff_into(&join(&seg), x, y, out),
                    _ => out.push(join(&seg)),
                }
            }
        }
        (x, y) if x != y => out.push(path.to_string()),
        _ => {}
    }
}

/// A YAML value on one line, in flow style: `{uniform: [1, 511]}`.
pub fn render_flow(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Sequence(items) => format!("[{}]", items.iter().map(render_flow).collect::<Vec<_>>().join(", ")),
        Value::Mapping(m) => {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{}: {}", render_flow(k), render_flow(v))).collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Tagged(t) => format!("!{} {}", t.tag, render_flow(&t.value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn differing_paths_name_every_changed_leaf_and_key() {
        let a = yaml("a: {b: 1, c: [1, 2]}\nd: x\n");
        let b = yaml("a: {b: 2, c: [1, 2], e: 3}\nd: x\n");
        assert_eq!(differing_paths(&a, &b), vec!["a.b", "a.e"]);
        assert!(differing_paths(&a, &a).is_empty());
        let c = yaml("a: {b: 1, c: [1, 3]}\nd: y\n");
        assert_eq!(differing_paths(&a, &c), vec!["a.c", "d"]);
    }

    #[test]
    fn a_changed_enum_kind_differs_under_its_parent_key() {
        let a = yaml("arrivals: {closed: {concurrency: 32}}\n");
        let b = yaml("arrivals: {poisson: {rate: 17.7}}\n");
        assert_eq!(differing_paths(&a, &b), vec!["arrivals.closed", "arrivals.poisson"]);
    }

    #[test]
    fn flow_rendering_fits_one_line() {
        assert_eq!(render_flow(&yaml("{uniform: [1, 511]}")), "{uniform: [1, 511]}");
        assert_eq!(render_flow(&yaml("0.01")), "0.01");
        assert_eq!(render_flow(&yaml("{poisson: {rate: 17.7}}")), "{poisson: {rate: 17.7}}");
    }
}
