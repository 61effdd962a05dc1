//! RFC 6455 strictness: what a client library would never send.

use std::sync::Arc;

use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::peers::{exchange, status_and_json, upgrade_request, GOOD_KEY};
use crate::support::{TestServer, TIMEOUT};

async fn server() -> TestServer {
    TestServer::start(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), SessionOptions::default()).await
}

// Issue 9: `Sec-WebSocket-Key: x` was accepted; RFC 6455 §4.2.1 wants the base64 of 16 bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_websocket_key_is_refused() {
    let server = server().await;
    for key in ["x", "dGhlIHNhbXBsZQ==", "not base64 at all!!!!!!="] {
        let (status, body) = status_and_json(&exchange(&server, upgrade_request(key).as_bytes()).await);
        assert_eq!(status, 400, "key {key:?}");
        assert_eq!(body["detail"], "Sec-WebSocket-Key must be the base64 encoding of 16 bytes");
    }
    server.shutdown().await;
}

// Issue 9: unmasked client frames were accepted; RFC 6455 §5.1 requires closing (1002).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmasked_client_frame_is_closed_with_1002() {
    let server = server().await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    stream.write_all(upgrade_request(GOOD_KEY).as_bytes()).await.expect("write");
    let config = br#"{"type":"session.config"}"#;
    let mut frame = vec![0x81, config.len() as u8];
    frame.extend_from_slice(config);
    stream.write_all(&frame).await.expect("write");
    let mut response = Vec::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut response))
        .await
        .expect("the server kept the connection")
        .expect("read");
    let head_end = response.windows(4).position(|w| w == b"\r\n\r\n").expect("the 101") + 4;
    assert!(response.starts_with(b"HTTP/1.1 101"));
    // The only frame after the 101: close (0x88), code 1002.
    let frames = &response[head_end..];
    assert_eq!(&frames[..4], &[0x88, 2, 0x03, 0xea], "{frames:?}");
    server.shutdown().await;
}
