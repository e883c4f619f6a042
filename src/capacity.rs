//! `llmsim capacity`: the highest arrival rate that meets every SLO, the
//! saturation throughput, which SLO binds first, replicas for a target
//! rate, goodput, SLO attainment and cost.
//!
//! The search keeps the scenario's open-loop arrival process (Poisson,
//! gamma or constant) and varies only its rate, with the same seed at every
//! probe (common random numbers: a faster rate compresses the same gaps,
//! so the answer does not jitter with sampling noise).
//!
//! 1. **Saturation**: every probe request arrives within the first moments
//!    (rate 10^6/s) so the queue never empties; the completed-request
//!    throughput of that run is `saturation_rps`. No rate above it is
//!    sustainable, so the search never goes higher.
//! 2. **Lowest rate**: 1% of saturation, a nearly idle engine. If an SLO
//!    fails there, no rate can meet it: the error reports the best achieved.
//! 3. **Bisection** between the two until the highest passing rate and the
//!    lowest failing one are within `precision` (default 1%) of each other.
//!    `binding_slo` is the SLO the lowest failing probe missed by most
//!    (largest value/bound).
//!
//! Probe size: `max(2000, ceil(100 / (1 - q)))` requests, where `q` is the
//! highest quantile an SLO rests on (0.5 for a mean or median, 0.9, 0.99,
//! and 0.999 for a maximum), so at least 100 requests lie beyond the
//! percentile: 10,000 requests for a p99. A passing probe whose arrivals
//! span less than 20 mean E2Es is run again with enough requests, so the
//! empty start and the drain at the end are a small part of the run.

pub mod report;
pub mod search;
pub mod slo;

pub use search::{Options, Probe, Report, search};
pub use slo::Slo;

#[cfg(test)]
mod tests;
