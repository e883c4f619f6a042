//! The numbers a prediction may read, and what makes two scenarios differ.
//!
//! A prediction is written over the configuration, so its variables are the
//! validated scenario itself: every number of its effective YAML (defaults
//! filled in, hardware inline) by key path, plus the derived figures of
//! docs/engine.md that a derivation keeps needing (weight bytes, blocks, the
//! roofline rates). Key paths are those a user writes in a scenario file or
//! after `--set`, so `model.kv_cache.bytes_per_token` means what it says.
//!
//! The derived figures are computed here, from those key paths, with this
//! module's own arithmetic (docs/engine.md sections 1 and 3), never from the
//! engine's cost model or capacity code: a prediction is a second,
//! independent derivation, so a bug in the engine's formulas makes the
//! experiments fail instead of moving both sides together. The formulas are
//! docs/engine.md's; where a scenario sets a docs/deployments.md key that changes one
//! of them (an architecture, tensor parallelism, per-layer or per-sequence
//! overheads, fp8 peak FLOPS), that figure has no value and reading it is an
//! error saying why: write that derivation from the key paths instead.

use std::collections::BTreeMap;

use llmsim_scenario::yaml::Value;

use llmsim_scenario::config::{Arrivals, Scenario};

/// Derived variables, with what each one is (for errors and docs/experiments.md).
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
    /// A derived figure whose docs/engine.md formula does not apply here.
    Unavailable { name: String, why: String },
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
            VarError::Unavailable { name, why } => write!(f, "`{name}` has no value here: {why}"),
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
    /// Derived figures this scenario has no value for, and why.
    unavailable: BTreeMap<String, String>,
}

impl Vars {
    pub fn of(s: &Scenario) -> Vars {
        let mut vars = Vars::default();
        let value = effective_value(s);
        vars.flatten("", &value);
        // A drafter on the GPU holds weights and KV beside the model's.
        let drafter = s.speculative.as_ref().map(|sp| sp.method).filter(|m| m.on_gpu());
        vars.derive(drafter.map(|m| m.as_str().to_string()));
        // The means of the lengths as written (before clamping: what a user quotes).
        for (name, length) in [("prompt_mean", &s.workload.prompt_tokens), ("output_mean", &s.workload.output_tokens)] {
            if let Some(l) = length {
                vars.set(name, l.mean());
            }
        }
        if let Arrivals::Trace(t) = &s.workload.arrivals {
            vars.trace(&t.rows);
        }
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
        if let Some(why) = self.unavailable.get(name) {
            return Err(VarError::Unavailable { name: name.to_string(), why: why.clone() });
        }
        if let Some(what) = self.others.get(name) {
            return Err(VarError::NotANumber { name: name.to_string(), what: what.clone() });
        }
        let hint = llmsim_core::util::nearest(name, self.numbers.keys().map(String::as_str)).map(str::to_string);
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
                self.others.insert(path.to_string(), llmsim_scenario::config::describe_value(other));
            }
        }
    }

    /// The derived figures of [`DERIVED`], from the key paths alone (see
    /// the module docs).
    fn derive(&mut self, drafter: Option<String>) {
        let mut d = Derivation { keys: &self.numbers, drafter, out: Vec::new(), unavailable: Vec::new() };
        d.run();
        let Derivation { out, unavailable, .. } = d;
        for (name, v) in out {
            self.set(name, v);
        }
        for (name, why) in unavailable {
            self.unavailable.insert(name.to_string(), why);
        }
    }

    /// `trace.*`, `prompt_mean` and `output_mean` of a trace workload: sums,
    /// maxima and means over its rows.
    fn trace(&mut self, rows: &[llmsim_scenario::trace::TraceRow]) {
        let sum = |f: fn(&llmsim_scenario::trace::TraceRow) -> u32| rows.iter().map(|r| f64::from(f(r))).sum::<f64>();
        let max = |f: fn(&llmsim_scenario::trace::TraceRow) -> u32| f64::from(rows.iter().map(f).max().unwrap_or(0));
        let n = rows.len() as f64;
        self.set("trace.requests", n);
        self.set("trace.prompt_tokens_sum", sum(|r| r.prompt));
        self.set("trace.prompt_tokens_max", max(|r| r.prompt));
        self.set("trace.output_tokens_sum", sum(|r| r.output));
        self.set("trace.output_tokens_max", max(|r| r.output));
        if n > 0.0 {
            self.set("prompt_mean", sum(|r| r.prompt) / n);
            self.set("output_mean", sum(|r| r.output) / n);
        }
    }
}

/// The derived figures, by hand from the scenario's keys.
struct Derivation<'a> {
    keys: &'a BTreeMap<String, f64>,
    /// `speculative.method` when its drafter runs on the GPU.
    drafter: Option<String>,
    out: Vec<(&'static str, f64)>,
    unavailable: Vec<(&'static str, String)>,
}

impl Derivation<'_> {
    fn key(&self, path: &str) -> Option<f64> {
        self.keys.get(path).copied()
    }

    fn has_under(&self, prefix: &str) -> bool {
        let dotted = format!("{prefix}.");
        self.keys.keys().any(|k| k == prefix || k.starts_with(&dotted))
    }

    /// Records `name` as `value`, or as unavailable with the first reason.
    fn put(&mut self, name: &'static str, value: Result<f64, String>) {
        match value {
            Ok(v) => self.out.push((name, v)),
            Err(why) => self.unavailable.push((name, why)),
        }
    }

    /// A key's value, or why there is none.
    fn need(&self, path: &str) -> Result<f64, String> {
        self.key(path).ok_or_else(|| format!("the scenario has no number at `{path}`"))
    }

    fn run(&mut self) {
        let deployment = |what: &str| {
            format!(
                "the scenario sets {what} (docs/deployments.md), and this figure follows docs/engine.md's formula; write the \
                 derivation from the scenario's key paths"
            )
        };
        // What changes which formula (docs/deployments.md).
        let arch = if self.has_under("model.architecture") || self.has_under("model.hf_config") {
            Err(deployment("a model architecture"))
        } else {
            Ok(())
        };
        let tp = match self.key("parallelism.tensor") {
            Some(t) if t != 1.0 => Err(deployment(&format!("parallelism.tensor = {t}"))),
            _ => Ok(()),
        };
        let overheads = ["latency.per_layer_overhead_us", "latency.per_sequence_overhead_us"]
            .iter()
            .find(|k| self.key(k).is_some_and(|v| v != 0.0))
            .map_or(Ok(()), |k| Err(deployment(&format!("`{k}`"))));
        let bpp = self.need("model.weights.bytes_per_parameter");
        let fp8 = match (self.key("hardware.peak_tflops_fp8"), &bpp) {
            (Some(_), Ok(b)) if *b <= 1.0 => Err(deployment("hardware.peak_tflops_fp8 with 1-byte weights")),
            _ => Ok(()),
        };

        // docs/engine.md section 1: weights and blocks.
        let parameters = arch.clone().and(self.need("model.weights.parameters_billions")).map(|b| b * 1e9);
        let weight_bytes = parameters.clone().and_then(|p| Ok(p * bpp.clone()?));
        let kv = self.need("model.kv_cache.bytes_per_token");
        let block_size = self.need("model.kv_cache.block_size");
        let block_bytes = kv.clone().and_then(|k| Ok(k * block_size.clone()?));
        // A drafter on the GPU holds weights and KV in the model's memory
        // (docs/speculative.md); n-gram drafting holds none.
        let drafter = match &self.drafter {
            Some(m) => Err(format!(
                "the scenario drafts with `speculative.method: {m}`, whose weights and KV share the GPU \
                 (docs/speculative.md); write the derivation from the scenario's key paths"
            )),
            _ => Ok(()),
        };
        let num_blocks = match self.key("model.kv_cache.num_blocks") {
            Some(n) => Ok(n),
            None => drafter.and(tp.clone()).and(weight_bytes.clone()).and_then(|w| {
                let usable = self.need("hardware.hbm_gib")?
                    * 1_073_741_824.0
                    * self.need("model.kv_cache.gpu_memory_utilization")?
                    - w;
                Ok((usable / block_bytes.clone()?).floor())
            }),
        };
        let kv_tokens = num_blocks.clone().and_then(|n| Ok(n * block_size.clone()?));
        let watermark = num_blocks.clone().and_then(|n| Ok((self.need("model.kv_cache.watermark")? * n).floor()));

        // docs/engine.md section 3, step 4: the roofline rates.
        let flops = fp8
            .and(tp.clone())
            .and(self.need("hardware.peak_tflops"))
            .and_then(|p| Ok(p * 1e12 * self.need("efficiency.compute")?));
        let bytes = tp
            .and(self.need("hardware.memory_bandwidth_gbps"))
            .and_then(|b| Ok(b * 1e9 * self.need("efficiency.memory")?));
        let overhead = overheads.and(self.need("latency.step_overhead_ms")).map(|ms| ms / 1000.0);
        let ratio = |a: &Result<f64, String>, b: &Result<f64, String>| Ok(a.clone()? / b.clone()?);
        let weights_read = ratio(&weight_bytes, &bytes);
        let kv_read = ratio(&kv, &bytes);
        let compute = parameters.clone().and_then(|p| Ok(2.0 * p / flops.clone()?));

        for (name, v) in [
            ("parameters", parameters),
            ("weight_bytes", weight_bytes),
            ("kv_bytes_per_token", kv),
            ("block_size", block_size),
            ("block_bytes", block_bytes),
            ("num_blocks", num_blocks),
            ("kv_tokens", kv_tokens),
            ("watermark_blocks", watermark),
            ("flops_per_s", flops),
            ("bytes_per_s", bytes),
            ("overhead_s", overhead),
            ("weights_read_s", weights_read),
            ("kv_read_s_per_token", kv_read),
            ("compute_s_per_token", compute),
        ] {
            self.put(name, v);
        }
    }
}

/// The validated scenario as a YAML value: what `llmsim explain` prints.
pub fn effective_value(s: &Scenario) -> Value {
    llmsim_scenario::yaml::from_str(&llmsim_scenario::config::effective_yaml(s)).unwrap_or(Value::Null)
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
        llmsim_scenario::yaml::from_str(text).unwrap()
    }

    /// The base model of docs/engine.md, as `llmsim explain` prints it.
    const BASE: &str = "
hardware: { name: h100-like, hbm_gib: 80.0, memory_bandwidth_gbps: 3000.0, peak_tflops: 989.0 }
model:
  context_length: 32768
  weights: { parameters_billions: 6.74, bytes_per_parameter: 2.0 }
  kv_cache: { bytes_per_token: 524288, block_size: 16, gpu_memory_utilization: 0.9, watermark: 0.01 }
scheduler: { max_batch_tokens: 8192, max_num_sequences: 64 }
latency: { step_overhead_ms: 0.0 }
efficiency: { compute: 1.0, memory: 1.0 }
workload:
  prompt_tokens: 512
  output_tokens: { uniform: [32, 96] }
";

    fn vars_of(text: &str) -> Vars {
        let value = yaml(text);
        let mut v = Vars::default();
        v.flatten("", &value);
        v.derive(None);
        v
    }

    /// [`Vars::of`] a scenario validated from `text` (with a workload's arrivals).
    fn vars_of_scenario(text: &str) -> Vars {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.yml");
        std::fs::write(&file, format!("{text}  arrivals: {{ poisson: {{ rate: 1.0 }} }}\n  requests: 10\n")).unwrap();
        Vars::of(&llmsim_scenario::config::load_scenario(&file).unwrap())
    }

    #[test]
    fn derived_figures_are_engine_md_by_hand_from_the_keys() {
        let v = vars_of(BASE);
        let get = |n: &str| v.get(n).unwrap();
        assert_eq!(get("parameters"), 6.74e9);
        assert_eq!(get("weight_bytes"), 13.48e9);
        assert_eq!(get("block_bytes"), 8_388_608.0);
        // docs/engine.md's worked example: 7,609 blocks, 121,744 tokens, 76 watermark blocks.
        assert_eq!(get("num_blocks"), 7609.0);
        assert_eq!(get("kv_tokens"), 121_744.0);
        assert_eq!(get("watermark_blocks"), 76.0);
        assert_eq!(get("flops_per_s"), 989e12);
        assert_eq!(get("bytes_per_s"), 3e12);
        // The decode floor of docs/engine.md: about 4.49 ms.
        assert!((get("weights_read_s") - 0.004_493_333).abs() < 1e-9);
        assert_eq!(get("kv_read_s_per_token"), 524_288.0 / 3e12);
        assert_eq!(get("compute_s_per_token"), 2.0 * 6.74e9 / 989e12);
        assert_eq!(get("overhead_s"), 0.0);
        let v = vars_of_scenario(BASE);
        assert_eq!((v.get("prompt_mean"), v.get("output_mean")), (Ok(512.0), Ok(64.0)));
    }

    #[test]
    fn a_given_block_count_and_every_length_form_are_read_from_the_keys() {
        let text = BASE.replace("watermark: 0.01 }", "watermark: 0.1, num_blocks: 1000 }").replace(
            "output_tokens: { uniform: [32, 96] }",
            "output_tokens: { choice: { values: [10, 40], weights: [3.0, 1.0] } }",
        );
        let v = vars_of(&text);
        assert_eq!(v.get("num_blocks"), Ok(1000.0));
        assert_eq!(v.get("watermark_blocks"), Ok(100.0));
        assert_eq!(vars_of_scenario(&text).get("output_mean"), Ok((3.0 * 10.0 + 40.0) / 4.0));
        let v = vars_of_scenario(
            &BASE.replace("prompt_tokens: 512", "prompt_tokens: { lognormal: { mean: 700, std: 9, min: 1 } }"),
        );
        assert_eq!(v.get("prompt_mean"), Ok(700.0));
    }

    #[test]
    fn a_drafter_on_the_gpu_takes_the_block_count_n_gram_does_not() {
        let spec = |d: &str| {
            BASE.replacen(
                "workload:",
                &format!("speculative: {{ num_speculative_tokens: 3, acceptance_rate: 0.7, {d} }}\nworkload:"),
                1,
            )
        };
        let v = vars_of_scenario(&spec("method: ngram"));
        assert_eq!(v.get("num_blocks"), Ok(7609.0));
        let v = vars_of_scenario(&spec(
            "method: draft_model, draft_parameters_billions: 0.5, draft_kv_bytes_per_token: 4096",
        ));
        let e = v.get("num_blocks").unwrap_err().to_string();
        assert!(e.contains("speculative.method: draft_model"), "{e}");
        // The model's own rates stay.
        assert_eq!(v.get("weights_read_s").map(|x| (x * 1e9).round()), Ok(4_493_333.0));
    }

    #[test]
    fn a_figure_deployment_keys_change_has_no_value_and_says_why() {
        let tp = format!("{BASE}parallelism: {{ tensor: 2 }}\n");
        let v = vars_of(&tp);
        let e = v.get("num_blocks").unwrap_err().to_string();
        assert!(e.contains("`num_blocks` has no value here") && e.contains("parallelism.tensor = 2"), "{e}");
        assert!(v.get("weights_read_s").is_err() && v.get("flops_per_s").is_err());
        // What tensor parallelism does not change keeps its value.
        assert_eq!(v.get("weight_bytes"), Ok(13.48e9));
        assert_eq!(vars_of(&format!("{BASE}parallelism: {{ tensor: 1 }}\n")).get("num_blocks"), Ok(7609.0));
        let arch = BASE.replace("  context_length: 32768", "  context_length: 32768\n  architecture: { layers: 32 }");
        let e = vars_of(&arch).get("compute_s_per_token").unwrap_err().to_string();
        assert!(e.contains("a model architecture"), "{e}");
        let per_layer = BASE.replace("step_overhead_ms: 0.0", "step_overhead_ms: 0.0, per_layer_overhead_us: 75");
        assert!(vars_of(&per_layer).get("overhead_s").unwrap_err().to_string().contains("per_layer_overhead_us"));
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
