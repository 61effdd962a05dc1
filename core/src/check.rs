//! The `Session` invariants as an executable checker, and a driver that runs a
//! session on a sequence of client frames, engine events and timer ticks decoded
//! from arbitrary bytes. Shared by the property tests and the fuzz targets, so both
//! check the same rules. Not part of the protocol API.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::engine::{CodecFlags, CodecSpec, EngineCapabilities, EngineEvent, EngineEventKind, RequestId, WordTiming};
use crate::parse::Limits;
use crate::session::{ClientFrame, EngineCommand, Output, Session, SessionOptions};

/// Watches a session's inputs and outputs and reports the first broken invariant.
#[derive(Default)]
pub struct Checker {
    closed: bool,
    /// utterance_index of an `audio.start`/`codec.start` without its done yet.
    open: Option<(u64, bool)>,
    /// Audio bytes (or codec frames) sent since the open start.
    sent: u64,
    next_session_done: u64,
    session_dones: u64,
    /// Requests submitted and neither answered by the engine nor aborted.
    live: BTreeSet<RequestId>,
    seen: BTreeSet<RequestId>,
    /// Requests whose `RequestEnded` came.
    ended: BTreeSet<RequestId>,
}

fn field(v: &Value, key: &str) -> Result<u64, String> {
    v[key].as_u64().ok_or_else(|| format!("{key} missing in {v}"))
}

impl Checker {
    pub fn output(&mut self, output: &Output) -> Result<(), String> {
        if self.closed {
            return Err(format!("output after close: {output:?}"));
        }
        match output {
            Output::Close(_) => self.closed = true,
            Output::Binary(b) => {
                let Some((_, codec)) = self.open else { return Err("binary frame outside start/done".into()) };
                if codec {
                    let frame = crate::codec::unpack_frame(b, 16).map_err(|e| e.to_string())?;
                    self.sent += u64::from(frame.n_frames);
                } else {
                    self.sent += b.len() as u64;
                }
            }
            Output::Engine(EngineCommand::Synthesize { id, .. }) => {
                if !self.seen.insert(*id) {
                    return Err(format!("request id {id} reused"));
                }
                self.live.insert(*id);
            }
            Output::Engine(EngineCommand::Abort { id }) => {
                if !self.live.remove(id) {
                    return Err(format!("abort of a request that is not live: {id}"));
                }
            }
            Output::RequestEnded { id, end } => {
                if !self.seen.contains(id) || !self.ended.insert(*id) {
                    return Err(format!("end of a request never submitted, or a second end: {id}"));
                }
                // An abort goes out before its end; an answer is taken (`answered`) before.
                if self.live.contains(id) {
                    return Err(format!("{end:?} end of request {id} while it is still live"));
                }
            }
            Output::Encode { id, .. } => {
                if self.live.contains(id) || self.open.is_none() {
                    return Err(format!("encoding for {id} before its engine request ended, or outside an utterance"));
                }
            }
            Output::Text(t) => {
                let v: Value = serde_json::from_str(t).map_err(|e| format!("invalid JSON out: {e}: {t}"))?;
                self.json(&v)?;
            }
        }
        Ok(())
    }

    fn json(&mut self, v: &Value) -> Result<(), String> {
        let kind = v["type"].as_str().unwrap_or_default();
        match kind {
            "audio.start" | "codec.start" => {
                if self.open.is_some() {
                    return Err(format!("{kind} while another is open"));
                }
                let u = field(v, "utterance_index")?;
                if u != self.next_session_done {
                    return Err(format!("{kind} for utterance {u}, expected {}", self.next_session_done));
                }
                self.open = Some((u, kind == "codec.start"));
                self.sent = 0;
            }
            "audio.chunk" => {
                let Some((_, false)) = self.open else { return Err("audio.chunk outside audio.start/done".into()) };
                let b64 = v["audio_b64"].as_str().ok_or("audio_b64 missing")?;
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| e.to_string())?;
                self.sent += bytes.len() as u64;
            }
            "audio.done" | "codec.done" => {
                let Some((u, codec)) = self.open.take() else { return Err(format!("{kind} without start")) };
                if codec != (kind == "codec.done") || field(v, "utterance_index")? != u {
                    return Err(format!("{kind} does not match its start"));
                }
                let total = if codec { field(v, "total_frames")? } else { field(v, "total_bytes")? };
                if total != self.sent {
                    return Err(format!("{kind} total {total} but {} sent", self.sent));
                }
            }
            "session.done" => {
                if self.open.is_some() {
                    return Err("session.done inside an open utterance".into());
                }
                let u = field(v, "utterance_index")?;
                if u != self.next_session_done {
                    return Err(format!("session.done {u}, expected {}", self.next_session_done));
                }
                self.next_session_done += 1;
                self.session_dones += 1;
            }
            "error" | "input.cancelled" => {}
            other => return Err(format!("unexpected message type {other}")),
        }
        Ok(())
    }

    /// The engine answered a request (`Finished` or `Failed` accepted by the session).
    pub fn answered(&mut self, id: RequestId) -> Result<(), String> {
        if self.live.remove(&id) {
            Ok(())
        } else {
            Err(format!("session accepted an answer for a request that is not live: {id}"))
        }
    }

    /// Every request submitted has had its `RequestEnded`.
    pub fn all_ended(&self) -> Result<(), String> {
        match self.seen.difference(&self.ended).next() {
            Some(id) => Err(format!("request {id} never ended")),
            None => Ok(()),
        }
    }

    pub fn live_request(&self) -> Option<RequestId> {
        self.live.iter().next().copied()
    }

    pub fn session_dones(&self) -> u64 {
        self.session_dones
    }
}

const CONFIGS: [&str; 11] = [
    r#"{"type":"session.config"}"#,
    r#"{"type":"session.config","voice":"a","stream_audio":true,"response_format":"pcm"}"#,
    r#"{"type":"session.config","stream_audio":true,"response_format":"pcm","word_timestamps":true}"#,
    r#"{"type":"session.config","output_mode":"codec_tokens","stream_audio":true,"response_format":"pcm"}"#,
    r#"{"type":"session.config","response_format":"flac","speed":0.5,"instructions":"whisper"}"#,
    r#"{"type":"session.config","stream_audio":true}"#,
    r#"{"type":"session.config","seed":99999999999999999999}"#,
    r#"{"type":"session.config","model":"nope"}"#,
    // Upstream's sentence units, the commitment segments, another rate.
    r#"{"type":"session.config","split_granularity":"sentence","stream_audio":true,"response_format":"pcm"}"#,
    r#"{"type":"session.config","text_input_mode":"commitment","language":"English"}"#,
    r#"{"type":"session.config","sample_rate":8000,"stream_audio":true,"response_format":"pcm","word_timestamps":true}"#,
];
const MESSAGES: [&str; 9] = [
    r#"{"type":"input.text","text":"Hello world. "}"#,
    r#"{"type":"input.text","text":"  "}"#,
    r#"{"type":"input.done"}"#,
    r#"{"type":"input.done"}"#,
    r#"{"type":"input.cancel"}"#,
    r#"{"type":"session.close"}"#,
    r#"{"type":"bogus"}"#,
    r#"{"type":"input.text","text":1}"#,
    "{oops",
];

/// Run a session on the operations `data` encodes, checking every invariant.
/// Each byte picks an operation; some take the next byte as an argument.
pub fn drive(data: &[u8]) -> Result<(), String> {
    let caps = Arc::new(EngineCapabilities {
        word_timestamps: true,
        codec: Some(CodecSpec {
            codebooks: 16,
            codebook_size: 2048,
            frame_rate_hz: 12.5,
            sample_rate: 24_000,
            decoder_id: None,
        }),
        // Refused in the core: an utterance that fails before it reaches the engine.
        instructions: false,
        ..EngineCapabilities::new("hibari", 24_000)
    });
    let options = Arc::new(SessionOptions {
        limits: Limits { max_text_message_chars: 64, max_config_message_chars: 256 },
        idle_timeout: Duration::from_secs(3),
        config_timeout: Duration::from_secs(2),
        max_buffered_chars: 40,
        // Room for a few held-back messages, so that dropping what does not fit is driven too.
        max_deferred_bytes: 3 * (crate::session::DEFERRED_MESSAGE_OVERHEAD + 24),
        max_whole_audio_seconds: 1,
    });
    let mut now = Instant::now();
    let mut session = Session::new(now, 1, caps, options);
    let mut checker = Checker::default();
    let mut input_dones_after_config = 0u64;
    let mut configured = false;
    // The peer left: the session then sends nothing, so an open utterance stays open.
    let mut peer_gone = false;
    // The last operation sent an input.done that was counted above.
    let mut counted_input_done = false;
    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        let arg = bytes.next().unwrap_or(0);
        match op % 8 {
            0 => {
                let i = usize::from(arg) % CONFIGS.len();
                // Entries 5 and 7 are refused; the others are valid configs.
                if i != 5 && i != 7 && !session.is_closed() {
                    configured = true;
                }
                session.handle_client(now, ClientFrame::Text(CONFIGS[i].to_owned()));
            }
            1 | 2 => {
                let m = MESSAGES[usize::from(arg) % MESSAGES.len()];
                if m.contains("input.done") && configured && !session.is_closed() {
                    input_dones_after_config += 1;
                    counted_input_done = true;
                }
                session.handle_client(now, ClientFrame::Text(m.to_owned()));
            }
            3 => {
                if let Some(id) = checker.live_request() {
                    let pcm = vec![arg; usize::from(arg % 7) * 2];
                    let kind = match arg % 4 {
                        0 => EngineEventKind::Codec {
                            codes: vec![i32::from(arg) * 3; 16 * usize::from(arg % 3)],
                            flags: CodecFlags { eos: arg % 5 == 0, segment_end: arg % 7 == 0, reset: arg % 11 == 0 },
                        },
                        1 => EngineEventKind::Words(vec![WordTiming {
                            word: "w".into(),
                            start_ms: i64::from(arg),
                            end_ms: 300,
                            chars: None,
                        }]),
                        _ => EngineEventKind::Audio { pcm, sample_rate: if arg == 255 { 16_000 } else { 24_000 } },
                    };
                    let _ = session.handle_engine(now, EngineEvent { id, kind });
                }
            }
            4 => {
                if let Some(id) = checker.live_request() {
                    let kind =
                        if arg % 4 == 0 { EngineEventKind::Failed("boom".into()) } else { EngineEventKind::Finished };
                    if session.handle_engine(now, EngineEvent { id, kind }).is_ok() {
                        checker.answered(id)?;
                    }
                }
            }
            5 => {
                now += Duration::from_millis(u64::from(arg) * 20);
                if session.poll_timeout().is_some_and(|t| t <= now) {
                    session.handle_timeout(now);
                }
            }
            6 => {
                if arg % 16 == 0 {
                    peer_gone |= !session.is_closed();
                    session.handle_client(now, ClientFrame::Closed);
                } else if arg % 16 == 1 {
                    // The server's shutdown: unlike a vanished peer, it must still end the
                    // utterance in flight with its done, now or when the grace (0-3 s) is over.
                    session.begin_shutdown(now, Duration::from_millis(u64::from(arg % 4) * 1000));
                } else {
                    session.handle_client(now, ClientFrame::Binary(vec![arg]));
                }
            }
            _ => {
                // An event for a request the session never had is the caller's bug: an Err, no output.
                let id = RequestId { connection: 99, utterance: u64::from(arg) };
                if session.handle_engine(now, EngineEvent { id, kind: EngineEventKind::Finished }).is_ok() {
                    return Err("accepted an event for an unknown request".into());
                }
            }
        }
        while let Some(output) = session.poll_output() {
            checker.output(&output)?;
            if let Output::Encode { id, job } = output {
                session.handle_encoded(now, id, job.run()).map_err(|e| format!("encoded file refused: {e:?}"))?;
                continue;
            }
            // An input.done held back past the byte budget is refused, so it gets no session.done.
            if let (true, Output::Text(text)) = (counted_input_done, &output) {
                if text.contains("Held input exceeds") {
                    input_dones_after_config -= 1;
                }
            }
        }
        counted_input_done = false;
    }
    // Let the engine answer whatever is still running, then check the totals.
    while let Some(id) = checker.live_request() {
        session
            .handle_engine(now, EngineEvent { id, kind: EngineEventKind::Finished })
            .map_err(|e| format!("{e:?}"))?;
        checker.answered(id)?;
        while let Some(output) = session.poll_output() {
            checker.output(&output)?;
            if let Output::Encode { id, job } = output {
                session.handle_encoded(now, id, job.run()).map_err(|e| format!("encoded file refused: {e:?}"))?;
            }
        }
    }
    if checker.open.is_some() && !peer_gone {
        return Err("utterance left open".into());
    }
    checker.all_ended()?;
    if !session.is_closed() && checker.session_dones() != input_dones_after_config {
        return Err(format!("{} input.done but {} session.done", input_dones_after_config, checker.session_dones()));
    }
    Ok(())
}

/// The parser fuzz body: any bytes, as text, through the frame checks and the
/// config validation, under default and tiny limits; none of it may panic, and
/// what parses must render.
pub fn parse_any(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for limits in [Limits::default(), Limits { max_text_message_chars: 16, max_config_message_chars: 48 }] {
        if let Ok(crate::parse::ClientMessage::SessionConfig(object)) = crate::parse::parse_client_text(&text, &limits)
        {
            let _ = crate::config::validate_session_config(&object);
        }
    }
    if let Ok(value) = crate::json::parse(&text) {
        let _ = (value.py_str(), value.py_repr());
    }
}
