//! SGLang's scheduler (`engine: sglang`, docs/engine.md "The engine's
//! scheduler"), as SGLang 0.5.23 runs it by default
//! (`managers/scheduler.py` `Scheduler.get_next_batch_to_run` and
//! `_get_new_batch_prefill_raw`, `managers/schedule_policy.py`
//! `PrefillAdder`, `managers/schedule_batch.py` `retract_decode`,
//! `NewTokenRatioTracker`); no code taken.
//!
//! - **Prefill first, never mixed.** A step is a prefill (extend) step
//!   whenever one can be formed, holding only prompts (whole, and at most
//!   one chunk, continued first in the next steps); the running requests
//!   decode only in a step with no prefill, all of them, one token each.
//! - **Admission reserves ahead.** From the head of `waiting`, no skipping,
//!   a request is admitted while its uncached tokens, its remaining output
//!   (at most 4,096) and one more token fit strictly in the free tokens
//!   less every running request's remaining output (at most 4,096 each,
//!   times `new_token_ratio`, or whole when the client sends `ignore_eos`),
//!   within the step's chunk budget (`max_batch_tokens`, SGLang's
//!   `chunked_prefill_size`) and `max_prefill_tokens` (16,384). A request
//!   that does not fit stops the pass and latches `batch_is_full`: no
//!   prefill is tried again until a running request leaves.
//! - **Retraction.** When a decode step lacks a block for every request,
//!   requests are retracted, fewest generated tokens first (then the
//!   longest prompt), until it fits, never the last: their KV is freed,
//!   their tokens kept, and they join the back of `waiting`.
//!   `new_token_ratio` is then set from the requests kept, and otherwise
//!   decays by `(init - min) / 600` a decode step down to `0.14 x init`.

use super::{Engine, Kv, Observer, State};
use crate::time::SimTime;

/// SGLang's `max_prefill_tokens` default.
pub const MAX_PREFILL_TOKENS: u32 = 16_384;
/// `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`: the most future tokens one
/// request reserves.
pub const CLIP_MAX_NEW_TOKENS: u32 = 4_096;
/// `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`.
pub const MIN_RATIO_FACTOR: f64 = 0.14;
/// `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`.
pub const DECAY_STEPS: f64 = 600.0;
/// `SGLANG_RETRACT_DECODE_STEPS`: tokens a kept request is assumed to
/// still generate when the ratio is set after a retraction.
pub const RETRACT_DECODE_STEPS: f64 = 20.0;

/// The scheduler's settings under [`super::Policy::Sglang`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct SglangOptions {
    /// `new_token_ratio`'s start (0.7 x `schedule_conservativeness`), or
    /// `None`: running requests reserve their remaining output whole
    /// (SGLang's `ignore_eos` path, taken with its radix cache disabled).
    pub ratio: Option<f64>,
    /// `--enable-mixed-chunk`: a prefill step also decodes every running
    /// request, and its prompt tokens leave room for them.
    pub mixed_chunk: bool,
    /// `--max-prefill-tokens`: a prefill step's prompt tokens.
    pub max_prefill_tokens: u32,
}

impl Default for SglangOptions {
    fn default() -> Self {
        SglangOptions { ratio: None, mixed_chunk: false, max_prefill_tokens: MAX_PREFILL_TOKENS }
    }
}

/// The scheduler's state between steps.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sglang {
    /// The request whose prompt is being prefilled in chunks.
    pub chunked: Option<u32>,
    /// `new_token_ratio` (used only without `ignore_eos`).
    pub ratio: f64,
    /// `batch_is_full`: no prefill until a running request leaves.
    pub full: bool,
}

impl SglangOptions {
    /// `new_token_ratio`'s start: `SGLANG_INIT_NEW_TOKEN_RATIO` (0.7) x
    /// `schedule_conservativeness`, at most 1; `None`: outputs reserved whole.
    pub(super) fn ratio_init(&self) -> Option<f64> {
        self.ratio.map(|r| r.min(1.0))
    }
}

impl Engine {
    fn ratio_init(&self) -> Option<f64> {
        self.cfg.sglang.ratio_init()
    }

    /// The step under SGLang's rules: a prefill step if one can be formed,
    /// else a decode step of every running request. Returns how many were
    /// retracted.
    pub(super) fn schedule_sglang<O: Observer>(&mut self, at: SimTime, budget: &mut u32, obs: &mut O) -> u32 {
        if self.sglang_prefill(at, budget, obs) {
            return 0;
        }
        self.sglang_decode(at, obs)
    }

    /// Future tokens a request reserves: its remaining output, at most
    /// [`CLIP_MAX_NEW_TOKENS`].
    fn reserve(&self, slot: u32) -> u32 {
        let seq = &self.slots[slot as usize];
        (seq.req.output - seq.generated).min(CLIP_MAX_NEW_TOKENS)
    }

    /// Before a step's arrivals join: an engine with nothing running or
    /// waiting went idle when its last request ended, and SGLang's
    /// `on_idle` then resets the ratio to its start.
    pub(super) fn sglang_idle(&mut self) {
        if self.running.is_empty() && self.waiting.is_empty() {
            self.sg.ratio = self.ratio_init().unwrap_or(1.0);
        }
    }

    /// Tries to form a prefill step; true if it holds any tokens. With
    /// mixed chunks the running requests (but the one being chunked)
    /// decode in it too, and their tokens come out of both the chunk and
    /// `max_prefill_tokens` first (SGLang's `mixed_with_decode_tokens`).
    fn sglang_prefill<O: Observer>(&mut self, at: SimTime, budget: &mut u32, obs: &mut O) -> bool {
        if self.sg.chunked.is_none() && (self.sg.full || self.waiting.is_empty()) {
            return false;
        }
        let opts = self.cfg.sglang;
        let (running, chunked) = (self.running.len(), self.sg.chunked);
        let decoding = match opts.mixed_chunk {
            true => u32::try_from(running - usize::from(chunked.is_some())).unwrap_or(u32::MAX),
            false => 0,
        };
        if decoding >= *budget || decoding >= opts.max_prefill_tokens {
            return false;
        }
        // The chunk the prompts may take; the decode tokens are taken
        // from the step's budget below, once they are known to run.
        let mut prompts = *budget - decoding;
        let formed = self.sglang_extend(at, &mut prompts, opts.max_prefill_tokens - decoding, obs);
        *budget = prompts + decoding;
        if formed && decoding > 0 {
            // The requests running before this step's admissions, in order.
            *budget -= self.decode_running(running, chunked, at, obs);
        }
        formed
    }

    /// The prefill (extend) part of a step: the chunked request's next
    /// chunk, then prompts from the head of `waiting`, within `budget`
    /// (the chunk) and `input` prompt tokens; true if it holds any.
    fn sglang_extend<O: Observer>(&mut self, at: SimTime, budget: &mut u32, input: u32, obs: &mut O) -> bool {
        let bs = self.cfg.capacity.block_size;
        let ratio = self.ratio_init().map(|_| self.sg.ratio);
        // Free tokens (a prefix cache's free blocks hold evictable
        // content: they count), less the running requests' reservations.
        let held: f64 = (self.running.iter())
            .filter(|&&s| Some(s) != self.sg.chunked)
            .map(|&s| f64::from(self.reserve(s)) * ratio.unwrap_or(1.0))
            .sum();
        let mut tot = f64::from(self.kv.free()) * f64::from(bs) - held;
        let mut input = input;
        let mut any = false;
        if let Some(slot) = self.sg.chunked {
            // The chunked request goes first, always progressing.
            let seq = &self.slots[slot as usize];
            let left = seq.remaining();
            let room = if tot > 0.0 { (tot as u32).max(1) } else { *budget };
            let mut c = left.min(*budget).min(room);
            // Within the blocks there are.
            while c > 0 && self.extra_blocks(seq, c) > self.kv.free() {
                c = c.saturating_sub(bs.max(1)).min(c - 1);
            }
            if c > 0 {
                let need = self.extra_blocks(seq, c);
                let last = c == left;
                self.grow(slot, need);
                self.add_to_batch(slot, c, at, obs);
                *budget -= c;
                input = input.saturating_sub(c);
                tot -= f64::from(c) + 1.0 + if last { f64::from(self.reserve(slot)) } else { 0.0 };
                any = true;
                if last {
                    self.sg.chunked = None;
                }
            }
            if self.sg.chunked.is_some() {
                return any;
            }
        }
        let total_tokens = u64::from(self.cfg.capacity.num_blocks) * u64::from(bs);
        while let Some(&slot) = self.waiting.front() {
            if *budget == 0 || input == 0 {
                break;
            }
            if self.running.len() >= self.cfg.max_num_sequences as usize {
                self.sg.full = true;
                break;
            }
            let seq = &self.slots[slot as usize];
            let known = seq.known();
            let m = self.reserve(slot);
            // What it must fit even in an empty cache: rejected if it
            // cannot (SGLang refuses a request longer than its pool).
            if u64::from(known) + u64::from(m) + 1 >= total_tokens {
                let need = self.cfg.capacity.blocks_for(u64::from(known));
                self.reject_at(0, need, at, obs);
                continue;
            }
            // The prefix hit, looked up (and kept) as an admission would,
            // and the hit blocks that leave the free queue.
            let (hit_blocks, hit_free) = match &mut self.kv {
                Kv::Count(_) => (0, 0),
                Kv::Prefix(p) => {
                    let hit = p.lookup(slot, known);
                    (hit.blocks, hit.free_blocks)
                }
            };
            let computed = hit_blocks * bs;
            let extend = known - computed;
            if f64::from(extend) + f64::from(m) + 1.0 >= tot {
                self.sg.full = any || !self.running.is_empty();
                break;
            }
            // A whole prompt, or its first chunk if it is longer than the
            // chunk budget left.
            let tokens = extend.min(*budget);
            let blocks = self.cfg.capacity.blocks_for(u64::from(computed + tokens)) as u32;
            let new = blocks - hit_blocks;
            if new > self.kv.free().saturating_sub(hit_free) {
                self.sg.full = any || !self.running.is_empty();
                break;
            }
            match &mut self.kv {
                Kv::Count(k) => k.take(new),
                Kv::Prefix(p) => {
                    p.admit(slot, new);
                    obs.prefix_lookup(self.slots[slot as usize].req.id, at, known, computed);
                }
            }
            self.admit_at(0, blocks, computed, at, budget, obs);
            any = true;
            input = input.saturating_sub(tokens);
            if tokens < extend {
                // Its chunk takes the budget left: the pass ends.
                self.sg.chunked = Some(slot);
                break;
            }
            tot -= f64::from(extend) + 1.0 + f64::from(m);
            if tot <= 0.0 {
                self.sg.full = true;
                break;
            }
        }
        any
    }

    /// `new_token_ratio` after a decode step that retracted nothing: down
    /// by `(init - min) / 600`, not below `min`.
    fn decayed_ratio(&self, init: f64) -> f64 {
        let min = init * MIN_RATIO_FACTOR;
        (self.sg.ratio - (init - min) / DECAY_STEPS).max(min)
    }

    /// What a decode stretch of `steps` steps leaves of SGLang's state, as
    /// [`Engine::sglang_decode`] and `Engine::finish_step` leave it one
    /// step at a time: the ratio decayed once a step (a stretch retracts
    /// nothing), and the latch open if a request `left`.
    pub(super) fn sglang_stretched(&mut self, steps: u64, left: bool) {
        if left {
            self.sg.full = false;
        }
        let Some(init) = self.ratio_init().filter(|_| self.cfg.policy == super::Policy::Sglang) else { return };
        for _ in 0..steps {
            let next = self.decayed_ratio(init);
            if next == self.sg.ratio {
                break; // at its floor
            }
            self.sg.ratio = next;
        }
    }

    /// A decode step: every running request one token, after retracting
    /// requests (fewest generated first, then the longest prompt; never
    /// the last) until each has the block it needs. Returns how many were
    /// retracted.
    fn sglang_decode<O: Observer>(&mut self, at: SimTime, obs: &mut O) -> u32 {
        let mut retracted = 0;
        loop {
            let need: u64 =
                (self.running.iter()).map(|&s| u64::from(self.extra_blocks(&self.slots[s as usize], 1))).sum();
            if need <= u64::from(self.kv.free()) || self.running.len() <= 1 {
                break;
            }
            let key = |s: u32| {
                let seq = &self.slots[s as usize];
                (seq.generated, std::cmp::Reverse(seq.req.prompt), std::cmp::Reverse(seq.req.id))
            };
            let Some(i) = (0..self.running.len()).min_by_key(|&i| key(self.running[i])) else { break };
            let victim = self.running.remove(i);
            if self.sg.chunked == Some(victim) {
                self.sg.chunked = None;
            }
            self.preempt(victim, at, obs);
            // SGLang appends a retracted request to the back of the queue.
            if self.waiting.front() == Some(&victim) {
                self.waiting.pop_front();
                self.waiting.push_back(victim);
            }
            retracted += 1;
        }
        if let Some(init) = self.ratio_init() {
            if retracted > 0 {
                let (out, max_new) = (self.running.iter()).fold((0.0, 0.0), |(o, n), &s| {
                    let seq = &self.slots[s as usize];
                    (o + f64::from(seq.generated), n + f64::from(seq.req.output))
                });
                let n = self.running.len() as f64;
                self.sg.ratio = ((out + RETRACT_DECODE_STEPS * n) / (max_new + 1.0)).min(1.0);
            } else {
                self.sg.ratio = self.decayed_ratio(init);
            }
        }
        if retracted > 0 {
            self.sg.full = false;
        }
        self.decode_running(self.running.len(), None, at, obs);
        retracted
    }

    /// One token for each of the first `upto` running requests (but
    /// `skip`) whose prompt is computed (the chunked one waits for its
    /// next prefill step) and whose block is free; returns how many.
    fn decode_running<O: Observer>(&mut self, upto: usize, skip: Option<u32>, at: SimTime, obs: &mut O) -> u32 {
        let mut decoded = 0;
        for i in 0..upto {
            let slot = self.running[i];
            let seq = &self.slots[slot as usize];
            if Some(slot) == skip || seq.state != State::Running || seq.remaining() != 1 {
                continue;
            }
            let need = self.extra_blocks(seq, 1);
            if need > self.kv.free() {
                continue;
            }
            self.grow(slot, need);
            self.add_to_batch(slot, 1, at, obs);
            decoded += 1;
        }
        decoded
    }
}
