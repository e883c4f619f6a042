//! What the colocated topologies ([`super::Replicas`], [`super::Lanes`])
//! and the disaggregated one ([`super::disagg::Pools`]) do alike at an
//! arrival: reject it before routing if it is over the context, and route
//! it (its content read by [`crate::intake::Content`]).

use super::router::{Arrival, Load, RouterState};
use crate::intake::Content;
use crate::run_driver::Tap;
use crate::workload::Source;
use llmsim_core::engine::{Engine, Observer, RejectReason, Request};
use llmsim_core::time::SimTime;

/// Rejects `req` before routing if it is over the `context` length, as
/// the engine would on arrival (it takes no router turn). Returns whether
/// it did.
pub(crate) fn rejected_for_context<S: Source, O: Observer>(
    req: &Request,
    context: u32,
    tap: &mut Tap<'_, O>,
    source: &mut S,
    when: SimTime,
) -> bool {
    if u64::from(req.prompt) + u64::from(req.output) <= u64::from(context) {
        return false;
    }
    tap.arrived(req.id, req.arrival, req.prompt, req.output);
    tap.rejected(req.id, req.arrival, RejectReason::ContextLength);
    source.rejected(req.id, when);
    true
}

/// Routes `req` among `engines`: fills `loads` with what the router sees
/// of each (`outstanding` requests routed there; the request's cache hit
/// there for `prefix_affinity`) and returns the replica `router` picks.
pub(crate) fn route(
    router: &mut RouterState,
    engines: &[Engine],
    outstanding: &[u64],
    loads: &mut [Load],
    content: &Content,
    req: &Request,
    session: Option<u64>,
) -> usize {
    let affinity = router.policy() == llmsim_scenario::config::Router::PrefixAffinity;
    let loads = &mut loads[..engines.len()];
    for ((load, e), &n) in loads.iter_mut().zip(engines).zip(outstanding) {
        *load = Load::of(e, n, affinity.then(|| content.affinity(req.prompt)));
    }
    let block_size = u64::from(content.block_size().max(1));
    let arrival = Arrival { prompt_blocks: u64::from(req.prompt).div_ceil(block_size), session };
    router.route(&arrival, loads)
}
