//! The OpenAI-compatible HTTP side and the operator features over loopback: speech in every
//! delivery, errors, voices, readiness, metrics, the API key, the connection limit.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Value};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions, DEFAULT_MODEL_NAME};
use speechstream_core::config::ResponseFormat;
use speechstream_core::engine::{Engine, SynthesisRequest};
use speechstream_core::session::SessionOptions;
use speechstream_transports::{ServerConfig, STREAM_PATH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Received, Recorded, Scripted, Step, TestServer, TIMEOUT};

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The trailers of a chunked body.
    trailers: Vec<(String, String)>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// A header, or the trailer of that name.
    fn header_or_trailer(&self, name: &str) -> Option<&str> {
        self.header(name)
            .or_else(|| self.trailers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()))
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

/// One HTTP/1.1 exchange on a fresh connection (chunked bodies are de-chunked).
async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(head.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        std::io::Result::Ok(response)
    };
    let response = tokio::time::timeout(TIMEOUT, exchange).await.expect("http timed out").expect("http");
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").expect("response head");
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = response[split + 4..].to_vec();
    let mut trailers = Vec::new();
    if headers.iter().any(|(n, v)| n == "transfer-encoding" && v == "chunked") {
        (body, trailers) = dechunk(&body);
    }
    Reply { status, headers, body, trailers }
}

/// A chunked body's bytes and its trailers.
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, Vec<(String, String)>) {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") else { return (out, Vec::new()) };
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap_or("0").trim(), 16).unwrap_or(0);
        if size == 0 {
            let trailers = String::from_utf8_lossy(&raw[line_end + 2..])
                .lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            return (out, trailers);
        }
        out.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
        raw = &raw[line_end + 2 + size + 2..];
    }
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn synthetic() -> Arc<SyntheticEngine> {
    Arc::new(SyntheticEngine::new(SyntheticOptions::default()))
}

fn expected_pcm(engine: &SyntheticEngine, text: &str) -> Vec<u8> {
    engine.render(&SynthesisRequest::new(text)).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_in_every_format_and_delivery() {
    let engine = synthetic();
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let pcm = expected_pcm(&engine, "Hello over HTTP.");
    for (format, media, magic) in [
        ("wav", "audio/wav", &b"RIFF"[..]),
        ("pcm", "audio/pcm", &pcm[..4]),
        ("flac", "audio/flac", b"fLaC"),
        ("mp3", "audio/mpeg", b""),
        ("opus", "audio/ogg", b"OggS"),
    ] {
        let body = json!({"input": " Hello over HTTP. ", "response_format": format, "voice": "vivian"}).to_string();
        let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON, ("TE", "trailers")], &body).await;
        assert_eq!((reply.status, reply.header("content-type")), (200, Some(media)), "{format}");
        assert!(reply.body.starts_with(magic) && reply.body.len() > 100, "{format}");
        assert_eq!(reply.header("x-vllm-omni-input-tokens"), Some("3"));
        // pcm and opus go out as they are made (chunked), their output tokens as trailers:
        // the very bytes of the whole file.
        let progressive = matches!(format, "pcm" | "opus");
        assert_eq!(reply.header("transfer-encoding") == Some("chunked"), progressive, "{format}");
        assert!(reply.header_or_trailer("x-vllm-omni-output-tokens").is_some_and(|n| n != "0"), "{format}");
        if format == "opus" {
            let whole = speechstream_core::encode::encode_s16le(ResponseFormat::Opus, pcm.clone(), 24_000);
            assert_eq!(reply.body, whole.unwrap(), "the same file, sent as it is made");
        }
        if format == "wav" {
            assert_eq!(&reply.body[44..], &pcm[..]);
        }
        if format == "pcm" {
            assert_eq!(reply.body, pcm);
        }
    }
    // Raw streams: the same samples; wav behind the 44-byte streaming header.
    let body = json!({"input": "Hello over HTTP.", "response_format": "pcm", "stream_format": "audio"}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await;
    assert_eq!((reply.status, reply.header("transfer-encoding")), (200, Some("chunked")));
    assert_eq!(reply.body, pcm);
    let body = json!({"input": "Hello over HTTP.", "stream_format": "audio", "speed": 1.0}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await;
    assert_eq!(&reply.body[..4], b"RIFF");
    assert_eq!(&reply.body[4..8], &[0xff; 4]);
    assert_eq!(&reply.body[40..44], &[0xff; 4]);
    assert_eq!(&reply.body[44..], &pcm[..]);
    // SSE: deltas adding up to the audio, then done with usage.
    let body = json!({"input": "Hello over HTTP.", "response_format": "pcm", "stream": true}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await;
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let text = String::from_utf8(reply.body).expect("utf-8 events");
    let events: Vec<(&str, Value)> = text
        .split_terminator("\n\n")
        .map(|event| {
            let (name, data) = event.split_once('\n').expect("two lines");
            let data = data.strip_prefix("data: ").expect("data line");
            (name.strip_prefix("event: ").expect("event line"), serde_json::from_str(data).expect("JSON data"))
        })
        .collect();
    let (last, deltas) = events.split_last().expect("events");
    assert_eq!(last.0, "speech.audio.done");
    assert_eq!(last.1["usage"]["input_tokens"], 3);
    let mut audio = Vec::new();
    for (name, data) in deltas {
        assert_eq!(
            (*name, &data["type"], &data["response_format"]),
            ("speech.audio.delta", &json!(name), &json!("pcm"))
        );
        audio.extend(base64::engine::general_purpose::STANDARD.decode(data["audio"].as_str().unwrap()).unwrap());
    }
    assert_eq!(audio, pcm);
    // Word timings ride a header on whole replies.
    let body = json!({"input": "Hello over HTTP.", "word_timestamps": true}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await;
    let words: Value = serde_json::from_str(reply.header("x-word-timestamps").expect("timings")).unwrap();
    assert_eq!(words[0]["word"], "Hello");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_openai_json() {
    let server = TestServer::start(synthetic(), SessionOptions::default()).await;
    let post = |body: Value| {
        let addr = server.addr;
        async move { request(addr, "POST", "/v1/audio/speech", &[JSON], &body.to_string()).await }
    };
    let reply = post(json!({"input": "x", "model": "nope"})).await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.json(),
        json!({"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError", "param": "model", "code": 404}})
    );
    assert_eq!(post(json!({"input": "x", "model": DEFAULT_MODEL_NAME})).await.status, 200);
    let reply = post(json!({"input": "x", "stream": true, "voice": "nobody"})).await;
    assert_eq!((reply.status, &reply.json()["error"]["type"]), (400, &json!("BadRequestError")));
    assert_eq!(post(json!({"input": "  "})).await.json()["error"]["message"], "Input text cannot be empty");
    let reply = post(json!({"input": "x", "sample_rate": 16001})).await;
    assert_eq!(
        reply.json()["error"]["message"],
        "sample_rate=16001 is not supported by the current TTS model; supported rates: 8000, 16000, 22050, 24000, \
         44100, 48000"
    );
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[("Content-Type", "text/plain")], "{}").await;
    assert_eq!(reply.status, 400);
    assert_eq!(request(server.addr, "GET", "/v1/audio/speech", &[], "").await.status, 405);

    let reply = request(server.addr, "GET", "/v1/audio/voices", &[], "").await;
    let voices = reply.json();
    assert_eq!(voices["uploaded_voices"], json!([]));
    let names: Vec<&str> = voices["voices"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]) && names.contains(&"vivian") && names.contains(&"default"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_failures_and_disconnects() {
    let engine = Recorded::new(Scripted::new(vec![Step::Fail("boom".into())]));
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let body = json!({"input": "x", "stream_format": "audio", "response_format": "pcm"}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.json()["error"]["message"], "Speech generation failed: boom");
    server.shutdown().await;

    // A client that leaves mid-stream gets its request aborted.
    let engine = Recorded::new(Scripted::new(vec![Step::Audio(vec![0; 960], 24000), Step::HoldUntilAborted]));
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let body = json!({"input": "x", "stream": true, "response_format": "pcm"}).to_string();
    let head = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 64];
    let n = tokio::time::timeout(TIMEOUT, stream.read(&mut first)).await.unwrap().unwrap();
    assert!(first[..n].starts_with(b"HTTP/1.1 200"));
    drop(stream);
    assert_eq!(engine.await_aborts(1).await.len(), 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_and_metrics() {
    let server = TestServer::start(synthetic(), SessionOptions::default()).await;
    assert_eq!(request(server.addr, "GET", "/ready", &[], "").await.status, 200);
    let mut client = server.connect().await;
    client.send(json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"})).await;
    client.send(json!({"type": "input.text", "text": "Count me."})).await;
    client.send(json!({"type": "input.done"})).await;
    client.until_session_done().await;
    let reply = request(server.addr, "GET", "/metrics", &[], "").await;
    assert!(reply.header("content-type").is_some_and(|t| t.starts_with("text/plain")));
    let text = String::from_utf8(reply.body).unwrap();
    for line in [
        "speechstream_utterances_total{transport=\"websocket\"} 1",
        "speechstream_time_to_first_audio_seconds_count 1",
        "speechstream_real_time_factor_count 1",
        "speechstream_engine_queue_depth 0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
    assert!(text.contains("speechstream_connections_open 2"), "{text}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_key_guards_everything_but_probes() {
    let mut config = ServerConfig::new(SessionOptions::default());
    config.api_key = Some("s3cret".into());
    let server = TestServer::start_with(synthetic(), config).await;
    assert_eq!(request(server.addr, "GET", "/health", &[], "").await.status, 200);
    assert_eq!(request(server.addr, "GET", "/ready", &[], "").await.status, 200);
    let reply = request(server.addr, "GET", "/v1/models", &[], "").await;
    assert_eq!((reply.status, reply.header("www-authenticate")), (401, Some("Bearer")));
    assert_eq!(reply.json()["error"]["code"], 401);
    assert_eq!(request(server.addr, "GET", "/v1/models", &[("Authorization", "Bearer nope")], "").await.status, 401);
    assert_eq!(request(server.addr, "GET", "/v1/models", &[("Authorization", "Bearer s3cret")], "").await.status, 200);
    assert_eq!(request(server.addr, "GET", "/metrics?api_key=s3cret", &[], "").await.status, 200);
    let body = json!({"input": "x"}).to_string();
    assert_eq!(request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await.status, 401);

    // The WebSocket upgrade: refused without the key; with it as header or query parameter, on.
    let url = format!("ws://{}{STREAM_PATH}", server.addr);
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("upgrade without a key: {other:?}"),
    }
    assert!(tokio_tungstenite::connect_async(format!("{url}?api_key=s3cret")).await.is_ok());
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut with_header = url.into_client_request().unwrap();
    with_header.headers_mut().insert("Authorization", "Bearer s3cret".parse().unwrap());
    assert!(tokio_tungstenite::connect_async(with_header).await.is_ok());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_refuses_clearly() {
    let mut config = ServerConfig::new(SessionOptions::default());
    config.max_connections = Some(1);
    let engine: Arc<dyn Engine> = synthetic();
    let server = TestServer::start_with(engine, config).await;
    let mut first = server.connect().await;
    first.send(json!({"type": "session.config"})).await;
    // Full: a second WebSocket is accepted, then closed with 1013 and a reason.
    let mut second = server.connect().await;
    match second.recv().await {
        Received::Closed(code) => assert_eq!(code, Some(1013)),
        other => panic!("expected a 1013 close, got {other:?}"),
    }
    let body = json!({"input": "x"}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await;
    assert_eq!(reply.status, 503);
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("capacity (1 connections)"));
    // Probes still answer on a full server.
    assert_eq!(request(server.addr, "GET", "/health", &[], "").await.status, 200);
    drop(first);
    // Once the first leaves there is room again.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await.status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "capacity never freed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server.shutdown().await;
}

/// The audio of an SSE body: its deltas' bytes, in order (the last event must be `done`).
fn sse_audio(body: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(body).expect("utf-8 events");
    let mut audio = Vec::new();
    let mut done = false;
    for data in text.lines().filter_map(|line| line.strip_prefix("data: ")) {
        let data: Value = serde_json::from_str(data).expect("JSON data");
        assert!(!done, "an event after done");
        match data["type"].as_str() {
            Some("speech.audio.delta") => {
                audio.extend(base64::engine::general_purpose::STANDARD.decode(data["audio"].as_str().unwrap()).unwrap())
            }
            Some("speech.audio.done") => done = true,
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert!(done, "no done event");
    audio
}

/// Decodes a file with ffmpeg (from Debian) to mono s16le at its own rate (opus: 24 kHz).
fn ffmpeg_decode(file: &[u8], format: &str) -> Vec<u8> {
    use std::io::Write as _;
    // Opus decodes at 48 kHz; ours are made at 24 kHz.
    let rate: &[&str] = if format == "ogg" { &["-ar", "24000"] } else { &[] };
    let mut child = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-f", format, "-i", "pipe:0", "-f", "s16le", "-ac", "1"])
        .args(rate)
        .arg("pipe:1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ffmpeg (scripts/setup.sh installs it)");
    let mut stdin = child.stdin.take().unwrap();
    let file = file.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&file));
    let out = child.wait_with_output().expect("ffmpeg");
    writer.join().unwrap().expect("write to ffmpeg");
    assert!(out.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Raw G.711 (`mulaw` or `alaw`, 8 kHz) decoded by ffmpeg to s16le.
fn ffmpeg_decode_g711(bytes: &[u8], format: &str) -> Vec<u8> {
    let path = std::env::temp_dir().join(format!("speechstream-wire-{}-{format}", std::process::id()));
    std::fs::write(&path, bytes).expect("write temp file");
    let out = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-f", format, "-ar", "8000", "-ac", "1", "-i"])
        .arg(&path)
        .args(["-f", "s16le", "pipe:1"])
        .output()
        .expect("ffmpeg (scripts/setup.sh installs it)");
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn samples(s16le: &[u8]) -> Vec<i16> {
    s16le.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_names_streams_of_every_format_rates_and_request_ids() {
    let engine = synthetic();
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let pcm = expected_pcm(&engine, "Hello over HTTP.");
    let post = |body: Value, headers: Vec<(&'static str, &'static str)>| {
        let addr = server.addr;
        async move {
            let mut all = vec![JSON];
            all.extend(headers);
            request(addr, "POST", "/v1/audio/speech", &all, &body.to_string()).await
        }
    };
    // OpenAI's model and voice names (as Pipecat and LiveKit send them) are the default voice.
    let reply = post(
        json!({"input": "Hello over HTTP.", "model": "gpt-4o-mini-tts", "voice": "ALLOY", "response_format": "pcm"}),
        vec![],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.body, pcm);
    let voices = request(server.addr, "GET", "/v1/audio/voices", &[], "").await.json();
    assert_eq!(voices["aliases"]["alloy"], "default");
    assert_eq!(voices["aliases"].as_object().unwrap().len(), 13);
    let models = request(server.addr, "GET", "/v1/models", &[], "").await.json();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, [DEFAULT_MODEL_NAME], "OpenAI's names are accepted, not listed");

    // Every format streams, raw and as SSE; each stream decodes whole with ffmpeg. Lossless
    // formats give back the very samples; mp3 and opus about as many (encoder delay, padding).
    for (format, demuxer) in [("wav", "wav"), ("flac", "flac"), ("mp3", "mp3"), ("opus", "ogg")] {
        for delivery in [json!({"stream_format": "audio"}), json!({"stream_format": "sse"})] {
            let mut body = json!({"input": "Hello over HTTP.", "response_format": format, "model": "tts-1"});
            body.as_object_mut().unwrap().extend(delivery.as_object().unwrap().clone());
            let reply = post(body, vec![]).await;
            assert_eq!(reply.status, 200, "{format} {delivery}");
            let file = if delivery["stream_format"] == "sse" { sse_audio(&reply.body) } else { reply.body };
            let decoded = ffmpeg_decode(&file, demuxer);
            match format {
                "wav" | "flac" => assert_eq!(decoded, pcm, "{format} {delivery}"),
                _ => {
                    let (got, want) = (decoded.len() as f64, pcm.len() as f64);
                    assert!((got - want).abs() < 0.1 * want + 9600.0, "{format} {delivery}: {got} bytes for {want}");
                }
            }
        }
    }

    // Other rates: resampled, the header and the byte counts at the new rate.
    let reply = post(json!({"input": "Hello over HTTP.", "sample_rate": 8000}), vec![]).await;
    assert_eq!(u32::from_le_bytes(reply.body[24..28].try_into().unwrap()), 8000);
    assert_eq!(reply.body.len() - 44, (pcm.len() / 2).div_ceil(3) * 2);
    let reply = post(
        json!({"input": "Hello over HTTP.", "sample_rate": 48000, "response_format": "pcm", "stream": true}),
        vec![],
    )
    .await;
    assert_eq!(sse_audio(&reply.body).len(), pcm.len() * 2);
    let reply =
        post(json!({"input": "Hello over HTTP.", "sample_rate": 16000, "response_format": "flac"}), vec![]).await;
    assert_eq!(ffmpeg_decode(&reply.body, "flac").len(), (pcm.len() / 2 * 2).div_ceil(3) * 2);

    // Telephony: G.711 at 8 kHz, whole and streamed; ffmpeg decodes it (as 16-bit at 8 kHz).
    for (format, demuxer, media) in [("ulaw", "mulaw", "audio/PCMU"), ("alaw", "alaw", "audio/PCMA")] {
        let reply = post(json!({"input": "Hello over HTTP.", "response_format": format}), vec![]).await;
        assert_eq!((reply.status, reply.header("content-type")), (200, Some(media)));
        assert_eq!(reply.body.len(), (pcm.len() / 2).div_ceil(3), "{format}: a byte a sample");
        // ffmpeg's decoding is our resampled audio within G.711's step (about 1/16 of a value).
        let decoded = samples(&ffmpeg_decode_g711(&reply.body, demuxer));
        let resampled = speechstream_core::resample::resample(24_000, 8000, &samples(&pcm)).unwrap();
        assert_eq!(decoded.len(), resampled.len());
        for (d, r) in decoded.iter().zip(&resampled) {
            let (d, r) = (i32::from(*d), i32::from(*r));
            assert!((d - r).abs() <= r.abs() / 16 + 40, "{format}: decoded {d} for {r}");
        }
        // Streamed: the same bytes (the resampler does not depend on how the audio is chunked).
        let streamed =
            post(json!({"input": "Hello over HTTP.", "response_format": format, "stream": true}), vec![]).await;
        assert_eq!(sse_audio(&streamed.body), reply.body, "{format}");
    }
    let reply = post(json!({"input": "x", "response_format": "ulaw", "sample_rate": 16000}), vec![]).await;
    assert_eq!(reply.status, 400);
    assert!(reply.json()["error"]["message"].as_str().unwrap().contains("G.711 is 8000 Hz"));

    // X-Request-Id on every response: the client's own, else ours (as the logs name it).
    let reply = post(json!({"input": "x"}), vec![("X-Request-Id", "client-id-42")]).await;
    assert_eq!(reply.header("x-request-id"), Some("client-id-42"));
    let reply = post(json!({"input": ""}), vec![]).await;
    assert_eq!(reply.status, 400);
    assert!(reply.header("x-request-id").is_some_and(|id| id.starts_with("speech-http-")), "{:?}", reply.headers);
    let reply = request(server.addr, "GET", "/nowhere", &[("x-request-id", "bad id with spaces")], "").await;
    assert!(reply.header("x-request-id").is_some_and(|id| id.starts_with("speech-http-")));
    server.shutdown().await;
}

// Upstream's POST /v1/audio/speech/batch: the items at once, each a whole file or its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_of_whole_files() {
    let engine = synthetic();
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let body = json!({"voice": "vivian", "response_format": "pcm", "items": [
        {"input": "First item."},
        {"input": "   "},
        {"input": "Second item.", "response_format": "wav", "voice": "alloy"},
        {"input": "Third.", "voice": "nobody"},
    ]})
    .to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech/batch", &[JSON], &body).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let batch = reply.json();
    assert!(batch["id"].as_str().unwrap().starts_with("speech-batch-"));
    assert_eq!((&batch["total"], &batch["succeeded"], &batch["failed"]), (&json!(4), &json!(2), &json!(2)));
    let results = batch["results"].as_array().unwrap();
    let audio = |i: usize| {
        base64::engine::general_purpose::STANDARD.decode(results[i]["audio_data"].as_str().unwrap()).unwrap()
    };
    assert_eq!((&results[0]["status"], &results[0]["media_type"]), (&json!("success"), &json!("audio/pcm")));
    let mut first = SynthesisRequest::new("First item.");
    first.voice = Some("vivian".into());
    assert_eq!(audio(0), engine.render(&first).0);
    assert_eq!(results[0]["usage"]["input_tokens"], 2);
    assert_eq!(results[1], json!({"index": 1, "status": "error", "error": "Input text cannot be empty"}));
    // The OpenAI alias is the default voice; a wav item is a whole file.
    assert_eq!(&audio(2)[44..], &expected_pcm(&engine, "Second item.")[..]);
    assert_eq!(results[3]["status"], "error");
    assert!(results[3]["error"].as_str().unwrap().starts_with("Invalid voice 'nobody'"));
    // The batch's own errors.
    let too_many = json!({"items": vec![json!({"input": "x"}); 33]}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech/batch", &[JSON], &too_many).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["message"], "Batch contains 33 items, exceeding the maximum of 32.");
    let reply =
        request(server.addr, "POST", "/v1/audio/speech/batch", &[JSON], r#"{"model":"x","items":[{"input":"a"}]}"#)
            .await;
    assert_eq!(reply.status, 404);
    server.shutdown().await;
}

/// The `rate` of the `audio-start` a Wyoming `synthesize` in `voice` gets; `None` for an
/// `error` instead.
async fn wyoming_audio_start_rate(addr: SocketAddr, voice: &str) -> Option<u32> {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let exchange = async {
        let mut stream = BufReader::new(TcpStream::connect(addr).await.expect("connect"));
        let data = json!({"text": "Hi.", "voice": {"name": voice}}).to_string();
        let header = json!({"type": "synthesize", "data_length": data.len()}).to_string();
        stream.get_mut().write_all(format!("{header}\n{data}").as_bytes()).await.expect("write");
        loop {
            let mut line = String::new();
            assert!(stream.read_line(&mut line).await.expect("read") > 0, "closed before audio-start");
            let header: Value = serde_json::from_str(&line).expect("a header line");
            let mut data = vec![0; header["data_length"].as_u64().unwrap_or(0) as usize];
            stream.read_exact(&mut data).await.expect("data");
            let mut payload = vec![0; header["payload_length"].as_u64().unwrap_or(0) as usize];
            stream.read_exact(&mut payload).await.expect("payload");
            let data: Value =
                if data.is_empty() { header["data"].clone() } else { serde_json::from_slice(&data).expect("data") };
            match header["type"].as_str() {
                Some("audio-start") => return data["rate"].as_u64().map(|r| r as u32),
                Some("error") => return None,
                _ => {}
            }
        }
    };
    tokio::time::timeout(TIMEOUT, exchange).await.expect("wyoming timed out")
}

/// The sample rate in a WAV file's `fmt ` chunk (a canonical 44-byte header).
fn wav_rate(file: &[u8]) -> u32 {
    assert!(file.starts_with(b"RIFF") && file.len() >= 44, "not a WAV file");
    u32::from_le_bytes([file[24], file[25], file[26], file[27]])
}

// Issue 31: two engines of different sample rates served as one (`Engines`), with no transport
// change: each voice's audio comes at its engine's rate over WebSocket and HTTP, both engines'
// voices and models are listed, an unknown voice is refused as for one engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_of_different_rates_behind_one_server() {
    use speechstream_core::engines::Engines;

    let family = |model: &str, sample_rate: u32, voices: &[&str]| {
        let voices = voices.iter().map(|v| v.to_string()).collect();
        Recorded::new(SyntheticEngine::new(SyntheticOptions {
            model_name: model.to_owned(),
            sample_rate,
            voices,
            ..SyntheticOptions::default()
        }))
    };
    let alpha = family("alpha", 24_000, &["vivian", "serena"]);
    let beta = family("beta", 22_050, &["kestrel"]);
    let engines = Engines::new(vec![alpha.clone(), beta.clone()]).expect("two engines");
    let options = speechstream_core::wyoming::WyomingOptions::default();
    let (server, wyoming) =
        TestServer::start_with_wyoming(Arc::new(engines), ServerConfig::new(SessionOptions::default()), options).await;

    // Wyoming: the same voice rule (any case, the server's aliases) and each engine's rate.
    for (voice, rate) in [("KESTREL", 22_050), ("Vivian", 24_000), ("alloy", 24_000)] {
        assert_eq!(wyoming_audio_start_rate(wyoming, voice).await, Some(rate), "{voice}");
    }
    assert_eq!(wyoming_audio_start_rate(wyoming, "nobody").await, None);

    let (status, body) = server.http("GET", "/v1/models").await;
    assert_eq!(status, 200);
    let models: Vec<String> = serde_json::from_str::<Value>(&body).expect("JSON")["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|m| m["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(models, ["alpha", "beta"]);
    let (status, body) = server.http("GET", "/v1/audio/voices").await;
    assert_eq!(status, 200);
    let voices: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(voices["voices"], json!(["default", "kestrel", "serena", "vivian"]));

    // HTTP: the voice (any case, or an alias), else the model, picks the engine and its rate.
    for (body, rate) in [
        (json!({"input": "Hi.", "voice": "KESTREL"}), 22_050),
        (json!({"input": "Hi.", "voice": "serena"}), 24_000),
        (json!({"input": "Hi.", "voice": "alloy"}), 24_000),
        (json!({"input": "Hi.", "model": "beta"}), 22_050),
        (json!({"input": "Hi."}), 24_000),
    ] {
        let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body.to_string()).await;
        assert_eq!(reply.status, 200, "{body}");
        assert_eq!(wav_rate(&reply.body), rate, "{body}");
        // The whole of what the engine of that rate made for the request.
        let engine = if rate == 22_050 { &beta } else { &alpha };
        let (_, last) = engine.requests().pop().expect("a request");
        assert_eq!(&reply.body[44..], &engine.inner().render(&last).0[..], "{body}");
    }
    let voice_of = |requests: Vec<(speechstream_core::engine::RequestId, SynthesisRequest)>| -> Vec<Option<String>> {
        requests.into_iter().map(|(_, r)| r.voice).collect()
    };
    // Each engine got its requests (Wyoming's first) with its own names for the voices.
    let kestrel = || Some("kestrel".to_owned());
    assert_eq!(voice_of(beta.requests()), [kestrel(), kestrel(), None]);
    assert_eq!(voice_of(alpha.requests()), [Some("vivian".to_owned()), None, Some("serena".to_owned()), None, None]);
    let body = json!({"input": "Hi.", "voice": "nobody"}).to_string();
    let reply = request(server.addr, "POST", "/v1/audio/speech", &[JSON], &body).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["message"], "Invalid voice 'nobody'. Supported: kestrel, serena, vivian");

    // WebSocket: a whole WAV file and a PCM stream, each at its voice's engine's rate.
    let mut client = server.connect().await;
    for (voice, rate) in [("Kestrel", 22_050), ("vivian", 24_000)] {
        client.send(json!({"type": "session.config", "voice": voice, "response_format": "wav"})).await;
        client.send(json!({"type": "input.text", "text": "Hello."})).await;
        client.send(json!({"type": "input.done"})).await;
        assert_eq!(client.json().await["type"], "audio.start");
        assert_eq!(wav_rate(&client.binary().await), rate, "{voice}");
        assert_eq!(client.json().await["type"], "audio.done");
        assert_eq!(client.json().await["type"], "session.done");
    }
    let config = json!({"type": "session.config", "voice": "kestrel", "stream_audio": true, "response_format": "pcm"});
    client.send(config).await;
    client.send(json!({"type": "input.text", "text": "Hello."})).await;
    client.send(json!({"type": "input.done"})).await;
    let start = client.json().await;
    assert_eq!((&start["type"], &start["sample_rate"]), (&json!("audio.start"), &json!(22_050)), "{start}");
    let mut streamed = Vec::new();
    for received in client.until_session_done().await {
        if let Received::Binary(bytes) = received {
            streamed.extend(bytes);
        }
    }
    let (_, last) = beta.requests().pop().expect("a request");
    assert_eq!(streamed, beta.inner().render(&last).0);
    client.send(json!({"type": "session.config", "voice": "nobody"})).await;
    client.send(json!({"type": "input.text", "text": "Hello."})).await;
    client.send(json!({"type": "input.done"})).await;
    assert_eq!(client.json().await["type"], "audio.start");
    let error = client.json().await;
    assert_eq!(
        error["message"],
        "Generation failed for utterance 3, sentence 0: Invalid voice 'nobody'. Supported: kestrel, serena, vivian"
    );
}

/// ADTS `aac` decoded by ffmpeg against the audio it was made from: as long within a frame
/// (the encoder's priming frame is not sent), lined up, and past the first frame (which fades
/// in) the same waveform.
fn assert_aac_is(file: &[u8], want: &[i16], what: &str) {
    let decoded = samples(&ffmpeg_decode(file, "aac"));
    let extra = decoded.len() as i64 - want.len() as i64;
    assert!((0..1024).contains(&extra), "{what}: decoded {} samples for {}", decoded.len(), want.len());
    let (mut dot, mut dd, mut ww) = (0.0, 0.0, 0.0);
    for (&d, &w) in decoded[1024..want.len()].iter().zip(&want[1024..]) {
        let (d, w) = (f64::from(d), f64::from(w));
        (dot, dd, ww) = (dot + d * w, dd + d * d, ww + w * w);
    }
    let correlation = dot / (dd * ww).sqrt().max(1.0);
    assert!(correlation > 0.9, "{what}: correlation {correlation:.3}");
}

// Issue 34: `aac` (ADTS, audio/aac) on HTTP whole and streamed, at other rates, in a batch and
// over the WebSocket; ffmpeg decodes each to the audio we made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aac_over_http_batch_and_websocket() {
    let engine = synthetic();
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let text = "Hello over HTTP, in AAC this time.";
    let pcm = expected_pcm(&engine, text);
    let want = samples(&pcm);
    let post = |body: Value| {
        let addr = server.addr;
        async move { request(addr, "POST", "/v1/audio/speech", &[JSON], &body.to_string()).await }
    };
    let whole = post(json!({"input": text, "response_format": "aac"})).await;
    assert_eq!((whole.status, whole.header("content-type")), (200, Some("audio/aac")));
    assert_aac_is(&whole.body, &want, "whole");
    // Sent as it is made: the bytes of the file the encoder makes in one piece.
    assert_eq!(whole.header("transfer-encoding"), Some("chunked"));
    assert_eq!(whole.body, speechstream_core::encode::encode_s16le(ResponseFormat::Aac, pcm.clone(), 24_000).unwrap());
    for delivery in ["audio", "sse"] {
        let reply = post(json!({"input": text, "response_format": "aac", "stream_format": delivery})).await;
        assert_eq!(reply.status, 200, "{delivery}");
        let file = if delivery == "sse" { sse_audio(&reply.body) } else { reply.body };
        assert_eq!(file, whole.body, "{delivery}: the same ADTS stream");
    }
    for rate in [8_000u32, 16_000, 48_000] {
        let reply = post(json!({"input": text, "response_format": "aac", "sample_rate": rate, "stream": true})).await;
        assert_eq!(reply.status, 200, "{rate}");
        let resampled = speechstream_core::resample::resample(24_000, rate, &want).unwrap();
        assert_aac_is(&sse_audio(&reply.body), &resampled, &format!("{rate} Hz"));
    }

    let body = json!({"response_format": "aac", "items": [{"input": text}, {"input": "x", "sample_rate": 7}]});
    let reply = request(server.addr, "POST", "/v1/audio/speech/batch", &[JSON], &body.to_string()).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let results = reply.json()["results"].clone();
    assert_eq!((&results[0]["status"], &results[0]["media_type"]), (&json!("success"), &json!("audio/aac")));
    let item = base64::engine::general_purpose::STANDARD.decode(results[0]["audio_data"].as_str().unwrap()).unwrap();
    assert_aac_is(&item, &want, "batch");

    // The WebSocket: the file in binary frames after audio.start (format aac).
    let mut client = server.connect().await;
    client.send(json!({"type": "session.config", "response_format": "aac", "sample_rate": 22050})).await;
    client.send(json!({"type": "input.text", "text": text})).await;
    client.send(json!({"type": "input.done"})).await;
    let seen = client.until_session_done().await;
    let Some(Received::Json(start)) = seen.first() else { panic!("no audio.start: {seen:?}") };
    assert_eq!(start["format"], "aac", "{start}");
    let file: Vec<u8> = seen
        .iter()
        .flat_map(|m| match m {
            Received::Binary(b) => b.clone(),
            _ => Vec::new(),
        })
        .collect();
    let resampled = speechstream_core::resample::resample(24_000, 22_050, &want).unwrap();
    assert_aac_is(&file, &resampled, "websocket");
    server.shutdown().await;
}
