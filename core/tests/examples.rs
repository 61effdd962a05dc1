//! The examples in `core/examples/`, built and run as a user would run them: each server on an
//! ephemeral loopback port, with a real WebSocket client (tungstenite's) checking the exact
//! protocol and that the audio is the synthetic engine's; the in-memory driver to completion.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};
use speechstream_core::engine::SynthesisRequest;
use speechstream_core::synthetic::{SyntheticEngine, SyntheticOptions};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The examples' executables, built once by cargo itself: `cargo test` builds examples but
/// `cargo test --test examples` does not, and a stale binary must not pass.
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let output = Command::new(env!("CARGO"))
            .args(["build", "--examples", "--message-format=json-render-diagnostics"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "building the examples failed");
        let stdout = String::from_utf8_lossy(&output.stdout);
        stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|message| message["target"]["kind"] == json!(["example"]))
            .filter_map(|message| {
                let name = message["target"]["name"].as_str()?.to_owned();
                Some((name, PathBuf::from(message["executable"].as_str()?)))
            })
            .collect()
    });
    built.get(name).unwrap_or_else(|| panic!("example {name} was not built")).clone()
}

/// A running example server, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(name: &str) -> Server {
        let mut child =
            Command::new(example(name)).arg("127.0.0.1:0").stdout(Stdio::piped()).spawn().expect("the example starts");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout).read_line(&mut line).expect("the example prints its address");
        let url = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected: {line}")).to_owned();
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connect(url: &str) -> WebSocket<TcpStream> {
    let addr = url.strip_prefix("ws://").and_then(|rest| rest.split('/').next()).expect("a ws:// URL");
    let socket = TcpStream::connect(addr).expect("connects");
    socket.set_read_timeout(Some(TIMEOUT)).expect("a read timeout");
    let (ws, _) = tungstenite::client(url, socket).expect("the WebSocket handshake");
    ws
}

fn read(ws: &mut WebSocket<TcpStream>) -> Message {
    loop {
        match ws.read().expect("a message") {
            Message::Ping(_) | Message::Pong(_) => continue,
            message => return message,
        }
    }
}

fn read_json(ws: &mut WebSocket<TcpStream>) -> Value {
    match read(ws) {
        Message::Text(text) => serde_json::from_str(&text).expect("JSON"),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

fn send(ws: &mut WebSocket<TcpStream>, message: Value) {
    ws.send(Message::text(message.to_string())).expect("send");
}

/// One utterance of `text`: the exact frames, in order, and the synthetic engine's audio.
fn utterance(ws: &mut WebSocket<TcpStream>, index: u64, text: &str) {
    let (first, rest) = text.split_at(text.len() / 2);
    send(ws, json!({"type": "input.text", "text": first}));
    send(ws, json!({"type": "input.text", "text": rest}));
    send(ws, json!({"type": "input.done"}));
    let start = json!({"type": "audio.start", "utterance_index": index, "sentence_index": 0,
                       "sentence_text": text, "format": "pcm", "sample_rate": 24000});
    assert_eq!(read_json(ws), start);
    let mut audio = Vec::new();
    let done = loop {
        match read(ws) {
            Message::Binary(bytes) => audio.extend_from_slice(&bytes),
            Message::Text(text) => break serde_json::from_str::<Value>(&text).expect("JSON"),
            other => panic!("unexpected {other:?}"),
        }
    };
    let expected_done = json!({"type": "audio.done", "utterance_index": index, "sentence_index": 0,
                               "total_bytes": audio.len(), "error": false});
    assert_eq!(done, expected_done);
    assert_eq!(read_json(ws), json!({"type": "session.done", "utterance_index": index, "total_sentences": 1}));
    let request = SynthesisRequest::new(text).with_stream(true);
    let expected = SyntheticEngine::new(SyntheticOptions::default()).render(&request).0;
    assert!(!audio.is_empty());
    assert!(
        audio == expected,
        "{} bytes of audio, not the synthetic engine's {} for {text:?}",
        audio.len(),
        expected.len()
    );
}

/// A client's whole session: two utterances on one connection, then `session.close`.
fn session(url: &str, client: usize) {
    let mut ws = connect(url);
    send(&mut ws, json!({"type": "session.config", "voice": "vivian", "stream_audio": true, "response_format": "pcm"}));
    utterance(&mut ws, 0, &format!("Hello from client {client}."));
    utterance(&mut ws, 1, "A second utterance, on the same connection, somewhat longer than the first one.");
    send(&mut ws, json!({"type": "session.close"}));
    match read(&mut ws) {
        Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::Normal),
        other => panic!("expected a close frame, got {other:?}"),
    }
}

/// Several clients at once, so each server's per-connection concurrency is exercised too.
fn serve_clients(name: &str) {
    let server = Server::start(name);
    std::thread::scope(|scope| {
        let url = server.url.as_str();
        let clients: Vec<_> = (0..3).map(|client| scope.spawn(move || session(url, client))).collect();
        for client in clients {
            if let Err(panic) = client.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

#[test]
fn blocking_server_speaks_the_protocol() {
    serve_clients("blocking_server");
}

#[test]
fn smol_server_speaks_the_protocol() {
    serve_clients("smol_server");
}

#[test]
fn servers_refuse_other_paths() {
    for name in ["blocking_server", "smol_server"] {
        let server = Server::start(name);
        let url = server.url.replace("/v1/audio/speech/stream", "/elsewhere");
        let addr = url.strip_prefix("ws://").and_then(|rest| rest.split('/').next()).expect("a ws:// URL");
        let socket = TcpStream::connect(addr).expect("connects");
        socket.set_read_timeout(Some(TIMEOUT)).expect("a read timeout");
        match tungstenite::client(url.as_str(), socket) {
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
                assert_eq!(response.status(), 404, "{name}")
            }
            other => panic!("{name}: expected a 404, got {:?}", other.map(|(_, response)| response.status())),
        }
    }
}

#[test]
fn in_memory_driver_runs_its_scenarios() {
    let output = Command::new(example("in_memory")).output().expect("the example runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(stdout, "ok: one utterance\nok: cancel after two chunks\nok: timeouts on a fake clock\n");
}
