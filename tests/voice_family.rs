//! A voice family plugged in from outside the engine crate, through the same contract hibari and
//! Kokoro implement (`speechstream_engine_libtorch::family`), served beside hibari by a real
//! server and spoken with over a real WebSocket on loopback. The toy family reads English with
//! the shared front end and says each phoneme as a 50 ms tone of its own pitch, decoded chunk by
//! chunk: the test knows every sample it must hear, so the stream must equal it exactly, and the
//! word timestamps must fall on the tones of their words. Needs `.cache` from scripts/setup.sh.

#[path = "deploy/process.rs"]
#[allow(dead_code)]
mod process;

use std::any::Any;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use speechstream_core::config::TaskType;
use speechstream_core::engine::{
    Engine, EngineCapabilities, EngineEvent, EngineEventKind, EventSink, Language, RequestId, SynthesisRequest, Voice,
};
use speechstream_core::session::SessionOptions;
use speechstream_engine_libtorch::family::{
    Family, Lead, LoadContext, Loaded, Segment, SegmentInput, SegmentState, Speeds, VoiceModel,
};
use speechstream_engine_libtorch::g2p::Sentence;
use speechstream_engine_libtorch::g2p::{FrontEnd, Reader};
use speechstream_engine_libtorch::pacing::{Costs, Speed};
use speechstream_engine_libtorch::tch;
use speechstream_engine_libtorch::timing::Acoustics;
use speechstream_engine_libtorch::{families, AdmissionMode, ChunkSizes, EngineOptions, Precision, TorchEngine};
use speechstream_transports::{serve, ServerConfig};
use tokio::net::TcpListener;

const TIMEOUT: Duration = Duration::from_secs(120);
const RATE: u32 = 24_000;
/// Samples in a frame (12.5 ms), frames in a phoneme's tone (50 ms).
const FRAME: usize = 300;
const TONE_FRAMES: usize = 4;

/// The toy family: one voice, `tone`, served as the model `tones`; what its engine asked of it.
#[derive(Default)]
struct Tones {
    log: Arc<Log>,
}

/// What an engine asked of the toy (each test's engine its own).
#[derive(Default)]
struct Log {
    /// The frames of each chunk, in order.
    asked: Mutex<Vec<Range<usize>>>,
    /// Each chunk round's size and whether one of its chunks failed, in order.
    rounds: Mutex<Vec<(usize, bool)>>,
    /// The sentences of each text recut, after the segments its utterance had before.
    recuts: Mutex<Vec<(usize, usize)>>,
}

/// Its voice: the English front end, nothing else.
struct ToneVoice {
    front_end: Arc<FrontEnd>,
    log: Arc<Log>,
}
/// The toy fails the chunks of a segment with this phoneme ("measure"), as a network may fail on
/// one stream's input.
const FAILING: char = 'ʒ';

/// The phoneme characters a tone is said for (the rest, spaces and punctuation, are silent).
fn tokens(phonemes: &str) -> Vec<char> {
    phonemes.chars().filter(|c| c.is_alphabetic()).collect()
}

/// The pitch of a phoneme character.
fn pitch(c: char) -> f64 {
    200.0 + 20.0 * f64::from(u32::from(c) % 40)
}

/// Sample `i` of the tones of `tokens`.
fn sample(tokens: &[char], i: usize) -> f32 {
    let c = tokens[i / (TONE_FRAMES * FRAME)];
    (0.5 * (2.0 * std::f64::consts::PI * pitch(c) * i as f64 / f64::from(RATE)).sin()) as f32
}

impl Family for Tones {
    fn name(&self) -> &str {
        "tones"
    }

    fn load(&self, context: &LoadContext) -> Result<Option<Loaded>, String> {
        let voice = ToneVoice { front_end: context.front_ends.english(false)?, log: self.log.clone() };
        let capabilities = EngineCapabilities::new("tones", RATE)
            .with_voices([Voice::new("tone").with_language("en-US")])
            .with_languages([Language::new("English", "en")])
            .with_task_types([TaskType::CustomVoice])
            .with_instructions(false)
            .with_word_timestamps(true);
        Ok(Some(Loaded {
            capabilities,
            voices: vec![(Voice::new("tone"), Arc::new(voice) as Arc<dyn VoiceModel>)],
            default_voice: "tone".to_owned(),
            precision: Precision::Fp32,
        }))
    }

    fn costs(&self, speeds: &Speeds) -> Costs {
        let cost = |s: &Speed| 1.0 / s.factor().max(1e-9);
        Costs {
            per_audio_second: cost(&speeds.chunk),
            per_first_second: cost(&speeds.first),
            per_char: 0.0,
            per_opening: 0.0,
        }
    }
}

impl VoiceModel for ToneVoice {
    fn device(&self) -> tch::Device {
        tch::Device::Cpu
    }

    fn sample_rate(&self) -> u32 {
        RATE
    }

    fn samples_per_frame(&self) -> usize {
        FRAME
    }

    fn weights(&self) -> usize {
        0
    }

    fn char_tokens(&self, phonemes: &str) -> Vec<Option<usize>> {
        let mut next = 0;
        phonemes
            .chars()
            .map(|c| {
                c.is_alphabetic().then(|| {
                    next += 1;
                    next
                })
            })
            .collect()
    }

    fn reader(&self, _language: Option<&str>, _text: &str) -> Result<Reader, String> {
        Ok(Reader::English(self.front_end.clone()))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn acoustics(&self) -> Acoustics {
        Acoustics { lead_samples: 0, final_sound_cap: 100, fine_per_frame: 2, pause_tail: 0 }
    }

    fn start(&self, batch: &[SegmentInput]) -> Result<Vec<Result<Segment, String>>, String> {
        Ok(batch
            .iter()
            .map(|input| {
                let tokens = tokens(input.phonemes);
                // Durations in frames of 600 samples, both boundary tokens included.
                let mut durations = vec![0];
                durations.extend(tokens.iter().map(|_| (TONE_FRAMES * FRAME / 600) as i64));
                durations.push(0);
                Ok(Segment {
                    frames: tokens.len() * TONE_FRAMES,
                    samples: tokens.len() * TONE_FRAMES * FRAME,
                    durations,
                    computed: 0,
                    opening: 0,
                    state: Box::new(tokens),
                })
            })
            .collect())
    }

    fn chunks(&self, batch: &[(&SegmentState, Range<usize>)]) -> Result<Vec<Result<Vec<f32>, String>>, String> {
        let chunks: Vec<Result<Vec<f32>, String>> = batch
            .iter()
            .map(|(state, frames)| {
                let tokens = state.downcast_ref::<Vec<char>>().ok_or("not a tones segment")?;
                self.log.asked.lock().unwrap().push(frames.clone());
                if tokens.contains(&FAILING) {
                    return Err(format!("tones: no tone for {FAILING}"));
                }
                let end = (frames.end * FRAME).min(tokens.len() * TONE_FRAMES * FRAME);
                Ok((frames.start * FRAME..end).map(|i| sample(tokens, i)).collect())
            })
            .collect();
        self.log.rounds.lock().unwrap().push((chunks.len(), chunks.iter().any(Result::is_err)));
        Ok(chunks)
    }

    fn recut(&self, sentences: Vec<Sentence>, lead: &mut Lead) -> Vec<Sentence> {
        self.log.recuts.lock().unwrap().push((lead.segments, sentences.len()));
        lead.segments += sentences.len();
        sentences
    }

    fn warm_up(&self, _frames: &ChunkSizes<usize>) {}

    fn measure(&self, _frames: &ChunkSizes<usize>, _speeds: &mut Speeds) -> Option<Speed> {
        None
    }
}

fn cache() -> PathBuf {
    let cache = std::env::var_os("SPEECHSTREAM_CACHE")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache"), PathBuf::from);
    assert!(cache.join("hibari/hibari.onnx").is_file(), "{} missing: run scripts/setup.sh first", cache.display());
    cache
}

/// Speaks `text` on a new connection configured with `config`; returns the JSON frames and the
/// audio, up to session.done.
async fn speak(addr: std::net::SocketAddr, config: Value, text: &str) -> (Vec<Value>, Vec<u8>) {
    speak_parts(addr, config, &[text]).await
}

/// [`speak`] with the text in several `input.text` messages.
async fn speak_parts(addr: std::net::SocketAddr, config: Value, texts: &[&str]) -> (Vec<Value>, Vec<u8>) {
    let reply = process::utterance(addr, config, texts).await;
    (reply.frames, reply.audio)
}

/// One worker, one thread, admission off: the toy's rounds in the order the tests expect.
fn options(cache: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(cache.join("hibari"));
    options.admission = AdmissionMode::Off;
    options.threads = Some(1);
    options.workers = Some(1);
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toy_family_plugged_in_through_the_contract_speaks_over_the_websocket() {
    let cache = cache();
    let options = options(&cache);
    // The toy first (its voice the default), hibari beside it; Kokoro not asked for.
    let tones = Tones::default();
    let log = tones.log.clone();
    let mut hosted: Vec<Arc<dyn Family>> = vec![Arc::new(tones)];
    hosted.extend(families());
    let engine = tokio::task::block_in_place(|| TorchEngine::with_families(options, hosted)).expect("engine");
    assert_eq!(engine.models(), ["tones", "hibari"]);
    let engine = Arc::new(engine);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, engine, ServerConfig::new(SessionOptions::default()), async {
        let _ = stopped.await;
    }));

    // Two sentences: the second segment's tones continue the first's samples.
    let text = "Hello world. Tones are here.";
    let front_end = speechstream_engine_libtorch::load_front_end(&cache.join("hibari"), tch::Device::Cpu, false)
        .expect("front end");
    let mut expected = Vec::new();
    let mut word_tokens = Vec::new();
    for sentence in front_end.sentences(text) {
        let tokens = tokens(&sentence.phonemes);
        let base = expected.len() / 2;
        for i in 0..tokens.len() * TONE_FRAMES * FRAME {
            let x = sample(&tokens, i).clamp(-1.0, 1.0);
            expected.extend_from_slice(&((x * 32767.0) as i16).to_le_bytes());
        }
        // Each word's first and last tone, in samples from the start of the utterance.
        let chars: Vec<char> = sentence.phonemes.chars().collect();
        for word in sentence.words.iter().filter(|w| w.text.chars().any(char::is_alphanumeric)) {
            let before = chars[..word.phonemes.start].iter().filter(|c| c.is_alphabetic()).count();
            let within = chars[word.phonemes.clone()].iter().filter(|c| c.is_alphabetic()).count();
            let tone = TONE_FRAMES * FRAME;
            let name: String = word.text.chars().filter(|c| c.is_alphanumeric()).collect();
            word_tokens.push((name, base + before * tone, base + (before + within) * tone));
        }
    }
    assert!(expected.len() > 2 * RATE as usize, "{} bytes of tones", expected.len());

    // Streamed PCM from the toy voice, chunk by chunk: exactly the tones, in order.
    let config = json!({"type": "session.config", "voice": "tone", "stream_audio": true, "response_format": "pcm"});
    let (frames, audio) = speak(addr, config, text).await;
    let kinds: Vec<&str> = frames.iter().filter_map(|f| f["type"].as_str()).collect();
    assert!(kinds.ends_with(&["audio.done", "session.done"]) && !kinds.contains(&"error"), "{frames:?}");
    assert_eq!(audio.len(), expected.len());
    assert!(audio == expected, "the streamed tones differ from the toy's samples");
    // Its chunks as the one chunk rule cuts them: the utterance's first is the options' first
    // (16 frames), so the first audio comes early; the second sentence's starts at 0 again.
    let asked = std::mem::take(&mut *log.asked.lock().unwrap());
    assert_eq!(asked.first(), Some(&(0..16)), "{asked:?}");
    assert_eq!(asked.iter().filter(|r| r.start == 0).count(), 2, "{asked:?}");
    // Its family recut each text's sentences knowing the segments before them in the utterance.
    let carried = |recuts: &[(usize, usize)]| {
        recuts.first().is_some_and(|r| r.0 == 0) && recuts.windows(2).all(|w| w[1].0 == w[0].0 + w[0].1)
    };
    let recuts = std::mem::take(&mut *log.recuts.lock().unwrap());
    assert!(carried(&recuts) && recuts.iter().map(|r| r.1).sum::<usize>() == 2, "{recuts:?}");
    // The same with the text in two messages, twice: the lead carries from one text to the
    // next, and a new utterance starts from none.
    let config = json!({"type": "session.config", "voice": "tone", "stream_audio": true, "response_format": "pcm"});
    for _ in 0..2 {
        let (_, parted) = speak_parts(addr, config.clone(), &["Hello world. ", "Tones are here."]).await;
        assert!(parted == expected, "the tones of the text in two parts differ");
        let recuts = std::mem::take(&mut *log.recuts.lock().unwrap());
        assert!(recuts.len() == 2 && carried(&recuts), "{recuts:?}");
    }
    log.asked.lock().unwrap().clear();

    // Word timestamps from its durations: each word where its tones are.
    let config = json!({"type": "session.config", "model": "tones", "stream_audio": true,
        "response_format": "pcm", "word_timestamps": true});
    let (frames, _) = speak(addr, config, text).await;
    let chunks: Vec<&Value> = frames.iter().filter(|f| f["type"] == "audio.chunk").collect();
    let words = chunks.last().expect("audio.chunk frames")["timestamps"].as_array().expect("timestamps").clone();
    let names: Vec<&str> = words.iter().map(|w| w["word"].as_str().unwrap()).collect();
    let expected_names: Vec<&str> = word_tokens.iter().map(|(w, _, _)| w.as_str()).collect();
    assert_eq!(names, expected_names);
    for (w, (_, start, end)) in words.iter().zip(&word_tokens) {
        let ms = |samples: usize| (samples as f64 * 1000.0 / f64::from(RATE)) as i64;
        let (s, e) = (w["start_ms"].as_i64().unwrap(), w["end_ms"].as_i64().unwrap());
        assert!((s - ms(*start)).abs() <= 2 && (e - ms(*end)).abs() <= 2, "{w} against {start}..{end} samples");
    }

    // The same server still speaks hibari, routed by its model.
    let config = json!({"type": "session.config", "model": "hibari", "stream_audio": true,
        "response_format": "pcm", "seed": 1});
    let (frames, heart) = speak(addr, config, "Hello world.").await;
    assert!(frames.iter().any(|f| f["type"] == "audio.done"), "{frames:?}");
    assert!(heart.len() > RATE as usize / 2 && !heart.starts_with(&expected[..64]), "{} bytes", heart.len());

    let _ = stop.send(());
    let _ = server.await;
}

struct Events(std::sync::mpsc::Sender<EngineEventKind>);

impl EventSink for Events {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(event.kind).is_ok()
    }
}

/// The tones of `text` as the toy says them, 16-bit PCM.
fn tones_of(front_end: &FrontEnd, text: &str) -> Vec<u8> {
    let mut pcm = Vec::new();
    for sentence in front_end.sentences(text) {
        let tokens = tokens(&sentence.phonemes);
        for i in 0..tokens.len() * TONE_FRAMES * FRAME {
            let x = sample(&tokens, i).clamp(-1.0, 1.0);
            pcm.extend_from_slice(&((x * 32767.0) as i16).to_le_bytes());
        }
    }
    pcm
}

/// A chunk that fails fails its own stream, not the others computed in the same round.
#[test]
fn a_failed_chunk_fails_its_stream_alone() {
    let cache = cache();
    let options = options(&cache);
    let tones = Tones::default();
    let log = tones.log.clone();
    let engine = TorchEngine::with_families(options, vec![Arc::new(tones)]).expect("engine");
    let front_end = speechstream_engine_libtorch::load_front_end(&cache.join("hibari"), tch::Device::Cpu, false)
        .expect("front end");
    // A long utterance, and beside it one whose second sentence the toy cannot say: on one
    // worker, their segments and chunks go through the same rounds.
    let healthy = "Hello world. Tones are here. ".repeat(12);
    let failing = "Hello world. Measure twice, cut once.";
    assert!(front_end.sentences(failing).iter().any(|s| s.phonemes.contains(FAILING)));
    assert!(!front_end.sentences(&healthy).iter().any(|s| s.phonemes.contains(FAILING)));
    let mut receivers = Vec::new();
    for (utterance, text) in [healthy.as_str(), failing].into_iter().enumerate() {
        let (tx, rx) = std::sync::mpsc::channel();
        let request = SynthesisRequest::new(text).with_voice("tone");
        engine.submit(RequestId { connection: 1, utterance: utterance as u64 }, request, Box::new(Events(tx)));
        receivers.push(rx);
    }
    let collect = |rx: &std::sync::mpsc::Receiver<EngineEventKind>| {
        let mut pcm = Vec::new();
        loop {
            match rx.recv_timeout(TIMEOUT).expect("engine event") {
                EngineEventKind::Audio { pcm: p, .. } => pcm.extend_from_slice(&p),
                EngineEventKind::Finished => return Ok(pcm),
                EngineEventKind::Failed(f) => return Err((f.to_string(), pcm)),
                _ => {}
            }
        }
    };
    let (healthy_audio, failed) = (collect(&receivers[0]), collect(&receivers[1]));
    let rounds = std::mem::take(&mut *log.rounds.lock().unwrap());
    assert!(rounds.iter().any(|&(size, failed)| size > 1 && failed), "no shared round had the failure: {rounds:?}");
    let (message, before) = failed.expect_err("the stream the toy cannot say fails");
    assert!(message.contains("no tone for"), "{message}");
    assert_eq!(before, tones_of(&front_end, "Hello world."), "its first sentence came before the failure");
    assert!(healthy_audio.expect("the other stream finishes") == tones_of(&front_end, &healthy));
}
