//! Scenario, hardware, model and deployment files: read, checked and turned
//! into the validated [`config::Scenario`] the planner and the server run,
//! with the input limits and the readers of arrival traces.

pub mod config;
pub mod input;
pub mod limits;
pub mod trace;
pub mod yaml;
