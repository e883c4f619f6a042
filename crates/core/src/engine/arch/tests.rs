//! The parameter and KV formulas of docs/deployments.md on the models
//! its worked checks name, each expectation computed by hand from the
//! published config.json figures (the arithmetic is in the comments).

use super::*;

fn dense(layers: u64, hidden: u64, heads: u64, kv_heads: u64, intermediate: u64, vocab: u64) -> Architecture {
    Architecture {
        layers,
        hidden_size: hidden,
        attention_heads: heads,
        kv_heads,
        head_dim: hidden / heads,
        intermediate_size: Some(intermediate),
        vocab_size: vocab,
        tie_word_embeddings: false,
        experts: 0,
        experts_per_token: 0,
        expert_intermediate_size: 0,
        shared_expert_intermediate_size: 0,
        first_dense_layers: 0,
        mla: None,
        sliding_window: 0,
        sliding_layers: 0,
        attention_bias: false,
        mlp_bias: false,
        attention_sinks: false,
        mtp_layers: 0,
    }
}

/// meta-llama/Llama-3.1-8B config.json.
pub(crate) fn llama_3_1_8b() -> Architecture {
    dense(32, 4096, 32, 8, 14336, 128256)
}

/// meta-llama/Llama-3.1-70B config.json.
pub(crate) fn llama_3_1_70b() -> Architecture {
    dense(80, 8192, 64, 8, 28672, 128256)
}

/// mistralai/Mixtral-8x7B-v0.1 config.json.
pub(crate) fn mixtral_8x7b() -> Architecture {
    Architecture {
        experts: 8,
        experts_per_token: 2,
        expert_intermediate_size: 14336,
        ..dense(32, 4096, 32, 8, 14336, 32000)
    }
}

/// Qwen/Qwen3-32B config.json: head_dim 128 although hidden / heads = 80.
pub(crate) fn qwen3_32b() -> Architecture {
    Architecture { head_dim: 128, ..dense(64, 5120, 64, 8, 25600, 151936) }
}

/// deepseek-ai/DeepSeek-V3 config.json: MLA, 3 dense layers then 58 of
/// 256 routed experts (8 a token) and one shared expert.
pub(crate) fn deepseek_v3() -> Architecture {
    Architecture {
        head_dim: 192,
        kv_heads: 128,
        experts: 256,
        experts_per_token: 8,
        expert_intermediate_size: 2048,
        shared_expert_intermediate_size: 2048,
        first_dense_layers: 3,
        mla: Some(Mla {
            kv_lora_rank: 512,
            q_lora_rank: 1536,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
        }),
        ..dense(61, 7168, 128, 128, 18432, 129280)
    }
}

#[test]
fn deepseek_v3_has_671_b_parameters_37_5_b_active_and_70_272_latent_kv_bytes_a_token() {
    let a = deepseek_v3();
    // q_a 7168*1536 = 11,010,048; q_b 1536*128*192 = 37,748,736; q norm 1536
    // kv_a 7168*576 = 4,128,768; kv_b 512*128*256 = 16,777,216; kv norm 512
    // o 128*128*7168 = 117,440,512; sum 187,107,328
    assert_eq!(a.attention_parameters(), 187_107_328);
    // dense MLP 3*7168*18432 = 396,361,728
    assert_eq!(a.mlp_parameters(), 396_361_728);
    // expert layer: 256 * 3*7168*2048 (44,040,192) = 11,274,289,152
    //   + router 7168*256 = 1,835,008 + shared 44,040,192 = 11,320,164,352 (+ attention)
    assert_eq!(a.layer_parameters(), 187_107_328 + 11_320_164_352);
    assert_eq!((a.dense_layers(), a.moe_layers()), (3, 58));
    // 61*187,107,328 = 11,413,547,008; 3*396,361,728 = 1,189,085,184;
    // 58*11,320,164,352 = 656,569,532,416; embeddings 2*129280*7168 =
    // 1,853,358,080; norms 123*7168 = 881,664: 671,026,404,352 (published 671 B)
    assert_eq!(a.parameters(), 671_026_404_352);
    // a token: 9 experts (8 + shared) = 396,361,728 + router 1,835,008 a layer
    // 58*398,196,736 = 23,095,410,688 + 11,413,547,008 + 1,189,085,184
    // + 1,853,358,080 + 881,664 = 37,552,282,624 (published 37 B)
    assert_eq!(a.active_parameters(), 37_552_282_624);
    // the experts a step may skip: 58 * 256 * 44,040,192
    assert_eq!(a.all_expert_parameters(), 653_908_770_816);
    // no multi-token-prediction module unless given
    assert_eq!(a.mtp_parameters(), 0);
    // latent 512 + rope key 64 a layer, 61 layers, 2 bytes; not split by TP
    assert_eq!(a.kv_bytes_per_token(2, 1), 70_272);
    assert_eq!(a.kv_bytes_per_token(2, 8), 70_272);
    assert_eq!(a.kv_bytes_per_token(1, 8), 35_136);
    assert_eq!(a.kv_bytes_on_gpu(35_136, 8), 35_136);
    // prefill: 2*61*128*(128+64+128) = 4,997,120 a pair; decode (absorbed):
    // 2*61*128*(2*512+64) = 16,990,208
    assert_eq!(a.attention_flops_per_pair(), 4_997_120);
    assert_eq!(a.decode_attention_flops_per_pair(), 16_990_208);
    assert_eq!(a.linear_flops_per_token(), 2 * (37_552_282_624 - 1_853_358_080 - 881_664));
}

#[test]
fn decode_pairs_are_the_pairs_of_one_token_steps() {
    assert_eq!(decode_pairs(1, 0), 1);
    assert_eq!(decode_pairs(1, 99), 100);
    assert_eq!(decode_pairs(2, 99), 0);
    assert_eq!(decode_pairs(1, 99), attention_pairs(1, 99));
}

#[test]
fn llama_3_1_8b_has_8_030_261_248_parameters_and_131_072_kv_bytes_a_token() {
    let a = llama_3_1_8b();
    // q_dim = 32 * 128 = 4096, kv_dim = 8 * 128 = 1024
    // attn = 4096*4096 + 2*4096*1024 + 4096*4096 = 16,777,216 * 2 + 8,388,608 = 41,943,040
    assert_eq!(a.attention_parameters(), 41_943_040);
    // mlp = 3 * 4096 * 14336 = 176,160,768
    assert_eq!(a.mlp_parameters(), 176_160_768);
    // layer = 218,103,808; 32 layers = 6,979,321,856
    assert_eq!(a.layer_parameters(), 218_103_808);
    // embed = 128256 * 4096 * 2 = 1,050,673,152; norms = 65 * 4096 = 266,240
    assert_eq!(a.embedding_parameters(), 1_050_673_152);
    assert_eq!(a.norm_parameters(), 266_240);
    // 6,979,321,856 + 1,050,673,152 + 266,240
    assert_eq!(a.parameters(), 8_030_261_248);
    assert_eq!(a.active_parameters(), a.parameters());
    // 2 * 32 layers * 1024 * 2 bytes
    assert_eq!(a.kv_bytes_per_token(2, 1), 131_072);
    // fp8 KV: one byte an element
    assert_eq!(a.kv_bytes_per_token(1, 1), 65_536);
}

#[test]
fn llama_3_1_70b_has_70_553_706_496_parameters_and_327_680_kv_bytes_a_token() {
    let a = llama_3_1_70b();
    // attn = 2*8192*8192 + 2*8192*1024 = 134,217,728 + 16,777,216 = 150,994,944
    // mlp = 3*8192*28672 = 704,643,072; layer = 855,638,016; x80 = 68,451,041,280
    // embed = 128256*8192*2 = 2,101,346,304; norms = 161*8192 = 1,318,912
    assert_eq!(a.layer_parameters(), 855_638_016);
    assert_eq!(a.parameters(), 68_451_041_280 + 2_101_346_304 + 1_318_912);
    assert_eq!(a.parameters(), 70_553_706_496);
    // 2 * 80 * 8 * 128 * 2
    assert_eq!(a.kv_bytes_per_token(2, 1), 327_680);
}

#[test]
fn kv_heads_split_over_tensor_parallel_gpus_and_replicate_past_their_count() {
    let a = llama_3_1_70b(); // 8 KV heads
    // TP 2: 4 heads a GPU -> 2*80*4*128*2 = 163,840; TP 4: 2 heads -> 81,920; TP 8: 1 -> 40,960
    assert_eq!(a.kv_bytes_per_token(2, 2), 163_840);
    assert_eq!(a.kv_bytes_per_token(2, 4), 81_920);
    assert_eq!(a.kv_bytes_per_token(2, 8), 40_960);
    // TP 16 (16 divides 64 query heads) still holds ceil(8/16) = 1 head a GPU
    assert_eq!(a.kv_heads_per_gpu(16), 1);
    assert_eq!(a.kv_bytes_per_token(2, 16), 40_960);
    // 3 KV heads over 2 GPUs: ceil(3/2) = 2 each
    let odd = Architecture { kv_heads: 3, ..a };
    assert_eq!(odd.kv_heads_per_gpu(2), 2);
}

#[test]
fn mixtral_8x7b_has_46_7_b_parameters_of_which_12_9_b_are_active() {
    let a = mixtral_8x7b();
    // expert = 3*4096*14336 = 176,160,768
    assert_eq!(a.expert_parameters(), 176_160_768);
    // moe = 8*176,160,768 + 4096*8 = 1,409,286,144 + 32,768 = 1,409,318,912
    // layer = 41,943,040 + 1,409,318,912 = 1,451,261,952; x32 = 46,440,382,464
    // embed = 32000*4096*2 = 262,144,000; norms = 266,240
    assert_eq!(a.layer_parameters(), 1_451_261_952);
    assert_eq!(a.parameters(), 46_702_792_704);
    // active layer = 41,943,040 + 2*176,160,768 + 32,768 = 394,297,344; x32 = 12,617,515,008
    // + 262,144,000 + 266,240
    assert_eq!(a.active_layer_parameters(), 394_297_344);
    assert_eq!(a.active_parameters(), 12_879_925_248);
    // 32 layers * 8 experts * 176,160,768
    assert_eq!(a.all_expert_parameters(), 45_097_156_608);
}

#[test]
fn qwen3_32b_has_32_762_106_880_parameters_and_262_144_kv_bytes_a_token() {
    let a = qwen3_32b();
    // q_dim = 64*128 = 8192 (not the hidden size 5120), kv_dim = 1024
    // attn = 5120*8192 + 2*5120*1024 + 8192*5120 = 41,943,040 + 10,485,760 + 41,943,040 = 94,371,840
    assert_eq!(a.attention_parameters(), 94_371_840);
    // mlp = 3*5120*25600 = 393,216,000; layer = 487,587,840; x64 = 31,205,621,760
    // embed = 151936*5120*2 = 1,555,824,640; norms = 129*5120 = 660,480
    assert_eq!(a.parameters(), 31_205_621_760 + 1_555_824_640 + 660_480);
    assert_eq!(a.parameters(), 32_762_106_880);
    // 2 * 64 * 8 * 128 * 2
    assert_eq!(a.kv_bytes_per_token(2, 1), 262_144);
}

#[test]
fn tied_embeddings_count_the_vocabulary_matrix_once() {
    let tied = Architecture { tie_word_embeddings: true, ..llama_3_1_8b() };
    // 8,030,261,248 - 128256*4096
    assert_eq!(tied.parameters(), 8_030_261_248 - 525_336_576);
}

#[test]
fn a_shared_expert_adds_three_matrices_to_every_moe_layer() {
    let a = Architecture { shared_expert_intermediate_size: 1000, ..mixtral_8x7b() };
    // 3 * 4096 * 1000 = 12,288,000 more a layer, active too; x32 = 393,216,000
    assert_eq!(a.parameters(), 46_702_792_704 + 393_216_000);
    assert_eq!(a.active_parameters(), 12_879_925_248 + 393_216_000);
}

#[test]
fn step_flop_rates_follow_the_formulas() {
    let a = llama_3_1_8b();
    // 2 * 32 * 218,103,808
    assert_eq!(a.linear_flops_per_token(), 13_958_643_712);
    // 4 * 32 * 4096
    assert_eq!(a.attention_flops_per_pair(), 524_288);
    // 2 * 4096 * 128256
    assert_eq!(a.head_flops_per_sample(), 1_050_673_152);
}

#[test]
fn attention_pairs_count_a_causal_triangle_on_top_of_the_cache() {
    // a decode token at context 1024 (1024 cached): 1*1024 + 1 = 1025
    assert_eq!(attention_pairs(1, 1024), 1025);
    // a 2,048-token prefill, nothing cached: 2048*2049/2 = 2,098,176
    assert_eq!(attention_pairs(2048, 0), 2_098_176);
    // on top of 30,000 cached: 2048*30000 + 2,098,176 = 63,538,176
    assert_eq!(attention_pairs(2048, 30_000), 63_538_176);
    // no overflow at the limits of u32 inputs
    let max = u64::from(u32::MAX);
    assert!(attention_pairs(max, max) > u128::from(u64::MAX));
}

#[test]
fn touched_experts_grow_from_k_to_all_with_the_tokens() {
    // 1 token: 8 * (1 - 6/8) = 2
    assert_eq!(touched_experts(8, 2, 1), 2.0);
    // 2 tokens: 8 * (1 - 0.75^2) = 8 * 0.4375 = 3.5
    assert_eq!(touched_experts(8, 2, 2), 3.5);
    // 64 tokens: 8 * (1 - 0.75^64) = 8 - 8.1e-8
    let t = touched_experts(8, 2, 64);
    assert!(t < 8.0 && 8.0 - t < 1e-7, "{t}");
    assert_eq!(touched_experts(0, 0, 64), 0.0);
    // every expert chosen by every token
    assert_eq!(touched_experts(4, 4, 3), 4.0);
}

/// openai/gpt-oss-120b config.json: 36 layers alternating sliding (128
/// tokens) and full attention, 128 experts of 2,880 (4 a token), biases
/// on attention, experts and router, a sink a head.
pub(crate) fn gpt_oss_120b() -> Architecture {
    Architecture {
        head_dim: 64,
        intermediate_size: None,
        experts: 128,
        experts_per_token: 4,
        expert_intermediate_size: 2880,
        sliding_window: 128,
        sliding_layers: 18,
        attention_bias: true,
        mlp_bias: true,
        attention_sinks: true,
        ..dense(36, 2880, 64, 8, 0, 201088)
    }
}

#[test]
fn gpt_oss_120b_has_116_83_b_parameters_and_5_13_b_active_without_the_embedding() {
    let a = gpt_oss_120b();
    // attention: 2880*4096 + 2*2880*512 + 4096*2880 + biases (4096 + 2*512 + 2880) + sinks 64 = 26,550,144
    assert_eq!(a.attention_parameters(), 26_550_144);
    // an expert: 3*2880*2880 + biases 2*2880 + 2880 = 24,891,840
    assert_eq!(a.expert_parameters(), 24_891_840);
    // a layer: 26,550,144 + 128*24,891,840 + router 2880*128 + 128 + norms 2*2880 = 3,213,080,192;
    // 36 of them + embedding and head 2*201,088*2880 + final norm 2880
    assert_eq!(a.parameters(), 36 * 3_213_080_192 + 2 * 579_133_440 + 2880);
    assert_eq!(a.parameters(), 116_829_156_672);
    // a token: 26,550,144 + 4*24,891,840 + 368,768 + 5760 = 126,492,032 a layer
    assert_eq!(a.active_parameters(), 36 * 126_492_032 + 2 * 579_133_440 + 2880);
    // the published 5.13 B leaves out the embedding (a lookup)
    assert_eq!(a.active_parameters() - 579_133_440 - 2880, 5_132_846_592);
    // KV a token at 16 bits: 2*18*8*64*2 = 73,728 bytes in the full layers, as much in the sliding ones
    assert_eq!(a.kv_bytes_per_token(2, 1), 36_864);
    assert_eq!(a.window_kv_bytes_per_token(2, 1), 36_864);
    // attention FLOPs a pair: 4*18*4096 each kind
    assert_eq!(a.attention_flops_per_pair(), 294_912);
    assert_eq!(a.window_attention_flops_per_pair(), 294_912);
}

#[test]
fn gpt_oss_20b_has_20_91_b_parameters_and_3_61_b_active() {
    // 24 layers, 32 experts: a layer 26,550,144 + 32*24,891,840 + 2880*32 + 32 + 5760 = 823,186,976
    let a = Architecture { layers: 24, experts: 32, sliding_layers: 12, ..gpt_oss_120b() };
    assert_eq!(a.parameters(), 24 * 823_186_976 + 2 * 579_133_440 + 2880);
    assert_eq!(a.parameters(), 20_914_757_184);
    // 26,550,144 + 4*24,891,840 + 92,192 + 5760 = 126,215,456 a layer; less the embedding: 3.61 B
    assert_eq!(a.active_parameters() - 579_133_440 - 2880, 24 * 126_215_456 + 579_133_440);
    assert_eq!(a.active_parameters() - 579_133_440 - 2880, 3_608_304_384);
}

#[test]
fn a_sliding_window_bounds_the_keys_each_query_reads() {
    // window 4: a prompt of 6 reads pairs 1+2+3+4+4+4 = 18 and all 6 tokens
    assert_eq!(window_pairs(6, 0, 4), 18);
    assert_eq!(window_ctx(6, 0, 4), 6);
    // a decode at 10 cached: 4 pairs, 4 tokens (3 before it and itself)
    assert_eq!(window_pairs(1, 10, 4), 4);
    assert_eq!(window_ctx(1, 10, 4), 4);
    // a chunk of 3 on 2 cached: positions 3, 4, 5 see 3, 4, 4; tokens 2..5 of the window: 5
    assert_eq!(window_pairs(3, 2, 4), 11);
    assert_eq!(window_ctx(3, 2, 4), 5);
    // inside the window it is plain causal attention
    assert_eq!(window_pairs(3, 0, 128), attention_pairs(3, 0));
    // by brute force over a grid
    for w in 1..7u64 {
        for c in 0..9u64 {
            for n in 1..9u64 {
                let pairs: u64 = (c + 1..=c + n).map(|p| p.min(w)).sum();
                assert_eq!(window_pairs(n, c, w), u128::from(pairs), "n {n} c {c} w {w}");
                let first = (c + 1).saturating_sub(w); // the oldest key the first query sees (0-based)
                assert_eq!(window_ctx(n, c, w), c + n - first, "n {n} c {c} w {w}");
            }
        }
    }
}

/// DeepSeek-V3's multi-token-prediction module (`num_nextn_predict_layers`
/// 1): one more expert layer (187,107,328 + 11,320,164,352) and its two
/// norms (2 x 7,168), `eh_proj` 14,336 x 7,168 = 102,760,448, `enorm`,
/// `hnorm` and the shared head's norm (3 x 7,168 = 21,504), and its own
/// embedding and LM head (2 x 129,280 x 7,168 = 1,853,358,080):
/// 13,463,426,048. With the main model's 671,026,404,352 that is
/// 684,489,830,400: the checkpoint's published 685 B (671 B of the main
/// model and 14 B of the MTP module, in the model card's rounding).
#[test]
fn deepseek_v3_mtp_module_holds_13_5_b_parameters_beside_the_671_b() {
    let a = Architecture { mtp_layers: 1, ..deepseek_v3() };
    let by_hand = 187_107_328 + 11_320_164_352 + 14_336 + 102_760_448 + 21_504 + 1_853_358_080;
    assert_eq!(by_hand, 13_463_426_048_u64);
    assert_eq!(a.mtp_parameters(), by_hand);
    // not loaded without speculative decoding: the model's own counts stay
    assert_eq!((a.parameters(), a.active_parameters()), (671_026_404_352, 37_552_282_624));
    let total = (a.parameters() + a.mtp_parameters()) as f64 / 1e9;
    assert!((total - 685.0).abs() < 0.6, "{total} B against the published 685 B");
    // two modules hold twice as much
    assert_eq!(Architecture { mtp_layers: 2, ..a }.mtp_parameters(), 2 * by_hand);
}

#[test]
fn the_touched_experts_table_gives_the_formula_s_bits() {
    // Every step size up to past the table, for Mixtral (8, 2: every
    // expert from about 130 tokens), DeepSeek-V3 (256, 8), a model whose
    // table ends before every expert is touched (4096 experts, 1), and a
    // dense model.
    for (e, k) in [(8, 2), (256, 8), (4096, 1), (0, 0), (4, 4)] {
        let t = TouchedExperts::new(e, k);
        for tokens in (0..6000).chain([1 << 20, u64::from(u32::MAX)]) {
            assert_eq!(t.at(tokens).to_bits(), touched_experts(e, k, tokens).to_bits(), "{e}/{k} at {tokens}");
        }
    }
    // Mixtral's table stops where every expert is touched: 0.75^T < 2^-54.
    let mixtral = TouchedExperts::new(8, 2);
    assert!(mixtral.table.len() > 100 && mixtral.table.len() < 140, "{}", mixtral.table.len());
}
