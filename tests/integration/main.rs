//! The one integration-test binary. Each module is a theme; test names read
//! as sentences. `TestCommand` runs the built `llmsim` binary.

mod support;

mod bench;
mod calibrate;
mod cli_errors;
mod cli_run;
mod deployment;
mod diff;
mod experiments;
mod invariants;
mod invariants_models;
mod server;
mod sweep;
