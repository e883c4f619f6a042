//! NVIDIA AIConfigurator's silicon CSV (`silicon_sample.csv`, its
//! `systems/` folder): one measured serving run a row, read as it is.
//!
//! Each row is a closed loop at fixed lengths: `batch_size` users (the
//! client's concurrency; per attention-DP rank where that is above 1),
//! `isl` prompt and `osl` output tokens, on `system` GPUs with `tp_size`
//! tensor parallelism, weights at `gemm_quant_mode`, and the measured mean
//! TTFT and TPOT (`silicon_ttft_ms`, `silicon_tpot_ms`; the file does not
//! say mean or median: they are read as means). `mode` is `agg` (one engine)
//! or `disagg` (prefill and decode pools, with their own `prefill_*` and
//! `decode_*` sizes). The mapping to a scenario is in
//! `calibrate/runs.rs` (`from_aic`); this module only reads and checks.

use std::path::{Path, PathBuf};

use llmsim_scenario::config::ConfigError;

/// Every column of the file, in its order.
pub const COLUMNS: [&str; 35] = [
    "id",
    "silicon_data_source",
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "prefill_batch_size",
    "prefill_num_workers",
    "prefill_tp_size",
    "prefill_pp_size",
    "prefill_attention_dp_size",
    "prefill_moe_tp_size",
    "prefill_moe_ep_size",
    "decode_batch_size",
    "decode_num_workers",
    "decode_tp_size",
    "decode_pp_size",
    "decode_attention_dp_size",
    "decode_moe_tp_size",
    "decode_moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
    // Not in every copy: a row's own note.
    "note",
];

/// Columns a file must have.
const REQUIRED: [&str; 13] = [
    "id",
    "backend",
    "model_path",
    "system",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "batch_size",
    "tp_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
    "silicon_data_source",
];

/// Requests a user sends in a run when nothing says otherwise: the
/// benchmark AIConfigurator generates for a deployment runs
/// `--request-count concurrency x 20` (`MULTI_ROUND`, its
/// `bench_run.sh` template), after warm-up requests that drain first.
pub const DEFAULT_ROUNDS: u32 = 20;

/// One of the file's `system` names.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct System {
    pub name: &'static str,
    /// The shipped hardware profile it is.
    pub hardware: &'static str,
    /// The GPUs a tensor-parallel group may span over NVLink (a node;
    /// GB200's NVL72 domain).
    pub node_gpus: u32,
    /// Whether the GPU has an FP4 peak (NVFP4 weights run there).
    pub fp4: bool,
}

const fn system(name: &'static str, hardware: &'static str, node_gpus: u32, fp4: bool) -> System {
    System { name, hardware, node_gpus, fp4 }
}

/// The systems the suites read.
pub const SYSTEMS: [System; 5] = [
    system("h100_sxm", "h100-80gb", 8, false),
    system("h200_sxm", "h200", 8, false),
    system("b200_sxm", "b200", 8, true),
    system("b300_sxm", "b300", 8, true),
    system("gb200", "gb200", 72, true),
];

/// How a row's weights are stored, as scenario keys.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Format {
    /// `model.weights.bytes_per_parameter` from `gemm_quant_mode` (the
    /// dense models and Qwen3's MoE, as fitted since the first suites).
    Bytes,
    /// `model.weights.dtype` from `gemm_quant_mode` (fp8, or 16 bits).
    Dtype,
    /// The preset's own checkpoint format (gpt-oss: MXFP4 experts beside
    /// 16-bit attention; the file says `nvfp4`, which gpt-oss does not ship).
    Preset,
    /// `int4_wo`: 16-bit attention, INT4 routed experts (Kimi-K2.5's
    /// checkpoint quantises only the experts).
    Int4Experts,
}

/// One of the file's `model_path` names (a Hugging Face repository).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Model {
    pub path: &'static str,
    /// The shipped model preset with the same shape.
    pub preset: &'static str,
    /// A mixture of experts (whose `moe_tp_size` and `moe_ep_size` then matter).
    pub moe: bool,
    /// How its weights are read.
    pub format: Format,
}

const fn model(path: &'static str, preset: &'static str, moe: bool, format: Format) -> Model {
    Model { path, preset, moe, format }
}

/// The models the suites read. Kimi-K2.5 is Kimi-K2's language model
/// (the same DeepSeek-V3 shape; its vision encoder is not counted) and
/// MiniMax-M2.5 has MiniMax-M2's: both are assumptions the file cannot
/// confirm (docs/calibration.md).
pub const MODELS: [Model; 13] = [
    model("meta-llama/Llama-3.1-8B", "llama-3.1-8b", false, Format::Bytes),
    model("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b", false, Format::Bytes),
    model("nvidia/Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b", false, Format::Bytes),
    model("meta-llama/Llama-3.1-70B", "llama-3.1-70b", false, Format::Bytes),
    model("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b", false, Format::Bytes),
    model("Qwen/Qwen3-32B", "qwen3-32b", false, Format::Bytes),
    model("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b", true, Format::Bytes),
    model("Qwen/Qwen3-235B-A22B-FP8", "qwen3-235b-a22b", true, Format::Bytes),
    model("deepseek-ai/DeepSeek-V3", "deepseek-v3", true, Format::Dtype),
    model("deepseek-ai/DeepSeek-R1", "deepseek-r1", true, Format::Dtype),
    model("moonshotai/Kimi-K2.5", "kimi-k2", true, Format::Int4Experts),
    model("MiniMaxAI/MiniMax-M2.5", "minimax-m2", true, Format::Dtype),
    model("openai/gpt-oss-120b", "gpt-oss-120b", true, Format::Preset),
];

/// Models llmsim cannot express yet, and why.
pub const UNSUPPORTED: [(&str, &str); 2] = [
    ("zhipuai/", "no GLM-5 preset: its sparse attention is not modelled"),
    ("Qwen/Qwen3.5", "Qwen3.5's hybrid attention (linear-attention layers) is not modelled"),
];

/// How a row is deployed, as llmsim's `parallelism` keys.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Layout {
    pub tensor: u32,
    /// Attention data parallelism (1 without).
    pub data: u32,
    /// Expert parallelism (1 without: experts split by TP).
    pub expert: u32,
    /// MoE tensor parallelism inside each expert group (`moe_tp_size`; 1: whole experts).
    pub expert_tensor: u32,
}

impl Layout {
    /// Tensor parallelism alone over `tensor` GPUs.
    pub fn tensor_only(tensor: u32) -> Layout {
        Layout { tensor, data: 1, expert: 1, expert_tensor: 1 }
    }

    pub fn gpus(&self) -> u32 {
        self.tensor * self.data
    }
}

/// One pool of a disaggregated run: its `prefill_*` or `decode_*`
/// columns (empty: not recorded; 0: does not apply, as in the agg columns).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Pool {
    /// Requests a data-parallel rank batches (`*_batch_size`): prompts in
    /// a prefill step, users a decode rank serves.
    pub batch_size: Option<u32>,
    /// Engines in the pool (`*_num_workers`).
    pub workers: Option<u32>,
    pub tp: Option<u32>,
    pub pp: Option<u32>,
    pub attention_dp: Option<u32>,
    pub moe_tp: Option<u32>,
    pub moe_ep: Option<u32>,
}

/// Which pool of a disaggregated run.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum PoolKind {
    Prefill,
    Decode,
}

impl PoolKind {
    /// The column prefix and the scenario's key: `prefill` or `decode`.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Prefill => "prefill",
            PoolKind::Decode => "decode",
        }
    }
}

/// A deployment's parallelism as llmsim's keys, or why it has none: `moe_ep`
/// must be the GPUs of `tp x attention_dp` (vLLM's and SGLang's expert
/// parallelism, TensorRT-LLM's `moe_ep` with `moe_tp` 1), or 1 with
/// `moe_tp = tp` and no data parallelism (experts split by TP). `node` is
/// the GPUs a tensor-parallel group may span.
fn layout_of(degrees: [Option<u32>; 4], moe: bool, node: u32) -> Result<Layout, String> {
    let [tp, dp, moe_tp, moe_ep] = degrees;
    let tensor = tp.unwrap_or(1);
    let data = dp.unwrap_or(1);
    let gpus = u64::from(tensor) * u64::from(data);
    // Data-parallel ranks and expert parallelism may span nodes (the
    // all-to-all then crosses the network); a tensor-parallel group
    // may not (its all-reduce is the NVLink's).
    if tensor > node {
        return Err(format!(
            "TP {tensor} spans more than one {node}-GPU node: all-reduces between nodes are not modelled"
        ));
    }
    if !moe {
        if data > 1 {
            return Err(format!("data-parallel attention {data} of a dense model is replicas, not one engine"));
        }
        return Ok(Layout { tensor, data, expert: 1, expert_tensor: 1 });
    }
    let (moe_tp, moe_ep) = (moe_tp.unwrap_or(tensor), moe_ep.unwrap_or(1));
    if moe_ep > 1 {
        // Expert parallelism over every GPU, or groups of `moe_tp`
        // GPUs splitting their experts (without data parallelism).
        let spans = u64::from(moe_ep) * u64::from(moe_tp) == gpus;
        if !spans || (moe_tp > 1 && data > 1) {
            return Err(format!(
                "MoE tensor parallelism {moe_tp} x expert parallelism {moe_ep} over TP {tensor} x DP {data}: \
                 only expert parallelism over every GPU, or MoE tensor parallelism inside it without data \
                 parallelism, is modelled"
            ));
        }
        return Ok(Layout { tensor, data, expert: moe_ep, expert_tensor: moe_tp });
    }
    if data > 1 || moe_tp != tensor {
        return Err(format!(
            "MoE tensor parallelism {moe_tp} differs from attention's {tensor} x DP {data}: only experts split \
             like attention, or spread by expert parallelism, are modelled"
        ));
    }
    Ok(Layout::tensor_only(tensor))
}

impl Pool {
    /// The pool's engine as llmsim's `parallelism` keys (`layout_of`).
    pub fn layout(&self, moe: bool, node: u32) -> Result<Layout, String> {
        layout_of([self.tp, self.attention_dp, self.moe_tp, self.moe_ep], moe, node)
    }
}

impl AicRow {
    /// The source family of the row: the first field of
    /// `silicon_data_source` (`db-dump/...`, `source_file=...`), a path
    /// shortened to its file name.
    pub fn family(&self) -> String {
        let first = self.data_source.split(';').next().unwrap_or("").trim();
        match first.rsplit_once('/') {
            Some((head, tail)) if head.contains('=') => {
                format!("{}{tail}", &head[..=head.find('=').unwrap_or(0)])
            }
            _ => first.to_string(),
        }
    }

    /// Why llmsim cannot simulate this run, if it cannot.
    pub fn unsupported(&self) -> Option<String> {
        if let Some((_, why)) = UNSUPPORTED.iter().find(|(p, _)| self.model_path.starts_with(p)) {
            return Some((*why).to_string());
        }
        let Some(model) = self.model() else {
            return Some(format!("no model preset for `{}`", self.model_path));
        };
        let Some(system) = self.system() else {
            return Some(format!("no hardware profile for `{}`", self.system));
        };
        if self.mode == "disagg" {
            if let Some(why) = self.pools_unsupported(model.moe) {
                return Some(why);
            }
        } else if self.pp.unwrap_or(1) > 1 {
            return Some(format!(
                "pipeline parallelism {} is not read from this file yet (the sample holds no such row to check \
                 the mapping against)",
                self.pp.unwrap_or(1)
            ));
        }
        if self.mode == "agg"
            && let Err(why) = self.layout(model.moe)
        {
            return Some(why);
        }
        match self.gemm_quant_mode.as_str() {
            "" | "fp8" | "fp8_block" | "int4_wo" => None,
            "nvfp4" if self.format() == Some(Format::Preset) => None,
            "nvfp4" if system.fp4 => None,
            "nvfp4" => Some("NVFP4 weights on a GPU without an FP4 peak (Hopper) are not modelled".into()),
            q => Some(format!("weights quantised as `{q}` are not modelled")),
        }
    }

    /// The row's parallelism as llmsim's keys, or why it has none
    /// (`layout_of`; an agg row's columns).
    pub fn layout(&self, moe: bool) -> Result<Layout, String> {
        layout_of([self.tp, self.attention_dp, self.moe_tp, self.moe_ep], moe, self.node_gpus())
    }

    /// The GPUs a tensor-parallel group of its system may span (8 without a profile).
    pub fn node_gpus(&self) -> u32 {
        self.system().map_or(8, |s| s.node_gpus)
    }

    /// A disaggregated run's pool.
    pub fn pool(&self, kind: PoolKind) -> &Pool {
        match kind {
            PoolKind::Prefill => &self.prefill,
            PoolKind::Decode => &self.decode,
        }
    }

    /// The client's users: `batch_size x attention_dp_size` of an agg row;
    /// a disaggregated row's decode pool full, `decode_batch_size x
    /// decode_attention_dp_size x decode_num_workers` (the
    /// `silicon_concurrency` of every such row that records one).
    pub fn users(&self) -> Option<u64> {
        if self.mode == "disagg" {
            let d = &self.decode;
            return Some(u64::from(d.batch_size?) * u64::from(d.attention_dp.unwrap_or(1)) * u64::from(d.workers?));
        }
        Some(u64::from(self.batch_size?) * u64::from(self.attention_dp.unwrap_or(1)))
    }

    /// Why a disaggregated row's pools cannot be run (None: they can).
    fn pools_unsupported(&self, moe: bool) -> Option<String> {
        for kind in [PoolKind::Prefill, PoolKind::Decode] {
            let p = self.pool(kind);
            let name = kind.name();
            if p.workers.is_none() || p.batch_size.is_none() {
                return Some(
                    "disaggregated, without its pools' worker counts and batch sizes: how many engines ran is not \
                     recorded"
                        .into(),
                );
            }
            if p.pp.unwrap_or(1) > 1 {
                return Some(format!(
                    "the {name} pool's pipeline parallelism {} is not read from this file yet",
                    p.pp.unwrap_or(1)
                ));
            }
            if let Err(why) = p.layout(moe, self.node_gpus()) {
                return Some(format!("the {name} pool: {why}"));
            }
        }
        None
    }

    /// Its model's entry in [`MODELS`] (None: no preset).
    pub fn model(&self) -> Option<&'static Model> {
        MODELS.iter().find(|m| m.path == self.model_path)
    }

    /// Its system's entry in [`SYSTEMS`] (None: no hardware profile).
    pub fn system(&self) -> Option<&'static System> {
        SYSTEMS.iter().find(|s| s.name == self.system)
    }

    /// Whether its model is a mixture of experts (false without a preset).
    pub fn moe(&self) -> bool {
        self.model().is_some_and(|m| m.moe)
    }

    /// How the row's weights are read (None: no preset).
    pub fn format(&self) -> Option<Format> {
        self.model().map(|m| m.format)
    }

    /// Whether the row is of a kind the fidelity suites predict without
    /// fitting on it: a model with MLA, sliding windows or a format of its
    /// own, or expert or data parallelism.
    pub fn frontier(&self) -> bool {
        let layout = self.format().and_then(|_| self.layout(self.moe()).ok());
        self.format().is_some_and(|f| f != Format::Bytes) || layout.is_some_and(|l| l.data > 1 || l.expert > 1)
    }

    /// Bytes a weight takes at its quantisation.
    pub fn bytes_per_parameter(&self) -> f64 {
        match self.gemm_quant_mode.as_str() {
            "" => 2.0,
            "int4_wo" | "nvfp4" => 0.5,
            _ => 1.0,
        }
    }

    pub fn preset(&self) -> Option<&'static str> {
        self.model().map(|m| m.preset)
    }

    pub fn hardware(&self) -> Option<&'static str> {
        self.system().map(|s| s.hardware)
    }
}

/// Whether CSV header fields are AIConfigurator's silicon columns.
pub fn looks_like_aic(headers: &[&str]) -> bool {
    headers.contains(&"silicon_ttft_ms") && headers.contains(&"model_path")
}

/// One measured run.
#[derive(Clone, Debug, PartialEq)]
pub struct AicRow {
    /// 1-based line in the file.
    pub line: usize,
    pub id: String,
    pub data_source: String,
    pub backend: String,
    pub backend_version: String,
    pub model_path: String,
    pub system: String,
    /// `agg` or `disagg`.
    pub mode: String,
    pub isl: u32,
    pub osl: u32,
    /// Empty: 16-bit weights.
    pub gemm_quant_mode: String,
    pub moe_quant_mode: String,
    /// The client's concurrency (agg; per attention-DP rank).
    pub batch_size: Option<u32>,
    pub tp: Option<u32>,
    pub pp: Option<u32>,
    pub attention_dp: Option<u32>,
    pub moe_tp: Option<u32>,
    pub moe_ep: Option<u32>,
    /// A disaggregated run's pools (every field empty in an agg row).
    pub prefill: Pool,
    pub decode: Pool,
    pub ttft_ms: f64,
    pub tpot_ms: f64,
}

/// A row filter: `column=value|value...` (any of the values).
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    pub column: String,
    pub values: Vec<String>,
}

impl Filter {
    /// Parses `COLUMN=V1|V2`, naming the columns allowed when it is wrong.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let (c, v) = text.split_once('=').ok_or_else(|| {
            format!("--where `{text}`: give COLUMN=VALUE (several values as V1|V2), e.g. system=h200_sxm")
        })?;
        let column = c.trim();
        if !COLUMNS.contains(&column) {
            let near = llmsim_core::util::nearest(column, COLUMNS.iter().copied())
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err(format!(
                "--where `{column}` is not a column of the AIConfigurator silicon CSV{near}; columns: {}",
                COLUMNS.join(", ")
            ));
        }
        let values: Vec<String> = v.split('|').map(|s| s.trim().to_string()).collect();
        Ok(Filter { column: column.to_string(), values })
    }

    fn keeps(&self, row: &[(&str, &str)]) -> bool {
        row.iter().find(|(c, _)| *c == self.column).is_some_and(|(_, v)| self.values.iter().any(|w| w == v))
    }
}

/// The rows of a file that pass every filter.
#[derive(Clone, Debug, PartialEq)]
pub struct AicFile {
    pub file: PathBuf,
    pub rows: Vec<AicRow>,
    /// Rows the filters left out.
    pub filtered_out: usize,
}

/// Parses a silicon CSV's text; `file` names it in errors.
pub fn parse(text: &str, file: &Path, filters: &[Filter]) -> Result<AicFile, ConfigError> {
    // `#` lines are comments: a transcription says where its rows came from.
    let mut reader = csv::ReaderBuilder::new().comment(Some(b'#')).from_reader(text.as_bytes());
    let headers =
        reader.headers().map_err(|e| ConfigError::new(file, "header", format!("unreadable CSV header: {e}")))?.clone();
    let names: Vec<&str> = headers.iter().collect();
    for (i, h) in names.iter().enumerate() {
        if !COLUMNS.contains(h) {
            let near = llmsim_core::util::nearest(h, COLUMNS.iter().copied())
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err(ConfigError::new(
                file,
                format!("header, column {}", i + 1),
                format!("`{h}` is not a column of the AIConfigurator silicon CSV{near}"),
            ));
        }
        if names[..i].contains(h) {
            return Err(ConfigError::new(file, format!("header, column {}", i + 1), format!("`{h}` twice")));
        }
    }
    if let Some(missing) = REQUIRED.iter().find(|c| !names.contains(c)) {
        return Err(ConfigError::new(file, "header", format!("no `{missing}` column: a silicon CSV needs it")));
    }
    let mut rows = Vec::new();
    let mut filtered_out = 0;
    let mut ids = std::collections::BTreeSet::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| ConfigError::new(file, format!("row {}", i + 2), e.to_string()))?;
        let line = record.position().map_or(i + 2, |p| p.line() as usize);
        let cells: Vec<(&str, &str)> = names.iter().copied().zip(record.iter()).collect();
        if !filters.iter().all(|f| f.keeps(&cells)) {
            filtered_out += 1;
            continue;
        }
        let row = row(&cells, file, line)?;
        if !ids.insert(row.id.clone()) {
            return Err(ConfigError::new(file, format!("line {line}, column id"), format!("`{}` twice", row.id)));
        }
        rows.push(row);
    }
    Ok(AicFile { file: file.to_path_buf(), rows, filtered_out })
}

fn row(cells: &[(&str, &str)], file: &Path, line: usize) -> Result<AicRow, ConfigError> {
    let text = |c: &str| cells.iter().find(|(n, _)| *n == c).map_or("", |(_, v)| v.trim()).to_string();
    let at = |c: &str| format!("line {line}, column {c}");
    let count = |c: &str, max: u64| -> Result<Option<u32>, ConfigError> {
        let v = text(c);
        if v.is_empty() {
            return Ok(None);
        }
        v.parse::<u64>()
            .ok()
            .filter(|x| *x >= 1 && *x <= max)
            .map(|x| Some(x as u32))
            .ok_or_else(|| ConfigError::new(file, at(c), format!("`{v}` is not a whole number from 1 to {max}")))
    };
    // The file writes 0 for a degree that does not apply (a dense model's
    // MoE sizes): read as not given.
    let unused_zero = |c: &str| if text(c) == "0" { Ok(None) } else { count(c, 4096) };
    let required = |c: &str, max: u64| -> Result<u32, ConfigError> {
        count(c, max)?.ok_or_else(|| ConfigError::new(file, at(c), "empty: the run needs it"))
    };
    let ms = |c: &str| -> Result<f64, ConfigError> {
        let v = text(c);
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x > 0.0 && *x < 1e9)
            .ok_or_else(|| ConfigError::new(file, at(c), format!("`{v}` is not a positive number of milliseconds")))
    };
    let pool = |kind: PoolKind| -> Result<Pool, ConfigError> {
        let c = |what: &str| format!("{}_{what}", kind.name());
        Ok(Pool {
            batch_size: count(&c("batch_size"), 1_000_000)?,
            workers: count(&c("num_workers"), 4096)?,
            tp: unused_zero(&c("tp_size"))?,
            pp: unused_zero(&c("pp_size"))?,
            attention_dp: unused_zero(&c("attention_dp_size"))?,
            moe_tp: unused_zero(&c("moe_tp_size"))?,
            moe_ep: unused_zero(&c("moe_ep_size"))?,
        })
    };
    let id = text("id");
    if id.is_empty() {
        return Err(ConfigError::new(file, at("id"), "empty: every run needs an id"));
    }
    let mode = text("mode");
    if !matches!(mode.as_str(), "agg" | "disagg") {
        return Err(ConfigError::new(file, at("mode"), format!("`{mode}` is neither agg nor disagg")));
    }
    let batch_size = count("batch_size", 1_000_000)?;
    if mode == "agg" && batch_size.is_none() {
        return Err(ConfigError::new(file, at("batch_size"), "empty: an agg run needs its concurrency"));
    }
    Ok(AicRow {
        line,
        data_source: text("silicon_data_source"),
        backend: text("backend"),
        backend_version: text("backend_version"),
        model_path: text("model_path"),
        system: text("system"),
        isl: required("isl", 100_000_000)?,
        osl: required("osl", 100_000_000)?,
        gemm_quant_mode: text("gemm_quant_mode"),
        moe_quant_mode: text("moe_quant_mode"),
        batch_size,
        tp: count("tp_size", 4096)?,
        pp: count("pp_size", 4096)?,
        attention_dp: unused_zero("attention_dp_size")?,
        moe_tp: unused_zero("moe_tp_size")?,
        moe_ep: unused_zero("moe_ep_size")?,
        prefill: pool(PoolKind::Prefill)?,
        decode: pool(PoolKind::Decode)?,
        ttft_ms: ms("silicon_ttft_ms")?,
        tpot_ms: ms("silicon_tpot_ms")?,
        mode,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,\
        gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,\
        prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,\
        prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,\
        decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms";

    fn one(row: &str) -> Result<AicFile, String> {
        parse(&format!("{HEAD}\n{row}\n"), Path::new("aic.csv"), &[]).map_err(|e| e.to_string())
    }

    const GOOD: &str = "r1,db,vllm,0.19.0,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,1024,1024,fp8,fp8,16,4,1,1,4,1,\
        ,,,,,,,,,,,,,,126.2,10.94";

    /// The table's node sizes are the shipped hardware profiles'
    /// `gpus_per_node` (8 when a profile does not say): read from the
    /// profiles' own text, so a profile that changes fails here.
    #[test]
    fn each_system_spans_its_hardware_profiles_node() {
        use llmsim_scenario::config::hardware::BUILTIN;
        for s in SYSTEMS {
            let text = BUILTIN.iter().find(|(name, _)| *name == s.hardware).map(|(_, t)| *t);
            let text = text.unwrap_or_else(|| panic!("{}: no shipped hardware profile `{}`", s.name, s.hardware));
            let profile: llmsim_scenario::yaml::Value = llmsim_scenario::yaml::from_str(text).unwrap();
            let node = profile.get("gpus_per_node").map_or(8, |v| v.as_u64().expect("a whole number"));
            assert_eq!(u64::from(s.node_gpus), node, "{} ({})", s.name, s.hardware);
        }
    }

    #[test]
    fn a_row_reads_as_written() {
        let f = one(GOOD).unwrap();
        let r = &f.rows[0];
        assert_eq!((r.isl, r.osl, r.batch_size, r.tp, r.moe_ep), (1024, 1024, Some(16), Some(4), Some(1)));
        assert_eq!((r.ttft_ms, r.tpot_ms), (126.2, 10.94));
        assert_eq!((r.system.as_str(), r.backend.as_str(), r.line), ("h200_sxm", "vllm", 2));
    }

    /// A row of `model` at `quant`, `tp`, `dp`, `moe_tp` and `moe_ep` (empty: not given).
    fn shaped(model: &str, quant: &str, shape: [&str; 4]) -> AicRow {
        let [tp, dp, mtp, ep] = shape;
        let row = format!(
            "r,db,vllm,0.19.0,{model},h200_sxm,fp8,agg,1024,1024,{quant},{quant},16,{tp},1,{dp},{mtp},{ep},\
            ,,,,,,,,,,,,,,126.2,10.94"
        );
        one(&row).unwrap().rows.remove(0)
    }

    #[test]
    fn expert_and_data_parallelism_read_as_the_engine_s_keys() {
        let ds = |shape| shaped("deepseek-ai/DeepSeek-R1", "fp8", shape);
        let layout = |r: &AicRow| r.layout(r.moe());
        assert_eq!(layout(&ds(["1", "8", "1", "8"])), Ok(Layout { tensor: 1, data: 8, expert: 8, expert_tensor: 1 }));
        assert_eq!(layout(&ds(["8", "1", "1", "8"])), Ok(Layout { tensor: 8, data: 1, expert: 8, expert_tensor: 1 }));
        assert_eq!(layout(&ds(["8", "1", "8", "1"])), Ok(Layout { tensor: 8, data: 1, expert: 1, expert_tensor: 1 }));
        // MLA: held out even at plain TP; a dense FP8 model at TP 4 is not
        assert!(ds(["8", "1", "8", "1"]).frontier());
        assert!(ds(["8", "1", "8", "1"]).unsupported().is_none());
        let llama = |shape| shaped("meta-llama/Llama-3.1-70B", "fp8", shape);
        assert!(!llama(["4", "1", "4", "1"]).frontier());
        let why = |r: AicRow| r.unsupported().unwrap_or_default();
        assert!(why(ds(["64", "1", "8", "8"])).contains("more than one 8-GPU node"));
        // data-parallel ranks and experts across nodes: the all-to-all crosses the network
        assert_eq!(
            layout(&ds(["1", "64", "1", "64"])),
            Ok(Layout { tensor: 1, data: 64, expert: 64, expert_tensor: 1 })
        );
        assert!(why(ds(["1", "64", "8", "8"])).contains("only expert parallelism over every GPU"));
        // MoE tensor parallelism 2 inside expert parallelism 2 over TP 4; not beside data parallelism
        assert_eq!(layout(&ds(["4", "1", "2", "2"])), Ok(Layout { tensor: 4, data: 1, expert: 2, expert_tensor: 2 }));
        assert!(why(ds(["2", "2", "2", "2"])).contains("only expert parallelism over every GPU"));
        assert!(why(ds(["4", "1", "2", "4"])).contains("only expert parallelism over every GPU"));
        assert!(why(ds(["2", "2", "4", "1"])).contains("MoE tensor parallelism 4"));
        assert!(why(llama(["4", "2", "4", "1"])).contains("of a dense model"));
        // a Qwen3 MoE split like attention stays in the fit; with EP it is held out
        let qwen = |shape| shaped("Qwen/Qwen3-235B-A22B-FP8", "fp8_block", shape);
        assert_eq!(layout(&qwen(["2", "", "2", "1"])), Ok(Layout { tensor: 2, data: 1, expert: 1, expert_tensor: 1 }));
        assert!(!qwen(["2", "", "2", "1"]).frontier());
        assert!(qwen(["4", "", "1", "4"]).frontier());
        // gpt-oss's `nvfp4` is its own MXFP4 checkpoint; a dense NVFP4 model on Hopper is not run
        assert!(shaped("openai/gpt-oss-120b", "nvfp4", ["2", "1", "2", "1"]).unsupported().is_none());
        assert!(why(shaped("meta-llama/Llama-3.1-70B", "nvfp4", ["4", "1", "4", "1"])).contains("NVFP4"));
        assert!(why(shaped("zhipuai/GLM-5", "fp8", ["8", "1", "8", "1"])).contains("GLM-5"));
        let mut pp = ds(["8", "1", "8", "1"]);
        pp.pp = Some(2);
        assert!(why(pp).contains("pipeline parallelism 2 is not read"));
    }

    #[test]
    fn blackwell_systems_take_nvfp4_and_gb200_spans_its_nvlink_domain() {
        let on = |system: &str, model: &str, quant: &str, shape: [&str; 4]| {
            let mut r = shaped(model, quant, shape);
            r.system = system.to_string();
            r
        };
        let llama = "meta-llama/Llama-3.1-70B";
        assert!(on("b200_sxm", llama, "nvfp4", ["4", "1", "4", "1"]).unsupported().is_none());
        assert!(on("h100_sxm", llama, "nvfp4", ["4", "1", "4", "1"]).unsupported().unwrap().contains("FP4 peak"));
        let ds = "deepseek-ai/DeepSeek-R1";
        let gb = on("gb200", ds, "nvfp4", ["36", "1", "36", "1"]);
        assert_eq!(gb.layout(true), Ok(Layout { tensor: 36, data: 1, expert: 1, expert_tensor: 1 }));
        assert!(on("gb200", ds, "nvfp4", ["144", "1", "1", "144"]).unsupported().unwrap().contains("72-GPU node"));
        // two NVL72 racks of data-parallel ranks: the all-to-all crosses the network
        assert_eq!(
            on("gb200", ds, "nvfp4", ["72", "2", "1", "144"]).layout(true),
            Ok(Layout { tensor: 72, data: 2, expert: 144, expert_tensor: 1 })
        );
        assert!(on("b200_sxm", ds, "fp8", ["16", "1", "4", "4"]).unsupported().unwrap().contains("8-GPU node"));
        assert_eq!(
            on("gb300", ds, "fp8", ["8", "1", "8", "1"]).unsupported().unwrap(),
            "no hardware profile for `gb300`"
        );
        assert_eq!(on("b300_sxm", ds, "fp8", ["8", "1", "8", "1"]).hardware(), Some("b300"));
        // the file's 0 for a degree that does not apply reads as not given
        let r = shaped("Qwen/Qwen3-32B", "", ["2", "0", "0", "0"]);
        assert_eq!((r.attention_dp, r.moe_tp, r.moe_ep), (None, None, None));
        assert_eq!(r.layout(false), Ok(Layout { tensor: 2, data: 1, expert: 1, expert_tensor: 1 }));
        assert!(one(&GOOD.replace(",16,4,1,1,4,1,", ",16,0,1,1,4,1,")).unwrap_err().contains("column tp_size"));
    }

    #[test]
    fn filters_keep_matching_rows() {
        let text = format!("{HEAD}\n{GOOD}\n{}\n", GOOD.replace("r1,", "r2,").replace("h200_sxm", "h100_sxm"));
        let keep = |w: &str| parse(&text, Path::new("a.csv"), &[Filter::parse(w).unwrap()]).unwrap();
        assert_eq!(keep("system=h100_sxm").rows.len(), 1);
        assert_eq!(keep("system=h100_sxm|h200_sxm").rows.len(), 2);
        assert_eq!(keep("backend=sglang").filtered_out, 2);
        assert!(Filter::parse("sytem=h100").unwrap_err().contains("did you mean `system`"));
        assert!(Filter::parse("system").unwrap_err().contains("COLUMN=VALUE"));
    }

    /// A disaggregated row: DeepSeek-V3 on 2 prefill engines at DP 8 / EP 8
    /// and 7 decode engines at TP 8 / EP 8 of 16 users (the file's
    /// cfg328 shape); empty pool columns are not recorded.
    fn disagg(workers: &str) -> AicRow {
        let row = format!(
            "d,db,trtllm,1,deepseek-ai/DeepSeek-V3,h200_sxm,fp8,disagg,1024,1024,fp8,fp8,,,,,,,\
            1,{workers},1,1,8,1,8,16,7,8,1,1,1,8,900,30"
        );
        one(&row).unwrap().rows.remove(0)
    }

    #[test]
    fn a_disaggregated_row_reads_its_pools() {
        let r = disagg("2");
        let p = Pool {
            batch_size: Some(1),
            workers: Some(2),
            tp: Some(1),
            pp: Some(1),
            attention_dp: Some(8),
            moe_tp: Some(1),
            moe_ep: Some(8),
        };
        assert_eq!(r.prefill, p);
        assert_eq!(
            (r.decode.batch_size, r.decode.workers, r.decode.tp, r.decode.moe_ep),
            (Some(16), Some(7), Some(8), Some(8))
        );
        assert_eq!((r.batch_size, r.tp), (None, None), "no agg columns");
        // 16 users a decode engine x 7 engines
        assert_eq!(r.users(), Some(112));
        assert_eq!(r.unsupported(), None);
        let l = |p: &Pool| p.layout(true, 8).unwrap();
        assert_eq!(l(&r.prefill), Layout { tensor: 1, data: 8, expert: 8, expert_tensor: 1 });
        assert_eq!(l(&r.decode), Layout { tensor: 8, data: 1, expert: 8, expert_tensor: 1 });
        // without worker counts, how many engines ran is unknown
        let r = disagg("");
        assert!(r.unsupported().is_some_and(|w| w.contains("worker counts")), "{:?}", r.unsupported());
        assert_eq!(r.users(), Some(112), "the decode pool's are recorded");
        // an agg row has no pools
        let a = one(GOOD).unwrap().rows.remove(0);
        assert_eq!((a.prefill, a.decode), (Pool::default(), Pool::default()));
        assert_eq!(a.users(), Some(16));
    }

    #[test]
    fn bad_input_names_file_line_and_column() {
        let unknown = format!("{HEAD},extra\n{GOOD},1\n");
        let e = parse(&unknown, Path::new("aic.csv"), &[]).unwrap_err().to_string();
        assert!(e.contains("aic.csv") && e.contains("column 35") && e.contains("`extra`"), "{e}");
        let cases = [
            (GOOD.replace("126.2", "NaN"), "line 2, column silicon_ttft_ms"),
            (GOOD.replace("10.94", "-1"), "column silicon_tpot_ms"),
            (GOOD.replace(",16,4,", ",abc,4,"), "column batch_size"),
            (GOOD.replace(",16,4,", ",,4,"), "an agg run needs its concurrency"),
            (GOOD.replace(",agg,", ",mixed,"), "neither agg nor disagg"),
            (GOOD.replace(",1024,1024,", ",0,1024,"), "column isl"),
            (GOOD.replace("r1,", ","), "column id"),
            (
                GOOD.replace(
                    "1,4,1,\
        ,,",
                    "1,4,1,\
        x,,",
                ),
                "line 2, column prefill_batch_size",
            ),
            (GOOD.replace(",,,,126.2", ",,-2,,126.2"), "line 2, column decode_moe_tp_size"),
        ];
        for (row, want) in cases {
            let e = one(&row).unwrap_err();
            assert!(e.contains(want) && e.contains("aic.csv"), "{row}: {e}");
        }
        let twice = format!("{HEAD}\n{GOOD}\n{GOOD}\n");
        assert!(parse(&twice, Path::new("a.csv"), &[]).unwrap_err().to_string().contains("`r1` twice"));
        let missing = "id,model_path,silicon_ttft_ms\nx,y,1\n";
        assert!(parse(missing, Path::new("a.csv"), &[]).unwrap_err().to_string().contains("no `backend` column"));
    }
}
