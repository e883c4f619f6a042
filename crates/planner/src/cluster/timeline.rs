//! Results over time (docs/clusters.md, "Results over time"): what an
//! autoscaled (or `cluster.timeline`) fleet did in each window of
//! `window_s`, and the recent first tokens the `ttft_p99_ms` signal reads.
//!
//! A request's figures go to the window of the instant they happened at:
//! an arrival (at the client, before `latency.request_overhead_ms`) to
//! its arrival's window, a TTFT to its first token's, an inter-token gap
//! to its later token's, a finish to its finish's. The fleet's state
//! (replicas ready, starting and draining, the queue, KV use) is read
//! at each window's end, as the topology sees it then (every step that
//! starts before the instant has run). GPU-hours count every replica from
//! the instant it was asked for (its cold start included) to the instant
//! it left.

use std::collections::VecDeque;

use super::in_flight::InFlight;

pub use crate::metrics::over_time::WindowRow;
use crate::metrics::{Histogram, Stats, histogram};
use llmsim_core::engine::RequestId;
use llmsim_core::time::SimTime;
use llmsim_scenario::config::autoscale::WindowSlo;

/// Most windows one run keeps (`cluster.timeline.window_s` over the run).
pub const MAX_WINDOWS: u64 = 1_000_000;

/// The fleet's state at a window's end, as the topology reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetState {
    pub ready: u32,
    pub starting: u32,
    pub draining: u32,
    pub queue: u64,
    pub kv_use: f64,
    pub gpu_hours: f64,
    /// The cost of those GPU-hours (`None` without a price).
    pub cost: Option<f64>,
    /// With `cluster.pools`: each pool's (ready, starting, draining).
    pub pools: Vec<(u32, u32, u32)>,
}

/// What a window gathers from events.
#[derive(Clone, Debug, Default)]
struct Acc {
    offered: u64,
    finished: u64,
    rejected: u64,
    ttft: Vec<u64>,
    itl: Histogram,
    /// Gaps in one bucket in a row (a step's tokens), not yet in `itl`.
    itl_run: histogram::Run,
}

/// The per-window gatherer, fed by the replicas' events.
#[derive(Clone, Debug)]
pub struct Watch {
    window_ns: u64,
    delay_ns: u64,
    /// Each request in flight: its client arrival and its last token
    /// (`u64::MAX`: none yet).
    flights: InFlight<(u64, u64)>,
    /// The windows not closed yet, from window `closed` on.
    open: VecDeque<Acc>,
    /// The window of the last event: its start and end (ns) and number,
    /// so most events skip the division.
    cur: (u64, u64, u64),
    /// Windows closed so far.
    closed: u64,
    pub rows: Vec<WindowRow>,
    slo: WindowSlo,
    /// Recent first tokens (instant, TTFT), for the `ttft_p99_ms` signal;
    /// `None` when the signal is not that.
    recent: Option<VecDeque<(u64, u64)>>,
}

impl Watch {
    pub fn new(window_s: f64, delay_ns: u64, slo: WindowSlo, keep_ttft: bool) -> Watch {
        Watch {
            window_ns: SimTime::from_secs_f64(window_s).as_nanos().max(1),
            delay_ns,
            flights: InFlight::default(),
            open: VecDeque::new(),
            cur: (0, 0, 0),
            closed: 0,
            rows: Vec::new(),
            slo,
            recent: keep_ttft.then(VecDeque::new),
        }
    }

    fn acc(&mut self, at_ns: u64) -> &mut Acc {
        if !(self.cur.0..self.cur.1).contains(&at_ns) {
            let w = at_ns / self.window_ns;
            let start = w.saturating_mul(self.window_ns);
            self.cur = (start, start.saturating_add(self.window_ns), w);
        }
        let k = usize::try_from(self.cur.2.saturating_sub(self.closed)).unwrap_or(usize::MAX);
        if k >= self.open.len() {
            // (Bounded: an event is at most a step past the run's clock,
            // and windows close as the clock passes them.)
            self.open.resize_with(k + 1, Acc::default);
        }
        &mut self.open[k]
    }

    /// The end of the next window to close.
    pub fn next_close(&self) -> SimTime {
        SimTime::from_nanos(self.closed.saturating_add(1).saturating_mul(self.window_ns))
    }

    /// Where the windows closed so far end.
    pub fn closed_until(&self) -> SimTime {
        SimTime::from_nanos(self.closed.saturating_mul(self.window_ns))
    }

    /// A request arrived at the client at `at` (counted in its window).
    pub fn offered(&mut self, at: SimTime) {
        self.acc(at.as_nanos()).offered += 1;
    }

    /// A replica took request `id`, which reached it at `at` (after the delay).
    pub fn arrived(&mut self, id: RequestId, at: SimTime) {
        self.flights.insert(id, (at.as_nanos().saturating_sub(self.delay_ns), u64::MAX));
    }

    pub fn token(&mut self, id: RequestId, at: SimTime, index: u32) {
        let t = at.as_nanos();
        let Some(f) = self.flights.get_mut(id) else { return };
        let (arrival, last) = *f;
        f.1 = t;
        if index == 0 || last == u64::MAX {
            let ttft = t.saturating_sub(arrival);
            self.acc(t).ttft.push(ttft);
            if let Some(r) = &mut self.recent {
                r.push_back((t, ttft));
            }
        } else {
            let acc = self.acc(t);
            acc.itl_run.add(&mut acc.itl, t.saturating_sub(last), 1);
        }
    }

    pub fn finished(&mut self, id: RequestId, at: SimTime) {
        self.flights.end(id);
        self.acc(at.as_nanos()).finished += 1;
    }

    pub fn rejected(&mut self, id: RequestId, at: SimTime) {
        self.flights.end(id);
        self.acc(at.as_nanos()).rejected += 1;
    }

    /// The p99 TTFT in ms of the first tokens in `(now - window, now]`
    /// (`None` without one); older ones are dropped.
    pub fn recent_ttft_p99_ms(&mut self, now: SimTime, window_s: f64) -> Option<f64> {
        let r = self.recent.as_mut()?;
        let cut = now.as_nanos().saturating_sub(SimTime::from_secs_f64(window_s).as_nanos());
        while r.front().is_some_and(|e| e.0 <= cut) {
            r.pop_front();
        }
        let within: Vec<u64> = r.iter().filter(|e| e.0 <= now.as_nanos()).map(|e| e.1).collect();
        Stats::from_nanos(within).p99
    }

    /// Closes the next window at its end (`end`, or the run's end for the
    /// last one), with the fleet's state there. Errs past [`MAX_WINDOWS`].
    pub fn close(&mut self, end: SimTime, fleet: FleetState) -> Result<(), String> {
        if self.closed >= MAX_WINDOWS {
            return Err(format!(
                "the timeline would have more than {MAX_WINDOWS} windows: set a longer cluster.timeline.window_s"
            ));
        }
        let w = self.closed;
        let mut acc = self.open.pop_front().unwrap_or_default();
        acc.itl_run.flush(&mut acc.itl);
        let start = w * self.window_ns;
        let width = end.as_nanos().saturating_sub(start).max(1) as f64 / 1e9;
        let ttft = Stats::from_nanos(acc.ttft);
        let itl = Stats::from_histogram(&acc.itl);
        let mut row = WindowRow {
            start_s: start as f64 / 1e9,
            end_s: end.as_secs_f64(),
            offered_rps: acc.offered as f64 / width,
            served_rps: acc.finished as f64 / width,
            rejected: acc.rejected,
            ready: fleet.ready,
            starting: fleet.starting,
            draining: fleet.draining,
            queue: fleet.queue,
            kv_use: fleet.kv_use,
            first_tokens: ttft.count,
            ttft_p50_ms: ttft.p50,
            ttft_p99_ms: ttft.p99,
            itl_p50_ms: itl.p50,
            itl_p99_ms: itl.p99,
            slo_met: None,
            gpu_hours: fleet.gpu_hours,
            cost: fleet.cost,
            pools: fleet.pools.clone(),
        };
        row.slo_met = self.slo_met(&row);
        self.rows.push(row);
        self.closed += 1;
        Ok(())
    }

    /// Whether `row` meets every bound (`None` without bounds).
    fn slo_met(&self, row: &WindowRow) -> Option<bool> {
        let bounds = self.slo.bounds();
        if bounds.is_empty() {
            return None;
        }
        Some(bounds.iter().all(|&(name, bound)| {
            let v = match name {
                "ttft_p50_ms" => row.ttft_p50_ms,
                "ttft_p99_ms" => row.ttft_p99_ms,
                "itl_p50_ms" => row.itl_p50_ms,
                _ => row.itl_p99_ms,
            };
            v.is_none_or(|v| v <= bound)
        }))
    }
}
