//! What every connection of one server shares, and the shutdown signal they watch.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use speechstream_core::engine::{Engine, EngineCapabilities};
use speechstream_core::session::SessionOptions;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// What every connection of one server shares.
pub(crate) struct Shared {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) capabilities: Arc<EngineCapabilities>,
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
    pub(crate) body_timeout: Duration,
    pub(crate) write_timeout: Duration,
    pub(crate) max_sockets: usize,
    /// The whole response written to a connection past `max_sockets`.
    pub(crate) turned_away: Vec<u8>,
    pub(crate) metrics: Metrics,
    /// Set at the shutdown signal: `/ready` turns 503 and new work is refused.
    pub(crate) draining: AtomicBool,
}

/// Resolves once the server starts shutting down (or is gone).
pub(crate) async fn stopping(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns isn't Send; drop it here rather than hold it in a select.
    let _ = stop.wait_for(|stopping| *stopping).await.is_ok();
}
