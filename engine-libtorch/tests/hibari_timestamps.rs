//! Word timestamps against an independent judge: PocketSphinx's forced aligner (tests/asr/align.py,
//! in .venv-asr from scripts/setup-asr.sh) places each word of held-out sentences in the audio the
//! engine made, and the engine's own timings (from its duration predictor) must sit within 30 ms
//! of it on average, starts and ends apart. The same timings must come out whether the audio is
//! streamed or asked for whole, whether requests are batched together, and whatever
//! `sample_rate` the client asks for (the resampler keeps the time axis). Needs `.cache`
//! (scripts/setup-voice.sh), ffmpeg and .venv-asr.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

use common::*;
use speechstream_core::config::ResponseFormat;
use speechstream_core::engine::{
    Engine, EngineEvent, EngineEventKind, EventSink, OutputKind, RequestId, SynthesisRequest, WordTiming,
};
use speechstream_core::resample::{Resampler, SUPPORTED_RATES};
use speechstream_engine_libtorch::HibariEngine;

const TIMEOUT: Duration = Duration::from_secs(180);

/// Sentences that played no part in tuning the timings (those are in hibari_engine.rs's energy
/// test and timing.rs's unit tests). Every word is in the aligner's dictionary.
const HELD_OUT: [&str; 8] = [
    "The library closes early on Sundays.",
    "My brother bought a red bicycle last summer.",
    "Could you pass me the salt, please?",
    "We walked along the river until the sun went down.",
    "Nobody expected the meeting to last three hours.",
    "Turn left at the bakery, then keep going straight.",
    "The children were laughing in the garden.",
    "Her answer surprised everyone in the room.",
];

/// The bound of the issue: mean absolute error of starts, and of ends, against the aligner.
const MEAN_MS: f64 = 30.0;
/// The aligner works in 10 ms frames and places some boundaries (a stop's closure, a fricative's
/// tail) differently from any duration model: a few words may sit further off.
const P90_MS: i64 = 50;

fn engine() -> &'static HibariEngine {
    static ENGINE: OnceLock<HibariEngine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut options = speechstream_engine_libtorch::HibariOptions::new(hibari_assets());
        options.admission = speechstream_engine_libtorch::AdmissionMode::Off;
        options.threads = Some(1);
        HibariEngine::new(options).expect("engine")
    })
}

struct Sink(mpsc::Sender<EngineEvent>);

impl EventSink for Sink {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(event).is_ok()
    }
}

fn request(text: &str, stream: bool) -> SynthesisRequest {
    SynthesisRequest::new(text).with_seed(Some(11)).with_stream(stream).with_output(OutputKind::AudioAndWords)
}

fn submit(request: SynthesisRequest) -> mpsc::Receiver<EngineEvent> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let (tx, rx) = mpsc::channel();
    let id = RequestId { connection: NEXT.fetch_add(1, Ordering::Relaxed), utterance: 0 };
    engine().submit(id, request, Box::new(Sink(tx)));
    rx
}

/// The audio (24 kHz s16) chunk by chunk, and the word timings, of one request.
fn collect(rx: mpsc::Receiver<EngineEvent>) -> (Vec<Vec<i16>>, Vec<WordTiming>) {
    let (mut pcm, mut words) = (Vec::new(), Vec::new());
    loop {
        match rx.recv_timeout(TIMEOUT).expect("engine event").kind {
            EngineEventKind::Audio { pcm: bytes, sample_rate } => {
                assert_eq!(sample_rate, 24_000);
                pcm.push(bytes.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]])).collect());
            }
            EngineEventKind::Words(w) => words.extend(w),
            EngineEventKind::Finished => return (pcm, words),
            other => panic!("unexpected event {other:?}"),
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The aligner's (word, start_ms, end_ms) for each (audio, rate, text).
fn align(items: &[(Vec<i16>, u32, &str)]) -> Vec<Vec<(String, i64, i64)>> {
    let python = root().join(".venv-asr/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup.sh (or scripts/setup-asr.sh)", python.display());
    let dir = std::env::temp_dir().join(format!("speechstream-timestamps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut args = Vec::new();
    for (i, (pcm, rate, text)) in items.iter().enumerate() {
        let path = dir.join(format!("{i}.wav"));
        let bytes: Vec<u8> = pcm.iter().flat_map(|s| s.to_le_bytes()).collect();
        let wav = speechstream_core::encode::encode_s16le(ResponseFormat::Wav, bytes, *rate).unwrap();
        std::fs::write(&path, wav).unwrap();
        args.push(path.into_os_string());
        args.push(text.into());
    }
    let out = Command::new(&python).arg(root().join("tests/asr/align.py")).args(&args).output().expect("run align.py");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "align.py: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str::<Vec<(String, i64, i64)>>(line).expect("align.py's JSON"))
        .collect()
}

/// Mean absolute error and p90 of the absolute error.
fn stats(errors: &[i64]) -> (f64, i64) {
    let mut abs: Vec<i64> = errors.iter().map(|e| e.abs()).collect();
    abs.sort_unstable();
    (abs.iter().sum::<i64>() as f64 / abs.len() as f64, abs[(abs.len() * 9).div_ceil(10) - 1])
}

/// Our timings against the aligner's placement of the same words, over all requests: the
/// signed errors of the starts and of the ends, in ms.
fn errors(
    label: &str,
    texts: &[&str],
    ours: &[Vec<WordTiming>],
    judge: &[Vec<(String, i64, i64)>],
) -> (Vec<i64>, Vec<i64>) {
    let (mut starts, mut ends) = (Vec::new(), Vec::new());
    for ((text, words), judged) in texts.iter().zip(ours).zip(judge) {
        let ours: Vec<String> = words.iter().map(|w| w.word.to_lowercase()).collect();
        let theirs: Vec<String> = judged.iter().map(|w| w.0.clone()).collect();
        assert_eq!(ours, theirs, "{text}: the aligner placed other words");
        for (w, (_, s, e)) in words.iter().zip(judged) {
            starts.push(w.start_ms - s);
            ends.push(w.end_ms - e);
        }
    }
    let signed = |v: &[i64]| v.iter().sum::<i64>() as f64 / v.len() as f64;
    let ((start_mean, start_p90), (end_mean, end_p90)) = (stats(&starts), stats(&ends));
    eprintln!(
        "{label}: {} words: starts mean |Δ| {start_mean:.1} ms (signed {:+.1}), p90 {start_p90} ms; \
         ends mean |Δ| {end_mean:.1} ms (signed {:+.1}), p90 {end_p90} ms",
        starts.len(),
        signed(&starts),
        signed(&ends)
    );
    assert!(
        start_mean <= MEAN_MS && end_mean <= MEAN_MS,
        "{label}: mean |Δ| starts {start_mean:.1} ms, ends {end_mean:.1} ms (bound {MEAN_MS})"
    );
    assert!(start_p90 <= P90_MS && end_p90 <= P90_MS, "{label}: p90 |Δ| starts {start_p90} ms, ends {end_p90} ms");
    (starts, ends)
}

/// The requests: six sentences alone and two in one request (the second sentence's timings
/// count from the utterance's start).
fn texts() -> Vec<String> {
    let mut texts: Vec<String> = HELD_OUT[..6].iter().map(|t| t.to_string()).collect();
    texts.push(format!("{} {}", HELD_OUT[6], HELD_OUT[7]));
    texts
}

#[test]
fn word_timestamps_match_a_forced_aligner_at_every_rate() {
    let texts = texts();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    // Streamed, one request at a time: the chunks as the engine sends them.
    let runs: Vec<(Vec<Vec<i16>>, Vec<WordTiming>)> = texts.iter().map(|t| collect(submit(request(t, true)))).collect();
    let words: Vec<Vec<WordTiming>> = runs.iter().map(|r| r.1.clone()).collect();
    for rate in SUPPORTED_RATES {
        // As the session resamples a stream: chunk by chunk through one converter.
        let items: Vec<(Vec<i16>, u32, &str)> = runs
            .iter()
            .zip(&texts)
            .map(|((chunks, _), text)| {
                let mut converter = Resampler::new(24_000, rate).unwrap();
                let mut pcm = Vec::new();
                for chunk in chunks {
                    converter.push(chunk, &mut pcm);
                }
                converter.finish(&mut pcm);
                (pcm, rate, *text)
            })
            .collect();
        errors(&format!("{rate} Hz"), &texts, &words, &align(&items));
    }
}

#[test]
fn whole_streamed_and_batched_requests_give_the_same_timings() {
    let texts = texts();
    let alone: Vec<Vec<WordTiming>> = texts.iter().map(|t| collect(submit(request(t, true))).1).collect();
    let whole: Vec<Vec<WordTiming>> = texts.iter().map(|t| collect(submit(request(t, false))).1).collect();
    assert_eq!(alone, whole, "whole audio vs streamed");
    // All at once: their sentences share prosody and decoder batches.
    let together: Vec<_> = texts.iter().map(|t| submit(request(t, true))).collect();
    let batched: Vec<Vec<WordTiming>> = together.into_iter().map(|rx| collect(rx).1).collect();
    assert_eq!(alone, batched, "batched vs alone");
}
