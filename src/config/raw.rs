//! Stage one: serde structs that mirror the YAML exactly.
//!
//! Unknown keys are errors (`deny_unknown_fields`). Numbers are read as
//! `f64`/`i64` so that a negative or zero value reaches validation, which
//! says what is allowed, instead of failing as an opaque type error.

use serde::{Deserialize, Deserializer};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: Option<String>,
    pub description: Option<String>,
    /// A calibration profile by name (`hardware/calibrations/NAME.yml`) or
    /// file: fills the `efficiency` and `latency` keys left unset.
    pub calibration: Option<String>,
    /// A profile name (a file in `hardware/`) or an inline mapping.
    pub hardware: serde_yaml::Value,
    /// A model name (a file in `scenarios/models/`) or a mapping.
    #[serde(deserialize_with = "model_or_name")]
    pub model: RawModel,
    #[serde(default)]
    pub parallelism: RawParallelism,
    #[serde(default)]
    pub scheduler: RawScheduler,
    #[serde(default)]
    pub latency: RawLatency,
    #[serde(default)]
    pub efficiency: RawEfficiency,
    pub workload: RawWorkload,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHardware {
    pub name: Option<String>,
    pub description: Option<String>,
    pub hbm_gib: f64,
    pub memory_bandwidth_gbps: f64,
    pub peak_tflops: f64,
    /// Dense FP8 TFLOPS, used for 1-byte weights of a model with an architecture.
    pub peak_tflops_fp8: Option<f64>,
    /// The all-reduce link between GPUs of one engine (tensor parallelism).
    pub interconnect: Option<RawInterconnect>,
    /// Price of one GPU-hour, for cost per million tokens.
    pub cost_per_hour: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInterconnect {
    pub bandwidth_gbps: RawByGpus,
    pub latency_us: RawByGpus,
}

/// A number, or a mapping from GPU count to a number (`{2: 248, 4: 289}`).
#[derive(Debug, Clone, PartialEq)]
pub enum RawByGpus {
    Fixed(f64),
    ByCount(Vec<(i64, f64)>),
}

impl<'de> Deserialize<'de> for RawByGpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        use serde_yaml::Value;
        let number = |v: &Value| v.as_f64().filter(|_| v.is_number());
        match serde_yaml::Value::deserialize(d)? {
            v @ Value::Number(_) => Ok(RawByGpus::Fixed(number(&v).unwrap_or(f64::NAN))),
            Value::Mapping(m) => {
                let mut out = Vec::new();
                for (k, v) in m {
                    let (Some(gpus), Some(x)) = (k.as_i64(), number(&v)) else {
                        return Err(D::Error::custom(format!(
                            "expected GPU count: number pairs like {{2: 248, 4: 289}}; got {}: {}",
                            super::describe_value(&k),
                            super::describe_value(&v)
                        )));
                    };
                    out.push((gpus, x));
                }
                Ok(RawByGpus::ByCount(out))
            }
            other => Err(D::Error::custom(format!(
                "expected a number or a mapping by GPU count ({{2: 248, 4: 289}}); got {}",
                super::describe_value(&other)
            ))),
        }
    }
}

/// `model:` as written: every key optional, checked in validation.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    /// A model file by name: `scenarios/models/NAME.yml` (or built in).
    /// `model: NAME` is short for `model: {preset: NAME}`.
    pub preset: Option<String>,
    pub name: Option<String>,
    pub context_length: Option<i64>,
    pub architecture: Option<RawArchitecture>,
    /// A Hugging Face `config.json`, relative to the scenario.
    pub hf_config: Option<String>,
    #[serde(default)]
    pub weights: RawWeights,
    #[serde(default)]
    pub kv_cache: RawKvCache,
}

/// DEPLOYMENT.md section 1's fields (the HF `config.json` names in comments).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawArchitecture {
    /// `num_hidden_layers`
    pub layers: Option<i64>,
    /// `hidden_size`
    pub hidden_size: Option<i64>,
    /// `num_attention_heads`
    pub attention_heads: Option<i64>,
    /// `num_key_value_heads`
    pub kv_heads: Option<i64>,
    /// `head_dim`
    pub head_dim: Option<i64>,
    /// `intermediate_size`
    pub intermediate_size: Option<i64>,
    /// `vocab_size`
    pub vocab_size: Option<i64>,
    /// `tie_word_embeddings`
    pub tie_word_embeddings: Option<bool>,
    /// `num_local_experts` or `num_experts`
    pub experts: Option<i64>,
    /// `num_experts_per_tok`
    pub experts_per_token: Option<i64>,
    /// `moe_intermediate_size`
    pub expert_intermediate_size: Option<i64>,
    /// `shared_expert_intermediate_size`
    pub shared_expert_intermediate_size: Option<i64>,
}

/// A model file in `scenarios/models/`: the facts of one model.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModelFile {
    pub name: Option<String>,
    pub description: Option<String>,
    /// Where the figures come from.
    pub source: Option<String>,
    /// `max_position_embeddings`.
    pub context_length: i64,
    pub architecture: RawArchitecture,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeights {
    pub parameters_billions: Option<f64>,
    pub bytes_per_parameter: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKvCache {
    pub bytes_per_token: Option<i64>,
    /// `auto` (16-bit), `fp8`, ... as vLLM's `--kv-cache-dtype`.
    pub dtype: Option<String>,
    pub block_size: Option<i64>,
    pub gpu_memory_utilization: Option<f64>,
    pub watermark: Option<f64>,
    pub num_blocks: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScheduler {
    pub max_batch_tokens: Option<i64>,
    pub max_num_sequences: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLatency {
    pub step_overhead_ms: Option<f64>,
    pub request_overhead_ms: Option<f64>,
    pub per_layer_overhead_us: Option<f64>,
    pub per_sequence_overhead_us: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawParallelism {
    pub tensor: Option<i64>,
    /// Read only to refuse it: pipeline parallelism is not modelled.
    pub pipeline: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEfficiency {
    pub compute: Option<f64>,
    pub memory: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    pub seed: Option<u64>,
    #[serde(deserialize_with = "single_key_enum")]
    pub arrivals: RawArrivals,
    pub requests: Option<i64>,
    pub duration_s: Option<f64>,
    pub prompt_tokens: Option<RawLength>,
    pub output_tokens: Option<RawLength>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawArrivals {
    Poisson { rate: f64 },
    Gamma { rate: f64, burstiness: f64 },
    Constant { rate: f64 },
    Closed { concurrency: i64, think_time_s: Option<f64> },
    Trace(String),
}

/// A length: a plain integer, or one of the distributions.
#[derive(Debug)]
pub enum RawLength {
    Fixed(i64),
    Dist(RawDist),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawDist {
    Uniform([i64; 2]),
    Normal(RawMoments),
    Lognormal(RawMoments),
    Exponential(RawMean),
    Choice(RawChoice),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMoments {
    pub mean: f64,
    pub std: f64,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMean {
    pub mean: f64,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChoice {
    pub values: Vec<i64>,
    pub weights: Option<Vec<f64>>,
}

impl<'de> Deserialize<'de> for RawLength {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_yaml::Value::deserialize(d)?;
        match &value {
            serde_yaml::Value::Number(n) => match n.as_i64() {
                Some(i) => Ok(RawLength::Fixed(i)),
                None => Err(D::Error::custom(format!("{n} is not a whole number of tokens"))),
            },
            serde_yaml::Value::Mapping(_) => from_single_key_map(value).map(RawLength::Dist),
            other => Err(D::Error::custom(format!(
                "expected a token count or one of uniform: [lo, hi], normal: {{mean, std}}, \
                 lognormal: {{mean, std}}, exponential: {{mean}}, choice: {{values, weights}}; \
                 got {}",
                super::describe_value(other)
            ))),
        }
    }
}

/// `model: NAME` or `model: {...}`. A mapping is read straight from the
/// document (so errors inside it keep their line); a name becomes
/// `{preset: NAME}`.
pub fn model_or_name<'de, D: Deserializer<'de>>(d: D) -> Result<RawModel, D::Error> {
    struct ModelVisitor;
    impl<'de> serde::de::Visitor<'de> for ModelVisitor {
        type Value = RawModel;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a model name (a file in scenarios/models/) or a mapping")
        }
        fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<RawModel, E> {
            Ok(RawModel { preset: Some(name.to_string()), ..RawModel::default() })
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawModel, A::Error> {
            RawModel::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(ModelVisitor)
}

/// [`model_or_name`] for an optional field (`#[serde(default)]` covers absence).
pub fn some_model_or_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawModel>, D::Error> {
    model_or_name(d).map(Some)
}

/// Reads an enum written as a one-key mapping (`poisson: {rate: 20}`), the
/// form SCENARIO.md uses; serde_yaml itself only reads `!poisson {rate: 20}`.
pub fn single_key_enum<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    from_single_key_map(serde_yaml::Value::deserialize(d)?)
}

fn from_single_key_map<T: serde::de::DeserializeOwned, E: serde::de::Error>(value: serde_yaml::Value) -> Result<T, E> {
    use serde_yaml::Value;
    let value = match value {
        Value::Mapping(m) if m.len() == 1 => {
            let Some((Value::String(tag), inner)) = m.into_iter().next() else {
                return Err(E::custom("expected a single key naming the kind"));
            };
            Value::Tagged(Box::new(serde_yaml::value::TaggedValue {
                tag: serde_yaml::value::Tag::new(tag),
                value: inner,
            }))
        }
        Value::Mapping(m) => {
            let keys: Vec<String> = m.keys().map(super::describe_value).collect();
            return Err(E::custom(format!(
                "expected exactly one key naming the kind, found {}: {}",
                m.len(),
                keys.join(", ")
            )));
        }
        other => other,
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let msg = e.into_inner().to_string();
        if inner == "." || inner.is_empty() { E::custom(msg) } else { E::custom(format!("{inner}: {msg}")) }
    })
}
