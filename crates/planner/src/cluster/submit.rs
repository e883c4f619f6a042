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
/// of each ([`gather`]) and returns the replica `router` picks.
pub(crate) fn route(
    router: &mut RouterState,
    engines: &[Engine],
    outstanding: &[u64],
    loads: &mut [Load],
    content: &Content,
    req: &Request,
    session: Option<u64>,
) -> usize {
    gather(router, engines, outstanding, loads, content, req, None);
    router.route(&arrival(content, req, session), &loads[..engines.len()])
}

/// Fills `loads` (one a replica, in order) with what the router sees of
/// each engine: `outstanding` requests routed there and, for
/// `prefix_affinity`, the request's cache hit there, looked up on the
/// replicas `ready` marks (every one when `None`; a router never picks
/// the others).
pub(crate) fn gather<'e>(
    router: &RouterState,
    engines: impl IntoIterator<Item = &'e Engine>,
    outstanding: &[u64],
    loads: &mut [Load],
    content: &Content,
    req: &Request,
    ready: Option<&[bool]>,
) {
    let affinity = router.policy() == llmsim_scenario::config::Router::PrefixAffinity;
    for (i, ((load, e), &n)) in loads.iter_mut().zip(engines).zip(outstanding).enumerate() {
        let hit = (affinity && ready.is_none_or(|m| m[i])).then(|| content.affinity(req.prompt));
        *load = Load::of(e, n, hit);
    }
}

/// What the router is told of `req`: its prompt in blocks and its
/// conversation, if any.
pub(crate) fn arrival(content: &Content, req: &Request, session: Option<u64>) -> Arrival {
    let block_size = u64::from(content.block_size().max(1));
    Arrival { prompt_blocks: u64::from(req.prompt).div_ceil(block_size), session }
}
