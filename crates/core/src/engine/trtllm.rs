//! TensorRT-LLM's scheduler (`engine: trtllm`, docs/engine.md "The
//! engine's scheduler: engine: trtllm"), as its PyTorch backend runs it:
//! a capacity scheduler that decides which requests may hold KV, then a
//! micro-batch scheduler that fits them to `max_num_tokens`. Read in
//! `tensorrt_llm/_torch/pyexecutor/scheduler/` (`PyCapacityScheduler`,
//! `GuaranteedNoEvictPolicy`, `MaxUtilizationPolicy`,
//! `NoEvictScheduledBlocksManager`, `MaxUtilizationScheduledBlocksManager`,
//! `PyMicroBatchScheduler.schedule`, `_chunk_fcfs`,
//! `_chunk_equal_progress`; the C++ `capacityScheduler.cpp` and
//! `microBatchScheduler.cpp` they mirror); no code taken.
//!
//! - **Capacity policies** ([`CapacityPolicy`]): `GUARANTEED_NO_EVICT`
//!   admits a request only while the blocks every admitted request needs
//!   to complete fit; `MAX_UTILIZATION` admits what fits the next step
//!   and, when a running request's growth does not fit, pauses the most
//!   recently started request (its KV freed, recomputed later, as vLLM's
//!   preemption); `STATIC_BATCH` is the first admitting only while no
//!   request is generating.
//! - **Whole prompts or chunks** ([`ChunkingPolicy`]): without chunked
//!   prefill a prompt runs whole in one step or waits; with it, decodes
//!   take their tokens first and the prompts share what the budget
//!   leaves, in units of a KV block, first come first served or equal
//!   progress.

use super::{Engine, Kv, Observer};
use crate::time::SimTime;

/// TensorRT-LLM's `CapacitySchedulerPolicy`
/// (`scheduler_config.capacity_scheduler_policy`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum CapacityPolicy {
    /// `GUARANTEED_NO_EVICT`, the default: admitted while every admitted
    /// request's blocks to completion fit; nothing is ever paused.
    #[default]
    GuaranteedNoEvict,
    /// `MAX_UTILIZATION`: admitted while the next step's blocks fit; a
    /// running request whose growth does not fit pauses the most recently
    /// started one.
    MaxUtilization,
    /// `STATIC_BATCH`: `GUARANTEED_NO_EVICT` that admits only while no
    /// request is generating, so a batch runs to its end before the next.
    StaticBatch,
}

/// TensorRT-LLM's `ContextChunkingPolicy`
/// (`scheduler_config.context_chunking_policy`, with
/// `enable_chunked_prefill`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ChunkingPolicy {
    /// `FIRST_COME_FIRST_SERVED`: each prompt in order takes what it still
    /// needs of the tokens left, cut down to whole units when it does not
    /// get all of it.
    FirstComeFirstServed,
    /// `EQUAL_PROGRESS`: the prompts take one unit each in turn until the
    /// tokens run out.
    EqualProgress,
}

/// The scheduler's settings under [`super::Policy::Trtllm`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Trtllm {
    pub capacity: CapacityPolicy,
    /// `None`: chunked prefill off (the PyTorch backend's default).
    pub chunking: Option<ChunkingPolicy>,
}

impl Trtllm {
    /// Whether admission holds back every admitted request's blocks to
    /// completion (and so nothing is ever paused).
    pub fn reserves_completion(&self) -> bool {
        self.capacity != CapacityPolicy::MaxUtilization
    }
}

/// The prompt chunk of each context request, `remaining[i]` tokens still
/// to compute, out of `capacity` tokens, in units of `unit` tokens (a KV
/// block): `_chunk_fcfs` and `_chunk_equal_progress`. The result goes
/// into `out`, one chunk per request, each at most its remaining tokens,
/// their sum at most `capacity`.
pub fn chunk_sizes(policy: ChunkingPolicy, remaining: &[u32], capacity: u32, unit: u32, out: &mut Vec<u32>) {
    out.clear();
    let unit = unit.max(1);
    match policy {
        ChunkingPolicy::FirstComeFirstServed => {
            let mut left = capacity;
            for &r in remaining {
                let take = first_come(r, left, unit);
                left -= take;
                out.push(take);
            }
        }
        ChunkingPolicy::EqualProgress => {
            out.resize(remaining.len(), 0);
            // Every round in which each unfinished request's next unit
            // still fits is the same whole: find the last such round by
            // bisection, then play the rounds after it one request at a
            // time, as TensorRT-LLM plays them all.
            let after = |rounds: u64| -> u64 {
                remaining.iter().map(|&r| u64::from(r).min(rounds * u64::from(unit))).sum::<u64>()
            };
            let most = remaining.iter().map(|&r| r.div_ceil(unit)).max().unwrap_or(0);
            let (mut lo, mut hi) = (0u64, u64::from(most));
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if after(mid) <= u64::from(capacity) { lo = mid } else { hi = mid - 1 }
            }
            let mut used = 0u32;
            for (c, &r) in out.iter_mut().zip(remaining) {
                *c = u64::from(r).min(lo * u64::from(unit)) as u32;
                used += *c;
            }
            loop {
                let mut moved = 0;
                for (c, &r) in out.iter_mut().zip(remaining) {
                    let inc = r.min(c.saturating_add(unit)) - *c;
                    if inc == 0 || used + inc > capacity {
                        continue;
                    }
                    *c += inc;
                    used += inc;
                    moved += inc;
                }
                if moved == 0 || used >= capacity {
                    break;
                }
            }
        }
    }
}

/// `_chunk_fcfs` for one request: what it still needs of the `left`
/// tokens, cut down to whole units when it does not get all of it.
fn first_come(remaining: u32, left: u32, unit: u32) -> u32 {
    let take = remaining.min(left);
    if take < remaining { take / unit * unit } else { take }
}

/// The tokens the first round of [`chunk_sizes`] gives a request (its
/// chunk is more than 0 exactly when this is), taking them from `left`.
fn first_round(policy: ChunkingPolicy, remaining: u32, left: &mut u32, unit: u32) -> u32 {
    let take = match policy {
        ChunkingPolicy::FirstComeFirstServed => first_come(remaining, *left, unit),
        ChunkingPolicy::EqualProgress => match remaining.min(unit) {
            inc if inc <= *left => inc,
            _ => 0,
        },
    };
    *left -= take;
    take
}

impl Engine {
    /// Steps 2 and 3 under [`super::Policy::Trtllm`]; returns the requests
    /// paused (preempted).
    pub(super) fn schedule_trtllm<O: Observer>(&mut self, at: SimTime, budget: &mut u32, obs: &mut O) -> u32 {
        let t = self.cfg.trtllm;
        // Started requests, oldest first (a prompt's later chunks wait for
        // the chunking pass when chunked prefill is on).
        let paused = self.schedule_running(at, budget, obs, t.chunking.is_some());
        // A pause ends TensorRT-LLM's pass at the paused request: nothing
        // newer is admitted. A static batch admits only when none of its
        // requests is generating.
        let generating = || self.running.iter().any(|&s| self.slots[s as usize].remaining() <= 1);
        let admit = paused == 0 && !(t.capacity == CapacityPolicy::StaticBatch && generating());
        match t.chunking {
            None if admit => self.admit_trtllm(at, budget, obs),
            None => {}
            Some(policy) => self.chunk_trtllm(policy, admit, at, budget, obs),
        }
        paused
    }

    /// Blocks every running request still needs to complete (0 under
    /// `MAX_UTILIZATION`, which holds nothing back).
    fn completion_owed(&self) -> i64 {
        if !self.cfg.trtllm.reserves_completion() {
            return 0;
        }
        self.running
            .iter()
            .map(|&r| {
                let seq = &self.slots[r as usize];
                self.completion_blocks(seq) as i64 - i64::from(seq.blocks)
            })
            .sum()
    }

    /// Step 3 without chunked prefill (`GuaranteedNoEvictPolicy` or
    /// `MaxUtilizationPolicy`, then `PyMicroBatchScheduler`): from the
    /// head of `waiting`, no skipping, admit a request while (a) the
    /// blocks it needs fit in the free blocks, with no watermark: to
    /// complete (its `P + N - 1` tokens' KV, less a prefix hit) beside
    /// those every running request still needs to complete, or under
    /// `MAX_UTILIZATION` its known tokens' for the next step, and (b) its
    /// whole prompt fits the step's budget (a prompt longer than the whole
    /// budget runs in chunks of it, where TensorRT-LLM refuses it). A
    /// request whose completion needs more blocks than the cache has is
    /// rejected.
    fn admit_trtllm<O: Observer>(&mut self, at: SimTime, budget: &mut u32, obs: &mut O) {
        let mut reserved = self.completion_owed();
        while let Some(&slot) = self.waiting.front() {
            let Some(mut fit) = self.trt_fit(0, reserved, at, obs) else { continue };
            let seq = &self.slots[slot as usize];
            let full = self.running.len() >= self.cfg.max_num_sequences as usize;
            let whole = seq.remaining() <= *budget || *budget == self.cfg.max_batch_tokens;
            if *budget == 0 || full || !whole {
                break;
            }
            let Some(computed) = self.trt_check(slot, &mut fit) else { break };
            self.trt_commit(slot, &fit, computed, at, obs);
            reserved += fit.want - fit.need;
            self.admit_at(0, fit.need as u32, computed, at, budget, obs);
        }
    }

    /// Step 3 with chunked prefill: the decodes have their tokens; the
    /// started prompts (running requests with more than one token to
    /// compute), then the waiting requests the capacity policy admits
    /// (as [`Engine::admit_trtllm`], up to `max_num_sequences`, without
    /// the whole-prompt rule), share what the budget leaves by `policy`
    /// in units of a KV block. A waiting request whose chunk would be 0
    /// stays waiting (its blocks held back for the rest of the pass, as
    /// the capacity scheduler counted them); one after it may still get a
    /// chunk.
    fn chunk_trtllm<O: Observer>(
        &mut self,
        policy: ChunkingPolicy,
        admit: bool,
        at: SimTime,
        budget: &mut u32,
        obs: &mut O,
    ) {
        let unit = self.cfg.capacity.block_size;
        let mut ctx: Vec<(u32, u32)> = Vec::new();
        let mut left = *budget;
        for &slot in &self.running {
            let r = self.slots[slot as usize].remaining();
            if r > 1 {
                first_round(policy, r, &mut left, unit);
                ctx.push((slot, r));
            }
        }
        let mut reserved = self.completion_owed();
        let mut skipped = 0usize;
        let mut k = 0;
        while admit && let Some(&slot) = self.waiting.get(k) {
            let Some(mut fit) = self.trt_fit(k, reserved, at, obs) else { continue };
            if self.running.len() + skipped >= self.cfg.max_num_sequences as usize {
                break;
            }
            let Some(computed) = self.trt_check(slot, &mut fit) else { break };
            let r = self.slots[slot as usize].known() - computed;
            if first_round(policy, r, &mut left, unit) == 0 {
                // It keeps its place, and its blocks stay counted.
                reserved += fit.want - fit.hit;
                skipped += 1;
                k += 1;
                continue;
            }
            self.trt_commit(slot, &fit, computed, at, obs);
            reserved += fit.want - fit.need;
            self.join_running(k, fit.need as u32, computed);
            ctx.push((slot, r));
        }
        let remaining: Vec<u32> = ctx.iter().map(|&(_, r)| r).collect();
        let mut chunks = Vec::with_capacity(ctx.len());
        chunk_sizes(policy, &remaining, *budget, unit, &mut chunks);
        for (&(slot, _), &c) in ctx.iter().zip(&chunks) {
            if c > 0 {
                self.add_to_batch(slot, c, at, obs);
                *budget -= c;
            }
        }
    }

    /// What `waiting[k]` needs beside `reserved` blocks held back: `None`
    /// when it was rejected instead (it can never complete; the caller
    /// looks at the same `k` again).
    fn trt_fit<O: Observer>(&mut self, k: usize, reserved: i64, at: SimTime, obs: &mut O) -> Option<Fit> {
        let seq = &self.slots[self.waiting[k] as usize];
        let need = self.cfg.capacity.blocks_for(u64::from(seq.known())) as i64;
        let completion = self.completion_blocks(seq) as i64;
        if completion > i64::from(self.cfg.capacity.num_blocks) {
            self.reject_at(k, need as u64, at, obs);
            return None;
        }
        let want = if self.cfg.trtllm.reserves_completion() { completion } else { need };
        Some(Fit { need, want, reserved, hit: 0 })
    }

    /// Whether the blocks `slot` wants fit (with prefix caching, after
    /// its lookup, which [`Engine::trt_commit`] then takes): the tokens it
    /// has computed when admitted, or `None`.
    fn trt_check(&mut self, slot: u32, fit: &mut Fit) -> Option<u32> {
        let seq = &self.slots[slot as usize];
        let arriving = seq.arriving_kv;
        let (free, computed) = match &mut self.kv {
            Kv::Count(k) => (i64::from(k.free()), arriving),
            Kv::Prefix(p) => {
                // KV that arrives by transfer looks nothing up.
                let hit = p.lookup(slot, if arriving > 0 { 0 } else { seq.known() });
                fit.hit = i64::from(hit.blocks);
                let free = i64::from(p.free()) - i64::from(hit.free_blocks);
                (free, if arriving > 0 { arriving } else { hit.blocks * self.cfg.capacity.block_size })
            }
        };
        (free - fit.reserved >= fit.want - fit.hit).then_some(computed)
    }

    /// `slot` takes the blocks [`Engine::trt_check`] found room for.
    fn trt_commit<O: Observer>(&mut self, slot: u32, fit: &Fit, computed: u32, at: SimTime, obs: &mut O) {
        let seq = &self.slots[slot as usize];
        match &mut self.kv {
            Kv::Count(k) => k.take(fit.need as u32),
            Kv::Prefix(p) => {
                p.admit(slot, (fit.need - fit.hit) as u32);
                if seq.arriving_kv == 0 {
                    obs.prefix_lookup(seq.req.id, at, seq.known(), computed);
                }
            }
        }
    }
}

/// What a waiting request needs, in blocks: its known tokens' (`need`,
/// what it holds once admitted) and what the capacity policy wants free
/// for it (`want`: to complete, or `need` under `MAX_UTILIZATION`),
/// beside `reserved` held back for others; `hit` is its prefix hit once
/// looked up.
#[derive(Copy, Clone, Debug)]
struct Fit {
    need: i64,
    want: i64,
    reserved: i64,
    hit: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TensorRT-LLM's `_chunk_equal_progress` loop as written there, one
    /// unit at a time, to check the bisection against.
    fn equal_progress_by_rounds(remaining: &[u32], capacity: u32, unit: u32) -> Vec<u32> {
        let mut c = vec![0u32; remaining.len()];
        let (mut used, mut moved) = (0u32, 1u32);
        while used < capacity && moved > 0 {
            moved = 0;
            for (ci, &r) in c.iter_mut().zip(remaining) {
                let inc = (*ci + unit).min(r) - *ci;
                if used + inc > capacity {
                    continue;
                }
                *ci += inc;
                used += inc;
                moved += inc;
            }
        }
        c
    }

    #[test]
    fn first_come_first_served_cuts_the_last_prompt_to_whole_units() {
        let mut out = Vec::new();
        // 300 + 500 of 1,000: the third, 700 to go, gets 200 of them.
        chunk_sizes(ChunkingPolicy::FirstComeFirstServed, &[300, 500, 700], 1_000, 16, &mut out);
        assert_eq!(out, [300, 500, 192]);
        // 10 left is less than a unit: the long one gets nothing, the
        // 5-token one after it all it needs.
        chunk_sizes(ChunkingPolicy::FirstComeFirstServed, &[990, 100, 5], 1_000, 16, &mut out);
        assert_eq!(out, [990, 0, 5]);
    }

    #[test]
    fn equal_progress_gives_each_prompt_a_unit_in_turn() {
        let mut out = Vec::new();
        // 100 tokens, units of 16, three long prompts: two rounds take
        // 48 each (96); a third unit would make 112, so the 4 left go
        // nowhere.
        chunk_sizes(ChunkingPolicy::EqualProgress, &[1_000, 1_000, 1_000], 100, 16, &mut out);
        assert_eq!(out, [32, 32, 32]);
        // A short prompt is done in the first round (10 + 16 + 16 = 42),
        // the second round gives 16 + 16 (74), the third 16 to the second
        // prompt (90) and none to the third (106 > 100).
        chunk_sizes(ChunkingPolicy::EqualProgress, &[10, 1_000, 1_000], 100, 16, &mut out);
        assert_eq!(out, [10, 48, 32]);
        // Everything fits: everyone whole.
        chunk_sizes(ChunkingPolicy::EqualProgress, &[10, 20, 30], 100, 16, &mut out);
        assert_eq!(out, [10, 20, 30]);
    }

    #[test]
    fn equal_progress_matches_its_loop_on_random_inputs() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut out = Vec::new();
        for _ in 0..2_000 {
            let n = rng.random_range(0..8);
            let remaining: Vec<u32> = (0..n).map(|_| rng.random_range(1..3_000)).collect();
            let capacity = rng.random_range(0..10_000);
            let unit = [1, 3, 16, 64][rng.random_range(0..4)];
            chunk_sizes(ChunkingPolicy::EqualProgress, &remaining, capacity, unit, &mut out);
            assert_eq!(out, equal_progress_by_rounds(&remaining, capacity, unit), "{remaining:?} {capacity} {unit}");
            // The first round decides who gets anything.
            let mut left = capacity;
            for (i, &r) in remaining.iter().enumerate() {
                assert_eq!(first_round(ChunkingPolicy::EqualProgress, r, &mut left, unit) > 0, out[i] > 0);
            }
        }
    }
}
