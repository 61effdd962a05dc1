//! What a synthesis engine sees of the protocol, and the trait engines implement.
//!
//! The trait is synchronous and runtime-free so any runtime can host an engine: the
//! engine pushes events into a sink the transport gives it, and the transport feeds
//! them to the `Session` that asked for the request.

use std::fmt;

/// Identifies one engine request: the connection that asked and the utterance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId {
    pub connection: u64,
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
    pub model: Option<String>,
    pub voice: Option<String>,
    pub language: Option<String>,
    pub instructions: Option<String>,
    pub task_type: Option<String>,
    /// Speaking rate, 0.25..=4.0; 1.0 is the voice's natural pace.
    pub speed: f64,
    pub seed: Option<i64>,
    /// Stream audio chunk by chunk as it is computed (otherwise the session
    /// collects the whole utterance before encoding it).
    pub stream: bool,
    /// Report word timings with `EngineEvent::Words`.
    pub word_timestamps: bool,
    /// Produce codec frames (`EngineEvent::Codec`) instead of audio.
    pub codec_tokens: bool,
    pub max_new_tokens: Option<u64>,
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
    pub word: String,
    pub start_ms: i64,
    pub end_ms: i64,
}

/// Something an engine reports about a request.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEventKind {
    /// A chunk of mono signed 16-bit little-endian PCM.
    Audio { pcm: Vec<u8>, sample_rate: u32 },
    /// Timings of words spoken so far (appended to those already reported).
    Words(Vec<WordTiming>),
    /// Codec frames: `codes` holds `codes.len() / codebooks` frames, frame-major.
    Codec { codes: Vec<i32>, eos: bool },
    /// The request completed; no more events follow.
    Finished,
    /// The request failed; no more events follow.
    Failed(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct EngineEvent {
    pub id: RequestId,
    pub kind: EngineEventKind,
}

/// How codec frames are described to clients in `codec.start`.
#[derive(Clone, Debug, PartialEq)]
pub struct CodecSpec {
    pub codebooks: u32,
    pub codebook_size: u32,
    pub frame_rate_hz: f64,
    pub sample_rate: u32,
    pub decoder_id: Option<String>,
}

/// What an engine can do; the session checks requests against it.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineCapabilities {
    /// Model names served (the `model` config check); the first is the default.
    pub models: Vec<String>,
    pub sample_rate: u32,
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
    Full(EngineEvent),
    Closed,
}

/// How busy an engine is, for `/metrics`. Engines fill in what they know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineLoad {
    /// Requests accepted but not started (waiting for a batch slot).
    pub queued: u64,
    /// Requests being computed.
    pub running: u64,
    /// Batches run so far, by size: `(batch size, how many batches of that size)`. Cumulative
    /// since the engine started; empty for an engine that does not batch.
    pub batch_sizes: Vec<(u64, u64)>,
}

/// A synthesis engine shared by all sessions.
pub trait Engine: Send + Sync {
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
