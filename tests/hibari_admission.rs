//! Refusals for lack of capacity reach clients as the protocol's errors: a WebSocket stream gets
//! an `error` frame and its session stays open (a non-streamed utterance then succeeds), HTTP
//! gets 503 with `Retry-After`, and `/metrics` counts them. The engine is capped at no stream at
//! all (`max_streams = 0`), so every stream is refused whatever the machine's speed: no timing
//! is involved. The usage gauge balancers read follows admission: 0 idle, the streams' share
//! of the cap while below it, 1 once the next stream would be refused. Needs `.cache` from
//! scripts/setup-voice.sh.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use speechstream_core::engine::{Engine, EngineEvent, EngineEventKind, EventSink, RequestId, SynthesisRequest};
use speechstream_core::session::SessionOptions;
use speechstream_engine_libtorch::{EngineOptions, TorchEngine};
use speechstream_transports::{serve, ServerConfig, STREAM_PATH};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

const TIMEOUT: Duration = Duration::from_secs(120);
const REFUSAL: &str = "Server overloaded: every worker is busy keeping the running streams in real time; retry in 1 s";

fn assets() -> PathBuf {
    let cache = std::env::var_os("SPEECHSTREAM_CACHE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache"), PathBuf::from);
    let dir = cache.join("hibari");
    assert!(dir.join("hibari.onnx").is_file(), "{} missing: run scripts/setup.sh first", dir.display());
    dir
}

/// One HTTP/1.1 exchange on a fresh connection: (status line, headers, body).
fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (String, String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).expect("write");
    let mut response = Vec::new();
    s.read_to_end(&mut response).expect("read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_owned(), headers.to_lowercase(), body.to_owned())
}

async fn frames_until_done(
    ws: &mut (impl StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin),
) -> (Vec<Value>, usize) {
    let (mut texts, mut binary) = (Vec::new(), 0);
    loop {
        let message = tokio::time::timeout(TIMEOUT, ws.next()).await.expect("timed out").expect("open").expect("frame");
        match message {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).expect("json");
                let done = v["type"] == "session.done";
                texts.push(v);
                if done {
                    return (texts, binary);
                }
            }
            Message::Binary(b) => binary += b.len(),
            Message::Close(c) => panic!("closed: {c:?}"),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_streams_get_clear_errors_and_the_rest_is_served() {
    let mut options = EngineOptions::new(assets());
    options.threads = Some(1);
    options.workers = Some(2);
    options.max_streams = Some(0);
    let engine = Arc::new(tokio::task::block_in_place(|| TorchEngine::new(options)).expect("engine"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, engine, ServerConfig::new(SessionOptions::default()), async {
        let _ = stopped.await;
    }));

    // A streamed utterance is refused with an error frame; the session stays open.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}{STREAM_PATH}")).await.expect("connect");
    let config = json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"});
    ws.send(Message::Text(config.to_string().into())).await.expect("send");
    for message in [json!({"type": "input.text", "text": "Hello there."}), json!({"type": "input.done"})] {
        ws.send(Message::Text(message.to_string().into())).await.expect("send");
    }
    let (texts, audio) = frames_until_done(&mut ws).await;
    assert_eq!(audio, 0);
    let errors: Vec<&Value> = texts.iter().filter(|v| v["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{texts:?}");
    assert_eq!(errors[0]["message"], format!("Generation failed for utterance 0, sentence 0: {REFUSAL}"));
    let done = texts.iter().find(|v| v["type"] == "audio.done").expect("audio.done");
    assert_eq!(done["error"], true);

    // The same connection, not streamed (never refused: it runs in the time streams leave).
    let config = json!({"type": "session.config", "response_format": "wav"});
    ws.send(Message::Text(config.to_string().into())).await.expect("send");
    for message in [json!({"type": "input.text", "text": "Hello there."}), json!({"type": "input.done"})] {
        ws.send(Message::Text(message.to_string().into())).await.expect("send");
    }
    let (texts, audio) = frames_until_done(&mut ws).await;
    assert!(audio > 24_000, "{audio} bytes of wav");
    assert!(texts.iter().all(|v| v["type"] != "error"), "{texts:?}");
    assert_eq!(texts.last().expect("session.done")["utterance_index"], 1);

    // HTTP: a streamed response is refused with 503 and Retry-After; a whole file is served.
    let body = json!({"input": "Hello there.", "stream_format": "audio", "response_format": "pcm"}).to_string();
    let (status, headers, text) =
        tokio::task::spawn_blocking(move || http(addr, "POST", "/v1/audio/speech", &body)).await.expect("join");
    assert!(status.contains(" 503 "), "{status}");
    assert!(headers.lines().any(|h| h == "retry-after: 1"), "{headers}");
    let error: Value = serde_json::from_str(&text).expect("json body");
    assert_eq!(error["error"]["type"], "ServiceUnavailableError");
    assert_eq!(error["error"]["message"], format!("Speech generation failed: {REFUSAL}"));
    let body = json!({"input": "Hello there.", "response_format": "wav"}).to_string();
    let (status, _, _) =
        tokio::task::spawn_blocking(move || http(addr, "POST", "/v1/audio/speech", &body)).await.expect("join");
    assert!(status.contains(" 200 "), "{status}");

    let (_, _, metrics) = tokio::task::spawn_blocking(move || http(addr, "GET", "/metrics", "")).await.expect("join");
    assert!(metrics.lines().any(|l| l == "speechstream_admission_refusals_total 2"), "{metrics}");
    // No stream fits at all: full, as a balancer reads it.
    assert!(metrics.lines().any(|l| l == "speechstream_capacity_usage 1"), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with("speechstream_engine_worker_busy_seconds_total{worker=\"1\"}")));

    let _ = stop.send(());
    tokio::time::timeout(TIMEOUT, server).await.expect("shutdown").expect("join").expect("serve");
}

/// Collects a request's events.
struct Events(std::sync::mpsc::Sender<EngineEvent>);

impl EventSink for Events {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(event).is_ok()
    }
}

#[test]
fn usage_is_zero_idle_rises_with_streams_and_is_one_when_the_next_would_be_refused() {
    let mut options = EngineOptions::new(assets());
    options.threads = Some(1);
    options.workers = Some(1);
    options.max_streams = Some(2);
    let engine = TorchEngine::new(options).expect("engine");
    assert_eq!(engine.load().usage, 0.0);
    assert_eq!(engine.failure(), None);
    let text = "This sentence is long enough to keep a stream going for a good while, \
                and so is the one after it, which goes on and on for a few seconds more.";
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stream = SynthesisRequest::new(text);
    stream.stream = true;
    let first = RequestId { connection: 1, utterance: 0 };
    engine.submit(first, stream.clone(), Box::new(Events(tx.clone())));
    // One of two streams, and room for another on an idle core: at least the cap's half, below 1.
    let usage = engine.load().usage;
    assert!((0.5..1.0).contains(&usage), "{usage}");
    let second = RequestId { connection: 2, utterance: 0 };
    engine.submit(second, stream.clone(), Box::new(Events(tx.clone())));
    assert_eq!(engine.load().usage, 1.0);
    // The third is refused, as the gauge said.
    let third = RequestId { connection: 3, utterance: 0 };
    engine.submit(third, stream, Box::new(Events(tx)));
    let refused = rx.iter().find(|e| e.id == third).expect("an answer");
    assert!(matches!(refused.kind, EngineEventKind::Failed(ref f) if f.overloaded().is_some()), "{:?}", refused.kind);
    engine.abort(first);
    engine.abort(second);
    let deadline = std::time::Instant::now() + TIMEOUT;
    while engine.load().usage > 0.0 {
        assert!(std::time::Instant::now() < deadline, "usage stays {} after the streams ended", engine.load().usage);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn usage_is_one_when_admission_would_not_take_a_stream_on_time() {
    // A first-audio target no stream can meet: the idle worker takes the first stream anyway
    // (its work measures its speed), and from then on any new stream would be refused or
    // delayed, which the gauge says before one is sent.
    let mut options = EngineOptions::new(assets());
    options.threads = Some(1);
    options.workers = Some(1);
    options.pacing.first_audio = Duration::from_millis(1);
    let engine = TorchEngine::new(options).expect("engine");
    assert_eq!(engine.load().usage, 0.0);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stream = SynthesisRequest::new("A stream long enough to still be running when the next one comes along.");
    stream.stream = true;
    let first = RequestId { connection: 1, utterance: 0 };
    engine.submit(first, stream.clone(), Box::new(Events(tx.clone())));
    assert_eq!(engine.load().usage, 1.0);
    let second = RequestId { connection: 2, utterance: 0 };
    engine.submit(second, stream, Box::new(Events(tx)));
    let load = engine.load();
    assert_eq!(load.streams.refused + load.streams.delayed, 1, "{:?}", load.streams);
    engine.abort(first);
    engine.abort(second);
    drop(rx);
}
