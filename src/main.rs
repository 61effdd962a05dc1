//! The `speechstream` command line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use speechstream_core::catalog::{Catalog, Naming};
use speechstream_core::config::ResponseFormat;
use speechstream_core::engine::{
    Engine, EngineCapabilities, EngineEvent, EngineEventKind, EventSink, OutputKind, RequestId, SynthesisRequest,
};
use speechstream_core::parse::Limits;
use speechstream_core::session::SessionOptions;
use speechstream_core::synthetic::{SyntheticEngine, SyntheticOptions, DEFAULT_MODEL_NAME};
use speechstream_core::wyoming::{FrameLimits, WyomingOptions, WyomingVoice};
use speechstream_engine_libtorch::{EngineOptions, TorchEngine};
use speechstream_transports::{
    bind, raise_descriptor_limit, serve_listeners, Listeners, ServerConfig, WyomingListener,
};
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;

mod progress;

#[derive(Parser, Debug)]
#[command(
    name = "speechstream",
    version,
    about = "Streaming text-to-speech server speaking vLLM-Omni's WebSocket protocol",
    after_help = "Logging: set RUST_LOG (e.g. RUST_LOG=debug or RUST_LOG=speechstream_transports=debug); the default is info."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start-up: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Serve WS /v1/audio/speech/stream, POST /v1/audio/speech and the operator endpoints.
    Serve(ServeArgs),
    /// Synthesize one text into an audio file, with any voice the server has (hibari's, Kokoro's
    /// or Piper's).
    Say(SayArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EngineKind {
    /// The neural voices on libtorch (hibari's, and Kokoro's and Piper's where their files are).
    Hibari,
    /// No model: deterministic tones derived from the text (tests, benchmarks, protocol work).
    Synthetic,
}

fn engine_kind(value: &str) -> Result<EngineKind, String> {
    match value {
        "synthetic" => Ok(EngineKind::Synthetic),
        "hibari" => Ok(EngineKind::Hibari),
        other => Err(format!("unknown engine `{other}`; available: hibari, synthetic")),
    }
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// TCP port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Also serve Home Assistant's Wyoming protocol (text to speech) on this TCP port, at
    /// --host, on the same engine, connection limits and metrics (Wyoming's usual port is
    /// 10200; 0 picks a free one) [default: off].
    #[arg(long, value_name = "PORT")]
    wyoming_port: Option<u16>,
    /// Answer HAProxy's agent check on this TCP port, at --host (`agent-check agent-port PORT`):
    /// each connection gets one line, `up ready N%` with N the room left for new streams by
    /// admission's measure (100 idle, 1 full), `drain` once draining, `down #why` if the engine
    /// has failed; 0 picks a free one [default: off].
    #[arg(long, value_name = "PORT")]
    agent_port: Option<u16>,
    /// Speech engine: `hibari` (the neural voices, natively on libtorch: hibari's, and Kokoro's and
    /// Piper's where their files are) or `synthetic` (no model: deterministic tones derived from
    /// the text, for tests, benchmarks and protocol work).
    #[arg(long, value_name = "ENGINE", default_value = "hibari", value_parser = engine_kind)]
    engine: EngineKind,
    #[command(flatten)]
    voice: VoiceArgs,
    /// Model name clients see in /v1/models and may send as `model` (session.config, or the
    /// body of POST /v1/audio/speech); repeat it for more names, the first is the model's own
    /// [default: hibari, or speechstream-synthetic for the synthetic engine; OpenAI's tts-1,
    /// tts-1-hd and gpt-4o-mini-tts are accepted too unless --no-openai-names].
    #[arg(long, value_name = "NAME")]
    served_model_name: Vec<String>,
    /// The voice a request naming none gets, of any family (`en_US-joe-medium`, `af_heart`;
    /// any case): what Home Assistant speaks with when its pipeline names no voice, as
    /// wyoming-piper's --voice; its family's model is then the default model too [default:
    /// hibari's heart].
    #[arg(long, value_name = "VOICE")]
    default_voice: Option<String>,
    /// Another name for a voice, as NAME=VOICE (VOICE one of the engine's voices, or
    /// `default`); repeatable. A client sending NAME (in any case) gets VOICE. It overrides the
    /// OpenAI voice name of the same NAME.
    #[arg(long, value_name = "NAME=VOICE", value_parser = voice_alias)]
    voice_alias: Vec<(String, String)>,
    /// Refuse OpenAI's names unless given by the flags above: by default its voice names
    /// (alloy, ash, ballad, cedar, coral, echo, fable, marin, nova, onyx, sage, shimmer, verse)
    /// are aliases of the default voice and its model names are accepted, so OpenAI clients
    /// (Pipecat, LiveKit, the openai SDK's examples) work unchanged.
    #[arg(long)]
    no_openai_names: bool,
    /// Refuse what the engine cannot honour: a style prompt (`instructions`, which hibari has
    /// none of) is then a 400 or an error frame. By default it is accepted and ignored, and
    /// the reply says so (HTTP header `X-Ignored-Fields: instructions`, batch items'
    /// `ignored`, a log line on every transport). An unknown voice or language and voice
    /// cloning are refused either way.
    #[arg(long)]
    strict: bool,
    /// For deployments that replace vLLM-Omni: its example clients' defaults work unchanged.
    /// Model names of Qwen3-TTS (`Qwen/Qwen3-TTS-...`) and CosyVoice (`FunAudioLLM/...`) are
    /// accepted, and Qwen3-TTS's speakers (Vivian, Ryan, Serena, Aiden, Dylan, Eric, Ono_Anna,
    /// Sohee, Uncle_Fu) are aliases of the default voice. /metrics also exports upstream's
    /// speech streaming metrics (vllm_omni:audio_ttfp_s, vllm_omni:audio_rtf,
    /// vllm_omni:audio_underrun_s, vllm_omni:audio_continuity_ok_total,
    /// vllm_omni:speech_stream_completed_total and vllm_omni:speech_stream_aborted_total).
    #[arg(long)]
    vllm_omni_compat: bool,

    /// Seconds a session may wait for its first valid session.config.
    #[arg(long, value_name = "SECONDS", default_value = "10", allow_negative_numbers = true, value_parser = positive_seconds)]
    config_timeout: Duration,
    /// Seconds a configured session may sit without a client message while nothing is
    /// generating.
    #[arg(long, value_name = "SECONDS", default_value = "30", allow_negative_numbers = true, value_parser = positive_seconds)]
    idle_timeout: Duration,
    /// Largest client message other than session.config, in characters.
    #[arg(long, value_name = "CHARS", allow_negative_numbers = true, default_value = "131072", value_parser = positive_count)]
    max_text_message_chars: usize,
    /// Largest session.config message, in characters.
    #[arg(long, value_name = "CHARS", allow_negative_numbers = true, default_value = "4194304", value_parser = positive_count)]
    max_config_message_chars: usize,
    /// Most text characters buffered for one utterance before input.done.
    #[arg(long, value_name = "CHARS", allow_negative_numbers = true, default_value = "1048576", value_parser = positive_count)]
    max_buffered_chars: usize,
    /// Bytes of client messages held back while an utterance generates (64 more counted per
    /// message); a message past it is refused with an error and dropped.
    #[arg(long, value_name = "BYTES", allow_negative_numbers = true, default_value = "8388608", value_parser = positive_count)]
    max_deferred_bytes: usize,
    /// Longest non-streamed audio, in seconds (a whole file is held in memory until its
    /// utterance ends: 48 kB a second at 24 kHz); past it the utterance fails with an error
    /// pointing to streaming. Streamed audio has no such limit.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, default_value = "600", value_parser = clap::value_parser!(u32).range(1..=86_400))]
    max_whole_audio_seconds: u32,
    /// Require this key on every endpoint but /health and /ready: `Authorization: Bearer KEY`,
    /// or `?api_key=KEY` in the URL (browsers' WebSocket API cannot set headers).
    #[arg(long, value_name = "KEY", value_parser = api_key)]
    api_key: Option<String>,
    /// Connections served at once (WebSocket and Wyoming sessions, HTTP connections); past it
    /// new ones are refused clearly: HTTP 503, or a WebSocket closed with 1013. A connection
    /// takes its slot with its first complete request, so silent sockets hold none; when all
    /// are taken, the oldest idle keep-alive connection gives its slot up [default: the socket
    /// budget (--max-sockets) less 64].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = positive_count)]
    max_connections: Option<usize>,
    /// TCP connections held at once, counting those being refused and those not yet heard
    /// from. When it is full a new connection has the oldest spare one closed (silent,
    /// trickling a request head, idle between requests); only when none is spare is it
    /// answered at accept with a fixed HTTP 503 and closed [default: --max-connections + 64,
    /// else the descriptor limit less 64; at start the soft descriptor limit is raised to the
    /// hard one].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = positive_count)]
    max_sockets: Option<usize>,
    /// Connections held at once from one IP address, answered or not; past it a new one gets
    /// a fixed HTTP 429 at accept. For servers without a proxy in front (behind one, every
    /// client is the proxy's address) [default: no limit].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = positive_count)]
    max_connections_per_ip: Option<usize>,
    /// Seconds a new connection may stay silent before it is closed (capped at
    /// --header-timeout); meanwhile it holds no connection slot.
    #[arg(long, value_name = "SECONDS", default_value = "5", allow_negative_numbers = true, value_parser = positive_seconds)]
    first_byte_timeout: Duration,
    /// Seconds a peer may take to send an HTTP request's head (the WebSocket handshake
    /// included) or a Wyoming event's header; also how long an idle keep-alive connection is
    /// kept.
    #[arg(long, value_name = "SECONDS", default_value = "30", allow_negative_numbers = true, value_parser = positive_seconds)]
    header_timeout: Duration,
    /// Seconds a peer may take to send an HTTP request's whole body (else 408).
    #[arg(long, value_name = "SECONDS", default_value = "30", allow_negative_numbers = true, value_parser = positive_seconds)]
    body_timeout: Duration,
    /// Seconds a write may wait for a client that has stopped reading (a WebSocket mid-
    /// utterance, a streamed or whole HTTP response) before the connection is dropped and its
    /// engine request aborted.
    #[arg(long, value_name = "SECONDS", default_value = "30", allow_negative_numbers = true, value_parser = positive_seconds)]
    write_timeout: Duration,
    /// On SIGINT/SIGTERM, seconds connections get to finish the utterance in flight before
    /// they are closed with 1001 (meanwhile /ready answers 503 and new work is refused).
    #[arg(long, value_name = "SECONDS", default_value = "10", allow_negative_numbers = true, value_parser = non_negative_seconds)]
    shutdown_grace: Duration,

    /// Synthetic engine: milliseconds of audio per streamed chunk.
    #[arg(long, value_name = "MS", default_value_t = 80, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    synthetic_chunk_ms: u32,
    /// Synthetic engine: pause after each chunk, in milliseconds (0 = as fast as possible).
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    synthetic_chunk_delay_ms: u64,
    /// Synthetic engine: pace output so N seconds of audio take N × FACTOR seconds to produce
    /// (1.0 = real time); unset = no pacing.
    #[arg(long, value_name = "FACTOR", allow_negative_numbers = true, value_parser = positive_factor)]
    synthetic_real_time_factor: Option<f64>,
    /// Synthetic engine: make every utterance exactly this many seconds long, whatever its
    /// text (the reference server's null engine emits 1.0 s).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = audio_seconds)]
    synthetic_audio_seconds: Option<f64>,
}

/// Where the voices come from and what they run on.
#[derive(Args, Debug)]
struct VoiceArgs {
    /// Every voice family's files, a folder per family: DIR/hibari (hibari's voices and the
    /// English text front end's files), DIR/kokoro (Kokoro-82M's) and DIR/piper (Piper's
    /// voices), as scripts/setup.sh lays out .cache/; --assets-dir, --kokoro-dir and
    /// --piper-dir override a family's folder [default: $SPEECHSTREAM_CACHE, else the
    /// checkout's .cache next to the binary, else ./.cache].
    #[arg(long, value_name = "DIR")]
    voices_dir: Option<PathBuf>,
    /// hibari's assets (hibari.onnx, vocab.json, voices.json, lexicons; other voices' model
    /// files go here too) [default: $SPEECHSTREAM_ASSETS, else --voices-dir's hibari/, else
    /// $SPEECHSTREAM_CACHE/hibari, else the checkout's .cache/hibari next to the binary, else
    /// ./.cache/hibari].
    #[arg(long, visible_alias = "voice-dir", value_name = "DIR")]
    assets_dir: Option<PathBuf>,
    /// Kokoro-82M's files, served beside hibari (model `kokoro`, voices such as `af_heart`):
    /// kokoro-v1.0.int8.onnx (kokoro-onnx's int8 export; fp32 runs its weights dequantized), and
    /// voices-v1.0.bin (kokoro-onnx's) or
    /// other .npz bundles or one .npy per voice, here or in its voices/ folder [default:
    /// $SPEECHSTREAM_KOKORO, else --voices-dir's kokoro/, else $SPEECHSTREAM_CACHE/kokoro, else
    /// the checkout's .cache/kokoro next to the binary, else ./.cache/kokoro; a default
    /// directory without them serves the other families].
    #[arg(long, value_name = "DIR")]
    kokoro_dir: Option<PathBuf>,
    /// Leave Kokoro's files unread even where its default directory holds them (less memory, a
    /// faster start).
    #[arg(long, conflicts_with = "kokoro_dir")]
    no_kokoro: bool,
    /// Words a streamed Kokoro utterance's first segment holds at most, 1 to 6 [default: 6,
    /// fewer where the workers' warm-up finds this CPU too slow to compute six while the
    /// segment's first 0.55-0.75 s play]. Set, it also makes the later cuts of a long first
    /// sentence, and whether its leading silence goes out before its opening, a Zen 4 core's,
    /// not this machine's: a request's audio is then the same on every machine and at every
    /// start.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=6))]
    kokoro_first_words: Option<u8>,
    /// Piper's voices, served beside the others (model `piper`, each voice by its name, such as
    /// `en_US-joe-medium`): a directory laid out as wyoming-piper's --data-dir, NAME.onnx with
    /// its NAME.onnx.json, each voice at its own sample rate, every language espeak-ng reads
    /// [default: $SPEECHSTREAM_PIPER, else --voices-dir's piper/, else
    /// $SPEECHSTREAM_CACHE/piper, else the checkout's .cache/piper next to the binary, else
    /// ./.cache/piper; a default directory without voices serves the others].
    #[arg(long, value_name = "DIR")]
    piper_dir: Option<PathBuf>,
    /// Leave Piper's voices unread even where its default directory holds them.
    #[arg(long, conflicts_with = "piper_dir")]
    no_piper: bool,
    /// Leave Kokoro's default directory alone (`say` with a voice that is not Kokoro's).
    #[arg(skip)]
    skip_default_kokoro: bool,
    /// Leave Piper's default directory alone (`say` with a voice that is not Piper's).
    #[arg(skip)]
    skip_default_piper: bool,
    /// The other families' voices alone, without hibari's model (`say` with one of Kokoro's
    /// or Piper's voices).
    #[arg(skip)]
    no_hibari: bool,
    /// One request, then exit (`say`): no warm-up of the workers, and only the front ends
    /// that read it.
    #[arg(skip)]
    one_shot: Option<SynthesisRequest>,
    /// Where the model runs: auto (the first CUDA device when libtorch sees one, else the CPU),
    /// cpu, cuda or cuda:N.
    #[arg(long, value_name = "DEVICE", default_value = "auto")]
    device: String,
    /// libtorch threads for CPU work, per worker (--workers): the threads each of a worker's
    /// operations may use. Its operations are small (a sentence or a chunk), so one thread gave
    /// the best latency here; more help only large batches on many cores.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=1024))]
    threads: i32,
    /// Arithmetic of the network's Linear layers: auto (times int8 and fp32 on one decoder block at
    /// start-up and keeps the faster; fp32 on CUDA), int8 (CPU only: the voice's own int8 weights
    /// with int8 activations per frame, as the reference runs it, on our own int8 kernels) or fp32
    /// (the weights dequantized: the exact math of the float graph), or fp16 (Kokoro's products in
    /// float16, for CUDA; hibari then runs fp32). Kokoro's auto: int8 on the CPU (fp32 without
    /// AVX2), fp32 on CUDA. The CPU kernels use the widest instructions the CPU has (avx512vnni,
    /// avx512, avxvnni, avx2 or baseline, same bits on all); SPEECHSTREAM_SIMD=LEVEL caps them.
    #[arg(long, value_name = "PRECISION", default_value = "auto", value_parser = parse_precision)]
    precision: PrecisionArg,
    /// Engine workers: threads that each compute their own requests (batched), sharing the
    /// voice's weights; a new request goes to the one owing the least audio. Each uses
    /// --threads libtorch threads [default: the CPUs this process may use (its affinity mask);
    /// 4 on CUDA (at most one per CPU), where they overlap each other's host work].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = positive_count)]
    workers: Option<usize>,
    /// Admission of streamed utterances: `realtime` refuses one (a WebSocket `error` frame, the
    /// session stays open; HTTP 503 with Retry-After) when no worker could compute it beside its
    /// running streams with every deadline kept (first audio and each chunk before its listener
    /// runs dry, at the worker's measured speed for the voice's family), except that a stream
    /// from a client not known to listen in real time (its first on the connection, or sent
    /// while its last would still be playing) is admitted with its first audio due later where
    /// a delay fits that still gets its first audio within 1 s (a refusal's Retry-After);
    /// `off` takes every one.
    #[arg(long, value_name = "MODE", default_value = "realtime", value_parser = parse_admission)]
    admission: speechstream_engine_libtorch::AdmissionMode,
    /// Most streamed utterances in flight at once (refused past it, as by admission; the
    /// synthetic engine's only capacity) [default: no fixed cap].
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u64))]
    max_streams: Option<u64>,
    /// Milliseconds after submission by which a stream's first audio is due (for a Kokoro voice,
    /// after its first segment's own compute, or its opening's where it opens): its deadline,
    /// against which workers order their work (earliest deadline first).
    #[arg(long, value_name = "MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    first_audio_target_ms: u64,
    /// Seconds of audio a stream may get ahead of its playback before it waits (computed
    /// audio a cancel would throw away, and compute taken from streams that need it).
    #[arg(long, value_name = "SECONDS", default_value = "10", allow_negative_numbers = true, value_parser = positive_seconds)]
    max_lead: Duration,
    /// Pronunciations for the whole server: one entry a line, a word, a tab (or space), then
    /// /phonemes/ in the voice's alphabet or a respelling ("nginx<TAB>engine x"); `#` starts a
    /// comment. A session's or request's `pronunciations` win over it.
    #[arg(long, value_name = "FILE")]
    lexicon: Option<PathBuf>,
    /// Fenced code blocks in the text: skip (the default) or read.
    #[arg(long, value_name = "MODE", default_value = "skip", value_parser = parse_code)]
    code_blocks: speechstream_engine_libtorch::g2p::spoken::Code,
    /// Inline `code` spans in the text: read (the default) or skip.
    #[arg(long, value_name = "MODE", default_value = "read", value_parser = parse_code)]
    code_spans: speechstream_engine_libtorch::g2p::spoken::Code,
    /// Emoji in the text: drop (the default) or name (read by name, "thumbs up").
    #[arg(long, value_name = "MODE", default_value = "drop", value_parser = parse_emoji)]
    emoji: speechstream_engine_libtorch::g2p::spoken::Emoji,
}

fn parse_code(s: &str) -> Result<speechstream_engine_libtorch::g2p::spoken::Code, String> {
    use speechstream_engine_libtorch::g2p::spoken::Code;
    match s {
        "read" => Ok(Code::Read),
        "skip" => Ok(Code::Skip),
        _ => Err(format!("{s:?}: read or skip")),
    }
}

fn parse_emoji(s: &str) -> Result<speechstream_engine_libtorch::g2p::spoken::Emoji, String> {
    use speechstream_engine_libtorch::g2p::spoken::Emoji;
    match s {
        "drop" => Ok(Emoji::Drop),
        "name" => Ok(Emoji::Name),
        _ => Err(format!("{s:?}: drop or name")),
    }
}

fn parse_admission(s: &str) -> Result<speechstream_engine_libtorch::AdmissionMode, String> {
    s.parse()
}

/// `--precision`: None for auto.
#[derive(Clone, Copy, Debug)]
struct PrecisionArg(Option<speechstream_engine_libtorch::Precision>);

fn parse_precision(s: &str) -> Result<PrecisionArg, String> {
    match s {
        "auto" => Ok(PrecisionArg(None)),
        _ => s.parse().map(|p| PrecisionArg(Some(p))).map_err(|_| format!("{s:?}: auto, int8, fp32 or fp16")),
    }
}

impl VoiceArgs {
    fn engine(&self, model_name: Option<String>, default_voice: Option<String>) -> Result<TorchEngine, String> {
        let device = speechstream_engine_libtorch::parse_device(&self.device)?;
        let mut options = EngineOptions::new(self.assets()?);
        options.hibari.voices = !self.no_hibari;
        options.warm_up = self.one_shot.is_none();
        options.only_request = self.one_shot.clone();
        options.device = device;
        options.threads = Some(self.threads);
        options.precision = self.precision.0;
        options.workers = self.workers;
        options.admission = self.admission;
        options.max_streams = self.max_streams;
        options.pacing.first_audio = Duration::from_millis(self.first_audio_target_ms);
        options.pacing.max_lead = self.max_lead;
        options.text = speechstream_engine_libtorch::g2p::spoken::TextOptions {
            code_blocks: self.code_blocks,
            code_spans: self.code_spans,
            emoji: self.emoji,
        };
        if let Some(path) = &self.lexicon {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--lexicon {}: {e}", path.display()))?;
            options.pronunciations = speechstream_engine_libtorch::g2p::spoken::Pronunciations::parse_file(&text)
                .map_err(|e| format!("--lexicon {}: {e}", path.display()))?;
        }
        // A directory named, or the family `say`'s voice is of, must serve.
        options.kokoro.required = self.kokoro_dir.is_some() || (self.no_hibari && !self.skip_default_kokoro);
        options.default_voice = default_voice;
        let skip_default = self.skip_default_kokoro || self.no_kokoro;
        options.kokoro.dir = if skip_default && self.kokoro_dir.is_none() { None } else { self.kokoro() };
        options.kokoro.first_words = self.kokoro_first_words.map(usize::from);
        options.piper.required = self.piper_dir.is_some() || (self.no_hibari && !self.skip_default_piper);
        let skip_default = self.skip_default_piper || self.no_piper;
        options.piper.dir = if skip_default && self.piper_dir.is_none() { None } else { self.piper() };
        let precision = self.precision.0.map_or("auto".to_owned(), |p| p.to_string());
        let simd = speechstream_engine_libtorch::cpu::env_cap()?;
        let level = speechstream_engine_libtorch::cpu::level();
        let what = if self.no_hibari { "loading the voice" } else { "loading the hibari voice" };
        info!(?device, %precision, threads = self.threads, cpu_kernels = %level, simd_cap = ?simd, "{what}");
        if let Some(name) = model_name {
            options.hibari.model_name = name;
        }
        let engine = TorchEngine::new(options)?;
        info!(workers = engine.workers(), admission = ?self.admission, models = ?engine.models(), "voices ready");
        Ok(engine)
    }

    /// `--kokoro-dir`, else the first candidate directory that exists ([`family_dir`]).
    fn kokoro(&self) -> Option<PathBuf> {
        self.kokoro_dir.clone().or_else(|| family_dir("kokoro", "SPEECHSTREAM_KOKORO", self.voices_dir.as_deref()))
    }

    /// `--piper-dir`, else the first candidate directory that exists ([`family_dir`]).
    fn piper(&self) -> Option<PathBuf> {
        self.piper_dir.clone().or_else(|| family_dir("piper", "SPEECHSTREAM_PIPER", self.voices_dir.as_deref()))
    }

    /// The first candidate directory that holds hibari.onnx (for Kokoro's voices alone, the
    /// text front end's files it holds: normalize.json); nothing is downloaded at run time.
    fn assets(&self) -> Result<PathBuf, String> {
        let marker = if self.no_hibari { "normalize.json" } else { "hibari.onnx" };
        if let Some(dir) = &self.assets_dir {
            return Ok(dir.clone());
        }
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os("SPEECHSTREAM_ASSETS") {
            return Ok(PathBuf::from(dir));
        }
        if let Some(dir) = &self.voices_dir {
            let hibari = dir.join("hibari");
            if !hibari.join(marker).is_file() {
                return Err(format!(
                    "--voices-dir {}: no {marker} in its hibari/ folder (run scripts/setup.sh, or point \
                     --assets-dir at hibari's files)",
                    dir.display()
                ));
            }
            return Ok(hibari);
        }
        if let Some(cache) = std::env::var_os("SPEECHSTREAM_CACHE") {
            candidates.push(PathBuf::from(cache).join("hibari"));
        }
        // target/{release,debug}/speechstream (or target/debug/deps/... for tests) in a checkout.
        if let Ok(exe) = std::env::current_exe() {
            let exe = exe.canonicalize().unwrap_or(exe);
            candidates.extend(exe.ancestors().skip(1).take(4).map(|d| d.join(".cache/hibari")));
        }
        candidates.push(PathBuf::from(".cache/hibari"));
        match candidates.iter().find(|d| d.join(marker).is_file()) {
            Some(dir) => Ok(dir.clone()),
            None => Err(format!(
                "hibari's voice assets were not found (looked in {}): run scripts/setup.sh from the repository \
                 (or scripts/setup-voice.sh hibari), or point --assets-dir at them",
                candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            )),
        }
    }
}

/// A family's default directory, found as hibari's assets are: `$ENV`, else `voices_dir`'s
/// `name/`, else `$SPEECHSTREAM_CACHE/name`, else the checkout's `.cache/name` next to the
/// binary, else `./.cache/name`; the first that exists.
fn family_dir(name: &str, env: &str, voices_dir: Option<&std::path::Path>) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(env) {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = voices_dir {
        return Some(dir.join(name)).filter(|d| d.is_dir());
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(cache) = std::env::var_os("SPEECHSTREAM_CACHE") {
        candidates.push(PathBuf::from(cache).join(name));
    }
    if let Ok(exe) = std::env::current_exe() {
        let exe = exe.canonicalize().unwrap_or(exe);
        candidates.extend(exe.ancestors().skip(1).take(4).map(|d| d.join(".cache").join(name)));
    }
    candidates.push(PathBuf::from(".cache").join(name));
    candidates.into_iter().find(|d| d.is_dir())
}

#[derive(Args, Debug)]
struct SayArgs {
    /// The text to speak (`-` reads it from standard input).
    text: String,
    /// Output file.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Audio format: wav, pcm (s16le), flac, mp3, opus, ulaw or alaw (G.711, 8 kHz), or aac
    /// (ADTS; needs FFmpeg's libavcodec) [default: from the file's extension; another
    /// extension, or none, is refused].
    #[arg(short = 'f', long, value_name = "FORMAT", value_parser = response_format)]
    format: Option<ResponseFormat>,
    /// Voice: one of hibari's (voices.json with its model file present; any case), one of
    /// Kokoro's (`af_heart`, or a mix such as `af_bella(2)+af_sky`: Kokoro is loaded only for
    /// these, and hibari's model not at all), one of Piper's (`en_US-joe-medium`: that voice
    /// alone is loaded), `default`, or one of OpenAI's voice names (an alias of the default
    /// voice), as the server takes them.
    #[arg(long, default_value = speechstream_engine_libtorch::DEFAULT_VOICE)]
    voice: String,
    /// Speaking rate, 0.25 to 4.0 (the model's own duration scale, not a time stretch).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = speed)]
    speed: f64,
    /// Seed of the voice's noise, for reproducible audio [default: a random one].
    #[arg(long, allow_negative_numbers = true)]
    seed: Option<i64>,
    /// Language to read the text in, as a request's `language` (`en`, `en-GB`, `ja`, `es`, `zh`)
    /// [default: the voice's own; a Japanese voice reads text with kana or kanji as Japanese,
    /// other text as English].
    #[arg(long)]
    language: Option<String>,
    #[command(flatten)]
    voice_args: VoiceArgs,
}

fn response_format(value: &str) -> Result<ResponseFormat, String> {
    match value.to_lowercase().as_str() {
        "wav" => Ok(ResponseFormat::Wav),
        "pcm" | "raw" => Ok(ResponseFormat::Pcm),
        "flac" => Ok(ResponseFormat::Flac),
        "mp3" => Ok(ResponseFormat::Mp3),
        "opus" | "ogg" => Ok(ResponseFormat::Opus),
        "ulaw" | "mulaw" => Ok(ResponseFormat::Ulaw),
        "alaw" => Ok(ResponseFormat::Alaw),
        "aac" => Ok(ResponseFormat::Aac),
        _ => Err(format!("unknown format `{value}`; use wav, pcm, flac, mp3, opus, ulaw, alaw or aac")),
    }
}

fn speed(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(speed) if (0.25..=4.0).contains(&speed) => Ok(speed),
        _ => Err(format!("`{value}` must be a number from 0.25 to 4.0")),
    }
}

fn positive_seconds(value: &str) -> Result<Duration, String> {
    let seconds = seconds(value).map_err(|_| format!("`{value}` must be a positive number of seconds"))?;
    if seconds.is_zero() {
        return Err(format!("`{value}` must be more than 0 seconds"));
    }
    Ok(seconds)
}

fn non_negative_seconds(value: &str) -> Result<Duration, String> {
    seconds(value)
}

fn seconds(value: &str) -> Result<Duration, String> {
    let seconds: f64 = value.trim().parse().map_err(|_| format!("`{value}` is not a number of seconds"))?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("`{value}` must be a finite, non-negative number of seconds"));
    }
    if seconds > 1e9 {
        return Err(format!("`{value}` seconds is too long"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

fn api_key(value: &str) -> Result<String, String> {
    if value.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must be non-empty, without spaces or control characters".to_owned());
    }
    Ok(value.to_owned())
}

fn positive_count(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("`{value}` is not a whole positive number")),
    }
}

fn positive_factor(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(factor) if factor.is_finite() && factor > 0.0 && factor <= 1000.0 => Ok(factor),
        _ => Err(format!("`{value}` must be a number above 0 and at most 1000")),
    }
}

fn audio_seconds(value: &str) -> Result<f64, String> {
    match value.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0 => Ok(seconds),
        _ => Err(format!("`{value}` must be a number of seconds above 0 and at most 3600")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Serve(args) => run_serve(args),
        Command::Say(args) => match run_say(args) {
            Ok(()) => speechstream_engine_libtorch::exit_now(0),
            Err(message) => {
                error!("{message}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Delivers the one request's events of `say` to the main thread.
struct SaySink(std::sync::mpsc::Sender<EngineEvent>);

impl EventSink for SaySink {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(event).is_ok()
    }
}

/// Whether `say --voice` names a Kokoro voice (its names: a language letter, `f` or `m`, `_`:
/// `af_heart`) or a mix of voices (`af_bella(2)+af_sky`), which only Kokoro does.
fn kokoro_voice_name(voice: &str) -> bool {
    let b = voice.as_bytes();
    voice.contains('+')
        || (b.len() > 3 && b[0].is_ascii_alphabetic() && matches!(b[1], b'f' | b'm' | b'F' | b'M') && b[2] == b'_')
}

/// Whether `say --voice` names a Piper voice (its names: a language code, `-`, a name, `-`, a
/// quality: `en_US-joe-medium`).
fn piper_voice_name(voice: &str) -> bool {
    let parts: Vec<&str> = voice.split('-').collect();
    parts.len() >= 3
        && parts[0].len() >= 2
        && parts[0].chars().all(|c| c.is_ascii_alphabetic() || c == '_')
        && matches!(parts[parts.len() - 1], "x_low" | "low" | "medium" | "high")
}

fn run_say(args: SayArgs) -> Result<(), String> {
    let started = std::time::Instant::now();
    let text = if args.text == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|e| format!("stdin: {e}"))?;
        text
    } else {
        args.text.clone()
    };
    let text = text.trim();
    if text.is_empty() {
        return Err("nothing to say: the text is empty".to_owned());
    }
    let format = match args.format {
        Some(format) => format,
        None => format_of(&args.output)?,
    };
    if format == ResponseFormat::Aac {
        // Before the voice is loaded and the text spoken: the library may be missing.
        speechstream_core::encode::aac_available().map_err(|e| e.to_string())?;
    }
    // One request: one worker, nothing to admit.
    let mut voice_args = args.voice_args;
    voice_args.workers.get_or_insert(1);
    voice_args.admission = speechstream_engine_libtorch::AdmissionMode::Off;
    // Kokoro's network takes seconds to load: only for one of its voices (`af_heart`: a
    // language letter, f or m, `_`) or a mix, unless --kokoro-dir names it; and hibari's only
    // for the others.
    let (kokoro, piper) = (kokoro_voice_name(&args.voice), piper_voice_name(&args.voice));
    voice_args.skip_default_kokoro = !kokoro;
    voice_args.skip_default_piper = !piper;
    voice_args.no_hibari = kokoro || piper;
    if kokoro && voice_args.no_kokoro {
        return Err(format!("--no-kokoro: voice {} is Kokoro's", args.voice));
    }
    if piper && voice_args.no_piper {
        return Err(format!("--no-piper: voice {} is Piper's", args.voice));
    }
    let mut request =
        SynthesisRequest::new(text).with_voice(args.voice.clone()).with_speed(args.speed).with_seed(args.seed);
    if let Some(language) = &args.language {
        request = request.with_language(language.clone());
    }
    // One request: the workers' warm-up would only add its passes to the one it makes, and a
    // Kokoro voice reads it with one of its front ends.
    voice_args.one_shot = Some(request.clone());
    let engine = voice_args.engine(None, None)?;
    let loaded = started.elapsed();
    // The voice rule every protocol uses: any case, OpenAI's names, `default`.
    Catalog::new(Arc::new(engine.capabilities().clone()), Naming::openai()).resolve(&mut request)?;
    // On a terminal, a progress bar; its sentences are counted by the engine's word timings.
    let mut progress = progress::Progress::new(text, std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if progress.is_some() && engine.capabilities().word_timestamps {
        request.output = OutputKind::AudioAndWords;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    engine.submit(RequestId { connection: 0, utterance: 0 }, request, Box::new(SaySink(tx)));
    let mut pcm = Vec::new();
    loop {
        match rx.recv().map_err(|_| "the engine stopped without finishing".to_owned())?.kind {
            EngineEventKind::Audio { pcm: chunk, sample_rate } => {
                pcm.extend_from_slice(&chunk);
                if let Some(progress) = &mut progress {
                    progress.audio(chunk.len() as f64 / 2.0 / f64::from(sample_rate.max(1)));
                }
            }
            EngineEventKind::Words(words) => {
                if let Some(progress) = &mut progress {
                    progress.sentence(&words.into_iter().map(|w| w.word).collect::<Vec<_>>());
                }
            }
            EngineEventKind::Finished => break,
            EngineEventKind::Failed(failure) => return Err(failure.to_string()),
            // Codec frames: not asked for.
            _ => {}
        }
    }
    if let Some(progress) = &mut progress {
        progress.finish();
    }
    let rate = engine.capabilities().sample_rate;
    let seconds = pcm.len() as f64 / 2.0 / f64::from(rate);
    let file = speechstream_core::encode::encode_s16le(format, pcm, rate).map_err(|e| e.to_string())?;
    std::fs::write(&args.output, file).map_err(|e| format!("{}: {e}", args.output.display()))?;
    info!(
        "wrote {} ({}, {seconds:.2} s of audio) in {:.2} s ({:.2} s loading the voice)",
        args.output.display(),
        format.as_str(),
        started.elapsed().as_secs_f64(),
        loaded.as_secs_f64()
    );
    Ok(())
}

/// The format `say` writes to `path` without `-f`: its extension's, or the refusal listing them.
fn format_of(path: &Path) -> Result<ResponseFormat, String> {
    path.extension().and_then(|e| e.to_str()).and_then(|e| response_format(e).ok()).ok_or_else(|| {
        format!(
            "cannot tell the audio format of {} from its extension: name it .wav, .pcm, .flac, .mp3, .opus, .ulaw, \
             .alaw or .aac, or give -f FORMAT",
            path.display()
        )
    })
}

fn run_serve(args: ServeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            error!(error = %e, "could not start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve_until_signalled(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// `--voice-alias NAME=VOICE`.
fn voice_alias(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((name, voice)) if !name.trim().is_empty() && !voice.trim().is_empty() => {
            Ok((name.trim().to_owned(), voice.trim().to_owned()))
        }
        _ => Err(format!("expected NAME=VOICE (e.g. alloy=heart), got '{value}'")),
    }
}

async fn serve_until_signalled(args: ServeArgs) -> Result<(), String> {
    // Before anything opens a file: the socket budget follows from what the operator allows.
    match raise_descriptor_limit() {
        Some((soft, hard)) => info!(soft, hard, "descriptor limit"),
        None => warn!("cannot read the descriptor limit"),
    }
    let engine: Arc<dyn Engine> = match args.engine {
        EngineKind::Hibari => {
            Arc::new(args.voice.engine(args.served_model_name.first().cloned(), args.default_voice.clone())?)
        }
        EngineKind::Synthetic if args.default_voice.is_some() => {
            return Err("--default-voice chooses among the voice engine's voices, not the synthetic engine's".to_owned())
        }
        EngineKind::Synthetic => Arc::new(SyntheticEngine::new(SyntheticOptions {
            model_name: args.served_model_name.first().cloned().unwrap_or_else(|| DEFAULT_MODEL_NAME.to_owned()),
            chunk_ms: args.synthetic_chunk_ms,
            chunk_delay: Duration::from_millis(args.synthetic_chunk_delay_ms),
            real_time_factor: args.synthetic_real_time_factor,
            audio_seconds: args.synthetic_audio_seconds,
            max_streams: args.voice.max_streams,
            ..SyntheticOptions::default()
        })),
    };
    let wyoming = match args.wyoming_port {
        Some(port) => {
            let address = format!("{}:{port}", args.host);
            let listener = bind(&address).await.map_err(|e| format!("cannot listen for wyoming on {address}: {e}"))?;
            Some(WyomingListener { listener, options: wyoming_options(&args, engine.capabilities()) })
        }
        None => None,
    };
    let agent = match args.agent_port {
        Some(port) => {
            let address = format!("{}:{port}", args.host);
            Some(bind(&address).await.map_err(|e| format!("cannot listen for the agent check on {address}: {e}"))?)
        }
        None => None,
    };
    let mut config = ServerConfig::new(SessionOptions {
        limits: Limits {
            max_text_message_chars: args.max_text_message_chars,
            max_config_message_chars: args.max_config_message_chars,
        },
        idle_timeout: args.idle_timeout,
        config_timeout: args.config_timeout,
        max_buffered_chars: args.max_buffered_chars,
        max_deferred_bytes: args.max_deferred_bytes,
        max_whole_audio_seconds: args.max_whole_audio_seconds,
    });
    config.shutdown_grace = args.shutdown_grace;
    config.api_key = args.api_key.clone();
    config.max_connections = args.max_connections;
    config.max_sockets = args.max_sockets;
    config.max_connections_per_ip = args.max_connections_per_ip;
    config.first_byte_timeout = args.first_byte_timeout;
    config.header_timeout = args.header_timeout;
    config.body_timeout = args.body_timeout;
    config.write_timeout = args.write_timeout;
    if args.no_openai_names {
        config.naming = Naming::new();
    }
    config.strict = args.strict;
    if args.vllm_omni_compat {
        config.naming = std::mem::take(&mut config.naming).with_vllm_omni();
        config.vllm_omni_metrics = true;
    }
    config.extra_models = args.served_model_name.iter().skip(1).cloned().collect();
    let voices = voice_names(engine.as_ref());
    for (alias, voice) in &args.voice_alias {
        if !voice.eq_ignore_ascii_case("default") && !voices.iter().any(|v| v.eq_ignore_ascii_case(voice)) {
            return Err(format!("--voice-alias {alias}={voice}: no voice '{voice}' (voices: {})", voices.join(", ")));
        }
        config.naming.voice_aliases.retain(|(name, _)| !name.eq_ignore_ascii_case(alias));
        config.naming.voice_aliases.push((alias.clone(), voice.clone()));
    }

    let address = format!("{}:{}", args.host, args.port);
    let listener = bind(&address).await.map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let local: Option<SocketAddr> = listener.local_addr().ok();
    info!(
        address = ?local,
        engine = ?args.engine,
        models = ?engine.capabilities().models,
        also_models = ?config.extra_models,
        model_aliases = ?config.naming.model_aliases,
        voice_aliases = config.naming.voice_aliases.len(),
        "speechstream serving"
    );
    serve_listeners(Listeners { http: listener, wyoming, agent }, engine, config, shutdown_signal())
        .await
        .map_err(|e| format!("server failed: {e}"))
}

/// The names of the engine's voices.
fn voice_names(engine: &dyn Engine) -> Vec<String> {
    engine.capabilities().voices.iter().map(|v| v.id.clone()).collect()
}

/// What the Wyoming listener tells clients about itself, and its limits: the HTTP side's text
/// limits and idle timeout, and the voices as the engine declares them (language, description;
/// hibari's from its voices.json).
fn wyoming_options(args: &ServeArgs, capabilities: &EngineCapabilities) -> WyomingOptions {
    let voices = capabilities.voices.iter().map(|voice| WyomingVoice::of(voice, "en")).collect();
    let engine = match args.engine {
        EngineKind::Hibari if capabilities.models.len() > 1 => "the hibari voice and Kokoro-82M",
        EngineKind::Hibari => "the hibari voice",
        EngineKind::Synthetic => "the synthetic engine (tones, no model)",
    };
    let text_bytes = args.max_text_message_chars.saturating_mul(4).saturating_add(64 * 1024);
    WyomingOptions {
        program_description: format!("speechstream: streaming text to speech with {engine}"),
        voices,
        frame: FrameLimits { max_data_bytes: text_bytes, ..FrameLimits::default() },
        max_text_chars: args.max_text_message_chars,
        max_queued_chars: args.max_buffered_chars,
        idle_timeout: args.idle_timeout,
        ..WyomingOptions::default()
    }
}

/// Resolves on the first SIGINT or SIGTERM. A second one ends the process at once, for when
/// the grace period is too long to wait out.
async fn shutdown_signal() {
    wait_for_signal().await;
    info!("signal received: finishing utterances in flight (signal again to quit now)");
    tokio::spawn(async {
        wait_for_signal().await;
        warn!("second signal: exiting now");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_the_reference_values() {
        let cli = Cli::try_parse_from(["speechstream", "serve"]).unwrap();
        let Command::Serve(args) = cli.command else { panic!("not serve") };
        assert_eq!((args.port, args.wyoming_port), (8000, None));
        assert_eq!(args.engine, EngineKind::Hibari);
        assert_eq!((args.voice.device.as_str(), args.voice.threads), ("auto", 1));
        assert_eq!(args.idle_timeout, Duration::from_secs(30));
        assert_eq!(args.config_timeout, Duration::from_secs(10));
        assert_eq!(args.max_text_message_chars, 131_072);
        assert_eq!(args.max_config_message_chars, 4_194_304);
        assert_eq!(args.shutdown_grace, Duration::from_secs(10));
        assert_eq!(
            (args.header_timeout, args.body_timeout, args.write_timeout),
            (Duration::from_secs(30), Duration::from_secs(30), Duration::from_secs(30))
        );
    }

    #[test]
    fn absurd_values_are_rejected() {
        for bad in [
            &["--idle-timeout", "-1"][..],
            &["--idle-timeout", "0"],
            &["--config-timeout", "nan"],
            &["--max-text-message-chars", "0"],
            &["--max-buffered-chars", "-5"],
            &["--shutdown-grace", "inf"],
            &["--synthetic-chunk-ms", "0"],
            &["--synthetic-audio-seconds", "0"],
            &["--engine", "bogus"],
            &["--threads", "0"],
            &["--max-connections", "0"],
            &["--max-sockets", "0"],
            &["--header-timeout", "0"],
            &["--body-timeout", "-1"],
            &["--write-timeout", "0"],
            &["--api-key", ""],
            &["--api-key", "two words"],
            &["--kokoro-first-words", "0"],
            &["--kokoro-first-words", "7"],
        ] {
            let argv = ["speechstream", "serve"].iter().chain(bad.iter());
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?} accepted");
        }
        let cli = Cli::try_parse_from(["speechstream", "serve", "--idle-timeout", "0.05", "--kokoro-first-words", "4"])
            .unwrap();
        let Command::Serve(args) = cli.command else { panic!("not serve") };
        assert_eq!(args.idle_timeout, Duration::from_millis(50));
        assert_eq!(args.voice.kokoro_first_words, Some(4));
    }

    #[test]
    fn say_loads_kokoro_only_for_its_voices() {
        for voice in ["af_heart", "jf_alpha", "BM_LEWIS", "af_bella(2)+af_sky(1)", "heart+fable"] {
            assert!(kokoro_voice_name(voice), "{voice}");
        }
        for voice in ["heart", "default", "alloy", "fable", "a_b", "af_"] {
            assert!(!kokoro_voice_name(voice), "{voice}");
        }
    }

    #[test]
    fn say_loads_piper_only_for_its_voices() {
        for voice in ["en_US-joe-medium", "de_DE-thorsten-high", "en_GB-northern_english_male-x_low"] {
            assert!(piper_voice_name(voice), "{voice}");
        }
        for voice in ["heart", "af_heart", "en_US-joe", "joe-medium", "af_bella(2)+af_sky"] {
            assert!(!piper_voice_name(voice), "{voice}");
        }
    }

    #[test]
    fn say_takes_the_voice_flags() {
        let cli = Cli::try_parse_from([
            "speechstream",
            "say",
            "Hi there.",
            "-o",
            "x.mp3",
            "--speed",
            "1.5",
            "--seed",
            "-3",
            "--threads",
            "2",
            "--device",
            "cpu",
            "--voice-dir",
            "/v",
        ])
        .unwrap();
        let Command::Say(args) = cli.command else { panic!("not say") };
        assert_eq!((args.speed, args.seed, args.voice_args.threads), (1.5, Some(-3), 2));
        assert_eq!(args.voice_args.assets_dir.as_deref(), Some(Path::new("/v")));
        assert_eq!(format_of(&args.output), Ok(ResponseFormat::Mp3));
        // Issue 34: an extension that names no format is refused with the list, not a WAV.
        for name in ["x.xyz", "x", "x.wav.bak"] {
            let refusal = format_of(Path::new(name)).unwrap_err();
            assert!(refusal.contains(".wav, .pcm, .flac, .mp3, .opus, .ulaw, .alaw or .aac"), "{name}: {refusal}");
        }
        assert_eq!(format_of(Path::new("x.AAC")), Ok(ResponseFormat::Aac));
        assert_eq!(format_of(Path::new("X.OGG")), Ok(ResponseFormat::Opus));
        assert_eq!(args.voice, "heart");
        for bad in [&["--speed", "5"][..], &["--speed", "0.1"], &["-f", "aiff"], &["--threads", "0"]] {
            let argv = ["speechstream", "say", "x", "-o", "x.wav"].iter().chain(bad.iter());
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?} accepted");
        }
    }
}
