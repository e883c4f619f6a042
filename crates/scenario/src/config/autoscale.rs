//! `cluster.autoscale` and `cluster.timeline` (docs/clusters.md,
//! "Autoscaling" and "Results over time"): the validated forms and their
//! checks. The rules they configure run in the planner
//! (`llmsim_planner::cluster::hpa`).
//!
//! Choices where the issue is silent, each following Kubernetes' HPA
//! (`pkg/controller/podautoscaler`): the sync period is 15 s, the
//! tolerance 0.1, scale-up has no stabilization and may add 4 replicas or
//! 100% a period, whichever is more; scale-down is stabilized over 300 s
//! and may remove 100% a period. A `scale_up` or `scale_down` that names
//! `pods` or `percent` replaces both of the default's limits (as an HPA
//! `behavior` with its own `policies` does); one that names neither keeps
//! them. The signal defaults to `outstanding` (running plus waiting
//! requests a replica, vLLM's `num_requests_running +
//! num_requests_waiting`); `target` is required. `min_replicas` is at
//! least 1: scaling to zero would need requests to queue at the router
//! while no replica is ready, which the cluster does not model.

use serde::Serialize;

use super::ConfigError;
use super::check::Check;
use super::raw::{RawAutoscale, RawColdStart, RawScaleRules, RawTimeline};

pub use super::defaults::{
    DEFAULT_DOWN_STABILIZATION_S, DEFAULT_PERCENT, DEFAULT_PERIOD_S, DEFAULT_SIGNAL_WINDOW_S, DEFAULT_TOLERANCE,
    DEFAULT_UP_PODS, DEFAULT_WINDOW_S,
};

/// What the autoscaler reads from the replicas.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Requests waiting (not yet running) a ready replica, on average.
    Waiting,
    /// Running plus waiting requests a ready replica, on average.
    Outstanding,
    /// The fraction of KV blocks in use a ready replica, on average.
    KvUse,
    /// Requests routed a second a ready replica over the signal window.
    Rate,
    /// The fleet's p99 TTFT, in ms, of first tokens in the signal window.
    TtftP99Ms,
}

impl Signal {
    pub const ALL: [Signal; 5] = [Signal::Waiting, Signal::Outstanding, Signal::KvUse, Signal::Rate, Signal::TtftP99Ms];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Waiting => "waiting",
            Signal::Outstanding => "outstanding",
            Signal::KvUse => "kv_use",
            Signal::Rate => "rate",
            Signal::TtftP99Ms => "ttft_p99_ms",
        }
    }

    pub fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the value is an average over ready replicas (an HPA `Pods`
    /// metric) rather than one figure for the fleet (an `Object` metric).
    pub fn per_replica(self) -> bool {
        self != Signal::TtftP99Ms
    }
}

/// One direction's limits (an HPA `behavior.scaleUp` / `scaleDown` with
/// `selectPolicy: Max`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScaleRules {
    /// Recommendations this recent are considered (HPA's
    /// `stabilizationWindowSeconds`).
    pub stabilization_s: f64,
    /// A `Pods` policy: this many replicas a period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
    /// A `Percent` policy: this percent of the replicas at the period's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// Both policies' `periodSeconds`.
    pub period_s: f64,
}

/// What a new replica waits for before it is ready.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ColdStart {
    /// GB/s the replica reads its weights at; `None`: no load time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_gbps: Option<f64>,
    pub engine_start_s: f64,
    pub graph_capture_s: f64,
    /// The replica's weights (all its GPUs), in bytes: derived.
    #[serde(skip)]
    pub weight_bytes: f64,
}

impl ColdStart {
    /// Seconds to read the weights.
    pub fn load_s(&self) -> f64 {
        self.load_gbps.map_or(0.0, |g| self.weight_bytes / (g * 1e9))
    }

    /// Seconds from the decision to scale up to the replica being ready.
    pub fn total_s(&self) -> f64 {
        self.load_s() + self.engine_start_s + self.graph_capture_s
    }
}

/// A validated `cluster.autoscale`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Autoscale {
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub signal: Signal,
    pub target: f64,
    pub period_s: f64,
    pub tolerance: f64,
    /// The window of the `rate` and `ttft_p99_ms` signals.
    pub window_s: f64,
    pub scale_up: ScaleRules,
    pub scale_down: ScaleRules,
    pub cold_start: ColdStart,
}

/// Bounds on each window's latency percentiles, in ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WindowSlo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p99_ms: Option<f64>,
}

impl WindowSlo {
    /// Each bound with its name, in a fixed order.
    pub fn bounds(&self) -> Vec<(&'static str, f64)> {
        [
            ("ttft_p50_ms", self.ttft_p50_ms),
            ("ttft_p99_ms", self.ttft_p99_ms),
            ("itl_p50_ms", self.itl_p50_ms),
            ("itl_p99_ms", self.itl_p99_ms),
        ]
        .into_iter()
        .filter_map(|(n, b)| b.map(|b| (n, b)))
        .collect()
    }
}

/// A validated `cluster.timeline` (also implied by `cluster.autoscale`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timeline {
    pub window_s: f64,
    pub slo: WindowSlo,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline { window_s: DEFAULT_WINDOW_S, slo: WindowSlo::default() }
    }
}

/// What the checks need of the rest of the scenario.
pub(crate) struct Context {
    /// The replicas given (`cluster.replicas`), if any.
    pub replicas: Option<u32>,
    /// One replica's weights, all its GPUs, in bytes.
    pub weight_bytes: f64,
    /// How long the arrivals last, when known before the run
    /// (`workload.duration_s`, or a trace's last arrival).
    pub run_s: Option<f64>,
}

/// Checks `cluster.autoscale`; returns it and the replicas ready at the
/// start (`cluster.replicas`, or `min_replicas`).
pub(crate) fn build(ck: &Check, raw: RawAutoscale, cx: &Context) -> Result<(Autoscale, u32), ConfigError> {
    const AT: &str = "cluster.autoscale.";
    let key = |k: &str| format!("{AT}{k}");
    let min_replicas = match raw.min_replicas {
        Some(v) => ck.whole32_at(&key("min_replicas"), v)?,
        None => 1,
    };
    let Some(max) = raw.max_replicas else {
        return Err(ck.err(&key("max_replicas"), "missing: the most replicas the autoscaler may run, e.g. 16"));
    };
    let max_replicas = ck.whole32_at(&key("max_replicas"), max)?;
    if min_replicas > max_replicas {
        return Err(ck.err(
            &key("min_replicas"),
            format!("{min_replicas} is above max_replicas ({max_replicas}): the autoscaler could never satisfy both"),
        ));
    }
    let initial = cx.replicas.unwrap_or(min_replicas);
    if !(min_replicas..=max_replicas).contains(&initial) {
        return Err(ck.err(
            "cluster.replicas",
            format!(
                "{initial} replicas at the start is outside cluster.autoscale's {min_replicas} to {max_replicas}: \
                 set cluster.replicas within them (or leave it out to start at min_replicas)"
            ),
        ));
    }
    let signal = match raw.signal.as_deref().map(str::trim) {
        None => Signal::Outstanding,
        Some(name) => Signal::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Signal::ALL.iter().map(|s| s.as_str()).collect();
            ck.err(
                &key("signal"),
                format!("unknown signal `{}`: the signals are {}", super::num::short_text(name), known.join(", ")),
            )
        })?,
    };
    let Some(target) = raw.target else {
        return Err(ck.err(
            &key("target"),
            format!("missing: the value of {} the autoscaler holds each replica to, e.g. 8", signal.as_str()),
        ));
    };
    let target = ck.real_at(&key("target"), target)?;
    if signal == Signal::KvUse && target > 1.0 {
        return Err(
            ck.err(&key("target"), format!("{target} is not allowed: kv_use is a fraction, above 0 and at most 1"))
        );
    }
    let real_or = |k: &str, v: Option<f64>, default: f64| match v {
        Some(v) => ck.real_at(&key(k), v),
        None => Ok(default),
    };
    let period_s = real_or("period_s", raw.period_s, DEFAULT_PERIOD_S)?;
    let tolerance = real_or("tolerance", raw.tolerance, DEFAULT_TOLERANCE)?;
    let window_s = real_or("window_s", raw.window_s, DEFAULT_SIGNAL_WINDOW_S)?;
    let up_default = ScaleRules {
        stabilization_s: 0.0,
        pods: Some(DEFAULT_UP_PODS),
        percent: Some(DEFAULT_PERCENT),
        period_s: DEFAULT_PERIOD_S,
    };
    let down_default = ScaleRules {
        stabilization_s: DEFAULT_DOWN_STABILIZATION_S,
        pods: None,
        percent: Some(DEFAULT_PERCENT),
        period_s: DEFAULT_PERIOD_S,
    };
    let scale_up = rules(ck, "scale_up", raw.scale_up, up_default)?;
    let scale_down = rules(ck, "scale_down", raw.scale_down, down_default)?;
    let cold_start = cold_start(ck, raw.cold_start.unwrap_or_default(), cx)?;
    let a = Autoscale {
        min_replicas,
        max_replicas,
        signal,
        target,
        period_s,
        tolerance,
        window_s,
        scale_up,
        scale_down,
        cold_start,
    };
    Ok((a, initial))
}

/// One direction's rules, over `default`.
fn rules(ck: &Check, dir: &str, raw: Option<RawScaleRules>, default: ScaleRules) -> Result<ScaleRules, ConfigError> {
    let Some(raw) = raw else { return Ok(default) };
    let key = |k: &str| format!("cluster.autoscale.{dir}.{k}");
    let stabilization_s = match raw.stabilization_s {
        Some(v) => ck.real_at(&key("stabilization_s"), v)?,
        None => default.stabilization_s,
    };
    let period_s = match raw.period_s {
        Some(v) => ck.real_at(&key("period_s"), v)?,
        None => default.period_s,
    };
    let (pods, percent) = match (raw.pods, raw.percent) {
        (None, None) => (default.pods, default.percent),
        (pods, percent) => (
            pods.map(|v| ck.whole32_at(&key("pods"), v)).transpose()?,
            percent.map(|v| ck.real_at(&key("percent"), v)).transpose()?,
        ),
    };
    Ok(ScaleRules { stabilization_s, pods, percent, period_s })
}

fn cold_start(ck: &Check, raw: RawColdStart, cx: &Context) -> Result<ColdStart, ConfigError> {
    let key = |k: &str| format!("cluster.autoscale.cold_start.{k}");
    let secs = |k: &str, v: Option<f64>| v.map_or(Ok(0.0), |v| ck.real_at(&key(k), v));
    let c = ColdStart {
        load_gbps: raw.load_gbps.map(|v| ck.real_at(&key("load_gbps"), v)).transpose()?,
        engine_start_s: secs("engine_start_s", raw.engine_start_s)?,
        graph_capture_s: secs("graph_capture_s", raw.graph_capture_s)?,
        weight_bytes: cx.weight_bytes,
    };
    if c.total_s().is_nan() || c.total_s() > crate::limits::MAX_COLD_START_S {
        return Err(ck.err(
            "cluster.autoscale.cold_start",
            format!(
                "a new replica would be ready {:.0} s after it is asked for (its weights, {:.3} GB, take {:.0} s at \
                 {} GB/s): more than a week is not allowed; give a faster load_gbps",
                c.total_s(),
                c.weight_bytes / 1e9,
                c.load_s(),
                c.load_gbps.unwrap_or(0.0)
            ),
        ));
    }
    if let Some(run_s) = cx.run_s
        && c.total_s() > run_s
    {
        return Err(ck.err(
            "cluster.autoscale.cold_start",
            format!(
                "a new replica would be ready {:.1} s after it is asked for (weights {:.1} s + engine start {} s + \
                 graph capture {} s), longer than the run's {} s of arrivals: no replica added could ever serve; \
                 shorten the cold start or lengthen workload.duration_s",
                c.total_s(),
                c.load_s(),
                c.engine_start_s,
                c.graph_capture_s,
                run_s
            ),
        ));
    }
    Ok(c)
}

/// Checks `cluster.timeline`.
pub(crate) fn timeline(ck: &Check, raw: RawTimeline) -> Result<Timeline, ConfigError> {
    let window_s = match raw.window_s {
        Some(v) => ck.real_at("cluster.timeline.window_s", v)?,
        None => DEFAULT_WINDOW_S,
    };
    let slo = match raw.slo {
        None => WindowSlo::default(),
        Some(s) => {
            let ms =
                |k: &str, v: Option<f64>| v.map(|v| ck.real_at(&format!("cluster.timeline.slo.{k}"), v)).transpose();
            WindowSlo {
                ttft_p50_ms: ms("ttft_p50_ms", s.ttft_p50_ms)?,
                ttft_p99_ms: ms("ttft_p99_ms", s.ttft_p99_ms)?,
                itl_p50_ms: ms("itl_p50_ms", s.itl_p50_ms)?,
                itl_p99_ms: ms("itl_p99_ms", s.itl_p99_ms)?,
            }
        }
    };
    Ok(Timeline { window_s, slo })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cold(load_gbps: Option<f64>, weight_bytes: f64, run_s: Option<f64>) -> Result<ColdStart, ConfigError> {
        let ck = Check { file: Path::new("t.yml") };
        let raw = RawColdStart { load_gbps, engine_start_s: Some(30.0), graph_capture_s: Some(10.0) };
        cold_start(&ck, raw, &Context { replicas: None, weight_bytes, run_s })
    }

    #[test]
    fn a_cold_start_is_the_load_plus_the_start_plus_the_capture() {
        // 140 GB at 2 GB/s: 70 s, plus 30 + 10.
        let c = cold(Some(2.0), 140e9, None).unwrap();
        assert_eq!((c.load_s(), c.total_s()), (70.0, 110.0));
        assert_eq!(cold(None, 140e9, None).unwrap().total_s(), 40.0);
        // Longer than the run, or than a week: refused.
        let e = cold(Some(2.0), 140e9, Some(100.0)).unwrap_err().to_string();
        assert!(e.contains("ready 110.0 s after") && e.contains("longer than the run's 100 s"), "{e}");
        let e = cold(Some(0.001), 1e15, None).unwrap_err().to_string();
        assert!(e.contains("more than a week"), "{e}");
    }
}
