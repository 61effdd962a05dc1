//! A hand-driven harness around `Session` for the core's tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use speechstream_core::engine::{
    CodecSpec, EngineCapabilities, EngineEvent, EngineEventKind, RequestId, SynthesisRequest, WordTiming,
};
use speechstream_core::session::{ClientFrame, EngineCommand, Output, Session, SessionOptions};

pub fn capabilities(word_timestamps: bool, codec: bool) -> EngineCapabilities {
    // Any voice: the tests name several; the voice rules have tests of their own.
    let caps = EngineCapabilities::new("hibari", 24_000).with_word_timestamps(word_timestamps);
    match codec {
        true => caps.with_codec(CodecSpec::new(16, 2048, 12.5, 24_000).with_decoder_id("d")),
        false => caps,
    }
}

/// What came out of the session, decoded.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    Json(Value),
    Binary(Vec<u8>),
    Synthesize(RequestId, SynthesisRequest),
    Abort(RequestId),
    Close(u16),
}

pub struct Harness {
    pub session: Session,
    pub now: Instant,
    pub out: Vec<Out>,
}

impl Harness {
    pub fn new(caps: impl Into<speechstream_core::catalog::Catalog>, options: SessionOptions) -> Harness {
        let now = Instant::now();
        Harness { session: Session::new(now, 7, caps, Arc::new(options)), now, out: Vec::new() }
    }

    pub fn default() -> Harness {
        Harness::new(capabilities(false, false), SessionOptions::default())
    }

    fn drain(&mut self) {
        while let Some(o) = self.session.poll_output() {
            self.out.push(match o {
                // Encoded at once, as a driver would off its event loop; the file follows.
                Output::Encode { id, job } => {
                    self.session.handle_encoded(self.now, id, job.run()).expect("the utterance waits for its file");
                    continue;
                }
                Output::Text(t) => Out::Json(serde_json::from_str(&t).expect("session emits valid JSON")),
                Output::Binary(b) => Out::Binary(b),
                Output::Engine(EngineCommand::Synthesize { id, request }) => Out::Synthesize(id, request),
                Output::Engine(EngineCommand::Abort { id }) => Out::Abort(id),
                Output::Close(c) => Out::Close(c),
                // The engine requests' ends: checked by the invariant checker and their own test.
                Output::RequestEnded { .. } => continue,
            });
        }
    }

    pub fn send(&mut self, json: &str) -> &mut Self {
        self.session.handle_client(self.now, ClientFrame::Text(json.to_owned()));
        self.drain();
        self
    }

    pub fn send_frame(&mut self, frame: ClientFrame) -> &mut Self {
        self.session.handle_client(self.now, frame);
        self.drain();
        self
    }

    pub fn engine(&mut self, id: RequestId, kind: EngineEventKind) -> &mut Self {
        self.session.handle_engine(self.now, EngineEvent { id, kind }).expect("event for a live request");
        self.drain();
        self
    }

    pub fn audio(&mut self, id: RequestId, pcm: &[u8], rate: u32) -> &mut Self {
        self.engine(id, EngineEventKind::Audio { pcm: pcm.to_vec(), sample_rate: rate })
    }

    pub fn words(&mut self, id: RequestId, words: &[(&str, i64, i64)]) -> &mut Self {
        let words =
            words.iter().map(|&(w, s, e)| WordTiming { word: w.into(), start_ms: s, end_ms: e, chars: None }).collect();
        self.engine(id, EngineEventKind::Words(words))
    }

    /// The server's shutdown with its grace already over.
    pub fn shutdown(&mut self) -> &mut Self {
        self.session.begin_shutdown(self.now, Duration::ZERO);
        self.drain();
        self
    }

    /// The server's shutdown, with `grace` for the utterance in flight.
    pub fn begin_shutdown(&mut self, grace: Duration) -> &mut Self {
        self.session.begin_shutdown(self.now, grace);
        self.drain();
        self
    }

    pub fn advance(&mut self, d: Duration) -> &mut Self {
        self.now += d;
        if self.session.poll_timeout().is_some_and(|t| t <= self.now) {
            self.session.handle_timeout(self.now);
            self.drain();
        }
        self
    }

    /// Take everything emitted so far.
    pub fn take(&mut self) -> Vec<Out> {
        std::mem::take(&mut self.out)
    }

    /// The id of the only Synthesize among `outs`.
    pub fn request(outs: &[Out]) -> (RequestId, SynthesisRequest) {
        let reqs: Vec<_> = outs
            .iter()
            .filter_map(|o| match o {
                Out::Synthesize(id, r) => Some((*id, r.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(reqs.len(), 1, "exactly one Synthesize in {outs:?}");
        reqs[0].clone()
    }
}

pub fn json(v: &str) -> Out {
    Out::Json(serde_json::from_str(v).expect("test JSON"))
}

/// The JSON frames only.
pub fn frames(outs: &[Out]) -> Vec<Value> {
    outs.iter()
        .filter_map(|o| match o {
            Out::Json(v) => Some(v.clone()),
            _ => None,
        })
        .collect()
}
