//! The autoscaling query of deploy/kubernetes, evaluated by a real Prometheus (Debian's) scraping
//! a real server under load.
//!
//! The server runs the synthetic engine with `--max-streams 4` and 20-second utterances paced in
//! real time; Prometheus scrapes it every second, its scrape job carrying the labels the query
//! selects on (`job` from the job name, the others as target labels), as Prometheus Operator
//! attaches them to a ServiceMonitor's targets. With 3 streams speaking, the KEDA ScaledObject's
//! query, read from the rendered manifests and evaluated exactly as written through
//! `/api/v1/query`, must return 0.75 (3 of 4), which at the ScaledObject's threshold asks for
//! ceil(0.75 / 0.7) = 2 replicas; once the streams are cancelled, 0. The HPA alternative's metric
//! (the per-pod gauge prometheus-adapter serves) must be in /metrics and in Prometheus with the
//! same value.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;

use crate::kubernetes::{keda_trigger, render, selector, USAGE_METRIC};
use crate::process::{get, Server, TIMEOUT};

const MAX_STREAMS: usize = 4;
const STREAMS: usize = 3;

struct Prometheus {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query through the HTTP API: each series' labels and value.
    fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let (status, body) = http_get(self.addr, &format!("/api/v1/query?query={}", url_encode(promql)));
        assert_eq!(status, 200, "query {promql:?}: {body}");
        let reply: Value = serde_json::from_str(&body).expect("Prometheus's JSON");
        assert_eq!(reply["status"], "success", "query {promql:?}: {reply}");
        assert_eq!(reply["data"]["resultType"], "vector", "query {promql:?}: {reply}");
        reply["data"]["result"]
            .as_array()
            .expect("result")
            .iter()
            .map(|series| {
                let labels = series["metric"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned())).collect())
                    .unwrap_or_default();
                let value = series["value"][1].as_str().and_then(|v| v.parse().ok()).expect("a sample value");
                (labels, value)
            })
            .collect()
    }

    /// Wait until `promql` returns exactly one series whose value is `want`; its value.
    fn wait_for(&self, promql: &str, want: f64, timeout: Duration) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let result = self.query(promql);
            if let [(_, value)] = result.as_slice() {
                if *value == want {
                    return *value;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{promql:?} never returned {want} in {timeout:?}; last: {result:?}\nPrometheus: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn prometheus_binary() -> PathBuf {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("prometheus is not installed: run scripts/setup.sh (Debian package `prometheus`)"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

/// Prometheus scraping `target` every second as job `job`, its samples labelled `labels`.
fn start_prometheus(target: SocketAddr, job: &str, labels: &BTreeMap<String, String>) -> Prometheus {
    let binary = prometheus_binary();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("speechstream-prometheus-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let target_labels: String = labels.iter().map(|(k, v)| format!("          {k}: {v:?}\n")).collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
         - job_name: {job:?}\n    static_configs:\n      - targets: [\"{target}\"]\n        labels:\n{target_labels}"
    );
    std::fs::write(dir.join("prometheus.yml"), config).expect("write prometheus.yml");
    let port = free_port();
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
    let child = Command::new(binary)
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let prometheus = Prometheus { child, dir, addr: ([127, 0, 0, 1], port).into() };
    let deadline = Instant::now() + TIMEOUT;
    while http_get(prometheus.addr, "/-/ready").0 != 200 {
        assert!(Instant::now() < deadline, "Prometheus did not become ready:\n{}", prometheus.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    prometheus
}

/// A query string's value, percent-encoded.
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A blocking HTTP/1.1 GET that reads chunked bodies too (Go's server chunks large replies).
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr) else { return (0, String::new()) };
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    if write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return (0, String::new());
    }
    let mut response = Vec::new();
    if stream.read_to_end(&mut response).is_err() {
        return (0, String::new());
    }
    let Some(split) = response.windows(4).position(|w| w == b"\r\n\r\n") else { return (0, String::new()) };
    let head = String::from_utf8_lossy(&response[..split]).to_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut body = &response[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return (status, String::from_utf8_lossy(body).into_owned());
    }
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 || body.len() < eol + 2 + size {
            break;
        }
        out.extend_from_slice(&body[eol + 2..eol + 2 + size]);
        body = &body[(eol + 4 + size).min(body.len())..];
    }
    (status, String::from_utf8_lossy(&out).into_owned())
}

/// One client: a session that starts a 20-second utterance, says when its audio started, keeps
/// reading it until `stop` turns true, then cancels it and closes.
async fn stream(
    addr: SocketAddr,
    n: usize,
    started: mpsc::UnboundedSender<usize>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let url = format!("ws://{addr}/v1/audio/speech/stream");
    let (mut ws, _) = tokio::time::timeout(TIMEOUT, tokio_tungstenite::connect_async(url))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| format!("connect: {e}"))?;
    let config = json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"});
    let text = json!({"type": "input.text", "text": format!("Stream {n} keeps one of the server's slots busy.")});
    for message in [config.to_string(), text.to_string(), r#"{"type":"input.done"}"#.to_owned()] {
        ws.send(Message::text(message)).await.map_err(|e| format!("send: {e}"))?;
    }
    let mut audio_started = false;
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            message = tokio::time::timeout(TIMEOUT, ws.next()) => match message {
                Ok(Some(Ok(Message::Text(text)))) => {
                    let event: Value = serde_json::from_str(text.as_str()).map_err(|e| e.to_string())?;
                    match event["type"].as_str() {
                        Some("audio.start") if !audio_started => {
                            audio_started = true;
                            let _ = started.send(n);
                        }
                        Some("audio.start") | Some("audio.chunk") => {}
                        _ => return Err(format!("stream {n}: unexpected {event} (20 s utterances should still run)")),
                    }
                }
                Ok(Some(Ok(_))) => {}
                other => return Err(format!("stream {n} ended early: {other:?}")),
            },
        }
    }
    ws.send(Message::text(r#"{"type":"input.cancel"}"#)).await.map_err(|e| format!("cancel: {e}"))?;
    let _ = ws.send(Message::text(r#"{"type":"session.close"}"#)).await;
    let _ = ws.close(None).await;
    Ok(())
}

#[test]
fn the_autoscaling_query_returns_the_fleets_usage_from_a_real_prometheus() {
    let started_at = Instant::now();
    // The query exactly as the ScaledObject carries it, and the label set it selects.
    let rendered = render("deploy/kubernetes");
    let (query, threshold) = keda_trigger(&rendered);
    let (metric, mut labels) = selector(&query);
    assert_eq!(metric, USAGE_METRIC);
    let job = labels.remove("job").expect("the query selects a job");

    let max_streams = MAX_STREAMS.to_string();
    let server = Server::start(&[
        "--max-streams",
        &max_streams,
        "--synthetic-audio-seconds",
        "20",
        "--synthetic-real-time-factor",
        "1",
    ]);
    // The HPA alternative's metric, straight from the server.
    let (status, metrics) = get(server.addr, "/metrics", "");
    assert_eq!(status, 200);
    assert!(metrics.lines().any(|l| l == format!("{USAGE_METRIC} 0")), "{USAGE_METRIC} 0 in /metrics:\n{metrics}");

    let prometheus = start_prometheus(server.addr, &job, &labels);
    // Idle, once Prometheus has scraped (its discovery hands the target over after ~5 s).
    prometheus.wait_for(&query, 0.0, Duration::from_secs(15));
    println!("idle: {query} = 0 after {:.1} s", started_at.elapsed().as_secs_f64());

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (stop, stop_rx) = watch::channel(false);
    let clients: Vec<_> =
        (0..STREAMS).map(|n| runtime.spawn(stream(server.addr, n, started_tx.clone(), stop_rx.clone()))).collect();
    runtime.block_on(async {
        for _ in 0..STREAMS {
            tokio::time::timeout(TIMEOUT, started.recv()).await.expect("every stream's audio starts");
        }
    });

    // 3 of 4 slots busy: the sum over the fleet (one replica here) is 0.75.
    let usage = prometheus.wait_for(&query, 0.75, Duration::from_secs(10));
    // KEDA hands the sum to the HPA as an AverageValue target of `threshold` per replica: the
    // HPA wants ceil(sum / threshold) replicas. 0.75 / 0.7 -> 2: this replica and one more.
    // (With one replica running, the HPA's 10% tolerance would hold it at 1 until the ratio
    // passed 1.1; the stack's minimum is 2 anyway.)
    let desired = (usage / threshold).ceil();
    assert_eq!(desired, 2.0, "replicas KEDA asks for at usage {usage} and threshold {threshold}");
    // The per-pod series prometheus-adapter would serve to the HPA has the same value.
    let series = prometheus.query(&format!("{USAGE_METRIC}{{job=\"{job}\"}}"));
    assert!(matches!(series.as_slice(), [(_, value)] if *value == 0.75), "{series:?}");
    let (_, metrics) = get(server.addr, "/metrics", "");
    assert!(metrics.lines().any(|l| l == format!("{USAGE_METRIC} 0.75")), "{USAGE_METRIC} 0.75 in /metrics");
    println!("3 streams: {query} = {usage} -> {desired} replicas at threshold {threshold}");

    // The streams cancelled: back to 0.
    stop.send(true).expect("clients listening");
    for (n, client) in clients.into_iter().enumerate() {
        match runtime.block_on(async { tokio::time::timeout(TIMEOUT, client).await }) {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(message))) => panic!("client {n}: {message}\nserver: {:?}", server.log()),
            other => panic!("client {n}: {other:?}"),
        }
    }
    prometheus.wait_for(&query, 0.0, Duration::from_secs(10));
    println!("cancelled: {query} = 0; {:.1} s in all", started_at.elapsed().as_secs_f64());
}
