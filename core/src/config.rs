//! `session.config` validation, as the reference's pydantic model does it (lax mode,
//! the `speaker` alias, defaults, ranges, cross-field rules, pydantic-like error text).
//!
//! OWNER: helper A (json + config). Types below are the agreed interface.

use crate::json::{Int, Object};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFormat {
    Wav,
    Pcm,
    Flac,
    Mp3,
    Opus,
}

impl ResponseFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseFormat::Wav => "wav",
            ResponseFormat::Pcm => "pcm",
            ResponseFormat::Flac => "flac",
            ResponseFormat::Mp3 => "mp3",
            ResponseFormat::Opus => "opus",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputMode {
    Pcm,
    CodecTokens,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskType {
    CustomVoice,
    VoiceDesign,
    Base,
}

impl TaskType {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::CustomVoice => "CustomVoice",
            TaskType::VoiceDesign => "VoiceDesign",
            TaskType::Base => "Base",
        }
    }
}

/// A validated `session.config`. Field meanings: protocol.md §b.2.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    pub model: Option<String>,
    pub voice: Option<String>,
    pub task_type: Option<TaskType>,
    pub language: Option<String>,
    pub instructions: Option<String>,
    pub response_format: ResponseFormat,
    /// 0.25..=4.0 when present; the cross-field rule sets it to 1.0 when streaming.
    pub speed: Option<f64>,
    /// >= 1
    pub max_new_tokens: Option<i64>,
    /// >= 0
    pub initial_codec_chunk_frames: Option<i64>,
    pub non_streaming_mode: Option<bool>,
    pub ref_audio: Option<String>,
    pub ref_text: Option<String>,
    pub x_vector_only_mode: Option<bool>,
    /// At most 8192 values; not checked for finiteness here.
    pub speaker_embedding: Option<Vec<f64>>,
    pub stream_audio: bool,
    pub word_timestamps: bool,
    /// Unbounded here, as in the reference; bounded to int64 per utterance.
    pub seed: Option<Int>,
    pub output_mode: OutputMode,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            model: None,
            voice: None,
            task_type: None,
            language: None,
            instructions: None,
            response_format: ResponseFormat::Wav,
            speed: Some(1.0),
            max_new_tokens: None,
            initial_codec_chunk_frames: None,
            non_streaming_mode: None,
            ref_audio: None,
            ref_text: None,
            x_vector_only_mode: None,
            speaker_embedding: None,
            stream_audio: false,
            word_timestamps: false,
            seed: None,
            output_mode: OutputMode::Pcm,
        }
    }
}

/// Validate the fields of a `session.config` message (the `type` key is ignored).
/// `Err` holds pydantic's rendering of the errors, starting with
/// `1 validation error for StreamingSpeechSessionConfig`; the caller adds the
/// `Invalid session config: ` prefix.
pub fn validate_session_config(_msg: &Object) -> Result<SessionConfig, String> {
    todo!("helper A")
}
