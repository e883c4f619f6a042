//! Integration tests: server.

#[allow(unused_imports)]
use crate::support::*;
