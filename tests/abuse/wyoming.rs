//! Wyoming clients that break the protocol (issue 14): each gets a clear `error` event and the
//! close, and the server goes on serving others on both doors. A raw TCP peer, since a real
//! client library cannot send these; the well-behaved flows run with the `wyoming` package itself
//! (tests/wyoming.rs, tests/deploy).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use speechstream_core::wyoming::WyomingOptions;
use speechstream_transports::ServerConfig;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::peers::{await_open_connections, metric};
use crate::support::{Recorded, TestServer, TIMEOUT};

/// One event as the `wyoming` package writes it.
fn event(kind: &str, data: Value) -> Vec<u8> {
    let data = data.to_string();
    format!("{{\"type\":\"{kind}\",\"version\":\"1.10.2\",\"data_length\":{}}}\n{data}", data.len()).into_bytes()
}

struct Peer {
    stream: BufReader<TcpStream>,
}

/// What the server sent: an event (type, data, payload bytes) or the end of the connection.
#[derive(Debug, PartialEq)]
enum Got {
    Event(String, Value, usize),
    Closed,
}

impl Peer {
    async fn connect(addr: SocketAddr) -> Peer {
        let stream = tokio::time::timeout(TIMEOUT, TcpStream::connect(addr)).await.expect("connect").expect("connect");
        Peer { stream: BufReader::new(stream) }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.expect("write");
    }

    async fn next(&mut self) -> Got {
        tokio::time::timeout(TIMEOUT, self.read()).await.expect("no event from the server in time")
    }

    async fn read(&mut self) -> Got {
        let mut line = String::new();
        match self.stream.read_line(&mut line).await {
            Ok(0) | Err(_) => return Got::Closed,
            Ok(_) => {}
        }
        let header: Value = serde_json::from_str(&line).expect("a JSON header line");
        let mut data = header.get("data").cloned().unwrap_or(json!({}));
        if let Some(n) = header["data_length"].as_u64() {
            let mut block = vec![0; n as usize];
            self.stream.read_exact(&mut block).await.expect("data");
            let block: Value = serde_json::from_slice(&block).expect("JSON data");
            for (k, v) in block.as_object().expect("an object") {
                data[k] = v.clone();
            }
        }
        let payload = header["payload_length"].as_u64().unwrap_or(0) as usize;
        let mut skipped = vec![0; payload];
        self.stream.read_exact(&mut skipped).await.expect("payload");
        Got::Event(header["type"].as_str().expect("type").to_owned(), data, payload)
    }

    /// The error the server answered with, then the close.
    async fn error_then_close(&mut self) -> (String, String) {
        let got = self.next().await;
        let Got::Event(kind, data, _) = got else { panic!("expected an error event, got {got:?}") };
        assert_eq!(kind, "error", "{data}");
        assert_eq!(self.next().await, Got::Closed, "the connection stays open after the error");
        (data["code"].as_str().expect("code").to_owned(), data["text"].as_str().expect("text").to_owned())
    }

    async fn describe(&mut self) -> Value {
        self.send(&event("describe", json!({}))).await;
        match self.next().await {
            Got::Event(kind, info, 0) if kind == "info" => info,
            other => panic!("expected info, got {other:?}"),
        }
    }
}

async fn start(write_timeout: Duration) -> (TestServer, SocketAddr, std::sync::Arc<Recorded<SyntheticEngine>>) {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let mut config = ServerConfig::new(SessionOptions::default());
    config.write_timeout = write_timeout;
    let (server, wyoming) = TestServer::start_with_wyoming(engine.clone(), config, WyomingOptions::default()).await;
    (server, wyoming, engine)
}

/// A good client on each door: the server still serves both.
async fn still_serves(server: &TestServer, wyoming: SocketAddr) {
    let info = Peer::connect(wyoming).await.describe().await;
    assert_eq!(info["tts"][0]["supports_synthesize_streaming"], true);
    assert_eq!(server.http("GET", "/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_events_get_an_error_and_the_close() {
    let (server, wyoming, engine) = start(Duration::from_secs(30)).await;
    let mut long_header = b"{\"type\":\"synthesize\",\"data\":{\"text\":\"".to_vec();
    long_header.extend(vec![b'a'; 100 * 1024]);
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (long_header, "bad-event", "event header line longer than 65536 bytes"),
        (b"{\"type\": \"describe\",,}\n".to_vec(), "bad-event", "invalid event header"),
        (
            b"{\"type\":\"synthesize\",\"payload_length\":1e30}\n".to_vec(),
            "bad-event",
            "payload_length must be a whole number",
        ),
        (
            b"{\"type\":\"synthesize\",\"data_length\":999999999999}\n".to_vec(),
            "bad-event",
            "data_length 999999999999 is larger than",
        ),
        // A data_length that claims less than was sent: the rest is read as the next header.
        (
            b"{\"type\":\"synthesize\",\"data_length\":3}\n{\"text\":\"Hi.\"}\n".to_vec(),
            "bad-event",
            "invalid event data",
        ),
        (event("synthesize", json!({"text": ["Hi."]})), "bad-request", "synthesize needs a text string"),
        (event("synthesize-chunk", json!({"text": "Hi."})), "bad-request", "synthesize-chunk outside a stream"),
    ];
    for (bytes, code, text) in cases {
        let mut peer = Peer::connect(wyoming).await;
        peer.send(&bytes).await;
        let (got_code, got_text) = peer.error_then_close().await;
        assert_eq!(got_code, code, "{got_text}");
        assert!(got_text.contains(text), "{got_text:?} should say {text:?}");
    }
    assert!(engine.requests().is_empty(), "bad input reached the engine: {:?}", engine.requests());
    assert_eq!(metric(&server, "speechstream_errors_total{kind=\"request\"}").await, 7);
    still_serves(&server, wyoming).await;
    server.shutdown().await;
}

// The `wyoming` package asks servers to drop event types they do not serve (clients send
// `select-program` on that promise), so an unknown type is logged and dropped, not fatal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_event_types_are_dropped() {
    let (server, wyoming, _) = start(Duration::from_secs(30)).await;
    let mut peer = Peer::connect(wyoming).await;
    peer.send(&event("select-program", json!({"name": "speechstream"}))).await;
    peer.send(b"{\"type\":\"no-such-event\",\"payload_length\":4}\nabcd").await;
    let info = peer.describe().await;
    assert_eq!(info["tts"][0]["name"], "speechstream");
    server.shutdown().await;
}

// A payload_length that promises more than ever comes: the connection just ends when the peer
// leaves, with nothing sent to the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_never_arrives_ends_with_the_peer() {
    let (server, wyoming, engine) = start(Duration::from_secs(30)).await;
    let mut peer = Peer::connect(wyoming).await;
    peer.send(b"{\"type\":\"synthesize\",\"data\":{\"text\":\"Hi.\"},\"payload_length\":1000}\nonly a little").await;
    drop(peer);
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    assert!(engine.requests().is_empty());
    still_serves(&server, wyoming).await;
    server.shutdown().await;
}

fn long_text() -> String {
    "word ".repeat(3000)
}

// A client that leaves mid-audio: its engine request is aborted, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_audio_aborts_its_request_once() {
    let steady = SyntheticEngine::new(SyntheticOptions { chunk_delay: Duration::from_millis(2), ..Default::default() });
    let engine = Recorded::new(steady);
    let config = ServerConfig::new(SessionOptions::default());
    let (server, wyoming) = TestServer::start_with_wyoming(engine.clone(), config, WyomingOptions::default()).await;
    for (n, reset) in [(1, false), (2, true)] {
        let mut peer = Peer::connect(wyoming).await;
        peer.send(&event("synthesize", json!({"text": long_text()}))).await;
        let Got::Event(kind, ..) = peer.next().await else { panic!("closed") };
        assert_eq!(kind, "audio-start");
        let Got::Event(kind, _, bytes) = peer.next().await else { panic!("closed") };
        assert!(kind == "audio-chunk" && bytes > 0);
        if reset {
            peer.stream.get_ref().set_zero_linger().expect("SO_LINGER 0");
        }
        drop(peer);
        let aborts = engine.await_aborts(n).await;
        assert_eq!(aborts.len(), n);
        assert_eq!(aborts[n - 1], engine.requests()[n - 1].0);
    }
    // Nothing aborted twice, nothing finished.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(engine.aborts().len(), 2);
    assert!(engine.finished().is_empty());
    assert_eq!(metric(&server, "speechstream_cancellations_total{transport=\"wyoming\"}").await, 2);
    still_serves(&server, wyoming).await;
    server.shutdown().await;
}

// A client that asks for minutes of audio and never reads: the write timeout cuts it off, its
// request is aborted, and the server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_dropped_and_its_request_aborted() {
    let (server, wyoming, engine) = start(Duration::from_secs(1)).await;
    let mut peer = Peer::connect(wyoming).await;
    peer.send(&event("synthesize", json!({"text": long_text()}))).await;
    let aborts = engine.await_aborts(1).await;
    assert_eq!(aborts, vec![engine.requests()[0].0]);
    assert!(engine.finished().is_empty());
    assert_eq!(await_open_connections(&server, 1).await, Some(1));
    still_serves(&server, wyoming).await;
    drop(peer);
    server.shutdown().await;
}

// Wyoming connections count against --max-connections like the others, and a refused one is
// told why (at its first event: a socket holds a slot only once it has sent one, issue 36).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wyoming_connections_share_the_connection_limit() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let mut config = ServerConfig::new(SessionOptions::default());
    config.max_connections = Some(1);
    let (server, wyoming) = TestServer::start_with_wyoming(engine, config, WyomingOptions::default()).await;
    let mut first = Peer::connect(wyoming).await;
    first.describe().await;
    let mut second = Peer::connect(wyoming).await;
    second.send(&event("describe", json!({}))).await;
    let (code, text) = second.error_then_close().await;
    assert_eq!((code.as_str(), text.as_str()), ("busy", "server at capacity (1 connections); retry later"));
    drop(first);
    server.shutdown().await;
}

// Issue 36: Wyoming sockets that send nothing, or trickle an event's header, used to take a
// --max-connections slot each at accept: with the slots full of them, Home Assistant got
// "busy". They hold none now, and past the first-byte deadline the silent ones are closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_wyoming_sockets_hold_no_slot() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let mut config = ServerConfig::new(SessionOptions::default());
    config.max_connections = Some(2);
    config.first_byte_timeout = Duration::from_secs(1);
    let (server, wyoming) = TestServer::start_with_wyoming(engine, config, WyomingOptions::default()).await;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(Peer::connect(wyoming).await);
    }
    let mut trickling = Peer::connect(wyoming).await;
    trickling.send(b"{\"type\":\"desc").await;
    for _ in 0..2 {
        assert_eq!(Peer::connect(wyoming).await.describe().await["tts"][0]["supports_synthesize_streaming"], true);
    }
    // The silent ones are closed at the deadline, unanswered; the one that sent a byte is not.
    for peer in &mut silent {
        assert_eq!(peer.next().await, Got::Closed);
    }
    assert_eq!(metric(&server, "speechstream_sockets_closed_total{reason=\"first_byte_timeout\"}").await, 4);
    trickling.send(b"ribe\"}\n").await;
    assert!(matches!(trickling.next().await, Got::Event(kind, _, _) if kind == "info"));
    server.shutdown().await;
}
