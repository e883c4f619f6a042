//! What the engine reports, and to whom.
//!
//! The engine never measures or prints: it calls an [`Observer`] at each
//! event with the simulated time it happened at. A metrics collector, a CSV
//! writer, an invariant checker and the real-time server's stream router are
//! all observers. Every method has an empty default.

use crate::time::SimTime;

/// A decode stretch, as observers see it (taken in `stretch.rs`).
#[derive(Clone, Copy, Debug)]
pub struct Stretch<'a> {
    /// The running requests in running order: `(id, c, g)`, their KV and
    /// their generated tokens before the first step. In step `j` (0-based)
    /// each is scheduled for one token with `c + j` computed and releases
    /// its token number `g + j + 1` at the step's end.
    pub requests: &'a [(RequestId, u32, u32)],
    /// The stretch's steps, in order (at least one).
    pub steps: &'a [StepRecord],
    /// Per request, in the same order: `(n, finished)`, the steps it takes
    /// part in (the first `n`, at least one) and whether it released its
    /// last token and finished at the end of its last one (then its blocks
    /// are free and it left the running set). Without finishes every `n`
    /// is the number of steps.
    pub spans: &'a [(u32, bool)],
    /// Requests admitted inside the stretch (from the waiting queue, which
    /// arrivals join as they come), in admission order: they follow
    /// `requests` in `spans` (and in running order). In its admission step
    /// a joiner is scheduled for its whole prompt (`c = 0`) after the
    /// running requests and releases its first token at the step's end;
    /// then it decodes one token a step. Its span counts the steps from its
    /// admission step. With prefix caching its admission first reports its
    /// lookup ([`Joined::prefix_hit`]) and it is scheduled for the prompt
    /// tokens past the hit.
    pub joins: &'a [Joined],
    /// Requests that arrived inside the stretch, in arrival order: each
    /// one's `arrived` event comes just before the events of its step.
    pub arrivals: &'a [Arrived],
}

/// A request admitted inside a decode stretch (see [`Stretch::joins`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Joined {
    pub id: RequestId,
    pub prompt: u32,
    /// The stretch step (0-based) that admits it and computes its prompt.
    pub step: u32,
    /// With prefix caching: the prompt tokens its lookup found cached
    /// (its `c` at admission; it computes the rest), reported as a
    /// `prefix_lookup` event just before its admission step's `scheduled`.
    /// `None` without prefix caching (no lookup, no event).
    pub prefix_hit: Option<u32>,
}

/// A request that arrived inside a decode stretch (see [`Stretch::arrivals`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Arrived {
    pub id: RequestId,
    /// As submitted (a driver that delays requests reports its own time).
    pub arrival: SimTime,
    pub prompt: u32,
    pub output: u32,
    /// The stretch step (0-based) at whose start it had arrived.
    pub step: u32,
}

/// A request's identity: the order it was submitted in (0, 1, 2, ...).
pub type RequestId = u64;

/// Why a request was turned away.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RejectReason {
    /// `prompt + output > context_length`, checked on arrival.
    ContextLength,
    /// Its known length could never fit beside the watermark, checked at the
    /// head of the waiting queue.
    NeverFits,
}

impl RejectReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::ContextLength => "rejected_context_length",
            RejectReason::NeverFits => "rejected_kv_capacity",
        }
    }
}

/// One step, as reported after it ends.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRecord {
    /// 0-based step number.
    pub index: u64,
    pub start: SimTime,
    pub end: SimTime,
    /// Requests scheduled in the step.
    pub batch_size: u32,
    /// Tokens computed in the step (`T`).
    pub tokens: u32,
    /// Of `tokens`, those of requests that were not decoding (prompt or recompute).
    pub prefill_tokens: u32,
    /// Sum over scheduled requests of their KV after the step.
    pub sum_ctx: u64,
    /// KV blocks in use after the step's allocations, before finished
    /// requests free theirs.
    pub kv_blocks_used: u32,
    /// Requests in `running` (scheduled or not) and `waiting` during the step.
    pub running: u32,
    pub waiting: u32,
    /// Requests preempted in this step.
    pub preempted: u32,
    pub compute_s: f64,
    pub memory_s: f64,
    /// With prefix caching: blocks holding a content hash (in use or free)
    /// when the record is taken, and cached blocks evicted by this step's
    /// allocations. Both 0 without it.
    pub cached_blocks: u32,
    pub evictions: u32,
}

impl StepRecord {
    pub fn duration_nanos(&self) -> u64 {
        self.end.nanos_since(self.start)
    }
}

/// Receives the engine's events. `at` is always simulated time.
#[allow(unused_variables)]
pub trait Observer {
    /// The request was submitted (it has arrived at `at`).
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {}
    /// The request gets `tokens` tokens in the step starting at `at`;
    /// `computed` is its KV before the step.
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {}
    /// The request lost its KV and went back to the front of `waiting`.
    fn preempted(&mut self, id: RequestId, at: SimTime) {}
    /// The request's `index`-th output token (1-based) was released.
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {}
    /// The request released its last token and freed its blocks.
    fn finished(&mut self, id: RequestId, at: SimTime) {}
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {}
    /// The request was withdrawn by its client (real-time server only).
    fn aborted(&mut self, id: RequestId, at: SimTime) {}
    fn step(&mut self, step: &StepRecord) {}
    /// Prefix caching only: the request was admitted (first time or after a
    /// preemption) with `queried = P + g` known tokens, of which the first
    /// `hit` were found in the cache (its `c`, a whole number of blocks).
    /// Sent just before its `scheduled` event.
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {}
    /// Speculative decoding only: the step ending at `at` verified
    /// `drafted` draft tokens of the request and kept the leading
    /// `accepted` (docs/speculative.md). Sent before its `token` events.
    fn speculated(&mut self, id: RequestId, at: SimTime, drafted: u32, accepted: u32) {}
    /// KV offload only: `tokens` of the request's prompt (whole blocks)
    /// are loaded from offload tier `tier` (0 the fastest) at its
    /// admission instead of computed (docs/offload.md). Sent after its
    /// `prefix_lookup` event.
    fn kv_loaded(&mut self, id: RequestId, at: SimTime, tier: u32, tokens: u32) {}
    /// LoRA adapter `adapter` (an index into the engine's adapters) was
    /// copied into a GPU slot for the step starting at `at`
    /// (docs/lora.md). Sent before the step's record.
    fn lora_loaded(&mut self, adapter: u32, at: SimTime) {}
    /// A decode stretch ([`crate::engine::stretch`]): several steps at
    /// once. By default replayed as the events the steps one by one send
    /// (per step: `scheduled` for every request in it, `token` for every
    /// request in it, each followed by `finished` if that was its last,
    /// then `step`), so an observer that does not override it sees exactly
    /// the step-by-step sequence.
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        replay_stretch(self, s);
    }
    /// Not an engine event: a driver of several engines (a `cluster:`
    /// run) says that the steps reported next, up to its next call, are
    /// those of replica `replica` (with prefill and decode pools, the
    /// prefill replicas first, then the decode ones). An output that
    /// lists steps as they happen puts each on its replica with it. The
    /// engine never calls it.
    fn replica(&mut self, replica: u32) {}
    /// Not an engine event: whether the run may end now, before its next
    /// event, because this observer already has what it was run for (a
    /// search that knows a probe fails). The virtual-time driver asks
    /// after every event and ends the run with an error that says so; by
    /// default never.
    fn wants_stop(&self) -> bool {
        false
    }
}

/// The step-by-step events of a decode stretch, sent to `obs`.
pub fn replay_stretch<O: Observer + ?Sized>(obs: &mut O, s: &Stretch<'_>) {
    let running = s.requests.len();
    let (join_spans, spans) = (&s.spans[running..], &s.spans[..running]);
    // Joiners present in step j: those admitted by j whose span reaches it.
    let (mut first_join, mut next_arrival) = (0, 0);
    for (j, step) in s.steps.iter().enumerate() {
        let j = j as u32;
        let present = s.requests.iter().zip(spans).filter(|&(_, &(n, _))| n > j);
        while first_join < s.joins.len() && join_spans[first_join].0 + s.joins[first_join].step <= j {
            first_join += 1;
        }
        let joined = s.joins.iter().zip(join_spans).skip(first_join);
        let joined = joined.filter(|&(r, &(n, _))| r.step <= j && r.step + n > j);
        while next_arrival < s.arrivals.len() && s.arrivals[next_arrival].step == j {
            let r = &s.arrivals[next_arrival];
            obs.arrived(r.id, r.arrival, r.prompt, r.output);
            next_arrival += 1;
        }
        for (&(id, c, _), _) in present.clone() {
            obs.scheduled(id, step.start, 1, c + j);
        }
        for (r, _) in joined.clone() {
            match j - r.step {
                0 => {
                    let hit = r.prefix_hit.unwrap_or(0);
                    if let Some(hit) = r.prefix_hit {
                        obs.prefix_lookup(r.id, step.start, r.prompt, hit);
                    }
                    obs.scheduled(r.id, step.start, r.prompt - hit, hit)
                }
                k => obs.scheduled(r.id, step.start, 1, r.prompt + k - 1),
            }
        }
        for (&(id, _, g), &(n, finished)) in present {
            obs.token(id, step.end, g + j + 1);
            if finished && n == j + 1 {
                obs.finished(id, step.end);
            }
        }
        for (r, &(n, finished)) in joined {
            obs.token(r.id, step.end, j - r.step + 1);
            if finished && r.step + n == j + 1 {
                obs.finished(r.id, step.end);
            }
        }
        obs.step(step);
    }
}

/// Nothing to observe.
impl Observer for () {
    fn decode_stretch(&mut self, _: &Stretch<'_>) {}
}

/// Two observers see every event, the first one first.
impl<A: Observer, B: Observer> Observer for (A, B) {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.0.arrived(id, at, prompt, output);
        self.1.arrived(id, at, prompt, output);
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.0.scheduled(id, at, tokens, computed);
        self.1.scheduled(id, at, tokens, computed);
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.0.preempted(id, at);
        self.1.preempted(id, at);
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.0.token(id, at, index);
        self.1.token(id, at, index);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.0.finished(id, at);
        self.1.finished(id, at);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.0.rejected(id, at, reason);
        self.1.rejected(id, at, reason);
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        self.0.aborted(id, at);
        self.1.aborted(id, at);
    }
    fn step(&mut self, step: &StepRecord) {
        self.0.step(step);
        self.1.step(step);
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.0.prefix_lookup(id, at, queried, hit);
        self.1.prefix_lookup(id, at, queried, hit);
    }
    fn speculated(&mut self, id: RequestId, at: SimTime, drafted: u32, accepted: u32) {
        self.0.speculated(id, at, drafted, accepted);
        self.1.speculated(id, at, drafted, accepted);
    }
    fn kv_loaded(&mut self, id: RequestId, at: SimTime, tier: u32, tokens: u32) {
        self.0.kv_loaded(id, at, tier, tokens);
        self.1.kv_loaded(id, at, tier, tokens);
    }
    fn lora_loaded(&mut self, adapter: u32, at: SimTime) {
        self.0.lora_loaded(adapter, at);
        self.1.lora_loaded(adapter, at);
    }
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        self.0.decode_stretch(s);
        self.1.decode_stretch(s);
    }
    fn replica(&mut self, replica: u32) {
        self.0.replica(replica);
        self.1.replica(replica);
    }
    fn wants_stop(&self) -> bool {
        self.0.wants_stop() || self.1.wants_stop()
    }
}

/// An observer seen through a mutable reference is still an observer.
impl<O: Observer + ?Sized> Observer for &mut O {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        (**self).arrived(id, at, prompt, output);
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        (**self).scheduled(id, at, tokens, computed);
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        (**self).preempted(id, at);
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        (**self).token(id, at, index);
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        (**self).finished(id, at);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        (**self).rejected(id, at, reason);
    }
    fn aborted(&mut self, id: RequestId, at: SimTime) {
        (**self).aborted(id, at);
    }
    fn step(&mut self, step: &StepRecord) {
        (**self).step(step);
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        (**self).prefix_lookup(id, at, queried, hit);
    }
    fn speculated(&mut self, id: RequestId, at: SimTime, drafted: u32, accepted: u32) {
        (**self).speculated(id, at, drafted, accepted);
    }
    fn kv_loaded(&mut self, id: RequestId, at: SimTime, tier: u32, tokens: u32) {
        (**self).kv_loaded(id, at, tier, tokens);
    }
    fn lora_loaded(&mut self, adapter: u32, at: SimTime) {
        (**self).lora_loaded(adapter, at);
    }
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        (**self).decode_stretch(s);
    }
    fn replica(&mut self, replica: u32) {
        (**self).replica(replica);
    }
    fn wants_stop(&self) -> bool {
        (**self).wants_stop()
    }
}
