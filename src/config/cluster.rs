//! `cluster:` (docs/clusters.md): replicas of the scenario's engine
//! behind a router. Without the key a scenario is one engine, exactly as
//! before.
//!
//! Choices where the spec is silent: the router defaults to `round_robin`
//! (what a plain Kubernetes Service does), `overlap_weight` to 1 (Dynamo's
//! default `kv_overlap_score_weight`), and `overlap_weight` is refused with
//! any other router, since it would change nothing.

use serde::Serialize;

use super::ConfigError;
use super::limits;
use super::raw::RawCluster;
use super::validate::Check;

/// A validated `cluster:`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cluster {
    pub replicas: u32,
    pub router: Router,
    /// `prefix_affinity` only (shown only with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap_weight: Option<f64>,
}

/// How a request picks its replica (docs/clusters.md).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    RoundRobin,
    Random,
    LeastOutstanding,
    LeastKv,
    PrefixAffinity,
    SessionAffinity,
}

impl Router {
    pub const ALL: [Router; 6] = [
        Router::RoundRobin,
        Router::Random,
        Router::LeastOutstanding,
        Router::LeastKv,
        Router::PrefixAffinity,
        Router::SessionAffinity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Router::RoundRobin => "round_robin",
            Router::Random => "random",
            Router::LeastOutstanding => "least_outstanding",
            Router::LeastKv => "least_kv",
            Router::PrefixAffinity => "prefix_affinity",
            Router::SessionAffinity => "session_affinity",
        }
    }

    pub fn parse(name: &str) -> Option<Router> {
        Router::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The known names, for messages.
    pub fn known() -> String {
        Router::ALL.map(Router::as_str).join(", ")
    }
}

/// The default `overlap_weight`.
pub const DEFAULT_OVERLAP_WEIGHT: f64 = 1.0;

/// Checks `cluster:`. `prefix_caching` is the scenario's
/// `model.kv_cache.prefix_caching`, which `prefix_affinity` needs.
pub(crate) fn build(ck: &Check, raw: RawCluster, prefix_caching: bool) -> Result<Cluster, ConfigError> {
    let replicas = match raw.replicas {
        Some(v) => ck.whole32("cluster.replicas", v, &limits::REPLICAS)?,
        None => 1,
    };
    let router = match raw.router.as_deref() {
        None => Router::RoundRobin,
        Some(name) => Router::parse(name.trim()).ok_or_else(|| {
            ck.err(
                "cluster.router",
                format!("unknown router `{}`: the routers are {}", super::num::short_text(name), Router::known()),
            )
        })?,
    };
    if router == Router::PrefixAffinity && !prefix_caching {
        return Err(ck.err(
            "cluster.router",
            "prefix_affinity routes by prefix-cache hits, but model.kv_cache.prefix_caching is off: \
             set it to true, or pick another router",
        ));
    }
    let overlap_weight = match (raw.overlap_weight, router) {
        (Some(w), Router::PrefixAffinity) => Some(ck.real("cluster.overlap_weight", w, &limits::OVERLAP_WEIGHT)?),
        (None, Router::PrefixAffinity) => Some(DEFAULT_OVERLAP_WEIGHT),
        (Some(_), other) => {
            return Err(ck.err(
                "cluster.overlap_weight",
                format!("is used by the prefix_affinity router only, and the router is {}", other.as_str()),
            ));
        }
        (None, _) => None,
    };
    Ok(Cluster { replicas, router, overlap_weight })
}
