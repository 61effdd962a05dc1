//! Scale-out as docs/operating.md describes it: two instances behind nginx (Debian's), WebSocket
//! upgrade proxied, one instance drained with SIGTERM in the middle of a run of utterances.
//!
//! What must hold: every utterance whose audio started is delivered whole (its bytes equal the
//! synthetic engine's render of the text) with `audio.done` and `session.done`; a session the
//! draining instance closes between utterances (1001 before any `audio.start`) is resumed on a
//! new connection through nginx, and every connection made after the drain began lands on the
//! other instance (proved by configuring it with that instance's model name, which the
//! draining one would reject); readiness through nginx stays 200; the drained instance exits
//! cleanly. And a speech POST that a full instance refuses with 503 is retried by nginx on the
//! other one (`proxy_next_upstream ... http_503 non_idempotent`: a POST is not idempotent, so
//! without the last word nginx hands the 503 to the client).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::engine::SynthesisRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::process::{get, hold_stream, metric, post_json, Server, TIMEOUT};

const CLIENTS: usize = 4;
const UTTERANCES: usize = 4;

struct Nginx {
    child: Child,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its workers; SIGKILL would orphan them.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn nginx_binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("nginx is not installed: run scripts/setup.sh (Debian package `nginx`)"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

/// docs/operating.md's configuration, with paths in a scratch directory and a loopback port.
fn config(dir: &Path, port: u16, upstreams: &[SocketAddr]) -> String {
    let d = dir.display();
    let servers: String =
        upstreams.iter().map(|a| format!("        server {a} max_fails=1 fail_timeout=10s;\n")).collect();
    format!(
        r#"daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    upstream speechstream {{
{servers}    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://speechstream;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $host;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
            proxy_buffering off;
            proxy_next_upstream error timeout http_503 non_idempotent;
        }}
    }}
}}
"#
    )
}

fn start_nginx(upstreams: &[SocketAddr]) -> (Nginx, SocketAddr) {
    let binary = nginx_binary();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("speechstream-nginx-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let port = free_port();
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, config(&dir, port, upstreams)).expect("write nginx.conf");
    let child = Command::new(binary)
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    let nginx = Nginx { child, dir };
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if std::net::TcpStream::connect(addr).is_ok() && get(addr, "/health", "").0 == 200 {
            return (nginx, addr);
        }
        let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "nginx did not come up on {addr}:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The PCM the synthetic engine makes for `text` (every instance makes the same).
fn expected_audio(text: &str) -> Vec<u8> {
    let request = SynthesisRequest::new(text).with_voice("vivian").with_stream(true);
    SyntheticEngine::new(SyntheticOptions::default()).render(&request).0
}

#[derive(Default)]
struct Tally {
    completed: AtomicUsize,
    /// Sessions closed by the draining instance before an utterance started, resumed elsewhere.
    resumed: AtomicUsize,
    after_drain_connections: AtomicUsize,
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

enum Outcome {
    Done(Vec<u8>),
    /// Closed before `audio.start`: nothing was lost, send it again on a new connection.
    ClosedBeforeStart,
}

async fn recv(ws: &mut Ws) -> Option<Message> {
    match tokio::time::timeout(TIMEOUT, ws.next()).await {
        Ok(Some(Ok(message))) => Some(message),
        Ok(_) => None,
        Err(_) => panic!("no message from the server in {TIMEOUT:?}"),
    }
}

async fn utterance(ws: &mut Ws, text: &str, index: u64) -> Result<Outcome, String> {
    for word in text.split(' ') {
        if ws.send(Message::text(json!({"type": "input.text", "text": format!("{word} ")}).to_string())).await.is_err()
        {
            return Ok(Outcome::ClosedBeforeStart);
        }
    }
    if ws.send(Message::text(r#"{"type":"input.done"}"#)).await.is_err() {
        return Ok(Outcome::ClosedBeforeStart);
    }
    let (mut started, mut audio, mut done) = (false, Vec::new(), None);
    loop {
        let message = match recv(ws).await {
            Some(Message::Text(text)) => text,
            Some(Message::Binary(bytes)) if started => {
                audio.extend_from_slice(&bytes);
                continue;
            }
            Some(Message::Binary(_)) => return Err("audio before audio.start".into()),
            Some(Message::Close(_)) | None if !started => return Ok(Outcome::ClosedBeforeStart),
            Some(Message::Close(frame)) => return Err(format!("closed mid-utterance {index} ({frame:?}): lost")),
            None => return Err(format!("connection ended mid-utterance {index}: lost")),
            Some(_) => continue,
        };
        let event: Value = serde_json::from_str(message.as_str()).map_err(|e| e.to_string())?;
        match event["type"].as_str() {
            Some("audio.start") => started = true,
            Some("audio.done") => done = Some(event),
            Some("session.done") => {
                let done = done.ok_or("session.done without audio.done")?;
                if done["error"] != false || done.get("cancelled").is_some() {
                    return Err(format!("utterance {index} failed: {done}"));
                }
                if done["total_bytes"] != audio.len() as u64 || event["total_sentences"] != 1 {
                    return Err(format!("utterance {index}: {done} {event} with {} bytes", audio.len()));
                }
                return Ok(Outcome::Done(audio));
            }
            _ => return Err(format!("unexpected {event}")),
        }
    }
}

async fn connect(addr: SocketAddr, model: Option<&str>) -> Ws {
    let url = format!("ws://{addr}/v1/audio/speech/stream");
    let (mut ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
        .await
        .expect("connect timed out")
        .expect("connect through nginx");
    let config = json!({"type": "session.config", "speaker": "vivian", "stream_audio": true,
                        "response_format": "pcm", "model": model});
    ws.send(Message::text(config.to_string())).await.expect("send config");
    ws
}

async fn client(addr: SocketAddr, n: usize, draining: Arc<AtomicBool>, tally: Arc<Tally>) -> Result<(), String> {
    let texts: Vec<String> =
        (0..UTTERANCES).map(|u| format!("Client {n} says utterance number {u} through the balancer.")).collect();
    let mut ws: Option<(Ws, u64)> = None;
    for text in &texts {
        loop {
            let (socket, index) = match ws.as_mut() {
                Some(open) => open,
                None => {
                    // After the drain began, say which instance must answer: the draining one
                    // serves another model name and would reject this config.
                    let after_drain = draining.load(Ordering::SeqCst);
                    if after_drain {
                        tally.after_drain_connections.fetch_add(1, Ordering::Relaxed);
                    }
                    let socket = connect(addr, after_drain.then_some("instance-b")).await;
                    ws.insert((socket, 0))
                }
            };
            match utterance(socket, text, *index).await? {
                Outcome::Done(audio) => {
                    if audio != expected_audio(text) {
                        return Err(format!("client {n}: audio of {text:?} differs from the engine's render"));
                    }
                    *index += 1;
                    tally.completed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Outcome::ClosedBeforeStart => {
                    tally.resumed.fetch_add(1, Ordering::Relaxed);
                    ws = None;
                }
            }
        }
    }
    if let Some((mut socket, _)) = ws {
        let _ = socket.send(Message::text(r#"{"type":"session.close"}"#)).await;
    }
    Ok(())
}

#[test]
fn two_instances_behind_nginx_one_drained_without_losing_an_utterance() {
    let pace = ["--synthetic-real-time-factor", "0.5", "--shutdown-grace", "20"];
    let mut a = Server::start(&[&pace[..], &["--served-model-name", "instance-a"]].concat());
    let mut b = Server::start(&[&pace[..], &["--served-model-name", "instance-b"]].concat());
    let (_nginx, addr) = start_nginx(&[a.addr, b.addr]);

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let draining = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let clients: Vec<_> =
        (0..CLIENTS).map(|n| runtime.spawn(client(addr, n, draining.clone(), tally.clone()))).collect();

    // Mid-run (each utterance takes about a second): drain instance A.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(tally.completed.load(Ordering::Relaxed) < CLIENTS * UTTERANCES, "the run ended before the drain");
    a.terminate();
    let deadline = Instant::now() + TIMEOUT;
    // Draining (or, if its sessions were all idle, already gone).
    while get(a.addr, "/ready", "").0 != 503 && !a.exited() {
        assert!(Instant::now() < deadline, "instance A never reported draining on /ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    draining.store(true, Ordering::SeqCst);
    // The load balancer's view: still ready (A's 503 sends it to B).
    for _ in 0..4 {
        assert_eq!(get(addr, "/ready", "").0, 200, "readiness through nginx during the drain");
    }

    for (n, handle) in clients.into_iter().enumerate() {
        let result = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(120), handle).await });
        match result {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(message))) => panic!("client {n}: {message}\nA: {:?}", a.log()),
            Ok(Err(e)) => panic!("client {n} panicked: {e}"),
            Err(_) => panic!("client {n} did not finish"),
        }
    }
    assert_eq!(tally.completed.load(Ordering::Relaxed), CLIENTS * UTTERANCES);
    let status = a.wait(TIMEOUT);
    assert!(status.success(), "drained instance exited with {status}; log: {:?}", a.log());
    assert!(
        !a.log().iter().any(|line| line.contains("still open after the grace")),
        "instance A had to drop connections: {:?}",
        a.log()
    );
    println!(
        "{} utterances delivered; {} resumed after the drain closed an idle session; {} connections after the drain",
        tally.completed.load(Ordering::Relaxed),
        tally.resumed.load(Ordering::Relaxed),
        tally.after_drain_connections.load(Ordering::Relaxed)
    );
    b.terminate();
    assert!(b.wait(TIMEOUT).success());
}

#[test]
fn a_post_refused_by_a_full_instance_is_retried_on_the_other() {
    // One stream fills an instance; the full one's stream lasts while the POSTs are sent.
    let full =
        Server::start(&["--max-streams", "1", "--synthetic-audio-seconds", "5", "--synthetic-real-time-factor", "1"]);
    let other = Server::start(&["--max-streams", "1"]);
    let (_nginx, addr) = start_nginx(&[full.addr, other.addr]);
    let holder = hold_stream(full.addr);
    assert_eq!(metric(full.addr, "speechstream_capacity_usage"), 1.0, "the held stream fills it");

    // Round robin offers one of any two requests in a row to the full instance first.
    let text = "A request one instance has no room for and the other serves.";
    let request = json!({"input": text, "voice": "vivian", "response_format": "pcm", "stream_format": "audio"});
    for n in 0..2 {
        let (status, head, body) = post_json(addr, "/v1/audio/speech", &request);
        assert_eq!(status, 200, "POST {n} through nginx: {head}{}", String::from_utf8_lossy(&body));
        assert!(body == expected_audio(text), "POST {n}: the audio differs from the engine's render");
    }
    assert_eq!(
        metric(full.addr, "speechstream_admission_refusals_total"),
        1.0,
        "the full instance should have refused exactly one of the POSTs (then retried on the other)"
    );
    drop(holder);
}
