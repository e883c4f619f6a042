//! Integration tests: diff.

#[allow(unused_imports)]
use crate::support::*;
