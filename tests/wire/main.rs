//! Integration tests over real sockets on loopback, with tokio-tungstenite as an independent
//! WebSocket client. One test binary (one link) for all of them.

mod codec;
mod http;
mod protocol;
mod server;
mod support;
