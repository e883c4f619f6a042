//! The studies built on the planner: sweeps, capacity searches, the
//! experiment tables, calibration and the fidelity suites, plots, the
//! readers of measured benchmark files and the diff against them.

pub mod calibrate;
pub mod capacity;
pub mod diff;
pub mod experiments;
pub mod measured;
pub mod plot;
pub mod sweep;
