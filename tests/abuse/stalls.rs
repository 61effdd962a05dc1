//! Clients that stop reading, or vanish, while the server is generating for them.

use std::time::Duration;

use serde_json::json;
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use speechstream_transports::ServerConfig;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_tungstenite::MaybeTlsStream;

use crate::peers::{await_open_connections, serve_clients_at_once};
use crate::support::{Recorded, TestServer};

fn config(write_timeout: Duration) -> ServerConfig {
    let mut config = ServerConfig::new(SessionOptions::default());
    config.max_connections = Some(2);
    config.write_timeout = write_timeout;
    config
}

/// Minutes of audio: far more than the socket buffers between server and client hold.
fn long_text() -> String {
    "word ".repeat(2000)
}

// A WebSocket client that never reads during a generation used to keep its session and its
// engine request forever: the idle timeout does not run while generating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_client_that_never_reads_is_dropped_and_its_request_aborted() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let server = TestServer::start_with(engine.clone(), config(Duration::from_secs(1))).await;
    let mut client = server.connect().await;
    client.send(json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"})).await;
    client.send(json!({"type": "input.text", "text": long_text()})).await;
    client.send(json!({"type": "input.done"})).await;
    let aborts = engine.await_aborts(1).await;
    assert_eq!(aborts, vec![engine.requests()[0].0]);
    assert!(engine.finished().is_empty());
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    serve_clients_at_once(&server, 2).await;
    drop(client);
    server.shutdown().await;
}

// The same over HTTP: a streamed response nobody reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_that_never_reads_is_dropped_and_its_request_aborted() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let server = TestServer::start_with(engine.clone(), config(Duration::from_secs(1))).await;
    let body = json!({"input": long_text(), "response_format": "pcm", "stream_format": "audio"}).to_string();
    let request = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    assert_eq!(engine.await_aborts(1).await.len(), 1);
    assert!(engine.finished().is_empty());
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    drop(stream);
    server.shutdown().await;
}

// Issue 9: a client that resets mid-utterance could leave its engine request without an
// Abort: when the reset surfaced as a failed flush, the abort the session then queued was never
// executed. Every request submitted must be aborted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_utterance_aborts_the_request_exactly_once() {
    // Audio keeps coming in small chunks, so the reset often meets a write in progress.
    let steady = SyntheticEngine::new(SyntheticOptions { chunk_delay: Duration::from_millis(2), ..Default::default() });
    let engine = Recorded::new(steady);
    let server = TestServer::start_with(engine.clone(), config(Duration::from_secs(30))).await;
    for _ in 0..30 {
        let mut client = server.connect().await;
        if let MaybeTlsStream::Plain(stream) = client.ws.get_ref() {
            stream.set_zero_linger().expect("SO_LINGER 0");
        }
        client.send(json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"})).await;
        client.send(json!({"type": "input.text", "text": long_text()})).await;
        client.send(json!({"type": "input.done"})).await;
        assert_eq!(client.json().await["type"], "audio.start");
        drop(client);
    }
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    let mut submitted: Vec<_> = engine.requests().into_iter().map(|(id, _)| id).collect();
    let mut aborted = engine.aborts();
    submitted.sort_unstable();
    aborted.sort_unstable();
    assert_eq!(submitted.len(), 30);
    assert_eq!(aborted, submitted);
    server.shutdown().await;
}
