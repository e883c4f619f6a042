//! The KV block pool with prefix caching (docs/prefix-caching.md), the
//! pool the engine uses when `kv_cache.prefix_caching` is on. Without it the
//! engine keeps the plain counting pool of `kv.rs`: block identity costs
//! nothing when nothing is shared.
//!
//! Every block has a reference count. Blocks with count 0 sit in a free
//! queue, oldest freed first, and keep their hash until they are reused
//! (lazy eviction), so a later request with the same content can still hit
//! them. The cache maps a hash to every block that holds it, in
//! registration order; a lookup uses the earliest-registered one, and
//! evicting one leaves the others serving hits (vLLM's block pool does the
//! same). The rules, as the engine applies them:
//!
//! 1. lookup at admission: the longest run of leading full blocks whose
//!    hashes are cached, among the first `floor((P+g-1)/bs)` (the last token
//!    is always computed, to sample);
//! 2. admission test: the hit blocks that sit in the free queue leave it too;
//! 3. allocation takes blocks from the head of the free queue; a block that
//!    still has a hash is evicted from the cache;
//! 4. registration at scheduling time: after a request is scheduled for `n`
//!    tokens, its full blocks among the first `c + n` tokens get their hash;
//! 5. freeing drops counts by one; blocks reaching 0 join the tail of the
//!    free queue in reverse order of position (the request's tail first, so
//!    its shared head is evicted last).
//!
//! The pool is exact and pure: it only counts, links and looks up. Blocks
//! are materialised the first time they leave the free queue, so a huge
//! `num_blocks` costs memory only for the blocks a run actually touches.
//! The hash map (`index.rs`) uses the hashes themselves as positions (they
//! are already uniformly mixed) and is only looked up, never iterated,
//! outside of the invariant check.

mod check;
pub mod hash;
mod index;

use std::collections::VecDeque;

use index::{HashIndex, Holders};

/// No block.
const NIL: u32 = u32::MAX;

/// The tag of a slot's next content: the same slot, the next generation.
fn next_tag(tag: u64) -> u64 {
    (tag & !0xffff_ffff) | (tag.wrapping_add(1) & 0xffff_ffff)
}

/// What a lookup found: the length of the hit run and how many of its
/// blocks sit in the free queue (count 0).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Lookup {
    pub blocks: u32,
    pub free_blocks: u32,
}

/// What [`PrefixPool::join`] did for a request that fitted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Join {
    /// The hit run's length.
    pub hit_blocks: u32,
    /// What [`PrefixPool::register`] returned.
    pub register_at: u64,
    /// What [`PrefixPool::decodes_by_count`] said.
    pub counted: bool,
}

/// [`Block::kind`] of a block holding no hash.
const UNCACHED: u32 = u32::MAX;
/// [`Block::kind`] of a block whose hash is in the index.
const SHARED: u32 = u32::MAX - 1;
/// [`Block::kind`] of a block of own content of a request that left: found
/// by no one, only counted until evicted, and evicting it touches nothing
/// but its own entry. A lower kind is a block of own content of a request
/// still there: its position among that request's own blocks.
const ORPHAN: u32 = u32::MAX - 2;

/// A block, in 32 bytes aligned to 32 so it sits in one cache line:
/// taking it from the free queue (the head of the queue is the block freed
/// longest ago: cold in the cache), registering it, freeing it and
/// evicting it touch that one line.
#[derive(Copy, Clone, Debug)]
#[repr(C, align(32))]
struct Block {
    /// Its content hash, while `SHARED`. For a block of a request's own
    /// content (and an orphan): the [`SlotState::tag`] of the content it was
    /// registered under.
    hash: u64,
    refs: u32,
    /// While in the free queue (`refs == 0`): its place there
    /// ([`PrefixPool::queue`]).
    queued_at: u32,
    /// What it holds: `UNCACHED`, `SHARED`, `ORPHAN`, or its position among
    /// its request's own blocks.
    kind: u32,
    /// Neighbours among the blocks holding the same hash (or own position),
    /// in registration order, while cached.
    same_prev: u32,
    same_next: u32,
    /// When it got its hash (registration order, wrapping): only the
    /// invariant check reads it.
    registered_at: u32,
}

impl Block {
    const FRESH: Block = Block {
        hash: 0,
        refs: 0,
        queued_at: u32::MAX,
        kind: UNCACHED,
        same_prev: NIL,
        same_next: NIL,
        registered_at: 0,
    };
}

/// Whether registration `a` came before `b` (counts wrap; blocks compared
/// are registered less than 2^31 registrations apart).
fn registered_before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

/// A request's part of the pool. What registering and taking blocks read
/// (the table, the content's length, the registered count, whether it was
/// preempted) sits in its first cache line.
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
struct SlotState {
    /// Its blocks by position, as far as they have labels: the shared
    /// positions (those of `hashes`), and every position once it was
    /// preempted (`released`). Until then its blocks past `hashes` are
    /// only counted (`anon`).
    table: Vec<u32>,
    /// Blocks it holds past `table` (own content or not yet registered,
    /// never preempted): nothing reads them, so they have no label; their
    /// labels are among [`PrefixPool::spare`]. Non-zero only when `table`
    /// covers all of `hashes` and the slot was never released.
    anon: u32,
    /// Its content: hashes of its leading full blocks, prompt then answer,
    /// those another request may share.
    hashes: Vec<u64>,
    /// Leading blocks of `table` that hold their hash.
    registered: u32,
    /// Full blocks of content: `hashes` and then the own ones.
    known: u32,
    /// Whether it let go of its blocks since its content was set (a
    /// preemption): then its own blocks may be held twice or sit in the
    /// free queue, and [`PrefixPool::finish`] takes the block-by-block way.
    /// Until then its own blocks are registered by count only.
    released: bool,
    /// The pinned hit run ([`PrefixPool::pinned`]) standing for the
    /// references of its leading blocks, or `NIL` (each block counts it).
    pin: u32,
    /// Full blocks after `hashes` whose content is the request's own:
    /// unique (their hashes chain content no other request has), so they
    /// are never hashed nor put in the index; only this request can hit
    /// them again, after a preemption. Each position lists the blocks
    /// holding it, earliest-registered first (several after a preemption
    /// whose hit run broke before a position still cached). Empty until
    /// the request is preempted ([`PrefixPool::release`] sizes it to
    /// `known - hashes.len()`): before, none of its own blocks is listed.
    own: Vec<Holders>,
    /// Names the current content of the slot: `slot << 32 | generation`,
    /// the generation counting the contents the slot has held. An own
    /// block whose `hash` is not its slot's tag is an orphan: its request
    /// has left, nothing can ever hit it, and it only waits for eviction.
    tag: u64,
}

impl SlotState {
    /// Its content is `hashes`, then `own` full blocks of its own.
    fn count_known(&mut self, own: u32) {
        // Own positions are kinds below ORPHAN (a request of 2^32 blocks
        // could not be held in memory anyway).
        self.known = (self.hashes.len() as u64 + u64::from(own.min(ORPHAN))).min(u64::from(u32::MAX)) as u32;
    }

    /// Its content goes (it finished or left): the next content of the
    /// slot has the next tag.
    fn drop_content(&mut self) {
        self.hashes.clear();
        self.own.clear();
        self.known = 0;
        self.tag = next_tag(self.tag);
        self.registered = 0;
        self.released = false;
    }

    /// Whether the next block it takes needs a label: a shared position,
    /// or any once it was preempted.
    fn labels_next(&self) -> bool {
        self.released || self.table.len() < self.hashes.len()
    }
}

/// A free-queue entry: a block (its index, below 2^32), or a run of
/// anonymous blocks ([`run`]): `u` blocks holding no hash, then `o`
/// orphans (cached, counted, found by no one), in this order. A request
/// that leaves puts both kinds in as one run.
type Entry = u64;
/// The tag of a run.
const RUN: Entry = 1 << 63;
/// The most blocks holding no hash one run counts (31 bits; the orphans
/// take the low 32).
const RUN_MAX_UNCACHED: u32 = (1 << 31) - 1;

/// A run of `u` blocks holding no hash, then `o` orphans.
fn run(u: u32, o: u32) -> Entry {
    debug_assert!(u <= RUN_MAX_UNCACHED, "a run of too many blocks holding no hash");
    RUN | (u64::from(u) << 32) | u64::from(o)
}

/// The blocks holding no hash and the orphans of run `e`.
#[inline]
fn run_parts(e: Entry) -> (u32, u32) {
    ((e >> 32) as u32 & RUN_MAX_UNCACHED, e as u32)
}

/// The block pool with prefix caching.
#[derive(Clone, Debug)]
pub struct PrefixPool {
    block_size: u32,
    total: u32,
    /// Materialised blocks; the rest (`total - blocks.len()`) were never
    /// used and make up the head of the free queue, in index order.
    blocks: Vec<Block>,
    /// The free queue after the never-used blocks, oldest freed first: a
    /// block taken out of its middle (a hit) is left in place and skipped
    /// when it reaches the head (its entry is stale: the block has a
    /// reference, or was freed again and queued further back). Entry `i`
    /// sits at position `queue_base + i`; a block in the queue knows its
    /// position (`Block::queued_at`), so an entry is live exactly when its
    /// block has count 0 and that position. An array, not a linked list:
    /// taking `n` blocks reads `n` independent entries, whose cache misses
    /// overlap, instead of chasing links one miss after the other.
    ///
    /// A request that leaves without having been preempted puts its own
    /// and unregistered blocks in as one run ([`PrefixPool::finish`]):
    /// no one can hit them, so which physical block stands for which
    /// does not matter; taking from a run only counts (an eviction for an
    /// orphan), and a label from `spare` is drawn only for a position that
    /// needs one.
    queue: VecDeque<Entry>,
    queue_base: u32,
    /// Live block entries of `queue`.
    listed: u32,
    /// Block entries of `queue` that are not live.
    stale: u32,
    /// Blocks the runs of `queue` stand for.
    in_runs: u32,
    /// Labels of the blocks without one: those the runs of `queue` stand
    /// for and those held anonymously ([`SlotState::anon`]), as many as
    /// both, in any order (they all look like a block just taken: one
    /// reference, no hash, no place in the queue).
    spare: Vec<u32>,
    /// Blocks taken by [`PrefixPool::take_for_counted`] and own blocks
    /// registered by [`PrefixPool::fill_counted`] that no slot counts yet
    /// ([`PrefixPool::settle`] gives them to theirs).
    unsettled_blocks: u32,
    unsettled_fills: u32,
    cache: HashIndex,
    /// Blocks holding a hash.
    cached: u32,
    registrations: u32,
    evictions: u64,
    slots: Vec<SlotState>,
    /// The blocks of the last lookup.
    hits: Vec<u32>,
    /// Whether the last lookup's shared hits are exactly the pinned run
    /// of their first hash, and it has pins ([`PrefixPool::admit`] then
    /// takes a pin without comparing them again).
    hits_pinned: bool,
    /// Hit runs of recent lookups, by their first hash (`CHAINS` of them):
    /// a lookup of content starting the same way takes the blocks of the
    /// common part from here instead of the index. Valid while `epoch`
    /// is theirs.
    chains: Vec<Chain>,
    /// Counts the changes of a hash's first holder (the block lookups
    /// use): an eviction of a first holder. A registration never changes
    /// one (a new holder goes last), and a hash newly in the index only
    /// lengthens what a lookup finds past a memoised run, which it probes.
    epoch: u64,
    /// Hit runs held as one (`CHAINS` of them, by first hash): requests
    /// admitted with exactly a pinned run's blocks as their hit count one
    /// pin each, and the run holds one reference on each of its blocks
    /// while it has pins. Its blocks are freed, in reverse order, when its
    /// last pin goes: the moment and order the last of those requests
    /// would have freed them (its shared head, last position first).
    pinned: Vec<Pinned>,
}

/// A pinned hit run ([`PrefixPool::pinned`]).
#[derive(Clone, Debug, Default)]
struct Pinned {
    blocks: Vec<u32>,
    pins: u32,
}

/// A memoised hit run: `hashes[i]`'s first holder is `blocks[i]`, as long
/// as the pool's epoch is `epoch`.
#[derive(Clone, Debug, Default)]
struct Chain {
    epoch: u64,
    hashes: Vec<u64>,
    blocks: Vec<u32>,
    /// Whether `blocks` equals the blocks of the pinned run of the same
    /// index (kept as either changes): a lookup that finds exactly this
    /// run knows whether it is the pinned one without comparing.
    pinned_eq: bool,
}

/// Memoised hit runs (a power of two).
const CHAINS: usize = 16;

/// The memo entry of content starting with hash `h` (bits the index does
/// not use first).
fn chain_of(h: u64) -> usize {
    (h >> 56) as usize & (CHAINS - 1)
}

impl PrefixPool {
    pub fn new(total: u32, block_size: u32) -> PrefixPool {
        PrefixPool {
            block_size: block_size.max(1),
            total,
            blocks: Vec::new(),
            queue: VecDeque::new(),
            queue_base: 0,
            listed: 0,
            stale: 0,
            in_runs: 0,
            spare: Vec::new(),
            unsettled_blocks: 0,
            unsettled_fills: 0,
            // Grown by use, not sized by `total`: a huge `num_blocks` (or
            // many replicas) costs nothing until blocks are cached. The
            // rehashes as it doubles cost about one insert per entry.
            cache: HashIndex::new(),
            cached: 0,
            registrations: 0,
            evictions: 0,
            slots: Vec::new(),
            hits: Vec::new(),
            hits_pinned: false,
            // Both empty: equal.
            chains: vec![Chain { epoch: u64::MAX, pinned_eq: true, ..Chain::default() }; CHAINS],
            epoch: 0,
            pinned: vec![Pinned::default(); CHAINS],
        }
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    /// Blocks in the free queue (count 0), cached or not.
    pub fn free(&self) -> u32 {
        self.total - self.blocks.len() as u32 + self.listed + self.in_runs
    }

    /// Blocks with a reference.
    pub fn used(&self) -> u32 {
        self.total - self.free()
    }

    /// Blocks holding a hash (in use or free).
    pub fn cached_blocks(&self) -> u32 {
        self.cached
    }

    /// Cached blocks taken for reuse since the start.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The content hashes of request `slot` (its leading full blocks
    /// another request may share).
    pub fn hashes(&self, slot: u32) -> &[u64] {
        self.slots.get(slot as usize).map_or(&[], |s| &s.hashes)
    }

    /// Leading blocks of request `slot` that hold their content.
    pub fn registered(&self, slot: u32) -> u32 {
        self.slots.get(slot as usize).map_or(0, |s| s.registered)
    }

    /// Blocks request `slot` holds.
    pub fn held(&self, slot: u32) -> u32 {
        self.slots.get(slot as usize).map_or(0, |s| s.table.len() as u32 + s.anon)
    }

    /// Gives request `slot` its content (the hashes of its full blocks,
    /// prompt then answer), copied into the slot's own buffer (reused from
    /// request to request). Its slot holds no blocks.
    pub fn set_content(&mut self, slot: u32, hashes: &[u64]) {
        self.set_content_own(slot, hashes, 0);
    }

    /// [`PrefixPool::set_content`] for content whose first `hashes.len()`
    /// full blocks may be shared and whose next `own` full blocks are the
    /// request's own (docs/prefix-caching.md, "Speed"): those are
    /// registered, counted as cached and evicted like any other, but
    /// without a hash or an index entry; only this request finds them
    /// again. The same hits, registrations and evictions as giving every
    /// block a hash no other request has.
    pub fn set_content_own(&mut self, slot: u32, hashes: &[u64], own: u32) {
        let s = self.new_content(slot);
        s.hashes.extend_from_slice(hashes);
        s.count_known(own);
    }

    /// [`PrefixPool::set_content_own`] taking the buffer `hashes` as is:
    /// it leaves with the slot's old (empty) buffer, nothing copied.
    pub fn set_content_moved(&mut self, slot: u32, hashes: &mut Vec<u64>, own: u32) {
        let s = self.new_content(slot);
        std::mem::swap(&mut s.hashes, hashes);
        s.count_known(own);
    }

    /// Request `slot`'s slot (made if new), holding no blocks, ready for
    /// new content: none yet, the next tag.
    fn new_content(&mut self, slot: u32) -> &mut SlotState {
        let i = slot as usize;
        while self.slots.len() <= i {
            let tag = (self.slots.len() as u64) << 32;
            self.slots.push(SlotState { tag, pin: NIL, ..SlotState::default() });
        }
        debug_assert!(self.slots[i].table.is_empty(), "content set on a slot that holds blocks");
        debug_assert!(self.slots[i].anon == 0, "content set on a slot that holds blocks");
        self.orphan_own(slot);
        let s = &mut self.slots[i];
        s.tag = next_tag(s.tag);
        s.hashes.clear();
        s.own.clear();
        s.registered = 0;
        s.released = false;
        s
    }

    /// Rule 1: the hit of request `slot` with `known = P + g` tokens. The
    /// blocks found are kept for [`PrefixPool::admit`].
    #[inline]
    pub fn lookup(&mut self, slot: u32, known: u32) -> Lookup {
        self.hits.clear();
        self.hits_pinned = false;
        let Some(s) = self.slots.get(slot as usize) else { return Lookup::default() };
        let max = (known.saturating_sub(1) / self.block_size) as usize;
        let want = &s.hashes[..max.min(s.hashes.len())];
        // The part a recent lookup found (same leading hashes: the same
        // first holders while no first holder changed), then the index.
        let mut memo = 0;
        // Whether the hits are exactly the memo entry's blocks.
        let mut whole = false;
        if let Some(&h0) = want.first() {
            let chain = &self.chains[chain_of(h0)];
            if chain.epoch == self.epoch {
                let n = want.len().min(chain.hashes.len());
                memo = match want[..n] == chain.hashes[..n] {
                    true => n,
                    false => want.iter().zip(&chain.hashes).take_while(|(a, b)| a == b).count(),
                };
                self.hits.extend_from_slice(&chain.blocks[..memo]);
                whole = memo == chain.blocks.len();
            }
        }
        for h in &want[memo..] {
            let Some(holders) = self.cache.get(*h) else { break };
            self.hits.push(holders.first);
        }
        if self.hits.len() > memo {
            let i = chain_of(want[0]);
            let chain = &mut self.chains[i];
            chain.epoch = self.epoch;
            chain.hashes.clear();
            chain.hashes.extend_from_slice(&want[..self.hits.len()]);
            chain.blocks.clear();
            chain.blocks.extend_from_slice(&self.hits);
            chain.pinned_eq = chain.blocks == self.pinned[i].blocks;
            whole = true;
        }
        // A pinned run's blocks are all in use.
        let blocks = &self.blocks;
        let pinned = want.first().map(|&h0| chain_of(h0)).filter(|&i| self.pinned[i].pins > 0);
        self.hits_pinned = pinned.is_some_and(|i| match whole {
            true => self.chains[i].pinned_eq,
            false => self.pinned[i].blocks == self.hits,
        });
        let mut free_blocks = match self.hits_pinned {
            true => 0,
            false => self.hits.iter().map(|&b| u32::from(blocks[b as usize].refs == 0)).sum::<u32>(),
        };
        // Its own blocks, only if every shared one hit (a preempted
        // request coming back finds what is left of its own).
        if self.hits.len() == s.hashes.len() {
            let own = max.saturating_sub(s.hashes.len()).min(s.own.len());
            for holders in &s.own[..own] {
                let b = holders.first;
                if b == NIL {
                    break;
                }
                free_blocks += u32::from(self.blocks[b as usize].refs == 0);
                self.hits.push(b);
            }
        }
        Lookup { blocks: self.hits.len() as u32, free_blocks }
    }

    /// Rules 1 to 4 for request `slot` joining whole with `known` tokens
    /// (its prompt) and `need` blocks for them: the lookup, the test that
    /// at least `watermark` blocks stay free (counting the hit blocks that
    /// leave the free queue), then [`PrefixPool::admit`],
    /// [`PrefixPool::register`] up to `known` and
    /// [`PrefixPool::decodes_by_count`] up to `last`. `None`, after the
    /// lookup only, if it does not fit.
    pub fn join(&mut self, slot: u32, known: u32, need: u32, watermark: i64, last: u32) -> Option<Join> {
        let hit = self.lookup(slot, known);
        let fresh = need - hit.blocks;
        if i64::from(self.free()) - i64::from(hit.free_blocks) - i64::from(fresh) < watermark {
            return None;
        }
        self.admit(slot, fresh);
        let register_at = self.register(slot, known);
        let counted = self.decodes_by_count(slot, known, last);
        Some(Join { hit_blocks: hit.blocks, register_at, counted })
    }

    /// Rule 1 for content not (yet) in the pool: how many leading blocks
    /// of `hashes` a request with `known = P + g` tokens would hit now.
    /// Changes nothing (the cluster router asks every replica this).
    pub fn hit_blocks(&self, hashes: &[u64], known: u32) -> u32 {
        let max = (known.saturating_sub(1) / self.block_size) as usize;
        hashes[..max.min(hashes.len())].iter().take_while(|h| self.cache.get(**h).is_some()).count() as u32
    }

    /// Rules 2 and 3: request `slot` takes the blocks of the lookup just
    /// made (they leave the free queue if they were in it), then `new` fresh
    /// blocks. The caller has checked that they fit.
    #[inline]
    pub fn admit(&mut self, slot: u32, new: u32) {
        let hits = std::mem::take(&mut self.hits);
        let hits_pinned = std::mem::replace(&mut self.hits_pinned, false);
        // A hit of exactly the pinned run of its first hash takes a pin
        // (the lookup compared them); if that run has no pins, these
        // blocks become it.
        let s = &self.slots[slot as usize];
        let mut pin = NIL;
        let mut each = true;
        if !s.released
            && !hits.is_empty()
            && let Some(&h0) = s.hashes.first()
        {
            let i = chain_of(h0);
            let p = &mut self.pinned[i];
            if p.pins == 0 {
                p.blocks.clear();
                p.blocks.extend_from_slice(&hits);
                self.chains[i].pinned_eq = self.chains[i].blocks == p.blocks;
                p.pins = 1;
                pin = i as u32;
            } else if hits_pinned {
                debug_assert!(p.blocks == hits, "a pin taken for other blocks than the pinned run's");
                each = false;
                p.pins += 1;
                pin = i as u32;
            }
        }
        if each {
            // Those in the free queue leave it: their entries go stale.
            let mut unlinked = 0;
            for &b in &hits {
                let block = &mut self.blocks[b as usize];
                if block.refs == 0 {
                    block.queued_at = u32::MAX;
                    unlinked += 1;
                }
                block.refs += 1;
            }
            if unlinked > 0 {
                self.listed -= unlinked;
                self.stale += unlinked;
                self.compact_if_stale();
            }
        }
        let s = &mut self.slots[slot as usize];
        debug_assert!(s.table.is_empty() && s.anon == 0, "admitting a request that holds blocks");
        s.pin = pin;
        s.registered = hits.len() as u32;
        // The hits become its table (its empty one the next hits buffer).
        self.hits = std::mem::replace(&mut s.table, hits);
        self.allocate(slot, new);
    }

    /// [`PrefixPool::allocate`] of one block for each of `slots`, in that
    /// order: the same blocks, evictions and queue as one call each. A run
    /// at the head of the free queue gives as many as it holds in one take
    /// (the decode stretch's crossings of a step come here).
    pub fn allocate_one_each(&mut self, mut slots: impl ExactSizeIterator<Item = u32>) {
        while slots.len() > 0 {
            let k = self.head_run(slots.len() as u32);
            if k == 0 {
                let Some(slot) = slots.next() else { break };
                self.allocate(slot, 1);
                continue;
            }
            self.take_from_run(k);
            for slot in slots.by_ref().take(k as usize) {
                let s = &mut self.slots[slot as usize];
                match s.labels_next() {
                    false => s.anon += 1,
                    true => s.table.push(self.spare.pop().expect("a run stands for blocks without labels")),
                }
            }
        }
    }

    /// Whether request `slot`, having computed `c` tokens, decodes up to
    /// `last` tokens by count: never preempted since its content was set,
    /// every shared position registered and every full block among the `c`
    /// registered, and its own content reaching the `last` tokens. Then each
    /// block it crosses into is anonymous and each one it fills is an own
    /// block registered by count, so a decode stretch takes and registers
    /// them as counts ([`PrefixPool::take_for_counted`],
    /// [`PrefixPool::fill_counted`]) and tells the slot at the end
    /// ([`PrefixPool::settle`]).
    pub fn decodes_by_count(&self, slot: u32, c: u32, last: u32) -> bool {
        let Some(s) = self.slots.get(slot as usize) else { return false };
        !s.released
            && s.table.len() == s.hashes.len()
            && s.registered as usize >= s.hashes.len()
            && s.registered == c / self.block_size
            && last / self.block_size <= s.known
    }

    /// `n` blocks for requests decoding by count, from the head of the free
    /// queue: the same blocks and evictions as [`PrefixPool::allocate`]
    /// of one each, none of them given to a slot yet.
    #[inline]
    pub fn take_for_counted(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.unsettled_blocks += n;
        // Mostly the run at the head holds them all: only counts.
        match self.head_run(n) == n {
            true => self.take_from_run(n),
            false => self.take_anonymous(n),
        }
    }

    /// Takes `n` blocks from the head of the free queue to be held without
    /// labels: a run gives several at once, by count; a single block's
    /// label joins `spare`.
    fn take_anonymous(&mut self, mut n: u32) {
        while n > 0 {
            let k = self.head_run(n);
            if k > 0 {
                self.take_from_run(k);
                n -= k;
                continue;
            }
            let b = self.take_free();
            self.spare.push(b);
            n -= 1;
        }
    }

    /// `n` requests decoding by count fill a block: each is registered
    /// (an own block, by count), as [`PrefixPool::register`] would.
    pub fn fill_counted(&mut self, n: u32) {
        self.cached += n;
        self.unsettled_fills += n;
    }

    /// Request `slot`, decoding by count, now holds `held` blocks and has
    /// computed `tokens`: it takes its blocks and fills counted since.
    /// Returns what [`PrefixPool::register`] would have.
    pub fn settle(&mut self, slot: u32, held: u32, tokens: u32) -> u64 {
        let s = &mut self.slots[slot as usize];
        let anon = held - s.table.len() as u32;
        self.unsettled_blocks -= anon - s.anon;
        s.anon = anon;
        let registered = (tokens / self.block_size).min(s.known).min(held);
        self.unsettled_fills -= registered - s.registered;
        s.registered = registered;
        match registered < s.known {
            true => (u64::from(registered) + 1) * u64::from(self.block_size),
            false => u64::MAX,
        }
    }

    /// How many of at most `n` blocks the run at the head of the free queue
    /// gives in one take (0 when the head is a single block, or while
    /// blocks are still handed out for the first time).
    #[inline]
    fn head_run(&self, n: u32) -> u32 {
        match self.queue.front() {
            Some(&e) if e >= RUN && self.blocks.len() as u32 >= self.total => {
                let (u, o) = run_parts(e);
                (u64::from(u) + u64::from(o)).min(u64::from(n)) as u32
            }
            _ => 0,
        }
    }

    /// Rule 3: `n` more blocks for request `slot` from the head of the free
    /// queue. The caller has checked that `n <= free()`.
    pub fn allocate(&mut self, slot: u32, n: u32) {
        // Positions that need a label first (shared ones, or all once
        // preempted), then the anonymous ones.
        let s = &self.slots[slot as usize];
        let labelled = match s.released {
            true => n,
            false => n.min((s.hashes.len() as u32).saturating_sub(s.table.len() as u32)),
        };
        for _ in 0..labelled {
            let b = self.take_free();
            self.slots[slot as usize].table.push(b);
        }
        self.take_anonymous(n - labelled);
        self.slots[slot as usize].anon += n - labelled;
    }

    /// Rule 4: request `slot` is scheduled up to `tokens = c + n`: its full
    /// blocks among them that have no hash yet get one. If another block
    /// already holds the hash, that one stays the one lookups use. Returns
    /// the token count below which a later call registers nothing (so the
    /// engine can skip the call on most decode steps).
    #[inline]
    pub fn register(&mut self, slot: u32, tokens: u32) -> u64 {
        let s = &mut self.slots[slot as usize];
        let known = s.known as usize;
        let full = ((tokens / self.block_size) as usize).min(known).min(s.table.len() + s.anon as usize);
        let from = s.registered as usize;
        // Own blocks of a request not preempted since its content was set
        // are only counted: no one can look them up while it holds them,
        // and it holds them until it leaves (then they join the queue as a
        // run, unread) or is preempted ([`PrefixPool::release`] writes
        // them then). So registering a decode block costs no block access.
        let each_to = match s.released {
            true => full,
            false => full.min(s.hashes.len()).max(from),
        };
        if full > each_to {
            self.cached += (full - each_to) as u32;
        }
        for i in from..each_to {
            let b = s.table[i];
            let block = &mut self.blocks[b as usize];
            debug_assert!(block.kind == UNCACHED, "registering a block that holds a hash");
            block.registered_at = self.registrations;
            block.same_next = NIL;
            self.registrations = self.registrations.wrapping_add(1);
            self.cached += 1;
            let holders = match s.hashes.get(i) {
                Some(&h) => {
                    block.kind = SHARED;
                    block.hash = h;
                    let (holders, inserted) = self.cache.get_or_insert(h, Holders { first: b, last: b });
                    (!inserted).then_some(holders)
                }
                None => {
                    let pos = i - s.hashes.len();
                    block.hash = s.tag;
                    block.kind = pos as u32;
                    let holders = &mut s.own[pos];
                    match holders.first {
                        NIL => {
                            *holders = Holders { first: b, last: b };
                            None
                        }
                        _ => Some(holders),
                    }
                }
            };
            let last = match holders {
                Some(holders) => std::mem::replace(&mut holders.last, b),
                None => NIL,
            };
            self.blocks[b as usize].same_prev = last;
            if last != NIL {
                self.blocks[last as usize].same_next = b;
            }
        }

        s.registered = s.registered.max(full as u32);
        match (s.registered as usize) < known {
            true => (u64::from(s.registered) + 1) * u64::from(self.block_size),
            false => u64::MAX,
        }
    }

    /// Rule 5: request `slot` lets go of its blocks, last position first.
    /// Its content stays (a preempted request looks itself up again).
    pub fn release(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize) else { return };
        if !s.released {
            // Its own blocks registered by count only get their labels
            // and entries now, in position order (the order registration
            // would have given them), before any of them can be found or
            // evicted.
            let shared = s.hashes.len();
            s.own.clear();
            s.own.resize(s.known as usize - shared, Holders { first: NIL, last: NIL });
            let from = self.spare.len() - s.anon as usize;
            s.table.extend(self.spare.drain(from..));
            s.anon = 0;
            for i in shared..(s.registered as usize).max(shared) {
                let b = s.table[i];
                let pos = i - shared;
                let block = &mut self.blocks[b as usize];
                debug_assert!(block.kind == UNCACHED, "an own block registered by count holds a hash");
                debug_assert!(s.own[pos].first == NIL, "an own position held twice before a preemption");
                *block = Block {
                    hash: s.tag,
                    kind: pos as u32,
                    same_prev: NIL,
                    same_next: NIL,
                    registered_at: self.registrations,
                    ..*block
                };
                self.registrations = self.registrations.wrapping_add(1);
                s.own[pos] = Holders { first: b, last: b };
            }
        }
        let table = std::mem::take(&mut s.table);
        s.registered = 0;
        s.released = true;
        let pin = std::mem::replace(&mut s.pin, NIL);
        let by_pin = self.pinned.get(pin as usize).map_or(0, |p| p.blocks.len());
        self.free_each(&table[by_pin..]);
        self.unpin(pin);
        let mut table = table;
        table.clear();
        self.slots[slot as usize].table = table;
    }

    /// Drops request `slot`'s content (it finished or left). Its own
    /// blocks still cached become orphans: counted until evicted, found by
    /// no one.
    pub fn forget(&mut self, slot: u32) {
        self.orphan_own(slot);
        if let Some(s) = self.slots.get_mut(slot as usize) {
            debug_assert!(s.table.is_empty() && s.anon == 0, "forgetting a request that holds blocks");
            s.drop_content();
        }
    }

    /// [`PrefixPool::release`] then [`PrefixPool::forget`]: request `slot`
    /// leaves. Unless it was preempted, its blocks past its shared head
    /// (own content, orphans from now on, then the blocks not registered)
    /// are held by it alone, so they join the queue as one run without
    /// being read (the same counts, evictions and hits as one by one).
    pub fn finish(&mut self, slot: u32) {
        let Some(s) = self.slots.get_mut(slot as usize) else { return };
        if s.released {
            self.release(slot);
            self.forget(slot);
            return;
        }
        let held = s.table.len() + s.anon as usize;
        let registered = s.registered as usize;
        let shared = registered.min(s.hashes.len());
        s.anon = 0;
        let pin = std::mem::replace(&mut s.pin, NIL);
        if cfg!(debug_assertions) {
            for &b in &s.table[shared..] {
                debug_assert!(self.blocks[b as usize].refs == 1, "an own or unregistered block held twice");
            }
        }
        // Tail first: the unregistered blocks, then the own registered ones
        // (those past `shared` with a label give it up).
        self.spare.extend_from_slice(&s.table[shared..]);
        self.in_runs += (held - shared) as u32;
        self.push_run((held - registered) as u32, (registered - shared) as u32);
        // Then its shared blocks a pin does not hold (none, mostly).
        let by_pin = self.pinned.get(pin as usize).map_or(0, |p| p.blocks.len());
        if by_pin < shared {
            let table = std::mem::take(&mut self.slots[slot as usize].table);
            self.free_each(&table[by_pin..shared]);
            self.slots[slot as usize].table = table;
        }
        self.unpin(pin);
        let s = &mut self.slots[slot as usize];
        s.table.clear();
        s.drop_content();
    }

    /// Drops one reference of each of `blocks`, last first; those reaching
    /// 0 join the free queue.
    fn free_each(&mut self, blocks: &[u32]) {
        for &b in blocks.iter().rev() {
            let block = &mut self.blocks[b as usize];
            debug_assert!(block.refs > 0, "freeing a free block");
            block.refs -= 1;
            if block.refs == 0 {
                self.push_free(b);
            }
        }
    }

    /// A request lets go of its pin on pinned run `pin` (`NIL`: none);
    /// the last pin frees the run's blocks.
    fn unpin(&mut self, pin: u32) {
        let Some(p) = self.pinned.get_mut(pin as usize) else { return };
        p.pins -= 1;
        if p.pins == 0 {
            let blocks = std::mem::take(&mut p.blocks);
            self.free_each(&blocks);
            self.pinned[pin as usize].blocks = blocks;
        }
    }

    /// Appends `u` anonymous blocks holding no hash, then `o` orphans
    /// (counted in `in_runs`): onto the run at the tail if the order
    /// stays (it ends with blocks holding no hash, or only orphans come).
    fn push_run(&mut self, mut u: u32, o: u32) {
        if u == 0 && o == 0 {
            return;
        }
        if let Some(e) = self.queue.back_mut()
            && *e >= RUN
        {
            let (bu, bo) = run_parts(*e);
            if u == 0 || (bo == 0 && u64::from(bu) + u64::from(u) <= u64::from(RUN_MAX_UNCACHED)) {
                // Blocks in runs are fewer than 2^32: the orphans fit.
                *e = run(bu + u, bo + o);
                return;
            }
        }
        loop {
            if u64::from(self.queue_base) + self.queue.len() as u64 >= u64::from(u32::MAX) {
                self.compact();
            }
            if u <= RUN_MAX_UNCACHED {
                self.queue.push_back(run(u, o));
                return;
            }
            self.queue.push_back(run(RUN_MAX_UNCACHED, 0));
            u -= RUN_MAX_UNCACHED;
        }
    }

    /// Own blocks of request `slot` still cached become orphans (its
    /// content is about to go): their entries say so, so evicting them
    /// later reads nothing else. Called when the request has just let go
    /// of them, while their entries are still in the cache.
    fn orphan_own(&mut self, slot: u32) {
        let Some(s) = self.slots.get(slot as usize) else { return };
        for holders in &s.own {
            let mut b = holders.first;
            while b != NIL {
                let block = &mut self.blocks[b as usize];
                block.kind = ORPHAN;
                b = match b == holders.last {
                    true => NIL,
                    false => block.same_next,
                };
            }
        }
    }

    /// Takes the head of the free queue, evicting its hash, and gives it
    /// its one reference.
    fn take_free(&mut self) -> u32 {
        if (self.blocks.len() as u32) < self.total {
            self.blocks.push(Block { refs: 1, ..Block::FRESH });
            return self.blocks.len() as u32 - 1;
        }
        let b = loop {
            let e = self.queue.front_mut().expect("taking a block from an empty free queue");
            if *e >= RUN {
                // One block of a run: any label of one.
                self.take_from_run(1);
                return self.spare.pop().expect("a run stands for blocks without labels");
            }
            let b = *e as u32;
            self.queue.pop_front();
            let at = self.queue_base;
            self.queue_base += 1;
            let block = &self.blocks[b as usize];
            if block.refs == 0 && block.queued_at == at {
                break b;
            }
            self.stale -= 1;
        };
        self.listed -= 1;
        let block = &mut self.blocks[b as usize];
        block.queued_at = u32::MAX;
        block.refs = 1;
        match block.kind {
            UNCACHED => {}
            ORPHAN => {
                block.kind = UNCACHED;
                self.cached -= 1;
                self.evictions += 1;
            }
            _ => self.evict(b),
        }
        b
    }

    /// Takes `k` blocks from the run at the head of the free queue (it
    /// holds at least `k`): only counts. The caller draws a label from
    /// `spare` for each that needs one. A label there has the one
    /// reference, no hash and no place in the queue (what a block just
    /// taken has); its other fields are rewritten before anything reads
    /// them (registration, a preemption).
    #[inline]
    fn take_from_run(&mut self, k: u32) {
        let e = self.queue.front_mut().expect("a run at the head of the free queue");
        let (u, o) = run_parts(*e);
        debug_assert!(*e >= RUN && u64::from(u) + u64::from(o) >= u64::from(k), "taking more than the head run holds");
        // Those holding no hash first, then orphans (evicted).
        let from_u = k.min(u);
        let orphans = k - from_u;
        *e -= (u64::from(from_u) << 32) + u64::from(orphans);
        if *e == RUN {
            self.queue.pop_front();
            self.queue_base += 1;
        }
        self.in_runs -= k;
        self.cached -= orphans;
        self.evictions += u64::from(orphans);
    }

    fn push_free(&mut self, b: u32) {
        if u64::from(self.queue_base) + self.queue.len() as u64 >= u64::from(u32::MAX) {
            self.compact();
        }
        self.blocks[b as usize].queued_at = self.queue_base + self.queue.len() as u32;
        self.queue.push_back(Entry::from(b));
        self.listed += 1;
    }

    /// Once stale entries outnumber the live ones, the free queue drops
    /// them (keeping the order of the rest). A block hit while free is
    /// taken out by setting its position to none (positions stay below
    /// `u32::MAX`): its entry goes stale.
    fn compact_if_stale(&mut self) {
        if self.stale > 64 && self.stale > self.listed {
            self.compact();
        }
    }

    /// Drops the stale entries of the free queue and numbers the live ones
    /// from 0, in order. Blocks out of the queue keep old numbers, which
    /// nothing reads: an entry is live only if its block has count 0, and
    /// a block reaching count 0 is queued with a new number.
    fn compact(&mut self) {
        let (mut at, mut kept) = (self.queue_base, 0u32);
        let blocks = &mut self.blocks;
        self.queue.retain(|&e| {
            let live = match e >> 32 {
                0 => {
                    let block = &mut blocks[e as usize];
                    let live = block.refs == 0 && block.queued_at == at;
                    if live {
                        block.queued_at = kept;
                    }
                    live
                }
                _ => true,
            };
            at = at.wrapping_add(1);
            kept += u32::from(live);
            live
        });
        self.queue_base = 0;
        self.stale = 0;
    }

    /// Removes block `b` (`SHARED` or own content of a request still
    /// there) from the blocks holding its content.
    fn evict(&mut self, b: u32) {
        let Block { hash, kind, same_prev, same_next, .. } = self.blocks[b as usize];
        if same_prev != NIL {
            self.blocks[same_prev as usize].same_next = same_next;
        }
        if same_next != NIL {
            self.blocks[same_next as usize].same_prev = same_prev;
        }
        if kind == SHARED {
            if same_prev == NIL {
                // Its hash's first holder changes: memoised runs may be stale.
                self.epoch += 1;
            }
            match (same_prev, same_next) {
                (NIL, NIL) => {
                    self.cache.remove(hash);
                }
                (NIL, n) => {
                    if let Some(h) = self.cache.get_mut(hash) {
                        h.first = n;
                    }
                }
                (p, NIL) => {
                    if let Some(h) = self.cache.get_mut(hash) {
                        h.last = p;
                    }
                }
                _ => {}
            }
        } else {
            // Out of its request's list (the request is still there: its
            // blocks would be orphans otherwise).
            let s = &mut self.slots[(hash >> 32) as usize];
            debug_assert!(s.tag == hash, "an own block of content that is gone");
            let holders = &mut s.own[kind as usize];
            if same_prev == NIL {
                holders.first = same_next;
            }
            if same_next == NIL {
                holders.last = same_prev;
            }
        }
        self.blocks[b as usize].kind = UNCACHED;
        self.cached -= 1;
        self.evictions += 1;
    }
}

#[cfg(test)]
mod tests;
