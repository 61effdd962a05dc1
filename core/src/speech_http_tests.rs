use super::*;
use std::sync::Arc;

use crate::catalog::Naming;
use crate::engine::{CodecSpec, Voice};

fn caps() -> EngineCapabilities {
    EngineCapabilities {
        word_timestamps: true,
        ..EngineCapabilities::new("m", 24_000).with_voices(["vivian", "aiden"])
    }
}

fn catalog() -> Catalog {
    caps().into()
}

fn ok(body: &str) -> SpeechRequest {
    match parse_speech_request(body, &catalog(), 1 << 20) {
        Ok(request) => request,
        Err(e) => panic!("{body}: {e:?}"),
    }
}

fn err(body: &str) -> HttpError {
    match parse_speech_request(body, &catalog(), 1 << 20) {
        Ok(request) => panic!("{body} accepted: {request:?}"),
        Err(e) => e,
    }
}

#[test]
fn input_is_capped_like_the_websocket_buffer() {
    let at_cap = serde_json::json!({"input": "é".repeat(8)}).to_string();
    assert!(parse_speech_request(&at_cap, &catalog(), 8).is_ok());
    let over = serde_json::json!({"input": "é".repeat(9)}).to_string();
    let e = parse_speech_request(&over, &catalog(), 8).unwrap_err();
    assert_eq!((e.status, e.message.as_str()), (400, "Input text too long (max 8 characters)"));
}

#[test]
fn defaults_and_delivery() {
    let r = ok(r#"{"input":"  Hello world. ","extra":1}"#);
    assert_eq!(r.synthesis.text, "Hello world.");
    assert_eq!((r.response_format, r.delivery, r.sample_rate), (ResponseFormat::Wav, Delivery::Whole, 24_000));
    assert_eq!(r.synthesis.speed, 1.0);
    assert!(!r.synthesis.stream);
    assert_eq!(ok(r#"{"input":"x","stream":true,"response_format":"pcm"}"#).delivery, Delivery::Sse);
    assert_eq!(ok(r#"{"input":"x","stream_format":"sse"}"#).delivery, Delivery::Sse);
    let raw = ok(r#"{"input":"x","stream":true,"stream_format":"audio","speed":"2"}"#);
    assert_eq!((raw.delivery, raw.synthesis.speed, raw.synthesis.stream), (Delivery::Audio, 2.0, true));
    let r = ok(r#"{"input":"x","model":"m","speaker":"Vivian","seed":-3,"sample_rate":24000,"task_type":"Base"}"#);
    assert_eq!(r.synthesis.voice.as_deref(), Some("vivian"));
    assert_eq!((r.synthesis.seed, r.synthesis.task_type.map(TaskType::as_str)), (Some(-3), Some("Base")));
    assert_eq!(ok(r#"{"input":"x","voice":{"id":"AIDEN"}}"#).synthesis.voice.as_deref(), Some("aiden"));
    assert_eq!(ok(r#"{"input":"x","voice":"Default"}"#).synthesis.voice, None);
    assert_eq!(ok(r#"{"input":"x","model":""}"#).synthesis.model.as_deref(), Some(""));
}

#[test]
fn schema_errors_are_pydantic_text() {
    let e = err(r#"{"voice":"vivian"}"#);
    assert_eq!((e.status, e.kind), (400, "BadRequestError"));
    assert_eq!(
        e.message,
        "1 validation error for OpenAICreateSpeechRequest\ninput\n  Field required [type=missing, input_value={'voice': \
         'vivian'}, input_type=dict]\n    For further information visit https://errors.pydantic.dev/2.13/v/missing"
    );
    let e = err(r#"{"input":"x","response_format":"aiff","speed":5}"#);
    assert!(e.message.starts_with("2 validation errors for OpenAICreateSpeechRequest\nresponse_format\n"), "{e:?}");
    assert!(e.message.contains("Input should be 'wav', 'pcm', 'flac', 'mp3' or 'opus'"));
    assert!(e.message.contains("Input should be less than or equal to 4"));
    assert!(err(r#"{"input":"x","voice":{"name":"a"}}"#).message.contains("voice dict must contain 'id'"));
    assert!(err(r#"{"input":"x","sample_rate":0}"#).message.contains("Input should be greater than 0"));
    assert!(err(r#"{"input":"x","stream_format":"ws"}"#).message.contains("Input should be 'sse' or 'audio'"));
    assert!(err(r#"{"input":"x","seed":9223372036854775808}"#)
        .message
        .contains("less than or equal to 9223372036854775807"));
    assert!(err(r#"{"input":"x","stream":null}"#).message.contains("Input should be a valid boolean"));
    assert_eq!(err("[1]").message.lines().nth(1), Some("  Input should be a valid dictionary or instance of OpenAICreateSpeechRequest [type=model_type, input_value=[1], input_type=list]"));
    assert_eq!(err("{").message, "JSON decode error");
}

#[test]
fn model_rules() {
    // Every format streams (LiveKit sends mp3 with stream_format sse).
    for format in ["mp3", "opus", "flac", "wav", "pcm"] {
        let r = ok(&format!(r#"{{"input":"x","stream_format":"sse","response_format":"{format}"}}"#));
        assert_eq!((r.delivery, r.response_format.as_str()), (Delivery::Sse, format));
    }
    let e = err(r#"{"input":"x","speaker_embedding":[0.5],"ref_audio":"data:x"}"#);
    assert!(e.message.contains("'speaker_embedding' and 'ref_audio' are mutually exclusive"));
    let e = err(r#"{"input":"x","speaker_embedding":[NaN]}"#);
    assert!(e.message.contains("values must be finite"));
}

#[test]
fn serving_checks() {
    let e = err(r#"{"input":"x","model":"other"}"#);
    assert_eq!((e.status, e.kind, e.param), (404, "NotFoundError", Some("model")));
    assert_eq!(
        e.body(),
        r#"{"error":{"code":404,"message":"The model `other` does not exist.","param":"model","type":"NotFoundError"}}"#
    );
    assert_eq!(err(r#"{"input":" \n "}"#).message, "Input text cannot be empty");
    assert_eq!(err(r#"{"input":"x","voice":"bob"}"#).message, "Invalid voice 'bob'. Supported: aiden, vivian");
    let long = "a".repeat(501);
    assert_eq!(
        err(&format!(r#"{{"input":"x","instructions":"{long}"}}"#)).message,
        "Instructions too long (max 500 characters)"
    );
    assert_eq!(err(r#"{"input":"x","max_new_tokens":4097}"#).message, "max_new_tokens cannot exceed 4096");
    assert_eq!(
        err(r#"{"input":"x","sample_rate":12345}"#).message,
        "sample_rate=12345 is not supported by the current TTS model; supported rates: 8000, 16000, 22050, 24000, \
         44100, 48000"
    );
    assert_eq!(ok(r#"{"input":"x","sample_rate":8000}"#).sample_rate, 8000);
    assert_eq!(ok(r#"{"input":"x"}"#).sample_rate, 24_000);
    assert!(err(r#"{"input":"x","word_timestamps":true,"stream":true}"#)
        .message
        .starts_with("word_timestamps=true is currently supported by the WebSocket"));
    assert!(ok(r#"{"input":"x","word_timestamps":true}"#).synthesis.output.words());
    let mut no_aligner = caps();
    no_aligner.word_timestamps = false;
    let e = parse_speech_request(r#"{"input":"x","word_timestamps":true}"#, &no_aligner.into(), 1 << 20).unwrap_err();
    assert_eq!(e.message, "word_timestamps=true requires the server to be launched with --forced-aligner.");
}

#[test]
fn content_type() {
    assert!(check_content_type(Some("application/json")).is_ok());
    assert!(check_content_type(Some("Application/JSON; charset=utf-8")).is_ok());
    let e = check_content_type(Some("text/plain")).unwrap_err();
    assert_eq!((e.status, e.message.as_str()), (400, "Unsupported Media Type: Only 'application/json' is allowed"));
    assert!(check_content_type(None).is_err());
}

#[test]
fn voices_are_sorted_with_default() {
    assert_eq!(voices_json(&catalog()), r#"{"aliases":{},"uploaded_voices":[],"voices":["aiden","default","vivian"]}"#);
    let naming = Naming {
        voice_aliases: vec![("Alloy".into(), "default".into()), ("nova".into(), "Vivian".into())],
        ..Naming::new()
    };
    let aliased = Catalog::new(Arc::new(caps()), naming);
    assert_eq!(
        voices_json(&aliased),
        r#"{"aliases":{"alloy":"default","nova":"vivian"},"uploaded_voices":[],"voices":["aiden","default","vivian"]}"#
    );
    assert!(err(r#"{"input":"x","voice":"nova"}"#).message.starts_with("Invalid voice 'nova'"));
    let voice = |body: &str| parse_speech_request(body, &aliased, 1 << 20).map(|r| r.synthesis.voice);
    assert_eq!(voice(r#"{"input":"x","voice":"NOVA"}"#), Ok(Some("vivian".to_owned())));
    assert_eq!(voice(r#"{"input":"x","voice":"alloy"}"#), Ok(None));
    // Voices that declare a language say it, in an extra field.
    let spoken = caps().with_voices([Voice::new("Aiden").with_language("es-ES"), Voice::new("vivian")]);
    assert_eq!(
        voices_json(&Catalog::new(Arc::new(spoken), Naming::new())),
        r#"{"aliases":{},"languages":{"aiden":"es-ES"},"uploaded_voices":[],"voices":["aiden","default","vivian"]}"#
    );
}

#[test]
fn streaming_wav_header_has_unknown_sizes() {
    let h = crate::encode::streaming_wav_header(24_000);
    assert_eq!(&h[0..4], b"RIFF");
    assert_eq!(&h[4..8], &[0xff; 4]);
    assert_eq!(&h[8..16], b"WAVEfmt ");
    assert_eq!(u32::from_le_bytes([h[24], h[25], h[26], h[27]]), 24_000);
    assert_eq!(u32::from_le_bytes([h[28], h[29], h[30], h[31]]), 48_000);
    assert_eq!(&h[36..40], b"data");
    assert_eq!(&h[40..44], &[0xff; 4]);
    // The same fields as a complete file's header, sizes apart.
    let whole = crate::encode::encode(ResponseFormat::Wav, &[], 24_000).unwrap();
    assert_eq!(&h[8..40], &whole[8..40]);
}

#[test]
fn sse_events() {
    assert_eq!(
        sse_delta(&[1, 2, 3], ResponseFormat::Pcm),
        "event: speech.audio.delta\ndata: {\"audio\":\"AQID\",\"response_format\":\"pcm\",\"type\":\"speech.audio.delta\"}\n\n"
    );
    let usage = Usage { input_text_tokens: 2, output_tokens: 13 };
    let done = sse_done(&usage);
    assert!(done.starts_with("event: speech.audio.done\ndata: {") && done.ends_with("}\n\n"));
    let data: serde_json::Value =
        serde_json::from_str(done.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap();
    assert_eq!(data["usage"]["total_tokens"], 15);
    assert_eq!(data["usage"]["input_token_details"]["audio_tokens"], 0);
    let error = sse_error("boom", true);
    let data: serde_json::Value =
        serde_json::from_str(error.lines().nth(1).unwrap().trim_start_matches("data: ")).unwrap();
    assert_eq!(data["error"]["partial_audio"], true);
    assert_eq!(data["error"]["code"], 500);
    assert!(!sse_error("boom", false).contains("partial_audio"));
}

#[test]
fn usage_counts_words_and_frames() {
    // One second of audio: 12.5 frames, rounded up.
    let usage = Usage::new("Hello big world", 48_000, &caps());
    assert_eq!((usage.input_text_tokens, usage.output_tokens, usage.total()), (3, 13, 16));
    let mut codec = caps();
    codec.codec =
        Some(CodecSpec { codebooks: 1, codebook_size: 2, frame_rate_hz: 50.0, sample_rate: 24_000, decoder_id: None });
    assert_eq!(Usage::new("x", 48_000, &codec).output_tokens, 50);
    assert_eq!(usage.headers()[2], ("x-vllm-omni-total-tokens", 16));
}

#[test]
fn word_timestamps_header_is_python_json() {
    let words = vec![
        WordTiming { word: "héllo".into(), start_ms: 0, end_ms: 120, chars: None },
        WordTiming { word: "\"😀\"".into(), start_ms: 160, end_ms: 300, chars: None },
    ];
    assert_eq!(
        word_timestamps_header(&words).unwrap(),
        r#"[{"word": "h\u00e9llo", "start_ms": 0, "end_ms": 120}, {"word": "\"\ud83d\ude00\"", "start_ms": 160, "end_ms": 300}]"#
    );
    // Our extension: where the word is in the text sent.
    let written = [WordTiming { word: "$3.50".into(), start_ms: 0, end_ms: 900, chars: Some(9..14) }];
    assert_eq!(
        word_timestamps_header(&written).unwrap(),
        r#"[{"word": "$3.50", "start_ms": 0, "end_ms": 900, "chars": [9, 14]}]"#
    );
    let frame = serde_json::to_string(&written[0]).unwrap();
    assert_eq!(frame, r#"{"word":"$3.50","start_ms":0,"end_ms":900,"chars":[9,14]}"#);
    assert!(!serde_json::to_string(&words[0]).unwrap().contains("chars"));
    let many: Vec<WordTiming> =
        (0..200).map(|n| WordTiming { word: format!("w{n}"), start_ms: n, end_ms: n + 1, chars: None }).collect();
    let omitted = word_timestamps_header(&many).unwrap_err();
    assert!(omitted.starts_with("oversize; bytes=") && omitted.ends_with("; limit=4096"), "{omitted}");
}

// Issue 34: a style prompt the engine cannot follow is dropped and named (X-Ignored-Fields),
// unless the catalog is strict (today's 400); cloning and languages stay refused.
#[test]
fn instructions_are_ignored_unless_strict() {
    let plain =
        Arc::new(caps().with_instructions(false).with_languages([crate::engine::Language::new("English", "en")]));
    let body = r#"{"input":"x","instructions":"Speak in a cheerful and positive tone."}"#;
    let lenient = Catalog::new(plain.clone(), Naming::openai());
    let r = parse_speech_request(body, &lenient, 1 << 20).unwrap();
    assert_eq!((r.synthesis.instructions, r.synthesis.ignored.clone()), (None, vec!["instructions"]));
    assert_eq!(ignored_header(&r.synthesis.ignored).as_deref(), Some("instructions"));
    assert_eq!(ignored_header(&[]), None);
    let refused = |body: &str, catalog: &Catalog| parse_speech_request(body, catalog, 1 << 20).unwrap_err();
    let strict = Catalog::new(plain, Naming::openai()).with_strict(true);
    let e = refused(body, &strict);
    assert_eq!(
        (e.status, e.message.as_str()),
        (400, "instructions are not supported by m (it has no voice design or style prompts)")
    );
    // What would change the audio's identity stays refused when instructions are ignored.
    let e = refused(r#"{"input":"x","instructions":"calm","language":"de"}"#, &lenient);
    assert_eq!(e.message, "language 'de' is not supported by m: it speaks English only");
    // An engine that follows them gets them.
    let r = ok(body);
    assert_eq!(r.synthesis.instructions.as_deref(), Some("Speak in a cheerful and positive tone."));
    assert!(r.synthesis.ignored.is_empty());
}
