//! What a synthesis engine sees of the protocol, and the trait engines implement.
//!
//! The trait is synchronous and runtime-free so any runtime can host an engine: the
//! engine pushes events into a sink the transport gives it, and the transport feeds
//! them to the [`Session`](crate::session::Session) that asked for the request.
//!
//! A request's life: the session emits
//! [`EngineCommand::Synthesize`](crate::session::EngineCommand::Synthesize); the driver calls
//! [`Engine::submit`] with an [`EventSink`] of its own; the engine sends [`EngineEvent`]s
//! (audio, word timings or codec frames, then exactly one `Finished` or `Failed`) into the
//! sink, from any thread; the driver hands each to
//! [`Session::handle_engine`](crate::session::Session::handle_engine). An
//! [`EngineCommand::Abort`](crate::session::EngineCommand::Abort) becomes [`Engine::abort`].

use std::fmt;

/// Identifies one engine request: the connection that asked and the utterance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    /// The connection id given to [`Session::new`](crate::session::Session::new).
    pub connection: u64,
    /// The utterance's `utterance_index` on that connection.
    pub utterance: u64,
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "speech-stream-{}-{}", self.connection, self.utterance)
    }
}

/// One utterance to synthesize, built from the session config at `input.done`.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthesisRequest {
    /// The flushed, stripped text (never empty).
    pub text: String,
    /// The model the client named (`session.config`'s `model`), already checked against
    /// [`EngineCapabilities::models`].
    pub model: Option<String>,
    /// The voice the client asked for; `None` means the engine's default.
    pub voice: Option<String>,
    /// The language the client named, unchecked: the engine decides what it supports.
    pub language: Option<String>,
    /// Free-form style instructions (voice design models), unchecked.
    pub instructions: Option<String>,
    /// `CustomVoice`, `VoiceDesign` or `Base`, when the client named one.
    pub task_type: Option<String>,
    /// Speaking rate, 0.25..=4.0; 1.0 is the voice's natural pace.
    pub speed: f64,
    /// Makes the audio reproducible; `None` lets the engine choose.
    pub seed: Option<i64>,
    /// Stream audio chunk by chunk as it is computed (otherwise the session
    /// collects the whole utterance before encoding it).
    pub stream: bool,
    /// Report word timings with `EngineEvent::Words`.
    pub word_timestamps: bool,
    /// Produce codec frames (`EngineEvent::Codec`) instead of audio.
    pub codec_tokens: bool,
    /// Stop after this many codec frames (of audio, for a codec-based model).
    pub max_new_tokens: Option<u64>,
    /// Frames in the first codec chunk, to trade first-chunk latency for efficiency.
    pub initial_codec_chunk_frames: Option<u64>,
}

impl SynthesisRequest {
    /// A request for `text` with every option at its default: the voice's natural pace, no
    /// seed, not streamed, audio (not codec frames), no word timings.
    pub fn new(text: impl Into<String>) -> SynthesisRequest {
        SynthesisRequest {
            text: text.into(),
            model: None,
            voice: None,
            language: None,
            instructions: None,
            task_type: None,
            speed: 1.0,
            seed: None,
            stream: false,
            word_timestamps: false,
            codec_tokens: false,
            max_new_tokens: None,
            initial_codec_chunk_frames: None,
        }
    }
}

/// One word's position in the utterance's audio, in milliseconds from its start.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WordTiming {
    /// The word as written in the text.
    pub word: String,
    /// When the word starts.
    pub start_ms: i64,
    /// When the word ends.
    pub end_ms: i64,
}

/// Something an engine reports about a request.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEventKind {
    /// A chunk of mono signed 16-bit little-endian PCM.
    Audio {
        /// Whole samples: an even number of bytes.
        pcm: Vec<u8>,
        /// Samples per second; the same for every chunk of a request.
        sample_rate: u32,
    },
    /// Timings of words spoken so far (appended to those already reported).
    Words(Vec<WordTiming>),
    /// Codec frames: `codes` holds `codes.len() / codebooks` frames, frame-major.
    Codec {
        /// Codes in `0..codebook_size`, [`CodecSpec::codebooks`] per frame.
        codes: Vec<i32>,
        /// The last frames of the utterance.
        eos: bool,
    },
    /// The request completed; no more events follow.
    Finished,
    /// The request failed; no more events follow.
    Failed(String),
}

/// An event of one engine request, tagged with its id so that one queue can carry the events
/// of every request a connection has made.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineEvent {
    /// The request the event belongs to.
    pub id: RequestId,
    /// What happened.
    pub kind: EngineEventKind,
}

/// How codec frames are described to clients in `codec.start`.
#[derive(Clone, Debug, PartialEq)]
pub struct CodecSpec {
    /// Codes per frame.
    pub codebooks: u32,
    /// Codes are in `0..codebook_size`.
    pub codebook_size: u32,
    /// Frames per second of audio.
    pub frame_rate_hz: f64,
    /// The sample rate of the audio the frames decode to.
    pub sample_rate: u32,
    /// Names the decoder that turns the frames into audio, for clients that have several.
    pub decoder_id: Option<String>,
}

/// What an engine can do; the session checks requests against it.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineCapabilities {
    /// Model names served (the `model` config check); the first is the default.
    pub models: Vec<String>,
    /// The sample rate of the engine's audio.
    pub sample_rate: u32,
    /// Voice names a client may ask for; empty when the engine takes any name.
    pub voices: Vec<String>,
    /// The engine reports word timings (the reference's "forced aligner").
    pub word_timestamps: bool,
    /// `Some` when codec_tokens output is supported.
    pub codec: Option<CodecSpec>,
}

/// Where an engine delivers a request's events.
pub trait EventSink: Send {
    /// Deliver one event. May block while the consumer is slow (that is the
    /// backpressure); returns false once the consumer is gone, after which the
    /// engine should stop work on the request.
    fn send(&self, event: EngineEvent) -> bool;

    /// Deliver without waiting. `Full` hands the event back while the consumer's queue is
    /// full: an engine that serves many requests from one thread keeps it and pauses that
    /// request (and only that one) until a retry succeeds. `Closed` once the consumer is gone.
    /// The default calls `send`, which is right only for a sink that never waits (an
    /// unbounded queue); a sink that can be full, or wraps one that can, must override it.
    /// Engines may call it from any thread, including the caller of `submit`.
    fn try_send(&self, event: EngineEvent) -> Result<(), TrySendError> {
        if self.send(event) {
            Ok(())
        } else {
            Err(TrySendError::Closed)
        }
    }
}

/// Why [`EventSink::try_send`] did not deliver an event.
#[derive(Debug)]
pub enum TrySendError {
    /// The consumer's queue has no room now: here is the event back, to retry later.
    Full(EngineEvent),
    /// The consumer is gone; stop work on the request.
    Closed,
}

/// How busy an engine is, for `/metrics`. Engines fill in what they know.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineLoad {
    /// Requests accepted but not started (waiting for a batch slot).
    pub queued: u64,
    /// Requests being computed.
    pub running: u64,
    /// Batches run so far, by size: `(batch size, how many batches of that size)`. Cumulative
    /// since the engine started; empty for an engine that does not batch.
    pub batch_sizes: Vec<(u64, u64)>,
    /// Per worker, for an engine that computes on several (empty otherwise).
    pub workers: Vec<crate::capacity::WorkerLoad>,
    /// Streamed audio against real-time playback, and refusals.
    pub streams: crate::capacity::StreamTiming,
}

/// A synthesis engine shared by all sessions.
///
/// `submit` must not block for long: drivers call it from their connection's thread or task.
/// An engine that computes on threads of its own sends events from there; one that computes
/// in `submit` must use [`EventSink::try_send`] there, since [`EventSink::send`] may wait for
/// the very caller it would block.
///
/// A minimal engine: one second of silence per request, handed over before `submit` returns.
///
/// ```
/// use speechstream_core::engine::{
///     Engine, EngineCapabilities, EngineEvent, EngineEventKind, EventSink, RequestId, SynthesisRequest,
/// };
///
/// struct Silence {
///     capabilities: EngineCapabilities,
/// }
///
/// impl Engine for Silence {
///     fn capabilities(&self) -> &EngineCapabilities {
///         &self.capabilities
///     }
///
///     fn submit(&self, id: RequestId, _request: SynthesisRequest, sink: Box<dyn EventSink>) {
///         let sample_rate = self.capabilities.sample_rate;
///         let pcm = vec![0; sample_rate as usize * 2];
///         for kind in [EngineEventKind::Audio { pcm, sample_rate }, EngineEventKind::Finished] {
///             // `try_send`, not `send`: this runs on the driver's thread, and a full queue is
///             // emptied only by that thread. A real engine keeps what did not fit and retries.
///             if sink.try_send(EngineEvent { id, kind }).is_err() {
///                 return;
///             }
///         }
///     }
///
///     // Everything was delivered in `submit`: nothing is left to stop.
///     fn abort(&self, _id: RequestId) {}
/// }
///
/// let engine = Silence {
///     capabilities: EngineCapabilities {
///         models: vec!["silence".into()],
///         sample_rate: 24_000,
///         voices: Vec::new(),
///         word_timestamps: false,
///         codec: None,
///     },
/// };
///
/// // A sink for a driver whose engine events go into an unbounded channel.
/// struct Channel(std::sync::mpsc::Sender<EngineEvent>);
/// impl EventSink for Channel {
///     fn send(&self, event: EngineEvent) -> bool {
///         self.0.send(event).is_ok()
///     }
/// }
/// let (tx, rx) = std::sync::mpsc::channel();
/// let id = RequestId { connection: 1, utterance: 0 };
/// engine.submit(id, SynthesisRequest::new("Hello."), Box::new(Channel(tx)));
/// let events: Vec<EngineEventKind> = rx.try_iter().map(|event| event.kind).collect();
/// assert!(matches!(&events[..], [EngineEventKind::Audio { pcm, .. }, EngineEventKind::Finished] if pcm.len() == 48_000));
/// ```
///
/// `synthetic::SyntheticEngine` (with the crate's `synthetic` feature) is a complete one,
/// with pacing, word timings, codec frames and aborts.
pub trait Engine: Send + Sync {
    /// What the engine can do; the session checks each request against it. Called once per
    /// session (the driver passes it to [`Session::new`](crate::session::Session::new)).
    fn capabilities(&self) -> &EngineCapabilities;
    /// Current load; read when `/metrics` is scraped, so it must be cheap and not block.
    fn load(&self) -> EngineLoad {
        EngineLoad::default()
    }
    /// Start a request. Events, ending with exactly one `Finished` or `Failed`,
    /// go to `sink` (unless the request is aborted first).
    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>);
    /// Stop a request at the next chunk. Unknown ids are ignored.
    fn abort(&self, id: RequestId);
}
