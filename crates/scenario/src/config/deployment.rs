//! The model and how it is deployed (docs/deployments.md):
//! where its architecture comes from, its effective parameter count and KV
//! bytes (derived, or explicitly overridden), its weight and KV dtypes, and
//! tensor parallelism with its interconnect. A scenario that uses none of
//! these keys gets exactly the docs/engine.md figures it always had.

use super::ConfigError;
// Where an architecture came from is the architecture reader's, and the
// validated deployment types are the scenario's (it holds them); the old
// paths stay.
pub use super::architecture::ArchitectureOrigin;
use super::architecture::{self, Resolved};
use super::check::{Check, DEFAULT_BLOCK_SIZE, DEFAULT_BYTES_PER_PARAMETER};
use super::check::{
    DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_PREFIX_CACHING, DEFAULT_TENSOR_PARALLEL, DEFAULT_WATERMARK,
};
use super::raw::{RawByGpus, RawInterconnect, RawLink, RawModel, RawParallelism};
pub use super::scenario::{
    ByGpus, Deployment, FigureSource, Interconnect, KvDtype, Parallelism, PeakClass, PeakUse, WeightDtype,
};
use super::scenario::{Drafter, Hardware, KvCache, Model, Offload, OffloadTier, Weights};
use super::schema;
use llmsim_core::engine::arch::Architecture;
use llmsim_core::engine::cost::Link;
use llmsim_core::engine::{KvBudget, KvBudgetInput};

impl ByGpus {
    fn counts(&self) -> String {
        match self {
            ByGpus::Fixed(_) => "any".into(),
            ByGpus::ByCount(m) => m.iter().map(|(g, _)| g.to_string()).collect::<Vec<_>>().join(", "),
        }
    }
}

impl KvDtype {
    fn parse(ck: &Check, text: &str) -> Result<KvDtype, ConfigError> {
        let aliases = [("bfloat16", KvDtype::Bf16), ("float16", KvDtype::Fp16), ("half", KvDtype::Fp16)];
        KvDtype::ALL
            .iter()
            .map(|d| (d.as_str(), *d))
            .chain(aliases)
            .find(|(name, _)| *name == text)
            .map(|(_, d)| d)
            .ok_or_else(|| {
                let names: Vec<&str> = KvDtype::ALL.iter().map(|d| d.as_str()).collect();
                ck.err("model.kv_cache.dtype", format!("`{text}` is not one of {}", names.join(", ")))
            })
    }
}

impl WeightDtype {
    pub(crate) fn parse(ck: &Check, key: &str, text: &str) -> Result<WeightDtype, ConfigError> {
        let aliases = [("bfloat16", WeightDtype::Bf16), ("float16", WeightDtype::Fp16), ("half", WeightDtype::Fp16)];
        WeightDtype::ALL
            .iter()
            .map(|d| (d.as_str(), *d))
            .chain(aliases)
            .find(|(n, _)| *n == text)
            .map(|(_, d)| d)
            .ok_or_else(|| {
                let names: Vec<&str> = WeightDtype::ALL.iter().map(|d| d.as_str()).collect();
                ck.err(key, format!("`{text}` is not one of {}", names.join(", ")))
            })
    }
}

/// The weights' format as a reader names it: the given dtype, else what
/// `bytes_per_parameter` means.
pub fn weights_label(w: &Weights) -> String {
    match (w.dtype, w.expert_dtype) {
        (Some(d), None) => d.as_str().to_string(),
        (d, Some(e)) => format!(
            "{} ({} experts)",
            d.map_or_else(|| weight_dtype(w.bytes_per_parameter), |d| d.as_str().to_string()),
            e.as_str()
        ),
        (None, None) => weight_dtype(w.bytes_per_parameter),
    }
}

/// The peak a class of weights runs at on `hw`: the class's own, or
/// `peak_tflops` where the GPU lacks it (FP8 then runs as 16-bit; FP4 as
/// W4A16, as vLLM's Marlin kernels run it on Hopper).
pub fn peak_for(class: PeakClass, dtype: String, hw: &Hardware) -> (f64, PeakUse) {
    let own = match class {
        PeakClass::Sixteen => Some(hw.peak_tflops),
        PeakClass::Eight => hw.peak_tflops_fp8,
        PeakClass::Four => hw.peak_tflops_fp4,
    };
    match own {
        Some(tflops) => (tflops, PeakUse { dtype, key: class.key(), fallback: None }),
        None => (hw.peak_tflops, PeakUse { dtype, key: "peak_tflops", fallback: Some(class.key()) }),
    }
}

/// `fp8`, `bf16`, `int4` or `N bytes`: what `bytes_per_parameter` means.
pub fn weight_dtype(bytes_per_parameter: f64) -> String {
    let known = [(2.0, "bf16"), (1.0, "fp8"), (0.5, "int4"), (4.0, "fp32")];
    match known.iter().find(|(b, _)| *b == bytes_per_parameter) {
        Some((_, name)) => (*name).to_string(),
        None => format!("{bytes_per_parameter}-byte"),
    }
}

/// The validated model and deployment, before capacity.
pub struct Built {
    pub model: Model,
    pub parallelism: Option<Parallelism>,
    pub deployment: Deployment,
}

/// Checks `model:` and `parallelism:` against each other and the hardware.
pub(crate) fn build(ck: &Check, raw: RawModel, par: RawParallelism, hw: &Hardware) -> Result<Built, ConfigError> {
    let kv_given = raw.kv_cache.bytes_per_token.is_some();
    let resolved = resolve(ck, &raw, kv_given)?;
    let arch = resolved.as_ref().map(|r| &r.architecture);
    let formats = match &resolved {
        Some(Resolved {
            formats,
            origin: ArchitectureOrigin::Preset { file, .. } | ArchitectureOrigin::HfConfig { file },
            ..
        }) => {
            let fck = Check { file };
            let format =
                |key: &str, v: &Option<String>| v.as_deref().map(|d| WeightDtype::parse(&fck, key, d)).transpose();
            (format("weights.dtype", &formats.0)?, format("weights.expert_dtype", &formats.1)?)
        }
        _ => (None, None),
    };
    let weights = weights(ck, &raw, arch, formats)?;
    let kv_cache = kv_cache(ck, &raw, arch.is_some())?;
    if kv_cache.prefix_caching && arch.is_some_and(|a| a.sliding_layers > 0) {
        return Err(ck.err(
            "model.kv_cache.prefix_caching",
            "prefix caching with sliding-window layers is not modelled yet (vLLM's hybrid KV manager caches \
             both kinds; llmsim holds a window's blocks per request): set it to false",
        ));
    }
    let context_length = match (raw.context_length, resolved.as_ref().and_then(|r| r.context_length)) {
        (Some(c), _) => ck.whole32_at("model.context_length", c)?,
        (None, Some(c)) => c,
        (None, None) => {
            return Err(ck.err(
                "model.context_length",
                "missing: give the longest prompt + output a request may have (vLLM's max_model_len)",
            ));
        }
    };
    let tensor = tensor_parallel(ck, &par, arch)?;
    let link = if tensor > 1 { Some(link(ck, hw, tensor)?) } else { None };
    let deployment = match &resolved {
        None => plain(&weights, &kv_cache, hw),
        Some(r) => with_architecture(ck, &r.architecture, &weights, &kv_cache, hw, tensor, link)?,
    };
    let name = raw.name.or_else(|| resolved.as_ref().and_then(|r| r.name.clone())).unwrap_or_else(|| "model".into());
    let wide = wide(ck, &par, arch, tensor, hw)?;
    let pipeline = pipeline(ck, &par, arch, tensor, hw)?;
    let deployment =
        Deployment { architecture_origin: resolved.as_ref().map(|r| r.origin.clone()), wide, pipeline, ..deployment };
    let model = Model { name, context_length, architecture: resolved.map(|r| r.architecture), weights, kv_cache };
    let parallelism = model.architecture.is_some().then_some(Parallelism {
        tensor,
        data: wide.map_or(1, |w| w.data),
        expert: wide.map_or(1, |w| w.expert),
        expert_tensor: wide.map_or(1, |w| w.expert_tensor),
        expert_imbalance: wide.map(|w| w.imbalance).filter(|_| par.expert_imbalance.is_some()),
        pipeline: pipeline.map_or(1, |p| p.stages),
    });
    Ok(Built { model, parallelism, deployment })
}

/// The architecture from at most one of preset, hf_config, architecture.
fn resolve(ck: &Check, raw: &RawModel, kv_given: bool) -> Result<Option<Resolved>, ConfigError> {
    let given: Vec<&str> = [
        ("preset", raw.preset.is_some()),
        ("hf_config", raw.hf_config.is_some()),
        ("architecture", raw.architecture.is_some()),
    ]
    .iter()
    .filter(|(_, set)| *set)
    .map(|(k, _)| *k)
    .collect();
    if given.len() > 1 {
        return Err(ck.err(
            &format!("model.{}", given[1]),
            format!("give one of model.{} and model.{}: each describes the whole architecture", given[0], given[1]),
        ));
    }
    if let Some(name) = &raw.preset {
        return architecture::preset(ck, name).map(Some);
    }
    if let Some(file) = &raw.hf_config {
        let w = &raw.weights;
        let weights_given = w.dtype.is_some() || w.expert_dtype.is_some() || w.bytes_per_parameter.is_some();
        return architecture::hf_config(ck, file, kv_given, weights_given).map(Some);
    }
    raw.architecture.as_ref().map(|a| architecture::inline(ck, a)).transpose()
}

/// `formats`: a model file's checkpoint format, used where the scenario
/// names none.
fn weights(
    ck: &Check,
    raw: &RawModel,
    arch: Option<&Architecture>,
    formats: (Option<WeightDtype>, Option<WeightDtype>),
) -> Result<Weights, ConfigError> {
    let has_arch = arch.is_some();
    let w = &raw.weights;
    let parameters_billions = match w.parameters_billions {
        Some(p) => Some(ck.real_at("model.weights.parameters_billions", p)?),
        None if has_arch => None,
        None => {
            return Err(ck.err(
                "model.weights.parameters_billions",
                "missing: give the parameter count in billions, or describe the model \
                 (model: NAME, model.architecture or model.hf_config) to derive it",
            ));
        }
    };
    let dtype = w.dtype.as_deref().map(|d| WeightDtype::parse(ck, "model.weights.dtype", d)).transpose()?;
    let expert_dtype =
        w.expert_dtype.as_deref().map(|d| WeightDtype::parse(ck, "model.weights.expert_dtype", d)).transpose()?;
    // A scenario that sizes its weights in bytes keeps the model file's
    // format out (its bytes win); one that names a dtype replaces both.
    let (dtype, expert_dtype) = match (dtype, expert_dtype, w.bytes_per_parameter) {
        (None, None, None) => formats,
        given => (given.0, given.1),
    };
    if dtype.is_some() && !has_arch {
        return Err(ck.err(
            "model.weights.dtype",
            "needs a model architecture (the peak a format runs at is the deployment's); \
             without one, give bytes_per_parameter",
        ));
    }
    if expert_dtype.is_some() && !arch.is_some_and(Architecture::is_moe) {
        return Err(ck.err(
            "model.weights.expert_dtype",
            "needs an architecture with routed experts (architecture.experts above 0); \
             a dense model's format is weights.dtype",
        ));
    }
    let bytes = w.bytes_per_parameter.or(dtype.map(WeightDtype::bytes)).unwrap_or(DEFAULT_BYTES_PER_PARAMETER);
    Ok(Weights {
        parameters_billions,
        bytes_per_parameter: ck.real_at("model.weights.bytes_per_parameter", bytes)?,
        dtype,
        expert_dtype,
    })
}

fn kv_cache(ck: &Check, raw: &RawModel, has_arch: bool) -> Result<KvCache, ConfigError> {
    let kv = &raw.kv_cache;
    let bytes_per_token = match kv.bytes_per_token {
        Some(b) => Some(ck.whole_at("model.kv_cache.bytes_per_token", b)?),
        None if has_arch => None,
        None => {
            return Err(ck.err(
                "model.kv_cache.bytes_per_token",
                "missing: give the KV bytes of one token (all layers, K and V), or describe the model \
                 (model: NAME, model.architecture or model.hf_config) to derive it",
            ));
        }
    };
    let dtype = match (&kv.dtype, has_arch) {
        (Some(_), false) => {
            return Err(ck.err(
                "model.kv_cache.dtype",
                "needs a model architecture; without one, kv_cache.bytes_per_token is the KV size as given",
            ));
        }
        (Some(d), true) => Some(KvDtype::parse(ck, d)?),
        (None, true) => Some(KvDtype::Auto),
        (None, false) => None,
    };
    Ok(KvCache {
        bytes_per_token,
        dtype,
        block_size: match kv.block_size {
            Some(b) => ck.whole32_at("model.kv_cache.block_size", b)?,
            None => DEFAULT_BLOCK_SIZE,
        },
        gpu_memory_utilization: ck.real_at(
            "model.kv_cache.gpu_memory_utilization",
            kv.gpu_memory_utilization.unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION),
        )?,
        watermark: ck.real_at("model.kv_cache.watermark", kv.watermark.unwrap_or(DEFAULT_WATERMARK))?,
        num_blocks: kv.num_blocks.map(|n| ck.whole_at("model.kv_cache.num_blocks", n)).transpose()?,
        prefix_caching: kv.prefix_caching.unwrap_or(DEFAULT_PREFIX_CACHING),
        offload: kv.offload.as_ref().map(|o| offload(ck, o)).transpose()?,
    })
}

/// `model.kv_cache.offload`: each tier given needs both figures.
fn offload(ck: &Check, raw: &super::raw::RawOffload) -> Result<Offload, ConfigError> {
    let tier = |name: &str, t: &Option<super::raw::RawTier>| -> Result<Option<OffloadTier>, ConfigError> {
        let Some(t) = t else { return Ok(None) };
        let p = format!("model.kv_cache.offload.{name}");
        let need = |key: &str, v: Option<f64>| {
            v.ok_or_else(|| {
                ck.err(&format!("{p}.{key}"), "missing: a tier needs its size (gib) and its bandwidth (bandwidth_gbps)")
            })
        };
        let gib = ck.real(&format!("{p}.gib"), need("gib", t.gib)?, &crate::limits::OFFLOAD_GIB)?;
        let bw = ck.real(
            &format!("{p}.bandwidth_gbps"),
            need("bandwidth_gbps", t.bandwidth_gbps)?,
            &crate::limits::OFFLOAD_BANDWIDTH_GBPS,
        )?;
        Ok(Some(OffloadTier { gib, bandwidth_gbps: bw }))
    };
    let o = Offload { cpu: tier("cpu", &raw.cpu)?, disk: tier("disk", &raw.disk)? };
    if o.cpu.is_none() && o.disk.is_none() {
        return Err(ck.err(
            "model.kv_cache.offload",
            "empty: give a cpu tier, a disk tier or both ({gib, bandwidth_gbps} each)",
        ));
    }
    Ok(o)
}

/// GPUs one node joins when the hardware does not say.
pub const DEFAULT_GPUS_PER_NODE: u32 = 8;

/// `parallelism.pipeline`: stages of `layers / stages` layers each, handing
/// a micro-batch's activations on over NVLink inside a node
/// (`hardware.send_recv`) or the network between nodes
/// (`hardware.network`) once `tensor x pipeline` passes
/// `hardware.gpus_per_node` (docs/deployments.md, "Pipeline parallelism").
fn pipeline(
    ck: &Check,
    par: &RawParallelism,
    arch: Option<&Architecture>,
    tensor: u32,
    hw: &Hardware,
) -> Result<Option<llmsim_core::engine::Pipeline>, ConfigError> {
    let Some(p) = par.pipeline else { return Ok(None) };
    let stages = ck.whole32("parallelism.pipeline", p, schema::range("parallelism.pipeline"))?;
    if stages == 1 {
        return Ok(None);
    }
    let Some(a) = arch else {
        return Err(ck.err(
            "parallelism.pipeline",
            format!(
                "{stages} needs a model architecture (its layers are split into the stages): use model: NAME, \
                 model.architecture or model.hf_config"
            ),
        ));
    };
    if u64::from(stages) > a.layers {
        return Err(ck.err(
            "parallelism.pipeline",
            format!(
                "{stages} is more stages than the {} layers (each stage holds at least one); allowed: 1 to {}",
                a.layers, a.layers
            ),
        ));
    }
    if par.data.is_some_and(|d| d > 1) || par.expert.is_some_and(|e| e > 1) {
        return Err(ck.err(
            "parallelism.pipeline",
            format!(
                "{stages} beside parallelism.data or parallelism.expert is not modelled: give pipeline stages \
                 of tensor-parallel GPUs only"
            ),
        ));
    }
    let node = hw.gpus_per_node.unwrap_or(DEFAULT_GPUS_PER_NODE);
    let gpus = u64::from(tensor) * u64::from(stages);
    let (key, link, what) = if gpus <= u64::from(node) {
        ("send_recv", hw.send_recv, "inside one node")
    } else {
        ("network", hw.network, "between nodes")
    };
    let Some(link) = link else {
        return Err(ck.err(
            &format!("hardware.{key}"),
            format!(
                "missing: pipeline {stages} x tensor {tensor} = {gpus} GPUs hand activations on {what} \
                 ({node} GPUs a node, hardware.gpus_per_node), and hardware `{}` gives no {key} link; give it \
                 inline: {key}: {{bandwidth_gbps: GBPS, latency_us: US}} (nccl-tests sendrecv_perf reports both)",
                hw.name
            ),
        ));
    };
    // Each GPU of a stage sends its share of the hidden states and the
    // residual (16-bit) to its peer in the next stage (vLLM splits them
    // over the tensor-parallel ranks and gathers them on arrival).
    let bytes_per_token = 2.0 * a.hidden_size as f64 * 2.0 / f64::from(tensor);
    Ok(Some(llmsim_core::engine::Pipeline {
        stages,
        layers: a.layers,
        stage_layers: a.layers.div_ceil(u64::from(stages)),
        handoff_fixed_s: link.latency_us * 1e-6,
        handoff_s_per_token: bytes_per_token / (link.bandwidth_gbps * 1e9),
    }))
}

fn tensor_parallel(ck: &Check, par: &RawParallelism, arch: Option<&Architecture>) -> Result<u32, ConfigError> {
    let Some(t) = par.tensor else { return Ok(DEFAULT_TENSOR_PARALLEL) };
    let t = ck.whole32_at("parallelism.tensor", t)?;
    if t == 1 {
        return Ok(1);
    }
    let Some(a) = arch else {
        return Err(ck.err(
            "parallelism.tensor",
            format!(
                "{t} needs a model architecture (heads and layers decide how the model splits and what the \
                 all-reduces cost): use model: NAME, model.architecture or model.hf_config"
            ),
        ));
    };
    if !a.attention_heads.is_multiple_of(u64::from(t)) {
        let divisors: Vec<String> =
            (1..=a.attention_heads).filter(|d| a.attention_heads.is_multiple_of(*d)).map(|d| d.to_string()).collect();
        return Err(ck.err(
            "parallelism.tensor",
            format!("{t} does not divide the {} attention heads; allowed: {}", a.attention_heads, divisors.join(", ")),
        ));
    }
    Ok(t)
}

/// The interconnect's figures at `t` GPUs.
fn link(ck: &Check, hw: &Hardware, t: u32) -> Result<Link, ConfigError> {
    link_at(ck, hw, t, "parallelism.tensor")
}

/// The link at `t` GPUs, for the degree `what`.
fn link_at(ck: &Check, hw: &Hardware, t: u32, what: &str) -> Result<Link, ConfigError> {
    let Some(ic) = &hw.interconnect else {
        return Err(ck.err(
            "hardware.interconnect",
            format!(
                "missing: {what} {t} needs the link between the GPUs; hardware `{}` \
                 gives none, so give it inline: interconnect: {{bandwidth_gbps: BUS_GBPS, latency_us: US}} \
                 (nccl-tests all_reduce_perf reports both)",
                hw.name
            ),
        ));
    };
    let at = |key: &str, v: &ByGpus| {
        v.at(t).ok_or_else(|| {
            ck.err(
                &format!("hardware.interconnect.{key}"),
                format!(
                    "hardware `{}` gives it for {} GPUs, not for the {t} of {what}; give \
                     hardware.interconnect inline with a figure for {t}",
                    hw.name,
                    v.counts()
                ),
            )
        })
    };
    Ok(Link {
        bandwidth_gbps: at("bandwidth_gbps", &ic.bandwidth_gbps)?,
        latency_us: at("latency_us", &ic.latency_us)?,
    })
}

/// No architecture: the two numbers of docs/engine.md, on one GPU.
fn plain(w: &Weights, kv: &KvCache, hw: &Hardware) -> Deployment {
    let parameters = w.parameters_billions.unwrap_or(0.0) * 1e9;
    let kv_bytes = kv.bytes_per_token.unwrap_or(0);
    Deployment {
        parameters,
        active_parameters: parameters,
        weight_bytes: parameters * w.bytes_per_parameter,
        kv_bytes_per_token: kv_bytes,
        kv_bytes_per_token_per_gpu: kv_bytes,
        peak_tflops: hw.peak_tflops,
        peak: PeakUse { dtype: weight_dtype(w.bytes_per_parameter), key: "peak_tflops", fallback: None },
        ..Deployment::default()
    }
}

pub(crate) fn with_architecture(
    ck: &Check,
    a: &Architecture,
    w: &Weights,
    kv: &KvCache,
    hw: &Hardware,
    tensor: u32,
    link: Option<Link>,
) -> Result<Deployment, ConfigError> {
    let (parameters, parameters_from) = match w.parameters_billions {
        Some(p) => (p * 1e9, FigureSource::Override),
        None => (a.parameters() as f64, FigureSource::Architecture),
    };
    let experts = a.all_expert_parameters() as f64;
    if parameters < experts {
        return Err(ck.err(
            "model.weights.parameters_billions",
            format!(
                "{} is not allowed: the architecture's experts alone hold {:.3} B parameters",
                parameters / 1e9,
                experts / 1e9
            ),
        ));
    }
    let t = u64::from(tensor);
    let element = kv.dtype.unwrap_or(KvDtype::Auto).element_bytes();
    let (kv_bytes, kv_per_gpu, kv_from) = match kv.bytes_per_token {
        // An explicit figure scales by the share of KV heads a GPU holds.
        Some(b) => (b, a.kv_bytes_on_gpu(b, t), FigureSource::Override),
        None => (a.kv_bytes_per_token(element, 1), a.kv_bytes_per_token(element, t), FigureSource::Architecture),
    };
    // Without a dtype, 1-byte weights are FP8 and any other size 16-bit
    // for the peak (INT4 of 0.5 bytes is W4A16).
    let (class, label) = match w.dtype {
        Some(d) => (d.peak_class(), d.as_str().to_string()),
        None if w.bytes_per_parameter == 1.0 => (PeakClass::Eight, weight_dtype(1.0)),
        None => (PeakClass::Sixteen, weight_dtype(w.bytes_per_parameter)),
    };
    let (peak_tflops, peak) = peak_for(class, label, hw);
    let expert_peak = w.expert_dtype.map(|e| peak_for(e.peak_class(), e.as_str().to_string(), hw));
    let weight_bytes = match w.expert_dtype {
        None => parameters * w.bytes_per_parameter,
        Some(e) => (parameters - experts) * w.bytes_per_parameter + experts * e.bytes(),
    };
    Ok(Deployment {
        architecture_origin: None,
        tensor_parallel: tensor,
        parameters,
        parameters_from,
        active_parameters: parameters - (a.parameters() - a.active_parameters()) as f64,
        weight_bytes,
        kv_bytes_per_token: kv_bytes,
        kv_from,
        kv_bytes_per_token_per_gpu: kv_per_gpu,
        window_kv_bytes_per_token: a.window_kv_bytes_per_token(element, 1),
        window_kv_bytes_per_token_per_gpu: a.window_kv_bytes_per_token(element, t),
        peak_tflops,
        peak,
        expert_peak,
        link,
        wide: None,
        pipeline: None,
    })
}

/// `parallelism.data`, `expert` and `expert_imbalance`: attention
/// data-parallel ranks and expert parallelism inside one engine, for a
/// mixture of experts only (a dense model's data parallelism is
/// `cluster.replicas`). Expert parallelism spans the engine's GPUs, as
/// vLLM's `--enable-expert-parallel` does (EP = TP x DP).
fn wide(
    ck: &Check,
    par: &RawParallelism,
    arch: Option<&Architecture>,
    tensor: u32,
    hw: &Hardware,
) -> Result<Option<llmsim_core::engine::cost::Wide>, ConfigError> {
    let range = |k: &str| schema::range(&format!("parallelism.{k}"));
    let data = par.data.map(|d| ck.whole32("parallelism.data", d, range("data"))).transpose()?.unwrap_or(1);
    let expert = par.expert.map(|e| ck.whole32("parallelism.expert", e, range("expert"))).transpose()?.unwrap_or(1);
    let expert_tensor = par
        .expert_tensor
        .map(|g| ck.whole32("parallelism.expert_tensor", g, range("expert_tensor")))
        .transpose()?
        .unwrap_or(1);
    let imbalance = par
        .expert_imbalance
        .map(|x| ck.real("parallelism.expert_imbalance", x, range("expert_imbalance")))
        .transpose()?;
    if data == 1 && expert == 1 {
        if imbalance.is_some() {
            return Err(ck.err("parallelism.expert_imbalance", "needs parallelism.expert above 1"));
        }
        if expert_tensor > 1 {
            return Err(ck.err(
                "parallelism.expert_tensor",
                format!(
                    "{expert_tensor} needs parallelism.expert above 1 (without expert parallelism the experts \
                     split over parallelism.tensor, as attention does)"
                ),
            ));
        }
        return Ok(None);
    }
    let key = if data > 1 { "parallelism.data" } else { "parallelism.expert" };
    let Some(a) = arch.filter(|a| a.is_moe()) else {
        return Err(ck.err(
            key,
            "needs a mixture of experts (model.architecture.experts above 0); a dense model's data parallelism \
             is replicas: cluster.replicas",
        ));
    };
    let gpus = u64::from(tensor) * u64::from(data);
    if expert_tensor > 1 {
        if u64::from(expert) * u64::from(expert_tensor) != gpus {
            return Err(ck.err(
                "parallelism.expert_tensor",
                format!(
                    "{expert_tensor} is not allowed: expert {expert} x expert_tensor {expert_tensor} must be the \
                     engine's {gpus} GPUs (tensor {tensor} x data {data})"
                ),
            ));
        }
        if data > 1 {
            return Err(ck.err(
                "parallelism.expert_tensor",
                format!(
                    "{expert_tensor} beside parallelism.data {data} is not modelled (the all-to-all into split \
                     experts): give it with data 1"
                ),
            ));
        }
        if !a.expert_intermediate_size.is_multiple_of(u64::from(expert_tensor)) {
            return Err(ck.err(
                "parallelism.expert_tensor",
                format!(
                    "{expert_tensor} does not divide the experts' {} intermediate size",
                    a.expert_intermediate_size
                ),
            ));
        }
    } else if u64::from(expert) != gpus {
        return Err(ck.err(
            "parallelism.expert",
            format!(
                "{expert} is not allowed: expert parallelism spans the engine's {gpus} GPUs (tensor {tensor} x data \
                 {data}), as vLLM's --enable-expert-parallel does; allowed: {gpus} (or fewer with \
                 parallelism.expert_tensor)"
            ),
        ));
    }
    if !a.experts.is_multiple_of(u64::from(expert)) {
        return Err(ck.err(
            "parallelism.expert",
            format!("{expert} does not divide the {} experts: each GPU holds whole experts", a.experts),
        ));
    }
    let expert_link = if data > 1 { Some(expert_link(ck, hw, expert)?) } else { None };
    Ok(Some(llmsim_core::engine::cost::Wide {
        data,
        expert,
        expert_tensor,
        imbalance: imbalance.unwrap_or(1.0),
        expert_link,
    }))
}

/// The all-to-all's link over `e` GPUs. Inside a node, the interconnect's
/// figures at `e`. Across nodes (`e > gpus_per_node`), each GPU sends the
/// share `f = (e - node) / (e - 1)` of its bytes to other nodes through
/// its NIC (`hardware.network`) and the rest over NVLink (the
/// interconnect at `node` GPUs), both at once, so the bytes move at
/// `1 / max(f / network, (1 - f) / nvlink)` and the fixed cost is the
/// larger of the two latencies (docs/deployments.md).
fn expert_link(ck: &Check, hw: &Hardware, e: u32) -> Result<Link, ConfigError> {
    let node = hw.gpus_per_node.unwrap_or(DEFAULT_GPUS_PER_NODE);
    if e <= node {
        return link_at(ck, hw, e, "parallelism.expert");
    }
    let nvlink = link_at(ck, hw, node, "parallelism.expert (inside a node)")?;
    let Some(net) = hw.network else {
        return Err(ck.err(
            "hardware.network",
            format!(
                "missing: parallelism.expert {e} spans more than one {node}-GPU node (hardware.gpus_per_node), and \
                 hardware `{}` gives no network link; give it inline: network: {{bandwidth_gbps: GBPS, latency_us: \
                 US}} (one GPU's NIC; nccl-tests alltoall_perf over two nodes)",
                hw.name
            ),
        ));
    };
    let f = f64::from(e - node) / f64::from(e - 1);
    Ok(Link {
        bandwidth_gbps: 1.0 / (f / net.bandwidth_gbps).max((1.0 - f) / nvlink.bandwidth_gbps),
        latency_us: net.latency_us.max(nvlink.latency_us),
    })
}

/// Blocks a request holds for its sliding-window layers: the window's
/// blocks at most, `ceil(window / block_size) + 1` (vLLM frees a block
/// once every token in it has left the window, so a decode holds the
/// window's tokens and the block being filled), in units of the full
/// layers' block: `ceil(that * window_bytes / full_bytes)`. Held from
/// admission to the end, so a request shorter than the window is charged
/// the whole window (documented in docs/deployments.md).
fn window_blocks(m: &Model, d: &Deployment) -> u32 {
    let Some(a) = m.architecture.as_ref().filter(|a| a.sliding_layers > 0) else { return 0 };
    let bs = u64::from(m.kv_cache.block_size);
    let window = a.sliding_window.div_ceil(bs) + 1;
    let full = d.kv_bytes_per_token_per_gpu.max(1);
    u32::try_from((window * d.window_kv_bytes_per_token_per_gpu).div_ceil(full)).unwrap_or(u32::MAX)
}

/// KV capacity of one GPU. Without an architecture, docs/engine.md's figure
/// and error; with one, an error that says how short the GPUs are and
/// which tensor degree would fit.
/// What the GPUs hold beside the model: a speculative drafter's weights
/// (all GPUs) and KV bytes a token a GPU (its layers share the model's
/// blocks), and the LoRA slots' bytes (all GPUs).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Resident<'a> {
    pub drafter: Option<&'a Drafter>,
    pub lora_bytes: f64,
}

pub(crate) fn capacity(
    ck: &Check,
    m: &Model,
    d: &Deployment,
    hw: &Hardware,
    extra: Resident,
) -> Result<KvBudget, ConfigError> {
    let drafter = extra.drafter;
    // The largest pipeline stage's GPUs hold `stage_layers / layers` of
    // the weights and of every token's KV, and set the blocks every
    // stage has (vLLM sizes the cache by its fullest worker).
    let weight_bytes = d.pipeline.map_or(d.weight_bytes, |p| d.weight_bytes * p.stage_layers as f64 / p.layers as f64)
        + drafter.map_or(0.0, |x| x.resident_bytes)
        + extra.lora_bytes;
    let kv_per_gpu = d.kv_bytes_per_token_held() + drafter.map_or(0, |x| x.kv_bytes_per_token_per_gpu);
    let input = KvBudgetInput {
        hbm_gib: hw.hbm_gib,
        gpu_memory_utilization: m.kv_cache.gpu_memory_utilization,
        weight_bytes,
        tensor_parallel: d.tensor_parallel,
        kv_bytes_per_token: kv_per_gpu,
        block_size: m.kv_cache.block_size,
        watermark: m.kv_cache.watermark,
        num_blocks_override: m.kv_cache.num_blocks,
        window_blocks: window_blocks(m, d),
        wide: d.wide.zip(m.architecture.as_ref()).map(|(w, a)| llmsim_core::engine::WideKv {
            data: w.data,
            // the GPUs the experts' bytes spread over
            expert: w.expert * w.expert_tensor,
            expert_weight_bytes: a.all_expert_parameters() as f64
                * m.weights.expert_dtype.map_or(m.weights.bytes_per_parameter, WeightDtype::bytes),
        }),
    };
    KvBudget::compute(&input).map_err(|e| match &m.architecture {
        None => ck.err("model.weights", e.to_string()),
        Some(a) => does_not_fit(ck, m, d, a, &input, e.budget_bytes),
    })
}

fn does_not_fit(
    ck: &Check,
    m: &Model,
    d: &Deployment,
    a: &Architecture,
    input: &KvBudgetInput,
    budget: f64,
) -> ConfigError {
    let t = d.tensor_parallel;
    let per_gpu = d.weight_bytes / f64::from(t);
    let block = (input.kv_bytes_per_token * u64::from(input.block_size)) as f64;
    // KV a token on each of g GPUs: the model's share of ceil(kv_heads / g) heads.
    let fits = |g: u64| {
        let kv = a.kv_bytes_on_gpu(d.kv_bytes_per_token, g);
        d.weight_bytes / g as f64 + (kv * u64::from(input.block_size)) as f64 <= budget
    };
    let suggestion = (u64::from(t) + 1..=a.attention_heads)
        .find(|g| a.attention_heads.is_multiple_of(*g) && fits(*g))
        .map(|g| format!("parallelism.tensor: {g} fits ({:.2} GB of weights a GPU)", d.weight_bytes / g as f64 / 1e9))
        .unwrap_or_else(|| format!("no tensor degree up to the {} attention heads fits", a.attention_heads));
    ck.err(
        "model.weights",
        format!(
            "the model does not fit: {} takes {:.2} GB of weights a GPU ({} parameters x {} bytes{}) of the \
             {:.2} GB that hbm_gib x gpu_memory_utilization allows, leaving no room for one KV block of {} bytes \
             (short by {:.2} GB); {suggestion}, or use fewer bytes_per_parameter (1 for FP8), a larger GPU or \
             kv_cache.num_blocks",
            m.name,
            per_gpu / 1e9,
            llmsim_core::util::thousands(d.parameters.round() as u64),
            m.weights.bytes_per_parameter,
            if t > 1 { format!(" / TP {t}") } else { String::new() },
            budget / 1e9,
            block,
            (per_gpu + block - budget) / 1e9
        ),
    )
}

/// Validates a point-to-point link (`hardware.send_recv`, `hardware.network`); `p` prefixes key paths.
pub(crate) fn point_to_point(
    ck: &Check,
    raw: RawLink,
    key: &str,
    p: &dyn Fn(&str) -> String,
) -> Result<Link, ConfigError> {
    let value = |field: &str, x: f64| {
        ck.real(&p(&format!("{key}.{field}")), x, schema::range(&format!("hardware.{key}.{field}")))
    };
    Ok(Link {
        bandwidth_gbps: value("bandwidth_gbps", raw.bandwidth_gbps)?,
        latency_us: value("latency_us", raw.latency_us)?,
    })
}

/// Validates `hardware.interconnect`; `p` prefixes key paths.
pub(crate) fn interconnect(
    ck: &Check,
    raw: RawInterconnect,
    p: &dyn Fn(&str) -> String,
) -> Result<Interconnect, ConfigError> {
    let by_gpus = |key: &str, v: RawByGpus| -> Result<ByGpus, ConfigError> {
        let path = p(&format!("interconnect.{key}"));
        let value = |path: &str, x: f64| {
            // A profile file names it without `hardware.`; the range is the key's.
            ck.real(path, x, schema::range(&format!("hardware.interconnect.{key}")))
        };
        match v {
            RawByGpus::Fixed(x) => Ok(ByGpus::Fixed(value(&path, x)?)),
            RawByGpus::ByCount(m) => {
                if m.is_empty() {
                    return Err(ck.err(&path, "an empty mapping is not allowed: give a number or {GPUS: number}"));
                }
                let mut out = Vec::new();
                for (g, x) in m {
                    let gpus = ck.whole32(&format!("{path}.{g}"), g, schema::range("parallelism.tensor"))?;
                    out.push((gpus, value(&format!("{path}.{g}"), x)?));
                }
                out.sort_by_key(|(g, _)| *g);
                Ok(ByGpus::ByCount(out))
            }
        }
    };
    Ok(Interconnect {
        bandwidth_gbps: by_gpus("bandwidth_gbps", raw.bandwidth_gbps)?,
        latency_us: by_gpus("latency_us", raw.latency_us)?,
    })
}

#[cfg(test)]
mod tests;
