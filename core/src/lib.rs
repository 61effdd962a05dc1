//! speechstream-core: vLLM-Omni's streaming speech WebSocket protocol as a synchronous,
//! I/O-free state machine.
//!
//! It parses client frames, validates `session.config`, runs one [`session::Session`] per
//! connection and encodes audio. It does no I/O, reads no clock and spawns no thread:
//! callers feed it frames, engine events and the time, and drain what it wants sent.
//! It is not a server (see speechstream-transports) and not a voice (see the engines).

pub mod check;
pub mod codec;
pub mod config;
pub mod encode;
pub mod engine;
pub mod json;
mod messages;
pub mod parse;
mod pydantic;
pub mod session;
pub mod speech_http;
#[cfg(feature = "synthetic")]
pub mod synthetic;
mod text;
