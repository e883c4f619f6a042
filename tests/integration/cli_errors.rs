//! Integration tests: cli_errors.

#[allow(unused_imports)]
use crate::support::*;
