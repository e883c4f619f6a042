//! How a request's content reaches an engine, whatever the topology.
//!
//! A recorded trace's named blocks are taken as given; else, when
//! the source says where the request's own content starts
//! ([`Source::own_from`]), only the blocks before it are hashed and the
//! engine takes the rest as the request's own
//! ([`Engine::submit_with_content`]); else every block is hashed. The
//! results are the same either way (docs/prefix-caching.md, "Speed"), and
//! so is the `prefix_affinity` router's view: a new request's own blocks
//! are on no replica, so only the hashed leading blocks can hit.

use crate::run_driver::fits_context;
use crate::workload::Source;
use llmsim_core::engine::prefix::hash::{BlockHashes, request_block_hashes, request_shared_hashes};
use llmsim_core::engine::{Engine, Observer, RejectReason, Request};

/// The content of the request being placed, reused from one arrival to
/// the next.
pub struct Content {
    /// Prefix caching is on (else no hash is made).
    hashing: bool,
    block_size: u32,
    /// Longer requests are refused for their length: no content is made.
    context: u32,
    hashes: BlockHashes,
    /// `hashes` are only the blocks another request may share; the rest
    /// of the request's blocks are its own.
    own_tail: bool,
    /// Hash every block, own content included: with KV offload a
    /// preempted request reloads its own blocks from a tier
    /// (docs/offload.md), which finds blocks by hash.
    hash_all: bool,
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
            hash_all: cfg.offload.is_some(),
        }
    }

    /// Reads the content of `req`, the request `source` popped last.
    pub(crate) fn read<S: Source>(&mut self, req: &Request, source: &S) {
        if !self.hashing || !fits_context(req, self.context) {
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
            (None, Some(own_from)) if !self.hash_all => {
                request_shared_hashes(req, source.segments(), own_from, bs, hashes);
                true
            }
            (None, _) => {
                request_block_hashes(req, source.segments(), bs, hashes);
                false
            }
        };
    }

    /// The block size its hashes are made for.
    pub(crate) fn block_size(&self) -> u32 {
        self.block_size
    }

    /// [`Content::read`], moving the hashes made into `out` (its old
    /// buffer is reused for the next request); returns whether the blocks
    /// past them are the request's own ([`Engine::submit_with_content`]).
    pub(crate) fn read_into<S: Source>(&mut self, req: &Request, source: &S, out: &mut Vec<u64>) -> bool {
        self.read(req, source);
        std::mem::swap(out, &mut *self.hashes);
        self.own_tail
    }

    /// What the `prefix_affinity` router needs of the request.
    pub(crate) fn affinity(&self, prompt: u32) -> (&[u64], u32) {
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
        self.submit_taken(engine, req, &self.hashes, self.own_tail, obs)
    }

    /// Hands `req` to `engine` with the content [`Content::read_into`]
    /// took for it.
    pub(crate) fn submit_taken<O: Observer>(
        &self,
        engine: &mut Engine,
        req: Request,
        hashes: &[u64],
        own_tail: bool,
        obs: &mut O,
    ) -> Result<(), RejectReason> {
        match (self.hashing, own_tail) {
            (false, _) => engine.submit(req, obs),
            (true, false) => engine.submit_with_hashes(req, hashes, obs),
            (true, true) => engine.submit_with_content(req, hashes, obs),
        }
    }
}
