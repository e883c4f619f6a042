//! `llmsim fidelity`: how close the predictions come to real measured runs,
//! before and after calibration, as `results/fidelity.md`; the shipped
//! profiles fitted on the same runs (`hardware/calibrations/`); and every
//! fit's values, `results/fidelity-fits.yml`.
//!
//! The measured figures are the project's own transcriptions (measured
//! files whose header comments say where every figure came from); the raw
//! files stay outside the repository. Each run is predicted at the
//! scenario's start (uncalibrated), with the fit on every run (what the
//! shipped profiles hold), and by fits that never saw it: one pass per
//! leave-out of the suite (leave one experiment, model or source out; a
//! fold's fit starts at the full fit).
//!
//! Fitting every suite takes a while (tens of minutes on two cores);
//! `llmsim fidelity --check`, in CI, predicts every run at the values
//! `results/fidelity-fits.yml` records (the full fit's and each fold's)
//! and fails when any generated file differs: a change to the engine that
//! moves a prediction is caught without fitting again. `llmsim fidelity`
//! fits (every suite, or those `--refit` names) and rewrites them all.
//!
//! Same files, same bytes: the fit is deterministic at any thread count.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use llmsim_scenario::config::{Arrivals, Length};

use super::render::{Model, median_error, median_error_where};
use super::runs::{LoadOptions, Run, ScenarioSource};
use super::{Error, Fit, FoldSet, LeaveOut, Outcome, Recorded, Setup, error_pct, keys, profile};
use crate::measured::aic;
use crate::sweep::metric::{Family, Metric, Stat};

pub mod moe;

/// A measured file a suite reads, and the rows of an AIConfigurator CSV it keeps.
pub struct Input {
    /// Relative to the repository root.
    pub path: &'static str,
    /// `--where` filters (AIConfigurator silicon CSVs only).
    pub filters: &'static [&'static str],
}

/// Which goal a suite's table states.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Goal {
    None,
    /// The H100 inference-perf goal and the published anchor (issue 11).
    Anchor,
    /// Leave-one-model-out median |error| TPOT <= 10%, TTFT <= 20% (issue 27).
    Transfer,
}

/// One set of measured runs and how they are simulated and fitted.
pub struct Suite {
    /// A short name for `--refit` and the record.
    pub id: &'static str,
    pub title: &'static str,
    /// Relative to the repository root.
    pub scenario: &'static str,
    pub inputs: &'static [Input],
    /// Seconds of each load stage simulated (a steady-state sample).
    pub sample_s: Option<f64>,
    /// The profiles the fit on every run is written to, by name.
    pub profiles: &'static [&'static str],
    pub goal: Goal,
    /// Fitted keys (empty: `calibrate`'s default four).
    pub keys: &'static [&'static str],
    /// `squared` or `cauchy:PCT`.
    pub loss: &'static str,
    /// The leave-one-out passes, first shown first.
    pub leave_out: &'static [LeaveOut],
    /// Whether the keys' default priors apply.
    pub priors: bool,
    /// Most loss evaluations of the fit (each fold gets half): a cap; a
    /// fit it ends before the stopping rule is reported as not converged
    /// ([`stopping`]).
    pub max_evals: usize,
    /// Requests a user of an AIConfigurator row (0: [`aic::DEFAULT_ROUNDS`]).
    pub aic_rounds: u32,
    /// What the reader should know: provenance and what is not modelled.
    pub about: &'static str,
}

/// The keys of the per-operator suites' main fits: every key a profile
/// holds but `efficiency.expert_gemm`, which the MoE stage fits
/// ([`moe::KEY`]).
pub const OPERATOR_KEYS: [&str; 14] = without(llmsim_scenario::config::calibration::KEYS, &[moe::KEY]);

/// `all` without the keys in `drop`, in order: a compile error unless each
/// of `drop` is in `all` once (`M` is `N` less their count).
const fn without<const N: usize, const M: usize>(all: [&'static str; N], drop: &[&str]) -> [&'static str; M] {
    const fn same(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }
    let mut out = [""; M];
    let (mut i, mut j) = (0, 0);
    while i < N {
        let mut k = 0;
        while k < drop.len() && !same(all[i], drop[k]) {
            k += 1;
        }
        if k == drop.len() {
            assert!(j < M, "a key to drop is not in the list, or is in it twice");
            out[j] = all[i];
            j += 1;
        }
        i += 1;
    }
    assert!(j == M, "a key to drop is not in the list, or is in it twice");
    out
}

/// The cap of a suite fitted to convergence: a bound its fit is meant not
/// to reach, so that the stopping rule ends it (a fit it cuts is reported
/// as not converged, [`stopping`]). Raising it changes no fit that
/// converges below it, but the budget's wording in results/fidelity.md.
const CONVERGENCE_CAP: usize = 1500;

/// The suites `llmsim fidelity` runs.
pub const SUITES: [Suite; 7] = [
    Suite {
        id: "h100-blis",
        title: "H100 SXM, vLLM, inference-perf load tests (BLIS training data), roofline form",
        scenario: "scenarios/fidelity/h100-vllm.yml",
        inputs: &[Input { path: "scenarios/fidelity/h100-inference-perf.csv", filters: &[] }],
        sample_s: Some(30.0),
        profiles: &[],
        goal: Goal::Anchor,
        keys: &[],
        loss: "squared",
        leave_out: &[LeaveOut::Experiment],
        priors: false,
        max_evals: 400,
        aic_rounds: 0,
        about: "16 inference-perf load tests of vLLM (early 2026) on 1, 2 and 4 H100 SXM GPUs, one row per load \
            stage, transcribed from github.com/inference-sim/training (commit ed5c1d2, `default_args/`; the \
            measured file's header says how each figure was read). Constant arrivals, fixed prompt and output \
            lengths (`ignore_eos`), streaming completions, `max_num_batched_tokens` 2048, `max_num_seqs` 128. \
            Prefix caching is on, as it was in vLLM: the tool cycles through 100 fixed prompts (system prompt \
            + question), simulated as `shared_prefix` (groups 100) with the template tokens as the unique rest. \
            Each stage ran 600 or 1,200 s; the first 60 s of it are simulated (the queue settles within a few \
            seconds below the knee). TPOT mean is derived as (E2E mean - TTFT mean) / (output - 1). The four \
            `reasoning` experiments overloaded the server (requests failed): they are predicted, never fitted, \
            and not in the medians.\n\n\
            The fit uses `llmsim calibrate`'s defaults of before the per-operator form (the four keys of the \
            roofline, the squared log error, no priors): kept as the comparison with the published anchor. \
            These runs have ~26-token prompts beside prefix-cache hits, so compute never binds and \
            `efficiency.compute` is not identified (it ends at its bound). The shipped `h100-vllm` profile is \
            no longer this fit: it is the Hopper vLLM suite's below, which these runs are part of. \
            The overloaded runs are not predicted to overload: the simulated decode step at their batch is \
            faster than the real one.",
    },
    Suite {
        id: "rtx-vllm",
        title: "RTX 4090 and RTX PRO 6000, vLLM 0.19, per-request runs (LLMServingSim validation data)",
        scenario: "scenarios/fidelity/vllm-rtx.yml",
        inputs: &[Input { path: "scenarios/fidelity/vllm-rtx.csv", filters: &[] }],
        sample_s: None,
        profiles: &[],
        goal: Goal::None,
        keys: &[],
        loss: "squared",
        leave_out: &[LeaveOut::Experiment],
        priors: false,
        max_evals: 400,
        aic_rounds: 0,
        about: "4 runs of vLLM 0.19.0's offline driver, 300 ShareGPT requests each at about 10.3 req/s, \
            transcribed from github.com/casys-kaist/LLMServingSim (commit 5daddb2, `bench/examples/`; the \
            measured file's header says how each figure was read). Each run is replayed request by request \
            (`scenarios/fidelity/traces/`): the arrival each request was queued at, its exact prompt and \
            output lengths (`min_tokens = max_tokens`, `ignore_eos`). `max_num_batched_tokens` 2048, \
            `max_num_seqs` 256 on the RTX 4090 (with vLLM's own 2,588 KV blocks: the run is KV-bound and \
            preempts heavily) and 128 on the RTX PRO 6000, prefix caching on. Every run queues: 300 requests \
            arrive within 30 s and take 64 to 184 s to serve, so TTFT is mostly waiting time and measures \
            throughput more than a prefill. Qwen3-32B ran on 2 GPUs over PCIe; no all-reduce time was measured \
            for them, so its link (16 GB/s, 20 us) is what the source's own simulator was configured with. \
            Qwen3-30B-A3B ran data parallel 2 with expert parallelism, which llmsim cannot represent: it is \
            listed, not simulated.\n\n\
            The fit uses `llmsim calibrate`'s defaults (the four keys, the squared log error) over the three \
            simulated runs, one GPU and model each; leave-one-out predicts each run from a fit on the other \
            two. No profile is shipped from it: a fit across two GPUs is not a profile of either.",
    },
    Suite {
        sample_s: Some(30.0),
        ..operator_suite(
            "hopper-vllm",
            "H100 and H200 SXM, vLLM: per-operator form (AIConfigurator closed loops and BLIS load tests)",
            "scenarios/fidelity/hopper-vllm.yml",
            &[
                Input { path: "scenarios/fidelity/h100-inference-perf.csv", filters: &[] },
                Input { path: "scenarios/fidelity/aic-hopper.csv", filters: &["backend=vllm"] },
            ],
            &["h100-vllm", "h200-vllm"],
            &[LeaveOut::Model, LeaveOut::Source],
            CONVERGENCE_CAP,
            HOPPER_VLLM,
        )
    },
    operator_suite(
        "hopper-trtllm",
        "H100 and H200 SXM, TensorRT-LLM: per-operator form (AIConfigurator closed loops)",
        "scenarios/fidelity/hopper-trtllm.yml",
        &[Input { path: "scenarios/fidelity/aic-hopper.csv", filters: &["backend=trtllm"] }],
        &["h100-trtllm", "h200-trtllm"],
        &[LeaveOut::Model, LeaveOut::Source],
        CONVERGENCE_CAP,
        HOPPER_TRTLLM,
    ),
    operator_suite(
        "h200-sglang",
        "H200 SXM, SGLang: per-operator form (AIConfigurator closed loops)",
        "scenarios/fidelity/hopper-sglang.yml",
        &[Input { path: "scenarios/fidelity/aic-hopper.csv", filters: &["backend=sglang"] }],
        &["h200-sglang"],
        &[LeaveOut::Model, LeaveOut::Source],
        CONVERGENCE_CAP,
        HOPPER_SGLANG,
    ),
    Suite {
        aic_rounds: 7,
        ..operator_suite(
            "b200-vllm",
            "B200 SXM, vLLM: per-operator form (AIConfigurator closed loops)",
            "scenarios/fidelity/blackwell-vllm.yml",
            &[Input { path: "scenarios/fidelity/aic-blackwell.csv", filters: &["backend=vllm"] }],
            &["b200-vllm"],
            &[LeaveOut::Experiment, LeaveOut::Source],
            CONVERGENCE_CAP,
            BLACKWELL_VLLM,
        )
    },
    Suite {
        aic_rounds: 10,
        ..operator_suite(
            "b200-trtllm",
            "B200 SXM and GB200, TensorRT-LLM: per-operator form (AIConfigurator closed loops)",
            "scenarios/fidelity/blackwell-trtllm.yml",
            &[Input { path: "scenarios/fidelity/aic-blackwell.csv", filters: &["backend=trtllm"] }],
            &["b200-trtllm"],
            &[LeaveOut::Experiment, LeaveOut::Source],
            CONVERGENCE_CAP,
            BLACKWELL_TRTLLM,
        )
    },
];

/// A suite of the per-operator form on AIConfigurator closed loops: the
/// operator keys from their priors, the Cauchy loss at 25%, no sampling.
#[allow(clippy::too_many_arguments)]
const fn operator_suite(
    id: &'static str,
    title: &'static str,
    scenario: &'static str,
    inputs: &'static [Input],
    profiles: &'static [&'static str],
    leave_out: &'static [LeaveOut],
    max_evals: usize,
    about: &'static str,
) -> Suite {
    Suite {
        id,
        title,
        scenario,
        inputs,
        sample_s: None,
        profiles,
        goal: Goal::Transfer,
        keys: &OPERATOR_KEYS,
        loss: "cauchy:25",
        leave_out,
        priors: true,
        max_evals,
        aic_rounds: 0,
        about,
    }
}

const BLACKWELL_VLLM: &str = "vLLM on B200: the vllm rows of AIConfigurator's silicon CSV on Blackwell \
    (`aic-blackwell.csv`). The fit has one model, Llama-3.1-70B, FP8 and NVFP4 (at the FP4 peak) at TP 1 to 8, \
    so leave-one-experiment-out (an experiment: one format at one TP degree) is the transfer figure: a TP \
    degree or format the profile never saw. `b200-vllm` is this fit. Held out: gpt-oss-120b, Kimi-K2.5 and \
    MiniMax-M2.5 on B200 and B300 (B300 runs are predicted with the B200 fit against B300's own datasheet, a \
    GPU the profile never saw). NVFP4 is NVIDIA's checkpoints' format: every linear layer at NVFP4 (their \
    attention projections may be kept wider; not modelled). No Blackwell SGLang suite: its rows are DeepSeek, \
    GLM-5 and Qwen3.5 only, nothing a profile could be fitted on.\n\n\
    Its runs are simulated with 7 requests a user, not the template's 20: the file does not record the client, \
    and the measured TTFT grows with users x prompt length as the first round's queue (every user starting \
    together) does, more than 20 rounds leave of it. Chosen by the fit's loss on the fitted Llama-3.1-70B runs \
    alone, the same fit (`llmsim calibrate ... --aic-rounds R`, 13 keys, 150 evaluations) at R = 2, 3, 5, 7, \
    10, 14 and 20: loss 0.0358, 0.0258, 0.0188, 0.0176, 0.0190, 0.0210, 0.0233; TTFT median |error| 10.4% at 7 \
    against 17.5% at 20, TPOT 5.4% and 5.5% (docs/calibration.md). The Hopper vLLM suite, fitted at several R \
    as well, stays at 20 (its description says why).";

const BLACKWELL_TRTLLM: &str = "TensorRT-LLM on B200 and GB200: the trtllm rows of AIConfigurator's silicon \
    CSV on Blackwell. Fitted: Llama-3.1-70B FP8 and NVFP4 (at the FP4 peak) at TP 1 to 8 on B200, one model, so \
    leave-one-experiment-out (a format at a TP degree) is the transfer figure. `b200-trtllm` is this fit. \
    GB200's Qwen3-32B rows are predicted, not fitted: their ids name twice their `batch_size` (`c288` at \
    144) and their TPOT does not follow it (8 ms and 42 ms at the same `batch_size` of 1, 28 ms at 4), so what \
    their client ran is not known. Held out: DeepSeek-V3/R1 (MLA; TP, EP and DP attention, up to TP 64 in the NVL72 domain) and \
    gpt-oss-120b. TensorRT-LLM's own scheduler is not modelled (vLLM's with its token budget stands in).\n\n\
    Its runs are simulated with 10 requests a user, chosen as the B200 vLLM suite's are (the argmin of the fit's \
    loss on the fitted runs alone): R = 5, 7, 10, 14, 20 give loss 0.0389, 0.0383, 0.0369, 0.0388, 0.0412; TTFT median |error| 16.6% at 10 against 25.7% at 20, TPOT 7.0% at both \
    (docs/calibration.md).";

/// How AIConfigurator's closed loops are simulated (every AIC suite).
const AIC_RUNS: &str = "Each AIConfigurator row is a closed loop at fixed lengths, simulated as the benchmark \
    AIConfigurator generates for it runs (its `bench_run.sh` and `rule_plugin/benchmark` templates; the file does \
    not record the client): `batch_size` users starting together and sending again the moment an answer ends \
    (AIPerf's concurrency mode), 20 requests a user (unless the suite says otherwise), a step budget of `concurrency + isl + 1,500` tokens \
    (an SGLang row's: mixed chunks of `isl + 1,500` prompt and decode tokens within SGLang's 8,192-token chunk, \
    so `min(isl + 1,500, 8,192)` under vLLM's rules; under `engine: sglang` its `mixed_chunk` and \
    `max_prefill_tokens`), a \
    context of `isl + osl + 1,500`, CUDA graphs for batches up to the concurrency, 0.9 of the memory for weights \
    and KV, 16-bit KV. With attention data parallelism `batch_size` is a rank's users (the engine's are \
    `batch_size x attention_dp_size`) and the step budget, graphs and sequence limit are a rank's; \
    `moe_ep_size` over every GPU is `parallelism.expert`. DeepSeek-V3/R1, Kimi-K2.5 (as `kimi-k2`, the same \
    language model; INT4 experts beside 16-bit attention for `int4_wo`), MiniMax-M2.5 (as `minimax-m2`, \
    assumed the same shape) and gpt-oss-120b (its own MXFP4 experts; the file's `nvfp4` is not a format gpt-oss \
    ships) run, and so does every run with expert or data parallelism, but as *held out*: predicted by the fit \
    of the other runs, never fitted, to show what the profile does on a kind of model it never saw. Rows the \
    engine cannot express (pipeline parallelism, MoE tensor parallelism inside expert parallelism, more than one \
    node, GLM-5 and Qwen3.5's attention) are listed under *Not simulated* with the reason, and so is a row that \
    repeats an earlier row's measurement (same model, GPU, engine, mode, lengths, TTFT and TPOT; a later dump \
    that files it again under another parallelism). A `disagg` row runs a prefill pool and a decode pool of \
    `*_num_workers` engines each at their own parallelism (a prefill rank takes `prefill_batch_size` prompts \
    a step, a decode rank serves `decode_batch_size` users), its users every decode rank's, and the KV \
    hand-over over the GPU profile's network link; it is *disaggregated*: predicted at the shipped \
    profile's values, fitted by no stage. A `disagg` row without its worker counts is listed. Rows whose measured cycle would need the prompts' prefill alone \
    above 60% of the dense peak are predicted but not fitted: their prompts must have hit a prefix cache the \
    file does not record.";

const HOPPER_VLLM: &str = "One profile for vLLM on Hopper: H100 and H200 share the compute die and NVLink and differ \
    in HBM, so one set of efficiencies (each against its GPU's datasheet peak) and overheads is fitted on both: \
    the 20 non-overloaded BLIS inference-perf stages on H100 (the suite above, Llama-2 7B and 70B, CodeLlama-34B, \
    Mixtral) and the vLLM rows of AIConfigurator's silicon CSV on H200 (Llama-3.1-70B FP8 at TP 1 to 8 with 4 to \
    64 users and 1k/8k tokens; Llama-3.1-8B FP8; Qwen3-235B-A22B FP8). `h100-vllm` and `h200-vllm` are this \
    fit. Kimi-K2.5, MiniMax-M2.5, gpt-oss-120b and the expert-parallel runs are held out. Leave-one-model-out fits on every other model and predicts the one left out; leave-one-source-out \
    does the same by measured source (the BLIS table, and each dump the AIConfigurator rows came from).\n\n\
    Its AIConfigurator runs are simulated with the benchmark template's 20 requests a user. The suite was \
    refitted at R = 7, 10 and 14 as the B200 suites were (`llmsim fidelity --refit hopper-vllm` with \
    `aic_rounds` set): its fit's loss on its 106 runs came out 0.0242, 0.0218, 0.0212 against 0.0225 at 20, \
    not monotone and within 6% of the template's value, where the B200 suites' choices cut theirs by 25% and \
    10%; so the data do not move it off 20 (every figure at each R: docs/calibration.md).";

const HOPPER_TRTLLM: &str = "TensorRT-LLM on Hopper: the trtllm rows of AIConfigurator's silicon CSV that the \
    engine can express (Llama-3.1-8B at 16 bits on H100, TP 1 to 4; Llama-3.1-70B FP8 on H200; Qwen3-235B-A22B \
    where it runs without expert parallelism). The fit runs TensorRT-LLM's own scheduler (`engine: trtllm`: \
    its default `GUARANTEED_NO_EVICT` capacity policy, whole prompts, no chunked prefill) with its token budget \
    (`max_num_tokens`, AIConfigurator's `concurrency + isl + 1,500` rounded up to 32); the same runs under \
    vLLM's scheduler at the fitted values close the section. \
    Qwen3-235B-A22B with expert parallelism, DeepSeek-V3/R1 and gpt-oss-120b are held out. `h100-trtllm` and \
    `h200-trtllm` are this fit.";

const HOPPER_SGLANG: &str = "SGLang on H200: the sglang rows of AIConfigurator's silicon CSV that the engine can \
    express (Llama-3.1-8B and Qwen3-235B-A22B with block-scaled FP8 weights). The fit runs SGLang's own \
    schedule (`engine: sglang`: reserve-ahead admission, against `new_token_ratio` 0.7 as with its radix cache \
    on, which AIConfigurator leaves on) with the mixed chunks AIConfigurator serves them with \
    (`--enable-mixed-chunk`, `--max-prefill-tokens isl + 1,500`); the same runs under vLLM's scheduler at the \
    fitted values close the section. `h200-sglang` is this fit. DeepSeek-V3/R1 (MLA at TP 8) are held out; \
    the disaggregated DeepSeek-V3 runs are predicted under vLLM's rules (`engine: sglang` has no pools).";

/// The published anchor and the goal, by metric: (anchor %, goal %).
pub const GOALS: [(Metric, f64, f64); 2] =
    [(Metric::Latency(Family::E2e, Stat::Mean), 6.7, 7.0), (Metric::Latency(Family::Ttft, Stat::Mean), 17.6, 18.0)];

/// A file `fidelity` writes, relative to the repository root.
pub struct Generated {
    pub path: PathBuf,
    pub text: String,
}

/// Where every suite's fit is kept.
pub const RECORD: &str = "results/fidelity-fits.yml";

/// The fits `llmsim fidelity` found, as `results/fidelity-fits.yml` keeps them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitRecord {
    pub suites: Vec<SuiteRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteRecord {
    pub id: String,
    pub keys: Vec<String>,
    pub fitted: Vec<f64>,
    pub start_loss: f64,
    pub loss: f64,
    pub evaluations: usize,
    /// Whether the optimiser's stopping rule ended the fit (`false`: its
    /// budget did, [`Fit::converged`]).
    pub converged: bool,
    pub passes: Vec<PassRecord>,
    /// The MoE stage fitted after the main fit ([`moe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<moe::StageRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassRecord {
    pub leave_out: String,
    /// How many folds their budget ended ([`FoldSet::at_budget`]); absent
    /// from the passes fitted before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_budget: Option<usize>,
    pub folds: Vec<FoldRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoldRecord {
    pub group: String,
    pub values: Vec<f64>,
}

impl SuiteRecord {
    fn of(suite: &Suite, o: &Outcome) -> SuiteRecord {
        SuiteRecord {
            id: suite.id.into(),
            keys: o.setup.keys.iter().map(|k| k.key.clone()).collect(),
            fitted: o.fit.x.clone(),
            start_loss: o.start_loss,
            loss: o.fit.loss,
            evaluations: o.fit.evals,
            converged: o.fit.converged,
            passes: o
                .folds
                .iter()
                .map(|f| PassRecord {
                    leave_out: f.leave_out.name().into(),
                    at_budget: f.at_budget,
                    folds: f.folds.iter().map(|(g, x)| FoldRecord { group: g.clone(), values: x.clone() }).collect(),
                })
                .collect(),
            moe: None,
        }
    }

    /// The fit to replay, if it was made with these keys.
    fn recorded(&self, setup: &Setup) -> Option<Recorded> {
        let keys: Vec<&str> = setup.keys.iter().map(|k| k.key.as_str()).collect();
        if keys != self.keys.iter().map(String::as_str).collect::<Vec<_>>() || self.fitted.len() != keys.len() {
            return None;
        }
        let mut folds = Vec::new();
        for p in &self.passes {
            let leave_out = LeaveOut::parse(&p.leave_out).ok()?;
            folds.push(FoldSet {
                leave_out,
                folds: p.folds.iter().map(|f| (f.group.clone(), f.values.clone())).collect(),
                at_budget: p.at_budget,
            });
        }
        Some(Recorded {
            fit: Fit { x: self.fitted.clone(), loss: self.loss, evals: self.evaluations, converged: self.converged },
            start_loss: self.start_loss,
            folds,
        })
    }
}

/// Reads `results/fidelity-fits.yml` under `root` (empty when absent).
pub fn read_record(root: &Path) -> Result<FitRecord, Error> {
    let path = root.join(RECORD);
    if !path.exists() {
        return Ok(FitRecord::default());
    }
    let text = llmsim_scenario::input::read_text(llmsim_scenario::input::Kind::FitRecord, &path)
        .map_err(|e| Error::Input(e.to_string()))?;
    llmsim_scenario::yaml::from_str(&text)
        .map_err(|e| Error::Input(format!("{}: {e}: run `llmsim fidelity` to write it again", path.display())))
}

/// What to do for each suite.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    /// Fit the suites named (every suite when empty) and replay the rest.
    Fit { refit: Vec<String> },
    /// Replay every suite from the record; a suite without one is an error.
    Check,
    /// As `Check`, but the files are written (a change of presentation
    /// only: no fit runs).
    Replay,
}

/// Runs every suite from `root`; the table, the profiles and the record.
pub fn generate(root: &Path) -> Result<Vec<Generated>, Error> {
    generate_with(root, &Mode::Fit { refit: Vec::new() }, &mut |_, _| {})
}

/// [`generate`] in `mode`, telling `done` each suite's outcome as it finishes.
pub fn generate_with(
    root: &Path,
    mode: &Mode,
    done: &mut dyn FnMut(&Suite, &Outcome),
) -> Result<Vec<Generated>, Error> {
    let record = read_record(root)?;
    if let Mode::Fit { refit } = mode
        && let Some(unknown) = refit
            .iter()
            .find(|r| !SUITES.iter().any(|s| s.id == r.as_str() || (moe::applies(s) && format!("{}.moe", s.id) == **r)))
    {
        let ids: Vec<&str> = SUITES.iter().map(|s| s.id).collect();
        return Err(Error::Input(format!(
            "--refit `{unknown}` is not a suite; suites: {} (`ID.moe` refits only a suite's MoE stage)",
            ids.join(", ")
        )));
    }
    let mut sections = Vec::new();
    let mut out = Vec::new();
    let mut new_record = FitRecord::default();
    for suite in &SUITES {
        let old = record.suites.iter().find(|r| r.id == suite.id);
        let replay = match mode {
            Mode::Check | Mode::Replay => Some(old.ok_or_else(|| {
                Error::Input(format!(
                    "{RECORD} has no fit of suite `{}`: run `llmsim fidelity --refit {}` and commit the result",
                    suite.id, suite.id
                ))
            })?),
            Mode::Fit { refit } if refit.is_empty() || refit.iter().any(|r| r == suite.id) => None,
            Mode::Fit { .. } => old,
        };
        // The stage is fitted again with its main fit, or when named alone.
        let stage_replay = match mode {
            Mode::Fit { refit } if replay.is_none() || refit.iter().any(|r| *r == format!("{}.moe", suite.id)) => None,
            _ => replay.and_then(|r| r.moe.as_ref()),
        };
        let mut o = run_suite(root, suite, replay)?;
        let mut record = SuiteRecord::of(suite, &o);
        let may_fit = matches!(mode, Mode::Fit { .. });
        let stage = if moe::applies(suite) { moe::run(suite, &o, stage_replay, may_fit)? } else { None };
        record.moe = stage.as_ref().map(moe::StageRecord::of);
        let main_value = o.setup.keys.iter().position(|k| k.key == moe::FIXED).map_or(0.0, |k| o.fit.x[k]);
        if let Some(st) = &stage {
            moe::apply(&mut o, st);
        }
        // At the shipped values, the MoE stage's included, as the
        // calibrated column beside it.
        let under_engine = match engines_of(suite) {
            Some((fitted, other)) => {
                let stage_value = stage.as_ref().map(|st| st.outcome.fit.x[0]);
                Some((fitted, other, engine_check(root, suite, &o, other, stage_value)?))
            }
            None => None,
        };
        done(suite, &o);
        let mut text = section(suite, &o, stage.as_ref(), main_value);
        if let Some((fitted, other, e)) = &under_engine {
            text.push_str(&engine_section(&o, fitted, other, e));
        }
        sections.push(text);
        new_record.suites.push(record);
        let note = stage.as_ref().map_or_else(String::new, |st| {
            let n = st.outcome.outcomes.iter().filter(|x| x.in_fit).count();
            format!(
                "; {} then set to 0 and {} fitted alone on its {n} MoE runs, the other keys fixed",
                moe::FIXED,
                moe::KEY
            )
        });
        for name in suite.profiles {
            let command = format!("llmsim fidelity --refit {}", suite.id);
            out.push(Generated {
                path: PathBuf::from(format!("hardware/calibrations/{name}.yml")),
                text: profile::render_staged(
                    &o,
                    stage.as_ref().map(|s| &s.outcome),
                    name,
                    suite.scenario,
                    &command,
                    &note,
                ),
            });
        }
    }
    let mut md = String::from(
        "# Fidelity: predictions against real measured runs\n\n\
         Generated by `llmsim fidelity` from the measured files under `scenarios/fidelity/`; CI runs \
         `llmsim fidelity --check`, which predicts every run again at the fitted values `results/fidelity-fits.yml` \
         records and fails when this file, that record or a shipped calibration profile is not what the engine \
         gives now. Errors are (predicted - measured) / measured. *Uncalibrated*: the suite's scenario as it \
         starts the fit. *Calibrated*: the keys fitted by `llmsim calibrate` on every fitted run of the suite \
         (what the shipped profiles hold). *Leave-one-X-out*: each run predicted by a fit that never saw its \
         experiment (both stages of a load test), its model, or its measured source. Runs the engine cannot \
         represent are listed under *Not simulated* with the reason, never dropped.\n",
    );
    for s in sections {
        md.push('\n');
        md.push_str(&s);
    }
    out.insert(0, Generated { path: PathBuf::from("results/fidelity.md"), text: md });
    let text = llmsim_scenario::yaml::to_string(&new_record)
        .map_err(|e| Error::Work(format!("cannot write {RECORD}: {e}")))?;
    out.push(Generated {
        path: PathBuf::from(RECORD),
        text: format!(
            "# Written by `llmsim fidelity`: each suite's fitted values and each leave-one-out fold's, so\n\
             # `llmsim fidelity --check` predicts at them without fitting again. Do not edit.\n{text}"
        ),
    });
    Ok(out)
}

/// The setup a suite fits with.
pub fn setup(suite: &Suite) -> Result<Setup, Error> {
    let specs: Vec<String> = suite.keys.iter().map(|k| (*k).to_string()).collect();
    let keys = keys::parse(&specs).map_err(|e| Error::Input(e.to_string()))?;
    let loss = super::Loss::parse(suite.loss).map_err(Error::Input)?;
    let priors = keys.iter().map(|k| if suite.priors { keys::default_prior(&k.key) } else { None }).collect();
    let optim = super::optim::Settings { max_evals: suite.max_evals, ..super::optim::Settings::default() };
    Ok(Setup { loss, leave_out: suite.leave_out.to_vec(), priors, optim, ..Setup::new(keys) })
}

/// Every run of a suite's measured files, as its scenario and settings make them.
pub fn load_suite(root: &Path, suite: &Suite) -> Result<super::runs::Loaded, Error> {
    load_suite_with(root, suite, &[])
}

/// [`load_suite`] with `overrides` set on the suite's scenario.
fn load_suite_with(
    root: &Path,
    suite: &Suite,
    overrides: &[llmsim_scenario::config::Override],
) -> Result<super::runs::Loaded, Error> {
    let src = ScenarioSource::load(&root.join(suite.scenario), overrides).map_err(|e| Error::Input(e.to_string()))?;
    let mut loaded = super::runs::Loaded::default();
    for input in suite.inputs {
        let aic_filters =
            input.filters.iter().map(|f| aic::Filter::parse(f)).collect::<Result<Vec<_>, _>>().map_err(Error::Input)?;
        let opts = LoadOptions { sample_s: suite.sample_s, aic_filters, aic_rounds: suite.aic_rounds, steady: false };
        loaded.extend(super::runs::load(&src, &root.join(input.path), &opts).map_err(|e| Error::Input(e.to_string()))?);
    }
    Ok(loaded)
}

/// Loads, then fits (or, with `replay`, takes the recorded fit) and
/// leaves each group out.
pub fn run_suite(root: &Path, suite: &Suite, replay: Option<&SuiteRecord>) -> Result<Outcome, Error> {
    let loaded = load_suite(root, suite)?;
    let setup = setup(suite)?;
    let recorded = match replay {
        Some(r) => Some(r.recorded(&setup).ok_or_else(|| {
            Error::Input(format!(
                "{RECORD}: suite `{}` was fitted with other keys: run `llmsim fidelity --refit {}`",
                suite.id, suite.id
            ))
        })?),
        None => None,
    };
    let mut o = super::calibrate_or_replay(loaded.runs, Vec::new(), &setup, recorded.as_ref())?;
    o.excluded = loaded.excluded;
    Ok(o)
}

fn pct(e: Option<f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{e:+.1}%"))
}

fn med(e: Option<f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{e:.1}%"))
}

/// A number as the table shows it: one decimal, or two below 100.
fn ms(x: f64) -> String {
    if x.abs() < 100.0 { format!("{x:.2}") } else { format!("{x:.1}") }
}

/// A run's parallelism: `TP 4`, `TP 4, DP 4, EP 16`, `TP 4, DP 1, EP 2,
/// MoE TP 2`, `TP 8, PP 2`.
fn parallelism(run: &Run) -> String {
    match run.base.validated.cluster.as_ref().and_then(|c| c.disagg.as_ref()) {
        Some(d) => format!(
            "prefill {} x ({}), decode {} x ({})",
            d.prefill.replicas,
            deployment_text(&d.prefill.scenario.deployment),
            d.decode.replicas,
            deployment_text(&d.decode.scenario.deployment)
        ),
        None => deployment_text(&run.base.validated.deployment),
    }
}

/// One engine's parallelism: `TP 8, DP 1, EP 8`.
fn deployment_text(d: &llmsim_scenario::config::Deployment) -> String {
    let mut out = format!("TP {}", d.tensor_parallel);
    if let Some(w) = d.wide {
        out += &format!(", DP {}, EP {}", w.data, w.expert);
        if w.expert_tensor > 1 {
            out += &format!(", MoE TP {}", w.expert_tensor);
        }
    }
    if let Some(p) = d.pipeline {
        out += &format!(", PP {}", p.stages);
    }
    out
}

/// The features a run's simulation used, from its scenario.
pub fn features(run: &Run) -> String {
    let s = &run.base.validated;
    let mut out = vec![parallelism(run)];
    if s.model.architecture.as_ref().is_some_and(|a| a.experts > 0) {
        out.push("MoE".into());
    }
    out.push("chunked prefill".into());
    out.push(if s.prefix_caching() { "prefix caching".into() } else { "no prefix caching".into() });
    out.join(", ")
}

/// A number as the scenario's YAML states it (`10.0` for a rate).
fn yaml_number(v: f64) -> String {
    llmsim_scenario::yaml::Number::from(v).to_string()
}

/// The metrics the tables show per run and per GPU.
const SHOWN: [Metric; 3] = [
    Metric::Latency(Family::Ttft, Stat::Mean),
    Metric::Latency(Family::E2e, Stat::Mean),
    Metric::Latency(Family::Tpot, Stat::Mean),
];

/// The GPU a run was simulated on: its hardware profile's name.
fn gpu(run: &Run) -> String {
    run.base.validated.hardware.name.clone()
}

/// The requests a run replays: a measured file's, or its scenario's trace.
fn trace_rows(run: &Run) -> Option<std::sync::Arc<Vec<llmsim_scenario::trace::TraceRow>>> {
    if let Some(rows) = &run.base.trace {
        return Some(std::sync::Arc::clone(rows));
    }
    match &run.base.validated.workload.arrivals {
        Arrivals::Trace(t) => Some(std::sync::Arc::clone(&t.rows)),
        _ => None,
    }
}

/// How the load was offered: a rate, or the replayed requests.
fn load_cell(run: &Run) -> String {
    match trace_rows(run) {
        Some(rows) => {
            let span = rows.last().map_or(0.0, |r| r.arrival.as_secs_f64());
            format!("{} requests in {span:.1} s", rows.len())
        }
        None => match run.base.validated.workload.arrivals {
            Arrivals::Constant { rate } => format!("{} req/s", yaml_number(rate)),
            _ => "-".into(),
        },
    }
}

/// Prompt and output tokens: as set, or a trace's means.
fn lengths_cell(run: &Run) -> String {
    match trace_rows(run) {
        Some(rows) if !rows.is_empty() => {
            let n = rows.len() as f64;
            let prompt = rows.iter().map(|r| f64::from(r.prompt)).sum::<f64>() / n;
            let output = rows.iter().map(|r| f64::from(r.output)).sum::<f64>() / n;
            format!("mean {prompt:.0} / {output:.0}")
        }
        _ => {
            let w = &run.base.validated.workload;
            let fixed = |l: &Option<Length>| match l {
                Some(Length::Fixed(n)) => n.to_string(),
                _ => "-".into(),
            };
            format!("{} / {}", fixed(&w.prompt_tokens), fixed(&w.output_tokens))
        }
    }
}

/// How a fit and its leave-one-out folds ended, fitted with a budget of
/// `budget` evaluations (each fold half; `None`: not said, as for a
/// stage whose budget has changed since some suites' stages were
/// fitted): by the optimiser's stopping rule, or by the budget first
/// (docs/calibration.md, "How it fits").
pub fn stopping(o: &Outcome, budget: Option<usize>) -> String {
    let of = |n: Option<usize>| n.map_or_else(String::new, |n| format!(" of {n} evaluations"));
    let main = if o.fit.converged {
        "the optimiser's stopping rule ended it (converged)".to_string()
    } else {
        format!(
            "**its budget{} ended it before the optimiser's stopping rule** (not converged: another budget gives \
             other values)",
            of(budget)
        )
    };
    let passes: Vec<String> = o
        .setup
        .leave_out
        .iter()
        .zip(&o.folds)
        .filter(|(_, f)| !f.folds.is_empty())
        .map(|(mode, f)| {
            let n = f.folds.len();
            match f.at_budget {
                Some(0) => format!("leave-one-{}-out none of {n}", mode.name()),
                Some(k) => format!("leave-one-{}-out **{k}** of {n}", mode.name()),
                None => format!("leave-one-{}-out not recorded ({n} folds fitted before it was kept)", mode.name()),
            }
        })
        .collect();
    if passes.is_empty() {
        return main;
    }
    format!(
        "{main}; folds their budget{} ended before the rule: {}",
        of(budget.map(super::fold_budget)),
        passes.join(", ")
    )
}

/// The column names of a suite's leave-one-out passes.
fn pass_names(o: &Outcome) -> Vec<String> {
    o.setup.leave_out.iter().map(|l| format!("leave-one-{}-out", l.name())).collect()
}

/// Signed median error (percent) of `m` under `model` over the fitted runs
/// `keep` holds: the bias of a band.
fn bias(o: &Outcome, m: Metric, model: Model, keep: &dyn Fn(&Run) -> bool) -> Option<f64> {
    let mut errors = super::render::errors_where(o, m, model, &|r, oc| oc.in_fit && keep(r));
    errors.sort_by(f64::total_cmp);
    llmsim_planner::metrics::percentile::percentile_sorted(&errors, 50.0)
}

/// The concurrency band of a closed-loop run, for the bias table.
fn users_band(run: &Run) -> Option<&'static str> {
    let Arrivals::Closed { concurrency: c, .. } = run.base.validated.workload.arrivals else { return None };
    Some(match c {
        0..=8 => "1-8 users",
        9..=32 => "9-32 users",
        33..=96 => "33-96 users",
        _ => "97+ users",
    })
}

/// For a suite whose rows ran on another engine than vLLM: the scheduler
/// it is fitted under (its scenario's `engine:`) and the other one, under
/// which its runs are predicted again at the same fitted values and
/// reported beside the fit (issue 30: the rows of those engines predicted
/// with the matching `engine:`). A test checks the first against the
/// suite's scenario.
fn engines_of(suite: &Suite) -> Option<(&'static str, &'static str)> {
    match suite.id {
        "hopper-trtllm" => Some(("trtllm", "vllm")),
        "h200-sglang" => Some(("sglang", "vllm")),
        _ => None,
    }
}

/// How a scheduler is named in the report.
fn scheduler_name(engine: &str) -> String {
    match engine {
        "vllm" => "vLLM's scheduler".to_string(),
        other => format!("`engine: {other}`"),
    }
}

/// A suite's runs under `engine: NAME` at its fitted values, `o`'s with
/// the MoE stage applied and the stage's `stage_value` (no leave-one-out
/// folds: only the fit's prediction is compared).
fn engine_check(
    root: &Path,
    suite: &Suite,
    o: &Outcome,
    engine: &str,
    stage_value: Option<f64>,
) -> Result<Outcome, Error> {
    let mut sets = vec![format!("engine={engine}")];
    sets.extend(stage_value.map(|v| format!("{}={v}", moe::KEY)));
    let sets = sets
        .iter()
        .map(|s| llmsim_scenario::config::Override::parse(s).map_err(|e| Error::Input(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let loaded = load_suite_with(root, suite, &sets)?;
    let setup = Setup { leave_out: Vec::new(), ..o.setup.clone() };
    let recorded = Recorded { fit: o.fit.clone(), start_loss: o.start_loss, folds: Vec::new() };
    super::calibrate_or_replay(loaded.runs, Vec::new(), &setup, Some(&recorded))
}

/// The table of a suite's fitted runs predicted by the fit under the
/// scheduler it was fitted under (`fit_engine`) and under the other one at
/// the same values: the median absolute error and the signed median
/// (bias) of each metric, over the runs fitted in the main fit that both
/// simulate.
fn engine_section(o: &Outcome, fit_engine: &str, other_engine: &str, e: &Outcome) -> String {
    let fitted: std::collections::BTreeSet<&str> = o.fit_runs().map(|(r, _)| r.name.as_str()).collect();
    fn in_both<'a>(
        x: &'a Outcome,
        fitted: &std::collections::BTreeSet<&str>,
    ) -> Vec<(String, &'a super::RunOutcome, &'a Run)> {
        (x.runs.iter().zip(&x.outcomes))
            .filter(|(r, _)| fitted.contains(r.name.as_str()))
            .map(|(r, oc)| (r.name.clone(), oc, r))
            .collect()
    }
    let theirs = in_both(e, &fitted);
    let names: std::collections::BTreeSet<&str> = theirs.iter().map(|(n, _, _)| n.as_str()).collect();
    let ours: Vec<_> = in_both(o, &fitted).into_iter().filter(|(n, _, _)| names.contains(n.as_str())).collect();
    let (fitted, other) = (scheduler_name(fit_engine), scheduler_name(other_engine));
    let mut md = format!(
        "\n### Under {other} at the same fitted values\n\n\
         The {} fitted runs both simulate, predicted by the calibrated values above under {fitted} (the \
         fit's) and under {other} (docs/engine.md, \"The engine's scheduler\"), nothing fitted again: \
         median absolute error, then the signed median (bias). The fit was made under {fitted}; these \
         values are not refitted under {other}.\n\n\
         | metric | {fitted} | bias | {other} | bias |\n|---|---:|---:|---:|---:|\n",
        ours.len()
    );
    for m in super::render::metrics_seen(o) {
        let errors = |rows: &[(String, &super::RunOutcome, &Run)]| -> Vec<f64> {
            rows.iter()
                .filter_map(|(_, oc, r)| {
                    error_pct(super::render::prediction(oc, m, Model::Calibrated), *r.measured.get(&m)?)
                })
                .collect()
        };
        let signed = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            llmsim_planner::metrics::percentile::percentile_sorted(&v, 50.0)
        };
        let (a, b) = (errors(&ours), errors(&theirs));
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            m.name(),
            med(super::median_abs(&a)),
            pct(signed(a)),
            med(super::median_abs(&b)),
            pct(signed(b))
        ));
    }
    md.push('\n');
    md
}

/// One suite's section of `results/fidelity.md`.
pub fn section(suite: &Suite, o: &Outcome, stage: Option<&moe::Stage>, main_value: f64) -> String {
    let fit_count = o.outcomes.iter().filter(|x| x.in_fit).count();
    let groups: std::collections::BTreeSet<&str> =
        o.runs.iter().zip(&o.outcomes).filter(|(_, x)| x.in_fit).map(|(r, _)| r.group.as_str()).collect();
    let aic = suite.inputs.iter().any(|i| !i.filters.is_empty());
    let mut md = format!("## {}\n\n{}\n\n", suite.title, suite.about);
    if aic {
        md.push_str(AIC_RUNS);
        md.push_str("\n\n");
    }
    let measured: Vec<String> = suite
        .inputs
        .iter()
        .map(|i| {
            if i.filters.is_empty() {
                format!("`{}`", i.path)
            } else {
                format!("`{}` (`--where {}`)", i.path, i.filters.join(" --where "))
            }
        })
        .collect();
    let left_out = o.runs.len() - fit_count;
    md.push_str(&format!(
        "Scenario `{}`, measured {}. {} runs: {fit_count} in the fit (from {} experiments), {left_out} \
         predicted but not fitted{}.\n\n",
        suite.scenario,
        measured.join(" and "),
        o.runs.len() + o.excluded.len(),
        groups.len(),
        if o.excluded.is_empty() { String::new() } else { format!(", {} not simulated", o.excluded.len()) }
    ));
    let passes = pass_names(o);
    md.push_str(&format!("### Median absolute error over the {fit_count} fitted runs\n\n"));
    let mut head = String::from("| metric | uncalibrated | calibrated |");
    let mut rule = String::from("|---|---:|---:|");
    for p in &passes {
        head.push_str(&format!(" {p} |"));
        rule.push_str("---:|");
    }
    if suite.goal == Goal::Anchor {
        head.push_str(" published anchor | goal (leave-one-out) |");
        rule.push_str("---:|---|");
    }
    md.push_str(&format!("{head}\n{rule}\n"));
    for m in super::render::metrics_seen(o) {
        let mut row = format!(
            "| {} | {} | {} |",
            m.name(),
            med(median_error(o, m, Model::Uncalibrated, false)),
            med(median_error(o, m, Model::Calibrated, false))
        );
        for i in 0..passes.len() {
            row.push_str(&format!(" {} |", med(median_error(o, m, Model::Pass(i), false))));
        }
        if suite.goal == Goal::Anchor {
            let (anchor, goal) = match GOALS.iter().find(|(g, _, _)| *g == m) {
                Some((_, a, g)) => {
                    let verdict = match median_error(o, m, Model::LeaveOneOut, false) {
                        Some(e) if e <= *g => "met",
                        Some(_) => "**not met**",
                        None => "-",
                    };
                    (format!("{a}%"), format!("<= {g}%: {verdict}"))
                }
                None => ("-".into(), "-".into()),
            };
            row.push_str(&format!(" {anchor} | {goal} |"));
        }
        md.push_str(&row);
        md.push('\n');
    }
    let mut gpus: Vec<String> = Vec::new();
    for (r, _) in o.fit_runs() {
        if !gpus.contains(&gpu(r)) {
            gpus.push(gpu(r));
        }
    }
    if suite.goal == Goal::Transfer {
        md.push_str(&transfer_goal(o, &gpus));
    }
    md.push_str(&held_out(o, stage));
    md.push_str(&disaggregated(o));
    md.push_str(&format!(
        "\n### By GPU\n\nMedian absolute error over each GPU's fitted runs (uncalibrated / calibrated / {}).\n\n",
        passes.first().map_or("leave-one-out", String::as_str)
    ));
    md.push_str("| GPU | runs |");
    for m in SHOWN {
        md.push_str(&format!(" {} |", m.name()));
    }
    md.push_str("\n|---|---:|---:|---:|---:|\n");
    for g in &gpus {
        let n = o.fit_runs().filter(|(r, _)| gpu(r) == *g).count();
        md.push_str(&format!("| {g} | {n} |"));
        for m in SHOWN {
            let cells: Vec<String> = [Model::Uncalibrated, Model::Calibrated, Model::LeaveOneOut]
                .map(|model| med(median_error_where(o, m, model, &|r| gpu(r) == *g)))
                .to_vec();
            md.push_str(&format!(" {} |", cells.join(" / ")));
        }
        md.push('\n');
    }
    if aic {
        md.push_str(&bias_tables(o));
    }
    let written = if suite.profiles.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = suite.profiles.iter().map(|p| format!("`hardware/calibrations/{p}.yml`")).collect();
        format!(" ({})", names.join(", "))
    };
    md.push_str(&format!(
        "\nFitted on all {fit_count} runs{written}, loss {:.4} -> {:.4} in {} evaluations{}; {}:\n\n",
        o.start_loss,
        o.fit.loss,
        o.fit.evals,
        if suite.priors { ", with the keys' default priors" } else { "" },
        stopping(o, Some(suite.max_evals))
    ));
    for (i, (k, x)) in o.setup.keys.iter().zip(&o.fit.x).enumerate() {
        if stage.is_some() && k.key == moe::FIXED {
            md.push_str(&format!(
                "- `{}` = {x}: set by the MoE stage below, the experts' GEMMs at `{}` taking its place (the main \
                 fit's value {main_value}, bounds {} to {})\n",
                k.key,
                moe::KEY,
                k.lo,
                k.hi
            ));
            continue;
        }
        let id = o.identified.get(i);
        let interval = id.and_then(|d| d.interval(k)).map_or_else(String::new, |(a, b)| {
            format!(", 95% interval {} to {}", super::render::num(a), super::render::num(b))
        });
        let prior = id.and_then(|d| d.prior).map_or_else(String::new, |p| {
            format!(", prior {} +- {}", super::render::num(p.mean), super::render::num(p.sigma))
        });
        let verdict = id.map_or("", |d| d.verdict());
        md.push_str(&format!("- `{}` = {x} (bounds {} to {}{prior}{interval}): {verdict}\n", k.key, k.lo, k.hi));
    }
    if let Some(st) = stage {
        md.push_str(&moe::section(st, main_value));
    }
    md.push_str(&runs_table(o, stage));
    if !o.excluded.is_empty() {
        md.push_str(&not_simulated(o));
    }
    md
}

/// The goal for a profile that transfers: leave-one-model-out
/// median |error| per GPU, TPOT <= 10% and TTFT <= 20%.
fn transfer_goal(o: &Outcome, gpus: &[String]) -> String {
    let Some(p) = o.setup.leave_out.iter().position(|l| *l == LeaveOut::Model) else { return String::new() };
    let (ttft, tpot) = (Metric::Latency(Family::Ttft, Stat::Mean), Metric::Latency(Family::Tpot, Stat::Mean));
    let mut md = String::from(
        "\n### Goal: a model the profile never saw\n\nLeave-one-model-out median |error| by GPU, against the goal \
         TPOT <= 10% and TTFT <= 20% (runs of every model but the one predicted, on any GPU of the suite, fit the \
         values that predict it).\n\n| GPU | models | runs | TPOT mean | TTFT mean | goal |\n|---|---|---:|---:|---:|---|\n",
    );
    for g in gpus {
        let mut models: Vec<&str> = Vec::new();
        for (r, _) in o.fit_runs().filter(|(r, _)| gpu(r) == *g) {
            if !models.contains(&r.model.as_str()) {
                models.push(&r.model);
            }
        }
        let n = o.fit_runs().filter(|(r, _)| gpu(r) == *g).count();
        let e = |m| median_error_where(o, m, Model::Pass(p), &|r| gpu(r) == *g);
        let (a, b) = (e(tpot), e(ttft));
        let verdict = match (a, b) {
            (Some(a), Some(b)) if a <= 10.0 && b <= 20.0 => "met",
            (Some(_), Some(_)) => "**not met**",
            _ => "-",
        };
        md.push_str(&format!("| {g} | {} | {n} | {} | {} | {verdict} |\n", models.join(", "), med(a), med(b)));
    }
    md
}

/// The runs held out of the fit by kind (`runs::NotFitted::HeldOut`: MLA, sliding
/// windows, formats of their own, expert or data parallelism), each
/// predicted by the fit of the others: median |error| and signed median
/// by GPU, model and parallelism, against issue 29's goal (TPOT <= 15%,
/// TTFT <= 25%).
fn held_out(o: &Outcome, stage: Option<&moe::Stage>) -> String {
    predicted_table(
        o,
        "\n### Held out: models and deployments the fit never saw\n\nRuns of a kind this suite does not fit on \
         (MLA, sliding windows, weights of a format of their own, expert or data parallelism), each predicted by \
         the calibrated fit of the other runs (a MoE model's by the MoE stage below fitted without any run of its \
         model): median |error| and signed median, against issue 29's goal TPOT <= 15% and TTFT <= 25%.\n\n",
        &|r: &Run| r.is_held_out(),
        &|i| moe::held_out_figures(stage, o, i),
        "held-out",
    )
}

/// The disaggregated runs (`runs::NotFitted::Disaggregated`), each
/// predicted at the shipped profile's values, by GPU, model and pools.
fn disaggregated(o: &Outcome) -> String {
    predicted_table(
        o,
        "\n### Disaggregated: prefill and decode pools\n\nRuns with a prefill pool and a decode pool of their \
         own parallelism (docs/calibration.md, *Disaggregated runs*), none fitted by any stage, each predicted at \
         the shipped profile's values (a MoE model's at the MoE stage's): median |error| and signed median, against \
         the same goal. llmsim releases the first token at the prefill step's end (docs/clusters.md); a client \
         behind Dynamo sees it after the hand-over too.\n\n",
        &|r: &Run| r.is_disaggregated(),
        &|i| Some(&o.outcomes[i].calibrated),
        "disaggregated",
    )
}

/// The table of runs `predicted_only` picks, each predicted as `figures`
/// gives: median |error| and signed median by GPU, model and
/// parallelism, and over them all (`what` runs) against issue 29's goal.
fn predicted_table<'a>(
    o: &'a Outcome,
    intro: &str,
    predicted_only: &dyn Fn(&Run) -> bool,
    figures: &dyn Fn(usize) -> Option<&'a super::Figures>,
    what: &str,
) -> String {
    let held = predicted_only;
    if !o.runs.iter().any(held) {
        return String::new();
    }
    let (ttft, tpot) = (Metric::Latency(Family::Ttft, Stat::Mean), Metric::Latency(Family::Tpot, Stat::Mean));
    let key = |r: &Run| (gpu(r), r.model.clone(), parallelism(r));
    let mut rows: Vec<(String, String, String)> = Vec::new();
    for r in o.runs.iter().filter(|r| held(r)) {
        if !rows.contains(&key(r)) {
            rows.push(key(r));
        }
    }
    rows.sort();
    let errors = |m: Metric, keep: &dyn Fn(&Run) -> bool| -> Vec<f64> {
        (0..o.runs.len())
            .filter(|&i| held(&o.runs[i]) && keep(&o.runs[i]))
            .filter_map(|i| {
                let p = figures(i)?.get(&m).copied();
                error_pct(p, *o.runs[i].measured.get(&m)?)
            })
            .collect()
    };
    let cells = |keep: &dyn Fn(&Run) -> bool| {
        let mut cell = String::new();
        for m in [tpot, ttft] {
            let mut e = errors(m, keep);
            e.sort_by(f64::total_cmp);
            let signed = llmsim_planner::metrics::percentile::percentile_sorted(&e, 50.0);
            cell.push_str(&format!(" {} | {} |", med(super::median_abs(&e)), pct(signed)));
        }
        cell
    };
    let mut md = format!(
        "{intro}| GPU | model | parallelism | runs | TPOT \\|error\\| | TPOT bias | TTFT \\|error\\| | TTFT bias \
         |\n|---|---|---|---:|---:|---:|---:|---:|\n"
    );
    for k in &rows {
        let keep = |r: &Run| key(r) == *k;
        let n = o.runs.iter().filter(|r| held(r) && keep(r)).count();
        md.push_str(&format!("| {} | {} | {} | {n} |{}\n", k.0, k.1, k.2, cells(&keep)));
    }
    let n = o.runs.iter().filter(|r| held(r)).count();
    let all = |_: &Run| true;
    let (a, b) = (super::median_abs(&errors(tpot, &all)), super::median_abs(&errors(ttft, &all)));
    let verdict = match (a, b) {
        (Some(a), Some(b)) if a <= 15.0 && b <= 25.0 => "met",
        (Some(_), Some(_)) => "**not met**",
        _ => "-",
    };
    md.push_str(&format!("| all | | | {n} |{}\n\nGoal (all {what} runs): {verdict}.\n", cells(&all)));
    md
}

/// Bias (signed median error) by tensor degree and by concurrency band.
fn bias_tables(o: &Outcome) -> String {
    let (ttft, tpot) = (Metric::Latency(Family::Ttft, Stat::Mean), Metric::Latency(Family::Tpot, Stat::Mean));
    let first = if o.setup.leave_out.is_empty() { Model::Calibrated } else { Model::Pass(0) };
    let mut md = format!(
        "\n### Bias by band\n\nSigned median error (calibrated / {}), so a band the model gets systematically \
         wrong shows.\n\n| band | runs | TPOT mean | TTFT mean |\n|---|---:|---:|---:|\n",
        pass_names(o).first().map_or("leave-one-out", String::as_str)
    );
    let mut bands: Vec<String> = Vec::new();
    let tp_of = |r: &Run| format!("TP {}", r.base.validated.tensor_parallel());
    for (r, _) in o.fit_runs() {
        if !bands.contains(&tp_of(r)) {
            bands.push(tp_of(r));
        }
    }
    bands.sort();
    for b in ["1-8 users", "9-32 users", "33-96 users", "97+ users"] {
        if o.fit_runs().any(|(r, _)| users_band(r) == Some(b)) {
            bands.push(b.to_string());
        }
    }
    for band in &bands {
        let keep = |r: &Run| tp_of(r) == *band || users_band(r) == Some(band.as_str());
        let n = o.fit_runs().filter(|(r, _)| keep(r)).count();
        let cell = |m| format!("{} / {}", pct(bias(o, m, Model::Calibrated, &keep)), pct(bias(o, m, first, &keep)));
        md.push_str(&format!("| {band} | {n} | {} | {} |\n", cell(tpot), cell(ttft)));
    }
    md
}

fn runs_table(o: &Outcome, stage: Option<&moe::Stage>) -> String {
    let mut md = String::from(
        "\n### Runs\n\nMeasured, then each prediction with its error. Times in ms. `loo` is the first \
         leave-one-out pass for a fitted run; for a run not fitted, the calibrated prediction (a held-out MoE \
         run's: the MoE stage's without its model, as in *Held out*).\n\n",
    );
    md.push_str(
        "| run | GPU | model | features | load | prompt / output | TTFT mean | uncal. | loo | E2E mean | uncal. | loo \
         | TPOT mean | uncal. | loo |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (i, (r, oc)) in o.runs.iter().zip(&o.outcomes).enumerate() {
        let held = r.is_held_out();
        let not_fitted = if held { moe::held_out_figures(stage, o, i) } else { Some(&oc.calibrated) };
        let name = if oc.in_fit { r.name.clone() } else { format!("{} (not fitted: {})", r.name, sat(r)) };
        let mut row = format!(
            "| {name} | {} | {} | {} | {} | {} |",
            gpu(r),
            r.base.validated.model.name,
            features(r),
            load_cell(r),
            lengths_cell(r)
        );
        for m in SHOWN {
            let Some(q) = r.measured.get(&m).copied() else {
                row.push_str(" - | - | - |");
                continue;
            };
            let u = oc.uncalibrated.get(&m).copied();
            let l = oc.loo.as_ref().and_then(|(f, _)| f.get(&m).copied());
            let c = not_fitted.and_then(|f| f.get(&m).copied());
            let cell = |p: Option<f64>| {
                p.map_or_else(|| "-".into(), |p| format!("{} ({})", ms(p), pct(error_pct(Some(p), q))))
            };
            row.push_str(&format!(" {} | {} | {} |", ms(q), cell(u), if oc.in_fit { cell(l) } else { cell(c) }));
        }
        md.push_str(&row);
        md.push('\n');
    }
    md
}

/// The runs the engine cannot represent: each one when few, else counted by reason.
fn not_simulated(o: &Outcome) -> String {
    let mut md = String::from("\n### Not simulated\n\n");
    if o.excluded.len() <= 12 {
        md.push_str("Listed with what was measured; the engine cannot represent them.\n\n");
        md.push_str("| run | why | TTFT mean | E2E mean | TPOT mean |\n|---|---|---:|---:|---:|\n");
        for e in &o.excluded {
            let fig = |m: &Metric| e.measured.get(m).map_or_else(|| "-".into(), |v| ms(*v));
            md.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                e.name,
                e.reason,
                fig(&SHOWN[0]),
                fig(&SHOWN[1]),
                fig(&SHOWN[2])
            ));
        }
        return md;
    }
    md.push_str("Counted by reason (each run's row and figures are in the measured file).\n\n| why | runs | e.g. |\n|---|---:|---|\n");
    let mut reasons: Vec<(&str, usize, &str)> = Vec::new();
    for e in &o.excluded {
        match reasons.iter_mut().find(|(r, _, _)| *r == e.reason) {
            Some(entry) => entry.1 += 1,
            None => reasons.push((&e.reason, 1, &e.name)),
        }
    }
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    for (why, n, example) in reasons {
        md.push_str(&format!("| {why} | {n} | {example} |\n"));
    }
    md
}

fn sat(r: &Run) -> String {
    r.why_not_fitted()
}

#[cfg(test)]
mod tests {
    use super::without;

    #[test]
    fn a_suite_is_fitted_under_the_engine_its_scenario_names() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut compared = 0;
        for suite in &super::SUITES {
            let Some((fitted, other)) = super::engines_of(suite) else { continue };
            let scenario = llmsim_scenario::config::load_scenario_with(&root.join(suite.scenario), &[]).unwrap();
            let engine = scenario.engine.as_str();
            assert_eq!(engine, fitted, "{}: {} names `engine: {engine}`", suite.id, suite.scenario);
            assert_ne!(fitted, other, "{}", suite.id);
            compared += 1;
        }
        assert_eq!(compared, 2);
    }

    #[test]
    fn without_drops_the_named_keys_in_order() {
        let kept: [&str; 3] = without(["a", "b", "c", "d", "e"], &["d", "b"]);
        assert_eq!(kept, ["a", "c", "e"]);
        // The per-operator keys: the profile's fifteen but the stage's.
        assert_eq!(super::OPERATOR_KEYS.len(), 14);
        assert!(!super::OPERATOR_KEYS.contains(&"efficiency.expert_gemm"));
    }

    #[test]
    #[should_panic(expected = "not in the list, or is in it twice")]
    fn without_refuses_a_key_not_in_the_list() {
        let _: [&str; 2] = without(["a", "b", "c"], &["x"]);
    }
}
