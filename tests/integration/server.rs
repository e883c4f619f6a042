//! Integration tests: `llmsim serve` on a real socket. Each test starts its
//! own server on a free port (read back from its first stdout line) and
//! stops it when done. Timing is checked exactly in the engine task's unit
//! tests (paused clock); here we check the HTTP surface, errors, SSE
//! framing, headers, disconnects, the record/replay promise and a real
//! OpenAI client.

mod admission;
mod api;
mod chat_template;
mod errors;
mod fleet;
mod fuzz;
mod hardening;
mod harness;
mod layers;
mod lifecycle;
mod lora;
mod memory;
mod parity;
mod prefix;
mod priority;
mod python;
mod speculative;
mod structured;
mod tools;
