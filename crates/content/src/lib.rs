//! What the server says, apart from when it says it.
//!
//! `responses` picks an answer for a prompt from a scripted file (or the
//! built-in script); `tokenizer` counts prompt tokens and splits answers into
//! the tokens the server streams. Neither knows about timing: the server
//! hands the engine only token counts, and the engine hands back only times.

pub mod responses;
pub mod structured;
pub mod tokenizer;

pub use responses::{Answer, Query, Responses};
