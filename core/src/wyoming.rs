//! Home Assistant's Wyoming protocol (text to speech) as a state machine beside
//! [`Session`](crate::session::Session): [`WyomingSession`] is one TCP connection; it is fed the
//! client's bytes, engine events and the time, and asks for bytes to write, engine requests and
//! the close.
//!
//! The protocol, as the `wyoming` package (1.10, the reference implementation) and
//! `wyoming-piper` (Home Assistant's default voice server) speak it:
//!
//! ```text
//! -> describe                       <- info {tts: [{name, voices, supports_synthesize_streaming}]}
//! -> synthesize {text, voice?}      <- audio-start {rate, width, channels}
//!                                   <- audio-chunk* (payload: s16le PCM, as it is made)
//!                                   <- audio-stop
//! -> synthesize-start {voice?}
//! -> synthesize-chunk {text}*       <- per complete sentence: audio-start, audio-chunk*, audio-stop
//! -> synthesize {text}              (the whole text again, for old servers: ignored in a stream)
//! -> synthesize-stop                <- the last sentence's audio, then synthesize-stopped
//! ```
//!
//! Streamed text is split with the upstream sentence splitter ([`crate::split`]), so a
//! sentence is synthesized as soon as it is complete, while later chunks still arrive. Answers
//! go out in the order of the requests. `ping` gets a `pong`; `select-program` and other event
//! types the server does not serve are dropped (the `wyoming` package asks servers to drop what
//! they do not know, and clients rely on it), each reported as [`Output::Dropped`].
//!
//! Bad input (a header past its limit, invalid JSON, a length past its limit, a `synthesize`
//! without text, an unknown voice, too much text queued) gets an `error` event and the close,
//! as wyoming-piper closes the connection after its `error`. An engine failure does the same:
//! its utterance gets no `audio-stop`, so a client never mistakes cut audio for a whole one.

mod frame;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Map, Value};

pub use frame::{FrameError, FrameLimits, RawEvent, WYOMING_VERSION};

use crate::catalog::Catalog;
use crate::engine::{EngineEvent, EngineEventKind, RequestId, SynthesisRequest};
use crate::session::{EngineCommand, RequestEnd, UnknownRequest};
use crate::split::{Granularity, Splitter};
use crate::text::py_strip;

/// Wyoming's default port.
pub const DEFAULT_PORT: u16 = 10200;
/// What a queued request costs beyond its text, so that floods of empty requests are bounded too.
pub const QUEUED_REQUEST_OVERHEAD: usize = 64;
/// Where `info` says the program and voices come from.
pub const ATTRIBUTION_URL: &str = "https://crates.io/crates/speechstream-core";
/// Bytes per sample of the PCM sent (s16le).
pub const SAMPLE_WIDTH: u32 = 2;

/// A voice as `info` lists it (Home Assistant shows `description`, else `name`, per language).
#[derive(Clone, Debug, PartialEq)]
pub struct WyomingVoice {
    /// What a client sends as `voice.name`; given to the engine as the voice.
    pub name: String,
    /// Shown to users.
    pub description: Option<String>,
    /// Language codes, e.g. `en_US` (`-` and `_` alike when a client asks for one).
    pub languages: Vec<String>,
    /// Its speakers' names, for a voice that has several (`voice.speaker` picks one).
    pub speakers: Vec<String>,
}

impl WyomingVoice {
    /// An engine's voice as Wyoming lists it: its language written as wyoming-piper writes them
    /// (`en_US`, `es_ES`), which Home Assistant groups voices by; `fallback` for a voice that
    /// declares none.
    pub fn of(voice: &crate::engine::Voice, fallback: &str) -> WyomingVoice {
        WyomingVoice {
            name: voice.id.clone(),
            description: voice.description.clone(),
            languages: vec![voice.language.as_deref().unwrap_or(fallback).replace('-', "_")],
            speakers: voice.speakers.clone(),
        }
    }
}

/// How the server describes itself and what it allows; shared by the connections of a listener.
#[derive(Clone, Debug)]
pub struct WyomingOptions {
    /// The `tts` program's name in `info`.
    pub program_name: String,
    /// The program's description.
    pub program_description: String,
    /// The program's version.
    pub program_version: String,
    /// The voices `info` lists. Empty: each of the engine's voices (or, for an engine that
    /// takes any name, its first model name) with `fallback_language`.
    pub voices: Vec<WyomingVoice>,
    /// The language of voices listed without one.
    pub fallback_language: String,
    /// Event size limits.
    pub frame: FrameLimits,
    /// Most characters of text in one event.
    pub max_text_chars: usize,
    /// Most characters waiting to be spoken (queued requests, and streamed text not yet split
    /// off), each request counted with [`QUEUED_REQUEST_OVERHEAD`] more.
    pub max_queued_chars: usize,
    /// How long a connection may stay without an event while nothing is being spoken.
    pub idle_timeout: Duration,
}

impl Default for WyomingOptions {
    fn default() -> Self {
        WyomingOptions {
            program_name: "speechstream".to_owned(),
            program_description: "speechstream streaming text to speech".to_owned(),
            program_version: env!("CARGO_PKG_VERSION").to_owned(),
            voices: Vec::new(),
            fallback_language: "en".to_owned(),
            frame: FrameLimits::default(),
            max_text_chars: 131_072,
            max_queued_chars: 1 << 20,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

/// One thing the session wants done, from [`WyomingSession::poll_output`]; carry them out in order.
// Taken one at a time from a queue: boxing the request would cost an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Bytes of one whole event to write.
    Write(Vec<u8>),
    /// Something for the engine to do.
    Engine(EngineCommand),
    /// An event type the server does not serve was dropped (for the log).
    Dropped(String),
    /// The engine request `id` is over: finished, failed, or aborted (then right after its
    /// `Abort`). Exactly one follows every `Synthesize`; for the owner's in-flight bookkeeping.
    RequestEnded {
        /// The request.
        id: RequestId,
        /// How it ended.
        end: RequestEnd,
    },
    /// End the connection, after the `error` event with this code (one of [`codes`]) and text.
    Close {
        /// Who was at fault, as the error event's `code`.
        code: &'static str,
        /// The error event's text, for the log.
        error: String,
    },
}

/// Error codes of the `error` events sent.
pub mod codes {
    /// The codes that mean the client sent something wrong (the rest are the server's, or time's).
    pub const CLIENT_FAULTS: [&str; 4] = [BAD_EVENT, BAD_REQUEST, UNKNOWN_VOICE, TOO_MUCH_TEXT];
    /// The bytes are not Wyoming events (bad header, bad data, a length past its limit).
    pub const BAD_EVENT: &str = "bad-event";
    /// A request that is not valid (no text, text too long, out of order).
    pub const BAD_REQUEST: &str = "bad-request";
    /// A voice this server does not have.
    pub const UNKNOWN_VOICE: &str = "unknown-voice";
    /// More text waiting than the server holds for one connection.
    pub const TOO_MUCH_TEXT: &str = "too-much-text";
    /// The engine failed the request.
    pub const SYNTHESIS_FAILED: &str = "synthesis-failed";
    /// No event within the idle timeout.
    pub const TIMEOUT: &str = "timeout";
    /// The server is going away.
    pub const SHUTDOWN: &str = "shutdown";
    /// The server is at capacity; the connection was refused.
    pub const BUSY: &str = "busy";
}

/// The bytes of an `error` event: for a transport that refuses a connection before any session.
pub fn error_event(code: &str, text: &str) -> Vec<u8> {
    let data = serde_json::to_vec(&json!({ "text": text, "code": code })).unwrap_or_default();
    frame::encode("error", &data, &[])
}

/// An answer waiting its turn, in request order.
enum Work {
    Info,
    Pong(Value),
    /// One engine request; `text` empty for a request with nothing to say (start and stop only).
    /// `whole`: a `synthesize` outside a stream, whose whole audio the client waits for (Home
    /// Assistant's path without streaming collects it before playing): computed unpaced, as an
    /// HTTP request for a whole file is, not held to its playback.
    Speak {
        text: String,
        voice: Chosen,
        whole: bool,
    },
    /// The end of a stream: `synthesize-stopped`.
    Stopped,
}

impl Work {
    fn cost(&self) -> usize {
        QUEUED_REQUEST_OVERHEAD
            + match self {
                Work::Speak { text, .. } => text.chars().count(),
                _ => 0,
            }
    }
}

struct Stream {
    voice: Chosen,
    splitter: Splitter,
}

/// The voice an event asks for (`None`: the default) and which of its speakers.
#[derive(Clone, Debug, Default)]
struct Chosen {
    name: Option<String>,
    speaker: Option<String>,
}

struct Generation {
    id: RequestId,
    /// The rate announced in `audio-start`, once the first audio came.
    rate: Option<u32>,
    /// The rate of the engine that speaks it, announced if no audio comes.
    native: u32,
}

#[derive(Serialize)]
struct AudioFormat {
    rate: u32,
    width: u32,
    channels: u32,
    timestamp: Option<u64>,
}

/// One Wyoming connection serving text to speech.
///
/// # Call contract
///
/// Like [`Session`](crate::session::Session): no I/O, no clock. The owner feeds it
/// [`handle_bytes`](Self::handle_bytes) (whatever the socket gave, in any split),
/// [`handle_closed`](Self::handle_closed) (the peer went away or a write failed),
/// [`handle_engine`](Self::handle_engine) (events of the requests it asked for; an `Err` is an
/// event of a request no longer its own, to ignore), [`handle_timeout`](Self::handle_timeout)
/// (at [`poll_timeout`](Self::poll_timeout)'s deadline) and
/// [`handle_shutdown`](Self::handle_shutdown). After each it drains
/// [`poll_output`](Self::poll_output) in order: bytes to write (awaiting each write is the
/// backpressure), engine commands to execute, the end of each engine request
/// (`RequestEnded`, for the owner's in-flight bookkeeping), drops to log, and `Close`, always
/// last. The socket is read all the time: streamed text arrives while audio is being made, and
/// the session bounds what it holds.
///
/// Invariants (property-tested): answers come in request order (`info` per `describe`, `pong`
/// per `ping`, one `audio-start`..`audio-stop` per `synthesize`, per-sentence cycles then one
/// `synthesize-stopped` per stream); an `audio-start` is followed by its `audio-stop`, or by an
/// `error` and the close; nothing follows `Close`; every `Synthesize` is answered by the engine
/// or followed by an `Abort`, and then by exactly one `RequestEnded`.
pub struct WyomingSession {
    connection: u64,
    catalog: Catalog,
    options: Arc<WyomingOptions>,
    decoder: frame::Decoder,
    stream: Option<Stream>,
    queue: VecDeque<Work>,
    queued: usize,
    generation: Option<Generation>,
    next_request: u64,
    outputs: VecDeque<Output>,
    deadline: Instant,
    closed: bool,
}

impl WyomingSession {
    /// A session for a connection that opened at `now`; `connection` goes into every
    /// [`RequestId`], so give each connection of an engine its own. Voices are resolved
    /// through `catalog` by the rules every protocol shares (any case, the server's aliases).
    pub fn new(
        now: Instant,
        connection: u64,
        catalog: impl Into<Catalog>,
        options: Arc<WyomingOptions>,
    ) -> WyomingSession {
        let deadline = now + options.idle_timeout;
        WyomingSession {
            connection,
            catalog: catalog.into(),
            options,
            decoder: frame::Decoder::default(),
            stream: None,
            queue: VecDeque::new(),
            queued: 0,
            generation: None,
            next_request: 0,
            outputs: VecDeque::new(),
            deadline,
            closed: false,
        }
    }

    /// Feed bytes from the client.
    pub fn handle_bytes(&mut self, now: Instant, bytes: &[u8]) {
        if self.closed {
            return;
        }
        self.decoder.push(bytes);
        loop {
            match self.decoder.next_event(&self.options.frame) {
                Ok(Some(event)) => {
                    self.deadline = now + self.options.idle_timeout;
                    self.handle_event(event);
                    if self.closed {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => return self.fail(codes::BAD_EVENT, &e.to_string()),
            }
        }
        self.pump();
    }

    /// The peer is gone (or a write to it failed): the request in flight is aborted, nothing
    /// more is sent.
    pub fn handle_closed(&mut self, _now: Instant) {
        if self.closed {
            return;
        }
        if let Some(generation) = self.generation.take() {
            self.abort(generation.id);
        }
        self.queue.clear();
        self.closed = true;
    }

    /// Feed an event of a request this session asked for.
    ///
    /// # Errors
    ///
    /// [`UnknownRequest`] when the request is not (or no longer) in flight here; the session
    /// is unchanged.
    pub fn handle_engine(&mut self, _now: Instant, event: EngineEvent) -> Result<(), UnknownRequest> {
        let Some(generation) = self.generation.as_mut().filter(|g| g.id == event.id) else {
            return Err(UnknownRequest(event.id));
        };
        match event.kind {
            EngineEventKind::Audio { pcm, sample_rate } => {
                if sample_rate == 0 || generation.rate.is_some_and(|rate| rate != sample_rate) {
                    let id = generation.id;
                    self.abort(id);
                    self.generation = None;
                    let message = format!("the engine's sample rate changed to {sample_rate} Hz");
                    self.fail(codes::SYNTHESIS_FAILED, &message);
                    return Ok(());
                }
                if generation.rate.is_none() {
                    generation.rate = Some(sample_rate);
                    self.write_audio("audio-start", sample_rate, &[]);
                }
                if !pcm.is_empty() {
                    self.write_audio("audio-chunk", sample_rate, &pcm);
                }
            }
            EngineEventKind::Finished => {
                self.outputs.push_back(Output::RequestEnded { id: event.id, end: RequestEnd::Finished });
                if generation.rate.is_none() {
                    let rate = generation.native;
                    self.write_audio("audio-start", rate, &[]);
                }
                self.generation = None;
                self.write("audio-stop", &json!({ "timestamp": null }));
                self.pump();
            }
            EngineEventKind::Failed(message) => {
                let end = RequestEnd::Failed(message.to_string());
                self.outputs.push_back(Output::RequestEnded { id: event.id, end });
                self.generation = None;
                self.fail(codes::SYNTHESIS_FAILED, &format!("synthesis failed: {message}"));
            }
            EngineEventKind::Words(_) | EngineEventKind::Codec { .. } => {}
        }
        Ok(())
    }

    /// Tell the session the time is `now`, at or after [`poll_timeout`](Self::poll_timeout)'s
    /// deadline; early calls do nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed || self.busy() || now < self.deadline {
            return;
        }
        let seconds = self.options.idle_timeout.as_secs_f64();
        self.fail(codes::TIMEOUT, &format!("idle timeout: no event in {seconds} s"));
    }

    /// The server is going away: the request in flight is aborted, the client told why, the
    /// connection closed.
    pub fn handle_shutdown(&mut self, _now: Instant) {
        if self.closed {
            return;
        }
        if let Some(generation) = self.generation.take() {
            self.abort(generation.id);
        }
        self.fail(codes::SHUTDOWN, crate::session::SHUTDOWN_MESSAGE);
    }

    /// The next thing to do, in order; `None` once everything queued has been taken.
    #[must_use = "an output is work the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout): `None` while something is being
    /// spoken or waits its turn, and once closed.
    #[must_use = "the deadline is when to call `handle_timeout`"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!self.closed && !self.busy()).then_some(self.deadline)
    }

    /// Something is being spoken or waits its turn.
    pub fn busy(&self) -> bool {
        self.generation.is_some() || !self.queue.is_empty()
    }

    /// The session has ended; drain [`poll_output`](Self::poll_output) once more, then drop it.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Client bytes held that are not yet a whole event (at most the frame limits).
    pub fn buffered_bytes(&self) -> usize {
        self.decoder.buffered()
    }

    /// The `info` event's data.
    pub fn info(&self) -> Value {
        let voices: Vec<Value> = self.voices().iter().map(|voice| voice_json(voice, &self.options)).collect();
        let options = &self.options;
        json!({
            "asr": [], "handle": [], "intent": [], "wake": [], "mic": [], "snd": [],
            "tts": [{
                "name": options.program_name,
                "attribution": { "name": "speechstream", "url": ATTRIBUTION_URL },
                "installed": true,
                "description": options.program_description,
                "version": options.program_version,
                "voices": voices,
                "supports_synthesize_streaming": true,
            }],
        })
    }

    fn voices(&self) -> Vec<WyomingVoice> {
        if !self.options.voices.is_empty() {
            return self.options.voices.clone();
        }
        let capabilities = self.catalog.capabilities();
        let fallback = &self.options.fallback_language;
        if capabilities.voices.is_empty() {
            let names = capabilities.models.iter().take(1).cloned();
            return names
                .map(|name| WyomingVoice {
                    name,
                    description: None,
                    languages: vec![fallback.clone()],
                    speakers: Vec::new(),
                })
                .collect();
        }
        capabilities.voices.iter().map(|v| WyomingVoice::of(v, fallback)).collect()
    }

    fn handle_event(&mut self, event: RawEvent) {
        let RawEvent { kind, data, .. } = event;
        match kind.as_str() {
            "describe" => self.enqueue(Work::Info),
            "ping" => self.enqueue(Work::Pong(data.get("text").cloned().unwrap_or(Value::Null))),
            "synthesize" if self.stream.is_some() => {}
            "synthesize" => {
                let Some(text) = self.text_of(&kind, &data) else { return };
                let text = py_strip(&text).to_owned();
                if text.is_empty() {
                    return self.fail(codes::BAD_REQUEST, "synthesize needs a text that is not empty");
                }
                let Ok(voice) = self.voice_of(&data) else { return };
                self.enqueue(Work::Speak { text, voice, whole: true });
            }
            "synthesize-start" => {
                if self.stream.is_some() {
                    return self
                        .fail(codes::BAD_REQUEST, "synthesize-start inside a stream: send synthesize-stop first");
                }
                let Ok(voice) = self.voice_of(&data) else { return };
                self.stream = Some(Stream { voice, splitter: Splitter::new(Granularity::Sentence) });
            }
            "synthesize-chunk" => {
                let Some(text) = self.text_of(&kind, &data) else { return };
                let Some(stream) = self.stream.as_mut() else {
                    return self
                        .fail(codes::BAD_REQUEST, "synthesize-chunk outside a stream: send synthesize-start first");
                };
                let voice = stream.voice.clone();
                for text in stream.splitter.feed(&text) {
                    self.enqueue(Work::Speak { text, voice: voice.clone(), whole: false });
                }
                self.check_queued();
            }
            "synthesize-stop" => {
                let Some(mut stream) = self.stream.take() else {
                    return self
                        .fail(codes::BAD_REQUEST, "synthesize-stop outside a stream: send synthesize-start first");
                };
                for text in stream.splitter.flush() {
                    self.enqueue(Work::Speak { text, voice: stream.voice.clone(), whole: false });
                }
                self.enqueue(Work::Stopped);
            }
            _ => self.outputs.push_back(Output::Dropped(kind)),
        }
    }

    /// The event's `text`, or the error and the close.
    fn text_of(&mut self, kind: &str, data: &Map<String, Value>) -> Option<String> {
        let Some(Value::String(text)) = data.get("text") else {
            self.fail(codes::BAD_REQUEST, &format!("{kind} needs a text string"));
            return None;
        };
        let limit = self.options.max_text_chars;
        if text.chars().count() > limit {
            self.fail(codes::BAD_REQUEST, &format!("{kind} text is longer than {limit} characters"));
            return None;
        }
        Some(text.clone())
    }

    /// The engine voice the event asks for, with its `speaker` (a multi-speaker voice's, by
    /// name or id, as wyoming-piper takes it; one the voice lacks is dropped, its first
    /// speaker speaking, as there), or the error and the close.
    fn voice_of(&mut self, data: &Map<String, Value>) -> Result<Chosen, ()> {
        let name = self.voice_name_of(data)?;
        let asked = data.get("voice").and_then(|v| v.get("speaker")).and_then(|s| match s {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
        // (a speaker without a voice's name is dropped: the default voice speaks)
        let voice = name.as_deref().and_then(|name| self.catalog.capabilities().voice(name));
        let speaker = asked.and_then(|asked| voice.and_then(|v| v.speaker(&asked)).map(str::to_owned));
        Ok(Chosen { name, speaker })
    }

    /// The engine voice the event asks for (`None`: the default), or the error and the close.
    /// A `language` no voice speaks is refused, with or without a name (it would change the
    /// audio's identity); alone, it picks the first voice that speaks it.
    fn voice_name_of(&mut self, data: &Map<String, Value>) -> Result<Option<String>, ()> {
        let voice = match data.get("voice") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(voice)) => voice,
            Some(_) => {
                self.fail(codes::BAD_REQUEST, "voice must be an object");
                return Err(());
            }
        };
        let language = match voice.get("language") {
            Some(Value::String(language)) if !language.trim().is_empty() => Some(language.trim()),
            None | Some(Value::Null) | Some(Value::String(_)) => None,
            Some(_) => {
                self.fail(codes::BAD_REQUEST, "voice.language must be a string");
                return Err(());
            }
        };
        let speaking = match language {
            Some(language) => match self.voice_speaking(language) {
                Some(voice) => Some(voice),
                None => {
                    let spoken: Vec<String> = self.voices().into_iter().flat_map(|v| v.languages).collect();
                    let text =
                        format!("no voice speaks language '{language}'; this server speaks: {}", spoken.join(", "));
                    self.fail(codes::UNKNOWN_VOICE, &text);
                    return Err(());
                }
            },
            None => None,
        };
        match voice.get("name") {
            Some(Value::String(name)) => {
                if let Ok(voice) = self.catalog.resolve_voice(Some(name)) {
                    return Ok(voice.map(str::to_owned));
                }
                let listed = self.voices().iter().map(|v| v.name.clone()).collect::<Vec<_>>().join(", ");
                self.fail(codes::UNKNOWN_VOICE, &format!("unknown voice '{name}'; this server has: {listed}"));
                Err(())
            }
            Some(Value::Null) | None => {
                // A language alone picks the first voice that speaks it, else the default.
                let capabilities = self.catalog.capabilities();
                Ok(speaking.and_then(|v| capabilities.voice(&v.name)).map(|v| v.id.clone()))
            }
            Some(_) => {
                self.fail(codes::BAD_REQUEST, "voice.name must be a string");
                Err(())
            }
        }
    }

    /// The first voice that speaks `language` (`en_GB`, `en-gb`: the same), else the first of
    /// its language without the region (`en-AU` gets an `en-US` voice); `None` if none does.
    fn voice_speaking(&self, language: &str) -> Option<WyomingVoice> {
        let normal = |code: &str| code.replace('_', "-").to_lowercase();
        let wanted = normal(language);
        let primary = |code: &str| code.split('-').next().unwrap_or_default().to_owned();
        let voices = self.voices();
        let exact = voices.iter().find(|v| v.languages.iter().any(|code| normal(code) == wanted));
        let near = || voices.iter().find(|v| v.languages.iter().any(|code| primary(&normal(code)) == primary(&wanted)));
        exact.or_else(near).cloned()
    }

    fn enqueue(&mut self, work: Work) {
        self.queued += work.cost();
        self.queue.push_back(work);
        self.check_queued();
    }

    /// Past `max_queued_chars` (queued requests and the stream's unsplit text): the error.
    fn check_queued(&mut self) {
        let limit = self.options.max_queued_chars;
        let unsplit = self.stream.as_ref().map_or(0, |s| s.splitter.buffered_chars());
        if self.queued + unsplit > limit && !self.closed {
            self.fail(codes::TOO_MUCH_TEXT, &format!("more than {limit} characters of text waiting to be spoken"));
        }
    }

    /// Start the next answers in order, up to the next engine request.
    fn pump(&mut self) {
        while self.generation.is_none() && !self.closed {
            let Some(work) = self.queue.pop_front() else { return };
            self.queued -= work.cost().min(self.queued);
            match work {
                Work::Info => {
                    let info = self.info();
                    self.write("info", &info);
                }
                Work::Pong(text) => self.write("pong", &json!({ "text": text })),
                Work::Stopped => self.write("synthesize-stopped", &Value::Object(Map::new())),
                Work::Speak { text, voice, .. } if text.is_empty() => {
                    let rate = self.catalog.capabilities().serving_names(voice.name.as_deref(), None).sample_rate;
                    self.write_audio("audio-start", rate, &[]);
                    self.write("audio-stop", &json!({ "timestamp": null }));
                }
                Work::Speak { text, voice, whole } => {
                    let id = RequestId { connection: self.connection, utterance: self.next_request };
                    self.next_request += 1;
                    let request = SynthesisRequest {
                        voice: voice.name,
                        speaker: voice.speaker,
                        stream: !whole,
                        ..SynthesisRequest::new(text)
                    };
                    let native = self.catalog.sample_rate_for(&request);
                    self.generation = Some(Generation { id, rate: None, native });
                    self.outputs.push_back(Output::Engine(EngineCommand::Synthesize { id, request }));
                }
            }
        }
    }

    fn write(&mut self, kind: &str, data: &Value) {
        let data = match data {
            Value::Object(map) if map.is_empty() => Vec::new(),
            data => serde_json::to_vec(data).unwrap_or_default(),
        };
        self.outputs.push_back(Output::Write(frame::encode(kind, &data, &[])));
    }

    fn write_audio(&mut self, kind: &str, rate: u32, pcm: &[u8]) {
        let format = AudioFormat { rate, width: SAMPLE_WIDTH, channels: 1, timestamp: None };
        let data = serde_json::to_vec(&format).unwrap_or_default();
        self.outputs.push_back(Output::Write(frame::encode(kind, &data, pcm)));
    }

    /// The client's error (or the server's): an `error` event, then the close.
    /// Stop engine request `id`: its `Abort`, then its end.
    fn abort(&mut self, id: RequestId) {
        self.outputs.push_back(Output::Engine(EngineCommand::Abort { id }));
        self.outputs.push_back(Output::RequestEnded { id, end: RequestEnd::Aborted });
    }

    fn fail(&mut self, code: &'static str, text: &str) {
        if self.closed {
            return;
        }
        if let Some(generation) = self.generation.take() {
            self.abort(generation.id);
        }
        self.outputs.push_back(Output::Write(error_event(code, text)));
        self.outputs.push_back(Output::Close { code, error: text.to_owned() });
        self.queue.clear();
        self.stream = None;
        self.closed = true;
    }
}

fn voice_json(voice: &WyomingVoice, options: &WyomingOptions) -> Value {
    json!({
        "name": voice.name,
        "attribution": { "name": options.program_name, "url": ATTRIBUTION_URL },
        "installed": true,
        "description": voice.description,
        "version": options.program_version,
        "languages": voice.languages,
        "speakers": if voice.speakers.is_empty() {
            Value::Null
        } else {
            voice.speakers.iter().map(|name| json!({ "name": name })).collect()
        },
    })
}

// The invariant checker the property tests and fuzzing share: a test harness, not API.
#[doc(hidden)]
pub mod check;
#[cfg(test)]
mod tests;
