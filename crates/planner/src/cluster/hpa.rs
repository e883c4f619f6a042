//! Kubernetes' Horizontal Pod Autoscaler rule, as `cluster.autoscale`
//! configures it (docs/clusters.md, "Autoscaling"): pure, on plain
//! numbers, with `now` an argument, so hand-worked sequences test it.
//!
//! Read in `pkg/controller/podautoscaler` (`replica_calculator.go`,
//! `horizontal.go`), found through the code search; no code taken. One
//! decision, every `period_s`:
//!
//! 1. **The metric's recommendation** (the replica calculator). For a
//!    signal averaged over replicas (an HPA `Pods` metric), `ratio =
//!    (sum over ready replicas / ready) / target`. With no replica
//!    starting: within the tolerance (`|1 - ratio| <= tolerance`) the
//!    count stays, else it is `ceil(sum / target)`. With replicas starting
//!    (they report no metric yet: "missing pods"), each is counted at the
//!    target when the ratio is below 1 and at 0 above it, the ratio is
//!    taken again over ready plus starting, and the count stays if that
//!    ratio is within the tolerance or crosses 1, else it is
//!    `ceil(ratio' * (ready + starting))`, unless that moves against the
//!    ratio. For the fleet's TTFT (an `Object` metric): `ratio = value /
//!    target`, the count stays within the tolerance, else
//!    `ceil(ratio * ready)`. (Each `ceil(ratio * n)` is computed as
//!    `ceil(sum / target)`, the same number without a rounding that could
//!    push an exact 10 to 10.000000000000002.) No ready replica, or no sample: the count stays.
//! 2. **Stabilization**: the recommendations of the last
//!    `scale_up.stabilization_s` (strictly newer than `now - window`) and
//!    this one bound a scale-up to their lowest, those of the last
//!    `scale_down.stabilization_s` bound a scale-down to their highest;
//!    then this recommendation is recorded.
//! 3. **Rate limits**: a scale-up to at most the largest of
//!    `start + pods` and `ceil(start * (1 + percent/100))`, a scale-down
//!    to at least the smallest of `start - pods` and
//!    `floor(start * (1 - percent/100))`, where `start` is the count a
//!    direction's `period_s` ago (the count now, less the replicas added,
//!    plus those removed, by changes strictly newer than `now - period`);
//!    and within `min_replicas..=max_replicas`.
//!
//! "Current" is the replicas the autoscaler asked for and has not removed:
//! ready plus starting, draining ones not counted.

use llmsim_core::time::SimTime;
use llmsim_scenario::config::autoscale::{Autoscale, ScaleRules};

/// What the autoscaler reads at a decision.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Reading {
    /// A signal averaged over ready replicas: its sum over them.
    PerReplica { sum: f64, ready: u32, starting: u32 },
    /// One value for the fleet (`None`: no sample in the window).
    Fleet { value: Option<f64>, ready: u32 },
}

/// The autoscaler's state: past recommendations and changes.
#[derive(Clone, Debug)]
pub struct Hpa {
    cfg: Autoscale,
    /// (when, recommended count), oldest first.
    recommendations: Vec<(u64, u32)>,
    /// (when, replicas added), oldest first.
    ups: Vec<(u64, u32)>,
    /// (when, replicas removed), oldest first.
    downs: Vec<(u64, u32)>,
}

impl Hpa {
    pub fn new(cfg: &Autoscale) -> Hpa {
        Hpa { cfg: cfg.clone(), recommendations: Vec::new(), ups: Vec::new(), downs: Vec::new() }
    }

    pub fn config(&self) -> &Autoscale {
        &self.cfg
    }

    /// Step 1: the count the metric asks for, with `current` replicas.
    pub fn recommend(&self, current: u32, reading: Reading) -> u32 {
        let (target, tol) = (self.cfg.target, self.cfg.tolerance);
        match reading {
            Reading::Fleet { value, ready } => {
                let Some(value) = value else { return current };
                if ready == 0 {
                    return current;
                }
                if (1.0 - value / target).abs() <= tol {
                    return current;
                }
                ceil_count(value * f64::from(ready) / target)
            }
            Reading::PerReplica { sum, ready, starting } => {
                if ready == 0 {
                    return current;
                }
                let ratio = sum / f64::from(ready) / target;
                if starting == 0 {
                    if (1.0 - ratio).abs() <= tol {
                        return current;
                    }
                    return ceil_count(sum / target);
                }
                let missing = if ratio < 1.0 { f64::from(starting) * target } else { 0.0 };
                let all = f64::from(ready + starting);
                let again = (sum + missing) / all / target;
                let crossed = (ratio < 1.0 && again > 1.0) || (ratio > 1.0 && again < 1.0);
                if (1.0 - again).abs() <= tol || crossed {
                    return current;
                }
                let n = ceil_count((sum + missing) / target);
                if (again < 1.0 && n > current) || (again > 1.0 && n < current) {
                    return current;
                }
                n
            }
        }
    }

    /// Steps 1 to 3 at `now`: the count the fleet should have, from
    /// `current`. Records the recommendation and the change, if any.
    pub fn decide(&mut self, now: SimTime, current: u32, reading: Reading) -> u32 {
        let now = now.as_nanos();
        let desired = self.recommend(current, reading);
        let stabilized = self.stabilize(now, current, desired);
        let next = self.limit(now, current, stabilized);
        match next.cmp(&current) {
            std::cmp::Ordering::Greater => self.ups.push((now, next - current)),
            std::cmp::Ordering::Less => self.downs.push((now, current - next)),
            std::cmp::Ordering::Equal => {}
        }
        self.forget(now);
        next
    }

    /// Step 2.
    fn stabilize(&mut self, now: u64, current: u32, desired: u32) -> u32 {
        let up_cut = now.saturating_sub(nanos(self.cfg.scale_up.stabilization_s));
        let down_cut = now.saturating_sub(nanos(self.cfg.scale_down.stabilization_s));
        let (mut up, mut down) = (desired, desired);
        for &(t, r) in &self.recommendations {
            if t > up_cut {
                up = up.min(r);
            }
            if t > down_cut {
                down = down.max(r);
            }
        }
        self.recommendations.push((now, desired));
        current.max(up).min(down)
    }

    /// Step 3.
    fn limit(&self, now: u64, current: u32, desired: u32) -> u32 {
        let (min, max) = (self.cfg.min_replicas, self.cfg.max_replicas);
        if desired > current {
            let limit = self.up_limit(now, current).max(current);
            desired.min(max.min(limit))
        } else if desired < current {
            let limit = self.down_limit(now, current).min(current);
            desired.max(min.max(limit))
        } else {
            desired
        }
    }

    /// The count a direction's period ago.
    fn period_start(&self, now: u64, current: u32, rules: &ScaleRules) -> i64 {
        let cut = now.saturating_sub(nanos(rules.period_s));
        let sum = |events: &[(u64, u32)]| events.iter().filter(|e| e.0 > cut).map(|e| i64::from(e.1)).sum::<i64>();
        i64::from(current) - sum(&self.ups) + sum(&self.downs)
    }

    fn up_limit(&self, now: u64, current: u32) -> u32 {
        let r = &self.cfg.scale_up;
        let start = self.period_start(now, current, r);
        let by_pods = r.pods.map(|p| start + i64::from(p));
        let by_percent = r.percent.map(|p| (start as f64 * (1.0 + p / 100.0)).ceil() as i64);
        let best = by_pods.into_iter().chain(by_percent).max().unwrap_or(i64::from(current));
        clamp_u32(best)
    }

    fn down_limit(&self, now: u64, current: u32) -> u32 {
        let r = &self.cfg.scale_down;
        let start = self.period_start(now, current, r);
        let by_pods = r.pods.map(|p| start - i64::from(p));
        let by_percent = r.percent.map(|p| (start as f64 * (1.0 - p / 100.0)).trunc() as i64);
        let best = by_pods.into_iter().chain(by_percent).min().unwrap_or(i64::from(current));
        clamp_u32(best)
    }

    /// Drops what no later decision can read.
    fn forget(&mut self, now: u64) {
        let c = &self.cfg;
        let keep_rec = nanos(c.scale_up.stabilization_s.max(c.scale_down.stabilization_s));
        let keep_evt = nanos(c.scale_up.period_s.max(c.scale_down.period_s));
        let cut_rec = now.saturating_sub(keep_rec);
        let cut_evt = now.saturating_sub(keep_evt);
        self.recommendations.retain(|e| e.0 > cut_rec || e.0 == now);
        self.ups.retain(|e| e.0 > cut_evt || e.0 == now);
        self.downs.retain(|e| e.0 > cut_evt || e.0 == now);
    }
}

/// `ceil(x)` as a replica count (0 or more).
fn ceil_count(x: f64) -> u32 {
    clamp_u32(x.ceil() as i64)
}

fn clamp_u32(x: i64) -> u32 {
    x.clamp(0, i64::from(u32::MAX)) as u32
}

fn nanos(s: f64) -> u64 {
    SimTime::from_secs_f64(s).as_nanos()
}

#[cfg(test)]
mod tests;
