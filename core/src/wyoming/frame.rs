//! Wyoming's framing, as the `wyoming` package (1.10) reads and writes it: one event is a JSON
//! header line (`type`, optional `data`, `data_length`, `payload_length`, `version`), then
//! `data_length` bytes of JSON merged over the header's `data`, then `payload_length` bytes of
//! payload. The decoder takes socket bytes in any split and holds at most the configured limits.

use serde_json::{Map, Value};

/// The `version` written into every header: the `wyoming` release whose protocol this follows.
pub const WYOMING_VERSION: &str = "1.10.2";

/// How large a client's event may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    /// Longest header line, newline included (the reference reads it with asyncio's default
    /// 64 KiB line limit).
    pub max_header_bytes: usize,
    /// Largest `data_length`.
    pub max_data_bytes: usize,
    /// Largest `payload_length` (a TTS server reads no payload; it is skipped).
    pub max_payload_bytes: usize,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits { max_header_bytes: 64 * 1024, max_data_bytes: 1 << 20, max_payload_bytes: 1 << 20 }
    }
}

/// One decoded event: its type and merged data (the payload is dropped).
#[derive(Clone, Debug, PartialEq)]
pub struct RawEvent {
    /// The event's `type`.
    pub kind: String,
    /// The header's `data` with the data block merged over it.
    pub data: Map<String, Value>,
    /// How many payload bytes it carried.
    pub payload_bytes: usize,
}

/// Why the client's bytes are not Wyoming events; fatal for the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// A header line past the limit.
    HeaderTooLong(usize),
    /// The header is not a JSON object, or a field has the wrong type.
    BadHeader(String),
    /// `data_length` or `payload_length` past its limit.
    TooLarge {
        /// `data_length` or `payload_length`.
        field: &'static str,
        /// What the header said.
        length: u64,
        /// The limit.
        limit: usize,
    },
    /// The data block is not a JSON object.
    BadData(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::HeaderTooLong(limit) => write!(f, "event header line longer than {limit} bytes"),
            FrameError::BadHeader(why) => write!(f, "invalid event header: {why}"),
            FrameError::TooLarge { field, length, limit } => {
                write!(f, "{field} {length} is larger than the limit of {limit} bytes")
            }
            FrameError::BadData(why) => write!(f, "invalid event data: {why}"),
        }
    }
}

struct Pending {
    kind: String,
    data: Map<String, Value>,
    data_length: usize,
    payload_length: usize,
}

/// Turns socket bytes into events.
#[derive(Default)]
pub(crate) struct Decoder {
    buffer: Vec<u8>,
    /// Bytes of `buffer` already searched for the end of the header line.
    searched: usize,
    pending: Option<Pending>,
}

impl Decoder {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Bytes received that are not yet part of a whole event.
    pub(crate) fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// The next whole event, `Ok(None)` until more bytes arrive.
    pub(crate) fn next_event(&mut self, limits: &FrameLimits) -> Result<Option<RawEvent>, FrameError> {
        if self.pending.is_none() {
            let Some(end) = self.buffer[self.searched..].iter().position(|&b| b == b'\n') else {
                self.searched = self.buffer.len();
                if self.buffer.len() >= limits.max_header_bytes {
                    return Err(FrameError::HeaderTooLong(limits.max_header_bytes));
                }
                return Ok(None);
            };
            let end = self.searched + end;
            if end + 1 > limits.max_header_bytes {
                return Err(FrameError::HeaderTooLong(limits.max_header_bytes));
            }
            let pending = parse_header(&self.buffer[..end], limits)?;
            self.buffer.drain(..=end);
            self.searched = 0;
            self.pending = Some(pending);
        }
        let Some(pending) = self.pending.as_ref() else { return Ok(None) };
        let body = pending.data_length + pending.payload_length;
        if self.buffer.len() < body {
            return Ok(None);
        }
        let Some(Pending { kind, mut data, data_length, payload_length }) = self.pending.take() else {
            return Ok(None);
        };
        if data_length > 0 {
            match serde_json::from_slice::<Value>(&self.buffer[..data_length]) {
                Ok(Value::Object(block)) => data.extend(block),
                Ok(other) => {
                    return Err(FrameError::BadData(format!("expected a JSON object, got {}", kind_of(&other))))
                }
                Err(e) => return Err(FrameError::BadData(e.to_string())),
            }
        }
        self.buffer.drain(..body);
        Ok(Some(RawEvent { kind, data, payload_bytes: payload_length }))
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn length(header: &Map<String, Value>, field: &'static str, limit: usize) -> Result<usize, FrameError> {
    match header.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => {
            let Some(length) = n.as_u64() else {
                return Err(FrameError::BadHeader(format!("{field} must be a whole number of bytes, got {n}")));
            };
            if length > limit as u64 {
                return Err(FrameError::TooLarge { field, length, limit });
            }
            Ok(length as usize)
        }
        Some(other) => Err(FrameError::BadHeader(format!("{field} must be a number, got {}", kind_of(other)))),
    }
}

fn parse_header(line: &[u8], limits: &FrameLimits) -> Result<Pending, FrameError> {
    let header = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(header)) => header,
        Ok(other) => return Err(FrameError::BadHeader(format!("expected a JSON object, got {}", kind_of(&other)))),
        Err(e) => return Err(FrameError::BadHeader(e.to_string())),
    };
    let kind = match header.get("type") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.clone(),
        Some(Value::String(_)) => return Err(FrameError::BadHeader("type is empty".to_owned())),
        Some(other) => return Err(FrameError::BadHeader(format!("type must be a string, got {}", kind_of(other)))),
        None => return Err(FrameError::BadHeader("no type".to_owned())),
    };
    let data = match header.get("data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(data)) => data.clone(),
        Some(other) => return Err(FrameError::BadHeader(format!("data must be an object, got {}", kind_of(other)))),
    };
    let data_length = length(&header, "data_length", limits.max_data_bytes)?;
    let payload_length = length(&header, "payload_length", limits.max_payload_bytes)?;
    Ok(Pending { kind, data, data_length, payload_length })
}

/// One event as the reference writes it: the header line, the data block, the payload.
pub(crate) fn encode(kind: &str, data: &[u8], payload: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(96 + data.len() + payload.len());
    // `kind` is one of our own ASCII event names: no escaping needed.
    let _ = write!(out, r#"{{"type":"{kind}","version":"{WYOMING_VERSION}""#);
    if !data.is_empty() {
        let _ = write!(out, r#","data_length":{}"#, data.len());
    }
    if !payload.is_empty() {
        let _ = write!(out, r#","payload_length":{}"#, payload.len());
    }
    out.extend_from_slice(b"}\n");
    out.extend_from_slice(data);
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8], step: usize) -> Result<Vec<RawEvent>, FrameError> {
        let mut decoder = Decoder::default();
        let mut events = Vec::new();
        for piece in bytes.chunks(step.max(1)) {
            decoder.push(piece);
            while let Some(event) = decoder.next_event(&FrameLimits::default())? {
                events.push(event);
            }
        }
        Ok(events)
    }

    #[test]
    fn reads_what_the_reference_writes_in_any_split() {
        let mut bytes = encode("synthesize", br#"{"text":"Hi."}"#, b"");
        bytes.extend(encode("audio-chunk", br#"{"rate":1}"#, &[1, 2, 3]));
        bytes.extend(br#"{"type":"describe","data":{"a":1}}"#);
        bytes.push(b'\n');
        for step in [1, 2, 7, 1000] {
            let events = decode_all(&bytes, step).expect("decodes");
            assert_eq!(events.len(), 3);
            assert_eq!(events[0].kind, "synthesize");
            assert_eq!(events[0].data["text"], "Hi.");
            assert_eq!((events[1].kind.as_str(), events[1].payload_bytes), ("audio-chunk", 3));
            assert_eq!(events[2].data["a"], 1);
        }
    }

    #[test]
    fn the_data_block_overrides_the_header_data() {
        let mut bytes = br#"{"type":"synthesize","data":{"text":"old","keep":true},"data_length":14}"#.to_vec();
        bytes.extend(b"\n{\"text\":\"new\"}");
        let events = decode_all(&bytes, 3).expect("decodes");
        assert_eq!((events[0].data["text"].as_str(), events[0].data["keep"].as_bool()), (Some("new"), Some(true)));
    }

    #[test]
    fn bad_headers_are_errors() {
        for (line, want) in [
            (&b"not json\n"[..], "invalid event header"),
            (b"[1]\n", "expected a JSON object, got an array"),
            (b"{\"data\":{}}\n", "no type"),
            (b"{\"type\":3}\n", "type must be a string"),
            (b"{\"type\":\"x\",\"data_length\":-1}\n", "whole number"),
            (b"{\"type\":\"x\",\"payload_length\":\"9\"}\n", "must be a number"),
            (b"{\"type\":\"x\",\"data_length\":99999999999}\n", "data_length 99999999999 is larger"),
            (b"{\"type\":\"x\",\"data_length\":2}\n[]", "invalid event data"),
        ] {
            let error = decode_all(line, 4).expect_err("an error").to_string();
            assert!(error.contains(want), "{error:?} for {:?}", String::from_utf8_lossy(line));
        }
        let long = vec![b' '; 70 * 1024];
        assert_eq!(decode_all(&long, 4096), Err(FrameError::HeaderTooLong(64 * 1024)));
    }

    #[test]
    fn encodes_like_the_reference() {
        let bytes = encode("audio-stop", br#"{"timestamp":null}"#, b"");
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "{\"type\":\"audio-stop\",\"version\":\"1.10.2\",\"data_length\":18}\n{\"timestamp\":null}"
        );
        assert_eq!(encode("pong", b"", b""), b"{\"type\":\"pong\",\"version\":\"1.10.2\"}\n");
    }
}
