//! `cluster:` (docs/clusters.md): replicas of the scenario's engine
//! behind a router, or two pools of them, prefill and decode, with the KV
//! transfer between them. Without the key a scenario is one engine,
//! exactly as before.
//!
//! Choices where the spec is silent: the router defaults to `round_robin`
//! (what a plain Kubernetes Service does), `overlap_weight` to 1 (Dynamo's
//! default `kv_overlap_score_weight`), and `overlap_weight` is refused with
//! any other router, since it would change nothing. With pools, the
//! top-level `replicas`, `router` and `overlap_weight` are refused (each
//! pool has its own), `kv_transfer` is required (`bandwidth_gbps`;
//! `latency_ms` defaults to 0), and the decode pool's router cannot be
//! `prefix_affinity`: a decode replica does no cache lookup.

use super::ConfigError;
use super::check::{Check, DEFAULT_REPLICAS};
use super::raw::{RawCluster, RawModel, RawParallelism, RawPool, RawScheduler};
use super::scenario::{Arrivals, Length, Scenario};
pub use super::scenario::{Cluster, DEFAULT_OVERLAP_WEIGHT, Disagg, KvTransfer, Pool, Router};
use super::scenario::{FleetPool, PoolOverrides};

/// What the pools are built from: the scenario's raw sections, before
/// validation consumed them.
pub(crate) struct PoolBase {
    pub model: RawModel,
    pub parallelism: RawParallelism,
    pub scheduler: RawScheduler,
}

impl RawCluster {
    /// Whether it names a pool.
    pub(crate) fn has_pools(&self) -> bool {
        self.prefill.is_some() || self.decode.is_some() || self.kv_transfer.is_some()
    }
}

/// Checks `cluster:`. `base` is the scenario without it; `pools` its raw
/// sections, needed when the cluster has pools.
pub(crate) fn build(
    ck: &Check,
    raw: RawCluster,
    base: &Scenario,
    pools: Option<PoolBase>,
) -> Result<Cluster, ConfigError> {
    let prefix_caching = base.prefix_caching();
    if raw.has_pools() {
        let Some(pools) = pools else {
            return Err(ck.err("cluster", "prefill/decode pools need the scenario's raw sections (internal)"));
        };
        return disaggregated(ck, raw, base, pools);
    }
    if raw.pools.is_some() {
        let Some(b) = pools else {
            return Err(ck.err("cluster.pools", "pools need the scenario's raw sections (internal)"));
        };
        return mixed(ck, raw, base, &b);
    }
    let (replicas, router, overlap_weight) =
        replicas_and_router(ck, "cluster.", raw.replicas, raw.router.as_deref(), raw.overlap_weight, prefix_caching)?;
    let given = raw.replicas.is_some().then_some(replicas);
    let (autoscale, replicas) = match raw.autoscale {
        None => (None, replicas),
        Some(a) => {
            let cx = super::autoscale::Context {
                replicas: given,
                weight_bytes: base.deployment.weight_bytes,
                run_s: run_seconds(base),
            };
            let (a, initial) = super::autoscale::build(ck, a, &cx)?;
            (Some(a), initial)
        }
    };
    let timeline = match raw.timeline {
        Some(t) => Some(super::autoscale::timeline(ck, t)?),
        None => autoscale.is_some().then(super::autoscale::Timeline::default),
    };
    Ok(Cluster { replicas, router, overlap_weight, disagg: None, autoscale, timeline, pools: Vec::new() })
}

/// `cluster.pools`: replicas of the model on GPUs of their own kinds,
/// behind one router, each pool fixed or autoscaled on its own.
fn mixed(ck: &Check, raw: RawCluster, base: &Scenario, b: &PoolBase) -> Result<Cluster, ConfigError> {
    for (key, given) in [("replicas", raw.replicas.is_some()), ("autoscale", raw.autoscale.is_some())] {
        if given {
            return Err(ck.err(
                &format!("cluster.{key}"),
                format!("conflicts with cluster.pools: each pool has its own {key}; set it under the pool"),
            ));
        }
    }
    let list = raw.pools.unwrap_or_default();
    if list.is_empty() || list.len() > 16 {
        return Err(
            ck.err("cluster.pools", format!("{} pools: give 1 to 16, e.g. [{{name: h100, replicas: 2}}]", list.len()))
        );
    }
    let (_, router, overlap_weight) =
        replicas_and_router(ck, "cluster.", Some(1), raw.router.as_deref(), raw.overlap_weight, base.prefix_caching())?;
    let mut pools: Vec<FleetPool> = Vec::new();
    for (i, p) in list.into_iter().enumerate() {
        let at = format!("cluster.pools[{i}].");
        let name = match p.name.as_deref().map(str::trim) {
            Some(n)
                if !n.is_empty()
                    && n.len() <= 32
                    && n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
            {
                n.to_string()
            }
            Some(n) => {
                return Err(ck.err(
                    &format!("{at}name"),
                    format!(
                        "`{}`: a pool's name is 1 to 32 letters, digits, `-`, `_` or `.`",
                        super::num::short_text(n)
                    ),
                ));
            }
            None => return Err(ck.err(&format!("{at}name"), "missing: name each pool, e.g. h100")),
        };
        if pools.iter().any(|q| q.name == name) {
            return Err(ck.err(&format!("{at}name"), format!("`{name}` names two pools")));
        }
        let rename = |mut e: ConfigError, from: &str, to: &str| {
            e.path = e.path.replacen(from, to, 1);
            e
        };
        let given = match p.replicas {
            Some(v) => Some(
                ck.whole32_at("cluster.replicas", v)
                    .map_err(|e| rename(e, "cluster.replicas", &format!("{at}replicas")))?,
            ),
            None => None,
        };
        let raw_pool = RawPool {
            replicas: None,
            router: None,
            overlap_weight: None,
            hardware: p.hardware,
            parallelism: p.parallelism,
            scheduler: p.scheduler,
        };
        let built = pool_at(ck, &at, &name, raw_pool, base, b)?;
        let scenario = built.scenario;
        let cost_per_hour = match p.cost_per_hour {
            Some(c) => Some(ck.real_at("hardware.cost_per_hour", c).map_err(|mut e| {
                e.path = format!("{at}cost_per_hour");
                e
            })?),
            None => scenario.hardware.cost_per_hour,
        };
        let (autoscale, replicas) = match p.autoscale {
            None => (None, given.unwrap_or(DEFAULT_REPLICAS)),
            Some(a) => {
                let cx = super::autoscale::Context {
                    replicas: given,
                    weight_bytes: scenario.deployment.weight_bytes,
                    run_s: run_seconds(base),
                };
                let (a, initial) = super::autoscale::build(ck, a, &cx).map_err(|mut e| {
                    e.path = e.path.replacen("cluster.autoscale", &format!("{at}autoscale"), 1).replacen(
                        "cluster.replicas",
                        &format!("{at}replicas"),
                        1,
                    );
                    e
                })?;
                (Some(a), initial)
            }
        };
        pools.push(FleetPool { name, replicas, cost_per_hour, autoscale, given: built.given, scenario });
    }
    let replicas = pools.iter().map(|p| p.replicas).sum();
    let timeline = match raw.timeline {
        Some(t) => super::autoscale::timeline(ck, t)?,
        None => super::autoscale::Timeline::default(),
    };
    Ok(Cluster { replicas, router, overlap_weight, disagg: None, autoscale: None, timeline: Some(timeline), pools })
}

/// How long the arrivals last, when known before the run: the workload's
/// duration, or a trace's last arrival.
fn run_seconds(s: &Scenario) -> Option<f64> {
    if let Some(d) = s.workload.duration_s {
        return Some(d);
    }
    match &s.workload.arrivals {
        Arrivals::Trace(t) => t.rows.iter().map(|r| r.arrival.as_secs_f64()).reduce(f64::max),
        _ => None,
    }
}

/// `replicas`, `router` and `overlap_weight` of a cluster or a pool,
/// their keys under `at` (`cluster.` or `cluster.prefill.`).
fn replicas_and_router(
    ck: &Check,
    at: &str,
    replicas: Option<i64>,
    router: Option<&str>,
    overlap_weight: Option<f64>,
    prefix_caching: bool,
) -> Result<(u32, Router, Option<f64>), ConfigError> {
    let replicas = match replicas {
        Some(v) => ck.whole32_at(&format!("{at}replicas"), v)?,
        None => DEFAULT_REPLICAS,
    };
    let router = match router {
        None => Router::RoundRobin,
        Some(name) => Router::parse(name.trim()).ok_or_else(|| {
            ck.err(
                &format!("{at}router"),
                format!("unknown router `{}`: the routers are {}", super::num::short_text(name), Router::known()),
            )
        })?,
    };
    if router == Router::PrefixAffinity && !prefix_caching {
        return Err(ck.err(
            &format!("{at}router"),
            "prefix_affinity routes by prefix-cache hits, but model.kv_cache.prefix_caching is off: \
             set it to true, or pick another router",
        ));
    }
    let overlap_weight = match (overlap_weight, router) {
        (Some(w), Router::PrefixAffinity) => Some(ck.real_at(&format!("{at}overlap_weight"), w)?),
        (None, Router::PrefixAffinity) => Some(DEFAULT_OVERLAP_WEIGHT),
        (Some(_), other) => {
            return Err(ck.err(
                &format!("{at}overlap_weight"),
                format!("is used by the prefix_affinity router only, and the router is {}", other.as_str()),
            ));
        }
        (None, _) => None,
    };
    Ok((replicas, router, overlap_weight))
}

/// `cluster.prefill`, `cluster.decode` and `cluster.kv_transfer`.
fn disaggregated(ck: &Check, raw: RawCluster, base: &Scenario, pools: PoolBase) -> Result<Cluster, ConfigError> {
    for (key, given) in [("autoscale", raw.autoscale.is_some()), ("timeline", raw.timeline.is_some())] {
        if given {
            return Err(ck.err(
                &format!("cluster.{key}"),
                "is not modelled with prefill/decode pools yet: use it on colocated replicas (cluster.replicas)",
            ));
        }
    }
    for (key, given) in [
        ("replicas", raw.replicas.is_some()),
        ("router", raw.router.is_some()),
        ("overlap_weight", raw.overlap_weight.is_some()),
    ] {
        if given {
            return Err(ck.err(
                &format!("cluster.{key}"),
                format!(
                    "conflicts with cluster.prefill/cluster.decode: each pool has its own {key}; \
                     set cluster.prefill.{key} and cluster.decode.{key} instead"
                ),
            ));
        }
    }
    let (Some(prefill), Some(decode)) = (raw.prefill, raw.decode) else {
        return Err(ck.err(
            "cluster",
            "prefill/decode disaggregation needs both cluster.prefill and cluster.decode, \
             e.g. prefill: { replicas: 2 } and decode: { replicas: 4 }",
        ));
    };
    let Some(t) = raw.kv_transfer else {
        return Err(ck.err(
            "cluster.kv_transfer",
            "missing: with pools, say how fast a prompt's KV moves from prefill to decode, \
             e.g. kv_transfer: { bandwidth_gbps: 50, latency_ms: 1 }",
        ));
    };
    let Some(bandwidth) = t.bandwidth_gbps else {
        return Err(ck.err("cluster.kv_transfer.bandwidth_gbps", "missing: the link's GB/s (10^9 bytes a second)"));
    };
    let kv_transfer = KvTransfer {
        bandwidth_gbps: ck.real_at("cluster.kv_transfer.bandwidth_gbps", bandwidth)?,
        latency_ms: ck.real_at("cluster.kv_transfer.latency_ms", t.latency_ms.unwrap_or(0.0))?,
    };
    if decode.router.as_deref().map(str::trim) == Some(Router::PrefixAffinity.as_str()) {
        return Err(ck.err(
            "cluster.decode.router",
            "prefix_affinity routes by prefix-cache hits, but a decode replica does no cache lookup \
             (the KV arrives by transfer): pick another router",
        ));
    }
    let prefill = pool(ck, "prefill", prefill, base, &pools)?;
    let decode = pool(ck, "decode", decode, base, &pools)?;
    decode_fits(ck, base, &decode)?;
    let (replicas, router, overlap_weight) =
        (prefill.replicas + decode.replicas, prefill.router, prefill.overlap_weight);
    let disagg = Disagg { prefill, decode, kv_transfer };
    Ok(Cluster {
        replicas,
        router,
        overlap_weight,
        disagg: Some(Box::new(disagg)),
        autoscale: None,
        timeline: None,
        pools: Vec::new(),
    })
}

/// One pool: its router and the scenario one of its replicas runs.
fn pool(ck: &Check, name: &str, raw: RawPool, base: &Scenario, b: &PoolBase) -> Result<Pool, ConfigError> {
    pool_at(ck, &format!("cluster.{name}."), name, raw, base, b)
}

/// [`pool`], its keys under `at`.
fn pool_at(ck: &Check, at: &str, name: &str, raw: RawPool, base: &Scenario, b: &PoolBase) -> Result<Pool, ConfigError> {
    let caching = base.prefix_caching();
    let (replicas, router, overlap_weight) =
        replicas_and_router(ck, at, raw.replicas, raw.router.as_deref(), raw.overlap_weight, caching)?;
    // Errors in an override name its key under the pool.
    let under_pool = |mut e: ConfigError| {
        if ["hardware", "parallelism", "scheduler"].iter().any(|k| e.path.starts_with(k)) {
            e.path = format!("{at}{}", e.path);
        } else {
            e.message = format!("in the {name} pool: {}", e.message);
        }
        e
    };
    let hardware = match &raw.hardware {
        Some(v) => Some(super::sections::hardware_of(v, ck.file).map_err(under_pool)?),
        None => None,
    };
    let mut hw = hardware.clone().unwrap_or_else(|| base.hardware.clone());
    if base.per_operator().is_none() {
        hw.kernels = None; // the roofline form reads none (as validate.rs does for the scenario's)
    }
    let par = raw.parallelism.clone().unwrap_or_else(|| b.parallelism.clone());
    let built = super::deployment::build(ck, b.model.clone(), par, &hw).map_err(under_pool)?;
    let scheduler = match &raw.scheduler {
        Some(s) => {
            let merged = RawScheduler {
                max_batch_tokens: s.max_batch_tokens.or(b.scheduler.max_batch_tokens),
                max_num_sequences: s.max_num_sequences.or(b.scheduler.max_num_sequences),
                cuda_graph_max_tokens: s.cuda_graph_max_tokens.or(b.scheduler.cuda_graph_max_tokens),
                policy: None,
                new_token_ratio: s.new_token_ratio.or(b.scheduler.new_token_ratio),
                mixed_chunk: s.mixed_chunk.or(b.scheduler.mixed_chunk),
                max_prefill_tokens: s.max_prefill_tokens.or(b.scheduler.max_prefill_tokens),
                capacity_scheduler_policy: s
                    .capacity_scheduler_policy
                    .clone()
                    .or_else(|| b.scheduler.capacity_scheduler_policy.clone()),
                context_chunking_policy: s
                    .context_chunking_policy
                    .clone()
                    .or_else(|| b.scheduler.context_chunking_policy.clone()),
            };
            if s.policy.is_some() {
                return Err(under_pool(ck.err(
                    "scheduler.policy",
                    "not allowed under a pool: priority scheduling is not modelled with prefill/decode pools",
                )));
            }
            let built = super::sections::scheduler(ck, &merged).map_err(under_pool)?;
            super::sections::engine_keys(ck, &built, base.engine).map_err(under_pool)?;
            Some(built)
        }
        None => None,
    };
    let capacity = super::deployment::capacity(ck, &built.model, &built.deployment, &hw, Default::default())
        .map_err(under_pool)?;
    let scenario = Scenario {
        hardware: hw,
        model: built.model,
        parallelism: built.parallelism.clone(),
        scheduler: scheduler.clone().unwrap_or_else(|| base.scheduler.clone()),
        capacity,
        deployment: built.deployment,
        cluster: None,
        ..base.clone()
    };
    super::sections::run_limits(ck, &scenario).map_err(under_pool)?;
    super::sections::chunking_fits(ck, &scenario).map_err(under_pool)?;
    let parallelism = raw.parallelism.is_some().then_some(built.parallelism).flatten();
    let given = PoolOverrides { hardware, parallelism, scheduler };
    Ok(Pool { replicas, router, overlap_weight, given, scenario: Box::new(scenario) })
}

/// The decode pool must hold the shortest request's prompt and first
/// token (`ceil((P+1)/bs)` blocks beside the watermark), or no request
/// could ever be served.
fn decode_fits(ck: &Check, base: &Scenario, decode: &Pool) -> Result<(), ConfigError> {
    let Some(shortest) = shortest_prompt(base) else { return Ok(()) };
    let cap = &decode.scenario.capacity;
    let need = cap.blocks_for(u64::from(shortest) + 1);
    let room = u64::from(cap.num_blocks - cap.watermark_blocks);
    if need <= room {
        return Ok(());
    }
    Err(ck.err(
        "cluster.decode",
        format!(
            "a decode replica's KV cannot hold one request's prompt: the shortest prompt ({shortest} tokens) \
             and its first token need {need} blocks of {} tokens, but a decode replica has {} blocks ({} kept \
             free by the watermark); give the decode pool larger GPUs (cluster.decode.hardware), more tensor \
             parallelism (cluster.decode.parallelism.tensor), or shorter prompts",
            cap.block_size, cap.num_blocks, cap.watermark_blocks
        ),
    ))
}

/// The shortest prompt the workload can produce, shared prefix included
/// (`None` for an empty trace).
fn shortest_prompt(s: &Scenario) -> Option<u32> {
    let w = &s.workload;
    if let Arrivals::Trace(t) = &w.arrivals {
        return t.rows.iter().map(|r| r.prompt).min();
    }
    let own = match w.prompt_tokens.as_ref()? {
        Length::Fixed(n) => *n,
        Length::Uniform { lo, .. } => *lo,
        Length::Normal { min, .. } | Length::Lognormal { min, .. } | Length::Exponential { min, .. } => *min,
        Length::Choice { values, .. } => values.iter().copied().min()?,
    };
    Some(own.saturating_add(w.shared_prefix.as_ref().map_or(0, |p| p.tokens)))
}
