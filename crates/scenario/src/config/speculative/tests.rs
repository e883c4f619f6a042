//! `speculative:`: the drafter's derived figures (worked by hand in the
//! comments, from the model files' shapes) and every bad-input error.

use crate::config::{Scenario, load_scenario};

fn load(text: &str) -> Result<Scenario, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.yml");
    std::fs::write(&path, text).unwrap();
    load_scenario(&path).map_err(|e| e.to_string())
}

const WORKLOAD: &str =
    "workload: {arrivals: {poisson: {rate: 1}}, requests: 10, prompt_tokens: 100, output_tokens: 10}\n";

/// `model` on an H100 (80 GiB, 3,350 GB/s, NVLink at 350 GB/s) with
/// `speculative:` written as flow YAML.
fn scenario(model: &str, spec: &str) -> String {
    format!(
        "hardware: {{name: h100, hbm_gib: 80, memory_bandwidth_gbps: 3350, peak_tflops: 989, peak_tflops_fp8: 1979, \
         interconnect: {{bandwidth_gbps: 350, latency_us: 10}}}}\n{model}\nspeculative: {spec}\n{WORKLOAD}"
    )
}

fn err(model: &str, spec: &str) -> String {
    load(&scenario(model, spec)).expect_err("should be refused")
}

fn has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{msg:?} lacks {p:?}");
    }
}

#[test]
fn an_eagle3_head_on_llama_8b_holds_its_layer_fc_and_lm_head_and_one_layer_of_kv() {
    let s = load(&scenario("model: llama-3.1-8b", "{method: eagle3, num_speculative_tokens: 3, acceptance_rate: 0.7}"))
        .unwrap();
    let sp = s.speculative.as_ref().unwrap();
    let d = sp.drafter.as_ref().unwrap();
    // One layer: attention 4096*4096 + 2*4096*1024 + 4096*4096 =
    // 41,943,040; MLP 3*4096*14336 = 176,160,768; so 218,103,808.
    // Priced: + a 32,000 x 4096 LM head (131,072,000) + 3 norms (12,288)
    // + the 3h x h projection (50,331,648) = 399,519,744.
    assert_eq!(d.deployment.parameters, 399_519_744.0);
    // Held beside the model: the same weights (its own LM head, no
    // shared one) at 2 bytes: 799,039,488 bytes.
    assert_eq!(d.resident_bytes, 799_039_488.0);
    // One layer of KV: 2 x 8 heads x 128 x 2 bytes.
    assert_eq!(d.kv_bytes_per_token_per_gpu, 4_096);
    // Blocks: (80 GiB x 0.9 - 16,060,522,496 - 799,039,488) / ((131,072
    // + 4,096) x 16) = 60,449,849,344 / 2,162,688 = 27,951.3.
    assert_eq!(s.capacity.num_blocks, 27_951);
    // 1 + 0.7 + 0.49 + 0.343.
    assert!((sp.mean_acceptance_length() - 2.533).abs() < 1e-12);
    let e = s.engine_config();
    let spec = e.speculative.unwrap();
    assert_eq!((spec.tokens, spec.lookahead), (3, 3));
    assert_eq!(spec.accept, vec![0.7; 3]);
    assert!(spec.draft.is_some());
}

#[test]
fn a_llama_1b_draft_beside_llama_70b_at_tp_4_splits_like_the_model() {
    let s = load(&scenario(
        "model: llama-3.1-70b\nparallelism: {tensor: 4}",
        "{method: draft_model, draft_model: llama-3.2-1b, num_speculative_tokens: 4, acceptance_rate: 0.6}",
    ))
    .unwrap();
    let d = s.speculative.as_ref().unwrap().drafter.as_ref().unwrap();
    // Llama-3.2-1B: 16 layers of (attention 2048*2048*2 + 2*2048*512 =
    // 10,485,760; MLP 3*2048*8192 = 50,331,648), a tied 128,256 x 2048
    // embedding (262,668,288) and 33 norms of 2048: 1,235,814,400.
    assert_eq!(d.deployment.parameters, 1_235_814_400.0);
    assert_eq!(d.resident_bytes, 2_471_628_800.0);
    // 2 x 16 layers x 8 KV heads x 64 x 2 bytes = 32,768 a token, 2 of the
    // 8 heads on each of 4 GPUs: 8,192.
    assert_eq!(d.kv_bytes_per_token_per_gpu, 8_192);
    // (77,309,411,328 - 141,107,412,992/4 - 2,471,628,800/4) / ((81,920 +
    // 8,192) x 16) = 41,414,650,880 / 1,441,792 = 28,724.4.
    assert_eq!(s.capacity.num_blocks, 28_724);
}

#[test]
fn deepseek_mtp_adds_one_latent_layer_of_kv_and_its_module_weights() {
    let spec = "{method: mtp, num_speculative_tokens: 1, acceptance_rate: 0.8}";
    let s = load(
        &scenario("model: {preset: deepseek-v3, weights: {dtype: fp8}}\nparallelism: {tensor: 8}", spec)
            .replace("hbm_gib: 80", "hbm_gib: 141"),
    )
    .unwrap();
    let d = s.speculative.as_ref().unwrap().drafter.as_ref().unwrap();
    // The checkpoint's MTP module, 13,463,426,048 parameters (the MTP
    // test of the architecture), at the model's 1 byte (FP8).
    assert_eq!(s.model.weights.bytes_per_parameter, 1.0);
    assert_eq!(d.resident_bytes, 13_463_426_048.0);
    // One layer's latent KV, whole on every GPU: 512 + 64 elements of 2
    // bytes; the model's 61 layers hold 61 times that.
    assert_eq!(d.kv_bytes_per_token_per_gpu, 1_152);
    assert_eq!(s.deployment.kv_bytes_per_token_per_gpu, 61 * 1_152);
    assert_eq!(s.capacity.block_bytes, 62 * 1_152 * 16);
    // Priced as one mixture-of-experts layer (the last layer's kind).
    assert!(d.model.architecture.as_ref().unwrap().is_moe());
}

#[test]
fn an_n_gram_drafter_holds_nothing_and_reserves_no_lookahead() {
    let plain = load(&scenario("model: llama-3.1-8b", "null")).unwrap();
    let s = load(&scenario(
        "model: llama-3.1-8b",
        "{method: ngram, num_speculative_tokens: 5, acceptance_by_position: [0.8, 0.6, 0.3, 0.3, 0]}",
    ))
    .unwrap();
    assert_eq!(s.capacity, plain.capacity);
    let spec = s.engine_config().speculative.unwrap();
    assert_eq!(spec.lookahead, 0);
    assert!(spec.draft.is_none());
    // 1 + 0.8 + 0.6 + 0.3 + 0.3 + 0 = 3.0 tokens a verify step.
    assert!((s.speculative.as_ref().unwrap().mean_acceptance_length() - 3.0).abs() < 1e-12);
    // q_i = r_i / r_(i-1): 0.8, 0.75, 0.5, 1, 0.
    for (q, want) in spec.accept.iter().zip([0.8, 0.75, 0.5, 1.0, 0.0]) {
        assert!((q - want).abs() < 1e-12, "{:?}", spec.accept);
    }
    assert!(plain.engine_config().speculative.is_none());
}

#[test]
fn a_model_given_as_numbers_drafts_with_a_draft_given_as_numbers() {
    let model = "model: {name: m, context_length: 4096, weights: {parameters_billions: 7}, kv_cache: {bytes_per_token: \
                 524288}}";
    let s = load(&scenario(
        model,
        "{method: draft_model, num_speculative_tokens: 2, acceptance_rate: 0.5, draft_parameters_billions: 0.5, \
         draft_kv_bytes_per_token: 65536}",
    ))
    .unwrap();
    let d = s.speculative.as_ref().unwrap().drafter.as_ref().unwrap();
    assert_eq!((d.resident_bytes, d.kv_bytes_per_token_per_gpu), (1e9, 65_536));
    let e = err(model, "{method: eagle, num_speculative_tokens: 2, acceptance_rate: 0.5}");
    has(&e, &["speculative.draft_model", "missing", "no architecture to derive the head from"]);
}

#[test]
fn bad_speculative_input_is_refused_naming_the_key() {
    let llama = "model: llama-3.1-8b";
    let moe = "model: qwen3-30b-a3b\nparallelism: {tensor: 2, data: 2, expert: 4}";
    let cases: &[(&str, &str, &[&str])] = &[
        ("{num_speculative_tokens: 3, acceptance_rate: 0.7}", llama, &["speculative.method", "missing"]),
        (
            "{method: medusa, num_speculative_tokens: 3, acceptance_rate: 0.7}",
            llama,
            &["unknown method `medusa`", "ngram, eagle"],
        ),
        ("{method: eagle, acceptance_rate: 0.7}", llama, &["speculative.num_speculative_tokens", "missing"]),
        (
            "{method: eagle, num_speculative_tokens: 0, acceptance_rate: 0.7}",
            llama,
            &["num_speculative_tokens", "0 is not allowed", "1 to 32"],
        ),
        ("{method: eagle, num_speculative_tokens: 33, acceptance_rate: 0.7}", llama, &["33 is not allowed"]),
        ("{method: eagle, num_speculative_tokens: 3}", llama, &["speculative.acceptance_rate", "missing"]),
        (
            "{method: eagle, num_speculative_tokens: 3, acceptance_rate: 1.5}",
            llama,
            &["speculative.acceptance_rate", "1.5 is not allowed", "[0, 1]"],
        ),
        (
            "{method: eagle, num_speculative_tokens: 3, acceptance_rate: .nan}",
            llama,
            &["speculative.acceptance_rate", "finite"],
        ),
        ("{method: eagle, num_speculative_tokens: 3, acceptance_rate: -0.1}", llama, &["-0.1 is not allowed"]),
        (
            "{method: eagle, num_speculative_tokens: 2, acceptance_rate: 0.5, acceptance_by_position: [0.5, 0.2]}",
            llama,
            &["not both"],
        ),
        (
            "{method: eagle, num_speculative_tokens: 3, acceptance_by_position: [0.5, 0.2]}",
            llama,
            &["2 rates given", "3 draft positions"],
        ),
        (
            "{method: eagle, num_speculative_tokens: 2, acceptance_by_position: [0.5, 0.6]}",
            llama,
            &["acceptance_by_position[1]", "0.6 is not allowed", "cannot exceed"],
        ),
        (
            "{method: eagle, num_speculative_tokens: 2, acceptance_by_position: [1.2, 0.6]}",
            llama,
            &["acceptance_by_position[0]", "1.2 is not allowed"],
        ),
        (
            "{method: mtp, num_speculative_tokens: 1, acceptance_rate: 0.7}",
            llama,
            &["speculative.method", "mtp_layers"],
        ),
        (
            "{method: ngram, num_speculative_tokens: 3, acceptance_rate: 0.7, draft_model: llama-3.2-1b}",
            llama,
            &["speculative.draft_model", "not allowed with method ngram"],
        ),
        (
            "{method: draft_model, num_speculative_tokens: 3, acceptance_rate: 0.7}",
            llama,
            &["speculative.draft_model", "missing"],
        ),
        (
            "{method: draft_model, num_speculative_tokens: 3, acceptance_rate: 0.7, draft_model: llama-3.1-70b}",
            llama,
            &["speculative.draft_model", "larger than the model"],
        ),
        (
            "{method: draft_model, num_speculative_tokens: 3, acceptance_rate: 0.7, draft_model: lama-3.2-1b}",
            llama,
            &["speculative.draft_model", "lama-3.2-1b", "did you mean `llama-3.2-1b`"],
        ),
        (
            "{method: draft_model, num_speculative_tokens: 3, acceptance_rate: 0.7, draft_model: llama-3.2-1b, \
             draft_parameters_billions: 1}",
            llama,
            &["not both"],
        ),
        (
            "{method: draft_model, num_speculative_tokens: 3, acceptance_rate: 0.7, draft_parameters_billions: 1}",
            llama,
            &["speculative.draft_kv_bytes_per_token", "missing"],
        ),
        (
            "{method: draft_model, num_speculative_tokens: 3, acceptance_rate: 0.7, draft_parameters_billions: 0, \
             draft_kv_bytes_per_token: 10}",
            llama,
            &["speculative.draft_parameters_billions", "0 is not allowed"],
        ),
        ("{method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7, seed: -1}", llama, &["speculative.seed"]),
        (
            "{method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7, tokens: 3}",
            llama,
            &["unknown field `tokens`"],
        ),
        (
            "{method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7}",
            "engine: trtllm\nmodel: llama-3.1-8b",
            &["speculative", "vLLM's scheduler only", "engine trtllm"],
        ),
        (
            "{method: eagle, num_speculative_tokens: 3, acceptance_rate: 0.7}",
            moe,
            &["parallelism.data 2", "not modelled yet"],
        ),
    ];
    for (spec, model, parts) in cases {
        let e = err(model, spec);
        has(&e, parts);
    }
}

#[test]
fn speculative_beside_prefill_and_decode_pools_is_refused() {
    let text = scenario("model: llama-3.1-8b", "{method: ngram, num_speculative_tokens: 2, acceptance_rate: 0.5}")
        + "cluster: {prefill: {replicas: 1}, decode: {replicas: 1}}\n";
    has(&load(&text).unwrap_err(), &["speculative", "pools is not modelled yet"]);
}
