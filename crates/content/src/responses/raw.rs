//! Stage one of responses.yml: serde structs that mirror the YAML exactly.
//!
//! Unknown keys are errors. `exact` is kept as a YAML value so that stage two
//! can accept one string or a list and say precisely what else it got.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponses {
    /// Seed for variants and synthetic answers; a request's `seed` wins.
    pub seed: Option<u64>,
    /// Tried in order; the first entry whose matcher matches answers.
    #[serde(default)]
    pub responses: Vec<RawEntry>,
    /// The answer when no entry matches (required).
    pub default: RawAnswer,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntry {
    pub id: Option<String>,
    // Matchers: exactly one.
    pub exact: Option<llmsim_scenario::yaml::Value>,
    pub regex: Option<String>,
    pub starts_with: Option<String>,
    pub contains: Option<String>,
    /// Compare `exact`, `starts_with` and `contains` case-insensitively.
    pub ignore_case: Option<bool>,
    // Answers: exactly one.
    pub content: Option<String>,
    pub variants: Option<Vec<String>>,
    pub synthetic: Option<RawSynthetic>,
    /// A tool call: a tool name, or `{name, arguments}`.
    pub tool_call: Option<llmsim_scenario::yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAnswer {
    pub content: Option<String>,
    pub variants: Option<Vec<String>>,
    pub synthetic: Option<RawSynthetic>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSynthetic {
    /// Inclusive token-count range `[lo, hi]`.
    pub tokens: [i64; 2],
}
