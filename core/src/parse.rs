//! Client text frames: the reference's checks, in the reference's order (docs/protocol.md §b.1),
//! then dispatch on `type`.

use crate::json::{self, Object, Value};

/// Message size limits, in characters (Unicode scalar values), as the reference counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest message other than `session.config` (the reference's 128 Ki).
    pub max_text_message_chars: usize,
    /// Largest `session.config` (the reference's 4 Mi).
    pub max_config_message_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_text_message_chars: 128 * 1024, max_config_message_chars: 4 * 1024 * 1024 }
    }
}

/// Why a client frame was rejected; `message` is the exact string clients see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// Over both limits.
    TooLarge,
    /// Not JSON.
    InvalidJson,
    /// JSON, but not an object.
    NotAnObject,
    /// A `session.config` over its limit.
    ConfigTooLarge,
    /// Any other message over its limit.
    TextTooLarge,
}

impl ParseError {
    /// The `message` of the `error` frame the client gets.
    pub fn message(self) -> &'static str {
        match self {
            ParseError::TooLarge => "WebSocket message too large",
            ParseError::InvalidJson => "Invalid JSON message",
            ParseError::NotAnObject => "WebSocket messages must be JSON objects",
            ParseError::ConfigTooLarge => "session.config message too large",
            ParseError::TextTooLarge => "input.text message too large",
        }
    }
}

/// A client message after the frame checks, dispatched on its `type`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ClientMessage {
    /// The whole object, `type` included (validation ignores it).
    SessionConfig(Object),
    /// `None` when `text` is present but not a string.
    InputText(Option<String>),
    /// `input.done`: synthesize the buffered text.
    InputDone,
    /// `input.cancel`: drop the buffered text, or stop the utterance generating. Ours: it may
    /// say how much of the utterance's audio the client played (`played_ms` or
    /// `played_bytes`), and then the cancelled utterance's `audio.done` says what was heard;
    /// `Err` is what the client is told about a bad value (the cancel happens regardless).
    InputCancel(Result<Option<Played>, String>),
    /// `session.close`.
    SessionClose,
    /// `input.commit` (upstream's open-PR `streaming_mode: "sentence_commit"`; an unknown type
    /// otherwise): the whole object, for its `commit_id`.
    InputCommit(Object),
    /// Any other type, as Python's `str()` renders it (`None` when missing).
    Other(String),
}

/// Length in characters, counted only when the byte length could exceed `limit`
/// (a string never has more characters than bytes).
fn exceeds(raw: &str, limit: usize) -> bool {
    raw.len() > limit && raw.chars().count() > limit
}

/// Check a client text frame against `limits` and read its `type`, with the reference's
/// checks in its order; `Err` is what the client is told.
pub fn parse_client_text(raw: &str, limits: &Limits) -> Result<ClientMessage, ParseError> {
    let config_limit = limits.max_config_message_chars;
    let text_limit = limits.max_text_message_chars;
    if exceeds(raw, config_limit.max(text_limit)) {
        return Err(ParseError::TooLarge);
    }
    let mut obj = match json::parse(raw) {
        Ok(Value::Object(obj)) => obj,
        Ok(_) => return Err(ParseError::NotAnObject),
        Err(_) => return Err(ParseError::InvalidJson),
    };
    let kind = match obj.get("type") {
        Some(Value::Str(s)) => s.as_str(),
        _ => "",
    };
    if kind == "session.config" {
        if exceeds(raw, config_limit) {
            return Err(ParseError::ConfigTooLarge);
        }
        return Ok(ClientMessage::SessionConfig(obj));
    }
    if exceeds(raw, text_limit) {
        return Err(ParseError::TextTooLarge);
    }
    Ok(match kind {
        "input.text" => ClientMessage::InputText(take_text(&mut obj)),
        "input.done" => ClientMessage::InputDone,
        "input.cancel" => ClientMessage::InputCancel(played(&obj)),
        "session.close" => ClientMessage::SessionClose,
        "input.commit" => ClientMessage::InputCommit(obj),
        _ => ClientMessage::Other(obj.get("type").map_or_else(|| "None".to_owned(), Value::py_str)),
    })
}

/// How much of the current utterance's audio a client played before it cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Played {
    /// Milliseconds from the utterance's first audio.
    Ms(u64),
    /// Bytes of the utterance's audio (as received: PCM at the stream's rate).
    Bytes(u64),
}

/// `input.cancel`'s `played_ms` or `played_bytes` (absent or `null`: not told).
fn played(obj: &Object) -> Result<Option<Played>, String> {
    let amount = |key: &str| -> Result<Option<u64>, String> {
        let bad = || format!("input.cancel: {key} must be a non-negative number");
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Int(i)) => i.to_i64().and_then(|v| u64::try_from(v).ok()).map(Some).ok_or_else(bad),
            Some(Value::Float(f)) if f.is_finite() && *f >= 0.0 && key == "played_ms" => Ok(Some(*f as u64)),
            Some(_) => Err(bad()),
        }
    };
    match (amount("played_ms")?, amount("played_bytes")?) {
        (Some(_), Some(_)) => Err("input.cancel: give played_ms or played_bytes, not both".to_owned()),
        (Some(ms), None) => Ok(Some(Played::Ms(ms))),
        (None, Some(bytes)) => Ok(Some(Played::Bytes(bytes))),
        (None, None) => Ok(None),
    }
}

/// `msg.get("text", "")`, taken out of the object without copying.
fn take_text(obj: &mut Object) -> Option<String> {
    match obj.0.iter_mut().find(|(k, _)| k == "text") {
        None => Some(String::new()),
        Some((_, Value::Str(s))) => Some(std::mem::take(s)),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<ClientMessage, ParseError> {
        parse_client_text(raw, &Limits::default())
    }

    #[test]
    fn dispatches_types() {
        assert_eq!(parse(r#"{"type": "input.done"}"#), Ok(ClientMessage::InputDone));
        assert_eq!(parse(r#"{"type":"input.cancel"}"#), Ok(ClientMessage::InputCancel(Ok(None))));
        assert_eq!(
            parse(r#"{"type":"input.cancel","played_ms":1234.9}"#),
            Ok(ClientMessage::InputCancel(Ok(Some(Played::Ms(1234)))))
        );
        assert_eq!(
            parse(r#"{"type":"input.cancel","played_bytes":4800}"#),
            Ok(ClientMessage::InputCancel(Ok(Some(Played::Bytes(4800)))))
        );
        for bad in
            [r#""played_ms":-1"#, r#""played_bytes":1.5"#, r#""played_ms":"5""#, r#""played_ms":1,"played_bytes":2"#]
        {
            let message = parse(&format!(r#"{{"type":"input.cancel",{bad}}}"#));
            assert!(matches!(message, Ok(ClientMessage::InputCancel(Err(_)))), "{bad}: {message:?}");
        }
        assert_eq!(parse(r#"{"type":"session.close"}"#), Ok(ClientMessage::SessionClose));
        assert_eq!(parse(r#"{"type":"input.text","text":"hi "}"#), Ok(ClientMessage::InputText(Some("hi ".into()))));
        assert_eq!(parse(r#"{"type":"input.text"}"#), Ok(ClientMessage::InputText(Some(String::new()))));
        assert_eq!(parse(r#"{"type":"input.text","text":123}"#), Ok(ClientMessage::InputText(None)));
        assert_eq!(parse(r#"{"type":"input.text","text":null}"#), Ok(ClientMessage::InputText(None)));
        assert!(matches!(parse(r#"{"type":"session.config","voice":"x"}"#), Ok(ClientMessage::SessionConfig(_))));
    }

    #[test]
    fn other_types_render_as_python_str() {
        assert_eq!(parse(r#"{"type":"unknown"}"#), Ok(ClientMessage::Other("unknown".into())));
        assert_eq!(parse(r#"{}"#), Ok(ClientMessage::Other("None".into())));
        assert_eq!(parse(r#"{"type":true}"#), Ok(ClientMessage::Other("True".into())));
        assert_eq!(parse(r#"{"type":5}"#), Ok(ClientMessage::Other("5".into())));
        assert_eq!(parse(r#"{"type":[1]}"#), Ok(ClientMessage::Other("[1]".into())));
        assert_eq!(parse(r#"{"type":{"a":1}}"#), Ok(ClientMessage::Other("{'a': 1}".into())));
    }

    #[test]
    fn rejects_in_reference_order() {
        assert_eq!(parse("not json"), Err(ParseError::InvalidJson));
        assert_eq!(parse("[1,2]"), Err(ParseError::NotAnObject));
        assert_eq!(parse("\"s\""), Err(ParseError::NotAnObject));
        let small = Limits { max_text_message_chars: 32, max_config_message_chars: 64 };
        let text = format!(r#"{{"type": "input.text", "text": "{}"}}"#, "x".repeat(128));
        assert_eq!(parse_client_text(&text, &small), Err(ParseError::TooLarge));
        let small = Limits { max_text_message_chars: 131_072, max_config_message_chars: 64 };
        let config = format!(r#"{{"type": "session.config", "ref_audio": "{}"}}"#, "x".repeat(512));
        assert_eq!(parse_client_text(&config, &small), Err(ParseError::ConfigTooLarge));
        let small = Limits { max_text_message_chars: 32, max_config_message_chars: 4096 };
        assert_eq!(parse_client_text(&text, &small), Err(ParseError::TextTooLarge));
        // Size checks come after the JSON check for the per-type limits.
        assert_eq!(parse_client_text(&format!("[{}]", "1,".repeat(40) + "1"), &small), Err(ParseError::NotAnObject));
        // Limits apply to any non-config type, and `input.done` of 22 chars fits in 32.
        assert_eq!(parse_client_text(r#"{"type": "input.done"}"#, &small), Ok(ClientMessage::InputDone));
    }

    #[test]
    fn limits_count_characters_not_bytes() {
        let limits = Limits { max_text_message_chars: 48, max_config_message_chars: 48 };
        // 41 characters, 61 bytes: fits by characters, not by bytes.
        let raw = format!(r#"{{"type":"input.text","text":"{}"}}"#, "\u{3042}".repeat(10));
        assert!(raw.len() > 48 && raw.chars().count() <= 48);
        assert!(parse_client_text(&raw, &limits).is_ok());
    }
}
