//! Issue 36: sockets that send nothing, trickle a request head, or idle between keep-alive
//! requests take no connection slot and no socket a new client or a probe needs; the
//! descriptor limit is raised at start and sets the socket budget; one address can be capped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::session::SessionOptions;
use speechstream_transports::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::peers::{exchange, metric, serve_clients_at_once, status_and_json};
use crate::process;
use crate::support::{TestServer, TIMEOUT};

fn server(configure: impl FnOnce(&mut ServerConfig)) -> impl std::future::Future<Output = TestServer> {
    let mut config = ServerConfig::new(SessionOptions::default());
    // Long enough that nothing here is closed for silence unless a test says so.
    config.first_byte_timeout = TIMEOUT * 2;
    config.header_timeout = TIMEOUT * 2;
    configure(&mut config);
    TestServer::start_with(Arc::new(SyntheticEngine::new(SyntheticOptions::default())), config)
}

/// `n` connections that send nothing.
async fn silent(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    // These tests hold a few hundred sockets at once, both ends in this process for most of
    // them, beside the other tests of the binary: not the 1024 a runner may start us with.
    speechstream_transports::raise_descriptor_limit();
    let mut sockets = Vec::new();
    for _ in 0..n {
        sockets.push(TcpStream::connect(addr).await.expect("connect"));
    }
    sockets
}

/// `n` connections that send the start of a request head and stop.
async fn trickling(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut sockets = silent(addr, n).await;
    for socket in &mut sockets {
        socket.write_all(b"GET /health HTTP/1.1\r\nHost: loc").await.expect("write");
    }
    sockets
}

/// The probes an operator (or a liveness check) relies on all answer 200.
async fn probes_answer(server: &TestServer) {
    for path in ["/health", "/ready", "/metrics"] {
        assert_eq!(server.http("GET", path).await.0, 200, "{path}");
    }
}

/// The server closed this socket (without an answer).
async fn closed_unanswered(socket: &mut TcpStream) {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(TIMEOUT, socket.read_to_end(&mut rest)).await;
    // A reset is a close too.
    if let Ok(Ok(_)) = read {
        assert!(rest.is_empty(), "answered: {:?}", String::from_utf8_lossy(&rest));
    } else {
        assert!(read.is_ok(), "still open");
    }
}

// With --max-connections N, N silent sockets used to take every slot the moment they were
// accepted: every new WebSocket was closed with 1013 for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_trickling_sockets_hold_no_connection_slot() {
    const SLOTS: usize = 4;
    let server = server(|config| config.max_connections = Some(SLOTS)).await;
    let _silent = silent(server.addr, SLOTS).await;
    let _trickling = trickling(server.addr, SLOTS).await;
    serve_clients_at_once(&server, SLOTS).await;
    probes_answer(&server).await;
    server.shutdown().await;
}

// Past the socket budget (here --max-connections 2 + 64), silent sockets used to have every
// new connection turned away at accept: /health, /metrics and every handshake got 503 until
// they timed out. A new socket now has the oldest spare one closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_past_the_socket_budget_leaves_probes_and_speech_answered() {
    let server = server(|config| config.max_connections = Some(2)).await;
    let budget = metric(&server, "speechstream_sockets_max").await as usize;
    assert_eq!(budget, 2 + 64);
    let mut flood = silent(server.addr, budget + 30).await;
    let _trickling = trickling(server.addr, 20).await;
    probes_answer(&server).await;
    serve_clients_at_once(&server, 2).await;
    // The oldest made room; the budget held.
    closed_unanswered(&mut flood[0]).await;
    assert!(metric(&server, "speechstream_sockets_open").await as usize <= budget);
    let evicted = metric(&server, "speechstream_sockets_closed_total{reason=\"evicted\"}").await as usize;
    assert!(evicted >= budget + 30 + 20 - budget, "{evicted} closed to make room");
    assert_eq!(metric(&server, "speechstream_connections_refused_total{reason=\"sockets\"}").await, 0);
    server.shutdown().await;
}

// A silent socket used to be held for the whole header timeout (30 s by default); it is
// closed at the first-byte deadline now, while one that has started its request gets the
// header timeout to finish it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_are_closed_at_the_first_byte_deadline() {
    let server = server(|config| config.first_byte_timeout = Duration::from_secs(1)).await;
    let mut silent = silent(server.addr, 10).await;
    let mut started = trickling(server.addr, 1).await.remove(0);
    for socket in &mut silent {
        closed_unanswered(socket).await;
    }
    assert_eq!(metric(&server, "speechstream_sockets_closed_total{reason=\"first_byte_timeout\"}").await, 10);
    started.write_all(b"alhost\r\nConnection: close\r\n\r\n").await.expect("write");
    let mut response = Vec::new();
    started.read_to_end(&mut response).await.expect("read");
    assert!(String::from_utf8_lossy(&response).starts_with("HTTP/1.1 200"), "{response:?}");
    server.shutdown().await;
}

/// Send one keep-alive request and read its whole (small, sized) response, leaving the
/// connection open and idle.
async fn one_keep_alive_request(addr: SocketAddr) -> TcpStream {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    socket.write_all(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").await.expect("write");
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(TIMEOUT, socket.read(&mut chunk)).await.expect("response").expect("read");
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&response));
        response.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&response);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse().ok())
                .expect("content-length");
            if body.len() >= length {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                return socket;
            }
        }
    }
}

// Keep-alive connections idle after one request used to hold their slots until the header
// timeout; a new request now takes the slot of the oldest idle one, as nginx reuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_give_their_slots_to_new_work() {
    let server = server(|config| config.max_connections = Some(2)).await;
    let mut idle = vec![one_keep_alive_request(server.addr).await, one_keep_alive_request(server.addr).await];
    serve_clients_at_once(&server, 2).await;
    for socket in &mut idle {
        closed_unanswered(socket).await;
    }
    server.shutdown().await;
}

// When every socket of the budget is busy (here sessions), there is nothing to close: a new
// connection still gets the fixed 503 at accept, nothing read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_busy_sockets_turns_new_ones_away() {
    let server = server(|config| {
        config.max_connections = Some(3);
        config.max_sockets = Some(3);
    })
    .await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let mut client = server.connect().await;
        client.send(json!({"type": "session.config"})).await;
        sessions.push(client);
    }
    for _ in 0..5 {
        let (status, body) = status_and_json(&exchange(&server, b"").await);
        assert_eq!(
            (status, &body["error"]["message"]),
            (503, &json!("Server has too many open connections; retry later"))
        );
    }
    drop(sessions);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while crate::peers::try_metric(&server, "speechstream_connections_refused_total{reason=\"sockets\"}")
        .await
        .is_none()
    {
        assert!(tokio::time::Instant::now() < deadline, "sockets never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(metric(&server, "speechstream_connections_refused_total{reason=\"sockets\"}").await >= 5);
    server.shutdown().await;
}

async fn connect_from(local: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(format!("{local}:0").parse().expect("address")).expect("bind");
    socket.connect(server).await.expect("connect")
}

// --max-connections-per-ip: one address holds at most N sockets; past it a new one from that
// address gets a fixed 429, while other addresses are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_is_held_to_its_share() {
    let server = server(|config| config.max_connections_per_ip = Some(3)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from("127.0.0.2", server.addr).await);
    }
    let mut fourth = connect_from("127.0.0.2", server.addr).await;
    let mut response = Vec::new();
    tokio::time::timeout(TIMEOUT, fourth.read_to_end(&mut response)).await.expect("answered").expect("read");
    let (status, body) = status_and_json(&String::from_utf8_lossy(&response));
    assert_eq!(
        (status, &body["error"]["message"]),
        (429, &json!("Too many open connections from your address; retry later"))
    );
    assert_eq!(metric(&server, "speechstream_connections_refused_total{reason=\"peer\"}").await, 1);
    // Another address (the scrapes' and these clients', 127.0.0.1) is served.
    probes_answer(&server).await;
    serve_clients_at_once(&server, 3).await;
    // Once one of its sockets has gone, the address is served again.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let mut socket = connect_from("127.0.0.2", server.addr).await;
        socket.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.expect("write");
        let mut response = Vec::new();
        // Still at its share, the server answers 429 without reading the request, and closing
        // with it unread may reset the connection under the reply: try again.
        let read = socket.read_to_end(&mut response).await;
        if read.is_ok() && String::from_utf8_lossy(&response).starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the address never got its socket back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shutdown().await;
}

/// A value of the child's Prometheus exposition.
fn child_metric(addr: SocketAddr, name: &str) -> u64 {
    let (status, body) = process::get(addr, "/metrics", "");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

// The server used to keep the soft descriptor limit it was started with (1024 under most
// shells and service managers) and cap itself at 960 sockets; it raises the soft limit to the
// hard one now, logs both, and derives the budget from it. Its listen backlog follows the
// kernel's somaxconn instead of tokio's fixed 1024.
#[test]
fn the_descriptor_limit_is_raised_and_sets_the_socket_budget() {
    let server = process::Server::start_under(&["prlimit", "--nofile=128:512", "--"], "synthetic", &[]);
    assert_eq!(child_metric(server.addr, "speechstream_sockets_max"), 512 - 64);
    let log = server.log();
    assert!(log.iter().any(|line| line.contains("descriptor limit") && line.contains("soft=512 hard=512")), "{log:?}");
    assert!(log.iter().any(|line| line.contains("socket budget") && line.contains("max_sockets=448")), "{log:?}");
    let somaxconn: u32 =
        std::fs::read_to_string("/proc/sys/net/core/somaxconn").expect("somaxconn").trim().parse().unwrap();
    let ss = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{}", server.addr.port())])
        .output()
        .expect("ss (iproute2)");
    let listing = String::from_utf8_lossy(&ss.stdout);
    // State, Recv-Q, Send-Q (for a listener: its backlog), ...
    let backlog: u32 =
        listing.split_whitespace().nth(2).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{listing:?}"));
    assert_eq!(backlog, somaxconn);
}

// With a descriptor limit of 128 (soft and hard), the budget is 64 sockets: 150 silent ones
// used to get every probe and client a 503 at accept; they make room now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_descriptor_limit_still_answers_probes_and_speech() {
    let server = process::Server::start_under(&["prlimit", "--nofile=128:128", "--"], "synthetic", &[]);
    let addr = server.addr;
    let _flood = silent(addr, 150).await;
    let (status, _) = tokio::task::spawn_blocking(move || process::get(addr, "/health", "")).await.unwrap();
    assert_eq!(status, 200);
    let url = format!("ws://{addr}/v1/audio/speech/stream");
    let (mut ws, _) =
        tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url)).await.unwrap().expect("connect");
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    for message in [json!({"type": "session.config"}), json!({"type": "input.done"})] {
        ws.send(Message::text(message.to_string())).await.expect("send");
    }
    let reply = tokio::time::timeout(TIMEOUT, ws.next()).await.unwrap().expect("a frame").expect("a frame");
    let reply: serde_json::Value = serde_json::from_str(reply.to_text().unwrap()).unwrap();
    assert_eq!(reply, json!({"type": "session.done", "utterance_index": 0, "total_sentences": 0}));
    let max = tokio::task::spawn_blocking(move || child_metric(addr, "speechstream_sockets_max")).await.unwrap();
    assert_eq!(max, 128 - 64);
}
