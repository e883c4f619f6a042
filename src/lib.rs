//! llmsim: a capacity planner for LLM serving.
//!
//! The engine (`engine`) runs the rules of a vLLM-style serving engine in
//! simulated time; `sim` drives it as fast as possible, the real-time server
//! drives it by the wall clock. `config` reads scenarios, `workload` makes
//! requests, `metrics` measures, `report` renders.

pub mod bench;
pub mod calibrate;
pub mod capacity;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod content;
pub mod diff;
pub mod engine;
pub mod experiments;
pub mod input;
pub mod limits;
pub mod measured;
pub mod metrics;
pub mod perfetto;
pub mod plot;
pub mod report;
pub mod run_driver;
pub mod server;
pub mod sim;
pub mod sweep;
pub mod time;
pub mod trace;
pub mod util;
pub mod workload;
pub mod yaml;
