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

use super::{
    Arrived, Engine, Joined, Kv, Policy, Request, RequestId, Seq, State, StepCost, StepRecord, StepShape, Stretch,
};
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
        self.run_stretch(max_end, max_steps, false, &mut Closure { before, on_finish: None }, obs)
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
        self.run_stretch(max_end, max_steps, true, &mut Closure { before, on_finish: Some(on_finish) }, obs)
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
    #[inline]
    pub fn decode_stretch_admitting<O: super::Observer>(
        &mut self,
        max_end: SimTime,
        max_steps: u64,
        arrivals: &mut dyn Arrivals,
        obs: &mut O,
    ) -> u64 {
        self.run_stretch(max_end, max_steps, true, arrivals, obs)
    }

    /// The three entry points' one loop, step by step as [`Engine::step`]
    /// runs a step (docs/ARCHITECTURE.md, "Two paths"): set-up, then for
    /// each step its checks (nothing changes; a failed one ends the
    /// stretch before the step), then the step taken, then the commit.
    #[inline]
    fn run_stretch<O: super::Observer>(
        &mut self,
        max_end: SimTime,
        max_steps: u64,
        through: bool,
        arrivals: &mut dyn Arrivals,
        obs: &mut O,
    ) -> u64 {
        let Some((k, s_ctx)) = self.stretch_members(max_steps, through) else { return 0 };
        let mut pass = Pass::new(self, max_end, s_ctx, arrivals);
        for j in 1..=k {
            // Checked, in the order that asks the driver last: the
            // decodes (step 2) and the due arrivals (step 1), then what
            // admission can reach and the step's cost (steps 3 and 4).
            let Some(mut plan) = pass.schedule_decodes(j) else { break };
            if !pass.due_arrivals() || !pass.plan_admission(&mut plan) {
                break;
            }
            // Taken: the decodes' blocks (step 2), the arrivals (step 1),
            // the admissions (step 3), the cost, record, tokens and
            // finishes (steps 4 and 5).
            let evicted = pass.grow_decodes(plan.new);
            pass.join_arrivals();
            pass.admit_waiting(&mut plan);
            pass.finish_step(&plan, evicted);
        }
        pass.commit(obs)
    }

    /// Set-up: whether the engine is in a decode stretch (something
    /// running, nothing pending, no waiting request the stretch may not
    /// take in, every running request decoding with its next block
    /// boundary within a block), and if so its running requests become
    /// the stretch's members, in running order. Returns the most steps the
    /// stretch may take and the members' summed KV, or `None` (then
    /// [`Engine::step`] must run). Only the scratch space changes.
    fn stretch_members(&mut self, max_steps: u64, through: bool) -> Option<(u64, u64)> {
        // Stretches take one token a request a decode step; speculative
        // steps run one by one. Under TensorRT-LLM's and SGLang's
        // schedulers a step with nothing waiting is the same decode step
        // as vLLM's (every running request one token, within the budget,
        // its block from the free ones), so their stretches run while
        // nothing waits and end before the first step an arrival would
        // join (`Limits::admits`).
        if max_steps == 0
            || self.running.is_empty()
            || !self.pending.is_empty()
            || (self.cfg.policy != Policy::Vllm && !self.waiting.is_empty())
            || self.cfg.speculative.is_some()
            || self.cfg.lora.is_some()
            || self.cfg.scheduling_policy != super::SchedulingPolicy::Fcfs
            || self.tiers.is_some()
        {
            return None;
        }
        // Waiting requests are admitted inside a stretch only if they are
        // new (no recompute after a preemption, no transferred KV).
        if !self.waiting.is_empty() && (!through || self.waiting_resumes > 0) {
            return None;
        }
        if self.running.len() as u64 > u64::from(self.cfg.max_batch_tokens) {
            return None;
        }
        let bs = self.cfg.capacity.block_size;
        let bs64 = u64::from(bs);
        let window = self.cfg.cost.deployment.as_ref().map_or(0, |d| d.sliding_window);
        if window > 0 && matches!(self.kv, Kv::Prefix(_)) {
            return None; // not modelled together (the scenario refuses it)
        }
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
                return None;
            }
            let left = s.req.output - s.generated;
            if !through {
                // Its last token comes from a step of its own.
                k = k.min(u64::from(left - 1));
            }
            // Sliding-window layers: each member's window must be full.
            if u64::from(s.computed) + 1 < window {
                return None;
            }
            let room = self.cfg.capacity.tokens_in(s.blocks).checked_sub(u64::from(s.computed));
            let room = room.filter(|&r| r < bs64)?;
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
            return None;
        }
        self.group_members(through);
        Some((k, s_ctx))
    }

    /// Set-up, continued: through finishes, the members by the step they
    /// finish in; with prefix caching, by the steps in which they cross
    /// into a new block and fill their last one.
    fn group_members(&mut self, through: bool) {
        let bs = self.cfg.capacity.block_size as usize;
        let prefix = matches!(self.kv, Kv::Prefix(_));
        let scratch = &mut self.stretch;
        scratch.finishing.clear();
        if through {
            let fins = scratch.members.iter().enumerate().map(|(i, m)| Reverse((m.fin, i as u32)));
            scratch.finishing.extend(fins);
        }
        if prefix {
            // Group the running requests by key (their room), each group
            // in running order.
            for g in &mut scratch.groups {
                g.clear();
            }
            if scratch.groups.len() < bs {
                scratch.groups.resize_with(bs, Vec::new);
            }
            scratch.counted.clear();
            scratch.counted.resize(bs, 0);
            for (i, m) in scratch.members.iter().enumerate() {
                match m.counted {
                    true => scratch.counted[m.key as usize] += 1,
                    false => scratch.groups[m.key as usize].push(i as u32),
                }
            }
        }
    }
}

/// What a stretch runs within, fixed from its first step to its last.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// No step may end after it.
    max_end: SimTime,
    prefix: bool,
    /// The cost model has an architecture: attention pairs and sampled
    /// tokens are priced.
    detailed: bool,
    bs: u32,
    bs64: u64,
    /// The pool's blocks and the watermark.
    total: i64,
    watermark: i64,
    /// Requests may join the stretch (vLLM's rules only: under another
    /// engine's a due arrival ends it before the step it would join, in
    /// `Pass::due_arrivals`).
    admits: bool,
    /// The token budget, `max_num_sequences` and the context length.
    budget: u64,
    max_seqs: u64,
    context: u64,
    /// With prefix caching and no deployment: the cost of the costliest
    /// step the engine could take (see [`Pass::new`]).
    worst_ns: Option<u64>,
    /// Sliding-window layers' window (0 without them) and the blocks a
    /// request holds for them. Every member of a stretch has a full
    /// window behind each decode, so each reads `window` tokens there.
    window: u64,
    window_blocks: u32,
}

/// A stretch under way: the engine, its driver, and what the loop carries
/// from one step to the next. Its methods are the phases of one step, named
/// after the [`Engine::step`] steps they stand for.
struct Pass<'e, 'd> {
    e: &'e mut Engine,
    arrivals: &'e mut (dyn Arrivals + 'd),
    lim: Limits,
    /// Members running at the start (the first `b0` members).
    b0: u64,
    /// The step (1-based) being taken, `(j - 1) % block_size` (the key of
    /// the members crossing into a block in it, kept by counting: a
    /// division per step is a noticeable share of a decode step's cost)
    /// and `j % block_size` (the key of those filling one).
    j: u64,
    cross: usize,
    fill: usize,
    /// Members decoding in step `j`, and their summed KV before it.
    b: u64,
    s_ctx: u64,
    /// Free and used blocks before the step; blocks taken from a counting
    /// pool so far (handed to it at the commit).
    free: u32,
    used: u32,
    taken: u32,
    /// Requests running during the step (decoding, or admitted in it).
    running: u64,
    /// The step's start: the end of the last one.
    clock: SimTime,
    /// The next arrival not handed over yet (or never).
    before: SimTime,
}

/// The step being taken: its checks' findings.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Blocks the decoding members cross into.
    new: u32,
    /// The step's shape: its decodes, then its joiners as they are added.
    shape: StepShape,
    /// Joiners admitted (without prefix caching, planned) and their
    /// prompt tokens computed in the step.
    admitted: usize,
    prompts: u64,
    /// The step's cost and end, once known.
    priced: Option<(StepCost, SimTime)>,
}

impl<'e, 'd> Pass<'e, 'd> {
    /// The stretch's limits and the state before its first step. (Inlined:
    /// a `Pass` whose address reaches a call stays in memory, and the loop
    /// then loads and stores what it carries at every step.)
    #[inline(always)]
    fn new(e: &'e mut Engine, max_end: SimTime, s_ctx: u64, arrivals: &'e mut (dyn Arrivals + 'd)) -> Self {
        let prefix = matches!(e.kv, Kv::Prefix(_));
        let detailed = e.cfg.cost.deployment.is_some();
        let cap = &e.cfg.capacity;
        let (budget, max_seqs) = (u64::from(e.cfg.max_batch_tokens), u64::from(e.cfg.max_num_sequences));
        let context = u64::from(e.cfg.context_length);
        let b0 = e.running.len() as u64;
        let before = next_arrival(arrivals);
        // With prefix caching, a step whose joiners are not known yet is
        // priced on a bound first (`Pass::bound_joiners`). Without a
        // deployment the cost is the roofline of the step's tokens, summed
        // context and batch, and grows with each, so no step here costs
        // more than one of `budget` tokens and `max_seqs` requests at the
        // full context each: while even that step would end by `max_end`,
        // the bound is not priced and a step with joiners is priced once,
        // when they are known.
        let worst_ns = match prefix && !detailed {
            true => {
                let worst = StepShape {
                    tokens: budget,
                    sum_ctx: max_seqs.saturating_mul(context),
                    attention_pairs: 0,
                    decode_pairs: 0,
                    sampled: 0,
                    batch: max_seqs,
                    window_ctx: 0,
                    window_pairs: 0,
                    largest: budget,
                };
                Some(crate::time::secs_to_nanos(e.cfg.cost.cost(&worst).total_s).max(1))
            }
            false => None,
        };
        let lim = Limits {
            max_end,
            prefix,
            detailed,
            bs: cap.block_size,
            bs64: u64::from(cap.block_size),
            total: i64::from(cap.num_blocks),
            watermark: i64::from(cap.watermark_blocks),
            admits: e.cfg.policy == Policy::Vllm,
            budget,
            max_seqs,
            context,
            worst_ns,
            window: e.cfg.cost.deployment.as_ref().map_or(0, |d| d.sliding_window),
            window_blocks: cap.window_blocks,
        };
        e.stretch.steps.clear();
        let (free, used, clock) = (e.kv.free(), e.kv.used(), e.clock);
        Pass {
            e,
            arrivals,
            lim,
            b0,
            j: 0,
            cross: 0,
            fill: 0,
            b: b0,
            s_ctx,
            free,
            used,
            taken: 0,
            running: b0,
            clock,
            before,
        }
    }

    /// Step 2, checked (`Engine::schedule_running`): every decoding member
    /// computes one token on its KV, within the token budget, and the
    /// blocks the step's crossings need are free. Returns the step's
    /// decodes, or `None`: the stretch ends before step `j`.
    #[inline(always)]
    fn schedule_decodes(&mut self, j: u64) -> Option<Plan> {
        let (b, lim) = (self.b, &self.lim);
        if b == 0 || b > lim.budget {
            return None;
        }
        self.j = j;
        debug_assert_eq!(self.cross as u64, (j - 1) % lim.bs64);
        self.fill = if self.cross + 1 == lim.bs as usize { 0 } else { self.cross + 1 };
        let new = self.e.stretch.crossings[self.cross];
        if new > self.free {
            return None;
        }
        let shape = StepShape {
            tokens: b,
            sum_ctx: self.s_ctx + b,
            // sum over requests of attention_pairs(1, c) = c + 1
            attention_pairs: if lim.detailed { u128::from(self.s_ctx + b) } else { 0 },
            // every request of a decode stretch computes one token
            decode_pairs: if lim.detailed { u128::from(self.s_ctx + b) } else { 0 },
            sampled: if lim.detailed { b } else { 0 },
            batch: b,
            // each member's window is full (`Engine::stretch_members`)
            window_ctx: b * lim.window,
            window_pairs: u128::from(b * lim.window),
            largest: 1,
        };
        Some(Plan { new, shape, admitted: 0, prompts: 0, priced: None })
    }

    /// Step 1, checked (`Engine::join_arrivals`): the requests due by the
    /// step's start, asked of the driver in arrival order, go to
    /// `incoming`. False when one may not join inside a stretch: the
    /// driver keeps it, or [`Engine::step`] would reject it (over the
    /// context, or never fitting beside the watermark).
    #[inline(always)]
    fn due_arrivals(&mut self) -> bool {
        let incoming = &mut self.e.stretch.incoming;
        incoming.clear();
        if self.clock < self.before {
            return true;
        }
        loop {
            let req = match self.arrivals.due(self.clock, incoming.len()) {
                // Under another engine's rules an arrival ends the stretch.
                Due::Request(req) if self.lim.admits => req,
                Due::None => return true,
                Due::Request(_) | Due::Refused => return false,
            };
            let (p, n) = (u64::from(req.prompt), u64::from(req.output));
            let need = self.e.cfg.capacity.blocks_for(p) as i64;
            if p + n > self.lim.context || self.lim.total - need < self.lim.watermark {
                return false;
            }
            incoming.push(req);
        }
    }

    /// Steps 3 and 4, checked (`Engine::admit_waiting`, then the cost):
    /// the requests the admission can reach are admitted whole (none is a
    /// prompt to chunk or to reject) and the step ends by `max_end`. False
    /// ends the stretch before the step.
    #[inline(always)]
    fn plan_admission(&mut self, plan: &mut Plan) -> bool {
        let queued = self.e.waiting.len() + self.e.stretch.incoming.len();
        if !self.lim.prefix {
            return self.plan_whole_prompts(plan, queued);
        }
        if queued > 0 {
            return self.bound_joiners(plan, queued);
        }
        // No joiners: the step's cost, known now.
        let (cost, end) = self.price(plan.shape);
        if end > self.lim.max_end {
            return false;
        }
        plan.priced = Some((cost, end));
        true
    }

    /// [`Pass::plan_admission`] without prefix caching: the joiners are
    /// known before the step is taken (no lookup), so they are counted
    /// here, from the head of the queue, as [`Engine::step`] admits them,
    /// and the step is priced.
    #[inline(always)]
    fn plan_whole_prompts(&mut self, plan: &mut Plan, queued: usize) -> bool {
        let lim = self.lim;
        let mut free_after = i64::from(self.free - plan.new);
        while plan.admitted < queued {
            let p = self.queued_prompt(plan.admitted);
            let need = self.e.cfg.capacity.blocks_for(p) as i64;
            let left = lim.budget - self.b - plan.prompts;
            if lim.total - need < lim.watermark {
                return false; // rejected at the head: a step of its own
            }
            if left == 0 || self.running + (plan.admitted as u64) >= lim.max_seqs || free_after - need < lim.watermark {
                break;
            }
            if p > left {
                return false; // a prompt to chunk
            }
            if p + 1 < lim.window {
                return false; // it would decode with its window not yet full
            }
            free_after -= need;
            plan.prompts += p;
            plan.shape.tokens += p;
            plan.shape.sum_ctx += p;
            plan.shape.largest = plan.shape.largest.max(p);
            if lim.detailed {
                plan.shape.attention_pairs += super::arch::attention_pairs(p, 0);
                plan.shape.decode_pairs += super::arch::decode_pairs(p, 0);
                plan.shape.sampled += 1;
            }
            if lim.window > 0 {
                plan.shape.window_ctx += super::arch::window_ctx(p, 0, lim.window);
                plan.shape.window_pairs += super::arch::window_pairs(p, 0, lim.window);
            }
            plan.shape.batch += 1;
            plan.admitted += 1;
        }
        let (cost, end) = self.price(plan.shape);
        if end > lim.max_end {
            return false;
        }
        plan.priced = Some((cost, end));
        true
    }

    /// [`Pass::plan_admission`] with prefix caching and requests queued: a
    /// joiner's lookup comes after this step's allocations (which may
    /// evict what it would hit), so the step is taken before its joiners
    /// are known. It is taken only if none of the requests the admission
    /// can reach is a prompt to chunk or to reject, and if it ends by
    /// `max_end` even with each of them admitted whole with no hit (a hit
    /// only lowers every term of the step's cost).
    #[inline(always)]
    fn bound_joiners(&mut self, plan: &mut Plan, queued: usize) -> bool {
        let lim = self.lim;
        if self.e.cfg.cost.pipeline.is_some() {
            // The busiest micro-batch's share of the context does not
            // shrink with every hit, so the bound below would not hold.
            return false;
        }
        let reach = (queued as u64).min(lim.max_seqs.saturating_sub(self.running)) as usize;
        let mut upper = plan.shape;
        for q in 0..queued.min(reach + 1) {
            let p = self.queued_prompt(q);
            if lim.total - (self.e.cfg.capacity.blocks_for(p) as i64) < lim.watermark {
                return false; // rejected at the head: a step of its own
            }
            if q == reach {
                break;
            }
            upper.tokens += p;
            if upper.tokens > lim.budget {
                return false; // it could be a prompt to chunk
            }
            upper.sum_ctx += p;
            if lim.detailed {
                upper.attention_pairs += super::arch::attention_pairs(p, 0);
                upper.decode_pairs += super::arch::decode_pairs(p, 0);
                upper.sampled += 1;
            }
            upper.batch += 1;
        }
        // Far from `max_end`, a step with joiners is priced once they are
        // known (`priced` stays None).
        if reach == 0 || lim.worst_ns.is_none_or(|ns| self.clock.plus_nanos(ns) > lim.max_end) {
            let (cost, end) = self.price(upper);
            if end > lim.max_end {
                return false;
            }
            if reach == 0 {
                plan.priced = Some((cost, end));
            }
        }
        true
    }

    /// Step 2, taken (`Engine::grow`, and rule 4's registration in
    /// `Engine::add_to_batch`): the decoding members that cross into a new
    /// block take one each; with prefix caching from the free queue,
    /// evicting as a step does, touching only the members that cross or
    /// fill a block in this step, and the blocks they fill are registered.
    /// Returns the pool's evictions before the step.
    #[inline(always)]
    fn grow_decodes(&mut self, new: u32) -> u64 {
        self.free -= new;
        self.used += new;
        let Kv::Prefix(p) = &mut self.e.kv else { return 0 };
        let evicted = p.evictions();
        let (j, cross, fill) = (self.j, self.cross, self.fill);
        let scratch = &mut self.e.stretch;
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
            let seq = &mut self.e.slots[m.slot as usize];
            let tokens = m.c + (j + 1 - m.first) as u32;
            if u64::from(tokens) >= seq.register_at {
                seq.register_at = p.register(m.slot, tokens);
            }
        }
        evicted
    }

    /// Step 1, taken (`Engine::join_arrivals`): the due requests join the
    /// waiting queue, a slot each and, with prefix caching, their content
    /// (as [`Engine::submit_with_hashes`] and `Engine::enqueue` give it);
    /// the driver hands them over and tells the next arrival.
    #[inline(always)]
    fn join_arrivals(&mut self) {
        let e = &mut *self.e;
        let scratch = &mut e.stretch;
        if scratch.incoming.is_empty() {
            return;
        }
        let step = (self.j - 1) as u32;
        for (q, &req) in scratch.incoming.iter().enumerate() {
            let seq = Seq::new(req, State::Waiting);
            let slot = Engine::take_slot(&mut e.slots, &mut e.free_slots, seq);
            if let Kv::Prefix(p) = &mut e.kv {
                let own_tail = self.arrivals.move_content(q, &mut scratch.content);
                let own = match own_tail {
                    true => super::own_blocks(&req, scratch.content.len(), self.lim.bs),
                    false => 0,
                };
                p.set_content_moved(slot, &mut scratch.content, own);
            }
            e.last_arrival = req.arrival;
            e.waiting.push_back(slot);
            e.queued_blocks += e.cfg.capacity.blocks_for(u64::from(req.prompt));
            let (id, arrival, prompt, output) = (req.id, req.arrival, req.prompt, req.output);
            scratch.arrivals.push(Arrived { id, arrival, prompt, output, step });
        }
        self.arrivals.take(scratch.incoming.len());
        self.before = next_arrival(self.arrivals);
    }

    /// Step 3, taken (`Engine::admit_waiting`): from the head of the
    /// waiting queue, the requests that fit come in with blocks for their
    /// whole prompt and compute it in this step; each becomes a member
    /// decoding from the next step on.
    #[inline(always)]
    fn admit_waiting(&mut self, plan: &mut Plan) {
        match self.lim.prefix {
            true => self.admit_looked_up(plan),
            false => self.admit_planned(plan.admitted),
        }
    }

    /// [`Pass::admit_waiting`] without prefix caching: the first
    /// `admitted`, as planned.
    #[inline(always)]
    fn admit_planned(&mut self, admitted: usize) {
        let (j, lim) = (self.j, self.lim);
        let e = &mut *self.e;
        for _ in 0..admitted {
            let Some(slot) = e.waiting.pop_front() else { break };
            let seq = &mut e.slots[slot as usize];
            let req = seq.req;
            let need = e.cfg.capacity.blocks_for(u64::from(req.prompt)) as u32;
            seq.state = State::Running;
            seq.blocks = need;
            e.queued_blocks -= u64::from(need);
            self.free -= need;
            self.used += need;
            self.taken += need;
            e.running.push(slot);
            push_joiner(&mut e.stretch, j, &lim, slot, &req, need, None);
        }
    }

    /// [`Pass::admit_waiting`] with prefix caching: as [`Engine::step`]
    /// admits them, after this step's allocations and registrations and
    /// the joiners' before: the lookup, the test counting the hit blocks
    /// that leave the free queue, their blocks, their prompt's
    /// registration. A joiner computes its prompt past its hit.
    #[inline(always)]
    fn admit_looked_up(&mut self, plan: &mut Plan) {
        let (j, lim) = (self.j, self.lim);
        let e = &mut *self.e;
        let Kv::Prefix(p) = &mut e.kv else { return };
        while let Some(&slot) = e.waiting.front() {
            let req = e.slots[slot as usize].req;
            let need = e.cfg.capacity.blocks_for(u64::from(req.prompt)) as u32;
            let left = lim.budget - self.b - plan.prompts;
            if left == 0 || self.running + (plan.admitted as u64) >= lim.max_seqs {
                break;
            }
            let last = req.prompt + req.output - 1;
            let Some(join) = p.join(slot, req.prompt, need, lim.watermark, last) else { break };
            let c = join.hit_blocks * lim.bs;
            let n = u64::from(req.prompt - c);
            debug_assert!(n <= left, "a joiner's prompt past its hit must fit the budget");
            let seq = &mut e.slots[slot as usize];
            seq.register_at = join.register_at;
            seq.state = State::Running;
            seq.blocks = need;
            e.waiting.pop_front();
            e.queued_blocks -= u64::from(need);
            e.running.push(slot);
            plan.prompts += n;
            plan.shape.tokens += n;
            plan.shape.sum_ctx += u64::from(req.prompt);
            plan.shape.largest = plan.shape.largest.max(n);
            if lim.detailed {
                plan.shape.attention_pairs += super::arch::attention_pairs(n, u64::from(c));
                plan.shape.decode_pairs += super::arch::decode_pairs(n, u64::from(c));
                plan.shape.sampled += 1;
            }
            plan.shape.batch += 1;
            plan.admitted += 1;
            push_joiner(&mut e.stretch, j, &lim, slot, &req, need, Some((c, join.counted)));
        }
    }

    /// Steps 4 and 5 (`Engine::finish_step`): the step's duration (priced
    /// now if its check only bounded it), its record, then at its end the
    /// decoders' tokens, the joiners decoding from the next step on, and
    /// the finished requests leaving with their blocks.
    #[inline(always)]
    fn finish_step(&mut self, plan: &Plan, evicted: u64) {
        let (mut cached_blocks, mut evictions) = (0, 0);
        if let Kv::Prefix(p) = &self.e.kv {
            (self.free, self.used) = (p.free(), p.used());
            cached_blocks = p.cached_blocks();
            evictions = (p.evictions() - evicted) as u32;
        }
        let (cost, end) = match plan.priced {
            Some(priced) => priced,
            None => {
                // With prefix caching and joiners: within the bound checked.
                let (cost, end) = self.price(plan.shape);
                debug_assert!(end <= self.lim.max_end, "a step with joiners past the bound on its cost");
                (cost, end)
            }
        };
        self.running += plan.admitted as u64;
        let e = &mut *self.e;
        e.stretch.steps.push(StepRecord {
            index: e.steps + self.j - 1,
            start: self.clock,
            end,
            batch_size: plan.shape.batch as u32,
            tokens: plan.shape.tokens as u32,
            prefill_tokens: plan.prompts as u32,
            sum_ctx: plan.shape.sum_ctx,
            kv_blocks_used: self.used,
            running: self.running as u32,
            waiting: e.waiting.len() as u32,
            preempted: 0,
            compute_s: cost.compute_s,
            memory_s: cost.memory_s,
            cached_blocks,
            evictions,
        });
        self.clock = end;
        self.start_joiners(plan.admitted);
        self.finish_requests(end);
        self.cross = self.fill;
    }

    /// Step 5, the tokens: the decoders' KV grew by one; the step's
    /// `admitted` joiners decode from the next step on (unless this was
    /// their last token).
    #[inline(always)]
    fn start_joiners(&mut self, admitted: usize) {
        self.s_ctx += self.b;
        let scratch = &mut self.e.stretch;
        let first_joiner = scratch.members.len() - admitted;
        for (i, m) in scratch.members.iter().enumerate().skip(first_joiner) {
            if m.fin > self.j {
                self.b += 1;
                self.s_ctx += u64::from(m.c);
                scratch.crossings[m.key as usize] += 1;
                if m.counted {
                    scratch.counted[m.key as usize] += 1;
                } else if self.lim.prefix {
                    scratch.groups[m.key as usize].push(i as u32);
                }
            }
        }
    }

    /// Step 5, the finishes: requests whose last token this step released
    /// finish; their blocks (with this step's crossings) come back, and
    /// the driver is told each at once. (Only through finishes is the
    /// finish order filled.)
    #[inline(always)]
    fn finish_requests(&mut self, end: SimTime) {
        let (j, bs64) = (self.j, self.lim.bs64);
        let e = &mut *self.e;
        let scratch = &mut e.stretch;
        while let Some(&Reverse((fin, i))) = scratch.finishing.peek() {
            if fin != j {
                break;
            }
            scratch.finishing.pop();
            scratch.finished.push(i);
            let m = scratch.members[i as usize];
            let d = m.decoded(j);
            let held = m.held(d, bs64);
            if let Kv::Prefix(p) = &mut e.kv {
                // Its blocks go back now, before the next step takes
                // any (shared ones stay with their other holders), in
                // the order the step-by-step path frees them.
                if m.counted {
                    p.settle(m.slot, held, m.c + d as u32);
                }
                p.finish(m.slot);
                (self.free, self.used) = (p.free(), p.used());
            } else {
                self.free += held;
                self.used -= held;
            }
            self.running -= 1;
            if d > 0 {
                self.b -= 1;
                self.s_ctx -= u64::from(m.c) + d;
                scratch.crossings[m.key as usize] -= 1;
                if m.counted {
                    scratch.counted[m.key as usize] -= 1;
                }
            }
            self.arrivals.finished(e.slots[m.slot as usize].req.id, end);
            self.before = next_arrival(self.arrivals);
        }
    }

    /// After the last step (`Engine::step`'s end): every member is its
    /// decode steps further, with the blocks it crossed into; the finished
    /// leave; the engine's clock and step count move on and observers get
    /// the stretch. Returns the steps taken (0: none, nothing changed).
    #[inline(always)]
    fn commit<O: super::Observer>(self, obs: &mut O) -> u64 {
        let Pass { e, lim, b0, clock, mut taken, .. } = self;
        let n = e.stretch.steps.len() as u64;
        if n == 0 {
            return 0;
        }
        let scratch = &mut e.stretch;
        for (i, m) in scratch.members.iter().enumerate() {
            let s = &mut e.slots[m.slot as usize];
            let d = m.decoded(n);
            s.computed = m.c + d as u32;
            s.generated = m.g + d as u32;
            let crossed = crossed(d, m.room, lim.bs64) as u32;
            s.blocks = m.blocks + crossed;
            taken += crossed;
            if m.counted
                && m.fin > n
                && let Kv::Prefix(p) = &mut e.kv
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
        if let Kv::Count(_) = &e.kv {
            // The net of what members crossed into and what the finished
            // give back: within the stretch a finished request's blocks
            // went back before later steps crossed into new ones, so taking
            // every crossing first could overdraw the pool for a moment.
            let freed: u32 =
                e.stretch.finished.iter().map(|&f| e.slots[e.stretch.members[f as usize].slot as usize].blocks).sum();
            if let Kv::Count(kv) = &mut e.kv {
                match taken.checked_sub(freed) {
                    Some(net) => kv.take(net),
                    None => kv.give_back(freed - taken),
                }
            }
        }
        if !e.stretch.finished.is_empty() {
            for f in 0..e.stretch.finished.len() {
                let slot = e.stretch.members[e.stretch.finished[f] as usize].slot;
                // Its blocks are back: the pool took them in its last step,
                // or the count's net above gave them.
                e.slots[slot as usize].blocks = 0;
                e.retire(slot);
            }
            let slots = &e.slots;
            e.running.retain(|&s| slots[s as usize].state == State::Running);
        }
        e.steps += n;
        e.clock = clock;
        let left = !e.stretch.finished.is_empty();
        e.sglang_stretched(n, left);
        let st = &e.stretch;
        obs.decode_stretch(&Stretch {
            requests: &st.requests,
            steps: &st.steps,
            spans: &st.spans,
            joins: &st.joins,
            arrivals: &st.arrivals,
        });
        e.debug_check();
        n
    }

    /// A step of shape `shape` starting now: its cost and its end, rounded
    /// as [`Engine::step`] rounds them. (The shape is taken by value: the
    /// cost model is handed the address of this copy, not of the caller's
    /// [`Plan`], which then stays in registers.)
    #[inline(always)]
    fn price(&self, shape: StepShape) -> (StepCost, SimTime) {
        let cost = self.e.cfg.cost.cost(&shape);
        (cost, self.clock.plus_nanos(crate::time::secs_to_nanos(cost.total_s).max(1)))
    }

    /// The prompt of the `q`-th request the step's admission would reach:
    /// the waiting queue, then the due arrivals.
    #[inline(always)]
    fn queued_prompt(&self, q: usize) -> u64 {
        let e = &*self.e;
        u64::from(match e.waiting.get(q) {
            Some(&slot) => e.slots[slot as usize].req.prompt,
            None => e.stretch.incoming[q - e.waiting.len()].prompt,
        })
    }
}

/// A request admitted in step `j` becomes a member: it decodes from step
/// `j + 1`, releases its last token at the end of step `j + N - 1`, and
/// reaches observers as a [`Joined`]. `hit`, with prefix caching: the
/// prompt tokens its lookup found cached, and whether it decodes by count.
#[inline(always)]
fn push_joiner(
    scratch: &mut Scratch,
    j: u64,
    lim: &Limits,
    slot: u32,
    req: &Request,
    need: u32,
    hit: Option<(u32, bool)>,
) {
    let room = (need - lim.window_blocks) * lim.bs - req.prompt;
    let key = ((j + u64::from(room)) % lim.bs64) as u32;
    let fin = j + u64::from(req.output) - 1;
    let i = scratch.members.len() as u32;
    let (c, blocks, counted) = (req.prompt, need, hit.is_some_and(|(_, counted)| counted));
    scratch.members.push(Member { slot, first: j + 1, fin, c, g: 1, blocks, room, key, counted });
    let (step, prefix_hit) = ((j - 1) as u32, hit.map(|(c, _)| c));
    scratch.joins.push(Joined { id: req.id, prompt: req.prompt, step, prefix_hit });
    scratch.finishing.push(Reverse((fin, i)));
}
