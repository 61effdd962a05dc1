//! What every connection of one server shares, and the shutdown signal they watch.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use speechstream_core::catalog::Catalog;
use speechstream_core::engine::Engine;
use speechstream_core::session::SessionOptions;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::sockets::Sockets;

/// What every connection of one server shares.
pub(crate) struct Shared {
    pub(crate) engine: Arc<dyn Engine>,
    /// The engine's capabilities under the server's names: what every protocol checks and
    /// resolves requests with.
    pub(crate) catalog: Catalog,
    pub(crate) options: Arc<SessionOptions>,
    pub(crate) shutdown_grace: Duration,
    pub(crate) engine_event_queue: usize,
    /// Largest WebSocket message accepted, in bytes.
    pub(crate) max_message_bytes: usize,
    /// Unix time the server started (the models' `created`).
    pub(crate) started_unix: u64,
    pub(crate) api_key: Option<String>,
    pub(crate) max_connections: Option<usize>,
    pub(crate) header_timeout: Duration,
    /// How long a new socket may stay silent (at most `header_timeout`).
    pub(crate) first_byte_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) write_timeout: Duration,
    /// Every socket held, and the socket and connection limits.
    pub(crate) sockets: Sockets,
    /// The whole responses written to a socket turned away at accept: past the socket budget,
    /// and past its address's share.
    pub(crate) turned_away: Vec<u8>,
    pub(crate) turned_away_peer: Vec<u8>,
    pub(crate) metrics: Metrics,
    /// Set at the shutdown signal: `/ready` turns 503 and new work is refused.
    pub(crate) draining: AtomicBool,
}

/// Resolves at `deadline`; never without one.
pub(crate) async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// Resolves once the server starts shutting down (or is gone).
pub(crate) async fn stopping(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns isn't Send; drop it here rather than hold it in a select.
    let _ = stop.wait_for(|stopping| *stopping).await.is_ok();
}
