//! [`HibariOptions`]: how a [`crate::HibariEngine`] loads and runs. A leaf, read by the engine,
//! its workers and their schedulers.

use std::path::PathBuf;

use tch::Device;

use crate::chunks;
use crate::hibari::Precision;
use crate::pacing::{ChunkSizes, Pacing};
use crate::stats::AdmissionMode;

/// The model name served by default.
pub const DEFAULT_MODEL_NAME: &str = "hibari";
/// The voice used when a request names none (the only one in the wheel).
pub const DEFAULT_VOICE: &str = "heart";

#[derive(Clone, Debug)]
pub struct HibariOptions {
    /// hibari's assets (`scripts/setup-voice.sh` puts them in `.cache/hibari`).
    pub assets_dir: PathBuf,
    pub device: Device,
    /// Served model name (`/v1/models`, the config's `model` check).
    pub model_name: String,
    /// libtorch intra-op threads for CPU work, per worker; `None`: libtorch's default (all
    /// cores) with one worker, the cores shared out between the workers with several.
    pub threads: Option<i32>,
    /// Engine workers (threads computing requests, sharing the weights); `None`: one per CPU
    /// this process may use on the CPU ([`crate::workers::default_workers`]), four on CUDA (at
    /// most one per CPU: they overlap each other's host work while the device runs).
    pub workers: Option<usize>,
    /// Deadlines and lead of streamed requests ([`crate::pacing`]).
    pub pacing: Pacing,
    /// Whether streams are refused when the workers can't keep one more in real time.
    pub admission: AdmissionMode,
    /// Most streams in flight at once, whatever the admission mode; past it a stream is refused
    /// as by admission. `None`: no fixed cap.
    pub max_streams: Option<u64>,
    /// Fine frames (12.5 ms) in the first audio chunk of an utterance: small, so the first audio
    /// leaves early.
    pub first_chunk_frames: usize,
    /// Fine frames in every other chunk: larger, since each chunk decodes 27 frames of context on
    /// each side and the client already has audio to play.
    pub chunk_frames: usize,
    /// Fine frames in every chunk after the second (at least `chunk_frames`): fewer chunks, so
    /// less decoder context computed twice, once the client has a second of audio.
    pub max_chunk_frames: usize,
    /// Arithmetic of the network's Linear layers; `None`: the faster on this machine, measured
    /// at load ([`crate::Hibari::set_fastest_precision`]; fp32 on CUDA).
    pub precision: Option<Precision>,
    /// Kokoro-82M's files ([`crate::kokoro::voices::scan`]): its voices are served beside
    /// hibari's when the directory holds a model file and voices. `None`: no Kokoro.
    pub kokoro_dir: Option<PathBuf>,
    /// Load hibari's voices (its model file, `voices.json`). Off: Kokoro's voices alone (`say`
    /// with one of them), [`HibariOptions::kokoro_dir`] then required; `assets_dir` still gives
    /// the English text front end's files.
    pub hibari_voices: bool,
    /// The one request the engine is made for, when known before loading (`say`): Kokoro's
    /// front ends are then loaded only as its voice reads its text (one English accent;
    /// Japanese only for Japanese). `None`: all of them.
    pub only_request: Option<speechstream_core::engine::SynthesisRequest>,
    /// Warm each worker up before serving (a pass of each network, and admission's first
    /// measure of its speed): the first request's latency is then the steady one. Off for a
    /// one-shot request (`say`), whose own first pass warms as much, with nothing to admit.
    pub warm_up: bool,
    /// A Kokoro directory that has no model or voices, or whose model fails to load, is an
    /// error (the operator named it) rather than a warning (the default directory).
    pub kokoro_required: bool,
    /// Most sentences whose prosody, and most requests whose decoder chunks, run in one forward
    /// pass (on CPU, chunks after the first are batched by at most 4: see scheduler.rs).
    pub max_batch: usize,
    /// The server's pronunciations (`--lexicon`), under each request's.
    pub pronunciations: crate::g2p::spoken::Pronunciations,
    /// What the text normaliser does with code and emoji.
    pub text: crate::g2p::spoken::TextOptions,
}

impl HibariOptions {
    pub fn new(assets_dir: impl Into<PathBuf>) -> HibariOptions {
        HibariOptions {
            assets_dir: assets_dir.into(),
            device: Device::Cpu,
            model_name: DEFAULT_MODEL_NAME.to_owned(),
            threads: None,
            first_chunk_frames: 16,
            chunk_frames: 80,
            max_chunk_frames: 200,
            precision: None,
            max_batch: 16,
            workers: None,
            pacing: Pacing::default(),
            admission: AdmissionMode::Realtime,
            max_streams: None,
            pronunciations: Default::default(),
            text: Default::default(),
            kokoro_dir: None,
            kokoro_required: false,
            hibari_voices: true,
            only_request: None,
            warm_up: true,
        }
    }
}

impl HibariOptions {
    /// The chunk sizes in frames (what the scheduler cuts sentences at).
    pub(crate) fn chunk_frames(&self) -> chunks::ChunkSizes<usize> {
        chunks::ChunkSizes::frames(self.first_chunk_frames, self.chunk_frames, self.max_chunk_frames)
    }

    /// The chunk sizes, in seconds of audio (what admission models streams with).
    pub(crate) fn chunk_sizes(&self) -> ChunkSizes {
        self.chunk_frames()
            .map(|frames| (frames * crate::hibari::SAMPLES_PER_FRAME) as f64 / f64::from(crate::dsp::SAMPLE_RATE))
    }
}
