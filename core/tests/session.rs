//! The protocol of docs/protocol.md §b–§c, driven through `Session` by hand (no I/O).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{capabilities, frames, json, Harness, Out};
use speechstream_core::catalog::{Catalog, Naming};
use speechstream_core::engine::{CodecFlags, EngineEventKind, RequestId};
use speechstream_core::parse::Limits;
use speechstream_core::session::{ClientFrame, Phase, SessionOptions};

const CONFIG: &str = r#"{"type": "session.config", "voice": "Vivian"}"#;
const STREAM_CONFIG: &str = r#"{"type":"session.config","voice":"Vivian","stream_audio":true,"response_format":"pcm"}"#;
const DONE: &str = r#"{"type": "input.done"}"#;

fn text(t: &str) -> String {
    serde_json::json!({"type": "input.text", "text": t}).to_string()
}

#[test]
fn non_streamed_utterance_is_one_wav_frame() {
    let mut h = Harness::default();
    h.send(CONFIG).send(&text("Hello world. ")).send(DONE);
    let outs = h.take();
    assert_eq!(
        outs[0],
        json(
            r#"{"type":"audio.start","utterance_index":0,"sentence_index":0,"sentence_text":"Hello world.","format":"wav"}"#
        )
    );
    let (id, request) = Harness::request(&outs);
    assert_eq!(request.text, "Hello world.");
    assert_eq!(request.voice.as_deref(), Some("Vivian"));
    assert!(!request.stream);
    h.audio(id, &[1, 0, 2, 0], 24_000).audio(id, &[3, 0], 24_000).engine(id, EngineEventKind::Finished);
    let outs = h.take();
    let Out::Binary(wav) = &outs[0] else { panic!("expected the wav frame first: {outs:?}") };
    assert_eq!(&wav[..4], b"RIFF");
    assert_eq!(&wav[wav.len() - 6..], &[1, 0, 2, 0, 3, 0]);
    assert_eq!(
        outs[1],
        json(&format!(
            r#"{{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":{},"error":false}}"#,
            wav.len()
        ))
    );
    assert_eq!(outs[2], json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#));
    assert_eq!(outs.len(), 3);
}

#[test]
fn streamed_pcm_frames_pass_through_and_sum_to_total_bytes() {
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","voice":"Vivian","stream_audio":true,"response_format":"pcm","initial_codec_chunk_frames":12}"#);
    h.send(&text("Hello world. ")).send(DONE);
    let outs = h.take();
    assert_eq!(
        outs[0],
        json(
            r#"{"type":"audio.start","utterance_index":0,"sentence_index":0,"sentence_text":"Hello world.","format":"pcm","sample_rate":24000}"#
        )
    );
    let (id, request) = Harness::request(&outs);
    assert!(request.stream);
    assert_eq!(request.initial_codec_chunk_frames, Some(12));
    h.audio(id, b"\x01\x02", 24_000).audio(id, b"\x03\x04\x05", 24_000).audio(id, b"\x06", 24_000);
    h.engine(id, EngineEventKind::Finished);
    assert_eq!(
        h.take(),
        vec![
            Out::Binary(b"\x01\x02".to_vec()),
            Out::Binary(b"\x03\x04\x05".to_vec()),
            Out::Binary(b"\x06".to_vec()),
            json(r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":6,"error":false}"#),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#),
        ]
    );
}

#[test]
fn utterances_reuse_the_connection_with_sticky_then_replaced_config() {
    let mut h = Harness::default();
    h.send(CONFIG);
    for (i, voice) in ["Vivian", "Vivian", "Serena"].iter().enumerate() {
        if i == 2 {
            h.send(r#"{"type":"session.config","speaker":"Serena"}"#);
        }
        h.send(&text(&format!("Utterance {i}. "))).send(DONE);
        let (id, request) = Harness::request(&h.take());
        assert_eq!(id.utterance, i as u64);
        assert_eq!(request.voice.as_deref(), Some(*voice));
        h.engine(id, EngineEventKind::Finished);
        let f = frames(&h.take());
        assert_eq!(
            f.last().unwrap(),
            &serde_json::json!({"type":"session.done","utterance_index":i,"total_sentences":1})
        );
    }
}

#[test]
fn config_is_refused_while_text_is_buffered_even_empty_text() {
    let mut h = Harness::default();
    h.send(CONFIG).send(&text("Hello world. ")).send(r#"{"type":"session.config","voice":"Serena"}"#);
    let f = frames(&h.take());
    assert_eq!(f.len(), 1);
    assert!(f[0]["message"].as_str().unwrap().contains("while input is buffered"));
    h.send(DONE);
    let (_, request) = Harness::request(&h.take());
    assert_eq!(request.voice.as_deref(), Some("Vivian"));
    assert_eq!(request.text, "Hello world.");

    let mut h = Harness::default();
    h.send(CONFIG).send(&text("")).send(CONFIG);
    assert_eq!(frames(&h.take())[0]["type"], "error");
}

#[test]
fn empty_flush_sends_only_session_done_and_strips_python_whitespace() {
    let mut h = Harness::default();
    h.send(CONFIG).send(&text(" \u{1c}\n\u{3000} ")).send(DONE);
    assert_eq!(h.take(), vec![json(r#"{"type":"session.done","utterance_index":0,"total_sentences":0}"#)]);
    h.send(DONE);
    assert_eq!(h.take(), vec![json(r#"{"type":"session.done","utterance_index":1,"total_sentences":0}"#)]);
}

#[test]
fn buffered_parts_join_into_one_request() {
    let mut h = Harness::default();
    h.send(CONFIG).send(&text("First sentence. ")).send(&text("Second sentence. ")).send(DONE);
    let outs = h.take();
    assert_eq!(frames(&outs)[0]["sentence_text"], "First sentence. Second sentence.");
    assert_eq!(Harness::request(&outs).1.text, "First sentence. Second sentence.");
}

#[test]
fn unknown_types_and_bad_text_are_reported_and_the_session_goes_on() {
    let mut h = Harness::default();
    h.send(CONFIG).send(r#"{"type":"unknown"}"#).send(r#"{"type":"input.text","text":123}"#);
    h.send_frame(ClientFrame::Binary(vec![1, 2, 3])).send("{not json").send("[]");
    let f = frames(&h.take());
    let messages: Vec<_> = f.iter().map(|v| v["message"].as_str().unwrap().to_owned()).collect();
    assert_eq!(
        messages,
        [
            "Unknown message type: unknown",
            "input.text requires a string value",
            "Binary frames are not supported; send JSON text frames",
            "Invalid JSON message",
            "WebSocket messages must be JSON objects",
        ]
    );
    assert!(!h.session.is_closed());
    h.send(DONE);
    assert_eq!(h.take(), vec![json(r#"{"type":"session.done","utterance_index":0,"total_sentences":0}"#)]);
}

#[test]
fn anything_but_config_first_is_fatal() {
    for (first, message) in [
        (r#"{"type":"input.text","text":"hi"}"#, "Expected session.config, got: input.text"),
        (r#"{"type":"input.cancel"}"#, "Expected session.config, got: input.cancel"),
        (r#"{"type":"session.close"}"#, "Expected session.config, got: session.close"),
        (r#"{"text":"x"}"#, "Expected session.config, got: None"),
        ("nope", "Invalid JSON message"),
    ] {
        let mut h = Harness::default();
        h.send(first);
        assert_eq!(
            h.take(),
            vec![json(&serde_json::json!({"type":"error","message":message}).to_string()), Out::Close(1000)]
        );
        assert!(h.session.is_closed());
        h.send(CONFIG);
        assert!(h.take().is_empty(), "nothing after close");
    }
}

#[test]
fn invalid_first_config_is_fatal_and_invalid_later_config_keeps_the_old_one() {
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","stream_audio":true,"response_format":"wav"}"#);
    let outs = h.take();
    let msg = frames(&outs)[0]["message"].as_str().unwrap().to_owned();
    assert!(msg.starts_with("Invalid session config: ") && msg.contains("response_format='pcm'"), "{msg}");
    assert_eq!(outs.last(), Some(&Out::Close(1000)));

    let mut h = Harness::default();
    h.send(CONFIG).send(r#"{"type":"session.config","speed":5}"#);
    let msg = frames(&h.take())[0]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("Input should be less than or equal to 4"), "{msg}");
    assert!(!h.session.is_closed());
    h.send(&text("x")).send(DONE);
    assert_eq!(Harness::request(&h.take()).1.voice.as_deref(), Some("Vivian"));
}

#[test]
fn unknown_model_is_refused() {
    let mut h = Harness::default();
    h.send(CONFIG).send(r#"{"type":"session.config","model":"nope"}"#);
    let msg = frames(&h.take())[0]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        msg,
        "error=ErrorInfo(message='The model `nope` does not exist.', type='NotFoundError', param='model', code=404)"
    );
    h.send(r#"{"type":"session.config","model":"hibari"}"#).send(r#"{"type":"session.config","model":""}"#);
    assert!(h.take().is_empty());
}

#[test]
fn size_limits_are_reported_after_config() {
    let options = SessionOptions {
        limits: Limits { max_text_message_chars: 32, max_config_message_chars: 4 * 1024 * 1024 },
        ..SessionOptions::default()
    };
    let mut h = Harness::new(capabilities(false, false), options);
    h.send(CONFIG).send(&text(&"x".repeat(128))).send(DONE);
    assert_eq!(
        h.take(),
        vec![
            json(r#"{"type":"error","message":"input.text message too large"}"#),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":0}"#)
        ]
    );
}

#[test]
fn buffered_text_is_bounded_per_utterance() {
    let options = SessionOptions { max_buffered_chars: 10, ..SessionOptions::default() };
    let mut h = Harness::new(capabilities(false, false), options);
    h.send(CONFIG).send(&text("12345")).send(&text("678901")).send(&text("67890"));
    let f = frames(&h.take());
    assert_eq!(f.len(), 1);
    assert!(f[0]["message"].as_str().unwrap().contains("exceeds 10 characters"));
    h.send(DONE);
    assert_eq!(Harness::request(&h.take()).1.text, "1234567890");
}

#[test]
fn timeouts_config_then_idle_paused_during_generation() {
    let mut h = Harness::default();
    h.advance(Duration::from_secs(9));
    assert!(h.take().is_empty());
    h.advance(Duration::from_secs(1));
    assert_eq!(
        h.take(),
        vec![json(r#"{"type":"error","message":"Timeout waiting for session.config"}"#), Out::Close(1000)]
    );

    let mut h = Harness::default();
    h.send(CONFIG).send(&text("hi")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.advance(Duration::from_secs(100));
    assert!(h.take().is_empty(), "no idle timeout while generating");
    h.engine(id, EngineEventKind::Finished);
    h.take();
    h.advance(Duration::from_secs(29));
    assert!(h.take().is_empty());
    h.advance(Duration::from_secs(1));
    assert_eq!(
        h.take(),
        vec![json(r#"{"type":"error","message":"Idle timeout: no message received"}"#), Out::Close(1000)]
    );
}

#[test]
fn session_close_during_generation_waits_for_session_done() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("hi")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.send(&text("next ")).send(r#"{"type":"session.close"}"#);
    assert!(h.take().is_empty());
    h.audio(id, b"\x01\x02", 24_000).engine(id, EngineEventKind::Finished);
    let outs = h.take();
    assert_eq!(outs.last(), Some(&Out::Close(1000)));
    assert_eq!(frames(&outs).last().unwrap()["type"], "session.done");
}

#[test]
fn deferred_messages_replay_in_order_and_start_the_next_utterance() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("one")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.send(&text("two")).send(r#"{"type":"bogus"}"#).send(DONE).send(&text("three")).send(DONE);
    h.engine(id, EngineEventKind::Finished);
    let outs = h.take();
    let f = frames(&outs);
    assert_eq!(f[0]["type"], "audio.done");
    assert_eq!(f[1]["type"], "session.done");
    assert_eq!(f[2]["message"], "Unknown message type: bogus");
    assert_eq!(f[3]["sentence_text"], "two");
    let (id2, _) = Harness::request(&outs);
    assert_eq!(id2.utterance, 1);
    h.engine(id2, EngineEventKind::Finished);
    let outs = h.take();
    assert_eq!(frames(&outs)[2]["sentence_text"], "three");
}

#[test]
fn cancel_mid_stream_aborts_once_and_marks_audio_done() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("hello")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, b"\x01\x02", 24_000);
    h.send(&text("kept for later ")).send(r#"{"type":"input.cancel"}"#);
    assert_eq!(
        h.take(),
        vec![
            Out::Binary(b"\x01\x02".to_vec()),
            Out::Abort(id),
            json(
                r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":2,"error":false,"cancelled":true}"#
            ),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#),
        ]
    );
    // A late event of the aborted request is the caller's to drop.
    assert!(h
        .session
        .handle_engine(h.now, speechstream_core::engine::EngineEvent { id, kind: EngineEventKind::Finished })
        .is_err());
    h.send(DONE);
    assert_eq!(Harness::request(&h.take()).1.text, "kept for later");
}

/// Ours: `input.cancel` with how much the client played gets what was heard in `audio.done`;
/// the engine is asked for word timings whenever it has them, and they are not sent unless the
/// config asks.
#[test]
fn cancel_with_played_audio_says_what_was_heard() {
    let mut h = Harness::new(capabilities(true, false), SessionOptions::default());
    h.send(STREAM_CONFIG).send(&text("Hello big, world.")).send(DONE);
    let (id, request) = Harness::request(&h.take());
    assert_eq!(request.output, speechstream_core::engine::OutputKind::AudioAndWords);
    // 500 ms of audio at 24 kHz; "big" is being played at 450 ms.
    h.words(id, &[("Hello", 0, 300), ("big", 340, 520), ("world", 560, 860)]).audio(id, &[0; 24_000], 24_000);
    h.send(r#"{"type":"input.cancel","played_ms":450}"#);
    let outs = h.take();
    assert!(matches!(&outs[..2], [Out::Binary(pcm), Out::Abort(_)] if pcm.len() == 24_000), "no timestamps sent");
    assert_eq!(
        outs[2],
        json(
            r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":24000,"error":false,"cancelled":true,
               "heard":{"utterance_index":0,"played_ms":450,"text":"Hello","chars":[0,5],
                        "words":[{"word":"Hello","start_ms":0,"end_ms":300,"chars":[0,5]}],
                        "partial_word":{"word":"big","start_ms":340,"end_ms":520,"chars":[6,9]}}}"#
        )
    );
    // In bytes, and more than was sent: what was sent (550 ms) was heard.
    h.send(&text("Hello big, world.")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.words(id, &[("Hello", 0, 300), ("big", 340, 520), ("world", 560, 860)]).audio(id, &[0; 26_400], 24_000);
    h.send(r#"{"type":"input.cancel","played_bytes":1000000}"#);
    let heard = &frames(&h.take())[0]["heard"];
    assert_eq!((heard["played_ms"].as_i64(), heard["text"].as_str()), (Some(550), Some("Hello big")));
    assert_eq!(heard["partial_word"], serde_json::Value::Null, "between big and world");
    // A bad amount is reported, and the cancel still happens, without `heard`.
    h.send(&text("Hello.")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, &[0; 480], 24_000).send(r#"{"type":"input.cancel","played_ms":-5}"#);
    let f = frames(&h.take());
    assert_eq!(f[0]["message"], "input.cancel: played_ms must be a non-negative number");
    assert_eq!((f[1]["cancelled"].as_bool(), f[1].get("heard")), (Some(true), None));
    // Sent whole (faster than it plays), then cancelled while idle: input.cancelled says what
    // was heard of it, and of nothing once another utterance has started.
    h.send(&text("Hello big, world.")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.words(id, &[("Hello", 0, 300), ("big", 340, 520), ("world", 560, 860)]).audio(id, &[0; 48_000], 24_000);
    h.engine(id, EngineEventKind::Finished);
    h.take();
    h.send(r#"{"type":"input.cancel","played_ms":870}"#);
    assert_eq!(
        h.take(),
        vec![json(
            r#"{"type":"input.cancelled","utterance_index":4,
                "heard":{"utterance_index":3,"played_ms":870,"text":"Hello big, world","chars":[0,16],
                         "words":[{"word":"Hello","start_ms":0,"end_ms":300,"chars":[0,5]},
                                  {"word":"big","start_ms":340,"end_ms":520,"chars":[6,9]},
                                  {"word":"world","start_ms":560,"end_ms":860,"chars":[11,16]}],
                         "partial_word":null}}"#
        )]
    );
    h.send(r#"{"type":"input.cancel"}"#);
    assert_eq!(h.take(), vec![json(r#"{"type":"input.cancelled","utterance_index":4}"#)]);
    h.send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.engine(id, EngineEventKind::Failed("boom".into()));
    h.take();
    h.send(r#"{"type":"input.cancel","played_ms":10}"#);
    assert_eq!(h.take(), vec![json(r#"{"type":"input.cancelled","utterance_index":5}"#)]);
}

#[test]
fn cancel_works_in_non_streamed_mode_and_when_idle() {
    let mut h = Harness::default();
    h.send(CONFIG).send(&text("hello")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, &[0; 100], 24_000).send(r#"{"type":"input.cancel"}"#);
    let outs = h.take();
    assert_eq!(outs[0], Out::Abort(id));
    assert_eq!(
        outs[1],
        json(
            r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":0,"error":false,"cancelled":true}"#
        )
    );
    h.send(&text("dropped")).send(r#"{"type":"input.cancel"}"#).send(DONE);
    assert_eq!(
        h.take(),
        vec![
            json(r#"{"type":"input.cancelled","utterance_index":1}"#),
            json(r#"{"type":"session.done","utterance_index":1,"total_sentences":0}"#)
        ]
    );
}

#[test]
fn generation_errors_keep_audio_start_and_done_paired() {
    let mut h = Harness::default();
    h.send(CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.engine(id, EngineEventKind::Failed("boom".into()));
    assert_eq!(
        h.take(),
        vec![
            json(r#"{"type":"error","message":"Generation failed for utterance 0, sentence 0: boom"}"#),
            json(r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":0,"error":true}"#),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#),
        ]
    );

    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, b"\x01\x02", 24_000).engine(id, EngineEventKind::Failed("stream boom".into()));
    assert_eq!(
        h.take(),
        vec![
            Out::Binary(b"\x01\x02".to_vec()),
            json(
                r#"{"type":"error","message":"Generation failed for utterance 0, sentence 0: stream boom","partial_audio":true,"action":"discard"}"#
            ),
            json(r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":2,"error":true}"#),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#),
        ]
    );
}

#[test]
fn sample_rate_change_fails_the_utterance_and_aborts() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, b"\x01\x02", 24_000).audio(id, b"\x01\x02", 44_100);
    let outs = h.take();
    assert_eq!(outs[1], Out::Abort(id));
    assert_eq!(
        frames(&outs)[0]["message"],
        "Generation failed for utterance 0, sentence 0: Audio sample rate changed during streaming: 24000 Hz to 44100 Hz"
    );
}

#[test]
fn word_timestamps_need_the_capability_and_streamed_pcm() {
    let wt =
        r#"{"type":"session.config","voice":"v","stream_audio":true,"response_format":"pcm","word_timestamps":true}"#;
    let mut h = Harness::default();
    h.send(wt).send(&text("Hello world")).send(DONE);
    let f = frames(&h.take());
    assert!(f[0]["message"].as_str().unwrap().contains("without --forced-aligner"));
    assert_eq!(f[1], serde_json::json!({"type":"session.done","utterance_index":0,"total_sentences":1}));
    assert_eq!(f.len(), 2);

    let mut h = Harness::new(capabilities(true, false), SessionOptions::default());
    h.send(r#"{"type":"session.config","word_timestamps":true}"#).send(&text("Hello")).send(DONE);
    let f = frames(&h.take());
    assert!(f[0]["message"].as_str().unwrap().starts_with("word_timestamps=true requires stream_audio=true"));
}

#[test]
fn word_timestamps_ride_audio_chunks_with_reference_ms_math() {
    let wt =
        r#"{"type":"session.config","voice":"v","stream_audio":true,"response_format":"pcm","word_timestamps":true}"#;
    let mut h = Harness::new(capabilities(true, false), SessionOptions::default());
    h.send(wt).send(&text("Hello world")).send(DONE);
    let outs = h.take();
    assert_eq!(frames(&outs)[0]["word_timestamps"], true);
    let (id, request) = Harness::request(&outs);
    assert!(request.output.words());
    h.audio(id, &[1; 1000], 1000).audio(id, &[2; 1000], 1000);
    h.words(id, &[("Hello", 0, 200), ("world", 200, 900)]).engine(id, EngineEventKind::Finished);
    let f = frames(&h.take());
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    assert_eq!(
        f[0],
        serde_json::json!({"type":"audio.chunk","utterance_index":0,"sentence_index":0,"chunk_id":0,"chunk_start_ms":0,"chunk_end_ms":500,"sample_rate":1000,"audio_b64":b64(&[1; 1000]),"timestamps":null})
    );
    assert_eq!(f[1]["chunk_start_ms"], 500);
    assert_eq!(f[1]["chunk_end_ms"], 1000);
    assert_eq!(
        f[2],
        serde_json::json!({"type":"audio.chunk","utterance_index":0,"sentence_index":0,"chunk_id":2,"chunk_start_ms":0,"chunk_end_ms":1000,"sample_rate":1000,"audio_b64":"","timestamps":[{"word":"Hello","start_ms":0,"end_ms":200},{"word":"world","start_ms":200,"end_ms":900}]})
    );
    assert_eq!(
        f[3],
        serde_json::json!({"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":2000,"error":false})
    );
}

#[test]
fn ms_rounding_ties_to_even() {
    // 3 bytes at 1000 Hz: 1.5 samples = 1.5 ms -> 2; 5 bytes: 2.5 ms -> 2 (Python round).
    let wt = r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","word_timestamps":true}"#;
    let mut h = Harness::new(capabilities(true, false), SessionOptions::default());
    h.send(wt).send(&text("a")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, &[0; 3], 1000).audio(id, &[0; 2], 1000).engine(id, EngineEventKind::Finished);
    let f = frames(&h.take());
    assert_eq!(f[0]["chunk_end_ms"], 2);
    assert_eq!(f[1]["chunk_end_ms"], 2);
    assert_eq!(f[2]["timestamps"], serde_json::Value::Null, "no words reported -> null");
}

#[test]
fn codec_tokens_stream_frames_then_codec_done() {
    let cfg = r#"{"type":"session.config","model":"hibari","output_mode":"codec_tokens","stream_audio":true,"response_format":"pcm"}"#;
    let mut h = Harness::new(capabilities(false, true), SessionOptions::default());
    h.send(cfg).send(&text("hello")).send(DONE);
    let outs = h.take();
    assert_eq!(
        frames(&outs)[0],
        serde_json::json!({"type":"codec.start","version":1,"utterance_index":0,"sentence_index":0,"sentence_text":"hello","model":"hibari","codebooks":16,"codebook_size":2048,"frame_rate_hz":12.5,"sample_rate":24000,"decoder_id":"d","header_format":"<IHB"})
    );
    let (id, request) = Harness::request(&outs);
    assert!(request.output.codec());
    for i in 0..3usize {
        h.engine(
            id,
            EngineEventKind::Codec {
                codes: vec![i as i32; (1 + i) * 16],
                flags: CodecFlags { eos: i == 2, ..CodecFlags::default() },
            },
        );
    }
    h.engine(id, EngineEventKind::Finished);
    let outs = h.take();
    let bins: Vec<_> = outs
        .iter()
        .filter_map(|o| match o {
            Out::Binary(b) => Some(speechstream_core::codec::unpack_frame(b, 16).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(bins.iter().map(|f| f.n_frames).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(bins.iter().map(|f| f.seq).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(bins[2].flags & 1, 1);
    let f = frames(&outs);
    assert_eq!(
        f[0],
        serde_json::json!({"type":"codec.done","utterance_index":0,"sentence_index":0,"total_frames":6,"seq_last":2,"error":false,"cancelled":false})
    );
    assert_eq!(f[1]["type"], "session.done");
}

#[test]
fn codec_cancel_appends_eos_and_unsupported_codec_is_refused() {
    let cfg = r#"{"type":"session.config","output_mode":"codec_tokens","stream_audio":true,"response_format":"pcm"}"#;
    let mut h = Harness::new(capabilities(false, true), SessionOptions::default());
    h.send(cfg).send(&text("hello")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.engine(id, EngineEventKind::Codec { codes: vec![1; 16], flags: CodecFlags::default() })
        .send(r#"{"type":"input.cancel"}"#);
    let outs = h.take();
    assert_eq!(outs[1], Out::Abort(id));
    let Out::Binary(eos) = &outs[2] else { panic!("{outs:?}") };
    let eos = speechstream_core::codec::unpack_frame(eos, 16).unwrap();
    assert_eq!((eos.seq, eos.n_frames, eos.flags), (1, 0, 1));
    assert_eq!(frames(&outs)[0]["cancelled"], true);
    assert_eq!(frames(&outs)[0]["seq_last"], 1);

    let mut h = Harness::default();
    h.send(cfg).send(&text("hello")).send(DONE);
    let f = frames(&h.take());
    assert!(f[0]["message"].as_str().unwrap().contains("not supported"));
    assert_eq!(f[1]["total_sentences"], 1);
}

#[test]
fn per_utterance_request_errors_fail_only_that_utterance() {
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","seed":99999999999999999999}"#).send(&text("x")).send(DONE);
    let f = frames(&h.take());
    assert!(f[0]["message"].as_str().unwrap().contains("less than or equal to 9223372036854775807"));
    assert_eq!(f[1], serde_json::json!({"type":"session.done","utterance_index":0,"total_sentences":1}));
    assert!(!h.session.is_closed());
    h.send(r#"{"type":"session.config","speaker_embedding":[1.0],"ref_audio":"data:x"}"#).send(&text("x")).send(DONE);
    assert!(frames(&h.take())[0]["message"].as_str().unwrap().contains("mutually exclusive"));
}

#[test]
fn disconnect_mid_stream_aborts_exactly_once() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, b"\x01\x02", 24_000).send_frame(ClientFrame::Closed).send_frame(ClientFrame::Closed);
    let outs = h.take();
    assert_eq!(outs.iter().filter(|o| **o == Out::Abort(id)).count(), 1);
    assert!(h.session.is_closed());
    assert!(h.session.poll_timeout().is_none());
}

// Issue 9, defect 3: held-back messages are bounded in bytes, not in frames (a frame count let
// 64 configs of 4 MiB, each over 100 MiB once parsed, be held by one connection).
#[test]
fn held_back_messages_are_bounded_in_bytes() {
    let budget = 4096;
    let options = SessionOptions { max_deferred_bytes: budget, ..SessionOptions::default() };
    let mut h = Harness::new(capabilities(false, false), options);
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    Harness::request(&h.take());
    // Two messages of a third of the budget fit; the third would not, and is refused.
    let big = text(&"y".repeat(budget / 3));
    h.send(&big).send(&big);
    assert!(h.take().is_empty());
    h.send(&big);
    let refused = format!(
        "Held input exceeds {budget} bytes while an utterance is generating; message dropped, wait for session.done \
         before sending more"
    );
    assert_eq!(frames(&h.take()), vec![serde_json::json!({"type": "error", "message": refused})]);
    // A cancel still gets through, and what was held is handled after the utterance, in order.
    assert!(h.session.wants_client_input());
    h.send(r#"{"type":"input.cancel"}"#).send(DONE);
    let outs = frames(&h.take());
    let types: Vec<_> = outs.iter().map(|f| f["type"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(types, ["audio.done", "session.done", "audio.start"]);
    assert_eq!(outs[2]["sentence_text"].as_str().map(str::len), Some(2 * (budget / 3)));
    assert!(h.session.wants_client_input());
}

// Issue 9: an utterance cut by the server's shutdown grace used to end without its
// audio.done. It is aborted first, then ended as a failure, then the session closes with 1001.
#[test]
fn shutdown_mid_utterance_still_ends_it() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, b"\x01\x02", 24_000);
    h.take();
    h.shutdown().shutdown();
    assert_eq!(
        h.take(),
        vec![
            Out::Abort(id),
            json(
                r#"{"type":"error","message":"Generation failed for utterance 0, sentence 0: the server is shutting down","partial_audio":true,"action":"discard"}"#
            ),
            json(r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":2,"error":true}"#),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#),
            Out::Close(1001),
        ]
    );
    assert!(h.session.is_closed());
}

#[test]
fn shutdown_while_idle_just_closes() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG);
    h.take();
    assert_eq!(h.shutdown().take(), vec![Out::Close(1001)]);
}

// Issue 9: a non-streamed file is held whole until its utterance ends; past
// max_whole_audio_seconds the utterance fails (and its request is aborted) instead.
#[test]
fn whole_audio_past_its_limit_fails_the_utterance() {
    let options = SessionOptions { max_whole_audio_seconds: 1, ..SessionOptions::default() };
    let mut h = Harness::new(capabilities(false, false), options);
    h.send(CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, &vec![0; 48_000], 24_000);
    assert!(h.take().is_empty());
    h.audio(id, &[0, 0], 24_000);
    let message = "Generation failed for utterance 0, sentence 0: audio longer than 1 seconds cannot be sent as one \
                   file; use stream_audio=true for longer texts";
    assert_eq!(
        h.take(),
        vec![
            Out::Abort(id),
            json(&serde_json::json!({"type": "error", "message": message}).to_string()),
            json(r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":0,"error":true}"#),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#),
        ]
    );
    assert!(!h.session.is_closed());
}

// Issue 11: shutdown is an input of the core. A session that is generating finishes its
// utterance within the grace, taking no new client message, then closes with 1001.
#[test]
fn shutdown_drains_the_utterance_in_flight_then_closes() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.send(&text("held back")).send(DONE);
    h.begin_shutdown(Duration::from_secs(5));
    assert_eq!(h.session.phase(), Phase::Draining);
    assert!(!h.session.wants_client_input());
    assert_eq!(h.session.poll_timeout(), Some(h.now + Duration::from_secs(5)));
    // Held messages are dropped, new ones are not taken; a cancel still is.
    h.send(&text("ignored"));
    h.advance(Duration::from_secs(4));
    h.audio(id, b"\x01\x02", 24_000).engine(id, EngineEventKind::Finished);
    assert_eq!(
        h.take(),
        vec![
            Out::Binary(vec![1, 2]),
            json(r#"{"type":"audio.done","utterance_index":0,"sentence_index":0,"total_bytes":2,"error":false}"#),
            json(r#"{"type":"session.done","utterance_index":0,"total_sentences":1}"#),
            Out::Close(1001),
        ]
    );
    assert!(h.session.is_closed());
}

#[test]
fn shutdown_grace_over_fails_the_utterance() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.begin_shutdown(Duration::from_secs(2));
    assert!(h.take().is_empty());
    h.advance(Duration::from_secs(2));
    let outs = h.take();
    assert_eq!(outs.first(), Some(&Out::Abort(id)));
    assert_eq!(outs.last(), Some(&Out::Close(1001)));
    let types: Vec<_> = frames(&outs).iter().map(|f| f["type"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(types, ["error", "audio.done", "session.done"]);
    // Only the first call counts.
    h.begin_shutdown(Duration::ZERO);
    assert!(h.take().is_empty());
}

#[test]
fn cancel_while_draining_ends_the_utterance_and_closes() {
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.begin_shutdown(Duration::from_secs(5)).send(r#"{"type":"input.cancel"}"#);
    let outs = h.take();
    assert_eq!(outs.first(), Some(&Out::Abort(id)));
    assert_eq!(outs.last(), Some(&Out::Close(1001)));
}

#[test]
fn phases_follow_the_lifecycle() {
    let mut h = Harness::default();
    assert_eq!(h.session.phase(), Phase::AwaitingConfig);
    h.send(STREAM_CONFIG);
    assert_eq!(h.session.phase(), Phase::Idle);
    h.send(&text("x")).send(DONE);
    assert_eq!(h.session.phase(), Phase::Generating);
    let (id, _) = Harness::request(&h.take());
    h.engine(id, EngineEventKind::Finished);
    assert_eq!(h.session.phase(), Phase::Idle);
    h.send(r#"{"type":"session.close"}"#);
    assert_eq!(h.session.phase(), Phase::Closed);
}

// Issue 11: what the engine cannot do is refused in the core, after audio.start, with the
// engine's one message; nothing reaches the engine.
#[test]
fn voices_languages_and_task_types_are_refused_in_the_core() {
    let cases = [
        (r#"{"type":"session.config","voice":"Nobody"}"#, "Invalid voice 'Nobody'. Supported: heart"),
        (r#"{"type":"session.config","voice":"HEART","language":"fr"}"#, "language 'fr' is not supported by hibari: it speaks English only"),
        (
            r#"{"type":"session.config","task_type":"VoiceDesign"}"#,
            "task_type 'VoiceDesign' is not supported by hibari: it speaks with preset voices only (use 'CustomVoice' or leave task_type out)",
        ),
        (
            r#"{"type":"session.config","ref_audio":"data:audio/wav;base64,AAAA","ref_text":"hello"}"#,
            "voice cloning (ref_audio, ref_text, speaker_embedding) is not supported by hibari: it speaks with \
             preset voices only (leave those fields out)",
        ),
    ];
    for (config, why) in cases {
        let mut caps = capabilities(false, false);
        caps.languages = vec![speechstream_core::engine::Language::new("English", "en")];
        caps.task_types = vec![speechstream_core::config::TaskType::CustomVoice];
        caps.instructions = false;
        caps.voices = vec!["heart".into()];
        let mut h = Harness::new(caps, SessionOptions::default());
        h.send(config).send(&text("x")).send(DONE);
        let outs = h.take();
        assert!(!outs.iter().any(|o| matches!(o, Out::Synthesize(..))), "{outs:?}");
        let message = format!("Generation failed for utterance 0, sentence 0: {why}");
        let types: Vec<_> = frames(&outs).iter().map(|f| f["type"].as_str().unwrap_or_default().to_owned()).collect();
        assert_eq!(types, ["audio.start", "error", "audio.done", "session.done"], "{config}");
        assert_eq!(frames(&outs)[1]["message"], message.as_str());
        // The session goes on; a voice it has (any case), a language it speaks, "default".
        for ok in [
            r#"{"type":"session.config","voice":"HEART","language":"en-GB"}"#,
            r#"{"type":"session.config","voice":"default","language":"English"}"#,
        ] {
            h.send(ok).send(&text("y")).send(DONE);
            let (id, _) = Harness::request(&h.take());
            h.engine(id, EngineEventKind::Finished);
        }
    }
}

// Issue 34: a style prompt the engine cannot follow is accepted and dropped, named in the
// request's `ignored` for the transports to report; a strict catalog refuses it as before.
#[test]
fn instructions_are_ignored_unless_strict() {
    let mut caps = capabilities(false, false);
    caps.instructions = false;
    caps.voices = vec!["heart".into()];
    let caps = Arc::new(caps);
    let config = r#"{"type":"session.config","instructions":"Speak in a cheerful and positive tone."}"#;
    let mut h = Harness::new(Catalog::new(caps.clone(), Naming::new()), SessionOptions::default());
    h.send(config).send(&text("x")).send(DONE);
    let (id, request) = Harness::request(&h.take());
    assert_eq!((request.instructions, request.ignored), (None, vec!["instructions"]));
    h.engine(id, EngineEventKind::Finished);
    // Blank instructions are no instructions: nothing to report.
    h.send(r#"{"type":"session.config","instructions":"  "}"#).send(&text("y")).send(DONE);
    let (_, request) = Harness::request(&h.take());
    assert!(request.ignored.is_empty(), "{request:?}");
    // An engine that follows them gets them, and nothing is ignored.
    let mut h = Harness::new(capabilities(false, false), SessionOptions::default());
    h.send(config).send(&text("x")).send(DONE);
    let (_, request) = Harness::request(&h.take());
    assert_eq!(request.instructions.as_deref(), Some("Speak in a cheerful and positive tone."));
    assert!(request.ignored.is_empty(), "{request:?}");
    // Strict: the refusal, after audio.start, as every other thing the engine cannot do.
    let mut h = Harness::new(Catalog::new(caps, Naming::new()).with_strict(true), SessionOptions::default());
    h.send(config).send(&text("x")).send(DONE);
    let outs = h.take();
    assert!(!outs.iter().any(|o| matches!(o, Out::Synthesize(..))), "{outs:?}");
    assert_eq!(
        frames(&outs)[1]["message"],
        "Generation failed for utterance 0, sentence 0: instructions are not supported by hibari (it has no voice \
         design or style prompts)"
    );
}

// Issue 13: the server's aliases (OpenAI's voice names) reach the engine as its own names.
#[test]
fn voice_aliases_reach_the_engine_as_its_voices() {
    let mut caps = capabilities(false, false);
    caps.voices = vec!["heart".into(), "Bella".into()];
    let naming = Naming::new().with_voice_alias("alloy", "default").with_voice_alias("Nova", "bella");
    let mut h = Harness::new(Catalog::new(Arc::new(caps), naming), SessionOptions::default());
    // Aliases become the voice they stand for, and the engine's own names (in any case) its
    // spelling of them (issue 31: resolved once, in the core); `default` is its default voice.
    for (voice, expected) in [("ALLOY", None), ("nova", Some("Bella")), ("HEART", Some("heart")), ("default", None)] {
        h.send(&format!(r#"{{"type":"session.config","voice":"{voice}"}}"#)).send(&text("x")).send(DONE);
        let (id, request) = Harness::request(&h.take());
        assert_eq!(request.voice.as_deref(), expected, "{voice}");
        h.engine(id, EngineEventKind::Finished);
    }
    h.send(r#"{"type":"session.config","voice":"echo"}"#).send(&text("x")).send(DONE);
    let outs = h.take();
    let error = frames(&outs).into_iter().find(|f| f["type"] == "error").expect("an error frame");
    assert_eq!(
        error["message"],
        "Generation failed for utterance 4, sentence 0: Invalid voice 'echo'. Supported: Bella, heart"
    );
}

#[test]
fn http_request_ids_never_read_like_utterance_ids() {
    let utterance = RequestId { connection: 3, utterance: 0 };
    let http = RequestId::http(3, 0);
    assert_ne!(utterance, http);
    assert_eq!(utterance.to_string(), "speech-stream-3-0");
    assert_eq!(http.to_string(), "speech-http-3-0");
    assert!(http.is_http() && !utterance.is_http());
}

// Issue 13: upstream's split_granularity (docs/protocol-upstream.md §2). What the client sees of one
// utterance: (type, sentence_index, sentence_text or total_sentences).
fn summary(outs: &[Out]) -> Vec<(String, i64, String)> {
    frames(outs)
        .iter()
        .map(|f| {
            let detail = f.get("sentence_text").or(f.get("total_sentences")).or(f.get("message")).cloned();
            let detail = detail.map(|d| d.as_str().map(str::to_owned).unwrap_or(d.to_string())).unwrap_or_default();
            (f["type"].as_str().unwrap().to_owned(), f["sentence_index"].as_i64().unwrap_or(-1), detail)
        })
        .collect()
}

fn synthesized(outs: &[Out]) -> Vec<(RequestId, String)> {
    outs.iter()
        .filter_map(|o| match o {
            Out::Synthesize(id, r) => Some((*id, r.text.clone())),
            _ => None,
        })
        .collect()
}

fn finish_taken(h: &mut Harness) -> Vec<Out> {
    let outs = h.take();
    finish_all(h, outs)
}

/// Finish every request among `outs` (in order), returning what that made come out.
fn finish_all(h: &mut Harness, mut outs: Vec<Out>) -> Vec<Out> {
    let mut all = Vec::new();
    loop {
        let requests = synthesized(&outs);
        all.append(&mut outs);
        let Some((id, _)) = requests.first() else { return all };
        h.engine(*id, EngineEventKind::Audio { pcm: vec![1, 0], sample_rate: 24_000 });
        h.engine(*id, EngineEventKind::Finished);
        outs = h.take();
    }
}

#[test]
fn sentence_granularity_synthesizes_each_sentence_before_input_done() {
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","voice":"Vivian","split_granularity":"sentence"}"#);
    h.send(&text("Hello world. How are"));
    let outs = h.take();
    // The first sentence goes to the engine at once; the rest waits for more text.
    assert_eq!(synthesized(&outs).iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(), ["Hello world."]);
    let mut all = finish_all(&mut h, outs);
    h.send(&text(" you? Fine."));
    all.extend(finish_taken(&mut h));
    h.send(DONE);
    all.extend(finish_taken(&mut h));
    let s = |t: &str, i: i64, d: &str| (t.to_owned(), i, d.to_owned());
    assert_eq!(
        summary(&all),
        [
            s("audio.start", 0, "Hello world."),
            s("audio.done", 0, ""),
            s("audio.start", 1, "How are you?"),
            s("audio.done", 1, ""),
            s("audio.start", 2, "Fine."),
            s("audio.done", 2, ""),
            s("session.done", -1, "3"),
        ]
    );
    // Each unit its own request; the next utterance starts at sentence 0 again.
    let ids: Vec<u64> = all
        .iter()
        .filter_map(|o| match o {
            Out::Synthesize(id, _) => Some(id.utterance),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [0, 1, 2]);
    h.send(&text("Next one.")).send(DONE);
    let next = finish_taken(&mut h);
    assert_eq!(summary(&next)[0], s("audio.start", 0, "Next one."));
    assert_eq!(frames(&next).last().unwrap()["utterance_index"], 1);
    assert_eq!(synthesized(&next)[0].0.utterance, 3, "ids stay unique");
}

#[test]
fn clause_granularity_and_the_reconfiguration_rule() {
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","voice":"Vivian","split_granularity":"clause"}"#);
    h.send(&text("Hello, world. "));
    let all = finish_taken(&mut h);
    let texts: Vec<String> = synthesized(&all).into_iter().map(|(_, t)| t).collect();
    assert_eq!(texts, ["Hello,", "world."]);
    // The utterance is open (its buffer is empty): no reconfiguration until input.done.
    h.send(r#"{"type":"session.config","voice":"Serena"}"#);
    let error = frames(&h.take()).into_iter().find(|f| f["type"] == "error").expect("refused");
    assert_eq!(
        error["message"],
        "session.config cannot be applied while an utterance is in progress; send input.done first"
    );
    h.send(DONE);
    assert_eq!(summary(&h.take()).last().unwrap().2, "2");
    h.send(r#"{"type":"session.config","voice":"Serena"}"#).send(&text("Third.")).send(DONE);
    let outs = h.take();
    assert_eq!(Harness::request(&outs).1.voice.as_deref(), Some("Serena"));
    // An unknown granularity is the pydantic error, fatal on the first config.
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","split_granularity":"paragraph"}"#);
    let outs = h.take();
    assert!(frames(&outs)[0]["message"].as_str().unwrap().contains(
        "split_granularity\n  Input should be 'none', 'sentence' or 'clause' [type=literal_error, input_value='paragraph'"
    ));
    assert_eq!(outs.last(), Some(&Out::Close(1000)));
}

#[test]
fn split_units_fail_alone_and_a_cancel_drops_the_rest() {
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","split_granularity":"sentence"}"#);
    h.send(&text("One. Two. Three. Four"));
    let outs = h.take();
    let (first, _) = synthesized(&outs)[0];
    // A failed unit: its error and audio.done; the next unit still runs.
    h.engine(first, EngineEventKind::Failed("boom".into()));
    let outs = h.take();
    let s = summary(&outs);
    assert_eq!(s[0].2, "Generation failed for utterance 0, sentence 0: boom");
    assert_eq!(s[1].0, "audio.done");
    assert_eq!(s[2], ("audio.start".to_owned(), 1, "Two.".to_owned()));
    let (second, _) = synthesized(&outs)[0];
    // A cancel ends the unit in flight and drops "Three." and the remainder "Four"; the
    // utterance stays open until input.done, which counts the units started.
    h.send(r#"{"type":"input.cancel"}"#);
    let outs = h.take();
    assert_eq!(outs.first(), Some(&Out::Abort(second)));
    assert!(synthesized(&outs).is_empty(), "{outs:?}");
    assert_eq!(frames(&outs).last().unwrap()["cancelled"], true);
    h.send(DONE);
    assert_eq!(summary(&h.take()), [("session.done".to_owned(), -1, "2".to_owned())]);
}

// Upstream's framing, chosen by a client that sends split_granularity: the streamed
// audio.start waits for the first audio and carries its rate and channels.
#[test]
fn upstream_clients_get_the_deferred_audio_start() {
    let config = r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","split_granularity":"none"}"#;
    let mut h = Harness::default();
    h.send(config).send(&text("Hello.")).send(DONE);
    let outs = h.take();
    assert!(frames(&outs).is_empty(), "nothing before the audio: {outs:?}");
    let (id, _) = Harness::request(&outs);
    h.audio(id, &[1, 0, 2, 0], 24_000);
    let outs = h.take();
    assert_eq!(
        frames(&outs)[0],
        serde_json::json!({"type":"audio.start","utterance_index":0,"sentence_index":0,"sentence_text":"Hello.","format":"pcm","sample_rate":24000,"channels":1})
    );
    assert_eq!(outs[1], Out::Binary(vec![1, 0, 2, 0]));
    h.engine(id, EngineEventKind::Finished);
    // A failure before any audio: the bare start, the error, audio.done.
    h.send(&text("Again.")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.engine(id, EngineEventKind::Failed("boom".into()));
    let outs = h.take();
    let f = frames(&outs);
    assert_eq!(
        f[0],
        serde_json::json!({"type":"audio.start","utterance_index":1,"sentence_index":0,"sentence_text":"Again.","format":"pcm"})
    );
    assert_eq!(
        (f[1]["type"].as_str(), f[2]["type"].as_str(), &f[2]["error"]),
        (Some("error"), Some("audio.done"), &serde_json::json!(true))
    );
    // Word timestamps: channels on every audio.chunk, the start before the first.
    let mut h = Harness::new(capabilities(true, false), SessionOptions::default());
    h.send(r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","word_timestamps":true,"split_granularity":"sentence"}"#);
    h.send(&text("Hi there.")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, &[0; 480], 24_000).engine(id, EngineEventKind::Finished);
    let f = frames(&h.take());
    assert_eq!(
        (f[0]["type"].as_str(), &f[0]["word_timestamps"], &f[0]["channels"]),
        (Some("audio.start"), &serde_json::json!(true), &serde_json::json!(1))
    );
    assert!(f.iter().filter(|f| f["type"] == "audio.chunk").all(|c| c["channels"] == 1));
    // The reference's framing is unchanged without split_granularity.
    let mut h = Harness::default();
    h.send(STREAM_CONFIG).send(&text("x")).send(DONE);
    assert_eq!(frames(&h.take())[0]["sample_rate"], 24000);
}

// Issue 13: session.config's sample_rate (ours): streamed audio resampled, chunk by chunk, to the
// same samples as the whole; audio.start and total_bytes at the new rate; whole files encoded at it.
#[test]
fn session_sample_rate_resamples_what_is_sent() {
    let samples: Vec<i16> = (0..4801).map(|i| ((i as f64 * 0.05).sin() * 8000.0) as i16).collect();
    let pcm: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let expected = speechstream_core::resample::resample(24_000, 8000, &samples).unwrap();
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","sample_rate":8000}"#);
    h.send(&text("x")).send(DONE);
    let outs = h.take();
    assert_eq!(frames(&outs)[0]["sample_rate"], 8000);
    let (id, _) = Harness::request(&outs);
    h.audio(id, &pcm[..1002], 24_000).audio(id, &pcm[1002..], 24_000).engine(id, EngineEventKind::Finished);
    let outs = h.take();
    let sent: Vec<u8> = outs
        .iter()
        .filter_map(|o| match o {
            Out::Binary(b) => Some(b.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let expected_bytes: Vec<u8> = expected.iter().flat_map(|s| s.to_le_bytes()).collect();
    assert_eq!(sent, expected_bytes);
    let done = frames(&outs).into_iter().find(|f| f["type"] == "audio.done").unwrap();
    assert_eq!(done["total_bytes"], expected_bytes.len());
    // A whole wav is encoded at the rate asked for.
    h.send(r#"{"type":"session.config","sample_rate":16000}"#).send(&text("y")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, &pcm, 24_000).engine(id, EngineEventKind::Finished);
    let wav = h.take().into_iter().find_map(|o| if let Out::Binary(b) = o { Some(b) } else { None }).unwrap();
    assert_eq!(u32::from_le_bytes(wav[24..28].try_into().unwrap()), 16_000);
    assert_eq!(wav.len() - 44, (4801usize * 2).div_ceil(3) * 2);
    // Word timestamps: chunks at the new rate, their times and the words' unchanged.
    let mut h = Harness::new(capabilities(true, false), SessionOptions::default());
    h.send(r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","word_timestamps":true,"sample_rate":16000}"#);
    h.send(&text("x")).send(DONE);
    let (id, _) = Harness::request(&h.take());
    h.audio(id, &pcm[..4800 * 2], 24_000).words(id, &[("x", 10, 190)]).engine(id, EngineEventKind::Finished);
    let chunks: Vec<serde_json::Value> = frames(&h.take()).into_iter().filter(|f| f["type"] == "audio.chunk").collect();
    assert!(chunks.iter().all(|c| c["sample_rate"] == 16_000), "{chunks:?}");
    let last = chunks.last().unwrap();
    assert_eq!(
        (&last["chunk_end_ms"], &last["timestamps"][0]["end_ms"]),
        (&serde_json::json!(200), &serde_json::json!(190))
    );
    use base64::Engine as _;
    let bytes: usize = chunks
        .iter()
        .map(|c| base64::engine::general_purpose::STANDARD.decode(c["audio_b64"].as_str().unwrap()).unwrap().len())
        .sum();
    assert_eq!(bytes, 3200 * 2, "200 ms at 16 kHz");
    // Rates it cannot make, and G.711 at another rate, are config errors (later ones not fatal).
    h.send(r#"{"type":"session.config","sample_rate":12345}"#);
    let message = frames(&h.take())[0]["message"].as_str().unwrap().to_owned();
    assert!(
        message
            .contains("sample_rate\n  Value error, sample_rate must be one of 8000, 16000, 22050, 24000, 44100, 48000"),
        "{message}"
    );
    h.send(r#"{"type":"session.config","sample_rate":16000,"response_format":"ulaw"}"#);
    let message = frames(&h.take())[0]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("response_format='ulaw' is 8000 Hz only (G.711)"), "{message}");
}

// Upstream's open-PR streaming_mode (docs/protocol-upstream.md §4), opt-in: one audio stream per
// session made of fragments, acknowledged commits, no utterance_index.
#[test]
fn sentence_commit_streams_committed_fragments() {
    let mut h = Harness::default();
    h.send(r#"{"type":"input.commit"}"#);
    assert_eq!(frames(&h.take())[0]["message"], "Expected session.config, got: input.commit");
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","voice":"Vivian","streaming_mode":"sentence_commit","response_format":"pcm"}"#);
    h.send(r#"{"type":"input.commit","commit_id":"c0"}"#);
    assert_eq!(frames(&h.take())[0]["message"], "input.commit requires buffered text");
    h.send(r#"{"type":"input.commit","commit_id":7}"#);
    let message = frames(&h.take())[0]["message"].as_str().unwrap().to_owned();
    assert!(message.starts_with("Invalid input.commit: 1 validation error for InputCommitMessage\ncommit_id\n  Input should be a valid string"), "{message}");
    h.send(&text(" Hello there.")).send(r#"{"type":"input.commit","commit_id":"sentence-0"}"#);
    let outs = h.take();
    let f = frames(&outs);
    assert_eq!(
        f[0],
        serde_json::json!({"type":"input.committed","commit_id":"sentence-0","sentence_index":0,"chars_committed":13})
    );
    assert_eq!(
        f[1],
        serde_json::json!({"type":"audio.start","sentence_index":0,"sentence_text":"Hello there.","format":"pcm","sample_rate":24000})
    );
    let (first, request) = Harness::request(&outs);
    assert_eq!(request.text, "Hello there.");
    h.audio(first, &[1, 0], 24_000).engine(first, EngineEventKind::Finished);
    assert_eq!(h.take(), [Out::Binary(vec![1, 0])], "one stream: no audio.done per fragment");
    // input.done commits the rest implicitly, then ends the stream.
    h.send(&text("And more.")).send(DONE);
    let outs = h.take();
    assert_eq!(frames(&outs)[0]["commit_id"], serde_json::Value::Null);
    let (second, _) = Harness::request(&outs);
    h.audio(second, &[2, 0, 3, 0], 24_000).engine(second, EngineEventKind::Finished);
    let outs = h.take();
    assert_eq!(outs[0], Out::Binary(vec![2, 0, 3, 0]));
    assert_eq!(
        frames(&outs),
        [
            serde_json::json!({"type":"audio.done","sentence_index":0,"total_bytes":6,"error":false}),
            serde_json::json!({"type":"session.done","total_sentences":2}),
        ]
    );
    // In the default mode input.commit is still an unknown type.
    let mut h = Harness::default();
    h.send(CONFIG).send(r#"{"type":"input.commit"}"#);
    assert_eq!(frames(&h.take())[0]["message"], "Unknown message type: input.commit");
}

#[test]
fn token_level_fragments_and_the_mode_rules() {
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","streaming_mode":"token_level","response_format":"pcm"}"#);
    h.send(&text("Hello ")).send(&text("")).send(&text("world"));
    let outs = h.take();
    let (first, request) = Harness::request(&outs);
    assert_eq!(request.text, "Hello");
    h.engine(first, EngineEventKind::Failed("boom".into()));
    let outs = h.take();
    // A failure ends the stream's audio: the next fragment is not synthesized.
    assert_eq!(frames(&outs)[0]["message"], "Generation failed: boom");
    assert!(!outs.iter().any(|o| matches!(o, Out::Synthesize(..))), "{outs:?}");
    h.send(DONE);
    assert_eq!(
        frames(&h.take()),
        [
            serde_json::json!({"type":"audio.done","sentence_index":0,"total_bytes":0,"error":true}),
            serde_json::json!({"type":"session.done","total_sentences":2}),
        ]
    );
    // The mode's config rules (first failure wins), and an empty session.
    for (config, why) in [
        (
            r#"{"streaming_mode":"token_level"}"#,
            "token_level streaming requires response_format='pcm'. Got response_format='wav'.",
        ),
        (
            r#"{"streaming_mode":"token_level","word_timestamps":true}"#,
            "word_timestamps is not supported in token_level mode.",
        ),
        (r#"{"streaming_mode":"chunked"}"#, "Input should be 'sentence', 'token_level' or 'sentence_commit'"),
    ] {
        let mut h = Harness::default();
        let mut object: serde_json::Value = serde_json::from_str(config).unwrap();
        object["type"] = "session.config".into();
        h.send(&object.to_string());
        let message = frames(&h.take())[0]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(why), "{config}: {message}");
    }
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","streaming_mode":"sentence_commit","response_format":"pcm"}"#).send(DONE);
    assert_eq!(frames(&h.take()), [serde_json::json!({"type":"session.done","total_sentences":0})]);
    // Speed is honoured in the modes and on streamed audio (ours, issue 34: upstream refuses it).
    for config in [
        r#"{"type":"session.config","streaming_mode":"sentence_commit","response_format":"pcm","speed":2}"#,
        r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","speed":0.5}"#,
    ] {
        let mut h = Harness::default();
        h.send(config).send(&text("Hello there.")).send(DONE);
        let outs = h.take();
        let (_, request) = Harness::request(&outs);
        assert!(request.speed == 2.0 || request.speed == 0.5, "{config}: {}", request.speed);
        assert!(!frames(&outs).iter().any(|f| f["type"] == "error"), "{outs:?}");
    }
}

// Upstream's open-PR text_input_mode "commitment" (docs/protocol-upstream.md §3.5, C1 C4 C5 C6).
#[test]
fn commitment_mode_commits_raw_segments_as_text_arrives() {
    let config = r#"{"type":"session.config","text_input_mode":"commitment","language":"english"}"#;
    let mut h = Harness::default();
    h.send(config).send(&text("The total is 2026"));
    assert!(h.take().is_empty(), "nothing before the sentence ends");
    h.send(&text(" dollars. "));
    let all = finish_taken(&mut h);
    assert_eq!(summary(&all)[0], ("audio.start".to_owned(), 0, "The total is 2026 dollars.".to_owned()));
    h.send(r#"{"type":"session.config","language":"english"}"#);
    let error = frames(&h.take()).into_iter().find(|f| f["type"] == "error").unwrap();
    assert_eq!(
        error["message"],
        "session.config cannot be applied while an utterance is active; wait for session.done first"
    );
    h.send(&text("Thank you")).send(DONE);
    let all = finish_taken(&mut h);
    let s = summary(&all);
    assert_eq!(s[0], ("audio.start".to_owned(), 1, " Thank you".to_owned()), "raw, with its space");
    assert_eq!(s.last().unwrap().2, "2");
    // C5: a failed segment fails the utterance; the rest is not said.
    let mut h = Harness::default();
    h.send(config).send(&text("First! Second! Third!")).send(DONE);
    let outs = h.take();
    let (id, _) = Harness::request(&outs);
    h.engine(id, EngineEventKind::Failed("boom".into()));
    let outs = h.take();
    assert!(!outs.iter().any(|o| matches!(o, Out::Synthesize(..))), "{outs:?}");
    let s = summary(&outs);
    assert!(s[0].2.contains("boom") && s[1].0 == "audio.done" && s.last().unwrap().2 == "1", "{s:?}");
    // C6: past the utterance's limit it fails, later text is refused, input.done counts none.
    let options = SessionOptions { max_buffered_chars: 3, ..SessionOptions::default() };
    let mut h = Harness::new(capabilities(false, false), options);
    h.send(config).send(&text("1234"));
    assert_eq!(frames(&h.take())[0]["message"], "Commitment utterance exceeds 3 characters");
    h.send(&text("late"));
    assert!(frames(&h.take())[0]["message"].as_str().unwrap().contains("current utterance has failed"));
    h.send(DONE);
    assert_eq!(summary(&h.take()), [("session.done".to_owned(), -1, "0".to_owned())]);
    // C4: the language must be Chinese or English.
    let mut h = Harness::default();
    h.send(r#"{"type":"session.config","text_input_mode":"commitment","language":"Auto"}"#);
    assert_eq!(
        frames(&h.take())[0]["message"],
        "text_input_mode='commitment' requires language='Chinese' or language='English'"
    );
}

/// Every `Synthesize` is followed by exactly one `RequestEnded`: when the session takes the
/// engine's answer (before the utterance's last frames, even before a whole file's encoding), or
/// right after its `Abort`; a request the engine never got (a refusal) has none.
#[test]
fn request_ends_follow_answers_and_aborts() {
    use speechstream_core::engine::EngineEvent;
    use speechstream_core::session::{EngineCommand, Output, RequestEnd, Session};
    use std::sync::Arc;
    use std::time::Instant;

    let start = Instant::now();
    let new = || Session::new(start, 3, Arc::new(capabilities(false, false)), Arc::new(SessionOptions::default()));
    let drain = |s: &mut Session| std::iter::from_fn(|| s.poll_output()).collect::<Vec<Output>>();
    let send = |s: &mut Session, json: &str| s.handle_client(start, ClientFrame::Text(json.to_owned()));
    let submitted = |outs: &[Output]| -> RequestId {
        let ids: Vec<RequestId> = outs
            .iter()
            .filter_map(|o| match o {
                Output::Engine(EngineCommand::Synthesize { id, .. }) => Some(*id),
                _ => None,
            })
            .collect();
        assert_eq!(ids.len(), 1, "{outs:?}");
        ids[0]
    };
    let text_types = |outs: &[Output]| -> Vec<String> {
        outs.iter()
            .filter_map(|o| match o {
                Output::Text(t) => Some(serde_json::from_str::<serde_json::Value>(t).unwrap()["type"].to_string()),
                _ => None,
            })
            .collect()
    };
    let ended = |id, end| Output::RequestEnded { id, end };

    // Finished, streamed: the end comes first, then audio.done and session.done.
    let mut s = new();
    send(&mut s, STREAM_CONFIG);
    send(&mut s, &text("Hello."));
    send(&mut s, DONE);
    let id = submitted(&drain(&mut s));
    s.handle_engine(start, EngineEvent { id, kind: EngineEventKind::Finished }).unwrap();
    let outs = drain(&mut s);
    assert_eq!(outs[0], ended(id, RequestEnd::Finished));
    assert_eq!(text_types(&outs[1..]), ["\"audio.done\"", "\"session.done\""]);
    assert!(s.handle_engine(start, EngineEvent { id, kind: EngineEventKind::Finished }).is_err());

    // Finished, a whole file: the request is over before its file is encoded.
    let mut s = new();
    send(&mut s, CONFIG);
    send(&mut s, &text("Hello."));
    send(&mut s, DONE);
    let id = submitted(&drain(&mut s));
    s.handle_engine(start, EngineEvent { id, kind: EngineEventKind::Finished }).unwrap();
    let outs = drain(&mut s);
    assert_eq!(outs[0], ended(id, RequestEnd::Finished));
    assert!(matches!(outs[1], Output::Encode { .. }) && outs.len() == 2, "{outs:?}");

    // Failed: the engine's message.
    let mut s = new();
    send(&mut s, STREAM_CONFIG);
    send(&mut s, &text("Hello."));
    send(&mut s, DONE);
    let id = submitted(&drain(&mut s));
    s.handle_engine(start, EngineEvent { id, kind: EngineEventKind::Failed("boom".into()) }).unwrap();
    assert_eq!(drain(&mut s)[0], ended(id, RequestEnd::Failed("boom".into())));

    // Cancelled, and the peer gone: right after the abort.
    for cancel in [true, false] {
        let mut s = new();
        send(&mut s, STREAM_CONFIG);
        send(&mut s, &text("Hello."));
        send(&mut s, DONE);
        let id = submitted(&drain(&mut s));
        match cancel {
            true => send(&mut s, r#"{"type":"input.cancel"}"#),
            false => s.handle_client(start, ClientFrame::Closed),
        }
        let outs = drain(&mut s);
        assert_eq!(outs[..2], [Output::Engine(EngineCommand::Abort { id }), ended(id, RequestEnd::Aborted)]);
        assert_eq!(outs.iter().filter(|o| matches!(o, Output::RequestEnded { .. })).count(), 1);
    }

    // Refused before the engine (the engine has no codec): no request, no end.
    let mut s = new();
    send(
        &mut s,
        r#"{"type":"session.config","output_mode":"codec_tokens","stream_audio":true,"response_format":"pcm"}"#,
    );
    send(&mut s, &text("Hello."));
    send(&mut s, DONE);
    let outs = drain(&mut s);
    assert!(!outs.iter().any(|o| matches!(o, Output::Engine(_) | Output::RequestEnded { .. })), "{outs:?}");
}
