use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::frame::encode;
use super::*;
use crate::catalog::Naming;
use crate::engine::{EngineCapabilities, Voice};

fn capabilities() -> Arc<EngineCapabilities> {
    Arc::new(EngineCapabilities {
        voices: vec!["heart".into(), "emma".into()],
        ..EngineCapabilities::new("hibari", 24_000)
    })
}

fn session() -> (WyomingSession, Instant) {
    let now = Instant::now();
    (WyomingSession::new(now, 7, capabilities(), Arc::new(WyomingOptions::default())), now)
}

fn event(kind: &str, data: Value) -> Vec<u8> {
    let data = if data == json!({}) { Vec::new() } else { serde_json::to_vec(&data).unwrap() };
    encode(kind, &data, &[])
}

/// What the session asked for: events as (type, data, payload bytes), engine commands, closes.
#[derive(Debug, PartialEq)]
#[allow(clippy::large_enum_variant)] // a test log
enum Seen {
    Event(String, Value, usize),
    Submit(RequestId, SynthesisRequest),
    Abort(RequestId),
    Dropped(String),
    Close,
}

fn drain(session: &mut WyomingSession) -> Vec<Seen> {
    let mut decoder = frame::Decoder::default();
    let limits = FrameLimits { max_payload_bytes: 1 << 24, ..FrameLimits::default() };
    let mut seen = Vec::new();
    while let Some(output) = session.poll_output() {
        seen.push(match output {
            // Checked by the invariant checker and `request_ends_follow_answers_and_aborts`.
            Output::RequestEnded { .. } => continue,
            Output::Write(bytes) => {
                decoder.push(&bytes);
                let e = decoder.next_event(&limits).unwrap().unwrap();
                Seen::Event(e.kind, Value::Object(e.data), e.payload_bytes)
            }
            Output::Engine(EngineCommand::Synthesize { id, request }) => Seen::Submit(id, request),
            Output::Engine(EngineCommand::Abort { id }) => Seen::Abort(id),
            Output::Dropped(kind) => Seen::Dropped(kind),
            Output::Close { .. } => Seen::Close,
        });
    }
    seen
}

fn kinds(seen: &[Seen]) -> Vec<&str> {
    seen.iter()
        .map(|s| match s {
            Seen::Event(kind, ..) => kind.as_str(),
            Seen::Submit(..) => "SUBMIT",
            Seen::Abort(_) => "ABORT",
            Seen::Dropped(_) => "DROPPED",
            Seen::Close => "CLOSE",
        })
        .collect()
}

fn submitted(seen: &[Seen]) -> Vec<(RequestId, SynthesisRequest)> {
    seen.iter().filter_map(|s| if let Seen::Submit(id, r) = s { Some((*id, r.clone())) } else { None }).collect()
}

fn audio(id: RequestId, bytes: usize) -> EngineEvent {
    EngineEvent { id, kind: EngineEventKind::Audio { pcm: vec![1; bytes], sample_rate: 24_000 } }
}

fn finished(id: RequestId) -> EngineEvent {
    EngineEvent { id, kind: EngineEventKind::Finished }
}

#[test]
fn describe_lists_the_program_and_its_voices() {
    let (mut s, now) = session();
    s.handle_bytes(now, &event("describe", json!({})));
    let seen = drain(&mut s);
    let [Seen::Event(kind, info, 0)] = &seen[..] else { panic!("{seen:?}") };
    assert_eq!(kind, "info");
    let tts = &info["tts"][0];
    assert_eq!((tts["name"].as_str(), tts["installed"].as_bool()), (Some("speechstream"), Some(true)));
    assert_eq!(tts["supports_synthesize_streaming"], true);
    assert_eq!(tts["version"], env!("CARGO_PKG_VERSION"));
    let names: Vec<&str> = tts["voices"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["heart", "emma"]);
    assert_eq!(tts["voices"][0]["languages"], json!(["en"]));
    for key in ["asr", "handle", "intent", "wake", "mic", "snd"] {
        assert_eq!(info[key], json!([]), "{key}");
    }
}

#[test]
fn synthesize_streams_one_audio_cycle_as_the_engine_makes_it() {
    let (mut s, now) = session();
    s.handle_bytes(
        now,
        &event("synthesize", json!({"text": "  Hello there. How are you?\n", "voice": {"name": "emma"}})),
    );
    let seen = drain(&mut s);
    let [(id, request)] = &submitted(&seen)[..] else { panic!("{seen:?}") };
    // (a whole `synthesize`: computed unpaced, its audio sent as it comes)
    assert_eq!(
        (request.text.as_str(), request.voice.as_deref(), request.stream),
        ("Hello there. How are you?", Some("emma"), false)
    );
    assert!(s.busy() && s.poll_timeout().is_none());
    s.handle_engine(now, audio(*id, 4800)).unwrap();
    s.handle_engine(now, audio(*id, 960)).unwrap();
    s.handle_engine(now, finished(*id)).unwrap();
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["audio-start", "audio-chunk", "audio-chunk", "audio-stop"]);
    assert_eq!(
        seen[0],
        Seen::Event("audio-start".into(), json!({"rate": 24000, "width": 2, "channels": 1, "timestamp": null}), 0)
    );
    assert_eq!(
        seen[2],
        Seen::Event("audio-chunk".into(), json!({"rate": 24000, "width": 2, "channels": 1, "timestamp": null}), 960)
    );
    assert!(!s.busy() && s.poll_timeout().is_some());
}

#[test]
fn streamed_text_is_spoken_sentence_by_sentence_while_it_arrives() {
    let (mut s, now) = session();
    s.handle_bytes(now, &event("synthesize-start", json!({"voice": {"name": "heart"}})));
    s.handle_bytes(now, &event("synthesize-chunk", json!({"text": "Hello wor"})));
    assert!(drain(&mut s).is_empty());
    s.handle_bytes(now, &event("synthesize-chunk", json!({"text": "ld. Dr. Smith is "})));
    let seen = drain(&mut s);
    let [(first, request)] = &submitted(&seen)[..] else { panic!("{seen:?}") };
    assert_eq!((request.text.as_str(), request.voice.as_deref()), ("Hello world.", Some("heart")));
    assert!(request.stream, "a stream's sentences are paced to their playback");
    // More text while the first sentence is spoken: queued, not submitted.
    s.handle_bytes(now, &event("synthesize-chunk", json!({"text": "here. And"})));
    // The whole text again, as Home Assistant sends it for older servers: ignored.
    s.handle_bytes(now, &event("synthesize", json!({"text": "Hello world. Dr. Smith is here. And more"})));
    s.handle_bytes(now, &event("synthesize-chunk", json!({"text": " more"})));
    s.handle_bytes(now, &event("synthesize-stop", json!({})));
    assert!(drain(&mut s).is_empty());
    s.handle_engine(now, audio(*first, 100)).unwrap();
    s.handle_engine(now, finished(*first)).unwrap();
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["audio-start", "audio-chunk", "audio-stop", "SUBMIT"]);
    let [(second, request)] = &submitted(&seen)[..] else { panic!() };
    assert_eq!(request.text, "Dr. Smith is here.");
    s.handle_engine(now, finished(*second)).unwrap();
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["audio-start", "audio-stop", "SUBMIT"]);
    let [(third, request)] = &submitted(&seen)[..] else { panic!() };
    assert_eq!(request.text, "And more");
    s.handle_engine(now, audio(*third, 10)).unwrap();
    s.handle_engine(now, finished(*third)).unwrap();
    assert_eq!(kinds(&drain(&mut s)), ["audio-start", "audio-chunk", "audio-stop", "synthesize-stopped"]);
    // A new request after the stream is served; an empty one is the client's error (issue 34).
    s.handle_bytes(now, &event("synthesize", json!({"text": " \n"})));
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["error", "CLOSE"]);
    assert_eq!(
        seen[0],
        Seen::Event(
            "error".into(),
            json!({"text": "synthesize needs a text that is not empty", "code": "bad-request"}),
            0
        )
    );
}

#[test]
fn answers_keep_the_order_of_the_requests() {
    let (mut s, now) = session();
    let mut bytes = event("synthesize", json!({"text": "One."}));
    bytes.extend(event("describe", json!({})));
    bytes.extend(event("ping", json!({"text": "hi"})));
    bytes.extend(event("select-program", json!({"name": "speechstream"})));
    s.handle_bytes(now, &bytes);
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["DROPPED", "SUBMIT"]);
    let id = submitted(&seen)[0].0;
    s.handle_engine(now, finished(id)).unwrap();
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["audio-start", "audio-stop", "info", "pong"]);
    assert_eq!(seen[3], Seen::Event("pong".into(), json!({"text": "hi"}), 0));
    assert!(s.handle_engine(now, finished(id)).is_err(), "a finished request is no longer this session's");
}

#[test]
fn bad_input_gets_an_error_and_the_close() {
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"{not json\n".to_vec(), codes::BAD_EVENT, "invalid event header"),
        (vec![b'x'; 70_000], codes::BAD_EVENT, "longer than 65536 bytes"),
        (
            b"{\"type\":\"synthesize\",\"payload_length\":99999999}\n".to_vec(),
            codes::BAD_EVENT,
            "payload_length 99999999",
        ),
        (
            event("synthesize", json!({"voice": {"name": "heart"}})),
            codes::BAD_REQUEST,
            "synthesize needs a text string",
        ),
        (event("synthesize", json!({"text": 5})), codes::BAD_REQUEST, "needs a text string"),
        (event("synthesize", json!({"text": "x".repeat(131_073)})), codes::BAD_REQUEST, "longer than 131072"),
        (
            event("synthesize", json!({"text": "Hi.", "voice": {"name": "nobody"}})),
            codes::UNKNOWN_VOICE,
            "has: heart, emma",
        ),
        (event("synthesize-chunk", json!({"text": "Hi."})), codes::BAD_REQUEST, "outside a stream"),
        (event("synthesize-stop", json!({})), codes::BAD_REQUEST, "outside a stream"),
    ];
    for (bytes, code, text) in cases {
        let (mut s, now) = session();
        s.handle_bytes(now, &bytes);
        let seen = drain(&mut s);
        let [Seen::Event(kind, data, 0), Seen::Close] = &seen[..] else { panic!("{seen:?} for {text}") };
        assert_eq!((kind.as_str(), data["code"].as_str()), ("error", Some(code)));
        assert!(data["text"].as_str().unwrap().contains(text), "{data}");
        assert!(s.is_closed());
        s.handle_bytes(now, &event("describe", json!({})));
        assert!(drain(&mut s).is_empty(), "nothing after the close");
    }
}

#[test]
fn too_much_queued_text_is_refused() {
    let now = Instant::now();
    let options = WyomingOptions { max_queued_chars: 1000, ..WyomingOptions::default() };
    let mut s = WyomingSession::new(now, 1, capabilities(), Arc::new(options));
    s.handle_bytes(now, &event("synthesize-start", json!({})));
    s.handle_bytes(now, &event("synthesize-chunk", json!({"text": "a".repeat(900)})));
    assert!(drain(&mut s).is_empty());
    s.handle_bytes(now, &event("synthesize-chunk", json!({"text": "b".repeat(200)})));
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["error", "CLOSE"]);
}

#[test]
fn a_vanished_client_aborts_its_request_once() {
    let (mut s, now) = session();
    s.handle_bytes(now, &event("synthesize", json!({"text": "A long text."})));
    let id = submitted(&drain(&mut s))[0].0;
    s.handle_engine(now, audio(id, 100)).unwrap();
    drain(&mut s);
    s.handle_closed(now);
    s.handle_closed(now);
    s.handle_shutdown(now);
    assert_eq!(drain(&mut s), [Seen::Abort(id)]);
    assert!(s.handle_engine(now, audio(id, 100)).is_err());
}

#[test]
fn an_engine_failure_ends_without_audio_stop() {
    let (mut s, now) = session();
    s.handle_bytes(now, &event("synthesize", json!({"text": "Hello."})));
    let id = submitted(&drain(&mut s))[0].0;
    s.handle_engine(now, audio(id, 100)).unwrap();
    s.handle_engine(now, EngineEvent { id, kind: EngineEventKind::Failed("out of memory".into()) }).unwrap();
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["audio-start", "audio-chunk", "error", "CLOSE"]);
    let Seen::Event(_, data, _) = &seen[2] else { panic!() };
    assert_eq!(data["text"], "synthesis failed: out of memory");
}

#[test]
fn an_idle_connection_times_out() {
    let (mut s, now) = session();
    let deadline = s.poll_timeout().unwrap();
    assert_eq!(deadline, now + Duration::from_secs(30));
    s.handle_timeout(now + Duration::from_secs(29));
    assert!(drain(&mut s).is_empty());
    // A header trickled in does not count as activity.
    s.handle_bytes(now + Duration::from_secs(20), b"{\"type\":");
    assert_eq!(s.poll_timeout(), Some(deadline));
    s.handle_timeout(deadline);
    assert_eq!(kinds(&drain(&mut s)), ["error", "CLOSE"]);
}

#[test]
fn shutdown_aborts_and_says_why() {
    let (mut s, now) = session();
    s.handle_bytes(now, &event("synthesize", json!({"text": "Hello."})));
    let id = submitted(&drain(&mut s))[0].0;
    s.handle_shutdown(now);
    let seen = drain(&mut s);
    assert_eq!(seen[0], Seen::Abort(id));
    assert_eq!(kinds(&seen[1..]), ["error", "CLOSE"]);
}

#[test]
fn a_language_picks_a_voice() {
    let now = Instant::now();
    let voice = |name: &str, language: &str| WyomingVoice {
        name: name.into(),
        description: None,
        languages: vec![language.into()],
        speakers: Vec::new(),
    };
    let options =
        WyomingOptions { voices: vec![voice("heart", "en-US"), voice("emma", "en-GB")], ..Default::default() };
    let options = Arc::new(options);
    let mut s = WyomingSession::new(now, 1, capabilities(), options.clone());
    s.handle_bytes(now, &event("synthesize", json!({"text": "Hi.", "voice": {"language": "en_GB"}})));
    assert_eq!(submitted(&drain(&mut s))[0].1.voice.as_deref(), Some("emma"));
    // Issue 34: the language without its region gets a voice of that language; a name and a
    // language it does not speak, or a language no voice speaks, is the client's error.
    for (voice, expected) in [
        (json!({"language": "EN-us"}), Some("heart")),
        (json!({"language": "en-AU"}), Some("heart")),
        (json!({"language": "en"}), Some("heart")),
        (json!({"name": "alloy", "language": "en-US"}), None),
        (json!({"name": "emma", "language": ""}), Some("emma")),
    ] {
        let mut s = WyomingSession::new(now, 1, Catalog::new(capabilities(), Naming::openai()), options.clone());
        s.handle_bytes(now, &event("synthesize", json!({"text": "Hi.", "voice": voice})));
        assert_eq!(submitted(&drain(&mut s))[0].1.voice.as_deref(), expected, "{voice}");
    }
    for voice in [json!({"language": "de-DE"}), json!({"name": "heart", "language": "de"})] {
        let mut s = WyomingSession::new(now, 1, capabilities(), options.clone());
        s.handle_bytes(now, &event("synthesize-start", json!({"voice": voice})));
        let seen = drain(&mut s);
        assert_eq!(kinds(&seen), ["error", "CLOSE"], "{voice}");
        let language = voice["language"].as_str().unwrap();
        let text = format!("no voice speaks language '{language}'; this server speaks: en-US, en-GB");
        assert_eq!(seen[0], Seen::Event("error".into(), json!({"text": text, "code": "unknown-voice"}), 0));
    }
}

#[test]
fn a_multi_speaker_voice_lists_its_speakers_and_takes_one_by_name_or_id() {
    let now = Instant::now();
    let capabilities = Arc::new(EngineCapabilities {
        voices: vec![
            Voice::new("en_US-libritts-high").with_language("en-US").with_speakers(["p3922", "p8699", "p4535"]),
            "heart".into(),
        ],
        ..EngineCapabilities::new("piper", 22_050)
    });
    let voices = capabilities.voices.iter().map(|v| WyomingVoice::of(v, "en")).collect();
    let options = Arc::new(WyomingOptions { voices, ..Default::default() });
    let mut s = WyomingSession::new(now, 1, capabilities.clone(), options.clone());
    s.handle_bytes(now, &event("describe", json!({})));
    let seen = drain(&mut s);
    let [Seen::Event(_, info, 0)] = &seen[..] else { panic!("{seen:?}") };
    let listed = &info["tts"][0]["voices"];
    assert_eq!(listed[0]["speakers"], json!([{"name": "p3922"}, {"name": "p8699"}, {"name": "p4535"}]));
    assert_eq!(listed[0]["languages"], json!(["en_US"]));
    assert_eq!(listed[1]["speakers"], Value::Null);
    // By name (any case) or by id, as wyoming-piper takes it; one the voice lacks, or a speaker
    // of a voice of one, is dropped (the first speaks, as in wyoming-piper).
    for (voice, expected) in [
        (json!({"name": "en_US-libritts-high", "speaker": "P8699"}), Some("p8699")),
        (json!({"name": "en_US-libritts-high", "speaker": "2"}), Some("p4535")),
        (json!({"name": "en_US-libritts-high", "speaker": 0}), Some("p3922")),
        (json!({"name": "en_US-libritts-high", "speaker": "nobody"}), None),
        (json!({"name": "heart", "speaker": "p8699"}), None),
        (json!({"name": "en_US-libritts-high"}), None),
    ] {
        let mut s = WyomingSession::new(now, 1, capabilities.clone(), options.clone());
        s.handle_bytes(now, &event("synthesize", json!({"text": "Hi.", "voice": voice})));
        let request = submitted(&drain(&mut s)).remove(0).1;
        assert_eq!(request.speaker.as_deref(), expected, "{voice}");
    }
}

#[test]
fn request_ends_follow_answers_and_aborts() {
    let ends = |s: &mut WyomingSession| -> Vec<(RequestId, RequestEnd)> {
        std::iter::from_fn(|| s.poll_output())
            .filter_map(|o| match o {
                Output::RequestEnded { id, end } => Some((id, end)),
                _ => None,
            })
            .collect()
    };
    let synthesize = |s: &mut WyomingSession, now| -> RequestId {
        s.handle_bytes(now, &event("synthesize", json!({"text": "Hello."})));
        let seen = drain(s);
        let [(id, _)] = &submitted(&seen)[..] else { panic!("{seen:?}") };
        *id
    };
    // Finished: the end comes first, before audio-stop.
    let (mut s, now) = session();
    let id = synthesize(&mut s, now);
    s.handle_engine(now, finished(id)).unwrap();
    assert_eq!(s.poll_output(), Some(Output::RequestEnded { id, end: RequestEnd::Finished }));
    assert_eq!(kinds(&drain(&mut s)), ["audio-start", "audio-stop"]);
    // Failed, with the engine's message.
    let (mut s, now) = session();
    let id = synthesize(&mut s, now);
    s.handle_engine(now, EngineEvent { id, kind: EngineEventKind::Failed("boom".into()) }).unwrap();
    assert_eq!(ends(&mut s), [(id, RequestEnd::Failed("boom".into()))]);
    // Aborted: the peer left, the server shuts down, the engine's rate changed.
    for how in 0..3 {
        let (mut s, now) = session();
        let id = synthesize(&mut s, now);
        match how {
            0 => s.handle_closed(now),
            1 => s.handle_shutdown(now),
            _ => {
                s.handle_engine(now, audio(id, 10)).unwrap();
                let _ = drain(&mut s);
                let kind = EngineEventKind::Audio { pcm: vec![1; 10], sample_rate: 16_000 };
                s.handle_engine(now, EngineEvent { id, kind }).unwrap();
            }
        }
        assert_eq!(s.poll_output(), Some(Output::Engine(EngineCommand::Abort { id })));
        assert_eq!(ends(&mut s), [(id, RequestEnd::Aborted)]);
    }
}

// Issue 31: Wyoming resolves voices by the rule every protocol shares: any case, the server's
// aliases, `default`; the engine gets its own name, and an unknown voice is still refused.
#[test]
fn voices_resolve_as_in_every_protocol() {
    let now = Instant::now();
    let naming = crate::catalog::Naming::new().with_voice_alias("alloy", "default").with_voice_alias("nova", "Emma");
    let catalog = crate::catalog::Catalog::new(capabilities(), naming);
    let mut s = WyomingSession::new(now, 7, catalog, Arc::new(WyomingOptions::default()));
    for (name, expected) in [("HEART", Some("heart")), ("nova", Some("emma")), ("alloy", None), ("default", None)] {
        s.handle_bytes(now, &event("synthesize", json!({"text": "Hi.", "voice": {"name": name}})));
        let submitted = submitted(&drain(&mut s));
        let (id, request) = &submitted[0];
        assert_eq!(request.voice.as_deref(), expected, "{name}");
        s.handle_engine(now, finished(*id)).unwrap();
        drain(&mut s);
    }
    s.handle_bytes(now, &event("synthesize", json!({"text": "Hi.", "voice": {"name": "nobody"}})));
    let seen = drain(&mut s);
    assert_eq!(kinds(&seen), ["error", "CLOSE"]);
    let Seen::Event(_, data, _) = &seen[0] else { panic!() };
    assert_eq!(data["code"], codes::UNKNOWN_VOICE);
}
