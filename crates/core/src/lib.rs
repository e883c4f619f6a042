//! llmsim's engine: the rules of a vLLM-style serving engine (continuous
//! batching over paged KV blocks, chunked prefill, preemption by recompute,
//! a roofline step cost), with simulated time and the small helpers
//! everything rests on.
//!
//! This crate is pure: nothing in it reads a clock, a file, the environment
//! or starts a thread (`docs/ARCHITECTURE.md`, the bottom layer). Its
//! dependencies are serde, the seeded random streams and math; no web,
//! async or tokenizer crate.

pub mod engine;
pub mod time;
pub mod util;
