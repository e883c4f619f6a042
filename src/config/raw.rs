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
    /// A profile name (a file in `hardware/`) or an inline mapping.
    pub hardware: serde_yaml::Value,
    pub model: RawModel,
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
    /// Price of one GPU-hour, for cost per million tokens.
    pub cost_per_hour: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    pub name: Option<String>,
    pub context_length: i64,
    pub weights: RawWeights,
    pub kv_cache: RawKvCache,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWeights {
    pub parameters_billions: f64,
    pub bytes_per_parameter: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKvCache {
    pub bytes_per_token: i64,
    pub block_size: Option<i64>,
    pub gpu_memory_utilization: Option<f64>,
    pub watermark: Option<f64>,
    pub num_blocks: Option<i64>,
    pub prefix_caching: Option<bool>,
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
    pub shared_prefix: Option<RawSharedPrefix>,
    pub sessions: Option<RawSessions>,
    /// Tokens per `hash_ids` entry of a JSONL (Mooncake-style) trace.
    pub hash_block_size: Option<i64>,
}

/// `workload.shared_prefix`: every request starts with one of `groups`
/// system prompts of `tokens` tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSharedPrefix {
    pub groups: i64,
    pub tokens: i64,
}

/// `workload.sessions`: multi-turn conversations.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    pub turns: RawLength,
    pub think_s: Option<RawSeconds>,
}

/// A duration in seconds: a plain number or a distribution.
#[derive(Debug)]
pub enum RawSeconds {
    Fixed(f64),
    Dist(RawSecondsDist),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawSecondsDist {
    Uniform([f64; 2]),
    Exponential(RawSecondsMean),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecondsMean {
    pub mean: f64,
}

impl<'de> Deserialize<'de> for RawSeconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_yaml::Value::deserialize(d)?;
        match &value {
            serde_yaml::Value::Number(n) => match n.as_f64() {
                Some(x) => Ok(RawSeconds::Fixed(x)),
                None => Err(D::Error::custom(format!("{n} is not a number of seconds"))),
            },
            serde_yaml::Value::Mapping(_) => from_single_key_map(value).map(RawSeconds::Dist),
            other => Err(D::Error::custom(format!(
                "expected a number of seconds or one of uniform: [lo, hi], exponential: {{mean}}; got {}",
                super::describe_value(other)
            ))),
        }
    }
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
