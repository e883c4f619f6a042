//! Decode stretches (macro-steps): runs of steps in which nothing changes
//! but every running request's context grows by one, taken in one call.
//!
//! In such a stretch no request arrives, none is waiting, none finishes,
//! none is preempted and none is admitted: every running request decodes
//! one token a step, so step `j` (1-based) of the stretch has `B` tokens
//! and `sum(ctx) = sum(c) + j * B`, and only the KV blocks crossed at block
//! boundaries change (as long as the free blocks cover them, which the
//! stretch checks step by step). [`Engine::decode_stretch`] therefore
//! prices each step from the cost formulas in O(1), not O(B), and rounds
//! it to nanoseconds exactly as [`Engine::step`] does, so every step
//! record, every token time and every figure derived from them is the
//! same as the step-by-step path's, to the nanosecond. Observers receive
//! the stretch as one [`Stretch`]: the default
//! [`Observer::decode_stretch`](super::Observer::decode_stretch) replays it as the per-step events the
//! step-by-step path sends (so any observer sees the same sequence); the
//! metrics collector folds it in O(B log B + k) instead of O(B x k).
//!
//! [`Engine::decode_stretch_through`] (what `llmsim run` uses) also runs
//! through finishes: a request whose last token a step releases finishes
//! there, frees its blocks and leaves, and the stretch goes on with
//! `B - 1` requests, `sum(c)` less its KV and its block crossings gone.
//! The driver tells the source of each finish at once and gets back the
//! next arrival, so a closed loop's next request still stops the stretch
//! where the step-by-step path would admit it.

use super::{Engine, Kv, RequestId, StepRecord, StepShape, Stretch};
use crate::time::SimTime;

/// Scratch space kept between stretches, so a stretch allocates nothing.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    requests: Vec<(RequestId, u32, u32)>,
    steps: Vec<StepRecord>,
    spans: Vec<(u32, bool)>,
    /// Through finishes: each running request's output tokens left
    /// (`N - g`, the step it finishes in), and the running indices in
    /// finishing order (by that step, then running order).
    left: Vec<u32>,
    finishing: Vec<u32>,
    /// `crossings[r]`: running requests that need a new block in every
    /// step `j` with `(j - 1) % block_size == r`.
    crossings: Vec<u32>,
    /// Per running request: the free token slots in its last block.
    room: Vec<u32>,
    /// With prefix caching: indices into the running set grouped by
    /// `room` (running order within a group), group `r` at
    /// `order[start[r]..start[r + 1]]`.
    order: Vec<u32>,
    start: Vec<u32>,
}

impl Engine {
    /// Runs, at once, up to `max_steps` steps of a decode stretch starting
    /// at [`Engine::next_step_at`]: only while every step starts before
    /// `before` (the next arrival: it could be admitted) and ends by
    /// `max_end`. Returns how many steps ran; 0 when the engine is not in a
    /// decode stretch (something waits or is pending, a request is in
    /// prefill or would finish in the next step, or its block would not
    /// fit), and then [`Engine::step`] must run.
    ///
    /// With prefix caching, each step of the stretch takes the blocks its
    /// crossings need from the free queue (evicting as a step does) and
    /// registers the blocks it fills, touching only the requests that
    /// cross or fill a block in that step: the same blocks, hashes,
    /// evictions and cached counts as step by step (a step's allocations
    /// and registrations commute: allocation only takes free blocks,
    /// registration only names blocks in use).
    ///
    /// Each request stops one step short of its last token, so a finish
    /// always goes through [`Engine::step`].
    pub fn decode_stretch<O: super::Observer>(
        &mut self,
        before: SimTime,
        max_end: SimTime,
        max_steps: u64,
        obs: &mut O,
    ) -> u64 {
        self.stretch_inner(before, max_end, max_steps, None, obs)
    }

    /// [`Engine::decode_stretch`] that also runs through finishes: a
    /// request releasing its last token finishes inside the stretch, frees
    /// its blocks and leaves the running set, exactly as in a step, and the
    /// stretch goes on with the others. After each step with finishes,
    /// `on_finish` is called with each finished request (in the order the
    /// step-by-step path finishes them) and its end time, and returns the
    /// new `before` (a closed loop's next arrival may come from the
    /// finish). With prefix caching a finishing request's blocks go back
    /// to the pool in its last step, before the next step takes any.
    pub fn decode_stretch_through<O: super::Observer>(
        &mut self,
        before: SimTime,
        max_end: SimTime,
        max_steps: u64,
        on_finish: &mut dyn FnMut(RequestId, SimTime) -> SimTime,
        obs: &mut O,
    ) -> u64 {
        self.stretch_inner(before, max_end, max_steps, Some(on_finish), obs)
    }

    fn stretch_inner<O: super::Observer>(
        &mut self,
        mut before: SimTime,
        max_end: SimTime,
        max_steps: u64,
        mut on_finish: Option<&mut dyn FnMut(RequestId, SimTime) -> SimTime>,
        obs: &mut O,
    ) -> u64 {
        let through = on_finish.is_some();
        if max_steps == 0 || self.running.is_empty() || !self.waiting.is_empty() || !self.pending.is_empty() {
            return 0;
        }
        let b = self.running.len() as u64;
        if b > u64::from(self.cfg.max_batch_tokens) {
            return 0;
        }
        let bs = self.cfg.capacity.block_size;
        let scratch = &mut self.stretch;
        scratch.requests.clear();
        scratch.spans.clear();
        scratch.left.clear();
        scratch.room.clear();
        scratch.crossings.clear();
        scratch.crossings.resize(bs as usize, 0);
        let mut k = max_steps;
        let mut sum_c = 0u64;
        for &slot in &self.running {
            let s = &self.slots[slot as usize];
            if s.remaining() != 1 || s.generated == 0 {
                return 0;
            }
            let left = s.req.output - s.generated;
            if through {
                scratch.left.push(left);
            } else {
                // Its last token comes from a step of its own.
                k = k.min(u64::from(left - 1));
            }
            let room = (u64::from(s.blocks) * u64::from(bs)).checked_sub(u64::from(s.computed));
            let Some(room) = room.filter(|&r| r < u64::from(bs)) else { return 0 };
            // It crosses into a new block in steps room + 1, room + 1 + bs, ...
            scratch.crossings[room as usize] += 1;
            scratch.room.push(room as u32);
            scratch.requests.push((s.req.id, s.computed, s.generated));
            sum_c += u64::from(s.computed);
        }
        if k == 0 {
            return 0;
        }
        if through {
            scratch.finishing.clear();
            scratch.finishing.extend(0..b as u32);
            let left = &scratch.left;
            scratch.finishing.sort_by_key(|&i| (left[i as usize], i));
        }
        // Running requests still in the stretch, their KV before it, and
        // the next request to finish (an index into `finishing`).
        let (mut b, mut next_fin) = (b, 0usize);
        let prefix = matches!(self.kv, Kv::Prefix(_));
        if prefix {
            // Group the running requests by room, each group in running order.
            let bs = bs as usize;
            scratch.start.clear();
            scratch.start.resize(bs + 1, 0);
            for r in 0..bs {
                scratch.start[r + 1] = scratch.start[r] + scratch.crossings[r];
            }
            scratch.order.clear();
            scratch.order.resize(self.running.len(), 0);
            let mut next = scratch.start.clone();
            for (i, &room) in scratch.room.iter().enumerate() {
                scratch.order[next[room as usize] as usize] = i as u32;
                next[room as usize] += 1;
            }
        }
        let detailed = self.cfg.cost.deployment.is_some();
        let (mut free, mut used) = (self.kv.free(), self.kv.used());
        let mut clock = self.clock;
        scratch.steps.clear();
        for j in 1..=k {
            if b == 0 {
                break;
            }
            let new = scratch.crossings[((j - 1) % u64::from(bs)) as usize];
            if clock >= before || new > free {
                break;
            }
            // Step j: every request computes its token j on c + j - 1 cached.
            let sum_ctx = sum_c + j * b;
            let shape = StepShape {
                tokens: b,
                sum_ctx,
                // sum over requests of attention_pairs(1, c + j - 1) = c + j
                attention_pairs: if detailed { u128::from(sum_ctx) } else { 0 },
                sampled: if detailed { b } else { 0 },
                batch: b,
            };
            let cost = self.cfg.cost.cost(&shape);
            let end = clock.plus_nanos(crate::time::secs_to_nanos(cost.total_s).max(1));
            if end > max_end {
                break;
            }
            free -= new;
            used += new;
            let (mut cached_blocks, mut evictions) = (0, 0);
            if let Kv::Prefix(p) = &mut self.kv {
                let before = p.evictions();
                let bs64 = u64::from(bs);
                // Requests with room r cross into a new block in steps
                // j = r + 1 (mod bs), and fill their last one in steps j = r.
                let crossing = ((j - 1) % bs64) as usize;
                let (lo, hi) = (scratch.start[crossing] as usize, scratch.start[crossing + 1] as usize);
                for &i in &scratch.order[lo..hi] {
                    // A request that finished in an earlier step is gone.
                    if through && u64::from(scratch.left[i as usize]) < j {
                        continue;
                    }
                    p.allocate(self.running[i as usize], 1);
                }
                let filling = (j % bs64) as usize;
                let (lo, hi) = (scratch.start[filling] as usize, scratch.start[filling + 1] as usize);
                for &i in &scratch.order[lo..hi] {
                    if through && u64::from(scratch.left[i as usize]) < j {
                        continue;
                    }
                    let slot = self.running[i as usize];
                    let seq = &mut self.slots[slot as usize];
                    let tokens = scratch.requests[i as usize].1 + j as u32;
                    if u64::from(tokens) >= seq.register_at {
                        seq.register_at = p.register(slot, tokens);
                    }
                }
                cached_blocks = p.cached_blocks();
                evictions = (p.evictions() - before) as u32;
            }
            scratch.steps.push(StepRecord {
                index: self.steps + j - 1,
                start: clock,
                end,
                batch_size: b as u32,
                tokens: b as u32,
                prefill_tokens: 0,
                sum_ctx,
                kv_blocks_used: used,
                running: b as u32,
                waiting: 0,
                preempted: 0,
                compute_s: cost.compute_s,
                memory_s: cost.memory_s,
                cached_blocks,
                evictions,
            });
            clock = end;
            // Requests whose last token this step released finish: their
            // blocks (with this step's crossings) come back.
            while through && next_fin < scratch.finishing.len() {
                let i = scratch.finishing[next_fin] as usize;
                if u64::from(scratch.left[i]) != j {
                    break;
                }
                next_fin += 1;
                let (room, c) = (u64::from(scratch.room[i]), u64::from(scratch.requests[i].1));
                let crossed = if j > room { 1 + (j - 1 - room) / u64::from(bs) } else { 0 };
                let slot = self.running[i];
                if let Kv::Prefix(p) = &mut self.kv {
                    // Its blocks go back now, before the next step takes
                    // any (shared ones stay with their other holders), in
                    // the order the step-by-step path frees them.
                    p.finish(slot);
                    (free, used) = (p.free(), p.used());
                } else {
                    let held = self.slots[slot as usize].blocks + crossed as u32;
                    free += held;
                    used -= held;
                }
                b -= 1;
                sum_c -= c;
                scratch.crossings[room as usize] -= 1;
                if let Some(f) = on_finish.as_mut() {
                    before = f(scratch.requests[i].0, end);
                }
            }
        }
        let n = scratch.steps.len() as u64;
        if n == 0 {
            return 0;
        }
        // Commit: every request is n tokens further (a finished one, its
        // tokens left), with the blocks it crossed into.
        let mut taken = 0;
        for (i, (&slot, &room)) in self.running.iter().zip(&scratch.room).enumerate() {
            let s = &mut self.slots[slot as usize];
            let m = if through { n.min(u64::from(scratch.left[i])) } else { n };
            s.computed += m as u32;
            s.generated += m as u32;
            let crossed = if m > u64::from(room) { 1 + (m - 1 - u64::from(room)) / u64::from(bs) } else { 0 };
            s.blocks += crossed as u32;
            taken += crossed as u32;
            scratch.spans.push((m as u32, s.generated == s.req.output));
        }
        if let Kv::Count(kv) = &mut self.kv {
            kv.take(taken);
        }
        if through && next_fin > 0 {
            let prefix = matches!(self.kv, Kv::Prefix(_));
            for f in 0..next_fin {
                let slot = self.running[self.stretch.finishing[f] as usize];
                if prefix {
                    // The pool took its blocks back in its last step.
                    self.slots[slot as usize].blocks = 0;
                    self.retire(slot);
                } else {
                    self.release(slot);
                }
            }
            let slots = &self.slots;
            self.running.retain(|&s| slots[s as usize].state == super::State::Running);
        }
        self.steps += n;
        self.clock = clock;
        let st = &self.stretch;
        obs.decode_stretch(&Stretch { requests: &st.requests, steps: &st.steps, spans: &st.spans });
        self.debug_check();
        n
    }
}
