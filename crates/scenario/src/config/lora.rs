//! `lora:` (docs/lora.md): the adapters on the model, their popularity,
//! the GPU slots vLLM's `--max-loras` gives them, and the figures the
//! engine prices them by.

use super::ConfigError;
use super::check::Check;
use super::num::{short_float, short_text};
use super::raw::RawLora;
pub use super::scenario::{Adapter, LORA_BYTES_PER_PARAMETER, Lora, LoraFigures};
use super::scenario::{Deployment, EngineKind, Model};

/// vLLM's `--max-loras` default.
pub const DEFAULT_MAX_LORAS: u32 = 1;
/// vLLM's `--max-lora-rank` default.
pub const DEFAULT_MAX_LORA_RANK: u32 = 16;
/// The ranks vLLM's `--max-lora-rank` accepts.
pub const MAX_LORA_RANKS: [u32; 9] = [1, 8, 16, 32, 64, 128, 256, 320, 512];
/// Host memory to one GPU, GB/s, when not given: a PCIe 4.0 x16 link's
/// usual pinned-copy rate (about 25 of its 32 GB/s).
pub const DEFAULT_LOAD_GBPS: f64 = 25.0;
/// The linear modules an adapter may target, as PEFT names them, and
/// what `target_modules` is when not given (all of them, as
/// `target_modules: all-linear` trains).
pub const MODULES: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

/// Where the scenario stands, for the checks that depend on it.
pub(crate) struct Context<'a> {
    pub model: &'a Model,
    pub deployment: &'a Deployment,
    pub engine: EngineKind,
    pub pools: bool,
    pub speculative: bool,
}

pub(crate) fn build(ck: &Check, raw: RawLora, cx: &Context) -> Result<Lora, ConfigError> {
    let a = refusals(ck, cx)?;
    let max_loras = match raw.max_loras {
        Some(v) => ck.whole32_at("lora.max_loras", v)?,
        None => DEFAULT_MAX_LORAS,
    };
    let max_lora_rank = match raw.max_lora_rank {
        Some(v) => {
            let r = ck.whole32_at("lora.max_lora_rank", v)?;
            if !MAX_LORA_RANKS.contains(&r) {
                return Err(ck.err(
                    "lora.max_lora_rank",
                    format!("{r} is not allowed: vLLM's --max-lora-rank is one of {MAX_LORA_RANKS:?}"),
                ));
            }
            r
        }
        None => DEFAULT_MAX_LORA_RANK,
    };
    let load_bandwidth_gbps = match raw.load_bandwidth_gbps {
        Some(v) => ck.real_at("lora.load_bandwidth_gbps", v)?,
        None => DEFAULT_LOAD_GBPS,
    };
    let base_weight = match raw.base_weight {
        Some(v) => ck.real_at("lora.base_weight", v)?,
        None => 0.0,
    };
    let target_modules = target_modules(ck, raw.target_modules.clone())?;
    let adapters = adapters(ck, &raw, max_lora_rank)?;
    let (h, q, kv, i) = (a.hidden_size, a.q_dim(), a.kv_dim(), a.intermediate_size.unwrap_or(0));
    let module = |m: &str| match m {
        "q_proj" => h + q,
        "k_proj" | "v_proj" => h + kv,
        "o_proj" => q + h,
        _ => h + i, // gate_proj, up_proj, down_proj
    };
    let all: u64 = MODULES.iter().map(|m| module(m)).sum();
    let targets: u64 = target_modules.iter().map(|m| module(m)).sum();
    Ok(Lora {
        max_loras,
        max_lora_rank,
        load_bandwidth_gbps,
        target_modules,
        base_weight,
        adapters,
        derived: LoraFigures {
            width: all * a.layers,
            target_width: targets * a.layers,
            tensor_parallel: cx.deployment.tensor_parallel,
        },
    })
}

/// What LoRA is not modelled with; `Ok` holds the model's architecture.
fn refusals<'a>(ck: &Check, cx: &Context<'a>) -> Result<&'a llmsim_core::engine::arch::Architecture, ConfigError> {
    let why = if cx.engine != EngineKind::Vllm {
        Some(format!("is modelled under engine: vllm only, not engine: {}", cx.engine.as_str()))
    } else if cx.pools {
        Some("is not modelled with prefill/decode pools (cluster.prefill, cluster.decode)".to_string())
    } else if cx.speculative {
        Some("is not modelled beside speculative decoding: remove one of lora and speculative".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        return Err(ck.err("lora", why));
    }
    let Some(a) = cx.model.architecture.as_ref() else {
        return Err(ck.err(
            "lora",
            "needs the model's architecture (its layers and module shapes give an adapter's size): describe \
             the model with model: NAME, model.architecture or model.hf_config",
        ));
    };
    if a.is_moe() || a.mla.is_some() {
        return Err(ck.err(
            "lora",
            "is modelled on dense models with standard attention only (the adapters' modules are Q, K, V, O \
             and a dense MLP); this model has experts or latent attention",
        ));
    }
    Ok(a)
}

fn target_modules(ck: &Check, raw: Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let Some(raw) = raw else { return Ok(MODULES.iter().map(|m| m.to_string()).collect()) };
    if raw.is_empty() {
        return Err(ck.err("lora.target_modules", format!("empty: name at least one of {}", MODULES.join(", "))));
    }
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    for (i, m) in raw.into_iter().enumerate() {
        let m = m.trim().to_string();
        if !MODULES.contains(&m.as_str()) {
            return Err(ck.err(
                &format!("lora.target_modules[{i}]"),
                format!("unknown module `{}`: the modules are {}", short_text(&m), MODULES.join(", ")),
            ));
        }
        if out.contains(&m) {
            return Err(ck.err(&format!("lora.target_modules[{i}]"), format!("`{m}` is named twice")));
        }
        out.push(m);
    }
    Ok(out)
}

/// `lora.adapters`, or `count` adapters of `rank` with Zipf weights.
fn adapters(ck: &Check, raw: &RawLora, max_rank: u32) -> Result<Vec<Adapter>, ConfigError> {
    let rank_fits = |path: &str, r: u32| {
        if r > max_rank {
            return Err(ck.err(
                path,
                format!(
                    "{r} is more than lora.max_lora_rank ({max_rank}): vLLM refuses an adapter of a larger rank; \
                     raise lora.max_lora_rank"
                ),
            ));
        }
        Ok(r)
    };
    match (&raw.adapters, raw.count) {
        (Some(_), Some(_)) => Err(ck.err("lora.count", "give lora.adapters or lora.count, not both")),
        (None, None) => Err(ck.err(
            "lora.adapters",
            "missing: list the adapters ({name, rank, weight} each) or give lora.count (with lora.rank and lora.zipf)",
        )),
        (None, Some(n)) => {
            let n = ck.whole32_at("lora.count", n)?;
            let rank = rank_fits("lora.rank", ck.whole32_at("lora.rank", raw.rank.unwrap_or(16))?)?;
            let zipf = ck.real_at("lora.zipf", raw.zipf.unwrap_or(0.0))?;
            Ok((1..=n).map(|k| Adapter { name: format!("lora-{k}"), rank, weight: f64::from(k).powf(-zipf) }).collect())
        }
        (Some(list), None) => {
            if raw.rank.is_some() || raw.zipf.is_some() {
                let key = if raw.rank.is_some() { "lora.rank" } else { "lora.zipf" };
                return Err(
                    ck.err(key, "goes with lora.count; with lora.adapters give each adapter its rank and weight")
                );
            }
            let most = super::limits::LORA_ADAPTERS;
            if list.is_empty() || !most.contains_whole(list.len() as i128) {
                return Err(ck.err("lora.adapters", format!("{} adapters are not allowed: give {most}", list.len())));
            }
            let mut out: Vec<Adapter> = Vec::with_capacity(list.len());
            for (i, a) in list.iter().enumerate() {
                let p = format!("lora.adapters[{i}]");
                let name = a.name.as_deref().map(str::trim).unwrap_or_default().to_string();
                if name.is_empty() {
                    return Err(
                        ck.err(&format!("{p}.name"), "missing: every adapter has a name (the `model` a request sends)")
                    );
                }
                if out.iter().any(|o| o.name == name) {
                    return Err(ck.err(&format!("{p}.name"), format!("`{}` is named twice", short_text(&name))));
                }
                let rank = match a.rank {
                    Some(r) => ck.whole32(&format!("{p}.rank"), r, &super::limits::LORA_RANK)?,
                    None => max_rank,
                };
                let rank = rank_fits(&format!("{p}.rank"), rank)?;
                let weight = a.weight.unwrap_or(1.0);
                if !(weight.is_finite() && weight > 0.0 && weight <= 1e15) {
                    return Err(ck.err(
                        &format!("{p}.weight"),
                        format!("{} is not allowed: must be above 0 (a share of the requests)", short_float(weight)),
                    ));
                }
                out.push(Adapter { name, rank, weight });
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn scenario(lora: &str) -> crate::config::Scenario {
        let text = format!(
            "hardware: h100-80gb\nmodel: llama-3.1-8b\nworkload:\n  arrivals: {{poisson: {{rate: 1}}}}\n  \
             requests: 10\n  prompt_tokens: 10\n  output_tokens: 10\n{lora}"
        );
        let file = Path::new("t.yml");
        let raw = crate::config::parse_str(&text, file).unwrap_or_else(|e| panic!("{e}"));
        crate::config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn figures_of_llama_3_1_8b_adapters_by_hand() {
        // Llama-3.1-8B: hidden 4,096, Q 32 x 128 = 4,096, KV 8 x 128 =
        // 1,024, MLP 14,336, 32 layers. In + out a layer: q 8,192, k and
        // v 5,120 each, o 8,192, gate, up and down 18,432 each = 81,920.
        let s = scenario("lora: {count: 2, max_loras: 3, target_modules: [q_proj, v_proj]}\n");
        let l = s.lora.as_ref().unwrap();
        // A slot at rank 16 spans every module: 16 x 32 x 81,920 x 2 bytes.
        assert_eq!(l.slot_bytes_per_gpu(), 83_886_080.0);
        assert_eq!(l.resident_bytes(), 3.0 * 83_886_080.0);
        let core = l.core(&s.hardware, 1.0, 1.0);
        // An adapter copies its targets only: 16 x 32 x (8,192 + 5,120) x 2
        // = 13,631,488 bytes at 25 GB/s.
        assert!((core.load_s[0] - 13_631_488.0 / 25e9).abs() < 1e-15, "{}", core.load_s[0]);
        // Reading a slot: 83,886,080 bytes at 3,350 GB/s; a token's math:
        // 2 x 16 x 32 x 81,920 FLOPs at 989 TFLOPS.
        assert!((core.slot_read_s - 83_886_080.0 / 3350e9).abs() < 1e-15);
        assert!((core.token_s - 83_886_080.0 / 989e12).abs() < 1e-18);
        // The three slots leave the KV cache 3 x 83,886,080 bytes, exactly
        // 120 blocks of 16 x 131,072 bytes.
        let plain = scenario("");
        assert_eq!(plain.capacity.num_blocks - s.capacity.num_blocks, 120);
    }

    #[test]
    fn generated_adapters_are_named_in_order_with_zipf_weights() {
        let s = scenario("lora: {count: 3, rank: 8, zipf: 1}\n");
        let l = s.lora.as_ref().unwrap();
        let got: Vec<(&str, u32, f64)> = l.adapters.iter().map(|a| (a.name.as_str(), a.rank, a.weight)).collect();
        assert_eq!(got, [("lora-1", 8, 1.0), ("lora-2", 8, 0.5), ("lora-3", 8, 1.0 / 3.0)]);
    }
}
