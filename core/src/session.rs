//! The per-connection protocol state machine: [`Session`], what it is fed ([`ClientFrame`],
//! engine events, the time) and what it asks for ([`Output`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::codec;
use crate::commitment::{Commitment, MAX_PENDING_CHARS};
use crate::config::{validate_session_config, OutputMode, ResponseFormat, SessionConfig, StreamingMode};
use crate::encode::{AudioStream, EncodeJob, Encoded, Paging, WholeAudio};
use crate::engine::{
    CodecFlags, EngineEvent, EngineEventKind, OutputKind, RequestId, SynthesisRequest, WordTiming, CODEC_UNSUPPORTED,
};
use crate::json::{Object, Value};
use crate::messages::{
    AudioChunk, AudioDone, AudioStart, AudioStartDeferred, CodecDone, CodecStart, ErrorMessage, InputCancelled,
    InputCommitted, SessionDone, StreamAudioDone, StreamSessionDone, StreamStart,
};
use crate::parse::{parse_client_text, ClientMessage, Limits, ParseError};
use crate::pydantic::{render, Validator};
use crate::split::{Granularity, Splitter};
use crate::text::py_strip;

/// Tunables of a session; defaults are the reference's.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Largest client messages, in characters.
    pub limits: Limits,
    /// How long a configured session may go without a client message (while no utterance is
    /// generating) before it is closed with `Idle timeout: no message received`.
    pub idle_timeout: Duration,
    /// How long after [`Session::new`] the first valid `session.config` may take.
    pub config_timeout: Duration,
    /// Most characters buffered for one utterance before `input.done`.
    pub max_buffered_chars: usize,
    /// Most bytes of client messages held back while an utterance is generating (each
    /// counted with [`DEFERRED_MESSAGE_OVERHEAD`]); a message that would go past it is
    /// refused with an error and dropped.
    pub max_deferred_bytes: usize,
    /// Longest non-streamed audio, in seconds: a whole file is held in memory until its
    /// utterance ends, so past it the utterance fails (streamed audio has no such limit).
    pub max_whole_audio_seconds: u32,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            limits: Limits::default(),
            idle_timeout: Duration::from_secs(30),
            config_timeout: Duration::from_secs(10),
            max_buffered_chars: 1 << 20,
            max_deferred_bytes: 8 << 20,
            max_whole_audio_seconds: 600,
        }
    }
}

/// A frame (or the end) of the client's side of the WebSocket.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientFrame {
    /// A whole text message (fragments already joined), valid UTF-8.
    Text(String),
    /// A whole binary message; the protocol has none, so it gets an error.
    Binary(Vec<u8>),
    /// The peer closed or vanished, or a write to it failed.
    Closed,
}

/// What the session asks of the engine; the driver carries it out with [`Engine::submit`] or
/// [`Engine::abort`](crate::engine::Engine::abort).
///
/// [`Engine::submit`]: crate::engine::Engine::submit
// One command per utterance, moved straight to the engine: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum EngineCommand {
    /// Start a request; its events go to [`Session::handle_engine`].
    Synthesize {
        /// The request's id, unique per session.
        id: RequestId,
        /// What to say and how.
        request: SynthesisRequest,
    },
    /// Stop a request: the session has already ended its utterance, and ignores (with
    /// [`UnknownRequest`]) whatever the engine still sends for it.
    Abort {
        /// The request to stop.
        id: RequestId,
    },
}

/// One thing the session wants done, from [`Session::poll_output`]; carry them out in order.
// As `EngineCommand`: one per utterance, moved straight on; boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A JSON text frame.
    Text(String),
    /// A binary frame (audio or codec frame).
    Binary(Vec<u8>),
    /// Something for the engine to do.
    Engine(EngineCommand),
    /// A whole file to encode (a non-streamed utterance's audio): run the job where it does
    /// not hold up other connections and hand the result to
    /// [`Session::handle_encoded`] before any other input.
    Encode {
        /// The utterance it is for.
        id: RequestId,
        /// The encoding to run.
        job: EncodeJob,
    },
    /// Send a close frame with this code and end the connection.
    Close(u16),
}

/// An engine event named a request this session does not have in flight: a bug in
/// the caller, not the client's fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownRequest(pub RequestId);

/// The error a binary client frame gets (the session goes on).
pub const BINARY_FRAME_ERROR: &str = "Binary frames are not supported; send JSON text frames";
/// What a held-back message costs beyond its bytes (its queue entry and allocation), so that
/// floods of tiny messages are bounded too.
pub const DEFERRED_MESSAGE_OVERHEAD: usize = 64;
const NOMINAL_SAMPLE_RATE: u32 = 24_000;
/// Why an utterance cut by the server's shutdown failed.
pub const SHUTDOWN_MESSAGE: &str = "the server is shutting down";
const CLOSE_NORMAL: u16 = 1000;
const CLOSE_GOING_AWAY: u16 = 1001;

/// One WebSocket connection speaking the streaming speech protocol.
///
/// # Call contract
///
/// The session does no I/O and reads no clock. Its owner (a driver: a transport, a test)
/// feeds it these inputs, each with the current time `now`:
///
/// - [`handle_client`](Self::handle_client): a text or binary frame from the peer, or
///   [`ClientFrame::Closed`] when the peer went away or a write to it failed;
/// - [`handle_engine`](Self::handle_engine): an event of an engine request this session
///   asked for; an `Err` means the request is no longer this session's (it was
///   aborted), which the owner may log and must otherwise ignore;
/// - [`handle_timeout`](Self::handle_timeout): when the deadline last returned by
///   [`poll_timeout`](Self::poll_timeout) has passed;
/// - [`handle_encoded`](Self::handle_encoded): the result of an [`Output::Encode`] job, which
///   the owner runs off its event loop (encoding mp3 or opus is real CPU work);
/// - [`begin_shutdown`](Self::begin_shutdown): when the server starts shutting down. The
///   session finishes the utterance in flight (within the grace it is given), then closes
///   with 1001; the owner keeps driving it as before until it has.
///
/// After every input the owner drains [`poll_output`](Self::poll_output) until it
/// returns `None`, in order: text and binary frames to write (awaiting each write is the
/// backpressure), engine commands to execute (`Synthesize` submits a request whose
/// events come back through `handle_engine`; `Abort` stops one), encodings to run, and `Close(code)`,
/// always the last output, after which the connection ends. It then re-reads
/// `poll_timeout`. While [`wants_client_input`](Self::wants_client_input) is false the
/// owner stops reading the socket. Once [`is_closed`](Self::is_closed) is true and the
/// outputs are drained, the session is finished and ignores further input.
///
/// # Lifecycle
///
/// A session is in one [`Phase`] at a time ([`phase`](Self::phase)): `AwaitingConfig` until
/// the first valid `session.config`, then `Idle` and `Generating` in turn (one utterance at a
/// time), `Draining` once the server shuts down while an utterance is generating, and
/// `Closed`, which it never leaves. What each client message does in each phase is decided in
/// one place, the session's transition table (`Session::action`, in the source).
///
/// Invariants (property-tested): every `audio.start` is followed by exactly one
/// `audio.done` (and `codec.start` by one `codec.done`); each `input.done` gets exactly
/// one `session.done`, with consecutive `utterance_index`; `total_bytes` equals the audio
/// bytes sent; nothing follows `Close`; every `Synthesize` is answered by the engine
/// (`Finished`/`Failed`) or followed by an `Abort`.
///
/// The [crate docs](crate) show the whole driver loop; the crate's `examples/` run it over
/// real sockets (blocking threads, and the `smol` runtime) and in memory with a fake clock.
/// The rules themselves are written down in the repository's `docs/protocol.md` (§b, §c).
pub struct Session {
    connection: u64,
    catalog: Catalog,
    options: Arc<SessionOptions>,
    /// In force once a valid `session.config` arrived (so from `Idle` on); sticky.
    config: Option<Arc<SessionConfig>>,
    state: State,
    /// Text of the utterance being buffered, and whether any `input.text` arrived
    /// (even an empty one blocks re-config, as in the reference).
    buffer: String,
    buffer_chars: usize,
    buffered: bool,
    utterance_index: u64,
    /// Upstream's `split_granularity` (sentence or clause; `None` for the reference's one
    /// request per `input.done`): the text not yet part of a unit.
    splitter: Option<Splitter>,
    /// With a splitter: the utterance's units not yet synthesized, how many were started
    /// (`sentence_index` of the next, `total_sentences` at the end), whether a non-empty
    /// `input.text` opened the utterance, and whether its `input.done` came.
    units: VecDeque<String>,
    units_started: u32,
    utterance_open: bool,
    flushing: bool,
    /// The request id of the last generation (ids stay unique when an utterance has several).
    last_request: Option<u64>,
    /// With a `streaming_mode` other than `sentence`: the session's one audio stream, its
    /// fragments synthesized one after another into it (the units above).
    stream: Option<FragmentStream>,
    /// `text_input_mode: "commitment"`: the segmenter, the utterance's characters so far, and
    /// whether the utterance failed (its later text is refused until `input.done`).
    commitment: Option<Commitment>,
    utterance_chars: usize,
    utterance_failed: bool,
    /// Client frames that arrived during a generation, handled after it in order, and
    /// what they cost against `max_deferred_bytes`.
    deferred: VecDeque<Deferred>,
    deferred_bytes: usize,
    outputs: VecDeque<Output>,
    /// When the wait for a client message times out (config or idle).
    deadline: Instant,
    config_deadline: Instant,
}

/// Where a session is in its life; see [`Session`]'s lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Waiting for the first valid `session.config` (until the config timeout).
    AwaitingConfig,
    /// Configured; buffering text, no utterance generating (the idle timer runs).
    Idle,
    /// An utterance is generating; client messages but `input.cancel` are held until it ends.
    Generating,
    /// The server is shutting down: the utterance in flight finishes (until the shutdown
    /// grace ends), then the session closes with 1001. No client message is taken but a cancel.
    Draining,
    /// Ended; nothing more comes out.
    Closed,
}

enum State {
    AwaitingConfig,
    Idle,
    Generating(Generation),
    Draining { generation: Generation, deadline: Instant },
    Closed,
}

/// A client frame held back during a generation. Text is held as it came and parsed again
/// when handled: its parsed form can be many times larger (a 4 MiB `session.config` of
/// numbers parses to over 100 MiB).
enum Deferred {
    Text(String),
    Binary,
}

impl Deferred {
    fn cost(&self) -> usize {
        DEFERRED_MESSAGE_OVERHEAD
            + match self {
                Deferred::Text(raw) => raw.len(),
                Deferred::Binary => 0,
            }
    }
}

/// A client frame about to be handled.
enum Incoming {
    Text(Result<ClientMessage, ParseError>),
    Binary,
}

/// What a client frame does; chosen by [`Session::action`] from the frame and the phase.
enum Action {
    /// Nothing (the session is closed, or draining).
    Ignore,
    /// Hold it until the utterance in flight has ended.
    Hold,
    /// Stop the utterance in flight: abort, end it marked `cancelled`.
    Cancel,
    /// Apply a `session.config` (refused while text is buffered).
    Configure(Object),
    /// Append to the utterance's buffer.
    Buffer(String),
    /// `input.done`: start the buffered utterance, or answer an empty one.
    Flush,
    /// `input.cancel` while idle: drop the buffer, say `input.cancelled`.
    ClearBuffer,
    /// Close with 1000.
    Close,
    /// `input.commit`: the text so far becomes a fragment (in `sentence_commit` mode only).
    Commit(Object),
    /// An error; the session goes on.
    Report(String),
    /// An error that is fatal before the first valid config.
    Reject(String),
}

/// Upstream's open-PR `streaming_mode` (`token_level`, `sentence_commit`): fragments of text
/// that make one audio stream (one `audio.start` ... `audio.done`), then `session.done`.
#[derive(Default)]
struct FragmentStream {
    commit: bool,
    /// `sentence_commit`: the text since the last commit, as sent.
    pending: String,
    /// Fragments so far (`input.committed.sentence_index`, `total_sentences`).
    fragments: u32,
    started: bool,
    total: u64,
    failed: bool,
    cancelled: bool,
}

/// The utterance being synthesized.
struct Generation {
    id: RequestId,
    /// Its utterance and its unit in it (`sentence_index`: 0 unless split).
    utterance: u64,
    sentence: u32,
    /// Upstream's framing: the streamed `audio.start` not yet sent (its text, format and
    /// word timestamps), which goes out with the first audio, or bare before the end.
    pending_start: Option<(String, &'static str, bool)>,
    /// Upstream's framing: `channels` on `audio.chunk`.
    channels: Option<u32>,
    /// The config's `sample_rate` (streamed audio is resampled to it, a whole file encoded
    /// at it), and the resampling stream (PCM) once the engine's rate is known.
    out_rate: Option<u32>,
    resampler: Option<AudioStream>,
    mode: Mode,
    /// Audio bytes (or codec frames) sent so far.
    total: u64,
    sample_rate: Option<u32>,
}

impl Generation {
    /// The engine request is still running (not yet answered; a file being encoded was).
    fn engine_live(&self) -> bool {
        !matches!(self.mode, Mode::Encoding)
    }
}

enum Mode {
    /// One encoded file at the end, of the audio collected here.
    Whole(WholeAudio),
    /// The engine has finished a whole file's audio; its encoding is out (`Output::Encode`).
    Encoding,
    /// Binary s16le frames as the engine produces them.
    Streamed,
    /// `audio.chunk` JSON frames, then a trailing chunk with the word timings.
    Words {
        chunk_id: u64,
        words: Vec<WordTiming>,
        any_words: bool,
    },
    Codec {
        codebooks: usize,
        seq: u64,
        eos_sent: bool,
    },
}

/// Milliseconds of s16le audio, as the reference computes them (Python float
/// arithmetic, then `round`, which ties to even).
fn pcm_ms(bytes: u64, sample_rate: u32) -> i64 {
    ((bytes as f64 / 2.0 / f64::from(sample_rate)) * 1000.0).round_ties_even() as i64
}

/// How a generation ends.
enum Ending {
    /// The engine finished the request.
    Finished,
    /// A whole file's encoding came back.
    Encoded(Encoded),
    /// The engine failed the request (or never had it: a refusal); nothing to abort.
    Failed(String),
    /// The session stops the request (bad engine output, a limit, the shutdown grace): abort,
    /// then end it as a failure.
    Stopped(String),
    /// The client cancelled: abort, then end it marked `cancelled`.
    Cancelled,
}

impl Session {
    /// A session for a connection that opened at `now`. `connection` goes into every
    /// [`RequestId`] the session makes, so that one engine can tell connections apart: give
    /// each connection its own. `catalog` is the engine's capabilities
    /// ([`Engine::capabilities`](crate::engine::Engine::capabilities)) under the server's names.
    ///
    /// Nothing is queued yet: the session waits for `session.config` until
    /// [`poll_timeout`](Self::poll_timeout).
    pub fn new(now: Instant, connection: u64, catalog: impl Into<Catalog>, options: Arc<SessionOptions>) -> Session {
        let config_deadline = now + options.config_timeout;
        Session {
            connection,
            catalog: catalog.into(),
            options,
            config: None,
            state: State::AwaitingConfig,
            buffer: String::new(),
            buffer_chars: 0,
            buffered: false,
            utterance_index: 0,
            splitter: None,
            units: VecDeque::new(),
            units_started: 0,
            utterance_open: false,
            flushing: false,
            last_request: None,
            stream: None,
            commitment: None,
            utterance_chars: 0,
            utterance_failed: false,
            deferred: VecDeque::new(),
            deferred_bytes: 0,
            outputs: VecDeque::new(),
            deadline: config_deadline,
            config_deadline,
        }
    }

    /// Feed a frame from the client (or [`ClientFrame::Closed`]). Frames that arrive while an
    /// utterance is generating are held and handled after it, in order, except
    /// `input.cancel`, which ends it at once.
    pub fn handle_client(&mut self, now: Instant, frame: ClientFrame) {
        match frame {
            ClientFrame::Closed => self.peer_gone(),
            ClientFrame::Text(raw) => {
                let parsed = parse_client_text(&raw, &self.options.limits);
                self.handle_incoming(now, Incoming::Text(parsed), Deferred::Text(raw));
            }
            ClientFrame::Binary(_) => self.handle_incoming(now, Incoming::Binary, Deferred::Binary),
        }
    }

    /// Feed an event of a request this session asked for.
    ///
    /// # Errors
    ///
    /// [`UnknownRequest`] when the request is not (or no longer) in flight here: an event that
    /// raced with an [`EngineCommand::Abort`], or a driver that mixed up its sessions. The
    /// session is unchanged; log it and go on.
    pub fn handle_engine(&mut self, now: Instant, event: EngineEvent) -> Result<(), UnknownRequest> {
        // While its file is encoding, the request has been answered: nothing more may come.
        let Some(generation) = self.generation_mut().filter(|g| g.id == event.id && g.engine_live()) else {
            return Err(UnknownRequest(event.id));
        };
        match event.kind {
            EngineEventKind::Audio { pcm, sample_rate } => {
                if let Some(previous) = generation.sample_rate.filter(|&r| r != sample_rate) {
                    let message =
                        format!("Audio sample rate changed during streaming: {previous} Hz to {sample_rate} Hz");
                    self.end_generation(now, Ending::Stopped(message));
                    return Ok(());
                }
                if sample_rate == 0 {
                    let message = "Engine reported a sample rate of 0 Hz".to_owned();
                    self.end_generation(now, Ending::Stopped(message));
                    return Ok(());
                }
                generation.sample_rate = Some(sample_rate);
                self.on_audio(now, pcm, sample_rate);
            }
            EngineEventKind::Words(words) => {
                if let Mode::Words { words: all, any_words, .. } = &mut generation.mode {
                    all.extend(words);
                    *any_words = true;
                }
            }
            EngineEventKind::Codec { codes, flags } => {
                if let Err(e) = self.on_codec(&codes, flags) {
                    self.end_generation(now, Ending::Stopped(e.to_string()));
                }
            }
            EngineEventKind::Finished => {
                if let Some(Mode::Whole(_)) = self.generation_mut().map(|g| &g.mode) {
                    self.start_encoding();
                    return Ok(());
                }
                self.end_generation(now, Ending::Finished);
            }
            EngineEventKind::Failed(failure) => self.end_generation(now, Ending::Failed(failure.to_string())),
        }
        Ok(())
    }

    /// Feed the result of the [`Output::Encode`] job for utterance `id`: the file goes out,
    /// then its `audio.done` and `session.done` (or, if it could not be encoded, the
    /// utterance fails).
    ///
    /// # Errors
    ///
    /// [`UnknownRequest`] when that utterance is no longer waiting for its file (it was
    /// cancelled, the peer left, the shutdown grace ended it); the result is dropped.
    pub fn handle_encoded(&mut self, now: Instant, id: RequestId, encoded: Encoded) -> Result<(), UnknownRequest> {
        match self.generation_mut() {
            Some(generation) if generation.id == id && !generation.engine_live() => {
                self.end_generation(now, Ending::Encoded(encoded));
                Ok(())
            }
            _ => Err(UnknownRequest(id)),
        }
    }

    /// Tell the session the time is `now`, at or after [`poll_timeout`](Self::poll_timeout)'s
    /// deadline: past the config or idle timeout it sends its error and closes; past the
    /// shutdown grace it ends the utterance in flight as a failure and closes with 1001. Early
    /// calls do nothing, so a driver whose timer fires early loses nothing.
    pub fn handle_timeout(&mut self, now: Instant) {
        match &self.state {
            State::AwaitingConfig if now >= self.deadline => {
                self.send_error("Timeout waiting for session.config", false);
                self.close(CLOSE_NORMAL);
            }
            State::Idle if now >= self.deadline => {
                self.send_error("Idle timeout: no message received", false);
                self.close(CLOSE_NORMAL);
            }
            State::Draining { deadline, .. } if now >= *deadline => {
                self.end_generation(now, Ending::Stopped(SHUTDOWN_MESSAGE.to_owned()));
            }
            _ => {}
        }
    }

    /// The server is shutting down: a session with no utterance generating closes with 1001 at
    /// once; one that is generating finishes that utterance, taking no new client message, and
    /// then closes with 1001. If it is still generating when `grace` has passed (the session's
    /// [`poll_timeout`](Self::poll_timeout) says when), the utterance is aborted and still ended
    /// properly (an error, its `audio.done`/`codec.done` marked `error`, `session.done`), then
    /// the session closes with 1001 (going away). A zero `grace` ends it now. Held client
    /// messages are dropped. Calls after the first do nothing.
    pub fn begin_shutdown(&mut self, now: Instant, grace: Duration) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Generating(generation) => {
                self.state = State::Draining { generation, deadline: now + grace };
                self.clear_deferred();
                self.handle_timeout(now);
            }
            State::AwaitingConfig | State::Idle => self.close(CLOSE_GOING_AWAY),
            state @ (State::Draining { .. } | State::Closed) => self.state = state,
        }
    }

    /// The next thing to do, in order; `None` once everything queued has been taken.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout), or `None` when no timer runs
    /// (an utterance is generating, or the session is closed). While draining, it is the end
    /// of the shutdown grace. It changes with every input: re-read it after each.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.state {
            State::AwaitingConfig | State::Idle => Some(self.deadline),
            State::Draining { deadline, .. } => Some(*deadline),
            State::Generating(_) | State::Closed => None,
        }
    }

    /// Where the session is in its life.
    pub fn phase(&self) -> Phase {
        match self.state {
            State::AwaitingConfig => Phase::AwaitingConfig,
            State::Idle => Phase::Idle,
            State::Generating(_) => Phase::Generating,
            State::Draining { .. } => Phase::Draining,
            State::Closed => Phase::Closed,
        }
    }

    /// The session has ended (after `Close`, or after [`ClientFrame::Closed`]); drain
    /// [`poll_output`](Self::poll_output) once more, then drop it.
    pub fn is_closed(&self) -> bool {
        self.phase() == Phase::Closed
    }

    /// False once the session has closed, and while it drains for the server's shutdown (it
    /// takes no new work then): the transport stops reading the socket. (Held-back messages
    /// are bounded in bytes by refusing what would not fit, rather than by pausing the reader,
    /// so an `input.cancel` always gets through.)
    pub fn wants_client_input(&self) -> bool {
        !matches!(self.phase(), Phase::Closed | Phase::Draining)
    }

    /// The configuration in force, once a valid `session.config` arrived.
    pub fn config(&self) -> Option<&SessionConfig> {
        self.config.as_deref()
    }

    /// The transition table: what a client frame does in each phase. Every rule about which
    /// message is taken when is here, and only here.
    fn action(phase: Phase, incoming: Incoming) -> Action {
        use ClientMessage as M;
        match (phase, incoming) {
            (Phase::Closed, _) => Action::Ignore,
            (Phase::Generating | Phase::Draining, Incoming::Text(Ok(M::InputCancel))) => Action::Cancel,
            (Phase::Generating, _) => Action::Hold,
            (Phase::Draining, _) => Action::Ignore,
            (_, Incoming::Binary) => Action::Report(BINARY_FRAME_ERROR.to_owned()),
            (_, Incoming::Text(Err(e))) => Action::Reject(e.message().to_owned()),
            (_, Incoming::Text(Ok(M::SessionConfig(object)))) => Action::Configure(object),
            (Phase::AwaitingConfig, Incoming::Text(Ok(message))) => {
                let kind = match &message {
                    M::InputText(_) => "input.text",
                    M::InputDone => "input.done",
                    M::InputCancel => "input.cancel",
                    M::SessionClose => "session.close",
                    M::InputCommit(_) => "input.commit",
                    M::Other(kind) => kind.as_str(),
                    M::SessionConfig(_) => "session.config",
                };
                Action::Reject(format!("Expected session.config, got: {kind}"))
            }
            (Phase::Idle, Incoming::Text(Ok(message))) => match message {
                M::InputText(None) => Action::Report("input.text requires a string value".to_owned()),
                M::InputText(Some(text)) => Action::Buffer(text),
                M::InputDone => Action::Flush,
                M::InputCancel => Action::ClearBuffer,
                M::SessionClose => Action::Close,
                M::InputCommit(object) => Action::Commit(object),
                M::Other(kind) => Action::Report(format!("Unknown message type: {kind}")),
                M::SessionConfig(_) => unreachable!("matched above"),
            },
        }
    }

    /// Carry out what the table says a client frame does; `held` is the frame as it is kept
    /// when it has to wait (text as it came: its parsed form is gone by then).
    fn handle_incoming(&mut self, now: Instant, incoming: Incoming, held: Deferred) {
        match Self::action(self.phase(), incoming) {
            Action::Ignore => return,
            Action::Hold => return self.defer(held),
            Action::Cancel => {
                // With splitting, the units not yet synthesized go too (the utterance stays open).
                self.drop_pending_units();
                return self.end_generation(now, Ending::Cancelled);
            }
            Action::Configure(object) => self.configure(&object),
            Action::Buffer(text) if self.stream.is_some() => self.stream_text(now, text),
            Action::Buffer(text) if self.commitment.is_some() => self.commit_text(now, &text),
            Action::Buffer(text) if self.splitter.is_some() => self.split_text(now, &text),
            Action::Buffer(text) => self.buffer_text(text),
            Action::Flush if self.stream.is_some() => {
                if self.stream.as_ref().is_some_and(|s| s.commit && !py_strip(&s.pending).is_empty()) {
                    self.commit_fragment(None);
                }
                self.flushing = true;
                self.next_unit(now);
            }
            Action::Commit(object) if self.stream.as_ref().is_some_and(|s| s.commit) => match commit_id(&object) {
                Ok(id) if self.stream.as_ref().is_some_and(|s| !py_strip(&s.pending).is_empty()) => {
                    self.commit_fragment(id.as_deref());
                    self.next_unit(now);
                }
                Ok(_) => self.send_error("input.commit requires buffered text", false),
                Err(message) => self.send_error(&message, false),
            },
            Action::Commit(_) => self.send_error("Unknown message type: input.commit", false),
            Action::Flush if self.commitment.is_some() => {
                let rest = self.commitment.as_mut().map(Commitment::finish).unwrap_or_default();
                if !self.utterance_failed {
                    self.units.extend(rest);
                }
                self.flushing = true;
                self.next_unit(now);
            }
            Action::Flush if self.splitter.is_some() => {
                let rest = self.splitter.as_mut().map(Splitter::flush).unwrap_or_default();
                self.units.extend(rest);
                self.flushing = true;
                self.next_unit(now);
            }
            Action::Flush => {
                let buffer = std::mem::take(&mut self.buffer);
                self.buffer_chars = 0;
                self.buffered = false;
                let text = py_strip(&buffer);
                if text.is_empty() {
                    self.session_done(0);
                } else {
                    self.start_utterance(now, text, 0);
                }
            }
            Action::ClearBuffer => {
                self.drop_pending_units();
                self.buffer.clear();
                self.buffer_chars = 0;
                self.buffered = false;
                let utterance_index = self.utterance_index;
                self.send_json(&InputCancelled { r#type: "input.cancelled", utterance_index });
            }
            Action::Close => self.close(CLOSE_NORMAL),
            Action::Report(message) => self.send_error(&message, false),
            Action::Reject(message) => self.reject(&message),
        }
        // Every message (even a refused one) restarts the wait for the next.
        if matches!(self.phase(), Phase::AwaitingConfig | Phase::Idle) {
            self.rearm(now);
        }
    }

    /// The peer is gone: stop its request, send nothing more.
    fn peer_gone(&mut self) {
        if let Some(generation) = self.generation_mut().filter(|g| g.engine_live()) {
            let id = generation.id;
            self.push(Output::Engine(EngineCommand::Abort { id }));
        }
        self.clear_deferred();
        self.units.clear();
        self.state = State::Closed;
    }

    fn configure(&mut self, object: &Object) {
        if self.commitment.is_some() && self.utterance_open {
            let message = "session.config cannot be applied while an utterance is active; wait for session.done first";
            return self.send_error(message, false);
        }
        if self.in_units() && self.utterance_open {
            let message = "session.config cannot be applied while an utterance is in progress; send input.done first";
            return self.send_error(message, false);
        }
        if self.buffered {
            let message = "session.config cannot be applied while input is buffered; send input.done first";
            return self.send_error(message, false);
        }
        let config = match validate_session_config(object) {
            Ok(config) => config,
            Err(details) => return self.reject(&format!("Invalid session config: {details}")),
        };
        if let Some(model) = config.model.as_deref().filter(|m| !m.is_empty()) {
            if !self.catalog.serves_model(model) {
                let inner = Value::Str(format!("The model `{model}` does not exist.")).py_repr();
                return self.reject(&format!(
                    "error=ErrorInfo(message={inner}, type='NotFoundError', param='model', code=404)"
                ));
            }
        }
        // A fresh splitter for every accepted config (upstream's rule).
        self.splitter = config.split_granularity.filter(|&g| g != Granularity::None).map(Splitter::new);
        if config.commitment {
            let language = config.language.as_deref().map(str::to_lowercase);
            if !matches!(language.as_deref(), Some("chinese" | "english")) {
                return self.reject("text_input_mode='commitment' requires language='Chinese' or language='English'");
            }
        }
        self.commitment = config.commitment.then(Commitment::new);
        self.stream = (config.streaming_mode != StreamingMode::Sentence).then(|| FragmentStream {
            commit: config.streaming_mode == StreamingMode::SentenceCommit,
            ..FragmentStream::default()
        });
        self.config = Some(Arc::new(config));
        if let State::AwaitingConfig = self.state {
            self.state = State::Idle;
        }
    }

    fn buffer_text(&mut self, text: String) {
        let chars = text.chars().count();
        let limit = self.options.max_buffered_chars;
        if self.buffer_chars + chars > limit {
            let message = format!("Buffered input exceeds {limit} characters; send input.done to flush it first");
            return self.send_error(&message, false);
        }
        self.buffer.push_str(&text);
        self.buffer_chars += chars;
        self.buffered = true;
    }

    /// `input.text` with a splitter: each unit it completes is synthesized in turn, before
    /// `input.done` (units of one utterance strictly one after another).
    fn split_text(&mut self, now: Instant, text: &str) {
        let Some(splitter) = self.splitter.as_mut() else { return };
        let chars = text.chars().count();
        let limit = self.options.max_buffered_chars;
        if splitter.buffered_chars() + chars > limit {
            let message = format!("Buffered input exceeds {limit} characters; send input.done to flush it first");
            return self.send_error(&message, false);
        }
        if !text.is_empty() {
            self.utterance_open = true;
        }
        let units = splitter.feed(text);
        self.units.extend(units);
        self.next_unit(now);
    }

    /// With a splitter and nothing generating: start the next unit; once none is left after
    /// `input.done`, end the utterance (`total_sentences`: the units started).
    fn next_unit(&mut self, now: Instant) {
        while self.in_units() && self.phase() == Phase::Idle {
            if let Some(unit) = self.units.pop_front() {
                let sentence = self.units_started;
                self.units_started += 1;
                // A fragment may be only whitespace: it counts, but there is nothing to say.
                // Committed segments are said (and shown) as they came, unstripped.
                if !py_strip(&unit).is_empty() {
                    let text = if self.commitment.is_some() { unit.as_str() } else { py_strip(&unit) };
                    self.start_utterance(now, text, sentence);
                }
                continue;
            }
            if self.flushing {
                let total = self.units_started;
                self.flushing = false;
                self.utterance_open = false;
                self.units_started = 0;
                self.utterance_chars = 0;
                self.utterance_failed = false;
                match self.stream.take() {
                    Some(stream) => self.end_stream(stream),
                    None => self.session_done(total),
                }
            }
            break;
        }
    }

    /// Units (split sentences or stream fragments) rather than one request per utterance.
    fn in_units(&self) -> bool {
        self.splitter.is_some() || self.stream.is_some() || self.commitment.is_some()
    }

    /// `input.text` in commitment mode: each segment it completes is synthesized in turn. Past
    /// the utterance's limit (or the segmenter's) the utterance fails: its later text is
    /// refused until `input.done`.
    fn commit_text(&mut self, now: Instant, text: &str) {
        if self.utterance_failed {
            return self.send_error("input.text rejected: the current utterance has failed; send input.done", false);
        }
        let limit = self.options.max_buffered_chars;
        self.utterance_chars += text.chars().count();
        let Some(commitment) = self.commitment.as_mut() else { return };
        if !text.is_empty() {
            self.utterance_open = true;
        }
        let segments = commitment.feed(text);
        let failure = if self.utterance_chars > limit {
            Some(format!("Commitment utterance exceeds {limit} characters"))
        } else if commitment.pending_chars() > MAX_PENDING_CHARS {
            Some(format!("unresolved streaming text suffix exceeds max_pending_chars={MAX_PENDING_CHARS}"))
        } else {
            None
        };
        if let Some(message) = failure {
            self.fail_utterance();
            return self.send_error(&message, false);
        }
        self.units.extend(segments);
        self.next_unit(now);
    }

    /// Commitment mode: the utterance has failed; what it had not yet said is dropped.
    fn fail_utterance(&mut self) {
        self.utterance_failed = true;
        self.units.clear();
        self.commitment = Some(Commitment::new());
    }

    /// `input.text` in a fragment stream: `token_level` makes each non-empty text a fragment,
    /// `sentence_commit` keeps it for the next commit.
    fn stream_text(&mut self, now: Instant, text: String) {
        let limit = self.options.max_buffered_chars;
        let Some(stream) = self.stream.as_mut() else { return };
        if text.is_empty() {
            return;
        }
        if stream.commit && stream.pending.chars().count() + text.chars().count() > limit {
            let message = format!("Buffered input exceeds {limit} characters; send input.done to flush it first");
            return self.send_error(&message, false);
        }
        self.utterance_open = true;
        if stream.commit {
            stream.pending.push_str(&text);
        } else {
            stream.fragments += 1;
            if stream.failed || stream.cancelled {
                return;
            }
            self.units.push_back(text);
            self.next_unit(now);
        }
    }

    /// The text since the last commit becomes a fragment: `input.committed`, then its turn.
    fn commit_fragment(&mut self, commit_id: Option<&str>) {
        let Some(stream) = self.stream.as_mut() else { return };
        let text = std::mem::take(&mut stream.pending);
        let sentence_index = stream.fragments;
        stream.fragments += 1;
        let skip = stream.failed || stream.cancelled;
        let chars_committed = text.chars().count();
        self.send_json(&InputCommitted { r#type: "input.committed", commit_id, sentence_index, chars_committed });
        if !skip {
            self.units.push_back(text);
        }
    }

    /// A fragment stream's end: its `audio.done` (if it started) and `session.done`; the next
    /// text starts a new stream with the same config.
    fn end_stream(&mut self, stream: FragmentStream) {
        if stream.started {
            self.send_json(&StreamAudioDone {
                r#type: "audio.done",
                sentence_index: 0,
                total_bytes: stream.total,
                error: stream.failed,
                cancelled: stream.cancelled.then_some(true),
            });
        }
        self.send_json(&StreamSessionDone { r#type: "session.done", total_sentences: stream.fragments });
        self.utterance_index += 1;
        self.stream = Some(FragmentStream { commit: stream.commit, ..FragmentStream::default() });
    }

    /// A cancel drops the text not yet synthesized: the splitter's (or the segmenter's)
    /// remainder, the stream's uncommitted text, and the units.
    fn drop_pending_units(&mut self) {
        if let Some(splitter) = self.splitter.as_mut() {
            *splitter = Splitter::new(splitter.granularity());
        }
        if let Some(stream) = self.stream.as_mut() {
            stream.pending.clear();
        }
        if let Some(commitment) = self.commitment.as_mut() {
            *commitment = Commitment::new();
        }
        self.units.clear();
    }

    fn generation_mut(&mut self) -> Option<&mut Generation> {
        match &mut self.state {
            State::Generating(generation) | State::Draining { generation, .. } => Some(generation),
            _ => None,
        }
    }

    fn push(&mut self, output: Output) {
        self.outputs.push_back(output);
    }

    fn send_json<T: Serialize>(&mut self, message: &T) {
        // Serialising these plain structs cannot fail.
        if let Ok(text) = serde_json::to_string(message) {
            self.push(Output::Text(text));
        }
    }

    fn send_error(&mut self, message: &str, partial_audio: bool) {
        self.send_json(&ErrorMessage {
            r#type: "error",
            message,
            partial_audio: partial_audio.then_some(true),
            action: partial_audio.then_some("discard"),
        });
    }

    fn close(&mut self, code: u16) {
        self.push(Output::Close(code));
        self.state = State::Closed;
        self.clear_deferred();
    }

    /// Hold a frame that arrived during a generation, if it fits in `max_deferred_bytes`.
    fn defer(&mut self, item: Deferred) {
        let cost = item.cost();
        let limit = self.options.max_deferred_bytes;
        if self.deferred_bytes.saturating_add(cost) > limit {
            let message = format!(
                "Held input exceeds {limit} bytes while an utterance is generating; message dropped, wait for \
                 session.done before sending more"
            );
            self.send_error(&message, false);
            return;
        }
        self.deferred_bytes += cost;
        self.deferred.push_back(item);
    }

    fn clear_deferred(&mut self) {
        self.deferred.clear();
        self.deferred_bytes = 0;
    }

    /// Report a rejected message: fatal before the first valid config.
    fn reject(&mut self, message: &str) {
        self.send_error(message, false);
        if self.config.is_none() {
            self.close(CLOSE_NORMAL);
        }
    }

    /// After a generation ends, handle the frames that arrived meanwhile, in order,
    /// until one starts the next generation.
    fn resume(&mut self, now: Instant) {
        while self.phase() == Phase::Idle {
            let Some(item) = self.deferred.pop_front() else { break };
            self.deferred_bytes -= item.cost();
            let incoming = match &item {
                Deferred::Text(raw) => Incoming::Text(parse_client_text(raw, &self.options.limits)),
                Deferred::Binary => Incoming::Binary,
            };
            self.handle_incoming(now, incoming, item);
        }
        self.rearm(now);
    }

    /// Waiting for the client again: the config deadline is fixed at accept, the idle
    /// timer restarts with every message and after every generation.
    fn rearm(&mut self, now: Instant) {
        self.deadline = if self.config.is_none() { self.config_deadline } else { now + self.options.idle_timeout };
    }

    fn session_done(&mut self, total_sentences: u32) {
        let utterance_index = self.utterance_index;
        self.send_json(&SessionDone { r#type: "session.done", utterance_index, total_sentences });
        self.utterance_index += 1;
    }

    /// An utterance that ends before reaching the engine: the error, then `session.done`
    /// (with one sentence, as the reference counts it). A split unit just fails: it counts,
    /// and the utterance goes on.
    fn refuse_utterance(&mut self, message: &str) {
        self.send_error(message, false);
        if !self.in_units() {
            self.session_done(1);
        }
    }

    fn start_utterance(&mut self, now: Instant, text: &str, sentence: u32) {
        let Some(config) = self.config.clone() else { return };
        let config = &*config;
        let u = self.utterance_index;
        let codec_tokens = config.output_mode == OutputMode::CodecTokens;
        if codec_tokens && self.catalog.capabilities().codec.is_none() {
            return self.refuse_utterance(CODEC_UNSUPPORTED);
        }
        if !codec_tokens && config.word_timestamps {
            if !self.catalog.capabilities().word_timestamps {
                return self.refuse_utterance(
                    "word_timestamps=true but the server was launched without --forced-aligner; either restart the server \
                     with that flag or set word_timestamps=false in session.config.",
                );
            }
            if !(config.stream_audio && config.response_format == ResponseFormat::Pcm) {
                return self.refuse_utterance(
                    "word_timestamps=true requires stream_audio=true and response_format='pcm' (timestamps ride the \
                     per-sentence PCM audio.chunk stream).",
                );
            }
        }
        let request = match build_request(config, text) {
            Ok(request) => request,
            Err(details) => return self.refuse_utterance(&format!("Invalid request for utterance {u}: {details}")),
        };
        // The utterance's index, unless an earlier unit of it took that id.
        let number = self.last_request.map_or(u, |last| u.max(last + 1));
        self.last_request = Some(number);
        let id = RequestId { connection: self.connection, utterance: number };
        let catalog = self.catalog.clone();
        let upstream = config.split_granularity.is_some();
        let mut pending_start = None;
        let mode = if let Some(spec) = catalog.serving(&request).codec.as_ref().filter(|_| codec_tokens) {
            let start = CodecStart {
                r#type: "codec.start",
                version: 1,
                utterance_index: u,
                sentence_index: sentence,
                sentence_text: text,
                model: config.model.as_deref(),
                codebooks: spec.codebooks,
                codebook_size: spec.codebook_size,
                frame_rate_hz: spec.frame_rate_hz,
                sample_rate: spec.sample_rate,
                decoder_id: spec.decoder_id.as_deref(),
                header_format: "<IHB",
            };
            let codebooks = spec.codebooks as usize;
            self.send_json(&start);
            Mode::Codec { codebooks, seq: 0, eos_sent: false }
        } else {
            let streamed_pcm = config.stream_audio && config.response_format == ResponseFormat::Pcm;
            // The rate of the engine that will speak (issue 31: engines may differ).
            let native = catalog.sample_rate_for(&request);
            let start = AudioStart {
                r#type: "audio.start",
                utterance_index: u,
                sentence_index: sentence,
                sentence_text: text,
                format: config.response_format.as_str(),
                sample_rate: streamed_pcm.then_some(config.sample_rate.unwrap_or(native)),
                word_timestamps: config.word_timestamps.then_some(true),
            };
            let mode = if config.word_timestamps {
                Mode::Words { chunk_id: 0, words: Vec::new(), any_words: false }
            } else if config.stream_audio {
                Mode::Streamed
            } else {
                Mode::Whole(WholeAudio::new(config.response_format, self.options.max_whole_audio_seconds))
            };
            if let Some(stream) = self.stream.as_mut() {
                // A fragment stream has one start, with its first fragment's text.
                if !stream.started {
                    stream.started = true;
                    let mut shown: String = text.chars().take(80).collect();
                    if text.chars().count() > 80 {
                        shown.push_str("...");
                    }
                    let sample_rate = config.sample_rate.unwrap_or(native);
                    let start = StreamStart {
                        r#type: "audio.start",
                        sentence_index: 0,
                        sentence_text: &shown,
                        format: "pcm",
                        sample_rate,
                    };
                    self.send_json(&start);
                }
            } else if upstream && streamed_pcm {
                pending_start = Some((text.to_owned(), start.format, config.word_timestamps));
            } else {
                self.send_json(&start);
            }
            mode
        };
        let channels = upstream.then_some(1);
        self.state = State::Generating(Generation {
            id,
            utterance: u,
            sentence,
            pending_start,
            channels,
            out_rate: config.sample_rate,
            resampler: None,
            mode,
            total: 0,
            sample_rate: None,
        });
        let mut request = request;
        // The engine gets its own voice name (an alias, the server's, the voice it stands for).
        match self.catalog.resolve(&mut request) {
            Ok(()) => self.push(Output::Engine(EngineCommand::Synthesize { id, request })),
            // What the engine cannot do fails as a generation error would, after the start
            // message (as the reference's adapter refuses it). The caller goes on with the
            // held messages: no `resume` here, which would nest one call per message.
            Err(refusal) => {
                let _ = now;
                self.close_generation(Ending::Failed(refusal));
            }
        }
    }

    fn on_audio(&mut self, now: Instant, pcm: Vec<u8>, sample_rate: u32) {
        let Some(generation) = self.generation_mut() else { return };
        let streamed = matches!(generation.mode, Mode::Streamed | Mode::Words { .. });
        let (pcm, sample_rate) = match streamed {
            true => match resampled(&mut generation.resampler, generation.out_rate, pcm, sample_rate) {
                Ok(converted) => converted,
                Err(message) => return self.end_generation(now, Ending::Stopped(message)),
            },
            false => (pcm, sample_rate),
        };
        self.send_pending_start(Some(sample_rate));
        let Some(generation) = self.generation_mut() else { return };
        let (u, sentence, channels) = (generation.utterance, generation.sentence, generation.channels);
        match &mut generation.mode {
            Mode::Whole(audio) => {
                if let Err(message) = audio.push(&pcm, sample_rate, "stream_audio=true") {
                    self.end_generation(now, Ending::Stopped(message));
                }
            }
            Mode::Encoding => {}
            Mode::Streamed => {
                if !pcm.is_empty() {
                    generation.total += pcm.len() as u64;
                    self.push(Output::Binary(pcm));
                }
            }
            Mode::Words { chunk_id, .. } => {
                let start = pcm_ms(generation.total, sample_rate);
                generation.total += pcm.len() as u64;
                let end = pcm_ms(generation.total, sample_rate);
                let id = *chunk_id;
                *chunk_id += 1;
                let audio_b64 = base64::engine::general_purpose::STANDARD.encode(&pcm);
                self.send_json(&AudioChunk {
                    r#type: "audio.chunk",
                    utterance_index: u,
                    sentence_index: sentence,
                    chunk_id: id,
                    chunk_start_ms: start,
                    chunk_end_ms: end,
                    sample_rate,
                    channels,
                    audio_b64: &audio_b64,
                    timestamps: None,
                });
            }
            Mode::Codec { .. } => {}
        }
    }

    /// Upstream's deferred `audio.start`, if it is still to be sent: with the audio's rate
    /// and one channel, or bare (`None`: no audio came).
    fn send_pending_start(&mut self, sample_rate: Option<u32>) {
        let Some(generation) = self.generation_mut() else { return };
        let Some((text, format, words)) = generation.pending_start.take() else { return };
        let (u, sentence) = (generation.utterance, generation.sentence);
        self.send_json(&AudioStartDeferred {
            r#type: "audio.start",
            utterance_index: u,
            sentence_index: sentence,
            sentence_text: &text,
            format,
            word_timestamps: words.then_some(true),
            sample_rate,
            channels: sample_rate.map(|_| 1),
        });
    }

    /// The engine finished a whole file's audio: hand its encoding to the driver.
    fn start_encoding(&mut self) {
        let default_rate = self.catalog.capabilities().sample_rate;
        let Some(generation) = self.generation_mut() else { return };
        let Mode::Whole(audio) = std::mem::replace(&mut generation.mode, Mode::Encoding) else { return };
        let rate = generation.sample_rate.unwrap_or(default_rate);
        let id = generation.id;
        let job = audio.finish(rate);
        let job = match generation.out_rate {
            Some(out) => job.at_rate(out),
            None => job,
        };
        self.push(Output::Encode { id, job });
    }

    fn on_codec(&mut self, codes: &[i32], flags: CodecFlags) -> Result<(), codec::CodecError> {
        let Some(generation) = self.generation_mut() else { return Ok(()) };
        let Mode::Codec { codebooks, seq, eos_sent } = &mut generation.mode else { return Ok(()) };
        let frame = codec::pack_frame(*seq, codes, *codebooks, flags.bits())?;
        generation.total += (codes.len() / *codebooks) as u64;
        *seq += 1;
        *eos_sent |= flags.eos;
        self.push(Output::Binary(frame));
        Ok(())
    }

    /// End the utterance in flight, the one way every ending goes (see `close_generation`);
    /// then what comes next: the held messages, or the 1001 of a drain.
    fn end_generation(&mut self, now: Instant, ending: Ending) {
        match self.close_generation(ending) {
            Some(true) => self.close(CLOSE_GOING_AWAY),
            Some(false) => {
                self.next_unit(now);
                self.resume(now);
            }
            None => {}
        }
    }

    /// Abort the engine request when the session stops it, then the utterance's final frames,
    /// `audio.done`/`codec.done` and `session.done`; the session is `Idle` after. Returns
    /// whether it was draining, or `None` when no utterance was in flight.
    fn close_generation(&mut self, ending: Ending) -> Option<bool> {
        self.send_pending_start(None);
        let (generation, draining) = match std::mem::replace(&mut self.state, State::Idle) {
            State::Generating(generation) => (generation, false),
            State::Draining { generation, .. } => (generation, true),
            state => {
                self.state = state;
                return None;
            }
        };
        let live = generation.engine_live();
        let Generation {
            id, utterance: u, sentence, mode, mut total, sample_rate, channels, resampler, out_rate, ..
        } = generation;
        // A finished stream's last resampled samples (the filter's tail).
        let tail = match (&ending, resampler) {
            // PCM has nothing to fail on.
            (Ending::Finished, Some(resampler)) => resampler.finish().unwrap_or_default(),
            _ => Vec::new(),
        };
        let sample_rate = out_rate.filter(|_| sample_rate.is_some()).or(sample_rate);
        // First, so a transport that can't write the rest in time has still stopped it.
        if live && matches!(ending, Ending::Stopped(_) | Ending::Cancelled) {
            self.push(Output::Engine(EngineCommand::Abort { id }));
        }
        let (failure, cancelled, file) = match ending {
            Ending::Finished => (None, false, None),
            Ending::Encoded(Encoded(Ok(file))) => (None, false, Some(file)),
            Ending::Encoded(Encoded(Err(message))) | Ending::Failed(message) | Ending::Stopped(message) => {
                (Some(message), false, None)
            }
            Ending::Cancelled => (None, true, None),
        };
        if let Some(stream) = self.stream.as_mut() {
            // One fragment of the session's stream: its audio counts toward the stream's
            // audio.done, sent at the end; a failure or a cancel ends what is left of it.
            stream.total += total;
            stream.cancelled |= cancelled;
            if let Some(message) = &failure {
                stream.failed = true;
                self.units.clear();
                self.send_error(&format!("Generation failed: {message}"), total > 0);
            }
            return Some(draining);
        }
        if failure.is_some() && self.commitment.is_some() {
            self.fail_utterance();
        }
        match mode {
            Mode::Codec { codebooks, mut seq, eos_sent } => {
                if let Some(message) = &failure {
                    self.send_error(&format!("Codec stream failed for utterance {u}: {message}"), total > 0);
                } else if !eos_sent {
                    if let Ok(frame) = codec::pack_frame(seq, &[], codebooks, codec::FLAG_EOS) {
                        self.push(Output::Binary(frame));
                        seq += 1;
                    }
                }
                self.send_json(&CodecDone {
                    r#type: "codec.done",
                    utterance_index: u,
                    sentence_index: sentence,
                    total_frames: total,
                    seq_last: seq as i64 - 1,
                    error: failure.is_some(),
                    cancelled,
                });
            }
            mode => {
                match mode {
                    Mode::Encoding => {
                        if let Some(file) = file {
                            total = file.len() as u64;
                            self.push(Output::Binary(file));
                        }
                    }
                    Mode::Streamed if !tail.is_empty() => {
                        total += tail.len() as u64;
                        self.push(Output::Binary(tail));
                    }
                    Mode::Words { mut chunk_id, words, any_words } if failure.is_none() => {
                        let rate = sample_rate.unwrap_or(NOMINAL_SAMPLE_RATE);
                        if !tail.is_empty() {
                            let start = pcm_ms(total, rate);
                            total += tail.len() as u64;
                            let audio_b64 = base64::engine::general_purpose::STANDARD.encode(&tail);
                            self.send_json(&AudioChunk {
                                r#type: "audio.chunk",
                                utterance_index: u,
                                sentence_index: sentence,
                                chunk_id,
                                chunk_start_ms: start,
                                chunk_end_ms: pcm_ms(total, rate),
                                sample_rate: rate,
                                channels,
                                audio_b64: &audio_b64,
                                timestamps: None,
                            });
                            chunk_id += 1;
                        }
                        let end = pcm_ms(total, rate);
                        // After a cancel, only the words that were (at least partly) heard.
                        let heard =
                            if cancelled { words.iter().take_while(|w| w.start_ms < end).count() } else { words.len() };
                        self.send_json(&AudioChunk {
                            r#type: "audio.chunk",
                            utterance_index: u,
                            sentence_index: sentence,
                            chunk_id,
                            chunk_start_ms: 0,
                            chunk_end_ms: end,
                            sample_rate: rate,
                            channels,
                            audio_b64: "",
                            timestamps: any_words.then_some(&words[..heard]),
                        });
                    }
                    _ => {}
                }
                if let Some(message) = &failure {
                    self.send_error(
                        &format!("Generation failed for utterance {u}, sentence {sentence}: {message}"),
                        total > 0,
                    );
                }
                self.send_json(&AudioDone {
                    r#type: "audio.done",
                    utterance_index: u,
                    sentence_index: sentence,
                    total_bytes: total,
                    error: failure.is_some(),
                    cancelled: cancelled.then_some(true),
                });
            }
        }
        if !self.in_units() {
            self.session_done(1);
        }
        Some(draining)
    }
}

/// `input.commit`'s `commit_id`: a string or null; else the error to send.
fn commit_id(message: &Object) -> Result<Option<String>, String> {
    let mut v = Validator { msg: message, errors: Vec::new() };
    let id = v.opt_str("commit_id");
    if v.errors.is_empty() {
        Ok(id)
    } else {
        Err(format!("Invalid input.commit: {}", render("InputCommitMessage", &v.errors)))
    }
}

/// Streamed audio at the config's rate: through the resampler (made with the first audio)
/// when the engine's differs.
fn resampled(
    resampler: &mut Option<AudioStream>,
    out_rate: Option<u32>,
    pcm: Vec<u8>,
    rate: u32,
) -> Result<(Vec<u8>, u32), String> {
    let Some(out) = out_rate.filter(|&out| out != rate) else { return Ok((pcm, rate)) };
    let stream = match resampler {
        Some(stream) => stream,
        None => resampler.insert(AudioStream::new(ResponseFormat::Pcm, rate, out, Paging::Eager).map_err(|e| e.0)?),
    };
    Ok((stream.push_s16le(&pcm, rate).map_err(|e| e.0)?, out))
}

/// The per-utterance request, with the checks the reference makes when it builds
/// its `OpenAICreateSpeechRequest` (which there kill the session; here they fail
/// only this utterance).
fn build_request(config: &SessionConfig, text: &str) -> Result<SynthesisRequest, String> {
    let seed = match &config.seed {
        None => None,
        Some(seed) => match seed.to_i64() {
            Some(seed) => Some(seed),
            None => {
                let bound = if seed.0.starts_with('-') {
                    "greater than or equal to -9223372036854775808"
                } else {
                    "less than or equal to 9223372036854775807"
                };
                return Err(format!("seed: Input should be {bound}"));
            }
        },
    };
    if let Some(embedding) = &config.speaker_embedding {
        if config.ref_audio.is_some() {
            return Err("'speaker_embedding' and 'ref_audio' are mutually exclusive".to_owned());
        }
        if embedding.iter().any(|v| !v.is_finite()) {
            return Err("'speaker_embedding' values must be finite (no NaN or Inf)".to_owned());
        }
    }
    let output = if config.output_mode == OutputMode::CodecTokens {
        OutputKind::CodecFrames
    } else if config.word_timestamps {
        OutputKind::AudioAndWords
    } else {
        OutputKind::Audio
    };
    Ok(SynthesisRequest {
        text: text.to_owned(),
        model: config.model.clone(),
        voice: config.voice.clone(),
        language: config.language.clone(),
        instructions: config.instructions.clone(),
        task_type: config.task_type,
        speed: config.speed.unwrap_or(1.0),
        seed,
        stream: config.stream_audio,
        output,
        max_new_tokens: config.max_new_tokens.and_then(|v| u64::try_from(v).ok()),
        initial_codec_chunk_frames: config.initial_codec_chunk_frames.and_then(|v| u64::try_from(v).ok()),
        ref_audio: config.ref_audio.iter().cloned().collect(),
        ref_text: config.ref_text.clone(),
        speaker_embedding: config.speaker_embedding.clone(),
        x_vector_only_mode: config.x_vector_only_mode.unwrap_or(false),
        non_streaming_mode: config.non_streaming_mode,
    })
}
