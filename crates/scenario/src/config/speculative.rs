//! `speculative:` (docs/speculative.md): builds the method, the draft
//! tokens a step, the acceptance, and the drafter the engine prices and
//! holds (their types live in `scenario`, beside the scenario that holds
//! them).

use super::ConfigError;
use super::check::Check;
use super::deployment;
use super::raw::{RawModel, RawParallelism, RawSpeculative};
use super::scenario::{Deployment, EngineKind, Hardware, KvCache, KvDtype, Model, Parallelism, Weights};
pub use super::scenario::{Drafter, Method, Speculative};
use llmsim_core::engine::arch::Architecture;

/// EAGLE-3 heads' own vocabulary (`draft_vocab_size` of the published
/// Llama-3.1-8B and Llama-3.3-70B heads).
pub const EAGLE3_DRAFT_VOCAB: u64 = 32_000;

/// Where the scenario stands, for the checks that depend on it.
pub(crate) struct Context<'a> {
    pub model: &'a Model,
    pub deployment: &'a Deployment,
    pub parallelism: Option<&'a Parallelism>,
    pub hardware: &'a Hardware,
    pub engine: EngineKind,
    pub pools: bool,
}

pub(crate) fn build(ck: &Check, raw: RawSpeculative, cx: &Context) -> Result<Speculative, ConfigError> {
    let method = match raw.method.as_deref() {
        None => return Err(ck.err("speculative.method", format!("missing: one of {}", Method::KNOWN))),
        Some(m) => Method::parse(m).ok_or_else(|| {
            ck.err(
                "speculative.method",
                format!("unknown method `{}`; the methods are {}", super::num::short_text(m), Method::KNOWN),
            )
        })?,
    };
    let Some(k) = raw.num_speculative_tokens else {
        return Err(ck.err(
            "speculative.num_speculative_tokens",
            "missing: the draft tokens a step (vLLM's num_speculative_tokens)",
        ));
    };
    let k = ck.whole32_at("speculative.num_speculative_tokens", k)?;
    let (acceptance_rate, acceptance_by_position) = acceptance(ck, &raw, k)?;
    if cx.engine != EngineKind::Vllm {
        return Err(ck.err(
            "speculative",
            format!(
                "speculative decoding is modelled under vLLM's scheduler only; engine {} drafts under its own \
                 rules (not modelled): remove engine or speculative",
                cx.engine.as_str()
            ),
        ));
    }
    if cx.pools {
        return Err(ck.err(
            "speculative",
            "beside cluster.prefill and cluster.decode pools is not modelled yet: run the pools without it",
        ));
    }
    if let Some(p) = cx.parallelism {
        for (key, n) in [("data", p.data), ("expert", p.expert), ("pipeline", p.pipeline)] {
            if n > 1 {
                return Err(ck.err(
                    "speculative",
                    format!(
                        "beside parallelism.{key} {n} is not modelled yet (the drafter's own layout): speculative \
                         decoding runs with tensor parallelism only"
                    ),
                ));
            }
        }
    }
    let plain_draft = raw.draft_parameters_billions.is_some() || raw.draft_kv_bytes_per_token.is_some();
    let given = |key: &str, v: bool| -> Result<(), ConfigError> {
        match v {
            true => Err(ck.err(
                &format!("speculative.{key}"),
                format!("not allowed with method {}: it has no draft model", method.as_str()),
            )),
            false => Ok(()),
        }
    };
    let drafter = match method {
        Method::Ngram => {
            given("draft_model", raw.draft_model.is_some())?;
            given("draft_parameters_billions", raw.draft_parameters_billions.is_some())?;
            given("draft_kv_bytes_per_token", raw.draft_kv_bytes_per_token.is_some())?;
            None
        }
        Method::Mtp => {
            given("draft_model", raw.draft_model.is_some())?;
            given("draft_parameters_billions", raw.draft_parameters_billions.is_some())?;
            given("draft_kv_bytes_per_token", raw.draft_kv_bytes_per_token.is_some())?;
            let a = cx.model.architecture.as_ref().filter(|a| a.mtp_layers > 0).ok_or_else(|| {
                ck.err(
                    "speculative.method",
                    "mtp needs the checkpoint's multi-token-prediction modules: model.architecture.mtp_layers \
                     (HF num_nextn_predict_layers) of 1 or more",
                )
            })?;
            Some(head(ck, method, a, cx)?)
        }
        Method::Eagle | Method::Eagle3 | Method::DraftModel => {
            if raw.draft_model.is_some() && plain_draft {
                return Err(ck.err(
                    "speculative.draft_model",
                    "give the draft as a model name or as draft_parameters_billions and draft_kv_bytes_per_token, \
                     not both",
                ));
            }
            match (&raw.draft_model, plain_draft, cx.model.architecture.as_ref()) {
                (Some(name), _, _) => Some(named(ck, method, name, cx)?),
                (None, true, _) => Some(plain(ck, method, &raw, cx)?),
                (None, false, Some(a)) if method != Method::DraftModel => Some(head(ck, method, a, cx)?),
                (None, false, _) => {
                    return Err(ck.err(
                        "speculative.draft_model",
                        format!(
                            "missing: method {} needs the draft: a model name (scenarios/models/), or \
                             draft_parameters_billions and draft_kv_bytes_per_token{}",
                            method.as_str(),
                            if method == Method::DraftModel {
                                ""
                            } else {
                                " (the model has no architecture to derive the head from)"
                            }
                        ),
                    ));
                }
            }
        }
    };
    if let Some(d) = &drafter
        && d.deployment.parameters > cx.deployment.parameters
    {
        return Err(ck.err(
            if raw.draft_model.is_some() { "speculative.draft_model" } else { "speculative.draft_parameters_billions" },
            format!(
                "the draft ({:.3} B parameters) is larger than the model ({:.3} B): a drafter smaller than the \
                 model it drafts for is the point",
                d.deployment.parameters / 1e9,
                cx.deployment.parameters / 1e9
            ),
        ));
    }
    Ok(Speculative {
        method,
        num_speculative_tokens: k,
        acceptance_rate,
        acceptance_by_position,
        draft_model: raw.draft_model,
        draft_parameters_billions: raw.draft_parameters_billions,
        draft_kv_bytes_per_token: raw.draft_kv_bytes_per_token.map(|b| b.max(0) as u64),
        seed: raw.seed,
        drafter,
    })
}

/// Exactly one of `acceptance_rate` and `acceptance_by_position` (`k`
/// rates, each a probability, not increasing).
fn acceptance(ck: &Check, raw: &RawSpeculative, k: u32) -> Result<(Option<f64>, Option<Vec<f64>>), ConfigError> {
    match (raw.acceptance_rate, &raw.acceptance_by_position) {
        (Some(_), Some(_)) => {
            Err(ck
                .err("speculative.acceptance_by_position", "give acceptance_rate or acceptance_by_position, not both"))
        }
        (None, None) => Err(ck.err(
            "speculative.acceptance_rate",
            "missing: the probability a draft token is accepted (or acceptance_by_position, vLLM's per-position \
             rates); llmsim cannot know how well a drafter guesses your traffic: read it from vLLM's \
             spec-decoding log line or its spec_decode metrics",
        )),
        (Some(a), None) => Ok((Some(ck.real_at("speculative.acceptance_rate", a)?), None)),
        (None, Some(r)) => {
            let key = "speculative.acceptance_by_position";
            if r.len() != k as usize {
                return Err(ck.err(
                    key,
                    format!(
                        "{} rates given: give one for each of the {k} draft positions (num_speculative_tokens)",
                        r.len()
                    ),
                ));
            }
            let mut prev = 1.0;
            for (i, &x) in r.iter().enumerate() {
                let x = ck.real_at(&format!("{key}[{i}]"), x)?;
                if x > prev {
                    return Err(ck.err(
                        &format!("{key}[{i}]"),
                        format!(
                            "{x} is not allowed: a position's rate cannot exceed the one before it ({prev}); a draft \
                             is kept only after every earlier one was"
                        ),
                    ));
                }
                prev = x;
            }
            Ok((None, Some(r.clone())))
        }
    }
}

/// The model's own head for EAGLE, EAGLE-3 or MTP: one layer of its
/// shape (for MTP the last layer's kind, experts included; for EAGLE a
/// dense layer) and an LM head, priced on the model's GPUs.
fn head(ck: &Check, method: Method, a: &Architecture, cx: &Context) -> Result<Drafter, ConfigError> {
    let h = a.hidden_size;
    let mut head = a.clone();
    head.layers = 1;
    head.sliding_layers = 0;
    head.sliding_window = 0;
    head.mtp_layers = 0;
    // Pass after pass reads one vocabulary-wide matrix, the LM head (the
    // embedding is a lookup).
    head.tie_word_embeddings = true;
    let fc = match method {
        Method::Mtp => {
            head.first_dense_layers = 0;
            2 * h * h
        }
        _ => {
            if head.is_moe() {
                let width = a.intermediate_size.unwrap_or(
                    a.expert_intermediate_size * a.experts_per_token.max(1) + a.shared_expert_intermediate_size,
                );
                head.intermediate_size = Some(width);
                head.experts = 0;
                head.experts_per_token = 0;
                head.expert_intermediate_size = 0;
                head.shared_expert_intermediate_size = 0;
                head.first_dense_layers = 0;
            }
            if method == Method::Eagle3 {
                head.vocab_size = EAGLE3_DRAFT_VOCAB;
                3 * h * h
            } else {
                2 * h * h
            }
        }
    };
    let priced = head.parameters() + fc;
    let bpp = cx.model.weights.bytes_per_parameter;
    // What it holds beside the model: its layer and projection; EAGLE-3
    // its own LM head too; MTP modules their own embedding and head.
    let resident = match method {
        Method::Mtp => a.mtp_parameters() as f64,
        Method::Eagle3 => (head.layer_parameters() + fc + head.norm_parameters() + EAGLE3_DRAFT_VOCAB * h) as f64,
        _ => (head.layer_parameters() + fc + head.norm_parameters()) as f64,
    };
    let weights = Weights { parameters_billions: Some(priced as f64 / 1e9), ..cx.model.weights.clone() };
    let kv_cache =
        KvCache { bytes_per_token: None, num_blocks: None, prefix_caching: false, ..cx.model.kv_cache.clone() };
    let d = deployment::with_architecture(
        ck,
        &head,
        &weights,
        &kv_cache,
        cx.hardware,
        cx.deployment.tensor_parallel,
        cx.deployment.link,
    )?;
    let element = cx.model.kv_cache.dtype.unwrap_or(KvDtype::Auto).element_bytes();
    let layers = if method == Method::Mtp { a.mtp_layers } else { 1 };
    let kv = head.kv_bytes_per_token(element, u64::from(cx.deployment.tensor_parallel)) * layers;
    let about = format!(
        "{} head: one {} layer of {}'s shape + a {}-token LM head, {:.3} B parameters a pass",
        method.as_str(),
        if head.is_moe() { "mixture-of-experts" } else { "dense" },
        cx.model.name,
        llmsim_core::util::thousands(head.vocab_size),
        priced as f64 / 1e9
    );
    Ok(Drafter {
        model: Model {
            name: format!("{} {}", cx.model.name, method.as_str()),
            architecture: Some(head),
            weights,
            kv_cache,
            ..cx.model.clone()
        },
        deployment: d,
        resident_bytes: resident * bpp,
        kv_bytes_per_token_per_gpu: kv,
        about,
    })
}

/// A draft model by name, at the model's tensor parallelism.
fn named(ck: &Check, method: Method, name: &str, cx: &Context) -> Result<Drafter, ConfigError> {
    let raw = RawModel {
        preset: Some(name.to_string()),
        context_length: Some(i64::from(cx.model.context_length)),
        ..RawModel::default()
    };
    let par = RawParallelism { tensor: Some(i64::from(cx.deployment.tensor_parallel)), ..RawParallelism::default() };
    let built = deployment::build(ck, raw, par, cx.hardware).map_err(|e| {
        ck.err("speculative.draft_model", format!("{}: {}: {}", super::num::short_text(name), e.path, e.message))
    })?;
    if built.model.architecture.is_none() {
        return Err(ck.err(
            "speculative.draft_model",
            format!("{name} has no architecture; give draft_parameters_billions and draft_kv_bytes_per_token instead"),
        ));
    }
    let about = format!(
        "{} {}: {:.3} B parameters, {} KV bytes a token a GPU",
        method.as_str(),
        built.model.name,
        built.deployment.parameters / 1e9,
        llmsim_core::util::thousands(built.deployment.kv_bytes_per_token_per_gpu)
    );
    Ok(Drafter {
        resident_bytes: built.deployment.weight_bytes,
        kv_bytes_per_token_per_gpu: built.deployment.kv_bytes_per_token_per_gpu,
        model: built.model,
        deployment: built.deployment,
        about,
    })
}

/// A drafter given as two numbers, as a model without an architecture.
fn plain(ck: &Check, method: Method, raw: &RawSpeculative, cx: &Context) -> Result<Drafter, ConfigError> {
    let (Some(p), Some(kv)) = (raw.draft_parameters_billions, raw.draft_kv_bytes_per_token) else {
        let missing = if raw.draft_parameters_billions.is_none() {
            "speculative.draft_parameters_billions"
        } else {
            "speculative.draft_kv_bytes_per_token"
        };
        return Err(ck.err(missing, "missing: a draft given as numbers needs its parameters and its KV bytes a token"));
    };
    let p = ck.real_at("speculative.draft_parameters_billions", p)?;
    let kv = ck.whole_at("speculative.draft_kv_bytes_per_token", kv)?;
    if cx.deployment.tensor_parallel > 1 {
        return Err(ck.err(
            "speculative.draft_parameters_billions",
            "a draft given as numbers cannot be split over parallelism.tensor: name a draft model with an \
             architecture (speculative.draft_model)",
        ));
    }
    let weights = Weights { parameters_billions: Some(p), ..cx.model.weights.clone() };
    let parameters = p * 1e9;
    let deployment = Deployment {
        parameters,
        active_parameters: parameters,
        weight_bytes: parameters * weights.bytes_per_parameter,
        kv_bytes_per_token: kv,
        kv_bytes_per_token_per_gpu: kv,
        peak_tflops: cx.deployment.peak_tflops,
        peak: cx.deployment.peak.clone(),
        ..Deployment::default()
    };
    Ok(Drafter {
        about: format!(
            "{} given as numbers: {p} B parameters, {} KV bytes a token",
            method.as_str(),
            llmsim_core::util::thousands(kv)
        ),
        resident_bytes: deployment.weight_bytes,
        kv_bytes_per_token_per_gpu: kv,
        model: Model {
            name: "draft".into(),
            architecture: None,
            weights,
            kv_cache: KvCache { bytes_per_token: Some(kv), ..cx.model.kv_cache.clone() },
            ..cx.model.clone()
        },
        deployment,
    })
}

#[cfg(test)]
mod tests;
