//! Integration tests: cli_run.

#[allow(unused_imports)]
use crate::support::*;
