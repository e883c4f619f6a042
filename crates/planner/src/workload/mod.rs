//! Where requests come from: open-loop arrival processes, closed-loop users
//! and traces (docs/engine.md section 4).
//!
//! All randomness comes from the scenario's seed through ChaCha8, one
//! independent stream each for arrival gaps, prompt lengths and output
//! lengths, so changing the rate leaves the lengths alone and vice versa.
//! Shared prefixes and sessions (`content`) draw from streams of their own,
//! so turning them on leaves the other draws as they were.

pub mod adapters;
pub mod classes;
pub mod content;
pub mod curve;
pub mod dist;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use content::{Prefixed, SessionSource, TraceSegments};
use llmsim_core::engine::prefix::hash::Segment;
use llmsim_core::engine::{Request, RequestId};
use llmsim_core::time::{SimTime, secs_to_nanos};
use llmsim_scenario::config::{Arrivals, Length, Scenario, limits};
use llmsim_scenario::trace::{RowContent, TraceRow};

/// A supply of requests in arrival order. Closed-loop sources only know a
/// user's next arrival once its previous request is done.
pub trait Source {
    /// Arrival of the next request, if known now.
    fn peek(&self) -> Option<SimTime>;
    /// Takes the next request; ids are 0, 1, 2, ... in arrival order.
    fn pop(&mut self) -> Option<Request>;
    /// The content of the prompt of the request `pop` returned last, as
    /// segments adding up to its `prompt` (docs/prefix-caching.md). Empty
    /// when the prompt is unique: the driver keys it by the request's id.
    fn segments(&self) -> &[Segment] {
        &[]
    }
    /// Where the content of the request `pop` returned last becomes its own:
    /// the index in [`Source::segments`] (its length: only the answer) from
    /// which every token is unique to the request and no later request
    /// repeats it (no later turn resends it). `None`: any of it may be
    /// shared. The driver then hashes only the blocks before it
    /// (docs/prefix-caching.md, "Speed"); results are the same either way.
    fn own_from(&self) -> Option<usize> {
        None
    }
    /// The block hashes of the request `pop` returned last, when its source
    /// names its blocks (a recorded trace's `block_ids`): they replace the
    /// hashes of its segments.
    fn block_hashes(&self) -> Option<&[u64]> {
        None
    }
    /// The conversation the request `pop` returned last belongs to, if it
    /// is a turn of one (`workload.sessions`, or a trace row with a
    /// `session_id`): the same key for every turn. The cluster router's
    /// `session_affinity` keeps a conversation on one replica by it.
    fn session(&self) -> Option<u64> {
        None
    }
    /// Request `id` finished (or was rejected, unless the source overrides
    /// [`Source::rejected`]) at `at`.
    fn done(&mut self, _id: RequestId, _at: SimTime) {}
    /// Why the source can no longer advance in simulated time, if so: the
    /// driver stops the run with this message.
    fn stalled(&self) -> Option<String> {
        None
    }
    /// Request `id` was rejected at `at` (over the context on arrival, or
    /// never fitting the KV cache).
    fn rejected(&mut self, id: RequestId, at: SimTime) {
        self.done(id, at);
    }
}

/// The source a scenario describes.
pub enum AnySource {
    Open(Box<OpenLoop>),
    Closed(Box<ClosedLoop>),
    Trace(TraceSource),
    /// Open or closed loop with `workload.shared_prefix`.
    Prefixed(Box<Prefixed>),
    /// `workload.sessions`.
    Sessions(Box<SessionSource>),
    /// Any of the above with `workload.classes` or `lora`: its requests
    /// carry their class's priority and their adapter.
    Stamped(Box<classes::Stamped>),
}

impl AnySource {
    pub fn new(s: &Scenario) -> AnySource {
        let source = Self::unclassed(s);
        let (classes, adapters) = (classes::Classes::of(s), adapters::Adapters::of(s));
        match classes.is_some() || adapters.is_some() {
            true => AnySource::Stamped(Box::new(classes::Stamped { inner: source, classes, adapters })),
            false => source,
        }
    }

    /// The source without classes.
    fn unclassed(s: &Scenario) -> AnySource {
        let w = &s.workload;
        if let Some(sessions) = &w.sessions {
            return AnySource::Sessions(Box::new(SessionSource::new(s, sessions)));
        }
        let source = Self::plain(s);
        match &w.shared_prefix {
            Some(sp) => AnySource::Prefixed(Box::new(Prefixed::new(source, sp, w.seed))),
            None => source,
        }
    }

    /// The source without shared content.
    fn plain(s: &Scenario) -> AnySource {
        let w = &s.workload;
        let limit = Limit { requests: w.requests, until: w.duration_s.map(SimTime::from_secs_f64) };
        let lengths = Lengths::new(w.seed, w.prompt_tokens.clone(), w.output_tokens.clone());
        let open = |gaps| AnySource::Open(Box::new(OpenLoop::new(gaps, w.seed, lengths, limit)));
        match &w.arrivals {
            Arrivals::Poisson { rate } => open(Gaps::Poisson { rate: *rate }),
            Arrivals::Gamma { rate, burstiness } => open(Gaps::Gamma { rate: *rate, burstiness: *burstiness }),
            Arrivals::Constant { rate } => open(Gaps::Constant { rate: *rate }),
            Arrivals::Closed { concurrency, think_time_s, ramp_s } => {
                let resend = Resend::new(s, *think_time_s);
                let lengths = Lengths::new(w.seed, w.prompt_tokens.clone(), w.output_tokens.clone());
                AnySource::Closed(Box::new(ClosedLoop::new(*concurrency, resend, *ramp_s, lengths, limit)))
            }
            Arrivals::Trace(t) => {
                let mut source = TraceSource::new(t.rows.clone(), limit);
                source.content = t.content.as_ref().map(|c| TraceSegments::new(c.clone()));
                AnySource::Trace(source)
            }
            Arrivals::Curve(c) => {
                let clock = curve::CurveClock::new(c, w.duration_s.unwrap_or(0.0));
                let lengths = Lengths::new(w.seed, w.prompt_tokens.clone(), w.output_tokens.clone());
                AnySource::Open(Box::new(OpenLoop::on_curve(clock, w.seed, lengths, limit)))
            }
        }
    }

    /// Keeps what [`AnySource::row_content`] returns for each request
    /// issued from now on. Without it a shared prefix or sessions keep
    /// nothing per request, so a run's memory stays flat in requests.
    pub fn keep_rows(&mut self) {
        match self {
            AnySource::Open(_) | AnySource::Closed(_) | AnySource::Trace(_) => {}
            AnySource::Prefixed(p) => p.keep_rows(),
            AnySource::Sessions(s) => s.keep_rows(),
            AnySource::Stamped(c) => c.inner.keep_rows(),
        }
    }

    /// What `llmsim trace` writes in the content columns for each request
    /// issued so far, if the workload has shared content: the drawn
    /// `prefix_id` and `session_id` (kept since [`AnySource::keep_rows`];
    /// `None` without it), or a trace's own columns.
    pub fn row_content(&self) -> Option<Vec<RowContent>> {
        match self {
            AnySource::Open(_) | AnySource::Closed(_) => None,
            AnySource::Trace(t) => t.content.as_ref().map(|c| c.rows().to_vec()),
            AnySource::Prefixed(p) => p.row_content(),
            AnySource::Sessions(s) => s.row_content(),
            AnySource::Stamped(c) => c.inner.row_content(),
        }
    }
}

/// `$e` with `$s` bound to the variant's source, called statically: a
/// `&dyn Source` taken after the match would add an indirect call, and a
/// shared prefix's source wraps another `AnySource`, so one such call site
/// would alternate between two targets for every request.
macro_rules! each_source {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            AnySource::Open($s) => $e,
            AnySource::Closed($s) => $e,
            AnySource::Trace($s) => $e,
            AnySource::Prefixed($s) => $e,
            AnySource::Sessions($s) => $e,
            AnySource::Stamped($s) => $e,
        }
    };
}

impl Source for AnySource {
    fn peek(&self) -> Option<SimTime> {
        each_source!(self, s => s.peek())
    }
    fn pop(&mut self) -> Option<Request> {
        each_source!(self, s => s.pop())
    }
    fn segments(&self) -> &[Segment] {
        each_source!(self, s => s.segments())
    }
    fn block_hashes(&self) -> Option<&[u64]> {
        each_source!(self, s => s.block_hashes())
    }
    fn own_from(&self) -> Option<usize> {
        each_source!(self, s => s.own_from())
    }
    fn session(&self) -> Option<u64> {
        each_source!(self, s => s.session())
    }
    fn done(&mut self, id: RequestId, at: SimTime) {
        each_source!(self, s => s.done(id, at));
    }
    fn stalled(&self) -> Option<String> {
        each_source!(self, s => s.stalled())
    }
    fn rejected(&mut self, id: RequestId, at: SimTime) {
        each_source!(self, s => s.rejected(id, at));
    }
}

/// When a workload stops issuing requests.
#[derive(Copy, Clone, Debug)]
pub struct Limit {
    pub requests: Option<u64>,
    /// No arrival at or after this time.
    pub until: Option<SimTime>,
}

impl Limit {
    fn allows(&self, issued: u64, at: SimTime) -> bool {
        self.requests.is_none_or(|n| issued < n) && self.until.is_none_or(|u| at < u)
    }
}

/// Prompt and output lengths, each from its own stream of the seed.
pub struct Lengths {
    prompt: Option<Length>,
    output: Option<Length>,
    prompt_rng: ChaCha8Rng,
    output_rng: ChaCha8Rng,
}

impl Lengths {
    pub fn new(seed: u64, prompt: Option<Length>, output: Option<Length>) -> Lengths {
        Lengths { prompt, output, prompt_rng: stream(seed, 1), output_rng: stream(seed, 2) }
    }

    pub(crate) fn next(&mut self) -> (u32, u32) {
        let draw = |rng: &mut ChaCha8Rng, len: &Option<Length>| len.as_ref().map_or(1, |l| dist::sample_length(rng, l));
        (draw(&mut self.prompt_rng, &self.prompt), draw(&mut self.output_rng, &self.output))
    }
}

/// How long a closed-loop user waits before each request: its think time
/// plus a uniform draw from `[0, latency.resend_jitter_ms)` from the
/// workload's own stream (nothing drawn without a jitter, so such runs are
/// as before).
#[derive(Clone, Debug)]
pub struct Resend {
    think_ns: u64,
    jitter_ns: u64,
    rng: ChaCha8Rng,
}

/// The stream of resend jitter.
const JITTER_STREAM: u64 = 0x6a69_7474_6572; // "jitter"

impl Resend {
    pub fn new(s: &Scenario, think_s: f64) -> Resend {
        let jitter_ms = s.latency.resend_jitter_ms.unwrap_or(0.0);
        Resend {
            think_ns: secs_to_nanos(think_s),
            jitter_ns: secs_to_nanos(jitter_ms / 1e3),
            rng: stream(s.workload.seed, JITTER_STREAM),
        }
    }

    /// The jitter before one request.
    pub fn jitter(&mut self) -> u64 {
        if self.jitter_ns == 0 {
            return 0;
        }
        (dist::unit(&mut self.rng) * self.jitter_ns as f64) as u64
    }

    /// The wait before a user's next request: think time and jitter.
    pub fn wait(&mut self) -> u64 {
        self.think_ns + self.jitter()
    }

    pub fn think_ns(&self) -> u64 {
        self.think_ns
    }
}

/// The `k`-th independent ChaCha8 stream of a seed.
pub fn stream(seed: u64, k: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(k);
    rng
}

/// Gaps between open-loop arrivals.
#[derive(Copy, Clone, Debug)]
pub enum Gaps {
    Poisson {
        rate: f64,
    },
    /// Shape `burstiness`, mean `1 / rate`, as `vllm bench serve` draws them.
    Gamma {
        rate: f64,
        burstiness: f64,
    },
    Constant {
        rate: f64,
    },
}

impl Gaps {
    /// The gaps a scenario's open-loop arrivals use, if they are open loop.
    pub fn of(arrivals: &Arrivals) -> Option<Gaps> {
        match arrivals {
            Arrivals::Poisson { rate } => Some(Gaps::Poisson { rate: *rate }),
            Arrivals::Gamma { rate, burstiness } => Some(Gaps::Gamma { rate: *rate, burstiness: *burstiness }),
            Arrivals::Constant { rate } => Some(Gaps::Constant { rate: *rate }),
            Arrivals::Closed { .. } | Arrivals::Trace(_) | Arrivals::Curve(_) => None,
        }
    }

    /// The next gap, in nanoseconds.
    pub fn next_nanos(&self, rng: &mut ChaCha8Rng) -> u64 {
        let secs = match *self {
            Gaps::Poisson { rate } => dist::exponential(rng, 1.0 / rate),
            Gaps::Gamma { rate, burstiness } => dist::gamma(rng, burstiness, 1.0 / (rate * burstiness)),
            Gaps::Constant { rate } => 1.0 / rate,
        };
        secs_to_nanos(secs)
    }
}

/// Open loop: arrivals on their own schedule, the first at t = 0 (on a
/// rate curve, where the curve's count reaches the first gap).
pub struct OpenLoop {
    gaps: Gaps,
    rng: ChaCha8Rng,
    lengths: Lengths,
    limit: Limit,
    issued: u64,
    next_at: SimTime,
    /// `workload.arrivals.curve`'s clock, which then sets the times.
    curve: Option<Box<curve::CurveClock>>,
    /// The curve's rate ended at 0 before its next arrival.
    ended: bool,
}

impl OpenLoop {
    pub fn new(gaps: Gaps, seed: u64, lengths: Lengths, limit: Limit) -> OpenLoop {
        let rng = stream(seed, 0);
        OpenLoop { gaps, rng, lengths, limit, issued: 0, next_at: SimTime::ZERO, curve: None, ended: false }
    }

    /// Arrivals on a rate curve (the gaps come from the same stream of
    /// the seed as a plain open loop's).
    pub fn on_curve(mut clock: curve::CurveClock, seed: u64, lengths: Lengths, limit: Limit) -> OpenLoop {
        let mut rng = stream(seed, 0);
        let first = clock.next(&mut rng);
        OpenLoop {
            // Unused: the clock sets the times.
            gaps: Gaps::Constant { rate: 1.0 },
            rng,
            lengths,
            limit,
            issued: 0,
            next_at: first.unwrap_or(SimTime::ZERO),
            ended: first.is_none(),
            curve: Some(Box::new(clock)),
        }
    }

    fn gap_nanos(&mut self) -> u64 {
        self.gaps.next_nanos(&mut self.rng)
    }
}

impl Source for OpenLoop {
    fn peek(&self) -> Option<SimTime> {
        (!self.ended && self.limit.allows(self.issued, self.next_at)).then_some(self.next_at)
    }

    fn pop(&mut self) -> Option<Request> {
        let arrival = self.peek()?;
        let (prompt, output) = self.lengths.next();
        let req = Request::new(self.issued, arrival, prompt, output);
        self.issued += 1;
        self.next_at = match &mut self.curve {
            None => arrival.plus_nanos(self.gap_nanos()),
            Some(clock) => match clock.next(&mut self.rng) {
                // Rounded to nanoseconds, never before the last.
                Some(at) => at.max(arrival),
                None => {
                    self.ended = true;
                    arrival
                }
            },
        };
        Some(req)
    }

    fn own_from(&self) -> Option<usize> {
        // Every prompt is unique.
        Some(0)
    }
}

/// Closed loop: `concurrency` users start at t = 0; each sends its next
/// request `think` after its previous one is done.
///
/// A rejected request is done at once, like a failed request in
/// `vllm bench serve`: its user counts it and sends the next one after the
/// think time. With a think time of 0, a user whose requests are all
/// rejected on arrival would resend at the same instant for ever and
/// simulated time could never reach `duration_s`; once a closed loop
/// without a request count has issued [`limits::SAME_INSTANT_ROUNDS`]
/// requests per user at one instant it reports itself stalled and the run
/// stops with an error. (With `workload.requests` the count ends the run.)
pub struct ClosedLoop {
    resend: Resend,
    lengths: Lengths,
    limit: Limit,
    issued: u64,
    concurrency: u32,
    /// (arrival, user) of each user's next request, earliest first.
    ready: BinaryHeap<Reverse<(SimTime, u32)>>,
    /// The user of each request `users_base..` in flight, by id ([`GONE`]
    /// once it ended): a window from the oldest request still in flight,
    /// so memory stays flat in requests (a user has one at a time).
    users: VecDeque<u32>,
    users_base: u64,
    /// The instant of the last request issued and how many were issued then.
    instant: (SimTime, u64),
}

/// [`ClosedLoop::users`] of a request that ended.
const GONE: u32 = u32::MAX;

/// When closed-loop user `user` of `users` sends its first request: user
/// `u` at `u * ramp_s / users` (all at 0 without a ramp), as AIPerf's
/// `--concurrency-ramp-duration` adds users evenly.
pub fn ramp_start(user: u32, users: u32, ramp_s: f64) -> SimTime {
    if ramp_s <= 0.0 || users == 0 {
        return SimTime::ZERO;
    }
    SimTime::from_nanos(secs_to_nanos(ramp_s) / u64::from(users) * u64::from(user))
}

impl ClosedLoop {
    pub fn new(concurrency: u32, mut resend: Resend, ramp_s: f64, lengths: Lengths, limit: Limit) -> ClosedLoop {
        let ready = (0..concurrency)
            .map(|u| Reverse((ramp_start(u, concurrency, ramp_s).plus_nanos(resend.jitter()), u)))
            .collect();
        ClosedLoop {
            resend,
            lengths,
            limit,
            issued: 0,
            concurrency,
            ready,
            users: VecDeque::new(),
            users_base: 0,
            instant: (SimTime::ZERO, 0),
        }
    }
}

impl Source for ClosedLoop {
    fn own_from(&self) -> Option<usize> {
        // Every prompt is unique.
        Some(0)
    }

    fn peek(&self) -> Option<SimTime> {
        let Reverse((at, _)) = self.ready.peek()?;
        self.limit.allows(self.issued, *at).then_some(*at)
    }

    fn pop(&mut self) -> Option<Request> {
        let arrival = self.peek()?;
        let Reverse((_, user)) = self.ready.pop()?;
        let (prompt, output) = self.lengths.next();
        let req = Request::new(self.issued, arrival, prompt, output);
        self.issued += 1;
        self.users.push_back(user);
        self.instant = if self.instant.0 == arrival { (arrival, self.instant.1 + 1) } else { (arrival, 1) };
        Some(req)
    }

    fn done(&mut self, id: RequestId, at: SimTime) {
        let Some(i) = id.checked_sub(self.users_base).and_then(|i| usize::try_from(i).ok()) else { return };
        let Some(user) = self.users.get_mut(i).map(|u| std::mem::replace(u, GONE)) else { return };
        if user != GONE {
            let wait = self.resend.wait();
            self.ready.push(Reverse((at.plus_nanos(wait), user)));
        }
        while self.users.front() == Some(&GONE) {
            self.users.pop_front();
            self.users_base += 1;
        }
    }

    fn stalled(&self) -> Option<String> {
        // A request count ends the run however many are rejected.
        if self.limit.requests.is_some() {
            return None;
        }
        let (_, n) = self.instant;
        let most = limits::SAME_INSTANT_ROUNDS * u64::from(self.concurrency);
        (n > most).then(|| {
            format!(
                "the closed loop issued {n} requests at that instant, more than {} per user: its requests \
                 are rejected on arrival (too long for the context, or for the KV cache) and, with \
                 think_time_s {}, every user sends the next one at the same instant, so simulated time \
                 cannot advance; make the requests fit, or set workload.requests",
                limits::SAME_INSTANT_ROUNDS,
                llmsim_scenario::config::num::short_float(self.resend.think_ns() as f64 / 1e9)
            )
        })
    }
}

/// Replays trace rows; ids are row numbers.
pub struct TraceSource {
    rows: Arc<Vec<TraceRow>>,
    limit: Limit,
    next: usize,
    /// The trace's content columns, if it has them.
    content: Option<TraceSegments>,
}

impl TraceSource {
    pub fn new(rows: Arc<Vec<TraceRow>>, limit: Limit) -> TraceSource {
        TraceSource { rows, limit, next: 0, content: None }
    }
}

impl Source for TraceSource {
    fn peek(&self) -> Option<SimTime> {
        let row = self.rows.get(self.next)?;
        self.limit.allows(self.next as u64, row.arrival).then_some(row.arrival)
    }

    fn pop(&mut self) -> Option<Request> {
        self.peek()?;
        let row = self.rows[self.next];
        let req = Request::new(self.next as u64, row.arrival, row.prompt, row.output);
        if let Some(c) = &mut self.content {
            c.build(self.next, &self.rows);
        }
        self.next += 1;
        Some(req)
    }

    fn segments(&self) -> &[Segment] {
        self.content.as_ref().map_or(&[], TraceSegments::current)
    }
    fn block_hashes(&self) -> Option<&[u64]> {
        self.content.as_ref().and_then(TraceSegments::block_hashes)
    }
    fn own_from(&self) -> Option<usize> {
        match &self.content {
            Some(c) => c.own_from(),
            // A plain row's prompt and answer are its own.
            None => Some(0),
        }
    }

    fn session(&self) -> Option<u64> {
        self.content.as_ref()?.session()
    }
}

#[cfg(test)]
mod closed_loop_tests {
    use super::*;
    use llmsim_scenario::config::Override;

    /// The base scenario as a closed loop of `users`, with `extra` closed-loop keys.
    fn source(users: u32, extra: &str, shared: bool) -> AnySource {
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join("scenarios/base.yml");
        let mut sets = vec![format!("workload.arrivals={{closed: {{concurrency: {users}{extra}}}}}")];
        sets.push("workload.requests=40".into());
        if shared {
            sets.push("workload.shared_prefix={groups: 2, tokens: 32}".into());
        }
        let sets: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
        AnySource::new(&llmsim_scenario::config::load_scenario_with(&base, &sets).unwrap())
    }

    /// What `vllm bench serve --max-concurrency`, AIPerf and genai-perf do
    /// (docs/engine.md, "Closed loop"): every user's first request at the
    /// start, the next one the instant the previous one ends.
    #[test]
    fn users_start_together_and_send_again_the_instant_an_answer_ends() {
        for shared in [false, true] {
            let mut s = source(4, "", shared);
            let firsts: Vec<Request> = (0..4).map(|_| s.pop().unwrap()).collect();
            assert!(firsts.iter().all(|r| r.arrival == SimTime::ZERO), "{firsts:?}");
            assert_eq!(s.peek(), None, "no fifth request before an answer ends");
            let end = SimTime::from_nanos(123_456_789);
            s.done(firsts[2].id, end);
            assert_eq!(s.peek(), Some(end), "the next request leaves the instant the answer ends");
            assert_eq!(s.pop().unwrap().arrival, end);
        }
    }

    /// `ramp_s` starts user `u` of `N` at `u * ramp_s / N`, as AIPerf's
    /// `--concurrency-ramp-duration` adds users evenly.
    #[test]
    fn a_ramp_spreads_the_first_requests_evenly() {
        for shared in [false, true] {
            let mut s = source(4, ", ramp_s: 2", shared);
            let starts: Vec<u64> = (0..4).map(|_| s.pop().unwrap().arrival.as_nanos()).collect();
            assert_eq!(starts, vec![0, 500_000_000, 1_000_000_000, 1_500_000_000]);
        }
        assert_eq!(ramp_start(3, 4, 0.0), SimTime::ZERO);
    }
}

#[cfg(test)]
mod resend_tests {
    use super::*;
    use llmsim_scenario::config::Override;

    fn closed(extra: &[&str]) -> AnySource {
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join("scenarios/base.yml");
        let mut sets = vec!["workload.arrivals={closed: {concurrency: 3}}", "workload.requests=30"];
        sets.extend_from_slice(extra);
        let sets: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
        AnySource::new(&llmsim_scenario::config::load_scenario_with(&base, &sets).unwrap())
    }

    /// `latency.resend_jitter_ms` delays each request by a seeded uniform
    /// draw below it: the first ones too, each answer's next one on top of
    /// the instant the answer ended; the same seed, the same draws.
    #[test]
    fn resend_jitter_delays_each_request_by_less_than_it_and_repeats_with_the_seed() {
        let run = |extra: &[&str]| {
            let mut s = closed(extra);
            let first: Vec<Request> = (0..3).map(|_| s.pop().unwrap()).collect();
            let end = SimTime::from_nanos(1_000_000_000);
            s.done(first[0].id, end);
            let next = s.pop().unwrap();
            (first.iter().map(|r| r.arrival.as_nanos()).collect::<Vec<_>>(), next.arrival.as_nanos() - end.as_nanos())
        };
        let (firsts, wait) = run(&["latency.resend_jitter_ms=20"]);
        assert!(firsts.iter().all(|&t| t < 20_000_000), "{firsts:?}");
        assert!(firsts.iter().any(|&t| t > 0), "a jitter spreads the first requests: {firsts:?}");
        assert!(wait < 20_000_000, "{wait}");
        assert_eq!(run(&["latency.resend_jitter_ms=20"]), (firsts.clone(), wait), "same seed, same draws");
        assert_ne!(run(&["latency.resend_jitter_ms=20", "workload.seed=9"]).0, firsts);
        // without it nothing is drawn: every request at its instant
        assert_eq!(run(&[]), (vec![0, 0, 0], 0));
        // with shared prefixes (another source) the same rule holds
        let (firsts, wait) = run(&["latency.resend_jitter_ms=20", "workload.shared_prefix={groups: 2, tokens: 16}"]);
        assert!(firsts.iter().all(|&t| t < 20_000_000) && firsts.iter().any(|&t| t > 0) && wait < 20_000_000);
    }

    /// A closed loop remembers the user of a request only while it is in
    /// flight (it kept 4 bytes for every request ever issued: 40 MB in a
    /// 10M-request run); answers out of order still reach their user.
    #[test]
    fn a_closed_loop_keeps_only_the_requests_in_flight() {
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join("scenarios/base.yml");
        let sets = ["workload.arrivals={closed: {concurrency: 3}}", "workload.requests=3000"];
        let sets: Vec<Override> = sets.iter().map(|s| Override::parse(s).unwrap()).collect();
        let scenario = llmsim_scenario::config::load_scenario_with(&base, &sets).unwrap();
        let AnySource::Closed(mut s) = AnySource::new(&scenario) else { panic!("not a closed loop") };
        let mut flight: Vec<Request> = (0..3).map(|_| s.pop().unwrap()).collect();
        for round in 1..1000u64 {
            // The middle one ends first, then the others: each user sends again.
            let at = SimTime::from_nanos(round * 1000);
            for k in [1, 0, 2] {
                s.done(flight[k].id, at);
            }
            flight = (0..3).map(|_| s.pop().unwrap()).collect();
            assert!(flight.iter().all(|r| r.arrival == at), "every user sent again");
            assert!(s.pop().is_none());
            assert!(s.users.len() <= 3, "{} users kept", s.users.len());
        }
        assert_eq!(s.users_base, 2997);
    }
}
