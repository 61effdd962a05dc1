//! docs/protocol.md §g.A over real sockets: the reference suite's WebSocket cases, with the fake
//! backend's canned audio replaced by the synthetic engine (whose bytes we can predict) or by a
//! scripted engine where a case needs exact chunks or a failure.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use speechstream::synthetic::{SyntheticEngine, SyntheticOptions};
use speechstream_core::engine::{SynthesisRequest, WordTiming};
use speechstream_core::parse::Limits;
use speechstream_core::session::{SessionOptions, BINARY_FRAME_ERROR};

use crate::support::{configured, Received, Recorded, Scripted, Step, TestServer};

pub fn synthetic() -> Arc<Recorded<SyntheticEngine>> {
    Recorded::new(SyntheticEngine::new(SyntheticOptions::default()))
}

fn config(extra: Value) -> Value {
    let mut message = json!({"type": "session.config"});
    if let (Some(message), Some(extra)) = (message.as_object_mut(), extra.as_object()) {
        message.extend(extra.clone());
    }
    message
}

fn text(text: &str) -> Value {
    json!({"type": "input.text", "text": text})
}

fn done() -> Value {
    json!({"type": "input.done"})
}

fn audio_done(utterance: u64, total_bytes: usize, error: bool) -> Value {
    json!({"type": "audio.done", "utterance_index": utterance, "sentence_index": 0,
           "total_bytes": total_bytes, "error": error})
}

fn session_done(utterance: u64, total_sentences: u64) -> Value {
    json!({"type": "session.done", "utterance_index": utterance, "total_sentences": total_sentences})
}

fn error(message: &str) -> Value {
    json!({"type": "error", "message": message})
}

/// The PCM inside a WAV file (the `data` chunk), checking the format on the way.
fn wav_pcm(wav: &[u8]) -> &[u8] {
    assert_eq!(&wav[..4], b"RIFF");
    assert_eq!(&wav[8..12], b"WAVE");
    let mut at = 12;
    while at + 8 <= wav.len() {
        let id = &wav[at..at + 4];
        let size = u32::from_le_bytes([wav[at + 4], wav[at + 5], wav[at + 6], wav[at + 7]]) as usize;
        let body = &wav[at + 8..(at + 8 + size).min(wav.len())];
        if id == b"fmt " {
            let rate = u32::from_le_bytes([body[4], body[5], body[6], body[7]]);
            assert_eq!(rate, 24000);
        }
        if id == b"data" {
            return body;
        }
        at += 8 + size + (size & 1);
    }
    panic!("no data chunk in the WAV");
}

fn voice_of(request: &(speechstream_core::engine::RequestId, SynthesisRequest)) -> Option<&str> {
    request.1.voice.as_deref()
}

/// One utterance in the default (whole-file WAV) mode; returns the audio.
async fn wav_utterance(client: &mut crate::support::Client, utterance: u64, sent: &str) -> Vec<u8> {
    client.send(text(sent)).await;
    client.send(done()).await;
    let start = client.json().await;
    assert_eq!(start["type"], "audio.start");
    assert_eq!(start["utterance_index"], utterance);
    assert_eq!(start["sentence_index"], 0);
    assert_eq!(start["sentence_text"], sent.trim());
    assert_eq!(start["format"], "wav");
    assert!(start.get("sample_rate").is_none());
    let audio = client.binary().await;
    assert!(audio.starts_with(b"RIFF"));
    assert_eq!(client.json().await, audio_done(utterance, audio.len(), false));
    assert_eq!(client.json().await, session_done(utterance, 1));
    audio
}

// 1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streaming_single_frame() {
    let engine = synthetic();
    let (_server, mut client) = configured(engine.clone(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    let audio = wav_utterance(&mut client, 0, "Hello world. ").await;
    let requests = engine.requests();
    assert_eq!(requests.len(), 1);
    let (expected, _) = engine.inner().render(&requests[0].1);
    assert_eq!(wav_pcm(&audio), &expected[..]);
    assert!(!requests[0].1.stream || requests[0].1.text == "Hello world.");
}

// 2
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_done_flushes_and_keeps_connection_open() {
    let engine = synthetic();
    let (_server, mut client) = configured(engine.clone(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    wav_utterance(&mut client, 0, "First utterance. ").await;
    wav_utterance(&mut client, 1, "Second utterance. ").await;
    let requests = engine.requests();
    assert_eq!(requests.len(), 2);
    // The engine gets its own name for the voice the client spelled "Vivian" (issue 31).
    assert!(requests.iter().all(|r| voice_of(r) == Some("vivian")));
    assert_eq!(requests[0].0.connection, requests[1].0.connection);
    assert_ne!(requests[0].0, requests[1].0);
}

// 3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentence_index_stays_within_the_flushed_utterance() {
    let (_server, mut client) = configured(synthetic(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    for utterance in 0..3 {
        wav_utterance(&mut client, utterance, "Hello world. ").await;
    }
}

// 4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_config_between_utterances_replaces_config() {
    let engine = synthetic();
    let server = TestServer::start(engine.clone(), SessionOptions::default()).await;
    let mut client = server.connect().await;
    for (utterance, voice) in ["Vivian", "Serena"].into_iter().enumerate() {
        client.send(config(json!({"voice": voice}))).await;
        wav_utterance(&mut client, utterance as u64, "Hello world. ").await;
    }
    let voices: Vec<_> = engine.requests().iter().map(|r| voice_of(r).map(str::to_owned)).collect();
    // The engine's own names for them (issue 31: the core resolves the client's spelling).
    assert_eq!(voices, vec![Some("vivian".to_owned()), Some("serena".to_owned())]);
}

// 5
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_config_rejected_while_input_is_buffered() {
    let engine = synthetic();
    let (_server, mut client) = configured(engine.clone(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    client.send(text("Hello world. ")).await;
    client.send(config(json!({"voice": "Serena"}))).await;
    let refused = client.json().await;
    assert_eq!(refused["type"], "error");
    assert!(refused["message"].as_str().unwrap_or("").contains("while input is buffered"));
    client.send(done()).await;
    let start = client.json().await;
    assert_eq!(start["sentence_text"], "Hello world.");
    let audio = client.binary().await;
    assert_eq!(client.json().await, audio_done(0, audio.len(), false));
    assert_eq!(client.json().await, session_done(0, 1));
    assert_eq!(voice_of(&engine.requests()[0]), Some("vivian"));
}

// 6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_close_ends_connection() {
    let (_server, mut client) = configured(synthetic(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    wav_utterance(&mut client, 0, "Hello world. ").await;
    client.send(json!({"type": "session.close"})).await;
    assert_eq!(client.closed().await, Some(1000));
}

// 7
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_closes_reused_connection() {
    let options = SessionOptions { idle_timeout: Duration::from_millis(200), ..SessionOptions::default() };
    let (_server, mut client) = configured(synthetic(), options, json!({"voice": "Vivian"})).await;
    wav_utterance(&mut client, 0, "Hello world. ").await;
    assert_eq!(client.json().await, error("Idle timeout: no message received"));
    assert_eq!(client.closed().await, Some(1000));
}

// 8, with the reference's canned chunks
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_multiple_binary_frames() {
    let chunks: Vec<Vec<u8>> = vec![vec![1, 2], vec![3, 4, 5], vec![6]];
    let engine = Recorded::new(Scripted::new(chunks.iter().map(|c| Step::Audio(c.clone(), 24000)).collect()));
    let (_server, mut client) = configured(
        engine.clone(),
        SessionOptions::default(),
        json!({"voice": "Vivian", "stream_audio": true, "response_format": "pcm",
                             "initial_codec_chunk_frames": 12}),
    )
    .await;
    client.send(text("Hello world. ")).await;
    client.send(done()).await;
    let start = client.json().await;
    assert_eq!(start["type"], "audio.start");
    assert_eq!(start["format"], "pcm");
    assert_eq!(start["sample_rate"], 24000);
    for chunk in &chunks {
        assert_eq!(&client.binary().await, chunk);
    }
    assert_eq!(client.json().await, audio_done(0, 6, false));
    assert_eq!(client.json().await, session_done(0, 1));
    let requests = engine.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].1.stream);
    assert_eq!(requests[0].1.initial_codec_chunk_frames, Some(12));
    assert!(engine.aborts().is_empty());
}

// 8, with the synthetic engine's real audio
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_frames_carry_the_engine_audio() {
    let engine = synthetic();
    let (_server, mut client) = configured(
        engine.clone(),
        SessionOptions::default(),
        json!({"stream_audio": true, "response_format": "pcm", "seed": 3}),
    )
    .await;
    client.send(text("Streaming speech over a socket, chunk by chunk.")).await;
    client.send(done()).await;
    assert_eq!(client.json().await["type"], "audio.start");
    let mut pcm = Vec::new();
    let mut frames = 0;
    let done = loop {
        match client.recv().await {
            Received::Binary(chunk) => {
                frames += 1;
                pcm.extend(chunk);
            }
            Received::Json(value) => break value,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert!(frames > 1, "expected several chunks");
    assert_eq!(done, audio_done(0, pcm.len(), false));
    assert_eq!(client.json().await, session_done(0, 1));
    let (expected, _) = engine.inner().render(&engine.requests()[0].1);
    assert_eq!(pcm, expected);
}

// 9
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn word_timestamps_requires_configured_aligner() {
    let engine = Recorded::new(Scripted::new(vec![Step::Audio(vec![1, 2], 24000)]));
    let (_server, mut client) = configured(
        engine.clone(),
        SessionOptions::default(),
        json!({"voice": "Vivian", "stream_audio": true, "response_format": "pcm",
                             "word_timestamps": true}),
    )
    .await;
    client.send(text("Hello world. ")).await;
    client.send(done()).await;
    let refused = client.json().await;
    assert_eq!(refused["type"], "error");
    assert!(refused["message"].as_str().unwrap_or("").contains("without --forced-aligner"));
    assert_eq!(client.json().await, session_done(0, 1));
    assert!(engine.requests().is_empty());
}

fn words(pairs: &[(&str, i64, i64)]) -> Vec<WordTiming> {
    pairs
        .iter()
        .map(|(word, start_ms, end_ms)| WordTiming {
            word: (*word).to_owned(),
            start_ms: *start_ms,
            end_ms: *end_ms,
            chars: None,
        })
        .collect()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

// 10
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn word_timestamps_emit_pipeline_json_frame() {
    let engine = Recorded::new(
        Scripted::new(vec![
            Step::Audio(vec![1; 1000], 1000),
            Step::Audio(vec![2; 1000], 1000),
            Step::Words(words(&[("Hello", 0, 200), ("world", 200, 900)])),
        ])
        .with_word_timestamps(),
    );
    let (_server, mut client) = configured(
        engine.clone(),
        SessionOptions::default(),
        json!({"voice": "Vivian", "stream_audio": true, "response_format": "pcm",
                             "word_timestamps": true}),
    )
    .await;
    client.send(text("Hello world. ")).await;
    client.send(done()).await;
    let start = client.json().await;
    assert_eq!(start["type"], "audio.start");
    assert_eq!(start["word_timestamps"], true);
    let chunk = |id: u64, start: i64, end: i64, audio: &[u8], timestamps: Value| {
        json!({"type": "audio.chunk", "utterance_index": 0, "sentence_index": 0, "chunk_id": id,
               "chunk_start_ms": start, "chunk_end_ms": end, "sample_rate": 1000,
               "audio_b64": b64(audio), "timestamps": timestamps})
    };
    assert_eq!(client.json().await, chunk(0, 0, 500, &[1; 1000], Value::Null));
    assert_eq!(client.json().await, chunk(1, 500, 1000, &[2; 1000], Value::Null));
    assert_eq!(
        client.json().await,
        chunk(
            2,
            0,
            1000,
            b"",
            json!([{"word": "Hello", "start_ms": 0, "end_ms": 200},
                   {"word": "world", "start_ms": 200, "end_ms": 900}])
        )
    );
    assert_eq!(client.json().await, audio_done(0, 2000, false));
    assert_eq!(client.json().await, session_done(0, 1));
    assert!(engine.requests()[0].1.output.words());
}

// 11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn word_timestamps_emit_word_dicts() {
    let engine = Recorded::new(
        Scripted::new(vec![
            Step::Audio(vec![1; 1000], 1000),
            Step::Words(words(&[("Hello", 0, 1000), ("world", 1000, 1200)])),
        ])
        .with_word_timestamps(),
    );
    let (_server, mut client) = configured(
        engine,
        SessionOptions::default(),
        json!({"stream_audio": true, "response_format": "pcm", "word_timestamps": true}),
    )
    .await;
    client.send(text("Hello world. ")).await;
    client.send(done()).await;
    assert_eq!(client.json().await["type"], "audio.start");
    let first = client.json().await;
    assert_eq!(first["type"], "audio.chunk");
    assert_eq!(first["timestamps"], Value::Null);
    let last = client.json().await;
    assert_eq!(
        last["timestamps"],
        json!([{"word": "Hello", "start_ms": 0, "end_ms": 1000},
               {"word": "world", "start_ms": 1000, "end_ms": 1200}])
    );
    for word in last["timestamps"].as_array().into_iter().flatten() {
        assert!(word["end_ms"].as_i64() >= word["start_ms"].as_i64());
    }
}

// Word timestamps from the synthetic engine, which knows where its words are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthetic_word_timestamps_match_its_audio() {
    let engine = synthetic();
    let (_server, mut client) = configured(
        engine.clone(),
        SessionOptions::default(),
        json!({"stream_audio": true, "response_format": "pcm", "word_timestamps": true}),
    )
    .await;
    client.send(text("Timings come from the tones")).await;
    client.send(done()).await;
    assert_eq!(client.json().await["word_timestamps"], true);
    let mut pcm = Vec::new();
    let trailing = loop {
        let chunk = client.json().await;
        assert_eq!(chunk["type"], "audio.chunk");
        let audio = base64::engine::general_purpose::STANDARD
            .decode(chunk["audio_b64"].as_str().unwrap_or(""))
            .expect("base64");
        if audio.is_empty() {
            break chunk;
        }
        pcm.extend(audio);
    };
    assert_eq!(client.json().await, audio_done(0, pcm.len(), false));
    assert_eq!(client.json().await, session_done(0, 1));
    let (expected_pcm, expected_words) = engine.inner().render(&engine.requests()[0].1);
    assert_eq!(pcm, expected_pcm);
    assert_eq!(trailing["timestamps"], serde_json::to_value(&expected_words).unwrap_or_default());
    assert_eq!(trailing["chunk_end_ms"], (pcm.len() as f64 / 48.0).round() as i64);
}

// 12
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_on_input_done() {
    let (_server, mut client) = configured(synthetic(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    let audio = wav_utterance(&mut client, 0, "Hello world without punctuation").await;
    assert!(!audio.is_empty());
}

// 13
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_streaming_config() {
    let engine = synthetic();
    let (_server, mut client) = configured(
        engine.clone(),
        SessionOptions::default(),
        json!({"voice": "Vivian", "stream_audio": true, "response_format": "wav"}),
    )
    .await;
    let refused = client.json().await;
    assert_eq!(refused["type"], "error");
    assert!(refused["message"].as_str().unwrap_or("").contains("response_format='pcm'"));
    // Fatal: it was the first config.
    assert!(client.closed().await.is_some());
    assert!(engine.requests().is_empty());
}

// 14
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_input_text_emits_no_audio() {
    let engine = synthetic();
    let (_server, mut client) = configured(engine.clone(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    client.send(text("")).await;
    client.send(done()).await;
    assert_eq!(client.json().await, session_done(0, 0));
    assert!(engine.requests().is_empty());
}

// 15
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_sentences_are_buffered_into_one_request() {
    let engine = synthetic();
    let (_server, mut client) = configured(engine.clone(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    client.send(text("First sentence. ")).await;
    client.send(text("Second sentence. ")).await;
    client.send(done()).await;
    let start = client.json().await;
    assert_eq!(start["sentence_index"], 0);
    assert_eq!(start["sentence_text"], "First sentence. Second sentence.");
    let audio = client.binary().await;
    assert_eq!(client.json().await, audio_done(0, audio.len(), false));
    assert_eq!(client.json().await, session_done(0, 1));
    assert_eq!(engine.requests().len(), 1);
    assert_eq!(engine.requests()[0].1.text, "First sentence. Second sentence.");
}

// 16
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_message_type_keeps_session_open() {
    let (_server, mut client) = configured(synthetic(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    client.send(json!({"type": "unknown"})).await;
    assert_eq!(client.json().await, error("Unknown message type: unknown"));
    wav_utterance(&mut client, 0, "Hello world. ").await;
}

// 17
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_timeout_closes_session() {
    let options = SessionOptions { config_timeout: Duration::from_millis(50), ..SessionOptions::default() };
    let server = TestServer::start(synthetic(), options).await;
    let mut client = server.connect().await;
    assert_eq!(client.json().await, error("Timeout waiting for session.config"));
    assert_eq!(client.closed().await, Some(1000));
}

// 18
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_error_marks_audio_done() {
    let engine = Recorded::new(Scripted::new(vec![Step::Fail("boom".into())]));
    let (_server, mut client) = configured(engine, SessionOptions::default(), json!({"voice": "Vivian"})).await;
    client.send(text("Hello world. ")).await;
    client.send(done()).await;
    assert_eq!(client.json().await["type"], "audio.start");
    assert_eq!(client.json().await, error("Generation failed for utterance 0, sentence 0: boom"));
    assert_eq!(client.json().await, audio_done(0, 0, true));
    assert_eq!(client.json().await, session_done(0, 1));
}

// 19
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_generation_error_marks_audio_done() {
    let engine = Recorded::new(Scripted::new(vec![Step::Audio(vec![1, 2], 24000), Step::Fail("stream boom".into())]));
    let (_server, mut client) = configured(
        engine,
        SessionOptions::default(),
        json!({"voice": "Vivian", "stream_audio": true, "response_format": "pcm"}),
    )
    .await;
    client.send(text("Hello world. ")).await;
    client.send(done()).await;
    assert_eq!(client.json().await["type"], "audio.start");
    assert_eq!(client.binary().await, vec![1, 2]);
    assert_eq!(
        client.json().await,
        json!({"type": "error", "message": "Generation failed for utterance 0, sentence 0: stream boom",
               "partial_audio": true, "action": "discard"})
    );
    assert_eq!(client.json().await, audio_done(0, 2, true));
    assert_eq!(client.json().await, session_done(0, 1));
}

// 20
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_input_text_type_returns_validation_error() {
    let engine = synthetic();
    let (_server, mut client) = configured(engine.clone(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    client.send(json!({"type": "input.text", "text": 123})).await;
    assert_eq!(client.json().await, error("input.text requires a string value"));
    client.send(done()).await;
    assert_eq!(client.json().await, session_done(0, 0));
    assert!(engine.requests().is_empty());
}

// 21
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_text_message_too_large() {
    let options = SessionOptions {
        limits: Limits { max_text_message_chars: 32, ..Limits::default() },
        ..SessionOptions::default()
    };
    let engine = synthetic();
    let (_server, mut client) = configured(engine.clone(), options, json!({"voice": "Vivian"})).await;
    client.send(text(&"x".repeat(128))).await;
    assert_eq!(client.json().await, error("input.text message too large"));
    // Python's json.dumps spacing, 22 characters: still under the limit.
    client.send_text(r#"{"type": "input.done"}"#).await;
    assert_eq!(client.json().await, session_done(0, 0));
    assert!(engine.requests().is_empty());
}

// 22
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_config_message_too_large() {
    let options = SessionOptions {
        limits: Limits { max_config_message_chars: 64, ..Limits::default() },
        ..SessionOptions::default()
    };
    let (_server, mut client) = configured(synthetic(), options, json!({"ref_audio": "x".repeat(512)})).await;
    assert_eq!(client.json().await, error("session.config message too large"));
    assert!(client.closed().await.is_some());
}

// Over every limit in characters yet small in bytes: the core answers with the protocol's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_message_too_large_is_a_protocol_error() {
    let options = SessionOptions {
        limits: Limits { max_text_message_chars: 32, max_config_message_chars: 64 },
        ..SessionOptions::default()
    };
    let (_server, mut client) = configured(synthetic(), options, json!({"ref_audio": "é".repeat(300)})).await;
    assert_eq!(client.json().await, error("WebSocket message too large"));
    assert_eq!(client.closed().await, Some(1000));
}

// Client binary frames are refused with an error and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_client_frame_is_reported_and_the_session_continues() {
    let (_server, mut client) = configured(synthetic(), SessionOptions::default(), json!({"voice": "Vivian"})).await;
    client.send_message(tokio_tungstenite::tungstenite::Message::binary(vec![0u8, 1, 2])).await;
    assert_eq!(client.json().await, error(BINARY_FRAME_ERROR));
    wav_utterance(&mut client, 0, "Still here. ").await;
}

// Cancelling a streamed PCM utterance: audio.done says cancelled, then session.done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_cancel_mid_pcm_stream() {
    let engine = Recorded::new(Scripted::new(vec![Step::Audio(vec![1, 2, 3, 4], 24000), Step::HoldUntilAborted]));
    let (_server, mut client) =
        configured(engine.clone(), SessionOptions::default(), json!({"stream_audio": true, "response_format": "pcm"}))
            .await;
    client.send(text("Hello world. ")).await;
    client.send(done()).await;
    assert_eq!(client.json().await["type"], "audio.start");
    assert_eq!(client.binary().await, vec![1, 2, 3, 4]);
    client.send(json!({"type": "input.cancel"})).await;
    let mut done = audio_done(0, 4, false);
    done["cancelled"] = json!(true);
    assert_eq!(client.json().await, done);
    assert_eq!(client.json().await, session_done(0, 1));
    assert_eq!(engine.await_aborts(1).await.len(), 1);
    // The session is still usable.
    client.send(json!({"type": "input.cancel"})).await;
    assert_eq!(client.json().await, json!({"type": "input.cancelled", "utterance_index": 1}));
    assert_eq!(engine.aborts().len(), 1);
}

// Messages for the next utterance sent while one is streaming are handled after it, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_during_a_stream_are_handled_after_it() {
    let engine = synthetic();
    let (_server, mut client) =
        configured(engine.clone(), SessionOptions::default(), json!({"stream_audio": true, "response_format": "pcm"}))
            .await;
    client.send(text("first")).await;
    client.send(done()).await;
    client.send(text("second")).await;
    client.send(done()).await;
    client.send(json!({"type": "session.close"})).await;
    for utterance in 0..2u64 {
        let seen = client.until_session_done().await;
        let Some(Received::Json(start)) = seen.first() else { panic!("no audio.start: {seen:?}") };
        assert_eq!(start["utterance_index"], utterance);
        let bytes: usize = seen
            .iter()
            .map(|m| match m {
                Received::Binary(b) => b.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(seen[seen.len() - 2], Received::Json(audio_done(utterance, bytes, false)));
    }
    assert_eq!(client.closed().await, Some(1000));
    let texts: Vec<_> = engine.requests().into_iter().map(|r| r.1.text).collect();
    assert_eq!(texts, vec!["first".to_owned(), "second".to_owned()]);
}

// docs/protocol-upstream.md §2.7 H1/H2 over a real socket: with split_granularity, each sentence is
// synthesized as soon as its text is complete (the first before input.done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_granularity_sentences_stream_before_input_done() {
    let engine = synthetic();
    let (_server, mut client) = configured(
        engine.clone(),
        SessionOptions::default(),
        json!({"voice": "Vivian", "split_granularity": "sentence", "stream_audio": true, "response_format": "pcm"}),
    )
    .await;
    client.send(text("First sentence. Second")).await;
    // No input.done yet: the first sentence's audio comes, announced with its rate and channels.
    let start = client.json().await;
    assert_eq!(
        start,
        json!({"type": "audio.start", "utterance_index": 0, "sentence_index": 0, "sentence_text": "First sentence.",
               "format": "pcm", "sample_rate": 24000, "channels": 1})
    );
    let expected = engine.inner().render(&SynthesisRequest::new("First sentence.")).0;
    let mut audio = Vec::new();
    let end = loop {
        match client.recv().await {
            Received::Binary(bytes) => audio.extend(bytes),
            Received::Json(message) => break message,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(audio, expected);
    assert_eq!(end["type"], "audio.done");
    client.send(text(" one.")).await;
    client.send(done()).await;
    let rest = client.until_session_done().await;
    let messages: Vec<&Value> = rest
        .iter()
        .filter_map(|r| match r {
            Received::Json(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(messages[0]["sentence_text"], "Second one.");
    assert_eq!(messages[0]["sentence_index"], 1);
    assert_eq!(**messages.last().unwrap(), session_done(0, 2));
    let texts: Vec<String> = engine.requests().into_iter().map(|(_, r)| r.text).collect();
    assert_eq!(texts, ["First sentence.", "Second one."]);
}
