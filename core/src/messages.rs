//! The JSON messages a session sends, with their fields in the reference's emission order
//! (docs/protocol.md §c.1): serialised as declared, so the order on the wire is the order here.

use serde::Serialize;

use crate::engine::WordTiming;

#[derive(Serialize)]
pub(crate) struct AudioStart<'a> {
    pub(crate) r#type: &'static str,
    pub(crate) utterance_index: u64,
    pub(crate) sentence_index: u32,
    pub(crate) sentence_text: &'a str,
    pub(crate) format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sample_rate: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) word_timestamps: Option<bool>,
}

/// Upstream's `audio.start` for streamed PCM, sent with the first audio: its field order.
#[derive(Serialize)]
pub(crate) struct AudioStartDeferred<'a> {
    pub(crate) r#type: &'static str,
    pub(crate) utterance_index: u64,
    pub(crate) sentence_index: u32,
    pub(crate) sentence_text: &'a str,
    pub(crate) format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) word_timestamps: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sample_rate: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) channels: Option<u32>,
}

#[derive(Serialize)]
pub(crate) struct AudioChunk<'a> {
    pub(crate) r#type: &'static str,
    pub(crate) utterance_index: u64,
    pub(crate) sentence_index: u32,
    pub(crate) chunk_id: u64,
    pub(crate) chunk_start_ms: i64,
    pub(crate) chunk_end_ms: i64,
    pub(crate) sample_rate: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) channels: Option<u32>,
    pub(crate) audio_b64: &'a str,
    pub(crate) timestamps: Option<&'a [WordTiming]>,
}

#[derive(Serialize)]
pub(crate) struct AudioDone {
    pub(crate) r#type: &'static str,
    pub(crate) utterance_index: u64,
    pub(crate) sentence_index: u32,
    pub(crate) total_bytes: u64,
    pub(crate) error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cancelled: Option<bool>,
    /// Ours: what was heard of a cancelled utterance, only when `input.cancel` said how much
    /// the client played.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) heard: Option<Heard>,
}

#[derive(Serialize)]
pub(crate) struct CodecStart<'a> {
    pub(crate) r#type: &'static str,
    pub(crate) version: u32,
    pub(crate) utterance_index: u64,
    pub(crate) sentence_index: u32,
    pub(crate) sentence_text: &'a str,
    pub(crate) model: Option<&'a str>,
    pub(crate) codebooks: u32,
    pub(crate) codebook_size: u32,
    pub(crate) frame_rate_hz: f64,
    pub(crate) sample_rate: u32,
    pub(crate) decoder_id: Option<&'a str>,
    pub(crate) header_format: &'static str,
}

#[derive(Serialize)]
pub(crate) struct CodecDone {
    pub(crate) r#type: &'static str,
    pub(crate) utterance_index: u64,
    pub(crate) sentence_index: u32,
    pub(crate) total_frames: u64,
    pub(crate) seq_last: i64,
    pub(crate) error: bool,
    pub(crate) cancelled: bool,
}

#[derive(Serialize)]
pub(crate) struct SessionDone {
    pub(crate) r#type: &'static str,
    pub(crate) utterance_index: u64,
    pub(crate) total_sentences: u32,
}

/// Upstream's open-PR fragment streams (`streaming_mode`): no utterance index anywhere.
#[derive(Serialize)]
pub(crate) struct StreamStart<'a> {
    pub(crate) r#type: &'static str,
    pub(crate) sentence_index: u32,
    pub(crate) sentence_text: &'a str,
    pub(crate) format: &'static str,
    pub(crate) sample_rate: u32,
}

#[derive(Serialize)]
pub(crate) struct StreamAudioDone {
    pub(crate) r#type: &'static str,
    pub(crate) sentence_index: u32,
    pub(crate) total_bytes: u64,
    pub(crate) error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cancelled: Option<bool>,
}

#[derive(Serialize)]
pub(crate) struct StreamSessionDone {
    pub(crate) r#type: &'static str,
    pub(crate) total_sentences: u32,
}

#[derive(Serialize)]
pub(crate) struct InputCommitted<'a> {
    pub(crate) r#type: &'static str,
    pub(crate) commit_id: Option<&'a str>,
    pub(crate) sentence_index: u32,
    pub(crate) chars_committed: usize,
}

#[derive(Serialize)]
pub(crate) struct InputCancelled {
    pub(crate) r#type: &'static str,
    pub(crate) utterance_index: u64,
    /// Ours: what was heard of the utterance that had finished sending, when `input.cancel`
    /// said how much the client played of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) heard: Option<Heard>,
}

#[derive(Serialize)]
pub(crate) struct ErrorMessage<'a> {
    pub(crate) r#type: &'static str,
    pub(crate) message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partial_audio: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) action: Option<&'static str>,
}

/// `heard` in a cancelled utterance's `audio.done`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Heard {
    /// The utterance it is about.
    pub(crate) utterance_index: u64,
    /// The audio the client played, in ms from the utterance's first audio: what it said,
    /// capped at what was sent.
    pub(crate) played_ms: i64,
    /// The text up to the end of the last word played whole (empty when none was).
    pub(crate) text: String,
    /// Its span in the utterance's text (`sentence_text`), in characters (Unicode scalar
    /// values): `[0, end)`.
    pub(crate) chars: [usize; 2],
    /// The words played whole, in order.
    pub(crate) words: Vec<HeardWord>,
    /// The word being played when the client stopped, if any: partly heard.
    pub(crate) partial_word: Option<HeardWord>,
}

/// One word of [`Heard`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct HeardWord {
    pub(crate) word: String,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    /// Its span in the utterance's text, in characters; `None` when the word could not be
    /// found in the text.
    pub(crate) chars: Option<[usize; 2]>,
}
