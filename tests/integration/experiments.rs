//! Integration tests: experiments.

#[allow(unused_imports)]
use crate::support::*;
