//! Every worked check of docs/deployments.md, on hand-computed
//! numbers: H100 (3,350 GB/s, 989 TFLOPS), efficiency 1, 16-bit weights
//! and KV. "Context c" means c tokens cached before the step.

use super::*;
use crate::engine::arch::tests::{llama_3_1_8b, llama_3_1_70b, mixtral_8x7b};
use crate::engine::cost::CostInput;
use crate::engine::cost::tests::{decode, prefill};

fn model(arch: Architecture, t: u32, kv_bytes_per_token: u64, link: Option<Link>) -> CostModel {
    with_layer_overhead(arch, t, kv_bytes_per_token, link, 0.0)
}

/// The cost inputs of `arch` on one GPU of `peak` TFLOPS and `bandwidth`
/// GB/s, efficiency 1, 16-bit weights, no overheads; tests change the
/// fields they are about.
fn input(arch: Architecture, peak: f64, bandwidth: f64, kv: u64) -> CostInput {
    let parameters = arch.parameters() as f64;
    CostInput {
        parameters_billions: 0.0,
        bytes_per_parameter: 2.0,
        kv_bytes_per_token: kv,
        peak_tflops: peak,
        memory_bandwidth_gbps: bandwidth,
        compute_efficiency: 1.0,
        memory_efficiency: 1.0,
        step_overhead_ms: 0.0,
        per_sequence_overhead_us: 0.0,
        pipeline: None,
        deployment: Some(DeploymentInput {
            architecture: arch,
            parameters,
            tensor_parallel: 1,
            peak_tflops: peak,
            link: None,
            per_layer_overhead_us: 0.0,
            operators: None,
            sliding_window: 0,
            window_kv_bytes_per_token: 0,
            wide: None,
            expert_weights: None,
        }),
    }
}

/// `input`'s deployment, to change.
fn deployment(i: &mut CostInput) -> &mut DeploymentInput {
    i.deployment.as_mut().expect("input() gives a deployment")
}

fn with_layer_overhead(arch: Architecture, t: u32, kv: u64, link: Option<Link>, per_layer_us: f64) -> CostModel {
    let mut i = input(arch, 989.0, 3350.0, kv);
    let d = deployment(&mut i);
    (d.tensor_parallel, d.link, d.per_layer_overhead_us) = (t, link, per_layer_us);
    CostModel::new(&i)
}

fn ms(s: f64) -> f64 {
    s * 1e3
}

/// `x` equals `want` to the decimals the spec prints.
fn close(x: f64, want: f64, decimals: i32) {
    let unit = 10f64.powi(-decimals);
    assert!((x - want).abs() <= unit / 2.0, "{x} is not {want} to {decimals} decimals");
}

#[test]
fn llama_8b_decode_of_one_request_at_1024_is_memory_bound_at_4_834_ms() {
    let m = model(llama_3_1_8b(), 1, 131_072, None);
    let c = m.cost(&decode(1, 1024));
    // flops = 2*32*218,103,808 + 4*32*4096*1025 + 2*4096*128256
    //       = 13,958,643,712 + 537,395,200 + 1,050,673,152 = 15,546,712,064
    close(ms(c.compute_s), 15_546_712_064.0 / 989e12 * 1e3, 12);
    close(ms(c.compute_s), 0.0157, 4);
    // bytes = 8,030,261,248*2 + 1025*131072 = 16,060,522,496 + 134,348,800
    close(ms(c.memory_s), 16_194_871_296.0 / 3.35e12 * 1e3, 12);
    close(ms(c.memory_s), 4.8343, 4);
    assert_eq!(c.comm_s, 0.0);
    assert_eq!(c.total_s, c.memory_s);
}

#[test]
fn llama_8b_decode_of_64_requests_at_1024() {
    let c = model(llama_3_1_8b(), 1, 131_072, None).cost(&decode(64, 1024));
    // 64 * (13,958,643,712 + 1,050,673,152) + 524,288 * 64*1025 = 994,989,572,096 flops
    close(ms(c.compute_s), 994_989_572_096.0 / 989e12 * 1e3, 12);
    close(ms(c.compute_s), 1.0061, 4);
    // 16,060,522,496 + 64*1025*131072 = 24,658,845,696 bytes
    close(ms(c.memory_s), 7.3608, 4);
}

#[test]
fn llama_8b_prefill_chunk_of_2048_costs_30_ms_and_twice_that_over_30k_cached_tokens() {
    let m = model(llama_3_1_8b(), 1, 131_072, None);
    // nothing cached: pairs = 2048*2049/2 = 2,098,176; one sample (the chunk completes the prompt)
    let fresh = prefill(2048, 0);
    let c = m.cost(&fresh);
    // 13,958,643,712*2048 + 524,288*2,098,176 + 1,050,673,152 = 29,688,401,494,016 flops
    close(ms(c.compute_s), 29_688_401_494_016.0 / 989e12 * 1e3, 12);
    close(ms(c.compute_s), 30.0186, 4);
    // 16,060,522,496 + 2048*131072 = 16,328,957,952 bytes
    close(ms(c.memory_s), 4.8743, 4);
    // 30,000 cached: pairs = 2048*30000 + 2,098,176 = 63,538,176; KV after = 32,048 tokens
    let cached = prefill(2048, 30_000);
    let c = m.cost(&cached);
    close(ms(c.compute_s), 62.5891, 4);
    close(ms(c.memory_s), 6.0481, 4);
}

#[test]
fn a_chunk_that_does_not_complete_its_prompt_skips_the_lm_head() {
    let m = model(llama_3_1_8b(), 1, 131_072, None);
    let sampled = prefill(2048, 0);
    let chunk = StepShape { sampled: 0, ..sampled };
    // the head is 2*4096*128256 = 1,050,673,152 flops
    let diff = m.cost(&sampled).compute_s - m.cost(&chunk).compute_s;
    close(diff * 989e12, 1_050_673_152.0, 0);
}

const LINK: Link = Link { bandwidth_gbps: 350.0, latency_us: 10.0 };

#[test]
fn llama_70b_decode_of_4_at_2048_over_tp_2_4_8() {
    // flops = 4*(2*80*855,638,016) + 4*80*8192*(4*2049) + 4*2*8192*128256 = 577,499,037,696
    // comm = 2*80*(10 us + 2*(t-1)/t * 4*8192*2 bytes / 350 GB/s)
    let cases = [
        // t, KV bytes a token per GPU (2*80*ceil(8/t)*128*2), compute, memory, comm (ms)
        (2, 163_840, 0.292, 21.4617, 1.63),
        (4, 81_920, 0.146, 10.7308, 1.6449),
        (8, 40_960, 0.073, 5.3654, 1.6524),
    ];
    for (t, kv, compute, memory, comm) in cases {
        let c = model(llama_3_1_70b(), t, kv, Some(LINK)).cost(&decode(4, 2048));
        close(ms(c.compute_s), 577_499_037_696.0 / (f64::from(t) * 989e12) * 1e3, 12);
        close(ms(c.compute_s), compute, 3);
        // (141,107,412,992 / t + 4*2049*kv) / 3.35e12
        close(ms(c.memory_s), (141_107_412_992.0 / f64::from(t) + 8196.0 * kv as f64) / 3.35e12 * 1e3, 12);
        close(ms(c.memory_s), memory, 4);
        let hand = 160.0 * (10e-6 + 2.0 * f64::from(t - 1) / f64::from(t) * 65_536.0 / 350e9);
        close(ms(c.comm_s), ms(hand), 12);
        close(ms(c.comm_s), comm, if t == 2 { 2 } else { 4 });
        assert_eq!(c.total_s, c.memory_s + c.comm_s);
    }
}

#[test]
fn per_layer_overhead_adds_layers_times_it_at_any_tp() {
    for t in [1, 2, 4, 8] {
        let before = with_layer_overhead(llama_3_1_70b(), t, 40_960, Some(LINK), 0.0).cost(&decode(4, 2048));
        let after = with_layer_overhead(llama_3_1_70b(), t, 40_960, Some(LINK), 75.0).cost(&decode(4, 2048));
        // 80 layers * 75 us = 6.0 ms
        close(ms(after.total_s - before.total_s), 6.0, 9);
    }
}

#[test]
fn no_all_reduce_at_tp_1_even_with_a_link() {
    let c = model(llama_3_1_8b(), 1, 131_072, Some(LINK)).cost(&decode(8, 100));
    assert_eq!(c.comm_s, 0.0);
}

#[test]
fn mixtral_batch_1_touches_2_experts_and_batch_64_all_8() {
    let m = model(mixtral_8x7b(), 1, 131_072, None);
    let one = m.cost(&decode(1, 1024));
    // flops = 2*32*394,297,344 + 4*32*4096*1025 + 2*4096*32000 = 26,034,569,216
    close(ms(one.compute_s), 26_034_569_216.0 / 989e12 * 1e3, 12);
    close(ms(one.compute_s), 0.0263, 4);
    // read = (46,702,792,704 - 32*8*176,160,768 + 32*2*176,160,768) * 2 = 12,879,925,248 * 2
    close(ms(one.memory_s), (25_759_850_496.0 + 1025.0 * 131_072.0) / 3.35e12 * 1e3, 12);
    close(ms(one.memory_s), 7.7296, 4);
    let all = m.cost(&decode(64, 1024));
    close(ms(all.compute_s), 1.6847, 4);
    // touched = 8*(1 - 0.75^64), within 1e-7 of all 8: the whole 93.4 GB is read
    close(ms(all.memory_s), 30.4489, 4);
}

#[test]
fn overheads_add_step_layer_and_sequence_terms() {
    let mut input = CostInput {
        parameters_billions: 0.0,
        bytes_per_parameter: 2.0,
        kv_bytes_per_token: 131_072,
        peak_tflops: 989.0,
        memory_bandwidth_gbps: 3350.0,
        compute_efficiency: 1.0,
        memory_efficiency: 1.0,
        step_overhead_ms: 1.5,
        per_sequence_overhead_us: 20.0,
        pipeline: None,
        deployment: Some(DeploymentInput {
            architecture: llama_3_1_8b(),
            parameters: 8_030_261_248.0,
            tensor_parallel: 1,
            peak_tflops: 989.0,
            link: None,
            per_layer_overhead_us: 10.0,
            operators: None,
            sliding_window: 0,
            window_kv_bytes_per_token: 0,
            wide: None,
            expert_weights: None,
        }),
    };
    let c = CostModel::new(&input).cost(&decode(16, 100));
    // 1.5 ms + 32 layers * 10 us + 16 requests * 20 us = 1.5 + 0.32 + 0.32 = 2.14 ms
    close(ms(c.overhead_s), 2.14, 12);
    assert_eq!(c.total_s, c.compute_s.max(c.memory_s) + c.overhead_s);
    // FP8 weights at the FP8 peak halve the bytes and the compute time
    input.bytes_per_parameter = 1.0;
    if let Some(d) = &mut input.deployment {
        d.peak_tflops = 1979.0;
    }
    let fp8 = CostModel::new(&input).cost(&decode(16, 100));
    close(fp8.compute_s / c.compute_s, 989.0 / 1979.0, 12);
    // weights 8,030,261,248 bytes instead of twice that
    close(fp8.memory_s * 3.35e12, 8_030_261_248.0 + 16.0 * 101.0 * 131_072.0, 3);
}

#[test]
fn an_explicit_parameter_count_sets_the_bytes_read_but_not_the_flops() {
    let mut input = input(llama_3_1_8b(), 989.0, 3350.0, 131_072);
    deployment(&mut input).parameters = 9e9;
    let c = CostModel::new(&input).cost(&decode(1, 1024));
    // 9e9 * 2 bytes + 1025 tokens of KV
    close(c.memory_s * 3.35e12, 18e9 + 1025.0 * 131_072.0, 3);
    // the architecture's 15,546,712,064 flops, as without the override
    close(ms(c.compute_s), 0.0157, 4);
    deployment(&mut input).parameters = 8_030_261_248.0;
    assert!(CostModel::new(&input).cost(&decode(1, 1024)).compute_s == c.compute_s);
}

#[test]
fn experts_of_their_own_precision_read_their_bytes_and_run_at_their_peak() {
    // Mixtral with 16-bit attention and MXFP4 experts (0.53125 bytes) on a
    // GPU of 2,250 TFLOPS at 16 bits and 9,000 at FP4.
    let mut i = input(mixtral_8x7b(), 2250.0, 8000.0, 131_072);
    deployment(&mut i).expert_weights =
        Some(ExpertWeights { bytes_per_parameter: 0.53125, peak_tflops: 9000.0, dtype: "int4", ramp_scale: 1.0 });
    let c = CostModel::new(&i);
    // all weights: 1,605,636,096 * 2 + 45,097,156,608 * 0.53125 = 27,169,136,640
    assert_eq!(c.weight_bytes, 27_169_136_640.0);
    let one = c.cost(&decode(1, 1024));
    // read: 3,211,272,192 + 2 experts of 32 layers: 11,274,289,152 * 0.53125 = 5,989,466,112
    close(one.memory_s * 8e12, 9_200_738_304.0 + 1025.0 * 131_072.0, 3);
    // peak: 12,879,925,248 / (1,605,636,096 / 2250 + 11,274,289,152 / 9000) TFLOPS
    let peak = 12_879_925_248.0 / (1_605_636_096.0 / 2250.0 + 11_274_289_152.0 / 9000.0);
    close(one.compute_s * peak * 1e12, 26_034_569_216.0, 0);
    assert!((peak - 6550.286).abs() < 0.001, "{peak}");
}

#[test]
fn experts_split_inside_two_expert_groups_cost_what_tensor_parallelism_costs_in_the_roofline() {
    // Mixtral on 4 GPUs: TP 4 splits every expert in four; `expert: 2,
    // expert_tensor: 2` gives each GPU 4 experts at half their width. A
    // GPU then computes and reads a quarter of the touched experts'
    // FLOPs and bytes either way, and the outputs are summed by the same
    // all-reduces; an imbalance of 1.5 adds half the experts' FLOPs.
    let link = Link { bandwidth_gbps: 350.0, latency_us: 10.0 };
    let at = |wide: Option<Wide>| {
        let mut i = input(mixtral_8x7b(), 989.0, 3350.0, 32_768);
        let d = deployment(&mut i);
        d.tensor_parallel = 4;
        d.link = Some(link);
        d.wide = wide;
        CostModel::new(&i)
    };
    let split = |imbalance| Some(Wide { data: 1, expert: 2, expert_tensor: 2, imbalance, expert_link: None });
    for shape in [decode(4, 1024), decode(64, 512)] {
        let (tp, ep) = (at(None).cost(&shape), at(split(1.0)).cost(&shape));
        close(ep.compute_s * 1e15, tp.compute_s * 1e15, 3);
        close(ep.memory_s * 1e15, tp.memory_s * 1e15, 3);
        close(ep.comm_s * 1e15, tp.comm_s * 1e15, 3);
    }
    // 4 tokens: the experts' 2 x 32 x 2 x 176,160,768 FLOPs a token, a
    // quarter of them a GPU, half again with the imbalance.
    let (even, skewed) = (at(split(1.0)).cost(&decode(4, 1024)), at(split(1.5)).cost(&decode(4, 1024)));
    let experts = 2.0 * 32.0 * 2.0 * 176_160_768.0 * 4.0 / 4.0;
    close((skewed.compute_s - even.compute_s) * 989e12, 0.5 * experts, 0);
}

#[test]
fn two_data_parallel_ranks_with_experts_over_both_gpus_price_a_gpu_of_them() {
    // Mixtral on 2 H100s: data 2, tensor 1, the 8 experts 4 a GPU, a link
    // of 350 GB/s and 10 us between them; 4 requests decoding at 1024.
    let link = Link { bandwidth_gbps: 350.0, latency_us: 10.0 };
    let wide = |imbalance: f64| {
        let mut i = input(mixtral_8x7b(), 989.0, 3350.0, 131_072);
        deployment(&mut i).wide =
            Some(Wide { data: 2, expert: 2, expert_tensor: 1, imbalance, expert_link: Some(link) });
        CostModel::new(&i)
    };
    let c = wide(1.0).cost(&decode(4, 1024));
    // a rank's non-expert FLOPs: (2*12,617,515,008 - 22,548,578,304)*4 + 524,288*4,100 + 262,144,000*4
    //   = 13,943,963,648, half of them on each rank's GPU; the experts' 22,548,578,304*4 over 2 GPUs:
    //   6,971,981,824 + 45,097,156,608 = 52,069,138,432 FLOPs a GPU
    close(c.compute_s * 989e12, 52_069_138_432.0, 0);
    // reads: the rest 1,605,636,096*2; 8*(1 - 0.75^4) = 5.46875 experts touched, half of them on
    // each GPU, 32*176,160,768*2 bytes each; half the KV of 4*1025 tokens
    //   3,211,272,192 + 5.46875*11,274,289,152/2 + 4,100*131,072/2 = 34,308,104,192
    close(c.memory_s * 3.35e12, 34_308_104_192.0, 0);
    // 2 all-to-alls a MoE layer: 64 x 10 us + 4 tokens x 64 x (2 experts x 8,192 bytes x 1/2 / 2) / 350 GB/s
    close(c.comm_s, 0.64e-3 + 4.0 * 64.0 * 4096.0 / 350e9, 15);
    // twice the imbalance: twice the experts' FLOPs and all-to-all bytes
    let s = wide(2.0).cost(&decode(4, 1024));
    close(s.compute_s * 989e12, 6_971_981_824.0 + 2.0 * 45_097_156_608.0, 0);
    close(s.comm_s, 0.64e-3 + 2.0 * 4.0 * 64.0 * 4096.0 / 350e9, 15);
}
