//! The transition table: what a client frame does in each [`Phase`], and the one call each
//! (phase, message) pair maps to. The text messages go to the session's text-input mode
//! ([`TextInput`]), which decides what they mean there.

use std::sync::Arc;
use std::time::Instant;

use super::generation::Ending;
use super::input::{Flushed, TextInput};
use super::{Phase, Session, State, BINARY_FRAME_ERROR, CLOSE_NORMAL, DEFERRED_MESSAGE_OVERHEAD};
use crate::config::{validate_session_config, ResponseFormat};
use crate::json::{Object, Value};
use crate::messages::InputCancelled;
use crate::parse::Played;
use crate::parse::{parse_client_text, ClientMessage, ParseError};

/// A client frame held back during a generation. Text is held as it came and parsed again
/// when handled: its parsed form can be many times larger (a 4 MiB `session.config` of
/// numbers parses to over 100 MiB).
pub(super) enum Deferred {
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
pub(super) enum Incoming {
    Text(Result<ClientMessage, ParseError>),
    Binary,
}

/// What a client frame does; chosen by `Session::action` from the frame and the phase.
enum Action {
    /// Nothing (the session is closed, or draining).
    Ignore,
    /// Hold it until the utterance in flight has ended.
    Hold,
    /// Stop the utterance in flight: abort, end it marked `cancelled` (saying what was heard
    /// when the client said how much it played).
    Cancel(Result<Option<Played>, String>),
    /// Apply a `session.config` (refused while text is buffered).
    Configure(Object),
    /// Append to the utterance's buffer.
    Buffer(String),
    /// `input.done`: start the buffered utterance, or answer an empty one.
    Flush,
    /// `input.cancel` while idle: drop the buffer, say `input.cancelled`.
    ClearBuffer(Result<Option<Played>, String>),
    /// Close with 1000.
    Close,
    /// `input.commit`: the text so far becomes a fragment (in `sentence_commit` mode only).
    Commit(Object),
    /// An error; the session goes on.
    Report(String),
    /// An error that is fatal before the first valid config.
    Reject(String),
}

impl Session {
    /// The transition table: what a client frame does in each phase. Every rule about which
    /// message is taken when is here, and only here.
    fn action(phase: Phase, incoming: Incoming) -> Action {
        use ClientMessage as M;
        match (phase, incoming) {
            (Phase::Closed, _) => Action::Ignore,
            (Phase::Generating | Phase::Draining, Incoming::Text(Ok(M::InputCancel(played)))) => Action::Cancel(played),
            (Phase::Generating, _) => Action::Hold,
            (Phase::Draining, _) => Action::Ignore,
            (_, Incoming::Binary) => Action::Report(BINARY_FRAME_ERROR.to_owned()),
            (_, Incoming::Text(Err(e))) => Action::Reject(e.message().to_owned()),
            (_, Incoming::Text(Ok(M::SessionConfig(object)))) => Action::Configure(object),
            (Phase::AwaitingConfig, Incoming::Text(Ok(message))) => {
                let kind = match &message {
                    M::InputText(_) => "input.text",
                    M::InputDone => "input.done",
                    M::InputCancel(_) => "input.cancel",
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
                M::InputCancel(played) => Action::ClearBuffer(played),
                M::SessionClose => Action::Close,
                M::InputCommit(object) => Action::Commit(object),
                M::Other(kind) => Action::Report(format!("Unknown message type: {kind}")),
                M::SessionConfig(_) => unreachable!("matched above"),
            },
        }
    }

    /// Carry out what the table says a client frame does; `held` is the frame as it is kept
    /// when it has to wait (text as it came: its parsed form is gone by then).
    pub(super) fn handle_incoming(&mut self, now: Instant, incoming: Incoming, held: Deferred) {
        match Self::action(self.phase(), incoming) {
            Action::Ignore => return,
            Action::Hold => return self.defer(held),
            Action::Cancel(played) => return self.cancel_generation(now, played),
            Action::Configure(object) => self.configure(&object),
            Action::Buffer(text) => self.feed_text(now, text),
            Action::Flush => self.flush_text(now),
            Action::Commit(object) => self.commit_text(now, &object),
            Action::ClearBuffer(played) => self.clear_text(played),
            Action::Close => self.close(CLOSE_NORMAL),
            Action::Report(message) => self.send_error(&message, false),
            Action::Reject(message) => self.reject(&message),
        }
        // Every message (even a refused one) restarts the wait for the next.
        if matches!(self.phase(), Phase::AwaitingConfig | Phase::Idle) {
            self.rearm(now);
        }
    }

    /// `input.text`: to the text-input mode; then whatever units it completed, in turn.
    fn feed_text(&mut self, now: Instant, text: String) {
        self.input.feed(text, self.options.max_buffered_chars, &mut self.outputs);
        self.next_unit(now);
    }

    /// `input.done`: say the buffered utterance (or answer an empty one), or the rest of the
    /// units and then end the utterance.
    fn flush_text(&mut self, now: Instant) {
        match self.input.flush(&mut self.outputs) {
            Flushed::Empty => self.session_done(0),
            Flushed::Utterance(text) => self.start_utterance(now, &text, 0),
            Flushed::Units => self.next_unit(now),
        }
    }

    /// `input.commit`: the fragment it commits takes its turn.
    fn commit_text(&mut self, now: Instant, message: &Object) {
        self.input.commit(message, &mut self.outputs);
        self.next_unit(now);
    }

    /// `input.cancel` while idle: drop what is not yet said, say `input.cancelled` (with what
    /// was heard of the last utterance when the client said how much of it it played).
    fn clear_text(&mut self, played: Result<Option<Played>, String>) {
        self.input.cancel();
        let played = played.unwrap_or_else(|message| {
            self.send_error(&message, false);
            None
        });
        let heard = played.zip(self.spoken.as_ref()).map(|(played, spoken)| spoken.heard(played));
        let utterance_index = self.utterance_index;
        self.send_json(&InputCancelled { r#type: "input.cancelled", utterance_index, heard });
    }

    /// `input.cancel` while generating: the text not yet said goes (the utterance stays open
    /// in the modes that say units), and the generation ends marked `cancelled`.
    fn cancel_generation(&mut self, now: Instant, played: Result<Option<Played>, String>) {
        self.input.cancel();
        let played = played.unwrap_or_else(|message| {
            self.send_error(&message, false);
            None
        });
        self.end_generation(now, Ending::Cancelled(played));
    }

    /// `session.config`: refused while the text-input mode holds an utterance's text; else
    /// validated, and (once valid) in force with a fresh text-input mode of its choosing.
    fn configure(&mut self, object: &Object) {
        if let Some(message) = self.input.config_refusal() {
            return self.send_error(message, false);
        }
        let config = match validate_session_config(object) {
            Ok(config) => config,
            Err(details) => return self.reject(&format!("Invalid session config: {details}")),
        };
        if config.response_format == ResponseFormat::Aac {
            // Ours: refused up front on a machine without FFmpeg's libavcodec, saying what to install.
            if let Err(e) = crate::encode::aac_available() {
                return self.reject(&format!("Invalid session config: {}", e.0));
            }
        }
        if let Some(model) = config.model.as_deref().filter(|m| !m.is_empty()) {
            if !self.catalog.serves_model(model) {
                let inner = Value::Str(format!("The model `{model}` does not exist.")).py_repr();
                return self.reject(&format!(
                    "error=ErrorInfo(message={inner}, type='NotFoundError', param='model', code=404)"
                ));
            }
        }
        if config.commitment {
            let language = config.language.as_deref().map(str::to_lowercase);
            if !matches!(language.as_deref(), Some("chinese" | "english")) {
                // As before the modes were one enum: this refusal came after the splitter had
                // been replaced (by none: commitment allows no splitting), so a split session
                // went on buffering its text whole.
                if let TextInput::Split(_) = self.input {
                    self.input = TextInput::Buffered(Default::default());
                }
                return self.reject("text_input_mode='commitment' requires language='Chinese' or language='English'");
            }
        }
        // A fresh mode (a fresh splitter: upstream's rule) for every accepted config.
        self.input = TextInput::for_config(&config);
        self.config = Some(Arc::new(config));
        if let State::AwaitingConfig = self.state {
            self.state = State::Idle;
        }
    }

    /// Hold a frame that arrived during a generation, if it fits in `max_deferred_bytes`.
    pub(super) fn defer(&mut self, item: Deferred) {
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

    pub(super) fn clear_deferred(&mut self) {
        self.deferred.clear();
        self.deferred_bytes = 0;
    }

    /// Report a rejected message: fatal before the first valid config.
    pub(super) fn reject(&mut self, message: &str) {
        self.send_error(message, false);
        if self.config.is_none() {
            self.close(CLOSE_NORMAL);
        }
    }

    /// After a generation ends, handle the frames that arrived meanwhile, in order,
    /// until one starts the next generation.
    pub(super) fn resume(&mut self, now: Instant) {
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
}
