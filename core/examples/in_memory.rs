//! A session driven in memory, with a clock advanced by hand: the pattern for testing code
//! that embeds the core (or a client's expectations of the protocol) without sockets, sleeps
//! or flakiness.
//!
//! ```sh
//! cargo run -p speechstream-core --example in_memory
//! ```
//!
//! The driver decides the order of every input, so even with an engine that delivers from
//! its own threads a test sees the same interleaving on every run: here an `input.cancel`
//! lands after exactly two chunks of audio. Copy `Driver` into your tests.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use speechstream_core::engine::{Engine, EngineEvent, EventSink, SynthesisRequest};
use speechstream_core::session::{ClientFrame, EngineCommand, Output, Session, SessionOptions};
use speechstream_core::synthetic::{SyntheticEngine, SyntheticOptions};

/// What the client would have received.
#[derive(Debug, PartialEq)]
enum Received {
    Json(Value),
    Audio(Vec<u8>),
    Close(u16),
}

/// One session, the synthetic engine, and a fake clock.
struct Driver {
    session: Session,
    engine: SyntheticEngine,
    events_tx: mpsc::Sender<EngineEvent>,
    events: mpsc::Receiver<EngineEvent>,
    now: Instant,
    received: Vec<Received>,
}

impl Driver {
    fn new() -> Driver {
        let engine = SyntheticEngine::new(SyntheticOptions::default());
        let now = Instant::now();
        let capabilities = Arc::new(engine.capabilities().clone());
        let session = Session::new(now, 1, capabilities, Arc::new(SessionOptions::default()));
        let (events_tx, events) = mpsc::channel();
        Driver { session, engine, events_tx, events, now, received: Vec::new() }
    }

    /// The client sends a JSON message.
    fn send(&mut self, message: Value) {
        self.session.handle_client(self.now, ClientFrame::Text(message.to_string()));
        self.drain();
    }

    /// Hand the session the engine's next `n` events (waiting for them if the engine is on
    /// another thread). Events of a request the session already ended are ignored, as a real
    /// driver ignores them.
    fn engine_events(&mut self, n: usize) {
        for _ in 0..n {
            let event = self.events.recv_timeout(Duration::from_secs(30)).expect("an engine event");
            let _ = self.session.handle_engine(self.now, event);
            self.drain();
        }
    }

    /// Until the session has no request in flight (it runs no timer while generating).
    fn finish_utterance(&mut self) {
        while self.session.poll_timeout().is_none() && !self.session.is_closed() {
            self.engine_events(1);
        }
    }

    /// Move the clock; the session's timer fires if its deadline has passed.
    fn advance(&mut self, by: Duration) {
        self.now += by;
        if self.session.poll_timeout().is_some_and(|deadline| deadline <= self.now) {
            self.session.handle_timeout(self.now);
            self.drain();
        }
    }

    fn drain(&mut self) {
        while let Some(output) = self.session.poll_output() {
            match output {
                Output::Text(text) => self.received.push(Received::Json(serde_json::from_str(&text).expect("JSON"))),
                Output::Binary(bytes) => self.received.push(Received::Audio(bytes)),
                Output::Close(code) => self.received.push(Received::Close(code)),
                Output::Engine(EngineCommand::Synthesize { id, request }) => {
                    self.engine.submit(id, request, Box::new(Events(self.events_tx.clone())))
                }
                Output::Engine(EngineCommand::Abort { id }) => self.engine.abort(id),
                // The request's end: this driver keeps no in-flight bookkeeping.
                Output::RequestEnded { .. } => {}
                Output::Encode { id, job } => {
                    let _ = self.session.handle_encoded(self.now, id, job.run());
                }
            }
        }
    }

    /// What the client received since the last call: JSON messages by type, audio by length.
    fn take(&mut self) -> (Vec<String>, Vec<u8>) {
        let (mut types, mut audio) = (Vec::new(), Vec::new());
        for received in self.received.drain(..) {
            match received {
                Received::Json(message) => types.push(message["type"].as_str().unwrap_or("?").to_owned()),
                Received::Audio(bytes) => audio.extend(bytes),
                Received::Close(code) => types.push(format!("close {code}")),
            }
        }
        (types, audio)
    }
}

struct Events(mpsc::Sender<EngineEvent>);

impl EventSink for Events {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(event).is_ok()
    }
}

fn config() -> Value {
    json!({"type": "session.config", "stream_audio": true, "response_format": "pcm"})
}

fn one_utterance() {
    let mut driver = Driver::new();
    driver.send(config());
    driver.send(json!({"type": "input.text", "text": "Hello "}));
    driver.send(json!({"type": "input.text", "text": "world."}));
    driver.send(json!({"type": "input.done"}));
    driver.finish_utterance();
    let done = driver.received.iter().find_map(|r| match r {
        Received::Json(m) if m["type"] == "audio.done" => Some(m["total_bytes"].clone()),
        _ => None,
    });
    let (types, audio) = driver.take();
    assert_eq!(types, ["audio.start", "audio.done", "session.done"]);
    assert_eq!(done, Some(json!(audio.len())));
    let request = SynthesisRequest::new("Hello world.").with_stream(true);
    assert_eq!(audio, driver.engine.render(&request).0, "the synthetic engine's audio");
}

fn cancel_after_two_chunks() {
    let mut driver = Driver::new();
    driver.send(config());
    driver.send(json!({"type": "input.text", "text": "Hello big world"}));
    driver.send(json!({"type": "input.done"}));
    driver.engine_events(2);
    driver.send(json!({"type": "input.cancel"}));
    let (types, audio) = driver.take();
    assert_eq!(types, ["audio.start", "audio.done", "session.done"]);
    assert_eq!(audio.len(), 2 * 80 * 24 * 2, "two 80 ms chunks, then the cancel");
    // The rest of the utterance's events still arrive; the session ignores them.
    while let Ok(event) = driver.events.try_recv() {
        assert!(driver.session.handle_engine(driver.now, event).is_err());
    }
    assert!(driver.session.poll_output().is_none());
}

fn timeouts_on_a_fake_clock() {
    let error = |message: &str| Received::Json(json!({"type": "error", "message": message}));
    let mut driver = Driver::new();
    driver.advance(Duration::from_secs(9));
    assert_eq!(driver.received, []);
    driver.advance(Duration::from_secs(1));
    assert_eq!(driver.received, [error("Timeout waiting for session.config"), Received::Close(1000)]);

    let mut driver = Driver::new();
    driver.send(config());
    driver.advance(Duration::from_secs(29));
    assert_eq!(driver.received, []);
    driver.advance(Duration::from_secs(1));
    assert_eq!(driver.received, [error("Idle timeout: no message received"), Received::Close(1000)]);
}

fn main() {
    for (name, scenario) in [
        ("one utterance", one_utterance as fn()),
        ("cancel after two chunks", cancel_after_two_chunks),
        ("timeouts on a fake clock", timeouts_on_a_fake_clock),
    ] {
        scenario();
        println!("ok: {name}");
    }
}
