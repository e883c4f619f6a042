//! The client watching itself.
//!
//! A load generator that cannot keep up sends late and reads late, and its
//! latencies then describe the client, not the server. A ticker on the same
//! runtime as the requests asks to wake every 10 ms and records how late it
//! wakes; process CPU time over the run says whether the client was busy.
//! Above 5 ms of lateness at p99 the report says the client, not the
//! server, may have inflated the numbers. Tokio's timer has a 1 ms
//! granularity, so lateness below about 1 ms is noise.

use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use llmsim_planner::metrics::percentile::percentile_sorted;

pub const TICK: Duration = Duration::from_millis(10);
/// Lateness at p99 above which the client is flagged.
pub const WARN_P99_MS: f64 = 5.0;

/// What the ticker and the CPU clock saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Health {
    pub tick_ms: f64,
    pub ticks: u64,
    pub lateness_p50_ms: Option<f64>,
    pub lateness_p99_ms: Option<f64>,
    pub lateness_max_ms: Option<f64>,
    /// Process CPU time over wall time, in percent of one core (`null`
    /// where /proc is not available).
    pub cpu_percent: Option<f64>,
    pub cpu_cores: usize,
}

impl Health {
    /// The warning to print and store, if the client lagged.
    pub fn warning(&self) -> Option<String> {
        let p99 = self.lateness_p99_ms?;
        (p99 > WARN_P99_MS).then(|| {
            format!(
                "client lag: the bench's {} ms ticker woke up {p99:.1} ms late at p99 (above {WARN_P99_MS} ms; \
                 CPU {}): the client, not the server, may have inflated these latencies",
                self.tick_ms,
                self.cpu_percent.map_or("unknown".into(), |c| format!("{c:.0}% of one core"))
            )
        })
    }
}

/// A running ticker.
pub struct Ticker {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<u64>>,
    started: Instant,
    cpu_start: Option<Duration>,
}

impl Ticker {
    pub fn start() -> Ticker {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut late_ns = Vec::new();
            let mut due = Instant::now() + TICK;
            loop {
                tokio::select! {
                    _ = sleep_until(due) => {}
                    _ = stopped.changed() => break,
                }
                let now = Instant::now();
                late_ns.push(now.duration_since(due).as_nanos() as u64);
                due += TICK;
                if due < now {
                    // Missed ticks are not owed: measure from now on.
                    due = now + TICK;
                }
            }
            late_ns
        });
        Ticker { stop, task, started: Instant::now(), cpu_start: process_cpu() }
    }

    pub async fn stop(self) -> Health {
        let _ = self.stop.send(true);
        let wall = self.started.elapsed();
        let mut late = self.task.await.unwrap_or_default();
        late.sort_unstable();
        let ms: Vec<f64> = late.iter().map(|&n| n as f64 / 1e6).collect();
        let cpu = match (self.cpu_start, process_cpu()) {
            (Some(a), Some(b)) if wall > Duration::ZERO => Some((b - a).as_secs_f64() / wall.as_secs_f64() * 100.0),
            _ => None,
        };
        Health {
            tick_ms: TICK.as_secs_f64() * 1e3,
            ticks: ms.len() as u64,
            lateness_p50_ms: percentile_sorted(&ms, 50.0),
            lateness_p99_ms: percentile_sorted(&ms, 99.0),
            lateness_max_ms: ms.last().copied(),
            cpu_percent: cpu,
            cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// User + system CPU time of this process, from /proc/self/stat (Linux).
/// Clock ticks are USER_HZ, which Linux fixes at 100 per second for
/// user space on every architecture we build for.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&stat)
}

/// utime and stime (fields 14 and 15) from a /proc/PID/stat line. The
/// command name (field 2) may hold spaces, so fields are counted after its
/// closing parenthesis.
pub fn parse_stat(stat: &str) -> Option<Duration> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3, so field N is at index N - 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        let line = "42 (my prog) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 0 0";
        assert_eq!(parse_stat(line), Some(Duration::from_millis(3000)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn lag_above_five_ms_at_p99_is_a_warning() {
        let mut h = Health { tick_ms: 10.0, lateness_p99_ms: Some(4.9), ..Health::default() };
        assert_eq!(h.warning(), None);
        h.lateness_p99_ms = Some(7.25);
        h.cpu_percent = Some(180.0);
        let w = h.warning().unwrap();
        assert!(w.contains("7.2 ms late at p99") && w.contains("180% of one core"), "{w}");
    }
}
