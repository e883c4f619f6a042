//! The one integration-test binary. Each module is a theme; test names read
//! as sentences. `TestCommand` runs the built `llmsim` binary.

mod support;
mod support_cluster;

mod bench;
mod calibrate;
mod capacity;
mod cli_errors;
mod cli_run;
mod cluster;
mod cluster_exact;
mod deployment;
mod diff;
mod disagg;
mod docs;
mod experiment_claims;
mod experiments;
mod fuzz;
mod fuzz_inputs;
mod inputs;
mod invariants;
mod invariants_models;
mod invariants_prefix;
mod limits;
mod over_time;
mod prefix;
mod server;
mod stretch;
mod structure;
mod sweep;
