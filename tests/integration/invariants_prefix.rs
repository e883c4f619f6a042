//! Prefix caching, checked from outside. Seeded randomized runs over
//! generated scenarios with `kv_cache.prefix_caching: true`, shared
//! prefixes and sessions, small caches and overload, against an
//! independent model of the cache: it rebuilds every request's tokens from
//! the source's content segments, names each block by its whole prefix
//! (interned, so no hash function is shared with the engine), keeps its own
//! reference counts, LRU free queue and content index with naive data
//! structures, and replays the engine's events. After every event and step
//! it must agree with the engine: the exact hit of every lookup, the
//! admission test, blocks in use, cached blocks and evictions per step, and
//! the engine's own invariant check (reference counts equal the holders, a
//! block in the free queue has count 0, in use + free = total, every cached
//! hash lists exactly the blocks holding it with the earliest-registered
//! first). Then analytic checks: closed forms for shared system prompts and
//! for multi-turn sessions.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::rc::Rc;

use llmsim_core::engine::prefix::hash::{Segment, generated_key, prompt_key};
use llmsim_core::engine::{Engine, Observer, RejectReason, Request, RequestId, StepRecord};
use llmsim_core::time::SimTime;
use llmsim_planner::metrics::CollectorOptions;
use llmsim_planner::run_driver::{Setup, Stepping, drive};
use llmsim_planner::sim::Single;
use llmsim_planner::workload::{AnySource, Source};
use llmsim_scenario::config::{self, Scenario};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How many scenarios one test run generates.
const SCENARIOS: u64 = 500;

/// Forwards a source and records each request's prompt segments.
struct Recording {
    inner: AnySource,
    log: Rc<RefCell<Vec<Vec<Segment>>>>,
}

impl Source for Recording {
    fn peek(&self) -> Option<SimTime> {
        self.inner.peek()
    }
    fn pop(&mut self) -> Option<Request> {
        let req = self.inner.pop()?;
        let segs = match self.inner.segments() {
            [] => vec![Segment::new(prompt_key(req.id), req.prompt)],
            s => s.to_vec(),
        };
        self.log.borrow_mut().push(segs);
        Some(req)
    }
    fn segments(&self) -> &[Segment] {
        self.inner.segments()
    }
    fn own_from(&self) -> Option<usize> {
        // The engine takes the own-content path; the model does not care.
        self.inner.own_from()
    }
    fn done(&mut self, id: RequestId, at: SimTime) {
        self.inner.done(id, at);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime) {
        self.inner.rejected(id, at);
    }
}

#[derive(Clone, Debug, Default)]
struct Req {
    prompt: u32,
    output: u32,
    generated: u32,
    computed: u32,
    /// Names of its blocks' whole prefixes, for the first P + N - 1 tokens.
    chain: Vec<u64>,
    table: Vec<usize>,
    registered: usize,
    admissions: u32,
}

#[derive(Clone, Debug, Default)]
struct Block {
    refs: i64,
    /// The prefix it holds and when it was registered.
    content: Option<(u64, u64)>,
}

/// The independent model of the cache.
struct Model {
    bs: u32,
    watermark: u32,
    segments: Rc<RefCell<Vec<Vec<Segment>>>>,
    /// (previous prefix name, the block's tokens as (key, offset)) -> name.
    names: BTreeMap<(u64, Vec<(u64, u32)>), u64>,
    reqs: Vec<Req>,
    blocks: Vec<Block>,
    free: VecDeque<usize>,
    /// Prefix name -> (registration number, block) of every holder.
    holders: BTreeMap<u64, BTreeSet<(u64, usize)>>,
    ever_registered: BTreeSet<u64>,
    registrations: u64,
    /// The admission a lookup announced, checked at its `scheduled` event:
    /// the GPU's hit blocks and the blocks loaded from the offload tier.
    admitting: Option<(RequestId, Vec<usize>, u32)>,
    /// KV offload (docs/offload.md): the tier's capacity in blocks and its
    /// prefix names, least recently used first; loads seen.
    tier: Option<(usize, VecDeque<u64>)>,
    /// The tokens the last `kv_loaded` event announced.
    loaded_event: Option<(RequestId, u32)>,
    freed_this_step: u64,
    evictions_this_step: u64,
    errors: Vec<String>,
    stats: Coverage,
}

#[derive(Default, Debug, Clone)]
struct Coverage {
    requests: u64,
    lookups: u64,
    hit_lookups: u64,
    hit_tokens: u64,
    evictions: u64,
    preemptions: u64,
    /// Re-admissions after a preemption that hit their own earlier blocks.
    rehits: u64,
    /// A hash registered while another block already held it.
    duplicates: u64,
    /// Admissions where free hit blocks made the difference in the test.
    free_hits: u64,
    rejected: u64,
    /// Prompt tokens loaded from the offload tier.
    loaded_tokens: u64,
}

impl Model {
    fn new(s: &Scenario, segments: Rc<RefCell<Vec<Vec<Segment>>>>) -> Model {
        let total = s.capacity.num_blocks as usize;
        Model {
            bs: s.capacity.block_size,
            watermark: s.capacity.watermark_blocks,
            segments,
            names: BTreeMap::new(),
            reqs: Vec::new(),
            blocks: vec![Block::default(); total],
            free: (0..total).collect(),
            holders: BTreeMap::new(),
            ever_registered: BTreeSet::new(),
            registrations: 0,
            admitting: None,
            tier: s.offload_tiers().map(|o| (o.tiers[0].blocks as usize, VecDeque::new())),
            loaded_event: None,
            freed_this_step: 0,
            evictions_this_step: 0,
            errors: Vec::new(),
            stats: Coverage::default(),
        }
    }

    fn fail(&mut self, msg: String) {
        if self.errors.len() < 5 {
            self.errors.push(msg);
        }
    }

    fn used(&self) -> u64 {
        (self.blocks.len() - self.free.len()) as u64
    }

    fn cached(&self) -> u64 {
        self.blocks.iter().filter(|b| b.content.is_some()).count() as u64
    }

    /// Names the prefixes of a request's full blocks from its tokens.
    fn chain(&mut self, id: RequestId, prompt: u32, output: u32) -> Vec<u64> {
        let mut tokens: Vec<(u64, u32)> = Vec::new();
        for s in &self.segments.borrow()[id as usize] {
            tokens.extend((0..s.len).map(|o| (s.key, o)));
        }
        assert_eq!(tokens.len() as u64, u64::from(prompt), "request {id}: segments do not add up to the prompt");
        tokens.extend((0..output).map(|o| (generated_key(id), o)));
        tokens.truncate((prompt + output - 1) as usize);
        let mut prev = u64::MAX;
        let mut chain = Vec::new();
        for block in tokens.chunks_exact(self.bs as usize) {
            let next = self.names.len() as u64;
            prev = *self.names.entry((prev, block.to_vec())).or_insert(next);
            chain.push(prev);
        }
        chain
    }

    fn take_free(&mut self) -> usize {
        let b = self.free.pop_front().expect("the engine allocated more blocks than were free");
        if let Some((name, reg)) = self.blocks[b].content.take() {
            let set = self.holders.get_mut(&name).expect("a cached block is indexed");
            set.remove(&(reg, b));
            if set.is_empty() {
                self.holders.remove(&name);
            }
            self.evictions_this_step += 1;
            self.stats.evictions += 1;
        }
        self.blocks[b].refs = 1;
        b
    }

    fn release(&mut self, id: RequestId) -> u64 {
        let table = std::mem::take(&mut self.reqs[id as usize].table);
        self.reqs[id as usize].registered = 0;
        let mut zeroed = 0;
        for &b in table.iter().rev() {
            self.blocks[b].refs -= 1;
            if self.blocks[b].refs < 0 {
                self.fail(format!("block {b}: negative reference count"));
            }
            if self.blocks[b].refs == 0 {
                self.free.push_back(b);
                zeroed += 1;
            }
        }
        zeroed
    }

    fn register(&mut self, id: RequestId, upto: u32) {
        let r = &self.reqs[id as usize];
        let full = ((upto / self.bs) as usize).min(r.chain.len()).min(r.table.len());
        for i in r.registered..full {
            let (b, name) = (self.reqs[id as usize].table[i], self.reqs[id as usize].chain[i]);
            if self.blocks[b].content.is_some() {
                self.fail(format!("request {id}: block {b} registered twice"));
            }
            let reg = self.registrations;
            self.registrations += 1;
            self.blocks[b].content = Some((name, reg));
            let set = self.holders.entry(name).or_default();
            if !set.is_empty() {
                self.stats.duplicates += 1;
            }
            set.insert((reg, b));
            self.ever_registered.insert(name);
            // Written through to the tier as registered.
            self.tier_touch(name);
        }
        let r = &mut self.reqs[id as usize];
        r.registered = r.registered.max(full);
    }

    /// `name` becomes the tier's most recently used (stored if new, the
    /// least recently used leaving a full tier).
    fn tier_touch(&mut self, name: u64) {
        let Some((cap, lru)) = &mut self.tier else { return };
        if let Some(i) = lru.iter().position(|&n| n == name) {
            lru.remove(i);
        } else if lru.len() == *cap {
            lru.pop_front();
        }
        if *cap > 0 {
            lru.push_back(name);
        }
    }

    /// Compares the model with the engine between steps.
    fn after_step(&mut self, engine: &Engine) {
        if let Err(e) = engine.check_invariants() {
            self.fail(format!("engine: {e}"));
        }
        if u64::from(engine.kv_blocks_used()) != self.used() {
            self.fail(format!("engine uses {} blocks, model {}", engine.kv_blocks_used(), self.used()));
        }
        if u64::from(engine.kv_blocks_cached()) != self.cached() {
            self.fail(format!("engine caches {} blocks, model {}", engine.kv_blocks_cached(), self.cached()));
        }
        for (b, block) in self.blocks.iter().enumerate() {
            let listed = self.free.contains(&b);
            if (block.refs == 0) != listed {
                self.errors.push(format!("block {b}: {} references, in the free queue: {listed}", block.refs));
                break;
            }
        }
    }
}

impl Observer for Model {
    fn arrived(&mut self, id: RequestId, _at: SimTime, prompt: u32, output: u32) {
        if id as usize != self.reqs.len() {
            self.fail(format!("id {id} out of order"));
        }
        let chain = self.chain(id, prompt, output);
        self.reqs.push(Req { prompt, output, chain, ..Req::default() });
        self.stats.requests += 1;
    }

    fn prefix_lookup(&mut self, id: RequestId, _at: SimTime, queried: u32, hit: u32) {
        let r = self.reqs[id as usize].clone();
        let known = r.prompt + r.generated;
        if queried != known || !r.table.is_empty() {
            self.fail(format!("request {id}: lookup of {queried} tokens with {known} known, {} held", r.table.len()));
        }
        // Rule 1: the longest run of cached leading blocks, the last token excluded.
        let max = ((known - 1) / self.bs) as usize;
        let mut hits = Vec::new();
        for name in r.chain.iter().take(max) {
            let Some(&(_, b)) = self.holders.get(name).and_then(|s| s.first()) else { break };
            if !self.ever_registered.contains(name) {
                self.fail(format!("request {id} hit content never registered"));
            }
            hits.push(b);
        }
        let want = hits.len() as u32 * self.bs;
        if hit != want {
            self.fail(format!("request {id}: engine hit {hit} of {known} tokens, model {want}"));
        }
        // Rule 2: the admission test, hit blocks in the free queue leaving it.
        let free_hits = hits.iter().filter(|&&b| self.blocks[b].refs == 0).count() as i64;
        let new = i64::from(known.div_ceil(self.bs)) - hits.len() as i64;
        let free = self.free.len() as i64;
        if free - free_hits - new < i64::from(self.watermark) {
            self.fail(format!("request {id} admitted with {free} free, {free_hits} free hits, {new} new"));
        }
        if free_hits > 0 && free - new >= i64::from(self.watermark) && free - free_hits - new < free - new {
            self.stats.free_hits += 1;
        }
        self.stats.lookups += 1;
        if !hits.is_empty() {
            self.stats.hit_lookups += 1;
            self.stats.hit_tokens += u64::from(want);
            if r.admissions > 0 {
                self.stats.rehits += 1;
            }
        }
        // The blocks after the hit that the tier holds are loaded.
        let mut loaded = 0;
        if self.tier.is_some() {
            for &name in &r.chain[hits.len().min(max)..max.min(r.chain.len())] {
                if !self.tier.as_ref().is_some_and(|(_, lru)| lru.contains(&name)) {
                    break;
                }
                self.tier_touch(name);
                loaded += 1;
            }
            self.stats.loaded_tokens += u64::from(loaded * self.bs);
        }
        self.admitting = Some((id, hits, loaded));
        self.loaded_event = None;
    }

    fn kv_loaded(&mut self, id: RequestId, _at: SimTime, tier: u32, tokens: u32) {
        if tier != 0 || self.loaded_event.is_some() {
            self.fail(format!("request {id}: a second load or tier {tier}"));
        }
        self.loaded_event = Some((id, tokens));
    }

    fn scheduled(&mut self, id: RequestId, _at: SimTime, tokens: u32, computed: u32) {
        match self.admitting.take() {
            Some((admitted, hits, loaded)) if admitted == id => {
                let announced = self.loaded_event.take().map_or(0, |(who, t)| if who == id { t } else { u32::MAX });
                if announced != loaded * self.bs {
                    self.fail(format!("request {id}: engine loaded {announced} tokens, model {}", loaded * self.bs));
                }
                if computed != (hits.len() as u32 + loaded) * self.bs {
                    self.fail(format!(
                        "request {id} admitted with {computed} computed, {} hit blocks and {loaded} loaded",
                        hits.len()
                    ));
                }
                for &b in &hits {
                    if self.blocks[b].refs == 0 {
                        self.free.retain(|&x| x != b);
                    }
                    self.blocks[b].refs += 1;
                }
                let r = &self.reqs[id as usize];
                let need = (r.prompt + r.generated).div_ceil(self.bs) as usize - hits.len();
                let mut table = hits;
                for _ in 0..need {
                    table.push(self.take_free());
                }
                let r = &mut self.reqs[id as usize];
                r.registered = table.len() - need;
                r.table = table;
                r.computed = computed;
                r.admissions += 1;
            }
            Some(other) => {
                self.fail(format!("lookup of request {} followed by scheduling {id}", other.0));
            }
            None => {
                let r = self.reqs[id as usize].clone();
                if r.table.is_empty() {
                    self.fail(format!("request {id} scheduled without an admission lookup"));
                }
                if computed != r.computed {
                    self.fail(format!("request {id}: engine says {computed} computed, model {}", r.computed));
                }
                let need = (computed + tokens).div_ceil(self.bs) as usize;
                for _ in r.table.len()..need {
                    let b = self.take_free();
                    self.reqs[id as usize].table.push(b);
                }
            }
        }
        // Rule 4: registration at scheduling time.
        self.register(id, computed + tokens);
        self.reqs[id as usize].computed = computed + tokens;
    }

    fn preempted(&mut self, id: RequestId, _at: SimTime) {
        self.release(id);
        self.reqs[id as usize].computed = 0;
        self.stats.preemptions += 1;
    }

    fn token(&mut self, id: RequestId, _at: SimTime, _index: u32) {
        self.reqs[id as usize].generated += 1;
    }

    fn finished(&mut self, id: RequestId, _at: SimTime) {
        let r = &self.reqs[id as usize];
        if r.generated != r.output {
            self.fail(format!("request {id} finished with {} of {} tokens", r.generated, r.output));
        }
        self.freed_this_step += self.release(id);
    }

    fn rejected(&mut self, id: RequestId, _at: SimTime, _reason: RejectReason) {
        if !self.reqs[id as usize].table.is_empty() {
            self.fail(format!("request {id} rejected while holding KV"));
        }
        self.stats.rejected += 1;
    }

    fn step(&mut self, s: &StepRecord) {
        if u64::from(s.kv_blocks_used) != self.used() + self.freed_this_step {
            self.fail(format!(
                "step {}: {} blocks used, model {}",
                s.index,
                s.kv_blocks_used,
                self.used() + self.freed_this_step
            ));
        }
        if u64::from(s.cached_blocks) != self.cached() {
            self.fail(format!("step {}: {} cached blocks, model {}", s.index, s.cached_blocks, self.cached()));
        }
        if u64::from(s.evictions) != self.evictions_this_step {
            self.fail(format!("step {}: {} evictions, model {}", s.index, s.evictions, self.evictions_this_step));
        }
        self.freed_this_step = 0;
        self.evictions_this_step = 0;
    }
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, xs: &[T]) -> T {
    xs[rng.random_range(0..xs.len())]
}

/// A random trace with content columns: rows naming one of a few
/// prefixes (sometimes the whole prompt, so a block is computed again by a
/// later request and held twice), session continuations (sometimes with no
/// new tokens) and plain rows. Returns the CSV text.
fn trace_csv(rng: &mut ChaCha8Rng, scale: u32, rows: usize) -> String {
    let mut out = String::from("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens,session_id\n");
    let mut t = 0.0;
    let mut sessions: Vec<(u32, u32)> = Vec::new();
    for i in 0..rows {
        t += pick(rng, &[0.0, 0.001, 0.02, 0.3]);
        let output = rng.random_range(1..=scale / 2 + 1);
        match rng.random_range(0..4) {
            0 if !sessions.is_empty() => {
                let s = rng.random_range(0..sessions.len());
                let (p, o) = sessions[s];
                let prompt = p + o + pick(rng, &[0, 0, 1, scale]);
                sessions[s] = (prompt, output);
                out.push_str(&format!("{t},{prompt},{output},,,s{s}\n"));
            }
            0 | 1 => {
                let prompt = rng.random_range(1..=scale);
                let prefix = if rng.random_range(0..3) == 0 { prompt } else { rng.random_range(1..=prompt) };
                let id = pick(rng, &["a", "b", "c"]);
                let session = if rng.random_range(0..2) == 0 {
                    sessions.push((prompt, output));
                    format!("s{}", sessions.len() - 1)
                } else {
                    String::new()
                };
                out.push_str(&format!("{t},{prompt},{output},{id},{prefix},{session}\n"));
            }
            _ => {
                let prompt = rng.random_range(1..=scale);
                out.push_str(&format!("{t},{prompt},{output},,,\n"));
            }
        }
        let _ = i;
    }
    out
}

/// A random scenario with prefix caching: small caches, shared prefixes,
/// sessions, traces with content columns, tight budgets and overload are
/// common. Trace files go to `dir`.
fn generate(i: u64, dir: &Path) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(0x9E37_79B9 + i);
    let block_size = pick(&mut rng, &[1, 2, 4, 16]);
    let num_blocks = pick(&mut rng, &[4, 12, 40, 150, 600]);
    let watermark = pick(&mut rng, &[0.0, 0.0, 0.05, 0.2]);
    let budget = pick(&mut rng, &[3, 16, 64, 512, 8192]);
    let max_seqs = pick(&mut rng, &[1, 3, 16, 64]);
    let context = pick(&mut rng, &[256, 2048, 8192]);
    let scale = pick(&mut rng, &[4, 24, 120, 400]);
    if rng.random_range(0..4) == 0 {
        let file = dir.join(format!("trace-{i}.csv"));
        let rows = rng.random_range(1..=80);
        std::fs::write(&file, trace_csv(&mut rng, scale, rows)).expect("write a trace");
        return format!(
            "name: gen-prefix-trace-{i}
hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: {context}
  weights: {{parameters_billions: 7}}
  kv_cache: {{bytes_per_token: 131072, block_size: {block_size}, watermark: {watermark}, num_blocks: {num_blocks}, prefix_caching: true}}
scheduler: {{max_batch_tokens: {budget}, max_num_sequences: {max_seqs}}}
workload:
  arrivals: {{trace: {}}}
",
            file.display()
        );
    }
    let arrivals = match rng.random_range(0..3) {
        0 => format!("poisson: {{rate: {}}}", pick(&mut rng, &[2.0, 50.0, 2000.0])),
        1 => format!("constant: {{rate: {}}}", pick(&mut rng, &[5.0, 500.0])),
        _ => format!(
            "closed: {{concurrency: {}, think_time_s: {}}}",
            pick(&mut rng, &[1, 4, 32]),
            pick(&mut rng, &[0.0, 0.01])
        ),
    };
    let mut extra = String::new();
    if rng.random_range(0..3) > 0 {
        let groups = pick(&mut rng, &[1, 2, 5, 40]);
        let tokens = rng.random_range(1..=scale * 2);
        extra.push_str(&format!("  shared_prefix: {{groups: {groups}, tokens: {tokens}}}\n"));
    }
    if rng.random_range(0..2) > 0 {
        let turns = pick(&mut rng, &["1", "3", "{uniform: [1, 6]}"]);
        let think = pick(&mut rng, &["0", "0.01", "{exponential: {mean: 0.05}}"]);
        extra.push_str(&format!("  sessions: {{turns: {turns}, think_s: {think}}}\n"));
    }
    format!(
        "name: gen-prefix-{i}
hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: {context}
  weights: {{parameters_billions: 7}}
  kv_cache: {{bytes_per_token: 131072, block_size: {block_size}, watermark: {watermark}, num_blocks: {num_blocks}, prefix_caching: true}}
scheduler: {{max_batch_tokens: {budget}, max_num_sequences: {max_seqs}}}
workload:
  seed: {seed}
  arrivals: {{{arrivals}}}
  requests: {requests}
  prompt_tokens: {{uniform: [1, {scale}]}}
  output_tokens: {{uniform: [1, {out}]}}
{extra}",
        seed = rng.random_range(0..1000),
        requests = rng.random_range(1..=80),
        out = scale / 2 + 1,
    )
}

fn scenario(text: &str) -> Scenario {
    let file = Path::new("generated.yml");
    let raw = config::parse_str(text, file).unwrap_or_else(|e| panic!("{e}\n{text}"));
    config::validate::scenario(raw, file).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn check_one(text: &str, total: &mut Coverage) {
    let s = scenario(text);
    let log = Rc::new(RefCell::new(Vec::new()));
    let mut engine = Engine::new(s.engine_config());
    let mut source = Recording { inner: AnySource::new(&s), log: log.clone() };
    let mut model = Model::new(&s, log);
    drive(Single::new(&mut engine), &mut source, &mut model, &Setup::default(), |_, e, m| m.after_step(e), &mut |_| {})
        .expect("within the run limits");
    assert!(engine.is_idle(), "engine not idle at the end\n{text}");
    assert!(model.errors.is_empty(), "{:#?}\n{text}", model.errors);
    let c = &model.stats;
    total.requests += c.requests;
    total.lookups += c.lookups;
    total.hit_lookups += c.hit_lookups;
    total.hit_tokens += c.hit_tokens;
    total.evictions += c.evictions;
    total.preemptions += c.preemptions;
    total.rehits += c.rehits;
    total.duplicates += c.duplicates;
    total.free_hits += c.free_hits;
    total.rejected += c.rejected;
    total.loaded_tokens += c.loaded_tokens;
}

#[test]
fn every_generated_prefix_caching_scenario_agrees_with_an_independent_cache_model() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut total = Coverage::default();
    for i in 0..SCENARIOS {
        check_one(&generate(i, dir.path()), &mut total);
    }
    // The generator must reach the hard cases.
    assert!(total.hit_lookups > 2_000 && total.evictions > 2_000, "{total:?}");
    assert!(total.preemptions > 500 && total.rehits > 100, "{total:?}");
    assert!(total.duplicates > 50 && total.free_hits > 50 && total.rejected > 50, "{total:?}");
    eprintln!("prefix-cache model agreed over {SCENARIOS} scenarios: {total:?}");
}

/// The same generated scenarios with a host-memory offload tier of 2 to
/// 5,000 blocks (docs/offload.md): the model also keeps the tier (written
/// through at registration, least recently used out, the blocks after the
/// GPU's hit that it holds loaded at admission) and must agree with every
/// load the engine announces and every admission's `c`.
#[test]
fn generated_prefix_scenarios_with_an_offload_tier_agree_with_the_model() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut total = Coverage::default();
    for i in 0..SCENARIOS / 2 {
        let text = generate(i, dir.path());
        let bs: u64 = text.split("block_size: ").nth(1).and_then(|t| t.split(',').next()).unwrap().parse().unwrap();
        let blocks = [2u64, 30, 300, 5000][(i % 4) as usize];
        // bytes_per_token 131,072 = 2^17: a block is 2^17 x bs bytes, so
        // this many GiB is exactly `blocks` blocks.
        let gib = (blocks * bs) as f64 / 8192.0;
        let text = text.replacen(
            "prefix_caching: true}",
            &format!("prefix_caching: true, offload: {{cpu: {{gib: {gib}, bandwidth_gbps: 50}}}}}}"),
            1,
        );
        let s = scenario(&text);
        assert_eq!(s.offload_tiers().unwrap().tiers[0].blocks, blocks, "{text}");
        check_one(&text, &mut total);
    }
    assert!(total.loaded_tokens > 5_000 && total.preemptions > 100, "{total:?}");
    eprintln!("offload tier model agreed over {} scenarios: {total:?}", SCENARIOS / 2);
}

// ---- analytic checks ----

fn run_yaml(text: &str) -> llmsim_planner::metrics::RunOutput {
    llmsim_planner::Run::new(&scenario(text)).go().expect("within the run limits")
}

fn chat(groups: u32, prefix: u32, unique: u32, block_size: u32, requests: u64, seed: u64) -> String {
    format!(
        "name: chat
hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: 32768
  weights: {{parameters_billions: 6.74}}
  kv_cache: {{bytes_per_token: 524288, block_size: {block_size}, prefix_caching: true}}
workload:
  seed: {seed}
  arrivals: {{poisson: {{rate: 4}}}}
  requests: {requests}
  prompt_tokens: {unique}
  output_tokens: 32
  shared_prefix: {{groups: {groups}, tokens: {prefix}}}
"
    )
}

#[test]
fn shared_system_prompts_hit_at_the_closed_form_rate() {
    // G groups of an L-token system prompt, P unique tokens, a cache that
    // never evicts (7,609 blocks; at 4 req/s a few requests run at once).
    // The first request of each group computes everything; every later one
    // finds the prefix's full blocks, floor(L / bs) * bs tokens (the block
    // straddling prefix and unique tokens is unique). Over N requests:
    //   hit = (N - G) * floor(L / bs) * bs,  queried = N * (L + P),
    //   rate = (1 - G / N) * floor(L / bs) * bs / (L + P)
    //     -> floor(L / bs) * bs / (L + P) as N grows.
    for (g, l, p, bs) in [(4u64, 1000u64, 200u64, 16u64), (8, 100, 466, 16), (3, 37, 5, 4), (1, 512, 512, 16)] {
        for n in [200u64, 1000, 3000] {
            for seed in [1, 2, 3] {
                let out = run_yaml(&chat(g as u32, l as u32, p as u32, bs as u32, n, seed));
                let pc = out.result.prefix_cache.expect("prefix_cache reported");
                assert_eq!(out.result.preemptions, 0, "the closed form assumes no preemption");
                let shared = l / bs * bs;
                assert_eq!(pc.queried_tokens, n * (l + p), "G={g} L={l} P={p} N={n}");
                assert_eq!(pc.hit_tokens, (n - g) * shared, "G={g} L={l} P={p} N={n} seed {seed}");
                let rate = (1.0 - g as f64 / n as f64) * shared as f64 / (l + p) as f64;
                assert!((pc.hit_rate - rate).abs() < 1e-12, "{} vs {rate}", pc.hit_rate);
            }
        }
    }
}

#[test]
fn multi_turn_sessions_hit_their_whole_history() {
    // One user, conversations of 4 turns back to back; turn j+1's prompt is
    // turn j's prompt P_j and answer N_j plus new tokens. Turn j computed
    // its first P_j + N_j - 1 tokens (the last answer token is sampled, not
    // fed back) and registered their full blocks, so turn j+1 finds
    // floor((P_j + N_j - 1) / bs) * bs tokens; a first turn finds none.
    for bs in [1u32, 4, 16] {
        let text = format!(
            "name: sessions
hardware: {{hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}}
model:
  context_length: 32768
  weights: {{parameters_billions: 6.74}}
  kv_cache: {{bytes_per_token: 524288, block_size: {bs}, prefix_caching: true}}
workload:
  seed: 5
  arrivals: {{closed: {{concurrency: 1}}}}
  requests: 40
  prompt_tokens: {{uniform: [20, 300]}}
  output_tokens: {{uniform: [1, 200]}}
  sessions: {{turns: 4, think_s: 1}}
"
        );
        let out = run_yaml(&text);
        assert_eq!(out.requests.len(), 40);
        for (id, r) in out.requests.iter().enumerate() {
            let want = match id % 4 {
                0 => 0,
                _ => {
                    let prev = &out.requests[id - 1];
                    assert!(r.prompt > prev.prompt + prev.output, "turn {id} carries its history");
                    (prev.prompt + prev.output - 1) / bs * bs
                }
            };
            assert_eq!(r.cached_tokens, Some(want), "request {id}, block size {bs}");
        }
    }
}

#[test]
fn sessions_under_many_users_keep_each_history_apart() {
    // 8 users with 3-turn conversations at once: a turn only finds its own
    // conversation's history. Each session's turns are found through the
    // trace rows `llmsim trace` would write (the session column).
    let text = "name: sessions
hardware: {hbm_gib: 80, memory_bandwidth_gbps: 3000, peak_tflops: 989}
model:
  context_length: 32768
  weights: {parameters_billions: 6.74}
  kv_cache: {bytes_per_token: 524288, prefix_caching: true}
workload:
  seed: 9
  arrivals: {closed: {concurrency: 8, think_time_s: 0.5}}
  requests: 120
  prompt_tokens: {uniform: [20, 400]}
  output_tokens: {uniform: [5, 100]}
  sessions: {turns: 3, think_s: {exponential: {mean: 2}}}
";
    let s = scenario(text);
    let mut engine = Engine::new(s.engine_config());
    let mut source = AnySource::new(&s);
    source.keep_rows();
    let mut collector = llmsim_planner::metrics::Collector::new(&s.capacity, CollectorOptions::default());
    drive(Single::new(&mut engine), &mut source, &mut collector, &Setup::default(), |_, _, _| {}, &mut |_| {})
        .expect("within the run limits");
    let rows = source.row_content().expect("sessions have content");
    let reqs = collector.requests();
    let mut last: HashMap<String, usize> = HashMap::new();
    let mut continued = 0;
    for (id, r) in reqs.iter().enumerate() {
        let session = rows[id].session.clone().expect("every row has a session");
        let want = match last.insert(session, id) {
            None => 0,
            Some(prev) => {
                continued += 1;
                (reqs[prev].prompt + reqs[prev].output - 1) / 16 * 16
            }
        };
        assert_eq!(r.cached_tokens, Some(want), "request {id}");
    }
    assert!(continued >= 70, "{continued}");
}

// ---- the own-content path against hashing every block ----

/// Forwards a source but says none of its content is a request's own, so
/// the driver hashes and indexes every block (the path before own content).
struct HashEverything(AnySource);

impl Source for HashEverything {
    fn peek(&self) -> Option<SimTime> {
        self.0.peek()
    }
    fn pop(&mut self) -> Option<Request> {
        self.0.pop()
    }
    fn segments(&self) -> &[Segment] {
        self.0.segments()
    }
    fn block_hashes(&self) -> Option<&[u64]> {
        self.0.block_hashes()
    }
    fn session(&self) -> Option<u64> {
        self.0.session()
    }
    fn done(&mut self, id: RequestId, at: SimTime) {
        self.0.done(id, at);
    }
    fn rejected(&mut self, id: RequestId, at: SimTime) {
        self.0.rejected(id, at);
    }
}

/// Every event, as text, in order, and the requests admitted inside
/// decode stretches.
#[derive(Default)]
struct EventLog(Vec<String>, u64);

impl Observer for EventLog {
    fn arrived(&mut self, id: RequestId, at: SimTime, prompt: u32, output: u32) {
        self.0.push(format!("arrived {id} {at:?} {prompt} {output}"));
    }
    fn prefix_lookup(&mut self, id: RequestId, at: SimTime, queried: u32, hit: u32) {
        self.0.push(format!("lookup {id} {at:?} {queried} {hit}"));
    }
    fn scheduled(&mut self, id: RequestId, at: SimTime, tokens: u32, computed: u32) {
        self.0.push(format!("scheduled {id} {at:?} {tokens} {computed}"));
    }
    fn preempted(&mut self, id: RequestId, at: SimTime) {
        self.0.push(format!("preempted {id} {at:?}"));
    }
    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        self.0.push(format!("token {id} {at:?} {index}"));
    }
    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.0.push(format!("finished {id} {at:?}"));
    }
    fn rejected(&mut self, id: RequestId, at: SimTime, reason: RejectReason) {
        self.0.push(format!("rejected {id} {at:?} {reason:?}"));
    }
    fn step(&mut self, s: &StepRecord) {
        self.0.push(format!("step {s:?}"));
    }
    fn decode_stretch(&mut self, s: &llmsim_core::engine::Stretch<'_>) {
        self.1 += s.joins.len() as u64;
        llmsim_core::engine::events::replay_stretch(self, s);
    }
}

/// Runs `source` step by step, checking the engine after every step, and
/// returns every event and the engine's cached blocks after each step.
fn event_log<S: Source>(s: &Scenario, mut source: S, text: &str) -> Vec<String> {
    let mut engine = Engine::new(s.engine_config());
    let mut log = EventLog::default();
    let setup = Setup::default();
    drive(
        Single::new(&mut engine),
        &mut source,
        &mut log,
        &setup,
        |_, e, l| {
            if let Err(err) = e.check_invariants() {
                panic!("{err}\n{text}");
            }
            l.0.push(format!("cached {} used {}", e.kv_blocks_cached(), e.kv_blocks_used()));
        },
        &mut |_| {},
    )
    .expect("within the run limits");
    log.0
}

#[test]
fn requests_own_blocks_unhashed_give_the_very_events_of_hashing_every_block() {
    // The driver hashes only blocks another request may share; each
    // request's own blocks are cached without a hash. Over the generated
    // scenarios (preemptions re-hitting own blocks, evictions, sessions,
    // traces with content), every event, hit, step record and cached-block
    // count must equal the run that hashes every block.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut own_sources, mut events) = (0, 0);
    for i in 0..SCENARIOS {
        let text = generate(i, dir.path());
        let s = scenario(&text);
        let mut probe = AnySource::new(&s);
        if probe.pop().is_some() && probe.own_from().is_some() {
            own_sources += 1;
        }
        let own = event_log(&s, AnySource::new(&s), &text);
        let hashed = event_log(&s, HashEverything(AnySource::new(&s)), &text);
        if let Some(k) = (0..own.len().max(hashed.len())).find(|&k| own.get(k) != hashed.get(k)) {
            panic!(
                "event {k} differs: {:?} (own content) against {:?} (every block hashed)\n{text}",
                own.get(k),
                hashed.get(k)
            );
        }
        events += own.len();
    }
    assert!(own_sources > SCENARIOS / 2, "only {own_sources} scenarios took the own-content path");
    eprintln!("{events} events equal over {SCENARIOS} scenarios ({own_sources} with own content on the first request)");
}

/// Every event of `s` driven with `stepping`, checking the engine after
/// every step (or stretch).
fn stepped_log(s: &Scenario, stepping: Stepping, text: &str) -> (Vec<String>, u64, u64) {
    let mut engine = Engine::new(s.engine_config());
    let mut log = EventLog::default();
    let mut calls = 0u64;
    let setup = Setup { stepping, ..Setup::default() };
    let check = |_, e: &Engine, _: &mut EventLog| {
        calls += 1;
        if let Err(err) = e.check_invariants() {
            panic!("{err}\n{text}");
        }
    };
    drive(Single::new(&mut engine), &mut AnySource::new(s), &mut log, &setup, check, &mut |_| {})
        .expect("within the run limits");
    (log.0, calls, log.1)
}

#[test]
fn decode_stretches_with_prefix_caching_give_the_events_of_step_by_step() {
    // A stretch allocates its crossings from the free queue (evicting) and
    // registers the blocks it fills, step by step: the per-step events
    // (cached blocks and evictions in every step record included) must be
    // those of Engine::step.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut fewer, mut events, mut joined) = (0, 0, 0);
    for i in 0..SCENARIOS {
        let text = generate(i, dir.path());
        let s = scenario(&text);
        let (exact, steps, _) = stepped_log(&s, Stepping::Exact, &text);
        let (stretched, calls, joiners) = stepped_log(&s, Stepping::MacroSteps, &text);
        joined += joiners;
        if let Some(k) = (0..exact.len().max(stretched.len())).find(|&k| exact.get(k) != stretched.get(k)) {
            panic!(
                "event {k} differs: {:?} (step by step) against {:?} (stretches)\n{text}",
                exact.get(k),
                stretched.get(k)
            );
        }
        fewer += u64::from(calls < steps);
        events += exact.len();
    }
    assert!(fewer > SCENARIOS / 4, "stretches were taken in only {fewer} scenarios");
    // Arrivals must join stretches (looked up inside them) too.
    assert!(joined > 200, "only {joined} requests admitted inside stretches");
    eprintln!("{events} events equal over {SCENARIOS} scenarios, stretches taken in {fewer}, {joined} joiners");
}
