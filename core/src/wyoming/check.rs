//! The [`WyomingSession`] invariants as an executable checker, and a driver that runs a session on
//! client events, raw bytes, engine events and timer ticks decoded from arbitrary bytes. Shared by
//! the property tests and the fuzz target. Not part of the API.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::frame::{encode, Decoder, FrameLimits};
use super::{Output, WyomingOptions, WyomingSession};
use crate::engine::{EngineCapabilities, EngineEvent, EngineEventKind, RequestId};
use crate::session::EngineCommand;
use crate::split::{Granularity, Splitter};

/// An answer the client is owed, in order.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Info,
    Pong,
    /// One audio cycle for this text (empty: no engine request).
    Cycle(String),
    Stopped,
}

/// Watches a session's outputs against the answers owed and reports the first broken invariant.
#[derive(Default)]
pub struct Checker {
    expected: VecDeque<Expect>,
    closed: bool,
    /// An `error` was sent: only the close (and aborts) may follow.
    failed: bool,
    decoder: Decoder,
    /// The open audio cycle's rate and the bytes of audio in it.
    cycle: Option<(u64, u64)>,
    /// Audio bytes the engine gave the request in flight.
    engine_bytes: u64,
    live: BTreeSet<RequestId>,
    seen: BTreeSet<RequestId>,
    /// Requests whose `RequestEnded` came.
    ended: BTreeSet<RequestId>,
}

impl Checker {
    fn owe(&mut self, expect: Expect) {
        self.expected.push_back(expect);
    }

    pub fn output(&mut self, output: &Output) -> Result<(), String> {
        if self.closed {
            return Err(format!("output after close: {output:?}"));
        }
        match output {
            Output::Close { .. } => {
                if !self.failed {
                    return Err("close without an error event".into());
                }
                self.closed = true;
            }
            Output::Dropped(_) => {}
            Output::RequestEnded { id, end } => {
                if !self.seen.contains(id) || !self.ended.insert(*id) {
                    return Err(format!("end of a request never submitted, or a second end: {id}"));
                }
                // An abort goes out before its end; an answer is taken (`answered`) before.
                if self.live.contains(id) {
                    return Err(format!("{end:?} end of request {id} while it is still live"));
                }
            }
            Output::Engine(EngineCommand::Synthesize { id, request }) => {
                if self.failed {
                    return Err("synthesize after an error".into());
                }
                if !self.seen.insert(*id) || !self.live.is_empty() {
                    return Err(format!("request {id} reused, or a second one in flight"));
                }
                match self.expected.front() {
                    Some(Expect::Cycle(text)) if *text == request.text && !text.is_empty() => {}
                    other => return Err(format!("synthesize {:?} but owed {other:?}", request.text)),
                }
                self.live.insert(*id);
                self.engine_bytes = 0;
            }
            Output::Engine(EngineCommand::Abort { id }) => {
                if !self.live.remove(id) {
                    return Err(format!("abort of a request that is not live: {id}"));
                }
            }
            Output::Write(bytes) => {
                if self.failed {
                    return Err("write after the error event".into());
                }
                self.decoder.push(bytes);
                let limits =
                    FrameLimits { max_header_bytes: 1 << 20, max_data_bytes: 1 << 24, max_payload_bytes: 1 << 24 };
                let event = self.decoder.next_event(&limits).map_err(|e| e.to_string())?.ok_or("partial event")?;
                if self.decoder.buffered() != 0 {
                    return Err("a write holds more than one event".into());
                }
                self.event(&event.kind, &Value::Object(event.data), event.payload_bytes as u64)?;
            }
        }
        Ok(())
    }

    fn event(&mut self, kind: &str, data: &Value, payload: u64) -> Result<(), String> {
        let owed = self.expected.front().cloned();
        match (kind, &owed, self.cycle) {
            ("error", _, _) => {
                if !data["text"].is_string() || !data["code"].is_string() {
                    return Err(format!("error without text and code: {data}"));
                }
                self.failed = true;
            }
            ("info", Some(Expect::Info), None) => {
                if data["tts"][0]["supports_synthesize_streaming"] != true {
                    return Err(format!("info without streaming: {data}"));
                }
                self.expected.pop_front();
            }
            ("pong", Some(Expect::Pong), None) => {
                self.expected.pop_front();
            }
            ("synthesize-stopped", Some(Expect::Stopped), None) => {
                self.expected.pop_front();
            }
            ("audio-start", Some(Expect::Cycle(_)), None) => {
                let rate = data["rate"].as_u64().ok_or("audio-start without rate")?;
                if data["width"] != 2 || data["channels"] != 1 || payload != 0 {
                    return Err(format!("audio-start format: {data}"));
                }
                self.cycle = Some((rate, 0));
            }
            ("audio-chunk", Some(Expect::Cycle(_)), Some((rate, bytes))) => {
                if data["rate"].as_u64() != Some(rate) || payload == 0 || !payload.is_multiple_of(2) {
                    return Err(format!("audio-chunk {data} with {payload} bytes in a {rate} Hz cycle"));
                }
                self.cycle = Some((rate, bytes + payload));
            }
            ("audio-stop", Some(Expect::Cycle(text)), Some((_, bytes))) => {
                if !self.live.is_empty() {
                    return Err("audio-stop while its request is in flight".into());
                }
                if !text.is_empty() && bytes != self.engine_bytes {
                    return Err(format!("cycle sent {bytes} bytes, the engine made {}", self.engine_bytes));
                }
                self.cycle = None;
                self.expected.pop_front();
            }
            _ => return Err(format!("{kind} when owed {owed:?}, cycle {:?}", self.cycle)),
        }
        Ok(())
    }

    /// The session accepted the engine's `Finished`/`Failed` for `id`.
    fn answered(&mut self, id: RequestId) -> Result<(), String> {
        if self.live.remove(&id) {
            Ok(())
        } else {
            Err(format!("accepted an answer for a request that is not live: {id}"))
        }
    }
}

const TEXTS: [&str; 8] =
    ["Hello world. ", "Dr. Smith paid 3.", "50 dollars", "! Then left. And", "", "   ", "你好。世界", "no end"];
const GARBAGE: [&[u8]; 6] = [
    b"{oops\n",
    b"[1,2]\n",
    b"{\"type\":\"synthesize\",\"data_length\":5}\n{\"te",
    b"{\"type\":\"x\",\"payload_length\":-3}\n",
    b"{\"type\":\"x\",\"data_length\":99999999}\n",
    b"{\"data\":{}}\n",
];

/// Run a session on the operations `data` encodes, checking every invariant. Each byte picks an
/// operation and the next one is its argument.
pub fn drive(data: &[u8]) -> Result<(), String> {
    let capabilities =
        Arc::new(EngineCapabilities { voices: vec!["a".into(), "b".into()], ..EngineCapabilities::new("m", 24_000) });
    let options = Arc::new(WyomingOptions {
        frame: FrameLimits { max_header_bytes: 256, max_data_bytes: 256, max_payload_bytes: 64 },
        max_text_chars: 40,
        max_queued_chars: 400,
        idle_timeout: Duration::from_secs(3),
        ..WyomingOptions::default()
    });
    let mut now = Instant::now();
    let mut session = WyomingSession::new(now, 1, capabilities, options);
    let mut checker = Checker::default();
    // The driver's model of the stream: the splitter the session should be running.
    let mut stream: Option<Splitter> = None;
    let mut garbled = false;
    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        let arg = bytes.next().unwrap_or(0);
        let text = TEXTS[usize::from(arg) % TEXTS.len()];
        let voice = match arg / 16 % 4 {
            0 => json!(null),
            1 => json!({"name": "a"}),
            2 => json!({"language": "en"}),
            _ => json!({"name": "b", "speaker": "x"}),
        };
        let event = match op % 12 {
            0 => {
                checker.owe(Expect::Info);
                Some(("describe", json!({})))
            }
            1 => {
                checker.owe(Expect::Pong);
                Some(("ping", json!({"text": text})))
            }
            2 => {
                if stream.is_none() {
                    checker.owe(Expect::Cycle(crate::text::py_strip(text).to_owned()));
                }
                Some(("synthesize", json!({"text": text, "voice": voice})))
            }
            3 => {
                if stream.is_none() {
                    stream = Some(Splitter::new(Granularity::Sentence));
                    Some(("synthesize-start", json!({"voice": voice})))
                } else {
                    None
                }
            }
            4 => {
                if let Some(splitter) = stream.as_mut() {
                    for unit in splitter.feed(text) {
                        checker.owe(Expect::Cycle(unit));
                    }
                    Some(("synthesize-chunk", json!({"text": text})))
                } else {
                    None
                }
            }
            5 => {
                if let Some(mut splitter) = stream.take() {
                    for unit in splitter.flush() {
                        checker.owe(Expect::Cycle(unit));
                    }
                    checker.owe(Expect::Stopped);
                    Some(("synthesize-stop", json!({})))
                } else {
                    None
                }
            }
            6 => Some(("select-program", json!({"name": "x"}))),
            7 => {
                let garbage = GARBAGE[usize::from(arg) % GARBAGE.len()];
                session.handle_bytes(now, garbage);
                // Bytes that may still be waiting for the rest of an event: what follows may
                // never be read as sent.
                garbled = true;
                None
            }
            8 => {
                if let Some(id) = checker.live.iter().next().copied() {
                    let pcm = vec![arg; usize::from(arg % 5) * 2];
                    checker.engine_bytes += pcm.len() as u64;
                    let sample_rate = if arg == 255 { 16_000 } else { 24_000 };
                    let _ = session
                        .handle_engine(now, EngineEvent { id, kind: EngineEventKind::Audio { pcm, sample_rate } });
                }
                None
            }
            9 => {
                if let Some(id) = checker.live.iter().next().copied() {
                    let kind =
                        if arg % 8 == 0 { EngineEventKind::Failed("boom".into()) } else { EngineEventKind::Finished };
                    if session.handle_engine(now, EngineEvent { id, kind }).is_ok() {
                        checker.answered(id)?;
                    }
                }
                None
            }
            10 => {
                now += Duration::from_millis(u64::from(arg) * 20);
                if session.poll_timeout().is_some_and(|t| t <= now) {
                    session.handle_timeout(now);
                }
                None
            }
            _ => {
                match arg % 8 {
                    0 => session.handle_closed(now),
                    1 => session.handle_shutdown(now),
                    _ => {
                        // An event of a request this session never made: an Err, no output.
                        let id = RequestId { connection: 9, utterance: u64::from(arg) };
                        if session.handle_engine(now, EngineEvent { id, kind: EngineEventKind::Finished }).is_ok() {
                            return Err("accepted an event for an unknown request".into());
                        }
                    }
                }
                None
            }
        };
        if let Some((kind, data)) = event {
            let data = serde_json::to_vec(&data).map_err(|e| e.to_string())?;
            let encoded = if arg % 2 == 0 {
                encode(kind, &data, &[])
            } else {
                // The data inline in the header, as older writers send it.
                format!("{{\"type\":\"{kind}\",\"data\":{}}}\n", String::from_utf8_lossy(&data)).into_bytes()
            };
            // Delivered in up to three pieces.
            let cut = encoded.len() * usize::from(arg % 3) / 3;
            session.handle_bytes(now, &encoded[..cut]);
            session.handle_bytes(now, &encoded[cut..]);
        }
        while let Some(output) = session.poll_output() {
            checker.output(&output)?;
        }
    }
    // The engine finishes whatever is still running.
    while let Some(id) = checker.live.iter().next().copied() {
        session
            .handle_engine(now, EngineEvent { id, kind: EngineEventKind::Finished })
            .map_err(|e| format!("{e:?}"))?;
        checker.answered(id)?;
        while let Some(output) = session.poll_output() {
            checker.output(&output)?;
        }
    }
    if let Some(id) = checker.seen.difference(&checker.ended).next() {
        return Err(format!("request {id} never ended"));
    }
    if !session.is_closed() && !garbled && !checker.expected.is_empty() {
        return Err(format!("answers still owed on an open session: {:?}", checker.expected));
    }
    Ok(())
}
