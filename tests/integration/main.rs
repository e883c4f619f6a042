//! The one integration-test binary. Each module is a theme; test names read
//! as sentences. `TestCommand` runs the built `llmsim` binary.

mod support;

mod bench;
mod cli_errors;
mod cli_run;
mod diff;
mod experiments;
mod invariants;
mod invariants_prefix;
mod prefix;
mod server;
mod sweep;
