//! `llmsim capacity`: the highest arrival rate that meets every SLO, the
//! saturation throughput, which SLO binds first, replicas for a target
//! rate, goodput, SLO attainment and cost.
//!
//! The search keeps the scenario's open-loop arrival process (Poisson,
//! gamma or constant) and varies only its rate. Every probe runs the same
//! seeds (`--seeds N`, default 3: the scenario's seed and the next ones, as
//! `llmsim sweep --seeds` does) at every rate (common random numbers: a
//! faster rate compresses the same gaps, so the answer does not jitter with
//! sampling noise); every verdict is judged over all of them.
//!
//! 1. **Burst**: every request arrives within the first moments (10^6
//!    req/s), on the scenario's seed. Its throughput, `burst_rps`, is only
//!    the starting point: with fixed output lengths the requests admitted
//!    together finish together, so the batch phase-locks into cohorts that
//!    prefill together and the figure understates what the engine sustains
//!    (the base model: 59.9 req/s against about 78).
//! 2. **Saturation**: the highest open-loop rate the engine *sustains*. A
//!    probe runs 20,000 requests a seed (more if the arrivals span fewer
//!    than 20 mean E2Es). Over its arrival window (first to last arrival),
//!    take the time-averaged waiting queue (requests that have arrived and
//!    are not being served: from arrival to first scheduled, and from a
//!    preemption to rescheduled) over the third quarter, `W3`,
//!    and the fourth, `W4`, and the arrivals of the second half, `A`. A
//!    queue that keeps up has `W4 ~ W3`; one that falls behind by `x` of
//!    the offered load grows by `x * A / 2` requests between the two
//!    quarters. The rate is **sustained** when, pooled over seeds,
//!    `sum(W4 - W3) <= 0.02 * sum(A / 2)`: the engine fell behind by at
//!    most 2% of the arrivals. (By conservation, served throughput then
//!    keeps up with the offered load to within that 2% plus the requests
//!    running.) From the burst figure the rate grows (or shrinks) by x1.25
//!    until the verdict changes, then bisects to `--precision`.
//!    `saturation_rps` is the most throughput served at a sustained rate:
//!    requests finished per second over the second half of the arrival
//!    window, pooled over seeds, capped at the probe's offered rate, the
//!    highest over sustained probes. It is what the engine was seen to
//!    serve, not what was offered: the 2% allowance lets a sustained
//!    offered rate overshoot the engine's capacity by up to 2%.
//! 3. **Lowest rate**: 1% of saturation, a nearly idle engine. If an SLO
//!    fails there, no rate can meet it: the error reports the best achieved.
//! 4. **Stepping up** from there by x2 until a probe misses an SLO or the
//!    rate reaches saturation (above it the queue grows without bound, so
//!    no latency holds in steady state), then **bisection** until the
//!    highest passing rate and the lowest failing one are within
//!    `precision` (default 1%) of each other. A probe passes when every SLO
//!    holds on every seed; its SLO values are the worst over seeds.
//!    `binding_slo` is the SLO the lowest failing probe missed by most
//!    (largest value/bound).
//!
//! SLO probe size: `max(2000, ceil(100 / (1 - q)))` requests a seed, where
//! `q` is the highest quantile an SLO rests on (0.5 for a mean or median,
//! 0.9, 0.99, and 0.999 for a maximum), so at least 100 requests lie beyond
//! the percentile: 10,000 requests for a p99. A passing probe whose
//! arrivals span less than 20 mean E2Es is run again with enough requests,
//! so the empty start and the drain at the end are a small part of the run.
//! `--requests N` (100 to 1,000,000) sets every probe's size instead.

pub mod fleet;
pub mod over_time;
pub mod probe;
pub mod render;
pub mod saturation;
pub mod search;
pub mod slo;

pub use search::{Options, Probe, SearchResult, search};
pub use slo::{Slo, SloError};

#[cfg(test)]
mod tests;
