//! Load generator for servers speaking the streaming speech WebSocket protocol
//! (`/v1/audio/speech/stream`): ours or the reference Python server.
//!
//!   loadgen run      -u ws://127.0.0.1:8901/v1/audio/speech/stream -c 64 --duration 10 --mode pcm
//!   loadgen idle-mem -u ws://127.0.0.1:8901/v1/audio/speech/stream -c 512 --pid 1234
//!   loadgen report   results.jsonl          (markdown table, ours/reference ratios)
//!
//! `run` opens N connections, sends `session.config` on each, then loops `input.text` +
//! `input.done` on every connection until the duration (or the utterance budget) is used
//! up. It times input.done -> first audio (first binary frame, or `audio.chunk`) and
//! input.done -> `session.done`. Every run is bounded: no new utterance starts after the
//! duration, and one in flight is abandoned after `--utterance-timeout`.
//!
//! Underruns, from the client's side: each connection plays its audio from the first byte at
//! `--bytes-per-second`; a binary frame arriving after the audio before it ran out is a late
//! chunk (an audible gap). `--playback` also holds each connection until its utterance has been
//! played out before the next (a listener, not a file downloader), `--ramp` staggers the
//! connections' starts, and refusals for lack of capacity (the server's `Server overloaded`
//! error) are counted apart, each followed by `--refusal-backoff` before the next try.
//!
//! Results: one JSON object on stdout (one line), the human summary on stderr.
//! Only loopback servers are meant to be loaded; use `--allow-remote` to override.

use std::collections::BTreeMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};
use fastwebsockets::{Frame, OpCode, Payload};
use serde::Deserialize;
use serde_json::{json, Value};
use speechstream_benches::proc_stats;
use speechstream_benches::stats::{Samples, Summary};
use speechstream_benches::ws_client::{self, Client, WsUrl};
use tokio::task::JoinSet;

#[derive(Parser)]
#[command(name = "loadgen", about = "Load generator for the streaming speech WebSocket protocol")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Utterances over N concurrent connections: throughput and time to first audio.
    Run(RunArgs),
    /// Resident memory per idle connection (session.config sent, nothing else).
    IdleMem(IdleArgs),
    /// Read JSON lines written by `run`/`idle-mem` and print a markdown comparison (a row run more
    /// than once shows its last run, then the utterances/s ratio of each pair of runs and their median).
    Report(ReportArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Non-streamed: one WAV binary frame per utterance (`response_format: wav`).
    Wav,
    /// Streamed: raw PCM chunks as binary frames (`stream_audio: true, response_format: pcm`).
    Pcm,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Wav => "wav",
            Mode::Pcm => "pcm",
        }
    }

    /// The `session.config` of each connection; `voice`: the voice it asks for (the server's
    /// default when `None`), e.g. a Kokoro voice (`jf_alpha`).
    fn session_config(self, voice: Option<&str>) -> String {
        let mut config = match self {
            Mode::Wav => json!({"type": "session.config", "response_format": "wav"}),
            Mode::Pcm => json!({
                "type": "session.config",
                "response_format": "pcm",
                "stream_audio": true
            }),
        };
        if let Some(voice) = voice {
            config["voice"] = json!(voice);
        }
        config.to_string()
    }
}

#[derive(Args, Clone)]
struct Target {
    /// Server URL, ws://host:port/path.
    #[arg(short, long, default_value = "ws://127.0.0.1:8901/v1/audio/speech/stream")]
    url: String,
    /// Label for the results (e.g. "ours", "reference").
    #[arg(short, long, default_value = "server")]
    label: String,
    /// Allow a non-loopback server (load tests are meant for 127.0.0.1).
    #[arg(long)]
    allow_remote: bool,
    /// Tokio worker threads for the load generator (1 = current-thread runtime). Keep it
    /// small on a small machine: the generator competes with the server for the CPU.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Give up on a connection attempt (TCP + handshake) after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    connect_timeout: f64,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    target: Target,
    /// Concurrent connections.
    #[arg(short = 'c', long, default_value_t = 1)]
    connections: usize,
    /// Start no new utterance after this many seconds.
    #[arg(short, long, default_value_t = 10.0)]
    duration: f64,
    /// Stop after this many utterances in total (across connections), if reached first.
    #[arg(short = 'n', long)]
    utterances: Option<u64>,
    #[arg(short, long, value_enum, default_value_t = Mode::Pcm)]
    mode: Mode,
    /// Text of each utterance (the reference's null engine ignores it).
    #[arg(long, default_value = "Hello from the speechstream load generator.")]
    text: String,
    /// The voice each connection's `session.config` asks for (e.g. `jf_alpha`, a Kokoro voice);
    /// default: none, the server's default voice.
    #[arg(long)]
    voice: Option<String>,
    /// Abandon an utterance (and its connection) after this many seconds.
    #[arg(long, default_value_t = 30.0)]
    utterance_timeout: f64,
    /// Server pid: report its CPU time and resident memory over the run.
    #[arg(long)]
    pid: Option<u32>,
    /// Bytes of audio per second of playback (24 kHz s16le mono: 48000), for the underruns and
    /// the audio seconds: an utterance whose `audio.start` announces its `sample_rate` (streamed
    /// `pcm`, s16le mono: a Piper voice's 22050) is played at that rate instead.
    #[arg(long, default_value_t = 48_000.0)]
    bytes_per_second: f64,
    /// Play each utterance out (in real time from its first audio) before sending the next.
    #[arg(long)]
    playback: bool,
    /// Start the connections' first utterances evenly over this many seconds.
    #[arg(long, default_value_t = 0.0)]
    ramp: f64,
    /// Seconds a connection waits after a refusal (`Server overloaded`) before trying again.
    #[arg(long, default_value_t = 1.0)]
    refusal_backoff: f64,
}

#[derive(Args)]
struct IdleArgs {
    #[command(flatten)]
    target: Target,
    /// Idle connections to open.
    #[arg(short = 'c', long, default_value_t = 512)]
    connections: usize,
    /// Server pid, whose VmRSS is read from /proc before and after.
    #[arg(long)]
    pid: u32,
    /// Config sent on each connection.
    #[arg(short, long, value_enum, default_value_t = Mode::Pcm)]
    mode: Mode,
    /// Wait this long after the last config before reading VmRSS (must stay below the
    /// server's idle timeout, 30 s by default).
    #[arg(long, default_value_t = 2.0)]
    settle: f64,
    /// Connection attempts in flight at once while opening.
    #[arg(long, default_value_t = 64)]
    open_concurrency: usize,
}

#[derive(Args)]
struct ReportArgs {
    /// JSON-lines files written by `run` and `idle-mem` (stdin if none).
    files: Vec<String>,
    /// Label of our server (numerator of the ratios).
    #[arg(long, default_value = "ours")]
    ours: String,
    /// Label of the reference server (denominator of the ratios).
    #[arg(long, default_value = "reference")]
    reference: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => with_runtime(args.target.threads, run(args)),
        Command::IdleMem(args) => with_runtime(args.target.threads, idle_mem(args)),
        Command::Report(args) => report(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn with_runtime(threads: usize, fut: impl std::future::Future<Output = Result<(), String>>) -> Result<(), String> {
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()
    }
    .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(fut)
}

fn check_target(target: &Target, connections: usize) -> Result<WsUrl, String> {
    let url = WsUrl::parse(&target.url)?;
    if !target.allow_remote {
        let addrs: Vec<_> =
            url.authority.to_socket_addrs().map_err(|e| format!("resolve {}: {e}", url.authority))?.collect();
        if addrs.is_empty() || !addrs.iter().all(|a| is_loopback(a.ip())) {
            return Err(format!("{} is not a loopback address; pass --allow-remote to load it anyway", url.authority));
        }
    }
    // Each connection is one descriptor; leave room for the runtime and stdio.
    let want = connections as u64 + 64;
    let have = proc_stats::raise_nofile_limit(want).map_err(|e| format!("RLIMIT_NOFILE: {e}"))?;
    if have < want {
        return Err(format!(
            "{connections} connections need ~{want} file descriptors but the limit is {have}; \
             raise it (ulimit -n {want})"
        ));
    }
    Ok(url)
}

fn is_loopback(ip: IpAddr) -> bool {
    ip.is_loopback()
}

async fn connect_with_timeout(url: &WsUrl, timeout: Duration) -> Result<Client, String> {
    match tokio::time::timeout(timeout, ws_client::connect(url)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("connect: {e}")),
        Err(_) => Err("connect: timed out".to_string()),
    }
}

async fn send_text(ws: &mut Client, text: &str) -> Result<(), String> {
    ws.write_frame(Frame::text(Payload::Owned(text.as_bytes().to_vec()))).await.map_err(|e| format!("write: {e}"))
}

/// The fields of server messages the load generator looks at.
#[derive(Deserialize)]
struct ServerMessage {
    #[serde(rename = "type")]
    kind: Option<String>,
    total_bytes: Option<u64>,
    error: Option<bool>,
    message: Option<String>,
    sample_rate: Option<f64>,
}

#[derive(Default)]
struct UtteranceResult {
    first_audio: Option<Duration>,
    /// When the first audio arrived (playback starts).
    first_audio_at: Option<Instant>,
    /// Binary frames, and those that arrived after the audio before them ran out.
    chunks: u64,
    late: Vec<Duration>,
    /// The server refused the utterance for lack of capacity, after this long.
    refused: Option<Duration>,
    done: Duration,
    audio_bytes: u64,
    /// Its playback rate: `--bytes-per-second`, or what its `audio.start` announced.
    bytes_per_second: f64,
    /// Error frames or `audio.done {error: true}` seen for this utterance.
    server_errors: Vec<String>,
    /// `audio.done.total_bytes` disagreed with the binary bytes received.
    bytes_mismatch: bool,
}

/// One utterance on an open, configured connection: send, then read to `session.done`.
async fn utterance(
    ws: &mut Client,
    text_msg: &str,
    done_msg: &str,
    bytes_per_second: f64,
) -> Result<UtteranceResult, String> {
    send_text(ws, text_msg).await?;
    let t0 = Instant::now();
    send_text(ws, done_msg).await?;
    let mut r = UtteranceResult { bytes_per_second, ..UtteranceResult::default() };
    loop {
        let frame = ws.read_frame().await.map_err(|e| format!("read: {e}"))?;
        match frame.opcode {
            OpCode::Binary => {
                let now = Instant::now();
                r.first_audio.get_or_insert_with(|| now - t0);
                let start = *r.first_audio_at.get_or_insert(now);
                let runs_dry = start + Duration::from_secs_f64(r.audio_bytes as f64 / r.bytes_per_second);
                if now > runs_dry {
                    r.late.push(now - runs_dry);
                }
                r.chunks += 1;
                r.audio_bytes += frame.payload.len() as u64;
            }
            OpCode::Text => {
                let msg: ServerMessage =
                    serde_json::from_slice(&frame.payload).map_err(|e| format!("bad JSON from server: {e}"))?;
                match msg.kind.as_deref() {
                    Some("audio.start") => {
                        if let Some(rate) = msg.sample_rate.filter(|r| *r > 0.0) {
                            r.bytes_per_second = 2.0 * rate;
                        }
                    }
                    Some("audio.chunk") => {
                        r.first_audio.get_or_insert_with(|| t0.elapsed());
                    }
                    Some("audio.done") => {
                        if msg.error == Some(true) {
                            r.server_errors.push("audio.done error=true".into());
                        }
                        // Word-timestamp mode carries audio in JSON; only check binary modes.
                        if r.audio_bytes > 0 && msg.total_bytes != Some(r.audio_bytes) {
                            r.bytes_mismatch = true;
                        }
                    }
                    Some("error") => {
                        let message = msg.message.unwrap_or_else(|| "error frame".into());
                        if message.contains("Server overloaded") {
                            r.refused.get_or_insert_with(|| t0.elapsed());
                        } else {
                            r.server_errors.push(message);
                        }
                    }
                    Some("session.done") => {
                        r.done = t0.elapsed();
                        return Ok(r);
                    }
                    _ => {}
                }
            }
            OpCode::Close => return Err("server closed the connection".into()),
            _ => {}
        }
    }
}

/// What one connection's worker reports.
#[derive(Default)]
struct WorkerStats {
    ok: u64,
    /// Of `ok`, those whose `session.done` arrived before the deadline.
    ok_in_window: u64,
    failed: u64,
    connection_errors: u64,
    reconnects: u64,
    bytes_mismatch: u64,
    audio_bytes: u64,
    /// The audio received, in seconds of playback (each utterance at its own rate).
    audio_seconds: f64,
    ttfa: Samples,
    done: Samples,
    /// Refused utterances and how long their refusal took.
    refused: u64,
    refusal: Samples,
    /// Streamed chunks received, late ones, how late, and utterances with at least one.
    chunks: u64,
    late_chunks: u64,
    lateness: Samples,
    late_utterances: u64,
    /// First few distinct error texts, for the human report.
    error_texts: BTreeMap<String, u64>,
}

impl WorkerStats {
    fn note_error(&mut self, e: String) {
        if self.error_texts.len() < 16 || self.error_texts.contains_key(&e) {
            *self.error_texts.entry(e).or_default() += 1;
        }
    }

    fn merge(&mut self, o: WorkerStats) {
        self.ok += o.ok;
        self.ok_in_window += o.ok_in_window;
        self.failed += o.failed;
        self.connection_errors += o.connection_errors;
        self.reconnects += o.reconnects;
        self.bytes_mismatch += o.bytes_mismatch;
        self.audio_bytes += o.audio_bytes;
        self.audio_seconds += o.audio_seconds;
        self.ttfa.extend(o.ttfa);
        self.done.extend(o.done);
        self.refused += o.refused;
        self.refusal.extend(o.refusal);
        self.chunks += o.chunks;
        self.late_chunks += o.late_chunks;
        self.lateness.extend(o.lateness);
        self.late_utterances += o.late_utterances;
        for (k, v) in o.error_texts {
            if self.error_texts.len() < 16 || self.error_texts.contains_key(&k) {
                *self.error_texts.entry(k).or_default() += v;
            }
        }
    }
}

struct RunShared {
    url: WsUrl,
    config_msg: String,
    text_msg: String,
    done_msg: String,
    deadline: Instant,
    budget: Option<u64>,
    started: AtomicU64,
    utterance_timeout: Duration,
    connect_timeout: Duration,
    bytes_per_second: f64,
    playback: bool,
    refusal_backoff: Duration,
}

impl RunShared {
    /// Claim the next utterance, if time and budget allow.
    fn claim(&self) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        match self.budget {
            Some(b) => self.started.fetch_add(1, Ordering::Relaxed) < b,
            None => true,
        }
    }
}

async fn open_configured(url: &WsUrl, config: &str, timeout: Duration) -> Result<Client, String> {
    let mut ws = connect_with_timeout(url, timeout).await?;
    send_text(&mut ws, config).await?;
    Ok(ws)
}

async fn worker(shared: Arc<RunShared>, mut ws: Option<Client>, delay: Duration) -> WorkerStats {
    let mut st = WorkerStats::default();
    tokio::time::sleep(delay).await;
    while shared.claim() {
        let conn = match ws.as_mut() {
            Some(c) => c,
            None => match open_configured(&shared.url, &shared.config_msg, shared.connect_timeout).await {
                Ok(c) => {
                    st.reconnects += 1;
                    ws.insert(c)
                }
                Err(e) => {
                    st.connection_errors += 1;
                    st.note_error(e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let attempt = tokio::time::timeout(
            shared.utterance_timeout,
            utterance(conn, &shared.text_msg, &shared.done_msg, shared.bytes_per_second),
        )
        .await;
        match attempt {
            Ok(Ok(r)) if r.refused.is_some() && r.first_audio.is_none() => {
                st.refused += 1;
                st.refusal.push(r.refused.unwrap_or_default());
                tokio::time::sleep(shared.refusal_backoff).await;
            }
            Ok(Ok(r)) => {
                st.chunks += r.chunks;
                st.late_chunks += r.late.len() as u64;
                st.late_utterances += u64::from(!r.late.is_empty());
                for late in &r.late {
                    st.lateness.push(*late);
                }
                if shared.playback {
                    if let Some(start) = r.first_audio_at {
                        let played = start + Duration::from_secs_f64(r.audio_bytes as f64 / r.bytes_per_second);
                        tokio::time::sleep_until(played.into()).await;
                    }
                }
                if r.bytes_mismatch {
                    st.bytes_mismatch += 1;
                }
                st.audio_bytes += r.audio_bytes;
                st.audio_seconds += r.audio_bytes as f64 / r.bytes_per_second;
                if r.server_errors.is_empty() && r.first_audio.is_some() {
                    st.ok += 1;
                    if Instant::now() <= shared.deadline {
                        st.ok_in_window += 1;
                    }
                    if let Some(t) = r.first_audio {
                        st.ttfa.push(t);
                    }
                    st.done.push(r.done);
                } else {
                    st.failed += 1;
                    if r.first_audio.is_none() && r.server_errors.is_empty() {
                        st.note_error("utterance ended without audio".into());
                    }
                    for e in r.server_errors {
                        st.note_error(e);
                    }
                }
            }
            Ok(Err(e)) => {
                st.failed += 1;
                st.connection_errors += 1;
                st.note_error(e);
                ws = None;
            }
            Err(_) => {
                st.failed += 1;
                st.connection_errors += 1;
                st.note_error("utterance timed out".into());
                ws = None;
            }
        }
    }
    if let Some(mut c) = ws {
        close_politely(&mut c).await;
    }
    st
}

/// `session.close`, then wait briefly for the server's close frame so the server sees a
/// clean end rather than a reset.
async fn close_politely(ws: &mut Client) {
    if send_text(ws, r#"{"type":"session.close"}"#).await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while let Ok(f) = ws.read_frame().await {
            if f.opcode == OpCode::Close {
                break;
            }
        }
    })
    .await;
}

fn ms(s: &Option<Summary>, f: fn(&Summary) -> f64) -> Value {
    match s {
        Some(s) => json!((f(s) * 1000.0).round() / 1000.0),
        None => Value::Null,
    }
}

async fn run(args: RunArgs) -> Result<(), String> {
    let url = check_target(&args.target, args.connections)?;
    if args.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    let connect_timeout = Duration::from_secs_f64(args.target.connect_timeout);
    let config_msg = args.mode.session_config(args.voice.as_deref());

    // Open every connection before the clock starts, so that connection set-up does not
    // count against throughput.
    let open_started = Instant::now();
    let mut opening = JoinSet::new();
    for _ in 0..args.connections {
        let url = url.clone();
        let config = config_msg.clone();
        opening.spawn(async move { open_configured(&url, &config, connect_timeout).await });
    }
    let mut clients = Vec::with_capacity(args.connections);
    let mut open_errors = BTreeMap::<String, u64>::new();
    while let Some(r) = opening.join_next().await {
        match r.map_err(|e| format!("join: {e}"))? {
            Ok(c) => clients.push(c),
            Err(e) => *open_errors.entry(e).or_default() += 1,
        }
    }
    let open_secs = open_started.elapsed().as_secs_f64();
    if clients.is_empty() {
        return Err(format!("no connection could be opened to {}: {open_errors:?}", args.target.url));
    }
    let opened = clients.len();

    let cpu_before = args.pid.map(proc_stats::cpu_seconds).transpose();
    let cpu_before = cpu_before.map_err(|e| format!("server pid: {e}"))?;
    let self_cpu_before = proc_stats::cpu_seconds(std::process::id()).ok();

    let start = Instant::now();
    let shared = Arc::new(RunShared {
        url,
        config_msg,
        text_msg: json!({"type": "input.text", "text": args.text}).to_string(),
        done_msg: r#"{"type":"input.done"}"#.to_string(),
        deadline: start + Duration::from_secs_f64(args.duration),
        budget: args.utterances,
        started: AtomicU64::new(0),
        utterance_timeout: Duration::from_secs_f64(args.utterance_timeout),
        connect_timeout,
        bytes_per_second: args.bytes_per_second,
        playback: args.playback,
        refusal_backoff: Duration::from_secs_f64(args.refusal_backoff),
    });
    let mut workers = JoinSet::new();
    let n = clients.len();
    for (i, c) in clients.into_iter().enumerate() {
        let delay = Duration::from_secs_f64(args.ramp * i as f64 / n as f64);
        workers.spawn(worker(shared.clone(), Some(c), delay));
    }
    let mut total = WorkerStats::default();
    let mut end = start;
    while let Some(r) = workers.join_next().await {
        total.merge(r.map_err(|e| format!("join: {e}"))?);
        end = Instant::now();
    }
    let elapsed = end.duration_since(start).as_secs_f64();

    let server_cpu = match (args.pid, cpu_before) {
        (Some(pid), Some(b)) => proc_stats::cpu_seconds(pid).ok().map(|a| a - b),
        _ => None,
    };
    let server_rss = args.pid.and_then(|p| proc_stats::rss_kib(p).ok());
    let server_hwm = args.pid.and_then(|p| proc_stats::peak_rss_kib(p).ok());
    let self_cpu = self_cpu_before.and_then(|b| proc_stats::cpu_seconds(std::process::id()).ok().map(|a| a - b));

    let ttfa = total.ttfa.summary();
    let done = total.done.summary();
    let lateness = total.lateness.summary();
    let refusal = total.refusal.summary();
    let audio_seconds_per_s = total.audio_seconds / elapsed.max(1e-9);
    // Throughput counts what completed inside the window, over the window: utterances still
    // in flight at the deadline are finished (their latencies count) but the drain is not
    // charged to the rate. A run that used its budget early is timed to its end.
    let window = elapsed.min(args.duration);
    let ups = total.ok_in_window as f64 / window.max(1e-9);
    let open_failures: u64 = open_errors.values().sum();
    let errors = total.failed + open_failures;
    let utterances_all = total.ok + total.failed;
    let bytes_per_utt = total.audio_bytes.checked_div(utterances_all).unwrap_or(0);
    let cpu_ms_per_utt = server_cpu.filter(|_| total.ok > 0).map(|c| c * 1000.0 / total.ok as f64);

    let mut line = json!({
        "kind": "run",
        "label": args.target.label,
        "url": args.target.url,
        "mode": args.mode.name(),
        "connections": args.connections,
        "connections_opened": opened,
        "open_seconds": round3(open_secs),
        "duration_target_s": args.duration,
        "utterance_budget": args.utterances,
        "elapsed_s": round3(elapsed),
        "utterances_ok": total.ok,
        "utterances_ok_in_window": total.ok_in_window,
        "utterances_failed": total.failed,
        "utterances_per_s": round3(ups),
        "errors": errors,
        "open_errors": open_failures,
        "connection_errors": total.connection_errors,
        "reconnects": total.reconnects,
        "bytes_mismatch": total.bytes_mismatch,
        "audio_bytes_per_utterance": bytes_per_utt,
        "ttfa_ms": {"mean": ms(&ttfa, |s| s.mean_ms), "p50": ms(&ttfa, |s| s.p50_ms),
                    "p90": ms(&ttfa, |s| s.p90_ms), "p99": ms(&ttfa, |s| s.p99_ms),
                    "max": ms(&ttfa, |s| s.max_ms)},
        "done_ms": {"mean": ms(&done, |s| s.mean_ms), "p50": ms(&done, |s| s.p50_ms),
                    "p90": ms(&done, |s| s.p90_ms), "p99": ms(&done, |s| s.p99_ms),
                    "max": ms(&done, |s| s.max_ms)},
        "playback": args.playback,
        "audio_seconds_per_s": round3(audio_seconds_per_s),
        "chunks": total.chunks,
        "late_chunks": total.late_chunks,
        "late_utterances": total.late_utterances,
        "lateness_ms": {"p50": ms(&lateness, |s| s.p50_ms), "p99": ms(&lateness, |s| s.p99_ms),
                        "max": ms(&lateness, |s| s.max_ms)},
        "refused": total.refused,
        "refusal_ms": {"p50": ms(&refusal, |s| s.p50_ms), "p99": ms(&refusal, |s| s.p99_ms),
                       "max": ms(&refusal, |s| s.max_ms)},
        "server_pid": args.pid,
        "server_cpu_s": server_cpu.map(round3),
        "server_cpu_ms_per_utterance": cpu_ms_per_utt.map(round3),
        "server_rss_kib_after": server_rss,
        "server_peak_rss_kib": server_hwm,
        "loadgen_cpu_s": self_cpu.map(round3),
        "loadgen_threads": args.target.threads,
        "error_samples": total.error_texts.iter().chain(open_errors.iter())
            .map(|(k, v)| json!({"error": k, "count": v})).collect::<Vec<_>>(),
    });
    line["voice"] = json!(args.voice);
    println!("{line}");

    eprintln!(
        "[{}] {} mode, {} connections ({} opened in {:.2}s), {:.2}s",
        args.target.label,
        args.mode.name(),
        args.connections,
        opened,
        open_secs,
        elapsed
    );
    eprintln!(
        "  utterances: {} ok, {} failed -> {:.1} utt/s; audio {} B/utt",
        total.ok, total.failed, ups, bytes_per_utt
    );
    if let (Some(t), Some(d)) = (ttfa, done) {
        eprintln!("  first audio: p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms", t.p50_ms, t.p99_ms, t.max_ms);
        eprintln!("  session.done: p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms", d.p50_ms, d.p99_ms, d.max_ms);
    }
    eprintln!(
        "  audio {:.1} s/s; late chunks {} of {} ({} utterances){}",
        audio_seconds_per_s,
        total.late_chunks,
        total.chunks,
        total.late_utterances,
        lateness.map_or(String::new(), |l| format!(", lateness p50 {:.1} ms p99 {:.1} ms", l.p50_ms, l.p99_ms))
    );
    if total.refused > 0 {
        let p99 = refusal.map_or(f64::NAN, |r| r.p99_ms);
        eprintln!("  refused: {} (refusal p99 {:.1} ms)", total.refused, p99);
    }
    if let Some(c) = server_cpu {
        eprintln!(
            "  server CPU {:.2}s ({:.3} ms/utt), RSS {} KiB, peak {} KiB; loadgen CPU {:.2}s",
            c,
            cpu_ms_per_utt.unwrap_or(f64::NAN),
            server_rss.unwrap_or(0),
            server_hwm.unwrap_or(0),
            self_cpu.unwrap_or(f64::NAN)
        );
    }
    if errors > 0 || total.bytes_mismatch > 0 {
        eprintln!(
            "  errors: {errors} (open {open_failures}, connection {}, reconnects {}), \
             total_bytes mismatches {}",
            total.connection_errors, total.reconnects, total.bytes_mismatch
        );
        for (k, v) in total.error_texts.iter().chain(open_errors.iter()) {
            eprintln!("    {v} x {k}");
        }
    }
    Ok(())
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

async fn idle_mem(args: IdleArgs) -> Result<(), String> {
    let url = check_target(&args.target, args.connections)?;
    if args.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    let connect_timeout = Duration::from_secs_f64(args.target.connect_timeout);
    let config_msg = args.mode.session_config(None);
    let pid = args.pid;

    // Let the server reach a steady state before the baseline; one short-lived
    // connection also warms any lazily built per-process state (handler, allocator).
    {
        let mut c = open_configured(&url, &config_msg, connect_timeout).await?;
        close_politely(&mut c).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = proc_stats::rss_kib(pid).map_err(|e| format!("server pid {pid}: {e}"))?;

    let started = Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(args.open_concurrency.max(1)));
    let mut opening = JoinSet::new();
    for _ in 0..args.connections {
        let url = url.clone();
        let config = config_msg.clone();
        let permits = permits.clone();
        opening.spawn(async move {
            let _permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
            open_configured(&url, &config, connect_timeout).await
        });
    }
    let mut clients = Vec::with_capacity(args.connections);
    let mut errors = BTreeMap::<String, u64>::new();
    while let Some(r) = opening.join_next().await {
        match r.map_err(|e| format!("join: {e}"))? {
            Ok(c) => clients.push(c),
            Err(e) => *errors.entry(e).or_default() += 1,
        }
    }
    let open_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs_f64(args.settle)).await;
    let after = proc_stats::rss_kib(pid).map_err(|e| format!("server pid {pid}: {e}"))?;
    let open = clients.len();

    // Close them all (concurrently) so the server is left as it was found.
    let mut closing = JoinSet::new();
    for mut c in clients {
        closing.spawn(async move { close_politely(&mut c).await });
    }
    while closing.join_next().await.is_some() {}

    let per_conn = if open > 0 { (after as f64 - before as f64) / open as f64 } else { f64::NAN };
    let failures: u64 = errors.values().sum();
    let line = json!({
        "kind": "idle_mem",
        "label": args.target.label,
        "url": args.target.url,
        "mode": args.mode.name(),
        "connections": args.connections,
        "connections_open": open,
        "open_seconds": round3(open_secs),
        "settle_s": args.settle,
        "server_pid": pid,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_connection": if per_conn.is_finite() { json!(round3(per_conn)) } else { Value::Null },
        "errors": failures,
        "error_samples": errors.iter().map(|(k, v)| json!({"error": k, "count": v}))
            .collect::<Vec<_>>(),
    });
    println!("{line}");
    eprintln!(
        "[{}] idle memory: {} of {} connections open (in {:.2}s); VmRSS {} -> {} KiB: {:.1} KiB/connection",
        args.target.label, open, args.connections, open_secs, before, after, per_conn
    );
    for (k, v) in &errors {
        eprintln!("    {v} x {k}");
    }
    Ok(())
}

// ---- report -------------------------------------------------------------------------

fn report(args: ReportArgs) -> Result<(), String> {
    let mut text = String::new();
    if args.files.is_empty() {
        use std::io::Read;
        std::io::stdin().read_to_string(&mut text).map_err(|e| format!("stdin: {e}"))?;
    } else {
        for f in &args.files {
            text.push_str(&std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?);
            text.push('\n');
        }
    }
    let records: Vec<Value> =
        text.lines().filter(|l| l.trim_start().starts_with('{')).filter_map(|l| serde_json::from_str(l).ok()).collect();
    print!("{}", render_report(&records, &args.ours, &args.reference));
    Ok(())
}

fn get_f64(v: &Value, path: &[&str]) -> Option<f64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_f64()
}

fn fmt_num(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) => format!("{v:.decimals$}"),
        None => "n/a".into(),
    }
}

fn fmt_ratio(ours: Option<f64>, reference: Option<f64>) -> String {
    match (ours, reference) {
        (Some(o), Some(r)) if r != 0.0 => format!("{:.2}x", o / r),
        _ => "n/a".into(),
    }
}

/// Markdown tables: one row per (mode, connections) for runs, one per mode for idle memory.
fn render_report<'a>(records: &'a [Value], ours: &str, reference: &str) -> String {
    let label = |r: &Value| r.get("label").and_then(Value::as_str).unwrap_or("").to_string();
    let key = |r: &Value| {
        (
            r.get("mode").and_then(Value::as_str).unwrap_or("").to_string(),
            r.get("connections").and_then(Value::as_u64).unwrap_or(0),
        )
    };
    // Every record per (mode, connections) and label, in order: the tables show the last; repeated
    // runs of a key also get their utterances/s ratios pair by pair (the i-th run of one side
    // against the i-th of the other).
    let mut runs: BTreeMap<(String, u64), BTreeMap<String, Vec<&Value>>> = BTreeMap::new();
    let mut idle: BTreeMap<(String, u64), BTreeMap<String, Vec<&Value>>> = BTreeMap::new();
    for r in records {
        let table = match r.get("kind").and_then(Value::as_str) {
            Some("run") => &mut runs,
            Some("idle_mem") => &mut idle,
            _ => continue,
        };
        table.entry(key(r)).or_default().entry(label(r)).or_default().push(r);
    }
    let last = |by_label: &BTreeMap<String, Vec<&'a Value>>, l: &str| by_label.get(l).and_then(|v| v.last().copied());

    let mut out = String::new();
    if !runs.is_empty() {
        out.push_str(&format!(
            "| mode | conns | metric | {ours} | {reference} | {ours}/{reference} |\n|---|---:|---|---:|---:|---:|\n"
        ));
        let metrics: [(&str, &[&str], usize); 10] = [
            ("utterances/s", &["utterances_per_s"], 1),
            ("TTFA p50 ms", &["ttfa_ms", "p50"], 3),
            ("TTFA p99 ms", &["ttfa_ms", "p99"], 3),
            ("session.done p50 ms", &["done_ms", "p50"], 3),
            ("session.done p99 ms", &["done_ms", "p99"], 3),
            ("server CPU ms/utt", &["server_cpu_ms_per_utterance"], 3),
            ("late chunks (client)", &["late_chunks"], 0),
            ("lateness p99 ms", &["lateness_ms", "p99"], 1),
            ("refused", &["refused"], 0),
            ("errors", &["errors"], 0),
        ];
        for ((mode, conns), by_label) in &runs {
            let (o, r) = (last(by_label, ours), last(by_label, reference));
            for (name, path, dec) in metrics {
                let ov = o.and_then(|v| get_f64(v, path));
                let rv = r.and_then(|v| get_f64(v, path));
                let counts = ["errors", "refused", "late chunks (client)", "lateness p99 ms"];
                let ratio = if counts.contains(&name) { String::new() } else { fmt_ratio(ov, rv) };
                out.push_str(&format!(
                    "| {mode} | {conns} | {name} | {} | {} | {ratio} |\n",
                    fmt_num(ov, dec),
                    fmt_num(rv, dec)
                ));
            }
            let side = |l: &str| by_label.get(l).map_or(&[][..], Vec::as_slice);
            let mut ratios: Vec<f64> = side(ours)
                .iter()
                .zip(side(reference))
                .filter_map(|(o, r)| Some(get_f64(o, &["utterances_per_s"])? / get_f64(r, &["utterances_per_s"])?))
                .filter(|x| x.is_finite())
                .collect();
            if ratios.len() > 1 {
                let each: Vec<String> = ratios.iter().map(|x| format!("{x:.2}x")).collect();
                ratios.sort_by(f64::total_cmp);
                let n = ratios.len();
                let median = if n % 2 == 1 { ratios[n / 2] } else { (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0 };
                out.push_str(&format!(
                    "| {mode} | {conns} | utterances/s, run by run (above: the last) | | | {} (median {median:.2}x) |\n",
                    each.join(" ")
                ));
            }
        }
        out.push('\n');
    }
    if !idle.is_empty() {
        out.push_str(&format!(
            "| idle memory | conns | metric | {ours} | {reference} | {ours}/{reference} |\n|---|---:|---|---:|---:|---:|\n"
        ));
        let metrics: [(&str, &str, usize); 3] = [
            ("KiB per idle connection", "kib_per_connection", 1),
            ("VmRSS before, KiB", "rss_before_kib", 0),
            ("VmRSS with conns open, KiB", "rss_after_kib", 0),
        ];
        for ((mode, conns), by_label) in &idle {
            let (o, r) = (last(by_label, ours), last(by_label, reference));
            for (name, field, dec) in metrics {
                let ov = o.and_then(|v| get_f64(v, &[field]));
                let rv = r.and_then(|v| get_f64(v, &[field]));
                out.push_str(&format!(
                    "| {mode} config | {conns} | {name} | {} | {} | {} |\n",
                    fmt_num(ov, dec),
                    fmt_num(rv, dec),
                    fmt_ratio(ov, rv)
                ));
            }
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("(no results)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_pairs_sides_and_divides() {
        let lines = [
            json!({"kind": "run", "label": "ours", "mode": "pcm", "connections": 64,
                   "utterances_per_s": 200.0, "ttfa_ms": {"p50": 1.0, "p99": 2.0},
                   "done_ms": {"p50": 3.0, "p99": 4.0}, "errors": 0}),
            json!({"kind": "run", "label": "reference", "mode": "pcm", "connections": 64,
                   "utterances_per_s": 100.0, "ttfa_ms": {"p50": 2.0, "p99": 4.0},
                   "done_ms": {"p50": 6.0, "p99": 8.0}, "errors": 1}),
            json!({"kind": "idle_mem", "label": "reference", "mode": "pcm", "connections": 512,
                   "kib_per_connection": 40.0, "rss_before_kib": 100, "rss_after_kib": 20580}),
        ];
        let out = render_report(&lines, "ours", "reference");
        assert!(out.contains("| pcm | 64 | utterances/s | 200.0 | 100.0 | 2.00x |"), "{out}");
        assert!(!out.contains("run by run"), "{out}");
        assert!(out.contains("| pcm | 64 | TTFA p50 ms | 1.000 | 2.000 | 0.50x |"), "{out}");
        assert!(out.contains("| pcm | 64 | errors | 0 | 1 |  |"), "{out}");
        assert!(out.contains("| pcm config | 512 | KiB per idle connection | n/a | 40.0 | n/a |"), "{out}");
        assert_eq!(render_report(&[], "ours", "reference"), "(no results)\n");
    }

    #[test]
    fn repeated_runs_get_their_ratios_pair_by_pair() {
        let run = |label: &str, ups: f64| json!({"kind": "run", "label": label, "mode": "pcm", "connections": 16, "utterances_per_s": ups});
        let lines = [
            run("ours", 30.0),
            run("reference", 20.0),
            run("ours", 28.0),
            run("reference", 20.0),
            run("ours", 33.0),
            run("reference", 20.0),
        ];
        let out = render_report(&lines, "ours", "reference");
        assert!(out.contains("| pcm | 16 | utterances/s | 33.0 | 20.0 | 1.65x |"), "{out}");
        assert!(out.contains("| 1.50x 1.40x 1.65x (median 1.50x) |"), "{out}");
        let even = render_report(&lines[..4], "ours", "reference");
        assert!(even.contains("| 1.50x 1.40x (median 1.45x) |"), "{even}");
    }
}
