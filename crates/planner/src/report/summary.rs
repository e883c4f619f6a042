//! The human-readable summary `llmsim run` prints.

use std::fmt::Write;

use crate::metrics::{RunResult, Stats};
use llmsim_core::util::{opt, thousands};
use llmsim_scenario::config::{Arrivals, EngineKind, Length, Scenario};

/// Capacity in blocks, tokens and whole requests of the mean length.
pub fn capacity_line(s: &Scenario) -> String {
    let c = &s.capacity;
    let (p, o) = s.mean_lengths();
    let per_request = c.blocks_for((p + o).round().max(1.0) as u64).max(1);
    let fit = u64::from(c.num_blocks) / per_request;
    format!(
        "{} blocks x {} = {} tokens ({} requests of {} tokens fit); watermark {} blocks{}",
        thousands(u64::from(c.num_blocks)),
        c.block_size,
        thousands(c.kv_tokens),
        thousands(fit),
        thousands((p + o).round() as u64),
        thousands(u64::from(c.watermark_blocks)),
        if c.overridden { " (kv_cache.num_blocks)" } else { "" }
    )
}

/// `eagle3, 3 draft tokens a step, acceptance 0.7 a token (2.53 tokens a
/// verify step expected); one eagle3 head: ...`: the drafter and what it
/// should yield (docs/speculative.md).
pub fn speculative_line(sp: &llmsim_scenario::config::speculative::Speculative) -> String {
    let acceptance = match (&sp.acceptance_rate, &sp.acceptance_by_position) {
        (Some(a), _) => format!("acceptance {a} a token"),
        (None, Some(r)) => {
            let r: Vec<String> = r.iter().map(|x| x.to_string()).collect();
            format!("acceptance by position {}", r.join(", "))
        }
        (None, None) => String::new(),
    };
    format!(
        "{}, {} draft tokens a step, {acceptance} ({:.2} tokens a verify step expected); {}",
        sp.method.as_str(),
        sp.num_speculative_tokens,
        sp.mean_acceptance_length(),
        sp.drafter.as_ref().map_or_else(|| "drafted on the CPU, free".to_string(), |d| d.about.clone())
    )
}

/// Whose scheduler runs, when not vLLM's, with what shapes its admission:
/// empty under vLLM's.
fn engine_words(s: &Scenario) -> String {
    match s.engine {
        EngineKind::Vllm => String::new(),
        EngineKind::Trtllm => ", TensorRT-LLM's scheduler".to_string(),
        EngineKind::Sglang => {
            let cfg = s.sglang_options();
            let mixed = if cfg.mixed_chunk { "mixed chunks, " } else { "" };
            let reserve = match cfg.ratio {
                Some(r) => format!("new_token_ratio {r}"),
                None => "remaining output reserved whole".to_string(),
            };
            format!(", SGLang's scheduler ({mixed}max_prefill_tokens {}, {reserve})", cfg.max_prefill_tokens)
        }
    }
}

/// `llama-3.1-70b, fp8 weights, 16-bit KV, 4 x h100-80gb (TP 4): ...`:
/// the model, its dtypes and the GPUs of one engine.
pub fn deployment_line(s: &Scenario) -> String {
    let d = &s.deployment;
    let m = &s.model;
    let kv = match m.kv_cache.dtype {
        Some(llmsim_scenario::config::KvDtype::Auto) | None => "16-bit".to_string(),
        Some(k) => k.as_str().to_string(),
    };
    let t = s.tensor_parallel();
    let (gpus, split, per_gpu) = match (d.wide, d.pipeline) {
        (None, None) => (t, format!("TP {t}"), d.weight_bytes / f64::from(t)),
        (Some(w), _) => (d.gpus(), format!("TP {t}, DP {}, EP {}", w.data, w.expert), s.capacity.weight_bytes),
        (None, Some(p)) => (d.gpus(), format!("TP {t} x PP {}", p.stages), s.capacity.weight_bytes),
    };

    let mut out = format!(
        "{}, {} weights, {kv} KV, {gpus} x {} ({split}): {:.2} GB of weights and {} bytes of KV a token per GPU",
        m.name,
        llmsim_scenario::config::deployment::weights_label(&m.weights),
        s.hardware.name,
        per_gpu / 1e9,
        thousands(d.kv_bytes_per_token_held())
    );
    if d.peak_is_fp8() {
        let _ = write!(out, "; FP8 peak {} TFLOPS", d.peak_tflops);
    } else if d.peak.key == "peak_tflops_fp4" {
        let _ = write!(out, "; FP4 peak {} TFLOPS", d.peak_tflops);
    }
    if let Some((tflops, p)) = &d.expert_peak {
        let _ = write!(out, "; experts at {tflops} TFLOPS ({})", p.key);
    }
    if let Some(link) = d.link {
        let _ = write!(out, "; all-reduce {} us + bytes at {} GB/s", link.latency_us, link.bandwidth_gbps);
    }
    if let Some(p) = d.pipeline {
        let _ = write!(
            out,
            "; hand-off {:.1} us + {:.2} ns a token between stages",
            p.handoff_fixed_s * 1e6,
            p.handoff_s_per_token * 1e9
        );
    }
    out
}

/// `rate curve of 3 points, 5 to 25 req/s, 1 burst, about 61,200 requests
/// over the run`.
fn curve_line(c: &llmsim_scenario::config::curve::Curve, duration_s: Option<f64>) -> String {
    use llmsim_scenario::config::curve::{RateCurve, Shape};
    let mut out = match &c.shape {
        Shape::Points(p) => format!("rate curve of {} point{}", p.len(), if p.len() == 1 { "" } else { "s" }),
        Shape::Steps(p) => format!("rate curve of {} step{}", p.len(), if p.len() == 1 { "" } else { "s" }),
        Shape::Daily(d) => {
            format!(
                "daily wave, {} to {} req/s, peak at hour {}, from hour {}",
                d.trough, d.peak, d.peak_hour, d.start_hour
            )
        }
    };
    let rate = RateCurve::new(c, duration_s.unwrap_or(0.0));
    // Three decimals at most: a daily wave's sampled peak is a hair under
    // its `peak`.
    let peak = format!("{:.3}", rate.peak());
    let _ = write!(out, ", peak {} req/s", peak.trim_end_matches('0').trim_end_matches('.'));
    if !c.bursts.is_empty() {
        let _ = write!(out, ", {} burst{}", c.bursts.len(), if c.bursts.len() == 1 { "" } else { "s" });
    }
    if let Some(b) = c.burstiness {
        let _ = write!(out, ", burstiness {b}");
    }
    if let Some(d) = duration_s {
        let _ = write!(
            out,
            ", about {} requests expected",
            llmsim_core::util::thousands(rate.cumulative(d).round() as u64)
        );
    }
    out
}

/// `poisson 20 req/s, 2000 requests, prompt 512, output 64`.
pub fn workload_line(s: &Scenario) -> String {
    let w = &s.workload;
    let mut out = match &w.arrivals {
        Arrivals::Poisson { rate } => format!("poisson {rate} req/s"),
        Arrivals::Gamma { rate, burstiness } => format!("gamma {rate} req/s, burstiness {burstiness}"),
        Arrivals::Constant { rate } => format!("constant {rate} req/s"),
        Arrivals::Closed { concurrency, think_time_s, ramp_s } => {
            let ramp = if *ramp_s > 0.0 { format!(", started over {ramp_s} s") } else { String::new() };
            format!("closed loop, {concurrency} users, think {think_time_s} s{ramp}")
        }
        Arrivals::Trace(t) => format!("trace {} ({} rows)", t.path, t.rows.len()),
        Arrivals::Curve(c) => curve_line(c, w.duration_s),
    };
    if let Some(n) = w.requests {
        let _ = write!(out, ", {n} requests");
    }
    if let Some(d) = w.duration_s {
        let _ = write!(out, ", for {d} s");
    }
    let describe = |l: &Option<Length>| match l {
        None => String::new(),
        Some(Length::Fixed(n)) => n.to_string(),
        Some(other) => format!("{} (mean {:.0})", serde_json::to_string(other).unwrap_or_default(), other.mean()),
    };
    if w.prompt_tokens.is_some() {
        let _ = write!(out, ", prompt {}, output {}", describe(&w.prompt_tokens), describe(&w.output_tokens));
    }
    if let Some(sp) = &w.shared_prefix {
        let _ = write!(out, ", shared prefix of {} tokens in {} groups", sp.tokens, sp.groups);
    }
    if let Some(se) = &w.sessions {
        let turns = match &se.turns {
            Length::Fixed(n) => n.to_string(),
            other => format!("mean {:.1}", other.mean()),
        };
        let _ = write!(out, ", sessions of {turns} turns (think {} s mean)", se.think_s.mean());
    }
    if !w.classes.is_empty() {
        let total: f64 = w.classes.iter().map(|c| c.weight).sum();
        let each: Vec<String> = (w.classes.iter())
            .map(|c| format!("{} {:.0}% priority {}", c.name, 100.0 * c.weight / total, c.priority))
            .collect();
        let _ = write!(out, ", classes {}", each.join(", "));
    }
    let _ = write!(out, ", seed {}", w.seed);
    out
}

/// One line a class: its requests, TTFT, ITL and E2E (p50 / p99) and
/// preemptions (docs/priorities.md).
fn class_rows(out: &mut String, r: &RunResult) {
    let Some(classes) = &r.classes else { return };
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<12} {:>9} {:>9} {:>19} {:>15} {:>19} {:>8}",
        "class", "requests", "req/s", "TTFT p50/p99 ms", "ITL p50/p99 ms", "E2E p50/p99 ms", "preempt"
    );
    let pair = |s: &Stats| format!("{}/{}", opt(s.p50, 1), opt(s.p99, 1));
    for c in classes {
        let _ = writeln!(
            out,
            "  {:<12} {:>9} {:>9.2} {:>19} {:>15} {:>19} {:>8}",
            c.name,
            thousands(c.requests.completed),
            c.throughput.requests_per_s,
            pair(&c.ttft_ms),
            pair(&c.itl_ms),
            pair(&c.e2e_ms),
            thousands(c.preemptions)
        );
    }
}

fn row(out: &mut String, name: &str, s: &Stats) {
    let _ = writeln!(
        out,
        "  {name:<6} {:>10} {:>10} {:>10} {:>10} {:>10}",
        opt(s.mean, 2),
        opt(s.p50, 2),
        opt(s.p90, 2),
        opt(s.p99, 2),
        opt(s.max, 2)
    );
}

/// The whole summary.
pub fn render(s: &Scenario, r: &RunResult) -> String {
    let mut out = String::new();
    let h = &s.hardware;
    let m = &s.model;
    let _ = writeln!(out, "scenario   {}", s.name);
    let _ = writeln!(
        out,
        "hardware   {}: {} GiB, {} GB/s, {} TFLOPS (efficiency compute {}, memory {})",
        h.name, h.hbm_gib, h.memory_bandwidth_gbps, h.peak_tflops, s.efficiency.compute, s.efficiency.memory
    );
    let d = &s.deployment;
    let size = match (m.architecture.is_some(), m.weights.parameters_billions) {
        (false, Some(b)) => format!("{b} B parameters"),
        _ => format!("{} parameters", thousands(d.parameters.round() as u64)),
    };
    let _ = writeln!(
        out,
        "model      {}: {size} x {} bytes = {:.2} GB, {} bytes of KV per token, context {}",
        m.name,
        m.weights.bytes_per_parameter,
        d.weight_bytes / 1e9,
        thousands(d.kv_bytes_per_token),
        thousands(u64::from(m.context_length))
    );
    if m.architecture.is_some() {
        let _ = writeln!(out, "deployment {}", deployment_line(s));
    }
    match s.cluster.as_ref().and_then(|c| c.disagg.as_ref()) {
        // Each pool's replicas have their own hardware, parallelism and cache.
        Some(d) => {
            let _ = writeln!(out, "capacity   prefill replica {}", capacity_line(&d.prefill.scenario));
            let _ = writeln!(out, "           decode replica {}", capacity_line(&d.decode.scenario));
        }
        None => {
            let _ = writeln!(out, "capacity   {}", capacity_line(s));
        }
    }
    let l = &s.latency;
    let mut overheads = format!("step overhead {} ms", l.step_overhead_ms);
    for (name, v, unit) in [
        ("request overhead", l.request_overhead_ms, "ms"),
        ("per layer", l.per_layer_overhead_us, "us"),
        ("per sequence", l.per_sequence_overhead_us, "us"),
    ] {
        if v > 0.0 {
            let _ = write!(overheads, ", {name} {v} {unit}");
        }
    }
    let _ = writeln!(
        out,
        "scheduler  max_batch_tokens {}, max_num_sequences {}, {overheads}{}{}{}",
        s.scheduler.max_batch_tokens,
        s.scheduler.max_num_sequences,
        if s.prefix_caching() { ", prefix caching on" } else { "" },
        match s.scheduler.policy() {
            llmsim_scenario::config::PolicyName::Priority => ", priority scheduling",
            llmsim_scenario::config::PolicyName::Fcfs => "",
        },
        engine_words(s)
    );
    if let Some(sp) = &s.speculative {
        let _ = writeln!(out, "speculative {}", speculative_line(sp));
    }
    let _ = writeln!(out, "workload   {}", workload_line(s));
    if let Some(c) = &s.cluster {
        let _ = writeln!(out, "cluster    {}", super::cluster::cluster_line(s, c));
    }
    let _ = writeln!(out);
    let q = &r.requests;
    let _ = writeln!(
        out,
        "requests   {} completed, {} rejected ({} over context, {} never fit in KV), {} preemptions",
        thousands(q.completed),
        thousands(q.rejected),
        thousands(q.rejected_context_length),
        thousands(q.rejected_kv_capacity),
        thousands(r.preemptions)
    );
    let t = &r.throughput;
    let _ = writeln!(
        out,
        "throughput {:.2} req/s, {:.0} input tok/s, {:.0} output tok/s over {:.3} s",
        t.requests_per_s, t.input_tokens_per_s, t.output_tokens_per_s, t.duration_s
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "  {:<6} {:>10} {:>10} {:>10} {:>10} {:>10}", "ms", "mean", "p50", "p90", "p99", "max");
    row(&mut out, "TTFT", &r.ttft_ms);
    row(&mut out, "ITL", &r.itl_ms);
    row(&mut out, "TPOT", &r.tpot_ms);
    row(&mut out, "E2E", &r.e2e_ms);
    row(&mut out, "queue", &r.queue_ms);
    row(&mut out, "step", &r.steps.duration_ms);
    class_rows(&mut out, r);
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "steps      {} steps, mean batch {:.1} (max {}), mean {:.1} tokens a step",
        thousands(r.steps.count),
        r.steps.mean_batch_size,
        r.steps.max_batch_size,
        r.steps.mean_tokens
    );
    let _ = writeln!(
        out,
        "kv cache   peak {} blocks ({:.1}%), mean {:.1}%",
        thousands(u64::from(r.kv.peak_blocks)),
        r.kv.peak_usage * 100.0,
        r.kv.mean_usage * 100.0
    );
    if let Some(p) = &r.prefix_cache {
        let _ = writeln!(
            out,
            "prefix     hit rate {:.1}%: {} of {} prompt tokens found in the cache",
            p.hit_rate * 100.0,
            thousands(p.hit_tokens),
            thousands(p.queried_tokens)
        );
    }
    engine_features(&mut out, r);
    if let Some(sp) = &r.speculative {
        let rates: Vec<String> = sp.acceptance_by_position.iter().map(|x| format!("{x:.2}")).collect();
        let _ = writeln!(
            out,
            "speculative {} drafts verified: {:.1}% of {} draft tokens accepted, mean acceptance length {:.2}, per \
             position {}",
            thousands(sp.num_drafts),
            sp.acceptance_rate * 100.0,
            thousands(sp.num_draft_tokens),
            sp.mean_acceptance_length,
            rates.join(", ")
        );
    }
    super::cluster::over_time_lines(&mut out, r);
    super::cluster::replica_table(&mut out, r);
    out
}

/// The offload tiers' and LoRA's lines, when the run has them.
fn engine_features(out: &mut String, r: &RunResult) {
    if let Some(tiers) = &r.offload {
        for t in tiers {
            let _ = writeln!(
                out,
                "offload    {}: {:.1}% of prompt tokens loaded ({} tokens, {:.3} s of loads), {} blocks",
                t.tier,
                t.hit_rate * 100.0,
                thousands(t.loaded_tokens),
                t.load_s,
                thousands(t.capacity_blocks)
            );
        }
    }
    if let Some(l) = &r.lora {
        let _ = writeln!(
            out,
            "lora       {} adapters, {} GPU slots of {} bytes: {} copies into a slot ({:.3} s of copies)",
            thousands(l.adapters),
            l.max_loras,
            thousands(l.slot_bytes_per_gpu as u64),
            thousands(l.loads),
            l.load_s
        );
    }
}
