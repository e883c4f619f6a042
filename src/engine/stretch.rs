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
//!
//! [`Engine::decode_stretch_admitting`] also runs through arrivals: when a
//! request is due by a step's start and the step-by-step path would admit
//! it whole into that step (a free sequence, its blocks beside the
//! watermark, its whole prompt within the budget the decodes leave), the
//! step is priced as `B` decodes plus its prompt, still in O(1), the
//! request releases its first token at the step's end and decodes with the
//! others from the next step on. Anything else (a prompt to chunk, blocks
//! or sequences short, several due requests of which one does not fit)
//! ends the stretch before that step, and [`Engine::step`] takes it. With
//! prefix caching the joiners are looked up inside the stretch, after the
//! step's block crossings and fills, as [`Engine::step`] admits them (the
//! hit, the test counting hit blocks that leave the free queue, the
//! prompt's registration), and a joiner computes its prompt past its hit.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Arrived, Engine, Joined, Kv, Request, RequestId, Seq, State, StepRecord, StepShape, Stretch};
use crate::time::SimTime;

/// What a stretch that runs through finishes and arrivals asks its driver
/// ([`Engine::decode_stretch_admitting`]). The driver holds the requests
/// not handed over yet, in arrival order.
pub trait Arrivals {
    /// When the next request not handed over yet arrives, if known now
    /// (the stretch stops before a step starting at or after it unless it
    /// can take the request in).
    fn next_at(&mut self) -> Option<SimTime>;
    /// The `k`-th (0-based) request not handed over yet, if it has arrived
    /// by `at`: [`Due::Refused`] if it may not be handed over now (then
    /// the stretch ends before the step starting at `at`).
    fn due(&mut self, at: SimTime, k: usize) -> Due;
    /// The first `k` requests are handed over: the engine admitted them.
    fn take(&mut self, k: usize);
    /// With prefix caching, the content of the `k`-th request not handed
    /// over yet (one [`Arrivals::due`] returned): the hashes of its full
    /// blocks and whether the blocks past them are its own, as
    /// [`Engine::submit_with_hashes`] (`false`) or
    /// [`Engine::submit_with_content`] (`true`) take them. By default its
    /// content is unique, as [`Engine::submit`] takes it.
    fn content(&self, _k: usize) -> (&[u64], bool) {
        (&[], false)
    }
    /// [`Arrivals::content`] put in `buf` (which may leave its old buffer
    /// in the request's place: the request is handed over next).
    fn move_content(&mut self, k: usize, buf: &mut Vec<u64>) -> bool {
        let (hashes, own_tail) = self.content(k);
        buf.clear();
        buf.extend_from_slice(hashes);
        own_tail
    }
    /// Request `id` released its last token and finished at `at`.
    fn finished(&mut self, id: RequestId, at: SimTime);
}

/// What [`Arrivals::due`] found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// This request has arrived by then.
    Request(Request),
    /// No more requests have arrived by then.
    None,
    /// One has, but it cannot be handed over inside a stretch.
    Refused,
}

/// No arrivals are taken in; finishes are told to `on_finish`, which
/// returns the next arrival.
struct Closure<'a> {
    before: SimTime,
    on_finish: Option<&'a mut dyn FnMut(RequestId, SimTime) -> SimTime>,
}

impl Arrivals for Closure<'_> {
    fn next_at(&mut self) -> Option<SimTime> {
        Some(self.before)
    }
    fn due(&mut self, _: SimTime, _: usize) -> Due {
        Due::Refused
    }
    fn take(&mut self, _: usize) {}
    fn finished(&mut self, id: RequestId, at: SimTime) {
        if let Some(f) = self.on_finish.as_mut() {
            self.before = f(id, at);
        }
    }
}

/// One request of a stretch: running at its start, or admitted in it.
#[derive(Clone, Copy, Debug)]
struct Member {
    slot: u32,
    /// The stretch step (1-based) of its first decode: 1 for a request
    /// running at the start, its admission step + 1 for a joiner.
    first: u64,
    /// The step (1-based) at whose end it releases its last token.
    fin: u64,
    /// Its KV and generated tokens before its first decode step.
    c: u32,
    g: u32,
    /// Blocks held then, and the free token slots in the last one.
    blocks: u32,
    room: u32,
    /// It crosses into a new block in the steps `j` with
    /// `(j - 1) % block_size == key`.
    key: u32,
    /// With prefix caching: it decodes by count
    /// ([`super::prefix::PrefixPool::decodes_by_count`]): the blocks it
    /// crosses into and fills are only counted, in `Scratch::counted`.
    counted: bool,
}

impl Member {
    /// Decode steps it has taken by the end of step `j`.
    fn decoded(&self, j: u64) -> u64 {
        (j.min(self.fin) + 1).saturating_sub(self.first)
    }

    /// Blocks it holds after `d` decode steps (block size `bs`).
    fn held(&self, d: u64, bs: u64) -> u32 {
        self.blocks + crossed(d, self.room, bs) as u32
    }
}

/// When the next request not handed over arrives, or never.
fn next_arrival(arrivals: &mut dyn Arrivals) -> SimTime {
    arrivals.next_at().unwrap_or(SimTime::from_nanos(u64::MAX))
}

/// Blocks crossed into in `d` decode steps from `room` free slots.
fn crossed(d: u64, room: u32, bs: u64) -> u64 {
    if d > u64::from(room) { 1 + (d - 1 - u64::from(room)) / bs } else { 0 }
}

/// Scratch space kept between stretches, so a stretch allocates nothing.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    members: Vec<Member>,
    requests: Vec<(RequestId, u32, u32)>,
    joins: Vec<Joined>,
    arrivals: Vec<Arrived>,
    /// The requests joining the step being priced.
    incoming: Vec<Request>,
    steps: Vec<StepRecord>,
    spans: Vec<(u32, bool)>,
    /// Members by the step they finish in, then member order.
    finishing: BinaryHeap<Reverse<(u64, u32)>>,
    /// Members that finished, in the order the step-by-step path finishes them.
    finished: Vec<u32>,
    /// `crossings[r]`: members that need a new block in every step `j`
    /// with `(j - 1) % block_size == r`.
    crossings: Vec<u32>,
    /// With prefix caching: the members by `key` (group `r`: those that
    /// cross into a new block in steps `j` with `(j - 1) % block_size == r`
    /// and fill their last one in steps with `j % block_size == r`), each
    /// group in running order (joiners go to its end); a member that
    /// finished leaves its group the next time the group is read. Members
    /// decoding by count are only counted, in `counted`.
    groups: Vec<Vec<u32>>,
    /// `counted[r]`: the members of group `r` (not finished) decoding by count.
    counted: Vec<u32>,
    /// With prefix caching: a joiner's content on its way to its slot.
    content: Vec<u64>,
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
        self.stretch_inner(max_end, max_steps, false, &mut Closure { before, on_finish: None }, obs)
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
        self.stretch_inner(max_end, max_steps, true, &mut Closure { before, on_finish: Some(on_finish) }, obs)
    }

    /// [`Engine::decode_stretch_through`] that also runs through arrivals:
    /// the requests due by a step's start that the step-by-step path would
    /// admit whole into it are taken from `arrivals` and admitted there
    /// (when one could not be, the stretch ends before the step). With
    /// prefix caching each is looked up after the step's block crossings
    /// and fills, with its content from [`Arrivals::content`], and the
    /// step is taken only if every request the admission can reach fits
    /// the budget with its whole prompt and the step ends by `max_end`
    /// with all of them admitted with no hit. Their `arrived` events reach
    /// observers inside the [`Stretch`] ([`Stretch::joins`]), in the
    /// step-by-step order; a request over the context is never taken.
    pub fn decode_stretch_admitting<O: super::Observer>(
        &mut self,
        max_end: SimTime,
        max_steps: u64,
        arrivals: &mut dyn Arrivals,
        obs: &mut O,
    ) -> u64 {
        self.stretch_inner(max_end, max_steps, true, arrivals, obs)
    }

    fn stretch_inner<O: super::Observer>(
        &mut self,
        max_end: SimTime,
        max_steps: u64,
        through: bool,
        arrivals: &mut dyn Arrivals,
        obs: &mut O,
    ) -> u64 {
        if max_steps == 0 || self.running.is_empty() || !self.pending.is_empty() {
            return 0;
        }
        // Waiting requests are admitted inside a stretch only if they are
        // new (no recompute after a preemption, no transferred KV).
        let prefix = matches!(self.kv, Kv::Prefix(_));
        if !self.waiting.is_empty() && (!through || self.waiting_resumes > 0) {
            return 0;
        }
        let b0 = self.running.len() as u64;
        if b0 > u64::from(self.cfg.max_batch_tokens) {
            return 0;
        }
        let bs = self.cfg.capacity.block_size;
        let bs64 = u64::from(bs);
        let scratch = &mut self.stretch;
        scratch.members.clear();
        scratch.requests.clear();
        scratch.joins.clear();
        scratch.arrivals.clear();
        scratch.spans.clear();
        scratch.finished.clear();
        scratch.crossings.clear();
        scratch.crossings.resize(bs as usize, 0);
        let mut k = max_steps;
        // Sum over the decoding members of their KV before the next step.
        let mut s_ctx = 0u64;
        for &slot in &self.running {
            let s = &self.slots[slot as usize];
            if s.remaining() != 1 || s.generated == 0 {
                return 0;
            }
            let left = s.req.output - s.generated;
            if !through {
                // Its last token comes from a step of its own.
                k = k.min(u64::from(left - 1));
            }
            let room = (u64::from(s.blocks) * bs64).checked_sub(u64::from(s.computed));
            let Some(room) = room.filter(|&r| r < bs64) else { return 0 };
            // It crosses into a new block in steps room + 1, room + 1 + bs, ...
            scratch.crossings[room as usize] += 1;
            let room = room as u32;
            let (c, g) = (s.computed, s.generated);
            let fin = u64::from(left);
            let counted = match &self.kv {
                Kv::Prefix(p) => p.decodes_by_count(slot, c, c + fin as u32),
                Kv::Count(_) => false,
            };
            scratch.members.push(Member { slot, first: 1, fin, c, g, blocks: s.blocks, room, key: room, counted });
            scratch.requests.push((s.req.id, c, g));
            s_ctx += u64::from(c);
        }
        if k == 0 {
            return 0;
        }
        scratch.finishing.clear();
        if through {
            let fins = scratch.members.iter().enumerate().map(|(i, m)| Reverse((m.fin, i as u32)));
            scratch.finishing.extend(fins);
        }
        // Members decoding in the next step.
        let mut b = b0;
        if prefix {
            // Group the running requests by key (their room), each group
            // in running order.
            for g in &mut scratch.groups {
                g.clear();
            }
            if scratch.groups.len() < bs as usize {
                scratch.groups.resize_with(bs as usize, Vec::new);
            }
            scratch.counted.clear();
            scratch.counted.resize(bs as usize, 0);
            for (i, m) in scratch.members.iter().enumerate() {
                match m.counted {
                    true => scratch.counted[m.key as usize] += 1,
                    false => scratch.groups[m.key as usize].push(i as u32),
                }
            }
        }
        let detailed = self.cfg.cost.deployment.is_some();
        let cap = &self.cfg.capacity;
        let (total, watermark) = (i64::from(cap.num_blocks), i64::from(cap.watermark_blocks));
        let (budget, max_seqs) = (u64::from(self.cfg.max_batch_tokens), u64::from(self.cfg.max_num_sequences));
        let context = u64::from(self.cfg.context_length);
        let (mut free, mut used) = (self.kv.free(), self.kv.used());
        let mut taken = 0u32;
        // Requests running during the step (decoding, or admitted in it).
        let mut running = b0;
        let mut clock = self.clock;
        let mut before = next_arrival(arrivals);
        // With prefix caching, a step whose joiners are not known yet is
        // priced on a bound first (below). Without a deployment the cost is
        // the roofline of the step's tokens, summed context and batch, and
        // grows with each, so no step here costs more than one of `budget`
        // tokens and `max_seqs` requests at the full context each: while
        // even that step would end by `max_end`, the bound is not priced
        // and a step with joiners is priced once, when they are known.
        let worst_ns = match prefix && !detailed {
            true => {
                let worst = StepShape {
                    tokens: budget,
                    sum_ctx: max_seqs.saturating_mul(context),
                    attention_pairs: 0,
                    sampled: 0,
                    batch: max_seqs,
                };
                Some(crate::time::secs_to_nanos(self.cfg.cost.cost(&worst).total_s).max(1))
            }
            false => None,
        };
        scratch.steps.clear();
        // (j - 1) % block_size, kept by counting (a division per step is
        // a noticeable share of a decode step's cost).
        let mut cross = 0usize;
        for j in 1..=k {
            if b == 0 || b > budget {
                break;
            }
            debug_assert_eq!(cross as u64, (j - 1) % bs64);
            // j % block_size: the key of the members filling a block this step.
            let fill = if cross + 1 == bs as usize { 0 } else { cross + 1 };
            let new = scratch.crossings[cross];
            if new > free {
                break;
            }
            // Step j: every decoding member computes one token on its KV.
            let mut shape = StepShape {
                tokens: b,
                sum_ctx: s_ctx + b,
                // sum over requests of attention_pairs(1, c) = c + 1
                attention_pairs: if detailed { u128::from(s_ctx + b) } else { 0 },
                sampled: if detailed { b } else { 0 },
                batch: b,
            };
            // The requests due by the step's start join the waiting queue;
            // from its head, those that fit are admitted whole, as in a
            // step. A prompt to chunk, a request to reject or a due one the
            // driver keeps ends the stretch here.
            scratch.incoming.clear();
            if clock >= before {
                let mut refused = false;
                loop {
                    let req = match arrivals.due(clock, scratch.incoming.len()) {
                        Due::Request(req) => req,
                        Due::None => break,
                        Due::Refused => {
                            refused = true;
                            break;
                        }
                    };
                    let (p, n) = (u64::from(req.prompt), u64::from(req.output));
                    if p + n > context || total - (cap.blocks_for(p) as i64) < watermark {
                        refused = true;
                        break;
                    }
                    scratch.incoming.push(req);
                }
                if refused {
                    break;
                }
            }
            let (mut admitted, mut prompts) = (0usize, 0u64);
            let queued = self.waiting.len() + scratch.incoming.len();
            // Without prefix caching: the step's cost, known before it is taken.
            let mut priced = None;
            if prefix && queued == 0 {
                // No joiners: the step's cost, known now.
                let cost = self.cfg.cost.cost(&shape);
                let end = clock.plus_nanos(crate::time::secs_to_nanos(cost.total_s).max(1));
                if end > max_end {
                    break;
                }
                priced = Some((cost, end));
            } else if prefix {
                // A joiner's lookup comes after this step's allocations
                // (which may evict what it would hit), so the step is taken
                // before its joiners are known; it is taken only if none
                // of the requests the admission can reach is a prompt to
                // chunk or to reject, and if it ends by `max_end` even with
                // each of them admitted whole with no hit (a hit only
                // lowers every term of the step's cost).
                let reach = (queued as u64).min(max_seqs.saturating_sub(running)) as usize;
                let (mut upper, mut refused) = (shape, false);
                for q in 0..queued.min(reach + 1) {
                    let p = match self.waiting.get(q) {
                        Some(&slot) => self.slots[slot as usize].req.prompt,
                        None => scratch.incoming[q - self.waiting.len()].prompt,
                    };
                    let p = u64::from(p);
                    if total - (cap.blocks_for(p) as i64) < watermark {
                        refused = true; // rejected at the head: a step of its own
                        break;
                    }
                    if q == reach {
                        break;
                    }
                    upper.tokens += p;
                    if upper.tokens > budget {
                        refused = true; // it could be a prompt to chunk
                        break;
                    }
                    upper.sum_ctx += p;
                    if detailed {
                        upper.attention_pairs += super::arch::attention_pairs(p, 0);
                        upper.sampled += 1;
                    }
                    upper.batch += 1;
                }
                if refused {
                    break;
                }
                // Far from `max_end`, a step with joiners is priced once they
                // are known (`priced` stays None).
                if reach == 0 || worst_ns.is_none_or(|ns| clock.plus_nanos(ns) > max_end) {
                    let cost = self.cfg.cost.cost(&upper);
                    let end = clock.plus_nanos(crate::time::secs_to_nanos(cost.total_s).max(1));
                    if end > max_end {
                        break;
                    }
                    if reach == 0 {
                        priced = Some((cost, end));
                    }
                }
            } else {
                let mut free_after = i64::from(free - new);
                let mut chunk = false;
                while admitted < queued {
                    let p = match self.waiting.get(admitted) {
                        Some(&slot) => self.slots[slot as usize].req.prompt,
                        None => scratch.incoming[admitted - self.waiting.len()].prompt,
                    };
                    let p = u64::from(p);
                    let need = cap.blocks_for(p) as i64;
                    let left = budget - b - prompts;
                    if total - need < watermark {
                        chunk = true; // rejected at the head: a step of its own
                        break;
                    }
                    if left == 0 || running + (admitted as u64) >= max_seqs || free_after - need < watermark {
                        break;
                    }
                    if p > left {
                        chunk = true;
                        break;
                    }
                    free_after -= need;
                    prompts += p;
                    shape.tokens += p;
                    shape.sum_ctx += p;
                    if detailed {
                        shape.attention_pairs += super::arch::attention_pairs(p, 0);
                        shape.sampled += 1;
                    }
                    shape.batch += 1;
                    admitted += 1;
                }
                if chunk {
                    break;
                }
                let cost = self.cfg.cost.cost(&shape);
                let end = clock.plus_nanos(crate::time::secs_to_nanos(cost.total_s).max(1));
                if end > max_end {
                    break;
                }
                priced = Some((cost, end));
            }
            free -= new;
            used += new;
            let (mut cached_blocks, mut evictions) = (0, 0);
            if let Kv::Prefix(p) = &mut self.kv {
                let evicted = p.evictions();
                // Requests with key r cross into a new block in steps
                // j = r + 1 (mod bs), and fill their last one in steps j = r.
                // Members decoding by count take and fill blocks as counts
                // (which member takes which of the step's blocks changes
                // nothing: the blocks taken and evicted are the same).
                p.take_for_counted(scratch.counted[cross]);
                p.fill_counted(scratch.counted[fill]);
                let members = &scratch.members;
                let group = &mut scratch.groups[cross];
                // A request that finished in an earlier step is gone.
                if !group.is_empty() {
                    group.retain(|&i| members[i as usize].fin >= j);
                    p.allocate_one_each(group.iter().map(|&i| members[i as usize].slot));
                }
                for &i in &scratch.groups[fill] {
                    let m = &members[i as usize];
                    if m.fin < j {
                        continue;
                    }
                    let seq = &mut self.slots[m.slot as usize];
                    let tokens = m.c + (j + 1 - m.first) as u32;
                    if u64::from(tokens) >= seq.register_at {
                        seq.register_at = p.register(m.slot, tokens);
                    }
                }
                // The arrivals join the waiting queue (a slot and their
                // content each), then from its head those that fit are
                // admitted as in a step: the lookup (after this step's
                // allocations and registrations, and the joiners' before),
                // the test counting the hit blocks that leave the free
                // queue, their blocks, their prompt's registration.
                if !scratch.incoming.is_empty() {
                    for (q, &req) in scratch.incoming.iter().enumerate() {
                        let seq = Seq::new(req, State::Waiting);
                        let slot = Engine::take_slot(&mut self.slots, &mut self.free_slots, seq);
                        let own_tail = arrivals.move_content(q, &mut scratch.content);
                        let own = match own_tail {
                            true => super::own_blocks(&req, scratch.content.len(), bs),
                            false => 0,
                        };
                        p.set_content_moved(slot, &mut scratch.content, own);
                        self.by_id.insert(req.id, slot);
                        self.last_arrival = req.arrival;
                        self.waiting.push_back(slot);
                        self.queued_blocks += cap.blocks_for(u64::from(req.prompt));
                        let (id, arrival, prompt, output) = (req.id, req.arrival, req.prompt, req.output);
                        scratch.arrivals.push(Arrived { id, arrival, prompt, output, step: (j - 1) as u32 });
                    }
                    arrivals.take(scratch.incoming.len());
                    before = next_arrival(arrivals);
                }
                while let Some(&slot) = self.waiting.front() {
                    let req = self.slots[slot as usize].req;
                    let need = cap.blocks_for(u64::from(req.prompt)) as u32;
                    let left = budget - b - prompts;
                    if left == 0 || running + (admitted as u64) >= max_seqs {
                        break;
                    }
                    let last = req.prompt + req.output - 1;
                    let Some(join) = p.join(slot, req.prompt, need, watermark, last) else { break };
                    let (c, counted) = (join.hit_blocks * bs, join.counted);
                    let n = u64::from(req.prompt - c);
                    debug_assert!(n <= left, "a joiner's prompt past its hit must fit the budget");
                    let seq = &mut self.slots[slot as usize];
                    seq.register_at = join.register_at;
                    seq.state = State::Running;
                    seq.blocks = need;
                    self.waiting.pop_front();
                    self.queued_blocks -= u64::from(need);
                    self.running.push(slot);
                    prompts += n;
                    shape.tokens += n;
                    shape.sum_ctx += u64::from(req.prompt);
                    if detailed {
                        shape.attention_pairs += super::arch::attention_pairs(n, u64::from(c));
                        shape.sampled += 1;
                    }
                    shape.batch += 1;
                    admitted += 1;
                    let room = need * bs - req.prompt;
                    let key = ((j + u64::from(room)) % bs64) as u32;
                    let fin = j + u64::from(req.output) - 1;
                    let i = scratch.members.len() as u32;
                    let (c0, blocks) = (req.prompt, need);
                    let m = Member { slot, first: j + 1, fin, c: c0, g: 1, blocks, room, key, counted };
                    scratch.members.push(m);
                    let step = (j - 1) as u32;
                    scratch.joins.push(Joined { id: req.id, prompt: req.prompt, step, prefix_hit: Some(c) });
                    scratch.finishing.push(Reverse((fin, i)));
                }
                (free, used) = (p.free(), p.used());
                cached_blocks = p.cached_blocks();
                evictions = (p.evictions() - evicted) as u32;
            } else {
                // The arrivals join the waiting queue (a slot each), and its
                // first `admitted` come in with blocks for their prompt.
                if !scratch.incoming.is_empty() {
                    for &req in &scratch.incoming {
                        let seq = Seq::new(req, State::Waiting);
                        let slot = Engine::take_slot(&mut self.slots, &mut self.free_slots, seq);
                        self.by_id.insert(req.id, slot);
                        self.last_arrival = req.arrival;
                        self.waiting.push_back(slot);
                        self.queued_blocks += cap.blocks_for(u64::from(req.prompt));
                        let (id, arrival, prompt, output) = (req.id, req.arrival, req.prompt, req.output);
                        scratch.arrivals.push(Arrived { id, arrival, prompt, output, step: (j - 1) as u32 });
                    }
                    arrivals.take(scratch.incoming.len());
                    before = next_arrival(arrivals);
                }
                for _ in 0..admitted {
                    let Some(slot) = self.waiting.pop_front() else { break };
                    let seq = &mut self.slots[slot as usize];
                    let req = seq.req;
                    let need = cap.blocks_for(u64::from(req.prompt)) as u32;
                    seq.state = State::Running;
                    seq.blocks = need;
                    self.queued_blocks -= u64::from(need);
                    free -= need;
                    used += need;
                    taken += need;
                    self.running.push(slot);
                    let room = need * bs - req.prompt;
                    let key = ((j + u64::from(room)) % bs64) as u32;
                    let fin = j + u64::from(req.output) - 1;
                    let i = scratch.members.len() as u32;
                    let (c, blocks) = (req.prompt, need);
                    let counted = false;
                    scratch.members.push(Member { slot, first: j + 1, fin, c, g: 1, blocks, room, key, counted });
                    let step = (j - 1) as u32;
                    scratch.joins.push(Joined { id: req.id, prompt: req.prompt, step, prefix_hit: None });
                    scratch.finishing.push(Reverse((fin, i)));
                }
            }
            let (cost, end) = match priced {
                Some(priced) => priced,
                None => {
                    // With prefix caching and joiners: within the bound checked above.
                    let cost = self.cfg.cost.cost(&shape);
                    let end = clock.plus_nanos(crate::time::secs_to_nanos(cost.total_s).max(1));
                    debug_assert!(end <= max_end, "a step with joiners past the bound on its cost");
                    (cost, end)
                }
            };
            running += admitted as u64;
            scratch.steps.push(StepRecord {
                index: self.steps + j - 1,
                start: clock,
                end,
                batch_size: shape.batch as u32,
                tokens: shape.tokens as u32,
                prefill_tokens: prompts as u32,
                sum_ctx: shape.sum_ctx,
                kv_blocks_used: used,
                running: running as u32,
                waiting: self.waiting.len() as u32,
                preempted: 0,
                compute_s: cost.compute_s,
                memory_s: cost.memory_s,
                cached_blocks,
                evictions,
            });
            clock = end;
            // The decoders' KV grew by one; the joiners decode from the
            // next step on (unless this was their last token).
            s_ctx += b;
            let first_joiner = scratch.members.len() - admitted;
            for (i, m) in scratch.members.iter().enumerate().skip(first_joiner) {
                if m.fin > j {
                    b += 1;
                    s_ctx += u64::from(m.c);
                    scratch.crossings[m.key as usize] += 1;
                    if m.counted {
                        scratch.counted[m.key as usize] += 1;
                    } else if prefix {
                        scratch.groups[m.key as usize].push(i as u32);
                    }
                }
            }
            // Requests whose last token this step released finish: their
            // blocks (with this step's crossings) come back. (Only through
            // finishes is the finish order filled.)
            while let Some(&Reverse((fin, i))) = scratch.finishing.peek() {
                if fin != j {
                    break;
                }
                scratch.finishing.pop();
                scratch.finished.push(i);
                let m = scratch.members[i as usize];
                let d = m.decoded(j);
                let held = m.held(d, bs64);
                if let Kv::Prefix(p) = &mut self.kv {
                    // Its blocks go back now, before the next step takes
                    // any (shared ones stay with their other holders), in
                    // the order the step-by-step path frees them.
                    if m.counted {
                        p.settle(m.slot, held, m.c + d as u32);
                    }
                    p.finish(m.slot);
                    (free, used) = (p.free(), p.used());
                } else {
                    free += held;
                    used -= held;
                }
                running -= 1;
                if d > 0 {
                    b -= 1;
                    s_ctx -= u64::from(m.c) + d;
                    scratch.crossings[m.key as usize] -= 1;
                    if m.counted {
                        scratch.counted[m.key as usize] -= 1;
                    }
                }
                arrivals.finished(self.slots[m.slot as usize].req.id, end);
                before = next_arrival(arrivals);
            }
            cross = fill;
        }
        let n = scratch.steps.len() as u64;
        if n == 0 {
            return 0;
        }
        // Commit: every member is its decode steps further, with the
        // blocks it crossed into.
        for (i, m) in scratch.members.iter().enumerate() {
            let s = &mut self.slots[m.slot as usize];
            let d = m.decoded(n);
            s.computed = m.c + d as u32;
            s.generated = m.g + d as u32;
            let crossed = crossed(d, m.room, bs64) as u32;
            s.blocks = m.blocks + crossed;
            taken += crossed;
            if m.counted
                && m.fin > n
                && let Kv::Prefix(p) = &mut self.kv
            {
                // Its blocks and fills counted in the stretch go to its slot.
                s.register_at = p.settle(m.slot, s.blocks, s.computed);
            }
            let span = match i < b0 as usize {
                true => n.min(m.fin),
                false => n.min(m.fin) + 2 - m.first,
            };
            scratch.spans.push((span as u32, m.fin <= n));
        }
        if let Kv::Count(kv) = &mut self.kv {
            kv.take(taken);
        }
        if !self.stretch.finished.is_empty() {
            for f in 0..self.stretch.finished.len() {
                let slot = self.stretch.members[self.stretch.finished[f] as usize].slot;
                if prefix {
                    // The pool took its blocks back in its last step.
                    self.slots[slot as usize].blocks = 0;
                    self.retire(slot);
                } else {
                    self.release(slot);
                }
            }
            let slots = &self.slots;
            self.running.retain(|&s| slots[s as usize].state == State::Running);
        }
        self.steps += n;
        self.clock = clock;
        let st = &self.stretch;
        obs.decode_stretch(&Stretch {
            requests: &st.requests,
            steps: &st.steps,
            spans: &st.spans,
            joins: &st.joins,
            arrivals: &st.arrivals,
        });
        self.debug_check();
        n
    }
}
