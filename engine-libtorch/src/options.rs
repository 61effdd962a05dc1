//! [`EngineOptions`]: how a [`crate::TorchEngine`] loads and runs, with each family's own
//! ([`HibariOptions`], [`KokoroOptions`], [`PiperOptions`]). A leaf, read by the engine, its families, its workers
//! and their schedulers.

use std::path::PathBuf;

use tch::Device;

use crate::chunks;
use crate::pacing::Pacing;
use crate::precision::Precision;
use crate::stats::AdmissionMode;

/// hibari's model name, served by default.
pub const DEFAULT_MODEL_NAME: &str = "hibari";
/// The voice used when a request names none (hibari's, the only one in its wheel).
pub const DEFAULT_VOICE: &str = "heart";

/// The scheduler's frame, in seconds: chunk sizes are counted in frames (hibari's hop, and
/// half of Kokoro's duration frame, at 24 kHz: 300 samples).
pub const FRAME_SECONDS: f64 = 0.0125;

#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// hibari's assets (`scripts/setup-voice.sh` puts them in `.cache/hibari`), which hold the
    /// English text front end's files too (lexicons, tagger, OOV nets) for every family.
    pub assets_dir: PathBuf,
    pub device: Device,
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
    /// Run the workers as if they shared one device that computes one pass at a time (the
    /// workers' passes take turns, in the order they ask): admission then costs streams against
    /// that device as it does on a GPU ([`crate::workers`]), which the tests check on the CPU;
    /// and Kokoro (in fp32 or fp16) takes the paths it takes on a GPU, several streams'
    /// segments in one pass ([`crate::KokoroModel::load_device_paths`]). Workers share a device
    /// of their own accord on any device but the CPU.
    pub simulated_device: bool,
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
    /// Arithmetic of the networks' Linear layers; `None`: each family's `auto` (hibari: the
    /// faster on this machine, measured at load, [`crate::Hibari::set_fastest_precision`];
    /// fp32 on CUDA).
    pub precision: Option<Precision>,
    /// The one request the engine is made for, when known before loading (`say`): a family
    /// then loads only the front ends its voice reads that text with. `None`: all of them.
    pub only_request: Option<speechstream_core::engine::SynthesisRequest>,
    /// Warm each worker up before serving (a pass of each network, and admission's first
    /// measure of its speed): the first request's latency is then the steady one. Off for a
    /// one-shot request (`say`), whose own first pass warms as much, with nothing to admit.
    pub warm_up: bool,
    /// Most sentences whose prosody, and most requests whose decoder chunks, run in one forward
    /// pass (on CPU, chunks after the first are batched by at most 4: see scheduler.rs).
    pub max_batch: usize,
    /// The server's pronunciations (`--lexicon`), under each request's.
    pub pronunciations: crate::g2p::spoken::Pronunciations,
    /// What the text normaliser does with code and emoji.
    pub text: crate::g2p::spoken::TextOptions,
    /// espeak-ng's program of ours (`espeak-phonemes`, GPL, built by set-up), which reads the
    /// languages espeak-ng covers; `None`: found as [`crate::g2p::espeak::Espeak`] finds it.
    pub espeak_program: Option<PathBuf>,
    /// The voice a request naming none gets (any family's, any case; its family's model the
    /// one a request naming no model gets). `None`: the first family's default voice (hibari's
    /// `heart`).
    pub default_voice: Option<String>,
    /// hibari's own.
    pub hibari: HibariOptions,
    /// Kokoro-82M's own.
    pub kokoro: KokoroOptions,
    /// Piper's own.
    pub piper: PiperOptions,
}

/// hibari's options.
#[derive(Clone, Debug)]
pub struct HibariOptions {
    /// Load its voices (its model file, `voices.json`, in [`EngineOptions::assets_dir`]). Off:
    /// other families' voices alone (`say` with one of them).
    pub voices: bool,
    /// Its served model name (`/v1/models`, the config's `model` check).
    pub model_name: String,
}

/// Kokoro-82M's options.
#[derive(Clone, Debug, Default)]
pub struct KokoroOptions {
    /// Its files ([`crate::kokoro::voices::scan`]): its voices are served beside the others
    /// when the directory holds a model file and voices. `None`: no Kokoro.
    pub dir: Option<PathBuf>,
    /// A directory that has no model or voices, or whose model fails to load, is an error (the
    /// operator named it) rather than a warning (the default directory).
    pub required: bool,
    /// Words an utterance's first segment holds at most. `None`: six, fewer where the workers'
    /// warm-up finds this CPU too slow to decode six while the first segment's opening plays,
    /// and later segments cut where this CPU's pass would end after the audio before it has
    /// played (docs/kokoro-architecture.md §8); set (at most six), every machine cuts alike,
    /// the later cuts at a Zen 4 core's costs, and sends a first segment's leading silence
    /// before its opening as a Zen 4 core does (`serve --kokoro-first-words`).
    pub first_words: Option<usize>,
}

/// Piper's options.
#[derive(Clone, Debug, Default)]
pub struct PiperOptions {
    /// A directory of Piper voices as wyoming-piper's `--data-dir` holds them (`NAME.onnx`
    /// with its `NAME.onnx.json`, [`crate::piper::serve::scan`]), each served beside the
    /// others; `None`: no Piper.
    pub dir: Option<PathBuf>,
    /// A directory without voices, or one whose voices all fail to load, is an error (the
    /// operator named it) rather than a warning (the default directory).
    pub required: bool,
}

impl EngineOptions {
    pub fn new(assets_dir: impl Into<PathBuf>) -> EngineOptions {
        EngineOptions {
            assets_dir: assets_dir.into(),
            device: Device::Cpu,
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
            espeak_program: None,
            default_voice: None,
            only_request: None,
            warm_up: true,
            simulated_device: false,
            hibari: HibariOptions { voices: true, model_name: DEFAULT_MODEL_NAME.to_owned() },
            kokoro: KokoroOptions::default(),
            piper: PiperOptions::default(),
        }
    }
}

impl EngineOptions {
    /// The chunk sizes in frames (what the scheduler cuts sentences at).
    pub(crate) fn chunk_frames(&self) -> chunks::ChunkSizes<usize> {
        chunks::ChunkSizes::frames(self.first_chunk_frames, self.chunk_frames, self.max_chunk_frames)
    }
}
