//! Integration tests: sweep.

#[allow(unused_imports)]
use crate::support::*;
