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
use llmsim_core::engine::{Observer, RejectReason, RequestId};
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
        let ms = |ns: Option<u64>| ns.map(|x| x as f64 / 1e6);
        let value = match family {
            Family::Ttft => ms(rec.ttft_ns()),
            Family::E2e => ms(rec.e2e_ns()),
            Family::Queue => ms(rec.queue_ns()),
            Family::Tpot => rec.tpot_ns().map(|x| x / 1e6),
            Family::Itl => itl.and_then(|s| stat.of(s)),
            Family::Step => None,
        };
        value.is_none_or(|v| v <= self.bound)
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
