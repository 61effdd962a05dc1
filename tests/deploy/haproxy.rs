//! Scale-out by headroom, as docs/operating.md describes it: three replicas on loopback behind
//! HAProxy (Debian's), `balance leastconn` with each replica's agent check (`--agent-port`)
//! setting its weight to the room it has left, `/ready` as the health check, and layer-7
//! retries for what a replica refuses with 503.
//!
//! What must hold:
//! - a paced load of WebSocket streams larger than any one replica holds (but below the three
//!   together) lands by headroom: replicas of unequal capacity (`--max-streams` 2, 4, 6) take
//!   streams in proportion, none refuses one, each replica's `speechstream_capacity_usage`
//!   agrees with the streams it serves; the same load with the agent check left out of the
//!   configuration (connection counts alone) is refused, so the agent is what spreads it;
//! - a speech POST refused with 503 by a full replica is retried by HAProxy on another one;
//! - a replica drained with SIGTERM mid-load finishes its streams whole, takes no new one (the
//!   agent says `drain`) and exits 0; every stream is delivered;
//! - a replica killed mid-load costs only its own streams in flight: their clients see the
//!   connection end promptly, a retry through HAProxy succeeds on another replica, and every
//!   other stream is delivered whole.
//!
//! The tests run one at a time: they pace their load against a handful of processes sharing
//! two slow cores.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::engine::SynthesisRequest;
use tokio::runtime::Runtime;
use tokio_tungstenite::tungstenite::Message;

use crate::process::{get, hold_stream, metric, post_json, Server, TIMEOUT};

/// Time between two new streams of a load.
const PACE: Duration = Duration::from_millis(200);

/// The HAProxy tests pace their load; running them side by side would blur it.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn haproxy_binary() -> PathBuf {
    ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy", "/usr/bin/haproxy"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("haproxy is not installed: run scripts/setup.sh (Debian package `haproxy`)"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

/// One speechstream replica: the synthetic engine, every utterance `seconds` long at real time,
/// at most `capacity` streams at once.
struct Replica {
    name: &'static str,
    capacity: u64,
    server: Server,
    agent: SocketAddr,
    wyoming: SocketAddr,
}

impl Replica {
    fn start(name: &'static str, capacity: u64, seconds: f64) -> Replica {
        let (capacity_arg, seconds_arg) = (capacity.to_string(), seconds.to_string());
        let server = Server::start(&[
            "--agent-port",
            "0",
            "--wyoming-port",
            "0",
            "--max-streams",
            &capacity_arg,
            "--synthetic-audio-seconds",
            &seconds_arg,
            "--synthetic-real-time-factor",
            "1",
            "--shutdown-grace",
            "20",
        ]);
        let (agent, wyoming) = (server.agent_addr(), server.wyoming_addr());
        Replica { name, capacity, server, agent, wyoming }
    }

    /// What the agent check answers now (one line).
    fn agent_says(&self) -> String {
        let mut stream = TcpStream::connect(self.agent).expect("connect to the agent port");
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut line = String::new();
        stream.read_to_string(&mut line).expect("agent line");
        line
    }

    fn metric(&self, name: &str) -> f64 {
        metric(self.server.addr, name)
    }
}

struct HaProxy {
    child: Child,
    dir: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
    /// HTTP and WebSocket.
    http: SocketAddr,
    /// Wyoming (TCP).
    wyoming: SocketAddr,
}

/// docs/operating.md's configuration, with loopback ports and the runtime API's socket in a
/// scratch directory; `agent: false` leaves the agent check out (connection counts alone).
fn config(dir: &Path, http: u16, wyoming: u16, replicas: &[&Replica], agent: bool) -> String {
    let d = dir.display();
    let agent_check = |replica: &Replica| {
        if agent {
            format!(" agent-check agent-port {}", replica.agent.port())
        } else {
            String::new()
        }
    };
    let http_servers: String =
        replicas.iter().map(|r| format!("    server {} {}{}\n", r.name, r.server.addr, agent_check(r))).collect();
    let wyoming_servers: String = replicas
        .iter()
        .map(|r| format!("    server {} {} port {}{}\n", r.name, r.wyoming, r.server.addr.port(), agent_check(r)))
        .collect();
    format!(
        r#"global
    log stderr format raw local0 info
    stats socket {d}/admin.sock level admin

defaults
    log global
    timeout connect 1s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout check 1s

frontend speech
    mode http
    bind 127.0.0.1:{http}
    option httplog
    default_backend speechstream

backend speechstream
    mode http
    balance leastconn
    option httpchk GET /ready
    http-check expect status 200
    option http-buffer-request
    retries 3
    retry-on conn-failure empty-response 503
    option redispatch 1
    http-response set-header X-Served-By %[srv_name]
    default-server check inter 100ms fall 1 rise 1 agent-inter 100ms weight 100
{http_servers}
frontend wyoming
    mode tcp
    bind 127.0.0.1:{wyoming}
    option tcplog
    default_backend speechstream_wyoming

backend speechstream_wyoming
    mode tcp
    balance leastconn
    option httpchk GET /ready
    http-check expect status 200
    default-server check inter 100ms fall 1 rise 1 agent-inter 100ms weight 100
{wyoming_servers}"#
    )
}

impl HaProxy {
    fn start(replicas: &[&Replica], agent: bool) -> HaProxy {
        let binary = haproxy_binary();
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("speechstream-haproxy-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let (http, wyoming) = (free_port(), free_port());
        let conf = dir.join("haproxy.cfg");
        std::fs::write(&conf, config(&dir, http, wyoming, replicas, agent)).expect("write haproxy.cfg");
        let check = Command::new(&binary).arg("-c").arg("-f").arg(&conf).output().expect("haproxy -c");
        assert!(
            check.status.success(),
            "haproxy rejects the configuration:\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let mut child = Command::new(&binary)
            .arg("-db")
            .arg("-f")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start haproxy");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let proxy =
            HaProxy { child, dir, log, http: ([127, 0, 0, 1], http).into(), wyoming: ([127, 0, 0, 1], wyoming).into() };
        let deadline = Instant::now() + TIMEOUT;
        while get(proxy.http, "/ready", "").0 != 200 {
            assert!(Instant::now() < deadline, "haproxy did not come up on {}:\n{}", proxy.http, proxy.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        // Let every server have its first health and agent checks.
        std::thread::sleep(Duration::from_millis(500));
        proxy
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// A command on HAProxy's runtime API; its answer.
    fn command(&self, command: &str) -> String {
        let mut socket = UnixStream::connect(self.dir.join("admin.sock")).expect("connect to the runtime API");
        socket.set_read_timeout(Some(TIMEOUT)).unwrap();
        writeln!(socket, "{command}").expect("send the command");
        let mut answer = String::new();
        socket.read_to_string(&mut answer).expect("runtime API answer");
        answer
    }
}

impl Drop for HaProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The PCM every replica makes for `text` when its utterances last `seconds`.
fn expected_audio(text: &str, seconds: f64) -> Vec<u8> {
    let options = SyntheticOptions { audio_seconds: Some(seconds), ..SyntheticOptions::default() };
    let request = SynthesisRequest::new(text).with_voice("vivian").with_stream(true);
    SyntheticEngine::new(options).render(&request).0
}

/// How one attempt at a stream ended.
#[derive(Clone, Debug, PartialEq)]
enum Ending {
    /// Delivered: `audio.done` without error, `session.done`, and the bytes are the render.
    Whole,
    /// Refused for lack of capacity (an `error` "Server overloaded: ...").
    Refused,
    /// Closed with a close frame before its audio started (a draining replica's 1001): nothing
    /// was lost, the client sends it again.
    ClosedBeforeStart,
    /// The connection ended or failed (no close frame): what a killed replica leaves.
    Broken(String),
    /// Anything else (wrong audio, an unexpected frame, a hang): never acceptable.
    Failed(String),
}

#[derive(Clone, Debug)]
struct Attempt {
    /// The replica HAProxy chose (`X-Served-By`).
    server: String,
    ending: Ending,
    opened: Instant,
    ended: Instant,
}

/// What the load looks like right now, for the test to act on mid-load.
#[derive(Default)]
struct Board {
    /// Streams whose audio is playing, per replica.
    playing: Mutex<BTreeMap<String, usize>>,
    started: AtomicUsize,
    ended: AtomicUsize,
}

impl Board {
    fn playing(&self, server: &str, change: isize) {
        let mut playing = self.playing.lock().unwrap();
        let count = playing.entry(server.to_owned()).or_default();
        *count = count.checked_add_signed(change).expect("playing count");
    }

    /// The replica with the most streams playing, and how many.
    fn busiest(&self) -> (String, usize) {
        let playing = self.playing.lock().unwrap();
        playing.iter().max_by_key(|(_, count)| **count).map(|(s, c)| (s.clone(), *c)).unwrap_or_default()
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One utterance on a new WebSocket session through the balancer (vLLM-Omni's protocol).
async fn attempt(addr: SocketAddr, text: &str, seconds: f64, board: &Board) -> Attempt {
    let opened = Instant::now();
    let url = format!("ws://{addr}/v1/audio/speech/stream");
    let (mut ws, response) = match tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url)).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => {
            let ending = Ending::Failed(format!("handshake through haproxy failed: {e}"));
            return Attempt { server: "-".into(), ending, opened, ended: Instant::now() };
        }
        Err(_) => {
            let ending = Ending::Failed("handshake through haproxy hung".into());
            return Attempt { server: "-".into(), ending, opened, ended: Instant::now() };
        }
    };
    let server =
        response.headers().get("x-served-by").and_then(|v| v.to_str().ok()).unwrap_or("(no X-Served-By)").to_owned();
    let ending = utterance(&mut ws, &server, text, seconds, board).await;
    board.ended.fetch_add(1, Ordering::Relaxed);
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
    Attempt { server, ending, opened, ended: Instant::now() }
}

async fn utterance(ws: &mut Ws, server: &str, text: &str, seconds: f64, board: &Board) -> Ending {
    let frames = [
        json!({"type": "session.config", "speaker": "vivian", "stream_audio": true, "response_format": "pcm"}),
        json!({"type": "input.text", "text": text}),
        json!({"type": "input.done"}),
    ];
    for frame in frames {
        if let Err(e) = ws.send(Message::text(frame.to_string())).await {
            return Ending::Broken(format!("send failed: {e}"));
        }
    }
    let (mut started, mut audio, mut done, mut refused, mut error) = (false, Vec::new(), None::<Value>, false, None);
    let ending = loop {
        let message = match tokio::time::timeout(TIMEOUT, ws.next()).await {
            Err(_) => break Ending::Failed(format!("nothing from the server in {TIMEOUT:?}: a hang")),
            Ok(None) => break Ending::Broken("connection ended".into()),
            Ok(Some(Err(e))) => break Ending::Broken(format!("connection failed: {e}")),
            Ok(Some(Ok(message))) => message,
        };
        let frame = match message {
            Message::Binary(bytes) if started => {
                audio.extend_from_slice(&bytes);
                continue;
            }
            Message::Binary(_) => break Ending::Failed("audio before audio.start".into()),
            Message::Close(_) if !started => break Ending::ClosedBeforeStart,
            Message::Close(frame) => break Ending::Failed(format!("closed mid-utterance ({frame:?})")),
            Message::Text(frame) => frame,
            _ => continue,
        };
        let event: Value = match serde_json::from_str(frame.as_str()) {
            Ok(event) => event,
            Err(e) => break Ending::Failed(format!("not JSON ({e}): {frame}")),
        };
        match event["type"].as_str() {
            Some("audio.start") => {
                started = true;
                board.started.fetch_add(1, Ordering::Relaxed);
                board.playing(server, 1);
            }
            Some("error") if event["message"].as_str().is_some_and(|m| m.contains("Server overloaded")) => {
                refused = true
            }
            Some("error") => error = Some(event),
            Some("audio.done") => done = Some(event),
            Some("session.done") if refused => break Ending::Refused,
            Some("session.done") => {
                let Some(done) = done.take() else { break Ending::Failed("session.done without audio.done".into()) };
                if done["error"] != false || error.is_some() {
                    break Ending::Failed(format!("{done} {error:?}"));
                }
                if done["total_bytes"] != audio.len() as u64 {
                    break Ending::Failed(format!("{done} after {} bytes", audio.len()));
                }
                if audio != expected_audio(text, seconds) {
                    break Ending::Failed("the audio differs from the engine's render".into());
                }
                break Ending::Whole;
            }
            _ => break Ending::Failed(format!("unexpected {event}")),
        }
    };
    if started {
        board.playing(server, -1);
    }
    ending
}

/// Stream `n`: one utterance; sent again (up to three times) when the connection broke or was
/// closed before its audio, if `resend`.
async fn stream(addr: SocketAddr, n: usize, seconds: f64, board: Arc<Board>, resend: bool) -> Vec<Attempt> {
    let text = format!("Stream number {n} goes through the balancer to whichever replica has room.");
    let mut attempts = Vec::new();
    loop {
        let attempt = attempt(addr, &text, seconds, &board).await;
        let again = resend && matches!(attempt.ending, Ending::Broken(_) | Ending::ClosedBeforeStart);
        attempts.push(attempt);
        if !again || attempts.len() == 3 {
            return attempts;
        }
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// `count` streams through `addr`, one every [`PACE`]; `between(i)` runs after stream `i` has been
/// opened. Every stream's attempts.
fn paced_load(
    runtime: &Runtime,
    addr: SocketAddr,
    count: usize,
    seconds: f64,
    board: &Arc<Board>,
    resend: bool,
    mut between: impl FnMut(usize),
) -> Vec<Vec<Attempt>> {
    let mut handles = Vec::new();
    for n in 0..count {
        handles.push(runtime.spawn(stream(addr, n, seconds, board.clone(), resend)));
        std::thread::sleep(PACE);
        between(n);
    }
    handles
        .into_iter()
        .enumerate()
        .map(|(n, handle)| {
            match runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), handle).await }) {
                Ok(Ok(attempts)) => attempts,
                Ok(Err(e)) => panic!("stream {n} panicked: {e}"),
                Err(_) => panic!("stream {n} did not finish"),
            }
        })
        .collect()
}

/// Attempts per replica and how they ended.
fn tally(streams: &[Vec<Attempt>]) -> BTreeMap<String, BTreeMap<&'static str, usize>> {
    let mut tally: BTreeMap<String, BTreeMap<&'static str, usize>> = BTreeMap::new();
    for attempt in streams.iter().flatten() {
        let kind = match attempt.ending {
            Ending::Whole => "whole",
            Ending::Refused => "refused",
            Ending::ClosedBeforeStart => "closed before start",
            Ending::Broken(_) => "broken",
            Ending::Failed(_) => "failed",
        };
        *tally.entry(attempt.server.clone()).or_default().entry(kind).or_default() += 1;
    }
    tally
}

fn wait_idle(replicas: &[&Replica]) {
    let deadline = Instant::now() + TIMEOUT;
    for replica in replicas {
        while replica.metric("speechstream_capacity_usage") != 0.0 {
            assert!(Instant::now() < deadline, "{} never went idle", replica.name);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn streams_land_by_headroom_and_a_full_replica_s_refusal_is_retried() {
    let _serial = one_at_a_time();
    const SECONDS: f64 = 5.0;
    const LOAD: usize = 10;
    let (a, b, c) = (Replica::start("a", 2, SECONDS), Replica::start("b", 4, SECONDS), Replica::start("c", 6, SECONDS));
    let replicas = [&a, &b, &c];
    let total: u64 = replicas.iter().map(|r| r.capacity).sum();
    assert!(LOAD as u64 > replicas.iter().map(|r| r.capacity).max().unwrap() && (LOAD as u64) < total);
    for replica in replicas {
        assert_eq!(replica.agent_says(), "up ready 100%\n", "{} idle", replica.name);
    }
    let runtime = runtime();

    // With the agent check: spread by the room each replica has.
    let proxy = HaProxy::start(&replicas, true);

    // Wyoming (TCP) goes through the same way.
    let mut wyoming = TcpStream::connect(proxy.wyoming).expect("connect to haproxy's Wyoming port");
    wyoming.set_read_timeout(Some(TIMEOUT)).unwrap();
    wyoming.write_all(b"{\"type\":\"describe\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(&wyoming).read_line(&mut line).expect("Wyoming answer");
    assert!(line.contains("\"info\""), "describe through haproxy: {line:?}\n{}", proxy.log());
    drop(wyoming);

    let board = Arc::new(Board::default());
    let mut usage = BTreeMap::new();
    let streams = paced_load(&runtime, proxy.http, LOAD, SECONDS, &board, false, |n| {
        if n + 1 < LOAD {
            return;
        }
        // Every stream opened: once all play, each replica's gauge says how many it serves.
        let deadline = Instant::now() + TIMEOUT;
        while board.started.load(Ordering::Relaxed) + board.ended.load(Ordering::Relaxed) < LOAD {
            assert!(Instant::now() < deadline, "the streams did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        for replica in replicas {
            usage.insert(replica.name.to_owned(), replica.metric("speechstream_capacity_usage"));
        }
        let ended = board.ended.load(Ordering::Relaxed);
        assert_eq!(ended, 0, "a stream ended before the last one started: pace the load faster");
    });
    let tally_with_agent = tally(&streams);
    let with_agent = format!("with the agent: {tally_with_agent:?}, usage {usage:?}\n{}", proxy.log());
    for attempt in streams.iter().flatten() {
        assert_eq!(attempt.ending, Ending::Whole, "{} on {}; {with_agent}", LOAD, attempt.server);
    }
    for replica in replicas {
        let landed = streams.iter().flatten().filter(|a| a.server == replica.name).count();
        assert!(
            landed >= 1 && landed as u64 <= replica.capacity,
            "{} streams on {} (capacity {}); {with_agent}",
            landed,
            replica.name,
            replica.capacity
        );
        let served = (usage[replica.name] * replica.capacity as f64).round() as usize;
        assert_eq!(served, landed, "{}'s capacity usage against the streams it served; {with_agent}", replica.name);
        assert_eq!(replica.metric("speechstream_admission_refusals_total"), 0.0, "{with_agent}");
    }
    println!("{with_agent}");
    drop(proxy);
    wait_idle(&replicas);

    // The same load, the same replicas, no agent check: least connections alone hands a third
    // of it to the replica that holds two.
    let proxy = HaProxy::start(&replicas, false);
    let board = Arc::new(Board::default());
    let streams = paced_load(&runtime, proxy.http, LOAD, SECONDS, &board, false, |_| {});
    let tally_without = tally(&streams);
    let without = format!("without the agent: {tally_without:?}\n{}", proxy.log());
    let refused = streams.iter().flatten().filter(|a| a.ending == Ending::Refused).count();
    assert!(refused >= 1, "least connections alone refused nothing; {without}");
    for attempt in streams.iter().flatten() {
        assert!(matches!(attempt.ending, Ending::Whole | Ending::Refused), "{attempt:?}; {without}");
    }
    let counted: f64 = replicas.iter().map(|r| r.metric("speechstream_admission_refusals_total")).sum();
    assert_eq!(counted, refused as f64, "the replicas' refusals against the clients'; {without}");
    println!("{without}");
    wait_idle(&replicas);

    // A speech POST sent to a full replica: refused with 503, retried on another. The runtime
    // API makes the full one least connections' first choice.
    let holders: Vec<TcpStream> = (0..a.capacity).map(|_| hold_stream(a.server.addr)).collect();
    assert_eq!(a.metric("speechstream_capacity_usage"), 1.0);
    for other in [&b, &c] {
        proxy.command(&format!("set weight speechstream/{} 1", other.name));
    }
    let refusals_before = a.metric("speechstream_admission_refusals_total");
    let text = "A request the full replica refuses and another one serves.";
    let request = json!({"input": text, "voice": "vivian", "response_format": "pcm", "stream_format": "audio"});
    let (status, head, body) = post_json(proxy.http, "/v1/audio/speech", &request);
    let context = format!("{head}\n{}", proxy.log());
    assert_eq!(status, 200, "{context}");
    assert_eq!(a.metric("speechstream_admission_refusals_total"), refusals_before + 1.0, "not sent to a; {context}");
    let served_by = head.lines().find_map(|line| line.strip_prefix("x-served-by: ")).unwrap_or("none");
    assert!(served_by == b.name || served_by == c.name, "the retried POST was served by {served_by}; {context}");
    assert!(body == expected_audio(text, SECONDS), "the retried POST's audio differs from the render");
    drop(holders);
}

#[test]
fn a_replica_drained_mid_load_finishes_its_streams_and_takes_no_new_one() {
    let _serial = one_at_a_time();
    const SECONDS: f64 = 4.0;
    const LOAD: usize = 9;
    let mut replicas =
        [Replica::start("a", 4, SECONDS), Replica::start("b", 4, SECONDS), Replica::start("c", 4, SECONDS)];
    let proxy = HaProxy::start(&replicas.iter().collect::<Vec<_>>(), true);
    let runtime = runtime();
    let board = Arc::new(Board::default());
    let mut drained: Option<(usize, Instant, usize)> = None;
    let streams = paced_load(&runtime, proxy.http, LOAD, SECONDS, &board, true, |n| {
        if n != 3 {
            return;
        }
        let (name, playing) = board.busiest();
        assert!(playing >= 1, "no stream playing after four were opened");
        let index = replicas.iter().position(|r| r.name == name).expect("a replica");
        let replica = &replicas[index];
        replica.server.terminate();
        let deadline = Instant::now() + TIMEOUT;
        while get(replica.server.addr, "/ready", "").0 != 503 {
            assert!(Instant::now() < deadline, "{} never reported draining on /ready", replica.name);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(replica.agent_says(), "drain\n", "the agent of the draining replica");
        drained = Some((index, Instant::now(), playing));
    });
    let (index, since, playing) = drained.expect("drained");
    let replica = &mut replicas[index];
    let report = format!("{} drained with {playing} playing: {:?}\n{}", replica.name, tally(&streams), proxy.log());
    for (n, attempts) in streams.iter().enumerate() {
        assert_eq!(attempts.last().expect("an attempt").ending, Ending::Whole, "stream {n}: {attempts:?}; {report}");
        for attempt in attempts {
            assert!(
                matches!(attempt.ending, Ending::Whole | Ending::ClosedBeforeStart),
                "stream {n}: {attempt:?}; {report}"
            );
            if attempt.opened >= since {
                assert_ne!(attempt.server, replica.name, "stream {n} opened after the drain began; {report}");
            }
        }
    }
    let finished_while_draining = streams
        .iter()
        .flatten()
        .filter(|a| a.server == replica.name && a.ending == Ending::Whole && a.ended > since)
        .count();
    assert!(finished_while_draining >= playing, "{finished_while_draining} finished on the drained one; {report}");
    let status = replica.server.wait(TIMEOUT);
    assert!(status.success(), "the drained replica exited with {status}; log: {:?}", replica.server.log());
    assert!(
        !replica.server.log().iter().any(|line| line.contains("still open after the grace")),
        "the drained replica had to drop connections: {:?}",
        replica.server.log()
    );
    println!("{report}");
}

#[test]
fn a_replica_killed_mid_load_costs_only_its_own_streams() {
    let _serial = one_at_a_time();
    const SECONDS: f64 = 4.0;
    const LOAD: usize = 9;
    let mut replicas =
        [Replica::start("a", 6, SECONDS), Replica::start("b", 6, SECONDS), Replica::start("c", 6, SECONDS)];
    let proxy = HaProxy::start(&replicas.iter().collect::<Vec<_>>(), true);
    let runtime = runtime();
    let board = Arc::new(Board::default());
    let mut killed: Option<(String, Instant, usize)> = None;
    let streams = paced_load(&runtime, proxy.http, LOAD, SECONDS, &board, true, |n| {
        if n != 4 {
            return;
        }
        let (name, playing) = board.busiest();
        assert!(playing >= 1, "no stream playing after five were opened");
        replicas.iter_mut().find(|r| r.name == name).expect("a replica").server.kill();
        killed = Some((name, Instant::now(), playing));
    });
    let (name, at, playing) = killed.expect("killed");
    let report = format!("{name} killed with {playing} playing: {:?}\n{}", tally(&streams), proxy.log());
    let mut lost = 0;
    for (n, attempts) in streams.iter().enumerate() {
        let (last, first) = (attempts.last().expect("an attempt"), &attempts[0]);
        assert_eq!(last.ending, Ending::Whole, "stream {n} in the end: {attempts:?}; {report}");
        assert!(last.server != name || last.ended < at, "stream {n} whole on the killed replica; {report}");
        if attempts.len() == 1 {
            continue;
        }
        // Only a stream the killed replica was serving fails, promptly, and once.
        lost += 1;
        assert_eq!(attempts.len(), 2, "stream {n}: {attempts:?}; {report}");
        assert!(matches!(first.ending, Ending::Broken(_)), "stream {n}: {attempts:?}; {report}");
        assert_eq!(first.server, name, "stream {n} failed on a replica that was not killed; {report}");
        assert!(first.opened < at, "stream {n}; {report}");
        assert!(first.ended < at + Duration::from_secs(5), "stream {n} noticed the kill late: {attempts:?}");
    }
    assert!(lost >= playing, "{lost} streams lost with {playing} playing on the killed replica; {report}");
    for attempt in streams.iter().flatten().filter(|a| a.opened > at) {
        assert_ne!(attempt.server, name, "a stream opened after the kill; {report}");
    }
    println!("{report}");
}
