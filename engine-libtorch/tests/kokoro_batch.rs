//! On a device, the Kokoro segments of several streams pass the network together (issue 52),
//! and each stream still gets its own audio. Here on the CPU, `simulated_device` loads Kokoro
//! with the paths it takes on a GPU (fp32), on one worker: four streamed requests of different
//! lengths and voices arrive at once (the engine's debug log must show a pass of several
//! segments: their first segments too, which on a device are computed whole, without an
//! opening; and several voices, each segment with its own style), then each again alone. Each
//! request's length is its length alone and its log spectra within 0.5 dB of its audio alone
//! (measured 0.01-0.10 dB; a batch that let one segment's padding into another's normalizations
//! moved it 5.6 dB, tests/kokoro_onnx.rs; another voice's style is 7-9 dB away). Not the same
//! bits: MKL's float products round by the buffers' alignment, so even alone two runs differ in
//! their last bits, and the phase of Kokoro's source, a running sum, carries that far. Needs
//! `.cache` (scripts/setup-voice.sh, with Kokoro).

mod common;

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::*;
use speechstream_core::engine::{Engine, EngineEventKind, RequestId, SynthesisRequest};
use speechstream_engine_libtorch::{dsp, AdmissionMode, EngineOptions, Precision, TorchEngine};

const TIMEOUT: Duration = Duration::from_secs(600);
const REQUESTS: [(&str, &str); 4] = [
    ("The weather today is sunny with a light breeze from the west.", "jf_alpha"),
    ("We walked along the river.", "jm_kumo"),
    ("Please call me back when you get home tonight.", "jf_alpha"),
    ("Thank you.", "jf_nezumi"),
];

fn request(i: usize) -> SynthesisRequest {
    let (text, voice) = REQUESTS[i];
    SynthesisRequest::new(text).with_model("kokoro").with_voice(voice).with_stream(true)
}

/// A request's audio (samples, from its 16-bit PCM), waiting for its end.
fn audio(rx: mpsc::Receiver<speechstream_core::engine::EngineEvent>) -> Vec<f32> {
    let mut pcm = Vec::new();
    loop {
        match rx.recv_timeout(TIMEOUT).expect("engine event").kind {
            EngineEventKind::Audio { pcm: bytes, .. } => pcm.extend_from_slice(&bytes),
            EngineEventKind::Finished => break,
            EngineEventKind::Failed(e) => panic!("a request failed: {e}"),
            _ => {}
        }
    }
    pcm.chunks_exact(2).map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0).collect()
}

fn submit(
    engine: &TorchEngine,
    connection: u64,
    request: SynthesisRequest,
) -> mpsc::Receiver<speechstream_core::engine::EngineEvent> {
    let (tx, rx) = mpsc::channel();
    engine.submit(RequestId { connection, utterance: 0 }, request, Box::new(Sink(tx)));
    rx
}

/// The engine's log, as its subscriber writes it.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn kokoro_segments_batched_on_a_device_keep_each_streams_audio() {
    cached("kokoro/vocab.json", "scripts/setup-voice.sh");
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_env_filter("speechstream_engine_libtorch::kokoro=debug")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    let mut options = EngineOptions::new(hibari_assets());
    options.kokoro.dir = Some(cache().join("kokoro"));
    options.kokoro.required = true;
    options.admission = AdmissionMode::Off;
    options.workers = Some(1);
    options.threads = Some(1);
    options.precision = Some(Precision::Fp32);
    options.simulated_device = true;
    let engine = TorchEngine::new(options).expect("engine");
    let together: Vec<Vec<f32>> = (0..REQUESTS.len())
        .map(|i| submit(&engine, i as u64, request(i)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(audio)
        .collect();
    for (i, batched) in together.iter().enumerate() {
        let alone = audio(submit(&engine, 100 + i as u64, request(i)));
        assert_eq!(batched.len(), alone.len(), "request {i}: its length");
        let db = dsp::spectral_distance(batched, &alone);
        eprintln!("request {i}: batched against alone {db:.3} dB");
        assert!(db < 0.5, "request {i}: the batch moved its audio by {db} dB");
    }
    let log = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    let passes: Vec<&str> =
        log.lines().filter(|l| l.contains("Kokoro's segments in one pass") && !l.ends_with("segments=1")).collect();
    eprintln!("{}", passes.join("\n"));
    assert!(!passes.is_empty(), "no segments were batched");
}
