//! Where a model's architecture comes from: written inline
//! (`model.architecture`), read from a Hugging Face `config.json`
//! (`model.hf_config: FILE`), or a model file by name (`model: NAME`, a
//! file `models/NAME.yml` in the scenario's directory or one above it, else
//! one of the files of `scenarios/models/` compiled into the binary).
//! All three end in the same checks (docs/deployments.md).

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::ConfigError;
use super::check::Check;
use super::presets::{Shelf, Unknown};
use super::raw::{RawArchitecture, RawModelFile};
use super::schema;
use llmsim_core::engine::arch::{Architecture, Mla};

/// Where an architecture was read from.
#[derive(Clone, Debug, PartialEq)]
pub enum ArchitectureOrigin {
    Inline,
    Preset { name: String, file: PathBuf, source: Option<String> },
    HfConfig { file: PathBuf },
}

impl ArchitectureOrigin {
    pub fn describe(&self) -> String {
        match self {
            ArchitectureOrigin::Inline => "model.architecture".into(),
            ArchitectureOrigin::Preset { name, file, source } => {
                let from = source.as_ref().map(|s| format!("; figures from {s}")).unwrap_or_default();
                format!("model `{name}` ({}{from})", file.display())
            }
            ArchitectureOrigin::HfConfig { file } => format!("model.hf_config {}", file.display()),
        }
    }
}

/// The shipped model files, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("codellama-34b", include_str!("../../../../scenarios/models/codellama-34b.yml")),
    ("deepseek-r1", include_str!("../../../../scenarios/models/deepseek-r1.yml")),
    ("deepseek-v3", include_str!("../../../../scenarios/models/deepseek-v3.yml")),
    ("gpt-oss-120b", include_str!("../../../../scenarios/models/gpt-oss-120b.yml")),
    ("gpt-oss-20b", include_str!("../../../../scenarios/models/gpt-oss-20b.yml")),
    ("kimi-k2", include_str!("../../../../scenarios/models/kimi-k2.yml")),
    ("llama-2-70b", include_str!("../../../../scenarios/models/llama-2-70b.yml")),
    ("llama-2-7b", include_str!("../../../../scenarios/models/llama-2-7b.yml")),
    ("llama-3.1-405b", include_str!("../../../../scenarios/models/llama-3.1-405b.yml")),
    ("llama-3.1-70b", include_str!("../../../../scenarios/models/llama-3.1-70b.yml")),
    ("llama-3.1-8b", include_str!("../../../../scenarios/models/llama-3.1-8b.yml")),
    ("llama-3.2-1b", include_str!("../../../../scenarios/models/llama-3.2-1b.yml")),
    ("minimax-m2", include_str!("../../../../scenarios/models/minimax-m2.yml")),
    ("mistral-7b", include_str!("../../../../scenarios/models/mistral-7b.yml")),
    ("mixtral-8x7b", include_str!("../../../../scenarios/models/mixtral-8x7b.yml")),
    ("qwen2.5-72b", include_str!("../../../../scenarios/models/qwen2.5-72b.yml")),
    ("qwen2.5-7b", include_str!("../../../../scenarios/models/qwen2.5-7b.yml")),
    ("qwen3-235b-a22b", include_str!("../../../../scenarios/models/qwen3-235b-a22b.yml")),
    ("qwen3-30b-a3b", include_str!("../../../../scenarios/models/qwen3-30b-a3b.yml")),
    ("qwen3-32b", include_str!("../../../../scenarios/models/qwen3-32b.yml")),
];

/// Most parameters a model may have (a thousand times the largest open
/// model), so every count fits `u64` with room to spare.
pub const MAX_PARAMETERS: f64 = 1e15;

/// An architecture and what its source says besides.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub name: Option<String>,
    /// `max_position_embeddings` (or a model file's `context_length`).
    pub context_length: Option<u32>,
    pub architecture: Architecture,
    pub origin: ArchitectureOrigin,
    /// A model file's checkpoint format: `(dtype, expert_dtype)` as
    /// written (checked by the deployment, naming the file).
    pub formats: (Option<String>, Option<String>),
}

/// `model.architecture` written in the scenario.
pub(crate) fn inline(ck: &Check, raw: &RawArchitecture) -> Result<Resolved, ConfigError> {
    let architecture = validate(ck, raw, &|k| format!("model.architecture.{k}"))?;
    Ok(Resolved {
        name: None,
        context_length: None,
        architecture,
        origin: ArchitectureOrigin::Inline,
        formats: (None, None),
    })
}

/// `model: NAME`: a model file found from the scenario's directory.
pub(crate) fn preset(ck: &Check, name: &str) -> Result<Resolved, ConfigError> {
    let (file, text) = find(name, ck.file)?;
    let raw: RawModelFile = super::parse_str(&text, &file)?;
    let fck = Check { file: &file };
    let architecture = validate(&fck, &raw.architecture, &|k| format!("architecture.{k}"))?;
    Ok(Resolved {
        formats: (raw.weights.dtype, raw.weights.expert_dtype),
        name: Some(raw.name.unwrap_or_else(|| name.to_string())),
        context_length: Some(fck.whole32(
            "context_length",
            raw.context_length,
            schema::range("model.context_length"),
        )?),
        architecture,
        origin: ArchitectureOrigin::Preset { name: name.to_string(), file, source: raw.source },
    })
}

/// `model.hf_config: FILE`, relative to the scenario. `kv_given`: the
/// scenario gives `kv_cache.bytes_per_token`, which makes attention kinds
/// the KV formula does not describe acceptable.
/// `weights_given`: the scenario names the weights' format or bytes, so a
/// `quantization_config` llmsim cannot read does not matter.
pub(crate) fn hf_config(ck: &Check, rel: &str, kv_given: bool, weights_given: bool) -> Result<Resolved, ConfigError> {
    let file = ck.file.parent().unwrap_or(Path::new("")).join(rel);
    let text = crate::input::read_text(crate::input::Kind::HfConfig, &file)?;
    let root: Json = serde_json::from_str(&text).map_err(|e| {
        ConfigError::new(&file, "", format!("not a JSON file (a Hugging Face config.json is JSON): {e}"))
    })?;
    let Json::Object(top) = &root else {
        return Err(ConfigError::new(&file, "", "expected a JSON object (a Hugging Face config.json)"));
    };
    // Multimodal configs keep the language model under `text_config`.
    let (obj, prefix) = match top.get("text_config") {
        Some(Json::Object(t)) if !top.contains_key("num_hidden_layers") => (t, "text_config."),
        _ => (top, ""),
    };
    let hf = Hf { obj, file: &file, prefix };
    hf.refuse_unsupported(kv_given)?;
    let (raw, names) = hf.architecture()?;
    let fck = Check { file: &file };
    let architecture = validate(&fck, &raw, &|k| names.hf_name(k, prefix))?;
    let context_length = hf
        .int("max_position_embeddings")?
        .map(|v| fck.whole32(&format!("{prefix}max_position_embeddings"), v, schema::range("model.context_length")))
        .transpose()?;
    let name = file.parent().and_then(|d| d.file_name()).map(|d| d.to_string_lossy().into_owned());
    let formats = if weights_given { (None, None) } else { hf.quantization(top)? };
    Ok(Resolved { name, context_length, architecture, origin: ArchitectureOrigin::HfConfig { file }, formats })
}

/// Checks a raw architecture and fills its defaults. `key` names a field
/// (our name) as the source spells it.
pub(crate) fn validate(
    ck: &Check,
    raw: &RawArchitecture,
    key: &dyn Fn(&str) -> String,
) -> Result<Architecture, ConfigError> {
    // The source may spell a key otherwise (an HF config); the range is ours.
    let range = |name: &str| arch_range(name);
    let required = |name: &str, v: Option<i64>| -> Result<u64, ConfigError> {
        match v {
            Some(v) => ck.whole(&key(name), v, range(name)),
            None => Err(ck.err(&key(name), "missing: the architecture needs it")),
        }
    };
    let optional = |name: &str, v: Option<i64>| -> Result<Option<u64>, ConfigError> {
        v.map(|v| ck.whole(&key(name), v, range(name))).transpose()
    };
    let layers = required("layers", raw.layers)?;
    let hidden_size = required("hidden_size", raw.hidden_size)?;
    let attention_heads = required("attention_heads", raw.attention_heads)?;
    let vocab_size = required("vocab_size", raw.vocab_size)?;
    let mla = mla(ck, raw, key)?;
    let kv_heads = optional("kv_heads", raw.kv_heads)?.unwrap_or(attention_heads);
    // MLA has no KV heads of its own: every head reads the one latent.
    let kv_heads = if mla.is_some() { attention_heads } else { kv_heads };
    if kv_heads > attention_heads || !attention_heads.is_multiple_of(kv_heads) {
        return Err(ck.err(
            &key("kv_heads"),
            format!(
                "{kv_heads} is not allowed: the {attention_heads} attention heads must be a whole multiple \
                 of the KV heads (grouped-query attention)"
            ),
        ));
    }
    let given_head_dim = optional("head_dim", raw.head_dim)?;
    let head_dim = match mla.as_ref().map(|m| m.qk_nope_head_dim + m.qk_rope_head_dim).or(given_head_dim) {
        // MLA: a query and key head is its two parts; `head_dim` is not used.
        Some(d) => d,
        None if hidden_size.is_multiple_of(attention_heads) => hidden_size / attention_heads,
        None => {
            return Err(ck.err(
                &key("head_dim"),
                format!(
                    "missing: hidden_size {hidden_size} is not a multiple of the {attention_heads} attention \
                     heads, so give head_dim"
                ),
            ));
        }
    };
    let intermediate_size = optional("intermediate_size", raw.intermediate_size)?;
    let experts = optional("experts", raw.experts)?.unwrap_or(0);
    let (experts_per_token, expert_intermediate_size, shared) = if experts > 0 {
        moe_fields(ck, raw, key, experts, intermediate_size)?
    } else {
        for (name, v) in [
            ("experts_per_token", raw.experts_per_token),
            ("expert_intermediate_size", raw.expert_intermediate_size),
            ("shared_expert_intermediate_size", raw.shared_expert_intermediate_size),
            ("first_dense_layers", raw.first_dense_layers.filter(|&n| n != 0)),
        ] {
            if v.is_some() {
                return Err(ck.err(&key(name), "only for a mixture of experts: set experts (> 0) or remove it"));
            }
        }
        if intermediate_size.is_none() {
            return Err(ck.err(&key("intermediate_size"), "missing: a dense model needs its MLP width"));
        }
        (0, 0, 0)
    };
    let first_dense_layers = match raw.first_dense_layers {
        Some(n) if experts > 0 => {
            let n = ck.whole(&key("first_dense_layers"), n, arch_range("first_dense_layers"))?;
            if n >= layers {
                return Err(ck.err(
                    &key("first_dense_layers"),
                    format!("{n} is not allowed: a mixture of experts needs a layer with experts after the {n} dense ones, and it has {layers} layers"),
                ));
            }
            if n > 0 && intermediate_size.is_none() {
                return Err(ck.err(&key("intermediate_size"), "missing: the leading dense layers need their MLP width"));
            }
            n
        }
        _ => 0,
    };
    let a = Architecture {
        layers,
        hidden_size,
        attention_heads,
        kv_heads,
        head_dim,
        intermediate_size,
        vocab_size,
        tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
        experts,
        experts_per_token,
        expert_intermediate_size,
        shared_expert_intermediate_size: shared,
        first_dense_layers,
        mla,
        sliding_window: 0,
        sliding_layers: 0,
        attention_bias: raw.attention_bias.unwrap_or(false),
        mlp_bias: raw.mlp_bias.unwrap_or(false),
        attention_sinks: raw.attention_sinks.unwrap_or(false),
        mtp_layers: match optional("mtp_layers", raw.mtp_layers)? {
            Some(n) if n > layers => {
                return Err(ck.err(
                    &key("mtp_layers"),
                    format!("{n} is not allowed: at most the model's {layers} layers (DeepSeek-V3 has 1)"),
                ));
            }
            n => n.unwrap_or(0),
        },
    };
    let (sliding_window, sliding_layers) = sliding(ck, raw, key, &a)?;
    let a = Architecture { sliding_window, sliding_layers, ..a };
    check_size(ck, &a, key)?;
    Ok(a)
}

/// Sliding-window layers: a window and how many layers use it, both or
/// neither; not with MLA.
fn sliding(
    ck: &Check,
    raw: &RawArchitecture,
    key: &dyn Fn(&str) -> String,
    a: &Architecture,
) -> Result<(u64, u64), ConfigError> {
    let (window, layers) = match (raw.sliding_window, raw.sliding_layers) {
        (None, None) => return Ok((0, 0)),
        (Some(_), None) => {
            return Err(ck.err(&key("sliding_layers"), "missing: how many layers use the sliding window (all: layers)"));
        }
        (None, Some(_)) => return Err(ck.err(&key("sliding_window"), "missing: the window of the sliding layers")),
        (Some(w), Some(n)) => (
            ck.whole(&key("sliding_window"), w, arch_range("sliding_window"))?,
            ck.whole(&key("sliding_layers"), n, arch_range("sliding_layers"))?,
        ),
    };
    if layers >= a.layers {
        return Err(ck.err(
            &key("sliding_layers"),
            format!(
                "{layers} is not allowed: the model has {} layers, and at least one must attend to the whole \
                 context (the KV blocks are counted in full-attention layers)",
                a.layers
            ),
        ));
    }
    if a.mla.is_some() && layers > 0 {
        return Err(ck.err(&key("sliding_layers"), "sliding windows with multi-head latent attention are not modelled"));
    }
    Ok((window, layers))
}

/// Multi-head latent attention, when `kv_lora_rank` is given: its three
/// head widths are then required.
fn mla(ck: &Check, raw: &RawArchitecture, key: &dyn Fn(&str) -> String) -> Result<Option<Mla>, ConfigError> {
    let Some(rank) = raw.kv_lora_rank else {
        for (name, v) in [
            ("q_lora_rank", raw.q_lora_rank),
            ("qk_nope_head_dim", raw.qk_nope_head_dim),
            ("qk_rope_head_dim", raw.qk_rope_head_dim),
            ("v_head_dim", raw.v_head_dim),
        ] {
            if v.is_some() {
                return Err(ck.err(&key(name), "only for multi-head latent attention: set kv_lora_rank or remove it"));
            }
        }
        return Ok(None);
    };
    let need = |name: &str, v: Option<i64>| match v {
        Some(v) => ck.whole(&key(name), v, arch_range(name)),
        None => Err(ck.err(&key(name), "missing: multi-head latent attention (kv_lora_rank) needs it")),
    };
    Ok(Some(Mla {
        kv_lora_rank: ck.whole(&key("kv_lora_rank"), rank, arch_range("kv_lora_rank"))?,
        q_lora_rank: match raw.q_lora_rank {
            Some(r) => ck.whole(&key("q_lora_rank"), r, arch_range("q_lora_rank"))?,
            None => 0,
        },
        qk_nope_head_dim: need("qk_nope_head_dim", raw.qk_nope_head_dim)?,
        qk_rope_head_dim: need("qk_rope_head_dim", raw.qk_rope_head_dim)?,
        v_head_dim: need("v_head_dim", raw.v_head_dim)?,
    }))
}

/// The range of `model.architecture.NAME`.
fn arch_range(name: &str) -> &'static crate::limits::Range {
    schema::range(&format!("model.architecture.{name}"))
}

fn moe_fields(
    ck: &Check,
    raw: &RawArchitecture,
    key: &dyn Fn(&str) -> String,
    experts: u64,
    intermediate_size: Option<u64>,
) -> Result<(u64, u64, u64), ConfigError> {
    let Some(k) = raw.experts_per_token else {
        return Err(ck.err(&key("experts_per_token"), "missing: a mixture of experts needs it"));
    };
    let k = ck.whole(&key("experts_per_token"), k, arch_range("experts_per_token"))?;
    if k > experts {
        return Err(ck.err(
            &key("experts_per_token"),
            format!("{k} is not allowed: a token cannot use more than the {experts} experts there are"),
        ));
    }
    let width = match raw.expert_intermediate_size {
        Some(w) => ck.whole(&key("expert_intermediate_size"), w, arch_range("expert_intermediate_size"))?,
        None => intermediate_size.ok_or_else(|| {
            ck.err(&key("expert_intermediate_size"), "missing: give it (or intermediate_size, its default)")
        })?,
    };
    let shared = match raw.shared_expert_intermediate_size {
        Some(w) => {
            ck.whole(&key("shared_expert_intermediate_size"), w, arch_range("shared_expert_intermediate_size"))?
        }
        None => 0,
    };
    Ok((k, width, shared))
}

/// Refuses a model so large its counts would not be meaningful; after
/// this every `u64` product of the formulas is exact.
fn check_size(ck: &Check, a: &Architecture, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    let f = |x: u64| x as f64;
    let (h, q, kv) = (f(a.hidden_size), f(a.attention_heads) * f(a.head_dim), f(a.kv_heads) * f(a.head_dim));
    // MLA's projections are no larger than full Q, K, V and O ones of its
    // widths (each `<= hidden x heads x max width`, five of them).
    let attn = match &a.mla {
        None => 2.0 * h * q + 2.0 * h * kv,
        Some(m) => {
            let widest = [m.kv_lora_rank, m.q_lora_rank, m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim]
                .into_iter()
                .max()
                .unwrap_or(0);
            5.0 * (h + f(m.q_lora_rank) + f(m.kv_lora_rank)) * f(a.attention_heads) * f(widest)
        }
    };
    let ffn = 3.0 * h * (f(a.intermediate_size.unwrap_or(0)) + f(a.experts) * f(a.expert_intermediate_size))
        + h * f(a.experts)
        + 3.0 * h * f(a.shared_expert_intermediate_size);
    let total = f(a.layers) * (attn + ffn) + 2.0 * f(a.vocab_size) * h + (2.0 * f(a.layers) + 1.0) * h;
    // Multi-token-prediction modules: a layer each, a projection, norms
    // and an embedding and head of their own.
    let total = total + f(a.mtp_layers) * (attn + ffn + 2.0 * h * h + 2.0 * f(a.vocab_size) * h + 5.0 * h);
    if total > MAX_PARAMETERS {
        return Err(ck.err(
            &key("layers"),
            format!("the architecture has {total:.3e} parameters: at most {MAX_PARAMETERS:e} are allowed"),
        ));
    }
    // At 16 bits; MLA caches its latent and rotary key instead of K and V.
    let kv_bytes = match &a.mla {
        Some(m) => f(a.layers) * (f(m.kv_lora_rank) + f(m.qk_rope_head_dim)) * 2.0,
        None => 2.0 * f(a.layers) * kv * 2.0,
    };
    if kv_bytes > f64::from(u32::MAX) {
        return Err(ck.err(&key("layers"), format!("{kv_bytes} bytes of KV a token: at most {} are allowed", u32::MAX)));
    }
    Ok(())
}

/// Which HF field each of our keys was read from.
#[derive(Default)]
struct HfNames {
    experts: &'static str,
    expert_intermediate_size: &'static str,
    shared_expert_intermediate_size: &'static str,
}

impl HfNames {
    fn hf_name(&self, ours: &str, prefix: &str) -> String {
        let name = match ours {
            "layers" => "num_hidden_layers",
            "attention_heads" => "num_attention_heads",
            "kv_heads" => "num_key_value_heads",
            "experts" => self.experts,
            "experts_per_token" => "num_experts_per_tok",
            "expert_intermediate_size" => self.expert_intermediate_size,
            "shared_expert_intermediate_size" if !self.shared_expert_intermediate_size.is_empty() => {
                self.shared_expert_intermediate_size
            }
            "first_dense_layers" => "first_k_dense_replace",
            "mtp_layers" => "num_nextn_predict_layers",
            other => other,
        };
        format!("{prefix}{name}")
    }
}

/// A config.json object and where it came from.
struct Hf<'a> {
    obj: &'a serde_json::Map<String, Json>,
    file: &'a Path,
    prefix: &'a str,
}

impl Hf<'_> {
    fn err(&self, field: &str, msg: impl std::fmt::Display) -> ConfigError {
        ConfigError::new(self.file, format!("{}{field}", self.prefix), msg)
    }

    /// A whole-number field; missing and `null` are `None`.
    fn int(&self, field: &str) -> Result<Option<i64>, ConfigError> {
        match self.obj.get(field) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Number(n)) => match n.as_i64() {
                Some(i) => Ok(Some(i)),
                None => match n.as_f64().filter(|x| x.fract() == 0.0 && x.abs() < 9e15) {
                    Some(x) => Ok(Some(x as i64)),
                    None => Err(self.err(field, format!("{n} is not allowed: expected a whole number"))),
                },
            },
            Some(other) => Err(self.err(field, format!("expected a whole number, got {other}"))),
        }
    }

    fn bool(&self, field: &str) -> Result<Option<bool>, ConfigError> {
        match self.obj.get(field) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.err(field, format!("expected true or false, got {other}"))),
        }
    }

    /// Shapes the formulas do not describe.
    fn refuse_unsupported(&self, kv_given: bool) -> Result<(), ConfigError> {
        let waiver = "; give model.kv_cache.bytes_per_token to use it anyway (the KV formula is then not used)";
        if !kv_given
            && self.sliding()?.is_none()
            && let Some(why) = self.active_sliding_window()?
        {
            return Err(self.err(
                why.0,
                format!(
                    "{}: sliding windows are read from layer_types, and at least one layer must attend \
                     to the whole context; this config's pattern is not described{waiver}",
                    why.1
                ),
            ));
        }
        if let Some(Json::Array(layers)) = self.obj.get("mlp_only_layers")
            && !layers.is_empty()
        {
            return Err(self.err(
                "mlp_only_layers",
                "dense layers among mixture-of-experts layers are not described by the formulas \
                 (every layer is one or the other)",
            ));
        }
        // DeepSeek's leading dense layers are read (`first_k_dense_replace`);
        // dense layers every few layers are not.
        for (field, dense_from) in [("decoder_sparse_step", 1), ("moe_layer_freq", 1)] {
            if let Some(v) = self.int(field)?
                && v > dense_from
            {
                return Err(self.err(
                    field,
                    format!("{v}: mixed dense and mixture-of-experts layers are not described by the formulas"),
                ));
            }
        }
        Ok(())
    }

    /// An active sliding window: `use_sliding_window` not false and a
    /// window below `max_position_embeddings`, or non-full `layer_types`.
    fn active_sliding_window(&self) -> Result<Option<(&'static str, String)>, ConfigError> {
        if let Some(Json::Array(types)) = self.obj.get("layer_types")
            && let Some(t) = types.iter().find(|t| t.as_str() != Some("full_attention"))
        {
            return Ok(Some(("layer_types", format!("a layer of type {t}"))));
        }
        let enabled = self.bool("use_sliding_window")?.unwrap_or(true);
        let (Some(window), Some(max)) = (self.int("sliding_window")?, self.int("max_position_embeddings")?) else {
            return Ok(None);
        };
        Ok((enabled && window < max).then(|| {
            ("sliding_window", format!("a window of {window} tokens below the {max} of max_position_embeddings"))
        }))
    }

    /// The sliding-window layers `(window, count)`: the `sliding_attention`
    /// entries of `layer_types` (every entry `full_attention` or
    /// `sliding_attention`, one a layer). `None` when there are none; a
    /// window without `layer_types` (Mistral-7B v0.1 on every layer,
    /// Gemma's patterns) is refused by [`Hf::refuse_unsupported`].
    fn sliding(&self) -> Result<Option<(i64, i64)>, ConfigError> {
        let count = match self.obj.get("layer_types") {
            None | Some(Json::Null) => return Ok(None),
            Some(Json::Array(types)) => {
                let mut sliding = 0;
                for (i, t) in types.iter().enumerate() {
                    match t.as_str() {
                        Some("full_attention") => {}
                        Some("sliding_attention") => sliding += 1,
                        _ => {
                            return Err(self.err(
                                &format!("layer_types[{i}]"),
                                format!("{t} is not one of \"full_attention\", \"sliding_attention\""),
                            ));
                        }
                    }
                }
                if let Some(n) = self.int("num_hidden_layers")?
                    && types.len() as i64 != n
                {
                    return Err(self.err(
                        "layer_types",
                        format!("{} entries for the {n} layers of num_hidden_layers: one a layer", types.len()),
                    ));
                }
                sliding
            }
            Some(other) => return Err(self.err("layer_types", format!("expected a list of layer types, got {other}"))),
        };
        if count == 0 {
            return Ok(None);
        }
        match self.int("sliding_window")? {
            Some(w) => Ok(Some((w, count))),
            None => Err(self.err("sliding_window", "missing: layer_types has sliding_attention layers")),
        }
    }

    /// The checkpoint's format from `quantization_config` (at the top of
    /// the file): `(dtype, expert_dtype)` in `model.weights` names.
    /// `fp8` (DeepSeek's block-scaled FP8, `fbgemm_fp8`) is FP8; `mxfp4`
    /// is gpt-oss's MXFP4 experts beside 16-bit rest; `awq` and `gptq` of
    /// 4 bits are INT4 (W4A16); `modelopt` with `quant_algo` `NVFP4` or
    /// `FP8` those. Anything else is refused: give `model.weights.dtype`.
    fn quantization(
        &self,
        top: &serde_json::Map<String, Json>,
    ) -> Result<(Option<String>, Option<String>), ConfigError> {
        let Some(q) = top.get("quantization_config").filter(|q| !q.is_null()) else { return Ok((None, None)) };
        let field = |k: &str| q.get(k).and_then(Json::as_str).map(str::to_ascii_lowercase);
        let method = field("quant_method").unwrap_or_default();
        let bits = q.get("bits").and_then(Json::as_i64);
        let both = |d: &str| Ok((Some(d.to_string()), None));
        match (method.as_str(), bits) {
            ("fp8" | "fbgemm_fp8", _) => both("fp8"),
            ("mxfp4", _) => Ok((Some("bf16".into()), Some("mxfp4".into()))),
            ("awq" | "gptq", Some(4) | None) => both("int4"),
            ("modelopt", _) => match field("quant_algo").as_deref() {
                Some("nvfp4") => both("nvfp4"),
                Some("fp8") => both("fp8"),
                other => Err(self.top_err(
                    "quantization_config.quant_algo",
                    format!("{other:?} is not read (NVFP4 and FP8 are); give model.weights.dtype"),
                )),
            },
            _ => Err(self.top_err(
                "quantization_config.quant_method",
                format!(
                    "`{method}`{} is not read (fp8, mxfp4, awq or gptq of 4 bits, modelopt NVFP4/FP8 are): give \
                     model.weights.dtype (or bytes_per_parameter)",
                    bits.map_or(String::new(), |b| format!(" of {b} bits"))
                ),
            )),
        }
    }

    /// An error about a top-level field (outside `text_config`).
    fn top_err(&self, field: &str, msg: impl std::fmt::Display) -> ConfigError {
        ConfigError::new(self.file, field, msg)
    }

    /// The shared expert's width: `shared_expert_intermediate_size`, or
    /// DeepSeek's `n_shared_experts` experts of `moe_intermediate_size`.
    fn shared_width(&self, expert_width: Option<i64>, names: &mut HfNames) -> Result<Option<i64>, ConfigError> {
        if let Some(w) = self.int("shared_expert_intermediate_size")? {
            return Ok(Some(w));
        }
        let Some(n) = self.int("n_shared_experts")? else { return Ok(None) };
        let Some(w) = expert_width else {
            return Err(self.err("moe_intermediate_size", "missing: n_shared_experts experts need their width"));
        };
        names.shared_expert_intermediate_size = "n_shared_experts";
        n.checked_mul(w)
            .map(Some)
            .ok_or_else(|| self.err("n_shared_experts", format!("{n} is not allowed: {n} x {w} overflows")))
    }

    /// The architecture fields, and which HF field each came from.
    fn architecture(&self) -> Result<(RawArchitecture, HfNames), ConfigError> {
        let mut names = HfNames::default();
        let experts = match (self.int("num_local_experts")?, self.int("num_experts")?, self.int("n_routed_experts")?) {
            (Some(e), _, _) => {
                names.experts = "num_local_experts";
                Some(e)
            }
            (None, Some(e), _) => {
                names.experts = "num_experts";
                Some(e)
            }
            (None, None, e) => {
                names.experts = "n_routed_experts";
                e
            }
        };
        let moe = experts.is_some_and(|e| e > 0);
        let expert_width = self.int("moe_intermediate_size")?;
        names.expert_intermediate_size =
            if expert_width.is_some() { "moe_intermediate_size" } else { "intermediate_size" };
        let sliding = self.sliding()?;
        let gpt_oss = self.obj.get("model_type").and_then(Json::as_str) == Some("gpt_oss");
        let raw = RawArchitecture {
            layers: self.int("num_hidden_layers")?,
            hidden_size: self.int("hidden_size")?,
            attention_heads: self.int("num_attention_heads")?,
            kv_heads: self.int("num_key_value_heads")?,
            head_dim: self.int("head_dim")?,
            intermediate_size: self.int("intermediate_size")?,
            vocab_size: self.int("vocab_size")?,
            tie_word_embeddings: self.bool("tie_word_embeddings")?,
            experts: if moe { experts } else { None },
            experts_per_token: if moe { self.int("num_experts_per_tok")? } else { None },
            expert_intermediate_size: if moe { expert_width } else { None },
            shared_expert_intermediate_size: if moe { self.shared_width(expert_width, &mut names)? } else { None },
            first_dense_layers: if moe { self.int("first_k_dense_replace")? } else { None },
            kv_lora_rank: self.int("kv_lora_rank")?,
            q_lora_rank: self.int("q_lora_rank")?,
            qk_nope_head_dim: self.int("qk_nope_head_dim")?,
            qk_rope_head_dim: self.int("qk_rope_head_dim")?,
            v_head_dim: self.int("v_head_dim")?,
            sliding_window: sliding.map(|s| s.0),
            sliding_layers: sliding.map(|s| s.1),
            attention_bias: self.bool("attention_bias")?,
            // gpt-oss has biases on its experts and router, and a sink
            // logit a head, with no config field for either.
            mlp_bias: if gpt_oss { Some(true) } else { self.bool("mlp_bias")? },
            attention_sinks: gpt_oss.then_some(true),
            mtp_layers: self.int("num_nextn_predict_layers")?,
        };
        Ok((raw, names))
    }
}

/// The model files: `models/NAME.yml` ([`super::presets`]).
pub const SHELF: Shelf = Shelf {
    folder: "models",
    shipped_from: "scenarios/models",
    builtin: BUILTIN,
    kind: crate::input::Kind::Model,
    dots: true,
};

/// Finds model file `name` for a scenario: `models/NAME.yml` in the
/// scenario's directory or one above it, else a built-in one.
pub fn find(name: &str, scenario_file: &Path) -> Result<(PathBuf, String), ConfigError> {
    match SHELF.find(name, scenario_file)? {
        Ok(found) => Ok((found.file, found.text)),
        Err(Unknown { hint, known }) => Err(ConfigError::new(
            scenario_file,
            "model",
            format!(
                "unknown model `{name}`{hint}; known models: {} (or describe it: model.architecture, model.hf_config)",
                known.join(", ")
            ),
        )),
    }
}

/// Every model name reachable from this scenario, sorted.
pub fn known_names(scenario_file: &Path) -> Vec<String> {
    SHELF.known_names(scenario_file)
}
