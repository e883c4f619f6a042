//! Service-level objectives: a metric of the result contract and an upper
//! bound, checked on a whole run and on each request.
//!
//! A run meets `ttft_p99_ms=500` when its `ttft_ms.p99 <= 500`. A request
//! meets it when its own value of the latency is within the bound. TTFT,
//! E2E, queue time and TPOT have one value per request, so the statistic
//! does not matter: `ttft_*` bounds the request's TTFT, `e2e_*` its E2E,
//! `queue_*` its queue time, `tpot_*` its TPOT (a one-token request has none
//! and passes) — how `vllm bench serve --goodput` counts good requests. A
//! request has many inter-token gaps, so `itl_<stat>` holds each request to
//! the same statistic over its own gaps: `itl_p99_ms=50` needs the
//! request's own p99 gap <= 50 ms, `itl_max_ms` every gap, `itl_mean_ms`
//! its mean gap. Only finished requests can meet an SLO. Run-wide metrics
//! (`step_p99_ms`, `preemptions`, `rejected`, `kv_peak_frac`, ...) bound the
//! run but no single request, so they never make a request miss.

use std::fmt;

use crate::sweep::metric::{self, Family, Metric};
use llmsim_core::engine::{Observer, RejectReason, RequestId, Stretch};
use llmsim_core::time::SimTime;
use llmsim_planner::metrics::{RequestRecord, RunResult, Stats, Status};

/// Why a `--slo` text is not an SLO; each names the text given.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SloError {
    #[error("`{text}`: expected METRIC=BOUND, like ttft_p99_ms=500")]
    Form { text: String },
    #[error("`{text}`: {source}")]
    Metric { text: String, source: metric::UnknownMetric },
    #[error("`{text}`: the bound `{bound}` must be a number, 0 or more")]
    Bound { text: String, bound: String },
    #[error(
        "`{text}`: a class's SLO bounds its requests' latencies (ttft, itl, tpot, e2e or queue), not a \
         run-wide figure"
    )]
    ClassMetric { text: String },
    #[error("`{text}`: the scenario has no class `{class}` (workload.classes: {known})")]
    Class { text: String, class: String, known: String },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Slo {
    pub metric: Metric,
    /// Upper bound, in the metric's unit (milliseconds for `*_ms`).
    pub bound: f64,
    /// `CLASS:METRIC=BOUND`: the SLO of one of `workload.classes`
    /// (docs/priorities.md), bound to its index by [`Slo::bind`].
    pub class: Option<SloClass>,
}

/// The class an SLO holds to.
#[derive(Clone, Debug, PartialEq)]
pub struct SloClass {
    pub name: String,
    /// Its index in `workload.classes` (set by [`Slo::bind`]).
    pub index: Option<usize>,
}

impl Slo {
    /// Parses `METRIC=BOUND` (or `METRIC<=BOUND`), e.g. `ttft_p99_ms=500` or
    /// `preemptions=0`; `CLASS:METRIC=BOUND` (`interactive:ttft_p99_ms=500`)
    /// holds one class's requests to it.
    pub fn parse(text: &str) -> Result<Slo, SloError> {
        let (name, bound) = text
            .split_once("<=")
            .or_else(|| text.split_once('='))
            .ok_or_else(|| SloError::Form { text: text.to_string() })?;
        let (class, name) = match name.split_once(':') {
            Some((c, n)) if !c.trim().is_empty() => (Some(c.trim().to_string()), n),
            Some(_) => return Err(SloError::Form { text: text.to_string() }),
            None => (None, name),
        };
        let metric = metric::parse_slo_metric(name.trim())
            .map_err(|source| SloError::Metric { text: text.to_string(), source })?;
        let per_request = matches!(metric, Metric::Latency(f, _) if f != Family::Step);
        if class.is_some() && !per_request {
            return Err(SloError::ClassMetric { text: text.to_string() });
        }
        let bound: f64 = bound
            .trim()
            .parse()
            .ok()
            .filter(|b: &f64| b.is_finite() && *b >= 0.0)
            .ok_or_else(|| SloError::Bound { text: text.to_string(), bound: bound.trim().to_string() })?;
        Ok(Slo { metric, bound, class: class.map(|name| SloClass { name, index: None }) })
    }

    /// Finds a class's SLO's class among the scenario's `workload.classes`.
    pub fn bind(&mut self, s: &llmsim_scenario::config::Scenario) -> Result<(), SloError> {
        let Some(c) = &mut self.class else { return Ok(()) };
        let classes = &s.workload.classes;
        match classes.iter().position(|k| k.name == c.name) {
            Some(i) => {
                c.index = Some(i);
                Ok(())
            }
            None => Err(SloError::Class {
                text: format!("{}:{}", c.name, self.metric.name()),
                class: c.name.clone(),
                known: match classes.is_empty() {
                    true => "none".into(),
                    false => classes.iter().map(|k| k.name.as_str()).collect::<Vec<_>>().join(", "),
                },
            }),
        }
    }

    pub fn name(&self) -> String {
        match &self.class {
            Some(c) => format!("{}:{}", c.name, self.metric.name()),
            None => self.metric.name(),
        }
    }

    /// The run's value of the metric (a class's SLO: over that class's
    /// requests, the result's `classes` entry).
    pub fn value(&self, r: &RunResult) -> Option<f64> {
        match &self.class {
            None => self.metric.value(r),
            Some(c) => {
                let k = r.classes.as_ref().and_then(|cs| cs.get(c.index?))?;
                let mut view = r.clone();
                (view.ttft_ms, view.itl_ms, view.tpot_ms) = (k.ttft_ms.clone(), k.itl_ms.clone(), k.tpot_ms.clone());
                (view.e2e_ms, view.queue_ms) = (k.e2e_ms.clone(), k.queue_ms.clone());
                self.metric.value(&view)
            }
        }
    }

    /// The run meets the SLO. A metric without samples (TPOT when every
    /// output is one token) is met if anything completed at all (for a
    /// class's SLO, anything of that class).
    pub fn holds(&self, r: &RunResult) -> bool {
        let completed = match &self.class {
            None => r.requests.completed,
            Some(c) => {
                let k = r.classes.as_ref().and_then(|cs| c.index.and_then(|i| cs.get(i)));
                k.map_or(0, |k| k.requests.completed)
            }
        };
        match self.value(r) {
            Some(v) => v <= self.bound,
            None => completed > 0,
        }
    }

    /// The request meets the SLO (see the module docs for the mapping);
    /// `itl` is the request's own ITL summary, if it had two tokens. A
    /// class's SLO holds no request of another class.
    pub fn request_ok(&self, rec: &RequestRecord, itl: Option<&Stats>) -> bool {
        if let Some(c) = &self.class
            && c.index != Some(usize::from(rec.class))
        {
            return rec.status == Status::Finished;
        }
        if rec.status != Status::Finished {
            return false;
        }
        let Metric::Latency(family, stat) = self.metric else { return true };
        let value = match family {
            Family::Itl => itl.and_then(|s| stat.of(s)),
            f => latency_ms(f, rec),
        };
        value.is_none_or(|v| v <= self.bound)
    }
}

/// A finished request's own TTFT, E2E, queue time or TPOT in ms, as the
/// run's summary counts it (`None` for the other families, and for a TPOT
/// of one token).
fn latency_ms(family: Family, rec: &RequestRecord) -> Option<f64> {
    let ms = |ns: Option<u64>| ns.map(|x| x as f64 / 1e6);
    match family {
        Family::Ttft => ms(rec.ttft_ns()),
        Family::E2e => ms(rec.e2e_ns()),
        Family::Queue => ms(rec.queue_ns()),
        Family::Tpot => rec.tpot_ns().map(|x| x / 1e6),
        Family::Itl | Family::Step => None,
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} <= {}", self.name(), self.bound)
    }
}

/// Requests meeting every SLO.
pub fn good_requests(slos: &[Slo], records: &[RequestRecord], itl: &RequestItl) -> u64 {
    records.iter().filter(|r| slos.iter().all(|s| s.request_ok(r, itl.of(r.id)))).count() as u64
}

/// Each request's own ITL summary, made when it finishes. Only the gaps of
/// requests in flight are held.
#[derive(Default)]
pub struct RequestItl {
    last: Vec<Option<SimTime>>,
    gaps: Vec<Vec<u64>>,
    done: Vec<Option<Stats>>,
}

impl RequestItl {
    pub fn of(&self, id: RequestId) -> Option<&Stats> {
        self.done.get(id as usize).and_then(Option::as_ref)
    }

    fn drop_gaps(&mut self, id: RequestId) {
        if let Some(g) = self.gaps.get_mut(id as usize) {
            *g = Vec::new();
        }
    }
}

impl Observer for RequestItl {
    fn arrived(&mut self, id: RequestId, _at: SimTime, _prompt: u32, _output: u32) {
        let n = id as usize + 1;
        if self.last.len() < n {
            self.last.resize(n, None);
            self.gaps.resize_with(n, Vec::new);
            self.done.resize(n, None);
        }
    }

    fn token(&mut self, id: RequestId, at: SimTime, _index: u32) {
        let i = id as usize;
        // Tokens released together (a speculative verify step) are one
        // chunk: one gap, as the run's ITL counts them.
        if let Some(Some(prev)) = self.last.get(i)
            && *prev != at
        {
            self.gaps[i].push(at.nanos_since(*prev));
        }
        if let Some(l) = self.last.get_mut(i) {
            *l = Some(at);
        }
    }

    fn finished(&mut self, id: RequestId, _at: SimTime) {
        let i = id as usize;
        if let Some(gaps) = self.gaps.get_mut(i).map(std::mem::take).filter(|g| !g.is_empty()) {
            self.done[i] = Some(Stats::from_nanos(gaps));
        }
    }

    fn rejected(&mut self, id: RequestId, _at: SimTime, _reason: RejectReason) {
        self.drop_gaps(id);
    }

    fn aborted(&mut self, id: RequestId, _at: SimTime) {
        self.drop_gaps(id);
    }
}

/// Watches a probe's requests as they finish and asks the run to stop
/// ([`Observer::wants_stop`]) as soon as an SLO is certain to be missed
/// whatever the rest of the run does: the search's early stop.
///
/// Only SLOs on a request latency (TTFT, E2E, queue, TPOT) of every
/// request (no class) are watched: their values are fixed when a request
/// finishes and the run's statistic is over finished requests, at most
/// `requests` of them. With `k` finished requests above the bound `B`:
/// - `max` is missed at the first (`k = 1`);
/// - a percentile `q` over `n` values is read at rank `floor(q (n - 1))`
///   of the sorted values (then interpolated upwards), so it is above `B`
///   once `k >= n - floor(q (n - 1))`; that grows with `n`, so with `n` at
///   most `requests` it is missed once `k >= requests - floor(q (requests
///   - 1)) + 2` (the 2 covers the floating-point floor either way);
/// - the mean is over at most `requests` values, none negative, so it is
///   missed once the sum so far over `requests` passes `B`.
///
/// Past [`llmsim_planner::metrics::fold::EXACT_SAMPLES`] requests the run's
/// percentiles come from a histogram, and nothing is watched.
pub struct SloCut {
    rules: Vec<CutRule>,
    /// What each request did so far, by id.
    seen: Vec<Seen>,
    /// The SLOs found missed, by name, in the order they were found.
    pub missed: Vec<String>,
    /// Whether a queue-time SLO is watched (first schedulings are kept).
    queue: bool,
    /// The most requests the run finishes: every statistic is over at
    /// most this many values.
    requests: u64,
}

/// A request's arrival, first scheduling and first token (ns), and the
/// tokens it asked for.
#[derive(Clone, Copy, Default)]
struct Seen {
    arrival: u64,
    scheduled: Option<u64>,
    first: Option<u64>,
    tokens: u32,
}

struct CutRule {
    name: String,
    family: Family,
    stat: crate::sweep::metric::Stat,
    bound: f64,
    /// Values above the bound so far, and the sum of every value (ms).
    above: u64,
    sum_ms: f64,
    /// `above` at which the statistic is missed (percentiles).
    needed: u64,
    done: bool,
}

impl SloCut {
    /// A watch over `requests` requests; `None` when no SLO can be
    /// watched (see the type's notes).
    pub fn new(slos: &[Slo], requests: u64) -> Option<SloCut> {
        use crate::sweep::metric::Stat;
        if requests == 0 || requests > llmsim_planner::metrics::fold::EXACT_SAMPLES as u64 {
            return None;
        }
        let rules: Vec<CutRule> = slos
            .iter()
            .filter(|s| s.class.is_none())
            .filter_map(|s| match s.metric {
                Metric::Latency(family @ (Family::Ttft | Family::E2e | Family::Queue | Family::Tpot), stat) => {
                    let needed = match stat {
                        Stat::Max => 1,
                        Stat::Mean => u64::MAX,
                        p => {
                            let q = p.quantile();
                            let lo = (q * (requests - 1) as f64).floor() as u64;
                            requests - lo + 2
                        }
                    };
                    Some(CutRule {
                        name: s.name(),
                        family,
                        stat,
                        bound: s.bound,
                        above: 0,
                        sum_ms: 0.0,
                        needed,
                        done: false,
                    })
                }
                _ => None,
            })
            .collect();
        let queue = rules.iter().any(|r| r.family == Family::Queue);
        (!rules.is_empty()).then(|| SloCut { queue, requests, rules, seen: Vec::new(), missed: Vec::new() })
    }

    fn first_scheduled(&mut self, id: RequestId, at: u64) {
        if let Some(s @ Seen { scheduled: None, .. }) = self.seen.get_mut(id as usize) {
            s.scheduled = Some(at);
        }
    }

    fn first_token(&mut self, id: RequestId, at: u64) {
        if let Some(s @ Seen { first: None, .. }) = self.seen.get_mut(id as usize) {
            s.first = Some(at);
        }
    }

    /// Request `id` finished at `end`: its latencies, as the run's
    /// summary computes them ([`RequestRecord`]'s).
    fn finish(&mut self, id: RequestId, end: u64) {
        let Some(&seen) = self.seen.get(id as usize) else { return };
        let rec = RequestRecord {
            id,
            arrival: SimTime::from_nanos(seen.arrival),
            prompt: 0,
            output: seen.tokens,
            first_scheduled: seen.scheduled.map(SimTime::from_nanos),
            first_token: seen.first.map(SimTime::from_nanos),
            last_token: Some(SimTime::from_nanos(end)),
            tokens: seen.tokens,
            preemptions: 0,
            max_gap_ns: 0,
            status: Status::Finished,
            cached_tokens: None,
            class: 0,
        };
        for family in [Family::Queue, Family::E2e, Family::Ttft, Family::Tpot] {
            if let Some(ms) = latency_ms(family, &rec) {
                self.see(family, ms);
            }
        }
    }

    fn see(&mut self, family: Family, ms: f64) {
        use crate::sweep::metric::Stat;
        let requests = self.requests as f64;
        for r in self.rules.iter_mut().filter(|r| r.family == family && !r.done) {
            r.sum_ms += ms;
            if ms > r.bound {
                r.above += 1;
            }
            // (The mean's margin covers the rounding of a sum of floats.)
            let missed = match r.stat {
                Stat::Mean => r.sum_ms / requests > r.bound * (1.0 + 1e-9),
                _ => r.above >= r.needed,
            };
            if missed {
                r.done = true;
                self.missed.push(r.name.clone());
            }
        }
    }
}

impl Observer for SloCut {
    fn arrived(&mut self, id: RequestId, at: SimTime, _prompt: u32, output: u32) {
        let i = id as usize;
        if self.seen.len() <= i {
            self.seen.resize(i + 1, Seen::default());
        }
        // A finished request released every token it asked for.
        self.seen[i] = Seen { arrival: at.as_nanos(), tokens: output, ..self.seen[i] };
    }

    fn scheduled(&mut self, id: RequestId, at: SimTime, _tokens: u32, _computed: u32) {
        if self.queue {
            self.first_scheduled(id, at.as_nanos());
        }
    }

    fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        if index == 1 {
            self.first_token(id, at.as_nanos());
        }
    }

    fn finished(&mut self, id: RequestId, at: SimTime) {
        self.finish(id, at.as_nanos());
    }

    /// The events a stretch stands for, without replaying its steps: its
    /// arrivals, each joiner's first scheduling and first token (at its
    /// admission step), a running request's first token (at the first
    /// step, if it had none), and the finishes.
    fn decode_stretch(&mut self, s: &Stretch<'_>) {
        for a in s.arrivals {
            self.arrived(a.id, a.arrival, a.prompt, a.output);
        }
        let running = s.requests.len();
        let (Some(first), Some(last)) = (s.steps.first(), s.steps.last()) else { return };
        let end_of = |k: u32| s.steps.get(k as usize).map_or(last.end, |st| st.end).as_nanos();
        // A running request was scheduled before; its first token is at
        // the first step's end if it had none.
        for (&(id, _, g), &(n, finished)) in s.requests.iter().zip(&s.spans[..running]) {
            if g == 0 {
                self.first_token(id, first.end.as_nanos());
            }
            if finished {
                self.finish(id, end_of(n - 1));
            }
        }
        for (j, &(n, finished)) in s.joins.iter().zip(&s.spans[running..]) {
            let start = s.steps.get(j.step as usize).map_or(last.start, |st| st.start).as_nanos();
            self.first_scheduled(j.id, start);
            self.first_token(j.id, end_of(j.step));
            if finished {
                self.finish(j.id, end_of(j.step + n - 1));
            }
        }
    }

    fn wants_stop(&self) -> bool {
        !self.missed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llmsim_core::time::SimTime;

    fn record(ttft_ms: u64, gaps_ms: &[u64]) -> RequestRecord {
        let ms = 1_000_000;
        let first = SimTime::from_nanos(ttft_ms * ms);
        let last = first.plus_nanos(gaps_ms.iter().sum::<u64>() * ms);
        RequestRecord {
            id: 0,
            arrival: SimTime::ZERO,
            prompt: 10,
            output: gaps_ms.len() as u32 + 1,
            first_scheduled: Some(SimTime::ZERO),
            first_token: Some(first),
            last_token: Some(last),
            tokens: gaps_ms.len() as u32 + 1,
            preemptions: 0,
            max_gap_ns: gaps_ms.iter().max().copied().unwrap_or(0) * ms,
            status: Status::Finished,
            cached_tokens: None,
            class: 0,
        }
    }

    #[test]
    fn slos_parse_with_equals_or_less_equal() {
        let s = Slo::parse("ttft_p99_ms=500").unwrap();
        assert_eq!((s.name(), s.bound), ("ttft_p99_ms".to_string(), 500.0));
        assert_eq!(Slo::parse("itl_p50_ms<=20").unwrap().bound, 20.0);
        assert!(Slo::parse("ttft_p99_ms=-1").unwrap_err().to_string().contains("must be a number, 0 or more"));
        assert!(Slo::parse("ttft_p99_ms").unwrap_err().to_string().contains("METRIC=BOUND"));
        assert_eq!(Slo::parse("preemptions=0").unwrap().metric, Metric::Preemptions);
        let e = Slo::parse("latency_p99_ms=5").unwrap_err().to_string();
        assert!(e.contains("is not a metric") && e.contains("ttft_p99_ms, ttft_max_ms"), "{e}");
    }

    #[test]
    fn a_request_is_checked_against_its_own_latency() {
        let r = record(100, &[10, 30, 10]);
        let itl = Stats::from_nanos(vec![10_000_000, 30_000_000, 10_000_000]);
        let ok = |t: &str| Slo::parse(t).unwrap().request_ok(&r, Some(&itl));
        assert!(ok("ttft_p99_ms=100") && !ok("ttft_p50_ms=99"));
        assert!(ok("tpot_p99_ms=16.67") && !ok("tpot_mean_ms=16.6"));
        assert!(ok("e2e_max_ms=150") && !ok("e2e_max_ms=149"));
        let mut rejected = r.clone();
        rejected.status = Status::Rejected(llmsim_core::engine::RejectReason::NeverFits);
        assert!(!Slo::parse("ttft_p99_ms=1e9").unwrap().request_ok(&rejected, None));
    }

    #[test]
    fn a_request_meets_an_itl_slo_by_the_same_statistic_over_its_own_gaps() {
        let r = record(100, &[10, 30, 10]);
        let itl = Stats::from_nanos(vec![10_000_000, 30_000_000, 10_000_000]);
        let ok = |t: &str| Slo::parse(t).unwrap().request_ok(&r, Some(&itl));
        assert!(ok("itl_p50_ms=10") && !ok("itl_p50_ms=9.9"), "its median gap is 10 ms");
        assert!(ok("itl_max_ms=30") && !ok("itl_max_ms=29.9"), "its largest gap is 30 ms");
        assert!(ok("itl_p99_ms=29.6") && !ok("itl_p99_ms=29.5"), "numpy: p99 of [10, 10, 30] is 29.6");
        let one_token = record(100, &[]);
        assert!(Slo::parse("itl_max_ms=1").unwrap().request_ok(&one_token, None), "no gap, nothing to miss");
    }

    #[test]
    fn the_itl_observer_summarises_each_finished_request() {
        let mut o = RequestItl::default();
        let t = |ms: u64| SimTime::from_nanos(ms * 1_000_000);
        o.arrived(0, t(0), 1, 3);
        o.arrived(1, t(0), 1, 2);
        for (id, at, i) in [(0, 5, 1), (1, 5, 1), (0, 15, 2), (0, 45, 3)] {
            o.token(id, t(at), i);
        }
        o.finished(0, t(45));
        o.rejected(1, t(50), llmsim_core::engine::RejectReason::NeverFits);
        assert_eq!(o.of(0).and_then(|s| s.max), Some(30.0));
        assert_eq!(o.of(0).map(|s| s.count), Some(2));
        assert!(o.of(1).is_none());
    }
}
