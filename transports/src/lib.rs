//! speechstream-transports: the sockets around a speechstream-core `Session`.
//!
//! An HTTP/1.1 server (hyper 1) that serves the OpenAI-compatible `POST /v1/audio/speech`, the
//! operator endpoints (`/health`, `/ready`, `/metrics`, `/v1/models`, `/v1/audio/voices`), the
//! browser playground (`/`, embedded static files) and upgrades `/v1/audio/speech/stream` to a
//! WebSocket (fastwebsockets). Each TCP connection is one tokio task; a WebSocket connection
//! drives one `Session`, moving client frames, engine events and timer expiries into it and
//! executing what it asks for: frames to write, engine requests to submit or abort, the close.
//! A second, optional listener speaks Home Assistant's Wyoming protocol over the same engine,
//! limits and metrics, each connection driving one `WyomingSession` the same way. A third,
//! optional one answers HAProxy's agent check with the replica's room for new streams.
//!
//! What it is not: it holds no protocol state (ordering, indexes, limits, error strings all live
//! in the core) and it is not an engine. It only adapts a synchronous [`Engine`] to tokio.
//!
//! Engine requirements, because the adapter relies on them:
//! - `Engine::submit` and `Engine::abort` are called from the connection's async task and must
//!   return promptly (queue the work, flip a flag); they must not block.
//! - `EventSink::send` blocks while the connection's bounded event queue is full; that is how a
//!   slow client pauses its own request. It must therefore be called from the engine's own
//!   threads, never from a tokio runtime thread (tokio panics on a blocking send there).
//!
//! [`Engine`]: speechstream_core::engine::Engine

#![deny(unsafe_op_in_unsafe_fn)]

mod agent;
mod auth;
mod body;
mod connection;
mod context;
mod encoding;
mod engine_link;
mod metrics;
mod paths;
mod playground;
mod routes;
mod server;
mod shared;
mod sink;
mod sockets;
mod speech;
mod websocket;
mod write_timeout;
mod wyoming;

pub use paths::{SPEECH_PATH, STREAM_PATH};
pub use server::{
    bind, raise_descriptor_limit, serve, serve_listeners, serve_with_wyoming, Listeners, ServerConfig, WyomingListener,
};
