//! What the colocated topologies ([`super::Replicas`], [`super::Lanes`])
//! and the disaggregated one ([`super::disagg::Pools`]) do alike at an
//! arrival: reject it before routing if it is over the context, read its
//! content, route it, and hand it to the chosen replica.
//!
//! A request's content is read as the single-engine driver reads it
//! ([`crate::sim`]): a recorded trace's named blocks as given; else, when
//! the source says where the request's own content starts
//! ([`Source::own_from`]), only the blocks before it are hashed and the
//! engine takes the rest as the request's own
//! ([`Engine::submit_with_content`]); else every block is hashed. The
//! results are the same either way (docs/prefix-caching.md, "Speed"), and
//! so is the `prefix_affinity` router's view: a new request's own blocks
//! are on no replica, so only the hashed leading blocks can hit.

use super::router::{Arrival, Load, RouterState};
use crate::run_driver::Tap;
use crate::workload::Source;
use llmsim_core::engine::prefix::hash::{BlockHashes, request_block_hashes, request_shared_hashes};
use llmsim_core::engine::{Engine, Observer, RejectReason, Request};
use llmsim_core::time::SimTime;

/// The content of the request being routed, reused from one arrival to
/// the next.
pub(crate) struct Content {
    /// Prefix caching is on (else no hash is made).
    hashing: bool,
    block_size: u32,
    /// Longer requests are refused for their length: no content is made.
    context: u32,
    hashes: BlockHashes,
    /// `hashes` are only the blocks another request may share; the rest
    /// of the request's blocks are its own.
    own_tail: bool,
}

impl Content {
    /// For replicas of `engine`'s configuration.
    pub(crate) fn new(engine: &Engine) -> Content {
        let cfg = engine.config();
        Content {
            hashing: cfg.prefix_caching,
            block_size: cfg.capacity.block_size,
            context: cfg.context_length,
            hashes: BlockHashes::default(),
            own_tail: false,
        }
    }

    /// Reads the content of `req`, the request `source` popped last.
    pub(crate) fn read<S: Source>(&mut self, req: &Request, source: &S) {
        if !self.hashing || !crate::run_driver::fits_context(req, self.context) {
            // (Refused for its length, an empty content is never looked up.)
            self.hashes.clear();
            self.own_tail = false;
            return;
        }
        let (hashes, bs) = (&mut self.hashes, self.block_size);
        self.own_tail = match (source.block_hashes(), source.own_from()) {
            (Some(named), _) => {
                hashes.clear();
                hashes.extend_from_slice(named);
                false
            }
            (None, Some(own_from)) => {
                request_shared_hashes(req, source.segments(), own_from, bs, hashes);
                true
            }
            (None, None) => {
                request_block_hashes(req, source.segments(), bs, hashes);
                false
            }
        };
    }

    /// What the `prefix_affinity` router needs of the request.
    fn affinity(&self, prompt: u32) -> (&[u64], u32) {
        (&self.hashes, prompt)
    }

    /// Hands `req` (the request read last, or a copy with another output
    /// length) to `engine`.
    pub(crate) fn submit<O: Observer>(
        &self,
        engine: &mut Engine,
        req: Request,
        obs: &mut O,
    ) -> Result<(), RejectReason> {
        match (self.hashing, self.own_tail) {
            (false, _) => engine.submit(req, obs),
            (true, false) => engine.submit_with_hashes(req, &self.hashes, obs),
            (true, true) => engine.submit_with_content(req, &self.hashes, obs),
        }
    }
}

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
    let block_size = u64::from(content.block_size.max(1));
    let arrival = Arrival { prompt_blocks: u64::from(req.prompt).div_ceil(block_size), session };
    router.route(&arrival, loads)
}
