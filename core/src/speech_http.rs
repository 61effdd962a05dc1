//! The OpenAI-compatible `POST /v1/audio/speech` request and response rules (docs/protocol.md §f),
//! I/O-free: a JSON body becomes a validated [`SpeechRequest`] or the exact [`HttpError`]
//! (status, OpenAI-style error JSON); and the bytes a response is made of (media types, the
//! streaming WAV header, SSE events, usage) are shaped here so transports only move them.
//!
//! Where the reference applies Qwen3-TTS adapter rules, the engine's [`EngineCapabilities`]
//! stand in, under the server's names ([`Catalog`]): its voices (and the server's aliases of
//! them), its word timings. `sample_rate`
//! may be any of [`SUPPORTED_RATES`] (the audio is resampled). Our engines control speed
//! natively, so speed is allowed when streaming too, and every format streams.

use std::fmt::Write as _;

use base64::Engine as _;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::config::{
    ResponseFormat, TaskType, FORMATS, FORMAT_MSG, FORMAT_VALUES, TASK_TYPES, TASK_TYPE_MSG, TASK_TYPE_VALUES,
};
use crate::engine::{EngineCapabilities, OutputKind, SynthesisRequest, WordTiming};
use crate::json::{self, Object, Value};
use crate::pydantic::{render, saturate, FieldError, Validator};
use crate::resample::SUPPORTED_RATES;
use crate::text::py_strip;

/// The pydantic model name the reference validates the body with.
const MODEL: &str = "OpenAICreateSpeechRequest";
/// The reference's default cap on `instructions`.
pub const MAX_INSTRUCTIONS_CHARS: usize = 500;
/// The reference adapter's cap on `max_new_tokens`.
pub const MAX_NEW_TOKENS: i64 = 4096;
/// Longest `X-Word-Timestamps` header value sent; longer lists are omitted.
pub const WORD_TIMESTAMPS_HEADER_LIMIT: usize = 4096;
/// Output "tokens" are audio frames at this rate when the engine has no codec of its own
/// (Qwen3-TTS's codec rate, so usage numbers are comparable).
const DEFAULT_TOKEN_RATE_HZ: f64 = 12.5;

/// How the audio goes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// One complete file in the response body.
    Whole,
    /// `stream_format: "audio"`: the raw bytes as they are made (WAV with a streaming header).
    Audio,
    /// `stream: true` or `stream_format: "sse"`: server-sent events with base64 audio.
    Sse,
}

/// A request that passed every check; ready for the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeechRequest {
    /// What the engine is asked for.
    pub synthesis: SynthesisRequest,
    /// The audio format of the reply.
    pub response_format: ResponseFormat,
    /// How the reply is sent.
    pub delivery: Delivery,
    /// The rate of the audio returned: the engine's, or the request's `sample_rate` (one of
    /// [`SUPPORTED_RATES`], resampled).
    pub sample_rate: u32,
}

/// An error answer: the HTTP status and vLLM's `ErrorResponse` fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpError {
    /// The HTTP status, also the body's `code`.
    pub status: u16,
    /// `BadRequestError`, `NotFoundError`, ...
    pub kind: &'static str,
    /// The exact message.
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<&'static str>,
    /// For a refusal for lack of capacity (503): whole seconds after which a retry may succeed,
    /// the transport's `Retry-After`.
    pub retry_after_seconds: Option<u32>,
}

impl HttpError {
    /// An error with no `param`.
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> HttpError {
        HttpError { status, kind, message: message.into(), param: None, retry_after_seconds: None }
    }

    /// A 400 `BadRequestError`.
    pub fn bad_request(message: impl Into<String>) -> HttpError {
        HttpError::new(400, "BadRequestError", message)
    }

    /// `{"error":{"message","type","param","code"}}`, the body sent with `status`.
    pub fn body(&self) -> String {
        error_json(&self.message, self.kind, self.param, self.status)
    }
}

/// OpenAI's error body, which the OpenAI client libraries parse.
pub fn error_json(message: &str, kind: &str, param: Option<&str>, code: u16) -> String {
    serde_json::json!({"error": {"message": message, "type": kind, "param": param, "code": code}}).to_string()
}

/// The request must say it is JSON, as the reference's `validate_json_request` insists.
pub fn check_content_type(content_type: Option<&str>) -> Result<(), HttpError> {
    let media = content_type.unwrap_or("").split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(HttpError::bad_request("Unsupported Media Type: Only 'application/json' is allowed"))
    }
}

/// Validate a speech request body against what the engine can do, in the reference's order:
/// the body's schema and its model validators, the served model, word timings, then the
/// adapter's checks (text, voice, instructions, token cap, sample rate).
/// `max_input_chars` bounds `input` as the WebSocket path bounds an utterance's buffered text,
/// so neither door takes a longer text than the other.
pub fn parse_speech_request(body: &str, catalog: &Catalog, max_input_chars: usize) -> Result<SpeechRequest, HttpError> {
    let object = match json::parse(body) {
        Ok(Value::Object(object)) => object,
        Ok(other) => {
            return Err(HttpError::bad_request(render(
                MODEL,
                &[FieldError {
                    loc: String::new(),
                    kind: "model_type",
                    msg: format!("Input should be a valid dictionary or instance of {MODEL}"),
                    input: other.py_repr(),
                    input_type: other.py_type_name(),
                }],
            )))
        }
        Err(_) => return Err(HttpError::bad_request("JSON decode error")),
    };
    let body = validate_body(&object).map_err(HttpError::bad_request)?;
    if let Some(model) = body.model.as_deref().filter(|m| !m.is_empty()) {
        if !catalog.serves_model(model) {
            let mut error = HttpError::new(404, "NotFoundError", format!("The model `{model}` does not exist."));
            error.param = Some("model");
            return Err(error);
        }
    }
    let delivery = match (body.stream, body.stream_format) {
        (_, Some(StreamFormat::Audio)) => Delivery::Audio,
        (true, _) | (_, Some(StreamFormat::Sse)) => Delivery::Sse,
        (false, None) => Delivery::Whole,
    };
    if body.word_timestamps {
        if delivery != Delivery::Whole {
            return Err(HttpError::bad_request(
                "word_timestamps=true is currently supported by the WebSocket /v1/audio/speech/stream path. Use \
                 session.config with stream_audio=true and response_format='pcm'.",
            ));
        }
        if !catalog.capabilities().word_timestamps {
            return Err(HttpError::bad_request(
                "word_timestamps=true requires the server to be launched with --forced-aligner.",
            ));
        }
    }
    let text = py_strip(&body.input);
    if text.is_empty() {
        return Err(HttpError::bad_request("Input text cannot be empty"));
    }
    if text.len() > max_input_chars && text.chars().count() > max_input_chars {
        return Err(HttpError::bad_request(format!("Input text too long (max {max_input_chars} characters)")));
    }
    // The adapter's voice rules: lowercased, then the engine's (`default` is its default voice).
    let voice = body.voice.map(|v| v.to_lowercase());
    let voice = catalog.resolve_voice(voice.as_deref()).map_err(HttpError::bad_request)?.map(str::to_owned);
    if let Some(instructions) = &body.instructions {
        if instructions.chars().count() > MAX_INSTRUCTIONS_CHARS {
            let message = format!("Instructions too long (max {MAX_INSTRUCTIONS_CHARS} characters)");
            return Err(HttpError::bad_request(message));
        }
    }
    if body.max_new_tokens.is_some_and(|n| n > MAX_NEW_TOKENS) {
        return Err(HttpError::bad_request(format!("max_new_tokens cannot exceed {MAX_NEW_TOKENS}")));
    }
    if body.response_format == ResponseFormat::Aac {
        // Refused before the reply begins on a machine without FFmpeg's libavcodec.
        crate::encode::aac_available().map_err(|e| HttpError::bad_request(e.0))?;
    }
    // The rate of the engine that will speak: its voice's, else its model's.
    let native = catalog.capabilities().serving_names(voice.as_deref(), body.model.as_deref()).sample_rate;
    let sample_rate = match (body.sample_rate, body.response_format.fixed_rate()) {
        (None, Some(fixed)) => fixed,
        (Some(rate), Some(fixed)) if rate != i64::from(fixed) => {
            return Err(HttpError::bad_request(format!(
                "sample_rate={rate} is not supported with response_format='{}': G.711 is {fixed} Hz (leave \
                 sample_rate out)",
                body.response_format.as_str()
            )));
        }
        (rate, _) => match rate {
            None => native,
            Some(rate) => match u32::try_from(rate).ok().filter(|&r| r == native || SUPPORTED_RATES.contains(&r)) {
                Some(rate) => rate,
                None => {
                    let mut rates: Vec<u32> = SUPPORTED_RATES.into_iter().chain([native]).collect();
                    rates.sort_unstable();
                    rates.dedup();
                    let rates: Vec<String> = rates.iter().map(u32::to_string).collect();
                    return Err(HttpError::bad_request(format!(
                        "sample_rate={rate} is not supported by the current TTS model; supported rates: {}",
                        rates.join(", ")
                    )));
                }
            },
        },
    };
    let mut synthesis = SynthesisRequest {
        text: text.to_owned(),
        model: body.model,
        voice,
        language: body.language,
        instructions: body.instructions,
        task_type: body.task_type,
        speed: body.speed.unwrap_or(1.0),
        seed: body.seed,
        stream: delivery != Delivery::Whole,
        output: if body.word_timestamps { OutputKind::AudioAndWords } else { OutputKind::Audio },
        max_new_tokens: body.max_new_tokens.and_then(|n| u64::try_from(n).ok()),
        initial_codec_chunk_frames: body.initial_codec_chunk_frames.and_then(|n| u64::try_from(n).ok()),
        ref_audio: body.ref_audio,
        ref_text: body.ref_text,
        speaker_embedding: body.speaker_embedding,
        x_vector_only_mode: body.x_vector_only_mode.unwrap_or(false),
        non_streaming_mode: body.non_streaming_mode,
        ignored: Vec::new(),
        pronunciations: body.pronunciations,
        speaker: None,
    };
    // What the engine cannot do: a 400, as the reference's adapter refuses it.
    catalog.resolve(&mut synthesis).map_err(HttpError::bad_request)?;
    Ok(SpeechRequest { synthesis, response_format: body.response_format, delivery, sample_rate })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamFormat {
    Sse,
    Audio,
}

/// The body's fields after schema validation.
struct Body {
    input: String,
    model: Option<String>,
    voice: Option<String>,
    instructions: Option<String>,
    response_format: ResponseFormat,
    sample_rate: Option<i64>,
    speed: Option<f64>,
    stream: bool,
    stream_format: Option<StreamFormat>,
    task_type: Option<TaskType>,
    language: Option<String>,
    max_new_tokens: Option<i64>,
    initial_codec_chunk_frames: Option<i64>,
    seed: Option<i64>,
    word_timestamps: bool,
    ref_audio: Vec<String>,
    ref_text: Option<String>,
    speaker_embedding: Option<Vec<f64>>,
    x_vector_only_mode: Option<bool>,
    non_streaming_mode: Option<bool>,
    /// Our extension: (word, `/phonemes/` or respelling).
    pronunciations: Vec<(String, String)>,
}

/// The schema of `OpenAICreateSpeechRequest` (lax mode, unknown keys ignored) and its model
/// validators; `Err` is pydantic's rendering.
fn validate_body(msg: &Object) -> Result<Body, String> {
    let mut v = Validator { msg, errors: Vec::new() };
    let input = match msg.get("input") {
        None => {
            v.errors.push(FieldError {
                loc: "input".into(),
                kind: "missing",
                msg: "Field required".into(),
                input: object_repr(msg),
                input_type: "dict",
            });
            None
        }
        Some(Value::Str(s)) => Some(s.clone()),
        Some(x) => {
            v.fail_with("input", ("string_type", "Input should be a valid string"), x);
            None
        }
    };
    let voice = voice(&mut v);
    let sample_rate = v.int("sample_rate", None).map(|i| saturate(&i));
    if let (Some(rate), Some(x)) = (sample_rate, msg.get("sample_rate")) {
        if rate <= 0 {
            v.fail("sample_rate".into(), "greater_than", "Input should be greater than 0".into(), x);
        }
    }
    let seed = v.int("seed", None);
    let seed = match (seed, msg.get("seed")) {
        (Some(seed), Some(x)) => match seed.to_i64() {
            Some(seed) => Some(seed),
            None => {
                let (kind, bound) = if seed.0.starts_with('-') {
                    ("greater_than_equal", "greater than or equal to -9223372036854775808")
                } else {
                    ("less_than_equal", "less than or equal to 9223372036854775807")
                };
                v.fail("seed".into(), kind, format!("Input should be {bound}"), x);
                None
            }
        },
        _ => None,
    };
    let body = Body {
        input: input.unwrap_or_default(),
        model: v.opt_str("model"),
        voice,
        instructions: v.opt_str("instructions"),
        response_format: v
            .literal("response_format", false, FORMATS, FORMAT_MSG)
            .and_then(|n| FORMAT_VALUES.get(n).copied())
            .unwrap_or(ResponseFormat::Wav),
        sample_rate,
        speed: if msg.get("speed").is_none() { Some(1.0) } else { v.speed() },
        stream: v.bool("stream", false).unwrap_or(false),
        stream_format: v
            .literal("stream_format", true, &["sse", "audio"], "Input should be 'sse' or 'audio'")
            .map(|n| if n == 0 { StreamFormat::Sse } else { StreamFormat::Audio }),
        task_type: v
            .literal("task_type", true, TASK_TYPES, TASK_TYPE_MSG)
            .and_then(|n| TASK_TYPE_VALUES.get(n).copied()),
        // Kokoro-FastAPI's `lang_code` (`a`, `b`, `j`, ...) where `language` is not given.
        language: v.opt_str("language").or_else(|| v.opt_str("lang_code").map(|code| crate::config::lang_code(&code))),
        max_new_tokens: v.int("max_new_tokens", Some(1)).map(|i| saturate(&i)),
        initial_codec_chunk_frames: v.int("initial_codec_chunk_frames", Some(0)).map(|i| saturate(&i)),
        seed,
        word_timestamps: v.bool("word_timestamps", false).unwrap_or(false),
        ref_audio: Vec::new(),
        ref_text: None,
        speaker_embedding: None,
        x_vector_only_mode: None,
        non_streaming_mode: None,
        pronunciations: v.pronunciations(),
    };
    let mut body = body;
    // The cloning fields: passed on to the engine (one that clones voices needs them).
    let ref_audio = match msg.get("ref_audio") {
        Some(Value::Str(url)) => {
            body.ref_audio = vec![url.clone()];
            true
        }
        Some(Value::Array(items)) => {
            for (n, item) in items.iter().enumerate() {
                match item {
                    Value::Str(url) => body.ref_audio.push(url.clone()),
                    _ => {
                        v.fail_with(&format!("ref_audio.{n}"), ("string_type", "Input should be a valid string"), item)
                    }
                }
            }
            false
        }
        Some(Value::Null) | None => false,
        Some(x) => {
            v.fail_with("ref_audio", ("string_type", "Input should be a valid string"), x);
            false
        }
    };
    body.ref_text = v.opt_str("ref_text");
    body.x_vector_only_mode = v.bool("x_vector_only_mode", true);
    body.non_streaming_mode = v.bool("non_streaming_mode", true);
    let embedding = v.embedding();
    if !v.errors.is_empty() {
        return Err(render(MODEL, &v.errors));
    }
    let rule = if embedding.is_some() && ref_audio {
        Some("'speaker_embedding' and 'ref_audio' are mutually exclusive".to_owned())
    } else if embedding.as_ref().is_some_and(|e| e.iter().any(|x| !x.is_finite())) {
        Some("'speaker_embedding' values must be finite (no NaN or Inf)".to_owned())
    } else {
        None
    };
    body.speaker_embedding = embedding;
    match rule {
        None => Ok(body),
        Some(text) => Err(render(
            MODEL,
            &[FieldError {
                loc: String::new(),
                kind: "value_error",
                msg: format!("Value error, {text}"),
                input: object_repr(msg),
                input_type: "dict",
            }],
        )),
    }
}

fn object_repr(msg: &Object) -> String {
    let mut out = String::new();
    msg.write_repr(&mut out, None);
    out
}

/// `voice` (or its alias `speaker`): a string, or `{"id": "..."}`.
fn voice(v: &mut Validator<'_>) -> Option<String> {
    let (loc, x) = match v.msg.get("voice") {
        Some(x) => ("voice", x),
        None => ("speaker", v.msg.get("speaker")?),
    };
    match x {
        Value::Object(dict) => match dict.get("id") {
            Some(id) => v.str_value(&format!("{loc}.id"), id),
            None => {
                let m = "Value error, voice dict must contain 'id'".to_owned();
                v.fail(loc.to_owned(), "value_error", m, x);
                None
            }
        },
        x => v.str_value(loc, x),
    }
}

/// `GET /v1/audio/voices`: the engine's voices plus the `default` placeholder, sorted, and
/// the aliases (`{"alloy": "default", ...}`: each name and the voice it stands for).
pub fn voices_json(catalog: &Catalog) -> String {
    let mut voices: Vec<String> = catalog.capabilities().voices.iter().map(|v| v.id.to_lowercase()).collect();
    voices.push("default".to_owned());
    voices.sort_unstable();
    voices.dedup();
    let aliases: serde_json::Map<String, serde_json::Value> = catalog
        .naming()
        .voice_aliases
        .iter()
        .map(|(alias, voice)| (alias.to_lowercase(), serde_json::Value::from(voice.to_lowercase())))
        .collect();
    // Our extension, beside the shape OpenAI-style clients read: each voice's language (BCP 47),
    // where the engine declares one.
    let languages: serde_json::Map<String, serde_json::Value> = catalog
        .capabilities()
        .voices
        .iter()
        .filter_map(|v| Some((v.id.to_lowercase(), serde_json::Value::from(v.language.clone()?))))
        .collect();
    let mut body = serde_json::json!({"voices": voices, "uploaded_voices": [], "aliases": aliases});
    if !languages.is_empty() {
        body["languages"] = serde_json::Value::Object(languages);
    }
    // And, where voices have them, their descriptions (a Piper voice's "joe (medium)": its name
    // and quality) and speakers.
    let per_voice = |field: fn(&crate::engine::Voice) -> Option<serde_json::Value>| {
        let map: serde_json::Map<String, serde_json::Value> =
            catalog.capabilities().voices.iter().filter_map(|v| Some((v.id.to_lowercase(), field(v)?))).collect();
        (!map.is_empty()).then_some(serde_json::Value::Object(map))
    };
    if let Some(descriptions) = per_voice(|v| v.description.clone().map(Into::into)) {
        body["descriptions"] = descriptions;
    }
    if let Some(speakers) = per_voice(|v| (!v.speakers.is_empty()).then(|| v.speakers.clone().into())) {
        body["speakers"] = speakers;
    }
    body.to_string()
}

/// The `Content-Type` of each format (docs/protocol.md §e.1).
pub fn media_type(format: ResponseFormat) -> &'static str {
    match format {
        ResponseFormat::Wav => "audio/wav",
        ResponseFormat::Pcm => "audio/pcm",
        ResponseFormat::Flac => "audio/flac",
        ResponseFormat::Mp3 => "audio/mpeg",
        ResponseFormat::Opus => "audio/ogg",
        ResponseFormat::Ulaw => "audio/PCMU",
        ResponseFormat::Alaw => "audio/PCMA",
        ResponseFormat::Aac => "audio/aac",
    }
}

/// What a request cost. Input tokens are the text's whitespace-separated words; output tokens
/// are audio frames at the engine's codec frame rate (12.5 Hz without a codec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// Whitespace-separated words of the input.
    pub input_text_tokens: u64,
    /// Frames of audio produced.
    pub output_tokens: u64,
}

impl Usage {
    /// The usage of `text` that gave `pcm_bytes` of s16le audio from an engine with
    /// `capabilities`.
    pub fn new(text: &str, pcm_bytes: u64, capabilities: &EngineCapabilities) -> Usage {
        let rate = capabilities.codec.as_ref().map_or(DEFAULT_TOKEN_RATE_HZ, |c| c.frame_rate_hz);
        let seconds = pcm_bytes as f64 / 2.0 / f64::from(capabilities.sample_rate.max(1));
        Usage {
            input_text_tokens: text.split_whitespace().count() as u64,
            output_tokens: (seconds * rate).ceil() as u64,
        }
    }

    /// Input and output tokens together.
    pub fn total(&self) -> u64 {
        self.input_text_tokens + self.output_tokens
    }

    /// The reference's usage headers on a non-streamed response.
    pub fn headers(&self) -> [(&'static str, u64); 5] {
        [
            ("x-vllm-omni-input-tokens", self.input_text_tokens),
            ("x-vllm-omni-output-tokens", self.output_tokens),
            ("x-vllm-omni-total-tokens", self.total()),
            ("x-vllm-omni-input-text-tokens", self.input_text_tokens),
            ("x-vllm-omni-input-audio-tokens", 0),
        ]
    }
}

fn sse_event(name: &str, data: &impl Serialize) -> String {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "{}".to_owned());
    format!("event: {name}\ndata: {data}\n\n")
}

/// One `speech.audio.delta` event carrying `audio` (the bytes of the raw stream: for wav the
/// first delta starts with the streaming header).
pub fn sse_delta(audio: &[u8], format: ResponseFormat) -> String {
    let audio = base64::engine::general_purpose::STANDARD.encode(audio);
    let data = serde_json::json!({"type": "speech.audio.delta", "audio": audio, "response_format": format.as_str()});
    sse_event("speech.audio.delta", &data)
}

/// The closing `speech.audio.done` event.
pub fn sse_done(usage: &Usage) -> String {
    let data = serde_json::json!({"type": "speech.audio.done", "usage": {
        "input_tokens": usage.input_text_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total(),
        "input_token_details": {"text_tokens": usage.input_text_tokens, "audio_tokens": 0},
    }});
    sse_event("speech.audio.done", &data)
}

/// A `speech.audio.error` event; `partial_audio` when deltas were already sent (the client
/// should discard them).
pub fn sse_error(message: &str, partial_audio: bool) -> String {
    let mut error = serde_json::json!({"message": message, "type": "server_error", "param": null, "code": 500});
    if partial_audio {
        error["partial_audio"] = true.into();
        error["action"] = "discard".into();
    }
    sse_event("speech.audio.error", &serde_json::json!({"type": "speech.audio.error", "error": error}))
}

/// The `X-Ignored-Fields` header value: the request fields the engine did not honour
/// ([`SynthesisRequest::ignored`]), comma-separated; `None` when there are none.
pub fn ignored_header(ignored: &[&str]) -> Option<String> {
    (!ignored.is_empty()).then(|| ignored.join(", "))
}

/// The `X-Word-Timestamps` header value: Python's `json.dumps` of the timings (ASCII-escaped,
/// default separators). `Err` holds the `X-Word-Timestamps-Omitted` value when it is too long.
pub fn word_timestamps_header(words: &[WordTiming]) -> Result<String, String> {
    let mut out = String::from("[");
    for (n, w) in words.iter().enumerate() {
        if n > 0 {
            out.push_str(", ");
        }
        out.push_str("{\"word\": ");
        push_ascii_json_str(&w.word, &mut out);
        let _ = write!(out, ", \"start_ms\": {}, \"end_ms\": {}", w.start_ms, w.end_ms);
        // Our extension: where the word is in the text sent.
        if let Some(c) = &w.chars {
            let _ = write!(out, ", \"chars\": [{}, {}]", c.start, c.end);
        }
        out.push('}');
    }
    out.push(']');
    if out.len() <= WORD_TIMESTAMPS_HEADER_LIMIT {
        Ok(out)
    } else {
        Err(format!("oversize; bytes={}; limit={WORD_TIMESTAMPS_HEADER_LIMIT}", out.len()))
    }
}

/// A JSON string with every non-ASCII char as `\uXXXX` (UTF-16 units), as `ensure_ascii` does.
fn push_ascii_json_str(s: &str, out: &mut String) {
    let quoted = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned());
    for c in quoted.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        }
    }
}

#[cfg(test)]
#[path = "speech_http_tests.rs"]
mod tests;
