//! The server around the sessions: HTTP routes, disconnects, framing, concurrency, shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions, DEFAULT_MODEL_NAME};
use speechstream_core::engine::Engine;
use speechstream_core::parse::Limits;
use speechstream_core::session::SessionOptions;
use speechstream_transports::ServerConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

use crate::support::{Received, Recorded, Scripted, Step, TestServer, TIMEOUT};

fn streamed_config() -> Value {
    json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"})
}

async fn start_streaming(client: &mut crate::support::Client, text: &str) {
    client.send(streamed_config()).await;
    client.send(json!({"type": "input.text", "text": text})).await;
    client.send(json!({"type": "input.done"})).await;
    assert_eq!(client.json().await["type"], "audio.start");
    assert!(!client.binary().await.is_empty());
}

/// A synthetic engine slow enough that a long text is still streaming when the test acts.
fn slow_synthetic() -> SyntheticEngine {
    SyntheticEngine::new(SyntheticOptions { chunk_delay: Duration::from_millis(20), ..SyntheticOptions::default() })
}

fn long_text() -> String {
    "a long utterance that keeps the engine busy ".repeat(40)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_models() {
    let server =
        TestServer::start(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), SessionOptions::default()).await;
    assert_eq!(server.http("GET", "/health").await, (200, "{}".to_owned()));
    let (status, body) = server.http("GET", "/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&body).expect("models JSON");
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"].as_array().map(Vec::len), Some(1));
    let model = &models["data"][0];
    assert_eq!(model["id"], DEFAULT_MODEL_NAME);
    assert_eq!(model["object"], "model");
    assert_eq!(model["owned_by"], "speechstream");
    assert!(model["created"].as_u64().is_some_and(|t| t > 1_600_000_000));
    let (status, body) = server.http("GET", "/nope").await;
    assert_eq!(status, 404);
    assert!(serde_json::from_str::<Value>(&body).is_ok());
    assert_eq!(server.http("POST", "/health").await.0, 405);
    assert_eq!(server.http("GET", "/v1/audio/speech/stream").await.0, 426);
    server.shutdown().await;
}

// §g.A 23: the peer vanishes mid-stream; its request is aborted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_aborts_streaming_request() {
    let engine = Recorded::new(Scripted::new(vec![Step::Audio(vec![1, 2], 24000), Step::HoldUntilAborted]));
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    start_streaming(&mut client, "Hello world. ").await;
    drop(client);
    let aborts = engine.await_aborts(1).await;
    assert_eq!(aborts, vec![engine.requests()[0].0]);
    // Nothing more arrives later.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(engine.aborts().len(), 1);
    assert_eq!(server.http("GET", "/health").await.0, 200);
}

// The same with the synthetic engine, and a client that closes politely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_close_mid_stream_aborts_once() {
    let engine = Recorded::new(slow_synthetic());
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    start_streaming(&mut client, &long_text()).await;
    client.ws.close(None).await.expect("close");
    let aborts = engine.await_aborts(1).await;
    assert_eq!(aborts.len(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(engine.aborts().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragmented_messages_arrive_whole() {
    let server =
        TestServer::start(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), SessionOptions::default()).await;
    let mut client = server.connect().await;
    let message = r#"{"type":"session.config","voice":"Vivian"}"#.as_bytes();
    let parts = [&message[..10], &message[10..30], &message[30..]];
    for (i, part) in parts.iter().enumerate() {
        let opcode = if i == 0 { Data::Text } else { Data::Continue };
        let frame = Frame::message(part.to_vec(), OpCode::Data(opcode), i == parts.len() - 1);
        client.send_message(Message::Frame(frame)).await;
    }
    // A character split across fragments.
    let text = r#"{"type":"input.text","text":"café"}"#.as_bytes();
    let cut = text.len() - 3; // inside the two bytes of 'é'
    client.send_message(Message::Frame(Frame::message(text[..cut].to_vec(), OpCode::Data(Data::Text), false))).await;
    client.send_message(Message::Frame(Frame::message(text[cut..].to_vec(), OpCode::Data(Data::Continue), true))).await;
    client.send(json!({"type": "input.done"})).await;
    let start = client.json().await;
    assert_eq!(start["sentence_text"], "café");
    let seen = client.until_session_done().await;
    assert!(matches!(seen.last(), Some(Received::Json(v)) if v["total_sentences"] == 1));
}

fn small_limits() -> SessionOptions {
    SessionOptions {
        limits: Limits { max_text_message_chars: 32, max_config_message_chars: 64 },
        ..SessionOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frames_close_the_connection_not_the_server() {
    let server = TestServer::start(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), small_limits()).await;

    // One frame far beyond any limit, in bytes.
    let mut client = server.connect().await;
    client.send_text(&"x".repeat(200_000)).await;
    let code = client.closed().await;
    assert!(matches!(code, Some(1009) | None), "{code:?}");

    // Fragments that add up to too much.
    let mut client = server.connect().await;
    for i in 0..4 {
        let opcode = if i == 0 { Data::Text } else { Data::Continue };
        let frame = Frame::message(vec![b'x'; 30_000], OpCode::Data(opcode), false);
        if client.ws.send(Message::Frame(frame)).await.is_err() {
            break;
        }
    }
    let code = client.closed().await;
    assert!(matches!(code, Some(1009) | None), "{code:?}");

    // Invalid UTF-8 in a text frame.
    let mut client = server.connect().await;
    let frame = Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
    client.send_message(Message::Frame(frame)).await;
    let code = client.closed().await;
    assert!(matches!(code, Some(1007) | None), "{code:?}");

    // Garbage before a config is the protocol's fatal error, politely closed.
    let mut client = server.connect().await;
    client.send_text("not json").await;
    assert_eq!(client.json().await, json!({"type": "error", "message": "Invalid JSON message"}));
    assert_eq!(client.closed().await, Some(1000));

    assert_eq!(server.http("GET", "/health").await.0, 200);
    server.shutdown().await;
}

use futures_util::SinkExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_answered() {
    let server =
        TestServer::start(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), SessionOptions::default()).await;
    let mut client = server.connect().await;
    client.send_message(Message::Ping(b"are you there".to_vec().into())).await;
    let pong = tokio::time::timeout(TIMEOUT, async {
        loop {
            match client.ws.next().await {
                Some(Ok(Message::Pong(payload))) => return payload.to_vec(),
                Some(Ok(_)) => continue,
                other => panic!("no pong: {other:?}"),
            }
        }
    })
    .await
    .expect("pong timed out");
    assert_eq!(pong, b"are you there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_are_independent() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut clients = Vec::new();
    for n in 0..6 {
        let mut client = server.connect().await;
        let engine = engine.clone();
        clients.push(tokio::spawn(async move {
            client.send(streamed_config()).await;
            for utterance in 0..2u64 {
                let text = format!("client {n} utterance {utterance}");
                client.send(json!({"type": "input.text", "text": text})).await;
                client.send(json!({"type": "input.done"})).await;
                let seen = client.until_session_done().await;
                let pcm: Vec<u8> = seen
                    .iter()
                    .flat_map(|m| match m {
                        Received::Binary(b) => b.clone(),
                        _ => Vec::new(),
                    })
                    .collect();
                let request = engine.requests().into_iter().find(|r| r.1.text == text).expect("request");
                assert_eq!(request.0.utterance, utterance);
                assert_eq!(pcm, engine.inner().render(&request.1).0);
            }
        }));
    }
    for client in clients {
        client.await.expect("client task");
    }
    let mut connections: Vec<u64> = engine.requests().iter().map(|r| r.0.connection).collect();
    connections.sort_unstable();
    connections.dedup();
    assert_eq!(connections.len(), 6);
}

// A client that stops reading pauses its engine request (bounded queues, awaited writes) and
// loses nothing when it reads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_pauses_its_request() {
    let engine = Recorded::new(SyntheticEngine::new(SyntheticOptions::default()));
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    // 2000 words of 4 characters: 560 s of audio, about 27 MB, far more than socket buffers.
    client.send(streamed_config()).await;
    client.send(json!({"type": "input.text", "text": "word ".repeat(2000)})).await;
    client.send(json!({"type": "input.done"})).await;
    assert_eq!(client.json().await["type"], "audio.start");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(engine.finished().is_empty(), "the engine ran ahead of a client that wasn't reading");
    let seen = client.until_session_done().await;
    let bytes: usize = seen
        .iter()
        .map(|m| match m {
            Received::Binary(b) => b.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(bytes, 560 * 24000 * 2);
    let Received::Json(done) = &seen[seen.len() - 2] else { panic!("no audio.done") };
    assert_eq!(done["total_bytes"], bytes);
    assert_eq!(engine.finished().len(), 1);
}

fn config_with_grace(grace: Duration) -> ServerConfig {
    let mut config = ServerConfig::new(SessionOptions::default());
    config.shutdown_grace = grace;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_sessions_with_1001() {
    let mut server =
        TestServer::start_with(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), config_with_grace(TIMEOUT))
            .await;
    let mut client = server.connect().await;
    client.send(streamed_config()).await;
    let addr = server.addr;
    server.begin_shutdown();
    assert_eq!(client.closed().await, Some(1001));
    server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_utterance_in_flight_finish() {
    let engine = Recorded::new(slow_synthetic());
    let mut server = TestServer::start_with(engine.clone(), config_with_grace(TIMEOUT)).await;
    let mut client = server.connect().await;
    start_streaming(&mut client, "finish this sentence before the server goes away").await;
    server.begin_shutdown();
    let seen = client.until_session_done().await;
    let Received::Json(done) = &seen[seen.len() - 2] else { panic!("no audio.done: {seen:?}") };
    assert_eq!(done["type"], "audio.done");
    assert_eq!(done["error"], false);
    assert!(done.get("cancelled").is_none());
    assert_eq!(client.closed().await, Some(1001));
    server.shutdown().await;
    assert!(engine.aborts().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_draining_a_new_connection_is_answered_503_even_when_its_request_comes_late() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let engine = Recorded::new(slow_synthetic());
    let mut server = TestServer::start_with(engine.clone(), config_with_grace(TIMEOUT)).await;
    let mut client = server.connect().await;
    start_streaming(&mut client, "keep the server draining for a while longer than the checks below").await;
    server.begin_shutdown();
    // Connected first, the request after a pause (as a balancer's check or a slow client
    // sends it): still answered with the refusal, never closed unanswered.
    for _ in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(server.addr).await.expect("connect while draining");
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("an answer, not a reset");
        assert!(response.starts_with("HTTP/1.1 503 "), "{response:?}");
    }
    let seen = client.until_session_done().await;
    assert!(seen.iter().any(|r| matches!(r, Received::Json(v) if v["type"] == "audio.done" && v["error"] == false)));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_grace_ends_a_stuck_utterance() {
    let engine = Recorded::new(Scripted::new(vec![Step::Audio(vec![1, 2], 24000), Step::HoldUntilAborted]));
    let mut server = TestServer::start_with(engine.clone(), config_with_grace(Duration::from_millis(200))).await;
    let mut client = server.connect().await;
    start_streaming(&mut client, "Hello world. ").await;
    server.begin_shutdown();
    // The cut utterance still gets its audio.done (issue 9), then the close.
    let seen = client.until_session_done().await;
    let error = "Generation failed for utterance 0, sentence 0: the server is shutting down";
    assert_eq!(
        seen,
        vec![
            Received::Json(json!({"type": "error", "message": error, "partial_audio": true, "action": "discard"})),
            Received::Json(json!({"type": "audio.done", "utterance_index": 0, "sentence_index": 0,
                                  "total_bytes": 2, "error": true})),
            Received::Json(json!({"type": "session.done", "utterance_index": 0, "total_sentences": 1})),
        ]
    );
    assert_eq!(client.closed().await, Some(1001));
    server.shutdown().await;
    assert_eq!(engine.aborts().len(), 1);
}

// The engine trait object can be any engine; the server only needs the trait.
#[allow(dead_code)]
fn engines_are_object_safe(engine: Arc<SyntheticEngine>) -> Arc<dyn Engine> {
    engine
}

/// The synthetic engine, reporting a failure once `failed` is set.
struct Failing {
    inner: SyntheticEngine,
    failed: AtomicBool,
}

impl Engine for Failing {
    fn capabilities(&self) -> &speechstream_core::engine::EngineCapabilities {
        self.inner.capabilities()
    }
    fn load(&self) -> speechstream_core::engine::EngineLoad {
        self.inner.load()
    }
    fn failure(&self) -> Option<String> {
        self.failed.load(Ordering::Relaxed).then(|| "all 2 engine workers have stopped".to_owned())
    }
    fn submit(
        &self,
        id: speechstream_core::engine::RequestId,
        request: speechstream_core::engine::SynthesisRequest,
        sink: Box<dyn speechstream_core::engine::EventSink>,
    ) {
        self.inner.submit(id, request, sink)
    }
    fn abort(&self, id: speechstream_core::engine::RequestId) {
        self.inner.abort(id)
    }
}

/// One line from the agent-check port.
async fn agent_line(addr: std::net::SocketAddr) -> String {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("agent connect");
    let mut line = String::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_string(&mut line)).await.expect("agent closes").expect("read");
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_check_says_room_drain_and_down_as_the_server_and_engine_go() {
    let options = SyntheticOptions {
        max_streams: Some(4),
        real_time_factor: Some(1.0),
        audio_seconds: Some(30.0),
        ..SyntheticOptions::default()
    };
    let engine = Arc::new(Failing { inner: SyntheticEngine::new(options), failed: AtomicBool::new(false) });
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let agent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let (addr, agent_addr) = (http.local_addr().expect("addr"), agent.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listeners = speechstream_transports::Listeners { http, wyoming: None, agent: Some(agent) };
    let server = tokio::spawn(speechstream_transports::serve_listeners(
        listeners,
        engine.clone(),
        config_with_grace(Duration::from_millis(300)),
        async {
            let _ = stopped.await;
        },
    ));
    let ready = || async move { speechstream_http(addr, "/ready").await };
    assert_eq!(agent_line(agent_addr).await, "up ready 100%\n");
    // One of four streams taken: three quarters of the weight left.
    let mut client = tokio_tungstenite::connect_async(format!("ws://{addr}{}", speechstream_transports::STREAM_PATH))
        .await
        .expect("connect")
        .0;
    use futures_util::SinkExt;
    for frame in [
        json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"}),
        json!({"type": "input.text", "text": "hold a stream"}),
        json!({"type": "input.done"}),
    ] {
        client.send(Message::Text(frame.to_string().into())).await.expect("send");
    }
    let deadline = std::time::Instant::now() + TIMEOUT;
    while agent_line(agent_addr).await != "up ready 75%\n" {
        assert!(std::time::Instant::now() < deadline, "the stream never showed in the agent's weight");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ready().await.0, 200);
    // The engine fails: down, and not ready.
    engine.failed.store(true, Ordering::Relaxed);
    assert_eq!(agent_line(agent_addr).await, "down #all 2 engine workers have stopped\n");
    let (status, body) = ready().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).expect("json")["status"], "failed");
    // Recovered, then draining: drain.
    engine.failed.store(false, Ordering::Relaxed);
    let _ = stop.send(());
    let deadline = std::time::Instant::now() + TIMEOUT;
    while agent_line(agent_addr).await != "drain\n" {
        assert!(std::time::Instant::now() < deadline, "the agent never said drain");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(client);
    tokio::time::timeout(TIMEOUT, server).await.expect("shut down").expect("join").expect("serve");
}

/// GET `path` on a fresh connection: status and body.
async fn speechstream_http(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}
