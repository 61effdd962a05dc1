//! The per-connection protocol state machine: [`Session`], what it is fed ([`ClientFrame`],
//! engine events, the time) and what it asks for ([`Output`]).
//!
//! The machine is split along its seams: the transition table (`table`: what each client
//! frame does in each phase), the text-input modes (`input`: how `input.text` becomes
//! utterances, one mode per session config), and generation (`generation`: an utterance as an
//! engine request, its frames and its ending). This module holds the public face.

mod edges;
mod generation;
mod heard;
mod input;
mod table;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::catalog::Catalog;
use crate::config::SessionConfig;
use crate::encode::{EncodeJob, Encoded};
use crate::engine::{EngineEvent, RequestId, SynthesisRequest};
use crate::messages::{ErrorMessage, SessionDone, StreamAudioDone, StreamSessionDone};
use crate::parse::{parse_client_text, Limits};

use generation::Generation;
use input::{Next, StreamSummary, TextInput};
use table::{Deferred, Incoming};

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
    /// The engine request `id` is over: the engine finished or failed it, or the session
    /// aborted it (then right after its [`EngineCommand::Abort`]). Exactly one follows every
    /// `Synthesize`; after it the session takes no event of that request. A driver keeps its
    /// in-flight bookkeeping by it (the utterance's last frames may still follow: a whole file
    /// is encoded after its request has finished).
    RequestEnded {
        /// The request.
        id: RequestId,
        /// How it ended.
        end: RequestEnd,
    },
    /// Send a close frame with this code and end the connection.
    Close(u16),
}

/// How an engine request ended, in [`Output::RequestEnded`] (and the Wyoming session's
/// [`Output::RequestEnded`](crate::wyoming::Output::RequestEnded)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestEnd {
    /// The engine finished it.
    Finished,
    /// The engine failed it, with this message.
    Failed(String),
    /// The session stopped it (the client cancelled, the peer left, a limit, the shutdown):
    /// an [`EngineCommand::Abort`] went out just before.
    Aborted,
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
/// events come back through `handle_engine`; `Abort` stops one), the end of each engine
/// request (`RequestEnded`: finished, failed or aborted; for the owner's in-flight
/// bookkeeping, so it need not read the events' kinds), encodings to run, and `Close(code)`,
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
/// one place, the session's transition table (`Session::action`, in the source). What its text
/// messages mean is up to the text-input mode each accepted `session.config` chooses, one per
/// session at a time: the reference's buffer (one request per `input.done`), upstream's
/// `split_granularity` units, a `streaming_mode` fragment stream, or `text_input_mode:
/// "commitment"` segments.
///
/// Invariants (property-tested): every `audio.start` is followed by exactly one
/// `audio.done` (and `codec.start` by one `codec.done`); each `input.done` gets exactly
/// one `session.done`, with consecutive `utterance_index`; `total_bytes` equals the audio
/// bytes sent; nothing follows `Close`; every `Synthesize` is answered by the engine
/// (`Finished`/`Failed`) or followed by an `Abort`, and then by exactly one `RequestEnded`.
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
    /// How `input.text` becomes utterances: the mode the config in force chose, with its text.
    input: TextInput,
    utterance_index: u64,
    /// The request id of the last generation (ids stay unique when an utterance has several).
    last_request: Option<u64>,
    /// The last streamed utterance (or unit), when it was sent whole: an `input.cancel` while
    /// idle may say how much of it the client played (its audio may still be playing).
    spoken: Option<generation::Spoken>,
    /// How the text of the utterance's last unit (a fragment or a split unit) ended: a
    /// streamed unit after one that ended mid-sentence starts without its leading silence.
    last_unit_end: Option<edges::TextEnd>,
    /// Client frames that arrived during a generation, handled after it in order, and
    /// what they cost against `max_deferred_bytes`.
    deferred: VecDeque<Deferred>,
    deferred_bytes: usize,
    outputs: Outputs,
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

/// The outputs queued for the driver, in order.
#[derive(Default)]
struct Outputs(VecDeque<Output>);

impl Outputs {
    fn push(&mut self, output: Output) {
        self.0.push_back(output);
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
            input: TextInput::Buffered(Default::default()),
            utterance_index: 0,
            last_request: None,
            spoken: None,
            last_unit_end: None,
            deferred: VecDeque::new(),
            deferred_bytes: 0,
            outputs: Outputs::default(),
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
        self.on_engine_event(now, event)
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
        self.on_encoded(now, id, encoded)
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
                self.stop_generation(now, SHUTDOWN_MESSAGE.to_owned());
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
    #[must_use = "an output is work the driver must carry out"]
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.0.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout), or `None` when no timer runs
    /// (an utterance is generating, or the session is closed). While draining, it is the end
    /// of the shutdown grace. It changes with every input: re-read it after each.
    #[must_use = "the deadline is when to call `handle_timeout`"]
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

    /// The peer is gone: stop its request, send nothing more.
    fn peer_gone(&mut self) {
        if let Some(generation) = self.generation_mut().filter(|g| g.engine_live()) {
            let id = generation.id;
            self.abort(id);
        }
        self.clear_deferred();
        self.input.drop_units();
        self.state = State::Closed;
    }

    /// In a mode that says units and with nothing generating: start the next unit; once none is
    /// left after `input.done`, end the utterance (`total_sentences`: the units started).
    fn next_unit(&mut self, now: Instant) {
        while self.phase() == Phase::Idle {
            match self.input.next_unit() {
                Next::Say { text, sentence } => self.start_utterance(now, &text, sentence),
                Next::Done(total) => return self.session_done(total),
                Next::StreamDone(stream) => return self.end_stream(stream),
                Next::Wait => return,
            }
        }
    }

    /// A fragment stream's end: its `audio.done` (if it started) and `session.done`; the next
    /// text starts a new stream with the same config.
    fn end_stream(&mut self, stream: StreamSummary) {
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
    }

    fn push(&mut self, output: Output) {
        self.outputs.push(output);
    }

    /// Stop engine request `id`: its `Abort`, then its end.
    fn abort(&mut self, id: RequestId) {
        self.push(Output::Engine(EngineCommand::Abort { id }));
        self.push(Output::RequestEnded { id, end: RequestEnd::Aborted });
    }

    fn send_json<T: Serialize>(&mut self, message: &T) {
        self.outputs.send_json(message);
    }

    fn send_error(&mut self, message: &str, partial_audio: bool) {
        self.outputs.send_error(message, partial_audio);
    }

    fn close(&mut self, code: u16) {
        self.push(Output::Close(code));
        self.state = State::Closed;
        self.clear_deferred();
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
}
