//! How `input.text` becomes speech: the text-input mode a `session.config` chooses, one of four,
//! each with its own state and its own answer to the client's text messages (feed, flush,
//! commit, cancel). The session holds exactly one ([`TextInput`]), so a combination the config
//! validation forbids (say, a splitter and a fragment stream at once) cannot be represented.
//!
//! The modes that cut an utterance into units (all but the reference's buffer) say them one at
//! a time: the session asks [`TextInput::next_unit`] whenever nothing is generating.

use std::collections::VecDeque;

use super::Outputs;
use crate::commitment::{Commitment, MAX_PENDING_CHARS};
use crate::config::{SessionConfig, StreamingMode};
use crate::json::Object;
use crate::messages::InputCommitted;
use crate::pydantic::{render, Validator};
use crate::split::{Granularity, Splitter};
use crate::text::py_strip;

/// The session's text-input mode, chosen by each accepted `session.config`.
pub(super) enum TextInput {
    /// The reference's: text buffered until `input.done`, then one request per utterance.
    Buffered(Buffered),
    /// Upstream's `split_granularity` (sentence or clause): each unit synthesized as soon as it
    /// is complete, one after another, before `input.done`.
    Split(Split),
    /// Upstream's open-PR `streaming_mode` (`token_level`, `sentence_commit`): fragments of text
    /// that make one audio stream (one `audio.start` ... `audio.done`), then `session.done`.
    Fragments(Fragments),
    /// Upstream's open-PR `text_input_mode: "commitment"`: segments committed at sentence ends
    /// as text arrives, said raw (not stripped).
    Committed(Committed),
}

/// The reference's buffer: the utterance's text, and whether any `input.text` arrived (even an
/// empty one blocks re-config, as in the reference).
#[derive(Default)]
pub(super) struct Buffered {
    text: String,
    chars: usize,
    any: bool,
}

/// What the modes that say an utterance in units share: the units not yet synthesized, how many
/// were started (`sentence_index` of the next, `total_sentences` at the end), whether a
/// non-empty `input.text` opened the utterance, and whether its `input.done` came.
#[derive(Default)]
pub(super) struct Units {
    queue: VecDeque<String>,
    started: u32,
    open: bool,
    flushing: bool,
}

/// `split_granularity`: the text not yet part of a unit.
pub(super) struct Split {
    splitter: Splitter,
    units: Units,
}

/// A fragment stream: the session's one audio stream, its fragments synthesized one after
/// another into it.
#[derive(Default)]
pub(super) struct Fragments {
    /// `sentence_commit` (else `token_level`).
    commit: bool,
    /// `sentence_commit`: the text since the last commit, as sent.
    pending: String,
    /// Fragments so far (`input.committed.sentence_index`, `total_sentences`).
    fragments: u32,
    started: bool,
    total: u64,
    failed: bool,
    cancelled: bool,
    units: Units,
}

/// Commitment: the segmenter, the utterance's characters so far, and whether the utterance
/// failed (its later text is refused until `input.done`).
#[derive(Default)]
pub(super) struct Committed {
    segmenter: Commitment,
    chars: usize,
    failed: bool,
    units: Units,
}

/// What `input.done` asks of the session.
pub(super) enum Flushed {
    /// The reference's: say this (stripped, non-empty) text as the utterance.
    Utterance(String),
    /// The reference's: nothing was buffered; answer with `session.done` alone.
    Empty,
    /// The units' turn: the session says what is left of them, then ends the utterance.
    Units,
}

/// What the session does next in a mode that says units.
pub(super) enum Next {
    /// Say this unit (`sentence_index` `sentence`).
    Say { text: String, sentence: u32 },
    /// The utterance is over: its `session.done` with this many sentences.
    Done(u32),
    /// A fragment stream is over: its `audio.done` (if it started) and `session.done`.
    StreamDone(StreamSummary),
    /// Nothing to do until more text, or `input.done`.
    Wait,
}

/// A finished fragment stream, for its closing frames.
pub(super) struct StreamSummary {
    pub(super) started: bool,
    pub(super) total: u64,
    pub(super) failed: bool,
    pub(super) cancelled: bool,
    pub(super) fragments: u32,
}

/// A fragment that ended (its generation did): what the session still sends for it.
pub(super) enum UnitEnded {
    /// A fragment of a stream: its audio counts toward the stream's `audio.done`, sent at the
    /// end; nothing more now (but the error of a failure).
    Fragment,
    /// A split unit or a committed segment: its own `audio.done`, and the utterance goes on.
    Unit,
    /// The reference's one request per utterance: its `audio.done`, then `session.done`.
    Utterance,
}

fn over_limit(limit: usize) -> String {
    format!("Buffered input exceeds {limit} characters; send input.done to flush it first")
}

impl Units {
    fn push(&mut self, units: impl IntoIterator<Item = String>) {
        self.queue.extend(units);
    }

    /// The next unit that has something to say (a unit that is only whitespace counts, but
    /// there is nothing to say; `raw`: said as it came, else stripped), or, once none is left
    /// after `input.done`, the end of the utterance.
    fn next(&mut self, raw: bool) -> Next {
        while let Some(unit) = self.queue.pop_front() {
            let sentence = self.started;
            self.started += 1;
            if !py_strip(&unit).is_empty() {
                let text = if raw { unit } else { py_strip(&unit).to_owned() };
                return Next::Say { text, sentence };
            }
        }
        if !self.flushing {
            return Next::Wait;
        }
        let total = self.started;
        *self = Units::default();
        Next::Done(total)
    }
}

impl TextInput {
    /// The mode `config` asks for, fresh.
    pub(super) fn for_config(config: &SessionConfig) -> TextInput {
        if config.commitment {
            TextInput::Committed(Committed::default())
        } else if config.streaming_mode != StreamingMode::Sentence {
            let commit = config.streaming_mode == StreamingMode::SentenceCommit;
            TextInput::Fragments(Fragments { commit, ..Fragments::default() })
        } else if let Some(granularity) = config.split_granularity.filter(|&g| g != Granularity::None) {
            TextInput::Split(Split { splitter: Splitter::new(granularity), units: Units::default() })
        } else {
            TextInput::Buffered(Buffered::default())
        }
    }

    /// Units (split sentences, stream fragments or committed segments) rather than one request
    /// per utterance.
    pub(super) fn in_units(&self) -> bool {
        !matches!(self, TextInput::Buffered(_))
    }

    fn units_mut(&mut self) -> Option<&mut Units> {
        match self {
            TextInput::Buffered(_) => None,
            TextInput::Split(Split { units, .. })
            | TextInput::Fragments(Fragments { units, .. })
            | TextInput::Committed(Committed { units, .. }) => Some(units),
        }
    }

    /// Why a new `session.config` may not be applied now, if it may not.
    pub(super) fn config_refusal(&self) -> Option<&'static str> {
        match self {
            TextInput::Committed(c) if c.units.open => {
                Some("session.config cannot be applied while an utterance is active; wait for session.done first")
            }
            TextInput::Split(Split { units, .. }) | TextInput::Fragments(Fragments { units, .. }) if units.open => {
                Some("session.config cannot be applied while an utterance is in progress; send input.done first")
            }
            TextInput::Buffered(b) if b.any => {
                Some("session.config cannot be applied while input is buffered; send input.done first")
            }
            _ => None,
        }
    }

    /// `input.text`. Its errors go to `out`; units it completes wait for
    /// [`next_unit`](Self::next_unit).
    pub(super) fn feed(&mut self, text: String, limit: usize, out: &mut Outputs) {
        match self {
            TextInput::Buffered(b) => b.feed(text, limit, out),
            TextInput::Split(s) => s.feed(&text, limit, out),
            TextInput::Fragments(f) => f.feed(text, limit, out),
            TextInput::Committed(c) => c.feed(&text, limit, out),
        }
    }

    /// `input.done`. A `sentence_commit` stream commits its pending text first (its
    /// `input.committed` goes to `out`).
    pub(super) fn flush(&mut self, out: &mut Outputs) -> Flushed {
        match self {
            TextInput::Buffered(b) => {
                let buffer = std::mem::take(b);
                match py_strip(&buffer.text) {
                    "" => Flushed::Empty,
                    text => Flushed::Utterance(text.to_owned()),
                }
            }
            TextInput::Split(s) => {
                let rest = s.splitter.flush();
                s.units.push(rest);
                s.units.flushing = true;
                Flushed::Units
            }
            TextInput::Fragments(f) => {
                if f.commit && !py_strip(&f.pending).is_empty() {
                    f.commit_pending(None, out);
                }
                f.units.flushing = true;
                Flushed::Units
            }
            TextInput::Committed(c) => {
                let rest = c.segmenter.finish();
                if !c.failed {
                    c.units.push(rest);
                }
                c.units.flushing = true;
                Flushed::Units
            }
        }
    }

    /// `input.commit`: in a `sentence_commit` stream, the text since the last commit becomes a
    /// fragment; anywhere else it is an unknown message. Errors and `input.committed` go to `out`.
    pub(super) fn commit(&mut self, message: &Object, out: &mut Outputs) {
        match self {
            TextInput::Fragments(f) if f.commit => match commit_id(message) {
                Ok(id) if !py_strip(&f.pending).is_empty() => f.commit_pending(id.as_deref(), out),
                Ok(_) => out.send_error("input.commit requires buffered text", false),
                Err(message) => out.send_error(&message, false),
            },
            _ => out.send_error("Unknown message type: input.commit", false),
        }
    }

    /// `input.cancel`: drop the text not yet synthesized (the buffer, the splitter's or the
    /// segmenter's remainder, the stream's uncommitted text, and the units). The utterance
    /// stays open in the modes that say units.
    pub(super) fn cancel(&mut self) {
        match self {
            TextInput::Buffered(b) => *b = Buffered::default(),
            TextInput::Split(s) => s.splitter = Splitter::new(s.splitter.granularity()),
            TextInput::Fragments(f) => f.pending.clear(),
            TextInput::Committed(c) => c.segmenter = Commitment::new(),
        }
        if let Some(units) = self.units_mut() {
            units.queue.clear();
        }
    }

    /// The peer is gone: nothing more will be said.
    pub(super) fn drop_units(&mut self) {
        if let Some(units) = self.units_mut() {
            units.queue.clear();
        }
    }

    /// What to do next while nothing is generating (the reference's buffer never has units).
    pub(super) fn next_unit(&mut self) -> Next {
        match self {
            TextInput::Buffered(_) => Next::Wait,
            TextInput::Split(s) => s.units.next(false),
            TextInput::Committed(c) => {
                let next = c.units.next(true);
                if let Next::Done(_) = next {
                    c.chars = 0;
                    c.failed = false;
                }
                next
            }
            TextInput::Fragments(f) => match f.units.next(false) {
                Next::Done(_) => {
                    // The next text starts a new stream, with the same config.
                    let f = std::mem::replace(f, Fragments { commit: f.commit, ..Fragments::default() });
                    Next::StreamDone(StreamSummary {
                        started: f.started,
                        total: f.total,
                        failed: f.failed,
                        cancelled: f.cancelled,
                        fragments: f.fragments,
                    })
                }
                next => next,
            },
        }
    }

    /// A generation is starting: in a fragment stream, whether it is the stream's first (which
    /// sends the stream's one `audio.start`); `None` in the other modes.
    pub(super) fn fragment_starting(&mut self) -> Option<bool> {
        match self {
            TextInput::Fragments(f) => Some(!std::mem::replace(&mut f.started, true)),
            _ => None,
        }
    }

    /// A generation ended with `total` audio bytes sent; `failed`: it failed. A failure drops
    /// what a fragment stream or a commitment utterance had not yet said.
    pub(super) fn generation_ended(&mut self, total: u64, cancelled: bool, failed: bool) -> UnitEnded {
        match self {
            TextInput::Buffered(_) => UnitEnded::Utterance,
            TextInput::Split(_) => UnitEnded::Unit,
            TextInput::Fragments(f) => {
                f.total += total;
                f.cancelled |= cancelled;
                if failed {
                    f.failed = true;
                    f.units.queue.clear();
                }
                UnitEnded::Fragment
            }
            TextInput::Committed(c) => {
                if failed {
                    c.fail();
                }
                UnitEnded::Unit
            }
        }
    }
}

impl Buffered {
    fn feed(&mut self, text: String, limit: usize, out: &mut Outputs) {
        let chars = text.chars().count();
        if self.chars + chars > limit {
            return out.send_error(&over_limit(limit), false);
        }
        self.text.push_str(&text);
        self.chars += chars;
        self.any = true;
    }
}

impl Split {
    fn feed(&mut self, text: &str, limit: usize, out: &mut Outputs) {
        let chars = text.chars().count();
        if self.splitter.buffered_chars() + chars > limit {
            return out.send_error(&over_limit(limit), false);
        }
        if !text.is_empty() {
            self.units.open = true;
        }
        let units = self.splitter.feed(text);
        self.units.push(units);
    }
}

impl Fragments {
    /// `token_level` makes each non-empty text a fragment, `sentence_commit` keeps it for the
    /// next commit.
    fn feed(&mut self, text: String, limit: usize, out: &mut Outputs) {
        if text.is_empty() {
            return;
        }
        if self.commit && self.pending.chars().count() + text.chars().count() > limit {
            return out.send_error(&over_limit(limit), false);
        }
        self.units.open = true;
        if self.commit {
            self.pending.push_str(&text);
        } else {
            self.fragments += 1;
            if !(self.failed || self.cancelled) {
                self.units.push([text]);
            }
        }
    }

    /// The text since the last commit becomes a fragment: `input.committed`, then its turn.
    fn commit_pending(&mut self, commit_id: Option<&str>, out: &mut Outputs) {
        let text = std::mem::take(&mut self.pending);
        let sentence_index = self.fragments;
        self.fragments += 1;
        let chars_committed = text.chars().count();
        out.send_json(&InputCommitted { r#type: "input.committed", commit_id, sentence_index, chars_committed });
        if !(self.failed || self.cancelled) {
            self.units.push([text]);
        }
    }
}

impl Committed {
    /// Each segment the text completes is said in turn. Past the utterance's limit (or the
    /// segmenter's) the utterance fails: its later text is refused until `input.done`.
    fn feed(&mut self, text: &str, limit: usize, out: &mut Outputs) {
        if self.failed {
            return out.send_error("input.text rejected: the current utterance has failed; send input.done", false);
        }
        self.chars += text.chars().count();
        if !text.is_empty() {
            self.units.open = true;
        }
        let segments = self.segmenter.feed(text);
        let failure = if self.chars > limit {
            Some(format!("Commitment utterance exceeds {limit} characters"))
        } else if self.segmenter.pending_chars() > MAX_PENDING_CHARS {
            Some(format!("unresolved streaming text suffix exceeds max_pending_chars={MAX_PENDING_CHARS}"))
        } else {
            None
        };
        if let Some(message) = failure {
            self.fail();
            return out.send_error(&message, false);
        }
        self.units.push(segments);
    }

    /// The utterance has failed; what it had not yet said is dropped.
    fn fail(&mut self) {
        self.failed = true;
        self.units.queue.clear();
        self.segmenter = Commitment::new();
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
