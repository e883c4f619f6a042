//! Exporters: pure functions from results to bytes, and ([`stream`]) the
//! steps CSV as an observer writing each row to a writer as its step
//! ends. The CLI decides where the bytes go. (The formatting helpers
//! everyone uses, `thousands`, `opt`, `to_json`, are in `llmsim_core::util`.)

pub mod cluster;
pub mod csv_out;
pub mod stream;
pub mod summary;
