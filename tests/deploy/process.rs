//! `speechstream serve` as a child process on a loopback port it picks itself, and the clients the
//! tests speak to a server with (HTTP, one WebSocket utterance).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The repository root (where `.venv-clients` lives).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub struct Server {
    pub addr: SocketAddr,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// Start `speechstream serve --port 0 ARGS...` with the synthetic engine and wait until it
    /// listens.
    pub fn start(args: &[&str]) -> Server {
        Server::start_engine("synthetic", args)
    }

    /// The same with the engine named.
    pub fn start_engine(engine: &str, args: &[&str]) -> Server {
        Server::start_under(&[], engine, args)
    }

    /// The same, run by a launcher (`wrapper` then the binary's path, e.g. `prlimit
    /// --nofile=128:128`).
    pub fn start_under(wrapper: &[&str], engine: &str, args: &[&str]) -> Server {
        let binary = env!("CARGO_BIN_EXE_speechstream");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let mut child = command
            .args(["serve", "--engine", engine, "--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start speechstream");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (found_tx, found) = std::sync::mpsc::channel();
        let lines = log.clone();
        // Keep reading the log so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains(": listening addr=") {
                    if let Some(addr) = line.split("addr=").nth(1).and_then(|rest| rest.split_whitespace().next()) {
                        let _ = found_tx.send(addr.to_owned());
                    }
                }
                lines.lock().unwrap().push(line);
            }
        });
        let addr = match found.recv_timeout(TIMEOUT) {
            Ok(addr) => addr.parse().expect("listening address"),
            Err(_) => panic!("speechstream did not start: {:?}", log.lock().unwrap()),
        };
        Server { addr, child, log }
    }

    /// Where it serves Wyoming (started with `--wyoming-port 0`).
    pub fn wyoming_addr(&self) -> SocketAddr {
        self.listening("wyoming")
    }

    /// Where it answers HAProxy's agent check (started with `--agent-port 0`).
    pub fn agent_addr(&self) -> SocketAddr {
        self.listening("agent-check")
    }

    /// The address of the `{what} listening addr=...` line of its log, once it is there.
    fn listening(&self, what: &str) -> SocketAddr {
        let marker = format!("{what} listening");
        let deadline = Instant::now() + TIMEOUT;
        let line = loop {
            if let Some(line) = self.log().into_iter().find(|line| line.contains(&marker)) {
                break line;
            }
            assert!(Instant::now() < deadline, "no {what} listener in the log: {:?}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        };
        let addr = line.split("addr=").nth(1).and_then(|rest| rest.split_whitespace().next()).expect("address");
        addr.parse().unwrap_or_else(|e| panic!("{what} address {addr}: {e}"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM: the server drains and exits.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().expect("kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// SIGKILL: the process ends at once, its connections with it; waits for it.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill -KILL");
        let _ = self.child.wait();
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Wait for the process to exit; its status.
    pub fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit; log: {:?}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking HTTP/1.1 GET; the status and body (bodies here are small and not chunked).
/// Status 0 when the exchange failed (refused, reset: e.g. a server that just exited).
pub fn get(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let exchange = || -> std::io::Result<String> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    };
    let Ok(response) = exchange() else { return (0, String::new()) };
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, body.to_owned())
}

/// The Python of `.venv-clients`, or a clear failure saying how to make it.
pub fn client_python() -> PathBuf {
    let python = root().join(".venv-clients/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup.sh (or scripts/setup-clients.sh) to create the client venv",
        python.display()
    );
    python
}

/// One HTTP/1.1 POST of `body` (JSON); the status, the head and the body (de-chunked).
pub fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> (u16, String, Vec<u8>) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(300))).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("response");
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut body = response[split..].to_vec();
    if head.to_lowercase().contains("transfer-encoding: chunked") {
        let (mut out, mut rest) = (Vec::new(), body.as_slice());
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        body = out;
    }
    (status, head, body)
}

/// One sample's value from a server's `/metrics` (a family without labels).
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (status, body) = get(addr, "/metrics", "");
    assert_eq!(status, 200, "/metrics on {addr}");
    body.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics of {addr}:\n{body}"))
}

/// A streamed speech POST straight to `addr`, returned once its audio has started: it holds one
/// of the server's streams until the socket is dropped (or its utterance ends).
pub fn hold_stream(addr: SocketAddr) -> TcpStream {
    let body = serde_json::json!({"input": "Holding a stream.", "voice": "vivian", "response_format": "pcm",
                                  "stream_format": "audio"})
    .to_string();
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    write!(
        stream,
        "POST /v1/audio/speech HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // A streamed response's head comes with its first audio.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("response head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "holding a stream on {addr}: {head}");
    stream
}

/// What one WebSocket utterance brought back: its JSON frames up to `session.done` (or the
/// server's close), its audio in order (binary frames and `audio.chunk`'s base64 alike) and how
/// many frames carried audio.
pub struct Utterance {
    pub frames: Vec<serde_json::Value>,
    pub audio: Vec<u8>,
    pub chunks: usize,
}

/// One utterance on a new connection to `addr`'s streaming endpoint: `config`, each of `parts` as
/// an `input.text`, then `input.done`. A frame that takes longer than four [`TIMEOUT`]s fails.
pub async fn utterance(addr: SocketAddr, config: serde_json::Value, parts: &[&str]) -> Utterance {
    use base64::Engine as _;
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let url = format!("ws://{addr}/v1/audio/speech/stream");
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("connect");
    let texts = parts.iter().map(|text| serde_json::json!({"type": "input.text", "text": text}));
    for message in std::iter::once(config).chain(texts).chain([serde_json::json!({"type": "input.done"})]) {
        ws.send(Message::Text(message.to_string().into())).await.expect("send");
    }
    let mut out = Utterance { frames: Vec::new(), audio: Vec::new(), chunks: 0 };
    loop {
        let message = tokio::time::timeout(TIMEOUT * 4, ws.next()).await.expect("timed out");
        let Some(Ok(message)) = message else { return out };
        match message {
            Message::Binary(b) => {
                out.audio.extend_from_slice(&b);
                out.chunks += 1;
            }
            Message::Text(t) => {
                let frame: serde_json::Value = serde_json::from_str(&t).expect("json");
                if frame["type"] == "audio.chunk" {
                    let b64 = frame["audio_b64"].as_str().unwrap_or_default();
                    out.audio.extend(base64::engine::general_purpose::STANDARD.decode(b64).expect("base64"));
                    out.chunks += 1;
                }
                let done = frame["type"] == "session.done";
                out.frames.push(frame);
                if done {
                    return out;
                }
            }
            Message::Close(_) => return out,
            _ => {}
        }
    }
}
