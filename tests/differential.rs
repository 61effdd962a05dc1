//! Differential tests: the same client messages to the reference handler (Python, under
//! uvicorn with its null engine: ../shared/reference/) and to speechstream with the
//! synthetic engine set to the same audio (1.0 s per utterance, 80 ms chunks). The JSON
//! frames must be identical, text for text; binary frames must have the same lengths.
//!
//! Cases cover what the reference does right. Where docs/protocol.md §i lists a reference defect
//! that we fix (cancel mid-stream, binary client frames, per-utterance request errors),
//! there is no differential case; the core's and the wire tests pin our behaviour.
//!
//! Needs `.venv-ref` (scripts/setup-reference.sh, run by scripts/setup.sh).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::engine::{Engine, EngineCapabilities, EventSink, RequestId, SynthesisRequest};
use speechstream_core::parse::Limits;
use speechstream_core::session::SessionOptions;
use speechstream_transports::{serve, ServerConfig};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// The synthetic engine seen through the reference's capabilities: no aligner, no codec
/// adapter, any model accepted (the null service's `_check_model` accepts everything, so
/// cases use our model name).
struct AsReference {
    inner: SyntheticEngine,
    capabilities: EngineCapabilities,
}

impl Engine for AsReference {
    fn capabilities(&self) -> &EngineCapabilities {
        &self.capabilities
    }
    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>) {
        self.inner.submit(id, request, sink)
    }
    fn abort(&self, id: RequestId) {
        self.inner.abort(id)
    }
}

#[derive(Clone, Copy)]
struct Settings {
    idle_timeout: f64,
    config_timeout: f64,
    max_text: usize,
    max_config: usize,
}

const DEFAULTS: Settings =
    Settings { idle_timeout: 30.0, config_timeout: 10.0, max_text: 131_072, max_config: 4_194_304 };

struct Reference {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

async fn start_reference(s: Settings) -> Reference {
    let python = repo().join(".venv-ref/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup.sh (or scripts/setup-reference.sh)", python.display());
    let shared = std::env::var_os("SPEECHSTREAM_SHARED").map(PathBuf::from).unwrap_or_else(|| repo().join("../shared"));
    let script = shared.join("reference/reference_server.py");
    assert!(script.exists(), "{} is missing: the reference handler lives in ../shared/reference", script.display());
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        l.local_addr().expect("local addr").port()
    };
    let child = Command::new(python)
        .arg(script)
        .args(["--port", &port.to_string(), "--audio-seconds", "1.0", "--chunk-ms", "80", "--chunk-delay-ms", "0"])
        .args(["--idle-timeout", &s.idle_timeout.to_string(), "--config-timeout", &s.config_timeout.to_string()])
        .args(["--max-text-message-chars", &s.max_text.to_string()])
        .args(["--max-config-message-chars", &s.max_config.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the reference server");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let reference = Reference { child, addr };
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return reference;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the reference server did not start listening on {addr}");
}

async fn start_ours(s: Settings) -> SocketAddr {
    let options = SyntheticOptions { audio_seconds: Some(1.0), chunk_ms: 80, ..SyntheticOptions::default() };
    let inner = SyntheticEngine::new(options);
    let mut capabilities = inner.capabilities().clone();
    capabilities.word_timestamps = false;
    capabilities.codec = None;
    let engine = Arc::new(AsReference { inner, capabilities });
    let session = SessionOptions {
        limits: Limits { max_text_message_chars: s.max_text, max_config_message_chars: s.max_config },
        idle_timeout: Duration::from_secs_f64(s.idle_timeout),
        config_timeout: Duration::from_secs_f64(s.config_timeout),
        ..SessionOptions::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(serve(listener, engine, ServerConfig::new(session), std::future::pending()));
    addr
}

/// One observed frame; audio is compared by length only.
#[derive(Debug, PartialEq)]
enum Seen {
    Json(String),
    Binary(usize),
    Closed,
}

/// Send `messages` (pausing `gap` after each), then read until the server closes or
/// `session_dones` session.done frames (and `extra` more frames) have arrived.
async fn run(addr: SocketAddr, messages: &[String], gap: Duration, until_done: usize) -> Vec<Seen> {
    let url = format!("ws://{addr}/v1/audio/speech/stream");
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("connect");
    for m in messages {
        ws.send(Message::Text(m.clone().into())).await.expect("send");
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
    }
    let mut seen = Vec::new();
    let mut dones = 0;
    loop {
        let next = tokio::time::timeout(Duration::from_secs(20), ws.next()).await.expect("a frame within 20 s");
        match next {
            Some(Ok(Message::Text(t))) => {
                dones += usize::from(t.contains("\"type\":\"session.done\""));
                seen.push(Seen::Json(t.to_string()));
                if until_done > 0 && dones == until_done {
                    break;
                }
            }
            Some(Ok(Message::Binary(b))) => seen.push(Seen::Binary(b.len())),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                seen.push(Seen::Closed);
                break;
            }
            Some(Ok(_)) => {}
        }
    }
    seen
}

/// pydantic's error text links its own version; compare without it.
fn normalise(seen: Vec<Seen>) -> Vec<Seen> {
    seen.into_iter()
        .map(|s| match s {
            Seen::Json(t) => {
                let mut out = String::with_capacity(t.len());
                let mut rest = t.as_str();
                while let Some(i) = rest.find("errors.pydantic.dev/") {
                    out.push_str(&rest[..i]);
                    let after = &rest[i + "errors.pydantic.dev/".len()..];
                    let end = after.find('/').unwrap_or(after.len());
                    out.push_str("errors.pydantic.dev/VERSION");
                    rest = &after[end..];
                }
                out.push_str(rest);
                Seen::Json(out)
            }
            other => other,
        })
        .collect()
}

struct Case {
    name: &'static str,
    messages: Vec<String>,
    until_done: usize,
}

fn case(name: &'static str, messages: &[&str], until_done: usize) -> Case {
    Case { name, messages: messages.iter().map(|m| (*m).to_owned()).collect(), until_done }
}

async fn compare(settings: Settings, cases: Vec<Case>) {
    let reference = start_reference(settings).await;
    let ours = start_ours(settings).await;
    let mut failures = Vec::new();
    for c in cases {
        let gap = Duration::from_millis(20);
        let theirs = normalise(run(reference.addr, &c.messages, gap, c.until_done).await);
        let mine = normalise(run(ours, &c.messages, gap, c.until_done).await);
        assert!(!theirs.is_empty(), "case {}: the reference sent nothing", c.name);
        if theirs != mine {
            failures.push(format!("case {}:\n  reference: {theirs:?}\n  ours:      {mine:?}", c.name));
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

const TEXT: &str = r#"{"type": "input.text", "text": "Hello world. "}"#;
const DONE: &str = r#"{"type": "input.done"}"#;
const CLOSE: &str = r#"{"type": "session.close"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_frames_as_the_reference() {
    let cases = vec![
        case("non-streamed wav", &[r#"{"type": "session.config", "voice": "Vivian"}"#, TEXT, DONE, CLOSE], 0),
        case(
            "streamed pcm, two utterances",
            &[
                r#"{"type":"session.config","speaker":"Vivian","stream_audio":true,"response_format":"pcm"}"#,
                TEXT,
                DONE,
                r#"{"type":"input.text","text":"Second utterance. "}"#,
                DONE,
                CLOSE,
            ],
            0,
        ),
        case("pcm not streamed", &[r#"{"type":"session.config","response_format":"pcm"}"#, TEXT, DONE, CLOSE], 0),
        case(
            "config replaced between utterances, refused while buffered",
            &[
                r#"{"type":"session.config","voice":"Vivian"}"#,
                r#"{"type":"input.text","text":""}"#,
                r#"{"type":"session.config","voice":"Serena"}"#,
                DONE,
                r#"{"type":"session.config","voice":"Serena"}"#,
                TEXT,
                DONE,
                CLOSE,
            ],
            0,
        ),
        case(
            "errors after config are reported and the session goes on",
            &[
                r#"{"type":"session.config"}"#,
                r#"{"type":"unknown"}"#,
                r#"{"type":7}"#,
                r#"{"type":[1, {"a": null}]}"#,
                r#"{"text":"no type"}"#,
                r#"{"type":"input.text","text":123}"#,
                "{not json",
                "[1, 2]",
                "NaN",
                r#"{"type":"session.config","speed":5}"#,
                r#"{"type":"session.config","response_format":"aiff"}"#,
                r#"{"type":"session.config","task_type":"Foo","max_new_tokens":0}"#,
                r#"{"type":"session.config","voice":123}"#,
                r#"{"type":"session.config","output_mode":"codec_tokens"}"#,
                r#"{"type":"session.config","speaker_embedding":[1, "x", null]}"#,
                r#"{"type":"session.config","seed":"12","speed":"0.5","stream_audio":"yes"}"#,
                TEXT,
                DONE,
                CLOSE,
            ],
            0,
        ),
        case(
            "empty and whitespace flushes",
            &[r#"{"type":"session.config"}"#, DONE, r#"{"type":"input.text","text":" \u001c\u3000\n "}"#, DONE, CLOSE],
            0,
        ),
        case(
            "strip keeps inner text, unicode passes through",
            &[
                r#"{"type":"session.config"}"#,
                r#"{"type":"input.text","text":"\t Grüße, 世界! \"quoted\" \\ back\u001f "}"#,
                DONE,
                CLOSE,
            ],
            0,
        ),
        case(
            "idle cancel then a new utterance",
            &[r#"{"type":"session.config"}"#, TEXT, r#"{"type":"input.cancel"}"#, DONE, TEXT, DONE, CLOSE],
            0,
        ),
        case(
            "word timestamps without an aligner",
            &[
                r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","word_timestamps":true}"#,
                TEXT,
                DONE,
                CLOSE,
            ],
            0,
        ),
        case(
            "codec tokens without an adapter",
            &[
                r#"{"type":"session.config","output_mode":"codec_tokens","stream_audio":true,"response_format":"pcm"}"#,
                TEXT,
                DONE,
                CLOSE,
            ],
            0,
        ),
        case("fatal: text before config", &[TEXT], 0),
        case("fatal: cancel before config", &[r#"{"type":"input.cancel"}"#], 0),
        case("fatal: invalid JSON first", &["{"], 0),
        case(
            "fatal: invalid first config",
            &[r#"{"type":"session.config","stream_audio":true,"response_format":"wav"}"#],
            0,
        ),
        case(
            "fatal: multiple config errors",
            &[r#"{"type":"session.config","speed":0.1,"max_new_tokens":1.5,"task_type":null,"response_format":1}"#],
            0,
        ),
    ];
    compare(DEFAULTS, cases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_limits_as_the_reference() {
    let small = Settings { max_text: 32, max_config: 64, ..DEFAULTS };
    let long_text = format!(r#"{{"type": "input.text", "text": "{}"}}"#, "x".repeat(128));
    let big_config = format!(r#"{{"type": "session.config", "ref_audio": "{}"}}"#, "x".repeat(512));
    let cases = vec![
        Case {
            name: "text too large after config",
            messages: vec![r#"{"type": "session.config"}"#.into(), long_text, DONE.into(), CLOSE.into()],
            until_done: 0,
        },
        Case { name: "config too large", messages: vec![big_config], until_done: 0 },
        Case {
            name: "over both limits",
            messages: vec![
                r#"{"type": "session.config"}"#.into(),
                format!("{{\"t\": \"{}\"}}", "y".repeat(200)),
                CLOSE.into(),
            ],
            until_done: 0,
        },
    ];
    compare(small, cases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_timeouts_as_the_reference() {
    let short = Settings { idle_timeout: 0.3, config_timeout: 0.3, ..DEFAULTS };
    let cases = vec![
        case("config timeout", &[], 0),
        case("idle timeout after an utterance", &[r#"{"type": "session.config"}"#, TEXT, DONE], 0),
    ];
    compare(short, cases).await;
}
