//! The models file of `llmsim serve` (`scenarios/serve/models.yml`): which
//! model names the server answers to, and what times each one's tokens.
//!
//! Each entry names a model and an engine. A `scheduler` model takes its
//! hardware, model, scheduler, latency and efficiency sections in the
//! scenario schema (inline, or from a scenario file with `scenario: FILE`,
//! whose workload is ignored), so the live server and `llmsim run` read the
//! same numbers through the same validation. A `fixed` model needs no
//! hardware: TTFT = overhead + prompt tokens / prefill rate, then a fixed
//! inter-token latency. Read in the same two stages as scenarios: serde
//! structs that mirror the YAML, then checks that name the key path.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use llmsim_core::engine::EngineConfig;
use llmsim_scenario::config::check::Check;
use llmsim_scenario::config::limits;
use llmsim_scenario::config::raw::{
    RawArrivals, RawCluster, RawEfficiency, RawLatency, RawLength, RawModel, RawParallelism, RawScenario, RawScheduler,
    RawWorkload,
};
use llmsim_scenario::config::{Cluster, ConfigError, Scenario};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModelsFile {
    pub models: Vec<RawServedModel>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServedModel {
    /// The `model` field clients send.
    pub name: String,
    pub engine: Option<RawEngineKind>,
    /// A scenario file (relative to the models file) to take the engine
    /// sections from.
    pub scenario: Option<String>,
    pub hardware: Option<llmsim_scenario::yaml::Value>,
    /// A model name or a mapping, as in a scenario.
    #[serde(default, deserialize_with = "llmsim_scenario::config::raw::some_model_or_name")]
    pub model: Option<RawModel>,
    pub parallelism: Option<RawParallelism>,
    pub scheduler: Option<RawScheduler>,
    pub latency: Option<RawLatency>,
    pub efficiency: Option<RawEfficiency>,
    /// Replicas behind a router, as a scenario's `cluster:` (docs/serve.md).
    pub cluster: Option<RawCluster>,
    /// Speculative decoding, as a scenario's `speculative:`.
    pub speculative: Option<llmsim_scenario::config::raw::RawSpeculative>,
    /// LoRA adapters (`lora:` as in a scenario, docs/lora.md): listed in
    /// `/v1/models` and chosen by a request's `model`.
    pub lora: Option<llmsim_scenario::config::raw::RawLora>,
    pub fixed: Option<RawFixed>,
    /// A Hugging Face tokenizer.json (relative to the models file); the
    /// built-in tokenizer without one (`server::tokenize`).
    pub tokenizer: Option<String>,
    /// A Jinja chat template file (relative to the models file), vLLM's
    /// `--chat-template`; without it, the template found next to the
    /// tokenizer (`server::tokenize::template`). Needs `tokenizer`.
    pub chat_template: Option<String>,
    /// Fault injection (`server::faults`).
    pub faults: Option<llmsim_scenario::yaml::Value>,
    /// vLLM's `--tool-call-parser`: how the model writes a tool call
    /// (`server::tools`); without it, tool calls are refused as vLLM
    /// refuses them.
    pub tool_call_parser: Option<String>,
    /// vLLM's `--enable-auto-tool-choice`: `tool_choice: "auto"` may call
    /// tools (needs `tool_call_parser`).
    pub enable_auto_tool_choice: Option<bool>,
    /// vLLM's `--max-num-queued-reqs`: most requests in flight (waiting or
    /// running) before new ones get 503 (`server::engine_task`).
    #[serde(default, deserialize_with = "llmsim_scenario::config::num::opt_whole")]
    pub max_num_queued_reqs: Option<i64>,
    /// vLLM's `--max-num-queued-tokens`: new requests get 503 while the
    /// prompts of requests in prefill add up to this many tokens.
    #[serde(default, deserialize_with = "llmsim_scenario::config::num::opt_whole")]
    pub max_num_queued_tokens: Option<i64>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RawEngineKind {
    Scheduler,
    Fixed,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFixed {
    #[serde(deserialize_with = "llmsim_scenario::config::num::whole")]
    pub context_length: i64,
    #[serde(default, deserialize_with = "llmsim_scenario::config::num::opt_real")]
    pub ttft_overhead_ms: Option<f64>,
    #[serde(deserialize_with = "llmsim_scenario::config::num::real")]
    pub prefill_tokens_per_s: f64,
    #[serde(deserialize_with = "llmsim_scenario::config::num::real")]
    pub itl_ms: f64,
}

/// The validated models file.
#[derive(Clone, Debug)]
pub struct ModelsFile {
    pub source: PathBuf,
    /// In file order; the first is the default when a request names none.
    pub models: Vec<ServedModel>,
}

#[derive(Clone, Debug)]
pub struct ServedModel {
    pub name: String,
    /// Prompt plus output tokens a request may use (vLLM's `max_model_len`).
    pub context_length: u32,
    pub engine: EngineKind,
    pub tokenizer: crate::tokenize::Tokenizer,
    pub faults: Option<crate::faults::Faults>,
    /// Tool calling as vLLM's flags set it up (`server::tools`).
    pub tools: crate::tools::ToolCalling,
    /// vLLM's admission limits (`max_num_queued_reqs`,
    /// `max_num_queued_tokens`); none by default, as in vLLM.
    pub queue: QueueLimits,
}

/// What `max_num_queued_reqs` and `max_num_queued_tokens` may be: vLLM
/// allows any whole number from 0 (`Field(ge=0)`); the top is llmsim's
/// token-count bound.
const QUEUE_LIMIT: limits::Range = limits::Range::whole(0, u32::MAX as u64);

/// vLLM's admission control (`--max-num-queued-reqs`,
/// `--max-num-queued-tokens`), checked by the request handler before it
/// reads the prompt and by the engine task when a request arrives
/// (`server::engine_task`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLimits {
    pub max_num_queued_reqs: Option<u64>,
    pub max_num_queued_tokens: Option<u64>,
}

#[derive(Clone, Debug)]
pub enum EngineKind {
    /// The planner core, run on the wall clock.
    Scheduler(Box<SchedulerModel>),
    /// Each request alone, with fixed timing.
    Fixed(FixedTiming),
}

#[derive(Clone, Debug)]
pub struct SchedulerModel {
    pub engine: EngineConfig,
    /// The scenario the sections came from, if any (for `llmsim run` replays).
    pub scenario_file: Option<PathBuf>,
    /// Replicas behind a router (`cluster:`); `None` is one engine.
    pub cluster: Option<Cluster>,
    /// The scenario's `workload.seed`: the `random` router's draws, as in
    /// `llmsim run` on the same scenario.
    pub seed: u64,
    /// LoRA adapters' names, in order (a request naming the k-th runs
    /// with the engine's adapter k; docs/lora.md).
    pub adapters: Vec<String>,
}

impl SchedulerModel {
    /// How many engines serve the model.
    pub fn replicas(&self) -> u32 {
        self.cluster.as_ref().map_or(1, |c| c.replicas)
    }
}

/// The `fixed` engine's timing, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FixedTiming {
    pub ttft_overhead_ns: u64,
    pub prefill_tokens_per_s: f64,
    pub itl_ns: u64,
}

impl FixedTiming {
    /// Arrival to first token for a prompt of `prompt` tokens.
    pub fn ttft_ns(&self, prompt: u32) -> u64 {
        self.ttft_overhead_ns + llmsim_core::time::secs_to_nanos(f64::from(prompt) / self.prefill_tokens_per_s)
    }
}

impl ServedModel {
    /// The model's `cluster:`, if it runs as replicas behind a router.
    pub fn cluster(&self) -> Option<&Cluster> {
        match &self.engine {
            EngineKind::Scheduler(s) => s.cluster.as_ref(),
            EngineKind::Fixed(_) => None,
        }
    }
}

impl EngineKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            EngineKind::Scheduler(_) => "scheduler",
            EngineKind::Fixed(_) => "fixed",
        }
    }
}

/// Reads and validates a models file.
pub fn load_models(file: &Path) -> Result<ModelsFile, ConfigError> {
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::ServeModels, file)?;
    let raw: RawModelsFile = llmsim_scenario::config::parse_str(&text, file)?;
    if raw.models.is_empty() {
        return Err(ConfigError::new(file, "models", "an empty list is not allowed: serve at least one model"));
    }
    let mut models: Vec<ServedModel> = Vec::new();
    for (i, entry) in raw.models.into_iter().enumerate() {
        let at = format!("models[{i}]");
        let model = served(entry, file, &at)?;
        if models.iter().any(|m| m.name == model.name) {
            return Err(ConfigError::new(
                file,
                format!("{at}.name"),
                format!("`{}` is served twice: model names must be unique", model.name),
            ));
        }
        models.push(model);
    }
    Ok(ModelsFile { source: file.to_path_buf(), models })
}

fn served(raw: RawServedModel, file: &Path, at: &str) -> Result<ServedModel, ConfigError> {
    let name = raw.name.trim().to_string();
    if name.is_empty() {
        return Err(ConfigError::new(file, format!("{at}.name"), "an empty name is not allowed"));
    }
    let base = file.parent().unwrap_or(Path::new(""));
    let tokenizer = match (raw.tokenizer.as_deref(), raw.chat_template.as_deref()) {
        (Some(rel), template) => {
            let template = template.map(|t| base.join(t));
            crate::tokenize::Tokenizer::load_with_template(&base.join(rel), template.as_deref())
                .map_err(|e| ConfigError::new(file, format!("{at}.tokenizer"), e))?
        }
        (None, Some(_)) => {
            return Err(ConfigError::new(
                file,
                format!("{at}.chat_template"),
                "needs `tokenizer` (a tokenizer.json): the built-in tokenizer frames chats as ChatML",
            ));
        }
        (None, None) => crate::tokenize::Tokenizer::default(),
    };
    let faults = match raw.faults.as_ref() {
        Some(v) => Some(crate::faults::Faults::parse(v, file, &format!("{at}.faults"))?),
        None => None,
    };
    let tools = crate::tools::ToolCalling::from_keys(
        raw.tool_call_parser.as_deref(),
        raw.enable_auto_tool_choice.unwrap_or(false),
    )
    .map_err(|(key, msg)| ConfigError::new(file, format!("{at}.{key}"), msg))?;
    let ck = Check { file };
    // vLLM's SchedulerConfig has both `ge=0`: 0 is allowed (and refuses
    // every request).
    let limit = |key: &str, v: Option<i64>| v.map(|v| ck.whole(&format!("{at}.{key}"), v, &QUEUE_LIMIT)).transpose();
    let queue = QueueLimits {
        max_num_queued_reqs: limit("max_num_queued_reqs", raw.max_num_queued_reqs)?,
        max_num_queued_tokens: limit("max_num_queued_tokens", raw.max_num_queued_tokens)?,
    };
    let mut model = match raw.engine.unwrap_or(RawEngineKind::Scheduler) {
        RawEngineKind::Fixed => fixed(raw, name, file, at)?,
        RawEngineKind::Scheduler => scheduler(raw, name, file, at)?,
    };
    model.tokenizer = tokenizer;
    model.faults = faults;
    model.tools = tools;
    model.queue = queue;
    Ok(model)
}

fn fixed(raw: RawServedModel, name: String, file: &Path, at: &str) -> Result<ServedModel, ConfigError> {
    let unused = [
        ("scenario", raw.scenario.is_some()),
        ("hardware", raw.hardware.is_some()),
        ("model", raw.model.is_some()),
        ("parallelism", raw.parallelism.is_some()),
        ("scheduler", raw.scheduler.is_some()),
        ("latency", raw.latency.is_some()),
        ("efficiency", raw.efficiency.is_some()),
        ("cluster", raw.cluster.is_some()),
        ("speculative", raw.speculative.is_some()),
        ("max_num_queued_reqs", raw.max_num_queued_reqs.is_some()),
        ("max_num_queued_tokens", raw.max_num_queued_tokens.is_some()),
    ];
    if let Some((key, _)) = unused.iter().find(|(_, set)| *set) {
        return Err(ConfigError::new(
            file,
            format!("{at}.{key}"),
            "not used by the fixed engine: remove it, or set `engine: scheduler`",
        ));
    }
    let Some(f) = raw.fixed else {
        return Err(ConfigError::new(
            file,
            format!("{at}.fixed"),
            "missing: a fixed model needs fixed: {context_length, prefill_tokens_per_s, itl_ms, ttft_overhead_ms}",
        ));
    };
    let ck = Check { file };
    let p = |k: &str| format!("{at}.fixed.{k}");
    let context_length = ck.whole32(&p("context_length"), f.context_length, &limits::CONTEXT_LENGTH)?;
    let overhead = ck.real(&p("ttft_overhead_ms"), f.ttft_overhead_ms.unwrap_or(0.0), &limits::STEP_OVERHEAD_MS)?;
    let timing = FixedTiming {
        ttft_overhead_ns: llmsim_core::time::secs_to_nanos(overhead / 1e3),
        prefill_tokens_per_s: ck.real(
            &p("prefill_tokens_per_s"),
            f.prefill_tokens_per_s,
            &limits::PREFILL_TOKENS_PER_S,
        )?,
        itl_ns: llmsim_core::time::secs_to_nanos(ck.real(&p("itl_ms"), f.itl_ms, &limits::STEP_OVERHEAD_MS)? / 1e3),
    };
    Ok(ServedModel {
        name,
        context_length,
        engine: EngineKind::Fixed(timing),
        tokenizer: Default::default(),
        faults: None,
        tools: Default::default(),
        queue: QueueLimits::default(),
    })
}

fn scheduler(raw: RawServedModel, name: String, file: &Path, at: &str) -> Result<ServedModel, ConfigError> {
    if raw.fixed.is_some() {
        return Err(ConfigError::new(
            file,
            format!("{at}.fixed"),
            "only used by the fixed engine: remove it, or set `engine: fixed`",
        ));
    }
    let (scenario, scenario_file) = match raw.scenario {
        Some(rel) => {
            let inline =
                [raw.hardware.is_some(), raw.model.is_some(), raw.scheduler.is_some(), raw.parallelism.is_some()];
            let more = raw.latency.is_some() || raw.efficiency.is_some() || raw.cluster.is_some();
            if inline.iter().any(|&x| x) || more || raw.speculative.is_some() || raw.lora.is_some() {
                return Err(ConfigError::new(
                    file,
                    format!("{at}.scenario"),
                    "give either `scenario: FILE` or inline hardware/model/scheduler/cluster/speculative/lora sections, \
                     not both",
                ));
            }
            let path = file.parent().unwrap_or(Path::new("")).join(&rel);
            (llmsim_scenario::config::load_scenario(&path)?, Some(path))
        }
        None => (inline_scenario(raw, &name, file, at)?, None),
    };
    if scenario.latency.request_overhead_ms > 0.0 {
        // The server's requests pass through a real HTTP stack; adding a
        // modelled delay on top would count that cost twice.
        return Err(ConfigError::new(
            file,
            format!("{at}.latency.request_overhead_ms"),
            format!(
                "{} is not allowed in a served model: llmsim serve's requests already pay the real HTTP and \
                 queueing cost; set it to 0 (llmsim run applies it)",
                scenario.latency.request_overhead_ms
            ),
        ));
    }
    Ok(ServedModel {
        name,
        context_length: scenario.model.context_length,
        engine: EngineKind::Scheduler(Box::new(SchedulerModel {
            engine: scenario.engine_config(),
            scenario_file,
            cluster: scenario.cluster.clone(),
            seed: scenario.workload.seed,
            adapters: scenario
                .lora
                .as_ref()
                .map_or_else(Vec::new, |l| l.adapters.iter().map(|a| a.name.clone()).collect()),
        })),
        tokenizer: Default::default(),
        faults: None,
        tools: Default::default(),
        queue: QueueLimits::default(),
    })
}

/// Validates inline sections as a scenario whose workload is a placeholder
/// (the server's workload is its clients), naming `models[i].` in errors.
fn inline_scenario(raw: RawServedModel, name: &str, file: &Path, at: &str) -> Result<Scenario, ConfigError> {
    let (Some(hardware), Some(model)) = (raw.hardware, raw.model) else {
        return Err(ConfigError::new(
            file,
            at,
            "a scheduler model needs `hardware` and `model` sections (as in a scenario), or `scenario: FILE`",
        ));
    };
    let placeholder = RawWorkload {
        seed: None,
        arrivals: RawArrivals::Constant { rate: 1.0 },
        requests: Some(1),
        duration_s: None,
        prompt_tokens: Some(RawLength::Fixed(1)),
        output_tokens: Some(RawLength::Fixed(1)),
        shared_prefix: None,
        sessions: None,
        hash_block_size: None,
        classes: None,
    };
    let scenario = RawScenario {
        name: Some(name.to_string()),
        description: None,
        calibration: None,
        // A served model's `engine` is scheduler or fixed; another engine's
        // scheduling rules come with `scenario: FILE` (docs/serve.md).
        engine: None,
        hardware,
        model,
        parallelism: raw.parallelism.unwrap_or_default(),
        scheduler: raw.scheduler.unwrap_or_default(),
        latency: raw.latency.unwrap_or_default(),
        efficiency: raw.efficiency.unwrap_or_default(),
        workload: placeholder,
        cluster: raw.cluster,
        speculative: raw.speculative,
        lora: raw.lora,
    };
    llmsim_scenario::config::validate::scenario(scenario, file).map_err(|mut e| {
        if e.file == file {
            e.path = if e.path.is_empty() { at.to_string() } else { format!("{at}.{}", e.path) };
        }
        e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_numeric_key_of_the_models_file_reads_the_one_number_grammar() {
        // As the scenario keys' check in llmsim-scenario: a field typed
        // f64/i64/u64 without `deserialize_with = "num::..."` would read
        // `0x1E` or `1e3` differently from its neighbours.
        let plain = llmsim_scenario::config::keys::trace_with_plain::<RawModelsFile>("").1;
        assert!(plain.is_empty(), "read outside config::num: {plain:?}");
    }

    fn load(text: &str) -> Result<ModelsFile, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("models.yml");
        std::fs::write(&path, text).unwrap();
        load_models(&path).map_err(|e| e.to_string())
    }

    const INLINE: &str = "
models:
  - name: small
    hardware: h100-80gb
    model:
      context_length: 4096
      weights: {parameters_billions: 1}
      kv_cache: {bytes_per_token: 131072}
    scheduler: {max_num_sequences: 8}
  - name: quick
    engine: fixed
    fixed: {context_length: 2048, ttft_overhead_ms: 10, prefill_tokens_per_s: 1000, itl_ms: 5}
";

    #[test]
    fn reads_a_scheduler_model_and_a_fixed_model() {
        let m = load(INLINE).unwrap();
        assert_eq!(m.models.len(), 2);
        assert_eq!(m.models[0].context_length, 4096);
        let EngineKind::Scheduler(s) = &m.models[0].engine else { panic!("scheduler expected") };
        assert_eq!(s.engine.max_num_sequences, 8);
        let EngineKind::Fixed(f) = &m.models[1].engine else { panic!("fixed expected") };
        assert_eq!(f.ttft_ns(500), 10_000_000 + 500_000_000);
        assert_eq!(f.itl_ns, 5_000_000);
    }

    #[test]
    fn errors_name_the_entry_and_key_path() {
        let e = load(&INLINE.replace("max_num_sequences: 8", "max_num_sequences: 0")).unwrap_err();
        assert!(e.contains("models[0].scheduler.max_num_sequences: 0 is not allowed"), "{e}");
        let e = load(&INLINE.replace("itl_ms: 5", "itl_ms: -5")).unwrap_err();
        assert!(e.contains("models[1].fixed.itl_ms: -5 is not allowed"), "{e}");
        let e = load(&INLINE.replace("engine: fixed", "engine: turbo")).unwrap_err();
        assert!(e.contains("models.yml:11: models[1].engine") && e.contains("`scheduler` or `fixed`"), "{e}");
        let e = load(&INLINE.replace("name: quick", "name: small")).unwrap_err();
        assert!(e.contains("models[1].name: `small` is served twice"), "{e}");
    }

    #[test]
    fn a_fixed_model_refuses_scheduler_sections() {
        let e = load(&INLINE.replace("    engine: fixed\n", "    engine: fixed\n    scheduler: {}\n")).unwrap_err();
        assert!(e.contains("models[1].scheduler: not used by the fixed engine"), "{e}");
    }

    #[test]
    fn a_scheduler_model_can_point_at_a_scenario_file() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/base.yml")).unwrap();
        std::fs::write(dir.path().join("base.yml"), base).unwrap();
        let path = dir.path().join("models.yml");
        std::fs::write(&path, "models:\n  - name: base\n    scenario: base.yml\n").unwrap();
        let m = load_models(&path).unwrap();
        let EngineKind::Scheduler(s) = &m.models[0].engine else { panic!("scheduler expected") };
        assert_eq!(s.engine.capacity.num_blocks, 7609);
        assert_eq!(s.scenario_file.as_deref(), Some(dir.path().join("base.yml").as_path()));
        assert_eq!(s.engine.policy, llmsim_core::engine::Policy::Vllm);
        // The scenario's engine comes with it: TensorRT-LLM's scheduling rules.
        let trt = std::fs::read_to_string(dir.path().join("base.yml")).unwrap().replacen(
            "scheduler:",
            "engine: trtllm\nscheduler:",
            1,
        );
        std::fs::write(dir.path().join("base.yml"), trt).unwrap();
        let m = load_models(&path).unwrap();
        let EngineKind::Scheduler(s) = &m.models[0].engine else { panic!("scheduler expected") };
        assert_eq!(s.engine.policy, llmsim_core::engine::Policy::Trtllm);
    }

    #[test]
    fn a_served_model_can_be_a_deployment_but_not_add_a_request_overhead() {
        let served = "
models:
  - name: big
    hardware: h100-80gb
    model: llama-3.1-70b
    parallelism: {tensor: 4}
";
        let m = load(served).unwrap();
        let EngineKind::Scheduler(s) = &m.models[0].engine else { panic!("scheduler expected") };
        // (77,309,411,328 - 35,276,853,248) / (81,920 * 16)
        assert_eq!(s.engine.capacity.num_blocks, 32_068);
        assert_eq!(m.models[0].context_length, 131_072);
        let e = load(&format!("{served}    latency: {{request_overhead_ms: 5}}\n")).unwrap_err();
        assert!(e.contains("models[0].latency.request_overhead_ms: 5 is not allowed in a served model"), "{e}");
        let e = load(&served.replace("tensor: 4", "tensor: 3")).unwrap_err();
        assert!(e.contains("models[0].parallelism.tensor: 3 does not divide the 64 attention heads"), "{e}");
    }

    #[test]
    fn tool_calling_keys_are_vllms_flags_and_checked_as_vllm_checks_them() {
        use crate::tools::Parser;
        let m = load(&INLINE.replace(
            "    engine: fixed\n",
            "    engine: fixed\n    tool_call_parser: hermes\n    enable_auto_tool_choice: true\n",
        ))
        .unwrap();
        assert_eq!((m.models[1].tools.parser, m.models[1].tools.auto), (Some(Parser::Hermes), true));
        assert_eq!((m.models[0].tools.parser, m.models[0].tools.auto), (None, false), "off by default");
        let e = load(&INLINE.replace("    engine: fixed\n", "    engine: fixed\n    enable_auto_tool_choice: true\n"))
            .unwrap_err();
        assert!(e.contains("models[1].enable_auto_tool_choice: needs tool_call_parser"), "{e}");
        let e = load(&INLINE.replace("    engine: fixed\n", "    engine: fixed\n    tool_call_parser: hermez\n"))
            .unwrap_err();
        assert!(
            e.contains("models[1].tool_call_parser: `hermez` is not a parser llmsim writes")
                && e.contains("hermes, llama3_json"),
            "{e}"
        );
    }
}
