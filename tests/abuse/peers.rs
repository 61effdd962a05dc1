//! Raw peers that misbehave below what a WebSocket or HTTP client library allows, and the
//! server-side counts the tests assert on.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Received, TestServer, TIMEOUT};

/// A complete WebSocket upgrade request for the streaming endpoint.
pub fn upgrade_request(key: &str) -> String {
    format!(
        "GET /v1/audio/speech/stream HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
}

pub const GOOD_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// Send `bytes`, then reset the connection (SO_LINGER 0) without reading anything.
pub async fn send_and_reset(server: &TestServer, bytes: &[u8]) {
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream.set_zero_linger().expect("SO_LINGER 0");
    stream.write_all(bytes).await.expect("write");
    drop(stream);
}

/// One value of the server's Prometheus exposition; `None` if the scrape itself was refused (a
/// full server answers 503 at accept without reading the request, so the request can arrive
/// after the socket closed and the answer be lost to a reset).
pub async fn try_metric(server: &TestServer, name: &str) -> Option<u64> {
    let (status, body) = match server.try_http("GET", "/metrics").await {
        Ok(answer) => answer,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
        Err(e) => panic!("/metrics: {e}"),
    };
    if status != 200 {
        return None;
    }
    let value = body.lines().find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')));
    Some(value.and_then(|value| value.trim().parse().ok()).unwrap_or_else(|| panic!("no {name} in {body}")))
}

pub async fn metric(server: &TestServer, name: &str) -> u64 {
    try_metric(server, name).await.expect("/metrics refused")
}

/// Wait (generously) until `speechstream_connections_open` is `expected`, counting the
/// scrape's own connection; returns the last value seen.
pub async fn await_open_connections(server: &TestServer, expected: u64) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let open = try_metric(server, "speechstream_connections_open").await;
        if open == Some(expected) || tokio::time::Instant::now() >= deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` WebSocket clients at once, each served a whole (empty) utterance: the server had `n`
/// free slots.
pub async fn serve_clients_at_once(server: &TestServer, n: usize) {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(server.connect().await);
    }
    for client in &mut clients {
        client.send(json!({"type": "session.config"})).await;
        client.send(json!({"type": "input.done"})).await;
        assert_eq!(
            client.recv().await,
            Received::Json(json!({"type": "session.done", "utterance_index": 0, "total_sentences": 0}))
        );
    }
}

/// Write `bytes` on a fresh connection and read until the server closes it; the response, as
/// text. Panics if the server keeps the connection past the generous timeout.
pub async fn exchange(server: &TestServer, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream.write_all(bytes).await.expect("write");
    let mut response = Vec::new();
    let read = tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut response)).await;
    read.expect("the server held the connection").expect("read");
    String::from_utf8_lossy(&response).into_owned()
}

/// The status code and JSON body of an HTTP response.
pub fn status_and_json(response: &str) -> (u16, serde_json::Value) {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response head: {response:?}"));
    let status = head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).expect("status code");
    (status, serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body:?}")))
}
