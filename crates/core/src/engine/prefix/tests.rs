//! The prefix-caching rules one by one, on tiny hand-checked cases: first
//! the pool alone, then the engine. Content is given as explicit hash lists
//! (the rules only compare hashes), so these tests do not depend on how
//! hashes are made.

use super::*;
use crate::engine::kv_budget::KvBudget;
use crate::engine::{Engine, EngineConfig, Observer, RejectReason, Request, RequestId, cost};
use crate::time::SimTime;

fn pool(blocks: u32) -> PrefixPool {
    PrefixPool::new(blocks, 4)
}

/// Admits `slot` with `known` tokens as the engine does: lookup, then the
/// blocks it still needs. Returns the hit.
fn admit(p: &mut PrefixPool, slot: u32, hashes: &[u64], known: u32) -> Lookup {
    p.set_content(slot, hashes);
    let hit = p.lookup(slot, known);
    p.admit(slot, known.div_ceil(4) - hit.blocks);
    hit
}

/// Issue 34: the hash index was sized for min(`num_blocks`, 2^20) blocks
/// up front, 32 MB a pool, so 2,000 replicas at the largest `num_blocks`
/// aborted. It is reserved by use: a few slots, doubling as blocks are
/// cached, and the same hits either way.
#[test]
fn a_huge_pool_reserves_its_index_by_use() {
    let mut p = PrefixPool::new(u32::MAX, 4);
    assert!(p.cache.slots() <= 16, "{} slots up front", p.cache.slots());
    let hashes: Vec<u64> = (1..=1000u64).map(|h| h.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
    admit(&mut p, 0, &hashes, 4001);
    p.register(0, 4000);
    assert_eq!(p.cache.len(), 1000);
    // At most half full, at least a quarter: grown to fit what is cached.
    assert!((2000..=4096).contains(&p.cache.slots()), "{} slots for 1,000 hashes", p.cache.slots());
    p.release(0);
    p.set_content(1, &hashes);
    assert_eq!(p.lookup(1, 4001).blocks, 1000);
    p.check(|_| false).unwrap();
}

#[test]
fn a_lookup_never_covers_the_last_token() {
    let mut p = pool(10);
    admit(&mut p, 0, &[1, 2, 3], 13);
    p.register(0, 12);
    p.release(0);
    p.check(|_| false).unwrap();
    // The same 12 tokens: floor((12 - 1) / 4) = 2 blocks may hit, not 3.
    p.set_content(1, &[1, 2, 3]);
    assert_eq!(p.lookup(1, 12).blocks, 2);
    // 13 tokens: floor(12 / 4) = 3.
    assert_eq!(p.lookup(1, 13).blocks, 3);
    // A one-token prompt looks up nothing.
    assert_eq!(p.lookup(1, 1).blocks, 0);
}

#[test]
fn only_full_blocks_among_the_scheduled_tokens_are_registered() {
    let mut p = pool(10);
    admit(&mut p, 0, &[1, 2, 3], 13);
    p.register(0, 7);
    assert_eq!(p.cached_blocks(), 1, "tokens 0..7 fill one block of 4");
    p.register(0, 12);
    assert_eq!(p.cached_blocks(), 3);
    p.register(0, 13);
    assert_eq!(p.cached_blocks(), 3, "the content lists only 3 hashes");
    p.check(|s| s == 0).unwrap();
}

#[test]
fn freeing_puts_a_requests_tail_before_its_head_in_the_queue() {
    // 4 blocks of 4; a request of 13 tokens holds all 4, the first 3 cached.
    let mut p = pool(4);
    admit(&mut p, 0, &[1, 2, 3], 13);
    p.register(0, 13);
    p.release(0);
    // Queue: block 3 (no hash), 2 (hash 3), 1 (hash 2), 0 (hash 1).
    p.set_content(1, &[]);
    p.allocate(1, 1);
    assert_eq!(p.evictions(), 0, "the unhashed tail block goes first");
    p.allocate(1, 1);
    assert_eq!(p.evictions(), 1, "then the last full block");
    p.set_content(2, &[1, 2, 3]);
    assert_eq!(p.lookup(2, 13), Lookup { blocks: 2, free_blocks: 2 }, "the head survives");
    p.check(|s| s == 1).unwrap();
}

#[test]
fn the_least_recently_freed_blocks_are_evicted_first() {
    let mut p = pool(4);
    admit(&mut p, 0, &[10, 11], 8);
    p.register(0, 8);
    admit(&mut p, 1, &[20, 21], 8);
    p.register(1, 8);
    p.release(0);
    p.release(1);
    p.set_content(2, &[]);
    p.allocate(2, 2);
    p.set_content(3, &[10, 11]);
    p.set_content(4, &[20, 21]);
    assert_eq!(p.lookup(3, 9).blocks, 0, "freed first, evicted first");
    assert_eq!(p.lookup(4, 9).blocks, 2);
    p.check(|s| s == 2).unwrap();
}

#[test]
fn a_hash_held_twice_serves_the_earliest_and_the_other_after_an_eviction() {
    let mut p = pool(3);
    // Two requests compute the same block before either registered it.
    p.set_content(0, &[7]);
    p.set_content(1, &[7]);
    assert_eq!(p.lookup(0, 5).blocks, 0);
    p.admit(0, 1);
    assert_eq!(p.lookup(1, 5).blocks, 0);
    p.admit(1, 1);
    p.register(0, 4); // block 0
    p.register(1, 4); // block 1: a second holder of hash 7
    assert_eq!(p.cached_blocks(), 2);
    p.check(|s| s <= 1).unwrap();
    p.set_content(2, &[7]);
    p.lookup(2, 5);
    assert_eq!(p.hits, vec![0], "the earliest-registered holder");
    p.release(0);
    p.release(1);
    // Queue: block 2 (never used), block 0, block 1.
    p.set_content(3, &[]);
    p.allocate(3, 2);
    assert_eq!(p.evictions(), 1, "block 0 was evicted");
    assert_eq!(p.lookup(2, 5).blocks, 1);
    assert_eq!(p.hits, vec![1], "block 1 still serves hash 7");
    p.check(|s| s == 3).unwrap();
}

#[test]
fn hit_blocks_in_use_stay_out_of_the_free_count_and_free_ones_leave_it() {
    let mut p = pool(6);
    admit(&mut p, 0, &[1, 2], 9);
    p.register(0, 9);
    assert_eq!((p.used(), p.free()), (3, 3));
    // In use: a hit adds a reference and no block.
    p.set_content(1, &[1, 2]);
    let hit = p.lookup(1, 9);
    assert_eq!(hit, Lookup { blocks: 2, free_blocks: 0 });
    p.admit(1, 1);
    assert_eq!((p.used(), p.free()), (4, 2));
    p.release(0);
    p.release(1);
    assert_eq!((p.used(), p.free()), (0, 6));
    // Free: the hit blocks leave the queue when taken.
    p.set_content(2, &[1, 2]);
    assert_eq!(p.lookup(2, 9), Lookup { blocks: 2, free_blocks: 2 });
    p.admit(2, 1);
    assert_eq!((p.used(), p.free(), p.evictions()), (3, 3, 0));
    p.check(|s| s == 2).unwrap();
}

#[test]
fn a_huge_pool_materialises_only_the_blocks_it_uses() {
    let mut p = PrefixPool::new(u32::MAX - 1, 16);
    p.set_content(0, &[1]);
    p.lookup(0, 40);
    p.admit(0, 3);
    assert_eq!(p.blocks.len(), 3);
    assert_eq!(p.free(), u32::MAX - 4);
    p.check(|s| s == 0).unwrap();
}

// ---- the rules inside the engine ----

/// Records every event as a short string, in order.
#[derive(Default)]
struct Log(Vec<String>);

impl Observer for Log {
    fn scheduled(&mut self, id: RequestId, _at: SimTime, tokens: u32, computed: u32) {
        self.0.push(format!("sched {id} {tokens}@{computed}"));
    }
    fn preempted(&mut self, id: RequestId, _at: SimTime) {
        self.0.push(format!("preempt {id}"));
    }
    fn finished(&mut self, id: RequestId, _at: SimTime) {
        self.0.push(format!("finish {id}"));
    }
    fn rejected(&mut self, id: RequestId, _at: SimTime, reason: RejectReason) {
        self.0.push(format!("reject {id} {}", reason.as_str()));
    }
    fn prefix_lookup(&mut self, id: RequestId, _at: SimTime, queried: u32, hit: u32) {
        self.0.push(format!("lookup {id} {hit}/{queried}"));
    }
    fn kv_loaded(&mut self, id: RequestId, _at: SimTime, tier: u32, tokens: u32) {
        self.0.push(format!("load {id} {tokens} from {tier}"));
    }
}

impl Log {
    fn take(&mut self) -> Vec<String> {
        std::mem::take(&mut self.0)
    }
}

/// An engine with prefix caching, blocks of 4 tokens.
fn engine(num_blocks: u32, watermark_blocks: u32, budget: u32) -> Engine {
    Engine::new(EngineConfig {
        capacity: KvBudget {
            num_blocks,
            block_size: 4,
            kv_tokens: u64::from(num_blocks) * 4,
            watermark_blocks,
            weight_bytes: 13.48e9,
            usable_bytes: 0.0,
            block_bytes: 0,
            overridden: true,
            window_blocks: 0,
        },
        max_batch_tokens: budget,
        max_num_sequences: 8,
        context_length: 1000,
        cost: cost::tests::base_cost(),
        prefix_caching: true,
        policy: super::super::Policy::Vllm,
        speculative: None,
        scheduling_policy: Default::default(),
        offload: None,
        lora: None,
        sglang: Default::default(),
        trtllm: Default::default(),
    })
}

fn req(id: u64, prompt: u32, output: u32) -> Request {
    Request::new(id, SimTime::ZERO, prompt, output)
}

fn step(e: &mut Engine, log: &mut Log) -> Vec<String> {
    e.step(log).expect("a step");
    e.check_invariants().unwrap();
    log.take()
}

#[test]
fn a_request_hits_blocks_registered_earlier_in_the_same_step() {
    let mut e = engine(20, 0, 64);
    let mut log = Log::default();
    // Same first 2 blocks, then different content.
    e.submit_with_hashes(req(0, 10, 5), &[1, 2, 3], &mut log).unwrap();
    e.submit_with_hashes(req(1, 10, 5), &[1, 2, 4], &mut log).unwrap();
    // Request 0 is scheduled for its 10 tokens and registers blocks [0, 8)
    // at once; request 1, admitted next in the same step, finds them:
    // floor((10 - 1) / 4) = 2 blocks = 8 tokens, and computes the other 2.
    assert_eq!(step(&mut e, &mut log), ["lookup 0 0/10", "sched 0 10@0", "lookup 1 8/10", "sched 1 2@8"]);
    // 3 blocks each, 2 of them shared: 4 in use; only the 2 full ones cached.
    assert_eq!(e.kv_blocks_used(), 4);
    assert_eq!(e.kv_blocks_cached(), 2);
}

#[test]
fn a_preempted_request_re_hits_its_own_blocks() {
    // 5 blocks of 4. Two 8-token prompts take 2 blocks each; A needs a
    // third to decode and takes the last free one; B then needs a third
    // too, so B (the newest) is preempted: its 2 full blocks join the free
    // queue with their hashes. A finishes in that step. B comes back with
    // P + g = 9 known tokens: floor(8 / 4) = 2 blocks hit (its own), it
    // takes ceil(9 / 4) - 2 = 1 fresh block and computes 1 token.
    let mut e = engine(5, 0, 64);
    let mut log = Log::default();
    e.submit_with_hashes(req(0, 8, 2), &[1, 2, 3], &mut log).unwrap();
    e.submit_with_hashes(req(1, 8, 9), &[5, 6, 7, 8], &mut log).unwrap();
    assert_eq!(step(&mut e, &mut log), ["lookup 0 0/8", "sched 0 8@0", "lookup 1 0/8", "sched 1 8@0"]);
    assert_eq!(step(&mut e, &mut log), ["sched 0 1@8", "preempt 1", "finish 0"]);
    assert_eq!(step(&mut e, &mut log), ["lookup 1 8/9", "sched 1 1@8"]);
    assert_eq!(e.kv_blocks_used(), 3);
}

#[test]
fn admission_counts_free_hit_blocks_as_leaving_the_free_queue() {
    // 8 blocks of 4, watermark 2. Request 0 (8 tokens, 1 output) finishes
    // in its first step, leaving its 2 cached blocks in the free queue;
    // request 2 (11 tokens, decoding into its third block) holds 3.
    // Request 1 shares request 0's blocks and needs 16 tokens: 2 hits (both
    // free) + 2 new. free - free_hits - new = 5 - 2 - 2 = 1 < 2: it waits
    // (counting only the new blocks, 5 - 2 = 3 >= 2, would admit it).
    let mut e = engine(8, 2, 64);
    let mut log = Log::default();
    e.submit_with_hashes(req(0, 8, 1), &[1, 2], &mut log).unwrap();
    e.submit_with_hashes(req(2, 11, 50), &[7, 8, 9], &mut log).unwrap();
    assert_eq!(step(&mut e, &mut log), ["lookup 0 0/8", "sched 0 8@0", "lookup 2 0/11", "sched 2 11@0", "finish 0"]);
    e.submit_with_hashes(req(1, 16, 3), &[1, 2, 3, 4], &mut log).unwrap();
    assert_eq!(step(&mut e, &mut log), ["sched 2 1@11"], "request 1 waits, and a wait is not a lookup");
    assert_eq!((e.num_waiting(), e.kv_blocks_used()), (1, 3));
}

#[test]
fn admission_needs_no_free_block_for_hits_held_by_running_requests() {
    // 4 blocks of 4, watermark 0. Request 0 (8 tokens, long output) holds
    // 2 blocks and takes a third to decode token 9. Request 1 shares its
    // 2 full blocks and needs 12 tokens: 2 hits in use + 1 new block, and
    // free - free_hits - new = 1 - 0 - 1 = 0 >= 0. Without the hits it
    // would need 3 fresh blocks.
    let mut e = engine(4, 0, 64);
    let mut log = Log::default();
    e.submit_with_hashes(req(0, 8, 50), &[1, 2, 9], &mut log).unwrap();
    step(&mut e, &mut log);
    e.submit_with_hashes(req(1, 12, 3), &[1, 2, 3], &mut log).unwrap();
    let events = step(&mut e, &mut log);
    assert_eq!(events, ["sched 0 1@8", "lookup 1 8/12", "sched 1 4@8"]);
    assert_eq!(e.kv_blocks_used(), 4, "3 of request 0 + 1 new; the 2 shared count once");
}

#[test]
fn a_request_without_content_never_hits() {
    let mut e = engine(20, 0, 64);
    let mut log = Log::default();
    e.submit(req(0, 10, 2), &mut log).unwrap();
    e.submit(req(1, 10, 2), &mut log).unwrap();
    assert_eq!(step(&mut e, &mut log), ["lookup 0 0/10", "sched 0 10@0", "lookup 1 0/10", "sched 1 10@0"]);
    assert_eq!(e.kv_blocks_cached(), 0);
}

#[test]
fn own_blocks_are_cached_and_hit_only_by_their_own_request() {
    // Blocks of 4; content: one shared block (hash 1), then 2 blocks of
    // the request's own. 13 tokens need 4 blocks; 12 computed fill 3.
    let mut p = pool(10);
    p.set_content_own(0, &[1], 2);
    assert_eq!(p.lookup(0, 13), Lookup::default());
    p.admit(0, 4);
    assert_eq!(p.register(0, 12), u64::MAX, "1 + 2 blocks of content, all registered");
    assert_eq!(p.cached_blocks(), 3, "own blocks count as cached");
    p.release(0);
    p.check(|_| false).unwrap();
    // Another request with the same shared block and its own rest finds
    // only the shared block.
    p.set_content_own(1, &[1], 2);
    assert_eq!(p.lookup(1, 13), Lookup { blocks: 1, free_blocks: 1 });
    // The preempted request comes back: floor(12 / 4) = 3 blocks, all free.
    assert_eq!(p.lookup(0, 13), Lookup { blocks: 3, free_blocks: 3 });
    p.admit(0, 1);
    p.check(|s| s == 0).unwrap();
    assert_eq!((p.used(), p.free(), p.cached_blocks()), (4, 6, 3));
}

#[test]
fn own_blocks_of_a_request_that_left_are_orphans_until_evicted() {
    // 4 blocks of 4: one request of 13 tokens holds them all, its first 3
    // own and registered.
    let mut p = pool(4);
    p.set_content_own(0, &[], 3);
    p.lookup(0, 13);
    p.admit(0, 4);
    p.register(0, 13);
    p.release(0);
    p.forget(0);
    p.check(|_| false).unwrap();
    assert_eq!(p.cached_blocks(), 3, "still cached");
    // A new request in the same slot has other content: no hit.
    p.set_content_own(0, &[], 3);
    assert_eq!(p.lookup(0, 13), Lookup::default());
    // Taking every block evicts the 3 orphans (the unhashed tail first).
    p.allocate(0, 4);
    assert_eq!((p.evictions(), p.cached_blocks()), (3, 0));
    p.check(|s| s == 0).unwrap();
}

#[test]
fn a_request_leaving_unpreempted_frees_its_tail_then_its_own_blocks_then_its_shared_head() {
    // 8 blocks of 4. A request of 13 tokens: one shared block (hash 1),
    // 2 own blocks, and a fourth block that 12 computed tokens leave unregistered.
    let mut p = pool(8);
    p.set_content_own(0, &[1], 2);
    p.lookup(0, 13);
    p.admit(0, 4);
    p.register(0, 12);
    p.finish(0);
    p.check(|_| false).unwrap();
    assert_eq!((p.used(), p.free(), p.cached_blocks()), (0, 8, 3));
    // The queue: the 4 never-used blocks, then the unregistered block,
    // the 2 own blocks (orphans now), the shared block.
    p.set_content(1, &[]);
    let mut seen = vec![];
    for _ in 0..7 {
        p.allocate(1, 1);
        p.check(|s| s == 1).unwrap();
        p.set_content(2, &[1]);
        seen.push((p.evictions(), p.cached_blocks(), p.lookup(2, 13).blocks));
    }
    assert_eq!(
        seen,
        [(0, 3, 1), (0, 3, 1), (0, 3, 1), (0, 3, 1), (0, 3, 1), (1, 2, 1), (2, 1, 1)],
        "never-used, never-used x3, unregistered, orphan, orphan; the shared head last"
    );
    p.allocate(1, 1);
    assert_eq!((p.evictions(), p.cached_blocks(), p.lookup(2, 13).blocks), (3, 0, 0));
    p.check(|s| s == 1).unwrap();
}

#[test]
fn leaving_requests_free_their_unregistered_then_own_blocks_in_order() {
    // 8 blocks of 4, three requests leaving unpreempted, with no shared
    // content. A: 4 blocks, 2 own ones registered: unregistered 2, then
    // orphans 2. B: 2 blocks, nothing registered: unregistered 2. C: 2
    // blocks, 1 own registered: unregistered 1, then orphan 1.
    let mut p = pool(8);
    p.set_content_own(0, &[], 2);
    p.lookup(0, 16);
    p.admit(0, 4);
    p.register(0, 12);
    p.finish(0);
    p.set_content(1, &[]);
    p.lookup(1, 8);
    p.admit(1, 2);
    p.finish(1);
    p.set_content_own(2, &[], 1);
    p.lookup(2, 8);
    p.admit(2, 2);
    p.register(2, 4);
    p.finish(2);
    p.check(|_| false).unwrap();
    assert_eq!((p.used(), p.free(), p.cached_blocks(), p.evictions()), (0, 8, 3, 0));
    // The queue, block by block: A's U U O O, B's U U, C's U O. Only
    // taking an orphan evicts.
    p.set_content(3, &[]);
    let mut evictions = vec![];
    for _ in 0..8 {
        p.allocate(3, 1);
        p.check(|s| s == 3).unwrap();
        evictions.push(p.evictions());
    }
    assert_eq!(evictions, [0, 0, 1, 2, 2, 2, 2, 3]);
    assert_eq!(p.cached_blocks(), 0);
}

#[test]
fn a_request_leaving_after_a_preemption_frees_every_block_it_holds() {
    // 6 blocks of 4; a request of 9 tokens with 2 own blocks.
    let mut p = pool(6);
    p.set_content_own(0, &[], 2);
    p.lookup(0, 9);
    p.admit(0, 3); // blocks 0, 1, 2
    p.register(0, 8); // 0 and 1 hold its content
    p.release(0); // preempted: queue 2, 1, 0
    assert_eq!(p.lookup(0, 9), Lookup { blocks: 2, free_blocks: 2 }, "floor(8 / 4) own blocks");
    p.admit(0, 1); // blocks 0, 1 again, and block 3 (never used)
    p.finish(0); // queue: 2, then 3, 1, 0
    p.check(|_| false).unwrap();
    assert_eq!((p.used(), p.free(), p.cached_blocks()), (0, 6, 2));
    p.set_content(1, &[]);
    let mut evictions = vec![];
    for _ in 0..6 {
        p.allocate(1, 1);
        evictions.push(p.evictions());
    }
    assert_eq!(evictions, [0, 0, 0, 0, 1, 2], "blocks 4, 5, 2, 3 hold nothing; 1 and 0 are orphans");
    p.check(|s| s == 1).unwrap();
}

/// The invariant check, split into parts (`prefix/check.rs`), still finds
/// what each part looks at: a pool is broken in one place at a time and
/// the check must name it (the messages are the check's own words).
#[test]
fn the_invariant_check_finds_a_break_in_each_of_its_parts() {
    let healthy = || {
        let mut p = pool(10);
        admit(&mut p, 0, &[1, 2, 3], 13);
        p.register(0, 12);
        p
    };
    let broken = |f: &dyn Fn(&mut PrefixPool), live: &dyn Fn(u32) -> bool| {
        let mut p = healthy();
        f(&mut p);
        p.check(live).expect_err("a broken pool passed the check")
    };
    healthy().check(|s| s == 0).unwrap();
    // A slot: blocks held by a request that is not running (13 tokens in
    // 4 blocks: the 3 of its hashes in its table, the 4th without a label).
    let err = broken(&|_| {}, &|_| false);
    assert!(err.contains("slot 0 holds 3 blocks but is not running"), "{err}");
    // The references: one more than the tables hold.
    let err = broken(&|p| p.blocks[p.slots[0].table[0] as usize].refs += 1, &|s| s == 0);
    assert!(err.contains("counts 2 references but 1 tables hold it"), "{err}");
    // The counts: a block listed free that the pool does not count.
    let err = broken(&|p| p.listed += 1, &|s| s == 0);
    assert!(err.contains("blocks listed free"), "{err}");
    // The hash lists: a hash whose block holds another.
    let err = broken(&|p| p.blocks[p.slots[0].table[1] as usize].hash = 99, &|s| s == 0);
    assert!(err.contains("does not hold"), "{err}");
    // The cached count.
    let err = broken(&|p| p.cached += 1, &|s| s == 0);
    assert!(err.contains("blocks hold a hash, 3 are listed, 4 counted"), "{err}");
}

/// [`engine`] with a host-memory tier of `blocks` blocks, 2 ms a block.
fn offloading(num_blocks: u32, blocks: u64) -> Engine {
    let mut cfg = engine(num_blocks, 0, 64).cfg;
    cfg.offload =
        Some(crate::engine::offload::Offload { tiers: vec![crate::engine::offload::Tier { blocks, block_s: 0.002 }] });
    Engine::new(cfg)
}

/// Request 0 computes an 8-token prompt (content 1, 2), then request 1's
/// 16 tokens (content 10 to 13) take every one of 4 GPU blocks.
fn write_then_evict(e: &mut Engine, log: &mut Log) {
    e.submit_with_hashes(req(0, 8, 1), &[1, 2], log).unwrap();
    step(e, log);
    e.submit_with_hashes(req(1, 16, 1), &[10, 11, 12, 13], log).unwrap();
    step(e, log);
}

#[test]
fn blocks_evicted_from_the_gpu_are_loaded_from_the_tier_and_the_step_waits_for_them() {
    // 4 GPU blocks of 4 tokens. Request 0's 8-token prompt fills 2 blocks
    // (content 1, 2), written through to the tier; request 1's 16 tokens
    // take all 4 blocks, evicting them from the GPU. Request 2 resends
    // request 0's prompt and one token more: no GPU hit, both blocks
    // loaded from the tier (8 tokens), 1 token computed.
    let run = |mut e: Engine| {
        let mut log = Log::default();
        write_then_evict(&mut e, &mut log);
        e.submit_with_hashes(req(2, 9, 1), &[1, 2], &mut log).unwrap();
        let before = e.clock();
        let s = e.step(&mut log).expect("a step");
        e.check_invariants().unwrap();
        (s.end.nanos_since(before), log.take())
    };
    let (loading, events) = run(offloading(4, 100));
    assert_eq!(events, ["lookup 2 0/9", "load 2 8 from 0", "sched 2 1@8", "finish 2"]);
    // The same step shape with the blocks still on the GPU (8 blocks: no
    // eviction) is a hit of 8 and the same 1 token: 2 x 2 ms less.
    let (hitting, events) = run(offloading(8, 100));
    assert_eq!(events, ["lookup 2 8/9", "sched 2 1@8", "finish 2"]);
    assert_eq!(loading - hitting, 4_000_000, "two blocks at 2 ms each");
    // Without a tier the prompt is computed again.
    let (_, events) = run(engine(4, 0, 64));
    assert_eq!(events, ["lookup 2 0/9", "sched 2 9@0", "finish 2"]);
}

#[test]
fn a_tier_too_small_keeps_only_the_latest_blocks_and_a_load_stops_at_the_first_miss() {
    // A tier of 4 blocks: after request 1 (content 10-13) it holds only
    // those, so request 2's blocks 1 and 2 are computed again.
    let mut e = offloading(4, 4);
    let mut log = Log::default();
    write_then_evict(&mut e, &mut log);
    e.submit_with_hashes(req(2, 9, 1), &[1, 2], &mut log).unwrap();
    assert_eq!(step(&mut e, &mut log), ["lookup 2 0/9", "sched 2 9@0", "finish 2"]);
    // Request 2's three blocks took the GPU's oldest free ones (holding
    // 13, 12 and 11), and its content 1, 2 pushed 10 and 11 out of the
    // tier, which holds 12, 13, 1, 2. Request 3 (content 12, 13, then 7)
    // misses on the GPU and loads 12 and 13; 7 is nowhere.
    e.submit_with_hashes(req(3, 13, 1), &[12, 13, 7], &mut log).unwrap();
    let events = step(&mut e, &mut log);
    assert_eq!(events[..2], ["lookup 3 0/13".to_string(), "load 3 8 from 0".to_string()], "{events:?}");
}
