//! The virtual-time planner: workloads, the drivers that run the engine as
//! fast as it goes (one engine, replicas behind a router, prefill and decode
//! pools), the metrics they collect and the reports they write.

pub mod cluster;
pub mod intake;
pub mod metrics;
pub mod perfetto;
pub mod report;
mod run;
pub mod run_driver;
pub mod sim;
pub mod workload;

pub use run::Run;
