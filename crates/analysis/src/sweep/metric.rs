//! The metrics a sweep reports and an SLO can bound, by one name each.
//!
//! Names are the result contract's (docs/results.md) flattened with the
//! unit last: `ttft_p99_ms` is `ttft_ms.p99`, `step_mean_ms` is
//! `steps.duration_ms.mean`, `output_tokens_per_s` is
//! `throughput.output_tokens_per_s`. The same names head the sweep CSV's
//! columns and are what `--slo` accepts.

use llmsim_planner::metrics::{RunResult, Stats};

/// A latency summarised by the result contract.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    Ttft,
    Itl,
    Tpot,
    E2e,
    Queue,
    /// Step duration: a property of the engine, not of a request.
    Step,
}

/// One summary statistic of a latency.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stat {
    Mean,
    P50,
    P90,
    P99,
    Max,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Metric {
    Completed,
    Rejected,
    Preemptions,
    DurationS,
    RequestsPerS,
    InputTokensPerS,
    OutputTokensPerS,
    Latency(Family, Stat),
    MeanBatchSize,
    KvPeakFrac,
    KvMeanFrac,
}

pub const FAMILIES: [Family; 6] = [Family::Ttft, Family::Itl, Family::Tpot, Family::E2e, Family::Queue, Family::Step];
pub const STATS: [Stat; 5] = [Stat::Mean, Stat::P50, Stat::P90, Stat::P99, Stat::Max];

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Ttft => "ttft",
            Family::Itl => "itl",
            Family::Tpot => "tpot",
            Family::E2e => "e2e",
            Family::Queue => "queue",
            Family::Step => "step",
        }
    }

    fn stats(self, r: &RunResult) -> &Stats {
        match self {
            Family::Ttft => &r.ttft_ms,
            Family::Itl => &r.itl_ms,
            Family::Tpot => &r.tpot_ms,
            Family::E2e => &r.e2e_ms,
            Family::Queue => &r.queue_ms,
            Family::Step => &r.steps.duration_ms,
        }
    }

    /// What a user reads on a plot's axis.
    pub fn title(self) -> &'static str {
        match self {
            Family::Ttft => "time to first token",
            Family::Itl => "inter-token latency",
            Family::Tpot => "time per output token",
            Family::E2e => "end-to-end latency",
            Family::Queue => "queue time",
            Family::Step => "step duration",
        }
    }
}

impl Stat {
    pub fn name(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::Max => "max",
        }
    }

    pub fn of(self, s: &Stats) -> Option<f64> {
        match self {
            Stat::Mean => s.mean,
            Stat::P50 => s.p50,
            Stat::P90 => s.p90,
            Stat::P99 => s.p99,
            Stat::Max => s.max,
        }
    }

    /// The quantile a statistic rests on, for sizing runs: the mean and
    /// the median need the bulk of the samples, p99 the top 1%, the
    /// maximum is read as p99.9.
    pub fn quantile(self) -> f64 {
        match self {
            Stat::Mean | Stat::P50 => 0.5,
            Stat::P90 => 0.9,
            Stat::P99 => 0.99,
            Stat::Max => 0.999,
        }
    }
}

impl Metric {
    /// Every metric, in the sweep CSV's column order.
    pub fn all() -> Vec<Metric> {
        let mut out = vec![
            Metric::Completed,
            Metric::Rejected,
            Metric::Preemptions,
            Metric::DurationS,
            Metric::RequestsPerS,
            Metric::InputTokensPerS,
            Metric::OutputTokensPerS,
        ];
        out.extend(FAMILIES.iter().flat_map(|f| STATS.iter().map(|s| Metric::Latency(*f, *s))));
        out.extend([Metric::MeanBatchSize, Metric::KvPeakFrac, Metric::KvMeanFrac]);
        out
    }

    /// The metrics an SLO may bound: all of them. Per-request latencies
    /// also decide which requests count as good; run-wide figures (step
    /// duration, preemptions, rejections, KV usage, throughput) bound the
    /// run only.
    pub fn slo_metrics() -> Vec<Metric> {
        Metric::all()
    }

    /// A latency every request has its own value of.
    pub fn per_request(self) -> bool {
        matches!(self, Metric::Latency(f, _) if f != Family::Step)
    }

    pub fn name(self) -> String {
        match self {
            Metric::Completed => "completed".into(),
            Metric::Rejected => "rejected".into(),
            Metric::Preemptions => "preemptions".into(),
            Metric::DurationS => "duration_s".into(),
            Metric::RequestsPerS => "requests_per_s".into(),
            Metric::InputTokensPerS => "input_tokens_per_s".into(),
            Metric::OutputTokensPerS => "output_tokens_per_s".into(),
            Metric::Latency(f, s) => format!("{}_{}_ms", f.name(), s.name()),
            Metric::MeanBatchSize => "mean_batch_size".into(),
            Metric::KvPeakFrac => "kv_peak_frac".into(),
            Metric::KvMeanFrac => "kv_mean_frac".into(),
        }
    }

    pub fn parse(name: &str) -> Option<Metric> {
        Metric::all().into_iter().find(|m| m.name() == name)
    }

    pub fn value(self, r: &RunResult) -> Option<f64> {
        let t = &r.throughput;
        Some(match self {
            Metric::Completed => r.requests.completed as f64,
            Metric::Rejected => r.requests.rejected as f64,
            Metric::Preemptions => r.preemptions as f64,
            Metric::DurationS => t.duration_s,
            Metric::RequestsPerS => t.requests_per_s,
            Metric::InputTokensPerS => t.input_tokens_per_s,
            Metric::OutputTokensPerS => t.output_tokens_per_s,
            Metric::Latency(f, s) => return s.of(f.stats(r)),
            Metric::MeanBatchSize => r.steps.mean_batch_size,
            Metric::KvPeakFrac => r.kv.peak_usage,
            Metric::KvMeanFrac => r.kv.mean_usage,
        })
    }

    /// Decimals in the CSV and the terminal table.
    pub fn decimals(self) -> usize {
        match self {
            Metric::Completed | Metric::Rejected | Metric::Preemptions => 0,
            Metric::KvPeakFrac | Metric::KvMeanFrac => 4,
            _ => 3,
        }
    }

    /// `x` with this metric's decimals; whole counts stay whole, a mean
    /// over seeds of a count gets two decimals.
    pub fn format(self, x: f64) -> String {
        let d = self.decimals();
        if d == 0 && x.fract() != 0.0 { format!("{x:.2}") } else { format!("{x:.d$}") }
    }
}

/// The SLO metric names, for help texts and errors.
pub fn slo_names() -> String {
    Metric::slo_metrics().iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
}

/// A name that is not a metric an SLO may bound: the name, the nearest
/// metric name if it looks like a typo, and every allowed name.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error(
    "`{name}` is not a metric{}; SLO metrics are {}",
    .near.as_ref().map(|n| format!(" (did you mean `{n}`?)")).unwrap_or_default(),
    .allowed.join(", ")
)]
pub struct UnknownMetric {
    pub name: String,
    pub near: Option<String>,
    pub allowed: Vec<String>,
}

/// Parses a metric an SLO may bound; the error lists them all.
pub fn parse_slo_metric(name: &str) -> Result<Metric, UnknownMetric> {
    Metric::parse(name).filter(|m| Metric::slo_metrics().contains(m)).ok_or_else(|| {
        let allowed: Vec<String> = Metric::slo_metrics().iter().map(|m| m.name()).collect();
        let near = llmsim_core::util::nearest(name, allowed.iter().map(String::as_str)).map(str::to_string);
        UnknownMetric { name: name.to_string(), near, allowed }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let all = Metric::all();
        assert_eq!(all.len(), 7 + 30 + 3);
        for m in &all {
            assert_eq!(Metric::parse(&m.name()), Some(*m));
        }
        let mut names: Vec<String> = all.iter().map(|m| m.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }

    #[test]
    fn every_metric_can_be_an_slo_and_the_latencies_are_per_request() {
        assert_eq!(Metric::slo_metrics().len(), 40);
        assert_eq!(Metric::all().iter().filter(|m| m.per_request()).count(), 25);
        assert_eq!(parse_slo_metric("ttft_p99_ms"), Ok(Metric::Latency(Family::Ttft, Stat::P99)));
        assert_eq!(parse_slo_metric("queue_mean_ms"), Ok(Metric::Latency(Family::Queue, Stat::Mean)));
        let e = parse_slo_metric("ttft_99_ms").unwrap_err().to_string();
        assert!(e.contains("did you mean `ttft_p99_ms`") && e.contains("e2e_max_ms"), "{e}");
        assert_eq!(parse_slo_metric("step_p99_ms"), Ok(Metric::Latency(Family::Step, Stat::P99)));
        assert_eq!(parse_slo_metric("preemptions"), Ok(Metric::Preemptions));
    }

    #[test]
    fn counts_print_whole_unless_averaged() {
        assert_eq!(Metric::Completed.format(2000.0), "2000");
        assert_eq!(Metric::Completed.format(1999.5), "1999.50");
        assert_eq!(Metric::Latency(Family::Ttft, Stat::P50).format(1.23456), "1.235");
    }
}
