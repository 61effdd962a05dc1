//! HTTP peers that send slowly, or promise more than the server takes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use speechstream_transports::ServerConfig;

use crate::peers::{await_open_connections, exchange, serve_clients_at_once, status_and_json};
use crate::support::{TestServer, TIMEOUT};

fn server(configure: impl FnOnce(&mut ServerConfig)) -> impl std::future::Future<Output = TestServer> {
    let mut config = ServerConfig::new(SessionOptions::default());
    config.max_connections = Some(2);
    configure(&mut config);
    TestServer::start_with(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), config)
}

const SPEECH_HEAD: &str = "POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";

// Issue 9, defect 4: a body that never arrives whole used to hold its connection (and a
// --max-connections slot) for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_408_and_frees_its_slot() {
    let server = server(|config| config.body_timeout = Duration::from_secs(1)).await;
    let expected = json!({"error": {
        "message": "Request body not received within 1 seconds",
        "type": "RequestTimeoutError",
        "param": null,
        "code": 408,
    }});
    // Fewer bytes than declared.
    let short = format!("{SPEECH_HEAD}Content-Length: 1000\r\n\r\n{{");
    // A chunked body that stops after its first chunk.
    let endless = format!("{SPEECH_HEAD}Transfer-Encoding: chunked\r\n\r\n5\r\n{{\"inp\r\n");
    let (a, b) = tokio::join!(exchange(&server, short.as_bytes()), exchange(&server, endless.as_bytes()));
    assert_eq!(status_and_json(&a), (408, expected.clone()));
    assert_eq!(status_and_json(&b), (408, expected));
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    serve_clients_at_once(&server, 2).await;
    server.shutdown().await;
}

// The 413 for a declared length past the limit comes before any of the body is read (it used
// to come only after ~16 MiB had been read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_declared_body_is_refused_unread() {
    // A body deadline far past the test's own, so only the length check can answer in time.
    let server = server(|config| config.body_timeout = TIMEOUT * 4).await;
    let head = format!("{SPEECH_HEAD}Content-Length: 100000000\r\n\r\n");
    let (status, body) = status_and_json(&exchange(&server, head.as_bytes()).await);
    assert_eq!(status, 413);
    assert_eq!(body["error"]["message"], "Request body too large (max 16842752 bytes)");
    server.shutdown().await;
}

// Issue 9, defect 5 (slowloris): a request head trickled, or never sent, is dropped after
// --header-timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_request_head_is_dropped() {
    let server = server(|config| config.header_timeout = Duration::from_secs(1)).await;
    let (partial, silent) =
        tokio::join!(exchange(&server, b"GET /health HTTP/1.1\r\nHost: localhost\r\n"), exchange(&server, b""));
    assert!(!partial.contains("200 OK") && !silent.contains("200 OK"), "{partial:?} {silent:?}");
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    server.shutdown().await;
}

// Issue 9, defect 5 (idle TCP connections taken on without limit, descriptors ran out at
// ~20,000) is held by the socket budget: see `sockets` (issue 36), where idle ones past it make
// room instead of having every new connection turned away.

// Issue 9: the HTTP input had no length cap (2,025,000 characters were taken); it is now the
// WebSocket path's buffer limit (--max-buffered-chars, 1,048,576).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_input_is_capped_like_the_websocket_buffer() {
    let server = server(|_| {}).await;
    let body = json!({"input": "x".repeat((1 << 20) + 1)}).to_string();
    let request = format!("{SPEECH_HEAD}Connection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    let (status, reply) = status_and_json(&exchange(&server, request.as_bytes()).await);
    assert_eq!((status, &reply["error"]["message"]), (400, &json!("Input text too long (max 1048576 characters)")));
    server.shutdown().await;
}
