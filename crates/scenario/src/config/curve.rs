//! `workload.arrivals.curve`: an open loop whose rate changes over time
//! (docs/clusters.md, "A rate that changes over time"). The rate is a
//! piecewise-linear function of time (points, steps, or a daily wave
//! sampled every minute) times the factors of the bursts that cover an
//! instant; arrivals are a Poisson process with that rate (or a gamma
//! renewal process, with `burstiness`), drawn by time rescaling: unit-mean
//! gaps summed to `S`, each arrival at the time the expected count
//! `Lambda(t)` (the rate's integral from 0) reaches `S`.

use serde::Serialize;

use super::ConfigError;
use super::check::Check;
use super::raw::{RawBurst, RawCurve, RawDaily};

/// Seconds in a day.
pub const DAY_S: f64 = 86_400.0;
/// A daily wave is sampled as straight lines between minutes: the rate
/// between samples is off by at most `(peak - trough) / 2 x (2 pi 60 /
/// 86,400)^2 / 8`, under 1e-6 of the swing.
pub const DAILY_SAMPLE_S: f64 = 60.0;
/// The longest run a daily wave may cover (its samples are kept).
pub const DAILY_MAX_DAYS: f64 = 366.0;
/// The most points or steps a curve may list.
pub const MAX_POINTS: usize = 100_000;
/// The most bursts.
pub const MAX_BURSTS: usize = 10_000;
/// The largest rate anywhere on a curve, bursts included (one a
/// nanosecond, as `workload.arrivals.poisson.rate`).
pub const MAX_RATE: f64 = 1e9;
/// The largest burst factor.
pub const MAX_FACTOR: f64 = 1e6;

/// The rate's shape, before bursts.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// `[time_s, rate]`, straight lines between them; the last rate holds.
    Points(Vec<[f64; 2]>),
    /// `[time_s, rate]`, each rate holding until the next time.
    Steps(Vec<[f64; 2]>),
    /// A cosine over the day.
    Daily(Daily),
}

/// A day's wave: `peak` at `peak_hour`, `trough` twelve hours away; the
/// run starts at `start_hour` of the day.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Daily {
    pub peak: f64,
    pub trough: f64,
    pub peak_hour: f64,
    pub start_hour: f64,
}

/// The rate times `factor` from `start_s` for `duration_s`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Burst {
    pub start_s: f64,
    pub duration_s: f64,
    pub factor: f64,
}

/// `workload.arrivals.curve`, checked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Curve {
    #[serde(flatten)]
    pub shape: Shape,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bursts: Vec<Burst>,
    /// Gamma gaps of this shape (as `vllm bench serve --burstiness`), in
    /// the rescaled time; `None`: Poisson.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
}

impl Daily {
    /// The wave's rate `t` seconds into the run.
    pub fn rate_at(&self, t: f64) -> f64 {
        let hours = self.start_hour + t / 3600.0 - self.peak_hour;
        let phase = 2.0 * std::f64::consts::PI * hours / 24.0;
        let (mid, half) = ((self.peak + self.trough) / 2.0, (self.peak - self.trough) / 2.0);
        (mid + half * phase.cos()).max(0.0)
    }
}

/// The rate as straight segments: on `[t[i], t[i + 1])` it goes from
/// `from[i]` to `to[i]`; after the last time it stays at `tail`.
/// `cum[i]` is the expected count up to `t[i]`.
#[derive(Clone, Debug, PartialEq)]
pub struct RateCurve {
    t: Vec<f64>,
    from: Vec<f64>,
    to: Vec<f64>,
    cum: Vec<f64>,
    tail: f64,
}

impl RateCurve {
    /// The segments of `curve`; a daily wave is sampled up to `horizon_s`
    /// (the run's duration).
    pub fn new(curve: &Curve, horizon_s: f64) -> RateCurve {
        // The base's knots: (time, rate just after it).
        let mut knots: Vec<f64> = Vec::new();
        match &curve.shape {
            Shape::Points(p) | Shape::Steps(p) => knots.extend(p.iter().map(|q| q[0])),
            Shape::Daily(_) => {
                let n = (horizon_s / DAILY_SAMPLE_S).ceil().max(1.0) as usize;
                knots.extend((0..=n).map(|i| i as f64 * DAILY_SAMPLE_S));
            }
        }
        for b in &curve.bursts {
            knots.push(b.start_s);
            knots.push(b.start_s + b.duration_s);
        }
        knots.sort_by(f64::total_cmp);
        knots.dedup();
        let base_left = |t: f64| base_rate(&curve.shape, t, true);
        let base_right = |t: f64| base_rate(&curve.shape, t, false);
        let factor = |t: f64, right: bool| -> f64 {
            curve
                .bursts
                .iter()
                .filter(|b| match right {
                    true => b.start_s <= t && t < b.start_s + b.duration_s,
                    false => b.start_s < t && t <= b.start_s + b.duration_s,
                })
                .map(|b| b.factor)
                .product()
        };
        let mut c = RateCurve { t: Vec::new(), from: Vec::new(), to: Vec::new(), cum: Vec::new(), tail: 0.0 };
        let mut total = 0.0;
        for w in knots.windows(2) {
            let (t0, t1) = (w[0], w[1]);
            let from = base_right(t0) * factor(t0, true);
            let to = base_left(t1) * factor(t1, false);
            c.t.push(t0);
            c.from.push(from);
            c.to.push(to);
            c.cum.push(total);
            total += (from + to) / 2.0 * (t1 - t0);
        }
        let last = *knots.last().unwrap_or(&0.0);
        c.t.push(last);
        c.cum.push(total);
        c.tail = base_right(last) * factor(last, true);
        c
    }

    /// The rate at `t` (just after it, where it jumps).
    pub fn rate_at(&self, t: f64) -> f64 {
        let n = self.from.len();
        let i = self.t.partition_point(|&x| x <= t);
        if i == 0 {
            return self.from.first().copied().unwrap_or(self.tail);
        }
        if i > n {
            return self.tail;
        }
        let k = i - 1;
        let span = self.t[k + 1] - self.t[k];
        self.from[k] + (self.to[k] - self.from[k]) * (t - self.t[k]) / span
    }

    /// The expected count of arrivals up to `t`.
    pub fn cumulative(&self, t: f64) -> f64 {
        let n = self.from.len();
        let i = self.t.partition_point(|&x| x <= t);
        if i == 0 {
            return 0.0;
        }
        if i > n {
            return self.cum[n] + self.tail * (t - self.t[n]);
        }
        let k = i - 1;
        let x = t - self.t[k];
        let slope = (self.to[k] - self.from[k]) / (self.t[k + 1] - self.t[k]);
        self.cum[k] + self.from[k] * x + slope * x * x / 2.0
    }

    /// The time at which the expected count reaches `s`, searching from
    /// segment `*from` on (arrivals ask in increasing order, so the cursor
    /// only moves forward); `None` when it never does (the rate ends at 0).
    pub fn time_at(&self, s: f64, from: &mut usize) -> Option<f64> {
        let n = self.from.len();
        while *from < n && self.cum[*from + 1] < s {
            *from += 1;
        }
        if *from >= n {
            if self.tail <= 0.0 {
                return None;
            }
            return Some(self.t[n] + (s - self.cum[n]) / self.tail);
        }
        let k = *from;
        let d = (s - self.cum[k]).max(0.0);
        let (a, span) = (self.from[k], self.t[k + 1] - self.t[k]);
        let b = (self.to[k] - a) / span;
        // a x + b x^2 / 2 = d, in the form that keeps its digits when b
        // is small or negative.
        let root = (a * a + 2.0 * b * d).max(0.0).sqrt();
        let x = if a + root > 0.0 { 2.0 * d / (a + root) } else { 0.0 };
        Some(self.t[k] + x.min(span))
    }

    /// The highest rate anywhere.
    pub fn peak(&self) -> f64 {
        self.from.iter().chain(&self.to).copied().fold(self.tail, f64::max)
    }
}

/// The base rate at `t`: just before it (`left`) or just after it.
fn base_rate(shape: &Shape, t: f64, left: bool) -> f64 {
    match shape {
        Shape::Daily(d) => d.rate_at(t),
        Shape::Points(p) => {
            let i = p.partition_point(|q| q[0] <= t);
            match i {
                0 => p[0][1],
                _ if i == p.len() => p[i - 1][1],
                _ => {
                    let ([t0, r0], [t1, r1]) = (p[i - 1], p[i]);
                    r0 + (r1 - r0) * (t - t0) / (t1 - t0)
                }
            }
        }
        Shape::Steps(p) => {
            // Just before a step's time the rate is the previous step's.
            let i = if left { p.partition_point(|q| q[0] < t) } else { p.partition_point(|q| q[0] <= t) };
            p[i.saturating_sub(1)][1]
        }
    }
}

/// Checks `workload.arrivals.curve` of a run lasting `duration_s` (if
/// set).
pub(crate) fn build(ck: &Check, raw: RawCurve, duration_s: Option<f64>) -> Result<Curve, ConfigError> {
    let p = "workload.arrivals.curve";
    let given = [raw.points.is_some(), raw.steps.is_some(), raw.daily.is_some()];
    if given.iter().filter(|&&g| g).count() != 1 {
        return Err(ck.err(
            p,
            "give exactly one of points: [[time_s, rate], ...] (straight lines), steps: [[time_s, rate], ...] \
             or daily: {peak, trough, peak_hour}",
        ));
    }
    let shape = match (raw.points, raw.steps, raw.daily) {
        (Some(v), _, _) => Shape::Points(points(ck, &format!("{p}.points"), v)?),
        (_, Some(v), _) => Shape::Steps(points(ck, &format!("{p}.steps"), v)?),
        (_, _, Some(d)) => Shape::Daily(daily(ck, d, duration_s)?),
        _ => unreachable!("one of the three was checked above"),
    };
    let bursts = raw.bursts.unwrap_or_default();
    if bursts.len() > MAX_BURSTS {
        return Err(ck.err(&format!("{p}.bursts"), format!("{} bursts; at most {MAX_BURSTS}", bursts.len())));
    }
    let bursts = bursts.into_iter().enumerate().map(|(i, b)| burst(ck, i, b)).collect::<Result<Vec<_>, _>>()?;
    let burstiness = raw.burstiness.map(|v| ck.real_at(&format!("{p}.burstiness"), v)).transpose()?;
    let curve = Curve { shape, bursts, burstiness };
    let rc = RateCurve::new(&curve, duration_s.unwrap_or(0.0));
    if rc.peak() > MAX_RATE {
        return Err(ck.err(
            p,
            format!("reaches {} requests a second with its bursts; at most {MAX_RATE:e} (one a nanosecond)", rc.peak()),
        ));
    }
    if rc.peak() <= 0.0 {
        return Err(ck.err(p, "is 0 everywhere: no request would ever arrive; give a rate above 0 somewhere"));
    }
    Ok(curve)
}

fn points(ck: &Check, key: &str, raw: Vec<super::raw::RawPoint>) -> Result<Vec<[f64; 2]>, ConfigError> {
    if raw.is_empty() || raw.len() > MAX_POINTS {
        return Err(ck.err(key, format!("{} points; give 1 to {MAX_POINTS} [time_s, rate] pairs", raw.len())));
    }
    let mut out: Vec<[f64; 2]> = Vec::with_capacity(raw.len());
    for (i, q) in raw.into_iter().enumerate() {
        let at = format!("{key}[{i}]");
        let [t, r] = q.0[..] else {
            return Err(ck.err(&at, format!("a list of {}; each point is [time_s, rate]", q.0.len())));
        };
        if !t.is_finite() || !r.is_finite() {
            return Err(ck.err(&at, "times and rates are finite numbers"));
        }
        if !(0.0..=MAX_RATE).contains(&r) {
            return Err(ck.err(&at, format!("rate {r} is not allowed: 0 to {MAX_RATE:e} requests a second")));
        }
        match out.last() {
            None if t != 0.0 => {
                return Err(ck.err(&at, format!("starts at {t} s: the curve starts at time 0 (give [0, rate] first)")));
            }
            Some(&[prev, _]) if t <= prev => {
                return Err(ck.err(
                    &at,
                    format!("time {t} s is not after the point before it ({prev} s): list the points in time order"),
                ));
            }
            _ => {}
        }
        out.push([t, r]);
    }
    Ok(out)
}

fn daily(ck: &Check, raw: RawDaily, duration_s: Option<f64>) -> Result<Daily, ConfigError> {
    let p = "workload.arrivals.curve.daily";
    let real = |k: &str, v: Option<f64>| -> Result<f64, ConfigError> {
        let key = format!("{p}.{k}");
        match v {
            Some(v) => ck.real_at(&key, v),
            None => Err(ck.err(&key, "missing")),
        }
    };
    let d = Daily {
        peak: real("peak", raw.peak)?,
        trough: real("trough", raw.trough)?,
        peak_hour: real("peak_hour", raw.peak_hour)?,
        start_hour: ck.real_at(&format!("{p}.start_hour"), raw.start_hour.unwrap_or(0.0))?,
    };
    if d.trough > d.peak {
        return Err(ck.err(
            &format!("{p}.trough"),
            format!("{} is above the peak ({}): the trough is the lowest rate", d.trough, d.peak),
        ));
    }
    match duration_s {
        None => Err(ck.err(
            "workload.duration_s",
            "missing: a daily curve needs the run's length in seconds (e.g. 86400 for a day)",
        )),
        Some(s) if s > DAILY_MAX_DAYS * DAY_S => Err(ck.err(
            "workload.duration_s",
            format!("{s} s is longer than a daily curve may run ({DAILY_MAX_DAYS} days, {} s)", DAILY_MAX_DAYS * DAY_S),
        )),
        Some(_) => Ok(d),
    }
}

fn burst(ck: &Check, i: usize, raw: RawBurst) -> Result<Burst, ConfigError> {
    let p = format!("workload.arrivals.curve.bursts[{i}]");
    let real = |k: &str, v: Option<f64>, lo: f64, hi: f64, what: &str| -> Result<f64, ConfigError> {
        let key = format!("{p}.{k}");
        match v {
            None => Err(ck.err(&key, "missing")),
            Some(v) if (lo..=hi).contains(&v) => Ok(v),
            Some(v) => Err(ck.err(&key, format!("{v} is not allowed: {what}"))),
        }
    };
    Ok(Burst {
        start_s: real("start_s", raw.start_s, 0.0, 1e9, "0 to 1e9 seconds")?,
        duration_s: real("duration_s", raw.duration_s, f64::MIN_POSITIVE, 1e9, "above 0, at most 1e9 seconds")?,
        factor: real("factor", raw.factor, 0.0, MAX_FACTOR, "0 (an outage) to 1e6")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(shape: Shape, bursts: Vec<Burst>) -> RateCurve {
        RateCurve::new(&Curve { shape, bursts, burstiness: None }, 0.0)
    }

    #[test]
    fn a_ramp_from_zero_counts_t_squared_over_two() {
        // rate t on [0, 10], then 10: Lambda(t) = t^2 / 2 up to 50.
        let c = curve(Shape::Points(vec![[0.0, 0.0], [10.0, 10.0]]), vec![]);
        let mut k = 0;
        assert_eq!(c.time_at(8.0, &mut k), Some(4.0));
        assert_eq!(c.cumulative(4.0), 8.0);
        assert_eq!(c.rate_at(4.0), 4.0);
        // Past the last point the rate holds: 50 + 10 (t - 10).
        assert_eq!(c.time_at(70.0, &mut k), Some(12.0));
        assert_eq!(c.cumulative(12.0), 70.0);
    }

    #[test]
    fn steps_hold_each_rate_until_the_next() {
        // 2 a second for 5 s (10 expected), then 10 a second.
        let c = curve(Shape::Steps(vec![[0.0, 2.0], [5.0, 10.0]]), vec![]);
        let mut k = 0;
        assert_eq!(c.time_at(4.0, &mut k), Some(2.0));
        assert_eq!(c.time_at(20.0, &mut k), Some(6.0));
        assert_eq!((c.rate_at(4.999), c.rate_at(5.0)), (2.0, 10.0));
    }

    #[test]
    fn a_burst_multiplies_its_window() {
        // 1 a second, tripled on [2, 4): Lambda(2) = 2, Lambda(4) = 8.
        let b = Burst { start_s: 2.0, duration_s: 2.0, factor: 3.0 };
        let c = curve(Shape::Points(vec![[0.0, 1.0]]), vec![b]);
        let mut k = 0;
        assert_eq!(c.time_at(5.0, &mut k), Some(3.0));
        assert_eq!(c.cumulative(4.0), 8.0);
        assert_eq!(c.time_at(9.0, &mut k), Some(5.0));
        // An outage (factor 0) holds arrivals back until it ends: with
        // 1 a second off on [1, 3), the count reaches 1.5 at 3.5 s.
        let off = Burst { start_s: 1.0, duration_s: 2.0, factor: 0.0 };
        let c = curve(Shape::Points(vec![[0.0, 1.0]]), vec![off]);
        let mut k = 0;
        assert_eq!(c.time_at(0.5, &mut k), Some(0.5));
        assert_eq!(c.time_at(1.5, &mut k), Some(3.5));
        // A curve that ends at 0 has no arrival past its count.
        let c = curve(Shape::Steps(vec![[0.0, 1.0], [1.0, 0.0]]), vec![]);
        let mut k = 0;
        assert_eq!(c.time_at(1.5, &mut k), None);
    }

    #[test]
    fn a_daily_wave_averages_its_midpoint_over_a_day() {
        // Peak 10 at noon, trough 2 at midnight: a day's mean is 6.
        let d = Daily { peak: 10.0, trough: 2.0, peak_hour: 12.0, start_hour: 0.0 };
        let c = RateCurve::new(&Curve { shape: Shape::Daily(d), bursts: vec![], burstiness: None }, DAY_S);
        assert!((c.rate_at(0.0) - 2.0).abs() < 1e-12 && (c.rate_at(43_200.0) - 10.0).abs() < 1e-12);
        let day = c.cumulative(DAY_S);
        assert!((day - 6.0 * DAY_S).abs() < 1e-6 * day, "{day}");
        // Half the day's arrivals come by noon (the wave is symmetric).
        let mut k = 0;
        let noon = c.time_at(day / 2.0, &mut k).unwrap();
        assert!((noon - 43_200.0).abs() < 1e-6, "{noon}");
    }
}
