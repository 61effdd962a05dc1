//! Piper's voices beside hibari, end to end with the `speechstream` binary: a wyoming-piper
//! data directory (`--piper-dir`) holding joe (22,050 Hz), a 16 kHz voice and a voice with four
//! speakers is listed as wyoming-piper lists it (Wyoming: name, `"<name> (<quality>)"`,
//! `en_US`, speakers; `/v1/audio/voices` with language, description and speakers) and served on
//! every protocol at each voice's own rate (HTTP by voice or `model: "piper"`, streamed equal to
//! whole; the WebSocket with word timestamps and resampled on request; Wyoming with
//! `voice.speaker`); Whisper understands joe. Needs scripts/setup.sh (.cache/piper, .cache/hibari,
//! .venv-piper, .venv-whisper).

#[path = "deploy/process.rs"]
#[allow(dead_code)]
mod process;
#[path = "asr/words.rs"]
#[allow(dead_code)]
mod words;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;

use process::{post_json, root, Server};
use serde_json::{json, Value};
use words::{common_in_order, words};

/// Sentences no check of the voice was tuned on.
const HELD_OUT: &str = "The train to the city leaves at half past seven. \
                        My brother planted three apple trees in the garden last spring.";

const JOE: &str = "en_US-joe-medium";
/// joe's network declared at 16 kHz (a low voice's rate): what matters here is the rate served.
const LOW: &str = "en_US-joe_low-low";
/// joe's network with a speaker table and conditioning added (engine-libtorch/tests/piper).
const FOUR: &str = "en_US-four-medium";

fn cache() -> PathBuf {
    std::env::var_os("SPEECHSTREAM_CACHE").map_or_else(|| root().join(".cache"), PathBuf::from)
}

/// A Piper data directory as a wyoming-piper user has one: joe, joe declared at 16 kHz, and a
/// four-speaker copy of joe.
fn data_dir() -> PathBuf {
    let joe = cache().join("piper").join(format!("{JOE}.onnx"));
    assert!(joe.is_file(), "{} missing: run scripts/setup.sh", joe.display());
    let dir = std::env::temp_dir().join(format!("speechstream-piper-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config: Value = serde_json::from_slice(&std::fs::read(joe.with_extension("onnx.json")).unwrap()).unwrap();
    let write = |name: &str, config: &Value| {
        std::fs::write(dir.join(format!("{name}.onnx.json")), serde_json::to_vec_pretty(config).unwrap()).unwrap();
    };
    std::os::unix::fs::symlink(&joe, dir.join(format!("{JOE}.onnx"))).unwrap();
    write(JOE, &config);
    std::os::unix::fs::symlink(&joe, dir.join(format!("{LOW}.onnx"))).unwrap();
    let mut low = config.clone();
    low["audio"] = json!({"sample_rate": 16000, "quality": "low"});
    low["dataset"] = json!("joe_low");
    write(LOW, &low);
    // The multi-speaker copy, made by the network test's reference script.
    let python = root().join(".venv-piper/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup.sh", python.display());
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new(&python)
        .arg(root().join("engine-libtorch/tests/piper/reference.py"))
        .args(["prepare", joe.to_str().unwrap(), work.to_str().unwrap()])
        .output()
        .expect("reference.py");
    assert!(out.status.success(), "reference.py: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(work.join("multi.onnx"), dir.join(format!("{FOUR}.onnx"))).unwrap();
    std::fs::remove_dir_all(&work).unwrap();
    let mut four = config;
    four["num_speakers"] = json!(4);
    four["speaker_id_map"] = json!({"alice": 0, "bob": 1, "carol": 2, "dave": 3});
    four["dataset"] = json!("four");
    write(FOUR, &four);
    dir
}

fn speech(addr: SocketAddr, body: Value) -> Vec<u8> {
    let (status, _, audio) = post_json(addr, "/v1/audio/speech", &body);
    assert_eq!(status, 200, "{body}: {}", String::from_utf8_lossy(&audio));
    audio
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// One Wyoming exchange: `kind` with `data`; the answer's events until `until` (type, data,
/// payload).
fn wyoming(addr: SocketAddr, kind: &str, data: Value, until: &str) -> Vec<(String, Value, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr).expect("wyoming");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
    let data = data.to_string();
    stream.write_all(format!("{}\n{data}", json!({"type": kind, "data_length": data.len()})).as_bytes()).unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let mut events = Vec::new();
    loop {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        let header: Value = serde_json::from_str(&line).expect("event header");
        let mut read = |n: Option<u64>| {
            let mut buf = vec![0; n.unwrap_or(0) as usize];
            reader.read_exact(&mut buf).unwrap();
            buf
        };
        let data = read(header["data_length"].as_u64());
        let payload = read(header["payload_length"].as_u64());
        let mut data: Value = if data.is_empty() { json!({}) } else { serde_json::from_slice(&data).unwrap() };
        if let (Some(inline), Some(map)) = (header.get("data"), data.as_object_mut()) {
            map.extend(inline.as_object().cloned().unwrap_or_default());
        }
        let kind = header["type"].as_str().unwrap().to_owned();
        assert_ne!(kind, "error", "{data}");
        let done = kind == until;
        events.push((kind, data, payload));
        if done {
            return events;
        }
    }
}

/// Wyoming `synthesize`: the rate `audio-start` announced and the PCM.
fn wyoming_speak(addr: SocketAddr, text: &str, voice: Value) -> (u64, Vec<u8>) {
    let events = wyoming(addr, "synthesize", json!({"text": text, "voice": voice}), "audio-stop");
    let start = events.iter().find(|(k, _, _)| k == "audio-start").expect("audio-start");
    let pcm = events.iter().filter(|(k, _, _)| k == "audio-chunk").flat_map(|(_, _, p)| p.clone()).collect();
    (start.1["rate"].as_u64().unwrap(), pcm)
}

#[test]
fn piper_voices_are_listed_and_served_on_every_protocol_at_their_own_rate() {
    let dir = data_dir();
    let server = Server::start_engine(
        "hibari",
        &["--no-kokoro", "--piper-dir", dir.to_str().unwrap(), "--wyoming-port", "0", "--admission", "off"],
    );
    let addr = server.addr;

    // Listed: the model; the voices with their language, description and speakers.
    let (status, models) = process::get(addr, "/v1/models", "");
    assert_eq!(status, 200);
    assert!(models.contains("\"piper\"") && models.contains("\"hibari\""), "{models}");
    let (_, voices) = process::get(addr, "/v1/audio/voices", "");
    let voices: Value = serde_json::from_str(&voices).unwrap();
    let joe = JOE.to_lowercase();
    assert!(voices["voices"].as_array().unwrap().contains(&json!(joe)), "{voices}");
    assert_eq!(voices["languages"][&joe], "en-US", "{voices}");
    assert_eq!(voices["descriptions"][&joe], "joe (medium)", "{voices}");
    assert_eq!(voices["descriptions"][LOW.to_lowercase()], "joe low (low)", "{voices}");
    assert_eq!(voices["speakers"][FOUR.to_lowercase()], json!(["alice", "bob", "carol", "dave"]), "{voices}");
    // Wyoming, as wyoming-piper lists a voice.
    let wyoming_addr = server.wyoming_addr();
    let info = wyoming(wyoming_addr, "describe", json!({}), "info");
    let listed = info[0].1["tts"][0]["voices"].as_array().unwrap().clone();
    let voice = |name: &str| listed.iter().find(|v| v["name"] == name).cloned().unwrap_or_else(|| panic!("{name}"));
    assert_eq!(voice(JOE)["description"], "joe (medium)");
    assert_eq!(voice(JOE)["languages"], json!(["en_US"]));
    assert_eq!(voice(JOE)["speakers"], Value::Null);
    assert_eq!(
        voice(FOUR)["speakers"],
        json!([{"name": "alice"}, {"name": "bob"}, {"name": "carol"}, {"name": "dave"}])
    );

    // HTTP: each voice at its own rate; the model alone is the first voice; streamed == whole.
    let text = "Well then, the tomato soup is ready.";
    let wav = speech(addr, json!({"input": text, "voice": JOE, "response_format": "wav", "seed": 3}));
    assert_eq!(u32_at(&wav, 24), 22_050, "joe's rate in the WAV header");
    let low = speech(addr, json!({"input": text, "voice": LOW, "response_format": "wav", "seed": 3}));
    assert_eq!(u32_at(&low, 24), 16_000, "the low voice's rate");
    let pcm = |extra: Value| {
        let mut body = json!({"input": text, "response_format": "pcm", "seed": 3});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        speech(addr, body)
    };
    let by_voice = pcm(json!({"voice": JOE}));
    assert!(by_voice.len() > 44_100, "{} bytes is under a second", by_voice.len());
    assert!(wav[44..] == by_voice[..], "the WAV holds the PCM");
    // (the voices compared by length and then bytes: a failure prints no audio)
    let same = |a: &[u8], b: &[u8]| a.len() == b.len() && a == b;
    assert!(same(&pcm(json!({"model": "piper"})), &pcm(json!({"voice": FOUR}))), "`piper` alone is its first voice");
    let streamed = pcm(json!({"voice": JOE, "stream": true, "stream_format": "audio"}));
    assert!(same(&streamed, &by_voice), "streamed == whole");
    // Another language than the voice's is refused, naming what it speaks.
    let (status, _, body) =
        post_json(addr, "/v1/audio/speech", &json!({"input": text, "voice": JOE, "language": "fr"}));
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("English"), "{body}");

    // Wyoming: joe at 22,050 Hz; a speaker by name or id, each its own voice.
    let (rate, spoken) = wyoming_speak(wyoming_addr, text, json!({"name": JOE}));
    assert_eq!(rate, 22_050);
    assert!(spoken.len() > 44_100);
    let (rate, bob) = wyoming_speak(wyoming_addr, text, json!({"name": FOUR, "speaker": "bob"}));
    assert_eq!(rate, 22_050);
    let (_, by_id) = wyoming_speak(wyoming_addr, text, json!({"name": FOUR, "speaker": "1"}));
    assert!(bob.len() > 44_100 && by_id.len() > 44_100);

    // Whisper understands joe (the held-out sentences, through HTTP).
    let heard = speech(addr, json!({"input": HELD_OUT, "voice": JOE, "response_format": "wav"}));
    let file = dir.join("held-out.wav");
    std::fs::write(&file, heard).unwrap();
    let python = root().join(".venv-whisper/bin/python");
    let out = Command::new(&python)
        .arg(root().join("tests/asr/whisper.py"))
        .args(["--language", "en"])
        .arg(&file)
        .output()
        .expect("run whisper");
    assert!(out.status.success(), "whisper.py: {}", String::from_utf8_lossy(&out.stderr));
    let transcript = String::from_utf8_lossy(&out.stdout).to_string();
    let expected = words(HELD_OUT);
    let common = common_in_order(&expected, &words(&transcript));
    assert!(common * 10 >= expected.len() * 9, "joe said {transcript:?}: {common} of {} words", expected.len());
    drop(server);

    // Speakers, with the seed Wyoming cannot send: each its own voice, the first the default.
    let speak = |speaker: Option<&str>| speak_in_engine(&dir, FOUR, text, speaker);
    let (alice, bob, carol) = (speak(Some("alice")), speak(Some("bob")), speak(Some("carol")));
    assert!(alice == speak(None), "a request naming no speaker gets the first");
    assert!(bob != alice && carol != bob && carol != alice, "each speaker is its own voice");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `text` in `voice` of the Piper voices in `dir`, by `speaker`, with a fixed seed: the PCM.
fn speak_in_engine(dir: &std::path::Path, voice: &str, text: &str, speaker: Option<&str>) -> Vec<u8> {
    speak_with(dir, voice, text, speaker, |_| {})
}

/// [`speak_in_engine`] with the engine's options changed by `adjust`.
fn speak_with(
    dir: &std::path::Path,
    voice: &str,
    text: &str,
    speaker: Option<&str>,
    adjust: impl FnOnce(&mut speechstream_engine_libtorch::EngineOptions),
) -> Vec<u8> {
    use speechstream_core::engine::{Engine, EngineEvent, EngineEventKind, EventSink, RequestId, SynthesisRequest};
    struct Sink(std::sync::mpsc::Sender<EngineEvent>);
    impl EventSink for Sink {
        fn send(&self, event: EngineEvent) -> bool {
            self.0.send(event).is_ok()
        }
    }
    let mut request = SynthesisRequest::new(text).with_voice(voice).with_seed(Some(11));
    request.speaker = speaker.map(str::to_owned);
    let mut options = speechstream_engine_libtorch::EngineOptions::new(cache().join("hibari"));
    options.hibari.voices = false;
    options.piper.dir = Some(dir.to_owned());
    options.piper.required = true;
    options.workers = Some(1);
    options.warm_up = false;
    options.only_request = Some(request.clone());
    adjust(&mut options);
    let engine = speechstream_engine_libtorch::TorchEngine::new(options).expect("engine");
    let (tx, rx) = std::sync::mpsc::channel();
    engine.submit(RequestId { connection: 1, utterance: 0 }, request, Box::new(Sink(tx)));
    let mut pcm = Vec::new();
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(120)).expect("engine event").kind {
            EngineEventKind::Audio { pcm: bytes, .. } => pcm.extend_from_slice(&bytes),
            EngineEventKind::Finished => return pcm,
            EngineEventKind::Failed(e) => panic!("{voice} by {speaker:?}: {e}"),
            _ => {}
        }
    }
}

/// Piper streams each segment in chunks, each decoded with its generator's and flow's context
/// on both sides: laid end to end they are the segment decoded whole. In fp32 to a 16-bit
/// sample's rounding, with a seam every few frames; in int8 within int8's own noise (a cut
/// shortens the window some blocks of steps are quantized on: engine-libtorch/tests/piper_model.rs).
/// Measured on a Zen 4: fp32 1 of 32768; int8 23.6 dB, 22.3 with our kernels, libtorch and MKL
/// capped to AVX2, 24.3-25.0 with `MKL_CBWR=COMPATIBLE` or `AVX2`.
#[test]
fn piper_chunks_decoded_apart_are_the_segment_decoded_whole() {
    use speechstream_engine_libtorch::Precision;
    let dir = cache().join("piper");
    let text = "The train to the city leaves at half past seven. My brother planted three apple trees.";
    let samples = |pcm: Vec<u8>| -> Vec<f64> {
        pcm.chunks_exact(2).map(|b| f64::from(i16::from_le_bytes([b[0], b[1]]))).collect()
    };
    for (precision, bound) in [(Precision::Fp32, None), (Precision::Int8, Some(20.0))] {
        let speak = |first: usize, chunk: usize, max: usize| {
            samples(speak_with(&dir, JOE, text, None, |o| {
                o.precision = Some(precision);
                (o.first_chunk_frames, o.chunk_frames, o.max_chunk_frames) = (first, chunk, max);
            }))
        };
        let whole = speak(100_000, 100_000, 100_000);
        let apart = speak(2, 3, 5);
        assert_eq!(apart.len(), whole.len(), "{precision}: the same samples");
        assert!(whole.len() > 22_050 * 3, "{precision}: {} samples", whole.len());
        let worst = apart.iter().zip(&whole).map(|(a, w)| (a - w).abs()).fold(0.0, f64::max);
        let error: f64 = apart.iter().zip(&whole).map(|(a, w)| (a - w).powi(2)).sum();
        let signal: f64 = whole.iter().map(|w| w * w).sum();
        let snr = 10.0 * (signal / error.max(1e-9)).log10();
        eprintln!("{precision}: largest difference {worst} of 32768, {snr:.1} dB");
        match bound {
            None => assert!(worst <= 2.0, "{precision}: chunks differ from the whole by {worst} of 32768"),
            Some(db) => assert!(snr >= db, "{precision}: chunks {snr:.1} dB from the whole (at least {db})"),
        }
    }
}

#[test]
fn a_default_voice_that_is_not_there_stops_the_server_naming_the_voices() {
    let out = Command::new(env!("CARGO_BIN_EXE_speechstream"))
        .args(["serve", "--no-kokoro", "--port", "0", "--default-voice", "nobody", "--workers", "1"])
        .env("RUST_LOG", "error")
        .output()
        .expect("run speechstream");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--default-voice nobody") && stderr.contains("heart"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_streams_piper_with_word_timestamps_and_resamples_on_request() {
    let joe = cache().join("piper");
    // joe the default voice (as wyoming-piper's --voice): a request naming none gets it.
    let server = tokio::task::block_in_place(|| {
        let dir = joe.to_str().unwrap();
        Server::start_engine(
            "hibari",
            &["--no-kokoro", "--piper-dir", dir, "--admission", "off", "--default-voice", JOE],
        )
    });
    let unnamed = tokio::task::block_in_place(|| {
        speech(server.addr, json!({"input": "Hello there.", "response_format": "wav", "seed": 1}))
    });
    assert_eq!(u32_at(&unnamed, 24), 22_050, "the default voice is joe");
    let text = "Hello there, my friend. The weather today is sunny with a light breeze from the west.";
    let run = |config: Value| async move {
        let reply = process::utterance(server.addr, config, &[text]).await;
        assert!(reply.frames.iter().all(|f| f["type"] != "error"), "{:?}", reply.frames);
        (reply.audio, reply.chunks, reply.frames)
    };
    let config = |extra: Value| {
        let mut c = json!({"type": "session.config", "voice": JOE, "response_format": "pcm", "seed": 5});
        c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        c
    };
    let (streamed, chunks, frames) = run(config(json!({"stream_audio": true, "word_timestamps": true}))).await;
    let start = frames.iter().find(|f| f["type"] == "audio.start").expect("audio.start");
    assert_eq!(start["sample_rate"], 22_050, "{start}");
    assert!(chunks >= 3, "the first clause first, then more: {chunks} chunks");
    let timings: Vec<Value> = frames
        .iter()
        .filter(|f| f["type"] == "audio.chunk")
        .flat_map(|f| f["timestamps"].as_array().cloned().unwrap_or_default())
        .collect();
    let heard: Vec<String> = timings.iter().map(|w| w["word"].as_str().unwrap().to_lowercase()).collect();
    assert_eq!(heard, words(text));
    let total_ms = (streamed.len() / 2 * 1000 / 22_050) as i64;
    let mut previous = 0;
    for w in &timings {
        let (s, e) = (w["start_ms"].as_i64().unwrap(), w["end_ms"].as_i64().unwrap());
        // (a word espeak-ng reads together with the one before, "from the", may get no time)
        assert!(previous <= s && s <= e && e <= total_ms + 50, "{timings:?} in {total_ms} ms");
        previous = e;
    }
    // "west" ends near the end of the audio (the clock is the voice's, not 24 kHz's).
    assert!(total_ms - previous < 600, "last word ends at {previous} of {total_ms} ms");
    let (whole, _, _) = run(config(json!({}))).await;
    assert!(whole == streamed, "whole equals streamed, word timings change no sample");
    // Resampled to a client's rate.
    let (resampled, _, frames) = run(config(json!({"stream_audio": true, "sample_rate": 24000}))).await;
    let start = frames.iter().find(|f| f["type"] == "audio.start").expect("audio.start");
    assert_eq!(start["sample_rate"], 24_000, "{start}");
    let expected = streamed.len() as f64 * 24_000.0 / 22_050.0;
    assert!((resampled.len() as f64 - expected).abs() < 0.01 * expected, "{} against {expected}", resampled.len());
    drop(server);
}
