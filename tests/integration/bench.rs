//! Integration tests: bench.

#[allow(unused_imports)]
use crate::support::*;
