//! The worked numbers of docs/engine.md's per-operator form, from the
//! shapes by hand: Llama 3.1 8B (32 layers, hidden 4096, 32 heads of 128,
//! 8 KV heads, MLP 14,336, vocabulary 128,256) and Llama 3.1 70B on an
//! H100 (989 TFLOPS at 16 bits, 3,350 GB/s), 16-bit weights and KV.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::engine::arch::tests::{llama_3_1_8b, llama_3_1_70b, mixtral_8x7b};
use crate::engine::cost::tests::{decode, prefill};
use crate::engine::cost::{CostInput, DeploymentInput, Link};

/// Every efficiency 1, no overheads, no graphs.
fn ops() -> OperatorInput {
    OperatorInput {
        gemm_half_tokens: 0.0,
        ramp_scale: 1.0,
        attention_compute: 1.0,
        attention_memory: 1.0,
        allreduce_us: None,
        allreduce_efficiency: 1.0,
        per_expert_us: 0.0,
        expert_gemm_efficiency: 1.0,
        eager_layer_us: 0.0,
        cuda_graph_max_tokens: 0,
        peak16_tflops: 989.0,
        dtype: "bf16",
        kernels: None,
    }
}

fn model(arch: Architecture, t: u32, kv: u64, link: Option<Link>, o: OperatorInput) -> CostModel {
    CostModel::new(&input(arch, t, kv, link, o))
}

fn input(arch: Architecture, t: u32, kv: u64, link: Option<Link>, o: OperatorInput) -> CostInput {
    let parameters = arch.parameters() as f64;
    CostInput {
        parameters_billions: 0.0,
        bytes_per_parameter: 2.0,
        kv_bytes_per_token: kv,
        peak_tflops: 989.0,
        memory_bandwidth_gbps: 3350.0,
        compute_efficiency: 1.0,
        memory_efficiency: 1.0,
        step_overhead_ms: 0.0,
        per_sequence_overhead_us: 0.0,
        pipeline: None,
        deployment: Some(DeploymentInput {
            architecture: arch,
            parameters,
            tensor_parallel: t,
            peak_tflops: 989.0,
            link,
            per_layer_overhead_us: 0.0,
            operators: Some(o),
            sliding_window: 0,
            window_kv_bytes_per_token: 0,
            wide: None,
            expert_weights: None,
        }),
    }
}

fn ms(s: f64) -> f64 {
    s * 1e3
}

fn close(x: f64, want: f64, decimals: i32) {
    let unit = 10f64.powi(-decimals);
    assert!((x - want).abs() <= unit / 2.0, "{x} is not {want} to {decimals} decimals");
}

/// Bytes one memory-bound GEMM moves at `m` tokens: its weights at 2
/// bytes, and 16-bit activations in and out.
fn gemm_bytes(n: f64, k: f64, m: f64) -> f64 {
    n * k * 2.0 + 2.0 * m * (n + k)
}

#[test]
fn llama_8b_decode_of_one_at_1024_sums_its_kernels_to_4_5224_ms() {
    let c = model(llama_3_1_8b(), 1, 131_072, None, ops()).cost(&decode(1, 1024));
    // Per layer: qkv 6144 x 4096, o 4096 x 4096, gate_up 28672 x 4096,
    // down 4096 x 14336; at one token every one reads its weights.
    // 50,352,128 + 33,570,816 + 234,946,560 + 117,477,376 = 436,346,880 bytes a layer
    let layer = gemm_bytes(6144.0, 4096.0, 1.0)
        + gemm_bytes(4096.0, 4096.0, 1.0)
        + gemm_bytes(28672.0, 4096.0, 1.0)
        + gemm_bytes(4096.0, 14336.0, 1.0);
    assert_eq!(layer, 436_346_880.0);
    // the LM head at one sample: 128256 x 4096, 1,050,937,856 bytes
    let gemms = 32.0 * layer + gemm_bytes(128_256.0, 4096.0, 1.0);
    assert_eq!(gemms, 15_014_038_016.0);
    close(ms(c.memory_s), (gemms + 1025.0 * 131_072.0) / 3.35e12 * 1e3, 12);
    // attention: 4*32*4096 FLOPs a pair, 1,025 pairs, at 989 TFLOPS
    close(ms(c.compute_s), 537_395_200.0 / 989e12 * 1e3, 12);
    close(ms(c.total_s), 4.5224, 4);
    assert_eq!(c.comm_s, 0.0);
    assert_eq!(c.overhead_s, 0.0);
}

#[test]
fn llama_8b_prefill_of_2048_is_compute_bound_gemms_plus_attention() {
    let fresh = prefill(2048, 0);
    let c = model(llama_3_1_8b(), 1, 131_072, None, ops()).cost(&fresh);
    // GEMMs: 2 * 2048 * 218,103,808 weights a layer * 32 layers at 989 TFLOPS = 28.9053 ms;
    // attention: 4*32*4096 * 2,098,176 pairs = 1.1123 ms; the head reads its weights at one sample.
    let linear = 2.0 * 2048.0 * 218_103_808.0 * 32.0 / 989e12;
    let attention = 4.0 * 32.0 * 4096.0 * 2_098_176.0 / 989e12;
    close(ms(linear), 28.9053, 4);
    close(ms(c.compute_s), ms(linear + attention), 9);
    let head = gemm_bytes(128_256.0, 4096.0, 1.0) / 3.35e12;
    close(ms(c.memory_s), ms(head + 2048.0 * 131_072.0 / 3.35e12), 9);
    close(ms(c.total_s), 30.4114, 4);
    // Half efficiency at 64 tokens: each GEMM takes (2048 + 64) / 2048 as long.
    let slow = model(llama_3_1_8b(), 1, 131_072, None, OperatorInput { gemm_half_tokens: 64.0, ..ops() }).cost(&fresh);
    close(ms(slow.compute_s - attention), ms(linear * 2112.0 / 2048.0), 9);
}

#[test]
fn a_mixture_of_experts_reads_only_the_experts_its_tokens_touch() {
    // Mixtral at one token: 2 of 8 experts a layer, each at one token.
    let c = model(mixtral_8x7b(), 1, 131_072, None, ops()).cost(&decode(1, 1024));
    let attn = gemm_bytes(6144.0, 4096.0, 1.0) + gemm_bytes(4096.0, 4096.0, 1.0);
    let router = gemm_bytes(8.0, 4096.0, 1.0);
    let expert = gemm_bytes(28672.0, 4096.0, 1.0) + gemm_bytes(4096.0, 14336.0, 1.0);
    let head = gemm_bytes(32000.0, 4096.0, 1.0);
    let bytes = 32.0 * (attn + router + 2.0 * expert) + head + 1025.0 * 131_072.0;
    close(ms(c.memory_s), ms(bytes / 3.35e12), 9);
    // 5 us for each touched expert: 2 a layer, 32 layers
    let fixed =
        model(mixtral_8x7b(), 1, 131_072, None, OperatorInput { per_expert_us: 5.0, ..ops() }).cost(&decode(1, 1024));
    close(ms(fixed.total_s - c.total_s), 32.0 * 2.0 * 5e-3, 9);
    // 16-bit experts run at the dense GEMMs' rate whatever `expert_gemm` says.
    let slow16 = model(mixtral_8x7b(), 1, 131_072, None, OperatorInput { expert_gemm_efficiency: 0.4, ..ops() })
        .cost(&decode(1, 1024));
    assert_eq!(slow16.total_s, c.total_s);
}

/// Mixtral with 1-byte weights (experts and the rest) at `expert_gemm` `e`.
fn mixtral_fp8(t: u32, e: f64) -> CostModel {
    let mut i = input(mixtral_8x7b(), t, 131_072, None, OperatorInput { expert_gemm_efficiency: e, ..ops() });
    i.bytes_per_parameter = 1.0;
    CostModel::new(&i)
}

#[test]
fn narrow_experts_run_at_the_experts_own_rate() {
    // FP8 Mixtral at one token: 2 experts a layer, each read at 1 byte a
    // weight; at 0.4 of the dense GEMMs' rate their reads take 2.5 times
    // as long, the rest as before.
    let fast = mixtral_fp8(1, 1.0).cost(&decode(1, 1024));
    let slow = mixtral_fp8(1, 0.4).cost(&decode(1, 1024));
    let expert = 28672.0 * 4096.0 + 2.0 * (28672.0 + 4096.0) + 4096.0 * 14336.0 + 2.0 * (4096.0 + 14336.0);
    close(ms(slow.memory_s - fast.memory_s), ms(1.5 * 32.0 * 2.0 * expert / 3.35e12), 9);
    close(ms(slow.total_s - fast.total_s), ms(1.5 * 32.0 * 2.0 * expert / 3.35e12), 9);
    assert_eq!(slow.compute_s, fast.compute_s);
}

#[test]
fn the_experts_rate_scales_the_experts_compute_bound_gemms_too() {
    // FP8 Mixtral prefilling 2,048 tokens at TP 2: every expert touched at
    // 2,048 x 2 / 8 = 512 tokens, compute-bound at the 989 TFLOPS peak
    // (each GPU holds half of each expert, 7,168 wide: 2 x 512 x 58.7 M
    // FLOPs take 60.8 us against 23.2 us of reads); at half the rate they
    // take twice as long.
    let at = |e: f64| mixtral_fp8(2, e).cost(&prefill(2048, 0));
    let experts = 32.0 * 8.0 * 2.0 * 512.0 * (14336.0 * 4096.0 + 4096.0 * 7168.0) / 989e12;
    close(ms(at(0.5).compute_s - at(1.0).compute_s), ms(experts), 9);
    close(ms(at(0.5).total_s - at(1.0).total_s), ms(experts), 9);
}

#[test]
fn data_and_expert_parallel_ranks_price_one_gpu_of_the_busiest_rank() {
    // Mixtral on 2 H100s: data 2, expert 2, tensor 1 (each GPU a rank with
    // 4 whole experts), a link of 350 GB/s and 10 us; 4 decodes at 1024.
    let link = Link { bandwidth_gbps: 350.0, latency_us: 10.0 };
    let wide = |imbalance: f64| {
        let mut i = input(mixtral_8x7b(), 1, 131_072, None, ops());
        if let Some(d) = &mut i.deployment {
            d.wide = Some(crate::engine::cost::Wide {
                data: 2,
                expert: 2,
                expert_tensor: 1,
                imbalance,
                expert_link: Some(link),
            });
        }
        CostModel::new(&i)
    };
    let c = wide(1.0).cost(&decode(4, 1024));
    // A rank runs 2 tokens through attention's projections and the router.
    let rank =
        32.0 * (gemm_bytes(6144.0, 4096.0, 2.0) + gemm_bytes(4096.0, 4096.0, 2.0) + gemm_bytes(8.0, 4096.0, 2.0));
    // The engine's 4 tokens touch 8 * (1 - (6/8)^4) = 5.46875 experts, 8/5.46875
    // tokens each; half of them are on this GPU, whole (14,336 wide).
    let (touched, each) = (5.46875, 8.0 / 5.46875);
    let expert = gemm_bytes(28672.0, 4096.0, each) + gemm_bytes(4096.0, 14336.0, each);
    // The head samples the rank's 2 tokens; the rank holds half the KV.
    let head = gemm_bytes(32000.0, 4096.0, 2.0);
    let bytes = rank + 32.0 * touched / 2.0 * expert + head + 4100.0 / 2.0 * 131_072.0;
    close(ms(c.memory_s), ms(bytes / 3.35e12), 9);
    // Every GEMM here reads its weights; attention computes half the 4 x 1,025
    // pairs at 4 * 32 * 4,096 FLOPs each.
    close(ms(c.compute_s), ms(524_288.0 * 4100.0 / 2.0 / 989e12), 9);
    // No all-reduce at tensor 1; 2 all-to-alls a MoE layer:
    // 64 x 10 us + 4 tokens x 2 experts x 8,192 bytes x (1/2) / 2 GPUs / 350 GB/s each
    close(ms(c.comm_s), ms(0.64e-3 + 64.0 * 4.0 * 2.0 * 8192.0 * 0.5 / 2.0 / 350e9), 9);
    // Twice the imbalance: twice the busiest GPU's expert tokens (still
    // reading weights) and all-to-all bytes.
    let s = wide(2.0).cost(&decode(4, 1024));
    let busier = gemm_bytes(28672.0, 4096.0, 2.0 * each) + gemm_bytes(4096.0, 14336.0, 2.0 * each);
    close(ms(s.memory_s - c.memory_s), ms(32.0 * touched / 2.0 * (busier - expert) / 3.35e12), 9);
    close(ms(s.comm_s), ms(0.64e-3 + 2.0 * 64.0 * 4.0 * 2.0 * 8192.0 * 0.5 / 2.0 / 350e9), 9);
}

/// [`model`] with the experts over `expert` groups of `expert_tensor`
/// GPUs, one data-parallel rank, uniform routing.
fn one_rank_ep(
    arch: Architecture,
    t: u32,
    kv: u64,
    link: Option<Link>,
    o: OperatorInput,
    expert: u32,
    expert_tensor: u32,
) -> CostModel {
    let mut i = input(arch, t, kv, link, o);
    if let Some(d) = &mut i.deployment {
        d.wide = Some(crate::engine::cost::Wide { data: 1, expert, expert_tensor, imbalance: 1.0, expert_link: link });
    }
    CostModel::new(&i)
}

#[test]
fn experts_over_the_tensor_group_read_the_bytes_tensor_parallelism_reads() {
    // Mixtral on 2 GPUs at TP 2: `expert: 2` (whole experts, half of the
    // touched ones a GPU) against experts split in two (every touched one,
    // half its width). One all-reduce pair a layer either way.
    let link = Some(Link { bandwidth_gbps: 300.0, latency_us: 10.0 });
    let ep = one_rank_ep(mixtral_8x7b(), 2, 65_536, link, ops(), 2, 1).cost(&decode(1, 1024));
    let tp = model(mixtral_8x7b(), 2, 65_536, link, ops()).cost(&decode(1, 1024));
    // 2 experts touched at one token: EP reads one whole (28,672 x 4,096 and
    // 4,096 x 14,336 weights), TP both halves; only the activations differ.
    let whole = gemm_bytes(28672.0, 4096.0, 1.0) + gemm_bytes(4096.0, 14336.0, 1.0);
    let halves = 2.0 * (gemm_bytes(14336.0, 4096.0, 1.0) + gemm_bytes(4096.0, 7168.0, 1.0));
    close(ms(ep.memory_s - tp.memory_s), ms(32.0 * (whole - halves) / 3.35e12), 9);
    assert_eq!(ep.comm_s, tp.comm_s);
}

#[test]
fn experts_split_inside_expert_groups_run_half_the_experts_at_half_the_width() {
    // Mixtral on 4 GPUs at TP 4: `expert: 2, expert_tensor: 2` (each GPU
    // holds 4 experts at half their width, so runs half the touched
    // ones) against TP 4 alone (every touched expert at a quarter of its
    // width). At one token 2 experts are touched: 1 a GPU of width 7,168
    // against 2 of width 3,584: the same weight bytes, other activation
    // bytes, and half the experts' fixed cost (3 us each, 32 layers).
    let link = Some(Link { bandwidth_gbps: 300.0, latency_us: 10.0 });
    let o = OperatorInput { per_expert_us: 3.0, ..ops() };
    let split = one_rank_ep(mixtral_8x7b(), 4, 32_768, link, o.clone(), 2, 2).cost(&decode(1, 1024));
    let tp = model(mixtral_8x7b(), 4, 32_768, link, o).cost(&decode(1, 1024));
    let ep = gemm_bytes(14336.0, 4096.0, 1.0) + gemm_bytes(4096.0, 7168.0, 1.0);
    let tp_bytes = 2.0 * (gemm_bytes(7168.0, 4096.0, 1.0) + gemm_bytes(4096.0, 3584.0, 1.0));
    close(ms(split.memory_s - tp.memory_s), ms(32.0 * (ep - tp_bytes) / 3.35e12), 9);
    close(ms(tp.overhead_s - split.overhead_s), ms(32.0 * 1.0 * 3e-6), 9);
    assert_eq!(split.comm_s, tp.comm_s);
}

#[test]
fn tensor_parallel_all_reduces_follow_the_measured_table_or_the_engine_s_own() {
    // Llama 70B, TP 8, 4 decodes: two all-reduces a layer of 4 x 8192 x 2 = 65,536 bytes.
    let link = Some(Link { bandwidth_gbps: 338.0, latency_us: 21.1 });
    let line = model(llama_3_1_70b(), 8, 40_960, link, ops()).cost(&decode(4, 2048));
    // no table: the link's line, 21.1 us + 2*7/8 * 65,536 B / 338 GB/s
    close(ms(line.comm_s), 160.0 * (21.1e-3 + 1.75 * 65_536.0 / 338e9 * 1e3), 9);
    let mut allreduce = BTreeMap::new();
    allreduce.insert(8, Curve { points: vec![(32_768.0, 20.0), (131_072.0, 22.0)] });
    let tables = Arc::new(KernelTables { source: None, allreduce, gemm: Vec::new() });
    let measured = OperatorInput { kernels: Some(tables), ..ops() };
    let m = model(llama_3_1_70b(), 8, 40_960, link, measured.clone()).cost(&decode(4, 2048));
    // 65,536 B lies a third of the way from 32,768 to 131,072: 20 + 2/3 us
    close(ms(m.comm_s), 160.0 * (20.0 + 2.0 / 3.0) * 1e-3, 9);
    // the engine's own at 5 us + the line's bandwidth is faster: it is used
    let own = OperatorInput { allreduce_us: Some(5.0), ..measured };
    let o = model(llama_3_1_70b(), 8, 40_960, link, own).cost(&decode(4, 2048));
    close(ms(o.comm_s), 160.0 * (5e-3 + 1.75 * 65_536.0 / 338e9 * 1e3), 9);
    // TP 1 has none
    let one = model(llama_3_1_8b(), 1, 131_072, link, ops()).cost(&decode(4, 2048));
    assert_eq!(one.comm_s, 0.0);
}

#[test]
fn a_step_past_the_largest_graph_takes_at_least_its_launches() {
    let fresh = prefill(2048, 0);
    let eager = OperatorInput { eager_layer_us: 2000.0, cuda_graph_max_tokens: 512, ..ops() };
    let m = model(llama_3_1_8b(), 1, 131_072, None, eager);
    // 32 layers * 2 ms = 64 ms of launches, more than the 30.4 ms of kernels
    close(ms(m.cost(&fresh).total_s), 64.0, 9);
    // a decode step of 16 runs as a graph: no floor
    close(
        ms(m.cost(&decode(16, 100)).total_s),
        ms(model(llama_3_1_8b(), 1, 131_072, None, ops()).cost(&decode(16, 100)).total_s),
        12,
    );
}

#[test]
fn a_measured_gemm_replaces_its_formula() {
    let g =
        GemmTable { n: 4096, k: 4096, dtype: "bf16".into(), us: Curve { points: vec![(1.0, 100.0), (3.0, 300.0)] } };
    let tables = Arc::new(KernelTables { source: None, allreduce: BTreeMap::new(), gemm: vec![g] });
    let with = model(llama_3_1_8b(), 1, 131_072, None, OperatorInput { kernels: Some(tables), ..ops() });
    let without = model(llama_3_1_8b(), 1, 131_072, None, ops());
    let (a, b) = (with.cost(&decode(2, 10)), without.cost(&decode(2, 10)));
    // o (4096 x 4096) at 2 tokens: 200 us measured, in every one of 32 layers
    let formula = gemm_bytes(4096.0, 4096.0, 2.0) / 3.35e12;
    close(a.total_s - b.total_s, 32.0 * (200e-6 - formula), 12);
}

/// The stretch's bounds and the search for a step's end rely on it: a
/// larger step never costs less, on random shapes and settings.
#[test]
fn a_larger_step_never_costs_less() {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(27);
    let link = Some(Link { bandwidth_gbps: 300.0, latency_us: 10.0 });
    for _ in 0..300 {
        let o = OperatorInput {
            gemm_half_tokens: rng.random_range(0.0..200.0),
            attention_compute: rng.random_range(0.1..1.0),
            attention_memory: rng.random_range(0.1..1.0),
            allreduce_us: if rng.random_bool(0.5) { Some(rng.random_range(1.0..20.0)) } else { None },
            allreduce_efficiency: rng.random_range(0.2..3.0),
            eager_layer_us: rng.random_range(0.0..100.0),
            cuda_graph_max_tokens: rng.random_range(0..1024),
            ..ops()
        };
        let arch = if rng.random_bool(0.5) { mixtral_8x7b() } else { llama_3_1_70b() };
        let t = [1, 2, 4, 8][rng.random_range(0..4)];
        let m = model(arch, t, 40_960, link, o);
        let small = StepShape {
            tokens: rng.random_range(1..4096),
            sum_ctx: rng.random_range(0..100_000),
            attention_pairs: rng.random_range(0..1_000_000),
            decode_pairs: 0,
            sampled: rng.random_range(0..64),
            batch: rng.random_range(1..64),
            window_ctx: 0,
            window_pairs: 0,
            largest: 0,
        };
        let big = StepShape {
            tokens: small.tokens + rng.random_range(0..4096),
            sum_ctx: small.sum_ctx + rng.random_range(0..100_000),
            attention_pairs: small.attention_pairs + rng.random_range(0..1_000_000),
            decode_pairs: 0,
            sampled: small.sampled + rng.random_range(0..64),
            batch: small.batch + rng.random_range(0..64),
            window_ctx: 0,
            window_pairs: 0,
            largest: 0,
        };
        let (a, b) = (m.cost(&small).total_s, m.cost(&big).total_s);
        assert!(b >= a * (1.0 - 1e-12), "{small:?} costs {a}, more than {big:?} at {b}");
    }
}
