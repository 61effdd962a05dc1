//! The WebSocket handshake: resets mid-handshake leak nothing.

use std::sync::Arc;

use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use speechstream_transports::ServerConfig;

use crate::peers::{await_open_connections, send_and_reset, serve_clients_at_once, upgrade_request, GOOD_KEY};
use crate::support::TestServer;

const MAX_CONNECTIONS: usize = 4;

fn server_config() -> ServerConfig {
    let mut config = ServerConfig::new(SessionOptions::default());
    config.max_connections = Some(MAX_CONNECTIONS);
    config
}

// Issue 9, defect 1: an upgrade request and one masked frame, then a reset before the 101 is
// read. The connection's task used to wait forever for an upgrade that hyper's (still alive,
// but finished) connection would never hand over, holding a --max-connections slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_handshakes_leave_no_connection_behind() {
    let server =
        TestServer::start_with(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), server_config()).await;
    let mut attempt = upgrade_request(GOOD_KEY).into_bytes();
    attempt.extend_from_slice(&[0x81, 0x80, 0, 0, 0, 0]);
    for _ in 0..40 {
        send_and_reset(&server, &attempt).await;
    }
    // The scrape's own connection is the only one left.
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    serve_clients_at_once(&server, MAX_CONNECTIONS).await;
    server.shutdown().await;
}
