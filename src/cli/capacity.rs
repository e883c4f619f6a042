//! `llmsim capacity`: the highest rate that meets every SLO, and what it
//! takes to serve a target rate.

use std::path::PathBuf;
use std::sync::LazyLock;

use clap::Args;

mod over_time;

use super::{CliError, ScenarioArgs, print, write_output};
use llmsim_analysis::capacity::probe::MAX_REQUESTS;
use llmsim_analysis::capacity::search::{FEWEST_REQUESTS, MAX_SEEDS, SearchError};
use llmsim_analysis::capacity::{Options, Slo, render, search};
use llmsim_core::util::thousands;

/// The finest `--precision`: the bisection stops well before two rates are
/// adjacent floating-point numbers.
const MIN_PRECISION: f64 = 1e-4;
/// The largest `--target-rate`, so the replica count stays exact.
const MAX_TARGET_RATE: f64 = 1e9;

static SLO_HELP: LazyLock<String> = LazyLock::new(|| {
    format!(
        "An SLO, METRIC=BOUND: met when the run's metric is <= BOUND, in the metric's unit (ms for \
         *_ms), e.g. ttft_p99_ms=500 or preemptions=0 (repeatable; every SLO must hold). Latencies \
         also decide which requests count as good. CLASS:METRIC=BOUND holds one of workload.classes \
         to a latency (interactive:ttft_p99_ms=500). METRIC is one of: {}",
        llmsim_analysis::sweep::metric::slo_names()
    )
});

#[derive(Debug, Args)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    #[arg(long, value_name = "METRIC=BOUND", required_unless_present = "over_time", help = SLO_HELP.as_str())]
    pub slo: Vec<String>,
    /// The rate the fleet must serve (req/s): prints the replicas needed,
    /// with requests split evenly between them.
    #[arg(long, value_name = "REQ/S")]
    pub target_rate: Option<f64>,
    /// Stop when the highest passing and lowest failing rates are within
    /// this fraction of each other (0.0001 to 0.5).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.01)]
    pub precision: f64,
    /// Requests per probe and seed (100 to 1,000,000), instead of 20,000
    /// for saturation probes and max(2000, 100/(1-q)) for SLO probes, q
    /// the highest SLO quantile (and longer runs where E2E is long). A
    /// fleet probe (--target-rate on a cluster) runs this many for every
    /// replica.
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Seeds every probe runs (1 to 100; default 3, 1 with --over-time):
    /// the scenario's seed and the next ones. A rate is sustained when the
    /// queue keeps up pooled over them, and meets the SLOs when every one
    /// of them does.
    #[arg(long, value_name = "N")]
    pub seeds: Option<u32>,
    /// With --target-rate and a scenario with prefill/decode pools: the
    /// GPUs to split between the pools (default: the scenario's pools').
    /// Every split is simulated at the target rate.
    #[arg(long, value_name = "N", requires = "target_rate")]
    pub gpus: Option<u32>,
    /// Vary the rate of this class of workload.classes alone, the other
    /// classes at the rates the scenario gives them: how much of it fits
    /// beside them within the SLOs (docs/priorities.md).
    #[arg(long, value_name = "NAME", conflicts_with = "target_rate")]
    pub class: Option<String>,
    /// The cheapest policy for a fleet over time (a scenario with
    /// cluster.autoscale, cluster.pools or cluster.timeline): every
    /// --set KEY=a,b,c is an axis of policies (as `llmsim sweep` reads it),
    /// each run over the whole load and judged by its windows against
    /// cluster.timeline.slo (or --slo on a window percentile:
    /// ttft_p50_ms, ttft_p99_ms, itl_p50_ms, itl_p99_ms); printed against
    /// the smallest static fleet of the first pool that meets the same SLO.
    #[arg(long, conflicts_with_all = ["target_rate", "gpus", "class", "requests"])]
    pub over_time: bool,
    /// With --over-time: the fraction of windows that must meet the SLO on
    /// every seed (above 0, at most 1).
    #[arg(long, value_name = "FRACTION", default_value_t = 1.0, requires = "over_time")]
    pub windows: f64,
    /// With --over-time: the largest static fleet to try (default: twice
    /// the scenario's largest fleet, at least 8).
    #[arg(long, value_name = "N", requires = "over_time")]
    pub static_max: Option<u32>,
    /// Run every probe to its end. By default a seed's run stops as soon
    /// as an SLO on a request latency (ttft, e2e, queue, tpot) is certain
    /// to be missed, in the SLO search's steps and bisection and in the
    /// fleet search (the probe shows the other seeds' figures and how many
    /// stopped); with --over-time, when every window must meet, a static
    /// probe stops at its first missed window (its JSON figures are then
    /// up to there, with `stopped_at_s`).
    #[arg(long)]
    pub full_probes: bool,
    /// Bracket the SLO search's limit with short probes (a quarter of the
    /// requests) first, then confirm its two ends with full probes and
    /// bisect on with full ones: faster when many probes meet; the answer
    /// rests on full probes (one that met, one that missed) but may differ
    /// from the default search's where the seeds' verdicts near the limit
    /// are not monotone in the rate (docs/sweep-capacity.md, "Bracketing").
    #[arg(long, conflicts_with = "over_time")]
    pub bracket: bool,
    /// With --over-time: the policies' results from `llmsim sweep --shard`
    /// files (run with this command's scenario, --set values and --seeds)
    /// instead of running them here; the static fleet is still searched here.
    #[arg(long, value_name = "SHARD", num_args = 1.., requires = "over_time")]
    pub shards: Vec<PathBuf>,
    /// Worker threads with --over-time (default: RAYON_NUM_THREADS, else
    /// one per core); the output does not depend on it.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "over_time")]
    pub threads: usize,
    /// Write the search and its answer as JSON; `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Do not print the summary.
    #[arg(long, short)]
    pub quiet: bool,
}

fn options(a: &CapacityArgs) -> Result<Options, CliError> {
    let usage = |m: String| CliError::Usage(m);
    let slos =
        a.slo.iter().map(|s| Slo::parse(s).map_err(|e| usage(format!("--slo {e}")))).collect::<Result<_, _>>()?;
    if !(MIN_PRECISION..=0.5).contains(&a.precision) {
        return Err(usage(format!(
            "--precision {:?}: must be from {MIN_PRECISION} to 0.5, e.g. 0.01 for 1%",
            a.precision
        )));
    }
    if let Some(t) = a.target_rate.filter(|t| !(t.is_finite() && *t > 0.0 && *t <= MAX_TARGET_RATE)) {
        return Err(usage(format!("--target-rate {t:?}: must be a rate above 0 and at most 1e9 req/s")));
    }
    if let Some(n) = a.requests.filter(|n| !(FEWEST_REQUESTS..=MAX_REQUESTS).contains(n)) {
        return Err(usage(format!(
            "--requests {n}: a probe runs {} to {} requests a seed (each keeps a record of about 150 bytes \
             while it runs; fewer cannot show whether the queue keeps up)",
            thousands(FEWEST_REQUESTS),
            thousands(MAX_REQUESTS)
        )));
    }
    let seeds = a.seeds.unwrap_or(llmsim_analysis::capacity::search::SEEDS);
    if !(1..=MAX_SEEDS).contains(&seeds) {
        return Err(usage(format!("--seeds {seeds}: must be from 1 to {MAX_SEEDS}")));
    }
    Ok(Options {
        slos,
        precision: a.precision,
        requests: a.requests,
        target_rate: a.target_rate,
        seeds,
        early_stop: !a.full_probes,
        bracket: a.bracket,
    })
}

pub fn execute(a: CapacityArgs) -> Result<(), CliError> {
    if a.over_time {
        return over_time::execute_over_time(&a);
    }
    let mut opts = options(&a)?;
    let mut scenario = a.scenario.load()?;
    if scenario.cluster.as_ref().is_some_and(|c| c.timeline.is_some()) {
        return Err(CliError::Usage(format!(
            "{}: capacity sizes a fixed fleet for one rate; this one has cluster.autoscale, cluster.pools or \
             cluster.timeline (a fleet over time): search its policies with --over-time, run it with llmsim run, \
             or remove those keys",
            scenario.source.display()
        )));
    }
    for slo in &mut opts.slos {
        slo.bind(&scenario).map_err(|e| CliError::Usage(format!("--slo {e}")))?;
    }
    if let Some(name) = &a.class {
        let classes = &scenario.workload.classes;
        let k = classes.iter().position(|c| &c.name == name).ok_or_else(|| {
            let known: Vec<&str> = classes.iter().map(|c| c.name.as_str()).collect();
            CliError::Usage(format!(
                "--class {name}: {} has no such class (workload.classes: {})",
                scenario.source.display(),
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ))
        })?;
        scenario.workload.rate_class = Some(k);
    }
    let search_error = |e: SearchError| match e {
        SearchError::NoRate(_) => CliError::Usage(e.to_string()),
        SearchError::Run { .. } => CliError::Usage(format!("{}: {e}", scenario.source.display())),
        SearchError::Unreachable { .. } | SearchError::NeverSustained { .. } => CliError::Failure(e.to_string()),
    };
    // The rate figures are one replica's (docs/clusters.md); a
    // cluster is then sized by simulating it at the target rate.
    let one = llmsim_scenario::config::Scenario { cluster: None, ..scenario.clone() };
    let pools = scenario.cluster.as_ref().is_some_and(|c| c.disagg.is_some());
    if let (Some(n), false) = (a.gpus, pools) {
        return Err(CliError::Usage(format!(
            "--gpus {n}: splits a GPU budget between prefill and decode pools, but {} has no \
             cluster.prefill/cluster.decode",
            scenario.source.display()
        )));
    }
    if a.gpus == Some(0) {
        return Err(CliError::Usage("--gpus 0: must be at least 2 (one prefill and one decode replica)".into()));
    }
    let mut found = search(&one, &opts).map_err(search_error)?;
    if let (Some(rate), true) = (opts.target_rate, pools) {
        let (seeds, n) = (found.seeds.clone(), found.requests_per_probe);
        let budget = a.gpus.unwrap_or_else(|| scenario.cluster.as_ref().map_or(2, |c| c.gpus(&scenario)));
        let split = llmsim_analysis::capacity::fleet::split(&scenario, &opts, &seeds, rate, n, budget).map_err(
            |e| match e {
                llmsim_analysis::capacity::fleet::SplitError::Search(e) => search_error(e),
                llmsim_analysis::capacity::fleet::SplitError::Budget(why) => CliError::Usage(why),
                e => CliError::Failure(e.to_string()),
            },
        )?;
        found.split = Some(split);
    } else if let (Some(rate), Some(_)) = (opts.target_rate, &scenario.cluster) {
        let (seeds, n, estimate) = (found.seeds.clone(), found.requests_per_probe, found.replicas.unwrap_or(1));
        let fleet = llmsim_analysis::capacity::fleet::size(&scenario, &opts, &seeds, rate, n, estimate).map_err(
            |e| match e {
                llmsim_analysis::capacity::fleet::FleetError::Search(e) => search_error(e),
                e => CliError::Failure(e.to_string()),
            },
        )?;
        found.fleet = Some(fleet);
    }
    if let Some(path) = &a.json {
        write_output(path, llmsim_core::util::to_json(&found).as_bytes())?;
    }
    let to_stdout = a.json.as_deref() == Some(std::path::Path::new("-"));
    if !a.quiet && !to_stdout {
        print(&render::render(&found))?;
    }
    Ok(())
}
