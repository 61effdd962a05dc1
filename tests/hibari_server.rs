//! The server with the hibari voice, end to end over a real WebSocket on loopback: every mode of
//! the protocol (non-streamed wav checked with ffmpeg, streamed PCM, word timestamps matching the
//! text, codec_tokens refused, cancel mid-stream, a bad voice). Needs `.cache` from
//! scripts/setup-voice.sh and ffmpeg (scripts/setup.sh installs both). No timing asserts; the time to
//! first audio is printed (`cargo test --test hibari_server -- --nocapture`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use speechstream_core::session::SessionOptions;
use speechstream_engine_libtorch::{EngineOptions, TorchEngine};
use speechstream_transports::{serve, ServerConfig, STREAM_PATH};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

/// Generous: debug builds on a busy 2-core machine.
const TIMEOUT: Duration = Duration::from_secs(120);

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[derive(Debug)]
enum Frame {
    Json(Value),
    Binary(Vec<u8>),
}

struct Client {
    ws: Ws,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr, config: Value) -> Client {
        let url = format!("ws://{addr}{STREAM_PATH}");
        let (ws, _) = tokio_tungstenite::connect_async(url).await.expect("connect");
        let mut client = Client { ws };
        client.send(config).await;
        client
    }

    async fn send(&mut self, message: Value) {
        self.ws.send(Message::Text(message.to_string().into())).await.expect("send");
    }

    async fn recv(&mut self) -> Frame {
        loop {
            let message = tokio::time::timeout(TIMEOUT, self.ws.next()).await.expect("timed out").expect("open");
            match message.expect("frame") {
                Message::Text(t) => return Frame::Json(serde_json::from_str(&t).expect("json")),
                Message::Binary(b) => return Frame::Binary(b.to_vec()),
                Message::Close(c) => panic!("closed: {c:?}"),
                _ => {}
            }
        }
    }

    /// Sends the text and input.done; returns every frame up to session.done.
    async fn say(&mut self, text: &str) -> Vec<Frame> {
        self.send(json!({"type": "input.text", "text": text})).await;
        self.send(json!({"type": "input.done"})).await;
        self.until_done().await
    }

    async fn until_done(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let done = matches!(&frame, Frame::Json(v) if v["type"] == "session.done");
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }
}

fn assets() -> PathBuf {
    let cache = std::env::var_os("SPEECHSTREAM_CACHE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache"), PathBuf::from);
    let dir = cache.join("hibari");
    assert!(dir.join("hibari.onnx").is_file(), "{} missing: run scripts/setup.sh first", dir.display());
    dir
}

fn json_of(frames: &[Frame], kind: &str) -> Vec<Value> {
    frames
        .iter()
        .filter_map(|f| if let Frame::Json(v) = f { (v["type"] == kind).then(|| v.clone()) } else { None })
        .collect()
}

fn binaries(frames: &[Frame]) -> Vec<Vec<u8>> {
    frames.iter().filter_map(|f| if let Frame::Binary(b) = f { Some(b.clone()) } else { None }).collect()
}

fn text_words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.chars().filter(|c| c.is_alphanumeric() || *c == '\'').collect::<String>())
        .filter(|w| !w.is_empty())
        .collect()
}

/// Decodes an audio file with ffmpeg to 24 kHz mono s16le.
fn ffmpeg_decode(file: &[u8], name: &str) -> Vec<u8> {
    let path = std::env::temp_dir().join(format!("speechstream-hibari-{}-{name}", std::process::id()));
    std::fs::write(&path, file).expect("write temp file");
    let out = std::process::Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&path)
        .args(["-f", "s16le", "-ac", "1", "-ar", "24000", "-"])
        .output()
        .expect("ffmpeg (scripts/setup.sh installs it)");
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hibari_through_every_mode() {
    let mut options = EngineOptions::new(assets());
    // Behaviour, not capacity, is tested here: admission (which reads the machine's speed)
    // must not refuse a stream because the tests run side by side.
    options.admission = speechstream_engine_libtorch::AdmissionMode::Off;
    options.threads = Some(1);
    let engine = Arc::new(tokio::task::block_in_place(|| TorchEngine::new(options)).expect("engine"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, engine, ServerConfig::new(SessionOptions::default()), async {
        let _ = stopped.await;
    }));
    let text = "Hello world, this is hibari.";

    // Streamed PCM, seeded; also the time to first audio after input.done.
    let mut c = Client::connect(
        addr,
        json!({"type": "session.config", "stream_audio": true, "response_format": "pcm", "seed": 5}),
    )
    .await;
    c.send(json!({"type": "input.text", "text": text})).await;
    let sent = Instant::now();
    c.send(json!({"type": "input.done"})).await;
    let mut first_audio = None;
    let mut frames = Vec::new();
    loop {
        let frame = c.recv().await;
        if matches!(frame, Frame::Binary(_)) {
            first_audio.get_or_insert_with(|| sent.elapsed());
        }
        let done = matches!(&frame, Frame::Json(v) if v["type"] == "session.done");
        frames.push(frame);
        if done {
            break;
        }
    }
    eprintln!("time to first audio after input.done: {:.1} ms (debug build)", first_audio.unwrap().as_secs_f64() * 1e3);
    let start = &json_of(&frames, "audio.start")[0];
    assert_eq!((start["sample_rate"].as_u64(), start["sentence_text"].as_str()), (Some(24_000), Some(text)));
    let chunks = binaries(&frames);
    assert!(chunks.len() >= 2, "streamed in {} chunks", chunks.len());
    let streamed: Vec<u8> = chunks.concat();
    let done = &json_of(&frames, "audio.done")[0];
    assert_eq!((done["total_bytes"].as_u64(), done["error"].as_bool()), (Some(streamed.len() as u64), Some(false)));
    assert!(streamed.len() > 24_000, "{} bytes is under half a second", streamed.len());

    // Non-streamed wav with the same seed: ffmpeg decodes it to the same samples.
    let mut c =
        Client::connect(addr, json!({"type": "session.config", "response_format": "wav", "seed": 5, "voice": "heart"}))
            .await;
    let frames = c.say(text).await;
    let files = binaries(&frames);
    assert_eq!(files.len(), 1);
    let decoded = ffmpeg_decode(&files[0], "a.wav");
    assert_eq!(decoded.len(), streamed.len(), "wav duration vs streamed");
    assert_eq!(decoded, streamed);
    // A second utterance on the same connection.
    let frames = c.say("Goodbye.").await;
    assert_eq!(json_of(&frames, "session.done")[0]["utterance_index"], 1);
    assert!(!ffmpeg_decode(&binaries(&frames)[0], "b.wav").is_empty());

    // Word timestamps ride audio.chunk frames; the words are the text's, in order.
    let mut c = Client::connect(
        addr,
        json!({"type": "session.config", "stream_audio": true, "response_format": "pcm", "word_timestamps": true, "seed": 5}),
    )
    .await;
    let frames = c.say(text).await;
    let chunks = json_of(&frames, "audio.chunk");
    let last = chunks.last().expect("audio.chunk frames");
    let words = last["timestamps"].as_array().expect("timestamps");
    let names: Vec<&str> = words.iter().map(|w| w["word"].as_str().unwrap()).collect();
    assert_eq!(names, text_words(text));
    // Our `chars` extension: where each word is in the text sent.
    for w in words {
        let span = w["chars"].as_array().expect("chars");
        let (s, e) = (span[0].as_u64().unwrap() as usize, span[1].as_u64().unwrap() as usize);
        let written: String = text.chars().skip(s).take(e - s).collect();
        assert_eq!(written, w["word"].as_str().unwrap(), "{w}");
    }
    let mut previous_end = 0;
    for w in words {
        let (s, e) = (w["start_ms"].as_i64().unwrap(), w["end_ms"].as_i64().unwrap());
        assert!(previous_end <= s && s < e && e <= last["chunk_end_ms"].as_i64().unwrap(), "{words:?}");
        previous_end = e;
    }
    let audio: Vec<u8> = chunks
        .iter()
        .flat_map(|c| base64::engine::general_purpose::STANDARD.decode(c["audio_b64"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(audio, streamed);

    // codec_tokens: not supported by this model.
    let mut c = Client::connect(
        addr,
        json!({"type": "session.config", "stream_audio": true, "response_format": "pcm", "output_mode": "codec_tokens"}),
    )
    .await;
    let frames = c.say(text).await;
    let error = &json_of(&frames, "error")[0];
    assert!(error["message"].as_str().unwrap().contains("not supported"), "{error}");

    // An unknown voice fails the utterance with the list of voices.
    let mut c = Client::connect(addr, json!({"type": "session.config", "voice": "nobody"})).await;
    let frames = c.say(text).await;
    let error = &json_of(&frames, "error")[0];
    assert!(error["message"].as_str().unwrap().ends_with("Invalid voice 'nobody'. Supported: heart"), "{error}");

    // Cancel mid-stream: the stream ends early, marked cancelled.
    let long = "This is a long text that takes a while to speak. It goes on for several sentences. \
                Each one adds a few seconds of audio. The client will not wait for all of them. \
                So it cancels the stream early on.";
    let mut c =
        Client::connect(addr, json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"})).await;
    let whole: usize = binaries(&c.say(long).await).iter().map(Vec::len).sum();
    c.send(json!({"type": "input.text", "text": long})).await;
    c.send(json!({"type": "input.done"})).await;
    let mut frames = Vec::new();
    loop {
        let frame = c.recv().await;
        let audio = matches!(frame, Frame::Binary(_));
        frames.push(frame);
        if audio {
            break;
        }
    }
    c.send(json!({"type": "input.cancel"})).await;
    frames.extend(c.until_done().await);
    let done = &json_of(&frames, "audio.done")[0];
    assert_eq!(done["cancelled"], true, "{done}");
    let bytes = done["total_bytes"].as_u64().unwrap();
    assert!(bytes < whole as u64, "{bytes} of {whole} bytes: the whole text was sent");

    let _ = stop.send(());
    tokio::time::timeout(TIMEOUT, server).await.expect("shutdown").expect("join").expect("serve");
}

/// Ours (docs/protocol.md, "What was heard"): a listener that plays the stream in real time
/// barges in at random points and says how much it played; the server answers with the words
/// it heard whole, the word it was in, and their places in the text, which must match the
/// utterance's word timestamps and the audio the client actually received. With a short
/// `max_lead` the stream is still being sent at most cancel points (`audio.done` carries the
/// answer); near the end it was sent whole and `input.cancelled` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_time_listener_that_barges_in_hears_what_it_is_told() {
    let mut options = EngineOptions::new(assets());
    options.admission = speechstream_engine_libtorch::AdmissionMode::Off;
    options.threads = Some(1);
    options.pacing.max_lead = Duration::from_millis(1500);
    let engine = Arc::new(tokio::task::block_in_place(|| TorchEngine::new(options)).expect("engine"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, engine, ServerConfig::new(SessionOptions::default()), async {
        let _ = stopped.await;
    }));
    let text = "The library closes early on Sundays. My brother bought a red bicycle last summer.";
    let chars: Vec<char> = text.chars().collect();

    // The utterance's timestamps, as word-timestamps mode sends them.
    let config = json!({"type": "session.config", "stream_audio": true, "response_format": "pcm", "seed": 5});
    let mut with_words = config.clone();
    with_words["word_timestamps"] = json!(true);
    let frames = Client::connect(addr, with_words).await.say(text).await;
    let last = json_of(&frames, "audio.chunk").pop().expect("audio.chunk");
    let timestamps: Vec<(String, i64, i64)> = last["timestamps"]
        .as_array()
        .expect("timestamps")
        .iter()
        .map(|w| {
            (w["word"].as_str().unwrap().to_owned(), w["start_ms"].as_i64().unwrap(), w["end_ms"].as_i64().unwrap())
        })
        .collect();
    let total_ms = last["chunk_end_ms"].as_i64().unwrap();

    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("cancel points from seed {seed}");
    let mut random = move |below: i64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as i64
    };
    let mut c = Client::connect(addr, config).await;
    let (mut in_flight, mut after) = (0, 0);
    for round in 0..6 {
        let cancel_at = Duration::from_millis(100 + random(total_ms - 200) as u64);
        c.send(json!({"type": "input.text", "text": text})).await;
        c.send(json!({"type": "input.done"})).await;
        // Play: the playback clock starts with the first audio and never passes what arrived.
        let (mut received, mut first_audio, mut finished) = (0usize, None::<Instant>, false);
        loop {
            let wait = first_audio.map_or(TIMEOUT, |t| (t + cancel_at).saturating_duration_since(Instant::now()));
            if wait.is_zero() {
                break;
            }
            match tokio::time::timeout(wait, c.recv()).await {
                Err(_) => break,
                Ok(Frame::Binary(b)) => {
                    first_audio.get_or_insert_with(Instant::now);
                    received += b.len();
                }
                Ok(Frame::Json(v)) => finished |= v["type"] == "session.done",
            }
            if finished {
                tokio::time::sleep((first_audio.unwrap() + cancel_at).saturating_duration_since(Instant::now())).await;
                break;
            }
        }
        let played_ms = (first_audio.unwrap().elapsed().as_millis() as i64).min(received as i64 / 48);
        let cancel = if round % 2 == 0 {
            json!({"type": "input.cancel", "played_ms": played_ms})
        } else {
            json!({"type": "input.cancel", "played_bytes": played_ms * 48})
        };
        c.send(cancel).await;
        // The answer: audio.done (then session.done) while it was still being sent, else
        // input.cancelled; audio may still arrive before either.
        let heard = loop {
            match c.recv().await {
                Frame::Binary(b) => received += b.len(),
                Frame::Json(v) if v["type"] == "input.cancelled" => {
                    after += 1;
                    break v["heard"].clone();
                }
                Frame::Json(v) if v["type"] == "audio.done" && v["cancelled"] == true => {
                    in_flight += 1;
                    assert_eq!(v["total_bytes"].as_u64(), Some(received as u64), "{v}");
                    assert!(matches!(c.recv().await, Frame::Json(d) if d["type"] == "session.done"));
                    break v["heard"].clone();
                }
                Frame::Json(v) => {
                    assert!(["audio.done", "session.done"].contains(&v["type"].as_str().unwrap()), "{v}");
                    finished = true;
                }
            }
        };
        eprintln!("cancel at {played_ms} ms of {total_ms} (finished sending: {finished}): heard {heard}");
        assert!(heard.is_object(), "no heard in the answer");
        assert_eq!(heard["played_ms"].as_i64(), Some(played_ms), "{heard}");
        assert!(played_ms * 48 <= received as i64, "played more than was received");
        let expected: Vec<&(String, i64, i64)> = timestamps.iter().take_while(|w| w.2 <= played_ms).collect();
        let words = heard["words"].as_array().unwrap();
        assert_eq!(words.len(), expected.len(), "{heard}");
        for (w, (name, start, end)) in words.iter().zip(&expected) {
            assert_eq!(
                (w["word"].as_str(), w["start_ms"].as_i64(), w["end_ms"].as_i64()),
                (Some(name.as_str()), Some(*start), Some(*end))
            );
            let span = w["chars"].as_array().unwrap();
            let (a, b) = (span[0].as_u64().unwrap() as usize, span[1].as_u64().unwrap() as usize);
            assert_eq!(chars[a..b].iter().collect::<String>(), *name);
        }
        let partial = timestamps.get(expected.len()).filter(|w| w.1 < played_ms);
        assert_eq!(heard["partial_word"]["word"].as_str(), partial.map(|w| w.0.as_str()), "{heard}");
        let end = heard["chars"][1].as_u64().unwrap() as usize;
        assert_eq!(heard["text"].as_str().unwrap(), chars[..end].iter().collect::<String>());
        assert_eq!(
            text_words(heard["text"].as_str().unwrap()),
            expected.iter().map(|w| w.0.clone()).collect::<Vec<_>>()
        );
    }
    eprintln!("{in_flight} answered in audio.done, {after} in input.cancelled");

    let _ = stop.send(());
    tokio::time::timeout(TIMEOUT, server).await.expect("shutdown").expect("join").expect("serve");
}
