//! `llmsim explain` for a model with an architecture: every derived figure
//! of docs/deployments.md and the input it came from.

use std::fmt::Write;

use llmsim_core::engine::arch::{Architecture, attention_pairs, window_ctx, window_pairs};
use llmsim_core::engine::{EngineConfig, StepShape};
use llmsim_core::util::thousands;
use llmsim_planner::report::summary;
use llmsim_scenario::config::Scenario;
use llmsim_scenario::config::deployment::{FigureSource, PeakUse, weight_dtype};

fn n(x: f64) -> String {
    thousands(x.round() as u64)
}

/// Appends the derived lines.
pub fn render(s: &Scenario, a: &Architecture, out: &mut String) {
    let d = &s.deployment;
    let c = &s.capacity;
    let t = d.tensor_parallel;
    let line = |out: &mut String, name: &str, text: String| {
        let _ = writeln!(out, "#   {name:<13} {text}");
    };
    if let Some(origin) = &d.architecture_origin {
        line(out, "architecture", origin.describe());
    }
    let derived = a.parameters();
    line(
        out,
        "parameters",
        match d.parameters_from {
            FigureSource::Override => format!(
                "{} (model.weights.parameters_billions, which wins over the architecture's {}: weight bytes, \
                 capacity and bytes read use it; FLOPs use the architecture)",
                n(d.parameters),
                thousands(derived)
            ),
            _ => format!(
                "{} = {} + embeddings {} + norms {} (architecture)",
                thousands(derived),
                layer_terms(a),
                thousands(a.embedding_parameters()),
                thousands(a.norm_parameters())
            ),
        },
    );
    if let Some(m) = &a.mla {
        line(
            out,
            "attention",
            format!(
                "multi-head latent attention: {} a layer (q {}, kv_lora_rank {}, heads {} x (nope {} + rope {}), v {}); \
                 attention FLOPs a (query, key) pair {} in prefill, {} in decode (absorbed form)",
                thousands(a.attention_parameters()),
                if m.q_lora_rank > 0 { format!("through rank {}", m.q_lora_rank) } else { "full".to_string() },
                m.kv_lora_rank,
                a.attention_heads,
                m.qk_nope_head_dim,
                m.qk_rope_head_dim,
                m.v_head_dim,
                thousands(a.attention_flops_per_pair()),
                thousands(a.decode_attention_flops_per_pair())
            ),
        );
    }
    line(
        out,
        "active",
        if a.is_moe() {
            format!(
                "{} a token: {} of {} experts a layer (FLOPs); a step reads the experts its tokens touch",
                n(d.active_parameters),
                a.experts_per_token,
                a.experts
            )
        } else {
            format!("{} a token (dense: all of them)", n(d.active_parameters))
        },
    );
    if a.mtp_layers > 0 {
        line(
            out,
            "MTP",
            format!(
                "{} parameters in {} multi-token-prediction module{} (mtp_layers; a layer, a projection, norms and \
                 an embedding and head of their own each), not in the weights below: engines load them only to \
                 draft tokens for speculative decoding",
                thousands(a.mtp_parameters()),
                a.mtp_layers,
                if a.mtp_layers == 1 { "" } else { "s" }
            ),
        );
    }
    let (parallelism, weights) = weight_lines(s, a);
    if let Some(p) = parallelism {
        line(out, "parallelism", p);
    }
    line(out, "weights", weights);
    let kv = kv_line(s, a);
    let kv = match s.deployment.pipeline {
        Some(p) => format!(
            "{kv}; a GPU of the largest pipeline stage holds {} of the {} layers' share: {} bytes",
            p.stage_layers,
            p.layers,
            thousands(s.deployment.kv_bytes_per_token_held())
        ),
        None => kv,
    };
    line(out, "KV per token", kv);
    line(out, "compute peak", peak_line(s));
    if let Some(link) = d.link {
        line(
            out,
            "interconnect",
            format!(
                "{} us + 2 x {}/{t} x bytes / {} GB/s per all-reduce at {t} GPUs (hardware {}){}",
                link.latency_us,
                t - 1,
                link.bandwidth_gbps,
                s.hardware.name,
                match (s.per_operator(), s.hardware.kernels.as_ref().is_some_and(|k| k.allreduce.contains_key(&t))) {
                    (Some(_), true) =>
                        "; per operator: NCCL's measured table at this many GPUs instead, or the \
                                        engine's own all-reduce where that is faster",
                    (Some(_), false) => "; per operator: or the engine's own all-reduce where that is faster",
                    (None, _) => "",
                }
            ),
        );
    }
    if !c.overridden {
        line(
            out,
            "usable",
            format!(
                "{:.3} GB a GPU = {} GiB x {} - weights{}",
                c.usable_bytes / 1e9,
                s.hardware.hbm_gib,
                s.model.kv_cache.gpu_memory_utilization,
                match (t > 1, s.deployment.pipeline.is_some()) {
                    (_, true) => " of the largest pipeline stage",
                    (true, false) => " / TP",
                    (false, false) => "",
                }
            ),
        );
    }
    line(out, "block", format!("{} bytes a GPU = {} tokens", thousands(c.block_bytes), c.block_size));
    line(out, "capacity", summary::capacity_line(s));
    steps(s, out);
    if s.latency.per_layer_overhead_us > 0.0
        || s.latency.per_sequence_overhead_us > 0.0
        || s.latency.request_overhead_ms > 0.0
        || s.latency.step_overhead_ms > 0.0
    {
        line(out, "overheads", overheads(s));
    }
}

/// The `parallelism` line (data and expert parallelism only) and the `weights` line.
fn weight_lines(s: &Scenario, a: &Architecture) -> (Option<String>, String) {
    let (d, c, t) = (&s.deployment, &s.capacity, s.deployment.tensor_parallel);
    let per_gpu = match d.wide {
        Some(w) if w.expert_tensor > 1 => format!(
            "; {:.3} GB a GPU: the rest over TP {t}, the routed experts over EP {} ({} a group), each split over \
             its group's {} GPUs",
            c.weight_bytes / 1e9,
            w.expert,
            a.experts / u64::from(w.expert),
            w.expert_tensor
        ),
        Some(w) => format!(
            "; {:.3} GB a GPU: the rest over TP {t}, the routed experts whole over EP {} ({} a GPU)",
            c.weight_bytes / 1e9,
            w.expert,
            a.experts / u64::from(w.expert)
        ),
        None => match d.pipeline {
            Some(p) => format!(
                "; {:.3} GB a GPU: over TP {t} in the largest of {} pipeline stages ({} of the {} layers; {} GPUs)",
                c.weight_bytes / 1e9,
                p.stages,
                p.stage_layers,
                p.layers,
                d.gpus()
            ),
            None if t > 1 => format!("; {:.3} GB a GPU over TP {t}", c.weight_bytes / 1e9),
            None => String::new(),
        },
    };
    let parallelism = d.wide.map(|w| {
        format!(
            "{} GPUs = tensor {t} x data {}: each rank its own batch and KV (priced balanced: 1/{} of the \
                 batch each; the scheduler's limits are a rank's); routed experts over {} GPUs{}",
            d.gpus(),
            w.data,
            w.data,
            w.expert,
            if w.data > 1 {
                " with an all-to-all dispatch and combine a MoE layer"
            } else {
                ", their outputs summed by the all-reduce"
            }
        )
    });
    let w = &s.model.weights;
    let dtype = w.dtype.map_or_else(|| weight_dtype(w.bytes_per_parameter), |d| d.as_str().to_string());
    let weights = match w.expert_dtype {
        None => format!("{} parameters x {} bytes ({dtype})", n(d.parameters), w.bytes_per_parameter),
        Some(e) => {
            let experts = a.all_expert_parameters() as f64;
            format!(
                "{} parameters x {} bytes ({dtype}) + {} routed-expert parameters x {} bytes ({}, scales included)",
                n(d.parameters - experts),
                w.bytes_per_parameter,
                n(experts),
                e.bytes(),
                e.as_str()
            )
        }
    };
    (parallelism, format!("{:.3} GB = {weights}{per_gpu}", d.weight_bytes / 1e9))
}

/// The layers' share of the parameter count, by layer kind.
fn layer_terms(a: &Architecture) -> String {
    if a.first_dense_layers == 0 {
        return format!("{} layers x {}", a.layers, thousands(a.layer_parameters()));
    }
    format!(
        "{} dense layers x {} + {} expert layers x {}",
        a.dense_layers(),
        thousands(a.attention_parameters() + a.mlp_parameters()),
        a.moe_layers(),
        thousands(a.layer_parameters())
    )
}

fn kv_line(s: &Scenario, a: &Architecture) -> String {
    let d = &s.deployment;
    let dtype = s.model.kv_cache.dtype.map_or("auto", |k| k.as_str());
    let element = s.model.kv_cache.dtype.map_or(2, |k| k.element_bytes());
    let whole = match d.kv_from {
        FigureSource::Override => format!(
            "{} bytes (model.kv_cache.bytes_per_token, which wins over the architecture's {} and over kv_cache.dtype)",
            thousands(d.kv_bytes_per_token),
            thousands(a.kv_bytes_per_token(element, 1))
        ),
        _ => match &a.mla {
            Some(m) => format!(
                "{} bytes = {} layers x (kv_lora_rank {} + qk_rope_head_dim {}) x {element} bytes (kv_cache.dtype {dtype}): \
                 the latent and the rotary key",
                thousands(d.kv_bytes_per_token),
                a.layers,
                m.kv_lora_rank,
                m.qk_rope_head_dim
            ),
            None => format!(
                "{} bytes = 2 x {} {}layers x {} KV heads x {} x {element} bytes (kv_cache.dtype {dtype})",
                thousands(d.kv_bytes_per_token),
                a.full_layers(),
                if a.sliding_layers > 0 { "full-attention " } else { "" },
                a.kv_heads,
                a.head_dim
            ),
        },
    };
    let window = if a.sliding_layers > 0 {
        format!(
            "; and {} bytes a token in the {} sliding-window layers, for the last {} tokens only: {} blocks a \
             request (ceil({} / {}) + 1 of the window, in full-layer blocks)",
            thousands(d.window_kv_bytes_per_token),
            a.sliding_layers,
            a.sliding_window,
            s.capacity.window_blocks,
            a.sliding_window,
            s.model.kv_cache.block_size
        )
    } else {
        String::new()
    };
    let whole = whole + &window;
    let t = u64::from(d.tensor_parallel);
    if t == 1 {
        return whole;
    }
    if a.mla.is_some() {
        return format!("{whole}; all of it on each GPU (the latent is not split by heads)");
    }
    let heads = a.kv_heads_per_gpu(t);
    let replicated = if t > a.kv_heads { ", replicated: TP exceeds the KV heads" } else { "" };
    format!(
        "{whole}; {} a GPU ({heads} of {} KV heads{replicated})",
        thousands(d.kv_bytes_per_token_per_gpu),
        a.kv_heads
    )
}

fn peak_line(s: &Scenario) -> String {
    let d = &s.deployment;
    let w = &s.model.weights;
    let which = |p: &PeakUse| match p.fallback {
        Some(own) => format!("peak_tflops: the hardware gives no {own}, so {} runs at 16 bits", p.dtype),
        None if p.key == "peak_tflops" => "peak_tflops".to_string(),
        None => format!("{}, for {} weights", p.key, p.dtype),
    };
    let Some((expert_tflops, experts)) = &d.expert_peak else {
        let which = match w.dtype {
            Some(_) => which(&d.peak),
            None if d.peak_is_fp8() => "peak_tflops_fp8, for 1-byte weights".into(),
            None if w.bytes_per_parameter == 1.0 => "peak_tflops: the hardware gives no peak_tflops_fp8".into(),
            None => "peak_tflops".into(),
        };
        return format!(
            "{} x {} TFLOPS ({which}) x efficiency {}",
            d.tensor_parallel, d.peak_tflops, s.efficiency.compute
        );
    };
    let mean = d.cost_input(s).map_or(d.peak_tflops, |c| c.roofline_peak_tflops());
    format!(
        "{} x {mean:.1} TFLOPS x efficiency {}: a mean weighted by the parameters a token uses of the experts' {expert_tflops} \
         ({}) and the rest's {} ({}); the per-operator form runs each GEMM at its own",
        d.tensor_parallel,
        s.efficiency.compute,
        which(experts),
        d.peak_tflops,
        which(&d.peak)
    )
}

/// Speculative decoding (docs/speculative.md): what the drafter holds, a
/// verify step against a decode step, and the batch where it stops paying.
fn speculative_lines(s: &Scenario, cfg: &EngineConfig, ctx: u64, max_batch: u64, out: &mut String) {
    let (Some(sp), Some(spec), cost) = (&s.speculative, &cfg.speculative, &cfg.cost) else { return };
    let k = sp.num_speculative_tokens;
    let _ = writeln!(out, "#   speculative   {}", summary::speculative_line(sp));
    if let Some(d) = &sp.drafter {
        let _ = writeln!(
            out,
            "#   drafter       holds {:.3} GB of weights beside the model's and {} KV bytes a token a GPU (in the \
             block above); {k} lookahead slots a request",
            d.resident_bytes / f64::from(s.deployment.tensor_parallel) / 1e9,
            thousands(d.kv_bytes_per_token_per_gpu),
        );
    }
    for batch in [1, max_batch] {
        let x = spec.decode_vs_verify(cost, batch, ctx);
        let _ = writeln!(
            out,
            "#   verify        batch {batch} at context {ctx}: {:.3} ms for {} tokens a request + drafter {:.3} ms, \
             {:.2} tokens expected: {:.3} ms a token against {:.3} ms decoding ({:+.0}%)",
            x.verify_s * 1e3,
            k + 1,
            x.draft_s * 1e3,
            spec.mean_acceptance_length(),
            x.per_token_s * 1e3,
            x.decode_s * 1e3,
            (x.per_token_s / x.decode_s - 1.0) * 100.0
        );
    }
    let _ = match spec.break_even(cost, max_batch, ctx) {
        Some(b) => {
            writeln!(out, "#   break-even    from batch {b} at context {ctx}, a token costs more speculating than not")
        }
        None => writeln!(
            out,
            "#   break-even    none up to batch {max_batch} at context {ctx}: speculating pays at every batch"
        ),
    };
}

/// The step costs a planner reasons with.
fn steps(s: &Scenario, out: &mut String) {
    let cfg = s.engine_config();
    let cost = &cfg.cost;
    let (prompt, output) = s.mean_lengths();
    let ctx = (prompt + output / 2.0).round() as u64;
    let fmt = |c: llmsim_core::engine::StepCost| {
        format!(
            "{:.3} ms (compute {:.3} / memory {:.3} / comm {:.3} / overheads {:.3}; {})",
            c.total_s * 1e3,
            c.compute_s * 1e3,
            c.memory_s * 1e3,
            c.comm_s * 1e3,
            c.overhead_s * 1e3,
            if c.compute_bound() { "compute-bound" } else { "memory-bound" }
        )
    };
    let window = s.model.architecture.as_ref().map_or(0, |a| if a.sliding_layers > 0 { a.sliding_window } else { 0 });
    let windowed = |n: u64, c: u64| match window {
        0 => (0, 0),
        w => (window_ctx(n, c, w), window_pairs(n, c, w)),
    };
    let decode = |b: u64, ctx: u64| StepShape {
        tokens: b,
        sum_ctx: b * (ctx + 1),
        attention_pairs: u128::from(b) * attention_pairs(1, ctx),
        decode_pairs: u128::from(b) * attention_pairs(1, ctx),
        sampled: b,
        batch: b,
        window_ctx: b * windowed(1, ctx).0,
        window_pairs: u128::from(b) * windowed(1, ctx).1,
        largest: 1,
    };
    let _ = writeln!(out, "#   decode floor  batch 1 at context 0: {}", fmt(cost.cost(&decode(1, 0))));
    let data = s.deployment.data_parallel();
    let b = u64::from(s.scheduler.max_num_sequences) * u64::from(data);
    let limit = if data > 1 { "max_num_sequences x data" } else { "max_num_sequences" };
    let _ = writeln!(
        out,
        "#   decode        batch 1 at context {ctx} (mean prompt + output / 2): {}",
        fmt(cost.cost(&decode(1, ctx)))
    );
    let _ =
        writeln!(out, "#                 batch {b} ({limit}) at context {ctx}: {}", fmt(cost.cost(&decode(b, ctx))));
    speculative_lines(s, &cfg, ctx, b, out);
    let budget = u64::from(s.scheduler.max_batch_tokens);
    let prefill = StepShape {
        tokens: budget,
        sum_ctx: budget,
        attention_pairs: attention_pairs(budget, 0),
        decode_pairs: 0,
        sampled: 1,
        batch: 1,
        window_ctx: windowed(budget, 0).0,
        window_pairs: windowed(budget, 0).1,
        largest: budget,
    };
    let p = cost.cost(&prefill);
    let _ =
        writeln!(out, "#   full prefill  one prompt of {budget} tokens (max_batch_tokens), nothing cached: {}", fmt(p));
    if let Some(pipe) = &cost.pipeline {
        pipeline_lines(
            s,
            cost,
            pipe,
            [(format!("decode of {b}"), decode(b, ctx)), (format!("prefill of {budget}"), prefill)],
            out,
        );
    }
    // The per-operator form says its own communication below.
    let wide = cost.deployment.as_ref().filter(|d| d.operators.is_none()).and_then(|d| Some((d, d.wide.as_ref()?)));
    if let Some((d, w)) = wide {
        let split = |tokens: u64| {
            let c = d.wide_comm(tokens).unwrap_or_default();
            format!("all-reduce {:.3} + all-to-all {:.3}", c.allreduce_s * 1e3, c.all_to_all_s * 1e3)
        };
        let _ = writeln!(
            out,
            "#   comm (ms)     a decode step of 1: {}; of {b}: {}; a full prefill: {} (experts over {} GPUs, imbalance {})",
            split(1),
            split(b),
            split(budget),
            w.expert,
            w.imbalance
        );
    } else if s.deployment.tensor_parallel > 1 {
        let _ = writeln!(
            out,
            "#   comm          {:.3} ms a decode step of 1, {:.3} of {b}, {:.3} a full prefill (2 all-reduces a layer)",
            cost.cost(&decode(1, ctx)).comm_s * 1e3,
            cost.cost(&decode(b, ctx)).comm_s * 1e3,
            p.comm_s * 1e3
        );
    }
    if let (Some(key), Some(ops)) = (s.per_operator(), cost.deployment.as_ref().and_then(|d| d.operators.as_ref())) {
        let split = |shape: &StepShape| {
            let t = ops.times(shape);
            format!(
                "GEMMs {:.3} ({:.3} of it reading weights) / attention {:.3} compute + {:.3} KV / all-reduce {:.3}{} / \
                 fixed {:.3}",
                t.gemm_s * 1e3,
                t.gemm_memory_bound_s * 1e3,
                t.attention_compute_s * 1e3,
                t.attention_memory_s * 1e3,
                (t.comm_s - t.all_to_all_s) * 1e3,
                if ops.wide.is_some() { format!(" + all-to-all {:.3}", t.all_to_all_s * 1e3) } else { String::new() },
                t.fixed_s * 1e3
            )
        };
        let _ = writeln!(
            out,
            "#   per operator  costs are per operator, added up ({key} is set; docs/deployments.md); largest CUDA \
             graph {} tokens{}",
            s.scheduler.graph_max_tokens(),
            if s.hardware.kernels.is_some() {
                "; measured kernel tables of the hardware where they have a shape"
            } else {
                ""
            }
        );
        if let Some(w) = &ops.wide {
            let _ = writeln!(
                out,
                "#                 one GPU of the busiest of {} ranks (a step's tokens split evenly), experts over {} \
                 GPUs, imbalance {}",
                w.data, w.expert, w.imbalance
            );
        }
        let _ = writeln!(out, "#                 decode of {b} at context {ctx} (ms): {}", split(&decode(b, ctx)));
        let _ = writeln!(out, "#                 prefill of {budget} tokens (ms): {}", split(&prefill));
    }
}

/// The pipeline's stages, and for each step its pass, hand-offs and bubble.
fn pipeline_lines(
    s: &Scenario,
    cost: &llmsim_core::engine::CostModel,
    pipe: &llmsim_core::engine::Pipeline,
    shapes: [(String, StepShape); 2],
    out: &mut String,
) {
    let layers = s.model.architecture.as_ref().map_or(0, |a| a.layers);
    let _ = writeln!(
        out,
        "#   pipeline      {} stages of at most {} of the {layers} layers, as many micro-batches in flight; a step \
         lasts its busiest micro-batch's pass through every stage plus {} hand-off(s) (docs/deployments.md)",
        pipe.stages,
        pipe.stage_layers,
        pipe.stages - 1
    );
    for (what, shape) in shapes {
        let split = pipe.split(&shape);
        let period = cost.cost(&shape).total_s;
        // The largest stage runs its layers' share of each micro-batch's
        // pass, at most the busiest one's.
        let pass = period - split.handoffs_s;
        let share = pipe.stage_layers as f64 / layers.max(1) as f64;
        let busy = (split.micro_batches as f64 * pass / split.stage_factor * share).min(period);
        let _ = writeln!(
            out,
            "#                 {what}: {} micro-batch{}, the busiest {} tokens; pass {:.3} ms + hand-offs {:.3} ms; \
             a stage busy {:.3} ms of it, pipeline bubble {:.3} ms ({:.0}%)",
            split.micro_batches,
            if split.micro_batches == 1 { "" } else { "es" },
            split.busiest.tokens,
            pass * 1e3,
            split.handoffs_s * 1e3,
            busy * 1e3,
            (period - busy) * 1e3,
            (period - busy) / period * 100.0
        );
    }
}

/// The latency terms, each with its per-step or per-request figure.
pub fn overheads(s: &Scenario) -> String {
    let l = &s.latency;
    let layers = s.model.architecture.as_ref().map_or(0, |a| a.layers);
    let mut parts = vec![format!("step {} ms", l.step_overhead_ms)];
    if l.per_layer_overhead_us > 0.0 {
        parts.push(format!(
            "{layers} layers x {} us = {:.3} ms a step",
            l.per_layer_overhead_us,
            layers as f64 * l.per_layer_overhead_us / 1e3
        ));
    }
    if l.per_sequence_overhead_us > 0.0 {
        parts.push(format!("{} us per request scheduled in a step", l.per_sequence_overhead_us));
    }
    if l.request_overhead_ms > 0.0 {
        parts.push(format!(
            "{} ms before a request reaches the engine (counted in TTFT, E2E and queue)",
            l.request_overhead_ms
        ));
    }
    parts.join("; ")
}
