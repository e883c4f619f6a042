//! The one way to run a scenario: [`Run`], a builder that picks the
//! topology the scenario describes (one engine, replicas behind a router,
//! or prefill and decode pools), drives it with the one run loop
//! ([`crate::run_driver::drive`]) and collects its metrics.
//!
//! ```no_run
//! # fn demo(scenario: &llmsim_scenario::config::Scenario) -> Result<(), llmsim_planner::run_driver::SimError> {
//! use llmsim_planner::Run;
//! let out = Run::new(scenario).summary_only(true).go()?;
//! println!("{} requests", out.result.requests.completed);
//! # Ok(()) }
//! ```

use crate::cluster::disagg::{self, KvLink, PoolCollectors, Pools};
use crate::cluster::{self, ClusterRun, Lanes, Replicas, imbalance, router::RouterState};
use crate::metrics::{Collector, CollectorOptions, RunOutput};
use crate::run_driver::{Progress, Setup, SimError, Stepping, drive};
use crate::sim::Single;
use crate::workload::AnySource;
use llmsim_core::engine::{Engine, Observer};
use llmsim_scenario::config::cluster::{DEFAULT_OVERLAP_WEIGHT, Disagg};
use llmsim_scenario::config::{Cluster, Scenario, limits};

/// A run of a scenario, set up step by step, then started with
/// [`Run::go`] or [`Run::observed`].
pub struct Run<'a> {
    scenario: &'a Scenario,
    options: CollectorOptions,
    summary: bool,
    stepping: Stepping,
    source: Option<&'a mut AnySource>,
    progress: Option<&'a mut dyn FnMut(&Progress)>,
    stop_at_miss: bool,
}

impl<'a> Run<'a> {
    /// A run of `scenario`: its own requests, decode stretches where the
    /// results are the same ([`Stepping::MacroSteps`]), every request's
    /// record kept, no step kept, no progress report.
    pub fn new(scenario: &'a Scenario) -> Run<'a> {
        Run {
            scenario,
            options: CollectorOptions::default(),
            summary: false,
            stepping: Stepping::default(),
            source: None,
            progress: None,
            stop_at_miss: false,
        }
    }

    /// With `true`, a fleet over time (`cluster.timeline` or
    /// `cluster.autoscale`) ends at its first window that misses
    /// `cluster.timeline.slo`, with [`SimError::WindowMissed`] (its
    /// figures up to that window), instead of running to the end: for
    /// searches that only ask whether every window meets. Other runs
    /// ignore it.
    pub fn stop_at_missed_window(mut self, stop: bool) -> Run<'a> {
        self.stop_at_miss = stop;
        self
    }

    /// What the collector keeps beyond the summary (every step).
    pub fn options(mut self, options: CollectorOptions) -> Run<'a> {
        self.options = options;
        self
    }

    /// With `true`, no per-request record is kept once a request has
    /// ended ([`Collector::summary_only`]), so memory stays flat in
    /// requests. The result is the same; [`RunOutput::requests`] holds
    /// only requests still in flight.
    pub fn summary_only(mut self, summary: bool) -> Run<'a> {
        self.summary = summary;
        self
    }

    /// How the engines advance.
    pub fn stepping(mut self, stepping: Stepping) -> Run<'a> {
        self.stepping = stepping;
        self
    }

    /// The requests of `source` (made for this scenario; e.g. one that
    /// keeps its rows for `llmsim trace`) instead of a fresh one.
    pub fn source(mut self, source: &'a mut AnySource) -> Run<'a> {
        self.source = Some(source);
        self
    }

    /// Reports how far the run has got now and then (for a progress bar).
    pub fn progress(mut self, progress: &'a mut dyn FnMut(&Progress)) -> Run<'a> {
        self.progress = Some(progress);
        self
    }

    /// Runs and collects the metrics.
    pub fn go(self) -> Result<RunOutput, SimError> {
        self.observed(&mut ())
    }

    /// Runs, collecting the metrics and also showing every event to `extra`.
    pub fn observed<O: Observer>(self, extra: &mut O) -> Result<RunOutput, SimError> {
        let s = self.scenario;
        let mut own;
        let source = match self.source {
            Some(source) => source,
            None => {
                own = AnySource::new(s);
                &mut own
            }
        };
        let mut quiet = |_: &Progress| {};
        let progress = self.progress.unwrap_or(&mut quiet);
        let setup = Setup {
            delay_ns: s.request_delay_ns(),
            stepping: self.stepping,
            keep_steps: self.options.keep_steps,
            keep_requests: !self.summary,
            // No record outlives its request in summary mode.
            limits: crate::run_driver::RunLimits {
                max_requests: if self.summary { limits::MAX_SUMMARY_REQUESTS } else { limits::MAX_REQUESTS },
                ..Default::default()
            },
        };
        let parts = Parts { s, options: self.options, summary: self.summary, setup, stop_at_miss: self.stop_at_miss };
        match &s.cluster {
            None => parts.single(source, extra, progress),
            Some(c) => match &c.disagg {
                None if c.timeline.is_some() => Ok(parts.scaled(c, source, extra, progress)?.0),
                None => parts.replicas(c, source, extra, progress),
                Some(d) => parts.pools(c, d, source, extra, progress),
            },
        }
    }
}

/// Runs `scenario`, whose cluster has a timeline, keeping every request's
/// record, and returns what the autoscaled topology saw too (each
/// replica's life), for tests.
#[cfg(test)]
pub(crate) fn run_scaled(scenario: &Scenario) -> Result<(RunOutput, crate::cluster::scaled::ScaledRun), SimError> {
    let setup = Setup { delay_ns: scenario.request_delay_ns(), ..Setup::default() };
    let parts = Parts { s: scenario, options: CollectorOptions::default(), summary: false, setup, stop_at_miss: false };
    let cluster = scenario.cluster.as_ref().expect("a cluster");
    parts.scaled(cluster, &mut AnySource::new(scenario), &mut (), &mut |_| {})
}

/// What every topology's run starts from.
struct Parts<'a> {
    s: &'a Scenario,
    options: CollectorOptions,
    summary: bool,
    setup: Setup,
    /// [`Run::stop_at_missed_window`].
    stop_at_miss: bool,
}

impl Parts<'_> {
    fn collector(&self, s: &Scenario) -> Collector {
        // The run's requests when nothing else ends it first.
        let known = match s.workload.duration_s {
            None => s.workload.requests.map_or(0, |n| n.min(llmsim_scenario::limits::MAX_REQUESTS) as usize),
            Some(_) => 0,
        };
        Collector::new(&s.capacity, self.options)
            .summary_only_if(self.summary)
            .reserve_records(known)
            .classes(crate::workload::classes::Classes::of(s))
    }

    fn single<O: Observer>(
        &self,
        source: &mut AnySource,
        extra: &mut O,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<RunOutput, SimError> {
        let mut collector = self.collector(self.s);
        let mut engine = Engine::new(self.s.engine_config());
        let obs = &mut (&mut collector, extra);
        drive(Single::new(&mut engine), source, obs, &self.setup, |_, _, _| {}, progress)?;
        Ok(collector.finish(self.s))
    }

    /// Replicas behind a router: the aggregate figures over all requests
    /// (steps pooled over replicas, so `kv.peak_blocks` is the largest
    /// replica's), plus `router`, `gpus`, `replicas` and `imbalance`.
    fn replicas<O: Observer>(
        &self,
        cluster: &Cluster,
        source: &mut AnySource,
        extra: &mut O,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<RunOutput, SimError> {
        let s = self.s;
        let cfg = s.engine_config();
        let mut engines: Vec<Engine> = (0..cluster.replicas).map(|_| Engine::new(cfg.clone())).collect();
        let mut collector = self.collector(s);
        let weight = cluster.overlap_weight.unwrap_or(DEFAULT_OVERLAP_WEIGHT);
        let mut router = RouterState::new(cluster.router, weight, s.workload.seed);
        // Replica by replica up to the next arrival, where that changes
        // nothing but the order of events (docs/clusters.md, "Speed").
        let lanes =
            self.setup.stepping == Stepping::MacroSteps && !self.setup.keep_steps && cluster::arrivals_are_fixed(s);
        let obs = &mut (&mut collector, extra);
        let run: ClusterRun = match lanes {
            true => drive(Lanes::new(&mut engines, &mut router), source, obs, &self.setup, |_, _, _| {}, progress)?,
            false => drive(Replicas::new(&mut engines, &mut router), source, obs, &self.setup, |_, _, _| {}, progress)?,
        };
        let mut out = collector.finish(s);
        let caching = s.prefix_caching();
        let r = &mut out.result;
        r.router = Some(cluster.router.as_str().to_string());
        r.gpus = Some(cluster.replicas * s.deployment.gpus());
        r.replicas = Some(run.replicas.iter().map(|x| x.out(caching)).collect());
        r.imbalance = Some(imbalance(&run.replicas));
        out.placement = Some(run.placement);
        Ok(out)
    }

    /// An autoscaled fleet, or one with a timeline (docs/clusters.md,
    /// "Autoscaling"): what [`Parts::replicas`] gives, plus `over_time`
    /// and each window's row. Always step by step: the replicas' number
    /// changes between steps.
    fn scaled<O: Observer>(
        &self,
        cluster: &Cluster,
        source: &mut AnySource,
        extra: &mut O,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<(RunOutput, crate::cluster::scaled::ScaledRun), SimError> {
        use crate::cluster::scaled::{PoolSpec, Scaled};
        use crate::cluster::{hpa::Hpa, timeline::Watch};
        use crate::metrics::over_time::{AutoscaleOut, OverTimeOut, PoolOverTime};
        use llmsim_scenario::config::autoscale::Signal;
        let s = self.s;
        let timeline = cluster.timeline.clone().unwrap_or_default();
        // With pools, the first one's scenario stands for the capacity
        // figures (as the prefill pool's does with disaggregation).
        let first = cluster.pools.first().map_or(s, |p| &*p.scenario);
        let mut collector = self.collector(first);
        let weight = cluster.overlap_weight.unwrap_or(DEFAULT_OVERLAP_WEIGHT);
        let mut router = RouterState::new(cluster.router, weight, s.workload.seed);
        let specs: Vec<PoolSpec> = match cluster.pools.is_empty() {
            true => vec![PoolSpec {
                name: None,
                cfg: s.engine_config(),
                gpus: s.deployment.gpus(),
                initial: cluster.replicas,
                hpa: cluster.autoscale.as_ref().map(Hpa::new),
                price: s.hardware.cost_per_hour,
            }],
            false => (cluster.pools.iter())
                .map(|p| PoolSpec {
                    name: Some(p.name.clone()),
                    cfg: p.scenario.engine_config(),
                    gpus: p.gpus_per_replica(),
                    initial: p.replicas,
                    hpa: p.autoscale.as_ref().map(Hpa::new),
                    price: p.cost_per_hour,
                })
                .collect(),
        };
        let keep_ttft = specs.iter().any(|p| p.hpa.as_ref().is_some_and(|h| h.config().signal == Signal::TtftP99Ms));
        let gpus: Vec<u32> = specs.iter().map(|p| p.gpus).collect();
        let watch = Watch::new(timeline.window_s, self.setup.delay_ns, timeline.slo.clone(), keep_ttft);
        let topology = Scaled::new(specs, &mut router, watch).stop_at_missed_window(self.stop_at_miss);
        let obs = &mut (&mut collector, extra);
        let setup = Setup { stepping: Stepping::Exact, ..self.setup };
        let mut run = drive(topology, source, obs, &setup, |_, _, _| {}, progress)?;
        let mut out = collector.finish(first);
        let caching = s.prefix_caching();
        let r = &mut out.result;
        r.router = Some(cluster.router.as_str().to_string());
        r.gpus = Some(run.pools.iter().zip(&gpus).map(|(p, g)| p.peak * g).sum());
        r.replicas = Some(run.cluster.replicas.iter().map(|x| x.out(caching)).collect());
        r.imbalance = Some(imbalance(&run.cluster.replicas));
        let missed: Option<Vec<f64>> = (!timeline.slo.bounds().is_empty())
            .then(|| run.rows.iter().filter(|w| w.slo_met == Some(false)).map(|w| w.start_s).collect());
        let cost = run.pools.iter().filter_map(|p| p.cost).reduce(|a, b| a + b);
        let auto = cluster.autoscale.as_ref();
        let pools = (!cluster.pools.is_empty()).then(|| {
            (cluster.pools.iter().zip(&run.pools).enumerate())
                .map(|(i, (p, got))| PoolOverTime {
                    name: p.name.clone(),
                    hardware: p.scenario.hardware.name.clone(),
                    gpus_per_replica: p.gpus_per_replica(),
                    requests: run.requests_by_pool.get(i).copied().unwrap_or(0),
                    gpu_hours: got.gpu_hours,
                    cost: got.cost,
                    peak_replicas: got.peak,
                    scale_ups: got.scale_ups,
                    scale_downs: got.scale_downs,
                })
                .collect()
        });
        r.over_time = Some(OverTimeOut {
            window_s: timeline.window_s,
            windows: run.rows.len() as u64,
            end_s: run.end_s,
            gpu_hours: run.gpu_hours,
            cost,
            peak_replicas: run.peak,
            slo_missed: missed.as_ref().map(|m| m.len() as u64),
            slo_missed_windows: missed,
            autoscale: auto.map(|a| AutoscaleOut {
                signal: a.signal.as_str().to_string(),
                target: a.target,
                min_replicas: a.min_replicas,
                max_replicas: a.max_replicas,
                cold_start_s: a.cold_start.total_s(),
                scale_ups: run.events.iter().filter(|e| e.to > e.from).count() as u64,
                scale_downs: run.events.iter().filter(|e| e.to < e.from).count() as u64,
                events: run.events.clone(),
            }),
            pools,
        });
        out.placement = Some(run.cluster.placement.clone());
        out.windows = std::mem::take(&mut run.rows);
        Ok((out, run))
    }

    /// Prefill and decode pools: the aggregate figures over all requests
    /// (steps pooled over both pools, `capacity` a prefill replica's),
    /// plus what [`disagg::add_pools`] adds.
    fn pools<O: Observer>(
        &self,
        cluster: &Cluster,
        d: &Disagg,
        source: &mut AnySource,
        extra: &mut O,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<RunOutput, SimError> {
        let s = self.s;
        let mut prefill = disagg::engines(&d.prefill, true);
        let mut decode = disagg::engines(&d.decode, false);
        let mut prefill_router = disagg::router(&d.prefill, s.workload.seed, 0);
        let mut decode_router = disagg::router(&d.decode, s.workload.seed, 1);
        let first = &d.prefill.scenario;
        // A request may be rejected in either pool: the smaller one decides.
        let fits = first.capacity.admissible_tokens().min(d.decode.scenario.capacity.admissible_tokens());
        let mut collector = self.collector(first).fits_tokens(fits);
        let pool_collector = |p: &Scenario| Collector::new(&p.capacity, CollectorOptions::default());
        let mut per_pool = PoolCollectors {
            prefill: pool_collector(first).summary_only_if(self.summary),
            decode: pool_collector(&d.decode.scenario).summary_only_if(self.summary),
        };
        let link =
            KvLink { kv_transfer: d.kv_transfer.clone(), kv_bytes_per_token: first.deployment.kv_bytes_per_token };
        let routers = [&mut prefill_router, &mut decode_router];
        let pools = Pools::new(&mut prefill, &mut decode, routers, &mut per_pool, link);
        let obs = &mut (&mut collector, extra);
        let run = drive(pools, source, obs, &self.setup, |_, _, _| {}, progress)?;
        // `capacity` is one replica's of the first pool.
        let mut out = collector.finish(first);
        let caching = s.prefix_caching();
        disagg::add_pools(&mut out, cluster.gpus(s), caching, [&d.prefill, &d.decode], run, &per_pool);
        Ok(out)
    }
}
