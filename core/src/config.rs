//! `session.config` validation, as the reference's pydantic model does it (lax mode,
//! the `speaker` alias, defaults, ranges, cross-field rules, pydantic-like error text).
//!

use crate::json::{Int, Object};
use crate::pydantic::{render, saturate, FieldError, Validator};
use crate::resample::SUPPORTED_RATES;
use crate::split::Granularity;

/// The audio format of the reply (`response_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResponseFormat {
    /// RIFF/WAVE, 16-bit PCM.
    Wav,
    /// Raw signed 16-bit little-endian mono samples: the only format that streams chunk by
    /// chunk.
    Pcm,
    /// FLAC.
    Flac,
    /// MP3 (LAME).
    Mp3,
    /// Opus in an Ogg stream.
    Opus,
    /// G.711 mu-law, 8 kHz, one byte a sample, no header (telephony; not in the reference).
    Ulaw,
    /// G.711 A-law, 8 kHz, one byte a sample, no header (telephony; not in the reference).
    Alaw,
    /// AAC-LC in ADTS, through FFmpeg's libavcodec when the machine has it (an OpenAI format;
    /// not in the reference).
    Aac,
}

impl ResponseFormat {
    /// The name used on the wire (`"wav"`, `"pcm"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseFormat::Wav => "wav",
            ResponseFormat::Pcm => "pcm",
            ResponseFormat::Flac => "flac",
            ResponseFormat::Mp3 => "mp3",
            ResponseFormat::Opus => "opus",
            ResponseFormat::Ulaw => "ulaw",
            ResponseFormat::Alaw => "alaw",
            ResponseFormat::Aac => "aac",
        }
    }

    /// The one rate the format carries (G.711: 8000 Hz), if it has one.
    pub fn fixed_rate(self) -> Option<u32> {
        matches!(self, ResponseFormat::Ulaw | ResponseFormat::Alaw).then_some(G711_RATE)
    }
}

/// G.711's sample rate.
pub const G711_RATE: u32 = 8_000;

/// What a session streams (`output_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputMode {
    /// Audio (the default).
    Pcm,
    /// Codec frames between `codec.start` and `codec.done`, for a client-side decoder.
    CodecTokens,
}

/// The kind of synthesis a Qwen3-TTS-style model does (`task_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskType {
    /// A built-in speaker.
    CustomVoice,
    /// A voice described by `instructions`.
    VoiceDesign,
    /// A voice cloned from `ref_audio`.
    Base,
}

impl TaskType {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskType::CustomVoice => "CustomVoice",
            TaskType::VoiceDesign => "VoiceDesign",
            TaskType::Base => "Base",
        }
    }
}

/// A validated `session.config`. Field meanings: docs/protocol.md §b.2.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// The model the client expects; checked against the engine's when truthy.
    pub model: Option<String>,
    /// The voice (or its alias `speaker`).
    pub voice: Option<String>,
    /// The kind of synthesis asked for.
    pub task_type: Option<TaskType>,
    /// The language of the text.
    pub language: Option<String>,
    /// Style instructions.
    pub instructions: Option<String>,
    /// The reply's audio format.
    pub response_format: ResponseFormat,
    /// 0.25..=4.0 when present; the cross-field rule sets it to 1.0 when streaming.
    pub speed: Option<f64>,
    /// >= 1
    pub max_new_tokens: Option<i64>,
    /// >= 0
    pub initial_codec_chunk_frames: Option<i64>,
    /// Qwen3-TTS's prompt mode; accepted and passed on by the reference, unused here.
    pub non_streaming_mode: Option<bool>,
    /// Reference audio to clone a voice from (a URL or a `data:` URI).
    pub ref_audio: Option<String>,
    /// The transcript of `ref_audio`.
    pub ref_text: Option<String>,
    /// Clone from the speaker embedding of `ref_audio` only.
    pub x_vector_only_mode: Option<bool>,
    /// At most 8192 values; not checked for finiteness here.
    pub speaker_embedding: Option<Vec<f64>>,
    /// Stream audio as it is made (binary PCM frames, or `audio.chunk` with word timings)
    /// instead of one whole file per utterance.
    pub stream_audio: bool,
    /// Send the audio as `audio.chunk` frames followed by the word timings.
    pub word_timestamps: bool,
    /// Unbounded here, as in the reference; bounded to int64 per utterance.
    pub seed: Option<Int>,
    /// Audio or codec frames.
    pub output_mode: OutputMode,
    /// Upstream vLLM-Omni's `split_granularity` (not in the reference): `none` (one request
    /// per `input.done`), `sentence` or `clause` (each unit synthesized as soon as its text is
    /// complete, before `input.done`). `None` when the client did not send it: the reference's
    /// framing; when it did, upstream's (a streamed `audio.start` waits for the first audio and
    /// carries its `sample_rate` and `channels`; `audio.chunk` has `channels`).
    pub split_granularity: Option<Granularity>,
    /// Upstream's open-PR `streaming_mode` (docs/protocol.md §j): `sentence` (the default, the
    /// reference's utterances), `token_level` (each `input.text` a fragment) or
    /// `sentence_commit` (fragments at each `input.commit`), one audio stream per session.
    pub streaming_mode: StreamingMode,
    /// Upstream's open-PR `text_input_mode`: `buffered` (the default) or `commitment`
    /// (segments committed at sentence ends as text arrives, raw; `crate::commitment`).
    pub commitment: bool,
    /// Our extension (upstream ignores the key on the WebSocket): the rate of the audio sent,
    /// one of [`SUPPORTED_RATES`] (resampled); `None`: the engine's.
    pub sample_rate: Option<u32>,
    /// Our extension: how to say given words, (word, `/phonemes/` or a respelling), for every
    /// utterance of the session; empty for none.
    pub pronunciations: Vec<(String, String)>,
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
            split_granularity: None,
            streaming_mode: StreamingMode::Sentence,
            commitment: false,
            sample_rate: None,
            pronunciations: Vec::new(),
        }
    }
}

/// Validate the fields of a `session.config` message (the `type` key is ignored).
/// `Err` holds pydantic's rendering of the errors, starting with
/// `1 validation error for StreamingSpeechSessionConfig`; the caller adds the
/// `Invalid session config: ` prefix.
///
/// Integer fields accept any size, as Python does; `max_new_tokens` and
/// `initial_codec_chunk_frames` saturate at `i64::MAX` (both are bounded far lower
/// later), `seed` keeps its digits.
pub fn validate_session_config(msg: &Object) -> Result<SessionConfig, String> {
    let mut v = Validator { msg, errors: Vec::new() };
    // `voice` wins over its alias `speaker` (the model's "before" validator).
    let (voice_loc, voice_val) = match msg.get("voice") {
        Some(x) => ("voice", Some(x)),
        None => ("speaker", msg.get("speaker")),
    };
    let d = SessionConfig::default();
    let mut c = SessionConfig {
        model: v.opt_str("model"),
        voice: voice_val.and_then(|x| v.str_value(voice_loc, x)),
        task_type: v
            .literal("task_type", true, TASK_TYPES, TASK_TYPE_MSG)
            .and_then(|n| TASK_TYPE_VALUES.get(n).copied()),
        // Kokoro-FastAPI's `lang_code` (`a`, `b`, `j`, ...) where `language` is not given.
        language: v.opt_str("language").or_else(|| v.opt_str("lang_code").map(|code| lang_code(&code))),
        instructions: v.opt_str("instructions"),
        response_format: v
            .literal("response_format", false, FORMATS, FORMAT_MSG)
            .and_then(|n| FORMAT_VALUES.get(n).copied())
            .unwrap_or(d.response_format),
        speed: v.speed(),
        max_new_tokens: v.int("max_new_tokens", Some(1)).map(|i| saturate(&i)),
        initial_codec_chunk_frames: v.int("initial_codec_chunk_frames", Some(0)).map(|i| saturate(&i)),
        non_streaming_mode: v.bool("non_streaming_mode", true),
        ref_audio: v.opt_str("ref_audio"),
        ref_text: v.opt_str("ref_text"),
        x_vector_only_mode: v.bool("x_vector_only_mode", true),
        speaker_embedding: v.embedding(),
        stream_audio: v.bool("stream_audio", false).unwrap_or(d.stream_audio),
        word_timestamps: v.bool("word_timestamps", false).unwrap_or(d.word_timestamps),
        seed: v.int("seed", None),
        output_mode: v
            .literal("output_mode", false, MODES, MODE_MSG)
            .map(|n| if n == 1 { OutputMode::CodecTokens } else { OutputMode::Pcm })
            .unwrap_or(d.output_mode),
        split_granularity: v
            .literal("split_granularity", false, GRANULARITIES, GRANULARITY_MSG)
            .and_then(|n| GRANULARITY_VALUES.get(n).copied()),
        streaming_mode: v
            .literal("streaming_mode", false, STREAMING_MODES, STREAMING_MODE_MSG)
            .and_then(|n| STREAMING_MODE_VALUES.get(n).copied())
            .unwrap_or(d.streaming_mode),
        commitment: v
            .literal(
                "text_input_mode",
                false,
                &["buffered", "commitment"],
                "Input should be 'buffered' or 'commitment'",
            )
            .is_some_and(|n| n == 1),
        sample_rate: None,
        pronunciations: v.pronunciations(),
    };
    if let Some(x) = msg.get("sample_rate").filter(|x| **x != crate::json::Value::Null) {
        if let Some(rate) = v.int("sample_rate", None).map(|i| saturate(&i)) {
            match u32::try_from(rate).ok().filter(|r| SUPPORTED_RATES.contains(r)) {
                Some(rate) => c.sample_rate = Some(rate),
                None => {
                    let rates: Vec<String> = SUPPORTED_RATES.iter().map(u32::to_string).collect();
                    let message = format!("Value error, sample_rate must be one of {}", rates.join(", "));
                    v.fail("sample_rate".into(), "value_error", message, x);
                }
            }
        }
    }
    if msg.get("speed").is_none() {
        c.speed = d.speed;
    }
    if !v.errors.is_empty() {
        return Err(render(MODEL, &v.errors));
    }
    match cross_field(&mut c) {
        Ok(()) => Ok(c),
        Err(text) => {
            let mut input = String::new();
            msg.write_repr(&mut input, Some("type"));
            Err(render(
                MODEL,
                &[FieldError {
                    loc: String::new(),
                    kind: "value_error",
                    msg: format!("Value error, {text}"),
                    input,
                    input_type: "dict",
                }],
            ))
        }
    }
}

/// The model's "after" validator; the first failure wins.
fn cross_field(c: &mut SessionConfig) -> Result<(), String> {
    // Ours: upstream's lines do not combine.
    if c.commitment && c.split_granularity.is_some_and(|g| g != Granularity::None) {
        return Err("text_input_mode='commitment' requires split_granularity='none'.".into());
    }
    if c.commitment && c.streaming_mode != StreamingMode::Sentence {
        return Err("text_input_mode='commitment' cannot be combined with streaming_mode.".into());
    }
    if c.streaming_mode != StreamingMode::Sentence {
        let mode = c.streaming_mode.as_str();
        if c.word_timestamps {
            return Err(format!("word_timestamps is not supported in {mode} mode."));
        }
        if c.response_format != ResponseFormat::Pcm {
            return Err(format!(
                "{mode} streaming requires response_format='pcm'. Got response_format='{}'.",
                c.response_format.as_str()
            ));
        }
        c.stream_audio = true;
        // Ours (issue 34): upstream refuses speed here ("Speed adjustment is not supported in
        // {mode} mode."); our engines control speed natively, fragment by fragment.
        c.speed = Some(c.speed.unwrap_or(1.0));
        // Ours: the two upstream lines do not combine.
        if c.split_granularity.is_some_and(|g| g != Granularity::None) {
            return Err(format!("split_granularity cannot be combined with streaming_mode='{mode}'."));
        }
        if c.output_mode == OutputMode::CodecTokens {
            return Err(format!("output_mode='codec_tokens' is not supported in {mode} mode."));
        }
    }
    if c.output_mode == OutputMode::CodecTokens {
        if !c.stream_audio {
            return Err("output_mode='codec_tokens' requires stream_audio=true.".into());
        }
        if c.word_timestamps {
            return Err("output_mode='codec_tokens' does not support word_timestamps.".into());
        }
        if c.response_format != ResponseFormat::Pcm {
            return Err("output_mode='codec_tokens' requires response_format='pcm'.".into());
        }
    }
    if let (Some(rate), Some(fixed)) = (c.sample_rate, c.response_format.fixed_rate()) {
        if rate != fixed {
            return Err(format!(
                "response_format='{}' is {fixed} Hz only (G.711); leave sample_rate out or set it to {fixed}. Got \
                 sample_rate={rate}.",
                c.response_format.as_str()
            ));
        }
    }
    if c.output_mode == OutputMode::CodecTokens && c.sample_rate.is_some() {
        return Err(
            "output_mode='codec_tokens' does not support sample_rate (codec frames have no rate to change).".into()
        );
    }
    if c.stream_audio {
        if c.response_format != ResponseFormat::Pcm {
            return Err(format!(
                "WebSocket streaming audio (stream_audio=true) requires response_format='pcm'. \
                 Got response_format='{}'.",
                c.response_format.as_str()
            ));
        }
        // Ours (issue 34): the reference refuses speed other than 1.0 here ("WebSocket
        // stream_audio=true currently requires speed=1.0; ..."); our engines control speed
        // natively, streamed as whole, as HTTP streaming does.
        c.speed = Some(c.speed.unwrap_or(1.0));
    }
    Ok(())
}

/// The pydantic model name the reference validates `session.config` with.
const MODEL: &str = "StreamingSpeechSessionConfig";
pub(crate) const TASK_TYPES: &[&str] = &["CustomVoice", "VoiceDesign", "Base"];
pub(crate) const TASK_TYPE_VALUES: &[TaskType] = &[TaskType::CustomVoice, TaskType::VoiceDesign, TaskType::Base];
pub(crate) const TASK_TYPE_MSG: &str = "Input should be 'CustomVoice', 'VoiceDesign' or 'Base'";
/// `streaming_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamingMode {
    /// Utterances, each flushed by `input.done` (the reference).
    Sentence,
    /// Every non-empty `input.text` is the next fragment of the session's one audio stream.
    TokenLevel,
    /// `input.commit` makes the text so far the next fragment.
    SentenceCommit,
}

impl StreamingMode {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamingMode::Sentence => "sentence",
            StreamingMode::TokenLevel => "token_level",
            StreamingMode::SentenceCommit => "sentence_commit",
        }
    }
}

const STREAMING_MODES: &[&str] = &["sentence", "token_level", "sentence_commit"];
const STREAMING_MODE_VALUES: &[StreamingMode] =
    &[StreamingMode::Sentence, StreamingMode::TokenLevel, StreamingMode::SentenceCommit];
const STREAMING_MODE_MSG: &str = "Input should be 'sentence', 'token_level' or 'sentence_commit'";

const GRANULARITIES: &[&str] = &["none", "sentence", "clause"];
const GRANULARITY_VALUES: &[Granularity] = &[Granularity::None, Granularity::Sentence, Granularity::Clause];
const GRANULARITY_MSG: &str = "Input should be 'none', 'sentence' or 'clause'";

// ulaw, alaw and aac are our extensions: accepted, but the refusal keeps the reference's message.
pub(crate) const FORMATS: &[&str] = &["wav", "pcm", "flac", "mp3", "opus", "ulaw", "alaw", "aac"];
pub(crate) const FORMAT_VALUES: &[ResponseFormat] = &[
    ResponseFormat::Wav,
    ResponseFormat::Pcm,
    ResponseFormat::Flac,
    ResponseFormat::Mp3,
    ResponseFormat::Opus,
    ResponseFormat::Ulaw,
    ResponseFormat::Alaw,
    ResponseFormat::Aac,
];
pub(crate) const FORMAT_MSG: &str = "Input should be 'wav', 'pcm', 'flac', 'mp3' or 'opus'";
const MODES: &[&str] = &["pcm", "codec_tokens"];
const MODE_MSG: &str = "Input should be 'pcm' or 'codec_tokens'";

/// The language a Kokoro voice speaks, from the first letter of its name or Kokoro's
/// `lang_code` (as Kokoro-FastAPI takes it): `a` American English, `b` British English, `e`
/// Spanish, `f` French, `h` Hindi, `i` Italian, `j` Japanese, `p` Brazilian Portuguese, `z`
/// Mandarin Chinese; as a BCP 47 tag.
pub fn kokoro_language(code: char) -> Option<&'static str> {
    Some(match code.to_ascii_lowercase() {
        'a' => "en-US",
        'b' => "en-GB",
        'e' => "es-ES",
        'f' => "fr-FR",
        'h' => "hi-IN",
        'i' => "it-IT",
        'j' => "ja",
        'p' => "pt-BR",
        'z' => "zh-CN",
        _ => return None,
    })
}

/// Kokoro-FastAPI's `lang_code` as a language: its one-letter codes ([`kokoro_language`]) as
/// BCP 47 tags, any other value as it is (a language name or code).
pub fn lang_code(code: &str) -> String {
    let mut chars = code.trim().chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => kokoro_language(c).map_or_else(|| code.to_owned(), str::to_owned),
        _ => code.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{parse, Value};

    fn check(text: &str) -> Result<SessionConfig, String> {
        match parse(text) {
            Ok(Value::Object(o)) => validate_session_config(&o),
            _ => Err("not an object".into()),
        }
    }

    #[test]
    fn pronunciations_are_an_object_of_strings() {
        let c = check(r#"{"pronunciations":{"Kokoro":"/kˈOkəɹO/","nginx":"engine x"}}"#).unwrap_or_default();
        let want = [("Kokoro", "/kˈOkəɹO/"), ("nginx", "engine x")].map(|(a, b)| (a.to_owned(), b.to_owned()));
        assert_eq!(c.pronunciations, want);
        assert_eq!(check(r#"{"pronunciations":null}"#).unwrap_or_default().pronunciations, []);
        let e = check(r#"{"pronunciations":["x"]}"#).unwrap_err();
        assert!(e.contains("pronunciations\n  Input should be a valid dictionary [type=dict_type"), "{e}");
        let e = check(r#"{"pronunciations":{"Kokoro":5,"x":""}}"#).unwrap_err();
        assert!(e.starts_with("2 validation errors"), "{e}");
        assert!(e.contains("pronunciations.Kokoro\n  Input should be a valid string [type=string_type"), "{e}");
        assert!(e.contains("pronunciations.x\n  String should have at least 1 character"), "{e}");
    }

    #[test]
    fn fields_and_rules() {
        let c = check(
            r#"{"type":"session.config","speaker":"a","speed":"2","max_new_tokens":true,"stream_audio":"no","seed":"+1_0"}"#,
        );
        let c = c.unwrap_or_default();
        assert_eq!((c.voice.as_deref(), c.speed, c.max_new_tokens), (Some("a"), Some(2.0), Some(1)));
        assert_eq!(c.seed, Some(Int("10".into())));
        let c = check(r#"{"stream_audio":true,"response_format":"pcm","speed":null}"#).unwrap_or_default();
        assert_eq!(c.speed, Some(1.0));
        let e = check(r#"{"speed":5}"#).unwrap_err();
        assert_eq!(e, "1 validation error for StreamingSpeechSessionConfig\nspeed\n  Input should be less than or equal to 4 [type=less_than_equal, input_value=5, input_type=int]\n    For further information visit https://errors.pydantic.dev/2.13/v/less_than_equal");
        let e = check(r#"{"type":"session.config","stream_audio":1,"response_format":"mp3"}"#).unwrap_err();
        assert!(e.contains("\n  Value error, WebSocket streaming audio (stream_audio=true) requires response_format='pcm'. Got response_format='mp3'. [type=value_error, input_value={'stream_audio': 1, 'response_format': 'mp3'}, input_type=dict]"), "{e}");
        let e = check(r#"{"voice":1,"speed":"x","seed":1.5}"#).unwrap_err();
        assert!(e.starts_with("3 validation errors for StreamingSpeechSessionConfig\nvoice\n"), "{e}");
    }
}
