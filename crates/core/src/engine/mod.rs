//! The scheduling core: continuous batching over paged KV blocks, chunked
//! prefill, preemption by recompute and a roofline step cost, exactly as
//! `docs/engine.md` describes.
//!
//! The engine is pure: it never reads a clock, a file or the environment and
//! never spawns a thread. A driver submits requests stamped with their arrival
//! time and calls [`Engine::step`]; the step starts at [`Engine::next_step_at`]
//! and everything it releases is stamped with the step's end time. The
//! offline planner (`llmsim_planner::sim`) advances that time as fast as it can; the
//! real-time server waits for the wall clock to reach it. Both see the same
//! timeline.

pub mod arch;
pub mod cost;
pub mod events;
pub mod kv;
pub mod kv_budget;
pub mod lora;
pub mod offload;
pub mod prefix;
pub mod sglang;
pub mod speculative;
pub mod stretch;
pub mod trtllm;

use std::collections::VecDeque;

pub use cost::{CostInput, CostModel, Pipeline, PipelineStep, StepCost, StepShape};
pub use events::{Arrived, Joined, Observer, RejectReason, RequestId, StepRecord, Stretch};
use kv::KvBlocks;
pub use kv_budget::{KvBudget, KvBudgetError, KvBudgetInput, WideKv};
use prefix::PrefixPool;
pub use speculative::Speculative;

use crate::time::SimTime;

/// The limits and costs the engine runs with, derived once from the config.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub capacity: KvBudget,
    /// Token budget of one step (`max_batch_tokens`).
    pub max_batch_tokens: u32,
    pub max_num_sequences: u32,
    pub context_length: u32,
    pub cost: CostModel,
    /// `kv_cache.prefix_caching`: blocks are identified by content and
    /// shared (docs/prefix-caching.md). Off, the pool only counts.
    pub prefix_caching: bool,
    /// Whose scheduling rules a step follows (`engine:`; docs/engine.md).
    pub policy: Policy,
    /// Speculative decoding (docs/speculative.md); `None`: one token a
    /// decode step.
    pub speculative: Option<Speculative>,
    /// The order of the waiting queue and the choice of a preemption's
    /// victim (vLLM's `--scheduling-policy`; docs/priorities.md).
    pub scheduling_policy: SchedulingPolicy,
    /// KV offload tiers below the prefix cache (docs/offload.md); needs
    /// `prefix_caching`.
    pub offload: Option<offload::Offload>,
    /// LoRA adapters on the model (docs/lora.md); `None`: no request
    /// may name one.
    pub lora: Option<lora::Lora>,
    /// Under [`Policy::Sglang`]: `new_token_ratio`'s start, mixed chunks
    /// and the prefill token cap ([`sglang`]).
    pub sglang: sglang::SglangOptions,
    /// Under [`Policy::Trtllm`]: its capacity policy and chunked prefill
    /// ([`trtllm`]).
    pub trtllm: trtllm::Trtllm,
}

/// vLLM's `--scheduling-policy` (docs/priorities.md).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum SchedulingPolicy {
    /// First come, first served: arrivals join the back of `waiting`, a
    /// preempted request its front; the victim is the newest running.
    #[default]
    Fcfs,
    /// `waiting` is ordered by `(priority, arrival, id)`, lowest first (a
    /// preempted request goes back to its place in that order); the victim
    /// is the running request with the largest `(priority, arrival, id)`,
    /// unscheduled if it was scheduled earlier in the step (vLLM V1's
    /// `Scheduler.schedule`).
    Priority,
}

/// The serving engine whose scheduler the core follows (docs/engine.md,
/// "The engine's scheduler").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// vLLM V1: running requests first, then waiting ones while their
    /// known length fits beside the watermark, chunked to the budget;
    /// growth that does not fit preempts the newest.
    #[default]
    Vllm,
    /// TensorRT-LLM's scheduler ([`trtllm`]; its default,
    /// `GUARANTEED_NO_EVICT` without chunked prefill, admits a waiting
    /// request only while the blocks every admitted request needs to
    /// complete fit, and only with its whole prompt in the step; nothing is
    /// preempted).
    Trtllm,
    /// SGLang's scheduler ([`sglang`]): prefill steps first, never mixed
    /// with decode; admission reserves every running request's remaining
    /// output; decode retracts the least advanced requests when a block
    /// is missing.
    Sglang,
}

/// A request as submitted: `output` is its length `N`, used only to stop it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    pub arrival: SimTime,
    pub prompt: u32,
    pub output: u32,
    /// vLLM's request `priority`: lower is served first under
    /// [`SchedulingPolicy::Priority`] (ignored under FCFS). 0 by default.
    pub priority: i32,
    /// The LoRA adapter it runs with: `i + 1` for [`lora::Lora`]'s
    /// adapter `i`, 0 for the base model (docs/lora.md).
    pub lora: u16,
}

impl Request {
    /// A request of priority 0 on the base model.
    pub fn new(id: RequestId, arrival: SimTime, prompt: u32, output: u32) -> Request {
        Request { id, arrival, prompt, output, priority: 0, lora: 0 }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    /// Submitted, but its arrival is after the start of the current step.
    Pending,
    Waiting,
    Running,
    /// The slot is free for reuse.
    Free,
}

/// A request inside the engine.
#[derive(Clone, Debug)]
struct Seq {
    req: Request,
    /// `g`: tokens generated so far.
    generated: u32,
    /// `c`: tokens whose KV is in the cache.
    computed: u32,
    blocks: u32,
    state: State,
    /// With prefix caching: once `c` reaches this, a full block awaits
    /// registration (0 = check at the next scheduling).
    register_at: u64,
    /// KV tokens that arrive with it by transfer (a disaggregated decode
    /// replica's request): its `c` at its first admission, then 0.
    arriving_kv: u32,
    /// Speculative decoding: draft tokens proposed after its last sampled
    /// token, to be verified in its next step (0 otherwise).
    drafts: u32,
}

impl Seq {
    /// A request just submitted, in `state` (pending, or waiting when a
    /// stretch takes it in): nothing generated, computed or allocated.
    fn new(req: Request, state: State) -> Seq {
        Seq { req, generated: 0, computed: 0, blocks: 0, state, register_at: 0, arriving_kv: 0, drafts: 0 }
    }

    /// Not new: it resumes after tokens of its own (a preemption) or with
    /// KV transferred in. Only new requests join a decode stretch.
    fn resumes(&self) -> bool {
        self.generated > 0 || self.arriving_kv > 0
    }

    /// `P + g`: the tokens the engine knows.
    fn known(&self) -> u32 {
        self.req.prompt + self.generated
    }

    fn remaining(&self) -> u32 {
        self.known() - self.computed
    }
}

/// The full blocks of a request's content past its `shared` hashed ones,
/// up to `floor((P+N-1)/block_size)`: its own content
/// ([`Engine::submit_with_content`]).
fn own_blocks(req: &Request, shared: usize, block_size: u32) -> u32 {
    // `P + N >= 2`: the prompt and the output are at least one token each.
    let total = u64::from(req.prompt) + u64::from(req.output);
    ((total - 1) / u64::from(block_size.max(1))).saturating_sub(shared as u64) as u32
}

/// The KV pool: a plain count, or blocks with identities when prefix
/// caching is on (so the common case pays nothing for identity).
#[derive(Clone, Debug)]
enum Kv {
    Count(KvBlocks),
    Prefix(Box<PrefixPool>),
}

impl Kv {
    fn free(&self) -> u32 {
        match self {
            Kv::Count(k) => k.free(),
            Kv::Prefix(p) => p.free(),
        }
    }

    fn used(&self) -> u32 {
        match self {
            Kv::Count(k) => k.used(),
            Kv::Prefix(p) => p.used(),
        }
    }

    fn total(&self) -> u32 {
        match self {
            Kv::Count(k) => k.total(),
            Kv::Prefix(p) => p.total(),
        }
    }
}

/// The scheduler state: queues, sequences and the KV pool.
#[derive(Clone, Debug)]
pub struct Engine {
    cfg: EngineConfig,
    kv: Kv,
    slots: Vec<Seq>,
    free_slots: Vec<u32>,
    /// Submitted requests whose arrival is later than the current step start,
    /// in arrival order.
    pending: VecDeque<u32>,
    /// FIFO; preempted requests go back to its front.
    waiting: VecDeque<u32>,
    /// In admission order.
    running: Vec<u32>,
    /// End of the last step (the earliest the next one can start).
    clock: SimTime,
    last_arrival: SimTime,
    steps: u64,
    /// (slot, tokens) scheduled in the step being built.
    batch: Vec<(u32, u32)>,
    /// The shape of the step being built and its prompt tokens, summed as
    /// requests join the batch (so the batch is not walked again to price it).
    shape: StepShape,
    prefill: u64,
    /// Prefix-cache evictions before the step being built.
    evictions_before: u64,
    /// Sum over pending and waiting requests of `ceil((P+g)/bs)`, kept as
    /// they come and go (a cluster router reads it at every arrival).
    queued_blocks: u64,
    /// Waiting requests that are not new ([`Seq::resumes`]: preempted
    /// after tokens, or with transferred KV), kept as they come and go so
    /// a decode stretch need not walk the queue to find one.
    waiting_resumes: u64,
    /// Scratch space of [`Engine::decode_stretch`].
    stretch: stretch::Scratch,
    /// Speculative decoding: the acceptance draws' generator, and the
    /// requests of the step being built that sample a token (so draft)
    /// with their KV after it.
    spec_rng: Option<rand_chacha::ChaCha8Rng>,
    drafting: u64,
    drafting_ctx: u64,
    /// KV offload tiers (with prefix caching), and the seconds of loads
    /// the step being built waits for.
    tiers: Option<Box<offload::Tiers>>,
    load_s: f64,
    /// With LoRA: the GPU slots, and the distinct adapters of the step
    /// being built (kept during admission only).
    lora_slots: Option<Box<lora::Slots>>,
    step_loras: Vec<u16>,
    /// Under [`Policy::Sglang`]: its chunked request, ratio and latch.
    sg: sglang::Sglang,
}

/// The hasher of the KV offload's block map ([`offload`]): one multiply
/// and a rotation per key, where the default SipHash took about 4% of a
/// plain run when the engine kept its requests by id in such a map. Keys
/// are not chosen by an adversary, so flooding is not a concern, and the
/// map is never iterated, so its order reaches no output.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing (2^64 / golden ratio): the product's high
        // bits mix every bit of the id; `finish` rotates them down to the
        // low bits, which pick the bucket.
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

impl std::hash::BuildHasher for IdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Engine {
        let (blocks, block_size) = (cfg.capacity.num_blocks, cfg.capacity.block_size);
        let cfg_rng = cfg.speculative.as_ref().map(Speculative::rng);
        let kv = match cfg.prefix_caching {
            false => Kv::Count(KvBlocks::new(blocks)),
            true => Kv::Prefix(Box::new(PrefixPool::new(blocks, block_size))),
        };
        let lora_slots = cfg.lora.as_ref().map(|_| Box::default());
        let sglang_ratio = cfg.sglang.ratio_init().unwrap_or(1.0);
        let tiers = match cfg.prefix_caching {
            true => cfg.offload.as_ref().map(|o| Box::new(offload::Tiers::new(o))),
            false => None,
        };
        Engine {
            kv,
            cfg,
            slots: Vec::new(),
            free_slots: Vec::new(),
            pending: VecDeque::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            clock: SimTime::ZERO,
            last_arrival: SimTime::ZERO,
            steps: 0,
            batch: Vec::new(),
            shape: StepShape::default(),
            prefill: 0,
            evictions_before: 0,
            queued_blocks: 0,
            waiting_resumes: 0,
            stretch: stretch::Scratch::default(),
            spec_rng: cfg_rng,
            drafting: 0,
            drafting_ctx: 0,
            tiers,
            load_s: 0.0,
            lora_slots,
            step_loras: Vec::new(),
            sg: sglang::Sglang { ratio: sglang_ratio, ..Default::default() },
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// End of the last step.
    pub fn clock(&self) -> SimTime {
        self.clock
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Submitted requests that have not joined `waiting` yet.
    pub fn num_pending(&self) -> usize {
        self.pending.len()
    }

    pub fn kv_blocks_used(&self) -> u32 {
        self.kv.used()
    }

    pub fn kv_blocks_total(&self) -> u32 {
        self.kv.total()
    }

    /// Blocks holding a content hash, in use or free (0 without prefix caching).
    pub fn kv_blocks_cached(&self) -> u32 {
        match &self.kv {
            Kv::Count(_) => 0,
            Kv::Prefix(p) => p.cached_blocks(),
        }
    }

    /// Sum over pending and waiting requests of the blocks their known
    /// length needs, `ceil((P+g)/bs)`, with no prefix hit subtracted (the
    /// `least_kv` router's queued term, docs/clusters.md).
    pub fn queued_blocks(&self) -> u64 {
        self.queued_blocks
    }

    /// With prefix caching, the leading full blocks of `hashes` (a
    /// request's content, as for [`Engine::submit_with_hashes`]) that a
    /// request of `known` tokens would find cached here now; 0 without.
    pub fn prefix_hit_blocks(&self, hashes: &[u64], known: u32) -> u32 {
        match &self.kv {
            Kv::Count(_) => 0,
            Kv::Prefix(p) => p.hit_blocks(hashes, known),
        }
    }

    /// Nothing running, waiting or pending.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty() && self.pending.is_empty()
    }

    /// When the next step starts: at the end of the last one if anything is
    /// running or waiting, else at the next pending arrival (the engine jumps
    /// over idle time), else never.
    pub fn next_step_at(&self) -> Option<SimTime> {
        if !self.running.is_empty() || !self.waiting.is_empty() {
            return Some(self.clock);
        }
        let first = self.pending.front()?;
        Some(self.slots[*first as usize].req.arrival.max(self.clock))
    }

    /// Hands a request to the engine. Arrivals must not decrease from one
    /// call to the next. A request longer than the context is rejected at
    /// once (the server answers it with HTTP 400). With prefix caching on,
    /// its content is unique: it never hits and nothing hits it.
    pub fn submit<O: Observer>(&mut self, req: Request, obs: &mut O) -> Result<(), RejectReason> {
        self.submit_with_hashes(req, &[], obs)
    }

    /// [`Engine::submit`] with the request's content: the hashes of its
    /// full blocks, prompt then answer, in order ([`prefix::hash`] makes
    /// them from segments or from token ids). Only the first
    /// `floor((P+N-1)/block_size)` can ever be used; blocks past the end of
    /// the list are never cached. Ignored without prefix caching.
    pub fn submit_with_hashes<O: Observer>(
        &mut self,
        req: Request,
        hashes: &[u64],
        obs: &mut O,
    ) -> Result<(), RejectReason> {
        self.submit_content(req, hashes, false, obs)
    }

    /// [`Engine::submit_with_hashes`] with only the hashes of the blocks
    /// another request may share: the request's full blocks past them, up
    /// to `floor((P+N-1)/block_size)`, are its own content (no other
    /// request has it, as when they hold its unique prompt tokens or its
    /// answer and no later turn resends them). Those are cached, hit after
    /// a preemption and evicted exactly as if each had a hash of its own,
    /// without being hashed or indexed (docs/prefix-caching.md, "Speed").
    pub fn submit_with_content<O: Observer>(
        &mut self,
        req: Request,
        shared: &[u64],
        obs: &mut O,
    ) -> Result<(), RejectReason> {
        self.submit_content(req, shared, true, obs)
    }

    fn submit_content<O: Observer>(
        &mut self,
        req: Request,
        hashes: &[u64],
        own_tail: bool,
        obs: &mut O,
    ) -> Result<(), RejectReason> {
        debug_assert!(req.arrival >= self.last_arrival, "arrivals went backwards");
        debug_assert!(req.prompt >= 1 && req.output >= 1, "empty prompt or output");
        self.last_arrival = req.arrival;
        obs.arrived(req.id, req.arrival, req.prompt, req.output);
        let total = u64::from(req.prompt) + u64::from(req.output);
        if total > u64::from(self.cfg.context_length) {
            obs.rejected(req.id, req.arrival, RejectReason::ContextLength);
            return Err(RejectReason::ContextLength);
        }
        let own = match own_tail {
            true => own_blocks(&req, hashes.len(), self.cfg.capacity.block_size),
            false => 0,
        };
        let seq = Seq::new(req, State::Pending);
        self.enqueue(seq, hashes, own);
        Ok(())
    }

    /// A request whose prompt was computed elsewhere (a disaggregated
    /// prefill replica, docs/clusters.md) and whose first token was
    /// released there: it joins with `g = 1` and, at its first admission,
    /// `c = P` (its KV arrived by transfer). Admission needs
    /// `ceil((P+1)/bs)` blocks beside the watermark, as any other; it then
    /// decodes until `g = N`. If preempted, it recomputes its `P + g`
    /// tokens here. `req.arrival` is when the transfer ends; `req.output`
    /// (`N`) must be at least 2. No `arrived` event is sent (the request
    /// arrived at the prefill replica), and no prefix-cache lookup is made.
    pub fn submit_transferred(&mut self, req: Request) {
        debug_assert!(req.arrival >= self.last_arrival, "arrivals went backwards");
        debug_assert!(req.prompt >= 1 && req.output >= 2, "a transferred request decodes at least one token");
        self.last_arrival = req.arrival;
        let seq = Seq {
            req,
            generated: 1,
            computed: 0,
            blocks: 0,
            state: State::Pending,
            register_at: 0,
            arriving_kv: req.prompt,
            drafts: 0,
        };
        self.enqueue(seq, &[], 0);
    }

    /// Puts a new request in a free slot and in `pending`; `hashes` are its
    /// shared blocks' content hashes and `own` the count of its own
    /// (unhashed) full blocks after them.
    fn enqueue(&mut self, seq: Seq, hashes: &[u64], own: u32) {
        let known = u64::from(seq.known());
        let slot = Engine::take_slot(&mut self.slots, &mut self.free_slots, seq);
        if let Kv::Prefix(p) = &mut self.kv {
            p.set_content_own(slot, hashes, own);
        }
        self.pending.push_back(slot);
        self.queued_blocks += self.cfg.capacity.blocks_for(known);
    }

    /// Puts a sequence in a free slot (reusing one if any) and returns it.
    /// Takes the two fields, not `self`, so a stretch holding its scratch
    /// space can call it.
    fn take_slot(slots: &mut Vec<Seq>, free_slots: &mut Vec<u32>, seq: Seq) -> u32 {
        match free_slots.pop() {
            Some(slot) => {
                slots[slot as usize] = seq;
                slot
            }
            None => {
                slots.push(seq);
                (slots.len() - 1) as u32
            }
        }
    }

    /// Withdraws a request wherever it is and frees its blocks at once.
    /// Returns false if the engine does not hold it (finished or unknown).
    /// Call between steps.
    pub fn abort<O: Observer>(&mut self, id: RequestId, at: SimTime, obs: &mut O) -> bool {
        // Aborts are rare (a client gone; only the server aborts), so the
        // slots are searched rather than every request's id kept in a map:
        // the map's insert and remove, cold in cache, took 9% of a
        // saturated run of 1M requests (docs/performance.md), a search
        // costs an abort a pass over the slots (as many as the requests
        // the engine ever held at once).
        let Some(slot) = self.slots.iter().position(|s| s.state != State::Free && s.req.id == id) else {
            return false;
        };
        let slot = slot as u32;
        let queued = self.cfg.capacity.blocks_for(u64::from(self.slots[slot as usize].known()));
        match self.slots[slot as usize].state {
            State::Pending => {
                self.pending.retain(|&s| s != slot);
                self.queued_blocks -= queued;
            }
            State::Waiting => {
                self.waiting.retain(|&s| s != slot);
                self.queued_blocks -= queued;
                self.waiting_resumes -= u64::from(self.slots[slot as usize].resumes());
            }
            State::Running => {
                self.running.retain(|&s| s != slot);
                self.sg.full = false;
                if self.sg.chunked == Some(slot) {
                    self.sg.chunked = None;
                }
            }
            State::Free => return false,
        }
        obs.aborted(id, at);
        self.release(slot);
        true
    }

    /// Runs one step at [`Engine::next_step_at`] and returns its record, or
    /// `None` when nothing was scheduled (then no time passes).
    pub fn step<O: Observer>(&mut self, obs: &mut O) -> Option<StepRecord> {
        let start = self.next_step_at()?;
        self.clock = start;
        if self.cfg.policy == Policy::Sglang {
            self.sglang_idle();
        }
        self.join_arrivals(start);
        self.batch.clear();
        self.shape = StepShape::default();
        self.prefill = 0;
        (self.drafting, self.drafting_ctx) = (0, 0);
        self.load_s = 0.0;
        if let Kv::Prefix(p) = &self.kv {
            self.evictions_before = p.evictions();
        }
        let mut budget = self.cfg.max_batch_tokens;
        let preempted = match self.cfg.policy {
            Policy::Sglang => self.schedule_sglang(start, &mut budget, obs),
            Policy::Trtllm => self.schedule_trtllm(start, &mut budget, obs),
            Policy::Vllm => {
                let preempted = self.schedule_running(start, &mut budget, obs, false);
                if preempted == 0 {
                    self.admit_waiting(start, &mut budget, obs);
                }
                preempted
            }
        };
        if self.batch.is_empty() {
            return None;
        }
        let record = self.finish_step(start, preempted, obs);
        obs.step(&record);
        self.steps += 1;
        self.clock = record.end;
        self.debug_check();
        Some(record)
    }

    /// Step 1: every submitted request that has arrived joins `waiting`.
    fn join_arrivals(&mut self, start: SimTime) {
        while let Some(&slot) = self.pending.front() {
            let seq = &mut self.slots[slot as usize];
            if seq.req.arrival > start {
                break;
            }
            seq.state = State::Waiting;
            self.waiting_resumes += u64::from(seq.resumes());
            self.pending.pop_front();
            match self.cfg.scheduling_policy {
                SchedulingPolicy::Fcfs => self.waiting.push_back(slot),
                SchedulingPolicy::Priority => self.queue_by_priority(slot),
            }
        }
    }

    /// Under [`SchedulingPolicy::Priority`]: `slot` joins `waiting` at its
    /// place in `(priority, arrival, id)` order (vLLM's
    /// `PriorityRequestQueue`, a heap on the same key; ids break its ties
    /// as request ids do there).
    fn queue_by_priority(&mut self, slot: u32) {
        let key = |s: &Seq| (s.req.priority, s.req.arrival, s.req.id);
        let me = key(&self.slots[slot as usize]);
        let slots = &self.slots;
        let at = self.waiting.partition_point(|&w| key(&slots[w as usize]) < me);
        self.waiting.insert(at, slot);
    }

    /// The running request a preemption takes: under FCFS the newest (the
    /// last in running order); under priority the one with the largest
    /// `(priority, arrival)` (vLLM's `max`), equal arrivals broken by id:
    /// simulated arrivals can share an instant, real ones are never equal
    /// and come in id order. Its index in `running`, which is not empty.
    fn victim(&self) -> usize {
        let last = self.running.len() - 1;
        if self.cfg.scheduling_policy == SchedulingPolicy::Fcfs {
            return last;
        }
        let key = |i: usize| {
            let r = &self.slots[self.running[i] as usize].req;
            (r.priority, r.arrival, r.id)
        };
        (1..self.running.len()).fold(0, |best, i| if key(i) > key(best) { i } else { best })
    }

    /// Step 2: running requests, oldest first, take budget; growth that does
    /// not fit preempts the newest. Returns how many were preempted.
    ///
    /// With `decodes_only` (TensorRT-LLM's chunked prefill), requests with
    /// more than one token to compute are passed over: their chunks are
    /// cut from what the decodes leave.
    fn schedule_running<O: Observer>(&mut self, at: SimTime, budget: &mut u32, obs: &mut O, decodes_only: bool) -> u32 {
        let mut preempted = 0;
        let mut i = 0;
        // Read once: the loop runs for every running request of every step.
        let lookahead = self.cfg.speculative.as_ref().map_or(0, |s| s.lookahead);
        let by_priority = self.cfg.scheduling_policy == SchedulingPolicy::Priority;
        while i < self.running.len() && *budget > 0 {
            let slot = self.running[i];
            let seq = &self.slots[slot as usize];
            if decodes_only && seq.remaining() > 1 {
                i += 1;
                continue;
            }
            // Its drafts ride along, as far as the budget goes; a step that
            // verifies drafts reserves the drafter's lookahead slots too
            // (a prompt's chunks do not, so a request that fits always
            // reaches its next token). Without drafts both terms are 0.
            let (tokens, need) = if seq.drafts == 0 {
                let tokens = seq.remaining().min(*budget);
                (tokens, self.extra_blocks(seq, tokens))
            } else {
                let tokens = (seq.remaining() + seq.drafts).min(*budget);
                let reserve = if tokens > seq.remaining() { lookahead } else { 0 };
                (tokens, self.extra_blocks(seq, tokens + reserve))
            };
            while need > self.kv.free() {
                // `running[i]` is in the list, so it is not empty.
                let v = self.victim();
                let victim = self.running.remove(v);
                if v < i {
                    // Scheduled earlier in this step: it leaves the batch
                    // and gives its tokens back.
                    *budget += self.unschedule(victim);
                    i -= 1;
                }
                self.preempt(victim, at, obs);
                preempted += 1;
                if victim == slot {
                    self.announce_running(by_priority, at, obs);
                    return preempted;
                }
            }
            self.grow(slot, need);
            match by_priority {
                false => self.add_to_batch(slot, tokens, at, obs),
                true => self.add_to_batch_quietly(slot, tokens),
            }
            *budget -= tokens;
            i += 1;
        }
        self.announce_running(by_priority, at, obs);
        preempted
    }

    /// Under priority scheduling a running request's place in the batch
    /// is final only once the running requests are done (a later one may
    /// unschedule it): their `scheduled` events are sent then, in batch
    /// order, after the step's `preempted` events.
    fn announce_running<O: Observer>(&self, by_priority: bool, at: SimTime, obs: &mut O) {
        if by_priority {
            for &(slot, tokens) in &self.batch {
                let seq = &self.slots[slot as usize];
                obs.scheduled(seq.req.id, at, tokens, seq.computed);
            }
        }
    }

    /// Takes `slot` out of the step being built and returns its tokens;
    /// the step's shape is summed again over the rest of the batch.
    fn unschedule(&mut self, slot: u32) -> u32 {
        let Some(at) = self.batch.iter().position(|&(s, _)| s == slot) else { return 0 };
        let (_, tokens) = self.batch.remove(at);
        self.shape = StepShape::default();
        self.prefill = 0;
        (self.drafting, self.drafting_ctx) = (0, 0);
        for k in 0..self.batch.len() {
            let (s, n) = self.batch[k];
            self.count_in_shape(s, n);
        }
        tokens
    }

    /// Step 3: admit from the head of `waiting` while the whole known length
    /// fits beside the watermark; no skipping ahead, except over a request
    /// whose LoRA adapter would be one more than `max_loras` in the step
    /// (vLLM V1 skips it and keeps its place; docs/lora.md).
    fn admit_waiting<O: Observer>(&mut self, at: SimTime, budget: &mut u32, obs: &mut O) {
        let cap = &self.cfg.capacity;
        let (admissible, watermark) = (cap.admissible_blocks() as i64, i64::from(cap.watermark_blocks));
        let max_loras = self.cfg.lora.as_ref().map(|l| l.max_loras as usize);
        if max_loras.is_some() {
            self.collect_step_loras(false);
        }
        // The waiting request considered: 0 but past skipped ones.
        let mut k = 0;
        while let Some(&slot) = self.waiting.get(k) {
            let seq = &self.slots[slot as usize];
            let need = self.cfg.capacity.blocks_for(u64::from(seq.known())) as i64;
            if need > admissible {
                self.reject_at(k, need as u64, at, obs);
                continue;
            }
            let full = self.running.len() >= self.cfg.max_num_sequences as usize;
            if *budget == 0 || full {
                break;
            }
            let adapter = seq.req.lora;
            let new_adapter = max_loras.is_some() && adapter != 0 && !self.step_loras.contains(&adapter);
            if new_adapter && max_loras.is_some_and(|m| self.step_loras.len() >= m) {
                k += 1;
                continue;
            }
            let arriving = seq.arriving_kv;
            let computed = if arriving > 0 {
                // KV that arrives by transfer: no lookup, every block new.
                if i64::from(self.kv.free()) - need < watermark {
                    break;
                }
                match &mut self.kv {
                    Kv::Count(k) => k.take(need as u32),
                    Kv::Prefix(p) => {
                        p.lookup(slot, 0); // no hit: clears the last lookup's
                        p.admit(slot, need as u32);
                    }
                }
                arriving
            } else {
                match &mut self.kv {
                    Kv::Count(k) => {
                        if i64::from(k.free()) - need < watermark {
                            break;
                        }
                        k.take(need as u32);
                        0
                    }
                    Kv::Prefix(p) => {
                        // Rules 1 and 2: the hit, then the test counting the
                        // hit blocks that leave the free queue.
                        let hit = p.lookup(slot, seq.known());
                        let new = need - i64::from(hit.blocks);
                        if i64::from(p.free()) - i64::from(hit.free_blocks) - new < watermark {
                            break;
                        }
                        p.admit(slot, new as u32);
                        let bs = self.cfg.capacity.block_size;
                        let c = hit.blocks * bs;
                        obs.prefix_lookup(seq.req.id, at, seq.known(), c);
                        // The blocks after the GPU's hit that a tier holds
                        // are loaded, not computed (their GPU blocks are
                        // among the new ones).
                        let loaded = match &mut self.tiers {
                            Some(t) => {
                                let hashes = p.hashes(slot);
                                let max = (((seq.known() - 1) / bs) as usize).min(hashes.len());
                                let from = hit.blocks as usize;
                                // (An empty run still clears the last load's counts.)
                                let (n, secs) = t.load(hashes.get(from..max).unwrap_or(&[]));
                                self.load_s += secs;
                                for (tier, &k) in t.last.iter().enumerate() {
                                    if k > 0 {
                                        obs.kv_loaded(seq.req.id, at, tier as u32, k * bs);
                                    }
                                }
                                n * bs
                            }
                            None => 0,
                        };
                        c + loaded
                    }
                }
            };
            if new_adapter {
                self.step_loras.push(adapter);
            }
            self.admit_at(k, need as u32, computed, at, budget, obs);
        }
    }

    /// The distinct adapters of the running requests, into `step_loras`:
    /// at admission those of every running request, scheduled in the
    /// step or not (vLLM 0.34's `scheduled_loras`); at the step's end
    /// the batch's.
    fn collect_step_loras(&mut self, of_batch: bool) {
        self.step_loras.clear();
        let n = if of_batch { self.batch.len() } else { self.running.len() };
        for i in 0..n {
            let slot = if of_batch { self.batch[i].0 } else { self.running[i] };
            let a = self.slots[slot as usize].req.lora;
            if a != 0 && !self.step_loras.contains(&a) {
                self.step_loras.push(a);
            }
        }
    }

    /// `waiting[k]`, whose known length takes `need` blocks, can never
    /// fit: rejected.
    fn reject_at<O: Observer>(&mut self, k: usize, need: u64, at: SimTime, obs: &mut O) {
        let Some(slot) = self.waiting.remove(k) else { return };
        let seq = &self.slots[slot as usize];
        self.queued_blocks -= need;
        self.waiting_resumes -= u64::from(seq.resumes());
        obs.rejected(seq.req.id, at, RejectReason::NeverFits);
        self.release(slot);
    }

    /// `waiting[k]` (the head, but past requests LoRA skipped) joins
    /// `running` holding `need` blocks with `c = computed`, and is
    /// scheduled for what the budget leaves of it.
    fn admit_at<O: Observer>(
        &mut self,
        k: usize,
        need: u32,
        computed: u32,
        at: SimTime,
        budget: &mut u32,
        obs: &mut O,
    ) {
        let Some(slot) = self.join_running(k, need, computed) else { return };
        let tokens = self.slots[slot as usize].remaining().min(*budget);
        self.add_to_batch(slot, tokens, at, obs);
        *budget -= tokens;
    }

    /// `waiting[k]` joins `running` holding `need` blocks with `c =
    /// computed`, not yet in the step's batch; returns its slot.
    fn join_running(&mut self, k: usize, need: u32, computed: u32) -> Option<u32> {
        let slot = self.waiting.remove(k)?;
        // What it added to the queued count (its blocks held may be fewer:
        // SGLang allocates a first chunk's only).
        self.queued_blocks -= self.cfg.capacity.blocks_for(u64::from(self.slots[slot as usize].known()));
        self.waiting_resumes -= u64::from(self.slots[slot as usize].resumes());
        let seq = &mut self.slots[slot as usize];
        seq.blocks = need;
        seq.computed = computed;
        seq.arriving_kv = 0;
        seq.register_at = 0;
        seq.state = State::Running;
        self.running.push(slot);
        Some(slot)
    }

    /// Blocks a request holds when it completes: the KV of its `P + N - 1`
    /// tokens (the last token is released, never computed).
    fn completion_blocks(&self, seq: &Seq) -> u64 {
        self.cfg.capacity.blocks_for(u64::from(seq.req.prompt) + u64::from(seq.req.output) - 1)
    }

    /// Steps 4 and 5: the step's duration, then the counters, the tokens and
    /// the finished requests, all at the step's end.
    fn finish_step<O: Observer>(&mut self, start: SimTime, preempted: u32, obs: &mut O) -> StepRecord {
        let shape = StepShape { batch: self.batch.len() as u64, ..self.shape };
        let (tokens, sum_ctx, prefill) = (shape.tokens, shape.sum_ctx, self.prefill);
        let cost = self.cfg.cost.cost(&shape);
        let draft_s = match &self.cfg.speculative {
            Some(spec) => spec.draft_time(&shape, self.drafting, self.drafting_ctx).total_s,
            None => 0.0,
        };
        let lora_s = match self.cfg.lora.is_some() {
            true => self.lora_time(start, obs),
            false => 0.0,
        };
        let end = start.plus_nanos(crate::time::secs_to_nanos(cost.total_s + draft_s + self.load_s + lora_s).max(1));
        let record = StepRecord {
            index: self.steps,
            start,
            end,
            batch_size: self.batch.len() as u32,
            tokens: tokens as u32,
            prefill_tokens: prefill as u32,
            sum_ctx,
            kv_blocks_used: self.kv.used(),
            running: self.running.len() as u32,
            waiting: self.waiting.len() as u32,
            preempted,
            compute_s: cost.compute_s,
            memory_s: cost.memory_s,
            cached_blocks: self.kv_blocks_cached(),
            evictions: self.step_evictions(),
        };
        let any_finished = match self.cfg.speculative.take() {
            None => self.release_tokens(end, obs),
            Some(spec) => {
                let any = self.release_verified(&spec, end, obs);
                self.cfg.speculative = Some(spec);
                any
            }
        };
        if any_finished {
            let slots = &self.slots;
            self.running.retain(|&s| slots[s as usize].state == State::Running);
            // SGLang's `batch_is_full` latch opens when a request leaves.
            self.sg.full = false;
        }
        record
    }

    /// With LoRA: the seconds the step's adapters add (docs/lora.md): the
    /// copies of those not in a GPU slot (each announced), then their
    /// math, `max(tokens x token_s, adapters x slot_read_s)`.
    fn lora_time<O: Observer>(&mut self, at: SimTime, obs: &mut O) -> f64 {
        self.collect_step_loras(true);
        let (Some(l), Some(slots)) = (&self.cfg.lora, &mut self.lora_slots) else { return 0.0 };
        let slots_ = &self.slots;
        let tokens: u64 =
            (self.batch.iter()).filter(|&&(s, _)| slots_[s as usize].req.lora != 0).map(|&(_, n)| u64::from(n)).sum();
        debug_assert!(self.step_loras.len() <= l.max_loras as usize, "a step uses more adapters than max_loras");
        slots.activate(&self.step_loras, self.steps, l.max_loras as usize);
        let mut load = 0.0;
        for &a in &slots.loaded {
            load += l.load_s.get(usize::from(a) - 1).copied().unwrap_or(0.0);
            obs.lora_loaded(u32::from(a) - 1, at);
        }
        load + l.step_s(tokens, self.step_loras.len())
    }

    /// Step 5: the batch's computed tokens, and a token for each request
    /// that reached its last known one; finished requests free their
    /// blocks. Returns whether any finished.
    fn release_tokens<O: Observer>(&mut self, end: SimTime, obs: &mut O) -> bool {
        let mut any_finished = false;
        for i in 0..self.batch.len() {
            let (slot, n) = self.batch[i];
            let seq = &mut self.slots[slot as usize];
            seq.computed += n;
            if seq.computed < seq.known() {
                continue;
            }
            seq.generated += 1;
            let (id, g, done) = (seq.req.id, seq.generated, seq.generated == seq.req.output);
            obs.token(id, end, g);
            if done {
                obs.finished(id, end);
                self.release(slot);
                any_finished = true;
            }
        }
        any_finished
    }

    /// [`Engine::release_tokens`] with speculative decoding: a request
    /// past its last known token verified drafts, and releases the kept
    /// ones and one more (docs/speculative.md).
    fn release_verified<O: Observer>(&mut self, spec: &Speculative, end: SimTime, obs: &mut O) -> bool {
        let mut any_finished = false;
        for i in 0..self.batch.len() {
            let (slot, n) = self.batch[i];
            let seq = &mut self.slots[slot as usize];
            seq.computed += n;
            if seq.computed < seq.known() {
                continue;
            }
            // Verified: the leading accepted drafts stay, the rest's KV is
            // dropped, and the target's own next token follows them.
            let drafted = seq.computed - seq.known();
            let mut release = 1;
            if drafted > 0 {
                let rng = self.spec_rng.as_mut().expect("a generator with speculative decoding");
                let accepted = spec.accepted(rng, seq.req.id, seq.generated, drafted);
                seq.computed -= drafted - accepted;
                release += accepted;
                obs.speculated(seq.req.id, end, drafted, accepted);
            }
            let release = release.min(seq.req.output - seq.generated);
            for _ in 0..release {
                seq.generated += 1;
                obs.token(seq.req.id, end, seq.generated);
            }
            if seq.generated == seq.req.output {
                obs.finished(seq.req.id, end);
                self.release(slot);
                any_finished = true;
            } else {
                // Proposed for the next step, within the context length.
                seq.drafts = spec.tokens.min(self.cfg.context_length.saturating_sub(seq.known()));
            }
        }
        any_finished
    }

    /// Schedules `tokens` of a request in this step; with prefix caching
    /// its full blocks among the first `c + tokens` are registered at once
    /// (rule 4), so a request scheduled later in the step can hit them.
    #[inline(always)]
    fn add_to_batch<O: Observer>(&mut self, slot: u32, tokens: u32, at: SimTime, obs: &mut O) {
        let seq = &self.slots[slot as usize];
        obs.scheduled(seq.req.id, at, tokens, seq.computed);
        self.add_to_batch_quietly(slot, tokens);
    }

    /// [`Engine::add_to_batch`] without its `scheduled` event.
    #[inline(always)]
    fn add_to_batch_quietly(&mut self, slot: u32, tokens: u32) {
        self.count_in_shape(slot, tokens);
        let seq = &mut self.slots[slot as usize];
        seq.drafts = 0;
        // Drafts are not content until verified: blocks register up to the
        // known tokens only.
        let content = (seq.computed + tokens).min(seq.known());
        if let Kv::Prefix(p) = &mut self.kv
            && u64::from(content) >= seq.register_at
        {
            match &mut self.tiers {
                None => seq.register_at = p.register(slot, content),
                Some(t) => {
                    // Written through to the tiers as the GPU registers them.
                    let before = p.registered(slot) as usize;
                    seq.register_at = p.register(slot, content);
                    let hashes = p.hashes(slot);
                    let to = (p.registered(slot) as usize).min(hashes.len());
                    if before < to {
                        t.store(&hashes[before..to]);
                    }
                }
            }
        }
        self.batch.push((slot, tokens));
    }

    /// Adds `tokens` of a request to the shape of the step being built.
    #[inline(always)]
    fn count_in_shape(&mut self, slot: u32, tokens: u32) {
        let seq = &self.slots[slot as usize];
        let (n, c) = (u64::from(tokens), u64::from(seq.computed));
        self.shape.tokens += n;
        self.shape.sum_ctx += c + n;
        self.shape.largest = self.shape.largest.max(n);
        // It samples when the step reaches its last known token (and with
        // drafts, goes past it); then it drafts again.
        let samples = c + n >= u64::from(seq.known());
        if self.cfg.speculative.is_some() && samples {
            self.drafting += 1;
            self.drafting_ctx += c + n;
        }
        // Only a model with an architecture costs attention and the LM head.
        if let Some(d) = &self.cfg.cost.deployment {
            self.shape.attention_pairs += arch::attention_pairs(n, c);
            self.shape.decode_pairs += arch::decode_pairs(n, c);
            self.shape.sampled += u64::from(samples);
            if d.sliding_window > 0 {
                self.shape.window_ctx += arch::window_ctx(n, c, d.sliding_window);
                self.shape.window_pairs += arch::window_pairs(n, c, d.sliding_window);
            }
        }
        if seq.remaining() > 1 || seq.generated == 0 {
            self.prefill += n;
        }
    }

    /// A running request takes `n` more blocks; the caller checked they are free.
    fn grow(&mut self, slot: u32, n: u32) {
        if n == 0 {
            return;
        }
        match &mut self.kv {
            Kv::Count(k) => k.take(n),
            Kv::Prefix(p) => p.allocate(slot, n),
        }
        self.slots[slot as usize].blocks += n;
    }

    /// A request lets go of its blocks (rule 5 with prefix caching).
    fn free_blocks(&mut self, slot: u32) {
        let seq = &mut self.slots[slot as usize];
        match &mut self.kv {
            Kv::Count(k) => k.give_back(seq.blocks),
            Kv::Prefix(p) => p.release(slot),
        }
        seq.blocks = 0;
    }

    /// Prefix-cache evictions in the step being built.
    fn step_evictions(&self) -> u32 {
        match &self.kv {
            Kv::Count(_) => 0,
            Kv::Prefix(p) => (p.evictions() - self.evictions_before) as u32,
        }
    }

    /// Blocks a sequence must add to hold `tokens` more tokens of KV.
    #[inline]
    fn extra_blocks(&self, seq: &Seq, tokens: u32) -> u32 {
        let tokens = u64::from(seq.computed + tokens);
        // Most steps stay inside the blocks held: no division then.
        if tokens <= self.cfg.capacity.tokens_in(seq.blocks) {
            return 0;
        }
        let want = self.cfg.capacity.blocks_for(tokens) as u32;
        want.saturating_sub(seq.blocks)
    }

    /// Frees the victim's blocks and puts it at the front of `waiting`.
    fn preempt<O: Observer>(&mut self, slot: u32, at: SimTime, obs: &mut O) {
        self.free_blocks(slot);
        let seq = &mut self.slots[slot as usize];
        seq.computed = 0;
        seq.drafts = 0;
        seq.state = State::Waiting;
        obs.preempted(seq.req.id, at);
        self.queued_blocks += self.cfg.capacity.blocks_for(u64::from(seq.known()));
        self.waiting_resumes += u64::from(seq.resumes());
        match self.cfg.scheduling_policy {
            SchedulingPolicy::Fcfs => self.waiting.push_front(slot),
            SchedulingPolicy::Priority => self.queue_by_priority(slot),
        }
    }

    /// Frees a slot and its blocks; the caller removed it from its queue.
    fn release(&mut self, slot: u32) {
        match &mut self.kv {
            // Blocks and content at once: the pool spares the work of a
            // request's own blocks (docs/prefix-caching.md, "Speed").
            Kv::Prefix(p) => {
                p.finish(slot);
                self.slots[slot as usize].blocks = 0;
            }
            Kv::Count(_) => self.free_blocks(slot),
        }
        self.retire(slot);
    }

    /// A request whose blocks are back leaves: its slot is free.
    fn retire(&mut self, slot: u32) {
        let seq = &mut self.slots[slot as usize];
        seq.state = State::Free;
        self.free_slots.push(slot);
    }

    /// Invariants, checked in debug builds after every step.
    fn debug_check(&self) {
        if cfg!(debug_assertions)
            && let Err(e) = self.check_invariants()
        {
            panic!("engine invariant broken: {e}");
        }
    }

    /// Checks the engine's bookkeeping: blocks held by running requests
    /// equal blocks in use (with prefix caching: every block's reference
    /// count equals the requests holding it, plus the pool's own checks in
    /// [`PrefixPool::check`]), used + free = total, every live request is
    /// in exactly one queue in the state that queue implies, waiting
    /// requests hold no KV, and the running set respects
    /// `max_num_sequences`. Tests call it after every step, in release
    /// builds too.
    pub fn check_invariants(&self) -> Result<(), String> {
        match &self.kv {
            Kv::Count(k) => {
                let held: u64 = self.running.iter().map(|&s| u64::from(self.slots[s as usize].blocks)).sum();
                if held != u64::from(k.used()) {
                    return Err(format!("running requests hold {held} blocks but {} are used", k.used()));
                }
            }
            Kv::Prefix(p) => {
                let slots = &self.slots;
                p.check(|slot| slots.get(slot as usize).is_some_and(|s| s.state == State::Running))?;
                for &slot in &self.running {
                    let seq = &self.slots[slot as usize];
                    if p.held(slot) != seq.blocks {
                        return Err(format!(
                            "request {} holds {} blocks, counted {}",
                            seq.req.id,
                            p.held(slot),
                            seq.blocks
                        ));
                    }
                    if u64::from(seq.blocks) < self.cfg.capacity.blocks_for(u64::from(seq.computed)) {
                        return Err(format!(
                            "request {} computed {} tokens in {} blocks",
                            seq.req.id, seq.computed, seq.blocks
                        ));
                    }
                }
            }
        }
        if self.kv.used() + self.kv.free() != self.kv.total() {
            return Err("used + free != total".into());
        }
        // TensorRT-LLM's no-evict guarantee: what the running requests still
        // need to complete is free.
        if self.cfg.policy == Policy::Trtllm && self.cfg.trtllm.reserves_completion() {
            let owed: u64 = self
                .running
                .iter()
                .map(|&s| {
                    let seq = &self.slots[s as usize];
                    self.completion_blocks(seq).saturating_sub(u64::from(seq.blocks))
                })
                .sum();
            if owed > u64::from(self.kv.free()) {
                return Err(format!(
                    "running requests need {owed} more blocks to complete, {} are free",
                    self.kv.free()
                ));
            }
        }
        let resumes = self.waiting.iter().filter(|&&s| self.slots[s as usize].resumes()).count() as u64;
        if resumes != self.waiting_resumes {
            return Err(format!("{resumes} waiting requests resume, counted {}", self.waiting_resumes));
        }
        let mut seen = vec![0u8; self.slots.len()];
        let queues: [(&str, State, Vec<u32>); 3] = [
            ("pending", State::Pending, self.pending.iter().copied().collect()),
            ("waiting", State::Waiting, self.waiting.iter().copied().collect()),
            ("running", State::Running, self.running.clone()),
        ];
        for (name, state, slots) in &queues {
            for &slot in slots {
                let seq = &self.slots[slot as usize];
                seen[slot as usize] += 1;
                if seq.state != *state {
                    return Err(format!("request {} is in {name} but in state {:?}", seq.req.id, seq.state));
                }
                if *state != State::Running && (seq.blocks != 0 || seq.computed != 0 || seq.drafts != 0) {
                    return Err(format!("request {} in {name} holds KV", seq.req.id));
                }
                let k = self.cfg.speculative.as_ref().map_or(0, |s| s.tokens);
                if seq.drafts > k || (seq.drafts > 0 && seq.remaining() != 1) {
                    return Err(format!("request {} holds {} drafts out of turn", seq.req.id, seq.drafts));
                }
                if seq.computed > seq.known() || seq.generated >= seq.req.output {
                    return Err(format!("request {} has impossible counters", seq.req.id));
                }
            }
        }
        let queued: u64 = (self.pending.iter().chain(&self.waiting))
            .map(|&s| self.cfg.capacity.blocks_for(u64::from(self.slots[s as usize].known())))
            .sum();
        if queued != self.queued_blocks {
            return Err(format!("queued requests need {queued} blocks but {} are counted", self.queued_blocks));
        }
        if let Some(slot) = seen.iter().position(|&n| n > 1) {
            return Err(format!("request {} is in two queues", self.slots[slot].req.id));
        }
        let live = self.pending.len() + self.waiting.len() + self.running.len();
        let held = self.slots.iter().filter(|s| s.state != State::Free).count();
        if live != held {
            return Err(format!("{live} requests queued but {held} slots held"));
        }
        if self.running.len() > self.cfg.max_num_sequences as usize {
            return Err("more running requests than max_num_sequences".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
