//! What a fleet with `cluster.autoscale` or `cluster.timeline` adds to the
//! result (docs/clusters.md, "Results over time"): plain data, here so the
//! metrics need not import the cluster.

use serde::{Deserialize, Serialize};

/// One window's row (`llmsim run --timeline FILE`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowRow {
    pub start_s: f64,
    pub end_s: f64,
    /// Requests that arrived in the window, a second.
    pub offered_rps: f64,
    /// Requests that finished in the window, a second.
    pub served_rps: f64,
    /// Requests rejected in the window (by an engine or for the context).
    pub rejected: u64,
    pub ready: u32,
    pub starting: u32,
    pub draining: u32,
    /// Requests waiting (not running) over every replica, at the end.
    pub queue: u64,
    /// The mean over ready replicas of the fraction of KV blocks in use, at the end.
    pub kv_use: f64,
    /// First tokens in the window.
    pub first_tokens: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    /// Whether the window met every bound of `cluster.timeline.slo`
    /// (`None` without bounds); a percentile with no sample meets its bound.
    pub slo_met: Option<bool>,
    /// GPU-hours from the start of the run to the window's end.
    pub gpu_hours: f64,
    /// `gpu_hours` times the hardware's `cost_per_hour`, when it has one.
    pub cost: Option<f64>,
    /// With `cluster.pools`: each pool's (ready, starting, draining) at the
    /// end, as the CSV's last columns.
    #[serde(skip)]
    pub pools: Vec<(u32, u32, u32)>,
}

/// A change the autoscaler made: replicas asked for (ready plus starting).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleEvent {
    pub t_s: f64,
    pub from: u32,
    pub to: u32,
    /// With `cluster.pools`: the pool it scaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

/// The result JSON's `over_time`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OverTimeOut {
    pub window_s: f64,
    pub windows: u64,
    /// When the run ended (its last step or arrival).
    pub end_s: f64,
    /// GPUs times hours, every replica from the instant it was asked for
    /// (its cold start included) to the instant it left or the run ended.
    pub gpu_hours: f64,
    /// `gpu_hours` times `hardware.cost_per_hour`; `null` without a price.
    pub cost: Option<f64>,
    /// Most replicas at once (ready plus starting; draining ones not counted).
    pub peak_replicas: u32,
    /// With `cluster.timeline.slo` only: how many windows missed it ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_missed: Option<u64>,
    /// ... and which, by start (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_missed_windows: Option<Vec<f64>>,
    /// With `cluster.autoscale` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleOut>,
    /// With `cluster.pools` only: each pool's figures, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<PoolOverTime>>,
}

/// One pool of `cluster.pools` over the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolOverTime {
    pub name: String,
    pub hardware: String,
    pub gpus_per_replica: u32,
    /// Requests routed to its replicas.
    pub requests: u64,
    pub gpu_hours: f64,
    pub cost: Option<f64>,
    pub peak_replicas: u32,
    pub scale_ups: u64,
    pub scale_downs: u64,
}

/// What the autoscaler did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AutoscaleOut {
    pub signal: String,
    pub target: f64,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// A new replica's wait before it is ready, in seconds.
    pub cold_start_s: f64,
    /// Decisions that added replicas, and that removed some.
    pub scale_ups: u64,
    pub scale_downs: u64,
    pub events: Vec<ScaleEvent>,
}
