//! Shared helpers of the tests that need `.cache` (scripts/setup-voice.sh). They fail, not skip,
//! when it is missing: CI runs the set-up.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc;

use speechstream_core::engine::{EngineEvent, EventSink};

/// An engine request's events, into a channel the test reads.
pub struct Sink(pub mpsc::Sender<EngineEvent>);

impl EventSink for Sink {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(event).is_ok()
    }
}

pub fn cache() -> PathBuf {
    std::env::var_os("SPEECHSTREAM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache"))
}

/// A file under the cache, or a panic telling how to get it.
pub fn cached(rel: &str, how: &str) -> PathBuf {
    let p = cache().join(rel);
    assert!(p.exists(), "{} not found: run {how} first (from the repository root)", p.display());
    p
}

pub fn hibari_assets() -> PathBuf {
    cached("hibari/hibari.onnx", "scripts/setup-voice.sh");
    cache().join("hibari")
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/hibari")
}

pub fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let e = i32::from((h >> 10) & 0x1f);
    let m = f32::from(h & 0x3ff);
    match e {
        0 => sign * m * 2f32.powi(-24),
        31 => {
            if m == 0.0 {
                sign * f32::INFINITY
            } else {
                f32::NAN
            }
        }
        _ => sign * (1.0 + m / 1024.0) * 2f32.powi(e - 15),
    }
}

pub fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn to_vec(t: &tch::Tensor) -> Vec<f32> {
    Vec::try_from(&t.to_device(tch::Device::Cpu).contiguous().view([-1])).unwrap()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Kokoro's int8 export (scripts/setup-voice.sh kokoro).
pub fn kokoro_model() -> PathBuf {
    cached("kokoro/kokoro-v1.0.int8.onnx", "scripts/setup-voice.sh kokoro")
}

/// One of fixtures/kokoro's cases (onnxruntime's outputs on its inputs), and onnxruntime's audio.
pub fn kokoro_fixture(name: &str) -> (serde_json::Value, Vec<f32>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/kokoro");
    let case: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    (case, read_f32(&dir.join(format!("{name}.audio.f32"))))
}

/// A JSON array of numbers as f32 (a fixture case's style, durations before rounding, curves).
pub fn reals(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// A JSON array of integers (a fixture case's ids or durations).
pub fn ints(v: &serde_json::Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

/// The ids and speeds of the four fixture cases the batching tests put in one batch.
pub fn batch_cases(manifest: &serde_json::Value) -> Vec<(Vec<i64>, f32)> {
    manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| ["hello", "numbers", "yes", "fox_fast"].contains(&c["name"].as_str().unwrap()))
        .map(|c| (ints(&c["ids"]), c["speed"].as_f64().unwrap() as f32))
        .collect()
}

/// Prosody of `items` in one padded batch against each alone: durations must be equal; returns
/// the largest differences of the decoded spectra and of f0 (Hz).
pub fn prosody_batch_vs_single(h: &speechstream_engine_libtorch::Hibari, items: &[(&[i64], f32)]) -> (f32, f32) {
    let batch = h.prosody_batch(items);
    let (mut worst, mut worst_f0) = (0f32, 0f32);
    for (b, (ids, speed)) in items.iter().enumerate() {
        let single = h.prosody(ids, *speed);
        assert_eq!(batch[b].durations, single.durations);
        worst_f0 = worst_f0.max(max_abs_diff(&to_vec(&batch[b].f0), &to_vec(&single.f0)));
        let (x, y) = (h.decode(&batch[b], 0, single.frames), h.decode(&single, 0, single.frames));
        for o in 0..5 {
            worst = worst.max(max_abs_diff(&to_vec(x.outputs()[o]), &to_vec(y.outputs()[o])));
        }
    }
    (worst, worst_f0)
}

/// The fixture case "science" decoded in chunks (three chunkings) against the whole sentence, and
/// its audio synthesized chunk by chunk over `audio_ranges` against the whole: the largest
/// differences of the spectra and of the samples.
pub fn science_chunked_vs_whole(
    h: &speechstream_engine_libtorch::Hibari,
    audio_ranges: impl Fn(usize) -> Vec<std::ops::Range<usize>>,
) -> (f32, f32) {
    use speechstream_engine_libtorch::{chunk_ranges, NoiseSource, Spectra};
    let m = manifest();
    let case = m["cases"].as_array().unwrap().iter().find(|c| c["name"] == "science").unwrap();
    let p = h.prosody(&ints(&case["ids"]), 1.0);
    let whole = h.decode(&p, 0, p.frames);
    let mut worst = 0f32;
    for (first, size) in [(8, 40), (1, 29), (60, 100)] {
        let chunks: Vec<Spectra> =
            chunk_ranges(p.frames, first, size).into_iter().map(|r| h.decode(&p, r.start, r.end)).collect();
        for o in 0..5 {
            let parts: Vec<&tch::Tensor> = chunks.iter().map(|c| c.outputs()[o]).collect();
            worst = worst.max(max_abs_diff(&to_vec(&tch::Tensor::cat(&parts, 0)), &to_vec(whole.outputs()[o])));
        }
    }
    let noise = NoiseSource::new(99, 1);
    let audio = h.synthesize(&p, &noise);
    let mut streamed = Vec::new();
    for r in audio_ranges(p.frames) {
        streamed.extend(to_vec(&h.synthesize_chunk(&p, r.start, r.end, &noise)));
    }
    (worst, max_abs_diff(&streamed, &audio))
}

/// Submits `request` alone (connection `u64::MAX`) and waits for its last event: the seconds of
/// audio it made and the seconds that took (what the engine computes per second of audio).
pub fn audio_alone(
    engine: &dyn speechstream_core::engine::Engine,
    request: speechstream_core::engine::SynthesisRequest,
    timeout: std::time::Duration,
) -> (f64, f64) {
    use speechstream_core::engine::{EngineEventKind, RequestId};
    let (tx, rx) = mpsc::channel();
    let started = std::time::Instant::now();
    engine.submit(RequestId { connection: u64::MAX, utterance: 0 }, request, Box::new(Sink(tx)));
    let mut seconds = 0.0;
    loop {
        match rx.recv_timeout(timeout).expect("engine event").kind {
            EngineEventKind::Audio { pcm, sample_rate } => seconds += pcm.len() as f64 / 2.0 / f64::from(sample_rate),
            EngineEventKind::Finished => return (seconds, started.elapsed().as_secs_f64()),
            EngineEventKind::Failed(e) => panic!("an utterance alone failed: {e}"),
            _ => {}
        }
    }
}

/// How each request on `receivers` ended: (served, refused by admission); any other failure
/// panics.
pub fn outcomes(receivers: Vec<mpsc::Receiver<EngineEvent>>, timeout: std::time::Duration) -> (u64, u64) {
    use speechstream_core::engine::{EngineEventKind, Failure};
    let (mut served, mut refused) = (0, 0);
    for rx in receivers {
        loop {
            match rx.recv_timeout(timeout).expect("engine event").kind {
                EngineEventKind::Finished => {
                    served += 1;
                    break;
                }
                EngineEventKind::Failed(Failure::Overloaded(_)) => {
                    refused += 1;
                    break;
                }
                EngineEventKind::Failed(other) => panic!("utterance failed: {other}"),
                _ => {}
            }
        }
    }
    (served, refused)
}
