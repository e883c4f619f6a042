//! Workloads with shared content (docs/prefix-caching.md): shared system
//! prompts, multi-turn sessions, and the content columns of traces. Each
//! source says what its last request's prompt is made of as content
//! [`Segment`]s; the driver turns them into block hashes when prefix
//! caching is on.
//!
//! Content keys:
//! * `sys:<group>` for `workload.shared_prefix` (the same key a trace's
//!   `prefix_id` of that name gets, so `llmsim trace` output replays to the
//!   very same hashes);
//! * the unique prompt tokens of request `id`, and the tokens it generates
//!   (a later turn of its session repeats both);
//! * a trace's `prefix_id`, or a JSONL trace's `hash_ids`, one per block.
//!
//! Group, turn-count and think-time draws come from streams of their own
//! (below), so turning these on changes no other draw.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::{AnySource, Gaps, Lengths, Limit, Source, dist, stream};
use llmsim_core::engine::prefix::hash::{Segment, generated_key, hash_id_key, id_block_hashes, named_key, prompt_key};
use llmsim_core::engine::{Request, RequestId};
use llmsim_core::time::{SimTime, secs_to_nanos};
use llmsim_scenario::config::{Arrivals, Length, Scenario, Seconds, Sessions as SessionsConfig, SharedPrefix};
use llmsim_scenario::trace::{Prefix, RowContent, TraceContent, TraceRow};

/// Stream numbers of the seed (the plain workload uses 0, 1 and 2).
const GROUP_STREAM: u64 = 0x7072_6566_6978; // "prefix"
const TURNS_STREAM: u64 = 0x0074_7572_6e73; // "turns"
const THINK_STREAM: u64 = 0x0074_6869_6e6b; // "think"

/// The content key of system prompt `group`: `named_key("sys:<group>")`,
/// without allocating.
pub fn group_key(group: u32) -> u64 {
    use std::io::Write;
    let mut buf = [0u8; 16];
    let mut cur = &mut buf[..];
    let _ = write!(cur, "sys:{group}");
    let len = 16 - cur.len();
    named_key(std::str::from_utf8(&buf[..len]).unwrap_or_default())
}

/// The `prefix_id` a drawn group is written as.
pub fn group_name(group: u32) -> String {
    format!("sys:{group}")
}

/// Groups whose content key a [`GroupDraw`] computes once, up front
/// (formatting the key's name took about 4% of a shared-prefix run).
const KEYS_KEPT: u32 = 1 << 12;

/// Draws a system prompt for each request.
struct GroupDraw {
    groups: u32,
    tokens: u32,
    rng: ChaCha8Rng,
    /// `group_key` of the first [`KEYS_KEPT`] groups.
    keys: Vec<u64>,
}

impl GroupDraw {
    fn new(sp: &SharedPrefix, seed: u64) -> GroupDraw {
        let keys = (0..sp.groups.min(KEYS_KEPT)).map(group_key).collect();
        GroupDraw { groups: sp.groups, tokens: sp.tokens, rng: stream(seed, GROUP_STREAM), keys }
    }

    fn next(&mut self) -> u32 {
        self.rng.random_range(0..self.groups)
    }

    fn key(&self, group: u32) -> u64 {
        match self.keys.get(group as usize) {
            Some(&key) => key,
            None => group_key(group),
        }
    }

    fn label(&self, group: u32) -> Prefix {
        Prefix { id: group_name(group), tokens: self.tokens }
    }
}

/// [`SessionSource::conversation_of`] of a request that has ended.
const ENDED: u32 = u32::MAX;

/// An open or closed loop whose requests each start with one of
/// `groups` system prompts; `prompt_tokens` is the unique rest.
pub struct Prefixed {
    inner: AnySource,
    draw: GroupDraw,
    current: Vec<Segment>,
    /// The group of every request issued, for `llmsim trace`: kept only
    /// when asked ([`AnySource::keep_rows`]), so a run's memory stays flat
    /// in requests.
    drawn: Option<Vec<u32>>,
}

impl Prefixed {
    pub fn new(inner: AnySource, sp: &SharedPrefix, seed: u64) -> Prefixed {
        Prefixed { inner, draw: GroupDraw::new(sp, seed), current: Vec::new(), drawn: None }
    }

    /// Keeps each request's group from now on, for [`Prefixed::row_content`].
    pub fn keep_rows(&mut self) {
        self.drawn.get_or_insert_with(Vec::new);
    }

    /// Each request's `prefix_id`, if [`Prefixed::keep_rows`] was called
    /// before the first was issued.
    pub fn row_content(&self) -> Option<Vec<RowContent>> {
        let prefix = |&g: &u32| RowContent { prefix: Some(self.draw.label(g)), ..RowContent::default() };
        self.drawn.as_ref().map(|drawn| drawn.iter().map(prefix).collect())
    }
}

impl Source for Prefixed {
    fn peek(&self) -> Option<SimTime> {
        self.inner.peek()
    }

    fn pop(&mut self) -> Option<Request> {
        let mut req = self.inner.pop()?;
        let group = self.draw.next();
        let tokens = self.draw.tokens;
        self.current.clear();
        self.current.extend([Segment::new(self.draw.key(group), tokens), Segment::new(prompt_key(req.id), req.prompt)]);
        // An absurd sum saturates; the context check rejects it on arrival.
        req.prompt = tokens.saturating_add(req.prompt);
        if let Some(drawn) = &mut self.drawn {
            drawn.push(group);
        }
        Some(req)
    }

    fn segments(&self) -> &[Segment] {
        &self.current
    }

    fn own_from(&self) -> Option<usize> {
        // The system prompt, then the request's unique tokens.
        Some(1)
    }

    fn done(&mut self, id: RequestId, at: SimTime) {
        self.inner.done(id, at);
    }

    fn rejected(&mut self, id: RequestId, at: SimTime) {
        self.inner.rejected(id, at);
    }
}

/// How conversations start.
enum Starts {
    /// Open loop: one conversation per arrival of the process.
    Open { gaps: Gaps, rng: Box<ChaCha8Rng> },
    /// Closed loop: each user starts a new conversation its resend wait
    /// after its previous one ends.
    Closed(Box<super::Resend>),
}

/// What a queued event is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Next {
    /// A new conversation (of closed-loop user `user`).
    Start { user: u32 },
    /// The next turn of conversation `conv`.
    Turn { conv: u32 },
}

/// One conversation in progress.
#[derive(Clone, Debug, Default)]
struct Conversation {
    session: u64,
    user: u32,
    group: Option<u32>,
    turns_left: u32,
    /// The segments of its last turn's prompt.
    history: Vec<Segment>,
    /// Its last turn: request id and output length.
    last: Option<(RequestId, u32)>,
}

/// `workload.sessions`: arrivals start conversations; turn `j+1` arrives
/// `think_s` after turn `j`'s last token, its prompt being turn `j`'s
/// prompt and answer plus a new draw of `prompt_tokens`. A rejected turn
/// (over the context, or never fitting the cache) ends its conversation.
/// `requests` and `duration_s` count and bound turns.
pub struct SessionSource {
    starts: Starts,
    lengths: Lengths,
    turns: Length,
    turns_rng: ChaCha8Rng,
    think: Seconds,
    think_rng: ChaCha8Rng,
    prefix: Option<GroupDraw>,
    limit: Limit,
    issued: u64,
    pushed: u64,
    /// (arrival, order pushed, what): earliest first, ties in push order.
    ready: BinaryHeap<Reverse<(SimTime, u64, Next)>>,
    conversations: Vec<Conversation>,
    free: Vec<u32>,
    /// The conversation of each request issued from
    /// [`SessionSource::first_open`] on (`ENDED` once it finished or was
    /// rejected): the front is dropped as it ends, so this holds the span
    /// of requests in flight, not every request issued.
    conversation_of: VecDeque<u32>,
    current: Vec<Segment>,
    /// Whether the request issued last is the last turn of its
    /// conversation: no later turn resends it, so its new tokens and its
    /// answer are its own.
    last_turn: bool,
    /// The session of the request issued last.
    last_session: Option<u64>,
    /// (group, session) of every request issued, for `llmsim trace`: kept
    /// only when asked ([`AnySource::keep_rows`]).
    log: Option<Vec<(Option<u32>, u64)>>,
    sessions: u64,
}

impl SessionSource {
    pub fn new(s: &Scenario, sessions: &SessionsConfig) -> SessionSource {
        let w = &s.workload;
        let limit = Limit { requests: w.requests, until: w.duration_s.map(SimTime::from_secs_f64) };
        let mut source = SessionSource {
            starts: Starts::Closed(Box::new(super::Resend::new(s, 0.0))),
            lengths: Lengths::new(w.seed, w.prompt_tokens.clone(), w.output_tokens.clone()),
            turns: sessions.turns.clone(),
            turns_rng: stream(w.seed, TURNS_STREAM),
            think: sessions.think_s.clone(),
            think_rng: stream(w.seed, THINK_STREAM),
            prefix: w.shared_prefix.as_ref().map(|sp| GroupDraw::new(sp, w.seed)),
            limit,
            issued: 0,
            pushed: 0,
            ready: BinaryHeap::new(),
            conversations: Vec::new(),
            free: Vec::new(),
            conversation_of: VecDeque::new(),
            current: Vec::new(),
            last_turn: false,
            last_session: None,
            log: None,
            sessions: 0,
        };
        match (&w.arrivals, Gaps::of(&w.arrivals)) {
            (_, Some(gaps)) => {
                source.starts = Starts::Open { gaps, rng: Box::new(stream(w.seed, 0)) };
                source.push(SimTime::ZERO, Next::Start { user: 0 });
            }
            (Arrivals::Closed { concurrency, think_time_s, ramp_s }, None) => {
                let mut resend = super::Resend::new(s, *think_time_s);
                for user in 0..*concurrency {
                    let at = super::ramp_start(user, *concurrency, *ramp_s).plus_nanos(resend.jitter());
                    source.push(at, Next::Start { user });
                }
                source.starts = Starts::Closed(Box::new(resend));
            }
            // Validation refuses sessions with a trace.
            (_, None) => {}
        }
        source
    }

    /// Keeps each request's group and session from now on, for
    /// [`SessionSource::row_content`].
    pub fn keep_rows(&mut self) {
        self.log.get_or_insert_with(Vec::new);
    }

    /// Each request's `prefix_id` and `session_id`, if
    /// [`SessionSource::keep_rows`] was called before the first was issued.
    pub fn row_content(&self) -> Option<Vec<RowContent>> {
        let row = |&(group, session): &(Option<u32>, u64)| RowContent {
            prefix: group.zip(self.prefix.as_ref()).map(|(g, d)| d.label(g)),
            session: Some(session.to_string()),
            ..RowContent::default()
        };
        self.log.as_ref().map(|log| log.iter().map(row).collect())
    }

    /// The conversation of request `id` while it is in flight; it ends
    /// (later calls for it find nothing).
    fn end_request(&mut self, id: RequestId) -> Option<u32> {
        let i = usize::try_from(id.checked_sub(self.first_open())?).ok()?;
        let conv = std::mem::replace(self.conversation_of.get_mut(i)?, ENDED);
        while self.conversation_of.front() == Some(&ENDED) {
            self.conversation_of.pop_front();
        }
        (conv != ENDED).then_some(conv)
    }

    /// The first request not known to have ended: `conversation_of`
    /// holds it and every request issued after it, up to `issued`.
    fn first_open(&self) -> u64 {
        self.issued - self.conversation_of.len() as u64
    }

    fn push(&mut self, at: SimTime, next: Next) {
        self.ready.push(Reverse((at, self.pushed, next)));
        self.pushed += 1;
    }

    fn think_nanos(&mut self) -> u64 {
        let secs = match self.think {
            Seconds::Fixed(x) => x,
            Seconds::Uniform { lo, hi } => lo + (hi - lo) * self.think_rng.random::<f64>(),
            Seconds::Exponential { mean } => dist::exponential(&mut self.think_rng, mean),
        };
        secs_to_nanos(secs)
    }

    fn start(&mut self, user: u32) -> u32 {
        let group = self.prefix.as_mut().map(GroupDraw::next);
        let mut conv = Conversation {
            session: self.sessions,
            user,
            group,
            turns_left: dist::sample_length(&mut self.turns_rng, &self.turns),
            ..Conversation::default()
        };
        self.sessions += 1;
        if let (Some(g), Some(draw)) = (group, &self.prefix) {
            conv.history.push(Segment::new(draw.key(g), draw.tokens));
        }
        match self.free.pop() {
            Some(i) => {
                self.conversations[i as usize] = conv;
                i
            }
            None => {
                self.conversations.push(conv);
                self.conversations.len() as u32 - 1
            }
        }
    }

    /// The conversation of request `id` is over at `at`.
    fn end(&mut self, conv: u32, at: SimTime) {
        let user = self.conversations[conv as usize].user;
        self.conversations[conv as usize] = Conversation::default();
        self.free.push(conv);
        if let Starts::Closed(resend) = &mut self.starts {
            let wait = resend.wait();
            self.push(at.plus_nanos(wait), Next::Start { user });
        }
    }
}

impl Source for SessionSource {
    fn peek(&self) -> Option<SimTime> {
        let Reverse((at, _, _)) = self.ready.peek()?;
        self.limit.allows(self.issued, *at).then_some(*at)
    }

    fn pop(&mut self) -> Option<Request> {
        let arrival = self.peek()?;
        let Reverse((_, _, next)) = self.ready.pop()?;
        let conv = match next {
            Next::Turn { conv } => conv,
            Next::Start { user } => {
                if let Starts::Open { gaps, rng } = &mut self.starts {
                    let gap = gaps.next_nanos(rng);
                    self.push(arrival.plus_nanos(gap), Next::Start { user });
                }
                self.start(user)
            }
        };
        let id = self.issued;
        let (new, output) = self.lengths.next();
        let c = &mut self.conversations[conv as usize];
        if let Some((prev, prev_output)) = c.last {
            c.history.push(Segment::new(generated_key(prev), prev_output));
        }
        c.history.push(Segment::new(prompt_key(id), new));
        c.last = Some((id, output));
        c.turns_left = c.turns_left.saturating_sub(1);
        let prompt: u64 = c.history.iter().map(|s| u64::from(s.len)).sum();
        self.current.clone_from(&c.history);
        self.last_turn = c.turns_left == 0;
        if let Some(log) = &mut self.log {
            log.push((c.group, c.session));
        }
        self.last_session = Some(c.session);
        self.conversation_of.push_back(conv);
        self.issued += 1;
        // An absurd history saturates; the context check rejects it on arrival.
        Some(Request::new(id, arrival, prompt.min(u64::from(u32::MAX)) as u32, output))
    }

    fn segments(&self) -> &[Segment] {
        &self.current
    }

    fn own_from(&self) -> Option<usize> {
        // A later turn resends the whole history and answer.
        self.last_turn.then(|| self.current.len() - 1)
    }

    fn session(&self) -> Option<u64> {
        self.last_session
    }

    fn done(&mut self, id: RequestId, at: SimTime) {
        let Some(conv) = self.end_request(id) else { return };
        if self.conversations[conv as usize].turns_left > 0 {
            let think = self.think_nanos();
            self.push(at.plus_nanos(think), Next::Turn { conv });
        } else {
            self.end(conv, at);
        }
    }

    fn rejected(&mut self, id: RequestId, at: SimTime) {
        if let Some(conv) = self.end_request(id) {
            self.end(conv, at);
        }
    }
}

/// Builds each trace row's segments from the trace's content columns.
pub struct TraceSegments {
    content: Arc<TraceContent>,
    current: Vec<Segment>,
    chain: Vec<usize>,
    /// The current row's block hashes, when it has `block_ids`.
    hashes: Option<Vec<u64>>,
    /// Rows a later row continues (its `session_id`).
    continued: Vec<bool>,
    /// Where the current row's own content starts ([`Source::own_from`]).
    own: Option<usize>,
}

impl TraceSegments {
    pub fn new(content: Arc<TraceContent>) -> TraceSegments {
        let mut continued = vec![false; content.rows.len()];
        for p in content.rows.iter().filter_map(|r| r.parent) {
            if let Some(c) = continued.get_mut(p as usize) {
                *c = true;
            }
        }
        TraceSegments { content, current: Vec::new(), chain: Vec::new(), hashes: None, continued, own: None }
    }

    /// Where the current row's own content starts: its unique tokens (after
    /// a named prefix, or after the history it continues) and its answer,
    /// or its answer alone after `hash_ids`; `None` when a later row
    /// continues it (or it names its blocks).
    pub fn own_from(&self) -> Option<usize> {
        self.own
    }

    pub fn rows(&self) -> &[RowContent] {
        &self.content.rows
    }

    pub fn current(&self) -> &[Segment] {
        &self.current
    }

    /// The current row's block hashes if it names its blocks (`block_ids`):
    /// they replace its segments.
    pub fn block_hashes(&self) -> Option<&[u64]> {
        self.hashes.as_deref()
    }

    /// The session of the row built last, keyed by its session's first
    /// row: `None` for a row without a `session_id`.
    pub fn session(&self) -> Option<u64> {
        let row = *self.chain.first()?;
        self.content.rows.get(row)?.session.as_ref()?;
        self.chain.last().map(|&root| root as u64)
    }

    /// Row `i`'s segments: its session's first row's own content (hash ids,
    /// or a named prefix and the unique rest), then for every later row of
    /// the chain the previous row's answer and its own new tokens.
    pub fn build(&mut self, i: usize, rows: &[TraceRow]) {
        let content = &self.content.rows;
        self.current.clear();
        self.chain.clear();
        match content.get(i).and_then(|c| c.blocks.as_ref()) {
            Some(b) => id_block_hashes(&b.ids, self.hashes.get_or_insert_with(Vec::new)),
            None => self.hashes = None,
        }
        let mut at = Some(i);
        while let Some(r) = at {
            self.chain.push(r);
            at = content.get(r).and_then(|c| c.parent).map(|p| p as usize);
        }
        self.own = None;
        let Some(&root) = self.chain.last() else { return };
        let prompt = rows[root].prompt;
        let own = &content[root];
        if let (false, Some(bs)) = (own.hash_ids.is_empty(), self.content.hash_block_size) {
            for (k, &id) in own.hash_ids.iter().enumerate() {
                let start = k as u64 * u64::from(bs);
                let len = (u64::from(prompt) - start.min(u64::from(prompt))).min(u64::from(bs)) as u32;
                self.current.push(Segment::new(hash_id_key(id), len));
            }
            self.own = Some(self.current.len());
        } else if let Some(p) = &own.prefix {
            self.current.push(Segment::new(named_key(&p.id), p.tokens));
            self.current.push(Segment::new(prompt_key(root as u64), prompt - p.tokens));
            self.own = Some(1);
        } else {
            self.current.push(Segment::new(prompt_key(root as u64), prompt));
            self.own = Some(0);
        }
        for pair in self.chain.windows(2).rev() {
            let (row, prev) = (pair[0], pair[1]);
            let (r, p) = (rows[row], rows[prev]);
            self.current.push(Segment::new(generated_key(prev as u64), p.output));
            self.current.push(Segment::new(prompt_key(row as u64), r.prompt - p.prompt - p.output));
            self.own = Some(self.current.len() - 1);
        }
        if self.hashes.is_some() || self.continued.get(i).copied().unwrap_or(true) {
            self.own = None;
        }
    }
}

#[cfg(test)]
mod tests;
